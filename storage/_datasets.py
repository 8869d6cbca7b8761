"""Staged datasets: Parquet shards plus ``_meta.json`` in one store directory.

Layout of a dataset directory (its URL is the directory itself)::

    _meta.json             feature_shape, dtype, label_column, n_samples, n_classes,
                           value_range=[min, max] of the features (checked against a model's
                           input bounds before training), layout,
                           shards=[{name, rows, sha256, size_bytes}], ...
    part-00000.parquet     column "features": one row per sample, either fixed_size_binary
    part-00001.parquet       (layout "binary", default: the sample's values, little-endian)
                             or fixed_size_list<dtype>[prod(feature_shape)] (layout "list")
                           column "label": int64 (absent for unlabelled data): the class index,
                             standing for classes[index] where the meta names ``classes``

Shards hold consecutive rows in input order (shuffle before staging if order matters).
``_meta.json`` is written last, so a dataset becomes visible only once every shard is in
place.  :meth:`Dataset.read_shard` verifies the shard's sha256 and converts Arrow buffers to
numpy without any per-row Python work.

Staging (:mod:`storage._dataset_staging`) writes them; this module reads them.  Over an earlier
dataset the new one is built in a ``v-<time_ns>-<random>/`` folder beside the old and swapped in by
its meta; where ``_meta.json`` is missing (a store that replaces it by delete-then-rename, killed
in between) :func:`open_dataset` opens the newest complete ``v-*`` folder.

A training set staged with a held-out split (``splits.test``) and that split carry the same
``split_pair`` id; :func:`open_split` opens the split with its partner and refuses a pair staged
by different stagings (one interrupted between its two swaps) in one line.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ._auth import sha256_hex
from ._errors import ChecksumError, DatasetError, StoreError, StoreNotFoundError
from ._paths import join
from ._runs import read_json
from ._store import UNRECORDED_FILE_MAX_BYTES, Store, open_store

__all__ = ["Dataset", "open_dataset", "open_split"]

logger = logging.getLogger(__name__)

META_NAME = "_meta.json"
#: In a folder while staging writes it: what is there is staging's own, even before a meta names it.
STAGING_MARKER = "_staging.json"
FEATURES_COLUMN = "features"
LABEL_COLUMN = "label"
FORMAT = "sparkdbn-dataset/1"
DEFAULT_SHARD_BYTES = 64 << 20
# Uncompressed by default: float features barely compress and decoding costs read speed;
# pass compression="zstd" for sparse data such as images with blank borders.
DEFAULT_COMPRESSION = "none"
_FEATURE_DTYPES = {"float32", "float64", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64"}
_FLAT_SHARD = re.compile(r"^part-\d{5,}\.parquet$")
_VERSION_FOLDER = re.compile(r"^v-\d{20}-[0-9a-f]{8}$")
_SHARD_NAME = re.compile(r"^(?:v-\d{20}-[0-9a-f]{8}/)?part-\d{5,}\.parquet$")


#: A ``v-*`` folder holding anything staging does not write there.
_FOREIGN = object()


def _version_meta(store: Store, folder: str) -> Any:
    """A ``v-*`` folder's dataset meta when it is complete, None while it is being staged, else ``_FOREIGN``."""
    names = set(store.list(folder))
    if any(not (_FLAT_SHARD.fullmatch(name) or name in (META_NAME, STAGING_MARKER)) for name in names):
        return _FOREIGN
    meta = _read_meta(store, join(folder, META_NAME)) if META_NAME in names else None
    if isinstance(meta, dict) and meta.get("format") == FORMAT:
        return meta
    return None if STAGING_MARKER in names and _is_marker(store, join(folder, STAGING_MARKER)) else _FOREIGN


def _read_meta(store: Store, path: str) -> Any:
    """The JSON at ``path`` (None when there is none); ``{}`` when it is not JSON: not staging's."""
    try:
        return read_json(store, path)
    except StoreError:
        return {}


def _is_marker(store: Store, path: str) -> bool:
    marker = _read_meta(store, path)
    return isinstance(marker, dict) and marker.get("format") == FORMAT


class Dataset:
    """A staged dataset; picklable (URL, options and meta), shards read on demand.

    Attributes
    ----------
    meta : dict
        The parsed ``_meta.json``.
    """

    def __init__(self, store: Store, meta: dict) -> None:
        self.store = store
        self.meta = meta

    @property
    def url(self) -> str:
        """URL of the dataset directory."""
        return self.store.url

    @property
    def num_shards(self) -> int:
        """Number of shards (one per RDD partition, typically)."""
        return len(self.meta["shards"])

    @property
    def n_samples(self) -> int:
        """Total number of samples."""
        return int(self.meta["n_samples"])

    @property
    def feature_shape(self) -> tuple[int, ...]:
        """Shape of one sample."""
        return tuple(self.meta["feature_shape"])

    @property
    def classes(self) -> np.ndarray | None:
        """The labels the staged class indices stand for (``_meta.json``'s ``classes``: strings, or numbers other
        than ``0 .. k-1``), in index order; None where the indices are the labels themselves."""
        classes = self.meta.get("classes")
        return None if classes is None else np.asarray(classes)

    def __len__(self) -> int:
        return self.n_samples

    def __repr__(self) -> str:
        return f"Dataset({self.url!r}, n_samples={self.n_samples}, shards={self.num_shards})"

    def missing_shards(self) -> list[str]:
        """The shards ``_meta.json`` lists that the store does not hold, in its order (``[]``: none missing).

        One listing per folder the shards are in (the dataset's, or a ``v-*`` folder of a restaging):
        cheap enough to check before any Spark job reads them.
        """
        names = [shard["name"] for shard in self.meta["shards"]]
        held: dict[str, set[str]] = {}
        for name in names:
            folder = name.rpartition("/")[0]
            if folder not in held:
                held[folder] = set(self.store.list(folder))
        return [name for name in names if name.rpartition("/")[2] not in held[name.rpartition("/")[0]]]

    def read_shard(self, index: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Shard ``index`` as numpy arrays, verified against its sha256.

        Returns
        -------
        X : ndarray, shape (rows, *feature_shape)
            Writable, in the staged dtype.
        y : ndarray, shape (rows,), or None for unlabelled data
            The labels as they were staged: :attr:`classes` where the meta names them (strings or
            numbers), else the int64 class indices themselves.
        """
        if not 0 <= index < self.num_shards:
            raise IndexError(f"shard {index} out of range: {self.url} has {self.num_shards} shard(s)")
        info = self.meta["shards"][index]
        where = f"{self.url}/{info['name']}"
        size = info.get("size_bytes")  # recorded by staging; a meta staged before it did: the store's cap
        recorded = _is_count(size)
        data = self.store.read_bytes(info["name"], max_bytes=size if recorded else UNRECORDED_FILE_MAX_BYTES,
                                     stat_first=not recorded)
        digest = sha256_hex(data)
        if digest != info["sha256"]:
            raise ChecksumError(f"{where}: sha256 {digest[:12]}... does not match _meta.json ({info['sha256'][:12]}...); "
                                "the shard is corrupted, truncated or was restaged")
        try:
            table = pq.read_table(pa.BufferReader(data), use_threads=False)  # executors already use every core
        except pa.ArrowException as error:
            raise DatasetError(f"{where} is not a readable Parquet file ({error}); stage the dataset again") from error
        columns = [self.meta.get("features_column", FEATURES_COLUMN), self.meta.get("label_column")]
        missing = [name for name in columns if name and name not in table.column_names]
        if missing:
            raise DatasetError(f"{where} has no column {missing[0]!r} (its columns: {table.column_names}), which "
                               "_meta.json names")
        column = table.column(columns[0]).combine_chunks()
        dtype = np.dtype(self.meta["dtype"])
        if pa.types.is_fixed_size_binary(column.type):
            if column.null_count:
                raise DatasetError(f"{where}: null feature rows")
            row_bytes = column.type.byte_width
            raw = np.frombuffer(column.buffers()[1], dtype=np.uint8, count=len(column) * row_bytes,
                                offset=column.offset * row_bytes)
            X = raw.view(dtype.newbyteorder("<")).astype(dtype, copy=True)  # writable, native order
        else:
            X = np.array(column.flatten().to_numpy(zero_copy_only=False), dtype=dtype, copy=True)
        if len(table) != info["rows"] or X.size != info["rows"] * int(np.prod(self.feature_shape)):
            raise DatasetError(f"{where}: {len(table)} rows / {X.size} values do not match _meta.json")
        X = X.reshape((info["rows"], *self.feature_shape))
        y = None
        if self.meta.get("label_column"):
            y = self._labels(np.array(table.column(self.meta["label_column"]).to_numpy(), dtype=np.int64), where)
        return X, y

    def _labels(self, indices: np.ndarray, where: str) -> np.ndarray:
        """The staged class ``indices`` as the labels they stand for (a copy)."""
        classes = self.classes
        if classes is None:
            return indices.copy()
        outside = (indices < 0) | (indices >= len(classes))
        if outside.any():
            row = int(np.flatnonzero(outside)[0])
            raise DatasetError(f"{where}: row {row} has the class index {int(indices[row])}, but _meta.json names "
                               f"{len(classes)} classes; stage the dataset again")
        return classes[indices]

    def read_all(self) -> tuple[np.ndarray, np.ndarray | None]:
        """All shards concatenated (convenient for small datasets and tests)."""
        parts = [self.read_shard(i) for i in range(self.num_shards)]
        X = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts]) if parts[0][1] is not None else None
        return X, y


def open_dataset(url: "str | Store", *, user: str | None = None, retry_timeout_s: float = 30.0) -> Dataset:
    """Open the staged dataset in directory ``url`` (reads ``_meta.json``).

    Raises
    ------
    StoreNotFoundError
        No ``_meta.json`` there (not staged, or staging did not finish).
    """
    store = open_store(url, user=user, retry_timeout_s=retry_timeout_s)
    meta = read_json(store, META_NAME)
    if meta is None:
        meta = _newest_version(store)
    if meta is None:
        raise StoreNotFoundError(f"no dataset at {store.url}: {META_NAME} is missing (stage it with `sparkdbn stage` "
                                 "or scripts/stage-dataset)")
    return Dataset(store, _checked_meta(meta, f"{store.url}/{META_NAME}"))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_class_list(classes: Any) -> bool:
    """``classes`` is what staging records: distinct strings, or distinct finite numbers (no booleans), at least two."""
    if not isinstance(classes, list) or len(classes) < 2:
        return False
    strings = all(isinstance(value, str) for value in classes)
    numbers = all(isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)
                  for value in classes)
    return (strings or numbers) and len(set(classes)) == len(classes)


def _checked_meta(meta: Any, where: str) -> dict:
    """``meta`` when it describes a dataset staging could have written; else :class:`DatasetError` naming the field.

    Staged datasets are checksummed, not signed: a meta changed by hand or by someone who can write the
    store is refused here, before a shard is read, rather than read as another dtype or shape.
    """
    if not isinstance(meta, dict):
        raise DatasetError(f"{where}: a dataset meta is a JSON object, not a {type(meta).__name__}")
    if meta.get("format") != FORMAT:
        raise DatasetError(f"{where}: unknown dataset format {meta.get('format')!r}, expected {FORMAT!r}")
    problems = []
    if meta.get("dtype") not in _FEATURE_DTYPES:
        problems.append(f"dtype {meta.get('dtype')!r} is not one of {sorted(_FEATURE_DTYPES)}")
    shape = meta.get("feature_shape")
    if not isinstance(shape, list) or not shape or not all(_is_count(size) and size > 0 for size in shape):
        problems.append(f"feature_shape {shape!r} is not a list of positive ints")
    for key in ("features_column", "label_column"):
        if meta.get(key) is not None and not (isinstance(meta[key], str) and meta[key]):
            problems.append(f"{key} {meta[key]!r} is not a column name")
    classes = meta.get("classes")
    if classes is not None and not _is_class_list(classes):
        problems.append(f"classes {str(classes)[:80]} is not a list of at least 2 distinct strings or numbers, of one kind")
    shards = meta.get("shards")
    if not isinstance(shards, list) or not all(
            isinstance(shard, dict) and isinstance(shard.get("name"), str) and _SHARD_NAME.fullmatch(shard["name"])
            and _is_count(shard.get("rows")) and isinstance(shard.get("sha256"), str) for shard in shards):
        problems.append("shards is not a list of {name: part-NNNNN.parquet, rows: int >= 0, sha256}")
    elif meta.get("n_samples") != sum(shard["rows"] for shard in shards) or not _is_count(meta.get("n_samples")):
        problems.append(f"n_samples {meta.get('n_samples')!r} is not the {sum(shard['rows'] for shard in shards)} "
                        "rows its shards hold")
    if problems:
        raise DatasetError(f"{where} is not a dataset meta staging writes: {'; '.join(problems)}; stage the dataset "
                           "again (staged datasets are checksummed, not signed: protect them with store permissions)")
    return meta


def _newest_version(store: Store) -> dict | None:
    """The meta of the newest complete ``v-*`` folder: the dataset when a staging stopped while replacing the meta."""
    for name in sorted((name for name in store.list("") if _VERSION_FOLDER.match(name)), reverse=True):
        meta = _version_meta(store, name)
        if isinstance(meta, dict):
            logger.warning("%s has no %s (a staging stopped while replacing it); opening the newest complete "
                           "version, %s", store.url, META_NAME, name)
            return meta
    return None


def open_split(url: str, split: str = "test", *, user: str | None = None, retry_timeout_s: float = 30.0) -> Dataset | None:
    """The held-out ``split`` of the dataset at ``url``, checked against it; None when it has none.

    Raises
    ------
    DatasetError
        The two were staged by different stagings (their ``split_pair`` ids differ): a staging
        interrupted between swapping the split and the training set.
    """
    dataset = open_dataset(url, user=user, retry_timeout_s=retry_timeout_s)
    relative = (dataset.meta.get("splits") or {}).get(split)
    if not relative:
        return None
    partner_url = url.rstrip("/") + "/" + relative
    partner = open_dataset(partner_url, user=user, retry_timeout_s=retry_timeout_s)
    pair, partner_pair = dataset.meta.get("split_pair"), partner.meta.get("split_pair")
    if pair != partner_pair and (pair is not None or partner_pair is not None):
        raise DatasetError(f"{partner_url} is not the {split} split of {url}: they come from different stagings "
                           f"(split_pair {partner_pair} vs {pair}), one interrupted between its two swaps; run the "
                           "same staging command again")
    return partner
