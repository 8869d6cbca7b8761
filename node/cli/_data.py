"""The dataset a run trained on, as the command line uses it: held-out split and scaling by default.

A run's record names its data (``data.source``: ``"dataset <url>"`` for a staged dataset); the
dataset's ``_meta.json`` holds the held-out split (``splits.test``) and the scaling applied when it
was staged (``scaling``), so ``sparkdbn evaluate --run ID`` evaluates on that split, ``evaluate``
/ ``predict`` with ``--input`` scale new data the same way, and ``--dataset`` is refused where its
shards were scaled otherwise than the run's training data.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

import storage

from ._options import UsageError

__all__ = ["run_dataset_url", "held_out_split", "dataset_scaling", "check_same_scaling", "class_names",
           "with_class_names"]

logger = logging.getLogger(__name__)

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


def _scaling_difference(theirs: dict | None, trained: dict | None, trained_on: str) -> str:
    """How a dataset's scaling ``theirs`` differs from the scaling ``trained`` of the run's dataset ``trained_on``."""
    if theirs and not trained:
        return f"scaled to [0, 1] when staged (--scale {theirs.get('kind')}); the run's training data {trained_on} was not"
    if trained and not theirs:
        return (f"as given (not scaled); the run's training data {trained_on} was scaled to [0, 1] by its own range "
                f"(--scale {trained.get('kind')})")
    return (f"scaled by another range than the run's training data {trained_on} (a dataset staged with --scale is "
            "scaled by its own training part's range)")


def _trained_meta(trained_on: str, url: str) -> dict | None:
    """The ``_meta.json`` of the dataset ``trained_on`` the run trained on; None (said in the log) when it is gone."""
    try:
        return storage.open_dataset(trained_on).meta
    except storage.StoreError as error:  # the run's dataset is gone: nothing to compare with
        logger.warning("cannot read %s, which the run trained on (%s): %s is used as it is staged", trained_on, error,
                       url)
        return None


def check_same_scaling(flag: str, url: str, meta: dict, trained_on: str | None, *, labels: bool = False) -> None:
    """Refuse ``flag url`` (a staged dataset, ``meta`` its ``_meta.json``) when its shards hold features scaled
    otherwise than those of the staged dataset ``trained_on`` the run trained on: the model would meet
    features on another scale.  With ``labels``, refuse it too when its label indices stand for other classes
    (``_meta.json``'s ``classes``).  Nothing to compare for a run trained on anything else."""
    trained = None if trained_on is None else _trained_meta(trained_on, url)
    if trained is None:
        return
    if meta.get("scaling") != trained.get("scaling"):
        raise UsageError(f"{flag} {url} holds features {_scaling_difference(meta.get('scaling'), trained.get('scaling'), trained_on)}"
                         ": the model would meet features on another scale than it learned. Give the raw rows as "
                         "--input (a Parquet file with a features column), which is scaled as the run's dataset was, "
                         "or stage them with the run's dataset (sparkdbn stage --input ... --test-fraction)")
    if labels and meta.get("classes") != trained.get("classes"):
        def named(classes: list | None) -> str:
            return f"the classes {classes[:12]}" if classes else "the labels themselves (0 .. k-1)"

        raise UsageError(f"{flag} {url} numbers its labels by {named(meta.get('classes'))}, the run's training data "
                         f"{trained_on} by {named(trained.get('classes'))}: a label index stands for another class "
                         "in each. Stage the data with the run's dataset (sparkdbn stage --input ... --test-fraction)")


def class_names(url: str | None) -> list | None:
    """The classes a staged dataset's label indices stand for (``_meta.json``'s ``classes``), None: the labels
    themselves (or no staged dataset, or one that cannot be read now)."""
    try:
        return storage.open_dataset(url).meta.get("classes") if url else None
    except storage.StoreError:
        return None


def with_class_names(report: Any, classes: list | None) -> Any:
    """``report`` (a :class:`node.ClassificationReport` over label indices) with the classes they stand for."""
    if not classes or not all(0 <= int(label) < len(classes) for label in report.labels):
        return report
    return type(report).from_confusion_matrix([classes[int(label)] for label in report.labels], report.confusion_matrix)
