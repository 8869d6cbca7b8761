"""A worker's long-lived objects are kept out of the collection Spark runs after every task.

PySpark's daemon runs a full ``gc.collect()`` after each task of a reused Python worker; with a
node loaded that walk cost 60-90 ms per task (``scripts/bench_spark.py``: ``async`` 1 node 0.70
-> 0.78 of in-process speed in fine-tuning once it stopped).  See :mod:`node.executor._worker_heap`.
"""

from __future__ import annotations

import gc
import os
import time
import weakref

import pytest

import node
import rbm
from node.executor._worker_heap import settle_worker_heap


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_settling_collects_frozen_garbage_and_freezes_what_survives():
    try:
        doomed = _Cycle()
        gc.freeze()  # frozen: a collection alone never frees the doomed cycle now
        probe = weakref.ref(doomed)
        del doomed
        gc.collect()
        assert probe() is not None

        settle_worker_heap()

        assert probe() is None  # unfrozen first, so the old garbage went
        assert gc.get_freeze_count() > 0  # and what survived is frozen again
    finally:
        gc.unfreeze()


@pytest.mark.slow
def test_a_worker_that_ran_a_node_has_its_heap_frozen(spark, store_url, digits):
    def _unfreeze_worker(_index, _items):  # nested: pickled by value (the workers cannot import tests)
        gc.unfreeze()
        time.sleep(0.2)  # keep the worker busy, so the job's other tasks go to the other worker
        yield os.getpid(), gc.get_freeze_count()

    def _worker_freeze_count(_index, _items):
        time.sleep(0.2)
        yield os.getpid(), gc.get_freeze_count()

    sc = spark.sparkContext
    before = dict(sc.parallelize(range(8), 8).mapPartitionsWithIndex(_unfreeze_worker).collect())
    assert before and not any(before.values())  # every worker reached starts with nothing frozen

    trainer = node.Trainer(spark, store_url, epochs={"rbm0": 1}, partitions=4, progress=False, seed=0)
    trainer.fit(rbm.DBN(hidden_layer_sizes=(16,), random_state=0), digits.X_train, digits.y_train)
    node_pids = {r["pid"] for summary in trainer.history_ for r in summary["records"]}

    after = dict(sc.parallelize(range(8), 8).mapPartitionsWithIndex(_worker_freeze_count).collect())
    checked = set(after) & set(before) & node_pids
    assert checked, f"no worker was seen before the fit, ran a node and was seen after: {before}, {node_pids}, {after}"
    assert all(after[pid] > 0 for pid in checked), after


def test_a_model_rebuilt_for_prediction_is_frozen_with_the_worker_heap(digits):
    from node.serve._inference import model_from_payload, model_payload

    model = rbm.DBN(hidden_layer_sizes=(8,), pretrain_epochs=1, finetune_epochs=1, random_state=0)
    payload = model_payload(model.fit(digits.X_train[:50], digits.y_train[:50]))
    try:
        gc.unfreeze()
        model_from_payload(payload)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
