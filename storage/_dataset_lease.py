"""One staging of a dataset at a time: a fenced lease in the dataset's folder.

Layout under ``<dataset>/_staging-lease/`` (a name Spark and Hadoop skip as hidden, and that
staging counts as its own)::

    <generation:08d>.json                  the stager (host, pid, token, started, timeout_s), created exclusively
    <generation:08d>-<count:08d>.renewal   its renewal counter: it creates count + 1 (holding the time),
                                           then deletes count

As a run's lease (:mod:`storage._lease`): a stager takes the generation above every one the folder shows, by
an exclusive create, so of two stagers starting at once exactly one gets it; one that finds the dataset held
watches the holder's renewal counter on its own monotonic clock and is refused when it advances (naming the
holder), or takes over once it stayed unchanged for the timeout (the holder is gone: its build folder may then
be removed).  A holder on this host whose process is gone -- or in this process, whose staging ended without
releasing (its store failed) -- is taken over at once; one whose process is known to run on this host and that
renewed within half its timeout (each renewal file holds its time) is refused at once, without watching.  The
taker removes the files of the generations it took over from; a stager that ends removes its own, and the
folder when that leaves it empty, so a dataset holds no lease folder between stagings.  Before its swap and
before removing anything, a stager checks that the newest generation is still its own *and* names its token,
and stops otherwise (:meth:`DatasetLease.check`), so a stager paused past the timeout swaps nothing when it
wakes.

Datasets have no key, so these files are not signed: someone who can write the dataset's folder can
block its staging with a forged lease (as they can delete its shards), never make two stagings run.  (A forged
entry naming a process that runs here is refused at once rather than after the timeout: the same denial.)
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from typing import Any

from ._errors import DatasetError, StoreError, StoreNotFoundError, StoreUnavailableError
from ._paths import join
from ._processes import holder_process_gone, holder_renews_here, process_identity
from ._store import Store

__all__ = ["DEFAULT_STAGING_LEASE_TIMEOUT_S", "LEASE_FOLDER", "DatasetLease"]

logger = logging.getLogger(__name__)

LEASE_FOLDER = "_staging-lease"
#: A stager silent (no renewal) for this long is taken to be gone.
DEFAULT_STAGING_LEASE_TIMEOUT_S = 60.0
_MAX_POLL_S = 1.0
_HOLDER = re.compile(r"^(\d{8,})\.json$")
_RENEWAL = re.compile(r"^(\d{8,})-(\d{8,})\.renewal$")
#: Tokens of the leases this process holds now: a holder entry of this pid naming another token ended.
_LIVE_TOKENS: set[str] = set()
_LIVE_LOCK = threading.Lock()


class DatasetLease:
    """The staging lease of the dataset folder ``store`` (its root); a context manager around one staging.

    Parameters
    ----------
    store : Store
        The dataset's folder.
    timeout_s : float
        A lease whose renewal has not changed for this long (on this process's clock) is taken over.
    """

    def __init__(self, store: Store, timeout_s: float = DEFAULT_STAGING_LEASE_TIMEOUT_S) -> None:
        self.store = store
        self.timeout_s = float(timeout_s)
        self.token = uuid.uuid4().hex
        self.generation = 0
        self._count = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _view(self) -> tuple[int, int, bool, int]:
        """(newest holder's generation, its renewal count, free, highest generation any name shows)."""
        holders, renewals, highest = set(), {}, 0
        for name in self.store.list(LEASE_FOLDER):
            for pattern in (_HOLDER, _RENEWAL):
                match = pattern.match(name)
                if match is None:
                    continue
                number = int(match[1])
                highest = max(highest, number)
                if pattern is _HOLDER:
                    holders.add(number)
                else:
                    renewals[number] = max(renewals.get(number, -1), int(match[2]))
        generation = max(holders, default=0)
        return generation, renewals.get(generation, -1), generation == 0, highest

    def _holder(self, generation: int) -> dict[str, Any]:
        try:
            entry = json.loads(self.store.read_bytes(join(LEASE_FOLDER, f"{generation:08d}.json"), max_bytes=65536))
        except StoreUnavailableError:  # an outage says nothing of who holds the dataset: the caller retries or fails
            raise
        except (StoreError, ValueError, RecursionError):  # not JSON, or nested too deep to parse
            return {}
        return entry if isinstance(entry, dict) else {}

    def acquire(self) -> None:
        """Take the dataset: at once when free or released, after watching a silent holder for the timeout.

        Raises
        ------
        DatasetError
            Another staging of the dataset holds it and renews its lease, or took it at the same moment.
        """
        view = self._view()
        if not view[2] and not self._holder_ended(view[0]):
            self._refuse_a_holder_renewing_here(view[0])
            view = self._watch(view)
        generation = max(view[0], view[3]) + 1
        entry = {"token": self.token, **process_identity(), "started": time.time(), "timeout_s": self.timeout_s,
                 "generation": generation}
        if not self.store.create_exclusive(join(LEASE_FOLDER, f"{generation:08d}.json"),
                                           json.dumps(entry, sort_keys=True).encode()):
            if self._holder(generation).get("token") != self.token:
                self._refuse(generation, "started at the same moment")
        self.generation = generation
        with _LIVE_LOCK:
            _LIVE_TOKENS.add(self.token)
        self._remove_older()
        self._thread = threading.Thread(target=self._renew_loop, name="sparkdbn-staging-lease", daemon=True)
        self._thread.start()

    def _holder_ended(self, generation: int) -> bool:
        """Whether ``generation``'s holder is known to be gone: a process of this host that is not running, or a
        staging of this process that ended without releasing."""
        holder = self._holder(generation)
        if holder and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
            with _LIVE_LOCK:
                ended = holder.get("token") not in _LIVE_TOKENS
        else:
            ended = holder_process_gone(holder)
        if ended:
            logger.warning("staging at %s: taking over from a staging that ended without releasing (%s)",
                           self.store.url, _describe(holder))
        return ended

    def _refuse_a_holder_renewing_here(self, generation: int) -> None:
        """Refuse at once a holder that runs on this host and renewed within half its timeout: it renews on
        schedule (:func:`storage.holder_renews_here`).  Any other is watched."""
        holder = self._holder(generation)
        for _ in range(3):  # a renewal read just as the holder renewed over it: look again
            newest, count = self._view()[:2]
            if newest != generation:
                return  # released or taken meanwhile: the watch sees it
            renewed = self._renewed(generation, count) if count >= 0 else None
            if count < 0 or renewed is not None:
                break
        else:
            return  # its renewals cannot be read: watched
        age_s = holder_renews_here(holder, renewed, _holder_timeout_s(holder))
        if age_s is not None:
            self._refuse(generation, f"runs on this host (pid {holder['pid']}) and renewed its lease {age_s:.0f} s ago")

    def _renewed(self, generation: int, count: int) -> float | None:
        """When the holder wrote its renewal ``count`` (its content), None where unknown."""
        try:
            renewal = json.loads(self.store.read_bytes(_renewal_path(generation, count), max_bytes=4096))
        except StoreUnavailableError:
            raise
        except (StoreError, ValueError, RecursionError):  # gone (renewed over), empty (an older stager) or damaged
            return None
        return renewal.get("renewed") if isinstance(renewal, dict) else None

    def _remove_older(self) -> None:
        """Remove the lease files of the generations this staging took over from (best effort)."""
        for name in self.store.list(LEASE_FOLDER):
            match = _HOLDER.match(name) or _RENEWAL.match(name)
            if match is not None and int(match[1]) < self.generation:
                try:
                    self.store.delete(join(LEASE_FOLDER, name))
                except StoreError as error:
                    logger.debug("staging at %s: could not remove %s: %s", self.store.url, name, error)

    def _watch(self, first: tuple[int, int, bool, int]) -> tuple[int, int, bool, int]:
        holder = self._holder(first[0])
        timeout_s = max(self.timeout_s, _holder_timeout_s(holder))
        logger.info("staging at %s: another staging (%s) holds the dataset; watching its lease for up to %.0f s",
                    self.store.url, _describe(holder), timeout_s)
        since = time.monotonic()
        while True:
            view = self._view()
            if view[0] < first[0]:  # its holder ended and removed its entry: free
                return view
            if view[:3] != first[:3]:
                self._refuse(view[0], "renewed its lease while this staging watched")
            silent_s = time.monotonic() - since
            if silent_s >= timeout_s:
                logger.warning("staging at %s: taking over from a staging (%s) silent for %.0f s", self.store.url,
                               _describe(holder), silent_s)
                return view
            time.sleep(min(_MAX_POLL_S, self.timeout_s / 8.0, timeout_s - silent_s))  # another process: no event

    def _refuse(self, generation: int, what: str) -> None:
        raise DatasetError(
            f"another staging of {self.store.url} is running ({_describe(self._holder(generation))}), which {what}; "
            "nothing was written. Wait for it to finish, then stage again")

    def check(self) -> None:
        """Raise :class:`DatasetError` unless this staging still holds the newest generation."""
        generation = self._view()[0]
        holder = self._holder(self.generation)
        if generation != self.generation or holder.get("token") != self.token:
            newer = self._holder(generation)
            raise DatasetError(
                f"this staging of {self.store.url} lost the dataset to another ({_describe(newer)}), after being "
                f"paused or cut off for longer than {self.timeout_s:.0f} s; it stops and swaps nothing")

    def release(self) -> None:
        """Stop renewing; remove this staging's lease files (when still its own), then the folder when empty."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with _LIVE_LOCK:
            _LIVE_TOKENS.discard(self.token)
        if not self.generation:
            return
        try:
            if self._count >= 0:
                self.store.delete(_renewal_path(self.generation, self._count))
            if self._holder(self.generation).get("token") == self.token:  # never another staging's entry
                self.store.delete(join(LEASE_FOLDER, f"{self.generation:08d}.json"))
            if not self.store.list(LEASE_FOLDER):
                self.store.delete(LEASE_FOLDER)  # a folder only when empty: a newer taker's entry stays
        except StoreError as error:
            logger.warning("staging at %s: could not release its lease (%s); the next staging takes it over after "
                           "%.0f s", self.store.url, error, self.timeout_s)

    def __enter__(self) -> "DatasetLease":
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.timeout_s / 4.0):
            try:
                if self._view()[0] != self.generation:
                    return  # lost: check() says so before the swap
                self.store.create_exclusive(_renewal_path(self.generation, self._count + 1),
                                            json.dumps({"renewed": time.time()}).encode())
                if self._count >= 0:
                    try:
                        self.store.delete(_renewal_path(self.generation, self._count))
                    except StoreNotFoundError:
                        pass
                self._count += 1
            except StoreError as error:  # an outage: try again at the next interval
                logger.warning("staging at %s: lease renewal failed (%s); retrying", self.store.url, error)


def _holder_timeout_s(holder: dict[str, Any]) -> float:
    """The timeout a holder entry names (0 where none; at most a day)."""
    try:
        return max(0.0, min(float(holder.get("timeout_s", 0.0)), 24 * 3600.0))
    except (TypeError, ValueError):
        return 0.0


def _describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "unknown: its lease entry is unreadable"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder.get("started", 0) or 0)))
    return f"host {holder.get('host')}, pid {holder.get('pid')}, since {when}"


def _renewal_path(generation: int, count: int) -> str:
    """The file of renewal ``count`` of lease ``generation``."""
    return join(LEASE_FOLDER, f"{generation:08d}-{count:08d}.renewal")
