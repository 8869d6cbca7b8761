"""A run's model, a ``sharing`` peer's update and a fit's training partition, grown far past what they should
hold (sparse: no disk used), are refused or skipped by their size, naming the file, its size and the bound, and
never read whole (:mod:`support.planted_files` spies on the store's reads)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from support.planted_files import PLANTED_BYTES, grow, spy_on_planted_reads

import node
import storage
from node.modes._sharing import SparseUpdate, UpdateExchange
from node._contract import NodeConfig
from node.executor._resident import NodeData, write_partition
from node.run._run_access import run_model_arrays
from node.run._work_folders import blocks_folder
from rbm import save_model


@pytest.fixture
def planted_reads(monkeypatch) -> list[tuple[str, int | None]]:
    return spy_on_planted_reads(monkeypatch)


def _done_run(tmp_path, run: str, *, record_size: bool) -> tuple[str, storage.Store, str, int]:
    """A finished run whose record names its model (with its size, or as records written before kept it)."""
    store_url = "file://" + str(tmp_path / "store")
    store = storage.open_store(store_url)
    runs = storage.RunStore(store, run, node.resolve_run_key(run, store_url).key)
    local = str(tmp_path / "model.npz")
    save_model(local, {"kind": "dbn"}, {"rbm0.W": np.ones((4, 3), np.float32), "rbm0.hbias": np.zeros(3, np.float32)})
    with open(local, "rb") as handle:
        payload = handle.read()
    store.write_bytes(runs.model_path(), payload)
    model = {"path": runs.model_path(), "sha256": storage.sha256_hex(payload)}
    if record_size:
        model["size_bytes"] = len(payload)
    runs.write_record({"run": run, "phases": ["rbm0"], "status": "done", "model": model})
    return store_url, store, runs.model_path(), len(payload)


def test_a_run_model_grown_past_the_size_its_record_names_is_refused_unread(tmp_path, planted_reads):
    store_url, store, path, size = _done_run(tmp_path, "grown", record_size=True)
    assert set(run_model_arrays(node.open_run(store_url, "grown"))) == {"rbm0.W", "rbm0.hbias"}
    grow(store, path)

    with pytest.raises(node.TrainingError) as caught:
        run_model_arrays(node.open_run(store_url, "grown"))
    assert path in str(caught.value) and f"{PLANTED_BYTES} bytes" in str(caught.value)
    assert f"the {size} bytes allowed" in str(caught.value)
    assert planted_reads == []  # refused by its size: not a byte read


def test_a_run_model_whose_record_names_no_size_is_bounded_by_the_stores_cap(tmp_path, planted_reads, monkeypatch):
    store_url, store, path, _size = _done_run(tmp_path, "older", record_size=False)
    assert set(run_model_arrays(node.open_run(store_url, "older"))) == {"rbm0.W", "rbm0.hbias"}  # still served
    monkeypatch.setattr(storage, "UNRECORDED_FILE_MAX_BYTES", 1 << 30)  # below the planted size, not written to disk
    grow(store, path)

    with pytest.raises(node.TrainingError, match=f"is {PLANTED_BYTES} bytes, larger than the {1 << 30} bytes"):
        run_model_arrays(node.open_run(store_url, "older"))
    assert planted_reads == []


def test_a_sharing_update_grown_under_its_signed_name_is_skipped_unread(tmp_path, planted_reads, caplog):
    store = storage.open_store(str(tmp_path / "store"))
    key = b"k" * 32
    sender, receiver = UpdateExchange(store, "r1", key, "node-a"), UpdateExchange(store, "r1", key, "node-b")
    sender.publish("rbm0", 1, SparseUpdate(0.5, {"W": np.array([1, -4], np.int32)}))
    sender.publish("rbm0", 2, SparseUpdate(0.5, {"W": np.array([2], np.int32)}))
    first = f"runs/r1/updates/rbm0/node-a/{sorted(store.list('runs/r1/updates/rbm0/node-a'))[0]}"
    grow(store, first)  # the signed name kept: only the content is no longer the update it names
    bound = SparseUpdate.size_bound({"W": (2, 2)})

    with caplog.at_level(logging.WARNING, logger="node.modes._sharing"):
        received = receiver.receive("rbm0", bound)
    assert [(peer, seq) for peer, seq, _update, _size in received] == [("node-a", 2)]
    assert receiver.refused == {first}
    assert first in caplog.text and f"is {PLANTED_BYTES} bytes, larger than the {bound} bytes" in caplog.text
    assert planted_reads == [(first, bound)]  # at most bound + 1 bytes of it


def test_a_sparse_update_bound_holds_the_densest_update_of_the_shapes():
    shapes = {"W": (30, 20), "hbias": (20,)}
    densest = SparseUpdate(0.1, {name: np.arange(1, int(np.prod(shape)) + 1, dtype=np.int32)
                                 for name, shape in shapes.items()})
    assert len(densest.encode()) <= SparseUpdate.size_bound(shapes) < 2 * len(densest.encode())


def test_a_training_partition_grown_past_the_stores_cap_is_refused_by_its_size_unread(tmp_path, planted_reads,
                                                                                      monkeypatch):
    store_url = "file://" + str(tmp_path / "store")
    store = storage.open_store(store_url)
    config = NodeConfig(run="r1", fit_id="f" * 32, store_url=store_url, store_retry_timeout_s=5.0, key=b"k" * 32,
                        spec={}, feature_shape=(2,), classes=None, seed=0, fanout=None, merge_alpha=None,
                        keep_versions=3, anti_entropy_interval_s=1.0, peer_refresh_interval_s=1.0, flush_timeout_s=5.0)
    write_partition(store, config, 0, np.ones((3, 2), np.float32), np.zeros(3))
    folder = blocks_folder(config.run, config.fit_id)
    path = f"{folder}/{store.list(folder)[0]}"
    monkeypatch.setattr(storage, "UNRECORDED_FILE_MAX_BYTES", 1 << 30)  # below the planted size
    grow(store, path)

    data = NodeData(store, config, "node-a")
    with pytest.raises(node.TrainingError) as caught:
        data.slot([0])
    assert path in str(caught.value) and f"is {PLANTED_BYTES} bytes, larger than the {1 << 30} bytes" in str(
        caught.value)
    assert planted_reads == []  # refused by its size: not a byte read
