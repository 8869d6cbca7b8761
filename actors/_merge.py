"""The merge rule of the decentralized algorithm (DESIGN.md, "The algorithm", step 1).

With ``m`` fresh peer snapshots ``w_1 .. w_m`` a node moves its weights toward their mean::

    w <- (1 - a) * w + a * mean_j(w_j),      a = m / (m + 1) by default,

which with the default is the plain average of the node and its fresh peers.  Only the
weights are merged; optimizer state (momentum, Adagrad history) stays local to each node.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ._errors import MergeError

__all__ = ["merge_snapshots", "check_compatible", "check_snapshot", "all_finite"]


def all_finite(array: np.ndarray) -> bool:
    """True when no element is NaN or Inf; one pass, no temporary the size of ``array``.

    The float64 sum of finite float32 values cannot overflow, so it is non-finite exactly when
    some element is; for float64 input a non-finite sum may be an overflow, so that case is
    confirmed element-wise.
    """
    array = np.asarray(array)
    if array.dtype.kind in "biu":
        return True
    if array.dtype.kind != "f":
        return bool(np.isfinite(array).all())
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.sum(array, dtype=np.float64)):
            return True
    return bool(np.isfinite(array).all()) if array.dtype.itemsize >= 8 else False


def check_compatible(own: Mapping[str, np.ndarray], other: Mapping[str, np.ndarray], *, source: str = "peer") -> None:
    """Raise :class:`MergeError` unless ``other`` has exactly ``own``'s names and shapes and is finite.

    ``source`` names the snapshot in the error message (e.g. ``"peer node-7 version 12"``).
    """
    check_snapshot(other, {name: np.shape(value) for name, value in own.items()}, source=source)


def check_snapshot(params: Mapping[str, np.ndarray], shapes: Mapping[str, tuple] | None, *, source: str = "peer") -> None:
    """Raise :class:`MergeError` unless ``params`` is numeric, finite and (when given) has exactly ``shapes``."""
    own = shapes if shapes is not None else {name: np.shape(value) for name, value in params.items()}
    other = params
    if set(other) != set(own):
        missing, extra = sorted(set(own) - set(other)), sorted(set(other) - set(own))
        raise MergeError(f"{source}: parameter names differ (missing {missing}, unexpected {extra})")
    for name, value in other.items():
        value = np.asarray(value)
        if value.shape != tuple(own[name]):
            raise MergeError(f"{source}: parameter {name!r} has shape {value.shape}, expected {tuple(own[name])}")
        if not np.issubdtype(value.dtype, np.number):
            raise MergeError(f"{source}: parameter {name!r} has non-numeric dtype {value.dtype}")
        if not all_finite(value):
            raise MergeError(f"{source}: parameter {name!r} contains NaN or Inf; refusing to merge it")


def merge_snapshots(
    own: Mapping[str, np.ndarray],
    peers: list[Mapping[str, np.ndarray]],
    alpha: float | None = None,
    *,
    checked: bool = False,
) -> dict[str, np.ndarray]:
    """Merge fresh peer weights into a node's own: ``(1 - a) * own + a * mean(peers)``.

    Parameters
    ----------
    own : dict of str to ndarray
        The node's current weights, e.g. ``{"W": (n_visible, n_hidden), "b": (n_visible,), ...}``.
    peers : list of dict of str to ndarray
        Fresh peer snapshots with exactly the same names and shapes.
    alpha : float in [0, 1], optional
        Weight of the peers' mean; ``m / (m + 1)`` for ``m`` peers by default.
    checked : bool
        The peers were checked against ``own`` already (:func:`check_compatible`, as
        :meth:`actors.NodeHandle.merge_and_get` checks each before it merges): not again.  ``own`` is
        always checked.

    Returns
    -------
    dict of str to ndarray
        New arrays with ``own``'s dtypes (``own`` is not modified); a copy of ``own`` when
        ``peers`` is empty.

    Raises
    ------
    MergeError
        When ``own`` or any peer contains NaN/Inf, or names/shapes differ.
    """
    for name, value in own.items():
        if not all_finite(value):
            raise MergeError(f"own parameter {name!r} contains NaN or Inf; the local model has diverged")
    for index, peer in enumerate([] if checked else peers):
        check_compatible(own, peer, source=f"peer snapshot #{index}")
    m = len(peers)
    if alpha is None:
        alpha = m / (m + 1)
    if not 0.0 <= alpha <= 1.0:
        raise MergeError(f"alpha must lie in [0, 1], got {alpha}")
    merged: dict[str, np.ndarray] = {}
    for name, value in own.items():
        value = np.asarray(value)
        if m == 0:
            merged[name] = value.copy()
            continue
        # Accumulate in (at least) float32 of own's dtype; the peers' mean then the blend.
        total = np.array(peers[0][name], dtype=value.dtype, copy=True)
        for peer in peers[1:]:
            total += peer[name]
        total *= alpha / m
        total += (1.0 - alpha) * value
        merged[name] = total
    return merged
