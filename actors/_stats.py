"""Thread-safe counters shared by a node's threads (I/O, fetchers, writer, actor), and a log-every filter.

A refusal said once per peer is :class:`storage.SayOnce`'s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict
from typing import Mapping

__all__ = ["Counters", "DROP_REASONS", "COUNTERS", "LogEvery"]

#: Counters always reported (0 when nothing happened yet).
COUNTERS = (
    "received",  # frames that arrived, good or bad
    "accepted",  # announcements heard and taken (newest known version of a peer)
    "discovered",  # peer versions found by listing the store (anti-entropy), not heard
    "fetched",  # snapshots read and verified
    "merged",  # snapshots handed to the trainer to merge (= merged_announced + merged_listed)
    "merged_announced",  # ... of versions first heard of by announcement (the network works)
    "merged_listed",  # ... of versions only found by listing the store (no announcement heard)
    "published",  # own versions written and announced
    "publish_coalesced",  # queued versions replaced by a newer one before being written
    "publish_errors",  # writes that failed
    "publish_refused_nonfinite",  # publishes refused for NaN/Inf
    "pruned",  # own old versions deleted
    "goodbyes",  # peers that left cleanly
    "anti_entropy_rounds",  # store listings done
    "store_errors",  # registry/listing failures (retried)
    "refused_peer_entries",  # registry entries that do not verify under the run's key (never subscribed)
    "peer_disconnects",  # a peer's connection dropped: it went away, or sent a frame over the size limit
    "malformed_peer_endpoints",  # verified registry entries whose endpoint is not tcp://host:port (skipped)
    "peer_connect_retries",  # connection attempts to a peer that refused, timed out or never finished the handshake
    "refused_subscribers",  # connections to the publishing port that failed the run's CurveZMQ handshake (no key)
    "peers_unreachable",  # now: subscribed peer endpoints not connected (a retry failed, or no handshake in time)
)

#: Every reason a frame or snapshot is dropped; each is reported as ``dropped_<reason>`` (0 when unseen).
DROP_REASONS = (
    "bad_signature",  # missing or wrong HMAC
    "wrong_run",  # correctly signed, but for another run
    "malformed",  # frame count, topic, size, msgpack or fields
    "schema",  # unknown schema version
    "stale",  # duplicate or older version than one already known or merged
    "other_phase",  # announcement for a phase this node is not training
    "corrupt",  # snapshot file failed its sha256 check or could not be parsed
    "unauthenticated",  # snapshot whose name's MAC does not verify under the run's key (planted, moved)
    "oversized",  # snapshot file larger than this node's own parameter shapes allow
    "too_many_peers",  # announcement of a new peer when max_peers are already known
    "overloaded",  # frame dropped because the node actor's inbox is full
    "missing",  # snapshot file gone (pruned) before it was fetched
    "bad_snapshot",  # NaN/Inf or names/shapes that do not match this node's weights
    "fetch_error",  # the store failed while fetching
)


class Counters:
    """Named integer counters; :meth:`snapshot` returns a consistent copy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def snapshot(self, extra: Mapping[str, int] | None = None) -> dict[str, int]:
        """A copy of every counter (0 when unseen), plus ``extra`` counts, with their ``dropped`` total."""
        with self._lock:
            counts = Counter(self._counts)
        counts.update(extra or {})
        counts = dict(counts)
        for name in COUNTERS:
            counts.setdefault(name, 0)
        for reason in DROP_REASONS:
            counts.setdefault(f"dropped_{reason}", 0)
        counts["dropped"] = sum(counts[f"dropped_{reason}"] for reason in DROP_REASONS)
        return counts


class LogEvery:
    """Logs a recurring condition of one source at warning level at most once per ``interval_s``.

    For conditions that can last and end (a peer that does not answer): the operator hears of it
    again a minute later if it persists, never once per retry.  Suppressed repeats go to debug.
    """

    def __init__(self, logger: logging.Logger, interval_s: float = 60.0, max_remembered: int = 4096) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._max = max_remembered
        self._lock = threading.Lock()
        self._last: OrderedDict[tuple[str, str], float] = OrderedDict()

    def log(self, reason: str, source: str, message: str, *args: object) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get((reason, source))
            loud = last is None or now - last >= self._interval_s
            if loud:
                self._last[(reason, source)] = now
                self._last.move_to_end((reason, source))
                if len(self._last) > self._max:
                    self._last.popitem(last=False)
        self._logger.log(logging.WARNING if loud else logging.DEBUG, message, *args)
