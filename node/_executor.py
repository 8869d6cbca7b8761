"""The executor side: one process-wide node per run inside a Spark Python worker.

Spark reuses Python workers across tasks and jobs, so the node -- model replica, store
handle, node actor and transport -- is created on the first task of a run and kept in a
module-level registry.  Spark may still kill the worker (a task that raised, 60 s idle,
executor loss, a crash), so a node keeps nothing that is not in the store: a fresh node
starts from the phase's start parameters and the newest snapshots it finds there.

Per partition (:func:`train_partition_task`): merge the fresh peer snapshots
(``NodeHandle.merge``: unusable ones are skipped and counted), train one pass
(``model.train_partition``), publish the new weights and wait until they are written
(``publish`` + ``flush``), append one metrics record to the store and return it to the driver.

Node identity is ``<host>-<pid>``, never the partition index: the same partition lands on
different workers from job to job.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import signal
import socket
import threading
import time
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from ._data import iter_blocks

__all__ = ["TaskConfig", "train_partition_task", "release_run_task", "encode_arrays", "decode_arrays", "node_id"]

logger = logging.getLogger(__name__)

#: A plain dict (closed over by the task function): run, store_url, secret, spec, ...
TaskConfig = Mapping[str, Any]

_registry_lock = threading.Lock()
_nodes: dict[str, "_Node"] = {}  # run -> the node of this process


def node_id() -> str:
    """This process's node name: ``<host>-<pid>``."""
    return f"{socket.gethostname()}-{os.getpid()}"


def encode_arrays(params: Mapping[str, np.ndarray]) -> bytes:
    """Named arrays as ``.npz`` bytes (the phase start parameters the driver broadcasts)."""
    from storage._weights import encode_params

    return encode_params(params, "phase start parameters")


def decode_arrays(payload: bytes) -> dict[str, np.ndarray]:
    """Inverse of :func:`encode_arrays` (``allow_pickle=False``)."""
    from storage._weights import decode_params

    return decode_params(payload, "phase start parameters")


class _Node:
    """Model replica + store handles + node actor of one run in this process."""

    def __init__(self, config: TaskConfig) -> None:
        import actors
        import rbm
        import storage

        self.run = str(config["run"])
        self.key = str(config["node_key"])
        self.node = node_id()
        self.store = storage.open_store(config["store_url"], retry_timeout_s=float(config["store_retry_timeout_s"]))
        self.weights = storage.WeightStore(self.store, self.run)
        self.runs = storage.RunStore(self.store, self.run)
        self.model = rbm.model_from_spec(config["spec"])
        classes = config.get("classes")
        self.model.initialize(tuple(config["feature_shape"]) if len(config["feature_shape"]) > 1
                              else int(config["feature_shape"][0]), classes)
        self.phase: str | None = None
        self.start_digest: str | None = None
        self.samples_seen: dict[str, int] = {}
        self.partitions_done = 0
        self.handle = actors.start_node(
            self.run,
            self.node,
            self.store,
            bytes(config["secret"]),
            fanout=config.get("fanout"),
            anti_entropy_interval_s=float(config["anti_entropy_interval_s"]),
            peer_refresh_interval_s=float(config["peer_refresh_interval_s"]),
            keep_versions=int(config["keep_versions"]),
        )
        self._stopped = False
        logger.info("node %s started for run %s (code from %s)", self.node, self.run, __file__)

    # ------------------------------------------------------------------ phase start
    def enter_phase(self, phase: str, start_digest: str, start_payload: Callable[[], bytes]) -> str:
        """Load the phase's starting point when this process has not trained in it yet.

        The start parameters (every earlier phase consolidated, this phase initialized identically
        on every node) come from the driver; when the store already holds snapshots of this phase
        (a replaced worker, a resumed run), their mean is newer and wins.

        Returns
        -------
        str
            Where the parameters came from: ``"kept"``, ``"start"`` or ``"store(<n> nodes)"``.
        """
        if self.phase == phase and self.start_digest == start_digest:
            return "kept"
        self.model.set_parameters(decode_arrays(start_payload()))
        origin = "start"
        newest = self.weights.newest_per_node(phase)
        found = [self.weights.newest_verified(phase, node) for node in sorted(newest)]
        params = [entry[1] for entry in found if entry is not None]
        if params:
            self.model.set_parameters({name: np.mean([p[name] for p in params], axis=0).astype(params[0][name].dtype)
                                       for name in params[0]})
            origin = f"store({len(params)} nodes)"
        self.phase, self.start_digest = phase, start_digest
        self.samples_seen.setdefault(phase, 0)
        logger.info("node %s entered phase %s from %s", self.node, phase, origin)
        return origin

    # ------------------------------------------------------------------ one partition
    def train(self, config: TaskConfig, partition: int, X: np.ndarray, y: np.ndarray | None) -> dict:
        phase = str(config["phase"])
        epoch = int(config["epoch"])
        started = time.time()
        tick = time.perf_counter()
        # Unusable peer snapshots are skipped and counted by the actor (stats: dropped_bad_snapshot);
        # a MergeError here means this node's own weights diverged, and the task fails saying so.
        merged, used = self.handle.merge(phase, self.model.parameters(phase), config.get("merge_alpha"))
        if used:
            self.model.set_parameters(merged)
        merged_from = [snapshot.node for snapshot in used]
        ages_s = [max(0.0, started - float(snapshot.sent_at)) for snapshot in used]
        merge_s = time.perf_counter() - tick

        rng = np.random.default_rng([int(config["seed"]), int(config["phase_index"]), epoch, partition,
                                     self.partitions_done])
        self._maybe_fault(config, phase, epoch, X, y, rng)
        metrics = self.model.train_partition(X, y, phase, rng)

        tick = time.perf_counter()
        self.samples_seen[phase] = self.samples_seen.get(phase, 0) + int(metrics["samples"])
        self.handle.publish(phase, self.model.parameters(phase), self.samples_seen[phase])
        self.handle.flush(timeout_s=float(config["flush_timeout_s"]))
        publish_s = time.perf_counter() - tick
        self.partitions_done += 1

        record = {
            "node": self.node,
            "run": self.run,
            "phase": phase,
            "epoch": epoch,
            "partition": partition,
            "samples": int(metrics["samples"]),
            "loss": float(metrics["loss"]),
            "train_s": float(metrics["seconds"]),
            "merge_s": merge_s,
            "publish_s": publish_s,
            "task_s": time.time() - started,
            "merged": len(merged_from),
            "merged_from": merged_from,
            "staleness_s": float(np.mean(ages_s)) if ages_s else None,
            "samples_seen": self.samples_seen[phase],
            "time": time.time(),
            "pid": os.getpid(),
            "code": os.path.dirname(os.path.abspath(__file__)),
            "stats": _plain(self.handle.stats()),
        }
        self.runs.append_metrics(self.node, record)
        return record

    def _maybe_fault(self, config: TaskConfig, phase: str, epoch: int, X: np.ndarray, y: np.ndarray | None,
                     rng: np.random.Generator) -> None:
        """Test hook: once per run, train half the partition and SIGKILL this worker.

        ``config["kill_worker_once_at"] == "<phase>:<epoch>"`` arms it; a marker file in the
        store makes sure only the first worker to get there dies (the retry must succeed).
        """
        target = config.get("kill_worker_once_at")
        if not target or target != f"{phase}:{epoch}":
            return
        marker = f"runs/{self.run}/faults/killed-worker"
        if self.store.exists(marker):
            return
        self.store.write_bytes(marker, f"{self.node} {time.time()}".encode())
        half = max(1, len(X) // 2)
        self.model.train_partition(X[:half], None if y is None else y[:half], phase, rng)
        logger.warning("fault hook: node %s kills itself with SIGKILL in the middle of a partition", self.node)
        os.kill(os.getpid(), signal.SIGKILL)

    def stop(self) -> None:
        """Stop the actor and close the transport (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.handle.stop()
        except Exception:  # at exit nothing can be done beyond saying so
            logger.exception("stopping node %s of run %s failed", self.node, self.run)


def _plain(stats: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): (v if isinstance(v, (int, float, str, bool)) or v is None else str(v)) for k, v in stats.items()}


def _stop_all() -> None:
    with _registry_lock:
        nodes = list(_nodes.values())
        _nodes.clear()
    for node in nodes:
        node.stop()


# Spark's daemon ends workers with os._exit, which skips both hooks; a worker run without the
# daemon ends normally, and then pykka's non-daemon threads would block the exit unless the
# actors stop first: threading's own exit hook runs *before* non-daemon threads are joined.
atexit.register(_stop_all)
_register_thread_exit = getattr(threading, "_register_atexit", None)
if _register_thread_exit is not None:
    _register_thread_exit(_stop_all)


def _node_for(config: TaskConfig) -> _Node:
    """The process-wide node of this run, created on first use; nodes of other runs are stopped."""
    run, key = str(config["run"]), str(config["node_key"])
    with _registry_lock:
        node = _nodes.get(run)
        if node is not None and node.key == key:
            return node
        stale = list(_nodes.values())
        _nodes.clear()
    for old in stale:  # another run (or an earlier fit of this run) used this worker before
        old.stop()
    node = _Node(config)
    with _registry_lock:
        _nodes[run] = node
    return node


def train_partition_task(config: TaskConfig, start: Any, partition: int, elements: Iterator[Any]) -> Iterator[dict]:
    """``mapPartitionsWithIndex`` body for one epoch: yields one metrics record per non-empty partition.

    Parameters
    ----------
    config : mapping
        Plain values from the driver (run, store URL, secret, model spec, phase, epoch, ...).
    start : pyspark.Broadcast
        ``.value`` is :func:`encode_arrays` bytes of the phase's start parameters.
    partition : int
        Spark's partition index (used for the random seed and the metrics, never for identity).
    elements : iterator of (index, summary, payload)
        The cached training partition (see :mod:`node._data`).
    """
    blocks = list(iter_blocks(elements))
    if not blocks:
        return
    node = _node_for(config)
    node.enter_phase(str(config["phase"]), str(config["start_digest"]), lambda: start.value)
    for _index, X, y in blocks:
        yield node.train(config, partition, X, y)


def release_run_task(run: str, _partition: int, _elements: Iterator[Any]) -> Iterator[str]:
    """Stop this process's node of ``run`` if it has one (the driver's best-effort cleanup)."""
    with _registry_lock:
        node = _nodes.pop(run, None)
    if node is not None:
        node.stop()
        yield node.node


def digest(payload: bytes) -> str:
    """sha256 hex of the start parameters (lets a reused node tell phases and fits apart)."""
    return hashlib.sha256(payload).hexdigest()
