"""Authenticated weight snapshots of a run, their consolidation, and phase results.

Layout under ``runs/<run>/``::

    weights/<phase>/<node>/<version:08d>-<sha256>-<mac>.npz   one snapshot
    phases/<phase>-<sha256>.npz                                a phase result, named by its content
    phases/<phase>.json                                        (sparkdbn up to 0.2: a signed pointer to
                                                               the phase's current result, replaced)

``mac`` is HMAC-SHA256 under the run's key of (run, phase, node, version, sha256).  So one
listing of a node's folder tells a reader which versions exist and which of them a key holder
wrote, before reading any content: a file planted by someone who can write the store but does
not hold the key (any name, any version) is never listed, fetched or merged, and a snapshot
copied to another node, phase or version does not verify either.  The content is then checked
against the authenticated sha256 before it is decoded (``allow_pickle=False``), and its size is
bounded before it is read whole.

A phase result is created under a name of its own (its content's sha256) and never replaced;
the signed run record names the one that counts (``steps.<phase>.result``: file, sha256, size),
so a driver that lost the run's lease can store results of its own but never change which one
the run's record names (see :mod:`storage._runs`).

What a reader skips is counted per kind in :meth:`WeightStore.refusals` and logged once per
source (a node's folder).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from ._auth import Refusals, check_key, sha256_hex
from ._errors import (
    AuthenticationError,
    ChecksumError,
    FileTooLargeError,
    NoUsableSnapshotError,
    SnapshotValueError,
    StoreEntryTypeError,
    StoreError,
    StoreNotFoundError,
)
from ._npz import decode_params, encode_params
from ._paths import check_name, join
from ._runs import RunStore
from ._signed import read_signed_file
from ._signed_names import SignedName, SignedNames
from ._store import Store

__all__ = ["Consolidation", "DEFAULT_MAX_SNAPSHOT_BYTES", "OUTER_SUFFIX", "SnapshotRef", "WeightStore"]

logger = logging.getLogger(__name__)

_SNAPSHOTS = SignedNames("sparkdbn snapshot v1", ".npz")
_PHASE_RESULT_PURPOSE = "sparkdbn phase result v1"  # the signed pointers of sparkdbn up to 0.2
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

#: A node's outer momentum in a phase is stored as snapshots of the phase ``<phase>@outer``: authenticated
#: like the weights, and bound to that name, so it is never taken for (or merged as) weights.
OUTER_SUFFIX = "@outer"

#: Largest snapshot read when the caller names no tighter bound (its expected shapes).
DEFAULT_MAX_SNAPSHOT_BYTES = 1 << 30


@dataclass(frozen=True)
class SnapshotRef:
    """Where a weight snapshot lives and how to verify it.

    ``sha256`` is the digest of the file's bytes; ``mac`` authenticates (run, phase, node,
    version, sha256) under the run's key.  ``path`` (relative to the store) follows from them.
    """

    run: str
    phase: str
    node: str
    version: int
    sha256: str
    mac: str

    @property
    def path(self) -> str:
        """``runs/<run>/weights/<phase>/<node>/<version:08d>-<sha256>-<mac>.npz``."""
        folder = join("runs", check_name("run", self.run), "weights", check_name("phase", self.phase),
                      check_name("node", self.node))  # fmt: skip
        return join(folder, _SNAPSHOTS.name(self.version, self.sha256, self.mac))


@dataclass(frozen=True)
class Consolidation:
    """The mean of the newest usable snapshot of each node (see :meth:`WeightStore.consolidate`).

    ``params`` maps names to arrays with the snapshots' shapes and dtype; ``refs`` are the
    snapshots that went into it, one per node, in node order.
    """

    params: dict[str, np.ndarray]
    refs: tuple[SnapshotRef, ...]


class WeightStore:
    """Weight snapshots and phase results of one run, authenticated under the run's key.

    Parameters
    ----------
    store : Store
        The shared store (its root holds ``runs/``).
    run : str
        Run identifier.
    key : bytes
        The run's secret key (at least 16 bytes); it never goes to the store.
    max_snapshot_bytes : int
        Largest snapshot read when a call names no tighter bound.
    """

    def __init__(self, store: Store, run: str, key: bytes, *, max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES) -> None:
        self.store = store
        self.run = check_name("run", run)
        self._key = check_key(key, "the run key given to WeightStore")
        self.max_snapshot_bytes = int(max_snapshot_bytes)
        self._refusals = Refusals(logger)

    def __repr__(self) -> str:
        return f"WeightStore({self.store.url!r}, run={self.run!r})"

    def _node_dir(self, phase: str, node: str) -> str:
        return join("runs", self.run, "weights", check_name("phase", phase), check_name("node", node))

    def _mac(self, phase: str, node: str, version: int, sha256: str) -> str:
        return _SNAPSHOTS.mac(self._key, (self.run, phase, node), version, sha256)

    def refusals(self) -> dict[str, int]:
        """What readers of this object skipped, by kind: ``unauthenticated`` (no valid MAC),
        ``corrupt`` (content does not match its authenticated sha256), ``oversized``."""
        return self._refusals.counts()

    # -- snapshots --------------------------------------------------------------------------
    def put_version(self, phase: str, node: str, version: int, params: Mapping[str, np.ndarray]) -> SnapshotRef:
        """Write a snapshot atomically and return its reference.

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
        self._node_dir(phase, node)  # validates the names before any work
        data = encode_params(params, f"snapshot run={self.run} phase={phase} node={node} version={version}")
        digest = sha256_hex(data)
        ref = SnapshotRef(self.run, phase, node, int(version), digest, self._mac(phase, node, version, digest))
        self.store.write_bytes(ref.path, data)
        return ref

    def get_version(self, ref: SnapshotRef, *, max_bytes: int | None = None) -> dict[str, np.ndarray]:
        """Read a snapshot: its MAC is checked first, then its size, then its bytes' sha256.

        Parameters
        ----------
        max_bytes : int, optional
            Refuse a larger file before reading it whole (default ``max_snapshot_bytes``);
            :func:`snapshot_size_bound` gives it from the expected shapes.

        Raises
        ------
        AuthenticationError
            ``ref`` was not made under this run's key (nothing is read).
        FileTooLargeError
            The file is larger than ``max_bytes``.
        ChecksumError
            The content does not match the authenticated sha256 (damaged, truncated or replaced).
        StoreNotFoundError
            The snapshot is gone (e.g. pruned).
        """
        if ref.run != self.run or not _SNAPSHOTS.verifies(self._key, (self.run, ref.phase, ref.node),
                                                          SignedName(int(ref.version), ref.sha256, ref.mac)):
            raise AuthenticationError(
                f"snapshot {ref.node} v{ref.version} of phase {ref.phase!r}, run {ref.run!r}: its MAC does not verify "
                f"under the key of run {self.run!r}; it was not written by a holder of the run's key"
            )
        where = f"{self.store.url}/{ref.path}"
        data = self.store.read_bytes(ref.path, max_bytes=self.max_snapshot_bytes if max_bytes is None else max_bytes)
        digest = sha256_hex(data)
        if digest != ref.sha256:
            raise ChecksumError(
                f"{where}: sha256 {digest[:12]}... of {len(data)} bytes does not match {ref.sha256[:12]}...; "
                "the snapshot is corrupted, truncated or was replaced"
            )
        return decode_params(data, where)

    def list_versions(self, phase: str, node: str) -> list[SnapshotRef]:
        """The authenticated snapshots of ``node`` in ``phase``, oldest first (by version).

        Files whose name carries no valid MAC are skipped and counted as ``unauthenticated``, and so is
        a file planted where the node's folder should be (it has no snapshots).
        """
        directory = self._node_dir(phase, node)
        try:
            names = self.store.list(directory)
        except StoreEntryTypeError as error:
            self._refusals.refuse("unauthenticated", directory, directory, f"{error}: no node's folder of this run")
            return []
        refs = []
        for name in names:
            signed = _SNAPSHOTS.parse(name)
            path = join(directory, name)
            if signed is None:
                if name.endswith(".npz"):
                    self._refusals.refuse("unauthenticated", path, directory, f"{path}: not a signed snapshot name")
                continue
            if self._refusals.known("unauthenticated", path):
                continue
            if not _SNAPSHOTS.verifies(self._key, (self.run, phase, node), signed):
                self._refusals.refuse("unauthenticated", path, directory,
                                      f"{self.store.url}/{path}: its MAC does not verify under the run's key")  # fmt: skip
                continue
            refs.append(SnapshotRef(self.run, phase, node, signed.seq, signed.sha256, signed.mac))
        return sorted(refs, key=lambda ref: (ref.version, ref.sha256))

    def list_nodes(self, phase: str) -> list[str]:
        """Names of the folders under ``phase`` (a folder may hold no authenticated snapshot)."""
        return self.store.list(join("runs", self.run, "weights", check_name("phase", phase)))

    def newest_per_node(self, phase: str) -> dict[str, SnapshotRef]:
        """The newest authenticated snapshot of every node in ``phase`` (nodes without one are absent)."""
        newest = {}
        for node in self.list_nodes(phase):
            versions = self.list_versions(phase, node)
            if versions:
                newest[node] = versions[-1]
        return newest

    def prune(self, phase: str, node: str, keep: int, *, also_keep: Iterable[int] = ()) -> int:
        """Delete all but the newest ``keep`` authenticated snapshots of ``node`` and the versions
        ``also_keep`` names; returns how many were deleted.  Files that do not verify were not written by
        this run and are left alone."""
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        versions = self.list_versions(phase, node)
        held = {int(version) for version in also_keep}
        doomed = [ref for ref in versions[: max(0, len(versions) - keep)] if ref.version not in held]
        deleted = 0
        for ref in doomed:
            deleted += bool(self.store.delete(ref.path))
        return deleted

    def remove_phase(self, phase: str) -> int:
        """Delete every authenticated snapshot and outer momentum of ``phase``; returns how many.  Files that
        do not verify were not written by this run and are left alone."""
        return sum(self.prune(folder, node, 0) for folder in (phase, phase + OUTER_SUFFIX)
                   for node in self.list_nodes(folder))

    def newest_verified(
        self, phase: str, node: str, *, max_bytes: int | None = None, at_most: int | None = None
    ) -> tuple[SnapshotRef, dict[str, np.ndarray]] | None:
        """The newest snapshot of ``node`` that is authenticated and intact; the others are skipped
        (counted as ``corrupt`` or ``oversized``, logged once per node).  ``at_most``: the newest of
        the versions up to that one."""
        directory = self._node_dir(phase, node)
        versions = self.list_versions(phase, node)
        if at_most is not None:
            versions = [ref for ref in versions if ref.version <= at_most]
        for ref in reversed(versions):
            try:
                return ref, self.get_version(ref, max_bytes=max_bytes)
            except ChecksumError as error:
                self._refusals.refuse("corrupt", ref.path, directory, str(error))
            except FileTooLargeError as error:
                self._refusals.refuse("oversized", ref.path, directory, str(error))
            except StoreEntryTypeError as error:  # a directory or FIFO under the snapshot's name: no snapshot
                self._refusals.refuse("corrupt", ref.path, directory, str(error))
            except StoreNotFoundError:
                logger.info("snapshot %s vanished (pruned) while reading; trying an older one", ref.path)
        return None

    def consolidate(self, phase: str, nodes: Iterable[str] | None = None, *,
                    as_of: Mapping[str, int] | None = None) -> Consolidation:
        """The element-wise mean of the newest authenticated, intact snapshot of each node.

        Parameters
        ----------
        phase : str
            The phase whose snapshots are averaged.
        nodes : iterable of str, optional
            The nodes to average (e.g. those that trained in the phase's last epoch); every node
            with a folder in ``phase`` when None.  Nodes without a usable snapshot are left out
            (logged).
        as_of : mapping of str to int, optional
            ``{node: version}``: the newest snapshot of such a node up to that version, not a later one
            (an epoch's weights while the nodes train the next; what its partition reports say).
            A node whose snapshots up to it are all gone is left out (logged), as one without any.

        Returns
        -------
        Consolidation
            ``params``: same names, shapes and dtype as the snapshots; the sum is accumulated in
            float64 and the mean cast back.  ``refs``: the snapshots used, in node order.

        Raises
        ------
        NoUsableSnapshotError
            None of the nodes has a usable snapshot of ``phase``.
        StoreError
            A snapshot's names, shapes or dtypes differ from the others' (the message names it).
        """
        names = self.list_nodes(phase) if nodes is None else sorted({check_name("node", node) for node in nodes})
        total: dict[str, np.ndarray] = {}
        dtypes: dict[str, np.dtype] = {}
        used: list[SnapshotRef] = []
        as_of = {} if as_of is None else dict(as_of)
        for node in names:
            found = self.newest_verified(phase, node, at_most=as_of.get(node))
            if found is None:
                logger.warning("consolidate phase %s of run %s: node %s has no usable snapshot%s; left out", phase,
                               self.run, node, f" up to version {as_of[node]}" if node in as_of else "")  # fmt: skip
                continue
            ref, params = found
            if not used:
                total = {name: value.astype(np.float64) for name, value in params.items()}
                dtypes = {name: value.dtype for name, value in params.items()}
            else:
                layout = {name: (value.shape, value.dtype) for name, value in params.items()}
                expected = {name: (value.shape, dtypes[name]) for name, value in total.items()}
                if layout != expected:
                    raise StoreError(
                        f"consolidate phase {phase!r} of run {self.run!r}: {self.store.url}/{ref.path} has parameters "
                        f"{_describe(layout)}, the snapshots before it have {_describe(expected)}"
                    )
                for name, value in params.items():
                    np.add(total[name], value, out=total[name])  # float64 += (any float): exact enough
            used.append(ref)
        if not used:
            asked = "" if nodes is None else f" among nodes {names}"
            raise NoUsableSnapshotError(
                f"consolidate: no authenticated, intact snapshot of phase {phase!r}{asked} in run {self.run!r} "
                f"at {self.store.url}"
            )
        logger.info("consolidated phase %s of run %s from %d node(s)", phase, self.run, len(used))
        params = {name: (value / len(used)).astype(dtypes[name]) for name, value in total.items()}
        return Consolidation(params=params, refs=tuple(used))

    def consolidate_exact(self, phase: str, versions: Mapping[str, int]) -> Consolidation | None:
        """The mean of exactly the snapshots ``versions`` names (``{node: version}``: where a phase's last
        recorded epoch ended); None where it names none or one of them is gone or unusable."""
        if not versions:
            return None
        try:
            consolidation = self.consolidate(phase, versions, as_of=versions)
        except NoUsableSnapshotError:
            return None
        found = {ref.node: ref.version for ref in consolidation.refs}
        return consolidation if found == {node: int(version) for node, version in versions.items()} else None

    # -- outer momentum ----------------------------------------------------------------------
    def put_outer_momentum(self, phase: str, node: str, version: int, momentum: Mapping[str, np.ndarray],
                           *, keep: int = 2) -> SnapshotRef:
        """Store ``node``'s outer momentum in ``phase`` (the weights' names and shapes) as ``version``;
        older ones beyond the newest ``keep`` are deleted."""
        ref = self.put_version(phase + OUTER_SUFFIX, node, version, momentum)
        self.prune(phase + OUTER_SUFFIX, node, max(1, keep))
        return ref

    def outer_momentum(self, phase: str, nodes: Iterable[str] | None = None) -> dict[str, np.ndarray] | None:
        """The mean of the newest stored outer momentum of ``nodes`` (every node's when None) in ``phase``;
        None when none of them stored one (a node then starts with none)."""
        try:
            return self.consolidate(phase + OUTER_SUFFIX, nodes).params
        except (NoUsableSnapshotError, StoreNotFoundError):
            return None

    # -- phase results ------------------------------------------------------------------------
    def put_phase_result(self, phase: str, params: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Store ``params`` as a result of ``phase``, in a new file named by its content (never replacing one).

        Returns
        -------
        dict
            ``{"file", "file_sha256", "size_bytes"}``: what a run record keeps to name this result
            (``steps.<phase>.result``); :meth:`get_phase_result` reads it back verified against it.
        """
        data = encode_params(params, f"phase result {phase!r}")
        digest = sha256_hex(data)
        name = f"{check_name('phase', phase)}-{digest}.npz"
        path = join("runs", self.run, "phases", name)
        if not self.store.create_exclusive(path, data) and self._stored_digest(path, len(data)) != digest:
            self.store.write_bytes(path, data)  # damaged content under this content's name: nobody can use it
        return {"file": name, "file_sha256": digest, "size_bytes": len(data)}

    def _stored_digest(self, path: str, size_bytes: int) -> str | None:
        try:
            return sha256_hex(self.store.read_bytes(path, max_bytes=size_bytes))
        except (FileTooLargeError, StoreNotFoundError):
            return None

    def get_phase_result(self, phase: str, ref: Mapping[str, Any] | None = None) -> dict[str, np.ndarray] | None:
        """A stored result of ``phase``: the one ``ref`` names, else the one the run's newest record names.

        Parameters
        ----------
        ref : mapping, optional
            ``{"file", "file_sha256", "size_bytes"}`` as :meth:`put_phase_result` returned it (e.g.
            from a run record).  Without it the run's newest record that verifies names it; runs
            stored by sparkdbn up to 0.2 name it in a signed pointer, ``phases/<phase>.json``.

        Returns
        -------
        dict or None
            None when there is none, its content is gone, or (old runs) its pointer does not verify
            under the run's key (counted as ``unauthenticated`` and logged).

        Raises
        ------
        ChecksumError
            The content is not what the record (or pointer) names: damaged or replaced.
        StoreError
            ``ref`` does not name a result of ``phase``.
        """
        if ref is None:
            ref = self._recorded_result(phase)
            if ref is None:
                return self._legacy_phase_result(phase)
        name, digest, size = ref.get("file"), ref.get("file_sha256"), ref.get("size_bytes")
        if (not isinstance(digest, str) or not _SHA256.match(digest) or name != f"{phase}-{digest}.npz"
                or isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise StoreError(f"phase result {phase!r} of run {self.run!r}: {dict(ref)!r} names no result file of it")
        path = join("runs", self.run, "phases", name)
        where = f"{self.store.url}/{path}"
        try:
            data = self.store.read_bytes(path, max_bytes=size)
        except StoreNotFoundError as error:
            logger.warning("phase result %s of run %s: its content is gone (%s)", phase, self.run, error)
            return None
        except FileTooLargeError as error:
            raise ChecksumError(f"{where} is larger than the {size} bytes the run record names") from error
        if sha256_hex(data) != digest:
            raise ChecksumError(f"{where}: sha256 {sha256_hex(data)[:12]}... of {len(data)} bytes does not match the "
                                f"{digest[:12]}... the run record names; the file is damaged or was replaced")
        return decode_params(data, where)

    def _recorded_result(self, phase: str) -> Mapping[str, Any] | None:
        """``steps.<phase>.result`` of the run's newest record when it names a result file."""
        try:
            record = RunStore(self.store, self.run, self._key).read_record() or {}
        except AuthenticationError as error:
            self._refusals.refuse("unauthenticated", join("runs", self.run, "record"), join("runs", self.run),
                                  f"phase result {phase!r}: {error}")
            return None
        step = (record.get("steps") or {}).get(phase) if isinstance(record.get("steps"), dict) else None
        result = step.get("result") if isinstance(step, dict) else None
        return result if isinstance(result, dict) and "file" in result else None

    def _legacy_phase_result(self, phase: str) -> dict[str, np.ndarray] | None:
        folder = join("runs", self.run, "phases")
        try:
            data = read_signed_file(self.store, self._key, folder, check_name("phase", phase), ".npz",
                                    _PHASE_RESULT_PURPOSE, self.run, phase)  # fmt: skip
        except AuthenticationError as error:
            self._refusals.refuse("unauthenticated", join(folder, phase), folder, f"phase result {phase!r}: {error}")
            return None
        except StoreNotFoundError as error:
            logger.warning("phase result %s of run %s: its content is gone (%s)", phase, self.run, error)
            return None
        if data is None:
            return None
        return decode_params(data, f"{self.store.url}/{folder}/{phase}")


def _describe(layout: Mapping[str, tuple]) -> str:
    return "{" + ", ".join(f"{name}: {shape} {np.dtype(dtype)}" for name, (shape, dtype) in sorted(layout.items())) + "}"
