"""Elementwise pieces of the conv net: activations, weight initialization, softmax cross-entropy.

All work on numpy and cupy arrays alike through the namespace ``xp``.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["ACTIVATIONS", "INITS", "activate", "activation_grad", "initial_weights", "softmax_cross_entropy"]

ACTIVATIONS = ("identity", "relu", "sigmoid", "tanh")
INITS = ("xavier", "he")


def activate(name: str, z: Any, xp: ModuleType) -> Any:
    """Apply activation ``name`` to the pre-activation ``z`` in place (``z`` is a fresh array)."""
    if name == "relu":
        return xp.maximum(z, 0, out=z)
    if name == "sigmoid":
        # 1 / (1 + exp(-z)) in place; the exp overflow to inf still gives the right 0.
        xp.negative(z, out=z)
        xp.exp(z, out=z)
        z += 1
        return xp.reciprocal(z, out=z)
    if name == "tanh":
        return xp.tanh(z, out=z)
    return z


def activation_grad(name: str, y: Any, dy: Any, xp: ModuleType) -> Any:
    """dL/dz from dL/dy and the activation output y."""
    if name == "relu":
        return dy * (y > 0)
    if name == "sigmoid":
        return dy * y * (1 - y)
    if name == "tanh":
        return dy * (1 - y * y)
    return dy


def initial_weights(init: str, shape: tuple[int, ...], fan_in: int, fan_out: int, rng: np.random.Generator) -> np.ndarray:
    """Xavier (Glorot uniform) or He (normal) weights of ``shape``, float64 on the host."""
    if init == "he":  # He et al. 2015: keeps the variance of ReLU activations constant
        return rng.normal(0.0, math.sqrt(2.0 / fan_in), size=shape)
    limit = math.sqrt(6.0 / (fan_in + fan_out))  # Glorot & Bengio 2010, uniform form
    return rng.uniform(-limit, limit, size=shape)


def softmax_cross_entropy(logits: Any, labels: Any, xp: ModuleType) -> tuple[Any, Any]:
    """Mean cross-entropy of ``softmax(logits)`` and its gradient.

    Parameters
    ----------
    logits : (n, K) array
    labels : (n,) int array on the same device

    Returns
    -------
    loss : 0-d array (stays on the device: no synchronization per batch)
    dlogits : (n, K) array, ``(softmax(logits) - onehot(labels)) / n``
    """
    n = logits.shape[0]
    rows = xp.arange(n)
    shifted = logits - logits.max(axis=1, keepdims=True)  # exp never overflows
    exp = xp.exp(shifted)
    total = exp.sum(axis=1)
    loss = (xp.log(total) - shifted[rows, labels]).mean()
    grad = exp / total[:, None]
    grad[rows, labels] -= 1
    grad *= 1.0 / n
    return loss, grad
