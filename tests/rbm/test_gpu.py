"""GPU tests: the fused kernels against their numpy twins, cuDNN against im2col, and the GPU
branch against the CPU's, parameter for parameter.  Marked ``gpu``; skipped without cupy and a
CUDA device (scripts/gpu-check runs them on a GPU machine)."""

import numpy as np
import pytest

from rbm import DBN, RBM, ConvNet, DeviceDataCache, gpu_available, warm_up
from rbm._gpu import PhiloxStream, download_all, stand_in, upload
from rbm._gpu._reference import ReferenceOps
from rbm.conv import _im2col
from rbm.datasets import load_digits01

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="needs cupy and a CUDA GPU")]

DTYPES = [np.float32, np.float64]


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


@pytest.fixture(scope="module")
def ops():
    from rbm._gpu._cuda import cuda_kernels

    return cuda_kernels()


@pytest.fixture(scope="module")
def digits():
    return load_digits01()


@pytest.mark.parametrize("dtype", DTYPES)
def test_philox_fills_on_the_gpu_exactly_what_numpy_draws(cp, dtype):
    out = cp.empty((123, 45), dtype=dtype)
    PhiloxStream(99).random(out.shape, dtype, out=out)
    np.testing.assert_array_equal(out.get(), PhiloxStream(99).random(out.shape, dtype))
    normal = cp.empty(5000, dtype=dtype)
    PhiloxStream(5).standard_normal(normal.shape, dtype, out=normal)
    np.testing.assert_allclose(normal.get(), PhiloxStream(5).standard_normal(5000, dtype), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_cd_kernels_match_their_numpy_twins(cp, ops, dtype):
    rng, reference = np.random.default_rng(0), ReferenceOps()
    x, bias = rng.normal(size=(64, 300)).astype(dtype), rng.normal(size=300).astype(dtype)
    tolerance = {"rtol": 1e-5 if dtype == np.float32 else 1e-12, "atol": 1e-6 if dtype == np.float32 else 1e-13}
    host, device = x.copy(), cp.asarray(x)
    reference.bias_sigmoid_(host, bias, 0.5)
    ops.bias_sigmoid_(device, cp.asarray(bias), 0.5)
    np.testing.assert_allclose(device.get(), host, **tolerance)
    host, device = x.copy(), cp.asarray(x)
    host_sample, device_sample = np.empty_like(host), cp.empty_like(device)
    reference.bias_sigmoid_sample_(host, bias, PhiloxStream(3), host_sample, -2.0)
    ops.bias_sigmoid_sample_(device, cp.asarray(bias), PhiloxStream(3), device_sample, -2.0)
    np.testing.assert_allclose(device.get(), host, **tolerance)
    # A sample flips only where u and p differ by an ulp of the two tanh implementations.
    assert np.mean(device_sample.get() == host_sample) > 0.9999
    host, device = x.copy(), cp.asarray(x)
    reference.bias_add_(host, bias, PhiloxStream(4))
    ops.bias_add_(device, cp.asarray(bias), PhiloxStream(4))
    np.testing.assert_allclose(device.get(), host, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_updater_and_backward_kernels_match_their_numpy_twins(cp, ops, dtype):
    rng, reference = np.random.default_rng(1), ReferenceOps()
    arrays = [rng.normal(size=1000).astype(dtype) for _ in range(4)]
    tolerance = {"rtol": 1e-5 if dtype == np.float32 else 1e-12, "atol": 1e-6 if dtype == np.float32 else 1e-13}
    for name, settings in [("sgd_step_", (0.9, 0.01, 1e-3, True)), ("adagrad_step_", (0.01, 1e-8, 0.0)),
                           ("adam_step_", None), ("momentum_step_", (0.5, 0.25)), ("sigmoid_backward_", ())]:
        host = [a.copy() for a in arrays]
        device = [cp.asarray(a) for a in arrays]
        if name == "adam_step_":
            host[2], device[2] = np.abs(host[2]), cp.abs(device[2])
            getattr(reference, name)(*host, 0.9, 0.999, 0.001, 1e-8, 1e-4)
            getattr(ops, name)(*device, 0.9, 0.999, 0.001, 1e-8, 1e-4)
        elif name == "adagrad_step_":
            host[1], device[1] = np.abs(host[1]), cp.abs(device[1])
            getattr(reference, name)(*host[:3], *settings)
            getattr(ops, name)(*device[:3], *settings)
        else:
            getattr(reference, name)(*host[:3], *settings)
            getattr(ops, name)(*device[:3], *settings)
        for h, d in zip(host, device):
            np.testing.assert_allclose(d.get(), h, err_msg=name, **tolerance)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 50, 300])  # 300: more rows than the kernel's one block has threads
def test_the_softmax_cross_entropy_kernel_matches_its_numpy_twin(cp, ops, dtype, rows):
    rng, reference = np.random.default_rng(5), ReferenceOps()
    tolerance = {"rtol": 1e-5 if dtype == np.float32 else 1e-12, "atol": 1e-6 if dtype == np.float32 else 1e-14}
    z = (rng.normal(size=(rows, 10)) * 8).astype(dtype)  # wide logits: the row maximum's shift matters
    labels, bias = rng.integers(0, 10, size=rows), rng.normal(size=10).astype(dtype)
    for with_bias in (False, True):
        host_total, device_total = np.full((), 2.0, dtype=dtype), cp.full((), 2.0, dtype=dtype)
        loss, grad = reference.softmax_cross_entropy(z, labels, bias if with_bias else None, total=host_total)
        device_z = cp.asarray(z)
        device_loss, device_grad = ops.softmax_cross_entropy(device_z, cp.asarray(labels),
                                                             cp.asarray(bias) if with_bias else None, out=device_z,
                                                             total=device_total)
        assert device_grad is device_z  # in place, as the DBN asks
        np.testing.assert_allclose(device_grad.get(), grad, **tolerance)
        np.testing.assert_allclose(float(device_loss), float(loss), **tolerance)
        np.testing.assert_allclose(float(device_total), float(host_total), **tolerance)
        assert float(device_total) > 2.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_sum_and_activation_derivative_kernels_match_their_numpy_twins(cp, ops, dtype):
    rng, reference = np.random.default_rng(6), ReferenceOps()
    eps = np.finfo(dtype).eps
    for shape in [(1, 1), (50, 257), (1000, 33), (3, 5000)]:
        x, weights = rng.normal(size=shape).astype(dtype), rng.normal(size=shape[0]).astype(dtype)
        # Two summation orders of m terms differ by at most about 2 m eps sum|terms| (and products add one rounding).
        by_column = {"rtol": 0, "atol": 2 * (shape[0] + 1) * eps * np.abs(x).sum(axis=0).max() * 5}
        np.testing.assert_allclose(ops.column_sums(cp.asarray(x)).get(), reference.column_sums(x), **by_column)
        np.testing.assert_allclose(ops.column_sums(cp.asarray(x), cp.asarray(weights)).get(),
                                   reference.column_sums(x, weights), **by_column)
        by_row = {"rtol": 0, "atol": 2 * (shape[1] + 1) * eps * np.abs(x).sum(axis=1).max()}
        np.testing.assert_allclose(ops.row_sums(cp.asarray(x)).get(), reference.row_sums(x), **by_row)
    tolerance = {"rtol": 1e-6 if dtype == np.float32 else 1e-14, "atol": 0}
    y, dy = rng.random(size=(20, 30)).astype(dtype) - 0.3, rng.normal(size=(20, 30)).astype(dtype)
    for activation in ("identity", "relu", "sigmoid", "tanh"):
        np.testing.assert_allclose(ops.activation_backward(activation, cp.asarray(y), cp.asarray(dy)).get(),
                                   reference.activation_backward(activation, y, dy), err_msg=activation, **tolerance)


@pytest.mark.parametrize("kernel, stride, padding", [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1)),
                                                      ((3, 3), (1, 1), (0, 0))])
def test_maxpool_kernels_match_the_im2col_pooling(cp, ops, kernel, stride, padding):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 4, size=(3, 9, 9, 5)).astype(np.float32)  # many ties: the first max must win
    out, winners = _im2col.maxpool_forward(x, kernel, stride, padding, np)
    dout = rng.normal(size=out.shape).astype(np.float32)
    padded_shape = (3, 9 + 2 * padding[0], 9 + 2 * padding[1], 5)
    dx = _im2col.maxpool_backward(dout, winners, padded_shape, kernel, stride, padding, np)
    device_out = ops.maxpool_forward(cp.asarray(x), kernel, stride, padding)
    np.testing.assert_array_equal(device_out.get(), out)
    device_dx = ops.maxpool_backward(cp.asarray(dout), device_out, cp.asarray(x), kernel, stride, padding)
    np.testing.assert_allclose(device_dx.get(), dx, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype, precision, tolerance", [(np.float32, "float32", 1e-4), (np.float64, "float32", 1e-10),
                                                         (np.float32, "tf32", 5e-3)])
def test_cudnn_convolutions_match_im2col_within_tolerance(cp, dtype, precision, tolerance):
    from rbm.conv._cudnn import CudnnConvolution, cudnn_available

    if not cudnn_available():
        pytest.skip("nvidia-cudnn-frontend is not installed")
    rng = np.random.default_rng(3)
    c, h, w, n, f, kernel, stride, padding = 3, 12, 12, 16, 8, (5, 5), (1, 1), (2, 2)
    x = rng.normal(size=(c, h, w, n)).astype(dtype)
    weights = rng.normal(size=(f, c, *kernel)).astype(dtype) * 0.2
    convolution = CudnnConvolution((c, h, w), f, kernel, stride, padding, n, dtype, precision)
    padded = _im2col.pad_spatial(x, padding, 0.0, np)
    oh, ow = _im2col.output_size(h, 5, 1, 2), _im2col.output_size(w, 5, 1, 2)
    cols = _im2col.im2col_chwn(padded, kernel, stride, np.empty((5, 5, c, oh, ow, n), dtype=dtype))
    w_matrix = weights.transpose(0, 2, 3, 1).reshape(f, -1)
    expected = (w_matrix @ cols.reshape(w_matrix.shape[1], -1)).reshape(f, oh, ow, n)
    y = convolution.forward(cp.asarray(x), cp.asarray(weights)).get()
    scale = np.abs(expected).max()
    np.testing.assert_allclose(y / scale, expected / scale, atol=tolerance)
    dy = rng.normal(size=expected.shape).astype(dtype)
    dcols = (w_matrix.T @ dy.reshape(f, -1)).reshape(5, 5, c, oh, ow, n)
    dx = _im2col.col2im_chwn(dcols, padded.shape, padding, stride, np)
    dw = (cols.reshape(w_matrix.shape[1], -1) @ dy.reshape(f, -1).T).reshape(5, 5, c, f).transpose(3, 2, 0, 1)
    got_dx = convolution.backward_data(cp.asarray(dy), cp.asarray(weights)).get()
    got_dw = convolution.backward_filter(cp.asarray(x), cp.asarray(dy)).get()
    np.testing.assert_allclose(got_dx / np.abs(dx).max(), dx / np.abs(dx).max(), atol=tolerance)
    np.testing.assert_allclose(got_dw / np.abs(dw).max(), dw / np.abs(dw).max(), atol=tolerance)


@pytest.mark.parametrize("persistent", [False, True])
def test_a_gpu_rbm_learns_the_cpu_branchs_weights_from_the_same_draws(persistent, digits):
    settings = dict(n_components=32, n_iter=3, random_state=0, dtype=np.float64, persistent=persistent)
    with stand_in(fused=False):
        cpu = RBM(**settings).fit(digits.X_train)
    gpu = RBM(device="gpu", **settings).fit(digits.X_train)
    for name, value in cpu.parameters().items():
        np.testing.assert_allclose(gpu.parameters()[name], value, rtol=0, atol=1e-8, err_msg=name)


def test_a_gpu_dbn_fine_tunes_to_the_cpu_branchs_weights(digits):
    settings = dict(hidden_layer_sizes=(32, 16), pretrain_epochs=2, finetune_epochs=2, finetune_updater="adam",
                    finetune_dropout=0.3, random_state=0, dtype=np.float64)
    with stand_in(fused=False):
        cpu = DBN(**settings).fit(digits.X_train, digits.y_train)
    gpu = DBN(device="gpu", **settings).fit(digits.X_train, digits.y_train)
    for name, value in cpu.parameters().items():
        np.testing.assert_allclose(gpu.parameters()[name], value, rtol=0, atol=1e-8, err_msg=name)


def test_a_gpu_lenet_trains_to_the_cpu_branchs_weights(digits):
    layers = [{"type": "conv", "filters": 6, "kernel": 3, "padding": 1}, {"type": "maxpool", "size": 2},
              {"type": "dropout", "rate": 0.2}, {"type": "dense", "units": 32, "activation": "relu"}]
    X = digits.X_train[:512].reshape(-1, 1, 8, 8)
    settings = dict(layers=layers, input_shape=(1, 8, 8), epochs=2, batch_size=64, dtype="float64", random_state=0)
    with stand_in(fused=False):
        cpu = ConvNet(**settings).fit(X, digits.y_train[:512])
    gpu = ConvNet(device="gpu", **settings).fit(X, digits.y_train[:512])
    for name, value in cpu.parameters().items():
        np.testing.assert_allclose(gpu.parameters()[name], value, rtol=0, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("precision", ["tf32", "bfloat16"])
def test_reduced_precision_learns_an_rbm_as_good_as_float32(precision, digits):
    errors = {}
    for chosen in ("float32", precision):
        model = RBM(n_components=64, n_iter=5, random_state=0, device="gpu", precision=chosen).fit(digits.X_train)
        errors[chosen] = model.reconstruction_error(digits.X_test)
    assert errors[precision] < 1.05 * errors["float32"]


def test_uploads_downloads_and_the_device_cache_keep_every_byte(cp):
    rng = np.random.default_rng(4)
    big = rng.random((3000, 784), dtype=np.float32)  # 9.4 MB: several pinned chunks
    np.testing.assert_array_equal(upload(big, cp).get(), big)
    arrays = {"W": cp.asarray(big[:10]), "b": cp.arange(5, dtype=cp.float32), "i": cp.arange(3)}
    host = download_all(arrays)
    assert list(host) == ["W", "b", "i"] and host["i"].dtype == np.int64
    np.testing.assert_array_equal(host["W"], big[:10])
    cache = DeviceDataCache(budget_bytes=2 * big.nbytes)
    first = cache.get("p0", big, cp)
    assert cache.get("p0", big, cp) is first
    cache.get("p1", big, cp)
    cache.get("p2", big, cp)  # over budget: p0 goes
    assert cache.report()["evictions"] == 1 and cache.report()["used_bytes"] <= 2 * big.nbytes


def test_warm_up_compiles_a_models_kernels_without_touching_it(digits):
    model = DBN((16,), pretrain_epochs=1, finetune_epochs=1, device="gpu", random_state=0)
    model.initialize(64, classes=np.arange(10))
    before = model.parameters()
    assert warm_up(model) > 0
    for name, value in model.parameters().items():
        np.testing.assert_array_equal(value, before[name])


def test_a_partition_kept_on_the_gpu_trains_as_its_host_rows_and_is_checked_there(cp, digits):
    """What a Spark node on a GPU does (node.executor._node: rbm.DeviceDataCache): train_partition on a cupy array."""
    X, y = digits.X_train[:300], digits.y_train[:300]
    models = []
    for rows in (X, cp.asarray(X)):
        model = DBN((16,), device="gpu", dtype=np.float64, random_state=0).initialize(64, classes=np.arange(10))
        for phase in model.phases():
            model.train_partition(rows, y, phase, np.random.default_rng(1))
        models.append(model)
    for name, value in models[0].parameters().items():
        np.testing.assert_allclose(models[1].parameters()[name], value, rtol=0, atol=1e-12, err_msg=name)
    bad = cp.asarray(X).copy()
    bad[7, 3] = 2.0
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\].*row 7"):
        models[0].train_partition(bad, y, "rbm0", np.random.default_rng(1))


def test_the_data_cache_takes_its_share_of_the_gpus_pool_and_never_holds_more(cp, tmp_path):
    from rbm._gpu._budget import SharedGpuBudget

    free, _ = cp.cuda.runtime.memGetInfo()
    cache = DeviceDataCache(shared=SharedGpuBudget("test-gpu", folder=str(tmp_path)))
    part = np.zeros(64 << 20, dtype=np.uint8)
    for key in range(3):
        cache.get(key, part, cp)
    report = cache.report()
    assert 0.4 * free <= report["budget_bytes"] <= 0.5 * free and report["peak_bytes"] <= report["budget_bytes"]
    cache.clear()
    assert cache.report()["used_bytes"] == 0 and not list(tmp_path.glob("test-gpu/*.member"))


def test_an_upload_on_a_non_default_stream_is_ordered_behind_that_streams_kernels(cp):
    rng = np.random.default_rng(5)
    host = rng.random((2000, 784), dtype=np.float32)
    with cp.cuda.Stream(non_blocking=True):
        busy = cp.ones((4096, 4096), dtype=cp.float32)
        for _ in range(3):
            busy = busy @ busy * 1e-4  # work queued on this stream before the upload
        copy = upload(host, cp)
        np.testing.assert_array_equal(copy.get(), host)


def test_lenet_on_near_equal_partitions_builds_each_batch_sizes_plans_once(cp, digits):
    from rbm.conv import _cudnn

    if not _cudnn.cudnn_available():
        pytest.skip("nvidia-cudnn-frontend is not installed: im2col")
    assert _cudnn.convolution_backend() == "cudnn"
    X = digits.X_train[:286].reshape(-1, 1, 8, 8)
    y = np.asarray(digits.y_train[:286]) % 10
    net = ConvNet(layers=[{"type": "conv", "filters": 4, "kernel": 3}, {"type": "flatten"}],
                  input_shape=(1, 8, 8), n_classes=10, batch_size=64, device="gpu", random_state=0).initialize()
    builds = _cudnn.PLAN_CACHE.builds
    for _ in range(2):
        for part in np.array_split(np.arange(286), 2):  # 143 rows each: minibatches of 64 and 15
            net.train_partition(cp.asarray(X[part]), y[part], "train", np.random.default_rng(0))
    assert _cudnn.PLAN_CACHE.builds - builds <= 2  # 64 and 15, once each
    assert "_resident_data" not in net.__dict__  # no reference kept to a partition handed over on the device
