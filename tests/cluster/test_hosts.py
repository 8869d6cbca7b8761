"""Training across hosts on the virtual cluster: 3 worker hosts, an ``hdfs://`` store on the namenode
host, the driver on its own host; a link cut, a host killed, the store host unreachable, the store stopped.

The budget of these tests is a few minutes on 2 cores, so one cluster serves the module and one
driver process (one Spark session) runs every fit in order while the fixture arranges the faults:

* fit 0, the small DBN of tests/node on digits (3 nodes, 6 partitions): after a few epochs of its
  last phase worker3's link is cut for about 20 s, a few epochs after the link returns worker3
  is killed whole.  The first three tests read this one run: the nodes across hosts and their
  announcements (the earlier phases saw no fault at all), the cut, the kill.
* fits 1-3, a small RBM on the two hosts left: the store host unreachable for 3 s (less than the
  retry timeout: the fit completes), then the store's servers stopped until the fit gives up (it
  fails naming the URL and the operation; refused connections fail at once, where an unreachable
  host would make every attempt wait out its connect timeout; its store calls give up after 2 s, the
  blip fit's after 5 s), then the same run id fitted again after the store is back (resumes, completes).

Faults are timed by the progress file the driver writes after every epoch (polled, never slept
on); the sleeps here are the faults' own durations.  Nothing here asserts a duration.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import node
import storage
from support.one_node import train_on_one_node
from support.virtual_cluster import VirtualCluster

pytestmark = pytest.mark.slow

from _train_job import DBN_SETTINGS, KEY

HERE = Path(__file__).resolve().parent

STORE_PATH = "/hosts"
PARTITIONS = 6
DBN_EPOCHS = {"rbm0": 8, "rbm1": 8, "finetune": 30}
#: How far below one node a fit may land: tests/node/test_training.py's 3 points (two asynchronous nodes
#: of this DBN 0.944-0.97 from run to run, one process 0.967-0.969).  One-sided: what these tests guard
#: against (work lost to the cut or the kill, a phase trained again from its start) lowers accuracy.
ACCURACY_TOLERANCE = 0.03
CUT_S = 20.0
CUT_AFTER_EPOCH = 2  # of the last phase
KILL_EPOCHS_AFTER_RESTORE = 3
STORE_BLIP_S = 3.0
STORE_RETRY_TIMEOUT_S = 5.0
#: The outage fit's (and its resume's): every store call of a fit whose store is gone waits this out -- the
#: failed task's two attempts, then the failure's record, lease and cleanup -- 41 s in all at 5 s; it need
#: not outlast a blip, and what is asserted (the fit fails naming the store and the operation) is the same.
STORE_GONE_RETRY_TIMEOUT_S = 2.0
#: Fits that wait for the store and for Spark to give up on a lost executor still end within this.
FIT_DEADLINE_S = 300.0
#: Short enough that Spark declares a killed host's executor lost soon, long enough that a 20 s cut is not.
#: Two attempts per task: the task lost with the killed host is retried once; a fit whose store is gone
#: fails after two attempts, not four (each waits out the store's retry timeout).
SPARK_FAULT_CONF = {"spark.network.timeout": "30s", "spark.network.timeoutInterval": "5s",
                    "spark.executor.heartbeatInterval": "3s", "spark.task.maxFailures": "2"}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _wait_for(condition, what: str, driver, log: Path, timeout_s: float = FIT_DEADLINE_S):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if driver.poll() is not None:
            raise AssertionError(f"the driver ended ({driver.returncode}) before {what}:\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s:.0f} s:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)  # polling with a deadline


def _progress(folder: Path, index: int) -> dict | None:
    return _read_json(folder / f"progress-{index}.json")


class Runs:
    """What the module's fits produced, and when the fixture arranged each fault (Unix times)."""

    def __init__(self, cluster: VirtualCluster, folder: Path) -> None:
        self.cluster, self.folder = cluster, folder
        self.times: dict[str, float] = {}
        self.fits: list[dict] = []
        self.store_url = "file://" + str(cluster.store_root / STORE_PATH.strip("/"))

    def fit(self, index: int) -> dict:
        return self.fits[index]


def _orchestrate(cluster: VirtualCluster, folder: Path) -> Runs:
    runs = Runs(cluster, folder)
    dbn_settings = {"epochs": DBN_EPOCHS, "partitions": PARTITIONS}
    rbm_settings = {"epochs": 4, "partitions": 4, "store_retry_timeout_s": STORE_RETRY_TIMEOUT_S,
                    "lease_timeout_s": 8.0}
    gone_settings = dict(rbm_settings, store_retry_timeout_s=STORE_GONE_RETRY_TIMEOUT_S)
    plan = {"conf": cluster.spark_conf(**SPARK_FAULT_CONF), "store_url": cluster.store_url(STORE_PATH),
            "folder": str(folder), "fits": [
                {"name": "dbn", "run_id": "dbn", "model": "dbn", "settings": dbn_settings},
                {"name": "store-blip", "run_id": "blip", "model": "rbm", "settings": rbm_settings},
                {"name": "store-gone", "run_id": "gone", "model": "rbm", "settings": gone_settings},
                {"name": "resume", "run_id": "gone", "model": "rbm", "settings": gone_settings, "wait": True}]}
    (folder / "plan.json").write_text(json.dumps(plan))
    log = folder / "driver.log"
    driver = cluster.popen("driver", [sys.executable, HERE / "_train_job.py", folder / "plan.json"], log=log,
                           role="hosts-driver")
    try:
        # Fit 0: cut worker3's link in the middle of the last phase, then kill worker3.
        last = list(DBN_EPOCHS)[-1]
        _wait_for(lambda: (_progress(folder, 0) or {}).get("phase") == last
                  and _progress(folder, 0)["epoch"] >= CUT_AFTER_EPOCH, "the last phase's epochs", driver, log)
        runs.times["cut"] = time.time()
        cluster.cut_link("worker3")
        time.sleep(CUT_S)  # the fault itself: the link stays down this long
        cluster.restore_link("worker3")
        runs.times["restored"] = time.time()
        restored_at = _progress(folder, 0)["epochs_seen"]
        _wait_for(lambda: (_progress(folder, 0) or {}).get("epochs_seen", 0) >= restored_at + KILL_EPOCHS_AFTER_RESTORE,
                  "epochs after the link returned", driver, log)
        runs.times["killed"] = time.time()
        cluster.kill_host("worker3")
        _wait_for(lambda: (folder / "fit-0.json").exists(), "the DBN fit's end", driver, log)
        # Fit 1: the store host unreachable for less than the retry timeout.
        _wait_for(lambda: (_progress(folder, 1) or {}).get("epochs_seen", 0) >= 1, "the blip fit's first epoch",
                  driver, log)
        runs.times["blip"] = time.time()
        cluster.cut_store()
        time.sleep(STORE_BLIP_S)  # the fault itself
        cluster.restore_store()
        _wait_for(lambda: (folder / "fit-1.json").exists(), "the blip fit's end", driver, log)
        # Fit 2: the store stopped until the fit gives up; then fit 3 resumes it.
        _wait_for(lambda: (_progress(folder, 2) or {}).get("epochs_seen", 0) >= 1, "the outage fit's first epoch",
                  driver, log)
        runs.times["gone"] = time.time()
        cluster.stop_store()
        try:
            _wait_for(lambda: (folder / "fit-2.json").exists(), "the outage fit's failure", driver, log)
        finally:
            cluster.start_store()
        runs.times["back"] = time.time()
        (folder / "go-3").write_text("the store is back")
        _wait_for(lambda: (folder / "fit-3.json").exists(), "the resumed fit's end", driver, log)
        assert driver.wait(timeout=120) == 0, log.read_text()[-4000:]
    finally:
        if driver.poll() is None:
            cluster.stop_process(driver)
    runs.fits = [_read_json(folder / f"fit-{index}.json") for index in range(4)]
    return runs


@pytest.fixture(scope="module")
def runs(cluster_support: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    work = tmp_path_factory.mktemp("hosts")
    with VirtualCluster(workers=3, work_dir=work / "cluster") as cluster:
        folder = work / "driver"
        folder.mkdir()
        yield _orchestrate(cluster, folder)


@pytest.fixture(scope="module")
def reference_accuracy() -> float:
    import rbm
    from rbm.datasets import load_digits01

    split = load_digits01()
    model = train_on_one_node(rbm.DBN(**DBN_SETTINGS), split.X_train, split.y_train, DBN_EPOCHS, PARTITIONS)
    return float(model.score(split.X_test, split.y_test))


def _host(node_name: str) -> str:
    return node_name.rsplit("-", 1)[0]


def _records(fit: dict, phase: str | None = None) -> list[dict]:
    return [record for summary in fit["history"] if phase in (None, summary["phase"]) for record in summary["records"]]


def _every_snapshot_verifies(store_url: str, run: str) -> int:
    """Reads every weight version of ``run`` the store holds (MAC and sha256 checked); how many there were."""
    view = node.open_run(store_url, run, key=KEY)
    count = 0
    for phase in view.record["phases"]:
        for name in view.weights.list_nodes(phase):
            for ref in view.weights.list_versions(phase, name):
                params = view.weights.get_version(ref)
                assert all(np.isfinite(value).all() for value in params.values())
                count += 1
    return count


def test_three_worker_hosts_train_through_hdfs_hearing_each_other_across_hosts(runs: Runs, reference_accuracy: float):
    fit = runs.fit(0)
    assert fit["status"] == "done", fit.get("traceback")
    hosts_seen = {_host(record["node"]) for record in _records(fit)}
    assert hosts_seen == {"worker1", "worker2", "worker3"}
    for phase in DBN_EPOCHS:
        records = _records(fit, phase)
        merged_across: dict[str, set[str]] = {}
        for record in records:
            others = {_host(peer) for peer in record["merged_from"]} - {_host(record["node"])}
            merged_across.setdefault(record["node"], set()).update(others)
        assert merged_across and all(merged_across.values()), (phase, merged_across)
        announced = sum(record["merged_announced"] for record in records)
        listed = sum(record["merged_listed"] for record in records)
        assert announced > listed, (phase, announced, listed)  # most arrive by announcement
        assert not any(summary.get("reachability_warning") for summary in fit["history"] if summary["phase"] == phase)
    for record in _records(fit):  # each node advertised its own host's address, not loopback
        assert record["endpoint"].startswith(f"tcp://{runs.cluster.address(_host(record['node']))}:") \
            if _host(record["node"]) != "worker3" else record["endpoint"].startswith("tcp://10.")
    assert _every_snapshot_verifies(runs.store_url, "dbn") > 0
    assert fit["accuracy"] >= reference_accuracy - ACCURACY_TOLERANCE, (fit["accuracy"], reference_accuracy)


def test_a_worker_host_cut_off_for_20_s_mid_phase_catches_up_and_the_run_completes(runs: Runs,
                                                                                  reference_accuracy: float):
    fit = runs.fit(0)
    assert fit["status"] == "done", fit.get("traceback")
    last = list(DBN_EPOCHS)[-1]
    records = _records(fit, last)
    cut, restored = runs.times["cut"], runs.times["restored"]
    others_during = [record for record in records if cut < record["time"] < restored
                     and _host(record["node"]) != "worker3"]
    assert others_during, "the other hosts trained nothing while worker3 was cut off"
    # After the link returned, worker3 trained again (its node caught up from the store) before it was killed.
    worker3_after = [record for record in records if _host(record["node"]) == "worker3"
                     and restored < record["time"] < runs.times["killed"]]
    assert worker3_after, "worker3 trained nothing between the restored link and its death"
    assert _every_snapshot_verifies(runs.store_url, "dbn") > 0
    assert fit["accuracy"] >= reference_accuracy - ACCURACY_TOLERANCE, (fit["accuracy"], reference_accuracy)
    before = [record for record in records if record["time"] < cut and _host(record["node"]) != "worker3"]
    print(f"\nsamples/s of worker1+worker2 partitions: before the cut {_rate(before):.0f}, "
          f"during it {_rate(others_during):.0f} (training time only)")


def _rate(records: list[dict]) -> float:
    seconds = sum(record["train_s"] for record in records)
    return sum(record["samples"] for record in records) / seconds if seconds else float("nan")


def test_a_worker_host_killed_whole_mid_phase_leaves_a_run_that_completes_on_the_others(runs: Runs,
                                                                                        reference_accuracy: float):
    fit = runs.fit(0)
    assert fit["status"] == "done", fit.get("traceback")
    last = list(DBN_EPOCHS)[-1]
    final_epoch = [summary for summary in fit["history"] if summary["phase"] == last][-1]
    assert {_host(name) for name in final_epoch["nodes"]} == {"worker1", "worker2"}
    killed = runs.times["killed"]
    assert any(_host(record["node"]) == "worker3" for record in _records(fit, last) if record["time"] < killed)
    assert sum(record["samples"] for record in final_epoch["records"]) > 0
    assert fit["accuracy"] >= reference_accuracy - ACCURACY_TOLERANCE, (fit["accuracy"], reference_accuracy)


def test_the_store_host_unreachable_briefly_is_ridden_out_and_the_store_stopped_fails_clearly_then_resumes(runs: Runs):
    blip, gone, resumed = runs.fit(1), runs.fit(2), runs.fit(3)
    assert blip["status"] == "done", blip.get("traceback")
    assert gone["status"] == "failed", gone
    message = gone["error"]
    assert "hdfs://namenode:9870" in message or "namenode" in message, message
    assert any(word in message for word in ("write", "read", "list", "rename", "makedirs", "exists", "status")), message
    assert resumed["status"] == "done", resumed.get("traceback")
    view = node.open_run(runs.store_url, "gone", key=KEY)
    assert view.record["status"] == "done"
    epochs_after = {(summary["phase"], summary["epoch"]) for summary in resumed["history"]}
    epochs_before = {(summary["phase"], summary["epoch"]) for summary in gone["history"]}
    assert epochs_before and not epochs_after & epochs_before  # resumed after what was stored, not from scratch
    assert _every_snapshot_verifies(runs.store_url, "gone") > 0
    assert storage.open_store(runs.store_url).exists("runs/gone/model") or view.record.get("model")
