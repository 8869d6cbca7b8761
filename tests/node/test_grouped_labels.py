"""Labels sorted into partitions, or one row per class, are told of before training (node.data._label_spread)."""

from __future__ import annotations

import numpy as np
import pytest

from node.data import grouped_labels, id_like_labels
from node.data._labels import summarize_labels
from node.data._label_spread import MIN_EXPECTED_ROWS


def summaries(labels: np.ndarray, partitions: int, max_classes: int = 100) -> list[dict]:
    """Summaries of ``labels`` cut in order into ``partitions`` partitions, as the executors make them."""
    return [{"partition": index, "rows": len(part), "labels": summarize_labels(part, max_classes)}
            for index, part in enumerate(np.array_split(labels, partitions))]


def test_labels_sorted_into_partitions_are_named_by_a_partition_and_a_class_it_lacks():
    labels = np.repeat(np.arange(10), 144)  # digits' size, sorted: 4 partitions of 2-3 classes each
    said = grouped_labels(summaries(labels, 4))
    assert said == ("partition 0 holds no row of class 3, of which it would hold about 36 were the rows shuffled "
                    "(and 3 more partitions lack a class so): the rows look sorted or grouped by label, so each node "
                    "trains on a few classes and the model comes out worse")
    iris = np.repeat(["setosa", "versicolor", "virginica"], 50)  # as scikit-learn ships it, in 2 partitions
    assert "partition 0 holds no row of class 'virginica'" in grouped_labels(summaries(iris, 2))


@pytest.mark.parametrize("seed", range(5))
def test_shuffled_labels_are_never_taken_for_grouped_ones(seed):
    # A shuffled partition lacks a class it would hold 20 rows of with a probability of about exp(-20): over
    # these seeds, shapes and imbalances, never.
    rng = np.random.default_rng(seed)
    for classes, rows, partitions in ((2, 200, 2), (10, 1440, 4), (10, 6000, 32), (3, 150, 2), (50, 20000, 16)):
        weights = rng.dirichlet(np.ones(classes))  # imbalanced too
        labels = rng.choice(classes, size=rows, p=weights)
        assert grouped_labels(summaries(labels, partitions)) is None, (classes, rows, partitions)


def test_a_class_too_rare_to_be_expected_in_a_partition_says_nothing():
    labels = np.array([0] * 400 + [1] * (2 * MIN_EXPECTED_ROWS - 2))  # all of class 1 in the last partition
    assert grouped_labels(summaries(labels, 2)) is None  # a shuffled partition: 19.5 rows of it, under 20
    labels = np.array([0] * 400 + [1] * (2 * MIN_EXPECTED_ROWS + 2))
    assert "holds no row of class 1" in grouped_labels(summaries(labels, 2))


def test_partitions_whose_classes_were_not_all_counted_or_that_have_none_are_left_out():
    labels = np.repeat(np.arange(10), 144)
    cut = summaries(labels, 4, max_classes=1)  # more distinct labels than kept: no counts to compare
    assert grouped_labels(cut) is None
    unlabelled = [{"partition": 0, "rows": 50, "labels": None}, {"partition": 1, "rows": 0}]
    assert grouped_labels(unlabelled) is None


def test_labels_that_look_like_row_ids_are_named_and_classes_do_not():
    ids = np.arange(480)  # a row-id column taken for labels: 480 classes of one row
    assert id_like_labels(summaries(ids, 4, max_classes=1000)) == (
        "480 of the 480 classes have a single row (480 rows): the labels look like row ids rather than classes, and "
        "a classifier learns nothing of a class seen once")
    rng = np.random.default_rng(0)
    assert id_like_labels(summaries(rng.integers(0, 10, 480), 4)) is None
    assert id_like_labels(summaries(np.repeat(np.arange(100), 2), 4)) is None  # 100 classes of 2 rows: classes
    assert id_like_labels(summaries(np.arange(MIN_EXPECTED_ROWS), 2)) is None  # too few to say (20 of 20 rows)
    half = np.concatenate([np.arange(30), np.repeat(np.arange(30, 60), 2)])  # 30 of 60 classes single: not most
    assert id_like_labels(summaries(half, 2)) is None
    assert "31 of the 61 classes" in id_like_labels(summaries(np.concatenate([half, [99]]), 2))
