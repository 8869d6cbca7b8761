"""Which partition a simulated node trains next: the real nodes' work stealing, for ``bench_simulate.py``.

As :mod:`node.modes._stealing` deals an epoch's partitions, a free node takes

1. its own partitions of its epoch, from the front of its list;
2. then a peer's that nobody has started, from the end of the list of the peer with the most left --
   all of them where the peer is training this epoch, all but its first where the peer is still busy
   with the epoch before;
3. then moves on to its next epoch, where the fit's jobs let it: ``async`` queues each epoch's job behind
   the one running (``ahead=1``: a node starts epoch ``e + 1`` only once every partition of ``e - 1`` is
   finished, else it waits), ``sharing`` runs the phase as one job (``ahead=None``: never waits).

A partition keeps its owner's place in the epoch (the fine-tuning's plan, :func:`node.modes.schedule_place`).
Without stealing (``stealing=False``) every node trains its own list only, epoch after epoch, never waiting.
"""

from __future__ import annotations

from collections import deque


class PartitionQueue:
    """The partitions of ``epochs`` epochs of ``nodes`` nodes, ``per_node`` each per epoch (the module docstring)."""

    def __init__(self, nodes: int, per_node: int, epochs: int, *, stealing: bool = True, ahead: int | None = 1) -> None:
        self.nodes, self.per_node, self.epochs = nodes, per_node, epochs
        self.stealing, self.ahead = stealing, ahead if stealing else None
        self.epoch = [0] * nodes  # the epoch each node takes partitions from
        self.left: dict[int, list[deque[int]]] = {}  # epoch -> per owner, its partitions nobody has started
        self.unfinished = [nodes * per_node] * epochs  # per epoch, partitions not finished

    def _lists(self, epoch: int) -> list[deque[int]]:
        if epoch not in self.left:
            self.left[epoch] = [deque(range(self.per_node)) for _ in range(self.nodes)]
        return self.left[epoch]

    def _oldest_unfinished(self) -> int:
        return next((e for e, count in enumerate(self.unfinished) if count), self.epochs)

    def take(self, node: int) -> tuple[int, int, int] | None:
        """The next partition of ``node`` as (epoch, owner, index in the owner's list), or None: it waits
        for an epoch to finish (ask again after :meth:`finished`) or has nothing left to train."""
        while self.epoch[node] < self.epochs:
            epoch = self.epoch[node]
            if self.ahead is not None and epoch > self._oldest_unfinished() + self.ahead:
                return None
            lists = self._lists(epoch)
            if lists[node]:
                return epoch, node, lists[node].popleft()
            if self.stealing:
                victims = [j for j in range(self.nodes) if len(lists[j]) > (1 if self.epoch[j] < epoch else 0)]
                if victims:
                    owner = max(victims, key=lambda j: len(lists[j]))
                    return epoch, owner, lists[owner].pop()
            self.epoch[node] += 1
        return None

    def finished(self, epoch: int) -> None:
        """A partition of ``epoch`` has been trained."""
        self.unfinished[epoch] -= 1
