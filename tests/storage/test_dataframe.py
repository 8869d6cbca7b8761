"""Staging a Spark DataFrame (array and ml Vector feature columns) through Arrow, on the suite's local Spark session."""

from __future__ import annotations


import numpy as np
import pytest

from storage import DatasetError, open_dataset, stage_dataframe


@pytest.mark.slow
def test_a_dataframe_is_staged_bit_exact_from_array_and_vector_columns(spark, local_store):
    import pyarrow as pa
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

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
    with pytest.raises(DatasetError, match="ragged rows in column 'features': row 0 has 2 values, row 1 has 1"):
        stage_dataframe(local_store.child("bad"), ragged)
    with pytest.raises(DatasetError, match="no column"):
        stage_dataframe(local_store.child("bad"), df, label_col="target")
