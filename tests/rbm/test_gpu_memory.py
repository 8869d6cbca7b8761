"""The GPU data cache's memory rules and the upload's stream, on the CPU: the fake cupy of tests/support answers
free memory and the current stream, and a recording upload stands in for the copy.

One pool per GPU split evenly among the processes on it (not 50% then 25%), evictions before the upload that
needs their room (the cache never holds more than its budget), a partition larger than the budget said and
counted, a share that shrinks honoured on hits too, no reference to an evicted partition left in a ConvNet, and the
upload's copies queued on the stream that the array's readers use.
"""

from __future__ import annotations

import os

from types import SimpleNamespace

import numpy as np
import pytest

import rbm
from rbm._gpu import _transfer
from rbm._gpu._budget import SharedGpuBudget
from rbm._gpu._transfer import DeviceDataCache, upload
from support.fake_gpu import install_fake_cupy

MB = 1 << 20


class Uploads:
    """A stand-in for the pinned upload: a host copy, and what the cache held when each copy was made."""

    def __init__(self, cache: DeviceDataCache | None = None) -> None:
        self.cache, self.held_at_upload = cache, []

    def __call__(self, array: np.ndarray, xp) -> np.ndarray:
        self.held_at_upload.append(self.cache.used_bytes if self.cache is not None else 0)
        return array.copy()


def partition(megabytes: int) -> np.ndarray:
    return np.zeros(megabytes * MB, dtype=np.uint8)


def test_the_cache_evicts_before_it_uploads_so_it_never_holds_more_than_its_budget(monkeypatch):
    cupy = install_fake_cupy(monkeypatch)
    cache = DeviceDataCache(budget_bytes=10 * MB)
    uploads = Uploads(cache)
    monkeypatch.setattr(_transfer, "upload", uploads)
    for key in range(4):  # 4 MB each: the third needs the first's room
        cache.get(key, partition(4), cupy)
    assert uploads.held_at_upload == [0, 4 * MB, 4 * MB, 4 * MB]  # room made first, then the copy
    assert cache.peak_bytes == 8 * MB <= cache.budget_bytes
    assert cache.report()["evictions"] == 2 and cache.report()["entries"] == 2


def test_a_partition_larger_than_the_budget_is_said_counted_and_not_kept(monkeypatch, caplog):
    cupy = install_fake_cupy(monkeypatch)
    cache = DeviceDataCache(budget_bytes=10 * MB)
    monkeypatch.setattr(_transfer, "upload", Uploads(cache))
    cache.get("small", partition(4), cupy)
    for _ in range(3):  # every pass uploads it again: nothing of it stays
        cache.get("big", partition(12), cupy)
    report = cache.report()
    assert (report["oversize"], report["misses"], report["entries"], report["used_bytes"]) == (3, 4, 0, 0)
    said = [record.getMessage() for record in caplog.records if "larger than the cache's budget" in record.message]
    assert said == ["device data cache: a partition of 12.6 MB is larger than the cache's budget of 10.5 MB: it is "
                    "uploaded again for every pass (more nodes per GPU than its memory holds? fewer, or more "
                    "partitions)"]


def test_nodes_sharing_a_gpu_split_one_pool_evenly_instead_of_halving_what_is_left(monkeypatch, tmp_path):
    cupy = install_fake_cupy(monkeypatch, {"free": 64 * MB})
    first = DeviceDataCache(shared=SharedGpuBudget("gpu-0", folder=str(tmp_path)))
    monkeypatch.setattr(_transfer, "upload", Uploads(first))
    first.get(0, partition(1), cupy)
    assert first.budget_bytes == 32 * MB  # half the free memory is the GPU's pool; alone, all of it is this node's
    monkeypatch.setenv("FAKE_CUPY_GPUS", '[{"name": "g", "total": 1, "free": 33554432}]')  # the first holds some now
    second = DeviceDataCache(shared=SharedGpuBudget("gpu-0", folder=str(tmp_path), pid=os.getppid()))
    second.get(0, partition(1), cupy)
    first.get(1, partition(1), cupy)
    assert first.budget_bytes == second.budget_bytes == 16 * MB  # one pool, two equal shares (not 32 MB then 8 MB)
    second.clear()  # a node that ends gives its share back
    first.get(2, partition(1), cupy)
    assert first.budget_bytes == 32 * MB


def test_a_node_whose_partitions_all_hit_gives_up_the_share_a_new_node_on_its_gpu_takes(monkeypatch, tmp_path):
    cupy = install_fake_cupy(monkeypatch, {"free": 64 * MB})
    first = DeviceDataCache(shared=SharedGpuBudget("gpu-0", folder=str(tmp_path)))
    monkeypatch.setattr(_transfer, "upload", Uploads(first))
    for key in range(6):  # 30 MB of its 32 MB share: alone on the GPU
        first.get(key, partition(5), cupy)
    second = DeviceDataCache(shared=SharedGpuBudget("gpu-0", folder=str(tmp_path), pid=os.getppid()))
    second.get("x", partition(1), cupy)
    kept = first.get(5, partition(5), cupy)  # every later epoch of the first node hits
    assert first.report()["misses"] == 6 and first.budget_bytes == 16 * MB
    assert first.used_bytes == 15 * MB and first.report()["entries"] == 3  # the least recently used went
    assert kept.nbytes == 5 * MB and first.get(5, partition(5), cupy) is kept  # the partition in use stays


def test_a_convnet_keeps_no_reference_to_a_partition_its_node_handed_over_on_the_gpu():
    net = rbm.ConvNet(layers=[{"type": "conv", "filters": 2, "kernel": 3}, {"type": "flatten"}], input_shape=(1, 8, 8),
                      n_classes=10, batch_size=4, random_state=0).initialize()
    net._xp = SimpleNamespace(asarray=lambda array, dtype=None: np.asarray(array, dtype=dtype))  # a GPU namespace
    X, y, order = np.zeros((4, 1, 8, 8), np.float32), np.arange(4), np.arange(4)
    net._resident(X, y, order)  # host rows (a fit of its own): uploaded once and kept for the next passes
    assert net.__dict__["_resident_data"][0] is X
    on_device = SimpleNamespace(shape=X.shape)  # rows the node's data cache holds on the GPU
    assert net._resident(on_device, y, order)[0] is on_device
    assert "_resident_data" not in net.__dict__  # the cache may evict it: nothing here keeps it alive


def test_a_member_whose_process_ended_no_longer_takes_a_share(tmp_path):
    budget = SharedGpuBudget("GPU-ab/cd", folder=str(tmp_path))
    assert budget.join(free_bytes=100 * MB) == 50 * MB
    (tmp_path / "GPU-ab_cd" / "999999999.member").write_text("")  # no such process
    assert budget.share_bytes() == 50 * MB and not (tmp_path / "GPU-ab_cd" / "999999999.member").exists()
    with pytest.raises(ValueError, match="fraction must be in"):
        SharedGpuBudget("g", folder=str(tmp_path), fraction=0.0)


class DeviceBuffer:
    """A device array of the fake cupy: records the stream each copy into it was queued on."""

    streams: list = []

    def __init__(self, shape, dtype=np.uint8, data=None) -> None:
        self.data = np.empty(shape, dtype) if data is None else data
        self.shape, self.dtype = self.data.shape, self.data.dtype

    def reshape(self, *shape):
        return DeviceBuffer(None, data=self.data.reshape(*shape))

    def view(self, dtype):
        return DeviceBuffer(None, data=self.data.view(dtype))

    def __getitem__(self, item):
        return DeviceBuffer(None, data=self.data[item])

    def set(self, host, stream=None) -> None:
        DeviceBuffer.streams.append(stream)
        self.data[...] = host


def test_the_upload_queues_its_copies_on_the_current_stream_behind_the_kernels_already_there(monkeypatch):
    cupy = install_fake_cupy(monkeypatch)
    monkeypatch.setattr(cupy, "empty", lambda shape, dtype: DeviceBuffer(shape, dtype))
    monkeypatch.setattr(_transfer, "PINNED_CHUNK_BYTES", 1000)
    DeviceBuffer.streams = []
    host = np.arange(3000, dtype=np.float32)  # 12 kB: 12 chunks through the two staging buffers
    out = upload(host, cupy)
    np.testing.assert_array_equal(out.data, host)
    assert len(DeviceBuffer.streams) == 12 and all(stream is cupy.cuda.get_current_stream()
                                                   for stream in DeviceBuffer.streams)
