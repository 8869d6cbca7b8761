"""Where nodes compute: a task's GPU address mapped to cupy's numbering, the driver's CPU copy of a GPU model,
Spark's GPU settings refused or made, and the record, the metrics and ``status`` naming each node's device.

No GPU here: what needs Spark to hand out GPUs runs in test_gpu_nodes.py (a local-cluster whose
discovery script Spark trusts); cupy itself is absent, or replaced where only sparkdbn's mapping is tested.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import node
import rbm
from node._contract import NodeDevice, PartitionReport, decode, encode
from node.driver._devices import check_gpu_conf, driver_model, driver_spec, hand_back
from node.executor import _device
from node.watch._status import format_status
from support.fake_gpu import install_fake_cupy


def test_a_spark_gpu_address_is_cupys_index_through_cuda_visible_devices():
    assert _device.cuda_index("3", None) == 3  # every GPU visible: nvidia-smi's index is cupy's
    assert _device.cuda_index("3", "2,3") == 1  # the position among the visible ones
    assert _device.cuda_index("1", "GPU-a1,GPU-b2") == 1  # UUIDs: the script numbered the visible GPUs
    assert _device.cuda_index("GPU-b2", "GPU-a1,GPU-b2") == 1
    with pytest.raises(ValueError, match="hides GPU 0"):
        _device.cuda_index("0", "2,3")
    with pytest.raises(ValueError, match="hides GPU 0"):
        _device.cuda_index("0", "")  # an empty list hides them all
    with pytest.raises(ValueError, match="no GPU index"):
        _device.cuda_index("GPU-b2", None)


def test_without_a_gpu_from_spark_auto_computes_on_the_cpu_and_gpu_names_its_problem():
    auto, gpu = _device.see_device("auto", "n1"), _device.see_device("gpu", "n1")  # no task: no GPU assigned
    assert (auto.kind, auto.problem, auto.spark_addresses) == ("cpu", None, ())
    assert "Spark assigned no GPU" in auto.reason and "spark.task.resource.gpu.amount" in auto.reason
    assert gpu.kind == "cpu" and gpu.problem.startswith("device='gpu' but no usable GPU: Spark assigned no GPU")
    assert _device.device_failure(gpu) == f"node n1 on host {gpu.host} (no GPU address): {gpu.problem}"
    assert _device.see_device("cpu", "n1").reason == "device='cpu'"


def test_a_task_assigned_a_gpu_that_cupy_cannot_use_says_which_and_why(monkeypatch):
    monkeypatch.setattr(_device, "task_gpu_addresses", lambda: ("1",))
    monkeypatch.setitem(sys.modules, "cupy", None)  # not installed (an import of it raises ImportError)
    auto = _device.see_device("auto", "n1")
    assert (auto.kind, auto.address, auto.spark_addresses, auto.problem) == ("cpu", "1", ("1",), None)
    assert auto.reason == ("device='auto' computes on the CPU: Spark assigned GPU 1, but cupy is not installed "
                           "(pip install 'sparkdbn[gpu]')")
    gpu = _device.see_device("gpu", "n1")
    assert _device.device_failure(gpu) == (f"node n1 on host {gpu.host} (GPU address 1): device='gpu' but no usable "
                                           "GPU: Spark assigned GPU 1, but cupy is not installed (pip install "
                                           "'sparkdbn[gpu]')")


def test_a_node_takes_the_gpu_spark_assigned_its_task_by_cupys_index(monkeypatch):
    monkeypatch.setattr(_device, "task_gpu_addresses", lambda: ("3", "2"))
    install_fake_cupy(monkeypatch, {"name": "Fake GPU 0"}, {"name": "Fake GPU 1", "free": 60 << 30})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    device = _device.see_device("gpu", "n1")
    assert (device.kind, device.address, device.index, device.name, device.problem) == ("gpu", "3", 1, "Fake GPU 1",
                                                                                         None)
    assert device.memory_bytes == 80 * 2**30 and device.free_bytes == 60 * 2**30
    assert device.reason == "Spark assigned GPU 3 (60.0 GiB free of 80.0 GiB)"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    hidden = _device.see_device("gpu", "n1")
    assert hidden.kind == "cpu" and "CUDA_VISIBLE_DEVICES='0,1' hides GPU 3" in hidden.problem


def test_a_partition_report_carries_its_nodes_device_across_the_wire():
    device = NodeDevice(kind="gpu", host="h", node="h-1", requested="auto", spark_addresses=("0",), address="0",
                        index=0, name="NVIDIA H100", memory_bytes=80 * 2**30, reason="Spark assigned GPU 0",
                        warm_up_s=1.5)
    report = PartitionReport(node="h-1", run="r", phase="rbm0", epoch=0, partition=3, samples=10, loss=0.1,
                             train_s=0.1, merge_s=0.0, publish_s=0.0, task_s=0.2, merged=0, merged_from=(),
                             staleness_s=None, samples_seen=10, time=1.0, pid=1, device=device,
                             device_data={"used_bytes": 4096, "budget_bytes": 2**30, "hits": 1})
    assert decode(encode(report), PartitionReport) == report
    assert report.to_record()["device"]["spark_addresses"] == ("0",) and decode(encode(device), NodeDevice) == device


def test_the_driver_works_on_a_cpu_copy_of_a_gpu_model_and_hands_the_weights_back_where_they_fit():
    gpu = rbm.DBN((16,), device="gpu", precision="tf32", random_state=0)
    spec = gpu.to_spec()
    assert driver_spec(spec) == {**spec, "device": "cpu", "precision": "float32"}
    copy = driver_model(gpu, spec)
    assert copy is not gpu and copy.device == "cpu"
    cpu = rbm.DBN((16,), random_state=0)
    assert driver_model(cpu, cpu.to_spec()) is cpu  # nothing to copy
    warm = rbm.DBN((16,), device="auto", random_state=0).initialize(64, classes=np.arange(10))
    warm_copy = driver_model(warm, warm.to_spec())  # a warm start keeps its weights
    for name, value in warm.parameters().items():
        np.testing.assert_array_equal(warm_copy.parameters()[name], value)

    trained = rbm.DBN((16,), random_state=1).initialize(64, classes=np.arange(10))
    assert hand_back(gpu, trained) is trained  # no GPU on this driver: the CPU copy is the result
    given = rbm.DBN((16,), device="auto", random_state=0)
    assert hand_back(given, trained) is given  # "auto" holds the weights on any driver
    for name, value in trained.parameters().items():
        np.testing.assert_array_equal(given.parameters()[name], value)
    with pytest.raises(node.NodeDeviceError, match="device must be one of cpu, gpu, auto; .* 'tpu'"):
        driver_spec({**spec, "device": "tpu"})


def test_device_gpu_where_spark_hands_tasks_no_gpu_is_refused_saying_what_to_set():
    spec = rbm.DBN((16,), device="gpu").to_spec()
    with pytest.raises(node.NodeDeviceError, match=r"spark.task.resource.gpu.amount is not set\): start the "
                                                    r"session with spark.executor.resource.gpu.amount=.*--gpus-per"):
        check_gpu_conf("spark://h:7077", {}, spec)
    with pytest.raises(node.NodeDeviceError, match=r"local\[2,4\] master hands out none"):
        check_gpu_conf("local[2,4]", {"spark.task.resource.gpu.amount": "1"}, spec)
    check_gpu_conf("spark://h:7077", {"spark.task.resource.gpu.amount": "1"}, spec)
    check_gpu_conf("local[2]", {}, rbm.DBN((16,), device="auto").to_spec())  # auto: the CPU will do


def test_gpu_spark_conf_hands_each_executor_its_gpus_and_each_task_one():
    assert node.gpu_spark_conf(4, "/opt/gpus") == {
        "spark.executor.resource.gpu.amount": "4", "spark.task.resource.gpu.amount": "1",
        "spark.worker.resource.gpu.amount": "4", "spark.executor.resource.gpu.discoveryScript": "/opt/gpus",
        "spark.worker.resource.gpu.discoveryScript": "/opt/gpus"}
    with pytest.raises(ValueError, match=">= 1"):
        node.gpu_spark_conf(0)


def test_status_names_each_nodes_device():
    record = {"status": "done", "phases": [], "devices": {
        "h1-7": {"kind": "gpu", "host": "h1", "address": "2", "index": 0, "name": "NVIDIA H100 80GB HBM3",
                 "memory_bytes": 85 * 10**9, "free_bytes": 70 * 2**30, "warm_up_s": 2.25, "convolutions": "cudnn"},
        "h3-4": {"kind": "gpu", "host": "h3", "address": "0", "index": 0, "name": "A100", "memory_bytes": 40 * 2**30,
                 "convolutions": "im2col: nvidia-cudnn-frontend is not installed"},
        "h2-9": {"kind": "cpu", "host": "h2", "reason": "device='auto' computes on the CPU: no cupy"}}}
    text = format_status("r", record, {"h1-7": {"status": "gone", "host": "h1", "pid": 7}}, now=0.0)
    assert ("    device: GPU 2 (NVIDIA H100 80GB HBM3, 70.0 of 79.2 GiB free, cupy index 0), kernels warmed up in 2.2s, "
            "convolutions by cudnn") in text
    assert ("    device: GPU 0 (A100, 40.0 GiB), convolutions by im2col: nvidia-cudnn-frontend is not installed"
            in text)  # a record from before free memory was kept
    assert "  h2-9  ?      last seen never" in text and "    device: the CPU of h2; device='auto'" in text


# ---------------------------------------------------------------------------------------- with the shared session
@pytest.mark.slow
def test_a_gpu_fit_on_a_local_master_is_refused_before_any_work(spark, store_url, digits):
    model = rbm.DBN((16,), device="gpu", random_state=0)
    with pytest.raises(node.NodeDeviceError, match=r"device='gpu' needs Spark to hand a GPU to every task"):
        node.Trainer(spark, store_url, run_id="gpu", progress=False).fit(model, digits.X_train, digits.y_train)
    assert not Path(store_url[len("file://"):]).exists()  # no store opened, no record, no job


@pytest.mark.slow
def test_an_auto_fit_without_gpus_trains_on_the_cpus_and_the_record_and_metrics_say_so(spark, store_url, digits):
    model = rbm.DBN((32,), batch_size=10, finetune_learning_rate=0.2, device="auto", precision="tf32", random_state=0)
    trained = node.Trainer(spark, store_url, run_id="auto", epochs={"rbm0": 2, "finetune": 10}, partitions=4,
                           progress=False).fit(model, digits.X_train, digits.y_train)
    assert trained is model and trained.score(digits.X_test, digits.y_test) > 0.9  # learned, on the given model
    view = node.open_run(store_url, "auto")
    devices = view.record["devices"]
    metrics = view.runs.read_metrics()
    # Every node that trained, and only those: two at least (an executor's idle Python workers may take turns).
    assert set(devices) == {m["node"] for m in metrics} and len(devices) >= 2
    assert {device["kind"] for device in devices.values()} == {"cpu"}
    assert all(device["reason"].startswith("device='auto' computes on the CPU: Spark assigned no GPU")
               for device in devices.values())
    assert all(m["device"] == devices[m["node"]] and m["device_data"] == {} for m in metrics)
    assert view.record["spec"]["device"] == "auto"  # the record keeps what the nodes were asked for
    assert node.watch.run_status(store_url, "auto").count("device: the CPU of") == len(devices)
