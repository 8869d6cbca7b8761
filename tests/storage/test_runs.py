"""Run records, the peer registry, per-node metrics and the final model, signed -- on both backends."""

from __future__ import annotations

import json
import logging

import pytest

from storage import AuthenticationError, RunStore, StoreError, StoreUnavailableError, has_run_record, sign_json
from storage._runs import RECORD_MAX_BYTES

KEY = b"k" * 32
OTHER_KEY = b"x" * 32


def test_run_record_round_trips_and_is_none_before_it_is_written(store):
    runs = RunStore(store, "r1", KEY)
    assert runs.read_record() is None and not has_run_record(store, "r1")
    record = {"model": {"kind": "dbn", "layers": [784, 500]}, "phases": ["rbm0", "finetune"], "status": "running",
              "lr": 0.1, "note": "caf\u00e9"}  # fmt: skip
    runs.write_record(record)
    assert runs.read_record() == record and has_run_record(store, "r1")
    runs.write_record({**record, "status": "done"})
    assert runs.read_record()["status"] == "done"


def test_each_record_write_creates_a_file_of_its_generation_and_the_writer_keeps_its_newest_two(store):
    runs = RunStore(store, "r1", KEY)
    for step in range(4):
        runs.write_record({"step": step}, generation=3)
    assert store.list("runs/r1/record") == ["00000003-00000002.json", "00000003-00000003.json"]
    assert runs.read_record() == {"step": 3}
    again = RunStore(store, "r1", KEY)  # another writer object of the same generation continues the sequence
    again.write_record({"step": 4}, generation=3)
    assert store.list("runs/r1/record")[-1] == "00000003-00000004.json"


def test_a_record_write_cut_short_after_its_file_was_created_leaves_the_next_write_its_own_name(store,
                                                                                                 monkeypatch):
    # Ctrl-C between the create and the writer's count: the next write ("failed") took the same name and was
    # refused as another writer's, leaving the record "running".
    runs = RunStore(store, "r1", KEY)
    runs.write_record({"status": "running", "epoch": 1}, generation=2)
    create = store.create_exclusive

    def created_then_interrupted(path, data):
        create(path, data)
        raise KeyboardInterrupt

    with monkeypatch.context() as cut:
        cut.setattr(store, "create_exclusive", created_then_interrupted)
        with pytest.raises(KeyboardInterrupt):
            runs.write_record({"status": "running", "epoch": 2}, generation=2)
    runs.write_record({"status": "failed"}, generation=2)
    assert RunStore(store, "r1", KEY).read_record() == {"status": "failed"}


def test_a_record_name_another_writer_of_the_generation_took_stops_this_writer_at_every_later_write(store):
    runs, other = RunStore(store, "r1", KEY), RunStore(store, "r1", KEY)
    runs.write_record({"by": "runs"}, generation=2)
    other.write_record({"by": "other"}, generation=2)  # it continues after what is stored: seq 1
    for _ in range(2):
        with pytest.raises(StoreError, match="written by another writer of lease generation 2"):
            runs.write_record({"by": "runs again"}, generation=2)
    assert RunStore(store, "r1", KEY).read_record() == {"by": "other"}


def test_the_newest_generation_wins_whatever_an_older_one_writes_later(store):
    older, newer = RunStore(store, "r1", KEY), RunStore(store, "r1", KEY)
    older.write_record({"by": "generation 1", "status": "running"}, generation=1)
    newer.write_record({"by": "generation 2", "status": "done"}, generation=2)
    for step in range(5):  # the driver that lost the lease wakes up and writes on
        older.write_record({"by": "generation 1", "step": step}, generation=1)
    assert RunStore(store, "r1", KEY).read_record() == {"by": "generation 2", "status": "done"}
    assert "00000002-00000000.json" in store.list("runs/r1/record")  # the older writer pruned only its own


def test_a_record_that_does_not_verify_is_passed_over_for_the_newest_that_does(store):
    runs = RunStore(store, "r1", KEY)
    runs.write_record({"status": "running"}, generation=1)
    RunStore(store, "r1", OTHER_KEY).write_record({"status": "forged"}, generation=9)  # someone without the key
    good = store.read_bytes("runs/r1/record/00000001-00000000.json")
    store.write_bytes("runs/r1/record/00000005-00000000.json", good)  # moved to another name: bound to its own
    assert runs.read_record() == {"status": "running"}
    assert runs.refusals() == {"records": 2}


@pytest.mark.parametrize("how", ["wrong key", "edited", "unsigned", "another run's record"])
def test_a_run_record_that_does_not_verify_raises_an_authentication_error_naming_the_key(store, how):
    runs = RunStore(store, "r1", KEY)
    record = {"phases": ["rbm0"], "status": "running"}
    path = "runs/r1/record/00000001-00000000.json"
    if how == "wrong key":
        RunStore(store, "r1", OTHER_KEY).write_record(record, generation=1)
    elif how == "edited":
        runs.write_record(record, generation=1)
        envelope = json.loads(store.read_bytes(path))
        envelope["signed"]["status"] = "done"
        store.backend.write_bytes(path, json.dumps(envelope).encode())
    elif how == "unsigned":
        store.write_bytes(path, json.dumps(record).encode())
    else:
        RunStore(store, "r2", KEY).write_record(record, generation=1)
        store.write_bytes(path, store.read_bytes("runs/r2/record/00000001-00000000.json"))
    with pytest.raises(AuthenticationError, match=r"record of run 'r1' .* does not verify under the key given \(wrong"):
        runs.read_record()


def _legacy_record(store, run: str, key: bytes, record: dict) -> None:
    """``runs/<run>/run.json`` as sparkdbn up to 0.2 wrote it (one signed file, replaced at each step)."""
    store.write_bytes(f"runs/{run}/run.json", sign_json(key, record, "sparkdbn run record v1", run))


def test_a_run_stored_by_the_earlier_layout_is_read_until_a_record_of_the_new_one_exists(store):
    _legacy_record(store, "old", KEY, {"status": "stopped"})
    runs = RunStore(store, "old", KEY)
    assert has_run_record(store, "old") and runs.read_record() == {"status": "stopped"}
    runs.write_record({"status": "running"}, generation=1)
    assert runs.read_record() == {"status": "running"}
    assert store.exists("runs/old/run.json")  # left where it was: migrating deletes nothing
    _legacy_record(store, "old-wrong", OTHER_KEY, {"status": "stopped"})
    with pytest.raises(AuthenticationError, match=r"record of run 'old-wrong' .* does not verify under the key given"):
        RunStore(store, "old-wrong", KEY).read_record()


def test_peers_register_and_are_marked_gone(store):
    runs = RunStore(store, "r1", KEY)
    runs.register_peer("host-1-123", {"endpoint": "tcp://127.0.0.1:5000", "host": "h", "pid": 123, "started": 1.0})
    runs.register_peer("host-1-456", {"endpoint": "tcp://127.0.0.1:5001", "host": "h", "pid": 456, "started": 2.0})
    runs.mark_peer_gone("host-1-123")
    peers = runs.list_peers()
    assert set(peers) == {"host-1-123", "host-1-456"}
    assert peers["host-1-123"]["status"] == "gone"
    assert peers["host-1-123"]["endpoint"] == "tcp://127.0.0.1:5000"
    assert peers["host-1-456"]["status"] == "alive"
    assert peers["host-1-456"]["last_seen"] > 0


def test_unsigned_forged_moved_and_oversized_peer_entries_are_not_listed_and_are_counted_once(store):
    runs = RunStore(store, "r1", KEY)
    runs.register_peer("honest", {"endpoint": "tcp://127.0.0.1:5000"})
    entry = {"node": "x", "endpoint": "tcp://127.0.0.1:6666", "status": "alive", "last_seen": 1e12}
    store.write_bytes("runs/r1/peers/unsigned.json", json.dumps(entry).encode())
    RunStore(store, "r1", OTHER_KEY).register_peer("forged", entry)
    store.write_bytes("runs/r1/peers/moved.json", store.read_bytes("runs/r1/peers/honest.json"))
    store.write_bytes("runs/r1/peers/big.json", b" " * (1 << 20))
    assert set(runs.list_peers()) == {"honest"}
    assert set(runs.list_peers()) == {"honest"}
    assert runs.refusals() == {"peer_entries": 4}
    store.write_bytes("runs/r1/peers/unsigned.json", json.dumps({**entry, "pid": 2}).encode())  # new content
    runs.list_peers()
    assert runs.refusals() == {"peer_entries": 5}


def test_marking_a_peer_gone_replaces_an_entry_that_does_not_verify(store):
    runs = RunStore(store, "r1", KEY)
    RunStore(store, "r1", OTHER_KEY).register_peer("n1", {"endpoint": "tcp://127.0.0.1:6666"})
    runs.mark_peer_gone("n1")
    assert runs.list_peers() == {"n1": {"node": "n1", "status": "gone", "last_seen": runs.list_peers()["n1"]["last_seen"]}}


def test_metrics_are_appended_per_node_and_read_back_in_order(store):
    runs = RunStore(store, "r1", KEY)
    for i in range(5):
        runs.append_metrics("a", {"partition": i, "loss": 1.0 / (i + 1)})
    runs.append_metrics("b", {"partition": 0, "loss": 0.5})
    assert [m["partition"] for m in runs.read_metrics("a")] == [0, 1, 2, 3, 4]
    everything = runs.read_metrics()
    assert len(everything) == 6
    assert {m["node"] for m in everything} == {"a", "b"}
    assert RunStore(store, "other", KEY).read_metrics() == []


def test_metrics_records_that_do_not_verify_are_skipped_and_counted(store):
    runs = RunStore(store, "r1", KEY)
    runs.append_metrics("a", {"partition": 0, "loss": 0.5})
    (name,) = store.list("runs/r1/metrics/a")
    store.write_bytes("runs/r1/metrics/a/00000000000000000000-1-x.json", json.dumps({"loss": -1.0}).encode())
    store.write_bytes("runs/r1/metrics/b/" + name, store.read_bytes("runs/r1/metrics/a/" + name))  # moved
    store.write_bytes("runs/r1/metrics/a/99999999999999999999-1-y.json", sign_json(OTHER_KEY, {"loss": -2.0}))
    assert runs.read_metrics() == [{"partition": 0, "loss": 0.5, "node": "a"}]
    assert runs.refusals() == {"metrics_records": 3}


def test_each_lease_generation_has_a_model_path_of_its_own_under_the_run(store):
    runs = RunStore(store, "r1", KEY)
    assert runs.model_path(7) == "runs/r1/model/00000007/model.npz"
    assert runs.model_path() == "runs/r1/model/model.npz"  # where runs stored by sparkdbn up to 0.2 keep it


@pytest.mark.parametrize("how", ["truncated", "deeply nested"])
def test_records_that_are_all_damaged_are_reported_as_damaged_not_as_a_wrong_key(store, how):
    runs = RunStore(store, "r1", KEY)
    for generation in (1, 2):
        path = runs.write_record({"status": "running", "padding": "x" * 200}, generation=generation)
        data = store.read_bytes(path)
        store.write_bytes(path, data[: len(data) // 2] if how == "truncated" else b"[" * 100_000)
    with pytest.raises(StoreError, match=r"every record of run 'r1' .* is damaged or unreadable \(2 file\(s\); the key "
                                         r"is not the cause\): 00000002-00000000.json") as raised:
        runs.read_record()
    assert not isinstance(raised.value, AuthenticationError)


@pytest.mark.parametrize("entry", ["directory", "unreadable file"])
def test_an_unreadable_entry_named_like_the_newest_record_is_skipped_with_a_warning(store, entry, caplog):
    runs = RunStore(store, "r1", KEY)
    runs.write_record({"status": "done", "by": 1}, generation=1)
    path = "runs/r1/record/00000002-00000000.json"
    if entry == "directory":
        store.makedirs(path)
    else:
        store.write_bytes(path, b"x" * (RECORD_MAX_BYTES + 1))  # more than a reader reads: refused unread
    with caplog.at_level(logging.WARNING, logger="storage._runs"):
        assert RunStore(store, "r1", KEY).read_record() == {"status": "done", "by": 1}
    if store.is_local or entry != "directory":  # WebHDFS answers FileNotFound for a directory read: seen as pruned
        assert any("00000002-00000000.json" in message and "skipping" in message for message in caplog.messages)


def test_a_store_outage_while_reading_the_records_is_an_outage_not_damaged_records(store, monkeypatch):
    runs = RunStore(store, "r1", KEY)
    runs.write_record({"status": "running"})
    real_read = store.read_bytes

    def unavailable(path, max_bytes=None):  # noqa: ANN001, ANN202 - Store's signature
        if "/record/" in path:
            raise StoreUnavailableError(f"injected: {store.url} unreachable reading {path}")
        return real_read(path, max_bytes=max_bytes)

    monkeypatch.setattr(store, "read_bytes", unavailable)
    with pytest.raises(StoreUnavailableError, match="unreachable"):
        runs.read_record()
    assert runs.refusals() == {}  # nothing was counted as damaged or unreadable
