"""New rows on another scale than a run's model learned: ``evaluate``/``predict --input`` refuse them in one line.

An audit evaluated the ``digits`` run (trained on pixels scaled to [0, 1]) on ``examples/digits-raw.csv``
(raw 0..16 pixels): exit status 0, no word, and predictions equal to the model's on the raw values, which
agreed with those on the scaled rows on 96% of the rows only.  ``train`` refuses such rows.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import rbm
from node.cli import _commands, main
from node.cli._new_rows import check_scale
from node.cli._options import UsageError
from rbm.datasets import load_digits01


@pytest.fixture(scope="module")
def model_and_rows():
    X, y, _, _ = load_digits01()
    X, y = X[:300], y[:300]
    model = rbm.DBN(hidden_layer_sizes=(16,), pretrain_epochs=1, finetune_epochs=1, random_state=0).fit(X, y)
    return model, X, y


def frame(spark, X: np.ndarray, y: np.ndarray):
    return spark.createDataFrame([(row.tolist(), int(label)) for row, label in zip(X, y)], ["features", "label"])


def test_rows_of_raw_pixels_are_refused_naming_the_row_and_its_range_and_scaled_rows_are_not(spark, model_and_rows):
    model, X, y = model_and_rows
    raw = np.round(X * 16)
    with pytest.raises(UsageError, match=r"^--input raw.csv: row 0 has features in \[0, 15\], another scale than "
                                         r"the model learned: it takes features in \[0, 1\]"):
        check_scale(frame(spark, raw, y), "features", model, None, "--input raw.csv")
    check_scale(frame(spark, X, y), "features", model, None, "--input scaled.csv")
    check_scale(frame(spark, np.clip(X * 1.5, 0, 1.5), y), "features", model, None, "a little past")  # not refused
    # Scaled as the run's dataset was (min-max over the raw range): the model's scale.
    scaling = {"kind": "minmax", "min": [0.0] * X.shape[1], "max": [16.0] * X.shape[1]}
    check_scale(frame(spark, raw, y), "features", model, scaling, "--input raw.csv")
    # A model of Gaussian visible units takes features of any scale.
    gaussian = rbm.DBN(hidden_layer_sizes=(16,), visible="gaussian", pretrain_epochs=0, finetune_epochs=1,
                       random_state=0).fit(raw, y)
    check_scale(frame(spark, raw, y), "features", gaussian, None, "--input raw.csv")


def test_evaluate_and_predict_refuse_new_rows_on_another_scale_in_one_line(spark, model_and_rows, tmp_path,
                                                                            monkeypatch, capsys):
    model, X, y = model_and_rows
    rows = tmp_path / "raw.csv"
    header = ",".join(f"pixel{k}" for k in range(X.shape[1]))
    rows.write_text(header + ",digit\n" + "".join(
        ",".join(str(int(v)) for v in np.round(row * 16)) + f",{label}\n" for row, label in zip(X[:50], y[:50])))
    monkeypatch.setattr(_commands, "_session", lambda options: spark)
    monkeypatch.setattr(_commands, "_open_run", lambda options: SimpleNamespace(record=None))
    monkeypatch.setattr(_commands, "load_run_model", lambda view: model)
    columns = ["--features-cols", header]
    for args in (["evaluate", "--label-col", "digit"], ["predict", "--output", str(tmp_path / "out")]):
        assert main([args[0], "--run", "digits", "--input", str(rows), *columns, *args[1:]]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"sparkdbn {args[0]}: --input {rows}: row 0 has features in [0, 15], another scale")
    assert not (tmp_path / "out").exists()  # nothing written
