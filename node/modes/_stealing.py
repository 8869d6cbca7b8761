"""Work stealing: a free node trains the partitions of an epoch a slower one has not started.

The modes that run one task per node (``async`` per epoch, ``sharing`` per phase) deal the
partitions to the nodes once per fit (the slots of :class:`~node._contract.TaskSpec`).  Dealt and left
there, a node slowed down (a busy executor, a straggler) would hold the job's end while the
others idle.  Instead, per epoch, a node

1. trains its own partitions, in index order, claiming each before it starts it;
2. then the partitions of its peers that nobody has claimed yet, from the ends of their lists
   (the owners work from the fronts) -- of peers whose task has started only (each claimed the
   first partition of its list in the job's first epoch): a peer that Spark started a few
   milliseconds later is not slow, and a node that took a whole epoch of short partitions from it
   would train that epoch alone.  While the epoch before the job's is still being trained (one of
   its claims is not finished), a peer that has not started yet gives up all but the first
   partition of its list: ``async`` queues each epoch's job behind the one running, and a node
   that finished its share of that one early starts the next while a slower node is still busy
   with the last -- whose share of the new epoch it then takes, leaving it the first partition.
   A peer that has still not started :data:`LATE_START_S` after this node began the job is late,
   not a few milliseconds behind (an executor that Spark is still starting, a slot busy elsewhere):
   its partitions are taken as a started peer's are.  Otherwise a ``sharing`` phase, one job for
   all its epochs, would train every epoch without the late slot's partitions, and the late node
   would train them after the others had finished, alone;
3. then goes on (to the next epoch, or the job's end), whoever is still training the last
   partitions of this one.

So a partition of an epoch is trained by exactly one node -- the one that created its *claim*
first (an exclusive create, atomic in every store).  Claims are only ever created, never replaced
(a store whose rename cannot overwrite would replace by DELETE then RENAME, and a stealer's create
in that gap would take a partition its owner is training)::

    runs/<run>/claims/<fit>/<phase>/<epoch:04d>-<partition:05d>            "<slot> <node>-<nonce> claimed"
    runs/<run>/claims/<fit>/<phase>/<epoch:04d>-<partition:05d>.finished   "<slot> <node>-<nonce> finished|skipped"

A node takes a peer's partition from its memory or from the store, where the fit stores every
partition before its first training job (:mod:`node.executor._resident`; a partition is taken only once it is there).  The
driver removes the claims and the stored partitions when the fit ends
(:func:`node.run.remove_work_folders`).
A lone node steals nothing (its job is exactly its own partitions, in order) but claims each
partition as well: the claims tell the driver's progress bar how far a job is
(:func:`claimed_partitions`), and a retried task what its dead attempt finished.

A node marks a claim finished (creates its ``.finished``) when it has trained the partition.  When a worker dies, Spark
retries its task (the same slot) on a fresh node, which trains the partitions its slot had
claimed and not finished -- and only those: nothing is trained twice in an epoch, nothing is
lost.  (This needs Spark's speculative execution off, its default: two attempts of one task at
once would both take over.)

The driver's half of work stealing is two functions over the claims: :func:`claimed_partitions`
(how far a job is, for the progress bar) and :func:`stop_epoch` (the nodes skip an epoch the
driver will not wait for); the executor's half is :class:`PartitionQueue`.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Iterator

import storage

from .._contract import TaskSpec
from .._errors import TrainingError
from ..data import Block
from ..run import claims_folder
from ._protocols import ModeNode

__all__ = ["LATE_START_S", "PartitionQueue", "claimed_partitions", "stop_epoch", "trained_by_lost_attempts",
           "untrained_partitions_error"]

logger = logging.getLogger(__name__)

_CLAIM_MAX_BYTES = 1024
_STOPPED = b"- driver stopped"  # a claim no slot holds (see stop_epoch)
_FINISHED = ".finished"
LATE_START_S = 5.0
"""Seconds after this node began a job by which a peer that has not started it counts as late (its partitions
are taken).  Spark starts a job's tasks on running executors within milliseconds; seconds mean a cold executor
or a busy slot."""


def _claim_name(epoch: int, index: int) -> str:
    return f"{epoch:04d}-{index:05d}"


def untrained_partitions_error(run: str, phase: str, epoch: int, untrained: list[int]) -> TrainingError:
    """The error that ends an epoch no node trained every partition of (``epoch`` 0-based).

    Such an epoch is never recorded: the fit fails, and fitting again trains it again, whole.
    """
    return TrainingError(
        f"run {run!r} {phase} epoch {epoch + 1}: no node of the fit trained partition(s) {untrained} (a stored copy "
        "that did not verify, or a claim no node of this fit made; the executors' logs say which). The epoch is not "
        "recorded and the fit stops; fit again with the same run id to train it again")


# ---------------------------------------------------------------------- driver
def claimed_partitions(store: storage.Store, run: str, fit_id: str, phase: str, epochs: range) -> int:
    """How many partitions of ``epochs`` of ``phase`` the nodes have claimed so far (trained, or training)."""
    count = 0
    for name in store.list(claims_folder(run, fit_id, phase)):
        epoch = name.split("-", 1)[0]
        count += epoch.isdigit() and int(epoch) in epochs and "." not in name
    return count


def stop_epoch(store: storage.Store, run: str, fit_id: str, phase: str, epoch: int, partitions: list[int]) -> int:
    """Claim, for nobody, every partition of ``epoch`` that no node has claimed: the nodes skip them.

    The driver ends so an epoch whose job it started ahead and will not wait for (early stopping
    ended the phase): the nodes finish the partitions they are training and end their tasks.
    Returns how many partitions were stopped.
    """
    folder = claims_folder(run, fit_id, phase)
    return sum(store.create_exclusive(f"{folder}/{_claim_name(epoch, index)}", _STOPPED) for index in partitions)


def trained_by_lost_attempts(store: storage.Store, run: str, fit_id: str, phase: str, epoch: int,
                             partitions: list[int]) -> list[int]:
    """Those of ``partitions`` of ``epoch`` whose claim a node marked trained in the store.

    A task attempt Spark gave up on (an executor it lost touch with, slow rather than dead) may have
    trained and published a partition whose report never reached the driver; its retry then finds
    the partition finished and trains it no second time.  The marker says the partition was trained:
    it is created after the partition's weights were published, never for one it could not train.
    """
    folder = claims_folder(run, fit_id, phase)
    found = []
    for index in partitions:
        try:
            marker = store.read_bytes(f"{folder}/{_claim_name(epoch, index)}{_FINISHED}", max_bytes=_CLAIM_MAX_BYTES)
        except (storage.StoreNotFoundError, storage.FileTooLargeError, storage.StoreEntryTypeError):
            continue
        if marker.split()[-1:] == [b"finished"]:
            found.append(index)
    return found


# ---------------------------------------------------------------------- executor
class PartitionQueue:
    """The partitions one node trains in each epoch of a phase-long job (see the module docstring).

    Parameters
    ----------
    node : ModeNode
    task : TaskSpec
        The job's task: its first epoch, and every slot's partitions (``task.slots``).
    slot : int
        This node's slot (its Spark partition) in ``task.slots``.
    blocks : list of Block
        This slot's partitions.
    """

    def __init__(self, node: ModeNode, task: TaskSpec, slot: int, blocks: list[Block]) -> None:
        slots = [list(partitions) for partitions in task.slots]
        self.node, self.task, self.slot, self.data = node, task, slot, node.data
        self.own = sorted(blocks, key=lambda block: block[0])
        self.shared = len(slots) > 1
        # Peers' partitions, last-of-each-list first: (-position in its slot, slot) orders them.
        self.others = [index for _position, _slot, index in sorted(
            (-position, other, index) for other, partitions in enumerate(slots) if other != slot
            for position, index in enumerate(partitions))]
        self.firsts = {other: partitions[0] for other, partitions in enumerate(slots) if partitions}
        self.owner = {index: other for other, partitions in enumerate(slots) for index in partitions}
        self.started: set[int] = set()  # slots whose node has started the job (see _note_started)
        self.began = time.monotonic()  # when this node began the job: a peer not started LATE_START_S on is late
        self.behind = False  # whether the epoch before the job's was still being trained (see _note_started)
        self.token = f"{node.name}-{uuid.uuid4().hex}"
        self.claims = claims_folder(task.node.run, task.node.fit_id, task.phase)

    # ------------------------------------------------------------------ the epoch's partitions
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
        if not all(self.data.has(index) for index in self.others):
            self.data.list_stored()
        self._note_started()
        late = time.monotonic() - self.began >= LATE_START_S
        for index in self.others:
            owner = self.owner[index]
            takeable = owner in self.started or late or (self.behind and index != self.firsts[owner])
            if takeable and self.data.has(index) and self._claim(epoch, index):
                block = self.data.peer(index, own=len(self.own))
                if block is not None:
                    yield (index, *block), True
                self._finish(epoch, index, trained=block is not None)  # not trainable (logged): the epoch goes without it

    # ------------------------------------------------------------------ claims
    def _note_started(self) -> None:
        """Note the slots whose node has started this job (it claimed its first partition of the job's first epoch)
        and, while some have not, whether the epoch before the job's is still being trained."""
        if len(self.started) == len(self.firsts):
            return
        claimed = set(self.node.store.list(self.claims))
        first_epoch = self.task.epoch
        self.started |= {other for other, first in self.firsts.items() if _claim_name(first_epoch, first) in claimed}
        self.behind = len(self.started) < len(self.firsts) and self._still_training(first_epoch - 1, claimed)

    def _still_training(self, epoch: int, claimed: set[str]) -> bool:
        """Whether a node is still training a partition of ``epoch`` (one of its listed claims is not finished)."""
        for name in sorted(name for name in claimed if epoch >= 0 and name.startswith(f"{epoch:04d}-")
                           and "." not in name and name + _FINISHED not in claimed):
            try:
                held = self.node.store.read_bytes(f"{self.claims}/{name}", max_bytes=_CLAIM_MAX_BYTES).split()
            except (storage.StoreNotFoundError, storage.FileTooLargeError, storage.StoreEntryTypeError):
                continue
            if held[-1:] == [b"claimed"]:  # not a stopped epoch's claim
                return True
        return False

    def _claim_path(self, epoch: int, index: int) -> str:
        return f"{self.claims}/{_claim_name(epoch, index)}"

    def _claim(self, epoch: int, index: int) -> bool:
        """Whether this node trains ``index`` in ``epoch``: it claimed it first, or takes over its slot's.

        A claim says ``<slot> <token> claimed|finished``.  One that names this node's slot, is not
        finished and is not this node's was made by an earlier attempt of this node's task, which
        died with it (Spark runs one attempt of a task at a time): this node trains it instead.
        """
        path = self._claim_path(epoch, index)
        mine = f"{self.slot} {self.token} claimed".encode()
        if self.node.store.create_exclusive(path, mine):
            return True
        try:
            held = self.node.store.read_bytes(path, max_bytes=_CLAIM_MAX_BYTES).decode("ascii", "replace").split()
        except (storage.StoreNotFoundError, storage.FileTooLargeError, storage.StoreEntryTypeError):
            return False
        if held[:2] == [str(self.slot), self.token]:  # a retried create whose first attempt succeeded unseen
            return True
        if len(held) == 3 and held[0] == str(self.slot) and held[2] == "claimed" and not self.node.store.exists(
                path + _FINISHED):
            # The claim stays as it is (never replaced): this attempt finishes it in the dead one's stead.
            logger.warning("node %s trains partition %d of epoch %d again: an earlier attempt of its task "
                           "claimed it and did not finish", self.node.name, index, epoch)
            return True
        return False

    def _finish(self, epoch: int, index: int, trained: bool = True) -> None:
        finished = f"{self.slot} {self.token} {'finished' if trained else 'skipped'}".encode()
        self.node.store.create_exclusive(self._claim_path(epoch, index) + _FINISHED, finished)  # False: a retry landed
