"""A finished run stays available: a later fit of it that fails, dies or is interrupted never hides its model.

The crash harness's small run (``crash_store.py``) is fitted to "done", then fitted again with a store
that refuses the refit's model write (a full disk), that dies there (SIGKILL: nothing after it reaches
the store), or with Ctrl-C as the refit starts its model.  Readers must still serve the finished model,
byte for byte, say that a newer fit failed or is running, and ``sparkdbn status`` must show both.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from crash_store import CrashingStore, SimulatedStoreFailure, harness_model, harness_settings

import node
import node.driver._fit
import storage
from node.run import run_model_arrays
from node.watch import run_status

pytestmark = pytest.mark.slow


def fit(spark, store_url: str, run_id: str, split) -> None:
    node.Trainer(spark, store_url, run_id=run_id, **harness_settings()).fit(harness_model(), split.X_train,
                                                                            split.y_train)


def model_arrays(store_url: str, run_id: str) -> dict[str, np.ndarray]:
    return run_model_arrays(node.open_run(store_url, run_id))


@pytest.mark.parametrize("how", ["full disk", "killed", "ctrl-c"])
def test_a_refit_stopped_at_its_model_write_leaves_the_finished_model_served(spark, digits, tmp_path, monkeypatch,
                                                                              caplog, how):
    store_url = "file://" + str(tmp_path / "store")
    fit(spark, store_url, "refit", digits)
    finished = model_arrays(store_url, "refit")

    def stop(path: str) -> None:
        if how == "ctrl-c":
            raise KeyboardInterrupt
        raise SimulatedStoreFailure(f"injected: no space left on the device writing {path}")

    original = node.driver._fit.open_checked_store
    monkeypatch.setattr(node.driver._fit, "open_checked_store", lambda url, retry_timeout_s=30.0: CrashingStore(
        url, crash_at=None, on_crash=stop, dies=how == "killed",
        crash_when=lambda writes: writes[-1].endswith("/model.npz")))
    with pytest.raises((KeyboardInterrupt, SimulatedStoreFailure, storage.StoreUnavailableError)):
        fit(spark, store_url, "refit", digits)
    monkeypatch.setattr(node.driver._fit, "open_checked_store", original)

    view = node.open_run(store_url, "refit")
    assert view.record["status"] == ("running" if how == "killed" else "failed")  # the refit's own record
    with caplog.at_level(logging.WARNING, logger="node.run._run_access"):
        served = model_arrays(store_url, "refit")
    assert served.keys() == finished.keys()
    assert all(np.array_equal(served[name], finished[name]) for name in finished)  # byte for byte the same model
    newer = "is running" if how == "killed" else "failed"
    assert any(f"a newer fit of this run {newer}" in message for message in caplog.messages), caplog.messages
    screen = run_status(store_url, "refit")
    assert screen.splitlines()[0].startswith(f"run refit: newer fit {view.record['status']}")
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
