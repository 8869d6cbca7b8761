"""Class labels of the classifiers (:class:`~rbm.DBN`, :class:`~rbm.ConvNet`), as scikit-learn has them.

``fit``, ``partial_fit`` and ``score`` take labels of any sortable kind (ints, integral
floats, strings); the model keeps them sorted in ``classes_`` and trains on class indices
``0 .. len(classes_) - 1``.  ``train_partition`` takes those indices directly: the
distributed driver fixes the class set once and maps labels to indices on the executors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d

__all__ = ["resolve_classes", "plain_labels", "check_targets", "check_length", "encode_labels"]


def resolve_classes(classes: Any) -> np.ndarray:
    """The sorted class labels for ``classes``: a count ``k`` (labels ``0 .. k - 1``) or the labels.

    Raises
    ------
    ValueError
        Fewer than two classes.
    """
    if isinstance(classes, (int, np.integer)) and not isinstance(classes, bool):
        labels = np.arange(int(classes))
    else:
        labels = np.unique(plain_labels(np.asarray(classes)))
    if len(labels) < 2:
        raise ValueError(f"y has {len(labels)} class ({labels.tolist()}): a classifier needs at least 2 classes")
    return labels


def plain_labels(labels: np.ndarray) -> np.ndarray:
    """``labels`` held as Python objects (a pandas column) as the plain array they are: strings as ``str``,
    numbers as numbers; anything else as it is.  A model keeps plain classes, which its file holds without
    pickle."""
    if labels.dtype != object:
        return labels
    values = labels.ravel().tolist()
    if all(isinstance(value, str) for value in values):
        return labels.astype(str)
    if all(isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_)) for value in values):
        return np.asarray(values).reshape(labels.shape)
    return labels


def check_targets(y: Any, model: str, n_samples: int | None = None) -> np.ndarray:
    """Labels ``y`` for ``fit`` as a 1-D array, with scikit-learn's checks and words.

    A column vector is accepted with a ``DataConversionWarning``; continuous targets are
    refused (``Unknown label type``); ``None`` is refused naming what is missing.  The
    classifiers check ``y`` before ``X`` (it is cheap), and its length once ``X`` is known.
    """
    if y is None:
        raise ValueError(f"This {model} estimator requires y to be passed, but the target y is None")
    labels = column_or_1d(y, warn=True)
    check_classification_targets(labels)
    if n_samples is not None:
        check_length(labels, n_samples)
    return labels


def check_length(labels: np.ndarray, n_samples: int) -> None:
    """One label per sample."""
    if len(labels) != n_samples:
        raise ValueError(f"y has {len(labels)} labels for {n_samples} samples")


def encode_labels(y: Any, classes: np.ndarray, n_samples: int) -> np.ndarray:
    """Class indices (int64) of labels ``y``; a clear error for a label outside ``classes``."""
    labels = plain_labels(column_or_1d(y))
    check_length(labels, n_samples)
    try:
        index = np.clip(np.searchsorted(classes, labels), 0, len(classes) - 1)
        bad = classes[index] != labels
    except TypeError as error:  # e.g. string labels for a model with integer classes
        raise ValueError(
            f"y holds labels of dtype {labels.dtype}, but this model's classes are {classes.tolist()[:12]} "
            f"(dtype {classes.dtype})"
        ) from error
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        known = classes.tolist()
        shown = known if len(known) <= 12 else known[:6] + ["..."] + known[-3:]
        raise ValueError(f"y has label {labels[row].item()!r} at row {row}, outside the class range of this model ({shown})")
    return index.astype(np.int64)
