"""Eight real nodes on ``local[8]`` train with the learning rates and partitions the scaling rule gives them.

Measured without the rule (``scale_rule="none"``), the same run reaches 0.19 test accuracy; one
process reaches 0.958, 8 nodes with the defaults 0.929-0.936 (5 runs; 0.924-0.940 with the full
factor as learning rate; ``scripts/bench_scaling.py --spark``, docs/scaling-out.md).  The fits run
in a driver process of their own (``_scaling_driver.py``): the suite's session is ``local[2,4]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from node.modes import schedule_place
from rbm.datasets import load_digits01

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DRIVER_TIMEOUT_S = 900

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def eight_nodes(tmp_path_factory: pytest.TempPathFactory) -> dict:
    store = tmp_path_factory.mktemp("scaling-store")
    config = {"store": f"file://{store}", "runs": ["dbn", "rbm"], "partitions_per_node": None}  # the fit's defaults
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, str(HERE / "_scaling_driver.py"), json.dumps(config)], env=env,
                          capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {**{line["kind"]: line for line in lines}, "log": done.stderr}


def one_process(kind: str):
    """The same model, phases and epochs trained by one process through the same seam (2 partitions)."""
    import _scaling_driver as driver
    import numpy as np

    split = load_digits01(test_fraction=0.25)
    model = driver.make(kind)
    model.initialize(split.X_train.shape[1], None if kind == "rbm" else np.unique(split.y_train))
    epochs = driver.DBN_EPOCHS if kind == "dbn" else driver.RBM_EPOCHS
    parts = np.array_split(np.random.default_rng(0).permutation(len(split.X_train)), 2)
    for phase_index, phase in enumerate(model.phases()):
        for epoch in range(epochs[phase]):
            model.set_schedule_epoch(epoch)  # as the trainer does
            for index, rows in enumerate(parts):
                model.set_schedule_plan(epochs[phase], *schedule_place(epoch, [[0, 1]], index))
                model.train_partition(split.X_train[rows], None if kind == "rbm" else split.y_train[rows], phase,
                                      np.random.default_rng([0, phase_index, epoch, index]))
    return model, split


def one_process_accuracy() -> float:
    model, split = one_process("dbn")
    return model.score(split.X_test, split.y_test)


def test_eight_nodes_see_each_other_merging_and_take_the_factor_eight_as_rates_times_four_and_half_the_minibatch(
        eight_nodes):
    run = eight_nodes["dbn"]
    assert run["partitions"] == 64  # by default 8 per node, as the factor is above 2
    assert len(run["nodes"]) == 8
    assert run["max_nodes_merging"] == 8
    # 1,347 rows / (8 nodes x 10) = 17 steps: the full factor 8, past the rates' share of 4: minibatches of 5
    assert run["max_scale"] == pytest.approx(4.0)


def test_the_run_record_keeps_the_rule_and_each_epochs_factor_and_nodes(eight_nodes):
    run = eight_nodes["dbn"]
    assert run["settings_rule"] == "auto"
    assert sorted(run["recorded"]) == ["finetune", "rbm0", "rbm1"]
    finetune = run["recorded"]["finetune"]
    assert sorted(finetune, key=int) == [str(epoch) for epoch in range(10)]
    assert {entry["rule"] for entry in finetune.values()} == {"auto"}
    assert {entry["warmup_partitions"] for entry in finetune.values()} == {8}  # a node's first epoch
    # The epoch's mean factor: 4 for a node that merged all 7 peers in its last partitions, 3.5 for one that
    # merged 6 -- as a node may that starts the epoch while others finish the one before (3.65-4.0 in 5 runs
    # alone; 3.17 once in the full suite on 2 cores, where the eight nodes took turns longer). A rule undone
    # gives 1, the full factor 8.
    assert finetune["9"]["nodes_merging"] == 8 and 3.0 < finetune["9"]["learning_rate_scale"] <= 4.0
    assert {entry["node_batch_size"] for entry in finetune.values()} == {5}


def test_a_dbn_on_eight_nodes_keeps_most_of_one_process_accuracy_at_the_same_epochs(eight_nodes):
    # Measured: one process 0.958 (its schedules on epochs, as fit); 8 nodes with the defaults 0.929-0.936
    # in 5 runs, the factor 8 as rates x4 and minibatches of 5 (as rates x8: 0.924-0.940 in 6 runs;
    # eight asynchronous nodes on 2 cores merge as the scheduler runs them); before the
    # schedules' clock, one process 0.949 (its 2 partitions an epoch decayed its rate twice as fast),
    # 8 nodes 0.920-0.938, once below 0.916 in 9 runs; with the clock at the epoch alone (not scaled)
    # 0.876-0.942 in about 20; with 2 partitions per node and a warm-up of 2 partitions 0.871-0.913;
    # with no rule 0.191.
    reference = one_process_accuracy()
    assert reference > 0.95
    assert eight_nodes["dbn"]["score"] >= reference - 0.05, (eight_nodes["dbn"]["score"], reference)


def test_an_rbm_on_eight_nodes_ends_within_six_percent_of_one_process_reconstruction_error(eight_nodes):
    # Persistent chains take the factor 8 as minibatches of 1 at 0.8 times the rate, each node keeping the
    # fit's 10 chains, without a warm-up (its steps are no larger than the model's).  Measured, 5 epochs:
    # one process 0.0404; 8 nodes 0.0406-0.0420 (+0.5-3.9%, 13 runs); with one chain per node and the warm-up
    # from 0.1, 0.0436-0.0443 (bench_scaling.py --spark, 3 seeds).  One run, its merges as the scheduler
    # runs eight nodes on 2 cores: within 6% (2 points above the worst measured, 2 below the rule undone).
    model, split = one_process("rbm")
    reference = float(model._reconstruction_mse(split.X_test))
    run = eight_nodes["rbm"]
    assert run["score"] <= 1.06 * reference, (run["score"], reference, run["max_scale"], run["mean_scale"])
    assert run["max_scale"] == pytest.approx(0.8), run["max_scale"]  # the factor 8 times the minibatch 1 of 10


def test_the_epoch_summaries_warn_that_eight_nodes_take_too_few_steps_on_this_data(eight_nodes):
    warnings = eight_nodes["dbn"]["warnings"]
    assert len(warnings) == 16  # every epoch of every phase
    assert "each of the 8 nodes takes only 34 minibatch steps of 5" in warnings[0]  # the nodes' own minibatch
    assert "partitions=" not in warnings[0] and "more epochs" in warnings[0]  # they already merge 8 times an epoch
    logged = [line for line in eight_nodes["log"].splitlines() if "minibatch steps of 5" in line]  # the DBN's fit
    assert len(logged) == 3 and all("(said once per phase)" in line for line in logged)  # one per phase
