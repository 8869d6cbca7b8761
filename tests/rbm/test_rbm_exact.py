"""Exactness of the RBM machinery on tiny models, against brute-force enumeration.

Everything is float64 on models of at most 6 visible and 4 hidden units: the two sides add at most
2**10 positive terms (Boltzmann weights, probabilities) or dot products of at most 6, in other orders,
so they agree to within 2**10 u = 1.1e-13 relative (to 1e-15 on most figures); the tolerances of
1e-12 on figures of order 1 leave a margin of 10 and more on any machine.
"""

import itertools

import numpy as np
import pytest
from support.seed_bounds import assert_at_least

from rbm import RBM
from rbm.datasets import bars_and_stripes
from rbm.boltzmann import _cd
from rbm.boltzmann._exact import (
    all_binary_states,
    exact_gradient,
    exact_log_likelihood,
    exact_log_partition,
    model_distribution,
)


def tiny_parameters(n_visible=5, n_hidden=3, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    W = rng.normal(0, scale, (n_visible, n_hidden))
    return W, rng.normal(0, 0.5, n_hidden), rng.normal(0, 0.5, n_visible)


def tiny_rbm(W, hbias, vbias, **settings):
    model = RBM(n_components=W.shape[1], dtype=np.float64, random_state=0, **settings).initialize(W.shape[0])
    model.set_parameters({"W": W, "hbias": hbias, "vbias": vbias})
    return model


def energy(v, h, W, hbias, vbias):
    return -(v @ vbias) - (h @ hbias) - v @ W @ h


def joint_states(n_visible, n_hidden):
    for v in itertools.product([0.0, 1.0], repeat=n_visible):
        for h in itertools.product([0.0, 1.0], repeat=n_hidden):
            yield np.array(v), np.array(h)


def test_free_energy_equals_minus_log_sum_over_hidden_states():
    W, hbias, vbias = tiny_parameters()
    model = tiny_rbm(W, hbias, vbias)
    visible = all_binary_states(5)
    hidden = all_binary_states(3)
    brute = np.array(
        [-np.log(sum(np.exp(-energy(v, h, W, hbias, vbias)) for h in hidden)) for v in visible]
    )
    np.testing.assert_allclose(model.free_energy(visible), brute, rtol=1e-12, atol=1e-12)


def test_log_partition_function_equals_enumeration_of_all_joint_states():
    W, hbias, vbias = tiny_parameters(n_visible=6, n_hidden=4, scale=1.5)
    brute = np.log(sum(np.exp(-energy(v, h, W, hbias, vbias)) for v, h in joint_states(6, 4)))
    assert exact_log_partition(W, hbias, vbias) == pytest.approx(brute, rel=1e-12)
    states, probabilities = model_distribution(W, hbias, vbias)
    assert probabilities.sum() == pytest.approx(1.0, rel=1e-12)


def test_exact_gradient_from_stacked_statistics_equals_brute_force_expectations():
    W, hbias, vbias = tiny_parameters(n_visible=5, n_hidden=3)
    data = all_binary_states(5)[[1, 6, 7, 19, 30]]
    dW, dh, dv = exact_gradient(W, hbias, vbias, data)

    # Brute force: E_data[v p(h|v)^T] - E_model[v h^T] with the model expectation summed
    # over every joint state (v, h), weighted by exp(-E(v, h)) / Z.
    Z = sum(np.exp(-energy(v, h, W, hbias, vbias)) for v, h in joint_states(5, 3))
    model_vh, model_h, model_v = np.zeros_like(W), np.zeros_like(hbias), np.zeros_like(vbias)
    for v, h in joint_states(5, 3):
        p = np.exp(-energy(v, h, W, hbias, vbias)) / Z
        model_vh += p * np.outer(v, h)
        model_h += p * h
        model_v += p * v
    h_data = 1 / (1 + np.exp(-(data @ W + hbias)))
    np.testing.assert_allclose(dW, data.T @ h_data / len(data) - model_vh, atol=1e-12)
    np.testing.assert_allclose(dh, h_data.mean(axis=0) - model_h, atol=1e-12)
    np.testing.assert_allclose(dv, data.mean(axis=0) - model_v, atol=1e-12)


def test_exact_gradient_equals_central_finite_differences_of_the_log_likelihood():
    W, hbias, vbias = tiny_parameters(n_visible=4, n_hidden=3, seed=3)
    data = all_binary_states(4)[[0, 3, 5, 12, 15]]
    analytic = exact_gradient(W, hbias, vbias, data)
    eps = 1e-6
    for index, array in enumerate((W, hbias, vbias)):
        numeric = np.zeros_like(array)
        for position in np.ndindex(array.shape):
            saved = array[position]
            array[position] = saved + eps
            up = exact_log_likelihood(W, hbias, vbias, data)
            array[position] = saved - eps
            down = exact_log_likelihood(W, hbias, vbias, data)
            array[position] = saved
            numeric[position] = (up - down) / (2 * eps)
        np.testing.assert_allclose(analytic[index], numeric, atol=1e-8)


def test_cd_step_moves_parameters_by_learning_rate_times_data_minus_model_statistics():
    W, hbias, vbias = tiny_parameters(n_visible=6, n_hidden=4)
    W, hbias, vbias = W.copy(), hbias.copy(), vbias.copy()
    b, lr, momentum = 8, 0.3, 0.5
    rng = np.random.default_rng(1)
    ws = _cd.Workspace(np, b, 6, 4, np.float64)
    ws.V[:b] = (rng.random((b, 6)) < 0.5).astype(np.float64)
    velocity = tuple(rng.normal(0, 0.1, a.shape) for a in (W, hbias, vbias))
    old_velocity = tuple(v.copy() for v in velocity)
    before = (W.copy(), hbias.copy(), vbias.copy())
    generator = np.random.Generator(np.random.SFC64(5))
    _cd.cd_step(ws, b, W, hbias, vbias, velocity, generator, _cd.CDSettings(), lr, momentum)

    # The buffers now hold v0, vk and (lr / b) [p(h|v0); -p(h|vk)]: recompute the statistics.
    v0, vk = ws.V[:b], ws.V[b:]
    h0 = 1 / (1 + np.exp(-(v0 @ before[0] + before[1])))
    hk = 1 / (1 + np.exp(-(vk @ before[0] + before[1])))
    np.testing.assert_allclose(ws.H[:b] * b / lr, h0, atol=1e-12)
    np.testing.assert_allclose(ws.H[b:] * b / lr, -hk, atol=1e-12)
    gradients = ((v0.T @ h0 - vk.T @ hk) / b, (h0 - hk).mean(axis=0), (v0 - vk).mean(axis=0))
    for new, old, v_old, grad in zip((W, hbias, vbias), before, old_velocity, gradients):
        np.testing.assert_allclose(new - old, momentum * v_old + lr * grad, atol=1e-12)


def test_persistent_cd_step_averages_the_model_statistics_over_every_chain_whatever_the_minibatch():
    # A node trains in minibatches smaller than the fit's (the scaling rule) and keeps the fit's chains:
    # the update is lr * (mean over the b data rows - mean over the c chains), and every chain steps.
    W, hbias, vbias = tiny_parameters(n_visible=6, n_hidden=4)
    W, hbias, vbias = W.copy(), hbias.copy(), vbias.copy()
    b, c, lr = 2, 7, 0.3
    rng = np.random.default_rng(2)
    ws = _cd.Workspace(np, b, 6, 4, np.float64, negatives=c)
    ws.V[:b] = (rng.random((b, 6)) < 0.5).astype(np.float64)
    chain = (rng.random((c, 4)) < 0.5).astype(np.float64)
    velocity = tuple(np.zeros_like(a) for a in (W, hbias, vbias))
    before = (W.copy(), hbias.copy(), vbias.copy())
    generator = np.random.Generator(np.random.SFC64(5))
    _cd.cd_step(ws, b, W, hbias, vbias, velocity, generator, _cd.CDSettings(persistent=True), lr, 0.0, chain=chain)

    v0, vk = ws.V[:b], ws.V[b:]  # the data rows, then one Gibbs step of each of the c chains
    assert vk.shape == (c, 6)
    h0 = 1 / (1 + np.exp(-(v0 @ before[0] + before[1])))
    hk = 1 / (1 + np.exp(-(vk @ before[0] + before[1])))
    gradients = (v0.T @ h0 / b - vk.T @ hk / c, h0.mean(axis=0) - hk.mean(axis=0), v0.mean(axis=0) - vk.mean(axis=0))
    for new, old, grad in zip((W, hbias, vbias), before, gradients):
        np.testing.assert_allclose(new - old, lr * grad, atol=1e-12)
    # The chains continue from p(h | vk): each of the c rows is a fresh sample of it.
    assert np.all((chain == 0) | (chain == 1))
    assert np.all(chain[hk > 1 - 1e-9] == 1) and np.all(chain[hk < 1e-9] == 0)


@pytest.mark.parametrize("persistent", [False, True])
def test_a_measured_cd_step_returns_the_minibatchs_squared_reconstruction_error(persistent):
    # CD-1: the one-step reconstruction from the sampled hiddens, which the step computes anyway; PCD, whose
    # step reconstructs no data: the mean-field one, E[v | p(h | v0)], with the parameters before the update.
    W, hbias, vbias = tiny_parameters(n_visible=6, n_hidden=4)
    b = 5
    rng = np.random.default_rng(3)
    data = (rng.random((b, 6)) < 0.5).astype(np.float64)
    errors = []
    for measure_error in (True, False):
        ws = _cd.Workspace(np, b, 6, 4, np.float64)
        ws.V[:b] = data
        chain = np.zeros((b, 4)) if persistent else None
        velocity = tuple(np.zeros_like(a) for a in (W, hbias, vbias))
        generator = np.random.Generator(np.random.SFC64(5))
        parameters = (W.copy(), hbias.copy(), vbias.copy())  # updated in place by the step
        errors.append(_cd.cd_step(ws, b, *parameters, velocity, generator, _cd.CDSettings(persistent=persistent),
                                  0.1, 0.0, chain=chain, measure_error=measure_error))
    h0 = 1 / (1 + np.exp(-(data @ W + hbias)))
    if persistent:
        hidden = h0
    else:
        hidden = _cd.sample_bernoulli_(np.random.Generator(np.random.SFC64(5)), h0, np.empty_like(h0))
    reconstruction = 1 / (1 + np.exp(-(hidden @ W.T + vbias)))
    assert errors[0] == pytest.approx(((data - reconstruction) ** 2).sum(), rel=1e-12)
    assert np.isnan(errors[1])


def test_gibbs_chains_sample_the_exact_model_distribution():
    W, hbias, vbias = tiny_parameters(n_visible=4, n_hidden=3, scale=1.0, seed=7)
    model = tiny_rbm(W, hbias, vbias)
    chains = np.zeros((20000, 4))
    for _ in range(30):
        chains = model.gibbs(chains)
    codes = chains.astype(np.int64) @ (2 ** np.arange(3, -1, -1))
    empirical = np.bincount(codes, minlength=16) / len(chains)
    _, exact = model_distribution(W, hbias, vbias)
    total_variation = 0.5 * np.abs(empirical - exact).sum()
    assert total_variation < 0.03


@pytest.mark.parametrize("batch_size", [20000, 1])  # chains as many as the minibatch's rows, or fewer rows
def test_persistent_chains_of_the_cd_step_sample_the_exact_hidden_marginal(batch_size):
    W, hbias, vbias = tiny_parameters(n_visible=4, n_hidden=3, scale=1.0, seed=11)
    n_chains = 20000
    model = RBM(n_components=3, batch_size=batch_size, n_chains=n_chains, persistent=True, learning_rate=1e-300,
                momentum=0.0, final_momentum=0.0, dtype=np.float64, random_state=0).initialize(4)
    model.set_parameters({"W": W, "hbias": hbias, "vbias": vbias})
    data = np.zeros((batch_size, 4))
    for _ in range(30):  # each pass is one PCD-1 update: every chain advances one Gibbs step
        model.partial_fit(data)
    codes = model._chain.astype(np.int64) @ np.array([4, 2, 1])
    empirical = np.bincount(codes, minlength=8) / n_chains
    hidden = all_binary_states(3)
    log_p = hidden @ hbias + np.logaddexp(0, hidden @ W.T + vbias).sum(axis=1)
    exact = np.exp(log_p - log_p.max())
    exact /= exact.sum()
    assert 0.5 * np.abs(empirical - exact).sum() < 0.03


def test_training_on_bars_and_stripes_raises_the_exact_log_likelihood():
    data = bars_and_stripes(3)  # 14 distinct 3x3 patterns; the best possible mean log p is -log 14
    assert len(data) == 14
    model = RBM(n_components=12, learning_rate=0.02, batch_size=7, cd_k=3, persistent=False, momentum=0.5,
                final_momentum=0.9, dtype=np.float64, random_state=0).initialize(9)

    def log_likelihood():
        p = model.parameters()
        return exact_log_likelihood(p["W"], p["hbias"], p["vbias"], data)

    before = log_likelihood()  # about -9 log 2 = -6.24 at the random start
    training = np.tile(data, (20, 1))
    for _ in range(80):
        model.partial_fit(training)
    after = log_likelihood()
    # Measured: -6.24 before, -2.92 after 80 passes (-3.00 and -3.05 with seeds 1 and 2);
    # the optimum, all mass spread evenly on the 14 patterns, is -log 14 = -2.64.
    assert before < -6.0
    assert after > before + 3.0
    assert after <= -np.log(14) + 1e-9


# Plain CD-1: no momentum, a constant learning rate.
PLAIN_CD1 = dict(persistent=False, momentum=0.0, final_momentum=0.0, anneal_fraction=0.0)


def mean_exact_log_likelihood(patterns, n_components, learning_rate, passes, settings, seeds=(0, 1, 2)):
    """Mean over seeds of the exact mean log p of ``patterns`` after ``fit`` on 10 copies, batch 10."""
    X = np.tile(patterns, (10, 1))
    results = []
    for seed in seeds:
        model = RBM(n_components=n_components, learning_rate=learning_rate, batch_size=10, n_iter=passes,
                    dtype=np.float64, random_state=seed, **settings).fit(X)
        p = model.parameters()
        results.append(exact_log_likelihood(p["W"], p["hbias"], p["vbias"], patterns))
    return float(np.mean(results))


# Measured here (mean over seeds 0-2; scripts/bench_rbm_defaults.py prints the whole table):
# 3x3, 9-12 RBM, lr 0.05 x400: defaults -3.01; plain CD-1 -3.38 (initial weights 0.01: -3.34);
#   the earlier defaults (initial weights 0.01, constant rate) -3.50.
# 4x4, 16-16 RBM, lr 0.05 x100: defaults -4.61; plain CD-1 -5.67 (0.01: -5.46); earlier defaults -5.98.
@pytest.mark.seed_bound
@pytest.mark.parametrize("size, n_components, passes", [(3, 12, 400), (4, 16, 100)])
def test_default_rbm_reaches_a_higher_exact_likelihood_than_plain_cd1_on_bars_and_stripes(size, n_components, passes):
    patterns = bars_and_stripes(size)
    defaults = mean_exact_log_likelihood(patterns, n_components, 0.05, passes, {})
    for initial_std in (None, 0.01):  # the defaults' initial weights, and BernoulliRBM's
        plain = mean_exact_log_likelihood(patterns, n_components, 0.05, passes, dict(PLAIN_CD1, weight_init_std=initial_std))
        assert_at_least(defaults - plain, 0.0, f"mean exact log-likelihood, defaults minus plain CD-1 with initial "
                        f"weights {initial_std}, seeds 0-2")
    assert defaults <= -np.log(len(patterns)) + 1e-9
