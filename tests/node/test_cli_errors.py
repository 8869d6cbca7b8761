"""Mistakes on the command line: one line naming what is wrong, exit status 2, no traceback -- and for
every mistake that can be seen before Spark starts, Spark is not started.

Each command runs as a real process with ``JAVA_HOME`` pointing nowhere: had it started Spark, the
JVM could not launch and the command would fail with a Java gateway traceback instead.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
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
    # PyYAML's and json's own messages ran over several lines (an excerpt of the file)
    "config that is not YAML": (["train", "--config", "{tmp}/broken.yaml"],
                                "train: --config {tmp}/broken.yaml: not valid YAML: line 3, column 9: mapping values "
                                "are not allowed here"),
    "config that is not JSON": (["evaluate", "--run", "r", "--config", "{tmp}/broken.json"],
                                "evaluate: --config {tmp}/broken.json: not valid JSON: line 2, column 14: Expecting "
                                "property name enclosed in double quotes"),
    "model that cannot take the data": (["train", "--store", "{tmp}/store", "--config", "{bad}"],
                                        "train: the model does not fit the dataset digits: 64 features"),
    "impossible hyperparameter": (["train", "--store", "{tmp}/store", "--model", "rbm", "--layers", "0"],
                                  "train: the model does not fit the dataset digits: n_components must be"),
    "mistyped recipe": (["train", "--store", "{tmp}/store", "--dataset", "digit"],
                        "train: --dataset digit: not a recipe (digits, digits28; did you mean 'digits'?), and no "
                        "dataset at"),
    "layer sizes that are not numbers": (["train", "--store", "{tmp}/store", "--layers", "100,x"],
                                         "train: argument --layers: expected hidden layer sizes separated by "
                                         "commas, e.g. 100,100; got '100,x'"),
    "unknown model": (["train", "--store", "{tmp}/store", "--model", "transformer"], "train: unknown model"),
    "bad setting": (["train", "--store", "{tmp}/store", "--partitions", "0"],
                    "train: training settings: partitions must be >= 1, got 0"),
    # a node without a port failed its tasks with a stack trace, and the run went on with one node
    "port range smaller than the nodes": (["train", "--store", "{tmp}/store", "--port-range", "5000",
                                           "--master", "local[3]"],
                                          "train: port_range 5000 holds 1 port for 3 nodes: on the local master "
                                          "local[3] every node runs on this host"),
    "setting that is no number": (["train", "--store", "{tmp}/store", "--config", "{tmp}/three.yaml"],
                                  "train: training settings: epochs must be an integer or a mapping of phase to "
                                  "integer, got 'three'"),
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
    (tmp_path / "broken.yaml").write_text("model: dbn\nepochs: 3\n  layers: [1\n")
    (tmp_path / "broken.json").write_text('{"model": "dbn",\n "epochs": 3,,}\n')
    (tmp_path / "three.yaml").write_text("settings: {epochs: three}\n")
    result = sparkdbn(*(arg.format(**fill) for arg in args), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparkdbn "), result.stderr
    assert expected.format(**fill) in lines[0]
    assert "Traceback" not in result.stderr and "Java" not in result.stderr
    if case == "unknown run":  # --verbose adds the traceback for those who want it
        verbose = sparkdbn("--verbose", *(arg.format(**fill) for arg in args), cwd=tmp_path)
        assert verbose.returncode == 2 and "Traceback (most recent call last)" in verbose.stderr
        # ... given before the command or among its own flags
        verbose = sparkdbn(*(arg.format(**fill) for arg in args), "--verbose", cwd=tmp_path)
        assert verbose.returncode == 2 and "Traceback (most recent call last)" in verbose.stderr
        assert expected.format(**fill) in verbose.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "store" / "runs").exists() or not any((tmp_path / "store" / "runs").iterdir())
    assert [path.name for path in (tmp_path / "mine").iterdir()] == ["thesis.txt"]


def test_a_missing_predict_input_is_named_before_spark_starts(tmp_path, monkeypatch, capsys):
    from node.cli import _commands, main

    started = []
    monkeypatch.setattr(_commands, "_session", lambda options: started.append(options) or pytest.fail("Spark started"))
    monkeypatch.setattr(_commands, "_open_run", lambda options: SimpleNamespace(record=None))
    monkeypatch.setattr(_commands, "load_run_model", lambda view: object())
    status = main(["predict", "--run", "r", "--input", str(tmp_path / "in.parquet"), "--output",
                       str(tmp_path / "out")])
    assert status == 2 and not started
    assert capsys.readouterr().err.strip() == f"sparkdbn predict: --input {tmp_path / 'in.parquet'} does not exist"


def test_an_input_that_is_neither_parquet_nor_csv_is_named_before_spark_starts(tmp_path, monkeypatch, capsys):
    # `predict --input data.txt` once reached Spark, which printed Java stack traces from every
    # task attempt and exited 1.
    from node.cli import _commands, main

    started = []
    monkeypatch.setattr(_commands, "_session", lambda options: started.append(options) or pytest.fail("Spark started"))
    monkeypatch.setattr(_commands, "_open_run", lambda options: SimpleNamespace(record=None))
    monkeypatch.setattr(_commands, "load_run_model", lambda view: object())
    monkeypatch.setattr(_commands, "is_classifier", lambda model: True)
    text = tmp_path / "digits.txt"
    text.write_text("pixel0,pixel1,label\n0,16,3\n")
    folder = tmp_path / "folder.parquet"
    folder.mkdir()
    (folder / "_SUCCESS").write_text("")  # hidden from Spark, as are .crc files: not looked at
    (folder / "part-0.txt").write_text("0,16,3\n")
    both = tmp_path / "both"
    both.mkdir()
    (both / "part-0.csv").write_text("features,label\n")
    pq.write_table(pa.table({"features": [[0.0, 1.0]]}), both / "part-1.parquet")
    neither = "nor a CSV file (named *.csv): --input is a Parquet or CSV file, or a folder of them"
    cases = [
        (["predict", "--run", "r", "--input", str(text), "--output", str(tmp_path / "out")],
         f"sparkdbn predict: --input {text} is neither a Parquet file (b'pixe' where Parquet begins with 'PAR1') "
         f"{neither}"),
        (["evaluate", "--run", "r", "--input", str(folder)],
         f"sparkdbn evaluate: --input {folder} holds part-0.txt, which is neither a Parquet file (b'0,16' where "
         f"Parquet begins with 'PAR1') {neither}"),
        (["evaluate", "--run", "r", "--input", str(both)],
         f"sparkdbn evaluate: --input {both} holds both Parquet ({both / 'part-1.parquet'}) and CSV files "
         f"({both / 'part-0.csv'}): give one kind"),
    ]
    for args, expected in cases:
        assert main(args) == 2, args
        assert capsys.readouterr().err.strip() == expected
    assert not started and not (tmp_path / "out").exists()


def test_an_input_without_the_features_or_labels_asked_is_named_before_spark_starts(tmp_path, monkeypatch, capsys):
    # A CSV file of one column per feature (as `stage --input` takes) reached Spark, which said after half a
    # minute that the DataFrame has no features column.
    from node.cli import _commands, main

    monkeypatch.setattr(_commands, "_session", lambda options: pytest.fail("Spark started"))
    monkeypatch.setattr(_commands, "_open_run", lambda options: SimpleNamespace(record=None))
    monkeypatch.setattr(_commands, "load_run_model", lambda view: SimpleNamespace(n_features_in_=3))
    monkeypatch.setattr(_commands, "is_classifier", lambda model: True)
    rows = tmp_path / "rows.csv.gz"
    with gzip.open(rows, "wt") as handle:
        handle.write("a,b,c,kind\n0.1,0.2,0.3,x\n")
    out = ["--output", str(tmp_path / "out")]
    cases = [
        (["predict", "--input", str(rows), *out],
         f"--input {rows} has no features column 'features'; its columns are ['a', 'b', 'c', 'kind']: give "
         "--features-col (a column of vectors or arrays) or --features-cols a,b,c (scalar columns)"),
        (["predict", "--input", str(rows), "--features-cols", "a,b,d", *out],
         f"--input {rows} has no column 'd' of --features-cols; its columns are ['a', 'b', 'c', 'kind']"),
        (["predict", "--input", str(rows), "--features-cols", "a,b", *out],
         f"--input {rows}: 2 feature columns ['a', 'b'], the model takes 3 features"),
        (["evaluate", "--input", str(rows), "--features-cols", "a,b,c"],
         f"--input {rows} has no label column 'label' (--label-col); its columns are ['a', 'b', 'c', 'kind']"),
        (["evaluate", "--dataset", "digits", "--features-cols", "a,b,c"],
         "--features-cols names columns of --input (new rows); a staged dataset's features are its own: give "
         "--input, or leave --features-cols out"),
    ]
    for args, expected in cases:
        assert main([args[0], "--run", "r", *args[1:]]) == 2, args
        assert capsys.readouterr().err.strip() == f"sparkdbn {args[0]}: {expected}"
    assert not (tmp_path / "out").exists()


def test_an_output_predict_may_not_write_is_named_before_spark_starts(tmp_path, monkeypatch, capsys):
    # These refusals came after Spark had started (half a minute on this machine), from the write.
    import pyarrow as pa
    import pyarrow.parquet as pq

    from node.cli import _commands, main

    monkeypatch.setattr(_commands, "_session", lambda options: pytest.fail("Spark started"))
    monkeypatch.setattr(_commands, "_open_run", lambda options: SimpleNamespace(record=None))
    monkeypatch.setattr(_commands, "load_run_model", lambda view: object())
    data = tmp_path / "in.parquet"
    data.mkdir()
    pq.write_table(pa.table({"features": [[0.0, 1.0]]}), data / "part-0.parquet")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    (tmp_path / "a-file").write_text("mine")
    cases = [
        (["--output", str(tmp_path / "mine")], f"--output {tmp_path / 'mine'} already holds 1 file(s) (e.g. notes.txt)"),
        (["--output", str(tmp_path / "mine"), "--overwrite"],
         f"--overwrite refused: {tmp_path / 'mine'} holds 'notes.txt', which it did not write; nothing was deleted"),
        (["--output", str(tmp_path / "a-file")], f"--output {tmp_path / 'a-file'} is a file"),
        (["--output", str(data / "predictions")], f"--output {data / 'predictions'} overlaps the input {data}"),
        (["--output", "file://" + str(data)], f"--output file://{data} is the input {data}"),
        # these reached Spark, whose tasks failed with Java traces: a folder under a file (root too) ...
        (["--output", str(tmp_path / "a-file" / "out" / "deeper")],
         f"--output {tmp_path / 'a-file' / 'out' / 'deeper'} cannot be created: {tmp_path / 'a-file'} is a file"),
    ]
    if os.path.isdir("/proc/self"):  # ... and a folder where none can be made
        cases.append((["--output", "/proc/p3"], "--output /proc/p3 cannot be created: /proc takes no new folder ("))
    for args, expected in cases:
        assert main(["predict", "--run", "r", "--input", str(data), *args]) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"sparkdbn predict: {expected}"), err
    assert [path.name for path in (tmp_path / "mine").iterdir()] == ["notes.txt"]
    assert (tmp_path / "a-file").read_text() == "mine" and [path.name for path in data.iterdir()] == ["part-0.parquet"]


def test_evaluate_of_an_rbm_alone_says_its_validation_metrics_are_shown_only_when_it_was_validated(monkeypatch,
                                                                                                   capsys):
    # It said the metrics "are in `sparkdbn status`", which shows none for a run trained without validation.
    import rbm

    from node.cli import _commands, main

    monkeypatch.setattr(_commands, "_session", lambda options: pytest.fail("Spark started"))
    monkeypatch.setattr(_commands, "_open_run", lambda options: SimpleNamespace(record=None))
    monkeypatch.setattr(_commands, "load_run_model", lambda view: rbm.RBM(4))
    assert main(["evaluate", "--run", "features"]) == 2
    assert capsys.readouterr().err.strip() == (
        "sparkdbn evaluate: run features holds an RBM alone, which learns no labels: evaluate reports classifiers "
        "(`sparkdbn train` prints an RBM's held-out reconstruction error, and `sparkdbn status --run features` "
        "shows its validation metrics when it was validated)")


def test_a_parquet_input_passes_the_check_whatever_hidden_files_lie_beside_it(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from node.cli import _inputs

    folder = tmp_path / "in.parquet"
    (folder / "label=3").mkdir(parents=True)  # a partitioned folder: Spark reads the subfolders too
    pq.write_table(pa.table({"features": [[0.0, 1.0]]}), folder / "label=3" / "part-0.parquet")
    (folder / "_SUCCESS").write_text("")
    (folder / ".part-0.parquet.crc").write_bytes(b"crc")
    (folder / "label=3" / "empty.parquet").write_bytes(b"")  # Spark skips an empty file
    _inputs.check_input(str(folder))
    _inputs.check_input("file://" + str(folder / "label=3" / "part-0.parquet"))
    _inputs.check_input("hdfs://namenode:9870/not/looked/at/here")


def test_misspelled_keys_and_flags_are_one_line_naming_the_closest_and_spark_never_starts(tmp_path, monkeypatch,
                                                                                         capsys):
    from node.cli import _commands, main

    monkeypatch.setattr(_commands, "_session", lambda options: pytest.fail("Spark started"))
    (tmp_path / "typo.yaml").write_text("model: dbn\nepoch: 3\n")
    (tmp_path / "typo-setting.yaml").write_text("settings:\n  fan_out: 2\n")
    (tmp_path / "two-runs.yaml").write_text("run: a\nrun_id: b\n")
    (tmp_path / "no-run.yaml").write_text("epochs: 3\n")  # train's: evaluate skips it, and has no run
    store = str(tmp_path / "store")
    cases = [
        # a key that no command takes is refused by every one (train's keys are skipped by the others)
        (["evaluate", "--store", store, "--config", str(tmp_path / "typo.yaml")],
         f"sparkdbn evaluate: --config {tmp_path / 'typo.yaml'}: unknown key 'epoch'; did you mean 'epochs'?"),
        (["status", "--store", store, "--config", str(tmp_path / "two-runs.yaml")],
         f"sparkdbn status: --config {tmp_path / 'two-runs.yaml'}: run_id 'b' and run 'a' name two runs; give one"),
        (["report", "--store", store, "--config", str(tmp_path / "no-run.yaml")],
         "sparkdbn report: report needs --run (the run's name), or run_id: in its --config file"),
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


def test_a_config_file_serves_every_command_of_a_run_and_a_command_that_makes_something_names_what_it_skips(
        tmp_path, caplog):
    from node.cli import build_parser
    from node.cli._main import _settings_of
    from node.cli._options import load_config

    commands = build_parser().parse_args(["status", "--run", "r"]).subparsers
    every = {name: _settings_of(command) for name, command in commands.items()}
    config = tmp_path / "job.yaml"
    config.write_text("run_id: r\nstore: s\nepochs: 3\ninput: new.csv\nspark_conf: {spark.ui.enabled: 'false'}\n")

    def read(command: str) -> dict:
        others = set().union(*(keys for name, keys in every.items() if name != command))
        return load_config(str(config), every[command], others, say_skipped=command in ("train", "stage"))

    with caplog.at_level("WARNING", logger="node.cli._options"):
        assert read("status") == {"run": "r", "store": "s", "spark_conf": {"spark.ui.enabled": "false"}}
        assert read("evaluate") == {"run": "r", "store": "s", "input": "new.csv",
                                    "spark_conf": {"spark.ui.enabled": "false"}}
        assert not caplog.records  # a command that reads a run skips train's keys quietly
        assert read("train") == {"run_id": "r", "store": "s", "epochs": 3, "spark_conf": {"spark.ui.enabled": "false"}}
    assert [record.getMessage() for record in caplog.records] == [
        f"--config {config}: skipped input, which other commands take, not this one"]  # train's is dataset:


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


def _parquet(columns: dict) -> callable:
    return lambda path: pq.write_table(pa.table(columns), str(path))


FEATURES = {"a": [0.0, 1.0, 2.0, 3.0], "b": [3.0, 2.0, 1.0, 0.0]}
MISSING_LABELS = {
    # (file name, how to write it, what the one line says after "sparkdbn stage: <file>: ")
    "a null in a string column": ("mine.parquet", _parquet({**FEATURES, "label": ["x", None, "y", "x"]}),
                                  "label column 'label' has 1 missing label(s) (empty, null or NaN), first at row 1 "
                                  "(0-based); drop or fill the missing labels before staging"),
    "a null in an integer column": ("mine.parquet", _parquet({**FEATURES, "label": pa.array([1, 0, None, 1])}),
                                    "label column 'label' has 1 missing label(s) (empty, null or NaN), first at row 2"),
    "a NaN in a float column": ("mine.parquet", _parquet({**FEATURES, "label": [0.0, 1.0, 1.0, float("nan")]}),
                                "label column 'label' has 1 missing label(s) (empty, null or NaN), first at row 3 "
                                "(0-based)"),
    "a column of nulls": ("mine.parquet", _parquet({**FEATURES, "label": pa.nulls(4)}),
                          "label column 'label' has 4 missing label(s) (empty, null or NaN), first at row 0"),
    "an infinite label": ("mine.parquet", _parquet({**FEATURES, "label": [0.0, float("inf"), 1.0, 1.0]}),
                          "label column 'label' holds inf at row 1 (0-based), which is no class"),
    "a list column": ("mine.parquet", _parquet({**FEATURES, "label": [[1], [2], [1], [2]]}),
                      "label column 'label' is list<element: int64>, not classes (numbers, strings or booleans); "
                      "name another with --label-col, or '' for none"),
    "a struct column": ("mine.parquet", _parquet({**FEATURES, "label": [{"k": 1}, {"k": 2}, {"k": 1}, {"k": 1}]}),
                        "label column 'label' is struct<k: int64>, not classes"),
    "an empty CSV cell": ("mine.csv", lambda path: path.write_text("a,b,label\n0,3,x\n1,2,y\n2,1,\n3,0,x\n"),
                          "label column 'label' has 1 missing label(s) (empty, null or NaN), first at row 2 "
                          "(0-based, the header not counted)"),
    "a blank CSV cell": ("mine.csv", lambda path: path.write_text("a,b,label\n0,3, \n1,2,y\n2,1,x\n3,0,x\n"),
                         "label column 'label' has 1 missing label(s) (empty, null or NaN), first at row 0 "
                         "(0-based, the header not counted)"),
    "an empty CSV cell of numbers": ("mine.csv",
                                     lambda path: path.write_text("a,b,label\n0,3,1\n1,2,0\n2,1,1\n3,0,\n"),
                                     "label column 'label' has 1 missing label(s) (empty, null or NaN), first at row 3"),
    "a NaN in NPZ labels": ("mine.npz", lambda path: np.savez(path, X=np.zeros((4, 2)), y=np.array([0, 1, np.nan, 1])),
                            "label array 'y' has 1 missing label(s) (empty, null or NaN), first at row 2 (0-based)"),
    "an empty string in NPZ labels": ("mine.npz", lambda path: np.savez(path, X=np.zeros((4, 2)),
                                                                        y=np.array(["a", "b", "a", ""])),
                                      "label array 'y' has 1 missing label(s) (empty, null or NaN), first at row 3"),
}


@pytest.mark.parametrize("case", sorted(MISSING_LABELS))
def test_a_missing_label_or_one_that_is_no_class_is_one_line_naming_column_and_row_and_nothing_is_staged(
        case, tmp_path, capsys):
    from node.cli import main

    name, write, expected = MISSING_LABELS[case]
    write(tmp_path / name)
    source = str(tmp_path / name)
    assert main(["stage", "--input", source, "--url", str(tmp_path / "staged"), "--shards", "2"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sparkdbn stage: {source}: {expected}"), lines
    assert not (tmp_path / "staged").exists() or not any((tmp_path / "staged").iterdir())


def test_contradictory_or_ignored_stage_flags_are_one_line_and_nothing_is_staged(tmp_path, capsys):
    from node.cli import main

    csv, npz, idx = tmp_path / "mine.csv", tmp_path / "mine.npz", tmp_path / "train-images-idx3-ubyte"
    url = str(tmp_path / "staged")
    (tmp_path / "both.yaml").write_text(f"input: {csv}\nrecipe: digits\n")
    (tmp_path / "column.yaml").write_text("label_col: digit\n")
    without_input = "applies to --input (a file of your own), and there is none: the recipe digits would be staged " \
                    "without it"
    cases = [
        (["--input", str(csv), "--recipe", "digits"], f"--input {csv} and --recipe digits: give one, a file of your "
                                                      "own or a recipe"),
        (["--config", str(tmp_path / "both.yaml")], f"--input {csv} and --recipe digits: give one"),
        (["--label-col", "digit"], f"--label-col {without_input}"),
        (["--config", str(tmp_path / "column.yaml")], f"--label-col {without_input}"),
        (["--features-cols", "a,b"], f"--features-cols {without_input}"),
        (["--labels", str(tmp_path / "labels")], f"--labels {without_input}"),
        (["--test-fraction", "0.2"], f"--test-fraction {without_input}"),
        (["--scale", "minmax"], f"--scale {without_input}"),
        (["--seed", "3"], f"--seed {without_input}"),
        (["--recipe", "digits28", "--scale", "minmax"], "--scale applies to --input (a file of your own), and there is "
                                                        "none: the recipe digits28 would be staged without it"),
        (["--input", str(npz), "--label-col", "y"], f"--label-col names columns of a CSV or Parquet --input; {npz} is "
                                                    "NPZ: its features and labels are its arrays X and y"),
        (["--input", str(npz), "--label-col", ""], "--label-col names columns of a CSV or Parquet --input"),
        (["--input", str(idx), "--features-cols", "a"],
         f"--features-cols names columns of a CSV or Parquet --input; {idx} is IDX: its features are its images, its "
         "labels in the file --labels names"),
        (["--input", str(csv), "--labels", str(tmp_path / "labels")],
         f"--labels names the labels file of an IDX --input; {csv} is CSV, whose labels are its --label-col column"),
        (["--input", str(npz), "--labels", str(tmp_path / "labels")],
         f"--labels names the labels file of an IDX --input; {npz} is NPZ, whose labels are its array y"),
        (["--input", str(csv), "--seed", "-3"], "--seed must be an integer in [0, 2**63), got -3"),
    ]
    for args, expected in cases:
        assert main(["stage", "--url", url, *args]) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"sparkdbn stage: {expected}"), (args, lines)
    assert not (tmp_path / "staged").exists()


def test_stage_says_unlabelled_and_a_second_staging_names_only_the_overwrite_flag(tmp_path, capsys):
    import storage
    from node.cli import main
    from node.data import stage_input

    (tmp_path / "mine.csv").write_text("a,b\n0,3\n1,2\n2,1\n")
    url = str(tmp_path / "staged")
    stage = ["stage", "--input", str(tmp_path / "mine.csv"), "--url", url, "--label-col", "", "--shards", "1"]
    assert main(stage) == 0
    assert capsys.readouterr().out.strip() == f"staged {tmp_path / 'mine.csv'} at {url}: 3 training samples of [2] " \
                                              "features, unlabelled"
    assert main(stage) == 2
    assert capsys.readouterr().err.strip() == (f"sparkdbn stage: file://{url} already holds 2 entries (e.g. "
                                               "'_meta.json'); nothing was written. Stage into a new folder, or pass "
                                               "--overwrite to replace a dataset staged there before")
    with pytest.raises(storage.DestinationNotEmptyError, match=r"pass overwrite=True \(--overwrite\) to replace"):
        stage_input(str(tmp_path / "mine.csv"), url, label_col=None)  # Python keeps its keyword
