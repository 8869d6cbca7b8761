"""Whether the nodes hear each other: peer versions merged by announcement vs only by listing the store.

Every partition report says how many of the peer versions it merged were announced over the
nodes' ZeroMQ endpoints and how many were only found by listing the store.  A node that hears
its peers merges mostly announced versions; nodes that cannot reach each other's ports still
learn through the store (anti-entropy), but seconds late and in lockstep with the listing
interval -- the cluster is misconfigured, and the driver says so, once per phase.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

__all__ = ["merges_by_node", "merges_text", "ReachabilityWatch", "LISTED_SHARE_TO_WARN", "MIN_MERGES_TO_WARN"]

#: Warn when at least this share of a phase's merged peer versions came only from listing the store ...
LISTED_SHARE_TO_WARN = 0.9
#: ... and the phase merged at least this many (a phase start may begin with a listing or two).
MIN_MERGES_TO_WARN = 4


def merges_by_node(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """``{node: {"announced": a, "listed": l}}`` summed over partition records."""
    result: dict[str, dict[str, int]] = {}
    for record in records:
        counts = result.setdefault(str(record["node"]), {"announced": 0, "listed": 0})
        counts["announced"] += int(record.get("merged_announced", 0))
        counts["listed"] += int(record.get("merged_listed", 0))
    return result


def merges_text(by_node: Mapping[str, Mapping[str, int]], limit: int = 8) -> str:
    """``"12 by announcement, 1 by listing (node-a 6/1, node-b 6/0)"`` for the summary line."""
    announced = sum(counts["announced"] for counts in by_node.values())
    listed = sum(counts["listed"] for counts in by_node.values())
    nodes = sorted(by_node)
    per_node = ", ".join(f"{node} {by_node[node]['announced']}/{by_node[node]['listed']}" for node in nodes[:limit])
    more = f", +{len(nodes) - limit} more" if len(nodes) > limit else ""
    return f"{announced} by announcement, {listed} by listing ({per_node}{more})" if nodes else "0 by announcement"


class ReachabilityWatch:
    """Sums a phase's merges and gives the plain-words warning once per phase when they came by listing."""

    def __init__(self) -> None:
        self._phase: str | None = None
        self._announced = 0
        self._listed = 0
        self._warned: set[str] = set()
        self._endpoints: dict[str, str] = {}

    def end_epoch(self, phase: str, records: Iterable[Mapping[str, Any]]) -> str | None:
        """Add an epoch's partition records; the warning text the first time the phase qualifies, else None."""
        if phase != self._phase:
            self._phase, self._announced, self._listed = phase, 0, 0
        for record in records:
            self._announced += int(record.get("merged_announced", 0))
            self._listed += int(record.get("merged_listed", 0))
            if record.get("endpoint"):
                self._endpoints[str(record["node"])] = str(record["endpoint"])
        merged = self._announced + self._listed
        if phase in self._warned or merged < MIN_MERGES_TO_WARN or self._listed < LISTED_SHARE_TO_WARN * merged:
            return None
        self._warned.add(phase)
        endpoints = ", ".join(sorted(set(self._endpoints.values()))[:6]) or "unknown"
        return (f"the nodes cannot reach each other's ports: in phase {phase} {self._listed} of {merged} peer "
                f"versions were merged only after listing the store, {self._announced} by announcement, so the "
                f"nodes learn from each other seconds late. The nodes advertise {endpoints}. Check that every "
                "executor host can open TCP connections to these addresses and ports (firewall, security groups): "
                "set advertise_host (spark.sparkdbn.advertise_host) to an address peers reach, bind_host "
                "(spark.sparkdbn.bind_host) to the interface they reach it on, and port_range "
                "(spark.sparkdbn.port_range) to ports the firewall opens")
