"""``mode="async"``: asynchronous merging of fresh peer snapshots (the Impetus design).

Per node, per partition: merge the fresh peer snapshots the node's actor has fetched (at most
``fanout`` of them; ``w <- (1 - a) w + a mean(peers)``, ``a = m / (m + 1)``), train one pass --
merging the same way, between two minibatches, each snapshot fetched while it trains (at most
``fanout`` peers in all per partition) -- publish the new weights and wait until they are
written (so that the driver finds every finished task's snapshot when it consolidates), then
report.  Nobody waits for a peer: only for reads of versions already announced, before the
partition.  On the driver an epoch is one Spark job over the cached partitions.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from ._contract import PartitionReport, TaskSpec
from ._mode import TrainingMode

if TYPE_CHECKING:
    from ._executor import ExecutorNode
    from ._fit import Fit
    from ._settings import TrainingSettings

__all__ = ["AsyncMode"]


class AsyncMode(TrainingMode):
    name = "async"

    def merge_fanout(self, settings: "TrainingSettings") -> int | None:
        return settings.fanout  # gossip when set: a node merges at most this many peers

    def run_epochs(self, fit: "Fit", phase: str, first: int, epochs: int) -> list[list[PartitionReport]]:
        return [fit.run_partitions(fit.task(phase, first, self.name))]

    def train_partition(self, node: "ExecutorNode", task: TaskSpec, partition: int, X: np.ndarray,
                        y: np.ndarray | None) -> PartitionReport:
        started = time.time()
        tick = time.perf_counter()
        # Unusable peer snapshots are skipped and counted by the actor (stats: dropped_bad_snapshot);
        # a MergeError here means this node's own weights diverged, and the task fails saying so.
        merged, before = node.handle.merge(task.phase, node.model.parameters(task.phase), task.node.merge_alpha)
        if before:
            node.model.set_parameters(merged)
        merge_s = time.perf_counter() - tick

        during: list = []  # the snapshots merged while the partition trains
        fanout = task.node.fanout

        def merge_fetched() -> None:  # between minibatches: what arrived while this partition trains
            nonlocal merge_s
            if not node.handle.has_fresh() or (fanout is not None and len(before) + len(during) >= fanout):
                return
            tick = time.perf_counter()
            merged, used = node.handle.merge(task.phase, node.model.parameters(task.phase), task.node.merge_alpha,
                                             wait_s=0.0)
            if used:
                node.model.set_parameters(merged)
                during.extend(used)
            merge_s += time.perf_counter() - tick

        node.model.set_minibatch_hook(merge_fetched)
        try:
            metrics = node.train(task, partition, X, y, merged_from=[snapshot.node for snapshot in before])
        finally:
            node.model.set_minibatch_hook(None)
        node.scaling.also_merged(snapshot.node for snapshot in during)
        used = before + during

        tick = time.perf_counter()
        params = node.model.parameters(task.phase)
        node.handle.publish(task.phase, params, node.samples_seen[task.phase])
        node.handle.flush(timeout_s=task.node.flush_timeout_s)
        publish_s = time.perf_counter() - tick
        return node.report(task, partition, metrics, started, merge_s=merge_s, publish_s=publish_s,
                           merged_from=[snapshot.node for snapshot in used],
                           merged_announced=sum(1 for snapshot in used if snapshot.announced),
                           ages_s=[max(0.0, started - float(snapshot.sent_at)) for snapshot in used],
                           sent_bytes=sum(int(value.nbytes) for value in params.values()),
                           read_bytes=sum(int(value.nbytes) for snapshot in used for value in snapshot.params.values()))
