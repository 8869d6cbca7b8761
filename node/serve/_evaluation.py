"""Distributed evaluation: a classification report computed with Spark.

Each partition predicts its rows in batches with a replica of the model (rebuilt from the
broadcast model file, see :mod:`node.serve._inference`) and returns only the non-zero cells of its
confusion matrix as ``(true label, predicted label, count)`` triples.  The driver adds them up;
every metric follows from the confusion matrix, exactly as scikit-learn computes it.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.types import BooleanType, NumericType, StringType

import storage

from .._errors import InputDataError
from ..data import (array_inputs, check_staged_shards, feature_column_kind, features_from_arrow, is_dataframe,
                    is_rdd, labels_from_arrow, open_staged_dataset, read_staged_frame)
from ..driver import get_spark_session
from ._classes import model_classes
from ._inference import (
    check_first_row,
    model_from_payload,
    model_payload,
    predict_proba_batched,
    raise_input_errors_from,
    scaled_features,
    task_location,
)

__all__ = ["ClassificationReport", "evaluate"]

log = logging.getLogger(__name__)


def _readonly(array: np.ndarray) -> np.ndarray:
    array = np.array(array)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class ClassificationReport:
    """Accuracy, per-class precision/recall/F1/support and the confusion matrix.

    Attributes
    ----------
    labels : ndarray of shape (n_labels,)
        Every label seen as truth or prediction, sorted (scikit-learn's convention).
    confusion_matrix : ndarray of shape (n_labels, n_labels), int64
        ``[i, j]`` = samples of true label ``labels[i]`` predicted as ``labels[j]``.
    accuracy : float
    precision : ndarray of shape (n_labels,)
        Per label; a ratio with a zero denominator is 0.0 here and in ``recall`` and ``f1``
        (scikit-learn's ``zero_division`` default, without its warning).
    recall : ndarray of shape (n_labels,)
        Per label: the rows of the label predicted as it, over the rows of the label.
    f1 : ndarray of shape (n_labels,)
        Per label: the harmonic mean of ``precision`` and ``recall``.
    support : ndarray of shape (n_labels,)
        Rows of each true label.
    """

    labels: np.ndarray
    confusion_matrix: np.ndarray
    accuracy: float
    precision: np.ndarray
    recall: np.ndarray
    f1: np.ndarray
    support: np.ndarray

    @classmethod
    def from_confusion_matrix(cls, labels: Iterable[Any], matrix: np.ndarray) -> "ClassificationReport":
        """Build a report from a confusion matrix (rows: true label, columns: predicted)."""
        labels = np.asarray(list(labels))
        matrix = np.asarray(matrix, dtype=np.int64)
        if matrix.shape != (len(labels), len(labels)):
            raise ValueError(f"confusion matrix has shape {matrix.shape} for {len(labels)} labels")
        true_positive = np.diag(matrix).astype(np.float64)
        support = matrix.sum(axis=1)
        predicted = matrix.sum(axis=0)
        precision = _safe_divide(true_positive, predicted)
        recall = _safe_divide(true_positive, support)
        f1 = _safe_divide(2 * precision * recall, precision + recall)
        total = int(matrix.sum())
        accuracy = float(true_positive.sum() / total) if total else 0.0
        return cls(
            labels=_readonly(labels),
            confusion_matrix=_readonly(matrix),
            accuracy=accuracy,
            precision=_readonly(precision),
            recall=_readonly(recall),
            f1=_readonly(f1),
            support=_readonly(support),
        )

    @property
    def n_samples(self) -> int:
        return int(self.support.sum())

    def averages(self) -> dict[str, dict[str, float]]:
        """``{"macro avg": {...}, "weighted avg": {...}}`` with precision, recall, f1-score, support."""
        weights = self.support / self.n_samples if self.n_samples else np.zeros(len(self.support))
        result = {}
        for name, average in (("macro avg", np.mean), ("weighted avg", lambda v: float(np.sum(v * weights)))):
            result[name] = {
                "precision": float(average(self.precision)),
                "recall": float(average(self.recall)),
                "f1-score": float(average(self.f1)),
                "support": float(self.n_samples),
            }
        return result

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict shaped like scikit-learn's ``classification_report(output_dict=True)``.

        Adds ``"labels"`` and ``"confusion_matrix"`` (a list of rows).
        """
        report: dict[str, Any] = {}
        for k, label in enumerate(self.labels):
            report[str(label)] = {
                "precision": float(self.precision[k]),
                "recall": float(self.recall[k]),
                "f1-score": float(self.f1[k]),
                "support": float(self.support[k]),
            }
        report["accuracy"] = self.accuracy
        report.update(self.averages())
        report["labels"] = [label.item() if hasattr(label, "item") else label for label in self.labels]
        report["confusion_matrix"] = self.confusion_matrix.tolist()
        return report

    def format(self, digits: int = 2) -> str:
        """scikit-learn's ``classification_report`` text, then the confusion matrix."""
        names = [str(label) for label in self.labels]
        width = max([len(name) for name in names] + [len("weighted avg"), digits])
        headers = ["precision", "recall", "f1-score", "support"]
        text = ("{:>{width}s} " + " {:>9}" * len(headers)).format("", *headers, width=width) + "\n\n"
        row_format = "{:>{width}s} " + " {:>9.{digits}f}" * 3 + " {:>9}\n"
        for k, name in enumerate(names):
            text += row_format.format(
                name, self.precision[k], self.recall[k], self.f1[k], int(self.support[k]), width=width, digits=digits
            )
        text += "\n"
        accuracy_format = "{:>{width}s} " + " {:>9.{digits}}" * 2 + " {:>9.{digits}f}" + " {:>9}\n"
        text += accuracy_format.format("accuracy", "", "", self.accuracy, self.n_samples, width=width, digits=digits)
        for name, average in self.averages().items():
            text += row_format.format(
                name, average["precision"], average["recall"], average["f1-score"], self.n_samples, width=width, digits=digits
            )
        return text + "\n" + self._format_matrix()

    def _format_matrix(self) -> str:
        names = [str(label) for label in self.labels]
        cell = max([len(name) for name in names] + [len(str(int(self.confusion_matrix.max(initial=0))))])
        corner = "true\\pred"
        lead = max(len(corner), cell)
        lines = ["confusion matrix (rows: true label, columns: predicted label)"]
        lines.append(f"{corner:>{lead}s} " + " ".join(f"{name:>{cell}s}" for name in names))
        for name, row in zip(names, self.confusion_matrix):
            lines.append(f"{name:>{lead}s} " + " ".join(f"{int(value):>{cell}d}" for value in row))
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.format()


def _safe_divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    denominator = np.asarray(denominator, dtype=np.float64)
    return np.divide(numerator, denominator, out=np.zeros_like(denominator), where=denominator != 0)


# --------------------------------------------------------------------------- per-partition work


def _string_classes(classes: np.ndarray) -> bool:
    """The model was fitted on string labels (the truth and the predictions are strings then)."""
    return classes.dtype.kind in "US"


def _class_labels(labels: Any, classes: np.ndarray, where: str) -> np.ndarray:
    """Labels comparable with the model's ``classes``: strings for a model fitted on strings, else
    int64 (Spark ML's double labels are fine when they hold whole numbers; booleans are 0 and 1)."""
    labels = np.asarray(labels)
    if _string_classes(classes):
        if labels.dtype.kind not in "US":
            raise InputDataError(f"labels in {where} must be strings, as the model's classes are; got dtype "
                                 f"{labels.dtype}")
        return labels.astype(str)
    if labels.dtype.kind not in "biuf":  # booleans count as the classes 0 and 1, as numpy compares them
        raise InputDataError(f"labels in {where} must be numbers, got dtype {labels.dtype}")
    if np.issubdtype(labels.dtype, np.floating):
        bad = ~np.isfinite(labels) | (labels != np.round(labels))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InputDataError(f"labels in {where} must be whole class numbers; row {row} holds {labels[row]!r}")
    return labels.astype(np.int64)


def _count_pairs(model: Any, X: np.ndarray, y: np.ndarray, batch_size: int) -> Counter:
    """``Counter{(true, predicted): count}`` for one chunk of rows."""
    classes = model_classes(model)
    proba = predict_proba_batched(model, X, batch_size)
    predicted = classes[np.argmax(proba, axis=1)]
    predicted = predicted.astype(str) if _string_classes(classes) else predicted.astype(np.int64)
    pairs, counts = np.unique(np.stack([y, predicted], axis=1), axis=0, return_counts=True)
    return Counter({(t, p): int(c) for (t, p), c in zip(pairs.tolist(), counts)})


def _chunk_rows(rows: Iterator[Any], batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Group an RDD partition's ``(features, label)`` rows into ``(X, y)`` batches."""
    features: list[np.ndarray] = []
    labels: list[Any] = []
    for number, row in enumerate(rows):
        try:
            features_row, label = row
            vector = features_row.toArray() if hasattr(features_row, "toArray") else features_row
            features.append(np.asarray(vector, dtype=np.float32).reshape(-1))
        except (TypeError, ValueError) as error:
            message = f"row {number} is not a (features, label) pair: {type(error).__name__}: {error}"
            raise InputDataError(message) from error
        labels.append(label)
        if len(features) == batch_size:
            yield _stack(features), np.asarray(labels)
            features, labels = [], []
    if features:
        yield _stack(features), np.asarray(labels)


def _stack(rows: list[np.ndarray]) -> np.ndarray:
    widths = {len(row) for row in rows}
    if len(widths) > 1:
        raise InputDataError(f"RDD rows have different feature widths {sorted(widths)}")
    return np.stack(rows)


# --------------------------------------------------------------------------- evaluate


def evaluate(
    model: Any,
    data: Any,
    *,
    spark: Any = None,
    features_col: str = "features",
    label_col: str = "label",
    batch_size: int = 1024,
    num_partitions: int | None = None,
    scaling: dict | None = None,
) -> ClassificationReport:
    """Evaluate a trained classifier on Spark and return its classification report.

    Parameters
    ----------
    model : trained rbm.DBN / rbm.ConvNet (``save``, ``predict_proba``, ``classes_``)
    data : (X, y) tuple, RDD of ``(features, label)``, DataFrame, or a staged dataset (URL or ``storage.Dataset``)
        The data as :meth:`node.Trainer.fit` takes it.  ``X`` of shape (n_samples, n_features) (or the
        model's input shape; a numpy array, a list, a pandas DataFrame or a scipy sparse matrix), ``y`` of
        shape (n_samples,).  RDD features may be arrays, lists or ml Vectors.  A DataFrame holds
        ``features_col`` (array or ml Vector) and ``label_col`` (integer or whole double; strings
        for a model fitted on string labels).  A staged dataset (``sparkdbn stage``, ``node.stage_*``) must
        be labelled; its shards are read on the executors, and its rows are as staged (scaled already where
        it was staged with ``--scale``: give no ``scaling``).
    spark : SparkSession, optional
        Used for numpy input; defaults to the active session (or a new local one).
    features_col : str
        DataFrame column of the features.
    label_col : str
        DataFrame column of the labels.
    batch_size : int
        Rows per ``predict_proba`` call on an executor.
    num_partitions : int, optional
        Partitions for numpy input (default: Spark's default parallelism).
    scaling : dict, optional
        The ``scaling`` of the staged dataset the model trained on (its ``_meta.json``, see
        ``sparkdbn stage --scale``): features are scaled so before the model sees them.

    Returns
    -------
    ClassificationReport
        Over the sorted union of true and predicted labels, as scikit-learn does.

    Raises
    ------
    InputDataError (a ValueError)
        Bad input: wrong feature width, NaN, mismatched lengths, a missing column, non-integer
        labels, no rows.  Checked on the driver before the Spark job where possible.
    """
    if batch_size < 1:
        raise InputDataError(f"batch_size must be >= 1, got {batch_size}")
    classes = model_classes(model)  # fails early for an untrained model
    payload = model_payload(model)

    try:
        if isinstance(data, tuple) and len(data) == 2:
            X, y = array_inputs(*data)  # as fit takes them: a list, pandas (strings as strings), scipy sparse
            X = np.asarray(X)
            data = (scaled_features(X.reshape(len(X), -1), scaling).reshape(X.shape) if scaling else X, y)
            counts = _evaluate_arrays(model, payload, data, spark, batch_size, num_partitions, classes)
        elif isinstance(data, (str, storage.Dataset)):
            frame = _staged_frame(data, spark, scaling)
            counts = _evaluate_dataframe(model, payload, frame, "features", "label", batch_size, classes, None)
        elif is_dataframe(data):
            counts = _evaluate_dataframe(model, payload, data, features_col, label_col, batch_size, classes, scaling)
        elif is_rdd(data):
            counts = _evaluate_rdd(model, payload, data, batch_size, classes, scaling)
        else:
            raise InputDataError(f"evaluate() takes (X, y) arrays, an RDD of (features, label), a DataFrame or a "
                                 f"staged dataset (its URL or storage.Dataset), not {type(data).__name__}")
    except InputDataError:
        raise
    except Exception as error:  # a failed Spark job: surface an executor's input error plainly, else re-raise
        raise_input_errors_from(error, "evaluation data")
        raise
    if not counts:
        raise InputDataError("evaluation data has no rows")
    labels = np.array(sorted({t for t, _ in counts} | {p for _, p in counts}),
                      dtype=str if _string_classes(classes) else np.int64)
    index = {label: k for k, label in enumerate(labels.tolist())}
    matrix = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for (true, predicted), count in counts.items():
        matrix[index[true], index[predicted]] += count
    report = ClassificationReport.from_confusion_matrix(labels, matrix)
    log.info("evaluated %d samples: accuracy %.4f", report.n_samples, report.accuracy)
    return report


def _staged_frame(data: "str | storage.Dataset", spark: Any, scaling: dict | None) -> Any:
    """A labelled staged dataset's rows as a DataFrame (``features``, ``label``), read on the executors."""
    dataset = data if isinstance(data, storage.Dataset) else open_staged_dataset(data, retry_timeout_s=30.0)
    if scaling:
        raise InputDataError(f"dataset {dataset.url}: its rows are as staged (scaled already where it was staged "
                             "with --scale); give scaling only with rows of your own")
    if not dataset.meta.get("label_column"):
        raise InputDataError(f"dataset {dataset.url} holds no labels: evaluate needs them (stage it with its label "
                             "column, or predict on it)")
    check_staged_shards(dataset)
    return read_staged_frame(_session(spark), dataset)


class _PartitionOutcome:
    """What one partition reports: its confusion-matrix cells, or the input error it met."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.error: str | None = None

    def result(self) -> Counter | str:
        return self.error if self.error is not None else self.counts


@contextlib.contextmanager
def _reported_input_errors() -> Iterator[_PartitionOutcome]:
    """Turn bad input met on an executor into a reported message instead of a failed task.

    A raising task would be retried (same data, same failure) and kill its Python worker
    each time; the driver raises the message once instead (see :func:`_merge_counts`).
    """
    outcome = _PartitionOutcome()
    try:
        yield outcome
    except InputDataError as error:
        message = str(error)
        outcome.error = message if message.startswith("partition") else task_location() + message


def _merge_counts(parts: Iterable[Counter | str]) -> Counter:
    total: Counter = Counter()
    for part in parts:
        if isinstance(part, str):
            raise InputDataError(f"evaluation data: {part}")
        total.update(part)
    return total


def _evaluate_arrays(model: Any, payload: bytes, data: tuple, spark: Any, batch_size: int, num_partitions: int | None,
                     classes: np.ndarray) -> Counter:
    X, y = data  # numpy arrays: evaluate read them as fit does (array_inputs)
    if len(X) != len(y):
        raise InputDataError(f"X has {len(X)} rows but y has {len(y)} labels")
    if len(X) == 0:
        raise InputDataError("evaluation data has no rows")
    y = _class_labels(y, classes, "y")
    try:
        model.predict_proba(X[:1])  # the model's own checks (width, NaN) on the driver first
    except (ValueError, RuntimeError) as error:  # the model's own input checks
        raise InputDataError(f"X does not fit the model: {error}") from error
    spark = _session(spark)
    n_chunks = max(1, min(len(X), num_partitions or spark.sparkContext.defaultParallelism))
    # One element per partition: a pair of plain arrays, serialized by Spark itself.
    chunks = [(X[rows], y[rows]) for rows in np.array_split(np.arange(len(X)), n_chunks)]
    broadcast = spark.sparkContext.broadcast(payload)

    def count_chunks(elements: Iterator[tuple[np.ndarray, np.ndarray]]) -> Iterator[Counter | str]:
        with _reported_input_errors() as outcome:
            replica = model_from_payload(broadcast.value)
            for X_chunk, y_chunk in elements:
                outcome.counts.update(_count_pairs(replica, X_chunk, y_chunk, batch_size))
        yield outcome.result()

    try:
        return _merge_counts(spark.sparkContext.parallelize(chunks, n_chunks).mapPartitions(count_chunks).collect())
    finally:
        broadcast.destroy()  # the model's bytes leave the executors with the job


def _evaluate_rdd(model: Any, payload: bytes, rdd: Any, batch_size: int, classes: np.ndarray,
                  scaling: dict | None) -> Counter:
    first = rdd.take(1)
    if not first:
        raise InputDataError("evaluation RDD has no rows")
    try:
        features, _ = first[0]
    except (TypeError, ValueError) as error:
        raise InputDataError(f"evaluation RDD rows must be (features, label) pairs, got {first[0]!r:.80}") from error
    vector = features.toArray() if hasattr(features, "toArray") else features
    try:
        model.predict_proba(scaled_features(np.asarray(vector, dtype=np.float32).reshape(1, -1), scaling))
    except (ValueError, RuntimeError) as error:  # the model's own input checks
        raise InputDataError(f"RDD features do not fit the model: {error}") from error
    broadcast = rdd.context.broadcast(payload)

    def count_partition(rows: Iterator[Any]) -> Iterator[Counter | str]:
        with _reported_input_errors() as outcome:
            replica = model_from_payload(broadcast.value)
            for X, y in _chunk_rows(rows, batch_size):
                outcome.counts.update(_count_pairs(replica, scaled_features(X, scaling),
                                                   _class_labels(y, classes, "an RDD partition"), batch_size))
        yield outcome.result()

    try:
        return _merge_counts(rdd.mapPartitions(count_partition).collect())
    finally:
        broadcast.destroy()


def _cells_batch(result: Counter | str, label_type: Any) -> Any:
    """One partition's confusion-matrix cells (or its error, in a row of its own) as an Arrow batch;
    the labels of Arrow type ``label_type`` (``pa.int64()`` or ``pa.string()``)."""
    cells = [] if isinstance(result, str) else list(result.items())
    errors: list[str | None] = [None] * len(cells)
    if isinstance(result, str):
        cells, errors = [((None, None), 0)], [result]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([true for (true, _), _ in cells], type=label_type),
            pa.array([predicted for (_, predicted), _ in cells], type=label_type),
            pa.array([count for _, count in cells], type=pa.int64()),
            pa.array(errors, type=pa.string()),
        ],
        names=["true", "predicted", "count", "error"],
    )


def _evaluate_dataframe(model: Any, payload: bytes, df: Any, features_col: str, label_col: str, batch_size: int,
                        classes: np.ndarray, scaling: dict | None) -> Counter:
    feature_column_kind(df, features_col)
    if label_col not in df.columns:
        raise InputDataError(f"DataFrame has no label column {label_col!r}; its columns are {df.columns}")
    strings = _string_classes(classes)
    if not isinstance(df.schema[label_col].dataType, StringType if strings else (NumericType, BooleanType)):
        expected = "strings, as the model's classes are" if strings else "numbers or booleans"
        raise InputDataError(f"label column {label_col!r} has type {df.schema[label_col].dataType.simpleString()}; "
                             f"expected {expected}")
    check_first_row(model, df, features_col, scaling)
    broadcast = df.sparkSession.sparkContext.broadcast(payload)
    dtype = np.float64 if scaling else np.float32  # scaled from the values as given, then float32

    def count_batches(batches: Iterator[Any]) -> Iterator[Any]:
        with _reported_input_errors() as outcome:
            replica = model_from_payload(broadcast.value)
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                X = scaled_features(features_from_arrow(batch.column(0), name=features_col, dtype=dtype), scaling)
                labels = batch.column(1)
                if labels.null_count:
                    raise InputDataError(f"label column {label_col!r} holds nulls; drop or fill them before evaluating")
                y = _class_labels(labels_from_arrow(labels, name=label_col), classes, f"column {label_col!r}")
                outcome.counts.update(_count_pairs(replica, X, y, batch_size))
        yield _cells_batch(outcome.result(), pa.string() if strings else pa.int64())

    label_type = "string" if strings else "long"
    schema = f"true {label_type}, predicted {label_type}, count long, error string"
    try:
        rows = df.select(features_col, label_col).mapInArrow(count_batches, schema).collect()
    finally:
        broadcast.destroy()
    parts: list[Counter | str] = [row["error"] for row in rows if row["error"] is not None]
    parts.append(Counter())
    for row in rows:  # several partitions report the same cell
        if row["error"] is None:
            parts[-1][(row["true"], row["predicted"])] += row["count"]
    return _merge_counts(parts)


def _session(spark: Any) -> Any:
    if spark is not None:
        return spark
    return get_spark_session()  # the active session, or a local one with the embedded defaults
