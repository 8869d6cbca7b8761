"""Seed bounds: the checks of tests/support/seed_bounds.py and scripts/check-seed-bounds, which measures them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import support.seed_bounds as seed_bounds
from support.scripts import SCRIPTS, script_module
from support.seed_bounds import assert_at_least, assert_at_most


@pytest.fixture
def script():
    with script_module("check-seed-bounds") as module:
        yield module


@pytest.fixture
def unlogged(monkeypatch):
    """These tests' made-up statistics stay out of the log scripts/check-seed-bounds reads."""
    monkeypatch.delenv(seed_bounds.LOG_ENV, raising=False)


@pytest.mark.seed_bound
def test_a_bound_holds_at_its_value_and_fails_past_it_naming_the_statistic_and_the_values(unlogged):
    assert_at_least(0.97, 0.97, "mean accuracy")
    assert_at_most(0.6, 0.6, "mean loss ratio")
    with pytest.raises(AssertionError, match=r"mean accuracy: 0\.9687, expected >= 0\.9695 \(short by 0\.0008\); "
                                             r"per seed \[0\.9638, 0\.9736\]"):
        assert_at_least(0.9687, 0.9695, "mean accuracy", [0.9638, 0.9736])
    with pytest.raises(AssertionError, match=r"expected <= 0\.6000"):
        assert_at_most(0.61, 0.6, "mean loss ratio")


def test_a_bound_checked_in_a_test_not_marked_seed_bound_fails_so_the_script_cannot_miss_it(unlogged):
    with pytest.raises(AssertionError, match="not marked @pytest.mark.seed_bound"):
        assert_at_least(1.0, 0.5, "mean accuracy")


@pytest.mark.seed_bound
def test_each_check_appends_its_test_bound_margin_values_and_the_kernels_that_ran_when_asked(unlogged, tmp_path,
                                                                                           monkeypatch):
    log = tmp_path / "bounds.jsonl"
    assert_at_least(0.9, 0.8, "not logged")  # no log named: nothing written anywhere
    monkeypatch.setenv(seed_bounds.LOG_ENV, str(log))
    assert_at_least(0.9, 0.8, "mean accuracy", [0.85, 0.95])
    with pytest.raises(AssertionError):
        assert_at_most(0.7, 0.6, "mean loss ratio")
    first, second = [json.loads(line) for line in log.read_text().splitlines()]
    assert first["test"].endswith("test_each_check_appends_its_test_bound_margin_values_and_the_kernels_that_ran_when_asked")
    assert (first["what"], first["bound"], first["direction"], first["values"]) == (
        "mean accuracy", 0.8, "at_least", [0.85, 0.95])
    assert first["margin"] == pytest.approx(0.1) and second["margin"] == pytest.approx(-0.1)  # failed ones too
    assert second["direction"] == "at_most" and first["kernels"] == seed_bounds.openblas_architectures()


def test_the_families_measured_are_those_whose_instructions_the_cpu_has(script, tmp_path):
    assert script.runnable_families({"avx2", "fma", "sse2"}) == ["Haswell"]
    assert script.runnable_families({"avx2", "fma", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}) == [
        "Haswell", "SkylakeX"]
    assert script.runnable_families({"avx2"}) == []
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert script.cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "fma"}
    assert script.cpu_flags(str(tmp_path / "none")) == set()


def line(test, value, bound, family, direction="at_least", kernels=None):
    margin = value - bound if direction == "at_least" else bound - value
    return {"test": test, "what": "mean accuracy", "value": value, "bound": bound, "direction": direction,
            "margin": margin, "values": [], "kernels": kernels or [family]}


def test_the_report_flags_a_failed_bound_one_measured_under_one_family_and_kernels_not_asked_for(script):
    families = ["Haswell", "SkylakeX"]
    logs = {"Haswell": [line("t::holds", 0.97, 0.96, "Haswell"), line("t::fails", 0.9687, 0.9695, "Haswell"),
                        line("t::other_kernels", 0.97, 0.96, "Haswell", kernels=["Zen"])],
            "SkylakeX": [line("t::holds", 0.975, 0.96, "SkylakeX"), line("t::fails", 0.9725, 0.9695, "SkylakeX"),
                         line("t::other_kernels", 0.97, 0.96, "SkylakeX"), line("t::one_family", 0.9, 0.8, "SkylakeX")]}
    bounds = script.collect(logs)
    found = script.problems(bounds, families)
    assert len(found) == 3
    assert any("t::fails" in problem and "fails under Haswell (0.9687 against 0.9695)" in problem for problem in found)
    assert any("t::one_family" in problem and "not checked under Haswell" in problem for problem in found)
    assert any("t::other_kernels" in problem and "OpenBLAS ran Zen" in problem for problem in found)
    rows = script.table(bounds, families).splitlines()
    assert rows[1].startswith("t::fails") and "-0.0008" in rows[1]  # the smallest margin first
    holds = next(row for row in rows if row.startswith("t::holds"))
    assert "0.9700 (+0.0100)" in holds and "0.9750 (+0.0150)" in holds and holds.endswith("+0.0100")


@pytest.mark.slow
def test_the_script_measures_a_real_seed_bound_under_each_family_this_cpu_runs(script):
    families = script.runnable_families(script.cpu_flags())
    if not families:
        pytest.skip("this CPU runs none of OpenBLAS's x86-64 kernel families the script measures")
    target = "tests/rbm/test_rbm.py::test_reconstruction_error_falls_as_training_proceeds"
    result = subprocess.run([sys.executable, str(SCRIPTS / "check-seed-bounds"), target], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"2 bounds under {', '.join(families)}: each holds under every family" in result.stdout
    rows = [row for row in result.stdout.splitlines() if row.startswith(target)]
    assert len(rows) == 2 and all(row.count("(+0.") == len(families) for row in rows), rows
