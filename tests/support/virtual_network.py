"""Hosts made of Linux network namespaces, joined by one bridge that lives in a namespace of its own.

The network layer of :mod:`support.virtual_cluster`.  Every host is a namespace holding one end
of a veth pair (with the host's address) and ``lo``; the other end is a port of the bridge in
the bridge namespace.  The machine's own namespace never holds an address, route or interface of
the cluster: the veth pairs are created inside the bridge namespace and their host ends moved
straight into the hosts.  IPv6 is off in every namespace, so interface counters show only the
traffic the processes make (plus a little ARP).

Names: a prefix such as ``sdbn4f1c`` makes every name unique: namespaces ``<prefix>-<host>``
and ``<prefix>-bridge``, the bridge ``<prefix>-br``, veth ends ``<prefix>-h<i>`` (in host *i*)
and ``<prefix>-b<i>`` (on the bridge).  Interface names stay within Linux's 15 characters.
Name resolution: ``/etc/netns/<namespace>/hosts``, which ``ip netns exec`` bind-mounts over
``/etc/hosts`` for the processes it starts.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

__all__ = [
    "DEFAULT_SUBNET",
    "Host",
    "InterfaceBytes",
    "VirtualClusterError",
    "bridge_namespace",
    "can_connect",
    "cluster_unavailable_reason",
    "create_network",
    "delete_namespaces",
    "host_command",
    "host_environment",
    "hosts_file_dir",
    "interface_bytes",
    "kill_namespace_processes",
    "namespace_exists",
    "namespace_pids",
    "plan_hosts",
    "set_bridge_port",
]

logger = logging.getLogger(__name__)

DEFAULT_SUBNET = "10.213.7.0/24"
NETNS_CONFIG_DIR = Path("/etc/netns")
_IP_TIMEOUT_S = 30.0
_MAX_INTERFACE_NAME = 15  # IFNAMSIZ - 1
_REQUIRED_COMMANDS = ("ip", "unshare", "hostname", "sysctl")
_HOST_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}")
# Runs in a fresh UTS namespace: the host's name becomes the process's hostname, so
# socket.gethostname() and Java's InetAddress.getLocalHost() answer as on a real machine.
_SET_HOSTNAME_THEN_EXEC = 'hostname "$0" && exec "$@"'
_PROBE = """import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
except OSError as exc:
    print(exc)
    sys.exit(1)
"""


class VirtualClusterError(RuntimeError):
    """Building, using or tearing down a virtual cluster failed."""


@dataclass(frozen=True)
class Host:
    """One virtual host.

    Attributes
    ----------
    name : str
        Host name, resolvable from every host of the cluster (``driver``, ``worker1``, ...).
    namespace : str
        Its network namespace (``<prefix>-<name>``).
    address : str
        Its IPv4 address in the cluster subnet.
    device : str
        Its end of the veth pair, inside its namespace.
    bridge_port : str
        The other end, a port of the bridge in the bridge namespace.
    """

    name: str
    namespace: str
    address: str
    device: str
    bridge_port: str


@dataclass(frozen=True)
class InterfaceBytes:
    """Byte counters of a host's interface; subtract two readings for the traffic between them."""

    rx_bytes: int
    tx_bytes: int

    def __sub__(self, earlier: "InterfaceBytes") -> "InterfaceBytes":
        return InterfaceBytes(self.rx_bytes - earlier.rx_bytes, self.tx_bytes - earlier.tx_bytes)


def cluster_unavailable_reason() -> str | None:
    """Why no virtual cluster can be built here (not root, a missing command, no namespaces), or None."""
    if os.geteuid() != 0:
        return "virtual cluster tests need root (network namespaces): run as root, as CI does"
    missing = [command for command in _REQUIRED_COMMANDS if shutil.which(command) is None]
    if missing:
        return f"virtual cluster tests need {', '.join(missing)} (iproute2, util-linux, procps)"
    probe = f"sdbnprobe{os.getpid()}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"virtual cluster tests need network namespaces: `ip netns add` said {done.stderr.strip()!r}"
    _ip("netns", "delete", probe)
    return None


def bridge_namespace(prefix: str) -> str:
    """The namespace that holds the bridge of the cluster named by ``prefix``."""
    return f"{prefix}-bridge"


def hosts_file_dir(namespace: str) -> Path:
    """The folder whose ``hosts`` file ``ip netns exec`` mounts over ``/etc/hosts`` in ``namespace``."""
    return NETNS_CONFIG_DIR / namespace


def plan_hosts(prefix: str, names: Sequence[str], subnet: str) -> list[Host]:
    """Name and address the hosts (first address of ``subnet`` to the first name, and so on).

    Raises
    ------
    VirtualClusterError
        A host name that is not a plain lower-case name, a duplicate, a subnet that is not an
        IPv4 network or is too small, or a prefix that makes interface names too long.
    """
    try:
        network = ipaddress.IPv4Network(subnet)
    except ValueError as exc:
        raise VirtualClusterError(f"subnet {subnet!r} is not an IPv4 network such as {DEFAULT_SUBNET}") from exc
    for name in names:
        if not _HOST_NAME.fullmatch(name):
            raise VirtualClusterError(f"host name {name!r}: use lower-case letters, digits and '-', "
                                      f"starting with a letter (at most 31 characters)")
    duplicates = sorted({name for name in names if list(names).count(name) > 1})
    if duplicates:
        raise VirtualClusterError(f"host names must be unique; repeated: {', '.join(duplicates)}")
    addresses = list(network.hosts())
    if len(names) > len(addresses):
        raise VirtualClusterError(f"subnet {subnet} has {len(addresses)} addresses for {len(names)} hosts")
    longest = f"{prefix}-h{len(names)}"
    if len(longest) > _MAX_INTERFACE_NAME:
        raise VirtualClusterError(f"prefix {prefix!r} is too long: interface name {longest!r} exceeds "
                                  f"{_MAX_INTERFACE_NAME} characters")
    return [Host(name, f"{prefix}-{name}", str(address), f"{prefix}-h{index}", f"{prefix}-b{index}")
            for index, (name, address) in enumerate(zip(names, addresses), start=1)]


def _ip(*args: str, namespace: str | None = None) -> str:
    """Run ``ip [-n namespace] args``; its stdout, or an error that names the command."""
    command = ["ip", *(["-n", namespace] if namespace else []), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VirtualClusterError(f"{' '.join(command)}: {exc}") from exc
    if done.returncode != 0:
        raise VirtualClusterError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _in_namespace(namespace: str, *argv: str) -> str:
    """Run a short command inside ``namespace``; its stdout."""
    return _ip("netns", "exec", namespace, *argv)


def namespace_exists(namespace: str) -> bool:
    """True when ``ip netns`` knows ``namespace``."""
    return os.path.exists(f"/run/netns/{namespace}")


def create_network(prefix: str, hosts: Sequence[Host], subnet: str) -> None:
    """Create the bridge namespace, the bridge and every host (namespace, veth, address, hosts file).

    Each step creates something with the prefix in its name, so a failure half-way leaves only
    things that :func:`delete_namespaces` (given the planned names) removes.
    """
    bridge_ns, bridge = bridge_namespace(prefix), f"{prefix}-br"
    prefix_length = ipaddress.IPv4Network(subnet).prefixlen
    _ip("netns", "add", bridge_ns)
    _disable_ipv6(bridge_ns)
    _ip("link", "add", bridge, "type", "bridge", namespace=bridge_ns)
    _ip("link", "set", bridge, "up", namespace=bridge_ns)
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{host.address}\t{host.name}" for host in hosts]
    for host in hosts:
        _ip("netns", "add", host.namespace)
        _disable_ipv6(host.namespace)
        folder = hosts_file_dir(host.namespace)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts").write_text("\n".join(lines) + "\n")
        # Both ends are born in the bridge namespace and the host end moves at once: the
        # machine's own namespace never sees them.
        _ip("link", "add", host.bridge_port, "type", "veth", "peer", "name", host.device, "netns", host.namespace,
            namespace=bridge_ns)
        _ip("link", "set", host.bridge_port, "master", bridge, "up", namespace=bridge_ns)
        _ip("link", "set", "lo", "up", namespace=host.namespace)
        _ip("addr", "add", f"{host.address}/{prefix_length}", "dev", host.device, namespace=host.namespace)
        _ip("link", "set", host.device, "up", namespace=host.namespace)
    logger.info("virtual network %s: %s", prefix, ", ".join(f"{h.name}={h.address}" for h in hosts))


def _disable_ipv6(namespace: str) -> None:
    # Router solicitations, MLD and DAD would otherwise show up in the byte counters.
    _in_namespace(namespace, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
                  "net.ipv6.conf.default.disable_ipv6=1")


def host_command(host: Host, argv: Sequence[str]) -> list[str]:
    """The command line that runs ``argv`` inside ``host`` under its own host name.

    ``ip netns exec`` and ``unshare`` exec (they do not fork), so the PID of the process started
    from this command line is the PID of ``argv`` itself.
    """
    return ["ip", "netns", "exec", host.namespace, "unshare", "--uts", "--",
            "sh", "-c", _SET_HOSTNAME_THEN_EXEC, host.name, *argv]


def host_environment(host: Host, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of processes on ``host``: this one's, with Spark pointed at the host.

    ``SPARK_LOCAL_IP`` is the host's address; ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` are
    this Python (a driver's environment decides its executors' Python); ``env`` wins.  A
    ``PYSPARK_GATEWAY_*`` of this process is left out (it would make pyspark attach to our JVM).
    """
    merged = {key: value for key, value in os.environ.items() if not key.startswith("PYSPARK_GATEWAY")}
    merged.update(SPARK_LOCAL_IP=host.address, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    merged.update(env or {})
    return merged


def set_bridge_port(prefix: str, host: Host, up: bool) -> None:
    """Bring the bridge end of ``host``'s link down (a pulled cable: packets vanish) or up again.

    The host keeps its address and route; it only loses its carrier, so connections time out
    instead of failing at once, as with a real cut.
    """
    _ip("link", "set", host.bridge_port, "up" if up else "down", namespace=bridge_namespace(prefix))


def interface_bytes(host: Host) -> InterfaceBytes:
    """Bytes received and sent by ``host``'s interface, read inside its namespace."""
    folder = f"/sys/class/net/{host.device}/statistics"
    rx, tx = _in_namespace(host.namespace, "cat", f"{folder}/rx_bytes", f"{folder}/tx_bytes").split()
    return InterfaceBytes(int(rx), int(tx))


def can_connect(host: Host, to_host: str, port: int, timeout_s: float) -> bool:
    """Whether a TCP connection from ``host`` to ``to_host``:``port`` opens within ``timeout_s``.

    The probe is a Python process inside ``host``'s namespace; it resolves ``to_host`` there.
    """
    command = ["ip", "netns", "exec", host.namespace, sys.executable, "-I", "-S", "-c", _PROBE, to_host, str(port),
               str(timeout_s)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + _IP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise VirtualClusterError(f"the probe on {host.name} did not end: {exc}") from exc
    if done.returncode not in (0, 1):
        raise VirtualClusterError(f"the probe on {host.name} failed ({done.returncode}): {done.stderr[-2000:]}")
    logger.debug("probe %s -> %s:%d: %s", host.name, to_host, port, done.stdout.strip() or "connected")
    return done.returncode == 0


def namespace_pids(namespace: str) -> list[int]:
    """The PIDs of the processes in ``namespace`` (none when it does not exist)."""
    if not namespace_exists(namespace):
        return []
    return [int(pid) for pid in _ip("netns", "pids", namespace).split()]


def kill_namespace_processes(namespace: str, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL every process in ``namespace`` (all of them started there by this tool) until none is left.

    Returns
    -------
    list of int
        The PIDs that were killed.
    """
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while pids := namespace_pids(namespace):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass  # it ended between the listing and the kill
        if time.monotonic() > deadline:
            raise VirtualClusterError(f"processes {pids} in namespace {namespace} survived SIGKILL for {timeout_s:.0f} s")
        time.sleep(0.05)  # polling until the kernel has reaped them (a deadline bounds it)
    return sorted(set(killed))


def delete_namespaces(namespaces: Sequence[str]) -> None:
    """Kill what runs in each namespace, delete it and its hosts file (missing ones are skipped)."""
    for namespace in namespaces:
        kill_namespace_processes(namespace)
        if namespace_exists(namespace):
            _ip("netns", "delete", namespace)
        folder = hosts_file_dir(namespace)
        if folder.exists():
            shutil.rmtree(folder)
