"""Deep belief nets: greedy layer-wise RBM pretraining, then supervised fine-tuning.

A :class:`DBN` is a stack of :class:`~rbm.RBM` layers.  Phase ``rbmK`` trains layer K on
the data transformed through layers < K; phase ``finetune`` unrolls the stack into a
feed-forward net (sigmoid layers initialized from the RBMs' weights and hidden biases,
plus a softmax output) and trains it by backpropagation (SGD with momentum, Adagrad or Adam;
L2 and dropout).
:meth:`DBN.fit` runs exactly the per-phase steps the distributed trainer calls through
:meth:`DBN.train_partition`; what belongs to a planned fit -- the anneal of the fine-tuning rate
over its last epochs and the dropout ramp over its first (``finetune_anneal_fraction``,
``finetune_dropout_ramp_epochs``) -- ``train_partition`` takes from where the trainer places each
partition in the phase's plan (``set_schedule_plan``).
"""

from __future__ import annotations

import math
import time
from numbers import Integral
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils import Tags
from sklearn.utils.validation import validate_data

from .._backend import NamespacePickling, array_module, check_dtype, make_rng, resolve_device, to_device, to_host
from .._classes import check_length, check_targets, encode_labels, resolve_classes
from .._gpu import check_precision, effective_precision
from .._model import print_iteration, register_model
from .._params import check_integer, check_number
from .._updaters import Updater, anneal_factor, make_updater
from .._validation import (check_features, check_finite_parameters, check_width, log_probabilities, output_dtype,
                           probabilities_as)
from ..datasets import train_test_indices
from . import _cd, _finetune
from ._dbn_seam import DBNSeam
from ._rbm import RBM, VISIBLE_UNITS

__all__ = ["DBN"]

# Hyperparameters a per-layer override may set (the rest are fixed by the DBN).
# (``anneal_fraction`` is not one: it shapes ``RBM.fit``, and the DBN runs the passes itself.)
LAYER_OVERRIDES = frozenset(RBM._get_param_names()) - {"n_components", "device", "dtype", "precision",
                                                       "random_state", "anneal_fraction"}
# How the DBN pretrains its RBMs unless ``layer_params`` says otherwise: CD-1 with a momentum
# schedule, which pretrained better for fine-tuning here than the RBM's own defaults (persistent
# CD without momentum, the best for RBM features alone; docs/models.md), from BernoulliRBM's
# initial weight spread 0.01, with which the DBN's defaults were tuned.
PRETRAIN_LAYER_DEFAULTS = {"persistent": False, "momentum": 0.5, "final_momentum": 0.9, "weight_init_std": 0.01}


@register_model("dbn")
class DBN(DBNSeam, NamespacePickling, ClassifierMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
          BaseEstimator):
    """Deep belief net classifier: stacked RBMs, pretrained greedily, fine-tuned by backprop.

    The fine-tuning defaults (100 epochs of SGD with momentum at 0.1, decaying as
    ``1 / (1 + 0.1 t)``, dropout 0.3 on the hidden units) were tuned on a validation split
    of the digits (docs/models.md, Defaults and quality): a 64-256-256 DBN then beats a plain
    ``MLPClassifier((256, 256))``.  So that a fit of a few epochs over many rows (where the
    per-epoch decay has barely begun) does as well, :meth:`fit` lowers the fine-tuning rate
    linearly to zero over the last half of its updates, and dropout grows from 0 over the
    first 10 epochs (see ``finetune_anneal_fraction``, ``finetune_dropout_ramp_epochs`` and
    docs/quality.md).

    Parameters
    ----------
    hidden_layer_sizes : sequence of int
        Hidden units of each RBM, bottom to top.
    visible : {"bernoulli", "gaussian"}
        Visible units of the first RBM (upper RBMs see probabilities in [0, 1]).
    layer_params : list of dict or None, optional
        One dict (or None) per layer overriding that layer's RBM hyperparameters, e.g.
        ``[{"learning_rate": 0.01, "visible": "gaussian"}, None, {"n_iter": 5}]``.
    pretrain_learning_rate : float
        Default RBM learning rate of each layer's pretraining.
    pretrain_epochs : int
        Default RBM passes (``n_iter``) of each layer's pretraining.
    batch_size : int
        Minibatch rows for pretraining and fine-tuning.
    finetune_learning_rate : float
        Learning rate of the supervised phase.
    finetune_momentum : float
        Momentum of the supervised phase (SGD only).
    finetune_epochs : int
        Passes of the supervised phase.
    finetune_lr_decay : float
        The fine-tuning learning rate of pass ``t`` (counted from 0: epochs of :meth:`fit`,
        calls of :meth:`train_partition`, or the distributed trainer's epoch, which it sets
        with ``set_schedule_epoch``) is ``finetune_learning_rate / (1 + decay * t)``.
    finetune_anneal_fraction : float in [0, 1]
        :meth:`fit` (and :meth:`finetune`) multiply that rate by a factor that is 1 for the first
        ``1 - finetune_anneal_fraction`` of the planned fine-tuning updates, then falls linearly
        towards 0 (0: no anneal).  The decay above counts epochs, whatever their size: a few epochs
        over many rows leave the rate near its start, and with dropout's noise the net ends
        unsettled (see docs/quality.md).  :meth:`train_partition` does not know how many passes
        follow: it anneals where the distributed trainer placed its partition in the phase's plan
        (``set_schedule_plan``), else keeps the factor 1.
    finetune_dropout : float
        Fraction of hidden units dropped (inverted dropout) in each fine-tuning minibatch.
    finetune_dropout_ramp_epochs : float
        In :meth:`fit` (and :meth:`finetune`) the fraction dropped grows linearly from 0 to
        ``finetune_dropout`` over this many fine-tuning epochs (counted as the decay counts them;
        0: ``finetune_dropout`` from the start).  Dropout guards against overfitting, which comes
        with repeated passes over the same rows; in the first passes it only slows the fit
        ("curriculum dropout", Morerio et al., 2017).  Like the anneal it belongs to a planned fit:
        :meth:`train_partition` ramps at the fit's epoch where the distributed trainer placed its
        partition (``set_schedule_plan``), else drops ``finetune_dropout`` from the start.
    finetune_updater : {"sgd", "adagrad", "adam"}
        The fine-tuning updater.
    l2 : float
        L2 penalty on the weights during fine-tuning.
    early_stopping : bool
        Hold out ``validation_fraction`` of the labelled rows (stratified) and stop
        fine-tuning after ``n_iter_no_change`` epochs without a better validation
        accuracy; the best weights are kept.
    device : {"cpu", "gpu", "auto"}
        numpy on the CPU, cupy on the GPU, as for :class:`~rbm.RBM`.
    dtype : float32 or float64
        Precision of parameters and arithmetic, as for :class:`~rbm.RBM`.
    precision : {"float32", "tf32", "bfloat16"}
        Of the GEMMs on a GPU, as for :class:`~rbm.RBM`; it applies to pretraining and fine-tuning alike.
    random_state : None, int or numpy Generator
        Seeds every layer's RBM and the fine-tuning, as for :class:`~rbm.RBM`.
    verbose : int
        When > 0, :meth:`fit` (and :meth:`pretrain`, :meth:`finetune`) print a line per pass to
        stdout: ``[DBN rbm0] Iteration 1, reconstruction error = 0.012345, time = 1.23s`` for each
        layer's passes (named as :meth:`phases`), ``[DBN finetune] Iteration 1, loss = 0.123456,
        time = 0.52s`` for fine-tuning (with ``, validation score = 0.9812`` under early stopping).

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
        finetune_learning_rate: float = 0.1,
        finetune_momentum: float = 0.9,
        finetune_epochs: int = 100,
        finetune_lr_decay: float = 0.1,
        finetune_anneal_fraction: float = 0.5,
        finetune_dropout: float = 0.3,
        finetune_dropout_ramp_epochs: float = 10.0,
        finetune_updater: str = "sgd",
        l2: float = 1e-4,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 5,
        device: str = "cpu",
        dtype: Any = np.float32,
        precision: str = "float32",
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
        self.finetune_anneal_fraction = finetune_anneal_fraction
        self.finetune_dropout = finetune_dropout
        self.finetune_dropout_ramp_epochs = finetune_dropout_ramp_epochs
        self.finetune_updater = finetune_updater
        self.l2 = l2
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.device = device
        self.dtype = dtype
        self.precision = precision
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
        check_number("finetune_anneal_fraction", self.finetune_anneal_fraction, 0.0, 1.0, high_open=False)
        check_number("finetune_dropout", self.finetune_dropout, 0.0, 1.0)
        check_number("finetune_dropout_ramp_epochs", self.finetune_dropout_ramp_epochs, 0.0)
        check_number("l2", self.l2, 0.0)
        self._make_updater()  # validates finetune_updater
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
        check_precision(self.precision, self.device, self.dtype, type(self).__name__)
        resolve_device(self.device)

    def _make_updater(self) -> Updater:
        settings: dict[str, Any] = {"learning_rate": self.finetune_learning_rate, "l2": self.l2}
        if self.finetune_updater == "sgd":
            settings["momentum"] = self.finetune_momentum
        return make_updater(self.finetune_updater, **settings)

    def _sizes(self) -> tuple[int, ...]:
        sizes = self.hidden_layer_sizes
        return (int(sizes),) if isinstance(sizes, (int, np.integer)) else tuple(int(s) for s in sizes)

    def spec_for_batch_size(self, batch_size: int) -> dict:
        """This DBN's spec with minibatches of ``batch_size`` rows; a layer pretrained with persistent
        chains keeps its chains (``n_chains``, by default the layer's ``batch_size``), as
        :meth:`RBM.spec_for_batch_size` does.  The distributed trainer's replicas train in it."""
        spec = {**self.to_spec(), "batch_size": int(batch_size)}
        overrides = [dict(entry or {}) for entry in (self.layer_params or [None] * len(self._sizes()))]
        kept = False
        for entry in overrides:
            persistent = entry.get("persistent", PRETRAIN_LAYER_DEFAULTS["persistent"])
            if persistent and entry.get("n_chains") is None:
                entry["n_chains"] = int(entry.get("batch_size", self.batch_size))
                kept = True
        if kept:
            spec["layer_params"] = [entry or None for entry in overrides]
        return spec

    def __sklearn_is_fitted__(self) -> bool:
        return getattr(self, "layers_", None) is not None

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = self.visible == "bernoulli"
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

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
        n_features = check_width(n_features, type(self).__name__)
        if not (self.__sklearn_is_fitted__() and self.n_features_in_ == n_features):
            self._allocate_layers(n_features, make_rng(self.random_state))
        if classes is not None:
            labels = resolve_classes(classes)
            if getattr(self, "classes_", None) is None or not np.array_equal(labels, self.classes_):
                self._allocate_output(labels)
        return self

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

    def _allocate_output(self, labels: np.ndarray) -> None:
        n_in, n_out = self._sizes()[-1], len(labels)
        limit = math.sqrt(6.0 / (n_in + n_out))  # Glorot-uniform
        self._out_W = to_device(self._rng.uniform(-limit, limit, size=(n_in, n_out)), self._xp, self._dtype)
        self._out_b = self._xp.zeros(n_out, dtype=self._dtype)
        self.classes_ = labels
        self._updater.reset()

    def _check_X(self, X: Any, *, reset: bool = False, training: bool = True) -> np.ndarray:
        """``X`` as a C-contiguous array of the model dtype (see :meth:`rbm.RBM._validate`).

        Training input of Bernoulli units must lie in [0, 1]; prediction accepts any finite
        values.  ``reset`` records ``n_features_in_`` (and feature names), else checks them.
        """
        array = check_features(
            X, dtype=check_dtype(self.dtype), bernoulli=training and self.visible == "bernoulli",
            model=type(self).__name__, allow_nd=False,
        )
        if reset or self.__sklearn_is_fitted__():
            validate_data(self, X, reset=reset, skip_check_array=True)
        return array

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

    # ------------------------------------------------------------------ scikit-learn API
    def pretrain(self, X: Any, y: Any = None) -> "DBN":
        """Greedy layer-wise pretraining: each RBM for its ``n_iter`` passes, bottom up."""
        self._pretrain(self._prepare(X))
        return self

    def _prepare(self, X: Any) -> np.ndarray:
        """Validate training input ``X``; allocate the layers from its width on first use."""
        if self.__sklearn_is_fitted__():
            return self._check_X(X)
        self._check_params()
        X = self._check_X(X, reset=True)
        self.initialize(X.shape[1])
        return X

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

    def fit(self, X: Any, y: Any) -> "DBN":
        """Pretrain on ``X`` (n_samples, n_features), then fine-tune on labels ``y`` (any sortable kind)."""
        self._check_params()
        labels = check_targets(y, type(self).__name__)
        X = self._check_X(X, reset=True)
        check_length(labels, len(X))
        self._allocate_layers(X.shape[1], make_rng(self.random_state))
        self.initialize(X.shape[1], classes=labels)
        self._pretrain(X)
        self._finetune(X, encode_labels(labels, self.classes_, len(X)))
        return self

    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> "DBN":
        """One fine-tuning pass over ``(X, y)``, allocating the layers first if needed (no pretraining).

        ``classes`` (every label that will ever occur) must be given on the first call that finds no
        output layer, as scikit-learn's ``partial_fit`` asks; later calls may repeat it. Call
        :meth:`pretrain` first for a pretrained start. Each call is one pass of the fine-tuning
        schedule (``finetune_lr_decay`` counts it as :meth:`finetune` counts an epoch); the anneal and
        the dropout ramp, which need a planned number of epochs, do not apply: dropout is
        ``finetune_dropout``, as in :meth:`train_partition` without a plan.
        """
        X = self._prepare(X)
        labels = check_targets(y, type(self).__name__)
        check_length(labels, len(X))
        if self._out_W is None and classes is None:
            raise ValueError("DBN.partial_fit: pass classes (every label that will occur) on the first call; "
                             "this DBN has no output layer yet")
        if classes is not None:
            if self._out_W is not None and not np.array_equal(resolve_classes(classes), self.classes_):
                raise ValueError(f"DBN.partial_fit: classes {resolve_classes(classes).tolist()} differ from the "
                                 f"classes of the first call, {self.classes_.tolist()}")
            self.initialize(X.shape[1], classes=classes)
        indices = encode_labels(labels, self.classes_, len(X))
        self._finetune_pass(to_device(X, self._xp), to_device(indices, self._xp), self._rng)
        return self

    def finetune(self, X: Any, y: Any) -> "DBN":
        """Supervised fine-tuning on labels ``y`` for ``finetune_epochs`` epochs (early stopping optional)."""
        self._require(classes=True)
        X = self._check_X(X)
        self._finetune(X, encode_labels(y, self.classes_, len(X)))
        return self

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

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, shape (n_samples, n_classes), columns ordered as ``classes_``."""
        self._require(classes=True)
        probabilities = _finetune.softmax_(self._logits(to_device(self._check_X(X, training=False), self._xp)))
        return probabilities_as(to_host(probabilities), output_dtype(X))

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """Natural log of :meth:`predict_proba`, shape (n_samples, n_classes), columns ordered as ``classes_``
        (``-inf`` where a probability is 0, as scikit-learn's classifiers give it)."""
        return log_probabilities(self.predict_proba(X))

    def predict(self, X: Any) -> np.ndarray:
        """Most probable class label of each row, shape (n_samples,)."""
        self._require(classes=True)
        return self.classes_[self._predict_index(to_device(self._check_X(X, training=False), self._xp))]

    @property
    def _n_features_out(self) -> int:  # get_feature_names_out: dbn0 .. dbn<k-1>, and so set_output
        layers = getattr(self, "layers_", None)
        return int(layers[-1].n_components) if layers else int(self.hidden_layer_sizes[-1])

    def transform(self, X: Any) -> np.ndarray:
        """Top hidden layer probabilities, shape (n_samples, hidden_layer_sizes[-1])."""
        self._require()
        top = self._propagate(to_device(self._check_X(X, training=False), self._xp), len(self.layers_))
        return to_host(top).astype(output_dtype(X), copy=False)
