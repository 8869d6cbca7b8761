"""Retry transient store failures with capped exponential backoff inside a time budget.

A failure is *transient* when the backend says so (connection refused or reset, timeouts,
HTTP 5xx, HDFS ``RetriableException``/``StandbyException``, NFS ``ESTALE``).  Such calls are
repeated with backoff 50 ms, 100 ms, ... capped at 2 s, with jitter so that many executors
that lost the namenode together do not come back in lockstep.  When ``retry_timeout_s`` is
spent the last failure is wrapped in :class:`StoreUnavailableError` naming the URL and the
operation.  Anything else (not found, permission denied, bad path) propagates at once.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Callable, TypeVar

from ._errors import StoreUnavailableError

__all__ = ["TransientError", "call_with_retry"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_DELAY_S = 0.05
MAX_DELAY_S = 2.0


#: What a connection failure is, said briefly: the client's own text names the whole retry stack (about 600
#: characters of ``HTTPConnectionPool(...): Max retries exceeded ... NewConnectionError ...``).
_CONNECTION_FAILURES = (("Connection refused", "connection refused (no server listens at that host and port: a "
                         "wrong port in the store URL, or the namenode down)"),
                        ("Name or service not known", "unknown host name"),
                        ("nodename nor servname", "unknown host name"),
                        ("No route to host", "no route to host"),
                        ("timed out", "timed out"))


class TransientError(Exception):
    """Raised by backends to mark a failure worth retrying; carries the original cause."""


def call_with_retry(
    fn: Callable[[], T],
    *,
    operation: str,
    url: str,
    retry_timeout_s: float | Callable[[], float],
    rng: random.Random | None = None,
) -> T:
    """Call ``fn()`` until it succeeds, raises a non-transient error, or the time budget is spent.

    Parameters
    ----------
    fn : callable
        The operation; raises :class:`TransientError` for failures worth retrying.
    operation : str
        What is being done, for the error message (e.g. ``"write_bytes runs/r1/run.json"``).
    url : str
        The store URL, for the error message.
    retry_timeout_s : float or callable
        Total time budget; ``0`` means a single attempt.  A callable is asked after each failure: a
        budget lowered meanwhile (a caller that gave up on the store) ends the retries at once.
    rng : random.Random, optional
        Source of backoff jitter (a private generator, never the global one).
    """
    rng = rng or random.Random()
    budget_s = retry_timeout_s if callable(retry_timeout_s) else lambda: float(retry_timeout_s)
    start = time.monotonic()
    delay_s = FIRST_DELAY_S
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except TransientError as exc:
            now, budget = time.monotonic(), max(0.0, budget_s())
            deadline = start + budget
            if now >= deadline:
                cause = exc.__cause__ or exc
                raise StoreUnavailableError(
                    f"store {url} unavailable: {operation} failed {attempt} time(s) over "
                    f"{now - start:.1f} s (retry_timeout_s={budget:g}); last error: {_said_briefly(cause)}. "
                    f"Check that the store is reachable (namenode up, WebHDFS enabled) or raise retry_timeout_s."
                ) from cause
            sleep_s = min(delay_s * (0.5 + rng.random()), deadline - now)
            logger.info("%s on %s failed (%s); retry %d in %.2f s", operation, url, exc, attempt, sleep_s)
            time.sleep(sleep_s)  # backoff between attempts, not waiting for a condition
            delay_s = min(delay_s * 2.0, MAX_DELAY_S)


def _said_briefly(cause: BaseException) -> str:
    """The last error of a retried call, briefly where it is a known connection failure; else as it says itself."""
    text = str(cause)
    return next((said for marker, said in _CONNECTION_FAILURES if marker in text), text)
