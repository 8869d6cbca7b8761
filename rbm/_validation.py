"""Input checks shared by every model: clear ``ValueError`` messages that name the problem.

Checks run on the host (numpy) before data moves to the model's device, so that no
training time is wasted on input that would fail or silently produce garbage.  The
conversion itself is scikit-learn's ``check_array``, so empty, one-dimensional, complex,
object and sparse input fail with the words scikit-learn users (and its estimator
checks) know; NaN/Inf and the [0, 1] range of Bernoulli units are then checked here,
naming the first bad row.  An array already on a GPU (a partition a Spark node keeps there
across epochs, :class:`rbm.DeviceDataCache`) is checked where it is, with the same words.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_array

__all__ = [
    "check_features",
    "check_labels",
    "check_width",
    "check_finite_parameters",
    "output_dtype",
    "log_probabilities",
    "DivergenceError",
]


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
    model: str = "the model",
    accept_sparse: bool = False,
    allow_nd: bool = True,
) -> Any:
    """Validate a feature matrix and return it as a C-contiguous array of ``dtype``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features) or (n_samples, *input_shape)
        Or a scipy sparse matrix when ``accept_sparse``, or a GPU array (checked, and returned, on
        its GPU).
    n_features : int or tuple, optional
        Expected width (int) or per-sample shape (tuple); checked when given.
    dtype : numpy dtype
        Result dtype (float32 or float64).
    bernoulli : bool
        Require every value in [0, 1] (Bernoulli visible units).
    name : str
        Name of the input in messages.
    model : str
        Name of the model in messages (``"X has 3 features, but RBM is expecting 4 ..."``).
    accept_sparse : bool
        Accept scipy sparse input (CSR, CSC, LIL, ...), returned as CSR of ``dtype``
        without ever being densified.
    allow_nd : bool
        Accept more than two dimensions (per-sample shapes such as (C, H, W)).

    Returns
    -------
    ndarray of shape (n_samples, ...) or scipy.sparse.csr_matrix

    Raises
    ------
    ValueError
        Empty or one-dimensional input, wrong width or shape, NaN/Inf (naming the first
        bad row), values outside [0, 1] for Bernoulli input, complex data.
    TypeError
        Sparse input where it is not accepted; objects that are not numbers.
    """
    if hasattr(X, "__cuda_array_interface__"):  # already on a GPU: numpy's check_array would copy it back
        array = _device_array(X, dtype, allow_nd, name)
    else:
        array = check_array(
            X, accept_sparse="csr" if accept_sparse else False, dtype=dtype, order="C",
            ensure_all_finite=False, allow_nd=allow_nd, input_name=name,
        )
    if isinstance(n_features, tuple):
        width = int(np.prod(n_features))
        if array.shape[1:] != tuple(n_features) and array.shape[1:] != (width,):
            raise ValueError(
                f"{name} has per-sample shape {array.shape[1:]}, but {model} is expecting "
                f"{tuple(n_features)} (or flat ({width},)) as input"
            )
    elif n_features is not None and (array.ndim != 2 or array.shape[1] != n_features):
        raise ValueError(f"{name} has {array.shape[1]} features, but {model} is expecting {n_features} features as input")
    _check_values(array, bernoulli, name, model)
    return array


def _device_array(X: Any, dtype: Any, allow_nd: bool, name: str) -> Any:
    """A GPU array as a C-contiguous cupy array of ``dtype``, refused as ``check_array`` refuses host input."""
    import cupy  # only reached for arrays that are on a GPU

    if X.ndim < 2 or (X.ndim > 2 and not allow_nd):
        raise ValueError(f"Expected a 2D array for {name}, got a {X.ndim}D GPU array of shape {X.shape}")
    if len(X) == 0:
        raise ValueError(f"Found array with 0 sample(s) (shape={X.shape}) while a minimum of 1 is required.")
    if cupy.dtype(X.dtype).kind not in "biuf":
        raise ValueError(f"{name} holds {X.dtype} values, not numbers")
    return cupy.ascontiguousarray(X, dtype=dtype)


def _check_values(array: Any, bernoulli: bool, name: str, model: str) -> None:
    """NaN/Inf and, for Bernoulli input, the [0, 1] range; each error names the first bad row."""
    if sp.issparse(array):  # only stored entries can be bad; implicit zeros are fine
        values = array.data

        def rows_of(bad: np.ndarray) -> int:
            return int(np.searchsorted(array.indptr, np.flatnonzero(bad)[0], side="right") - 1)

    else:
        values = array.reshape(-1)
        width = max(1, int(np.prod(array.shape[1:])))

        def rows_of(bad: np.ndarray) -> int:
            return int(np.flatnonzero(bad)[0]) // width

    if values.size == 0:
        return
    # Fast paths without temporaries (a finite sum means every entry is finite; min/max
    # bound the range); the search for the row only runs when something is wrong.
    if not np.isfinite(values.sum()):
        bad = ~np.isfinite(values)
        if bad.any():  # (a sum of huge finite values may overflow on its own)
            raise ValueError(f"{name} contains NaN or Inf (first at row {rows_of(bad)})")
    if not bernoulli:
        return
    low, high = values.min(), values.max()
    if low < 0:
        row = rows_of(values < 0)
        raise ValueError(
            f"Negative values in data passed to {model} ({name} row {row} has {_row_range(array, row)}): "
            "Bernoulli visible units need values in [0, 1]; scale it, or use visible='gaussian'"
        )
    if high > 1:
        row = rows_of(values > 1)
        raise ValueError(
            f"{name} must lie in [0, 1] for Bernoulli visible units (row {row} has {_row_range(array, row)}); "
            "scale it, or use visible='gaussian'"
        )


def _row_range(array: Any, row: int) -> str:
    values = array[row].toarray() if sp.issparse(array) else array[row]
    return f"values in [{float(values.min()):g}, {float(values.max()):g}]"


def output_dtype(X: Any) -> np.dtype:
    """scikit-learn's rule for a transformer's output: float32 stays float32, all else is float64."""
    dtype = getattr(X, "dtype", None)
    if not isinstance(dtype, np.dtype):  # lists, DataFrames (``dtypes``), ...
        dtype = np.asarray(X).dtype
    return np.dtype(np.float32) if dtype == np.float32 else np.dtype(np.float64)


def probabilities_as(probabilities: np.ndarray, dtype: Any) -> np.ndarray:
    """Host probabilities (rows summing to 1 in their own precision) as ``dtype``, each row summing to 1 in it:
    float32 rows cast to float64 sum to 1 within 1e-7 only, which scikit-learn's log-loss warns of."""
    cast = np.asarray(probabilities).astype(dtype, copy=False)
    if cast.dtype.itemsize > np.asarray(probabilities).dtype.itemsize:
        cast /= cast.sum(axis=1, keepdims=True)
    return cast


def log_probabilities(probabilities: np.ndarray) -> np.ndarray:
    """``np.log(probabilities)``, same shape and dtype, without numpy's divide-by-zero warning.

    A class whose probability underflowed to 0 gets ``-inf``, as ``np.log`` gives it: scikit-learn's
    classifiers (``MLPClassifier``, ``LogisticRegression``) return the same, and warn as they do.
    """
    with np.errstate(divide="ignore"):
        return np.log(probabilities)


def check_labels(y: Any, n_samples: int, n_classes: int | None = None, *, name: str = "y") -> np.ndarray:
    """Validate integer class indices ``0 .. n_classes - 1`` and return them as int64.

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


def check_width(n_features: Any, model: str) -> int:
    """The width a model of flat feature vectors (``RBM``, ``DBN``) is initialized for, as an int.

    Raises
    ------
    ValueError
        A per-sample shape of more than one dimension (image samples), or not a positive integer.
    """
    if isinstance(n_features, (tuple, list)):
        if len(n_features) == 1:
            return check_width(n_features[0], model)
        width = int(np.prod(n_features))
        raise ValueError(f"{model} takes flat feature vectors, not samples of shape {tuple(n_features)}: "
                         f"reshape the data to (n_samples, {width})")
    if isinstance(n_features, (bool, np.bool_)) or not isinstance(n_features, (int, np.integer)) or n_features < 1:
        raise ValueError(f"{model} needs a positive integer number of features, got {n_features!r}")
    return int(n_features)


def check_finite_parameters(params: dict[str, Any], where: str) -> None:
    """Raise :class:`DivergenceError` naming the first parameter that holds NaN or Inf."""
    for name, value in params.items():
        finite = (value == value) & (abs(value) != float("inf"))  # works for numpy and cupy
        if not bool(finite.all()):
            raise DivergenceError(
                f"training diverged in {where}: parameter {name!r} holds NaN or Inf; "
                "lower the learning rate or check the input scaling"
            )
