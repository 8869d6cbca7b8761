"""A node's maintenance thread: heartbeat, subscriptions from the signed registry, anti-entropy.

Every ``peer_refresh_interval_s`` it renews this node's registry entry and subscribes to the
live peers whose entries verify under the run's key (:meth:`storage.RunStore.list_peers` skips
and counts the others), at most ``max_peers``.  Every ``anti_entropy_interval_s`` (or at once
when asked, e.g. on a phase change) it lists the store and offers each peer's newest
authenticated snapshot to the actor, which fetches what it has not seen: how a node catches up
on announcements it missed.  A store that is down only delays both (``store_errors``).

Nodes of a fit start at about the same time, so the first reading of the registry often misses
peers that register a moment later.  While a node is subscribed to fewer peers than it was told
to expect (``expected_peers``), and for at most :data:`CATCH_UP_FOR_S` after it starts, it reads
the registry every :data:`CATCH_UP_S` instead; each peer it newly subscribes to triggers an
anti-entropy round at once, which offers the versions the peer announced before the subscription
connected.  (On data whose phases last less than ``peer_refresh_interval_s`` a node otherwise
merged nothing of a peer that registered after it.)
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import threading
import time
from typing import Any, Mapping

import pykka

import storage

from ._messages import WeightAnnouncement
from ._stats import Counters
from ._transport import Transport

__all__ = ["MAX_PEERS", "Maintenance"]

logger = logging.getLogger(__name__)

#: A peer whose heartbeat is older than this many refresh intervals (and 30 s) is treated as gone.
PEER_EXPIRY_INTERVALS = 15
#: Default cap on peers a node subscribes to and keeps state for.
MAX_PEERS = 1024
#: How often a node short of its expected peers reads the registry (seconds), and for how long after it starts.
CATCH_UP_S = 0.05
CATCH_UP_FOR_S = 10.0
#: A peer endpoint a node will connect to: ``tcp://<host name, IPv4 or [IPv6]>:<port>``.
_ENDPOINT = re.compile(r"tcp://(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\]):([0-9]{1,5})")


def valid_endpoint(endpoint: object) -> bool:
    """Whether ``endpoint`` is a ``tcp://host:port`` string with a port in 1..65535."""
    if not isinstance(endpoint, str):
        return False
    match = _ENDPOINT.fullmatch(endpoint)
    return match is not None and 1 <= int(match.group(1)) <= 65535


def _process_is_dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0 checks existence only
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, owned by someone else
        return False
    return False


class Maintenance:
    """The maintenance thread of node ``node`` (created idle: call :meth:`start`).

    Parameters
    ----------
    run : str
        The run's name.
    node : str
        This node's name.
    weights : storage.WeightStore
        The run's snapshots, under the run's key.
    runs : storage.RunStore
        The run's registry, under the run's key.
    transport : Transport
        Told which endpoints to subscribe to.
    actor : pykka proxy of NodeActor
        Offered the snapshots found in the store.
    counters : Counters
        ``anti_entropy_rounds``, ``store_errors``.
    log_once : storage.SayOnce
        Where a capped registry is reported.
    peer_refresh_interval_s : float
        How often the peers registry is re-read.
    anti_entropy_interval_s : float
        How often the store is listed for missed versions.
    max_peers : int
        Subscribe to at most this many peers (those seen most recently).
    expected_peers : int
        How many peers the node's fit has (0: unknown): fewer subscribed, it reads the registry
        more often for a while (see the module docstring).
    registry_fields : mapping, optional
        More fields of the node's registry entry (the node's own win).
    """

    def __init__(
        self,
        run: str,
        node: str,
        weights: "storage.WeightStore",
        runs: "storage.RunStore",
        transport: Transport,
        actor: Any,
        counters: Counters,
        log_once: storage.SayOnce,
        *,
        peer_refresh_interval_s: float,
        anti_entropy_interval_s: float,
        max_peers: int,
        expected_peers: int = 0,
        registry_fields: Mapping[str, Any] | None = None,
    ) -> None:
        self._run, self._node = run, node
        self._registry_fields = dict(registry_fields or {})
        self._weights, self._runs = weights, runs
        self._transport, self._actor = transport, actor
        self._counters, self._log_once = counters, log_once
        self._peer_refresh_interval_s = peer_refresh_interval_s
        self._anti_entropy_interval_s = anti_entropy_interval_s
        self._max_peers = max_peers
        self._expected_peers = min(int(expected_peers), max_peers)
        self._subscribed: set[str] = set()
        self._wake = threading.Event()
        self._anti_entropy_due = threading.Event()
        self._refresh_due = threading.Event()
        self._halt = threading.Event()
        self._started_at = time.time()
        self._catch_up_until = time.monotonic() + CATCH_UP_FOR_S
        self._malformed: set[tuple[str, str]] = set()
        self._thread = threading.Thread(target=self._loop, name=f"sparkdbn-maint-{node}", daemon=True)

    def start(self) -> "Maintenance":
        """Register this node, subscribe to the registered peers once, then start the thread."""
        self.heartbeat("alive")
        self.refresh_peers()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (returns once it has finished its current step)."""
        self._halt.set()
        self._wake.set()
        if self._thread.ident is not None:
            self._thread.join()

    def request_anti_entropy(self) -> None:
        """List the store soon (any thread; never blocks)."""
        self._anti_entropy_due.set()
        self._wake.set()

    def request_refresh(self) -> None:
        """Re-read the registry soon, e.g. after a peer said goodbye (any thread; never blocks)."""
        self._refresh_due.set()
        self._wake.set()

    def heartbeat(self, status: str) -> None:
        """Write this node's signed registry entry."""
        # host, pid and pid namespace: `sparkdbn status` on this host tells a node whose process ended
        info = {**self._registry_fields, "endpoint": self._transport.endpoint, **storage.process_identity(),
                "python": sys.executable, "started": self._started_at, "last_seen": time.time(), "status": status}
        self._runs.register_peer(self._node, info)

    def refresh_peers(self) -> int:
        """Subscribe to the live peers whose registry entries verify, at most ``max_peers``; how many are new."""
        now = time.time()
        expiry_s = max(30.0, PEER_EXPIRY_INTERVALS * self._peer_refresh_interval_s)
        host = socket.gethostname()
        wanted: dict[str, tuple[float, str]] = {}
        for name, info in self._runs.list_peers().items():
            endpoint, last_seen = info.get("endpoint"), info.get("last_seen", 0.0)
            if name == self._node or info.get("status") == "gone":
                continue
            if not valid_endpoint(endpoint):
                self._malformed_endpoint(name, endpoint)
                continue
            if not isinstance(last_seen, (int, float)) or now - float(last_seen) > expiry_s:
                continue
            if info.get("host") == host and isinstance(info.get("pid"), int) and _process_is_dead(info["pid"]):
                continue  # killed without a goodbye (SIGKILL, OOM)
            wanted[name] = (float(last_seen), endpoint)
        if len(wanted) > self._max_peers:
            self._log_once.say(("too_many_peers", "registry"),
                               "node %s: %d live peers registered, subscribing to the %d seen most recently "
                               "(max_peers)",
                               self._node, len(wanted), self._max_peers)
            wanted = dict(sorted(wanted.items(), key=lambda item: item[1][0], reverse=True)[: self._max_peers])
        self._transport.set_peers(endpoint for _, endpoint in wanted.values())
        added = len(set(wanted) - self._subscribed)
        self._subscribed = set(wanted)
        return added

    def _short_of_peers(self) -> bool:
        """Whether the node should read the registry sooner: fewer peers than expected, early in its life."""
        return len(self._subscribed) < self._expected_peers and time.monotonic() < self._catch_up_until

    def _malformed_endpoint(self, peer: str, endpoint: object) -> None:
        """Skip a verified entry whose endpoint is not ``tcp://host:port``: counted once per entry, logged once."""
        entry = (peer, repr(endpoint)[:200])
        if entry in self._malformed:
            return
        if len(self._malformed) < MAX_PEERS:
            self._malformed.add(entry)
        self._counters.add("malformed_peer_endpoints")
        self._log_once.say(("malformed_endpoint", peer), "node %s skips peer %s: its registered endpoint %s is not "
                           "tcp://host:port", self._node, peer, entry[1])

    def anti_entropy(self) -> None:
        """Offer the actor each peer's newest authenticated snapshot of the current phase."""
        phase = self._actor.current_phase().get()
        if phase is None:
            return
        found_at = time.time()
        for peer, ref in self._weights.newest_per_node(phase).items():
            if peer == self._node:
                continue
            # No announcement was heard for it: samples_seen is unknown (0), sent_at is now.
            self._actor.offer(
                WeightAnnouncement(run=self._run, node=peer, phase=phase, version=ref.version, sha256=ref.sha256,
                                   mac=ref.mac, samples_seen=0, sent_at=found_at),
                "store",
            )  # fmt: skip
        self._counters.add("anti_entropy_rounds")

    def _loop(self) -> None:
        next_refresh = time.monotonic() + self._peer_refresh_interval_s
        next_anti_entropy = time.monotonic() + self._anti_entropy_interval_s
        while not self._halt.is_set():
            due = min(next_refresh, next_anti_entropy)
            if self._short_of_peers():
                due = min(due, time.monotonic() + CATCH_UP_S)
            self._wake.wait(max(0.0, due - time.monotonic()))
            self._wake.clear()
            if self._halt.is_set():
                return
            now = time.monotonic()
            try:
                added = 0
                if now >= next_refresh or self._refresh_due.is_set():
                    self._refresh_due.clear()
                    next_refresh = now + self._peer_refresh_interval_s
                    self.heartbeat("alive")
                    added = self.refresh_peers()
                elif self._short_of_peers():
                    added = self.refresh_peers()
                if added:  # what the new peers announced before the subscription connected
                    self._anti_entropy_due.set()
                if now >= next_anti_entropy or self._anti_entropy_due.is_set():
                    self._anti_entropy_due.clear()
                    next_anti_entropy = now + self._anti_entropy_interval_s
                    self.anti_entropy()
            except pykka.ActorDeadError:
                return
            except Exception as error:  # the store may be down for a while; keep the node alive and retry
                self._counters.add("store_errors")
                logger.warning("node %s maintenance failed (will retry): %s", self._node, error)
