"""Serving by the task's device: a model fitted on GPUs (its spec says ``device="gpu"``, ``precision="tf32"``) is
rebuilt on each executor where its task computes -- the GPU Spark assigned the task, else the CPU -- so CPU
executors serve it (they raised, and Spark retried, before); ``predict_dataframe`` and ``evaluate`` on a real
local Spark, whose tasks hold no GPU, give the CPU model's answers."""

from __future__ import annotations

import numpy as np
import pytest

import rbm
from node.executor import _device
from node.serve._evaluation import evaluate
from node.serve._inference import model_from_payload, model_payload, predict_dataframe
from rbm.datasets import load_digits01
from support.fake_gpu import install_fake_cupy

PROBABILITY_RTOL = 1e-5  # the same float32 weights and arithmetic on both sides: rounding only


@pytest.fixture(scope="module")
def digits():
    return load_digits01()


@pytest.fixture(scope="module")
def gpu_fitted(digits):
    """A model trained here whose spec now says it was fitted on a GPU in TF32 (what a GPU fit hands back)."""
    model = rbm.DBN(hidden_layer_sizes=(16,), pretrain_epochs=1, finetune_epochs=5, random_state=0)
    model.fit(digits.X_train, digits.y_train)
    cpu_proba = model.predict_proba(digits.X_test)
    model.set_params(device="gpu", precision="tf32")
    return model, cpu_proba


def test_a_gpu_fitted_model_serves_on_the_cpu_where_the_task_has_no_gpu(gpu_fitted, digits, monkeypatch):
    model, cpu_proba = gpu_fitted
    monkeypatch.setattr(_device, "_serving", {})
    replica = model_from_payload(model_payload(model))  # outside a task: no GPU assigned
    assert (replica.device, replica.precision) == ("cpu", "float32")
    np.testing.assert_allclose(replica.predict_proba(digits.X_test), cpu_proba, rtol=PROBABILITY_RTOL, atol=1e-7)


def test_a_task_holding_a_usable_gpu_serves_there_and_its_gpu_is_made_current(monkeypatch):
    cupy = install_fake_cupy(monkeypatch, {}, {"name": "Second"})
    monkeypatch.setattr(_device, "_serving", {})
    monkeypatch.setattr(_device, "task_gpu_addresses", lambda: ("1",))
    device = _device.serving_device()
    assert (device.kind, device.index, device.name) == ("gpu", 1, "Second") and ("use", 1) in cupy.calls
    spec = {"kind": "dbn", "device": "cpu", "precision": "float32"}
    assert _device.serving_spec(spec, device)["device"] == "gpu"
    tf32 = {"kind": "dbn", "device": "gpu", "precision": "tf32"}
    assert _device.serving_spec(tf32, device) == tf32
    monkeypatch.setattr(_device, "task_gpu_addresses", lambda: ())
    cpu = _device.serving_device()
    assert _device.serving_spec(tf32, cpu) == {"kind": "dbn", "device": "cpu", "precision": "float32"}


@pytest.mark.slow
def test_predict_dataframe_and_evaluate_serve_a_gpu_fitted_model_on_cpu_executors(spark, gpu_fitted, digits):
    model, cpu_proba = gpu_fitted
    df = spark.createDataFrame([(k, x.astype(float).tolist()) for k, x in enumerate(digits.X_test)],
                               ["id", "features"]).repartition(2)
    rows = sorted(predict_dataframe(model, df, probability_type="array").collect(), key=lambda row: row["id"])
    np.testing.assert_allclose(np.array([row["probability"] for row in rows]), cpu_proba, rtol=PROBABILITY_RTOL,
                               atol=1e-7)
    report = evaluate(model, (digits.X_test, digits.y_test), spark=spark, batch_size=50)
    single_machine = float(np.mean(model.classes_[np.argmax(cpu_proba, axis=1)] == digits.y_test))
    assert report.n_samples == len(digits.y_test) and report.accuracy == pytest.approx(single_machine, abs=2 / 450)
