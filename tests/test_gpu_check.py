"""scripts/gpu-check's dry run: the Spark steps of the GPU check on a CPU local-cluster whose discovery script
prints one GPU -- both executors' nodes get address 0, ``device="cpu"`` stands where the check asks for ``"gpu"``,
``"auto"`` finds no cupy and trains on the CPUs saying so, the GPU-fitted model serves through ``evaluate`` and
``predict_dataframe``, and the CPU baseline fit runs on a second session; every step lands in gpu-check.json.
Besides (fast, no Spark): every session the check starts has Spark's UI off and no idle timeout within a part, as
the GPU machine's slim jars need."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DRY_RUN_TIMEOUT_S = 900
GPU_CHECK_PY = ROOT / "scripts" / "_gpu_check.py"


class SessionAsked(Exception):
    """What the stand-in for node.get_spark_session raises once it has noted the settings it was given."""


@pytest.mark.parametrize("part", ["gpu", "cpu"])
def test_every_session_of_the_check_has_the_ui_off_and_no_idle_timeout(part, tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("_gpu_check_under_test", GPU_CHECK_PY)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    asked: list[dict] = []

    def get_spark_session(master, app_name="sparkdbn", conf=None, **_):
        asked.append(dict(conf or {}))
        raise SessionAsked

    monkeypatch.setattr(gpu_check.node, "get_spark_session", get_spark_session)
    with pytest.raises(SessionAsked):
        gpu_check.main(["--out", str(tmp_path), "--discovery", "unused.sh", "--part", part, "--dry-run"])
    assert len(asked) == 1 and asked[0]["spark.ui.enabled"] == "false" and asked[0]["spark.network.timeout"] == "900s"
    if part == "gpu":  # the session's own settings survive beside it
        assert asked[0]["spark.task.resource.gpu.amount"] == "1"


def test_the_check_starts_spark_only_through_its_session_helper():
    source = GPU_CHECK_PY.read_text()
    assert source.count("get_spark_session(") == 1 and "SparkSession" not in source and ".builder" not in source


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("gpu-check")
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check"), "--dry-run"], env=dict(os.environ, OUT=str(out)),
                          capture_output=True, text=True, timeout=DRY_RUN_TIMEOUT_S, cwd=out)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-5000:])
    return json.loads((out / "gpu-check.json").read_text())


@pytest.mark.slow
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


@pytest.mark.slow
def test_each_node_of_the_dry_run_took_the_gpu_address_its_worker_was_given(dry_run):
    for name in ("dbn_gpu", "dbn_auto"):
        devices = dry_run["steps"][name]["devices"]
        assert len(devices) == 2 and all(device["address"] == "0" for device in devices.values())
    auto = dry_run["steps"]["dbn_auto"]["devices"].values()
    assert all(device["kind"] == "cpu" and "cupy is not installed" in device["reason"] for device in auto)


@pytest.mark.slow
def test_the_served_model_gives_the_drivers_accuracy(dry_run):
    served = dry_run["steps"]["serving"]
    assert served["evaluate_accuracy"] == pytest.approx(served["driver_accuracy"], abs=0.005)
    assert served["predict_accuracy"] == pytest.approx(served["driver_accuracy"], abs=0.005)
    assert dry_run["steps"]["dbn_cpu"]["requested"] == "cpu" and dry_run["steps"]["dbn_cpu"]["accuracy"] > 0.5
