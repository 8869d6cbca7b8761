"""What the driver tells every node of a fit: the :class:`~node._contract.NodeConfig` of its tasks.

The fit's run, store and key, the model's spec and input, the node settings, and what the driver
decides for the nodes from the prepared data: the warm-up (a node's first epoch of each phase unless
the settings name one) and the nodes' minibatch where the scaling rule splits its factor
(:func:`node.modes._scaling.node_batch_size`).
"""

from __future__ import annotations

from typing import Any

from .._contract import NodeConfig
from ..data import PreparedData
from ..executor import is_local_master
from ..modes import default_warmup_partitions, mode_named
from ._settings import TrainingSettings

__all__ = ["node_config"]


def node_config(settings: TrainingSettings, prepared: PreparedData, spec: dict, *, run: str, fit_id: str,
                store_url: str, key: bytes, nodes: int, sc: Any, max_rate_factor: float | None = None) -> NodeConfig:
    """The config every task of the fit carries (``nodes``: tasks per job; ``sc``: the driver's SparkContext;
    ``max_rate_factor``: the model's own cap on the scaling rule's rates, :func:`node.modes._scaling.max_learning_rate_factor`)."""
    return NodeConfig(
        run=run, fit_id=fit_id, store_url=store_url, store_retry_timeout_s=settings.store_retry_timeout_s, key=key,
        spec=spec, feature_shape=tuple(int(d) for d in prepared.feature_shape),
        classes=None if prepared.classes is None else tuple(prepared.classes.tolist()), seed=settings.seed,
        fanout=settings.fanout, merge_alpha=settings.merge_alpha, keep_versions=settings.keep_versions,
        anti_entropy_interval_s=settings.anti_entropy_interval_s,
        peer_refresh_interval_s=settings.peer_refresh_interval_s, flush_timeout_s=settings.flush_timeout_s,
        scale_rule=settings.scale_rule, warmup_partitions=_warmup_partitions(settings, prepared, nodes),
        outer_learning_rate=float(settings.outer_learning_rate), outer_momentum=float(settings.outer_momentum),
        n_samples=int(prepared.n_samples), nodes=int(nodes),
        node_batch_size=_node_batch_size(settings, spec, nodes, prepared.n_samples, max_rate_factor),
        kill_worker_once_at=settings.kill_worker_once_at, straggler_factor=settings.straggler_factor,
        local_master=is_local_master(sc.master), driver_host=sc.getConf().get("spark.driver.host"),
        bind_host=settings.bind_host, advertise_host=settings.advertise_host, port_range=settings.port_range,
        gpu_data_budget_bytes=int(settings.gpu_data_budget_bytes or 0))


def _warmup_partitions(settings: TrainingSettings, prepared: PreparedData, nodes: int) -> int:
    """The settings' warm-up, else a node's first epoch of each phase (its share of the partitions)."""
    if settings.warmup_partitions is not None:
        return int(settings.warmup_partitions)
    return default_warmup_partitions(prepared.partitions, nodes)


def _node_batch_size(settings: TrainingSettings, spec: dict, nodes: int, n_samples: int,
                     max_rate_factor: float | None = None) -> int:
    """The nodes' minibatch where it is not the model's (the scaling rule's split), else 0 (the contract's "none")."""
    batch_size = spec.get("batch_size")
    node_batch = mode_named(settings.mode).node_batch_size(settings, nodes, n_samples, batch_size, max_rate_factor)
    return int(node_batch) if node_batch != batch_size else 0
