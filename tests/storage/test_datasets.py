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
    DestinationNotEmptyError,
    Store,
    StoreNotFoundError,
    StoreUnavailableError,
    open_dataset,
    open_store,
    stage_arrays,
    stage_csv,
    stage_idx,
)
from support.webhdfs_server import WebHDFSServer


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


def test_a_refused_restaging_says_how_to_overwrite_each_way_and_survives_pickling(local_store):
    X, y = _data()
    stage_arrays(local_store.child("d"), X, y, shards=2)
    with pytest.raises(DestinationNotEmptyError) as refused:
        stage_arrays(local_store.child("d"), X, y, shards=2)
    assert str(refused.value) == (f"{local_store.child('d').url} already holds 3 entries (e.g. '_meta.json'); nothing "
                                  "was written. Stage into a new folder, or pass overwrite=True (--overwrite) to "
                                  "replace a dataset staged there before")
    assert "pass --overwrite to replace" in refused.value.message("--overwrite")
    again = pickle.loads(pickle.dumps(refused.value))  # an error crossing processes keeps its fields and message
    assert type(again) is DestinationNotEmptyError and str(again) == str(refused.value)
    assert again.entries == refused.value.entries == ["_meta.json", "part-00000.parquet", "part-00001.parquet"]


def test_restaging_is_refused_unless_asked_and_then_builds_beside_swaps_and_removes_only_the_old_shards(local_store):
    X, y = _data()
    stage_arrays(local_store.child("d"), X, y, shards=5)
    assert local_store.list("d") == ["_meta.json"] + [f"part-{index:05d}.parquet" for index in range(5)]
    before = {name: local_store.read_bytes(f"d/{name}") for name in local_store.list("d")}
    with pytest.raises(DatasetError, match="already holds 6 entries .* nothing was written"):
        stage_arrays(local_store.child("d"), X[:10], y[:10], shards=2)
    assert {name: local_store.read_bytes(f"d/{name}") for name in local_store.list("d")} == before
    for restage in range(2):  # over the first layout, then over a dataset staged beside
        meta = stage_arrays(local_store.child("d"), X[:10 + restage], y[:10 + restage], shards=2, overwrite=True)
        folder = meta["shards"][0]["name"].split("/")[0]
        assert local_store.list("d") == ["_meta.json", folder]  # the earlier shards (and folder) are gone
        assert local_store.list(f"d/{folder}") == ["_meta.json", "part-00000.parquet", "part-00001.parquet"]
        assert open_dataset(local_store.child("d")).n_samples == 10 + restage


class DyingStore(Store):
    """A store whose ``die_at``-th write raises, and every change after it too: a process killed there."""

    def __init__(self, url: str, die_at: int | None) -> None:
        super().__init__(url)
        self.die_at, self.writes, self.dead = die_at, [], False

    def _change(self, path: str, counted: bool = True) -> None:
        if self.dead:
            raise StoreUnavailableError(f"dead before {path}")
        if counted:
            self.writes.append(path)
            if len(self.writes) == self.die_at:
                self.dead = True
                raise StoreUnavailableError(f"killed before writing {path}")

    def write_bytes(self, path, data):  # noqa: ANN001, ANN201 - Store's signature
        self._change(path)
        return super().write_bytes(path, data)

    def create_exclusive(self, path, data):  # noqa: ANN001, ANN201
        self._change(path)
        return super().create_exclusive(path, data)

    def delete(self, path, recursive=False):  # noqa: ANN001, ANN201
        self._change(path, counted=False)
        return super().delete(path, recursive)


@pytest.mark.parametrize("backend", ["local", "webhdfs that cannot replace"])
def test_staging_over_a_dataset_killed_at_any_write_leaves_the_old_or_the_new_dataset_and_a_rerun_completes(
        tmp_path, backend):
    X, y = _data(n=60)
    if backend == "local":
        root, server = str(tmp_path / "local-store"), None
    else:
        server = WebHDFSServer(tmp_path / "hdfs", rename_overwrite=False).start()
        root = server.store_url("/store")
    try:
        counting = DyingStore(f"{root}/count", None)
        stage_arrays(counting, X, y, shards=3)
        first = len(counting.writes)
        stage_arrays(counting, X[:30], y[:30], shards=2, overwrite=True)
        points = len(counting.writes) - first
        assert points == 1 + 1 + 2 + 2  # the lease, the marker, the shards, the version's meta, then the meta swap
        for die_at in range(1, points + 1):
            url = f"{root}/d{die_at}"
            stage_arrays(url, X, y, shards=3)
            with pytest.raises(StoreUnavailableError):
                stage_arrays(DyingStore(url, die_at), X[:30], y[:30], shards=2, overwrite=True)
            dataset = open_dataset(url)  # the old or the new one, whole
            assert dataset.n_samples in (60, 30), die_at
            expected = X if dataset.n_samples == 60 else X[:30]
            np.testing.assert_array_equal(dataset.read_all()[0], expected)
            stage_arrays(url, X[:30], y[:30], shards=2, overwrite=True)  # the same command again completes
            np.testing.assert_array_equal(open_dataset(url).read_all()[0], X[:30])
            folder = open_dataset(url).meta["shards"][0]["name"].split("/")[0]
            assert sorted(open_store(url).list("")) == ["_meta.json", folder], die_at  # nothing left behind
    finally:
        if server is not None:
            server.stop()


class KilledBetweenDeleteAndRename(BaseException):
    """The writer's death in the one moment a store that cannot replace a file has none."""


def test_a_staging_killed_between_delete_and_rename_of_the_meta_leaves_the_new_dataset_readable(tmp_path, monkeypatch):
    X, y = _data(n=60)
    with WebHDFSServer(tmp_path / "hdfs", rename_overwrite=False) as server:
        store = open_store(server.store_url("/store"), retry_timeout_s=5.0)
        stage_arrays(store.child("d"), X, y, shards=3)
        staging = store.child("d")
        rename = staging.backend.client.rename

        def die_after_delete(source: str, destination: str) -> None:
            if destination.endswith("/d/_meta.json"):  # the meta swap: DELETE has just removed the old one
                raise KilledBetweenDeleteAndRename(destination)
            rename(source, destination)

        monkeypatch.setattr(staging.backend.client, "rename", die_after_delete)
        with pytest.raises(KilledBetweenDeleteAndRename):
            stage_arrays(staging, X[:30], y[:30], shards=2, overwrite=True)
        monkeypatch.undo()
        assert "_meta.json" not in store.list("d") and staging.backend.replaces_atomically is False
        np.testing.assert_array_equal(open_dataset(store.child("d")).read_all()[0], X[:30])  # the new one
        stage_arrays(store.child("d"), X[:20], y[:20], shards=2, overwrite=True)  # a rerun completes
        np.testing.assert_array_equal(open_dataset(store.child("d")).read_all()[0], X[:20])
        assert len(store.list("d")) == 2


def test_a_first_staging_killed_midway_is_completed_by_the_same_command_without_overwrite(local_store):
    X, y = _data(n=60)
    with pytest.raises(StoreUnavailableError):
        stage_arrays(DyingStore(local_store.child("d").url, 3), X, y, shards=4)
    with pytest.raises(StoreNotFoundError):
        open_dataset(local_store.child("d"))  # nothing staged yet
    stage_arrays(local_store.child("d"), X, y, shards=2)  # what the interrupted staging left is its own
    assert local_store.list("d") == ["_meta.json", "part-00000.parquet", "part-00001.parquet"]
    np.testing.assert_array_equal(open_dataset(local_store.child("d")).read_all()[0], X)


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


def test_boolean_labels_are_staged_as_the_class_ids_0_and_1(local_store):
    X, _ = _data(n=4)
    meta = stage_arrays(local_store.child("d"), X, np.array([True, False, True, True]))
    assert meta["n_classes"] == 2
    np.testing.assert_array_equal(open_dataset(local_store.child("d")).read_all()[1], [1, 0, 1, 1])


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
