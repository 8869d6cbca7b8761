"""A model of the user's own on the distributed trainer (docs/how-it-works.md, "Your own model").

``_custom_model.SoftmaxRegression`` implements only the required seam plus ``predict``/``score`` and is
registered with :func:`rbm.register_model`.  The executors' Python workers do not have ``tests/node``
on their path: the test ships the module with ``SparkContext.addPyFile``, as a user ships theirs, and
the nodes find the class because the spec names its module (``rbm.model_spec``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from _custom_model import SoftmaxRegression
from support.sync_rounds import rounds_when_removed

import node
import node.driver._fit
import rbm

EPOCHS = 8


@pytest.fixture
def shipped(spark):
    spark.sparkContext.addPyFile(str(Path(__file__).with_name("_custom_model.py")))
    return spark


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_model_of_ones_own_trains_on_two_nodes_is_recorded_served_and_refitted(shipped, store_url, digits, mode):
    X, y, X_test, y_test = digits
    single = SoftmaxRegression(epochs=EPOCHS).fit(X, y).score(X_test, y_test)

    settings = dict(run_id=mode, mode=mode, epochs=EPOCHS, partitions=4, progress=False,
                    validation_fraction=0.1 if mode == "sync" else None)  # the executors validate it too
    trainer = node.Trainer(shipped, store_url, **settings)
    model = trainer.fit(SoftmaxRegression(epochs=EPOCHS), X, y)
    if mode == "sync":
        assert trainer.history_[-1]["validation"]["val_accuracy"] >= 0.8
    accuracy = model.score(X_test, y_test)
    # One process: 0.944; two async nodes: 0.928 (they average their progress, so move less per epoch).
    assert single >= 0.9
    assert accuracy >= single - 0.05, (accuracy, single)

    view = node.open_run(store_url, mode)
    record = view.record
    assert record["status"] == "done"
    assert record["spec"]["kind"] == "test-softmax" and record["spec"]["module"] == "_custom_model"
    saved = rbm.load_model(store_url.removeprefix("file://") + "/" + record["model"]["path"])
    np.testing.assert_array_equal(saved.predict(X_test), model.predict(X_test))
    np.testing.assert_array_equal(node.load_run_model(view).predict(X_test), model.predict(X_test))

    report = node.evaluate(model, (X_test, y_test), spark=shipped)  # the executors rebuild it from its file
    assert report.accuracy == pytest.approx(accuracy, abs=1e-9)
    frame = shipped.createDataFrame([(row.tolist(),) for row in X_test], ["features"])
    predicted = node.predict_dataframe(model, frame).select("prediction").toPandas()["prediction"].to_numpy()
    np.testing.assert_array_equal(predicted, model.predict(X_test))

    again = node.Trainer(shipped, store_url, **settings).fit(SoftmaxRegression(epochs=EPOCHS), X, y)
    np.testing.assert_array_equal(again.predict(X_test), model.predict(X_test))


def test_a_spec_names_the_module_a_fresh_process_imports_before_the_lookup(tmp_path, monkeypatch):
    (tmp_path / "_fresh_model_module.py").write_text(
        "import rbm\n"
        "@rbm.register_model('test-fresh')\n"
        "class Fresh:\n"
        "    def __init__(self, size):\n"
        "        self.size = size\n"
        "    @classmethod\n"
        "    def from_spec(cls, spec):\n"
        "        return cls(spec['size'])\n"
        "    def spec_for_batch_size(self, batch_size):\n"
        "        return {'kind': 'test-fresh', 'size': batch_size}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "_fresh_model_module" not in sys.modules
    try:
        model = rbm.model_from_spec({"kind": "test-fresh", "module": "_fresh_model_module", "size": 3})
        assert type(model).__module__ == "_fresh_model_module" and model.size == 3
        # a node's smaller-minibatch replica (the model's own spec_for_batch_size) still names the module
        assert rbm.spec_for_batch_size({"kind": "test-fresh", "module": "_fresh_model_module", "size": 3}, 2) == \
            {"kind": "test-fresh", "module": "_fresh_model_module", "size": 2}
    finally:
        sys.modules.pop("_fresh_model_module", None)
    with pytest.raises(ValueError, match="'_no_such_model_module'.*addPyFile"):
        rbm.model_from_spec({"kind": "test-missing", "module": "_no_such_model_module"})


class _DefinedInMain(SoftmaxRegression):
    def to_spec(self) -> dict:
        return {**super().to_spec(), "kind": "test-in-main"}


_DefinedInMain.__module__ = "__main__"  # as a class typed into a script or a notebook
rbm.register_model("test-in-main")(_DefinedInMain)


def test_a_model_class_in_main_is_refused_at_fit_start(spark, store_url, digits, monkeypatch):
    def no_job(*args, **kwargs):
        raise AssertionError("a Spark job started")

    monkeypatch.setattr(node.driver._fit, "start_python_workers", no_job)
    with pytest.raises(TypeError, match=r"'test-in-main'.*__main__.*spark\.submit\.pyFiles.*addPyFile.*install"):
        node.Trainer(spark, store_url, run_id="main", epochs=1, progress=False).fit(_DefinedInMain(), digits.X_train,
                                                                                     digits.y_train)


class _NoTraining(SoftmaxRegression):
    train_partition = None  # type: ignore[assignment]
    set_minibatch_hook = None  # type: ignore[assignment]


def test_a_model_missing_seam_methods_is_refused_naming_them(spark, store_url, digits, monkeypatch):
    monkeypatch.setattr(node.driver._fit, "start_python_workers", lambda *a, **k: pytest.fail("a Spark job started"))
    with pytest.raises(TypeError, match=r"_NoTraining .* lacks train_partition, set_minibatch_hook "):
        node.Trainer(spark, store_url, run_id="seam", epochs=1, progress=False).fit(_NoTraining(), digits.X_train,
                                                                                    digits.y_train)


@rbm.register_model("test-saving")
class _SavesItself(SoftmaxRegression):
    def to_spec(self) -> dict:
        return {**super().to_spec(), "kind": "test-saving"}

    def save(self, path) -> None:  # a format of its own, which rbm.load_model cannot read
        np.save(path, self.W)


def test_a_model_of_ones_own_is_written_from_the_seam_even_with_a_save_of_its_own(digits, tmp_path):
    model = _SavesItself(epochs=2).fit(digits.X_train, digits.y_train)
    rbm.save_trained(model, tmp_path / "model.npz")
    back = rbm.load_model(tmp_path / "model.npz")
    assert type(back) is _SavesItself and back.n_features_in_ == 64
    np.testing.assert_array_equal(back.classes_, model.classes_)
    np.testing.assert_array_equal(back.predict(digits.X_test), model.predict(digits.X_test))


def test_a_kind_another_class_holds_is_refused_and_the_holder_keeps_it():
    class Impostor(SoftmaxRegression):
        pass

    for kind, holder in (("dbn", rbm.DBN), ("test-softmax", SoftmaxRegression)):  # rbm's own kind, a user's
        with pytest.raises(ValueError, match=rf"register_model\('{kind}'\): the kind belongs to .*{holder.__qualname__}"):
            rbm.register_model(kind)(Impostor)
        assert type(rbm.model_from_spec(holder().to_spec())) is holder


def test_registering_the_same_class_again_as_a_reimported_module_does_is_allowed():
    assert rbm.register_model("test-softmax")(SoftmaxRegression) is SoftmaxRegression
    with pytest.raises(ValueError, match="non-empty string kind"):
        rbm.register_model("")


def test_in_sync_mode_an_error_of_the_model_fails_the_fit_once_and_spark_s_later_attempts_stop_at_once(
        shipped, store_url, digits, monkeypatch):
    # The first attempt records an error that is no lost node: Spark's own runs of the task again raise it at
    # once, and the driver raises it instead of running the job again (as it does for a lost node).
    from _custom_model import BrokenSoftmaxRegression

    X, y, _X_test, _y_test = digits
    trainer = node.Trainer(shipped, store_url, run_id="broken", mode="sync", epochs=3, partitions=4, progress=False)
    rounds = rounds_when_removed(monkeypatch, "broken")
    with pytest.raises(node.TrainingError, match=r"^sync, run broken, phase train: RuntimeError: the user's model broke$"):
        trainer.fit(BrokenSoftmaxRegression(partitions_before_failing=3), X, y)
    jobs = rounds["train"]
    assert len(jobs) == 1 and list(jobs[0]) == ["0"]  # no second attempt
    assert "failed.json" in jobs[0]["0"]
