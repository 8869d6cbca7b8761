"""One fit: the run, its store, record, lease, prepared data (:mod:`node.driver._fit_data`), key and Spark handles.

:class:`Fit` is what :meth:`node.Trainer.fit` does, as an object: constructing it starts
nothing; :meth:`Fit.run` starts Spark's Python workers, takes the run's lease, checks the data on
the driver, writes or resumes the run record, stores the training partitions, completes every
phase in order (its training mode runs the epochs), saves the model and marks the run done -- and
in ``finally`` cancels its Spark jobs, stops its nodes and drops its broadcasts, the data it held
and the partitions it stored.  Each step is timed (:mod:`node.driver._timings`).

Fencing (see :mod:`node.run._lease`): every store write of the driver is tied to its lease
generation or named by its content -- records are new files of the generation, the model lives
in the generation's own folder, phase results and early-stopping bests are files named by their
sha256 -- and only the record says which are current.  A driver that lost the run (paused,
cut off) and writes on can therefore only add files that no reader of the newer record looks at;
it stops at its next renewal or record write, cancelling its Spark jobs, and says who took over.

Crash consistency (see :mod:`node.run._record`): a phase is completed from what is stored, in one
idempotent step.  A phase whose result is stored and verifies is loaded; one whose epochs all
ran is consolidated from the newest snapshots of the nodes that trained its last epoch; one in
the middle continues from that consolidation; only when nothing usable is left does it train
again from its start, and the log and the record say so.  The phase result is the one
consolidation rule of :meth:`storage.WeightStore.consolidate`.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
import uuid
from typing import Any, Callable

import numpy as np
from pyspark.sql import SparkSession

import storage

from .._contract import NodeConfig, PartitionReport, params_digest
from .._errors import TrainingError, short_error
from ..data import PreparedData, filled_partitions
from ..executor import block_sink
from ..modes import max_learning_rate_factor, mode_named, untrained_partitions_error
from ..run import (STALE_TEMPORARY_S, DriverLease, LeaseLostError, RunRecord, open_checked_store, remove_work_folders,
                   resolve_run_key, sweep_temporaries)
from ..watch import ReachabilityWatch, RunWatch, ValidationSet
from ._devices import check_gpu_conf, driver_model, driver_spec, hand_back, probe_nodes
from ._fit_data import model_input, prepare_fit_data
from ._fit_jobs import FitJobs
from ._node_config import node_config
from ._progress import EpochProgress, SparkJob, summarize_epoch, summary_line
from ._session import start_python_workers
from ._settings import TrainingSettings
from ._timings import FitTimings, node_shares

__all__ = ["Fit"]

logger = logging.getLogger(__name__)

#: An early-stopping best (``node.watch._early_stopping.best_result_name``), as the store names it by content.
_BEST = re.compile(r"^[^/]+\.best-[0-9a-f]{64}\.npz$")


class Fit:
    """Everything one ``Trainer.fit`` call works with (see the module docstring).

    Parameters
    ----------
    settings : TrainingSettings
    spark : SparkSession
    store_url : str
    model : rbm.RBM, rbm.DBN, rbm.ConvNet or any model with the trainable seam
    data, y
        As :meth:`node.Trainer.fit` takes them.
    on_epoch : callable, optional
        Called with each epoch's summary.
    """

    def __init__(self, settings: TrainingSettings, spark: SparkSession, store_url: str, model: Any, data: Any,
                 y: Any = None, on_epoch: Callable[[dict], None] | None = None, key: bytes | None = None) -> None:
        self.settings = settings
        self.spark = spark
        self.sc = spark.sparkContext
        self.store_url = store_url
        self.given_model = model  # the caller's: it gets the result where it can hold it (node.driver._devices)
        self.data, self.y = data, y
        self.on_epoch = on_epoch
        self.run_id = settings.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.fit_id = uuid.uuid4().hex
        self.group = f"sparkdbn-{self.run_id}-{self.fit_id[:6]}"
        self.history: list[dict[str, Any]] = []
        self.phases: list[str] = list(model.phases())
        self.spec: dict = dict(model.to_spec())  # what the nodes build, on their tasks' GPUs if it asks for one
        self.model = driver_model(model, self.spec)  # the driver's copy, on its CPU: checks, phases, validation
        self._given_key = key
        self.key: bytes = b""  # the run key (resolved in run()); travels to the executors in the tasks only
        self.store: storage.Store | None = None
        self.runs: storage.RunStore | None = None
        self.weights: storage.WeightStore | None = None
        self.prepared: PreparedData | None = None
        self.record: RunRecord | None = None
        self.lease: DriverLease | None = None
        self.node_config: NodeConfig | None = None
        self.jobs: FitJobs | None = None  # the fit's Spark jobs (made once the record and node config are)
        self._said: set[str] = set()
        self.validation: ValidationSet | None = None
        self.watch: RunWatch | None = None
        self.reachability = ReachabilityWatch()
        self.timings = FitTimings()  # where the fit's time goes (node.driver._timings)
        self._workers: SparkJob | None = None  # the job that starts Spark's Python workers (_start_workers)
        self._stores_data = False  # this fit may have stored training partitions (removed when it ends)

    # ------------------------------------------------------------------ the whole fit
    def run(self) -> Any:
        """Train (or resume) the run; returns the model with the consolidated weights."""
        settings = self.settings
        try:
            settings.check_trains_something(self.phases)
        except ValueError as error:
            raise TrainingError(str(error)) from error
        if settings.stop_after_phase is not None and settings.stop_after_phase not in self.phases:
            raise TrainingError(f"stop_after_phase {settings.stop_after_phase!r} is not a phase of this model "
                                f"({self.phases})")
        self._apply_batch_size()
        check_gpu_conf(self.sc.master, dict(self.sc.getConf().getAll()), self.spec)  # before any work
        self._start_workers()
        began = self.timings.now_s()
        self.store = open_checked_store(self.store_url, settings.store_retry_timeout_s)
        self.key = self._resolve_key()
        self.runs = storage.RunStore(self.store, self.run_id, self.key)
        self.weights = storage.WeightStore(self.store, self.run_id, self.key)
        self.lease = DriverLease(self.store, self.run_id, self.key, settings.lease_timeout_s, fit_id=self.fit_id,
                                 on_lost=self._lease_lost)
        try:
            with self.lease:  # a second driver of the run is refused here, before any work
                previous = self._earlier_record()
                # Earlier fits' claims and stored partitions (node.run._work_folders), before this fit stores its own.
                remove_work_folders(self.store, self.run_id)
                self.timings.add("store and lease", began, self.timings.now_s() - began)
                self._stores_data = True
                self.prepared, self.validation = prepare_fit_data(
                    self.spark, settings, self.model, self.driver_spec, self.data, self.y, nodes=self.nodes,
                    require_labels=any(not phase.startswith("rbm") for phase in self.phases), timings=self.timings,
                    sink=block_sink(self.store_url, settings.store_retry_timeout_s, self.key, self.run_id,
                                    self.fit_id))
                return hand_back(self.given_model, self._run_leased(previous))
        finally:
            with self.timings.step("cleanup"):
                self._close()
            logger.info("run %s: the fit took %s", self.run_id, self.timings.summary())

    def _start_workers(self) -> None:
        """Start Spark's Python workers while the driver checks the data: a job of one short task per node.

        The first job of a session starts them (an interpreter and sparkdbn's imports in each, seconds
        each); the fit's first job that needs them would wait for that otherwise.  A job of the fit's
        group (cancelled when the fit ends); nobody waits for it: the fit's next job queues behind it.
        """
        self._workers = start_python_workers(self.sc, self.nodes, self.group, f"{self.run_id} start the Python workers")

    def _lease_lost(self) -> None:
        """Another driver took the run over (called from the lease's thread): stop this fit's Spark jobs now."""
        self.sc.cancelJobGroup(self.group)

    def _resolve_key(self) -> bytes:
        """The run key: a resumed run must find the first fit's key, a new run may make one."""
        resuming = storage.has_run_record(self.store, self.run_id)
        return resolve_run_key(self.run_id, self.store_url, key=self._given_key, key_file=self.settings.key_file,
                               spark_conf=dict(self.sc.getConf().getAll()), create=not resuming).key

    def _earlier_record(self) -> dict | None:
        """This run's record from an earlier fit; a wrong key stops the fit here, before any work."""
        try:
            return self.runs.read_record()
        except storage.AuthenticationError as error:
            raise TrainingError(f"run {self.run_id!r} cannot be resumed with this key: {error}") from error

    def _run_leased(self, previous: dict | None) -> Any:
        settings, model = self.settings, self.model
        try:
            with self.timings.step("run record"):
                self._start_record(previous)
            began = self.timings.now_s()
            if probe_nodes(self.sc, self.group, self.node_config, self.nodes):  # a node without its GPU ends the fit
                self.timings.add("device probe", began, self.timings.now_s() - began)  # no job on CPU nodes
            if settings.initialize_only:
                with self.timings.step("model"):
                    self._save_model("initialized")
                return model
            for phase_index, phase in enumerate(self.phases):
                self.lease.check()
                model.set_parameters(self._complete_phase(phase, phase_index))
                if phase == settings.stop_after_phase and phase != self.phases[-1]:
                    self.record.mark("stopped", stopped=time.time(), timings=self.timings.to_dict())
                    self.watch.finish("stopped")
                    logger.info("run %s stopped after phase %s as asked; fit again to resume", self.run_id, phase)
                    return model
            with self.timings.step("model"):
                self._save_model("done")
            logger.info("run %s done; model at %s/%s", self.run_id, self.store_url, self.record.data["model"]["path"])
            return model
        except BaseException as error:
            if self.lease.lost and not isinstance(error, LeaseLostError):
                try:
                    self.lease.check()
                except LeaseLostError as lost:  # the fit's jobs were cancelled because of it: say that, not "cancelled"
                    raise lost from error
            self._mark_failed(error)
            raise

    def _start_record(self, previous: dict | None) -> None:
        """Write or resume the run record; make the nodes' config, the fit's jobs and its watch."""
        settings, prepared = self.settings, self.prepared
        self.record, resumed = RunRecord.start(
            self.runs, self.lease, previous, spec=self.spec, phases=self.phases,
            epochs={phase: settings.epochs_for(phase) for phase in self.phases}, settings=settings.to_dict(),
            store_url=self.store_url, data_facts=self._data_facts(), classes=prepared.classes)
        if resumed:
            logger.info("resuming run %s (%s)", self.run_id, self._progress_text())
        sweep_temporaries(self.store, self.run_id)
        self.node_config = node_config(settings, prepared, self.spec, run=self.run_id, fit_id=self.fit_id,
                                       store_url=self.store_url, key=self.key, nodes=self.nodes, sc=self.sc,
                                       max_rate_factor=max_learning_rate_factor(self.model))
        self.jobs = FitJobs(self.sc, settings, self.nodes, prepared, self.node_config, self.record, self.phases,
                            self.store, self.timings)
        self.watch = RunWatch.start(self, self.validation, model_input(prepared.feature_shape))

    # ------------------------------------------------------------------ data and model (see node.driver._fit_data)
    def _apply_batch_size(self) -> None:
        if self.settings.batch_size is None:
            return
        if "batch_size" not in self.spec:
            raise TrainingError(f"batch_size was set, but a {self.spec.get('kind')!r} model has no batch_size setting")
        self.spec["batch_size"] = int(self.settings.batch_size)

    @property
    def driver_spec(self) -> dict:
        """The spec of the driver's CPU copy of the model (the checks, the validation tasks)."""
        return driver_spec(self.spec)

    @property
    def nodes(self) -> int:
        """Nodes training at once: ``averaging_nodes``, else Spark's default parallelism (a node per task slot)."""
        return int(self.settings.averaging_nodes or self.sc.defaultParallelism)

    def _data_facts(self) -> dict[str, Any]:
        prepared = self.prepared
        return {"source": prepared.source, "n_samples": prepared.n_samples,
                "feature_shape": list(prepared.feature_shape), "partitions": prepared.partitions,
                "n_classes": None if prepared.classes is None else len(prepared.classes)}

    # ------------------------------------------------------------------ phases
    def _complete_phase(self, phase: str, phase_index: int) -> dict[str, np.ndarray]:
        """The phase's result: loaded when stored and verified, else made from what is stored, else trained."""
        record = self.record
        if record.phase_done(phase):
            stored = self._stored_result(phase)
            if stored is not None:
                return stored
            logger.warning("run %s: phase %s is marked done but its result is missing or does not verify; "
                           "making it again from the stored snapshots", self.run_id, phase)
        start, consolidated = self._phase_start(phase)
        epochs, done = record.epochs_planned(phase), record.epochs_done(phase)
        if done < epochs and not self.watch.stopped(phase):
            try:
                self._train_epochs(phase, start, done, epochs)
            except _PhaseStopped:
                pass
        with self.timings.step(f"{phase} result"):
            if epochs == 0:
                result, origin = start, "no epochs: the phase's start"
            elif done >= epochs and consolidated:
                result, origin = start, f"consolidated from the {len(record.nodes(phase))} node(s) of its last epoch"
            else:
                consolidation = self.weights.consolidate(phase, record.nodes(phase))
                result, origin = consolidation.params, f"consolidated from {len(consolidation.refs)} node(s)"
            result, origin = self.watch.best_result(phase) or (result, origin)
            stored = self.weights.put_phase_result(phase, result)  # a new file named by its content
            record.mark_phase(phase, params_digest(result), origin, stored)
            self._sweep_phase(phase)
            logger.info("run %s phase %s done: %s", self.run_id, phase, origin)
            self.watch.end_phase(phase, result)
        return result

    def _train_epochs(self, phase: str, start: dict[str, np.ndarray], first: int, epochs: int) -> None:
        mode = mode_named(self.settings.mode)
        progress = EpochProgress(self.settings.progress, self.sc, self.group,
                                 total=self.prepared.partitions * (epochs - first),
                                 description=f"{self.run_id} {phase}", samples_per_partition=self.prepared.n_samples / max(1, self.prepared.partitions))
        # The whole model with ``start`` as the phase's parameters: the earlier phases' results too.
        self.jobs.begin_phase(phase, {**self.model.parameters(), **start}, progress, planned_epochs=epochs)
        try:
            self.jobs.store_partitions()  # once per fit, before its first training job
            epoch, ended = first, time.perf_counter()
            while epoch < epochs:
                self.lease.check()
                progress.epoch(epoch, epochs)
                waited = self.timings.now_s()
                per_epoch = mode.run_epochs(self.jobs, phase, epoch, epochs)  # one epoch, or (sync) all that are left
                self.timings.add(_epochs_name(phase, epoch, len(per_epoch)), waited, self.timings.now_s() - waited,
                                 nodes=node_shares(report.to_record() for reports in per_epoch for report in reports))
                # An epoch's wall time runs from the end of the one before: a job queued behind another
                # (async) trains while the driver ends the epoch before.
                wall_s = (time.perf_counter() - ended) / max(1, len(per_epoch))
                ended = time.perf_counter()
                for index, reports in enumerate(per_epoch):
                    # Only the job's last epoch left its own weights: the nodes of a job that trained
                    # several (sync, sharing) went on from the earlier ones.
                    self._end_epoch(progress, phase, epoch, epochs, reports, wall_s,
                                    validate=index == len(per_epoch) - 1)
                    epoch += 1
        except _PhaseStopped:
            self.jobs.stop_queued()  # early stopping: the next epoch's job is not waited for
            raise
        finally:
            self.jobs.end_phase()
            progress.close()

    def _stored_result(self, phase: str) -> dict[str, np.ndarray] | None:
        try:
            result = self.weights.get_phase_result(phase, self.record.result_file(phase))
        except storage.StoreError as error:
            logger.warning("run %s: the stored result of phase %s is unusable: %s", self.run_id, phase, error)
            return None
        expected = self.record.result_digest(phase)
        if result is None or (expected is not None and params_digest(result) != expected):
            logger.warning("run %s: the stored result of phase %s is %s", self.run_id, phase,
                           "missing" if result is None else "not the one the record names")
            return None
        return result

    def _phase_start(self, phase: str) -> tuple[dict[str, np.ndarray], bool]:
        """Where the phase stands: the consolidation of its last epoch's nodes when epochs ran, else its start.

        Returns the parameters and whether they are that consolidation.  When epochs ran but none
        of those nodes left a usable snapshot, the phase trains again from its start (logged and
        recorded), never silently from initial weights.
        """
        record = self.record
        initial = self.model.parameters(phase)
        if record.epochs_done(phase) == 0:
            return initial, False
        try:
            consolidation = self.weights.consolidate(phase, record.nodes(phase))
        except storage.StoreNotFoundError as error:
            record.restart_phase(phase, f"no usable snapshot of the nodes of its last epoch ({error})")
            return initial, False
        logger.info("run %s phase %s stands after epoch %d: consolidated from %d node(s)", self.run_id, phase,
                    record.epochs_done(phase), len(consolidation.refs))
        return consolidation.params, True

    def _end_epoch(self, progress: EpochProgress, phase: str, epoch: int, epochs: int, reports: list[PartitionReport],
                   wall_s: float, validate: bool = True) -> None:
        summary = summarize_epoch(self.run_id, phase, epoch, [report.to_record() for report in reports], wall_s,
                                  batch_size=self.spec.get("batch_size"),
                                  node_batch_size=self.node_config.node_batch_size or None)
        self.history.append(summary)
        with self.timings.step(f"{phase} epoch {epoch + 1} validation"):
            # validation, early stopping, logs; the next epoch's job may be queued already (async)
            stop = self.watch.end_epoch(phase, epoch, summary, self.model, validate, self.jobs.job_queued)
        progress.report(summary_line(summary, epochs))
        if summary["warning"] and self._first(f"small-partition warning of {phase}"):  # every summary carries it
            logger.warning("run %s %s epoch %d: %s (said once per phase)", self.run_id, phase, epoch + 1,
                           summary["warning"])
        untrained = self._untrained_partitions(reports)
        if untrained:  # never recorded as trained: the fit fails, a resume trains the epoch again
            summary["untrained_partitions"] = untrained
            raise untrained_partitions_error(self.run_id, phase, epoch, untrained)
        unreachable = self.reachability.end_epoch(phase, summary["records"])
        if unreachable:
            summary["reachability_warning"] = unreachable
            logger.warning("run %s %s epoch %d: %s", self.run_id, phase, epoch + 1, unreachable)
        self.record.mark_epoch(phase, epoch, summary["nodes"], scaling={
            "rule": self.settings.scale_rule, "warmup_partitions": self.node_config.warmup_partitions,
            "learning_rate_scale": summary["learning_rate_scale"], "nodes_merging": summary["nodes_merging"],
            "node_batch_size": summary["node_batch_size"]},
            devices={record["node"]: record["device"] for record in summary["records"] if record.get("device")})
        if self.on_epoch is not None:
            self.on_epoch(summary)
        if stop:
            raise _PhaseStopped(phase)

    def _first(self, name: str) -> bool:
        """Whether this is the fit's first ask about ``name`` (a warning said once)."""
        first = name not in self._said
        self._said.add(name)
        return first

    def _untrained_partitions(self, reports: list[PartitionReport]) -> list[int]:
        """The partitions holding data that no report of the epoch trained."""
        trained = {report.partition for report in reports}
        return [index for index in filled_partitions(self.prepared.rows_per_partition) if index not in trained]

    def _sweep_phase(self, phase: str) -> None:
        folder = f"runs/{self.run_id}/weights/{phase}"
        for node in self.store.list(folder):
            self.store.remove_stale_temporaries(f"{folder}/{node}", older_than_s=STALE_TEMPORARY_S)

    # ------------------------------------------------------------------ the end
    def _save_model(self, status: str) -> None:
        """Store the model in the generation's folder, then mark the run ``status`` naming its path and sha256.

        "done" means the model is there and verifies.  Once the record says "done" it names no
        early-stopping best and no earlier generation's model any more: those are removed then.
        """
        with tempfile.TemporaryDirectory(prefix="sparkdbn-model-") as folder:
            path = os.path.join(folder, "model.npz")
            self.model.save(path)
            with open(path, "rb") as handle:
                payload = handle.read()
            self.watch.finish(status, path)
        model_path = self.runs.model_path(self.lease.generation)
        self.store.write_bytes(model_path, payload)
        digest = storage.sha256_hex(self.store.read_bytes(model_path))
        if digest != storage.sha256_hex(payload):
            raise TrainingError(f"the model written to {self.store_url}/{model_path} does not read back "
                                "as written; the run is not marked done")
        if status == "done":
            self.record.forget_bests()
        self.record.mark(status, finished=time.time(), model={"path": model_path, "sha256": digest},
                         timings=self.timings.to_dict())
        if status == "done":
            self._remove_unnamed()

    def _remove_unnamed(self) -> None:
        """Remove the early-stopping bests and earlier generations' models, which the "done" record no longer names.

        Only now: before "done" a driver that takes the run over may resume from a record naming any
        best; every record written after this one (by a driver that took over after its lease check)
        has every phase done, and names a model of its own, newer generation.
        """
        prefix = self.runs.prefix
        unnamed = [f"{prefix}/phases/{name}" for name in self.store.list(f"{prefix}/phases") if _BEST.match(name)]
        for name in self.store.list(f"{prefix}/model"):  # the model.npz of store layout 2 stays
            if name.isdigit() and int(name) < self.lease.generation:
                unnamed += [f"{prefix}/model/{name}/model.npz", f"{prefix}/model/{name}"]  # the file, then its folder
        for path in unnamed:
            try:
                self.store.delete(path)  # a folder only when empty
            except storage.StoreError as error:  # harmless where it stays: nothing names it
                logger.warning("run %s: could not remove %s, which the record no longer names: %s", self.run_id,
                               path, error)

    def _mark_failed(self, error: BaseException) -> None:
        if self.record is None:
            return
        if self.lease.lost:  # another driver holds the run: this one writes nothing more
            logger.error("run %s failed after another driver took it over: %s: %s", self.run_id,
                         type(error).__name__, str(error)[:300])
            return
        try:
            self.record.mark("failed", error=f"{type(error).__name__}: {error}"[:2000], finished=time.time())
        except (storage.StoreError, LeaseLostError) as store_error:
            logger.error("could not mark run %s failed in the store: %s", self.run_id, store_error)

    def _close(self) -> None:
        """Cancel this fit's Spark jobs, stop its nodes, drop its broadcasts, held data and stored partitions."""
        workers = self._workers
        if workers is not None and workers.seconds is not None:
            self.timings.add("start the Python workers", workers.started - self.timings.origin, workers.seconds,
                             background=True)
        self.sc.cancelJobGroup(self.group)
        if self.watch is not None:
            self.watch.close()
        if self.jobs is not None:
            self.jobs.close()
        if self._stores_data:  # this fit's claims and partitions, when it got as far as writing any
            self._remove_work_folders()
        if self.prepared is not None:
            self.prepared.unpersist()

    def _remove_work_folders(self) -> None:
        try:
            remove_work_folders(self.store, self.run_id, self.fit_id)
        except storage.StoreError as error:  # cleanup must not hide the real outcome; the next fit removes them
            logger.warning("could not remove the work folders of run %s: %s", self.run_id, short_error(error))

    def _progress_text(self) -> str:
        return ", ".join(f"{phase} {'done' if self.record.phase_done(phase) else self.record.epochs_done(phase)}"
                         for phase in self.phases)


def _epochs_name(phase: str, first: int, count: int) -> str:
    """The timing step of a job's epochs: ``"train epoch 1"``, ``"finetune epochs 1-5"`` (one ``sync`` job)."""
    return f"{phase} epoch {first + 1}" if count <= 1 else f"{phase} epochs {first + 1}-{first + count}"


class _PhaseStopped(Exception):
    """Early stopping ended the phase (raised after the epoch is marked in the record)."""

