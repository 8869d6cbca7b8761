"""``mode="async"``: asynchronous merging of fresh peer snapshots (the Impetus design).

Per node, per partition: merge the fresh peer snapshots the node's actor has fetched (at most
``fanout`` of them; ``w <- (1 - a) w + a mean(peers)``, ``a = m / (m + 1)``), train one pass --
merging the same way, between two minibatches, each snapshot fetched while it trains (at most
``fanout`` peers in all per partition; not where the node takes the outer step, see
:func:`merges_between_minibatches`) -- take the outer step on what the partition's training
changed (:meth:`~node.modes.ModeNode.outer_step`, NoLoCo-like; a merge moves the step's anchor with
the weights) -- publish the new weights and wait until they are
written (so that the driver finds every finished task's snapshot when it consolidates), then
report, naming the version written.  Nobody waits for a peer: only for reads of versions already announced, before the
partition.

Driver half: an epoch is one Spark job of one task per node, each task holding the partitions
dealt to its node once per fit (its slot, :class:`~node._contract.TaskSpec`): Spark's cost per task is
paid once per node and epoch, not once per partition.  A node trains its own partitions, then
the ones a slower node has not started (:mod:`node.modes._stealing`), so a slow node holds nobody for
more than the partition it is training when the others run out.  The next epoch's job is queued
behind the running one (:meth:`~node.modes.ModeDriver.queue_job`): a node that ran out of partitions
starts the next epoch at once -- taking the share of a node still busy with the last, once it
has trained its own -- instead of waiting for the job's last partition and for the driver to
start the next job.  So no node idles between epochs, and the driver ends each epoch (its
summary, validation, the run record) while the nodes train the next: it validates the epoch on the
versions its reports name, which each node keeps from pruning until it has ended three more tasks
(:meth:`actors.NodeHandle.hold_published`), not on the newer ones the next epoch writes.  The run record marks each
epoch when its job ends: a fit stopped in the middle of a phase resumes at its last finished
epoch, and a killed worker's task is retried on a fresh node that trains again only the
partitions the dead one had claimed and not finished.
"""

from __future__ import annotations

import time
from typing import Iterator

import numpy as np

import actors

from .._contract import AsyncOptions, PartitionReport, TaskSpec
from .._errors import InputDataError
from ..data import Block
from ._base import TrainingMode
from ._protocols import ModeDriver, ModeNode, ModeSettings, PartitionWork
from ._stealing import PartitionQueue

__all__ = ["AsyncMode"]


class AsyncMode(TrainingMode):
    name = "async"
    options_type = AsyncOptions
    epoch_per_job = True

    def merge_fanout(self, settings: ModeSettings) -> int | None:
        return settings.fanout  # gossip when set: a node merges at most this many peers

    def options(self, settings: ModeSettings) -> AsyncOptions:
        return AsyncOptions()

    def run_epochs(self, driver: ModeDriver, phase: str, *, first: int, epochs: int) -> list[list[PartitionReport]]:
        options = self.options(driver.settings)
        job = driver.take_queued_job(phase, first) or driver.start_job(phase, range(first, first + 1), options)
        if first + 1 < epochs:  # queued behind this epoch's job: a node that ends its share starts the next at once
            driver.queue_job(job, phase, epochs=range(first + 1, first + 2), options=options)
        return [job.reports()]

    def train_task(self, node: ModeNode, task: TaskSpec, *, spark_partition: int,
                   blocks: list[Block]) -> Iterator[PartitionReport]:
        queue = PartitionQueue(node, task, spark_partition, blocks)
        for (index, X, y), stolen in queue.epoch(task.epoch):
            try:
                yield self.train_partition(node, task, index, X, y, stolen=stolen,
                                            data_read_bytes=node.data.take_read_bytes())
            except InputDataError as error:  # reported, not raised: the same data fails on a retry
                yield node.refusal(task, index, error)
        node.save_outer(task.phase)  # once per task: a node that starts later continues the momentum
        # The epoch's last version stays while the driver validates it: the node may train the next epoch meanwhile.
        node.handle.hold_published(task.phase)

    def train_partition(self, node: ModeNode, task: TaskSpec, partition: int, X: np.ndarray,
                        y: np.ndarray | None, *, stolen: bool = False, data_read_bytes: int = 0) -> PartitionReport:
        started = time.time()
        tick = time.perf_counter()
        # Unusable peer snapshots are skipped and counted by the actor (stats: dropped_bad_snapshot);
        # a MergeError here means this node's own weights diverged on an earlier partition (reported
        # then): this one is refused saying so, as every later one, and Spark retries no task.
        try:
            before = _merge_fresh(node, task)
        except actors.MergeError as error:
            raise InputDataError(f"training diverged on node {node.name} before this partition: {error}") from error
        merge_s = time.perf_counter() - tick

        during: list = []  # the snapshots merged while the partition trains
        fanout = task.node.fanout

        def merge_fetched() -> None:  # between minibatches: what arrived while this partition trains
            nonlocal merge_s
            if not node.handle.has_fresh() or (fanout is not None and len(before) + len(during) >= fanout):
                return
            tick = time.perf_counter()
            during.extend(_merge_fresh(node, task, wait_s=0.0))
            merge_s += time.perf_counter() - tick

        if merges_between_minibatches(node):
            node.model.set_minibatch_hook(merge_fetched)
        try:
            trained = node.train(task, partition, X, y, merged_from=[snapshot.node for snapshot in before])
        finally:
            node.model.set_minibatch_hook(None)
        node.also_merged(snapshot.node for snapshot in during)
        used = before + during
        node.outer_step(task.phase)  # on what this partition's training changed

        tick = time.perf_counter()
        params = node.model.parameters(task.phase)
        node.handle.publish(task.phase, params, trained.samples_seen)
        node.handle.flush(timeout_s=task.node.flush_timeout_s)
        publish_s = time.perf_counter() - tick
        return node.report(task, PartitionWork(
            trained, started, merge_s=merge_s, publish_s=publish_s,
            merged_from=[snapshot.node for snapshot in used],
            ages_s=[max(0.0, started - float(snapshot.sent_at)) for snapshot in used],
            merged_announced=sum(1 for snapshot in used if snapshot.announced),
            sent_bytes=sum(int(value.nbytes) for value in params.values()),
            read_bytes=sum(int(value.nbytes) for snapshot in used for value in snapshot.params.values()),
            stolen=stolen, data_read_bytes=data_read_bytes, version=node.handle.published_version(task.phase)))


def merges_between_minibatches(node: ModeNode) -> bool:
    """Whether ``node`` merges, between two minibatches of a partition, what its actor fetched meanwhile.

    Not where it takes the outer step.  A merge there comes after training the step has not taken yet:
    the merge averages that progress with the peers', and the anchor moving with the merge leaves it
    whole in the step's change, so the step adds it again on top of its averaged share.  Merged before a
    partition, where the last step left nothing pending, a snapshot counts once.  So with the step a node
    merges before each partition only, as DiLoCo's and NoLoCo's replicas average at outer steps only.
    Measured in ``scripts/bench_simulate.py``: 784-64-10 DBN on digits28, a core per node, 5 seeds, outer
    step 0.7/0.8. With merges between minibatches, 8 nodes ended 5.1 points below one node and 16 nodes
    17.2 points below. Before each partition only: 1.2 and 1.8 points below. Plain merging, between
    minibatches as well: 2.2 and 3.9 points below.
    """
    return not node.outer_enabled


def _merge_fresh(node: ModeNode, task: TaskSpec, **wait: float) -> list:
    """Merge the fresh peer snapshots into the node's weights (its outer step's anchor moves with them).

    ``wait``: the actor's ``wait_s`` for snapshots announced but not fetched yet (its own default when
    not given).  Returns the snapshots merged.
    """
    own = node.model.parameters(task.phase)
    merged, used = node.handle.merge(task.phase, own, task.node.merge_alpha, **wait)
    if used:
        node.adopt_merge(task.phase, own, merged)
    return used
