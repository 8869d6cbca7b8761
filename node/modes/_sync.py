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
    The job is a Spark *barrier stage* where Spark can run one (not under dynamic allocation): its
    tasks start all at once or not at all, so two sync fits of one session never each hold half
    the task slots.  When a node is lost the job fails, and the driver runs it again as its next
    attempt, continuing from the last round every node completed (:mod:`node.modes._sync_rounds`,
    :data:`JOB_ATTEMPTS`).  The run record marks the phase's epochs when the job ends: a fit stopped
    in the middle of a sync phase trains that phase again from its start.

Executor half (one task = one node's share of every epoch of the phase)
    Per epoch, rounds of ``averaging_frequency`` of its partitions, in index order.  After each round the
    node writes its parameters as a snapshot (``weights/<phase>/<node>/``, the usual
    authenticated layout, so the phase-end consolidation and a fresh node find them), then a
    signed *round record* naming that snapshot::

        runs/<run>/rounds/<phase>/<fit>-<first epoch>/<attempt>/<epoch>-<round>/<slot>.json
            {node, version, sha256, mac, epoch, round, trained: [[partition, samples, loss], ...]}

    and waits until every slot of the round has written its record -- the barrier, through the
    store, so it works wherever the store is shared.  It reads the named snapshots (MAC and
    sha256 checked), averages them with its own (sum in float64 / n; one node's average is
    itself, bit for bit) and continues from the average, then takes the outer step from its anchor
    on the average (DiLoCo: every node holds the same anchor and momentum, so they stay one model;
    after its last round a node stores that anchor as its newest snapshot, which the phase
    consolidates).  Optimizer state (momentum) stays local, as in Deeplearning4j without
    ``saveUpdater`` (a new attempt of the job starts them afresh).  A slot whose node does not reach
    the barrier within ``barrier_timeout_s`` fails the task with a message that says what to check.
    A task Spark runs again (its node lost) fails at once: it cannot join peers rounds ahead
    (:class:`SyncNodeLost`).

A slow node holds every other node at each barrier: that is the price of this mode.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

import storage

from .._contract import PartitionReport, SyncOptions, SyncResume, TaskSpec
from .._errors import STORE_FAILURES, InputDataError, TrainingError, error_chain
from ..data import Block
from ._base import TrainingMode
from ._protocols import ModeDriver, ModeNode, ModeSettings, PartitionWork
from ._sync_rounds import RoundPlace, RoundRecord, SyncJob, SyncNodeLost, TrainedFigures

__all__ = ["JOB_ATTEMPTS", "SyncMode", "SyncState"]

logger = logging.getLogger(__name__)

#: At most this many runs of a sync job when nodes are lost (the first and the ones after; Spark's own
#: ``spark.stage.maxConsecutiveAttempts`` is 4 as well).
JOB_ATTEMPTS = 4
_POLL_S = 0.01  # the barrier polls the store: first quickly, then every 0.2 s at most
_MAX_POLL_S = 0.2


class _PeerMissing(TrainingError):
    """A round's peer did not reach the barrier in time: never recorded as the job's failure, since a lost node
    looks so to its peers (where it was lost, Spark's run of its task again says so: :class:`SyncNodeLost`)."""


class _AttemptFailed(TrainingError):
    """Another slot recorded the attempt's failure while this one waited at a barrier: already recorded."""


def _node_lost(error: BaseException) -> bool:
    """Whether a Spark job failed because a run of a task again found its slot claimed (:class:`SyncNodeLost`):
    a node was lost.  Not a cancelled job (the fit stopping, its lease lost), nor peers missing at a barrier
    alone (they did not start, or hang: another attempt would wait for them again)."""
    return any(SyncNodeLost.__name__ in str(link) for link in error_chain(error))


_LOST_SLOT = re.compile(r"Spark ran the task of slot (\d+) of attempt (\d+) again")


def _lost_node(error: BaseException) -> str:
    """Which node was lost, in a few words: the slot whose task Spark ran again, not the job's whole failure
    (Spark's and Py4J's text, a Java stack trace, around the node's own message)."""
    for link in error_chain(error):
        found = _LOST_SLOT.search(str(link))
        if found is not None:
            return f"the sync node of slot {found[1]} was lost (Spark ran its task of attempt {found[2]} again)"
    return "a sync node was lost (Spark ran its task again)"


@dataclass
class SyncState:
    """What ``sync`` keeps on a node between tasks: its last snapshot version per phase."""

    versions: dict[str, int] = field(default_factory=dict)


class SyncMode(TrainingMode):
    name = "sync"
    options_type = SyncOptions
    joins_from_store = False  # all nodes start together, from one point (a resumed attempt: a round's mean)

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
        """The phase's epochs as one job (a barrier stage where Spark can run one: its tasks start together).

        When the job fails because a node was lost, it runs again as the job's next attempt, continuing
        from the last round every node completed (:mod:`node.modes._sync_rounds`), at most
        :data:`JOB_ATTEMPTS` times in all.
        """
        gang = driver.gang_scheduling
        options = self.options(driver.settings)
        while True:
            job = driver.start_job(phase, range(first, epochs), options, gang=gang)
            try:
                reports = job.reports()
                break
            except TrainingError as error:
                options = self._next_attempt(driver, job.task, error)
        return [[report for report in reports if report.epoch == epoch] for epoch in range(first, epochs)]

    @staticmethod
    def _next_attempt(driver: ModeDriver, task: TaskSpec, error: TrainingError) -> SyncOptions:
        """The options of the job's next attempt after ``error``; raises where another attempt would not help."""
        options = task.options
        failed = SyncJob(driver.store, task, options.attempt)
        failure = failed.failure()
        if failure is not None:  # the same error again on any attempt: said once, plainly
            raise failed.failure_error(failure) from error
        if not _node_lost(error) or options.attempt + 1 >= JOB_ATTEMPTS:
            raise error
        resume = SyncJob(driver.store, task, options.attempt + 1).resume_point()
        where = ("from its start" if resume is None else
                 f"from epoch {resume.epoch + 1} round {resume.round + 1} of attempt {resume.attempt}")
        logger.warning("run %s, phase %s: %s; the job runs again %s (attempt %d of %d)", task.node.run, task.phase,
                       _lost_node(error), where, options.attempt + 2, JOB_ATTEMPTS)
        return dataclasses.replace(options, attempt=options.attempt + 1, resume=resume)

    # ------------------------------------------------------------------ executor
    def node_unavailable(self, task: TaskSpec, spark_partition: int, error: BaseException) -> None:
        """Record ``error`` as the attempt's failure: the other slots' barriers end on it, not on their timeout."""
        store = storage.open_store(task.node.store_url, retry_timeout_s=task.node.store_retry_timeout_s)
        SyncJob(store, task, task.options.attempt).record_failure(error)

    def train_task(self, node: ModeNode, task: TaskSpec, *, spark_partition: int,
                   blocks: list[Block]) -> Iterator[PartitionReport]:
        slots = [list(partitions) for partitions in task.slots]
        blocks = sorted(blocks, key=lambda block: block[0])
        if [block[0] for block in blocks] != slots[spark_partition]:
            raise TrainingError(f"sync slot {spark_partition} of run {task.node.run} holds partitions "
                                f"{[block[0] for block in blocks]}, expected {slots[spark_partition]}")
        job = SyncJob(node.store, task, task.options.attempt)
        if not job.claim(spark_partition):  # Spark ran this task again: its node was lost mid-job
            raise job.lost_node_error(spark_partition)
        try:
            yield from self._train_attempt(node, task, job, spark_partition, blocks)
        except (_PeerMissing, _AttemptFailed, *STORE_FAILURES):
            # what a lost node looks like from its peers: no failure of the job's own; nor is a store down,
            # refusing the run or full (recording it would wait out the outage once more; the task reports it);
            # another slot's failure is recorded already
            raise
        except Exception as error:  # the next attempt would fail alike: the driver raises it instead
            job.record_failure(error)
            raise

    def _train_attempt(self, node: ModeNode, task: TaskSpec, job: SyncJob, slot: int,
                       blocks: list[Block]) -> Iterator[PartitionReport]:
        """The slot's share of the job, from its start or from where the attempt resumes."""
        frequency = int(task.options.averaging_frequency)
        resume = task.options.resume
        resumed_at = RoundPlace(task.epoch, -1)
        origin = ""
        if resume is not None:
            resumed_at = RoundPlace(resume.epoch, resume.round)
            self._continue_from(node, task, job, resume)
            origin = f"resumed(epoch {resume.epoch + 1} round {resume.round + 1} of attempt {resume.attempt})"
        self._publish(node, task, job, None, slot, [], started_at=resumed_at)
        for epoch in task.epochs:
            epoch_task = dataclasses.replace(task, epoch=epoch)
            trained_any = False
            for round_index in range(math.ceil(len(blocks) / frequency)):
                chunk = blocks[round_index * frequency:(round_index + 1) * frequency]
                place = RoundPlace(epoch, round_index)
                if place <= resumed_at:  # trained by an earlier attempt: its figures, reported again
                    for report in self._earlier_reports(node, epoch_task, job, place, slot, chunk, origin):
                        origin = ""
                        yield report
                    continue
                trained_any = True
                yield from self._train_round(node, epoch_task, job, place, slot, chunk)
            if trained_any:
                node.save_outer(task.phase)
        if node.outer_enabled:  # the phase's result is the anchor of the last outer step, not the round's average
            node.weights.put_version(task.phase, node.name, self._next_version(node, task.phase),
                                     node.model.parameters(task.phase))

    def _train_round(self, node: ModeNode, task: TaskSpec, job: SyncJob, place: RoundPlace, slot: int,
                     chunk: list[Block]) -> Iterator[PartitionReport]:
        """Train the round's partitions, average with the round's other nodes, report each partition."""
        members = job.members(place)
        # The learning rates follow the nodes this round averages (node.modes._scaling).
        averaged = [f"slot-{member}" for member in members if member != slot]
        pending, trained = [], []
        for index, X, y in chunk:
            started = time.time()
            try:
                item = node.train(task, index, X, y, merged_from=averaged)
            except InputDataError as error:  # reported, not raised: the same data fails on a retry
                yield node.refusal(task, index, error)
                return
            pending.append((item, started))
            trained.append((item.partition, int(item.metrics["samples"]), float(item.metrics["loss"]),
                            float(item.learning_rate_scale), int(item.nodes_merging)))
        sync_started = time.perf_counter()
        sent = self._publish(node, task, job, place, slot, trained)
        peers, read = self._average(node, task, job, place, [member for member in members if member != slot])
        # Past the barrier every member has read what it started from: the snapshots before this round's may go.
        node.weights.prune(task.phase, node.name, max(2, task.node.keep_versions))
        node.outer_step(task.phase)  # DiLoCo: every node steps on the same average from the same anchor
        sync_s = time.perf_counter() - sync_started
        for position, (item, started) in enumerate(pending):
            if position < len(pending) - 1:
                yield node.report(task, PartitionWork(item, started))
            else:  # the round's barrier is charged to its last partition
                yield node.report(task, PartitionWork(item, started, merge_s=sync_s, merged_from=peers,
                                                      sent_bytes=sent, read_bytes=read))

    def _publish(self, node: ModeNode, task: TaskSpec, job: SyncJob, place: RoundPlace | None, slot: int,
                 trained: list[TrainedFigures], started_at: RoundPlace | None = None) -> int:
        """Store this node's parameters and record them for the round at ``place`` (None: the attempt's start).

        Returns the bytes written.
        """
        own = node.model.parameters(task.phase)
        ref = node.weights.put_version(task.phase, node.name, self._next_version(node, task.phase), own)
        job.write_record(place, slot, ref, trained, started_at=started_at)
        return sum(int(value.nbytes) for value in own.values())

    def _average(self, node: ModeNode, task: TaskSpec, job: SyncJob, place: RoundPlace,
                 members: list[int]) -> tuple[list[str], int]:
        """Wait for the round's other nodes, continue from the mean.  Returns the peers averaged with, bytes read."""
        own = node.model.parameters(task.phase)
        peers = [record.ref for record in self._wait_for_round(node, task, job, place, members)]
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
        return [peer.node for peer in peers], read

    def _continue_from(self, node: ModeNode, task: TaskSpec, job: SyncJob, resume: SyncResume) -> None:
        """Take the mean of the snapshots of the round an earlier attempt completed (every node the same mean:
        summed in slot order), and anchor the outer step there."""
        place = RoundPlace(resume.epoch, resume.round)
        at = None if resume.start else place
        members = job.members(place if at is not None else RoundPlace(place.epoch, -1))
        where = (f"{node.store.url}/{job.root}/{resume.attempt}: epoch {place.epoch + 1} round {place.round + 1}, "
                 "which the driver continues from,")
        total: dict[str, np.ndarray] = {}
        dtypes = {name: value.dtype for name, value in node.model.parameters(task.phase).items()}
        for member in members:
            record = job.read_record(resume.attempt, at, member)
            if record is None:
                raise TrainingError(f"sync, run {task.node.run}, phase {task.phase}: {where} has no record of "
                                    f"slot {member} any more")
            try:
                params = node.weights.get_version(record.ref)
            except STORE_FAILURES:  # nothing wrong with the snapshot:
                raise  # the task reports the store's failure
            except storage.StoreError as error:
                raise TrainingError(f"sync, run {task.node.run}, phase {task.phase}: {where} names a snapshot "
                                    f"of slot {member} that does not read back: {error}") from error
            for name, value in params.items():
                total[name] = total[name] + value if name in total else value.astype(np.float64)
        node.model.set_parameters({name: (value / len(members)).astype(dtypes.get(name, value.dtype))
                                   for name, value in total.items()})
        node.restart_outer(task.phase)

    def _earlier_reports(self, node: ModeNode, task: TaskSpec, job: SyncJob, place: RoundPlace, slot: int,
                         chunk: list[Block], origin: str) -> Iterator[PartitionReport]:
        """This slot's partitions of a round an earlier attempt trained, reported again from its round record."""
        record = job.earlier_round(task.options.resume, place, slot)
        figures = {item[0]: item for item in (record.trained if record else ())}
        peers = len(job.members(place)) - 1  # the round averaged them after its last partition, as _train_round does
        for position, (index, X, _y) in enumerate(chunk):
            if index not in figures:
                logger.warning("sync, run %s: no record says what partition %d scored in epoch %d round %d; "
                               "reported without a loss", task.node.run, index, place.epoch + 1, place.round + 1)
            _partition, samples, loss, scale, nodes = figures.get(index, (index, len(X), float("nan"), 1.0, 1))
            yield node.report_earlier(task, index, samples, loss, origin, merged=peers if position == len(chunk) - 1
                                      else 0, learning_rate_scale=scale, nodes_merging=nodes)
            origin = ""

    def _wait_for_round(self, node: ModeNode, task: TaskSpec, job: SyncJob, place: RoundPlace,
                        members: list[int]) -> list[RoundRecord]:
        """The barrier: the record every other member slot wrote for this round (polls the store)."""
        deadline = time.monotonic() + float(task.options.barrier_timeout_s)
        found: dict[int, RoundRecord] = {}
        pause = _POLL_S
        while True:
            for member in members:
                if member not in found:
                    record = job.read_record(job.attempt, place, member)
                    if record is not None:
                        found[member] = record
            if len(found) == len(members):
                return [found[member] for member in members]
            failure = job.failure()
            if failure is not None:  # a slot failed in a way any attempt would (its node cannot start): no round
                raise _AttemptFailed(str(job.failure_error(failure)))
            if time.monotonic() > deadline:
                missing = sorted(set(members) - set(found))
                raise _PeerMissing(
                    f"sync mode, run {task.node.run}, phase {task.phase}: slot(s) {missing} did not reach "
                    f"{node.store.url}/{job.round_folder(place)} within barrier_timeout_s="
                    f"{task.options.barrier_timeout_s}; every node of a round must run at once: set averaging_nodes "
                    "to at most the number of tasks the cluster runs in parallel, and check the executors' logs")
            time.sleep(pause)  # polling the store with a deadline
            pause = min(_MAX_POLL_S, pause * 2)

    @staticmethod
    def _next_version(node: ModeNode, phase: str) -> int:
        """This node's next snapshot version in ``phase``: past any version it (or a same-named node) stored."""
        versions = node.mode_state(SyncState).versions
        if phase not in versions:
            stored = node.weights.list_versions(phase, node.name)
            versions[phase] = stored[-1].version if stored else 0
        versions[phase] += 1
        return versions[phase]
