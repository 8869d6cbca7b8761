"""Which branch a model's arrays take: the CPU branch (numpy), or the GPU branch (fused kernels,
Philox draws) -- on cupy arrays, or on numpy arrays in the CPU stand-in that tests it.

Every place in ``rbm/`` that computes differently on the GPU asks :func:`fused_ops` (the
fused kernels, ``None`` on the CPU branch) or :func:`uses_philox` (the sampler), never
``xp is np``: so :func:`stand_in` can send numpy arrays down the GPU branch, and the CPU
test suite checks, on every run, that both branches compute the same thing.
"""

from __future__ import annotations

import contextlib
import threading
from types import ModuleType
from typing import Any, Iterator

import numpy as np

__all__ = ["fused_ops", "fused_ops_for", "uses_philox", "stand_in"]

_STATE = threading.local()  # a stand-in applies to the thread that entered it


def _override() -> tuple[Any, bool]:
    return getattr(_STATE, "override", (None, False))


def fused_ops(xp: ModuleType) -> Any:
    """The fused operations of the GPU branch for arrays of ``xp``, or ``None`` (the CPU branch)."""
    if xp is np:
        return _override()[0]
    from ._cuda import cuda_kernels

    return cuda_kernels()


def fused_ops_for(array: Any) -> Any:
    """:func:`fused_ops` for the namespace of ``array`` (numpy or cupy)."""
    if isinstance(array, np.ndarray):
        return fused_ops(np)
    from ._cuda import cuda_kernels

    return cuda_kernels()


def uses_philox(xp: ModuleType) -> bool:
    """True when models on ``xp`` draw from the counter-based :class:`~rbm._gpu.PhiloxStream`
    (the GPU, the stand-in), False when they draw from numpy's SFC64 (the CPU branch)."""
    return xp is not np or _override()[1]


@contextlib.contextmanager
def stand_in(fused: bool = True) -> Iterator[None]:
    """Within the block, numpy models take the GPU branch (``fused=True``: the fused kernels'
    numpy references, Philox draws) or the CPU branch with Philox draws (``fused=False``).

    For tests: the two give the same parameters from the same seed when the branches compute
    the same algorithm, and a real GPU gives what ``fused=True`` gives.  Models built inside
    the block keep their sampler; use them inside it.
    """
    from ._reference import ReferenceOps

    previous = _override()
    _STATE.override = (ReferenceOps() if fused else None, True)
    try:
        yield
    finally:
        _STATE.override = previous
