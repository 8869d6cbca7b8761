"""What floating-point comparisons may assume, for tests that hold on any machine and BLAS build.

Two code paths that compute the same quantity by different sequences of operations (a GEMM on
1,737 rows against one on 1,024 + 713, a Spark task's batch against the driver's, one BLAS thread
against two, C against Fortran order) agree only to within the rounding of each: which kernel
OpenBLAS picks (Haswell, SkylakeX, ...), how it blocks the rows and how many threads share them
decide the last bits.  Exact equality is for two sides that run the same operations; elsewhere
the tests compare within the bounds below, derived from the arithmetic.

:class:`BlasSetting` is what the ``numerics`` fixture (tests/conftest.py) runs a test under: the
process's BLAS thread count and C order, then another thread count and Fortran order, so a test
that leans on one kernel's rounding is likelier to fail at home than on another machine -- where
those knobs reach the rounding at all (docs/testing.md says where they do not).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

__all__ = ["BlasSetting", "NUMERICS_SETTINGS", "assert_within", "forward_rtol", "matmul_error_bound", "near_ties",
           "unit_roundoff"]


def unit_roundoff(dtype) -> float:
    """``u = eps / 2``: the largest relative error of one rounded operation in ``dtype``."""
    return float(np.finfo(dtype).eps) / 2


def matmul_error_bound(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """How far two evaluations of ``A @ B`` in ``A``'s precision may be apart, element by element.

    Any order of summing a length-``K`` dot product is off by at most ``gamma_K * sum_k |a_k b_k|``
    with ``gamma_K = K u / (1 - K u)`` (Higham, *Accuracy and Stability of Numerical Algorithms*,
    section 3.1); two evaluations, each within that of the exact value, are within twice it.

    Parameters
    ----------
    A : ndarray of shape (n, K)
    B : ndarray of shape (K, m)

    Returns
    -------
    ndarray of shape (n, m), float64
    """
    K = A.shape[-1]
    u = unit_roundoff(np.result_type(A, B))
    gamma = K * u / (1 - K * u)
    return 2 * gamma * (np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64)))


def assert_within(actual: np.ndarray, expected: np.ndarray, bound: np.ndarray, what: str) -> None:
    """Assert ``|actual - expected| <= bound`` element by element, naming how many are outside and by how much."""
    difference = np.abs(np.asarray(actual, dtype=np.float64) - np.asarray(expected, dtype=np.float64))
    bound = np.broadcast_to(bound, difference.shape)
    outside = difference > bound
    if outside.any():
        worst = np.unravel_index(np.argmax(np.where(outside, difference / np.maximum(bound, 1e-300), 0)), bound.shape)
        raise AssertionError(f"{what}: {outside.sum()} of {outside.size} values outside the bound; the worst, at "
                             f"{tuple(int(i) for i in worst)}, is {difference[worst]:.3g} off, "
                             f"the bound {bound[worst]:.3g}")


def forward_rtol(*widths: int, dtype=np.float32) -> float:
    """How far, relative, a network's outputs computed two ways (other row blocks, threads, kernels) may be
    apart: ``eps`` times the summed lengths of the dot products on the way (each layer's inputs).

    Each layer's dot products round at about ``K eps`` relative to their terms, and a sigmoid, tanh,
    ReLU or softmax passes that on at a slope of at most 1.
    """
    return sum(widths) * float(np.finfo(dtype).eps)


def near_ties(proba: np.ndarray, rtol: float) -> np.ndarray:
    """Rows whose two largest entries are within ``rtol`` of each other, shape (n_samples,) of bool.

    An ``argmax`` over values computed two ways may pick either entry of such a row; elsewhere it
    picks the same one on both sides.
    """
    top_two = np.sort(proba, axis=1)[:, -2:]
    return top_two[:, 1] - top_two[:, 0] <= rtol * np.abs(top_two[:, 1])


def _process_blas_threads() -> int:
    """The BLAS thread count this process starts with (OpenBLAS: one per core unless told otherwise)."""
    return max((pool["num_threads"] for pool in threadpool_info() if pool.get("user_api") == "blas"), default=1)


@dataclass(frozen=True)
class BlasSetting:
    """A BLAS thread count and a memory order for the arrays a test hands to the code under test."""

    name: str
    threads: int | None  # None: whatever the process has
    order: str  # "C" or "F"

    def arrange(self, array: np.ndarray) -> np.ndarray:
        """``array`` in this setting's memory order (the same values)."""
        return np.asfortranarray(array) if self.order == "F" else np.ascontiguousarray(array)

    @contextlib.contextmanager
    def applied(self) -> Iterator[BlasSetting]:
        """This setting's thread count for the block's BLAS calls."""
        if self.threads is None:
            yield self
            return
        with threadpool_limits(limits=self.threads, user_api="blas"):
            yield self


def _settings() -> tuple[BlasSetting, BlasSetting]:
    threads = _process_blas_threads()
    other = 1 if threads > 1 else 2  # OpenBLAS splits a GEMM's blocks by thread: another count, other splits
    return BlasSetting(f"blas{threads}-C", None, "C"), BlasSetting(f"blas{other}-F", other, "F")


#: The settings every ``numerics`` test runs under: the process's own, then another thread count and Fortran order.
NUMERICS_SETTINGS = _settings()
