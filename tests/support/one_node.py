"""The reference every distributed-training test compares with: the same model, phases and partitions,
trained by one process without Spark."""

from __future__ import annotations

import numpy as np

from node.modes import schedule_place

__all__ = ["train_on_one_node"]


def train_on_one_node(model, X, y, epochs: dict, partitions: int, seed: int = 0):
    """Train ``model`` phase by phase, ``epochs[phase]`` passes over ``partitions`` fixed parts of the data."""
    model.initialize(X.shape[1], int(y.max()) + 1)
    parts = np.array_split(np.random.default_rng(seed).permutation(len(X)), partitions)
    slots = [list(range(partitions))]  # one node: every partition in its slot
    for phase_index, phase in enumerate(model.phases()):
        for epoch in range(epochs[phase]):
            model.set_schedule_epoch(epoch)  # as the trainer does: schedules count epochs, not partitions
            for index, rows in enumerate(parts):
                model.set_schedule_plan(epochs[phase], *schedule_place(epoch, slots, index))  # and places each
                model.train_partition(X[rows], y[rows], phase, np.random.default_rng([seed, phase_index, epoch, index]))
    return model
