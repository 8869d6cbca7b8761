"""The scikit-learn contract and the trainable-model seam, for RBM and DBN alike."""

import json

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline

from rbm import DBN, RBM, TrainableModel, load_model, model_from_spec
from rbm._validation import DivergenceError
from rbm.datasets import load_digits01


@pytest.fixture(scope="module")
def digits():
    split = load_digits01()
    return split.X_train[:300], split.y_train[:300], split.X_test[:100]


def make_rbm(**settings):
    return RBM(**{"n_components": 16, "n_iter": 2, "random_state": 0, **settings})


def make_dbn(**settings):
    return DBN(**{"hidden_layer_sizes": (16, 8), "pretrain_epochs": 1, "finetune_epochs": 2, "random_state": 0, **settings})


MODELS = {"rbm": make_rbm, "dbn": make_dbn}


def fit(model, X, y):
    return model.fit(X, y) if isinstance(model, DBN) else model.fit(X)


@pytest.mark.parametrize("kind", MODELS)
def test_fit_and_partial_fit_return_self(kind, digits):
    X, y, _ = digits
    model = MODELS[kind]()
    assert fit(model, X, y) is model
    if kind == "rbm":
        assert model.partial_fit(X[:10]) is model
        fresh = make_rbm()
        assert fresh.partial_fit(X[:10]) is fresh


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", MODELS)
def test_output_dtype_follows_the_input_dtype(kind, dtype, digits):
    X, y, X_test = digits
    model = fit(MODELS[kind](dtype=dtype), X.astype(dtype), y)
    assert model.transform(X_test.astype(dtype)).dtype == dtype
    if kind == "dbn":
        assert model.predict_proba(X_test.astype(dtype)).dtype == dtype
        assert model.parameters()["rbm0.W"].dtype == dtype
    else:
        assert model.components_.dtype == dtype
        assert model.score_samples(X_test.astype(dtype)).dtype == dtype


@pytest.mark.parametrize("kind", MODELS)
def test_same_seed_gives_bit_identical_models_and_another_seed_does_not(kind, digits):
    X, y, _ = digits
    first = fit(MODELS[kind](), X, y).parameters()
    second = fit(MODELS[kind](), X, y).parameters()
    other = fit(MODELS[kind](random_state=1), X, y).parameters()
    assert first.keys() == second.keys()
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
    assert any(not np.array_equal(first[name], other[name]) for name in first)


@pytest.mark.parametrize("kind", MODELS)
def test_clone_gives_an_unfitted_copy_with_the_same_hyperparameters(kind, digits):
    X, y, _ = digits
    model = fit(MODELS[kind](), X, y)
    copy = clone(model)
    assert copy.get_params() == model.get_params()
    assert not copy.__sklearn_is_fitted__()
    fit(copy, X, y)
    for name, value in model.parameters().items():
        np.testing.assert_array_equal(copy.parameters()[name], value)


def test_rbm_works_inside_a_pipeline(digits):
    X, y, _ = digits
    pipeline = Pipeline([("rbm", make_rbm(n_components=32, n_iter=5)), ("lr", LogisticRegression(max_iter=500))])
    pipeline.fit(X, y)
    assert pipeline.score(X, y) > 0.8
    assert pipeline.named_steps["rbm"].get_feature_names_out().shape == (32,)


def test_dbn_works_inside_a_pipeline(digits):
    from sklearn.preprocessing import MinMaxScaler

    X, y, _ = digits
    pipeline = Pipeline([("scale", MinMaxScaler()), ("dbn", make_dbn(hidden_layer_sizes=(64,), pretrain_epochs=5, finetune_epochs=10))]).fit(X, y)
    assert pipeline.score(X, y) > 0.8


@pytest.mark.parametrize("kind", MODELS)
def test_save_and_load_round_trip_is_exact(kind, digits, tmp_path):
    X, y, X_test = digits
    model = fit(MODELS[kind](), X, y)
    path = tmp_path / "model.npz"
    model.save(path)
    with np.load(path, allow_pickle=False) as stored:  # no pickled objects inside
        assert "__spec__" in stored.files
    loaded = load_model(path)
    assert type(loaded) is type(model)
    assert loaded.to_spec() == model.to_spec()
    for name, value in model.parameters().items():
        np.testing.assert_array_equal(loaded.parameters()[name], value, err_msg=name)
    np.testing.assert_array_equal(loaded.transform(X_test), model.transform(X_test))
    if kind == "dbn":
        np.testing.assert_array_equal(loaded.predict(X_test), model.predict(X_test))
        np.testing.assert_array_equal(loaded.predict_proba(X_test), model.predict_proba(X_test))


@pytest.mark.parametrize("kind", MODELS)
def test_spec_is_json_and_builds_an_untrained_replica_of_the_same_shape(kind, digits):
    X, y, _ = digits
    model = fit(MODELS[kind](), X, y)
    spec = json.loads(json.dumps(model.to_spec()))
    assert spec["kind"] == kind
    replica = model_from_spec(spec).initialize(X.shape[1], classes=np.unique(y))
    assert isinstance(replica, TrainableModel)
    assert replica.initialize(X.shape[1], classes=np.unique(y)) is replica  # idempotent
    shapes = {name: value.shape for name, value in model.parameters().items()}
    assert {name: value.shape for name, value in replica.parameters().items()} == shapes
    replica.set_parameters(model.parameters())
    np.testing.assert_array_equal(replica.transform(X), model.transform(X))


def test_rbm_seam_has_one_phase_and_plain_parameter_names(digits):
    X, _, _ = digits
    model = make_rbm().initialize(64)
    assert model.phases() == ["rbm"]
    assert sorted(model.parameters("rbm")) == ["W", "hbias", "vbias"]
    assert model.parameters()["W"].shape == (64, 16)
    np.testing.assert_array_equal(model.parameters()["W"].T, model.components_)
    parameters = model.parameters()
    parameters["W"][:] = 0  # host copies: changing them leaves the model alone
    assert np.abs(model.components_).sum() > 0
    with pytest.raises(ValueError, match="unknown RBM parameter names"):
        model.set_parameters({"weights": np.zeros((64, 16))})
    with pytest.raises(ValueError, match="unknown phase 'finetune'"):
        model.parameters("finetune")


BAD_INPUTS = [
    (lambda X: X[:, :10], "features per sample, expected 64"),
    (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 70, np.nan, X), r"NaN or Inf \(first at row 1\)"),
    (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 0, np.inf, X), r"NaN or Inf \(first at row 0\)"),
    (lambda X: X * 2, r"must lie in \[0, 1\] for Bernoulli visible units"),
    (lambda X: X[:0], "empty"),
    (lambda X: X[0], "must be 2-D"),
]


@pytest.mark.parametrize("corrupt, message", BAD_INPUTS)
@pytest.mark.parametrize("kind", MODELS)
def test_bad_input_is_rejected_with_a_message_naming_the_problem(kind, corrupt, message, digits):
    X, y, _ = digits
    model = fit(MODELS[kind](), X, y)
    with pytest.raises(ValueError, match=message):
        model.transform(corrupt(X))
    with pytest.raises(ValueError, match=message):
        model.train_partition(corrupt(X), y, model.phases()[0], np.random.default_rng(0))


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(n_components=0), "n_components must be an integer >= 1"),
        (dict(batch_size=0), "batch_size must be an integer >= 1"),
        (dict(learning_rate=0.0), r"learning_rate must be a number in \(0"),
        (dict(learning_rate=float("nan")), "learning_rate must be a number"),
        (dict(visible="poisson"), "visible must be one of"),
        (dict(cd_k=0), "cd_k must be an integer >= 1"),
        (dict(n_iter=-1), "n_iter must be an integer >= 0"),
        (dict(momentum=1.0), r"momentum must be a number in \[0"),
        (dict(sparsity_target=1.5), "sparsity_target must be a number"),
        (dict(weight_decay=-1.0), "weight_decay must be a number"),
        (dict(dtype=np.int32), "dtype must be float32 or float64"),
        (dict(device="tpu"), "device must be one of"),
    ],
)
def test_impossible_rbm_hyperparameters_are_rejected_at_fit(settings, message, digits):
    X, _, _ = digits
    with pytest.raises(ValueError, match=message):
        make_rbm(**settings).fit(X)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(hidden_layer_sizes=()), "hidden_layer_sizes must be a non-empty sequence"),
        (dict(hidden_layer_sizes=(10, 0)), "hidden_layer_sizes must be a non-empty sequence"),
        (dict(batch_size=0), "batch_size must be an integer >= 1"),
        (dict(finetune_learning_rate=-1.0), "finetune_learning_rate must be a number"),
        (dict(validation_fraction=1.0), "validation_fraction must be a number"),
        (dict(finetune_momentum=1.0), r"finetune_momentum must be a number in \[0.0, 1.0\)"),
        (dict(visible="poisson"), "visible must be one of"),
        (dict(layer_params=[{}]), "layer_params must be a list with one dict"),
    ],
)
def test_impossible_dbn_hyperparameters_are_rejected_at_fit(settings, message, digits):
    X, y, _ = digits
    with pytest.raises(ValueError, match=message):
        make_dbn(**settings).fit(X, y)


def test_gaussian_visible_units_accept_values_outside_the_unit_interval(digits):
    X, _, _ = digits
    model = make_rbm(visible="gaussian", learning_rate=0.001).fit(X * 4 - 2)
    assert model.transform(X * 4 - 2).shape == (len(X), 16)


def test_divergence_raises_a_clear_error_instead_of_returning_garbage(digits):
    X, _, _ = digits
    with np.errstate(all="ignore"), pytest.raises(DivergenceError, match="training diverged in RBM pass 1"):
        make_rbm(visible="gaussian", learning_rate=1e4, momentum=0.9).fit(X * 100)


def test_unfitted_models_say_so():
    with pytest.raises(ValueError, match="not fitted yet"):
        make_rbm().transform(np.zeros((2, 64)))
    with pytest.raises(ValueError, match="not fitted yet"):
        make_dbn().predict(np.zeros((2, 64)))
    assert not hasattr(make_rbm(), "components_")


@pytest.mark.parametrize("kind", ["rbm", "dbn", "convnet"])
def test_set_parameters_with_one_bad_array_changes_nothing(kind):
    from rbm import ConvNet

    models = {
        "rbm": lambda: RBM(n_components=4, random_state=0).initialize(6),
        "dbn": lambda: DBN(hidden_layer_sizes=(4,), random_state=0).initialize(6, 3),
        "convnet": lambda: ConvNet(layers=[{"type": "conv", "filters": 2, "kernel": 3}], input_shape=(1, 5, 5),
                                   n_classes=3, random_state=0).initialize(),
    }
    model = models[kind]()
    before = model.parameters()
    names = sorted(before)
    update = {names[0]: before[names[0]] + 1, names[1]: np.full(before[names[1]].shape, np.nan)}
    with pytest.raises(ValueError, match=f"parameter '{names[1]}' holds NaN or Inf"):
        model.set_parameters(update)
    after = model.parameters()
    assert all(np.array_equal(after[name], before[name]) for name in names)
