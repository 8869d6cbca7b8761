"""What Spark runs in an executor's Python worker: the process's nodes, and the training task.

A task (:func:`run_training_task`) decodes its :class:`~node._contract.TaskSpec`, finds or starts
the process's node of the fit, takes its slot's partitions (from the node's memory or the store,
:mod:`node.executor._resident`) and hands them to the training mode named in the task
(:mod:`node.modes`); it returns one encoded :class:`~node._contract.PartitionReport` per partition
trained.  :func:`release_run_task` stops a run's node when the driver's fit ends;
:func:`probe_device_task` tells the driver, before a fit on GPUs trains, where its nodes would compute.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import socket
import threading
import time
from typing import Any, Iterator

from pyspark import Broadcast

import actors

from .._contract import ContractError, NodeConfig, PartitionReport, TaskSpec, decode, encode
from .._errors import TrainingError, store_failure
from ..modes import mode_named
from ._device import moved_from, task_gpu_addresses
from ._node import ExecutorNode, node_id
from ._probe import probe_here, probe_in_child
from ._worker_heap import settle_worker_heap

__all__ = ["probe_device_task", "release_run_task", "run_training_task", "start_worker_task"]

logger = logging.getLogger(__name__)

_registry_lock = threading.Lock()
_nodes: dict[str, ExecutorNode] = {}  # run -> the node of this process
_last_used: dict[str, float] = {}  # run -> when a task last used its node (time.monotonic)

#: A node of another run than the task's stays in its worker unless no task used it for this long.
#: Fits running side by side (two threads of one session, each calling ``Trainer.fit``) share Spark's
#: Python workers, and a worker runs their tasks in turn: stopping the other run's node at every turn
#: restarted both fits' nodes at nearly every epoch (each re-entering its phase from the store, reading
#: its partitions again, losing its mode state).  A node whose fit ended without its release task
#: reaching this worker (:func:`release_run_task`) goes after this long, or with the worker (Spark ends
#: a Python worker left without tasks for 60 s).
IDLE_NODE_STOP_S = 60.0


def _stop_all() -> None:
    with _registry_lock:
        nodes = list(_nodes.values())
        _nodes.clear()
        _last_used.clear()
    for node in nodes:
        node.stop()


# Spark's daemon ends workers with os._exit, which skips both hooks; a worker run without the
# daemon ends normally, and then pykka's non-daemon threads would block the exit unless the
# actors stop first: threading's own exit hook runs *before* non-daemon threads are joined.
atexit.register(_stop_all)
_register_thread_exit = getattr(threading, "_register_atexit", None)
if _register_thread_exit is not None:
    _register_thread_exit(_stop_all)


def _node_for(config: NodeConfig) -> ExecutorNode:
    """The process-wide node of this fit, started on first use.

    The node of an earlier fit of the run is stopped, and so is a node of another run left idle for
    :data:`IDLE_NODE_STOP_S`; a node of another run used more recently stays (see :data:`IDLE_NODE_STOP_S`).
    """
    now = time.monotonic()
    with _registry_lock:
        node = _nodes.get(config.run)
        moved = moved_from(node.device, task_gpu_addresses()) if node is not None else None
        kept = node is not None and node.config.fit_id == config.fit_id and moved is None
        stale = [run for run in _nodes if (run == config.run and not kept)
                 or (run != config.run and now - _last_used[run] >= IDLE_NODE_STOP_S)]
        stopping = [_nodes.pop(run) for run in stale]
        for run in stale:
            del _last_used[run]
        _last_used[config.run] = now
    if moved:
        logger.warning("%s", moved)
    for old in stopping:  # an earlier fit of this run, or another run that stopped using this worker
        old.stop()
    if kept:
        return node
    node = ExecutorNode(config).start()
    with _registry_lock:
        _nodes[config.run] = node
        _last_used[config.run] = time.monotonic()
    settle_worker_heap()  # the stopped nodes collected, this one out of Spark's per-task collection
    return node


def _used(node: ExecutorNode) -> None:
    """Note that a task used ``node`` just now (while it is its run's node in this worker)."""
    with _registry_lock:
        for run, held in _nodes.items():
            if held is node:
                _last_used[run] = time.monotonic()


def run_training_task(encoded_task: bytes, start: Broadcast, partition: int,
                      elements: Iterator[int]) -> Iterator[bytes]:
    """``mapPartitionsWithIndex`` body of a training job: one encoded PartitionReport per partition trained.

    Parameters
    ----------
    encoded_task : bytes
        :func:`~node._contract.encode` of the :class:`TaskSpec`.
    start : pyspark.Broadcast
        ``.value`` is the phase's start parameters as ``.npz`` bytes.
    partition : int
        Spark's partition index (never the node's identity; a mode may group several data
        partitions in one Spark partition -- a slot, ``task.slots[partition]`` --
        and each block's own index seeds its minibatch order).
    elements : iterator
        The slot's number only: the node takes the slot's partitions from its memory or the
        store (:mod:`node.executor._resident`).
    """
    task = decode(encoded_task, TaskSpec)
    mode = mode_named(task.mode)
    if not isinstance(task.options, mode.options_type):
        raise ContractError(f"a {task.mode!r} task carries {type(task.options).__name__}, "
                            f"not {mode.options_type.__name__}")
    list(elements)  # the slot's number (read to the end, or PySpark does not reuse the worker)
    try:
        yield from _train_slot(task, mode, start, partition)
    except actors.NodeAddressError as error:  # the node's start: Spark's next attempt on this host meets the same
        said = f"the node on host {socket.gethostname()} cannot start: {error}"
        logger.warning("node %s: %s", node_id(), said)
        mode.node_unavailable(task, partition, TrainingError(said))
        yield encode(_failure_report(task, partition, node_error=said))
    except Exception as error:
        failure = store_failure(error)
        if failure is None:
            raise
        # Said once, in a report.  Raised, Spark would run the task again (spark.task.maxFailures), each
        # attempt meeting the same store: one down waited out for its retry timeout again.
        logger.warning("node %s: the store failed; the task stops: %s", node_id(), failure)
        _stop_after_store_failure(task.node.run)
        yield encode(_failure_report(task, partition, store_error=str(failure)))


def _stop_after_store_failure(run: str) -> None:
    """Stop this worker's node of ``run`` now, each of its last store calls one short attempt
    (:meth:`storage.Store.end_fast`): it cannot train on without the store, and stopped as usual (its queued
    snapshots written, its registry entry marked gone) it would wait out the outage again, in the driver's release
    job (:func:`release_run_task`)."""
    with _registry_lock:
        node = _nodes.pop(run, None)
        _last_used.pop(run, None)
    if node is not None:
        if node.store is not None:
            node.store.end_fast()
        node.stop()


def _train_slot(task: TaskSpec, mode: Any, start: Broadcast, partition: int) -> Iterator[bytes]:
    """The task's training: the node of the fit, the slot's partitions, the phase's start, then the mode's reports."""
    started = time.perf_counter()
    node = _node_for(task.node)
    node.use_device()
    loading = time.perf_counter()
    blocks = node.data.slot(list(task.slots[partition]))
    data_load_s = time.perf_counter() - loading
    node.enter_phase(task.phase, task.start_digest, lambda: start.value, task.start_nodes, task.start_versions,
                     join=mode.joins_from_store)
    setup_s = time.perf_counter() - started
    try:
        for report in mode.train_task(node, task, spark_partition=partition, blocks=blocks):
            # The task's first report carries what the task spent before it (node.driver._timings).
            yield encode(dataclasses.replace(report, setup_s=setup_s, data_load_s=data_load_s))
            setup_s = data_load_s = 0.0
    finally:
        _used(node)  # idle from the task's end on, not its start (IDLE_NODE_STOP_S)


def _failure_report(task: TaskSpec, partition: int, **why: str) -> PartitionReport:
    """The one report of a task that stopped before training: the store failed (``store_error``,
    :data:`~node._errors.STORE_FAILURES`), or its node could not start (``node_error``)."""
    return PartitionReport(node=node_id(), run=task.node.run, phase=task.phase, epoch=task.epoch,
                           partition=task.slots[partition][0] if task.slots[partition] else -1, samples=0,
                           loss=float("nan"), train_s=0.0, merge_s=0.0, publish_s=0.0, task_s=0.0, merged=0,
                           merged_from=(), staleness_s=None, samples_seen=0, time=time.time(), pid=os.getpid(),
                           **why)


def start_worker_task(_elements: Iterator[int]) -> Iterator[int]:
    """``mapPartitions`` body of the job that starts Spark's Python workers early (:class:`node.driver.Fit`).

    Unpickling it imported sparkdbn's executor side (the models, the actors, the store) into the
    worker: what the fit's first training task would wait for otherwise.  Yields the worker's pid.
    """
    list(_elements)  # read to the end, or PySpark does not reuse the worker
    yield os.getpid()


def release_run_task(run: str, retry_timeout_s: float, _partition: int, _elements: Iterator[Any]) -> Iterator[str]:
    """Stop this process's node of ``run`` if it has one (the driver's best-effort cleanup).

    Parameters
    ----------
    run : str
    retry_timeout_s : float
        The most the node's last store calls (its queued snapshots, its registry entry) retry for: the
        driver's own budget for its last writes, 0 where its store failed (a node stopped with its full
        budget waited out the outage again).
    _partition : int
    _elements : iterator
    """
    with _registry_lock:
        node = _nodes.pop(run, None)
        _last_used.pop(run, None)
    if node is not None:
        if node.store is not None:
            node.store.retry_timeout_s = min(node.store.retry_timeout_s, float(retry_timeout_s))
        node.stop()
        yield node.name


def probe_device_task(encoded_config: bytes, _partition: int, elements: Iterator[Any]) -> Iterator[bytes]:
    """Where a node of the fit would compute in this task, and whether its replica builds there: one encoded
    :class:`~node._contract.NodeDevice` whose ``problem`` says what stands in the way (never raised: Spark
    would retry it, and the same task fails the same way).  The GPU is opened in a child process
    (:func:`~node.executor._probe.probe_in_child`): its CUDA context and memory end with it."""
    list(elements)
    config = decode(encoded_config, NodeConfig)
    requested, addresses = str(config.spec.get("device", "cpu")), task_gpu_addresses()
    if requested in ("gpu", "auto") and addresses:
        device = probe_in_child(encoded_config, node_id(), addresses)
    else:
        device = probe_here(config, node_id(), addresses)
    logger.info("device probe: %s", device)
    yield encode(device)
