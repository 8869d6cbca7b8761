"""What every training mode is: a driver half and an executor half (see :mod:`node.modes._registry`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Iterator

from .._contract import ModeOptions, PartitionReport, TaskSpec
from ..data import Block
from ._protocols import ModeDriver, ModeNode, ModeSettings
from ._scaling import default_partitions, node_batch_size, outer_gain

__all__ = ["TrainingMode"]


class TrainingMode(ABC):
    """One way to train: a driver half (epochs as Spark jobs) and an executor half (one node's task).

    Each half sees the other side through the small interfaces of :mod:`node.modes._protocols`:
    the driver half a :class:`~node.modes.ModeDriver`, the executor half a :class:`~node.modes.ModeNode`.
    """

    name: ClassVar[str]

    #: The type of this mode's options in a task (:data:`node._contract.ModeOptions`).
    options_type: ClassVar[type]

    #: Whether the scaling rule applies to this mode's learning rates (it does where merges average).
    scales_rates: ClassVar[bool] = True

    #: Whether each epoch is a Spark job of its own, so that the driver ends every epoch when its job ends
    #: (validation of every epoch, early stopping); else a job trains several, and the store holds only
    #: the last one's weights when the driver ends them.
    epoch_per_job: ClassVar[bool] = False

    #: Whether this mode's nodes take the outer step (:mod:`actors._outer`) on what merging brought.
    takes_outer_step: ClassVar[bool] = True

    #: Whether a node new to a phase in a job joins from the mean of what the phase's nodes stored (a node
    #: that restarted, or started late); else it starts from the job's start, as every node of a ``sync``
    #: barrier stage does (a late one took the mean of the others' first snapshots and said "store(2 nodes)").
    joins_from_store: ClassVar[bool] = True

    def merge_fanout(self, settings: ModeSettings) -> int | None:
        """At most how many peers one merge takes in (None: every node)."""
        return None

    def check_nodes(self, nodes: int, slots: int | None, *, master: str) -> None:
        """Driver, before any work: refuse ``nodes`` tasks per job where this mode cannot train them with
        ``slots`` tasks running at once on ``master`` (None: Spark does not say).  Every mode but ``sync``
        takes any count: tasks beyond the slots wait for a free one."""

    def default_partitions(self, settings: ModeSettings, nodes: int, rows: int | None, batch_size: int | None) -> int:
        """Partitions per epoch when the settings name none (:func:`node.modes._scaling.default_partitions`)."""
        return default_partitions(self._rule(settings), nodes, rows, batch_size, self.merge_fanout(settings))

    def node_batch_size(self, settings: ModeSettings, nodes: int, rows: int, batch_size: int | None,
                        max_rate_factor: float | None = None) -> int | None:
        """The minibatch each node trains with (see :func:`node_batch_size`; None: the model has none)."""
        return node_batch_size(self._rule(settings), batch_size, nodes, rows, max_rate_factor)

    def outer_gain(self, settings: ModeSettings, nodes: int, rows: int, batch_size: int | None) -> float:
        """The gain of the outer step the rule gives this mode's nodes (:func:`node.modes.outer_gain`; 1: none)."""
        if not self.takes_outer_step or not batch_size:
            return 1.0
        return outer_gain(self._rule(settings), nodes, rows, batch_size)

    def _rule(self, settings: ModeSettings) -> str:
        """The scaling rule this mode's learning rates follow: the settings', or none where merges add."""
        return settings.scale_rule if self.scales_rates else "none"

    @abstractmethod
    def options(self, settings: ModeSettings) -> ModeOptions:
        """What the driver half tells the executor half in every task of the fit."""

    @abstractmethod
    def run_epochs(self, driver: ModeDriver, phase: str, *, first: int, epochs: int) -> list[list[PartitionReport]]:
        """Driver: train epoch ``first`` of ``phase`` (and maybe more, up to ``epochs``) over every partition.

        Returns the nodes' reports, one list per epoch trained (at least one), from ``first`` on.
        """

    def node_unavailable(self, task: TaskSpec, spark_partition: int, error: BaseException) -> None:
        """Executor: the task's node could not start (``error``; the task reports it, the fit ends on it).  A
        mode whose tasks wait for each other tells the others, which would wait for this one in vain; the
        others' tasks end on their own."""

    @abstractmethod
    def train_task(self, node: ModeNode, task: TaskSpec, *, spark_partition: int,
                   blocks: list[Block]) -> Iterator[PartitionReport]:
        """Executor: the node's share of the job (``blocks``: its slot's partitions), one report per partition trained.

        A partition whose data the model refuses is reported with its error, not raised: the
        same data would fail the same way on a retry.
        """
