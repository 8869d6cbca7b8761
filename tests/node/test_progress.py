"""The phase's progress bar: samples per second and time left, as a reader sees them."""

from __future__ import annotations

import io
import threading
import time
from types import SimpleNamespace

from tqdm import tqdm

from node.driver._progress import BAR_FORMAT, POLL_S, EpochProgress, partitions_done, progress_postfix


def test_the_postfix_gives_samples_per_second_and_the_time_the_partitions_left_will_take():
    # 3 of 12 partitions of 1,000 rows in 2 s: 1,500 samples/s, and 9 more partitions at 2/3 s each.
    assert progress_postfix(3, 12, 3_000, 2.0) == "1,500 samples/s, 00:06 left"
    assert progress_postfix(12, 12, 12_000, 8.0) == "1,500 samples/s, 00:00 left"
    assert progress_postfix(1, 1_000, 36_000, 1.5) == "24,000 samples/s, 24:58 left"  # 999 x 1.5 s
    assert progress_postfix(100, 4_000, 1e6, 100.0) == "10,000 samples/s, 1:05:00 left"


def test_the_postfix_says_it_does_not_know_before_the_first_partition_finishes():
    assert progress_postfix(0, 12, 0, 0.0) == "? samples/s, ? left"
    assert progress_postfix(0, 12, 0, 5.0) == "? samples/s, ? left"


def test_the_bar_counts_partitions_and_shows_the_postfix_instead_of_tqdms_partition_rate():
    line = tqdm.format_meter(3, 12, 2.0, ncols=120, prefix="r1 rbm0 epoch 1/3", bar_format=BAR_FORMAT,
                             postfix=progress_postfix(3, 12, 3_000, 2.0))
    assert line.startswith("r1 rbm0 epoch 1/3:  25%|")
    assert line.endswith("| 3/12 partitions [00:02, 1,500 samples/s, 00:06 left]")
    assert "partition/s" not in line


def test_the_bar_counts_the_partitions_the_nodes_claimed_less_one_per_running_task():
    # 2 tasks (nodes) of 16 partitions: claims move the bar before any task ends.
    assert partitions_done(0, 2, 16, claimed=0) == 0
    assert partitions_done(0, 2, 16, claimed=7) == 5  # two of the seven are being trained
    assert partitions_done(1, 2, 16, claimed=12) == 11  # one task left, training its 12th
    assert partitions_done(1, 2, 16, claimed=0) == 8  # no claims (sync): a finished task's share
    assert partitions_done(2, 2, 16, claimed=16) == 16
    assert partitions_done(2, 2, 16, claimed=40) == 16  # never past the job's partitions


class _Tracker:
    """Spark's status tracker as a fake: job 7 of the group runs one stage of 2 tasks; it counts what it is asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.polled_thrice = threading.Event()

    def getJobIdsForGroup(self, group):  # noqa: N802 (Spark's name)
        self.asked.append("job ids")
        return [7] if len(self.asked) > 1 else []  # the job is the group's first after the SparkJob was made

    def getJobInfo(self, job_id):  # noqa: N802
        self.asked.append("job info")
        if self.asked.count("job info") >= 3:
            self.polled_thrice.set()
        return SimpleNamespace(status="RUNNING", stageIds=[3])

    def getStageInfo(self, stage_id):  # noqa: N802
        self.asked.append("stage info")
        return SimpleNamespace(numCompletedTasks=1)


class _Session:
    """A SparkContext and an RDD as fakes: the RDD's collect() ends once ``ends`` says so."""

    def __init__(self, ends) -> None:
        self.tracker = _Tracker()
        self.ends = ends

    def statusTracker(self):  # noqa: N802
        return self.tracker

    def setJobGroup(self, *args, **kwargs):  # noqa: N802
        pass

    def getNumPartitions(self):  # noqa: N802
        return 2

    def collect(self):
        self.ends(self.tracker)
        return ["a", "b"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_that_is_off_asks_spark_and_the_store_nothing_while_the_job_runs():
    session = _Session(ends=lambda tracker: time.sleep(3 * POLL_S))  # three polls' time, none of them made
    claims = []
    progress = EpochProgress(enabled=False, sc=session, group="g", total=8, description="r rbm0")
    records = progress.wait(progress.start(session, "r rbm0 epoch 1"), 8, claimed=lambda: claims.append(1) or 0)
    assert records == ["a", "b"]
    assert session.tracker.asked == ["job ids"]  # the group's jobs before this one, once; no progress asked
    assert claims == []


def test_a_bar_that_is_on_moves_by_what_spark_and_the_nodes_claims_say_and_finds_its_job_once(monkeypatch):
    monkeypatch.setattr("sys.stderr", _Terminal())
    session = _Session(ends=lambda tracker: tracker.polled_thrice.wait(timeout=60))
    progress = EpochProgress(enabled=True, sc=session, group="g", total=8, description="r rbm0")
    seen = []
    original = progress._advance
    monkeypatch.setattr(progress, "_advance", lambda done: seen.append(done) or original(done))
    records = progress.wait(progress.start(session, "r rbm0 epoch 1"), 8, claimed=lambda: 5)
    assert records == ["a", "b"]
    assert session.tracker.asked.count("stage info") >= 3
    assert session.tracker.asked.count("job ids") == 2  # made, then found once: never asked again
    assert 4 in seen and seen[-1] == 8  # one task of two done, 5 claimed: max(4, 5 - 1) = 4; then the whole job
