"""What the driver tells every node of a fit: the :class:`~node._contract.NodeConfig` of its tasks.

The fit's run, store and key, the model's spec and input, the node settings, and what the driver
decides for the nodes from the prepared data: the warm-up (a node's first epoch of each phase unless
the settings name one), the nodes' minibatch where the scaling rule splits its factor
(:func:`node.modes._scaling.node_batch_size`), and the outer step where the settings name none
(:meth:`node.modes.TrainingMode.outer_gain`).
"""

from __future__ import annotations

from typing import Any

import actors

from .._contract import NodeConfig
from ..data import PreparedData
from ..executor import is_local_master
from ..modes import default_warmup_partitions, mode_named, rates_cap
from ._settings import TrainingSettings

__all__ = ["SETTINGS_FIELDS", "node_config", "settings_fields"]

#: The :class:`TrainingSettings` a node takes as they are: each is a field of :class:`NodeConfig` of the
#: same name and meaning.  A node setting added to both goes here, and nowhere else on the driver.
SETTINGS_FIELDS = (
    "store_retry_timeout_s", "seed", "fanout", "merge_alpha", "keep_versions", "anti_entropy_interval_s",
    "peer_refresh_interval_s", "flush_timeout_s", "scale_rule", "kill_worker_once_at", "straggler_factor",
    "bind_host", "advertise_host", "port_range",
)


def settings_fields(settings: TrainingSettings) -> dict[str, Any]:
    """The :data:`SETTINGS_FIELDS` of ``settings``, by name, plus the GPU data budget (None is the contract's 0)."""
    return {**{name: getattr(settings, name) for name in SETTINGS_FIELDS},
            "gpu_data_budget_bytes": int(settings.gpu_data_budget_bytes or 0)}


def node_config(settings: TrainingSettings, prepared: PreparedData, spec: dict, *, run: str, fit_id: str,
                store_url: str, key: bytes, nodes: int, master: str, driver_host: str | None,
                max_rate_factor: float | None = None) -> NodeConfig:
    """The config every task of the fit carries (``nodes``: tasks per job; ``master``: the session's Spark
    master; ``driver_host``: its ``spark.driver.host``; ``max_rate_factor``: the model's own cap on the
    scaling rule's rates, :func:`node.modes._scaling.max_learning_rate_factor`).

    The node settings come from ``settings`` by :data:`SETTINGS_FIELDS`; the rest is the fit's and the data's.
    """
    return NodeConfig(
        run=run, fit_id=fit_id, store_url=store_url, key=key, spec=spec,
        feature_shape=tuple(int(d) for d in prepared.feature_shape),
        classes=None if prepared.classes is None else tuple(prepared.classes.tolist()),
        warmup_partitions=_warmup_partitions(settings, prepared, nodes), n_samples=int(prepared.n_samples),
        nodes=int(nodes), node_batch_size=_node_batch_size(settings, spec, nodes, prepared.n_samples, max_rate_factor),
        rates_cap=rates_cap(max_rate_factor), **_outer_step(settings, spec, nodes, prepared.n_samples),
        local_master=is_local_master(master), driver_host=driver_host,
        **settings_fields(settings))


def _warmup_partitions(settings: TrainingSettings, prepared: PreparedData, nodes: int) -> int:
    """The settings' warm-up, else a node's first epoch of each phase (its share of the partitions)."""
    if settings.warmup_partitions is not None:
        return int(settings.warmup_partitions)
    return default_warmup_partitions(prepared.partitions, nodes)


def _outer_step(settings: TrainingSettings, spec: dict, nodes: int, n_samples: int) -> dict[str, Any]:
    """The outer step's fields: none in a mode that takes none (``sharing``), the settings' where they name
    one (every phase), else the rule's (:func:`node.modes.outer_gain`, :func:`actors.outer_settings_for_gain`;
    the phases the model takes it in)."""
    mode = mode_named(settings.mode)
    if not mode.takes_outer_step:
        return {"outer_learning_rate": 1.0, "outer_momentum": 0.0, "outer_by_rule": False}
    if settings.outer_learning_rate is not None or settings.outer_momentum is not None:
        eta = 1.0 if settings.outer_learning_rate is None else float(settings.outer_learning_rate)
        mu = 0.0 if settings.outer_momentum is None else float(settings.outer_momentum)
        return {"outer_learning_rate": eta, "outer_momentum": mu, "outer_by_rule": False}
    eta, mu = actors.outer_settings_for_gain(mode.outer_gain(settings, nodes, n_samples, spec.get("batch_size")))
    return {"outer_learning_rate": eta, "outer_momentum": mu, "outer_by_rule": True}


def _node_batch_size(settings: TrainingSettings, spec: dict, nodes: int, n_samples: int,
                     max_rate_factor: float | None = None) -> int:
    """The nodes' minibatch where it is not the model's (the scaling rule's split), else 0 (the contract's "none")."""
    batch_size = spec.get("batch_size")
    node_batch = mode_named(settings.mode).node_batch_size(settings, nodes, n_samples, batch_size, max_rate_factor)
    return int(node_batch) if node_batch != batch_size else 0
