"""The CD step of the GPU branch: :func:`rbm.boltzmann._cd.cd_step`'s algorithm in fused kernels.

On the GPU a CD-1 step's time is kernel launches, not arithmetic (about 25 launches in the
CPU branch's op-by-op form against five GEMMs).  Here every elementwise stretch between two
GEMMs is one launch of a fused kernel (``ops``: :class:`rbm._gpu._cuda.CudaOps`, or its
numpy twin in the CPU stand-in), and the minibatch's learning-rate scale rides along in the
sigmoid kernels.  The algorithm, the order of the random draws and their counters are those
of the CPU branch, so both give the same parameters from the same Philox stream:
``tests/rbm/test_gpu_branch.py`` checks it on every CPU run, the GPU tests on a GPU.

Launches of a CD-1 step: three GEMMs with a fused bias + sigmoid (+ Bernoulli sample)
after each, the stacked gradient GEMM, two bias-gradient reductions, three parameter updates
(and two for the reconstruction error on every 4th minibatch of CD; persistent CD measures the
mean-field reconstruction, one more GEMM, on the last minibatches of a pass only).
"""

from __future__ import annotations

from typing import Any

from ._sparsity import add_sparsity_

__all__ = ["cd_step"]


def cd_step(ops: Any, ws: Any, b: int, W: Any, hbias: Any, vbias: Any, velocity: tuple[Any, Any, Any], generator: Any,
            settings: Any, learning_rate: float, momentum: float, chain: Any = None, sparsity_state: Any = None,
            measure_error: bool = True, precision: str = "float32") -> Any:
    """One CD-k (or PCD-k) update, as :func:`rbm.boltzmann._cd.cd_step` (same arguments).

    Returns
    -------
    The summed squared reconstruction error as a 0-d device array (no wait for the GPU), or
    ``nan`` (a float) when not measured.
    """
    xp = ops.xp
    c = ws.negatives
    v0, vk = ws.V[:b], ws.V[b:]
    h0, hk = ws.H[:b], ws.H[b:]
    hs, noise = ws.h_sample[:c], ws.scratch[:c]
    # The learning-rate scales of the positive and negative statistics go into the kernels that
    # write them, unless the sparsity penalty still needs the unscaled positive probabilities.
    fold = settings.sparsity_target is None
    scale_positive, scale_negative = learning_rate / b, learning_rate / c
    ops.matmul(v0, W, h0, precision=precision)
    error: Any = float("nan")
    if settings.persistent:
        hidden = chain  # the chains' states feed the first GEMM directly, as in the CPU branch
        if measure_error:  # the mean-field reconstruction, from the unscaled p(h | v0), as the CPU branch
            ops.bias_sigmoid_(h0, hbias)
            reconstruction = ws.scratch[:b]
            ops.matmul(h0, W, reconstruction, trans_b=True, precision=precision)
            if settings.gaussian:
                ops.bias_add_(reconstruction, vbias)
            else:
                ops.bias_sigmoid_(reconstruction, vbias)
            error = _squared_error(xp, v0, reconstruction, reconstruction)
            if fold:
                h0 *= scale_positive
        else:
            ops.bias_sigmoid_(h0, hbias, scale_positive if fold else 1.0)
    else:
        ops.bias_sigmoid_sample_(h0, hbias, generator, hs, scale_positive if fold else 1.0)
        hidden = hs
    for step in range(settings.cd_k):
        last = step == settings.cd_k - 1
        sample_visibles = not last or settings.persistent
        measure = step == 0 and measure_error and not settings.persistent
        ops.matmul(hidden, W, vk, trans_b=True, precision=precision)
        if settings.gaussian:
            # The error is measured on the mean, before the noise (as the CPU branch does).
            ops.bias_add_(vk, vbias, None if measure else generator if sample_visibles else None)
            if measure:
                error = _squared_error(xp, v0, vk, noise)
                if sample_visibles:
                    ops.bias_add_(vk, xp.zeros_like(vbias), generator)
        elif sample_visibles and not measure:
            ops.bias_sigmoid_sample_(vk, vbias, generator, vk)
        else:
            ops.bias_sigmoid_(vk, vbias)
            if measure:
                error = _squared_error(xp, v0, vk, noise)
            if sample_visibles:
                ops.sample_(vk, generator)
        ops.matmul(vk, W, hk, precision=precision)
        if not last:
            ops.bias_sigmoid_sample_(hk, hbias, generator, hs)
            hidden = hs
    negative_scale = -(scale_negative if fold else 1.0)
    if settings.persistent:
        ops.bias_sigmoid_sample_(hk, hbias, generator, chain, negative_scale)  # the chains continue from here
    else:
        ops.bias_sigmoid_(hk, hbias, negative_scale)
    if not fold:
        add_sparsity_(ws.H[:b], sparsity_state, settings.sparsity_target, settings.sparsity_cost,
                      settings.sparsity_decay)
        h0 *= scale_positive
        hk *= scale_negative
    vel_W, vel_h, vel_v = velocity
    ops.gemm_tn(ws.V, ws.H, vel_W, 1.0, momentum, precision=precision)
    if settings.weight_decay:
        ops.subtract_scaled_(vel_W, W, learning_rate * settings.weight_decay)
    ops.column_sums(ws.H, out=ws.grad_hbias)
    ops.column_sums(ws.V, ws.sign, out=ws.grad_vbias)  # sum(v0) - (b / c) sum(vk)
    ops.momentum_step_(hbias, vel_h, ws.grad_hbias, momentum, 1.0)
    ops.momentum_step_(vbias, vel_v, ws.grad_vbias, momentum, scale_positive)
    W += vel_W
    return error


def _squared_error(xp: Any, v0: Any, vk: Any, scratch: Any) -> Any:
    """``sum((v0 - vk)^2)`` as a 0-d array (on the GPU: no synchronization)."""
    xp.subtract(v0, vk, out=scratch)
    flat = scratch.ravel()
    return xp.dot(flat, flat)
