"""The node actor: which peer versions exist, which are fetched, which were merged.

All of a node's bookkeeping about peers lives in one pykka actor, so the I/O thread, the
anti-entropy thread, the fetchers and the trainer never share mutable state: they send it
messages (proxy calls) and it answers from its own thread.  The actor never does I/O itself;
it hands fetches to a small thread pool (bounded concurrency) and is told when they finish.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
import pykka

from ._messages import Snapshot, WeightAnnouncement
from ._stats import Counters

__all__ = ["NodeActor", "FetchJob"]

logger = logging.getLogger(__name__)

#: fetch(announcement, reference shapes or None) -> (params or None, drop reason or None)
FetchJob = Callable[[WeightAnnouncement, "dict[str, tuple] | None"], "tuple[dict[str, np.ndarray] | None, str | None]"]


@dataclass
class _PeerState:
    """What this node knows of one peer in one phase."""

    announced: WeightAnnouncement | None = None  # newest version heard of (network or store)
    announced_heard: bool = False  # whether ``announced`` came by announcement (not by listing the store)
    inflight: int | None = None  # version being fetched now
    tried: int = -1  # newest version whose fetch finished (successfully or not)
    fetched: Snapshot | None = None  # newest verified snapshot not yet handed to the trainer
    last_merged: int = -1  # version last handed to the trainer


class NodeActor(pykka.ThreadingActor):
    """Bookkeeping of one node (see the module docstring); call it through its proxy.

    Parameters
    ----------
    node : str
        This node's name (its own announcements are ignored).
    fetch : FetchJob
        Reads and verifies a snapshot; runs in ``pool``.
    pool : Executor
        Bounded pool the fetches run in.
    counters : Counters
        Shared counters (``accepted``, ``discovered``, ``fetched``, ``merged``, ``dropped_*``).
    rng : numpy.random.Generator
        Picks the peers read and merged under a ``fanout``.
    fanout : int or None
        At most this many snapshots per :meth:`take_fresh`, and at most this many peers read ahead of
        a merge: when a merge frees a read, a peer with a newer version is picked at random among
        those waiting.  So a node reads about what it merges, not every version of every peer.  All
        when None.
    on_phase_change : callable
        Called (in the actor thread; must not block) when the current phase changes, to
        trigger an immediate store listing: the late-joiner / new-phase catch-up.
    max_peers : int
        At most this many peers are tracked in the current phase; announcements of further
        new peers are dropped (``dropped_too_many_peers``), so per-peer state stays bounded.
    fresh : threading.Event, optional
        Set while a fetched snapshot of the current phase waits to be merged, cleared when none
        does: the trainer thread reads it between minibatches without asking the actor.
    """

    # A safety net only: NodeHandle.stop() stops the actor; a forgotten one must not hang exit.
    use_daemon_thread = True

    def __init__(
        self,
        node: str,
        fetch: FetchJob,
        pool: Executor,
        counters: Counters,
        rng: np.random.Generator,
        fanout: int | None,
        on_phase_change: Callable[[], None],
        max_peers: int,
        fresh: threading.Event | None = None,
    ) -> None:
        super().__init__()
        self._max_peers = max_peers
        self._fresh = fresh if fresh is not None else threading.Event()
        self._node = node
        self._fetch = fetch
        self._pool = pool
        self._counters = counters
        self._rng = rng
        self._fanout = fanout
        self._on_phase_change = on_phase_change
        self._phase: str | None = None
        self._peers: dict[tuple[str, str], _PeerState] = {}
        self._reference: dict[str, dict[str, tuple]] = {}  # phase -> {name: shape} of own weights
        self._staleness_s_total = 0.0
        self._staleness_s_max = 0.0
        self._staleness_versions_max = 0

    def on_start(self) -> None:
        # Fetch jobs report back through this proxy (made once: building a proxy inspects the actor).
        self._self_proxy = self.actor_ref.proxy()

    # -- messages -----------------------------------------------------------------------
    def current_phase(self) -> str | None:
        return self._phase

    def set_phase(self, phase: str) -> None:
        """Make ``phase`` current: forget other phases' peers, fetch what this phase needs."""
        if phase == self._phase:
            return
        self._phase = phase
        self._peers = {key: state for key, state in self._peers.items() if key[0] == phase}
        for state in self._peers.values():
            self._maybe_fetch(state)
        self._update_fresh()
        self._on_phase_change()

    def set_reference(self, phase: str, shapes: Mapping[str, tuple]) -> None:
        """Own parameter names and shapes for ``phase``: peers' snapshots must match them."""
        self._reference[phase] = dict(shapes)

    def offer(self, announcement: WeightAnnouncement, source: str) -> None:
        """A peer version heard of on the network (``source="net"``) or found in the store (``"store"``)."""
        if announcement.node == self._node:
            return
        heard = source == "net"
        if self._phase is not None and announcement.phase != self._phase:
            if heard:
                self._counters.add("dropped_other_phase")
            return
        state = self._peers.get((announcement.phase, announcement.node))
        if state is None:
            if len(self._peers) >= self._max_peers:
                if heard:  # the store listing repeats itself: counted when heard only
                    self._counters.add("dropped_too_many_peers")
                logger.debug("node %s ignores peer %s: %d peers known already", self._node, announcement.node,
                             len(self._peers))  # fmt: skip
                return
            state = self._peers[(announcement.phase, announcement.node)] = _PeerState()
        newest_known = max(state.announced.version if state.announced else -1, state.last_merged, state.tried)
        if announcement.version <= newest_known:
            if heard:  # the store listing repeats known versions on purpose: not worth counting
                self._counters.add("dropped_stale")
            return
        self._counters.add("accepted" if heard else "discovered")
        state.announced, state.announced_heard = announcement, heard
        self._maybe_fetch(state)

    def fetched(self, announcement: WeightAnnouncement, params: dict[str, np.ndarray] | None, reason: str | None,
                heard: bool = True) -> None:
        """A fetch finished: keep the snapshot if still the newest, or count why it was refused.

        ``heard``: the version was announced on the network (False: only found by listing the store).
        """
        state = self._peers.get((announcement.phase, announcement.node))
        if state is None:  # the phase moved on while fetching
            return
        state.inflight = None
        if reason == "fetch_error":
            # The store failed, the file may be fine: forget the announcement so that the next
            # store listing (anti-entropy, a natural back-off) or announcement offers it again.
            if state.announced is not None and state.announced.version == announcement.version:
                state.announced = None
        else:
            state.tried = max(state.tried, announcement.version)
        if params is None:
            self._counters.add(f"dropped_{reason}")
        elif announcement.version > max(state.last_merged, state.fetched.version if state.fetched else -1):
            self._counters.add("fetched")
            state.fetched = Snapshot(
                node=announcement.node,
                phase=announcement.phase,
                version=announcement.version,
                samples_seen=announcement.samples_seen,
                sent_at=announcement.sent_at,
                params=params,
                announced=heard,
            )
        self._update_fresh()
        self._maybe_fetch(state)
        self._fetch_waiting()

    def fetching(self, phase: str) -> bool:
        """Whether a version of ``phase`` this node has heard of is being read now."""
        return any(state.inflight is not None for (peer_phase, _), state in self._peers.items() if peer_phase == phase)

    def take_fresh(self, phase: str) -> list[Snapshot]:
        """Verified snapshots newer than the last merged from each peer (a random ``fanout`` subset)."""
        self.set_phase(phase)
        reference = self._reference.get(phase)
        fresh: list[tuple[_PeerState, Snapshot]] = []
        for state in self._peers.values():
            snapshot = state.fetched
            if snapshot is None or snapshot.version <= state.last_merged:
                continue
            if reference is not None and {name: value.shape for name, value in snapshot.params.items()} != reference:
                # Fetched before this node knew its own shapes; refuse it now.
                self._counters.add("dropped_bad_snapshot")
                state.last_merged = snapshot.version
                state.fetched = None
                continue
            fresh.append((state, snapshot))
        if self._fanout is not None and len(fresh) > self._fanout:  # a fan-out that changed, or from the store
            chosen = self._rng.choice(len(fresh), size=self._fanout, replace=False)
            fresh = [fresh[index] for index in sorted(chosen)]
        now = time.time()
        for state, snapshot in fresh:
            state.last_merged = snapshot.version
            state.fetched = None  # handed over: the node need not hold the arrays any longer
            behind_s = max(0.0, now - snapshot.sent_at)
            behind_versions = (state.announced.version if state.announced else snapshot.version) - snapshot.version
            self._staleness_s_total += behind_s
            self._staleness_s_max = max(self._staleness_s_max, behind_s)
            self._staleness_versions_max = max(self._staleness_versions_max, behind_versions)
        self._counters.add("merged", len(fresh))
        heard = sum(1 for _, snapshot in fresh if snapshot.announced)
        self._counters.add("merged_announced", heard)
        self._counters.add("merged_listed", len(fresh) - heard)
        self._update_fresh()
        self._fetch_waiting()
        return [snapshot for _, snapshot in fresh]

    def staleness(self) -> dict[str, float | int]:
        """How far behind the merged snapshots were, and how far behind the peers are now."""
        merged = self._counters.get("merged")
        lag_now = [
            state.announced.version - state.last_merged
            for state in self._peers.values()
            if state.announced is not None and state.last_merged >= 0
        ]
        return {
            "staleness_s_mean": self._staleness_s_total / merged if merged else 0.0,
            "staleness_s_max": self._staleness_s_max,
            "staleness_versions_max": self._staleness_versions_max,
            "versions_behind_now_max": max(lag_now, default=0),
            "peers_known": len({peer for _, peer in self._peers}),
        }

    def contains(self, phase: str, versions: Mapping[str, int]) -> None:
        """This node's parameters already hold these peers' versions of ``phase`` (and so every older one).

        None of them, nor an older one, is fresh any more: a node that started from the store's
        consolidation of a phase says so, or it would merge the same progress twice, and the newest
        snapshot of every node that ever trained the phase once more.
        """
        self.set_phase(phase)
        for peer, version in versions.items():
            state = self._peers.get((phase, peer))
            if peer == self._node or (state is None and len(self._peers) >= self._max_peers):
                continue
            if state is None:
                state = self._peers[(phase, peer)] = _PeerState()
            state.last_merged = max(state.last_merged, int(version))
        self._update_fresh()

    # -- helpers ------------------------------------------------------------------------
    def _update_fresh(self) -> None:
        # Once a phase is current, only its peers are tracked (set_phase, offer): no phase test needed.
        waiting = any(state.fetched is not None and state.fetched.version > state.last_merged
                      for state in self._peers.values())
        if waiting:
            self._fresh.set()
        else:
            self._fresh.clear()

    def _slots_held(self) -> int:
        """Peers being read now or read and not merged yet."""
        return sum(1 for state in self._peers.values() if _holds_slot(state))

    def _fetch_waiting(self) -> None:
        """With a fan-out, read the newest versions of peers picked at random among those waiting, up to the fan-out."""
        if self._fanout is None:
            return
        held = self._slots_held()
        waiting = [state for state in self._peers.values() if not _holds_slot(state) and _newer_announced(state)]
        for index in self._rng.permutation(len(waiting)):
            if held >= self._fanout:
                return
            self._maybe_fetch(waiting[index])
            held += _holds_slot(waiting[index])

    def _maybe_fetch(self, state: _PeerState) -> None:
        announced = state.announced
        if announced is None or state.inflight is not None or not _newer_announced(state):
            return
        if self._phase is not None and announced.phase != self._phase:
            return
        if self._fanout is not None and not _holds_slot(state) and self._slots_held() >= self._fanout:
            return  # read when a merge frees a slot (_fetch_waiting): no more reads than merges
        state.inflight = announced.version
        proxy = self._self_proxy
        reference = self._reference.get(announced.phase)
        fetch = self._fetch
        heard = state.announced_heard

        def job() -> None:
            params, reason = fetch(announced, reference)
            try:
                proxy.fetched(announced, params, reason, heard)
            except pykka.ActorDeadError:  # the node stopped while this fetch ran
                logger.debug("fetch of %s v%d finished after the node stopped", announced.node, announced.version)

        try:
            self._pool.submit(job)
        except RuntimeError:  # the pool is shut down: the node is stopping
            state.inflight = None


def _holds_slot(state: _PeerState) -> bool:
    """Whether the peer takes one of the fan-out's reads: being read, or read and not merged yet."""
    return state.inflight is not None or (state.fetched is not None and state.fetched.version > state.last_merged)


def _newer_announced(state: _PeerState) -> bool:
    """Whether the peer announced a version newer than any this node read, tried or merged."""
    fetched = state.fetched.version if state.fetched else -1
    return state.announced is not None and state.announced.version > max(state.tried, state.last_merged, fetched)
