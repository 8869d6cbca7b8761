"""Labels on every Spark path are taken exactly as the in-process estimator takes them, and data the
model would refuse is refused on the driver before a single training task runs."""

from __future__ import annotations

import contextlib

import numpy as np
import pyarrow as pa
import pytest
from sklearn.exceptions import DataConversionWarning
from support.spark_jobs import failed_tasks_since, newest_job

import node
import rbm
import storage

pytestmark = pytest.mark.slow

EPOCHS = {"rbm0": 1, "finetune": 2}


def small_dbn() -> rbm.DBN:
    return rbm.DBN(hidden_layer_sizes=(16,), batch_size=10, finetune_learning_rate=0.1, random_state=0)


def two_digit_classes(digits, labels: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Digits 0 and 1 of the training split, labelled ``labels[0]`` and ``labels[1]``."""
    keep = np.isin(digits.y_train, [0, 1])
    X, y = digits.X_train[keep], digits.y_train[keep]
    return X, np.where(y == 0, labels[0], labels[1])


@pytest.mark.parametrize("labels", [(30, 70), (30.0, 70.0), ("cat", "dog"), (0, 10**9), (False, True)],
                         ids=["ints", "integral-floats", "strings", "huge", "booleans"])
def test_a_spark_fit_gives_the_classes_an_in_process_fit_gives(spark, digits, tmp_path, labels):
    X, y = two_digit_classes(digits, labels)
    in_process = small_dbn().fit(X, y)
    on_spark = node.Trainer(spark, "file://" + str(tmp_path / "store"), run_id="labels", epochs=EPOCHS,
                            partitions=2, progress=False).fit(small_dbn(), X, y)
    assert on_spark.classes_.tolist() == in_process.classes_.tolist()
    assert on_spark.classes_.dtype.kind == in_process.classes_.dtype.kind
    assert len(on_spark.parameters()["out.b"]) == 2  # a 2-way output layer, whatever the label values
    assert set(on_spark.predict(X).tolist()) <= set(labels)
    assert on_spark.score(X, y) >= 0.9


def test_fractional_float_labels_are_refused_on_spark_as_in_process(spark, digits, tmp_path):
    X, y = two_digit_classes(digits, (30.0, 70.0))
    y[17] = 30.5  # a regression target's value: scikit-learn's classifiers call it "continuous" and refuse it
    with pytest.raises(ValueError, match="continuous"):
        small_dbn().fit(X, y)
    store_url = "file://" + str(tmp_path / "store")
    with pytest.raises(node.InputDataError, match=r"arrays \(\d+, 64\): row 17 has label 30.5, not a whole number"):
        node.Trainer(spark, store_url, run_id="fractional", epochs=EPOCHS, partitions=2, progress=False).fit(
            small_dbn(), X, y)
    assert storage.open_store(store_url).list("runs/fractional") == ["lease"]  # nothing trained, nothing stored


def test_the_array_likes_scikit_learn_takes_are_taken_on_spark_validation_fraction_included(spark, digits, tmp_path):
    import pandas as pd

    X, y = two_digit_classes(digits, (30, 70))
    with pytest.warns(DataConversionWarning):
        in_process = small_dbn().fit(pd.DataFrame(X), y[:, None])
    for X_given, y_given in ((pd.DataFrame(X), y[:, None]), (X.tolist(), pd.Series(y))):
        with pytest.warns(DataConversionWarning) if np.ndim(y_given) == 2 else contextlib.nullcontext():
            trainer = node.Trainer(spark, "file://" + str(tmp_path / "store"), epochs=EPOCHS, partitions=2,
                                   validation_fraction=0.2, progress=False)
            on_spark = trainer.fit(small_dbn(), X_given, y_given)
        assert on_spark.classes_.tolist() == in_process.classes_.tolist() == [30, 70]
        assert on_spark.score(X, y) >= 0.9
        assert trainer.history_[-1]["validation"]["val_accuracy"] >= 0.9


def test_a_frames_column_names_are_kept_and_checked_as_the_one_process_fit_keeps_them(spark, digits, tmp_path):
    # The Spark fit dropped them: predicting the same frame then warned "X has feature names, but DBN was fitted
    # without feature names", and a frame with its columns in another order was predicted without a word.
    import warnings

    import pandas as pd

    X, y = two_digit_classes(digits, (0, 1))
    frame = pd.DataFrame(X, columns=[f"px{i}" for i in range(X.shape[1])])
    in_process = small_dbn().fit(frame, y)
    on_spark = node.Trainer(spark, "file://" + str(tmp_path / "store"), epochs=EPOCHS, partitions=2,
                            progress=False).fit(small_dbn(), frame, y)
    assert on_spark.feature_names_in_.tolist() == in_process.feature_names_in_.tolist() == list(frame.columns)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the frame it was fitted on: nothing to say
        assert on_spark.score(frame, y) >= 0.9
    with pytest.raises(ValueError, match="feature names"):
        on_spark.predict(frame[frame.columns[::-1]])
    refitted = node.Trainer(spark, "file://" + str(tmp_path / "store"), epochs=EPOCHS, partitions=2,
                            progress=False).fit(on_spark, X, y)  # on unnamed rows: it names none, as in process
    assert not hasattr(refitted, "feature_names_in_")

    mixed = frame.rename(columns={"px0": 0})
    with pytest.raises(TypeError, match="string"):
        small_dbn().fit(mixed, y)
    with pytest.raises(node.InputDataError, match=r"column names are of types int, str: .*X.columns.astype\(str\)"):
        node.Trainer(spark, "file://" + str(tmp_path / "store"), run_id="mixed", epochs=EPOCHS, partitions=2,
                     progress=False).fit(small_dbn(), mixed, y)
    assert storage.open_store("file://" + str(tmp_path / "store")).list("runs/mixed") == []


def test_dataframe_and_rdd_labels_give_the_same_classes_as_arrays(spark, digits, tmp_path):
    X, y = two_digit_classes(digits, ("cat", "dog"))
    frame = spark.createDataFrame(pa.table({"features": pa.array(list(X), type=pa.list_(pa.float32())),
                                            "label": pa.array(y.tolist())}))
    rdd = spark.sparkContext.parallelize(list(zip(X, y.tolist())), 2)
    for data in (frame, rdd):
        model = node.Trainer(spark, "file://" + str(tmp_path / "store"), epochs=EPOCHS, partitions=2,
                             progress=False).fit(small_dbn(), data)
        assert model.classes_.tolist() == ["cat", "dog"]


def test_a_boolean_label_column_trains_and_evaluates_as_boolean_arrays_do(spark, digits, tmp_path):
    X, y = two_digit_classes(digits, (False, True))
    frame = spark.createDataFrame(pa.table({"features": pa.array(list(X), type=pa.list_(pa.float32())),
                                            "label": pa.array(y.tolist(), type=pa.bool_())}))
    model = node.Trainer(spark, "file://" + str(tmp_path / "store"), epochs=EPOCHS, partitions=2,
                         progress=False).fit(small_dbn(), frame)
    assert model.classes_.tolist() == [False, True] and model.classes_.dtype == bool
    report = node.evaluate(model, frame)
    assert report.accuracy >= 0.9
    assert report.support.sum() == len(y)


def test_raw_pixels_for_a_bernoulli_model_fail_on_the_driver_without_a_failed_task(spark, digits, tmp_path):
    raw = digits.X_train * 16.0  # scikit-learn's digits as they come: 0..16
    before = newest_job(spark)
    store_url = "file://" + str(tmp_path / "store")
    with pytest.raises(node.InputDataError, match=r"partition \d+ row \d+ column \d+ holds \d+, outside \[0, 1\]"):
        node.Trainer(spark, store_url, run_id="raw", epochs=EPOCHS, partitions=2, progress=False).fit(
            small_dbn(), raw, digits.y_train)
    assert failed_tasks_since(spark, before) == 0
    store = storage.open_store(store_url)
    assert store.list("runs/raw") == ["lease"]  # no record, no weights, no metrics: the lease's generations only
    assert storage.LeaseFolder(store, "raw", node.resolve_run_key("raw", store_url, create=False).key).view().released
