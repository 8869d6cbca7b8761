"""The report command's PNG plots: rendered from the metrics and the model a run left in the store."""

from __future__ import annotations

import io

import numpy as np
import pytest

import node
import storage
from node._errors import InputDataError
from node.watch._report import filter_grid, merges_figure, render_report, training_curves_figure, validation_figure
from rbm import save_model


def _validation(epochs: int) -> list[dict]:
    """A phase's ``steps[phase].validation`` entries, as the driver records them."""
    return [{"epoch": epoch, "time": 0.0, "val_loss": 1.0 / (2 + epoch), "val_accuracy": 0.5 + 0.1 * epoch}
            for epoch in range(epochs)]


def _fake_run(store_url: str, run: str, *, with_model: bool = True, validated: bool = False) -> np.ndarray:
    """A run's store content as two nodes would leave it: metrics records, run record, model."""
    store = storage.open_store(store_url)
    key = node.resolve_run_key(run, store_url).key  # kept where a fit would keep it
    runs = storage.RunStore(store, run, key)
    record = {"run": run, "phases": ["rbm0", "finetune"], "data": {"feature_shape": [64]}, "status": "running"}
    if validated:
        record["steps"] = {"rbm0": {"validation": _validation(3)}, "finetune": {"validation": _validation(3)}}
    runs.write_record(record)
    rng = np.random.default_rng(0)
    clock = 1_700_000_000.0
    for phase in ("rbm0", "finetune"):
        seen = {"node-a": 0, "node-b": 0}
        for epoch in range(3):
            for partition in range(4):
                name = "node-a" if partition % 2 == 0 else "node-b"
                clock += 0.5
                seen[name] += 100
                merged = 1 if partition > 0 else 0
                runs.append_metrics(name, {
                    "node": name, "phase": phase, "epoch": epoch, "partition": partition, "samples": 100,
                    "samples_seen": seen[name], "loss": float(2.0 / (1 + epoch + partition / 4) + rng.random() * 0.01),
                    "train_s": 0.4, "merge_s": 0.01, "publish_s": 0.02, "merged": merged,
                    "staleness_s": 0.3 + 0.1 * partition if merged else None, "time": clock,
                })
    W = rng.normal(size=(64, 20)).astype(np.float32)
    if with_model:
        buffer_path = store_url.removeprefix("file://") + "/model-tmp.npz"
        save_model(buffer_path, {"kind": "dbn"}, {"rbm0.W": W, "rbm0.hbias": np.zeros(20, np.float32)})
        with open(buffer_path, "rb") as handle:
            payload = handle.read()
        store.write_bytes(runs.model_path(), payload)
        runs.write_record({**record, "status": "done",
                           "model": {"path": runs.model_path(), "sha256": storage.sha256_hex(payload)}})
    else:  # the first phase's result, named by the record as a fit names it
        stored = storage.WeightStore(store, run, key).put_phase_result("rbm0", {"rbm0.W": W})
        record.setdefault("steps", {}).setdefault("rbm0", {})["result"] = {"sha256": "-", **stored}
        runs.write_record(record)
    return W


def _png_size(path: str) -> tuple[int, int]:
    from PIL import Image

    with open(path, "rb") as handle:
        data = handle.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    with Image.open(io.BytesIO(data)) as image:
        image.verify()
    with Image.open(io.BytesIO(data)) as image:
        return image.size


def test_report_writes_curves_merges_and_filters_as_pngs_of_the_figure_sizes(tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    _fake_run(store_url, "r1")
    paths = render_report(store_url, "r1", str(tmp_path / "plots"))
    names = [p.rsplit("/", 1)[-1] for p in paths]
    assert names == ["training_curves.png", "merges_staleness.png", "filters.png"]
    # 2 phases -> 2 panels of 4.5 x 3.5 in; merges 9 x 6.5 in; filters 7 x 7.4 in; 100 dpi.
    assert _png_size(paths[0]) == (900, 350)
    assert _png_size(paths[1]) == (900, 650)
    assert _png_size(paths[2]) == (700, 740)


def test_a_report_replaces_only_its_own_plots_and_refuses_a_folder_of_other_files(tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    _fake_run(store_url, "r3")
    out = tmp_path / "plots"
    first = render_report(store_url, "r3", str(out))
    assert render_report(store_url, "r3", str(out)) == first  # an earlier report's folder: replaced
    (out / "my-figure.png").write_bytes(b"not from a report")
    with pytest.raises(InputDataError, match="holds 'my-figure.png', which no report wrote; nothing was written"):
        render_report(store_url, "r3", str(out))
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "training_curves.png").write_bytes(b"a colleague's plot with our file name")
    with pytest.raises(InputDataError, match="which no report wrote"):
        render_report(store_url, "r3", str(theirs))
    assert (theirs / "training_curves.png").read_bytes() == b"a colleague's plot with our file name"


def test_filter_plot_falls_back_to_the_first_phase_result_without_a_saved_model(tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    _fake_run(store_url, "r2", with_model=False)
    paths = render_report(store_url, "r2", str(tmp_path / "plots"))
    assert paths[-1].endswith("filters.png")
    assert _png_size(paths[-1]) == (700, 740)


def test_filter_grid_tiles_each_hidden_unit_as_an_image_scaled_on_its_own():
    rng = np.random.default_rng(1)
    W = rng.normal(size=(64, 5))  # (n_visible, n_hidden): 5 filters of 8x8
    grid = filter_grid(W, (64,))
    assert grid.shape == (2 * 9 + 1, 3 * 9 + 1)  # 3 columns x 2 rows of 8x8 tiles, 1 px borders
    first = grid[1:9, 1:9]
    expected = (W[:, 0] - W[:, 0].min()) / (W[:, 0].max() - W[:, 0].min())
    np.testing.assert_allclose(first, expected.reshape(8, 8))
    assert np.all(grid[0, :] == 1.0) and np.all(grid[-1, -10:] == 1.0)  # borders and the empty 6th tile
    kernels = rng.normal(size=(20, 3, 5, 5))  # a conv net's first layer: the first input channel of each kernel
    grid = filter_grid(kernels)
    assert grid.shape == (4 * 6 + 1, 5 * 6 + 1)
    k = kernels[7, 0]
    np.testing.assert_allclose(grid[1 + 6 : 6 + 6, 1 + 2 * 6 : 6 + 2 * 6], (k - k.min()) / (k.max() - k.min()))


def test_report_of_an_unknown_run_says_there_are_no_metrics(tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    with pytest.raises(InputDataError, match="no run 'nope'"):
        render_report(store_url, "nope", str(tmp_path / "plots"))


def _metrics(run: str, phases: tuple[str, ...], epochs: int, partitions: int, rows: int) -> list[dict]:
    """Metrics records of two nodes taking turns at the partitions, ``rows`` rows each."""
    records, clock = [], 1_700_000_000.0
    for phase in phases:
        seen = {"node-a": 0, "node-b": 0}
        for epoch in range(epochs):
            for partition in range(partitions):
                name = "node-a" if partition % 2 == 0 else "node-b"
                clock += 1.0
                seen[name] += rows
                records.append({"node": name, "phase": phase, "epoch": epoch, "samples": rows,
                                "samples_seen": seen[name], "loss": 1.0 / (1 + epoch), "merged": 1,
                                "staleness_s": 0.2, "time": clock})
    return records


def test_training_curves_show_the_validation_loss_at_each_epochs_end_beside_the_nodes_curves():
    metrics = _metrics("v", ("rbm0", "finetune"), epochs=3, partitions=4, rows=100)
    record = {"steps": {"finetune": {"validation": _validation(3)}}}
    figure = training_curves_figure(metrics, record, "v")
    rbm0, finetune = figure.axes[:2]
    assert [line.get_label() for line in rbm0.get_lines()] == ["node-a", "node-b"]  # not validated: no line
    assert [line.get_label() for line in finetune.get_lines()] == ["node-a", "node-b", "validation"]
    validation = finetune.get_lines()[-1]
    # Each node trains 2 partitions of 100 rows an epoch: 200, 400, 600 rows seen at the epochs' ends.
    np.testing.assert_allclose(validation.get_xdata(), [200, 400, 600])
    np.testing.assert_allclose(validation.get_ydata(), [1 / 2, 1 / 3, 1 / 4])
    assert "validation" in [text.get_text() for text in finetune.get_legend().get_texts()]


def _overlapping_tick_labels(figure) -> list[str]:
    figure.tight_layout()  # as the report saves it
    figure.canvas.draw()
    overlaps = []
    for axis in figure.axes:
        if not axis.get_visible():
            continue
        for ticks in (axis.get_xticklabels(), axis.get_yticklabels()):
            boxes = [(label.get_text(), label.get_window_extent()) for label in ticks if label.get_text()]
            for (text, box), (next_text, next_box) in zip(boxes, boxes[1:]):
                if box.overlaps(next_box):
                    overlaps.append(f"{text!r} / {next_text!r}")
    return overlaps


def _ticks_in_view(axis) -> list[float]:
    low, high = axis.get_xlim()
    return [float(tick) for tick in axis.get_xticks() if low <= tick <= high]


def test_tick_labels_do_not_overlap_and_epochs_are_whole_numbers_for_5_or_100_epochs():
    for epochs, rows in ((5, 100), (100, 5_000)):  # 100 epochs: a million samples seen by each node
        metrics = _metrics("run", ("rbm0", "rbm1", "finetune"), epochs=epochs, partitions=4, rows=rows)
        record = {"steps": {phase: {"validation": _validation(epochs)} for phase in ("rbm0", "rbm1", "finetune")}}
        assert _overlapping_tick_labels(training_curves_figure(metrics, record, "run")) == []
        figure = validation_figure(record, "run")
        assert _overlapping_tick_labels(figure) == []
        ticks = _ticks_in_view(figure.axes[0])
        assert all(tick.is_integer() for tick in ticks) and len(ticks) <= 6, ticks  # never 1.5 epochs


def test_a_run_whose_nodes_merged_nothing_draws_its_staleness_without_a_legend_or_a_warning(recwarn):
    metrics = [{"node": node, "time": float(t), "phase": phase, "merged": 0, "staleness_s": None}
               for t, (node, phase) in enumerate((("a", "rbm0"), ("b", "rbm0"), ("a", "finetune")))]
    figure = merges_figure(metrics, "run")
    merges_axis, staleness_axis = figure.axes
    assert merges_axis.get_legend() is not None and staleness_axis.get_legend() is None
    assert not [warning for warning in recwarn if "legend" in str(warning.message)]


def test_a_report_again_in_its_folder_replaces_its_validation_plot_and_leaves_no_stale_one(tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    _fake_run(store_url, "validated", validated=True)
    _fake_run(store_url, "plain")
    out = tmp_path / "plots"
    assert str(out / "validation.png") in render_report(store_url, "validated", str(out))
    assert str(out / "validation.png") in render_report(store_url, "validated", str(out))  # its own folder: replaced
    render_report(store_url, "plain", str(out))  # a run without validation: the other run's plot is gone
    assert sorted(path.name for path in out.iterdir()) == ["_SPARKDBN_REPORT", "filters.png", "merges_staleness.png",
                                                           "training_curves.png"]
