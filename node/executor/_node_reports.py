"""The reports of an executor node: one per partition, from what the pass and the mode did.

A trained partition's report is also stored as the node's metrics record (:meth:`storage.RunStore.append_metrics`,
read by :mod:`node.watch`); a refused partition, or one an earlier attempt of the task trained, gets a
report without training figures.  A mixin of :class:`~node.executor._node.ExecutorNode`.
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping

import numpy as np

from .._contract import PartitionReport, TaskSpec
from ..modes import PartitionWork

__all__ = ["NodeReports"]

#: Where this executor imported sparkdbn's ``node`` package from (a shipped zip on a cluster).
_PACKAGE_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class NodeReports:
    """Mixin: the partition reports of :class:`~node.executor._node.ExecutorNode`."""

    def report(self, task: TaskSpec, work: PartitionWork) -> PartitionReport:
        """The partition's report (see :class:`~node.modes.PartitionWork`); also stored as this node's metrics record.

        Of ``work.merged_from``, ``work.merged_announced`` were heard of by announcement, in a mode
        that learns its peers' versions so (``async``); None from a mode that exchanges through the
        store by design (``sync``, ``sharing``), whose merges then count neither as announced nor
        as found by listing (they say nothing of whether the nodes reach each other).
        """
        trained, metrics = work.trained, work.trained.metrics
        announced = int(work.merged_announced or 0)
        listed = len(work.merged_from) - announced if work.merged_announced is not None else 0
        report = PartitionReport(
            node=self.name, run=task.node.run, phase=task.phase, epoch=task.epoch, partition=trained.partition,
            samples=int(metrics["samples"]), loss=float(metrics["loss"]), train_s=float(metrics["seconds"]),
            train_cpu_s=trained.cpu_s,
            merge_s=work.merge_s, publish_s=work.publish_s, task_s=time.time() - work.started,
            merged=len(work.merged_from), merged_from=tuple(work.merged_from),
            staleness_s=float(np.mean(work.ages_s)) if len(work.ages_s) else None,
            samples_seen=self.samples_seen[task.phase], time=time.time(), pid=os.getpid(),
            stats=_plain(self.handle.stats()), code=_PACKAGE_FOLDER, slowed_s=trained.slowed_s,
            sent_bytes=int(work.sent_bytes), read_bytes=int(work.read_bytes),
            learning_rate_scale=self.learning_rate_scale, nodes_merging=self.scaling.nodes(),
            merged_announced=announced, merged_listed=listed, endpoint=self.handle.endpoint or "",
            stolen=bool(work.stolen), data_read_bytes=int(work.data_read_bytes), device=self.device,
            device_data=self.device_data.report() if self.device_data is not None else {},
            entered_from=self.entered_from, version=int(work.version))
        self.entered_from = ""
        self.runs.append_metrics(self.name, report.to_record())
        return report

    def refusal(self, task: TaskSpec, partition: int, error: Exception) -> PartitionReport:
        """A report that says why the partition's data was refused (returned, not raised: no retry)."""
        return self._untrained_report(task, partition, samples=0, loss=float("nan"),
                                      error=f"partition {partition}: {error}")

    def report_earlier(self, task: TaskSpec, partition: int, samples: int, loss: float, origin: str, *,
                       merged: int = 0, learning_rate_scale: float = 1.0, nodes_merging: int = 1) -> PartitionReport:
        """This node's report of a partition an earlier attempt of its task trained (figures from that attempt's
        record: what it scored, the peers merged after it, the learning-rate factor and nodes merging it trained
        with; not stored again as a metrics record: that attempt's node stored it)."""
        return self._untrained_report(task, partition, samples=int(samples), loss=float(loss), code=_PACKAGE_FOLDER,
                                      entered_from=origin, merged=merged,
                                      learning_rate_scale=float(learning_rate_scale), nodes_merging=int(nodes_merging))

    def _untrained_report(self, task: TaskSpec, partition: int, *, merged: int = 0, **fields: Any) -> PartitionReport:
        """A report of ``partition`` that this task did not train now: no time, ``merged`` peer versions (counted,
        not named), ``fields`` as given."""
        return PartitionReport(node=self.name, run=task.node.run, phase=task.phase, epoch=task.epoch,
                               partition=partition, train_s=0.0, merge_s=0.0, publish_s=0.0, task_s=0.0,
                               merged=int(merged), merged_from=(), staleness_s=None,
                               samples_seen=self.samples_seen.get(task.phase, 0), time=time.time(), pid=os.getpid(),
                               device=self.device, **fields)


def _plain(stats: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): (v if isinstance(v, (int, float, str, bool)) or v is None else str(v)) for k, v in stats.items()}
