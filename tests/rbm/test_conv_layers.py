"""Layers of the conv net: gradients against central finite differences (float64), pooling tie
rule, im2col against a direct convolution, dropout, and clear errors for bad specs."""

from __future__ import annotations

import numpy as np
import pytest
from support.numerics import matmul_error_bound, unit_roundoff

from rbm.conv._ops import softmax_cross_entropy
from rbm.conv import _gemm
from rbm.conv._gemm import matmul_pixels, matmul_pixels_nt, pixel_chunk
from rbm.conv._im2col import col2im_chwn, im2col_chwn, output_size
from rbm.conv._layers import build_layer

EPS = 1e-6


def numerical_gradient(loss, array: np.ndarray) -> np.ndarray:
    """Central differences of the scalar ``loss()`` with respect to every entry of ``array``."""
    grad = np.zeros_like(array)
    for index in np.ndindex(array.shape):
        saved = array[index]
        array[index] = saved + EPS
        plus = loss()
        array[index] = saved - EPS
        minus = loss()
        array[index] = saved
        grad[index] = (plus - minus) / (2 * EPS)
    return grad


def make_layer(spec: dict, input_shape: tuple, seed: int = 0):
    layer = build_layer("probe0", spec, input_shape, np, np.dtype(np.float64))
    layer.init_params(np.random.default_rng(seed))
    for name, value in layer.params.items():  # non-zero biases so their gradient path is exercised
        if name == "b":
            value[...] = np.random.default_rng(seed + 1).normal(size=value.shape)
    return layer


def distinct_input(shape: tuple, seed: int) -> np.ndarray:
    """Values at least 0.01 apart, so max pooling has no near-ties for the finite differences."""
    rng = np.random.default_rng(seed)
    return (rng.permutation(int(np.prod(shape))).reshape(shape) * 0.01 - 0.305)  # never exactly 0: the ReLU kink.astype(np.float64)


def assert_gradients_match(spec: dict, input_shape: tuple, n: int = 2, seed: int = 0) -> None:
    layer = make_layer(spec, input_shape, seed)
    internal = (*input_shape, n) if len(input_shape) == 3 else (n, *input_shape)  # CHWN or (N, D)
    x = distinct_input(internal, seed)
    weights = np.random.default_rng(seed + 2).normal(size=layer.forward(x.copy(), True).shape)

    def loss() -> float:
        return float(np.sum(layer.forward(x, True) * weights))

    loss()
    layer.needs_input_grad = True
    dx = layer.backward(weights.copy())
    grads = {name: value.copy() for name, value in layer.grads.items()}
    np.testing.assert_allclose(dx, numerical_gradient(loss, x), rtol=1e-5, atol=1e-7)
    for name, param in layer.params.items():
        np.testing.assert_allclose(grads[name], numerical_gradient(loss, param), rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.parametrize(
    "spec, input_shape",
    [
        ({"type": "conv", "filters": 3, "kernel": 3}, (2, 6, 6)),
        ({"type": "conv", "filters": 2, "kernel": 3, "stride": 2, "padding": 1}, (2, 7, 7)),
        ({"type": "conv", "filters": 2, "kernel": [3, 2], "stride": [2, 1], "padding": [1, 0]}, (1, 6, 5)),
        ({"type": "conv", "filters": 2, "kernel": 2, "activation": "relu"}, (2, 5, 5)),
        ({"type": "conv", "filters": 2, "kernel": 2, "activation": "sigmoid"}, (1, 4, 4)),
        ({"type": "conv", "filters": 2, "kernel": 2, "activation": "tanh", "padding": 2}, (1, 3, 3)),
        ({"type": "maxpool", "size": 2}, (2, 6, 6)),
        ({"type": "maxpool", "size": 2}, (1, 5, 7)),
        ({"type": "maxpool", "size": 3, "stride": 2, "padding": 1}, (2, 7, 7)),
        ({"type": "maxpool", "size": [2, 3], "stride": 1}, (1, 5, 5)),
        ({"type": "avgpool", "size": 2}, (2, 6, 6)),
        ({"type": "avgpool", "size": 3, "stride": 1, "padding": 1}, (1, 5, 5)),
        ({"type": "dense", "units": 4}, (6,)),
        ({"type": "dense", "units": 3, "activation": "relu"}, (5,)),
        ({"type": "dense", "units": 3, "activation": "sigmoid"}, (5,)),
        ({"type": "dense", "units": 3, "activation": "tanh", "init": "he"}, (5,)),
        ({"type": "relu"}, (2, 3, 3)),
        ({"type": "sigmoid"}, (4,)),
        ({"type": "tanh"}, (2, 3, 3)),
        ({"type": "identity"}, (4,)),
        ({"type": "flatten"}, (2, 3, 4)),
    ],
    ids=lambda value: str(value).replace(" ", "") if isinstance(value, dict) else None,
)
def test_layer_gradients_match_central_finite_differences(spec, input_shape):
    assert_gradients_match(spec, input_shape)


def test_max_pool_ties_send_the_gradient_to_the_first_max_in_row_major_order():
    layer = make_layer({"type": "maxpool", "size": 2}, (1, 4, 4))
    x = np.zeros((1, 4, 4, 1))
    x[0, 2, 3, 0] = x[0, 3, 2, 0] = 1.0  # bottom-right window: tie between (0, 1) and (1, 0)
    out = layer.forward(x, True)
    np.testing.assert_array_equal(out[0, :, :, 0], [[0.0, 0.0], [0.0, 1.0]])
    dx = layer.backward(np.array([1.0, 2.0, 3.0, 4.0]).reshape(1, 2, 2, 1))[0, :, :, 0]
    expected = np.zeros((4, 4))
    expected[0, 0], expected[0, 2], expected[2, 0] = 1.0, 2.0, 3.0  # all-zero windows: the first element wins
    expected[2, 3] = 4.0  # the earlier of the two tied maxima
    np.testing.assert_array_equal(dx, expected)


def test_overlapping_max_pool_ties_give_each_window_one_winner():
    layer = make_layer({"type": "maxpool", "size": 2, "stride": 1}, (1, 3, 3))
    out = layer.forward(np.ones((1, 3, 3, 1)), True)
    dx = layer.backward(np.ones_like(out))[0, :, :, 0]
    # every 2x2 window of ones sends its unit gradient to its top-left element
    np.testing.assert_array_equal(dx, [[1, 1, 0], [1, 1, 0], [0, 0, 0]])
    assert dx.sum() == out.size


@pytest.mark.parametrize("size, stride, padding", [(2, 2, 0), (3, 2, 1), (3, 1, 0), ([2, 3], 1, 0)])
@pytest.mark.parametrize("seed", [0, 1])
def test_max_pool_routes_each_gradient_to_the_first_max_of_its_window_as_a_loop_does(size, stride, padding, seed):
    # Small integers: most windows hold ties, so the winners recorded in the forward pass must
    # be the first max in row-major (ky, kx) order, exactly one per window.
    layer = make_layer({"type": "maxpool", "size": size, "stride": stride, "padding": padding}, (2, 7, 7))
    x = np.random.default_rng(seed).integers(0, 3, size=(2, 7, 7, 3)).astype(np.float64)
    out = layer.forward(x, True)
    dout = np.random.default_rng(seed + 10).integers(1, 1000, size=out.shape).astype(np.float64)  # sums exact in any order
    dx = layer.backward(dout)
    (kh, kw), (sy, sx), (ph, pw) = layer.kernel, layer.stride, layer.padding
    padded = np.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)), constant_values=-np.inf)
    expected = np.zeros_like(padded)
    for a, oy, ox, n in np.ndindex(out.shape):
        window = padded[a, oy * sy : oy * sy + kh, ox * sx : ox * sx + kw, n]
        ky, kx = np.unravel_index(np.argmax(window), window.shape)  # argmax: the first max, row-major
        assert out[a, oy, ox, n] == window[ky, kx]
        expected[a, oy * sy + ky, ox * sx + kx, n] += dout[a, oy, ox, n]
    np.testing.assert_array_equal(dx, expected[:, ph : ph + 7, pw : pw + 7, :])


def test_softmax_cross_entropy_gradient_matches_finite_differences_and_loss_is_exact():
    rng = np.random.default_rng(3)
    logits, labels = rng.normal(size=(5, 4)) * 3, np.array([0, 3, 1, 1, 2])
    loss, grad = softmax_cross_entropy(logits.copy(), labels, np)
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert float(loss) == pytest.approx(-np.mean(np.log(probabilities[np.arange(5), labels])), rel=1e-12)
    numeric = numerical_gradient(lambda: float(softmax_cross_entropy(logits, labels, np)[0]), logits)
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-9)


def test_softmax_cross_entropy_stays_finite_for_huge_logits():
    loss, grad = softmax_cross_entropy(np.array([[1000.0, -1000.0, 0.0]]), np.array([1]), np)
    assert float(loss) == pytest.approx(2000.0)
    assert np.isfinite(grad).all()


def test_im2col_convolution_equals_a_direct_convolution():
    rng = np.random.default_rng(0)
    c, h, w, n, f, k, stride = 3, 7, 6, 2, 4, 3, 2
    x, weights = rng.normal(size=(c, h, w, n)), rng.normal(size=(f, c, k, k))
    oh, ow = output_size(h, k, stride, 0), output_size(w, k, stride, 0)
    cols = im2col_chwn(x, (k, k), (stride, stride), np.empty((k, k, c, oh, ow, n)))
    out = (weights.transpose(0, 2, 3, 1).reshape(f, -1) @ cols.reshape(k * k * c, -1)).reshape(f, oh, ow, n)
    direct = np.zeros_like(out)
    for oy in range(oh):
        for ox in range(ow):
            patch = x[:, oy * stride : oy * stride + k, ox * stride : ox * stride + k, :]
            direct[:, oy, ox, :] = np.einsum("chwn,fchw->fn", patch, weights)
    # float64 sums of 27 products, in another order: within 2 * 27 u * sum |terms| (at most 1.3e-13 here).
    np.testing.assert_allclose(out, direct, rtol=0, atol=float(matmul_error_bound(
        np.abs(weights.transpose(0, 2, 3, 1).reshape(f, -1)), np.abs(cols.reshape(k * k * c, -1))).max()))
    # col2im is the adjoint of im2col: <im2col(x), d> == <x, col2im(d)>, two sums of the same 324 products
    # (col2im adds up to 4 of them per input first): within 2 * 324 u * sum |products|.
    d = rng.normal(size=cols.shape)
    back = col2im_chwn(d, x.shape, (0, 0), (stride, stride), np)
    products = cols * d
    bound = 2 * products.size * unit_roundoff(np.float64) * np.abs(products).sum()
    assert np.sum(products) == pytest.approx(np.sum(x * back), rel=0, abs=bound)


def test_pixel_chunked_products_equal_whole_ones_remainder_chunk_included(monkeypatch):
    # LeNet's conv0 shapes at batch 64 (20 filters, 25 weights, 36,864 pixels) are chunked, conv1's are not;
    # 36,864 + 7 pixels leave a short last chunk.  Small integers in float32: every sum is exact (< 2**24).
    monkeypatch.setattr(_gemm, "direct_sgemm", lambda: True)  # as on OpenBLAS's SkylakeX kernels
    f, inner, pixels = 20, 25, 36_864 + 7
    chunk = pixel_chunk(f, inner, pixels, np)
    assert chunk is not None and pixels % chunk != 0
    assert pixel_chunk(50, 500, 4096, np) is None
    rng = np.random.default_rng(0)
    weights, cols, dz = (rng.integers(-8, 8, size=shape).astype(np.float32) for shape in
                         [(f, inner), (inner, pixels), (f, pixels)])
    np.testing.assert_array_equal(matmul_pixels(weights, cols, np.empty((f, pixels), np.float32), np), weights @ cols)
    np.testing.assert_array_equal(matmul_pixels_nt(cols, dz, np), cols @ dz.T)


def test_products_stay_whole_where_chunks_do_not_pay(monkeypatch):
    monkeypatch.setattr(_gemm, "direct_sgemm", lambda: True)
    assert pixel_chunk(20, 25, 36_864, np, np.float64) is None  # the direct kernels are single precision
    monkeypatch.setattr(_gemm, "direct_sgemm", lambda: False)  # e.g. OpenBLAS's Haswell kernels
    assert pixel_chunk(20, 25, 36_864, np) is None


def test_dropout_scales_kept_units_and_backpropagates_through_the_same_mask():
    layer = make_layer({"type": "dropout", "rate": 0.25}, (1000,))
    layer.rng = np.random.default_rng(5)
    x = np.ones((4, 1000))
    out = layer.forward(x, True)
    assert set(np.unique(out)) == {0.0, 1.0 / 0.75}
    assert abs((out == 0).mean() - 0.25) < 0.03
    np.testing.assert_array_equal(layer.backward(np.full_like(x, 2.0)), out * 2.0)
    np.testing.assert_array_equal(layer.forward(x, False), x)  # inference: identity


@pytest.mark.parametrize(
    "spec, input_shape, message",
    [
        ({"type": "conv", "filters": 2, "kernel": 7}, (1, 5, 5), "kernel (7, 7) is larger than its padded input"),
        ({"type": "conv", "filters": 0, "kernel": 3}, (1, 5, 5), "filters must be a positive int"),
        ({"type": "conv", "filters": 2, "kernel": 3, "stride": 0}, (1, 5, 5), "stride must be >= 1"),
        ({"type": "conv", "filters": 2, "kernel": 3, "activation": "gelu"}, (1, 5, 5), "activation must be one of"),
        ({"type": "conv", "filters": 2, "kernel": 3, "init": "lecun"}, (1, 5, 5), "init must be one of"),
        ({"type": "conv", "filters": 2, "kernel": 3, "dilation": 2}, (1, 5, 5), "unknown setting(s) ['dilation']"),
        ({"type": "conv", "filters": 2, "kernel": 3}, (10,),
         "needs a (C, H, W) input, but receives shape (10,); flat rows need the net's input_shape=(C, H, W)"),
        ({"type": "maxpool", "size": 2}, (5, 5), "images without a channel axis need one: X[:, None]"),
        ({"type": "maxpool", "size": 6}, (1, 5, 5), "pooling window (6, 6) is larger than its input"),
        ({"type": "dense", "units": -1}, (5,), "units must be a positive int"),
        ({"type": "dropout", "rate": 1.0}, (5,), "dropout rate must be in [0, 1)"),
        ({"type": "lstm"}, (5,), "unknown layer type 'lstm'"),
        ({"units": 3}, (5,), "must be a dict with a 'type'"),
    ],
)
def test_invalid_layer_specs_are_refused_with_a_message_naming_the_layer(spec, input_shape, message):
    with pytest.raises(ValueError, match="probe0") as error:
        make_layer(spec, input_shape)
    assert message in str(error.value)
