"""scripts/stage-dataset as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from storage import open_dataset

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "stage-dataset"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args, "--no-progress"], capture_output=True, text=True, timeout=120)


def test_stage_dataset_stages_a_csv_file_and_reports_it(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.integers(0, 10, (40, 3))
    y = rng.integers(0, 2, 40)
    csv = tmp_path / "in.csv"
    csv.write_text("f1,f2,f3,target\n" + "".join(f"{a},{b},{c},{t}\n" for (a, b, c), t in zip(X, y)))
    result = _run(str(csv), str(tmp_path / "out"), "--label-column", "target", "--shards", "4")
    assert result.returncode == 0, result.stderr
    assert "staged out: 40 samples of 3 float32, 2 classes, 4 shard(s)" in result.stdout
    Xr, yr = open_dataset(str(tmp_path / "out")).read_all()
    np.testing.assert_array_equal(Xr, X.astype(np.float32))
    np.testing.assert_array_equal(yr, y)


def test_stage_dataset_explains_bad_input_and_fails(tmp_path):
    csv = tmp_path / "in.csv"
    csv.write_text("a,b\n1,2\n")
    result = _run(str(csv), str(tmp_path / "out"))
    assert result.returncode == 2  # as `sparkdbn stage` says a refusal (it was 1)
    assert result.stderr.startswith("stage-dataset: ") and "no label column 'label'" in result.stderr
    assert result.stderr.count("\n") == 1
    assert _run("no-such-source", str(tmp_path / "out")).returncode == 2
    assert _run(str(csv), "hdfs:/no-namenode", "--label-col", "b").stderr == (
        "stage-dataset: 'hdfs:/no-namenode' names no namenode; write hdfs://host:port/path\n")

    # A dataset staged before: replaced only with --overwrite, which the refusal names (as sparkdbn stage's).
    assert _run(str(csv), str(tmp_path / "out"), "--label-col", "b").returncode == 0
    again = _run(str(csv), str(tmp_path / "out"), "--label-col", "b")
    assert again.returncode == 2 and "pass --overwrite to replace a dataset staged there before" in again.stderr
