"""The RBM learns: against scikit-learn's BernoulliRBM on digits, and each training option does its job."""

import numpy as np
import pytest
from scipy.ndimage import convolve
from sklearn import datasets, linear_model
from sklearn.model_selection import train_test_split
from sklearn.neural_network import BernoulliRBM
from sklearn.preprocessing import minmax_scale
from threadpoolctl import threadpool_limits

from rbm import RBM
from rbm.datasets import load_digits01


def nudged_digits():
    """scikit-learn's RBM example data: digits plus copies moved 1 px in 4 directions, in [0, 1]."""
    X, y = datasets.load_digits(return_X_y=True)
    kernels = [
        [[0, 1, 0], [0, 0, 0], [0, 0, 0]],
        [[0, 0, 0], [1, 0, 0], [0, 0, 0]],
        [[0, 0, 0], [0, 0, 1], [0, 0, 0]],
        [[0, 0, 0], [0, 0, 0], [0, 1, 0]],
    ]

    def shift(x, w):
        return convolve(x.reshape((8, 8)), mode="constant", weights=w).ravel()

    X = np.concatenate([X] + [np.apply_along_axis(shift, 1, X, kernel) for kernel in kernels])
    y = np.concatenate([y] * 5)
    X = minmax_scale(np.asarray(X, np.float32), feature_range=(0, 1)).astype(np.float32)
    return train_test_split(X, y, test_size=0.2, random_state=0)


def accuracy_of_features(model, X_train, X_test, y_train, y_test):
    features_train = model.fit(X_train).transform(X_train)
    classifier = linear_model.LogisticRegression(solver="newton-cg", C=6000, tol=1e-4, max_iter=2000)
    classifier.fit(features_train, y_train)
    return classifier.score(model.transform(X_test), y_test)


def test_rbm_features_are_as_good_as_scikit_learn_bernoulli_rbm_on_nudged_digits():
    X_train, X_test, y_train, y_test = nudged_digits()
    settings = dict(n_components=100, learning_rate=0.06, n_iter=10, batch_size=10)
    theirs, ours = [], []
    # One BLAS thread: the comparison then does not depend on the machine's core count.
    with threadpool_limits(1):
        for seed in (0, 1, 2):
            theirs.append(accuracy_of_features(BernoulliRBM(random_state=seed, **settings), X_train, X_test, y_train, y_test))
            # The same stochastic-maximum-likelihood algorithm as BernoulliRBM (persistent
            # chains, no momentum), plus a little weight decay.
            model = RBM(random_state=seed, persistent=True, momentum=0.0, final_momentum=0.0,
                        weight_decay=1e-4, **settings)
            ours.append(accuracy_of_features(model, X_train, X_test, y_train, y_test))
    # Measured here (seeds 0, 1, 2): scikit-learn 0.943, 0.944, 0.949; ours 0.938, 0.944, 0.949.
    assert np.mean(ours) >= np.mean(theirs) - 0.005
    assert min(ours) >= 0.92


def test_reconstruction_error_falls_as_training_proceeds():
    split = load_digits01()
    model = RBM(n_components=64, random_state=0)
    errors = [model.train_partition(split.X_train, None, "rbm", np.random.default_rng(k))["loss"] for k in range(8)]
    assert errors[-1] < 0.6 * errors[0]
    assert model.reconstruction_error(split.X_test) < 0.03


def test_gaussian_visible_units_learn_standardized_real_valued_data():
    split = load_digits01()
    mean, std = split.X_train.mean(axis=0), split.X_train.std(axis=0) + 0.1
    X_train, X_test = (split.X_train - mean) / std, (split.X_test - mean) / std
    model = RBM(n_components=64, visible="gaussian", learning_rate=0.005, n_iter=10, random_state=0).fit(X_train)
    untrained = RBM(n_components=64, visible="gaussian", random_state=0).initialize(64)
    assert model.reconstruction_error(X_test) < 0.5 * untrained.reconstruction_error(X_test)
    assert np.isfinite(model.score_samples(X_test)).all()


def test_sparsity_target_lowers_the_mean_hidden_activation():
    split = load_digits01()
    common = dict(n_components=64, n_iter=5, random_state=0)
    dense = RBM(**common).fit(split.X_train).transform(split.X_test).mean()
    sparse = RBM(sparsity_target=0.05, sparsity_cost=0.5, **common).fit(split.X_train).transform(split.X_test).mean()
    assert sparse < 0.12 < dense


def test_weight_decay_shrinks_the_weights():
    split = load_digits01()
    common = dict(n_components=32, n_iter=5, random_state=0)
    plain = np.linalg.norm(RBM(**common).fit(split.X_train).components_)
    decayed = np.linalg.norm(RBM(weight_decay=0.01, **common).fit(split.X_train).components_)
    assert decayed < 0.8 * plain


@pytest.mark.parametrize("settings", [dict(cd_k=3), dict(persistent=True, momentum=0.0, final_momentum=0.0)])
def test_cd_k_and_persistent_cd_learn_digits(settings):
    split = load_digits01()
    model = RBM(n_components=64, n_iter=5, random_state=0, **settings).fit(split.X_train)
    untrained = RBM(n_components=64, random_state=0).initialize(64)
    assert model.reconstruction_error(split.X_test) < 0.5 * untrained.reconstruction_error(split.X_test)


def test_free_energy_and_transform_agree_with_scikit_learn_for_the_same_weights():
    split = load_digits01()
    ours = RBM(n_components=16, n_iter=2, random_state=0, dtype=np.float64).fit(split.X_train)
    theirs = BernoulliRBM(n_components=16).fit(split.X_train[:20].astype(np.float64))
    theirs.components_ = ours.components_
    theirs.intercept_hidden_ = ours.intercept_hidden_
    theirs.intercept_visible_ = ours.intercept_visible_
    X = split.X_test.astype(np.float64)
    np.testing.assert_allclose(ours.transform(X), theirs.transform(X), rtol=1e-10)
    np.testing.assert_allclose(ours.free_energy(X), theirs._free_energy(X), rtol=1e-10)
    # Pseudo-likelihood flips one random unit per row; averaged, both estimate the same thing.
    assert np.mean(ours.score_samples(X)) == pytest.approx(np.mean(theirs.score_samples(X)), rel=0.15)


def test_momentum_schedule_counts_passes_across_fit_partial_fit_and_train_partition():
    split = load_digits01()
    model = RBM(n_components=8, momentum=0.5, final_momentum=0.9, momentum_switch_iter=2, random_state=0)
    rng = np.random.default_rng(0)
    seen = []
    for start in range(0, 200, 50):  # four partitions
        seen.append(model._current_momentum())
        result = model.train_partition(split.X_train[start : start + 50], None, "rbm", rng)
        assert result["samples"] == 50 and result["seconds"] > 0 and np.isfinite(result["loss"])
    assert seen == [0.5, 0.5, 0.9, 0.9]
    assert model._updates == 4 * 5
    model.fit(split.X_train[:50])  # fit starts over
    assert model._passes == model.n_iter
