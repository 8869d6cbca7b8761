"""``sparkdbn train`` on a store whose disk fills up mid-fit: one line, exit status 2, no Spark retries; on a
read-only one: one line before Spark starts.

Measured by an audit before: 754 lines (8 executor tracebacks, "Task 1 in stage 2.0 failed 4 times"),
the last ``Spark job 'f1 rbm0 epoch 1' failed: storage._errors.StoreError: write failed on
.../peers/vm-7865.json: [Errno 28] No space left on device``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.small_disk import remount_read_only, small_disk, small_disk_unavailable_reason

import storage

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(small_disk_unavailable_reason() is not None, reason=str(small_disk_unavailable_reason()))]

ROOT = Path(__file__).resolve().parent.parent.parent
PROCESS_TIMEOUT_S = 600


def test_train_on_a_store_that_fills_up_ends_in_one_line_without_tracebacks_or_retries(tmp_path):
    # Room for the run's start and its stored partitions, not for the nodes' snapshots of its first epochs.
    with small_disk(tmp_path / "store", 600) as folder:
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"), PYTHONPATH=str(ROOT))
        done = subprocess.run([sys.executable, "-m", "node.cli", "train", "--store", str(folder), "--run-id", "full",
                               "--epochs", "30", "--master", "local[2]", "--no-report", "--no-progress"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
        assert done.returncode == 2, done.stderr[-3000:]
        said = [line for line in done.stderr.splitlines() if line.startswith("sparkdbn train: ")]
        assert len(said) == 1 and "the store is full at " in said[0], done.stderr[-3000:]
        assert "No space left on device" in said[0] and "make room there" in said[0]
        # No task ran again (spark.task.maxFailures), no Python traceback of a task that raised.
        assert "Traceback" not in done.stderr and "failed 4 times" not in done.stderr, done.stderr[-3000:]
        assert "Lost task" not in done.stderr, done.stderr[-3000:]
        # What it wrote before is intact and the run resumable: its record still reads under its key.
        store = storage.open_store(f"file://{folder}")
        assert store.exists("runs/full")


@pytest.mark.parametrize("holds_runs", [False, True])
def test_train_on_a_read_only_store_is_one_line_before_spark_starts(tmp_path, holds_runs):
    # The audit's read-only store was said 22 s later, after Spark started, by the lease's first write.
    with small_disk(tmp_path / "store", 64) as folder:
        if holds_runs:
            (folder / "runs").mkdir()
        remount_read_only(folder)
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"), PYTHONPATH=str(ROOT),
                   JAVA_HOME=str(tmp_path / "no-java-here"))  # Spark cannot start: the line comes before it
        done = subprocess.run([sys.executable, "-m", "node.cli", "train", "--store", str(folder), "--run-id", "ro",
                               "--no-report"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=PROCESS_TIMEOUT_S)
        assert done.returncode == 2, done.stderr[-3000:]
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("sparkdbn train: "), done.stderr[-3000:]
        assert ("read-only" in lines[0]) and str(folder) in lines[0], lines[0]
