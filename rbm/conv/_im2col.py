"""Convolution and pooling kernels on CHWN arrays, for numpy and cupy alike.

Layout: 4-D activations flow between layers as (C, H, W, N), the batch innermost (the
layout of cuda-convnet).  With it the im2col matrix of a convolution is (KH*KW*C, OH*OW*N)
and every hot loop moves long contiguous runs:

* im2col is ``KH * KW`` block copies (one per kernel offset), each moving rows of
  ``OW * N`` contiguous values, never a loop over samples or pixels;
* ``W @ cols`` with ``W`` of shape (F, KH*KW*C) directly yields the (F, OH, OW, N) output;
* col2im (the input gradient) is ``KH * KW`` in-place adds of the same long rows.  With
  channels last (NHWC) the same adds run over rows of only C values: LeNet's conv1 backward
  took several times longer that way, and it was the slowest part of the step.

Pooling slices the spatial axes (1 and 2) only.  Max pooling routes each output's
gradient to the *first* input of its window (row-major ``(ky, kx)`` order) that equals
the max, so exactly one input receives it even when several tie.

Every function takes the array namespace ``xp`` (numpy or cupy) explicitly and uses
only operations both provide.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Iterator

__all__ = [
    "output_size",
    "pad_spatial",
    "im2col_chwn",
    "col2im_chwn",
    "maxpool_forward",
    "maxpool_backward",
    "avgpool_forward",
    "avgpool_backward",
]

Array = Any


def output_size(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output length of a window of ``kernel`` sliding by ``stride`` over ``size + 2 * padding``."""
    return (size + 2 * padding - kernel) // stride + 1


def _window(offset: int, count: int, stride: int) -> slice:
    """The input positions ``offset, offset + stride, ...`` seen by ``count`` outputs."""
    return slice(offset, offset + stride * (count - 1) + 1, stride)


def _offsets(kh: int, kw: int) -> Iterator[tuple[int, int, int]]:
    for ky in range(kh):
        for kx in range(kw):
            yield ky * kw + kx, ky, kx


def pad_spatial(x: Array, padding: tuple[int, int], value: float, xp: ModuleType, out: Array | None = None) -> Array:
    """``x`` (A, H, W, B) padded on axes 1 and 2 with ``value``; returned as is without padding.

    ``out``, when given, is a preallocated (A, H + 2 ph, W + 2 pw, B) buffer whose border
    already holds ``value`` (only the interior is written).
    """
    ph, pw = padding
    if ph == 0 and pw == 0:
        return x
    a, h, w, b = x.shape
    if out is None:
        out = xp.full((a, h + 2 * ph, w + 2 * pw, b), value, dtype=x.dtype)
    out[:, ph : ph + h, pw : pw + w, :] = x
    return out


def im2col_chwn(x_padded: Array, kernel: tuple[int, int], stride: tuple[int, int], out: Array) -> Array:
    """Fill ``out`` (KH, KW, C, OH, OW, N) with the receptive fields of ``x_padded`` (C, Hp, Wp, N).

    Column ``(oy, ox, n)`` of ``out.reshape(KH * KW * C, OH * OW * N)`` is the window under
    output pixel ``(oy, ox)`` of sample ``n``.
    """
    kh, kw = kernel
    sy, sx = stride
    oh, ow = out.shape[3], out.shape[4]
    for _, ky, kx in _offsets(kh, kw):
        out[ky, kx] = x_padded[:, _window(ky, oh, sy), _window(kx, ow, sx), :]
    return out


def col2im_chwn(
    dcols: Array, padded_shape: tuple[int, ...], padding: tuple[int, int], stride: tuple[int, int], xp: ModuleType
) -> Array:
    """Sum the window gradients ``dcols`` (KH, KW, C, OH, OW, N) back onto the input.

    Returns the gradient with respect to the *unpadded* input, (C, H, W, N).
    """
    kh, kw, _, oh, ow, _ = dcols.shape
    sy, sx = stride
    dx = xp.zeros(padded_shape, dtype=dcols.dtype)
    for _, ky, kx in _offsets(kh, kw):
        dx[:, _window(ky, oh, sy), _window(kx, ow, sx), :] += dcols[ky, kx]
    ph, pw = padding
    if ph or pw:
        dx = dx[:, ph : padded_shape[1] - ph, pw : padded_shape[2] - pw, :]
    return dx


def maxpool_forward(
    x: Array, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int], xp: ModuleType,
    record_winners: bool = True,
) -> tuple[Array, Array | None]:
    """Max pooling of ``x`` (A, H, W, B) over axes 1 and 2; padding counts as ``-inf``.

    Returns
    -------
    out : (A, OH, OW, B)
    winners : (A, OH, OW, B) uint8 (int32 for windows of more than 256 elements)
        Per output, the window offset ``ky * KW + kx`` of its *first* max in row-major order:
        all the backward pass needs (the input itself need not be kept).  None when not
        ``record_winners`` (inference: no backward pass follows).
    """
    kh, kw = kernel
    sy, sx = stride
    x_padded = pad_spatial(x, padding, float("-inf"), xp)
    oh = output_size(x.shape[1], kh, sy, padding[0])
    ow = output_size(x.shape[2], kw, sx, padding[1])
    out = winners = beats = None
    for k, ky, kx in _offsets(kh, kw):
        view = x_padded[:, _window(ky, oh, sy), _window(kx, ow, sx), :]
        if out is None:
            out = view.copy()
            if record_winners:
                winners = xp.zeros(out.shape, dtype=xp.uint8 if kh * kw <= 256 else xp.int32)
                beats = xp.empty(out.shape, dtype=bool)
            continue
        if not record_winners:
            xp.maximum(out, view, out=out)
            continue
        # Only a strictly greater value takes over, so ties keep the earlier offset.  Offsets come
        # in increasing order, so the winner is the largest k that took over: a maximum, not a
        # masked store (which costs several times more).
        xp.greater(view, out, out=beats)
        xp.maximum(winners, beats.view(xp.uint8) * winners.dtype.type(k), out=winners)
        xp.maximum(out, view, out=out)
    return out, winners


def maxpool_backward(
    dout: Array,
    winners: Array,
    padded_shape: tuple[int, ...],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    xp: ModuleType,
) -> Array:
    """Route ``dout`` (A, OH, OW, B) to each window's winner (see :func:`maxpool_forward`).

    ``padded_shape`` is the padded input's (A, H + 2 ph, W + 2 pw, B); returns (A, H, W, B).
    """
    kh, kw = kernel
    sy, sx = stride
    ph, pw = padding
    _, oh, ow, _ = dout.shape
    # Windows that do not overlap write disjoint slabs: a plain store beats an add.  When
    # they also tile the input exactly (LeNet's 2x2 pools), every element gets stored once
    # and the zero fill can go.
    disjoint = sy >= kh and sx >= kw
    tiled = (sy, sx) == (kh, kw) and tuple(padded_shape[1:3]) == (oh * kh, ow * kw)
    dx = (xp.empty if tiled else xp.zeros)(padded_shape, dtype=dout.dtype)
    won = xp.empty(winners.shape, dtype=bool)
    for k, ky, kx in _offsets(kh, kw):
        xp.equal(winners, k, out=won)
        target = dx[:, _window(ky, oh, sy), _window(kx, ow, sx), :]
        if disjoint:
            xp.multiply(dout, won, out=target)
        else:
            target += dout * won
    if ph or pw:
        dx = dx[:, ph : dx.shape[1] - ph, pw : dx.shape[2] - pw, :]
    return dx


def avgpool_forward(
    x: Array, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int], xp: ModuleType
) -> Array:
    """Average pooling of ``x`` (A, H, W, B) over axes 1 and 2; zero padding counts in the average."""
    kh, kw = kernel
    sy, sx = stride
    x_padded = pad_spatial(x, padding, 0.0, xp)
    oh = output_size(x.shape[1], kh, sy, padding[0])
    ow = output_size(x.shape[2], kw, sx, padding[1])
    out = xp.zeros((x.shape[0], oh, ow, x.shape[3]), dtype=x.dtype)
    for _, ky, kx in _offsets(kh, kw):
        out += x_padded[:, _window(ky, oh, sy), _window(kx, ow, sx), :]
    out *= 1.0 / (kh * kw)
    return out


def avgpool_backward(
    dout: Array,
    input_shape: tuple[int, ...],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    xp: ModuleType,
) -> Array:
    """Spread ``dout`` (A, OH, OW, B) evenly over each window; returns (A, H, W, B)."""
    kh, kw = kernel
    sy, sx = stride
    ph, pw = padding
    a, h, w, b = input_shape
    _, oh, ow, _ = dout.shape
    share = dout * (1.0 / (kh * kw))
    dx = xp.zeros((a, h + 2 * ph, w + 2 * pw, b), dtype=dout.dtype)
    for _, ky, kx in _offsets(kh, kw):
        dx[:, _window(ky, oh, sy), _window(kx, ow, sx), :] += share
    if ph or pw:
        dx = dx[:, ph : ph + h, pw : pw + w, :]
    return dx
