"""A fit's training partitions (node.executor._resident): stored once per fit, taken from memory or the store."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import storage
from node._contract import NodeConfig
from node.data import DataOptions, encode_block, prepare_training_data
from node._errors import TrainingError
from node.driver._fit_jobs import FitJobs
from node.driver._timings import FitTimings
from node.executor._resident import NodeData, block_sink, write_partition
from node.run._work_folders import blocks_folder

KEY = b"k" * 32


def config_for(store_url: str, key: bytes = KEY) -> NodeConfig:
    return NodeConfig(run="r1", fit_id="f" * 32, store_url=store_url, store_retry_timeout_s=5.0, key=key, spec={},
                      feature_shape=(2,), classes=None, seed=0, fanout=None, merge_alpha=None, keep_versions=3,
                      anti_entropy_interval_s=1.0, peer_refresh_interval_s=1.0, flush_timeout_s=5.0)


def partition(index: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full((3, 2), index, np.float32), np.full(3, index)


@pytest.fixture
def store_url(tmp_path) -> str:
    return "file://" + str(tmp_path / "store")


@pytest.fixture
def store(store_url) -> storage.Store:
    return storage.open_store(store_url)


def stored(store: storage.Store, indices, key: bytes = KEY) -> int:
    """Write partitions ``indices`` as the fit's first job does; their bytes."""
    config = config_for("unused", key)
    return sum(write_partition(store, config, index, *partition(index)) for index in indices)


def test_a_node_reads_its_slot_from_the_store_once_then_from_memory(store, store_url):
    size = stored(store, range(4))
    data = NodeData(store, config_for(store_url), "node-a")
    blocks = data.slot([3, 1])
    assert [index for index, *_ in blocks] == [3, 1]
    for index, X, y in blocks:
        assert np.array_equal(X, partition(index)[0]) and np.array_equal(y, partition(index)[1])
    assert data.take_read_bytes() == size // 2
    store.delete(blocks_folder("r1", "f" * 32), recursive=True)  # memory alone serves the next jobs
    assert [index for index, *_ in data.slot([3, 1])] == [3, 1] and data.take_read_bytes() == 0


def test_a_node_keeps_at_most_twice_its_slot_in_memory(store, store_url):
    stored(store, range(6))
    data = NodeData(store, config_for(store_url), "node-a")
    data.slot([0, 1])
    data.slot([2, 3])  # Spark gave this worker the other slot: both are kept
    assert list(data.memory) == [0, 1, 2, 3]
    data.slot([4, 5])
    assert list(data.memory) == [2, 3, 4, 5]


def test_a_partition_missing_from_the_store_fails_the_task_saying_which_and_where(store, store_url):
    stored(store, [0])
    with pytest.raises(TrainingError, match=r"partition 1 of run r1: not in runs/r1/blocks/f{12}"):
        NodeData(store, config_for(store_url), "node-a").slot([0, 1])


def test_a_partition_stored_under_another_key_is_never_trained_on(store, store_url):
    stored(store, [0], key=b"x" * 32)
    with pytest.raises(TrainingError, match="partition 0 of run r1: not in"):
        NodeData(store, config_for(store_url), "node-a").slot([0])


def test_a_stored_partition_whose_content_was_replaced_fails_the_task_naming_the_file(store, store_url):
    stored(store, [0])
    folder = blocks_folder("r1", "f" * 32)
    (name,) = store.list(folder)
    store.write_bytes(f"{folder}/{name}", encode_block(*partition(7)))
    with pytest.raises(TrainingError, match=rf"partition 0 of run r1: {folder}/{name}: .*sha256"):
        NodeData(store, config_for(store_url), "node-a").slot([0])


def fit_jobs(spark, store_url: str, prepared) -> FitJobs:
    """A FitJobs of the slots and the stored partitions only: no training job starts."""
    fit = FitJobs.__new__(FitJobs)
    fit.sc, fit._nodes, fit.run_id, fit._slots, fit._stored = spark.sparkContext, 2, "r1", None, False
    fit.node_config, fit._store, fit.prepared, fit._timings = config_for(store_url), storage.open_store(store_url), \
        prepared, FitTimings()
    return fit


def jobs_of(spark, group: str, action) -> list[int]:
    """The Spark jobs ``action()`` ran."""
    spark.sparkContext.setJobGroup(group, "a test's partitions")
    try:
        action()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return spark.sparkContext.statusTracker().getJobIdsForGroup(group)


def test_partitions_the_driver_holds_are_stored_once_by_the_driver_and_every_job_carries_only_the_slots_numbers(
        spark, store, store_url):
    dropped = []
    held = [(index, *partition(index)) for index in range(5)]
    fit = fit_jobs(spark, store_url, SimpleNamespace(rows_per_partition=[3] * 5, held=held, stored=False,
                                                     unpersist=lambda: dropped.append(True)))
    assert jobs_of(spark, "driver-stores", lambda: [fit.store_partitions() for _job in range(3)]) == []
    assert dropped == [True]  # stored once per fit, and the driver's copy dropped
    for _job in range(3):
        assert fit._dealt() == ((0, 2, 4), (1, 3))
        assert fit._slot_numbers.glom().collect() == [[0], [1]]  # the slot's number, not its data
    blocks = NodeData(store, config_for(store_url), "node-a").slot([0, 2, 4])
    assert [(index, X[0, 0]) for index, X, _y in blocks] == [(0, 0), (2, 2), (4, 4)]
    assert [step.name for step in fit._timings.steps] == ["store the training partitions"]


def test_data_spark_reads_is_stored_by_the_job_that_checks_it_under_the_names_the_driver_gives(spark, tmp_path):
    by_spark, by_driver = ("file://" + str(tmp_path / name) for name in ("by-spark", "by-driver"))
    rows = [(X_row, int(label)) for index in range(3) for X_row, label in zip(*partition(index))]
    rdd = spark.sparkContext.parallelize(rows, 3)  # partition i holds partition(i)'s rows
    sink = block_sink(by_spark, 5.0, KEY, "r1", "f" * 32)
    prepared = []
    jobs = jobs_of(spark, "spark-stores", lambda: prepared.append(prepare_training_data(
        spark, rdd, options=DataOptions(partitions=3, sink=sink))))
    assert len(jobs) == 1 and prepared[0].stored  # one job reads, checks and stores
    fit = fit_jobs(spark, by_spark, prepared[0])
    assert jobs_of(spark, "nothing-left-to-store", fit.store_partitions) == [] and fit._timings.steps == []
    stored(storage.open_store(by_driver), range(3))
    folder = blocks_folder("r1", "f" * 32)
    names = sorted(storage.open_store(by_spark).list(folder))
    assert names == sorted(storage.open_store(by_driver).list(folder)) and len(names) == 3  # same content, same names
    for index, X, y in NodeData(storage.open_store(by_spark), config_for(by_spark), "node-a").slot([2, 0, 1]):
        assert np.array_equal(X, partition(index)[0]) and np.array_equal(y, partition(index)[1])


def test_data_prepared_without_the_fits_sink_is_refused_before_a_training_job(spark, store_url):
    fit = fit_jobs(spark, store_url, SimpleNamespace(rows_per_partition=[3], held=None, stored=False,
                                                     source="an RDD of (features, label)"))
    with pytest.raises(TrainingError, match="prepared without the fit's block sink"):
        fit.store_partitions()
