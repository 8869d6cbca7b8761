"""scripts/bench_modes.py measures the DBN or LeNet: its options must fit the model they are given for."""

from __future__ import annotations

import pytest
from support.scripts import script_module


@pytest.fixture(scope="module")
def bench_modes():
    with script_module("bench_modes.py") as module:
        yield module


def test_the_dbn_keeps_its_three_phase_epochs_data_and_target_by_default(bench_modes):
    args = bench_modes.parse_args([])
    assert (args.model, args.data, args.epochs, args.target) == ("dbn", "digits", [5, 5, 20], 0.95)
    assert args.train_rows is None
    assert bench_modes.make_model(args).phases() == ["rbm0", "rbm1", "finetune"]


def test_lenet_takes_one_epoch_count_digits28_and_a_target_of_0_98_by_default(bench_modes):
    args = bench_modes.parse_args(["--model", "lenet"])
    assert (args.data, args.epochs, args.target) == ("digits28", [3], 0.98)
    model = bench_modes.make_model(args)
    assert model.phases() == ["train"] and model.batch_size == 64 and model.learning_rate == 0.01


@pytest.mark.parametrize("argv, message", [
    (["--model", "lenet", "--epochs", "2", "2", "6"], "--epochs takes 1 value for --model lenet"),
    (["--epochs", "6"], "--epochs takes 3 values for --model dbn"),
    (["--model", "lenet", "--data", "digits"], "use --data digits28"),
    (["--model", "lenet", "--epochs", "0"], "--epochs must be >= 1"),
    (["--train-rows", "5"], "--train-rows must be at least 50"),
])
def test_options_that_do_not_fit_the_model_are_refused_with_a_message(bench_modes, capsys, argv, message):
    with pytest.raises(SystemExit):
        bench_modes.parse_args(argv)
    assert message in capsys.readouterr().err


def test_train_rows_keeps_a_stratified_subset_of_lenets_images(bench_modes):
    _, y_all, _, _ = bench_modes.load("digits28", "lenet")
    X, y, X_test, _ = bench_modes.load("digits28", "lenet", train_rows=1000)
    assert X.shape == (1000, 1, 28, 28) and X_test.shape[1:] == (1, 28, 28)
    for label in range(10):  # each class in its share of all the training rows, give or take a row
        assert abs((y == label).sum() - 1000 * (y_all == label).mean()) <= 1, label


def test_a_fast_nodes_idle_time_counts_the_gaps_between_its_partitions_and_its_wait_at_each_phase_end(bench_modes):
    def partition(node, phase, start, end, slowed_s=0.0):
        return {"node": node, "phase": phase, "time": end, "task_s": end - start, "slowed_s": slowed_s}

    metrics = [partition("fast", "rbm0", 0.0, 1.0), partition("fast", "rbm0", 1.2, 2.0),  # a 0.2-s hand-over
               partition("slow", "rbm0", 0.0, 3.0, slowed_s=2.0),  # the phase ends at 3.0: the fast node waits 1.0
               partition("fast", "finetune", 4.0, 5.0), partition("slow", "finetune", 4.0, 5.5, slowed_s=1.0)]
    figures = bench_modes.straggler_figures(metrics)
    assert figures["slowed_share"] == pytest.approx(2 / 5)
    assert figures["fast_idle_s"] == pytest.approx(0.2 + 1.0 + 0.5)
    assert figures["fast_idle_phase_end_s"] == pytest.approx(1.0 + 0.5)
    assert figures["fast_idle_share"] == pytest.approx(1.7 / (3.0 + 1.5))
    assert bench_modes.straggler_figures([partition("a", "rbm0", 0.0, 1.0)])["fast_idle_s"] is None  # no straggler
