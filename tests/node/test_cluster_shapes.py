"""Cluster shapes a fit must take as it finds them: as many nodes as Spark runs tasks at once, and a
``sync`` fit that asks for more refused on the driver, once, before any task waits at a barrier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from crash_store import HARNESS_TRAINED, harness_model
from support.spark_jobs import failed_tasks_since, newest_job

import node
import storage

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DRIVER_TIMEOUT_S = 600

pytestmark = pytest.mark.slow


def test_a_sync_fit_averaging_more_nodes_than_spark_runs_at_once_is_refused_before_any_task(spark, store_url,
                                                                                          digits):
    # local[2,4] runs two tasks at once: a third node would wait at the first barrier for a task that cannot
    # start, barrier_timeout_s on each of the task's four attempts.
    before = newest_job(spark)
    trainer = node.Trainer(spark, store_url, run_id="three-of-two", mode="sync", averaging_nodes=3,
                           barrier_timeout_s=1.0, epochs={"rbm0": 1, "finetune": 1}, progress=False)
    with pytest.raises(node.TrainingError, match=r"sync mode averages 3 nodes .* runs at most 2 tasks at once: "
                                                 r"set averaging_nodes to at most 2"):
        trainer.fit(harness_model(), digits.X_train, digits.y_train)
    assert failed_tasks_since(spark, before) == 0
    assert not storage.open_store(store_url).exists("runs/three-of-two")  # refused before the run was written


def test_a_sync_fit_with_few_enough_partitions_may_name_more_nodes_than_task_slots(spark, store_url, digits):
    # Two partitions deal to two nodes, whatever averaging_nodes says: both run at once.
    model = node.Trainer(spark, store_url, run_id="two-dealt", mode="sync", averaging_nodes=3, partitions=2,
                         epochs={"rbm0": 1, "finetune": 3}, progress=False).fit(
        harness_model(), digits.X_train, digits.y_train)
    assert len(node.open_run(store_url, "two-dealt").record["steps"]["finetune"]["nodes"]) == 2
    assert model.score(digits.X_test, digits.y_test) > 0.5


def test_a_session_whose_default_parallelism_exceeds_its_task_slots_trains_a_node_per_slot(tmp_path):
    # Users set spark.default.parallelism to a multiple of the cores for their own jobs.  A node per
    # default-parallelism task put six sync nodes on local[2]'s two slots: the fit waited at the first
    # barrier, and failed after every attempt of the waiting task had timed out.
    result = run_driver({"store": f"file://{tmp_path / 'store'}", "master": "local[2]", "parallelism": 6})
    assert result["default_parallelism"] == 6
    assert {phase: len(nodes) for phase, nodes in result["nodes"].items()} == {"rbm0": 2, "finetune": 2}
    assert result["accuracy"] >= HARNESS_TRAINED


def test_two_sync_fits_side_by_side_under_fair_scheduling_both_finish(tmp_path):
    # Each sync job is one barrier stage, which Spark starts whole or not at all: under FAIR scheduling two
    # fits' jobs each took one of local[2]'s two slots and waited at their first barrier for a node that
    # could not start, until barrier_timeout_s failed both.
    result = run_driver({"store": f"file://{tmp_path / 'store'}", "master": "local[2]", "parallelism": 2,
                         "fair": True})
    assert isinstance(result["left"], float) and isinstance(result["right"], float), result
    assert min(result["left"], result["right"]) >= HARNESS_TRAINED


def run_driver(config: dict) -> dict:
    """Run ``_shapes_driver.py`` with ``config`` in a process of its own; the JSON line it printed."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, str(HERE / "_shapes_driver.py"), json.dumps(config)], env=env,
                          capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")][-1]
