"""A staged dataset whose ``_meta.json`` or shard was changed by hand or by someone who can write the store
(datasets are checksummed, not signed): refused with an error naming the file and the field, never read as
another dtype, shape or count."""

from __future__ import annotations

import json

import numpy as np
import pytest

from storage import DatasetError, DatasetLease, StoreError, open_dataset, sha256_hex, stage_arrays


@pytest.fixture(params=["binary", "list"])
def staged(request, local_store):
    X = np.random.default_rng(0).random((40, 6)).astype(np.float32)
    meta = stage_arrays(local_store.child("toy"), X, np.arange(40) % 3, shards=2, layout=request.param)
    return local_store.child("toy"), meta


def _lie(store, meta, **changes) -> None:
    store.write_bytes("_meta.json", json.dumps({**meta, **changes}).encode())


@pytest.mark.parametrize("changes, field", [
    (dict(dtype="O"), "dtype 'O'"),
    (dict(dtype="complex64"), "dtype 'complex64'"),
    (dict(dtype="float16"), "dtype 'float16'"),
    (dict(dtype="nonsense"), "dtype 'nonsense'"),
    (dict(feature_shape=[-6]), "feature_shape"),
    (dict(feature_shape="ab"), "feature_shape"),
    (dict(n_samples=10**9), "n_samples 1000000000 is not the 40 rows"),
    (dict(shards=[]), "n_samples 40 is not the 0 rows"),
    (dict(shards=[{"name": "../elsewhere/part-00000.parquet", "rows": 40, "sha256": "0" * 64}]), "shards"),
    (dict(shards=[{"name": "part-00000.parquet", "rows": "40", "sha256": "0" * 64}]), "shards"),
    (dict(label_column=7), "label_column 7"),
])  # fmt: skip
def test_a_meta_that_lies_about_dtype_shape_counts_or_shards_is_refused_naming_the_field(staged, changes, field):
    store, meta = staged
    _lie(store, meta, **changes)
    with pytest.raises(DatasetError, match="_meta.json is not a dataset meta staging writes") as raised:
        open_dataset(store)
    assert field in str(raised.value)


def test_a_meta_that_is_no_json_object_is_refused(staged):
    store, _meta = staged
    store.write_bytes("_meta.json", b"[1, 2]")
    with pytest.raises(DatasetError, match="_meta.json: a dataset meta is a JSON object, not a list"):
        open_dataset(store)


def test_a_shard_that_is_no_parquet_or_lacks_a_named_column_is_refused_naming_it(staged):
    store, meta = staged
    _lie(store, meta, label_column="grade")
    with pytest.raises(DatasetError, match=r"part-00000\.parquet has no column 'grade'"):
        open_dataset(store).read_shard(0)
    planted = b"not a parquet file"
    shards = [{**meta["shards"][0], "sha256": sha256_hex(planted)}, meta["shards"][1]]
    store.write_bytes(meta["shards"][0]["name"], planted)
    _lie(store, meta, shards=shards)
    with pytest.raises(DatasetError, match=r"part-00000\.parquet is not a readable Parquet file"):
        open_dataset(store).read_shard(0)
    X, y = open_dataset(store).read_shard(1)  # the shards that are intact still read
    assert X.shape == (20, 6) and y.tolist() == [(20 + row) % 3 for row in range(20)]


NESTED_TOO_DEEP = b"[" * 60_000  # nested deeper than Python's parser recurses, smaller than a lease file may be


def test_a_meta_nested_too_deep_to_parse_is_not_valid_json(staged):
    store, _meta = staged
    store.write_bytes("_meta.json", NESTED_TOO_DEEP)
    with pytest.raises(StoreError, match=r"_meta.json is not valid JSON: maximum recursion depth"):
        open_dataset(store)


def test_a_staging_lease_nested_too_deep_to_parse_is_watched_like_a_silent_one_and_taken_over(local_store):
    local_store.write_bytes("toy/_staging-lease/00000001.json", NESTED_TOO_DEEP)
    lease = DatasetLease(local_store.child("toy"), timeout_s=0.2)
    lease.acquire()
    try:
        assert lease.generation == 2
    finally:
        lease.release()

