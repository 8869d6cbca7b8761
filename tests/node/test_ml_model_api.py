"""What a Spark ML user expects of DBNClassifier and its model beyond fit/transform: a setter and getter per param,
``numClasses``, one-row ``predict`` / ``predictProbability`` / ``predictRaw``, probability vectors indexed by label
value (so Spark's evaluators read labels such as ``{30, 70}`` right), and a ``logDir`` param."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from support.numerics import forward_rtol, near_ties

import rbm
from node import DBNClassificationModel, DBNClassifier, predict_dataframe
from rbm.datasets import load_digits01

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def digits():
    return load_digits01()


def _frame(spark, X: np.ndarray, y: np.ndarray):
    from pyspark.ml.linalg import Vectors

    return spark.createDataFrame([(k, Vectors.dense(x.astype(float)), float(label))
                                  for k, (x, label) in enumerate(zip(X, y))], ["row", "features", "label"])


def _rows(frame) -> list:
    return sorted(frame.collect(), key=lambda row: row["row"])


def test_every_param_has_a_setter_and_a_getter_that_are_real_documented_methods():
    classifier = DBNClassifier()
    for param in classifier.params:
        name = param.name[0].upper() + param.name[1:]
        for method in (f"set{name}", f"get{name}"):
            assert method in dir(classifier), method
            assert inspect.isfunction(inspect.getattr_static(DBNClassifier, method)), method  # not a __getattr__ trick
        assert getattr(DBNClassifier, f"set{name}").__doc__, f"set{name} has no docstring"
    values = {"hiddenLayerSizes": [7, 3], "pretrainEpochs": 2, "finetuneEpochs": 4, "batchSize": 20,
              "learningRate": 0.02, "finetuneLearningRate": 0.03, "storeUrl": "file:///somewhere", "numPartitions": 3,
              "fanout": 1, "runId": "r1", "progress": False, "seed": 9, "trainingMode": "sync", "device": "auto",
              "precision": "tf32", "logDir": "", "featuresCol": "x", "labelCol": "y", "predictionCol": "p",
              "probabilityCol": "q", "rawPredictionCol": "r", "validationFraction": 0.2,
              "validationIndicatorCol": "is_validation", "earlyStoppingPatience": 2}
    assert sorted(values) == sorted(param.name for param in classifier.params)
    for name, value in values.items():
        setter = getattr(classifier, f"set{name[0].upper()}{name[1:]}")
        assert setter(value) is classifier
    assert {name: getattr(classifier, f"get{name[0].upper()}{name[1:]}")() for name in values} == values
    model = classifier.build_model()  # the setters' values are what the estimator builds with
    assert (list(model.hidden_layer_sizes), model.batch_size, model.random_state) == ([7, 3], 20, 9)


def test_the_models_vectors_are_indexed_by_label_value_and_one_row_predictions_match_transform(spark, digits):
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.linalg import DenseVector

    two = (digits.y_train == 3) | (digits.y_train == 7)
    labels = np.where(digits.y_train[two] == 3, 30, 70)  # two classes, as scikit-learn takes them: 30 and 70
    dbn = rbm.DBN(hidden_layer_sizes=(16,), pretrain_epochs=1, finetune_epochs=3, random_state=0)
    dbn.fit(digits.X_train[two], labels)
    test = (digits.y_test == 3) | (digits.y_test == 7)
    X_test, y_test = digits.X_test[test], np.where(digits.y_test[test] == 3, 30, 70)
    model = DBNClassificationModel(dbn)
    assert model.numClasses == 71 and model.numFeatures == 64

    scored = model.transform(_frame(spark, X_test, y_test)).cache()
    rows = _rows(scored)
    probability = np.array([row["probability"].toArray() for row in rows])
    raw = np.array([row["rawPrediction"].toArray() for row in rows])
    assert probability.shape == raw.shape == (len(X_test), 71)
    # Entries 30 and 70 are the model's two probabilities (the executors' batches round as the model: within
    # float32 rounding of dot products of 64 and 16 terms); every other label's entry is exactly 0.
    rtol = forward_rtol(64, 16)
    expected = dbn.predict_proba(X_test)
    np.testing.assert_allclose(probability[:, [30, 70]], expected, rtol=rtol, atol=1e-7)
    assert np.all(np.delete(probability, [30, 70], axis=1) == 0.0)
    np.testing.assert_array_equal(raw, np.log(np.maximum(probability, 1e-300)))
    prediction = np.array([row["prediction"] for row in rows])
    assert set(prediction) <= {30.0, 70.0}
    # Spark's logLoss reads probability[label]: with entries by class position it read past the vector.
    spark_log_loss = MulticlassClassificationEvaluator(metricName="logLoss").evaluate(scored)
    expected_log_loss = -np.mean(np.log(np.maximum(probability[np.arange(len(y_test)), y_test], 1e-15)))
    assert spark_log_loss == pytest.approx(expected_log_loss, rel=1e-9)  # the same numbers, summed in another order
    assert MulticlassClassificationEvaluator(metricName="accuracy").evaluate(scored) == pytest.approx(
        np.mean(prediction == y_test), rel=1e-12)
    scored.unpersist()

    # One row at a time, from a Vector or a plain list: what transform gave that row (up to float32 rounding,
    # and a row whose two classes are that close may go either way).
    ties = near_ties(expected, rtol)
    for k in range(0, len(X_test), 7):
        vector = DenseVector(X_test[k].astype(float))
        one = model.predictProbability(vector)
        assert isinstance(one, DenseVector) and one.size == 71
        np.testing.assert_allclose(one.toArray(), probability[k], rtol=rtol, atol=1e-7)
        np.testing.assert_array_equal(model.predictRaw(vector).toArray(), np.log(np.maximum(one.toArray(), 1e-300)))
        guess = model.predict(X_test[k].tolist())
        assert isinstance(guess, float) and (guess == prediction[k] or ties[k])
        assert guess == {True: 30.0, False: 70.0}[one[30] > one[70]]

    # predict_dataframe (sparkdbn predict's columns) keeps the classes' order unless asked.
    plain = _rows(predict_dataframe(dbn, _frame(spark, X_test[:5], y_test[:5])))
    assert [len(row["probability"]) for row in plain] == [2] * 5


def test_string_labels_keep_the_class_order_and_labels_0_to_k_minus_1_are_unchanged(spark, digits):
    few = digits.y_train < 3
    names = np.array(["zero", "one", "two"])[digits.y_train[few]]
    by_name = rbm.DBN(hidden_layer_sizes=(8,), pretrain_epochs=1, finetune_epochs=2, random_state=0)
    by_name.fit(digits.X_train[few], names)
    model = DBNClassificationModel(by_name)
    assert model.numClasses == 3
    row, = _rows(model.transform(_frame(spark, digits.X_test[:1], digits.y_test[:1]).drop("label")))
    assert len(row["probability"]) == 3 and isinstance(row["prediction"], str)
    assert model.predict(digits.X_test[0]) in {"zero", "one", "two"}
    assert model.predictProbability(digits.X_test[0]).size == 3

    by_index = rbm.DBN(hidden_layer_sizes=(8,), pretrain_epochs=1, finetune_epochs=2, random_state=0)
    by_index.fit(digits.X_train[few], digits.y_train[few])
    indexed = DBNClassificationModel(by_index)
    assert indexed.numClasses == 3
    rows = _rows(indexed.transform(_frame(spark, digits.X_test[:5], digits.y_test[:5])))
    plain = _rows(predict_dataframe(by_index, _frame(spark, digits.X_test[:5], digits.y_test[:5])))
    for mine, theirs in zip(rows, plain):  # labels 0 .. k-1: indexed by value is indexed by class, bit for bit
        np.testing.assert_array_equal(mine["probability"].toArray(), theirs["probability"].toArray())


def test_log_dir_moves_the_live_logs_of_a_fit_and_empty_turns_them_off(spark, digits, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    train = _frame(spark, digits.X_train[:200], digits.y_train[:200]).drop("row")
    settings = dict(hiddenLayerSizes=[8], pretrainEpochs=1, finetuneEpochs=1, numPartitions=2, progress=False)
    logs = tmp_path / "logs"
    moved = DBNClassifier(storeUrl="file://" + str(tmp_path / "store"), **settings).setLogDir(str(logs)).fit(train)
    assert [path.name for path in logs.iterdir()] == [moved.getRunId()]  # <logDir>/<run>, its event files in it
    assert any(logs.joinpath(moved.getRunId()).iterdir())
    assert moved.getLogDir() == str(logs)
    DBNClassifier(storeUrl="file://" + str(tmp_path / "store2"), logDir="", **settings).fit(train)
    assert list(work.iterdir()) == []  # no sparkdbn-logs in the working folder, by either fit
    # Without a storeUrl a fit writes none unless logDir is set (the default folder is not written).
    DBNClassifier(**settings).fit(train)
    assert list(work.iterdir()) == []


def test_vectors_are_label_indexed_for_non_negative_integer_labels_of_a_sane_width():
    from node.serve._classes import MAX_LABEL_INDEXED_WIDTH, label_indexed_width, spread_to_labels

    assert label_indexed_width(np.array([30, 70])) == 71
    assert label_indexed_width(np.array([30.0, 70.0])) == 71  # whole doubles, as Spark's labels are
    assert label_indexed_width(np.arange(3)) == 3
    assert label_indexed_width(np.arange(2 * MAX_LABEL_INDEXED_WIDTH)) == 2 * MAX_LABEL_INDEXED_WIDTH  # no gaps
    for classes in (np.array(["a", "b"]), np.array([-1, 1]), np.array([0.5, 1.0]), np.array([0, 10**9])):
        assert label_indexed_width(classes) is None, classes
    proba = np.array([[0.25, 0.75], [1.0, 0.0]])
    np.testing.assert_array_equal(spread_to_labels(proba, np.array([1, 3]), 4),
                                  [[0.0, 0.25, 0.0, 0.75], [0.0, 1.0, 0.0, 0.0]])


def test_a_classifier_saved_before_log_dir_existed_loads_with_its_default(spark, tmp_path):
    import json

    classifier = DBNClassifier(hiddenLayerSizes=[8], finetuneEpochs=2)
    classifier.write().save(str(tmp_path / "estimator"))
    part, = (tmp_path / "estimator" / "metadata").glob("part-*")
    metadata = json.loads(part.read_text())
    for section in ("paramMap", "defaultParamMap"):  # as written before logDir was a param
        metadata[section].pop("logDir", None)
    part.write_text(json.dumps(metadata))
    for checksum in (tmp_path / "estimator" / "metadata").glob(".*.crc"):
        checksum.unlink()
    loaded = DBNClassifier.load(str(tmp_path / "estimator"))
    assert loaded.getLogDir() == "sparkdbn-logs" and loaded.getHiddenLayerSizes() == [8]
