"""Compile a GPU model's kernels before its first real fit (see :mod:`rbm._gpu._cache` for the cache).

Above the models (it builds a replica from a model's spec), so not inside :mod:`rbm._gpu`,
which the models themselves import.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from ._gpu import configure_kernel_cache
from ._model import model_from_spec

__all__ = ["warm_up", "warm_up_rows"]

logger = logging.getLogger(__name__)


def warm_up_rows(model: Any) -> int:
    """The rows a warm-up trains on: one minibatch of the model's own size (8 without one), so the
    cuDNN plans and kernel launches it prepares are those real partitions use."""
    return max(1, int(getattr(model, "batch_size", None) or 8))


def warm_up(model: Any, rows: int | None = None) -> float:
    """Compile the kernels ``model`` trains with: one pass of every phase on ``rows`` synthetic rows
    (default: :func:`warm_up_rows`, the model's minibatch).

    Works on a fresh replica built from ``model``'s spec (``model`` itself is untouched); a
    no-op returning 0.0 for a model on the CPU.  Returns the seconds it took.
    """
    rows = warm_up_rows(model) if rows is None else int(rows)
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
