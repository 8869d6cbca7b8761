"""Benchmark the GPU branch beside PyTorch doing the same math on the same GPU, and the CPUs.

Rows (samples per second, median of ``--repeats`` timings after a warm-up):

* ``cd1 V-H bB``: one CD-1 update of an RBM (784-500 at batch 100 and 1000, 784-2048 at 1000), data
  already on the device: sparkdbn's ``cd_step``; torch eager doing the same five GEMMs and
  elementwise work; and the GEMM-only bound (the five GEMMs alone, in cupy);
* ``lenet bB``: one LeNet training step (forward, backward, SGD) at batch 64 and 256: sparkdbn's
  ConvNet against torch + cuDNN (``torch.backends.cudnn`` / TF32 flags set to the same precision);
* ``dbn fit`` / ``lenet fit``: whole fits on digits28 (DBN(256, 256), 3 + 10 epochs, batch 50; LeNet 1
  epoch): a first and a second fit on the GPU (the first pays the kernel compiles the cache then
  keeps), against the same fit on the machine's CPUs.

Each row prints its ratio to torch on the same device and, for fits, GPU over CPU.  ``--cpu-only``
runs the CPU rows alone (any machine; what tests/test_bench_gpu.py runs), ``--quick`` shrinks
everything to seconds.  Rows whose peer is missing (no torch, no GPU) print ``-``.

    python scripts/bench_gpu.py                  # on a GPU machine: everything (about 4 minutes on an H100)
    python scripts/bench_gpu.py --cpu-only --quick
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import numpy as np

import rbm
from rbm.boltzmann import _cd
from rbm.datasets import load_digits28


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def timed(step: Callable[[], None], sync: Callable[[], None], steps: int, repeats: int) -> float:
    """Median seconds per step over ``repeats`` runs of ``steps`` (after one untimed run)."""
    step()
    sync()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        times.append((time.perf_counter() - started) / steps)
    return statistics.median(times)


def sync_for(xp: Any) -> Callable[[], None]:
    return (lambda: None) if xp is np else xp.cuda.Stream.null.synchronize


def sparkdbn_cd1(xp: Any, visible: int, hidden: int, batch: int, precision: str, args: Any) -> float:
    rng = np.random.default_rng(0)
    model = rbm.RBM(hidden, batch_size=batch, persistent=False, random_state=0, precision=precision,
                    device="cpu" if xp is np else "gpu").initialize(visible)
    data = _backend_array(xp, (rng.random((batch * 8, visible)) < 0.3).astype(np.float32))
    ws = model._workspace(batch)
    ws.V[:batch] = data[:batch]
    settings = model._settings()

    def step() -> None:
        _cd.cd_step(ws, batch, model._W, model._hbias, model._vbias, model._velocity, model._sampler, settings,
                    0.01, 0.5, measure_error=False)

    return timed(step, sync_for(xp), args.steps, args.repeats)


def gemm_bound(xp: Any, visible: int, hidden: int, batch: int, args: Any) -> float:
    rng = np.random.default_rng(0)
    V = _backend_array(xp, rng.random((2 * batch, visible), dtype=np.float32))
    H = _backend_array(xp, rng.random((2 * batch, hidden), dtype=np.float32))
    W = _backend_array(xp, rng.random((visible, hidden), dtype=np.float32) * 0.01)
    G = xp.empty_like(W)

    def step() -> None:  # v0 W, h W^T, vk W, and the stacked V^T H (two GEMMs' worth)
        xp.matmul(V[:batch], W, out=H[:batch])
        xp.matmul(H[batch:], W.T, out=V[batch:])
        xp.matmul(V[batch:], W, out=H[batch:])
        xp.matmul(V.T, H, out=G)

    return timed(step, sync_for(xp), args.steps, args.repeats)


def torch_cd1(torch: Any, device: str, visible: int, hidden: int, batch: int, args: Any) -> float:
    generator = torch.Generator(device=device).manual_seed(0)
    v0 = (torch.rand(batch, visible, device=device, generator=generator) < 0.3).float()
    W = torch.randn(visible, hidden, device=device, generator=generator) * 0.01
    hb, vb = torch.zeros(hidden, device=device), torch.zeros(visible, device=device)
    vW, vh, vv = torch.zeros_like(W), torch.zeros_like(hb), torch.zeros_like(vb)

    def step() -> None:
        h0 = torch.sigmoid(v0 @ W + hb)
        hs = (torch.rand_like(h0) < h0).float()
        vk = torch.sigmoid(hs @ W.T + vb)
        hk = torch.sigmoid(vk @ W + hb)
        vW.mul_(0.5).add_((v0.T @ h0 - vk.T @ hk) * (0.01 / batch))
        vh.mul_(0.5).add_((h0 - hk).sum(0) * (0.01 / batch))
        vv.mul_(0.5).add_((v0 - vk).sum(0) * (0.01 / batch))
        W.add_(vW), hb.add_(vh), vb.add_(vv)

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return timed(step, sync, args.steps, args.repeats)


def lenet_steps(args: Any) -> int:
    """Steps per timed LeNet repeat: a third of ``--steps`` (a LeNet step is ~10x a CD-1 step)."""
    return max(args.steps // 3, 2)


def sparkdbn_lenet(xp: Any, batch: int, precision: str, args: Any) -> float:
    rng = np.random.default_rng(0)
    X = rng.random((batch, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, size=batch)
    net = rbm.lenet(batch_size=batch, device="cpu" if xp is np else "gpu", precision=precision, random_state=0)
    net.initialize(classes=np.arange(10))
    X_device, y_device = _backend_array(xp, X), _backend_array(xp, y)

    def step() -> None:
        _, grads = net._loss_and_gradients(X_device, y_device)
        net._optimizer.step(net._refs, grads, decay=net._decay)

    return timed(step, sync_for(xp), lenet_steps(args), args.repeats)


def torch_lenet(torch: Any, device: str, batch: int, precision: str, args: Any) -> float:
    nn = torch.nn
    if device == "cuda":
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = precision != "float32"
        torch.backends.cudnn.benchmark = True
    net = nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10)).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    X = torch.rand(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(net(X), y).backward()
        optimizer.step()

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return timed(step, sync, lenet_steps(args), args.repeats)


def fit_seconds(make: Callable[[], Any], X: np.ndarray, y: np.ndarray) -> tuple[float, Any]:
    """Seconds of one whole fit, and the fitted model."""
    started = time.perf_counter()
    model = make().fit(X, y)
    return time.perf_counter() - started, model


def show(value: float | None, pattern: str) -> str:
    """``value`` formatted, or ``-`` where the peer did not run."""
    return "-" if value is None else format(value, pattern)


def _backend_array(xp: Any, array: np.ndarray) -> Any:
    return array if xp is np else xp.asarray(array)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-only", action="store_true", help="CPU rows only (no GPU needed)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few steps: seconds, not minutes")
    parser.add_argument("--precision", default="float32", choices=rbm.PRECISIONS, help="of the GPU GEMMs and convs")
    parser.add_argument("--no-fits", action="store_true", help="the step rows only")
    parser.add_argument("--no-cpu", action="store_true", help="the GPU rows only (fits too)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = 3, 2
    torch = _torch()
    backends: list[tuple[str, Any]] = [] if args.no_cpu else [("cpu", np)]
    if not args.cpu_only and rbm.gpu_available():
        import cupy

        rbm.configure_kernel_cache()
        backends.insert(0, ("gpu", cupy))
        print(f"GPU: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, precision {args.precision}")
    elif not args.cpu_only:
        print("no usable GPU: CPU rows only")
    shapes = [(784, 500, 100), (784, 500, 1000), (784, 2048, 1000)] if not args.quick else [(64, 32, 20)]
    print(f"{'row':<22}{'device':<7}{'sparkdbn /s':>14}{'torch /s':>14}{'ratio':>8}{'gemm-only /s':>15}{'of bound':>9}")
    for name, xp in backends:
        precision = args.precision if name == "gpu" else "float32"
        device = "cuda" if name == "gpu" else "cpu"
        for visible, hidden, batch in shapes:
            ours = batch / sparkdbn_cd1(xp, visible, hidden, batch, precision, args)
            theirs = batch / torch_cd1(torch, device, visible, hidden, batch, args) if torch else None
            bound = batch / gemm_bound(xp, visible, hidden, batch, args)
            print(f"{f'cd1 {visible}-{hidden} b{batch}':<22}{name:<7}{ours:>14,.0f}{show(theirs, ',.0f'):>14}"
                  f"{show(theirs and ours / theirs, '.2f'):>8}{bound:>15,.0f}{ours / bound:>9.2f}")
        for batch in ([64, 256] if not args.quick else [8]):
            ours = batch / sparkdbn_lenet(xp, batch, precision, args)
            theirs = batch / torch_lenet(torch, device, batch, precision, args) if torch else None
            print(f"{f'lenet b{batch}':<22}{name:<7}{ours:>14,.0f}{show(theirs, ',.0f'):>14}"
                  f"{show(theirs and ours / theirs, '.2f'):>8}")
    if args.no_fits:
        return
    rows = 600 if args.quick else None
    data = load_digits28()
    X, y = (data.X_train[:rows], data.y_train[:rows]) if rows else (data.X_train, data.y_train)
    X_test, y_test = (data.X_test[:rows], data.y_test[:rows]) if rows else (data.X_test, data.y_test)
    dbn = dict(hidden_layer_sizes=(32, 32) if args.quick else (256, 256), pretrain_epochs=1 if args.quick else 3,
               finetune_epochs=1 if args.quick else 10, batch_size=50, random_state=0)
    fits = {"dbn fit": lambda device, p: rbm.DBN(device=device, precision=p, **dbn),
            "lenet fit": lambda device, p: rbm.lenet(epochs=1, device=device, precision=p, random_state=0)}
    print(f"\n{'fit on digits28':<22}{'cpu s':>9}{'gpu 1st s':>11}{'gpu 2nd s':>11}{'cpu/gpu':>9}"
          f"{'cpu acc':>9}{'gpu acc':>9}   ({len(X)} rows, accuracy held out)")
    for label, make in fits.items():
        row_shape = (1, 28, 28) if label == "lenet fit" else (-1,)
        images, held_out = X.reshape(len(X), *row_shape), X_test.reshape(len(X_test), *row_shape)
        cpu, cpu_model = (None, None) if args.no_cpu else fit_seconds(lambda: make("cpu", "float32"), images, y)
        first = second = gpu_accuracy = None
        if backends and backends[0][0] == "gpu":
            first, _ = fit_seconds(lambda: make("gpu", args.precision), images, y)
            second, gpu_model = fit_seconds(lambda: make("gpu", args.precision), images, y)
            gpu_accuracy = gpu_model.score(held_out, y_test)
        cpu_accuracy = None if cpu_model is None else cpu_model.score(held_out, y_test)
        print(f"{label:<22}{show(cpu, '.2f'):>9}{show(first, '.2f'):>11}{show(second, '.2f'):>11}"
              f"{show(cpu and second and cpu / second, '.2f'):>9}{show(cpu_accuracy, '.4f'):>9}"
              f"{show(gpu_accuracy, '.4f'):>9}")


if __name__ == "__main__":
    main()
