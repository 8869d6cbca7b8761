"""Early stopping as Deeplearning4j's early-stopping configuration and Keras know it.

``early_stopping={"metric": "val_accuracy", "patience": 3, "min_delta": 0.0}`` monitors a
validation metric (see :mod:`node.watch._validation`) in every phase that reports it: an epoch
*improves* when the metric beats the best so far by more than ``min_delta`` (higher is better
for accuracy, lower for losses); after ``patience`` epochs in a row without an improvement the
phase ends, and its result is the best epoch's consolidation (Keras' ``restore_best_weights``,
Deeplearning4j's best model), stored as a phase result of ``<phase>.best``.

The state lives in the run record, ``steps[phase].early_stopping``, written with the epoch it
follows, so a resumed run continues the patience count and ends a stopped phase with the best
weights.  Each new best is a new file named by its content (``best_file`` names the current one),
so the best the record names stays in the store until a record names the next: a driver stopped
between the two resumes with the earlier best, never with a name of weights already gone.  The
bests are deleted only once the run is done and its record no longer names one (see
:meth:`node.driver._fit.Fit._save_model`): before that, a driver that takes the run over may resume from
a record naming any of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ._validation import VALIDATION_METRICS, phase_metrics

__all__ = ["EarlyStopping", "best_result_name"]


def best_result_name(phase: str) -> str:
    """The phase-result name under which the best consolidation of ``phase`` is kept."""
    return f"{phase}.best"


@dataclass(frozen=True)
class EarlyStopping:
    """The rule: which metric, how many epochs without improvement, what counts as one."""

    metric: str = "val_loss"
    patience: int = 3
    min_delta: float = 0.0

    @classmethod
    def from_setting(cls, value: Any) -> "EarlyStopping | None":
        """The rule a ``TrainingSettings.early_stopping`` value asks for (None: off).

        Raises
        ------
        ValueError
            An unknown key, metric, a patience < 1 or a negative ``min_delta``.
        """
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if not isinstance(value, Mapping):
            raise ValueError(f"early_stopping takes a mapping (metric, patience, min_delta) or True, got {value!r}")
        unknown = set(value) - {"metric", "patience", "min_delta"}
        if unknown:
            raise ValueError(f"early_stopping has unknown key(s) {sorted(unknown)}; "
                             "it takes metric, patience, min_delta")
        rule = cls(metric=str(value.get("metric", cls.metric)), patience=int(value.get("patience", cls.patience)),
                   min_delta=float(value.get("min_delta", cls.min_delta)))
        if rule.metric not in VALIDATION_METRICS:
            raise ValueError(f"early_stopping metric must be one of {', '.join(VALIDATION_METRICS)}, "
                             f"got {rule.metric!r}")
        if rule.patience < 1:
            raise ValueError(f"early_stopping patience must be >= 1, got {rule.patience}")
        if not rule.min_delta >= 0.0:
            raise ValueError(f"early_stopping min_delta must be >= 0, got {rule.min_delta}")
        return rule

    @property
    def higher_is_better(self) -> bool:
        return self.metric == "val_accuracy"

    def applies_to(self, phase: str) -> bool:
        """True when a validation of ``phase`` reports the monitored metric."""
        return self.metric in phase_metrics(phase)

    def improves(self, value: float, best: float | None) -> bool:
        """Whether ``value`` beats ``best`` by more than ``min_delta``."""
        if not math.isfinite(value):
            return False
        if best is None:
            return True
        return value > best + self.min_delta if self.higher_is_better else value < best - self.min_delta

    def update(self, state: Mapping[str, Any] | None, epoch: int, value: float) -> dict[str, Any]:
        """The state after ``epoch`` (0-based) scored ``value``; ``improved`` says whether it is the new best."""
        state = dict(state or {"metric": self.metric, "best": None, "best_epoch": None, "wait": 0, "stopped": False})
        improved = self.improves(value, state["best"])
        if improved:
            state.update(best=float(value), best_epoch=int(epoch), wait=0)
        else:
            state["wait"] = int(state["wait"]) + 1
        state["improved"] = improved
        state["stopped"] = int(state["wait"]) >= self.patience
        return state
