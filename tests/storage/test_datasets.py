"""Staged datasets: bit-exact round trips on both backends, checksums, clear rejection of bad input."""

from __future__ import annotations

import gzip
import pickle
import struct

import numpy as np
import pytest

from storage import (
    ChecksumError,
    DatasetError,
    StoreNotFoundError,
    open_dataset,
    stage_arrays,
    stage_csv,
    stage_idx,
)


def _data(n: int = 103, shape: tuple[int, ...] = (12,), seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random((n, *shape), dtype=np.float32), rng.integers(0, 7, n)


@pytest.mark.parametrize("layout", ["binary", "list"])
def test_staged_arrays_read_back_bit_exact_shard_by_shard(store, layout):
    X, y = _data()
    meta = stage_arrays(store.child("datasets/toy"), X, y, shards=4, layout=layout)
    assert [s["rows"] for s in meta["shards"]] == [25, 26, 26, 26]
    dataset = open_dataset(store.child("datasets/toy"))
    assert dataset.num_shards == 4
    assert (dataset.meta["n_samples"], dataset.meta["n_classes"], dataset.meta["feature_shape"]) == (103, 7, [12])
    start = 0
    for i in range(dataset.num_shards):
        Xs, ys = dataset.read_shard(i)
        assert Xs.dtype == np.float32 and ys.dtype == np.int64
        np.testing.assert_array_equal(Xs, X[start:start + len(Xs)])
        np.testing.assert_array_equal(ys, y[start:start + len(ys)])
        start += len(Xs)
    assert start == len(X)


def test_image_shaped_float64_and_uint8_features_keep_shape_and_dtype(local_store):
    rng = np.random.default_rng(1)
    X = rng.random((20, 1, 6, 5))
    stage_arrays(local_store.child("img"), X, None, shard_rows=8)
    Xr, yr = open_dataset(local_store.child("img")).read_all()
    assert yr is None and Xr.dtype == np.float64 and Xr.shape == (20, 1, 6, 5)
    np.testing.assert_array_equal(Xr, X)
    pixels = rng.integers(0, 256, (9, 4), dtype=np.uint8)
    stage_arrays(local_store.child("px"), pixels, np.arange(9), shards=3)
    np.testing.assert_array_equal(open_dataset(local_store.child("px")).read_all()[0], pixels)


def test_a_corrupted_shard_is_refused_by_its_checksum(store):
    X, y = _data()
    stage_arrays(store.child("d"), X, y, shards=2)
    shard = "d/part-00001.parquet"
    data = bytearray(store.read_bytes(shard))
    data[len(data) // 2] ^= 0x01
    store.backend.write_bytes(shard, bytes(data))
    dataset = open_dataset(store.child("d"))
    dataset.read_shard(0)
    with pytest.raises(ChecksumError, match="part-00001"):
        dataset.read_shard(1)


def test_dataset_pickles_small_and_reads_after_unpickling(local_store):
    X, y = _data()
    stage_arrays(local_store.child("d"), X, y, shards=3)
    dataset = open_dataset(local_store.child("d"))
    clone = pickle.loads(pickle.dumps(dataset))
    assert len(pickle.dumps(dataset)) < 4000
    np.testing.assert_array_equal(clone.read_shard(2)[0], dataset.read_shard(2)[0])


def test_restaging_is_refused_unless_asked_and_then_removes_only_the_old_shards(local_store):
    X, y = _data()
    stage_arrays(local_store.child("d"), X, y, shards=5)
    before = {name: local_store.read_bytes(f"d/{name}") for name in local_store.list("d")}
    with pytest.raises(DatasetError, match="already holds 6 entries .* nothing was written"):
        stage_arrays(local_store.child("d"), X[:10], y[:10], shards=2)
    assert {name: local_store.read_bytes(f"d/{name}") for name in local_store.list("d")} == before
    stage_arrays(local_store.child("d"), X[:10], y[:10], shards=2, overwrite=True)
    assert local_store.list("d") == ["_meta.json", "part-00000.parquet", "part-00001.parquet"]
    assert open_dataset(local_store.child("d")).n_samples == 10


@pytest.mark.parametrize("overwrite", [False, True])
def test_staging_never_touches_a_folder_of_someone_elses_files(local_store, overwrite):
    X, y = _data()
    local_store.write_bytes("mine/part-00000.parquet", b"my own parquet")  # looks like a shard; it is not ours
    local_store.write_bytes("mine/notes.txt", b"years of work")
    with pytest.raises(DatasetError, match="nothing was (written|deleted)"):
        stage_arrays(local_store.child("mine"), X, y, shards=2, overwrite=overwrite)
    assert local_store.list("mine") == ["notes.txt", "part-00000.parquet"]
    assert local_store.read_bytes("mine/part-00000.parquet") == b"my own parquet"


def test_overwriting_a_dataset_that_holds_a_foreign_file_is_refused_whole(local_store):
    X, y = _data()
    stage_arrays(local_store.child("d"), X, y, shards=3)
    local_store.write_bytes("d/README", b"added by a colleague")
    with pytest.raises(DatasetError, match="holds 'README', which staging did not write; nothing was deleted"):
        stage_arrays(local_store.child("d"), X[:10], y[:10], shards=1, overwrite=True)
    assert open_dataset(local_store.child("d")).n_samples == len(X)  # the earlier dataset is intact


def test_opening_a_directory_without_meta_is_not_found(local_store):
    with pytest.raises(StoreNotFoundError, match="_meta.json"):
        open_dataset(local_store.child("nothing"))


@pytest.mark.parametrize(
    "X, y, message",
    [
        ([[1.0, 2.0], [3.0], [4.0, 5.0]], None, "ragged rows: row 0 has 2 features but row 1 has 1"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), None, "NaN/Inf.*row 0"),
        (np.array([[1.0, 0.0], [0.0, np.inf]]), None, "NaN/Inf.*row 1"),
        (np.zeros((0, 4), np.float32), None, "empty input"),
        (np.zeros(5, np.float32), None, "shape \\(n_samples, n_features"),
        (np.zeros((3, 2), np.float32), np.array([0.0, 1.5, 2.0]), "integer class ids.*1.5 at row 1"),
        (np.zeros((3, 2), np.float32), np.array(["a", "b", "c"]), "integer class ids"),
        (np.zeros((3, 2), np.float32), np.array([0, -1, 2]), ">= 0; got -1 at row 1"),
        (np.zeros((3, 2), np.float32), np.array([0, 1]), "2 labels for 3 samples"),
        (np.array([["a", "b"]]), None, "unsupported feature dtype"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(local_store, X, y, message):
    with pytest.raises(DatasetError, match=message):
        stage_arrays(local_store.child("bad"), X, y)
    assert not local_store.exists("bad/_meta.json")


def test_shard_counts_are_validated(local_store):
    X, y = _data(n=5)
    with pytest.raises(DatasetError, match="between 1 and the number of samples"):
        stage_arrays(local_store.child("d"), X, y, shards=6)
    with pytest.raises(DatasetError, match="not both"):
        stage_arrays(local_store.child("d"), X, y, shards=2, shard_rows=2)


def test_whole_number_float_labels_are_accepted_as_class_ids(local_store):
    X, _ = _data(n=4)
    meta = stage_arrays(local_store.child("d"), X, np.array([0.0, 2.0, 1.0, 2.0]))
    assert meta["n_classes"] == 3
    np.testing.assert_array_equal(open_dataset(local_store.child("d")).read_all()[1], [0, 2, 1, 2])


def test_csv_files_are_staged_with_the_label_column_split_off(local_store, tmp_path):
    X, y = _data(n=30, shape=(5,))
    path = tmp_path / "data.csv"
    lines = ["a,b,label,c,d,e"] + [",".join(map(repr, [*row[:2], int(lab), *row[2:]])) for row, lab in zip(X.tolist(), y)]
    path.write_text("\n".join(lines) + "\n")
    meta = stage_csv(local_store.child("csv"), path, shards=2)
    assert meta["feature_shape"] == [5]
    Xr, yr = open_dataset(local_store.child("csv")).read_all()
    np.testing.assert_array_equal(Xr, X)  # float32 reprs parse back to the same float32
    np.testing.assert_array_equal(yr, y)


@pytest.mark.parametrize(
    "text, options, message",
    [
        ("a,b,label\n1,2,0\n3,4\n", {}, "cannot be parsed"),
        ("a,b,c\n1,2,0\n3,4,1\n", {}, "no label column 'label'"),
        ("a,b,label\n1,,0\n3,4,1\n", {}, "column 'b' has 1 missing value"),
        ("a,b,label\n1,x,0\n3,4,1\n", {}, "column 'b' is string, not numeric"),
        ("a,b,label\n", {}, "empty input"),
        ("", {}, "cannot be parsed"),
    ],
)
def test_bad_csv_files_are_rejected_with_a_clear_message(local_store, tmp_path, text, options, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(DatasetError, match=message):
        stage_csv(local_store.child("csv"), path, **options)


def _write_idx(path, array: np.ndarray, code: int) -> None:
    header = struct.pack(">BBBB", 0, 0, code, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as handle:
        handle.write(header + array.astype(array.dtype.newbyteorder(">")).tobytes())


def test_mnist_style_idx_files_are_staged_scaled_and_flattened(local_store, tmp_path):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (17, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 17).astype(np.uint8)
    _write_idx(tmp_path / "images.gz", images, 0x08)
    _write_idx(tmp_path / "labels.gz", labels, 0x08)
    stage_idx(local_store.child("mnist"), tmp_path / "images.gz", tmp_path / "labels.gz", shards=2)
    Xr, yr = open_dataset(local_store.child("mnist")).read_all()
    np.testing.assert_array_equal(Xr, images.reshape(17, -1).astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(yr, labels)
    _write_idx(tmp_path / "few.gz", labels[:5], 0x08)
    with pytest.raises(DatasetError, match="5 labels but .* 17 images"):
        stage_idx(local_store.child("bad"), tmp_path / "images.gz", tmp_path / "few.gz")
