"""CurveZMQ between the nodes of a run: one key pair derived from the run's key.

Every node's publishing socket is a CurveZMQ server with the pair (:func:`as_run_publisher`), and every
subscribing socket a client that knows its public half (:func:`as_run_subscriber`), which is never sent
anywhere: only holders of the run's key can compute either.  A process without the key cannot complete a
handshake with a node's publishing port -- its connection is dropped before any subscription is read -- and a
port it listens on cannot pass for a peer's; what crosses the network is encrypted as well as signed.  Without
this, anyone who reached the port could subscribe to many distinct short topics, each of which ZeroMQ keeps
(about 45 bytes per byte of topic) and queues without bound: 200,000 of them once grew a node by 340 MB.
(The CurveZMQ of pyzmq's bundled libzmq, with libsodium.)
"""

from __future__ import annotations

import zmq
from zmq.utils import z85

import storage

__all__ = ["run_curve_keys", "as_run_publisher", "as_run_subscriber"]

_CURVE_PURPOSE = "sparkdbn curve server key v1"


def run_curve_keys(secret: bytes) -> tuple[bytes, bytes]:
    """The run's CurveZMQ key pair ``(public, secret)`` (Z85), derived from the run's key ``secret``.

    Every node of the run publishes as a CurveZMQ server with it and subscribes knowing its public half: only
    holders of the run's key can compute either.
    """
    private = z85.encode(bytes.fromhex(storage.mac_hex(secret, _CURVE_PURPOSE)))
    return zmq.curve_public(private), private


def as_run_publisher(socket: zmq.Socket, secret: bytes) -> None:
    """Make ``socket`` (before it binds) a CurveZMQ server of the run whose key is ``secret``."""
    public, private = run_curve_keys(secret)
    socket.curve_secretkey = private
    socket.curve_publickey = public
    socket.curve_server = True


def as_run_subscriber(socket: zmq.Socket, secret: bytes) -> None:
    """Make ``socket`` (before it connects) a CurveZMQ client of the run's publishers (own key pair: any)."""
    socket.curve_serverkey = run_curve_keys(secret)[0]
    socket.curve_publickey, socket.curve_secretkey = zmq.curve_keypair()
