"""No compile stall: one kernel cache per host, and kernels compiled before the first real fit.

cupy compiles every kernel at first use (NVRTC, about 0.3 s each; 5.3 s of a 15.2 s DBN fit
on an H100) and keeps the binaries in ``CUPY_CACHE_DIR`` (default ``~/.cupy/kernel_cache``).
Spark executors often run with a home that is absent, read-only or per container, so each
node would compile again.  :func:`configure_kernel_cache` points cupy, unless the user set
``CUPY_CACHE_DIR``, at a folder in the host's temporary directory shared by every process of
the user; :func:`rbm.warm_up` (:mod:`rbm._warm_up`) runs a model's training step once on a few
synthetic rows so that everything it compiles is compiled (or read from that cache) before real
data arrives.
"""

from __future__ import annotations

import logging
import os
import tempfile

__all__ = ["configure_kernel_cache", "KERNEL_CACHE_ENV"]

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
