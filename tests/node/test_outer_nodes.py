"""Spark nodes at the defaults keep one process's accuracy at equal epochs, with and without the outer step.

DBN(64, 64) on digits, 3/3/10 epochs, in a driver process of its own (``_scaling_driver.py``: the
suite's session is ``local[2,4]``), three seeds, against one process trained through the same seam on
the same seeds; the bounds' margins are in the tests.  On ``local[4]`` the scaling rule's factor 4 goes
to the rates and leaves the outer step's rule a gain of 1 (plain merging); on ``local[2]`` in
minibatches of 2 the nodes take 337 steps an epoch, the factor is 1, and the rule's step has the gain
2 (0.586/0.707) in fine-tuning (docs/scaling-out.md, "The outer step").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.seed_bounds import assert_at_least

from node.modes import schedule_place
from rbm.datasets import load_digits01

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DRIVER_TIMEOUT_S = 1800
SEEDS = [0, 1, 2]
NODES = 4

pytestmark = pytest.mark.slow


def spark_node_runs(store: Path, settings: dict, nodes: int = NODES, batch_size: int | None = None) -> list[dict]:
    config = {"store": f"file://{store}", "runs": ["dbn"], "partitions_per_node": None, "seeds": SEEDS,
              "settings": settings, "nodes": nodes, "batch_size": batch_size}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, str(HERE / "_scaling_driver.py"), json.dumps(config)], env=env,
                          capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def one_process_score(seed: int, batch_size: int | None = None) -> float:
    """The model, phases and epochs trained by one process through the same seam (2 partitions), BLAS on one thread."""
    import _scaling_driver as driver
    from threadpoolctl import threadpool_limits

    split = load_digits01(test_fraction=0.25)
    model = driver.make("dbn", seed, batch_size)
    model.initialize(split.X_train.shape[1], np.unique(split.y_train))
    parts = np.array_split(np.random.default_rng(seed).permutation(len(split.X_train)), 2)
    with threadpool_limits(limits=1):
        for phase_index, phase in enumerate(model.phases()):
            for epoch in range(driver.DBN_EPOCHS[phase]):
                model.set_schedule_epoch(epoch)  # as the trainer does
                for index, rows in enumerate(parts):
                    model.set_schedule_plan(driver.DBN_EPOCHS[phase], *schedule_place(epoch, [[0, 1]], index))
                    model.train_partition(split.X_train[rows], split.y_train[rows], phase,
                                          np.random.default_rng([seed, phase_index, epoch, index]))
        return float(model.score(split.X_test, split.y_test))


@pytest.mark.seed_bound
def test_four_nodes_at_the_defaults_end_within_the_measured_bound_of_one_process(tmp_path):
    # Measured (3 seeds, BLAS on one thread in the one-process reference, a loaded 2-core machine):
    # one process 0.9533 / 0.9511 / 0.9533 (mean 0.9526); four nodes at the defaults (the outer step's
    # rule takes the gain 1 here: plain merging) 0.9556 / 0.9533 / 0.9467 (mean 0.9519, gap 0.07 points)
    # under SkylakeX kernels, 0.9511 / 0.9511 / 0.9489 (mean 0.9504, gap 0.22 points) under Haswell
    # kernels (the reference the same under both): margins of 1.43 and 1.28 points to the bound.  With the outer step at 0.7/0.8 (SkylakeX) 0.9556 /
    # 0.9533 / 0.9556 (mean 0.9548), at 0.2/0.8 0.9222 / 0.9378 / 0.9244 (mean 0.9281, gap 2.4 points:
    # the bound fails it); 0.8222 while a node with the step also merged between minibatches.
    scores = [run["score"] for run in spark_node_runs(tmp_path / "defaults", {})]
    reference = [one_process_score(seed) for seed in SEEDS]
    assert_at_least(np.mean(scores) - np.mean(reference), -MAX_GAP,
                    f"four nodes' mean accuracy minus one process's, seeds {SEEDS}", scores)


#: Points of accuracy (mean over the seeds) four nodes may end below one process.
MAX_GAP = 0.015


#: The minibatch of the two nodes below: 1,347 rows on 2 nodes take 337 steps each per epoch, so the
#: scaling rule's factor is 1 and the outer step's rule takes the gain 2 in fine-tuning.
SMALL_BATCH = 2

#: Points of accuracy (mean over the seeds) two nodes with the rule's step may end below one process.
MAX_GAP_WITH_STEP = 0.015


@pytest.mark.seed_bound
def test_two_nodes_taking_the_rules_outer_step_end_within_the_measured_bound_of_one_process(tmp_path):
    # Measured (scripts/check-seed-bounds, 3 seeds, a loaded 2-core machine): the gap of two nodes'
    # mean accuracy to one process's -0.0067 under Haswell kernels and -0.0081 under SkylakeX: margins of
    # 0.83 and 0.69 points to the bound.  A change to the rule's step fails the recorded step first.
    runs = spark_node_runs(tmp_path / "step", {}, nodes=2, batch_size=SMALL_BATCH)
    for run in runs:  # the rule's step in every epoch of fine-tuning, the pretraining RBMs merged plainly
        steps = {phase: [epoch["outer_step"] for epoch in run["recorded"][phase].values()] for phase in run["recorded"]}
        assert steps["finetune"] == [pytest.approx([0.5858, 0.7071], abs=1e-4)] * 10, steps
        assert steps["rbm0"] == steps["rbm1"] == [None] * 3 and run["max_scale"] == 1.0, run
    scores = [run["score"] for run in runs]
    reference = [one_process_score(seed, SMALL_BATCH) for seed in SEEDS]
    assert_at_least(np.mean(scores) - np.mean(reference), -MAX_GAP_WITH_STEP,
                    f"two nodes' mean accuracy minus one process's, seeds {SEEDS}", scores)
