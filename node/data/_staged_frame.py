"""A staged dataset as a Spark DataFrame: its shards read on the executors, one partition per shard.

What ``sparkdbn predict --dataset URL`` predicts on.  Each task reads its shard from the store
(verified against the sha256 in ``_meta.json``, as training reads it) and hands Spark the rows as
Arrow record batches: ``row`` (the row's place in the dataset, shard after shard), ``features``
(``array<float>``, each sample flattened) and ``label`` (when labelled: as staged, the class names
where the dataset's meta names its ``classes``).
The shards hold the features as staged, scaled already when the dataset was staged with ``--scale``.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pyarrow as pa

import storage

__all__ = ["STAGED_BATCH_ROWS", "read_staged_frame"]

#: Rows per Arrow record batch a shard is handed to Spark in (bounded memory per batch).
STAGED_BATCH_ROWS = 4096


def read_staged_frame(spark: Any, dataset: storage.Dataset) -> Any:
    """The rows of ``dataset`` (:func:`storage.open_dataset`) as a DataFrame read on the executors.

    Returns
    -------
    pyspark.sql.DataFrame
        Columns ``row`` (long), ``features`` (``array<float>`` of ``prod(feature_shape)`` values)
        and, for a labelled dataset, ``label`` (the labels as staged: string, long or double); one partition
        per shard, rows in staged order.
    """
    counts = [int(shard["rows"]) for shard in dataset.meta["shards"]]
    firsts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    labelled = bool(dataset.meta.get("label_column"))
    label_type = _label_type(dataset.classes)
    schema = "row long, features array<float>" + (f", label {label_type}" if labelled else "")
    arrow_label_type = {"string": pa.string(), "double": pa.float64(), "long": pa.int64()}[label_type]

    def read_shards(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            for shard in batch.column(0).to_pylist():
                X, y = dataset.read_shard(int(shard))
                X = X.reshape(len(X), -1).astype(np.float32, copy=False)
                for start in range(0, len(X), STAGED_BATCH_ROWS):
                    part = X[start : start + STAGED_BATCH_ROWS]
                    offsets = pa.array(np.arange(0, (len(part) + 1) * part.shape[1], part.shape[1], dtype=np.int32))
                    columns = [pa.array(np.arange(len(part), dtype=np.int64) + firsts[shard] + start),
                               pa.ListArray.from_arrays(offsets, pa.array(part.reshape(-1), type=pa.float32()))]
                    if labelled:
                        columns.append(pa.array(y[start : start + STAGED_BATCH_ROWS], type=arrow_label_type))
                    yield pa.RecordBatch.from_arrays(columns, names=["row", "features", "label"][: len(columns)])

    shards = dataset.num_shards
    return spark.range(shards, numPartitions=shards).mapInArrow(read_shards, schema)


def _label_type(classes: np.ndarray | None) -> str:
    """The Spark SQL type of a staged dataset's labels: its classes' (strings or numbers), else its class indices'."""
    if classes is None or classes.dtype.kind in "iu":
        return "long"
    return "string" if classes.dtype.kind in "US" else "double"
