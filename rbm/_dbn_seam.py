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
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ._backend import to_device, to_host
from ._model import copy_parameters, save_model
from ._params import params_from_spec, read_config, spec_from_params

if TYPE_CHECKING:  # the mixin is part of DBN, which imports this module
    from ._dbn import DBN

__all__ = ["DBNSeam", "CLASSES_KEY"]

CLASSES_KEY = "meta.classes"


class DBNSeam:
    """Mixin: the distributed trainer's view of a DBN (see :class:`rbm.DBN`)."""

    def phases(self) -> list[str]:
        """``["rbm0", ..., "rbm{L-1}", "finetune"]``."""
        return [f"rbm{k}" for k in range(len(self._sizes()))] + ["finetune"]

    def _layer_index(self, phase: str) -> int:
        if phase not in self.phases() or phase == "finetune":
            raise ValueError(f"unknown phase {phase!r}; phases are {self.phases()}")
        return int(phase[3:])

    def train_partition(self, X: Any, y: Any, phase: str, rng: np.random.Generator) -> dict:
        """One pass over a partition in phase ``phase`` (see :meth:`phases`).

        ``loss`` is the RBM's reconstruction error for ``rbmK`` phases and the mean
        cross-entropy for ``finetune``.
        """
        started = time.perf_counter()
        if phase == "finetune":
            self._require(classes=True)
            X = self._check_X(X)
            if y is None:
                raise ValueError("phase 'finetune' needs labels y")
            labels = to_device(self._encode(y, len(X)), self._xp)
            loss = self._finetune_pass(to_device(X, self._xp), labels, rng)
        else:
            k = self._layer_index(phase)
            if not self.__sklearn_is_fitted__():
                X = self._check_X(X, fitted=False)
                self.initialize(X.shape[1])
            else:
                X = self._check_X(X)
            hidden = self._propagate(to_device(X, self._xp), k)
            loss = self.layers_[k]._train_pass(hidden, rng)
        return {"samples": int(len(X)), "seconds": time.perf_counter() - started, "loss": float(loss)}

    def to_spec(self) -> dict:
        """JSON-able hyperparameters, ``{"kind": "dbn", ...}``."""
        spec = spec_from_params("dbn", self.get_params(deep=False))
        spec["hidden_layer_sizes"] = list(self._sizes())
        spec["layer_params"] = None if self.layer_params is None else [dict(p or {}) for p in self.layer_params]
        return spec

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "DBN":
        """An untrained DBN from a spec dict (``"kind"`` optional)."""
        params = params_from_spec("dbn", spec, cls._get_param_names())
        if isinstance(params.get("hidden_layer_sizes"), list):
            params["hidden_layer_sizes"] = tuple(params["hidden_layer_sizes"])
        return cls(**params)

    @classmethod
    def from_config(cls, path: str | os.PathLike) -> "DBN":
        """An untrained DBN from a JSON (``.json``) or YAML (``.yaml``/``.yml``) spec file."""
        return cls.from_spec(read_config(path))

    def parameters(self, phase: str | None = None) -> dict[str, np.ndarray]:
        """Host copies of the named weights: all, one ``rbmK`` phase, or those of ``finetune``."""
        self._require()
        if phase is not None and phase not in self.phases():
            raise ValueError(f"unknown phase {phase!r}; phases are {self.phases()}")
        if phase == "finetune":
            self._require(classes=True)
            return {name: to_host(value).copy() for name, value in self._finetune_params().items()}
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
        self.initialize(int(arrays["rbm0.W"].shape[0]), classes=classes)
        self.set_parameters(arrays)
