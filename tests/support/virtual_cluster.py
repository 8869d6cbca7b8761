"""A virtual multi-host cluster on one Linux machine, for multi-host tests, benchmarks and demos.

Each host is a network namespace with its own address in a private subnet (10.213.7.0/24 by
default), its own host name (resolvable from every host) and its own UTS host name; one bridge,
in a namespace of its own, joins them.  The machine's own namespace gets no address and no route
in the subnet: every process that talks to the cluster runs inside one of its hosts.  Needs root
and iproute2 (see :func:`cluster_unavailable_reason`)::

    with VirtualCluster(workers=2) as cluster:        # hosts: driver, master, namenode, datanode, worker1, worker2
        driver = cluster.popen("driver", [sys.executable, "job.py", cluster.store_url("/run")],
                               env={"SPARK_CONF": json.dumps(cluster.spark_conf())}, log=tmp / "driver.log")
        cluster.cut_link("worker2")                    # its packets vanish, as with a pulled cable
        before = cluster.interface_bytes("worker1")
        cluster.kill_host("worker2")                   # SIGKILL all its processes, delete it
        assert driver.wait(timeout=300) == 0

Roles: a Spark standalone master on ``master`` (:attr:`VirtualCluster.master_url`), one Spark
worker on each ``worker<i>``, the WebHDFS test namenode on ``namenode`` whose redirects send
data to the datanode on ``datanode`` (:meth:`VirtualCluster.store_url` gives
``hdfs://namenode:9870/...``), and ``driver`` for the driver.  Processes are started in a host
with :meth:`VirtualCluster.popen`; only processes the cluster started are ever signalled, by
PID.  Everything is removed by :meth:`VirtualCluster.down` (also at exit, and by the next
cluster when the creating process was killed; see :mod:`support.virtual_cluster_state`).
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from .virtual_cluster_services import (
    DATANODE_PORT,
    DEFAULT_JVM_OPTIONS,
    NAMENODE_PORT,
    SPARK_MASTER_PORT,
    ServiceSpec,
    datanode,
    namenode,
    spark_driver_conf,
    spark_master,
    spark_worker,
    wait_for_line,
)
from .virtual_cluster_processes import STOP_TIMEOUT_S, HostProcesses, StartedProcess
from .virtual_cluster_state import (
    ClusterRecord,
    clean_leftovers,
    destroy,
    process_start_ticks,
    reserve_record,
    save_record,
)
from .virtual_network import (
    DEFAULT_SUBNET,
    Host,
    InterfaceBytes,
    VirtualClusterError,
    can_connect,
    cluster_unavailable_reason,
    create_network,
    delete_namespaces,
    host_environment,
    interface_bytes,
    kill_namespace_processes,
    plan_hosts,
    set_bridge_port,
)

__all__ = [
    "DEFAULT_SUBNET",
    "Host",
    "InterfaceBytes",
    "VirtualCluster",
    "VirtualClusterError",
    "clean_leftovers",
    "cluster_unavailable_reason",
    "host_environment",
    "wait_for_line",
]

logger = logging.getLogger(__name__)

DEFAULT_START_TIMEOUT_S = 180.0


class VirtualCluster:
    """Hosts, a Spark standalone cluster and an HDFS-like store, in network namespaces.

    Parameters
    ----------
    workers : int
        Spark worker hosts (``worker1`` ...); 0 starts no Spark (no ``master`` host either).
    store : bool
        Start the WebHDFS namenode and datanode, each on a host of its own.
    extra_hosts : sequence of str
        More hosts with nothing running on them (for the caller's own processes).
    subnet : str
        IPv4 subnet of the cluster; hosts get its first addresses in the order
        driver, master, namenode, datanode, worker1..N, extra hosts.
    work_dir : path, optional
        Folder for logs (``<host>/<role>.log``), Spark work folders and the HDFS tree
        (``hdfs/``); a new temporary folder by default.  It is kept after :meth:`down`.
    worker_cores, worker_memory : int, str
        What each Spark worker offers to executors.
    jvm_options : str
        JVM options of the Spark daemons (small, quick JVMs by default); :meth:`spark_conf`
        gives the same to the driver and executors.
    start_timeout_s : float
        How long :meth:`up` waits for every daemon to say it is ready.
    owner : str
        ``"python"`` (tests, scripts) or ``"cli"`` (``scripts/virtual-cluster up``): what ``down``
        without a prefix may stop.
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        store: bool = True,
        extra_hosts: Sequence[str] = (),
        subnet: str = DEFAULT_SUBNET,
        work_dir: str | os.PathLike | None = None,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        jvm_options: str = DEFAULT_JVM_OPTIONS,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        owner: str = "python",
    ) -> None:
        if workers < 0 or worker_cores < 1:
            raise VirtualClusterError(f"workers must be >= 0 and worker_cores >= 1, got {workers} and {worker_cores}")
        self.workers, self.store = workers, store
        self.worker_cores, self.worker_memory, self.jvm_options = worker_cores, worker_memory, jvm_options
        self.subnet, self.start_timeout_s, self.owner = subnet, start_timeout_s, owner
        self.worker_hosts = [f"worker{index}" for index in range(1, workers + 1)]
        self._host_names = (["driver"] + (["master"] if workers else []) + (["namenode", "datanode"] if store else [])
                            + self.worker_hosts + list(extra_hosts))
        plan_hosts("sdbn0000", self._host_names, subnet)  # bad names or subnet fail here, before anything exists
        self._requested_work_dir = work_dir
        self.work_dir = Path()
        self._record: ClusterRecord | None = None
        self._hosts: dict[str, Host] = {}
        self._killed_hosts: set[str] = set()
        self._processes = HostProcesses(self.work_dir)
        self._services: dict[str, StartedProcess] = {}

    # -- life cycle ------------------------------------------------------------------------
    def up(self) -> "VirtualCluster":
        """Build the network, start the daemons and wait until each says it is ready; returns self."""
        if self._record is not None:
            raise VirtualClusterError(f"virtual cluster {self.prefix} is already up")
        reason = cluster_unavailable_reason()
        if reason:
            raise VirtualClusterError(reason)
        self.work_dir = Path(self._requested_work_dir or tempfile.mkdtemp(prefix="sparkdbn-virtual-cluster-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._processes, self._killed_hosts = HostProcesses(self.work_dir), set()
        started = time.monotonic()
        me = os.getpid()
        self._record, cleaned = reserve_record(lambda prefix: ClusterRecord(
            prefix=prefix, owner=self.owner, creator_pid=me, creator_start_ticks=process_start_ticks(me) or 0,
            subnet=self.subnet, work_dir=str(self.work_dir), hosts=plan_hosts(prefix, self._host_names, self.subnet)))
        if cleaned:
            logger.warning("removed virtual clusters left by dead processes: %s", ", ".join(cleaned))
        atexit.register(self.down)
        try:
            self._hosts = {host.name: host for host in self._record.hosts}
            create_network(self.prefix, self._record.hosts, self.subnet)
            for name in self._hosts:
                (self.work_dir / name).mkdir(exist_ok=True)
            self._start_services()
        except BaseException:
            self.down()
            raise
        logger.info("virtual cluster %s up in %.1f s (%s)", self.prefix, time.monotonic() - started, self.work_dir)
        return self

    def _start_services(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        waiting: list[tuple[StartedProcess, str, int]] = []
        if self.store:
            waiting += self._launch_store()
        if self.workers:
            waiting.append(self._launch("master", spark_master(self._hosts["master"], self.jvm_options)))
        self._record.services = {"master_url": self.master_url if self.workers else "",
                                 "store_url": self.store_url("/") if self.store else ""}
        # Workers start once the master listens: one that finds no master retries only after 5-15 s.
        self._wait(waiting, deadline)
        workers = [self._launch(name, spark_worker(self._hosts[name], self.master_url, self.work_dir / name / "spark",
                                                   self.worker_cores, self.worker_memory, self.jvm_options))
                   for name in self.worker_hosts]
        self._wait(workers, deadline)

    def down(self) -> None:
        """Stop every process (SIGTERM by PID, then SIGKILL), then remove namespaces, bridge and hosts files.

        Idempotent; also runs at interpreter exit.  The work folder is kept.
        """
        if self._record is None:
            return
        record, self._record = self._record, None
        atexit.unregister(self.down)
        try:
            self._processes.stop_all()
        finally:
            destroy(record)  # SIGKILLs whatever is still in the namespaces (all started in them by us)
            self._processes.reap()
            self._services.clear()

    def __enter__(self) -> "VirtualCluster":
        return self.up()

    def __exit__(self, *exc_info: object) -> None:
        self.down()

    # -- what there is -------------------------------------------------------------------
    @property
    def prefix(self) -> str:
        """The prefix of every name this cluster created (namespaces, interfaces)."""
        if self._record is None:
            raise VirtualClusterError("the virtual cluster is not up")
        return self._record.prefix

    @property
    def hosts(self) -> dict[str, Host]:
        """The live hosts by name (a host removed by :meth:`kill_host` is gone)."""
        return {name: host for name, host in self._hosts.items() if name not in self._killed_hosts}

    def host(self, name: str) -> Host:
        """The live host ``name``."""
        if name in self._killed_hosts:
            raise VirtualClusterError(f"host {name!r} was killed (kill_host)")
        if name not in self._hosts:
            raise VirtualClusterError(f"no host {name!r} in the virtual cluster; hosts: {', '.join(self._hosts) or 'none (not up)'}")
        return self._hosts[name]

    def address(self, name: str) -> str:
        """The IPv4 address of host ``name``."""
        return self.host(name).address

    @property
    def master_url(self) -> str:
        """``spark://<master address>:7077``."""
        return f"spark://{self.address('master')}:{SPARK_MASTER_PORT}"

    @property
    def store_root(self) -> Path:
        """The local folder that holds the HDFS tree (shared by all hosts, as the whole file system is)."""
        return self.work_dir / "hdfs"

    def store_url(self, path: str = "/") -> str:
        """``hdfs://namenode:9870/<path>``: a store URL for processes inside the cluster's hosts."""
        return f"hdfs://namenode:{NAMENODE_PORT}/{path.lstrip('/')}"

    def log_path(self, host: str, role: str) -> Path:
        """Where :meth:`popen` writes the log of ``role`` on ``host`` when given ``log=True``."""
        return self.work_dir / host / f"{role}.log"

    # -- processes -------------------------------------------------------------------------
    def popen(self, host: str, argv: Sequence[str | os.PathLike], *, env: Mapping[str, str] | None = None,
              log: str | os.PathLike | bool | None = None, role: str = "process", cwd: str | os.PathLike | None = None,
              **popen_kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` inside ``host``; the Popen's PID is the process itself.

        Parameters
        ----------
        host : str
            Host name.
        argv : sequence of str
            Command line.
        env : mapping, optional
            Extra environment (see :func:`host_environment`).
        log : path or True, optional
            Append stdout and stderr to this file (True: :meth:`log_path` of ``role``); otherwise
            ``popen_kwargs`` may set ``stdout``/``stderr``.
        role : str
            A label for logs and status.
        cwd : path, optional
            Working folder (default ``<work_dir>/<host>``).
        **popen_kwargs
            Passed to :class:`subprocess.Popen`.
        """
        if log is True:
            log = self.log_path(host, role)
        return self._start(host, argv, env=env, log=Path(log) if log else None, role=role, cwd=cwd,
                           **popen_kwargs).process

    def _start(self, host: str, argv: Sequence[str | os.PathLike], **options: Any) -> StartedProcess:
        started = self._processes.start(self.host(host), argv, **options)
        if self._record is not None and started.role not in self._record.roles.setdefault(host, []):
            self._record.roles[host].append(started.role)
            save_record(self._record)
        return started

    def run(self, host: str, argv: Sequence[str | os.PathLike], *, env: Mapping[str, str] | None = None,
            timeout_s: float = 60.0, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``argv`` inside ``host`` to its end, output captured as text (see :meth:`HostProcesses.run`)."""
        return self._processes.run(self.host(host), argv, env=env, timeout_s=timeout_s, check=check)

    def stop_process(self, process: subprocess.Popen, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM a process this cluster started, SIGKILL it after ``timeout_s``; its exit status."""
        return self._processes.stop(process, timeout_s)

    def _launch(self, host: str, spec: ServiceSpec) -> tuple[StartedProcess, str, int]:
        log = self.log_path(host, spec.role)
        offset = log.stat().st_size if log.exists() else 0  # a restarted daemon appends to its old log
        started = self._services[host] = self._start(host, spec.argv, env=spec.env, log=log, role=spec.role)
        return started, spec.ready_line, offset

    def _wait(self, launched: list[tuple[StartedProcess, str, int]], deadline: float) -> None:
        for started, needle, offset in launched:
            wait_for_line(started.log, needle, started.process, deadline, offset)

    # -- faults ------------------------------------------------------------------------------
    def cut_link(self, host: str) -> None:
        """Cut ``host`` off the bridge: its packets vanish (connections time out) until :meth:`restore_link`."""
        set_bridge_port(self.prefix, self.host(host), up=False)

    def restore_link(self, host: str) -> None:
        """Reconnect ``host`` to the bridge."""
        set_bridge_port(self.prefix, self.host(host), up=True)

    def kill_host(self, host: str) -> list[int]:
        """SIGKILL every process in ``host`` (all started there by this cluster), then delete the host.

        Returns
        -------
        list of int
            The PIDs killed.
        """
        target = self.host(host)
        pids = kill_namespace_processes(target.namespace)
        delete_namespaces([target.namespace])
        self._killed_hosts.add(host)
        self._processes.reap(host)
        self._services.pop(host, None)
        logger.info("host %s killed (PIDs %s) and removed", host, pids)
        return pids

    def _launch_store(self) -> list[tuple[StartedProcess, str, int]]:
        datanode_url = f"http://datanode:{DATANODE_PORT}"
        return [self._launch("datanode", datanode(self._hosts["datanode"], self.store_root)),
                self._launch("namenode", namenode(self._hosts["namenode"], self.store_root, datanode_url))]

    def start_store(self) -> None:
        """Start the namenode and datanode again after :meth:`stop_store` (same ports, same files)."""
        if any(self._is_running(host) for host in ("namenode", "datanode")):
            raise VirtualClusterError("the store is running: stop_store() first")
        self._wait(self._launch_store(), time.monotonic() + self.start_timeout_s)

    def stop_store(self) -> None:
        """Stop the namenode and datanode processes (SIGTERM by PID); their hosts stay up."""
        for host in ("namenode", "datanode"):
            if self._is_running(host):
                self._processes.stop(self._services[host].process)

    def cut_store(self) -> None:
        """Make the store unreachable: cut the namenode's and the datanode's links."""
        for host in ("namenode", "datanode"):
            self.cut_link(host)

    def restore_store(self) -> None:
        """Reconnect the namenode and the datanode."""
        for host in ("namenode", "datanode"):
            self.restore_link(host)

    def _is_running(self, host: str) -> bool:
        return host in self._services and self._services[host].process.poll() is None

    # -- measurements ------------------------------------------------------------------------
    def interface_bytes(self, host: str) -> InterfaceBytes:
        """Bytes received and sent so far by ``host``'s interface (subtract two readings)."""
        return interface_bytes(self.host(host))

    def can_connect(self, from_host: str, to_host: str, port: int, timeout_s: float = 2.0) -> bool:
        """Whether a TCP connection from ``from_host`` to ``to_host``:``port`` opens within ``timeout_s``.

        The probe runs inside ``from_host`` and resolves ``to_host`` there, by name.
        """
        return can_connect(self.host(from_host), to_host, port, timeout_s)

    def spark_conf(self, **overrides: str) -> dict[str, str]:
        """Spark settings for a driver on the ``driver`` host (see :func:`spark_driver_conf`); ``overrides`` win."""
        conf = spark_driver_conf(self.master_url, self.address("driver"), self.workers, self.worker_cores,
                                 self.jvm_options, self.start_timeout_s)
        conf.update(overrides)
        return conf
