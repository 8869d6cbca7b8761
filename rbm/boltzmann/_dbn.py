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

This module holds the estimator itself, its scikit-learn face (``fit``, ``predict``, ``transform``
...); its parts are mixins: the hyperparameter checks in :mod:`._dbn_params`, the RBM stack and its
pretraining in :mod:`._dbn_pretrain`, fine-tuning in :mod:`._dbn_finetune`, the distributed
trainer's seam and save/load in :mod:`._dbn_seam`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils import Tags
from sklearn.utils.validation import validate_data

from .._backend import NamespacePickling, check_dtype, make_rng, to_device, to_host
from .._classes import check_length, check_targets, encode_labels, resolve_classes
from .._model import register_model
from .._validation import check_features, check_width, log_probabilities, output_dtype, probabilities_as
from . import _finetune
from ._dbn_finetune import DBNFineTuning
from ._dbn_params import DBNParams
from ._dbn_pretrain import PRETRAIN_LAYER_DEFAULTS, DBNStack
from ._dbn_seam import DBNSeam

__all__ = ["DBN"]


@register_model("dbn")
class DBN(DBNSeam, DBNParams, DBNStack, DBNFineTuning, NamespacePickling, ClassifierMixin,
          ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
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
