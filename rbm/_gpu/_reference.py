"""The GPU branch's fused kernels, written with numpy: the CPU stand-in of :mod:`._cuda`.

Each method does, one numpy operation at a time, what the CUDA kernel of the same name in
``_source.cu`` does in one launch, and draws the same Philox numbers (:mod:`._philox`).
Running the GPU branch's code with these (:func:`rbm._gpu.stand_in`) tests that branch on
every CI machine; on a GPU the kernels are checked against these methods.
All arrays are C-contiguous; ``bias`` broadcasts over the last axis.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._blas import gemm_tn_accumulate
from ._philox import PhiloxStream

__all__ = ["ReferenceOps"]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * np.tanh(0.5 * x) + 0.5


class ReferenceOps:
    """Fused elementwise operations on numpy arrays (see the module docstring)."""

    xp = np
    name = "numpy stand-in"

    # -- GEMMs (the precision applies on GPUs only; the CPU computes in the model's dtype)
    def matmul(self, a: Any, b: Any, out: Any, trans_b: bool = False, precision: str = "float32") -> Any:
        """``out <- a @ b`` (``a @ b.T`` with ``trans_b``)."""
        return np.matmul(a, b.T if trans_b else b, out=out)

    def gemm_tn(self, a: Any, b: Any, c: Any, alpha: float, beta: float, precision: str = "float32") -> Any:
        """``c <- alpha * a.T @ b + beta * c`` (the CPU branch's own GEMM)."""
        return gemm_tn_accumulate(a, b, c, alpha, beta)

    # -- CD and fine-tuning
    def bias_sigmoid_(self, x: Any, bias: Any, scale: float = 1.0) -> Any:
        """``x <- scale * sigmoid(x + bias)``."""
        p = _sigmoid(x + bias)
        np.multiply(p, scale, out=x)
        return x

    def bias_sigmoid_sample_(self, x: Any, bias: Any, stream: PhiloxStream, sample: Any, scale: float = 1.0) -> Any:
        """``p = sigmoid(x + bias)``; ``x <- scale * p``; ``sample <- (u < p)`` (``sample`` may be ``x``)."""
        p = _sigmoid(x + bias)
        u = stream.uniforms(p.size, stream.reserve(p.size), x.dtype).reshape(p.shape)
        np.multiply(p, scale, out=x)
        np.less(u, p, out=sample)
        return sample

    def sample_(self, x: Any, stream: PhiloxStream) -> Any:
        """``x <- (u < x)`` as 0/1."""
        u = stream.uniforms(x.size, stream.reserve(x.size), x.dtype).reshape(x.shape)
        np.less(u, x, out=x)
        return x

    def bias_add_(self, x: Any, bias: Any, stream: PhiloxStream | None = None) -> Any:
        """``x <- x + bias``, plus standard normal noise when ``stream`` is given."""
        x += bias
        if stream is not None:
            x += stream.normals(x.size, stream.reserve(x.size), x.dtype).reshape(x.shape)
        return x

    def momentum_step_(self, param: Any, velocity: Any, grad: Any, momentum: float, grad_scale: float) -> None:
        """``velocity <- momentum * velocity + grad_scale * grad``; ``param <- param + velocity``."""
        velocity *= momentum
        velocity += grad * velocity.dtype.type(grad_scale)
        param += velocity

    def subtract_scaled_(self, x: Any, y: Any, a: float) -> Any:
        """``x <- x - a * y``."""
        x -= y * x.dtype.type(a)
        return x

    def dropout(self, a: Any, stream: PhiloxStream, keep: float) -> Any:
        """Inverted dropout: a new array ``a * ((u < keep) / keep)``."""
        u = stream.uniforms(a.size, stream.reserve(a.size), a.dtype).reshape(a.shape)
        mask = (u < keep).astype(a.dtype)
        mask *= 1.0 / keep
        return a * mask

    def sigmoid_backward_(self, g: Any, d: Any, a: Any) -> Any:
        """``g <- g * d * (1 - a)``: through a sigmoid layer of (dropped-out) output ``d``, activation ``a``."""
        g *= d
        g *= 1.0 - a
        return g

    def softmax_cross_entropy(self, z: Any, labels: Any, bias: Any = None, out: Any = None,
                              total: Any = None) -> tuple[Any, Any]:
        """Mean cross-entropy of ``softmax(z + bias)`` (``z`` (n, K), integer ``labels`` (n,)) as a 0-d
        array, and its gradient ``(softmax - onehot) / n`` (into ``out``, which may be ``z``);
        ``total += n * loss`` when given."""
        from ..conv._ops import softmax_cross_entropy  # the CPU branch's formula

        loss, grad = softmax_cross_entropy(z if bias is None else z + bias, labels, np)
        if out is not None:
            out[...] = grad
            grad = out
        if total is not None:
            total += loss * z.shape[0]
        return loss, grad

    def column_sums(self, x: Any, weights: Any = None, out: Any = None) -> Any:
        """``out (cols,) <- sum over rows of x`` (each row times ``weights[row]`` when given)."""
        return np.sum(x, axis=0, out=out) if weights is None else np.matmul(weights, x, out=out)

    def row_sums(self, x: Any, out: Any = None) -> Any:
        """``out (rows,) <- sum over columns of x``."""
        return np.sum(x, axis=1, out=out)

    # -- updaters
    def sgd_step_(self, param: Any, velocity: Any, grad: Any, momentum: float, lr: float, l2: float,
                  nesterov: bool) -> None:
        """``g' = g + l2 w``; ``v <- momentum v - lr g'``; ``w <- w + v`` (Nesterov: ``+ momentum v - lr g'``)."""
        if l2:
            grad = grad + l2 * param
        velocity *= momentum
        velocity -= lr * grad
        param += momentum * velocity - lr * grad if nesterov else velocity

    def adagrad_step_(self, param: Any, history: Any, grad: Any, lr: float, eps: float, l2: float) -> None:
        """``h <- h + g'^2``; ``w <- w - lr g' / (sqrt(h) + eps)``."""
        if l2:
            grad = grad + l2 * param
        history += grad * grad
        param -= lr * grad / (np.sqrt(history) + eps)

    def adam_step_(self, param: Any, m: Any, v: Any, grad: Any, beta1: float, beta2: float, step: float, eps: float,
                   l2: float) -> None:
        """``m <- b1 m + (1 - b1) g'``; ``v <- b2 v + (1 - b2) g'^2``; ``w <- w - step m / (sqrt(v) + eps)``."""
        if l2:
            grad = grad + l2 * param
        m *= beta1
        m += (1 - beta1) * grad
        v *= beta2
        v += (1 - beta2) * grad * grad
        param -= step * m / (np.sqrt(v) + eps)

    # -- convolutional layers (CHWN)
    def bias_activation_(self, z: Any, bias: Any, activation: str) -> Any:
        """``z (F, P) <- act(z + bias[:, None])`` in place."""
        from ..conv._ops import activate  # the CPU branch's activations

        z += bias[:, None]
        return activate(activation, z, np)

    def activation_backward(self, activation: str, y: Any, dy: Any) -> Any:
        """A new ``dz = dy * act'(z)`` from the activation's output ``y``."""
        from ..conv._ops import activation_grad  # the CPU branch's derivatives

        return activation_grad(activation, y, dy, np)

    def maxpool_forward(self, x: Any, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int]) -> Any:
        """Max pooling of ``x`` (A, H, W, B) over axes 1 and 2; returns (A, OH, OW, B)."""
        from ..conv import _im2col

        return _im2col.maxpool_forward(x, kernel, stride, padding, np, record_winners=False)[0]

    def maxpool_backward(self, dout: Any, out: Any, x: Any, kernel: tuple[int, int], stride: tuple[int, int],
                         padding: tuple[int, int]) -> Any:
        """Route ``dout`` to the first max of each window of ``x`` (A, H, W, B); returns (A, H, W, B)."""
        from ..conv import _im2col

        (ph, pw), (a, h, w, b) = padding, x.shape
        winners = _im2col.maxpool_forward(x, kernel, stride, padding, np)[1]
        return _im2col.maxpool_backward(dout, winners, (a, h + 2 * ph, w + 2 * pw, b), kernel, stride, padding, np)
