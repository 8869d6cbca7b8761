"""Your own data from the command line: a CSV staged with a held-out split and min/max scaling, trained on,
then evaluated and predicted with no dataset flag -- the run knows its dataset."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

import node
import storage
from node import cli

pytestmark = pytest.mark.slow


def _accuracy_line(out: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.strip().startswith("accuracy"))


def test_a_csv_staged_trained_and_evaluated_on_its_held_out_split_without_a_dataset_flag(spark, tmp_path, capsys):
    digits = load_digits()  # raw pixels 0..16: Bernoulli units need the scaling
    header = ",".join(["digit"] + [f"p{k}" for k in range(64)] + ["row"])
    rows = [",".join([str(label)] + [str(int(v)) for v in x] + [str(k)])
            for k, (x, label) in enumerate(zip(digits.data, digits.target))]
    (tmp_path / "mine.csv").write_text(header + "\n" + "\n".join(rows) + "\n")
    store = tmp_path / "store"
    url = "file://" + str(store / "datasets" / "mine")
    columns = ",".join(f"p{k}" for k in range(64))  # not the row number
    stage = ["stage", "--input", str(tmp_path / "mine.csv"), "--url", url, "--label-col", "digit",
             "--features-cols", columns, "--test-fraction", "0.25", "--scale", "minmax", "--shards", "2"]
    assert cli.main(stage) == 0, capsys.readouterr().err
    capsys.readouterr()
    train_meta, test_meta = storage.open_dataset(url).meta, storage.open_dataset(url + "/test").meta
    assert train_meta["n_samples"] + test_meta["n_samples"] == len(digits.data)
    assert test_meta["n_samples"] == pytest.approx(0.25 * len(digits.data), abs=1)
    assert np.bincount(storage.open_dataset(url + "/test").read_all()[1]).min() >= 40  # stratified: every digit
    X_train, _ = storage.open_dataset(url).read_all()
    assert X_train.min() == 0.0 and X_train.max() == 1.0
    scaling = train_meta["scaling"]
    assert scaling["kind"] == "minmax" and max(scaling["max"]) == 16.0 and train_meta["feature_names"][0] == "p0"

    # Staging never replaces what it did not write.
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("keep")
    assert cli.main([*stage[:3], "--url", str(tmp_path / "theirs"), "--overwrite"]) == 2
    assert "nothing was deleted" in capsys.readouterr().err
    assert [path.name for path in (tmp_path / "theirs").iterdir()] == ["notes.txt"]

    # A staged dataset trains one partition per shard: another number was dropped without a word.
    assert cli.main(["train", "--store", str(store), "--run-id", "mine", "--dataset", url, "--layers", "32",
                     "--epochs", "2", "--partitions", "3", "--no-report", "--no-progress"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"partitions 3 were asked for, but the staged dataset {url} trains one partition per shard, and it has 2: "
        "leave partitions out, or stage it again with 3 shards (sparkdbn stage --shards 3)")
    assert cli.main(["train", "--store", str(store), "--run-id", "mine", "--dataset", url, "--layers", "32",
                     "--epochs", "2", "--partitions", "2", "--no-report", "--no-progress"]) == 0
    capsys.readouterr()
    assert cli.main(["evaluate", "--store", str(store), "--run", "mine"]) == 0
    out = capsys.readouterr().out
    assert f"held-out split of {url}" in out
    accuracy = _accuracy_line(out)
    assert int(accuracy[-1]) == test_meta["n_samples"] and float(accuracy[-2]) > 0.3  # 10 classes: chance 0.1

    # predict meets raw pixels: the run's scaling is applied to them first.
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = digits.data[:50].astype(np.float64)
    pq.write_table(pa.table({"features": pa.array(list(raw), type=pa.list_(pa.float64()))}), str(tmp_path / "raw.parquet"))
    assert cli.main(["predict", "--store", str(store), "--run", "mine", "--input", str(tmp_path / "raw.parquet"),
                     "--output", str(tmp_path / "out")]) == 0
    predicted = pq.read_table(str(tmp_path / "out")).to_pandas()
    assert list(predicted.columns) == ["features", "rawPrediction", "probability", "prediction"]
    model = node.load_run_model(node.open_run("file://" + str(store), "mine"))
    low, high = np.array(scaling["min"]), np.array(scaling["max"])
    span = np.where(high > low, high - low, 1.0)
    for features, prediction in zip(predicted["features"], predicted["prediction"]):  # raw pixels written back
        scaled = np.clip((np.asarray(features) - low) / span, 0.0, 1.0).astype(np.float32)[None, :]
        assert prediction == float(model.predict(scaled)[0])
    assert sorted(map(tuple, predicted["features"])) == sorted(map(tuple, raw))

    # The run keeps the scaling it trained with: the dataset staged again over the same URL (another range),
    # then moved away, changes nothing predict does. Before, predict scaled by the dataset's _meta.json as it
    # is now (other predictions, silently), and failed once the dataset was gone.
    assert node.open_run("file://" + str(store), "mine").record["data"]["scaling"] == scaling
    doubled = [",".join([str(label)] + [str(2 * int(v)) for v in x] + [str(k)])
               for k, (x, label) in enumerate(zip(digits.data, digits.target))]
    (tmp_path / "doubled.csv").write_text(header + "\n" + "\n".join(doubled) + "\n")
    assert cli.main(["stage", "--input", str(tmp_path / "doubled.csv"), *stage[3:], "--overwrite"]) == 0
    assert max(storage.open_dataset(url).meta["scaling"]["max"]) == 32.0
    (store / "datasets" / "mine").rename(tmp_path / "moved")
    assert cli.main(["predict", "--store", str(store), "--run", "mine", "--input", str(tmp_path / "raw.parquet"),
                     "--output", str(tmp_path / "again")]) == 0, capsys.readouterr().err
    again = pq.read_table(str(tmp_path / "again")).to_pandas()
    assert again.set_index(again["features"].map(tuple))["prediction"].to_dict() == \
        predicted.set_index(predicted["features"].map(tuple))["prediction"].to_dict()


def test_a_parquet_file_of_a_features_column_of_arrays_is_staged_as_predict_takes_it(tmp_path, capsys):
    # docs/cli.md's digits-test.parquet (a column of arrays and a label), which predict takes, was refused by
    # stage: "feature column 'features' is list<element: float>, not numeric".
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rbm.datasets import load_digits01

    split = load_digits01()
    pd.DataFrame({"features": list(split.X_test), "label": split.y_test}).to_parquet(tmp_path / "digits-test.parquet")
    url = str(tmp_path / "staged")
    assert cli.main(["stage", "--input", str(tmp_path / "digits-test.parquet"), "--url", url]) == 0
    X, y = storage.open_dataset(url).read_all()
    shuffled = np.random.default_rng(0).permutation(len(split.X_test))  # before sharding, seeded by --seed (0)
    np.testing.assert_array_equal(X, split.X_test[shuffled].astype(np.float32))
    np.testing.assert_array_equal(y, split.y_test[shuffled])
    assert storage.open_dataset(url).meta.get("feature_names") is None  # new rows: a features column, as given

    # A column of arrays beside scalar feature columns is refused, naming them.
    mixed = pa.table({"features": pa.array(list(split.X_test[:5]), type=pa.list_(pa.float32())),
                      "extra": pa.array(np.arange(5.0)), "label": pa.array(split.y_test[:5])})
    pq.write_table(mixed, str(tmp_path / "mixed.parquet"))
    capsys.readouterr()
    assert cli.main(["stage", "--input", str(tmp_path / "mixed.parquet"), "--url", str(tmp_path / "never")]) == 2
    assert "feature column 'features' holds arrays, and there are other feature columns (extra)" in \
        capsys.readouterr().err
    assert not (tmp_path / "never").exists()


def test_rows_sorted_by_label_are_shuffled_before_they_are_cut_into_shards_the_same_way_each_time(tmp_path, capsys):
    # The shards kept the file's order: iris as scikit-learn ships it staged as shards {0: 50}, {1: 50}, {2: 50},
    # and each node of a fit trained on one class (digits sorted by label: 0.93 held out against 0.97).
    rows = [f"{label},{label + k / 100},{k / 100}" for label in range(3) for k in range(50)]
    (tmp_path / "sorted.csv").write_text("label,a,b\n" + "\n".join(rows) + "\n")
    shards = []
    for name, seed in (("one", []), ("two", []), ("three", ["--seed", "4"])):
        url = "file://" + str(tmp_path / name)
        assert cli.main(["stage", "--input", str(tmp_path / "sorted.csv"), "--url", url, "--shards", "3",
                         *seed]) == 0, capsys.readouterr().err
        dataset = storage.open_dataset(url)
        shards.append([dataset.read_shard(index) for index in range(3)])
        for _X, y in shards[-1]:
            assert set(y.tolist()) == {0, 1, 2}  # every shard holds every class
        column_a = np.sort(np.concatenate([X for X, _y in shards[-1]])[:, 0])
        np.testing.assert_allclose(column_a, sorted(label + k / 100 for label in range(3) for k in range(50)),
                                   rtol=1e-6)  # every row once
    for (X_one, _), (X_two, _) in zip(shards[0], shards[1]):
        np.testing.assert_array_equal(X_one, X_two)  # seeded (--seed, default 0): the same shards again
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(shards[0], shards[2]))
