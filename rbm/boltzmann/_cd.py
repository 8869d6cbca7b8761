"""Contrastive-divergence kernels shared by :class:`~rbm.RBM` and :class:`~rbm.DBN`.

The hot loop of RBM training is five matrix products per minibatch; everything else
(sigmoid, sampling, parameter updates) must stay small next to them.  The tricks used:

* **One stacked gradient GEMM.**  The positive and negative statistics
  ``v0^T p(h|v0) - vk^T p(h|vk)`` are one product ``V^T H`` of the stacked buffers
  ``V = [v0; vk]`` (2b, n_visible) and ``H = [p(h|v0); -p(h|vk)]`` (2b, n_hidden).
  The minus sign is free: the sigmoid of the negative rows is written negated.
* **Momentum inside the GEMM.**  ``velocity <- momentum * velocity + (lr / b) * V^T H`` is one
  BLAS call with ``beta = momentum`` (numpy's own OpenBLAS on the CPU, cuBLAS on the GPU),
  the scale applied to the small factor H; the weight update is one more pass.
* **Preallocated buffers** (:class:`Workspace`) and in-place elementwise work; the sigmoid is
  ``0.5 * tanh(0.5 x) + 0.5`` in place (no overflow, no temporaries, cheaper than ``expit``).
* **Cheap Bernoulli samples**: on the CPU, 16-bit uniforms cut from the raw output of a
  fast bit generator (SFC64), compared in place with ``65536 * p``; on the GPU, uniforms
  drawn into a preallocated buffer.  The buffer of uniforms becomes the buffer of samples.
* **Minibatch rows gathered** straight into the stacked buffer (``take(..., out=)``).

All math goes through ``xp`` (numpy or cupy).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import scipy.sparse as sp

from .. import _gpu
from .._blas import gemm_tn_accumulate
from ._sparsity import add_sparsity_
from . import _cd_fused

__all__ = [
    "sigmoid_",
    "device_generator",
    "uniform_",
    "normal_",
    "sample_bernoulli_",
    "gather_rows",
    "Workspace",
    "CDSettings",
    "cd_step",
    "stacked_statistics",
    "free_energy",
    "error_measured",
]

def sigmoid_(x: Any, negate: bool = False) -> Any:
    """In-place logistic sigmoid of ``x`` (numpy or cupy); ``-sigmoid(x)`` when ``negate``.

    ``sigmoid(x) = 0.5 * tanh(0.5 * x) + 0.5`` never overflows and needs no temporary.
    """
    x *= 0.5
    tanh = _namespace(x).tanh
    tanh(x, out=x)
    if negate:
        x *= -0.5
        x -= 0.5
    else:
        x *= 0.5
        x += 0.5
    return x


def _namespace(array: Any) -> ModuleType:
    if isinstance(array, np.ndarray):
        return np
    import cupy  # optional dependency: only reached for cupy arrays

    return cupy


def device_generator(host_rng: np.random.Generator, xp: ModuleType) -> Any:
    """A sampling generator for ``xp`` seeded from the model's host generator.

    On the CPU branch: numpy's SFC64 (about twice as fast as PCG64 for float32 uniforms).
    On the GPU branch: the counter-based :class:`rbm._gpu.PhiloxStream`, whose draws fused
    kernels make themselves and the CPU can repeat exactly.  Both offer
    ``random(size, dtype, out)`` and ``standard_normal(size, dtype, out)``.
    """
    seed = int(host_rng.integers(0, 2**63 - 1))
    if _gpu.uses_philox(xp):
        return _gpu.PhiloxStream(seed)
    return np.random.Generator(np.random.SFC64(seed))


def uniform_(generator: Any, out: Any) -> Any:
    """Fill ``out`` with uniforms in [0, 1) of its own dtype, one draw per element.

    ``size`` is passed with ``out``: cupy 14's ``Generator.random(out=a)`` without it draws a
    single number and broadcasts it into all of ``a`` (cupy/random/_generator_api.pyx), which
    made every hidden unit of a GPU minibatch share one threshold.
    """
    generator.random(out.shape, dtype=out.dtype, out=out)
    return out


def normal_(generator: Any, out: Any) -> Any:
    """Fill ``out`` with standard normal draws of its own dtype, one per element."""
    generator.standard_normal(out.shape, dtype=out.dtype, out=out)
    return out


_SAMPLE_SCALE = 65536.0  # 16-bit uniforms on the CPU


def sample_bernoulli_(generator: Any, probabilities: Any, out: Any) -> Any:
    """``out <- (u < probabilities)`` as 0/1 floats with ``u`` uniform in [0, 1).

    ``out`` may not alias ``probabilities``.  On the CPU the uniforms are 16-bit integers
    ``k / 65536`` cut from the raw 64-bit output of the bit generator (four per draw) and
    compared with ``65536 * p``: a third of the cost of float32 uniforms, and every sample
    is exact for probabilities on the 2**-16 grid (elsewhere off by less than 1.6e-5).
    """
    bits = getattr(generator, "bit_generator", None)
    if isinstance(out, np.ndarray) and bits is not None and hasattr(bits, "random_raw"):
        size = out.size
        raw = bits.random_raw(-(-size // 4)).view(np.uint16)[:size].reshape(out.shape)
        np.multiply(probabilities, _SAMPLE_SCALE, out=out)
        np.less(raw, out, out=out)  # elementwise, so writing in place is safe
        return out
    uniform_(generator, out)
    _namespace(out).less(out, probabilities, out=out)
    return out


def gather_rows(data: Any, rows: Any, out: Any) -> Any:
    """``out <- data[rows]`` into a preallocated buffer.

    numpy's ``take`` buffers its output in the default ``mode="raise"``; ``"clip"`` writes
    straight into ``out`` (the row indices come from a permutation, so they are valid).
    Sparse ``data`` (scipy CSR on the host, ``rows`` a host array) is densified one
    minibatch at a time, never as a whole.
    """
    if sp.issparse(data):
        batch = data[rows]
        if isinstance(out, np.ndarray):
            return batch.toarray(out=out)
        out[...] = _namespace(out).asarray(batch.toarray())
        return out
    if isinstance(out, np.ndarray):
        return np.take(data, rows, axis=0, out=out, mode="clip")
    return _namespace(out).take(data, rows, axis=0, out=out)


class Workspace:
    """Preallocated buffers for minibatches of ``batch`` rows and ``negatives`` negative-phase rows.

    ``negatives`` is ``batch`` for CD-k (the chains start from the data) and the number of
    persistent chains for PCD, which need not be the minibatch's rows (Tieleman, 2008).

    Attributes
    ----------
    V : (batch + negatives, n_visible)   ``[v0; vk]``: the data rows, then the negative-phase visibles
    H : (batch + negatives, n_hidden)    ``[p(h|v0); -p(h|vk)]``
    h_sample : (max rows, n_hidden)  hidden samples (also the buffer the uniforms are drawn into)
    scratch : (max rows, n_visible)  reconstruction error and visible noise
    sign : (batch + negatives,)      ``[+1, ..., -batch/negatives, ...]``: the visible-bias
                                     gradient is ``sign @ V / batch``
    """

    def __init__(self, xp: ModuleType, batch: int, n_visible: int, n_hidden: int, dtype: Any,
                 negatives: int | None = None) -> None:
        self.batch = batch
        self.negatives = negatives = negatives or batch
        rows = max(batch, negatives)
        self.V = xp.empty((batch + negatives, n_visible), dtype=dtype)
        self.H = xp.empty((batch + negatives, n_hidden), dtype=dtype)
        self.h_sample = xp.empty((rows, n_hidden), dtype=dtype)
        self.scratch = xp.empty((rows, n_visible), dtype=dtype)
        self.sign = xp.concatenate([xp.ones(batch, dtype=dtype), xp.full(negatives, -batch / negatives, dtype=dtype)])
        self.grad_hbias = xp.empty(n_hidden, dtype=dtype)
        self.grad_vbias = xp.empty(n_visible, dtype=dtype)
        # The GPU branch's fused kernels (None on the CPU branch; see rbm._gpu.fused_ops).
        self.fused = _gpu.fused_ops(xp)
        self.precision = "float32"  # of the GPU branch's GEMMs (set by the model)
        self.grad_W = xp.empty((n_visible, n_hidden), dtype=dtype) if self.fused is None else None
        self._like: Any = None

    def buffer_like(self, array: Any) -> Any:
        """A lazily allocated buffer shaped like ``array`` (the weight-decay term only)."""
        if self._like is None or self._like.shape != array.shape:
            self._like = _namespace(array).empty_like(array)
        return self._like


@dataclass
class CDSettings:
    """Hyperparameters of one CD update (see :class:`~rbm.RBM` for their meaning)."""

    gaussian: bool = False
    cd_k: int = 1
    persistent: bool = False
    weight_decay: float = 0.0
    sparsity_target: float | None = None
    sparsity_cost: float = 0.0
    sparsity_decay: float = 0.9


def _visible_from_hidden(h: Any, W: Any, vbias: Any, out: Any, gaussian: bool) -> Any:
    """``out <- E[v | h]``: sigmoid for Bernoulli units, linear mean for Gaussian ones."""
    _namespace(out).matmul(h, W.T, out=out)
    out += vbias
    if not gaussian:
        sigmoid_(out)
    return out


def cd_step(
    ws: Workspace,
    b: int,
    W: Any,
    hbias: Any,
    vbias: Any,
    velocity: tuple[Any, Any, Any],
    generator: Any,
    settings: CDSettings,
    learning_rate: float,
    momentum: float,
    chain: Any = None,
    sparsity_state: Any = None,
    measure_error: bool = True,
) -> float:
    """One CD-k (or PCD-k) update from the minibatch already copied into ``ws.V[:b]``.

    Parameters
    ----------
    ws : Workspace with ``ws.batch == b``; ``ws.V[:b]`` holds the data rows v0.
    W : (n_visible, n_hidden); hbias : (n_hidden,); vbias : (n_visible,) -- updated in place.
    velocity : momentum buffers shaped like (W, hbias, vbias), updated in place.
    chain : (ws.negatives, n_hidden) persistent hidden states (PCD only), updated in place; every
        chain takes one step per update, whatever the minibatch's rows.
    sparsity_state : (n_hidden,) running mean of hidden activations, updated in place.

    Returns
    -------
    float
        Summed squared reconstruction error of the minibatch (``nan`` when not measured; the
        GPU branch returns a measured error as a 0-d device array: see :func:`error_measured`).
    """
    if ws.fused is not None:  # the GPU branch: the same algorithm in fused kernels
        return _cd_fused.cd_step(ws.fused, ws, b, W, hbias, vbias, velocity, generator, settings, learning_rate,
                                 momentum, chain, sparsity_state, measure_error, ws.precision)
    xp = _namespace(W)
    c = ws.negatives  # b for CD-k
    v0, vk = ws.V[:b], ws.V[b:]
    h0, hk = ws.H[:b], ws.H[b:]
    hs, noise = ws.h_sample[:c], ws.scratch[:c]
    # Positive phase: p(h | v0).
    xp.matmul(v0, W, out=h0)
    h0 += hbias
    sigmoid_(h0)
    if settings.persistent:
        hs[...] = chain
    else:
        sample_bernoulli_(generator, h0, hs)
    error = float("nan")
    for step in range(settings.cd_k):
        _visible_from_hidden(hs, W, vbias, vk, settings.gaussian)
        if step == 0 and measure_error and not settings.persistent:
            # vk is the one-step reconstruction of the data here: measure it before sampling.
            xp.subtract(v0, vk, out=noise)
            error = float(xp.vdot(noise.ravel(), noise.ravel()))
        last = step == settings.cd_k - 1
        # Intermediate steps (and persistent chains) sample the visibles; the last CD step
        # keeps probabilities, which lowers the variance of the negative statistics.
        if not last or settings.persistent:
            if settings.gaussian:
                vk += normal_(generator, noise)
            else:
                sample_bernoulli_(generator, vk, noise)
                vk[...] = noise
        xp.matmul(vk, W, out=hk)
        hk += hbias
        if not last:
            sigmoid_(hk)
            sample_bernoulli_(generator, hk, hs)
    if settings.persistent:
        sigmoid_(hk)
        sample_bernoulli_(generator, hk, chain)  # the chains continue from here
        hk *= -1
    else:
        sigmoid_(hk, negate=True)
    if settings.sparsity_target is not None:
        add_sparsity_(ws.H[:b], sparsity_state, settings.sparsity_target, settings.sparsity_cost,
                      settings.sparsity_decay)
    scale = learning_rate / b
    vel_W, vel_h, vel_v = velocity
    # Scale the small stacked factor H (b + c, n_hidden), rather than the products:
    # velocity <- momentum * velocity + lr * (mean positive - mean negative statistics).
    if c == b:
        ws.H *= scale
    else:
        h0 *= scale
        hk *= learning_rate / c
    gemm_tn_accumulate(ws.V, ws.H, vel_W, alpha=1.0, beta=momentum, scratch=ws.grad_W)
    if settings.weight_decay:
        decay = ws.grad_W if ws.grad_W is not None else ws.buffer_like(W)  # the product is spent
        xp.multiply(W, learning_rate * settings.weight_decay, out=decay)
        vel_W -= decay
    xp.sum(ws.H, axis=0, out=ws.grad_hbias)
    xp.matmul(ws.sign, ws.V, out=ws.grad_vbias)
    vel_h *= momentum
    vel_h += ws.grad_hbias
    vel_v *= momentum
    ws.grad_vbias *= scale
    vel_v += ws.grad_vbias
    W += vel_W
    hbias += vel_h
    vbias += vel_v
    return error


def error_measured(error: Any) -> bool:
    """Whether :func:`cd_step` measured the error it returned: a float NaN means it did not; a
    device scalar always holds a measurement (testing it for NaN would wait for the GPU)."""
    return not (isinstance(error, float) and error != error)


def stacked_statistics(V: Any, H: Any, weights: Any) -> tuple[Any, Any, Any]:
    """Weighted sufficient statistics through the same stacked GEMM as training.

    Parameters
    ----------
    V : (n, n_visible) visible configurations (positive and negative rows together)
    H : (n, n_hidden) hidden expectations ``p(h | v)`` of those rows
    weights : (n,) signed row weights (e.g. ``+1/N`` for data rows, ``-p(v)`` for model rows)

    Returns
    -------
    (dW (n_visible, n_hidden), dhbias (n_hidden,), dvbias (n_visible,))
        ``sum_i w_i v_i h_i^T``, ``sum_i w_i h_i``, ``sum_i w_i v_i``.
    """
    xp = _namespace(V)
    V = xp.ascontiguousarray(V)
    weighted = xp.ascontiguousarray(H * weights[:, None])
    dW = xp.zeros((V.shape[1], H.shape[1]), dtype=V.dtype)
    gemm_tn_accumulate(V, weighted, dW, alpha=1.0, beta=0.0)
    return dW, weighted.sum(axis=0), weights @ V


def free_energy(v: Any, W: Any, hbias: Any, vbias: Any, gaussian: bool) -> Any:
    """``F(v) = -log sum_h exp(-E(v, h))`` per row, shape (n_samples,).

    Bernoulli: ``-v.vbias - sum_j softplus(v W + hbias)_j``;
    Gaussian (unit variance): ``0.5 ||v - vbias||^2 - sum_j softplus(v W + hbias)_j``.

    Computed in float64 (returned as float64): a float32 GEMM rounds a row differently
    depending on where it falls in the BLAS blocks, so ``F(v)`` would change by an ulp with
    the rows around it, more than scikit-learn's row-order and subset checks allow (1e-7).
    """
    xp = _namespace(W)
    v, W, hbias, vbias = (xp.asarray(array, dtype=xp.float64) for array in (v, W, hbias, vbias))
    total_input = v @ W + hbias
    softplus = xp.logaddexp(0, total_input).sum(axis=1)
    if gaussian:
        return 0.5 * ((v - vbias) ** 2).sum(axis=1) - softplus
    return -(v @ vbias) - softplus
