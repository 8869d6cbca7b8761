"""A store that goes away (or refuses the run) mid-fit, and a staged dataset that lost a shard: each ends the fit
once, in one line.

Before, a fit whose store stopped answering ran each failing task 4 times (``spark.task.maxFailures``),
each attempt waiting out the store's retry timeout again, then its queued job, then three more waits
on the driver: 5.5-6.3 minutes and 1,350-1,850 log lines at the 30 s default (36-45 s and 28-33 now).
A dataset whose shard was deleted gave 4 identical tracebacks, one per attempt of the task reading it.
"""

from __future__ import annotations

import logging
import os
import re

import pytest
from support.spark_jobs import failed_tasks_since, newest_job
from support.webhdfs_server import WebHDFSServer

import node
import rbm
import storage
from node import cli

pytestmark = pytest.mark.slow

#: Short, so that each wait for the stopped store is short; the default is 30 s.
RETRY_TIMEOUT_S = 2.0


def small_dbn() -> rbm.DBN:
    return rbm.DBN(hidden_layer_sizes=(32,), random_state=0)


def test_a_store_stopped_mid_fit_fails_it_once_naming_the_store_and_the_same_run_id_resumes_once_it_is_back(
        spark, tmp_path, digits, caplog):
    X, y, _, _ = digits
    server = WebHDFSServer(tmp_path / "hdfs").start()
    url, port = server.store_url("/sparkdbn"), server.port
    # The stopped store keeps the fit from releasing its lease: the next fit takes it over after lease_timeout_s.
    settings = dict(run_id="outage", epochs={"rbm0": 3, "finetune": 2}, partitions=4, progress=False,
                    store_retry_timeout_s=RETRY_TIMEOUT_S, lease_timeout_s=5.0)
    before = newest_job(spark)
    try:
        # The first epoch's end stops the store: the nodes are training the next (async queues it).
        stopping = node.Trainer(spark, url, on_epoch=lambda _summary: server.stop(), **settings)
        with pytest.raises(node.StoreAccessError, match=rf"^store {re.escape(url)} unavailable: \w+ '[^']+' failed"):
            stopping.fit(small_dbn(), X, y)
    finally:
        server.stop()
    # Each task that met the outage said so in its report: Spark ran none of them again.
    assert failed_tasks_since(spark, before) == 0

    with WebHDFSServer(tmp_path / "hdfs", port=port), caplog.at_level(logging.INFO, logger="node"):
        model = node.Trainer(spark, url, **settings).fit(small_dbn(), X, y)
        record = node.open_run(url, "outage").record
    assert "resuming run outage" in caplog.text
    assert record["status"] == "done"
    assert model.score(X, y) > 0.5  # it learned (chance: 0.1)


def test_a_store_refusing_the_run_mid_fit_ends_it_with_a_store_access_error_naming_the_path(spark, tmp_path, digits):
    X, y, _, _ = digits
    with WebHDFSServer(tmp_path / "hdfs") as server:
        url = server.store_url("/sparkdbn")
        trainer = node.Trainer(spark, url, run_id="refused", epochs={"rbm0": 3, "finetune": 1}, partitions=4,
                               progress=False, on_epoch=lambda _summary: server.faults.deny("/sparkdbn/runs/refused"))
        before = newest_job(spark)
        with pytest.raises(node.StoreAccessError, match=r"permission denied on hdfs /sparkdbn/runs/refused/"):
            trainer.fit(small_dbn(), X, y)
    assert failed_tasks_since(spark, before) == 0  # the refusal is the same on every attempt


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
    before = newest_job(spark)
    capsys.readouterr()
    status = cli.main(["train", "--store", str(tmp_path / "store"), "--run-id", "shardless", "--dataset",
                       dataset_missing_a_shard, "--epochs", "1", "--no-report", "--no-progress"])
    err = capsys.readouterr().err.splitlines()
    assert status == 2 and err == [f"sparkdbn train: dataset {dataset_missing_a_shard!r} lacks its shard "
                                   "'part-00002.parquet', which its _meta.json lists; nothing was trained: stage the "
                                   "dataset again"]
    assert newest_job(spark) == before  # no Spark job ran
    assert not (tmp_path / "store" / "runs" / "shardless").exists()


def test_a_fit_on_a_dataset_missing_a_shard_is_refused_before_a_task_reads_it(spark, store_url,
                                                                               dataset_missing_a_shard):
    before = newest_job(spark)
    trainer = node.Trainer(spark, store_url, run_id="shardless", epochs=1, progress=False)
    with pytest.raises(node.InputDataError, match=r"lacks its shard 'part-00002\.parquet'"):
        trainer.fit(small_dbn(), dataset_missing_a_shard)
    assert failed_tasks_since(spark, before) == 0


def test_a_shard_gone_after_the_drivers_check_is_reported_once_by_the_task_reading_it(spark, store_url,
                                                                                    dataset_missing_a_shard,
                                                                                    monkeypatch):
    # The driver saw every shard (raising=False: an older tree, without the check, runs this test too).
    monkeypatch.setattr(storage.Dataset, "missing_shards", lambda _dataset: [], raising=False)
    before = newest_job(spark)
    trainer = node.Trainer(spark, store_url, run_id="shardless", epochs=1, progress=False)
    with pytest.raises(node.InputDataError, match=r"partition 2: its shard 'part-00002\.parquet' is missing"):
        trainer.fit(small_dbn(), dataset_missing_a_shard)
    assert failed_tasks_since(spark, before) == 0  # reported by its task, not retried
