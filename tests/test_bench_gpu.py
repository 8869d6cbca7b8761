"""scripts/bench_gpu.py: its arguments, its timing statistics, the targets it checks, and the JSON its --json run
writes for docs/benchmarks/gpu.md -- on the CPU (the GPU rows need cupy and a GPU; torch's columns need torch,
and stay empty here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from support.scripts import script_module

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench():
    with script_module("bench_gpu.py") as module:
        yield module


def test_the_race_runs_five_synchronised_runs_against_compiled_torch_in_float32_by_default(bench):
    args = bench.parse_args([])
    assert (args.runs, args.reference, args.precision, args.json) == (5, "compile", "float32", None)
    assert bench.parse_args(["--quick"]).runs == 2 and bench.parse_args(["--reference", "graphs"]).reference == "graphs"
    for wrong in (["--runs", "0"], ["--cpu-only", "--no-cpu"], ["--precision", "half"], ["--reference", "jit"]):
        with pytest.raises(SystemExit):
            bench.parse_args(wrong)


def test_a_timing_gives_the_median_and_the_spread_of_its_runs(bench):
    timing = bench.Timing((1.0, 1.2, 0.9, 1.1, 1.0))
    assert timing.median == 1.0 and timing.spread == pytest.approx(0.3)
    assert bench.ratio(bench.Timing((0.5,)), bench.Timing((1.0,))) == 2.0 and bench.ratio(timing, None) is None


def test_the_targets_hold_where_the_measured_figures_reach_the_issues_bars(bench):
    steps = [["cd1 784-500 b100", "gpu", 1, 0, 1, 0, 1.02, 0, 0, ""], ["lenet b64", "gpu", 1, 0, 1, 0, 0.84, 0, 0, ""],
             ["cd1 784-500 b100", "cpu", 1, 0, 1, 0, 0.5, 0, 0, ""]]
    fits = [["dbn fit", "gpu", 10.0, 0, None, None, None, 0.975, None],
            ["dbn fit", "cpu", 24.5, 0, None, None, None, 0.980, None]]
    targets = {row[0]: row[1:] for row in bench.target_rows(steps, fits)}
    assert targets["cd1 784-500 b100: sparkdbn / torch >= 1.0"] == [1.02, True]
    assert targets["lenet b64: sparkdbn / torch >= 1.0"] == [0.84, False]
    assert targets["dbn fit: GPU over the CPUs >= 3.0x"] == [2.45, False]
    assert targets["dbn fit: GPU and CPU accuracy within 1.0 point"][0] == pytest.approx(0.5)
    assert len(targets) == 4  # CPU rows are no targets


def test_a_cpu_run_writes_the_json_that_the_gpu_benchmark_page_renders(bench, tmp_path, monkeypatch):
    path = tmp_path / "bench_gpu.json"
    monkeypatch.setattr(sys, "argv", ["bench_gpu.py", "--cpu-only", "--quick", "--no-torch"])
    tables = bench.main(["--cpu-only", "--quick", "--no-torch", "--json", str(path)])
    run = json.loads(path.read_text())
    assert [table["title"].split(":")[0] for table in run["tables"]] == ["Steps", "Fits on digits28"]
    steps, fits = run["tables"]
    assert steps["columns"] == bench.STEP_COLUMNS and fits["columns"] == bench.FIT_COLUMNS
    assert [row[:2] for row in steps["rows"]] == [["cd1 64-32 b20", "cpu"], ["lenet b8", "cpu"]]
    assert all(row[2] > 0 and row[3] >= 0 and row[4] is None for row in steps["rows"]) and "targets" in tables
    assert [row[:2] for row in fits["rows"]] == [["dbn fit", "cpu"], ["lenet fit", "cpu"]]
    assert all(row[2] > 0 and 0.0 <= row[7] <= 1.0 for row in fits["rows"])
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import benchmarks as hook
    finally:
        sys.path.remove(str(ROOT / "docs" / "hooks"))
    page = hook.render_run(run)
    assert "**Steps: samples per second" in page and "| cd1 64-32 b20 | cpu |" in page and "| dbn fit | cpu |" in page


def test_the_gpu_benchmark_page_shows_the_recorded_race_or_says_it_is_not_recorded():
    page = (ROOT / "docs" / "benchmarks" / "gpu.md").read_text()
    assert "<!-- bench-results: bench_gpu -->" in page
    recorded = (ROOT / "docs" / "benchmarks" / "data" / "bench_gpu.json").exists()
    assert recorded or "not been run on a GPU" in page
