"""No compile stall: one kernel cache per host, and kernels compiled before the first real fit.

cupy compiles every kernel at first use (NVRTC, about 0.3 s each; 5.3 s of a 15.2 s DBN fit
on an H100) and keeps the binaries in ``CUPY_CACHE_DIR`` (default ``~/.cupy/kernel_cache``).
Spark executors often run with a home that is absent, read-only or per container, so each
node would compile again.  :func:`configure_kernel_cache` points cupy, unless the user set
``CUPY_CACHE_DIR``, at a folder in the host's temporary directory shared by every process of
the user; :func:`warm_up` runs a model's training step once on a few synthetic rows so that
everything it compiles is compiled (or read from that cache) before real data arrives.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from typing import Any

import numpy as np

__all__ = ["configure_kernel_cache", "warm_up", "KERNEL_CACHE_ENV"]

logger = logging.getLogger(__name__)

KERNEL_CACHE_ENV = "CUPY_CACHE_DIR"


def configure_kernel_cache() -> str:
    """Set ``CUPY_CACHE_DIR`` to a host-wide folder unless the user set it; returns the folder used.

    Call before cupy compiles anything (cupy reads the variable at each compile).
    """
    folder = os.environ.get(KERNEL_CACHE_ENV)
    if not folder:
        uid = os.getuid() if hasattr(os, "getuid") else "user"
        folder = os.path.join(tempfile.gettempdir(), f"sparkdbn-cupy-kernels-{uid}")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.environ[KERNEL_CACHE_ENV] = folder
        logger.info("cupy kernel cache: %s (shared by this host's processes)", folder)
    return folder


def warm_up(model: Any, rows: int = 8) -> float:
    """Compile the kernels ``model`` trains with: one pass of every phase on ``rows`` synthetic rows.

    Works on a fresh replica built from ``model``'s spec (``model`` itself is untouched); a
    no-op returning 0.0 for a model on the CPU.  Returns the seconds it took.
    """
    from .._model import model_from_spec

    if getattr(model, "device", "cpu") == "cpu":
        return 0.0
    configure_kernel_cache()
    started = time.perf_counter()
    replica = model_from_spec(model.to_spec())
    shape = getattr(model, "input_shape_", None) or (getattr(model, "n_features_in_", None),)
    if shape[0] is None:
        raise ValueError("warm_up needs an initialized model (its input width)")
    rng = np.random.default_rng(0)
    X = rng.random((rows, int(np.prod(shape))), dtype=np.float32)
    classes = getattr(model, "classes_", None)
    replica.initialize(shape if len(shape) > 1 else shape[0], classes=classes)
    y = np.arange(rows) % len(classes) if classes is not None else None
    for phase in replica.phases():
        replica.train_partition(X, y, phase, rng)
    seconds = time.perf_counter() - started
    logger.info("warm-up of %s: %.2f s", type(model).__name__, seconds)
    return seconds
