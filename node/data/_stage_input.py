"""Staging a file of one's own: CSV, Parquet, NPZ or IDX, with a held-out split and min/max scaling.

``stage_input(source, url, ...)`` reads the file on the driver with Arrow or numpy (no Spark),
picks the label and feature columns, optionally holds out a stratified test split (staged at
``<url>/test``) and scales every feature to [0, 1] with the training part's minimum and maximum
(recorded in ``_meta.json`` under ``scaling`` and applied again wherever a model trained on the
dataset meets new data: :func:`apply_scaling`, ``sparkdbn evaluate`` and ``predict``).  Like every
staging it never replaces what it did not write (:func:`storage.check_stage_destination`).
"""

from __future__ import annotations

import logging
import os
import tempfile
import zipfile
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from storage import (DatasetError, check_split_destination, check_stage_destination, local_path, open_store, read_idx,
                     stage_arrays, stage_split_pair)

from .._errors import InputDataError
from ._frames import features_from_arrow

__all__ = ["INPUT_FORMATS", "input_format", "stage_input", "apply_scaling", "minmax_scaling"]

logger = logging.getLogger(__name__)

INPUT_FORMATS = ("csv", "parquet", "npz", "idx")


def _local_copy(source: str, folder: str) -> str:
    """A local path for ``source``: a path or ``file:`` URL as it is, a store URL (``hdfs://``) copied here."""
    local = local_path(source)
    if local is not None:
        if not os.path.exists(local):
            raise DatasetError(f"--input {source} does not exist")
        return local
    parent, _, name = source.rstrip("/").rpartition("/")
    path = os.path.join(folder, name)
    with open(path, "wb") as handle:
        handle.write(open_store(parent).read_bytes(name))
    return path


def input_format(source: str) -> str:
    """The format :func:`stage_input` reads ``source`` as, by its name: csv, parquet (a local folder too), npz or idx.

    Parameters
    ----------
    source : str
        The input: a path, ``file://`` or a store URL (``hdfs://``).
    """
    return _format_of(local_path(source) or source)


def _format_of(path: str) -> str:
    name = path.lower().removesuffix(".gz")
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".parquet", ".pq")) or os.path.isdir(path):
        return "parquet"
    if name.endswith(".npz"):
        return "npz"
    return "idx"  # train-images-idx3-ubyte[.gz]: checked by its magic number


def _from_table(table: pa.Table, source: str, label_col: str | None,
                features_cols: Sequence[str] | None) -> tuple[np.ndarray, np.ndarray | None, list[str]]:
    names = table.column_names
    if label_col is not None and label_col not in names:
        raise DatasetError(f"{source} has no label column {label_col!r}; its columns are {names[:10]}"
                           f"{' ...' if len(names) > 10 else ''} (--label-col)")
    features = list(features_cols) if features_cols else [name for name in names if name != label_col]
    missing = [name for name in features if name not in names]
    if missing:
        raise DatasetError(f"{source} has no feature column {missing[0]!r} (--features-cols)")
    if not features:
        raise DatasetError(f"{source} has no feature columns besides the label {label_col!r}")
    arrays = [name for name in features if _is_array_column(table.column(name).type)]
    if arrays and len(features) > 1:
        raise DatasetError(f"{source}: feature column {arrays[0]!r} holds arrays, and there are other feature columns "
                           f"({', '.join(name for name in features if name != arrays[0])[:200]}): a column of arrays "
                           "or vectors is the features alone; name it with --features-cols")
    if arrays:  # one column of arrays or Spark vectors (as predict and Spark take them): no column names
        try:
            return features_from_arrow(table.column(arrays[0]), name=arrays[0]), _labels(table, source, label_col), None
        except InputDataError as error:
            raise DatasetError(f"{source}: {error}") from error
    X = np.empty((table.num_rows, len(features)), dtype=np.float32)
    for j, name in enumerate(features):
        column = table.column(name)
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise DatasetError(f"{source}: feature column {name!r} is {column.type}, not numeric")
        if column.null_count:
            raise DatasetError(f"{source}: feature column {name!r} has {column.null_count} missing value(s)")
        X[:, j] = column.to_numpy()
    return X, _labels(table, source, label_col), features


def _is_array_column(kind: pa.DataType) -> bool:
    """An Arrow list of numbers, or the struct a ``pyspark.ml`` Vector is written as."""
    return (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
            or (pa.types.is_struct(kind) and {"type", "size", "indices", "values"} <= {field.name for field in kind}))


def _labels(table: pa.Table, source: str, label_col: str | None) -> np.ndarray | None:
    return _labels_of(table.column(label_col), source, label_col) if label_col is not None else None


def _labels_of(column: pa.ChunkedArray, source: str, name: str) -> np.ndarray:
    """The label column as numbers, booleans or strings (a missing one read as None or NaN, refused later)."""
    if pa.types.is_dictionary(column.type):  # a pandas category: its values are the labels
        column = column.cast(column.type.value_type)
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
            or pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
        raise DatasetError(f"{source}: label column {name!r} is {kind}, not classes (numbers, strings or booleans); "
                           "name another with --label-col, or '' for none")
    return column.to_numpy(zero_copy_only=False)


def _check_labels_present(y: np.ndarray, source: str, what: str, rows: str = "0-based") -> None:
    """Refuse a missing label (None, NaN, an empty or blank string) or one that is no class (Inf, an array
    of another kind), naming ``what`` (the label column) and its first such row, before anything is written."""
    if y.dtype.kind not in "biufUSO":
        raise DatasetError(f"{source}: {what} holds {y.dtype} values, not classes (numbers, strings or booleans)")
    if y.dtype.kind == "f":
        missing = np.isnan(y)
    elif y.dtype.kind in "US":
        missing = np.char.str_len(np.char.strip(y)) == 0
    elif y.dtype.kind == "O":  # Arrow's strings or booleans, None where null
        missing = np.array([value is None or (isinstance(value, str) and not value.strip()) for value in y], dtype=bool)
    else:
        missing = np.zeros(len(y), dtype=bool)
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        raise DatasetError(f"{source}: {what} has {int(missing.sum())} missing label(s) (empty, null or NaN), "
                           f"first at row {row} ({rows}); drop or fill the missing labels before staging")
    if y.dtype.kind == "f" and not np.isfinite(y).all():
        row = int(np.flatnonzero(~np.isfinite(y))[0])
        raise DatasetError(f"{source}: {what} holds {y[row].item()} at row {row} ({rows}), which is no class")


def _check_two_classes(y: np.ndarray, source: str, what: str, unlabelled: str) -> None:
    """Refuse labels that hold a single class, before anything is written.

    A dataset's meta names at least two classes (a meta naming one is refused as one staging never
    writes), and a classifier learns nothing from one: an RBM, which needs no labels, is staged without them.

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
        The labels, none missing (:func:`_check_labels_present` ran first).
    source : str
        The input, as the message names it.
    what : str
        The labels' place in the input (``"label column 'label'"``).
    unlabelled : str
        How to stage the input without labels, for the message.
    """
    classes = np.unique(y)
    if len(classes) == 1:  # no rows at all is refused as empty input, later
        value = classes[0].item() if hasattr(classes[0], "item") else classes[0]
        raise DatasetError(f"{source}: {what} holds one class ({value!r}): a classifier needs at least 2; "
                           f"{unlabelled} for an RBM")


def read_input(source: str, *, label_col: str | None = "label", features_cols: Sequence[str] | None = None,
               labels: str | None = None) -> tuple[np.ndarray, np.ndarray | None, list[str] | None]:
    """``(X, y, feature names)`` of a CSV, Parquet, NPZ (arrays ``X`` and ``y``) or IDX file (``labels``: its labels
    file); an NPZ's or IDX file's ``X`` keeps its per-sample shape (images: ``(n, h, w)`` or ``(n, c, h, w)``)."""
    with tempfile.TemporaryDirectory(prefix="sparkdbn-input-") as folder:
        path = _local_copy(source, folder)
        kind = _format_of(path)
        if kind in ("csv", "parquet"):
            if kind == "csv":
                from pyarrow import csv

                reader = lambda: csv.read_csv(path)  # noqa: E731
            else:
                import pyarrow.parquet as pq

                reader = lambda: pq.read_table(path)  # noqa: E731
            try:
                table = reader()
            except (pa.ArrowInvalid, OSError) as error:
                raise DatasetError(f"{source} cannot be read as {kind}: {error}") from error
            X, y, features = _from_table(table, source, label_col, features_cols)
            if y is not None:
                what = f"label column {label_col!r}"
                rows = "0-based, the header not counted" if kind == "csv" else "0-based"
                _check_labels_present(y, source, what, rows)
                _check_two_classes(y, source, what, "stage without labels (--label-col '')")
            return X, y, features
        if kind == "npz":
            X, y = _read_npz(path, source)
            _check_one_label_per_sample(source, X, y)
            if y is not None:
                _check_labels_present(y, source, "label array 'y'")
                _check_two_classes(y, source, "label array 'y'", "stage an NPZ without its array y")
            return X, y, None
        X = read_idx(path)
        if X.ndim < 2:
            raise DatasetError(f"{source} holds a 1-D IDX array (labels?), not samples")
        y = read_idx(_local_copy(labels, folder)) if labels else None
        _check_one_label_per_sample(source, X, y)
        if y is not None:
            _check_labels_present(y, source, f"labels file {labels}")
            _check_two_classes(y, source, f"labels file {labels}", "stage without --labels")
        return X.astype(np.float32), y, None


def _read_npz(path: str, source: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Arrays ``X`` and ``y`` of an NPZ file, never unpickled: an object array or a file that is no
    NPZ is refused, naming the file."""
    try:
        with np.load(path, allow_pickle=False) as arrays:
            if "X" not in arrays.files:
                raise DatasetError(f"{source} has no array 'X' (it has {arrays.files})")
            X = np.asarray(arrays["X"], dtype=np.float32)
            y = arrays["y"] if "y" in arrays.files else None
    except (ValueError, TypeError, OSError, zipfile.BadZipFile) as error:
        raise DatasetError(f"{source} cannot be read as npz (numpy.savez's arrays of numbers or strings, no "
                           f"objects): {type(error).__name__}: {error}") from error
    return X, y


def _check_one_label_per_sample(source: str, X: np.ndarray, y: np.ndarray | None) -> None:
    if y is not None and (y.ndim != 1 or len(y) != len(X)):
        raise DatasetError(f"{source}: the labels have shape {y.shape} for {len(X)} samples; expected ({len(X)},)")


def minmax_scaling(X: np.ndarray) -> dict[str, Any]:
    """The per-feature minimum and maximum of ``X`` (n, d), as recorded in ``_meta.json``."""
    return {"kind": "minmax", "min": X.min(axis=0).astype(float).tolist(), "max": X.max(axis=0).astype(float).tolist()}


def apply_scaling(X: np.ndarray, scaling: dict[str, Any] | None) -> np.ndarray:
    """``(X - min) / (max - min)`` clipped to [0, 1] (a constant feature becomes 0); X unchanged without scaling."""
    if not scaling:
        return X
    if scaling.get("kind") != "minmax":
        raise DatasetError(f"unknown scaling {scaling.get('kind')!r} in the dataset's _meta.json")
    low, high = np.asarray(scaling["min"], dtype=np.float64), np.asarray(scaling["max"], dtype=np.float64)
    if X.shape[1:] != low.shape:
        raise DatasetError(f"the data has {X.shape[1:]} features per sample; the dataset's scaling has {low.shape}")
    span = np.where(high > low, high - low, 1.0)
    return np.clip((X - low) / span, 0.0, 1.0).astype(np.float32)


def _class_indices(y: np.ndarray) -> tuple[np.ndarray, list[Any] | None]:
    """Labels as class indices ``0 .. k-1``, and the original labels when they were anything else."""
    classes, indices = np.unique(y, return_inverse=True)
    if np.issubdtype(classes.dtype, np.number) and np.array_equal(classes, np.arange(len(classes))):
        return indices.astype(np.int64), None
    return indices.astype(np.int64), [value.item() if hasattr(value, "item") else value for value in classes]


def image_shape(sample_shape: Sequence[int]) -> tuple[int, ...] | None:
    """The ``(channels, height, width)`` of samples of ``sample_shape``: ``(h, w)`` images have one channel;
    None for flat rows (whose image shape no file says)."""
    if len(sample_shape) == 2:
        return (1, *map(int, sample_shape))
    if len(sample_shape) == 3:
        return tuple(map(int, sample_shape))
    return None


def stage_input(source: str, url: str, *, label_col: str | None = "label", features_cols: Sequence[str] | None = None,
                labels: str | None = None, test_fraction: float | None = None, scale: str | None = None,
                shards: int | None = None, overwrite: bool = False, seed: int = 0) -> dict:
    """Stage ``source`` at ``url`` (held-out split at ``url/test``); returns the training part's meta."""
    if scale not in (None, "minmax"):
        raise DatasetError(f"--scale {scale!r}: the one scaling is minmax")
    if test_fraction is not None and not 0.0 < test_fraction < 1.0:
        raise DatasetError(f"--test-fraction must lie in (0, 1), got {test_fraction}")
    store = open_store(url)
    if test_fraction:  # both checked before anything is written
        check_split_destination(store, overwrite=overwrite)
    else:
        check_stage_destination(store, overwrite=overwrite)
    X, y, feature_names = read_input(source, label_col=label_col, features_cols=features_cols, labels=labels)
    extra: dict[str, Any] = {"source": f"input:{source}", "feature_names": feature_names}
    images = image_shape(X.shape[1:])
    if images is not None:  # staged flat, as every model takes rows; the images' shape kept for a convnet
        extra["image_shape"] = list(images)
    X = X.reshape(len(X), -1)
    if y is not None:
        y, classes = _class_indices(y)
        if classes is not None:
            extra["classes"] = classes  # class index k stands for classes[k]
    # Shuffled (seeded) before they are cut into shards, the training partitions: rows sorted or grouped by label
    # would give each node a few classes (digits sorted by label: 0.93 held out instead of 0.97).
    train_rows = np.random.default_rng(seed).permutation(len(X))
    if test_fraction:
        from sklearn.model_selection import train_test_split

        try:
            train_rows, test_rows = train_test_split(train_rows, test_size=test_fraction, random_state=seed,
                                                     stratify=None if y is None else y[train_rows])
        except ValueError as error:
            raise DatasetError(f"--test-fraction {test_fraction}: no stratified split of {source}: {error}") from error
    if scale == "minmax":
        extra["scaling"] = minmax_scaling(X[train_rows])  # the training part's range: nothing leaks from the test
        X = apply_scaling(X, extra["scaling"])
    ys = (lambda rows: None if y is None else y[rows])
    if test_fraction:
        meta, _ = stage_split_pair(store, (X[train_rows], ys(train_rows)), (X[test_rows], ys(test_rows)),
                                   shards=shards, test_shards=min(shards or 1, len(test_rows)), extra_meta=extra,
                                   train_meta={"test_fraction": test_fraction, "seed": seed}, overwrite=overwrite)
    else:
        meta = stage_arrays(store, X[train_rows], ys(train_rows), shards=shards, overwrite=overwrite, extra_meta=extra)
    logger.info("staged %s at %s: %d training rows%s", source, store.url, len(train_rows),
                f", {len(X) - len(train_rows)} held out" if test_fraction else "")
    return meta
