"""scripts/bench_gpu.py: its arguments, its timing statistics, the targets it checks, the time budget, the JSON its
--json run writes for docs/benchmarks/gpu.md (after every part, so a killed run keeps what finished), and the recipe
torch's fits follow -- on the CPU (the GPU rows need cupy and a GPU; torch's columns need torch, and stay empty
here)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from support.scripts import script_module

import rbm
from rbm._updaters import SGD, Updater
from rbm.boltzmann import _cd, _finetune

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench():
    with script_module("bench_gpu.py") as module:
        yield module


def test_the_race_runs_five_synchronised_runs_against_compiled_torch_in_float32_by_default(bench):
    args = bench.parse_args([])
    assert (args.runs, args.fit_runs, args.reference, args.precision, args.json, args.budget_s) == (
        5, 3, "compile", "float32", None, None)
    quick = bench.parse_args(["--quick"])
    assert (quick.runs, quick.fit_runs) == (2, 2) and bench.parse_args(["--reference", "graphs"]).reference == "graphs"
    assert bench.parse_args(["--budget-s", "280"]).budget_s == 280.0
    for wrong in (["--runs", "0"], ["--fit-runs", "0"], ["--cpu-only", "--no-cpu"], ["--precision", "half"],
                  ["--reference", "jit"]):
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


def parts_table(run: dict) -> list[list]:
    return next(table for table in run["tables"] if table["title"].startswith("Parts"))["rows"]


def test_a_cpu_run_writes_its_json_after_every_part_and_the_page_renders_the_finished_run(bench, tmp_path, monkeypatch):
    path = tmp_path / "bench_gpu.json"
    seen = {}
    measure_cd1 = bench.sparkdbn_cd1

    def cd1_after_the_fits(*args, **kwargs):  # the CPU's fits run first; the file must hold them by now
        seen["run"] = json.loads(path.read_text())
        return measure_cd1(*args, **kwargs)

    monkeypatch.setattr(bench, "sparkdbn_cd1", cd1_after_the_fits)
    monkeypatch.setattr(sys, "argv", ["bench_gpu.py", "--cpu-only", "--quick", "--no-torch"])
    tables = bench.main(["--cpu-only", "--quick", "--no-torch", "--json", str(path)])

    partial = seen["run"]
    assert partial["complete"] is False and [row[:2] for row in partial["tables"][1]["rows"]] == [
        ["dbn fit", "cpu"], ["lenet fit", "cpu"]] and partial["tables"][0]["rows"] == []
    assert [row[2] for row in parts_table(partial)] == ["done", "done", *["not reached when this file was written"] * 2]

    run = json.loads(path.read_text())
    assert run["complete"] is True
    assert [table["title"].split(":")[0].split(",")[0] for table in run["tables"]] == [
        "Steps", "Fits on digits28", "Targets", "Parts"]
    steps, fits = run["tables"][:2]
    assert steps["columns"] == bench.STEP_COLUMNS and fits["columns"] == bench.FIT_COLUMNS
    assert [row[:2] for row in steps["rows"]] == [["cd1 64-32 b20", "cpu"], ["lenet b8", "cpu"]]
    assert all(row[2] > 0 and row[3] >= 0 and row[4] is None for row in steps["rows"]) and "targets" in tables
    assert [row[:2] for row in fits["rows"]] == [["dbn fit", "cpu"], ["lenet fit", "cpu"]]
    assert all(row[2] > 0 and 0.0 <= row[7] <= 1.0 for row in fits["rows"])
    assert [row[:3] for row in parts_table(run)] == [["dbn fit", "cpu", "done"], ["lenet fit", "cpu", "done"],
                                                     ["cd1 64-32 b20", "cpu", "done"], ["lenet b8", "cpu", "done"]]
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import benchmarks as hook
    finally:
        sys.path.remove(str(ROOT / "docs" / "hooks"))
    page = hook.render_run(run)
    assert "**Steps: samples per second" in page and "| cd1 64-32 b20 | cpu |" in page and "| dbn fit | cpu |" in page
    assert "| lenet b8 | cpu | done |" in page


def test_with_no_time_left_every_part_is_skipped_and_the_file_says_so(bench, tmp_path, monkeypatch):
    path = tmp_path / "bench_gpu.json"
    monkeypatch.setattr(sys, "argv", ["bench_gpu.py"])
    tables = bench.main(["--cpu-only", "--quick", "--no-torch", "--budget-s", "0", "--json", str(path)])
    run = json.loads(path.read_text())
    assert run["complete"] is True and tables["steps"] == tables["fits"] == []
    assert [row[:2] for row in parts_table(run)] == [["dbn fit", "cpu"], ["lenet fit", "cpu"], ["cd1 64-32 b20", "cpu"],
                                                     ["lenet b8", "cpu"]]
    assert all(row[2].startswith("skipped: 0 s left of the budget") for row in parts_table(run))
    assert "Time budget: 0 s (--budget-s)." in run["tables"][-1]["note"] and "skipped: 0 s left" in run["output"]


def test_a_rows_timed_runs_stop_early_when_the_next_would_overrun_the_budget(bench):
    clock = {"now": 100.0}
    report = bench.Report(None, argparse.Namespace(budget_s=25.0), [], clock=lambda: clock["now"])

    def run_of_ten_seconds() -> float:
        clock["now"] += 10.0
        return 10.0

    # 15 s left after the first run: a second fits (1.2 x 10 s); 5 s left after it: no third
    assert report.runs("sparkdbn", run_of_ten_seconds, 5) == (10.0, 10.0)
    assert report.said == ["sparkdbn: 2 of 5 runs, for the time budget"]
    assert bench.Report(None, argparse.Namespace(budget_s=None), []).left() == float("inf")


def test_a_failed_part_is_said_and_the_next_runs_and_a_killed_run_keeps_its_file(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench_gpu.py"])
    path = tmp_path / "bench_gpu.json"
    args = bench.parse_args(["--json", str(path)])
    run = bench.BenchRun("bench_gpu.py", args).start()

    def fails(report):
        raise ValueError("no such kernel")

    def killed(report):
        raise SystemExit(143)  # what bench_gpu's SIGTERM handler raises

    row = ["lenet b8", "cpu", 1.0, 0.0, None, None, None, None, None, ""]
    parts = [bench.Part("steps", "lenet b8", "cpu", 0, lambda report: row), bench.Part("steps", "x", "gpu", 0, fails),
             bench.Part("fits", "dbn fit", "cpu", 0, killed), bench.Part("fits", "lenet fit", "cpu", 0, killed)]
    try:
        with pytest.raises(SystemExit):
            bench.Report(run, args, parts).measure()
    finally:
        sys.stdout = run._tee.stream  # the run never finished: stop copying stdout by hand
    written = json.loads(path.read_text())
    assert written["complete"] is False and written["tables"][0]["rows"] == [row]
    assert [status for _, _, status, _ in parts_table(written)] == [
        "done", "x gpu failed: ValueError: no such kernel", "stopped while running: the bench was killed",
        "not reached when this file was written"]
    assert "ValueError: no such kernel" in written["output"]  # its traceback, printed where the run keeps it


def test_torchs_dbn_fit_trains_with_sparkdbns_schedules_minibatch_by_minibatch(bench, monkeypatch):
    settings = dict(hidden_layer_sizes=(6, 4), pretrain_epochs=7, finetune_epochs=4, batch_size=7, random_state=0)
    recipe = bench.DBNRecipe.of(settings, 12)
    assert (recipe.dropout, recipe.dropout_ramp, recipe.l2, recipe.lr_decay, recipe.anneal_fraction) == (
        0.3, 10.0, 1e-4, 0.1, 0.5)  # sparkdbn's fine-tuning defaults
    assert (recipe.momentum, recipe.final_momentum, recipe.init_std) == (0.5, 0.9, 0.01)  # PRETRAIN_LAYER_DEFAULTS
    seen = {"cd": [], "dropout": [], "sgd": []}
    cd_step, forward = _cd.cd_step, _finetune.forward

    def recorded_cd_step(ws, b, W, hbias, vbias, velocity, generator, cd, learning_rate, momentum, *args, **kwargs):
        seen["cd"].append((b, learning_rate, momentum))
        return cd_step(ws, b, W, hbias, vbias, velocity, generator, cd, learning_rate, momentum, *args, **kwargs)

    def recorded_forward(X, weights, biases, dropout=0.0, *args, **kwargs):
        seen["dropout"].append(dropout)
        return forward(X, weights, biases, dropout, *args, **kwargs)

    def recorded_step(self, params, grads, decay=()):
        seen["sgd"].append((self.learning_rate, self.momentum, self.l2))
        return Updater.step(self, params, grads, decay)

    monkeypatch.setattr(_cd, "cd_step", recorded_cd_step)
    monkeypatch.setattr(_finetune, "forward", recorded_forward)
    monkeypatch.setattr(SGD, "step", recorded_step)
    rng = np.random.default_rng(0)
    rbm.DBN(**settings).fit(rng.random((30, 12), dtype=np.float32), np.arange(30) % 3)

    assert seen["cd"] == [(stop - start, recipe.pretrain_lr, recipe.momentum_at(done)) for _ in recipe.sizes
                          for done in range(recipe.pretrain_epochs) for start, stop in recipe.pretrain_slices(30)]
    assert {momentum for _, _, momentum in seen["cd"]} == {0.5, 0.9}  # 7 passes: the switch after the fifth
    starts = range(0, 30, recipe.batch_size)
    assert seen["dropout"] == [recipe.dropout_at(epoch) for epoch in range(4) for _ in starts]
    assert seen["dropout"][-1] == pytest.approx(0.09)
    expected = [(recipe.rate(epoch, start / 30), recipe.finetune_momentum, recipe.l2) for epoch in range(4)
                for start in starts]
    assert seen["sgd"] == [pytest.approx(entry) for entry in expected]
    assert seen["sgd"][0][0] == 0.1 and seen["sgd"][-1][0] < 0.01  # decayed, then annealed towards 0


def test_torchs_fits_refuse_a_training_they_do_not_do(bench):
    with pytest.raises(ValueError, match="torch's DBN fit trains as"):
        bench.DBNRecipe.of(dict(hidden_layer_sizes=(4,), finetune_updater="adam"), 8)
    recipe = bench.LeNetRecipe.of(rbm.lenet(**bench.LENET_SETTINGS))
    assert recipe == bench.LeNetRecipe(epochs=1, batch_size=64, learning_rate=0.01, momentum=0.9)
    with pytest.raises(ValueError, match="torch's LeNet fit trains as"):
        bench.LeNetRecipe.of(rbm.lenet(l2=1e-4))


def test_the_gpu_benchmark_page_shows_the_recorded_race_or_says_it_is_not_recorded():
    page = (ROOT / "docs" / "benchmarks" / "gpu.md").read_text()
    assert "<!-- bench-results: bench_gpu -->" in page
    recorded = (ROOT / "docs" / "benchmarks" / "data" / "bench_gpu.json").exists()
    assert recorded or "not been run on a GPU" in page
