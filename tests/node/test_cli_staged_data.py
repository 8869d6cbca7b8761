"""`sparkdbn predict` and `evaluate` on staged data, and bad rows found on the executors: reported once."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.numerics import forward_rtol, near_ties
from support.spark_jobs import failed_tasks_since, newest_job

import node
import storage
from node import cli
from node.cli._commands import PREDICTION_COLUMNS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def staged_run(spark, tmp_path_factory):
    """digits staged in 3 shards (held-out split at <url>/test) in a store whose path has spaces, and a conv net
    trained on it for one epoch from the command line (run ``staged``)."""
    root = tmp_path_factory.mktemp("staged cli")
    store = root / "a store"
    url = "file://" + str(store / "datasets" / "digits")
    assert cli.main(["stage", "--recipe", "digits", "--url", url, "--shards", "3"]) == 0
    assert cli.main(["train", "--store", str(store), "--run-id", "staged", "--dataset", url, "--model", "convnet",
                     "--epochs", "1", "--no-report", "--no-progress"]) == 0
    model = node.load_run_model(node.open_run("file://" + str(store), "staged"))
    return SimpleNamespace(root=root, store=store, url=url, model=model)


def _predict(staged_run, *args: str) -> list[str]:
    return ["predict", "--store", str(staged_run.store), "--run", "staged", *args]


def test_predict_writes_each_row_of_a_staged_split_with_its_number_label_and_prediction(staged_run, capsys):
    capsys.readouterr()
    out = staged_run.root / "test predictions"
    assert cli.main(_predict(staged_run, "--dataset", staged_run.url + "/test", "--output", str(out))) == 0
    assert capsys.readouterr().out == f"wrote predictions of {staged_run.url}/test to {out}\n"
    table = pq.read_table(str(out)).to_pandas().sort_values("row")
    # No features: the shards' (scaled, when staged so) features fed back as --input would be scaled twice.
    assert list(table.columns) == ["row", "label", "rawPrediction", "probability", "prediction"]
    X, y = storage.open_dataset(staged_run.url + "/test").read_all()
    assert table["row"].tolist() == list(range(len(X)))  # every row once, numbered as staged
    assert table["label"].tolist() == y.tolist()
    proba = staged_run.model.predict_proba(X.reshape(len(X), -1))
    # Alike but for a row whose two best classes are within float32 rounding of each other (see test_cli).
    ties = near_ties(proba, forward_rtol(9, 128, 64))
    assert not np.any((table["prediction"].to_numpy().astype(np.int64) != proba.argmax(axis=1)) & ~ties)
    written = np.stack(table["probability"].map(lambda vector: vector["values"]).to_numpy())  # Spark's Vector struct
    np.testing.assert_allclose(written, proba, rtol=forward_rtol(9, 128, 64), atol=1e-7)

    # Those predictions as --input of predict again: said in one line (it said "choose another name", which
    # no flag of predict can).
    assert cli.main(_predict(staged_run, "--input", str(out), "--output", str(staged_run.root / "again"))) == 2
    assert capsys.readouterr().err == (f"sparkdbn predict: --input {out} already holds a column 'rawPrediction', one "
                                       "of those predict adds (rawPrediction, probability, prediction): is it the "
                                       "output of an earlier predict? Give its input, or drop those columns first\n")


def test_predict_on_a_staged_dataset_is_refused_before_spark_where_it_cannot_work(staged_run, spark, capsys):
    from sklearn.datasets import load_digits

    digits = load_digits()  # raw pixels 0..16, staged scaled to [0, 1] by their own range
    header = ",".join(["label"] + [f"p{k}" for k in range(64)])
    rows = [",".join([str(label)] + [str(int(v)) for v in x]) for x, label in zip(digits.data[:40], digits.target)]
    (staged_run.root / "raw.csv").write_text(header + "\n" + "\n".join(rows) + "\n")
    scaled = "file://" + str(staged_run.root / "scaled")
    assert cli.main(["stage", "--input", str(staged_run.root / "raw.csv"), "--url", scaled, "--scale", "minmax"]) == 0
    capsys.readouterr()
    never = staged_run.root / "never"
    cases = {
        ("--dataset", scaled): f"--dataset {scaled} holds features scaled to [0, 1] when staged (--scale minmax); the "
                               f"run's training data {staged_run.url} was not: the model would meet features on another "
                               "scale than it learned",
        ("--dataset", "digits"): "--dataset digits is a recipe; --dataset here is a staged dataset. Stage it first",
        ("--dataset", staged_run.url + "/nothing"): f"--dataset {staged_run.url}/nothing: no dataset at",
        (): "predict needs --input (a Parquet or CSV file or folder of new rows) or --dataset (a staged dataset "
            "URL; URL/test for its held-out split)",
        ("--dataset", staged_run.url, "--input", str(staged_run.root / "raw.csv")): "or --dataset (a staged dataset "
                                                                                    "URL; URL/test for its held-out "
                                                                                    "split), not both",
        ("--dataset", staged_run.url, "--output", staged_run.url[len("file://"):] + "/out"): "overlaps the input",
    }
    before = newest_job(spark)
    for args, said in cases.items():
        output = () if "--output" in args else ("--output", str(never))
        assert cli.main(_predict(staged_run, *args, *output)) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("sparkdbn predict: ") and said in err and err.count("\n") == 1, (args, err)
    assert newest_job(spark) == before and not never.exists()


def test_a_bad_row_past_the_first_fails_predict_once_naming_it_and_writes_nothing(staged_run, spark, capsys):
    X, _ = storage.open_dataset(staged_run.url + "/test").read_all()
    holed = X.reshape(len(X), -1).copy()
    holed[300, 9] = np.nan  # the driver's look at the first row sees nothing wrong
    pq.write_table(pa.table({"features": pa.array(list(holed), type=pa.list_(pa.float32()))}),
                   str(staged_run.root / "holed.parquet"))
    capsys.readouterr()
    before = newest_job(spark)
    status = cli.main(_predict(staged_run, "--input", str(staged_run.root / "holed.parquet"),
                               "--output", str(staged_run.root / "holed out")))
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and err == [f"sparkdbn predict: --input {staged_run.root / 'holed.parquet'}: partition 0, rows "
                                   f"0..{len(X) - 1} of a batch: X contains NaN or Inf (first at row 300); nothing was "
                                   "written"]
    assert failed_tasks_since(spark, before) == 0  # reported by its task, not retried by Spark until it gave up
    assert not (staged_run.root / "holed out").exists()
    assert not [path for path in staged_run.root.iterdir() if ".sparkdbn-" in path.name]


@pytest.mark.parametrize("how", ["predict", "evaluate"])
def test_a_row_the_scaling_cannot_take_in_a_later_partition_is_reported_once(staged_run, spark, tmp_path, how):
    # New rows of a run trained on a scaled dataset are scaled on the executors: a row of another width
    # failed the scaling task, which Spark tried 4 times, each with a Java stack trace, before the job failed.
    X, y = storage.open_dataset(staged_run.url + "/test").read_all()
    rows = [(x.reshape(-1).tolist(), int(label)) for x, label in zip(X[:20], y[:20])]
    rows[10:] = [(features[:-1], label) for features, label in rows[10:]]  # the second partition: 63 features
    frame = spark.createDataFrame(rows, "features array<float>, label long").coalesce(2)
    assert frame.rdd.getNumPartitions() == 2
    scaling = {"kind": "minmax", "min": [0.0] * 64, "max": [1.0] * 64}
    before = newest_job(spark)
    with pytest.raises(node.InputDataError, match=r"partition 1, the data has \(63,\) features per sample; the "
                                                  r"dataset's scaling has \(64,\)"):
        if how == "predict":
            node.write_predictions(staged_run.model, frame, str(tmp_path / "out"), scaling=scaling)
        else:
            node.evaluate(staged_run.model, frame, scaling=scaling)
    assert failed_tasks_since(spark, before) == 0
    assert not (tmp_path / "out").exists()


def test_a_seed_given_only_under_settings_splits_the_recipe_that_evaluate_splits_again(spark, tmp_path, capsys):
    # `train` split the recipe by --seed (default 0) while a config's `settings: seed` seeded the run, which
    # the record keeps and `evaluate --run` splits by: it evaluated on another split, holding training rows.
    store, config = tmp_path / "store", tmp_path / "job.yaml"
    config.write_text("model: convnet\nepochs: 1\nreport: false\nsettings:\n  seed: 3\n  progress: false\n")
    assert cli.main(["train", "--config", str(config), "--store", str(store), "--run-id", "seeded"]) == 0
    trained = capsys.readouterr().out.split("(computed with Spark):\n", 1)[1]
    assert node.open_run("file://" + str(store), "seeded").record["settings"]["seed"] == 3
    assert cli.main(["evaluate", "--store", str(store), "--run", "seeded"]) == 0
    said, report = capsys.readouterr().out.split("\n", 1)
    assert said == "evaluating on the held-out split of digits (seed 3)" and report == trained

    # Two seeds that differ are one line, before Spark starts.
    before = newest_job(spark)
    assert cli.main(["train", "--config", str(config), "--store", str(store), "--run-id", "two", "--seed", "4"]) == 2
    assert capsys.readouterr().err == ("sparkdbn train: seed 4 (--seed or the config's seed:) and the config's settings: "
                                       "seed 3 differ; a recipe's held-out split, the model and the training take one "
                                       "seed: give it once\n")
    assert newest_job(spark) == before


def test_a_dataset_given_as_a_relative_path_is_recorded_where_it_lies(spark, tmp_path, monkeypatch, capsys):
    # The record kept `--dataset data/small` as given: `evaluate --run` from any other folder looked for
    # the dataset there, and said `--dataset data/small` though no --dataset was given.
    from rbm.datasets import load_digits01

    split = load_digits01()
    project, elsewhere = tmp_path / "my project", tmp_path / "elsewhere"
    elsewhere.mkdir()
    small = "file://" + str(project / "data" / "small")  # 200 rows, 50 held out, as `stage` pairs them
    storage.stage_arrays(small + "/test", split.X_test[:50], split.y_test[:50], shards=1,
                         extra_meta={"split": "test", "split_pair": "p"})
    storage.stage_arrays(small, split.X_train[:200], split.y_train[:200], shards=2, keep=("test",),
                         extra_meta={"split": "train", "splits": {"test": "test"}, "split_pair": "p"})
    monkeypatch.chdir(project)
    assert cli.main(["train", "--store", "store", "--run-id", "rel", "--dataset", "data/small", "--model", "convnet",
                     "--epochs", "1", "--no-report", "--no-progress"]) == 0
    url = small
    assert node.open_run("file://" + str(project / "store"), "rel").record["data"]["source"] == f"dataset {url}"
    capsys.readouterr()
    monkeypatch.chdir(elsewhere)
    status = cli.main(["evaluate", "--store", str(project / "store"), "--run", "rel"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert captured.out.startswith(f"evaluating on the held-out split of {url}\n")


def test_predict_reads_a_dataset_staged_on_webhdfs_and_says_what_an_hdfs_output_on_its_port_needs(staged_run, tmp_path,
                                                                                                   capsys):
    from support.webhdfs_server import WebHDFSServer

    with WebHDFSServer(tmp_path / "hdfs") as server:
        url = f"hdfs://127.0.0.1:{server.port}/store/datasets/digits"
        assert cli.main(["stage", "--recipe", "digits", "--url", url, "--shards", "2"]) == 0
        out = tmp_path / "from hdfs"
        assert cli.main(_predict(staged_run, "--dataset", url + "/test", "--output", str(out))) == 0
        local = tmp_path / "from file"
        assert cli.main(_predict(staged_run, "--dataset", staged_run.url + "/test", "--output", str(local))) == 0
        by_row = [pq.read_table(str(folder)).to_pandas().sort_values("row") for folder in (out, local)]
        assert len(by_row[0]) == 359  # the same recipe, split by the same seed: the same rows, the same predictions
        assert by_row[0]["prediction"].tolist() == by_row[1]["prediction"].tolist()
        capsys.readouterr()

        # hdfs:// in a sparkdbn store URL is WebHDFS; Spark's Hadoop client speaks RPC to it: a traceback, exit 1.
        output = f"hdfs://127.0.0.1:{server.port}/predictions"
        assert cli.main(_predict(staged_run, "--dataset", url + "/test", "--output", output)) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"sparkdbn predict: predicting --dataset {url}/test into --output {output} failed: ")
        assert err.endswith("Spark reads and writes hdfs:// through the namenode's RPC port (usually 8020), not the "
                            "WebHDFS port a sparkdbn store URL names (usually 9870): give hdfs://NAMENODE:8020/... (a "
                            "dataset staged with sparkdbn stage is read with --dataset URL)\n") and err.count("\n") == 1


def test_predict_takes_an_input_pattern_as_spark_does(staged_run, capsys):
    # Spark reads `--input 'parts/day-*.parquet'`; the check before Spark said it did not exist.
    X, y = storage.open_dataset(staged_run.url + "/test").read_all()
    parts = staged_run.root / "parts"
    parts.mkdir()
    for day, rows in enumerate(np.array_split(np.arange(len(X)), 2)):
        pq.write_table(pa.table({"features": pa.array(list(X[rows].reshape(len(rows), -1)), type=pa.list_(pa.float32())),
                                 "label": pa.array(y[rows])}), str(parts / f"day-{day}.parquet"))
    (parts / "notes.txt").write_text("not data")  # beside the pattern's matches: never read
    capsys.readouterr()
    out = staged_run.root / "by pattern"
    assert cli.main(_predict(staged_run, "--input", str(parts / "day-*.parquet"), "--output", str(out))) == 0
    assert len(pq.read_table(str(out))) == len(X)
    assert cli.main(_predict(staged_run, "--input", str(parts / "week-*.parquet"), "--output", str(out) + "2")) == 2
    assert capsys.readouterr().err.endswith(f"--input {parts / 'week-*.parquet'} matches no file\n")
    # the output may not lie inside what the pattern names, nor be one of its matches
    assert cli.main(_predict(staged_run, "--input", str(parts / "day-*"), "--output", str(parts / "day-0.parquet"),
                             "--overwrite")) == 2
    assert "is the input" in capsys.readouterr().err


def test_evaluate_takes_a_held_out_split_named_itself_as_predict_does(staged_run, capsys):
    # `predict --dataset URL/test` predicts the held-out split; `evaluate --dataset URL/test` said it had none.
    capsys.readouterr()
    assert cli.main(["evaluate", "--store", str(staged_run.store), "--run", "staged"]) == 0
    said, report = capsys.readouterr().out.split("\n", 1)
    assert said == f"evaluating on the held-out split of {staged_run.url}"
    assert cli.main(["evaluate", "--store", str(staged_run.store), "--run", "staged", "--dataset",
                     staged_run.url + "/test"]) == 0
    assert capsys.readouterr().out == f"evaluating on {staged_run.url}/test, a held-out split\n{report}"


def _digits_csv(path, labels) -> None:
    """The first 400 of scikit-learn's digits as a CSV file: a ``label`` column (``labels[digit]``), 64 pixels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    header = ",".join(["label"] + [f"p{k}" for k in range(64)])
    rows = [",".join([str(labels[label])] + [str(int(v)) for v in x]) for x, label in zip(digits.data[:400], digits.target)]
    path.write_text(header + "\n" + "\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def named_run(spark, tmp_path_factory):
    """400 digits as a CSV file of a string label ("digit 0" ..) and 64 pixel columns, staged with a quarter held
    out, and a conv net trained on it for one epoch from the command line (run ``named``)."""
    root = tmp_path_factory.mktemp("named")
    names = [f"digit {k}" for k in range(10)]
    _digits_csv(root / "named.csv", names)
    url = "file://" + str(root / "named")
    assert cli.main(["stage", "--input", str(root / "named.csv"), "--url", url, "--test-fraction", "0.25"]) == 0
    store = root / "store"
    before = newest_job(spark)
    assert cli.main(["train", "--store", str(store), "--run-id", "named", "--dataset", url, "--model", "convnet",
                     "--epochs", "1", "--no-report", "--no-progress"]) == 0
    model = node.load_run_model(node.open_run("file://" + str(store), "named"))
    return SimpleNamespace(root=root, url=url, store=store, names=names, model=model, jobs_before=before)


def test_a_model_trained_on_staged_class_names_predicts_and_reports_them(staged_run, named_run, spark, capsys):
    # Staged labels that are not 0 .. k-1 are stored as class indices, their names in _meta.json. The model
    # learned the indices: `predict` wrote 0.0 .. 9.0 where the data said "digit 0" .. "digit 9".
    url, names = named_run.url, named_run.names
    capsys.readouterr()
    before = newest_job(spark)  # a model of numbers meets labels it never learned: said before Spark starts
    assert cli.main(["evaluate", "--store", str(staged_run.store), "--run", "staged", "--dataset", url]) == 2
    assert capsys.readouterr().err == (
        f"sparkdbn evaluate: --dataset {url} is labelled by strings {names[:6]}, the model's classes are numbers "
        "[0, 1, 2, 3, 4, 5]: it learned other labels\n")
    assert newest_job(spark) == before

    assert named_run.model.classes_.tolist() == names
    assert cli.main(["evaluate", "--store", str(named_run.store), "--run", "named"]) == 0
    report = capsys.readouterr().out.split("\n", 1)[1]
    assert [line.split()[:2] for line in report.splitlines()[2:12]] == [["digit", str(k)] for k in range(10)]

    out = named_run.root / "predictions"
    assert cli.main(["predict", "--store", str(named_run.store), "--run", "named", "--dataset", url + "/test",
                     "--output", str(out)]) == 0
    table = pq.read_table(str(out)).to_pandas().sort_values("row")
    X, y = storage.open_dataset(url + "/test").read_all()
    assert table["label"].tolist() == y.tolist() and set(y.tolist()) == set(names)
    _assert_predicted(named_run.model, X, table["prediction"])


def _assert_predicted(model, X, predicted) -> None:
    """``predicted`` (class names) are ``model``'s predictions of ``X`` but for near ties."""
    proba = model.predict_proba(np.reshape(X, (len(X), -1)))
    ties = near_ties(proba, forward_rtol(9, 128, 64))
    indices = np.array([model.classes_.tolist().index(name) for name in predicted])
    assert not np.any((indices != proba.argmax(axis=1)) & ~ties)


def test_new_rows_of_the_columns_a_dataset_was_staged_from_are_predicted_and_evaluated(named_run, capsys):
    # A model trained on a staged CSV file took new rows only as one column of vectors or arrays: the CSV's
    # own columns, or that CSV itself, were refused ("DataFrame has no features column").
    from sklearn.datasets import load_digits

    digits = load_digits()
    source = named_run.root / "named.csv"
    run = ["--store", str(named_run.store), "--run", "named"]
    out = named_run.root / "csv predictions"
    assert cli.main(["predict", *run, "--input", str(source), "--output", str(out)]) == 0
    table = pq.read_table(str(out)).to_pandas()
    # Every column of the input written back as read (not the gathered features), then the predictions.
    assert list(table.columns) == ["label", *[f"p{k}" for k in range(64)], *PREDICTION_COLUMNS]
    X = table[[f"p{k}" for k in range(64)]].to_numpy(dtype=np.float32)
    assert sorted(map(tuple, X.tolist())) == sorted(map(tuple, digits.data[:400].tolist()))  # each row once
    _assert_predicted(named_run.model, X, table["prediction"])

    capsys.readouterr()
    assert cli.main(["evaluate", *run, "--input", str(source)]) == 0
    report = capsys.readouterr().out
    correct = int((table["prediction"] == table["label"]).sum())
    assert f"accuracy {correct / 400:.2f}" in " ".join(report.split()) and "400" in report.split()

    # The same rows as Parquet with one more column, named by --features-cols: alike.
    frame = pd.read_csv(source).assign(extra=1.0)
    frame.to_parquet(named_run.root / "rows.parquet")
    out = named_run.root / "parquet predictions"
    assert cli.main(["predict", *run, "--input", str(named_run.root / "rows.parquet"), "--output", str(out),
                     "--features-cols", ",".join(f"p{k}" for k in range(64))]) == 0
    again = pq.read_table(str(out)).to_pandas()
    assert list(again.columns) == ["label", *[f"p{k}" for k in range(64)], "extra", *PREDICTION_COLUMNS]
    assert sorted(again["prediction"]) == sorted(table["prediction"])


def test_a_run_that_learned_staged_class_indices_is_served_with_their_names(staged_run, tmp_path, capsys):
    # Runs trained before staged class names reached the model learned the indices; their record says so
    # (classes 0 .. k-1 of a staged dataset whose meta names k classes). Here: a run trained on the
    # indices themselves, then the dataset restaged with the names they stand for.
    names = [f"digit {k}" for k in range(10)]
    url = "file://" + str(tmp_path / "digits")
    _digits_csv(tmp_path / "numbered.csv", list(range(10)))
    assert cli.main(["stage", "--input", str(tmp_path / "numbered.csv"), "--url", url, "--test-fraction", "0.25"]) == 0
    store = tmp_path / "store"
    assert cli.main(["train", "--store", str(store), "--run-id", "old", "--dataset", url, "--model", "convnet",
                     "--epochs", "1", "--no-report", "--no-progress"]) == 0
    trained = capsys.readouterr().out.split("(computed with Spark):\n", 1)[1]
    assert node.load_run_model(node.open_run("file://" + str(store), "old")).classes_.tolist() == list(range(10))

    _digits_csv(tmp_path / "named.csv", names)
    assert cli.main(["stage", "--input", str(tmp_path / "named.csv"), "--url", url, "--test-fraction", "0.25",
                     "--overwrite"]) == 0
    assert node.load_run_model(node.open_run("file://" + str(store), "old")).classes_.tolist() == names
    capsys.readouterr()
    assert cli.main(["evaluate", "--store", str(store), "--run", "old"]) == 0
    report = capsys.readouterr().out.split("\n", 1)[1]
    # The same numbers, the classes named.
    assert [line.split()[:2] for line in report.splitlines()[2:12]] == [["digit", str(k)] for k in range(10)]
    assert [line.split()[-4:] for line in report.splitlines()[2:12]] == [line.split()[-4:] for line in trained.splitlines()[2:12]]
    assert [line for line in report.splitlines() if "accuracy" in line] == [line for line in trained.splitlines()
                                                                            if "accuracy" in line]
