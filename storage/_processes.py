"""Which process holds a lease, and whether it is known to be gone: for a holder on this machine only.

A lease holder entry names its process (:func:`process_identity`: host name, pid and the pid namespace
it runs in).  A lease whose holder is silent is taken over after its timeout; one whose holder is a
process of this machine and pid namespace that no longer runs (:func:`holder_process_gone`) is taken
over at once.  Two containers may share a host name (``--net=host``) yet not their pids: the pid
namespace tells them apart, so a pid that does not exist *here* is never taken for one that ended
*there*.
"""

from __future__ import annotations

import os
import socket
from typing import Any

__all__ = ["holder_process_gone", "process_identity"]


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]": one per pid namespace
    except OSError:  # no /proc (not Linux): the host name alone
        return None


def process_identity() -> dict[str, Any]:
    """This process, as a lease holder entry names it: ``host``, ``pid`` and ``pid_namespace``."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_namespace": _pid_namespace()}


def holder_process_gone(holder: dict[str, Any] | None) -> bool:
    """Whether the process ``holder`` (a lease holder entry) names is known not to run: it is of this host and
    pid namespace (where the entry names one), it is not this process, and no process has its pid.

    Parameters
    ----------
    holder : dict or None
        The holder entry (``host``, ``pid``, ``pid_namespace``); None or an entry naming no pid: not known.
    """
    if not holder or holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    namespace = holder.get("pid_namespace")
    if holder["pid"] == os.getpid() or (namespace is not None and namespace != _pid_namespace()):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: it runs
        return False
    return False
