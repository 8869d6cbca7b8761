"""Report plots of a training run, from what the nodes wrote to the store.

Reads ``runs/<run>/metrics/<node>/*.json`` through :meth:`storage.RunStore.read_metrics` --
one record per trained partition, written by the executor node (:mod:`node._executor`) --
plus the run record and the final model, and writes PNG files with matplotlib's Agg backend
(no display needed).  Fields used from each metrics record:

============  ==================================================================
node          node id (the process, not the partition)
phase         training phase (``"rbm0"``, ..., ``"finetune"``, ``"train"``)
epoch         epoch within the phase
samples       rows trained in this partition
samples_seen  rows trained by this node in this phase so far (optional: summed when missing)
loss          reconstruction error (RBM phases) or cross-entropy (supervised phases)
merged        peer snapshots merged before training this partition
staleness_s   mean age in seconds of the merged snapshots (None when nothing was merged)
time          wall-clock time (Unix seconds) when the record was written
train_s, merge_s, publish_s  seconds spent training, merging, publishing (optional)
============  ==================================================================
"""

from __future__ import annotations

import io
import logging
import math
import os
from collections import defaultdict
from typing import Any

import numpy as np

from ._errors import InputDataError, StoreAccessError

__all__ = ["render_report", "filter_grid"]

log = logging.getLogger(__name__)

FIGURE_DPI = 100
MAX_FILTERS = 100


def render_report(store_url: str, run: str, out_dir: str) -> list[str]:
    """Render a run's training curves, merges/staleness and first-layer filters as PNG files.

    Parameters
    ----------
    store_url : str
        The store the run trained into (path, ``file://`` or ``hdfs://`` URL).
    run : str
        Run id.
    out_dir : str
        Local directory for the PNGs (created when missing).

    Returns
    -------
    list of str
        Paths written: ``training_curves.png``, ``merges_staleness.png`` and, when the run
        has a first RBM layer (or conv layer), ``filters.png``.

    Raises
    ------
    InputDataError
        The run has no metrics in that store (wrong run id or store).
    StoreAccessError
        The store cannot be read.
    """
    import storage

    try:
        store = storage.open_store(store_url)
        runs = storage.RunStore(store, run)
        metrics = runs.read_metrics()
        record = runs.read_record() or {}
    except storage.StoreError as error:
        raise StoreAccessError(f"cannot read run {run!r} from the store {store_url!r}: {error}") from error
    if not metrics:
        raise InputDataError(f"run {run!r} has no metrics in the store {store_url!r}: check the run id and the store URL")
    os.makedirs(out_dir, exist_ok=True)
    paths = [
        _plot_training_curves(metrics, os.path.join(out_dir, "training_curves.png"), run),
        _plot_merges_and_staleness(metrics, os.path.join(out_dir, "merges_staleness.png"), run),
    ]
    weights = _first_layer_weights(store, runs, run, record)
    if weights is not None:
        filters = filter_grid(weights, _feature_shape(record))
        paths.append(_plot_filters(filters, os.path.join(out_dir, "filters.png"), run))
    else:
        log.warning("run %s has neither a saved model nor a first-layer phase result: no filter plot", run)
    log.info("report of run %s: %s", run, paths)
    return paths


# --------------------------------------------------------------------------- metrics plots


def _figure(size_in: tuple[float, float]) -> Any:
    """A matplotlib Figure on the Agg canvas, outside pyplot: no global backend or figure state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size_in, dpi=FIGURE_DPI)
    FigureCanvasAgg(figure)
    return figure


def _by_phase_and_node(metrics: list[dict]) -> dict[str, dict[str, list[dict]]]:
    grouped: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for record in metrics:
        grouped[str(record.get("phase", "?"))][str(record.get("node", "?"))].append(record)
    return grouped


def _phase_order(metrics: list[dict]) -> list[str]:
    first_seen: dict[str, float] = {}
    for record in metrics:
        phase = str(record.get("phase", "?"))
        first_seen[phase] = min(first_seen.get(phase, math.inf), float(record.get("time", 0.0)))
    return sorted(first_seen, key=first_seen.get)


def _plot_training_curves(metrics: list[dict], path: str, run: str) -> str:
    grouped = _by_phase_and_node(metrics)
    phases = _phase_order(metrics)
    columns = min(3, len(phases))
    rows = math.ceil(len(phases) / columns)
    figure = _figure((4.5 * columns, 3.5 * rows))
    axes = figure.subplots(rows, columns, squeeze=False)
    for axis, phase in zip(axes.flat, phases):
        for node, records in sorted(grouped[phase].items()):
            records = sorted(records, key=lambda r: float(r.get("time", 0.0)))
            seen = np.cumsum([int(r.get("samples", 0)) for r in records])
            x = [int(r["samples_seen"]) if r.get("samples_seen") is not None else s for r, s in zip(records, seen)]
            axis.plot(x, [float(r.get("loss", np.nan)) for r in records], marker=".", label=node)
        supervised = not phase.startswith("rbm")
        axis.set_title(phase)
        axis.set_xlabel("samples seen by the node")
        axis.set_ylabel("cross-entropy" if supervised else "reconstruction error")
        axis.legend(fontsize="small")
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(phases) :]:
        axis.set_visible(False)
    figure.suptitle(f"run {run}: training loss per node")
    figure.tight_layout()
    figure.savefig(path, dpi=FIGURE_DPI)
    return path


def _plot_merges_and_staleness(metrics: list[dict], path: str, run: str) -> str:
    start = min(float(r.get("time", 0.0)) for r in metrics)
    nodes: dict[str, list[dict]] = defaultdict(list)
    for record in metrics:
        nodes[str(record.get("node", "?"))].append(record)
    figure = _figure((9, 6.5))
    merges_axis, staleness_axis = figure.subplots(2, 1, sharex=True)
    for node, records in sorted(nodes.items()):
        records.sort(key=lambda r: float(r.get("time", 0.0)))
        times = np.array([float(r.get("time", 0.0)) - start for r in records])
        merges_axis.step(times, np.cumsum([int(r.get("merged") or 0) for r in records]), where="post", label=node)
        stale = [(t, float(r["staleness_s"])) for t, r in zip(times, records) if r.get("staleness_s") is not None]
        if stale:
            staleness_axis.plot(*zip(*stale), marker="o", linestyle="-", label=node)
    # Phase boundaries: where each phase's first record lands.
    for phase in _phase_order(metrics):
        began = min(float(r.get("time", 0.0)) for r in metrics if str(r.get("phase")) == phase) - start
        for axis in (merges_axis, staleness_axis):
            axis.axvline(began, color="grey", linewidth=0.8, linestyle=":")
        merges_axis.annotate(phase, (began, 1.0), xycoords=("data", "axes fraction"), fontsize="small",
                             va="top", ha="left", color="grey")
    merges_axis.set_ylabel("peer snapshots merged (cumulative)")
    merges_axis.legend(fontsize="small")
    merges_axis.grid(alpha=0.3)
    staleness_axis.set_ylabel("staleness of merged snapshots (s)")
    staleness_axis.set_xlabel("time since the first record (s)")
    staleness_axis.grid(alpha=0.3)
    if staleness_axis.lines:
        staleness_axis.legend(fontsize="small")
    figure.suptitle(f"run {run}: merges and staleness per node")
    figure.tight_layout()
    figure.savefig(path, dpi=FIGURE_DPI)
    return path


# --------------------------------------------------------------------------- filters


def _feature_shape(record: dict) -> tuple[int, ...] | None:
    shape = (record.get("data") or {}).get("feature_shape")
    return tuple(int(d) for d in shape) if shape else None


def _first_layer_weights(store: Any, runs: Any, run: str, record: dict) -> np.ndarray | None:
    """The first layer's weights: from the saved model, else from the consolidated first phase."""
    import storage

    arrays: dict[str, np.ndarray] = {}
    if store.exists(runs.model_path()):
        with np.load(io.BytesIO(store.read_bytes(runs.model_path())), allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files if not name.startswith("__")}
    else:
        phases = list(record.get("phases") or ["rbm0"])
        result = storage.WeightStore(store, run).get_phase_result(phases[0])
        arrays = dict(result or {})
    for name in ("rbm0.W", "W"):  # a DBN's first RBM, or a lone RBM
        if name in arrays and np.ndim(arrays[name]) == 2:
            return np.asarray(arrays[name])
    for name in sorted(arrays):  # a conv net: the first 4-D kernel bank (out, in, kh, kw)
        if np.ndim(arrays[name]) == 4:
            return np.asarray(arrays[name])
    return None


def filter_grid(weights: np.ndarray, feature_shape: tuple[int, ...] | None = None, *, pad: int = 1) -> np.ndarray:
    """Tile first-layer filters into one image, each filter scaled to [0, 1] on its own.

    Parameters
    ----------
    weights : ndarray of shape (n_visible, n_hidden) or (n_filters, channels, kh, kw)
        An RBM's ``W`` (one filter per hidden unit) or a conv layer's kernels (first channel).
    feature_shape : tuple of int, optional
        Per-sample input shape; ``(H, W)``, ``(C, H, W)`` or ``(n,)``.  A flat input is shown
        as a square when ``n`` is a perfect square, else as a strip.

    Returns
    -------
    ndarray of shape (rows * (h + pad) + pad, columns * (w + pad) + pad), float in [0, 1]
        At most :data:`MAX_FILTERS` filters, padded with ones (white lines).
    """
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim == 4:
        filters = weights[:, 0]
    else:
        n_visible = int(np.prod(feature_shape)) if feature_shape else weights.shape[0]
        columns_are_filters = weights.shape[0] == n_visible
        flat = weights.T if columns_are_filters else weights
        height, width = _image_shape(flat.shape[1], feature_shape)
        filters = flat[:, : height * width].reshape(-1, height, width)
    filters = filters[:MAX_FILTERS]
    low = filters.min(axis=(1, 2), keepdims=True)
    span = filters.max(axis=(1, 2), keepdims=True) - low
    filters = (filters - low) / np.where(span > 0, span, 1.0)
    count, height, width = filters.shape
    columns = math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    grid = np.ones((rows * (height + pad) + pad, columns * (width + pad) + pad))
    for k, image in enumerate(filters):
        top, left = pad + (k // columns) * (height + pad), pad + (k % columns) * (width + pad)
        grid[top : top + height, left : left + width] = image
    return grid


def _image_shape(n_visible: int, feature_shape: tuple[int, ...] | None) -> tuple[int, int]:
    if feature_shape and len(feature_shape) >= 2 and int(np.prod(feature_shape[-2:])) == n_visible:
        return int(feature_shape[-2]), int(feature_shape[-1])
    side = math.isqrt(n_visible)
    return (side, side) if side * side == n_visible else (1, n_visible)


def _plot_filters(grid: np.ndarray, path: str, run: str) -> str:
    figure = _figure((7, 7.4))
    axis = figure.subplots()
    axis.imshow(grid, cmap="gray", interpolation="nearest", vmin=0.0, vmax=1.0)
    axis.set_axis_off()
    axis.set_title(f"run {run}: first-layer filters")
    figure.tight_layout()
    figure.savefig(path, dpi=FIGURE_DPI)
    return path
