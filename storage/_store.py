"""URL -> backend, and the :class:`Store` facade every other package talks to.

``open_store`` accepts a plain path, ``file:///abs/path`` (or ``file:/abs/path``), ``hdfs://host:port/path`` or
``webhdfs://host:port/path`` (both spoken over WebHDFS; ``swebhdfs://`` uses HTTPS), with
several namenodes for HA separated by ``;`` (``hdfs://nn1:9870;nn2:9870/path``).  The default
WebHDFS port is 9870, the namenode HTTP port of Hadoop 3.

A :class:`Store` holds only its URL and options.  Its backend (and for HDFS the
``hdfs.InsecureClient`` with its HTTP session) is built on first use in each process, so a
store pickles to a few hundred bytes and can ride in Spark closures.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import random
import threading
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterable, Iterator, TypeVar
from urllib.parse import unquote, urlsplit

from ._errors import FileTooLargeError, StoreError, StorePathError, StoreUnavailableError
from ._paths import join, normalize
from ._retry import TransientError, call_with_retry

__all__ = ["UNRECORDED_FILE_MAX_BYTES", "Store", "StoreURL", "open_store", "parse_store_url"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_WEBHDFS_PORT = 9870
DEFAULT_SWEBHDFS_PORT = 9871
_HDFS_SCHEMES = {"hdfs": "http", "webhdfs": "http", "swebhdfs": "https"}

#: Largest file read whole where nothing recorded its size (a model named by a record written before records kept
#: its size, a dataset shard or training partition): generous, and checked by the file's size before reading.
UNRECORDED_FILE_MAX_BYTES = 4 << 30
#: How long a WebHDFS request waits for an answer once :meth:`Store.end_fast` was called (otherwise 60 s).
END_FAST_ANSWER_S = 5.0


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL.

    Attributes
    ----------
    kind : str
        ``"local"`` or ``"webhdfs"``.
    root : str
        Absolute root path (local file system path, or HDFS path).
    namenodes : tuple of str
        WebHDFS base URLs such as ``"http://nn1:9870"`` (empty for local stores).
    scheme : str
        Scheme as written by the user (``file``, ``hdfs``, ``webhdfs``, ``swebhdfs``).
    """

    kind: str
    root: str
    namenodes: tuple[str, ...] = ()
    scheme: str = "file"

    @property
    def url(self) -> str:
        """Canonical URL string of this store."""
        if self.kind == "local":
            return "file://" + self.root
        authority = ";".join(base.split("://", 1)[1] for base in self.namenodes)
        return f"{self.scheme}://{authority}{self.root}"

    def child(self, relative: str) -> "StoreURL":
        """The URL of a sub-directory (``relative`` already normalized)."""
        if not relative:
            return self
        if self.kind == "local":
            return StoreURL("local", os.path.join(self.root, *relative.split("/")), (), self.scheme)
        return StoreURL(self.kind, posixpath.join(self.root, relative), self.namenodes, self.scheme)


def _scheme(url: str) -> str:
    """The scheme of ``url`` in lower case, "" for a plain path ("a:b" is a file name, "file:/a" a URL)."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    return scheme if "://" in url or scheme in ("file", *_HDFS_SCHEMES) else ""


def local_path(url: str) -> str | None:
    """The local path a plain path (as given) or a ``file:`` URL names; None for an HDFS URL.

    Parameters
    ----------
    url : str
        A path, ``file:///abs/path``, ``file:/abs/path`` or a store URL (``hdfs://host:port/path``).
    """
    scheme = _scheme(url)
    if scheme == "file":
        return parse_store_url(url).root
    return None if scheme else url


def parse_store_url(url: str) -> StoreURL:
    """Parse a store URL or plain path; see the module docstring for the accepted forms.

    Raises
    ------
    StorePathError
        For an unknown scheme, a ``file://`` URL with a remote host, or a malformed port.
    """
    if not isinstance(url, (str, os.PathLike)):
        raise StorePathError(f"store URL must be a str or path, got {type(url).__name__}")
    url = os.fspath(url)
    if not url:
        raise StorePathError("empty store URL; give a directory path, file:///path or hdfs://host:port/path")
    scheme = _scheme(url)
    if not scheme:
        return StoreURL("local", os.path.abspath(os.path.expanduser(url)))
    if scheme == "file":  # file:///abs/path, file://localhost/abs/path, or file:/abs/path (as Hadoop writes it)
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise StorePathError(f"{url!r}: file URLs must be local (file:///abs/path), not on host {parts.netloc!r}")
        if not parts.path.startswith("/") and parts.path:
            raise StorePathError(f"{url!r}: a file URL takes an absolute path (file:///abs/path); a relative "
                                 "path is given without file:")
        return StoreURL("local", os.path.abspath(unquote(parts.path) or "/"))
    if "://" not in url:
        raise StorePathError(f"{url!r} names no namenode; write {scheme}://host:port/path")
    rest = url.split("://", 1)[1]
    if scheme not in _HDFS_SCHEMES:
        raise StorePathError(
            f"unsupported store URL scheme {scheme!r} in {url!r}; use a path, file://, hdfs://, webhdfs:// or swebhdfs://"
        )
    authority, slash, path = rest.partition("/")
    if not authority:
        raise StorePathError(f"{url!r} names no namenode; write {scheme}://host:port/path")
    http = _HDFS_SCHEMES[scheme]
    default_port = DEFAULT_SWEBHDFS_PORT if http == "https" else DEFAULT_WEBHDFS_PORT
    namenodes = []
    for host in filter(None, authority.split(";")):
        name, colon, port = host.rpartition(":") if ":" in host else (host, "", "")
        if colon and not port.isdigit():
            raise StorePathError(f"{url!r}: bad port {port!r} for namenode {name!r}")
        namenodes.append(f"{http}://{name}:{port or default_port}")
    root = posixpath.normpath("/" + unquote(path)) if slash else "/"
    root = "/" + root.lstrip("/")  # normpath keeps a leading '//'; HDFS paths have one slash
    return StoreURL("webhdfs", root, tuple(namenodes), scheme)


class _OnceIterable:
    """Wraps a one-shot iterable and remembers whether anything was taken from it."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = chunks
        self.started = False

    def __iter__(self) -> Iterator[bytes]:
        self.started = True
        for chunk in self._chunks:
            yield bytes(chunk)


class Store:
    """A directory in a shared store (local directory or HDFS), addressed by relative paths.

    Parameters
    ----------
    url : str
        Store root: a path, ``file:///...``, ``hdfs://host:port/path`` or ``webhdfs://...``.
    user : str, optional
        HDFS user name (``user.name``); defaults to the ``HADOOP_USER_NAME`` environment
        variable, then the login name.  Ignored by local stores.
    retry_timeout_s : float
        How long transient failures are retried before :class:`StoreUnavailableError`.  An attribute: set
        lower (0, one attempt), it holds for the calls under way too, from their next failure on.
        :meth:`end_fast` sets it to 0 and shortens the wait for a WebHDFS answer as well.

    Notes
    -----
    All paths are relative and '/'-separated; ``..`` and absolute paths raise
    :class:`StorePathError`.  Names starting with ``._tmp-`` are temporary files of
    in-flight atomic writes and never appear in :meth:`list`.
    """

    def __init__(self, url: str, *, user: str | None = None, retry_timeout_s: float = 30.0) -> None:
        self._parsed = url if isinstance(url, StoreURL) else parse_store_url(url)
        self.url: str = self._parsed.url
        self.user = user
        self.retry_timeout_s = float(retry_timeout_s)
        self.ending_fast = False  # see end_fast
        self._answer_timeout_s = END_FAST_ANSWER_S
        self._backend: Any = None
        self._lock = threading.Lock()
        self._rng = random.Random()

    # -- pickling: URL and options only; clients are rebuilt lazily in the new process -------
    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "user": self.user, "retry_timeout_s": self.retry_timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], user=state["user"], retry_timeout_s=state["retry_timeout_s"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Store) and (self.url, self.user) == (other.url, other.user)

    def __hash__(self) -> int:
        return hash((self.url, self.user))

    @property
    def is_local(self) -> bool:
        """True for a local-directory store."""
        return self._parsed.kind == "local"

    @property
    def root(self) -> str:
        """Absolute root path of this store in its file system."""
        return self._parsed.root

    @property
    def backend(self) -> Any:
        """The backend of this process, built on first use."""
        with self._lock:
            if self._backend is None:
                if self._parsed.kind == "local":
                    from ._local import LocalBackend

                    self._backend = LocalBackend(self._parsed.root)
                else:
                    from ._webhdfs import WebHDFSBackend

                    self._backend = WebHDFSBackend(self._parsed.namenodes, self._parsed.root, user=self.user)
                if self.ending_fast:
                    self._end_fast_backend()
            return self._backend

    def end_fast(self, answer_timeout_s: float = END_FAST_ANSWER_S) -> None:
        """Try each call from now on once, and wait for a WebHDFS answer ``answer_timeout_s`` at most (calls already
        sending keep their wait): for a process's last, optional writes after Ctrl-C or an outage, each of which
        would otherwise wait out the store's retries and, on a cut link, the 60 s answer timeout.  Sets
        :attr:`ending_fast`.

        Parameters
        ----------
        answer_timeout_s : float
            Seconds a WebHDFS request waits for the namenode's or datanode's answer (local stores: no effect).
        """
        self.retry_timeout_s = 0.0
        self.ending_fast = True
        self._answer_timeout_s = float(answer_timeout_s)
        if self._backend is not None:
            self._end_fast_backend()

    def _end_fast_backend(self) -> None:
        if self._parsed.kind != "local":
            self._backend.answer_timeout_s = self._answer_timeout_s

    def _call(self, operation: str, fn: Callable[[Any], T]) -> T:
        return call_with_retry(
            lambda: fn(self.backend),
            operation=operation,
            url=self.url,
            retry_timeout_s=lambda: self.retry_timeout_s,  # lowered mid-call: the retries end at its next failure
            rng=self._rng,
        )

    # -- the operations ------------------------------------------------------------------
    def write_bytes(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` atomically (temporary name, then rename over the final name)."""
        p = normalize(path)
        data = bytes(data)
        self._call(f"write_bytes {p!r}", lambda b: b.write_bytes(p, data))

    def write_stream(self, path: str, chunks: Iterable[bytes]) -> None:
        """Write the chunks to ``path`` atomically without holding the whole file in memory.

        A list or tuple of chunks is retried like :meth:`write_bytes`; a one-shot iterator
        (generator) can only be retried while none of it has been consumed.
        """
        p = normalize(path)
        if isinstance(chunks, (bytes, bytearray, memoryview)):
            return self.write_bytes(p, bytes(chunks))
        if isinstance(chunks, (list, tuple)):
            return self._call(f"write_stream {p!r}", lambda b: b.write_stream(p, iter(chunks)))
        source = _OnceIterable(chunks)

        def attempt(backend: Any) -> None:
            try:
                backend.write_stream(p, source)
            except TransientError as exc:
                if source.started:
                    # A generator cannot be replayed: give up now instead of retrying.
                    raise StoreUnavailableError(
                        f"store {self.url}: write_stream {p!r} broke mid-stream ({exc.__cause__ or exc}); "
                        f"nothing was written under {p!r}, retry the whole write"
                    ) from (exc.__cause__ or exc)
                raise

        self._call(f"write_stream {p!r}", attempt)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Write ``data`` at ``path`` only if nothing is there; True when this call created it.

        The file appears whole or not at all.  A retried call whose first attempt succeeded
        unseen answers False: callers that must know tell their own content apart (a token).
        """
        p = normalize(path)
        data = bytes(data)
        return self._call(f"create_exclusive {p!r}", lambda b: b.create_exclusive(p, data))

    def read_bytes(self, path: str, *, max_bytes: int | None = None, stat_first: bool = False) -> bytes:
        """The whole content of the file at ``path``.

        Parameters
        ----------
        path : str
            The file, relative to the store root.
        max_bytes : int, optional
            Refuse a file larger than this (:class:`FileTooLargeError`) after reading at most
            ``max_bytes + 1`` bytes of it: a bound on what a hostile file can cost the reader.
        stat_first : bool
            With ``max_bytes``: ask the file's size first (one more call) and refuse a larger file
            without reading any of it, naming its size.  For bounds too large to spend on a refusal.
        """
        p = normalize(path)
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0):
            raise ValueError(f"max_bytes must be a non-negative int or None, got {max_bytes!r}")
        if stat_first and max_bytes is not None:
            size = self.size(p)
            if size > max_bytes:
                raise FileTooLargeError(self._too_large(p, size, max_bytes))
        try:
            return self._call(f"read_bytes {p!r}", lambda b: b.read_bytes(p, max_bytes))
        except FileTooLargeError as error:  # say how large: the refusal is rare, the size one cheap call
            try:
                size = self.size(p)
            except StoreError:
                raise error from None
            raise FileTooLargeError(self._too_large(p, size, max_bytes)) from error

    def _too_large(self, path: str, size: int, max_bytes: int | None) -> str:
        return f"{self.url}/{path} is {size} bytes, larger than the {max_bytes} bytes allowed; not read"

    @contextlib.contextmanager
    def open_read(self, path: str) -> Iterator[BinaryIO]:
        """A streaming binary reader; opening is retried, reading is not."""
        p = normalize(path)
        with contextlib.ExitStack() as stack:
            handle = self._call(f"open_read {p!r}", lambda b: stack.enter_context(b.open_read(p)))
            yield handle

    def exists(self, path: str) -> bool:
        """Whether a file or directory exists at ``path``."""
        p = normalize(path)
        return self._call(f"exists {p!r}", lambda b: b.exists(p))

    def size(self, path: str) -> int:
        """Size of the file at ``path`` in bytes."""
        p = normalize(path)
        return self._call(f"size {p!r}", lambda b: b.size(p))

    def list(self, path: str = "") -> list[str]:
        """Sorted names of the children of directory ``path``; ``[]`` when it does not exist."""
        p = normalize(path)
        return self._call(f"list {p!r}", lambda b: b.list(p))

    def delete(self, path: str, recursive: bool = False) -> bool:
        """Delete a file or directory; False when nothing was there."""
        p = normalize(path)
        if not p and not recursive:
            raise StorePathError("refusing to delete the store root without recursive=True")
        return self._call(f"delete {p!r}", lambda b: b.delete(p, recursive))

    def makedirs(self, path: str) -> None:
        """Create directory ``path`` and its parents (no error when it exists)."""
        p = normalize(path)
        self._call(f"makedirs {p!r}", lambda b: b.makedirs(p))

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst`` atomically, replacing a file at ``dst``."""
        s, d = normalize(src), normalize(dst)
        if not s or not d:
            raise StorePathError("rename: neither source nor destination may be the store root")
        self._call(f"rename {s!r} -> {d!r}", lambda b: b.rename(s, d))

    def remove_stale_temporaries(self, path: str = "", older_than_s: float = 3600.0) -> int:
        """Delete temporary files in directory ``path`` left by writers that died mid-write.

        Only temporaries not modified for ``older_than_s`` are removed, so writes in flight
        are left alone.  Returns how many were removed.
        """
        p = normalize(path)
        return self._call(f"remove_stale_temporaries {p!r}", lambda b: b.remove_stale_temporaries(p, older_than_s))

    def child(self, path: str) -> "Store":
        """A store rooted at the sub-directory ``path`` (same options)."""
        return Store(self._parsed.child(normalize(path)), user=self.user, retry_timeout_s=self.retry_timeout_s)

    def join(self, *paths: str) -> str:
        """Join relative paths (validated, '/'-separated)."""
        return join(*paths)


def open_store(url: "str | Store", *, user: str | None = None, retry_timeout_s: float = 30.0) -> Store:
    """Open the store at ``url`` (see :class:`Store`); a :class:`Store` is returned unchanged."""
    if isinstance(url, Store):
        return url
    return Store(url, user=user, retry_timeout_s=retry_timeout_s)
