"""A convolution's matrix products on the CPU, cut along the long pixel axis where that pays.

OpenBLAS (0.3.x, in numpy's wheels) has a "direct" single-precision GEMM for its SkylakeX,
Cooperlake and Sapphire Rapids kernels: small products -- ``M * N * K`` up to 1e6 -- are
multiplied without packing their operands; above that they are packed.  For a product that
is large only because of one long axis (a convolution's ``OH * OW * N`` pixels: 36,864 in
LeNet's conv0 at batch 64, against 20 filters and 25 weights each) the packing costs more
than the arithmetic.  Cut into chunks under that size, conv0's forward product takes 0.43 ms
instead of 0.89 and its weight gradient 0.46 instead of 0.96 (one thread).  Products whose
two other sides are large already (conv1's 50 x 500) would need chunks too short to pay and
stay whole, as do cupy's (cuBLAS has no such cliff), float64 ones and those of a BLAS
without the direct kernels: under OpenBLAS's Haswell kernels (``OPENBLAS_CORETYPE=Haswell``
on the same machine) the chunks made conv0 about 10% slower, 0.84 -> 0.94 ms forward.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import numpy as np
from threadpoolctl import threadpool_info

__all__ = ["pixel_chunk", "matmul_pixels", "matmul_pixels_nt"]

Array = Any

SMALL_PRODUCT = 1_000_000  # M * N * K up to which OpenBLAS multiplies without packing
MIN_CHUNK = 1000  # chunks of 1,000-7,000 pixels ran 1.2-3x faster than whole products, of 266-578 slower
#: OpenBLAS's kernel sets (``threadpoolctl``'s "architecture") with the direct single-precision GEMM.
DIRECT_SGEMM_ARCHITECTURES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


@functools.lru_cache(maxsize=1)
def direct_sgemm() -> bool:
    """True when numpy's BLAS is an OpenBLAS whose kernels multiply small float32 products unpacked."""
    return any(pool.get("internal_api") == "openblas" and str(pool.get("architecture", "")).lower()
               in DIRECT_SGEMM_ARCHITECTURES for pool in threadpool_info() if pool.get("user_api") == "blas")


def pixel_chunk(rows: int, inner: int, pixels: int, xp: ModuleType, dtype: Any = np.float32) -> int | None:
    """Chunk length of the pixel axis for a (rows x inner) by (inner x pixels) product, or None to keep it whole."""
    if xp is not np or np.dtype(dtype) != np.float32 or not direct_sgemm():
        return None
    chunk = SMALL_PRODUCT // (rows * inner)
    return chunk if MIN_CHUNK <= chunk < pixels else None


def matmul_pixels(a: Array, b: Array, out: Array, xp: ModuleType) -> Array:
    """``out (M, P) = a (M, K) @ b (K, P)``, chunked along P when that pays (see the module docstring)."""
    chunk = pixel_chunk(a.shape[0], a.shape[1], b.shape[1], xp, b.dtype)
    if chunk is None:
        return xp.matmul(a, b, out=out)
    for start in range(0, b.shape[1], chunk):
        xp.matmul(a, b[:, start : start + chunk], out=out[:, start : start + chunk])
    return out


def matmul_pixels_nt(a: Array, b: Array, xp: ModuleType) -> Array:
    """``a (M, P) @ b (N, P).T``, a sum of products of P chunks when that pays (see the module docstring)."""
    chunk = pixel_chunk(a.shape[0], b.shape[0], a.shape[1], xp, a.dtype)
    if chunk is None:
        return a @ b.T
    total = a[:, :chunk] @ b[:, :chunk].T
    for start in range(chunk, a.shape[1], chunk):
        total += a[:, start : start + chunk] @ b[:, start : start + chunk].T
    return total
