"""Helpers shared by the single-node tests: the run's names, parameters, polling, a raw peer socket."""

from __future__ import annotations

import time

import numpy as np
import pytest
import zmq

import storage
from actors import WeightAnnouncement
from actors._curve import as_run_publisher

SECRET = b"the-run-secret-0123456789"
RUN = "run-1"


def params(seed, shape=(20, 10)):
    rng = np.random.default_rng(seed)
    return {"W": rng.standard_normal(shape).astype(np.float32), "b": rng.standard_normal(shape[0]).astype(np.float32)}


def poll(condition, timeout_s=10.0, what="a condition"):
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.005)


class Intruder:
    """A raw XPUB socket registered as a peer with the run's key (a key holder gone rogue, or a process that
    took over a registered endpoint): it sends whatever frames a test makes up."""

    def __init__(self, store):
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.XPUB)
        self.socket.setsockopt(zmq.LINGER, 0)
        as_run_publisher(self.socket, SECRET)  # it holds the run's key: nodes complete the handshake
        self.socket.bind("tcp://127.0.0.1:0")
        self.endpoint = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        storage.RunStore(store, RUN, SECRET).register_peer(
            "intruder", {"endpoint": self.endpoint, "host": "elsewhere", "pid": 0, "started": time.time()}
        )

    def wait_for_subscriber(self):
        # XPUB hands us the subscription: from then on what we send is delivered (no slow joiner).
        assert self.socket.poll(10_000), "the node never subscribed to the intruder"
        assert self.socket.recv()[:1] == b"\x01"

    def send(self, frames):
        self.socket.send_multipart(frames)

    def close(self):
        self.socket.close()
        self.context.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def announce(ref, **changes):
    fields = dict(run=RUN, node=ref.node, phase=ref.phase, version=ref.version, sha256=ref.sha256, mac=ref.mac,
                  samples_seen=100 * ref.version, sent_at=time.time())  # fmt: skip
    fields.update(changes)
    return WeightAnnouncement(**fields)


def enter_phase(node, phase="rbm"):
    """Make ``phase`` current and let its immediate store listing finish, so only frames feed the node."""
    node.fresh_snapshots(phase)
    poll(lambda: node.stats()["anti_entropy_rounds"] >= 1, what="the first store listing")
