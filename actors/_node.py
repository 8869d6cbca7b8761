"""A node: one pykka actor, a ZeroMQ endpoint, a writer and a few background threads.

:func:`start_node` creates and starts a :class:`NodeHandle`, the only object a trainer touches
(creating a handle starts nothing; :meth:`NodeHandle.start` / :meth:`NodeHandle.stop` or the
context manager do).  Threads of a node:

* the transport's I/O thread: receives frames, verifies them, offers announcements to the actor;
* the fetch pool (``FETCH_THREADS``): reads announced snapshots from the store, authenticated
  under the run's key and bounded in size by the node's own parameter shapes;
* the writer: ``put_version`` then announce then ``prune``;
* the maintenance thread: refreshes the peers registry (heartbeat + subscriptions) every
  ``peer_refresh_interval_s`` and lists the store for missed versions (anti-entropy) every
  ``anti_entropy_interval_s``, or at once when the phase changes (the late-joiner catch-up).

Trust: the run's key (``secret``) signs announcements, snapshot names, registry entries, and derives the
CurveZMQ key pair every socket of the run speaks (a process without it completes no handshake with a
node).  A node subscribes only to endpoints whose registry entry verifies, merges only snapshots whose MAC
verifies, and bounds what any peer can make it hold (frame size, queued messages, peers known,
snapshot size); each refusal is counted in :meth:`NodeHandle.stats` and logged once per source.

Never fork a process after starting a node: threads and ZeroMQ sockets do not survive fork.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

import numpy as np
import pykka

import storage

from ._actor import NodeActor
from ._errors import ActorsError, MergeError, MessageError, NodeStoppedError
from ._maintenance import MAX_PEERS, Maintenance
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
#: Announcements waiting for the actor beyond this are dropped (counted ``dropped_overloaded``).
MAX_INBOX_MESSAGES = 1000
#: How long taking fresh snapshots waits for reads of versions already announced (never for a peer's training).
FETCH_WAIT_S = 1.0
#: How often that wait asks the actor.
FETCH_POLL_S = 0.002

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


class NodeHandle:
    """The trainer's view of its node (one per process per run).

    Creating a handle starts nothing: :meth:`start` binds, registers and starts the threads,
    :meth:`stop` (or leaving a ``with`` block) stops them.  :func:`start_node` does both.

    Parameters
    ----------
    run : str
        The run name (announcements of other runs are dropped).
    node : str
        This node's unique name, e.g. ``f"{hostname}-{pid}"`` (the process, never a partition).
    store : storage.Store
        The shared store holding ``runs/<run>/...``.
    secret : bytes
        The run's key (at least 16 bytes); every node of the run must use the same one.  It
        signs announcements, snapshots and registry entries; nothing unsigned is acted upon.
    bind_host : str
        Interface of the publishing socket (loopback by default; ``"0.0.0.0"`` for every
        interface, then with ``advertise_host``).
    advertise_host : str, optional
        The host name or address registered for peers to connect to (default: ``bind_host``).
    port_range : (int, int), optional
        Bind a free port of this inclusive range (default: any); a range with no free port
        raises :class:`NodeAddressError` naming it.
    fanout : int, optional
        Merge at most this many peers per round (a random subset); all fresh peers when None.
    anti_entropy_interval_s : float
        How often to list the store for missed versions.
    peer_refresh_interval_s : float
        How often to re-read the peers registry.
    keep_versions : int
        How many of its own versions per phase a node keeps in the store.
    seed : int, optional
        Seeds the fanout choice (default: derived from run and node names).
    max_peers : int
        At most this many peers are subscribed to and tracked.
    expected_peers : int
        The peers this node's fit has, when known (0: unknown): short of them, the node reads the
        registry more often for a while after it starts (:mod:`actors._maintenance`).
    registry_fields : mapping, optional
        More fields of this node's registry entry (JSON values; never ones the node writes itself), e.g.
        the fit it serves, which ``sparkdbn status`` compares with the run record's.
    max_snapshot_bytes : int
        Largest snapshot fetched before this node knows its own parameter shapes (afterwards
        the bound follows from them).

    Attributes
    ----------
    run : str
        The run's name.
    node : str
        This node's name.
    endpoint : str or None
        The ZeroMQ endpoint peers subscribe to, e.g. ``"tcp://127.0.0.1:40123"`` (once started).
    """

    def __init__(
        self,
        run: str,
        node: str,
        store: "storage.Store",
        secret: bytes,
        *,
        bind_host: str = "127.0.0.1",
        advertise_host: str | None = None,
        port_range: tuple[int, int] | None = None,
        fanout: int | None = None,
        anti_entropy_interval_s: float = 5.0,
        peer_refresh_interval_s: float = 2.0,
        keep_versions: int = 3,
        seed: int | None = None,
        max_peers: int = MAX_PEERS,
        expected_peers: int = 0,
        registry_fields: Mapping[str, Any] | None = None,
        max_snapshot_bytes: int = storage.DEFAULT_MAX_SNAPSHOT_BYTES,
    ) -> None:
        if not isinstance(secret, (bytes, bytearray)) or len(secret) < storage.MIN_KEY_BYTES:
            raise ActorsError(f"secret must be bytes of at least {storage.MIN_KEY_BYTES} (the run's shared key)")
        if fanout is not None and fanout < 1:
            raise ActorsError(f"fanout must be >= 1 or None, got {fanout}")
        if max_peers < 1:
            raise ActorsError(f"max_peers must be >= 1, got {max_peers}")
        self.run = run
        self.node = node
        self.endpoint: str | None = None
        self._secret = bytes(secret)
        self._bind_host = bind_host
        self._advertise_host = advertise_host
        self._port_range = port_range
        self._fanout = fanout
        self._anti_entropy_interval_s = anti_entropy_interval_s
        self._peer_refresh_interval_s = peer_refresh_interval_s
        self._keep_versions = keep_versions
        self._max_peers = max_peers
        self._expected_peers = expected_peers
        self._registry_fields = dict(registry_fields or {})
        self._fresh = threading.Event()  # set by the actor while a fetched snapshot waits (see has_fresh)
        if seed is None:
            seed = int(storage.sha256_hex(f"{run}/{node}".encode())[:16], 16)
        self._seed = seed
        self._weights = storage.WeightStore(store, run, self._secret, max_snapshot_bytes=max_snapshot_bytes)
        self._runs = storage.RunStore(store, run, self._secret)
        self._counters = Counters()
        self._log_once = storage.SayOnce(logger)
        self._stop_lock = threading.Lock()
        self._started = False
        self._stopped = False
        self._forked = False
        self._latest_frames: list[bytes] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._actor_ref: pykka.ActorRef | None = None
        self._transport: Transport | None = None
        self._publisher: Publisher | None = None
        self._maintenance: Maintenance | None = None

    def start(self) -> "NodeHandle":
        """Bind the endpoint, register it, subscribe to the registered peers and start listening.

        Raises
        ------
        NodeAddressError
            The endpoint cannot be bound (not a local address, or no free port in the range).
        ActorsError
            Already started, or the sockets cannot be opened.
        NodeStoppedError
            The handle was stopped (a stopped node is not restarted: create a new one).
        """
        with self._stop_lock:
            if self._stopped:
                raise NodeStoppedError(f"node {self.node} of run {self.run} is stopped; create a new handle")
            if self._started:
                raise ActorsError(f"node {self.node} of run {self.run} is already started")
            self._started = True
        try:
            self._pool = ThreadPoolExecutor(max_workers=FETCH_THREADS, thread_name_prefix=f"sparkdbn-fetch-{self.node}")
            self._actor_ref = NodeActor.start(self.node, self._fetch, self._pool, self._counters,
                                              np.random.default_rng(self._seed), self._fanout,
                                              self._request_anti_entropy, self._max_peers, self._fresh)  # fmt: skip
            self._actor = self._actor_ref.proxy()
            self._transport = Transport(self._bind_host, self._on_frames, self._on_subscriber, self.node,
                                        self._secret, self._on_peer_lost, self._counters,
                                        advertise_host=self._advertise_host, port_range=self._port_range).start()
            self.endpoint = self._transport.endpoint
            self._publisher = Publisher(self.run, self.node, self._weights, self._announce, self._counters,
                                        self._keep_versions).start()  # fmt: skip
            self._maintenance = Maintenance(
                self.run, self.node, self._weights, self._runs, self._transport, self._actor, self._counters,
                self._log_once, peer_refresh_interval_s=self._peer_refresh_interval_s,
                anti_entropy_interval_s=self._anti_entropy_interval_s, max_peers=self._max_peers,
                expected_peers=self._expected_peers, registry_fields=self._registry_fields,
            ).start()  # fmt: skip
        except BaseException:
            self.stop()
            raise
        _live_handles.add(self)
        logger.info("node %s of run %s publishing on %s", self.node, self.run, self.endpoint)
        return self

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

    def published_version(self, phase: str) -> int:
        """The newest version of ``phase`` this node has written (0: none): after :meth:`flush`, its last publish."""
        self._check_running()
        return self._publisher.written(phase)

    def hold_published(self, phase: str) -> int:
        """Keep the newest version of ``phase`` written from pruning, until two later holds (an epoch's last
        version, which the driver validates while the node trains the next); returns it (0: none)."""
        self._check_running()
        return self._publisher.hold(phase)

    def contains(self, phase: str, versions: Mapping[str, int]) -> None:
        """This node's parameters already hold ``{peer: version}`` of ``phase`` (see :meth:`NodeActor.contains`)."""
        self._check_running()
        self._actor.contains(phase, dict(versions)).get()

    def has_fresh(self) -> bool:
        """Whether a fetched peer snapshot of the current phase waits to be merged (never blocks: a flag
        the actor keeps, cheap enough to read between two minibatches)."""
        return self._fresh.is_set()

    def fresh_snapshots(self, phase: str, wait_s: float = FETCH_WAIT_S) -> list[Snapshot]:
        """Verified peer snapshots of ``phase`` newer than the last merged from each peer.

        First lets the reads of versions this node has already heard of finish, for at most
        ``wait_s`` (a version is in the store once announced: this waits for the store, never
        for a peer to train), then returns what has been fetched (possibly nothing); at most
        ``fanout`` of them, chosen at random, when there are more.  Each snapshot returned
        counts as merged: it will not be returned again.
        """
        self._check_running()
        deadline = time.monotonic() + wait_s
        while self._actor.fetching(phase).get() and time.monotonic() < deadline:
            time.sleep(FETCH_POLL_S)
        return self._actor.take_fresh(phase).get()

    def merge(
        self, phase: str, own: Mapping[str, np.ndarray], alpha: float | None = None, wait_s: float = FETCH_WAIT_S
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
        self._check_running()
        # Known shapes also bound the size of every later fetch (see _fetch).
        self._actor.set_reference(phase, {name: np.shape(value) for name, value in own.items()})
        usable = []
        for snapshot in self.fresh_snapshots(phase, wait_s):
            try:
                check_compatible(own, snapshot.params, source=f"peer {snapshot.node} version {snapshot.version}")
            except MergeError as error:
                logger.warning("node %s skips a snapshot: %s", self.node, error)
                self._counters.add("dropped_bad_snapshot")
                continue
            usable.append(snapshot)
        return merge_snapshots(own, [snapshot.params for snapshot in usable], alpha, checked=True), usable

    def stats(self) -> dict[str, int | float]:
        """Counters (``received``, ``accepted``, ``discovered``, ``fetched``, ``merged`` with ``merged_announced``
        and ``merged_listed``, ``published``, ``dropped`` and ``dropped_<reason>``, ...), the gauges
        ``peers_connected`` and ``peers_unreachable``, and staleness (``staleness_s_mean``, ``staleness_s_max``,
        ``staleness_versions_max``, ``versions_behind_now_max``)."""
        from_store = self._weights.refusals()
        extra = {f"dropped_{kind}": count for kind, count in from_store.items()}
        extra["refused_peer_entries"] = self._runs.refusals().get("peer_entries", 0)
        result: dict[str, int | float] = dict(self._counters.snapshot(extra))
        if self._started and not self._stopped:
            try:
                result.update(self._actor.staleness().get())
            except pykka.ActorDeadError:  # stopped meanwhile: the counters are all there is
                return result
            result["peers_connected"] = len(self._transport.connected_peers())
            result["peers_unreachable"] = len(self._transport.unreachable_peers())
        return result

    def stop(self) -> None:
        """Stop the node: write queued versions, mark it gone, say goodbye, close everything.

        Idempotent; stopping a handle never started only marks it stopped.
        """
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        _live_handles.discard(self)
        if not self._started:
            return
        if self._maintenance is not None:
            self._maintenance.stop()
        if self._publisher is not None:
            self._publisher.close(STOP_FLUSH_TIMEOUT_S)
        if self._transport is not None and self._transport.endpoint is not None:
            try:
                self._runs.mark_peer_gone(self.node)
            except storage.StoreError as error:
                logger.warning("node %s could not mark itself gone in the registry: %s", self.node, error)
            self._transport.send(encode_message(Goodbye(run=self.run, node=self.node, sent_at=time.time()), self._secret))
            self._transport.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._actor_ref is not None:
            self._actor_ref.stop()
        logger.info("node %s stopped: %s", self.node, self._counters.snapshot())

    def __enter__(self) -> "NodeHandle":
        if not self._started:
            self.start()
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
        if not self._started:
            raise NodeStoppedError(f"node {self.node} of run {self.run} is not started: call start() (or use start_node)")

    def _on_frames(self, frames: list[bytes]) -> None:
        """I/O thread: verify, decode and route one received message; bad input is counted."""
        self._counters.add("received")
        try:
            message = decode_frames(frames, self._secret, self.run)
        except MessageError as error:
            self._counters.add(f"dropped_{error.reason}")
            logger.debug("node %s dropped a frame (%s): %s", self.node, error.reason, error)
            return
        if self._actor_ref.actor_inbox.qsize() >= MAX_INBOX_MESSAGES:
            self._counters.add("dropped_overloaded")
            self._log_once.say(("overloaded", "inbox"), "node %s drops announcements: its actor has %d waiting",
                               self.node, MAX_INBOX_MESSAGES)
            return
        try:
            if isinstance(message, WeightAnnouncement):
                self._actor.offer(message, "net")
            else:
                self._counters.add("goodbyes")
                self._maintenance.request_refresh()  # that peer is gone
        except pykka.ActorDeadError:
            logger.debug("node %s: message arrived while stopping", self.node)

    def _on_subscriber(self) -> list[list[bytes]]:
        """I/O thread: a peer subscribed; repeat the newest announcement so it need not wait."""
        frames = self._latest_frames
        return [frames] if frames is not None else []

    def _on_peer_lost(self, endpoint: str) -> None:
        """I/O thread: a subscribed connection dropped (the peer left, or sent an oversized frame)."""
        self._counters.add("peer_disconnects")
        logger.debug("node %s lost its connection to %s", self.node, endpoint)

    def _announce(self, announcement: WeightAnnouncement) -> None:
        frames = encode_message(announcement, self._secret)
        self._latest_frames = frames
        self._transport.send(frames)

    def _request_anti_entropy(self) -> None:
        """List the store soon (the actor asks on a phase change; tests ask instead of waiting)."""
        if self._maintenance is not None:
            self._maintenance.request_anti_entropy()

    def _fetch(self, announcement: WeightAnnouncement, reference: dict[str, tuple] | None):
        """Fetch pool: read and verify one snapshot; returns (params, None) or (None, drop reason).

        The MAC is checked before anything is read; with this node's own shapes known, a file
        larger than such a snapshot can be is refused before it is read whole.
        """
        ref = storage.SnapshotRef(
            run=self.run, phase=announcement.phase, node=announcement.node,
            version=announcement.version, sha256=announcement.sha256, mac=announcement.mac,
        )  # fmt: skip
        max_bytes = storage.snapshot_size_bound(reference) if reference is not None else None
        what = f"{ref.node} v{ref.version}"
        try:
            params = self._weights.get_version(ref, max_bytes=max_bytes)
        except storage.AuthenticationError as error:
            self._log_once.say(("unauthenticated", ref.node), "node %s refuses %s: %s", self.node, what, error)
            return None, "unauthenticated"
        except storage.FileTooLargeError as error:
            self._log_once.say(("oversized", ref.node), "node %s refuses %s: %s", self.node, what, error)
            return None, "oversized"
        except (storage.ChecksumError, storage.StoreEntryTypeError) as error:  # damaged; a directory, a FIFO
            self._log_once.say(("corrupt", ref.node), "node %s refuses %s: %s", self.node, what, error)
            return None, "corrupt"
        except storage.StoreNotFoundError:
            logger.debug("node %s: %s was pruned before it was read", self.node, what)
            return None, "missing"
        except storage.StoreError as error:
            self._log_once.say(("fetch_error", ref.node), "node %s could not fetch %s: %s", self.node, what, error)
            return None, "fetch_error" if not isinstance(error, ValueError) else "corrupt"
        try:
            check_snapshot(params, reference, source=f"peer {ref.node} version {ref.version}")
        except MergeError as error:
            self._log_once.say(("bad_snapshot", ref.node), "node %s refuses a snapshot: %s", self.node, error)
            return None, "bad_snapshot"
        return params, None


def start_node(run: str, node: str, store: "storage.Store", secret: bytes, **options: Any) -> NodeHandle:
    """Create and start this process's node for ``run``: bind, register, subscribe, and begin listening.

    ``NodeHandle(run, node, store, secret, **options).start()``; the parameters and keyword
    options are those of :class:`NodeHandle`.

    Returns
    -------
    NodeHandle
        Started; stop it with :meth:`NodeHandle.stop` (or use it as a context manager).
    """
    return NodeHandle(run, node, store, secret, **options).start()
