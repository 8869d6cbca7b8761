"""One node in this process, fed raw frames from our own ZeroMQ socket and snapshots from a real store."""

from __future__ import annotations

import io
import os
import select
import signal
import socket
import threading
import time

import msgpack
import numpy as np
import pytest
from support.numerics import assert_within, unit_roundoff

import actors
import storage
from actors import Goodbye, encode_message
from actors._wire import TOPIC, sign

from _support import RUN, SECRET, Intruder, announce, enter_phase, params, poll


def test_forged_duplicate_out_of_order_wrong_run_and_malformed_frames_are_dropped_and_counted(node, intruder, store):
    enter_phase(node)
    intruder.wait_for_subscriber()
    weights = storage.WeightStore(store, RUN, SECRET)
    older, newer = weights.put_version("rbm", "peer", 4, params(4)), weights.put_version("rbm", "peer", 5, params(5))
    good = encode_message(announce(newer), SECRET)
    garbage = b"\x93\x01\x02"
    frames = [
        good,  # accepted, fetched
        good,  # duplicate -> stale
        encode_message(announce(older), SECRET),  # out of order (older) -> stale
        encode_message(announce(newer), b"forger"),  # bad signature
        good[:2],  # no signature
        encode_message(announce(newer, run="run-2"), SECRET),  # wrong run
        [TOPIC, garbage, sign(SECRET, TOPIC, garbage)],  # signed garbage
        [b"just one frame"],
        [TOPIC, b"", b"", b""],
        encode_message(announce(newer, phase="rbm1", version=9), SECRET),  # another phase
    ]
    schema_payload = msgpack.packb({**msgpack.unpackb(good[1]), "schema": 99})
    frames.append([TOPIC, schema_payload, sign(SECRET, TOPIC, schema_payload)])
    for message in frames:
        intruder.send(message)
    poll(lambda: node.stats()["received"] == len(frames) and node.stats()["fetched"] == 1, what="every frame")
    stats = node.stats()
    expected = {"accepted": 1, "fetched": 1, "dropped_stale": 2, "dropped_bad_signature": 2, "dropped_wrong_run": 1,
                "dropped_malformed": 3, "dropped_other_phase": 1, "dropped_schema": 1, "dropped": 10}  # fmt: skip
    assert {name: stats[name] for name in expected} == expected
    (snapshot,) = node.fresh_snapshots("rbm")
    assert (snapshot.node, snapshot.version, snapshot.samples_seen) == ("peer", 5, 500)
    np.testing.assert_array_equal(snapshot.params["W"], params(5)["W"])
    # Handed out once: the same version is not fresh again; the loop still serves a newer one.
    assert node.fresh_snapshots("rbm") == []
    newest = weights.put_version("rbm", "peer", 6, params(6))
    intruder.send(encode_message(announce(newest), SECRET))
    poll(lambda: node.stats()["fetched"] == 2, what="version 6")
    assert [snapshot.version for snapshot in node.fresh_snapshots("rbm")] == [6]


def write_raw_snapshot(monkeypatch, store, node_name, version, arrays):
    """Write a signed snapshot the way WeightStore does, bypassing its NaN check (a key holder gone wrong)."""

    def savez(params, what):
        buffer = io.BytesIO()
        np.savez(buffer, **params)
        return buffer.getvalue()

    with monkeypatch.context() as patch:
        patch.setattr("storage._weights.encode_params", savez)
        return storage.WeightStore(store, RUN, SECRET).put_version("rbm", node_name, version, arrays)


def test_corrupt_non_finite_and_misshapen_snapshots_are_refused_and_counted(node, intruder, store, tmp_path, monkeypatch):
    node.publish("rbm", params(0), samples_seen=10)  # tells the node its own names and shapes
    node.flush()
    enter_phase(node)
    intruder.wait_for_subscriber()
    weights = storage.WeightStore(store, RUN, SECRET)
    corrupt = weights.put_version("rbm", "corrupt", 1, params(1))
    with open(tmp_path / "store" / corrupt.path, "r+b") as handle:  # flip bytes in the middle of the file
        handle.seek(200)
        handle.write(b"\xff\xfe\xfd\xfc")
    non_finite = params(2)
    non_finite["W"][3, 3] = np.nan
    misshapen = weights.put_version("rbm", "shape", 1, params(3, (10, 20)))
    refs = [corrupt, write_raw_snapshot(monkeypatch, store, "nan", 1, non_finite), misshapen]
    for ref in refs:
        intruder.send(encode_message(announce(ref), SECRET))
    poll(lambda: node.stats()["dropped_corrupt"] + node.stats()["dropped_bad_snapshot"] == 3, what="three refusals")
    stats = node.stats()
    assert (stats["dropped_corrupt"], stats["dropped_bad_snapshot"], stats["fetched"]) == (1, 2, 0)
    assert node.fresh_snapshots("rbm") == []


def test_a_version_pruned_before_it_is_fetched_is_counted_missing(node, intruder, store):
    enter_phase(node)
    intruder.wait_for_subscriber()
    weights = storage.WeightStore(store, RUN, SECRET)
    ref = weights.put_version("rbm", "fast", 1, params(1))
    store.delete(ref.path)
    intruder.send(encode_message(announce(ref), SECRET))
    poll(lambda: node.stats()["dropped_missing"] == 1, what="the missing snapshot")
    assert node.fresh_snapshots("rbm") == []


def test_publish_copies_writes_announces_and_prunes_old_versions(store):
    weights = storage.WeightStore(store, RUN, SECRET)
    with actors.start_node(RUN, "writer", store, SECRET, keep_versions=2) as node:
        current = params(0)
        for version in range(1, 5):
            current["W"][0, 0] = version
            node.publish("rbm", current, samples_seen=version)
            current["W"][0, 0] = -1.0  # must not leak into what was published
            node.flush()
        stats = node.stats()
    refs = weights.list_versions("rbm", "writer")
    assert [ref.version for ref in refs] == [3, 4]
    assert weights.get_version(refs[-1])["W"][0, 0] == 4.0
    assert stats["published"] == 4 and stats["pruned"] == 2


def test_a_held_version_outlives_pruning_until_three_later_holds(store):
    # An epoch's last version (held) stays while the driver validates it, though the node publishes on, and while
    # the two jobs a killed driver had started train on: its resume reads the version the record names (with two
    # holds, a resume after a driver kill found it pruned and trained two epochs' partitions again).
    weights = storage.WeightStore(store, RUN, SECRET)
    with actors.start_node(RUN, "writer", store, SECRET, keep_versions=2) as node:
        assert node.published_version("rbm") == 0 and node.hold_published("rbm") == 0
        held = []
        for version in range(1, 14):
            node.publish("rbm", params(version), samples_seen=version)
            node.flush()
            assert node.published_version("rbm") == version
            if version % 3 == 0:  # epochs of three partitions: versions 3, 6, 9 and 12 end them
                held.append(node.hold_published("rbm"))
            if version == 10:  # the record names epoch 1's 3, and epochs 2 and 3 have ended since: 3 is still there
                assert 3 in [ref.version for ref in weights.list_versions("rbm", "writer")]
        assert held == [3, 6, 9, 12]
        kept = [ref.version for ref in weights.list_versions("rbm", "writer")]
    assert kept == [6, 9, 12, 13]  # the newest two and the last three holds; 3 went with the first publish after 12


def test_non_finite_weights_are_never_published(node, store):
    bad = params(0)
    bad["b"][1] = np.inf
    with pytest.raises(actors.PublishError, match="NaN or Inf"):
        node.publish("rbm", bad, samples_seen=1)
    node.flush()
    assert storage.WeightStore(store, RUN, SECRET).list_versions("rbm", "victim") == []
    assert node.stats()["publish_refused_nonfinite"] == 1


def test_merge_moves_own_weights_to_the_average_of_self_and_fresh_peers(node, store):
    enter_phase(node)
    weights = storage.WeightStore(store, RUN, SECRET)
    for seed, peer in enumerate(("p1", "p2"), start=1):
        weights.put_version("rbm", peer, 1, params(seed))
    node._request_anti_entropy()  # what the periodic listing does; the interval is long in this fixture
    poll(lambda: node.stats()["fetched"] == 2, what="both peers from the store")
    own = params(7)
    merged, used = node.merge("rbm", own)
    expected = (own["W"] + params(1)["W"] + params(2)["W"]) / 3
    assert len(used) == 2
    # float32, each side at most 4 roundings of terms below |own| + |peer 1| + |peer 2|
    bound = 2 * 4 * unit_roundoff(np.float32) * (np.abs(own["W"]) + np.abs(params(1)["W"]) + np.abs(params(2)["W"]))
    assert_within(merged["W"], expected, bound, "W")


def test_fanout_limits_each_round_to_a_random_subset_of_fresh_peers_and_reads_no_more(store):
    weights = storage.WeightStore(store, RUN, SECRET)
    for index in range(5):
        weights.put_version("rbm", f"p{index}", 1, params(index))
    with actors.start_node(RUN, "picky", store, SECRET, fanout=2, seed=0, anti_entropy_interval_s=600.0) as node:
        node.fresh_snapshots("rbm")  # enters the phase: the store listing offers all five
        # Two are read, and no more until a merge takes them (reading all five would never pass this).
        poll(lambda: (node.stats()["discovered"], node.stats()["fetched"]) == (5, 2)
             and not node._actor.fetching("rbm").get(), what="two of the five read, none being read")
        rounds = [node.fresh_snapshots("rbm") for _ in range(3)]
        fetched = node.stats()["fetched"]
    assert [len(chosen) for chosen in rounds] == [2, 2, 1]
    assert sorted(snapshot.node for chosen in rounds for snapshot in chosen) == [f"p{index}" for index in range(5)]
    assert fetched == 5  # each read once


def test_stop_is_idempotent_marks_the_peer_gone_says_goodbye_and_leaves_no_threads(store, intruder):
    before = {thread.name for thread in threading.enumerate()}
    listener = actors.start_node(RUN, "listener", store, SECRET, peer_refresh_interval_s=0.05)
    leaver = actors.start_node(RUN, "leaver", store, SECRET, peer_refresh_interval_s=0.05)
    try:
        # Subscribed, not only connected: a frame published before the subscription arrives is sent on its arrival.
        leaver.publish("rbm", params(0), 1)
        poll(lambda: listener.stats()["received"] >= 1, what="the listener to subscribe")
        leaver.stop()
        leaver.stop()
        assert storage.RunStore(store, RUN, SECRET).list_peers()["leaver"]["status"] == "gone"
        with pytest.raises(actors.NodeStoppedError):
            leaver.publish("rbm", params(0), 1)
        poll(lambda: listener.stats()["goodbyes"] == 1, what="the goodbye")
        poll(lambda: leaver.endpoint not in listener._transport.connected_peers(), what="the listener to disconnect")
    finally:
        listener.stop()
    left = {thread.name for thread in threading.enumerate() if thread.is_alive()} - before
    assert not [name for name in left if name.startswith(("sparkdbn", "NodeActor"))]


def test_a_peer_registered_with_a_dead_pid_is_not_subscribed(store, intruder):
    ghost = "tcp://127.0.0.1:1"
    storage.RunStore(store, RUN, SECRET).register_peer("ghost", {"endpoint": ghost, "host": socket.gethostname(),
                                                         "pid": 2**22 + 12345, "started": 0.0})  # fmt: skip
    with actors.start_node(RUN, "careful", store, SECRET) as node:
        poll(lambda: intruder.endpoint in node._transport.connected_peers(), what="the live peer to be subscribed")
        assert ghost not in node._transport.connected_peers()


def test_a_goodbye_frame_is_verified_like_any_other(node, intruder):
    intruder.wait_for_subscriber()
    intruder.send(encode_message(Goodbye(run=RUN, node="intruder", sent_at=time.time()), b"wrong"))
    intruder.send(encode_message(Goodbye(run=RUN, node="intruder", sent_at=time.time()), SECRET))
    poll(lambda: node.stats()["received"] == 2, what="both goodbyes")
    assert (node.stats()["goodbyes"], node.stats()["dropped_bad_signature"]) == (1, 1)


def test_a_node_inherited_through_fork_refuses_to_work_in_the_child(node):
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what using the inherited node does, then leave at once
        try:
            node.fresh_snapshots("rbm")
            outcome = b"worked"
        except actors.NodeStoppedError as error:
            outcome = b"refused" if b"fork" in str(error).encode() else b"wrong message"
        except BaseException:
            outcome = b"other error"
        os.write(write_end, outcome)
        os._exit(0)
    os.close(write_end)
    try:
        # Without the guard the child would hang on the dead actor: bound the wait, then kill it.
        ready, _, _ = select.select([read_end], [], [], 20.0)
        outcome = os.read(read_end, 100) if ready else b"hung"
    finally:
        os.close(read_end)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert outcome == b"refused"
    assert node.fresh_snapshots("rbm") == []  # the parent's node is untouched


def test_nodes_exchange_snapshots_through_a_webhdfs_store_across_an_outage(tmp_path):
    from support.webhdfs_server import WebHDFSServer

    with WebHDFSServer(tmp_path / "hdfs") as server:
        store = storage.open_store(server.store_url("/sparkdbn"), retry_timeout_s=20.0)
        with actors.start_node(RUN, "h1", store, SECRET) as first, actors.start_node(RUN, "h2", store, SECRET) as second:
            poll(lambda: first.endpoint in second._transport.connected_peers(), what="h2 to subscribe to h1")
            second.fresh_snapshots("rbm")
            server.faults.fail_requests(seconds=0.5)  # 503s: the store retries with backoff
            first.publish("rbm", params(1), samples_seen=64)
            first.flush()
            found = []
            poll(lambda: bool(found.extend(second.fresh_snapshots("rbm"))) or bool(found), what="the snapshot over WebHDFS")
    assert [(snapshot.node, snapshot.version, snapshot.samples_seen) for snapshot in found] == [("h1", 1, 64)]
    np.testing.assert_array_equal(found[0].params["W"], params(1)["W"])


def test_a_fetch_the_store_failed_is_retried_by_the_next_store_listing(tmp_path):
    from support.webhdfs_server import WebHDFSServer

    with WebHDFSServer(tmp_path / "hdfs") as server:
        store = storage.open_store(server.store_url("/sparkdbn"), retry_timeout_s=0.5)
        weights = storage.WeightStore(store, RUN, SECRET)
        node = actors.start_node(RUN, "retrier", store, SECRET, anti_entropy_interval_s=3600.0)
        with node, Intruder(store) as intruder:
            enter_phase(node)
            intruder.wait_for_subscriber()
            ref = weights.put_version("rbm", "peer", 1, params(1))
            server.faults.deny(f"/sparkdbn/{ref.path}")  # reading that file fails (AccessControlException)
            intruder.send(encode_message(announce(ref), SECRET))
            poll(lambda: node.stats()["dropped_fetch_error"] == 1, what="the failed fetch")
            server.faults.clear()
            node._request_anti_entropy()  # what the periodic listing does; the interval is long here
            poll(lambda: node.stats()["fetched"] == 1, what="the retried fetch")
            (snapshot,) = node.fresh_snapshots("rbm")
    assert (snapshot.node, snapshot.version) == ("peer", 1)


def test_a_forked_child_can_start_its_own_node(node, store):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            with actors.start_node(RUN, "child", store, SECRET) as child:
                child.publish("rbm", params(0), 1)
                child.flush(timeout_s=20)
                code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung starting its own node")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [ref.version for ref in storage.WeightStore(store, RUN, SECRET).list_versions("rbm", "child")] == [1]


def test_the_receive_loop_survives_a_storm_of_random_frames(node, intruder, store):
    enter_phase(node)
    intruder.wait_for_subscriber()
    rng = np.random.default_rng(123)
    sent = 0
    for _ in range(300):
        frames = [rng.bytes(int(rng.integers(0, 64))) for _ in range(int(rng.integers(1, 5)))]
        if rng.random() < 0.5:  # correctly signed random payloads reach the msgpack decoder
            payload = rng.bytes(int(rng.integers(0, 64)))
            frames = [TOPIC, payload, sign(SECRET, TOPIC, payload)]
        intruder.send(frames)
        sent += 1
    ref = storage.WeightStore(store, RUN, SECRET).put_version("rbm", "peer", 1, params(1))
    intruder.send(encode_message(announce(ref), SECRET))
    poll(lambda: node.stats()["fetched"] == 1, what="the valid announcement after the storm")
    stats = node.stats()
    assert stats["received"] == sent + 1 and stats["accepted"] == 1 and stats["dropped"] == sent


def test_has_fresh_says_a_fetched_snapshot_waits_until_it_is_merged(node, store):
    enter_phase(node)
    assert not node.has_fresh()
    storage.WeightStore(store, RUN, SECRET).put_version("rbm", "p1", 1, params(1))
    node._request_anti_entropy()
    poll(node.has_fresh, what="the flag once p1's snapshot is fetched")
    merged, used = node.merge("rbm", params(7))
    assert [snapshot.node for snapshot in used] == ["p1"]
    assert not node.has_fresh()  # handed over: nothing waits any more


def test_taking_fresh_snapshots_waits_for_the_reads_of_versions_already_heard_of(node, store, monkeypatch):
    enter_phase(node)
    storage.WeightStore(store, RUN, SECRET).put_version("rbm", "slow", 1, params(1))
    real_get = node._weights.get_version
    reading = threading.Event()

    def slow_get(ref, **options):  # the store takes 0.3 s to serve this read
        reading.set()
        time.sleep(0.3)
        return real_get(ref, **options)

    monkeypatch.setattr(node._weights, "get_version", slow_get)
    node._request_anti_entropy()
    assert reading.wait(10.0)
    # waited for the read (it returns when the read ends; the generous wait is for loaded hosts)
    assert [snapshot.node for snapshot in node.fresh_snapshots("rbm", wait_s=30.0)] == ["slow"]


@pytest.mark.parametrize("expected_peers", [1, 0])
def test_a_node_short_of_its_expected_peers_finds_one_that_registers_later_and_what_it_announced(store,
                                                                                              expected_peers):
    # Registry and store listings a minute apart: only the catch-up for a node short of its fit's
    # peers can subscribe "early" to "late" (registered after early's first registry reading) and
    # fetch the version late announced, maybe before the subscription connected.
    slow = dict(peer_refresh_interval_s=600.0, anti_entropy_interval_s=600.0)
    with actors.start_node(RUN, "early", store, SECRET, expected_peers=expected_peers, **slow) as early:
        enter_phase(early)
        with actors.start_node(RUN, "late", store, SECRET, **slow) as late:
            late.publish("rbm", params(1), 100)
            late.flush(timeout_s=10.0)
            if expected_peers:
                poll(lambda: late.endpoint in early._transport.connected_peers(), what="early to subscribe to late")
                poll(lambda: early.stats()["fetched"] == 1, what="late's snapshot")
                merged, used = early.merge("rbm", params(7))
                assert [snapshot.node for snapshot in used] == ["late"]
            else:  # nothing expected: the next registry reading is 600 s away
                time.sleep(1.0)
                assert late.endpoint not in early._transport.connected_peers() and early.stats()["fetched"] == 0
