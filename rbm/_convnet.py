"""A sequential convolutional net (LeNet and friends) on numpy or cupy, scikit-learn style.

The net is a list of layer specs; shapes flow from ``input_shape`` through each layer,
and a dense output layer of ``n_classes`` units with softmax + cross-entropy is appended
(named ``"out"``).  A flatten is inserted where a dense layer follows a spatial one.
Parameters are named ``"<layer>.<W|b>"`` with layer names counted per type
(``"conv0.W"``, ``"conv1.b"``, ``"dense0.W"``, ``"out.W"``).

The distributed trainer drives it through the seam of :mod:`rbm._model`
(single phase ``"train"``); optimizer state (momentum, Adagrad, Adam moments) stays in
the object and is never exchanged.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from types import ModuleType
from typing import Any, Mapping, Sequence

import numpy as np

from ._backend import array_module, check_dtype, make_rng, to_device, to_host
from ._conv_ops import softmax_cross_entropy
from ._conv_spec import LENET_LAYERS, SETTINGS, plain
from ._params import read_config
from ._layers import Conv2D, Dense, Dropout, Layer, build_layer
from ._model import copy_parameters, read_model_file, register_model, save_model
from ._updaters import Updater, make_updater
from ._validation import DivergenceError, check_features, check_finite_parameters, check_labels

__all__ = ["ConvNet", "lenet", "LENET_LAYERS"]

logger = logging.getLogger(__name__)

PHASE = "train"
PREDICT_CHUNK = 256  # samples per forward pass at prediction time (bounds im2col memory)


@register_model("convnet")
class ConvNet:
    """A sequential conv net trained with minibatch gradient descent and softmax cross-entropy.

    Parameters
    ----------
    layers : list of dict, optional
        Hidden layers, e.g. ``{"type": "conv", "filters": 20, "kernel": 5, "stride": 1,
        "padding": 0, "activation": "identity", "init": "xavier"}``,
        ``{"type": "maxpool" | "avgpool", "size": 2, "stride": None, "padding": 0}``,
        ``{"type": "dense", "units": 500, "activation": "relu", "init": "he"}``,
        ``{"type": "relu" | "sigmoid" | "tanh" | "identity"}``, ``{"type": "dropout",
        "rate": 0.5}``, ``{"type": "flatten"}``.  Default: LeNet's (:data:`LENET_LAYERS`).
        ``init`` defaults to He for ReLU layers and Xavier otherwise.
    input_shape : tuple of int
        Per-sample shape ``(C, H, W)``; inputs may also arrive flat, ``(n, C*H*W)``.
    n_classes : int
        Classes; labels are ``0 .. n_classes - 1``.
    updater : {"sgd", "adagrad", "adam"}
    learning_rate, momentum, nesterov, l2 : float, float, bool, float
        Updater settings (``momentum``/``nesterov`` apply to SGD only); ``l2`` decays weights, not biases.
        ``learning_rate`` may be changed between ``partial_fit`` calls (a schedule).
    batch_size, epochs : int
    device : {"cpu", "gpu", "auto"}
    dtype : {"float32", "float64"}
    random_state : int, Generator or None
        Seeds initialization, shuffling and dropout: the same seed gives the same net.
    verbose : bool
        Log the loss of every epoch at INFO level.
    """

    def __init__(self, layers: Sequence[Mapping[str, Any]] | None = None, input_shape: Sequence[int] = (1, 28, 28),
                 n_classes: int = 10, updater: str = "sgd", learning_rate: float = 0.01, momentum: float = 0.9,
                 nesterov: bool = False, l2: float = 0.0, batch_size: int = 64, epochs: int = 10, device: str = "cpu",
                 dtype: Any = "float32", random_state: Any = None, verbose: bool = False) -> None:
        self.layers = [plain(layer) for layer in (LENET_LAYERS if layers is None else layers)]
        self.input_shape = tuple(int(v) for v in input_shape)
        self.n_classes = n_classes
        self.updater = updater
        self.learning_rate, self.momentum, self.nesterov, self.l2 = learning_rate, momentum, nesterov, l2
        self.batch_size, self.epochs = batch_size, epochs
        self.device, self.dtype, self.random_state, self.verbose = device, dtype, random_state, verbose
        self.layers_: list[Layer] | None = None
        self._check_settings()
        self._build(np)  # a dry run on shapes only: an invalid spec fails here, not mid-training

    # -- construction ----------------------------------------------------------------------
    def _check_settings(self) -> None:
        if not self.input_shape or min(self.input_shape) < 1:
            raise ValueError(f"input_shape must be positive ints, got {self.input_shape}")
        for name in ("n_classes", "batch_size", "epochs"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < (2 if name == "n_classes" else 1):
                raise ValueError(f"{name} must be an int >= {2 if name == 'n_classes' else 1}, got {value!r}")
        check_dtype(self.dtype)
        self._make_updater()  # validates updater name and settings

    def _make_updater(self) -> Updater:
        settings: dict[str, Any] = {"learning_rate": self.learning_rate, "l2": self.l2}
        if self.updater == "sgd":
            settings.update(momentum=self.momentum, nesterov=self.nesterov)
        return make_updater(self.updater, **settings)

    def _build(self, xp: ModuleType) -> list[Layer]:
        dtype, shape, counts, layers = check_dtype(self.dtype), self.input_shape, {}, []
        specs = [*self.layers, {"type": "dense", "units": int(self.n_classes), "activation": "identity"}]
        for index, spec in enumerate(specs):
            kind = spec.get("type") if isinstance(spec, dict) else None
            kind = kind if isinstance(kind, str) else "layer"  # named in the error build_layer raises
            if kind == "dense" and len(shape) > 1:
                layers.append(build_layer(f"flatten{counts.get('flatten', 0)}", {"type": "flatten"}, shape, xp, dtype))
                counts["flatten"] = counts.get("flatten", 0) + 1
                shape = layers[-1].output_shape
            name = "out" if index == len(specs) - 1 else f"{kind}{counts.get(kind, 0)}"
            counts[kind] = counts.get(kind, 0) + 1
            layers.append(build_layer(name, spec, shape, xp, dtype))
            shape = layers[-1].output_shape
        # Nothing upstream of the first trainable layer needs a gradient: skip that work.
        for layer in layers:
            layer.needs_input_grad = False
            if isinstance(layer, (Conv2D, Dense)):
                break
        return layers

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "ConvNet":
        """Build an untrained net from a spec dict (as written by :meth:`to_spec` or a config file)."""
        settings = {key: value for key, value in spec.items() if key != "kind"}
        if spec.get("kind", "convnet") != "convnet":
            raise ValueError(f"spec kind {spec.get('kind')!r} is not 'convnet'")
        unknown = set(settings) - set(SETTINGS)
        if unknown:
            raise ValueError(f"unknown ConvNet setting(s) {sorted(unknown)}; allowed: {list(SETTINGS)}")
        return cls(**settings)

    @classmethod
    def from_config(cls, path: str | os.PathLike) -> "ConvNet":
        """Build a net from a JSON (``.json``) or YAML (``.yaml``/``.yml``) spec file."""
        return cls.from_spec(read_config(path))

    def to_spec(self) -> dict[str, Any]:
        """JSON-able hyperparameters (with ``"kind": "convnet"``) for :func:`rbm.model_from_spec`."""
        seed = self.random_state if isinstance(self.random_state, (int, np.integer)) else None
        return {"kind": "convnet", "layers": copy.deepcopy(self.layers), "input_shape": list(self.input_shape),
                "n_classes": int(self.n_classes), "updater": self.updater, "learning_rate": float(self.learning_rate),
                "momentum": float(self.momentum), "nesterov": bool(self.nesterov), "l2": float(self.l2),
                "batch_size": int(self.batch_size), "epochs": int(self.epochs), "device": self.device,
                "dtype": check_dtype(self.dtype).name, "random_state": None if seed is None else int(seed),
                "verbose": bool(self.verbose)}

    def summary(self) -> str:
        """One line per layer: name, type, input and output shape."""
        return "\n".join(layer.describe() for layer in (self.layers_ or self._build(np)))

    # -- the seam --------------------------------------------------------------------------
    def initialize(self, input_shape: Any = None, classes: Any = None, rng: np.random.Generator | None = None) -> "ConvNet":
        """Allocate parameters (idempotent when already initialized with the same sizes).

        ``input_shape`` is ``(C, H, W)``, or a flat width equal to ``C*H*W``; ``classes``
        an int (the class count) or the sequence of class labels.
        """
        shape = self._resolve_input_shape(input_shape)
        n_classes = self.n_classes if classes is None else classes if isinstance(classes, (int, np.integer)) else len(classes)
        if self.layers_ is not None and shape == self.input_shape and n_classes == self.n_classes:
            return self
        self.input_shape, self.n_classes = shape, int(n_classes)
        self._check_settings()
        self._xp = array_module(self.device)
        self.layers_ = self._build(self._xp)
        self._rng = rng if rng is not None else make_rng(self.random_state)
        for layer in self.layers_:
            layer.init_params(self._rng)
        self._optimizer = self._make_updater()
        self._refs = {f"{layer.name}.{key}": value for layer in self.layers_ for key, value in layer.params.items()}
        self._decay = tuple(name for name in self._refs if name.endswith(".W"))
        self.loss_curve_: list[float] = []
        return self

    def _resolve_input_shape(self, input_shape: Any) -> tuple[int, ...]:
        if input_shape is None:
            return self.input_shape
        if isinstance(input_shape, (int, np.integer)) or len(tuple(input_shape)) == 1:
            width = int(input_shape) if isinstance(input_shape, (int, np.integer)) else int(tuple(input_shape)[0])
            if width != int(np.prod(self.input_shape)):
                raise ValueError(f"{width} features per sample cannot be reshaped to the net's input shape {self.input_shape}")
            return self.input_shape
        return tuple(int(v) for v in input_shape)

    def phases(self) -> list[str]:
        return [PHASE]

    def parameters(self, phase: str | None = None) -> dict[str, np.ndarray]:
        """Host copies of all weights, named ``"conv0.W"``, ``"out.b"`` ..."""
        if phase not in (None, PHASE):
            raise ValueError(f"unknown phase {phase!r}; a ConvNet has {self.phases()}")
        self._require_initialized()
        return {name: np.array(to_host(value), copy=True) for name, value in self._refs.items()}

    def set_parameters(self, params: Mapping[str, np.ndarray]) -> None:
        """Copy the given named arrays into the net (in place, on its device)."""
        self._require_initialized()
        unknown = sorted(set(params) - set(self._refs))
        if unknown:
            raise ValueError(f"unknown parameters {unknown}; this net has {sorted(self._refs)}")
        copy_parameters([(name, value, self._refs[name]) for name, value in params.items()], self._xp)

    def train_partition(self, X: Any, y: Any, phase: str, rng: np.random.Generator) -> dict[str, Any]:
        """One pass over ``(X, y)`` in shuffled minibatches; ``{"samples", "seconds", "loss"}``."""
        if phase != PHASE:
            raise ValueError(f"unknown phase {phase!r}; a ConvNet has {self.phases()}")
        if y is None:
            raise ValueError("a ConvNet trains on labelled data: train_partition needs y for phase 'train'")
        if len(X) == 0:  # empty partitions are simply skipped
            return {"samples": 0, "seconds": 0.0, "loss": 0.0}
        X, y = self._check_xy(X, y)
        if self.layers_ is None:
            self.initialize()
        started = time.perf_counter()
        loss = self._epoch(X, y, rng)
        return {"samples": len(X), "seconds": time.perf_counter() - started, "loss": loss}

    def _restore(self, spec: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        self.initialize(tuple(spec["input_shape"]), int(spec["n_classes"]))
        self.set_parameters(arrays)

    # -- scikit-learn API ------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> "ConvNet":
        """Train from scratch for ``epochs`` passes. X: (n, C, H, W) or (n, C*H*W); y: (n,) ints."""
        X, y = self._check_xy(X, y)  # before anything is allocated or trained
        self.layers_ = None
        self.initialize()
        for _ in range(self.epochs):
            self._epoch(X, y, self._rng)
        return self

    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> "ConvNet":
        """One more pass over ``(X, y)``, initializing first if needed."""
        X, y = self._check_xy(X, y)
        if self.layers_ is None:
            self.initialize(None, classes)
        self._epoch(X, y, self._rng)
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, (n, n_classes) on the host."""
        self._require_initialized()
        X = self._check_x(X)
        chunks = []
        for start in range(0, len(X), PREDICT_CHUNK):
            logits = self._forward(X[start : start + PREDICT_CHUNK], train=False)
            exp = self._xp.exp(logits - logits.max(axis=1, keepdims=True))
            chunks.append(to_host(exp / exp.sum(axis=1, keepdims=True)).astype(np.float64))
        return np.concatenate(chunks)

    def predict(self, X: Any) -> np.ndarray:
        """Most probable class per sample, (n,) int64."""
        return self.predict_proba(X).argmax(axis=1).astype(np.int64)

    def score(self, X: Any, y: Any) -> float:
        """Accuracy on ``(X, y)``."""
        labels = check_labels(y, len(X), self.n_classes)
        return float(np.mean(self.predict(X) == labels))

    def save(self, path: str | os.PathLike) -> None:
        """Write the spec and weights to one ``.npz`` (read back with :func:`rbm.load_model`)."""
        save_model(path, self.to_spec(), self.parameters())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ConvNet":
        spec, arrays = read_model_file(path)
        model = cls.from_spec(spec)
        model._restore(spec, arrays)
        return model

    # -- internals -------------------------------------------------------------------------
    def _require_initialized(self) -> None:
        if self.layers_ is None:
            raise RuntimeError("this ConvNet has no parameters yet: call fit, partial_fit or initialize first")

    def _check_x(self, X: Any) -> np.ndarray:
        shape = tuple(np.shape(X))
        width = int(np.prod(self.input_shape))
        if len(shape) < 2 or (shape[1:] != self.input_shape and shape[1:] != (width,)):
            first = (self.layers_ or self._build(np))[0].name
            raise ValueError(
                f"input X has per-sample shape {shape[1:]}, but the first layer {first!r} expects "
                f"{self.input_shape} (or flat ({width},))"
            )
        X = check_features(X, self.input_shape, dtype=check_dtype(self.dtype))
        return X.reshape(len(X), *self.input_shape)

    def _check_xy(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        X = self._check_x(X)
        return X, check_labels(y, len(X), self.n_classes)

    def _forward(self, X_host: np.ndarray, train: bool) -> Any:
        x = to_device(X_host, self._xp, self.layers_[0].dtype)
        if x.ndim == 4:  # NCHW in, CHWN inside (see rbm._im2col)
            x = self._xp.ascontiguousarray(x.transpose(1, 2, 3, 0))
        for layer in self.layers_:
            x = layer.forward(x, train)
        return x

    def _loss_and_gradients(self, X_host: np.ndarray, y_host: np.ndarray) -> tuple[Any, dict[str, Any]]:
        """Mean cross-entropy of one training batch and its gradient for every parameter (on the device)."""
        logits = self._forward(X_host, train=True)
        loss, grad = softmax_cross_entropy(logits, to_device(y_host, self._xp), self._xp)
        for layer in reversed(self.layers_):
            grad = layer.backward(grad)
            if grad is None:
                break
        return loss, {f"{layer.name}.{key}": value for layer in self.layers_ for key, value in layer.grads.items()}

    def _epoch(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> float:
        """One shuffled pass of minibatch updates; returns the mean training cross-entropy."""
        for layer in self.layers_:
            if isinstance(layer, Dropout):
                layer.rng = rng
        # learning_rate may be changed between passes (a schedule driven by the caller).
        self._optimizer.learning_rate = float(self.learning_rate)
        order = rng.permutation(len(X))
        total = 0.0
        for start in range(0, len(X), self.batch_size):
            batch = order[start : start + self.batch_size]
            loss, grads = self._loss_and_gradients(X[batch], y[batch])
            self._optimizer.step(self._refs, grads, decay=self._decay)
            total = total + loss * len(batch)  # stays on the device until the end of the pass
        mean_loss = float(total) / len(X)
        check_finite_parameters(self._refs, "ConvNet training")
        if not np.isfinite(mean_loss):
            raise DivergenceError("ConvNet training loss became NaN or Inf; lower the learning rate or check the input scaling")
        self.loss_curve_.append(mean_loss)
        logger.log(logging.INFO if self.verbose else logging.DEBUG, "epoch %d: loss %.4f", len(self.loss_curve_), mean_loss)
        return mean_loss


def lenet(input_shape: Sequence[int] = (1, 28, 28), n_classes: int = 10, **settings: Any) -> ConvNet:
    """LeNet as in Deeplearning4j's example: conv 5x5x20, max-pool 2, conv 5x5x50, max-pool 2,
    dense 500 ReLU, softmax ``n_classes``.  ``settings`` go to :class:`ConvNet`."""
    return ConvNet(layers=LENET_LAYERS, input_shape=input_shape, n_classes=n_classes, **settings)
