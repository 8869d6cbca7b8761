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
import node.data._spark_reads as spark_reads
import node.driver._fit_data as fit_data
import rbm
import storage
from node import cli
from node.driver._fit_jobs import FitJobs

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
    assert_one_warning_for_the_last_writes(caplog, "outage")
    caplog.clear()

    with WebHDFSServer(tmp_path / "hdfs", port=port), caplog.at_level(logging.INFO, logger="node"):
        model = node.Trainer(spark, url, **settings).fit(small_dbn(), X, y)
        record = node.open_run(url, "outage").record
    assert "resuming run outage" in caplog.text
    assert record["status"] == "done"
    assert model.score(X, y) > 0.5  # it learned (chance: 0.1)


def assert_one_warning_for_the_last_writes(caplog, run: str) -> None:
    """The fit's last store writes that failed after the outage (marking the run failed, releasing the lease,
    removing the work folders) were said in the fit's one warning, not a line each repeating the store's error;
    a lease renewal that failed during the outage was said once."""
    said = [record.getMessage() for record in caplog.records
            if record.name.startswith("node") and record.levelno >= logging.WARNING]
    assert len([line for line in said if f"the fit of run {run} ends after a store failure" in line]) == 1, said
    assert not [line for line in said if line.startswith(("could not", f"run {run}: could not"))], said
    assert len([line for line in said if "lease renewal failed" in line]) <= 1, said


@pytest.mark.parametrize("mode", ["sync", "sharing"])
def test_a_store_stopped_while_a_sync_or_sharing_job_trains_fails_the_fit_once_and_it_resumes(
        spark, tmp_path, digits, monkeypatch, caplog, mode):
    # Both run a phase's epochs as one job: the store stops as the finetune phase's job starts.
    X, y, _, _ = digits
    server = WebHDFSServer(tmp_path / "hdfs").start()
    url, port = server.store_url("/sparkdbn"), server.port
    settings = dict(run_id=f"outage-{mode}", mode=mode, epochs={"rbm0": 1, "finetune": 2}, partitions=4,
                    progress=False, store_retry_timeout_s=RETRY_TIMEOUT_S, lease_timeout_s=5.0)
    real_start_job = FitJobs.start_job

    def start_job_then_stop_the_store(jobs, phase, *args, **kwargs):
        job = real_start_job(jobs, phase, *args, **kwargs)
        if phase == "finetune":
            server.stop()
        return job

    before = newest_job(spark)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(FitJobs, "start_job", start_job_then_stop_the_store)
            with pytest.raises(node.StoreAccessError,
                               match=rf"^store {re.escape(url)} unavailable: \w+ '[^']+' failed"):
                node.Trainer(spark, url, **settings).fit(small_dbn(), X, y)
    finally:
        server.stop()
    assert failed_tasks_since(spark, before) == 0
    assert_one_warning_for_the_last_writes(caplog, f"outage-{mode}")

    with WebHDFSServer(tmp_path / "hdfs", port=port):
        model = node.Trainer(spark, url, **settings).fit(small_dbn(), X, y)
        assert node.open_run(url, f"outage-{mode}").record["status"] == "done"
    assert model.score(X, y) > 0.5  # it learned (chance: 0.1)


def test_a_store_stopped_while_the_data_job_stores_a_dataframes_partitions_fails_the_fit_once(
        spark, tmp_path, digits, monkeypatch):
    # The job that checks a DataFrame's partitions stores them for the nodes: Spark ran each of its tasks 4 times,
    # each waiting out the outage, and the fit ended with InputDataError ("reading the training data failed").
    X, y, _, _ = digits
    frame = spark.createDataFrame([(row.tolist(), int(label)) for row, label in zip(X, y)], ["features", "label"])
    with WebHDFSServer(tmp_path / "hdfs") as server:
        url = server.store_url("/sparkdbn")
        real_prepare = fit_data.prepare_training_data

        def stop_the_store_then_prepare(*args, **kwargs):
            server.stop()  # the lease is held, the run's key made: only the data job meets the outage
            return real_prepare(*args, **kwargs)

        monkeypatch.setattr(fit_data, "prepare_training_data", stop_the_store_then_prepare)
        before = newest_job(spark)
        trainer = node.Trainer(spark, url, run_id="frame-outage", epochs=1, partitions=4, progress=False,
                               store_retry_timeout_s=RETRY_TIMEOUT_S)
        with pytest.raises(node.StoreAccessError, match=rf"^store {re.escape(url)} unavailable: write_bytes "
                                                        r"'runs/frame-outage/blocks/[^']+' failed"):
            trainer.fit(small_dbn(), frame)
    assert failed_tasks_since(spark, before) == 0  # each task said it in its summary


def test_a_store_stopped_before_the_tasks_read_a_staged_datasets_shards_fails_the_fit_once(
        spark, tmp_path, digits, monkeypatch):
    # Each shard's task waited 30 s (the dataset's default retry timeout, whatever the fit's) 4 times.
    X, y, _, _ = digits
    with WebHDFSServer(tmp_path / "hdfs") as server:
        url, dataset = server.store_url("/sparkdbn"), server.store_url("/datasets/digits")
        storage.stage_arrays(dataset, X, y, shards=4)
        real_check = spark_reads.check_staged_shards

        def check_then_stop_the_store(staged):
            real_check(staged)  # every shard is there
            server.stop()

        monkeypatch.setattr(spark_reads, "check_staged_shards", check_then_stop_the_store)
        before = newest_job(spark)
        trainer = node.Trainer(spark, url, run_id="shards-outage", epochs=1, progress=False,
                               store_retry_timeout_s=RETRY_TIMEOUT_S)
        with pytest.raises(node.StoreAccessError, match=rf"^store {re.escape(dataset)} unavailable: read_bytes "
                                                        r"'part-0000\d\.parquet' failed"):
            trainer.fit(small_dbn(), dataset)
    assert failed_tasks_since(spark, before) == 0


@pytest.mark.parametrize("fault, said", [
    ("deny", r"permission denied on hdfs /sparkdbn/runs/{run}/"),
    ("over_quota", r"the store is full at hdfs /sparkdbn/runs/{run}/.*DSQuotaExceededException"),
])
def test_a_store_refusing_the_run_or_full_mid_fit_ends_it_once_with_a_store_access_error_naming_the_path(
        spark, tmp_path, digits, fault, said):
    X, y, _, _ = digits
    run = f"{fault.replace('_', '-')}-run"
    with WebHDFSServer(tmp_path / "hdfs") as server:
        url = server.store_url("/sparkdbn")
        start_fault = getattr(server.faults, fault)
        trainer = node.Trainer(spark, url, run_id=run, epochs={"rbm0": 3, "finetune": 1}, partitions=4,
                               progress=False, on_epoch=lambda _summary: start_fault(f"/sparkdbn/runs/{run}"))
        before = newest_job(spark)
        with pytest.raises(node.StoreAccessError, match=said.format(run=run)):
            trainer.fit(small_dbn(), X, y)
    assert failed_tasks_since(spark, before) == 0  # the same on every attempt: reported by the tasks, not retried


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
