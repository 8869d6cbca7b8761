"""The GPU branch's fused kernels on cupy: one launch each, compiled once (``_source.cu``).

Same methods, same semantics and the same Philox draws as :class:`._reference.ReferenceOps`
(their numpy twins).  Kernels are launched as ``cupy.RawModule`` functions: a call costs a
few microseconds of Python, where the equivalent chain of cupy operations costs one launch
per operation -- on the GPU the time of the small-batch hot loops is launches, not math.
The module compiles on first use (NVRTC) into cupy's kernel cache, which
:func:`rbm._gpu.configure_kernel_cache` points at a folder shared by the host's processes.
GEMMs go to cuBLAS ``gemmEx`` with the compute type of the model's precision.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ._cache import configure_kernel_cache
from ._precision import cublas_compute_type

__all__ = ["CudaOps", "cuda_kernels", "KERNEL_NAMES"]

logger = logging.getLogger(__name__)

KERNEL_NAMES = (
    "fill_uniform", "fill_normal", "bias_sigmoid", "bias_sigmoid_sample", "sample_inplace", "bias_add",
    "bias_add_normal", "momentum_step", "subtract_scaled", "dropout", "sigmoid_backward", "sgd_step",
    "adagrad_step", "adam_step", "maxpool_forward", "maxpool_backward", "bias_activation", "activation_backward",
    "softmax_xent", "column_sums", "row_sums",
)
_CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_THREADS = 256
_MAX_BLOCKS = 65535
_ACTIVATION_CODES = {"identity": 0, "relu": 1, "sigmoid": 2, "tanh": 3}
_CUDA_R_32F, _CUDA_R_64F = 0, 1  # cudaDataType_t


class CounterStream(Protocol):
    """What a kernel takes of a counter-based random stream (:class:`rbm._gpu.PhiloxStream`).

    Named structurally: the stream calls these kernels to fill cupy arrays, so it cannot be imported here.
    """

    key: tuple[int, int]

    def reserve(self, count: int) -> int:
        """The first of ``count`` consecutive draws, now taken."""


class CudaOps:
    """Fused elementwise operations and precision-aware GEMMs on cupy arrays."""

    name = "cuda"

    def __init__(self) -> None:
        import cupy
        from cupy_backends.cuda.libs import cublas

        self.xp = cupy
        self._cublas = cublas
        self._module = None
        self._kernels: dict[tuple[str, np.dtype], Any] = {}
        self._scalars: dict[tuple[np.dtype, float, float], np.ndarray] = {}  # GEMMs' (alpha, beta) on the host

    # -- compilation and launches
    def module(self) -> Any:
        """The compiled ``RawModule`` (compiled on first call, then read from the kernel cache)."""
        if self._module is None:
            configure_kernel_cache()
            source = (Path(__file__).with_name("_source.cu")).read_text()
            names = [f"{name}<{ctype}>" for name in KERNEL_NAMES for ctype in _CTYPES.values()]
            self._module = self.xp.RawModule(code=source, options=("--std=c++14",), name_expressions=names)
        return self._module

    def _kernel(self, name: str, dtype: np.dtype) -> Any:
        # A dict, not functools' cache: the hot loops launch tens of kernels per minibatch.
        kernel = self._kernels.get((name, dtype))
        if kernel is None:
            kernel = self._kernels[name, dtype] = self.module().get_function(f"{name}<{_CTYPES[np.dtype(dtype)]}>")
        return kernel

    def _launch(self, name: str, dtype: np.dtype, n: int, *args: Any) -> None:
        if n == 0:
            return
        blocks = min((n + _THREADS - 1) // _THREADS, _MAX_BLOCKS)
        self._kernel(name, dtype)((blocks,), (_THREADS,), args)

    def _launch_blocks(self, name: str, dtype: np.dtype, grid: tuple[int, ...], block: tuple[int, ...],
                       *args: Any) -> None:
        """A kernel whose threads cooperate within a block (shared-memory sums), on its own grid."""
        self._kernel(name, dtype)(grid, block, args)

    @staticmethod
    def _stream_args(stream: CounterStream, count: int) -> tuple[np.uint32, np.uint32, np.uint64]:
        return np.uint32(stream.key[0]), np.uint32(stream.key[1]), np.uint64(stream.reserve(count))

    def fill_random(self, kind: str, out: Any, key: tuple[int, int], start: int) -> None:
        """``out`` (C-contiguous) <- draws ``start ..`` of the Philox stream ``key`` (uniform or normal)."""
        name = "fill_uniform" if kind == "uniform" else "fill_normal"
        self._launch(name, out.dtype, out.size, out, np.int64(out.size), np.uint32(key[0]), np.uint32(key[1]),
                     np.uint64(start))

    # -- GEMMs
    def _gemm(self, a: Any, b: Any, out: Any, trans_a: bool, trans_b: bool, alpha: float, beta: float,
              precision: str) -> Any:
        """Row-major ``out (m, n) <- alpha op(a) op(b) + beta out`` as the column-major
        ``out.T = op(b).T op(a).T`` (every operand C-contiguous, views included)."""
        for array in (a, b, out):
            if not array.flags.c_contiguous:
                raise ValueError("the GPU GEMM needs C-contiguous operands")
        m, n = out.shape
        k = a.shape[0] if trans_a else a.shape[1]
        dtype = out.dtype
        data_type = _CUDA_R_64F if dtype == np.float64 else _CUDA_R_32F
        scalars = self._scalars.get((dtype, alpha, beta))
        if scalars is None:
            if len(self._scalars) > 64:  # a bounded cache: betas follow the momentum schedule
                self._scalars.clear()
            scalars = self._scalars[dtype, alpha, beta] = np.array([alpha, beta], dtype=dtype)
        handle = self.xp.cuda.device.get_cublas_handle()
        op_a = self._cublas.CUBLAS_OP_T if trans_a else self._cublas.CUBLAS_OP_N
        op_b = self._cublas.CUBLAS_OP_T if trans_b else self._cublas.CUBLAS_OP_N
        self._cublas.gemmEx(
            handle, op_b, op_a, n, m, k, scalars.ctypes.data,
            b.data.ptr, data_type, b.shape[1], a.data.ptr, data_type, a.shape[1],
            scalars.ctypes.data + scalars.itemsize, out.data.ptr, data_type, n,
            cublas_compute_type(dtype, precision), -1,  # CUBLAS_GEMM_DEFAULT
        )
        return out

    def matmul(self, a: Any, b: Any, out: Any, trans_b: bool = False, precision: str = "float32") -> Any:
        """``out <- a @ b`` (``a @ b.T`` with ``trans_b``)."""
        return self._gemm(a, b, out, False, trans_b, 1.0, 0.0, precision)

    def gemm_tn(self, a: Any, b: Any, c: Any, alpha: float, beta: float, precision: str = "float32") -> Any:
        """``c <- alpha * a.T @ b + beta * c``."""
        return self._gemm(a, b, c, True, False, alpha, beta, precision)

    # -- CD and fine-tuning
    def bias_sigmoid_(self, x: Any, bias: Any, scale: float = 1.0) -> Any:
        t = x.dtype.type
        self._launch("bias_sigmoid", x.dtype, x.size, x, bias, np.int64(x.size), np.int32(bias.size), t(scale))
        return x

    def bias_sigmoid_sample_(self, x: Any, bias: Any, stream: CounterStream, sample: Any, scale: float = 1.0) -> Any:
        t = x.dtype.type
        self._launch("bias_sigmoid_sample", x.dtype, x.size, x, bias, sample, np.int64(x.size), np.int32(bias.size),
                     t(scale), *self._stream_args(stream, x.size))
        return sample

    def sample_(self, x: Any, stream: CounterStream) -> Any:
        self._launch("sample_inplace", x.dtype, x.size, x, np.int64(x.size), *self._stream_args(stream, x.size))
        return x

    def bias_add_(self, x: Any, bias: Any, stream: CounterStream | None = None) -> Any:
        if stream is None:
            self._launch("bias_add", x.dtype, x.size, x, bias, np.int64(x.size), np.int32(bias.size))
        else:
            self._launch("bias_add_normal", x.dtype, x.size, x, bias, np.int64(x.size), np.int32(bias.size),
                         *self._stream_args(stream, x.size))
        return x

    def momentum_step_(self, param: Any, velocity: Any, grad: Any, momentum: float, grad_scale: float) -> None:
        t = param.dtype.type
        self._launch("momentum_step", param.dtype, param.size, param, velocity, grad, np.int64(param.size),
                     t(momentum), t(grad_scale))

    def subtract_scaled_(self, x: Any, y: Any, a: float) -> Any:
        self._launch("subtract_scaled", x.dtype, x.size, x, y, np.int64(x.size), x.dtype.type(a))
        return x

    def dropout(self, a: Any, stream: CounterStream, keep: float) -> Any:
        out = self.xp.empty_like(a)
        t = a.dtype.type
        self._launch("dropout", a.dtype, a.size, a, out, np.int64(a.size), t(keep), t(1.0 / keep),
                     *self._stream_args(stream, a.size))
        return out

    def sigmoid_backward_(self, g: Any, d: Any, a: Any) -> Any:
        self._launch("sigmoid_backward", g.dtype, g.size, g, d, a, np.int64(g.size))
        return g

    def softmax_cross_entropy(self, z: Any, labels: Any, bias: Any = None, out: Any = None,
                              total: Any = None) -> tuple[Any, Any]:
        z = self.xp.ascontiguousarray(z)
        t = z.dtype.type
        rows, classes = z.shape
        grad = self.xp.empty_like(z) if out is None else out
        loss = self.xp.empty((), dtype=z.dtype)
        labels = self.xp.ascontiguousarray(labels, dtype=np.int64)
        self._launch_blocks("softmax_xent", z.dtype, (1,), (256,), z, z if bias is None else bias,
                            np.int32(bias is not None), labels, grad, loss, loss if total is None else total,
                            np.int32(total is not None), np.int64(rows), np.int32(classes), t(1.0 / max(rows, 1)))
        return loss, grad

    def column_sums(self, x: Any, weights: Any = None, out: Any = None) -> Any:
        x = self.xp.ascontiguousarray(x)
        rows, cols = x.shape
        out = self.xp.empty(cols, dtype=x.dtype) if out is None else out
        self._launch_blocks("column_sums", x.dtype, ((cols + 31) // 32,), (32, 8), x, x if weights is None else weights,
                            np.int32(weights is not None), out, np.int64(rows), np.int32(cols))
        return out

    def row_sums(self, x: Any, out: Any = None) -> Any:
        x = self.xp.ascontiguousarray(x)
        rows, cols = x.shape
        out = self.xp.empty(rows, dtype=x.dtype) if out is None else out
        self._launch_blocks("row_sums", x.dtype, (rows,), (256,), x, out, np.int64(cols))
        return out

    # -- updaters
    def sgd_step_(self, param: Any, velocity: Any, grad: Any, momentum: float, lr: float, l2: float,
                  nesterov: bool) -> None:
        t = param.dtype.type
        self._launch("sgd_step", param.dtype, param.size, param, velocity, grad, np.int64(param.size), t(momentum),
                     t(lr), t(l2), np.int32(bool(nesterov)))

    def adagrad_step_(self, param: Any, history: Any, grad: Any, lr: float, eps: float, l2: float) -> None:
        t = param.dtype.type
        self._launch("adagrad_step", param.dtype, param.size, param, history, grad, np.int64(param.size), t(lr), t(eps),
                     t(l2))

    def adam_step_(self, param: Any, m: Any, v: Any, grad: Any, beta1: float, beta2: float, step: float, eps: float,
                   l2: float) -> None:
        t = param.dtype.type
        self._launch("adam_step", param.dtype, param.size, param, m, v, grad, np.int64(param.size), t(beta1), t(beta2),
                     t(1 - beta1), t(1 - beta2), t(step), t(eps), t(l2))

    # -- convolutional layers (CHWN)
    def bias_activation_(self, z: Any, bias: Any, activation: str) -> Any:
        self._launch("bias_activation", z.dtype, z.size, z, bias, np.int64(z.size), np.int64(z.size // bias.size),
                     np.int32(_ACTIVATION_CODES[activation]))
        return z

    def activation_backward(self, activation: str, y: Any, dy: Any) -> Any:
        dy = self.xp.ascontiguousarray(dy)
        dz = self.xp.empty_like(dy)
        self._launch("activation_backward", dy.dtype, dy.size, y, dy, dz, np.int64(dy.size),
                     np.int32(_ACTIVATION_CODES[activation]))
        return dz

    def maxpool_forward(self, x: Any, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int]) -> Any:
        a, h, w, b = x.shape
        oh, ow = _pooled(h, kernel[0], stride[0], padding[0]), _pooled(w, kernel[1], stride[1], padding[1])
        out = self.xp.empty((a, oh, ow, b), dtype=x.dtype)
        self._launch("maxpool_forward", x.dtype, out.size, x, out, np.int64(out.size), *map(np.int32, (
            h, w, b, oh, ow, *kernel, *stride, *padding)))
        return out

    def maxpool_backward(self, dout: Any, out: Any, x: Any, kernel: tuple[int, int], stride: tuple[int, int],
                         padding: tuple[int, int]) -> Any:
        a, h, w, b = x.shape
        _, oh, ow, _ = out.shape
        disjoint = stride[0] >= kernel[0] and stride[1] >= kernel[1]
        # Disjoint windows that tile the input write every element of dx themselves.
        tiled = disjoint and tuple(stride) == tuple(kernel) and (oh * kernel[0], ow * kernel[1]) == (h, w) \
            and padding == (0, 0)
        dx = (self.xp.empty if tiled else self.xp.zeros)(x.shape, dtype=x.dtype)
        self._launch("maxpool_backward", x.dtype, out.size, x, out, dout, dx, np.int64(out.size), *map(np.int32, (
            h, w, b, oh, ow, *kernel, *stride, *padding, disjoint)))
        return dx


def _pooled(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


@functools.lru_cache(maxsize=None)
def _ops_for_device(device_id: int) -> CudaOps:
    return CudaOps()


def cuda_kernels() -> CudaOps:
    """The fused operations of the current CUDA device (one compiled module per device and process)."""
    import cupy

    return _ops_for_device(cupy.cuda.Device().id)
