"""The run record (``runs/<run>/record/``, see :class:`storage.RunStore`) as a sequence of steps.

A step is marked done only after everything it produced is stored and verifies, so a driver
stopped at any instant leaves a record that says exactly what is safe to reuse:

* ``steps[phase].epochs_done = k`` with ``nodes``: k epochs ran, and every node that trained
  the k-th one had flushed its snapshot before its task returned (the record names those nodes,
  so resuming consolidates *their* newest snapshots, never initial weights);
* ``steps[phase].result``: the phase result (the consolidation) is stored and verifies; the
  result names its file (``file``, ``file_sha256``, ``size_bytes``: a file named by its content);
* ``status == "done"`` with ``model``: the final model is stored and verifies.

A fit that failed says why in ``error``; the fit that resumes the run moves it to ``previous_error``
(the error of the fit just before, if it failed), so a record's ``error`` is always its own fit's.

Every write is fenced by the fit's lease (:mod:`node.run._lease`): it first lists the lease folder
(a newer generation stops the fit with :class:`~node.LeaseLostError`), then creates a new
record file of the fit's generation.  The check is for stopping early; the generation in the
name is what keeps a driver that lost the run from replacing a newer driver's record, however
late it writes.

Resuming redoes the first step not marked done from what is stored (see :mod:`node.driver._fit`).

Beside the steps, ``devices`` names where each node of the run computed (its
:class:`~node._contract.NodeDevice` as a dict: kind, GPU address, index, name, memory; or the CPU
and its host), as the nodes reported it.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Mapping, Sequence

import numpy as np

import storage

from .._errors import TrainingError
from ._lease import DriverLease

__all__ = ["RECORD_VERSION", "RunRecord"]

logger = logging.getLogger(__name__)

RECORD_VERSION = 2


class RunRecord:
    """The steps of one run, written through ``runs.write_record`` at each change, fenced by ``lease``.

    Parameters
    ----------
    runs : storage.RunStore
    data : dict
        The record's JSON content.
    lease : DriverLease
        The fit's lease: its generation names every record written, and each write checks it first.
    """

    def __init__(self, runs: storage.RunStore, data: dict[str, Any], lease: DriverLease) -> None:
        self.runs = runs
        self.data = data
        self.lease = lease

    # ------------------------------------------------------------------ create / resume
    @classmethod
    def start(cls, runs: storage.RunStore, lease: DriverLease, previous: dict | None, *, spec: dict,
              phases: Sequence[str], epochs: dict[str, int], settings: dict, store_url: str, data_facts: dict,
              classes: np.ndarray | None, started: float | None = None) -> tuple["RunRecord", bool]:
        """Write a new record, or pick up this run's earlier one, ``previous`` (``resumed`` is then True).

        ``started`` is when the fit began (``time.time()``; default now): the record's ``created`` or
        ``resumed``, so that `sparkdbn status` counts from where the fit's "trained in" does.

        Raises
        ------
        TrainingError
            The earlier run trained a different model or on data of another shape or class set.
        """
        now = time.time() if started is None else float(started)
        was_done = False
        if previous:
            record = cls(runs, _migrate(previous), lease)
            record._check_same_run(spec, phases, data_facts, classes, settings)
            was_done = record.status == "done"
            if was_done:  # nothing to train: the record stays the earlier fit's, as does the model it names
                record._say_done_again(phases, epochs)
                return record, True
            record.data.update(status="running", resumed=now, attempts=int(record.data.get("attempts", 1)) + 1,
                               settings=settings, fit=lease.fit_id)
            record.data.pop("finished", None)  # the earlier fit's end; this fit sets its own when it ends
            # The earlier fit's error is not this fit's: kept as history (that fit's only), not as ``error``.
            error = record.data.pop("error", None)
            if error:
                record.data["previous_error"] = error
            else:
                record.data.pop("previous_error", None)
        else:
            record = cls(runs, {
                "version": RECORD_VERSION, "run": runs.run, "status": "running", "created": now, "attempts": 1,
                "fit": lease.fit_id,
                "spec": spec, "phases": list(phases), "settings": settings, "store_url": store_url,
                "data": data_facts, "classes": None if classes is None else classes.tolist(),
                "steps": {phase: {"epochs_done": 0, "nodes": [], "result": None, "restarts": []} for phase in phases},
            }, lease)
        for phase in phases:
            step = record.data["steps"][phase]
            if step["result"] is not None and int(step.get("epochs", epochs[phase])) != int(epochs[phase]):
                # A finished phase is never trained again (the later phases start from its result): say so,
                # and keep the count it was trained with.
                logger.warning("run %s: phase %s is done after %d epochs; fitting the run again does not train "
                               "it for the %d asked now (train a new run id for that)", runs.run, phase,
                               int(step["epochs"]), int(epochs[phase]))
                continue
            step["epochs"] = int(epochs[phase])
        record.write()
        return record, bool(previous)

    def _say_done_again(self, phases: Sequence[str], epochs: dict[str, int]) -> None:
        """Say that fitting this done run again trains nothing: one warning when other epochs were asked."""
        asked = {phase: int(epochs[phase]) for phase in phases}
        trained = {phase: int(self.step(phase).get("epochs", self.epochs_done(phase))) for phase in phases}
        if asked != trained:
            logger.warning("run %s is done (epochs trained: %s); fitting it again trains nothing, not the epochs "
                           "asked now (%s): use a new run id to train again", self.runs.run,
                           ", ".join(f"{phase} {count}" for phase, count in trained.items()),
                           ", ".join(f"{phase} {count}" for phase, count in asked.items()))
        else:
            logger.info("run %s is done; fitting it again trains nothing (its record and model stay as they are)",
                        self.runs.run)

    def _check_same_run(self, spec: dict, phases: Sequence[str], data_facts: dict, classes: np.ndarray | None,
                        settings: dict) -> None:
        run = self.runs.run
        if self.data.get("spec", {}).get("kind") != spec.get("kind") or self.data.get("phases") != list(phases):
            raise TrainingError(f"run {run!r} trained a different model ({self.data.get('spec', {}).get('kind')}, "
                                f"phases {self.data.get('phases')}); pick another run id")
        changed = changed_settings(self.data.get("spec") or {}, spec)
        if changed:
            raise TrainingError(f"run {run!r} trains a model with {changed}: a run is one model, resumed as it was "
                                "started; pick another run id for another model")
        recorded_samples, samples = self.data.get("data", {}).get("n_samples"), data_facts.get("n_samples")
        if None not in (recorded_samples, samples) and int(recorded_samples) != int(samples):
            held_then = (self.data.get("settings") or {}).get("validation_fraction")
            held_now = settings.get("validation_fraction")
            why = (f" (it held out validation_fraction {held_then or 0} of its rows for validation, this fit holds "
                   f"out {held_now or 0}: give the run's)" if (held_then or 0) != (held_now or 0) else "")
            raise TrainingError(f"run {run!r} trained on {int(recorded_samples)} samples, this data has "
                                f"{int(samples)}{why}: a run trains on one dataset; pick another run id")
        recorded_sums, sums = self.data.get("data", {}).get("content_sums"), data_facts.get("content_sums")
        if None not in (recorded_sums, sums) and not same_content(recorded_sums, sums):
            raise TrainingError(f"run {run!r} trained on other rows ({int(samples)} as here, with other values): a "
                                "run trains on one dataset; pick another run id")
        recorded_shape = self.data.get("data", {}).get("feature_shape")
        if recorded_shape is not None and list(recorded_shape) != list(data_facts["feature_shape"]):
            raise TrainingError(f"run {run!r} trained on samples of shape {recorded_shape}, this data has "
                                f"{data_facts['feature_shape']}; pick another run id")
        recorded = self.data.get("classes")
        if recorded is not None and classes is not None and list(recorded) != classes.tolist():
            raise TrainingError(f"run {run!r} trained on classes {recorded[:12]}, this data has "
                                f"{classes.tolist()[:12]}; pick another run id")

    # ------------------------------------------------------------------ reading
    @property
    def status(self) -> str:
        return str(self.data.get("status"))

    def classes(self) -> np.ndarray | None:
        """The run's class labels, as recorded (None: no supervised phase)."""
        recorded = self.data.get("classes")
        return None if recorded is None else np.asarray(recorded)

    def step(self, phase: str) -> dict[str, Any]:
        return self.data["steps"][phase]

    def epochs_done(self, phase: str) -> int:
        return int(self.step(phase)["epochs_done"])

    def epochs_planned(self, phase: str) -> int:
        return int(self.step(phase)["epochs"])

    def nodes(self, phase: str) -> list[str]:
        """The nodes that trained the phase's last recorded epoch."""
        return list(self.step(phase)["nodes"])

    def versions(self, phase: str) -> dict[str, int]:
        """``{node: version}``: the snapshots the phase's last recorded epoch ended with (empty: not recorded)."""
        return {str(node): int(version) for node, version in (self.step(phase).get("versions") or {}).items()}

    def phase_done(self, phase: str) -> bool:
        return self.step(phase)["result"] is not None

    def result_file(self, phase: str) -> dict[str, Any] | None:
        """What names the stored phase result's file (:meth:`storage.WeightStore.put_phase_result`); None: not
        done, or a result stored by sparkdbn up to 0.2 (found through its signed pointer)."""
        result = self.step(phase)["result"]
        return result if isinstance(result, dict) and "file" in result else None

    def result_digest(self, phase: str) -> str | None:
        """:func:`~node._contract.params_digest` of the stored phase result (None: not done, or unknown)."""
        result = self.step(phase)["result"]
        return None if result is None or result.get("sha256") is None else str(result["sha256"])

    def model_digest(self) -> str | None:
        model = self.data.get("model")
        return None if self.status != "done" or not isinstance(model, dict) else str(model["sha256"])

    # ------------------------------------------------------------------ steps
    def write(self) -> None:
        """Check the lease, then create the next record file of the fit's generation."""
        self.lease.check_store()
        self.runs.write_record(self.data, generation=self.lease.generation)

    def mark_epoch(self, phase: str, epoch: int, nodes: Sequence[str], *, scaling: dict | None = None,
                   devices: Mapping[str, dict] | None = None, versions: Mapping[str, int] | None = None) -> None:
        """Epoch ``epoch`` (0-based) of ``phase`` ran and ``nodes`` flushed their snapshots.

        ``scaling`` (rule, mean learning-rate factor, nodes merging) is kept per epoch as ``scaling``;
        ``devices`` (node -> where it computed) join the run's ``devices``; ``versions`` (node -> the
        snapshot version it ended the epoch with, where the mode says: ``async``) replace the step's.
        """
        step = self.step(phase)
        step.update(epochs_done=epoch + 1, nodes=sorted(nodes), versions=dict(versions or {}))
        if scaling is not None:
            step.setdefault("scaling", {})[str(epoch)] = scaling
        if devices:
            self.data.setdefault("devices", {}).update(devices)
        self.write()

    def mark_phase(self, phase: str, digest: str, *, origin: str, stored: dict[str, Any]) -> None:
        """The phase result is stored (:func:`~node._contract.params_digest` ``digest``, its file ``stored`` as
        :meth:`storage.WeightStore.put_phase_result` returned it); ``origin`` says how it was made."""
        self.step(phase)["result"] = {"sha256": digest, "origin": origin, "time": time.time(), **stored}
        self.write()

    def restart_phase(self, phase: str, reason: str) -> None:
        """Nothing usable is left of the phase's training: it trains again from its start."""
        step = self.step(phase)
        step["restarts"].append({"time": time.time(), "reason": reason, "epochs_done_before": step["epochs_done"]})
        step.update(epochs_done=0, nodes=[], versions={}, result=None)
        self.write()
        logger.warning("run %s: phase %s trains again from its start: %s", self.runs.run, phase, reason)

    def mark(self, status: str, **fields: Any) -> None:
        self.data.update(status=status, **fields)
        self.write()

    def forget_bests(self) -> None:
        """Stop naming the early-stopping best of every phase (as the run is marked done: see ``Fit._save_model``)."""
        for step in self.data["steps"].values():
            if isinstance(step.get("early_stopping"), dict):
                step["early_stopping"].pop("best_file", None)


#: How far the content sums of the same rows may lie apart, as a share of the sum of their magnitudes, added in
#: other partitions or another order (float64 sums: about 1e-16 of it per addition; other rows differ by far more).
SAME_SUMS_RTOL = 1e-9


def same_content(recorded: Sequence[float], sums: Sequence[float]) -> bool:
    """Whether two fits' :func:`~node.data._partitions.content_sums` (added over partitions) are of the same rows."""
    if len(recorded) != len(sums):
        return True  # sums of another sparkdbn's making: not compared
    scale = SAME_SUMS_RTOL * max(abs(float(recorded[-1])), abs(float(sums[-1])), 1.0)
    return all(abs(float(a) - float(b)) <= scale for a, b in zip(recorded, sums))

#: Model settings a run may change between fits: where it computes, what it says, and what only the model's own
#: one-process ``fit`` reads (the fit's ``TrainingSettings`` say how long each phase trains and when it stops).
RESUMABLE_SETTINGS = frozenset({"device", "precision", "verbose", "epochs", "n_iter", "pretrain_epochs",
                                "finetune_epochs", "early_stopping", "n_iter_no_change", "validation_fraction"})


def changed_settings(recorded: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    """What differs between a run's recorded model spec and ``spec``, other than :data:`RESUMABLE_SETTINGS`
    (``"finetune_learning_rate 0.5, not 0.1"``; at most three named), else ``""``."""
    recorded, spec = json.loads(json.dumps(recorded)), json.loads(json.dumps(spec))  # as JSON holds them: tuples as lists
    names = sorted(name for name in set(recorded) | set(spec)
                   if name not in RESUMABLE_SETTINGS and recorded.get(name) != spec.get(name))
    told = [f"{name} {spec.get(name)!r}, not {recorded.get(name)!r}" for name in names[:3]]
    return ", ".join(told) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _migrate(record: dict[str, Any]) -> dict[str, Any]:
    """Records of store layout 1 (CHANGELOG.md: ``phases_done``/``epochs_done``) in today's shape."""
    if int(record.get("version", 1)) >= RECORD_VERSION:
        return dict(record)
    done, epochs = set(record.get("phases_done", [])), record.get("epochs_done", {})
    steps = {phase: {"epochs_done": int(epochs.get(phase, 0)), "nodes": [], "restarts": [],
                     "result": {"sha256": None, "origin": "sparkdbn 0.1"} if phase in done else None}
             for phase in record.get("phases", [])}
    migrated = {key: value for key, value in record.items() if key not in ("phases_done", "epochs_done", "epochs")}
    migrated.update(version=RECORD_VERSION, steps=steps, classes=None)
    return migrated
