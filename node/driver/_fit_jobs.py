"""The Spark side of one fit: its slots, its start broadcasts and the training jobs of each phase.

:class:`FitJobs` is what a training mode's driver half works with (it has all that
:class:`~node.modes.ModeDriver` asks for), and what :class:`~node.driver.Fit` asks to train a
phase (:meth:`FitJobs.begin_phase`, :meth:`FitJobs.end_phase`) and to clean up (:meth:`close`).

Every training job runs one Spark task per node.  The partitions that hold data are dealt to
the nodes once per fit (:func:`deal_partitions`: each node's *slot*), and before the fit's first
training job every partition is in the store (:mod:`node.executor._resident`): the driver writes
the numpy rows it holds (:meth:`FitJobs.store_partitions`); other data was stored by the job that
read and checked it.  A job's RDD is the slots' numbers only, and each node takes its slot's
partitions from its memory or the store.
"""

from __future__ import annotations

import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

import storage

from .._contract import ModeOptions, NodeConfig, TaskSpec, encode, params_digest
from .._errors import TrainingError, short_error
from ..data import PreparedData, filled_partitions
from ..executor import release_run_task, run_training_task, write_partition
from ..run import RunRecord
from ._fit_state import FitState
from ._progress import EpochProgress
from ._session import dynamic_allocation
from ._settings import TrainingSettings
from ._timings import FitTimings
from ._training_job import TrainingJob

if TYPE_CHECKING:
    from pyspark import Broadcast, SparkContext

__all__ = ["FitJobs", "deal_partitions"]

logger = logging.getLogger(__name__)

#: Partitions the driver writes to the store at once (hashing and writing release the GIL).
WRITE_THREADS = 4


def deal_partitions(rows_per_partition: list[int], nodes: int) -> list[list[int]]:
    """The partitions holding data, dealt round-robin to ``nodes`` slots (fewer when there are fewer)."""
    filled = filled_partitions(rows_per_partition)
    count = max(1, min(int(nodes), len(filled)))
    return [filled[slot::count] for slot in range(count)]


class FitJobs:
    """The training jobs of one fit (see the module docstring); constructing it starts nothing.

    Parameters
    ----------
    sc : SparkContext
    state : FitState
        The fit's values: its run, nodes (tasks per training job) and phases.
    settings : TrainingSettings
    prepared : PreparedData
        The fit's checked partitions (held on the driver, or stored by the job that read them).
    node_config : NodeConfig
        What every task of the fit carries.
    record : RunRecord
        The run's record (the nodes of each phase's last finished epoch).
    store : storage.Store
    timings : FitTimings, optional
        The fit's (storing the partitions is a step of it).
    """

    def __init__(self, sc: SparkContext, *, state: FitState, settings: TrainingSettings, prepared: PreparedData,
                 node_config: NodeConfig, record: RunRecord, store: storage.Store,
                 timings: FitTimings | None = None) -> None:
        self.sc, self._settings, self._nodes = sc, settings, int(state.nodes)
        self.prepared, self.node_config, self.record, self.phases, self._store = (prepared, node_config, record,
                                                                                  state.phases, store)
        self.run_id, self.fit_id = state.run_id, state.fit_id
        self._timings = timings or FitTimings()
        self._stored = False  # the fit's partitions are in the store (store_partitions)
        self._slots: tuple[tuple[int, ...], ...] | None = None  # dealt on first use
        self._slot_numbers: Any = None  # the RDD of every job: the slots' numbers
        self._broadcasts: list[Broadcast] = []
        self._start: Broadcast | None = None
        self._start_digest = ""
        self._planned_epochs = 0  # the phase's epochs in the run's plan (begin_phase)
        self._start_versions: dict[str, int] = {}  # what the phase's first job starts from (begin_phase)
        self._progress: EpochProgress | None = None
        self._queued: TrainingJob | None = None  # a job started behind the running one (queue_job)
        self._nodes_started = False
        self._say_once = storage.SayOnce(logger, repeats_at=None)

    # ------------------------------------------------------------------ what a mode's driver half uses
    @property
    def settings(self) -> TrainingSettings:
        return self._settings

    @property
    def nodes(self) -> int:
        """Nodes training at once: ``averaging_nodes``, else Spark's default parallelism (a node per task slot)."""
        return self._nodes

    @property
    def store(self) -> storage.Store:
        """The run's store."""
        return self._store

    @property
    def gang_scheduling(self) -> bool:
        """Whether a job may be one barrier stage: Spark's barrier mode does not take dynamic allocation."""
        return not dynamic_allocation(dict(self.sc.getConf().getAll()))

    def start_job(self, phase: str, epochs: range, options: ModeOptions, *, gang: bool = False) -> TrainingJob:
        """Start the job that trains ``epochs`` of ``phase``: one task per node, over the slots' numbers.

        ``gang``: as one barrier stage, which Spark starts all at once and, when a task fails, runs again
        whole.  A shuffle of the reports (a few kB) follows it: Spark runs again a barrier stage that feeds
        a shuffle, not one whose results it returns, and a sync task run again says what the driver needs
        to know, that a node was lost (:class:`~node.modes._sync_rounds.SyncNodeLost`).
        """
        self.store_partitions()
        slots = self._dealt()
        self._nodes_started = True
        task = TaskSpec(node=self.node_config, mode=self._settings.mode, phase=phase,
                        phase_index=self.phases.index(phase), epoch=epochs.start, end_epoch=epochs.stop,
                        start_digest=self._start_digest, slots=slots, options=options,
                        start_nodes=tuple(self.record.nodes(phase)), planned_epochs=self._planned_epochs,
                        start_versions=self._start_versions)
        self._start_versions = {}  # a later job's new nodes start from the newest snapshots
        body = functools.partial(run_training_task, encode(task), self._start)
        if gang:
            rdd = self._slot_numbers.barrier().mapPartitionsWithIndex(body).repartition(len(slots))
        else:
            rdd = self._slot_numbers.mapPartitionsWithIndex(body)
        span = (f"epoch {epochs.start + 1}" if len(epochs) == 1 else
                f"epochs {epochs.start + 1}-{epochs.stop}")  # a sync job trains its phase's epochs as one
        job = self._progress.start(rdd, f"{self.run_id} {phase} {span}")
        return TrainingJob(self._progress, task, job=job, prepared=self.prepared, store=self._store, fit_id=self.fit_id)

    def queue_job(self, running: TrainingJob, phase: str, *, epochs: range, options: ModeOptions) -> None:
        """Start the job of ``epochs`` behind ``running``: its tasks take the task slots as ``running``'s free them."""
        running.job.submitted()  # each job counts its own tasks: the group's first after it (node.driver._progress)
        self._queued = self.start_job(phase, epochs, options)
        self._queued.job.submitted()

    def take_queued_job(self, phase: str, epoch: int) -> TrainingJob | None:
        """The job queued for ``epoch`` of ``phase`` (:meth:`queue_job`), else None (one queued for another stops)."""
        job, self._queued = self._queued, None
        if job is not None and (job.task.phase, job.task.epoch) != (phase, epoch):
            job.stop()
            return None
        return job

    @property
    def job_queued(self) -> bool:
        """Whether a job is queued behind the running one (:meth:`queue_job`): the executors stay busy."""
        return self._queued is not None

    def warn_once(self, message: str) -> None:
        """Log ``message`` as a warning of the run, once per fit."""
        self._say_once.say(message, "run %s: %s", self.run_id, message)

    # ------------------------------------------------------------------ what the fit uses
    def begin_phase(self, phase: str, whole: Mapping[str, np.ndarray], *, progress: EpochProgress,
                    planned_epochs: int = 0) -> None:
        """Broadcast ``whole`` (the model, with the phase's start) for the jobs of ``phase``, shown on ``progress``;
        its tasks carry the phase's ``planned_epochs`` (the run record's, resumed or not: 0, not said)."""
        self._planned_epochs = int(planned_epochs)
        # The fit's first job of the phase starts where the record says its last epoch ended (TaskSpec).
        self._start_versions = self.record.versions(phase)
        payload = storage.encode_params(dict(whole), f"start of phase {phase}")
        self._start = self.sc.broadcast(payload)
        self._broadcasts.append(self._start)
        self._start_digest = params_digest(whole)
        self._progress = progress

    def stop_queued(self) -> None:
        """End the job queued behind the running one without waiting for it (early stopping ended the phase)."""
        if self._queued is not None:
            self._queued.stop()
        self._queued = None

    def end_phase(self) -> None:
        """The phase's jobs are over: a job left queued by an error is cancelled with the others when the fit ends."""
        self._queued = None
        self._progress = None

    def close(self) -> None:
        """Stop the fit's nodes (best effort) and drop its broadcasts; the caller cancels the fit's job group first."""
        if self._nodes_started:
            self._release_nodes()
        for broadcast in self._broadcasts:
            broadcast.destroy()

    def store_partitions(self) -> None:
        """Have every training partition in the store under its signed name, once per fit: the driver writes
        the numpy rows it holds, and drops them; other data was stored by the job that read it.

        Raises
        ------
        TrainingError
            The prepared data is neither held nor stored (prepared without the fit's block sink).
        """
        if self._stored:
            return
        if self.prepared.held is not None:
            with self._timings.step("store the training partitions"):
                with ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="sparkdbn-store-partition") as pool:
                    written = sum(pool.map(lambda block: write_partition(self._store, self.node_config, *block),
                                           self.prepared.held))
                logger.info("run %s: the driver stored %d training partitions (%.1f MB)", self.run_id,
                            len(self.prepared.held), written / 1e6)
                self.prepared.unpersist()
        elif not self.prepared.stored:
            raise TrainingError(f"run {self.run_id}: the training data ({self.prepared.source}) was prepared "
                                "without the fit's block sink: its partitions are neither held nor stored")
        self._stored = True

    # ------------------------------------------------------------------ helpers
    def _dealt(self) -> tuple[tuple[int, ...], ...]:
        """The slots, dealt once per fit."""
        if self._slots is None:
            slots = deal_partitions(self.prepared.rows_per_partition, self._nodes)
            self._slots = tuple(tuple(slot) for slot in slots)
            self._slot_numbers = self.sc.parallelize(range(len(slots)), len(slots))
        return self._slots

    def _release_nodes(self) -> None:
        """Best effort: ask the Python workers to stop this run's nodes (a later fit stops them anyway), their last
        store calls retried no longer than the driver's (none after its store failed: node.driver._fit)."""
        slots = max(2, 2 * self.sc.defaultParallelism)
        try:
            released = self.sc.parallelize(range(slots), slots).mapPartitionsWithIndex(
                functools.partial(release_run_task, self.run_id, self._store.retry_timeout_s)).collect()
            logger.info("released nodes %s of run %s", sorted(set(released)), self.run_id)
        except Exception as error:  # noqa: BLE001 - cleanup must not hide the real outcome
            logger.warning("could not release the nodes of run %s: %s", self.run_id, short_error(error))
