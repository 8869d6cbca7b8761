"""Watching a run: validation, early stopping, live logs, MLflow, reachability, reports and status."""
