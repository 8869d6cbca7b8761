"""A sequential convolutional net (LeNet and friends) on numpy or cupy, scikit-learn style.

The net is a list of layer specs; shapes flow from the input shape through each layer,
and a dense output layer of ``len(classes_)`` units with softmax + cross-entropy is
appended (named ``"out"``).  A flatten is inserted where a dense layer follows a spatial
one.  Parameters are named ``"<layer>.<W|b>"`` with layer names counted per type
(``"conv0.W"``, ``"conv1.b"``, ``"dense0.W"``, ``"out.W"``).

The distributed trainer drives it through the seam (:mod:`._convnet_seam`, single phase
``"train"``); optimizer state (momentum, Adagrad, Adam moments) stays in the object and is
never exchanged.
"""

from __future__ import annotations

import logging
import time
from types import ModuleType
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import validate_data

from .._backend import NamespacePickling, array_module, check_dtype, make_rng, resolve_device, to_device, to_host
from .._classes import check_length, check_targets, encode_labels, resolve_classes
from .._gpu import check_precision, effective_precision, fused_ops
from .._model import print_iteration, register_model
from .._params import check_integer, check_number
from .._updaters import Updater, make_updater
from .._validation import DivergenceError, check_features, check_finite_parameters, log_probabilities, probabilities_as
from ._convnet_seam import ConvNetSeam
from ._layers import Conv2D, Dense, Dropout, Layer, build_layer
from ._ops import softmax_cross_entropy
from ._spec import LENET_LAYERS

__all__ = ["ConvNet", "lenet"]

logger = logging.getLogger(__name__)

PREDICT_CHUNK = 256  # samples per forward pass at prediction time (bounds im2col memory)


@register_model("convnet")
class ConvNet(ConvNetSeam, NamespacePickling, ClassifierMixin, BaseEstimator):
    """A sequential conv net trained with minibatch gradient descent and softmax cross-entropy.

    Parameters
    ----------
    layers : list of dict, optional
        Hidden layers, e.g. ``{"type": "conv", "filters": 20, "kernel": 5, "stride": 1,
        "padding": 0, "activation": "identity", "init": "xavier"}``,
        ``{"type": "maxpool" | "avgpool", "size": 2, "stride": None, "padding": 0}``,
        ``{"type": "dense", "units": 500, "activation": "relu", "init": "he"}``,
        ``{"type": "relu" | "sigmoid" | "tanh" | "identity"}``, ``{"type": "dropout",
        "rate": 0.5}``, ``{"type": "flatten"}``.  Default (None): LeNet's (:data:`LENET_LAYERS`).
        ``init`` defaults to He for ReLU layers and Xavier otherwise.  A conv or pooling layer's output
        side is ``floor((side + 2 * padding - size) / stride) + 1``: rows and columns left over past the
        last whole window are dropped (an 11 x 11 input max-pooled by 2 gives 5 x 5), as in DL4J and PyTorch.
    input_shape : tuple of int or None
        Per-sample shape ``(C, H, W)``; inputs may also arrive flat, ``(n, C*H*W)``.  None:
        taken from the data at fit (flat input then gives a flat net: dense layers only).
    n_classes : int
        Number of classes when none are given otherwise (``initialize`` without ``classes``,
        the first ``partial_fit`` without ``classes``): labels ``0 .. n_classes - 1``.
        ``fit`` takes the classes from ``y``.
    updater : {"sgd", "adagrad", "adam"}
    learning_rate : float
        Step size of the updater.
    momentum : float
        Momentum of the SGD updater (the others ignore it).
    nesterov : bool
        Nesterov momentum for the SGD updater (the others ignore it).
    l2 : float
        L2 penalty's weight; it decays weights, not biases.
    lr_decay : float
        The learning rate of pass ``t`` (counted from 0: epochs of :meth:`fit`, calls of
        :meth:`partial_fit` or :meth:`train_partition`, or the distributed trainer's epoch, which
        it sets with ``set_schedule_epoch``) is ``learning_rate / (1 + lr_decay * t)``.
    batch_size : int
        Minibatch rows.
    epochs : int
        Passes over the data of :meth:`fit`.
    device : {"cpu", "gpu", "auto"}
    dtype : {"float32", "float64"}
    precision : {"float32", "tf32", "bfloat16"}
        Of the GEMMs and convolutions on a GPU (tensor cores; float32 nets only).  Refused with
        ``device="cpu"``; ignored (float32) when ``device="auto"`` lands on the CPU.
    random_state : int, Generator or None
        Seeds initialization, shuffling and dropout: the same seed gives the same net.
    verbose : bool
        :meth:`fit` prints a line per epoch to stdout, ``[ConvNet] Iteration 1, loss = 0.123456,
        time = 3.21s`` (the mean training cross-entropy, as scikit-learn's ``MLPClassifier``).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    input_shape_ : tuple of int
    n_features_in_ : int
        ``prod(input_shape_)``.
    layers_ : list of Layer
    loss_curve_ : list of float
        Mean training cross-entropy of each pass.
    """

    _TRANSIENT = ("_resident_data",)  # the GPU copy of the training data: not pickled

    def __init__(self, layers: Sequence[dict] | None = None, input_shape: Sequence[int] | None = (1, 28, 28),
                 n_classes: int = 10, updater: str = "sgd", learning_rate: float = 0.01, momentum: float = 0.9,
                 nesterov: bool = False, l2: float = 0.0, lr_decay: float = 0.0, batch_size: int = 64,
                 epochs: int = 10, device: str = "cpu", dtype: Any = "float32", precision: str = "float32",
                 random_state: Any = None, verbose: bool = False) -> None:
        self.layers = layers
        self.input_shape = input_shape
        self.n_classes = n_classes
        self.updater = updater
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.nesterov = nesterov
        self.l2 = l2
        self.lr_decay = lr_decay
        self.batch_size = batch_size
        self.epochs = epochs
        self.device = device
        self.dtype = dtype
        self.precision = precision
        self.random_state = random_state
        self.verbose = verbose

    # -- checks and construction -------------------------------------------------------------
    def _check_settings(self) -> None:
        if self.input_shape is not None:
            shape = tuple(self.input_shape)
            if not shape or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in shape):
                raise ValueError(f"input_shape must be None or a tuple of positive ints, got {self.input_shape!r}")
        check_integer("n_classes", self.n_classes, 2)
        check_integer("batch_size", self.batch_size, 1)
        check_integer("epochs", self.epochs, 0)
        check_number("lr_decay", self.lr_decay, 0.0)
        check_dtype(self.dtype)
        check_precision(self.precision, self.device, self.dtype, "ConvNet")
        self._make_updater()  # validates the updater's name and settings

    def _make_updater(self) -> Updater:
        settings: dict[str, Any] = {"learning_rate": self.learning_rate, "l2": self.l2}
        if self.updater == "sgd":
            settings.update(momentum=self.momentum, nesterov=self.nesterov)
        return make_updater(self.updater, **settings)

    def _build(self, xp: ModuleType, input_shape: tuple[int, ...], n_classes: int) -> list[Layer]:
        """Layers for ``input_shape``; an invalid spec fails here, before any parameter is drawn."""
        dtype, shape, counts, layers = check_dtype(self.dtype), input_shape, {}, []
        hidden = LENET_LAYERS if self.layers is None else self.layers
        specs = [*hidden, {"type": "dense", "units": int(n_classes), "activation": "identity"}]
        for index, spec in enumerate(specs):
            kind = spec.get("type") if isinstance(spec, dict) else None
            kind = kind if isinstance(kind, str) else "layer"  # named in the error build_layer raises
            if kind == "dense" and len(shape) > 1:
                layers.append(build_layer(f"flatten{counts.get('flatten', 0)}", {"type": "flatten"}, shape, xp, dtype))
                counts["flatten"] = counts.get("flatten", 0) + 1
                shape = layers[-1].output_shape
            name = "out" if index == len(specs) - 1 else f"{kind}{counts.get(kind, 0)}"
            counts[kind] = counts.get(kind, 0) + 1
            layers.append(build_layer(name, dict(spec), shape, xp, dtype))
            shape = layers[-1].output_shape
        # Nothing upstream of the first trainable layer needs a gradient: skip that work.
        for layer in layers:
            layer.needs_input_grad = False
            if isinstance(layer, (Conv2D, Dense)):
                break
        return layers

    def _resolve_input_shape(self, given: Any) -> tuple[int, ...]:
        """The per-sample input shape for ``given`` (None, a flat width, or a shape)."""
        declared = None if self.input_shape is None else tuple(int(v) for v in self.input_shape)
        if given is None:
            if declared is None:
                raise ValueError("input_shape is None: pass the input shape to initialize, or fit on data")
            return declared
        shape = (int(given),) if isinstance(given, (int, np.integer)) else tuple(int(v) for v in given)
        if declared is None or shape == declared:
            return shape
        width = int(np.prod(shape))
        if len(shape) == 1 and width == int(np.prod(declared)):
            return declared
        if len(shape) == 1:
            raise ValueError(f"{width} features per sample cannot be reshaped to the net's input shape {declared}")
        hint = ("; add the channel axis: X[:, None]" if (1, *shape) == tuple(declared) else "")
        raise ValueError(f"per-sample shape {shape} does not match the net's input shape {declared}{hint}")

    def initialize(self, input_shape: Any = None, classes: Any = None, rng: np.random.Generator | None = None) -> "ConvNet":
        """Allocate parameters (idempotent when already initialized with the same shape and classes).

        ``input_shape`` is ``(C, H, W)``, a flat width equal to ``C*H*W``, or None (the
        ``input_shape`` hyperparameter); ``classes`` the class count or the class labels
        (None: ``n_classes``).
        """
        self._check_settings()
        shape = self._resolve_input_shape(input_shape)
        labels = resolve_classes(self.n_classes if classes is None else classes)
        if (getattr(self, "layers_", None) is not None and shape == self.input_shape_
                and np.array_equal(labels, self.classes_)):
            return self
        self._xp = array_module(self.device)
        self.layers_ = self._build(self._xp, shape, len(labels))
        precision = effective_precision(self.precision, resolve_device(self.device), "ConvNet")
        for layer in self.layers_:
            layer.precision = precision
        self.input_shape_, self.classes_ = shape, labels
        self.n_features_in_ = int(np.prod(shape))
        self._rng = rng if rng is not None else make_rng(self.random_state)
        for layer in self.layers_:
            layer.init_params(self._rng)
        self._optimizer = self._make_updater()
        self._refs = {f"{layer.name}.{key}": value for layer in self.layers_ for key, value in layer.params.items()}
        self._decay = tuple(name for name in self._refs if name.endswith(".W"))
        self.loss_curve_: list[float] = []
        return self

    def __sklearn_is_fitted__(self) -> bool:
        return getattr(self, "layers_", None) is not None

    def _require_initialized(self) -> None:
        if not self.__sklearn_is_fitted__():
            raise NotFittedError("this ConvNet is not fitted yet: call fit, partial_fit or initialize first")

    # -- input -------------------------------------------------------------------------------
    def _check_X(self, X: Any, reset: bool = False) -> np.ndarray:
        """``X`` as a C-contiguous array; with ``reset`` as given (its shape sizes the net),
        else shaped (n, *input_shape_).

        Flat input is checked (width, feature names) the scikit-learn way; image input
        ``(n, C, H, W)`` against ``input_shape_``.
        """
        if not reset:
            self._require_initialized()
        array = check_features(X, dtype=check_dtype(self.dtype), model="ConvNet")
        if array.ndim == 2:
            validate_data(self, X, reset=reset, skip_check_array=True)
        elif reset:
            self.__dict__.pop("feature_names_in_", None)
        elif array.shape[1:] != self.input_shape_:
            first = self.layers_[0].name
            raise ValueError(f"X has per-sample shape {array.shape[1:]}, but the first layer {first!r} expects "
                             f"{self.input_shape_} (or flat ({self.n_features_in_},))")
        return array if reset else array.reshape(len(array), *self.input_shape_)

    def _initialize_from(self, X: np.ndarray, classes: Any) -> np.ndarray:
        """Size the net from checked ``X`` (its width or per-sample shape); ``X`` shaped for it."""
        self.layers_ = None
        self.initialize(X.shape[1] if X.ndim == 2 else X.shape[1:], classes=classes)
        return X.reshape(len(X), *self.input_shape_)

    # -- scikit-learn API ----------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> "ConvNet":
        """Train from scratch for ``epochs`` passes.

        ``X``: (n, C, H, W) or (n, C*H*W); ``y``: (n,) labels of any sortable kind.
        """
        self._check_settings()
        labels = check_targets(y, "ConvNet")
        X = self._check_X(X, reset=True)  # before anything is allocated or trained
        check_length(labels, len(X))
        X = self._initialize_from(X, resolve_classes(labels))
        indices = encode_labels(labels, self.classes_, len(X))
        for epoch in range(self.epochs):
            started = time.perf_counter()
            loss = self._epoch(X, indices, self._rng)
            if self.verbose:
                print_iteration("ConvNet", epoch + 1, f"loss = {loss:.6f}", time.perf_counter() - started)
        return self

    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> "ConvNet":
        """One more pass over ``(X, y)``, initializing first if needed.

        ``classes`` (all labels that will ever occur) is used on the first call only;
        without it the classes are ``0 .. n_classes - 1``.
        """
        if self.__sklearn_is_fitted__():
            X = self._check_X(X)
        else:
            self._check_settings()
            X = self._initialize_from(self._check_X(X, reset=True), classes)
        self._epoch(X, encode_labels(check_targets(y, "ConvNet", len(X)), self.classes_, len(X)), self._rng)
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, (n, n_classes) float64 on the host, columns ordered as ``classes_``."""
        X = self._check_X(X)
        chunks = []
        for start in range(0, len(X), PREDICT_CHUNK):
            logits = self._forward(X[start : start + PREDICT_CHUNK], train=False)
            exp = self._xp.exp(logits - logits.max(axis=1, keepdims=True))
            chunks.append(probabilities_as(to_host(exp / exp.sum(axis=1, keepdims=True)), np.float64))
        return np.concatenate(chunks)

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """Natural log of :meth:`predict_proba`, (n, n_classes) float64, columns ordered as ``classes_``
        (``-inf`` where a probability is 0, as scikit-learn's classifiers give it)."""
        return log_probabilities(self.predict_proba(X))

    def predict(self, X: Any) -> np.ndarray:
        """Most probable class label per sample, (n,)."""
        probabilities = self.predict_proba(X)
        return self.classes_[probabilities.argmax(axis=1)]

    def summary(self) -> str:
        """One line per layer: name, type, input and output shape."""
        if self.__sklearn_is_fitted__():
            layers = self.layers_
        else:
            self._check_settings()
            layers = self._build(np, self._resolve_input_shape(None), int(self.n_classes))
        return "\n".join(layer.describe() for layer in layers)

    # -- training internals ----------------------------------------------------------------------
    def _forward(self, X_host: np.ndarray, train: bool) -> Any:
        x = to_device(X_host, self._xp, self.layers_[0].dtype)
        if x.ndim == 4:  # NCHW in, CHWN inside (see rbm.conv._im2col)
            x = self._xp.ascontiguousarray(x.transpose(1, 2, 3, 0))
        for layer in self.layers_:
            x = layer.forward(x, train)
        return x

    def _loss_and_gradients(self, X_host: np.ndarray, y_host: np.ndarray) -> tuple[Any, dict[str, Any]]:
        """Mean cross-entropy of one training batch (class indices ``y_host``) and its gradient
        for every parameter (on the device)."""
        logits, labels = self._forward(X_host, train=True), to_device(y_host, self._xp)
        ops = fused_ops(self._xp)
        if ops is not None:  # the GPU branch: softmax, loss and gradient in one kernel
            loss, grad = ops.softmax_cross_entropy(logits, labels)
        else:
            loss, grad = softmax_cross_entropy(logits, labels, self._xp)
        for layer in reversed(self.layers_):
            grad = layer.backward(grad)
            if grad is None:
                break
        return loss, {f"{layer.name}.{key}": value for layer in self.layers_ for key, value in layer.grads.items()}

    def _resident(self, X: np.ndarray, y: np.ndarray, order: np.ndarray) -> tuple[Any, Any, Any]:
        """On the GPU: ``X``, ``y`` and the pass's order as device arrays, copied once (one pinned upload)
        and kept while the same ``X`` comes back (the passes of a fit); minibatches are then gathered
        on the GPU.  On the CPU: as given."""
        if self._xp is np:
            return X, y, order
        if not isinstance(X, np.ndarray):  # already on the device: its owner (a node's data cache) decides when it goes
            self.__dict__.pop("_resident_data", None)  # no reference here keeps an evicted partition alive
            return X, to_device(y, self._xp), to_device(order, self._xp)
        kept = self.__dict__.get("_resident_data")
        if kept is None or kept[0] is not X or kept[1] is not y:
            kept = self.__dict__["_resident_data"] = (X, y, to_device(X, self._xp), to_device(y, self._xp))
        return kept[2], kept[3], to_device(order, self._xp)

    def _epoch(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> float:
        """One shuffled pass of minibatch updates on class indices ``y``; returns the mean training cross-entropy."""
        for layer in self.layers_:
            if isinstance(layer, Dropout):
                layer.rng = rng
        # The schedule: lr / (1 + decay * passes so far (ScheduleClock)), times the distributed trainer's scale.
        decay = 1.0 + float(self.lr_decay) * self._schedule_passes(len(self.loss_curve_))
        self._optimizer.learning_rate = float(self.learning_rate) / decay * getattr(self, "_learning_rate_scale", 1.0)
        order = rng.permutation(len(X))
        X, y, rows = self._resident(X, y, order)
        total = 0.0
        for start in range(0, len(X), self.batch_size):
            batch = rows[start : start + self.batch_size]
            loss, grads = self._loss_and_gradients(X[batch], y[batch])
            self._optimizer.step(self._refs, grads, decay=self._decay)
            total = total + loss * len(batch)  # stays on the device until the end of the pass
            self._after_minibatch()
        mean_loss = float(total) / len(X)
        check_finite_parameters(self._refs, "ConvNet training")
        if not np.isfinite(mean_loss):
            raise DivergenceError("ConvNet training loss became NaN or Inf; lower the learning rate or check the input scaling")
        self.loss_curve_.append(mean_loss)
        logger.debug("epoch %d: loss %.4f", len(self.loss_curve_), mean_loss)
        return mean_loss


def lenet(input_shape: Sequence[int] = (1, 28, 28), n_classes: int = 10, **settings: Any) -> ConvNet:
    """LeNet as in Deeplearning4j's example: conv 5x5x20, max-pool 2, conv 5x5x50, max-pool 2,
    dense 500 ReLU, softmax ``n_classes``.  ``settings`` go to :class:`ConvNet`."""
    layers = settings.pop("layers", [dict(layer) for layer in LENET_LAYERS])
    return ConvNet(layers=layers, input_shape=tuple(input_shape), n_classes=n_classes, **settings)
