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


def test_the_torch_lenet_has_the_parameter_shapes_of_rbm_lenet(bench_torch):
    pytest.importorskip("torch")
    convnet = rbm.lenet(input_shape=(1, 28, 28), n_classes=10, random_state=0).initialize()
    ours = convnet.parameters()
    net = bench_torch.build_lenet(1, 10)
    torch_shapes = [tuple(p.shape) for p in net.parameters()]
    # sparkdbn's dense W is (n_in, n_out), torch's Linear weight (n_out, n_in); conv kernels agree as they are
    our_shapes = [ours[f"{layer.name}.{key}"].T.shape if key == "W" and ours[f"{layer.name}.W"].ndim == 2
                  else ours[f"{layer.name}.{key}"].shape
                  for layer in convnet.layers_ if f"{layer.name}.W" in ours for key in ("W", "b")]
    assert torch_shapes == our_shapes
    assert sum(p.numel() for p in net.parameters()) == sum(value.size for value in ours.values()) == 431_080


def test_the_torch_lenet_draws_its_initial_weights_at_rbm_lenets_scale(bench_torch):
    torch = pytest.importorskip("torch")
    ours = rbm.lenet(input_shape=(1, 28, 28), n_classes=10, random_state=0).initialize().parameters()
    torch.manual_seed(0)
    theirs = list(bench_torch.build_lenet(1, 10).parameters())
    for (name, value), parameter in zip(ours.items(), theirs, strict=True):
        drawn = parameter.detach().numpy()
        if name.endswith(".b"):
            assert not drawn.any() and not value.any(), name
        else:  # Glorot uniform and He normal: the same standard deviation, within 4 sampling errors of two
            # estimates from `size` draws each (about 0.18 for conv0's 500 weights, 0.006 for the first dense layer's 400,000)
            np.testing.assert_allclose(drawn.std(), value.std(), rtol=4 / np.sqrt(value.size), err_msg=name)


def test_the_torch_lenet_with_rbm_lenets_weights_predicts_its_probabilities(bench_torch):
    torch = pytest.importorskip("torch")
    from rbm.datasets import load_digits28

    split = load_digits28(flatten=False, shifts=[(0, 0)])
    X, y = split.X_train[:300], split.y_train[:300]
    convnet = rbm.lenet(input_shape=(1, 28, 28), n_classes=10, epochs=1, random_state=0).fit(X, y)
    net = bench_torch.build_lenet(1, len(convnet.classes_))
    bench_torch.load_convnet_parameters(net, convnet)
    with torch.no_grad():
        probabilities = torch.softmax(net(torch.from_numpy(split.X_test[:50])), dim=1).numpy()
    np.testing.assert_allclose(probabilities, convnet.predict_proba(split.X_test[:50]), atol=1e-5)


def test_lenet_runs_torch_ddp_only_and_scales_sparkdbns_rate(bench_torch):
    parser = bench_torch.bench_modes.make_parser()
    parser.add_argument("--torch", nargs="*", default=None)
    parser.add_argument("--torch-lr-scale", type=float, default=None)
    args = bench_torch.check_args(parser, parser.parse_args(["--model", "lenet"]))
    assert args.torch == ["torch-ddp"] and args.torch_lr_scale == 2.0
    with pytest.raises(SystemExit):
        bench_torch.check_args(parser, parser.parse_args(["--model", "lenet", "--torch", "torch-ddp+pre"]))
    network, settings = bench_torch.torch_network(args, np.zeros((4, 1, 28, 28), np.float32), np.arange(10))
    assert network == {"kind": "lenet", "in_channels": 1, "n_classes": 10}
    assert settings["learning_rate"] == 0.01 and settings["batch_size"] == 64


def test_lenet_with_adam_uses_adams_rate_in_both_systems_unscaled(bench_torch):
    parser = bench_torch.bench_modes.make_parser()
    parser.add_argument("--torch", nargs="*", default=None)
    parser.add_argument("--torch-lr-scale", type=float, default=None)
    args = bench_torch.check_args(parser, parser.parse_args(["--model", "lenet", "--updater", "adam"]))
    assert args.torch_lr_scale == 1.0  # Adam's steps do not grow with the rate's linear rule
    _network, settings = bench_torch.torch_network(args, np.zeros((4, 1, 28, 28), np.float32), np.arange(10))
    assert settings["updater"] == "adam" and settings["learning_rate"] == 0.001 and settings["batch_size"] == 64
    with pytest.raises(SystemExit):  # the DBN's updaters are its own
        bench_torch.check_args(parser, parser.parse_args(["--updater", "adam"]))


def test_the_race_compares_each_run_with_its_own_repeats_fastest_torch_to_the_target(bench_torch):
    def run(mode: str, repeat: int, target_s: float | None, straggler: float = 1.0) -> dict:
        return {"mode": mode, "repeat": repeat, "target_s": target_s, "straggler": straggler, "wall_s": 1.0,
                "accuracy": 0.99, "pretrain_s": 0.5}

    results = [run("async", 1, 10.0), run("torch-ddp", 1, None), run("torch-ddp+pre", 1, 40.0),
               run("async", 2, 30.0), run("torch-ddp", 2, 20.0), run("torch-ddp+pre", 2, 25.0),
               run("async", 2, 90.0, straggler=3.0)]
    ratios = {(row[0], row[1]): row[3] for row in bench_torch.race_rows(results)}
    assert ratios[(1, "async")] == 10.0 / 40.0 and ratios[(1, "torch-ddp")] is None  # never reached it
    assert ratios[(2, "async")] == 30.0 / 20.0 and ratios[(2, "torch-ddp+pre")] == 25.0 / 20.0
    assert len(ratios) == 6  # a straggler's run is not in the race
