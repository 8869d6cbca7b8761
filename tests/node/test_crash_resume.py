"""Nothing lost: a run stopped at ANY of the driver's store writes, or by Ctrl-C at any epoch end, or by
SIGKILL of the driver process, resumes to the model an uninterrupted run gives -- never to initial weights.

The harness (see ``crash_store.py``) counts the store writes of a small uninterrupted run, then
for each write N in turn: a fit whose N-th write fails (the fit's error handling runs), or a fit
that dies there (nothing after write N reaches the store: no "failed" record, the lease left held,
as SIGKILL leaves it), then a fit again with the same run id.  After every crash the newest record
must name only what is stored, and the resumed model must lie within the harness's tolerance of
the uninterrupted one.  Real SIGKILLs of a driver process at one write of each kind check that the
in-process "dies" mode leaves what a killed process leaves.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crash_store import (ASYNC_HARNESS_TOLERANCE, HARNESS_EPOCHS, HARNESS_LEASE_TIMEOUT_S, HARNESS_TOLERANCE,
                         HARNESS_TRAINED, CrashingStore, SimulatedStoreFailure, assert_record_names_only_what_is_stored,
                         harness_model, harness_settings)

import node
import node.driver._fit
import rbm
import storage
from node._contract import params_digest

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


def write_kind(path: str) -> str:
    """What a driver write is, from its path: lease, record, block (a training partition), phase result, best,
    model."""
    if "/blocks/" in path:  # the driver writes a fit's partitions at once, in no fixed order
        return "block"
    folder, name = path.rsplit("/", 2)[-2:]
    if folder == "phases":
        return "best" if ".best-" in name else "phase result"
    return {"lease": "lease", "record": "record"}.get(folder, "model" if name == "model.npz" else path)


def test_the_harness_counts_every_kind_of_driver_write(uninterrupted):
    accuracy, writes = uninterrupted
    assert accuracy >= HARNESS_TRAINED
    kinds = [write_kind(path) for path in writes]
    assert kinds[0] == "lease" and kinds[-2:] == ["record", "lease"]  # taken first; the run marked done, released
    assert set(kinds) == {"lease", "record", "block", "phase result", "model"}, kinds  # nothing else, nothing replaced
    assert kinds.count("block") == 2  # the driver stores numpy rows' partitions itself, once per fit
    assert kinds.count("record") == 1 + sum(HARNESS_EPOCHS.values()) + len(HARNESS_EPOCHS) + 1
    assert all(path.rsplit("/", 1)[-1].startswith("00000001-") for path in writes if write_kind(path) == "record")


def resume_after(spark, digits, store_url: str, run_id: str, crash_at: int, path: str) -> tuple[float, float]:
    """Check what the crash left, fit the run again, check again; the resumed and the stored model's accuracy."""
    before = None
    if crash_at > 2:  # the first record is write 2 (after the lease)
        before = assert_record_names_only_what_is_stored(store_url, run_id)
    model = fit(spark, store_url, run_id, digits)
    record = assert_record_names_only_what_is_stored(store_url, run_id)
    if before is not None and before["status"] == "done":  # stopped at its lease's release: done, and left so
        assert record == before, (crash_at, path)
    else:
        assert record["status"] == "done" and record["attempts"] == (2 if crash_at > 2 else 1), (crash_at, path)
    return (round(model.score(digits.X_test, digits.y_test), 4),
            round(stored_model(store_url, run_id).score(digits.X_test, digits.y_test), 4))


#: What a fit that dies at a write raises: the crash point's fault, or -- where the driver writes its training
#: partitions from several threads and another thread's write reaches the dead store first -- the dead store's,
#: which the fit raises as a StoreAccessError.
DRIVER_STOPPED = (SimulatedStoreFailure, node.StoreAccessError)


@pytest.mark.parametrize("dies", [False, True], ids=["a write fails", "the driver dies"])
def test_a_driver_stopped_at_any_store_write_resumes_to_the_uninterrupted_model(spark, digits, tmp_path,
                                                                                  uninterrupted, monkeypatch, dies):
    reference, writes = uninterrupted
    store_url = "file://" + str(tmp_path / "store")
    original = node.driver._fit.open_checked_store
    outcomes = {}
    for crash_at in range(1, len(writes) + 1):
        run_id = f"crash-{crash_at}"

        def fail(path: str) -> None:
            raise SimulatedStoreFailure(f"injected: the store refused writing {path}")

        monkeypatch.setattr(node.driver._fit, "open_checked_store", lambda url, retry_timeout_s=30.0: CrashingStore(
            url, crash_at=crash_at, on_crash=fail, dies=dies))
        with pytest.raises(DRIVER_STOPPED if dies else SimulatedStoreFailure):
            fit(spark, store_url, run_id, digits)
        monkeypatch.setattr(node.driver._fit, "open_checked_store", original)
        path = writes[crash_at - 1]
        outcomes[f"{crash_at}:{write_kind(path)}"] = resume_after(spark, digits, store_url, run_id, crash_at, path)
    wrong = {point: got for point, got in outcomes.items()
             if abs(got[0] - reference) > TOLERANCE or got[0] != got[1]}
    assert not wrong, (reference, wrong)


# One epoch end of each kind among the harness's 8 (rbm0: 0-1, finetune: 2-7): inside the first phase (0), a
# phase's last (1), the next phase's first (2), inside the last phase (5; 3, 4 and 6 take the same path), the
# fit's last (7).  A store write failing at ANY point, those of every epoch end among them, is the test above.
_RBM0, _FINETUNE = HARNESS_EPOCHS["rbm0"], HARNESS_EPOCHS["finetune"]
EPOCH_END_KINDS = sorted({0, _RBM0 - 1, _RBM0, _RBM0 + _FINETUNE // 2, _RBM0 + _FINETUNE - 1})


@pytest.mark.parametrize("stop_at", EPOCH_END_KINDS)
def test_ctrl_c_at_any_epoch_end_resumes_to_the_uninterrupted_model(spark, digits, tmp_path, uninterrupted,
                                                                      stop_at):
    # In async mode: its next epoch's job is queued behind the one that ended, so the interrupted fit
    # leaves snapshots of an epoch the record does not count, which the resume must train again.
    reference, _ = uninterrupted
    store_url = "file://" + str(tmp_path / "store")
    ends = []

    def interrupt(summary: dict) -> None:
        ends.append(summary)
        if len(ends) == stop_at + 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        node.Trainer(spark, store_url, run_id="ctrl-c", on_epoch=interrupt, **harness_settings(mode="async")).fit(
            harness_model(), digits.X_train, digits.y_train)
    record = node.open_run(store_url, "ctrl-c").record
    assert record["status"] == "failed" and record["error"] == "interrupted (Ctrl-C)"
    resumed = fit(spark, store_url, "ctrl-c", digits, mode="async")
    assert resumed.score(digits.X_test, digits.y_test) >= reference - ASYNC_HARNESS_TOLERANCE  # async lands lower
    record = node.open_run(store_url, "ctrl-c").record
    assert sum(step["epochs_done"] for step in record["steps"].values()) == sum(HARNESS_EPOCHS.values())
    assert all(not step["restarts"] for step in record["steps"].values())  # nothing had to be trained again
    assert "error" not in record and record["previous_error"] == "interrupted (Ctrl-C)"  # the done fit's: none


def test_an_async_fit_stopped_while_the_next_epoch_trains_resumes_from_the_recorded_epoch_not_the_newer_snapshots(
        spark, digits, tmp_path, monkeypatch):
    # Ctrl-C at finetune epoch 2's end, once epoch 3's job (queued behind it) has written snapshots: the record
    # counts 2 epochs, so the resume must start epoch 3 from epoch 2's snapshots, not from part of epoch 3.
    from node.driver._fit_phases import LeasedFit

    store_url, run_id = "file://" + str(tmp_path / "store"), "stopped-ahead"

    def weights() -> storage.WeightStore:
        key = node.resolve_run_key(run_id, store_url, create=False).key
        return storage.WeightStore(storage.open_store(store_url), run_id, key)

    def interrupt(summary: dict) -> None:
        if summary["phase"] != "finetune" or summary["epoch"] != 1:
            return
        ended, deadline = summary["versions"], time.monotonic() + 120
        while not any(weights().list_versions("finetune", name)[-1].version > version
                      for name, version in ended.items()):
            assert time.monotonic() < deadline, "epoch 3 wrote no snapshot"
            time.sleep(0.01)
        raise KeyboardInterrupt

    settings = harness_settings(mode="async", partitions=4)
    with pytest.raises(KeyboardInterrupt):
        node.Trainer(spark, store_url, run_id=run_id, on_epoch=interrupt, **settings).fit(
            harness_model(), digits.X_train, digits.y_train)
    step = node.open_run(store_url, run_id).record["steps"]["finetune"]
    assert step["epochs_done"] == 2 and set(step["versions"]) == set(step["nodes"])
    recorded = params_digest(weights().consolidate("finetune", step["nodes"], as_of=step["versions"]).params)
    assert recorded != params_digest(weights().consolidate("finetune", step["nodes"]).params)

    starts, real_start = [], LeasedFit._phase_start

    def phase_start(leased, phase):
        starts.append((phase, *real_start(leased, phase)))
        return starts[-1][1:]

    monkeypatch.setattr(LeasedFit, "_phase_start", phase_start)
    fit(spark, store_url, run_id, digits, mode="async", partitions=4)
    (phase, start, consolidated), = [entry for entry in starts if entry[0] == "finetune"]
    assert consolidated and params_digest(start) == recorded


def run_crash_driver(store_url: str, run_id: str, crash_at: int, lease_timeout_s: float) -> dict:
    config = {"store_url": store_url, "run_id": run_id, "crash_at": crash_at, "lease_timeout_s": lease_timeout_s}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]))
    done = subprocess.run([sys.executable, str(HERE / "_crash_driver.py"), json.dumps(config)], env=env,
                          capture_output=True, text=True, timeout=KILL_TIMEOUT_S, cwd=ROOT)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == -9 and lines and "killed_before" in lines[-1], (done.returncode, done.stderr[-3000:])
    return lines[-1]


def test_a_driver_killed_with_sigkill_at_a_write_of_each_kind_is_taken_over_and_resumed(spark, digits, tmp_path,
                                                                                          uninterrupted, caplog):
    reference, writes = uninterrupted
    store_url = "file://" + str(tmp_path / "store")
    kinds = [write_kind(path) for path in writes]
    # One point of each kind: a training partition, a mid-phase record (the first after the partitions), the
    # first phase result, the model, the record saying done.
    first_block = kinds.index("block")
    points = [first_block + 1, kinds.index("record", first_block) + 1, kinds.index("phase result") + 1,
              kinds.index("model") + 1, len(writes) - 1]
    for crash_at in points:
        run_id = f"killed-{crash_at}"
        killed = run_crash_driver(store_url, run_id, crash_at, HARNESS_LEASE_TIMEOUT_S)
        assert killed["killed_before"].startswith(f"runs/{run_id}/")  # (a phase result's name is its content's)
        assert write_kind(killed["killed_before"]) == kinds[crash_at - 1]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="node.run._lease"):
            accuracy, saved = resume_after(spark, digits, store_url, run_id, crash_at, killed["killed_before"])
        # The dead driver was a process of this host: its lease is taken over at once, not watched for the timeout.
        assert f"run {run_id}: taking over from driver" in caplog.text and "no longer runs" in caplog.text
        assert abs(accuracy - reference) <= TOLERANCE and accuracy == saved, crash_at
        run_key = node.resolve_run_key(run_id, store_url, create=False).key
        holder = storage.LeaseFolder(storage.open_store(store_url), run_id, run_key).holder(2)
        assert holder["pid"] == os.getpid()  # taken over as the lease's next generation


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


def test_a_driver_dying_around_an_early_stopping_best_resumes_with_a_best_the_record_names(spark, digits, tmp_path,
                                                                                            monkeypatch):
    store_url = "file://" + str(tmp_path / "store")
    watching = dict(validation_fraction=0.2, early_stopping={"metric": "val_accuracy", "patience": 10},
                    mode="async")  # early stopping ends a phase between two epochs: a mode that trains epoch by epoch
    points = {  # the finetune phase's first epoch always improves on "no best yet"
        "before its first best": lambda writes: write_kind(writes[-1]) == "best",
        "before the record naming it": lambda writes: len(writes) > 1 and write_kind(writes[-2]) == "best",
        "before the record saying done": lambda writes: len(writes) > 1 and write_kind(writes[-2]) == "model",
    }
    for index, (where, crash_when) in enumerate(points.items()):
        run_id = f"best-{index}"

        def die(path: str) -> None:
            raise SimulatedStoreFailure(f"killed before writing {path}")

        monkeypatch.setattr(node.driver._fit, "open_checked_store", lambda url, retry_timeout_s=30.0: CrashingStore(
            url, crash_at=None, crash_when=crash_when, on_crash=die, dies=True))
        with pytest.raises(SimulatedStoreFailure):
            fit(spark, store_url, run_id, digits, **watching)
        monkeypatch.undo()
        state = assert_record_names_only_what_is_stored(store_url, run_id)["steps"]["finetune"].get("early_stopping")
        assert (state is not None and "best_file" in state) == (where == "before the record saying done"), where
        model = fit(spark, store_url, run_id, digits, **watching)
        record = assert_record_names_only_what_is_stored(store_url, run_id)
        assert record["status"] == "done" and model.score(digits.X_test, digits.y_test) >= HARNESS_TRAINED, where
        assert "early stopping" in record["steps"]["finetune"]["result"]["origin"]
        store = storage.open_store(store_url)  # once done, the bests and the dead driver's model are gone
        assert not [name for name in store.list(f"runs/{run_id}/phases") if ".best-" in name], where
        assert "best_file" not in record["steps"]["finetune"]["early_stopping"]
        assert store.list(f"runs/{run_id}/model") == ["00000002"], where
