"""One device-memory budget for the data caches of every process sharing a GPU.

Each node keeps the partitions it trains on its GPU (:class:`~rbm._gpu.DeviceDataCache`).  Sized
alone from the free memory it sees, the first node on a GPU would take half of it, the second
half of what is left, and so on (50%, 25%, ...).  Instead the processes on one GPU agree on one
*pool* -- a fraction of the GPU's free memory, measured by the first of them -- and split it
evenly among the live ones: each cache's share is ``pool // live processes``, read again before
every upload, so a node that joins shrinks the others' shares at their next miss and a node that
ends gives its share back.

The agreement lives in a folder of the host's temporary directory, one sub-folder per GPU
(named by its PCI bus id or UUID, which every process numbers alike)::

    <tmp>/sparkdbn-gpu-budget-<uid>/<gpu>/pool          the pool in bytes (written once, atomically)
    <tmp>/sparkdbn-gpu-budget-<uid>/<gpu>/<pid>.member  one per process using the pool

A member whose process is gone is not counted (and its file removed); when no member is left the
next process measures the pool again.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile

__all__ = ["SharedGpuBudget", "POOL_FRACTION"]

logger = logging.getLogger(__name__)

#: The share of a GPU's free memory that the data caches of all its processes may hold together:
#: the rest stays for the models, their activations and cuDNN's workspaces.
POOL_FRACTION = 0.5

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


class SharedGpuBudget:
    """The share of one GPU's data-cache pool that this process may hold.

    Parameters
    ----------
    gpu : str
        The GPU's host-wide name (PCI bus id or UUID; not a per-process index).
    folder : str, optional
        Where the processes agree (default: ``<tmp>/sparkdbn-gpu-budget-<uid>``).
    fraction : float
        The pool's share of the GPU's free memory when the first process measures it.
    pid : int, optional
        This process's id (default: ``os.getpid()``; tests pass others).
    """

    def __init__(self, gpu: str, folder: str | None = None, fraction: float = POOL_FRACTION,
                 pid: int | None = None) -> None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        uid = os.getuid() if hasattr(os, "getuid") else "user"
        root = folder or os.path.join(tempfile.gettempdir(), f"sparkdbn-gpu-budget-{uid}")
        self.folder = os.path.join(root, _UNSAFE.sub("_", gpu) or "gpu")
        self.fraction, self.pid = float(fraction), int(pid if pid is not None else os.getpid())
        os.makedirs(self.folder, mode=0o700, exist_ok=True)

    def _members(self) -> list[int]:
        members = []
        for entry in os.listdir(self.folder):
            if not entry.endswith(".member"):
                continue
            pid = int(entry.split(".", 1)[0]) if entry.split(".", 1)[0].isdigit() else None
            if pid is None:
                continue
            if pid == self.pid or _alive(pid):
                members.append(pid)
            else:  # a process that ended without leaving: its share returns to the others
                try:
                    os.remove(os.path.join(self.folder, entry))
                except FileNotFoundError:
                    pass
        return members

    def join(self, free_bytes: int) -> int:
        """Count this process in; measure the pool from ``free_bytes`` if no live process holds one.  The share."""
        others = [pid for pid in self._members() if pid != self.pid]
        pool_path = os.path.join(self.folder, "pool")
        if not others or not os.path.exists(pool_path):
            temporary = f"{pool_path}.{self.pid}"
            with open(temporary, "w", encoding="ascii") as handle:
                handle.write(str(int(free_bytes * self.fraction)))
            os.replace(temporary, pool_path)
        with open(os.path.join(self.folder, f"{self.pid}.member"), "w", encoding="ascii"):
            pass
        return self.share_bytes()

    def pool_bytes(self) -> int:
        """The pool all the GPU's processes share (0 before any joined)."""
        try:
            with open(os.path.join(self.folder, "pool"), encoding="ascii") as handle:
                return int(handle.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def share_bytes(self) -> int:
        """This process's share now: the pool divided evenly among the live members."""
        return self.pool_bytes() // max(1, len(self._members()))

    def leave(self) -> None:
        """Give the share back (the others grow at their next upload)."""
        try:
            os.remove(os.path.join(self.folder, f"{self.pid}.member"))
        except FileNotFoundError:
            pass
