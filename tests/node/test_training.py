"""Decentralized training on local[2]: two nodes match one, merge each other, resume from the store."""

from __future__ import annotations

import gc
import logging

import numpy as np
import pytest
from py4j.java_gateway import JavaObject

import node
import rbm

pytestmark = pytest.mark.slow

PARTITIONS = 4


def small_net() -> rbm.ConvNet:
    layers = [{"type": "conv", "filters": 8, "kernel": 3, "padding": 1, "activation": "relu"},
              {"type": "maxpool", "size": 2}, {"type": "dense", "units": 32, "activation": "relu"}]
    return rbm.ConvNet(layers=layers, input_shape=(1, 8, 8), n_classes=10, learning_rate=0.05, batch_size=32,
                       random_state=0)


def phases_done(record: dict) -> list[str]:
    """The phases whose result the run record says is stored and verifies, in order."""
    return [phase for phase in record["phases"] if record["steps"][phase]["result"] is not None]


def merged_from_each_other(metrics: list[dict], phase: str) -> dict[str, set[str]]:
    """node -> the other nodes whose snapshots it merged during ``phase``."""
    peers: dict[str, set[str]] = {}
    for record in metrics:
        if record["phase"] == phase:
            peers.setdefault(record["node"], set()).update(set(record["merged_from"]) - {record["node"]})
    return peers


def test_a_dbn_trained_by_two_nodes_matches_one_node_and_the_nodes_merged_each_other(spark, store_url, digits,
                                                                                     dbn_recipe):
    X, y, X_test, y_test = digits
    single_accuracy = dbn_recipe.reference_accuracy(digits)

    trainer = node.Trainer(spark, store_url, run_id="two", epochs=dbn_recipe.epochs,
                           partitions=dbn_recipe.partitions, progress=False)
    model = trainer.fit(dbn_recipe.make(), X, y)
    accuracy = model.score(X_test, y_test)
    assert single_accuracy >= 0.95
    # One process gives 0.967-0.969 over seeds 0-5; two asynchronous nodes land between 0.944 and 0.97
    # from run to run (their merges follow the scheduler; 0.944 once in about 8 full-suite runs, a
    # 2-point bound failed then), so: within 3 points; that they merged each other is checked below.
    assert abs(accuracy - single_accuracy) <= 0.03, (accuracy, single_accuracy)

    run = node.open_run(store_url, "two")
    metrics = run.runs.read_metrics()
    for phase in dbn_recipe.epochs:
        peers = merged_from_each_other(metrics, phase)
        assert len(peers) >= 2, (phase, peers)
        for name, merged in peers.items():
            assert merged, f"node {name} merged nothing from its peers in phase {phase}"
    # The saved model is the returned one.
    record = run.record
    assert record["status"] == "done" and phases_done(record) == list(dbn_recipe.epochs)
    saved = store_url.removeprefix("file://") + "/" + record["model"]["path"]
    np.testing.assert_array_equal(rbm.load_model(saved).predict(X_test), model.predict(X_test))


def test_a_conv_net_trained_by_two_nodes_from_a_dataframe_learns(spark, store_url, digits):
    X, y, X_test, y_test = digits
    import pyarrow as pa

    table = pa.table({"pixels": pa.array(list(X), type=pa.list_(pa.float32())), "digit": pa.array(y)})
    frame = spark.createDataFrame(table)  # an array<float> features column, built through Arrow
    # 16 partitions, as the epoch summary advises for this data: with 4 each node took 23 minibatch steps
    # per partition, and one run's accuracy varied more (6 runs: 0.911-0.947; once 0.797 in a full
    # suite) than with 16 (8 runs: 0.925-0.953).
    trainer = node.Trainer(spark, store_url, run_id="conv", epochs=6, partitions=16, progress=False,
                           features_col="pixels", label_col="digit")
    model = trainer.fit(small_net(), frame)
    assert model.score(X_test, y_test) >= 0.8  # chance: 0.1
    metrics = node.open_run(store_url, "conv").runs.read_metrics()
    peers = merged_from_each_other(metrics, "train")
    # At least two nodes took in each other's progress.  Not every node: Spark may deal this short fit
    # (partitions of a few ms) to more Python workers than task slots, and a node that trained only
    # before its peers first published has nothing to merge (seen with 4 nodes in full-suite runs).
    assert sum(1 for merged in peers.values() if merged) >= 2, peers
    assert [h["epoch"] for h in trainer.history_] == list(range(6))
    assert trainer.history_[-1]["loss"] < trainer.history_[0]["loss"]


def test_fitting_again_with_the_same_run_id_resumes_after_the_stored_phases(spark, store_url, digits, dbn_recipe,
                                                                             caplog):
    X, y, X_test, y_test = digits
    epochs = {"rbm0": 3, "rbm1": 3, "finetune": 6}
    first = node.Trainer(spark, store_url, run_id="resume", epochs=epochs, partitions=PARTITIONS, progress=False,
                         stop_after_phase="rbm0")
    first.fit(dbn_recipe.make(), X, y)
    run = node.open_run(store_url, "resume")
    runs, weights = run.runs, run.weights
    record = runs.read_record()
    assert record["status"] == "stopped" and phases_done(record) == ["rbm0"]
    rbm0 = weights.get_phase_result("rbm0")
    rbm0_records = [m for m in runs.read_metrics() if m["phase"] == "rbm0"]

    # A new driver (a fresh model object) picks the run up where it stopped; more epochs for the finished
    # rbm0 train nothing, said in the log, and the record keeps the 3 it trained.
    second = node.Trainer(spark, store_url, run_id="resume", epochs={**epochs, "rbm0": 5}, partitions=PARTITIONS,
                          progress=False)
    with caplog.at_level(logging.WARNING, logger="node.run"):
        model = second.fit(dbn_recipe.make(), X, y)
    assert "phase rbm0 is done after 3 epochs; fitting the run again does not train it for the 5 asked" in caplog.text
    record = runs.read_record()
    assert record["steps"]["rbm0"]["epochs"] == 3
    assert record["status"] == "done" and phases_done(record) == ["rbm0", "rbm1", "finetune"]
    assert record["attempts"] == 2
    assert [h["phase"] for h in second.history_] == ["rbm1"] * 3 + ["finetune"] * 6  # rbm0 was not trained again
    assert len([m for m in runs.read_metrics() if m["phase"] == "rbm0"]) == len(rbm0_records)
    for name, value in weights.get_phase_result("rbm0").items():
        np.testing.assert_array_equal(value, rbm0[name])
    assert model.score(X_test, y_test) >= 0.85  # six fine-tuning epochs; chance is 0.1


def test_two_nodes_train_through_an_hdfs_store_reached_over_webhdfs(spark, tmp_path, digits):
    # No Hadoop can be installed here: the store is the WebHDFS-protocol test server, reached by
    # the executors' Python workers (other processes) through the real `hdfs` client.
    from support.webhdfs_server import WebHDFSServer

    X, y, X_test, y_test = digits
    with WebHDFSServer(tmp_path / "hdfs") as server:
        store_url = server.store_url("/sparkdbn")
        trainer = node.Trainer(spark, store_url, run_id="over-hdfs", epochs={"rbm0": 2, "finetune": 8},
                               partitions=PARTITIONS, progress=False)
        model = trainer.fit(rbm.DBN(hidden_layer_sizes=(64,), finetune_learning_rate=0.1, random_state=0), X, y)

        run = node.open_run(store_url, "over-hdfs")
        store = run.store
        metrics = run.runs.read_metrics()
        assert len({record["node"] for record in metrics}) >= 2
        assert sum(record["merged"] for record in metrics) > 0
        weights = run.weights
        for phase in ("rbm0", "finetune"):
            assert weights.get_phase_result(phase) is not None
            for ref in weights.newest_per_node(phase).values():
                weights.get_version(ref)  # sha256-verified read over WebHDFS
        assert store.exists(run.record["model"]["path"])
    assert model.score(X_test, y_test) >= 0.85  # it learns (chance: 0.1); accuracy parity is tested above


def test_a_finished_fit_leaves_none_of_its_java_objects_waiting_for_pythons_cyclic_collector(spark, store_url,
                                                                                            digits):
    # py4j keeps a Java object and the methods called on it in a reference cycle; left to Python's
    # collector, each fit's RDDs (its data among them) stayed in the driver's JVM: about 200 Java objects
    # more per fit of this size, and a 1 GB driver heap ran out at the eighth fit of digits28.
    X, y, _X_test, _y_test = digits
    gc.collect()
    gc.disable()
    try:
        before = sum(isinstance(item, JavaObject) for item in gc.get_objects())
        node.Trainer(spark, store_url, run_id="collected", epochs={"rbm0": 1, "finetune": 1}, partitions=PARTITIONS,
                     progress=False).fit(rbm.DBN(hidden_layer_sizes=(16,), random_state=0), X, y)
        after = sum(isinstance(item, JavaObject) for item in gc.get_objects())
    finally:
        gc.enable()
    assert after - before < 20, (before, after)  # what the session itself may create once, lazily
