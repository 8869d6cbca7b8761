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

This module holds the node's lifecycle (start, the device it uses, stop) and its entering a phase;
its other jobs are mixins: one partition's pass in :mod:`._node_training`, the partition reports in
:mod:`._node_reports`, the outer step in :mod:`._node_outer`.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any, Callable, Mapping, Sequence

import numpy as np

import actors
import rbm
import storage

from .._contract import NodeConfig, NodeDevice
from .._errors import NodeDeviceError
from ..modes import NodeScaling
from ._device import device_failure, release_gpu_memory, replica_on, see_device, use_device
from ._network import choose_node_address
from ._node_outer import NodeOuterStep
from ._node_reports import NodeReports
from ._node_training import NodePartitionTraining
from ._resident import NodeData

__all__ = ["ExecutorNode", "node_id"]

logger = logging.getLogger(__name__)


def node_id() -> str:
    """This process's node name: ``<host>-<pid>``."""
    return f"{socket.gethostname()}-{os.getpid()}"


def replica_spec(config: NodeConfig) -> dict:
    """The spec a node builds its replica from: the fit's, with the nodes' minibatch where the scaling rule set one."""
    if not config.node_batch_size:
        return config.spec
    return rbm.spec_for_batch_size(config.spec, int(config.node_batch_size))


class ExecutorNode(NodePartitionTraining, NodeReports, NodeOuterStep):
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
            expected_peers=max(0, (config.nodes or 0) - 1), registry_fields={"fit": config.fit_id},
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
                    start_nodes: Sequence[str] = (), start_versions: Mapping[str, int] | None = None, *,
                    join: bool = True) -> str:
        """Load the phase's starting point when this process has not trained in it yet.

        That is the mean of the snapshots ``start_versions`` names, where they are all there (where the
        phase's last recorded epoch ended, on a resumed fit's first job), else of the newest snapshots of
        ``start_nodes`` (the nodes of the phase's last finished epoch), else of every node that stored
        one, else the phase's start (``join=False``: ``start_versions``' mean, else the phase's start); the node's
        actor then counts every snapshot stored so far as merged.  Where Python workers do not outlive a
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
        origin = "start"
        try:
            consolidated = self.weights.consolidate_exact(phase, start_versions or {})
            if consolidated is None and join:
                consolidated = self._consolidate_start(phase, start_nodes)
            if consolidated is not None:
                self.model.set_parameters(consolidated.params)
                stored = self.weights.newest_per_node(phase)
                self.handle.contains(phase, {peer: ref.version for peer, ref in stored.items()})
                origin = f"store({len(consolidated.refs)} nodes)"
        except storage.StoreNotFoundError:
            pass  # nothing stored to start from: the phase's start
        self.phase, self.start_digest = phase, start_digest
        self.entered_from = origin  # told by the next partition's report
        self._start_outer(phase, start_nodes)
        self.scaling.enter_phase(phase)
        self.samples_seen.setdefault(phase, 0)
        logger.info("node %s entered phase %s from %s", self.name, phase, origin)
        return origin

    def _consolidate_start(self, phase: str, start_nodes: Sequence[str]) -> storage.Consolidation:
        """The mean a node joining ``phase`` starts from: of ``start_nodes``' newest snapshots, else every node's."""
        try:
            return self.weights.consolidate(phase, start_nodes or None)
        except storage.NoUsableSnapshotError:
            if not start_nodes:
                raise
            return self.weights.consolidate(phase)  # none of them left one usable
