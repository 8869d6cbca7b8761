"""Mistakes on the command line: one line naming what is wrong, exit status 2, no traceback -- and for
every mistake that can be seen before Spark starts, Spark is not started.

Each command runs as a real process with ``JAVA_HOME`` pointing nowhere: had it started Spark, the
JVM could not launch and the command would fail with a Java gateway traceback instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BAD_CONVNET = """model:
  kind: convnet
  layers:
    - {type: conv, filters: 4, kernel: 5}
    - {type: dense, units: 10}
  input_shape: [1, 28, 28]
  n_classes: 10
"""


def sparkdbn(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAVA_HOME=str(cwd / "no-java-here"))
    return subprocess.run([sys.executable, "-m", "node.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def make_bad_convnet(folder: Path) -> str:
    (folder / "bad.yaml").write_text(BAD_CONVNET)
    return str(folder / "bad.yaml")


CASES = {
    "unknown run": (["evaluate", "--store", "{tmp}/store", "--run", "nothing"],
                    "evaluate: there is no run 'nothing' in the store"),
    "unknown run for predict": (["predict", "--store", "{tmp}/store", "--run", "gone", "--input", "{tmp}/in",
                                 "--output", "{tmp}/out"], "predict: there is no run 'gone'"),
    "missing dataset": (["train", "--store", "{tmp}/store", "--dataset", "file://{tmp}/nowhere"],
                        "train: --dataset file://{tmp}/nowhere: no dataset at"),
    "missing config": (["train", "--config", "{tmp}/absent.yaml"], "train: --config {tmp}/absent.yaml:"),
    "model that cannot take the data": (["train", "--store", "{tmp}/store", "--config", "{bad}"],
                                        "train: the model does not fit the dataset digits: 64 features"),
    "impossible hyperparameter": (["train", "--store", "{tmp}/store", "--model", "rbm", "--layers", "0"],
                                  "train: the model does not fit the dataset digits: n_components must be"),
    "unknown model": (["train", "--store", "{tmp}/store", "--model", "transformer"], "train: unknown model"),
    "bad setting": (["train", "--store", "{tmp}/store", "--partitions", "0"],
                    "train: training settings: partitions must be >= 1, got 0"),
    "report folder of other files": (["train", "--store", "{tmp}/store", "--out", "{tmp}/mine"],
                                     "train: the report folder {tmp}/mine holds 'thesis.txt', which no report wrote"),
    "store that cannot be used": (["train", "--store", "ftp://{tmp}/store"],
                                  "train: the store 'ftp://{tmp}/store' is unreachable or not writable"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_mistake_is_one_line_exit_2_and_spark_never_starts(case, tmp_path):
    args, expected = CASES[case]
    fill = dict(tmp=str(tmp_path), bad=make_bad_convnet(tmp_path))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.txt").write_text("years of work")
    result = sparkdbn(*(arg.format(**fill) for arg in args), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparkdbn "), result.stderr
    assert expected.format(**fill) in lines[0]
    assert "Traceback" not in result.stderr and "Java" not in result.stderr
    if case == "unknown run":  # --verbose adds the traceback for those who want it
        verbose = sparkdbn("--verbose", *(arg.format(**fill) for arg in args), cwd=tmp_path)
        assert verbose.returncode == 2 and "Traceback (most recent call last)" in verbose.stderr
    assert not (tmp_path / "store" / "runs").exists() or not any((tmp_path / "store" / "runs").iterdir())
    assert [path.name for path in (tmp_path / "mine").iterdir()] == ["thesis.txt"]


def test_a_missing_predict_input_is_named_before_spark_starts(tmp_path, monkeypatch, capsys):
    from node.cli import _commands, main

    started = []
    monkeypatch.setattr(_commands, "_session", lambda options: started.append(options) or pytest.fail("Spark started"))
    monkeypatch.setattr(_commands, "_load_run_model", lambda store, run: object())
    status = main(["predict", "--run", "r", "--input", str(tmp_path / "in.parquet"), "--output",
                       str(tmp_path / "out")])
    assert status == 2 and not started
    assert capsys.readouterr().err.strip() == f"sparkdbn predict: --input {tmp_path / 'in.parquet'} does not exist"


def test_misspelled_keys_and_flags_are_one_line_naming_the_closest_and_spark_never_starts(tmp_path, monkeypatch,
                                                                                         capsys):
    from node.cli import _commands, main

    monkeypatch.setattr(_commands, "_session", lambda options: pytest.fail("Spark started"))
    (tmp_path / "typo.yaml").write_text("model: dbn\nepoch: 3\n")
    (tmp_path / "typo-setting.yaml").write_text("settings:\n  fan_out: 2\n")
    store = str(tmp_path / "store")
    cases = [
        (["train", "--store", store, "--config", str(tmp_path / "typo.yaml")],
         f"sparkdbn train: --config {tmp_path / 'typo.yaml'}: unknown key 'epoch'; did you mean 'epochs'?"),
        (["train", "--store", store, "--config", str(tmp_path / "typo-setting.yaml")],
         f"sparkdbn train: --config {tmp_path / 'typo-setting.yaml'}: settings: unknown key 'fan_out'; "
         "did you mean 'fanout'?"),
        # abbreviations are off: --conf is never taken for --config, nor --epoch for --epochs
        (["stage", "--url", str(tmp_path / "d"), "--conf", "spark.ui.port=4050"],
         "sparkdbn stage: unrecognized arguments: --conf spark.ui.port=4050 (did you mean --config?)"),
        (["train", "--store", store, "--epoch", "3"],
         "sparkdbn train: unrecognized arguments: --epoch 3 (did you mean --epochs?)"),
        (["train", "--store", store, "--conf", "spark.ui.port"],
         "sparkdbn train: --conf 'spark.ui.port': expected key=value, e.g. --conf spark.ui.port=4050"),
    ]
    for args, expected in cases:
        try:
            status = main(args)
        except SystemExit as exit:  # argparse's own mistakes
            status = exit.code
        assert status == 2, args
        assert capsys.readouterr().err.strip() == expected
    assert not (tmp_path / "store").exists() and not (tmp_path / "d").exists()


NPZ_FILES = {
    "labels of another length": (lambda path: np.savez(path, X=np.zeros((6, 4)), y=np.arange(5)),
                                 "the labels have shape (5,) for 6 samples; expected (6,)"),
    "an object array": (lambda path: np.savez(path, X=np.array([{"a": 1}] * 6, dtype=object), y=np.arange(6)),
                        "cannot be read as npz (numpy.savez's arrays of numbers or strings, no objects)"),
    "not an npz": (lambda path: path.write_text("x,y\n1,2\n"), "cannot be read as npz"),
}


@pytest.mark.parametrize("case", sorted(NPZ_FILES))
def test_an_npz_that_cannot_be_staged_is_one_line_naming_the_file_and_nothing_is_staged(case, tmp_path):
    write, expected = NPZ_FILES[case]
    write(tmp_path / "mine.npz")
    result = sparkdbn("stage", "--input", str(tmp_path / "mine.npz"), "--url", str(tmp_path / "staged"),
                      "--shards", "2", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sparkdbn stage: {tmp_path / 'mine.npz'}"), result.stderr
    assert expected in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "staged").exists() or not any((tmp_path / "staged").iterdir())
