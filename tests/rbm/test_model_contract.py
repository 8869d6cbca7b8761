"""The scikit-learn contract and the trainable-model seam, for RBM, DBN and ConvNet alike."""

import json
import pathlib
import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline

from rbm import DBN, RBM, ConvNet, DivergenceError, TrainableModel, load_model, model_from_spec
from rbm.datasets import load_digits01


@pytest.fixture(scope="module")
def digits():
    split = load_digits01()
    return split.X_train[:300], split.y_train[:300], split.X_test[:100]


def make_rbm(**settings):
    return RBM(**{"n_components": 16, "n_iter": 2, "random_state": 0, **settings})


def make_dbn(**settings):
    return DBN(**{"hidden_layer_sizes": (16, 8), "pretrain_epochs": 1, "finetune_epochs": 2, "random_state": 0, **settings})


def make_convnet(**settings):
    layers = [{"type": "conv", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
              {"type": "maxpool", "size": 2}, {"type": "dense", "units": 16, "activation": "relu"}]
    return ConvNet(**{"layers": layers, "input_shape": (1, 8, 8), "epochs": 2, "learning_rate": 0.05,
                      "random_state": 0, **settings})


MODELS = {"rbm": make_rbm, "dbn": make_dbn, "convnet": make_convnet}


def fit(model, X, y):
    return model.fit(X) if isinstance(model, RBM) else model.fit(X, y)


def outputs(model, X):
    """What the model computes for X: features (RBM, DBN) or class probabilities (ConvNet)."""
    return model.predict_proba(X) if isinstance(model, ConvNet) else model.transform(X)


@pytest.mark.parametrize("kind", MODELS)
def test_fit_and_partial_fit_return_self(kind, digits):
    X, y, _ = digits
    model = MODELS[kind]()
    assert fit(model, X, y) is model
    if kind == "rbm":
        assert model.partial_fit(X[:10]) is model
        fresh = make_rbm()
        assert fresh.partial_fit(X[:10]) is fresh
    if kind == "convnet":
        assert model.partial_fit(X[:10], y[:10]) is model
        fresh = make_convnet()
        assert fresh.partial_fit(X[:10], y[:10], classes=np.arange(10)) is fresh


@pytest.mark.parametrize("kind", ["dbn", "convnet"])
def test_float64_probabilities_sum_to_one_in_float64_as_scikit_learns_log_loss_asks(kind, digits):
    # Computed in float32 and cast, rows summed to 1 within 2e-7: scikit-learn's log_loss warned "The y_prob
    # values do not sum to one" at every fold of a grid search scored by it.
    import warnings

    from sklearn.metrics import log_loss

    X, y, X_test = digits
    model = fit(MODELS[kind](), X, y)
    probabilities = model.predict_proba(X_test.astype(np.float64))
    assert probabilities.dtype == np.float64
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        log_loss(y[: len(X_test)], probabilities, labels=model.classes_)


@pytest.mark.parametrize("kind", ["rbm", "dbn"])
def test_set_output_pandas_gives_frames_from_transform_as_from_fit_transform(kind, digits):
    # RBM's transform (inherited) was not wrapped by set_output: fit_transform gave a DataFrame, transform an
    # array, and a pandas pipeline's next step warned of missing feature names. DBN had no set_output at all.
    import pandas as pd

    X, y, X_test = digits
    columns = [f"p{k}" for k in range(X.shape[1])]
    model = MODELS[kind]().set_output(transform="pandas")
    fitted = model.fit_transform(pd.DataFrame(X, columns=columns), y)
    transformed = model.transform(pd.DataFrame(X_test, columns=columns))
    assert isinstance(fitted, pd.DataFrame) and isinstance(transformed, pd.DataFrame)
    width = 8 if kind == "dbn" else 16  # the top hidden layer's units
    assert list(transformed.columns) == list(model.get_feature_names_out()) == [f"{kind}{k}" for k in range(width)]


@pytest.mark.parametrize("kind", ["rbm", "dbn"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_model_dtype_sets_the_precision_of_the_parameters(kind, dtype, digits):
    X, y, _ = digits
    model = fit(MODELS[kind](dtype=dtype), X, y)
    assert model.parameters()["rbm0.W" if kind == "dbn" else "W"].dtype == dtype


@pytest.mark.parametrize("kind", ["rbm", "dbn"])
@pytest.mark.parametrize("input_dtype, output_dtype", [(np.float32, np.float32), (np.float64, np.float64),
                                                       (np.int64, np.float64), (bool, np.float64)])
def test_outputs_follow_scikit_learns_dtype_rule_whatever_the_model_dtype(kind, input_dtype, output_dtype, digits):
    X, y, X_test = digits
    X_test = (X_test > 0.5).astype(input_dtype) if input_dtype in (np.int64, bool) else X_test.astype(input_dtype)
    model = fit(MODELS[kind](), X, y)  # float32 parameters
    assert model.transform(X_test).dtype == output_dtype
    if kind == "dbn":
        assert model.predict_proba(X_test).dtype == output_dtype
    else:
        assert model.score_samples(X_test).dtype == output_dtype


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
    pipeline = Pipeline([("rbm", make_rbm(n_components=32, n_iter=10)), ("lr", LogisticRegression(max_iter=500))])
    pipeline.fit(X, y)
    assert pipeline.score(X, y) > 0.8
    assert pipeline.named_steps["rbm"].get_feature_names_out().tolist() == [f"rbm{k}" for k in range(32)]


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
    np.testing.assert_array_equal(outputs(loaded, X_test), outputs(model, X_test))
    if kind != "rbm":
        np.testing.assert_array_equal(loaded.classes_, model.classes_)
        np.testing.assert_array_equal(loaded.predict(X_test), model.predict(X_test))
        np.testing.assert_array_equal(loaded.predict_proba(X_test), model.predict_proba(X_test))


class _Touches:
    """Unpickling this creates the file ``marker``: proof that a loader unpickled it."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def test_loading_a_file_that_is_not_a_model_names_it_and_unpickles_nothing(digits, tmp_path):
    X, y, _ = digits
    model_file = tmp_path / "model.npz"
    fit(make_dbn(), X, y).save(model_file)
    with np.load(model_file) as stored:
        arrays = {name: stored[name] for name in stored.files if name != "__spec__"}
    marker = tmp_path / "unpickled"
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(_Touches(marker)))
    (tmp_path / "notes.txt").write_text("hello")
    np.save(tmp_path / "weights.npy", np.zeros(3))
    np.savez(tmp_path / "other.npz", W=np.zeros(3))
    np.savez(tmp_path / "broken.npz", __spec__=np.frombuffer(b"{not json", np.uint8), **arrays)
    np.savez(tmp_path / "list.npz", __spec__=np.frombuffer(b"[1, 2]", np.uint8), **arrays)
    expected = {"model.pkl": "not an .npz archive", "notes.txt": "not an .npz archive",
                "weights.npy": "not an .npz archive", "other.npz": "no __spec__ entry",
                "broken.npz": "its __spec__ entry is not JSON", "list.npz": "its __spec__ entry is not a JSON object"}
    for name, reason in expected.items():
        with pytest.raises(ValueError, match=f"{name}' is not a sparkdbn model file \\({reason}"):
            load_model(tmp_path / name)
    assert not marker.exists()


@pytest.mark.parametrize("kind", MODELS)
def test_a_model_file_lacking_any_array_is_refused_naming_the_file_not_filled_in(kind, digits, tmp_path):
    X, y, _ = digits
    fit(MODELS[kind](), X, y).save(tmp_path / "model.npz")
    with np.load(tmp_path / "model.npz") as stored:
        arrays = {name: stored[name] for name in stored.files}
    for left_out in sorted(set(arrays) - {"__spec__"}):
        np.savez(tmp_path / "cut.npz", **{name: value for name, value in arrays.items() if name != left_out})
        with pytest.raises(ValueError, match=rf"model file '.*cut.npz' lacks .*'{left_out}'"):
            load_model(tmp_path / "cut.npz")


def test_a_model_file_cut_short_or_damaged_is_a_value_error_naming_the_file(digits, tmp_path):
    X, y, _ = digits
    fit(MODELS["dbn"](), X, y).save(tmp_path / "model.npz")
    whole = (tmp_path / "model.npz").read_bytes()
    damaged = bytearray(whole)
    damaged[len(whole) // 3: len(whole) // 3 + 64] = bytes(64)  # inside the archive's members
    cases = {"half.npz": whole[: len(whole) // 2], "tail-gone.npz": whole[:-10], "damaged.npz": bytes(damaged)}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match=f"model file '.*{name}'"):
            load_model(tmp_path / name)


@pytest.mark.parametrize("kind", MODELS)
def test_each_model_class_loads_its_own_kind_exactly_and_refuses_another_kinds_file(kind, digits, tmp_path):
    X, y, X_test = digits
    model = fit(MODELS[kind](), X, y)
    model.save(tmp_path / "model.npz")
    loaded = type(model).load(tmp_path / "model.npz")
    assert type(loaded) is type(model) and loaded.to_spec() == model.to_spec()
    np.testing.assert_array_equal(outputs(loaded, X_test), outputs(model, X_test))
    other = next(name for name in MODELS if name != kind)
    other_class = type(MODELS[other]())
    with pytest.raises(ValueError, match=f"holds a '{kind}' model; {other_class.__name__}.load reads '{other}' models"):
        other_class.load(tmp_path / "model.npz")


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
    np.testing.assert_array_equal(outputs(replica, X), outputs(model, X))


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
    (lambda X: X[:, :10], "X has 10 features, but (RBM|DBN|ConvNet) is expecting 64 features as input"),
    (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 70, np.nan, X), r"NaN or Inf \(first at row 1\)"),
    (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 0, np.inf, X), r"NaN or Inf \(first at row 0\)"),
    (lambda X: X[0], "Expected 2D array, got 1D array instead"),
    (lambda X: X.astype(complex), "Complex data not supported"),
]


@pytest.mark.parametrize("corrupt, message", BAD_INPUTS)
@pytest.mark.parametrize("kind", MODELS)
def test_bad_input_is_rejected_with_a_message_naming_the_problem(kind, corrupt, message, digits):
    X, y, _ = digits
    model = fit(MODELS[kind](), X, y)
    with pytest.raises(ValueError, match=message):
        outputs(model, corrupt(X))
    with pytest.raises(ValueError, match=message):
        model.train_partition(corrupt(X), y, model.phases()[0], np.random.default_rng(0))


@pytest.mark.parametrize("kind", MODELS)
def test_empty_input_is_refused_by_fit_and_predict_and_skipped_as_a_partition(kind, digits):
    X, y, _ = digits
    model = fit(MODELS[kind](), X, y)
    before = model.parameters()
    with pytest.raises(ValueError, match=r"Found array with 0 sample\(s\) \(shape=\(0, 64\)\)"):
        outputs(model, X[:0])
    with pytest.raises(ValueError, match=r"Found array with 0 sample\(s\)"):
        fit(MODELS[kind](), X[:0], y[:0])
    assert model.train_partition(X[:0], y[:0], model.phases()[-1], np.random.default_rng(0))["samples"] == 0
    assert all(np.array_equal(value, model.parameters()[name]) for name, value in before.items())


@pytest.mark.parametrize("kind", ["rbm", "dbn"])
def test_bernoulli_units_refuse_training_data_outside_the_unit_interval_but_predict_on_any(kind, digits):
    X, y, _ = digits
    model = fit(MODELS[kind](), X, y)
    X_scaled = X * 2
    with pytest.raises(ValueError, match=r"X must lie in \[0, 1\] for Bernoulli visible units \(row 0 has values in "
                                         r"\[0, 1.875\]\); scale it, or use visible='gaussian'"):
        model.train_partition(X_scaled, y, model.phases()[0], np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"Negative values in data passed to (RBM|DBN) \(X row 3 has values in "):
        fit(MODELS[kind](), np.where(np.arange(X.size).reshape(X.shape) == 200, -0.5, X), y)
    assert np.isfinite(outputs(model, X_scaled)).all()  # p(h | v) is defined for any real v


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
        make_rbm(visible="gaussian", learning_rate=1e4, persistent=False, momentum=0.9).fit(X * 100)


def test_unfitted_models_say_so():
    with pytest.raises(ValueError, match="not fitted yet"):
        make_rbm().transform(np.zeros((2, 64)))
    with pytest.raises(ValueError, match="not fitted yet"):
        make_dbn().predict(np.zeros((2, 64)))
    assert not hasattr(make_rbm(), "components_")


@pytest.mark.parametrize("kind", ["rbm", "dbn"])
def test_models_of_flat_vectors_refuse_an_image_shape_or_a_width_that_is_not_a_positive_integer(kind):
    model = MODELS[kind]()
    with pytest.raises(ValueError, match=r"takes flat feature vectors, not samples of shape \(1, 8, 8\): reshape "
                                         r"the data to \(n_samples, 64\)"):
        model.initialize((1, 8, 8), 10)
    for width in (0, -3, 6.5, "64", True):
        with pytest.raises(ValueError, match=f"needs a positive integer number of features, got {width!r}"):
            model.initialize(width, 10)
    assert model.initialize(np.int64(64), 10).n_features_in_ == model.initialize((64,), 10).n_features_in_ == 64


@pytest.mark.parametrize("kind", ["rbm", "dbn", "convnet"])
def test_set_parameters_with_one_bad_array_changes_nothing(kind):
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


@pytest.mark.parametrize("kind", MODELS)
def test_pickled_models_predict_the_same_and_keep_training_the_same(kind, digits):
    # What joblib and GridSearchCV(n_jobs=...) do with estimators (this project never unpickles).
    X, y, X_test = digits
    model = fit(MODELS[kind](), X, y)
    copy = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(outputs(copy, X_test), outputs(model, X_test))
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    model.train_partition(X, y, model.phases()[-1], rng_a)
    copy.train_partition(X, y, copy.phases()[-1], rng_b)
    for name, value in model.parameters().items():
        np.testing.assert_array_equal(copy.parameters()[name], value, err_msg=name)


@pytest.mark.parametrize("kind", MODELS)
def test_learning_rate_scale_s_trains_exactly_as_a_learning_rate_times_s(kind, digits):
    X, y, _ = digits
    rate = {"rbm": "learning_rate", "dbn": "finetune_learning_rate", "convnet": "learning_rate"}[kind]
    extra = {"dbn": {"pretrain_learning_rate": 0.1 * 2.5}}.get(kind, {})
    scaled = MODELS[kind]().initialize(64, classes=10)
    scaled.set_learning_rate_scale(2.5)
    reference = MODELS[kind](**{rate: getattr(scaled, rate) * 2.5, **extra}).initialize(64, classes=10)
    for phase in scaled.phases():
        for epoch in range(2):
            scaled.train_partition(X, y, phase, np.random.default_rng(epoch))
            reference.train_partition(X, y, phase, np.random.default_rng(epoch))
    for name, value in reference.parameters().items():
        np.testing.assert_array_equal(scaled.parameters()[name], value, err_msg=name)


# kind: (settings with a schedule, per epoch: the settings of a reference whose schedule is that epoch's, fixed)
SCHEDULES = {
    "rbm": ({"momentum": 0.5, "final_momentum": 0.9, "momentum_switch_iter": 1},
            lambda epoch: {"momentum": 0.5 if epoch < 1 else 0.9, "final_momentum": 0.5 if epoch < 1 else 0.9}),
    "dbn": ({"finetune_lr_decay": 0.5},  # and its RBMs' momentum: 0.5, then 0.9 after 5 passes
            lambda epoch: {"finetune_lr_decay": 0.0, "finetune_learning_rate": 0.1 / (1 + 0.5 * epoch),
                           "layer_params": [{"final_momentum": 0.5}] * 2}),
    "convnet": ({"lr_decay": 0.5}, lambda epoch: {"lr_decay": 0.0, "learning_rate": 0.05 / (1 + 0.5 * epoch)}),
}


@pytest.mark.parametrize("kind", MODELS)
def test_schedules_count_the_epoch_the_trainer_sets_not_the_partitions_trained(kind, digits):
    # The trainer calls train_partition once per partition: 4 per epoch here.  With the epoch set, the
    # decay and the momentum switch follow epochs, as in fit; without it they would run 4x as fast.
    X, y, _ = digits
    scheduled, per_epoch = SCHEDULES[kind]
    clocked, unclocked = (MODELS[kind](**scheduled).initialize(64, classes=10) for _ in range(2))
    reference = MODELS[kind](**per_epoch(0)).initialize(64, classes=10)
    parts = np.array_split(np.arange(len(X)), 4)
    for phase in clocked.phases():
        for epoch in range(3):
            clocked.set_schedule_epoch(epoch)
            reference.set_params(**{key: value for key, value in per_epoch(epoch).items() if key != "layer_params"})
            for index, rows in enumerate(parts):
                for model in (clocked, unclocked, reference):
                    model.train_partition(X[rows], y[rows], phase, np.random.default_rng([epoch, index]))
    for name, value in reference.parameters().items():
        np.testing.assert_array_equal(clocked.parameters()[name], value, err_msg=name)
    assert any(not np.array_equal(unclocked.parameters()[name], value)
               for name, value in reference.parameters().items())
    for bad in (-1, float("nan"), float("inf"), True, "2"):
        with pytest.raises(ValueError, match="set_schedule_epoch takes a finite number of epochs"):
            clocked.set_schedule_epoch(bad)
    clocked.set_schedule_epoch(None)  # back to the model's own passes
    assert clocked.get_params() == MODELS[kind](**scheduled).get_params()


@pytest.mark.parametrize("kind", MODELS)
def test_learning_rate_scale_is_not_a_hyperparameter(kind, digits, tmp_path):
    X, y, _ = digits
    model = fit(MODELS[kind](), X, y)
    model.set_learning_rate_scale(4.0)
    assert model.get_params() == MODELS[kind]().get_params()
    assert model.to_spec() == MODELS[kind]().to_spec()
    model.save(tmp_path / "model.npz")
    assert getattr(load_model(tmp_path / "model.npz"), "_learning_rate_scale", 1.0) == 1.0
    assert getattr(clone(model), "_learning_rate_scale", 1.0) == 1.0
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="learning rate scale must be a number in"):
            model.set_learning_rate_scale(bad)


@pytest.mark.parametrize("kind", MODELS)
def test_the_minibatch_hook_runs_after_every_update_and_what_it_sets_is_trained_on(kind, digits):
    X, y, _ = digits
    batch_size = MODELS[kind]().batch_size
    for phase in MODELS[kind]().initialize(64, classes=10).phases():
        plain = MODELS[kind]().initialize(64, classes=10)
        hooked = MODELS[kind]().initialize(64, classes=10)
        calls = []

        def swap_in_the_plain_models_weights() -> None:  # what a merge does between two minibatches
            calls.append(1)
            if len(calls) == 3:
                hooked.set_parameters(plain.parameters(phase))

        hooked.set_minibatch_hook(swap_in_the_plain_models_weights)
        for model in (plain, hooked):
            model.train_partition(X, y, phase, np.random.default_rng(0))
        assert len(calls) == -(-len(X) // batch_size), phase  # once per minibatch
        changed = any(not np.array_equal(hooked.parameters(phase)[name], value)
                      for name, value in plain.parameters(phase).items())
        assert changed, f"{phase}: the weights set by the hook were not trained on"

        hooked.set_minibatch_hook(None)
        hooked.train_partition(X, y, phase, np.random.default_rng(1))
        assert len(calls) == -(-len(X) // batch_size)  # no longer called
        assert "_minibatch_hook" not in vars(hooked) and pickle.loads(pickle.dumps(hooked)) is not None


@pytest.mark.parametrize("kind", ["dbn", "convnet"])
@pytest.mark.parametrize("labels", [np.array(["cat", "dog", "eel"]), np.array([-1.0, 2.0, 7.0]), np.array([3, 5, 9])],
                         ids=["strings", "integral-floats", "ints"])
def test_classifiers_take_any_sortable_labels_and_train_partition_takes_class_indices(kind, labels, digits, tmp_path):
    X, y, X_test = digits
    keep = y < 3
    X, indices = X[keep], y[keep]
    settings = {"hidden_layer_sizes": (32,), "finetune_epochs": 20} if kind == "dbn" else {"epochs": 20}
    model = fit(MODELS[kind](**settings), X, labels[indices])
    np.testing.assert_array_equal(model.classes_, labels)
    assert set(model.predict(X_test)) <= set(labels)
    assert model.score(X, labels[indices]) > 0.9  # it learns on the labels (chance: 0.33)
    # The distributed driver fixes the classes, then trains on indices 0 .. len(classes_) - 1.
    replica = model_from_spec(model.to_spec()).initialize(64, classes=labels[::-1])  # the order does not matter
    replica.train_partition(X, indices, replica.phases()[-1], np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"label 3 at row \d+, outside the class range 0..2"):
        replica.train_partition(X[:5], np.full(5, 3), replica.phases()[-1], np.random.default_rng(0))
    model.save(tmp_path / "model.npz")
    np.testing.assert_array_equal(load_model(tmp_path / "model.npz").predict(X_test), model.predict(X_test))
