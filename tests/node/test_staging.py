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
    stage_dataframe(local_store.child("arr"), df, shards=2)
    Xa, ya = open_dataset(local_store.child("arr")).read_all()
    np.testing.assert_array_equal(Xa, X)
    np.testing.assert_array_equal(ya, y)

    vectors = df.select(array_to_vector("features").alias("vec"), F.col("label").cast("double").alias("target"))
    meta = stage_dataframe(local_store.child("vec"), vectors, "vec", "target", feature_shape=(2, 3))
    assert meta["feature_shape"] == [2, 3] and meta["n_classes"] == int(y.max()) + 1
    Xv, yv = open_dataset(local_store.child("vec")).read_all()
    np.testing.assert_array_equal(Xv.reshape(50, 6), X)  # float32 -> double vector -> float32 is exact
    np.testing.assert_array_equal(yv, y)

    ragged = spark.createDataFrame(pa.table({"features": [[1.0, 2.0], [3.0]], "label": [0, 1]}))
    with pytest.raises(InputDataError, match=r"column 'features' has rows of different widths \(2 and 1 at row 1\)"):
        stage_dataframe(local_store.child("bad"), ragged)
    with pytest.raises(InputDataError, match="no label column 'target'"):
        stage_dataframe(local_store.child("bad"), df, label_col="target")


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
