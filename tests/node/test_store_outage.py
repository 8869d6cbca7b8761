"""A staged dataset that lost a shard ends the fit once, in one line.

A dataset whose shard was deleted gave 4 identical tracebacks, one per attempt of the task reading it.
"""

from __future__ import annotations

import os

import pytest
from support.spark_jobs import failed_tasks_since, newest_job

import node
import rbm
import storage
from node import cli

pytestmark = pytest.mark.slow


def small_dbn() -> rbm.DBN:
    return rbm.DBN(hidden_layer_sizes=(32,), random_state=0)


@pytest.fixture
def dataset_missing_a_shard(tmp_path, digits) -> str:
    """digits staged in 4 shards, the third deleted behind the dataset's back; its URL."""
    X, y, _, _ = digits
    url = "file://" + str(tmp_path / "datasets" / "digits")
    storage.stage_arrays(url, X, y, shards=4)
    os.remove(tmp_path / "datasets" / "digits" / "part-00002.parquet")
    return url


def test_train_on_a_dataset_missing_a_shard_says_so_in_one_line_before_spark_starts(
        spark, tmp_path, dataset_missing_a_shard, capsys):
    before = newest_job(spark, any_group=True)
    capsys.readouterr()
    status = cli.main(["train", "--store", str(tmp_path / "store"), "--run-id", "shardless", "--dataset",
                       dataset_missing_a_shard, "--epochs", "1", "--no-report", "--no-progress"])
    err = capsys.readouterr().err.splitlines()
    assert status == 2 and err == [f"sparkdbn train: dataset {dataset_missing_a_shard!r} lacks its shard "
                                   "'part-00002.parquet', which its _meta.json lists; nothing was trained: stage the "
                                   "dataset again"]
    assert newest_job(spark, any_group=True) == before  # no Spark job ran
    assert not (tmp_path / "store" / "runs" / "shardless").exists()


def test_a_fit_on_a_dataset_missing_a_shard_is_refused_before_a_task_reads_it(spark, store_url,
                                                                               dataset_missing_a_shard):
    before = newest_job(spark, any_group=True)
    trainer = node.Trainer(spark, store_url, run_id="shardless", epochs=1, progress=False)
    with pytest.raises(node.InputDataError, match=r"lacks its shard 'part-00002\.parquet'"):
        trainer.fit(small_dbn(), dataset_missing_a_shard)
    assert failed_tasks_since(spark, before, any_group=True) == 0


def test_a_shard_gone_after_the_drivers_check_is_reported_once_by_the_task_reading_it(spark, store_url,
                                                                                    dataset_missing_a_shard,
                                                                                    monkeypatch):
    # The driver saw every shard (raising=False: an older tree, without the check, runs this test too).
    monkeypatch.setattr(storage.Dataset, "missing_shards", lambda _dataset: [], raising=False)
    before = newest_job(spark, any_group=True)
    trainer = node.Trainer(spark, store_url, run_id="shardless", epochs=1, progress=False)
    with pytest.raises(node.InputDataError, match=r"partition 2: its shard 'part-00002\.parquet' is missing"):
        trainer.fit(small_dbn(), dataset_missing_a_shard)
    assert failed_tasks_since(spark, before, any_group=True) == 0  # reported by its task, not retried
