"""Thread-safe counters shared by a node's threads (I/O, fetchers, writer, actor)."""

from __future__ import annotations

import threading
from collections import Counter

__all__ = ["Counters", "DROP_REASONS", "COUNTERS"]

#: Counters always reported (0 when nothing happened yet).
COUNTERS = (
    "received",  # frames that arrived, good or bad
    "accepted",  # announcements heard and taken (newest known version of a peer)
    "discovered",  # peer versions found by listing the store (anti-entropy), not heard
    "fetched",  # snapshots read and verified
    "merged",  # snapshots handed to the trainer to merge
    "published",  # own versions written and announced
    "publish_coalesced",  # queued versions replaced by a newer one before being written
    "publish_errors",  # writes that failed
    "publish_refused_nonfinite",  # publishes refused for NaN/Inf
    "pruned",  # own old versions deleted
    "goodbyes",  # peers that left cleanly
    "anti_entropy_rounds",  # store listings done
    "store_errors",  # registry/listing failures (retried)
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

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            counts = dict(self._counts)
        for name in COUNTERS:
            counts.setdefault(name, 0)
        for reason in DROP_REASONS:
            counts.setdefault(f"dropped_{reason}", 0)
        counts["dropped"] = sum(counts[f"dropped_{reason}"] for reason in DROP_REASONS)
        return counts
