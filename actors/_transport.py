"""Brokerless ZeroMQ publish-subscribe between the nodes of a run.

Each node binds one XPUB socket (a PUB that also reports new subscribers) on ``bind_host`` at a
random port (or the first free one of ``port_range``) and connects one SUB socket to every peer
endpoint it is told about.  The endpoint it gives peers names ``advertise_host`` (default:
``bind_host``), because the address a socket listens on (``0.0.0.0``, or an interface behind a
NAT) need not be one a peer can connect to.  One I/O thread
owns both sockets (ZeroMQ sockets are not thread-safe): it polls

* the SUB socket, and hands each received frame list to ``on_frames``;
* the XPUB socket, whose subscription events call ``on_subscriber``, which returns frames to
  re-send, so a peer that just connected hears the newest announcement at once (the "slow
  joiner" would otherwise miss it until anti-entropy);
* an inproc PULL socket that other threads :meth:`send` through (their PUSH end is guarded by a lock),
* a monitor of the SUB socket, whose "disconnected" events call ``on_peer_lost`` and whose
  "connect retried" events count and report a peer that refuses or never answers,

with a short poll timeout so :meth:`close` is prompt.  The wanted set of peer endpoints is
applied by the I/O thread on every turn (connect new, disconnect gone).

Peers that cannot be reached cost little: ZeroMQ retries a refused or unanswered connection with
exponential backoff (from :data:`RECONNECT_START_S` to :data:`RECONNECT_MAX_S`), an endpoint it
cannot even connect to is retried the same way by the I/O thread, every retry is counted
(``peer_connect_retries``) and each endpoint is logged at most once per ``log_interval_s``.  The
node keeps catching up through the store meanwhile.  :meth:`Transport.unreachable_peers` says
how many subscribed endpoints are not connected now: a retry failed since their last completed
handshake, or none completed within :data:`CONNECT_TIMEOUT_S` of connecting.

Creating a :class:`Transport` opens nothing: :meth:`Transport.start` binds and starts the thread,
:meth:`Transport.close` stops it.  What a peer can make this process hold is bounded: ZeroMQ
drops a connection whose frame exceeds :data:`MAX_FRAME_BYTES` before reading that frame, and
queues at most :data:`RECEIVE_QUEUE_MESSAGES` messages per peer.  (ZeroMQ does not bound the
number of frames in one message; only peers in the signed registry that hold the run's key are heard at all.)

Only the nodes of the run can speak to each other at all: every socket speaks CurveZMQ under the run's key
pair (:mod:`actors._curve`).  A connection to a node's publishing port that does not complete the handshake is
dropped before any subscription is read, and counted as ``refused_subscribers``.

Between the nodes of a run, the publishing socket still drops a connection that sends a message longer
than :data:`MAX_SUBSCRIPTION_BYTES` (nodes send the 1-byte subscription to every topic): without the bound
one 100 MB subscription message made a node hold 4.5 GB.

One ZeroMQ context is shared by every transport in the process (:mod:`actors._context`).
"""

from __future__ import annotations

import itertools
import logging
import random
import socket as socket_module
import threading
import time
from typing import Callable, Iterable

import zmq
from zmq.utils.monitor import recv_monitor_message

from ._context import acquire_context, release_context
from ._curve import as_run_publisher, as_run_subscriber
from ._errors import ActorsError, NodeAddressError
from ._stats import Counters, LogEvery
from ._wire import MAX_PAYLOAD_BYTES

__all__ = ["Transport", "parse_port_range"]

logger = logging.getLogger(__name__)

#: Poll timeout of the I/O thread: bounds how long close() and peer changes wait.
POLL_INTERVAL_S = 0.05
#: How long close() lets queued frames (e.g. the Goodbye) leave before dropping them.
LINGER_S = 0.5
#: A SUB socket drops the connection of a peer sending a frame larger than this (unread).
MAX_FRAME_BYTES = MAX_PAYLOAD_BYTES + 1024
#: The publishing socket drops the connection of a subscriber that sends a longer message (see the module
#: notes).  Nodes subscribe with 1 byte, ``b"\x01"`` (every topic); the limit also applies to the CurveZMQ
#: handshake, whose longest command a SUB socket sends (INITIATE) needs a limit of 276 bytes.
MAX_SUBSCRIPTION_BYTES = 512
#: Messages queued per peer before ZeroMQ drops new ones (announcements are rare and superseded).
RECEIVE_QUEUE_MESSAGES = 100
#: Backoff of reconnection attempts to a peer that refuses or does not answer (doubling up to the maximum).
RECONNECT_START_S = 0.5
RECONNECT_MAX_S = 30.0
#: A connection attempt, or the ZeroMQ handshake after it, that takes longer than this is abandoned and retried.
CONNECT_TIMEOUT_S = 5.0
#: An unreachable peer is logged at warning level at most this often (each retry is counted).
PEER_LOG_INTERVAL_S = 60.0
#: Monitor events of the publishing socket that mean a connection did not complete the CurveZMQ handshake.
_REFUSED_HANDSHAKES = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                       | zmq.EVENT_HANDSHAKE_FAILED_AUTH)

_inproc_ids = itertools.count()


def parse_port_range(text: str | None) -> tuple[int, int] | None:
    """``"40000-40100"`` -> ``(40000, 40100)``, ``"40000"`` -> ``(40000, 40000)``, None -> None (any port).

    Raises
    ------
    ValueError
        Naming the text, when it is not one port or ``low-high`` with 1 <= low <= high <= 65535.
    """
    if text is None:
        return None
    parts = str(text).strip().split("-")
    try:
        low, high = (int(parts[0]), int(parts[-1])) if len(parts) in (1, 2) else (0, -1)
    except ValueError:
        low, high = 0, -1
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"port_range must be a port or 'low-high' with 1 <= low <= high <= 65535 "
                         f"(e.g. '40000-40100'), got {text!r}")
    return low, high


def _tcp_host(host: str) -> str:
    """``host`` as it goes into a ``tcp://`` endpoint (IPv6 literals in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class Transport:
    """One node's PUB endpoint and subscriptions (created idle: call :meth:`start`).

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
    secret : bytes
        The run's key: every socket speaks CurveZMQ under the key pair derived from it (module notes).
    on_peer_lost : callable(str), optional
        Called in the I/O thread with the endpoint whose connection dropped (the peer went
        away, or sent a frame over :data:`MAX_FRAME_BYTES`).
    counters : Counters, optional
        Where ``peer_connect_retries`` is counted.
    log_interval_s : float, optional
        How often an unreachable peer is logged at warning level at most (default :data:`PEER_LOG_INTERVAL_S`).
    advertise_host : str, optional
        The host name or address peers are told to connect to (default: ``bind_host``; required
        when ``bind_host`` is a wildcard such as ``"0.0.0.0"``).
    port_range : (int, int), optional
        Bind the first free port of this inclusive range, starting at a random one (default: any port).
    """

    def __init__(
        self,
        bind_host: str,
        on_frames: Callable[[list[bytes]], None],
        on_subscriber: Callable[[], Iterable[list[bytes]]],
        name: str,
        secret: bytes,
        on_peer_lost: Callable[[str], None] | None = None,
        counters: Counters | None = None,
        log_interval_s: float | None = None,
        advertise_host: str | None = None,
        port_range: tuple[int, int] | None = None,
    ) -> None:
        if advertise_host is None and bind_host in ("0.0.0.0", "*", "::"):
            raise NodeAddressError(f"bind host {bind_host!r} listens on every interface but is no address a peer can "
                                   "connect to: give an advertise host too")
        if port_range is not None and not 1 <= port_range[0] <= port_range[1] <= 65535:
            raise NodeAddressError(f"port range {port_range[0]}-{port_range[1]} is not within 1-65535")
        self._bind_host = bind_host
        self._advertise_host = advertise_host or bind_host
        self._port_range = port_range
        self._on_frames = on_frames
        self._on_subscriber = on_subscriber
        self._on_peer_lost = on_peer_lost
        self._name = name
        self._secret = secret
        self._stopping = threading.Event()
        self._started = False
        self._closed = False
        self._peers_lock = threading.Lock()
        self._push_lock = threading.Lock()
        self._wanted: set[str] = set()
        self._connected: set[str] = set()
        self._counters = counters if counters is not None else Counters()
        self._peer_log = LogEvery(logger, PEER_LOG_INTERVAL_S if log_interval_s is None else log_interval_s)
        self._retry_at: dict[str, tuple[float, float]] = {}  # endpoint -> (next attempt, backoff), I/O thread only
        # Reachability, under _peers_lock: when each subscribed endpoint was connected (or last lost),
        # which completed a handshake since, which failed a try since; and the names ZeroMQ's monitor
        # events use for them (the resolved address) -> the endpoint as registered.
        self._connect_started: dict[str, float] = {}
        self._handshaken: set[str] = set()
        self._failing: set[str] = set()
        self._event_names: dict[str, str] = {}
        self._thread: threading.Thread | None = None
        self.endpoint: str | None = None

    def start(self) -> "Transport":
        """Bind the publishing socket on a random port, open the others, start the I/O thread."""
        if self._started:
            raise ActorsError(f"transport {self._name} was already started")
        self._started = True
        self._context = acquire_context()
        self._inproc = f"inproc://sparkdbn-transport-{next(_inproc_ids)}"
        try:
            self._pub = self._context.socket(zmq.XPUB)
            self._pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # report every subscriber, not only the first
            self._pub.setsockopt(zmq.MAXMSGSIZE, MAX_SUBSCRIPTION_BYTES)  # a long topic is refused unread: module notes
            self._pub.setsockopt(zmq.LINGER, int(LINGER_S * 1000))
            self._pub.setsockopt(zmq.HANDSHAKE_IVL, int(CONNECT_TIMEOUT_S * 1000))
            as_run_publisher(self._pub, self._secret)
            self._pub_monitor = self._pub.get_monitor_socket(_REFUSED_HANDSHAKES)
            port = self._bind_port()
            self.endpoint = f"tcp://{_tcp_host(self._advertise_host)}:{port}"
            self._sub = self._context.socket(zmq.SUB)
            self._sub.setsockopt(zmq.SUBSCRIBE, b"")  # every topic: foreign frames get counted
            self._sub.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
            self._sub.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE_MESSAGES)
            self._sub.setsockopt(zmq.LINGER, 0)
            self._sub.setsockopt(zmq.RECONNECT_IVL, int(RECONNECT_START_S * 1000))
            self._sub.setsockopt(zmq.RECONNECT_IVL_MAX, int(RECONNECT_MAX_S * 1000))
            self._sub.setsockopt(zmq.CONNECT_TIMEOUT, int(CONNECT_TIMEOUT_S * 1000))
            self._sub.setsockopt(zmq.HANDSHAKE_IVL, int(CONNECT_TIMEOUT_S * 1000))
            as_run_subscriber(self._sub, self._secret)
            self._monitor = self._sub.get_monitor_socket(
                zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_HANDSHAKE_SUCCEEDED)
            self._pull = self._context.socket(zmq.PULL)
            self._pull.setsockopt(zmq.LINGER, 0)
            self._pull.bind(self._inproc)
            self._push = self._context.socket(zmq.PUSH)
            self._push.setsockopt(zmq.LINGER, int(LINGER_S * 1000))
            self._push.connect(self._inproc)
        except (zmq.ZMQError, NodeAddressError) as error:
            self._closed = True
            self._close_sockets()
            release_context()
            if isinstance(error, NodeAddressError):
                raise
            raise ActorsError(f"cannot open the publish-subscribe sockets on {self._bind_host!r}: {error}") from error
        self._thread = threading.Thread(target=self._loop, name=f"sparkdbn-io-{self._name}", daemon=True)
        self._thread.start()
        return self

    def _bind_port(self) -> int:
        """Bind the XPUB socket: any port, or the first free one of the range from a random start."""
        address = f"tcp://{_tcp_host(self._bind_host)}"
        if self._port_range is None:
            try:
                self._pub.bind(f"{address}:0")
            except zmq.ZMQError as error:
                raise NodeAddressError(f"cannot bind a node endpoint on host {self._bind_host!r}: {error} (is it an "
                                       "address of this machine? see bind_host)") from error
            return int(self._pub.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
        low, high = self._port_range
        ports = list(range(low, high + 1))
        start = random.randrange(len(ports))  # nodes starting together should not all race for the first port
        last_error: zmq.ZMQError | None = None
        for port in ports[start:] + ports[:start]:
            try:
                self._pub.bind(f"{address}:{port}")
                return port
            except zmq.ZMQError as error:
                if error.errno != zmq.EADDRINUSE:
                    raise NodeAddressError(f"cannot bind a node endpoint on host {self._bind_host!r} port {port}: "
                                           f"{error} (is it an address of this machine? see bind_host)") from error
                last_error = error
        raise NodeAddressError(f"every port of the port range {low}-{high} on host {self._bind_host!r} is taken "
                               f"({len(ports)} tried; last: {last_error}): widen port_range or free ports")

    # -- called from any thread -------------------------------------------------------------
    def send(self, frames: list[bytes]) -> None:
        """Publish ``frames`` to every subscriber (queued to the I/O thread; returns at once)."""
        with self._push_lock:
            if self._closed or not self._started:
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

    def unreachable_peers(self) -> set[str]:
        """Wanted endpoints not connected now: a try failed since their last completed handshake, or
        none completed within :data:`CONNECT_TIMEOUT_S` of connecting (or could not even be connected)."""
        now = time.monotonic()
        with self._peers_lock:
            return {endpoint for endpoint in self._wanted if endpoint not in self._handshaken and (
                endpoint in self._failing or now - self._connect_started.get(endpoint, now) >= CONNECT_TIMEOUT_S
                or endpoint in self._retry_at)}

    def close(self) -> None:
        """Stop the I/O thread after it has sent what is queued; close sockets; release the context.

        Idempotent; a transport never started has nothing to close.
        """
        if self._closed or not self._started:
            self._closed = True
            return
        self._stopping.set()
        self._thread.join()
        with self._push_lock:
            self._closed = True
            self._close_sockets()
        release_context()

    # -- the I/O thread -------------------------------------------------------------------
    def _apply_peers(self) -> None:
        with self._peers_lock:
            wanted = set(self._wanted)
            connected = set(self._connected)
        now = time.monotonic()
        for endpoint in sorted(wanted - connected):
            due, backoff = self._retry_at.get(endpoint, (now, 0.0))
            if now < due:
                continue
            try:
                self._sub.connect(endpoint)
                connected.add(endpoint)
                self._retry_at.pop(endpoint, None)
                self._track_connect(endpoint, now)
                logger.debug("%s subscribed to %s", self._name, endpoint)
            except zmq.ZMQError as error:  # e.g. a host name that does not resolve
                backoff = min(RECONNECT_MAX_S, 2 * backoff) if backoff else RECONNECT_START_S
                self._retry_at[endpoint] = (now + backoff, backoff)
                self._unreachable(endpoint, f"{error}; next try in {backoff:.1f} s")
        for endpoint in set(self._retry_at) - wanted:
            del self._retry_at[endpoint]
        for endpoint in sorted(connected - wanted):
            try:
                self._sub.disconnect(endpoint)
            except zmq.ZMQError as error:  # already gone on zmq's side: nothing left to undo
                logger.debug("%s disconnect from %s: %s", self._name, endpoint, error)
            connected.discard(endpoint)
        with self._peers_lock:
            self._connected = connected
            for endpoint in set(self._connect_started) - connected:
                self._forget(endpoint)

    def _track_connect(self, endpoint: str, now: float) -> None:
        names = {endpoint}
        try:  # the monitor names a connection by its resolved address: remember both (I/O thread only)
            host, port = endpoint[len("tcp://"):].rsplit(":", 1)
            for *_, address in socket_module.getaddrinfo(host.strip("[]"), int(port), type=socket_module.SOCK_STREAM):
                names.add(f"tcp://{_tcp_host(address[0])}:{address[1]}")
        except (OSError, ValueError) as error:  # zmq accepted it; only the bookkeeping misses a name
            logger.debug("%s cannot resolve %s: %s", self._name, endpoint, error)
        with self._peers_lock:
            self._connect_started[endpoint] = now
            self._handshaken.discard(endpoint)
            self._failing.discard(endpoint)
            for name in names:
                self._event_names[name] = endpoint

    def _forget(self, endpoint: str) -> None:  # under _peers_lock
        self._connect_started.pop(endpoint, None)
        self._handshaken.discard(endpoint)
        self._failing.discard(endpoint)
        for name in [name for name, target in self._event_names.items() if target == endpoint]:
            del self._event_names[name]

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
        for socket in (self._sub, self._pub, self._pull, self._monitor, self._pub_monitor):
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
                if self._monitor in ready:
                    self._handle_monitor_events()
                if self._pub_monitor in ready:
                    self._count_refused_subscribers()
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

    def _handle_monitor_events(self) -> None:
        while True:
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            endpoint = event["endpoint"]
            endpoint = endpoint.decode("utf-8", "replace") if isinstance(endpoint, bytes) else str(endpoint)
            with self._peers_lock:
                endpoint = self._event_names.get(endpoint, endpoint)
                if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self._handshaken.add(endpoint)
                    self._failing.discard(endpoint)
                elif event["event"] == zmq.EVENT_DISCONNECTED and endpoint in self._connect_started:
                    self._handshaken.discard(endpoint)  # ZeroMQ reconnects: the clock starts again
                    self._connect_started[endpoint] = time.monotonic()
            if event["event"] == zmq.EVENT_CONNECT_RETRIED:
                with self._peers_lock:
                    if endpoint in self._connect_started:
                        self._failing.add(endpoint)
                self._unreachable(endpoint, "refused, or no answer within "
                                  f"{CONNECT_TIMEOUT_S:.0f} s; retrying with backoff up to {RECONNECT_MAX_S:.0f} s")
            elif event["event"] == zmq.EVENT_DISCONNECTED and self._on_peer_lost is not None:
                self._on_peer_lost(endpoint)

    def _count_refused_subscribers(self) -> None:
        while True:
            try:
                recv_monitor_message(self._pub_monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            self._counters.add("refused_subscribers")
            self._peer_log.log("refused", "subscribers", "%s refused a connection to its publishing port that did not "
                               "complete the run's CurveZMQ handshake (a process without the run's key, or of another "
                               "run)", self._name)

    def _unreachable(self, endpoint: str, why: str) -> None:
        self._counters.add("peer_connect_retries")
        self._peer_log.log("unreachable", endpoint, "%s cannot reach peer endpoint %s (%s); catching up through the "
                           "store meanwhile", self._name, endpoint, why)

    def _close_sockets(self) -> None:
        for socket_name, monitor_name in (("_sub", "_monitor"), ("_pub", "_pub_monitor")):
            socket = getattr(self, socket_name, None)
            if socket is not None and not socket.closed and getattr(self, monitor_name, None) is not None:
                socket.disable_monitor()
        for attribute in ("_monitor", "_pub_monitor", "_push", "_pull", "_sub", "_pub"):
            socket = getattr(self, attribute, None)
            if socket is not None and not socket.closed:
                socket.close()
