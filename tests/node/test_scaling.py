"""The learning-rate scaling rule: what factor a node trains with for ``k`` merging nodes."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest

import rbm
from node._contract import NodeConfig, SyncOptions, TaskSpec
from node.executor._node import ExecutorNode
from node.driver._progress import small_partition_warning, summary_line
from node.modes._registry import mode_named
from node.data import PreparedData
from node.driver._node_config import _node_batch_size, node_config
from node.modes._scaling import (MAX_OUTER_GAIN, MAX_RATE_FACTOR, STEP_LIMITED_STEPS, NodeScaling, default_partitions,
                           default_warmup_partitions, learning_rate_scale, max_learning_rate_factor, node_batch_size,
                           outer_gain, resolve_rule, scale_target, schedule_epoch, schedule_place)
from node.driver._settings import TrainingSettings


def test_after_the_warm_up_the_linear_rule_multiplies_by_the_nodes_and_sqrt_by_their_root():
    assert [learning_rate_scale("linear", n, partitions_done=5, warmup_partitions=2) for n in (1, 2, 8)] == [1, 2, 8]
    assert learning_rate_scale("sqrt", 8, partitions_done=5, warmup_partitions=2) == pytest.approx(math.sqrt(8))
    assert learning_rate_scale("none", 8, partitions_done=5) == 1.0


def test_auto_scales_only_the_step_limited_share_of_the_nodes_progress():
    # 1,347 digits in minibatches of 10 on 8 nodes: 17 steps per node and epoch, the full factor;
    # 36k digits28 rows on 8 nodes: 450 steps, averaging alone keeps one node's accuracy: no factor.
    assert scale_target("linear", 8, steps_per_node_epoch=17) == 8.0
    assert scale_target("linear", 8, steps_per_node_epoch=450) == 1.0
    assert scale_target("linear", 8, steps_per_node_epoch=STEP_LIMITED_STEPS / 2.5) == pytest.approx(2.5)
    assert scale_target("sqrt", 8, steps_per_node_epoch=STEP_LIMITED_STEPS / 4) == pytest.approx(2.0)
    spec = rbm.RBM(4, batch_size=10).to_spec()
    for rows, expected in ((1347, 8.0), (36_000, 1.0)):
        scaling = NodeScaling("auto", spec, warmup_partitions=0, n_samples=rows)
        scaling.enter_phase("rbm")
        scaling.merged([f"peer{k}" for k in range(7)])
        assert scaling.scale() == expected
    linear = NodeScaling("linear", spec, warmup_partitions=0, n_samples=36_000)  # "linear" always scales fully
    linear.enter_phase("rbm")
    linear.merged([f"peer{k}" for k in range(7)])
    assert linear.scale() == 8.0


def test_the_outer_steps_gain_is_what_the_rates_factor_leaves_to_the_nodes_at_most_three_and_a_half():
    assert MAX_OUTER_GAIN == 3.5
    # 36k digits28 rows in minibatches of 64 (LeNet): 4 nodes take 140 steps, the factor 200 / 140 =
    # 1.42, the gain 4 / 1.42 = 2.81; on 2 nodes the factor is 1, the gain 2.  In minibatches of 10
    # (the DBN(128, 128)) the factor is 1 up to 16 nodes: 3.5, capped.
    assert outer_gain("auto", 4, 35_950, 64) == pytest.approx(4 * 140.4296875 / 200)
    assert outer_gain("auto", 2, 35_950, 64) == 2.0
    assert [outer_gain("auto", n, 35_950, 10) for n in (2, 4, 16)] == [2.0, 3.5, 3.5]
    # Few steps per node (1,347 digits): the rates take the whole factor, the gain is 1 (plain merging).
    assert [outer_gain("auto", n, 1347, 10) for n in (2, 4, 8)] == [1.0, 1.0, 1.0]
    # Each rule's own factor: linear n (1), sqrt sqrt(n), none 1; one node, no rows or no minibatch: 1.
    assert outer_gain("linear", 8, 35_950, 10) == 1.0 and outer_gain("none", 2, 1347, 10) == 2.0
    assert outer_gain("sqrt", 4, 1347, 10) == pytest.approx(2.0)
    assert outer_gain("none", 1, 1347, 10) == outer_gain("auto", 8, 0, 10) == outer_gain("auto", 8, 1347, None) == 1.0


def test_auto_takes_at_most_four_of_the_factor_as_learning_rate_and_the_rest_as_a_smaller_minibatch():
    assert MAX_RATE_FACTOR == 4.0
    # 1,347 digits in minibatches of 10: 8 nodes (factor 8) train with 5 rows a step, 16 (factor 16)
    # with 3 (2.5 rounded up), 64 with 1; 4 nodes (factor 4), 2 and 1 keep 10.
    assert [node_batch_size("auto", 10, n, 1347) for n in (1, 2, 4, 8, 16, 64)] == [10, 10, 10, 5, 3, 1]
    # Many steps per node (factor 1: DBN(128, 128) on digits28, 16 nodes) or LeNet's 2.9 on 8: the model's own.
    assert node_batch_size("auto", 10, 16, 35_950) == 10 and node_batch_size("auto", 64, 8, 35_950) == 64
    # Only "auto" splits; a model without a minibatch, or rows unknown, keeps what it has.
    assert node_batch_size("linear", 10, 8, 1347) == 10 and node_batch_size("none", 10, 8, 1347) == 10
    assert node_batch_size("auto", None, 8, 1347) is None and node_batch_size("auto", 10, 8, None) == 10
    # The modes that average take the split; sharing adds its peers' updates and keeps the model's rates.
    settings = TrainingSettings()
    assert [mode_named(mode).node_batch_size(settings, 8, 1347, 10) for mode in ("async", "sync", "sharing")] == [5, 5, 10]


def test_a_model_that_limits_its_rates_factor_takes_the_rest_as_a_smaller_minibatch_persistent_chains_all_of_it():
    # An RBM's persistent chains follow the model only while each update changes it little: its rates
    # take none of the factor (the rest of a 4-node factor 4, or of 8 nodes' 8, comes as minibatches).
    pcd, cd = rbm.RBM(persistent=True, batch_size=10), rbm.RBM(persistent=False, batch_size=10)
    assert max_learning_rate_factor(pcd) == 1.0 and max_learning_rate_factor(cd) is None
    assert max_learning_rate_factor(rbm.DBN()) is None and max_learning_rate_factor(object()) is None
    assert [node_batch_size("auto", 10, n, 1347, 1.0) for n in (1, 2, 4, 8, 16)] == [10, 5, 3, 1, 1]
    assert [node_batch_size("auto", 10, n, 1347, 2.0) for n in (1, 2, 4, 8, 16)] == [10, 10, 5, 3, 1]
    assert node_batch_size("auto", 10, 8, 1347, 16.0) == 5  # a model's limit never raises the trainer's cap
    # What the driver tells the nodes (0: the model's own minibatch).
    def told(model, nodes):
        return _node_batch_size(TrainingSettings(), model.to_spec(), nodes, 1347, max_learning_rate_factor(model))

    assert told(pcd, 8) == 1
    assert told(cd, 8) == 5
    assert told(pcd, 1) == 0


def test_where_even_one_row_leaves_the_rates_more_than_their_cap_the_rest_of_the_factor_is_dropped():
    # 1,347 digits on 64 nodes (factor 64): minibatches of 1 of the model's 10 leave the rates x6.4 without the cap
    # (0.20 accuracy in scripts/bench_simulate.py); the rates take the cap, 4, or a model's own lower one.
    after = {"partitions_done": 5, "warmup_partitions": 2}
    assert learning_rate_scale("linear", 64, **after, batch_ratio=0.1) == pytest.approx(6.4)
    assert learning_rate_scale("linear", 64, **after, batch_ratio=0.1, rates_cap=4.0) == 4.0
    assert learning_rate_scale("linear", 16, **after, batch_ratio=0.1, rates_cap=1.0) == 1.0  # persistent chains
    assert learning_rate_scale("linear", 8, **after, batch_ratio=0.5, rates_cap=4.0) == 4.0  # at the cap: unchanged
    assert learning_rate_scale("linear", 8, **after, rates_cap=4.0) == 8.0  # no split (the "linear" rule): no cap
    ramp = [learning_rate_scale("linear", 64, partitions_done=k, warmup_partitions=3, batch_ratio=0.1, rates_cap=4.0)
            for k in range(5)]
    assert ramp == pytest.approx([1.75, 2.5, 3.25, 4.0, 4.0])  # the warm-up ramps up to the cap
    # The driver tells the nodes the cap, the executor's scaling takes it.
    spec, prepared = rbm.RBM(4, batch_size=10).to_spec(), _prepared(1347)
    session = {"master": "local[2]", "driver_host": "127.0.0.1"}
    told = node_config(TrainingSettings(), prepared, spec, run="r", fit_id="f", store_url="file:///tmp", key=b"k",
                       nodes=64, **session, max_rate_factor=None)
    assert (told.node_batch_size, told.rates_cap) == (1, 4.0)
    pcd = node_config(TrainingSettings(), prepared, rbm.RBM(4, batch_size=10, persistent=True).to_spec(), run="r",
                      fit_id="f", store_url="file:///tmp", key=b"k", nodes=16, **session, max_rate_factor=1.0)
    assert (pcd.node_batch_size, pcd.rates_cap) == (1, 1.0)
    scaling = ExecutorNode(dataclasses.replace(_config(spec=spec, n_samples=1347, nodes=64), node_batch_size=1,
                                               rates_cap=told.rates_cap)).scaling
    scaling.enter_phase("rbm")
    for _ in range(3):
        scaling.merged([f"peer{k}" for k in range(63)])
        scaling.trained()
    assert scaling.scale() == 4.0


def _prepared(rows: int) -> PreparedData:
    return PreparedData(n_samples=rows, feature_shape=(4,), classes=None, partitions=2, rows_per_partition=[rows // 2,
                        rows - rows // 2], source="arrays", summaries=[], held=None)


def test_a_node_with_half_the_minibatch_takes_half_the_factor_as_learning_rate():
    spec = rbm.RBM(4, batch_size=10).to_spec()
    scaling = NodeScaling("auto", spec, warmup_partitions=1, n_samples=1347, node_batch=5)
    scaling.enter_phase("rbm")
    scaling.merged([])
    assert scaling.scale() == pytest.approx(0.5)  # alone: twice the steps at half the rate, one node's progress
    scaling.trained()
    scaling.merged([f"peer{k}" for k in range(7)])
    assert scaling.scale() == pytest.approx(4.0)  # 8 nodes: the factor 8 = rates x4 and twice the steps


def test_the_warm_up_ramps_the_factor_linearly_from_one_at_each_phase_start():
    ramp = [learning_rate_scale("linear", 7, partitions_done=k, warmup_partitions=3) for k in range(5)]
    assert ramp == pytest.approx([2.5, 4.0, 5.5, 7.0, 7.0])


def test_with_a_smaller_minibatch_the_warm_up_ramps_the_rates_from_the_models_own_step_and_never_below_it():
    # 8 nodes in minibatches of 5 of the model's 10: the rates' factor 4 ramps up from 1 (not from 0.5)
    ramp = [learning_rate_scale("linear", 8, partitions_done=k, warmup_partitions=3, batch_ratio=0.5) for k in range(5)]
    assert ramp == pytest.approx([1.75, 2.5, 3.25, 4.0, 4.0])
    # minibatches of 1 of 10 (persistent chains): the rates' factor 0.8 is no larger step than the model's: no ramp
    flat = [learning_rate_scale("linear", 8, partitions_done=k, warmup_partitions=3, batch_ratio=0.1) for k in range(5)]
    assert flat == pytest.approx([0.8] * 5)


def test_auto_is_the_linear_rule_for_every_updater_and_unknown_rules_are_refused():
    assert [resolve_rule(rule) for rule in ("auto", "linear", "sqrt", "none")] == ["linear", "linear", "sqrt", "none"]
    with pytest.raises(ValueError, match="scale_rule must be one of"):
        resolve_rule("cubic")


def test_nodes_merging_are_the_distinct_recent_peers_plus_itself_at_most_fanout_plus_one_and_the_fits_nodes():
    scaling = NodeScaling("linear", rbm.RBM(4).to_spec(), warmup_partitions=0)
    scaling.enter_phase("rbm")
    assert scaling.nodes() == 1
    for peers in (["a", "b"], ["b", "c"], []):
        scaling.merged(peers)
        scaling.trained()
    assert scaling.nodes() == 4 and scaling.scale() == 4.0
    for _ in range(4):  # peers not merged in the last PEER_WINDOW partitions stop counting
        scaling.merged(["a"])
    assert scaling.nodes() == 2
    scaling.enter_phase("rbm")  # the same phase: nothing is forgotten
    assert scaling.nodes() == 2
    capped = NodeScaling("linear", rbm.RBM(4).to_spec(), warmup_partitions=0, fanout=2)
    capped.enter_phase("rbm")
    capped.merged(["a", "b", "c", "d"])
    assert capped.nodes() == 3
    two_slots = NodeScaling("linear", rbm.RBM(4).to_spec(), warmup_partitions=0, fit_nodes=2)
    two_slots.enter_phase("rbm")
    two_slots.merged(["a", "b", "c"])  # four Python workers have been nodes of a fit of two tasks per job
    assert two_slots.nodes() == 2 and two_slots.scale() == 2.0


def _config(**overrides) -> NodeConfig:
    fields = dict(run="r", fit_id="f", store_url="file:///nowhere", store_retry_timeout_s=1.0, key=b"k" * 32,
                  spec=rbm.RBM(4).to_spec(), feature_shape=(6,), classes=None, seed=0, fanout=None,
                  merge_alpha=None, keep_versions=1, anti_entropy_interval_s=1.0, peer_refresh_interval_s=1.0,
                  flush_timeout_s=1.0)
    return NodeConfig(**{**fields, **overrides})


@pytest.mark.parametrize("rule, expected", [("auto", [1.0, 1 + 7 * 2 / 3, 8.0]),
                                            ("sqrt", [1.0, 1 + (8**0.5 - 1) * 2 / 3, 8**0.5]),
                                            ("none", [1.0, 1.0, 1.0])])
def test_the_executor_trains_each_partition_with_the_factor_of_the_nodes_it_merged(rule, expected):
    config = _config(scale_rule=rule, warmup_partitions=2)
    node = ExecutorNode(config)  # not started: no store, no actor; only the training half is used
    node.model = rbm.model_from_spec(config.spec).initialize(6)
    node.scaling.enter_phase("rbm")
    task = TaskSpec(node=config, mode="async", phase="rbm", phase_index=0, epoch=0, start_digest="digest")
    X = np.random.default_rng(0).random((20, 6)).astype(np.float32)
    seen = []
    for peers in ([], [f"peer{k}" for k in range(7)], ["peer0"]):
        node.train(task, 0, X, None, merged_from=peers)
        seen.append(node.model._learning_rate_scale)
    # Nothing merged yet: 1 node.  Then 8 nodes, warming up (2nd of 2 partitions), then 8 nodes.
    assert seen == pytest.approx(expected)
    assert node.learning_rate_scale == pytest.approx(expected[-1])


def test_a_started_node_trains_its_replica_in_the_fits_node_minibatch(tmp_path):
    config = _config(store_url=f"file://{tmp_path}", spec=rbm.RBM(4, batch_size=10).to_spec(), n_samples=1347, nodes=8,
                     node_batch_size=5)
    node = ExecutorNode(config).start()
    try:
        assert node.model.batch_size == 5
        steps = []
        node.model.set_minibatch_hook(lambda: steps.append(1))
        node.scaling.enter_phase("rbm")
        task = TaskSpec(node=config, mode="async", phase="rbm", phase_index=0, epoch=0, start_digest="digest")
        node.train(task, 0, np.random.default_rng(0).random((20, 6)).astype(np.float32), None)
        assert len(steps) == 4  # 20 rows in minibatches of 5
        assert node.model.n_chains == 10  # an RBM's persistent chains stay the fit's: its batch_size
        assert node.model.h_samples_.shape == (10, 4)
    finally:
        node.stop()
    assert ExecutorNode(_config(spec=rbm.RBM(4, batch_size=10).to_spec())).scaling.batch_ratio == 1.0  # 0: the spec's


@pytest.mark.parametrize("rule, factor", [("auto", 8.0), ("none", 1.0)])
def test_the_executor_sets_the_models_schedules_to_the_epoch_times_the_factor(rule, factor):
    # Counted per partition, the schedules would stand at 4 partitions x 3 epochs here; they stand at
    # epoch 3 on one node, 3 x 8 on 8 (node.modes._scaling.schedule_epoch).
    config = _config(scale_rule=rule, warmup_partitions=0)
    node = ExecutorNode(config)
    node.model = rbm.model_from_spec(config.spec).initialize(6)
    node.scaling.enter_phase("rbm")
    X = np.random.default_rng(0).random((20, 6)).astype(np.float32)
    for epoch in range(4):
        task = TaskSpec(node=config, mode="async", phase="rbm", phase_index=0, epoch=epoch, start_digest="digest")
        for partition in range(4):
            node.train(task, partition, X, None, merged_from=[f"peer{k}" for k in range(7)])
            assert node.model._schedule_epoch == pytest.approx(epoch * factor)
    assert schedule_epoch(3, 8.0) == 24.0 and schedule_epoch(3, 1.0) == 3.0


def test_the_executor_places_each_partition_in_the_phases_plan_by_its_slot_and_on_the_fits_epochs():
    # The last of 3 planned epochs, two slots of 4 partitions of 20 rows (minibatches of 5): the DBN anneals its
    # fine-tuning rate over the last half of the plan, from 2/3 of it at the epoch's start to 1/24 on the last
    # minibatch -- at the partition's place in its slot, whoever trains it (7: stolen, at the place of 6), and
    # on the fit's epochs where the decay's clock runs 8 times as fast (8 nodes merging).
    spec = rbm.DBN((4,), batch_size=5, finetune_lr_decay=0.0, finetune_dropout=0.0).to_spec()
    config = _config(spec=spec, classes=(0, 1), scale_rule="auto", warmup_partitions=0)
    node = ExecutorNode(config)
    node.model = rbm.model_from_spec(spec).initialize(6, classes=2)
    node.scaling.enter_phase("finetune")
    rates = []
    node.model.set_minibatch_hook(lambda: rates.append(node.model._updater.learning_rate / node.learning_rate_scale))
    task = TaskSpec(node=config, mode="async", phase="finetune", phase_index=1, epoch=2, start_digest="digest",
                    slots=((0, 2, 4, 6), (1, 3, 5, 7)), planned_epochs=3)
    rng = np.random.default_rng(0)
    X, y = rng.random((20, 6)).astype(np.float32), rng.integers(0, 2, size=20)
    for partition in (0, 2, 4, 6, 7):
        node.train(task, partition, X, y, merged_from=[f"peer{k}" for k in range(7)])
    progress = [2 + position / 4 + step / 16 for position in (0, 1, 2, 3, 3) for step in range(4)]
    np.testing.assert_allclose(rates, [0.1 * (1 - done / 3) / 0.5 for done in progress], rtol=1e-6)
    assert rates[-1] == pytest.approx(0.1 / 24)
    assert node.model._schedule_epoch == pytest.approx(2 * node.learning_rate_scale) and node.learning_rate_scale > 1
    assert node.model._schedule_plan == (3, 2.75, 0.25)
    rates.clear()
    node.train(dataclasses.replace(task, planned_epochs=0), 6, X, y)  # a task without a plan: as before, no anneal
    assert node.model._schedule_plan is None and rates == pytest.approx([0.1] * 4)
    assert schedule_place(2, ((0, 2), (1, 3)), 5) is None  # a partition no slot holds: no place


def test_settings_refuse_an_unknown_rule_and_default_to_auto():
    assert TrainingSettings().scale_rule == "auto"
    with pytest.raises(ValueError, match="scale_rule"):
        TrainingSettings(scale_rule="quadratic").validate()
    with pytest.raises(ValueError, match="warmup_partitions"):
        TrainingSettings(warmup_partitions=-1).validate()


def test_by_default_nodes_merge_eight_times_an_epoch_where_their_rates_are_scaled_by_more_than_two():
    # 1,347 digits in minibatches of 10: 8 nodes take 17 steps each ("auto" factor 8), 4 nodes 34 (4),
    # 2 nodes 67 (2: as often as before, 2 per node); LeNet's 35,950 digits28 rows in 64s on 8 nodes:
    # 70 steps, factor 2.9; 16 nodes on 35,950 rows in 10s: 225 steps, factor 1.
    assert default_partitions("auto", 8, 1347, 10) == 64
    assert default_partitions("auto", 4, 1347, 10) == 32
    assert default_partitions("auto", 2, 1347, 10) == 4
    assert default_partitions("auto", 8, 35_950, 64) == 64
    assert default_partitions("auto", 16, 35_950, 10) == 32
    assert default_partitions("auto", 1, 1347, 10) == 2
    # The rule decides: "none" never scales, "linear" always does, "sqrt" by sqrt(n).
    assert default_partitions("none", 8, 1347, 10) == 16
    assert default_partitions("linear", 8, 35_950, 10) == 64
    assert default_partitions("sqrt", 4, 1347, 10) == 8 and default_partitions("sqrt", 8, 1347, 10) == 64
    # Gossip with a fan-out below the other nodes: as often as before (it merges few peers each time).
    assert default_partitions("auto", 8, 1347, 10, fanout=2) == 16
    assert default_partitions("auto", 8, 1347, 10, fanout=7) == 64
    # Never fewer than a minibatch per partition (beyond the 2 per node); rows unknown: 2 per node.
    assert default_partitions("auto", 8, 400, 10) == 40
    assert default_partitions("auto", 8, 100, 10) == 16
    assert default_partitions("auto", 8, None, 10) == 16 and default_partitions("auto", 8, 1347, None) == 16


@pytest.mark.parametrize("mode, fanout, expected", [("async", None, 64), ("async", 2, 16), ("sync", 2, 64),
                                                    ("sharing", None, 16)])
def test_a_fit_merges_more_often_by_default_only_where_a_merge_averages_every_node_with_a_scaled_rate(
        mode, fanout, expected):
    from node.driver._fit_data import fit_partitions

    # 1,347 digits on 8 nodes: async with no fan-out and sync average all nodes (factor 8); a fan-out
    # of 2 gossips; sharing adds its peers' updates and never scales its rates.
    assert fit_partitions(TrainingSettings(mode=mode, fanout=fanout), 8, 10, np.zeros((1347, 64))) == expected
    assert fit_partitions(TrainingSettings(partitions=5), 8, None, None) == 5


def test_the_default_partitions_count_the_rows_of_every_kind_of_training_data(spark):
    from node.data._prepare import count_rows

    X = np.zeros((37, 3), dtype=np.float32)
    frame = spark.createDataFrame([(row.tolist(), 0.0) for row in X], ["features", "label"])
    assert count_rows(X) == 37 and count_rows(X.tolist()) == 37
    assert count_rows(frame) == 37 and count_rows(frame.rdd) == 37
    assert count_rows("file:///nowhere/dataset") is None  # a staged dataset: its shards are its partitions


def test_by_default_the_warm_up_is_a_nodes_first_epoch_of_each_phase():
    assert default_warmup_partitions(64, 8) == 8
    assert default_warmup_partitions(4, 2) == 2
    assert default_warmup_partitions(5, 2) == 3  # the node with the most partitions
    assert default_warmup_partitions(1, 8) == 1
    assert TrainingSettings().warmup_partitions is None
    TrainingSettings(warmup_partitions=0).validate()  # no warm-up, when asked


def test_the_epoch_summary_warns_when_nodes_take_too_few_steps_per_epoch_and_says_what_to_change():
    small = [{"node": f"n{k % 8}", "samples": 84} for k in range(16)]  # 1,347 digits on 8 nodes, 16 partitions
    warning = small_partition_warning(small, batch_size=10)
    assert "only 17 minibatch steps of 10 per epoch (~168 rows), fewer than 48 steps:" in warning
    assert "partitions=64" in warning and "more epochs" in warning and "fewer nodes" in warning
    staged = small_partition_warning(small, batch_size=10, staged=True)  # its shards are its partitions
    assert "stage the dataset again with --shards 64" in staged and "partitions=" not in staged
    merged_often = [{"node": f"n{k % 8}", "samples": 21} for k in range(64)]
    assert "partitions=" not in small_partition_warning(merged_often, batch_size=10)
    tiny = [{"node": f"n{k % 8}", "samples": 15} for k in range(16)]  # 3 steps per node: 3 partitions of a minibatch
    assert "(partitions=24)" in small_partition_warning(tiny, batch_size=10)
    tinier = [{"node": f"n{k % 8}", "samples": 10} for k in range(16)]  # 2 steps: merging after each already
    assert "partitions=" not in small_partition_warning(tinier, batch_size=10)
    assert small_partition_warning([{"node": f"n{k % 2}", "samples": 337} for k in range(4)], batch_size=10) is None
    assert small_partition_warning([{"node": "n0", "samples": 84}], batch_size=10) is None  # one node: nothing to scale
    summary = {"run": "r", "phase": "rbm0", "epoch": 0, "loss": 0.1, "samples_per_s": 10.0, "merges": 3,
               "staleness_s": None, "nodes": ["a"], "learning_rate_scale": 7.5, "nodes_merging": 8,
               "warning": warning}
    line = summary_line(summary, 3)
    assert "learning rate x7.50 for 8 nodes merging" in line and "WARNING: each of the 8 nodes" in line
    assert "learning rate x3.75 and minibatch 5 for 8 nodes merging" in summary_line(
        {**summary, "learning_rate_scale": 3.75, "node_batch_size": 5}, 3)
    said = summary_line(summary, 3, full_warning=False)  # the epochs after the first that warned
    assert said.endswith("; WARNING: too few minibatch steps per node (said above)") and "each of" not in said


def test_the_command_line_and_a_config_file_set_the_rule(tmp_path):
    from node.cli import _train_inputs, build_parser, load_config

    model = rbm.RBM(4)
    parsed = vars(build_parser().parse_args(["train", "--scale-rule", "none"]))
    assert _train_inputs.training_settings({"scale_rule": parsed["scale_rule"]}, model).scale_rule == "none"
    config = tmp_path / "settings.json"
    config.write_text('{"scale-rule": "sqrt"}')
    assert _train_inputs.training_settings(load_config(str(config)), model).scale_rule == "sqrt"
    assert _train_inputs.training_settings({}, model).scale_rule == "auto"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--scale-rule", "cubic"])


def test_sync_rounds_scale_the_learning_rates_by_the_slots_they_average(monkeypatch):
    from node.modes._sync import SyncMode
    from node.modes._sync_rounds import SyncJob

    config = _config(scale_rule="linear", warmup_partitions=1)
    node = ExecutorNode(config)  # not started: the rounds' store traffic is replaced below
    node.model = rbm.model_from_spec(config.spec).initialize(6)
    node.scaling.enter_phase("rbm")
    node.report = lambda task, work: node.learning_rate_scale
    node.weights = SimpleNamespace(prune=lambda *args: None)
    monkeypatch.setattr(SyncJob, "claim", lambda self, slot: True)
    monkeypatch.setattr(SyncMode, "_publish", lambda self, *args, **kwargs: 0)
    monkeypatch.setattr(SyncMode, "_average", lambda self, *args: ([], 0))
    X = np.random.default_rng(0).random((20, 6)).astype(np.float32)
    task = TaskSpec(node=config, mode="sync", phase="rbm", phase_index=0, epoch=0, start_digest="digest", end_epoch=1,
                    slots=((0, 3), (1, 4), (2, 5)), options=SyncOptions(averaging_frequency=1, barrier_timeout_s=300.0))
    factors = list(SyncMode().train_task(node, task, spark_partition=0, blocks=[(0, X, None), (3, X, None)]))
    assert factors == [2.0, 3.0]  # every round averages the 3 slots: 1 + 2/2 while warming up, then 3
