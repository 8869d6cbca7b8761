"""A fit hands on values: its spec is final before a model is built from it, its facts are frozen once its
lease is held, and its watch says what the record should say instead of writing into it."""

import dataclasses
import time
from types import SimpleNamespace

import numpy as np
import pytest

import node
import rbm
import storage
from node.driver import Fit, TrainingSettings
from node.driver._fit_data import model_input
from node.driver._fit_state import FitState
from node.watch import RunWatch
from node.watch._validation import ValidationSet

KEY = b"k" * 32
ROWS = 200


def small_rbm(**settings) -> rbm.RBM:
    return rbm.RBM(n_components=16, batch_size=20, learning_rate=0.05, n_iter=1, random_state=0, **settings)


def a_fit_state() -> FitState:
    return FitState(run_id="r1", fit_id="f1", group="sparkdbn-r1-f1", store_url="file:///tmp/store", key=KEY,
                    spec={"kind": "rbm"}, driver_spec={"kind": "rbm"}, phases=("rbm",), nodes=2, feature_shape=(64,))


def test_a_fit_state_is_frozen_and_never_shows_the_run_key():
    state = a_fit_state()
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.nodes = 3  # type: ignore[misc]
    assert "kkkk" not in repr(state) and "r1" in repr(state)


def test_the_driver_copy_of_a_gpu_model_is_built_from_the_spec_with_the_settings_batch_size(spark, store_url):
    # The nodes build the spec; the driver's CPU copy (checks, validation, the saved model) must be the same model.
    fit = Fit(TrainingSettings(batch_size=7, log_dir=None), spark, store_url=store_url, model=small_rbm(device="gpu"),
              data=np.zeros((4, 64)))
    assert fit.spec["batch_size"] == 7 and fit.spec["device"] == "gpu"
    assert fit.model.to_spec()["batch_size"] == 7 and fit.model.to_spec()["device"] == "cpu"


def test_a_fit_trains_and_records_the_spec_it_was_made_with(spark, store_url, digits):
    settings = TrainingSettings(run_id="final-spec", batch_size=10, epochs={"rbm": 1}, partitions=2, progress=False,
                                log_dir=None)
    fit = Fit(settings, spark, store_url=store_url, model=small_rbm(), data=digits.X_train[:ROWS], key=KEY)
    made_with = dict(fit.spec)
    assert made_with["batch_size"] == 10  # the model's 20 is overridden before anything is built
    fit.run()
    assert fit.spec == made_with
    record = node.open_run(store_url, "final-spec", key=KEY).runs.read_record()  # the run key is derived from KEY
    assert record["status"] == "done" and record["spec"] == made_with


def test_the_record_says_a_fit_began_when_it_began_not_after_its_data_check(spark, store_url, digits, monkeypatch):
    # "created" was written after the data check, so `status` said "created 28s ago" of a fit "trained in 43 s".
    import time

    from node.driver import _fit

    checked_at = []
    check = _fit.prepare_fit_data
    monkeypatch.setattr(_fit, "prepare_fit_data", lambda *args, **kwargs: (checked_at.append(time.time()),
                                                                            check(*args, **kwargs))[1])
    from node.driver._fit_phases import LeasedFit

    end_epoch = LeasedFit._end_epoch

    def stop_once(*args, **kwargs):  # the first fit is stopped (Ctrl-C) as its epoch ends: the second resumes it
        monkeypatch.setattr(LeasedFit, "_end_epoch", end_epoch)
        raise KeyboardInterrupt

    monkeypatch.setattr(LeasedFit, "_end_epoch", stop_once)
    settings = TrainingSettings(run_id="began", epochs={"rbm": 1}, partitions=2, progress=False, log_dir=None)
    for fit_number in range(2):
        fit = Fit(settings, spark, store_url=store_url, model=small_rbm(), data=digits.X_train[:ROWS], key=KEY)
        if fit_number:
            fit.run()
        else:
            with pytest.raises(KeyboardInterrupt):
                fit.run()
        record = node.open_run(store_url, "began", key=KEY).runs.read_record()
        began = record["resumed"] if fit_number else record["created"]
        assert began == fit.started <= checked_at[-1], (fit_number, began, checked_at)


def test_the_watch_says_what_the_record_should_say_and_leaves_the_record_as_it_was(spark, store_url, digits):
    record = SimpleNamespace(data={"status": "running"})
    validation = ValidationSet(digits.X_test[:30], digits.y_test[:30], "30 held-out rows")
    spec = small_rbm().to_spec()
    watch, facts = RunWatch.start(
        settings=TrainingSettings(log_dir=None), run="r1", spec=spec, driver_spec=spec, phases=("rbm",),
        feature_shape=(64,), classes=np.arange(10), spark=spark, record=record,
        weights=storage.WeightStore(storage.open_store(store_url), "r1", KEY), validation=validation,
        model_input=model_input((64,)))
    try:
        assert facts == {"validation": {"source": "30 held-out rows", "n_samples": 30}}
        assert record.data == {"status": "running"}
        assert watch.validator is not None and watch.feature_shape == (64,)
    finally:
        watch.close()


def test_a_fit_without_validation_has_nothing_for_its_record_to_say_of_its_watch(spark, store_url):
    spec = small_rbm().to_spec()
    watch, facts = RunWatch.start(
        settings=TrainingSettings(log_dir=None), run="r1", spec=spec, driver_spec=spec, phases=("rbm",),
        feature_shape=(64,), classes=None, spark=spark, record=SimpleNamespace(data={}),
        weights=storage.WeightStore(storage.open_store(store_url), "r1", KEY), validation=None,
        model_input=model_input((64,)))
    watch.close()
    assert facts == {} and watch.validator is None


def test_a_fit_counts_its_nodes_after_waiting_for_the_slots_the_session_asked_for(spark, store_url, digits,
                                                                                   monkeypatch):
    # Counted before the executors registered, a sync fit on a cluster just up trained on 1 node of 5.
    from node.driver import _slots

    monkeypatch.setattr(_slots, "_waited", set())
    monkeypatch.setattr(_slots, "asked_task_slots", lambda master, conf: 2)
    registered = iter([1, 1, 1, 2])
    monkeypatch.setattr(_slots, "task_slots", lambda sc: next(registered, 2))
    # The wait counts from the application's start: the suite's session started a while ago.
    wait_s = time.time() - spark.sparkContext.startTime / 1000 + 20
    conf = {**dict(spark.sparkContext.getConf().getAll()),
            "spark.scheduler.maxRegisteredResourcesWaitingTime": f"{wait_s:.0f}s"}
    settings = TrainingSettings(run_id="slots", epochs={"rbm": 1}, progress=False, log_dir=None)
    fit = Fit(settings, spark, store_url=store_url, model=small_rbm(), data=digits.X_train[:ROWS], key=KEY,
              spark_conf=conf)
    assert fit.nodes == 2  # the slot that registered late counted
    monkeypatch.setattr(_slots, "_waited", set())
    monkeypatch.setattr(_slots, "task_slots", lambda sc: 1)
    conf["spark.scheduler.maxRegisteredResourcesWaitingTime"] = "300ms"
    fit = Fit(settings, spark, store_url=store_url, model=small_rbm(), data=digits.X_train[:ROWS], key=KEY,
              spark_conf=conf)
    with pytest.warns(UserWarning, match=r"1 of the 2 task slots the session asked for \(local\[2"):
        assert fit.nodes == 1
