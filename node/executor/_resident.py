"""The fit's training partitions where every node finds them: in the store, and in a node's memory.

The training modes run one Spark task per node and the driver deals each node a *slot* of
partitions once per fit (:class:`node.driver.FitJobs`).  Spark does not hand a slot's data to its task:

1. Before the fit's first training job every partition is in the store, signed
   (:mod:`node.data._blocks`): written by the driver for numpy arrays (:func:`write_partition`),
   else by the job that read and checked them (:func:`node.data.prepare_training_data`)::

       runs/<run>/blocks/<fit>/<partition:05d>-<sha256>-<mac>.block     the partition's X and y as .npy

2. Every training job carries only the slots' numbers.  A node takes its slot's partitions from
   its memory when it holds them (its worker ran this slot before), else from the store, checked
   against their signed names (:meth:`NodeData.slot`), and keeps them for the next jobs.  Idle
   nodes take a slower peer's partitions the same way (:meth:`NodeData.peer`, :mod:`node.modes._stealing`).

So the data crosses into Python once per fit, not once per epoch (digits28's
113 MB on one node: 0.16-0.20 s of a 2.2-2.6 s epoch), and a node that Spark moves to another
worker, or restarts after a worker died, finds its data in the store -- not in a process.  The
MAC covers (run, fit, partition, sha256) under the run key: a node never trains on data that no
holder of the key wrote, and the payload is read with ``allow_pickle=False``.  A node keeps at most
twice its slot's partitions in memory (the least recently used go first).  The driver removes the
folder when the fit ends (:func:`node.run.remove_work_folders`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import numpy as np

import storage

from .._contract import NodeConfig
from .._errors import STORE_FAILURES, TrainingError, short_error
from ..data import BLOCK_NAMES, Block, BlockSink, decode_block, store_block
from ..run import blocks_folder

__all__ = ["NodeData", "block_sink", "write_partition"]

logger = logging.getLogger(__name__)


def block_sink(store_url: str, retry_timeout_s: float, key: bytes, run: str, fit_id: str) -> BlockSink:
    """Where fit ``fit_id`` of ``run`` stores its training partitions, signed with ``key``."""
    return BlockSink(store_url, float(retry_timeout_s), blocks_folder(run, fit_id), key, run, fit_id)


def _signing(config: NodeConfig) -> tuple[bytes, tuple[str, str]]:
    """The key and context of a fit's stored partitions' names: (run, fit)."""
    return config.key, (config.run, config.fit_id)


def write_partition(store: storage.Store, config: NodeConfig, index: int, X: np.ndarray, y: np.ndarray | None) -> int:
    """Store partition ``index`` of ``config``'s fit under its signed name; the bytes written."""
    return store_block(store, blocks_folder(config.run, config.fit_id), *_signing(config), index, X, y)


# ----------------------------------------------------------------------------- a node's partitions
class NodeData:
    """The training partitions a node holds for its fit: in memory, else read from the store.

    Parameters
    ----------
    store : storage.Store
    config : NodeConfig
        The node's fit: its run, fit id and run key.
    name : str
        The node's name (for its log lines).
    """

    def __init__(self, store: storage.Store, config: NodeConfig, name: str) -> None:
        self.store, self.config, self.name = store, config, name
        self.folder = blocks_folder(config.run, config.fit_id)
        self.memory: OrderedDict[int, tuple[np.ndarray, np.ndarray | None]] = OrderedDict()
        self.stored: dict[int, storage.SignedName] = {}  # partition -> its verified stored name, as last listed
        self.read_bytes = 0  # data read from the store, since the last take_read_bytes()
        self.unreadable: dict[int, str] = {}  # partition -> why its stored copy could not be used

    def slot(self, partitions: list[int]) -> list[Block]:
        """The slot's partitions, in the order given.

        Raises
        ------
        TrainingError
            A partition is neither in memory nor readable from the store under a name signed for
            the fit (absent, or its content does not match its name): nothing is trained on it.
        """
        blocks = []
        for index in partitions:
            if not self.has(index):
                self.list_stored()
            block = self._get(index, capacity=2 * len(partitions))
            if block is None:
                why = self.unreadable.get(index, f"not in {self.folder}, where the fit stores it")
                raise TrainingError(f"node {self.name}: training partition {index} of run {self.config.run}: {why}")
            blocks.append((index, *block))
        return blocks

    def peer(self, index: int, own: int) -> tuple[np.ndarray, np.ndarray | None] | None:
        """A peer's partition, kept in memory beside the node's ``own`` ones; None if unreadable (logged)."""
        return self._get(index, capacity=2 * max(1, own))

    def list_stored(self) -> None:
        """Note the partitions the store holds under names signed for the fit."""
        for signed in map(BLOCK_NAMES.parse, self.store.list(self.folder)):
            if signed and BLOCK_NAMES.verifies(*_signing(self.config), signed):
                self.stored[signed.seq] = signed

    def has(self, index: int) -> bool:
        """Whether partition ``index`` is in memory or was in the store when last listed."""
        return index in self.memory or index in self.stored

    def take_read_bytes(self) -> int:
        """The data bytes read from the store since the last call."""
        read, self.read_bytes = self.read_bytes, 0
        return read

    # ------------------------------------------------------------------ helpers
    def _get(self, index: int, capacity: int) -> tuple[np.ndarray, np.ndarray | None] | None:
        block = self.memory.get(index) or self._read(index)
        if block is not None:
            self.memory[index] = block
            self.memory.move_to_end(index)
            while len(self.memory) > max(1, capacity):
                self.memory.popitem(last=False)
        return block

    def _read(self, index: int) -> tuple[np.ndarray, np.ndarray | None] | None:
        """Partition ``index`` from the store, checked against its signed name; None if absent or unusable."""
        signed = self.stored.get(index)
        if signed is None:
            return None
        path = f"{self.folder}/{BLOCK_NAMES.name(signed.seq, signed.sha256, signed.mac)}"
        try:
            # Nothing records a partition's size: a file past the store's cap is refused by its size, unread.
            data = self.store.read_bytes(path, max_bytes=storage.UNRECORDED_FILE_MAX_BYTES, stat_first=True)
            if storage.sha256_hex(data) != signed.sha256:
                raise storage.ChecksumError(f"{path}: the content does not match its sha256")
            block = decode_block(data)
        except STORE_FAILURES:  # nothing wrong with the partition: the store is down, refuses the run or is full,
            raise  # and the task reports it (node.executor._tasks)
        except (storage.StoreError, ValueError) as error:
            logger.warning("node %s cannot read training partition %d from %s: %s", self.name, index, path, error)
            self.unreadable[index] = f"{path}: {short_error(error)}"
            self.stored.pop(index, None)
            return None
        self.read_bytes += len(data)
        return block
