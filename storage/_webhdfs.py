"""The HDFS backend: WebHDFS through the ``hdfs`` package (``hdfs.InsecureClient``).

Atomic writes go to ``<dir>/._tmp-<uuid>`` (CREATE, streamed to the datanode), then RENAME
over the final name with ``renameoptions=OVERWRITE``: Hadoop's ``rename2``, which replaces an
existing file atomically in the namenode, so readers see the old file or the new one and never
a gap.  Against a server that ignores the option (some WebHDFS gateways: it answers
``{"boolean": false}`` when the destination exists) the backend falls back to delete-then-rename,
which leaves a moment in which the file is missing (and, should the writer die there, no file);
it says so once per process in the log.  sparkdbn never replaces what a run's correctness rests
on (run records, leases, phase results and models are created under new names, see
``docs/fenced-writes.md``); what it does replace (peer entries, a dataset's ``_meta.json``) is
read so that a missing file costs nothing.  A writer killed mid-upload leaves only a hidden
temporary file (HDFS releases its lease later); temporary files never appear in listings.

Failures are translated: FileNotFoundException -> :class:`StoreNotFoundError`,
AccessControlException -> :class:`StorePermissionError`, a quota reached (``DSQuotaExceededException``,
``NSQuotaExceededException``) -> :class:`StoreFullError`; connection errors, timeouts, HTTP 5xx,
responses cut short, and ``RetriableException``/``StandbyException`` from every namenode of
an HA list -> :class:`~storage._retry.TransientError`, which the store retries.
"""

from __future__ import annotations

import contextlib
import getpass
import http.client
import json
import logging
import os
import posixpath
import time
import uuid
from typing import Any, BinaryIO, Iterable, Iterator

import requests
import urllib3
from hdfs import HdfsError, InsecureClient

from ._errors import (
    FileTooLargeError,
    StoreEntryTypeError,
    StoreError,
    StoreFullError,
    StoreNotFoundError,
    StorePermissionError,
)
from ._paths import TMP_PREFIX, parent_and_name
from ._retry import TransientError

__all__ = ["WebHDFSBackend"]

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0
_RETRIABLE_EXCEPTIONS = {"RetriableException", "StandbyException", "SafeModeException"}
_PERMANENT_EXCEPTIONS = {
    "FileNotFoundException",
    "AccessControlException",
    "SecurityException",
    "FileAlreadyExistsException",
    "IllegalArgumentException",
    "UnsupportedOperationException",
    "PathIsNotEmptyDirectoryException",
    "ParentNotDirectoryException",
}
#: A namespace or disk-space quota of a folder reached (Hadoop's QuotaExceededException and its subclasses).
_QUOTA_EXCEPTIONS = {"QuotaExceededException", "NSQuotaExceededException", "DSQuotaExceededException"}
_PERMANENT_EXCEPTIONS |= _QUOTA_EXCEPTIONS


class _ServerUnavailable(requests.exceptions.ConnectionError):
    """An HTTP 5xx answer.  A ConnectionError subclass so that the ``hdfs`` client also moves on
    to the next namenode of an HA list, as it does for refused connections."""


class _Client(InsecureClient):
    """InsecureClient that turns 5xx answers (overloaded or restarting namenode) into errors."""

    def _request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        response = super()._request(method, url, **kwargs)
        if response.status_code >= 500:
            exception = None
            with contextlib.suppress(ValueError, KeyError, TypeError):
                exception = response.json()["RemoteException"]["exception"]
            if exception not in _PERMANENT_EXCEPTIONS:
                text = response.text[:200].strip()
                response.close()
                raise _ServerUnavailable(f"HTTP {response.status_code} from {url.split('?')[0]}: {text}")
        return response


@contextlib.contextmanager
def _translated(operation: str, location: str) -> Iterator[None]:
    """Map client errors to the store hierarchy (or to TransientError for retry)."""
    try:
        yield
    except HdfsError as exc:
        name = getattr(exc, "exception", None)
        message = str(exc)
        if name == "FileNotFoundException":
            raise StoreNotFoundError(f"{operation}: {location} does not exist ({message})") from exc
        if name in ("AccessControlException", "SecurityException") or message.startswith("Authentication failure"):
            raise StorePermissionError(f"{operation}: permission denied on {location}: {message}") from exc
        if name in _QUOTA_EXCEPTIONS:
            raise StoreFullError(f"{operation}: the store is full at {location}: {name}: {message}; raise the "
                                 "folder's quota or make room, then run the command again") from exc
        if name in _RETRIABLE_EXCEPTIONS:
            raise TransientError(f"{operation} {location}: {name}: {message}") from exc
        raise StoreError(f"{operation} failed on {location}: {name or 'error'}: {message}") from exc
    except (
        requests.exceptions.ConnectionError,
        requests.exceptions.Timeout,
        requests.exceptions.ChunkedEncodingError,
        urllib3.exceptions.HTTPError,
        http.client.HTTPException,
        ConnectionError,
    ) as exc:
        raise TransientError(f"{operation} {location}: {type(exc).__name__}: {exc}") from exc


class WebHDFSBackend:
    """Operations on an HDFS directory ``root`` through one or more WebHDFS namenodes.

    Parameters
    ----------
    namenodes : sequence of str
        Base URLs such as ``"http://nn1:9870"``; several for HA.
    root : str
        Absolute HDFS path of the store root.
    user : str, optional
        ``user.name`` for simple authentication (default ``$HADOOP_USER_NAME`` or the login).
    """

    def __init__(self, namenodes: Iterable[str], root: str, user: str | None = None) -> None:
        self.root = root
        self.namenodes = ";".join(namenodes)
        self.user = user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
        self.client = _Client(self.namenodes, user=self.user, timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S))
        self.replaces_atomically: bool | None = None  # None: not known until a rename over an existing file

    @property
    def answer_timeout_s(self) -> float:
        """Seconds a request waits for an answer (``READ_TIMEOUT_S``; lowered by :meth:`storage.Store.end_fast`)."""
        return self.client._timeout[1]

    @answer_timeout_s.setter
    def answer_timeout_s(self, seconds: float) -> None:
        self.client._timeout = (CONNECT_TIMEOUT_S, float(seconds))  # hdfs.Client passes it to every request

    def _abs(self, path: str) -> str:
        return posixpath.join(self.root, path) if path else self.root

    def _where(self, path: str) -> str:
        return f"hdfs {self._abs(path)} on {self.namenodes}"

    # -- writes --------------------------------------------------------------------------
    def _write_atomic(self, path: str, data: Any) -> None:
        parent, name = parent_and_name(path)
        if not name:
            raise StoreError("cannot write to the store root itself; give a file name")
        tmp = posixpath.join(self._abs(parent), f"{TMP_PREFIX}{uuid.uuid4().hex}")
        try:
            with _translated("write", self._where(path)):
                self.client.write(tmp, data=data, overwrite=False)  # CREATE also makes parents
                self._rename_over(tmp, self._abs(path))
        except BaseException:
            self._discard(tmp)
            raise

    def _discard(self, tmp: str) -> None:
        """Best-effort removal of our temporary file after a failed write."""
        try:
            self.client.delete(tmp)
        except (HdfsError, requests.exceptions.RequestException) as exc:
            # The store may be down (that is often why the write failed); the hidden
            # temporary file is harmless and invisible to listings.
            logger.debug("could not remove temporary file %s: %s", tmp, exc)

    def write_bytes(self, path: str, data: bytes) -> None:
        self._write_atomic(path, data)

    def write_stream(self, path: str, chunks: Iterable[bytes]) -> None:
        # A generator makes requests send a chunked body: nothing is held in memory.
        self._write_atomic(path, (chunk for chunk in chunks))

    def create_exclusive(self, path: str, data: bytes) -> bool:
        parent, name = parent_and_name(path)
        if not name:
            raise StoreError("cannot write to the store root itself; give a file name")
        tmp = posixpath.join(self._abs(parent), f"{TMP_PREFIX}{uuid.uuid4().hex}")
        try:
            with _translated("create_exclusive", self._where(path)):
                self.client.write(tmp, data=data, overwrite=False)
                # Plain RENAME (not rename2) refuses an existing destination: the publish is exclusive.
                response = self.client._rename(tmp, destination=self._abs(path))
                created = bool(json.loads(response.content.strip() or b"{}").get("boolean", False))
        except BaseException:
            self._discard(tmp)
            raise
        if not created:
            self._discard(tmp)
        return created

    def _rename_over(self, src: str, dst: str) -> None:
        """RENAME ``src`` to ``dst`` replacing ``dst`` (absolute paths; errors untranslated)."""
        response = self.client._rename(src, destination=dst, renameoptions="OVERWRITE")
        body = response.content.strip()
        if not body:
            self.replaces_atomically = True
            return  # rename2 answers an empty 200 on success
        if json.loads(body).get("boolean", False):
            return
        # The server ignored renameoptions and refused because dst exists: delete, then rename.
        if self.replaces_atomically is not False:
            self.replaces_atomically = False
            logger.warning("the WebHDFS server(s) %s ignore renameoptions=OVERWRITE (a gateway such as HttpFS or "
                           "Knox?): replacing a file there deletes it, then renames, leaving a moment without it. "
                           "Run records, leases, phase results and models are never replaced; peer entries and "
                           "dataset metadata are read so that the moment costs nothing (docs/fenced-writes.md)",
                           self.namenodes)
        logger.debug("namenode ignored renameoptions=OVERWRITE; deleting %s before rename", dst)
        self.client.delete(dst)
        self.client.rename(src, dst)

    # -- reads ---------------------------------------------------------------------------
    def read_bytes(self, path: str, max_bytes: int | None = None) -> bytes:
        with _translated("read", self._where(path)):
            # With a bound, ask for one byte more than allowed: getting it means "too large",
            # and no more than that is ever transferred.
            length = None if max_bytes is None else max_bytes + 1
            with self.client.read(self._abs(path), length=length) as reader:
                data = reader.read()
                expected = reader.headers.get("content-length")
            if expected is not None and len(data) != int(expected):
                raise http.client.IncompleteRead(data, int(expected) - len(data))
        if max_bytes is not None and len(data) > max_bytes:
            raise FileTooLargeError(f"{self._where(path)} is larger than the {max_bytes} bytes allowed; not read")
        return data

    @contextlib.contextmanager
    def open_read(self, path: str) -> Iterator[BinaryIO]:
        with _translated("open", self._where(path)):
            context = self.client.read(self._abs(path))
            reader = context.__enter__()
        try:
            yield reader
        finally:
            context.__exit__(None, None, None)

    def _status(self, path: str) -> dict | None:
        try:
            return self.client.status(self._abs(path))
        except HdfsError as exc:
            if getattr(exc, "exception", None) == "FileNotFoundException":
                return None
            raise

    def exists(self, path: str) -> bool:
        with _translated("exists", self._where(path)):
            return self._status(path) is not None

    def size(self, path: str) -> int:
        with _translated("size", self._where(path)):
            status = self._status(path)
        if status is None:
            raise StoreNotFoundError(f"size: {self._where(path)} does not exist")
        return int(status["length"])

    def list(self, path: str) -> list[str]:
        with _translated("list", self._where(path)):
            try:
                # The raw LISTSTATUS: client.list() adds a GETFILESTATUS when there is one child.
                statuses = self.client._list_status(self._abs(path)).json()["FileStatuses"]["FileStatus"]
            except HdfsError as exc:
                if getattr(exc, "exception", None) == "FileNotFoundException":
                    return []
                raise
        names = [status["pathSuffix"] for status in statuses]
        if "" in names:
            raise StoreEntryTypeError(f"list: {self._where(path)} is a file, not a directory")
        return sorted(name for name in names if not name.startswith(TMP_PREFIX))

    def remove_stale_temporaries(self, path: str, older_than_s: float) -> int:
        with _translated("remove_stale_temporaries", self._where(path)):
            try:
                statuses = self.client._list_status(self._abs(path)).json()["FileStatuses"]["FileStatus"]
            except HdfsError as exc:
                if getattr(exc, "exception", None) == "FileNotFoundException":
                    return 0
                raise
            now_ms = time.time() * 1000
            removed = 0
            for status in statuses:
                name = status["pathSuffix"]
                if name.startswith(TMP_PREFIX) and now_ms - status["modificationTime"] > older_than_s * 1000:
                    removed += bool(self.client.delete(posixpath.join(self._abs(path), name)))
            return removed

    # -- namespace -----------------------------------------------------------------------
    def delete(self, path: str, recursive: bool = False) -> bool:
        with _translated("delete", self._where(path)):
            return bool(self.client.delete(self._abs(path), recursive=recursive))

    def makedirs(self, path: str) -> None:
        with _translated("makedirs", self._where(path)):
            self.client.makedirs(self._abs(path))

    def rename(self, src: str, dst: str) -> None:
        with _translated("rename", f"{self._where(src)} -> {self._abs(dst)}"):
            self.client.makedirs(posixpath.dirname(self._abs(dst)))
            self._rename_over(self._abs(src), self._abs(dst))
