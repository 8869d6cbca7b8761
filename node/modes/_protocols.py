"""What the training modes use of the driver and of a node: the small interfaces they define.

A mode never sees the driver's fit or the executor's node.  Its driver half gets a
:class:`ModeDriver`: the fit's settings, its number of nodes and its training jobs
(:class:`node.driver.FitJobs`).  Its executor half gets a :class:`ModeNode`: the node's model,
store, snapshot exchange and partitions, and three calls -- train a partition, report it, refuse
it (:class:`node.executor.ExecutorNode`).  Both sides satisfy these protocols structurally, so the
modes import neither side, and a test stands either in with a few lines.

A node reports a partition from one value, :class:`PartitionWork`: what :meth:`ModeNode.train`
returned (:class:`Trained`) and what the mode exchanged with its peers around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Protocol, Sequence, TypeVar

import numpy as np

import actors
import storage

from .._contract import ModeOptions, PartitionReport, TaskSpec

__all__ = ["ModeDriver", "ModeNode", "ModeSettings", "NodePartitions", "PartitionWork", "StartedJob", "Trained"]

State = TypeVar("State")


# ---------------------------------------------------------------------- the driver, as a mode's driver half sees it
class ModeSettings(Protocol):
    """The training settings a mode reads (:class:`node.TrainingSettings` has them all)."""

    @property
    def scale_rule(self) -> str: ...

    @property
    def fanout(self) -> int | None: ...

    @property
    def averaging_frequency(self) -> int: ...

    @property
    def barrier_timeout_s(self) -> float: ...

    @property
    def sharing_threshold(self) -> float: ...

    @property
    def sharing_sparsity(self) -> float: ...


class StartedJob(Protocol):
    """A training job the driver started (:class:`node.driver.TrainingJob`)."""

    @property
    def task(self) -> TaskSpec:
        """What every task of the job carries."""

    def reports(self) -> list[PartitionReport]:
        """The nodes' reports, one per partition trained, once the job has ended."""


class ModeDriver(Protocol):
    """What a mode's driver half uses of the fit: its settings, its nodes and its training jobs.

    A training job runs one Spark task per node; every task carries every node's *slot* (the
    partitions dealt to it once per fit) and the job's epochs, ``epochs``.
    """

    @property
    def settings(self) -> ModeSettings: ...

    @property
    def nodes(self) -> int:
        """Nodes training at once: tasks per training job."""

    @property
    def store(self) -> storage.Store:
        """The run's store."""

    @property
    def gang_scheduling(self) -> bool:
        """Whether Spark can run a job's tasks as one barrier stage (all at once, retried together): not
        under dynamic allocation, which Spark's barrier mode does not take."""

    def start_job(self, phase: str, epochs: range, options: ModeOptions, *, gang: bool = False) -> StartedJob:
        """Start the job that trains ``epochs`` of ``phase``; ``gang``: as one barrier stage (:attr:`gang_scheduling`)."""

    def queue_job(self, running: StartedJob, phase: str, *, epochs: range, options: ModeOptions) -> None:
        """Start the job of ``epochs`` behind ``running``: its tasks take the slots as ``running``'s free them."""

    def take_queued_job(self, phase: str, epoch: int) -> StartedJob | None:
        """The job queued for ``epoch`` of ``phase``, else None (one queued for another is stopped)."""

    def warn_once(self, message: str) -> None:
        """Log ``message`` as a warning of the run, once per fit."""


# ---------------------------------------------------------------------- a node, as a mode's executor half sees it
@dataclass(frozen=True)
class Trained:
    """One pass of a node's model over a partition (:meth:`ModeNode.train`).

    ``metrics`` are the model's (``samples``, ``loss``, ``seconds``); ``samples_seen`` the node's
    samples of the phase so far, this partition's included; ``slowed_s`` the straggler's sleep
    after it (``TrainingSettings.straggler_factor``); ``cpu_s`` the CPU seconds the training
    thread spent in the pass (its merges between minibatches included); ``learning_rate_scale`` and
    ``nodes_merging`` the learning rates' factor and the nodes merging it trained with.
    """

    partition: int
    metrics: Mapping[str, Any]
    samples_seen: int
    slowed_s: float = 0.0
    cpu_s: float = 0.0
    learning_rate_scale: float = 1.0
    nodes_merging: int = 1


@dataclass(frozen=True)
class PartitionWork:
    """What a mode did for one partition, which the node reports (:meth:`ModeNode.report`).

    ``started`` is the wall time the mode began the partition (its merge included).
    ``merged_from`` names the peers whose progress the node took in, ``ages_s`` how old each was;
    ``merged_announced`` how many of those it heard of by announcement (``async``; None in a mode
    that exchanges through the store by design).  ``sent_bytes`` and ``read_bytes`` count what the
    mode wrote to and read from the store; ``stolen`` marks a partition taken from a slower peer's
    share, ``data_read_bytes`` the training data read from the store for it; ``version`` the node's
    snapshot written for it (0 in a mode that does not say).
    """

    trained: Trained
    started: float
    merge_s: float = 0.0
    publish_s: float = 0.0
    merged_from: Sequence[str] = ()
    ages_s: Sequence[float] = ()
    merged_announced: int | None = None
    sent_bytes: int = 0
    read_bytes: int = 0
    stolen: bool = False
    data_read_bytes: int = 0
    version: int = 0


class NodePartitions(Protocol):
    """The fit's training partitions a node holds or finds in the store (:class:`node.executor.NodeData`)."""

    def has(self, index: int) -> bool:
        """Whether partition ``index`` is in memory or was in the store when last listed."""

    def list_stored(self) -> None:
        """Note the partitions the store holds for the fit."""

    def peer(self, index: int, own: int) -> tuple[np.ndarray, np.ndarray | None] | None:
        """A peer's partition ``(X, y)``, kept beside the node's ``own`` ones; None if unreadable."""

    def take_read_bytes(self) -> int:
        """The data bytes read from the store since the last call."""


class ModeNode(Protocol):
    """What a mode's executor half uses of the node it trains on."""

    @property
    def name(self) -> str:
        """The node's name, ``<host>-<pid>``."""

    @property
    def model(self) -> Any:
        """The node's replica (the trainable seam: ``parameters``, ``set_parameters``, ...)."""

    @property
    def store(self) -> storage.Store: ...

    @property
    def weights(self) -> storage.WeightStore: ...

    @property
    def handle(self) -> actors.NodeHandle:
        """The node actor: fetched peer snapshots to merge, and publishing this node's."""

    @property
    def data(self) -> NodePartitions: ...

    def mode_state(self, kind: type[State]) -> State:
        """The node's ``kind()`` instance, made on first use and kept between tasks: a mode's own state."""

    def train(self, task: TaskSpec, partition: int, X: np.ndarray, y: np.ndarray | None,
              merged_from: Sequence[str] = ()) -> Trained:
        """One pass of the model over a partition; ``merged_from``: the peers merged just before.

        Raises :class:`~node.InputDataError` when the model refuses the data (the same on a retry).
        """

    def also_merged(self, peers: Iterable[str]) -> None:
        """Note peers merged while a partition trained (the learning rates follow the nodes merging)."""

    @property
    def outer_enabled(self) -> bool:
        """The node takes an outer step in its current phase (several nodes, not ``eta = 1, mu = 0``, the model's
        own minibatch, and a phase the model takes the rule's step in: :func:`node.executor.outer_step_in`)."""

    def adopt_merge(self, phase: str, before: Mapping[str, np.ndarray], merged: Mapping[str, np.ndarray]) -> None:
        """Take the weights a merge made from ``before`` (the outer step's anchor moves with them)."""

    def outer_step(self, phase: str) -> None:
        """The outer step on what training changed since the last (a no-op where it is off)."""

    def save_outer(self, phase: str) -> None:
        """Store the node's outer momentum in ``phase``, where a restarted or new node finds it."""

    def restart_outer(self, phase: str) -> None:
        """Anchor the outer step on the node's parameters now, with the momentum the store holds for ``phase``."""

    def report(self, task: TaskSpec, work: PartitionWork) -> PartitionReport:
        """The partition's report, also stored as the node's metrics record."""

    def refusal(self, task: TaskSpec, partition: int, error: Exception) -> PartitionReport:
        """A report that says why the partition's data was refused (returned, not raised: no retry)."""

    def report_earlier(self, task: TaskSpec, partition: int, samples: int, loss: float, origin: str, *,
                       merged: int = 0, learning_rate_scale: float = 1.0, nodes_merging: int = 1) -> PartitionReport:
        """This node's report of a partition an earlier attempt of its task trained (``origin`` says which), with
        that attempt's figures: the peers merged after it, the learning rates' factor and nodes merging."""
