"""One partition on an executor node: its labels, its minibatch order, the pass and what it counts.

:meth:`NodePartitionTraining.train` sets the model's learning-rate scale and schedule for the
partition's place in the fit, runs ``train_partition`` (on the GPU where the node keeps the
partition's rows there) and refuses a diverged pass; the benchmark and test hooks it runs (a
straggler's sleep, a worker killed mid-partition) live here too.  A mixin of
:class:`~node.executor._node.ExecutorNode`.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from typing import Iterable, Sequence, TypeVar

import numpy as np

from .._contract import TaskSpec
from .._errors import InputDataError
from ..data import encode_labels
from ..modes import Trained, schedule_epoch, schedule_place

__all__ = ["NodePartitionTraining"]

State = TypeVar("State")

logger = logging.getLogger(__name__)


class NodePartitionTraining:
    """Mixin: what :class:`~node.executor._node.ExecutorNode` does with one partition."""

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
        return Trained(partition, metrics, self.samples_seen[task.phase], slowed_s, cpu_s,
                       learning_rate_scale=self.learning_rate_scale, nodes_merging=self.scaling.nodes())

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
