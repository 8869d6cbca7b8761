"""Device choice and the CD kernels' building blocks (numpy path; cupy shares the code)."""

import numpy as np
import pytest
from scipy.special import expit

from rbm import RBM, gpu_available
from rbm._gpu import stand_in
from rbm import _blas
from rbm.boltzmann import _cd
from rbm.datasets import load_digits01


@pytest.mark.skipif(gpu_available(), reason="a GPU is present here")
def test_gpu_device_without_a_gpu_raises_a_clear_error():
    with pytest.raises(ValueError, match="device='gpu' was requested but no GPU is usable"):
        RBM(n_components=4, device="gpu").fit(np.zeros((3, 5)))


@pytest.mark.skipif(gpu_available(), reason="a GPU is present here")
def test_auto_device_falls_back_to_numpy_on_the_cpu():
    model = RBM(n_components=4, device="auto", n_iter=1, random_state=0).fit(load_digits01().X_train[:50])
    assert isinstance(model._W, np.ndarray)
    assert isinstance(model.transform(np.zeros((2, 64), np.float32)), np.ndarray)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs a GPU with cupy")
def test_gpu_training_matches_the_cpu_closely():
    # The GPU draws from a counter-based Philox stream the CPU can repeat (rbm._gpu.stand_in(fused=False)):
    # from the same seed both backends then take the same samples, and in float64 learn the same weights.
    # (The premise before, "different generators: compare what was learned", hid cupy 14's
    # Generator.random(out=) broadcasting one draw over the whole minibatch.)
    X = load_digits01().X_train[:200]
    with stand_in(fused=False):
        cpu = RBM(n_components=16, n_iter=1, random_state=0, dtype=np.float64).fit(X)
    gpu = RBM(n_components=16, n_iter=1, random_state=0, dtype=np.float64, device="gpu").fit(X)
    assert type(gpu.components_) is np.ndarray
    np.testing.assert_allclose(gpu.components_, cpu.components_, rtol=0, atol=1e-8)
    assert abs(cpu.reconstruction_error(X) - gpu.reconstruction_error(X)) < 1e-8


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_accumulate_updates_in_place_and_matches_numpy(dtype):
    rng = np.random.default_rng(0)
    A, B = rng.random((7, 5)).astype(dtype), rng.random((7, 3)).astype(dtype)
    C = rng.random((5, 3)).astype(dtype)
    expected = 0.3 * A.T @ B + 0.9 * C
    result = _blas.gemm_tn_accumulate(A, B, C, alpha=0.3, beta=0.9, scratch=np.empty_like(C))
    assert result is C
    np.testing.assert_allclose(C, expected, rtol=1e-5 if dtype == np.float32 else 1e-12)
    _blas.gemm_tn_accumulate(A, B, C, alpha=1.0, beta=0.0)
    np.testing.assert_allclose(C, A.T @ B, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_numpy_openblas_gemm_with_beta_matches_matmul_or_declines_cleanly():
    from rbm import _blas

    rng = np.random.default_rng(1)
    A, B = rng.random((9, 6), dtype=np.float32), rng.random((9, 4), dtype=np.float32)
    C = rng.random((6, 4), dtype=np.float32)
    expected = 0.1 * A.T @ B + 0.7 * C
    if _blas.gemm_tn(A, B, C, 0.1, 0.7):
        np.testing.assert_allclose(C, expected, rtol=1e-5)
    # Strided views are declined (and the caller falls back to matmul), never mis-read.
    assert not _blas.gemm_tn(A[::2], B[::2], C, 0.1, 0.7)


def test_in_place_sigmoid_matches_expit_and_its_negation():
    x = np.linspace(-60, 60, 1001)
    # float64 results in [0, 1] by two formulas: numpy's tanh (within 3 ulp on any of its SIMD paths), a
    # halving and an addition, against scipy's expit (within 2 ulp): at most about 7e-16 apart.
    np.testing.assert_allclose(_cd.sigmoid_(x.copy()), expit(x), atol=1e-15)
    np.testing.assert_allclose(_cd.sigmoid_(x.copy(), negate=True), -expit(x), atol=1e-15)
    x32 = x.astype(np.float32)
    assert _cd.sigmoid_(x32).dtype == np.float32 and np.all((x32 >= 0) & (x32 <= 1))


def test_bernoulli_sampling_into_a_buffer_has_the_requested_frequencies():
    generator = _cd.device_generator(np.random.default_rng(0), np)
    probabilities = np.tile(np.array([0.0, 0.1, 0.5, 0.9, 1.0], np.float32), (40000, 1))
    out = np.empty_like(probabilities)
    _cd.sample_bernoulli_(generator, probabilities, out)
    assert set(np.unique(out)) <= {0.0, 1.0}
    np.testing.assert_allclose(out.mean(axis=0), [0.0, 0.1, 0.5, 0.9, 1.0], atol=0.01)


class UniformsOnly:
    """A generator offering only ``random(out=, dtype=)``, as cupy's does: the samplers' other path."""

    def __init__(self, seed: int) -> None:
        self._generator = np.random.default_rng(seed)

    def random(self, size=None, dtype=np.float64, out=None):
        return self._generator.random(size, dtype=dtype, out=out)


@pytest.mark.parametrize("make_generator", [lambda: np.random.Generator(np.random.SFC64(4)), lambda: UniformsOnly(4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sampling_from_total_inputs_or_negated_probabilities_gives_the_very_samples_of_their_sigmoid(
        make_generator, dtype):
    # The PCD step's shortcuts: x -> samples of sigmoid(x) in place, and samples of p from the -p it keeps.
    x = np.random.default_rng(0).normal(0, 4, (1000, 1001)).astype(dtype)  # enough to tell 65536 from 65535
    reference = _cd.sample_bernoulli_(make_generator(), _cd.sigmoid_(x.copy()), np.empty_like(x))
    assert 0.3 < reference.mean() < 0.7
    fused = _cd.sample_sigmoid_(make_generator(), x.copy(), np.empty_like(x))
    np.testing.assert_array_equal(fused, reference)
    minus_p = _cd.sigmoid_(x.copy(), negate=True)
    np.testing.assert_array_equal(_cd.sample_bernoulli_(make_generator(), minus_p, np.empty_like(x), negated=True), reference)


def test_sampling_generators_are_seeded_from_the_model_generator():
    first = _cd.device_generator(np.random.default_rng(3), np).random(5)
    second = _cd.device_generator(np.random.default_rng(3), np).random(5)
    np.testing.assert_array_equal(first, second)


def test_a_gpu_held_in_exclusive_process_mode_elsewhere_is_not_available_so_auto_takes_the_cpu(monkeypatch):
    from rbm import resolve_device
    from support.fake_gpu import install_fake_cupy

    install_fake_cupy(monkeypatch, {"busy": True})
    assert not gpu_available() and resolve_device("auto") == "cpu"
    with pytest.raises(ValueError, match="device='gpu' was requested but no GPU is usable"):
        resolve_device("gpu")
    install_fake_cupy(monkeypatch, {})
    assert gpu_available() and resolve_device("auto") == "gpu"
