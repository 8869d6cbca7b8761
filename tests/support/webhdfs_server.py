"""A WebHDFS-protocol server backed by a local directory, for tests and local demos.

Real clusters use their namenode's WebHDFS endpoint (``hdfs://namenode:9870/...``); this server
exists because no Hadoop can be installed here.  It speaks what the ``hdfs`` package and
Hadoop's own WebHDFS clients expect: ``/webhdfs/v1<path>?op=...`` on the "namenode", a 307
redirect to a "datanode" endpoint (same port, prefix ``/datanode/v1``) for CREATE, APPEND and
OPEN, chunked uploads, JSON bodies (``FileStatus``, ``FileStatuses``, ``ContentSummary``,
``FileChecksum``, ``{"boolean": ...}``) and ``RemoteException`` errors with Hadoop's status
codes.  RENAME is atomic (``os.rename``/``os.replace``), with Hadoop's two flavours: plain
(``{"boolean": false}`` when the destination exists) and ``renameoptions=OVERWRITE`` (rename2).
``rename_overwrite=False`` (``--ignore-rename-overwrite``) makes it a server that ignores the
option, as some WebHDFS gateways do: every RENAME is plain.
GETFILECHECKSUM returns a SHA-256 of the content, not HDFS's MD5-of-CRC32C.

Split across hosts (see :mod:`support.virtual_cluster`), one server is the namenode only
(``datanode_url=`` names the datanode its redirects point to) and another is the datanode only
(``datanode_only=True``), both over the same directory.

Faults are switched on from tests through :attr:`WebHDFSServer.faults`::

    with WebHDFSServer(tmp_path) as server:
        server.faults.refuse_connections(seconds=1.0)       # drop every connection unanswered
        server.faults.stall_answers(seconds=2.0)            # hold every answer back (a cut link), then answer
        server.faults.fail_requests(count=3)                # 503 Service Unavailable
        server.faults.fail_requests(seconds=2, exception="StandbyException")
        server.faults.cut_responses(count=1, after_bytes=100)   # OPEN body cut short
        server.faults.cut_uploads(count=1, after_bytes=100)     # upload connection dropped
        server.faults.deny("/secret")                       # AccessControlException
        server.faults.over_quota("/full")                   # DSQuotaExceededException on writes
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from .webhdfs_faults import FaultInjector, HTTPErrorAnswer

__all__ = ["FaultInjector", "WebHDFSServer", "main"]

logger = logging.getLogger(__name__)

NAMENODE_PREFIX = "/webhdfs/v1"
DATANODE_PREFIX = "/datanode/v1"
_COPY_CHUNK_BYTES = 1 << 20
_JAVA_CLASSES = {
    "FileNotFoundException": "java.io.FileNotFoundException",
    "AccessControlException": "org.apache.hadoop.security.AccessControlException",
    "FileAlreadyExistsException": "org.apache.hadoop.fs.FileAlreadyExistsException",
    "IllegalArgumentException": "java.lang.IllegalArgumentException",
    "PathIsNotEmptyDirectoryException": "org.apache.hadoop.fs.PathIsNotEmptyDirectoryException",
    "StandbyException": "org.apache.hadoop.ipc.StandbyException",
    "RetriableException": "org.apache.hadoop.ipc.RetriableException",
    "IOException": "java.io.IOException",
}


def _file_status(local: str, suffix: str) -> dict[str, Any]:
    st = os.stat(local)
    is_dir = os.path.isdir(local)
    return {
        "accessTime": int(st.st_atime * 1000),
        "blockSize": 134217728,
        "childrenNum": len(os.listdir(local)) if is_dir else 0,
        "fileId": st.st_ino,
        "group": "supergroup",
        "length": 0 if is_dir else st.st_size,
        "modificationTime": int(st.st_mtime * 1000),
        "owner": "hdfs",
        "pathSuffix": suffix,
        "permission": "755" if is_dir else "644",
        "replication": 0 if is_dir else 1,
        "storagePolicy": 0,
        "type": "DIRECTORY" if is_dir else "FILE",
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the requests session expects
    disable_nagle_algorithm = True  # small JSON answers otherwise wait for delayed ACKs (~40 ms)
    timeout = 60  # idle keep-alive connections end after a minute
    server: "_Server"

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except ConnectionError as exc:  # the client hung up (closed a streaming read, was killed)
            logger.debug("connection from %s ended: %s", self.address_string(), exc)
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        logger.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:  # noqa: N802 (stdlib naming)
        self._dispatch("GET")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    # -- plumbing ------------------------------------------------------------------------
    def _send(self, status: int, body: bytes = b"", content_type: str = "application/json", **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _send_json(self, value: Any, status: int = 200) -> None:
        self._send(status, json.dumps(value).encode())

    def _send_error(self, error: HTTPErrorAnswer) -> None:
        if error.exception:
            body = {"RemoteException": {"exception": error.exception, "message": error.message,
                                        "javaClassName": _JAVA_CLASSES.get(error.exception, "java.io.IOException")}}
            self._send(error.status, json.dumps(body).encode())
        else:
            self._send(error.status, error.message.encode(), content_type="text/plain")

    def _has_body(self) -> bool:
        return "chunked" in self.headers.get("Transfer-Encoding", "").lower() or int(self.headers.get("Content-Length") or 0) > 0

    def _body_chunks(self):
        """The request body, de-chunked when sent with Transfer-Encoding: chunked."""
        if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
            yield from self._read_exactly(int(self.headers.get("Content-Length") or 0), "the end of the body")
            return
        while True:
            line = self.rfile.readline(1024)
            if not line:
                raise EOFError("client went away in the middle of a chunked body")
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # skip trailers
                return
            yield from self._read_exactly(size, "the end of a chunk")
            self.rfile.read(2)  # the CRLF after each chunk

    def _read_exactly(self, size: int, what: str):
        """``size`` bytes of the request, in pieces of at most ``_COPY_CHUNK_BYTES``."""
        remaining = size
        while remaining:
            data = self.rfile.read(min(remaining, _COPY_CHUNK_BYTES))
            if not data:
                raise EOFError(f"client went away before {what}")
            remaining -= len(data)
            yield data

    def _local(self, hdfs_path: str) -> str:
        parts = [p for p in hdfs_path.split("/") if p]
        return os.path.join(self.server.fs_root, *parts)

    def _endpoints(self) -> list[tuple[str, Any]]:
        """The (URL prefix, method) pairs this server answers: namenode, datanode or both."""
        return ([(NAMENODE_PREFIX, self._namenode)] if self.server.serves_namenode else []) + \
               ([(DATANODE_PREFIX, self._datanode)] if self.server.serves_datanode else [])

    def _dispatch(self, method: str) -> None:
        faults = self.server.faults
        faults._stall()
        if faults._refusing():
            self.close_connection = True  # hang up without a word
            return
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        op = query.get("op", "").upper()
        try:
            failure = faults._take_failure()
            if failure is not None:
                raise failure
            for prefix, handler in self._endpoints():
                if split.path == prefix or split.path.startswith(prefix + "/"):
                    hdfs_path = os.path.normpath("/" + unquote(split.path[len(prefix):])).replace("//", "/")
                    if faults._is_denied(hdfs_path):
                        user = query.get("user.name", "unknown")
                        raise HTTPErrorAnswer(403, "AccessControlException",
                                         f"Permission denied: user={user}, access=ALL, inode=\"{hdfs_path}\"")
                    writes = op in ("CREATE", "APPEND", "MKDIRS")
                    if (writes or op == "RENAME") and faults._is_over_quota(
                            hdfs_path if writes else "/" + query.get("destination", "").strip("/")):
                        raise HTTPErrorAnswer(403, "DSQuotaExceededException",
                                              f"The DiskSpace quota of {hdfs_path} is exceeded")
                    handler(method, op, hdfs_path, query)
                    break
            else:
                raise HTTPErrorAnswer(404, "FileNotFoundException", f"no WebHDFS endpoint at {split.path}")
        except HTTPErrorAnswer as error:
            if self._has_body():
                self.close_connection = True  # the unread body would corrupt the next request
            self._send_error(error)
        except (EOFError, ConnectionError) as exc:
            logger.info("%s %s: connection lost: %s", method, split.path, exc)
            self.close_connection = True
        except OSError as exc:  # e.g. a parent path component that is a file
            if self._has_body():
                self.close_connection = True
            self._send_error(HTTPErrorAnswer(403, "IOException", f"{op} {split.path}: {exc.strerror or exc}"))

    # -- namenode ------------------------------------------------------------------------
    def _redirect(self, op: str, hdfs_path: str, query: dict[str, str]) -> None:
        params = "&".join(f"{quote(k)}={quote(v)}" for k, v in query.items() if k != "op")
        location = f"{self.server.datanode_url}{DATANODE_PREFIX}{quote(hdfs_path)}?op={op}&{params}"
        self._send(307, b"", Location=location)

    def _namenode(self, method: str, op: str, path: str, query: dict[str, str]) -> None:
        local = self._local(path)
        exists = os.path.lexists(local)
        is_dir = os.path.isdir(local)
        missing = HTTPErrorAnswer(404, "FileNotFoundException", f"File does not exist: {path}")
        truthy = query.get("overwrite", "false").lower() == "true"
        if (method, op) == ("GET", "GETFILESTATUS"):
            if not exists:
                raise missing
            self._send_json({"FileStatus": _file_status(local, "")})
        elif (method, op) == ("GET", "LISTSTATUS"):
            if not exists:
                raise missing
            if is_dir:
                entries = []
                for name in sorted(os.listdir(local)):
                    try:
                        entries.append(_file_status(os.path.join(local, name), name))
                    except FileNotFoundError:  # deleted while listed: a namenode lists atomically, without it
                        continue
            else:
                entries = [_file_status(local, "")]
            self._send_json({"FileStatuses": {"FileStatus": entries}})
        elif (method, op) == ("GET", "GETCONTENTSUMMARY"):
            if not exists:
                raise missing
            files = dirs = length = 0
            for base, dirnames, filenames in os.walk(local) if is_dir else [("", [], [local])]:
                dirs += 1 if is_dir else 0
                files += len(filenames)
                length += sum(os.path.getsize(os.path.join(base, f)) for f in filenames)
            self._send_json({"ContentSummary": {"directoryCount": dirs, "fileCount": files, "length": length,
                                                "quota": -1, "spaceConsumed": length, "spaceQuota": -1}})
        elif (method, op) == ("GET", "GETFILECHECKSUM"):
            if not exists or is_dir:
                raise missing
            digest = hashlib.sha256()
            with open(local, "rb") as handle:
                for block in iter(lambda: handle.read(_COPY_CHUNK_BYTES), b""):
                    digest.update(block)
            self._send_json({"FileChecksum": {"algorithm": "SHA-256", "bytes": digest.hexdigest(), "length": 32}})
        elif (method, op) == ("GET", "GETHOMEDIRECTORY"):
            self._send_json({"Path": f"/user/{query.get('user.name', 'hdfs')}"})
        elif (method, op) == ("GET", "OPEN"):
            if not exists or is_dir:
                raise HTTPErrorAnswer(404, "FileNotFoundException", f"File does not exist or is a directory: {path}")
            self._redirect("OPEN", path, query)
        elif (method, op) == ("PUT", "CREATE"):
            if is_dir or (exists and not truthy):
                raise HTTPErrorAnswer(403, "FileAlreadyExistsException", f"{path} for client already exists")
            self._redirect("CREATE", path, query)
        elif (method, op) == ("POST", "APPEND"):
            if not exists or is_dir:
                raise HTTPErrorAnswer(404, "FileNotFoundException", f"Failed to append to non-existent file {path}")
            self._redirect("APPEND", path, query)
        elif (method, op) == ("PUT", "MKDIRS"):
            if exists and not is_dir:
                raise HTTPErrorAnswer(403, "FileAlreadyExistsException", f"Path is not a directory: {path}")
            os.makedirs(local, exist_ok=True)
            self._send_json({"boolean": True})
        elif (method, op) == ("PUT", "RENAME"):
            self._rename(path, local, query)
        elif (method, op) == ("DELETE", "DELETE"):
            if path == "/" or not exists:
                self._send_json({"boolean": False})
                return
            if is_dir:
                if os.listdir(local) and query.get("recursive", "false").lower() != "true":
                    raise HTTPErrorAnswer(403, "PathIsNotEmptyDirectoryException", f"`{path} is non empty': Directory is not empty")
                shutil.rmtree(local)
            else:
                os.unlink(local)
            self._send_json({"boolean": True})
        else:
            raise HTTPErrorAnswer(400, "IllegalArgumentException", f"Invalid value for webhdfs parameter \"op\": {method} {op}")

    def _rename(self, path: str, local: str, query: dict[str, str]) -> None:
        destination = os.path.normpath("/" + query.get("destination", "")).replace("//", "/")
        if self.server.faults._is_denied(destination):
            raise HTTPErrorAnswer(403, "AccessControlException", f"Permission denied: inode=\"{destination}\"")
        target = self._local(destination)
        overwrite = self.server.rename_overwrite and "OVERWRITE" in query.get("renameoptions", "").upper()
        if overwrite:  # rename2: atomic replace, errors as exceptions, empty 200 on success
            if not os.path.lexists(local):
                raise HTTPErrorAnswer(404, "FileNotFoundException", f"rename source {path} is not found.")
            if not os.path.isdir(os.path.dirname(target)):
                raise HTTPErrorAnswer(404, "FileNotFoundException", f"rename destination parent {destination} not found.")
            if os.path.isdir(target) and os.listdir(target):
                raise HTTPErrorAnswer(403, "IOException", f"rename destination directory is not empty: {destination}")
            if os.path.isdir(target) != os.path.isdir(local) and os.path.lexists(target):
                raise HTTPErrorAnswer(403, "IOException", f"rename {path} -> {destination}: file/directory mismatch")
            os.replace(local, target)
            self._send(200, b"", content_type="application/octet-stream")
            return
        # plain rename: false when the source is missing, the destination exists or has no parent
        if os.path.isdir(target):
            target = os.path.join(target, os.path.basename(local))
        ok = (os.path.lexists(local) and not os.path.lexists(target) and os.path.isdir(os.path.dirname(target))
              and path != "/")
        if ok:
            os.rename(local, target)
        self._send_json({"boolean": bool(ok)})

    # -- datanode ------------------------------------------------------------------------
    def _datanode(self, method: str, op: str, path: str, query: dict[str, str]) -> None:
        local = self._local(path)
        if (method, op) in (("PUT", "CREATE"), ("POST", "APPEND")):
            if op == "CREATE":
                if os.path.isdir(local) or (os.path.exists(local) and query.get("overwrite", "false").lower() != "true"):
                    raise HTTPErrorAnswer(403, "FileAlreadyExistsException", f"{path} for client already exists")
                os.makedirs(os.path.dirname(local), exist_ok=True)
            elif not os.path.isfile(local):
                raise HTTPErrorAnswer(404, "FileNotFoundException", f"Failed to append to non-existent file {path}")
            # Written in place as it arrives: like HDFS, a client that dies mid-upload leaves
            # a partial file under the name it was creating (a temporary name, in our stores).
            cut = self.server.faults._take_upload_cut()
            received = 0
            with open(local, "wb" if op == "CREATE" else "ab") as handle:
                for data in self._body_chunks():
                    handle.write(data)
                    received += len(data)
                    if cut is not None and received >= cut:
                        self.close_connection = True  # as a datanode that died mid-pipeline
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
            host, port = self.server.server_address[:2]
            if op == "CREATE":
                self._send(201, b"", Location=f"hdfs://{host}:{port}{quote(path)}")
            else:
                self._send(200, b"")
        elif (method, op) == ("GET", "OPEN"):
            self._open(path, local, query)
        else:
            raise HTTPErrorAnswer(400, "IllegalArgumentException", f"datanode does not serve {method} {op}")

    def _open(self, path: str, local: str, query: dict[str, str]) -> None:
        try:
            handle = open(local, "rb")
        except (FileNotFoundError, IsADirectoryError) as exc:
            raise HTTPErrorAnswer(404, "FileNotFoundException", f"File does not exist: {path}") from exc
        with handle:
            size = os.fstat(handle.fileno()).st_size
            offset = int(query.get("offset") or 0)
            length = int(query["length"]) if query.get("length") else size - offset
            length = max(0, min(length, size - offset))
            handle.seek(offset)
            cut = self.server.faults._take_cut()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(length))
            self.end_headers()
            remaining = length if cut is None else min(length, cut)
            while remaining:
                data = handle.read(min(remaining, _COPY_CHUNK_BYTES))
                if not data:
                    break
                self.wfile.write(data)
                remaining -= len(data)
            if cut is not None:
                self.wfile.flush()
                self.close_connection = True  # the promised length never arrives
                self.connection.shutdown(socket.SHUT_RDWR)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() closes live keep-alive connections itself
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], fs_root: str, faults: FaultInjector, datanode_url: str | None,
                 datanode_only: bool, rename_overwrite: bool = True) -> None:
        self.fs_root = fs_root
        self.rename_overwrite = rename_overwrite
        self.faults = faults
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)
        self.serves_namenode = not datanode_only
        self.serves_datanode = datanode_only or datanode_url is None  # a namenode redirecting elsewhere serves no data
        host, port = self.server_address[:2]
        self.datanode_url = (datanode_url or f"http://{host}:{port}").rstrip("/")

    def track(self, connection: socket.socket, alive: bool) -> None:
        with self._connections_lock:
            (self._connections.add if alive else self._connections.discard)(connection)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError as exc:  # already closed by the peer
                logger.debug("closing connection: %s", exc)


class WebHDFSServer:
    """A WebHDFS namenode+datanode on ``host:port`` serving the directory ``root``.

    Parameters
    ----------
    root : str
        Local directory that holds the HDFS tree (``/a/b`` is ``root/a/b``).
    host : str
        Interface to bind (loopback by default).
    port : int
        TCP port; 0 picks a free one (see :attr:`port` after :meth:`start`).
    datanode_url : str, optional
        Be a namenode only: CREATE, APPEND and OPEN redirect to this datanode base URL (e.g.
        ``http://datanode:9864``) and ``/datanode/v1`` is not served here.  By default the
        server is its own datanode.
    datanode_only : bool
        Be a datanode only: serve ``/datanode/v1`` and nothing else.
    rename_overwrite : bool
        False: ignore ``renameoptions=OVERWRITE`` (every RENAME is plain, refused when the
        destination exists), as some WebHDFS gateways do.
    """

    def __init__(self, root: str | os.PathLike, host: str = "127.0.0.1", port: int = 0, *,
                 datanode_url: str | None = None, datanode_only: bool = False, rename_overwrite: bool = True) -> None:
        if datanode_only and datanode_url:
            raise ValueError("a datanode-only server has no datanode_url (that is for a namenode)")
        if datanode_url is not None and urlsplit(datanode_url).scheme not in ("http", "https"):
            raise ValueError(f"datanode_url must be an http(s) base URL such as http://datanode:9864, got {datanode_url!r}")
        self.root = os.path.abspath(os.fspath(root))
        self.host, self._requested_port = host, port
        self.datanode_url, self.datanode_only = datanode_url, datanode_only
        self.rename_overwrite = rename_overwrite
        self.faults = FaultInjector()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "WebHDFSServer":
        """Bind and serve in a background thread; returns self."""
        os.makedirs(self.root, exist_ok=True)
        self._server = _Server((self.host, self._requested_port), self.root, self.faults, self.datanode_url,
                               self.datanode_only, self.rename_overwrite)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"webhdfs-{self.port}", daemon=True
        )
        self._thread.start()
        logger.info("WebHDFS test %s on %s serving %s", self.role, self.url, self.root)
        return self

    def stop(self) -> None:
        """Stop serving and close every connection (idempotent)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._server is None:
            raise RuntimeError("server not started")
        return self._server.server_address[1]

    @property
    def role(self) -> str:
        """``"namenode+datanode"``, ``"namenode"`` or ``"datanode"``."""
        return "datanode" if self.datanode_only else "namenode" if self.datanode_url else "namenode+datanode"

    @property
    def url(self) -> str:
        """Base HTTP URL of the namenode endpoint, e.g. ``http://127.0.0.1:9870``."""
        return f"http://{self.host}:{self.port}"

    def store_url(self, path: str = "/") -> str:
        """An ``hdfs://`` store URL for ``path`` on this server."""
        return f"hdfs://{self.host}:{self.port}/{path.lstrip('/')}"

    def __enter__(self) -> "WebHDFSServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """Command line: serve a directory over WebHDFS until interrupted."""
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9870, help="port (default 9870, as a Hadoop 3 namenode)")
    parser.add_argument("--root", required=True, help="local directory holding the HDFS tree")
    role = parser.add_mutually_exclusive_group()
    role.add_argument("--datanode-url", metavar="URL",
                      help="be a namenode only, redirecting data to this datanode (e.g. http://datanode:9864)")
    role.add_argument("--datanode-only", action="store_true",
                      help="be a datanode only (serve /datanode/v1 over --root; run a namenode elsewhere)")
    parser.add_argument("--ignore-rename-overwrite", action="store_true",
                        help="ignore renameoptions=OVERWRITE, as some WebHDFS gateways do (every RENAME is plain)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(message)s")
    server = WebHDFSServer(args.root, args.host, args.port, datanode_url=args.datanode_url,
                           datanode_only=args.datanode_only, rename_overwrite=not args.ignore_rename_overwrite).start()
    print(f"WebHDFS test {server.role}: {server.url} serving {server.root}; stores: {server.store_url('/')}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        print("interrupted; stopping", flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
