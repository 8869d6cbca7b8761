"""One driver per run: a fenced lease, taken as a new generation and renewed while training.

The lease files are :class:`storage.LeaseFolder`'s (``runs/<run>/lease/``), signed with the run
key: a driver takes the run by creating, exclusively, the generation above every generation
found anywhere in the run (lease files, records, models: :func:`storage.run_generation_floor`),
so of two drivers taking over at once exactly one wins, a deleted ``lease/`` never brings an old
generation back, and everything the driver writes is tied to that generation (run records, the
model; see :mod:`node.run._record`), so a driver that lost the run can never replace what a newer
one wrote.

Staleness is judged on this process's own monotonic clock, never by comparing two hosts' clocks:
a fit that finds the run held watches the holder's renewal counter.  If it advances, the holder
is alive and the fit is refused (:class:`LeaseHeldError`, naming the holder) -- within about a
quarter of the timeout, the holder's renewal interval.  If it stays unchanged for ``timeout_s``
(or the holder's own, when that is longer: it renews at its own pace), the holder is gone (killed,
or cut off) and the fit takes the run over, with a log line.  A released lease is taken at once, and
so is one whose holder is a process of this host that no longer runs (SIGKILL, a crash:
:func:`storage.holder_process_gone`).  A fit whose holder is a process of this host known to run
(neither stopped nor a pid reused: :func:`storage.holder_process_running`) and whose newest renewal is
younger than half the timeout on their shared clock is refused at once, without watching.

The holder renews every quarter of the timeout from a daemon thread; each renewal, and each
record write (:meth:`DriverLease.check_store`), lists the lease folder: the newest verified
holder must be this driver's own generation *and token* (its own entry, edited or damaged so that it
no longer verifies, holds the run for no one: the driver stops, saying so), and (at record writes) no
record or model may name a newer generation.  When either is not so -- this driver was paused
(Ctrl-Z, a frozen VM) or cut off for longer than the timeout and another took over -- it stops
renewing (it never re-creates a lease it lost), calls ``on_lost`` (the fit cancels its Spark jobs)
and the fit fails with :class:`LeaseLostError` naming the driver that took the run.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any, Callable

import storage

from .._errors import TrainingError

__all__ = ["DriverLease", "LeaseHeldError", "LeaseLostError"]

logger = logging.getLogger(__name__)

#: Longest pause between two looks at a lease being watched.
MAX_WATCH_POLL_S = 1.0
#: How long :meth:`DriverLease.release` waits for a renewal under way when the store is ending fast.
END_FAST_RENEWAL_WAIT_S = 10.0


class LeaseHeldError(TrainingError):
    """Another driver holds the run's lease and keeps renewing it."""


class LeaseLostError(TrainingError):
    """This driver's lease was taken over (it stopped renewing for longer than the timeout), or its own lease
    file was removed or no longer verifies (edited or damaged): the run is no longer this driver's."""


class DriverLease:
    """The lease of one run; use as a context manager around a fit.

    Parameters
    ----------
    store : storage.Store
    run : str
    key : bytes
        The run key: the lease files are signed with it, and those that do not verify are ignored.
    timeout_s : float
        A lease whose renewal has not changed for this long (on the observer's clock) may be taken over.
    fit_id : str, optional
        Names this fit in the holder entry (a random one by default).
    on_lost : callable, optional
        Called once, from the renewal thread, when another driver took the run over.
    """

    def __init__(self, store: storage.Store, run: str, key: bytes, timeout_s: float, *, fit_id: str | None = None,
                 on_lost: Callable[[], None] | None = None) -> None:
        self.store = store
        self.run = run
        self.folder = storage.LeaseFolder(store, run, key)
        self.timeout_s = float(timeout_s)
        self.token = uuid.uuid4().hex
        self.fit_id = fit_id or self.token
        self.on_lost = on_lost
        self.generation = 0  # 0 until acquired
        self._count = -1
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the renewal thread and check_store both may find the run lost
        self._thread: threading.Thread | None = None
        self._lost: str | None = None
        self._failed_renewals = 0  # in a row: the first is a warning, the next say nothing new (debug)
        #: Set by the fit when its store failed and it ends: the lease's failures after that (a renewal, the
        #: release) are logged at debug level, the fit's one warning saying what they leave.
        self.store_failed = False

    # ------------------------------------------------------------------ lifecycle
    def acquire(self) -> None:
        """Take the lease: at once when free or released, after watching it silent for ``timeout_s``.

        Raises
        ------
        LeaseHeldError
            The holder renewed while this fit watched, or another driver took the run first.
        """
        view = self.folder.view()
        if not view.free:
            view = self._watch(view)
        # Above every generation found anywhere in the run: no deletion of lease/ brings one back.
        generation = max(view.generation, view.highest, storage.run_generation_floor(self.store, self.run)) + 1
        if not self.folder.take(generation, self._entry()):
            self._refuse(generation, "took the run at the same moment as this fit")
        self.generation = generation
        self._thread = threading.Thread(target=self._renew_loop, name=f"sparkdbn-lease-{self.run}", daemon=True)
        self._thread.start()
        logger.info("run %s: lease generation %d taken (timeout %.0f s)", self.run, self.generation, self.timeout_s)

    def _watch(self, first: storage.LeaseView) -> storage.LeaseView:
        """Watch a held lease on this process's clock; returns the view to take over from when it stays silent."""
        holder = self.folder.holder(first.generation) or {}
        if first.generation and storage.holder_process_gone(holder):
            logger.warning("run %s: taking over from driver %s (lease generation %d), a process of this host that "
                           "no longer runs", self.run, _describe(holder), first.generation)
            return first
        # The holder renews at its own pace; an unsigned 0.2 lease.json's timeout is not trusted.
        timeout_s = max(self.timeout_s, _seconds(holder.get("timeout_s")) if first.generation else 0.0)
        age_s = storage.holder_renews_here(holder, first.renewed, timeout_s) if first.generation else None
        if age_s is not None:
            self._refuse(first.generation, f"runs on this host (pid {holder['pid']}) and renewed its lease "
                                           f"{age_s:.0f} s ago")
        # A warning: the command line shows it, or a fit would wait the timeout saying nothing.
        logger.warning("run %s is held by driver %s (lease generation %d); watching its renewals for up to %.0f s "
                       "before taking the run over", self.run, _describe(holder), first.generation, timeout_s)
        poll_s = min(MAX_WATCH_POLL_S, self.timeout_s / 8.0)
        silent_since = time.monotonic()
        while True:
            view = self.folder.view()
            if view.released:
                return view
            if view.change_marker != first.change_marker:
                self._refuse(view.generation, "renewed its lease while this fit watched")
            silent_s = time.monotonic() - silent_since
            if silent_s >= timeout_s:
                logger.warning("run %s: taking over from driver %s, whose lease (generation %d) did not change for "
                               "%.0f s", self.run, _describe(holder), first.generation, silent_s)
                return view
            time.sleep(min(poll_s, timeout_s - silent_s))  # watching another process: no event to wait on

    def _refuse(self, generation: int, what: str) -> None:
        holder = self.folder.holder(generation) or {}
        raise LeaseHeldError(
            f"run {self.run!r} is being trained by another driver ({_describe(holder)}), which {what}; wait for it "
            f"to finish. A driver that is gone is taken over by the next fit once its lease has not changed for "
            f"{self.timeout_s:.0f} s (TrainingSettings.lease_timeout_s)")

    def check(self) -> None:
        """Raise :class:`LeaseLostError` when the renewal thread found that another driver took the run."""
        if self._lost is not None:
            raise LeaseLostError(self._lost)

    def check_store(self) -> None:
        """Look at the store now; raise :class:`LeaseLostError` unless this driver's token is still the newest.

        It is not when a newer verified holder exists, when this generation's entry is gone, no longer
        verifies or names another token, or when a record or model of the run names a newer generation.
        """
        self.check()
        self._look(self.folder.view())
        if not self.lost:
            floor = storage.run_generation_floor(self.store, self.run)
            if floor > self.generation:
                self._lose(f"run {self.run!r} has records or a model of lease generation {floor}, newer than this "
                           f"driver's ({self.generation}, pid {os.getpid()}): another driver took the run; this fit "
                           "stops and writes nothing more to the run")
        self.check()

    @property
    def lost(self) -> bool:
        return self._lost is not None

    def release(self) -> None:
        """Stop renewing and say the run is free, unless it was lost (best effort).

        When the store is ending fast (:meth:`storage.Store.end_fast`: Ctrl-C, an outage), a renewal under way is
        waited for :data:`END_FAST_RENEWAL_WAIT_S` at most; one still sending then (a cut link) could land after
        the release, so the lease is left as it is, for the next fit to take over."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(END_FAST_RENEWAL_WAIT_S if self.store.ending_fast else None)
            if self._thread.is_alive():
                logger.log(logging.DEBUG if self.store_failed else logging.WARNING,
                           "run %s: the lease's renewal under way did not end within %.0f s; the lease is left "
                           "as it is: the next fit takes it over (at once on this host once this process has "
                           "ended, else after lease_timeout_s, %.0f s)", self.run, END_FAST_RENEWAL_WAIT_S,
                           self.timeout_s)
                return
        if self.generation == 0 or self.lost:
            return
        try:
            if not self.folder.release(self.generation, self._count, self.token):  # only its own generation
                logger.warning("run %s: lease generation %d is no longer this driver's; it is left as it is", self.run,
                               self.generation)
        except storage.StoreError as error:
            logger.log(logging.DEBUG if self.store_failed else logging.WARNING,
                       "run %s: could not release the lease (%s); the next fit takes it over (at once on this "
                       "host once this process has ended, else after lease_timeout_s, %.0f s)", self.run, error,
                       self.timeout_s)

    def __enter__(self) -> "DriverLease":
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    # ------------------------------------------------------------------ internals
    def _entry(self) -> dict[str, Any]:
        return {"token": self.token, "fit": self.fit_id, **storage.process_identity(), "started": time.time(),
                "timeout_s": self.timeout_s}

    def _renew(self) -> None:
        self.folder.renew(self.generation, self._count + 1, self.token)
        self._count += 1

    def _look(self, view: storage.LeaseView) -> None:
        """Mark the lease lost when ``view`` shows a newer generation, or this one's holder entry is gone, no
        longer verifies (edited or damaged: other drivers ignore it) or names another token."""
        if view.generation > self.generation:
            newer = self.folder.holder(view.generation) or {}
            reason = (f"run {self.run!r} was taken over by another driver ({_describe(newer)}, lease generation "
                      f"{view.generation}) while this one (generation {self.generation}, pid {os.getpid()}) was "
                      f"paused or cut off for longer than its lease timeout ({self.timeout_s:.0f} s); this fit stops "
                      "and writes nothing more to the run")
        else:
            own = self.folder.holder(self.generation, cached=False)
            if own is None:
                reason = (f"the lease of run {self.run!r} (generation {self.generation}) was removed from the store "
                          f"while this driver held it; this fit stops and writes nothing more to the run")
            elif not own:
                # Edited or damaged: every other driver ignores it, so the run looks free (or held by an older,
                # silent generation) and the next fit may take it. The file cannot be signed again (lease files
                # are never replaced), so this driver holds nothing any more: it stops, as when the file is removed.
                reason = (f"the lease file of run {self.run!r} (generation {self.generation}), "
                          f"{self.folder.holder_url(self.generation)}, no longer verifies under the run key (edited "
                          "or damaged while this driver held it; no other driver took the run): other drivers ignore "
                          "it, so the run is no longer held; this fit stops and writes nothing more to the run. Fit "
                          "again to take the run under a new lease: it resumes from the last record")
            elif own.get("token") != self.token:
                reason = (f"the lease of run {self.run!r} (generation {self.generation}) now names another driver "
                          f"({_describe(own)}); this fit stops and writes nothing more to the run")
            else:
                return
        self._lose(reason)

    def _lose(self, reason: str) -> None:
        with self._lock:
            if self._lost is not None:
                return
            self._lost = reason
        self._stop.set()
        logger.error("%s", reason)
        if self.on_lost is not None:
            try:
                self.on_lost()
            except Exception as error:  # noqa: BLE001 - the fit fails at its next check anyway
                logger.warning("run %s: stopping after the lease was lost: %s", self.run, error)

    def _renew_loop(self) -> None:
        interval_s = self.timeout_s / 4.0
        while not self._stop.wait(interval_s):
            try:
                self._look(self.folder.view())
                if self.lost:
                    return
                self._renew()
            except storage.StoreError as error:  # a store outage: try again at the next interval
                self._failed_renewals += 1
                level = logging.WARNING if self._failed_renewals == 1 and not self.store_failed else logging.DEBUG
                logger.log(level, "run %s: lease renewal failed (%s); retrying every %.1f s (the next failures "
                           "at debug level)", self.run, error, interval_s)
            else:
                if self._failed_renewals:
                    logger.info("run %s: lease renewed after %d failed renewal(s)", self.run, self._failed_renewals)
                self._failed_renewals = 0


def _seconds(value: Any) -> float:
    """A holder entry's ``timeout_s`` or a time it names (0 when absent or not a finite number >= 0)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return 0.0
    return seconds if 0.0 <= seconds < float("inf") else 0.0


def _describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "unknown: its lease entry is unreadable"
    return (f"host {holder.get('host')}, pid {holder.get('pid')}, fit {str(holder.get('fit', '?'))[:12]}, "
            f"since {_when(holder.get('started'))}")


def _when(timestamp: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(timestamp)))
    except (TypeError, ValueError):
        return "an unknown time"
