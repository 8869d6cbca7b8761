"""Only holders of the run's key influence a node, and no peer can exhaust it: one node in this process,
a real store, raw ZeroMQ senders (one in another process, for the memory bound)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

import actors
import storage
from actors import decode_frames, encode_message
from actors._curve import as_run_publisher, as_run_subscriber

from _support import RUN, SECRET, announce, enter_phase, params, poll

OTHER_KEY = b"not-the-run-key-0123456789"


def test_snapshots_planted_without_the_key_are_never_fetched_and_do_not_hide_newer_honest_versions(node, store):
    enter_phase(node)
    honest, forger = storage.WeightStore(store, RUN, SECRET), storage.WeightStore(store, RUN, OTHER_KEY)
    honest.put_version("rbm", "peer", 1, params(1))
    forger.put_version("rbm", "peer", 99_999_999, params(50))  # a huge version in an honest node's folder
    forger.put_version("rbm", "intruder", 1, params(51))
    data = storage.encode_params(params(52))
    store.write_bytes(f"runs/{RUN}/weights/rbm/intruder/00000007-{storage.sha256_hex(data)}.npz", data)
    for _ in range(3):  # several store listings: each planted file is counted once
        rounds = node.stats()["anti_entropy_rounds"]
        node._request_anti_entropy()
        poll(lambda: node.stats()["anti_entropy_rounds"] > rounds, what="a store listing")
    poll(lambda: node.stats()["fetched"] == 1, what="the honest snapshot")
    (snapshot,) = node.fresh_snapshots("rbm")
    assert (snapshot.node, snapshot.version) == ("peer", 1)
    np.testing.assert_array_equal(snapshot.params["W"], params(1)["W"])
    honest.put_version("rbm", "peer", 2, params(2))  # lower than the planted version, but newer
    node._request_anti_entropy()
    poll(lambda: node.stats()["fetched"] == 2, what="the next honest version")
    assert [(s.node, s.version) for s in node.fresh_snapshots("rbm")] == [("peer", 2)]
    stats = node.stats()
    assert (stats["dropped_unauthenticated"], stats["discovered"], stats["merged"]) == (3, 2, 2)


def test_a_signed_announcement_of_a_snapshot_without_a_valid_mac_is_refused_unread(node, store, intruder):
    enter_phase(node)
    intruder.wait_for_subscriber()
    forged = storage.WeightStore(store, RUN, OTHER_KEY).put_version("rbm", "peer", 1, params(1))
    intruder.send(encode_message(announce(forged), SECRET))
    poll(lambda: node.stats()["dropped_unauthenticated"] == 1, what="the refusal")
    assert node.stats()["fetched"] == 0 and node.fresh_snapshots("rbm") == []


def test_a_peer_entry_that_does_not_verify_is_never_subscribed_and_is_counted(store):
    context = zmq.Context()
    sockets = []
    try:
        for name, key in (("forged", OTHER_KEY), ("unsigned", None), ("honest", SECRET)):
            sender = context.socket(zmq.XPUB)
            sender.setsockopt(zmq.LINGER, 0)
            as_run_publisher(sender, SECRET)  # a subscription would reach each of them: only the entry decides
            sender.bind("tcp://127.0.0.1:0")
            sockets.append(sender)
            entry = {"endpoint": sender.getsockopt_string(zmq.LAST_ENDPOINT), "host": "elsewhere", "pid": 0}
            if key is None:
                entry.update(node=name, status="alive", last_seen=time.time())
                store.write_bytes(f"runs/{RUN}/peers/{name}.json", json.dumps(entry).encode())
            else:
                storage.RunStore(store, RUN, key).register_peer(name, entry)
        with actors.start_node(RUN, "careful", store, SECRET, peer_refresh_interval_s=0.05) as node:
            assert sockets[2].poll(10_000), "the node never subscribed to the honest peer"
            refreshes = [node.stats()["refused_peer_entries"]]
            poll(lambda: len(node._transport.connected_peers()) == 1, what="the subscription")
            stats = node.stats()
        assert node._transport.connected_peers() == {sockets[2].getsockopt_string(zmq.LAST_ENDPOINT)}
        assert not sockets[0].poll(0) and not sockets[1].poll(0)  # no subscription ever reached them
        assert refreshes[0] == stats["refused_peer_entries"] == 2  # counted once, not at every refresh
    finally:
        for sender in sockets:
            sender.close()
        context.term()


def test_a_snapshot_larger_than_the_own_shapes_allow_is_refused_before_it_is_read(node, store, intruder):
    node.publish("rbm", params(0), samples_seen=1)  # own shapes: W (20, 10), b (20,)
    node.flush()
    enter_phase(node)
    intruder.wait_for_subscriber()
    huge = storage.WeightStore(store, RUN, SECRET).put_version("rbm", "peer", 1, params(1, (2000, 1000)))
    intruder.send(encode_message(announce(huge), SECRET))
    poll(lambda: node.stats()["dropped_oversized"] == 1, what="the refusal")
    assert node.stats()["fetched"] == 0


HOSTILE_SENDER = textwrap.dedent(
    """
    import sys, zmq
    sys.path[:0] = [sys.argv[1]]
    from actors._curve import as_run_publisher
    from actors._wire import TOPIC, sign
    context = zmq.Context()
    sender = context.socket(zmq.XPUB)
    as_run_publisher(sender, bytes.fromhex(sys.argv[2]))  # a holder of the run's key gone rogue
    sender.bind("tcp://127.0.0.1:0")
    print(sender.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
    assert sender.recv()[:1] == b"\\x01"  # subscribed
    nested = b"\\x91" * 60_000 + b"\\x00"
    sender.send_multipart([TOPIC, nested, sign(bytes.fromhex(sys.argv[2]), TOPIC, nested)])
    sender.send_multipart([TOPIC, b"\\x00" * (100 << 20), b"mac"])
    print("sent", flush=True)
    sys.stdin.read()  # stay until the test is done
    """
)


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024


def test_a_100_mb_frame_and_a_deeply_nested_frame_are_refused_and_counted_within_bounded_memory(node, store, intruder):
    root = str(Path(actors.__file__).parents[1])
    hostile = subprocess.Popen([sys.executable, "-c", HOSTILE_SENDER, root, SECRET.hex()], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        endpoint = hostile.stdout.readline().strip()
        storage.RunStore(store, RUN, SECRET).register_peer("hostile", {"endpoint": endpoint, "host": "elsewhere",
                                                                        "pid": 0})  # fmt: skip
        enter_phase(node)
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # reset this process's peak RSS
        before_mb = _peak_rss_mb()
        assert hostile.stdout.readline().strip() == "sent"
        poll(lambda: node.stats()["dropped_malformed"] == 1, what="the nested frame")
        poll(lambda: node.stats()["peer_disconnects"] >= 1, timeout_s=30, what="the oversized frame's connection to drop")
        grown_mb = _peak_rss_mb() - before_mb
        # The node keeps working: a valid announcement from another peer is still taken.
        intruder.wait_for_subscriber()
        ref = storage.WeightStore(store, RUN, SECRET).put_version("rbm", "peer", 1, params(1))
        intruder.send(encode_message(announce(ref), SECRET))
        poll(lambda: node.stats()["fetched"] == 1, what="the valid announcement")
    finally:
        hostile.stdin.close()
        hostile.wait(10)
    stats = node.stats()
    assert stats["received"] == 2 and stats["dropped"] == 1  # the 100 MB frame never reached Python
    assert grown_mb < 20, f"peak RSS grew by {grown_mb:.1f} MB while a 100 MB frame was refused"


def test_creating_a_handle_starts_nothing_until_start_or_with(store):
    before = {thread.name for thread in threading.enumerate()}
    handle = actors.NodeHandle(RUN, "lazy", store, SECRET)
    assert handle.endpoint is None and storage.RunStore(store, RUN, SECRET).list_peers() == {}
    assert {thread.name for thread in threading.enumerate()} == before
    with pytest.raises(actors.NodeStoppedError, match="not started"):
        handle.publish("rbm", params(0), 1)
    with handle:
        assert handle.endpoint.startswith("tcp://127.0.0.1:")
        assert storage.RunStore(store, RUN, SECRET).list_peers()["lazy"]["endpoint"] == handle.endpoint
        with pytest.raises(actors.ActorsError, match="already started"):
            handle.start()
    assert storage.RunStore(store, RUN, SECRET).list_peers()["lazy"]["status"] == "gone"
    with pytest.raises(actors.NodeStoppedError, match="create a new handle"):
        handle.start()
    never_started = actors.NodeHandle(RUN, "idle", store, SECRET)
    never_started.stop()
    assert "idle" not in storage.RunStore(store, RUN, SECRET).list_peers()


ROGUE_SUBSCRIBER = textwrap.dedent(
    """
    import sys, zmq
    from zmq.utils.monitor import recv_monitor_message
    sys.path[:0] = [sys.argv[1]]
    from actors._curve import as_run_subscriber
    context = zmq.Context()
    subscriber = context.socket(zmq.XSUB)  # it holds the run's key, so it completes the handshake
    subscriber.setsockopt(zmq.LINGER, 0)
    as_run_subscriber(subscriber, bytes.fromhex(sys.argv[3]))
    monitor = subscriber.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
    subscriber.connect(sys.argv[2])
    assert monitor.poll(30_000) and recv_monitor_message(monitor)["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED
    subscriber.send(b"\\x01" + b"t" * (16 << 20))  # a subscription to a 16 MB topic
    dropped = monitor.poll(30_000) and recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
    print("dropped" if dropped else "kept", flush=True)
    sys.stdin.read()  # stay until the test is done
    """
)

STRANGER_FLOOD = textwrap.dedent(
    """
    import sys, zmq
    from zmq.utils.monitor import recv_monitor_message
    context = zmq.Context()
    outcomes = []
    for guessed_key in (None, zmq.curve_keypair()[0]):  # ZeroMQ's default mechanism; CurveZMQ, a guessed key
        subscriber = context.socket(zmq.XSUB)  # registered nowhere, holds no key: it only reaches the port
        subscriber.setsockopt(zmq.LINGER, 0)
        subscriber.setsockopt(zmq.SNDHWM, 0)  # every subscription goes out as soon as a handshake completes
        if guessed_key is not None:
            subscriber.curve_serverkey = guessed_key
            subscriber.curve_publickey, subscriber.curve_secretkey = zmq.curve_keypair()
        monitor = subscriber.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        subscriber.connect(sys.argv[1])
        for index in range(200_000):  # distinct 40-byte topics: unread, they cost a node 340 MB
            subscriber.send(b"\\x01" + b"%040d" % index)
        handshaken = monitor.poll(30_000) and recv_monitor_message(monitor)["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED
        outcomes.append("subscribed" if handshaken else "refused")
        if handshaken:
            monitor.poll(5_000)  # let the flood arrive
        subscriber.disable_monitor()
        subscriber.close()
        monitor.close()
    print(" ".join(outcomes), flush=True)
    sys.stdin.read()  # stay until the test is done
    """
)


def _hears_the_node(node) -> None:
    """A holder of the run's key subscribing now hears what the node publishes."""
    context = zmq.Context()
    listener = context.socket(zmq.SUB)
    try:
        listener.setsockopt(zmq.LINGER, 0)
        listener.setsockopt(zmq.SUBSCRIBE, b"")
        as_run_subscriber(listener, SECRET)
        listener.connect(node._transport.endpoint)
        node.publish("rbm", params(0), samples_seen=1)
        assert listener.poll(10_000), "a subscriber of the node heard nothing after the hostile one"
        heard = decode_frames(listener.recv_multipart(), SECRET, RUN)
        assert (heard.node, heard.phase) == ("victim", "rbm")
    finally:
        listener.close()
        context.term()


def _run_hostile(code: str, *arguments: str) -> tuple[str, float]:
    """Run ``code`` in another process; return the line it prints and how much this process's peak RSS grew."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset this process's peak RSS
    before_mb = _peak_rss_mb()
    hostile = subprocess.Popen([sys.executable, "-c", code, *arguments], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)  # fmt: skip
    try:
        outcome = hostile.stdout.readline().strip()
        return outcome, _peak_rss_mb() - before_mb
    finally:
        hostile.stdin.close()
        hostile.wait(10)


def test_a_stranger_cannot_complete_the_handshake_so_a_flood_of_subscriptions_costs_the_node_nothing(node):
    outcome, grown_mb = _run_hostile(STRANGER_FLOOD, node._transport.endpoint)
    assert outcome == "refused refused"
    poll(lambda: node.stats()["refused_subscribers"] >= 2, what="the refused connections to be counted")
    assert grown_mb < 64, f"peak RSS grew by {grown_mb:.1f} MB while a stranger tried to subscribe 400,000 times"
    _hears_the_node(node)


def test_a_key_holder_subscribing_with_a_16_mb_topic_is_disconnected_unread_and_costs_the_node_no_memory(node):
    root = str(Path(actors.__file__).parents[1])
    outcome, grown_mb = _run_hostile(ROGUE_SUBSCRIBER, root, node._transport.endpoint, SECRET.hex())
    # ZeroMQ keeps a subscribed topic in a trie of about 45 bytes per byte: 16 MB read would cost some 700 MB.
    assert outcome == "dropped"
    assert grown_mb < 64, f"peak RSS grew by {grown_mb:.1f} MB while a 16 MB subscription was refused"
    assert node.stats()["refused_subscribers"] == 0  # it completed the handshake: dropped for its size alone
    _hears_the_node(node)


def test_a_directory_planted_under_a_peers_newest_snapshot_name_is_refused_once_as_corrupt(node, store):
    enter_phase(node)
    ref = storage.WeightStore(store, RUN, SECRET).put_version("rbm", "peer", 1, params(1))
    store.delete(ref.path)
    store.makedirs(ref.path)  # the authentic name, but a folder: no snapshot to read
    for _ in range(3):  # several store listings offer it: refused once, not fetched again and again
        rounds = node.stats()["anti_entropy_rounds"]
        node._request_anti_entropy()
        poll(lambda: node.stats()["anti_entropy_rounds"] > rounds, what="a store listing")
        poll(lambda: not node._actor.fetching("rbm").get(), what="the fetch to finish")
    stats = node.stats()
    assert (stats["dropped_corrupt"], stats.get("dropped_fetch_error", 0), stats["fetched"]) == (1, 0, 0)
