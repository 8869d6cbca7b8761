"""Run records, the peer registry and per-node metrics of a run, all signed.

Layout under ``runs/<run>/``::

    run.json                       the run record (config, model spec, phases, status)
    peers/<node>.json              endpoint, host, pid, started, last_seen, status
    metrics/<node>/<seq>.json      one small JSON file per metrics record (one per partition)
    model/model.npz                the final model (its sha256 is in the signed run record)

Every file is signed under the run's key (:func:`~storage._auth.sign_json`), its MAC bound to
where it belongs (run, node, record name), so a file written, changed or moved by someone
without the key does not verify.  A run record that does not verify raises
:class:`AuthenticationError`; peer entries and metrics records that do not verify are skipped
and counted (:meth:`RunStore.refusals`).

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
import threading
import time
import uuid
from typing import Any

from ._auth import Refusals, check_key, sha256_hex, verify_json
from ._errors import AuthenticationError, FileTooLargeError, StoreError, StoreNotFoundError
from ._paths import check_name, join
from ._signed import read_signed_json, write_signed_json
from ._store import Store

__all__ = ["RunStore", "read_json", "write_json"]

logger = logging.getLogger(__name__)

#: Bounds on what is read before it is verified: a run record, a peer entry, a metrics record.
RECORD_MAX_BYTES = 16 << 20
PEER_ENTRY_MAX_BYTES = 64 << 10
METRICS_RECORD_MAX_BYTES = 1 << 20

_RECORD_PURPOSE = "sparkdbn run record v1"
_PEER_PURPOSE = "sparkdbn peer entry v1"
_METRICS_PURPOSE = "sparkdbn metrics record v1"

_counter = itertools.count()
_counter_lock = threading.Lock()


def write_json(store: Store, path: str, value: Any) -> None:
    """Write ``value`` as JSON (UTF-8) atomically."""
    store.write_bytes(path, json.dumps(value, sort_keys=True, allow_nan=False).encode("utf-8"))


def read_json(store: Store, path: str) -> Any | None:
    """Read a JSON file; None when it does not exist.

    Raises
    ------
    StoreError
        The file exists but is not valid JSON.
    """
    try:
        data = store.read_bytes(path)
    except StoreNotFoundError:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
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

    def __repr__(self) -> str:
        return f"RunStore({self.store.url!r}, run={self.run!r})"

    def refusals(self) -> dict[str, int]:
        """What readers of this object skipped, by kind: ``peer_entries``, ``metrics_records``."""
        return self._refusals.counts()

    # -- the run record -----------------------------------------------------------------------
    def write_record(self, record: dict) -> None:
        """Write (replace) ``runs/<run>/run.json``, signed."""
        write_signed_json(self.store, self._key, join(self.prefix, "run.json"), record, _RECORD_PURPOSE, self.run)

    def read_record(self) -> dict | None:
        """The run record, or None when the run has none.

        Raises
        ------
        AuthenticationError
            The record does not verify under the key given: the run was started with another
            key (a wrong key on resume), or the file was written or changed without the key.
        """
        path = join(self.prefix, "run.json")
        try:
            record = read_signed_json(self.store, self._key, path, _RECORD_PURPOSE, self.run, max_bytes=RECORD_MAX_BYTES)
        except AuthenticationError as error:
            raise AuthenticationError(
                f"the record of run {self.run!r} ({self.store.url}/{path}) does not verify under the key given "
                f"(wrong key? a run must be resumed with the key it was started with; or the file was written by "
                f"someone without the key): {error}"
            ) from error
        if record is not None and not isinstance(record, dict):
            raise StoreError(f"{self.store.url}/{path}: a run record must be a JSON object, got {type(record).__name__}")
        return record

    # -- the peer registry --------------------------------------------------------------------
    def _peer_path(self, node: str) -> str:
        return join(self.prefix, "peers", check_name("node", node) + ".json")

    def register_peer(self, node: str, info: dict) -> None:
        """Write (replace) the signed registry entry of ``node``.

        ``info`` typically has ``endpoint``, ``host``, ``pid``, ``python`` (the node's interpreter),
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
        except FileTooLargeError as error:
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

        Entries that do not verify (unsigned, another key, moved from another node's name) are
        skipped, counted once per content as ``peer_entries`` and logged once per entry name.
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

        Records that do not verify are skipped, counted as ``metrics_records`` and logged once per node.
        """
        directory = join(self.prefix, "metrics")
        nodes = [check_name("node", node)] if node is not None else self.store.list(directory)
        keyed = []
        for name in nodes:
            for entry in self.store.list(join(directory, name)):
                if not entry.endswith(".json"):
                    continue
                path, seq = join(directory, name, entry), entry[: -len(".json")]
                try:
                    record = read_signed_json(self.store, self._key, path, _METRICS_PURPOSE, self.run, name, seq,
                                              max_bytes=METRICS_RECORD_MAX_BYTES)  # fmt: skip
                except AuthenticationError as error:
                    self._refusals.refuse("metrics_records", path, join(directory, name), str(error))
                    continue
                if isinstance(record, dict):
                    record.setdefault("node", name)
                    keyed.append((entry, record))
        keyed.sort(key=lambda item: item[0])  # names start with a nanosecond timestamp
        return [record for _, record in keyed]

    def model_path(self) -> str:
        """Store-relative path of the final model: ``runs/<run>/model/model.npz``.

        The model file itself is not signed: the run record (signed) names its sha256, and a
        reader compares the two before loading it.
        """
        return join(self.prefix, "model", "model.npz")
