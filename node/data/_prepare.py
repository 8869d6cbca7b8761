"""Training data -> checked partitions, stored for the fit's nodes; the driver refuses bad data before any training.

Accepted inputs (see :func:`prepare_training_data`):

* numpy arrays ``X`` (n, *shape) and ``y`` (n,), split on the driver;
* an RDD of ``(features, label)`` rows (features: array, list or ``pyspark.ml.linalg`` vector);
* a DataFrame with an array or ``pyspark.ml.linalg`` Vector features column and a label
  column, moved per partition through Arrow (:mod:`node.data._frames`), never row by row;
* a staged dataset URL (a directory written by :func:`storage.stage_arrays`): each
  executor reads its own shard from the store, one shard per partition.

Every partition gets a ``summary`` (:func:`~node.data._partitions.summarize_block`): rows,
per-sample shape, the first NaN/Inf row, per-column minimum and maximum (with the rows holding
them) and the partition's distinct labels -- so :func:`check_model_input` can name the partition,
row and column of anything the model would refuse before any training time is spent.  Labels keep
their own type (integers, floats, strings) and become class indices only on the executors.

Where the summaries are made depends on where the rows are:

* numpy arrays are on the driver already: it splits them and summarizes each partition there
  (the executors' function, on the same rows), and keeps the partitions (``PreparedData.held``)
  until the fit stores them (:meth:`node.driver.FitJobs.store_partitions`) once the model accepts
  them -- no Spark job, nothing pickled through ``parallelize``, nothing cached;
* the rest is read by Spark in one job: each task reads its partition, summarizes it and, given a
  :class:`~node.data._blocks.BlockSink` (``DataOptions.sink``), stores it for the fit's nodes
  (``PreparedData.stored``) -- so the rows cross from Spark into Python once, and no copy is
  cached; the driver collects the summaries.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse
from pyspark.sql import SparkSession
from sklearn.utils.validation import column_or_1d

import rbm

from .._errors import InputDataError, StoreAccessError, short_error
from ._blocks import BlockSink
from ._frames import is_dataframe, is_rdd
from ._labels import DEFAULT_MAX_CLASSES, check_known_labels, encode_labels, merge_class_sets, summarize_labels
from ._partitions import summarize_block
from ._spark_reads import frame_summaries, row_summaries, staged_summaries

__all__ = ["Block", "DataOptions", "PreparedData", "count_rows", "feature_names", "prepare_training_data",
           "check_model_input", "filled_partitions", "split_arrays", "array_inputs"]

logger = logging.getLogger(__name__)

#: One partition of training data as a task holds it: (partition index, X, y or None).
Block = tuple[int, np.ndarray, "np.ndarray | None"]


# ----------------------------------------------------------------------------- driver
@dataclass
class PreparedData:
    """Checked training data: its partitions held on the driver, or stored by the job that read them.

    Attributes
    ----------
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
    array_rows : list of ndarray or None
        Numpy arrays' partitions: the row of the arrays given that each row of the partition is
        (messages name it, the partitions being shuffled). None for data Spark read.
    stored : bool
        Spark stored the partitions where ``DataOptions.sink`` said while it read them.
    staged : dict or None
        A staged dataset's ``scaling`` and ``feature_names`` as its ``_meta.json`` said when the fit read it:
        how new rows are read to meet the model (the run record keeps them). None for other data.
    """

    n_samples: int
    feature_shape: tuple[int, ...]
    classes: np.ndarray | None
    partitions: int
    rows_per_partition: list[int]
    source: str
    summaries: list[dict] = field(default_factory=list, repr=False)
    held: list[Block] | None = field(default=None, repr=False)
    array_rows: list[np.ndarray] | None = field(default=None, repr=False)
    stored: bool = False
    staged: dict | None = None

    @property
    def has_labels(self) -> bool:
        return self.classes is not None

    @property
    def content_sums(self) -> list[float] | None:
        """The partitions' :func:`~node.data._partitions.content_sums` added up (None where one has none)."""
        filled = [summary for summary in self.summaries if summary.get("rows")]
        if not filled or any("sums" not in summary for summary in filled):
            return None
        return [float(sum(column)) for column in zip(*(summary["sums"] for summary in filled))]

    def unpersist(self) -> None:
        """Drop the partitions the driver holds."""
        self.held = None


def filled_partitions(rows_per_partition: list[int]) -> list[int]:
    """The indices of the partitions holding data (the ones an epoch trains)."""
    return [index for index, rows in enumerate(rows_per_partition) if rows]


def split_arrays(X: np.ndarray, y: np.ndarray | None, partitions: int,
                 rng: np.random.Generator | None) -> tuple[list[Block], list[np.ndarray]]:
    """``X`` (n, *shape) and ``y`` (n,) cut into ``partitions`` blocks of nearly equal rows: in
    ``rng``'s random order, else in order (then each block is a view of ``X``, not a copy).
    Also returns each block's rows: their indices into ``X``."""
    order = np.arange(len(X)) if rng is None else rng.permutation(len(X))
    pieces = np.array_split(order, partitions)
    if rng is None:
        bounds = np.cumsum([0] + [len(rows) for rows in pieces])
        blocks = [(index, X[start:stop], None if y is None else y[start:stop])
                  for index, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:]))]
        return blocks, pieces
    return [(index, X[rows], None if y is None else y[rows]) for index, rows in enumerate(pieces)], pieces


def array_inputs(data: Any, y: Any) -> tuple[Any, Any]:
    """``(data, y)`` with array-like training data (a list, a pandas DataFrame: anything scikit-learn takes as
    ``X``) as a numpy array, and ``y`` as a numpy array: a column vector ``(n, 1)`` raveled with
    scikit-learn's warning, strings held as objects (a pandas column) as strings. Spark data, dataset
    URLs and what no path takes, as they are.  A scipy sparse matrix (which the models take alone) is made
    dense: the driver splits it into numpy partitions, which the nodes train on."""
    if scipy.sparse.issparse(data):
        logger.info("X is a scipy sparse matrix %s: trained on as a dense array (%.1f MiB)", data.shape,
                    data.shape[0] * data.shape[1] * 4 / 2**20)
        data = data.toarray()
    columns = getattr(data, "columns", None) if not is_dataframe(data) else None
    if not isinstance(data, np.ndarray) and (isinstance(data, (list, tuple)) or hasattr(data, "__array__")):
        try:
            data = np.asarray(data)
        except ValueError as error:  # ragged rows
            raise InputDataError(f"X cannot be read as an array: {error}") from error
    if isinstance(data, np.ndarray) and data.dtype.kind in "OUS":
        _check_numbers(data, columns)
    if y is not None:
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = column_or_1d(y, warn=True)
        if y.dtype == object and all(isinstance(label, str) for label in y.ravel()):
            y = y.astype(str)
    return data, y


def _check_numbers(X: np.ndarray, columns: Any) -> None:
    """Refuse an array of objects or strings with a value that is no number, naming its row and column (and the
    column's name, for a frame): scikit-learn's own error names only the value."""
    try:
        X.astype(np.float64)
        return
    except (TypeError, ValueError):
        pass
    for index, value in np.ndenumerate(X):
        try:
            float(value)
        except (TypeError, ValueError):
            value = value.item() if isinstance(value, np.generic) else value  # 'x', not np.str_('x')
            row, rest = index[0], index[1:]
            named = f" ({list(columns)[rest[0]]!r})" if columns is not None and len(rest) == 1 else ""
            where = f"row {row}" + (f" column {rest[0]}{named}" if len(rest) == 1 else f" at {rest}" if rest else "")
            raise InputDataError(f"X {where} holds {value!r}, not a number: features must be numbers")


def feature_names(data: Any) -> np.ndarray | None:
    """The column names of array-like training data (a pandas frame), as scikit-learn records them in
    ``feature_names_in_``: when all are strings; None for unnamed data, Spark data and dataset URLs.  Names of
    mixed types are refused, as scikit-learn's estimators refuse them."""
    columns = getattr(data, "columns", None)
    if columns is None or is_dataframe(data) or not hasattr(data, "__array__"):
        return None
    names = list(columns)
    strings = [isinstance(name, str) for name in names]
    if names and all(strings):
        return np.asarray(names, dtype=object)
    if any(strings):
        kinds = sorted({type(name).__name__ for name in names})
        raise InputDataError(f"X's column names are of types {', '.join(kinds)}: feature names are taken only when "
                             "all are strings, as scikit-learn takes them; give X.columns = X.columns.astype(str)")
    return None


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
    data, _ = array_inputs(data, None)
    if isinstance(data, np.ndarray):
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
        always uses one partition per shard: another number given is refused.
    features_col : str
        DataFrame column of the features.
    label_col : str
        DataFrame column of the labels.
    classes : ndarray, optional
        The class set the model already fixes; every label must be one of them.
    require_labels : bool
        Raise when the data has no labels (supervised phases need them).
    shuffle_seed : int or None
        Shuffle the rows with this seed before splitting: numpy rows on the driver, a DataFrame's by a seeded
        random partition each (None keeps the order, and a DataFrame's partitions where they are as many as
        asked).  An RDD's partitions are kept where they are as many as asked.
    max_classes : int
        More distinct labels than this is an error naming the count.
    sink : BlockSink, optional
        Where the job that reads data other than numpy arrays stores its partitions for the fit
        (None: it only checks them).
    store_retry_timeout_s : float
        How long a staged dataset's store is retried when it is unavailable (the fit's ``store_retry_timeout_s``).
    """

    partitions: int | None = None
    features_col: str = "features"
    label_col: str = "label"
    classes: np.ndarray | None = field(default=None, compare=False)
    require_labels: bool = False
    shuffle_seed: int | None = 0
    max_classes: int = DEFAULT_MAX_CLASSES
    sink: BlockSink | None = field(default=None, compare=False)
    store_retry_timeout_s: float = 30.0


def prepare_training_data(spark: SparkSession, data: Any, y: Any = None,
                          options: DataOptions = DataOptions()) -> PreparedData:
    """Turn ``data`` into checked partitions (held on the driver, or stored), or raise :class:`~node.InputDataError`.

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

    Raises
    ------
    InputDataError
        Data the checks refuse, naming the partition and row where they can.
    StoreAccessError
        A staged dataset's store, or the sink's, failed (unavailable past its retry timeout, or refusing the
        files): reported by the tasks that met it, not retried by Spark.
    """
    sc = spark.sparkContext
    partitions = int(options.partitions or 2 * sc.defaultParallelism)
    if partitions < 1:
        raise InputDataError(f"partitions must be >= 1, got {partitions}")
    data, y = array_inputs(data, y)
    if isinstance(data, np.ndarray):
        return _prepare_arrays(data, y, partitions, options)
    return _read_and_check(sc, data, y, partitions, options)


def _prepare_arrays(data: Any, y: Any, partitions: int, options: DataOptions) -> PreparedData:
    """numpy arrays, checked, split and summarized on the driver (shuffled with ``options.shuffle_seed``).

    The rows are here already: shipping them to Spark to be summarized (a pickled ``parallelize``, a
    cache, a job) took 60-75 % of a short fit's fixed cost, and the summaries come out the same.
    """
    X, labels = _check_arrays(data, y)
    source = f"arrays {X.shape}"
    if labels is not None:  # the labels' rules, naming the caller's own row (the partitions are shuffled)
        try:
            label_error = summarize_labels(labels, options.max_classes)["error"]
        except InputDataError as error:  # not numbers or strings
            raise InputDataError(f"{source}: {error}") from error
        if label_error:
            raise InputDataError(f"{source}: {label_error}; labels must be class values")
        if options.classes is not None:
            encode_labels(labels, options.classes)  # a label the model does not know
    rng = np.random.default_rng(options.shuffle_seed) if options.shuffle_seed is not None else None
    held, rows = split_arrays(X, labels, min(partitions, len(X)), rng)
    summaries = [summarize_block(index, X_part, y_part, options.max_classes) for index, X_part, y_part in held]
    prepared = _check_summaries(summaries, source, options.classes, options.require_labels, options.max_classes)
    prepared.held = [block for block in held if len(block[1])]
    prepared.array_rows = rows
    return prepared


def _read_and_check(sc: Any, data: Any, y: Any, partitions: int, options: DataOptions) -> PreparedData:
    """Data Spark reads: one job summarizes (and, with ``options.sink``, stores) every partition."""
    staged = None
    if isinstance(data, str):
        summaries, source, meta = staged_summaries(sc, data, y, options)
        staged = {"scaling": meta.get("scaling"), "feature_names": meta.get("feature_names")}
    elif is_dataframe(data):
        summaries, source = frame_summaries(data, y, partitions, options)
    elif is_rdd(data):
        summaries, source = row_summaries(data, y, partitions, options)
    else:
        raise InputDataError(f"unsupported training data of type {type(data).__name__}: pass numpy arrays, "
                             "an RDD of (features, label), a DataFrame or a staged dataset URL")
    try:
        collected = sorted(summaries(), key=lambda summary: summary["partition"])
    except InputDataError:
        raise
    except Exception as error:
        raise InputDataError(f"reading the training data ({source}) failed: {short_error(error)}") from error
    outages = [summary["store_error"] for summary in collected if summary.get("store_error")]
    if outages:  # each task that met it said so in its summary: Spark ran none of them again
        raise StoreAccessError(outages[0])
    prepared = _check_summaries(collected, source, options.classes, options.require_labels, options.max_classes)
    prepared.stored, prepared.staged = options.sink is not None, staged
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
    return PreparedData(sum(rows), shape, found, len(rows), rows, source, filled)


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
                row = rows[column]
                given = ("" if prepared.array_rows is None else
                         f"row {int(prepared.array_rows[s['partition']][row])} of the arrays given; ")
                raise InputDataError(
                    f"{prepared.source}: partition {s['partition']} row {row} column {column} holds "
                    f"{values[column]:g}, outside [{low:g}, {high:g}] that the model's visible units take "
                    f"({given}scale the features into that range first, e.g. divide pixels by their maximum)")
