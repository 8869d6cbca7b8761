"""Mistakes that need no Spark are refused before Spark starts (one line, exit status 2), and a command that
ends with an error after Spark started ends quietly: its one line is the last thing printed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def sparkdbn(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``sparkdbn ARGS`` where Spark cannot start (no Java): a mistake said before it starts is the only output."""
    env = dict(os.environ, JAVA_HOME=str(cwd / "no-java-here"))
    return subprocess.run([sys.executable, "-m", "node.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparkdbn "), result.stderr
    return lines[0]


def test_train_that_would_train_no_epoch_is_refused_before_spark_starts(tmp_path):
    # It started Spark (20-25 s) before the fit said so, then Java traces followed the line.
    line = one_line(sparkdbn("train", "--store", str(tmp_path / "store"), "--epochs", "0", "--no-report",
                             cwd=tmp_path))
    assert line.startswith("sparkdbn train: training settings: every phase (rbm0, rbm1, finetune) would train 0 "
                           "epochs"), line


def test_train_with_an_invalid_run_id_is_refused_before_spark_starts(tmp_path):
    line = one_line(sparkdbn("train", "--store", str(tmp_path / "store"), "--run-id", "a/b", "--no-report",
                             cwd=tmp_path))
    assert line == "sparkdbn train: invalid run name 'a/b': must be a non-empty name without '/', '\\', '..'"
    assert not any((tmp_path / "store" / "runs").iterdir())


def test_train_on_a_local_store_this_process_may_not_write_is_refused_before_spark_starts(tmp_path, monkeypatch,
                                                                                            capsys):
    # A read-only store was said after Spark started, by the lease's first write 22 s later.
    import node.cli._commands as _commands
    from node.cli import main

    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    real_access = os.access
    asked = []

    def access(path, mode, *args, **kwargs):  # the tests run as root: a read-only file system, as access(2) says
        if Path(path) == store / "runs" and mode & os.W_OK:
            asked.append(path)
            return False
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(_commands, "_session", lambda options: pytest.fail("Spark started"))
    assert main(["train", "--store", str(store), "--run-id", "new1", "--no-report"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"sparkdbn train: the store 'file://{store}' is not writable here: this process may not write "
                   f"{store / 'runs'} (a read-only file system or another user's folder); give --store a folder it "
                   "may write"), err
    assert asked and [path.name for path in store.iterdir()] == ["runs"] and not any((store / "runs").iterdir())


def test_evaluate_with_input_and_dataset_is_refused_as_stage_refuses_input_with_recipe(tmp_path, monkeypatch, capsys):
    # It was accepted silently (exit status 0), without saying which of the two it evaluated.
    import node.cli._commands as _commands
    from node.cli import main

    monkeypatch.setattr(_commands, "_session", lambda options: pytest.fail("Spark started"))
    monkeypatch.setattr(_commands, "is_classifier", lambda model: True)
    monkeypatch.setattr(_commands, "_open_run", lambda options: SimpleNamespace(record=None))
    monkeypatch.setattr(_commands, "load_run_model", lambda view: object())
    assert main(["evaluate", "--run", "r", "--input", str(tmp_path / "new.parquet"), "--dataset", "digits"]) == 2
    assert capsys.readouterr().err.strip() == (
        "sparkdbn evaluate: evaluate takes --input (a Parquet or CSV file or folder of new rows with their labels) "
        "or --dataset (a recipe or a staged dataset URL): give one")


def test_a_config_files_dataset_is_still_overridden_by_the_input_flag(tmp_path, monkeypatch, capsys):
    import node.cli._commands as _commands
    from node.cli import main

    (tmp_path / "job.yaml").write_text("run_id: r\ndataset: digits\n")
    monkeypatch.setattr(_commands, "_session", lambda options: pytest.fail("Spark started"))
    monkeypatch.setattr(_commands, "is_classifier", lambda model: True)
    monkeypatch.setattr(_commands, "_open_run", lambda options: SimpleNamespace(record=None))
    monkeypatch.setattr(_commands, "load_run_model", lambda view: object())
    assert main(["evaluate", "--store", str(tmp_path / "store"), "--config", str(tmp_path / "job.yaml"),
                 "--input", str(tmp_path / "new.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"sparkdbn evaluate: --input {tmp_path / 'new.parquet'} does not exist"  # not "give one"


def test_the_cli_pages_job_file_describes_the_run_the_example_config_trains():
    # Its job.yaml lacked seed: and settings: validation_fraction, so `train --config job.yaml` was refused
    # ("run 'digits' trained on 1294 samples, this data has 1438").
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    block = text.split("# file: job.yaml\n", 1)[1].split("```", 1)[0]
    example = yaml.safe_load((ROOT / "examples" / "dbn-digits.yaml").read_text(encoding="utf-8"))
    assert yaml.safe_load(block) == {**example, "run_id": "digits"}


@pytest.mark.slow
def test_an_error_after_spark_started_is_the_last_line_and_spark_is_stopped(tmp_path):
    # Java traces (a task's "Python worker exited unexpectedly", "Block broadcast_0 does not exist") followed
    # the one line: the session stopped at exit under the fit's job that starts the Python workers.
    (tmp_path / "phases.yaml").write_text("settings:\n  epochs: {rbm0: 1, finetun: 1}\n")  # only the fit sees it
    script = textwrap.dedent("""
        import sys
        from pyspark import SparkContext
        from node.cli import main
        status = main(sys.argv[1:])
        print("spark still running" if SparkContext._active_spark_context else "spark stopped", file=sys.stderr)
        raise SystemExit(status)
    """)
    result = subprocess.run([sys.executable, "-c", script, "train", "--store", str(tmp_path / "store"), "--config",
                             str(tmp_path / "phases.yaml"), "--no-report", "--conf", "spark.ui.enabled=false"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert lines[-2:] == ["sparkdbn train: epochs names 'finetun', not a phase of this model (rbm0, rbm1, finetune)",
                          "spark stopped"], result.stderr
    assert "Traceback" not in result.stderr and "Exception" not in result.stderr


def test_the_commands_that_read_a_run_retry_the_store_as_long_as_the_config_files_settings_say(tmp_path, capsys):
    # They waited the default 30 s whatever the file said, and took a negative time as "try once".
    from node.cli import main

    with socket.socket() as probe:  # a port where nothing listens: every store call is refused
        probe.bind(("127.0.0.1", 0))
        url = f"hdfs://127.0.0.1:{probe.getsockname()[1]}"
    (tmp_path / "job.yaml").write_text("run_id: r\nsettings:\n  store_retry_timeout_s: 0.2\n")
    for command in (["status"], ["evaluate"], ["report", "--out", str(tmp_path / "report")],
                    ["predict", "--input", str(tmp_path / "in.parquet"), "--output", str(tmp_path / "out")]):
        assert main([*command, "--store", url, "--config", str(tmp_path / "job.yaml")]) == 2
        err = capsys.readouterr().err
        assert "(retry_timeout_s=0.2)" in err and "connection refused" in err, (command, err)
    (tmp_path / "bad.yaml").write_text("run_id: r\nsettings:\n  store_retry_timeout_s: -1\n")
    assert main(["status", "--store", url, "--config", str(tmp_path / "bad.yaml")]) == 2
    assert capsys.readouterr().err.strip() == ("sparkdbn status: training settings: store_retry_timeout_s must be >= 0 "
                                               "(0: each store operation is tried once), got -1")


def test_a_negative_seed_is_refused_by_name_before_spark_starts(tmp_path, monkeypatch, capsys):
    # numpy's "expected non-negative integer" traceback came out of the recipe's split, exit status 1.
    import node
    import node.cli._commands as _commands
    from node.cli import main

    monkeypatch.setattr(_commands, "_session", lambda options: pytest.fail("Spark started"))
    assert main(["train", "--store", str(tmp_path / "store"), "--seed", "-1", "--epochs", "1"]) == 2
    assert capsys.readouterr().err.strip() == ("sparkdbn train: training settings: seed must be an integer in "
                                               "[0, 2**63), got -1")
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*63\), got -1"):
        node.TrainingSettings(seed=-1).validate()
