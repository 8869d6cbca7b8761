"""A run in the store: its record, its lease, its key, and reading it back."""
