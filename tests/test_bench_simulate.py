"""scripts/bench_simulate.py: the event ordering and the modes' rules of the many-node simulation.

Tiny data and a tiny DBN, rule ``"none"`` (factor 1), equal node speeds: every check is exact
arithmetic on known inputs, no timing.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from support.scripts import script_module

import rbm
from node.modes._sharing import ThresholdAccumulator

NODES, PARTITIONS_PER_NODE, SEED = 4, 2, 3


@pytest.fixture(scope="module")
def bench():
    with script_module("bench_simulate.py") as module:
        yield module


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    X = rng.random((80, 12)).astype(np.float32)  # 4 nodes x 2 partitions x 10 rows: equal partitions
    y = rng.integers(0, 3, size=80)
    base = rbm.DBN((6,), batch_size=5, random_state=0)
    base.initialize(12, 3)
    return base, X, y


def run(bench, problem, mode: str, fanout=None, delay_s: float = 0.0):
    base, X, y = problem
    clock = bench.Clock(rate=1000.0, delay_s=delay_s, speed_sigma=0.0, jitter_sigma=0.0)
    return bench.simulate(base, X, y, X, y, nodes=NODES, mode=mode, fanout=fanout, epochs=1,
                          partitions_per_node=PARTITIONS_PER_NODE, clock=clock, seed=SEED, scale_rule="none",
                          evaluate=False)


def by_hand(bench, problem, average_after_first: bool) -> list[dict]:
    """Each node trains its first partition, (all average), each trains its second: the nodes' weights."""
    base, X, y = problem
    parts = bench.node_partitions(len(X), NODES, PARTITIONS_PER_NODE, np.random.default_rng([SEED, NODES]))
    replicas = [copy.deepcopy(base) for _ in range(NODES)]
    for index in range(PARTITIONS_PER_NODE):
        if index == 1 and average_after_first:
            mean = bench._mean([r.parameters("finetune") for r in replicas])
            for replica in replicas:
                replica.set_parameters(mean)
        for i, replica in enumerate(replicas):
            rows = parts[i][index]
            replica.set_schedule_epoch(0)  # one epoch: both partitions in the schedules' epoch 0, as the trainer
            replica.set_schedule_plan(1, index / PARTITIONS_PER_NODE, 1 / PARTITIONS_PER_NODE)  # its place in the plan
            replica.train_partition(X[rows], y[rows], "finetune", np.random.default_rng([SEED, i, index]))
    return [r.parameters("finetune") for r in replicas]


def assert_params_close(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for name in got:
        np.testing.assert_allclose(got[name], expected[name], rtol=0, atol=1e-6, err_msg=name)


def test_async_all_to_all_without_delay_merges_to_the_average_of_the_last_round(bench, problem):
    curve, params = run(bench, problem, "async")
    expected = by_hand(bench, problem, average_after_first=True)
    for got, want in zip(params, expected):
        assert_params_close(got, want)
    assert curve.reads == NODES * (NODES - 1)  # every node merged every peer once, before its second partition


def test_sync_averages_every_round_exactly_as_by_hand(bench, problem):
    _curve, params = run(bench, problem, "sync")
    expected = bench._mean(by_hand(bench, problem, average_after_first=True))
    for got in params:
        assert_params_close(got, expected)


def test_async_merges_nothing_while_no_announcement_has_arrived(bench, problem):
    curve, params = run(bench, problem, "async", delay_s=1e6)
    assert curve.reads == 0
    for got, want in zip(params, by_hand(bench, problem, average_after_first=False)):
        assert_params_close(got, want)


def test_async_merges_at_most_fanout_peers(bench, problem):
    curve, _params = run(bench, problem, "async", fanout=2)
    assert curve.reads == NODES * 2


def test_sharing_applies_every_peer_update_once(bench, problem):
    curve, _params = run(bench, problem, "sharing")
    assert curve.reads == NODES * (NODES - 1)  # each node's first update, applied by every peer before its second


def test_summed_sparse_updates_equal_the_real_modes_apply_to_one_after_another(bench):
    rng = np.random.default_rng(1)
    shapes = {"W": (7, 5), "b": (5,)}
    accumulator = ThresholdAccumulator(0.05, 0.2)
    updates = [accumulator.add({name: rng.normal(0, 0.1, shape).astype(np.float32) for name, shape in shapes.items()})
               for _ in range(4)]
    one_by_one = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
    for update in updates:
        update.apply_to(one_by_one)
    summed = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
    bench._sparse_sum([bench._as_indices(update) for update in updates], summed)
    assert_params_close(summed, one_by_one)
    assert any(np.count_nonzero(value) for value in summed.values())


def test_fanouts_at_or_above_the_peer_count_are_left_to_all_to_all(bench):
    assert bench.configurations(8, [2, 4, 8]) == [("async", 2), ("async", 4), ("async", None), ("sync", None),
                                                  ("sharing", None)]


def test_sync_with_the_outer_step_is_diloco_every_round_from_the_same_anchor(bench, problem):
    import actors

    base, X, y = problem
    clock = bench.Clock(rate=1000.0, delay_s=0.0, speed_sigma=0.0, jitter_sigma=0.0)
    _curve, params = bench.simulate(base, X, y, X, y, nodes=NODES, mode="sync", fanout=None, epochs=1,
                                    partitions_per_node=PARTITIONS_PER_NODE, clock=clock, seed=SEED, scale_rule="none",
                                    evaluate=False, outer_learning_rate=0.7, outer_momentum=0.8)
    # By hand: each round every node trains its partition, all average, then one outer step from the anchor.
    parts = bench.node_partitions(len(X), NODES, PARTITIONS_PER_NODE, np.random.default_rng([SEED, NODES]))
    replicas = [copy.deepcopy(base) for _ in range(NODES)]
    state = actors.OuterState.start(base.parameters("finetune"))
    for index in range(PARTITIONS_PER_NODE):
        for i, replica in enumerate(replicas):
            replica.set_schedule_epoch(0)
            replica.set_schedule_plan(1, index / PARTITIONS_PER_NODE, 1 / PARTITIONS_PER_NODE)
            replica.train_partition(X[parts[i][index]], y[parts[i][index]], "finetune",
                                    np.random.default_rng([SEED, i, index]))
        stepped, state = actors.outer_step(state, bench._mean([r.parameters("finetune") for r in replicas]), 0.7, 0.8)
        for replica in replicas:
            replica.set_parameters(stepped)
    for got in params:
        assert_params_close(got, stepped)
    plain = bench._mean(by_hand(bench, problem, average_after_first=True))
    assert not all(np.allclose(params[0][name], plain[name], atol=1e-4) for name in plain)  # the step moved them


# ----------------------------------------------------------------------------- dealing partitions (work stealing)
@pytest.fixture(scope="module")
def queues():
    with script_module("_simulate_queue.py") as module:
        yield module


def test_a_free_node_takes_its_own_partitions_first_then_a_slower_peers_from_the_end_of_its_list(queues):
    queue = queues.PartitionQueue(2, 4, 1)
    assert queue.take(1) == (0, 1, 0)  # node 1 is slow: it trains its first partition all along
    assert [queue.take(0) for _ in range(6)] == [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 1, 3), (0, 1, 2)]
    assert queue.take(1) == (0, 1, 1)  # the owner keeps the front of its list
    assert queue.take(0) is None and queue.take(1) is None


def test_a_peer_still_busy_with_the_epoch_before_keeps_the_first_partition_of_its_list(queues):
    queue = queues.PartitionQueue(2, 3, 2)
    assert [queue.take(0) for _ in range(3)] == [(0, 0, 0), (0, 0, 1), (0, 0, 2)]
    assert queue.take(1) == (0, 1, 0)
    assert [queue.take(0) for _ in range(2)] == [(0, 1, 2), (0, 1, 1)]  # the rest of node 1's epoch 0
    for _ in range(5):
        queue.finished(0)  # all of epoch 0 but node 1's partition
    assert [queue.take(0) for _ in range(3)] == [(1, 0, 0), (1, 0, 1), (1, 0, 2)]  # its own epoch 1 ...
    assert [queue.take(0) for _ in range(3)] == [(1, 1, 2), (1, 1, 1), None]  # ... then node 1's but its first


def test_async_starts_an_epoch_only_once_every_partition_of_the_one_before_the_last_is_finished(queues):
    queue = queues.PartitionQueue(2, 1, 3)  # one partition per node and epoch
    assert queue.take(1) == (0, 1, 0)  # node 1 is slow: its partition of epoch 0 stays unfinished
    assert queue.take(0) == (0, 0, 0)
    queue.finished(0)
    assert queue.take(0) == (1, 0, 0)  # epoch 1's job is queued behind epoch 0's
    queue.finished(1)
    assert queue.take(0) is None and queue.epoch[0] == 2  # node 1 keeps epoch 1's partition; epoch 2 waits ...
    queue.finished(0)  # ... for node 1's partition of epoch 0 to end
    assert queue.take(0) == (2, 0, 0)
    sharing = queues.PartitionQueue(2, 1, 3, ahead=None)  # one job for the phase: never waits
    sharing.take(1)
    assert [sharing.take(0) for _ in range(4)] == [(0, 0, 0), (1, 0, 0), (2, 0, 0), None]


def test_without_stealing_every_node_trains_its_own_list_epoch_after_epoch_and_never_waits(queues):
    queue = queues.PartitionQueue(2, 2, 3, stealing=False)
    assert [queue.take(0) for _ in range(7)] == [(e, 0, i) for e in range(3) for i in range(2)] + [None]


def test_with_a_straggler_every_partition_is_trained_once_and_the_fast_nodes_take_the_stragglers(bench, problem):
    base, X, y = problem
    clock = bench.Clock(rate=1000.0, delay_s=0.0, speed_sigma=0.0, jitter_sigma=0.0, straggler=5.0)
    results = {}
    for stealing in (True, False):
        curve, _params = bench.simulate(base, X, y, X, y, nodes=NODES, mode="async", fanout=None, epochs=2,
                                        partitions_per_node=PARTITIONS_PER_NODE, clock=clock, seed=SEED,
                                        scale_rule="none", evaluate=False, stealing=stealing)
        results[stealing] = curve
    # Each run trained every row of both epochs once; with stealing the straggler (node 0) trained fewer partitions.
    assert results[True].rows_trained == results[False].rows_trained == 2 * len(X)
    by_node = {stealing: curve.partitions_by_node for stealing, curve in results.items()}
    assert by_node[False] == [2 * PARTITIONS_PER_NODE] * NODES
    assert sum(by_node[True]) == 2 * PARTITIONS_PER_NODE * NODES and by_node[True][0] < 2 * PARTITIONS_PER_NODE


def test_async_nodes_also_merge_between_minibatches_what_arrived_while_they_train_up_to_the_fanout(bench, problem):
    base, X, y = problem
    clock = bench.Clock(rate=1000.0, speed_sigma=0.0, jitter_sigma=0.0, straggler=10.0)  # node 0 trains 10x slower

    def reads(**options):
        curve, params = bench.simulate(base, X, y, X, y, nodes=2, mode="async", epochs=2, partitions_per_node=4,
                                       clock=clock, seed=SEED, scale_rule="none", evaluate=False, **options)
        return curve.reads, params

    before_only, params_before = reads(fanout=None, minibatch_merges=False)
    between, params_between = reads(fanout=None)
    # Node 1 publishes several versions while node 0 trains one partition: node 0 merges some of them
    # between its minibatches, not only the newest one before its next partition.
    assert between > before_only
    assert any(not np.allclose(params_between[0][name], params_before[0][name]) for name in params_before[0])
    with_fanout, _ = reads(fanout=1)  # one peer in all per partition: as many merges as without merging between
    assert with_fanout <= 2 * 4 * 2 and with_fanout <= between


def test_nodes_sharing_one_core_train_one_partition_at_a_time(bench, problem):
    base, X, y = problem
    clock = bench.Clock(rate=1000.0, delay_s=0.0, speed_sigma=0.0, jitter_sigma=0.0, cores=1)
    curve, _params = bench.simulate(base, X, y, X, y, nodes=NODES, mode="async", fanout=None, epochs=1,
                                    partitions_per_node=PARTITIONS_PER_NODE, clock=clock, seed=SEED, scale_rule="none",
                                    evaluate=False, minibatch_merges=False)
    # One after the other: the last ends after every partition's compute (10 rows at 1000/s) and write, and
    # every snapshot read before a partition -- nobody trains while another does.
    partitions = NODES * PARTITIONS_PER_NODE
    assert curve.end_s == pytest.approx(partitions * (0.010 + clock.write_s) + curve.reads * clock.read_s, rel=1e-9)
    alone = bench.Clock(rate=1000.0, delay_s=0.0, speed_sigma=0.0, jitter_sigma=0.0)
    parallel, _ = bench.simulate(base, X, y, X, y, nodes=NODES, mode="async", fanout=None, epochs=1,
                                 partitions_per_node=PARTITIONS_PER_NODE, clock=alone, seed=SEED, scale_rule="none",
                                 evaluate=False)
    assert parallel.end_s < curve.end_s / 2


@pytest.fixture(scope="module")
def reporting():
    with script_module("_simulate_report.py") as module:
        yield module


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_a_run_whose_training_diverges_ends_there_and_the_table_counts_it_apart(bench, reporting, problem):
    base, X, y = problem
    exploding = copy.deepcopy(base).set_params(finetune_learning_rate=1e38)  # the first step overflows
    clock = bench.Clock(rate=1000.0, speed_sigma=0.0, jitter_sigma=0.0)
    with pytest.raises(bench.SimulationDiverged) as stopped:
        bench.simulate(exploding, X, y, X, y, nodes=NODES, mode="async", fanout=None, epochs=1,
                       partitions_per_node=PARTITIONS_PER_NODE, clock=clock, seed=SEED, scale_rule="none")
    diverged = stopped.value.curve
    assert diverged.diverged.startswith("node ") and "epoch 0" in diverged.diverged and "NaN or Inf" in diverged.diverged
    diverged.parts = PARTITIONS_PER_NODE
    fine = [run_with_evaluation(bench, problem, seed) for seed in (0, 1)]
    one = [bench.Curve("1 node", 1, samples=[80], time_s=[1.0], accuracy=[0.5]) for _ in range(3)]
    rows = reporting.equal_epochs_rows({(1, "1 node"): one, (NODES, fine[0].label): [fine[0], diverged, fine[1]]},
                                       [NODES], 1, len(X))
    # The mean is over the two runs that finished; the diverged one is counted apart, and never reaches.
    assert rows[1][3] == pytest.approx(np.mean([fine[0].accuracy[-1], fine[1].accuracy[-1]]), abs=1e-12)
    assert rows[1][9] == "1/3" and rows[0][9] == "0/3"
    assert rows[1][7].endswith("/3") and int(rows[1][7].split("/")[0]) <= 2


def run_with_evaluation(bench, problem, seed: int):
    base, X, y = problem
    clock = bench.Clock(rate=1000.0, speed_sigma=0.0, jitter_sigma=0.0)
    curve, _ = bench.simulate(base, X, y, X, y, nodes=NODES, mode="async", fanout=None, epochs=1,
                              partitions_per_node=PARTITIONS_PER_NODE, clock=clock, seed=seed, scale_rule="none")
    curve.parts = PARTITIONS_PER_NODE
    return curve


def test_the_default_outer_step_is_the_rule_a_fit_takes_for_the_nodes_and_rows(bench, problem):
    base, X, _ = problem
    assert bench.outer_settings("default") is bench.RULE_OUTER and bench.outer_settings("0.7/0.8") == (0.7, 0.8)
    # 80 rows in minibatches of 5 under "none" (factor 1): 4 nodes leave the gain 3.5 (capped), 2 nodes 2.
    assert bench.rule_outer(base, 4, len(X), "none") == pytest.approx((0.5420, 0.8452), abs=1e-4)
    assert bench.rule_outer(base, 2, len(X), "none") == pytest.approx((0.5858, 0.7071), abs=1e-4)
    assert bench.rule_outer(base, 4, len(X), "linear") == (1.0, 0.0)  # the rates take the factor 4: plain merging
    lone_rbm = rbm.RBM(4, batch_size=5, random_state=0).initialize(12)  # an RBM's phase merges plainly
    assert bench.rule_outer(lone_rbm, 4, len(X), "none") == (1.0, 0.0)


def test_nodes_whose_minibatch_is_split_run_once_with_plain_merging_as_they_take_no_outer_step(bench, problem):
    base, X, _ = problem
    steps = [(1.0, 0.0), bench.RULE_OUTER, (0.7, 0.8)]
    # 80 rows in minibatches of 5 under "auto": 4 nodes keep 5 (the rates take the factor: the rule's step is
    # plain merging), 8 nodes train minibatches of 3 and, as the executor, take no step: one run, not three alike.
    assert bench.simulated_node_batch(base, "async", 4, len(X), "auto") == 5
    assert bench.outer_steps(steps, base, 4, len(X), "async", "auto") == [(1.0, 0.0), (0.7, 0.8)]
    assert bench.simulated_node_batch(base, "async", 8, len(X), "auto") == 3
    assert bench.outer_steps(steps, base, 8, len(X), "async", "auto") == [(1.0, 0.0)]
    assert bench.outer_steps(steps, base, 4, len(X), "sharing", "auto") == [(1.0, 0.0)]
