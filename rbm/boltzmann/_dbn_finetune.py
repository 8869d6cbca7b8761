"""Fine-tuning of :class:`~rbm.DBN`: the unrolled stack, a softmax output on top, trained by backprop.

A mixin of :class:`rbm.DBN`.  The stack's sigmoid layers start from the RBMs' weights and hidden
biases, the output layer from Glorot-uniform weights; each epoch is one shuffled pass of
minibatch backprop (the math in :mod:`._finetune`), with the rate's decay, its anneal over a
planned fit's last updates and the dropout ramp over its first epochs; early stopping keeps the
best validation accuracy's weights.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from .._backend import to_device, to_host
from .._model import print_iteration
from .._updaters import anneal_factor
from .._validation import check_finite_parameters
from ..datasets import train_test_indices
from . import _cd, _finetune

__all__ = ["DBNFineTuning"]


class DBNFineTuning:
    """Mixin: the fine-tuning of :class:`rbm.DBN` and the forward pass its predictions take."""

    def _allocate_output(self, labels: np.ndarray) -> None:
        n_in, n_out = self._sizes()[-1], len(labels)
        limit = math.sqrt(6.0 / (n_in + n_out))  # Glorot-uniform
        self._out_W = to_device(self._rng.uniform(-limit, limit, size=(n_in, n_out)), self._xp, self._dtype)
        self._out_b = self._xp.zeros(n_out, dtype=self._dtype)
        self.classes_ = labels
        self._updater.reset()

    def _finetune_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for k, layer in enumerate(self.layers_):
            params[f"rbm{k}.W"], params[f"rbm{k}.hbias"] = layer._W, layer._hbias
        params["out.W"], params["out.b"] = self._out_W, self._out_b
        return params

    def _dropout(self, epoch: float | None) -> float:
        """The dropout rate at fine-tuning epoch ``epoch`` of a fit (counted from 0; a partition's place
        in a distributed fit may be a fraction); ``None`` (:meth:`train_partition` without a plan):
        ``finetune_dropout``."""
        ramp = float(self.finetune_dropout_ramp_epochs)
        if epoch is None or ramp == 0:
            return float(self.finetune_dropout)
        return float(self.finetune_dropout) * min(1.0, epoch / ramp)

    def _finetune_pass(self, data: Any, labels: Any, rng: np.random.Generator,
                       planned: tuple[int, int] | None = None) -> float:
        """One shuffled epoch of backprop on device arrays; returns the mean cross-entropy.

        ``planned = (done, total)`` when this is epoch ``done + 1`` of ``total`` planned ones
        (:meth:`fit`): the rate is then annealed over the last ``finetune_anneal_fraction``, and
        dropout ramped over the first ``finetune_dropout_ramp_epochs``.  Without it (a partition of
        :meth:`train_partition`), where the distributed trainer placed the partition in its plan
        (``set_schedule_plan``): the same anneal and ramp at the partition's place.
        """
        xp = self._xp
        n = int(data.shape[0])
        order = to_device(rng.permutation(n), xp)
        weights = [layer._W for layer in self.layers_]
        biases = [layer._hbias for layer in self.layers_]
        params = self._finetune_params()
        decayed = tuple(name for name in params if name.endswith(".W"))
        total = xp.zeros((), dtype=self._dtype)
        decay = 1.0 + self.finetune_lr_decay * self._schedule_passes(self._finetune_epochs_done)
        scale = getattr(self, "_learning_rate_scale", 1.0)  # set by the distributed trainer
        learning_rate = self.finetune_learning_rate / decay * scale
        anneal = self.finetune_anneal_fraction
        place = self._schedule_plan if planned is None else None  # a partition placed by the distributed trainer
        if planned is not None:
            dropout = self._dropout(self._schedule_passes(self._finetune_epochs_done))
        else:  # the ramp counts the fit's epochs where the partition starts (fit: its epoch's number)
            dropout = self._dropout(None if place is None else place.epoch)
        generator = _cd.device_generator(rng, xp) if dropout else None
        precision = getattr(self, "_precision", "float32")
        for start, X_batch, y_batch in _finetune.shuffled_minibatches(data, labels, order, self.batch_size):
            if place is None:
                factor = anneal_factor(planned, start / n, anneal)
            else:
                factor = anneal_factor(place.progress(start / n), 0.0, anneal)
            self._updater.learning_rate = learning_rate * factor
            inputs, activations = _finetune.forward(X_batch, weights, biases, dropout, generator, precision)
            _, grad_W, grad_b, grad_out_W, grad_out_b = _finetune.cross_entropy_backward(
                inputs, activations, weights, self._out_W, self._out_b, y_batch, total=total, precision=precision
            )
            grads = {"out.W": grad_out_W, "out.b": grad_out_b}
            for k in range(len(weights)):
                grads[f"rbm{k}.W"], grads[f"rbm{k}.hbias"] = grad_W[k], grad_b[k]
            self._updater.step(params, grads, decay=decayed)
            self._after_minibatch()
        self._finetune_epochs_done += 1
        check_finite_parameters(params, where=f"DBN fine-tuning epoch {self._finetune_epochs_done}")
        return float(total) / n

    def _finetune(self, X: np.ndarray, indices: np.ndarray) -> None:
        train, valid = np.arange(len(X)), None
        if self.early_stopping:
            train, valid = train_test_indices(indices, self.validation_fraction, int(self._rng.integers(2**31)))
            if len(valid) == 0 or len(train) == 0:
                raise ValueError("validation_fraction leaves no validation or no training rows")
        data, targets = to_device(X[train], self._xp), to_device(indices[train], self._xp)
        best_score, best_params, stale = -1.0, None, 0
        for epoch in range(self.finetune_epochs):
            started = time.perf_counter()
            loss = self._finetune_pass(data, targets, self._rng, planned=(epoch, self.finetune_epochs))
            score = None
            if valid is not None:
                score = float(np.mean(self._predict_index(to_device(X[valid], self._xp)) == indices[valid]))
            if self.verbose:  # the loss is the mean training cross-entropy, as in MLPClassifier's lines
                validation = "" if score is None else f", validation score = {score:.4f}"
                seconds = time.perf_counter() - started
                print_iteration("DBN finetune", epoch + 1, f"loss = {loss:.6f}{validation}", seconds)
            if score is None:
                continue
            if score > best_score:
                best_score, best_params, stale = score, self.parameters("finetune"), 0
            else:
                stale += 1
                if stale >= self.n_iter_no_change:
                    break
        if best_params is not None:
            self.set_parameters(best_params)

    def _predict_index(self, data: Any) -> np.ndarray:
        return to_host(self._logits(data).argmax(axis=1))

    def _logits(self, data: Any) -> Any:
        top = self._propagate(data, len(self.layers_))
        logits = top @ self._out_W
        logits += self._out_b
        return logits
