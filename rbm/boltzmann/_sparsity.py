"""The sparsity penalty of a CD step, shared by the CPU step (:mod:`._cd`) and the fused GPU one (:mod:`._cd_fused`)."""

from __future__ import annotations

from typing import Any

__all__ = ["add_sparsity_"]


def add_sparsity_(h0: Any, running_mean: Any, target: float, cost: float, decay: float) -> None:
    """Add the sparsity penalty gradient to the positive hidden statistics ``h0`` in place.

    Parameters
    ----------
    h0 : (b, n_hidden) positive hidden expectations of the minibatch (rows of the stacked ``H``)
    running_mean : (n_hidden,) running mean activation ``q`` of each hidden unit, updated in place
    target, cost, decay : the target activation ``p``, the penalty's weight and the running mean's decay

    With ``q`` the running mean and ``p`` the target, ``cost * (p - q)`` is added to every positive
    row: through the stacked GEMM it becomes ``mean(v0) (p - q)^T`` on the weights and ``p - q`` on
    the hidden bias (Hinton, "A practical guide to training RBMs", section 11).
    """
    running_mean *= decay
    running_mean += (1.0 - decay) * h0.mean(axis=0)
    h0 += cost * (target - running_mean)
