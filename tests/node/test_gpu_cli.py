"""The GPU settings from the shell: ``sparkdbn train``'s flags, ``scripts/sparkdbn-submit``'s, and the discovery
script shipped in scripts/ (``sparkdbn-gpus``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from node import cli
from node.cli import _train_inputs

ROOT = Path(__file__).resolve().parents[2]


def test_the_discovery_script_lists_the_gpus_a_process_may_see(tmp_path):
    script, no_nvidia = str(ROOT / "scripts" / "sparkdbn-gpus"), {"PATH": "/usr/bin:/bin"}

    def run(**env):
        return subprocess.run([script], capture_output=True, text=True, env={**no_nvidia, **env}, timeout=30)

    assert json.loads(run(CUDA_VISIBLE_DEVICES="2,3").stdout) == {"name": "gpu", "addresses": ["2", "3"]}
    assert json.loads(run(CUDA_VISIBLE_DEVICES="GPU-a1,MIG-b2").stdout) == {"name": "gpu", "addresses": ["0", "1"]}
    fake = tmp_path / "nvidia-smi"  # what nvidia-smi --query-gpu=index --format=csv,noheader prints on 3 GPUs
    fake.write_text("#!/bin/sh\nprintf '0\\n1\\n2\\n'\n")
    fake.chmod(0o755)
    assert json.loads(run(PATH=f"{tmp_path}:/usr/bin:/bin").stdout)["addresses"] == ["0", "1", "2"]
    missing = run()
    assert missing.returncode == 1 and "nvidia-smi not found" in missing.stderr


def test_sparkdbn_submit_passes_the_gpus_to_train_and_ships_the_discovery_script_to_yarn():
    def dry_run(*args):
        return subprocess.run([sys.executable, str(ROOT / "scripts" / "sparkdbn-submit"), "--dry-run", *args],
                              capture_output=True, text=True, timeout=60, env=dict(os.environ))

    standalone = dry_run("--master", "spark://h:7077", "--gpus-per-executor", "2", "--", "train", "--device", "gpu")
    assert standalone.returncode == 0, standalone.stderr
    assert (f"train --gpus-per-executor 2 --gpu-discovery-script {ROOT / 'scripts' / 'sparkdbn-gpus'} --device gpu"
            in standalone.stderr)
    yarn = dry_run("--master", "yarn", "--gpus-per-executor", "4", "--", "train")
    assert f"--files {ROOT / 'scripts' / 'sparkdbn-gpus'} " in yarn.stderr
    assert "train --gpus-per-executor 4 --gpu-discovery-script ./sparkdbn-gpus" in yarn.stderr
    local = dry_run("--master", "local[2]", "--gpus-per-executor", "1", "--", "train")
    assert local.returncode == 2 and "local[2] hands Spark tasks no GPU" in local.stderr
    alone = dry_run("--master", "yarn", "--gpu-discovery-script", "/x", "--", "train")
    assert alone.returncode == 2 and "goes with --gpus-per-executor" in alone.stderr


@pytest.mark.slow
def test_train_says_in_one_line_what_stands_in_the_way_of_its_gpu_flags(spark, store_url, capsys):
    # The flags reach the model and the session; the shared local session hands tasks no GPU.
    status = cli.main(["train", "--store", store_url, "--device", "gpu", "--precision", "tf32", "--layers", "16",
                       "--epochs", "1", "--no-report", "--no-progress"])
    error = capsys.readouterr().err
    assert status == 2 and error.startswith("sparkdbn train: device='gpu' needs Spark") and error.count("\n") == 1
    assert cli.main(["train", "--gpu-discovery-script", "/x", "--no-report"]) == 2
    assert "--gpu-discovery-script goes with --gpus-per-executor N" in capsys.readouterr().err
    assert _train_inputs.gpu_conf({"gpus_per_executor": 2})["spark.executor.resource.gpu.discoveryScript"] == str(
        ROOT / "scripts" / "sparkdbn-gpus")  # the script of this checkout by default
