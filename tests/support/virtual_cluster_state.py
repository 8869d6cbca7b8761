"""What each virtual cluster created, recorded on disk so that nothing outlives a dead creator.

A cluster writes its record (``/run/sparkdbn-virtual-cluster/<prefix>.json``) *before* it
creates anything, naming everything it is about to create and the PID (and process start time,
against PID reuse) of the process that creates it.  The next cluster to come up, and
``scripts/virtual-cluster down``, clean every record whose creator is gone: processes in its
namespaces (SIGKILL, by PID), namespaces, bridge, hosts files, then the record.  ``/run`` is a
tmpfs, as are the namespaces: a reboot clears both together.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from .virtual_network import Host, VirtualClusterError, bridge_namespace, delete_namespaces, namespace_exists

__all__ = [
    "ClusterRecord",
    "STATE_DIR",
    "clean_leftovers",
    "creator_alive",
    "destroy",
    "load_records",
    "process_start_ticks",
    "remove_record",
    "reserve_record",
    "save_record",
    "state_lock",
]

logger = logging.getLogger(__name__)

STATE_DIR = Path("/run/sparkdbn-virtual-cluster")
PREFIX_STEM = "sdbn"  # + 4 hex digits: "sdbn4f1c-h12" still fits an interface name
_SCHEMA_VERSION = 1


@dataclass
class ClusterRecord:
    """Everything a cluster creates, and who created it.

    Attributes
    ----------
    prefix : str
        The unique prefix of every name the cluster creates.
    owner : str
        ``"cli"`` for ``scripts/virtual-cluster up``, ``"python"`` for a test or a script.
    creator_pid, creator_start_ticks : int
        The creating process and its start time (``/proc/<pid>/stat``, field 22).
    subnet : str
        The cluster's IPv4 subnet.
    work_dir : str
        Folder with the hosts' logs, Spark work folders and the HDFS tree.
    hosts : list of Host
        The hosts, in address order.
    roles : dict of str to list of str
        What runs where (``{"master": ["spark-master"], ...}``), for ``status``.
    services : dict of str to str
        Service URLs (``master_url``, ``store_url``), for ``status``.
    """

    prefix: str
    owner: str
    creator_pid: int
    creator_start_ticks: int
    subnet: str
    work_dir: str
    hosts: list[Host]
    roles: dict[str, list[str]] = field(default_factory=dict)
    services: dict[str, str] = field(default_factory=dict)
    created_unix_s: float = field(default_factory=time.time)

    @property
    def namespaces(self) -> list[str]:
        """Every namespace the cluster creates: the hosts', then the bridge's."""
        return [host.namespace for host in self.hosts] + [bridge_namespace(self.prefix)]

    def to_json(self) -> str:
        return json.dumps({"schema": _SCHEMA_VERSION, **asdict(self)}, indent=1)

    @classmethod
    def from_json(cls, text: str, origin: str) -> "ClusterRecord":
        try:
            data = json.loads(text)
            if data.pop("schema") != _SCHEMA_VERSION:
                raise ValueError("unknown schema version")
            data["hosts"] = [Host(**host) for host in data["hosts"]]
            return cls(**data)
        except (ValueError, KeyError, TypeError) as exc:
            raise VirtualClusterError(f"{origin}: not a virtual cluster record ({exc})") from exc


def _record_path(prefix: str) -> Path:
    return STATE_DIR / f"{prefix}.json"


@contextlib.contextmanager
def state_lock() -> Iterator[None]:
    """Serialize creating and cleaning clusters between processes on this machine."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def save_record(record: ClusterRecord) -> None:
    """Write (or replace) ``record`` atomically."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    path = _record_path(record.prefix)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(record.to_json())
    os.replace(temporary, path)


def remove_record(prefix: str) -> None:
    """Forget the cluster ``prefix`` (after it was destroyed)."""
    _record_path(prefix).unlink(missing_ok=True)


def load_records() -> list[ClusterRecord]:
    """Every recorded cluster, oldest first."""
    if not STATE_DIR.is_dir():
        return []
    records = []
    for path in STATE_DIR.glob(f"{PREFIX_STEM}*.json"):
        try:
            text = path.read_text()
        except FileNotFoundError:  # its cluster was taken down since the listing (remove_record takes no lock)
            continue
        records.append(ClusterRecord.from_json(text, str(path)))
    return sorted(records, key=lambda record: record.created_unix_s)


def process_start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None when it is not running.

    A zombie (ended, not yet reaped by its parent) is not running.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # Field 2 (the command) may hold spaces and parentheses: count from the last ')'.
    state, *fields = stat.rsplit(")", 1)[1].split()
    return None if state in ("Z", "X") else int(fields[18])


def creator_alive(record: ClusterRecord) -> bool:
    """True while the process that created ``record`` is still running."""
    return process_start_ticks(record.creator_pid) == record.creator_start_ticks


def _new_prefix(records: list[ClusterRecord]) -> str:
    """A prefix used by no recorded cluster and no existing namespace."""
    taken = {record.prefix for record in records}
    for _ in range(100):
        prefix = PREFIX_STEM + secrets.token_hex(2)
        if prefix not in taken and not namespace_exists(bridge_namespace(prefix)):
            return prefix
    raise VirtualClusterError(f"no free cluster prefix after 100 tries: see {STATE_DIR} and `ip netns list`")


def reserve_record(make_record: Callable[[str], ClusterRecord]) -> tuple[ClusterRecord, list[str]]:
    """Clean the leftovers of dead creators, pick a free prefix and save ``make_record(prefix)``.

    Returns
    -------
    record : ClusterRecord
        The saved record: the caller may now create what it names.
    cleaned : list of str
        The prefixes of the leftovers that were removed.
    """
    with state_lock():
        cleaned = _clean_dead_records()
        record = make_record(_new_prefix(load_records()))
        save_record(record)
    return record, cleaned


def destroy(record: ClusterRecord) -> None:
    """Remove everything ``record`` names: processes in its namespaces, namespaces, hosts files, the record."""
    delete_namespaces(record.namespaces)
    remove_record(record.prefix)
    logger.info("virtual cluster %s removed", record.prefix)


def clean_leftovers() -> list[str]:
    """Destroy every recorded cluster whose creator is gone; the prefixes cleaned."""
    with state_lock():
        return _clean_dead_records()


def _clean_dead_records() -> list[str]:
    cleaned = []
    for record in load_records():
        if not creator_alive(record):
            logger.warning("cleaning virtual cluster %s left by process %d, which is gone",
                           record.prefix, record.creator_pid)
            destroy(record)
            cleaned.append(record.prefix)
    return cleaned
