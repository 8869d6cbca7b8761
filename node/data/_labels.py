"""Class labels on the Spark side, taken exactly as the in-process estimator takes them.

scikit-learn (and ``rbm.DBN.fit``) accept any sortable labels -- booleans, integers, integral
floats, strings; never NaN or a fractional float, a regression target -- and set
``classes_ = np.unique(y)``.  On Spark the class set is found by one distributed aggregation
(each partition's ``np.unique``, merged on the driver), labels travel as they are, and each
executor maps them to class indices with :func:`encode_labels` before the model sees them:
``train_partition`` takes indices into ``classes_``.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from .._errors import InputDataError

__all__ = ["DEFAULT_MAX_CLASSES", "label_kind", "summarize_labels", "merge_class_sets", "check_known_labels",
           "encode_labels"]

#: More distinct labels than this is almost always a regression target or an id column.
DEFAULT_MAX_CLASSES = 10_000


def label_kind(y: np.ndarray) -> str:
    """``"bool"``, ``"integer"``, ``"float"`` or ``"string"``; anything else is refused."""
    if y.dtype.kind == "b":
        return "bool"
    if y.dtype.kind in "iu":
        return "integer"
    if y.dtype.kind == "f":
        return "float"
    if y.dtype.kind in "US":
        return "string"
    raise InputDataError(f"labels must be numbers or strings, got dtype {y.dtype}")


def summarize_labels(y: np.ndarray, max_classes: int) -> dict[str, Any]:
    """One partition's label facts (JSON-able): kind, distinct values with the first row and count of each.

    At most ``max_classes + 1`` distinct values are kept, enough for the driver to say
    "too many classes" without moving a huge set.
    """
    kind = label_kind(y)
    if kind == "float":
        bad = ~np.isfinite(y) | (y != np.round(y))  # scikit-learn's "continuous" targets: no classifier takes them
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            return {"kind": kind, "error": f"row {row} has label {y[row].item()!r}, not a whole number "
                                           "(float labels must be integral, as scikit-learn's classifiers require)"}
    values, first_rows, counts = np.unique(y, return_index=True, return_counts=True)
    distinct = int(len(values))
    keep = slice(0, max_classes + 1)
    return {"kind": kind, "distinct": distinct, "values": values[keep].tolist(),
            "first_rows": first_rows[keep].tolist(), "counts": counts[keep].tolist(), "error": None}


def merge_class_sets(summaries: Iterable[tuple[int, dict[str, Any]]], source: str, max_classes: int) -> np.ndarray:
    """The sorted class set over all ``(partition, label summary)`` pairs, with ``np.unique``'s dtype rules.

    Raises
    ------
    InputDataError
        Strings mixed with numbers, a NaN/Inf label, or more than ``max_classes`` classes.
    """
    kinds: set[str] = set()
    values: list[Any] = []
    for partition, summary in summaries:
        if summary.get("error"):
            raise InputDataError(f"{source}: partition {partition} {summary['error']}; labels must be class values")
        kinds.add(summary["kind"])
        values.extend(summary["values"])
        if summary["distinct"] > max_classes:
            raise InputDataError(f"{source}: partition {partition} alone has {summary['distinct']} distinct labels, "
                                 f"more than max_classes={max_classes}; is the label column a class?")
    if "string" in kinds and len(kinds) > 1:
        raise InputDataError(f"{source}: some partitions hold string labels and others numbers")
    classes = np.unique(np.asarray(values, dtype=_class_dtype(kinds)))
    if len(classes) > max_classes:
        raise InputDataError(f"{source} has {len(classes)} distinct labels, more than max_classes={max_classes}; "
                             "raise TrainingSettings.max_classes if that many classes is really meant")
    if len(classes) < 2:
        raise InputDataError(f"{source} has a single label {classes.tolist()}; a classifier needs at least 2 classes")
    return classes


def _class_dtype(kinds: set[str]) -> Any:
    """The dtype ``np.unique`` would give the labels of all partitions together."""
    if kinds == {"bool"}:
        return bool
    if "string" in kinds:
        return str
    return np.float64 if "float" in kinds else np.int64


def check_known_labels(summaries: Iterable[tuple[int, dict[str, Any]]], classes: np.ndarray, source: str) -> None:
    """Every partition's labels lie in ``classes`` (the set a model already fixes); else name the row."""
    known = set(classes.tolist())
    for partition, summary in summaries:
        for value, row in zip(summary["values"], summary["first_rows"]):
            if value not in known:
                raise InputDataError(f"{source}: partition {partition} row {row} has label {value!r}, which the "
                                     f"model does not know (its classes are {_preview(classes)})")


def encode_labels(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Class indices (int64, into ``classes``) of labels ``y``; a label outside names its row."""
    index = np.clip(np.searchsorted(classes, y), 0, len(classes) - 1)
    bad = classes[index] != y
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputDataError(f"row {row} has label {y[row].item()!r}, not one of the classes {_preview(classes)}")
    return index.astype(np.int64)


def _preview(classes: np.ndarray, limit: int = 12) -> str:
    shown = classes[:limit].tolist()
    return f"{shown}" if len(classes) <= limit else f"{shown[:-1]} ... ({len(classes)} in all)"
