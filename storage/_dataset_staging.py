"""Staging a dataset: Parquet shards and ``_meta.json`` written, then swapped in over an earlier dataset.

The layout is :mod:`storage._datasets`' (which reads it).  Staging over a dataset (``overwrite``)
builds the new one beside the old and swaps::

    v-<time_ns>-<random>/_staging.json     written first: this folder is staging's own
    v-<time_ns>-<random>/part-NNNNN.parquet
    v-<time_ns>-<random>/_meta.json        the new dataset, complete (shard names include the folder)
    _meta.json                             then replaced by that meta: the swap
                                           then the old shards and the marker are removed

So a staging killed at any moment leaves the old dataset or the new one readable, and the same
command run again completes: it recognizes what an interrupted staging left (the marker, shards
a meta names or lists under ``replaces``) and removes that, and only that, once its own dataset
is in place.  Where ``_meta.json`` cannot be replaced atomically (a WebHDFS gateway that deletes,
then renames) a staging killed between the two leaves no ``_meta.json``: :func:`open_dataset`
then opens the newest complete ``v-*`` folder.  A first staging into an empty folder writes the
plain layout, with ``_staging.json`` at the top while it runs.  A reader that opened the old
dataset before the swap may find its shards gone afterwards.

Stagings of one dataset exclude each other: each holds the dataset's fenced staging lease
(:class:`~storage._dataset_lease.DatasetLease`) from its check of the folder to its last removal,
and checks it is still the holder before its swap and before removing anything, so a build folder
is only ever removed by a staging that took over from a stager silent for the lease timeout.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ._auth import sha256_hex
from ._dataset_lease import DEFAULT_STAGING_LEASE_TIMEOUT_S, LEASE_FOLDER, DatasetLease
from ._datasets import (_FEATURE_DTYPES, _FLAT_SHARD, _FOREIGN, _SHARD_NAME, _VERSION_FOLDER, DEFAULT_COMPRESSION,
                        DEFAULT_SHARD_BYTES, FEATURES_COLUMN, FORMAT, LABEL_COLUMN, META_NAME, STAGING_MARKER,
                        _is_marker, _read_meta, _version_meta)
from ._errors import DatasetError, DestinationNotEmptyError, StoreError
from ._paths import join
from ._runs import write_json
from ._store import Store, open_store

__all__ = ["stage_arrays", "stage_split_pair", "check_split_destination", "check_stage_destination"]

logger = logging.getLogger(__name__)


def _check_features(X: Any) -> np.ndarray:
    """``X`` as an (n, *feature_shape) numeric array, or a DatasetError saying what is wrong."""
    try:
        array = np.asarray(X)
    except ValueError as exc:  # numpy >= 1.24 refuses ragged nested sequences outright
        array = np.asarray(X, dtype=object) if isinstance(X, (list, tuple)) else None
        if array is None:
            raise DatasetError(f"features cannot be read as an array: {exc}") from exc
    if array.dtype == object:
        lengths = [len(row) if hasattr(row, "__len__") else 1 for row in X]
        bad = next((i for i, n in enumerate(lengths) if n != lengths[0]), None)
        if bad is not None:
            raise DatasetError(
                f"ragged rows: row 0 has {lengths[0]} features but row {bad} has {lengths[bad]}; "
                "every sample must have the same number of features"
            )
        raise DatasetError("features must be numbers; got Python objects (dtype=object)")
    if array.ndim < 2:
        raise DatasetError(
            f"features must have shape (n_samples, n_features, ...); got shape {array.shape} "
            "(use X.reshape(-1, 1) for a single feature)"
        )
    if array.shape[0] == 0:
        raise DatasetError("empty input: no samples to stage")
    if array.dtype.name not in _FEATURE_DTYPES:
        raise DatasetError(
            f"unsupported feature dtype {array.dtype}; use one of {sorted(_FEATURE_DTYPES)} (e.g. X.astype(np.float32))"
        )
    if array.dtype.kind == "f":
        finite_rows = np.isfinite(array.reshape(array.shape[0], -1)).all(axis=1)
        if not finite_rows.all():
            row = int(np.flatnonzero(~finite_rows)[0])
            raise DatasetError(
                f"features contain NaN/Inf: {int((~finite_rows).sum())} row(s), first at row {row}; "
                "clean or impute the data before staging"
            )
    return np.ascontiguousarray(array)


def _check_labels(y: Any, n_samples: int) -> np.ndarray:
    """``y`` as int64 class ids 0..C-1 of length ``n_samples``, or a DatasetError."""
    labels = np.asarray(y)
    if labels.ndim != 1:
        raise DatasetError(f"labels must be 1-D (n_samples,); got shape {labels.shape}")
    if len(labels) != n_samples:
        raise DatasetError(f"{len(labels)} labels for {n_samples} samples; there must be one label per sample")
    if labels.dtype.kind == "f":
        whole = np.isfinite(labels) & (labels == np.round(labels))
        if not whole.all():
            row = int(np.flatnonzero(~whole)[0])
            raise DatasetError(
                f"labels must be integer class ids; got {labels.dtype} with value {labels[row].item()!r} at row {row}"
            )
    elif labels.dtype.kind not in "biu":  # booleans are the class ids 0 and 1
        raise DatasetError(f"labels must be integer class ids; got dtype {labels.dtype} (map classes to 0..C-1 first)")
    labels = labels.astype(np.int64)
    if labels.min() < 0:
        row = int(np.flatnonzero(labels < 0)[0])
        raise DatasetError(f"labels must be class ids >= 0; got {labels[row]} at row {row}")
    return labels


def _shard_bounds(n: int, row_bytes: int, shards: int | None, shard_rows: int | None) -> list[tuple[int, int]]:
    if shards is not None and shard_rows is not None:
        raise DatasetError("give shards= or shard_rows=, not both")
    if shard_rows is not None:
        if shard_rows < 1:
            raise DatasetError(f"shard_rows must be >= 1, got {shard_rows}")
        shards = math.ceil(n / shard_rows)
    elif shards is None:
        shards = max(1, math.ceil(n * row_bytes / DEFAULT_SHARD_BYTES))
    if not 1 <= shards <= n:
        raise DatasetError(f"shards must be between 1 and the number of samples ({n}), got {shards}")
    if shard_rows is not None:
        return [(start, min(n, start + shard_rows)) for start in range(0, n, shard_rows)]
    edges = [(i * n) // shards for i in range(shards + 1)]
    return list(zip(edges[:-1], edges[1:]))


def _encode_shard(X: np.ndarray, y: np.ndarray | None, compression: str, layout: str) -> bytes:
    width = int(np.prod(X.shape[1:]))
    if layout == "binary":
        # One fixed-size little-endian blob per row: Parquet stores it PLAIN and decoding is
        # a memcpy (5x faster than a list column, whose repetition levels are decoded per value).
        raw = np.ascontiguousarray(X, dtype=X.dtype.newbyteorder("<"))
        features = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width * X.dtype.itemsize), len(X), [None, pa.py_buffer(raw)])
    elif layout == "list":
        features = pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), width)
    else:
        raise DatasetError(f"unknown layout {layout!r}; use 'binary' (fast) or 'list' (readable as arrays by Spark)")
    columns = {FEATURES_COLUMN: features}
    if y is not None:
        columns[LABEL_COLUMN] = pa.array(y, type=pa.int64())
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(columns), sink, compression=compression, use_dictionary=[LABEL_COLUMN])
    return sink.getvalue().to_pybytes()


def stage_arrays(
    url: "str | Store",
    X: Any,
    y: Any = None,
    *,
    shards: int | None = None,
    shard_rows: int | None = None,
    name: str | None = None,
    compression: str = DEFAULT_COMPRESSION,
    layout: str = "binary",
    progress: bool = False,
    extra_meta: dict | None = None,
    user: str | None = None,
    retry_timeout_s: float = 30.0,
    overwrite: bool = False,
    keep: tuple[str, ...] = (),
    lease_timeout_s: float = DEFAULT_STAGING_LEASE_TIMEOUT_S,
) -> dict:
    """Stage arrays as Parquet shards with ``_meta.json`` in the dataset directory ``url``.

    The directory must be new or empty; with ``overwrite`` it may hold a dataset staged earlier,
    which is replaced (see :func:`check_stage_destination`: nothing staging did not write is ever
    deleted or overwritten).

    Parameters
    ----------
    url : str or Store
        The dataset directory (``/data/digits``, ``hdfs://nn:9870/datasets/digits``).
    X : array-like, shape (n_samples, *feature_shape)
        Features; float32/float64 or integer dtype, stored as given (no NaN/Inf).
    y : array-like of int, shape (n_samples,), optional
        Class ids 0..C-1 (whole-number floats are accepted and stored as int64).
    shards : int, optional
        Number of shards (default: shards of about 64 MiB).
    shard_rows : int, optional
        Rows per shard, instead of ``shards``.
    name : str, optional
        Dataset name for the meta (default: the directory name).
    compression : str
        Parquet codec: "none" (default, fastest to read), "zstd", "snappy", ...
    layout : str
        ``"binary"`` (default): features as a fixed-size binary column, one little-endian
        blob per row (fastest to read); ``"list"``: a fixed-size list column that Spark and
        pandas read as arrays.  :meth:`Dataset.read_shard` reads both.
    progress : bool
        Show a tqdm progress bar over rows.
    overwrite : bool
        Replace a dataset staged at ``url`` before (only that).
    keep : tuple of str
        Entries of the directory that belong to this staging and are left alone (a recipe's
        ``test`` split).
    lease_timeout_s : float
        Another staging of the same dataset is refused while it renews its lease; one silent for
        this long (on this process's clock) is taken to be gone and taken over.

    Returns
    -------
    dict
        The meta written to ``_meta.json``.

    Raises
    ------
    DatasetError
        Ragged rows, NaN/Inf, empty input, label problems, bad shard counts; a destination that
        holds files (without ``overwrite``) or anything staging did not write; another staging of the
        same dataset is running (or took the dataset over from this one).
    """
    store = url if isinstance(url, Store) else open_store(url, user=user, retry_timeout_s=retry_timeout_s)
    features = _check_features(X)
    labels = _check_labels(y, len(features)) if y is not None else None
    _check_destination(store, overwrite, keep)  # before writing the lease: a folder that is no dataset stays untouched
    with DatasetLease(store, lease_timeout_s) as lease:
        return _stage_leased(store, lease, features, labels, shards=shards, shard_rows=shard_rows, name=name,
                             compression=compression, layout=layout, progress=progress, extra_meta=extra_meta,
                             overwrite=overwrite, keep=keep)


def stage_split_pair(
    url: "str | Store",
    train: tuple[Any, Any],
    test: tuple[Any, Any],
    *,
    split: str = "test",
    shards: int | None = None,
    test_shards: int | None = None,
    name: str | None = None,
    extra_meta: dict | None = None,
    train_meta: dict | None = None,
    overwrite: bool = False,
    lease_timeout_s: float = DEFAULT_STAGING_LEASE_TIMEOUT_S,
    **options: Any,
) -> tuple[dict, dict]:
    """Stage a dataset at ``url`` and its held-out ``split`` at ``url/split``, as one staging.

    One id in both metas (``split_pair``): a pair staged by different stagings is refused by
    :func:`~storage.open_split`.  The dataset's staging lease is held from the check of both folders to the
    training set's last removal, so a second staging of the same URL is refused before it writes anything
    (as two stagings of one dataset are, :func:`stage_arrays`), and cannot take the first one's finished split
    for what a killed staging left (:func:`check_split_destination`) and stage it again under the first's
    training set.  Files are checked first (:func:`check_split_destination`): nothing is written where
    either would be refused.

    Parameters
    ----------
    url : str or Store
        The dataset directory.
    train : tuple of (array-like, array-like or None)
        The training set's ``(X, y)``.
    test : tuple of (array-like, array-like or None)
        The held-out split's ``(X, y)``.
    split : str
        The held-out split's folder name.
    shards : int, optional
        Shards of the training set (:func:`stage_arrays`'s ``shards``).
    test_shards : int, optional
        Shards of the split.
    name : str, optional
        The dataset's name (default: the directory name); the split's is ``<name>-<split>``.
    extra_meta : dict, optional
        Entries for both metas.
    train_meta : dict, optional
        Entries for the training set's meta alone.
    overwrite : bool
        Replace a pair staged there before (only that).
    lease_timeout_s : float
        As :func:`stage_arrays`'s.
    **options
        :func:`stage_arrays`'s ``compression``, ``layout``, ``progress``, ``user``, ``retry_timeout_s``.

    Returns
    -------
    (dict, dict)
        The metas of the training set and of the split.
    """
    connection = {key: options.pop(key) for key in ("user", "retry_timeout_s") if key in options}
    store = url if isinstance(url, Store) else open_store(url, **connection)
    name = name or store.root.rstrip("/").rsplit("/", 1)[-1]
    features = _check_features(train[0])
    labels = _check_labels(train[1], len(features)) if train[1] is not None else None
    check_split_destination(store, split, overwrite=overwrite)  # before the lease: nothing written where refused
    with DatasetLease(store, lease_timeout_s) as lease:
        test_overwrite = check_split_destination(store, split, overwrite=overwrite)  # again: under the lease
        pair = uuid.uuid4().hex
        test_meta = stage_arrays(store.child(split), test[0], test[1], shards=test_shards, name=f"{name}-{split}",
                                 overwrite=test_overwrite, lease_timeout_s=lease_timeout_s,
                                 extra_meta={**(extra_meta or {}), "split": split, "split_pair": pair}, **options)
        meta = _stage_leased(store, lease, features, labels, shards=shards, shard_rows=None, name=name,
                             overwrite=overwrite, keep=(split,), extra_meta={
                                 **(extra_meta or {}), **(train_meta or {}), "split": "train",
                                 "splits": {split: split}, "split_pair": pair},
                             compression=options.get("compression", DEFAULT_COMPRESSION),
                             layout=options.get("layout", "binary"), progress=options.get("progress", False))
    return meta, test_meta


def _stage_leased(store: Store, lease: DatasetLease, features: np.ndarray, labels: np.ndarray | None, *,
                  shards: int | None, shard_rows: int | None, name: str | None, compression: str, layout: str,
                  progress: bool, extra_meta: dict | None, overwrite: bool, keep: tuple[str, ...]) -> dict:
    """:func:`stage_arrays` once this staging holds the dataset's lease (checked again before the swap)."""
    from tqdm.auto import tqdm

    previous, leftovers = _check_destination(store, overwrite, keep)  # again: under the lease
    # Over a dataset: the new one is built beside it, in a folder of its own, and swapped in by its meta.
    folder = "" if previous is None else f"v-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
    store.write_bytes(join(folder, STAGING_MARKER), json.dumps({"format": FORMAT, "started": time.time()}).encode())
    n = len(features)
    bounds = _shard_bounds(n, features[0].nbytes, shards, shard_rows)
    shard_meta = []
    with tqdm(total=n, unit="rows", disable=not progress, desc=f"staging {store.url}") as bar:
        for index, (start, stop) in enumerate(bounds):
            shard_labels = None if labels is None else labels[start:stop]
            data = _encode_shard(features[start:stop], shard_labels, compression, layout)
            shard_name = join(folder, f"part-{index:05d}.parquet")
            store.write_bytes(shard_name, data)
            shard_meta.append({"name": shard_name, "rows": stop - start, "sha256": sha256_hex(data), "size_bytes": len(data)})
            bar.update(stop - start)
    meta = {
        "format": FORMAT,
        "name": name or store.root.rstrip("/").rsplit("/", 1)[-1],
        "feature_shape": list(features.shape[1:]),
        "dtype": features.dtype.name,
        "features_column": FEATURES_COLUMN,
        "label_column": LABEL_COLUMN if labels is not None else None,
        "n_samples": n,
        "n_classes": int(labels.max()) + 1 if labels is not None else None,
        "class_counts": np.bincount(labels).tolist() if labels is not None else None,
        "value_range": [float(features.min()), float(features.max())] if n else None,
        "compression": compression,
        "layout": layout,
        "created": time.time(),
        "shards": shard_meta,
        **(extra_meta or {}),
    }
    written = {shard["name"] for shard in shard_meta}
    own_marker = join(folder, STAGING_MARKER)
    # What the earlier staging(s) left, removed once this dataset is in place; listed in the meta so that
    # a rerun after a kill between the swap and the removal knows them for staging's own.
    replaced = sorted(leftovers - written - {META_NAME, folder, own_marker})
    if replaced:
        meta["replaces"] = replaced
    if folder:
        write_json(store, join(folder, META_NAME), meta)  # complete beside the old dataset, before the swap
    lease.check()  # a staging that lost the dataset (paused past the timeout) swaps nothing
    write_json(store, META_NAME, meta)  # last: the dataset is complete from here on
    lease.check()  # ... and removes nothing
    for name in replaced:
        _remove_own(store, name)
    store.delete(own_marker)
    logger.info("staged %d samples in %d shard(s) at %s", n, len(shard_meta), store.url)
    return meta


def check_stage_destination(url: "str | Store", *, overwrite: bool = False, keep: tuple[str, ...] = ()) -> dict | None:
    """Check that a dataset may be staged at ``url``; returns the meta of the dataset it replaces, if any.

    A new or empty directory is fine, and so is one holding only what an interrupted staging left.
    One that holds a dataset is refused unless ``overwrite``, and even then when it holds anything
    staging did not write (besides ``keep``).

    Raises
    ------
    DatasetError
        Naming the directory and the first entry in the way; nothing was written or deleted.
    """
    store = url if isinstance(url, Store) else open_store(url)
    return _check_destination(store, overwrite, keep)[0]


def check_split_destination(store: Store, split: str = "test", *, overwrite: bool = False) -> bool:
    """Check that a dataset and its held-out ``split`` (at ``store/split``) may be staged; returns the
    ``overwrite`` to stage the split with.

    Both are checked before anything is written.  A first staging writes the split, then the dataset:
    killed in between, it leaves a complete split whose dataset never came.  Such a split (its meta names
    it ``split`` of a pair, and no dataset is staged beside it) is what that staging left, so the same
    command run again replaces it (True) without ``overwrite``.

    Parameters
    ----------
    store : Store
        Where the dataset goes; its split goes to ``store.child(split)``.
    split : str
        The held-out split's folder name.
    overwrite : bool
        Replace a dataset staged there before (see :func:`check_stage_destination`).

    Raises
    ------
    DatasetError
        As :func:`check_stage_destination`, for the dataset or the split.
    """
    dataset = check_stage_destination(store, overwrite=overwrite, keep=(split,))
    child = store.child(split)
    if dataset is None and not overwrite and store.exists(split):
        meta = _read_meta(child, META_NAME) if child.exists(META_NAME) else None
        if isinstance(meta, dict) and meta.get("split") == split and meta.get("split_pair"):
            logger.info("%s holds the %s split of a staging that stopped before its dataset: staging it again",
                        child.url, split)
            check_stage_destination(child, overwrite=True)
            return True
    check_stage_destination(child, overwrite=overwrite)
    return overwrite


def _check_destination(store: Store, overwrite: bool, keep: tuple[str, ...]) -> tuple[dict | None, set[str]]:
    """The meta of the dataset at ``store`` (None: none) and the entries staging wrote there (see above)."""
    names = sorted(set(store.list("")) - set(keep) - {LEASE_FOLDER}) if store.exists("") else []
    if not names:
        return None, set()
    versions = {name: _version_meta(store, name) for name in names if _VERSION_FOLDER.match(name)}
    ours = {name for name, meta in versions.items() if meta is not _FOREIGN}
    meta = _read_meta(store, META_NAME) if META_NAME in names else None
    if meta is None:  # killed between deleting and renaming the meta: the newest complete version is the dataset
        meta = next((versions[name] for name in sorted(ours, reverse=True) if isinstance(versions[name], dict)), None)
    elif not isinstance(meta, dict) or meta.get("format") != FORMAT:
        if overwrite:
            raise DatasetError(f"overwrite refused: {store.url}/{META_NAME} was not written by staging; nothing was "
                               "deleted")
        raise DestinationNotEmptyError(store.url, names)
    if meta is not None:
        ours |= {name.split("/", 1)[0] for name in _staged_names(meta)} | _replaced_names(meta) | {META_NAME}
    if STAGING_MARKER in names and _is_marker(store, STAGING_MARKER):  # a first staging that did not finish
        ours |= {STAGING_MARKER} | {name for name in names if _FLAT_SHARD.fullmatch(name)}
    if meta is None and set(names) <= ours:
        return None, ours  # only what an interrupted staging left: staged again from scratch
    if not overwrite:
        raise DestinationNotEmptyError(store.url, names)
    if meta is None:
        raise DatasetError(f"overwrite refused: {store.url} is not a staged dataset (no _meta.json written by "
                           "staging); nothing was deleted")
    foreign = sorted(set(names) - ours)
    if foreign:
        raise DatasetError(f"overwrite refused: {store.url} holds {foreign[0]!r}, which staging did not write; "
                           "nothing was deleted")
    return meta, ours


def _remove_own(store: Store, name: str) -> None:
    """Remove an entry staging wrote: a file, or a ``v-*`` folder's files and then the (empty) folder."""
    try:
        if _VERSION_FOLDER.match(name):
            for entry in store.list(name):
                store.delete(join(name, entry))
        store.delete(name)  # a folder only when empty: never what someone put there meanwhile
    except StoreError as error:
        logger.warning("staging at %s: could not remove %s, which an earlier staging wrote: %s", store.url, name, error)


def _staged_names(meta: dict | None) -> set[str]:
    """The shard files a dataset's meta names (those staging wrote)."""
    shards = (meta or {}).get("shards") or []
    return {shard["name"] for shard in shards if isinstance(shard, dict) and isinstance(shard.get("name"), str)
            and _SHARD_NAME.fullmatch(shard["name"])}


def _replaced_names(meta: dict) -> set[str]:
    """What a meta lists under ``replaces``: the earlier staging's entries its staging removes after the swap."""
    replaced = meta.get("replaces") or []
    return {name for name in replaced if isinstance(name, str)
            and (_FLAT_SHARD.fullmatch(name) or _VERSION_FOLDER.match(name))}


