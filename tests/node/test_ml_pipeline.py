"""The Spark ML pair: DBNClassifier trains on Spark inside a Pipeline; the model saves, loads and predicts the same."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from pyspark.ml.util import DefaultParamsReader
from support.numerics import forward_rtol, near_ties

import rbm
from node._errors import InputDataError
from node.serve._ml import DBNClassificationModel, DBNClassifier
from node.watch._report import render_report
from rbm.datasets import load_digits01

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def digits():
    return load_digits01()


def _scalar_frame(spark, X: np.ndarray, y: np.ndarray):
    """A DataFrame of one double column per pixel (what VectorAssembler users start from)."""
    columns = [f"p{k}" for k in range(X.shape[1])]
    rows = [tuple(float(v) for v in x) + (float(label),) for x, label in zip(X, y)]
    return spark.createDataFrame(rows, columns + ["label"]), columns


def _sorted_predictions(frame) -> tuple[np.ndarray, np.ndarray]:
    rows = frame.select("row", "prediction", "probability").collect()
    rows.sort(key=lambda row: row["row"])
    return np.array([row["prediction"] for row in rows]), np.array([row["probability"].toArray() for row in rows])


def test_classifier_trains_in_a_pipeline_and_the_saved_pipeline_predicts_identically(spark, digits, tmp_path):
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    train, columns = _scalar_frame(spark, digits.X_train, digits.y_train)
    test, _ = _scalar_frame(spark, digits.X_test, digits.y_test)
    test = test.withColumn("row", F.monotonically_increasing_id())
    store_url = "file://" + str(tmp_path / "store")
    classifier = DBNClassifier(
        featuresCol="pixels", hiddenLayerSizes=[32], pretrainEpochs=1, finetuneEpochs=3, batchSize=10,
        learningRate=0.05, finetuneLearningRate=0.1, storeUrl=store_url,
        numPartitions=2, progress=False, seed=3)
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=columns, outputCol="pixels"), classifier])
    fitted = pipeline.fit(train)

    model = fitted.stages[-1]
    assert isinstance(model, DBNClassificationModel)
    assert model.getFeaturesCol() == "pixels" and model.getRunId()
    predictions = fitted.transform(test).cache()
    prediction, probability = _sorted_predictions(predictions)
    X_sorted = digits.X_test  # monotonically_increasing_id keeps the row order
    # The executors predict in batches of their own, the model here all rows at once: float32 probabilities
    # through dot products of 64 and 32 terms, so within (64 + 32) eps relative, and a row whose two best
    # classes are that close may be classified either way (measured: none of 450).
    rtol = forward_rtol(64, 32)
    expected_probability = model.model.predict_proba(X_sorted)
    np.testing.assert_allclose(probability, expected_probability, rtol=rtol, atol=1e-7)  # atol: float32 rounding of 1
    ties = near_ties(expected_probability, rtol)
    assert not np.any((prediction != model.model.predict(X_sorted)) & ~ties)
    accuracy = MulticlassClassificationEvaluator(metricName="accuracy").evaluate(predictions)
    assert accuracy == pytest.approx(model.model.score(digits.X_test, digits.y_test), rel=1e-9, abs=ties.mean())
    assert accuracy > 0.8  # trained by the decentralized nodes, it really learned
    log_loss = MulticlassClassificationEvaluator(metricName="logLoss").evaluate(predictions)
    # From the same float64 probabilities, summed in another order: far within 1e-9.
    expected_log_loss = -np.mean(np.log(np.maximum(probability[np.arange(len(prediction)), digits.y_test], 1e-15)))
    assert log_loss == pytest.approx(expected_log_loss, rel=1e-9)
    predictions.unpersist()

    fitted.write().overwrite().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    reloaded = loaded.stages[-1]
    assert isinstance(reloaded, DBNClassificationModel)
    assert reloaded.uid == model.uid and reloaded.getHiddenLayerSizes() == [32]
    again, again_probability = _sorted_predictions(loaded.transform(test))
    # Exact: the same weights on the same partitions in the same batches, the same operations.
    np.testing.assert_array_equal(again, prediction)
    np.testing.assert_array_equal(again_probability, probability)

    # The run it trained left metrics and a model in the store: the report renders all three plots.
    plots = render_report(store_url, model.getRunId(), str(tmp_path / "plots"))
    assert [path.rsplit("/", 1)[-1] for path in plots] == ["training_curves.png", "merges_staleness.png", "filters.png"]
    assert all(os.path.getsize(path) > 10_000 for path in plots)

    classifier.write().overwrite().save(str(tmp_path / "estimator"))
    estimator = DBNClassifier.load(str(tmp_path / "estimator"))
    assert estimator.uid == classifier.uid
    assert {p.name: v for p, v in estimator.extractParamMap().items()} == {
        p.name: v for p, v in classifier.extractParamMap().items()}


def test_a_model_saved_alone_loads_with_its_params_and_exact_weights(spark, digits, tmp_path):
    net = rbm.ConvNet(layers=[{"type": "flatten"}, {"type": "dense", "units": 16}], input_shape=(1, 8, 8),
                      n_classes=10, epochs=2, learning_rate=0.1, random_state=1).fit(digits.X_train, digits.y_train)
    model = DBNClassificationModel(net).setPredictionCol("digit").setProbabilityCol("").setRawPredictionCol("")
    model.save(str(tmp_path / "model"))
    loaded = DBNClassificationModel.load(str(tmp_path / "model"))
    assert loaded.getPredictionCol() == "digit" and loaded.getProbabilityCol() == ""
    # Named by its public module, which loading imports: not the private one, which may move.
    part, = (tmp_path / "model" / "metadata").glob("part-*")
    metadata = json.loads(part.read_text())
    assert metadata["class"] == "node.DBNClassificationModel"
    old = tmp_path / "saved-before"  # as saved before: still loads, by the class its metadata names (a Pipeline's way)
    shutil.copytree(tmp_path / "model", old, ignore=shutil.ignore_patterns("*.crc"))  # Hadoop's checksums
    (old / "metadata" / part.name).write_text(json.dumps({**metadata, "class": "node.serve._ml.DBNClassificationModel"}))
    for path in (tmp_path / "model", old):
        assert isinstance(DefaultParamsReader.loadParamsInstance(str(path), spark.sparkContext), DBNClassificationModel)
    for name, value in net.parameters().items():
        np.testing.assert_array_equal(loaded.model.parameters()[name], value)

    df = spark.createDataFrame([(k, x.astype(float).tolist()) for k, x in enumerate(digits.X_test[:50])], ["row", "features"])
    out = loaded.transform(df)
    assert out.columns == ["row", "features", "digit"]  # probability and raw prediction columns left out
    digits_predicted = np.array([row["digit"] for row in out.orderBy("row").collect()])
    # As the net predicts alone, but for a row whose two best classes are within float32 rounding (64 + 16
    # term dot products) of each other: the executors' batches may round it the other way.
    ties = near_ties(net.predict_proba(digits.X_test[:50]), forward_rtol(64, 16))
    assert not np.any((digits_predicted != net.predict(digits.X_test[:50])) & ~ties)


def test_transform_with_a_missing_features_column_names_it(spark, digits):
    net = rbm.ConvNet(layers=[{"type": "flatten"}, {"type": "dense", "units": 8}], input_shape=(1, 8, 8),
                      n_classes=10, epochs=1, random_state=2).fit(digits.X_train[:100], digits.y_train[:100])
    df = spark.createDataFrame([([0.0] * 64,)], ["pixels"])
    with pytest.raises(InputDataError, match="no features column 'features'"):
        DBNClassificationModel(net).transform(df)
    with pytest.raises(InputDataError, match="does not fit the model"):
        DBNClassificationModel(net).setFeaturesCol("pixels").transform(spark.createDataFrame([([0.0] * 10,)], ["pixels"]))


def test_fitting_on_a_frame_without_the_features_column_fails_before_training(spark, tmp_path):
    df = spark.createDataFrame([([0.0] * 64, 1.0), ([1.0] * 64, 0.0)], ["pixels", "label"])
    store_url = "file://" + str(tmp_path / "store")
    with pytest.raises(InputDataError, match="no features column 'features'.*pixels"):
        DBNClassifier(hiddenLayerSizes=[4], storeUrl=store_url, progress=False).fit(df)
    with pytest.raises(InputDataError, match="hiddenLayerSizes must be a non-empty list"):
        DBNClassifier(hiddenLayerSizes=[], featuresCol="pixels", storeUrl=store_url, progress=False).fit(df)


def test_the_estimators_model_is_a_dbn_with_its_defaults_and_the_epochs_it_trains():
    # Its defaults were a minibatch of 32 at rate 0.05, not DBN's 10 at 0.1: the README's pipeline trained with
    # fewer steps than the nodes need, warning at every epoch, to 0.90 held out (0.96 with DBN's minibatch).
    # And the fitted model's params said DBN's 10 + 100 epochs, not those it trained.
    model = DBNClassifier(pretrainEpochs=2, finetuneEpochs=7).build_model()
    defaults = rbm.DBN().get_params()
    for name in ("batch_size", "pretrain_learning_rate", "finetune_learning_rate"):
        assert model.get_params()[name] == defaults[name], name
    assert (model.pretrain_epochs, model.finetune_epochs) == (2, 7)


def test_classifier_validates_on_a_held_out_share_or_the_rows_a_column_marks_and_stops_early(spark, digits, tmp_path):
    # DBNClassifier had no validation: Trainer's validation_fraction and early_stopping were out of its reach.
    import node
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([(row.tolist(), int(label)) for row, label in zip(digits.X_train, digits.y_train)],
                                  ["features", "label"]).withColumn("row", F.monotonically_increasing_id())
    store_url = "file://" + str(tmp_path / "store")
    settings = dict(hiddenLayerSizes=[16], pretrainEpochs=1, finetuneEpochs=12, finetuneLearningRate=0.5,
                    storeUrl=store_url, numPartitions=2, progress=False, seed=0)
    held_out = DBNClassifier(validationFraction=0.25, earlyStoppingPatience=1, **settings).fit(frame)
    record = node.open_run(store_url, held_out.getRunId()).record
    stopping = record["steps"]["finetune"]["early_stopping"]
    assert stopping["metric"] == "val_loss" and stopping["best"] is not None
    assert record["settings"]["validation_fraction"] == 0.25
    assert record["data"]["n_samples"] < 0.8 * frame.count()  # the held-out quarter did not train

    marked = frame.withColumn("is_validation", F.col("row") % 5 == 0)
    flagged = DBNClassifier(validationIndicatorCol="is_validation", **settings).fit(marked)
    record = node.open_run(store_url, flagged.getRunId()).record
    assert record["data"]["n_samples"] == marked.filter(~F.col("is_validation")).count()
    assert record["steps"]["finetune"]["epochs_done"] == 12  # no patience: every epoch, validated
    with pytest.raises(InputDataError, match="validationIndicatorCol 'row' must be boolean"):
        DBNClassifier(validationIndicatorCol="row", **settings).fit(marked)
    with pytest.raises(InputDataError, match="validationFraction or validationIndicatorCol, not both"):
        DBNClassifier(validationIndicatorCol="is_validation", validationFraction=0.1, **settings).fit(marked)


@pytest.mark.parametrize("settings, message", [
    (dict(trainingMode="sync", earlyStoppingPatience=2, validationFraction=0.2),
     "earlyStoppingPatience ends a phase between two epochs, and trainingMode 'sync' trains a phase in one Spark "
     "job .*use trainingMode='async'"),
    (dict(trainingMode="rounds"), "trainingMode must be one of async, sync, sharing, got 'rounds'"),
    (dict(earlyStoppingPatience=2), "earlyStoppingPatience watches the validation loss: set validationFraction"),
])
def test_early_stopping_the_fit_cannot_train_is_refused_in_the_params_own_names(spark, settings, message):
    # The Trainer's message named its own arguments (mode=, early_stopping), which a Spark ML user never wrote.
    frame = spark.createDataFrame([([0.0, 1.0], 0), ([1.0, 0.0], 1)], ["features", "label"])
    with pytest.raises(ValueError, match=message):
        DBNClassifier(progress=False, **settings).fit(frame)
