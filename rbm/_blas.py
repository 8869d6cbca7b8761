"""``C <- alpha * A.T @ B + beta * C`` through numpy's own OpenBLAS, when it can be found.

numpy's ``matmul`` has no ``beta``, so a momentum update after it costs two extra passes
over the weight-sized velocity.  scipy's BLAS wrappers have ``beta`` but load a *second*
OpenBLAS with its own thread pool, and the two pools spin against each other on the same
cores.  This module calls ``cblas_sgemm``/``cblas_dgemm`` of the OpenBLAS that numpy itself
uses (found through threadpoolctl), so there is one pool and no extra passes.

Everything is checked once on first use against ``numpy.matmul``; if the library, the
symbol or the result is not as expected, :func:`gemm_tn` returns ``False`` and callers
fall back to ``matmul``.
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Any

import numpy as np
from threadpoolctl import threadpool_info

__all__ = ["gemm_tn", "gemm_tn_accumulate"]

logger = logging.getLogger(__name__)

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_FUNCTIONS: dict[Any, Any] | None = None


def _load() -> dict[Any, Any]:
    """The cblas gemm functions of numpy's OpenBLAS, keyed by dtype ({} when unusable)."""
    try:
        # numpy's wheels keep their OpenBLAS in site-packages/numpy.libs (or numpy/.libs).
        prefix = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy")
        paths = [
            info["filepath"] for info in threadpool_info()
            if info.get("internal_api") == "openblas" and info["filepath"].startswith(prefix)
        ]
        if not paths:
            return {}
        library = ctypes.CDLL(paths[0])
        functions = {}
        for dtype, ctype, letter in ((np.float32, ctypes.c_float, "s"), (np.float64, ctypes.c_double, "d")):
            for name, integer in ((f"scipy_cblas_{letter}gemm64_", ctypes.c_int64), (f"cblas_{letter}gemm", ctypes.c_int)):
                function = getattr(library, name, None)
                if function is not None:
                    function.restype = None
                    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer, ctype,
                                         ctypes.c_void_p, integer, ctypes.c_void_p, integer, ctype,
                                         ctypes.c_void_p, integer]
                    functions[np.dtype(dtype)] = function
                    break
        return functions if _self_test(functions) else {}
    except (OSError, AttributeError, KeyError, ImportError) as error:
        logger.debug("numpy's OpenBLAS cblas gemm is not usable: %s", error)
        return {}


def _call(function: Any, A: np.ndarray, B: np.ndarray, C: np.ndarray, alpha: float, beta: float) -> None:
    n, p = A.shape
    q = B.shape[1]
    function(_ROW_MAJOR, _TRANS, _NO_TRANS, p, q, n, alpha, A.ctypes.data, p, B.ctypes.data, q, beta, C.ctypes.data, q)


def _self_test(functions: dict[Any, Any]) -> bool:
    rng = np.random.default_rng(0)
    for dtype, function in functions.items():
        A, B = rng.random((7, 5)).astype(dtype), rng.random((7, 3)).astype(dtype)
        C = rng.random((5, 3)).astype(dtype)
        expected = 0.5 * (A.T @ B) + 0.25 * C
        _call(function, A, B, C, 0.5, 0.25)
        if not np.allclose(C, expected, rtol=1e-4):
            logger.warning("numpy's OpenBLAS cblas gemm gave a wrong result; using numpy.matmul instead")
            return False
    return bool(functions)


def gemm_tn(A: np.ndarray, B: np.ndarray, C: np.ndarray, alpha: float, beta: float) -> bool:
    """``C <- alpha * A.T @ B + beta * C`` in place; ``False`` (nothing done) when unavailable.

    ``A`` (n, p), ``B`` (n, q), ``C`` (p, q): C-contiguous, one float dtype.
    """
    global _FUNCTIONS
    if _FUNCTIONS is None:
        _FUNCTIONS = _load()
    function = _FUNCTIONS.get(C.dtype)
    if (
        function is None
        or not (A.dtype == B.dtype == C.dtype)
        or not (A.flags.c_contiguous and B.flags.c_contiguous and C.flags.c_contiguous)
    ):
        return False
    _call(function, A, B, C, alpha, beta)
    return True


def gemm_tn_accumulate(A: Any, B: Any, C: Any, alpha: float, beta: float, scratch: Any = None) -> Any:
    """``C <- alpha * A.T @ B + beta * C`` in place.

    Parameters
    ----------
    A : array of shape (n, p), C-contiguous
    B : array of shape (n, q), C-contiguous
    C : array of shape (p, q), C-contiguous, updated in place
    scratch : optional array shaped like C (numpy only), reused for the product

    One BLAS call with ``beta``: cuBLAS on the GPU, numpy's own OpenBLAS on the CPU
    (:func:`gemm_tn`; not scipy's, a second OpenBLAS whose thread pool would fight
    numpy's).  Where that is unavailable: ``matmul`` plus two in-place passes.
    """
    if isinstance(C, np.ndarray):
        xp = np
        if gemm_tn(A, B, C, alpha, beta):
            return C
    else:
        import cupy as xp  # optional dependency: only reached for cupy arrays

        cublas = getattr(xp, "cublas", None)
        if cublas is not None and hasattr(cublas, "gemm"):
            cublas.gemm("T", "N", A, B, out=C, alpha=alpha, beta=beta)
            return C
    product = xp.matmul(A.T, B, out=scratch) if scratch is not None else A.T @ B
    if alpha != 1.0:
        product *= alpha
    if beta == 0.0:
        C[...] = product
    else:
        if beta != 1.0:
            C *= beta
        C += product
    return C
