"""The trainable-model seam of :class:`~rbm.ConvNet`: its phase, named parameters,
``train_partition``, the learning-rate scale, specs, configs and save/load.

A mixin so that ``_convnet.py`` stays about the net itself.  One phase, ``"train"``;
parameters ``"<layer>.<W|b>"``; the saved file holds the spec, the weights, the classes
and the input shape (``meta.classes``, ``meta.input_shape``).
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping

import numpy as np

from .._gpu import download_all
from .._model import MinibatchHook, ScheduleClock, copy_parameters, empty_partition_metrics, is_empty, save_model
from .._params import SpecConstructors, check_learning_rate_scale, spec_from_params
from .._validation import check_labels
from ._spec import plain

__all__ = ["ConvNetSeam", "PHASE"]

PHASE = "train"
CLASSES_KEY, INPUT_SHAPE_KEY = "meta.classes", "meta.input_shape"


class ConvNetSeam(SpecConstructors, MinibatchHook, ScheduleClock):
    """Mixin: the distributed trainer's view of a ConvNet (see :class:`rbm.ConvNet`)."""

    _KIND, _TUPLE_PARAMS = "convnet", ("input_shape",)

    def input_bounds(self) -> tuple[float, float] | None:
        """Conv nets take any finite input."""
        return None

    def phases(self) -> list[str]:
        """A single training phase, ``["train"]``."""
        return [PHASE]

    def parameters(self, phase: str | None = None) -> dict[str, np.ndarray]:
        """Host copies of all weights, named ``"conv0.W"``, ``"out.b"`` ..."""
        if phase not in (None, PHASE):
            raise ValueError(f"unknown phase {phase!r}; a ConvNet has {self.phases()}")
        self._require_initialized()
        return download_all(self._refs)  # one device-to-host copy for the whole snapshot

    def set_parameters(self, params: Mapping[str, np.ndarray]) -> None:
        """Copy the given named arrays into the net (in place, on its device), all or nothing."""
        self._require_initialized()
        unknown = sorted(set(params) - set(self._refs))
        if unknown:
            raise ValueError(f"unknown parameters {unknown}; this net has {sorted(self._refs)}")
        copy_parameters([(name, value, self._refs[name]) for name, value in params.items()], self._xp)

    def set_learning_rate_scale(self, factor: float) -> None:
        """Multiply the learning rate of every following update by ``factor`` (default 1.0).

        Not a hyperparameter: it is not in ``get_params``, the spec or the saved file.  The
        distributed trainer uses it to scale learning rates with the number of nodes.
        """
        self._learning_rate_scale = check_learning_rate_scale(factor)

    def train_partition(self, X: Any, y: Any, phase: str, rng: np.random.Generator) -> dict[str, Any]:
        """One pass over ``(X, y)`` in shuffled minibatches; ``{"samples", "seconds", "loss"}``.

        ``y`` holds class *indices* ``0 .. len(classes_) - 1`` (the driver maps labels to
        indices); an empty partition is skipped.
        """
        if phase != PHASE:
            raise ValueError(f"unknown phase {phase!r}; a ConvNet has {self.phases()}")
        if y is None:
            raise ValueError("a ConvNet trains on labelled data: train_partition needs y for phase 'train'")
        if is_empty(X):  # empty partitions are simply skipped
            return empty_partition_metrics()
        if not self.__sklearn_is_fitted__():
            self.initialize()
        X = self._check_X(X)
        indices = check_labels(y, len(X), len(self.classes_))
        started = time.perf_counter()
        loss = self._epoch(X, indices, rng)
        return {"samples": len(X), "seconds": time.perf_counter() - started, "loss": loss}

    # -- specs and files ------------------------------------------------------------------------
    def to_spec(self) -> dict[str, Any]:
        """JSON-able hyperparameters (with ``"kind": "convnet"``) for :func:`rbm.model_from_spec`."""
        spec = spec_from_params("convnet", self.get_params(deep=False))
        spec["layers"] = plain(spec["layers"])
        spec["input_shape"] = plain(spec["input_shape"])
        return spec

    def save(self, path: str | os.PathLike) -> None:
        """Write the spec, weights, classes and input shape to one ``.npz`` (see :func:`rbm.load_model`)."""
        arrays = self.parameters()
        arrays[CLASSES_KEY] = np.asarray(self.classes_)
        arrays[INPUT_SHAPE_KEY] = np.asarray(self.input_shape_, dtype=np.int64)
        save_model(path, self.to_spec(), arrays)

    def _restore(self, spec: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        arrays = dict(arrays)
        classes = arrays.pop(CLASSES_KEY)
        self.initialize(tuple(int(v) for v in arrays.pop(INPUT_SHAPE_KEY)), classes=classes)
        self.set_parameters(arrays)
