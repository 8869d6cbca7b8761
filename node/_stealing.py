"""Work stealing in a phase-long Spark job: a free node trains the partitions a slower one has not started.

The ``sharing`` mode runs a phase as one Spark job of one task per node, the partitions dealt to
the nodes once per fit (:func:`node._mode.one_task_per_node`).  Dealt and left there, a node
slowed down (a busy executor, a straggler) would hold the job's end while the others idle.
Instead, per epoch, a node

1. trains its own partitions, in index order, claiming each before it starts it;
2. then the partitions of its peers that nobody has claimed yet, from the ends of their lists
   (the owners work from the fronts);
3. then goes on to the next epoch, whoever is still training the last partitions of this one.

So a partition of an epoch is trained by exactly one node -- the one that created its *claim*
first (an exclusive create, atomic in every store)::

    runs/<run>/claims/<fit>/<phase>/<epoch:04d>-<partition:05d>      "<slot> <node>-<nonce> claimed|finished"

To train a partition it does not hold, a node reads it from the store, where every node writes
its own partitions once per fit, before it trains (a partition is stolen only once it is there)::

    runs/<run>/blocks/<fit>/<partition:05d>-<sha256>-<mac>.block     the partition's X and y as .npy

The MAC covers (run, fit, partition, sha256) under the run key: a node never trains on data
that no node of the run wrote, and the payload is read with ``allow_pickle=False``.  Up to as
many stolen partitions as a node owns stay in its memory for later epochs.  The driver removes
both folders when the fit ends (:func:`remove_work_folders`).  With one node nothing is claimed
or written: its job is exactly its own partitions, in order.

A node marks a claim finished when it has trained the partition.  When a worker dies, Spark
retries its task (the same slot) on a fresh node, which trains the partitions its slot had
claimed and not finished -- and only those: nothing is trained twice in an epoch, nothing is
lost.  (This needs Spark's speculative execution off, its default: two attempts of one task at
once would both take over.)
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from typing import TYPE_CHECKING, Iterator

import numpy as np

import storage

from ._data import decode_block, encode_block
from ._mode import Block

if TYPE_CHECKING:
    from ._contract import TaskSpec
    from ._executor import ExecutorNode

__all__ = ["PartitionQueue", "remove_work_folders"]

logger = logging.getLogger(__name__)

_BLOCKS = storage.SignedNames("sparkdbn training block v1", ".block", seq_digits=5)
_CLAIM_MAX_BYTES = 1024


def _claims_folder(run: str, fit_id: str, phase: str) -> str:
    return f"runs/{run}/claims/{fit_id[:12]}/{phase}"


def _blocks_folder(run: str, fit_id: str) -> str:
    return f"runs/{run}/blocks/{fit_id[:12]}"


def remove_work_folders(store: storage.Store, run: str, fit_id: str | None = None) -> None:
    """Remove the claims and stored partitions of fit ``fit_id`` of ``run`` (of every fit of it when None).

    The driver calls it when a fit ends (its own) and when one starts under the run's lease (what
    earlier fits that did not end cleanly left).
    """
    for kind in ("claims", "blocks"):
        fits = store.list(f"runs/{run}/{kind}") if fit_id is None else [fit_id[:12]]
        for fit in fits:
            store.delete(f"runs/{run}/{kind}/{fit}", recursive=True)
        if not store.list(f"runs/{run}/{kind}"):  # nothing left in it (or never made)
            store.delete(f"runs/{run}/{kind}", recursive=True)


class PartitionQueue:
    """The partitions one node trains in each epoch of a phase-long job (see the module docstring).

    Parameters
    ----------
    node : ExecutorNode
    task : TaskSpec
    slot : int
        This node's slot (its Spark partition) in ``slots``.
    slots : list of list of int
        Every slot's partitions, as dealt by :func:`node._mode.deal_partitions`.
    blocks : list of Block
        This slot's partitions.
    """

    def __init__(self, node: "ExecutorNode", task: "TaskSpec", slot: int, slots: list[list[int]],
                 blocks: list[Block]) -> None:
        self.node, self.task, self.slot = node, task, slot
        self.own = sorted(blocks, key=lambda block: block[0])
        self.shared = len(slots) > 1
        # Peers' partitions, last-of-each-list first: (-position in its slot, slot) orders them.
        self.others = [index for _position, _slot, index in sorted(
            (-position, other, index) for other, partitions in enumerate(slots) if other != slot
            for position, index in enumerate(partitions))]
        self.token = f"{node.node}-{uuid.uuid4().hex}"
        self.stolen: OrderedDict[int, tuple[np.ndarray, np.ndarray | None]] = node.mode_state.setdefault(
            "stolen", OrderedDict())
        self.blocks_folder = _blocks_folder(task.node.run, task.node.fit_id)
        self._stored: dict[int, storage.SignedName] = {}  # partition -> its verified stored name, as last listed
        self.read_bytes = 0  # data read from the store for stolen partitions, since the last take_read_bytes()

    # ------------------------------------------------------------------ the epoch's partitions
    def store_own(self) -> None:
        """Write this slot's partitions to the store (once per fit) so that idle peers can take them."""
        if not self.shared:
            return
        present = {signed.seq for signed in map(_BLOCKS.parse, self.node.store.list(self.blocks_folder)) if signed}
        for index, X, y in self.own:
            if index not in present:
                data = encode_block(X, y)
                name = _BLOCKS.signed(*self._signing(), index, storage.sha256_hex(data))
                self.node.store.write_bytes(f"{self.blocks_folder}/{name}", data)

    def epoch(self, epoch: int) -> Iterator[tuple[Block, bool]]:
        """``((index, X, y), stolen)`` for every partition this node claims in ``epoch``, in training order.

        Asking for the next partition marks the one before finished (the caller trained it).
        """
        for index, X, y in self.own:
            if self._claim(epoch, index):
                yield (index, X, y), False
                self._finish(epoch, index)
        if not self.shared:
            return
        if any(index not in self.stolen and index not in self._stored for index in self.others):
            self._list_stored()
        for index in self.others:
            if (index in self.stolen or index in self._stored) and self._claim(epoch, index):
                block = self._block(index)
                if block is not None:
                    yield (index, *block), True
                self._finish(epoch, index)

    def take_read_bytes(self) -> int:
        """The data bytes read from the store since the last call."""
        read, self.read_bytes = self.read_bytes, 0
        return read

    # ------------------------------------------------------------------ claims
    def _claim_path(self, epoch: int, index: int) -> str:
        task = self.task
        return f"{_claims_folder(task.node.run, task.node.fit_id, task.phase)}/{epoch:04d}-{index:05d}"

    def _claim(self, epoch: int, index: int) -> bool:
        """Whether this node trains ``index`` in ``epoch``: it claimed it first, or takes over its slot's.

        A claim says ``<slot> <token> claimed|finished``.  One that names this node's slot, is not
        finished and is not this node's was made by an earlier attempt of this node's task, which
        died with it (Spark runs one attempt of a task at a time): this node trains it instead.
        """
        if not self.shared:
            return True
        path = self._claim_path(epoch, index)
        mine = f"{self.slot} {self.token} claimed".encode()
        if self.node.store.create_exclusive(path, mine):
            return True
        try:
            held = self.node.store.read_bytes(path, max_bytes=_CLAIM_MAX_BYTES).decode("ascii", "replace").split()
        except (storage.StoreNotFoundError, storage.FileTooLargeError):
            return False
        if held[:2] == [str(self.slot), self.token]:  # a retried create whose first attempt succeeded unseen
            return True
        if len(held) == 3 and held[0] == str(self.slot) and held[2] == "claimed":
            logger.warning("node %s trains partition %d of epoch %d again: an earlier attempt of its task "
                           "claimed it and did not finish", self.node.node, index, epoch)
            self.node.store.write_bytes(path, mine)
            return True
        return False

    def _finish(self, epoch: int, index: int) -> None:
        if self.shared:
            self.node.store.write_bytes(self._claim_path(epoch, index), f"{self.slot} {self.token} finished".encode())

    # ------------------------------------------------------------------ stolen partitions
    def _signing(self) -> tuple[bytes, tuple[str, str]]:
        """The key and context of this fit's stored partitions' names: (run, fit)."""
        return self.task.node.key, (self.task.node.run, self.task.node.fit_id)

    def _list_stored(self) -> None:
        """Note the partitions the store holds under names signed by a node of the run."""
        for signed in map(_BLOCKS.parse, self.node.store.list(self.blocks_folder)):
            if signed and _BLOCKS.verifies(*self._signing(), signed):
                self._stored[signed.seq] = signed

    def _block(self, index: int) -> tuple[np.ndarray, np.ndarray | None] | None:
        """A stolen partition's arrays (kept in memory, at most as many as this node owns); None if unreadable."""
        if index in self.stolen:
            self.stolen.move_to_end(index)
            return self.stolen[index]
        signed = self._stored[index]
        path = f"{self.blocks_folder}/{_BLOCKS.name(signed.seq, signed.sha256, signed.mac)}"
        try:
            data = self.node.store.read_bytes(path)
            if storage.sha256_hex(data) != signed.sha256:
                raise storage.ChecksumError(f"{path}: the content does not match its sha256")
            block = decode_block(data)
        except (storage.StoreError, ValueError) as error:  # claimed, not trainable: this epoch goes without it
            logger.warning("node %s cannot take partition %d from %s: %s", self.node.node, index, path, error)
            self._stored.pop(index, None)
            return None
        self.read_bytes += len(data)
        self.stolen[index] = block
        while len(self.stolen) > max(1, len(self.own)):
            self.stolen.popitem(last=False)
        return block
