"""What the nodes refused because it did not verify: said to the operator once per epoch it happens.

The nodes count what they drop (``dropped_<reason>`` in each partition report's ``stats``: running totals
of the node's process).  Most drops are ordinary (a stale announcement, a snapshot pruned before its
fetch); those of :data:`UNVERIFIED` are not: a frame or a file that is not what the run's nodes write,
forged, planted, damaged or too large.  A run goes on without them, so they were seen only in the metrics
and the live log; the driver now warns of them at the epoch's end, with the counts by reason.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

__all__ = ["UNVERIFIED", "RefusalWatch"]

logger = logging.getLogger(__name__)

#: The drops that mean something other than the run's nodes wrote the store or reached their ports.
UNVERIFIED = ("bad_signature", "malformed", "corrupt", "unauthenticated", "oversized")


class RefusalWatch:
    """The unverified drops of one fit's nodes, epoch by epoch.

    Parameters
    ----------
    run : str
        The run (named in the warning).
    """

    def __init__(self, run: str) -> None:
        self.run = run
        self._seen: dict[str, dict[str, int]] = {}  # node -> its running totals at the last report read

    def note(self, phase: str, epoch: int, records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
        """The unverified drops the epoch's ``records`` add, by reason (``{}``: none), warned of when any.

        A node whose totals fell (a new process under its name) counts from 0 again.

        Parameters
        ----------
        phase : str
            The phase.
        epoch : int
            The epoch (from 0).
        records : iterable of mapping
            The epoch's partition reports (``node``, ``time``, ``stats``).
        """
        newest: dict[str, Mapping[str, Any]] = {}
        for record in records:
            node = str(record.get("node"))
            if node not in newest or float(record.get("time", 0.0)) >= float(newest[node].get("time", 0.0)):
                newest[node] = record
        added: dict[str, int] = {}
        for node, record in newest.items():
            stats = record.get("stats") or {}
            totals = {reason: int(stats.get(f"dropped_{reason}", 0) or 0) for reason in UNVERIFIED}
            before = self._seen.get(node, {})
            if any(totals[reason] < before.get(reason, 0) for reason in UNVERIFIED):
                before = {}  # another process of the node: its counters started again
            for reason in UNVERIFIED:
                if totals[reason] > before.get(reason, 0):
                    added[reason] = added.get(reason, 0) + totals[reason] - before.get(reason, 0)
            self._seen[node] = totals
        if added:
            counts = ", ".join(f"{reason} {count}" for reason, count in sorted(added.items()))
            logger.warning("run %s %s epoch %d: the nodes refused %d messages or store files that did not verify (%s): "
                           "something other than the run's nodes writes its store or reaches their ports; training "
                           "goes on without them (docs/threat-model.md)", self.run, phase, epoch + 1,
                           sum(added.values()), counts)
        return added
