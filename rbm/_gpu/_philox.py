"""A counter-based random stream (Philox4x32-10) that numpy and CUDA kernels draw identically.

Draw ``i`` of a stream is a pure function of the stream's key (its seed) and the counter
``offset + i`` (Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy as 1, 2, 3",
SC 2011): there is no sequential state to carry between threads, so a fused CUDA kernel
draws its own uniforms in the same launch that uses them, and the numpy reference below
produces the very same numbers on the CPU.  A GPU fit and a CPU fit seeded alike therefore
sample alike, which is what lets the two backends be compared parameter for parameter.

Each draw takes one counter: the counter's two low words are the draw's index, its high
words 0.  Uniforms: float32 ``(w0 >> 8) * 2**-24``, float64 ``(w0 << 21 | w1 >> 11) * 2**-53``
(exact in their dtype, in [0, 1)).  Normals: Box-Muller from the float64 uniforms of words
(w0, w1) and (w2, w3), ``sqrt(-2 log(1 - u1)) * cos(2 pi u2)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["PhiloxStream", "philox4x32_10"]

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK = 0xFFFFFFFF
_MASK64 = np.uint64(_MASK)


def philox4x32_10(counter: tuple[Any, Any, Any, Any], key: tuple[int, int]) -> tuple[np.ndarray, ...]:
    """The four 32-bit output words of Philox4x32-10 for arrays of counter words (as uint64)."""
    c0, c1, c2, c3 = (np.asarray(word, dtype=np.uint64) for word in counter)
    k0, k1 = int(key[0]) & _MASK, int(key[1]) & _MASK
    for _ in range(10):
        product0, product1 = _M0 * c0, _M1 * c2  # 32 x 32 bits: exact in uint64
        hi0, lo0 = product0 >> np.uint64(32), product0 & _MASK64
        hi1, lo1 = product1 >> np.uint64(32), product1 & _MASK64
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
        k0, k1 = (k0 + _W0) & _MASK, (k1 + _W1) & _MASK
    return c0, c1, c2, c3


class PhiloxStream:
    """Counter-based uniforms and normals: numpy ``Generator``'s ``random`` and ``standard_normal``
    (``size``, ``dtype``, ``out``), on numpy arrays here and on cupy arrays through a CUDA kernel.

    Parameters
    ----------
    seed : int
        64-bit key of the stream.  Picklable (two ints), so a model holding one pickles.
    """

    def __init__(self, seed: int) -> None:
        seed = int(seed)
        self.key = (seed & _MASK, (seed >> 32) & _MASK)
        self.offset = 0

    def reserve(self, count: int) -> int:
        """Take the next ``count`` counters; returns the first (a fused kernel draws them itself)."""
        start = self.offset
        self.offset += int(count)
        return start

    def words(self, count: int, start: int) -> tuple[np.ndarray, ...]:
        """The output words of draws ``start .. start + count - 1`` (numpy, uint64 holding 32 bits)."""
        index = np.arange(start, start + count, dtype=np.uint64)
        return philox4x32_10((index & _MASK64, index >> np.uint64(32), 0, 0), self.key)

    def uniforms(self, count: int, start: int, dtype: Any) -> np.ndarray:
        """Uniforms in [0, 1) of draws ``start ..`` as a flat numpy array of ``dtype``."""
        w0, w1, _, _ = self.words(count, start)
        return _uniform_from_words(w0, w1, np.dtype(dtype))

    def normals(self, count: int, start: int, dtype: Any) -> np.ndarray:
        """Standard normals of draws ``start ..`` as a flat numpy array of ``dtype``."""
        w0, w1, w2, w3 = self.words(count, start)
        u1 = _uniform_from_words(w0, w1, np.dtype(np.float64))
        u2 = _uniform_from_words(w2, w3, np.dtype(np.float64))
        return (np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)).astype(dtype, copy=False)

    def random(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> Any:
        """Uniforms in [0, 1), into ``out`` (numpy or cupy, filled element by element) or a new numpy array."""
        return self._fill("uniform", size, dtype, out)

    def standard_normal(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> Any:
        """Standard normal draws, into ``out`` or a new numpy array."""
        return self._fill("normal", size, dtype, out)

    def _fill(self, kind: str, size: Any, dtype: Any, out: Any) -> Any:
        dtype = np.dtype(dtype)
        if out is None:
            shape = () if size is None else tuple(np.atleast_1d(size).tolist())
            out = np.empty(shape, dtype=dtype)
        elif out.dtype != dtype or (size is not None and tuple(np.atleast_1d(size).tolist()) != out.shape):
            raise ValueError(f"out of shape {out.shape} and dtype {out.dtype} does not match size {size} and dtype {dtype}")
        if not out.flags.c_contiguous:
            raise ValueError("out must be C-contiguous: draw i fills element i in row-major order")
        start = self.reserve(out.size)
        if isinstance(out, np.ndarray):
            draw = self.uniforms if kind == "uniform" else self.normals
            out.reshape(-1)[...] = draw(out.size, start, dtype)
            return out
        from ._cuda import cuda_kernels  # cupy arrays only

        cuda_kernels().fill_random(kind, out, self.key, start)
        return out


def _uniform_from_words(w0: np.ndarray, w1: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype == np.float32:
        return ((w0 >> np.uint64(8)).astype(np.float32) * np.float32(2.0**-24)).astype(np.float32)
    bits = (w0 << np.uint64(21)) | (w1 >> np.uint64(11))
    return bits.astype(np.float64) * 2.0**-53
