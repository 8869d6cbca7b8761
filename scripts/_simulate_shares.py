"""What each simulated node of ``bench_simulate.py`` is given: its rows, cut into partitions, and the minibatch
it trains them with, as a fit gives its nodes."""

from __future__ import annotations

import numpy as np

from node import TrainingSettings
from node.modes import max_learning_rate_factor, mode_named

__all__ = ["node_partitions", "simulated_node_batch"]


def simulated_node_batch(base, mode: str, nodes: int, rows: int, scale_rule: str) -> int | None:
    """The minibatch each of ``nodes`` nodes of ``mode`` trains ``base`` with, as a fit's nodes do (the
    model's own, unless the scaling rule splits it: see :func:`node.modes.node_batch_size`); the nodes
    take no outer step where it is split, as the executor."""
    settings = TrainingSettings(mode=mode, scale_rule=scale_rule)
    return mode_named(mode).node_batch_size(settings, nodes, rows, base.batch_size, max_learning_rate_factor(base))


def node_partitions(rows: int, nodes: int, partitions_per_node: int,
                    rng: np.random.Generator) -> list[list[np.ndarray]]:
    """Disjoint shards of the rows, one per node, each cut into the node's partitions (row indices)."""
    return [np.array_split(shard, partitions_per_node) for shard in np.array_split(rng.permutation(rows), nodes)]
