"""Which address an executor's node binds and which it tells its peers.

On ``local[N]`` every node lives on this machine: loopback.  On a cluster a node must listen on
an address its peers can reach, and the one Spark itself uses is the best guess:

1. ``SPARK_LOCAL_IP`` (Spark's own setting for the address it binds), else the address
   ``SPARK_LOCAL_HOSTNAME`` resolves to (and that host name is what peers are told);
2. else the local address of the interface that routes to the driver: a UDP socket
   "connected" to the driver's host reveals it with ``getsockname()``, and sends nothing.

``bind_host`` / ``advertise_host`` override the guess (``TrainingSettings``, ``--bind-host``,
``spark.sparkdbn.bind_host``): ``bind_host="0.0.0.0"`` listens on every interface and then needs
an ``advertise_host`` (behind NAT, or a name in the cluster's DNS).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket
from dataclasses import dataclass
from typing import Mapping

from actors import parse_port_range

from .._errors import TrainingError

__all__ = ["NodeAddress", "choose_node_address", "driver_address", "is_local_master", "route_address",
           "WILDCARD_HOSTS",
           "check_host_settings", "local_master_threads", "check_ports_for_nodes"]

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
#: Bind hosts that listen on every interface: never an address a peer can connect to.
WILDCARD_HOSTS = ("0.0.0.0", "::", "*")
#: Any port works for the UDP route probe (nothing is sent); Spark's driver port is not needed.
_PROBE_PORT = 9


@dataclass(frozen=True)
class NodeAddress:
    """Where a node binds (``bind_host``) and the host peers are told (``advertise_host``), and why."""

    bind_host: str
    advertise_host: str
    reason: str


def is_local_master(master: str | None) -> bool:
    """Whether ``master`` (``spark.master``) runs every executor in this process (``local``, ``local[N]``...)."""
    return (master or "local").strip().lower().startswith("local")


def local_master_threads(master: str | None) -> int | None:
    """The task threads of a local master: ``local`` 1, ``local[4]`` (or ``local[4,2]``) 4, ``local[*]`` the
    CPUs; None for a cluster's master.

    Parameters
    ----------
    master : str or None
        ``spark.master`` (None: ``local``).
    """
    if not is_local_master(master):
        return None
    match = re.fullmatch(r"local\[(\d+|\*)(,\d+)?\]", (master or "local").strip().lower())
    if match is None:
        return 1  # `local`, or a form Spark itself refuses
    return (os.cpu_count() or 1) if match.group(1) == "*" else int(match.group(1))


def check_ports_for_nodes(port_range: str | None, nodes: int, master: str | None) -> None:
    """Raise ``ValueError`` when ``port_range`` holds fewer ports than the ``nodes`` of a local master, which
    all run on this host and bind a port each (a cluster's nodes spread over its hosts: not checked here).

    Parameters
    ----------
    port_range : str or None
        ``TrainingSettings.port_range`` (``"40000-40100"``); None: any free port.
    nodes : int
        The nodes that train at once.
    master : str or None
        ``spark.master``.
    """
    ports = parse_port_range(port_range)
    if ports is None or not is_local_master(master) or ports[1] - ports[0] + 1 >= nodes:
        return
    count = ports[1] - ports[0] + 1
    raise ValueError(f"port_range {port_range} holds {count} port{'s' if count > 1 else ''} for {nodes} nodes: on "
                     f"the local master {master} every node runs on this host and binds a port of its own; give a "
                     f"range of at least {nodes} ports")


def check_host_settings(bind_host: str | None, advertise_host: str | None) -> None:
    """Raise ``ValueError`` naming the setting when the hosts given cannot work."""
    for name, value in (("bind_host", bind_host), ("advertise_host", advertise_host)):
        if value is not None and (not isinstance(value, str) or not value.strip() or any(
                character.isspace() or character in "/@" for character in value)):
            raise ValueError(f"{name} must be a host name or an IP address (e.g. 10.0.0.5), got {value!r}")
    if advertise_host in WILDCARD_HOSTS:
        raise ValueError(f"advertise_host {advertise_host!r} is no address a peer can connect to: give the host "
                         "name or address peers reach this node at")
    if bind_host in WILDCARD_HOSTS and advertise_host is None:
        raise ValueError(f"bind_host {bind_host!r} listens on every interface, which is no address a peer can "
                         "connect to: give advertise_host too (the host name or address peers reach the node at)")


def route_address(host: str) -> str:
    """The local address of the interface this machine uses to reach ``host`` (nothing is sent).

    Raises
    ------
    OSError
        ``host`` does not resolve, or there is no route to it.
    """
    family, _, _, _, address = socket.getaddrinfo(host, _PROBE_PORT, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect(address)  # UDP: picks the route and the source address, sends no packet
        return str(probe.getsockname()[0])


def driver_address(master: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The address a driver started for ``master`` binds and gives its executors (``spark.driver.host``).

    Loopback for a local master.  For a standalone master (``spark://host:port``, the first of several):
    ``SPARK_LOCAL_IP`` where set, else the address of the interface that routes to the master's host (nothing
    is sent), so that the cluster's executors can reach the driver.  None for any other master, and for a
    master host that does not resolve here: Spark's own choice.

    Parameters
    ----------
    master : str or None
        ``spark.master`` (None: ``local``).
    environ : mapping, optional
        Where ``SPARK_LOCAL_IP`` is read (default ``os.environ``).

    Raises
    ------
    TrainingError
        ``SPARK_LOCAL_IP`` is a loopback address while the master is on another host: its executors could not
        reach the driver (they would be launched, fail and be launched again, and the command would wait).
    """
    if is_local_master(master):
        return LOOPBACK
    match = re.fullmatch(r"spark://\[?([^\],/]+?)\]?(?::\d+)?(?:,.*)?", (master or "").strip())
    if match is None:
        return None
    try:
        towards_master = route_address(match.group(1))
    except OSError:
        return None
    local_ip = (os.environ if environ is None else environ).get("SPARK_LOCAL_IP")
    if local_ip and _is_loopback(local_ip) and not _is_loopback(towards_master):
        raise TrainingError(f"SPARK_LOCAL_IP is {local_ip}, a loopback address, but the master {master} is on "
                            "another host: its executors could not reach the driver. Unset SPARK_LOCAL_IP (the driver "
                            f"then uses {towards_master}, the address routing to the master) or set it to an address "
                            "they reach")
    return local_ip or towards_master


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a host name: localhost is the only loopback one worth knowing
        return address == "localhost"


def choose_node_address(*, local_master: bool, driver_host: str | None, bind_host: str | None = None,
                        advertise_host: str | None = None,
                        environ: Mapping[str, str] | None = None) -> NodeAddress:
    """The node's bind and advertised hosts (see the module docstring for the order of choices).

    Parameters
    ----------
    local_master : bool
        The driver's master is ``local[...]``: loopback unless a host is given.
    driver_host : str, optional
        ``spark.driver.host``: the executors route to it.
    bind_host : str, optional
        The user's setting of the address to bind (wins over every guess).
    advertise_host : str, optional
        The user's setting of the address peers are told (wins over every guess).
    environ : mapping, optional
        Where ``SPARK_LOCAL_IP`` / ``SPARK_LOCAL_HOSTNAME`` are read (default ``os.environ``).
    """
    check_host_settings(bind_host, advertise_host)
    environ = os.environ if environ is None else environ
    if bind_host is not None:
        return NodeAddress(bind_host, advertise_host or bind_host, "bind_host setting")
    if local_master:
        return NodeAddress(LOOPBACK, advertise_host or LOOPBACK, "local master: loopback")
    local_ip, local_hostname = environ.get("SPARK_LOCAL_IP"), environ.get("SPARK_LOCAL_HOSTNAME")
    if local_ip:
        return NodeAddress(local_ip, advertise_host or local_hostname or local_ip, "SPARK_LOCAL_IP")
    if local_hostname:
        try:
            address = socket.getaddrinfo(local_hostname, None, type=socket.SOCK_STREAM)[0][4][0]
        except OSError as error:
            logger.warning("SPARK_LOCAL_HOSTNAME %r does not resolve here (%s): the node listens on every interface",
                           local_hostname, error)
            address = "0.0.0.0"
        return NodeAddress(str(address), advertise_host or local_hostname, "SPARK_LOCAL_HOSTNAME")
    if driver_host:
        try:
            address = route_address(driver_host)
            return NodeAddress(address, advertise_host or address, f"interface routing to the driver {driver_host}")
        except OSError as error:
            logger.warning("no route from this executor to the driver host %r (%s): the node listens on every "
                           "interface and advertises this host's name", driver_host, error)
    return NodeAddress("0.0.0.0", advertise_host or socket.gethostname(), "host name (no route to the driver)")
