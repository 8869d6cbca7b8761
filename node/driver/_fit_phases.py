"""The leased part of one fit: its phases completed in order, each epoch ended, the model saved.

:class:`LeasedFit` is what :class:`~node.driver.Fit` runs once it holds the run's lease, has checked
its data and has written or resumed the run record: everything it works with is made by then, and
handed to it as values (:class:`~node.driver._fit_state.FitState`) and handles (the store, the
record, the lease, the fit's jobs and watch).  Fencing and crash consistency: see :mod:`node.driver._fit`.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from pyspark import SparkContext

import rbm
import storage

from .._contract import NodeConfig, PartitionReport, params_digest
from .._errors import TrainingError, error_chain
from ..data import PreparedData, filled_partitions
from ..executor import outer_step_in
from ..modes import mode_named, remove_updates, trained_by_lost_attempts, untrained_partitions_error
from ..run import STALE_TEMPORARY_S, DriverLease, LeaseLostError, RunRecord
from ..watch import ReachabilityWatch, RunWatch
from ._devices import probe_nodes
from ._fit_jobs import FitJobs
from ._fit_state import FitState
from ._progress import EpochProgress, summarize_epoch, summary_line
from ._settings import TrainingSettings
from ._timings import FitTimings, node_shares

__all__ = ["LeasedFit", "fail"]

logger = logging.getLogger(__name__)

#: An early-stopping best (``node.watch._early_stopping.best_result_name``), as the store names it by content.
_BEST = re.compile(r"^[^/]+\.best-[0-9a-f]{64}\.npz$")


@dataclass(frozen=True, kw_only=True)
class LeasedFit:
    """One fit once its lease is held and its record, jobs and watch are made (see the module docstring).

    Attributes
    ----------
    state : FitState
        The fit's values.
    settings : TrainingSettings
    model : rbm.RBM, rbm.DBN, rbm.ConvNet or any model with the trainable seam
        The driver's copy (on its CPU): it takes each phase's result.
    sc : SparkContext
    store : storage.Store
    runs : storage.RunStore
    weights : storage.WeightStore
    lease : DriverLease
    record : RunRecord
    prepared : PreparedData
    node_config : NodeConfig
    jobs : FitJobs
    watch : RunWatch
    timings : FitTimings
    reachability : ReachabilityWatch
    history : list of dict
        The fit's epoch summaries (each epoch's appended).
    on_epoch : callable or None
        Called with each epoch's summary.
    say_once : storage.SayOnce
        The fit's warnings said once.
    """

    state: FitState
    settings: TrainingSettings
    model: Any
    sc: SparkContext
    store: storage.Store
    runs: storage.RunStore
    weights: storage.WeightStore
    lease: DriverLease
    record: RunRecord
    prepared: PreparedData
    node_config: NodeConfig
    jobs: FitJobs
    watch: RunWatch
    timings: FitTimings
    reachability: ReachabilityWatch
    history: list[dict[str, Any]]
    on_epoch: Callable[[dict], None] | None = None
    say_once: storage.SayOnce = field(default_factory=lambda: storage.SayOnce(logger, repeats_at=None))

    def run(self) -> Any:
        """Probe the nodes' devices, complete every phase in order and save the model; returns the model.

        The caller marks the run failed when this raises (:func:`fail`).
        """
        settings, model, state = self.settings, self.model, self.state
        began = self.timings.now_s()
        # a node without its GPU ends the fit
        if probe_nodes(self.sc, state.group, self.node_config, state.nodes, state.task_gpus):
            self.timings.add("device probe", began, self.timings.now_s() - began)  # no job on CPU nodes
        if settings.initialize_only:
            with self.timings.step("model"):
                self._save_model("initialized")
            return model
        for phase_index, phase in enumerate(state.phases):
            self.lease.check()
            model.set_parameters(self._complete_phase(phase, phase_index))
            if phase == settings.stop_after_phase and phase != state.phases[-1]:
                self.record.mark("stopped", stopped=time.time(), timings=self.timings.to_dict())
                self.watch.finish("stopped")
                logger.info("run %s stopped after phase %s as asked; fit again to resume", state.run_id, phase)
                return model
        with self.timings.step("model"):
            self._save_model("done")
        logger.info("run %s done; model at %s/%s", state.run_id, state.store_url, self.record.data["model"]["path"])
        return model

    # ------------------------------------------------------------------ phases
    def _complete_phase(self, phase: str, phase_index: int) -> dict[str, np.ndarray]:
        """The phase's result: loaded when stored and verified, else made from what is stored, else trained."""
        record = self.record
        if record.phase_done(phase):
            stored = self._stored_result(phase)
            if stored is not None:
                return stored
            logger.warning("run %s: phase %s is marked done but its result is missing or does not verify; "
                           "making it again from the stored snapshots", self.state.run_id, phase)
        start, consolidated = self._phase_start(phase)
        epochs, done = record.epochs_planned(phase), record.epochs_done(phase)
        if done < epochs and not self.watch.stopped(phase):
            try:
                self._train_epochs(phase, start, first=done, epochs=epochs)
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
            record.mark_phase(phase, params_digest(result), origin=origin, stored=stored)
            self._sweep_phase(phase)
            logger.info("run %s phase %s done: %s", self.state.run_id, phase, origin)
            self.watch.end_phase(phase, result)
        return result

    def _train_epochs(self, phase: str, start: dict[str, np.ndarray], *, first: int, epochs: int) -> None:
        mode = mode_named(self.settings.mode)
        progress = EpochProgress(enabled=self.settings.progress, sc=self.sc, group=self.state.group,
                                 total=self.prepared.partitions * (epochs - first),
                                 description=f"{self.state.run_id} {phase}",
                                 samples_per_partition=self.prepared.n_samples / max(1, self.prepared.partitions))
        # The whole model with ``start`` as the phase's parameters: the earlier phases' results too.
        self.jobs.begin_phase(phase, {**self.model.parameters(), **start}, progress=progress, planned_epochs=epochs)
        try:
            self.jobs.store_partitions()  # once per fit, before its first training job
            epoch, ended = first, time.perf_counter()
            while epoch < epochs:
                self.lease.check()
                progress.epoch(epoch, epochs)
                waited = self.timings.now_s()
                # one epoch, or (sync) all that are left
                per_epoch = mode.run_epochs(self.jobs, phase, first=epoch, epochs=epochs)
                self.timings.add(_epochs_name(phase, epoch, len(per_epoch)), waited, self.timings.now_s() - waited,
                                 nodes=node_shares(report.to_record() for reports in per_epoch for report in reports))
                # An epoch's wall time runs from the end of the one before: a job queued behind another
                # (async) trains while the driver ends the epoch before.
                wall_s = (time.perf_counter() - ended) / max(1, len(per_epoch))
                ended = time.perf_counter()
                for index, reports in enumerate(per_epoch):
                    # Only the job's last epoch left its own weights: the nodes of a job that trained
                    # several (sync, sharing) went on from the earlier ones.
                    self._end_epoch(progress, phase, epoch, epochs=epochs, reports=reports, wall_s=wall_s,
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
            logger.warning("run %s: the stored result of phase %s is unusable: %s", self.state.run_id, phase, error)
            return None
        expected = self.record.result_digest(phase)
        if result is None or (expected is not None and params_digest(result) != expected):
            logger.warning("run %s: the stored result of phase %s is %s", self.state.run_id, phase,
                           "missing" if result is None else "not the one the record names")
            return None
        return result

    def _phase_start(self, phase: str) -> tuple[dict[str, np.ndarray], bool]:
        """Where the phase stands: the consolidation of its last epoch's nodes when epochs ran, else its start.

        Returns the parameters and whether they are that consolidation: of the snapshots the record says
        the epoch ended with (``async``: a fit stopped while the next epoch's job trained left newer ones,
        of an epoch the record does not count and the resumed fit trains again), else the nodes' newest.
        When epochs ran but none of those nodes left a usable snapshot, the phase trains again from its
        start (logged and recorded), never silently from initial weights.
        """
        record = self.record
        initial = self.model.parameters(phase)
        if record.epochs_done(phase) == 0:
            removed = self._remove_unrecorded(phase)
            if removed:
                record.restart_phase(phase, f"the fit that began it stopped before it recorded an epoch; the "
                                            f"{removed} snapshot(s) and update(s) it left are removed")
            return initial, False
        try:
            consolidation = self.weights.consolidate_exact(phase, record.versions(phase))
            if consolidation is None:
                if record.versions(phase):
                    logger.warning("run %s phase %s: the snapshots the record names for epoch %d are not all there "
                                   "any more; it continues from its nodes' newest, which may hold partitions of later "
                                   "epochs the record does not count (they are trained again)", self.state.run_id,
                                   phase, record.epochs_done(phase))
                consolidation = self.weights.consolidate(phase, record.nodes(phase))
        except storage.StoreNotFoundError as error:
            record.restart_phase(phase, f"no usable snapshot of the nodes of its last epoch ({error})")
            self._remove_unrecorded(phase)
            return initial, False
        logger.info("run %s phase %s stands after epoch %d: consolidated from %d node(s)", self.state.run_id, phase,
                    record.epochs_done(phase), len(consolidation.refs))
        return consolidation.params, True

    def _remove_unrecorded(self, phase: str) -> int:
        """Remove what the nodes stored of ``phase``, which is to train from its start; returns how many files.

        Its snapshots (outer momentum too) and ``sharing`` updates hold partitions no recorded epoch counts,
        of a fit that stopped: a node starting the phase averaged them in, or applied them, and the phase's
        epochs then trained those partitions a second time.
        """
        return (self.weights.remove_phase(phase)
                + remove_updates(self.store, self.state.run_id, self.state.key, phase))

    def _end_epoch(self, progress: EpochProgress, phase: str, epoch: int, *, epochs: int,
                   reports: list[PartitionReport], wall_s: float, validate: bool = True) -> None:
        summary = summarize_epoch(self.state.run_id, phase, epoch, [report.to_record() for report in reports], wall_s,
                                  batch_size=self.state.spec.get("batch_size"),
                                  node_batch_size=self.node_config.node_batch_size or None,
                                  staged=self.prepared.staged is not None)
        outer = outer_step_in(self.node_config, self.model, phase)
        summary["outer_step"] = None if outer is None else list(outer)
        self.history.append(summary)
        with self.timings.step(f"{phase} epoch {epoch + 1} validation"):
            # validation, early stopping, logs; the next epoch's job may be queued already (async)
            stop = self.watch.end_epoch(phase, epoch, summary, model=self.model, validate=validate,
                                        executors_busy=self.jobs.job_queued)
        first_warning = bool(summary["warning"]) and self.say_once.say(  # every summary carries it: said once
            f"small-partition warning of {phase}", "run %s %s epoch %d: %s (said once per phase)",
            self.state.run_id, phase, epoch + 1, summary["warning"])
        progress.report(summary_line(summary, epochs, full_warning=first_warning))
        untrained = self._untrained_partitions(phase, epoch, reports)
        if untrained:  # never recorded as trained: the fit fails, a resume trains the epoch again
            summary["untrained_partitions"] = untrained
            raise untrained_partitions_error(self.state.run_id, phase, epoch, untrained)
        unreachable = self.reachability.end_epoch(phase, summary["records"])
        if unreachable:
            summary["reachability_warning"] = unreachable
            logger.warning("run %s %s epoch %d: %s", self.state.run_id, phase, epoch + 1, unreachable)
        self.record.mark_epoch(phase, epoch, summary["nodes"], scaling={
            "rule": self.settings.scale_rule, "warmup_partitions": self.node_config.warmup_partitions,
            "learning_rate_scale": summary["learning_rate_scale"], "nodes_merging": summary["nodes_merging"],
            "node_batch_size": summary["node_batch_size"], "outer_step": summary["outer_step"]},
            devices={record["node"]: record["device"] for record in summary["records"] if record.get("device")},
            versions=summary["versions"])
        if self.on_epoch is not None:
            self.on_epoch(summary)
        if stop:
            raise _PhaseStopped(phase)

    def _untrained_partitions(self, phase: str, epoch: int, reports: list[PartitionReport]) -> list[int]:
        """The partitions holding data that no node of the epoch trained: no report, and no claim marked trained
        (an attempt Spark gave up on may have trained one whose report was lost with it)."""
        reported = {report.partition for report in reports}
        missing = [index for index in filled_partitions(self.prepared.rows_per_partition) if index not in reported]
        if not missing:
            return []
        trained = trained_by_lost_attempts(self.store, self.state.run_id, self.state.fit_id, phase, epoch, missing)
        if trained:
            logger.warning("run %s %s epoch %d: partition(s) %s were trained by task attempts Spark gave up on "
                           "(their reports were lost with them)", self.state.run_id, phase, epoch + 1, trained)
        return [index for index in missing if index not in trained]

    def _sweep_phase(self, phase: str) -> None:
        folder = f"runs/{self.state.run_id}/weights/{phase}"
        for node in self.store.list(folder):
            self.store.remove_stale_temporaries(f"{folder}/{node}", older_than_s=STALE_TEMPORARY_S)

    # ------------------------------------------------------------------ the end
    def _save_model(self, status: str) -> None:
        """Store the model in the generation's folder, then mark the run ``status`` naming its path and sha256.

        "done" means the model is there and verifies.  Once the record says "done" it names no
        early-stopping best and no earlier generation's model any more: those are removed then.  A done run
        fitted again, whose stored model is this very model, writes nothing: its record and model stay.
        """
        with tempfile.TemporaryDirectory(prefix="sparkdbn-model-") as folder:
            path = os.path.join(folder, "model.npz")
            rbm.save_trained(self.model, path)
            with open(path, "rb") as handle:
                payload = handle.read()
            self.watch.finish(status, path)
        if status == "done" and self._stored_as_done(payload):
            return  # a done run fitted again: its record and model stay the fit's that made them
        model_path = self.runs.model_path(self.lease.generation)
        self.store.write_bytes(model_path, payload)
        try:  # read back no more than was written: a file grown since is refused, not read whole
            digest = storage.sha256_hex(self.store.read_bytes(model_path, max_bytes=len(payload)))
        except storage.FileTooLargeError as error:
            raise TrainingError(f"the model written to {self.state.store_url}/{model_path} does not read back "
                                f"as written ({error}); the run is not marked done") from error
        if digest != storage.sha256_hex(payload):
            raise TrainingError(f"the model written to {self.state.store_url}/{model_path} does not read back "
                                "as written; the run is not marked done")
        if status == "done":
            self.record.forget_bests()
        self.record.mark(status, finished=time.time(),
                         model={"path": model_path, "sha256": digest, "size_bytes": len(payload)},
                         timings=self.timings.to_dict())
        if status == "done":
            self._remove_unnamed()

    def _stored_as_done(self, payload: bytes) -> bool:
        """True when the record says "done" and names a stored model that reads back as ``payload``."""
        named = self.record.data.get("model") or {}
        if self.record.status != "done" or named.get("sha256") != storage.sha256_hex(payload):
            return False
        try:
            stored = self.store.read_bytes(str(named["path"]), max_bytes=len(payload))
        except (storage.StoreError, KeyError):
            return False
        return storage.sha256_hex(stored) == named["sha256"]

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
                logger.warning("run %s: could not remove %s, which the record no longer names: %s", self.state.run_id,
                               path, error)


def fail(error: BaseException, *, record: RunRecord | None, lease: DriverLease, run_id: str) -> None:
    """The leased fit failed with ``error`` (the caller raises it next): mark the run failed, when it has a record.

    A fit whose jobs were cancelled because another driver took the run over raises that here
    (:class:`LeaseLostError`), not the cancellation; and writes nothing more.
    """
    if lease.lost and not isinstance(error, LeaseLostError):
        try:
            lease.check()
        except LeaseLostError as lost:  # the fit's jobs were cancelled because of it: say that, not "cancelled"
            raise lost from error
    _mark_failed(error, record=record, lease=lease, run_id=run_id)


def _mark_failed(error: BaseException, *, record: RunRecord | None, lease: DriverLease, run_id: str) -> None:
    if record is None:
        return
    if lease.lost:  # another driver holds the run, or none does (its lease file removed or edited): no more writes
        logger.error("run %s failed after its driver lost the run's lease (its record is left unmarked): %s: %s",
                     run_id, type(error).__name__, str(error)[:300])
        return
    if record.status == "done":  # its model is stored and verifies, whatever ended this fit after that
        logger.warning("run %s stays done (its model is stored and verifies) after %s: %s", run_id,
                       type(error).__name__, str(error)[:300])
        return
    try:
        record.mark("failed", error=failure_text(error)[:2000], finished=time.time())
    except (storage.StoreError, LeaseLostError) as store_error:  # after the store failed, the fit's warning said it
        logger.log(logging.DEBUG if lease.store_failed else logging.ERROR, "could not mark run %s failed in the "
                   "store: %s", run_id, store_error)



def failure_text(error: BaseException) -> str:
    """What the record of a failed fit says of ``error``: ``interrupted (Ctrl-C)`` or ``terminated (SIGTERM)`` for
    an interrupt (also one that py4j turned into an error of its own), else ``"<type>: <message>"``.

    Parameters
    ----------
    error : BaseException
        What stopped the fit; its causes and contexts are looked at for an interrupt.
    """
    interrupts = [link for link in error_chain(error) if isinstance(link, KeyboardInterrupt)]
    if interrupts:
        # The command line's SIGTERM handler raises its own KeyboardInterrupt, ``Terminated`` (node.cli, a layer
        # above the driver's): known here by its name.
        terminated = any(type(link).__name__ == "Terminated" for link in interrupts)
        return "terminated (SIGTERM)" if terminated else "interrupted (Ctrl-C)"
    return f"{type(error).__name__}: {error}"


def _epochs_name(phase: str, first: int, count: int) -> str:
    """The timing step of a job's epochs: ``"train epoch 1"``, ``"finetune epochs 1-5"`` (one ``sync`` job)."""
    return f"{phase} epoch {first + 1}" if count <= 1 else f"{phase} epochs {first + 1}-{first + count}"


class _PhaseStopped(Exception):
    """Early stopping ended the phase (raised after the epoch is marked in the record)."""

