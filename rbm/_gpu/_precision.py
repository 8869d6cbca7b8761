"""The opt-in precision of a model's GEMMs and convolutions on the GPU.

``"float32"`` (the default): full float32 arithmetic, as on the CPU.  ``"tf32"``: float32
data, products on the tensor cores with 10-bit mantissas (NVIDIA Ampere and later), sums in
float32.  ``"bfloat16"``: the GEMMs' inputs rounded to bfloat16 (8-bit mantissas) on the
tensor cores, sums in float32; convolutions in TF32 (bfloat16 convolutions would need the
activations stored in bfloat16).  Parameters, activations and updates stay in the model's
dtype either way: the setting trades the products' precision for tensor-core speed only.

The CPU has no such units.  ``device="cpu"`` with a reduced precision is a contradiction and
fails with a clear error; ``device="auto"`` means "wherever the model lands", so on a machine
without a GPU the setting does not apply and the model computes in float32, saying so once in
the log: one spec then serves a Spark cluster whose nodes differ (GPU nodes use the tensor
cores, the others compute as always).  float64 models take ``"float32"`` only (a reduced
precision of float32 products means nothing for them).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

__all__ = ["PRECISIONS", "check_precision", "effective_precision", "cublas_compute_type"]

logger = logging.getLogger(__name__)

PRECISIONS = ("float32", "tf32", "bfloat16")

# cublasComputeType_t (cublas_api.h)
_COMPUTE_32F, _COMPUTE_32F_FAST_16BF, _COMPUTE_32F_FAST_TF32, _COMPUTE_64F = 68, 75, 77, 70
_COMPUTE_TYPES = {"float32": _COMPUTE_32F, "tf32": _COMPUTE_32F_FAST_TF32, "bfloat16": _COMPUTE_32F_FAST_16BF}


def check_precision(precision: Any, device: str, dtype: Any, model: str = "model") -> str:
    """Validate ``precision`` for a model asking for ``device`` ("cpu" | "gpu" | "auto") with ``dtype``.

    Raises
    ------
    ValueError
        An unknown name; a reduced precision with ``device="cpu"`` or a float64 model.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"{model}: precision must be one of {PRECISIONS}, got {precision!r}")
    if precision != "float32" and device == "cpu":
        raise ValueError(
            f"{model}: precision={precision!r} needs a GPU's tensor cores, but device='cpu' (the CPU computes in "
            f"the model's dtype); use precision='float32', or device='gpu' or 'auto'"
        )
    if precision != "float32" and np.dtype(dtype) != np.float32:
        raise ValueError(f"{model}: precision={precision!r} applies to float32 models, not {np.dtype(dtype)}")
    return precision


def effective_precision(precision: str, resolved_device: str, model: str = "model") -> str:
    """The precision a model computes at once its device is known: ``"float32"`` on the CPU."""
    if precision != "float32" and resolved_device != "gpu":
        logger.info("%s: precision=%r applies on GPUs only; this model runs on the CPU in float32", model, precision)
        return "float32"
    return precision


def cublas_compute_type(dtype: Any, precision: str) -> int:
    """The cuBLAS compute type of a GEMM on arrays of ``dtype`` at ``precision``."""
    if np.dtype(dtype) == np.float64:
        return _COMPUTE_64F
    return _COMPUTE_TYPES[precision]
