"""The `sparkdbn` command line, run in-process on the shared local session."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.numerics import forward_rtol, near_ties
from support.spark_jobs import newest_job

import storage
import node
from node import cli

pytestmark = pytest.mark.slow


def test_train_prints_the_evaluation_and_writes_the_plots(spark, tmp_path, capsys):
    store = tmp_path / "store"
    config = tmp_path / "job.yaml"  # one file for the run's commands: each takes its own keys and skips train's
    config.write_text(f"model: convnet\ndataset: digits\nepochs: 4\npartitions: 4\nstore: {store}\nrun_id: cli\n"
                      f"out: {tmp_path / 'plots'}\nsettings:\n  progress: false\n")
    status = cli.main(["train", "--config", str(config)])
    out = capsys.readouterr().out
    assert status == 0
    assert "accuracy" in out and "precision" in out
    accuracy = float(next(line.split()[-2] for line in out.splitlines() if line.strip().startswith("accuracy")))
    assert accuracy > 0.6  # 10 classes: chance is 0.1
    plots = sorted(Path(tmp_path / "plots").glob("*.png"))
    assert plots and all(path.stat().st_size > 1000 for path in plots)
    record = node.open_run("file://" + str(store), "cli").record
    assert record["status"] == "done" and record["spec"]["kind"] == "convnet"

    # The saved model is evaluated again by `evaluate`, and `report` redraws the plots.
    assert cli.main(["evaluate", "--config", str(config)]) == 0
    again = capsys.readouterr().out
    assert f"{accuracy:.2f}" in again
    assert cli.main(["status", "--config", str(config)]) == 0
    assert capsys.readouterr().out.startswith("run cli: done")
    assert cli.main(["report", "--config", str(config), "--out", str(tmp_path / "again")]) == 0
    assert sorted(path.name for path in (tmp_path / "again").glob("*.png")) == [path.name for path in plots]

    # `predict` adds the saved model's predictions to a Parquet file, as the model predicts alone.
    import pyarrow as pa
    import pyarrow.parquet as pq
    from rbm.datasets import load_digits01

    X_test, y_test = load_digits01().X_test, load_digits01().y_test
    pq.write_table(pa.table({"features": pa.array(list(X_test), type=pa.list_(pa.float32())),
                             "label": pa.array(y_test.astype(np.float64))}), str(tmp_path / "in.parquet"))
    # --input overrides the file's dataset: (its alternative), as a flag overrides the file
    assert cli.main(["predict", "--config", str(config), "--input", str(tmp_path / "in.parquet"),
                     "--output", str(tmp_path / "out.parquet")]) == 0
    predicted = pq.read_table(str(tmp_path / "out.parquet")).to_pandas()
    model = node.load_run_model(node.open_run("file://" + str(store), "cli"))  # the model the record names
    features = np.stack(predicted["features"].to_numpy()).astype(np.float32)
    expected, proba = model.predict(features), model.predict_proba(features)
    # Alike but for a row whose two best classes are within float32 rounding of each other (dot products of
    # 9, 128 and 64 terms): the executors' batches may round it the other way (measured: none of 450).
    ties = near_ties(proba, forward_rtol(9, 128, 64))
    assert not np.any((predicted["prediction"].to_numpy().astype(np.int64) != expected) & ~ties)
    # Spark reads the Vector columns back as Vectors: pyspark's evaluators take the output as it is.
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator

    scored = spark.read.parquet(str(tmp_path / "out.parquet"))
    assert MulticlassClassificationEvaluator(metricName="accuracy").evaluate(scored) == pytest.approx(
        float(np.mean(expected == y_test)), rel=1e-9, abs=ties.mean())
    expected_log_loss = -np.mean(np.log(np.maximum(proba[np.arange(len(proba)), predicted["label"].astype(int)], 1e-15)))
    assert MulticlassClassificationEvaluator(metricName="logLoss").evaluate(scored) == pytest.approx(
        expected_log_loss, rel=1e-4)

    # Nothing it did not write is ever deleted: not the input, not a user's folder, not earlier predictions
    # unless --overwrite asks to replace them.
    def predict(*args: str) -> tuple[int, str]:
        status = cli.main(["predict", "--store", str(store), "--run", "cli", "--input", str(tmp_path / "in.parquet"),
                           *args])
        return status, capsys.readouterr().err

    written = sorted(path.name for path in (tmp_path / "out.parquet").iterdir())
    status, err = predict("--output", str(tmp_path / "out.parquet"))
    assert status == 2 and "already holds" in err and "--overwrite" in err
    assert sorted(path.name for path in (tmp_path / "out.parquet").iterdir()) == written
    assert predict("--output", str(tmp_path / "out.parquet"), "--overwrite")[0] == 0
    assert len(pq.read_table(str(tmp_path / "out.parquet"))) == len(X_test)

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("years of work")
    status, err = predict("--output", str(mine), "--overwrite")
    assert status == 2 and "'thesis.txt', which it did not write" in err
    assert (mine / "thesis.txt").read_text() == "years of work" and len(list(mine.iterdir())) == 1

    before = (tmp_path / "in.parquet").read_bytes()
    (tmp_path / "link-to-input").symlink_to(tmp_path / "in.parquet")
    (tmp_path / "link-to-parent").symlink_to(tmp_path)
    for output in (tmp_path / "in.parquet", tmp_path / "in.parquet" / "inside", tmp_path,  # itself, inside, parent
                   tmp_path / "link-to-input", tmp_path / "link-to-parent" / "in.parquet"):  # ... through symlinks
        status, err = predict("--output", str(output), "--overwrite")
        assert status == 2 and "the input" in err, output
    assert (tmp_path / "in.parquet").read_bytes() == before

    empty = tmp_path / "empty"
    empty.mkdir()
    assert predict("--output", str(empty))[0] == 0
    assert len(pq.read_table(str(empty))) == len(X_test)
    assert not [path for path in tmp_path.iterdir() if ".sparkdbn-" in path.name]  # no temporaries left behind

    # A bad row past the driver's look at the first one fails the job: one line naming it, nothing written.
    holed = X_test.copy()
    holed[300, 9] = np.nan
    pq.write_table(pa.table({"features": pa.array(list(holed), type=pa.list_(pa.float32()))}),
                   str(tmp_path / "holed.parquet"))
    status = cli.main(["predict", "--store", str(store), "--run", "cli", "--input", str(tmp_path / "holed.parquet"),
                       "--output", str(tmp_path / "holed-out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and err[-1].startswith(f"sparkdbn predict: --input {tmp_path / 'holed.parquet'}: partition 0, "
                                              f"rows 0..{len(X_test) - 1} of a batch: X contains NaN or Inf (first "
                                              "at row 300)"), err
    assert not (tmp_path / "holed-out").exists()
    assert not [path for path in tmp_path.iterdir() if ".sparkdbn-" in path.name]


def test_stage_then_train_reads_the_shards_on_the_executors(spark, tmp_path, capsys, monkeypatch):
    store = tmp_path / "store"
    url = "file://" + str(store / "datasets" / "digits")
    monkeypatch.chdir(tmp_path)  # `file:/abs` (one slash, as Hadoop prints paths) made folders named "file:" here
    assert cli.main(["stage", "--recipe", "digits", "--url", "file:" + url[len("file://"):], "--shards", "3"]) == 0
    assert storage.open_dataset(url).num_shards == 3
    status = cli.main(["train", "--store", "file:" + str(store), "--run-id", "staged", "--dataset",
                       "file:" + url[len("file://"):], "--model", "convnet", "--epochs", "2", "--no-report",
                       "--no-progress"])
    assert status == 0
    assert not (tmp_path / "file:").exists()
    record = node.open_run("file://" + str(store), "staged").record
    assert record["status"] == "done"
    assert record["data"]["partitions"] == 3 and record["data"]["source"] == f"dataset {url}"
    assert (store / record["model"]["path"]).exists()
    # train ends with the report on the staged dataset's held-out split, the one `evaluate --run` takes
    trained = capsys.readouterr().out.split("evaluation on 359 held-out samples (computed with Spark):\n", 1)[1]
    assert cli.main(["evaluate", "--store", str(store), "--run", "staged"]) == 0
    assert capsys.readouterr().out == f"evaluating on the held-out split of {url}\n{trained}"
    assert cli.main(["evaluate", "--store", str(store), "--run", "staged", "--dataset", url]) == 0  # named, the same
    assert capsys.readouterr().out == f"evaluating on the held-out split of {url}\n{trained}"


def test_train_on_a_dataset_staged_without_a_held_out_split_says_it_evaluated_nothing(spark, tmp_path, capsys):
    from rbm.datasets import load_digits01

    split = load_digits01()
    url = "file://" + str(tmp_path / "store" / "datasets" / "no-test")
    storage.stage_arrays(url, split.X_train, split.y_train, shards=2)
    assert cli.main(["train", "--store", str(tmp_path / "store"), "--run-id", "untested", "--dataset", url,
                     "--model", "convnet", "--epochs", "1", "--no-report", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"nothing evaluated: {url} has no held-out split (stage it with --test-fraction)" in out
    assert "precision" not in out
    assert cli.main(["evaluate", "--store", str(tmp_path / "store"), "--run", "untested", "--dataset", url]) == 2
    assert f"{url} has no held-out split (stage with --test-fraction); give --input or another --dataset" in \
        capsys.readouterr().err


def test_evaluating_a_run_that_does_not_exist_fails_with_a_one_line_error(spark, tmp_path, capsys):
    status = cli.main(["evaluate", "--store", "file://" + str(tmp_path / "empty"), "--run", "nothing"])
    captured = capsys.readouterr()
    assert status == 2
    assert "there is no run 'nothing' in the store" in captured.err


def test_evaluate_takes_the_held_out_split_of_the_recipe_and_seed_the_run_trained_on(spark, tmp_path, capsys):
    # `evaluate --run` once split digits by seed 0 whatever the run's seed (evaluating on rows the run
    # trained on), and took digits for a digits28 run (a 784-wide model against 64 features: refused).
    store = tmp_path / "store"
    assert cli.main(["train", "--store", str(store), "--run-id", "seeded", "--model", "convnet", "--seed", "3",
                     "--epochs", "1", "--no-report", "--no-progress"]) == 0
    trained = capsys.readouterr().out.split("(computed with Spark):\n", 1)[1]
    assert cli.main(["evaluate", "--store", str(store), "--run", "seeded"]) == 0
    said, report = capsys.readouterr().out.split("\n", 1)
    assert said == "evaluating on the held-out split of digits (seed 3)"
    assert report == trained  # the same rows, the same model: the same report and confusion matrix
    assert node.open_run("file://" + str(store), "seeded").record["data"]["origin"] == "recipe digits"

    # A dataset staged with its own --scale range, or of another width, is refused before Spark runs a job:
    # a recipe run took the first (its arrays were not scaled when staged), and the second as a scaling error.
    from sklearn.datasets import load_digits

    raw = load_digits()
    np.savez(tmp_path / "raw.npz", X=raw.data[:60], y=raw.target[:60])
    np.savez(tmp_path / "narrow.npz", X=raw.data[:60, :4] / 16.0, y=raw.target[:60])
    scaled, narrow = "file://" + str(tmp_path / "scaled"), "file://" + str(tmp_path / "narrow")
    assert cli.main(["stage", "--input", str(tmp_path / "raw.npz"), "--url", scaled, "--scale", "minmax",
                     "--test-fraction", "0.5"]) == 0
    assert cli.main(["stage", "--input", str(tmp_path / "narrow.npz"), "--url", narrow]) == 0
    capsys.readouterr()
    jobs = newest_job(spark)
    assert cli.main(["evaluate", "--store", str(store), "--run", "seeded", "--dataset", scaled]) == 2
    assert capsys.readouterr().err == (
        f"sparkdbn evaluate: --dataset {scaled} holds features scaled to [0, 1] when staged (--scale minmax); the "
        "run's training data (arrays of its own, not a staged dataset) was not: the model would meet features on "
        "another scale than it learned. Give the raw rows as --input (a Parquet file with a features column), which "
        "is scaled as the run's dataset was, or stage them with the run's dataset (sparkdbn stage --input ... "
        "--test-fraction)\n")
    assert cli.main(["predict", "--store", str(store), "--run", "seeded", "--dataset", narrow, "--output",
                     str(tmp_path / "never")]) == 2
    assert capsys.readouterr().err == (f"sparkdbn predict: --dataset {narrow} holds samples of 4 features [4]; the "
                                       "model takes 64\n")
    assert newest_job(spark) == jobs


def test_evaluate_finds_the_recipe_the_run_trained_on_by_its_record():
    from node.cli import _commands

    def run_of(data, seed=0):
        record = {"data": data, "settings": {"seed": seed}}
        return _commands._run_recipe(type("View", (), {"record": record}))

    # `train` records the recipe (data.origin): 64-wide arrays of one's own were taken for digits.
    assert run_of({"origin": "recipe digits28", "feature_shape": [784]}, seed=4) == ("digits28", 4)
    assert run_of({"origin": "recipe digits", "feature_shape": [64]}) == ("digits", 0)
    assert run_of({"origin": None, "feature_shape": [64]}) == (None, 0)  # evaluate asks for --input or --dataset
    assert run_of({"origin": "my sensors, March", "feature_shape": [64]}) == (None, 0)
    # A record written before it named the origin: the recipe of the width the run trained on.
    assert run_of({"feature_shape": [784]}, seed=4) == ("digits28", 4)
    assert run_of({"feature_shape": [1, 8, 8]}) == ("digits", 0)
    assert run_of({"feature_shape": [10]}) == (None, 0)
    assert run_of({}) == ("digits", 0)  # a record that names no width: digits, as before


def test_an_input_whose_features_a_scaled_run_cannot_take_is_refused_before_any_job(spark):
    # A staged dataset's own shards as --input of a run trained on a scaled dataset: their features are
    # bytes, which every task of the scaling job refused with a Java stack trace before the one line.
    import rbm

    model = rbm.DBN(hidden_layer_sizes=(4,), random_state=0).initialize(2, np.arange(2))
    frame = spark.createDataFrame([(b"\x00\x01", 1)], "features binary, label int")
    scaling = {"kind": "minmax", "min": [0.0, 0.0], "max": [1.0, 1.0]}
    jobs = newest_job(spark)
    refused = "features column 'features' has type binary; .*a staged dataset's shards hold their features as bytes"
    with pytest.raises(node.InputDataError, match=refused):
        node.predict_dataframe(model, frame, scaling=scaling)
    with pytest.raises(node.InputDataError, match=refused):
        node.evaluate(model, frame, scaling=scaling)
    assert newest_job(spark) == jobs  # no job ran


def test_an_input_spark_cannot_read_as_parquet_is_one_line_naming_it(spark, tmp_path):
    # What the check before Spark cannot see (a file on HDFS, one truncated after its first bytes)
    # Spark refuses with a Java error: said in one line naming the input, not as a traceback.
    from node.cli import _inputs
    from node.cli._options import UsageError

    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 and then nothing a footer needs")
    with pytest.raises(UsageError, match=rf"^--input {broken} cannot be read as Parquet: \S.*{broken.name}"):
        _inputs.read_input(spark, _inputs.check_input(str(broken)))


def test_an_rbm_alone_trains_from_the_command_line_and_reports_its_held_out_reconstruction(spark, tmp_path, capsys):
    import rbm
    from rbm.datasets import load_digits01

    store = tmp_path / "store"
    status = cli.main(["train", "--store", str(store), "--run-id", "rbm", "--model", "rbm", "--layers", "32",
                       "--epochs", "3", "--no-report", "--no-progress"])
    out = capsys.readouterr().out
    assert status == 0
    line = next(line for line in out.splitlines() if line.startswith("reconstruction error on"))
    error = float(line.split(":")[1].split()[0])
    X_test = load_digits01().X_test
    untrained = rbm.RBM(n_components=32, random_state=0).initialize(X_test.shape[1]).reconstruction_error(X_test)
    assert error < 0.8 * untrained  # it learned: the printed figure is the trained model's
    saved = node.load_run_model(node.open_run("file://" + str(store), "rbm"))
    assert error == pytest.approx(saved.reconstruction_error(X_test), abs=0.51e-5)  # printed to 5 decimals
    # No classification report for a model without labels: one line, before Spark is asked for anything.
    assert cli.main(["evaluate", "--store", str(store), "--run", "rbm"]) == 2
    assert "learns no labels" in capsys.readouterr().err
    # The same command again trains nothing (the run is done): it says so, not "trained in", and leaves the
    # run as it was (it wrote a new record, with this fit's timings, and the model under a new generation).
    train = ["train", "--store", str(store), "--run-id", "rbm", "--model", "rbm", "--layers", "32", "--epochs", "3",
             "--no-report", "--no-progress"]
    run = store / "runs" / "rbm"
    records, models = sorted((run / "record").iterdir()), sorted((run / "model").rglob("*"))
    stored = {path: path.read_bytes() for path in records + models if path.is_file()}
    assert cli.main(train) == 0
    assert "run rbm: nothing left to train (every phase was done), in " in capsys.readouterr().out
    assert sorted((run / "record").iterdir()) == records and sorted((run / "model").rglob("*")) == models
    assert all(path.read_bytes() == content for path, content in stored.items())
    # A done run whose model is gone stores it again, from its phases' results: the same model.
    for path in models:
        if path.is_file():
            path.unlink()
    assert cli.main(train) == 0
    again = node.load_run_model(node.open_run("file://" + str(store), "rbm"))
    assert all(np.array_equal(again.parameters()[name], value) for name, value in saved.parameters().items())


def test_the_librarys_advice_is_one_log_line_on_the_command_line(spark, tmp_path, capsys, caplog):
    # A UserWarning to Python users printed a file name, "UserWarning:" and a source line on the command line.
    import logging
    import warnings

    config = tmp_path / "job.yaml"
    config.write_text("model: {kind: rbm, n_components: 16, n_iter: 7}\n")
    with warnings.catch_warnings(record=True) as escaped, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        status = cli.main(["train", "--config", str(config), "--store", str(tmp_path / "store"), "--run-id", "advice",
                           "--epochs", "1", "--no-report", "--no-progress"])
    assert status == 0
    lines = [record for record in caplog.records if "n_iter=7 is for its own one-process fit" in record.getMessage()]
    assert [record.name for record in lines] == ["node.cli._main"], caplog.text
    assert "(rbm 1): give epochs={'rbm': 7}" in lines[0].getMessage()
    assert not [warning for warning in escaped if "one-process fit" in str(warning.message)]
    assert "UserWarning" not in capsys.readouterr().err
