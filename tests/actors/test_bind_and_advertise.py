"""Where a node listens and what it tells its peers: bind host, advertised host, port range, and how
a node sees a peer it cannot reach (two nodes in this process, real sockets on loopback)."""

from __future__ import annotations

import socket

import pytest

import actors
import storage
from actors._transport import parse_port_range

from _support import RUN, SECRET, params, poll


def registered_endpoint(store, node: str) -> str:
    return storage.RunStore(store, RUN, SECRET).list_peers()[node]["endpoint"]


def taken_ports(count: int) -> tuple[list[socket.socket], int]:
    """``count`` consecutive loopback ports held by listening sockets of ours, and the first of them."""
    for _ in range(200):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        first = probe.getsockname()[1]
        held = [probe]
        try:
            for port in range(first + 1, first + count):
                extra = socket.socket()
                held.append(extra)
                extra.bind(("127.0.0.1", port))
            for held_socket in held:
                held_socket.listen(1)
            return held, first
        except OSError:  # a neighbour is in use: try another start
            for held_socket in held:
                held_socket.close()
    pytest.fail(f"found no {count} consecutive free loopback ports")


def test_a_node_registers_its_advertised_host_and_a_port_of_its_range(store):
    held, first = taken_ports(1)
    held[0].close()  # a free port we know: the range is exactly it
    with actors.start_node(RUN, "named", store, SECRET, bind_host="127.0.0.1", advertise_host="localhost",
                           port_range=(first, first)) as node:
        assert node.endpoint == f"tcp://localhost:{first}"
        poll(lambda: registered_endpoint(store, "named") == node.endpoint, what="the registry entry")


def test_a_fully_taken_port_range_fails_at_node_start_naming_the_range_and_the_host(store):
    held, first = taken_ports(3)
    try:
        node = actors.NodeHandle(RUN, "late", store, SECRET, bind_host="127.0.0.1", port_range=(first, first + 2))
        with pytest.raises(actors.NodeAddressError, match=rf"port range {first}-{first + 2} on host '127.0.0.1'"):
            node.start()
        assert isinstance(actors.NodeAddressError("x"), actors.ActorsError)
        assert "late" not in storage.RunStore(store, RUN, SECRET).list_peers()  # nothing half-started was registered
    finally:
        for held_socket in held:
            held_socket.close()


def test_a_wildcard_bind_host_without_an_advertised_host_is_refused_before_anything_opens(store):
    with pytest.raises(actors.NodeAddressError, match="advertise host"):
        actors.NodeHandle(RUN, "everywhere", store, SECRET, bind_host="0.0.0.0").start()


def test_a_node_bound_on_every_interface_is_reached_through_its_advertised_host(store):
    with actors.start_node(RUN, "everywhere", store, SECRET, bind_host="0.0.0.0", advertise_host="127.0.0.1",
                           peer_refresh_interval_s=0.05) as talker, \
            actors.start_node(RUN, "listener", store, SECRET, peer_refresh_interval_s=0.05) as listener:
        assert talker.endpoint.startswith("tcp://127.0.0.1:")
        listener.fresh_snapshots("rbm")
        poll(lambda: listener.stats()["peers_connected"] == 1 and listener.stats()["peers_unreachable"] == 0,
             what="the listener connected")
        talker.publish("rbm", params(1), samples_seen=10)
        talker.flush()
        poll(lambda: listener.stats()["fetched"] >= 1, what="the announced version fetched")
        assert len(listener.fresh_snapshots("rbm")) == 1
        stats = listener.stats()
        assert (stats["merged_announced"], stats["merged_listed"], stats["merged"]) == (1, 0, 1)


def test_a_peer_advertising_an_address_nobody_listens_on_is_counted_unreachable_and_merged_by_listing(store):
    # 127.0.0.2 is loopback too, but nothing listens there: every connection is refused.
    with actors.start_node(RUN, "misconfigured", store, SECRET, bind_host="127.0.0.1", advertise_host="127.0.0.2",
                           peer_refresh_interval_s=0.05) as wrong, \
            actors.start_node(RUN, "listener", store, SECRET, peer_refresh_interval_s=0.05,
                              anti_entropy_interval_s=0.2) as listener:
        listener.fresh_snapshots("rbm")
        poll(lambda: listener.stats()["peers_unreachable"] == 1, timeout_s=20.0, what="the peer counted unreachable")
        wrong.publish("rbm", params(2), samples_seen=10)
        wrong.flush()
        poll(lambda: listener.stats()["fetched"] >= 1, timeout_s=20.0, what="the version found by listing")
        assert len(listener.fresh_snapshots("rbm")) == 1
        stats = listener.stats()
        assert (stats["merged_announced"], stats["merged_listed"], stats["accepted"]) == (0, 1, 0)
        assert stats["peer_connect_retries"] >= 1


@pytest.mark.parametrize("text, expected", [("40000-40100", (40000, 40100)), ("5000", (5000, 5000)),
                                            (" 1-65535 ", (1, 65535)), (None, None)])
def test_port_ranges_parse_from_one_port_or_low_dash_high(text, expected):
    assert parse_port_range(text) == expected


@pytest.mark.parametrize("text", ["40100-40000", "0-10", "1-70000", "a-b", "1-2-3", ""])
def test_a_bad_port_range_is_refused_naming_the_text(text):
    with pytest.raises(ValueError, match="port_range"):
        parse_port_range(text)
