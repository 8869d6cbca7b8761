"""Entries of the wrong kind planted in a run's folders by someone who can write the store (no key): a
directory, FIFO or device where a file is read, a file where a folder is listed.  Readers skip and count
them, never wait on them, and go on with what the run's key holders wrote -- on both backends."""

from __future__ import annotations

import os

import numpy as np
import pytest
from support.fifos import call_beside_fifos

from storage import LeaseFolder, RunStore, StoreEntryTypeError, WeightStore

KEY = b"k" * 32


def _params(seed: int) -> dict[str, np.ndarray]:
    return {"W": np.random.default_rng(seed).standard_normal((6, 4)).astype(np.float32)}


def test_a_directory_planted_under_a_snapshots_name_is_passed_over_for_the_previous_version(store):
    weights = WeightStore(store, "r1", KEY)
    older = weights.put_version("rbm0", "a", 1, _params(1))
    newest = weights.put_version("rbm0", "a", 2, _params(2))
    other = weights.put_version("rbm0", "b", 1, _params(3))
    store.delete(newest.path)
    store.makedirs(newest.path)  # the authentic name, but a folder

    assert weights.newest_verified("rbm0", "a")[0] == older
    consolidation = weights.consolidate("rbm0")
    assert consolidation.refs == (older, other)
    np.testing.assert_allclose(consolidation.params["W"], (_params(1)["W"] + _params(3)["W"]) / 2, rtol=1e-6)
    if store.is_local:  # WebHDFS answers FileNotFound for a directory read: seen as pruned, not counted
        assert weights.refusals() == {"corrupt": 1}
        with pytest.raises(StoreEntryTypeError, match="is a directory, not a file"):
            weights.get_version(newest)


def test_a_file_planted_where_a_nodes_folder_should_be_is_no_node_and_is_counted_once(store):
    weights = WeightStore(store, "r1", KEY)
    a = weights.put_version("rbm0", "a", 1, _params(1))
    b = weights.put_version("rbm0", "b", 1, _params(2))
    store.write_bytes("runs/r1/weights/rbm0/intruder", b"not a folder")

    assert weights.newest_per_node("rbm0") == {"a": a, "b": b}
    assert weights.consolidate("rbm0").refs == (a, b)
    assert weights.consolidate("rbm0", ["a", "intruder"]).refs == (a,)
    assert weights.list_versions("rbm0", "intruder") == []
    assert weights.refusals() == {"unauthenticated": 1}


def test_entries_of_the_registry_and_metrics_that_are_no_file_or_folder_are_skipped(store):
    runs = RunStore(store, "r1", KEY)
    runs.register_peer("honest", {"endpoint": "tcp://127.0.0.1:5555"})
    runs.append_metrics("honest", {"loss": 1.0})
    store.makedirs("runs/r1/peers/folder.json")
    store.makedirs("runs/r1/metrics/honest/00000000000000000000-1-00000000-deadbeef.json")
    store.write_bytes("runs/r1/metrics/intruder", b"not a folder")

    assert list(runs.list_peers()) == ["honest"]
    assert runs.read_metrics() == [{"loss": 1.0, "node": "honest"}]
    if store.is_local:  # WebHDFS answers FileNotFound for a directory read: seen as deleted, not counted
        assert runs.refusals() == {"peer_entries": 1, "metrics_records": 2}
    else:
        assert runs.refusals() == {"metrics_records": 1}


def test_stale_temporaries_of_a_path_that_is_a_file_are_none(store):
    store.write_bytes("runs/r1/weights/rbm0/intruder", b"not a folder")
    assert store.remove_stale_temporaries("runs/r1/weights/rbm0/intruder", older_than_s=0.0) == 0
    assert store.read_bytes("runs/r1/weights/rbm0/intruder") == b"not a folder"


def test_listing_a_file_is_an_entry_type_error(store):
    store.write_bytes("f", b"1")
    with pytest.raises(StoreEntryTypeError, match="is a file, not a directory"):
        store.list("f")


def test_a_fifo_or_a_device_where_a_file_is_read_is_refused_at_once_and_a_reader_never_waits_on_it(local_store):
    weights, runs = WeightStore(local_store, "r1", KEY), RunStore(local_store, "r1", KEY)
    older = weights.put_version("rbm0", "a", 1, _params(1))
    newest = weights.put_version("rbm0", "a", 2, _params(2))
    runs.register_peer("honest", {"endpoint": "tcp://127.0.0.1:5555"})
    root = local_store.root
    fifos = [os.path.join(root, "runs/r1/peers/fifo.json"), os.path.join(root, *newest.path.split("/")),
             os.path.join(root, "runs/r1/lease/00000005.json")]
    os.unlink(fifos[1])
    os.makedirs(os.path.dirname(fifos[2]))
    lease = LeaseFolder(local_store, "r1", KEY)
    for fifo in fifos:
        os.mkfifo(fifo)
    os.symlink(fifos[0], os.path.join(root, "runs/r1/peers/link-to-fifo.json"))
    os.symlink("/dev/zero", os.path.join(root, "runs/r1/peers/zeros.json"))

    def read() -> dict:
        found = {"peers": sorted(runs.list_peers()), "newest": weights.newest_verified("rbm0", "a")[0],
                 "lease generation": lease.view().generation}  # a FIFO under a lease generation's name
        with pytest.raises(StoreEntryTypeError, match="is a FIFO, not a file"):
            local_store.read_bytes("runs/r1/peers/fifo.json")
        with pytest.raises(StoreEntryTypeError, match="is a device or socket, not a file"):
            with local_store.open_read("runs/r1/peers/zeros.json"):
                pass
        return found

    outcome = call_beside_fifos(read, fifos, wait_s=60.0, stuck="a reader waited on a FIFO planted in the store")
    assert outcome == {"peers": ["honest"], "newest": older, "lease generation": 0}
    assert runs.refusals() == {"peer_entries": 3}
    assert weights.refusals() == {"corrupt": 1}
    assert lease.refusals() == {"lease_files": 1}


def test_a_lease_of_the_earlier_layout_nested_too_deep_to_parse_describes_no_holder(store):
    store.write_bytes("runs/r1/lease.json", b"[" * 60_000)  # nested deeper than Python's parser recurses, < 64 KiB
    lease = LeaseFolder(store, "r1", KEY)
    assert lease.holder(0) == {}
    assert lease.view().generation == 0

