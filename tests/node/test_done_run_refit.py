"""Fitting a run again after it is done trains nothing: said as one warning, which the command line shows.
A fit of another model or on another dataset under the run's id is refused, done or not."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

from node import TrainingError
from node.run import RunRecord

PHASES = ("rbm0", "rbm1", "finetune")
SPEC = {"kind": "dbn"}
DATA = {"feature_shape": [64]}


class Runs:
    """What a RunRecord writes through: the records, kept in memory."""

    def __init__(self, run: str) -> None:
        self.run, self.written = run, []

    def write_record(self, data: dict, generation: int) -> None:
        self.written.append(dict(data))


LEASE = SimpleNamespace(generation=2, check_store=lambda: None, fit_id="fit-2")


def start(previous: dict | None, epochs: dict[str, int], spec: dict = SPEC, data: dict = DATA,
          settings: dict | None = None) -> RunRecord:
    record, _ = RunRecord.start(Runs("digits"), LEASE, previous, spec=spec, phases=PHASES, epochs=epochs,
                                settings=settings or {}, store_url="file:///store", data_facts=data,
                                classes=np.arange(10))
    return record


def finished(epochs: dict[str, int]) -> dict:
    record = start(None, epochs).data
    for phase in PHASES:
        record["steps"][phase].update(epochs_done=epochs[phase], result={"file": f"{phase}.npz"})
    return {**record, "status": "done", "model": {"path": "model/2/model.npz", "sha256": "ab"}}


def test_a_done_run_fitted_again_with_other_epochs_says_so_in_one_warning(caplog):
    trained = {"rbm0": 3, "rbm1": 3, "finetune": 6}
    with caplog.at_level(logging.INFO, logger="node.run"):
        record = start(finished(trained), {"rbm0": 5, "rbm1": 5, "finetune": 10})
    warnings = [entry.getMessage() for entry in caplog.records if entry.levelno == logging.WARNING]
    assert warnings == ["run digits is done (epochs trained: rbm0 3, rbm1 3, finetune 6); fitting it again trains "
                        "nothing, not the epochs asked now (rbm0 5, rbm1 5, finetune 10): use a new run id to train "
                        "again"]
    assert {phase: record.epochs_planned(phase) for phase in PHASES} == trained  # kept as trained


def test_a_done_run_fitted_again_as_it_was_trained_warns_of_nothing(caplog):
    trained = {"rbm0": 3, "rbm1": 3, "finetune": 6}
    with caplog.at_level(logging.INFO, logger="node.run"):
        start(finished(trained), trained)
    assert not [entry for entry in caplog.records if entry.levelno >= logging.WARNING]
    assert "run digits is done; fitting it again trains nothing" in caplog.text  # at INFO: --verbose shows it


def test_a_run_stopped_after_a_phase_says_which_finished_phase_keeps_its_epochs(caplog):
    previous = finished({"rbm0": 3, "rbm1": 3, "finetune": 6})
    previous["status"] = "stopped"
    for phase in ("rbm1", "finetune"):
        previous["steps"][phase].update(epochs_done=0, result=None)
    with caplog.at_level(logging.WARNING, logger="node.run"):
        record = start(previous, {"rbm0": 5, "rbm1": 4, "finetune": 7})
    assert caplog.messages == ["run digits: phase rbm0 is done after 3 epochs; fitting the run again does not train "
                               "it for the 5 asked now (train a new run id for that)"]
    assert [record.epochs_planned(phase) for phase in PHASES] == [3, 4, 7]


def test_a_run_refuses_a_fit_of_another_model_or_on_another_dataset_and_names_what_differs():
    # A cross-validator handing one run id to every fold and parameter map got the first fold's model back.
    trained = {"rbm0": 3, "rbm1": 3, "finetune": 6}
    spec = {"kind": "dbn", "hidden_layer_sizes": (32, 32), "finetune_learning_rate": 0.1, "device": "cpu",
            "finetune_epochs": 100}
    data = {"feature_shape": [64], "n_samples": 719}
    for status in ("done", "running"):
        earlier = {**finished(trained), "spec": start(None, trained, spec).data["spec"], "data": data, "status": status}
        start(earlier, trained, {**spec, "device": "gpu", "finetune_epochs": 6}, data)  # where, and what only fit reads
        with pytest.raises(TrainingError, match=r"run 'digits' trains a model with finetune_learning_rate 0\.5, not "
                                                r"0\.1, hidden_layer_sizes \[16\], not \[32, 32\]: a run is one model"):
            start(earlier, trained, {**spec, "finetune_learning_rate": 0.5, "hidden_layer_sizes": (16,)}, data)
        with pytest.raises(TrainingError, match="run 'digits' trained on 719 samples, this data has 1438: a run "
                                                "trains on one dataset; pick another run id"):
            start(earlier, trained, spec, {**data, "n_samples": 1438})
        # Fewer rows because the run held some out for validation, and this fit does not: said so.
        held = {**earlier, "settings": {"validation_fraction": 0.5}}
        with pytest.raises(TrainingError, match=r"run 'digits' trained on 719 samples, this data has 1438 \(it held "
                                                r"out validation_fraction 0\.5 of its rows for validation, this fit "
                                                r"holds out 0: give the run's\): a run trains on one dataset"):
            start(held, trained, spec, {**data, "n_samples": 1438})


def test_a_done_run_fitted_again_writes_no_record_and_keeps_its_own():
    # The fit again wrote a record saying "running", then "done" with its own finish and timings: `status`
    # then told of a 0.5 s fit, not of the fit that trained the run.
    trained = {"rbm0": 3, "rbm1": 3, "finetune": 6}
    previous = {**finished(trained), "finished": 1.0e9, "attempts": 1, "timings": {"total_s": 60.0}}
    runs = Runs("digits")
    record, resumed = RunRecord.start(runs, LEASE, previous, spec=SPEC, phases=PHASES, epochs=trained, settings={},
                                      store_url="file:///store", data_facts=DATA, classes=np.arange(10))
    assert resumed and runs.written == []
    assert record.status == "done" and record.data == previous


def test_what_ends_a_done_runs_fit_again_does_not_mark_the_run_failed():
    # Ctrl-C while a done run was fitted again marked it "failed", and its readers then said so.
    from node.driver._fit_phases import _mark_failed

    trained = {"rbm0": 3, "rbm1": 3, "finetune": 6}
    runs = Runs("digits")
    record, _ = RunRecord.start(runs, LEASE, finished(trained), spec=SPEC, phases=PHASES, epochs=trained,
                                settings={}, store_url="file:///store", data_facts=DATA, classes=np.arange(10))
    lease = SimpleNamespace(**vars(LEASE), lost=False, store_failed=False)
    _mark_failed(KeyboardInterrupt(), record=record, lease=lease, run_id="digits")
    assert record.status == "done" and runs.written == []
    record.data["status"] = "running"  # a run not done is marked failed, as before
    _mark_failed(KeyboardInterrupt(), record=record, lease=lease, run_id="digits")
    assert [written["status"] for written in runs.written] == ["failed"]
