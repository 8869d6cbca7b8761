"""pyspark.ml's classifier columns: pyspark's own evaluators and tuning take sparkdbn's output unchanged."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from sklearn.metrics import log_loss, roc_auc_score

import rbm
from node import DBNClassifier, predict_dataframe
from rbm.datasets import load_digits01

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def digits():
    return load_digits01()


def _frame(spark, X: np.ndarray, y: np.ndarray):
    from pyspark.ml.linalg import Vectors

    return spark.createDataFrame([(Vectors.dense(x.astype(float)), float(label)) for x, label in zip(X, y)],
                                 ["features", "label"])


def test_predict_dataframe_gives_vectors_and_a_double_that_pyspark_evaluators_score_as_scikit_learn(spark, digits):
    from pyspark.ml.evaluation import BinaryClassificationEvaluator, MulticlassClassificationEvaluator
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.types import DoubleType

    model = rbm.DBN(hidden_layer_sizes=(32,), pretrain_epochs=2, finetune_epochs=5, random_state=0)
    model.fit(digits.X_train, digits.y_train)
    scored = predict_dataframe(model, _frame(spark, digits.X_test, digits.y_test).coalesce(1)).cache()
    types = {field.name: field.dataType for field in scored.schema.fields}
    assert isinstance(types["rawPrediction"], VectorUDT) and isinstance(types["probability"], VectorUDT)
    assert isinstance(types["prediction"], DoubleType)
    proba = model.predict_proba(digits.X_test)
    accuracy = MulticlassClassificationEvaluator(metricName="accuracy").evaluate(scored)
    assert accuracy == pytest.approx(model.score(digits.X_test, digits.y_test))
    assert MulticlassClassificationEvaluator(metricName="logLoss").evaluate(scored) == pytest.approx(
        log_loss(digits.y_test, proba, labels=np.arange(10)), rel=1e-4)
    scored.unpersist()

    # Two classes: BinaryClassificationEvaluator ranks rows by rawPrediction[1], as roc_auc_score by p(1).
    parity = rbm.DBN(hidden_layer_sizes=(16,), pretrain_epochs=1, finetune_epochs=2, random_state=0)
    parity.fit(digits.X_train, digits.y_train % 2)
    y_test = digits.y_test % 2
    named = predict_dataframe(parity, _frame(spark, digits.X_test, y_test), raw_prediction_col="margin",
                              probability_col="p", prediction_col="guess")
    assert named.columns == ["features", "label", "margin", "p", "guess"]
    auc = BinaryClassificationEvaluator(rawPredictionCol="margin", metricName="areaUnderROC").evaluate(named)
    expected = roc_auc_score(y_test, parity.predict_proba(digits.X_test)[:, 1])
    assert auc == pytest.approx(expected, abs=1e-3) and 0.5 < auc <= 1.0


def test_cross_validating_dbn_classifier_leaves_nothing_behind(spark, digits, tmp_path, monkeypatch):
    from pyspark.ml.evaluation import BinaryClassificationEvaluator
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    keys = os.path.join(os.environ["XDG_CONFIG_HOME"], "sparkdbn")
    keys_before = sorted(os.listdir(keys)) if os.path.isdir(keys) else []
    temporaries = tmp_path / "tmp"  # this test's own temporary folder: other test workers fit at the same time
    temporaries.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporaries))

    small = digits.y_train < 2  # a two-class problem: 0 against 1
    train = _frame(spark, digits.X_train[small][:200], digits.y_train[small][:200])
    classifier = DBNClassifier(pretrainEpochs=1, finetuneEpochs=1, batchSize=10, numPartitions=2, progress=False)
    grid = ParamGridBuilder().addGrid(classifier.hiddenLayerSizes, [[8], [16]]).build()
    tuning = CrossValidator(estimator=classifier, estimatorParamMaps=grid, numFolds=2, seed=1,
                            evaluator=BinaryClassificationEvaluator(metricName="areaUnderROC"))
    best = tuning.fit(train)
    assert len(best.avgMetrics) == 2 and all(0.5 < metric <= 1.0 for metric in best.avgMetrics)
    test = digits.y_test < 2
    scored = best.transform(_frame(spark, digits.X_test[test], digits.y_test[test]))
    assert BinaryClassificationEvaluator().evaluate(scored) > 0.9

    assert list(work.iterdir()) == []  # no store, no TensorBoard logs, nothing in the working folder
    assert list(temporaries.iterdir()) == []  # the fits' temporary stores are gone
    assert (sorted(os.listdir(keys)) if os.path.isdir(keys) else []) == keys_before  # no run key kept
