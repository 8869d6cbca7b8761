"""Nothing lost: a run stopped at ANY of the driver's store writes, or by Ctrl-C at any epoch end, or by
SIGKILL of the driver process, resumes to the model an uninterrupted run gives -- never to initial weights.

The harness (see ``crash_store.py``) counts the store writes of a small uninterrupted run, then
for each write N in turn: a fit whose N-th write fails, then a fit again with the same run id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from crash_store import (HARNESS_EPOCHS, HARNESS_TOLERANCE, HARNESS_TRAINED, CrashingStore, SimulatedStoreFailure,
                         harness_model, harness_settings)

import node
import node.driver._fit
import rbm
import storage

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
#: Resumed accuracy must lie this close to the uninterrupted run's.
TOLERANCE = HARNESS_TOLERANCE
KILL_TIMEOUT_S = 180.0


def fit(spark, store_url: str, run_id: str, split, **changes) -> rbm.DBN:
    model = harness_model()
    node.Trainer(spark, store_url, run_id=run_id, **harness_settings(**changes)).fit(model, split.X_train,
                                                                                      split.y_train)
    return model


def stored_model(store_url: str, run_id: str) -> rbm.DBN:
    """The run's final model (load_run_model checks the record says done and names its sha256)."""
    return node.load_run_model(node.open_run(store_url, run_id))


@pytest.fixture(scope="module")
def uninterrupted(spark, digits, tmp_path_factory):
    """The reference run's accuracy and the paths of its driver's store writes, in order."""
    store_url = "file://" + str(tmp_path_factory.mktemp("uninterrupted") / "store")
    counting: list[CrashingStore] = []

    def open_counting(url: str, retry_timeout_s: float = 30.0) -> CrashingStore:
        counting.append(CrashingStore(url, crash_at=None, on_crash=lambda path: None))
        return counting[0]

    original = node.driver._fit.open_checked_store
    node.driver._fit.open_checked_store = open_counting
    try:
        model = fit(spark, store_url, "reference", digits)
    finally:
        node.driver._fit.open_checked_store = original
    return model.score(digits.X_test, digits.y_test), counting[0].writes


def test_the_harness_counts_every_kind_of_driver_write(uninterrupted):
    accuracy, writes = uninterrupted
    assert accuracy >= HARNESS_TRAINED
    names = [path.rsplit("/", 1)[-1] for path in writes]
    assert names[0] == "lease.json" and names[-1] == "run.json"
    assert {"run.json", "rbm0.json", "finetune.json", "model.npz"} <= set(names)  # phase results: signed pointers
    assert any(name.startswith("rbm0-") and name.endswith(".npz") for name in names)  # ... to content by sha256
    assert sum(name.endswith(".block") for name in names) == 2  # the driver stores numpy rows' partitions itself
    assert names.count("run.json") >= 1 + sum(HARNESS_EPOCHS.values()) + len(HARNESS_EPOCHS) + 1


def test_a_store_write_failing_at_any_point_resumes_to_the_uninterrupted_model(spark, digits, tmp_path,
                                                                                 uninterrupted, monkeypatch):
    reference, writes = uninterrupted
    store_url = "file://" + str(tmp_path / "store")
    original = node.driver._fit.open_checked_store
    outcomes = {}
    for crash_at in range(1, len(writes) + 1):
        run_id = f"crash-{crash_at}"

        def fail(path: str) -> None:
            raise SimulatedStoreFailure(f"injected: the store refused writing {path}")

        monkeypatch.setattr(node.driver._fit, "open_checked_store",
                            lambda url, retry_timeout_s=30.0: CrashingStore(url, crash_at=crash_at, on_crash=fail))
        with pytest.raises(SimulatedStoreFailure):
            fit(spark, store_url, run_id, digits)
        monkeypatch.setattr(node.driver._fit, "open_checked_store", original)
        model = fit(spark, store_url, run_id, digits)
        accuracy = model.score(digits.X_test, digits.y_test)
        saved = stored_model(store_url, run_id).score(digits.X_test, digits.y_test)
        outcomes[f"{crash_at}:{writes[crash_at - 1].rsplit('/', 1)[-1]}"] = (round(accuracy, 4), round(saved, 4))
    wrong = {point: got for point, got in outcomes.items()
             if abs(got[0] - reference) > TOLERANCE or got[0] != got[1]}
    assert not wrong, (reference, wrong)


@pytest.mark.parametrize("stop_at", range(sum(HARNESS_EPOCHS.values())))
def test_ctrl_c_at_any_epoch_end_resumes_to_the_uninterrupted_model(spark, digits, tmp_path, uninterrupted,
                                                                      stop_at):
    reference, _ = uninterrupted
    store_url = "file://" + str(tmp_path / "store")
    ends = []

    def interrupt(summary: dict) -> None:
        ends.append(summary)
        if len(ends) == stop_at + 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        node.Trainer(spark, store_url, run_id="ctrl-c", on_epoch=interrupt, **harness_settings()).fit(
            harness_model(), digits.X_train, digits.y_train)
    record = node.open_run(store_url, "ctrl-c").record
    assert record["status"] == "failed" and "KeyboardInterrupt" in record["error"]
    resumed = fit(spark, store_url, "ctrl-c", digits)
    assert abs(resumed.score(digits.X_test, digits.y_test) - reference) <= TOLERANCE
    record = node.open_run(store_url, "ctrl-c").record
    assert sum(step["epochs_done"] for step in record["steps"].values()) == sum(HARNESS_EPOCHS.values())
    assert all(not step["restarts"] for step in record["steps"].values())  # nothing had to be trained again


def run_crash_driver(store_url: str, run_id: str, crash_at: int, lease_timeout_s: float) -> dict:
    config = {"store_url": store_url, "run_id": run_id, "crash_at": crash_at, "lease_timeout_s": lease_timeout_s}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]))
    done = subprocess.run([sys.executable, str(HERE / "_crash_driver.py"), json.dumps(config)], env=env,
                          capture_output=True, text=True, timeout=KILL_TIMEOUT_S, cwd=ROOT)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == -9 and lines and "killed_before" in lines[-1], (done.returncode, done.stderr[-3000:])
    return lines[-1]


def write_kind(path: str) -> str:
    """A driver write as two runs share it: a training partition's by its folder alone (the driver writes
    the fit's partitions at once, in no fixed order, under names signed for the fit)."""
    return path.split("/blocks/")[0] + "/blocks/" if "/blocks/" in path else path


def test_a_driver_killed_with_sigkill_mid_run_is_taken_over_and_resumed(spark, digits, tmp_path, uninterrupted):
    reference, writes = uninterrupted
    store_url = "file://" + str(tmp_path / "store")
    lease_timeout_s = 3.0
    # Three points: inside the first phase, right after a phase's last epoch, just before the model.
    points = [3, writes.index(next(p for p in writes if p.endswith("/rbm0.json"))) + 1,
              writes.index(next(p for p in writes if p.endswith("model.npz"))) + 1]
    for crash_at in points:
        run_id = f"killed-{crash_at}"
        killed = run_crash_driver(store_url, run_id, crash_at, lease_timeout_s)
        assert write_kind(killed["killed_before"]) == write_kind(writes[crash_at - 1].replace("reference", run_id))
        with pytest.raises(node.LeaseHeldError, match="another driver"):  # the dead driver's lease is still fresh
            fit(spark, store_url, run_id, digits, lease_timeout_s=lease_timeout_s)
        deadline = time.monotonic() + 10 * lease_timeout_s
        while True:  # take over once the lease has gone stale
            try:
                model = fit(spark, store_url, run_id, digits, lease_timeout_s=lease_timeout_s)
                break
            except node.LeaseHeldError:
                assert time.monotonic() < deadline, "the dead driver's lease was never taken over"
                time.sleep(0.5)
        assert abs(model.score(digits.X_test, digits.y_test) - reference) <= TOLERANCE, crash_at
        assert stored_model(store_url, run_id).score(digits.X_test, digits.y_test) == model.score(digits.X_test,
                                                                                                 digits.y_test)


def test_a_run_whose_last_epoch_snapshots_are_all_gone_trains_the_phase_again_and_says_so(spark, digits, tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    stopped = []

    def stop_after_finetune_epochs(summary: dict) -> None:
        if summary["phase"] == "finetune" and summary["epoch"] == HARNESS_EPOCHS["finetune"] - 1:
            stopped.append(summary)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        node.Trainer(spark, store_url, run_id="lost", on_epoch=stop_after_finetune_epochs,
                     **harness_settings()).fit(harness_model(), digits.X_train, digits.y_train)
    store = storage.open_store(store_url)
    store.delete("runs/lost/weights/finetune", recursive=True)  # every snapshot of the phase is gone
    model = fit(spark, store_url, "lost", digits)
    record = node.open_run(store_url, "lost").record
    restarts = record["steps"]["finetune"]["restarts"]
    assert len(restarts) == 1 and "no usable snapshot" in restarts[0]["reason"]
    assert record["status"] == "done"
    assert model.score(digits.X_test, digits.y_test) >= HARNESS_TRAINED  # trained again, not left at its initial weights
