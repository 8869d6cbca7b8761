"""Files planted in a local store and grown far past what they should hold (sparse: no disk used), and a spy
on the local store's reads that fails a test the moment one of them is read without a bound, before allocating."""

from __future__ import annotations

import os

import pytest

import storage
from storage._local import LocalBackend

#: The size planted files are grown to: 3 GiB, sparse.
PLANTED_BYTES = 3 << 30


def grow(store: storage.Store, path: str, size: int = PLANTED_BYTES) -> str:
    """Grow the file at ``path`` of a local ``store`` to ``size`` bytes in place (sparse); its absolute path."""
    location = os.path.join(store.root, *path.split("/"))
    os.truncate(location, size)
    return location


def spy_on_planted_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int | None]]:
    """Every read of a planted file from now on, as (path, max_bytes); one unbounded or past the planted size
    raises AssertionError instead of reading."""
    reads: list[tuple[str, int | None]] = []
    read_bytes = LocalBackend.read_bytes

    def spy(self: LocalBackend, path: str, max_bytes: int | None = None) -> bytes:
        location = self._abs(path)
        if os.path.exists(location) and os.path.getsize(location) >= PLANTED_BYTES:
            reads.append((path, max_bytes))
            if max_bytes is None or max_bytes >= PLANTED_BYTES:
                raise AssertionError(f"{path} ({os.path.getsize(location)} bytes) read whole, max_bytes={max_bytes}")
        return read_bytes(self, path, max_bytes)

    monkeypatch.setattr(LocalBackend, "read_bytes", spy)
    return reads
