"""Layers of the convolutional net: convolution, pooling, dense, activations, dropout, flatten.

A layer is built from a JSON-able spec dict (``{"type": "conv", "filters": 20, "kernel": 5}``)
and an input shape, which is how shapes are inferred: no one writes ``n_in`` by hand.
Shapes that users see are per sample and channels first, ``(C, H, W)`` or ``(D,)``;
inside, 4-D activations flow as CHWN, the batch innermost (see :mod:`rbm.conv._im2col` for
why); 2-D ones as (N, D).

Each layer offers ``forward(x, train)`` and ``backward(dy) -> dx``; ``backward`` leaves
the parameter gradients in ``grads`` (same keys as ``params``: ``"W"``, ``"b"``).
"""

from __future__ import annotations

from collections import OrderedDict
from types import ModuleType
from typing import Any

import numpy as np

from . import _im2col as k
from ._gemm import matmul_pixels, matmul_pixels_nt
from .._backend import NamespacePickling, to_device
from .._gpu import PhiloxStream, fused_ops, uses_philox
from ._cudnn import PLAN_CACHE, CudnnConvolution, cudnn_available, plan_key
from ._ops import ACTIVATIONS, INITS, activate, activation_grad, initial_weights

__all__ = ["Layer", "build_layer", "LAYER_TYPES", "ACTIVATIONS", "INITS"]

Array = Any

#: Batch sizes whose im2col buffers a convolution keeps (see ``Conv2D._scratch``).
SCRATCH_SIZES = 4


def _pair(value: Any, what: str, layer: str, minimum: int) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, (int, np.integer)) else tuple(value) if isinstance(value, (list, tuple)) else None
    if pair is None or len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in pair):
        raise ValueError(f"layer {layer}: {what} must be an int or a pair of ints, got {value!r}")
    if min(pair) < minimum:
        raise ValueError(f"layer {layer}: {what} must be >= {minimum}, got {value!r}")
    return int(pair[0]), int(pair[1])


class Layer(NamespacePickling):
    """Base layer: no parameters, shape preserved."""

    # What a forward/backward pass leaves behind: not pickled, rebuilt by the next pass.
    _TRANSIENT = ("_buffers", "_w_matrix", "_cols", "_y", "_x_padded_shape", "_out", "_x_padded", "_x_shape", "_x", "_mask",
                  "_winners", "_convolutions")
    precision = "float32"  # of the GEMMs and convolutions on a GPU: set by the net (see rbm._gpu._precision)
    keys: tuple[str, ...] = ()
    defaults: dict[str, Any] = {}

    def __init__(self, name: str, spec: dict[str, Any], input_shape: tuple[int, ...], xp: ModuleType, dtype: np.dtype) -> None:
        unknown = set(spec) - set(self.keys) - {"type"}
        if unknown:
            raise ValueError(f"layer {name} ({spec['type']}): unknown setting(s) {sorted(unknown)}; allowed: {sorted(self.keys)}")
        self.name = name
        self.spec = {**self.defaults, **spec}
        self.input_shape = tuple(int(v) for v in input_shape)
        self.xp = xp
        self.dtype = dtype
        self.params: dict[str, Array] = {}
        self.grads: dict[str, Array] = {}
        self.needs_input_grad = True
        self.output_shape = self._configure()

    def _configure(self) -> tuple[int, ...]:
        return self.input_shape

    def _require_spatial(self) -> tuple[int, int, int]:
        if len(self.input_shape) != 3:
            hint = ("; flat rows need the net's input_shape=(C, H, W)" if len(self.input_shape) == 1 else
                    "; images without a channel axis need one: X[:, None], input_shape=(1, H, W)"
                    if len(self.input_shape) == 2 else "")
            raise ValueError(f"layer {self.name} ({self.spec['type']}) needs a (C, H, W) input, but receives shape "
                             f"{self.input_shape}{hint}")
        return self.input_shape  # type: ignore[return-value]

    def init_params(self, rng: np.random.Generator) -> None:
        """Draw initial parameters from ``rng`` (host side, then moved to the device)."""

    def forward(self, x: Array, train: bool) -> Array:
        return x

    def backward(self, dy: Array) -> Array:
        return dy

    def describe(self) -> str:
        return f"{self.name:<10} {self.spec['type']:<8} {str(self.input_shape):>14} -> {str(self.output_shape):<14}"


class Conv2D(Layer):
    """2-D convolution, weights ``W`` (F, C, KH, KW) and bias ``b`` (F,): im2col + GEMM on the CPU,
    cuDNN on cupy arrays (:mod:`._cudnn`); on the GPU branch bias and activation are one fused kernel."""

    keys = ("filters", "kernel", "stride", "padding", "activation", "init")
    defaults = {"stride": 1, "padding": 0, "activation": "identity", "init": None}

    def _configure(self) -> tuple[int, ...]:
        c, h, w = self._require_spatial()
        self.filters = _positive_int(self.spec.get("filters"), "filters", self.name)
        self.kernel = _pair(self.spec.get("kernel"), "kernel", self.name, 1)
        self.stride = _pair(self.spec["stride"], "stride", self.name, 1)
        self.padding = _pair(self.spec["padding"], "padding", self.name, 0)
        self.activation = _choice(self.spec["activation"], ACTIVATIONS, "activation", self.name)
        self.init = _default_init(self.spec["init"], self.activation, self.name)
        (kh, kw), (ph, pw) = self.kernel, self.padding
        if kh > h + 2 * ph or kw > w + 2 * pw:
            raise ValueError(
                f"layer {self.name}: kernel {self.kernel} is larger than its padded input "
                f"{(h + 2 * ph, w + 2 * pw)} (input shape {self.input_shape}, padding {self.padding})"
            )
        self.out_hw = (k.output_size(h, kh, self.stride[0], ph), k.output_size(w, kw, self.stride[1], pw))
        return (self.filters, *self.out_hw)

    def init_params(self, rng: np.random.Generator) -> None:
        c, (kh, kw), f = self.input_shape[0], self.kernel, self.filters
        weights = initial_weights(self.init, (f, c, kh, kw), c * kh * kw, f * kh * kw, rng)
        self.params = {"W": to_device(weights, self.xp, self.dtype), "b": self.xp.zeros(f, dtype=self.dtype)}

    def _scratch(self, n: int) -> tuple[Array, Array]:
        """Per-batch-size padded-input and im2col buffers (allocating them each step costs page faults).

        The :data:`SCRATCH_SIZES` sizes used last are kept: the minibatch, a partition's last (smaller)
        minibatch -- which differs by a row or two between the near-equal partitions of a split -- and
        a prediction chunk, so no size pushes out the one the next step needs.
        """
        buffers = self.__dict__.setdefault("_buffers", OrderedDict())
        if n in buffers:
            buffers.move_to_end(n)
        else:
            while len(buffers) >= SCRATCH_SIZES:
                buffers.popitem(last=False)
            c, h, w = self.input_shape
            (kh, kw), (ph, pw), (oh, ow) = self.kernel, self.padding, self.out_hw
            padded = self.xp.zeros((c, h + 2 * ph, w + 2 * pw, n), dtype=self.dtype) if ph or pw else None
            cols = self.xp.empty((kh, kw, c, oh, ow, n), dtype=self.dtype)
            buffers[n] = (padded, cols)
        return buffers[n]

    def _convolution(self, n: int) -> CudnnConvolution | None:
        """cuDNN's graphs for batches of ``n`` (built once per size), or None off cupy / without the frontend."""
        if self.xp is np or not cudnn_available():
            return None
        key = plan_key(self.input_shape, self.filters, self.kernel, self.stride, self.padding, n, self.dtype,
                       self.precision, self.xp.cuda.Device().id)
        return PLAN_CACHE.get(key, lambda: CudnnConvolution(self.input_shape, self.filters, self.kernel, self.stride,
                                                            self.padding, n, self.dtype, self.precision))

    def forward(self, x: Array, train: bool) -> Array:
        n = x.shape[3]
        convolution, ops = self._convolution(n), fused_ops(self.xp)
        if convolution is not None:
            self._x = x
            y = convolution.forward(x, self.params["W"])
            self._y = ops.bias_activation_(y.reshape(self.filters, -1), self.params["b"], self.activation)
            return y
        padded, cols = self._scratch(n)
        x_padded = k.pad_spatial(x, self.padding, 0.0, self.xp, out=padded)
        k.im2col_chwn(x_padded, self.kernel, self.stride, cols)
        (kh, kw), c, f = self.kernel, self.input_shape[0], self.filters
        self._w_matrix = self.params["W"].transpose(0, 2, 3, 1).reshape(f, kh * kw * c)  # columns (ky, kx, c)
        self._cols = cols.reshape(kh * kw * c, -1)
        z = matmul_pixels(self._w_matrix, self._cols, self.xp.empty((f, self._cols.shape[1]), dtype=self.dtype), self.xp)
        if ops is not None:
            self._y = ops.bias_activation_(z, self.params["b"], self.activation)
        else:
            z += self.params["b"][:, None]
            self._y = activate(self.activation, z, self.xp)
        self._x_padded_shape = x_padded.shape
        return self._y.reshape(f, *self.out_hw, n)

    def backward(self, dy: Array) -> Array:
        (kh, kw), c, f = self.kernel, self.input_shape[0], self.filters
        convolution, ops = self._convolution(dy.shape[3]), fused_ops(self.xp)
        if ops is not None:  # the GPU branch: one kernel for the activation's derivative, one for the bias sums
            dz = ops.activation_backward(self.activation, self._y, dy.reshape(f, -1))
            bias_grad = ops.row_sums(dz)
        else:
            dz = activation_grad(self.activation, self._y, dy.reshape(f, -1), self.xp)
            bias_grad = dz.sum(axis=1)
        if convolution is not None:
            dz = self.xp.ascontiguousarray(dz).reshape(f, *self.out_hw, dy.shape[3])
            self.grads = {"W": convolution.backward_filter(self._x, dz), "b": bias_grad}
            return convolution.backward_data(dz, self.params["W"]) if self.needs_input_grad else None
        dw_t = matmul_pixels_nt(self._cols, dz, self.xp)  # (KH*KW*C, F): ~20% faster in OpenBLAS than dz @ cols.T
        self.grads = {"W": dw_t.reshape(kh, kw, c, f).transpose(3, 2, 0, 1).copy(), "b": bias_grad}
        if not self.needs_input_grad:
            return None
        # The window gradients overwrite the im2col buffer, whose columns dW no longer needs:
        # a fresh (KH*KW*C, OH*OW*N) array each step (8 MB in LeNet's conv1) cost its backward 0.3-0.7 ms more.
        dcols = matmul_pixels(self._w_matrix.T, dz, self._cols, self.xp).reshape(kh, kw, c, *self.out_hw, dy.shape[3])
        return k.col2im_chwn(dcols, self._x_padded_shape, self.padding, self.stride, self.xp)


class _Pool(Layer):
    keys = ("size", "stride", "padding")
    defaults = {"stride": None, "padding": 0}

    def _configure(self) -> tuple[int, ...]:
        c, h, w = self._require_spatial()
        self.kernel = _pair(self.spec.get("size"), "size", self.name, 1)
        self.stride = _pair(self.spec["stride"] if self.spec["stride"] is not None else self.spec.get("size"), "stride", self.name, 1)
        self.padding = _pair(self.spec["padding"], "padding", self.name, 0)
        (kh, kw), (ph, pw) = self.kernel, self.padding
        if kh > h + 2 * ph or kw > w + 2 * pw:
            raise ValueError(f"layer {self.name}: pooling window {self.kernel} is larger than its input {self.input_shape[1:]}")
        if ph * 2 > kh or pw * 2 > kw:
            raise ValueError(f"layer {self.name}: padding {self.padding} must be at most half the window {self.kernel}")
        return (c, k.output_size(h, kh, self.stride[0], ph), k.output_size(w, kw, self.stride[1], pw))


class MaxPool2D(_Pool):
    """Max pooling; ties send the gradient to the first max in row-major window order."""

    def forward(self, x: Array, train: bool) -> Array:
        ops = fused_ops(self.xp)
        if ops is not None:  # the GPU branch: one kernel each way
            self._x_padded = x
            self._out = ops.maxpool_forward(x, self.kernel, self.stride, self.padding)
            return self._out
        out, self._winners = k.maxpool_forward(x, self.kernel, self.stride, self.padding, self.xp,
                                               record_winners=train)  # inference needs no winners
        (ph, pw), (c, h, w, n) = self.padding, x.shape
        self._x_padded_shape = (c, h + 2 * ph, w + 2 * pw, n)
        return out

    def backward(self, dy: Array) -> Array:
        ops = fused_ops(self.xp)
        if ops is not None:
            return ops.maxpool_backward(self.xp.ascontiguousarray(dy), self._out, self._x_padded, self.kernel,
                                        self.stride, self.padding)
        return k.maxpool_backward(dy, self._winners, self._x_padded_shape, self.kernel, self.stride, self.padding, self.xp)


class AvgPool2D(_Pool):
    """Average pooling (zero padding counts in the average)."""

    def forward(self, x: Array, train: bool) -> Array:
        self._x_shape = x.shape
        return k.avgpool_forward(x, self.kernel, self.stride, self.padding, self.xp)

    def backward(self, dy: Array) -> Array:
        return k.avgpool_backward(dy, self._x_shape, self.kernel, self.stride, self.padding, self.xp)


class Flatten(Layer):
    """(C, H, W) -> (C*H*W,) in channels-first order, so dense weights read like NCHW nets'."""

    def _configure(self) -> tuple[int, ...]:
        return (int(np.prod(self.input_shape)),)

    def forward(self, x: Array, train: bool) -> Array:
        self._x_shape = x.shape
        if x.ndim == 2:
            return x
        return x.transpose(3, 0, 1, 2).reshape(x.shape[3], -1)  # CHWN -> (N, C*H*W)

    def backward(self, dy: Array) -> Array:
        if len(self._x_shape) == 2:
            return dy
        c, h, w, n = self._x_shape
        return self.xp.ascontiguousarray(dy.reshape(n, c, h, w).transpose(1, 2, 3, 0))


class Dense(Layer):
    """Fully connected: ``y = act(x @ W + b)``, ``W`` (n_in, units), ``b`` (units,)."""

    keys = ("units", "activation", "init")
    defaults = {"activation": "identity", "init": None}

    def _configure(self) -> tuple[int, ...]:
        if len(self.input_shape) != 1:
            raise ValueError(f"layer {self.name} (dense) needs a flat input, but receives shape {self.input_shape}")
        self.units = _positive_int(self.spec.get("units"), "units", self.name)
        self.activation = _choice(self.spec["activation"], ACTIVATIONS, "activation", self.name)
        self.init = _default_init(self.spec["init"], self.activation, self.name)
        return (self.units,)

    def init_params(self, rng: np.random.Generator) -> None:
        n_in = self.input_shape[0]
        weights = initial_weights(self.init, (n_in, self.units), n_in, self.units, rng)
        self.params = {"W": to_device(weights, self.xp, self.dtype), "b": self.xp.zeros(self.units, dtype=self.dtype)}

    def forward(self, x: Array, train: bool) -> Array:
        ops = fused_ops(self.xp)
        if ops is not None:  # the GPU branch: the GEMM at the net's precision, one kernel for the bias
            x = self.xp.ascontiguousarray(x)  # cuBLAS takes C-contiguous operands (kept for the backward too)
            z = ops.matmul(x, self.params["W"], self.xp.empty((x.shape[0], self.units), dtype=x.dtype),
                           precision=self.precision)
            ops.bias_add_(z, self.params["b"])
        else:
            z = x @ self.params["W"]
            z += self.params["b"]
        self._x = x
        self._y = activate(self.activation, z, self.xp)
        return self._y

    def backward(self, dy: Array) -> Array:
        ops = fused_ops(self.xp)
        if ops is None:
            dz = activation_grad(self.activation, self._y, dy, self.xp)
            self.grads = {"W": self._x.T @ dz, "b": dz.sum(axis=0)}
            return dz @ self.params["W"].T if self.needs_input_grad else None
        # The GPU branch: the three GEMMs at the net's precision, one kernel each for the derivative and the bias sums.
        W, xp = self.params["W"], self.xp
        if self.activation == "identity":
            dz = xp.ascontiguousarray(dy)
        else:
            dz = ops.activation_backward(self.activation, self._y, dy)
        self.grads = {"W": ops.gemm_tn(self._x, dz, xp.empty_like(W), 1.0, 0.0, precision=self.precision),
                      "b": ops.column_sums(dz)}
        if not self.needs_input_grad:
            return None
        return ops.matmul(dz, W, xp.empty((dz.shape[0], W.shape[0]), dtype=dz.dtype), trans_b=True,
                          precision=self.precision)


class Activation(Layer):
    """A standalone activation layer (``{"type": "relu"}`` ...)."""

    def forward(self, x: Array, train: bool) -> Array:
        self._y = activate(self.spec["type"], x.copy(), self.xp)
        return self._y

    def backward(self, dy: Array) -> Array:
        return activation_grad(self.spec["type"], self._y, dy, self.xp)


class Dropout(Layer):
    """Inverted dropout: zero a fraction ``rate`` of the units in training, scale the rest by 1/(1-rate)."""

    keys = ("rate",)
    defaults = {"rate": 0.5}

    def _configure(self) -> tuple[int, ...]:
        rate = self.spec["rate"]
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0.0 <= rate < 1.0:
            raise ValueError(f"layer {self.name}: dropout rate must be in [0, 1), got {rate!r}")
        self.rate = float(rate)
        self.rng: np.random.Generator | None = None  # set by the net before each training pass
        return self.input_shape

    def forward(self, x: Array, train: bool) -> Array:
        if not train or self.rate == 0.0:
            self._mask = None
            return x
        keep = 1.0 - self.rate
        uniform = _uniform(self.xp, self.rng, x.shape, self.dtype)
        self._mask = (uniform < keep).astype(self.dtype) * self.dtype.type(1.0 / keep)
        return x * self._mask

    def backward(self, dy: Array) -> Array:
        return dy if self._mask is None else dy * self._mask


def _uniform(xp: ModuleType, rng: np.random.Generator | None, shape: tuple[int, ...], dtype: np.dtype) -> Array:
    if rng is None:
        raise RuntimeError("dropout needs a random generator: train through ConvNet, which provides one")
    if not uses_philox(xp):
        return rng.random(shape, dtype=dtype)
    # The GPU branch draws on the device, from a Philox stream seeded by the host generator (reproducible).
    return PhiloxStream(int(rng.integers(2**63 - 1))).random(shape, dtype, out=xp.empty(shape, dtype=dtype))


def _positive_int(value: Any, what: str, layer: str) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"layer {layer}: {what} must be a positive int, got {value!r}")
    return int(value)


def _default_init(init: str | None, activation: str, layer: str) -> str:
    """He for ReLU layers, Xavier otherwise, unless the spec names one."""
    return _choice(init or ("he" if activation == "relu" else "xavier"), INITS, "init", layer)


def _choice(value: Any, allowed: tuple[str, ...], what: str, layer: str) -> str:
    if value not in allowed:
        raise ValueError(f"layer {layer}: {what} must be one of {allowed}, got {value!r}")
    return value


LAYER_TYPES: dict[str, type[Layer]] = {
    "conv": Conv2D,
    "maxpool": MaxPool2D,
    "avgpool": AvgPool2D,
    "dense": Dense,
    "flatten": Flatten,
    "dropout": Dropout,
    **{name: Activation for name in ACTIVATIONS},
}


def build_layer(name: str, spec: dict[str, Any], input_shape: tuple[int, ...], xp: ModuleType, dtype: np.dtype) -> Layer:
    """The layer described by ``spec`` for inputs of (per-sample) ``input_shape``."""
    if not isinstance(spec, dict) or "type" not in spec:
        raise ValueError(f"layer {name}: a layer spec must be a dict with a 'type', got {spec!r}")
    kind = spec["type"]
    if kind not in LAYER_TYPES:
        raise ValueError(f"layer {name}: unknown layer type {kind!r}; known types: {sorted(LAYER_TYPES)}")
    return LAYER_TYPES[kind](name, spec, input_shape, xp, dtype)
