"""Staging from files, Spark DataFrames and built-in recipes; all end in :func:`stage_arrays`."""

from __future__ import annotations

import gzip
import logging
import os
from typing import Any

import numpy as np
import pyarrow as pa

from ._datasets import stage_arrays
from ._errors import DatasetError
from ._store import Store, open_store

__all__ = ["RECIPES", "stage_csv", "stage_dataframe", "stage_idx", "stage_recipe"]

logger = logging.getLogger(__name__)

RECIPES = ("digits", "digits28")
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def stage_csv(
    url: "str | Store",
    path: str | os.PathLike,
    *,
    label_column: str | int | None = "label",
    header: bool = True,
    dtype: str = "float32",
    **stage_options: Any,
) -> dict:
    """Stage a CSV file: one sample per row, every column but the label a feature.

    Parameters
    ----------
    label_column : str, int or None
        Name (or index) of the label column; None for unlabelled data.
    header : bool
        Whether the first line names the columns (else columns are f0, f1, ...).
    dtype : str
        Feature dtype to store.
    **stage_options
        Passed to :func:`stage_arrays` (``shards``, ``shard_rows``, ``progress``, ...).
    """
    from pyarrow import csv

    path = os.fspath(path)
    read_options = csv.ReadOptions(autogenerate_column_names=not header)
    try:
        table = csv.read_csv(path, read_options=read_options)
    except pa.ArrowInvalid as exc:  # ragged rows, empty file, unparsable numbers
        raise DatasetError(f"CSV {path} cannot be parsed: {exc}") from exc
    names = table.column_names
    if not header:
        table = table.rename_columns([f"f{i}" for i in range(len(names))])
        names = table.column_names
    if isinstance(label_column, int):
        if not -len(names) <= label_column < len(names):
            raise DatasetError(f"CSV {path} has {len(names)} columns; label column index {label_column} is out of range")
        label_column = names[label_column]
    if label_column is not None and label_column not in names:
        raise DatasetError(f"CSV {path} has no label column {label_column!r}; its columns are {names[:10]}"
                           f"{' ...' if len(names) > 10 else ''} (pass label_column=..., or None for no labels)")
    feature_names = [name for name in names if name != label_column]
    if not feature_names:
        raise DatasetError(f"CSV {path} has no feature columns besides the label")
    for name in names:
        column = table.column(name)
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type) or pa.types.is_null(column.type)):
            raise DatasetError(f"CSV {path}: column {name!r} is {column.type}, not numeric")
        if column.null_count:
            row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise DatasetError(f"CSV {path}: column {name!r} has {column.null_count} missing value(s), first at data row {row}")
    if table.num_rows == 0:
        raise DatasetError(f"empty input: CSV {path} has no data rows")
    X = np.empty((table.num_rows, len(feature_names)), dtype=dtype)
    for j, name in enumerate(feature_names):
        X[:, j] = table.column(name).to_numpy()
    y = table.column(label_column).to_numpy() if label_column is not None else None
    return stage_arrays(url, X, y, extra_meta={"source": f"csv:{os.path.basename(path)}"}, **stage_options)


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an MNIST-style IDX file (optionally .gz) into a native-endian array."""
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as handle:
        data = handle.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise DatasetError(f"{path} is not an IDX file (bad magic number {data[:4].hex()})")
    ndim = data[3]
    dims = np.frombuffer(data, dtype=">u4", count=ndim, offset=4).astype(int)
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    expected = int(np.prod(dims)) * dtype.itemsize
    body = data[4 + 4 * ndim:]
    if len(body) != expected:
        raise DatasetError(f"{path}: header promises {tuple(dims)} {dtype.name} ({expected} bytes), file has {len(body)}")
    return np.frombuffer(body, dtype=dtype).reshape(dims).astype(dtype.newbyteorder("="))


def stage_idx(
    url: "str | Store",
    images: str | os.PathLike,
    labels: str | os.PathLike | None = None,
    *,
    flatten: bool = True,
    scale: bool = True,
    **stage_options: Any,
) -> dict:
    """Stage MNIST-style IDX files (``train-images-idx3-ubyte[.gz]`` and labels).

    Parameters
    ----------
    flatten : bool
        Store (n, H*W) instead of (n, H, W).
    scale : bool
        Turn uint8 pixels into float32 in [0, 1] (divide by 255).
    """
    X = read_idx(images)
    if X.ndim == 1:
        raise DatasetError(f"{images} holds a 1-D array (labels?), not images")
    if scale and X.dtype == np.uint8:
        X = X.astype(np.float32) / np.float32(255.0)
    if flatten:
        X = X.reshape(len(X), -1)
    y = read_idx(labels) if labels is not None else None
    if y is not None and len(y) != len(X):
        raise DatasetError(f"{labels} has {len(y)} labels but {images} has {len(X)} images")
    source = {"source": f"idx:{os.path.basename(os.fspath(images))}"}
    return stage_arrays(url, X, y, extra_meta=source, **stage_options)


def _arrow_list_to_numpy(column: pa.ChunkedArray, name: str, dtype: str) -> np.ndarray:
    """A list<number> column (equal lengths) as an (n, width) array, without per-row Python loops."""
    array = column.combine_chunks()
    if array.null_count:
        row = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise DatasetError(f"column {name!r} has {array.null_count} null row(s), first at row {row}")
    if pa.types.is_fixed_size_list(array.type):
        width = array.type.list_size
    elif pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        offsets = array.offsets.to_numpy()
        lengths = np.diff(offsets)
        if len(lengths) and (lengths != lengths[0]).any():
            row = int(np.flatnonzero(lengths != lengths[0])[0])
            raise DatasetError(f"ragged rows in column {name!r}: row 0 has {lengths[0]} values, row {row} has {lengths[row]}")
        width = int(lengths[0]) if len(lengths) else 0
    else:
        raise DatasetError(f"column {name!r} has type {array.type}; expected an array or ml Vector of numbers")
    values = array.flatten()
    if values.null_count:
        raise DatasetError(f"column {name!r} contains null values inside its arrays")
    return values.to_numpy(zero_copy_only=False).astype(dtype, copy=False).reshape(len(array), width)


def stage_dataframe(
    url: "str | Store",
    df: Any,
    features_col: str = "features",
    label_col: str | None = "label",
    *,
    dtype: str = "float32",
    feature_shape: tuple[int, ...] | None = None,
    **stage_options: Any,
) -> dict:
    """Stage a Spark DataFrame whose features column is an array or a ``pyspark.ml`` Vector.

    The rows travel to the driver as Arrow record batches (``DataFrame.toArrow``), one
    partition at a time, and are converted column-wise; nothing is done per row in Python.

    Parameters
    ----------
    features_col, label_col : str
        Column names (``label_col=None`` for unlabelled data).
    dtype : str
        Feature dtype to store (Spark vectors hold doubles).
    feature_shape : tuple of int, optional
        Reshape each sample, e.g. ``(1, 28, 28)``.
    """
    from pyspark.ml.functions import vector_to_array
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import functions as F

    missing = [c for c in (features_col, label_col) if c is not None and c not in df.columns]
    if missing:
        raise DatasetError(f"DataFrame has no column(s) {missing}; its columns are {df.columns}")
    features = F.col(features_col)
    if isinstance(df.schema[features_col].dataType, VectorUDT):
        features = vector_to_array(features, "float64")
    columns = [features.alias("features")] + ([F.col(label_col).alias("label")] if label_col else [])
    selected = df.select(*columns)
    if hasattr(selected, "toArrow"):  # pyspark >= 4.0
        table = selected.toArrow()
    else:  # pyspark 3.5: the same Arrow collection, private name
        table = pa.Table.from_batches(selected._collect_as_arrow())
    if table.num_rows == 0:
        raise DatasetError("empty input: the DataFrame has no rows")
    X = _arrow_list_to_numpy(table.column("features"), features_col, dtype)
    if feature_shape is not None:
        X = X.reshape((len(X), *feature_shape))
    y = None
    if label_col:
        label = table.column("label")
        if label.null_count:
            raise DatasetError(f"label column {label_col!r} has {label.null_count} null value(s)")
        if not (pa.types.is_integer(label.type) or pa.types.is_floating(label.type)):
            raise DatasetError(f"label column {label_col!r} has type {label.type}; expected integer class ids")
        y = label.to_numpy()
    return stage_arrays(url, X, y, extra_meta={"source": "spark-dataframe"}, **stage_options)


def stage_recipe(recipe: str, url: "str | Store", *, shards: int | None = None, random_state: int = 0,
                 **stage_options: Any) -> dict:
    """Stage a built-in dataset: training split at ``url``, held-out split at ``url/test``.

    Recipes: ``"digits"`` (scikit-learn's 8x8 digits, (n, 64) float32 in [0, 1]) and
    ``"digits28"`` (the same digits upsampled to 28x28, training images augmented with
    integer shifts, held-out images never augmented nor in training; (n, 784) float32).
    Both are deterministic for a given ``random_state``.  The held-out split has one shard
    per ``shards`` too when it is large enough, else fewer.

    Returns
    -------
    dict
        The meta of the training split; ``meta["splits"]["test"]`` is the relative path of
        the held-out split (open it with ``open_dataset(url + "/test")``).
    """
    from rbm import datasets

    if recipe == "digits":
        split = datasets.load_digits01(random_state=random_state)
    elif recipe == "digits28":
        split = datasets.load_digits28(random_state=random_state)
    else:
        raise DatasetError(f"unknown recipe {recipe!r}; known recipes: {', '.join(RECIPES)}")
    store = open_store(url, user=stage_options.pop("user", None), retry_timeout_s=stage_options.pop("retry_timeout_s", 30.0))
    name = stage_options.pop("name", recipe)
    extra = {"source": f"recipe:{recipe}", "random_state": random_state}
    test_shards = None if shards is None else min(shards, len(split.X_test))
    test_meta = stage_arrays(store.child("test"), split.X_test, split.y_test, shards=test_shards,
                             name=f"{name}-test", extra_meta={**extra, "split": "test"}, **stage_options)
    meta = stage_arrays(store, split.X_train, split.y_train, shards=shards, name=name,
                        extra_meta={**extra, "split": "train", "splits": {"test": "test"}}, **stage_options)
    logger.info("recipe %s: %d training samples at %s, %d held out at %s/test", recipe, meta["n_samples"],
                store.url, test_meta["n_samples"], store.url)
    return meta
