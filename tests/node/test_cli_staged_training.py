"""`sparkdbn train` on a staged dataset of one's own: validated on a staged split, and what cannot work said
before Spark starts."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

import node
from node import cli


def _stage(tmp_path, *, labelled: bool = True, raw: bool = False) -> str:
    digits = load_digits()
    rows = digits.data[:400] / (1.0 if raw else 16.0)
    columns = {f"p{k}": rows[:, k] for k in range(64)}
    if labelled:
        columns["label"] = np.array([f"digit {label}" for label in digits.target[:400]])
    np.savez(tmp_path / "digits.npz", X=rows, **({"y": columns["label"]} if labelled else {}))
    url = "file://" + str(tmp_path / ("raw" if raw else "labelled" if labelled else "unlabelled"))
    assert cli.main(["stage", "--input", str(tmp_path / "digits.npz"), "--url", url, "--test-fraction", "0.25"]
                    if labelled else ["stage", "--input", str(tmp_path / "digits.npz"), "--url", url]) == 0
    return url


def test_what_a_staged_dataset_cannot_train_is_said_before_spark_starts(tmp_path, monkeypatch, capsys):
    from node.cli import _commands

    monkeypatch.setattr(_commands, "_session", lambda options: pytest.fail("Spark started"))
    labelled, unlabelled, raw = _stage(tmp_path), _stage(tmp_path, labelled=False), _stage(tmp_path, raw=True)
    (tmp_path / "fraction.yaml").write_text("settings:\n  validation_fraction: 0.2\n")
    (tmp_path / "missing.yaml").write_text(f"settings:\n  validation_data: {tmp_path / 'nowhere'}\n")
    capsys.readouterr()
    store = str(tmp_path / "store")
    cases = [
        # It trained for a while before saying it (55 s here), and left a half-made run.
        (["--dataset", unlabelled], f"the dataset {unlabelled} is unlabelled (staged without a label column), but "
                                    "a dbn learns labels: train --model rbm on it, or stage the data with its labels "
                                    "(--label-col)"),
        # Said after Spark started, with a Spark error about a broadcast, and pointing to a Python-only remedy.
        (["--dataset", labelled, "--config", str(tmp_path / "fraction.yaml")],
         f"settings: validation_fraction holds rows out of arrays, not out of the staged dataset {labelled}: give "
         f"settings: validation_data: {labelled}/test (its held-out split) or a split staged apart"),
        # Said by the driver after Spark started (45 s here), hinting to divide pixels by their maximum.
        (["--dataset", raw], f"the dataset {raw} holds values in [0, 16]; this model takes [0, 1] (stage it again "
                             "with --scale minmax, or use Gaussian visible units)"),
        (["--dataset", labelled, "--config", str(tmp_path / "missing.yaml")],
         f"settings: validation_data {tmp_path / 'nowhere'}: no dataset at file://{tmp_path / 'nowhere'}"),
    ]
    for args, expected in cases:
        assert cli.main(["train", "--store", store, *args]) == 2, args
        assert capsys.readouterr().err.startswith(f"sparkdbn train: {expected}"), args
    assert not (tmp_path / "store").exists()


@pytest.mark.slow
def test_a_staged_dataset_trains_validated_and_early_stopped_on_its_held_out_split(spark, tmp_path, capsys):
    url = _stage(tmp_path)
    (tmp_path / "watched.yaml").write_text(
        f"model: dbn\nlayers: [32]\nepochs: 4\nsettings:\n  validation_data: {url}/test\n"
        "  early_stopping: {metric: val_accuracy, patience: 1, min_delta: 1.0}\n")
    store = tmp_path / "store"
    assert cli.main(["train", "--store", str(store), "--run-id", "watched", "--dataset", url, "--config",
                     str(tmp_path / "watched.yaml"), "--no-report", "--no-progress"]) == 0
    record = node.open_run("file://" + str(store), "watched").record
    assert record["settings"]["validation_data"] == f"{url}/test"  # named in the record, not "<str>"
    assert record["validation"]["source"] == f"validation_data {url}/test (100 rows)"
    # No epoch beats the first by a whole 1.0 of accuracy: stopped after patience 1, in every phase validated.
    finetune = record["steps"]["finetune"]
    assert finetune["epochs_done"] == 2 and finetune["early_stopping"]["stopped"] is True, finetune
    capsys.readouterr()
    assert cli.main(["status", "--store", str(store), "--run", "watched"]) == 0
    assert f"validation: validation_data {url}/test (100 rows)" in capsys.readouterr().out
