"""GPUs that cannot take a node, on a real Spark: the executors' cupy (tests/support's fake, first on their path)
shows two GPUs: GPU 0 held in exclusive-process mode by another process (counted, but it refuses to open), GPU 1
idle by its free memory but out of memory at the replica's first allocation.  The same driver as test_gpu_nodes.py
(a local-cluster whose discovery script hands each task one of them) fits with ``device="auto"``, whose nodes train
on their CPUs saying why -- the node on GPU 1 finds it out when it builds its replica, whatever the probe saw --
then with ``device="gpu"``, which the probe ends in one line naming a refusing GPU, before any training, with no
task retried.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.fake_gpu import FAKE_CUPY_PATH, gpus_env

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DRIVER_TIMEOUT_S = 600
BUSY = "CUDARuntimeError: cudaErrorDevicesUnavailable: CUDA-capable device(s) is/are busy or unavailable"
OUT_OF_MEMORY = "the model cannot be built on GPU 1: OutOfMemoryError: out of memory to allocate on the fake GPU"


@pytest.fixture(scope="module")
def fits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("busy-gpus")
    script = folder / "two-gpus.sh"
    script.write_text('#!/bin/sh\necho \'{"name": "gpu", "addresses": ["0", "1"]}\'\n')
    script.chmod(0o755)
    config = {"store_url": f"file://{folder}/store", "discovery_script": str(script)}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([FAKE_CUPY_PATH, str(HERE), str(ROOT)]),
               SPARK_LOCAL_IP="127.0.0.1", FAKE_CUPY_GPUS=gpus_env({"busy": True}, {}))
    done = subprocess.run([sys.executable, str(HERE / "_gpu_cluster_driver.py"), json.dumps(config)], env=env,
                          capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S, cwd=folder)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and len(lines) == 2, (done.returncode, done.stdout[-3000:], done.stderr[-5000:])
    assert not any("crash" in line for line in lines), [line.get("crash") for line in lines]
    return {line["device"]: line for line in lines}


def test_auto_nodes_on_a_busy_and_a_full_gpu_train_on_their_cpus_and_say_why_with_no_task_retried(fits):
    auto = fits["auto"]
    assert auto["record"]["status"] == "done" and auto["accuracy"] > 0.9 and auto["spark"]["failed_tasks"] == 0
    reasons = {device["address"]: (device["kind"], device["reason"]) for device in auto["record"]["devices"].values()}
    assert reasons == {
        "0": ("cpu", f"device='auto' computes on the CPU: Spark assigned GPU 0, but it is not usable here: {BUSY}"),
        "1": ("cpu", f"device='auto' computes on the CPU: {OUT_OF_MEMORY}")}


def test_a_gpu_fit_on_gpus_that_refuse_fails_in_one_line_at_the_probe_and_no_task_is_retried(fits):
    gpu = fits["gpu"]
    assert gpu["error_type"] == "NodeDeviceError" and "\n" not in gpu["error"]
    first = f"but it is not usable here: {BUSY}" if "(GPU address 0)" in gpu["error"] else OUT_OF_MEMORY
    assert gpu["error"].endswith(f"{first} (and 1 more of the 2 probed)"), gpu["error"]
    assert all(step["epochs_done"] == 0 for step in gpu["record"]["steps"].values())
    assert gpu["spark"]["failed_tasks"] == 0 and gpu["spark"]["tasks"] <= 2 + 2
