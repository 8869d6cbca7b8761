"""The trainable-model seam of :class:`~rbm.DBN`: phases, per-phase parameters,
``train_partition``, specs, configs and save/load.

A mixin so that ``_dbn.py`` stays about the model itself.  Phase ``rbmK`` trains layer K
on the data transformed through layers < K; phase ``finetune`` backpropagates through
the whole stack.  Parameter names: ``rbmK.W`` (n_in, n_out), ``rbmK.hbias``,
``rbmK.vbias``, ``out.W`` (n_top, n_classes), ``out.b``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Mapping

import numpy as np

from .._backend import to_device, to_host
from .._gpu import download_all
from .._model import MinibatchHook, ScheduleClock, copy_parameters, empty_partition_metrics, is_empty, save_model
from .._params import SpecConstructors, check_learning_rate_scale, spec_from_params
from .._validation import check_labels

__all__ = ["DBNSeam", "CLASSES_KEY"]

CLASSES_KEY = "meta.classes"


class DBNSeam(SpecConstructors, MinibatchHook, ScheduleClock):
    """Mixin: the distributed trainer's view of a DBN (see :class:`rbm.DBN`)."""

    _KIND, _TUPLE_PARAMS = "dbn", ("hidden_layer_sizes",)

    def phases(self) -> list[str]:
        """``["rbm0", ..., "rbm{L-1}", "finetune"]``."""
        return [f"rbm{k}" for k in range(len(self._sizes()))] + ["finetune"]

    def takes_outer_step(self, phase: str) -> bool:
        """Only in ``finetune``: the nodes merge the pretraining RBMs plainly, as an RBM's (:meth:`rbm.RBM.takes_outer_step`).

        Measured on Spark (DBN(128, 128) on digits28, 2/2/4 epochs, 3 runs; one process 0.9814), the
        step 0.7/0.8: 8 / 16 nodes 0.9777 / 0.9758 with it in fine-tuning only, 0.9814 / 0.9675 in
        every phase, 0.9721 / 0.9703 merging plainly.  The RBMs alone lose with every step measured
        (:meth:`rbm.RBM.takes_outer_step`).
        """
        return phase == "finetune"

    def input_bounds(self) -> tuple[float, float] | None:
        """The range every input value must lie in: ``(0, 1)`` for Bernoulli visible units, else None."""
        return (0.0, 1.0) if self.visible == "bernoulli" else None

    def _layer_index(self, phase: str) -> int:
        if phase not in self.phases() or phase == "finetune":
            raise ValueError(f"unknown phase {phase!r}; phases are {self.phases()}")
        return int(phase[3:])

    def train_partition(self, X: Any, y: Any, phase: str, rng: np.random.Generator) -> dict:
        """One pass over a partition in phase ``phase`` (see :meth:`phases`).

        ``y`` (phase ``finetune`` only) holds class *indices* ``0 .. len(classes_) - 1``:
        the distributed driver fixes the classes with ``initialize`` and maps labels to
        indices.  ``loss`` is the RBM's reconstruction error for ``rbmK`` phases and the
        mean cross-entropy for ``finetune``.  An empty partition is skipped.
        """
        if phase != "finetune":
            self._layer_index(phase)  # an unknown phase fails here, even for an empty partition
        if is_empty(X):  # empty partitions are simply skipped
            return empty_partition_metrics()
        started = time.perf_counter()
        if phase == "finetune":
            self._require(classes=True)
            X = self._check_X(X)
            if y is None:
                raise ValueError("phase 'finetune' needs labels y")
            indices = to_device(check_labels(y, len(X), len(self.classes_)), self._xp)
            loss = self._finetune_pass(to_device(X, self._xp), indices, rng)
        else:
            k = self._layer_index(phase)
            X = self._prepare(X)
            hidden = self._propagate(to_device(X, self._xp), k)
            self.layers_[k].set_schedule_epoch(self._schedule_epoch)  # the RBM's momentum switch
            loss = self.layers_[k]._partition_pass(hidden, rng)
        return {"samples": int(len(X)), "seconds": time.perf_counter() - started, "loss": float(loss)}

    def set_learning_rate_scale(self, factor: float) -> None:
        """Multiply the learning rate of every following update by ``factor`` (default 1.0):
        the RBMs' CD updates in pretraining and the fine-tuning updater alike.

        Not a hyperparameter: it is not in ``get_params``, the spec or the saved file.  The
        distributed trainer uses it to scale learning rates with the number of nodes.
        """
        self._learning_rate_scale = check_learning_rate_scale(factor)
        for layer in getattr(self, "layers_", None) or []:
            layer.set_learning_rate_scale(self._learning_rate_scale)

    def set_minibatch_hook(self, hook: "Callable[[], None] | None") -> None:
        """Call ``hook()`` after every minibatch update: fine-tuning's and, in the ``rbmK`` phases, the RBMs'."""
        super().set_minibatch_hook(hook)
        for layer in getattr(self, "layers_", None) or []:
            layer.set_minibatch_hook(hook)

    def to_spec(self) -> dict:
        """JSON-able hyperparameters, ``{"kind": "dbn", ...}``."""
        spec = spec_from_params("dbn", self.get_params(deep=False))
        spec["hidden_layer_sizes"] = list(self._sizes())
        spec["layer_params"] = None if self.layer_params is None else [dict(p or {}) for p in self.layer_params]
        return spec

    def parameters(self, phase: str | None = None) -> dict[str, np.ndarray]:
        """Host copies of the named weights: all, one ``rbmK`` phase, or those of ``finetune``."""
        self._require()
        if phase is not None and phase not in self.phases():
            raise ValueError(f"unknown phase {phase!r}; phases are {self.phases()}")
        if phase == "finetune":
            self._require(classes=True)
            return download_all(self._finetune_params())  # one copy from a GPU
        chosen = range(len(self.layers_)) if phase is None else [self._layer_index(phase)]
        params = {f"rbm{k}.{name}": value for k in chosen for name, value in self.layers_[k].parameters().items()}
        if phase is None and self._out_W is not None:
            params["out.W"], params["out.b"] = to_host(self._out_W).copy(), to_host(self._out_b).copy()
        return params

    def set_parameters(self, params: Mapping[str, np.ndarray]) -> None:
        """Copy named arrays (``rbmK.W``, ``out.b`` ...) into the model, in place."""
        self._require()
        assignments = []
        for name, value in params.items():
            prefix, _, field = name.partition(".")
            if prefix == "out" and field in ("W", "b"):
                self._require(classes=True)
                assignments.append((name, value, self._out_W if field == "W" else self._out_b))
            elif (prefix.startswith("rbm") and prefix[3:].isdigit() and int(prefix[3:]) < len(self.layers_)
                  and field in ("W", "hbias", "vbias")):
                assignments.append((name, value, getattr(self.layers_[int(prefix[3:])], "_" + field)))
            else:
                raise ValueError(f"unknown DBN parameter name {name!r}")
        copy_parameters(assignments, self._xp)

    def save(self, path: str | os.PathLike) -> None:
        """Write the spec, the weights and the classes to one ``.npz``."""
        self._require()
        arrays = self.parameters()
        if self.classes_ is not None:
            arrays[CLASSES_KEY] = np.asarray(self.classes_)
        save_model(path, self.to_spec(), arrays)

    def _restore(self, spec: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        arrays = dict(arrays)
        classes = arrays.pop(CLASSES_KEY, None)
        if classes is None and "out.W" in arrays:
            raise KeyError(CLASSES_KEY)  # an output layer without its classes (rbm.load_model names the file)
        self.initialize(int(arrays["rbm0.W"].shape[0]), classes=classes)
        self.set_parameters(arrays)
