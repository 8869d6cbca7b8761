"""A run's lease generations: which driver holds a run, as files that are only ever created.

Layout under ``runs/<run>/lease/``::

    <generation:08d>.json                  the holder (run, generation, host, pid, fit, started,
                                           timeout_s, token), created exclusively: of two drivers
                                           taking the same generation exactly one creates it
    <generation:08d>-<count:08d>.renewal   the holder's renewal counter: it creates count + 1,
                                           then deletes count
    <generation:08d>.released              the holder let the run go

A driver takes the run by creating generation ``highest + 1``, a *fencing token* as Chubby's
sequencers and ZooKeeper's zxids are: everything it writes for the run is tied to that number
(see :class:`~storage.RunStore` records and models), so a driver holding an older generation can
never replace what a newer one wrote.  No file here is ever replaced, so a store whose rename
cannot overwrite (a WebHDFS gateway that ignores ``renameoptions=OVERWRITE``) shows no moment
without a lease.

Staleness is not judged here from timestamps: :class:`LeaseView` is what one listing shows, and
an observer calls a lease stale when its view has not changed for the timeout on the observer's
*own* monotonic clock (:mod:`node.run._lease`), so no two hosts' clocks are ever compared.  The
``started`` field is for people reading it, never compared.

Leases are not signed: they say who trains a run, they never feed training.  Someone who can
write the store can block a run with a forged lease (as they could delete its files), never
influence what it learns.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from ._errors import StoreError, StoreNotFoundError
from ._paths import check_name, join
from ._store import Store

__all__ = ["LEGACY_LEASE", "LeaseFolder", "LeaseView"]

logger = logging.getLogger(__name__)

#: Where sparkdbn up to 0.2 kept a run's one lease file (replaced at every renewal).
LEGACY_LEASE = "lease.json"
#: A holder entry is a few hundred bytes.
HOLDER_MAX_BYTES = 64 << 10

_HOLDER = re.compile(r"^(\d{8,})\.json$")
_RENEWAL = re.compile(r"^(\d{8,})-(\d{8,})\.renewal$")
_RELEASED = re.compile(r"^(\d{8,})\.released$")


@dataclass(frozen=True)
class LeaseView:
    """What one listing of a run's lease folder shows.

    Attributes
    ----------
    generation : int
        The highest generation any file names (0: the run was never leased by this layout).
    renewal : int
        The highest renewal count of that generation (-1: none yet).
    released : bool
        Its holder let the run go: the next driver takes it at once.
    legacy : str or None
        Only while ``generation`` is 0: the content of a ``lease.json`` of store layout 2
        (CHANGELOG.md), whose driver rewrites it at each renewal (None: there is none).
    """

    generation: int
    renewal: int = -1
    released: bool = False
    legacy: str | None = None

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


class LeaseFolder:
    """The lease files of one run (``runs/<run>/lease/``), read and written through ``store``.

    Parameters
    ----------
    store : Store
    run : str
    """

    def __init__(self, store: Store, run: str) -> None:
        self.store = store
        self.run = check_name("run", run)
        self.folder = join("runs", self.run, "lease")

    def __repr__(self) -> str:
        return f"LeaseFolder({self.store.url!r}, run={self.run!r})"

    # -- reading ---------------------------------------------------------------------------
    def view(self) -> LeaseView:
        """One listing of the folder (and, while it is empty, of a legacy ``lease.json``)."""
        generation, renewals, released = 0, {}, set()
        for name in self.store.list(self.folder):
            for pattern in (_HOLDER, _RENEWAL, _RELEASED):
                match = pattern.match(name)
                if match is None:
                    continue
                number = int(match[1])
                generation = max(generation, number)
                if pattern is _RENEWAL:
                    renewals[number] = max(renewals.get(number, -1), int(match[2]))
                elif pattern is _RELEASED:
                    released.add(number)
        legacy = None
        if generation == 0:
            try:
                legacy = self.store.read_bytes(join("runs", self.run, LEGACY_LEASE), max_bytes=HOLDER_MAX_BYTES)
                legacy = legacy.decode("utf-8", "replace")
            except StoreNotFoundError:
                legacy = None
            except StoreError as error:  # too large, unreadable: it still blocks until it has been silent long enough
                legacy = f"unreadable: {error}"
        return LeaseView(generation, renewals.get(generation, -1), generation in released, legacy)

    def holder(self, generation: int) -> dict[str, Any] | None:
        """The entry of ``generation``'s holder; None when there is none, ``{}`` when it is unreadable."""
        if generation <= 0:
            return self._legacy_holder()
        try:
            data = self.store.read_bytes(self._holder_path(generation), max_bytes=HOLDER_MAX_BYTES)
        except StoreNotFoundError:
            return None
        except StoreError as error:
            logger.warning("run %s: the holder entry of lease generation %d is unreadable: %s", self.run, generation,
                           error)
            return {}
        return _parse(data)

    def _legacy_holder(self) -> dict[str, Any] | None:
        try:
            return _parse(self.store.read_bytes(join("runs", self.run, LEGACY_LEASE), max_bytes=HOLDER_MAX_BYTES))
        except StoreNotFoundError:
            return None
        except StoreError:
            return {}

    # -- writing (each file is created, never replaced) -------------------------------------
    def take(self, generation: int, holder: dict[str, Any]) -> bool:
        """Create ``generation``'s holder entry; True when this call (``holder["token"]``) holds it now.

        Of several drivers taking the same generation at once exactly one gets True: the entry is
        created exclusively.  A retried create whose first attempt succeeded unseen answers False
        from the store; the token read back tells that case apart.
        """
        if generation <= 0:
            raise ValueError(f"lease generations start at 1, got {generation}")
        entry = {**holder, "run": self.run, "generation": int(generation)}
        data = json.dumps(entry, sort_keys=True).encode("utf-8")
        if self.store.create_exclusive(self._holder_path(generation), data):
            return True
        return (self.holder(generation) or {}).get("token") == holder.get("token")

    def renew(self, generation: int, count: int) -> None:
        """Advance ``generation``'s renewal counter to ``count`` (create it, then delete ``count - 1``)."""
        self.store.create_exclusive(self._renewal_path(generation, count), b"")  # False: a retry that had landed
        if count > 0:
            self.store.delete(self._renewal_path(generation, count - 1))

    def release(self, generation: int, count: int) -> None:
        """Say ``generation`` let the run go, and delete its renewal file ``count``."""
        self.store.create_exclusive(join(self.folder, f"{_generation_name(generation)}.released"), b"")
        if count >= 0:
            self.store.delete(self._renewal_path(generation, count))

    def _holder_path(self, generation: int) -> str:
        return join(self.folder, f"{_generation_name(generation)}.json")

    def _renewal_path(self, generation: int, count: int) -> str:
        return join(self.folder, f"{_generation_name(generation)}-{int(count):08d}.renewal")


def _parse(data: bytes) -> dict[str, Any]:
    try:
        entry = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return entry if isinstance(entry, dict) else {}
