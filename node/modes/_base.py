"""What every training mode is: a driver half and an executor half (see :mod:`node.modes._registry`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Iterator

from .._contract import PartitionReport, TaskSpec
from ..data._prepare import Block, filled_partitions
from ..executor._resident import store_partitions
from ._scaling import default_partitions, node_batch_size

if TYPE_CHECKING:  # the fit drives the modes; the modes only call back into it
    from ..executor._node import ExecutorNode
    from ..driver._fit import Fit
    from ..driver._settings import TrainingSettings

__all__ = ["Block", "TrainingMode", "deal_partitions", "one_task_per_node"]


def deal_partitions(rows_per_partition: list[int], nodes: int) -> list[list[int]]:
    """The partitions holding data, dealt round-robin to ``nodes`` slots (fewer when there are fewer)."""
    filled = filled_partitions(rows_per_partition)
    count = max(1, min(int(nodes), len(filled)))
    return [filled[slot::count] for slot in range(count)]


def one_task_per_node(fit: "Fit") -> tuple[list[list[int]], Any]:
    """The training partitions dealt to one Spark task per node (the same slots for the whole fit).

    ``nodes`` is ``averaging_nodes`` or Spark's default parallelism: as many tasks as run at
    once, so every task is a node of its own for as long as its job lasts.  Returns the slots
    (partition indices per Spark partition, see :func:`deal_partitions`) and the RDD to run the
    job over: the slots' numbers only, each node taking its slot's partitions from its memory or
    the store -- where the fit's first call stores them (:mod:`node.executor._resident`).
    """
    slots = deal_partitions(fit.prepared.rows_per_partition, fit.nodes)
    if fit.first_use("stored partitions"):
        store_partitions(fit)
    return slots, fit.sc.parallelize(range(len(slots)), len(slots))


class TrainingMode(ABC):
    """One way to train: a driver half (epochs as Spark jobs) and an executor half (one node's task)."""

    name: ClassVar[str]

    #: Whether the scaling rule applies to this mode's learning rates (it does where merges average).
    scales_rates: ClassVar[bool] = True

    #: Whether each epoch is a Spark job of its own, so that the driver ends every epoch when its job ends
    #: (validation of every epoch, early stopping); else a job trains several, and the store holds only
    #: the last one's weights when the driver ends them.
    epoch_per_job: ClassVar[bool] = False

    def merge_fanout(self, settings: "TrainingSettings") -> int | None:
        """At most how many peers one merge takes in (None: every node)."""
        return None

    def default_partitions(self, settings: "TrainingSettings", nodes: int, rows: int | None,
                           batch_size: int | None) -> int:
        """Partitions per epoch when the settings name none (:func:`node.modes._scaling.default_partitions`)."""
        return default_partitions(self._rule(settings), nodes, rows, batch_size, self.merge_fanout(settings))

    def node_batch_size(self, settings: "TrainingSettings", nodes: int, rows: int, batch_size: int | None,
                        max_rate_factor: float | None = None) -> int | None:
        """The minibatch each node trains with (:func:`node.modes._scaling.node_batch_size`; None: the model has none)."""
        return node_batch_size(self._rule(settings), batch_size, nodes, rows, max_rate_factor)

    def _rule(self, settings: "TrainingSettings") -> str:
        """The scaling rule this mode's learning rates follow: the settings', or none where merges add."""
        return settings.scale_rule if self.scales_rates else "none"

    @abstractmethod
    def run_epochs(self, fit: "Fit", phase: str, first: int, epochs: int) -> list[list[PartitionReport]]:
        """Driver: train epoch ``first`` of ``phase`` (and maybe more, up to ``epochs``) over every partition.

        Returns the nodes' reports, one list per epoch trained (at least one), from ``first`` on.
        """

    @abstractmethod
    def train_task(self, node: "ExecutorNode", task: TaskSpec, spark_partition: int,
                   blocks: list[Block]) -> Iterator[PartitionReport]:
        """Executor: the node's share of the job (``blocks``: its slot's partitions), one report per partition trained.

        A partition whose data the model refuses is reported with its error, not raised: the
        same data would fail the same way on a retry.
        """
