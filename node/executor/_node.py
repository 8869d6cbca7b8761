"""The executor side: one process-wide node per run inside a Spark Python worker.

Spark reuses Python workers across tasks and jobs, so the node -- model replica, store
handles, node actor and transport -- is created on the first task of a fit and kept in a
module-level registry (:mod:`node.executor._tasks`).  Spark may still kill the worker (a task
that raised, 60 s idle, executor loss, a crash), so a node keeps nothing that is not in the
store: a fresh node entering a phase starts from the consolidation of the snapshots the store
already holds for it (:meth:`storage.WeightStore.consolidate`, the same rule the driver uses),
else from the phase's start parameters the driver broadcast.

:class:`ExecutorNode` is what the training modes train on (it has all that
:class:`~node.modes.ModeNode` asks for): it trains a partition (:meth:`ExecutorNode.train`),
reports it from one value (:meth:`ExecutorNode.report`) and keeps each mode's state between
tasks (:meth:`ExecutorNode.mode_state`).  Node identity is ``<host>-<pid>``, never the partition
index: the same partition lands on different workers from job to job.

A node computes where its task's GPU is (:mod:`node.executor._device`): it builds its replica
there, warms the kernels up once per process, and keeps the partitions it trains on the GPU
(:class:`rbm.DeviceDataCache`, within ``NodeConfig.gpu_data_budget_bytes``); each report names
the node's device and what the cache holds.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import time
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

import numpy as np

import actors
import rbm
import storage

from .._contract import NodeConfig, NodeDevice, PartitionReport, TaskSpec
from .._errors import InputDataError, NodeDeviceError
from ..data import encode_labels
from ..modes import NodeScaling, PartitionWork, Trained, schedule_epoch, schedule_place
from ._device import device_failure, release_gpu_memory, replica_on, see_device, use_device
from ._network import choose_node_address
from ._resident import NodeData

__all__ = ["ExecutorNode", "node_id", "outer_step_in"]

State = TypeVar("State")

logger = logging.getLogger(__name__)

#: Where this executor imported sparkdbn's ``node`` package from (a shipped zip on a cluster).
_PACKAGE_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def node_id() -> str:
    """This process's node name: ``<host>-<pid>``."""
    return f"{socket.gethostname()}-{os.getpid()}"


def replica_spec(config: NodeConfig) -> dict:
    """The spec a node builds its replica from: the fit's, with the nodes' minibatch where the scaling rule set one."""
    if not config.node_batch_size:
        return config.spec
    return rbm.spec_for_batch_size(config.spec, int(config.node_batch_size))


def outer_step_in(config: NodeConfig, model: Any, phase: str) -> tuple[float, float] | None:
    """The outer step ``(eta, mu)`` the nodes of ``config`` take in ``model``'s ``phase``, None where they merge plainly.

    They take it where the fit has several nodes, the step is not plain merging (``eta = 1, mu = 0``),
    the nodes train with the model's own minibatch, and, where the step is the rule's
    (``config.outer_by_rule``), the model takes it in the phase (:func:`rbm.takes_outer_step`).

    Where the scaling rule splits the nodes' minibatch (they take few steps per epoch, its factor is
    past the rates' share) the split already makes up the steps the nodes do not take one after the
    other, and the outer momentum on top overshoots: DBN(64, 64) on 1,347 digits, 8 nodes, 5 seeds
    (scripts/bench_scaling.py), 0.940 without the step, 0.930 with 0.7/0.8.
    """
    eta, mu = config.outer_learning_rate, config.outer_momentum
    if config.nodes < 2 or config.node_batch_size or not actors.outer_step_enabled(eta, mu):
        return None
    if config.outer_by_rule and not rbm.takes_outer_step(model, phase):
        return None
    return float(eta), float(mu)


class ExecutorNode:
    """Model replica + store handles + node actor of one fit in this process.

    Creating it starts nothing; :meth:`start` opens the store and starts the node actor,
    :meth:`stop` ends them.
    """

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.name = node_id()
        self.classes = None if config.classes is None else np.asarray(config.classes)
        self.phase: str | None = None
        self.start_digest: str | None = None
        self.entered_from = ""  # where the node entered its phase from, until a report tells it
        self.samples_seen: dict[str, int] = {}
        self.partitions_done = 0
        self._mode_states: dict[type, Any] = {}  # what the training modes keep on this node between tasks
        self._straggler: bool | None = None
        self.store: storage.Store | None = None
        self.data: NodeData | None = None  # the fit's training partitions this node holds (node.executor._resident)
        self.weights: storage.WeightStore | None = None
        self.runs: storage.RunStore | None = None
        self.handle: actors.NodeHandle | None = None
        self.model: Any = None
        self.device: NodeDevice | None = None  # where the replica computes (set by start)
        self.device_data: rbm.DeviceDataCache | None = None  # the partitions kept on the node's GPU
        self._xp: Any = np
        self.scaling = NodeScaling(config.scale_rule, config.spec, config.warmup_partitions, config.fanout,
                                   n_samples=config.n_samples or None, fit_nodes=config.nodes or None,
                                   node_batch=config.node_batch_size or None, rates_cap=config.rates_cap or None)
        self.learning_rate_scale = 1.0
        self.outer: actors.OuterState | None = None  # the outer step's anchor and momentum in self.phase

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "ExecutorNode":
        """Open the store, build the replica where the task's GPU is (or on the CPU), start the node actor.

        Raises
        ------
        NodeDeviceError
            The model asks for ``device="gpu"`` and this task has no usable GPU.
        """
        config = self.config
        self.device = see_device(str(config.spec.get("device", "cpu")), self.name)
        if self.device.problem:
            raise NodeDeviceError(device_failure(self.device))
        self.store = storage.open_store(config.store_url, retry_timeout_s=config.store_retry_timeout_s)
        self.data = NodeData(self.store, config, self.name)
        self.weights = storage.WeightStore(self.store, config.run, config.key)
        self.runs = storage.RunStore(self.store, config.run, config.key)
        self.model, self.device = replica_on(replica_spec(config), config.feature_shape, self.classes, self.device)
        if self.device.kind == "gpu":
            self.device_data = rbm.DeviceDataCache(config.gpu_data_budget_bytes or None)
            self._xp = rbm.array_module("gpu")
        address = choose_node_address(local_master=config.local_master, driver_host=config.driver_host,
                                      bind_host=config.bind_host, advertise_host=config.advertise_host)
        self.handle = actors.start_node(
            config.run, self.name, self.store, config.key, fanout=config.fanout,
            anti_entropy_interval_s=config.anti_entropy_interval_s,
            peer_refresh_interval_s=config.peer_refresh_interval_s, keep_versions=config.keep_versions,
            expected_peers=max(0, (config.nodes or 0) - 1),
            bind_host=address.bind_host, advertise_host=address.advertise_host,
            port_range=actors.parse_port_range(config.port_range))
        logger.info("node %s started for run %s on %s (bound on %s: %s), computing on %s (%s)", self.name,
                    config.run, self.handle.endpoint, address.bind_host, address.reason,
                    f"GPU {self.device.address} ({self.device.name})" if self.device.kind == "gpu" else "the CPU",
                    self.device.reason)
        return self

    def use_device(self) -> None:
        """Before each task: the node's GPU is this thread's current one (cupy allocates and launches there).

        A task holding another address than the node's GPU does not reach here: the worker replaces
        its node first (:func:`~node.executor._device.moved_from`, in :mod:`node.executor._tasks`).
        """
        if self.device is None or self.device.kind != "gpu":
            return
        use_device(self.device)

    def stop(self) -> None:
        """Stop the actor and close the transport; on a GPU, give back what the node held there (idempotent)."""
        handle, self.handle = self.handle, None
        if handle is not None:
            try:
                handle.stop()
            except Exception:  # at exit nothing can be done beyond saying so
                logger.exception("stopping node %s of run %s failed", self.name, self.config.run)
        if self.device_data is not None:  # the partitions on the GPU go, the replica, and the node's share of its pool
            self.device_data.clear()
            self.model, self.outer = None, None
            self._mode_states.clear()
            release_gpu_memory(self.device)

    # ------------------------------------------------------------------ phases
    def enter_phase(self, phase: str, start_digest: str, start_payload: Callable[[], bytes],
                    start_nodes: Sequence[str] = (), start_versions: Mapping[str, int] | None = None) -> str:
        """Load the phase's starting point when this process has not trained in it yet.

        That is the mean of the snapshots ``start_versions`` names, where they are all there (where the
        phase's last recorded epoch ended, on a resumed fit's first job), else of the newest snapshots of
        ``start_nodes`` (the nodes of the phase's last finished epoch), else of every node that stored
        one, else the phase's start; the node's actor then counts every snapshot stored so far as merged.  Where Python workers do not outlive a
        task (``spark.python.worker.reuse=false``) every epoch's nodes are new: starting from the mean
        of every node's newest snapshot, then merging each of them once more, two ``async`` nodes
        ended at 0.950-0.964 against one process's 0.975 (4 runs, digits, mean 0.957); from the last
        epoch's nodes, merging only what came after, 0.964-0.967 (4 runs, mean 0.965).

        Returns
        -------
        str
            Where the parameters came from: ``"kept"``, ``"start"`` or ``"store(<n> nodes)"``.
        """
        if self.phase == phase and self.start_digest == start_digest:
            return "kept"
        # The payload holds the whole model: the results of the phases before (a node must not
        # propagate through its own, unconsolidated lower layers) and this phase's start.
        self.model.set_parameters(storage.decode_params(start_payload(), f"start of phase {phase}"))
        try:
            consolidated = (self.weights.consolidate_exact(phase, start_versions or {})
                            or self._consolidate_start(phase, start_nodes))
            self.model.set_parameters(consolidated.params)
            stored = self.weights.newest_per_node(phase)
            self.handle.contains(phase, {peer: ref.version for peer, ref in stored.items()})
            origin = f"store({len(consolidated.refs)} nodes)"
        except storage.StoreNotFoundError:
            origin = "start"
        self.phase, self.start_digest = phase, start_digest
        self.entered_from = origin  # told by the next partition's report
        self._start_outer(phase, start_nodes)
        self.scaling.enter_phase(phase)
        self.samples_seen.setdefault(phase, 0)
        logger.info("node %s entered phase %s from %s", self.name, phase, origin)
        return origin

    # ------------------------------------------------------------------ the outer step
    @property
    def outer_enabled(self) -> bool:
        """In its phase the node takes an outer step (:func:`outer_step_in`)."""
        return self.phase is not None and outer_step_in(self.config, self.model, self.phase) is not None

    def _start_outer(self, phase: str, start_nodes: Sequence[str]) -> None:
        """Anchor the outer step where the node enters ``phase``, with the momentum the store holds for it.

        A phase's parameters are new, so its outer state starts there: the momentum is the mean of
        the newest stored momentum of ``start_nodes`` (else of every node of the phase; none: zero),
        so a restarted or new node continues the run's.
        """
        self.outer = None
        if not self.outer_enabled:
            return
        momentum = self.weights.outer_momentum(phase, start_nodes or None)
        if momentum is None and start_nodes:
            momentum = self.weights.outer_momentum(phase)
        params = self.model.parameters(phase)
        try:
            self.outer = actors.OuterState.start(params, momentum)
        except actors.MergeError as error:  # another model's layout: start without it, saying why
            logger.warning("node %s ignores the stored outer momentum of phase %s: %s", self.name, phase, error)
            self.outer = actors.OuterState.start(params)

    def restart_outer(self, phase: str) -> None:
        """Anchor the outer step on the parameters now, with the momentum stored for ``phase`` (a sync job the
        driver runs again continues from an average its nodes did not step from)."""
        if phase == self.phase:
            self._start_outer(phase, ())

    def adopt_merge(self, phase: str, before: Mapping[str, np.ndarray], merged: Mapping[str, np.ndarray]) -> None:
        """Take the weights a merge made from ``before``; the outer step's anchor moves with them.

        So the next outer step's change is what this node's own training did since its last step,
        not the nodes' disagreement that a merge takes away (:meth:`actors.OuterState.moved`).
        """
        self.model.set_parameters(merged)
        if self.outer is not None and phase == self.phase:
            self.outer = self.outer.moved(before, merged)

    def outer_step(self, phase: str) -> None:
        """The outer step on what training changed since the last one (:func:`actors.outer_step`)."""
        if self.outer is None or phase != self.phase:
            return
        params, self.outer = actors.outer_step(self.outer, self.model.parameters(phase),
                                               self.config.outer_learning_rate, self.config.outer_momentum)
        self.model.set_parameters(params)

    def save_outer(self, phase: str) -> None:
        """Store this node's outer momentum in ``phase`` (a version per partition trained; the newest 2 kept)."""
        if self.outer is None or phase != self.phase:
            return
        self.weights.put_outer_momentum(phase, self.name, self.partitions_done, self.outer.momentum)

    def _consolidate_start(self, phase: str, start_nodes: Sequence[str]) -> storage.Consolidation:
        """The mean a node joining ``phase`` starts from: of ``start_nodes``' newest snapshots, else every node's."""
        try:
            return self.weights.consolidate(phase, start_nodes or None)
        except storage.NoUsableSnapshotError:
            if not start_nodes:
                raise
            return self.weights.consolidate(phase)  # none of them left one usable

    # ------------------------------------------------------------------ one partition
    def class_indices(self, y: np.ndarray | None) -> np.ndarray | None:
        """Labels -> class indices (what ``train_partition`` takes)."""
        if y is None or self.classes is None:
            return None
        return encode_labels(y, self.classes)

    def rng(self, task: TaskSpec, partition: int) -> np.random.Generator:
        """The minibatch order of one partition: seed, phase, epoch, partition (the same for one node and many)."""
        return np.random.default_rng([task.node.seed, task.phase_index, task.epoch, partition])

    def mode_state(self, kind: type[State]) -> State:
        """This node's ``kind()``, made on first use and kept between tasks: a training mode's own state."""
        return self._mode_states.setdefault(kind, kind())

    def train(self, task: TaskSpec, partition: int, X: np.ndarray, y: np.ndarray | None,
              merged_from: Sequence[str] = ()) -> Trained:
        """One pass of the model over a partition (the fault hook may end the process here).

        ``merged_from`` names the peers whose progress the node merged just before: the learning
        rates follow the number of nodes merging (:class:`~node.modes._scaling.NodeScaling`).

        Raises
        ------
        InputDataError
            The model refused the data, or diverged on it: deterministic, reported once.
        """
        indices = self.class_indices(y)
        rng = self.rng(task, partition)
        self.scaling.merged(merged_from)
        self.learning_rate_scale = self.scaling.scale()
        self.model.set_learning_rate_scale(self.learning_rate_scale)
        set_schedule_epoch = getattr(self.model, "set_schedule_epoch", None)  # optional in the seam (rbm._model)
        if set_schedule_epoch is not None:  # schedules run on the fit's epochs, not on this node's partitions
            set_schedule_epoch(schedule_epoch(task.epoch, self.learning_rate_scale))
        set_schedule_plan = getattr(self.model, "set_schedule_plan", None)  # optional as well
        if set_schedule_plan is not None:  # what fit does by its plan (the DBN's anneal), at the partition's place
            place = schedule_place(task.epoch, task.slots, partition) if task.planned_epochs else None
            if place is None:
                set_schedule_plan(None)
            else:
                set_schedule_plan(task.planned_epochs, *place)
        self._maybe_fault(task, X, indices, rng)
        if self.device_data is not None:  # the partition's rows stay on the GPU for the next epochs
            X = self.device_data.get((self.config.run, self.config.fit_id, partition), X, self._xp)
        # The thread's CPU seconds beside the pass's wall seconds: what the node computed, against
        # what it waited for a core (a machine shared with other work; more workers than cores).
        cpu_started = time.thread_time()
        try:
            metrics = self.model.train_partition(X, indices, task.phase, rng)
        except ValueError as error:  # the model's own input checks, or divergence: the same on every retry
            raise InputDataError(f"{type(error).__name__}: {error}") from error
        cpu_s = time.thread_time() - cpu_started
        if not math.isfinite(float(metrics["loss"])):  # weights still finite, but the next pass overflows them
            scaled = (f" with the learning rates x{self.learning_rate_scale:g} (the scaling rule's factor: "
                      "scale_rule='none' leaves them as the model has them)" if self.learning_rate_scale > 1 else "")
            raise InputDataError(
                f"training diverged on node {self.name} (phase {task.phase}, epoch {task.epoch}, partition "
                f"{partition}): its loss is {float(metrics['loss'])}{scaled}; lower the learning rate or check "
                "the input scaling")
        self.samples_seen[task.phase] = self.samples_seen.get(task.phase, 0) + int(metrics["samples"])
        self.partitions_done += 1
        self.scaling.trained()
        slowed_s = self._straggle(task, float(metrics["seconds"]))
        return Trained(partition, metrics, self.samples_seen[task.phase], slowed_s, cpu_s)

    def also_merged(self, peers: Iterable[str]) -> None:
        """Peers merged while a partition trained: the next partitions' rates follow them too."""
        self.scaling.also_merged(peers)

    def _straggle(self, task: TaskSpec, compute_s: float) -> float:
        """Benchmark/test setting: the one chosen node sleeps ``(factor - 1) x`` its compute time.

        The node is chosen once per run: the first to train claims ``runs/<run>/faults/straggler``
        (an exclusive create), so exactly one node of the run is slow.
        """
        factor = task.node.straggler_factor
        if factor <= 1.0:
            return 0.0
        if self._straggler is None:
            marker = f"runs/{task.node.run}/faults/straggler"
            self.store.makedirs(f"runs/{task.node.run}/faults")
            self.store.create_exclusive(marker, self.name.encode())
            self._straggler = self.store.read_bytes(marker, max_bytes=1024).decode(errors="replace") == self.name
            if self._straggler:
                logger.warning("node %s is the run's straggler: it sleeps %.1fx its compute time", self.name,
                               factor - 1.0)
        if not self._straggler:
            return 0.0
        delay_s = (factor - 1.0) * compute_s
        time.sleep(delay_s)  # the straggler setting itself: slow on purpose, in proportion to real work
        return delay_s

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

    def report_earlier(self, task: TaskSpec, partition: int, samples: int, loss: float, origin: str) -> PartitionReport:
        """This node's report of a partition an earlier attempt of its task trained (figures from that attempt's
        record; not stored again as a metrics record: that attempt's node stored it)."""
        return self._untrained_report(task, partition, samples=int(samples), loss=float(loss), code=_PACKAGE_FOLDER,
                                      entered_from=origin)

    def _untrained_report(self, task: TaskSpec, partition: int, **fields: Any) -> PartitionReport:
        """A report of ``partition`` that this task did not train now: no time, no merges, ``fields`` as given."""
        return PartitionReport(node=self.name, run=task.node.run, phase=task.phase, epoch=task.epoch,
                               partition=partition, train_s=0.0, merge_s=0.0, publish_s=0.0, task_s=0.0, merged=0,
                               merged_from=(), staleness_s=None, samples_seen=self.samples_seen.get(task.phase, 0),
                               time=time.time(), pid=os.getpid(), device=self.device, **fields)

    def _maybe_fault(self, task: TaskSpec, X: np.ndarray, y: np.ndarray | None, rng: np.random.Generator) -> None:
        """Test hook: once per run, train half the partition and SIGKILL this worker.

        ``kill_worker_once_at == "<phase>:<epoch>"`` arms it; a marker file in the store makes
        sure only the first worker to get there dies (the retry must succeed).
        """
        if task.node.kill_worker_once_at != f"{task.phase}:{task.epoch}":
            return
        marker = f"runs/{task.node.run}/faults/killed-worker"
        if self.store.exists(marker):
            return
        self.store.write_bytes(marker, f"{self.name} {time.time()}".encode())
        half = max(1, len(X) // 2)
        self.model.train_partition(X[:half], None if y is None else y[:half], task.phase, rng)
        logger.warning("fault hook: node %s kills itself with SIGKILL in the middle of a partition", self.name)
        os.kill(os.getpid(), signal.SIGKILL)


def _plain(stats: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): (v if isinstance(v, (int, float, str, bool)) or v is None else str(v)) for k, v in stats.items()}
