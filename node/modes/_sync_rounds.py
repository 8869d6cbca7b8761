"""The round records of a ``sync`` job, and where the driver runs a job again after a lost node.

A sync job trains a phase's epochs (:mod:`node.modes._sync`); every node waits for every other at
each round's barrier, so a node lost mid-job cannot be replaced alone: its peers are rounds ahead.
The driver runs the whole job again instead, as a new *attempt*, from the furthest round every
node of the earlier attempts recorded.  Each attempt keeps its own folder::

    runs/<run>/rounds/<fit>/<phase>/<first epoch>/<attempt>/claims/<slot>          the slot's task started
    runs/<run>/rounds/<fit>/<phase>/<first epoch>/<attempt>/start/<slot>.json      where its node started
    runs/<run>/rounds/<fit>/<phase>/<first epoch>/<attempt>/<epoch>-<round>/<slot>.json   after each round
    runs/<run>/rounds/<fit>/<phase>/<first epoch>/<attempt>/failed.json            an error no new attempt mends

each ``.json`` signed with the run key: ``{node, version, sha256, mac, epoch, round, trained}`` names the
snapshot the node stored and what it trained for the round (partition, samples, loss, learning-rate factor,
nodes merging).  They are a work
folder of the fit (:func:`node.run.rounds_folder`): the driver removes them when the fit ends.

* A task claims its slot first (an exclusive create).  Spark runs a task again when its node was
  lost (the task alone, or the whole job where it is a barrier stage); that run finds the claim and
  fails at once (:class:`SyncNodeLost`): it cannot join peers that are rounds ahead.  Once Spark
  gives up on the job, the driver (:meth:`SyncJob.resume_point`) starts the next attempt.
* The next attempt's nodes continue from the mean of the furthest complete round's snapshots (an
  attempt's start stands at the round it continued from).  A node can be at most one round past the
  furthest complete one (the barrier holds it), and it prunes its snapshots only after a round's
  barrier -- when every peer has read what it continued from -- keeping two: that round's snapshots are
  still there.  The driver decides alone, so every node of an attempt continues from the same place.
* An error every attempt would meet alike (anything but a lost node or a peer missing at a barrier,
  which is what a lost node looks like from the others) is recorded in ``failed.json``: the driver
  raises it instead of running the job again, and a task Spark runs again raises it too.
"""

from __future__ import annotations

import logging
import math
import os
import uuid
from dataclasses import dataclass

import storage

from .._contract import SyncResume, TaskSpec
from .._errors import TrainingError
from ..run import rounds_folder

__all__ = ["RoundPlace", "RoundRecord", "SyncJob", "SyncNodeLost", "TrainedFigures", "round_members"]

logger = logging.getLogger(__name__)

_ROUND_CONTEXT = "sparkdbn sync round v1"
_FAILURE_CONTEXT = "sparkdbn sync failure v1"
_RECORD_MAX_BYTES = 16384
_FAILURE_MAX_BYTES = 16384
_CLAIM_MAX_BYTES = 256
_START = "start"


class SyncNodeLost(TrainingError):
    """Spark ran a sync task again (its node was lost): it cannot join its peers; the driver runs the job again."""


@dataclass(frozen=True, order=True)
class RoundPlace:
    """Round ``round`` of ``epoch`` of a job; round -1 is before the epoch's first (where a job starts)."""

    epoch: int
    round: int

    def folder_name(self) -> str:
        return f"{self.epoch:04d}-{self.round:05d}"

    @classmethod
    def from_folder_name(cls, name: str) -> "RoundPlace | None":
        epoch, _, round_index = name.partition("-")
        if not (epoch.isdigit() and round_index.isdigit()):
            return None
        return cls(int(epoch), int(round_index))


#: What a node trained a partition of a round with: (partition, samples, loss, learning-rate factor, nodes merging)
#: -- what its report said, and what a later attempt that skips the round reports again.
TrainedFigures = tuple[int, int, float, float, int]


@dataclass(frozen=True)
class RoundRecord:
    """What a slot's node recorded for a round: the snapshot it stored, and what it trained for the round."""

    ref: storage.SnapshotRef
    place: RoundPlace
    trained: tuple[TrainedFigures, ...]  # each partition of the round: what it scored and how it was trained


def round_members(slots: list[list[int]], frequency: int, round_index: int) -> list[int]:
    """The slots that train in round ``round_index`` (a slot with fewer partitions stops earlier)."""
    return [slot for slot, partitions in enumerate(slots) if math.ceil(len(partitions) / frequency) > round_index]


class SyncJob:
    """The store folders of one sync job and of one attempt of it, and the records in them.

    Parameters
    ----------
    store : storage.Store
        The run's store (the driver's or a node's).
    task : TaskSpec
        The job's task (its first epoch names the job; its slots and options the rounds).
    attempt : int
        The attempt (0: the job's first run).
    """

    def __init__(self, store: storage.Store, task: TaskSpec, attempt: int) -> None:
        self.store, self.task, self.attempt = store, task, int(attempt)
        self.root = f"{rounds_folder(task.node.run, task.node.fit_id, task.phase)}/{task.epoch:04d}"
        self.folder = f"{self.root}/{self.attempt}"

    # ------------------------------------------------------------------ the task's start
    def claim(self, slot: int) -> bool:
        """Claim ``slot`` for this attempt: False when a run of its task claimed it before (its node was lost)."""
        token = f"{os.getpid()}-{uuid.uuid4().hex}".encode()
        path = f"{self.folder}/claims/{slot}"
        self.store.makedirs(f"{self.folder}/claims")
        if self.store.create_exclusive(path, token):
            return True
        return self.store.read_bytes(path, max_bytes=_CLAIM_MAX_BYTES) == token  # a retried create that made it

    def lost_node_error(self, slot: int) -> TrainingError:
        """What a run of a task that finds its slot claimed raises: the recorded failure, else :class:`SyncNodeLost`."""
        failure = self.failure()
        if failure is not None:
            return self.failure_error(failure)
        return SyncNodeLost(f"sync, run {self.task.node.run}, phase {self.task.phase}: Spark ran the task of slot "
                            f"{slot} of attempt {self.attempt} again (its node was lost); a sync job takes no "
                            "replacement node between its rounds, so the driver runs the job again from the last "
                            "round every node completed")

    def failure_error(self, failure: str) -> TrainingError:
        return TrainingError(f"sync, run {self.task.node.run}, phase {self.task.phase}: {failure}")

    # ------------------------------------------------------------------ where the next attempt starts
    def resume_point(self) -> SyncResume | None:
        """Where this attempt starts: the furthest round every member of an earlier attempt recorded (the
        newer attempt on a tie), else None (the job's start)."""
        best: tuple[RoundPlace, int, bool] | None = None  # place, attempt, whether it is the attempt's start
        for attempt in self._earlier_attempts():
            found = self._furthest_complete(attempt)
            if found is not None and (best is None or (found[0], attempt) > best[:2]):
                best = (found[0], attempt, found[1])
        if best is None:
            return None
        place, attempt, start = best
        return SyncResume(attempt=attempt, epoch=place.epoch, round=place.round, start=start)

    def _earlier_attempts(self) -> list[int]:
        """The attempts before this one that left a folder, newest first."""
        try:
            names = self.store.list(self.root)
        except storage.StoreNotFoundError:
            return []
        return sorted((int(name) for name in names if name.isdigit() and int(name) < self.attempt), reverse=True)

    def _furthest_complete(self, attempt: int) -> tuple[RoundPlace, bool] | None:
        """The furthest round of ``attempt`` every member recorded, and whether it is the attempt's start
        (which stands at the round the attempt continued from)."""
        places = [place for place in map(RoundPlace.from_folder_name, self.store.list(f"{self.root}/{attempt}"))
                  if place is not None]
        for place in sorted(places, reverse=True):
            if all(self.read_record(attempt, place, slot) is not None for slot in self.members(place)):
                return place, False
        starts = [self.read_record(attempt, None, slot) for slot in range(len(self.task.slots))]
        if all(record is not None for record in starts):
            return max(record.place for record in starts), True
        return None

    def members(self, place: RoundPlace) -> list[int]:
        """The slots that train in the round at ``place`` (every slot at a start)."""
        if place.round < 0:
            return list(range(len(self.task.slots)))
        frequency = int(self.task.options.averaging_frequency)
        return round_members([list(slot) for slot in self.task.slots], frequency, place.round)

    # ------------------------------------------------------------------ failures
    def failure(self) -> str | None:
        """The error recorded in this attempt, if any (one not signed with the run key is skipped, logged)."""
        path = f"{self.folder}/failed.json"
        try:
            data = self.store.read_bytes(path, max_bytes=_FAILURE_MAX_BYTES)
            record = storage.verify_json(self.task.node.key, data, _FAILURE_CONTEXT, self.task.node.run,
                                         self.folder, where=f"{self.store.url}/{path}")
        except storage.StoreNotFoundError:
            return None
        except (storage.FileTooLargeError, storage.StoreEntryTypeError, storage.AuthenticationError) as error:
            logger.warning("sync skips %s: %s", path, error)  # not written by a node of this run: never acted upon
            return None
        return str(record.get("error", "")) if isinstance(record, dict) else None

    def record_failure(self, error: BaseException) -> None:
        """Record an error every attempt would meet alike (best effort: the error itself is what the task raises)."""
        record = {"error": f"{type(error).__name__}: {error}"[:8000]}
        try:
            self.store.write_bytes(f"{self.folder}/failed.json", storage.sign_json(
                self.task.node.key, record, _FAILURE_CONTEXT, self.task.node.run, self.folder))
        except storage.StoreError as store_error:
            logger.warning("sync could not record the failure of attempt %d: %s", self.attempt, store_error)

    # ------------------------------------------------------------------ records
    def write_record(self, place: RoundPlace | None, slot: int, ref: storage.SnapshotRef,
                     trained: list[TrainedFigures], started_at: RoundPlace | None = None) -> None:
        """Record this slot's snapshot for the round at ``place`` (None: the attempt's start, at ``started_at``)."""
        folder = self._folder(self.attempt, place)
        at = place if place is not None else started_at
        record = {"node": ref.node, "version": ref.version, "sha256": ref.sha256, "mac": ref.mac,
                  "epoch": at.epoch, "round": at.round, "trained": [list(item) for item in trained]}
        self.store.write_bytes(f"{folder}/{slot}.json", storage.sign_json(
            self.task.node.key, record, _ROUND_CONTEXT, self.task.node.run, folder))

    def read_record(self, attempt: int, place: RoundPlace | None, slot: int) -> RoundRecord | None:
        """``slot``'s record of the round at ``place`` (None: the start) in ``attempt``; None if absent or not
        written by a node of this run (skipped, logged)."""
        folder = self._folder(attempt, place)
        path = f"{folder}/{slot}.json"
        try:
            data = self.store.read_bytes(path, max_bytes=_RECORD_MAX_BYTES)
        except storage.StoreNotFoundError:
            return None
        except (storage.FileTooLargeError, storage.StoreEntryTypeError) as error:  # no record a node writes
            logger.warning("sync barrier skips %s: %s", path, error)
            return None
        task = self.task
        try:
            record = storage.verify_json(task.node.key, data, _ROUND_CONTEXT, task.node.run, folder,
                                         where=f"{self.store.url}/{path}")
            ref = storage.SnapshotRef(task.node.run, task.phase, str(record["node"]), int(record["version"]),
                                      str(record["sha256"]), str(record["mac"]))
            at = RoundPlace(int(record["epoch"]), int(record["round"]))
            trained = tuple((int(p), int(n), float(loss), float(scale), int(nodes))
                            for p, n, loss, scale, nodes in record["trained"])
        except storage.AuthenticationError as error:  # not written by a node of this run: never acted upon
            logger.warning("sync barrier skips %s: %s", path, error)
            return None
        except (KeyError, TypeError, ValueError) as error:  # signed by this run's key, yet not a round record
            logger.warning("sync barrier skips %s: not a round record (%s)", path, error)
            return None
        return RoundRecord(ref, at, trained)

    def round_folder(self, place: RoundPlace) -> str:
        return self._folder(self.attempt, place)

    def _folder(self, attempt: int, place: RoundPlace | None) -> str:
        return f"{self.root}/{attempt}/{_START if place is None else place.folder_name()}"

    def earlier_round(self, resume: SyncResume, place: RoundPlace, slot: int) -> RoundRecord | None:
        """``slot``'s record of the round at ``place`` (at or before ``resume``'s) from the newest attempt up to
        ``resume``'s that has it: what the slot trained there, reported again by the attempt that skips it."""
        for attempt in self._earlier_attempts():
            if attempt > resume.attempt:
                continue  # an attempt that did not get past ``resume``: its rounds past it are not this history
            record = self.read_record(attempt, place, slot)
            if record is not None:
                return record
        return None
