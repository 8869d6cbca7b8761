"""Which process holds a lease, and whether it is known to be gone: for a holder on this machine only.

A lease holder entry names its process (:func:`process_identity`: host name, pid and the pid namespace
it runs in).  A lease whose holder is silent is taken over after its timeout; one whose holder is a
process of this machine and pid namespace that no longer runs (:func:`holder_process_gone`) is taken
over at once; one whose holder is known to run here (:func:`holder_process_running`) and renews may be
refused at once.  Two containers may share a host name (``--net=host``) yet not their pids: the pid
namespace tells them apart, so a pid that does not exist *here* is never taken for one that ended
*there*.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

__all__ = ["START_TIME_SLACK_S", "SAME_CLOCK_SLACK_S", "holder_process_gone", "holder_process_running",
           "holder_renews_here", "process_identity"]

#: A process's start time, read from ``/proc`` in clock ticks after a boot time known to the second, is
#: this much uncertain: a holder is known to be the process with its pid only when that process started
#: at least this long before the holder wrote its entry.
START_TIME_SLACK_S = 2.0
#: A renewal time written by a process of this host may lie this far in the future of this process's clock
#: (read at another moment; the same clock).
SAME_CLOCK_SLACK_S = 2.0


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]": one per pid namespace
    except OSError:  # no /proc (not Linux): the host name alone
        return None


def process_identity() -> dict[str, Any]:
    """This process, as a lease holder entry names it: ``host``, ``pid`` and ``pid_namespace``."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_namespace": _pid_namespace()}


def _same_machine_other_process(holder: dict[str, Any] | None) -> bool:
    """Whether ``holder`` names a process of this host and pid namespace (where it names one), not this one."""
    if not holder or holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    namespace = holder.get("pid_namespace")
    return holder["pid"] != os.getpid() and (namespace is None or namespace == _pid_namespace())


def holder_process_gone(holder: dict[str, Any] | None) -> bool:
    """Whether the process ``holder`` (a lease holder entry) names is known not to run: it is of this host and
    pid namespace (where the entry names one), it is not this process, and no process has its pid.

    Parameters
    ----------
    holder : dict or None
        The holder entry (``host``, ``pid``, ``pid_namespace``); None or an entry naming no pid: not known.
    """
    if not _same_machine_other_process(holder):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: it runs
        return False
    return False


def holder_process_running(holder: dict[str, Any] | None) -> bool:
    """Whether the process ``holder`` (a lease holder entry) names is known to run now and to be that holder:
    of this host and pid namespace, not this process, neither stopped (Ctrl-Z, SIGSTOP) nor a zombie, and
    started at least :data:`START_TIME_SLACK_S` before the entry's ``started`` time (a process that got the
    pid after the holder ended started after the entry was written).  False wherever it is not known
    (another host, no ``/proc``, the entry's time missing).

    Parameters
    ----------
    holder : dict or None
        The holder entry (``host``, ``pid``, ``pid_namespace``, ``started``).
    """
    if not _same_machine_other_process(holder) or not isinstance(holder.get("started"), (int, float)):
        return False
    try:
        with open(f"/proc/{holder['pid']}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rpartition(")")[2].split()  # after "pid (name)": a name may hold spaces
        with open("/proc/stat", encoding="ascii") as machine:
            boot_s = next(float(line.split()[1]) for line in machine if line.startswith("btime "))
        state, started_ticks = fields[0], int(fields[19])
        started_s = boot_s + started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):  # gone meanwhile, or not Linux: not known
        return False
    return state not in ("T", "t", "Z", "X") and started_s <= float(holder["started"]) - START_TIME_SLACK_S


def holder_renews_here(holder: dict[str, Any] | None, renewed: float | None, timeout_s: float) -> float | None:
    """Seconds since the holder last renewed, when it is known to run on this host
    (:func:`holder_process_running`) and renewed within half of ``timeout_s`` by this host's clock, its own: it
    renews on schedule, so another taker may be refused at once.  None otherwise (to be watched).

    Parameters
    ----------
    holder : dict or None
        The holder entry (``host``, ``pid``, ``pid_namespace``, ``started``).
    renewed : float or None
        When it last renewed (``time.time()``), None for not yet: its entry's ``started`` counts.
    timeout_s : float
        The lease's timeout; it renews at least twice per timeout.
    """
    if not holder_process_running(holder):
        return None
    try:
        age_s = time.time() - float(renewed if renewed is not None else holder["started"])
    except (TypeError, ValueError):
        return None
    return max(age_s, 0.0) if -SAME_CLOCK_SLACK_S <= age_s <= timeout_s / 2 else None
