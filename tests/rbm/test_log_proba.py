"""``predict_log_proba``, as scikit-learn's classifiers have it: the DBN and the conv net give ``np.log`` of their
probabilities, ``-inf`` for a probability that underflowed to 0, and no warning for it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rbm
from rbm.datasets import load_digits01


@pytest.fixture(scope="module")
def digits():
    split = load_digits01()
    return split.X_train[:300], split.y_train[:300], split.X_test[:50]


def make_dbn():
    return rbm.DBN(hidden_layer_sizes=(16,), pretrain_epochs=1, finetune_epochs=2, random_state=0)


def make_convnet():
    return rbm.ConvNet(layers=[{"type": "dense", "units": 8}], input_shape=(1, 8, 8), epochs=2, random_state=0)


@pytest.mark.parametrize("make", [make_dbn, make_convnet], ids=["dbn", "convnet"])
def test_predict_log_proba_is_the_log_of_predict_proba_in_its_dtype(make, digits):
    X, y, X_test = digits
    model = make().fit(X, y)
    for rows in (X_test, X_test.astype(np.float64)):
        proba = model.predict_proba(rows)
        log_proba = model.predict_log_proba(rows)
        assert log_proba.shape == proba.shape and log_proba.dtype == proba.dtype
        np.testing.assert_array_equal(log_proba, np.log(proba))  # the same operation on the same numbers


@pytest.mark.parametrize("make", [make_dbn, make_convnet], ids=["dbn", "convnet"])
def test_a_probability_that_underflows_to_zero_gives_minus_infinity_without_a_warning(make, digits):
    X, y, X_test = digits
    model = make().fit(X, y)
    # Output weights a thousand times larger: the softmax of logits thousands apart underflows to exact zeros.
    model.set_parameters({**model.parameters(), "out.W": model.parameters()["out.W"] * 1000.0})
    proba = model.predict_proba(X_test)
    assert np.any(proba == 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "divide by zero encountered in log" would fail here
        log_proba = model.predict_log_proba(X_test)
    assert np.all(np.isneginf(log_proba[proba == 0.0]))
    np.testing.assert_array_equal(log_proba[proba > 0.0], np.log(proba[proba > 0.0]))
