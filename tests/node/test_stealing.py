"""Work stealing (node.modes._stealing): each rule, on a real local store, without Spark."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import storage
from node.data import encode_block
from node.executor._resident import NodeData, write_partition
from node.modes._stealing import LATE_START_S, PartitionQueue, claimed_partitions, stop_epoch, trained_by_lost_attempts
from node.run._work_folders import remove_work_folders, rounds_folder
from support.webhdfs_server import WebHDFSServer

KEY = b"k" * 32
SLOTS = [[0, 2, 4, 6], [1, 3, 5, 7]]  # deal_partitions(8 partitions, 2 nodes)


def blocks_of(partitions: list[int]) -> list[tuple[int, np.ndarray, np.ndarray]]:
    return [(index, np.full((3, 2), index, np.float32), np.full(3, index)) for index in partitions]


def make_queue(store: storage.Store, name: str, slot: int, slots=SLOTS, phase: str = "finetune",
               fit_id: str = "f" * 32, first_epoch: int = 0) -> PartitionQueue:
    config = SimpleNamespace(run="r1", fit_id=fit_id, key=KEY)
    node = SimpleNamespace(name=name, store=store, data=NodeData(store, config, name))
    task = SimpleNamespace(node=config, phase=phase, epoch=first_epoch, slots=slots)  # the job's first epoch
    return PartitionQueue(node, task, slot, blocks_of(slots[slot]))


def store_own(*queues: PartitionQueue) -> None:
    """Store the nodes' partitions, as the fit's first job does (node.executor._resident)."""
    for queue in queues:
        for index, X, y in queue.own:
            write_partition(queue.node.store, queue.task.node, index, X, y)


@pytest.fixture
def store(tmp_path) -> storage.Store:
    return storage.open_store(str(tmp_path / "store"))


def trained(queue: PartitionQueue, epoch: int, count: int | None = None) -> list[tuple[int, bool]]:
    """The first ``count`` partitions (all when None) ``queue`` trains in ``epoch``: (index, stolen)."""
    out = []
    for (index, X, y), stolen in queue.epoch(epoch):
        assert np.all(X == index) and np.all(y == index)  # the partition's own data, stolen or not
        out.append((index, stolen))
        if count is not None and len(out) == count:
            break
    return out


def test_a_node_trains_its_own_partitions_first_then_takes_the_ends_of_its_peers_lists(store):
    fast, slow = make_queue(store, "fast", 0), make_queue(store, "slow", 1)
    store_own(fast, slow)
    slow_epoch = slow.epoch(0)
    assert next(slow_epoch)[0][0] == 1  # the slow node has started its first partition
    assert trained(fast, 0) == [(0, False), (2, False), (4, False), (6, False), (7, True), (5, True), (3, True)]
    assert list(slow_epoch) == []  # everything else was taken: on to the next epoch
    assert fast.data.take_read_bytes() == 3 * len(encode_block(*blocks_of([7])[0][1:]))
    assert fast.data.take_read_bytes() == 0


def test_every_partition_of_an_epoch_is_trained_exactly_once_whoever_asks_in_what_order(store):
    queues = [make_queue(store, f"node-{slot}", slot, first_epoch=3) for slot in range(2)]
    for queue in queues:
        store_own(queue)
    taken = []
    iterators = [queue.epoch(3) for queue in queues]
    while iterators:  # the two nodes alternate, as two processes would interleave
        for iterator in list(iterators):
            step = next(iterator, None)
            if step is None:
                iterators.remove(iterator)
            else:
                taken.append(step[0][0])
    assert sorted(taken) == list(range(8))
    assert sorted(index for index, _ in trained(queues[0], 4)) == list(range(8))  # a new epoch: all claimable


def test_a_partition_is_only_taken_once_its_owner_stored_it(store):
    fast, slow = make_queue(store, "fast", 0), make_queue(store, "slow", 1)
    store_own(fast)  # the slow node's task has not written its partitions yet
    assert trained(fast, 0) == [(0, False), (2, False), (4, False), (6, False)]
    store_own(slow)
    next(slow.epoch(0))  # the slow node starts: claims partition 1 of epoch 0
    assert trained(fast, 1)[4:] == [(7, True), (5, True), (3, True), (1, True)]


def test_stored_partitions_not_signed_with_the_run_key_are_never_taken(store):
    fast, slow = make_queue(store, "fast", 0), make_queue(store, "slow", 1)
    store_own(fast)
    data = encode_block(np.zeros((3, 2), np.float32), np.zeros(3))
    digest = storage.sha256_hex(data)
    forged_mac = storage.mac_hex(b"x" * 32, "sparkdbn training block v1", "r1", "f" * 32, 7, digest)
    store.write_bytes(f"runs/r1/blocks/{'f' * 12}/00007-{digest}-{forged_mac}.block", data)
    next(slow.epoch(0))  # started: its unclaimed partitions could be taken, were they stored by the run
    assert trained(fast, 0) == [(0, False), (2, False), (4, False), (6, False)]


def test_a_stored_partition_whose_content_was_replaced_is_claimed_but_not_trained(store):
    fast, slow = make_queue(store, "fast", 0), make_queue(store, "slow", 1)
    store_own(fast, slow)
    folder = f"runs/r1/blocks/{'f' * 12}"
    name = next(name for name in store.list(folder) if name.startswith("00007-"))
    store.write_bytes(f"{folder}/{name}", encode_block(np.ones((3, 2), np.float32), np.ones(3)))
    next(slow.epoch(0))  # started (partition 1)
    assert [index for index, _ in trained(fast, 0)] == [0, 2, 4, 6, 5, 3]


def test_a_retried_task_trains_what_its_dead_attempt_claimed_and_did_not_finish_and_nothing_else(store):
    dead, peer = make_queue(store, "dead", 1), make_queue(store, "peer", 0)
    store_own(dead, peer)
    dead_epoch = dead.epoch(0)
    assert next(dead_epoch)[0][0] == 1
    assert next(dead_epoch)[0][0] == 3  # partition 1 finished; the worker dies training 3
    peer_epoch = peer.epoch(0)
    assert [next(peer_epoch)[0][0] for _ in range(5)] == [0, 2, 4, 6, 7]  # the peer is training 7 when ...
    retry = make_queue(store, "retry", 1)  # ... Spark retries the dead node's task (slot 1) on a fresh node
    assert trained(retry, 0) == [(3, False), (5, False)]  # 3 again (claimed, unfinished), 5 unclaimed; not 1, not 7
    assert [index for (index, *_), _stolen in peer_epoch] == []  # 7 finished; nothing left for the peer


def test_a_partition_counts_as_trained_by_its_marker_once_trained_never_while_training_or_when_untrainable(store):
    # The driver's last word on a partition whose report it lacks (an attempt Spark gave up on trained it):
    # only a claim marked trained counts, not one being trained, nor a stolen one whose stored copy was replaced.
    fast, slow = make_queue(store, "fast", 0), make_queue(store, "slow", 1)
    store_own(fast, slow)
    folder = f"runs/r1/blocks/{'f' * 12}"
    name = next(name for name in store.list(folder) if name.startswith("00007-"))
    store.write_bytes(f"{folder}/{name}", encode_block(np.ones((3, 2), np.float32), np.ones(3)))
    next(slow.epoch(0))  # training partition 1
    assert [index for index, _ in trained(fast, 0)] == [0, 2, 4, 6, 5, 3]  # 7 claimed, not trainable
    assert trained_by_lost_attempts(store, "r1", "f" * 32, "finetune", 0, [0, 1, 3, 5, 7]) == [0, 3, 5]
    assert trained_by_lost_attempts(store, "r1", "f" * 32, "finetune", 1, [0, 3]) == []  # another epoch


def test_a_node_takes_nothing_from_a_peer_that_has_not_started_the_job(store):
    fast, late = make_queue(store, "fast", 0, first_epoch=2), make_queue(store, "late", 1, first_epoch=2)
    store_own(fast, late)
    assert trained(fast, 2) == [(0, False), (2, False), (4, False), (6, False)]  # late's task not begun: not slow
    late_epoch = late.epoch(2)
    assert next(late_epoch)[0][0] == 1  # now it has
    assert trained(fast, 3) == [(0, False), (2, False), (4, False), (6, False), (7, True), (5, True), (3, True),
                                (1, True)]
    assert [index for (index, *_), _stolen in late_epoch] == [3, 5, 7]  # epoch 2: its own, nobody took them


def test_a_peer_that_has_not_started_the_job_seconds_after_a_node_began_it_is_late_and_its_partitions_are_taken(store):
    # A sharing phase is one job: a slot whose executor Spark is still starting would otherwise keep its partitions
    # out of every epoch the others train meanwhile, and train them after the others, alone.
    fast, late = make_queue(store, "fast", 0), make_queue(store, "late", 1)
    store_own(fast, late)
    assert trained(fast, 0) == [(0, False), (2, False), (4, False), (6, False)]  # just begun: not late yet
    fast.began -= LATE_START_S  # the job has run LATE_START_S on the fast node
    assert trained(fast, 1) == [(0, False), (2, False), (4, False), (6, False), (7, True), (5, True), (3, True),
                                (1, True)]
    assert trained(late, 0) == [(1, False), (3, False), (5, False), (7, False)]  # what nobody took: its own, once
    assert trained(late, 1) == []  # every partition of epoch 1 is trained, once


def test_while_the_epoch_before_is_trained_a_node_takes_a_busy_peers_share_but_its_first_partition(store):
    # async queues each epoch's job behind the running one: the fast node starts epoch 1 while the slow
    # one still trains its last partition of epoch 0, whose job has not ended.
    fast, slow = make_queue(store, "fast", 0), make_queue(store, "slow", 1)
    store_own(fast, slow)
    slow_epoch = slow.epoch(0)
    assert next(slow_epoch)[0][0] == 1  # the slow node trains partition 1 of epoch 0 ...
    assert len(trained(fast, 0)) == 7  # ... while the fast one trains the other seven
    fast_next = make_queue(store, "fast", 0, first_epoch=1)  # the job of epoch 1, begun on the fast node
    assert trained(fast_next, 1) == [(0, False), (2, False), (4, False), (6, False), (7, True), (5, True), (3, True)]
    assert list(slow_epoch) == []  # partition 1 done: nothing left of epoch 0
    slow_next = make_queue(store, "slow", 1, first_epoch=1)
    assert trained(slow_next, 1) == [(1, False)]  # the first partition of its list was left to it


def test_once_the_epoch_before_is_over_a_peer_that_has_not_started_keeps_its_partitions(store):
    fast, slow = make_queue(store, "fast", 0), make_queue(store, "slow", 1)
    store_own(fast, slow)
    slow_epoch = slow.epoch(0)
    next(slow_epoch)
    trained(fast, 0)
    assert list(slow_epoch) == []  # partition 1 finished: every claim of epoch 0 is
    fast_next = make_queue(store, "fast", 0, first_epoch=1)
    assert trained(fast_next, 1) == [(0, False), (2, False), (4, False), (6, False)]  # a late peer, not a busy one


def test_a_stopped_epoch_leaves_each_node_only_the_partition_it_was_training(store):
    fast, slow = make_queue(store, "fast", 0), make_queue(store, "slow", 1)
    store_own(fast, slow)
    slow_epoch, fast_epoch = slow.epoch(0), fast.epoch(0)
    assert next(slow_epoch)[0][0] == 1 and next(fast_epoch)[0][0] == 0
    assert stop_epoch(store, "r1", "f" * 32, "finetune", 0, list(range(8))) == 6  # the driver will not wait for it
    assert list(slow_epoch) == [] and list(fast_epoch) == []
    assert trained(make_queue(store, "retry", 1), 0) == []  # nor does a retried task train what was stopped
    assert trained(fast, 1)[:1] == [(0, False)]  # the next epoch is not stopped


def test_a_lone_node_claims_what_it_trains_so_a_retried_task_skips_what_was_finished(store):
    alone = make_queue(store, "alone", 0, slots=[list(range(8))])
    epoch = alone.epoch(0)
    assert [next(epoch)[0][0] for _ in range(3)] == [0, 1, 2]  # 0 and 1 finished; the worker dies training 2
    retry = make_queue(store, "retry", 0, slots=[list(range(8))])
    assert trained(retry, 0) == [(index, False) for index in range(2, 8)]  # nothing stolen, nothing twice
    assert trained(retry, 1) == [(index, False) for index in range(8)]


def test_the_claims_count_the_partitions_of_a_jobs_epochs_trained_or_training(store):
    fast, slow = make_queue(store, "fast", 0), make_queue(store, "slow", 1)
    store_own(fast, slow)
    slow_epoch = slow.epoch(0)
    next(slow_epoch)  # training partition 1
    assert len(trained(fast, 0)) == 7  # its own four, then 7, 5 and 3 of the slow node's
    next(fast.epoch(1))  # and partition 0 of the next epoch
    assert claimed_partitions(store, "r1", "f" * 32, "finetune", range(0, 1)) == 8
    assert claimed_partitions(store, "r1", "f" * 32, "finetune", range(0, 2)) == 9
    assert claimed_partitions(store, "r1", "f" * 32, "rbm0", range(0, 2)) == 0  # another phase: none


def test_the_driver_removes_one_fits_work_folders_or_every_fits(store):
    for fit in ("a" * 32, "b" * 32):
        queue = make_queue(store, "node", 0, fit_id=fit)
        store_own(queue)
        trained(queue, 0)
        store.write_bytes(f"{rounds_folder('r1', fit, 'finetune')}/0000/0/claims/0", b"a sync job's claim")
    store.write_bytes("runs/r1/rounds/rbm0/0123456789ab-0000/0/claims/0", b"of the layout before fits came first")
    store.write_bytes("runs/r1/run.json", b"{}")
    remove_work_folders(store, "r1", "a" * 32)
    assert store.list("runs/r1/blocks") == ["b" * 12] and store.list("runs/r1/claims") == ["b" * 12]
    assert store.list("runs/r1/rounds") == ["b" * 12, "rbm0"]
    remove_work_folders(store, "r1")
    assert store.list("runs/r1") == ["run.json"]


def test_claims_are_only_created_never_replaced_so_a_store_that_cannot_overwrite_loses_no_partition(tmp_path):
    # A gateway that ignores renameoptions=OVERWRITE replaces by DELETE then RENAME: a stealer's exclusive
    # create in that gap would take a partition its owner trains (and the owner's rename then fails).
    with WebHDFSServer(tmp_path / "hdfs", rename_overwrite=False) as server:
        gateway = storage.open_store(server.store_url("/store"), retry_timeout_s=5.0)
        dead, peer = make_queue(gateway, "dead", 1), make_queue(gateway, "peer", 0)
        store_own(dead, peer)
        dead_epoch = dead.epoch(0)
        assert [next(dead_epoch)[0][0] for _ in range(2)] == [1, 3]  # 1 finished; the worker dies training 3
        peer_trained = [index for index, _ in trained(peer, 0)]
        retry_trained = [index for index, _ in trained(make_queue(gateway, "retry", 1), 0)]
        assert sorted([1] + peer_trained + retry_trained) == list(range(8)), (peer_trained, retry_trained)
        assert 3 in retry_trained  # what the dead attempt claimed is trained by its retry, once
        assert claimed_partitions(gateway, "r1", "f" * 32, "finetune", range(1)) == 8
        assert gateway.backend.replaces_atomically is None  # nothing on the claims' path replaced a file


def test_claims_planted_as_folders_are_someone_elses_and_stop_no_node(store):
    # A folder under a claim's or a finished marker's name (planted by whoever can write the store) is no
    # claim this fit's nodes made: the partition is not this node's to train, and not trained.
    fast, slow = make_queue(store, "fast", 0), make_queue(store, "slow", 1)
    store_own(fast, slow)
    folder = f"runs/r1/claims/{'f' * 12}/finetune"
    store.makedirs(f"{folder}/0000-00002")  # partition 2's claim
    store.makedirs(f"{folder}/0000-00004.finished")  # partition 4's marker, with no claim
    assert [index for index, _ in trained(fast, 0)] == [0, 4, 6]  # not 2; 4, whose marker is no marker
    assert trained_by_lost_attempts(store, "r1", "f" * 32, "finetune", 0, [0, 2, 4]) == [0]
