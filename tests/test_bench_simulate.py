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
