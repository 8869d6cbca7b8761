"""Training data prepared for a fit (node.data._prepare): numpy arrays checked and split on the driver, the rest by Spark."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

import node
import storage
from node.data import DataOptions, check_model_input, filled_partitions, prepare_training_data
from node.data._partitions import summarize_block
from node.executor._resident import NodeData, block_sink

pytestmark = pytest.mark.slow


def numbered_rows(rows: int = 120, width: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Rows in [0, 1) whose column 0 numbers them (row / rows), and labels 0..2 (strings in a few)."""
    rng = np.random.default_rng(0)
    X = rng.random((rows, width)).astype(np.float32)
    X[:, 0] = np.arange(rows) / rows
    return X, rng.integers(0, 3, rows)


def no_jobs_in(spark, group: str, action):
    """``action()``'s result, and the Spark jobs it ran (it runs in job group ``group``)."""
    sc = spark.sparkContext
    sc.setJobGroup(group, "a test's data preparation")
    try:
        result = action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return result, sc.statusTracker().getJobIdsForGroup(group)


def test_numpy_rows_are_split_and_summarized_on_the_driver_without_a_spark_job(spark):
    X, y = numbered_rows()
    prepared, jobs = no_jobs_in(spark, "numpy-on-the-driver", lambda: prepare_training_data(
        spark, X, y, DataOptions(partitions=4, shuffle_seed=3)))
    assert jobs == []
    assert not prepared.stored and [index for index, *_ in prepared.held] == [0, 1, 2, 3]
    ids = np.concatenate([X_part[:, 0] for _index, X_part, _y in prepared.held]) * len(X)
    assert sorted(np.rint(ids).astype(int)) == list(range(len(X)))  # every row once, shuffled
    assert not np.array_equal(np.rint(ids).astype(int), np.arange(len(X)))
    for _index, X_part, y_part in prepared.held:  # each row keeps its own label
        assert np.array_equal(y_part, y[np.rint(X_part[:, 0] * len(X)).astype(int)])
    assert prepared.rows_per_partition == [30] * 4 and prepared.n_samples == len(X)
    assert list(prepared.classes) == [0, 1, 2]
    prepared.unpersist()
    assert prepared.held is None


def test_the_drivers_summaries_of_numpy_rows_are_the_executors_summaries_of_the_same_rows_byte_for_byte(spark):
    X, y = numbered_rows(rows=90)
    X[:, 1:] = np.floor(X[:, 1:] * 4) / 4  # pixel-like levels: every column's minimum and maximum tie across rows
    on_driver = prepare_training_data(spark, X, y, DataOptions(partitions=3, shuffle_seed=1))
    # The same partitions as an RDD of (features, label) rows: summarized by the executors.
    parts = [list(zip(X_part, y_part.tolist())) for _index, X_part, y_part in on_driver.held]
    rdd = spark.sparkContext.parallelize(parts, len(parts)).flatMap(lambda rows: rows)
    by_spark = prepare_training_data(spark, rdd, options=DataOptions(partitions=3, shuffle_seed=None))  # as held
    try:
        assert json.dumps(on_driver.summaries) == json.dumps(by_spark.summaries)
        assert (on_driver.rows_per_partition, on_driver.feature_shape) == (by_spark.rows_per_partition,
                                                                           by_spark.feature_shape)
        assert list(on_driver.classes) == list(by_spark.classes)
    finally:
        by_spark.unpersist()


def test_a_numpy_value_outside_the_models_range_is_named_by_partition_row_and_column(spark):
    X, y = numbered_rows(rows=40)
    X[23, 5] = 2.5  # rows in order (no shuffle), 2 partitions of 20: partition 1, row 3
    prepared = prepare_training_data(spark, X, y, DataOptions(partitions=2, shuffle_seed=None))
    with pytest.raises(node.InputDataError, match=r"partition 1 row 3 column 5 holds 2.5, outside \[0, 1\]"):
        check_model_input(prepared, X.shape[1], (0.0, 1.0))


def test_shuffled_numpy_rows_are_named_by_their_row_in_the_arrays_given(spark):
    X, y = numbered_rows(rows=40)
    X[23, 5] = 2.5
    prepared = prepare_training_data(spark, X, y, DataOptions(partitions=2, shuffle_seed=3))
    with pytest.raises(node.InputDataError, match=r"partition \d row \d+ column 5 holds 2.5, outside \[0, 1\] that the "
                                                  r"model's visible units take \(row 23 of the arrays given; scale"):
        check_model_input(prepared, X.shape[1], (0.0, 1.0))
    labels = y.astype(float)
    labels[17] = 1.5
    with pytest.raises(node.InputDataError, match=r"^arrays \(40, 6\): row 17 has label 1.5, not a whole number"):
        prepare_training_data(spark, X, labels, DataOptions(partitions=2, shuffle_seed=3))


def test_a_pandas_frame_and_a_column_of_string_labels_are_taken_as_scikit_learn_takes_them(spark):
    import pandas as pd

    X, y = numbered_rows(rows=40)
    names = pd.Series(np.array(["ant", "bee", "cat"])[y], dtype=object)  # pandas keeps strings as objects
    prepared = prepare_training_data(spark, pd.DataFrame(X), names, DataOptions(partitions=2, shuffle_seed=None))
    assert prepared.classes.tolist() == ["ant", "bee", "cat"] and prepared.feature_shape == (6,)
    assert np.array_equal(np.concatenate([y_part for *_rest, y_part in prepared.held]), names.to_numpy().astype(str))


def test_a_scipy_sparse_matrix_is_taken_as_the_models_take_it(spark):
    # The RBM fits a scipy sparse matrix; Trainer.fit refused one: "unsupported training data of type csr_matrix".
    import scipy.sparse as sp

    X, y = numbered_rows(rows=40)
    X[X < 0.5] = 0.0
    prepared = prepare_training_data(spark, sp.csr_matrix(X), y, DataOptions(partitions=2, shuffle_seed=None))
    assert prepared.n_samples == 40 and prepared.feature_shape == (6,)
    np.testing.assert_array_equal(np.concatenate([X_part for _index, X_part, _y in prepared.held]), X)


def test_numpy_rows_with_nan_or_too_many_labels_are_refused_naming_where(spark):
    X, y = numbered_rows(rows=40)
    X[31, 2] = np.nan
    with pytest.raises(node.InputDataError, match=r"NaN or Inf \(first at row 31\)"):
        prepare_training_data(spark, X, y, DataOptions(partitions=2))
    with pytest.raises(node.InputDataError, match=r"partition 0 alone has 20 distinct labels, more than max_classes=5"):
        prepare_training_data(spark, numbered_rows(rows=40)[0], np.arange(40), DataOptions(partitions=2, max_classes=5))


def test_a_dataframes_partitions_are_read_checked_and_stored_by_one_job_through_arrow(spark, tmp_path):
    X, y = numbered_rows(rows=60)
    rows = [(row.tolist(), int(label)) for row, label in zip(X, y)]
    frame = spark.sparkContext.parallelize(rows, 3).toDF(["features", "label"])
    store_url = "file://" + str(tmp_path / "store")
    sink = block_sink(store_url, 5.0, b"k" * 32, "r1", "f" * 32)
    prepared, jobs = no_jobs_in(spark, "dataframe-in-one-job", lambda: prepare_training_data(
        spark, frame, options=DataOptions(partitions=3, sink=sink, shuffle_seed=None)))  # kept as they are
    assert len(jobs) == 1 and prepared.stored and prepared.held is None
    assert sum(prepared.rows_per_partition) == len(X) and list(prepared.classes) == [0, 1, 2]
    config = SimpleNamespace(store_url=store_url, store_retry_timeout_s=5.0, key=b"k" * 32, run="r1",
                             fit_id="f" * 32)
    blocks = NodeData(storage.open_store(store_url), config, "node-a").slot(filled_partitions(
        prepared.rows_per_partition))
    ids = np.rint(np.concatenate([X_part[:, 0] for _index, X_part, _y in blocks]) * len(X)).astype(int)
    assert sorted(ids) == list(range(len(X)))  # every row stored once, with its own label
    assert np.array_equal(np.concatenate([y_part for *_rest, y_part in blocks]), y[ids])


def _classes_per_partition(prepared) -> list[int]:
    return [len(summary["labels"]["values"]) for summary in prepared.summaries]


def test_a_dataframe_sorted_by_label_is_shuffled_across_the_partitions_unless_shuffle_is_off(spark):
    # Spark's partitions were kept where they were as many as asked: rows grouped by label gave each node a few
    # classes (digits in 4 partitions by label range: 0.72 held out against 0.96 shuffled).
    X, _ = numbered_rows(rows=400)
    y = np.repeat(np.arange(8), 50)  # sorted by label: each of 4 partitions holds 2 classes
    rdd = spark.sparkContext.parallelize([(row.tolist(), int(label)) for row, label in zip(X, y)], 4)
    frame = rdd.toDF(["features", "label"])
    kept = prepare_training_data(spark, frame, options=DataOptions(partitions=4, shuffle_seed=None))
    assert _classes_per_partition(kept) == [2, 2, 2, 2]
    shuffled = prepare_training_data(spark, frame, options=DataOptions(partitions=4, shuffle_seed=0))
    assert min(_classes_per_partition(shuffled)) == 8 and sum(shuffled.rows_per_partition) == 400
    again = prepare_training_data(spark, frame, options=DataOptions(partitions=4, shuffle_seed=0))
    assert again.rows_per_partition == shuffled.rows_per_partition  # seeded: the same split again
    # An RDD is taken as it is partitioned (its refused rows are named by its own partition and row).
    assert _classes_per_partition(prepare_training_data(spark, rdd, options=DataOptions(partitions=4))) == [2] * 4


def test_a_dataframe_without_the_label_column_a_model_needs_is_refused_naming_its_columns(spark):
    # It said "DataFrame[features, label] has no labels", after a Spark job, as if a label column were there.
    frame = spark.createDataFrame([([0.5, 0.5], 1), ([0.2, 0.1], 0)], ["features", "target"])
    with pytest.raises(node.InputDataError, match=r"^DataFrame has no label column 'label'; its columns are "
                                                  r"\['features', 'target'\]$"):
        prepare_training_data(spark, frame, options=DataOptions(partitions=2, require_labels=True))
    unlabelled = prepare_training_data(spark, frame.select("features"), options=DataOptions(partitions=2))
    assert unlabelled.classes is None  # a model that needs none takes it


def test_a_summary_names_each_columns_first_row_at_its_minimum_and_maximum():
    X = np.array([[0.5, 0.2], [0.1, 0.9], [0.1, 0.9], [0.7, 0.2]], np.float32)  # every extreme but one ties
    summary = summarize_block(0, X, None, max_classes=10)
    assert (summary["column_min_row"], summary["column_max_row"]) == ([1, 0], [3, 1])
    assert summary["column_min"] == pytest.approx([0.1, 0.2]) and summary["column_max"] == pytest.approx([0.7, 0.9])


def test_partitions_smaller_than_a_minibatch_are_warned_of_before_training(spark):
    # --partitions 1000 on 3000 rows trained 1000 tasks an epoch, each less than one minibatch step: slow,
    # and nothing said why.
    import warnings

    import rbm
    from node.driver import TrainingSettings
    from node.driver._fit_data import prepare_fit_data, small_partitions_warning

    assert small_partitions_warning([3] * 1000, 32) == (
        "1000 partitions of 3000 rows hold 3 rows each (the median), fewer than a minibatch (32): each partition is a "
        "Spark task, a merge and a publish for less than one minibatch step, so an epoch is slow; use at most 93 "
        "partitions (partitions=, --partitions), or restage the dataset in fewer shards")
    assert small_partitions_warning([32] * 10, 32) is None and small_partitions_warning([0, 0, 64], 32) is None
    assert small_partitions_warning([3] * 10, None) is None

    X, y = numbered_rows(rows=120)
    model = rbm.DBN(hidden_layer_sizes=(4,), batch_size=32, random_state=0)
    for partitions, warned in ((40, True), (3, False)):
        with warnings.catch_warnings(record=True) as told:  # a UserWarning: a script without logging sees it too
            warnings.simplefilter("always")
            prepared, _ = prepare_fit_data(spark, TrainingSettings(partitions=partitions), model, rbm.model_spec(model),
                                           X, y, nodes=2, require_labels=True)
        said = [warning for warning in told if "fewer than a minibatch (32)" in str(warning.message)]
        assert bool(said) == warned and all(warning.category is UserWarning for warning in said), partitions
        prepared.unpersist()


def test_data_taken_as_partitioned_whose_rows_are_sorted_by_label_or_whose_labels_are_ids_is_warned_of(spark):
    # An RDD sorted by label trained a DBN to 0.24 held out on digits, against 0.92 shuffled, without a word.
    import warnings

    import rbm
    from node.driver import TrainingSettings
    from node.driver._fit_data import prepare_fit_data

    X, y = numbered_rows(rows=480)
    order = np.argsort(y, kind="stable")
    X, y = X[order], y[order]
    rows = spark.sparkContext.parallelize([(row, int(label)) for row, label in zip(X, y)], 4)
    cases = {"sorted RDD": (rows, None, True, "shuffle the RDD first (rdd.repartition(n)"),
             "RDD repartitioned": (rows.repartition(4), None, True, None),
             "sorted arrays, shuffle off": (X, y, False, "leave shuffle on (shuffle=True"),
             "sorted arrays": (X, y, True, None),
             "row ids for labels": (X, np.arange(len(X)), True, "look like row ids")}
    for case, (data, labels, shuffle, advice) in cases.items():
        model = rbm.DBN(hidden_layer_sizes=(4,), batch_size=8, random_state=0)
        with warnings.catch_warnings(record=True) as told:
            warnings.simplefilter("always")
            prepared, _ = prepare_fit_data(spark, TrainingSettings(partitions=4, shuffle=shuffle), model,
                                           rbm.model_spec(model), data, labels, nodes=2, require_labels=True)
        prepared.unpersist()
        said = [str(warning.message) for warning in told if "by label" in str(warning.message)
                or "row ids" in str(warning.message)]
        assert len(said) == (advice is not None), (case, said)
        if advice:
            assert advice in said[0], said
