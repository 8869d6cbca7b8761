"""Staging what only the Spark side knows: a Spark DataFrame (array and ml Vector columns) and the recipes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pyspark.ml.functions import array_to_vector
from pyspark.sql import functions as F

from node import InputDataError, stage_dataframe, stage_recipe
from rbm.datasets import load_digits01
from storage import DatasetError, open_dataset, open_store


@pytest.mark.slow
def test_a_dataframe_is_staged_bit_exact_from_array_and_vector_columns(spark, tmp_path):
    local_store = open_store(str(tmp_path / "store"))
    rng = np.random.default_rng(0)
    X = rng.random((50, 6), dtype=np.float32)
    y = rng.integers(0, 4, 50)
    # Built from an Arrow table (no Python worker, no pandas), vectors made on the JVM side.
    df = spark.createDataFrame(pa.table({"features": list(X), "label": y}))
    stage_dataframe(local_store.child("arr"), df, shards=2)  # shuffled before it is cut into shards, seed 0
    Xa, ya = open_dataset(local_store.child("arr")).read_all()
    shuffled = np.random.default_rng(0).permutation(50)
    np.testing.assert_array_equal(Xa, X[shuffled])
    np.testing.assert_array_equal(ya, y[shuffled])

    vectors = df.select(array_to_vector("features").alias("vec"), F.col("label").cast("double").alias("target"))
    meta = stage_dataframe(local_store.child("vec"), vectors, "vec", "target", feature_shape=(2, 3), seed=None)
    assert meta["feature_shape"] == [2, 3] and meta["n_classes"] == int(y.max()) + 1
    Xv, yv = open_dataset(local_store.child("vec")).read_all()
    np.testing.assert_array_equal(Xv.reshape(50, 6), X)  # float32 -> double vector -> float32 is exact
    np.testing.assert_array_equal(yv, y)

    ragged = spark.createDataFrame(pa.table({"features": [[1.0, 2.0], [3.0]], "label": [0, 1]}))
    with pytest.raises(InputDataError, match=r"column 'features' has rows of different widths \(2 and 1 at row 1\)"):
        stage_dataframe(local_store.child("bad"), ragged)
    with pytest.raises(InputDataError, match="no label column 'target'"):
        stage_dataframe(local_store.child("bad"), df, label_col="target")


@pytest.mark.slow
def test_a_dataframe_sorted_by_label_is_staged_in_shards_of_every_class(spark, tmp_path):
    # Staged in its own order, a frame sorted by label became shards of a few classes each: the partitions of
    # every fit on it, and a worse model.
    labels = np.repeat(np.arange(4), 60)
    df = spark.createDataFrame(pa.table({"features": list(np.random.default_rng(1).random((240, 3))),
                                         "label": labels}))
    store = open_store(str(tmp_path / "store"))
    for name, seed, classes in (("shuffled", {}, {4}), ("again", {"seed": 0}, {4}), ("in order", {"seed": None}, {1})):
        stage_dataframe(store.child(name), df, shards=4, **seed)
        dataset = open_dataset(store.child(name))
        assert {len(np.unique(dataset.read_shard(i)[1])) for i in range(4)} == classes, name
    np.testing.assert_array_equal(open_dataset(store.child("shuffled")).read_all()[1],
                                  open_dataset(store.child("again")).read_all()[1])  # the same seed, the same shards
    with pytest.raises(InputDataError, match="seed must be >= 0 or None, got -1"):
        stage_dataframe(store.child("negative"), df, seed=-1)
    assert not store.exists("negative")


def test_digits_recipe_stages_train_and_held_out_splits(tmp_path):
    store = open_store(str(tmp_path / "store"))
    meta = stage_recipe("digits", store.child("datasets/digits"), shards=3)
    split = load_digits01()
    assert meta["splits"] == {"test": "test"} and meta["n_classes"] == 10
    X, y = open_dataset(store.child("datasets/digits")).read_all()
    np.testing.assert_array_equal(X, split.X_train)
    np.testing.assert_array_equal(y, split.y_train)
    Xt, yt = open_dataset(store.child("datasets/digits/test")).read_all()
    np.testing.assert_array_equal(Xt, split.X_test)
    np.testing.assert_array_equal(yt, split.y_test)


def test_unknown_recipes_are_refused(tmp_path):
    local_store = open_store(str(tmp_path / "store"))
    with pytest.raises(DatasetError, match="known recipes: digits, digits28"):
        stage_recipe("mnist-from-the-internet", local_store)
