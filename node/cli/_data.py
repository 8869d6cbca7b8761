"""The dataset a run trained on, as the command line uses it: held-out split and scaling by default.

A run's record names its data (``data.source``: ``"dataset <url>"`` for a staged dataset); the
dataset's ``_meta.json`` holds the held-out split (``splits.test``) and the scaling applied when it
was staged (``scaling``), so ``sparkdbn evaluate --run ID`` evaluates on that split and ``evaluate``
/ ``predict`` with ``--input`` scale new data the same way.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.types import ArrayType, DoubleType, StructField, StructType

import storage

from ..data import apply_scaling, feature_column_kind, features_from_arrow

__all__ = ["SCALED_COL", "run_dataset_url", "held_out_split", "dataset_scaling", "scale_frame"]

_PREFIX = "dataset "


def run_dataset_url(record: dict | None) -> str | None:
    """The staged dataset URL a run trained on, or None (arrays, a DataFrame, an RDD)."""
    source = str(((record or {}).get("data") or {}).get("source") or "")
    return source[len(_PREFIX):] if source.startswith(_PREFIX) else None


def held_out_split(url: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(X_test, y_test)`` of the dataset's held-out split (``<url>/test``), None when it has none."""
    split = storage.open_split(url, "test")  # refuses a split staged by another staging than the training set
    return None if split is None else split.read_all()


def dataset_scaling(url: str | None) -> dict | None:
    """The scaling recorded in the dataset's ``_meta.json`` (None without one)."""
    return storage.open_dataset(url).meta.get("scaling") if url else None


#: The column that holds scaled features while a model meets them; dropped from what is written.
SCALED_COL = "_sparkdbn_scaled_features"


def scale_frame(df: Any, features_col: str, scaling: dict | None) -> tuple[Any, str]:
    """``(frame, column)``: ``df`` plus :data:`SCALED_COL`, ``features_col`` scaled as the dataset was
    (``array<double>``), and that column's name; ``(df, features_col)`` without scaling.  The user's own
    columns pass through unchanged."""
    if not scaling:
        return df, features_col
    feature_column_kind(df, features_col)  # a column of another type is said now, not by every task
    fields = list(df.schema.fields) + [StructField(SCALED_COL, ArrayType(DoubleType(), False), False)]

    def scale(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            X = apply_scaling(features_from_arrow(batch.column(features_col), name=features_col, dtype=np.float64),
                              scaling).astype(np.float64)
            n_rows, width = X.shape
            offsets = pa.array(np.arange(0, (n_rows + 1) * width, width, dtype=np.int32))
            scaled = pa.ListArray.from_arrays(offsets, pa.array(X.reshape(-1), type=pa.float64()))
            yield pa.RecordBatch.from_arrays([*batch.columns, scaled], names=[*batch.schema.names, SCALED_COL])

    return df.mapInArrow(scale, StructType(fields)), SCALED_COL
