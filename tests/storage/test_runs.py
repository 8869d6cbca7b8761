"""Run records, the peer registry and per-node metrics, on both backends."""

from __future__ import annotations

from storage import RunStore


def test_run_record_round_trips_and_is_none_before_it_is_written(store):
    runs = RunStore(store, "r1")
    assert runs.read_record() is None
    record = {"model": {"kind": "dbn", "layers": [784, 500]}, "phases": ["rbm0", "finetune"], "status": "running"}
    runs.write_record(record)
    assert runs.read_record() == record
    runs.write_record({**record, "status": "done"})
    assert runs.read_record()["status"] == "done"


def test_peers_register_and_are_marked_gone(store):
    runs = RunStore(store, "r1")
    runs.register_peer("host-1-123", {"endpoint": "tcp://127.0.0.1:5000", "host": "h", "pid": 123, "started": 1.0})
    runs.register_peer("host-1-456", {"endpoint": "tcp://127.0.0.1:5001", "host": "h", "pid": 456, "started": 2.0})
    runs.mark_peer_gone("host-1-123")
    peers = runs.list_peers()
    assert set(peers) == {"host-1-123", "host-1-456"}
    assert peers["host-1-123"]["status"] == "gone"
    assert peers["host-1-123"]["endpoint"] == "tcp://127.0.0.1:5000"
    assert peers["host-1-456"]["status"] == "alive"
    assert peers["host-1-456"]["last_seen"] > 0


def test_metrics_are_appended_per_node_and_read_back_in_order(store):
    runs = RunStore(store, "r1")
    for i in range(5):
        runs.append_metrics("a", {"partition": i, "loss": 1.0 / (i + 1)})
    runs.append_metrics("b", {"partition": 0, "loss": 0.5})
    assert [m["partition"] for m in runs.read_metrics("a")] == [0, 1, 2, 3, 4]
    everything = runs.read_metrics()
    assert len(everything) == 6
    assert {m["node"] for m in everything} == {"a", "b"}
    assert RunStore(store, "other").read_metrics() == []


def test_model_path_lives_under_the_run(store):
    assert RunStore(store, "r1").model_path() == "runs/r1/model/model.npz"
