"""Files planted in the store, grown far past what they should hold (sparse: no disk used), are refused by their
size, naming the file, its size and the bound, and never read whole (:mod:`support.planted_files` spies on the
store's reads): unsigned JSON, dataset shards, a run record's name taken by another writer."""

from __future__ import annotations

import numpy as np
import pytest
from support.planted_files import PLANTED_BYTES, grow, spy_on_planted_reads

import storage


@pytest.fixture
def planted_reads(monkeypatch) -> list[tuple[str, int | None]]:
    return spy_on_planted_reads(monkeypatch)


def test_a_json_file_grown_past_the_cap_is_refused_unread(tmp_path, planted_reads):
    store = storage.open_store(str(tmp_path / "dataset"))
    storage.stage_arrays(store, np.ones((4, 3), np.float32), np.array([0, 1, 0, 1]))
    grow(store, "_meta.json")

    with pytest.raises(storage.FileTooLargeError, match=f"_meta.json is {PLANTED_BYTES} bytes, larger than"):
        storage.open_dataset(store.url)
    assert planted_reads == [("_meta.json", 16 << 20)]


def test_a_dataset_shard_grown_past_its_recorded_size_is_refused_unread(tmp_path, planted_reads):
    store = storage.open_store(str(tmp_path / "dataset"))
    storage.stage_arrays(store, np.ones((4, 3), np.float32), np.array([0, 1, 0, 1]))
    dataset = storage.open_dataset(store.url)
    shard = dataset.meta["shards"][0]
    grow(store, shard["name"])

    with pytest.raises(storage.FileTooLargeError) as caught:
        dataset.read_shard(0)
    assert f"{shard['name']} is {PLANTED_BYTES} bytes, larger than the {shard['size_bytes']} bytes" in str(caught.value)
    assert planted_reads == [(shard["name"], shard["size_bytes"])]


def test_a_run_record_writer_does_not_read_a_grown_file_that_took_its_name_whole(tmp_path, planted_reads,
                                                                                  monkeypatch):
    store = storage.open_store(str(tmp_path / "store"))
    runs = storage.RunStore(store, "r1", b"k" * 32)

    def another_writer_first(path: str, data: bytes) -> bool:  # the name taken, by a file grown large, just before
        store.write_bytes(path, b"{}")
        grow(store, path)
        return False

    monkeypatch.setattr(store, "create_exclusive", another_writer_first)
    with pytest.raises(storage.StoreError, match="another writer"):
        runs.write_record({"run": "r1", "status": "running"})
    assert len(planted_reads) == 1 and planted_reads[0][1] < 1 << 20
