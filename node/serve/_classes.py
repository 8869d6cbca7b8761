"""A model's classes and the vectors indexed by them: in ``classes_`` order, or by label value as Spark ML's.

Spark ML's classifiers and evaluators index a probability vector by the label's value (``max(label) + 1``
entries); :func:`model_classes` gives a model's labels in its own column order, and
:func:`label_indexed_width` / :func:`spread_to_labels` turn one into the other where the labels allow.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import InputDataError

__all__ = ["model_classes", "label_indexed_width", "spread_to_labels", "MAX_LABEL_INDEXED_WIDTH"]


def model_classes(model: Any) -> np.ndarray:
    """The model's class labels (index k <-> probability column k), shape (n_classes,).

    ``classes_`` when the model has it (scikit-learn style), else ``0 .. n_classes - 1``
    (models such as :class:`rbm.ConvNet` that take labels as class indices).
    """
    classes = getattr(model, "classes_", None)
    if classes is not None:
        return np.asarray(classes)
    n_classes = getattr(model, "n_classes", None)
    if n_classes is None:
        raise InputDataError(f"{type(model).__name__} has neither classes_ nor n_classes: is it a trained classifier?")
    return np.arange(int(n_classes))


#: Label-indexed vectors (:func:`label_indexed_width`) hold at most this many entries when their labels leave gaps.
MAX_LABEL_INDEXED_WIDTH = 10_000


def label_indexed_width(classes: np.ndarray) -> int | None:
    """The width of probability vectors indexed by label value, as Spark ML's are: ``max(label) + 1``.

    None when the labels are no such index -- strings, negative or fractional numbers -- or when their
    largest is ``MAX_LABEL_INDEXED_WIDTH`` or more and they leave gaps (labels ``{0, 10**9}`` would make
    every row a billion entries): then the vectors follow ``classes`` (``0 .. k-1`` are both at once).

    Parameters
    ----------
    classes : ndarray of shape (n_classes,)
        The model's class labels, ascending (:func:`model_classes`).
    """
    if classes.dtype.kind not in "iuf" or len(classes) == 0:
        return None
    values = classes.astype(np.float64)
    if not np.all(np.isfinite(values)) or np.any(values < 0) or np.any(values != np.round(values)):
        return None
    width = int(values.max()) + 1
    if width > MAX_LABEL_INDEXED_WIDTH and width != len(classes):
        return None
    return width


def spread_to_labels(proba: np.ndarray, classes: np.ndarray, width: int) -> np.ndarray:
    """``proba`` (columns in ``classes`` order) as columns indexed by label value, 0 for labels no class has.

    Parameters
    ----------
    proba : ndarray of shape (n_samples, n_classes)
    classes : ndarray of shape (n_classes,)
        Non-negative integer labels (:func:`label_indexed_width` gave ``width`` for them).
    width : int
        Columns of the result.

    Returns
    -------
    ndarray of shape (n_samples, width), proba's dtype
    """
    if width == len(classes):  # labels 0 .. k-1: already indexed by value
        return proba
    spread = np.zeros((len(proba), width), dtype=proba.dtype)
    spread[:, classes.astype(np.int64)] = proba
    return spread
