"""One driver per run, and runs that train nothing are not "done"; temporaries left anywhere are swept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crash_store import harness_model, harness_settings

import node
import storage

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def test_a_second_fit_of_a_run_in_training_is_refused_while_the_first_renews_and_the_first_finishes(spark, digits, tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    config = {"store_url": store_url, "run_id": "shared", "crash_at": None, "lease_timeout_s": 8.0}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]))
    first = subprocess.Popen([sys.executable, str(HERE / "_crash_driver.py"), json.dumps(config)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        store = storage.open_store(store_url)
        deadline = time.monotonic() + 120
        while not store.exists("runs/shared/lease") or not store.list("runs/shared/lease"):  # until the other holds it
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()[-3000:]
            time.sleep(0.1)
        with pytest.raises(node.LeaseHeldError, match=r"run 'shared' is being trained by another driver \(host .*pid "
                                                      rf"{first.pid}.*renewed its lease.*lease_timeout_s"):
            node.Trainer(spark, store_url, run_id="shared", **harness_settings()).fit(
                harness_model(), digits.X_train, digits.y_train)
        assert first.poll() is None  # refused while the first is still training, not after it
        out, err = first.communicate(timeout=180)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err[-3000:]
    assert '"finished": true' in out
    record = node.open_run(store_url, "shared").record
    assert record["status"] == "done" and record["attempts"] == 1
    key = node.resolve_run_key("shared", store_url, create=False).key
    assert storage.LeaseFolder(store, "shared", key).view() == storage.LeaseView(generation=1, released=True,
                                                                                 highest=1)


def test_a_run_that_would_train_nothing_is_refused_unless_only_initializing_is_asked(spark, digits, tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    with pytest.raises(node.TrainingError, match="would train 0 epochs"):
        node.Trainer(spark, store_url, run_id="zero", **harness_settings(epochs=0)).fit(
            harness_model(), digits.X_train, digits.y_train)
    store = storage.open_store(store_url)
    assert not store.exists("runs/zero")
    model = harness_model()
    node.Trainer(spark, store_url, run_id="init", **harness_settings(epochs=0, initialize_only=True)).fit(
        model, digits.X_train, digits.y_train)
    record = node.open_run(store_url, "init").record
    assert record["status"] == "initialized"  # stored, but never called done
    assert store.exists(record["model"]["path"])


def test_temporaries_left_in_every_run_folder_are_swept_when_the_run_resumes(spark, digits, tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    node.Trainer(spark, store_url, run_id="swept", stop_after_phase="rbm0", **harness_settings()).fit(
        harness_model(), digits.X_train, digits.y_train)
    run = tmp_path / "store" / "runs" / "swept"
    folders = [run, run / "peers", run / "phases", run / "model", run / "metrics" / "someone", run / "record",
               run / "lease", run / "weights" / "rbm0", next((run / "weights" / "rbm0").iterdir())]
    planted = []
    an_hour_ago = time.time() - 3600
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        leftover = folder / "._tmp-left-by-a-dead-writer"
        leftover.write_bytes(b"half a file")
        os.utime(leftover, (an_hour_ago, an_hour_ago))
        planted.append(leftover)
    node.Trainer(spark, store_url, run_id="swept", **harness_settings()).fit(harness_model(), digits.X_train,
                                                                            digits.y_train)
    assert [path for path in planted if path.exists()] == []
