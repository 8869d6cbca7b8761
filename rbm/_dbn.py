"""Deep belief nets: greedy layer-wise RBM pretraining, then supervised fine-tuning.

A :class:`DBN` is a stack of :class:`~rbm.RBM` layers.  Phase ``rbmK`` trains layer K on
the data transformed through layers < K; phase ``finetune`` unrolls the stack into a
feed-forward net (sigmoid layers initialized from the RBMs' weights and hidden biases,
plus a softmax output) and trains it by backpropagation with SGD, momentum and L2.
:meth:`DBN.fit` runs exactly the per-phase steps the distributed trainer calls through
:meth:`DBN.train_partition`.
"""

from __future__ import annotations

import logging
import math
from numbers import Integral
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError

from . import _finetune
from ._backend import array_module, check_dtype, make_rng, resolve_device, to_device, to_host
from ._dbn_seam import DBNSeam
from ._model import register_model
from ._params import check_integer, check_number
from ._rbm import RBM, VISIBLE_UNITS
from ._updaters import SGD
from ._validation import check_features, check_finite_parameters

__all__ = ["DBN"]

logger = logging.getLogger(__name__)

# Hyperparameters a per-layer override may set (the rest are fixed by the DBN).
LAYER_OVERRIDES = frozenset(RBM._get_param_names()) - {"n_components", "device", "dtype", "random_state"}


@register_model("dbn")
class DBN(DBNSeam, ClassifierMixin, BaseEstimator):
    """Deep belief net classifier: stacked RBMs, pretrained greedily, fine-tuned by backprop.

    Parameters
    ----------
    hidden_layer_sizes : sequence of int
        Hidden units of each RBM, bottom to top.
    visible : {"bernoulli", "gaussian"}
        Visible units of the first RBM (upper RBMs see probabilities in [0, 1]).
    layer_params : list of dict or None, optional
        One dict (or None) per layer overriding that layer's RBM hyperparameters, e.g.
        ``[{"learning_rate": 0.01, "visible": "gaussian"}, None, {"n_iter": 5}]``.
    pretrain_learning_rate, pretrain_epochs : float, int
        Default RBM learning rate and passes (``n_iter``) per layer.
    batch_size : int
        Minibatch rows for pretraining and fine-tuning.
    finetune_learning_rate, finetune_momentum, finetune_epochs : float, float, int
        SGD with momentum for the supervised phase.
    finetune_lr_decay : float
        The fine-tuning learning rate of pass ``t`` (counted from 0: epochs of :meth:`fit`,
        calls of :meth:`train_partition`) is ``finetune_learning_rate / (1 + decay * t)``.
    l2 : float
        L2 penalty on the weights during fine-tuning.
    early_stopping : bool
        Hold out ``validation_fraction`` of the labelled rows (stratified) and stop
        fine-tuning after ``n_iter_no_change`` epochs without a better validation
        accuracy; the best weights are kept.
    device, dtype, random_state, verbose
        As for :class:`~rbm.RBM`.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    layers_ : list of RBM
    """

    def __init__(
        self,
        hidden_layer_sizes: Any = (500, 500, 2000),
        *,
        visible: str = "bernoulli",
        layer_params: list | None = None,
        pretrain_learning_rate: float = 0.1,
        pretrain_epochs: int = 10,
        batch_size: int = 10,
        finetune_learning_rate: float = 0.05,
        finetune_momentum: float = 0.9,
        finetune_epochs: int = 20,
        finetune_lr_decay: float = 0.1,
        l2: float = 1e-4,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 5,
        device: str = "cpu",
        dtype: Any = np.float32,
        random_state: Any = None,
        verbose: int = 0,
    ) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.visible = visible
        self.layer_params = layer_params
        self.pretrain_learning_rate = pretrain_learning_rate
        self.pretrain_epochs = pretrain_epochs
        self.batch_size = batch_size
        self.finetune_learning_rate = finetune_learning_rate
        self.finetune_momentum = finetune_momentum
        self.finetune_epochs = finetune_epochs
        self.finetune_lr_decay = finetune_lr_decay
        self.l2 = l2
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ validation
    def _check_params(self) -> None:
        sizes = self.hidden_layer_sizes
        if isinstance(sizes, (int, np.integer)):
            sizes = (sizes,)
        if (
            not isinstance(sizes, (list, tuple))
            or not sizes
            or any(isinstance(s, bool) or not isinstance(s, Integral) or s < 1 for s in sizes)
        ):
            raise ValueError(f"hidden_layer_sizes must be a non-empty sequence of integers >= 1, got {sizes!r}")
        for name, low in (("pretrain_epochs", 0), ("finetune_epochs", 0), ("batch_size", 1), ("n_iter_no_change", 1)):
            check_integer(name, getattr(self, name), low)
        check_number("pretrain_learning_rate", self.pretrain_learning_rate, 0.0, low_open=True)
        check_number("finetune_learning_rate", self.finetune_learning_rate, 0.0, low_open=True)
        check_number("validation_fraction", self.validation_fraction, 0.0, 1.0, low_open=True)
        check_number("finetune_momentum", self.finetune_momentum, 0.0, 1.0)
        check_number("finetune_lr_decay", self.finetune_lr_decay, 0.0)
        check_number("l2", self.l2, 0.0)
        if self.visible not in VISIBLE_UNITS:
            raise ValueError(f"visible must be one of {VISIBLE_UNITS}, got {self.visible!r}")
        overrides = self.layer_params
        if overrides is not None:
            if not isinstance(overrides, (list, tuple)) or len(overrides) != len(sizes):
                raise ValueError(
                    f"layer_params must be a list with one dict (or None) per layer ({len(sizes)}), got {overrides!r}"
                )
            for k, entry in enumerate(overrides):
                unknown = sorted(set(entry or {}) - LAYER_OVERRIDES)
                if unknown:
                    raise ValueError(f"layer_params[{k}] has unknown keys {unknown}; allowed: {sorted(LAYER_OVERRIDES)}")
        check_dtype(self.dtype)
        resolve_device(self.device)

    def _sizes(self) -> tuple[int, ...]:
        sizes = self.hidden_layer_sizes
        return (int(sizes),) if isinstance(sizes, (int, np.integer)) else tuple(int(s) for s in sizes)

    def __sklearn_is_fitted__(self) -> bool:
        return getattr(self, "layers_", None) is not None

    def _require(self, classes: bool = False) -> None:
        if not self.__sklearn_is_fitted__():
            raise NotFittedError("this DBN is not fitted yet; call fit, pretrain or initialize first")
        if classes and self._out_W is None:
            raise NotFittedError("this DBN has no output layer yet; call fit, or initialize(n_features, classes)")

    # ------------------------------------------------------------------ state
    def initialize(self, n_features: int, classes: Any = None) -> "DBN":
        """Allocate every layer for ``n_features`` inputs and, when given, the output layer.

        ``classes``: the number of classes (labels ``0 .. classes - 1``) or the labels.
        Idempotent for the same width and classes.
        """
        self._check_params()
        if not (self.__sklearn_is_fitted__() and self.n_features_in_ == n_features):
            self._allocate_layers(int(n_features), make_rng(self.random_state))
        if classes is not None:
            labels = np.arange(int(classes)) if isinstance(classes, (int, np.integer)) else np.unique(np.asarray(classes))
            if len(labels) < 2:
                raise ValueError(f"a classifier needs at least 2 classes, got {labels.tolist()}")
            if getattr(self, "classes_", None) is None or not np.array_equal(labels, self.classes_):
                self._allocate_output(labels)
        return self

    def _allocate_layers(self, n_features: int, rng: np.random.Generator) -> None:
        self._dtype = check_dtype(self.dtype)
        self._xp = array_module(self.device)
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
            )
            layer.set_params(**(extra or {}))
            self.layers_.append(layer.initialize(width))
            width = size
        self.classes_: np.ndarray | None = None
        self._out_W = self._out_b = None
        self._updater = SGD(self.finetune_learning_rate, momentum=self.finetune_momentum, l2=self.l2)
        self._finetune_epochs_done = 0

    def _allocate_output(self, labels: np.ndarray) -> None:
        n_in, n_out = self._sizes()[-1], len(labels)
        limit = math.sqrt(6.0 / (n_in + n_out))  # Glorot-uniform
        self._out_W = to_device(self._rng.uniform(-limit, limit, size=(n_in, n_out)), self._xp, self._dtype)
        self._out_b = self._xp.zeros(n_out, dtype=self._dtype)
        self.classes_ = labels
        self._updater.reset()

    def _encode(self, y: Any, n_samples: int) -> np.ndarray:
        """Class indices of labels ``y``; a clear error for labels outside ``classes_``."""
        labels = np.asarray(y)
        if labels.ndim != 1 or len(labels) != n_samples:
            raise ValueError(f"y must be 1-D with one label per sample ({n_samples}), got shape {labels.shape}")
        index = np.clip(np.searchsorted(self.classes_, labels), 0, len(self.classes_) - 1)
        bad = self.classes_[index] != labels
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            known = self.classes_.tolist()
            shown = known if len(known) <= 12 else known[:6] + ["..."] + known[-3:]
            raise ValueError(
                f"y has label {labels[row].item()!r} at row {row}, outside the class range of this "
                f"model ({shown})"
            )
        return index.astype(np.int64)

    def _check_X(self, X: Any, fitted: bool = True) -> np.ndarray:
        return check_features(
            X, self.n_features_in_ if fitted else None, dtype=check_dtype(self.dtype),
            bernoulli=self.visible == "bernoulli",
        )

    # ------------------------------------------------------------------ phases
    def _propagate(self, data: Any, n_layers: int) -> Any:
        """Hidden probabilities after the first ``n_layers`` layers (device arrays)."""
        for layer in self.layers_[:n_layers]:
            data = layer._mean_hiddens(data)
        return data

    def _finetune_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for k, layer in enumerate(self.layers_):
            params[f"rbm{k}.W"], params[f"rbm{k}.hbias"] = layer._W, layer._hbias
        params["out.W"], params["out.b"] = self._out_W, self._out_b
        return params

    def _finetune_pass(self, data: Any, labels: Any, rng: np.random.Generator) -> float:
        """One shuffled epoch of backprop on device arrays; returns the mean cross-entropy."""
        xp = self._xp
        n = int(data.shape[0])
        order = to_device(rng.permutation(n), xp)
        weights = [layer._W for layer in self.layers_]
        biases = [layer._hbias for layer in self.layers_]
        params = self._finetune_params()
        decayed = tuple(name for name in params if name.endswith(".W"))
        total = xp.zeros((), dtype=self._dtype)
        decay = 1.0 + self.finetune_lr_decay * self._finetune_epochs_done
        self._updater.learning_rate = self.finetune_learning_rate / decay
        for start in range(0, n, self.batch_size):
            rows = order[start : start + self.batch_size]
            activations = _finetune.forward(xp.take(data, rows, axis=0), weights, biases)
            loss, grad_W, grad_b, grad_out_W, grad_out_b = _finetune.cross_entropy_backward(
                activations, weights, self._out_W, self._out_b, xp.take(labels, rows)
            )
            grads = {"out.W": grad_out_W, "out.b": grad_out_b}
            for k in range(len(weights)):
                grads[f"rbm{k}.W"], grads[f"rbm{k}.hbias"] = grad_W[k], grad_b[k]
            self._updater.step(params, grads, decay=decayed)
            total += loss * len(rows)
        self._finetune_epochs_done += 1
        check_finite_parameters(params, where=f"DBN fine-tuning epoch {self._finetune_epochs_done}")
        return float(total) / n

    # ------------------------------------------------------------------ scikit-learn API
    def pretrain(self, X: Any, y: Any = None) -> "DBN":
        """Greedy layer-wise pretraining: each RBM for its ``n_iter`` passes, bottom up."""
        if not self.__sklearn_is_fitted__():
            X = self._check_X(X, fitted=False)
            self.initialize(X.shape[1])
        else:
            X = self._check_X(X)
        data = to_device(X, self._xp)
        for k, layer in enumerate(self.layers_):
            for _ in range(layer.n_iter):
                loss = layer._train_pass(data, self._rng)
            if self.verbose and layer.n_iter:
                logger.info("DBN layer %d pretrained: reconstruction error %.6f", k, loss)
            data = layer._mean_hiddens(data) if k + 1 < len(self.layers_) else None
        return self

    def fit(self, X: Any, y: Any) -> "DBN":
        """Pretrain on ``X`` (n_samples, n_features), then fine-tune on labels ``y``."""
        self._check_params()
        X = self._check_X(X, fitted=False)
        if y is None:
            raise ValueError("DBN.fit needs labels y; use pretrain(X) for unsupervised training")
        labels = np.asarray(y)
        if labels.ndim != 1 or len(labels) != len(X):
            raise ValueError(f"y must be 1-D with one label per sample ({len(X)}), got shape {labels.shape}")
        self._allocate_layers(X.shape[1], make_rng(self.random_state))
        self.initialize(X.shape[1], classes=labels)
        self.pretrain(X)
        self.finetune(X, labels)
        return self

    def finetune(self, X: Any, y: Any) -> "DBN":
        """Supervised fine-tuning for ``finetune_epochs`` epochs (early stopping optional)."""
        self._require(classes=True)
        X = self._check_X(X)
        labels = self._encode(y, len(X))
        train, valid = np.arange(len(X)), None
        if self.early_stopping:
            from .datasets import train_test_indices

            train, valid = train_test_indices(labels, self.validation_fraction, int(self._rng.integers(2**31)))
            if len(valid) == 0 or len(train) == 0:
                raise ValueError("validation_fraction leaves no validation or no training rows")
        data, targets = to_device(X[train], self._xp), to_device(labels[train], self._xp)
        best_score, best_params, stale = -1.0, None, 0
        for epoch in range(self.finetune_epochs):
            loss = self._finetune_pass(data, targets, self._rng)
            if valid is None:
                if self.verbose:
                    logger.info("DBN fine-tuning epoch %d: cross-entropy %.5f", epoch + 1, loss)
                continue
            score = float(np.mean(self._predict_index(to_device(X[valid], self._xp)) == labels[valid]))
            if self.verbose:
                logger.info("DBN fine-tuning epoch %d: cross-entropy %.5f, validation accuracy %.4f", epoch + 1, loss, score)
            if score > best_score:
                best_score, best_params, stale = score, self.parameters("finetune"), 0
            else:
                stale += 1
                if stale >= self.n_iter_no_change:
                    break
        if best_params is not None:
            self.set_parameters(best_params)
        return self

    def _predict_index(self, data: Any) -> np.ndarray:
        return to_host(self._logits(data).argmax(axis=1))

    def _logits(self, data: Any) -> Any:
        top = self._propagate(data, len(self.layers_))
        logits = top @ self._out_W
        logits += self._out_b
        return logits

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, shape (n_samples, n_classes), columns ordered as ``classes_``."""
        self._require(classes=True)
        probabilities = _finetune.softmax_(self._logits(to_device(self._check_X(X), self._xp)))
        return to_host(probabilities).astype(self._out_dtype(X), copy=False)

    def predict(self, X: Any) -> np.ndarray:
        """Most probable class of each row, shape (n_samples,)."""
        self._require(classes=True)
        return self.classes_[self._predict_index(to_device(self._check_X(X), self._xp))]

    def transform(self, X: Any) -> np.ndarray:
        """Top hidden layer probabilities, shape (n_samples, hidden_layer_sizes[-1])."""
        self._require()
        top = self._propagate(to_device(self._check_X(X), self._xp), len(self.layers_))
        return to_host(top).astype(self._out_dtype(X), copy=False)

    def _out_dtype(self, X: Any) -> np.dtype:
        dtype = np.asarray(X).dtype
        return dtype if dtype in (np.float32, np.float64) else check_dtype(self.dtype)
