"""Where a fit's time goes: the driver's steps, in order, with the nodes' own share of each epoch.

A :class:`FitTimings` is kept by every fit (:class:`node.driver.Fit`): each step of the driver --
the store and the lease, holding the validation rows out, checking the data, storing the training
partitions, each epoch's Spark job, its validation, each phase's result, the model, the cleanup --
is a :class:`FitStep` with its start (seconds from the fit's start) and its seconds.  Work that runs
beside the driver's (the job that starts Spark's Python workers) is a step too, marked
``background``: its seconds overlap the others'.  An epoch's step carries what its nodes said of it
(:func:`node_shares`): the seconds before their first partition (node start, reading the slot's
data), training, merging and publishing.

Users see it as ``Trainer.timings_`` (:meth:`FitTimings.to_dict`), in the run record
(``timings``) and as one log line at the end of the fit (:meth:`FitTimings.summary`).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Iterator, Mapping

__all__ = ["FitStep", "FitTimings", "node_shares"]


@dataclass
class FitStep:
    """One step of a fit on the driver.

    Attributes
    ----------
    name : str
        What the driver did (``"data check"``, ``"train epoch 1"``, ...).
    start_s : float
        When it began, in seconds from the fit's start.
    seconds : float
    background : bool
        It ran beside the driver's other steps (its seconds overlap theirs).
    nodes : dict
        An epoch's: the nodes' seconds (:func:`node_shares`); empty for the others.
    """

    name: str
    start_s: float
    seconds: float
    background: bool = False
    nodes: dict[str, float] = field(default_factory=dict)


def node_shares(records: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """What the nodes said of a job's partitions, summed over them: seconds before their first
    partition (``setup_s``, of which ``data_load_s`` reading the slot's data), training (of which
    ``train_cpu_s`` on a core: the rest is waiting for one), merging, publishing; and the slowest
    node's total (``slowest_node_s``: setup and its partitions' tasks)."""
    records = list(records)
    shares = {key: float(sum(r.get(key, 0.0) or 0.0 for r in records))
              for key in ("setup_s", "data_load_s", "train_s", "train_cpu_s", "merge_s", "publish_s")}
    per_node: dict[str, float] = {}
    for r in records:
        per_node[r["node"]] = per_node.get(r["node"], 0.0) + float(r.get("setup_s", 0.0) or 0.0) + float(r["task_s"])
    shares["slowest_node_s"] = max(per_node.values(), default=0.0)
    return shares


class FitTimings:
    """The steps of one fit (see the module docstring); the clock starts when it is made."""

    def __init__(self) -> None:
        self.origin = time.perf_counter()  # the fit's start, on time.perf_counter()
        self.steps: list[FitStep] = []

    def now_s(self) -> float:
        """Seconds since the fit's start."""
        return time.perf_counter() - self.origin

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[FitStep]:
        """Time the block as step ``name`` (recorded also when it raises); yields the step, to add to."""
        step = FitStep(name, self.now_s(), 0.0)
        try:
            yield step
        finally:
            step.seconds = self.now_s() - step.start_s
            self.steps.append(step)

    def add(self, name: str, start_s: float, seconds: float, *, background: bool = False,
            nodes: Mapping[str, float] | None = None) -> FitStep:
        """Record a step timed elsewhere (``start_s`` from :meth:`now_s`)."""
        step = FitStep(name, float(start_s), float(seconds), background, dict(nodes or {}))
        self.steps.append(step)
        return step

    def to_dict(self) -> dict[str, Any]:
        """``{"total_s": ..., "steps": [FitStep as a dict, ...]}``, the steps in the order they began (JSON-able)."""
        steps = sorted(self.steps, key=lambda step: step.start_s)
        return {"total_s": self.now_s(), "steps": [asdict(step) for step in steps]}

    def summary(self, top: int = 6) -> str:
        """One line: the fit's seconds and its ``top`` longest steps on the driver's own path."""
        own = sorted((step for step in self.steps if not step.background), key=lambda step: -step.seconds)
        parts = ", ".join(f"{step.name} {step.seconds:.2f} s" for step in own[:top])
        return f"{self.now_s():.2f} s: {parts}"
