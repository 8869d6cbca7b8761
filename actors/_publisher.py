"""The background writer: store a weight version, announce it, prune old versions.

``publish`` only copies the arrays and queues them, so the trainer never waits for the store.
Creating a :class:`Publisher` starts nothing; :meth:`Publisher.start` starts the writer thread.
If the trainer publishes faster than the store writes, a queued version that has not started
yet is replaced by the newer one (counted as ``publish_coalesced``): peers only want the newest.
:meth:`Publisher.hold` keeps a written version from pruning (an epoch's last, which the driver reads
while the node trains the next).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from ._errors import NodeStoppedError, PublishError
from ._merge import all_finite
from ._messages import WeightAnnouncement
from ._stats import Counters

if TYPE_CHECKING:
    import storage

__all__ = ["Publisher"]

logger = logging.getLogger(__name__)

#: How many of a phase's held versions (:meth:`Publisher.hold`) stay: the epoch the run record names, and the two
#: after it that the jobs already started may train (the running one and the one queued behind it) -- a driver
#: killed then leaves them training, and its resume reads the record's versions (with two, a killed driver's
#: resume found a node's pruned, took its newest and trained two epochs' partitions again).
HELD_EPOCHS = 3


class Publisher:
    """One writer thread per node (created idle: call :meth:`start`).

    Parameters
    ----------
    run : str
        The run's name, stamped on announcements.
    node : str
        This node's name, stamped on announcements.
    weight_store : storage.WeightStore
        Where versions are written (``put_version``, ``list_versions``, ``prune``).
    announce : callable(WeightAnnouncement)
        Signs and sends the announcement (called after the write succeeded).
    counters : Counters
        ``published``, ``publish_coalesced``, ``publish_errors``, ``pruned``.
    keep_versions : int
        Versions of each phase kept in the store for this node (older ones are pruned).
    """

    def __init__(
        self,
        run: str,
        node: str,
        weight_store: "storage.WeightStore",
        announce: Callable[[WeightAnnouncement], None],
        counters: Counters,
        keep_versions: int,
    ) -> None:
        if keep_versions < 1:
            raise ValueError(f"keep_versions must be >= 1, got {keep_versions}")
        self._run = run
        self._node = node
        self._weights = weight_store
        self._announce = announce
        self._counters = counters
        self._keep = keep_versions
        self._condition = threading.Condition()
        self._pending: dict[str, tuple[dict[str, np.ndarray], int]] = {}  # phase -> (params, samples_seen)
        self._busy = False
        self._closed = False
        self._errors: list[Exception] = []  # the failed writes since the last flush()
        self._next_version: dict[str, int] = {}
        self._held: dict[str, deque[int]] = {}  # phase -> the versions hold() keeps from pruning
        self._thread = threading.Thread(target=self._loop, name=f"sparkdbn-writer-{node}", daemon=True)

    def start(self) -> "Publisher":
        """Start the writer thread."""
        self._thread.start()
        return self

    def publish(self, phase: str, params: Mapping[str, np.ndarray], samples_seen: int) -> None:
        """Queue a copy of ``params`` for writing and announcing; returns at once.

        Raises
        ------
        PublishError
            When a parameter contains NaN or Inf (never published) or ``params`` is empty.
        """
        if not params:
            raise PublishError(f"node {self._node}: nothing to publish for phase {phase!r} (empty parameter dict)")
        copies: dict[str, np.ndarray] = {}
        for name, value in params.items():
            array = np.array(value, copy=True, order="C")
            if not all_finite(array):
                self._counters.add("publish_refused_nonfinite")
                raise PublishError(
                    f"node {self._node}: parameter {name!r} of phase {phase!r} contains NaN or Inf; "
                    "the model has diverged (lower the learning rate); it was not published"
                )
            copies[name] = array
        with self._condition:
            if self._closed:
                raise NodeStoppedError(f"node {self._node} is stopped; cannot publish")
            if phase in self._pending:
                self._counters.add("publish_coalesced")
            self._pending[phase] = (copies, int(samples_seen))
            self._condition.notify_all()

    def flush(self, timeout_s: float) -> None:
        """Wait until every queued version is written and announced.

        Raises
        ------
        PublishError
            When a write failed since the last flush (the message names the store error), or
            the queue did not drain within ``timeout_s`` (``TimeoutError`` subclass then).
        """
        deadline = time.monotonic() + timeout_s
        with self._condition:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _FlushTimeout(
                        f"node {self._node}: {len(self._pending)} version(s) still unwritten after {timeout_s} s; "
                        "the store may be slow or unavailable"
                    )
                self._condition.wait(left)
            errors, self._errors = self._errors, []
        if errors:
            last = errors[-1]
            raise PublishError(f"node {self._node}: {len(errors)} publish(es) failed; last: {type(last).__name__}: "
                               f"{last}") from last

    def written(self, phase: str) -> int:
        """The newest version of ``phase`` written so far (0: none); after :meth:`flush`, the last published."""
        with self._condition:
            return self._next_version.get(phase, 1) - 1

    def hold(self, phase: str) -> int:
        """Keep the newest written version of ``phase`` from pruning, until three later holds; returns it (0: none).

        A node holds its last version of each epoch: the driver reads it after the epoch's job ends,
        while the node may be training (and pruning) the next epoch already (:mod:`node.modes._async`), and a
        resume reads it where the run record names it.  The last :data:`HELD_EPOCHS` holds are kept.
        """
        with self._condition:
            version = self._next_version.get(phase, 1) - 1
            if version > 0:
                self._held.setdefault(phase, deque(maxlen=HELD_EPOCHS)).append(version)
            return version

    def close(self, timeout_s: float) -> None:
        """Write what is queued (up to ``timeout_s``), then stop the thread."""
        try:
            self.flush(timeout_s)
        except PublishError as error:
            logger.warning("%s", error)
        with self._condition:
            self._closed = True
            self._pending.clear()
            self._condition.notify_all()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        while True:
            with self._condition:
                while not self._pending and not self._closed:
                    self._condition.wait()
                if self._closed:
                    return
                phase = next(iter(self._pending))
                params, samples_seen = self._pending.pop(phase)
                self._busy = True
            try:
                self._write(phase, params, samples_seen)
            except Exception as error:  # a failed write must not kill the writer; flush() reports it
                logger.warning("node %s: publishing phase %r failed: %s", self._node, phase, error)
                self._counters.add("publish_errors")
                with self._condition:
                    self._errors.append(error)
            finally:
                with self._condition:
                    self._busy = False
                    self._condition.notify_all()

    def _write(self, phase: str, params: dict[str, np.ndarray], samples_seen: int) -> None:
        if phase not in self._next_version:
            # A node restarted under the same name continues after its newest stored version.
            existing = self._weights.list_versions(phase, self._node)
            self._next_version[phase] = existing[-1].version + 1 if existing else 1
        version = self._next_version[phase]
        ref = self._weights.put_version(phase, self._node, version, params)
        self._next_version[phase] = version + 1
        self._announce(
            WeightAnnouncement(
                run=self._run,
                node=self._node,
                phase=phase,
                version=ref.version,
                sha256=ref.sha256,
                mac=ref.mac,
                samples_seen=samples_seen,
                sent_at=time.time(),
            )
        )
        self._counters.add("published")
        with self._condition:
            held = tuple(self._held.get(phase, ()))
        removed = self._weights.prune(phase, self._node, self._keep, also_keep=held)
        self._counters.add("pruned", removed)


class _FlushTimeout(PublishError, TimeoutError):
    """flush() ran out of time."""
