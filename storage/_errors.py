"""The storage exception hierarchy: one base class, a subclass per thing a caller can act on."""

from __future__ import annotations

from typing import Any, Sequence

__all__ = [
    "AuthenticationError",
    "ChecksumError",
    "FileTooLargeError",
    "NoUsableSnapshotError",
    "DatasetError",
    "DestinationNotEmptyError",
    "SnapshotValueError",
    "StoreEntryTypeError",
    "StoreError",
    "StoreNotFoundError",
    "StorePathError",
    "StorePermissionError",
    "StoreFullError",
    "StoreUnavailableError",
]


class StoreError(Exception):
    """Base class of every error raised by :mod:`storage`."""


class StorePathError(StoreError, ValueError):
    """A path that is not a clean relative path inside the store (``..``, absolute, empty parts)."""


class StoreNotFoundError(StoreError, FileNotFoundError):
    """The file or directory does not exist in the store."""


class StoreEntryTypeError(StoreError):
    """A path holds another kind of entry than the operation needs: a directory, FIFO, device or socket
    where a file is read, a file where a directory is listed.  Nothing is read from it, and no reader
    waits on it (a FIFO would block one until someone writes to it)."""


class StorePermissionError(StoreError, PermissionError):
    """The store refused the operation (HDFS AccessControlException, OS permission denied)."""


class StoreFullError(StoreError):
    """The store has no room for a write: its disk is full (ENOSPC) or a quota is reached (a file system's
    EDQUOT, an HDFS name or space quota).  Every attempt meets it again until someone makes room."""


class StoreUnavailableError(StoreError):
    """The store stayed unreachable for longer than ``retry_timeout_s``; names the URL and the operation."""


class ChecksumError(StoreError):
    """File contents do not match their sha256 (corrupted or truncated); never returned as valid."""


class AuthenticationError(StoreError):
    """A file does not verify under the run's key: unsigned, signed with another key, or changed
    by someone without the key.  Never returned as valid."""


class FileTooLargeError(StoreError):
    """A file is larger than the reader's bound (derived from what it expects); it was not read whole."""


class NoUsableSnapshotError(StoreNotFoundError):
    """No node has an authenticated, intact snapshot of the phase (or of the nodes asked for)."""


class SnapshotValueError(StoreError, ValueError):
    """Parameters that must not be published: NaN/Inf values, non-numeric arrays, bad names."""


class DatasetError(StoreError, ValueError):
    """Dataset input that cannot be staged (ragged rows, NaN/Inf, missing label column, empty input)."""


class DestinationNotEmptyError(DatasetError):
    """A staging refused because its folder already holds entries; nothing was written.

    Its message says how to replace a dataset staged there before: ``overwrite=True (--overwrite)``;
    :meth:`message` says it otherwise (the command line names only its flag).

    Parameters
    ----------
    url : str
        The dataset folder.
    entries : sequence of str
        What it holds, sorted: the first is named.
    """

    def __init__(self, url: str, entries: Sequence[str]) -> None:
        self.url, self.entries = url, list(entries)
        super().__init__(self.message("overwrite=True (--overwrite)"))

    def __reduce__(self) -> tuple[Any, ...]:  # pickled by its fields, not by its message
        return type(self), (self.url, self.entries)

    def message(self, overwrite: str) -> str:
        """The refusal, naming ``overwrite`` as the way to replace an earlier staging.

        Parameters
        ----------
        overwrite : str
            How the caller asks for a dataset to be replaced: ``"--overwrite"``, ``"overwrite=True"``.
        """
        count = len(self.entries)
        return (f"{self.url} already holds {count} entr{'y' if count == 1 else 'ies'} (e.g. {self.entries[0]!r}); "
                f"nothing was written. Stage into a new folder, or pass {overwrite} to replace a dataset staged there "
                "before")
