"""Runs side by side: two fits of one Spark session at once (a thread each), sharing its Python workers."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import numpy as np
import pytest
from crash_store import ASYNC_HARNESS_TOLERANCE, HARNESS_TRAINED, harness_model, harness_settings

import node
import rbm
from node._contract import NodeConfig
from node.executor import _tasks
from node.run import run_model_arrays

pytestmark = pytest.mark.slow


class RecordedNode:
    """A stand-in for ExecutorNode in a worker's registry: started and stopped when told."""

    def __init__(self, config: NodeConfig) -> None:
        self.config, self.device, self.stopped = config, None, False

    def start(self) -> "RecordedNode":
        return self

    def stop(self) -> None:
        self.stopped = True


def a_config(run: str, fit_id: str = "f1") -> NodeConfig:
    return NodeConfig(run=run, fit_id=fit_id, store_url="file:///tmp/s", store_retry_timeout_s=30.0,
                      key=b"\x00\x01" * 16, spec=rbm.DBN(hidden_layer_sizes=(8,)).to_spec(), feature_shape=(16,),
                      classes=(0, 1), seed=0, fanout=None, merge_alpha=0.5, keep_versions=3,
                      anti_entropy_interval_s=2.0, peer_refresh_interval_s=0.5, flush_timeout_s=60.0)


@pytest.fixture
def worker_registry(monkeypatch):
    """The worker's node registry, empty, with stand-in nodes."""
    monkeypatch.setattr(_tasks, "ExecutorNode", RecordedNode)
    monkeypatch.setattr(_tasks, "settle_worker_heap", lambda: None)
    monkeypatch.setattr(_tasks, "_nodes", {})
    monkeypatch.setattr(_tasks, "_last_used", {}, raising=False)
    return monkeypatch


def test_a_worker_taking_turns_between_two_runs_keeps_both_runs_nodes(worker_registry):
    a, b = _tasks._node_for(a_config("A")), _tasks._node_for(a_config("B"))
    assert _tasks._node_for(a_config("A")) is a and _tasks._node_for(a_config("B")) is b
    assert not a.stopped and not b.stopped


def test_a_worker_stops_an_earlier_fit_of_the_run_and_a_run_left_idle_but_not_the_runs_in_use(worker_registry):
    a, b = _tasks._node_for(a_config("A")), _tasks._node_for(a_config("B"))
    refit = _tasks._node_for(a_config("A", fit_id="f2"))
    assert refit is not a and a.stopped and not b.stopped  # the run's earlier fit goes, the other run stays
    worker_registry.setattr(_tasks, "IDLE_NODE_STOP_S", 0.0)  # every node of another run has been idle long enough
    c = _tasks._node_for(a_config("C"))
    assert b.stopped and refit.stopped and not c.stopped and list(_tasks._nodes) == ["C"]


def read_while_training(store_url: str, run: str) -> str:
    """What reading ``run``'s model says now: "no run yet", "still training" or "done" (else the error itself)."""
    try:
        node.load_run_model(node.open_run(store_url, run))
    except node.InputDataError as error:
        return "no run yet" if "there is no run" in str(error) else repr(error)
    except node.TrainingError as error:
        return "still training" if "it is still training" in str(error) else repr(error)
    except Exception as error:  # noqa: BLE001 - anything else is what the test reports
        return repr(error)
    return "done"


def test_two_fits_of_one_session_at_once_train_both_runs_each_node_entering_each_phase_once(spark, digits, tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    settings = harness_settings(mode="async", partitions=4, log_dir=str(tmp_path / "tensorboard"))
    alone = node.Trainer(spark, store_url, run_id="alone", **settings).fit(harness_model(), digits.X_train,
                                                                          digits.y_train)
    alone_accuracy = alone.score(digits.X_test, digits.y_test)
    trainers = {run: node.Trainer(spark, store_url, run_id=run, **settings) for run in ("A", "B")}
    models, errors = {}, []

    def fit(run: str) -> None:
        try:
            models[run] = trainers[run].fit(harness_model(), digits.X_train, digits.y_train)
        except BaseException as error:  # handed to the test's thread
            errors.append(error)

    threads = [threading.Thread(target=fit, args=(run,)) for run in trainers]
    for thread in threads:
        thread.start()
    answers = set()  # what a reader of each run is told while they train
    while any(thread.is_alive() for thread in threads):
        for run in trainers:
            answers.add(read_while_training(store_url, run))
        time.sleep(0.5)  # a reader asking now and then, as `sparkdbn evaluate --run` would
    for thread in threads:
        thread.join(timeout=600)
    assert not errors and sorted(models) == ["A", "B"], errors
    assert "still training" in answers and answers <= {"no run yet", "still training", "done"}, answers

    records = {run: [record for summary in trainer.history_ for record in summary["records"]]
               for run, trainer in trainers.items()}
    spans = {run: (min(r["time"] for r in rows), max(r["time"] for r in rows))
             for run, rows in records.items()}
    assert spans["A"][0] < spans["B"][1] and spans["B"][0] < spans["A"][1]  # the two trained at the same time
    # In the session's Python workers, taking turns (a worker that ran a task of B stopped its node of A before).
    for run, rows in records.items():
        assert {r["run"] for r in rows} == {run}
        entered = Counter((r["node"], r["phase"]) for r in rows if r["entered_from"])
        assert max(entered.values()) == 1, (run, entered)  # no node was stopped by the other run's tasks and restarted
        view = node.open_run(store_url, run)
        assert view.record["status"] == "done"
        accuracy = node.load_run_model(view).score(digits.X_test, digits.y_test)
        assert accuracy >= HARNESS_TRAINED and abs(accuracy - alone_accuracy) <= ASYNC_HARNESS_TOLERANCE, run
    assert sorted(p.name for p in (tmp_path / "tensorboard").iterdir()) == ["A", "B", "alone"]


def test_two_fits_starting_their_mlflow_runs_together_both_log_into_the_one_experiment(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    from node.watch._mlflow_log import EXPERIMENT, MlflowLog

    uri = str(tmp_path / "mlruns")
    first = MlflowLog(uri, "A", {"a": 1})  # creates the experiment
    looked_up = MlflowClient.get_experiment_by_name
    lookups = []

    def late_lookup(client, name):
        lookups.append(name)  # the second fit's first look came before the first fit created the experiment
        return None if len(lookups) == 1 else looked_up(client, name)

    monkeypatch.setattr(MlflowClient, "get_experiment_by_name", late_lookup)
    second = MlflowLog(uri, "B", {"a": 1})
    monkeypatch.undo()
    client = MlflowClient(tracking_uri=first.tracking_uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(run.info.run_name for run in runs) == ["A", "B"]
    assert {first.run_id, second.run_id} == {run.info.run_id for run in runs}


def test_a_fits_spark_jobs_run_in_the_scheduler_pool_of_the_thread_that_fits(spark):
    from node.driver._progress import SparkJob

    def scheduler_pool(_elements):  # shipped by value: the executors cannot import this test module
        from pyspark import TaskContext

        yield TaskContext.get().getLocalProperty("spark.scheduler.pool")

    sc = spark.sparkContext
    sc.setLocalProperty("spark.scheduler.pool", "notebook-a")
    try:
        job = SparkJob(sc, sc.parallelize([0], 1).mapPartitions(scheduler_pool), "sparkdbn-pool-test", "pool")
        assert job.wait() == ["notebook-a"]
    finally:
        sc.setLocalProperty("spark.scheduler.pool", None)


def test_a_reader_that_read_the_run_before_a_refit_stored_its_lost_model_again_gets_that_model(spark, digits,
                                                                                               tmp_path):
    # A done run fitted again stores its model again only when the stored one is gone (a done run whose model
    # is there is left as it was): the new file is of the refit's generation, under another path.
    store_url = "file://" + str(tmp_path / "store")
    def fit() -> None:
        node.Trainer(spark, store_url, run_id="read-while-refit", **harness_settings()).fit(
            harness_model(), digits.X_train, digits.y_train)

    fit()
    before = node.open_run(store_url, "read-while-refit")  # e.g. `sparkdbn predict --run` starting
    lost = tmp_path / "store" / before.done_record["model"]["path"]
    lost.unlink()  # an operator removed it, a disk lost it
    fit()  # finishes before that reader reads the model file
    after = node.open_run(store_url, "read-while-refit")
    assert before.done_record["model"]["path"] != after.done_record["model"]["path"] and not lost.exists()
    served = run_model_arrays(before)
    refitted = run_model_arrays(after)
    assert served.keys() == refitted.keys()
    assert all(np.array_equal(served[name], refitted[name]) for name in refitted)
    assert node.load_run_model(before).score(digits.X_test, digits.y_test) >= HARNESS_TRAINED


def test_a_second_fit_of_a_run_from_another_thread_of_the_same_driver_is_refused_and_the_first_finishes(
        spark, digits, tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    settings = harness_settings(lease_timeout_s=8.0)
    refused = threading.Event()
    # The first fit holds the run, renewing its lease, until the second one has been refused.
    first = node.Trainer(spark, store_url, run_id="twice", on_epoch=lambda summary: refused.wait(timeout=120),
                         **settings)
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(model=first.fit(harness_model(), digits.X_train,
                                                                            digits.y_train)))
    thread.start()
    try:
        lease = tmp_path / "store" / "runs" / "twice" / "lease"
        deadline = time.monotonic() + 120
        while not (lease.exists() and any(lease.iterdir())):  # until the first fit holds the run
            assert thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(node.LeaseHeldError, match=r"run 'twice' is being trained by another driver \(host .*, "
                                                      rf"pid {os.getpid()}, fit "):
            node.Trainer(spark, store_url, run_id="twice", **settings).fit(harness_model(), digits.X_train,
                                                                           digits.y_train)
        assert thread.is_alive()  # refused while the first trains, not after it
    finally:
        refused.set()
        thread.join(timeout=600)
    record = node.open_run(store_url, "twice").record
    assert record["status"] == "done" and record["attempts"] == 1
    assert outcome["model"].score(digits.X_test, digits.y_test) >= HARNESS_TRAINED
