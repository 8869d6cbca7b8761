"""The early-stopping rule and the settings that ask for it (no Spark)."""

from __future__ import annotations

import math

import pytest

from node import TrainingSettings
from node.watch._early_stopping import EarlyStopping


def run_rule(rule: EarlyStopping, values: list[float]) -> dict:
    state = None
    for epoch, value in enumerate(values):
        state = rule.update(state, epoch, value)
        if state["stopped"]:
            break
    return {**state, "epochs": epoch + 1}


def test_accuracy_stops_after_patience_epochs_without_beating_the_best_by_min_delta():
    state = run_rule(EarlyStopping("val_accuracy", patience=2, min_delta=0.01), [0.50, 0.60, 0.605, 0.59, 0.9])
    assert state["stopped"] and state["epochs"] == 4
    assert state["best"] == 0.60 and state["best_epoch"] == 1 and state["wait"] == 2


def test_losses_improve_downwards_and_an_improvement_resets_the_count():
    state = run_rule(EarlyStopping("val_loss", patience=2), [1.0, 1.1, 0.9, 0.95, 0.8, 0.85, 0.85])
    assert state["stopped"] and state["epochs"] == 7 and state["best"] == 0.8 and state["best_epoch"] == 4


def test_a_nan_never_counts_as_an_improvement():
    rule = EarlyStopping("val_loss", patience=1)
    assert not rule.improves(math.nan, None) and not rule.improves(math.nan, 1.0)
    assert run_rule(rule, [1.0, math.nan])["stopped"]


def test_the_rule_applies_to_the_phases_that_report_its_metric():
    assert EarlyStopping("val_accuracy").applies_to("finetune") and not EarlyStopping("val_accuracy").applies_to("rbm0")
    assert EarlyStopping("val_reconstruction_error").applies_to("rbm1")
    assert EarlyStopping("val_loss").applies_to("rbm0") and EarlyStopping("val_loss").applies_to("train")


@pytest.mark.parametrize("changes, message", [
    (dict(early_stopping={"metric": "val_accuracy"}), "give validation_fraction or validation_data"),
    (dict(validation_fraction=0.1, early_stopping={"metric": "accuracy"}), "metric must be one of"),
    (dict(validation_fraction=0.1, early_stopping={"patience": 0}), "patience must be >= 1"),
    (dict(validation_fraction=0.1, early_stopping={"min_delta": -1}), "min_delta must be >= 0"),
    (dict(validation_fraction=0.1, early_stopping={"patiense": 3}), "unknown key"),
    (dict(validation_fraction=1.0), "validation_fraction must lie in (0, 1)"),
    (dict(validation_fraction=0.1, validation_data=([[0.0]], [0])), "not both"),
    (dict(validation_fraction=0.1, early_stopping=True, mode="sync"), "mode 'sync' trains a phase in one Spark job"),
    (dict(validation_fraction=0.1, early_stopping=True, mode="sharing"), "use mode='async' with early_stopping"),
])
def test_bad_watching_settings_are_refused_naming_the_setting(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainingSettings(**changes).validate()


def test_the_settings_stay_json_able_with_a_validation_set():
    import json

    import numpy as np

    settings = TrainingSettings(validation_data=(np.zeros((3, 2)), np.zeros(3)), early_stopping=True)
    assert json.loads(json.dumps(settings.to_dict()))["validation_data"] == "<tuple>"
    staged = TrainingSettings(validation_data="hdfs://namenode:9870/datasets/iris/test", early_stopping=True)
    assert json.loads(json.dumps(staged.to_dict()))["validation_data"] == "hdfs://namenode:9870/datasets/iris/test"
