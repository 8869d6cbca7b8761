"""More Python workers than task slots: a Spark executor keeps every idle Python worker it made and
hands a job's tasks to any of them.  After a fit from a DataFrame ``local[2]`` holds four, and an
``async`` fit's epochs (a job each) alternate between two pairs of processes, each a node of the fit.
Counting every peer it merged, a node scaled its learning rates for 4 nodes instead of the 2 that run
at once (3 runs: 0.950-0.967 against one process's 0.975; counting at most the fit's nodes, 6 runs:
0.961-0.975, mean 0.970)."""

from __future__ import annotations

import pytest

import node
import rbm

pytestmark = pytest.mark.slow


def grow_the_worker_pool(spark, store_url, digits) -> None:
    """Fit a tiny DBN from a 200-row DataFrame: afterwards ``local[2]`` has four idle Python workers."""
    from pyspark.ml.linalg import Vectors

    frame = spark.createDataFrame([(Vectors.dense(row.tolist()), int(label))
                                   for row, label in zip(digits.X_train[:200], digits.y_train[:200])],
                                  ["features", "label"])
    node.Trainer(spark, store_url, run_id="pool-grower", epochs={"rbm0": 1, "finetune": 1}, partitions=2,
                 progress=False).fit(rbm.DBN(hidden_layer_sizes=(16,), batch_size=10), frame)


def test_on_more_python_workers_than_slots_the_learning_rates_follow_the_nodes_that_run_at_once(
        spark, store_url, digits, dbn_recipe):
    grow_the_worker_pool(spark, store_url, digits)
    single_accuracy = dbn_recipe.reference_accuracy(digits)
    trainer = node.Trainer(spark, store_url, run_id="pool", epochs=dbn_recipe.epochs,
                           partitions=dbn_recipe.partitions, progress=False)
    model = trainer.fit(dbn_recipe.make(), digits.X_train, digits.y_train)
    records = [record for summary in trainer.history_ for record in summary["records"]]

    assert len({record["node"] for record in records}) > 2  # the case itself: more processes than slots were nodes
    for summary in trainer.history_:  # each epoch is one job of the fit's two tasks
        assert len(summary["nodes"]) == 2, summary["nodes"]
    assert max(record["nodes_merging"] for record in records) == 2  # at most the fit's two nodes count
    assert max(record["learning_rate_scale"] for record in records) == 2.0
    assert abs(model.score(digits.X_test, digits.y_test) - single_accuracy) <= 0.02
