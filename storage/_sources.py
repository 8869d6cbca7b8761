"""Staging from files (CSV, IDX); both end in :func:`stage_arrays`.

Spark DataFrames and the built-in recipes are staged by ``node`` (``node.stage_dataframe``,
``node.stage_recipe``): storage knows neither Spark nor the models.
"""

from __future__ import annotations

import gzip
import logging
import os
from typing import Any

import numpy as np
import pyarrow as pa

from ._dataset_staging import stage_arrays
from ._errors import DatasetError
from ._store import Store

__all__ = ["read_idx", "stage_csv", "stage_idx"]

logger = logging.getLogger(__name__)

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
