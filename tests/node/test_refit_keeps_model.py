"""A finished run stays available: a later fit of it never hides or replaces its model.

The crash harness's small run (``crash_store.py``) is fitted to "done", then fitted again with a store
that refuses any model or record write of the run (a full disk), or that Ctrl-C stops there: the refit
asks for neither, so it ends as the run was, and readers serve the finished model byte for byte.  A
store written by an earlier version, whose refit of a done run wrote a newer record and failed, still
serves the finished model, saying that a newer fit failed or is running, and ``sparkdbn status`` shows both.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from crash_store import CrashingStore, SimulatedStoreFailure, harness_model, harness_settings

import node
import node.driver._fit
from node.run import run_model_arrays
from node.watch import run_status

pytestmark = pytest.mark.slow


def fit(spark, store_url: str, run_id: str, split) -> None:
    node.Trainer(spark, store_url, run_id=run_id, **harness_settings()).fit(harness_model(), split.X_train,
                                                                            split.y_train)


def model_arrays(store_url: str, run_id: str) -> dict[str, np.ndarray]:
    return run_model_arrays(node.open_run(store_url, run_id))


def stored_files(folder) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.mark.parametrize("how", ["full disk", "ctrl-c"])
def test_a_done_run_fitted_again_writes_no_model_or_record_and_its_model_stays_served(spark, digits, tmp_path,
                                                                                       monkeypatch, caplog, how):
    store_url = "file://" + str(tmp_path / "store")
    fit(spark, store_url, "refit", digits)
    finished = model_arrays(store_url, "refit")
    run_folder = tmp_path / "store" / "runs" / "refit"
    kept = {folder: stored_files(run_folder / folder) for folder in ("model", "record")}

    def stop(path: str) -> None:
        if how == "ctrl-c":
            raise KeyboardInterrupt
        raise SimulatedStoreFailure(f"injected: no space left on the device writing {path}")

    def a_model_or_record(writes: list[str]) -> bool:
        return "/model/" in writes[-1] or "/record/" in writes[-1]

    monkeypatch.setattr(node.driver._fit, "open_checked_store", lambda url, retry_timeout_s=30.0: CrashingStore(
        url, crash_at=None, on_crash=stop, crash_when=a_model_or_record))
    fit(spark, store_url, "refit", digits)  # before, it stored the model again and wrote records: a fault there
    # left the run "failed" (or "running") until it was fitted once more

    assert {folder: stored_files(run_folder / folder) for folder in kept} == kept
    view = node.open_run(store_url, "refit")
    assert view.record["status"] == "done" and view.record is view.done_record
    with caplog.at_level(logging.WARNING, logger="node.run._run_access"):
        served = model_arrays(store_url, "refit")
    assert served.keys() == finished.keys()
    assert all(np.array_equal(served[name], finished[name]) for name in finished)  # byte for byte the same model
    assert not [message for message in caplog.messages if "newer fit" in message]
    assert run_status(store_url, "refit").splitlines()[0].startswith("run refit: done")


@pytest.mark.parametrize("status", ["failed", "running"])
def test_an_earlier_versions_failed_refit_record_leaves_the_finished_model_served(spark, digits, tmp_path, caplog,
                                                                                   status):
    store_url = "file://" + str(tmp_path / "store")
    fit(spark, store_url, "refit", digits)
    finished = model_arrays(store_url, "refit")
    view = node.open_run(store_url, "refit")
    generation = max(int(name.split("-")[0]) for name in view.store.list("runs/refit/record"))
    newer = {**view.record, "status": status, "error": "OSError: no space left on the device"}
    newer.pop("model"), newer.pop("finished")
    view.runs.write_record(newer, generation=generation + 1)  # as an earlier version's refit left it

    view = node.open_run(store_url, "refit")
    assert view.record["status"] == status and view.done_record["status"] == "done"
    with caplog.at_level(logging.WARNING, logger="node.run._run_access"):
        served = model_arrays(store_url, "refit")
    assert all(np.array_equal(served[name], finished[name]) for name in finished) and served.keys() == finished.keys()
    what = "is running" if status == "running" else "failed: OSError: no space left"
    assert any(f"a newer fit of this run {what}" in message for message in caplog.messages), caplog.messages
    screen = run_status(store_url, "refit")
    shown = "failed" if status == "failed" else "stopped without finishing (its record says running)"
    assert screen.splitlines()[0].startswith(f"run refit: newer fit {shown}")  # no driver holds its lease
    assert "served model: the last finished fit's (done" in screen


def test_a_done_run_refuses_other_rows_of_the_same_count_and_takes_its_own_in_another_order(spark, digits, tmp_path):
    # A cross-validator handing one run id to every fold got the first fold's model back for each, silently.
    store_url = "file://" + str(tmp_path / "store")
    half = len(digits.X_train) // 2
    first, second = slice(0, half), slice(half, 2 * half)

    def refit(rows, order=None, **settings) -> None:
        X, y = digits.X_train[rows], digits.y_train[rows]
        order = np.arange(len(X)) if order is None else order
        node.Trainer(spark, store_url, run_id="fold", **harness_settings(**settings)).fit(harness_model(), X[order],
                                                                                           y[order])

    refit(first)
    finished = model_arrays(store_url, "fold")
    refit(first, order=np.random.default_rng(0).permutation(half), partitions=3)  # the same rows: nothing trains
    with pytest.raises(node.TrainingError, match=f"run 'fold' trained on other rows \\({half} as here, with other "
                                                 "values\\): a run trains on one dataset; pick another run id"):
        refit(second)
    for name, value in model_arrays(store_url, "fold").items():
        np.testing.assert_array_equal(value, finished[name])
