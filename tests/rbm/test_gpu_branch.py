"""The GPU branch on the CPU: the fused kernels' numpy twins and the Philox sampler, in CI.

``rbm._gpu.stand_in()`` sends numpy models down the GPU branch (fused operations, Philox
draws); ``stand_in(fused=False)`` keeps the CPU branch but draws from Philox.  Same seed,
same draws: when both branches compute the same algorithm they learn the same parameters,
which is the equivalence the GPU tests then check on a real GPU (tests/rbm/test_gpu.py).
"""

import logging

import numpy as np
import pytest

from rbm import DBN, RBM, ConvNet
from rbm._gpu import PhiloxStream, _reference, stand_in
from rbm._gpu._philox import philox4x32_10
from rbm.boltzmann import _cd
from rbm.datasets import load_digits01


@pytest.fixture(scope="module")
def digits():
    return load_digits01()


def test_philox_reproduces_the_random123_known_answers():
    for counter, key, expected in [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ]:
        assert tuple(int(word) for word in philox4x32_10(counter, key)) == expected


def test_philox_draws_are_addressed_by_counter_and_look_uniform():
    whole = PhiloxStream(7).random(1000)
    stream = PhiloxStream(7)
    parts = np.concatenate([stream.random(300), stream.random((7, 100))[:, :].ravel()])
    np.testing.assert_array_equal(whole, parts)  # draw i is the same however the draws are cut
    u = PhiloxStream(1).random(200_000)
    assert abs(u.mean() - 0.5) < 0.003 and abs(u.var() - 1 / 12) < 0.002
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01
    z = PhiloxStream(2).standard_normal(200_000, dtype=np.float32)
    assert z.dtype == np.float32 and abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert not np.array_equal(PhiloxStream(1).random(10), PhiloxStream(2).random(10))


def test_uniform_fill_draws_one_number_per_element_from_a_generator_that_broadcasts_without_size():
    class BroadcastingGenerator:
        """cupy 14's ``Generator.random``: with ``out`` and no ``size`` it draws ONE number
        and copies it into all of ``out`` (cupy/random/_generator_api.pyx)."""

        def __init__(self):
            self.rng = np.random.default_rng(0)

        def random(self, size=None, dtype=np.float64, out=None):
            draws = self.rng.random(() if size is None else size, dtype=dtype)
            if out is not None:
                out[...] = draws
                return out
            return draws

    out = np.empty((50, 20))
    _cd.uniform_(BroadcastingGenerator(), out)
    assert len(np.unique(out)) == out.size


def _rbm_parameters(fused, **settings):
    X = load_digits01().X_train[:300]
    with stand_in(fused=fused):
        model = RBM(n_components=16, n_iter=3, random_state=0, dtype=np.float64, **settings).fit(X)
    return model.parameters()


@pytest.mark.parametrize("settings", [
    {"persistent": False},
    {"persistent": True},
    {"persistent": True, "n_chains": 7, "batch_size": 13},
    {"persistent": True, "cd_k": 2, "momentum": 0.5, "final_momentum": 0.9, "momentum_switch_iter": 1,
     "weight_decay": 1e-3},
    {"persistent": False, "cd_k": 3, "sparsity_target": 0.1},
    {"persistent": False, "cd_k": 2, "visible": "gaussian", "learning_rate": 0.01},
    {"persistent": True, "visible": "gaussian", "learning_rate": 0.01},
], ids=["cd1", "pcd", "pcd-chains", "pcd2-momentum-decay", "cd3-sparsity", "gaussian-cd2", "gaussian-pcd"])
def test_the_gpu_branch_learns_the_same_rbm_as_the_cpu_branch_from_the_same_draws(settings):
    cpu, gpu = _rbm_parameters(False, **settings), _rbm_parameters(True, **settings)
    for name in cpu:
        np.testing.assert_allclose(gpu[name], cpu[name], rtol=0, atol=1e-10, err_msg=name)
    assert np.abs(cpu["W"]).max() > 0.1  # it learned something


@pytest.mark.parametrize("settings", [{"persistent": False}, {"persistent": True},
                                      {"persistent": True, "visible": "gaussian", "learning_rate": 0.01}],
                         ids=["cd1", "pcd", "gaussian-pcd"])
def test_the_gpu_branch_reports_the_same_reconstruction_error_as_the_cpu_branch(settings, digits):
    # Persistent CD measures the mean-field reconstruction of the pass's last rows inside its step.
    losses = []
    for fused in (False, True):
        with stand_in(fused=fused):
            model = RBM(n_components=16, random_state=0, dtype=np.float64, **settings)
            losses.append(model.train_partition(digits.X_train[:300], None, "rbm", np.random.default_rng(1))["loss"])
    assert losses[0] > 0
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-12)


@pytest.mark.parametrize("updater", ["sgd", "adam", "adagrad"])
def test_the_gpu_branch_fine_tunes_the_same_dbn_as_the_cpu_branch(updater, digits):
    results = []
    for fused in (False, True):
        with stand_in(fused=fused):
            model = DBN((16, 8), pretrain_epochs=2, finetune_epochs=3, finetune_updater=updater, finetune_dropout=0.3,
                        random_state=0, dtype=np.float64).fit(digits.X_train[:300], digits.y_train[:300])
            results.append(model.parameters())
    for name in results[0]:
        np.testing.assert_allclose(results[1][name], results[0][name], rtol=0, atol=1e-10, err_msg=name)


def test_the_gpu_branch_trains_the_same_convnet_as_the_cpu_branch(digits):
    layers = [{"type": "conv", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
              {"type": "maxpool", "size": 2}, {"type": "dropout", "rate": 0.2}, {"type": "dense", "units": 16}]
    X = digits.X_train[:200].reshape(-1, 1, 8, 8)
    results = []
    for fused in (False, True):
        with stand_in(fused=fused):
            net = ConvNet(layers, input_shape=(1, 8, 8), nesterov=True, l2=1e-3, epochs=2, batch_size=32,
                          dtype="float64", random_state=0).fit(X, digits.y_train[:200])
            results.append(net.parameters())
    for name in results[0]:
        np.testing.assert_allclose(results[1][name], results[0][name], rtol=0, atol=1e-10, err_msg=name)


def test_the_stand_in_really_takes_the_fused_operations(monkeypatch, digits):
    calls = []
    dbn_ops = {"bias_sigmoid_sample_", "sigmoid_backward_", "sgd_step_", "dropout", "softmax_cross_entropy",
               "column_sums"}
    conv_ops = {"activation_backward", "row_sums", "column_sums", "softmax_cross_entropy", "bias_activation_"}
    for name in dbn_ops | conv_ops:
        original = getattr(_reference.ReferenceOps, name)
        monkeypatch.setattr(_reference.ReferenceOps, name,
                            lambda self, *a, _f=original, _n=name, **k: calls.append(_n) or _f(self, *a, **k))
    with stand_in():
        # (no dropout ramp: the fit's one epoch drops the full share)
        DBN((8,), pretrain_epochs=1, finetune_epochs=1, finetune_dropout_ramp_epochs=0, random_state=0).fit(
            digits.X_train[:50], digits.y_train[:50])
    assert dbn_ops <= set(calls)
    calls.clear()
    layers = [{"type": "conv", "filters": 2, "kernel": 3, "activation": "relu"}, {"type": "dense", "units": 8,
                                                                                  "activation": "tanh"},
              {"type": "dense", "units": 2}]
    with stand_in():
        ConvNet(layers, input_shape=(1, 8, 8), epochs=1, batch_size=25, random_state=0).fit(
            digits.X_train[:50].reshape(-1, 1, 8, 8), digits.y_train[:50])
    assert conv_ops <= set(calls)


def test_philox_and_sfc64_samplers_learn_rbms_equally_well(digits):
    """The GPU's default sampler against the CPU's: the same reconstruction error over seeds.

    Persistent CD is the sensitive case: with cupy 14's one-number broadcast (every unit of
    a minibatch sharing one threshold) the Philox side ended at 0.0277 against 0.0313.
    """
    errors = {True: [], False: []}
    for seed in range(3):
        for philox in (False, True):
            settings = dict(n_components=64, n_iter=10, random_state=seed, dtype=np.float64)
            if philox:
                with stand_in():
                    model = RBM(**settings).fit(digits.X_train)
            else:
                model = RBM(**settings).fit(digits.X_train)
            errors[philox].append(model.reconstruction_error(digits.X_test))
    # Per-seed spread about 0.00035 (4 seeds each); the means measured 0.0313 and 0.0314.
    assert abs(np.mean(errors[True]) - np.mean(errors[False])) < 0.0012


def test_precision_other_than_float32_is_refused_on_the_cpu_and_for_float64():
    X = np.zeros((4, 6))
    with pytest.raises(ValueError, match="precision='tf32' needs a GPU's tensor cores, but device='cpu'"):
        RBM(n_components=2, precision="tf32").fit(X)
    with pytest.raises(ValueError, match="applies to float32 models, not float64"):
        DBN((2,), precision="bfloat16", device="auto", dtype=np.float64).fit(X, [0, 1, 0, 1])
    with pytest.raises(ValueError, match="precision must be one of"):
        ConvNet(precision="fp8")._check_settings()


def test_precision_is_ignored_with_a_log_line_when_auto_lands_on_the_cpu(caplog, digits):
    if _cd._gpu.uses_philox(__import__("rbm")._backend.array_module("auto")):
        pytest.skip("a GPU is present here")
    with caplog.at_level(logging.INFO, logger="rbm._gpu._precision"):
        model = RBM(n_components=4, n_iter=1, device="auto", precision="tf32", random_state=0).fit(digits.X_train[:40])
    assert model._precision == "float32"
    assert "applies on GPUs only; this model runs on the CPU in float32" in caplog.text
