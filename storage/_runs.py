"""Run records, the peer registry and per-node metrics of a run.

Layout under ``runs/<run>/``::

    run.json                       the run record (config, model spec, phases, status)
    peers/<node>.json              endpoint, host, pid, started, last_seen, status
    metrics/<node>/<seq>.json      one small JSON file per metrics record (one per partition)
    model/model.npz                the final model (see :meth:`RunStore.model_path`)

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

from ._errors import StoreError, StoreNotFoundError
from ._paths import check_name, join
from ._store import Store

__all__ = ["RunStore", "read_json", "write_json"]

logger = logging.getLogger(__name__)

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
    """Records of one run: ``run.json``, peers and metrics.

    Parameters
    ----------
    store : Store
        The shared store (its root holds ``runs/``).
    run : str
        Run identifier.
    """

    def __init__(self, store: Store, run: str) -> None:
        self.store = store
        self.run = check_name("run", run)
        self.prefix = join("runs", self.run)

    def write_record(self, record: dict) -> None:
        """Write (replace) ``runs/<run>/run.json``."""
        write_json(self.store, join(self.prefix, "run.json"), record)

    def read_record(self) -> dict | None:
        """The run record, or None when the run has none."""
        return read_json(self.store, join(self.prefix, "run.json"))

    def _peer_path(self, node: str) -> str:
        return join(self.prefix, "peers", check_name("node", node) + ".json")

    def register_peer(self, node: str, info: dict) -> None:
        """Write (replace) the registry entry of ``node``.

        ``info`` typically has ``endpoint``, ``host``, ``pid``, ``started``; ``node``,
        ``status`` (``"alive"``) and ``last_seen`` (epoch seconds) are filled in when absent.
        """
        entry = {"node": node, "status": "alive", "last_seen": time.time(), **info}
        write_json(self.store, self._peer_path(node), entry)

    def mark_peer_gone(self, node: str) -> None:
        """Set ``status`` to ``"gone"`` in the registry entry of ``node`` (created if missing)."""
        entry = read_json(self.store, self._peer_path(node)) or {"node": node}
        entry.update(status="gone", last_seen=time.time())
        write_json(self.store, self._peer_path(node), entry)

    def list_peers(self) -> dict[str, dict]:
        """All registry entries by node name; unreadable entries are logged and skipped."""
        peers = {}
        directory = join(self.prefix, "peers")
        for name in self.store.list(directory):
            if not name.endswith(".json"):
                continue
            try:
                entry = read_json(self.store, join(directory, name))
            except StoreError as exc:
                logger.warning("skipping peer entry: %s", exc)
                continue
            if isinstance(entry, dict):  # None: deleted between listing and reading
                peers[name[: -len(".json")]] = entry
        return peers

    def append_metrics(self, node: str, record: dict) -> None:
        """Store one metrics record of ``node`` as ``metrics/<node>/<seq>.json`` (see module notes)."""
        with _counter_lock:
            count = next(_counter)
        seq = f"{time.time_ns():020d}-{os.getpid()}-{count:08d}-{uuid.uuid4().hex[:8]}"
        write_json(self.store, join(self.prefix, "metrics", check_name("node", node), seq + ".json"), record)

    def read_metrics(self, node: str | None = None) -> list[dict]:
        """Metrics records of ``node`` (or of all nodes), oldest first; each has a ``"node"`` key."""
        directory = join(self.prefix, "metrics")
        nodes = [check_name("node", node)] if node is not None else self.store.list(directory)
        keyed = []
        for name in nodes:
            for entry in self.store.list(join(directory, name)):
                if not entry.endswith(".json"):
                    continue
                try:
                    record = read_json(self.store, join(directory, name, entry))
                except StoreError as exc:
                    logger.warning("skipping metrics record: %s", exc)
                    continue
                if isinstance(record, dict):
                    record.setdefault("node", name)
                    keyed.append((entry, record))
        keyed.sort(key=lambda item: item[0])  # names start with a nanosecond timestamp
        return [record for _, record in keyed]

    def model_path(self) -> str:
        """Store-relative path of the final model: ``runs/<run>/model/model.npz``."""
        return join(self.prefix, "model", "model.npz")
