"""node package (placeholder until its issue lands)."""

import logging

__all__: list[str] = []

logging.getLogger(__name__).addHandler(logging.NullHandler())
