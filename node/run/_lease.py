"""One driver per run: a lease file in the run's folder, created exclusively and renewed while training.

``runs/<run>/lease.json`` holds the owner (host, pid, a random token), when it started and when it
was last renewed.  A second fit of a leased run fails at once naming the owner; a lease its owner
stopped renewing for ``timeout_s`` (a crashed or killed driver) is taken over by the next fit,
with a log line.  The owner renews every quarter of the timeout from a daemon thread; if it ever
finds another driver's token there, it stops renewing and the fit fails at its next check
instead of training beside the newcomer.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

import storage

from .._errors import TrainingError

__all__ = ["DriverLease", "LeaseHeldError", "LeaseLostError"]

logger = logging.getLogger(__name__)


class LeaseHeldError(TrainingError):
    """Another driver holds the run's lease and keeps renewing it."""


class LeaseLostError(TrainingError):
    """This driver's lease was taken over (it stopped renewing for longer than the timeout)."""


class DriverLease:
    """The lease of one run; use as a context manager around a fit.

    Parameters
    ----------
    store : storage.Store
    run : str
    timeout_s : float
        A lease not renewed for this long may be taken over.
    """

    def __init__(self, store: storage.Store, run: str, timeout_s: float) -> None:
        self.store = store
        self.run = run
        self.path = f"runs/{run}/lease.json"
        self.timeout_s = float(timeout_s)
        self.token = uuid.uuid4().hex
        self._started = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost: str | None = None

    # ------------------------------------------------------------------ lifecycle
    def acquire(self) -> None:
        """Take the lease, or raise :class:`LeaseHeldError` naming the owner and how to take over."""
        if not self.store.create_exclusive(self.path, self._entry()):
            held = self._read()
            if held is not None and held.get("token") != self.token:
                age_s = time.time() - float(held.get("renewed", 0.0))
                if age_s < self.timeout_s:
                    raise LeaseHeldError(
                        f"run {self.run!r} is being trained by another driver (host {held.get('host')}, "
                        f"pid {held.get('pid')}, since {_when(held.get('started'))}, lease renewed {age_s:.0f} s ago); "
                        f"wait for it to finish, or if that driver is gone, fit again once its lease is "
                        f"{self.timeout_s:.0f} s old (TrainingSettings.lease_timeout_s) to take the run over")
                logger.warning("run %s: taking over the lease of driver %s (pid %s), not renewed for %.0f s",
                               self.run, held.get("host"), held.get("pid"), age_s)
            self.store.write_bytes(self.path, self._entry())
            if (self._read() or {}).get("token") != self.token:
                raise LeaseHeldError(f"run {self.run!r}: another driver took the lease at the same moment; "
                                     "fit again in a moment if it is gone")
        self._thread = threading.Thread(target=self._renew_loop, name=f"sparkdbn-lease-{self.run}", daemon=True)
        self._thread.start()
        logger.info("run %s: lease %s taken (timeout %.0f s)", self.run, self.path, self.timeout_s)

    def check(self) -> None:
        """Raise :class:`LeaseLostError` when another driver took this run over."""
        if self._lost is not None:
            raise LeaseLostError(self._lost)

    def release(self) -> None:
        """Stop renewing and remove the lease if it is still this driver's (best effort)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if (self._read() or {}).get("token") == self.token:
                self.store.delete(self.path)
        except storage.StoreError as error:
            logger.warning("run %s: could not release the lease (%s); it expires in %.0f s", self.run, error,
                           self.timeout_s)

    def __enter__(self) -> "DriverLease":
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    # ------------------------------------------------------------------ internals
    def _entry(self) -> bytes:
        return json.dumps({"run": self.run, "token": self.token, "host": socket.gethostname(), "pid": os.getpid(),
                           "started": self._started, "renewed": time.time()}).encode("utf-8")

    def _read(self) -> dict[str, Any] | None:
        try:
            entry = json.loads(self.store.read_bytes(self.path).decode("utf-8"))
        except storage.StoreNotFoundError:
            return None
        except (UnicodeDecodeError, json.JSONDecodeError):
            return {}  # unreadable: nobody's, old enough to take over at once
        return entry if isinstance(entry, dict) else {}

    def _renew_loop(self) -> None:
        interval_s = self.timeout_s / 4.0
        while not self._stop.wait(interval_s):
            try:
                held = self._read()
                if held is not None and held.get("token") != self.token:
                    self._lost = (f"run {self.run!r} was taken over by another driver (host {held.get('host')}, pid "
                                  f"{held.get('pid')}) while this one ran; this fit stops")
                    logger.error("%s", self._lost)
                    return
                self.store.write_bytes(self.path, self._entry())
            except storage.StoreError as error:  # a store outage: try again at the next interval
                logger.warning("run %s: lease renewal failed (%s); retrying", self.run, error)


def _when(timestamp: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(timestamp)))
    except (TypeError, ValueError):
        return "an unknown time"
