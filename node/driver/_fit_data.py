"""What a fit trains on, settled on the driver before any work (see :class:`node.driver._fit.Fit`).

:func:`prepare_fit_data` holds the validation rows out, cuts the rest into checked
partitions -- as many as the settings name, else as many as the training mode asks for these rows
and nodes (:func:`fit_partitions`) -- and sizes the model for them, refusing here, with the data's
own words, whatever an executor's replica would refuse later, and warns (``UserWarning``) where most
partitions hold less than a minibatch (:func:`small_partitions_warning`), where the partitions look sorted by
label and where the labels look like row ids (:mod:`node.data._label_spread`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from pyspark.sql import SparkSession

import rbm

from .._errors import InputDataError
from ..data import (BlockSink, DataOptions, PreparedData, array_inputs, check_model_input, count_rows,
                    grouped_labels, id_like_labels, is_rdd, prepare_training_data)
from ..modes import mode_named
from ..watch import ValidationSet, hold_out_validation
from ._settings import TrainingSettings
from ._timings import FitTimings

__all__ = ["fit_partitions", "model_input", "prepare_fit_data", "small_partitions_warning", "with_feature_names"]


def model_input(shape: tuple[int, ...]) -> int | tuple[int, ...]:
    """What ``initialize`` takes for a per-sample ``shape``: a width, or the shape of an image."""
    return int(shape[0]) if len(shape) == 1 else tuple(int(d) for d in shape)


def fit_partitions(settings: TrainingSettings, nodes: int, batch_size: int | None, data: Any) -> int | None:
    """Partitions per epoch: the settings', else as many as let the nodes merge often enough for these rows.
    A staged dataset (its URL) has one per shard: the settings' only, which must be that many, else None."""
    if settings.partitions:
        return int(settings.partitions)
    if isinstance(data, str):
        return None
    return mode_named(settings.mode).default_partitions(settings, nodes, count_rows(data), batch_size)


def prepare_fit_data(spark: SparkSession, settings: TrainingSettings, model: Any, spec: dict, data: Any, y: Any, *,
                     nodes: int, require_labels: bool, timings: FitTimings | None = None,
                     sink: BlockSink | None = None) -> tuple[PreparedData, ValidationSet | None]:
    """Checked partitions and the validation set; ``model`` initialized for the data.

    ``timings``: the fit's, given the steps ``validation hold-out``, ``data check`` and ``model check``.
    ``sink``: where data Spark reads is stored for the fit's nodes, by the job that checks it
    (numpy rows stay on the driver: :meth:`node.driver.FitJobs.store_partitions`).

    Raises
    ------
    InputDataError
        Data the model or its replicas would refuse (nothing stays cached then).
    StoreAccessError
        The store failed the job that reads and stores the data (down past ``store_retry_timeout_s``, or
        refusing the files): said once by each task that met it, none retried by Spark.
    """
    timings = timings or FitTimings()
    fixed = getattr(model, "classes_", None)
    data, y = array_inputs(data, y)  # a list, a pandas frame, a column of labels: as scikit-learn takes them
    with timings.step("validation hold-out"):
        data, y, validation = hold_out_validation(
            spark, data, y, fraction=settings.validation_fraction, given=settings.validation_data,
            seed=settings.seed, features_col=settings.features_col, label_col=settings.label_col)
    with timings.step("data check"):
        prepared = prepare_training_data(spark, data, y, DataOptions(
            partitions=fit_partitions(settings, nodes, spec.get("batch_size"), data),
            features_col=settings.features_col, label_col=settings.label_col,
            classes=None if fixed is None else np.asarray(fixed), require_labels=require_labels,
            shuffle_seed=settings.seed if settings.shuffle else None, max_classes=settings.max_classes, sink=sink,
            store_retry_timeout_s=settings.store_retry_timeout_s))
    try:
        with timings.step("model check"):
            bounds = _check_model(model, spec, prepared)
            _check_validation(validation, prepared, bounds)
    except BaseException:
        prepared.unpersist()
        raise
    warning = small_partitions_warning(prepared.rows_per_partition, spec.get("batch_size"))
    if warning:  # advice to whoever called Trainer.fit (the command line logs it)
        warnings.warn(warning, UserWarning, stacklevel=4)
    grouped = grouped_labels(prepared.summaries)
    if grouped:  # data the fit takes as partitioned (an RDD, shuffle=False, staged shards), sorted by label
        warnings.warn(f"{prepared.source}: {grouped}; {_ungrouping(data)}", UserWarning, stacklevel=4)
    ids = id_like_labels(prepared.summaries)
    if ids:
        warnings.warn(f"{prepared.source}: {ids}; check what the labels are (y, or a DataFrame's label_col)",
                      UserWarning, stacklevel=4)
    return prepared, validation


def _ungrouping(data: Any) -> str:
    """How to give the nodes rows of every class, for data of ``data``'s kind."""
    if is_rdd(data):
        return "shuffle the RDD first (rdd.repartition(n) spreads each partition's rows over all n)"
    if isinstance(data, str):
        return "stage it again: sparkdbn stage and stage_dataframe shuffle the rows before they cut the shards"
    return "leave shuffle on (shuffle=True, the default), which spreads the rows over the partitions at random"


def with_feature_names(model: Any, names: Any) -> Any:
    """``model`` naming the training data's columns in ``feature_names_in_`` (:func:`node.data.feature_names`),
    as its one-process ``fit`` does, or naming none for unnamed data (a model fitted before on a frame included)."""
    if names is None:
        model.__dict__.pop("feature_names_in_", None)
    else:
        model.feature_names_in_ = names
    return model


def small_partitions_warning(rows_per_partition: list[int], batch_size: int | None) -> str | None:
    """What to change when most partitions hold fewer rows than a minibatch, else None: each partition is a
    Spark task, a merge and a publish, so such an epoch costs many tasks for a few minibatch steps.

    Parameters
    ----------
    rows_per_partition : list of int
        The prepared data's partitions.
    batch_size : int or None
        The model's minibatch (None: not said).
    """
    filled = [rows for rows in rows_per_partition if rows]
    if not batch_size or not filled or sorted(filled)[len(filled) // 2] >= batch_size:
        return None
    rows = sum(filled)
    return (f"{len(rows_per_partition)} partitions of {rows} rows hold {sorted(filled)[len(filled) // 2]} rows each "
            f"(the median), fewer than a minibatch ({batch_size}): each partition is a Spark task, a merge and a "
            f"publish for less than one minibatch step, so an epoch is slow; use at most "
            f"{max(1, rows // batch_size)} partitions (partitions=, --partitions), or restage the dataset in fewer "
            "shards")


def _check_model(model: Any, spec: dict, prepared: PreparedData) -> tuple[float, float] | None:
    """Initialize ``model`` for the data, refusing what it, or a replica built from ``spec``, would refuse;
    returns the range the model's input takes (:meth:`input_bounds`)."""
    width = getattr(model, "n_features_in_", None)
    if width is not None and int(width) != int(np.prod(prepared.feature_shape)):
        raise InputDataError(f"the training data ({prepared.source}) has {int(np.prod(prepared.feature_shape))} "
                             f"features per sample, the model was initialized for {int(width)}")
    replica = _replica(spec, prepared)
    model.initialize(model_input(prepared.feature_shape), prepared.classes)
    bounds = replica.input_bounds()
    check_model_input(prepared, int(np.prod(prepared.feature_shape)), bounds)
    return bounds


def _check_validation(validation: ValidationSet | None, prepared: PreparedData,
                      bounds: tuple[float, float] | None) -> None:
    """The held-out rows have the training data's per-sample width and finite values (the model would
    refuse them at the first validation, after an epoch of training), and lie in the range the training
    data had to lie in (``bounds``): rows of another scale (raw 0..16 pixels) would be scored without a word."""
    if validation is None:
        return
    width, have = int(np.prod(prepared.feature_shape)), int(np.prod(validation.X.shape[1:]))
    if have != width:
        raise InputDataError(f"{validation.source} has {have} features per sample, the training data "
                             f"({prepared.source}) {width}")
    rows = validation.X.reshape(len(validation.X), width)
    try:
        rbm.check_features(rows, dtype=np.float32)
    except ValueError as error:
        raise InputDataError(f"{validation.source}: {error}") from error
    if bounds is not None:
        outside = np.flatnonzero((rows < bounds[0]) | (rows > bounds[1]))
        if outside.size:
            row, column = divmod(int(outside[0]), width)
            raise InputDataError(f"{validation.source}: row {row} column {column} holds {float(rows[row, column]):g}, "
                                 f"outside [{bounds[0]:g}, {bounds[1]:g}], the range the model's input takes (as the "
                                 "training data does): scale it as the training data is scaled")


def _replica(spec: dict, prepared: PreparedData) -> Any:
    """A replica sized from the spec for the data, as the executors build it: a mismatch fails here."""
    try:
        replica = rbm.model_from_spec(spec)
        replica.initialize(model_input(prepared.feature_shape), prepared.classes)
    except ValueError as error:
        raise InputDataError(f"the model does not accept the training data ({prepared.source}, per-sample shape "
                             f"{prepared.feature_shape}): {error}") from error
    return replica
