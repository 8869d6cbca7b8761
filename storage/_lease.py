"""A run's lease generations: which driver holds a run, as signed files that are only ever created.

Layout under ``runs/<run>/lease/``::

    <generation:08d>.json                  the holder (run, generation, host, pid, fit, started,
                                           timeout_s, token), created exclusively: of two drivers
                                           taking the same generation exactly one creates it
    <generation:08d>-<count:08d>.renewal   the holder's renewal counter: it creates count + 1,
                                           then deletes count (each says when, for people)
    <generation:08d>.released              the holder let the run go

Every file is signed under the run key (:func:`~storage._auth.sign_json`), its MAC bound to the
run, the generation and (for a renewal) the count, and renewals and releases name the holder's
token.  A file that does not verify -- written by someone without the key, or by sparkdbn before
leases were signed -- is ignored and logged once: it neither holds the run, nor keeps a lease
alive, nor releases one, nor stops a live holder -- save the holder's own entry edited or damaged:
it then holds the run for no one, and its driver stops (:mod:`node.run._lease`).  Its *name* still
counts for the next generation, which must be above every number any name shows.

A driver takes the run by creating a generation above every generation found anywhere in the run
(:func:`run_generation_floor`: lease files, record files, model folders), a *fencing token* as
Chubby's sequencers and ZooKeeper's zxids are: everything it writes for the run is tied to that
number (see :class:`~storage.RunStore` records and models), so a driver holding an older
generation can never replace what a newer one wrote, and deleting ``lease/`` (an operator's
"unlock") never brings an old generation back.  No file here is ever replaced, so a store whose
rename cannot overwrite shows no moment without a lease.

Staleness is not judged here from timestamps: :class:`LeaseView` is what one listing shows, and
an observer calls a lease stale when its view has not changed for the timeout on the observer's
*own* monotonic clock (:mod:`node.run._lease`), so no two hosts' clocks are ever compared.  The
``started`` field is for people reading it, never compared.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

from ._auth import Refusals, check_key, sign_json, verify_json
from ._errors import AuthenticationError, StoreError, StoreNotFoundError, StoreUnavailableError
from ._paths import check_name, join
from ._store import Store

__all__ = ["LEGACY_LEASE", "LeaseFolder", "LeaseView", "run_generation_floor"]

logger = logging.getLogger(__name__)

#: Where sparkdbn up to 0.2 kept a run's one lease file (replaced at every renewal).
LEGACY_LEASE = "lease.json"
#: A holder entry is a few hundred bytes.
HOLDER_MAX_BYTES = 64 << 10

_HOLDER = re.compile(r"^(\d{8,})\.json$")
_RENEWAL = re.compile(r"^(\d{8,})-(\d{8,})\.renewal$")
_RELEASED = re.compile(r"^(\d{8,})\.released$")
_RECORD = re.compile(r"^(\d{8,})-\d{8,}\.json$")
_HOLDER_PURPOSE = "sparkdbn lease holder v1"
_RENEWAL_PURPOSE = "sparkdbn lease renewal v1"
_RELEASE_PURPOSE = "sparkdbn lease release v1"


@dataclass(frozen=True)
class LeaseView:
    """What one listing of a run's lease folder shows, counting only files that verify.

    Attributes
    ----------
    generation : int
        The highest generation whose holder entry verifies (0: none does).
    renewal : int
        The highest renewal count of that generation that verifies (-1: none yet).
    released : bool
        Its holder let the run go (a release that verifies): the next driver takes it at once.
    legacy : str or None
        Only while ``generation`` is 0: the content of a ``lease.json`` of store layout 2
        (CHANGELOG.md), whose driver rewrites it at each renewal (None: there is none).
    highest : int
        The highest generation any lease file's *name* shows, verified or not (a taker goes above it).
    renewed : float or None
        When that renewal was written, by its holder's wall clock (None: none yet, or written by a sparkdbn
        that did not say): for people reading it (``sparkdbn status``), never compared by a taker.
    """

    generation: int
    renewal: int = -1
    released: bool = False
    legacy: str | None = None
    highest: int = 0
    renewed: float | None = field(default=None, compare=False)

    @property
    def free(self) -> bool:
        """True when a driver may take the run without waiting: nobody ever held it, or it was released."""
        return self.released or (self.generation == 0 and self.legacy is None)

    @property
    def change_marker(self) -> tuple:
        """What an observer watches: when it changes the holder is alive (or another driver took over)."""
        return (self.generation, self.renewal, self.released, self.legacy)


def _generation_name(generation: int) -> str:
    return f"{int(generation):08d}"


def run_generation_floor(store: Store, run: str) -> int:
    """The highest generation any record file or model folder of ``run`` names (0: none).

    A taker's generation goes above it and above every lease file, so deleting ``lease/`` never
    lets a generation that wrote records or a model be taken again.
    """
    prefix = join("runs", check_name("run", run))
    highest = 0
    for name in store.list(join(prefix, "record")):
        match = _RECORD.match(name)
        if match is not None:
            highest = max(highest, int(match[1]))
    for name in store.list(join(prefix, "model")):
        if name.isdigit():
            highest = max(highest, int(name))
    return highest


class LeaseFolder:
    """The lease files of one run (``runs/<run>/lease/``), read and written through ``store``.

    Parameters
    ----------
    store : Store
    run : str
    key : bytes
        The run key: every lease file is signed under it, and files that do not verify are ignored.
    """

    def __init__(self, store: Store, run: str, key: bytes) -> None:
        self.store = store
        self.run = check_name("run", run)
        self.folder = join("runs", self.run, "lease")
        self._key = check_key(key, "the run key given to LeaseFolder")
        self._refusals = Refusals(logger)
        self._holders: dict[int, dict[str, Any]] = {}  # verified holder entries (never replaced: read once)

    def __repr__(self) -> str:
        return f"LeaseFolder({self.store.url!r}, run={self.run!r})"

    def refusals(self) -> dict[str, int]:
        """Lease files ignored because they do not verify, by kind (``lease_files``)."""
        return self._refusals.counts()

    # -- reading ---------------------------------------------------------------------------
    def view(self) -> LeaseView:
        """One listing of the folder (and, while no holder verifies, of a legacy ``lease.json``)."""
        holders, renewals, released, highest = set(), {}, set(), 0
        for name in self.store.list(self.folder):
            for pattern in (_HOLDER, _RENEWAL, _RELEASED):
                match = pattern.match(name)
                if match is None:
                    continue
                number = int(match[1])
                highest = max(highest, number)
                if pattern is _HOLDER:
                    holders.add(number)
                elif pattern is _RENEWAL:
                    renewals.setdefault(number, []).append(int(match[2]))
                else:
                    released.add(number)
        generation, holder = 0, None
        for number in sorted(holders, reverse=True):
            holder = self.holder(number)
            if holder:
                generation = number
                break
        if generation == 0:
            return LeaseView(0, legacy=self._legacy_text(), highest=highest)
        token = holder.get("token")
        renewal, renewed = -1, None
        for count in sorted(renewals.get(generation, []), reverse=True):
            entry = self._verified(self._renewal_path(generation, count), _RENEWAL_PURPOSE, token, generation, count)
            if entry is not None:
                renewal, renewed = count, entry.get("time")
                break
        is_released = generation in released and self._verified(self._released_path(generation), _RELEASE_PURPOSE,
                                                                 token, generation) is not None
        return LeaseView(generation, renewal, is_released, None, highest,
                         float(renewed) if isinstance(renewed, (int, float)) else None)

    def _legacy_text(self) -> str | None:
        try:
            legacy = self.store.read_bytes(join("runs", self.run, LEGACY_LEASE), max_bytes=HOLDER_MAX_BYTES)
        except StoreNotFoundError:
            return None
        except StoreError as error:  # too large, unreadable: it still blocks until it has been silent long enough
            return f"unreadable: {error}"
        return legacy.decode("utf-8", "replace")

    def _verified(self, path: str, purpose: str, token: Any, *context: int) -> dict[str, Any] | None:
        """The renewal or release at ``path`` where it is signed for this run, ``context`` and holder ``token``."""
        try:
            value = verify_json(self._key, self.store.read_bytes(path, max_bytes=HOLDER_MAX_BYTES), purpose, self.run,
                                *context, where=f"{self.store.url}/{path}")
        except StoreNotFoundError:
            return None  # a renewal its holder deleted after the listing: an older one is current
        except StoreUnavailableError:  # an outage, not a bad file: nothing is concluded from it
            raise
        except (AuthenticationError, StoreError) as error:
            self._refusals.refuse("lease_files", path, self.folder, f"{error}; it is ignored")
            return None
        if not isinstance(value, dict) or value.get("token") != token:
            self._refusals.refuse("lease_files", path, self.folder,
                                  f"{self.store.url}/{path} names another holder than its generation's; it is ignored")
            return None
        return value

    def holder(self, generation: int, *, cached: bool = True) -> dict[str, Any] | None:
        """The verified entry of ``generation``'s holder; None when there is none, ``{}`` when it does not verify.

        ``generation`` 0 is store layout 2's ``lease.json`` (unsigned, read for its description only).
        ``cached=False`` reads the store even when this object verified the entry before (was it removed?).
        Raises :class:`StoreUnavailableError` when the store cannot be reached: an outage is not an entry
        that does not verify, and a driver that took it for one gave up its lease to nobody.
        """
        if generation <= 0:
            return self._legacy_holder()
        if cached and generation in self._holders:
            return self._holders[generation]
        path = self._holder_path(generation)
        try:
            data = self.store.read_bytes(path, max_bytes=HOLDER_MAX_BYTES)
        except StoreNotFoundError:
            return None
        except StoreUnavailableError:  # an outage says nothing of who holds the lease: the caller retries or fails
            raise
        except StoreError as error:
            self._refusals.refuse("lease_files", path, self.folder, f"{self.store.url}/{path} is unreadable: {error}; "
                                  "it is ignored")
            return {}
        try:
            entry = verify_json(self._key, data, _HOLDER_PURPOSE, self.run, int(generation),
                                where=f"{self.store.url}/{path}")
        except AuthenticationError as error:
            self._refusals.refuse("lease_files", path, self.folder,
                                  f"{error}; the lease entry is ignored (forged, or left by a sparkdbn that did not "
                                  "sign leases)")
            return {}
        if not isinstance(entry, dict) or entry.get("generation") != int(generation) or not entry.get("token"):
            return {}
        self._holders[generation] = entry
        return entry

    def _legacy_holder(self) -> dict[str, Any] | None:
        try:
            return _parse(self.store.read_bytes(join("runs", self.run, LEGACY_LEASE), max_bytes=HOLDER_MAX_BYTES))
        except StoreNotFoundError:
            return None
        except StoreUnavailableError:
            raise
        except StoreError:
            return {}

    # -- writing (each file is created, never replaced) -------------------------------------
    def take(self, generation: int, holder: dict[str, Any]) -> bool:
        """Create ``generation``'s signed holder entry; True when this call (``holder["token"]``) holds it now.

        Of several drivers taking the same generation at once exactly one gets True: the entry is
        created exclusively.  A retried create whose first attempt succeeded unseen answers False
        from the store; the token read back tells that case apart.
        """
        if generation <= 0:
            raise ValueError(f"lease generations start at 1, got {generation}")
        entry = {**holder, "run": self.run, "generation": int(generation)}
        data = sign_json(self._key, entry, _HOLDER_PURPOSE, self.run, int(generation))
        if self.store.create_exclusive(self._holder_path(generation), data):
            self._holders[int(generation)] = json.loads(json.dumps(entry))
            return True
        return (self.holder(generation) or {}).get("token") == holder.get("token")

    def renew(self, generation: int, count: int, token: str) -> None:
        """Advance ``generation``'s renewal counter to ``count`` (create it, then delete ``count - 1``)."""
        data = sign_json(self._key, {"token": token, "time": time.time()}, _RENEWAL_PURPOSE, self.run, int(generation),
                         int(count))
        self.store.create_exclusive(self._renewal_path(generation, count), data)  # False: a retry that had landed
        if count > 0:
            self.store.delete(self._renewal_path(generation, count - 1))

    def release(self, generation: int, count: int, token: str) -> bool:
        """Say ``generation`` let the run go, and delete its renewal file ``count``.

        Only the holder of ``generation`` releases it: when its verified entry names another
        ``token`` (or none), nothing is written and False is returned.
        """
        if (self.holder(generation, cached=False) or {}).get("token") != token:
            return False
        data = sign_json(self._key, {"token": token}, _RELEASE_PURPOSE, self.run, int(generation))
        self.store.create_exclusive(self._released_path(generation), data)
        if count >= 0:
            self.store.delete(self._renewal_path(generation, count))
        return True

    def holder_url(self, generation: int) -> str:
        """Where ``generation``'s holder entry lies (the store's URL and the path), for messages.

        Parameters
        ----------
        generation : int
            The lease generation whose holder entry is meant.
        """
        return f"{self.store.url}/{self._holder_path(generation)}"

    def _holder_path(self, generation: int) -> str:
        return join(self.folder, f"{_generation_name(generation)}.json")

    def _released_path(self, generation: int) -> str:
        return join(self.folder, f"{_generation_name(generation)}.released")

    def _renewal_path(self, generation: int, count: int) -> str:
        return join(self.folder, f"{_generation_name(generation)}-{int(count):08d}.renewal")


def _parse(data: bytes) -> dict[str, Any]:
    try:
        entry = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # RecursionError: nested too deep
        return {}
    return entry if isinstance(entry, dict) else {}
