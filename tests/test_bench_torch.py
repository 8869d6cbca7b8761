"""scripts/bench_torch.py compares the DBN with a PyTorch network: that network must be the DBN's fine-tuning net.

The torch checks skip where torch is missing (CI installs the ``test`` extra only; ``bench`` brings torch).
"""

from __future__ import annotations

import numpy as np
import pytest
from support.scripts import script_module

import rbm
from rbm.datasets import load_digits01



@pytest.fixture(scope="module")
def bench_torch():
    with script_module("bench_torch.py") as module:  # registered: the script ships itself with cloudpickle
        yield module


@pytest.fixture(scope="module")
def small_dbn():
    split = load_digits01(test_fraction=0.25, random_state=0)
    X, y = split.X_train[:300], split.y_train[:300]
    dbn = rbm.DBN(hidden_layer_sizes=(12, 8), pretrain_epochs=1, finetune_epochs=2, finetune_dropout=0.0,
                  random_state=0).fit(X, y)
    return dbn, split.X_test[:50]


def test_the_torch_network_has_the_widths_of_the_dbns_fine_tuning_layers(bench_torch, small_dbn):
    dbn, _ = small_dbn
    params = dbn.parameters("finetune")
    widths = [params["rbm0.W"].shape[0], params["rbm0.W"].shape[1], params["rbm1.W"].shape[1], params["out.W"].shape[1]]
    assert bench_torch.layer_sizes(dbn.n_features_in_, dbn.hidden_layer_sizes, len(dbn.classes_)) == widths


def test_the_torch_network_with_a_dbns_weights_predicts_the_dbns_probabilities(bench_torch, small_dbn):
    torch = pytest.importorskip("torch")
    dbn, X = small_dbn
    mlp = bench_torch.build_mlp(bench_torch.layer_sizes(dbn.n_features_in_, dbn.hidden_layer_sizes, len(dbn.classes_)))
    bench_torch.load_dbn_parameters(mlp, dbn)
    with torch.no_grad():
        probabilities = torch.softmax(mlp(torch.from_numpy(X.astype(np.float32))), dim=1).numpy()
    np.testing.assert_allclose(probabilities, dbn.predict_proba(X.astype(np.float32)), atol=1e-5)
