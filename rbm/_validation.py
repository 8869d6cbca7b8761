"""Input checks shared by every model: clear ``ValueError`` messages that name the problem.

Checks run on the host (numpy) before data moves to the model's device, so that no
training time is wasted on input that would fail or silently produce garbage.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_features", "check_labels", "check_finite_parameters", "DivergenceError"]


class DivergenceError(FloatingPointError, ValueError):
    """Training produced non-finite (NaN or Inf) parameters."""


def _first_bad_row(mask_rows: np.ndarray) -> int:
    return int(np.flatnonzero(mask_rows)[0])


def check_features(
    X: Any,
    n_features: int | tuple[int, ...] | None = None,
    *,
    dtype: Any = np.float32,
    bernoulli: bool = False,
    name: str = "X",
) -> np.ndarray:
    """Validate a feature matrix and return it as a C-contiguous array of ``dtype``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features) or (n_samples, *input_shape)
    n_features : int or tuple, optional
        Expected width (int) or per-sample shape (tuple); checked when given.
    dtype : numpy dtype
        Result dtype (float32 or float64).
    bernoulli : bool
        Require every value in [0, 1] (Bernoulli visible units).
    name : str
        Name used in messages.

    Raises
    ------
    ValueError
        Empty input, wrong width or shape, NaN/Inf (naming the first bad row), values
        outside [0, 1] for Bernoulli input, or data that is not numeric.
    """
    try:
        array = np.asarray(X)
    except Exception as error:  # ragged nested lists and the like
        raise ValueError(f"{name} cannot be turned into a numeric array: {error}") from error
    if array.dtype == object or not np.issubdtype(array.dtype, np.number) and array.dtype != bool:
        raise ValueError(f"{name} must be numeric, got dtype {array.dtype}")
    if array.ndim < 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features), got shape {array.shape}")
    if array.shape[0] == 0:
        raise ValueError(f"{name} is empty: it has 0 samples")
    if isinstance(n_features, tuple):
        width = int(np.prod(n_features))
        if array.shape[1:] != tuple(n_features) and array.shape[1:] != (width,):
            raise ValueError(
                f"{name} has per-sample shape {array.shape[1:]}, expected {tuple(n_features)} or ({width},)"
            )
    elif n_features is not None and (array.ndim != 2 or array.shape[1] != n_features):
        raise ValueError(f"{name} has {array.shape[1:]} features per sample, expected {n_features}")
    array = np.ascontiguousarray(array, dtype=dtype)
    flat = array.reshape(array.shape[0], -1)
    # Fast paths without temporaries (a finite sum means every entry is finite; min/max
    # bound the range); the row-by-row search only runs when something is wrong.
    if not np.isfinite(flat.sum()):
        finite_rows = np.isfinite(flat).all(axis=1)
        if not finite_rows.all():
            row = _first_bad_row(~finite_rows)
            raise ValueError(f"{name} contains NaN or Inf (first at row {row})")
    if bernoulli and (flat.min() < 0 or flat.max() > 1):
        inside = ((flat >= 0) & (flat <= 1)).all(axis=1)
        if not inside.all():
            row = _first_bad_row(~inside)
            raise ValueError(
                f"{name} must lie in [0, 1] for Bernoulli visible units (row {row} has values "
                f"in [{flat[row].min():g}, {flat[row].max():g}]); scale it, or use visible='gaussian'"
            )
    return array


def check_labels(y: Any, n_samples: int, n_classes: int | None = None, *, name: str = "y") -> np.ndarray:
    """Validate integer class labels ``0 .. n_classes - 1`` and return them as int64.

    Raises
    ------
    ValueError
        Wrong length, non-integer values, or labels outside the class range (naming the row).
    """
    labels = np.asarray(y)
    if labels.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {labels.shape}")
    if len(labels) != n_samples:
        raise ValueError(f"{name} has {len(labels)} labels for {n_samples} samples")
    if not np.issubdtype(labels.dtype, np.integer):
        if not np.issubdtype(labels.dtype, np.floating) or not np.all(np.isfinite(labels)) or np.any(labels != np.round(labels)):
            raise ValueError(f"{name} must hold integer class labels, got dtype {labels.dtype}")
    labels = labels.astype(np.int64)
    upper = n_classes if n_classes is not None else np.iinfo(np.int64).max
    bad = (labels < 0) | (labels >= upper)
    if bad.any():
        row = _first_bad_row(bad)
        expected = f"0..{n_classes - 1}" if n_classes is not None else ">= 0"
        raise ValueError(f"{name} has label {labels[row]} at row {row}, outside the class range {expected}")
    return labels


def check_finite_parameters(params: dict[str, Any], where: str) -> None:
    """Raise :class:`DivergenceError` naming the first parameter that holds NaN or Inf."""
    for name, value in params.items():
        finite = (value == value) & (abs(value) != float("inf"))  # works for numpy and cupy
        if not bool(finite.all()):
            raise DivergenceError(
                f"training diverged in {where}: parameter {name!r} holds NaN or Inf; "
                "lower the learning rate or check the input scaling"
            )
