"""The Spark ML estimator's devices: ``DBNClassifier(device=..., precision=...)`` builds its DBN for them, refuses
unknown ones before any training, fits with ``device="auto"`` on a Spark that hands out no GPU (the nodes compute
on their CPUs), and a model saved after a GPU fit loads on a machine without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

import rbm
from node._errors import InputDataError
from node.serve._ml import DBNClassificationModel, DBNClassifier
from rbm.datasets import load_digits01


@pytest.fixture(scope="module")
def digits():
    return load_digits01()


def test_the_estimator_builds_its_dbn_for_the_device_and_precision_it_is_given():
    default = DBNClassifier(hiddenLayerSizes=[8]).build_model()
    assert (default.device, default.precision) == ("cpu", "float32")
    model = DBNClassifier(hiddenLayerSizes=[8], device="auto", precision="tf32").build_model()
    assert (model.device, model.precision) == ("auto", "tf32")
    assert DBNClassifier().setParams(device="gpu").getDevice() == "gpu"


def test_an_unknown_device_or_precision_is_refused_naming_the_param():
    with pytest.raises(InputDataError, match="device must be one of cpu, gpu, auto, got 'tpu'"):
        DBNClassifier(hiddenLayerSizes=[8], device="tpu").build_model()
    with pytest.raises(InputDataError, match="precision must be one of float32, tf32, bfloat16, got 'half'"):
        DBNClassifier(hiddenLayerSizes=[8], precision="half").build_model()


def frame(spark, X: np.ndarray, y: np.ndarray):
    return spark.createDataFrame([(x.astype(float).tolist(), float(label)) for x, label in zip(X, y)],
                                 ["features", "label"])


@pytest.mark.slow
def test_an_auto_fit_on_a_spark_without_gpus_trains_on_the_cpus_and_serves(spark, digits, tmp_path):
    classifier = DBNClassifier(hiddenLayerSizes=[32], pretrainEpochs=1, finetuneEpochs=5, batchSize=10,
                               numPartitions=2, progress=False, seed=3, device="auto", precision="tf32",
                               storeUrl=f"file://{tmp_path}/store")
    fitted = classifier.fit(frame(spark, digits.X_train, digits.y_train))
    assert fitted.getDevice() == "auto" and fitted.model.device == "auto"
    rows = fitted.transform(frame(spark, digits.X_test, digits.y_test)).select("prediction", "label").collect()
    accuracy = float(np.mean([row["prediction"] == row["label"] for row in rows]))
    assert accuracy == pytest.approx(fitted.model.score(digits.X_test, digits.y_test), abs=2 / len(rows))


@pytest.mark.slow
def test_a_model_fitted_on_a_gpu_loads_and_predicts_on_a_machine_without_one(spark, digits, tmp_path):
    model = rbm.DBN(hidden_layer_sizes=(16,), pretrain_epochs=1, finetune_epochs=3, random_state=0)
    model.fit(digits.X_train, digits.y_train)
    expected = model.predict_proba(digits.X_test)
    model.set_params(device="gpu", precision="tf32")  # what a fit on GPUs hands back
    DBNClassificationModel(model).save(str(tmp_path / "saved"))
    loaded = DBNClassificationModel.load(str(tmp_path / "saved")).model
    assert (loaded.device, loaded.precision) == ("cpu", "float32")
    np.testing.assert_allclose(loaded.predict_proba(digits.X_test), expected, rtol=1e-5, atol=1e-7)
