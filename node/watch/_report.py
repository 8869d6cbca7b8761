"""Report plots of a training run, from what the nodes wrote to the store.

Reads ``runs/<run>/metrics/<node>/*.json`` through :meth:`storage.RunStore.read_metrics` --
one record per trained partition, written by the executor node (:mod:`node.executor._node_reports`) --
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
device        where the node computed (kind, GPU address, name, ...; optional): named in the legends
============  ==================================================================
"""

from __future__ import annotations

import logging
import math
import os
from collections import defaultdict
from typing import Any

import numpy as np

import storage

from .._errors import InputDataError, StoreAccessError, TrainingError
from ..run import RunView, open_run, run_model_arrays
from ._status import device_label

__all__ = ["render_report", "filter_grid"]

log = logging.getLogger(__name__)

FIGURE_DPI = 100
MAX_TICKS = 5  # per axis: a 4.5-inch panel holds five labels like "1.2e+06" side by side
MAX_FILTERS = 100


def render_report(store_url: str, run: str, out_dir: str, *, key: bytes | None = None,
                  retry_timeout_s: float = 30.0) -> list[str]:
    """Render a run's training curves, merges/staleness and first-layer filters as PNG files.

    Parameters
    ----------
    store_url : str
        The store the run trained into (path, ``file://`` or ``hdfs://`` URL).
    run : str
        Run id.
    out_dir : str
        Local directory for the PNGs: new, empty, or one an earlier report wrote (its PNGs are
        replaced); a folder holding anything else is refused, so no user file is ever replaced.
    key : bytes, optional
        The run key's master secret, when it is not where the fit kept it (see
        :func:`node.resolve_run_key`).
    retry_timeout_s : float, optional
        How long a failing store is retried before the report gives up (default 30 s, as a fit's
        ``TrainingSettings.store_retry_timeout_s``).

    Returns
    -------
    list of str
        Paths written: ``training_curves.png`` (with the validation loss when epochs were
        validated), ``merges_staleness.png``, ``validation.png`` when epochs were validated (see
        :mod:`node.watch._validation`) and, when the run has a first RBM layer (or conv layer),
        ``filters.png``.

    Raises
    ------
    InputDataError
        The run has no metrics in that store (wrong run id or store), or ``out_dir`` holds files an
        earlier report did not write.
    StoreAccessError
        The store cannot be read.
    """
    view = open_run(store_url, run, key=key, retry_timeout_s=retry_timeout_s)
    runs, record = view.runs, view.record or {}
    try:
        metrics = runs.read_metrics()
    except storage.StoreError as error:
        raise StoreAccessError(f"cannot read run {run!r} from the store {store_url!r}: {error}") from error
    if not metrics:
        raise InputDataError(f"run {run!r} has no metrics in the store {store_url!r}: check the run id and the store URL")
    _claim_report_folder(out_dir)
    paths = [
        _save(training_curves_figure(metrics, record, run), os.path.join(out_dir, "training_curves.png")),
        _save(merges_figure(metrics, run), os.path.join(out_dir, "merges_staleness.png")),
    ]
    if any((step or {}).get("validation") for step in (record.get("steps") or {}).values()):
        paths.append(_save(validation_figure(record, run), os.path.join(out_dir, "validation.png")))
    weights = _first_layer_weights(view)
    if weights is not None:
        filters = filter_grid(weights, _feature_shape(record))
        paths.append(_plot_filters(filters, os.path.join(out_dir, "filters.png"), run))
    else:
        log.warning("run %s has neither a saved model nor a first-layer phase result: no filter plot", run)
    log.info("report of run %s: %s", run, paths)
    return paths


#: Marks a folder of report plots, so that a later report may replace them (and nothing else).
REPORT_MARKER = "_SPARKDBN_REPORT"
REPORT_FILES = ("training_curves.png", "merges_staleness.png", "validation.png", "filters.png", REPORT_MARKER)


def check_report_folder(out_dir: str) -> None:
    """Raise :class:`InputDataError` when ``out_dir`` holds files an earlier report did not write."""
    if os.path.isdir(out_dir):
        names = sorted(os.listdir(out_dir))
        foreign = [name for name in names if name not in REPORT_FILES]
        if foreign or (names and REPORT_MARKER not in names):
            first = foreign[0] if foreign else names[0]
            raise InputDataError(f"the report folder {out_dir} holds {first!r}, which no report wrote; nothing was "
                                 "written there. Choose a new or empty folder (--out)")
    elif os.path.exists(out_dir):
        raise InputDataError(f"the report folder {out_dir} is a file; choose a folder (--out)")


def _claim_report_folder(out_dir: str) -> None:
    """Make ``out_dir`` a report folder (see :func:`check_report_folder`)."""
    check_report_folder(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    for name in REPORT_FILES:  # an earlier report's plots: a plot this run does not have must not stay behind
        if os.path.exists(os.path.join(out_dir, name)):
            os.remove(os.path.join(out_dir, name))
    with open(os.path.join(out_dir, REPORT_MARKER), "w") as handle:
        handle.write("PNG plots written by `sparkdbn report`; a later report replaces them.\n")


# --------------------------------------------------------------------------- metrics plots


def _figure(size_in: tuple[float, float]) -> Any:
    """A matplotlib Figure on the Agg canvas, outside pyplot: no global backend or figure state."""
    # matplotlib is imported when a report is drawn: the CLI and the executors start faster without it.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size_in, dpi=FIGURE_DPI)
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Any, path: str) -> str:
    figure.tight_layout()
    figure.savefig(path, dpi=FIGURE_DPI)
    return path


def _few_ticks(axis: Any, *, integer_x: bool = False) -> None:
    """At most a handful of ticks per axis, so that labels never run into each other (100 epochs, 1e6 samples)."""
    from matplotlib.ticker import MaxNLocator

    axis.xaxis.set_major_locator(MaxNLocator(nbins=MAX_TICKS, integer=integer_x))
    axis.yaxis.set_major_locator(MaxNLocator(nbins=MAX_TICKS))


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


def training_curves_figure(metrics: list[dict], record: dict, run: str) -> Any:
    """Per phase: each node's training loss against the samples it has seen, and the validation loss.

    The validation loss of an epoch (``steps[phase].validation[i].val_loss`` in the run record) is
    drawn where the nodes stood at that epoch's end: the mean over nodes of their samples seen.
    """
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
            where = device_label(records[-1].get("device"))
            axis.plot(x, [float(r.get("loss", np.nan)) for r in records], marker=".",
                      label=f"{node} ({where})" if where else node)
        validated = _validation_points(grouped[phase], ((record.get("steps") or {}).get(phase) or {}).get("validation"))
        if validated:
            axis.plot(*zip(*validated), color="black", linestyle="--", marker="s", label="validation")
        _few_ticks(axis)
        supervised = not phase.startswith("rbm")
        axis.set_title(phase)
        axis.set_xlabel("samples seen by the node")
        axis.set_ylabel("cross-entropy" if supervised else "reconstruction error")
        axis.legend(fontsize="small")
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(phases) :]:
        axis.set_visible(False)
    figure.suptitle(f"run {run}: training loss per node")
    return figure


def _validation_points(nodes: dict[str, list[dict]], entries: list[dict] | None) -> list[tuple[float, float]]:
    """(samples seen per node at the epoch's end, val_loss) of each validated epoch."""
    points = []
    for entry in entries or []:
        if entry.get("val_loss") is None:
            continue
        seen = []
        for records in nodes.values():
            ran = [r for r in records if int(r.get("epoch", -1)) <= int(entry["epoch"])]
            if ran:
                last = max(ran, key=lambda r: float(r.get("time", 0.0)))
                seen.append(int(last["samples_seen"]) if last.get("samples_seen") is not None
                            else sum(int(r.get("samples", 0)) for r in ran))
        if seen:
            points.append((float(np.mean(seen)), float(entry["val_loss"])))
    return points


def merges_figure(metrics: list[dict], run: str) -> Any:
    """Per node: peer snapshots merged (cumulative) and their staleness over time."""
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
    if staleness_axis.get_legend_handles_labels()[0]:  # nodes' staleness drawn (the phase lines have no label)
        staleness_axis.legend(fontsize="small")
    for axis in (merges_axis, staleness_axis):
        _few_ticks(axis)
    figure.suptitle(f"run {run}: merges and staleness per node")
    return figure


def validation_figure(record: dict, run: str) -> Any:
    """Per phase: the validation figures of each epoch (from the run record), best epoch marked."""
    steps = {phase: step for phase, step in (record.get("steps") or {}).items() if (step or {}).get("validation")}
    order = list(record.get("phases") or [])  # the phases' training order, not the record's key order
    steps = dict(sorted(steps.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)))
    figure = _figure((5 * len(steps), 3.8))
    axes = np.atleast_1d(figure.subplots(1, len(steps)))
    for axis, (phase, step) in zip(axes, steps.items()):
        entries = step["validation"]
        epochs = [int(entry["epoch"]) + 1 for entry in entries]
        for name in sorted({key for entry in entries for key in entry if key.startswith("val_")}):
            axis.plot(epochs, [entry.get(name, np.nan) for entry in entries], marker="o", label=name)
        stopping = step.get("early_stopping") or {}
        if stopping.get("best_epoch") is not None:
            axis.axvline(int(stopping["best_epoch"]) + 1, color="grey", linestyle="--",
                         label="best" + (" (stopped early)" if stopping.get("stopped") else ""))
        axis.set_title(f"{phase}: validation")
        axis.set_xlabel("epoch")
        axis.legend(fontsize=8)
        _few_ticks(axis, integer_x=True)
    figure.suptitle(f"run {run}")
    return figure


# --------------------------------------------------------------------------- filters


def _feature_shape(record: dict) -> tuple[int, ...] | None:
    shape = (record.get("data") or {}).get("feature_shape")
    return tuple(int(d) for d in shape) if shape else None


def _first_layer_weights(view: RunView) -> np.ndarray | None:
    """The first layer's weights: from the finished model, else from the consolidated first phase."""
    arrays: dict[str, np.ndarray] = {}
    try:
        arrays = run_model_arrays(view)
    except TrainingError:  # not finished (yet): the first phase's result, when there is one
        phases = list((view.record or {}).get("phases") or ["rbm0"])
        arrays = dict(view.weights.get_phase_result(phases[0]) or {})
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
    return _save(figure, path)
