"""The outer step of an executor node: whether its phase takes one, and its anchor and momentum.

Where the nodes of a fit take an outer step (:func:`outer_step_in`), a node steps on what its own
training changed since its last step (:func:`actors.outer_step`), keeps the step's anchor and
momentum between tasks (:class:`actors.OuterState`), moves the anchor with every merge it adopts,
and stores its momentum so that a restarted or new node continues the run's.  A mixin of
:class:`~node.executor._node.ExecutorNode`.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import numpy as np

import actors
import rbm

from .._contract import NodeConfig

__all__ = ["NodeOuterStep", "outer_step_in"]

logger = logging.getLogger(__name__)


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


class NodeOuterStep:
    """Mixin: the outer step of :class:`~node.executor._node.ExecutorNode` in its phase."""

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
