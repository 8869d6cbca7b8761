"""The array backend: numpy on the CPU, cupy on an NVIDIA GPU.

Every model computes through one namespace ``xp`` chosen once, at fit time, from
``device="cpu" | "gpu" | "auto"``.  Code inside models calls only functions that
numpy and cupy share (``xp.dot``, ``xp.exp``, ``xp.maximum`` ...) and moves data
across the boundary with :func:`to_device` and :func:`to_host`.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "DEVICES",
    "gpu_available",
    "resolve_device",
    "array_module",
    "to_device",
    "to_host",
    "make_rng",
    "check_dtype",
    "NamespacePickling",
]

logger = logging.getLogger(__name__)

DEVICES = ("cpu", "gpu", "auto")
FLOAT_DTYPES = (np.float32, np.float64)


def _import_cupy() -> ModuleType | None:
    try:
        cupy = importlib.import_module("cupy")
    except ImportError:
        return None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        cupy.cuda.runtime.memGetInfo()  # opens the current GPU: one in exclusive-process mode held elsewhere refuses
    except Exception as error:  # cupy raises its own CUDARuntimeError without a driver, or on a busy GPU
        logger.debug("cupy is installed but no GPU is usable: %s", error)
        return None
    return cupy


def gpu_available() -> bool:
    """True when cupy is installed, sees at least one CUDA device and can open the current one
    (a GPU in exclusive-process mode that another process holds cannot be opened)."""
    return _import_cupy() is not None


def resolve_device(device: str) -> str:
    """Turn ``"cpu" | "gpu" | "auto"`` into ``"cpu"`` or ``"gpu"``.

    Raises
    ------
    ValueError
        For an unknown device name, or ``"gpu"`` when no GPU is usable.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "cpu":
        return "cpu"
    if gpu_available():
        return "gpu"
    if device == "gpu":
        raise ValueError(
            "device='gpu' was requested but no GPU is usable: install the 'gpu' extra "
            "(cupy) on a machine with an NVIDIA driver, or use device='cpu' or 'auto'"
        )
    return "cpu"


def array_module(device: str) -> ModuleType:
    """The array namespace for a resolved device: ``numpy`` or ``cupy``."""
    if resolve_device(device) == "gpu":
        return _import_cupy()  # type: ignore[return-value]
    return np


_PINNED_UPLOAD_BYTES = 4 << 20  # larger host arrays go to the GPU through pinned staging buffers


def to_device(array: Any, xp: ModuleType, dtype: Any = None) -> Any:
    """Copy ``array`` into the namespace ``xp`` (no copy when already there)."""
    if xp is np:
        return np.asarray(to_host(array), dtype=dtype)
    if isinstance(array, np.ndarray) and array.nbytes >= _PINNED_UPLOAD_BYTES:
        from ._gpu import upload  # pinned, chunked and asynchronous: several times a pageable copy's speed

        return upload(array if dtype is None else array.astype(dtype, copy=False), xp)
    return xp.asarray(array, dtype=dtype)


def to_host(array: Any) -> np.ndarray:
    """A numpy array for ``array``, copying from the GPU when needed."""
    if isinstance(array, np.ndarray):
        return array
    get = getattr(array, "get", None)
    if callable(get):  # cupy.ndarray
        return get()
    return np.asarray(array)


def make_rng(random_state: Any) -> np.random.Generator:
    """One explicit generator from ``None``, an int, or a Generator (never global state)."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1))
    if random_state is None or isinstance(random_state, (int, np.integer)):
        return np.random.default_rng(random_state)
    raise ValueError(f"random_state must be None, an int or a numpy Generator, got {random_state!r}")


def check_dtype(dtype: Any) -> np.dtype:
    """Validate a model dtype: float32 (default) or float64."""
    resolved = np.dtype(dtype)
    if resolved.type not in FLOAT_DTYPES:
        raise ValueError(f"dtype must be float32 or float64, got {resolved}")
    return resolved


class _ModuleName(str):
    """The name of an array namespace inside a pickled model (a module cannot be pickled)."""


class NamespacePickling:
    """Mixin: pickle objects that hold an array namespace (``numpy`` or ``cupy``) by its name.

    Attributes listed in ``_TRANSIENT`` (scratch buffers, caches) are left out of the
    pickle and rebuilt on demand.  Models pickle like any scikit-learn estimator (joblib,
    ``GridSearchCV(n_jobs=...)``); this project itself never unpickles anything.
    """

    _TRANSIENT: tuple[str, ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        parent = getattr(super(), "__getstate__", None)
        state = dict(parent() if parent is not None else self.__dict__)
        for key in self._TRANSIENT:
            state.pop(key, None)
        return {key: _ModuleName(value.__name__) if isinstance(value, ModuleType) else value for key, value in state.items()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = {
            key: importlib.import_module(value) if isinstance(value, _ModuleName) else value for key, value in state.items()
        }
        parent = getattr(super(), "__setstate__", None)
        if parent is not None:
            parent(state)
        else:
            self.__dict__.update(state)
