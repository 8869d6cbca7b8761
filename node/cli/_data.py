"""The dataset a run trained on, as the command line uses it: held-out split and scaling by default.

A run's record names its data (``data.source``: ``"dataset <url>"`` for a staged dataset) and keeps
how that dataset was scaled when staged and the columns it was staged from (``data.scaling``,
``data.feature_names``, as its ``_meta.json`` said when the run trained: :class:`TrainedOn`).  So
``evaluate`` / ``predict`` with ``--input`` scale new data as the model's training data was, whatever
became of the dataset since (staged again, moved); ``--dataset`` is refused where its shards were scaled
otherwise, or (for ``evaluate``) labelled by classes the model never learned.  The dataset's held-out
split (``splits.test`` of its ``_meta.json``) is what ``sparkdbn evaluate --run ID`` evaluates on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import storage

from ._options import UsageError

__all__ = ["TrainedOn", "run_dataset_url", "held_out_split", "check_same_scaling", "model_width", "check_same_width",
           "check_known_classes"]

_PREFIX = "dataset "


def run_dataset_url(record: dict | None) -> str | None:
    """The staged dataset URL a run trained on, or None (arrays, a DataFrame, an RDD)."""
    source = str(((record or {}).get("data") or {}).get("source") or "")
    return source[len(_PREFIX):] if source.startswith(_PREFIX) else None


def held_out_split(url: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(X_test, y_test)`` of the dataset's held-out split (``<url>/test``), None when it has none."""
    split = storage.open_split(url, "test")  # refuses a split staged by another staging than the training set
    return None if split is None else split.read_all()


def _scaling_difference(theirs: dict | None, trained: dict | None, trained_on: str) -> str:
    """How a dataset's scaling ``theirs`` differs from the scaling ``trained`` of the run's dataset ``trained_on``."""
    if theirs and not trained:
        return f"scaled to [0, 1] when staged (--scale {theirs.get('kind')}); the run's training data {trained_on} was not"
    if trained and not theirs:
        return (f"as given (not scaled); the run's training data {trained_on} was scaled to [0, 1] by its own range "
                f"(--scale {trained.get('kind')})")
    return (f"scaled by another range than the run's training data {trained_on} (a dataset staged with --scale is "
            "scaled by its own training part's range)")


@dataclass(frozen=True)
class TrainedOn:
    """The data a run trained on, as far as new rows meet its model.

    Attributes
    ----------
    url : str or None
        The staged dataset (None: arrays, a DataFrame or an RDD, used as given).
    scaling : dict or None
        Its scaling when the run trained (``--scale minmax``'s range), None where it was not scaled.
    feature_names : tuple of str or None
        The columns it was staged from, which new rows may have instead of a features column.
    """

    url: str | None
    scaling: dict | None
    feature_names: tuple[str, ...] | None

    @classmethod
    def of(cls, record: dict | None, run: str) -> TrainedOn:
        """What ``record`` (run ``run``'s) says; a record written before it kept the scaling: the dataset's
        ``_meta.json`` as it is now.

        Raises
        ------
        UsageError
            Such an earlier record's dataset cannot be read now.
        """
        url, data = run_dataset_url(record), (record or {}).get("data") or {}
        if url is None or "scaling" in data:
            names = data.get("feature_names")
            return cls(url, data.get("scaling"), tuple(names) if names else None)
        try:
            meta = storage.open_dataset(url).meta
        except storage.StoreError as error:
            raise UsageError(f"run {run} trained on the staged dataset {url}, which cannot be read now ({error}), and "
                             "its record (written by an earlier sparkdbn) does not keep how that dataset was scaled: "
                             "stage it there again as it was") from error
        names = meta.get("feature_names")
        return cls(url, meta.get("scaling"), tuple(names) if names else None)


def check_same_scaling(flag: str, url: str, meta: dict, trained: TrainedOn) -> None:
    """Refuse ``flag url`` (a staged dataset, ``meta`` its ``_meta.json``) when its shards hold features scaled
    otherwise than the run's training data ``trained`` were: the model would meet features on another scale."""
    if meta.get("scaling") != trained.scaling:
        what = trained.url or "(arrays of its own, not a staged dataset)"
        difference = _scaling_difference(meta.get("scaling"), trained.scaling, what)
        raise UsageError(f"{flag} {url} holds features {difference}"
                         ": the model would meet features on another scale than it learned. Give the raw rows as "
                         "--input (a Parquet file with a features column), which is scaled as the run's dataset was, "
                         "or stage them with the run's dataset (sparkdbn stage --input ... --test-fraction)")


def model_width(model: Any) -> int | None:
    """How many features a sample of ``model`` has (None where the model does not say)."""
    shape = getattr(model, "input_shape_", None) or getattr(model, "n_features_in_", None)
    return None if shape is None else int(np.prod(shape))


def check_same_width(flag: str, url: str, meta: dict, model: Any) -> None:
    """Refuse ``flag url`` (a staged dataset, ``meta`` its ``_meta.json``) when its samples have another number
    of features than the model takes."""
    width, theirs = model_width(model), int(np.prod(meta["feature_shape"]))
    if width is not None and theirs != width:
        raise UsageError(f"{flag} {url} holds samples of {theirs} features {meta['feature_shape']}; the model takes "
                         f"{width}")


def check_known_classes(what: str, meta: dict, model_classes: np.ndarray) -> None:
    """Refuse to evaluate on ``what`` (a staged dataset, ``meta`` its ``_meta.json``) when its labels are classes the
    model never learned: strings for a model of numbers or the other way round, or classes it names that the
    model lacks."""
    named = meta.get("classes")
    strings = model_classes.dtype.kind in "US"
    theirs = "strings" if named and isinstance(named[0], str) else "numbers"
    if (theirs == "strings") != strings:
        raise UsageError(f"{what} is labelled by {theirs}{f' {named[:6]}' if named else ''}, the model's classes are "
                         f"{'strings' if strings else 'numbers'} {model_classes[:6].tolist()}: it learned other labels")
    unknown = sorted(set(named or ()) - set(model_classes.tolist()), key=str)
    if unknown:
        raise UsageError(f"{what} holds the classes {unknown[:6]}{' ...' if len(unknown) > 6 else ''}, which the "
                         f"model never learned (its classes: {model_classes[:12].tolist()})")
