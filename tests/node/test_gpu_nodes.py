"""Nodes on Spark's GPUs, on a machine without any: Spark trusts its discovery script, so a script printing
two addresses makes a local-cluster executor with two GPUs, one per task.

One driver process (``_gpu_cluster_driver.py``, its own local-cluster session: ~40 s in all) fits a
small DBN with ``device="auto"`` -- each node gets its own address, finds no cupy, trains on its CPU,
and the record says so -- then with ``device="gpu"``, which the executors' probe stops in one line
before any training, with no task retried.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DRIVER_TIMEOUT_S = 400


@pytest.fixture(scope="module")
def fits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """device -> what the driver saw of that fit (see _gpu_cluster_driver.py)."""
    folder = tmp_path_factory.mktemp("gpu-cluster")
    script = folder / "two-gpus.sh"
    script.write_text('#!/bin/sh\necho \'{"name": "gpu", "addresses": ["0", "1"]}\'\n')
    script.chmod(0o755)
    config = {"store_url": f"file://{folder}/store", "discovery_script": str(script)}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]), SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run([sys.executable, str(HERE / "_gpu_cluster_driver.py"), json.dumps(config)], env=env,
                          capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S, cwd=folder)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and len(lines) == 2, (done.returncode, done.stdout[-3000:], done.stderr[-5000:])
    outcomes = {line["device"]: line for line in lines}
    assert not any("crash" in line for line in lines), [line.get("crash") for line in lines]
    return outcomes


def test_each_node_takes_the_gpu_address_spark_assigned_its_task(fits):
    devices = fits["auto"]["record"]["devices"]
    assert len(devices) == 2  # two task slots: two nodes, one per GPU
    assert sorted(device["address"] for device in devices.values()) == ["0", "1"]
    assert all(device["spark_addresses"] == [device["address"]] for device in devices.values())


def test_an_auto_fit_where_cupy_sees_no_gpu_trains_on_the_cpus_and_the_record_says_so(fits):
    auto = fits["auto"]
    assert auto["record"]["status"] == "done" and auto["accuracy"] > 0.9 and auto["returned_given"]
    for device in auto["record"]["devices"].values():
        assert device["kind"] == "cpu" and device["index"] is None
        assert device["reason"] == (f"device='auto' computes on the CPU: Spark assigned GPU {device['address']}, but "
                                    "cupy is not installed (pip install 'sparkdbn[gpu]')")
    assert all(device["kind"] == "cpu" for device in auto["metric_devices"]) and auto["metric_devices"]
    assert auto["status"].count("device: the CPU of") == 2
    assert auto["spark"]["failed_tasks"] == 0


def test_a_gpu_fit_without_a_usable_gpu_fails_in_one_line_at_the_probe_and_no_task_is_retried(fits):
    gpu = fits["gpu"]
    assert gpu["error_type"] == "NodeDeviceError" and "\n" not in gpu["error"]
    assert re.fullmatch(r"node \S+-\d+ on host \S+ \(GPU address [01]\): device='gpu' but no usable GPU: Spark "
                        r"assigned GPU [01], but cupy is not installed \(pip install 'sparkdbn\[gpu\]'\) \(and 1 more "
                        r"of the 2 probed\)", gpu["error"]), gpu["error"]
    # The driver built no GPU model: the executors' probe refused; nothing trained, the record says why.
    assert gpu["record"]["status"] == "failed" and gpu["record"]["error"] == f"NodeDeviceError: {gpu['error']}"
    assert all(step["epochs_done"] == 0 for step in gpu["record"]["steps"].values()) and not gpu["metric_devices"]
    # Every task attempt Spark made for the fit: none failed (so none was retried), and no more than the job that
    # starts the Python workers and the probe make (a task per node each; the driver checks and stores numpy
    # rows itself): no training job started.
    assert gpu["spark"]["failed_tasks"] == 0 and gpu["spark"]["tasks"] <= 2 + 2
