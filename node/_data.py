"""Training data -> one cached RDD element per partition, validated before training.

Accepted inputs (see :func:`prepare_training_data`):

* numpy arrays ``X`` (n, *shape) and ``y`` (n,), split on the driver;
* an RDD of ``(features, label)`` rows (features: array, list or ``pyspark.ml.linalg`` vector);
* a DataFrame with an array or ``pyspark.ml.linalg`` Vector features column and a label
  column, moved per partition through Arrow (``mapInArrow``), never row by row;
* a staged dataset URL (a directory written by :func:`storage.stage_arrays`): each
  executor reads its own shard from the store, one shard per partition.

Every partition becomes one element ``(index, summary, payload)``: ``payload`` holds the
partition's ``X`` and ``y`` as ``.npy`` bytes (decoded with ``allow_pickle=False``) and
``summary`` is a small dict (rows, per-sample shape, first NaN row, label range).  The
driver collects the summaries -- which also fills the cache -- and raises
:class:`~node.InputDataError` naming the partition and row before any training starts.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np

from ._errors import InputDataError, short_error

__all__ = ["PreparedData", "prepare_training_data", "encode_block", "decode_block", "iter_blocks"]

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- encoding
def encode_block(X: np.ndarray, y: np.ndarray | None) -> bytes:
    """``X`` (rows, *shape) and optional ``y`` (rows,) as bytes: a flag, then ``.npy`` records."""
    buffer = io.BytesIO()
    buffer.write(b"\x01" if y is not None else b"\x00")
    np.save(buffer, np.ascontiguousarray(X), allow_pickle=False)
    if y is not None:
        np.save(buffer, np.ascontiguousarray(y), allow_pickle=False)
    return buffer.getvalue()


def decode_block(payload: bytes) -> tuple[np.ndarray, np.ndarray | None]:
    """Inverse of :func:`encode_block` (never unpickles)."""
    buffer = io.BytesIO(payload)
    has_labels = buffer.read(1) == b"\x01"
    X = np.load(buffer, allow_pickle=False)
    y = np.load(buffer, allow_pickle=False) if has_labels else None
    return X, y


def iter_blocks(elements: Iterable[tuple[int, dict, bytes]]) -> Iterator[tuple[int, np.ndarray, np.ndarray | None]]:
    """Decode the ``(index, summary, payload)`` elements of a prepared partition."""
    for index, summary, payload in elements:
        if summary.get("rows", 0):
            X, y = decode_block(payload)
            yield index, X, y


def summarize_block(index: int, X: np.ndarray, y: np.ndarray | None, error: str | None = None) -> dict:
    """The per-partition facts the driver validates (JSON-able, small)."""
    summary: dict[str, Any] = {"partition": index, "rows": int(len(X)), "shape": list(X.shape[1:]), "error": error}
    if len(X):
        flat = X.reshape(len(X), -1)
        bad_rows = ~np.isfinite(flat).all(axis=1)
        summary["nan_row"] = int(np.flatnonzero(bad_rows)[0]) if bad_rows.any() else None
    if y is not None and len(y):
        integral = np.issubdtype(y.dtype, np.integer) or bool(np.all(np.isfinite(y)) and np.all(y == np.round(y)))
        summary["labels_integral"] = integral
        if integral:
            labels = y.astype(np.int64)
            summary["label_min"], summary["label_max"] = int(labels.min()), int(labels.max())
            summary["label_min_row"] = int(np.argmin(labels))
            summary["label_max_row"] = int(np.argmax(labels))
    summary["has_labels"] = y is not None
    return summary


def _element(index: int, X: np.ndarray, y: np.ndarray | None, error: str | None = None) -> tuple[int, dict, bytes]:
    summary = summarize_block(index, X, y, error)
    if y is not None and summary.get("labels_integral") and not np.issubdtype(y.dtype, np.integer):
        y = y.astype(np.int64)  # Arrow and DataFrames carry labels as doubles
    return index, summary, encode_block(X, y) if error is None else b""


def _empty_element(index: int, error: str | None = None) -> tuple[int, dict, bytes]:
    return index, {"partition": index, "rows": 0, "shape": None, "error": error, "has_labels": False}, b""


# ----------------------------------------------------------------------------- executors
def _rows_to_element(index: int, rows: Iterator[Any]) -> Iterator[tuple[int, dict, bytes]]:
    """An RDD partition of ``(features, label)`` rows (or bare features) -> one element."""
    features: list[np.ndarray] = []
    labels: list[Any] = []
    has_labels: bool | None = None
    for row in rows:
        if isinstance(row, tuple) and len(row) == 2:
            vector, label = row
            has_labels = True if has_labels is None else has_labels
            labels.append(label)
        else:
            vector, has_labels = row, False
        to_array = getattr(vector, "toArray", None)  # pyspark.ml.linalg / mllib vectors
        features.append(np.asarray(to_array() if to_array is not None else vector, dtype=np.float32))
    if not features:
        yield _empty_element(index)
        return
    shapes = {array.shape for array in features}
    if len(shapes) > 1:
        first = features[0].shape
        row = next(i for i, array in enumerate(features) if array.shape != first)
        yield _empty_element(index, f"rows have different feature shapes ({first} at row 0, "
                                    f"{features[row].shape} at row {row})")
        return
    X = np.stack(features)
    y = np.asarray(labels) if has_labels else None
    if y is not None and y.dtype == object:
        yield _empty_element(index, "labels are not numbers")
        return
    yield _element(index, X, y)


def _arrow_batches_to_blocks(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` body: features (list<float>) + label columns -> one binary block per batch."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for batch in batches:
        features = batch.column(0)
        labels = batch.column(1) if batch.num_columns > 1 else None
        error = None
        X = np.zeros((0, 0), dtype=np.float32)
        if features.null_count:
            row = int(np.flatnonzero(np.asarray(features.is_null()))[0])
            error = f"features column is null at row {row} of a batch"
        elif len(features):
            widths = np.asarray(pc.list_value_length(features))
            if (widths != widths[0]).any():
                row = int(np.flatnonzero(widths != widths[0])[0])
                error = f"rows have different feature widths ({widths[0]} and {widths[row]} at row {row} of a batch)"
            else:
                X = np.asarray(features.flatten(), dtype=np.float32).reshape(len(features), int(widths[0]))
        y = None
        if labels is not None and error is None:
            if labels.null_count:
                error = "label column holds nulls"
            else:
                y = np.asarray(labels.to_numpy(zero_copy_only=False), dtype=np.float64)
        payload = encode_block(X, y) if error is None else b""
        yield pa.RecordBatch.from_arrays([pa.array([payload], pa.binary()), pa.array([error], pa.string())],
                                         names=["payload", "error"])


def _arrow_blocks_to_element(index: int, rows: Iterator[Any]) -> Iterator[tuple[int, dict, bytes]]:
    """Concatenate one partition's per-batch blocks into the partition element."""
    parts_X, parts_y = [], []
    for row in rows:
        if row["error"]:
            yield _empty_element(index, row["error"])
            return
        X, y = decode_block(row["payload"])
        if len(X):
            parts_X.append(X)
            parts_y.append(y)
    if not parts_X:
        yield _empty_element(index)
        return
    if len({X.shape[1:] for X in parts_X}) > 1:
        yield _empty_element(index, "batches of this partition have different feature widths")
        return
    y = None if parts_y[0] is None else np.concatenate(parts_y)
    yield _element(index, np.concatenate(parts_X), y)


def _read_shard(dataset: Any, index: int, _rows: Iterator[Any]) -> Iterator[tuple[int, dict, bytes]]:
    """Read shard ``index`` of a staged dataset from the store (runs on an executor)."""
    X, y = dataset.read_shard(index)
    yield _element(index, np.asarray(X, dtype=np.float32), y)


# ----------------------------------------------------------------------------- driver
@dataclass
class PreparedData:
    """Validated training data: one cached RDD element ``(index, summary, payload)`` per partition.

    Attributes
    ----------
    blocks : pyspark.RDD
        Cached; elements as described in the module docstring.
    n_samples : int
        Rows over all partitions.
    feature_shape : tuple of int
        Per-sample shape, e.g. ``(64,)`` or ``(1, 28, 28)``.
    n_classes : int or None
        ``max(label) + 1`` over the data (or the staged dataset's ``n_classes``); None without labels.
    partitions : int
        Number of partitions (non-empty or not).
    rows_per_partition : list of int
    source : str
        What the data came from, for messages and the run record.
    """

    blocks: Any
    n_samples: int
    feature_shape: tuple[int, ...]
    n_classes: int | None
    partitions: int
    rows_per_partition: list[int]
    source: str

    def unpersist(self) -> None:
        """Drop the cached partitions."""
        self.blocks.unpersist()


def _split_arrays(X: np.ndarray, y: np.ndarray | None, partitions: int, rng: np.random.Generator | None) -> list[tuple[int, dict, bytes]]:
    order = rng.permutation(len(X)) if rng is not None else np.arange(len(X))
    elements = []
    for index, rows in enumerate(np.array_split(order, partitions)):
        rows = np.sort(rows) if rng is None else rows
        elements.append(_element(index, X[rows], None if y is None else y[rows]))
    return elements


def _open_dataset(url: str) -> Any:
    import storage

    try:
        return storage.open_dataset(url)
    except storage.StoreUnavailableError as error:
        from ._errors import StoreAccessError

        raise StoreAccessError(f"cannot reach the store holding dataset {url!r}: {error}") from error
    except (storage.StoreError, FileNotFoundError, KeyError, ValueError) as error:
        raise InputDataError(f"dataset {url!r} cannot be opened (missing or not a staged dataset: "
                             f"{type(error).__name__}: {error}); stage it first with `sparkdbn stage`") from error


def prepare_training_data(
    spark: Any,
    data: Any,
    y: Any = None,
    *,
    partitions: int | None = None,
    features_col: str = "features",
    label_col: str = "label",
    expected_shape: tuple[int, ...] | None = None,
    n_classes: int | None = None,
    require_labels: bool = False,
    shuffle_seed: int | None = 0,
) -> PreparedData:
    """Turn ``data`` into validated, cached partitions, or raise :class:`~node.InputDataError`.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
    data : ndarray (n, *shape), RDD of (features, label), DataFrame, or str (staged dataset URL)
    y : ndarray (n,), optional
        Labels, only with array ``data``.
    partitions : int, optional
        Number of partitions (default: twice the default parallelism).  A staged dataset
        always uses one partition per shard.
    features_col, label_col : str
        DataFrame column names.
    expected_shape : tuple of int, optional
        Per-sample shape (or ``(width,)``) the model needs; checked when given.
    n_classes : int, optional
        Labels must lie in ``0 .. n_classes - 1`` when given.
    require_labels : bool
        Raise when the data has no labels (supervised phases need them).
    shuffle_seed : int or None
        Shuffle numpy rows with this seed before splitting (None keeps the order).

    Returns
    -------
    PreparedData
    """
    sc = spark.sparkContext
    partitions = int(partitions or 2 * sc.defaultParallelism)
    if partitions < 1:
        raise InputDataError(f"partitions must be >= 1, got {partitions}")
    dataset_meta = None
    if isinstance(data, str):
        dataset = _open_dataset(data)
        dataset_meta = dict(dataset.meta)
        if y is not None:
            raise InputDataError("y must not be given with a staged dataset URL (its labels are staged with it)")
        partitions = int(dataset.num_shards)
        if partitions < 1:
            raise InputDataError(f"dataset {data!r} has no shards")
        meta_shape = tuple(int(d) for d in dataset_meta.get("feature_shape") or ())
        if expected_shape is not None and meta_shape and not _shape_matches(meta_shape, expected_shape):
            raise InputDataError(f"dataset {data!r} has per-sample shape {meta_shape}, the model expects {expected_shape}")
        import functools

        blocks = sc.parallelize(range(partitions), partitions).mapPartitionsWithIndex(
            functools.partial(_read_shard_at, dataset))
        source = f"dataset {data}"
    elif isinstance(data, np.ndarray) or isinstance(data, (list, tuple)):
        X, labels = _check_arrays(data, y, n_classes)  # here rows still have the caller's numbering
        partitions = min(partitions, len(X))
        rng = np.random.default_rng(shuffle_seed) if shuffle_seed is not None else None
        elements = _split_arrays(X.astype(np.float32, copy=False), labels, partitions, rng)
        blocks = sc.parallelize(elements, partitions)
        source = f"arrays {X.shape}"
    elif _is_dataframe(data):
        blocks = _dataframe_blocks(data, features_col, label_col, partitions)
        partitions = blocks.getNumPartitions()
        source = f"DataFrame[{features_col}, {label_col}]"
    elif _is_rdd(data):
        if y is not None:
            raise InputDataError("y must not be given with an RDD (rows are (features, label) pairs)")
        rdd = data if data.getNumPartitions() == partitions else data.repartition(partitions)
        blocks = rdd.mapPartitionsWithIndex(_rows_to_element)
        source = "RDD of (features, label)"
    else:
        raise InputDataError(f"unsupported training data of type {type(data).__name__}: pass numpy arrays, "
                             "an RDD of (features, label), a DataFrame or a staged dataset URL")

    blocks = blocks.cache()
    blocks.setName(f"sparkdbn training data ({source})")
    try:
        summaries = sorted(blocks.map(lambda element: element[1]).collect(), key=lambda s: s["partition"])
    except Exception as error:
        blocks.unpersist()
        raise InputDataError(f"reading the training data ({source}) failed: {short_error(error)}") from error
    try:
        prepared = _validate(summaries, source, expected_shape, n_classes, require_labels, dataset_meta)
    except InputDataError:
        blocks.unpersist()
        raise
    prepared.blocks = blocks
    return prepared


def _check_arrays(X: Any, y: Any, n_classes: int | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Driver-side arrays checked with the models' own rules (shape, NaN/Inf, labels), as InputDataError."""
    from rbm._validation import check_features, check_labels

    try:
        features = check_features(X, dtype=np.float32)
        labels = None if y is None else check_labels(y, len(features), n_classes)
    except ValueError as error:
        raise InputDataError(str(error)) from error
    return features, labels


def _read_shard_at(dataset: Any, index: int, rows: Iterator[Any]) -> Iterator[tuple[int, dict, bytes]]:
    return _read_shard(dataset, index, rows)


def _shape_matches(shape: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    width = int(np.prod(expected))
    return tuple(shape) == tuple(expected) or tuple(shape) == (width,) or int(np.prod(shape)) == width and len(expected) == 1


def _validate(summaries: list[dict], source: str, expected_shape: tuple[int, ...] | None, n_classes: int | None,
              require_labels: bool, meta: dict | None) -> PreparedData:
    for summary in summaries:
        if summary.get("error"):
            raise InputDataError(f"{source}: partition {summary['partition']}: {summary['error']}")
    filled = [s for s in summaries if s["rows"]]
    if not filled:
        raise InputDataError(f"{source} holds no rows")
    shapes = {tuple(s["shape"]) for s in filled}
    if len(shapes) > 1:
        raise InputDataError(f"{source}: partitions have different per-sample shapes {sorted(shapes)}")
    shape = shapes.pop()
    if expected_shape is not None and not _shape_matches(shape, tuple(expected_shape)):
        raise InputDataError(f"{source} has per-sample shape {shape} ({int(np.prod(shape))} features), "
                             f"the model expects {tuple(expected_shape)}")
    for s in filled:
        if s.get("nan_row") is not None:
            raise InputDataError(f"{source}: partition {s['partition']} row {s['nan_row']} contains NaN or Inf")
    has_labels = {bool(s.get("has_labels")) for s in filled}
    if has_labels == {False}:
        if require_labels:
            raise InputDataError(f"{source} has no labels, but the model has a supervised phase")
        classes = None
    else:
        if has_labels != {True}:
            raise InputDataError(f"{source}: some partitions have labels and some do not")
        for s in filled:
            if not s.get("labels_integral", False):
                raise InputDataError(f"{source}: partition {s['partition']} holds labels that are not integers")
            if s["label_min"] < 0:
                raise InputDataError(f"{source}: partition {s['partition']} row {s['label_min_row']} has label "
                                     f"{s['label_min']}, labels must be class indices 0..n_classes-1")
            if n_classes is not None and s["label_max"] >= n_classes:
                raise InputDataError(f"{source}: partition {s['partition']} row {s['label_max_row']} has label "
                                     f"{s['label_max']}, outside the class range 0..{n_classes - 1}")
        classes = max(s["label_max"] for s in filled) + 1
        if meta and meta.get("n_classes"):
            classes = max(classes, int(meta["n_classes"]))
        if n_classes is not None:
            classes = n_classes
    rows = [int(s["rows"]) for s in summaries]
    logger.info("training data %s: %d rows in %d partitions, shape %s, %s classes", source, sum(rows), len(rows),
                shape, classes)
    return PreparedData(None, sum(rows), shape, classes, len(rows), rows, source)


def _is_dataframe(data: Any) -> bool:
    try:
        from pyspark.sql import DataFrame
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return False
    return isinstance(data, DataFrame)


def _is_rdd(data: Any) -> bool:
    from pyspark import RDD

    return isinstance(data, RDD)


def _dataframe_blocks(df: Any, features_col: str, label_col: str, partitions: int) -> Any:
    """Select features (as array<float>) and labels, repartition, move per batch through Arrow."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, NumericType

    names = df.columns
    if features_col not in names:
        raise InputDataError(f"DataFrame has no features column {features_col!r} (columns: {names})")
    kind = df.schema[features_col].dataType
    if isinstance(kind, VectorUDT) or type(kind).__name__ == "VectorUDT":
        features = vector_to_array(F.col(features_col), "float32")
    elif isinstance(kind, ArrayType) and isinstance(kind.elementType, NumericType):
        features = F.col(features_col).cast("array<float>")
    else:
        raise InputDataError(f"features column {features_col!r} has type {kind.simpleString()}; "
                             "expected an array of numbers or a pyspark.ml.linalg Vector")
    columns = [features.alias("features")]
    if label_col in names:
        if not isinstance(df.schema[label_col].dataType, NumericType):
            raise InputDataError(f"label column {label_col!r} has type {df.schema[label_col].dataType.simpleString()}, "
                                 "expected numbers (class indices)")
        columns.append(F.col(label_col).cast("double").alias("label"))
    selected = df.select(*columns)
    if selected.rdd.getNumPartitions() != partitions:
        selected = selected.repartition(partitions)
    arrow = selected.mapInArrow(_arrow_batches_to_blocks, "payload binary, error string")
    return arrow.rdd.map(lambda row: {"payload": row.payload, "error": row.error}).mapPartitionsWithIndex(
        _arrow_blocks_to_element)
