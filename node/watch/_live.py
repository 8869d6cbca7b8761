"""Live TensorBoard event files, written by the driver only, from the reports tasks already return.

Nothing extra is written on the executors: every figure comes from the epoch's
:class:`~node._contract.PartitionReport` records (one per trained partition) and the driver's
own validation.  Tags (the step is the epoch number within the phase, from 1):

* per node: ``<phase>.loss/<node>``, ``<phase>.samples_per_s/<node>``, ``<phase>.merges/<node>``,
  ``<phase>.staleness_s/<node>``, ``<phase>.dropped/<node>`` (messages the node dropped so far);
* per run: ``<phase>.run/loss``, ``<phase>.run/val_loss`` (and ``val_accuracy`` or
  ``val_reconstruction_error``), ``<phase>.run/learning_rate``, ``<phase>.run/merge_share``
  (share of the nodes' task time spent merging);
* per phase end: ``<phase>.weights/<name>`` histograms and the ``<phase>.filters`` image of the
  first layer (:func:`node.watch._report.filter_grid`).

Open them while the run trains with ``tensorboard --logdir sparkdbn-logs``.

Events are written synchronously and flushed at every epoch's end (tensorboardX's
``SummaryWriter`` queues them to a background thread whose ``flush`` does not wait for the
queue), so what an epoch logged is on disk when the epoch's summary line is shown.
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from typing import Any, Mapping

import numpy as np

from ._report import filter_grid

__all__ = ["LiveLog", "node_figures"]

logger = logging.getLogger(__name__)


def node_figures(records: list[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per node: loss (sample-weighted), samples/s (of its task time), merges, staleness, dropped messages."""
    by_node: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        by_node[str(record["node"])].append(record)
    figures = {}
    for node, mine in sorted(by_node.items()):
        samples = sum(int(r["samples"]) for r in mine)
        task_s = sum(float(r["task_s"]) for r in mine)
        staleness = [float(r["staleness_s"]) for r in mine if r.get("staleness_s") is not None]
        newest = max(mine, key=lambda r: float(r.get("time", 0.0)))
        figure = {
            "loss": sum(float(r["loss"]) * int(r["samples"]) for r in mine) / samples if samples else float("nan"),
            "samples_per_s": samples / task_s if task_s > 0 else 0.0,
            "merges": float(sum(int(r["merged"]) for r in mine)),
            # the node's counters are running totals: its newest report has them all
            "dropped": float(sum(v for k, v in (newest.get("stats") or {}).items()
                                 if k.startswith("dropped_") and isinstance(v, (int, float)))),
        }
        if staleness:
            figure["staleness_s"] = float(np.mean(staleness))
        figures[node] = figure
    return figures


class LiveLog:
    """One run's TensorBoard event files in ``folder`` (see the module docstring).

    Raises
    ------
    ImportError
        tensorboardX is not installed (``pip install tensorboardX``).
    """

    def __init__(self, folder: str) -> None:
        from tensorboardX import summary
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event

        os.makedirs(folder, exist_ok=True)
        self.folder = folder
        self._summary, self._event = summary, Event
        self._writer = EventsWriter(os.path.join(folder, "events"))

    def _write(self, proto: Any, step: int) -> None:
        self._writer.write_event(self._event(wall_time=time.time(), step=int(step), summary=proto))

    def epoch(self, summary: Mapping[str, Any], validation: Mapping[str, float] | None,
              learning_rate: float | None) -> None:
        """Scalars of one epoch; flushed, so a reader sees them at once."""
        phase, step = summary["phase"], int(summary["epoch"]) + 1
        for node, figure in node_figures(summary["records"]).items():
            for name, value in figure.items():
                self._write(self._summary.scalar(f"{phase}.{name}/{node}", float(value)), step)
        run = {"loss": summary["loss"], "merge_share": summary["merge_fraction"],
               "samples_per_s": summary["samples_per_s"], "nodes": float(len(summary["nodes"]))}
        run.update(validation or {})
        if learning_rate is not None:
            run["learning_rate"] = learning_rate
        for name, value in run.items():
            self._write(self._summary.scalar(f"{phase}.run/{name}", float(value)), step)
        self._writer.flush()

    def phase_end(self, phase: str, params: Mapping[str, np.ndarray], *, epochs: int,
                  feature_shape: tuple[int, ...] | None) -> None:
        """Weight histograms and the first layer's filters of a phase result."""
        for name, value in sorted(params.items()):
            values = np.asarray(value, dtype=np.float64).ravel()
            self._write(self._summary.histogram(f"{phase}.weights/{name}", values, "auto"), epochs)
        first = _first_layer(params)
        if first is not None:
            self._write(self._summary.image(f"{phase}.filters", filter_grid(first, feature_shape), dataformats="HW"),
                        epochs)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _first_layer(params: Mapping[str, np.ndarray]) -> np.ndarray | None:
    for name in ("rbm0.W", "W"):
        if name in params and np.ndim(params[name]) == 2:
            return np.asarray(params[name])
    for name in sorted(params):
        if np.ndim(params[name]) == 4:
            return np.asarray(params[name])
    return None
