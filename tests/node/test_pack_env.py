"""scripts/sparkdbn-submit --pack-env: the executors run a packed environment, the driver runs here.

The command lines are checked without Spark; packing runs the real venv-pack on a tiny
virtualenv; and one job is submitted to a real standalone cluster (master + 2 one-core workers)
with a packed virtualenv, whose executors must report (in the run's peer registry) an
interpreter inside the archive they unpacked.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import secrets
import subprocess
import sys
import tarfile
import time
import types
from pathlib import Path
from typing import Iterator

import pytest
from support.scripts import SCRIPTS, script_module

import node

SCRIPT = SCRIPTS / "sparkdbn-submit"
SUBMIT_TIMEOUT_S = 400
PACKED_PYTHON = "./environment/bin/python"
# What Spark's executors bring themselves, and the project's code (shipped as --py-files).
NOT_IN_LEAN_ENV = {"pyspark", "py4j", "sparkdbn"}


@pytest.fixture
def submit(monkeypatch) -> Iterator[types.ModuleType]:
    """scripts/sparkdbn-submit as a module, run inside this interpreter."""
    monkeypatch.setenv("SPARKDBN_VENV", sys.prefix)  # the script's _venv.ensure() returns at once here
    with script_module("sparkdbn-submit") as module:
        yield module


def command_line(submit, argv: list[str], tmp_path: Path, archive: Path | None) -> tuple[list[str], dict]:
    args, command = submit.parse(argv)
    return submit.build_command(args, command, tmp_path, archive)


def confs(argv: list[str]) -> dict[str, str]:
    pairs = [argv[i + 1] for i, flag in enumerate(argv) if flag == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


def option_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, item in enumerate(argv) if item == flag]


def test_client_mode_ships_the_archive_and_runs_the_driver_on_this_python(submit, tmp_path, monkeypatch):
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", "/elsewhere/python")
    archive = tmp_path / "cache" / "venv-1234-abcd.tar.gz"
    argv, env = command_line(submit, ["--master", "spark://10.0.0.5:7077", "--pack-env", "--executor-cores", "1",
                                      "--", "train", "--epochs", "1"], tmp_path, archive)
    assert option_values(argv, "--archives") == [f"{archive}#environment"]
    assert option_values(argv, "--deploy-mode") == ["client"]
    settings = confs(argv)
    assert settings["spark.pyspark.python"] == PACKED_PYTHON
    assert settings["spark.pyspark.driver.python"] == sys.executable
    assert env["PYSPARK_PYTHON"] == PACKED_PYTHON and env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    assert argv[-3:] == ["train", "--epochs", "1"] and argv[-4].endswith("sparkdbn_main.py")
    assert option_values(argv, "--py-files") == [str(tmp_path / "sparkdbn-code.zip")]


def test_cluster_mode_runs_the_driver_on_the_packed_python_and_forwards_no_local_driver_python(submit, tmp_path,
                                                                                               monkeypatch):
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)  # as scripts/_setup.sh exports it
    monkeypatch.delenv("SPARK_HOME", raising=False)
    archive = tmp_path / "env.tar.gz"
    argv, env = command_line(submit, ["--master", "yarn", "--deploy-mode", "cluster", "--pack-env",
                                      "--archives", "extra.zip#extra", "--", "train"], tmp_path, archive)
    assert option_values(argv, "--deploy-mode") == ["cluster"]
    assert option_values(argv, "--archives") == [f"{archive}#environment,extra.zip#extra"]  # one list: the
    # last --archives is the only one spark-submit keeps
    settings = confs(argv)
    assert settings["spark.pyspark.python"] == PACKED_PYTHON
    assert "spark.pyspark.driver.python" not in settings
    assert env["PYSPARK_PYTHON"] == PACKED_PYTHON and "PYSPARK_DRIVER_PYTHON" not in env
    # A pip-installed spark-submit would look for SPARK_HOME with ./environment/bin/python: found here.
    assert (Path(env["SPARK_HOME"]) / "bin" / "spark-class").is_file()


def test_client_mode_with_a_python_from_a_hand_made_archive_keeps_the_driver_here(submit, tmp_path):
    argv, env = command_line(submit, ["--master", "yarn", "--python", "./venv/bin/python",
                                      "--archives", "venv.tar.gz#venv"], tmp_path, None)
    settings = confs(argv)
    assert settings["spark.pyspark.python"] == "./venv/bin/python" == env["PYSPARK_PYTHON"]
    assert settings["spark.pyspark.driver.python"] == sys.executable == env["PYSPARK_DRIVER_PYTHON"]
    assert option_values(argv, "--archives") == ["venv.tar.gz#venv"]


def test_spark_says_warnings_only_unless_a_conf_says_otherwise(submit, tmp_path):
    # Spark's INFO lines were 48 of the 52 a one-epoch fit wrote to stderr.
    assert confs(command_line(submit, ["--", "status", "--run", "r"], tmp_path, None)[0])["spark.log.level"] == "WARN"
    argv = command_line(submit, ["--conf", "spark.log.level=INFO", "--", "status", "--run", "r"], tmp_path, None)[0]
    assert option_values(argv, "--conf")[-1] == "spark.log.level=INFO"  # spark-submit takes the last one


@pytest.mark.parametrize("argv, message", [
    (["--master", "spark://h:7077", "--pack-env", "--python", "/usr/bin/python3"], "give one"),
    (["--master", "local[2]", "--pack-env"], "drop --pack-env"),
    (["--master", "spark://h:7077", "--deploy-mode", "cluster"], "client mode only"),
    (["--master", "local[2]", "--deploy-mode", "cluster"], "use client"),
    (["--master", "yarn", "--repack"], "go with --pack-env"),
])
def test_contradictory_options_are_refused_in_one_line(submit, capsys, argv, message):
    with pytest.raises(SystemExit) as exit:
        submit.parse(argv)
    assert exit.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("sparkdbn-submit: ") and message in error and error.count("\n") == 1, error


def test_a_folder_that_is_no_environment_is_refused_in_one_line(submit, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit:
        submit.main(["--master", "yarn", "--pack-env", str(tmp_path), "--pack-cache", str(tmp_path / "c"),
                     "--dry-run"])
    assert exit.value.code == 2
    error = capsys.readouterr().err
    assert "neither a virtualenv" in error and error.count("\n") == 1, error


def test_packing_without_venv_pack_says_how_to_install_it(submit, capsys, tmp_path, monkeypatch):
    venv = make_venv(tmp_path / "venv")
    monkeypatch.setattr(submit._pack_env.importlib.util, "find_spec", lambda name, *rest: None)
    monkeypatch.setattr(submit._pack_env.shutil, "which", lambda *args, **kwargs: None)
    with pytest.raises(SystemExit) as exit:
        submit.main(["--master", "yarn", "--pack-env", str(venv), "--pack-cache", str(tmp_path / "cache")])
    error = capsys.readouterr().err
    assert exit.value.code == 2
    assert "venv-pack" in error and "pip install" in error and error.count("\n") == 1, error


def test_packing_leaves_out_pyspark_and_is_reused_until_a_package_changes(submit, tmp_path):
    pack_env = submit._pack_env
    venv = make_venv(tmp_path / "venv")
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "pyspark").mkdir()
    (site / "pyspark" / "__init__.py").write_text("")
    add_distribution(site, "pyspark", "9.9", "pyspark/__init__.py")
    (site / "wanted.py").write_text("VALUE = 1\n")
    add_distribution(site, "wanted", "1.0", "wanted.py")
    (site / "__editable__.sparkdbn-0.1.0.pth").write_text("import __editable___sparkdbn_0_1_0_finder\n")
    cache, lines = tmp_path / "cache", []

    first = pack_env.pack_environment(venv, cache, say=lines.append)
    with tarfile.open(first) as archive:
        names = set(archive.getnames())
    assert "bin/python" in names and f"{site.relative_to(venv)}/wanted.py" in names
    assert not [name for name in names if "pyspark" in name or "__editable__" in name], names
    assert any(line.startswith("packed") for line in lines)

    stamp = first.stat().st_mtime_ns
    again = pack_env.pack_environment(venv, cache, say=lines.append)
    assert again == first and first.stat().st_mtime_ns == stamp and lines[-1].startswith("using")

    add_distribution(site, "wanted", "1.0", "wanted.py", "more.py")  # reinstalled with other files
    changed = pack_env.pack_environment(venv, cache, say=lines.append)
    assert changed != first and changed.is_file() and not first.exists()
    assert sorted(path.name for path in cache.iterdir()) == [changed.name]


@pytest.mark.slow
def test_a_job_submitted_with_a_packed_environment_runs_its_executors_on_the_packed_python(standalone_cluster,
                                                                                           tmp_path):
    started = time.monotonic()
    lean = make_lean_venv(tmp_path / "lean")
    token = secrets.token_hex(8)
    (lean / "sparkdbn-test-token").write_text(token)  # travels in the archive: tells its copies apart
    store_url = "file://" + str(tmp_path / "store")
    command = [sys.executable, str(SCRIPT), "--master", standalone_cluster, "--pack-env", str(lean),
               "--pack-cache", str(tmp_path / "cache"),
               # stored, not compressed: 7 s to pack instead of 20-26 s, and quicker to unpack, on one machine
               "--pack-compress-level", "0", "--executor-cores", "1", "--total-executor-cores", "2",
               "--executor-memory", "512m", "--store", store_url, "--conf", "spark.ui.enabled=false",
               # both executors registered (so both unpacked the archive) before the tasks go out
               "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
               "--", "train", "--model", "rbm", "--layers", "16", "--epochs", "1", "--partitions", "2",
               "--run-id", "packed", "--no-report", "--no-progress"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S,
                          env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"))
    (tmp_path / "submit.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert f"spark.pyspark.driver.python={sys.executable}" in done.stderr  # the driver ran here
    packed = re.search(r"packed (\S+) \((\d+) MB\) in (\d+) s", done.stderr)
    assert packed, done.stderr[-3000:]
    print(f"packed {packed.group(2)} MB in {packed.group(3)} s; whole test {time.monotonic() - started:.0f} s")

    run = node.open_run(store_url, "packed")
    assert run.record["status"] == "done"
    peers = run.runs.list_peers()
    # At most one node per one-core executor.  Both may not have trained: an executor still starting its
    # packed Python for the fit's first job (the one that starts the workers) takes its training task late,
    # and a node that is done takes the partitions its slower peer has not started (node.modes._stealing).
    assert 1 <= len(peers) <= 2, peers
    assert {m["node"] for m in run.runs.read_metrics()} <= set(peers)
    for name in peers:
        python = Path(peers[name]["python"])
        environment = python.parent.parent
        assert python.name == "python" and environment.name == "environment", python
        assert (environment / "sparkdbn-test-token").read_text() == token  # inside an unpacked copy...
        assert not environment.is_relative_to(lean)  # ...not the packed folder itself
        assert not list(environment.glob("lib/python*/site-packages/pyspark")), "pyspark came from Spark"


def make_venv(target: Path) -> Path:
    """A virtualenv without pip (fast): ``pyvenv.cfg``, ``bin/python``, an empty site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    return target


def add_distribution(site: Path, name: str, version: str, *files: str) -> None:
    """Record an installed distribution as pip does: ``<name>-<version>.dist-info/RECORD``."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in (*files, f"{info.name}/RECORD")))


def runtime_distributions(root: str = "sparkdbn") -> set[str]:
    """The distributions ``root`` needs at run time (no extras), transitively."""
    from packaging.requirements import Requirement

    wanted, todo = set(), [root]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in wanted:
            continue
        wanted.add(name)
        for line in importlib.metadata.distribution(name).requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return wanted


def make_lean_venv(target: Path) -> Path:
    """A virtualenv holding sparkdbn's run-time dependencies, hard-linked from this one (offline, ~1 s).

    Each distribution's files are the ones its ``RECORD`` lists, so the result is what ``pip
    install`` would have made, without pyspark (the executors take Spark's), the test extras or pip.
    """
    make_venv(target)
    here = Path(sys.prefix)
    for name in sorted(runtime_distributions() - NOT_IN_LEAN_ENV):
        distribution = importlib.metadata.distribution(name)
        for file in distribution.files or ():
            source = Path(os.path.normpath(distribution.locate_file(file)))
            if not source.is_file() or not source.is_relative_to(here):
                continue
            destination = target / source.relative_to(here)
            destination.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, destination)
            except OSError:  # another file system
                destination.write_bytes(source.read_bytes())
    return target
