"""What a node does with a GPU it cannot use, and how its CUDA work stays on its own GPU -- on a machine without
GPUs, through the fake cupy of tests/support (it answers device counts, properties and free memory; every device
allocation fails as on a full GPU): busy, exclusive-process and full GPUs refused in one line (``"gpu"``) or left
for the CPU with the reason (``"auto"``), free memory reported, the probe run in a child process that takes its
CUDA context with it, a node replaced when its task holds another GPU, and a warm-up per GPU in the real batch size.
"""

from __future__ import annotations

import dataclasses
import weakref
from types import SimpleNamespace

import numpy as np
import pytest

import rbm
from node import NodeDeviceError
from node._contract import NodeConfig, NodeDevice, decode, encode
from node.executor import _device, _node, _tasks
from node.executor._node import ExecutorNode
from node.executor._probe import probe_in_child
from rbm._warm_up import warm_up_rows
from support.fake_gpu import FAKE_CUPY_PATH, gpus_env, install_fake_cupy

BUSY = {"name": "Busy GPU", "busy": True}
FULL = {"name": "Full GPU", "free": 100 << 20}


def test_a_gpu_in_exclusive_process_mode_held_elsewhere_is_refused_for_gpu_and_left_for_the_cpu_by_auto(monkeypatch):
    install_fake_cupy(monkeypatch, BUSY)
    gpu, auto = _device.see_device("gpu", "n1", ("0",)), _device.see_device("auto", "n1", ("0",))
    assert gpu.kind == "cpu" and "\n" not in _device.device_failure(gpu)
    assert gpu.problem == ("device='gpu' but no usable GPU: Spark assigned GPU 0, but it is not usable here: "
                           "CUDARuntimeError: cudaErrorDevicesUnavailable: CUDA-capable device(s) is/are busy or "
                           "unavailable")
    assert (auto.kind, auto.problem) == ("cpu", None)
    assert auto.reason.startswith("device='auto' computes on the CPU: Spark assigned GPU 0, but it is not usable here")


def test_a_full_gpu_is_refused_with_its_free_memory_and_auto_computes_on_the_cpu(monkeypatch):
    install_fake_cupy(monkeypatch, FULL)
    gpu, auto = _device.see_device("gpu", "n1", ("0",)), _device.see_device("auto", "n1", ("0",))
    why = "Spark assigned GPU 0 (Full GPU), but it is full: 100 MiB free of 81920 MiB, a node needs 256 MiB"
    assert gpu.problem == f"device='gpu' but no usable GPU: {why}" and gpu.free_bytes == 100 << 20
    assert (auto.kind, auto.problem, auto.reason) == ("cpu", None, f"device='auto' computes on the CPU: {why}")


def test_a_usable_gpu_reports_its_free_memory_beside_its_total(monkeypatch):
    install_fake_cupy(monkeypatch, {"free": 3 << 30, "total": 80 << 30})
    device = _device.see_device("auto", "n1", ("0",))
    assert (device.kind, device.free_bytes, device.memory_bytes) == ("gpu", 3 << 30, 80 << 30)
    assert device.reason == "Spark assigned GPU 0 (3.0 GiB free of 80.0 GiB)"


def test_cuda_work_of_any_thread_is_bound_to_the_nodes_gpu(monkeypatch):
    cupy = install_fake_cupy(monkeypatch, {}, {}, {})
    device = _device.see_device("gpu", "n1", ("2",))
    cupy.calls.clear()
    with _device.bound_to(device):
        assert cupy.cuda.Device().id == 2  # cupy's current device in this thread: the node's, not device 0
    assert cupy.cuda.Device().id == 0 and cupy.calls == [("enter", 2)]
    with _device.bound_to(_device.see_device("cpu", "n1", ("2",))):  # nothing is opened for a CPU node
        pass
    assert cupy.calls == [("enter", 2)]


def test_a_node_on_another_gpu_than_its_task_holds_is_replaced_and_one_on_its_own_stays():
    node = NodeDevice(kind="gpu", host="h", node="h-1", address="1", index=1)
    assert _device.moved_from(node, ("1",)) is None
    assert _device.moved_from(node, ("0",)) == ("node h-1 runs on GPU 1 but its task holds GPU 0: the node is "
                                                "replaced on the task's GPU")
    assert _device.moved_from(NodeDevice(kind="cpu", host="h"), ("0",)) is None  # a CPU node goes anywhere
    assert _device.moved_from(node, ()) is None  # a task without GPUs (a release job): nothing to move to


def test_the_warm_up_runs_once_per_gpu_and_in_the_models_minibatch_size(monkeypatch):
    rows_seen = []
    monkeypatch.setattr(rbm, "warm_up", lambda model, rows=None: rows_seen.append(warm_up_rows(model)) or 0.5)
    model = rbm.DBN(hidden_layer_sizes=(8,), batch_size=37, random_state=0)
    model.initialize(16, np.arange(2))
    on_0, on_1 = (NodeDevice(kind="gpu", host="h", address=a, index=int(a)) for a in ("0", "1"))
    monkeypatch.setattr(_device, "_warmed", set())
    assert _device.warm_up_once(model, on_0).warm_up_s == 0.5
    assert _device.warm_up_once(model, on_0).warm_up_s == 0.0  # warmed on this GPU already
    assert _device.warm_up_once(model, on_1).warm_up_s == 0.5  # another GPU compiles its own plans
    assert rows_seen == [37, 37]


def a_config(device: str) -> bytes:
    return encode(NodeConfig(run="r1", fit_id="f1", store_url="file:///tmp/s", store_retry_timeout_s=30.0,
                             key=b"\x00\x01" * 16, spec=rbm.DBN(hidden_layer_sizes=(8,), device=device).to_spec(),
                             feature_shape=(16,), classes=(0, 1), seed=0, fanout=None, merge_alpha=0.5,
                             keep_versions=3, anti_entropy_interval_s=2.0, peer_refresh_interval_s=0.5,
                             flush_timeout_s=60.0))


@pytest.fixture
def child_sees_fake_gpus(monkeypatch):
    """The probe's child process imports the fake cupy first (it inherits this process's sys.path and environment)."""
    monkeypatch.syspath_prepend(FAKE_CUPY_PATH)

    def show(*gpus: dict) -> None:
        monkeypatch.setenv("FAKE_CUPY_GPUS", gpus_env(*gpus))
    return show


def test_the_probe_opens_the_gpu_in_a_child_process_and_its_out_of_memory_replica_is_one_line_not_a_raise(
        child_sees_fake_gpus):
    child_sees_fake_gpus({})  # usable by its free memory; the replica's first allocation fails
    gpu = probe_in_child(a_config("gpu"), "n1", ("0",))
    assert gpu.problem == ("the model cannot be built on GPU 0: OutOfMemoryError: out of memory to allocate on the "
                           "fake GPU")
    assert (gpu.kind, gpu.free_bytes) == ("gpu", 70 << 30)
    auto = probe_in_child(a_config("auto"), "n1", ("0",))
    assert (auto.kind, auto.problem) == ("cpu", None)
    assert auto.reason == ("device='auto' computes on the CPU: the model cannot be built on GPU 0: OutOfMemoryError: "
                           "out of memory to allocate on the fake GPU")


def test_the_probe_of_a_busy_gpu_says_so_from_its_child(child_sees_fake_gpus):
    child_sees_fake_gpus(BUSY)
    gpu = probe_in_child(a_config("gpu"), "n1", ("0",))
    assert gpu.problem.endswith("CUDA-capable device(s) is/are busy or unavailable") and gpu.kind == "cpu"


def test_a_probe_child_that_dies_is_a_problem_for_gpu_and_the_cpu_for_auto(child_sees_fake_gpus, monkeypatch):
    child_sees_fake_gpus({})
    monkeypatch.setenv("FAKE_CUPY_CRASH", "1")  # the child ends as its cupy imports, as with a crashing driver
    gpu = probe_in_child(a_config("gpu"), "n1", ("0",))
    assert gpu.problem == "the device probe failed: RuntimeError: the probe process ended with code 3: no output"
    auto = probe_in_child(a_config("auto"), "n1", ("0",))
    assert auto.kind == "cpu" and auto.problem is None and "the device probe failed" in auto.reason


class RecordedNode:
    """A stand-in for ExecutorNode in the worker's registry: started on its task's GPU, stopped when told."""

    def __init__(self, config: NodeConfig) -> None:
        self.config, self.device, self.stopped = config, None, False

    def start(self) -> "RecordedNode":
        address = _tasks.task_gpu_addresses()[0]
        self.device = NodeDevice(kind="gpu", host="h", node="h-1", address=address, index=int(address))
        return self

    def stop(self) -> None:
        self.stopped = True


def test_a_worker_whose_task_holds_another_gpu_replaces_its_node_there(monkeypatch):
    monkeypatch.setattr(_tasks, "ExecutorNode", RecordedNode)
    monkeypatch.setattr(_tasks, "settle_worker_heap", lambda: None)
    monkeypatch.setattr(_tasks, "_nodes", {})
    config = decode(a_config("gpu"), NodeConfig)
    monkeypatch.setattr(_tasks, "task_gpu_addresses", lambda: ("1",))
    first = _tasks._node_for(config)
    assert _tasks._node_for(config) is first and first.device.address == "1"  # the same GPU: the node stays
    monkeypatch.setattr(_tasks, "task_gpu_addresses", lambda: ("0",))
    moved = _tasks._node_for(config)
    assert moved is not first and first.stopped and moved.device.address == "0" and not moved.stopped


def test_the_probe_task_asks_a_child_process_whenever_its_task_holds_a_gpu(monkeypatch):
    asked = []
    monkeypatch.setattr(_tasks, "task_gpu_addresses", lambda: ("0",))
    monkeypatch.setattr(_tasks, "probe_in_child", lambda encoded, node, addresses: asked.append(
        ("child", tuple(addresses))) or NodeDevice(kind="cpu", host="h"))
    monkeypatch.setattr(_tasks, "probe_here", lambda *args: asked.append("here") or NodeDevice(kind="cpu", host="h"))
    for device in ("gpu", "auto", "cpu"):
        list(_tasks.probe_device_task(a_config(device), 0, iter(())))
    assert asked == [("child", ("0",)), ("child", ("0",)), "here"]  # a CPU model opens no GPU: no child needed


def a_node(device: str, tmp_path) -> ExecutorNode:
    config = decode(a_config(device), NodeConfig)
    return ExecutorNode(dataclasses.replace(config, store_url=f"file://{tmp_path / 'store'}"))


def test_an_auto_node_whose_gpu_cannot_hold_its_replica_computes_on_the_cpu_and_a_gpu_node_says_why(monkeypatch,
                                                                                                    tmp_path):
    cupy = install_fake_cupy(monkeypatch, {})  # usable by its free memory (the probe's check); the build runs out
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setattr(_device, "task_gpu_addresses", lambda: ("0",))
    node = a_node("auto", tmp_path).start()
    try:
        assert (node.device.kind, node.device.problem, node.device.address) == ("cpu", None, "0")
        assert node.device.reason == ("device='auto' computes on the CPU: the model cannot be built on GPU 0: "
                                      "OutOfMemoryError: out of memory to allocate on the fake GPU")
        assert isinstance(node.model.layers_[0]._W, np.ndarray) and node.device_data is None
        assert ("free_all_blocks", 0) in cupy.calls  # what the build took on the GPU went back to it
    finally:
        node.stop()
    with pytest.raises(NodeDeviceError) as refused:
        a_node("gpu", tmp_path).start()
    assert str(refused.value).endswith("(GPU address 0): the model cannot be built on GPU 0: OutOfMemoryError: out "
                                       "of memory to allocate on the fake GPU") and "\n" not in str(refused.value)


def test_a_convnet_node_on_a_gpu_reports_how_its_convolutions_run(monkeypatch):
    on_gpu = NodeDevice(kind="gpu", host="h", node="h-1", address="0", index=0)
    monkeypatch.setattr(_device, "build_replica", lambda *args: object())
    monkeypatch.setattr(_device, "warm_up_once", lambda model, device: device)
    monkeypatch.setattr(rbm.conv, "convolution_backend", lambda: "im2col: no cuDNN here")
    lenet = rbm.lenet(device="gpu").to_spec()
    assert _device.replica_on(lenet, (1, 28, 28), None, on_gpu)[1].convolutions == "im2col: no cuDNN here"
    dbn = rbm.DBN(hidden_layer_sizes=(8,), device="gpu").to_spec()
    assert _device.replica_on(dbn, (16,), None, on_gpu)[1].convolutions == ""  # a DBN has no convolutions


def test_every_training_task_makes_its_nodes_gpu_current_before_it_touches_data_or_weights(monkeypatch):
    steps = []
    node = SimpleNamespace(use_device=lambda: steps.append("use_device"),
                           data=SimpleNamespace(slot=lambda slots: steps.append("data") or []),
                           enter_phase=lambda *args, **kwargs: steps.append("enter_phase"))
    task = SimpleNamespace(mode="async", options=None, node=None, slots=[[0]], phase="rbm0", start_digest="d",
                           start_nodes=(), start_versions={})
    mode = SimpleNamespace(options_type=type(None), joins_from_store=True,
                           train_task=lambda *args, **kwargs: iter(()))
    monkeypatch.setattr(_tasks, "decode", lambda encoded, kind: task)
    monkeypatch.setattr(_tasks, "mode_named", lambda name: mode)
    monkeypatch.setattr(_tasks, "_node_for", lambda config: node)
    list(_tasks.run_training_task(b"", None, 0, iter([0])))
    assert steps == ["use_device", "data", "enter_phase"]


def test_a_stopped_gpu_node_drops_its_replica_then_frees_the_pool_of_its_own_gpu(monkeypatch):
    cupy = install_fake_cupy(monkeypatch, {}, {})
    node = ExecutorNode(decode(a_config("gpu"), NodeConfig))
    node.device = NodeDevice(kind="gpu", host="h", node="h-1", address="1", index=1)
    node.device_data = rbm.DeviceDataCache(budget_bytes=0)
    node.model = rbm.DBN(hidden_layer_sizes=(4,))
    replica, dropped_first = weakref.ref(node.model), []
    release = _node.release_gpu_memory
    monkeypatch.setattr(_node, "release_gpu_memory", lambda device: dropped_first.append(replica() is None)
                        or release(device))
    cupy.cuda.Device(0).use()  # this thread worked on GPU 0 last (a task of another node, a serving task)
    cupy.calls.clear()
    node.stop()
    assert dropped_first == [True]
    assert [call for call in cupy.calls if call[0] == "free_all_blocks"] == [("free_all_blocks", 1)]
