"""The outer step on what merging and training changed (DiLoCo, SlowMo, NoLoCo): Nesterov momentum per node.

A node keeps an *anchor* ``x`` (its weights right after its last outer step) and an *outer
momentum* ``v``.  After it merged and trained, its weights are ``w``; the change since the anchor
is a pseudo-gradient, and the outer step is::

    d <- x - w
    v <- mu * v + d
    x <- x - eta * (d + mu * v)          (Nesterov)
    w <- x

With ``eta = 1`` and ``mu = 0`` the step returns ``w`` itself: plain merging.  In ``sync`` every
node holds the same anchor and the same average, so the step is DiLoCo's; in ``async`` each node
steps on what its own merges brought, as NoLoCo does with one random peer.  Everything is
computed in each array's own dtype (float32 for the models), the inputs are never modified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ._errors import MergeError

__all__ = ["OuterState", "outer_step", "outer_step_enabled", "outer_settings_for_gain", "check_outer_settings"]


@dataclass(frozen=True)
class OuterState:
    """A node's outer state: ``anchor`` (weights after its last outer step) and ``momentum``, same names and shapes."""

    anchor: dict[str, np.ndarray]
    momentum: dict[str, np.ndarray]

    @classmethod
    def start(cls, params: Mapping[str, np.ndarray],
              momentum: Mapping[str, np.ndarray] | None = None) -> "OuterState":
        """The state of a node that starts from ``params``: anchored there, with ``momentum`` (zero when None)."""
        anchor = {name: np.array(value, copy=True) for name, value in params.items()}
        if momentum is None:
            velocity = {name: np.zeros_like(value) for name, value in anchor.items()}
        else:
            _check_layout(anchor, momentum, "outer momentum")
            velocity = {name: np.asarray(momentum[name], dtype=anchor[name].dtype).copy() for name in anchor}
        return cls(anchor, velocity)

    def moved(self, before: Mapping[str, np.ndarray], after: Mapping[str, np.ndarray]) -> "OuterState":
        """The state with its anchor moved as a merge moved the weights, ``x <- x + (after - before)``.

        In ``async`` a node's merges move its anchor with its weights, so that the next step's change
        ``d`` is what its own training did: the merges' share of the change is the nodes'
        disagreement, which momentum would carry past the peers instead of to them.
        """
        _check_layout(self.anchor, before, "weights before the merge")
        _check_layout(self.anchor, after, "weights after the merge")
        anchor = {}
        for name, value in self.anchor.items():
            dtype = value.dtype
            anchor[name] = value + (np.asarray(after[name], dtype=dtype) - np.asarray(before[name], dtype=dtype))
        return OuterState(anchor, self.momentum)


def check_outer_settings(learning_rate: float, momentum: float) -> None:
    """Raise ``ValueError`` unless ``0 < learning_rate <= 2`` and ``0 <= momentum < 1`` (the step's stable range)."""
    if not 0.0 < float(learning_rate) <= 2.0:
        raise ValueError(f"outer_learning_rate must lie in (0, 2], got {learning_rate}")
    if not 0.0 <= float(momentum) < 1.0:
        raise ValueError(f"outer_momentum must lie in [0, 1), got {momentum}")


def outer_step_enabled(learning_rate: float, momentum: float) -> bool:
    """False for ``eta = 1, mu = 0``: the step would return the weights themselves, so it is skipped."""
    return not (float(learning_rate) == 1.0 and float(momentum) == 0.0)


def outer_settings_for_gain(gain: float) -> tuple[float, float]:
    """The step ``(eta, mu)`` whose gain is ``gain`` (>= 1) and which moves a node at once by its own progress.

    On a steady pseudo-gradient ``d`` the step moves the weights ``eta (1 + mu) d`` at once and
    ``eta / (1 - mu) d`` per step in the long run: its *gain*.  This family keeps the first at ``d``
    (``eta (1 + mu) = 1``) and leaves the rest of the gain to the momentum: ``mu = sqrt(1 - 1 / gain)``,
    ``eta = 1 / (1 + mu)``.  ``gain = 1`` is plain merging (``1, 0``); 2 gives 0.586/0.707, 3.5 gives
    0.542/0.845.

    Measured on Spark (docs/scaling-out.md, "The outer step"): steps that move a node at once by
    much more than its progress (``eta (1 + mu)`` = 1.87 at 1.18/0.58) cost LeNet on 8 nodes 2.3
    points, and a low ``eta`` under a high ``mu`` (0.2/0.8) holds back most of each partition's
    progress (the digits DBN on 4 nodes, -2.4 points).

    Raises
    ------
    ValueError
        ``gain`` is below 1 or not finite.
    """
    gain = float(gain)
    if not 1.0 <= gain < float("inf"):
        raise ValueError(f"the outer step's gain must be a finite number >= 1, got {gain}")
    momentum = float(np.sqrt(1.0 - 1.0 / gain))
    return 1.0 / (1.0 + momentum), momentum


def _check_layout(own: Mapping[str, np.ndarray], other: Mapping[str, np.ndarray], what: str) -> None:
    if set(own) != set(other):
        raise MergeError(f"{what}: parameter names {sorted(other)} differ from the weights' {sorted(own)}")
    for name, value in own.items():
        if np.shape(other[name]) != np.shape(value):
            raise MergeError(f"{what}: parameter {name!r} has shape {np.shape(other[name])}, "
                             f"the weights have {np.shape(value)}")


def outer_step(state: OuterState, weights: Mapping[str, np.ndarray], learning_rate: float,
               momentum: float) -> tuple[dict[str, np.ndarray], OuterState]:
    """One outer step: the node's new weights and its new outer state.

    Parameters
    ----------
    state : OuterState
        The anchor ``x`` and momentum ``v`` (each a dict of arrays, e.g. ``{"W": (784, 64), "b": (64,)}``).
    weights : dict of str to ndarray
        The node's weights ``w`` after merging and training, with the anchor's names and shapes.
    learning_rate : float
        ``eta``.
    momentum : float
        ``mu``.

    Returns
    -------
    (dict of str to ndarray, OuterState)
        The new weights ``x'`` (new arrays, the anchor's dtypes) and the state ``(x', v')``.

    Raises
    ------
    MergeError
        Names or shapes differ from the anchor's.
    """
    _check_layout(state.anchor, weights, "weights given to the outer step")
    eta, mu = float(learning_rate), float(momentum)
    new_weights: dict[str, np.ndarray] = {}
    new_momentum: dict[str, np.ndarray] = {}
    for name, anchor in state.anchor.items():
        dtype = anchor.dtype
        change = anchor - np.asarray(weights[name], dtype=dtype)  # d = x - w: the pseudo-gradient
        velocity = state.momentum[name] * dtype.type(mu) + change  # v = mu v + d
        step = change + velocity * dtype.type(mu)  # Nesterov: d + mu v
        new_weights[name] = anchor - step * dtype.type(eta)
        new_momentum[name] = velocity
    anchors = {name: value.copy() for name, value in new_weights.items()}
    return new_weights, OuterState(anchors, new_momentum)
