"""A training setting that should be a number and is not names its field (a config file's ``epochs: three``)."""

import dataclasses

import numpy as np
import pytest

from node.driver import TrainingSettings

NUMERIC_FIELDS = [field.name for field in dataclasses.fields(TrainingSettings)
                  if str(field.type).replace(" | None", "") in ("int", "float", "int | dict[str, int]")]


def test_the_numeric_fields_are_found():
    assert {"epochs", "partitions", "seed", "merge_alpha", "lease_timeout_s", "gpu_data_budget_bytes"} <= set(
        NUMERIC_FIELDS)


@pytest.mark.parametrize("name", NUMERIC_FIELDS)
def test_a_numeric_setting_given_as_text_is_refused_naming_its_field(name):
    # `settings: {epochs: three}` said "invalid literal for int() with base 10: 'three'", naming no field.
    with pytest.raises(ValueError, match=rf"^{name} must be (an integer|a number)") as refused:
        TrainingSettings(**{name: "three"}).validate()
    assert "'three'" in str(refused.value)


@pytest.mark.parametrize("settings", [dict(epochs={"rbm0": "three"}), dict(epochs=2.5), dict(partitions=True),
                                      dict(batch_size=8.5)])
def test_per_phase_epochs_fractions_and_booleans_are_refused_naming_the_field(settings):
    name = next(iter(settings))
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        TrainingSettings(**settings).validate()


def test_numpy_numbers_and_integers_for_float_settings_are_numbers():
    TrainingSettings(epochs={"rbm0": np.int64(2)}, partitions=np.int32(4), merge_alpha=1, lease_timeout_s=np.float32(3),
                     seed=np.uint8(7)).validate()


@pytest.mark.parametrize("run_id", ["", "  "])
def test_an_empty_run_id_is_refused_not_replaced_by_a_new_one(run_id, tmp_path, capsys):
    # `--run-id ''` (an unset shell variable) trained a run under a new generated id, saying nothing.
    from node import cli

    with pytest.raises(ValueError, match=rf"^run_id {run_id!r} is empty: give a run id, or leave it out"):
        TrainingSettings(run_id=run_id).validate()
    assert cli.main(["train", "--store", str(tmp_path / "store"), "--run-id", run_id, "--no-report"]) == 2
    assert capsys.readouterr().err == (f"sparkdbn train: training settings: run_id {run_id!r} is empty: give a run id, "
                                       "or leave it out for a new one\n")
    assert not (tmp_path / "store").exists()
    TrainingSettings(run_id="r").validate()
