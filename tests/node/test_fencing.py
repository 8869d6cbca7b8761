"""Fenced writes: a driver paused past its lease (SIGSTOP, then SIGCONT) changes nothing a newer driver wrote;
a run on a WebHDFS server that cannot replace a file never needs to.

A driver process (``_crash_driver.py``) stops its whole process group -- Python, the JVM, its Python
workers, as Ctrl-Z or a frozen VM would -- just before one of its store writes.  A fit in this process
watches its silent lease for the timeout, takes the run over and trains it to the end.  Then the paused
driver is continued: it carries on with the write it was about to make, and must stop at once, saying
which driver took the run, while what readers of the run see (the newest record, the model and the
phase results it names) stays byte for byte what the newer driver left.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crash_store import (HARNESS_TOLERANCE, CrashingStore, SimulatedStoreFailure, assert_record_names_only_what_is_stored,
                         harness_model, harness_settings)

import node
import node.driver._fit
import storage
from support.webhdfs_server import WebHDFSServer

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LEASE_TIMEOUT_S = 3.0
PROCESS_TIMEOUT_S = 240.0


def start_paused_driver(store_url: str, run_id: str, crash_on: str) -> subprocess.Popen:
    config = {"store_url": store_url, "run_id": run_id, "crash_on": crash_on, "action": "pause",
              "lease_timeout_s": LEASE_TIMEOUT_S}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]))
    return subprocess.Popen([sys.executable, str(HERE / "_crash_driver.py"), json.dumps(config)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_until_paused(driver: subprocess.Popen) -> str:
    """The path the driver stopped before, once it (its process group) is stopped."""
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while not select.select([driver.stdout], [], [], 0.5)[0]:
        assert driver.poll() is None and time.monotonic() < deadline, driver.stderr.read()[-3000:]
    line = driver.stdout.readline()
    assert line.startswith('{"paused_before"'), (line, driver.stderr.read()[-3000:] if driver.poll() else "")
    with open(f"/proc/{driver.pid}/stat") as stat:
        while stat.read().rsplit(")", 1)[1].split()[0] != "T":  # the process state: stopped
            assert time.monotonic() < deadline, "the driver never stopped"
            time.sleep(0.05)  # polling another process's state with a deadline
            stat.seek(0)
    return json.loads(line)["paused_before"]


def what_readers_see(store_url: str, run_id: str) -> dict[str, bytes]:
    """The newest record's file, and every file it names (phase results, the model), byte for byte."""
    store = storage.open_store(store_url)
    record = assert_record_names_only_what_is_stored(store_url, run_id)
    names = sorted(store.list(f"runs/{run_id}/record"))
    newest = max(names, key=lambda name: tuple(int(part) for part in name[:-len(".json")].split("-")))
    paths = [f"runs/{run_id}/record/{newest}", record["model"]["path"]]
    paths += [f"runs/{run_id}/phases/{step['result']['file']}" for step in record["steps"].values()]
    return {path: store.read_bytes(path) for path in paths}


@pytest.mark.parametrize("paused_before, continued", [
    ("/record/00000001-00000005\\.json$", "after the run finished"),  # mid-finetune, about to record an epoch
    ("/model/", "after the run finished"),  # about to store the model it trained
    ("/record/00000001-00000005\\.json$", "while the newer driver trains"),
], ids=["at an epoch's record", "at the model", "continued mid-takeover"])
def test_a_driver_paused_past_its_lease_and_continued_changes_nothing_the_newer_driver_wrote(
        spark, digits, tmp_path, paused_before, continued):
    store_url = "file://" + str(tmp_path / "store")
    driver = start_paused_driver(store_url, "paused", paused_before)
    try:
        stopped_at = wait_until_paused(driver)
        mid_takeover = continued == "while the newer driver trains"

        def continue_paused(summary: dict) -> None:
            if mid_takeover and summary["phase"] == "finetune" and summary["epoch"] == 0:
                os.killpg(driver.pid, signal.SIGCONT)  # the old driver wakes up while this one trains

        model = harness_model()
        node.Trainer(spark, store_url, run_id="paused", on_epoch=continue_paused,
                     **harness_settings(lease_timeout_s=LEASE_TIMEOUT_S)).fit(model, digits.X_train, digits.y_train)
        finished = what_readers_see(store_url, "paused")
        os.killpg(driver.pid, signal.SIGCONT)
        out, err = driver.communicate(timeout=PROCESS_TIMEOUT_S)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)  # the process group this test started
            driver.communicate(timeout=60)
    assert driver.returncode != 0 and '"finished"' not in out, (stopped_at, out, err[-3000:])
    assert "LeaseLostError" in err and f"taken over by another driver (host {socket.gethostname()}, pid {os.getpid()}" \
        in err, err[-3000:]
    assert what_readers_see(store_url, "paused") == finished  # byte for byte
    view = node.open_run(store_url, "paused")
    assert view.record["status"] == "done" and view.record["attempts"] == 2
    accuracy = node.load_run_model(view).score(digits.X_test, digits.y_test)
    assert accuracy == model.score(digits.X_test, digits.y_test)
    if continued == "while the newer driver trains":  # it trained on, beside the stale one, to a model as good
        reference = harness_model()
        node.Trainer(spark, store_url, run_id="reference", **harness_settings()).fit(
            reference, digits.X_train, digits.y_train)
        assert abs(accuracy - reference.score(digits.X_test, digits.y_test)) <= HARNESS_TOLERANCE


def test_a_run_on_a_webhdfs_server_that_cannot_replace_a_file_never_needs_to_and_resumes_from_its_last_writes(
        spark, digits, tmp_path, monkeypatch):
    with WebHDFSServer(tmp_path / "hdfs", rename_overwrite=False) as server:
        store_url = server.store_url("/store")
        opened: list[CrashingStore] = []

        def driver_store(crash_at: int | None):
            def open_store(url: str, retry_timeout_s: float = 30.0) -> CrashingStore:
                opened.append(CrashingStore(url, crash_at=crash_at, on_crash=die, dies=True))
                return opened[-1]
            return open_store

        def die(path: str) -> None:
            raise SimulatedStoreFailure(f"killed before writing {path}")

        monkeypatch.setattr(node.driver._fit, "open_checked_store", driver_store(None))
        reference = harness_model()
        node.Trainer(spark, store_url, run_id="reference", **harness_settings()).fit(
            reference, digits.X_train, digits.y_train)
        writes = opened[-1].writes
        assert opened[-1].backend.replaces_atomically is not False  # the driver never replaced a file
        for crash_at in (len(writes) - 2, len(writes) - 1):  # killed before the model, before the record saying done
            run_id = f"crash-{crash_at}"
            monkeypatch.setattr(node.driver._fit, "open_checked_store", driver_store(crash_at))
            with pytest.raises(SimulatedStoreFailure):
                node.Trainer(spark, store_url, run_id=run_id, **harness_settings()).fit(
                    harness_model(), digits.X_train, digits.y_train)
            monkeypatch.undo()
            assert assert_record_names_only_what_is_stored(store_url, run_id)["status"] == "running"
            resumed = harness_model()
            node.Trainer(spark, store_url, run_id=run_id, **harness_settings()).fit(
                resumed, digits.X_train, digits.y_train)
            assert assert_record_names_only_what_is_stored(store_url, run_id)["status"] == "done"
            assert abs(resumed.score(digits.X_test, digits.y_test)
                       - reference.score(digits.X_test, digits.y_test)) <= HARNESS_TOLERANCE


def test_an_operator_removing_the_lease_folder_of_a_training_run_brings_back_no_old_generation(spark, digits,
                                                                                               tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    store = storage.open_store(store_url)
    driver = start_paused_driver(store_url, "unlocked", "/record/00000001-00000005\\.json$")  # mid-finetune
    try:
        wait_until_paused(driver)
        store.delete("runs/unlocked/lease", recursive=True)  # the natural "unlock" of a run that looks stuck
        model = harness_model()
        node.Trainer(spark, store_url, run_id="unlocked", **harness_settings(lease_timeout_s=LEASE_TIMEOUT_S)).fit(
            model, digits.X_train, digits.y_train)  # taken at once: lease/ is empty
        finished = what_readers_see(store_url, "unlocked")
        os.killpg(driver.pid, signal.SIGCONT)
        out, err = driver.communicate(timeout=PROCESS_TIMEOUT_S)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)  # the process group this test started
            driver.communicate(timeout=60)
    assert driver.returncode != 0 and '"finished"' not in out and "LeaseLostError" in err, err[-3000:]
    assert what_readers_see(store_url, "unlocked") == finished  # byte for byte
    newest = max(store.list("runs/unlocked/record"))
    assert newest.startswith("00000002-"), newest  # above the records of generation 1, not generation 1 again
    view = node.open_run(store_url, "unlocked")
    assert view.record["status"] == "done"
    assert node.load_run_model(view).score(digits.X_test, digits.y_test) == model.score(digits.X_test, digits.y_test)
    key = node.resolve_run_key("unlocked", store_url, create=False).key
    assert storage.LeaseFolder(store, "unlocked", key).holder(2)["pid"] == os.getpid()
