"""Convolutions on cupy arrays through cuDNN's graph API (NVIDIA's ``nvidia-cudnn-frontend``).

CuPy 14 has no cuDNN module of its own; the frontend's Python graphs take raw device
pointers, so cupy arrays run through them as they are.  One :class:`CudnnConvolution` per
layer and batch size holds three graphs -- forward, data gradient, filter gradient -- each
validated, planned (heuristics A, then the fallback list) and built once, with its own
workspace; later calls only execute.  The tensors are described in the net's CHWN layout
(logical NCHW dimensions with the batch's stride 1), so no transposes are needed; where no
engine supports that layout the graphs fall back to NCHW-packed buffers and one transpose
each way.  Precision ``"float32"`` deselects the tensor-core (TF32) engines, ``"tf32"`` and
``"bfloat16"`` allow them.  im2col + GEMM stays the CPU branch (and the GPU's fallback when
the frontend is not installed; :func:`convolution_backend` says which, for the node's device report).

Plans are cached per process in one :class:`PlanCache`, keyed by everything a plan depends on:
the layer's shape (input, filters, kernel, stride, padding), the batch size, the dtype, the
precision and the device (:func:`plan_key`).  It keeps the :data:`PLAN_CACHE_SIZE` most recently
used: ``np.array_split`` partitions differ by a row, so a layer meets its training minibatch, the
last minibatch of each partition length (two of them), and a prediction chunk -- all kept, none
rebuilt partition after partition.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

import numpy as np

__all__ = ["CudnnConvolution", "cudnn_available", "convolution_backend", "PlanCache", "plan_key", "PLAN_CACHE",
           "PLAN_CACHE_SIZE"]

#: Plans kept per process: a few layers' training, remainder and prediction batch sizes.
PLAN_CACHE_SIZE = 32

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _cudnn() -> Any:
    try:
        import cudnn  # nvidia-cudnn-frontend, the "gpu" extra
    except ImportError as error:
        logger.warning("nvidia-cudnn-frontend is not installed (%s): GPU convolutions use im2col + GEMM", error)
        return None
    return cudnn


def cudnn_available() -> bool:
    """True when the cuDNN frontend imports (convolutions on cupy then use it)."""
    return _cudnn() is not None


def convolution_backend() -> str:
    """How convolutions on cupy arrays run in this process: ``"cudnn"``, or ``"im2col: <why>"``."""
    if cudnn_available():
        return "cudnn"
    return "im2col: nvidia-cudnn-frontend is not installed (pip install 'sparkdbn[gpu]')"


def plan_key(input_shape: tuple[int, ...], filters: int, kernel: tuple[int, int], stride: tuple[int, int],
             padding: tuple[int, int], batch: int, dtype: Any, precision: str, device: int) -> tuple:
    """What a layer's cuDNN plans depend on: its shape, the batch size, dtype, precision and device."""
    return (tuple(int(v) for v in input_shape), int(filters), tuple(kernel), tuple(stride), tuple(padding),
            int(batch), np.dtype(dtype).str, str(precision), int(device))


class PlanCache:
    """The most recently used plans of a process, built once per key (thread-safe).

    Parameters
    ----------
    capacity : int
        How many are kept; the least recently used goes first.
    """

    def __init__(self, capacity: int = PLAN_CACHE_SIZE) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._plans: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.builds = self.hits = 0

    def get(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The plan of ``key``, built by ``build()`` the first time (and after it was dropped)."""
        with self._lock:
            if key in self._plans:
                self.hits += 1
                self._plans.move_to_end(key)
                return self._plans[key]
        plan = build()
        with self._lock:
            self.builds += 1
            self._plans[key] = plan
            self._plans.move_to_end(key)
            while len(self._plans) > self.capacity:
                self._plans.popitem(last=False)
        return plan

    def __len__(self) -> int:
        return len(self._plans)


#: The process's cuDNN plans (:meth:`rbm.conv._layers.Conv2D._convolution` asks it).
PLAN_CACHE = PlanCache()


@functools.lru_cache(maxsize=None)
def _handle(device_id: int) -> Any:
    return _cudnn().create_handle()


class CudnnConvolution:
    """The three convolutions of one layer at one batch size, on (C, H, W, N) cupy arrays.

    Parameters
    ----------
    input_shape : (C, H, W); filters : F; kernel, stride, padding : pairs; batch : N
    dtype : float32 or float64; precision : see :mod:`rbm._gpu._precision`
    """

    def __init__(self, input_shape: tuple[int, int, int], filters: int, kernel: tuple[int, int],
                 stride: tuple[int, int], padding: tuple[int, int], batch: int, dtype: Any, precision: str) -> None:
        import cupy

        self.xp = cupy
        cudnn = _cudnn()
        c, h, w = input_shape
        oh = (h + 2 * padding[0] - kernel[0]) // stride[0] + 1
        ow = (w + 2 * padding[1] - kernel[1]) // stride[1] + 1
        self.x_dims, self.y_dims, self.w_dims = [batch, c, h, w], [batch, filters, oh, ow], [filters, c, *kernel]
        self.settings = {"padding": list(padding), "stride": list(stride), "dilation": [1, 1]}
        self.io_type = cudnn.data_type.DOUBLE if np.dtype(dtype) == np.float64 else cudnn.data_type.FLOAT
        self.compute_type = self.io_type
        self.strict = precision == "float32"
        self.handle = _handle(cupy.cuda.Device().id)
        self.chwn = True
        try:
            self.graphs = self._build_all(chwn=True)
        except Exception as error:  # the frontend raises cudnnGraphNotSupportedError and RuntimeErrors
            logger.info("cuDNN has no engine for the CHWN layout of %s (%s): using NCHW with transposes", self.x_dims,
                        error)
            self.chwn = False
            self.graphs = self._build_all(chwn=False)

    # -- graph construction
    @staticmethod
    def _strides(dims: list[int], chwn: bool) -> list[int]:
        n, c, h, w = dims
        return [1, h * w * n, w * n, n] if chwn else [c * h * w, h * w, w, 1]

    def _graph(self) -> Any:
        cudnn = _cudnn()
        return cudnn.pygraph(io_data_type=self.io_type, intermediate_data_type=self.compute_type,
                             compute_data_type=self.compute_type, handle=self.handle)

    def _tensor(self, graph: Any, name: str, dims: list[int], strides: list[int]) -> Any:
        return graph.tensor(name=name, dim=dims, stride=strides, data_type=self.io_type)

    def _finish(self, graph: Any, output: Any, dims: list[int], strides: list[int]) -> tuple[Any, Any]:
        cudnn = _cudnn()
        output.set_output(True)
        output.set_dim(dims)
        output.set_stride(strides)
        output.set_data_type(self.io_type)
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        if self.strict and self.io_type == cudnn.data_type.FLOAT:
            graph.deselect_numeric_notes([cudnn.numerical_note.TENSOR_CORE])  # no TF32: float32 as on the CPU
        graph.check_support()
        graph.build_plans()
        workspace = self.xp.empty(max(int(graph.get_workspace_size()), 1), dtype=np.uint8)
        return graph, workspace

    def _build_all(self, chwn: bool) -> dict[str, tuple[Any, ...]]:
        x_strides, y_strides = self._strides(self.x_dims, chwn), self._strides(self.y_dims, chwn)
        w_strides = self._strides(self.w_dims, False)
        graphs = {}
        g = self._graph()
        X, W = self._tensor(g, "X", self.x_dims, x_strides), self._tensor(g, "W", self.w_dims, w_strides)
        Y = g.conv_fprop(image=X, weight=W, compute_data_type=self.compute_type, **self.settings)
        graphs["forward"] = (*self._finish(g, Y, self.y_dims, y_strides), X, W, Y)
        g = self._graph()
        DY, W = self._tensor(g, "DY", self.y_dims, y_strides), self._tensor(g, "W", self.w_dims, w_strides)
        DX = g.conv_dgrad(loss=DY, filter=W, compute_data_type=self.compute_type, **self.settings)
        graphs["data"] = (*self._finish(g, DX, self.x_dims, x_strides), DY, W, DX)
        g = self._graph()
        X, DY = self._tensor(g, "X", self.x_dims, x_strides), self._tensor(g, "DY", self.y_dims, y_strides)
        DW = g.conv_wgrad(image=X, loss=DY, compute_data_type=self.compute_type, **self.settings)
        graphs["filter"] = (*self._finish(g, DW, self.w_dims, w_strides), X, DY, DW)
        return graphs

    # -- execution
    def _run(self, which: str, first: Any, second: Any, out: Any) -> Any:
        graph, workspace, a, b, result = self.graphs[which]
        _cudnn().set_stream(handle=self.handle, stream=self.xp.cuda.get_current_stream().ptr)
        graph.execute({a: first.data.ptr, b: second.data.ptr, result: out.data.ptr}, workspace.data.ptr,
                      handle=self.handle)
        return out

    def _to_layout(self, chwn_array: Any) -> Any:
        return chwn_array if self.chwn else self.xp.ascontiguousarray(chwn_array.transpose(3, 0, 1, 2))

    def _from_layout(self, array: Any) -> Any:
        return array if self.chwn else self.xp.ascontiguousarray(array.transpose(1, 2, 3, 0))

    def _empty(self, nchw_dims: list[int], dtype: Any) -> Any:
        n, c, h, w = nchw_dims
        return self.xp.empty((c, h, w, n) if self.chwn else (n, c, h, w), dtype=dtype)

    def forward(self, x: Any, weights: Any) -> Any:
        """``x`` (C, H, W, N) and ``weights`` (F, C, KH, KW) -> (F, OH, OW, N)."""
        y = self._empty(self.y_dims, x.dtype)
        return self._from_layout(self._run("forward", self._to_layout(x), weights, y))

    def backward_data(self, dy: Any, weights: Any) -> Any:
        """``dy`` (F, OH, OW, N) -> the input gradient (C, H, W, N)."""
        dx = self._empty(self.x_dims, dy.dtype)
        return self._from_layout(self._run("data", self._to_layout(dy), weights, dx))

    def backward_filter(self, x: Any, dy: Any) -> Any:
        """``x`` (C, H, W, N), ``dy`` (F, OH, OW, N) -> the filter gradient (F, C, KH, KW)."""
        dw = self.xp.empty(self.w_dims, dtype=dy.dtype)
        return self._run("filter", self._to_layout(x), self._to_layout(dy), dw)
