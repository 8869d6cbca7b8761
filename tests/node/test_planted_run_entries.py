"""Files planted where a run's folders should be (by someone who can write the store, without the key):
the sweep of a resumed fit and the ``sharing`` mode's exchange skip them and go on."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from crash_store import harness_model, harness_settings
from support.fifos import call_beside_fifos

import node
import storage
from node.modes._sharing import SparseUpdate, UpdateExchange
from node.modes._sync_rounds import RoundPlace, SyncJob
from node.run import sweep_temporaries

KEY = b"planted-entries-key-0123456789"


def test_the_sweep_of_a_run_passes_over_files_planted_where_its_folders_would_be(tmp_path):
    store = storage.open_store(str(tmp_path / "store"))
    ref = storage.WeightStore(store, "r1", KEY).put_version("rbm0", "n1", 1, {"W": np.ones((2, 2), np.float32)})
    for planted in ("runs/r1/weights/phase", "runs/r1/weights/rbm0/node", "runs/r1/metrics/node",
                    "runs/r1/model/00000007"):
        store.write_bytes(planted, b"a file where a folder would be")
    store.write_bytes("runs/r1/weights/rbm0/n1/._tmp-dead", b"half a snapshot")

    assert sweep_temporaries(store, "r1", older_than_s=0.0) == 1
    assert store.list("runs/r1/weights/rbm0/n1") == [ref.path.rsplit("/", 1)[-1]]
    assert store.read_bytes("runs/r1/weights/rbm0/node") == b"a file where a folder would be"  # not ours: kept


def test_the_sharing_exchange_passes_over_a_file_planted_where_a_peers_folder_would_be(tmp_path):
    store = storage.open_store(str(tmp_path / "store"))
    sender, receiver = UpdateExchange(store, "r1", KEY, "node-a"), UpdateExchange(store, "r1", KEY, "node-c")
    update = SparseUpdate(0.5, {"W": np.array([1, -4], np.int32)})
    sender.publish("rbm0", 1, update)
    store.write_bytes("runs/r1/updates/rbm0/node-b", b"a file where a peer's folder would be")

    bound = SparseUpdate.size_bound({"W": (5, 5)})
    assert [(peer, seq) for peer, seq, _update, _size in receiver.receive("rbm0", bound)] == [("node-a", 1)]
    assert receiver.receive("rbm0", bound) == []  # listed again: nothing new, the planted file skipped again
    assert receiver.refused == {"runs/r1/updates/rbm0/node-b"}


@pytest.mark.slow
def test_a_run_resumes_and_finishes_beside_entries_of_the_wrong_kind_planted_in_its_folders(spark, digits, tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    node.Trainer(spark, store_url, run_id="planted", stop_after_phase="rbm0", **harness_settings(mode="async")).fit(
        harness_model(), digits.X_train, digits.y_train)
    run = tmp_path / "store" / "runs" / "planted"
    fifo = run / "peers" / "fifo.json"
    os.mkfifo(fifo)  # a node that opened it would wait for a writer: its task would never end
    (run / "peers" / "folder.json").mkdir()
    (run / "weights" / "finetune").mkdir()
    for planted in (run / "weights" / "planted", run / "weights" / "finetune" / "planted", run / "metrics" / "planted"):
        planted.write_bytes(b"a file where a folder would be")

    def resume() -> Any:
        trainer = node.Trainer(spark, store_url, run_id="planted", **harness_settings(mode="async"))
        return trainer.fit(harness_model(), digits.X_train, digits.y_train)

    # nodes that opened the FIFO are released after 10 minutes, and the test fails
    model = call_beside_fifos(resume, [fifo], wait_s=600.0, release_s=300.0,
                              stuck="the resumed fit did not finish within 10 minutes")
    record = node.open_run(store_url, "planted").runs.read_record()
    assert record["status"] == "done"
    assert model.score(digits.X_test, digits.y_test) > 0.5
    assert (run / "weights" / "planted").read_bytes() == b"a file where a folder would be"  # not ours: left alone


def test_the_sync_barrier_passes_over_a_round_record_that_is_a_folder_or_too_large(tmp_path):
    store = storage.open_store(str(tmp_path / "store"))
    task = SimpleNamespace(node=SimpleNamespace(key=KEY, run="r1", fit_id="f" * 32), phase="rbm0", epoch=0)
    job = SyncJob(store, task, 0)
    folder = job.round_folder(RoundPlace(0, 0))
    store.makedirs(f"{folder}/0.json")
    store.write_bytes(f"{folder}/1.json", b" " * (1 << 20))
    assert [job.read_record(0, RoundPlace(0, 0), slot) for slot in (0, 1, 2)] == [None, None, None]
