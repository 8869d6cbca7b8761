"""A staged dataset's labels read back as they were given: class names and numbers other than 0 .. k-1 are
stored as class indices with the classes in ``_meta.json``, and every reader gets the classes back.

Real local store, no Spark (the Spark side: tests/node/test_cli_staged_data.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from node.data import stage_input
from storage import DatasetError, open_dataset, open_split


def _stage(tmp_path, labels: np.ndarray, **options) -> str:
    X = np.linspace(0.0, 1.0, len(labels) * 3, dtype=np.float32).reshape(len(labels), 3)
    np.savez(tmp_path / "given.npz", X=X, y=labels)
    url = str(tmp_path / "staged")
    stage_input(str(tmp_path / "given.npz"), url, shards=2, **options)
    return url


@pytest.mark.parametrize("labels", [
    np.array(["cat", "dog", "emu", "dog", "cat", "emu"] * 2),
    np.array([10, 30, 20, 30, 10, 20] * 2),
    np.array([0.5, 1.5, 2.5, 1.5, 0.5, 2.5] * 2),
], ids=["strings", "integers-not-0-to-k", "floats"])
def test_staged_labels_read_back_as_given_from_every_shard_and_from_the_held_out_split(tmp_path, labels):
    url = _stage(tmp_path, labels, test_fraction=0.5)
    dataset = open_dataset(url)
    np.testing.assert_array_equal(dataset.classes, np.unique(labels))
    _X, y = dataset.read_all()
    _X_test, y_test = open_split(url, "test").read_all()
    assert y.dtype.kind == labels.dtype.kind
    # A stratified half each: every class twice on both sides, as given.
    assert sorted(y.tolist()) == sorted(y_test.tolist()) == sorted(np.unique(labels).tolist() * 2)
    # The shards hold class indices: a reader of the Parquet file alone sees 0 .. k-1.
    import pyarrow.parquet as pq

    shard = pq.read_table(str(tmp_path / "staged" / dataset.meta["shards"][0]["name"]))
    assert set(shard.column("label").to_pylist()) <= {0, 1, 2}


def test_labels_that_are_their_own_class_indices_name_no_classes(tmp_path):
    url = _stage(tmp_path, np.array([0, 1, 2, 1, 0, 2]))
    dataset = open_dataset(url)
    assert dataset.classes is None and "classes" not in dataset.meta
    assert dataset.read_all()[1].dtype == np.int64


def _edit_meta(url: str, **changes) -> None:
    path = f"{url}/_meta.json"
    with open(path) as handle:
        meta = json.load(handle)
    meta.update(changes)
    with open(path, "w") as handle:
        json.dump(meta, handle)


@pytest.mark.parametrize("classes", [["a", "a", "b"], [True, False], ["a", 1], ["only"], "ab", [1.0, float("nan")]],
                         ids=["repeated", "booleans", "mixed", "one", "not-a-list", "nan"])
def test_a_meta_whose_classes_staging_could_not_have_written_is_refused_when_opened(tmp_path, classes):
    url = _stage(tmp_path, np.array(["x", "y", "z", "y", "x", "z"]))
    _edit_meta(url, classes=classes)
    with pytest.raises(DatasetError, match=r"_meta.json is not a dataset meta staging writes: classes .* is not a list "
                                           r"of at least 2 distinct strings or numbers, of one kind"):
        open_dataset(url)


def test_a_class_index_past_the_classes_the_meta_names_is_refused_naming_shard_and_row(tmp_path):
    url = _stage(tmp_path, np.array(["x", "y", "z", "y", "x", "z"]))
    _edit_meta(url, classes=["x", "y"])  # "z", index 2, lost from the meta
    dataset = open_dataset(url)
    import pyarrow.parquet as pq

    labels = pq.read_table(str(tmp_path / "staged" / "part-00000.parquet")).column("label").to_pylist()
    row = labels.index(2)  # the first "z" of the shard (the rows are shuffled before they are sharded)
    with pytest.raises(DatasetError, match=rf"staged/part-00000.parquet: row {row} has the class index 2, but "
                                           r"_meta.json names 2 classes; stage the dataset again"):
        dataset.read_shard(0)
