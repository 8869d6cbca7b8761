"""scripts/gpu-check's dry run: the Spark steps of the GPU check on a CPU local-cluster whose discovery script
prints one GPU -- both executors' nodes get address 0, ``device="cpu"`` stands where the check asks for ``"gpu"``,
``"auto"`` finds no cupy and trains on the CPUs saying so, the GPU-fitted model serves through ``evaluate`` and
``predict_dataframe``, and the CPU baseline fit runs on a second session; every step lands in gpu-check.json."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DRY_RUN_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("gpu-check")
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check"), "--dry-run"], env=dict(os.environ, OUT=str(out)),
                          capture_output=True, text=True, timeout=DRY_RUN_TIMEOUT_S, cwd=out)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-5000:])
    return json.loads((out / "gpu-check.json").read_text())


def test_the_dry_run_runs_every_spark_step_and_records_it(dry_run):
    assert dry_run["dry_run"] is True and "finished" in dry_run
    assert set(dry_run["steps"]) == {"dbn_gpu", "dbn_auto", "serving", "dbn_cpu"}  # no GPU: no LeNet, no full GPU
    assert not any("crash" in step for step in dry_run["steps"].values())
    checks = dry_run["checks"]
    assert set(checks) == {"gpu fits trained", "no task failed in the fits", "serving matches the driver within 0.5 point",
                           "Spark DBN fit on GPUs at least 3x the CPUs", "GPU and CPU accuracy within 1 point"}
    assert checks["gpu fits trained"] and checks["no task failed in the fits"]
    assert checks["serving matches the driver within 0.5 point"]
    assert dry_run["spark_dbn_gpu_over_cpu"] > 0  # on CPUs both ways here: the ratio exists, its bar is the GPU's


def test_each_node_of_the_dry_run_took_the_gpu_address_its_worker_was_given(dry_run):
    for name in ("dbn_gpu", "dbn_auto"):
        devices = dry_run["steps"][name]["devices"]
        assert len(devices) == 2 and all(device["address"] == "0" for device in devices.values())
    auto = dry_run["steps"]["dbn_auto"]["devices"].values()
    assert all(device["kind"] == "cpu" and "cupy is not installed" in device["reason"] for device in auto)


def test_the_served_model_gives_the_drivers_accuracy(dry_run):
    served = dry_run["steps"]["serving"]
    assert served["evaluate_accuracy"] == pytest.approx(served["driver_accuracy"], abs=0.005)
    assert served["predict_accuracy"] == pytest.approx(served["driver_accuracy"], abs=0.005)
    assert dry_run["steps"]["dbn_cpu"]["requested"] == "cpu" and dry_run["steps"]["dbn_cpu"]["accuracy"] > 0.5
