"""Peer hygiene: a registry entry with a malformed endpoint, and endpoints that refuse or never answer,
cost a bounded number of log lines and never stop the node (one node in this process, real sockets)."""

from __future__ import annotations

import logging
import socket
import time
import types

import numpy as np

import actors
import actors._transport as transport
import storage
from actors._stats import LogEvery

from _support import RUN, SECRET, poll

#: The test's stand-in for a minute: the log interval and the window are scaled down together.
LOG_INTERVAL_S = 1.0
WINDOW_S = 6.0


def register(store, name: str, endpoint: object) -> None:
    storage.RunStore(store, RUN, SECRET).register_peer(name, {"endpoint": endpoint, "host": "elsewhere", "pid": 0})


def lines_about(caplog, text: str) -> int:
    return sum(text in record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING)


def test_malformed_refusing_and_silent_peers_are_counted_and_logged_a_bounded_number_of_times(store, monkeypatch,
                                                                                                caplog):
    monkeypatch.setattr(transport, "PEER_LOG_INTERVAL_S", LOG_INTERVAL_S)
    monkeypatch.setattr(transport, "RECONNECT_MAX_S", 0.2)  # retry often, so retries outnumber the allowed lines
    monkeypatch.setattr(transport, "CONNECT_TIMEOUT_S", 0.5)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(0)  # accepts at the TCP level, never speaks ZeroMQ: every handshake times out
    refusing = f"tcp://127.0.0.1:{closed.getsockname()[1]}"
    mute = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
    for name, endpoint in (("garbled", "tcp://nowhere:not-a-port"), ("portless", "tcp://10.0.0.1"),
                           ("typed", 12345), ("refusing", refusing), ("mute", mute)):
        register(store, name, endpoint)
    caplog.set_level(logging.WARNING)
    try:
        with actors.start_node(RUN, "steady", store, SECRET, peer_refresh_interval_s=0.05) as node:
            started = time.monotonic()
            poll(lambda: node.stats()["peer_connect_retries"] >= 6, timeout_s=20.0, what="repeated connect retries")
            time.sleep(max(0.0, WINDOW_S - (time.monotonic() - started)))
            stats = node.stats()
            elapsed = time.monotonic() - started
            node.publish("rbm", {"W": np.ones((2, 2), np.float32)}, samples_seen=1)
            node.flush()  # the node still works
            assert storage.WeightStore(store, RUN, SECRET).list_versions("rbm", "steady")
    finally:
        closed.close()
        silent.close()
    # Malformed endpoints: never connected to, counted once each (not at every refresh), one line each.
    assert stats["malformed_peer_endpoints"] == 3
    for name in ("garbled", "portless", "typed"):
        assert lines_about(caplog, f"skips peer {name}") == 1
    # Unreachable endpoints: retried (with backoff), every retry counted, each logged at most once per interval.
    allowed = int(elapsed / LOG_INTERVAL_S) + 1
    refusing_lines, mute_lines = lines_about(caplog, refusing), lines_about(caplog, mute)
    assert 1 <= refusing_lines <= allowed and mute_lines <= allowed
    assert stats["peer_connect_retries"] > refusing_lines + mute_lines


def test_a_log_every_filter_says_a_lasting_condition_again_only_after_its_interval(caplog, monkeypatch):
    now = [1000.0]  # the filter's clock, moved by hand: a loaded host's pauses must not count as the interval
    monkeypatch.setattr(actors._stats, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    logger = logging.getLogger("sparkdbn.test.every")
    every = LogEvery(logger, interval_s=0.2)
    caplog.set_level(logging.WARNING, logger=logger.name)
    for _ in range(50):
        every.log("unreachable", "tcp://a:1", "peer a")
        every.log("unreachable", "tcp://b:1", "peer b")
        now[0] += 0.003  # 150 ms in all: within the interval
    assert [record.getMessage() for record in caplog.records] == ["peer a", "peer b"]
    now[0] += 0.06  # 210 ms after the first lines: past the interval
    every.log("unreachable", "tcp://a:1", "peer a")
    assert [record.getMessage() for record in caplog.records][-1] == "peer a" and len(caplog.records) == 3

