"""Exact quantities of tiny Bernoulli RBMs by brute-force enumeration.

For a handful of visible units (at most ``MAX_ENUMERATED_UNITS``) the partition function,
the exact log-likelihood and its exact gradient can be computed by summing over all
``2**n_visible`` visible configurations.  Used to check the training machinery against
ground truth; the gradient goes through the same stacked-statistics GEMM as CD training.

All functions take host arrays ``W`` (n_visible, n_hidden), ``hbias`` (n_hidden,),
``vbias`` (n_visible,); float64 is recommended.
"""

from __future__ import annotations

import numpy as np

from ._cd import free_energy, stacked_statistics

__all__ = [
    "MAX_ENUMERATED_UNITS",
    "all_binary_states",
    "exact_log_partition",
    "exact_log_likelihood",
    "exact_gradient",
    "model_distribution",
]

MAX_ENUMERATED_UNITS = 24


def all_binary_states(n: int, dtype: type = np.float64) -> np.ndarray:
    """Every binary vector of length ``n``, shape (2**n, n), in counting order."""
    if not 0 < n <= MAX_ENUMERATED_UNITS:
        raise ValueError(f"cannot enumerate {n} units; at most {MAX_ENUMERATED_UNITS} are supported")
    codes = np.arange(2**n, dtype=np.int64)[:, None]
    return ((codes >> np.arange(n - 1, -1, -1)) & 1).astype(dtype)


def _logsumexp(values: np.ndarray) -> float:
    top = float(values.max())
    return top + float(np.log(np.exp(values - top).sum()))


def exact_log_partition(W: np.ndarray, hbias: np.ndarray, vbias: np.ndarray) -> float:
    """``log Z = log sum_v exp(-F(v))`` over all visible configurations."""
    states = all_binary_states(W.shape[0], W.dtype.type)
    return _logsumexp(-free_energy(states, W, hbias, vbias, gaussian=False))


def model_distribution(W: np.ndarray, hbias: np.ndarray, vbias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All visible states (2**n, n_visible) and their exact probabilities p(v) (2**n,)."""
    states = all_binary_states(W.shape[0], W.dtype.type)
    log_p = -free_energy(states, W, hbias, vbias, gaussian=False)
    log_p -= _logsumexp(log_p)
    return states, np.exp(log_p)


def exact_log_likelihood(W: np.ndarray, hbias: np.ndarray, vbias: np.ndarray, X: np.ndarray) -> float:
    """Mean exact log-likelihood ``mean_i log p(x_i)`` of binary rows ``X`` (n, n_visible)."""
    X = np.asarray(X, dtype=W.dtype)
    return float(np.mean(-free_energy(X, W, hbias, vbias, gaussian=False)) - exact_log_partition(W, hbias, vbias))


def exact_gradient(
    W: np.ndarray, hbias: np.ndarray, vbias: np.ndarray, X: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact gradient of :func:`exact_log_likelihood` w.r.t. (W, hbias, vbias).

    ``E_data[v h^T] - E_model[v h^T]`` (and likewise for the biases), computed as one
    weighted stacked-statistics product: data rows with weight ``+1/n``, every visible
    configuration with weight ``-p(v)``, hidden rows ``p(h | v)``.
    """
    X = np.asarray(X, dtype=W.dtype)
    states, probabilities = model_distribution(W, hbias, vbias)
    V = np.concatenate([X, states])
    H = 1.0 / (1.0 + np.exp(-(V @ W + hbias)))
    weights = np.concatenate([np.full(len(X), 1.0 / len(X)), -probabilities]).astype(W.dtype)
    return stacked_statistics(V, H, weights)
