"""The typed, versioned contract between the driver and the executors.

A Spark task receives one :class:`TaskSpec` (which carries the fit's :class:`NodeConfig` and its
training mode's options: :class:`AsyncOptions`, :class:`SyncOptions` or :class:`SharingOptions`)
and returns one :class:`PartitionReport` per partition it trained.  Both cross the process boundary
as msgpack bytes with an explicit :data:`CONTRACT_VERSION`, never as pickles or loose dicts:
a driver and an executor from different sparkdbn versions fail with a :class:`ContractError`
that says so, instead of a ``KeyError`` deep in a task.  The codec itself is :mod:`node._codec`.

Arrays (the phase's start parameters, the class labels) travel in Spark broadcasts as ``.npz``
bytes; the contract carries their sha256 so a reused node can tell fits and phases apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping, TypeVar

import numpy as np

from . import _codec
from ._codec import ContractError

__all__ = ["CONTRACT_VERSION", "ContractError", "NodeConfig", "AsyncOptions", "SyncOptions", "SyncResume",
           "SharingOptions",
           "ModeOptions", "TaskSpec", "NodeDevice", "PartitionReport", "encode", "decode", "params_digest"]

#: Bumped whenever a field of the contract changes meaning, appears or goes.
CONTRACT_VERSION = 18

T = TypeVar("T")


@dataclass(frozen=True)
class NodeConfig:
    """What every task of one fit shares: the run, the store, the model and the node's settings.

    Attributes
    ----------
    run : str
        The run.
    fit_id : str
        This fit of it (a resumed run is a new fit: nodes of an earlier one stop).
    store_url : str
    store_retry_timeout_s : float
    key : bytes
        The run key (HMAC-SHA256): signs announcements and authenticates what is stored.
    spec : dict
        The model's JSON spec (``model.to_spec()``), enough to build an identical replica.
    feature_shape : tuple of int
        Per-sample shape, e.g. ``(64,)`` or ``(1, 28, 28)``.
    classes : tuple or None
        The class labels (ints, floats or strings), in ``classes_`` order (None: unsupervised).
    seed : int
    fanout : int or None
    merge_alpha : float or None
    keep_versions : int
    anti_entropy_interval_s, peer_refresh_interval_s, flush_timeout_s : float
    scale_rule : str
        The learning-rate scaling rule (see :mod:`node.modes._scaling`).
    warmup_partitions : int
    outer_learning_rate : float
        The outer step's ``eta`` (see :class:`~node.TrainingSettings`); with ``outer_momentum`` 0, ``1.0`` is off.
    outer_momentum : float
        The outer step's ``mu``.
    outer_by_rule : bool
        The step is the rule's (the settings named none): taken only in the phases the model takes it
        in (:func:`rbm.takes_outer_step`); False: in every phase.
    n_samples : int
        Training rows of the run (0: unknown); with the spec's ``batch_size``, the steps per node and epoch.
    nodes : int
        The fit's nodes: tasks per training job (0: unknown).  At most this many train at once, so at
        most this many count as merging, however many Python workers have been a node of the fit.
    node_batch_size : int
        The minibatch each node trains with, where it differs from the spec's ``batch_size`` (0: the
        spec's; see :func:`node.modes._scaling.node_batch_size`).
    rates_cap : float
        Where ``node_batch_size`` is set, the most the learning rates take of the scaling rule's factor
        (0: no cap; see :func:`node.modes._scaling.rates_cap`).
    kill_worker_once_at : str or None
        Test hook ``"<phase>:<epoch>"`` (see :class:`~node.TrainingSettings`).
    straggler_factor : float
        One node of the run trains this many times slower (see :class:`~node.TrainingSettings`).
    local_master : bool
        The driver's master is ``local[...]``: nodes bind loopback unless a host is given.
    driver_host : str or None
        ``spark.driver.host``: a node on a cluster binds the interface that routes to it.
    bind_host, advertise_host, port_range : str or None
        The network settings (see :class:`~node.TrainingSettings` and :mod:`node.executor._network`).
    gpu_data_budget_bytes : int
        GPU memory a node on a GPU may fill with its partitions (0: half the GPU's free memory;
        see :class:`~node.TrainingSettings`).
    """

    run: str
    fit_id: str
    store_url: str
    store_retry_timeout_s: float
    key: bytes
    spec: dict
    feature_shape: tuple[int, ...]
    classes: tuple[Any, ...] | None
    seed: int
    fanout: int | None
    merge_alpha: float | None
    keep_versions: int
    anti_entropy_interval_s: float
    peer_refresh_interval_s: float
    flush_timeout_s: float
    scale_rule: str = "auto"
    warmup_partitions: int = 2
    outer_learning_rate: float = 1.0
    outer_momentum: float = 0.0
    outer_by_rule: bool = False
    n_samples: int = 0
    nodes: int = 0
    node_batch_size: int = 0
    rates_cap: float = 0.0
    kill_worker_once_at: str | None = None
    straggler_factor: float = 1.0
    local_master: bool = True
    driver_host: str | None = None
    bind_host: str | None = None
    advertise_host: str | None = None
    port_range: str | None = None
    gpu_data_budget_bytes: int = 0


@dataclass(frozen=True)
class AsyncOptions:
    """``mode="async"``: no options of its own (what it uses, fanout, merge_alpha and flush_timeout_s, the node has)."""


@dataclass(frozen=True)
class SyncResume:
    """Where an attempt of a sync job starts: round ``round`` of ``epoch`` as ``attempt`` recorded it (its
    start records where ``start``; :mod:`node.modes._sync_rounds`)."""

    attempt: int
    epoch: int
    round: int
    start: bool


@dataclass(frozen=True)
class SyncOptions:
    """``mode="sync"``: partitions between two averages, how long a node waits at a barrier, and which attempt
    of the job this is (0: the first; a later one continues from ``resume``, None: from the job's start)."""

    averaging_frequency: int
    barrier_timeout_s: float
    attempt: int = 0
    resume: SyncResume | None = None


@dataclass(frozen=True)
class SharingOptions:
    """``mode="sharing"``: the first threshold of the sparse updates, and the share of entries they aim at."""

    threshold: float
    sparsity: float


#: What a training mode's driver half tells its executor half: one frozen dataclass per mode.
ModeOptions = AsyncOptions | SyncOptions | SharingOptions


@dataclass(frozen=True)
class TaskSpec:
    """One training job's task for every node: which phase and epochs, where the phase starts, the slots.

    The job trains epochs ``epoch`` to ``end_epoch - 1`` of ``phase`` (:attr:`epochs`; one epoch
    when ``end_epoch`` is not past ``epoch``).  ``start_digest`` is the sha256 of the broadcast
    start parameters of ``phase``.  ``slots`` are every node's partitions, dealt once per fit: the
    job's Spark partition ``i`` is the node that trains ``slots[i]`` (and takes a slower peer's
    share when it is done, :mod:`node.modes._stealing`).  ``options`` are the mode's own.
    ``start_nodes`` are the nodes that trained the phase's last finished epoch: a node new to the
    phase starts from the mean of their newest snapshots (none named: of every node's); ``start_versions``
    (``{node: version}``, on a fit's first job of a phase that the run record says ran epochs in ``async``)
    are the snapshots that epoch ended with, which it starts from instead where they are all there: newer
    ones hold part of an epoch the record does not count (a fit stopped while the next epoch trained).
    ``planned_epochs`` are the phase's epochs in the run's plan (0: not said): a node places each
    partition in it (:func:`node.modes.schedule_place`), for a model that shapes its steps by the
    plan as its ``fit`` does (``set_schedule_plan``: the DBN's fine-tuning anneal and dropout ramp).
    """

    node: NodeConfig
    mode: str
    phase: str
    phase_index: int
    epoch: int
    start_digest: str
    end_epoch: int = 0
    slots: tuple[tuple[int, ...], ...] = ()
    options: ModeOptions = AsyncOptions()
    start_nodes: tuple[str, ...] = ()
    planned_epochs: int = 0
    start_versions: dict[str, int] = field(default_factory=dict)

    @property
    def epochs(self) -> range:
        """The epochs the job trains."""
        return range(self.epoch, max(self.end_epoch, self.epoch + 1))


@dataclass(frozen=True)
class NodeDevice:
    """Where a node computes, as the node saw it (see :mod:`node.executor._device`).

    Attributes
    ----------
    kind : {"gpu", "cpu"}
        Where the node's replica lives.
    host : str
    node : str
        The node's name, ``<host>-<pid>`` (a probe's task names the process that ran it).
    requested : str
        The model's ``device``: ``"cpu"``, ``"gpu"`` or ``"auto"``.
    spark_addresses : tuple of str
        The GPU addresses Spark assigned to the task that started the node (empty: none).
    address : str or None
        The address the node uses (the first assigned), or None when Spark assigned none.
    index : int or None
        cupy's index of that GPU in the node's process (see ``CUDA_VISIBLE_DEVICES``); None on the CPU.
    name : str
        The GPU's name (``""`` on the CPU).
    memory_bytes : int
        The GPU's total memory (0 where the node did not open one).
    free_bytes : int
        The GPU's free memory when the node looked (0 where it did not open one).
    reason : str
        Why the node computes there, in words.
    problem : str or None
        Why the node cannot compute where its model asks (``device="gpu"`` without a usable GPU,
        or a replica that cannot be built there); None when it can.
    warm_up_s : float
        Seconds the node spent compiling (or loading) its GPU kernels before its first partition.
    convolutions : str
        How a GPU replica convolves: ``"cudnn"``, or ``"im2col: <why>"`` when cuDNN's frontend is
        missing (``""`` on the CPU and for models without convolutions).
    """

    kind: str
    host: str
    node: str = ""
    requested: str = "cpu"
    spark_addresses: tuple[str, ...] = ()
    address: str | None = None
    index: int | None = None
    name: str = ""
    memory_bytes: int = 0
    free_bytes: int = 0
    reason: str = ""
    problem: str | None = None
    warm_up_s: float = 0.0
    convolutions: str = ""


@dataclass(frozen=True)
class PartitionReport:
    """What a node reports for one partition it trained (also its metrics record in the store).

    ``code`` is where the executor imported sparkdbn from (a shipped zip on a cluster).  ``error``
    is set instead of training when the partition's data was refused: a deterministic input error
    is reported once, not raised (Spark would retry it on the same data).  ``slowed_s`` is the
    time a straggler node slept on purpose (``TrainingSettings.straggler_factor``); ``sent_bytes``
    and ``read_bytes`` count what the partition's mode wrote to and read from the store.
    ``learning_rate_scale`` is the factor the node trained the partition with, ``nodes_merging``
    the count of nodes it followed (see :mod:`node.modes._scaling`).  Of the ``merged`` peer versions,
    ``merged_announced`` were heard of by announcement and ``merged_listed`` only found by listing
    the store (the nodes cannot reach each other's ports when that is most; both 0 in the modes that
    exchange through the store by design, ``sync`` and ``sharing``); ``endpoint`` is the
    node's advertised endpoint.  ``stolen`` marks a partition the node took from a slower peer's
    share (:mod:`node.modes._stealing`), ``data_read_bytes`` the training data it read from the store for it.
    ``device`` is where the node computes (:class:`NodeDevice`), ``device_data`` what its GPU data cache
    holds and did (:meth:`rbm.DeviceDataCache.report`; empty on the CPU).  ``setup_s`` is what the
    node's task spent before the first partition it trained (starting the node, taking the slot's
    partitions from memory or the store, entering the phase), of which ``data_load_s`` taking the
    partitions; both 0 on the task's later reports (what the driver's timings show:
    :mod:`node.driver._timings`).  ``train_cpu_s`` is the CPU seconds the node's training thread
    spent in the ``train_s`` of the pass: below ``train_s`` by what it waited for a core.
    ``entered_from`` is set on the first report of a task in which the node entered the phase: where its
    parameters came from (:meth:`node.executor.ExecutorNode.enter_phase`: ``"start"``, the phase's start,
    or ``"store(<n> nodes)"``, the mean of what ``n`` nodes had stored: a restarted node, or one on an
    executor that joined mid-phase); empty where the node had trained in the phase already.
    ``version`` is the node's snapshot of the phase written for the partition (``async``), which the
    driver validates the epoch on while the nodes train the next; 0 in the modes that do not say.
    ``store_error`` is set, on the one report of a task that stopped, when the store stayed unreachable
    past its ``retry_timeout_s`` or refused the run's files (the error names the URL or path and the
    operation): reported, not raised, as every attempt Spark made again would meet the same store.
    ``node_error`` is set, on the one report of a task whose node could not start where the settings say
    (:class:`actors.NodeAddressError`: no free port of ``port_range``, a ``bind_host`` that is no address of
    the host): reported, not raised, as an attempt on that host again would meet the same.
    """

    node: str
    run: str
    phase: str
    epoch: int
    partition: int
    samples: int
    loss: float
    train_s: float
    merge_s: float
    publish_s: float
    task_s: float
    merged: int
    merged_from: tuple[str, ...]
    staleness_s: float | None
    samples_seen: int
    time: float
    pid: int
    stats: dict = field(default_factory=dict)
    code: str = ""
    error: str | None = None
    slowed_s: float = 0.0
    sent_bytes: int = 0
    read_bytes: int = 0
    learning_rate_scale: float = 1.0
    nodes_merging: int = 1
    merged_announced: int = 0
    merged_listed: int = 0
    endpoint: str = ""
    stolen: bool = False
    data_read_bytes: int = 0
    device: NodeDevice | None = None
    device_data: dict = field(default_factory=dict)
    setup_s: float = 0.0
    data_load_s: float = 0.0
    train_cpu_s: float = 0.0
    entered_from: str = ""
    version: int = 0
    store_error: str | None = None
    node_error: str | None = None

    def to_record(self) -> dict[str, Any]:
        """A JSON-able dict (the metrics record)."""
        record = dataclasses.asdict(self)
        record["merged_from"] = list(self.merged_from)
        return record


def params_digest(params: Mapping[str, np.ndarray]) -> str:
    """sha256 over names, dtypes, shapes and bytes of named arrays: equal digests, equal parameters."""
    digest = hashlib.sha256()
    for name in sorted(params):
        array = np.ascontiguousarray(params[name])
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def encode(value: Any) -> bytes:
    """msgpack bytes of a contract dataclass, tagged with its type and :data:`CONTRACT_VERSION` (:mod:`node._codec`)."""
    return _codec.encode(value, version=CONTRACT_VERSION)


def decode(data: bytes, cls: type[T]) -> T:
    """The ``cls`` instance :func:`encode` made, or :class:`ContractError` saying what differs (:mod:`node._codec`)."""
    return _codec.decode(data, cls, version=CONTRACT_VERSION)
