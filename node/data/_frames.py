"""The one way a Spark DataFrame's features and labels become numpy arrays: Arrow batches.

Training (:mod:`node.data._prepare`), evaluation, inference and DataFrame staging all select the
features column (``array<number>`` or a ``pyspark.ml.linalg`` Vector) and the label column,
let Spark hand them over as Arrow record batches (``mapInArrow`` on the executors, ``toArrow``
on the driver), and convert each column here, vectorised, never row by row in Python.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pyspark import RDD
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import DataFrame
from pyspark.sql.types import ArrayType, BinaryType, BooleanType, NumericType, StringType

from .._errors import InputDataError

__all__ = ["is_dataframe", "is_rdd", "feature_column_kind", "check_label_column", "features_from_arrow",
           "labels_from_arrow"]


def is_dataframe(data: Any) -> bool:
    """True for a ``pyspark.sql.DataFrame``."""
    return isinstance(data, DataFrame)


def is_rdd(data: Any) -> bool:
    """True for a ``pyspark.RDD``."""
    return isinstance(data, RDD)


def feature_column_kind(df: Any, features_col: str) -> Literal["array", "vector"]:
    """Check that ``features_col`` exists and holds number arrays or ml Vectors; say which.

    Raises
    ------
    InputDataError (a ValueError)
        Missing column (naming the columns there are) or a column of another type.
    """
    if features_col not in df.columns:
        scalars = [field.name for field in df.schema.fields if isinstance(field.dataType, NumericType)]
        hint = ("; gather scalar feature columns into one with pyspark.ml.feature.VectorAssembler"
                if len(scalars) > 1 else "")
        raise InputDataError(f"DataFrame has no features column {features_col!r}; its columns are {df.columns}{hint}")
    data_type = df.schema[features_col].dataType
    if isinstance(data_type, VectorUDT):
        return "vector"
    if isinstance(data_type, ArrayType) and isinstance(data_type.elementType, NumericType):
        return "array"
    staged = ("; a staged dataset's shards hold their features as bytes: read it with "
              "storage.open_dataset(url).read_all(), or evaluate on it with node.evaluate(model, url)"
              if isinstance(data_type, BinaryType) else "")
    raise InputDataError(
        f"features column {features_col!r} has type {data_type.simpleString()}; "
        f"expected array<float|double> or a pyspark.ml.linalg Vector (use VectorAssembler for scalar columns){staged}"
    )


def check_label_column(df: Any, label_col: str) -> None:
    """Labels are numbers, booleans or strings (the class set is whatever values the column holds)."""
    if label_col not in df.columns:
        raise InputDataError(f"DataFrame has no label column {label_col!r}; its columns are {df.columns}")
    data_type = df.schema[label_col].dataType
    if not isinstance(data_type, (NumericType, BooleanType, StringType)):
        raise InputDataError(f"label column {label_col!r} has type {data_type.simpleString()}; "
                             "expected numbers, booleans or strings")


def features_from_arrow(column: Any, *, name: str = "features", dtype: Any = np.float32) -> np.ndarray:
    """A feature matrix from an Arrow column of arrays or of ``pyspark.ml.linalg`` vectors.

    Parameters
    ----------
    column : pyarrow.Array or ChunkedArray
        ``list<number>`` / ``fixed_size_list<number>`` (array features), or the struct
        ``{type, size, indices, values}`` that Spark uses for ``VectorUDT`` (type 1 = dense,
        0 = sparse; mixed rows are fine).
    name : str
        Column name for messages.
    dtype : numpy dtype
        Of the result (float32 by default; Spark vectors hold doubles).

    Returns
    -------
    ndarray of shape (n_rows, n_features)

    Raises
    ------
    InputDataError (a ValueError)
        Null rows, rows of different widths, or a column type that is not a feature vector.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n_rows = len(column)
    if column.null_count:
        row = int(np.flatnonzero(np.asarray(column.is_null()))[0])
        raise InputDataError(f"column {name!r} is null at row {row} of a batch; drop or fill missing features")
    if pa.types.is_struct(column.type) and {"type", "size", "indices", "values"} <= {f.name for f in column.type}:
        return _vectors_from_arrow(column, name, dtype)
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type) or pa.types.is_fixed_size_list(column.type)):
        raise InputDataError(f"column {name!r} has Arrow type {column.type}; expected an array of numbers or a Vector")
    if n_rows == 0:
        return np.zeros((0, 0), dtype=dtype)
    lengths = np.asarray(column.value_lengths())
    if (lengths != lengths[0]).any():
        row = int(np.flatnonzero(lengths != lengths[0])[0])
        raise InputDataError(f"column {name!r} has rows of different widths ({lengths[0]} and {lengths[row]} at row {row})")
    values = column.flatten()  # honours slicing offsets
    if values.null_count:
        raise InputDataError(f"column {name!r} holds null values inside a feature array")
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=dtype).reshape(n_rows, int(lengths[0]))


def _vectors_from_arrow(column: Any, name: str, dtype: Any) -> np.ndarray:
    """Decode Spark's VectorUDT struct column; vectorised, no Python loop over rows."""
    n_rows = len(column)
    kind = np.asarray(column.field("type").to_numpy(zero_copy_only=False))
    values_list = column.field("values")
    lengths = np.asarray(values_list.value_lengths().fill_null(0))
    values = np.asarray(values_list.flatten().to_numpy(zero_copy_only=False), dtype=dtype)
    sparse = kind == 0
    widths = np.where(sparse, np.asarray(column.field("size").fill_null(0)), lengths)
    if n_rows == 0:
        return np.zeros((0, 0), dtype=dtype)
    if (widths != widths[0]).any():
        row = int(np.flatnonzero(widths != widths[0])[0])
        raise InputDataError(f"column {name!r} has vectors of different sizes ({widths[0]} and {widths[row]} at row {row})")
    X = np.zeros((n_rows, int(widths[0])), dtype=dtype)
    rows = np.repeat(np.arange(n_rows), lengths)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    positions = np.arange(len(values)) - starts  # index inside each row's values
    if sparse.any():
        index_list = column.field("indices")
        index_lengths = np.asarray(index_list.value_lengths().fill_null(0))
        indices = np.asarray(index_list.flatten().to_numpy(zero_copy_only=False), dtype=np.int64)
        # Dense rows carry no indices, so sparse indices line up with the sparse rows' values.
        sparse_values = np.repeat(sparse, lengths)
        if not np.array_equal(index_lengths[sparse], lengths[sparse]):
            raise InputDataError(f"column {name!r} holds a malformed sparse vector (indices and values differ in length)")
        positions = positions.copy()
        positions[sparse_values] = indices
    X[rows, positions] = values
    return X


def labels_from_arrow(column: Any, *, name: str = "label") -> np.ndarray:
    """A label vector from an Arrow column of numbers, booleans or strings, keeping the column's type.

    Integer columns give integers, floating columns floats, boolean columns ``bool``, string columns
    ``str`` arrays (never ``object``), exactly as scikit-learn would see the same values.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count:
        row = int(np.flatnonzero(np.asarray(column.is_null()))[0])
        raise InputDataError(f"label column {name!r} is null at row {row} of a batch; drop or fill missing labels")
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return np.asarray(column.to_pylist(), dtype=str)
    if pa.types.is_integer(column.type) or pa.types.is_floating(column.type) or pa.types.is_boolean(column.type):
        return np.asarray(column.to_numpy(zero_copy_only=False))
    if pa.types.is_decimal(column.type):
        return np.asarray(column.cast(pa.float64()).to_numpy(zero_copy_only=False))
    raise InputDataError(f"label column {name!r} has Arrow type {column.type}; expected numbers, booleans or strings")
