"""Files planted where a run's folders should be (by someone who can write the store, without the key):
the sweep of a resumed fit and the ``sharing`` mode's exchange skip them and go on."""

from __future__ import annotations

import numpy as np

import storage
from node.modes._sharing import SparseUpdate, UpdateExchange
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

    assert [(peer, seq) for peer, seq, _update, _size in receiver.receive("rbm0")] == [("node-a", 1)]
    assert receiver.receive("rbm0") == []  # listed again: nothing new, the planted file skipped again
    assert receiver.refused == {"runs/r1/updates/rbm0/node-b"}
