"""What a person watching a run sees, fed by the driver at each epoch's and phase's end.

:class:`RunWatch` holds the per-epoch validation (:mod:`node.watch._validation`), early stopping
(:mod:`node.watch._early_stopping`), the live TensorBoard log (:mod:`node.watch._live`) and the optional
MLflow run (:mod:`node.watch._mlflow_log`) of one fit.  The fit starts it with its values
(:meth:`RunWatch.start`, which says what the run record should say of it) and calls it at three
points: :meth:`end_epoch` (before the epoch is marked in the record, so the figures and the
early-stopping state are written with it), :meth:`end_phase` and :meth:`finish`.

Validation figures live in the run record, ``steps[phase].validation`` (one entry per epoch),
next to ``steps[phase].early_stopping``; ``sparkdbn report`` and ``sparkdbn status`` read them
from there.  A live log or an MLflow run that fails is logged and switched off: watching never
fails a training run.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

import storage

from .._contract import params_digest
from .._errors import InputDataError, TrainingError
from ..run import RunRecord
from ._early_stopping import EarlyStopping, best_result_name
from ._live import LiveLog
from ._mlflow_log import DEFAULT_TRACKING_URI, MlflowLog
from ._refusals import RefusalWatch
from ._validation import ValidationSet, Validator, is_supervised

__all__ = ["DEFAULT_LOG_DIR", "RunWatch", "WatchSettings", "learning_rate_of"]

#: Where the live TensorBoard logs go unless the settings say otherwise (``<log_dir>/<run>``).
DEFAULT_LOG_DIR = "sparkdbn-logs"


class WatchSettings(Protocol):
    """The training settings the watch reads (:class:`node.TrainingSettings` has them all)."""

    @property
    def early_stopping(self) -> dict[str, Any] | bool | None: ...

    @property
    def log_dir(self) -> str | None: ...

    @property
    def mlflow_tracking_uri(self) -> str | bool | None: ...

    def to_dict(self) -> dict[str, Any]: ...


logger = logging.getLogger(__name__)


def learning_rate_of(spec: Mapping[str, Any], phase: str) -> float | None:
    """The learning rate the spec gives ``phase`` (None when it names none)."""
    keys = ("finetune_learning_rate",) if phase == "finetune" else ("pretrain_learning_rate",)
    for key in keys + ("learning_rate",):
        value = spec.get(key)
        if isinstance(value, (int, float)):
            return float(value)
    return None


class RunWatch:
    """Validation, early stopping, TensorBoard and MLflow of one fit (see the module docstring)."""

    def __init__(self, *, settings: WatchSettings, run: str, spec: dict, record: RunRecord,
                 weights: storage.WeightStore, feature_shape: tuple[int, ...], validator: Validator | None) -> None:
        self.settings, self.run, self.spec = settings, run, spec
        self.record, self.weights = record, weights
        self.feature_shape = feature_shape
        self.validator = validator
        self.early_stopping = EarlyStopping.from_setting(settings.early_stopping)
        self.live = self._open_live()
        self.mlflow = self._open_mlflow()
        self.refusals = RefusalWatch(run)

    @classmethod
    def start(cls, *, settings: WatchSettings, run: str, spec: dict, driver_spec: dict, phases: Sequence[str],
              feature_shape: tuple[int, ...], classes: np.ndarray | None, spark: Any, record: RunRecord,
              weights: storage.WeightStore, validation: ValidationSet | None,
              model_input: Any) -> tuple["RunWatch", dict[str, Any]]:
        """The watch of one fit whose record is written and whose data is checked, and what its record should say.

        Parameters
        ----------
        settings : WatchSettings
        run : str
        spec : dict
            The model's spec.
        driver_spec : dict
            Its driver's CPU copy's (what the validation tasks build).
        phases : sequence of str
        feature_shape : tuple of int
        classes : ndarray or None
            The training data's classes (None: unsupervised).
        spark : SparkSession
        record : RunRecord
            The run's record: the watch keeps its phases' validation and early-stopping state in it.
        weights : storage.WeightStore
        validation : ValidationSet or None
        model_input : callable
            Rows to the model's input shape (:func:`node.driver._fit_data.model_input`).

        Returns
        -------
        watch : RunWatch
        record_facts : dict
            What the run record should say of the watch: ``validation`` (what is validated on) where a set is.

        Raises
        ------
        InputDataError
            The validation set has no labels while a phase is validated on labels.
        """
        validator, facts = None, {}
        if validation is not None:
            if validation.y is None and any(is_supervised(phase) for phase in phases):
                raise InputDataError(f"{validation.source} has no labels, but phase(s) "
                                     f"{[phase for phase in phases if is_supervised(phase)]} are validated on labels")
            validator = Validator(spark, validation, driver_spec, model_input, classes,
                                  partitions=spark.sparkContext.defaultParallelism)
            facts["validation"] = validation.describe()
        watch = cls(settings=settings, run=run, spec=spec, record=record, weights=weights,
                    feature_shape=tuple(int(d) for d in feature_shape), validator=validator)
        return watch, facts

    # ------------------------------------------------------------------ epochs
    def end_epoch(self, phase: str, epoch: int, summary: dict, *, model: Any, validate: bool = True,
                  executors_busy: bool = False) -> bool:
        """Validate the epoch's consolidation, update early stopping, log; True when the phase should stop.

        What the nodes refused as unverified during the epoch is warned of and added to ``summary`` as
        ``refused`` (counts by reason; :mod:`node.watch._refusals`).

        Adds ``validation`` (a dict of metrics, or absent) to ``summary``; the record's step is
        updated in memory, and written by the caller with the epoch.  ``validate=False``: the store
        no longer holds the epoch's own weights (an epoch before the last of a job that trained
        several: ``sync``, ``sharing``), so nothing is validated rather than a later epoch's weights.
        ``executors_busy``: the next epoch's job holds or waits for the task slots (:meth:`Validator.evaluate`).
        The epoch is validated on the snapshots its reports name (``summary["versions"]``), not newer ones
        the next epoch's job wrote meanwhile (``async``); where those are all gone, it is not validated (logged).
        """
        step = self.record.step(phase)
        stop = False
        started = time.perf_counter()
        refused = self.refusals.note(phase, epoch, summary.get("records") or ())
        if refused:
            summary["refused"] = refused
        phase_params = self._epoch_params(phase, epoch, summary) if self.validator is not None and validate else None
        if phase_params is not None:
            metrics = self.validator.evaluate(phase, {**model.parameters(), **phase_params}, executors_busy)
            summary["validation"] = metrics
            step.setdefault("validation", [])
            step["validation"] = [entry for entry in step["validation"] if entry["epoch"] < epoch]
            step["validation"].append({"epoch": epoch, "time": time.time(),
                                       "seconds": time.perf_counter() - started,
                                       "evaluated_on": self.validator.last_evaluated_on, **metrics})
            stop = self._early_stop(phase, epoch, metrics=metrics, phase_params=phase_params)
        if self.live is not None:
            base = learning_rate_of(self.spec, phase)  # times the scaling rule's mean factor of the epoch
            rate = None if base is None else base * float(summary.get("learning_rate_scale") or 1.0)
            self._safely("TensorBoard log", lambda: self.live.epoch(summary, summary.get("validation"), rate))
        if self.mlflow is not None:
            figures = {"loss": summary["loss"], "samples_per_s": summary["samples_per_s"],
                       "merge_share": summary["merge_fraction"], **(summary.get("validation") or {})}
            self._safely("MLflow", lambda: self.mlflow.epoch(phase, epoch, figures))
        return stop

    def _epoch_params(self, phase: str, epoch: int, summary: dict) -> dict[str, np.ndarray] | None:
        try:
            return self.weights.consolidate(phase, summary["nodes"], as_of=summary.get("versions")).params
        except storage.NoUsableSnapshotError as error:
            logger.warning("run %s %s epoch %d is not validated: the snapshots it ended with are gone (%s)",
                           self.run, phase, epoch + 1, error)
            return None

    def _early_stop(self, phase: str, epoch: int, *, metrics: Mapping[str, float],
                    phase_params: dict[str, np.ndarray]) -> bool:
        rule = self.early_stopping
        if rule is None or not rule.applies_to(phase):
            return False
        step = self.record.step(phase)
        earlier = step.get("early_stopping") if epoch > 0 else None  # a phase trained again starts afresh
        state = rule.update(earlier, epoch, float(metrics[rule.metric]))
        if state.pop("improved"):  # a new file: the best the record names now stays until the record names this one
            stored = self.weights.put_phase_result(best_result_name(phase), phase_params)
            state.update(best_sha256=params_digest(phase_params), best_file=stored)
        step["early_stopping"] = state
        if state["stopped"]:
            logger.info("run %s phase %s: early stopping after epoch %d: %s has not improved for %d epoch(s); "
                        "best %.4f at epoch %d", self.run, phase, epoch + 1, rule.metric, state["wait"],
                        state["best"], state["best_epoch"] + 1)
        return bool(state["stopped"])

    # ------------------------------------------------------------------ phases
    def stopped(self, phase: str) -> bool:
        """True when early stopping ended ``phase`` (a resumed run trains it no further)."""
        return bool((self.record.step(phase).get("early_stopping") or {}).get("stopped"))

    def best_result(self, phase: str) -> tuple[dict[str, np.ndarray], str] | None:
        """The best epoch's consolidation kept by early stopping, and where it comes from; None without one."""
        rule, state = self.early_stopping, self.record.step(phase).get("early_stopping") or {}
        if rule is None or not rule.applies_to(phase) or state.get("best_sha256") is None:
            return None
        try:
            best = self.weights.get_phase_result(best_result_name(phase), state.get("best_file"))
        except storage.StoreError as error:
            best = None
            logger.warning("run %s: the best weights of phase %s are unusable: %s", self.run, phase, error)
        if best is None or params_digest(best) != state["best_sha256"]:
            logger.warning("run %s: the best weights of phase %s are missing or not the ones the record names; "
                           "the phase ends with its last consolidation", self.run, phase)
            return None
        how = "stopped early" if state.get("stopped") else "all epochs ran"
        return best, (f"early stopping ({how}): the best epoch, {state['best_epoch'] + 1}, "
                      f"{rule.metric} {state['best']:.4f}")

    def end_phase(self, phase: str, result: Mapping[str, np.ndarray]) -> None:
        if self.live is not None:
            epochs = self.record.epochs_done(phase)
            self._safely("TensorBoard log",
                         lambda: self.live.phase_end(phase, result, epochs=epochs, feature_shape=self.feature_shape))

    def finish(self, status: str, model_path: str | None = None) -> None:
        """The fit ended with ``status``: the model artifact to MLflow (when given), writers closed."""
        if self.mlflow is not None:
            if model_path is not None:
                self._safely("MLflow", lambda: self.mlflow.model(model_path))
            self._safely("MLflow", lambda: self.mlflow.finish(status))
            self.mlflow = None

    def close(self) -> None:
        if self.validator is not None:
            self.validator.close()
        if self.mlflow is not None:
            self.finish("failed")
        if self.live is not None:
            self.live.close()
            self.live = None

    # ------------------------------------------------------------------ writers
    def _open_live(self) -> Any:
        if not self.settings.log_dir:
            return None
        try:
            return LiveLog(os.path.join(self.settings.log_dir, self.run))
        except ImportError:
            # Asked for by name: a warning; the default folder without the extra: a note only.
            asked = self.settings.log_dir != DEFAULT_LOG_DIR
            logger.log(logging.WARNING if asked else logging.INFO,
                       "no live TensorBoard log for run %s: tensorboardX is not installed "
                       "(pip install tensorboardX; log_dir=None turns the log off)", self.run)
        except OSError as error:
            logger.warning("no live TensorBoard log for run %s: %s", self.run, error)
        return None

    def _open_mlflow(self) -> Any:
        if not self.settings.mlflow_tracking_uri:
            return None
        params = {**{f"settings.{k}": v for k, v in self.settings.to_dict().items()},
                  **{f"model.{k}": v for k, v in self.spec.items()}}
        try:
            uri = self.settings.mlflow_tracking_uri
            return MlflowLog(DEFAULT_TRACKING_URI if uri is True else str(uri), self.run, params)
        except ImportError as error:
            raise TrainingError("mlflow_tracking_uri is set, but MLflow is not installed: "
                                "pip install 'sparkdbn[mlflow]'") from error

    def _safely(self, what: str, action: Any) -> None:
        try:
            action()
        except Exception as error:  # noqa: BLE001 - watching must never fail the training run
            logger.warning("run %s: %s failed and is switched off: %s", self.run, what, error)
            if what == "MLflow":
                self.mlflow = None
            else:
                self.live = None
