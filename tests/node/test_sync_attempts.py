"""Where the driver runs a sync job again after a lost node (node.modes._sync_rounds): the next attempt
continues from the furthest round every node of an earlier one recorded."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

import node
import storage
from node._contract import SyncOptions, SyncResume
from node.modes._sync import JOB_ATTEMPTS, SyncMode
from node.modes._sync_rounds import RoundPlace, SyncJob, SyncNodeLost

KEY = b"sync-attempts-key-0123456789"
OTHER_KEY = b"not-the-run-key-0123456789ab"


def a_task(key: bytes = KEY) -> SimpleNamespace:
    # three slots of 3, 3 and 2 partitions, averaging every 2: rounds 0 and 1 (slot 2 has no round 1)
    return SimpleNamespace(node=SimpleNamespace(key=key, run="r1", fit_id="f" * 32), phase="rbm0", epoch=0,
                           slots=((0, 3, 6), (1, 4, 7), (2, 5)), options=SimpleNamespace(averaging_frequency=2))


@pytest.fixture
def store(tmp_path):
    return storage.open_store(str(tmp_path / "store"))


def record(store, attempt: int, place: RoundPlace | None, slot: int, *, version: int = 1,
           started_at: RoundPlace | None = None, key: bytes = KEY) -> None:
    ref = storage.WeightStore(store, "r1", key).put_version("rbm0", f"n{attempt}-{slot}", version,
                                                           {"W": np.full((2, 2), slot, np.float32)})
    SyncJob(store, a_task(key), attempt).write_record(place, slot, ref, [(slot, 10, 0.5, 1.5, 2)],
                                                      started_at=started_at)


def test_the_first_attempt_starts_at_the_job_start(store):
    assert SyncJob(store, a_task(), 0).resume_point() is None


def test_the_next_attempt_continues_from_the_furthest_round_every_member_recorded(store):
    for slot in range(3):
        record(store, 0, None, slot, started_at=RoundPlace(0, -1))
        record(store, 0, RoundPlace(0, 0), slot, version=2)
    for slot in (0, 1):  # round 1's members are slots 0 and 1 (slot 2 has no third partition)
        record(store, 0, RoundPlace(0, 1), slot, version=3)
    record(store, 0, RoundPlace(1, 0), 0, version=4)  # slots 1 and 2 never recorded epoch 1's round 0
    assert SyncJob(store, a_task(), 1).resume_point() == SyncResume(attempt=0, epoch=0, round=1, start=False)


def test_a_round_a_member_did_not_record_is_no_place_to_continue_from(store):
    for slot in range(3):
        record(store, 0, None, slot, started_at=RoundPlace(0, -1))
    for slot in (0, 2):
        record(store, 0, RoundPlace(0, 0), slot, version=2)
    assert SyncJob(store, a_task(), 1).resume_point() == SyncResume(attempt=0, epoch=0, round=-1, start=True)


def test_a_record_signed_with_another_key_does_not_complete_a_round(store):
    for slot in range(3):
        record(store, 0, None, slot, started_at=RoundPlace(0, -1))
    for slot in (0, 1):
        record(store, 0, RoundPlace(0, 0), slot, version=2)
    record(store, 0, RoundPlace(0, 0), 2, version=2, key=OTHER_KEY)
    assert SyncJob(store, a_task(), 1).resume_point().round == -1


def test_an_attempt_that_resumed_stands_at_its_start_and_the_newer_attempt_wins_a_tie(store):
    for slot in range(3):
        record(store, 0, RoundPlace(0, 0), slot, version=2)
        record(store, 1, None, slot, started_at=RoundPlace(0, 0), version=3)  # attempt 1 continued from there
    assert SyncJob(store, a_task(), 2).resume_point() == SyncResume(attempt=1, epoch=0, round=0, start=True)


def test_an_attempt_reads_only_the_attempts_before_it(store):
    for slot in range(3):
        record(store, 3, RoundPlace(0, 0), slot)
    assert SyncJob(store, a_task(), 2).resume_point() is None


def test_a_task_run_again_finds_its_slot_claimed_and_fails_at_once_saying_its_node_was_lost(store):
    job = SyncJob(store, a_task(), 0)
    assert job.claim(1) and not SyncJob(store, a_task(), 0).claim(1)
    assert SyncJob(store, a_task(), 1).claim(1)  # the next attempt claims afresh
    error = job.lost_node_error(1)
    assert isinstance(error, SyncNodeLost) and "slot 1 of attempt 0 again" in str(error)


def test_a_recorded_failure_is_what_a_task_run_again_raises_and_a_forged_one_is_ignored(store):
    SyncJob(store, a_task(OTHER_KEY), 0).record_failure(RuntimeError("forged"))
    job = SyncJob(store, a_task(), 0)
    assert job.failure() is None and isinstance(job.lost_node_error(0), SyncNodeLost)
    job.record_failure(RuntimeError("the model raised"))
    error = job.lost_node_error(0)
    assert not isinstance(error, SyncNodeLost) and isinstance(error, node.TrainingError)
    assert str(error) == "sync, run r1, phase rbm0: RuntimeError: the model raised"


def test_a_skipped_round_is_reported_from_the_newest_attempt_that_recorded_it_up_to_the_one_resumed_from(store):
    record(store, 0, RoundPlace(0, 0), 0, version=1)
    record(store, 1, RoundPlace(0, 0), 0, version=2)
    record(store, 2, RoundPlace(0, 0), 0, version=3)  # a later attempt, not the one resumed from
    job = SyncJob(store, a_task(), 3)
    found = job.earlier_round(SyncResume(attempt=1, epoch=0, round=0, start=False), RoundPlace(0, 0), 0)
    assert found.ref.node == "n1-0" and found.trained == ((0, 10, 0.5, 1.5, 2),)
    assert job.earlier_round(SyncResume(attempt=1, epoch=0, round=0, start=False), RoundPlace(0, 1), 0) is None


def a_failed_job(store, attempt: int) -> tuple[SimpleNamespace, SimpleNamespace]:
    task = a_task()
    task.options = SyncOptions(averaging_frequency=2, barrier_timeout_s=5.0, attempt=attempt)
    return SimpleNamespace(store=store), task


def spark_failure(text: str) -> node.TrainingError:
    try:
        try:
            raise RuntimeError(f"Job aborted: {text}")
        except RuntimeError as cause:
            raise node.TrainingError("Spark job 'r1 rbm0 epoch 1' failed") from cause
    except node.TrainingError as error:
        return error


def test_the_driver_runs_a_job_again_after_a_lost_node_from_where_its_nodes_had_got(store, caplog):
    for slot in range(3):
        record(store, 0, None, slot, started_at=RoundPlace(0, -1))
    driver, task = a_failed_job(store, 0)
    lost = ("py4j.protocol.Py4JJavaError: An error occurred while calling o123.collectAndServe.\n: "
            "org.apache.spark.SparkException: Job aborted due to stage failure: ... "
            "node.modes._sync_rounds.SyncNodeLost: sync, run r1, phase rbm0: Spark ran the task of slot 2 of "
            "attempt 0 again (its node was lost); ...\n\tat org.apache.spark.api.python.BasePythonRunner")
    with caplog.at_level(logging.WARNING, logger="node.modes._sync"):
        options = SyncMode._next_attempt(driver, task, spark_failure(lost))
    assert options.attempt == 1 and options.resume == SyncResume(attempt=0, epoch=0, round=-1, start=True)
    assert options.averaging_frequency == 2
    # one line naming the node, not Py4J's and Spark's text around its message
    assert caplog.messages == ["run r1, phase rbm0: the sync node of slot 2 was lost (Spark ran its task of attempt "
                               "0 again); the job runs again from epoch 1 round 0 of attempt 0 (attempt 2 of "
                               f"{JOB_ATTEMPTS})"]


@pytest.mark.parametrize("text", ["Job 3 cancelled part of cancelled job group sparkdbn-r1",
                                  "node.modes._sync._PeerMissing: slot(s) [1] did not reach ..."])
def test_a_cancelled_job_or_peers_that_never_came_are_not_run_again(store, text):
    driver, task = a_failed_job(store, 0)
    with pytest.raises(node.TrainingError, match="Spark job 'r1 rbm0 epoch 1' failed"):
        SyncMode._next_attempt(driver, task, spark_failure(text))


def test_a_job_runs_at_most_job_attempts_times(store):
    driver, task = a_failed_job(store, JOB_ATTEMPTS - 1)
    with pytest.raises(node.TrainingError, match="Spark job 'r1 rbm0 epoch 1' failed"):
        SyncMode._next_attempt(driver, task, spark_failure("SyncNodeLost: sync, ..."))


def test_a_recorded_failure_is_raised_in_one_line_instead_of_running_the_job_again(store):
    driver, task = a_failed_job(store, 0)
    SyncJob(store, task, 0).record_failure(RuntimeError("the model raised"))
    with pytest.raises(node.TrainingError, match=r"^sync, run r1, phase rbm0: RuntimeError: the model raised$"):
        SyncMode._next_attempt(driver, task, spark_failure("SyncNodeLost: sync, ..."))
