"""cuDNN's plans on the CPU: the process's plan cache keyed by shape, batch, dtype, precision and device, which
keeps every batch size that near-equal partitions bring (no rebuild partition after partition), as do im2col's
buffers where cuDNN is not used; the warm-up's batch; and the convolution backend a node reports.  The graphs themselves need a GPU (tests/rbm/test_gpu.py)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import rbm
from rbm.conv import _cudnn, _layers
from rbm.conv._cudnn import PlanCache, plan_key
from rbm._warm_up import warm_up_rows
from support.fake_gpu import install_fake_cupy


def minibatch_sizes(rows: int, partitions: int, batch: int, epochs: int) -> list[int]:
    """The minibatch sizes a layer meets, in order, over ``epochs`` passes of ``np.array_split`` partitions."""
    sizes = []
    for _ in range(epochs):
        for part in np.array_split(np.arange(rows), partitions):
            sizes += [min(batch, len(part) - start) for start in range(0, len(part), batch)]
    return sizes


def test_partitions_that_differ_by_a_row_build_each_batch_sizes_plans_once():
    sizes = minibatch_sizes(1000, 7, 64, epochs=3)  # 143- and 142-row partitions: minibatches of 64, 15 and 14
    assert set(sizes) == {64, 15, 14}
    cache, built = PlanCache(), []
    for n in sizes + [256]:  # then a prediction chunk
        cache.get(("conv1", n), lambda n=n: built.append(n) or n)
    assert built == [64, 15, 14, 256] and cache.hits == len(sizes) - 3


def test_the_im2col_buffers_of_partitions_that_differ_by_a_row_are_allocated_once_per_batch_size():
    layer = _layers.build_layer("conv1", {"type": "conv", "filters": 2, "kernel": 3, "padding": 1}, (1, 6, 6), np,
                                np.dtype(np.float32))
    sizes = minibatch_sizes(1000, 7, 64, epochs=3) + [256]  # the minibatches of 64, 15 and 14 rows, then a chunk
    first = {n: layer._scratch(n) for n in sorted(set(sizes))}
    assert all(layer._scratch(n) is first[n] for n in sizes)  # kept, not rebuilt partition after partition


def test_the_least_recently_used_plan_goes_when_the_cache_is_full():
    cache = PlanCache(capacity=2)
    for n in (1, 2, 1, 3):
        cache.get(n, lambda n=n: n)
    assert cache.builds == 3 and len(cache) == 2
    cache.get(2, lambda: 2)  # 2 was the least recently used: built again
    assert cache.builds == 4
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        PlanCache(capacity=0)


def test_a_plan_is_keyed_by_precision_dtype_and_device_beside_its_shape_and_batch():
    base = dict(input_shape=(1, 28, 28), filters=20, kernel=(5, 5), stride=(1, 1), padding=(0, 0), batch=64,
                dtype=np.float32, precision="float32", device=0)
    keys = {plan_key(**base), plan_key(**{**base, "precision": "tf32"}), plan_key(**{**base, "device": 1}),
            plan_key(**{**base, "dtype": np.float64}), plan_key(**{**base, "batch": 63})}
    assert len(keys) == 5 and plan_key(**base) == plan_key(**{**base, "dtype": "float32"})


def test_a_conv_layer_on_the_gpu_takes_its_plans_from_the_process_cache_by_its_device(monkeypatch):
    cupy = install_fake_cupy(monkeypatch, {}, {})
    built = []
    monkeypatch.setattr(_layers, "cudnn_available", lambda: True)
    monkeypatch.setattr(_layers, "CudnnConvolution", lambda *args: built.append(args) or object())
    monkeypatch.setattr(_layers, "PLAN_CACHE", PlanCache())
    net = rbm.ConvNet(layers=[{"type": "conv", "filters": 4, "kernel": 3}, {"type": "flatten"}],
                      input_shape=(1, 8, 8), n_classes=2).initialize()
    layer = next(layer for layer in net.layers_ if isinstance(layer, _layers.Conv2D))
    monkeypatch.setattr(layer, "xp", cupy)
    for n in minibatch_sizes(100, 3, 16, epochs=2):
        layer._convolution(n)
    with cupy.cuda.Device(1):
        layer._convolution(16)
    assert [args[5] for args in built] == [16, 2, 1, 16]  # batch sizes 16, then 34- and 33-row remainders; GPU 1's own


def test_the_warm_up_trains_on_one_minibatch_of_the_models_own_size():
    assert warm_up_rows(rbm.DBN(hidden_layer_sizes=(8,), batch_size=100)) == 100
    assert warm_up_rows(rbm.lenet(batch_size=64)) == 64


@pytest.mark.skipif(importlib.util.find_spec("cudnn") is not None, reason="cuDNN's frontend is installed here")
def test_a_gpu_node_without_cudnns_frontend_reports_its_im2col_convolutions():
    _cudnn._cudnn.cache_clear()
    assert _cudnn.convolution_backend() == ("im2col: nvidia-cudnn-frontend is not installed "
                                            "(pip install 'sparkdbn[gpu]')")
    assert rbm.conv.convolution_backend is _cudnn.convolution_backend
