"""The scripts under scripts/ run in the environment they are started in where the project is importable there,
else inside the project's virtualenv, whichever ``python3`` is first on the PATH; importing one never replaces the
process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def foreign_python_first(tmp_path: Path) -> dict:
    """An environment whose first ``python3`` is the base interpreter, outside any virtualenv."""
    base = getattr(sys, "_base_executable", None) or sys.executable  # the interpreter the virtualenv was made from
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(os.path.realpath(base))
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"
    return env


def test_python_scripts_started_by_a_foreign_python3_run_inside_the_virtualenv(foreign_python_first, tmp_path):
    probe = subprocess.run(["python3", "-c", "import node"], env=foreign_python_first, capture_output=True, text=True)
    assert probe.returncode != 0, "the foreign python3 already has the project: nothing to show"
    for script in ("stage-dataset", "sparkdbn-submit", "bench_storage.py"):
        result = subprocess.run(["python3", str(ROOT / "scripts" / script), "--help"], env=foreign_python_first,
                                cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"{script}: {result.stderr[-2000:]}"
        assert "usage:" in result.stdout and "ModuleNotFoundError" not in result.stderr


def test_scripts_sparkdbn_runs_the_command_line_inside_the_virtualenv(foreign_python_first, tmp_path):
    result = subprocess.run([str(ROOT / "scripts" / "sparkdbn"), "status", "--help"], env=foreign_python_first,
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage: sparkdbn status")


def test_a_bench_script_given_json_writes_its_tables_and_output_stamped_with_machine_and_date(tmp_path):
    path = tmp_path / "storage.json"
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_storage.py"), "--quick", "--json", str(path)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    run = json.loads(path.read_text(encoding="utf-8"))
    assert run["script"] == "bench_storage.py" and run["settings"] == {"quick": True}
    assert run["machine"]["cores"] == os.cpu_count() and run["machine"]["numpy"] and run["machine"]["blas"]
    assert run["started"] <= run["finished"]
    snapshots, records, shards = run["tables"]
    backends = {row[0]: row for row in snapshots["rows"]}
    for backend in ("WeightStore, local", "WeightStore, webhdfs"):
        put_ms, get_ms, put_ratio = backends[backend][1:4]
        assert put_ms > 0 and get_ms > 0 and put_ratio == pytest.approx(put_ms / backends[snapshots["rows"][0][0]][1])
    assert [row[0] for row in records["rows"]] == ["local", "webhdfs"]
    assert all(fenced_ms > 0 and ratio == pytest.approx(fenced_ms / replace_ms)
               for _, replace_ms, fenced_ms, ratio in records["rows"])
    assert [row[0] for row in shards["rows"]][1:] == [f"{store} read_shard ({layout})" for store in ("local", "webhdfs")
                                                       for layout in ("binary", "list")]
    assert run["output"] == result.stdout  # what it printed, kept whole


@pytest.fixture
def no_buildable_venv() -> dict:
    """This environment (the project importable) with ``SPARKDBN_VENV`` naming a virtualenv that cannot be made: a
    script that went for it would fail at once instead of building one."""
    return {**os.environ, "SPARKDBN_VENV": "/dev/null/no-venv"}


@pytest.mark.parametrize("script", ["bench_storage.py", "stage-dataset", "sparkdbn-submit"])
def test_a_script_started_where_the_project_is_importable_runs_right_there(script, no_buildable_venv, tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--help"], env=no_buildable_venv,
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{script}: {result.stderr[-2000:]}"
    assert "usage:" in result.stdout
    assert not (tmp_path / "no-venv").exists()


def test_importing_a_bench_script_never_replaces_the_process(no_buildable_venv, tmp_path):
    probe = ("import sys\n"
             "sys.path.insert(0, 'tests')\n"
             "from support.scripts import script_module\n"
             "with script_module('bench_scaling.py') as module:\n"
             "    print('still here:', module.STRATEGIES[0])\n")
    result = subprocess.run([sys.executable, "-c", probe], env=no_buildable_venv, cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "still here: average"
