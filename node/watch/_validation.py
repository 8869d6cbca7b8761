"""Validation each epoch: a held-out set, evaluated with Spark on the epoch's consolidation.

The validation set is held out on the driver before the training data is partitioned
(``validation_fraction`` of numpy arrays or of a DataFrame, seeded), or given on its own
(``validation_data``: ``(X, y)`` arrays or a DataFrame).  It is small: it is kept on the driver as
arrays and shipped once to the executors as ``.npz`` chunks (never pickled objects).

At the end of every epoch :class:`Validator` evaluates the element-wise mean of the newest
snapshots of the epoch's nodes (:meth:`storage.WeightStore.consolidate`, the same rule as a
phase result).  On a local master the driver evaluates: the executors run on its own cores, so a
Spark job there only adds its start and the set's trip to the workers (LeNet on 7,190 digits28
rows, ``local[2]``: 1.2-1.4 s as a job, 0.8-1.0 s on the driver; the fit's first evaluation, which
ships the set, 2.8-3.8 s).  On a cluster, where it runs is chosen once per phase, by cost: the
driver times the first :data:`PROBE_ROWS` rows and estimates what the whole set would take it,
and what one Spark job would (:data:`JOB_START_S` to start, then the set spread over the job's
partitions); it evaluates the rest itself when it would be done no later, else every evaluation
of the phase is one Spark job (each partition rebuilds the model from the run's spec and the
broadcast parameters, and returns sums; the driver adds them up).  Whenever a training job holds
the executors' task slots or waits for them (``async`` queues each epoch's job behind the one
before), the driver evaluates: a Spark evaluation would wait for that job's end, a whole epoch
(digits28 LeNet, 2 epochs on ``local[2]``: the first epoch's figures came 14-15 s after its end).
Both compute the same sums with the same code (:func:`validation_sums`); the run record names
where (``evaluated_on``).  While a training job holds or waits for the executors, the driver
evaluates on one BLAS thread: more threads would take the cores a local master's nodes train on
(OpenBLAS's idle threads spin: the driver's CPU per fit of the digits28 DBN of ``bench_modes``
came to 2.1-2.7 s with two threads, 1.1-1.3 s with one).  When none does -- the fit's last epoch,
every epoch of ``sync`` and ``sharing`` -- the cores are idle and it takes as many threads as BLAS
has.

Metrics (all "lower is better" except accuracy):

* supervised phases: ``val_accuracy`` and ``val_loss`` (mean log loss, probabilities clipped at
  1e-15 as scikit-learn's ``log_loss`` does);
* RBM phases (``rbm``, ``rbmK``): ``val_loss`` = ``val_reconstruction_error`` (mean squared error
  per visible unit of the mean-field reconstruction, on the data transformed through the layers
  below, as the nodes' own training loss).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
from threadpoolctl import threadpool_limits

import rbm
import storage

from .._errors import InputDataError
from ..data import decode_block, encode_block, features_from_arrow, is_dataframe, labels_from_arrow

__all__ = ["ValidationSet", "Validator", "hold_out_validation", "is_supervised", "phase_metrics", "validation_sums",
           "JOB_START_S", "PROBE_ROWS", "VALIDATION_METRICS", "LOG_LOSS_EPS"]

logger = logging.getLogger(__name__)

#: Every metric a validation can report; early stopping monitors one of them.
VALIDATION_METRICS = ("val_loss", "val_accuracy", "val_reconstruction_error")
LOG_LOSS_EPS = 1e-15
#: Rows per model call.
BATCH_ROWS = 1024
#: What a Spark job takes to start before its tasks run (71-108 ms measured here; docs/training-modes.md).
JOB_START_S = 0.1
#: Rows the driver times to estimate what the whole validation set would take it.
PROBE_ROWS = 256


def is_supervised(phase: str) -> bool:
    """Supervised phases (``finetune``, ``train``) have labels; ``rbm``/``rbmK`` phases do not."""
    return not phase.startswith("rbm")


def phase_metrics(phase: str) -> tuple[str, ...]:
    """The metrics a validation of ``phase`` reports."""
    return ("val_loss", "val_accuracy") if is_supervised(phase) else ("val_loss", "val_reconstruction_error")


@dataclass(frozen=True)
class ValidationSet:
    """Held-out rows on the driver.

    Attributes
    ----------
    X : ndarray of shape (n_samples, *feature_shape)
    y : ndarray of shape (n_samples,), optional
        Labels as the user gave them (None: unlabelled, RBM phases only).
    source : str
        Where it came from, for messages and the run record.
    """

    X: np.ndarray
    y: np.ndarray | None
    source: str

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "n_samples": int(len(self.X))}


# --------------------------------------------------------------------------- holding out


def hold_out_validation(spark: Any, data: Any, y: Any, *, fraction: float | None, given: Any, seed: int,
                        features_col: str, label_col: str) -> tuple[Any, Any, ValidationSet | None]:
    """``(training data, training labels, validation set)``: the training data less the held-out rows.

    Raises
    ------
    InputDataError
        ``validation_fraction`` on data it cannot split on the driver (an RDD, a dataset URL),
        a fraction leaving no rows on either side, or a malformed ``validation_data``.
    """
    if given is not None:
        return data, y, _given_set(given, features_col, label_col)
    if not fraction:
        return data, y, None
    if is_dataframe(data):
        training, held = data.randomSplit([1.0 - fraction, fraction], seed=seed)
        validation = _frame_set(held, features_col, label_col, f"validation_fraction={fraction} of the DataFrame")
        return training, y, validation
    if isinstance(data, str):
        raise InputDataError(f"validation_fraction holds rows out of numpy arrays or a DataFrame, not out of the "
                             f"staged dataset {data}; give validation_data the URL of a staged split instead (its "
                             f"held-out split {data.rstrip('/')}/test, or one staged apart)")
    if not isinstance(data, np.ndarray):
        raise InputDataError(f"validation_fraction holds rows out of numpy arrays or a DataFrame, not "
                             f"{type(data).__name__}; give validation_data=(X_val, y_val) or a DataFrame instead")
    count = len(data)
    held_count = int(round(fraction * count))
    if held_count < 1 or held_count >= count:
        raise InputDataError(f"validation_fraction={fraction} of {count} rows holds out {held_count}: "
                             "both the training and the validation side need rows")
    order = np.random.default_rng([seed, 0x5A11D]).permutation(count)
    held, kept = np.sort(order[:held_count]), np.sort(order[held_count:])
    labels = None if y is None else np.asarray(y)
    if labels is not None and len(labels) != count:
        return data, y, None  # the data check names the length mismatch
    validation = ValidationSet(X=np.asarray(data[held]), y=None if labels is None else labels[held],
                               source=f"validation_fraction={fraction} ({held_count} of {count} rows)")
    return data[kept], None if labels is None else labels[kept], validation


def _given_set(given: Any, features_col: str, label_col: str) -> ValidationSet:
    if is_dataframe(given):
        return _frame_set(given, features_col, label_col, "validation_data (DataFrame)")
    if isinstance(given, str):  # a staged dataset (a held-out split): read whole on the driver
        try:
            X, y = storage.open_dataset(given).read_all()
        except storage.StoreError as error:
            raise InputDataError(f"validation_data {given} cannot be read as a staged dataset: {error}") from error
        if len(X) == 0:
            raise InputDataError(f"validation_data {given} has no rows")
        return ValidationSet(X=X.reshape(len(X), -1) if X.ndim > 2 else X, y=y,
                             source=f"validation_data {given} ({len(X)} rows)")
    if isinstance(given, tuple) and len(given) == 2:
        X, y = np.asarray(given[0]), None if given[1] is None else np.asarray(given[1])
        if X.ndim < 2 or len(X) == 0:
            raise InputDataError(f"validation_data X must have shape (n_samples, n_features) with rows, got {X.shape}")
        if y is not None and len(y) != len(X):
            raise InputDataError(f"validation_data has {len(X)} rows but {len(y)} labels")
        return ValidationSet(X=X, y=y, source=f"validation_data ({len(X)} rows)")
    raise InputDataError(f"validation_data takes (X_val, y_val) numpy arrays, a DataFrame or a staged dataset's "
                         f"URL, not {type(given).__name__}")


def _frame_set(df: Any, features_col: str, label_col: str, source: str) -> ValidationSet:
    columns = [features_col] + ([label_col] if label_col in df.columns else [])
    table = _to_arrow(df.select(*columns))
    if table.num_rows == 0:
        raise InputDataError(f"{source} has no rows")
    X = features_from_arrow(table.column(0).combine_chunks(), name=features_col)
    y = labels_from_arrow(table.column(1).combine_chunks(), name=label_col) if len(columns) == 2 else None
    return ValidationSet(X=X, y=y, source=f"{source} ({len(X)} rows)")


def _to_arrow(df: Any) -> Any:
    import pyarrow as pa

    if hasattr(df, "toArrow"):  # Spark 4
        return df.toArrow()
    return pa.Table.from_pandas(df.toPandas(), preserve_index=False)


# --------------------------------------------------------------------------- evaluating


class Validator:
    """Evaluates parameters on the validation set, on the driver or with Spark (see the module docstring).

    Parameters
    ----------
    spark : SparkSession
    validation : ValidationSet
    spec : dict
        The model's spec (:meth:`to_spec`); the model is rebuilt from it where it is evaluated.
    model_input : int or tuple of int
        What ``initialize`` takes (the per-sample width or shape).
    classes : ndarray, optional
        The run's class labels; validation labels become their indices.
    partitions : int
        Spark partitions of the validation set.
    job_start_s : float
        What the cost estimate counts for starting a Spark job.
    local : bool, optional
        The executors run on the driver's machine (default: whether the master is ``local``): the
        driver evaluates.
    """

    def __init__(self, spark: Any, validation: ValidationSet, spec: dict, model_input: Any,
                 classes: np.ndarray | None, partitions: int, job_start_s: float = JOB_START_S,
                 local: bool | None = None) -> None:
        self.sc = spark.sparkContext
        self.local = self.sc.master.startswith("local") if local is None else bool(local)
        self.validation = validation
        self.spec, self.model_input = dict(spec), model_input
        self.classes = classes
        self.indices = _class_indices(validation, classes)
        self.partitions = max(1, min(partitions, len(validation.X)))
        self.job_start_s = float(job_start_s)
        #: Where each phase is evaluated, "driver" or "spark" (decided at its first evaluation).
        self.evaluated_on: dict[str, str] = {}
        #: Where the last evaluation ran (the driver's when the executors were busy, or on a local master).
        self.last_evaluated_on = ""
        self._rdd: Any = None

    def evaluate(self, phase: str, params: dict[str, np.ndarray], executors_busy: bool = False) -> dict[str, float]:
        """The metrics of ``params`` (every parameter of the model) for ``phase`` (see :func:`phase_metrics`).

        ``executors_busy``: a training job holds the executors' task slots or waits for them, so a
        Spark evaluation would wait for its end: the driver evaluates.
        """
        if is_supervised(phase) and self.classes is None:
            raise InputDataError(f"phase {phase!r} is validated on labels, but the validation set has none")
        if self.local:
            self.evaluated_on[phase] = "driver"
        where = "driver" if executors_busy else self.evaluated_on.get(phase)
        if where == "spark":
            sums = self._spark_sums(phase, params)
        else:
            # One thread beside a training job (the driver's share of the cores), else BLAS's own count.
            with threadpool_limits(limits=1 if executors_busy else None):
                if where == "driver":
                    sums = validation_sums(self._model(params), phase, *self._rows(0, len(self.validation.X)))
                else:
                    sums = self._first_sums(phase, params)
        self.last_evaluated_on = where or self.evaluated_on[phase]
        rows, loss_sum, correct = (float(value) for value in sums)
        if is_supervised(phase):
            return {"val_loss": loss_sum / rows, "val_accuracy": correct / rows}
        return {"val_loss": loss_sum / rows, "val_reconstruction_error": loss_sum / rows}

    def _first_sums(self, phase: str, params: dict[str, np.ndarray]) -> np.ndarray:
        """Time the driver on the first rows; it evaluates the rest when it would be done no later than Spark."""
        rows = len(self.validation.X)
        probe = min(PROBE_ROWS, rows)
        model = self._model(params)
        sums, seconds = _timed_sums(model, phase, *self._rows(0, probe))
        if not self._sooner_on_driver(seconds * rows / probe):  # the first call may have paid one-time costs
            seconds = min(seconds, _timed_sums(model, phase, *self._rows(0, probe))[1])
        if not self._sooner_on_driver(seconds * rows / probe):
            self.evaluated_on[phase] = "spark"
            logger.info("validation of phase %s runs as Spark jobs: %d rows would take the driver about %.2f s",
                        phase, rows, seconds * rows / probe)
            return self._spark_sums(phase, params)
        self.evaluated_on[phase] = "driver"
        return sums + validation_sums(model, phase, *self._rows(probe, rows))

    def _sooner_on_driver(self, driver_s: float) -> bool:
        """Whether the driver, estimated ``driver_s``, would be done no later than one Spark job."""
        return driver_s <= self.job_start_s + driver_s / self.partitions

    def _rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray | None]:
        return self.validation.X[start:stop], None if self.indices is None else self.indices[start:stop]

    def _model(self, params: dict[str, np.ndarray]) -> Any:
        return _built_model(self.spec, self.model_input, self.classes, params)

    def _spark_sums(self, phase: str, params: dict[str, np.ndarray]) -> np.ndarray:
        payload = self.sc.broadcast(storage.encode_params(params, f"validation of phase {phase}"))
        try:
            task = functools.partial(_validate_partition, self.spec, self.model_input,
                                     None if self.classes is None else self.classes.tolist(), phase, payload)
            return np.sum([np.asarray(part, dtype=np.float64) for part in self._blocks().mapPartitions(task).collect()],
                          axis=0)
        finally:
            payload.destroy()

    def _blocks(self) -> Any:
        """The validation set as a cached RDD of ``.npz`` blocks (made at the first Spark evaluation)."""
        if self._rdd is None:
            chunks = np.array_split(np.arange(len(self.validation.X)), self.partitions)
            blocks = [encode_block(np.ascontiguousarray(self.validation.X[rows]),
                                   None if self.indices is None else self.indices[rows]) for rows in chunks]
            self._rdd = self.sc.parallelize(blocks, len(blocks)).cache()
        return self._rdd

    def close(self) -> None:
        if self._rdd is not None:
            self._rdd.unpersist()


def _class_indices(validation: ValidationSet, classes: np.ndarray | None) -> np.ndarray | None:
    if validation.y is None or classes is None:
        return None
    position = {value: index for index, value in enumerate(np.asarray(classes).tolist())}
    labels = np.asarray(validation.y).tolist()
    unknown = [label for label in labels if label not in position]
    if unknown:
        raise InputDataError(f"{validation.source} holds label {unknown[0]!r}, which the training data does not "
                             f"have (its classes: {np.asarray(classes).tolist()[:12]})")
    return np.asarray([position[label] for label in labels], dtype=np.int64)


def _built_model(spec: dict, model_input: Any, classes: Any, params: dict[str, np.ndarray]) -> Any:
    model = rbm.model_from_spec(spec)
    model.initialize(model_input, None if classes is None else np.asarray(classes))
    model.set_parameters(params)
    return model


def _validate_partition(spec: dict, model_input: Any, classes: list | None, phase: str, payload: Any,
                        blocks: Iterator[bytes]) -> Iterator[list[float]]:
    """On an executor: ``[rows, loss sum, correct]`` over this partition's validation blocks."""
    model = _built_model(spec, model_input, classes, storage.decode_params(payload.value, f"validation of phase {phase}"))
    sums = np.zeros(3)
    for block in blocks:
        sums += validation_sums(model, phase, *decode_block(block))
    yield sums.tolist()


def _timed_sums(model: Any, phase: str, X: np.ndarray, y: np.ndarray | None) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    sums = validation_sums(model, phase, X, y)
    return sums, time.perf_counter() - started


def validation_sums(model: Any, phase: str, X: np.ndarray, y: np.ndarray | None) -> np.ndarray:
    """``[rows, loss sum, correct]`` of ``model`` on ``X`` (``y``: class indices; supervised phases only)."""
    rows = loss_sum = correct = 0.0
    for start in range(0, len(X), BATCH_ROWS):
        X_batch = X[start:start + BATCH_ROWS]
        if is_supervised(phase):
            y_batch = y[start:start + BATCH_ROWS]
            proba = np.asarray(model.predict_proba(X_batch), dtype=np.float64)
            picked = np.clip(proba[np.arange(len(y_batch)), y_batch], LOG_LOSS_EPS, 1.0)
            loss_sum += float(-np.log(picked).sum())
            correct += float((proba.argmax(axis=1) == y_batch).sum())
        else:
            loss_sum += _reconstruction_error(model, phase, X_batch) * len(X_batch)
        rows += len(X_batch)
    return np.array([rows, loss_sum, correct])


def _reconstruction_error(model: Any, phase: str, X: np.ndarray) -> float:
    """The phase's RBM's reconstruction error on ``X`` transformed through the layers below it."""
    layers = getattr(model, "layers_", None)
    if layers is None:  # a lone RBM
        return float(model.reconstruction_error(X))
    data = X.reshape(len(X), -1)
    index = int(phase[3:])
    for layer in layers[:index]:
        data = layer.transform(data)
    return float(layers[index].reconstruction_error(data))
