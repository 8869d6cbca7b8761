"""Labels from a pandas column (an object array of strings) are the strings they hold: the model keeps plain
classes, and its file holds them without pickle."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import rbm
from rbm._model import save_model
from rbm.datasets import load_digits01

NAMES = np.array([f"digit {k}" for k in range(10)])


@pytest.fixture(scope="module")
def digits8():
    return load_digits01()


@pytest.mark.parametrize("make", [
    lambda: rbm.DBN([16], pretrain_epochs=1, finetune_epochs=2, random_state=0),
    lambda: rbm.ConvNet(layers=[{"type": "dense", "units": 16}], input_shape=(64,), n_classes=10, epochs=2,
                        random_state=0),
], ids=["dbn", "convnet"])
def test_a_model_fitted_on_a_pandas_column_of_strings_keeps_strings_and_saves_and_loads_them(digits8, make, tmp_path):
    y = pd.Series(NAMES[digits8.y_train])
    assert y.to_numpy().dtype == object
    model = make().fit(pd.DataFrame(digits8.X_train), y)
    assert model.classes_.dtype.kind == "U" and model.classes_.tolist() == NAMES.tolist()
    # Saved, the classes were pickled, and loading (which never unpickles) refused the file.
    model.save(tmp_path / "model.npz")
    loaded = rbm.load_model(tmp_path / "model.npz")
    np.testing.assert_array_equal(loaded.predict(digits8.X_test), model.predict(digits8.X_test))
    assert model.score(digits8.X_test, pd.Series(NAMES[digits8.y_test])) == model.score(digits8.X_test,
                                                                                          NAMES[digits8.y_test])


def test_a_model_file_refuses_arrays_of_python_objects_rather_than_pickle_them(tmp_path):
    with pytest.raises(ValueError, match="cannot save 'classes': it holds Python objects"):
        save_model(tmp_path / "model.npz", {"kind": "dbn"}, {"W": np.zeros(2), "classes": np.array(["a", 1], dtype=object)})
    assert not list(tmp_path.iterdir())
