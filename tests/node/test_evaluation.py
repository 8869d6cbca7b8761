"""Distributed evaluation and inference agree with the single-machine model and with scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, classification_report, confusion_matrix, precision_recall_fscore_support
from support.numerics import forward_rtol, near_ties
from support.spark_jobs import failed_tasks_since, newest_job

import rbm
from node._errors import InputDataError
from node.serve._evaluation import ClassificationReport, evaluate
from node.data._frames import features_from_arrow
from node.serve._inference import predict_dataframe
from rbm.datasets import load_digits01


# ----------------------------------------------------------------------------- the report alone (no Spark)


def _report_from_labels(y_true: np.ndarray, y_pred: np.ndarray) -> ClassificationReport:
    labels = np.unique(np.concatenate([y_true, y_pred]))
    return ClassificationReport.from_confusion_matrix(labels, confusion_matrix(y_true, y_pred, labels=labels))


def test_report_metrics_equal_scikit_learns_including_a_never_predicted_class():
    rng = np.random.default_rng(3)
    y_true = rng.integers(0, 5, size=400)
    y_pred = np.where(rng.random(400) < 0.7, y_true, rng.integers(0, 5, size=400))
    y_pred[y_pred == 4] = 3  # class 4 is never predicted: precision 0/0 -> 0.0
    report = _report_from_labels(y_true, y_pred)

    precision, recall, f1, support = precision_recall_fscore_support(y_true, y_pred, zero_division=0.0)
    np.testing.assert_allclose(report.precision, precision)
    np.testing.assert_allclose(report.recall, recall)
    np.testing.assert_allclose(report.f1, f1)
    np.testing.assert_array_equal(report.support, support)
    assert report.accuracy == pytest.approx(accuracy_score(y_true, y_pred))

    expected = classification_report(y_true, y_pred, output_dict=True, zero_division=0.0)
    got = report.to_dict()
    for key, value in expected.items():
        if isinstance(value, dict):
            for metric, number in value.items():
                assert got[key][metric] == pytest.approx(number), (key, metric)
        else:
            assert got[key] == pytest.approx(value)
    assert got["confusion_matrix"] == confusion_matrix(y_true, y_pred).tolist()


def test_report_text_is_scikit_learns_classification_report_followed_by_the_confusion_matrix():
    rng = np.random.default_rng(4)
    y_true = rng.integers(0, 10, size=300)
    y_pred = np.where(rng.random(300) < 0.8, y_true, rng.integers(0, 10, size=300))
    report = _report_from_labels(y_true, y_pred)
    text = str(report)
    sklearn_text = classification_report(y_true, y_pred, zero_division=0.0)
    assert text.startswith(sklearn_text)
    matrix_lines = text[len(sklearn_text) :].strip().splitlines()
    assert matrix_lines[0].startswith("confusion matrix")
    rows = [[int(v) for v in line.split()[1:]] for line in matrix_lines[2:]]
    assert rows == confusion_matrix(y_true, y_pred).tolist()
    assert report.format(digits=4).startswith(classification_report(y_true, y_pred, digits=4, zero_division=0.0))


def test_vector_columns_decode_to_the_same_matrix_as_dense_arrays():
    import pyarrow as pa
    from pyspark.ml.linalg import VectorUDT

    dense = pa.array([[0.0, 1.5, 0.0], [2.0, 0.0, 3.0], [0.0, 0.0, 0.0]], type=pa.list_(pa.float64()))
    vectors = pa.StructArray.from_arrays(
        [
            pa.array([1, 0, 0], type=pa.int8()),
            pa.array([None, 3, 3], type=pa.int32()),
            pa.array([None, [0, 2], []], type=pa.list_(pa.int32())),
            pa.array([[0.0, 1.5, 0.0], [2.0, 3.0], []], type=pa.list_(pa.float64())),
        ],
        names=[field.name for field in VectorUDT().sqlType().fields],
    )
    expected = np.array([[0, 1.5, 0], [2, 0, 3], [0, 0, 0]], dtype=np.float32)
    np.testing.assert_array_equal(features_from_arrow(dense), expected)
    np.testing.assert_array_equal(features_from_arrow(vectors), expected)
    with pytest.raises(InputDataError, match="different widths"):
        features_from_arrow(pa.array([[1.0, 2.0], [1.0]]), name="pixels")


# ----------------------------------------------------------------------------- on Spark


@pytest.fixture(scope="module")
def digits():
    return load_digits01()


@pytest.fixture(scope="module")
def model(digits):
    dbn = rbm.DBN([32], pretrain_epochs=2, finetune_epochs=10, batch_size=10, random_state=0)
    return dbn.fit(digits.X_train, digits.y_train)


# Spark predicts in batches of its own, the model here all rows at once: a row's float32 probabilities may
# differ in the last bits (the models below: dot products of 64 and at most 32 terms), so a row whose two
# best classes are that close may be classified either way; every other row is classified alike.
PROBABILITY_RTOL = forward_rtol(64, 32)


def _assert_matches_single_machine(report: ClassificationReport, model, X: np.ndarray, y: np.ndarray) -> None:
    predicted = model.predict(X)
    ties = int(near_ties(model.predict_proba(X), PROBABILITY_RTOL).sum())  # measured: 0 of 450 rows
    assert report.accuracy == pytest.approx(accuracy_score(y, predicted), rel=1e-9, abs=ties / len(y))
    moved = np.abs(report.confusion_matrix - confusion_matrix(y, predicted, labels=report.labels)).sum()
    assert moved <= 2 * ties  # a row classified otherwise leaves one cell and enters another
    assert report.n_samples == len(y)


@pytest.mark.slow
def test_evaluation_of_numpy_arrays_on_spark_equals_the_single_machine_model(spark, model, digits):
    report = evaluate(model, (digits.X_test, digits.y_test), spark=spark, batch_size=50)
    _assert_matches_single_machine(report, model, digits.X_test, digits.y_test)
    assert report.accuracy > 0.9  # the DBN really learned something
    expected = classification_report(digits.y_test, model.predict(digits.X_test), output_dict=True, zero_division=0.0)
    got = report.to_dict()
    ties = int(near_ties(model.predict_proba(digits.X_test), PROBABILITY_RTOL).sum())  # rows either side may classify
    for label in map(str, range(10)):
        for metric in ("precision", "recall", "f1-score", "support"):  # a moved row moves each by at most 1
            assert got[label][metric] == pytest.approx(expected[label][metric], rel=1e-9, abs=ties)
    if not ties:  # (a near tie may change the text's last digits)
        assert str(report).startswith(classification_report(digits.y_test, model.predict(digits.X_test),
                                                            zero_division=0.0))


@pytest.mark.slow
def test_evaluation_reports_class_labels_not_indices_and_takes_image_shaped_input(spark, digits):
    # A DBN whose labels are 0, 10, ..., 90: predictions and the report must use those labels.
    dbn = rbm.DBN([16], pretrain_epochs=1, finetune_epochs=5, batch_size=10, random_state=1)
    dbn.fit(digits.X_train, digits.y_train * 10)
    report = evaluate(dbn, (digits.X_test, digits.y_test * 10), spark=spark)
    assert report.labels.tolist() == list(range(0, 100, 10))
    _assert_matches_single_machine(report, dbn, digits.X_test, digits.y_test * 10)
    # A conv net (labels are class indices, no classes_) on (n, 1, 8, 8) images.
    net = rbm.ConvNet(layers=[{"type": "flatten"}, {"type": "dense", "units": 16}], input_shape=(1, 8, 8),
                      n_classes=10, epochs=2, learning_rate=0.1, random_state=0).fit(digits.X_train, digits.y_train)
    images = digits.X_test.reshape(-1, 1, 8, 8)
    report = evaluate(net, (images, digits.y_test), spark=spark)
    _assert_matches_single_machine(report, net, images, digits.y_test)


@pytest.mark.slow
def test_evaluation_takes_string_labels_from_a_pandas_frame_as_fit_does(spark, digits):
    # A pandas column of strings is an object array: fit took it, evaluate refused it ("got dtype object").
    import pandas as pd

    names = np.array([f"digit {k}" for k in range(10)])
    frame = pd.DataFrame(digits.X_test).assign(label=names[digits.y_test])
    dbn = rbm.DBN([16], pretrain_epochs=1, finetune_epochs=5, batch_size=10, random_state=1)
    dbn.fit(pd.DataFrame(digits.X_train), pd.Series(names[digits.y_train]))
    y = frame["label"].to_numpy()
    assert y.dtype == object
    report = evaluate(dbn, (frame.drop(columns="label"), frame["label"]), spark=spark)
    assert report.labels.tolist() == names.tolist()
    _assert_matches_single_machine(report, dbn, digits.X_test, names[digits.y_test])


@pytest.mark.slow
def test_evaluation_takes_the_data_as_fit_does_a_sparse_matrix_and_a_staged_dataset(spark, model, digits, tmp_path):
    import scipy.sparse

    import storage

    sparse = evaluate(model, (scipy.sparse.csr_matrix(digits.X_test), digits.y_test), spark=spark)
    _assert_matches_single_machine(sparse, model, digits.X_test, digits.y_test)
    url = str(tmp_path / "store" / "datasets" / "test")
    storage.stage_arrays(url, digits.X_test, digits.y_test, shards=3)
    for data in (url, storage.open_dataset(url)):
        report = evaluate(model, data, spark=spark, batch_size=40)
        _assert_matches_single_machine(report, model, digits.X_test, digits.y_test)
    with pytest.raises(InputDataError, match="its rows are as staged"):
        evaluate(model, url, spark=spark, scaling={"kind": "minmax", "low": [0.0], "high": [1.0]})
    storage.stage_arrays(url + "-unlabelled", digits.X_test, shards=2)
    with pytest.raises(InputDataError, match="holds no labels: evaluate needs them"):
        evaluate(model, url + "-unlabelled", spark=spark)
    with pytest.raises(InputDataError, match="cannot be opened"):
        evaluate(model, url + "-nothing-there", spark=spark)


@pytest.mark.slow
def test_evaluation_of_an_rdd_of_pairs_equals_the_single_machine_model(spark, model, digits):
    from pyspark.ml.linalg import Vectors

    rows = [(Vectors.dense(x) if k % 2 else x.tolist(), int(label)) for k, (x, label) in enumerate(zip(digits.X_test, digits.y_test))]
    report = evaluate(model, spark.sparkContext.parallelize(rows, 3), batch_size=64)
    _assert_matches_single_machine(report, model, digits.X_test, digits.y_test)


@pytest.mark.slow
@pytest.mark.parametrize("features", ["array", "vector"])
def test_evaluation_of_a_dataframe_equals_the_single_machine_model(spark, model, digits, features):
    from pyspark.ml.linalg import Vectors

    make = (lambda x: Vectors.dense(x.astype(float))) if features == "vector" else (lambda x: x.astype(float).tolist())
    df = spark.createDataFrame([(make(x), float(label)) for x, label in zip(digits.X_test, digits.y_test)], ["pixels", "digit"])
    report = evaluate(model, df.repartition(3), features_col="pixels", label_col="digit", batch_size=40)
    _assert_matches_single_machine(report, model, digits.X_test, digits.y_test)


@pytest.mark.slow
@pytest.mark.parametrize("features", ["array", "vector"])
def test_predict_dataframe_adds_the_single_machine_predictions_and_probabilities(spark, model, digits, features):
    from pyspark.ml.linalg import Vectors

    make = (lambda x: Vectors.dense(x.astype(float))) if features == "vector" else (lambda x: x.astype(float).tolist())
    rows = [(k, make(x)) for k, x in enumerate(digits.X_test)]
    df = spark.createDataFrame(rows, ["id", "features"]).repartition(2)
    out = predict_dataframe(model, df, probability_type="vector" if features == "vector" else "array").collect()
    out.sort(key=lambda row: row["id"])
    proba = np.array([np.asarray(row["probability"]) for row in out])
    expected = model.predict_proba(digits.X_test)
    np.testing.assert_allclose(proba, expected, rtol=PROBABILITY_RTOL, atol=1e-7)  # atol: float32 rounding of 1
    classified_otherwise = np.array([row["prediction"] for row in out]) != model.predict(digits.X_test)
    assert not np.any(classified_otherwise & ~near_ties(expected, PROBABILITY_RTOL))
    assert [row["id"] for row in out] == list(range(len(digits.X_test)))  # other columns pass through


def test_prediction_columns_named_none_or_empty_are_left_out(spark, model, digits):
    df = spark.createDataFrame([(x.astype(float).tolist(),) for x in digits.X_test[:20]], ["features"])
    for left_out in (None, ""):
        frame = predict_dataframe(model, df, probability_col=left_out, raw_prediction_col=left_out)
        assert frame.columns == ["features", "prediction"]  # not a column named ""


@pytest.mark.slow
def test_a_model_fitted_on_string_labels_is_evaluated_and_predicts_them_on_spark(spark, digits):
    names = np.array(["even", "odd"])
    y_train, y_test = names[digits.y_train % 2], names[digits.y_test % 2]
    dbn = rbm.DBN([16], pretrain_epochs=1, finetune_epochs=3, batch_size=10, random_state=0)
    dbn.fit(digits.X_train, y_train)
    rows = [(x.astype(float).tolist(), str(label)) for x, label in zip(digits.X_test, y_test)]
    frame = spark.createDataFrame(rows, ["features", "label"]).repartition(2)
    for data in ((digits.X_test, y_test), spark.sparkContext.parallelize(rows, 2), frame):
        report = evaluate(dbn, data, spark=spark)
        assert report.labels.tolist() == ["even", "odd"]
        _assert_matches_single_machine(report, dbn, digits.X_test, y_test)
    with pytest.raises(InputDataError, match="labels in y must be strings, as the model's classes are"):
        evaluate(dbn, (digits.X_test, digits.y_test % 2), spark=spark)

    out = predict_dataframe(dbn, frame).collect()
    assert {type(row["prediction"]) for row in out} == {str}
    expected = dict(zip(map(tuple, digits.X_test.astype(float).tolist()), dbn.predict(digits.X_test)))
    ties = near_ties(dbn.predict_proba(digits.X_test), PROBABILITY_RTOL).sum()
    assert sum(row["prediction"] != expected[tuple(row["features"])] for row in out) <= ties


@pytest.mark.slow
def test_wrong_feature_width_is_refused_on_the_driver_naming_the_problem(spark, model, digits):
    with pytest.raises(InputDataError, match=r"X does not fit the model.*60.*expect\w* 64"):
        evaluate(model, (digits.X_test[:, :60], digits.y_test), spark=spark)
    df = spark.createDataFrame([(x[:60].tolist(), 1) for x in digits.X_test[:5]], ["features", "label"])
    with pytest.raises(InputDataError, match="features column 'features' does not fit the model"):
        predict_dataframe(model, df)
    with pytest.raises(InputDataError, match="features column 'features' does not fit the model"):
        evaluate(model, df)


@pytest.mark.slow
def test_missing_or_mistyped_columns_are_refused_naming_the_column(spark, model):
    df = spark.createDataFrame([([0.0] * 64, "seven")], ["pixels", "label"])
    with pytest.raises(InputDataError, match="no features column 'features'.*pixels"):
        predict_dataframe(model, df)
    with pytest.raises(InputDataError, match="label column 'label' has type string"):
        evaluate(model, df, features_col="pixels")
    with pytest.raises(InputDataError, match="no label column 'digit'"):
        evaluate(model, df, features_col="pixels", label_col="digit")
    with pytest.raises(InputDataError, match="features column 'label' has type string"):
        predict_dataframe(model, df, features_col="label")
    with pytest.raises(InputDataError, match="the rows to predict must be a Spark DataFrame, got ndarray"):
        predict_dataframe(model, np.zeros((2, 64)))


@pytest.mark.slow
def test_nan_deep_inside_a_dataframe_fails_the_job_with_an_error_naming_partition_and_row(spark, model, digits):
    X = digits.X_test[:120].astype(float)
    X[77, 5] = np.nan  # the driver's one-row check cannot see it: the executor must report it
    df = spark.createDataFrame([(x.tolist(), int(label)) for x, label in zip(X, digits.y_test)], ["features", "label"])
    with pytest.raises(InputDataError, match=r"evaluation data: partition 0, rows 64\.\.119 of a batch: .*NaN or Inf \(first at row 13\)"):
        evaluate(model, df.coalesce(1), batch_size=64)


@pytest.mark.slow
def test_an_rdd_row_that_is_not_a_pair_deep_inside_is_named_without_a_failed_task(spark, model, digits):
    rows = [(x, int(label)) for x, label in zip(digits.X_test[:120], digits.y_test)]
    rows[77] = rows[77][0]  # a bare feature vector: the driver's look at the first row cannot see it
    before = newest_job(spark)
    with pytest.raises(InputDataError, match=r"evaluation data: partition 0, row 77 is not a \(features, label\) pair"):
        evaluate(model, spark.sparkContext.parallelize(rows, 1))
    assert failed_tasks_since(spark, before) == 0
