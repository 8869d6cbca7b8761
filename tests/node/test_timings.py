"""Where a fit's time goes (node.driver._timings): the driver's steps, the nodes' share, the workers started early."""

from __future__ import annotations

import json
import os

import pytest

import node
import rbm
from node.driver import Fit, Trainer, TrainingSettings
from node.driver._timings import FitTimings, node_shares

ROWS = 400


def small_dbn() -> rbm.DBN:
    return rbm.DBN(hidden_layer_sizes=(16,), batch_size=20, finetune_dropout=0.0, random_state=0)


def test_a_step_is_timed_in_order_even_when_it_raises_and_background_work_is_kept_apart():
    timings = FitTimings()
    with timings.step("first"):
        pass
    with pytest.raises(ValueError), timings.step("fails"):
        raise ValueError("refused")
    timings.add("beside", 0.0, 99.0, background=True)
    assert [step.name for step in timings.steps] == ["first", "fails", "beside"]
    listed = timings.to_dict()
    assert [step["name"] for step in listed["steps"]] == ["beside", "first", "fails"]  # by their start
    assert listed["steps"][1]["start_s"] + listed["steps"][1]["seconds"] <= listed["steps"][2]["start_s"]
    assert "beside" not in timings.summary() and "fails" in timings.summary()
    json.dumps(listed)  # it goes into the run record


def test_the_nodes_share_of_a_job_sums_their_reports_and_names_the_slowest_nodes_time():
    records = [{"node": "a", "setup_s": 1.0, "data_load_s": 0.5, "train_s": 2.0, "train_cpu_s": 1.0, "merge_s": 0.1,
                "publish_s": 0.2, "task_s": 2.5},
               {"node": "a", "setup_s": 0.0, "data_load_s": 0.0, "train_s": 2.0, "train_cpu_s": 1.5, "merge_s": 0.1,
                "publish_s": 0.2, "task_s": 2.5},
               {"node": "b", "setup_s": 0.5, "data_load_s": 0.25, "train_s": 4.0, "train_cpu_s": 4.0, "merge_s": 0.0,
                "publish_s": 0.0, "task_s": 4.25}]
    shares = node_shares(records)
    assert shares == {"setup_s": 1.5, "data_load_s": 0.75, "train_s": 8.0, "train_cpu_s": 6.5,
                      "merge_s": pytest.approx(0.2), "publish_s": pytest.approx(0.4), "slowest_node_s": 6.0}


@pytest.mark.slow
def test_a_fits_timings_follow_it_step_by_step_and_its_epochs_carry_their_nodes_share(spark, store_url, digits):
    X, y = digits.X_train[:ROWS], digits.y_train[:ROWS]
    trainer = Trainer(spark, store_url, run_id="timed", epochs={"rbm0": 1, "finetune": 2}, partitions=4,
                      progress=False, log_dir=None, validation_fraction=0.25)
    trainer.fit(small_dbn(), X, y)
    steps = trainer.timings_["steps"]
    names = [step["name"] for step in steps if not step["background"]]
    assert names == ["store and lease", "validation hold-out", "data check", "model check", "run record",
                     "store the training partitions", "rbm0 epoch 1", "rbm0 epoch 1 validation", "rbm0 result",
                     "finetune epoch 1", "finetune epoch 1 validation", "finetune epoch 2",
                     "finetune epoch 2 validation", "finetune result", "model", "cleanup"]
    assert [step["name"] for step in steps if step["background"]] == ["start the Python workers"]
    own = [step for step in steps if not step["background"]]
    for before, after in zip(own, own[1:]):  # one after the other, none overlapping
        assert before["start_s"] + before["seconds"] <= after["start_s"] + 1e-6
    assert own[-1]["start_s"] + own[-1]["seconds"] <= trainer.timings_["total_s"]
    first_epoch = next(step for step in steps if step["name"] == "rbm0 epoch 1")
    assert first_epoch["nodes"]["setup_s"] > first_epoch["nodes"]["data_load_s"] > 0  # the nodes started, read data
    assert first_epoch["nodes"]["train_s"] > 0 and first_epoch["nodes"]["slowest_node_s"] > 0
    # Each partition's training thread's CPU seconds: some, and never more than the partition's task took.
    records = [record for summary in trainer.history_ for record in summary["records"]]
    assert all(0 < record["train_cpu_s"] <= record["task_s"] for record in records)
    assert first_epoch["nodes"]["train_cpu_s"] > 0
    # The run record keeps the fit's timings (up to the model: the record is written with it).
    record = node.open_run(store_url, "timed").runs.read_record()
    recorded = [step["name"] for step in record["timings"]["steps"] if not step["background"]]
    assert recorded == names[:names.index("model")]


@pytest.mark.slow
def test_each_task_reports_what_it_spent_before_its_first_partition_once(spark, store_url, digits):
    trainer = Trainer(spark, store_url, run_id="setup", epochs={"rbm0": 1, "finetune": 1}, partitions=4,
                      progress=False, log_dir=None)
    trainer.fit(small_dbn(), digits.X_train[:ROWS], digits.y_train[:ROWS])
    for summary in trainer.history_:
        with_setup = [record for record in summary["records"] if record["setup_s"] > 0]
        assert len(with_setup) == len({record["pid"] for record in summary["records"]})  # one per task (node)
        assert all(record["setup_s"] >= record["data_load_s"] for record in summary["records"])


@pytest.mark.slow
def test_a_fit_starts_the_python_workers_before_it_checks_its_data(spark, store_url, digits):
    settings = TrainingSettings(run_id="early-workers", epochs={"rbm0": 1, "finetune": 1}, partitions=4,
                                progress=False, log_dir=None)
    fit = Fit(settings, spark, store_url=store_url, model=small_dbn(), data=digits.X_train[:ROWS],
              y=digits.y_train[:ROWS])
    fit.run()
    workers = fit._workers.wait()  # a job of one task per node, each answering with its worker's pid
    assert len(workers) == spark.sparkContext.defaultParallelism and os.getpid() not in workers
    steps = {step.name: step for step in fit.timings.steps}
    assert steps["start the Python workers"].background
    assert steps["start the Python workers"].start_s <= steps["data check"].start_s
