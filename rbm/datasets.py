"""Small real datasets bundled through scikit-learn, prepared the way this project uses them.

* :func:`load_digits01` -- scikit-learn's 8x8 digits (1797 images), pixels scaled to [0, 1].
* :func:`load_digits28` -- the same digits upsampled to 28x28 (MNIST-sized), split into a
  training and a held-out set *before* augmentation, the training images augmented with
  small integer shifts.  Held-out images and any copy of them never reach the training set.
* :func:`load_nudged_digits` -- scikit-learn's RBM example data (digits plus copies moved by
  one pixel), split as that example splits it.
* :func:`bars_and_stripes` -- the classic tiny binary dataset for exact likelihoods.

Everything is deterministic for a given ``random_state``.
"""

from __future__ import annotations

from typing import NamedTuple

import itertools

import numpy as np
from scipy.ndimage import zoom
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import minmax_scale

__all__ = [
    "Split",
    "load_digits01",
    "load_digits28",
    "load_nudged_digits",
    "bars_and_stripes",
    "shift_images",
    "train_test_indices",
]


class Split(NamedTuple):
    """A train/test split: ``X_*`` are float32, ``y_*`` are int64 class labels."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def train_test_indices(labels: np.ndarray, test_fraction: float, random_state: int) -> tuple[np.ndarray, np.ndarray]:
    """A stratified, seeded split of ``range(len(labels))`` into train and test indices."""
    rng = np.random.default_rng(random_state)
    train, test = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_test = int(round(test_fraction * len(members)))
        test.append(members[:n_test])
        train.append(members[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def load_digits01(test_fraction: float = 0.2, random_state: int = 0) -> Split:
    """scikit-learn's digits as (n, 64) float32 in [0, 1], split stratified and seeded."""
    digits = load_digits()
    X = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    train, test = train_test_indices(y, test_fraction, random_state)
    return Split(X[train], y[train], X[test], y[test])


def shift_images(images: np.ndarray, shifts: list[tuple[int, int]]) -> np.ndarray:
    """Copies of ``images`` (n, H, W) moved by each integer (dy, dx), zero filled.

    Returns an array of shape (len(shifts) * n, H, W), one block per shift in order.
    """
    n, height, width = images.shape
    out = np.zeros((len(shifts), n, height, width), dtype=images.dtype)
    for k, (dy, dx) in enumerate(shifts):
        ys, yd = (slice(0, height - dy), slice(dy, height)) if dy >= 0 else (slice(-dy, height), slice(0, height + dy))
        xs, xd = (slice(0, width - dx), slice(dx, width)) if dx >= 0 else (slice(-dx, width), slice(0, width + dx))
        out[k, :, yd, xd] = images[:, ys, xs]
    return out.reshape(len(shifts) * n, height, width)


def _upsample28(images8: np.ndarray) -> np.ndarray:
    """(n, 8, 8) in [0, 1] -> (n, 28, 28) float32 in [0, 1] by cubic spline zoom, clipped."""
    big = zoom(images8, (1, 3.5, 3.5), order=3)
    return np.clip(big, 0.0, 1.0).astype(np.float32)


DEFAULT_SHIFTS = [(dy, dx) for dy in (-2, -1, 0, 1, 2) for dx in (-2, -1, 0, 1, 2)]


def load_digits28(
    test_fraction: float = 0.2,
    shifts: list[tuple[int, int]] | None = None,
    flatten: bool = True,
    random_state: int = 0,
) -> Split:
    """Digits upsampled to 28x28, training part augmented with integer shifts.

    Parameters
    ----------
    test_fraction : float
        Fraction of the 1797 original images held out (stratified) before augmentation.
    shifts : list of (dy, dx), optional
        Integer shifts applied to the training images; the default, all shifts in
        [-2, 2]^2, gives 25 copies (about 36k training samples).  ``(0, 0)`` keeps the
        originals.
    flatten : bool
        Return X as (n, 784) when True, as (n, 1, 28, 28) when False.
    random_state : int
        Seed of the split and of the final shuffle of the training set.

    Returns
    -------
    Split
        float32 pixels in [0, 1], int64 labels.
    """
    digits = load_digits()
    images = _upsample28((digits.images / 16.0).astype(np.float32))
    labels = digits.target.astype(np.int64)
    train, test = train_test_indices(labels, test_fraction, random_state)
    shifts = DEFAULT_SHIFTS if shifts is None else shifts
    X_train = shift_images(images[train], shifts)
    y_train = np.tile(labels[train], len(shifts))
    order = np.random.default_rng(random_state).permutation(len(X_train))
    X_train, y_train = X_train[order], y_train[order]
    X_test, y_test = images[test], labels[test]
    if flatten:
        return Split(X_train.reshape(len(X_train), -1), y_train, X_test.reshape(len(X_test), -1), y_test)
    return Split(X_train[:, None], y_train, X_test[:, None], y_test)


def load_nudged_digits() -> Split:
    """scikit-learn's RBM example data: the digits plus copies moved 1 px in 4 directions.

    Scaled to [0, 1] with ``minmax_scale`` and split 80/20 with ``train_test_split(...,
    random_state=0)``, exactly as the example does (7188 training, 1797 test rows).
    """
    images, labels = load_digits(return_X_y=True)
    shifted = shift_images(images.reshape(-1, 8, 8), [(0, 0), (-1, 0), (0, -1), (0, 1), (1, 0)]).reshape(-1, 64)
    X = minmax_scale(shifted.astype(np.float32), feature_range=(0, 1)).astype(np.float32)
    y = np.tile(labels, 5)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)
    return Split(X_train, y_train.astype(np.int64), X_test, y_test.astype(np.int64))


def bars_and_stripes(size: int = 3) -> np.ndarray:
    """Every ``size`` x ``size`` binary image whose rows are all equal or whose columns are
    (``2 ** (size + 1) - 2`` distinct images; 14 for size 3), flat, float64, sorted."""
    patterns = set()
    for bits in itertools.product([0, 1], repeat=size):
        rows = np.repeat(np.array(bits)[:, None], size, axis=1)
        patterns.add(tuple(rows.ravel()))
        patterns.add(tuple(rows.T.ravel()))
    return np.array(sorted(patterns), dtype=np.float64)
