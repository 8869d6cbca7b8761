"""Training data Spark reads, summarized where it is read (see :mod:`node.data._prepare`): a staged dataset's
shards, a DataFrame's partitions through Arrow (its rows shuffled across the partitions first,
``DataOptions.shuffle_seed``, so that rows sorted or grouped by label do not give each node a few classes), an
RDD's rows.  Each returns what collects the summaries, and the source's name for messages.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from pyspark import RDD

import storage

from .._errors import InputDataError, StoreAccessError
from ._frames import check_label_column, feature_column_kind
from ._partitions import arrow_partition_summary, rows_summary, shard_summary

if TYPE_CHECKING:
    from ._prepare import DataOptions

__all__ = ["check_staged_shards", "frame_summaries", "open_staged_dataset", "row_summaries", "staged_summaries"]


def open_staged_dataset(url: str, retry_timeout_s: float) -> storage.Dataset:
    """The staged dataset at ``url``, or the error a fit says: the store unreachable, or no dataset there."""
    try:
        return storage.open_dataset(url, retry_timeout_s=retry_timeout_s)
    except storage.StoreUnavailableError as error:
        raise StoreAccessError(f"cannot reach the store holding dataset {url!r}: {error}") from error
    except (storage.StoreError, FileNotFoundError, KeyError, ValueError) as error:
        raise InputDataError(f"dataset {url!r} cannot be opened (missing or not a staged dataset: "
                             f"{type(error).__name__}: {error}); stage it first with `sparkdbn stage`") from error


def staged_summaries(sc: Any, url: str, y: Any, options: "DataOptions") -> tuple[Any, str, dict]:
    """A staged dataset: each executor reads its own shard from the store, one shard per partition (and the
    dataset's meta)."""
    dataset = open_staged_dataset(url, options.store_retry_timeout_s)
    if y is not None:
        raise InputDataError("y must not be given with a staged dataset URL (its labels are staged with it)")
    partitions = int(dataset.num_shards)
    if partitions < 1:
        raise InputDataError(f"dataset {url!r} has no shards")
    if options.partitions is not None and int(options.partitions) != partitions:
        raise InputDataError(f"partitions {options.partitions} were asked for, but the staged dataset {url} trains "
                             f"one partition per shard, and it has {partitions}: leave partitions out, or stage it "
                             f"again with {options.partitions} shards (sparkdbn stage --shards {options.partitions})")
    check_staged_shards(dataset)
    rdd = sc.parallelize(range(partitions), partitions).mapPartitionsWithIndex(
        functools.partial(shard_summary, dataset, options.sink, options.max_classes))
    return rdd.collect, f"dataset {url}", dataset.meta


def check_staged_shards(dataset: storage.Dataset) -> None:
    """Refuse a staged dataset whose store lacks a shard its meta lists, before any Spark job reads it: the task
    reading the shard would fail as often as Spark tried it.  One listing of the dataset's folder (a shard
    that goes after this check is reported once by its task, :func:`~node.data._partitions.shard_summary`).

    Parameters
    ----------
    dataset : storage.Dataset
        The opened dataset (its ``_meta.json`` lists the shards).

    Raises
    ------
    InputDataError
        A shard is missing; the message names the dataset's URL and the shard.
    StoreAccessError
        The store cannot be reached.
    """
    try:
        missing = dataset.missing_shards()
    except storage.StoreUnavailableError as error:
        raise StoreAccessError(f"cannot reach the store holding dataset {dataset.url!r}: {error}") from error
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise InputDataError(f"dataset {dataset.url!r} lacks its shard {missing[0]!r}{more}, which its _meta.json "
                             "lists; nothing was trained: stage the dataset again")


def frame_summaries(df: Any, y: Any, partitions: int, options: "DataOptions") -> tuple[Any, str]:
    """A DataFrame: select features and labels, repartition, each partition read through Arrow in one task.

    One ``mapInArrow`` stage does it all (its rows: each partition's summary as JSON).  Pipelined
    into a Python RDD stage, ``mapInArrow`` took a second Python worker in each task, and a Spark
    executor keeps every worker it makes: ``local[2]`` kept four, and the fit's nodes took turns
    among them (tests/node/test_worker_pool.py).
    """
    features_col, label_col = options.features_col, options.label_col
    if y is not None:
        raise InputDataError(f"y must not be given with a DataFrame (its labels are its column {label_col!r})")
    feature_column_kind(df, features_col)
    columns = [features_col]
    if label_col in df.columns or options.require_labels:  # a model that needs labels names the columns there are
        check_label_column(df, label_col)
        columns.append(label_col)
    selected = df.select(*columns)
    if options.shuffle_seed is not None:  # rows sorted or grouped by label would give each node a few classes
        from pyspark.sql import functions

        selected = selected.repartition(partitions, functions.rand(options.shuffle_seed))
    elif selected.rdd.getNumPartitions() != partitions:
        selected = selected.repartition(partitions)
    summaries = selected.mapInArrow(functools.partial(arrow_partition_summary, options.sink, options.max_classes),
                                    "summary string")
    return (lambda: [json.loads(row.summary) for row in summaries.collect()]), f"DataFrame[{features_col}, {label_col}]"


def row_summaries(data: RDD, y: Any, partitions: int, options: "DataOptions") -> tuple[Any, str]:
    """An RDD of ``(features, label)`` rows (or bare features), one summary per partition."""
    if y is not None:
        raise InputDataError("y must not be given with an RDD (rows are (features, label) pairs)")
    # Kept as partitioned where the count matches: a row it refuses is named by the RDD's own partition and row.
    rdd = data if data.getNumPartitions() == partitions else data.repartition(partitions)
    return (rdd.mapPartitionsWithIndex(functools.partial(rows_summary, options.sink, options.max_classes)).collect,
            "RDD of (features, label)")
