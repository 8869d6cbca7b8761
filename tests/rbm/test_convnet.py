"""The sequential conv net: LeNet learns shifted digits, whole-net gradients, the seam, save/load,
reproducibility, input forms, updaters and the errors users meet."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import yaml
from sklearn.exceptions import NotFittedError
from support.seed_bounds import assert_at_least, assert_at_most
from threadpoolctl import threadpool_limits

import rbm
from rbm import ConvNet, lenet
from rbm.conv._ops import softmax_cross_entropy
from rbm import DivergenceError
from rbm.datasets import load_digits01, load_digits28

SMALL_LAYERS = [
    {"type": "conv", "filters": 6, "kernel": 3, "padding": 1, "activation": "relu"},
    {"type": "maxpool", "size": 2},
    {"type": "dense", "units": 32, "activation": "relu"},
]


@pytest.fixture(scope="module")
def digits8():
    """scikit-learn's 8x8 digits as (n, 1, 8, 8) images."""
    split = load_digits01()
    return split.X_train.reshape(-1, 1, 8, 8), split.y_train, split.X_test.reshape(-1, 1, 8, 8), split.y_test


def small_net(**settings) -> ConvNet:
    options = {"layers": SMALL_LAYERS, "input_shape": (1, 8, 8), "n_classes": 10, "learning_rate": 0.05,
               "epochs": 2, "random_state": 0, **settings}
    return ConvNet(**options)


# The LeNet recipe of the README and docs/models.md: the 8x8 digits upsampled to 28x28, the training images shifted
# by up to 2 pixels (13 shifts: about 18.7k images; held-out images are split off before
# augmentation, so no copy of them is trained on); Adam for 3 epochs at 3e-3, the step
# divided by 1 + 4t in epoch t.  Tuned on a validation split of the training part of split 0.
RECIPE_SHIFTS = [(dy, dx) for dy in (-2, 0, 2) for dx in (-2, 0, 2)] + [(1, 1), (1, -1), (-1, 1), (-1, -1)]
RECIPE = dict(updater="adam", learning_rate=3e-3, lr_decay=4.0, epochs=3)


@pytest.fixture(scope="module")
def lenets():
    """LeNet trained with the recipe on splits 1, 2 and 3 (seeds 0, 1, 2), with its held-out split."""
    trained = []
    # One BLAS thread: ~12 s of CPU per net either way, and busy-waiting BLAS threads on a
    # shared machine can make the same run several times slower.
    with threadpool_limits(limits=1):
        for seed in (0, 1, 2):
            split = load_digits28(flatten=False, shifts=RECIPE_SHIFTS, random_state=seed + 1)
            trained.append((lenet(random_state=seed, **RECIPE).fit(split.X_train, split.y_train), split))
    return trained


@pytest.mark.slow
@pytest.mark.seed_bound
def test_lenet_with_the_readme_recipe_reaches_99_percent_held_out_accuracy_on_digits28(lenets):
    accuracies = [net.score(split.X_test, split.y_test) for net, split in lenets]
    # Measured (scripts/check-seed-bounds): 0.992, 0.997, 0.997, the median 0.997 under Haswell and SkylakeX kernels.
    assert_at_least(np.median(accuracies), 0.99, "median LeNet accuracy, seeds 0-2", accuracies)


@pytest.mark.slow
def test_lenets_training_loss_falls_every_epoch_under_the_learning_rate_schedule(lenets):
    for net, _ in lenets:
        assert len(net.loss_curve_) == 3
        assert net.loss_curve_[2] < net.loss_curve_[1] < 0.5 * net.loss_curve_[0]


def test_whole_net_gradients_match_central_finite_differences():
    net = ConvNet(
        layers=[
            {"type": "conv", "filters": 3, "kernel": 3, "padding": 1, "activation": "tanh"},
            {"type": "maxpool", "size": 2},
            {"type": "conv", "filters": 2, "kernel": 2, "stride": 1, "activation": "relu"},
            {"type": "avgpool", "size": 2, "stride": 1},
            {"type": "dense", "units": 4, "activation": "sigmoid"},
        ],
        input_shape=(2, 6, 6), n_classes=3, dtype="float64", random_state=1,
    ).initialize()
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(4, 2, 6, 6)), np.array([0, 1, 2, 1])
    _, grads = net._loss_and_gradients(X, y)
    grads = {name: value.copy() for name, value in grads.items()}
    assert set(grads) == set(net.parameters())
    for name, param in net._refs.items():
        numeric = np.zeros_like(param)
        for index in np.ndindex(param.shape):
            saved = param[index]
            param[index] = saved + 1e-6
            plus = float(softmax_cross_entropy(net._forward(X, True), y, np)[0])
            param[index] = saved - 1e-6
            minus = float(softmax_cross_entropy(net._forward(X, True), y, np)[0])
            param[index] = saved
            numeric[index] = (plus - minus) / 2e-6
        np.testing.assert_allclose(grads[name], numeric, rtol=1e-5, atol=1e-8, err_msg=name)


def test_lenet_has_the_dl4j_shapes_and_parameter_names():
    net = lenet(input_shape=(1, 28, 28), n_classes=10).initialize()
    shapes = {name: value.shape for name, value in net.parameters().items()}
    assert shapes == {
        "conv0.W": (20, 1, 5, 5), "conv0.b": (20,), "conv1.W": (50, 20, 5, 5), "conv1.b": (50,),
        "dense0.W": (800, 500), "dense0.b": (500,), "out.W": (500, 10), "out.b": (10,),
    }
    assert [layer.output_shape for layer in net.layers_] == [
        (20, 24, 24), (20, 12, 12), (50, 8, 8), (50, 4, 4), (800,), (500,), (10,)]
    assert net.phases() == ["train"]


def test_save_and_load_round_trip_is_exact(digits8, tmp_path):
    X, y, X_test, _ = digits8
    net = small_net().fit(X, y)
    path = tmp_path / "convnet.npz"
    net.save(path)
    loaded = rbm.load_model(path)
    assert isinstance(loaded, ConvNet)
    assert loaded.to_spec() == net.to_spec()
    for name, value in net.parameters().items():
        np.testing.assert_array_equal(loaded.parameters()[name], value)
    np.testing.assert_array_equal(loaded.predict_proba(X_test), net.predict_proba(X_test))


def test_same_seed_gives_identical_results_and_another_seed_does_not(digits8):
    X, y, X_test, _ = digits8
    dropout = [*SMALL_LAYERS, {"type": "dropout", "rate": 0.2}]
    first = small_net(layers=dropout, random_state=7).fit(X, y)
    second = small_net(layers=dropout, random_state=7).fit(X, y)
    other = small_net(layers=dropout, random_state=8).fit(X, y)
    for name, value in first.parameters().items():
        np.testing.assert_array_equal(second.parameters()[name], value)
    assert first.loss_curve_ == second.loss_curve_
    assert not np.array_equal(other.parameters()["conv0.W"], first.parameters()["conv0.W"])
    np.testing.assert_array_equal(first.predict_proba(X_test), first.predict_proba(X_test))  # no dropout at inference


def test_flat_and_nchw_inputs_train_and_predict_the_same(digits8, numerics):
    X, y, X_test, _ = digits8
    # Bit for bit: the net copies each batch into a contiguous (C, H, W, N) array whatever the input's form
    # and memory order, so both run the same operations (checked in Fortran order too: `numerics`).
    X, X_test = numerics.arrange(X), numerics.arrange(X_test)
    nchw = small_net(epochs=1).fit(X, y)
    flat = small_net(epochs=1).fit(numerics.arrange(X.reshape(len(X), -1)), y)
    np.testing.assert_array_equal(flat.parameters()["conv0.W"], nchw.parameters()["conv0.W"])
    np.testing.assert_array_equal(nchw.predict_proba(numerics.arrange(X_test.reshape(len(X_test), -1))),
                                  nchw.predict_proba(X_test))


@pytest.mark.parametrize(
    "settings",
    [
        {"updater": "sgd", "momentum": 0.0, "learning_rate": 0.2},
        {"updater": "sgd", "momentum": 0.9, "learning_rate": 0.02},
        {"updater": "sgd", "momentum": 0.9, "nesterov": True, "learning_rate": 0.02},
        {"updater": "adagrad", "learning_rate": 0.05},
        {"updater": "adam", "learning_rate": 0.01},
        {"updater": "adam", "learning_rate": 0.01, "l2": 1e-3},
    ],
    ids=lambda settings: "-".join(f"{key}={value}" for key, value in settings.items()),
)
@pytest.mark.seed_bound
def test_every_updater_reduces_the_loss(digits8, settings):
    X, y, X_test, y_test = digits8
    ratios = []
    for seed in (0, 1, 2):
        net = small_net(epochs=1, random_state=seed, **settings).initialize()

        def held_out_loss() -> float:
            probabilities = net.predict_proba(X_test)
            return float(-np.mean(np.log(probabilities[np.arange(len(y_test)), y_test])))

        before = held_out_loss()  # ~2.8 at initialization
        for _ in range(2):
            net.partial_fit(X, y)
        ratios.append(held_out_loss() / before)
        assert net.loss_curve_[1] < net.loss_curve_[0]
    # Measured over seeds 0-4: held-out loss after two passes 0.32-0.47 of the initial one for plain SGD, 0.26-0.42
    # with momentum, 0.23-0.39 with Nesterov, 0.16-0.25 with Adagrad, 0.12-0.21 with Adam (a single seed's bound of
    # 0.4 failed for seeds 1 and 4); the mean of three seeds stays below 0.45.  An updater that does not move: 1.
    assert_at_most(np.mean(ratios), 0.6, "mean held-out loss after two passes over the initial one, seeds 0-2",
                   ratios)


def test_partial_fit_returns_self_and_keeps_training_the_same_weights(digits8):
    X, y, _, _ = digits8
    net = small_net()
    assert net.partial_fit(X[:200], y[:200]) is net
    weights = net.parameters()["dense0.W"]
    assert net.partial_fit(X[200:400], y[200:400]) is net
    assert len(net.loss_curve_) == 2
    assert not np.array_equal(net.parameters()["dense0.W"], weights)


def test_verbose_fit_prints_a_line_per_epoch_with_its_loss_and_nothing_without_it(digits8, capsys):
    X, y, _, _ = digits8
    small_net().fit(X[:200], y[:200])
    assert capsys.readouterr().out == ""
    net = small_net(verbose=True).fit(X[:200], y[:200])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2, lines
    for epoch, (line, loss) in enumerate(zip(lines, net.loss_curve_), start=1):
        assert re.fullmatch(rf"\[ConvNet\] Iteration {epoch}, loss = {loss:.6f}, time = \d+\.\d\ds", line), line


def test_the_seam_builds_replicas_exchanges_parameters_and_trains_partitions(digits8):
    X, y, X_test, _ = digits8
    net = small_net(updater="adam", learning_rate=0.003)
    replica = rbm.model_from_spec(json.loads(json.dumps(net.to_spec())))
    assert isinstance(replica, ConvNet) and replica.to_spec() == net.to_spec()
    net.initialize(64, classes=10)  # a flat width is accepted and mapped to (1, 8, 8)
    replica.initialize((1, 8, 8), classes=list(range(10)))
    params = net.parameters()
    assert list(params) == ["conv0.W", "conv0.b", "dense0.W", "dense0.b", "out.W", "out.b"]
    assert net.parameters("train").keys() == params.keys()
    params["conv0.W"][...] = 0.0  # host copies: changing them leaves the net alone
    assert np.abs(net.parameters()["conv0.W"]).sum() > 0
    replica.set_parameters(net.parameters())
    np.testing.assert_array_equal(replica.predict_proba(X_test), net.predict_proba(X_test))
    same = net.parameters()["conv0.W"]
    assert net.initialize((1, 8, 8), 10) is net  # idempotent: nothing re-drawn
    np.testing.assert_array_equal(net.parameters()["conv0.W"], same)
    first = net.train_partition(X, y, "train", np.random.default_rng(0))
    second = net.train_partition(X, y, "train", np.random.default_rng(1))
    assert first["samples"] == len(X) and first["seconds"] > 0 and 0 < second["loss"] < first["loss"]
    assert net.train_partition(X[:0], y[:0], "train", np.random.default_rng(0))["samples"] == 0
    with pytest.raises(ValueError, match="unknown phase 'rbm0'"):
        net.train_partition(X, y, "rbm0", np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"parameter 'conv0.W' has shape \(3, 3\), the model expects \(6, 1, 3, 3\)"):
        net.set_parameters({"conv0.W": np.zeros((3, 3))})
    with pytest.raises(ValueError, match=r"unknown parameters \['conv9.W'\]"):
        net.set_parameters({"conv9.W": np.zeros((3, 3))})


def test_spec_from_json_and_yaml_configs_builds_the_same_net(tmp_path):
    spec = {"layers": SMALL_LAYERS, "input_shape": [1, 8, 8], "n_classes": 10, "updater": "adam",
            "learning_rate": 0.001, "random_state": 3}
    (tmp_path / "net.json").write_text(json.dumps(spec))
    (tmp_path / "net.yaml").write_text(yaml.safe_dump(spec))
    from_json = ConvNet.from_config(tmp_path / "net.json")
    from_yaml = ConvNet.from_config(tmp_path / "net.yaml")
    assert from_json.to_spec() == from_yaml.to_spec()
    assert from_json.to_spec()["layers"] == SMALL_LAYERS and from_json.updater == "adam"
    np.testing.assert_array_equal(from_json.initialize().parameters()["out.W"], from_yaml.initialize().parameters()["out.W"])


def test_input_shape_mismatch_names_the_first_layer_and_both_shapes(digits8):
    net = small_net().initialize()
    with pytest.raises(ValueError, match=r"per-sample shape \(1, 9, 9\), but the first layer 'conv0' expects \(1, 8, 8\)"):
        net.predict(np.zeros((2, 1, 9, 9)))
    with pytest.raises(ValueError, match=r"X has 63 features, but ConvNet is expecting 64 features as input"):
        net.predict(np.zeros((2, 63)))
    with pytest.raises(ValueError, match=r"63 features per sample cannot be reshaped to the net's input shape \(1, 8, 8\)"):
        small_net().fit(np.zeros((2, 63)), [0, 1])
    with pytest.raises(ValueError, match=r"per-sample shape \(8, 8\) does not match the net's input shape \(1, 8, 8\); "
                                         r"add the channel axis: X\[:, None\]"):
        small_net().fit(np.zeros((2, 8, 8)), [0, 1])


def test_nan_inputs_and_labels_outside_the_classes_are_refused_before_training(digits8):
    X, y, _, _ = digits8
    net = small_net()
    bad = X[:10].copy()
    bad[3, 0, 2, 2] = np.nan
    with pytest.raises(ValueError, match=r"X contains NaN or Inf \(first at row 3\)"):
        net.fit(bad, y[:10])
    assert getattr(net, "layers_", None) is None  # refused before any parameter was allocated
    labels = y[:10].copy()
    labels[4] = 10
    with pytest.raises(ValueError, match=r"label 10 at row 4, outside the class range of this model \(\[0, 1, .*9\]\)"):
        net.partial_fit(X[:10], labels)  # without classes: 0 .. n_classes - 1
    with pytest.raises(ValueError, match=r"label 10 at row 4, outside the class range 0..9"):
        net.train_partition(X[:10], labels, "train", np.random.default_rng(0))


def test_invalid_net_specs_are_refused_when_the_net_is_built_with_clear_messages():
    with pytest.raises(ValueError, match=r"layer conv1: kernel \(5, 5\) is larger than its padded input \(4, 4\)"):
        lenet(input_shape=(1, 12, 12)).initialize()
    with pytest.raises(ValueError, match="layer pool0: unknown layer type 'pool'"):
        ConvNet(layers=[{"type": "pool", "size": 2}]).fit(np.zeros((2, 784)), [0, 1])
    with pytest.raises(ValueError, match=r"unknown ConvNet hyperparameters in spec: \['hidden'\]"):
        ConvNet.from_spec({"kind": "convnet", "hidden": [3]})
    with pytest.raises(ValueError, match="unknown updater 'rmsprop'"):
        ConvNet(updater="rmsprop").initialize()
    with pytest.raises(ValueError, match="n_classes must be an integer >= 2"):
        ConvNet(n_classes=1).initialize()
    with pytest.raises(ValueError, match="input_shape must be None or a tuple of positive ints"):
        ConvNet(input_shape=(1, 0, 28)).initialize()
    with pytest.raises(NotFittedError, match="not fitted yet: call fit, partial_fit or initialize first"):
        lenet().predict(np.zeros((1, 784)))


def test_learning_rate_scale_multiplies_one_plain_sgd_step_exactly(digits8):
    X, y, _, _ = digits8
    X, y = X[:32].astype(np.float64), y[:32]
    net = small_net(updater="sgd", momentum=0.0, batch_size=32, dtype="float64").initialize()
    net.set_learning_rate_scale(0.25)
    before = net.parameters()
    order = np.random.default_rng(3).permutation(32)  # the one minibatch, in the order train_partition draws it
    _, grads = net._loss_and_gradients(X[order], y[order])
    grads = {name: np.array(value) for name, value in grads.items()}
    net.train_partition(X, y, "train", np.random.default_rng(3))
    after, step = net.parameters(), net.learning_rate * 0.25
    for name, grad in grads.items():
        np.testing.assert_array_equal(after[name], before[name] - step * grad, err_msg=name)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflow on the way to NaN is the point
def test_a_diverging_net_raises_a_divergence_error(digits8):
    X, y, _, _ = digits8
    net = small_net(learning_rate=1e30, momentum=0.0, epochs=1)
    with pytest.raises(DivergenceError, match="lower the learning rate"):
        net.fit(X[:256] * 1e3, y[:256])
