"""The daemons of a virtual cluster: what to run on a host for each role, and how to know it is up.

Roles: a Spark standalone master and workers (``spark-class`` from the pip pyspark, as
NOTES.md describes), and the WebHDFS test server split in two, a namenode whose redirects name
the datanode host, and a datanode serving the same directory (the file system is shared by all
namespaces).  Every host has a network of its own, so every daemon uses its usual port.
A daemon is up when its log says so; nothing here sleeps a fixed time.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .standalone import spark_class
from .virtual_network import Host, VirtualClusterError

__all__ = [
    "DATANODE_PORT",
    "DEFAULT_JVM_OPTIONS",
    "NAMENODE_PORT",
    "SPARK_MASTER_PORT",
    "ServiceSpec",
    "datanode",
    "namenode",
    "spark_driver_conf",
    "spark_master",
    "spark_worker",
    "wait_for_line",
]

logger = logging.getLogger(__name__)

SPARK_MASTER_PORT = 7077
SPARK_MASTER_WEBUI_PORT = 8080
SPARK_WORKER_WEBUI_PORT = 8081
NAMENODE_PORT = 9870  # Hadoop 3's namenode HTTP port
DATANODE_PORT = 9864  # Hadoop 3's datanode HTTP port
# Small, quick JVMs for 2 shared cores: the serial collector (no GC threads per core) and the
# client compiler only (start-up matters more than peak speed: the work happens in Python).
DEFAULT_JVM_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
DEFAULT_DAEMON_MEMORY = "256m"
_REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ServiceSpec:
    """How to run one daemon on a host.

    Attributes
    ----------
    role : str
        ``spark-master``, ``spark-worker``, ``namenode`` or ``datanode``.
    argv : list of str
        Its command line (run inside the host).
    ready_line : str
        What its log says once it serves.
    env : dict of str to str
        Extra environment.
    """

    role: str
    argv: list[str]
    ready_line: str
    env: dict[str, str] = field(default_factory=dict)


def _daemon_env(jvm_options: str) -> dict[str, str]:
    return {"SPARK_DAEMON_MEMORY": DEFAULT_DAEMON_MEMORY, "SPARK_DAEMON_JAVA_OPTS": jvm_options}


def spark_master(host: Host, jvm_options: str = DEFAULT_JVM_OPTIONS) -> ServiceSpec:
    """A Spark standalone master on ``host`` (port :data:`SPARK_MASTER_PORT`)."""
    argv = [spark_class(), "org.apache.spark.deploy.master.Master", "--host", host.address,
            "--port", str(SPARK_MASTER_PORT), "--webui-port", str(SPARK_MASTER_WEBUI_PORT)]
    return ServiceSpec("spark-master", argv, "I have been elected leader", _daemon_env(jvm_options))


def spark_worker(host: Host, master_url: str, work_dir: Path, cores: int = 1, memory: str = "1g",
                 jvm_options: str = DEFAULT_JVM_OPTIONS) -> ServiceSpec:
    """A Spark standalone worker on ``host`` offering ``cores`` and ``memory`` to executors."""
    argv = [spark_class(), "org.apache.spark.deploy.worker.Worker", "--host", host.address,
            "--cores", str(cores), "--memory", memory, "--webui-port", str(SPARK_WORKER_WEBUI_PORT),
            "--work-dir", str(work_dir), master_url]
    return ServiceSpec("spark-worker", argv, "Successfully registered with master", _daemon_env(jvm_options))


def _webhdfs_server(host: Host, port: int, root: Path, *role_args: str) -> list[str]:
    return [sys.executable, str(_REPO / "scripts" / "webhdfs-server"), "--host", host.address, "--port", str(port),
            "--root", str(root), *role_args]


def namenode(host: Host, root: Path, datanode_url: str) -> ServiceSpec:
    """The WebHDFS test namenode on ``host``, redirecting data requests to ``datanode_url``."""
    argv = _webhdfs_server(host, NAMENODE_PORT, root, "--datanode-url", datanode_url)
    return ServiceSpec("namenode", argv, "WebHDFS test namenode:")


def datanode(host: Host, root: Path) -> ServiceSpec:
    """The WebHDFS test datanode on ``host`` (port :data:`DATANODE_PORT`), serving ``root``."""
    argv = _webhdfs_server(host, DATANODE_PORT, root, "--datanode-only")
    return ServiceSpec("datanode", argv, "WebHDFS test datanode:")


def spark_driver_conf(master_url: str, driver_address: str, executors: int, executor_cores: int,
                      jvm_options: str = DEFAULT_JVM_OPTIONS, register_timeout_s: float = 180.0) -> dict[str, str]:
    """Spark settings for a driver at ``driver_address`` using the standalone master ``master_url``.

    ``executors`` executors of ``executor_cores`` cores and 512 MB each, the driver waiting (up
    to ``register_timeout_s``) until all have registered before it schedules tasks, the same
    small JVMs as the daemons, UI off.  The driver binds and advertises its host's address.
    """
    return {
        "spark.master": master_url,
        "spark.driver.host": driver_address,
        "spark.driver.bindAddress": driver_address,
        "spark.driver.memory": "512m",
        "spark.executor.memory": "512m",
        "spark.executor.cores": str(executor_cores),
        "spark.cores.max": str(executors * executor_cores),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": f"{register_timeout_s:.0f}s",
        "spark.driver.extraJavaOptions": jvm_options,
        "spark.executor.extraJavaOptions": jvm_options,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }


def wait_for_line(log: Path, needle: str, process: subprocess.Popen, deadline: float, offset: int = 0) -> None:
    """Poll ``log`` until it contains ``needle`` after its first ``offset`` bytes.

    Raises
    ------
    VirtualClusterError
        ``process`` exited first, or ``deadline`` (a ``time.monotonic()`` value) passed; the
        message carries the end of the log.
    """
    while True:
        text = _read_from(log, offset)
        if needle in text:
            return
        if process.poll() is not None:
            raise VirtualClusterError(f"{log}: the process exited with {process.returncode} before saying "
                                      f"{needle!r}:\n{text[-3000:]}")
        if time.monotonic() > deadline:
            raise VirtualClusterError(f"{log} did not say {needle!r} in time (slow machine? raise "
                                      f"start_timeout_s):\n{text[-3000:] or '(empty log)'}")
        time.sleep(0.2)  # polling a log file, bounded by the deadline


def _read_from(log: Path, offset: int) -> str:
    try:
        with open(log, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
