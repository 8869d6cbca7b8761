"""Supervised fine-tuning math of a DBN: sigmoid layers, a softmax output, cross-entropy.

Forward and backward passes of the feed-forward net unrolled from a stack of RBMs
(``W`` of shape (n_in, n_out) per layer, the RBMs' hidden biases as layer biases).
All math goes through the arrays' namespace (numpy or cupy).
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from .. import _gpu
from ._cd import _namespace, sigmoid_, uniform_

__all__ = ["forward", "softmax_", "cross_entropy_backward", "shuffled_minibatches"]

# On the GPU branch a pass gathers its shuffled rows once when they take at most this many bytes
# (its minibatches are then slices: no launch), else one gather per minibatch.
GATHER_ONCE_BYTES = 1 << 30


def shuffled_minibatches(data: Any, labels: Any, order: Any, batch_size: int) -> Iterator[tuple[int, Any, Any]]:
    """``(start, X, y)`` of each minibatch of one pass over ``data`` and ``labels`` in ``order``
    (device arrays).  On the GPU branch the pass's rows are gathered once (up to
    :data:`GATHER_ONCE_BYTES`), on the CPU one minibatch at a time."""
    xp = _namespace(data)
    if _gpu.fused_ops(xp) is not None and data.nbytes <= GATHER_ONCE_BYTES:
        data, labels = xp.take(data, order, axis=0), xp.take(labels, order)
        for start in range(0, len(order), batch_size):
            yield start, data[start : start + batch_size], labels[start : start + batch_size]
        return
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        yield start, xp.take(data, rows, axis=0), xp.take(labels, rows)


def forward(
    X: Any, weights: Sequence[Any], biases: Sequence[Any], dropout: float = 0.0, generator: Any = None,
    precision: str = "float32",
) -> tuple[list[Any], list[Any]]:
    """The sigmoid layers' activations, with inverted dropout on the hidden units when training.

    On the GPU branch each layer is a GEMM (at ``precision``) and one fused bias + sigmoid
    kernel, and dropout one more.

    Returns
    -------
    inputs : ``[X, d_1, ..., d_L]``, what each layer (and the output layer) reads: ``d_k`` is
        ``a_k`` with a fraction ``dropout`` of its units zeroed and the rest scaled by
        ``1 / (1 - dropout)`` (just ``a_k`` without dropout)
    activations : ``[a_1, ..., a_L]``, the sigmoid outputs, ``a_k`` of shape (n, n_k)
    """
    inputs, activations = [X], []
    keep = 1.0 - dropout
    ops = _gpu.fused_ops_for(X)
    if ops is not None:
        for W, b in zip(weights, biases):
            a = ops.matmul(inputs[-1], W, ops.xp.empty((X.shape[0], W.shape[1]), dtype=W.dtype), precision=precision)
            activations.append(ops.bias_sigmoid_(a, b))
            inputs.append(ops.dropout(a, generator, keep) if dropout else a)
        return inputs, activations
    for W, b in zip(weights, biases):
        a = inputs[-1] @ W
        a += b
        activations.append(sigmoid_(a))
        if dropout:
            mask = uniform_(generator, _namespace(a).empty_like(a))
            # mask <- (u < keep) / keep: zero the dropped units, scale the kept ones.
            _namespace(a).less(mask, keep, out=mask)
            mask *= 1.0 / keep
            inputs.append(a * mask)
        else:
            inputs.append(a)
    return inputs, activations


def softmax_(logits: Any) -> Any:
    """Row-wise softmax in place (shifted by the row maximum, so it never overflows)."""
    xp = _namespace(logits)
    logits -= logits.max(axis=1, keepdims=True)
    xp.exp(logits, out=logits)
    logits /= logits.sum(axis=1, keepdims=True)
    return logits


def cross_entropy_backward(
    inputs: list[Any],
    activations: list[Any],
    weights: Sequence[Any],
    out_W: Any,
    out_b: Any,
    labels: Any,
    *,
    total: Any = None,
    precision: str = "float32",
) -> tuple[Any, list[Any], list[Any], Any, Any]:
    """Mean cross-entropy and its gradients for one minibatch.

    Parameters
    ----------
    inputs, activations : output of :func:`forward`, ``[X (n, d), d_1, ..., d_L]`` and
        ``[a_1, ..., a_L]``; where dropout zeroed a unit, ``d_k == 0`` and so is its gradient
    weights : the sigmoid layers' weights ``W_k`` (n_{k-1}, n_k)
    out_W : (n_L, n_classes); out_b : (n_classes,)
    labels : (n,) class indices 0 .. n_classes - 1 (device array)
    total : a 0-d device array that gains ``n * loss`` (the pass's running sum), or None
    precision : of the GEMMs on the GPU branch (see :mod:`rbm._gpu._precision`)

    On the GPU branch the softmax, the loss and its gradient are one kernel, each bias gradient
    one column-sum kernel and each product a cuBLAS GEMM.

    Returns
    -------
    loss : 0-d device array, the mean cross-entropy
    grad_W, grad_b : per sigmoid layer, shaped like the weights and biases
    grad_out_W, grad_out_b
    """
    ops = _gpu.fused_ops_for(out_W)
    if ops is not None:
        return _fused_cross_entropy_backward(ops, inputs, activations, weights, out_W, out_b, labels, total, precision)
    xp = _namespace(out_W)
    n = labels.shape[0]
    rows = xp.arange(n)
    top = inputs[-1]
    probabilities = top @ out_W
    probabilities += out_b
    softmax_(probabilities)
    loss = -xp.log(probabilities[rows, labels] + 1e-12).mean()
    if total is not None:
        total += loss * n
    delta = probabilities  # d loss / d logits = (p - onehot) / n
    delta[rows, labels] -= 1.0
    delta /= n
    grad_out_W = top.T @ delta
    grad_out_b = delta.sum(axis=0)
    grad_W: list[Any] = [None] * len(weights)
    grad_b: list[Any] = [None] * len(weights)
    upstream = delta @ out_W.T  # d loss / d d_L
    for k in range(len(weights) - 1, -1, -1):
        # d loss / d z_k = upstream * mask_k * a_k (1 - a_k), and d_k = a_k * mask_k carries
        # the mask and one factor of sigmoid'(z) = a (1 - a) at once.
        upstream *= inputs[k + 1]
        upstream *= 1.0 - activations[k]
        grad_W[k] = inputs[k].T @ upstream
        grad_b[k] = upstream.sum(axis=0)
        if k:
            upstream = upstream @ weights[k].T
    return loss, grad_W, grad_b, grad_out_W, grad_out_b


def _fused_cross_entropy_backward(ops: Any, inputs: list[Any], activations: list[Any], weights: Sequence[Any],
                                  out_W: Any, out_b: Any, labels: Any, total: Any,
                                  precision: str) -> tuple[Any, list[Any], list[Any], Any, Any]:
    """:func:`cross_entropy_backward` on the GPU branch: the same math in 4 + 4 L launches."""
    xp, top = ops.xp, inputs[-1]

    def product(a: Any, b: Any, trans_b: bool) -> Any:
        out = xp.empty((a.shape[0], b.shape[0] if trans_b else b.shape[1]), dtype=a.dtype)
        return ops.matmul(a, b, out, trans_b=trans_b, precision=precision)

    def weight_gradient(a: Any, delta: Any, like: Any) -> Any:  # a.T @ delta
        return ops.gemm_tn(a, delta, xp.empty_like(like), 1.0, 0.0, precision=precision)

    logits = product(top, out_W, trans_b=False)
    loss, delta = ops.softmax_cross_entropy(logits, labels, bias=out_b, out=logits, total=total)
    grad_out_W, grad_out_b = weight_gradient(top, delta, out_W), ops.column_sums(delta)
    grad_W: list[Any] = [None] * len(weights)
    grad_b: list[Any] = [None] * len(weights)
    upstream = product(delta, out_W, trans_b=True)
    for k in range(len(weights) - 1, -1, -1):
        ops.sigmoid_backward_(upstream, inputs[k + 1], activations[k])
        grad_W[k], grad_b[k] = weight_gradient(inputs[k], upstream, weights[k]), ops.column_sums(upstream)
        if k:
            upstream = product(upstream, weights[k], trans_b=True)
    return loss, grad_W, grad_b, grad_out_W, grad_out_b
