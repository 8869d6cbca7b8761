"""Training data -> checked partitions: held on the driver, or one cached RDD element per partition.

Accepted inputs (see :func:`prepare_training_data`):

* numpy arrays ``X`` (n, *shape) and ``y`` (n,), split on the driver;
* an RDD of ``(features, label)`` rows (features: array, list or ``pyspark.ml.linalg`` vector);
* a DataFrame with an array or ``pyspark.ml.linalg`` Vector features column and a label
  column, moved per partition through Arrow (:mod:`node.data._frames`), never row by row;
* a staged dataset URL (a directory written by :func:`storage.stage_arrays`): each
  executor reads its own shard from the store, one shard per partition.

Every partition gets a ``summary``, a small JSON-able dict (:func:`summarize_block`): rows,
per-sample shape, the first NaN/Inf row, per-column minimum and maximum (with the rows holding
them) and the partition's distinct labels -- so :func:`check_model_input` can name the partition,
row and column of anything the model would refuse before any training time is spent.  Labels keep
their own type (integers, floats, strings) and become class indices only on the executors.

Where the summaries are made depends on where the rows are:

* numpy arrays are already on the driver: it splits them, summarizes each partition there (the
  executors' function, on the same rows) and keeps the partitions (``PreparedData.held``) until the
  fit stores them (:meth:`node.driver.FitJobs.store_partitions`) -- no Spark job, nothing pickled
  through ``parallelize``, nothing cached;
* the rest is read by Spark: every partition becomes one element ``(index, summary, payload)``
  (``payload``: the partition's ``X`` and ``y`` as ``.npy`` bytes, decoded with
  ``allow_pickle=False``), and collecting the summaries is the one Spark aggregation that checks
  the data -- and fills the cache (``PreparedData.blocks``).
"""

from __future__ import annotations

import functools
import io
import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
from pyspark import RDD
from pyspark.sql import DataFrame, SparkSession

import rbm
import storage

from .._errors import InputDataError, StoreAccessError, short_error
from ._frames import check_label_column, feature_column_kind, features_from_arrow, is_dataframe, is_rdd, labels_from_arrow
from ._labels import DEFAULT_MAX_CLASSES, check_known_labels, encode_labels, merge_class_sets, summarize_labels

__all__ = ["Block", "DataOptions", "PreparedData", "count_rows", "prepare_training_data", "check_model_input",
           "encode_block", "decode_block", "filled_partitions", "iter_blocks"]

logger = logging.getLogger(__name__)

Element = tuple[int, dict, bytes]

#: One partition of training data as a task holds it: (partition index, X, y or None).
Block = tuple[int, np.ndarray, "np.ndarray | None"]


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


def iter_blocks(elements: Iterable[Element]) -> Iterator[tuple[int, np.ndarray, np.ndarray | None]]:
    """Decode the ``(index, summary, payload)`` elements of a prepared partition."""
    for index, summary, payload in elements:
        if summary.get("rows", 0):
            X, y = decode_block(payload)
            yield index, X, y


# ----------------------------------------------------------------------------- per partition
def summarize_block(index: int, X: np.ndarray, y: np.ndarray | None, max_classes: int,
                    error: str | None = None) -> dict[str, Any]:
    """The per-partition facts the driver checks (JSON-able, small: O(features + distinct labels))."""
    summary: dict[str, Any] = {"partition": index, "rows": int(len(X)), "shape": list(X.shape[1:]), "error": error,
                               "has_labels": y is not None}
    if error is not None or not len(X):
        return summary
    flat = X.reshape(len(X), -1)
    finite = np.isfinite(flat)
    bad_rows = ~finite.all(axis=1)
    if bad_rows.any():
        row = int(np.flatnonzero(bad_rows)[0])
        summary["nan_at"] = [row, int(np.flatnonzero(~finite[row])[0])]
        return summary
    lowest, highest = flat.argmin(axis=0), flat.argmax(axis=0)
    columns = np.arange(flat.shape[1])
    summary.update(column_min=flat[lowest, columns].astype(float).tolist(), column_min_row=lowest.tolist(),
                   column_max=flat[highest, columns].astype(float).tolist(), column_max_row=highest.tolist())
    if y is not None:
        try:
            summary["labels"] = summarize_labels(y, max_classes)
        except InputDataError as label_error:
            summary["error"] = str(label_error)
    return summary


def _element(index: int, X: np.ndarray, y: np.ndarray | None, max_classes: int, error: str | None = None) -> Element:
    summary = summarize_block(index, X, y, max_classes, error)
    return index, summary, encode_block(X, y) if summary["error"] is None else b""


def _empty_element(index: int, error: str | None = None) -> Element:
    return index, {"partition": index, "rows": 0, "shape": None, "error": error, "has_labels": False}, b""


def _rows_to_element(max_classes: int, index: int, rows: Iterator[Any]) -> Iterator[Element]:
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
    first = features[0].shape
    different = next((row for row, array in enumerate(features) if array.shape != first), None)
    if different is not None:
        yield _empty_element(index, f"rows have different feature shapes ({first} at row 0, "
                                    f"{features[different].shape} at row {different})")
        return
    y = np.asarray(labels) if has_labels else None
    if y is not None and y.dtype == object:
        yield _empty_element(index, "labels mix types (numbers and strings, or None)")
        return
    yield _element(index, np.stack(features), y, max_classes)


def _arrow_batches_to_blocks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: features (+ label) columns -> one encoded block per batch, or its error."""
    for batch in batches:
        error, payload = None, b""
        try:
            X = features_from_arrow(batch.column(0), name="features")
            y = labels_from_arrow(batch.column(1)) if batch.num_columns > 1 else None
            payload = encode_block(X, y)
        except InputDataError as input_error:
            error = str(input_error)
        yield pa.RecordBatch.from_arrays([pa.array([payload], pa.binary()), pa.array([error], pa.string())],
                                         names=["payload", "error"])


def _arrow_blocks_to_element(max_classes: int, index: int, rows: Iterator[Any]) -> Iterator[Element]:
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
    yield _element(index, np.concatenate(parts_X), y, max_classes)


def _read_shard(dataset: storage.Dataset, max_classes: int, index: int, _rows: Iterator[Any]) -> Iterator[Element]:
    """Read shard ``index`` of a staged dataset from the store (runs on an executor)."""
    X, y = dataset.read_shard(index)
    yield _element(index, np.asarray(X, dtype=np.float32), y, max_classes)


# ----------------------------------------------------------------------------- driver
@dataclass
class PreparedData:
    """Checked training data: its partitions held on the driver, or cached by Spark.

    Attributes
    ----------
    blocks : pyspark.RDD or None
        Data Spark read: cached, one element ``(index, summary, payload)`` per partition (see the
        module docstring).  None for numpy arrays, and once dropped.
    n_samples : int
        Rows over all partitions.
    feature_shape : tuple of int
        Per-sample shape, e.g. ``(64,)`` or ``(1, 28, 28)``.
    classes : ndarray of shape (n_classes,) or None
        The sorted class labels found in the data (None without labels).
    partitions : int
        Number of partitions (non-empty or not).
    rows_per_partition : list of int
    source : str
        What the data came from, for messages and the run record.
    summaries : list of dict
        Per-partition summaries (see :func:`summarize_block`), for :func:`check_model_input`.
    held : list of Block or None
        Numpy arrays' partitions, on the driver: ``(index, X, y)`` for each partition holding rows.
        None for data Spark read, and once dropped.
    """

    blocks: RDD | None
    n_samples: int
    feature_shape: tuple[int, ...]
    classes: np.ndarray | None
    partitions: int
    rows_per_partition: list[int]
    source: str
    summaries: list[dict] = field(default_factory=list, repr=False)
    held: list[Block] | None = field(default=None, repr=False)

    @property
    def has_labels(self) -> bool:
        return self.classes is not None

    def unpersist(self) -> None:
        """Drop the partitions: Spark's cached copy, or the driver's."""
        if self.blocks is not None:
            self.blocks.unpersist()
            self.blocks = None
        self.held = None


def filled_partitions(rows_per_partition: list[int]) -> list[int]:
    """The indices of the partitions holding data (the ones an epoch trains)."""
    return [index for index, rows in enumerate(rows_per_partition) if rows]


def split_arrays(X: np.ndarray, y: np.ndarray | None, partitions: int,
                 rng: np.random.Generator | None) -> list[Block]:
    """``X`` (n, *shape) and ``y`` (n,) cut into ``partitions`` blocks of nearly equal rows: in
    ``rng``'s random order, else in order (then each block is a view of ``X``, not a copy)."""
    if rng is None:
        bounds = np.cumsum([0] + [len(rows) for rows in np.array_split(np.arange(len(X)), partitions)])
        return [(index, X[start:stop], None if y is None else y[start:stop])
                for index, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:]))]
    order = rng.permutation(len(X))
    return [(index, X[rows], None if y is None else y[rows])
            for index, rows in enumerate(np.array_split(order, partitions))]


def _open_dataset(url: str) -> storage.Dataset:
    try:
        return storage.open_dataset(url)
    except storage.StoreUnavailableError as error:
        raise StoreAccessError(f"cannot reach the store holding dataset {url!r}: {error}") from error
    except (storage.StoreError, FileNotFoundError, KeyError, ValueError) as error:
        raise InputDataError(f"dataset {url!r} cannot be opened (missing or not a staged dataset: "
                             f"{type(error).__name__}: {error}); stage it first with `sparkdbn stage`") from error


def _check_arrays(X: Any, y: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """Driver-side arrays checked with the models' own rules (shape, NaN/Inf), as InputDataError."""
    try:
        features = rbm.check_features(X, dtype=np.float32)
    except ValueError as error:
        raise InputDataError(str(error)) from error
    if y is None:
        return features, None
    labels = np.asarray(y)
    if labels.ndim != 1 or len(labels) != len(features):
        raise InputDataError(f"y must be 1-D with one label per row of X ({len(features)}), got shape {labels.shape}")
    return features, labels


def count_rows(data: Any) -> int | None:
    """Rows of training data before it is prepared (a Spark job for an RDD or DataFrame); None for a
    staged dataset (its shards are its partitions) or data of a kind :func:`prepare_training_data` refuses."""
    if isinstance(data, (np.ndarray, list, tuple)):
        return len(data)
    if is_dataframe(data) or is_rdd(data):
        return int(data.count())
    return None


@dataclass(frozen=True)
class DataOptions:
    """How :func:`prepare_training_data` reads and checks training data.

    Attributes
    ----------
    partitions : int, optional
        Number of partitions (default: twice the default parallelism).  A staged dataset
        always uses one partition per shard.
    features_col, label_col : str
        DataFrame column names.
    classes : ndarray, optional
        The class set the model already fixes; every label must be one of them.
    require_labels : bool
        Raise when the data has no labels (supervised phases need them).
    shuffle_seed : int or None
        Shuffle numpy rows with this seed before splitting (None keeps the order).
    max_classes : int
        More distinct labels than this is an error naming the count.
    """

    partitions: int | None = None
    features_col: str = "features"
    label_col: str = "label"
    classes: np.ndarray | None = field(default=None, compare=False)
    require_labels: bool = False
    shuffle_seed: int | None = 0
    max_classes: int = DEFAULT_MAX_CLASSES


@dataclass
class _Read:
    """Training data as one element per partition, not yet run: the RDD, what it came from, and a
    DataFrame's Arrow stage to run before it (see :func:`_frame_blocks`)."""

    blocks: RDD
    source: str
    arrow_stage: DataFrame | None = None


def prepare_training_data(spark: SparkSession, data: Any, y: Any = None,
                          options: DataOptions = DataOptions()) -> PreparedData:
    """Turn ``data`` into checked partitions (held on the driver, or cached), or raise :class:`~node.InputDataError`.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
    data : ndarray (n, *shape), RDD of (features, label), DataFrame, or str (staged dataset URL)
    y : ndarray (n,), optional
        Labels (numbers or strings), only with array ``data``.
    options : DataOptions
        Partitions, column names, the known classes, and the checks.

    Returns
    -------
    PreparedData
    """
    sc = spark.sparkContext
    partitions = int(options.partitions or 2 * sc.defaultParallelism)
    if partitions < 1:
        raise InputDataError(f"partitions must be >= 1, got {partitions}")
    if isinstance(data, (np.ndarray, list, tuple)):
        return _prepare_arrays(data, y, partitions, options)
    return _cache_and_check(_read(sc, data, y, partitions, options), options)


def _prepare_arrays(data: Any, y: Any, partitions: int, options: DataOptions) -> PreparedData:
    """numpy arrays, checked, split and summarized on the driver (shuffled with ``options.shuffle_seed``).

    The rows are here already: shipping them to Spark to be summarized (a pickled ``parallelize``, a
    cache, a job) took 60-75 % of a short fit's fixed cost, and the summaries come out the same.
    """
    X, labels = _check_arrays(data, y)
    if labels is not None and options.classes is not None:
        encode_labels(labels, options.classes)  # names the caller's own row of a label the model does not know
    rng = np.random.default_rng(options.shuffle_seed) if options.shuffle_seed is not None else None
    held = split_arrays(X, labels, min(partitions, len(X)), rng)
    source = f"arrays {X.shape}"
    summaries = [summarize_block(index, X_part, y_part, options.max_classes) for index, X_part, y_part in held]
    prepared = _check_summaries(summaries, source, options.classes, options.require_labels, options.max_classes)
    prepared.held = [block for block in held if len(block[1])]
    return prepared


def _read(sc: Any, data: Any, y: Any, partitions: int, options: DataOptions) -> _Read:
    """One element per partition of data Spark reads, whatever its kind (nothing runs yet)."""
    if isinstance(data, str):
        return _staged_blocks(sc, data, y, options.max_classes)
    if is_dataframe(data):
        return _frame_blocks(data, options.features_col, options.label_col, partitions, options.max_classes)
    if is_rdd(data):
        return _row_blocks(data, y, partitions, options.max_classes)
    raise InputDataError(f"unsupported training data of type {type(data).__name__}: pass numpy arrays, "
                         "an RDD of (features, label), a DataFrame or a staged dataset URL")


def _staged_blocks(sc: Any, url: str, y: Any, max_classes: int) -> _Read:
    """A staged dataset: each executor reads its own shard from the store, one shard per partition."""
    dataset = _open_dataset(url)
    if y is not None:
        raise InputDataError("y must not be given with a staged dataset URL (its labels are staged with it)")
    partitions = int(dataset.num_shards)
    if partitions < 1:
        raise InputDataError(f"dataset {url!r} has no shards")
    blocks = sc.parallelize(range(partitions), partitions).mapPartitionsWithIndex(
        functools.partial(_read_shard, dataset, max_classes))
    return _Read(blocks, f"dataset {url}")


def _frame_blocks(df: Any, features_col: str, label_col: str, partitions: int, max_classes: int) -> _Read:
    """A DataFrame: select features and labels, repartition, move per batch through Arrow.

    Returns the blocks and the Arrow stage they read, persisted: :func:`_cache_and_check` runs
    the stage in a job of its own before the blocks' and drops it once they are cached.  Pipelined
    into the blocks' Python stage, ``mapInArrow`` took a second Python worker in each task, and a
    Spark executor keeps every worker it makes: ``local[2]`` kept four, and the fit's nodes took
    turns among them (tests/node/test_worker_pool.py).
    """
    feature_column_kind(df, features_col)
    columns = [features_col]
    if label_col in df.columns:
        check_label_column(df, label_col)
        columns.append(label_col)
    selected = df.select(*columns)
    if selected.rdd.getNumPartitions() != partitions:
        selected = selected.repartition(partitions)
    arrow = selected.mapInArrow(_arrow_batches_to_blocks, "payload binary, error string").persist()
    blocks = arrow.rdd.map(lambda row: {"payload": row.payload, "error": row.error}).mapPartitionsWithIndex(
        functools.partial(_arrow_blocks_to_element, max_classes))
    return _Read(blocks, f"DataFrame[{features_col}, {label_col}]", arrow)


def _row_blocks(data: RDD, y: Any, partitions: int, max_classes: int) -> _Read:
    """An RDD of ``(features, label)`` rows (or bare features), one element per partition."""
    if y is not None:
        raise InputDataError("y must not be given with an RDD (rows are (features, label) pairs)")
    rdd = data if data.getNumPartitions() == partitions else data.repartition(partitions)
    return _Read(rdd.mapPartitionsWithIndex(functools.partial(_rows_to_element, max_classes)),
                 "RDD of (features, label)")


def _cache_and_check(read: _Read, options: DataOptions) -> PreparedData:
    """Cache the elements and check their summaries: the one Spark aggregation over the data."""
    blocks, source = read.blocks.cache(), read.source
    blocks.setName(f"sparkdbn training data ({source})")
    try:
        if read.arrow_stage is not None:
            read.arrow_stage.count()
        summaries = sorted(blocks.map(lambda element: element[1]).collect(), key=lambda s: s["partition"])
        prepared = _check_summaries(summaries, source, options.classes, options.require_labels, options.max_classes)
    except InputDataError:
        blocks.unpersist()
        raise
    except Exception as error:
        blocks.unpersist()
        raise InputDataError(f"reading the training data ({source}) failed: {short_error(error)}") from error
    finally:
        if read.arrow_stage is not None:
            read.arrow_stage.unpersist()  # the blocks are cached (or the fit is refused)
    prepared.blocks = blocks
    return prepared


def _check_summaries(summaries: list[dict], source: str, classes: np.ndarray | None, require_labels: bool,
                     max_classes: int) -> PreparedData:
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
    for s in filled:
        if s.get("nan_at") is not None:
            row, column = s["nan_at"]
            raise InputDataError(f"{source}: partition {s['partition']} row {row} column {column} holds NaN or Inf")
    has_labels = {bool(s.get("has_labels")) for s in filled}
    if has_labels == {False}:
        if require_labels:
            raise InputDataError(f"{source} has no labels, but the model has a supervised phase")
        found = None
    else:
        if has_labels != {True}:
            raise InputDataError(f"{source}: some partitions have labels and some do not")
        label_summaries = [(s["partition"], s["labels"]) for s in filled]
        if classes is not None:
            check_known_labels(label_summaries, classes, source)
            found = classes
        else:
            found = merge_class_sets(label_summaries, source, max_classes)
    rows = [int(s["rows"]) for s in summaries]
    logger.info("training data %s: %d rows in %d partitions, shape %s, %s classes", source, sum(rows), len(rows),
                shape, None if found is None else len(found))
    return PreparedData(None, sum(rows), shape, found, len(rows), rows, source, filled)  # type: ignore[arg-type]


def check_model_input(prepared: PreparedData, width: int, bounds: tuple[float, float] | None) -> None:
    """Refuse, on the driver, data the model would refuse on the executors.

    Parameters
    ----------
    width : int
        Features per sample the model takes.
    bounds : (low, high) or None
        The range every input value must lie in (``(0, 1)`` for Bernoulli visible units).

    Raises
    ------
    InputDataError
        Naming the partition, row and column of the first offending value.
    """
    have = int(np.prod(prepared.feature_shape))
    if have != width:
        raise InputDataError(f"{prepared.source} has per-sample shape {prepared.feature_shape} ({have} features), "
                             f"the model takes {width}")
    if bounds is None:
        return
    low, high = bounds
    for s in prepared.summaries:
        for values, rows, outside in ((s["column_min"], s["column_min_row"], lambda v: v < low),
                                      (s["column_max"], s["column_max_row"], lambda v: v > high)):
            column = next((c for c, value in enumerate(values) if outside(value)), None)
            if column is not None:
                raise InputDataError(
                    f"{prepared.source}: partition {s['partition']} row {rows[column]} column {column} holds "
                    f"{values[column]:g}, outside [{low:g}, {high:g}] that the model's visible units take "
                    "(scale the features into that range first, e.g. divide pixels by their maximum)")
