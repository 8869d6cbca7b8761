"""Distributed inference: ship a trained model to Spark's Python workers and predict per partition.

The model object is never pickled.  The driver turns it into *payload bytes* -- the model file
written by ``model.save`` (an ``.npz`` of named arrays plus the JSON spec, see
:func:`rbm.save_model`) -- and broadcasts those bytes.  Each Python worker rebuilds the
model once with :func:`rbm.load_model` (``allow_pickle=False``) and keeps it in a small
process-wide cache keyed by the payload's sha256 and the device, so a reused worker does not
rebuild it for every task.  Features move through Arrow (``mapInArrow``), a whole record batch at a time.

A replica serves where its task is given to compute (:func:`node.executor.serving_device`): on
the GPU Spark assigned the task (``spark.task.resource.gpu.amount``), else on the CPU -- whatever
device the model was fitted on, so a model fitted on GPUs serves on CPU executors too.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import threading
from collections import OrderedDict
from typing import Any, Iterator, Literal

import numpy as np
import pyarrow as pa
from pyspark import TaskContext
from pyspark.accumulators import AccumulatorParam
from pyspark.ml.linalg import VectorUDT
from pyspark.sql.types import ArrayType, DoubleType, StringType, StructField, StructType

import rbm
import storage

from .._errors import InputDataError
from ..data import apply_scaling, feature_column_kind, features_from_arrow, write_parquet_safely
from ..executor import serving_device, serving_spec, settle_worker_heap
from ._classes import MAX_LABEL_INDEXED_WIDTH, label_indexed_width, model_classes, spread_to_labels

__all__ = ["predict_dataframe", "write_predictions", "model_payload", "model_from_payload", "load_model_here",
           "predict_proba_batched", "raw_predictions", "scaled_features", "located"]

log = logging.getLogger(__name__)

#: Models kept per Python worker; a worker rarely serves more than one or two at a time.
_CACHE_SIZE = 4
_cache: "OrderedDict[str, Any]" = OrderedDict()
_cache_lock = threading.Lock()


# --------------------------------------------------------------------------- the model on the wire


def model_payload(model: Any) -> bytes:
    """The model's file as bytes: :func:`rbm.save_trained`'s (``model.save(path)``'s for rbm's models: npz + JSON spec).

    Raises
    ------
    InputDataError (a ValueError)
        The model cannot be saved (not trained, or not a sparkdbn model).
    TypeError
        A model of one's own that no executor can import (:func:`rbm.model_spec`).
    """
    if not hasattr(model, "predict_proba") or not hasattr(model, "to_spec"):
        raise InputDataError(
            f"{type(model).__name__} is not a sparkdbn classifier: it needs predict_proba() and the trainable seam "
            "(use rbm.DBN, rbm.ConvNet, a model from rbm.load_model, or a model of your own: rbm.TrainableModel)"
        )
    with tempfile.TemporaryDirectory(prefix="sparkdbn-payload-") as directory:
        path = os.path.join(directory, "model.npz")
        try:
            rbm.save_trained(model, path)
        except (RuntimeError, ValueError, AttributeError) as error:  # an untrained model has nothing to save
            raise InputDataError(f"cannot ship the {type(model).__name__} to the executors: {error}; is it trained?") from error
        with open(path, "rb") as handle:
            return handle.read()


def model_from_payload(payload: bytes) -> Any:
    """Rebuild a model from :func:`model_payload` bytes where this task serves, once per process and device."""
    device = serving_device()
    key = f"{storage.sha256_hex(payload)}/{device.kind}/{device.index}"
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    # load_model reads a path; a private temporary file keeps the one reader that never unpickles.
    with tempfile.TemporaryDirectory(prefix="sparkdbn-model-") as directory:
        path = os.path.join(directory, "model.npz")
        with open(path, "wb") as handle:
            handle.write(payload)
        spec, arrays = rbm.read_model_file(path)
        serving = serving_spec(spec, device)
        if serving != spec:  # fitted for another device than this task's: the same weights, rebuilt here
            rbm.save_model(path, serving, arrays)
        model = rbm.load_model(path)
    with _cache_lock:
        _cache[key] = model
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    settle_worker_heap()  # the evicted model collected, this one out of Spark's per-task collection
    return model


def load_model_here(path: str) -> Any:
    """:func:`rbm.load_model`, on the CPU when the file asks for a GPU this machine cannot give (a driver)."""
    spec, arrays = rbm.read_model_file(path)
    if spec.get("device") == "gpu" and not rbm.gpu_available():
        log.info("%s was fitted on a GPU and this machine has none usable: loaded on the CPU in float32", path)
        rbm.save_model(path, {**spec, "device": "cpu", "precision": "float32"}, arrays)
    return rbm.load_model(path)


def predict_proba_batched(model: Any, X: np.ndarray, batch_size: int) -> np.ndarray:
    """``model.predict_proba`` in slices of ``batch_size`` rows (bounded memory per worker).

    A refusal by the model (wrong width, NaN ...) becomes :class:`InputDataError` naming the
    Spark partition (when running in a task) and the row within it.

    Returns
    -------
    ndarray of shape (n_samples, n_classes), float64
    """
    if len(X) == 0:
        return np.zeros((0, len(model_classes(model))), dtype=np.float64)
    parts = []
    for start in range(0, len(X), batch_size):
        try:
            parts.append(np.asarray(model.predict_proba(X[start : start + batch_size])))
        except ValueError as error:
            raise InputDataError(f"{task_location()}rows {start}..{min(len(X), start + batch_size) - 1} of a batch: {error}") from error
    return np.concatenate(parts).astype(np.float64, copy=False)


def task_location() -> str:
    """``"partition N, "`` inside a Spark task, ``""`` elsewhere (prefix for error messages)."""
    context = TaskContext.get()
    return f"partition {context.partitionId()}, " if context is not None else ""


def located(error: BaseException) -> str:
    """The message of an input error met in a task, beginning with the partition it was met in."""
    message = str(error)
    return message if message.startswith("partition ") else task_location() + message


def scaled_features(X: np.ndarray, scaling: dict | None) -> np.ndarray:
    """``X`` scaled as the staged dataset a model trained on was (its ``_meta.json``'s ``scaling``:
    :func:`node.data.apply_scaling`), float32; ``X`` itself without scaling.

    Raises
    ------
    InputDataError
        ``X`` has another number of features than the scaling.
    """
    if not scaling or len(X) == 0:
        return X
    try:
        return apply_scaling(X, scaling)
    except storage.DatasetError as error:
        raise InputDataError(f"{error}; the model takes features scaled as its training data was") from error


_INPUT_ERROR = re.compile(r"InputDataError: (.+)")


def raise_input_errors_from(error: BaseException, what: str) -> None:
    """Re-raise a failed Spark job caused by bad input on an executor as a short InputDataError.

    Spark wraps the executor's exception in a long Java/Python trace; the user needs its last
    ``InputDataError: ...`` line.  Returns (so the caller re-raises ``error``) when there is none.
    """
    found = _INPUT_ERROR.findall(str(error))
    if found:
        raise InputDataError(f"{what}: {found[-1].strip()}") from error


#: Floor of a probability before its logarithm, so that a 0 gives a finite raw prediction.
_TINY_PROBABILITY = 1e-300


def raw_predictions(proba: np.ndarray) -> np.ndarray:
    """The raw prediction of each class: ``log p`` (natural log, floored at ``log 1e-300``).

    What pyspark.ml's ``rawPrediction`` is for: a per-class confidence whose order is the
    probabilities' order (argmax is the prediction; for two classes, ``[1]`` ranks rows for
    ``BinaryClassificationEvaluator``).  The log-softmax equals the output layer's logits minus a
    per-row constant.
    """
    return np.log(np.maximum(proba, _TINY_PROBABILITY))


def _arrow_probability(proba: np.ndarray, as_vector: bool) -> Any:
    """Probabilities as Arrow ``list<double>`` or as the dense-VectorUDT struct."""
    n_rows, n_classes = proba.shape
    offsets = pa.array(np.arange(0, (n_rows + 1) * n_classes, n_classes, dtype=np.int32))
    values = pa.ListArray.from_arrays(offsets, pa.array(proba.reshape(-1), type=pa.float64()))
    if not as_vector:
        return values
    return pa.StructArray.from_arrays(
        [
            pa.array(np.ones(n_rows, dtype=np.int8), type=pa.int8()),  # 1 = dense
            pa.nulls(n_rows, type=pa.int32()),
            pa.nulls(n_rows, type=pa.list_(pa.int32())),
            values,
        ],
        names=["type", "size", "indices", "values"],
    )


# --------------------------------------------------------------------------- DataFrame checks


def check_first_row(model: Any, df: Any, features_col: str, scaling: dict | None = None) -> None:
    """Validate one row on the driver with the model itself (width, NaN; scaled by ``scaling``), before the Spark job."""
    first = df.select(features_col).limit(1).collect()
    if not first:
        return
    value = first[0][0]
    row = np.asarray(value.toArray() if hasattr(value, "toArray") else value,
                     dtype=np.float64 if scaling else np.float32)[None, :]
    try:
        model.predict_proba(scaled_features(row, scaling))
    except (ValueError, RuntimeError) as error:  # the model's own input checks
        raise InputDataError(f"features column {features_col!r} does not fit the model: {error}") from error


# --------------------------------------------------------------------------- predict_dataframe


def predict_dataframe(
    model: Any,
    df: Any,
    *,
    features_col: str = "features",
    prediction_col: str = "prediction",
    probability_col: str | None = "probability",
    raw_prediction_col: str | None = "rawPrediction",
    batch_size: int = 1024,
    probability_type: Literal["array", "vector"] = "vector",
    scaling: dict | None = None,
    label_indexed: bool = False,
) -> Any:
    """Add pyspark.ml's classifier columns to a DataFrame, computed on the executors.

    The columns are those of pyspark's own probabilistic classifiers (``LogisticRegression``,
    ``RandomForestClassificationModel``): ``rawPrediction`` and ``probability`` as dense
    ``pyspark.ml.linalg`` Vectors and ``prediction`` as a double, so pyspark's
    ``MulticlassClassificationEvaluator``, ``BinaryClassificationEvaluator``, ``CrossValidator``
    and ``TrainValidationSplit`` take the result unchanged.

    The result is computed when an action asks for it.  A bad row past the first one (checked
    on the driver) fails its task there, which Spark tries again up to ``spark.task.maxFailures``
    times before the action fails; :func:`write_predictions` reports such a row once, untried again.

    Parameters
    ----------
    model : trained rbm.DBN / rbm.ConvNet (anything with ``save``, ``predict_proba``, ``classes_``)
    df : pyspark.sql.DataFrame
        Holds ``features_col``: ``array<float|double>`` of the model's width, or a
        ``pyspark.ml.linalg`` Vector.  All other columns pass through unchanged.
    features_col : str
        Column of the features read.
    prediction_col : str
        Column of the predicted label written.
    probability_col : str or None
        Column of the class probabilities written; None or ``""`` leaves it out.
    raw_prediction_col : str or None
        Column of the raw scores written; None or ``""`` leaves it out.
    batch_size : int
        Rows per ``predict_proba`` call on an executor.
    probability_type : {"vector", "array"}
        A dense ``pyspark.ml.linalg`` Vector (default: what Spark ML evaluators use), or
        ``array<double>``; for both the probability and the raw prediction column.
    scaling : dict, optional
        The ``scaling`` of the staged dataset the model trained on (its ``_meta.json``, see
        ``sparkdbn stage --scale``): the features are scaled so on the executors before the
        model sees them; the features column itself is written unchanged.
    label_indexed : bool
        Index the probability and raw prediction vectors by label value, as Spark ML's classifiers and
        evaluators do: ``max(label) + 1`` entries, 0 probability (raw ``log 1e-300``) for labels no class
        has, when the labels are non-negative integers (:func:`label_indexed_width`); else, and by
        default, the vectors follow ``model.classes_`` (what ``sparkdbn predict`` writes).

    Returns
    -------
    pyspark.sql.DataFrame
        ``df``'s columns plus ``raw_prediction_col`` (n_classes values: ``log`` of the
        probabilities, see :func:`raw_predictions`), ``probability_col`` (n_classes values in
        ``model.classes_`` order; by label value with ``label_indexed``) and ``prediction_col``
        (double: the predicted class label, as Spark ML does; class indices when the labels were
        ``0 .. k-1``; a string for a model fitted on string labels).

    Raises
    ------
    InputDataError (a ValueError)
        Missing or mistyped features column, an output column that already exists, or
        features the model refuses (checked on one row on the driver before the job runs).
    """
    frame, _ = _prediction_frame(model, df, features_col=features_col, prediction_col=prediction_col,
                                 probability_col=probability_col, raw_prediction_col=raw_prediction_col,
                                 batch_size=batch_size, probability_type=probability_type, scaling=scaling,
                                 refusals=None, label_indexed=label_indexed)
    return frame


def write_predictions(
    model: Any,
    df: Any,
    output: str,
    *,
    inputs: tuple[str, ...] = (),
    overwrite: bool = False,
    source: str = "the input",
    features_col: str = "features",
    prediction_col: str = "prediction",
    probability_col: str | None = "probability",
    raw_prediction_col: str | None = "rawPrediction",
    batch_size: int = 1024,
    probability_type: Literal["array", "vector"] = "vector",
    scaling: dict | None = None,
    drop_columns: tuple[str, ...] = (),
) -> None:
    """Write ``df`` with :func:`predict_dataframe`'s columns as Parquet to the folder ``output``.

    Written as :func:`node.data.write_parquet_safely` writes (never over an input nor over files it
    did not write; renamed into place once complete).  A row the model refuses (wrong width, NaN)
    is reported by its task instead of failing it, so Spark does not try the partition again: the
    write then raises once, naming the partition, and leaves nothing at ``output``.

    Parameters
    ----------
    output : str
        Folder (path or URL Spark writes to, ``hdfs://`` too).
    inputs : tuple of str
        Where ``df`` was read from: the output may not be, hold or lie inside any of them.
    overwrite : bool
        Replace predictions this function wrote to ``output`` before (nothing else).
    source : str
        What ``df`` is, to begin the error message with (e.g. ``"--input data.parquet"``).
    features_col : str
        Column of the features read (as :func:`predict_dataframe` takes it, as are the next six).
    prediction_col : str
        Column of the predicted label written.
    probability_col : str or None
        Column of the class probabilities written; None or ``""`` leaves it out.
    raw_prediction_col : str or None
        Column of the raw scores written; None or ``""`` leaves it out.
    batch_size : int
        Rows per ``predict_proba`` call on an executor.
    probability_type : {"vector", "array"}
        The type of the probability and raw prediction columns.
    scaling : dict, optional
        The ``scaling`` of the staged dataset the model trained on, applied to the features first.
    drop_columns : tuple of str
        Columns of ``df`` the model reads but that are not written (e.g. the features).

    Raises
    ------
    InputDataError (a ValueError)
        What :func:`predict_dataframe` refuses, a bad row found on an executor, or an output it may
        not write.
    """
    refusals = df.sparkSession.sparkContext.accumulator([], _Refusals())
    frame, broadcast = _prediction_frame(model, df, features_col=features_col, prediction_col=prediction_col,
                                         probability_col=probability_col, raw_prediction_col=raw_prediction_col,
                                         batch_size=batch_size, probability_type=probability_type, scaling=scaling,
                                         refusals=refusals)
    frame = frame.drop(*drop_columns) if drop_columns else frame

    def check() -> None:
        found = sorted(refusals.value)  # by partition: the first one is the same whichever task ended first
        if found:
            more = f" (and {len(found) - 1} more partition(s))" if len(found) > 1 else ""
            raise InputDataError(f"{source}: {found[0][1]}{more}; nothing was written")

    try:
        write_parquet_safely(frame, output, inputs=inputs, overwrite=overwrite, check=check)
    finally:
        broadcast.destroy()  # the model's bytes leave the executors with the job


class _Refusals(AccumulatorParam):
    """A Spark accumulator of ``(partition, message)``: the input errors a write's tasks reported instead of raising."""

    def zero(self, value: list) -> list:
        return []

    def addInPlace(self, first: list, second: list) -> list:
        return first + second


def _prediction_frame(model: Any, df: Any, *, features_col: str, prediction_col: str, probability_col: str | None,
                      raw_prediction_col: str | None, batch_size: int, probability_type: str, scaling: dict | None,
                      refusals: Any, label_indexed: bool = False) -> tuple[Any, Any]:
    """``(frame, broadcast)``: ``df`` with the prediction columns, and the broadcast model file it reads.

    With ``refusals`` (an accumulator of :class:`_Refusals`), a task that meets a row the model
    refuses adds ``(partition, message)`` to it and reads the rest of its partition without
    predicting, instead of raising (a raise is tried again by Spark, on the same rows).
    """
    if not hasattr(df, "schema") or not hasattr(df, "sparkSession"):
        raise InputDataError(f"the rows to predict must be a Spark DataFrame, got {type(df).__name__}: for arrays, "
                             "the model's own predict or predict_proba (node.evaluate scores them with Spark)")
    feature_column_kind(df, features_col)
    probability_col, raw_prediction_col = probability_col or None, raw_prediction_col or None  # "": left out too
    for column in (prediction_col, probability_col, raw_prediction_col):
        if column is not None and column in df.columns:
            raise InputDataError(f"output column {column!r} already exists in the DataFrame; choose another name")
    if batch_size < 1:
        raise InputDataError(f"batch_size must be >= 1, got {batch_size}")
    if probability_type not in ("vector", "array"):
        raise InputDataError(f"probability_type must be 'vector' or 'array', got {probability_type!r}")
    classes = model_classes(model)
    width = label_indexed_width(classes) if label_indexed else None
    if label_indexed and width is None and classes.dtype.kind in "iuf":
        log.warning("the model's labels (%s ... %s) cannot index vectors of at most %d entries: its probability "
                    "vectors follow its %d classes in order (index the labels with StringIndexer before fitting)",
                    classes[0], classes[-1], MAX_LABEL_INDEXED_WIDTH, len(classes))
    string_classes = classes.dtype.kind in "US"  # a model fitted on string labels predicts them
    classes = classes.astype(str if string_classes else np.float64)
    check_first_row(model, df, features_col, scaling)

    vector_type = VectorUDT() if probability_type == "vector" else ArrayType(DoubleType(), False)
    fields = list(df.schema.fields)
    if raw_prediction_col is not None:
        fields.append(StructField(raw_prediction_col, vector_type, False))
    if probability_col is not None:
        fields.append(StructField(probability_col, vector_type, False))
    fields.append(StructField(prediction_col, StringType() if string_classes else DoubleType(), False))
    schema = StructType(fields)

    broadcast = df.sparkSession.sparkContext.broadcast(model_payload(model))
    # Plain values only in the closure (not the model, not self): they are what the workers get.
    as_vector = probability_type == "vector"
    dtype = np.float64 if scaling else np.float32  # scaled from the values as given, then float32

    def predict_batches(batches: Iterator[Any]) -> Iterator[Any]:
        replica = model_from_payload(broadcast.value)
        for batch in batches:
            try:
                X = scaled_features(features_from_arrow(batch.column(features_col), name=features_col, dtype=dtype),
                                    scaling)
                proba = predict_proba_batched(replica, X, batch_size)
            except InputDataError as error:
                if refusals is None:
                    raise
                refusals.add([(TaskContext.get().partitionId(), located(error))])
                for _ in batches:  # the rest is read, not predicted: the write that asked for it is refused
                    pass
                return
            prediction = classes[np.argmax(proba, axis=1)] if len(X) else classes[:0]
            if width is not None:
                proba = spread_to_labels(proba, classes, width)
            out_columns, names = list(batch.columns), list(batch.schema.names)
            if raw_prediction_col is not None:
                out_columns.append(_arrow_probability(raw_predictions(proba), as_vector))
                names.append(raw_prediction_col)
            if probability_col is not None:
                out_columns.append(_arrow_probability(proba, as_vector))
                names.append(probability_col)
            out_columns.append(pa.array(prediction, type=pa.string() if string_classes else pa.float64()))
            names.append(prediction_col)
            yield pa.RecordBatch.from_arrays(out_columns, names=names)

    log.debug("predicting %s -> %s/%s with a %d-byte model broadcast", features_col, prediction_col, probability_col,
              len(broadcast.value))
    return df.mapInArrow(predict_batches, schema), broadcast
