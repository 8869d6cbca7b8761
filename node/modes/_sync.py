"""``mode="sync"``: synchronous parameter averaging (Deeplearning4j's ParameterAveragingTrainingMaster).

Every node trains ``averaging_frequency`` partitions, then all nodes' parameters are averaged and
every node continues from the average: a barrier each round.  It is a user feature (the simplest
rule to reason about: one model, a larger batch) and the baseline the asynchronous modes are
measured against.

Driver half
    The partitions that hold data are dealt round-robin to ``nodes`` slots once per fit (the
    i-th to slot ``i % nodes``) and grouped into one cached Spark partition per slot
    (the slots of every task, :class:`~node._contract.TaskSpec`).  All the
    epochs of a phase are one Spark job of ``nodes`` tasks running at once, each task one node
    for the whole phase (so a node keeps its optimizer state, as one process does).  ``nodes``
    is ``averaging_nodes`` or Spark's default parallelism (never more than the partitions).
    The run record marks the phase's epochs when the job ends: a fit stopped in the middle of
    a sync phase trains that phase again from its start.

Executor half (one task = one node's share of every epoch of the phase)
    Per epoch, rounds of ``averaging_frequency`` of its partitions, in index order.  After each round the
    node writes its parameters as a snapshot (``weights/<phase>/<node>/``, the usual
    authenticated layout, so the phase-end consolidation and a fresh node find them), then a
    signed *round record* naming that snapshot::

        runs/<run>/rounds/<phase>/<fit>-<epoch>-<round>/<slot>.json   {node, version, sha256, mac}

    and waits until every slot of the round has written its record -- the barrier, through the
    store, so it works wherever the store is shared.  It reads the named snapshots (MAC and
    sha256 checked), averages them with its own (sum in float64 / n; one node's average is
    itself, bit for bit) and continues from the average, then takes the outer step from its anchor
    on the average (DiLoCo: every node holds the same anchor and momentum, so they stay one model;
    after its last round a node stores that anchor as its newest snapshot, which the phase
    consolidates).  Optimizer state (momentum) stays local, as in Deeplearning4j without
    ``saveUpdater``.  A slot whose node does not reach the barrier
    within ``barrier_timeout_s`` fails the task with a message that says what to check; a task
    Spark retries (its worker died) fails the job at once (:meth:`SyncMode.check_retried_task`).

A slow node holds every other node at each barrier: that is the price of this mode.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

import storage

from .._contract import PartitionReport, SyncOptions, TaskSpec
from .._errors import InputDataError, TrainingError
from ..data import Block
from ._base import TrainingMode
from ._protocols import ModeDriver, ModeNode, ModeSettings, PartitionWork

__all__ = ["SyncMode", "SyncState", "round_members"]

logger = logging.getLogger(__name__)

_ROUND_CONTEXT = "sparkdbn sync round v1"
_ROUND_RECORD_MAX_BYTES = 4096
_POLL_S = 0.01  # the barrier polls the store: first quickly, then every 0.2 s at most
_MAX_POLL_S = 0.2


def round_members(slots: list[list[int]], frequency: int, round_index: int) -> list[int]:
    """The slots that train in round ``round_index`` (a slot with fewer partitions stops earlier)."""
    return [slot for slot, partitions in enumerate(slots) if math.ceil(len(partitions) / frequency) > round_index]


@dataclass
class SyncState:
    """What ``sync`` keeps on a node between tasks: its last snapshot version per phase."""

    versions: dict[str, int] = field(default_factory=dict)


class SyncMode(TrainingMode):
    name = "sync"
    options_type = SyncOptions

    def options(self, settings: ModeSettings) -> SyncOptions:
        return SyncOptions(averaging_frequency=int(settings.averaging_frequency),
                           barrier_timeout_s=float(settings.barrier_timeout_s))

    # ------------------------------------------------------------------ driver
    def check_nodes(self, nodes: int, slots: int | None, *, master: str) -> None:
        """Every node of a round waits at its barrier for all the others: more nodes than Spark runs at
        once would wait ``barrier_timeout_s`` for a task that cannot start, on every attempt of the task."""
        if slots is not None and nodes > slots:
            raise TrainingError(f"sync mode averages {nodes} nodes at every round's barrier, all running at once, "
                                f"but Spark ({master}) runs at most {slots} tasks at once: set averaging_nodes "
                                f"to at most {slots}, or give the cluster more task slots")

    def run_epochs(self, driver: ModeDriver, phase: str, *, first: int, epochs: int) -> list[list[PartitionReport]]:
        reports = driver.start_job(phase, range(first, epochs), self.options(driver.settings)).reports()
        return [[report for report in reports if report.epoch == epoch] for epoch in range(first, epochs)]

    # ------------------------------------------------------------------ executor
    def check_retried_task(self, task: TaskSpec, slot: int, attempt: int) -> None:
        """A node lost mid-phase (its worker died) cannot be replaced: the other nodes are rounds ahead,
        waiting at a barrier for its record, and the snapshots its rounds named are pruned.  A retry
        read them and failed on a missing file; it now fails the job at once, saying what to do."""
        if attempt > 0:
            raise TrainingError(f"sync: the node of slot {slot} of run {task.node.run} was lost in phase "
                                f"{task.phase} (attempt {attempt + 1} of its task): a sync phase takes no "
                                "replacement node between its rounds; fit again with the same run id to train "
                                "the phase again from its start, or use mode 'async' or 'sharing', which do")

    def train_task(self, node: ModeNode, task: TaskSpec, *, spark_partition: int,
                   blocks: list[Block]) -> Iterator[PartitionReport]:
        slots = [list(partitions) for partitions in task.slots]
        frequency = int(task.options.averaging_frequency)
        blocks = sorted(blocks, key=lambda block: block[0])
        if [block[0] for block in blocks] != slots[spark_partition]:
            raise TrainingError(f"sync slot {spark_partition} of run {task.node.run} holds partitions "
                                f"{[block[0] for block in blocks]}, expected {slots[spark_partition]}")
        for epoch in task.epochs:
            epoch_task = dataclasses.replace(task, epoch=epoch)
            for round_index in range(math.ceil(len(blocks) / frequency)):
                chunk = blocks[round_index * frequency:(round_index + 1) * frequency]
                # The learning rates follow the nodes this round averages (node.modes._scaling).
                averaged = [f"slot-{member}" for member in round_members(slots, frequency, round_index)
                            if member != spark_partition]
                pending = []
                for index, X, y in chunk:
                    started = time.time()
                    try:
                        pending.append((node.train(epoch_task, index, X, y, merged_from=averaged), started))
                    except InputDataError as error:  # reported, not raised: the same data fails on a retry
                        yield node.refusal(epoch_task, index, error)
                        return
                sync_started = time.perf_counter()
                sent, peers, read = self._average(node, epoch_task, spark_partition, slots, frequency, round_index)
                node.outer_step(task.phase)  # DiLoCo: every node steps on the same average from the same anchor
                sync_s = time.perf_counter() - sync_started
                for position, (trained, started) in enumerate(pending):
                    if position < len(pending) - 1:
                        yield node.report(epoch_task, PartitionWork(trained, started))
                    else:  # the round's barrier is charged to its last partition
                        yield node.report(epoch_task, PartitionWork(trained, started, merge_s=sync_s, merged_from=peers,
                                                                    sent_bytes=sent, read_bytes=read))
            node.save_outer(task.phase)
        if node.outer_enabled:  # the phase's result is the anchor of the last outer step, not the round's average
            node.weights.put_version(task.phase, node.name, self._next_version(node, task.phase),
                                     node.model.parameters(task.phase))

    def _average(self, node: ModeNode, task: TaskSpec, slot: int, slots: list[list[int]], frequency: int,
                 round_index: int) -> tuple[int, list[str], int]:
        """Publish this node's round, wait for the round's other nodes, continue from the mean.

        Returns the bytes written, the peers averaged with and the bytes read.
        """
        phase, key = task.phase, task.node.key
        own = node.model.parameters(phase)
        ref = node.weights.put_version(phase, node.name, self._next_version(node, phase), own)
        node.weights.prune(phase, node.name, max(2, task.node.keep_versions))  # a peer reads at most 1 round back
        folder = (f"runs/{task.node.run}/rounds/{phase}/"
                  f"{task.node.fit_id[:12]}-{task.epoch:04d}-{round_index:05d}")
        record = {"node": ref.node, "version": ref.version, "sha256": ref.sha256, "mac": ref.mac}
        node.store.write_bytes(f"{folder}/{slot}.json",
                               storage.sign_json(key, record, _ROUND_CONTEXT, task.node.run, folder))
        sent = sum(int(value.nbytes) for value in own.values())

        members = [member for member in round_members(slots, frequency, round_index) if member != slot]
        peers = self._wait_for_round(node, task, folder, members)
        total = {name: value.astype(np.float64) for name, value in own.items()}
        read = 0
        for peer in peers:
            params = node.weights.get_version(peer)
            for name, value in params.items():
                np.add(total[name], value, out=total[name])
                read += int(value.nbytes)
        if peers:  # one node's average is itself: leave its parameters untouched
            node.model.set_parameters({name: (value / (len(peers) + 1)).astype(own[name].dtype)
                                       for name, value in total.items()})
        return sent, [peer.node for peer in peers], read

    def _wait_for_round(self, node: ModeNode, task: TaskSpec, folder: str,
                        members: list[int]) -> list[storage.SnapshotRef]:
        """The barrier: the snapshot every other member slot wrote for this round (polls the store)."""
        deadline = time.monotonic() + float(task.options.barrier_timeout_s)
        found: dict[int, storage.SnapshotRef] = {}
        pause = _POLL_S
        while True:
            for member in members:
                if member not in found:
                    record = self._read_round_record(node, task, folder, member)
                    if record is not None:
                        found[member] = record
            if len(found) == len(members):
                return [found[member] for member in members]
            if time.monotonic() > deadline:
                missing = sorted(set(members) - set(found))
                raise TrainingError(
                    f"sync mode, run {task.node.run}, phase {task.phase}: slot(s) {missing} did not reach "
                    f"{node.store.url}/{folder} within barrier_timeout_s={task.options.barrier_timeout_s}; "
                    "every node of a round must run at once: set averaging_nodes to at most the number of tasks "
                    "the cluster runs in parallel, and check the executors' logs")
            time.sleep(pause)  # polling the store with a deadline
            pause = min(_MAX_POLL_S, pause * 2)

    @staticmethod
    def _read_round_record(node: ModeNode, task: TaskSpec, folder: str,
                           slot: int) -> storage.SnapshotRef | None:
        path = f"{folder}/{slot}.json"
        try:
            data = node.store.read_bytes(path, max_bytes=_ROUND_RECORD_MAX_BYTES)
        except storage.StoreNotFoundError:
            return None
        except (storage.FileTooLargeError, storage.StoreEntryTypeError) as error:  # no record a node writes
            logger.warning("sync barrier skips %s: %s", path, error)
            return None
        try:
            record = storage.verify_json(task.node.key, data, _ROUND_CONTEXT, task.node.run, folder,
                                         where=f"{node.store.url}/{path}")
        except storage.AuthenticationError as error:  # not written by a node of this run: never acted upon
            logger.warning("sync barrier skips %s: %s", path, error)
            return None
        return storage.SnapshotRef(task.node.run, task.phase, str(record["node"]), int(record["version"]),
                                   str(record["sha256"]), str(record["mac"]))

    @staticmethod
    def _next_version(node: ModeNode, phase: str) -> int:
        """This node's next snapshot version in ``phase``: past any version it (or a same-named node) stored."""
        versions = node.mode_state(SyncState).versions
        if phase not in versions:
            stored = node.weights.list_versions(phase, node.name)
            versions[phase] = stored[-1].version if stored else 0
        versions[phase] += 1
        return versions[phase]
