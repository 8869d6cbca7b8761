"""Fault switches of the WebHDFS test server (see :mod:`support.webhdfs_server`)."""

from __future__ import annotations

import threading
import time

__all__ = ["FaultInjector", "HTTPErrorAnswer"]


class HTTPErrorAnswer(Exception):
    """An error answer: HTTP status + RemoteException name + message."""

    def __init__(self, status: int, exception: str, message: str) -> None:
        super().__init__(message)
        self.status, self.exception, self.message = status, exception, message


class FaultInjector:
    """Switches that make the server misbehave; thread-safe, all off by default."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests_seen = 0
        self.requests_stalled = 0
        self.faults_injected = 0
        self.clear()

    def clear(self) -> None:
        """Turn every fault off (counters are kept)."""
        with self._lock:
            self._refuse_until = 0.0
            self._stall_until = 0.0
            self._fail_count = 0
            self._fail_until = 0.0
            self._fail_status = 503
            self._fail_exception: str | None = None
            self._cut_count = 0
            self._cut_after_bytes = 0
            self._cut_upload_count = 0
            self._cut_upload_after_bytes = 0
            self._denied: list[str] = []
            self._over_quota: list[str] = []

    def refuse_connections(self, seconds: float) -> None:
        """For ``seconds``, close every connection without answering (as a crashed namenode)."""
        with self._lock:
            self._refuse_until = time.monotonic() + seconds

    def stall_answers(self, seconds: float) -> None:
        """For ``seconds``, hold every request unanswered, then answer it (as a namenode behind a cut link that
        comes back); ``requests_stalled`` counts them."""
        with self._lock:
            self._stall_until = time.monotonic() + seconds

    def fail_requests(
        self, *, count: int | None = None, seconds: float | None = None, status: int | None = None,
        exception: str | None = None,
    ) -> None:
        """Answer the next ``count`` requests, or all requests for ``seconds``, with an error.

        ``exception=None`` gives a plain ``503 Service Unavailable``; ``"StandbyException"`` or
        ``"RetriableException"`` give a RemoteException with status 403, as Hadoop sends them.
        """
        if count is None and seconds is None:
            raise ValueError("give count= or seconds=")
        with self._lock:
            self._fail_count = count or 0
            self._fail_until = time.monotonic() + seconds if seconds is not None else 0.0
            self._fail_exception = exception
            self._fail_status = status if status is not None else (403 if exception else 503)

    def cut_responses(self, count: int = 1, after_bytes: int = 0) -> None:
        """Cut the next ``count`` OPEN data responses after ``after_bytes`` bytes of the body."""
        with self._lock:
            self._cut_count, self._cut_after_bytes = count, after_bytes

    def cut_uploads(self, count: int = 1, after_bytes: int = 0) -> None:
        """Hang up on the next ``count`` datanode uploads (CREATE/APPEND) after ``after_bytes`` bytes."""
        with self._lock:
            self._cut_upload_count, self._cut_upload_after_bytes = count, after_bytes

    def deny(self, path_prefix: str) -> None:
        """Answer AccessControlException for every path under ``path_prefix`` (absolute HDFS path)."""
        with self._lock:
            self._denied.append("/" + path_prefix.strip("/"))

    def over_quota(self, path_prefix: str) -> None:
        """Answer DSQuotaExceededException for every write (create, append, mkdirs, rename into) under
        ``path_prefix`` (absolute HDFS path), as a namenode whose folder's space quota is reached; reads go on."""
        with self._lock:
            self._over_quota.append("/" + path_prefix.strip("/"))

    # -- used by the handler -------------------------------------------------------------
    def _refusing(self) -> bool:
        with self._lock:
            refusing = time.monotonic() < self._refuse_until
            self.faults_injected += refusing
            return refusing

    def _stall(self) -> None:
        with self._lock:
            seconds = self._stall_until - time.monotonic()
            self.requests_stalled += seconds > 0
        if seconds > 0:
            time.sleep(seconds)

    def _take_failure(self) -> HTTPErrorAnswer | None:
        with self._lock:
            self.requests_seen += 1
            if self._fail_count > 0:
                self._fail_count -= 1
            elif time.monotonic() >= self._fail_until:
                return None
            self.faults_injected += 1
            if self._fail_exception:
                return HTTPErrorAnswer(self._fail_status, self._fail_exception, f"injected {self._fail_exception}")
            return HTTPErrorAnswer(self._fail_status, "", "Service Unavailable (injected)")

    def _take_cut(self) -> int | None:
        with self._lock:
            if self._cut_count <= 0:
                return None
            self._cut_count -= 1
            self.faults_injected += 1
            return self._cut_after_bytes

    def _take_upload_cut(self) -> int | None:
        with self._lock:
            if self._cut_upload_count <= 0:
                return None
            self._cut_upload_count -= 1
            self.faults_injected += 1
            return self._cut_upload_after_bytes

    def _is_denied(self, hdfs_path: str) -> bool:
        with self._lock:
            return any(hdfs_path == p or hdfs_path.startswith(p.rstrip("/") + "/") for p in self._denied)

    def _is_over_quota(self, hdfs_path: str) -> bool:
        with self._lock:
            return any(hdfs_path == p or hdfs_path.startswith(p.rstrip("/") + "/") for p in self._over_quota)
