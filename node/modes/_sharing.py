"""``mode="sharing"``: threshold-compressed update sharing (Strom 2015; Deeplearning4j's SharedTrainingMaster).

Every node keeps training its own replica and never waits for a peer.  What it shares is not
its weights but its *change*, compressed:

1. After each partition the node adds its parameter change to a local **residual**.
2. Entries of the residual with ``|r| >= threshold`` are published as ``+-threshold`` and that
   amount is taken off the residual; everything smaller stays in the residual for a later
   update (nothing is dropped: published + residual == total local change).
3. The **threshold adapts** so that about ``sharing_sparsity`` of the entries go out per update:
   after each update it is multiplied by ``sqrt(published fraction / sparsity)``, kept within
   ``[1/2, 4]`` (a few updates reach the target from any start, then it only drifts).
4. Before each partition the node **applies every peer update** it has not applied yet, each
   exactly once, whatever how often the store lists it.

Updates travel through the store, signed like snapshots, one small file per update::

    runs/<run>/updates/<phase>/<node>/<seq:08d>-<sha256>-<mac>.npz

an ordinary ``.npz`` with ``threshold`` (float32, shape ()) and, per parameter, ``<name>``
(int32 codes ``(flat index + 1) * sign``, as Deeplearning4j encodes them).  A node finds its
peers' new updates by listing the store before each partition; the MAC covers (run, phase,
node, seq, sha256), so a file not written by a node of the run is never applied.

Driver half: like ``"sync"``, the partitions are dealt to one task per node and a phase is one
Spark job of one task per node; a node writes its full parameters as a
snapshot once, when its share of the phase is done, for the phase's consolidation.  A slow
node does not hold the fast ones: they apply whatever it has published so far, and once their
own partitions of an epoch are done they train the ones it has not started yet
(:mod:`node.modes._stealing`), so the job ends about when the work is done, not when the slow node's
share would be.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Iterator, Mapping

import numpy as np

import storage

from .._contract import PartitionReport, SharingOptions, TaskSpec
from .._errors import InputDataError
from ..data import Block
from ._base import TrainingMode
from ._protocols import ModeDriver, ModeNode, ModeSettings, PartitionWork
from ._stealing import PartitionQueue

__all__ = ["SHARING_NODES_MEASURED_WELL", "SharingMode", "SharingState", "SparseUpdate", "ThresholdAccumulator",
           "UpdateExchange", "many_nodes_warning", "remove_updates"]

logger = logging.getLogger(__name__)

_UPDATES = storage.SignedNames("sparkdbn sparse update v1", ".npz")
_MIN_STEP, _MAX_STEP = 0.5, 4.0  # bounds of one threshold adaptation (a factor)

#: Past this many nodes ``sharing`` lost accuracy or diverged where ``async`` did not (docs/training-modes.md).
SHARING_NODES_MEASURED_WELL = 4


def many_nodes_warning(nodes: int) -> str | None:
    """What the driver says of a ``sharing`` fit on more nodes than it was seen to work well on, else None."""
    if nodes <= SHARING_NODES_MEASURED_WELL:
        return None
    return (f"mode 'sharing' on {nodes} nodes: every node adds each peer's update, and past "
            f"{SHARING_NODES_MEASURED_WELL} nodes it lost accuracy where 'async' did not (8 nodes on digits: "
            "0.70-0.80 against 0.92) and diverged on 64 and 256 simulated nodes; consider mode='async'")


@dataclass(frozen=True)
class SparseUpdate:
    """A quantized change: per parameter, int32 codes ``(flat index + 1) * sign``; each moves by ``threshold``."""

    threshold: float
    codes: dict[str, np.ndarray]

    def apply_to(self, params: Mapping[str, np.ndarray]) -> None:
        """Add the update to ``params`` in place."""
        step = np.float32(self.threshold)
        for name, codes in self.codes.items():
            flat = params[name].reshape(-1)
            flat[np.abs(codes) - 1] += np.sign(codes).astype(flat.dtype) * step

    def dense(self, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
        """The update as full arrays of the given shapes (zeros elsewhere)."""
        params = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
        self.apply_to(params)
        return params

    @property
    def entries(self) -> int:
        return sum(int(codes.size) for codes in self.codes.values())

    def encode(self) -> bytes:
        return storage.encode_params({"threshold": np.float32(self.threshold), **self.codes}, "sparse update")

    @staticmethod
    def size_bound(shapes: Mapping[str, tuple[int, ...]]) -> int:
        """The largest encoded update for parameters of these shapes: at most one int32 code per entry, a threshold,
        and the archive's headers (:func:`storage.snapshot_size_bound`)."""
        return storage.snapshot_size_bound({"threshold": (), **shapes}, itemsize=4)

    @classmethod
    def decode(cls, data: bytes, where: str) -> "SparseUpdate":
        arrays = storage.decode_params(data, where)
        threshold = arrays.pop("threshold", None)
        if threshold is None or any(codes.dtype != np.int32 or codes.ndim != 1 for codes in arrays.values()):
            raise storage.ChecksumError(f"{where}: not a sparse update (threshold and int32 codes)")
        return cls(float(threshold), arrays)


class ThresholdAccumulator:
    """The local residual of one node and phase, and the adaptive threshold (steps 1-3 above).

    Parameters
    ----------
    threshold : float
        The first threshold.
    sparsity : float
        The fraction of entries an update aims to carry.
    """

    def __init__(self, threshold: float, sparsity: float) -> None:
        self.threshold = float(threshold)
        self.sparsity = float(sparsity)
        self.residual: dict[str, np.ndarray] = {}

    def add(self, change: Mapping[str, np.ndarray]) -> SparseUpdate:
        """Accumulate ``change`` and take the update out of the residual; then adapt the threshold."""
        step = np.float32(self.threshold)
        codes, total = {}, 0
        for name, value in change.items():
            residual = self.residual.get(name)
            residual = np.array(value, np.float32) if residual is None else residual + value
            flat = residual.reshape(-1)
            chosen = np.flatnonzero(np.abs(flat) >= step)
            signs = np.sign(flat[chosen]).astype(np.float32)
            flat[chosen] -= signs * step  # what goes out leaves the residual; the rest waits
            codes[name] = ((chosen + 1) * signs.astype(np.int64)).astype(np.int32)
            self.residual[name] = residual
            total += flat.size
        update = SparseUpdate(float(step), codes)
        fraction = update.entries / max(1, total)
        self.threshold *= float(np.clip(np.sqrt(fraction / self.sparsity), _MIN_STEP, _MAX_STEP))
        return update


def remove_updates(store: storage.Store, run: str, key: bytes, phase: str) -> int:
    """Delete every update of ``phase`` signed by a node of ``run``; returns how many.  Files that do not
    verify were not written by the run and are left alone."""
    folder, removed = f"runs/{run}/updates/{phase}", 0
    for peer in store.list(folder):
        try:
            names = store.list(f"{folder}/{peer}")
        except storage.StoreEntryTypeError:  # a file planted where a node's folder goes: not the run's
            continue
        for name in names:
            signed = _UPDATES.parse(name)
            if signed is not None and _UPDATES.verifies(key, (run, phase, peer), signed):
                removed += bool(store.delete(f"{folder}/{peer}/{name}"))
    return removed


class UpdateExchange:
    """Signed sparse updates of one run in the store: publish one's own, receive the peers' once."""

    def __init__(self, store: storage.Store, run: str, key: bytes, node: str) -> None:
        self.store, self.run, self.key, self.node = store, run, key, node
        self.applied: set[tuple[str, str, int]] = set()  # (phase, peer, seq): each update at most once
        self.refused: set[str] = set()  # paths skipped as unsigned, damaged or unreadable (logged once)

    def _folder(self, phase: str, node: str | None = None) -> str:
        base = f"runs/{self.run}/updates/{phase}"
        return base if node is None else f"{base}/{node}"

    def publish(self, phase: str, seq: int, update: SparseUpdate) -> int:
        """Write update ``seq`` of this node; returns its size in bytes."""
        data = update.encode()
        name = _UPDATES.signed(self.key, (self.run, phase, self.node), seq, storage.sha256_hex(data))
        self.store.write_bytes(f"{self._folder(phase, self.node)}/{name}", data)
        return len(data)

    def receive(self, phase: str, max_bytes: int) -> list[tuple[str, int, SparseUpdate, int]]:
        """Peer updates not received before, as (peer, seq, update, bytes), oldest first per peer.

        A file larger than ``max_bytes`` (:meth:`SparseUpdate.size_bound` of the phase's parameters) is skipped
        unread, like one that does not verify.
        """
        found = []
        for peer in self.store.list(self._folder(phase)):
            if peer == self.node or self._folder(phase, peer) in self.refused:
                continue
            try:
                names = sorted(self.store.list(self._folder(phase, peer)))
            except storage.StoreEntryTypeError as error:  # a file planted where a peer's folder should be
                self._refuse(self._folder(phase, peer), str(error))
                continue
            for name in names:
                signed = _UPDATES.parse(name)
                if signed is None:
                    continue  # a temporary of a write in progress, or not ours
                seq = signed.seq
                if (phase, peer, seq) in self.applied:
                    continue
                path = f"{self._folder(phase, peer)}/{name}"
                if path in self.refused:
                    continue
                if not _UPDATES.verifies(self.key, (self.run, phase, peer), signed):
                    self._refuse(path, f"not signed by a node of run {self.run}")
                    continue
                try:
                    data = self.store.read_bytes(path, max_bytes=max_bytes)
                    if storage.sha256_hex(data) != signed.sha256:
                        raise storage.ChecksumError(f"{path}: the content does not match its sha256")
                    update = SparseUpdate.decode(data, path)
                except storage.StoreError as error:
                    self._refuse(path, str(error))
                    continue
                self.applied.add((phase, peer, seq))
                found.append((peer, seq, update, len(data)))
        return found

    def _refuse(self, path: str, why: str) -> None:
        self.refused.add(path)
        logger.warning("sharing: node %s skips %s: %s", self.node, path, why)


@dataclass
class SharingState:
    """What ``sharing`` keeps on a node between tasks: the fit and phase it trains, its residual and updates."""

    phase: tuple[str, str] | None = None  # (fit, phase)
    seq: int = 0  # the number of this node's last update in the phase
    accumulator: ThresholdAccumulator | None = None
    exchange: UpdateExchange | None = None


class SharingMode(TrainingMode):
    name = "sharing"
    options_type = SharingOptions
    scales_rates = False  # it adds its peers' updates: their sum already is one process's progress
    takes_outer_step = False  # nor does it step on them

    def options(self, settings: ModeSettings) -> SharingOptions:
        return SharingOptions(threshold=float(settings.sharing_threshold), sparsity=float(settings.sharing_sparsity))

    # ------------------------------------------------------------------ driver
    def run_epochs(self, driver: ModeDriver, phase: str, *, first: int, epochs: int) -> list[list[PartitionReport]]:
        warning = many_nodes_warning(driver.nodes)
        if warning:
            driver.warn_once(warning)
        reports = driver.start_job(phase, range(first, epochs), self.options(driver.settings)).reports()
        return [[report for report in reports if report.epoch == epoch] for epoch in range(first, epochs)]

    # ------------------------------------------------------------------ executor
    def train_task(self, node: ModeNode, task: TaskSpec, *, spark_partition: int,
                   blocks: list[Block]) -> Iterator[PartitionReport]:
        phase = task.phase
        state = node.mode_state(SharingState)
        if state.phase != (task.node.fit_id, phase):  # a new phase: a new residual and sequence
            state.phase, state.seq = (task.node.fit_id, phase), self._first_seq(node, task)
            state.accumulator = ThresholdAccumulator(task.options.threshold, task.options.sparsity)
            state.exchange = UpdateExchange(node.store, task.node.run, task.node.key, node.name)
        accumulator, exchange = state.accumulator, state.exchange
        queue = PartitionQueue(node, task, spark_partition, blocks)
        for epoch in task.epochs:
            epoch_task = dataclasses.replace(task, epoch=epoch)
            for (index, X, y), stolen in queue.epoch(epoch):
                started = time.time()
                tick = time.perf_counter()
                params, received = self._apply_peer_updates(node, exchange, phase)
                merge_s = time.perf_counter() - tick
                try:
                    # No merged_from: peers' updates are added, not averaged, so their sum already is
                    # the progress of one process, and the learning rates stay as given (node.modes._scaling).
                    trained = node.train(epoch_task, index, X, y)
                except InputDataError as error:
                    yield node.refusal(epoch_task, index, error)
                    return
                tick = time.perf_counter()
                after = node.model.parameters(phase)
                update = accumulator.add({name: after[name] - params[name] for name in after})
                state.seq += 1
                sent = exchange.publish(phase, state.seq, update)
                publish_s = time.perf_counter() - tick
                yield node.report(epoch_task, PartitionWork(
                    trained, started, merge_s=merge_s, publish_s=publish_s,
                    merged_from=[peer for peer, *_ in received], sent_bytes=sent,
                    read_bytes=sum(size for *_, size in received), stolen=stolen,
                    data_read_bytes=node.data.take_read_bytes()))
        # The phase's consolidation averages the nodes' snapshots: this node's, once, at the end.
        params, _received = self._apply_peer_updates(node, exchange, phase)
        node.weights.put_version(phase, node.name, state.seq, params)

    @staticmethod
    def _apply_peer_updates(node: ModeNode, exchange: UpdateExchange,
                            phase: str) -> tuple[dict[str, np.ndarray], list]:
        """Every peer update not applied yet, applied to the node's model; its parameters and what came."""
        params = node.model.parameters(phase)
        bound = SparseUpdate.size_bound({name: value.shape for name, value in params.items()})
        received = exchange.receive(phase, bound)
        for _peer, _seq, update, _size in received:
            update.apply_to(params)
        if received:
            node.model.set_parameters(params)
        return params, received

    @staticmethod
    def _first_seq(node: ModeNode, task: TaskSpec) -> int:
        """Past any update or snapshot a same-named node stored in the phase (a worker reused by a later fit)."""
        names = node.store.list(f"runs/{task.node.run}/updates/{task.phase}/{node.name}")
        seqs = [signed.seq for signed in map(_UPDATES.parse, names) if signed]
        versions = node.weights.list_versions(task.phase, node.name)
        return max(seqs + [ref.version for ref in versions] + [0])
