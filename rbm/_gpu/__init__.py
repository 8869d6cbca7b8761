"""The GPU branch of ``rbm/``: fused CUDA kernels (and their numpy stand-ins), the counter-based
sampler both backends share, precision-aware cuBLAS GEMMs, host-device transfers, and the
kernel cache.

Nothing here imports cupy until a cupy array arrives: on CPU-only machines the package
imports numpy alone.  Models never test ``xp is np`` to choose what to compute; they ask
:func:`fused_ops` and :func:`uses_philox` (see :mod:`._select`).
"""

from ._cache import configure_kernel_cache
from ._philox import PhiloxStream
from ._precision import PRECISIONS, check_precision, effective_precision
from ._select import fused_ops, fused_ops_for, stand_in, uses_philox
from ._transfer import DeviceDataCache, download_all, upload

__all__ = ["DeviceDataCache", "configure_kernel_cache", "download_all", "upload", "PhiloxStream", "PRECISIONS", "check_precision", "effective_precision", "fused_ops", "fused_ops_for", "stand_in", "uses_philox"]
