"""Supervised fine-tuning math of a DBN: sigmoid layers, a softmax output, cross-entropy.

Forward and backward passes of the feed-forward net unrolled from a stack of RBMs
(``W`` of shape (n_in, n_out) per layer, the RBMs' hidden biases as layer biases).
All math goes through the arrays' namespace (numpy or cupy).
"""

from __future__ import annotations

from typing import Any, Sequence

from ._cd import _namespace, sigmoid_

__all__ = ["forward", "softmax_", "cross_entropy_backward"]


def forward(X: Any, weights: Sequence[Any], biases: Sequence[Any]) -> list[Any]:
    """Activations of every sigmoid layer: ``[X, a_1, ..., a_L]`` with ``a_k`` (n, n_k)."""
    activations = [X]
    for W, b in zip(weights, biases):
        a = activations[-1] @ W
        a += b
        activations.append(sigmoid_(a))
    return activations


def softmax_(logits: Any) -> Any:
    """Row-wise softmax in place (shifted by the row maximum, so it never overflows)."""
    xp = _namespace(logits)
    logits -= logits.max(axis=1, keepdims=True)
    xp.exp(logits, out=logits)
    logits /= logits.sum(axis=1, keepdims=True)
    return logits


def cross_entropy_backward(
    activations: list[Any],
    weights: Sequence[Any],
    out_W: Any,
    out_b: Any,
    labels: Any,
) -> tuple[Any, list[Any], list[Any], Any, Any]:
    """Mean cross-entropy and its gradients for one minibatch.

    Parameters
    ----------
    activations : output of :func:`forward`, ``[X (n, d), a_1, ..., a_L]``
    weights : the sigmoid layers' weights ``W_k`` (n_{k-1}, n_k)
    out_W : (n_L, n_classes); out_b : (n_classes,)
    labels : (n,) class indices 0 .. n_classes - 1 (device array)

    Returns
    -------
    loss : 0-d device array, the mean cross-entropy
    grad_W, grad_b : per sigmoid layer, shaped like the weights and biases
    grad_out_W, grad_out_b
    """
    xp = _namespace(out_W)
    n = labels.shape[0]
    rows = xp.arange(n)
    top = activations[-1]
    probabilities = top @ out_W
    probabilities += out_b
    softmax_(probabilities)
    loss = -xp.log(probabilities[rows, labels] + 1e-12).mean()
    delta = probabilities  # d loss / d logits = (p - onehot) / n
    delta[rows, labels] -= 1.0
    delta /= n
    grad_out_W = top.T @ delta
    grad_out_b = delta.sum(axis=0)
    grad_W: list[Any] = [None] * len(weights)
    grad_b: list[Any] = [None] * len(weights)
    upstream = delta @ out_W.T
    for k in range(len(weights) - 1, -1, -1):
        a = activations[k + 1]
        upstream *= a
        upstream *= 1.0 - a  # sigmoid'(z) = a (1 - a)
        grad_W[k] = activations[k].T @ upstream
        grad_b[k] = upstream.sum(axis=0)
        if k:
            upstream = upstream @ weights[k].T
    return loss, grad_W, grad_b, grad_out_W, grad_out_b
