"""The local-directory backend (a plain directory, or an NFS mount shared by all executors).

Atomic writes: the data goes to ``<dir>/._tmp-<uuid>`` in the destination directory, is
flushed and fsynced, then ``os.replace`` moves it over the final name.  A writer killed at any
point leaves at most a hidden temporary file; readers see the old file or the new one, never
a mix.  Temporary files are hidden from :meth:`LocalBackend.list`.

Durability: a rename or a new name lives in its directory, which the file's own fsync does not
write.  So after every rename, exclusive create and directory creation the directory is fsynced
too (``os.open(dir, O_RDONLY)`` + ``os.fsync``): once a write returns, a power loss cannot take
back a step the run record calls done.  File systems that cannot fsync a directory (some FUSE
and NFS mounts answer EINVAL) are logged once and otherwise accepted: there the server decides.

Reads open regular files only: a directory, FIFO, device or socket where a file is expected (planted
by whoever can write the store) is refused unread with :class:`StoreEntryTypeError`.  The file is
opened without blocking and checked before anything is read, so a FIFO never makes a reader wait.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import stat
import time
import uuid
from typing import BinaryIO, Iterable, Iterator

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

__all__ = ["LocalBackend"]

logger = logging.getLogger(__name__)

# Errors an NFS mount or a busy disk can produce and later recover from.
_TRANSIENT_ERRNOS = {errno.ESTALE, errno.ETIMEDOUT, errno.EAGAIN, errno.EBUSY, errno.EINTR}
# No room for a write: a full disk, a file system quota reached.
_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
# What a file system that cannot fsync a directory answers.
_NO_DIRECTORY_FSYNC_ERRNOS = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF, errno.EISDIR}
_said_no_directory_fsync: set[str] = set()


def fsync_directory(folder: str) -> None:
    """Write ``folder``'s entries (names created, renamed or removed in it) to stable storage."""
    descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in _NO_DIRECTORY_FSYNC_ERRNOS:
            raise
        if folder not in _said_no_directory_fsync:
            _said_no_directory_fsync.add(folder)
            logger.info("the file system of %s cannot fsync a directory (%s); renames there are as durable as it "
                        "makes them", folder, error)
    finally:
        os.close(descriptor)


def makedirs_durably(folder: str) -> None:
    """``os.makedirs(folder, exist_ok=True)``, then fsync the parent of every directory it created."""
    missing = []
    path = folder
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        missing.append(path)
        path = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    for created in reversed(missing):
        fsync_directory(os.path.dirname(created))


@contextlib.contextmanager
def _translated(operation: str, location: str) -> Iterator[None]:
    """Map OS errors to the store hierarchy, naming what failed and where."""
    try:
        yield
    except FileNotFoundError as exc:
        raise StoreNotFoundError(f"{operation}: {location} does not exist") from exc
    except PermissionError as exc:
        raise StorePermissionError(f"{operation}: permission denied on {location}") from exc
    except (IsADirectoryError, NotADirectoryError) as exc:
        raise StoreEntryTypeError(f"{operation}: {location} is not what the store expects there ({exc})") from exc
    except OSError as exc:
        if exc.errno in _TRANSIENT_ERRNOS:
            raise TransientError(f"{operation} {location}: {exc}") from exc
        if exc.errno in _FULL_ERRNOS:
            raise StoreFullError(f"{operation}: the store is full at {location} ({exc.strerror}); make room "
                                 "there, then run the command again") from exc
        if exc.errno == errno.EROFS:
            raise StorePermissionError(f"{operation}: permission denied on {location}: its file system is "
                                       "mounted read-only") from exc
        raise StoreError(f"{operation} failed on {location}: {exc}") from exc


def _open_file(location: str) -> BinaryIO:
    """``open(location, "rb")`` of a regular file; anything else is refused before a byte is read.

    Opened non-blocking, so that a FIFO answers at once instead of waiting for a writer; a socket
    cannot be opened at all (ENXIO).  Blocking is restored for the regular file that is returned.
    """
    try:
        descriptor = os.open(location, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        if error.errno == errno.ENXIO:
            raise StoreEntryTypeError(f"{location} is a socket or a device, not a file; not read") from error
        raise
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
            raise StoreEntryTypeError(f"{location} is {kind}, not a file; not read")
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


class LocalBackend:
    """Operations on a directory tree rooted at ``root`` (an absolute local path)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def _abs(self, path: str) -> str:
        return os.path.join(self.root, *path.split("/")) if path else self.root

    def _write_atomic(self, path: str, chunks: Iterable[bytes]) -> None:
        parent, name = parent_and_name(path)
        if not name:
            raise StoreError("cannot write to the store root itself; give a file name")
        final = self._abs(path)
        with _translated("write", final):
            makedirs_durably(self._abs(parent))
            tmp = os.path.join(self._abs(parent), f"{TMP_PREFIX}{uuid.uuid4().hex}")
            try:
                with open(tmp, "xb") as handle:
                    for chunk in chunks:
                        handle.write(chunk)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, final)
                fsync_directory(self._abs(parent))
            except BaseException:
                # Never leave our own temporary file behind on an ordinary failure.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise

    def write_bytes(self, path: str, data: bytes) -> None:
        self._write_atomic(path, (data,))

    def write_stream(self, path: str, chunks: Iterable[bytes]) -> None:
        self._write_atomic(path, chunks)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        parent, name = parent_and_name(path)
        if not name:
            raise StoreError("cannot write to the store root itself; give a file name")
        final = self._abs(path)
        with _translated("create_exclusive", final):
            makedirs_durably(self._abs(parent))
            tmp = os.path.join(self._abs(parent), f"{TMP_PREFIX}{uuid.uuid4().hex}")
            try:
                with open(tmp, "xb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                try:
                    os.link(tmp, final)  # fails when the name exists: an atomic, exclusive publish
                except FileExistsError:
                    return False
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            fsync_directory(self._abs(parent))  # the new name (and the temporary's removal) on disk
            return True

    def read_bytes(self, path: str, max_bytes: int | None = None) -> bytes:
        location = self._abs(path)
        with _translated("read", location), _open_file(location) as handle:
            if max_bytes is None:
                return handle.read()
            data = handle.read(max_bytes + 1)  # one byte more than allowed means "too large"
        if len(data) > max_bytes:
            raise FileTooLargeError(f"{location} is larger than the {max_bytes} bytes allowed; not read")
        return data

    @contextlib.contextmanager
    def open_read(self, path: str) -> Iterator[BinaryIO]:
        location = self._abs(path)
        with _translated("open", location):
            handle = _open_file(location)
        with handle:
            yield handle

    def exists(self, path: str) -> bool:
        with _translated("exists", self._abs(path)):
            return os.path.lexists(self._abs(path))

    def size(self, path: str) -> int:
        with _translated("size", self._abs(path)):
            return os.stat(self._abs(path)).st_size

    def list(self, path: str) -> list[str]:
        location = self._abs(path)
        with _translated("list", location):
            try:
                names = os.listdir(location)
            except FileNotFoundError:
                return []
            except NotADirectoryError as exc:
                raise StoreEntryTypeError(f"list: {location} is a file, not a directory") from exc
        return sorted(name for name in names if not name.startswith(TMP_PREFIX))

    def remove_stale_temporaries(self, path: str, older_than_s: float) -> int:
        location = self._abs(path)
        removed = 0
        with _translated("remove_stale_temporaries", location):
            try:
                entries = list(os.scandir(location))
            except (FileNotFoundError, NotADirectoryError):  # a file holds no temporaries (as on HDFS)
                return 0
            now = time.time()
            for entry in entries:
                if entry.name.startswith(TMP_PREFIX) and now - entry.stat(follow_symlinks=False).st_mtime > older_than_s:
                    with contextlib.suppress(FileNotFoundError):  # another cleaner was faster
                        os.unlink(entry.path)
                        removed += 1
        return removed

    def delete(self, path: str, recursive: bool = False) -> bool:
        location = self._abs(path)
        with _translated("delete", location):
            if not os.path.lexists(location):
                return False
            if os.path.isdir(location) and not os.path.islink(location):
                if recursive:
                    shutil.rmtree(location)
                else:
                    try:
                        os.rmdir(location)
                    except OSError as exc:
                        if exc.errno == errno.ENOTEMPTY:
                            raise StoreError(
                                f"delete: directory {location} is not empty; pass recursive=True"
                            ) from exc
                        raise
            else:
                os.unlink(location)
        return True

    def makedirs(self, path: str) -> None:
        location = self._abs(path)
        with _translated("makedirs", location):
            makedirs_durably(location)

    def rename(self, src: str, dst: str) -> None:
        source, target = self._abs(src), self._abs(dst)
        with _translated("rename", f"{source} -> {target}"):
            if not os.path.lexists(source):
                raise FileNotFoundError(errno.ENOENT, "no such file", source)
            makedirs_durably(os.path.dirname(target))
            os.replace(source, target)
            fsync_directory(os.path.dirname(target))
            if os.path.dirname(source) != os.path.dirname(target):
                fsync_directory(os.path.dirname(source))
