"""The phase's progress bar: samples per second and time left, as a reader sees them."""

from __future__ import annotations

from tqdm import tqdm

from node.driver._progress import BAR_FORMAT, partitions_done, progress_postfix


def test_the_postfix_gives_samples_per_second_and_the_time_the_partitions_left_will_take():
    # 3 of 12 partitions of 1,000 rows in 2 s: 1,500 samples/s, and 9 more partitions at 2/3 s each.
    assert progress_postfix(3, 12, 3_000, 2.0) == "1,500 samples/s, 00:06 left"
    assert progress_postfix(12, 12, 12_000, 8.0) == "1,500 samples/s, 00:00 left"
    assert progress_postfix(1, 1_000, 36_000, 1.5) == "24,000 samples/s, 24:58 left"  # 999 x 1.5 s
    assert progress_postfix(100, 4_000, 1e6, 100.0) == "10,000 samples/s, 1:05:00 left"


def test_the_postfix_says_it_does_not_know_before_the_first_partition_finishes():
    assert progress_postfix(0, 12, 0, 0.0) == "? samples/s, ? left"
    assert progress_postfix(0, 12, 0, 5.0) == "? samples/s, ? left"


def test_the_bar_counts_partitions_and_shows_the_postfix_instead_of_tqdms_partition_rate():
    line = tqdm.format_meter(3, 12, 2.0, ncols=120, prefix="r1 rbm0 epoch 1/3", bar_format=BAR_FORMAT,
                             postfix=progress_postfix(3, 12, 3_000, 2.0))
    assert line.startswith("r1 rbm0 epoch 1/3:  25%|")
    assert line.endswith("| 3/12 partitions [00:02, 1,500 samples/s, 00:06 left]")
    assert "partition/s" not in line


def test_the_bar_counts_the_partitions_the_nodes_claimed_less_one_per_running_task():
    # 2 tasks (nodes) of 16 partitions: claims move the bar before any task ends.
    assert partitions_done(0, 2, 16, claimed=0) == 0
    assert partitions_done(0, 2, 16, claimed=7) == 5  # two of the seven are being trained
    assert partitions_done(1, 2, 16, claimed=12) == 11  # one task left, training its 12th
    assert partitions_done(1, 2, 16, claimed=0) == 8  # no claims (sync): a finished task's share
    assert partitions_done(2, 2, 16, claimed=16) == 16
    assert partitions_done(2, 2, 16, claimed=40) == 16  # never past the job's partitions
