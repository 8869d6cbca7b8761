"""Run records, the peer registry and per-node metrics of a run, all signed.

Layout under ``runs/<run>/``::

    record/<generation:08d>-<seq:08d>.json   the run record (config, model spec, phases, status),
                                             one file per write, never replaced
    run.json                                 the run record as sparkdbn up to 0.2 kept it (read when
                                             ``record/`` holds none; never written any more)
    peers/<node>.json                        endpoint, host, pid, started, last_seen, status
    metrics/<node>/<seq>.json                one small JSON file per metrics record (one per partition)
    model/<generation:08d>/model.npz         the final model of a lease generation (the signed record
                                             names the one that counts, with its sha256)

Every file is signed under the run's key (:func:`~storage._auth.sign_json`), its MAC bound to
where it belongs (run, node, record name), so a file written, changed or moved by someone
without the key does not verify.

The record is *fenced*: each write creates a new file named by the writer's lease generation
(:mod:`storage._lease`) and a sequence number, exclusively; the record is the newest one that
verifies (highest generation, then sequence).  A driver that lost its lease and writes on (it was
paused, or cut off) creates files of an older generation, which no reader takes while a newer
driver's record exists: it can never replace what a newer driver wrote, whatever it does and
whenever it wakes up.  A writer prunes its own older records only, keeping the last two.  Nothing
is replaced, so a store whose rename cannot overwrite leaves no moment without a record.

A record that does not verify is skipped (counted as ``records``, logged); when records exist and
none verifies, :meth:`RunStore.read_record` raises :class:`AuthenticationError` (a wrong key).
Peer entries and metrics records that do not verify are skipped and counted
(:meth:`RunStore.refusals`).

Metrics are one file per record, not an appended ``.jsonl``: HDFS append is unreliable on
small clusters (pipeline recovery needs spare datanodes, and a writer killed mid-append leaves
the file's lease held for up to an hour), while a new small file is just one atomic create.
``<seq>`` is a nanosecond timestamp plus a process counter and a random suffix, so names sort
in time order per node and never collide, and no listing is needed before writing.  Reading
costs one request per record, which is fine for reports (a few thousand partitions).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import threading
import time
import uuid
from typing import Any

from ._auth import Refusals, check_key, sha256_hex, sign_json, verify_json
from ._errors import (AuthenticationError, FileTooLargeError, StoreEntryTypeError, StoreError, StoreNotFoundError,
                      StoreUnavailableError)
from ._paths import check_name, join
from ._signed import read_signed_json, write_signed_json
from ._store import Store

__all__ = ["RunStore", "has_run_record", "read_json", "write_json"]

logger = logging.getLogger(__name__)

#: Bounds on what is read before it is verified: a run record, a peer entry, a metrics record.
RECORD_MAX_BYTES = 16 << 20
PEER_ENTRY_MAX_BYTES = 64 << 10
METRICS_RECORD_MAX_BYTES = 1 << 20
#: Largest unsigned JSON file read (a dataset's ``_meta.json``, a staging marker): a dataset's meta lists its
#: shards, about 200 bytes each, so even 10,000 shards stay near 2 MB.
JSON_MAX_BYTES = 16 << 20

_LEGACY_RECORD_PURPOSE = "sparkdbn run record v1"  # runs/<run>/run.json
_RECORD_PURPOSE = "sparkdbn run record v2"  # runs/<run>/record/<generation>-<seq>.json
_RECORD_NAME = re.compile(r"^(\d{8,})-(\d{8,})\.json$")
#: The records a writer keeps of its own: the newest, and the one before should the newest be damaged.
RECORDS_KEPT = 2
#: How often a reader lists again when every record it listed was pruned before it could read it.
_RECORD_READ_ATTEMPTS = 3
_PEER_PURPOSE = "sparkdbn peer entry v1"
_METRICS_PURPOSE = "sparkdbn metrics record v1"

_counter = itertools.count()
_counter_lock = threading.Lock()


def write_json(store: Store, path: str, value: Any) -> None:
    """Write ``value`` as JSON (UTF-8) atomically."""
    store.write_bytes(path, json.dumps(value, sort_keys=True, allow_nan=False).encode("utf-8"))


def read_json(store: Store, path: str, *, max_bytes: int = JSON_MAX_BYTES) -> Any | None:
    """Read a JSON file; None when it does not exist.

    Parameters
    ----------
    store : Store
        The store holding it.
    path : str
        The file, relative to the store root.
    max_bytes : int
        A larger file is refused unread (:class:`FileTooLargeError`, a :class:`StoreError`).

    Raises
    ------
    StoreError
        The file exists but is not valid JSON, or is larger than ``max_bytes``.
    """
    try:
        data = store.read_bytes(path, max_bytes=max_bytes)
    except StoreNotFoundError:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # RecursionError: nested too deep
        raise StoreError(f"{store.url}/{path} is not valid JSON: {exc}") from exc


class RunStore:
    """Records of one run: ``run.json``, peers and metrics, signed under the run's key.

    Parameters
    ----------
    store : Store
        The shared store (its root holds ``runs/``).
    run : str
        Run identifier.
    key : bytes
        The run's secret key (at least 16 bytes); it never goes to the store.
    """

    def __init__(self, store: Store, run: str, key: bytes) -> None:
        self.store = store
        self.run = check_name("run", run)
        self.prefix = join("runs", self.run)
        self._key = check_key(key, "the run key given to RunStore")
        self._refusals = Refusals(logger)
        self._seq: dict[int, int] = {}  # the next record sequence number, per generation written here
        self._written: dict[int, list[str]] = {}  # this writer's record files, oldest first, per generation

    def __repr__(self) -> str:
        return f"RunStore({self.store.url!r}, run={self.run!r})"

    def refusals(self) -> dict[str, int]:
        """What readers of this object skipped, by kind: ``records``, ``peer_entries``, ``metrics_records``."""
        return self._refusals.counts()

    # -- the run record -----------------------------------------------------------------------
    def write_record(self, record: dict, *, generation: int = 0) -> str:
        """Create the next record file of lease ``generation``, signed; returns its path.

        ``generation`` 0 stands for writers outside any lease (tools, tests): every leased
        driver's record wins over theirs.  After the write, this writer's own records of the
        generation but the newest :data:`RECORDS_KEPT` are deleted.

        Raises
        ------
        StoreError
            The name is taken by different content: another writer of the same generation (two
            writers never share one: a generation is created exclusively, see :class:`LeaseFolder`).
        """
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise ValueError(f"a record's generation must be an int >= 0, got {generation!r}")
        seq = self._next_seq(generation)
        # Taken before the write: a write cut short after its create (Ctrl-C, SIGTERM) may have landed, and its
        # name used again would refuse the next write (a record left "running" after a Ctrl-C).  A gap is harmless.
        self._seq[generation] = seq + 1
        path = join(self.prefix, "record", f"{generation:08d}-{seq:08d}.json")
        data = sign_json(self._key, record, _RECORD_PURPOSE, self.run, generation, seq)
        if not self.store.create_exclusive(path, data) and not self._holds(path, data):
            self._seq[generation] = seq  # another writer's: each later write of this one stops here too
            raise StoreError(f"{self.store.url}/{path} was written by another writer of lease generation "
                             f"{generation}; this one stops")
        written = self._written.setdefault(generation, [])
        written.append(path)
        while len(written) > RECORDS_KEPT:
            try:
                self.store.delete(written[0])
            except StoreError as error:  # best effort: an extra old record misleads no reader
                logger.warning("run %s: could not prune the old record %s: %s", self.run, written[0], error)
                break
            written.pop(0)
        return path

    def _holds(self, path: str, data: bytes) -> bool:
        """Whether the file at ``path`` is ``data`` (read no further than its length: a larger file is not)."""
        try:
            return self.store.read_bytes(path, max_bytes=len(data)) == data
        except FileTooLargeError:
            return False

    def _next_seq(self, generation: int) -> int:
        if generation not in self._seq:  # the first write of this generation here: continue after what is stored
            taken = [seq for gen, seq, _ in self._record_names() if gen == generation]
            self._seq[generation] = max(taken, default=-1) + 1
        return self._seq[generation]

    def _record_names(self) -> list[tuple[int, int, str]]:
        """``(generation, seq, name)`` of every record file, newest first."""
        names = []
        for name in self.store.list(join(self.prefix, "record")):
            match = _RECORD_NAME.match(name)
            if match is not None:
                names.append((int(match[1]), int(match[2]), name))
        return sorted(names, reverse=True)

    def read_record(self) -> dict | None:
        """The run record: the newest record file that verifies; None when the run has none.

        Runs stored by sparkdbn up to 0.2 have ``run.json`` instead, read when ``record/`` holds
        no record that verifies.  An entry that cannot be read (a directory, a file the store
        refuses) or is damaged (truncated, not JSON) is skipped with a warning: the newest
        readable record is the run's.

        Raises
        ------
        AuthenticationError
            Records exist and none verifies under the key given: the run was started with another
            key (a wrong key on resume), or the files were written or changed without the key.
        StoreError
            Records exist and every one is unreadable or damaged (the message says which, and that
            the key is not the cause).
        """
        return self._newest(done=False)[0]

    def read_record_and_skipped(self) -> tuple[dict | None, tuple[str, ...]]:
        """The run record as :meth:`read_record` reads it, and the entries newer than it that were skipped.

        Each skipped entry is ``"<url>: <why>"``: named like a newer record, it cannot be read or is
        damaged, so the record returned may not be where the run stands (the skipped one may say "done").
        Readers that tell a user where a run stands name them rather than tell the older record's story.
        Entries that do not verify under the key are not listed: they are refused (logged) as
        :meth:`read_record` refuses them.

        Raises
        ------
        AuthenticationError, StoreError
            As :meth:`read_record`.
        """
        return self._newest(done=False)

    def read_done_record(self) -> dict | None:
        """The newest record that verifies and says ``status == "done"``; None when the run never finished.

        A later fit of a finished run (a refit, a resume with more epochs) that is running, failed
        or was interrupted leaves the finished fit's record and model in place: this is what a
        reader serves until a newer fit is done.
        """
        return self._newest(done=True)[0]

    def _newest(self, *, done: bool) -> tuple[dict | None, tuple[str, ...]]:
        refused: list[str] = []  # JSON that does not verify: another key, or written without one
        damaged: list[str] = []  # truncated (not JSON), too large, unreadable
        folder = join(self.prefix, "record")
        for _ in range(_RECORD_READ_ATTEMPTS):
            vanished = 0
            skipped: list[str] = []  # "<url>: why" of each unreadable or damaged entry newer than the one returned
            for generation, seq, name in self._record_names():
                path = join(folder, name)
                try:
                    data = self.store.read_bytes(path, max_bytes=RECORD_MAX_BYTES)
                except StoreNotFoundError:
                    vanished += 1  # pruned by its writer since the listing
                    continue
                except StoreUnavailableError:  # an outage says nothing of the records: the caller retries or fails
                    raise
                except StoreError as error:  # a directory, a file the store cannot read, one too large
                    if not self._refusals.known("unreadable_records", path):
                        logger.warning("run %s: skipping the record entry %s/%s, which cannot be read: %s; the newest "
                                       "readable record is used", self.run, self.store.url, path, error)
                    self._refusals.refuse("unreadable_records", path, folder, str(error))
                    damaged.append(f"{name}: unreadable ({error})")
                    skipped.append(f"{self.store.url}/{path}: {error}")
                    continue
                try:
                    record = verify_json(self._key, data, _RECORD_PURPOSE, self.run, generation, seq,
                                         where=f"{self.store.url}/{path}")
                except AuthenticationError as error:
                    if _is_json(data):
                        self._refusals.refuse("records", path, folder, str(error))
                        refused.append(str(error))
                    else:
                        self._refusals.refuse("damaged_records", path, folder, f"{error} (damaged: truncated or "
                                              "not written whole); skipped")
                        damaged.append(f"{name}: {error}")
                        skipped.append(f"{self.store.url}/{path}: damaged (truncated or not written whole)")
                    continue
                if not done or (isinstance(record, dict) and record.get("status") == "done"):
                    return self._checked(record, path), tuple(skipped)
            if not vanished:
                break
        legacy = self._read_legacy_record()
        if legacy is not None and (not done or legacy.get("status") == "done"):
            return legacy, tuple(skipped)
        if refused:
            raise AuthenticationError(
                f"the record of run {self.run!r} ({self.store.url}/{folder}, {len(refused)} file(s)) does "
                f"not verify under the key given (wrong key? a run must be resumed with the key it was started with; "
                f"or the files were written by someone without the key): {refused[0]}")
        if damaged and not done:
            raise StoreError(
                f"every record of run {self.run!r} in {self.store.url}/{folder} is damaged or unreadable "
                f"({len(damaged)} file(s); the key is not the cause): {damaged[0]}. Restore the folder from a "
                "backup, or fit again under a new run id")
        return None, tuple(skipped)

    def _read_legacy_record(self) -> dict | None:
        path = join(self.prefix, "run.json")
        try:
            record = read_signed_json(self.store, self._key, path, _LEGACY_RECORD_PURPOSE, self.run,
                                      max_bytes=RECORD_MAX_BYTES)
        except AuthenticationError as error:
            raise AuthenticationError(
                f"the record of run {self.run!r} ({self.store.url}/{path}) does not verify under the key given "
                f"(wrong key? a run must be resumed with the key it was started with; or the file was written by "
                f"someone without the key): {error}"
            ) from error
        return None if record is None else self._checked(record, path)

    def _checked(self, record: Any, path: str) -> dict:
        if not isinstance(record, dict):
            raise StoreError(f"{self.store.url}/{path}: a run record must be a JSON object, got {type(record).__name__}")
        return record

    # -- the peer registry --------------------------------------------------------------------
    def _peer_path(self, node: str) -> str:
        return join(self.prefix, "peers", check_name("node", node) + ".json")

    def register_peer(self, node: str, info: dict) -> None:
        """Write (replace) the signed registry entry of ``node``.

        ``info`` typically has ``endpoint``, ``host``, ``pid``, ``pid_namespace``, ``python`` (the node's interpreter),
        ``started``; ``node``, ``status`` (``"alive"``) and ``last_seen`` (epoch seconds) are filled
        in when absent.
        """
        entry = {"node": node, "status": "alive", "last_seen": time.time(), **info}
        write_signed_json(self.store, self._key, self._peer_path(node), entry, _PEER_PURPOSE, self.run, node)

    def _read_peer(self, node: str) -> dict | None:
        """The verified entry of ``node``; None when absent or refused (counted as ``peer_entries``)."""
        path = self._peer_path(node)
        try:
            data = self.store.read_bytes(path, max_bytes=PEER_ENTRY_MAX_BYTES)
        except StoreNotFoundError:
            return None  # deleted between listing and reading
        except (FileTooLargeError, StoreEntryTypeError) as error:  # too large; a directory or FIFO planted there
            self._refusals.refuse("peer_entries", path, path, str(error))
            return None
        try:
            entry = verify_json(self._key, data, _PEER_PURPOSE, self.run, node, where=f"{self.store.url}/{path}")
        except AuthenticationError as error:
            # Counted once per content: a planted entry is not counted again at every refresh.
            self._refusals.refuse("peer_entries", f"{path}@{sha256_hex(data)}", path, str(error))
            return None
        return entry if isinstance(entry, dict) else None

    def mark_peer_gone(self, node: str) -> None:
        """Set ``status`` to ``"gone"`` in the registry entry of ``node`` (created if missing or unverified)."""
        entry = self._read_peer(node) or {"node": node}
        entry.update(status="gone", last_seen=time.time())
        write_signed_json(self.store, self._key, self._peer_path(node), entry, _PEER_PURPOSE, self.run, node)

    def list_peers(self) -> dict[str, dict]:
        """The registry entries that verify under the run's key, by node name.

        Entries that do not verify (unsigned, another key, moved from another node's name) or are
        no file (a directory, a FIFO) are skipped, counted once per content as ``peer_entries`` and
        logged once per entry name.
        """
        peers = {}
        for name in self.store.list(join(self.prefix, "peers")):
            if not name.endswith(".json"):
                continue
            node = name[: -len(".json")]
            try:
                check_name("node", node)
            except StoreError:
                continue
            entry = self._read_peer(node)
            if entry is not None:
                peers[node] = entry
        return peers

    # -- metrics ------------------------------------------------------------------------------
    def append_metrics(self, node: str, record: dict) -> None:
        """Store one signed metrics record of ``node`` as ``metrics/<node>/<seq>.json`` (see module notes)."""
        with _counter_lock:
            count = next(_counter)
        seq = f"{time.time_ns():020d}-{os.getpid()}-{count:08d}-{uuid.uuid4().hex[:8]}"
        path = join(self.prefix, "metrics", check_name("node", node), seq + ".json")
        write_signed_json(self.store, self._key, path, record, _METRICS_PURPOSE, self.run, node, seq)

    def read_metrics(self, node: str | None = None) -> list[dict]:
        """Verified metrics records of ``node`` (or of all nodes), oldest first; each has a ``"node"`` key.

        Records that do not verify, and entries that are no file (a directory, a FIFO) or no folder
        where a node's folder is expected, are skipped, counted as ``metrics_records`` and logged once
        per node.
        """
        directory = join(self.prefix, "metrics")
        nodes = [check_name("node", node)] if node is not None else self.store.list(directory)
        keyed = []
        for name in nodes:
            try:
                entries = self.store.list(join(directory, name))
            except StoreEntryTypeError as error:
                self._refusals.refuse("metrics_records", join(directory, name), directory, str(error))
                continue
            for entry in entries:
                if not entry.endswith(".json"):
                    continue
                path, seq = join(directory, name, entry), entry[: -len(".json")]
                try:
                    record = read_signed_json(self.store, self._key, path, _METRICS_PURPOSE, self.run, name, seq,
                                              max_bytes=METRICS_RECORD_MAX_BYTES)  # fmt: skip
                except (AuthenticationError, StoreEntryTypeError) as error:
                    self._refusals.refuse("metrics_records", path, join(directory, name), str(error))
                    continue
                if isinstance(record, dict):
                    record.setdefault("node", name)
                    keyed.append((entry, record))
        keyed.sort(key=lambda item: item[0])  # names start with a nanosecond timestamp
        return [record for _, record in keyed]

    def model_path(self, generation: int | None = None) -> str:
        """Store-relative path of the final model of lease ``generation``: ``runs/<run>/model/<generation>/model.npz``.

        Each generation has its own, so a driver that lost the run never replaces the model a newer one
        stored.  ``None`` gives ``runs/<run>/model/model.npz``, where sparkdbn up to 0.2 kept it.  The
        model file itself is not signed: the run record (signed) names its path and sha256, and a reader
        compares the two before loading it.
        """
        if generation is None:
            return join(self.prefix, "model", "model.npz")
        return join(self.prefix, "model", f"{int(generation):08d}", "model.npz")


def _is_json(data: bytes) -> bool:
    """Whether ``data`` parses as JSON: a record that does not verify then was signed with another key or by
    someone without one; one that does not parse is damaged (truncated, not written whole)."""
    try:
        json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return True


def has_run_record(store: Store, run: str) -> bool:
    """Whether ``run`` has a record in ``store`` (of either layout), without reading or verifying it."""
    prefix = join("runs", check_name("run", run))
    return any(_RECORD_NAME.match(name) for name in store.list(join(prefix, "record"))) or store.exists(
        join(prefix, "run.json"))
