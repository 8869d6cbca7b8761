"""The RBM learns: against scikit-learn's BernoulliRBM on digits, and each training option does its job."""

import re

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import linear_model
from sklearn.neural_network import BernoulliRBM
from support.numerics import assert_within, matmul_error_bound, unit_roundoff
from support.seed_bounds import assert_at_least, assert_at_most
from threadpoolctl import threadpool_limits

from rbm import RBM
from rbm.boltzmann import _cd
from rbm.datasets import load_digits01, load_nudged_digits


def accuracy_of_features(model, X_train, X_test, y_train, y_test):
    features_train = model.fit(X_train).transform(X_train)
    classifier = linear_model.LogisticRegression(solver="newton-cg", C=6000, tol=1e-4, max_iter=2000)
    classifier.fit(features_train, y_train)
    return classifier.score(model.transform(X_test), y_test)


# The classic schedule for CD-1 (Hinton's practical guide): the tests of other training
# options use it, as they did before persistent CD became the default.
CD1_WITH_MOMENTUM = dict(persistent=False, momentum=0.5, final_momentum=0.9)


@pytest.mark.slow
@pytest.mark.seed_bound
def test_rbm_defaults_give_features_at_least_as_good_as_bernoulli_rbms_on_nudged_digits():
    split = load_nudged_digits()
    X_train, X_test, y_train, y_test = split.X_train, split.X_test, split.y_train, split.y_test
    example = dict(n_components=100, learning_rate=0.06, n_iter=10)  # the scikit-learn example's own arguments
    theirs, ours = [], []
    # One BLAS thread: the comparison then does not depend on the machine's core count.
    with threadpool_limits(1):
        for seed in (0, 1, 2):
            theirs.append(accuracy_of_features(BernoulliRBM(random_state=seed, **example), X_train, X_test, y_train, y_test))
            ours.append(accuracy_of_features(RBM(random_state=seed, **example), X_train, X_test, y_train, y_test))
    # Measured here (seeds 0, 1, 2): scikit-learn 0.943, 0.944, 0.949; ours 0.948, 0.948, 0.945 (the earlier
    # defaults, initial weights 0.01 and a constant rate: 0.942, 0.948, 0.952).
    assert_at_least(np.mean(ours) - np.mean(theirs), 0.0, "mean accuracy, ours minus scikit-learn's, seeds 0-2",
                    np.subtract(ours, theirs))
    assert_at_least(min(ours), 0.93, "lowest accuracy of our features, seeds 0-2", ours)


@pytest.mark.seed_bound
def test_reconstruction_error_falls_as_training_proceeds():
    split = load_digits01()
    falls, test_errors = [], []
    for seed in (0, 1, 2):
        model = RBM(n_components=64, random_state=seed, **CD1_WITH_MOMENTUM)
        errors = [model.train_partition(split.X_train, None, "rbm", np.random.default_rng([seed, k]))["loss"]
                  for k in range(8)]
        falls.append(errors[-1] / errors[0])
        test_errors.append(model.reconstruction_error(split.X_test))
    # Measured over seeds 0-4, on OpenBLAS's SkylakeX and Haswell kernels: the last pass's error 0.54-0.59
    # of the first's (mean 0.56, sd 0.017; one seed alone came within 0.01 of the former bound 0.6), the
    # held-out error 0.014-0.017.  An RBM that does not learn stays near 1.
    assert_at_most(np.mean(falls), 0.65, "mean last-to-first reconstruction error, seeds 0-2", falls)
    assert_at_most(np.mean(test_errors), 0.03, "mean held-out reconstruction error, seeds 0-2", test_errors)


def test_gaussian_visible_units_learn_standardized_real_valued_data():
    split = load_digits01()
    mean, std = split.X_train.mean(axis=0), split.X_train.std(axis=0) + 0.1
    X_train, X_test = (split.X_train - mean) / std, (split.X_test - mean) / std
    model = RBM(n_components=64, visible="gaussian", learning_rate=0.005, n_iter=10, random_state=0,
                **CD1_WITH_MOMENTUM).fit(X_train)
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
    common = dict(n_components=32, n_iter=5, random_state=0, **CD1_WITH_MOMENTUM)
    plain = np.linalg.norm(RBM(**common).fit(split.X_train).components_)
    decayed = np.linalg.norm(RBM(weight_decay=0.01, **common).fit(split.X_train).components_)
    assert decayed < 0.8 * plain


@pytest.mark.parametrize("settings", [dict(cd_k=3), dict(persistent=True, momentum=0.0, final_momentum=0.0)])
def test_cd_k_and_persistent_cd_learn_digits(settings):
    split = load_digits01()
    model = RBM(n_components=64, n_iter=5, random_state=0, **settings).fit(split.X_train)
    untrained = RBM(n_components=64, random_state=0).initialize(64)
    assert model.reconstruction_error(split.X_test) < 0.5 * untrained.reconstruction_error(split.X_test)


def test_free_energy_transform_and_pseudo_likelihood_equal_scikit_learns_for_the_same_weights(numerics):
    split = load_digits01()
    ours = RBM(n_components=16, n_iter=2, random_state=0, dtype=np.float64).fit(split.X_train)
    theirs = BernoulliRBM(n_components=16, random_state=0).fit(split.X_train[:20].astype(np.float64))
    theirs.components_ = ours.components_
    theirs.intercept_hidden_ = ours.intercept_hidden_
    theirs.intercept_visible_ = ours.intercept_visible_
    X = numerics.arrange(split.X_test.astype(np.float64))
    # float64 by other code (64-term dot products, tanh against expit): within about 64 u = 7e-15 relative
    # for the inputs of the sigmoids; 1e-10 leaves room for the free energy's sums of 16 softplus terms.
    np.testing.assert_allclose(ours.transform(X), theirs.transform(X), rtol=1e-10)
    np.testing.assert_allclose(ours.free_energy(X), theirs._free_energy(X), rtol=1e-10)
    # The pseudo-likelihood flips one random unit per row: both draw it from the same seeded
    # stream, so the estimates agree row by row, not just on average.
    np.testing.assert_allclose(ours.score_samples(X), theirs.score_samples(X), rtol=1e-9)
    assert np.ptp(ours.score_samples(X)) > 1.0  # rows really differ: the comparison has teeth


def test_fit_holds_the_learning_rate_for_three_quarters_of_its_updates_then_lowers_it_linearly(monkeypatch):
    rates = []
    cd_step = _cd.cd_step

    def recording_cd_step(ws, b, W, hbias, vbias, velocity, generator, settings, learning_rate, *args, **kwargs):
        rates.append(learning_rate)
        return cd_step(ws, b, W, hbias, vbias, velocity, generator, settings, learning_rate, *args, **kwargs)

    monkeypatch.setattr(_cd, "cd_step", recording_cd_step)
    X = np.random.default_rng(0).random((40, 3))
    model = RBM(n_components=2, learning_rate=0.1, batch_size=10, n_iter=2, random_state=0).fit(X)  # 8 updates
    # Fit progress 0, 1/8, ..., 7/8: the rate is 0.1 * min(1, (1 - progress) / 0.25).
    np.testing.assert_allclose(rates, [0.1] * 7 + [0.05])
    rates.clear()
    model.partial_fit(X)  # how many passes follow is unknown: a constant rate
    np.testing.assert_allclose(rates, [0.1] * 4)
    rates.clear()
    RBM(n_components=2, learning_rate=0.1, batch_size=10, n_iter=2, anneal_fraction=0.0).fit(X)
    np.testing.assert_allclose(rates, [0.1] * 8)


def test_initial_weights_spread_as_one_over_the_square_root_of_the_width_unless_given():
    assert np.std(RBM(n_components=400, random_state=0).initialize(100).components_) == pytest.approx(0.1, rel=0.02)
    given = RBM(n_components=400, weight_init_std=0.01, random_state=0).initialize(100)
    assert np.std(given.components_) == pytest.approx(0.01, rel=0.02)


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


class NoWholeDensify(sp.csr_matrix):
    """A CSR matrix that refuses to be densified in blocks of more than ``limit`` rows."""

    limit = 1024

    def toarray(self, *args, **kwargs):
        assert self.shape[0] <= self.limit, f"densified {self.shape[0]} rows at once"
        return super().toarray(*args, **kwargs)


@pytest.mark.parametrize("container", [sp.csr_matrix, sp.csc_matrix, sp.lil_matrix, sp.csr_array, NoWholeDensify])
def test_sparse_input_trains_and_infers_exactly_as_the_same_dense_input(container, numerics):
    split = load_digits01()
    X = numerics.arrange(np.vstack([split.X_train, split.X_train[:300]]))  # 1737 rows: more than one inference chunk
    dense, sparse = RBM(n_components=16, n_iter=2, random_state=0), RBM(n_components=16, n_iter=2, random_state=0)
    dense.fit(X).partial_fit(X[:100])
    sparse.fit(container(X)).partial_fit(container(X[:100]))
    # Training runs the same operations on both: each minibatch is gathered into one C-ordered
    # buffer, sparse rows densified into it; so the parameters are equal, bit for bit.
    for name, value in dense.parameters().items():
        np.testing.assert_array_equal(sparse.parameters()[name], value, err_msg=name)
    # Inference does not: dense input is one GEMM on 1737 rows, sparse input chunks of 1024 + 713,
    # and how the kernel blocks the rows decides the last bits (Haswell kernels: 1.8e-6 relative
    # apart).  Both are within the float32 bound of X W (K = 64 terms, 2 * 64 u * |X| |W|), plus u
    # per side for adding the bias; the sigmoid carries that over at its slope s (1 - s), and its
    # own rounding adds a few u.
    W, hbias = dense.parameters()["W"], dense.parameters()["hbias"]
    u = unit_roundoff(np.float32)
    input_bound = matmul_error_bound(X, W) + 2 * u * (np.abs(X) @ np.abs(W) + np.abs(hbias))
    expected = dense.transform(X).astype(np.float64)
    got = sparse.transform(container(X))
    assert got.dtype == np.float32
    assert_within(got, expected, expected * (1 - expected) * input_bound + 4 * u * expected, "transform")
    # The pseudo-likelihood is -64 softplus(-gap), gap a sum over the 16 hidden units of softplus
    # differences at the unit's input with and without the flipped pixel: softplus is 1-Lipschitz,
    # so two evaluations are within 64 (2 sum_k of the input bounds), plus the float32 rounding of
    # the 33-term sum (gamma_33 times its terms, each below |input| + log 2).
    pseudo = dense.score_samples(X).astype(np.float64)
    terms = 2 * (np.abs(X @ W + hbias) + np.log(2)).sum(axis=1)
    gamma = 33 * u / (1 - 33 * u)
    bound = 64 * (2 * input_bound.sum(axis=1) + gamma * terms) + 4 * u * np.abs(pseudo)
    assert_within(sparse.score_samples(container(X)), pseudo, bound, "score_samples")
    np.testing.assert_array_equal(sparse.gibbs(container(X)).shape, X.shape)


def test_persistent_chains_are_exposed_as_h_samples_like_bernoulli_rbm():
    split = load_digits01()
    model = RBM(n_components=12, batch_size=7, n_iter=1, random_state=0).fit(split.X_train)
    assert model.h_samples_.shape == (7, 12)
    assert set(np.unique(model.h_samples_)) <= {0.0, 1.0} and model.h_samples_.any()
    cd = RBM(n_components=12, persistent=False, n_iter=1, random_state=0).fit(split.X_train)
    assert not hasattr(cd, "h_samples_")  # CD-k keeps no chains


def test_replicas_of_one_spec_draw_their_gibbs_samples_from_each_partitions_generator():
    """A fit's nodes build their replicas from one spec, one ``random_state``: sampling from the stream it
    seeds, their persistent chains would be one chain, and n averaged nodes learn from one node's
    negative samples (8 nodes merged every minibatch: 19% above one process's error, 1% apart without)."""
    X = load_digits01().X_train[:10]  # one minibatch: the order of its rows does not move the chains

    def replica(partition_seed: int) -> RBM:
        model = RBM(n_components=12, batch_size=10, random_state=0).initialize(64)
        model.train_partition(X, None, "rbm", np.random.default_rng(partition_seed))
        return model

    first, again, other = replica(1), replica(1), replica(2)
    np.testing.assert_array_equal(first.h_samples_, again.h_samples_)  # one partition generator, one outcome
    assert not np.array_equal(first.h_samples_, other.h_samples_)


VERBOSE_LINE = re.compile(r"\[BernoulliRBM\] Iteration (\d+), pseudo-likelihood = (-?\d+\.\d\d), time = \d+\.\d\ds")


def test_verbose_fit_prints_bernoulli_rbms_line_per_pass_with_the_mean_pseudo_likelihood(capsys):
    # The line scikit-learn's BernoulliRBM prints (its own test runs in test_sklearn_rbm_suite.py); on data of
    # at most 2048 rows the number is score_samples(X).mean(), the same flipped units for an int random_state.
    X = load_digits01().X_train[:300]
    model = RBM(n_components=16, n_iter=3, verbose=1, random_state=0).fit(X)
    lines = capsys.readouterr().out.splitlines()
    assert [VERBOSE_LINE.fullmatch(line) is not None for line in lines] == [True] * 3, lines
    assert [int(VERBOSE_LINE.fullmatch(line).group(1)) for line in lines] == [1, 2, 3]
    assert float(VERBOSE_LINE.fullmatch(lines[-1]).group(2)) == pytest.approx(model.score_samples(X).mean(), abs=0.006)
    once = RBM(n_components=16, n_iter=1, verbose=1, random_state=0).fit(X)
    first = float(VERBOSE_LINE.fullmatch(capsys.readouterr().out.strip()).group(2))
    assert first == pytest.approx(once.score_samples(X).mean(), abs=0.006)


def test_verbose_output_leaves_what_the_fit_learns_unchanged_even_for_a_generator_seed(capsys):
    X = load_digits01().X_train[:3000]  # more rows than the line's score uses
    quiet = RBM(n_components=8, n_iter=2, random_state=np.random.default_rng(5)).fit(X)
    assert capsys.readouterr().out == ""
    loud = RBM(n_components=8, n_iter=2, verbose=True, random_state=np.random.default_rng(5)).fit(X)
    assert len(capsys.readouterr().out.splitlines()) == 2
    np.testing.assert_array_equal(loud.components_, quiet.components_)


def test_nothing_is_printed_without_verbose_nor_by_partial_fit_or_train_partition(capsys):
    X = load_digits01().X_train[:100]
    RBM(n_components=4, n_iter=2, random_state=0).fit(X)
    loud = RBM(n_components=4, n_iter=2, verbose=True, random_state=0)
    loud.partial_fit(X)  # as BernoulliRBM: only fit prints
    loud.train_partition(X, None, "rbm", np.random.default_rng(0))  # an executor's pass: no stdout
    assert capsys.readouterr().out == ""


def test_verbose_with_gaussian_units_prints_the_reconstruction_error_and_sparse_input_its_score(capsys):
    X = np.random.default_rng(0).normal(size=(50, 6))
    RBM(n_components=3, n_iter=2, visible="gaussian", verbose=True, random_state=0).fit(X)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"\[GaussianBernoulliRBM\] Iteration 2, reconstruction error = \d+\.\d{6}, time = \d+\.\d\ds",
                        lines[1])
    RBM(n_components=2, batch_size=2, n_iter=1, verbose=True, random_state=0).fit(sp.csc_matrix([[0.0], [1.0]]))
    assert VERBOSE_LINE.fullmatch(capsys.readouterr().out.strip())
