"""A node: one pykka actor, a ZeroMQ endpoint, a writer and a few background threads.

:func:`start_node` wires them together and returns a :class:`NodeHandle`, the only object a
trainer touches.  Threads of a node:

* the transport's I/O thread: receives frames, verifies them, offers announcements to the actor;
* the fetch pool (``FETCH_THREADS``): reads announced snapshots from the store, sha256-verified;
* the writer: ``put_version`` then announce then ``prune``;
* the maintenance thread: refreshes the peers registry (heartbeat + subscriptions) every
  ``peer_refresh_interval_s`` and lists the store for missed versions (anti-entropy) every
  ``anti_entropy_interval_s``, or at once when the phase changes (the late-joiner catch-up).

Never fork a process after starting a node: threads and ZeroMQ sockets do not survive fork.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import socket
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping

import numpy as np
import pykka

import storage

from ._actor import NodeActor
from ._errors import ActorsError, MergeError, MessageError, NodeStoppedError
from ._merge import check_compatible, check_snapshot, merge_snapshots
from ._messages import Goodbye, Snapshot, WeightAnnouncement
from ._publisher import Publisher
from ._stats import Counters
from ._transport import Transport
from ._wire import decode_frames, encode_message

__all__ = ["NodeHandle", "start_node"]

logger = logging.getLogger(__name__)

#: Concurrent snapshot reads per node: enough to overlap I/O, small enough to bound memory.
FETCH_THREADS = 2
#: How long stop() lets queued publishes finish.
STOP_FLUSH_TIMEOUT_S = 10.0
#: A peer whose heartbeat is older than this many refresh intervals (and 30 s) is treated as gone.
PEER_EXPIRY_INTERVALS = 15

_live_handles: "weakref.WeakSet[NodeHandle]" = weakref.WeakSet()


@atexit.register
def _stop_forgotten_nodes() -> None:
    # A safety net: a process that exits without stop() still closes its sockets and says goodbye.
    for handle in list(_live_handles):
        handle.stop()


def _disown_nodes_after_fork() -> None:
    # A forked child has the parent's node objects but none of its threads, and its copies of the
    # ZeroMQ sockets must never be touched: make every inherited node refuse to work (or to stop).
    for handle in list(_live_handles):
        handle._stopped = True
        handle._forked = True
    _live_handles.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disown_nodes_after_fork)


def _process_is_dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0 checks existence only
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, owned by someone else
        return False
    return False


class NodeHandle:
    """The trainer's view of its node (create with :func:`start_node`; one per process per run).

    Attributes
    ----------
    run, node : str
        The run and this node's name.
    endpoint : str
        The ZeroMQ endpoint peers subscribe to, e.g. ``"tcp://127.0.0.1:40123"``.
    """

    def __init__(
        self,
        run: str,
        node: str,
        store: "storage.Store",
        secret: bytes,
        *,
        bind_host: str,
        fanout: int | None,
        anti_entropy_interval_s: float,
        peer_refresh_interval_s: float,
        keep_versions: int,
        seed: int | None,
    ) -> None:
        if not isinstance(secret, (bytes, bytearray)) or not secret:
            raise ActorsError("secret must be non-empty bytes (the run's shared HMAC key)")
        if fanout is not None and fanout < 1:
            raise ActorsError(f"fanout must be >= 1 or None, got {fanout}")
        self.run = run
        self.node = node
        self._secret = bytes(secret)
        self._anti_entropy_interval_s = anti_entropy_interval_s
        self._peer_refresh_interval_s = peer_refresh_interval_s
        self._weights = storage.WeightStore(store, run)
        self._runs = storage.RunStore(store, run)
        self._counters = Counters()
        self._stop_lock = threading.Lock()
        self._stopped = False
        self._forked = False
        self._wake = threading.Event()
        self._anti_entropy_due = threading.Event()
        self._refresh_due = threading.Event()
        self._halt = threading.Event()
        self._latest_frames: list[bytes] | None = None
        if seed is None:
            seed = int.from_bytes(hashlib.sha256(f"{run}/{node}".encode()).digest()[:8], "little")
        self._pool = ThreadPoolExecutor(max_workers=FETCH_THREADS, thread_name_prefix=f"sparkdbn-fetch-{node}")
        self._actor_ref = NodeActor.start(
            node, self._fetch, self._pool, self._counters, np.random.default_rng(seed), fanout, self._request_anti_entropy
        )
        self._actor = self._actor_ref.proxy()
        self._transport: Transport | None = None
        self._publisher: Publisher | None = None
        self._maintenance: threading.Thread | None = None
        try:
            self._transport = Transport(bind_host, self._on_frames, self._on_subscriber, node)
            self.endpoint = self._transport.endpoint
            self._started = time.time()
            self._publisher = Publisher(run, node, self._weights, self._announce, self._counters, keep_versions)
            self._heartbeat("alive")
            self._refresh_peers()
            self._maintenance = threading.Thread(target=self._maintain, name=f"sparkdbn-maint-{node}", daemon=True)
            self._maintenance.start()
        except BaseException:
            self.stop()
            raise
        _live_handles.add(self)
        logger.info("node %s of run %s publishing on %s", node, run, self.endpoint)

    # -- the trainer's API ----------------------------------------------------------------
    def publish(self, phase: str, params: Mapping[str, np.ndarray], samples_seen: int) -> None:
        """Write ``params`` as this node's next version of ``phase`` and announce it, in the background.

        The arrays are copied before this returns, so the caller may keep training in place.

        Raises
        ------
        PublishError
            When a parameter contains NaN or Inf (nothing is published).
        """
        self._check_running()
        self._publisher.publish(phase, params, samples_seen)
        self._actor.set_reference(phase, {name: np.shape(value) for name, value in params.items()})
        self._actor.set_phase(phase)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Block until every publish so far is written and announced (raises PublishError on failure)."""
        self._check_running()
        self._publisher.flush(timeout_s)

    def fresh_snapshots(self, phase: str) -> list[Snapshot]:
        """Verified peer snapshots of ``phase`` newer than the last merged from each peer.

        Returns at once with what has been fetched so far (possibly nothing); at most
        ``fanout`` of them, chosen at random, when there are more.  Each snapshot returned
        counts as merged: it will not be returned again.
        """
        self._check_running()
        return self._actor.take_fresh(phase).get()

    def merge(
        self, phase: str, own: Mapping[str, np.ndarray], alpha: float | None = None
    ) -> tuple[dict[str, np.ndarray], list[Snapshot]]:
        """:meth:`fresh_snapshots` then :func:`merge_snapshots`, skipping (and counting) unusable ones.

        Returns
        -------
        merged : dict of str to ndarray
            ``own`` moved toward the fresh snapshots (a copy of ``own`` when there are none).
        used : list of Snapshot
            The peer snapshots that went into it (their node, version, sent_at ...).

        Raises
        ------
        MergeError
            Only when ``own`` itself contains NaN or Inf.
        """
        usable = []
        for snapshot in self.fresh_snapshots(phase):
            try:
                check_compatible(own, snapshot.params, source=f"peer {snapshot.node} version {snapshot.version}")
            except MergeError as error:
                logger.warning("node %s skips a snapshot: %s", self.node, error)
                self._counters.add("dropped_bad_snapshot")
                continue
            usable.append(snapshot)
        return merge_snapshots(own, [snapshot.params for snapshot in usable], alpha), usable

    def stats(self) -> dict[str, int | float]:
        """Counters (``received``, ``accepted``, ``discovered``, ``fetched``, ``merged``, ``published``,
        ``dropped`` and ``dropped_<reason>``, ...) and staleness (``staleness_s_mean``, ``staleness_s_max``,
        ``staleness_versions_max``, ``versions_behind_now_max``)."""
        result: dict[str, int | float] = dict(self._counters.snapshot())
        if not self._stopped:
            try:
                result.update(self._actor.staleness().get())
            except pykka.ActorDeadError:  # stopped meanwhile: the counters are all there is
                return result
            result["peers_connected"] = len(self._transport.connected_peers())
        return result

    def stop(self) -> None:
        """Stop the node: write queued versions, mark it gone, say goodbye, close everything. Idempotent."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        _live_handles.discard(self)
        self._halt.set()
        self._wake.set()
        if self._maintenance is not None:
            self._maintenance.join()
        if self._publisher is not None:
            self._publisher.close(STOP_FLUSH_TIMEOUT_S)
        if self._transport is not None:
            try:
                self._runs.mark_peer_gone(self.node)
            except storage.StoreError as error:
                logger.warning("node %s could not mark itself gone in the registry: %s", self.node, error)
            self._transport.send(encode_message(Goodbye(run=self.run, node=self.node, sent_at=time.time()), self._secret))
            self._transport.close()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._actor_ref.stop()
        logger.info("node %s stopped: %s", self.node, self._counters.snapshot())

    def __enter__(self) -> "NodeHandle":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- callbacks from the node's threads ------------------------------------------------
    def _check_running(self) -> None:
        if self._forked:
            raise NodeStoppedError(
                f"node {self.node} of run {self.run} was started in the parent of this forked process; "
                "start a new node in the child (never fork after starting a node)"
            )
        if self._stopped:
            raise NodeStoppedError(f"node {self.node} of run {self.run} is stopped")

    def _on_frames(self, frames: list[bytes]) -> None:
        """I/O thread: verify, decode and route one received message; bad input is counted."""
        self._counters.add("received")
        try:
            message = decode_frames(frames, self._secret, self.run)
        except MessageError as error:
            self._counters.add(f"dropped_{error.reason}")
            logger.debug("node %s dropped a frame (%s): %s", self.node, error.reason, error)
            return
        try:
            if isinstance(message, WeightAnnouncement):
                self._actor.offer(message, "net")
            else:
                self._counters.add("goodbyes")
                self._refresh_due.set()
                self._wake.set()  # refresh the registry soon: that peer is gone
        except pykka.ActorDeadError:
            logger.debug("node %s: message arrived while stopping", self.node)

    def _on_subscriber(self) -> list[list[bytes]]:
        """I/O thread: a peer subscribed; repeat the newest announcement so it need not wait."""
        frames = self._latest_frames
        return [frames] if frames is not None else []

    def _announce(self, announcement: WeightAnnouncement) -> None:
        frames = encode_message(announcement, self._secret)
        self._latest_frames = frames
        self._transport.send(frames)

    def _request_anti_entropy(self) -> None:
        self._anti_entropy_due.set()
        self._wake.set()

    def _fetch(self, announcement: WeightAnnouncement, reference: dict[str, tuple] | None):
        """Fetch pool: read and verify one snapshot; returns (params, None) or (None, drop reason)."""
        ref = storage.SnapshotRef(
            run=self.run, phase=announcement.phase, node=announcement.node,
            version=announcement.version, path=announcement.path, sha256=announcement.sha256,
        )  # fmt: skip
        try:
            params = self._weights.get_version(ref)
        except storage.ChecksumError as error:
            logger.warning("node %s refuses %s v%d: %s", self.node, ref.node, ref.version, error)
            return None, "corrupt"
        except storage.StoreNotFoundError:
            logger.debug("node %s: %s v%d was pruned before it was read", self.node, ref.node, ref.version)
            return None, "missing"
        except storage.StoreError as error:
            logger.warning("node %s could not fetch %s v%d: %s", self.node, ref.node, ref.version, error)
            return None, "fetch_error" if not isinstance(error, ValueError) else "corrupt"
        try:
            check_snapshot(params, reference, source=f"peer {ref.node} version {ref.version}")
        except MergeError as error:
            logger.warning("node %s refuses a snapshot: %s", self.node, error)
            return None, "bad_snapshot"
        return params, None

    # -- the maintenance thread -----------------------------------------------------------
    def _heartbeat(self, status: str) -> None:
        now = time.time()
        info = {"endpoint": self.endpoint, "host": socket.gethostname(), "pid": os.getpid(),
                "started": self._started, "last_seen": now, "status": status}  # fmt: skip
        self._runs.register_peer(self.node, info)

    def _refresh_peers(self) -> None:
        now = time.time()
        expiry_s = max(30.0, PEER_EXPIRY_INTERVALS * self._peer_refresh_interval_s)
        host = socket.gethostname()
        wanted: dict[str, str] = {}
        for name, info in self._runs.list_peers().items():
            endpoint = info.get("endpoint")
            if name == self.node or not isinstance(endpoint, str) or info.get("status") == "gone":
                continue
            if now - float(info.get("last_seen", 0.0)) > expiry_s:
                continue
            if info.get("host") == host and isinstance(info.get("pid"), int) and _process_is_dead(info["pid"]):
                continue  # killed without a goodbye (SIGKILL, OOM)
            wanted[name] = endpoint
        self._transport.set_peers(wanted.values())

    def _anti_entropy(self) -> None:
        phase = self._actor.current_phase().get()
        if phase is None:
            return
        found_at = time.time()
        for peer, ref in self._weights.newest_per_node(phase).items():
            if peer == self.node:
                continue
            # No announcement was heard for it: samples_seen is unknown (0), sent_at is now.
            self._actor.offer(
                WeightAnnouncement(run=self.run, node=peer, phase=phase, version=ref.version, path=ref.path,
                                   sha256=ref.sha256, samples_seen=0, sent_at=found_at),
                "store",
            )  # fmt: skip
        self._counters.add("anti_entropy_rounds")

    def _maintain(self) -> None:
        next_refresh = time.monotonic() + self._peer_refresh_interval_s
        next_anti_entropy = time.monotonic() + self._anti_entropy_interval_s
        while not self._halt.is_set():
            self._wake.wait(max(0.0, min(next_refresh, next_anti_entropy) - time.monotonic()))
            self._wake.clear()
            if self._halt.is_set():
                return
            now = time.monotonic()
            try:
                if now >= next_refresh or self._refresh_due.is_set():
                    self._refresh_due.clear()
                    next_refresh = now + self._peer_refresh_interval_s
                    self._heartbeat("alive")
                    self._refresh_peers()
                if now >= next_anti_entropy or self._anti_entropy_due.is_set():
                    self._anti_entropy_due.clear()
                    next_anti_entropy = now + self._anti_entropy_interval_s
                    self._anti_entropy()
            except pykka.ActorDeadError:
                return
            except Exception as error:  # the store may be down for a while; keep the node alive and retry
                self._counters.add("store_errors")
                logger.warning("node %s maintenance failed (will retry): %s", self.node, error)


def start_node(
    run: str,
    node: str,
    store: "storage.Store",
    secret: bytes,
    *,
    bind_host: str = "127.0.0.1",
    fanout: int | None = None,
    anti_entropy_interval_s: float = 5.0,
    peer_refresh_interval_s: float = 2.0,
    keep_versions: int = 3,
    seed: int | None = None,
) -> NodeHandle:
    """Start this process's node for ``run``: bind, register, subscribe, and begin listening.

    Parameters
    ----------
    run : str
        The run name (announcements of other runs are dropped).
    node : str
        This node's unique name, e.g. ``f"{hostname}-{pid}"`` (the process, never a partition).
    store : storage.Store
        The shared store holding ``runs/<run>/...``.
    secret : bytes
        The run's HMAC-SHA256 key; every node of the run must use the same one.
    bind_host : str
        Interface of the publishing socket (loopback by default).
    fanout : int, optional
        Merge at most this many peers per round (a random subset); all fresh peers when None.
    anti_entropy_interval_s, peer_refresh_interval_s : float
        How often to list the store for missed versions, and to re-read the peers registry.
    keep_versions : int
        How many of its own versions per phase a node keeps in the store.
    seed : int, optional
        Seeds the fanout choice (default: derived from run and node names).

    Returns
    -------
    NodeHandle
        Stop it with :meth:`NodeHandle.stop` (or use it as a context manager).
    """
    return NodeHandle(
        run,
        node,
        store,
        secret,
        bind_host=bind_host,
        fanout=fanout,
        anti_entropy_interval_s=anti_entropy_interval_s,
        peer_refresh_interval_s=peer_refresh_interval_s,
        keep_versions=keep_versions,
        seed=seed,
    )
