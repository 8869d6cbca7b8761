"""Brokerless ZeroMQ publish-subscribe between the nodes of a run.

Each node binds one XPUB socket (a PUB that also reports new subscribers) on ``bind_host`` at a
random port and connects one SUB socket to every peer endpoint it is told about.  One I/O thread
owns both sockets (ZeroMQ sockets are not thread-safe): it polls

* the SUB socket, and hands each received frame list to ``on_frames``;
* the XPUB socket, whose subscription events call ``on_subscriber``, which returns frames to
  re-send, so a peer that just connected hears the newest announcement at once (the "slow
  joiner" would otherwise miss it until anti-entropy);
* an inproc PULL socket that other threads :meth:`send` through (their PUSH end is guarded by a lock),

with a short poll timeout so :meth:`close` is prompt.  The wanted set of peer endpoints is
applied by the I/O thread on every turn (connect new, disconnect gone).

One ZeroMQ context is shared by every transport in the process, terminated when the last closes.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from typing import Callable, Iterable

import zmq

from ._errors import ActorsError

__all__ = ["Transport"]

logger = logging.getLogger(__name__)

#: Poll timeout of the I/O thread: bounds how long close() and peer changes wait.
POLL_INTERVAL_S = 0.05
#: How long close() lets queued frames (e.g. the Goodbye) leave before dropping them.
LINGER_S = 0.5
#: A SUB socket refuses (disconnects) a peer sending frames larger than this.
MAX_MESSAGE_BYTES = 1 << 20

_context_lock = threading.Lock()
_context: zmq.Context | None = None
_context_users = 0
_inproc_ids = itertools.count()


def _forget_context_after_fork() -> None:
    # The parent's context is unusable in a forked child (and must not be terminated there):
    # a node started in the child gets a fresh one.
    global _context, _context_users, _context_lock
    _context_lock = threading.Lock()
    _context, _context_users = None, 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_context_after_fork)


def _acquire_context() -> zmq.Context:
    global _context, _context_users
    with _context_lock:
        if _context is None or _context.closed:
            _context = zmq.Context()
        _context_users += 1
        return _context


def _release_context() -> None:
    global _context, _context_users
    with _context_lock:
        _context_users -= 1
        if _context_users == 0 and _context is not None:
            _context.term()  # every socket is closed with a bounded linger by now
            _context = None


class Transport:
    """One node's PUB endpoint and subscriptions.

    Parameters
    ----------
    bind_host : str
        Interface to bind the publishing socket on (``"127.0.0.1"`` by default upstream).
    on_frames : callable(list[bytes])
        Called in the I/O thread for every multipart message received; must not raise
        (exceptions are logged and the loop continues).
    on_subscriber : callable() -> list[list[bytes]]
        Called in the I/O thread when a peer subscribes; frames it returns are published.
    name : str
        For log messages and the thread name.
    """

    def __init__(
        self,
        bind_host: str,
        on_frames: Callable[[list[bytes]], None],
        on_subscriber: Callable[[], Iterable[list[bytes]]],
        name: str,
    ) -> None:
        self._on_frames = on_frames
        self._on_subscriber = on_subscriber
        self._name = name
        self._context = _acquire_context()
        self._stopping = threading.Event()
        self._closed = False
        self._peers_lock = threading.Lock()
        self._wanted: set[str] = set()
        self._connected: set[str] = set()
        self._inproc = f"inproc://sparkdbn-transport-{next(_inproc_ids)}"
        try:
            self._pub = self._context.socket(zmq.XPUB)
            self._pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # report every subscriber, not only the first
            self._pub.setsockopt(zmq.LINGER, int(LINGER_S * 1000))
            self._pub.bind(f"tcp://{bind_host}:0")
            self.endpoint: str = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
            self._sub = self._context.socket(zmq.SUB)
            self._sub.setsockopt(zmq.SUBSCRIBE, b"")  # every topic: foreign frames get counted
            self._sub.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
            self._sub.setsockopt(zmq.LINGER, 0)
            self._pull = self._context.socket(zmq.PULL)
            self._pull.setsockopt(zmq.LINGER, 0)
            self._pull.bind(self._inproc)
            self._push = self._context.socket(zmq.PUSH)
            self._push.setsockopt(zmq.LINGER, int(LINGER_S * 1000))
            self._push.connect(self._inproc)
        except zmq.ZMQError as error:
            self._close_sockets()
            _release_context()
            raise ActorsError(f"cannot open the publish-subscribe sockets on {bind_host!r}: {error}") from error
        self._push_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=f"sparkdbn-io-{name}", daemon=True)
        self._thread.start()

    # -- called from any thread -------------------------------------------------------------
    def send(self, frames: list[bytes]) -> None:
        """Publish ``frames`` to every subscriber (queued to the I/O thread; returns at once)."""
        with self._push_lock:
            if self._closed:
                return
            self._push.send_multipart(frames)

    def set_peers(self, endpoints: Iterable[str]) -> None:
        """Subscribe to exactly these endpoints (own endpoint excluded); applied by the I/O thread."""
        with self._peers_lock:
            self._wanted = {endpoint for endpoint in endpoints if endpoint != self.endpoint}

    def connected_peers(self) -> set[str]:
        """Endpoints the SUB socket is connected to now."""
        with self._peers_lock:
            return set(self._connected)

    def close(self) -> None:
        """Stop the I/O thread after it has sent what is queued; close sockets; release the context."""
        if self._closed:
            return
        self._stopping.set()
        self._thread.join()
        with self._push_lock:
            self._closed = True
            self._close_sockets()
        _release_context()

    # -- the I/O thread -------------------------------------------------------------------
    def _apply_peers(self) -> None:
        with self._peers_lock:
            wanted = set(self._wanted)
            connected = set(self._connected)
        for endpoint in sorted(wanted - connected):
            try:
                self._sub.connect(endpoint)
                connected.add(endpoint)
                logger.debug("%s subscribed to %s", self._name, endpoint)
            except zmq.ZMQError as error:
                logger.warning("%s cannot connect to peer endpoint %s: %s", self._name, endpoint, error)
        for endpoint in sorted(connected - wanted):
            try:
                self._sub.disconnect(endpoint)
            except zmq.ZMQError as error:  # already gone on zmq's side: nothing left to undo
                logger.debug("%s disconnect from %s: %s", self._name, endpoint, error)
            connected.discard(endpoint)
        with self._peers_lock:
            self._connected = connected

    def _forward_outgoing(self) -> None:
        while True:
            try:
                frames = self._pull.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._pub.send_multipart(frames)

    def _handle_subscriptions(self) -> None:
        joined = False
        while True:
            try:
                event = self._pub.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            joined = joined or event[:1] == b"\x01"  # b"\x01"+topic subscribe, b"\x00"+topic unsubscribe
        if joined:
            for frames in self._on_subscriber():
                self._pub.send_multipart(frames)

    def _loop(self) -> None:
        poller = zmq.Poller()
        for socket in (self._sub, self._pub, self._pull):
            poller.register(socket, zmq.POLLIN)
        timeout_ms = int(POLL_INTERVAL_S * 1000)
        while not self._stopping.is_set():
            try:
                self._apply_peers()
                ready = dict(poller.poll(timeout_ms))
                if self._pull in ready:
                    self._forward_outgoing()
                if self._pub in ready:
                    self._handle_subscriptions()
                if self._sub in ready:
                    self._receive_all()
            except zmq.ZMQError as error:
                logger.exception("%s I/O loop error (continuing): %s", self._name, error)
            except Exception:  # the callbacks' bugs must not kill message delivery; keep serving
                logger.exception("%s I/O loop callback failed (continuing)", self._name)
        # Drain what other threads queued before close (e.g. the Goodbye), then stop.
        try:
            self._forward_outgoing()
        except zmq.ZMQError as error:
            logger.warning("%s could not send queued frames at close: %s", self._name, error)

    def _receive_all(self) -> None:
        while True:
            try:
                frames = self._sub.recv_multipart(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            self._on_frames(frames)

    def _close_sockets(self) -> None:
        for attribute in ("_push", "_pull", "_sub", "_pub"):
            socket = getattr(self, attribute, None)
            if socket is not None and not socket.closed:
                socket.close()
