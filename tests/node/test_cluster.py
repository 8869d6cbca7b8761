"""A real standalone cluster (master + 2 one-core workers from the pip pyspark) runs a training
job submitted through scripts/sparkdbn-submit, with the code shipped as --py-files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import node
import storage

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SUBMIT_TIMEOUT_S = 300


def test_a_job_submitted_to_a_standalone_cluster_trains_with_two_nodes(standalone_cluster, tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    command = [sys.executable, str(ROOT / "scripts" / "sparkdbn-submit"), "--master", standalone_cluster,
               "--executor-cores", "1", "--total-executor-cores", "2", "--executor-memory", "512m",
               "--python", sys.executable, "--store", store_url, "--conf", "spark.ui.enabled=false",
               # The fit waits for the two executors' slots at most this long (node.driver._slots; Spark's 30 s
               # by default): a full suite on 2 cores once started an executor's JVM later, and trained on 1.
               "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=240s",
               "--", "train", "--model", "dbn", "--layers", "32", "--epochs", "2", "--partitions", "4",
               "--run-id", "cluster", "--no-report", "--no-progress"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S,
                          env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "accuracy" in done.stdout

    store = storage.open_store(store_url)
    record = node.open_run(store_url, "cluster").record
    assert record["status"] == "done"
    metrics = node.open_run(store_url, "cluster").runs.read_metrics()
    nodes = {m["node"] for m in metrics}
    assert len(nodes) >= 2, done.stderr[-3000:]  # one node per executor (1 core each)
    # The executors imported sparkdbn from the shipped zip, not from this checkout.
    assert all(".zip" in m["code"] for m in metrics), {m["code"] for m in metrics}
    assert store.exists(record["model"]["path"])
