"""The stack of :class:`~rbm.DBN`: its RBM layers, allocated and pretrained greedily, bottom up.

A mixin of :class:`rbm.DBN`.  Layer K is an :class:`~rbm.RBM` on the hidden probabilities of
layers < K (:meth:`DBNStack._propagate`); :meth:`rbm.DBN.pretrain` (and :meth:`rbm.DBN.fit`) run each
layer's passes as the distributed trainer's ``rbmK`` phases do.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._backend import array_module, check_dtype, resolve_device, to_device
from .._gpu import effective_precision
from .._model import print_iteration
from ._rbm import RBM

__all__ = ["DBNStack", "PRETRAIN_LAYER_DEFAULTS"]

# How the DBN pretrains its RBMs unless ``layer_params`` says otherwise: CD-1 with a momentum
# schedule, which pretrained better for fine-tuning here than the RBM's own defaults (persistent
# CD without momentum, the best for RBM features alone; docs/models.md), from BernoulliRBM's
# initial weight spread 0.01, with which the DBN's defaults were tuned.
PRETRAIN_LAYER_DEFAULTS = {"persistent": False, "momentum": 0.5, "final_momentum": 0.9, "weight_init_std": 0.01}


class DBNStack:
    """Mixin: the RBM layers of :class:`rbm.DBN`, allocated, propagated through and pretrained."""

    def _allocate_layers(self, n_features: int, rng: np.random.Generator) -> None:
        self._dtype = check_dtype(self.dtype)
        self._xp = array_module(self.device)
        self._precision = effective_precision(self.precision, resolve_device(self.device), type(self).__name__)
        self._rng = rng
        self.n_features_in_ = n_features
        seeds = rng.integers(0, 2**31 - 1, size=len(self._sizes())).tolist()
        overrides = self.layer_params or [None] * len(self._sizes())
        self.layers_ = []
        width = n_features
        for k, (size, seed, extra) in enumerate(zip(self._sizes(), seeds, overrides)):
            layer = RBM(
                size, learning_rate=self.pretrain_learning_rate, batch_size=self.batch_size,
                n_iter=self.pretrain_epochs, verbose=self.verbose, random_state=int(seed),
                visible=self.visible if k == 0 else "bernoulli", device=self.device, dtype=self.dtype,
                precision=self.precision, **PRETRAIN_LAYER_DEFAULTS,
            )
            layer.set_params(**(extra or {}))
            layer.set_learning_rate_scale(getattr(self, "_learning_rate_scale", 1.0))
            self.layers_.append(layer.initialize(width))
            width = size
        self.classes_: np.ndarray | None = None
        self._out_W = self._out_b = None
        self._updater = self._make_updater()
        self._finetune_epochs_done = 0

    def _propagate(self, data: Any, n_layers: int) -> Any:
        """Hidden probabilities after the first ``n_layers`` layers (device arrays)."""
        for layer in self.layers_[:n_layers]:
            data = layer._mean_hiddens(data)
        return data

    def _pretrain(self, X: np.ndarray) -> None:
        data = to_device(X, self._xp)
        for k, layer in enumerate(self.layers_):
            for done in range(layer.n_iter):
                started = time.perf_counter()
                loss = layer._partition_pass(data, self._rng)  # as train_partition's rbmK phases
                if self.verbose:
                    print_iteration(f"DBN rbm{k}", done + 1, f"reconstruction error = {loss:.6f}",
                                    time.perf_counter() - started)
            data = layer._mean_hiddens(data) if k + 1 < len(self.layers_) else None
