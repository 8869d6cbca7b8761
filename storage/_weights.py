"""Versioned weight snapshots of a run: ``runs/<run>/weights/<phase>/<node>/<version:08d>-<sha256>.npz``.

The file name carries both the version and the sha256 of the file bytes, so one listing of a
node's directory tells a peer (anti-entropy) what exists and how to verify it, with no index
file to keep consistent.  Files are written atomically by :class:`~storage.Store`; a snapshot is
read with ``allow_pickle=False`` and only after its bytes hash to the sha256 in its name.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import zipfile
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ._errors import ChecksumError, SnapshotValueError, StoreError, StoreNotFoundError
from ._paths import check_name, join
from ._store import Store

__all__ = ["SnapshotRef", "WeightStore", "decode_params", "encode_params"]

logger = logging.getLogger(__name__)

_SNAPSHOT_NAME = re.compile(r"^(\d{8,})-([0-9a-f]{64})\.npz$")


@dataclass(frozen=True)
class SnapshotRef:
    """Where a weight snapshot lives and how to verify it (``path`` is relative to the store)."""

    run: str
    phase: str
    node: str
    version: int
    path: str
    sha256: str


def encode_params(params: Mapping[str, np.ndarray], what: str = "parameters") -> bytes:
    """Serialize named arrays to ``.npz`` bytes, refusing NaN/Inf and non-numeric arrays.

    Raises
    ------
    SnapshotValueError
        For non-finite values, object/string arrays, empty or non-string names.
    """
    if not params:
        raise SnapshotValueError(f"{what}: no arrays to save (empty parameter dict)")
    arrays: dict[str, np.ndarray] = {}
    for name, value in params.items():
        if not isinstance(name, str) or not name:
            raise SnapshotValueError(f"{what}: parameter names must be non-empty strings, got {name!r}")
        array = np.asarray(value)
        if array.dtype.kind not in "biuf":
            raise SnapshotValueError(f"{what}: parameter {name!r} has non-numeric dtype {array.dtype}")
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            bad = int(np.size(array) - np.count_nonzero(np.isfinite(array)))
            raise SnapshotValueError(
                f"{what}: parameter {name!r} {array.shape} has {bad} NaN/Inf value(s); training diverged, "
                f"refusing to publish (lower the learning rate or check the input data)"
            )
        arrays[name] = array
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def decode_params(data: bytes, where: str) -> dict[str, np.ndarray]:
    """Load ``.npz`` bytes (``allow_pickle=False``); a damaged archive raises :class:`ChecksumError`."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as exc:
        raise ChecksumError(f"{where}: not a valid .npz archive ({exc}); the file is corrupted or truncated") from exc


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class WeightStore:
    """Weight snapshots and phase results of one run.

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

    def _node_dir(self, phase: str, node: str) -> str:
        return join("runs", self.run, "weights", check_name("phase", phase), check_name("node", node))

    def put_version(self, phase: str, node: str, version: int, params: Mapping[str, np.ndarray]) -> SnapshotRef:
        """Write a snapshot atomically and return its reference (path and sha256).

        Parameters
        ----------
        params : mapping of str to ndarray
            Named arrays, e.g. ``{"rbm0.W": (784, 500) float32, ...}``.

        Raises
        ------
        SnapshotValueError
            NaN/Inf values (divergence is never published), non-numeric arrays, bad version.
        """
        if isinstance(version, bool) or not isinstance(version, (int, np.integer)) or version < 0:
            raise SnapshotValueError(f"snapshot version must be a non-negative int, got {version!r}")
        where = f"snapshot run={self.run} phase={phase} node={node} version={version}"
        data = encode_params(params, where)
        digest = _sha256(data)
        path = join(self._node_dir(phase, node), f"{int(version):08d}-{digest}.npz")
        self.store.write_bytes(path, data)
        return SnapshotRef(self.run, phase, node, int(version), path, digest)

    def get_version(self, ref: SnapshotRef) -> dict[str, np.ndarray]:
        """Read a snapshot, verified against ``ref.sha256``.

        Raises
        ------
        ChecksumError
            Corrupted or truncated file.
        StoreNotFoundError
            The snapshot is gone (e.g. pruned).
        """
        data = self.store.read_bytes(ref.path)
        digest = _sha256(data)
        if digest != ref.sha256:
            raise ChecksumError(
                f"{self.store.url}/{ref.path}: sha256 {digest[:12]}... of {len(data)} bytes does not match "
                f"{ref.sha256[:12]}...; the snapshot is corrupted or truncated"
            )
        return decode_params(data, f"{self.store.url}/{ref.path}")

    def list_versions(self, phase: str, node: str) -> list[SnapshotRef]:
        """All snapshots of ``node`` in ``phase``, oldest first (by version)."""
        directory = self._node_dir(phase, node)
        refs = []
        for name in self.store.list(directory):
            match = _SNAPSHOT_NAME.match(name)
            if match is None:
                logger.debug("ignoring %s/%s: not a snapshot name", directory, name)
                continue
            refs.append(SnapshotRef(self.run, phase, node, int(match[1]), join(directory, name), match[2]))
        return sorted(refs, key=lambda ref: (ref.version, ref.sha256))

    def list_nodes(self, phase: str) -> list[str]:
        """Nodes that have a directory under ``phase``."""
        return self.store.list(join("runs", self.run, "weights", check_name("phase", phase)))

    def newest_per_node(self, phase: str) -> dict[str, SnapshotRef]:
        """The newest snapshot of every node in ``phase`` (nodes without snapshots are absent)."""
        newest = {}
        for node in self.list_nodes(phase):
            versions = self.list_versions(phase, node)
            if versions:
                newest[node] = versions[-1]
        return newest

    def prune(self, phase: str, node: str, keep: int) -> int:
        """Delete all but the newest ``keep`` snapshots of ``node``; returns how many were deleted."""
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        versions = self.list_versions(phase, node)
        doomed = versions[: max(0, len(versions) - keep)]
        deleted = 0
        for ref in doomed:
            deleted += bool(self.store.delete(ref.path))
        return deleted

    def newest_verified(self, phase: str, node: str) -> tuple[SnapshotRef, dict[str, np.ndarray]] | None:
        """The newest snapshot of ``node`` that exists and verifies; damaged ones are logged and skipped."""
        for ref in reversed(self.list_versions(phase, node)):
            try:
                return ref, self.get_version(ref)
            except ChecksumError as exc:
                logger.warning("skipping damaged snapshot: %s", exc)
            except StoreNotFoundError:
                logger.info("snapshot %s vanished (pruned) while reading; trying an older one", ref.path)
        return None

    def consolidate(self, phase: str) -> dict[str, np.ndarray]:
        """The mean over nodes of each node's newest verified snapshot in ``phase``.

        Returns
        -------
        dict of str to ndarray
            Same names, shapes and dtypes as the snapshots; the mean is accumulated in float64.

        Raises
        ------
        StoreNotFoundError
            No node has a valid snapshot for ``phase``.
        StoreError
            Snapshots of different nodes disagree on names or shapes.
        """
        total: dict[str, np.ndarray] = {}
        dtypes: dict[str, np.dtype] = {}
        used = []
        for node in self.list_nodes(phase):
            found = self.newest_verified(phase, node)
            if found is None:
                continue
            ref, params = found
            if not total:
                total = {name: value.astype(np.float64) for name, value in params.items()}
                dtypes = {name: value.dtype for name, value in params.items()}
            else:
                if set(params) != set(total) or any(params[n].shape != total[n].shape for n in total):
                    raise StoreError(
                        f"consolidate phase {phase!r} of run {self.run!r}: snapshot {ref.path} has parameters "
                        f"{ {n: v.shape for n, v in params.items()} }, others have "
                        f"{ {n: v.shape for n, v in total.items()} }"
                    )
                for name, value in params.items():
                    total[name] += value
            used.append(ref)
        if not used:
            raise StoreNotFoundError(f"consolidate: no valid snapshot of phase {phase!r} in run {self.run!r} at {self.store.url}")
        logger.info("consolidated phase %s of run %s from %d node(s)", phase, self.run, len(used))
        return {name: (value / len(used)).astype(dtypes[name]) for name, value in total.items()}

    def _phase_path(self, phase: str) -> str:
        return join("runs", self.run, "phases", check_name("phase", phase) + ".npz")

    def put_phase_result(self, phase: str, params: Mapping[str, np.ndarray]) -> None:
        """Store the consolidated result of ``phase`` at ``runs/<run>/phases/<phase>.npz``."""
        self.store.write_bytes(self._phase_path(phase), encode_params(params, f"phase result {phase!r}"))

    def get_phase_result(self, phase: str) -> dict[str, np.ndarray] | None:
        """The stored result of ``phase``, or None; damage is caught by the zip CRC (:class:`ChecksumError`)."""
        path = self._phase_path(phase)
        try:
            data = self.store.read_bytes(path)
        except StoreNotFoundError:
            return None
        return decode_params(data, f"{self.store.url}/{path}")
