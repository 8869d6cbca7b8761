"""PyTorch's side of scripts/bench_gpu.py: the same math as sparkdbn's, written the way a careful torch user would.

* CD-1: bias-added GEMMs as ``torch.addmm`` (one cuBLAS call each, the bias in its epilogue), the
  momentum update as ``addmm`` with ``beta=momentum`` into the velocity, sigmoid and Bernoulli
  sampling in place -- then compiled (``torch.compile``: the elementwise work fused into Triton
  kernels) or captured in a CUDA graph (no launch overhead), per ``reference``;
* LeNet: ``nn.Sequential`` with cuDNN's autotuner, SGD with momentum, compiled or captured alike;
* whole fits: a DBN (CD-1 pre-training of each layer, then fine-tuning of the sigmoid network with a
  softmax output) and LeNet, both with the data uploaded once, as sparkdbn's fits do.

Precision: ``float32`` turns TF32 off for matmuls and cuDNN (``set_float32_matmul_precision("highest")``,
``allow_tf32 = False``), ``tf32`` on, ``bfloat16`` runs the steps under ``torch.autocast(bfloat16)`` --
what sparkdbn's ``precision`` means, on both sides alike.  Timing and peak memory are the caller's
(``scripts/bench_gpu.py``); this module only builds the step functions.  Imported only where torch is.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

__all__ = ["set_precision", "autocast", "cd1_step", "lenet_step", "reference_step", "dbn_fit", "lenet_fit", "peak",
           "reset_peak", "synchronize"]


def set_precision(precision: str) -> None:
    """TF32 on for ``tf32`` (and ``bfloat16``'s float32 parts), off for ``float32``: matmuls and cuDNN alike."""
    tf32 = precision != "float32"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.benchmark = True


def autocast(device: str, precision: str) -> Any:
    """The context a step runs in: bfloat16 autocast for ``bfloat16``, nothing otherwise."""
    if precision == "bfloat16":
        return torch.autocast(device_type="cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak(device: str) -> int | None:
    """Bytes torch held at most since :func:`reset_peak` (None on the CPU)."""
    return int(torch.cuda.max_memory_allocated()) if device == "cuda" else None


def _cd1(v0: Any, W: Any, hb: Any, vb: Any, vW: Any, vh: Any, vv: Any, lr: float, momentum: float) -> None:
    """One CD-1 update in place: five GEMMs as addmm, the gradients folded into the velocities."""
    batch, dtype = v0.shape[0], W.dtype  # under bfloat16 autocast the GEMMs' outputs come back in float32
    h0 = torch.addmm(hb, v0, W).sigmoid_().to(dtype)
    hs = torch.rand_like(h0).lt_(h0)
    vk = torch.addmm(vb, hs, W.t()).sigmoid_().to(dtype)
    hk = torch.addmm(hb, vk, W).sigmoid_().to(dtype)
    scale = lr / batch
    vW.addmm_(v0.t(), h0, beta=momentum, alpha=scale).addmm_(vk.t(), hk, alpha=-scale)
    vh.mul_(momentum).add_(h0.sum(0) - hk.sum(0), alpha=scale)
    vv.mul_(momentum).add_(v0.sum(0) - vk.sum(0), alpha=scale)
    W.add_(vW), hb.add_(vh), vb.add_(vv)


def reference_step(step: Callable[[], None], device: str, reference: str) -> tuple[Callable[[], None], str]:
    """``step`` made the reference: compiled, captured in a CUDA graph, or eager; and what it became.

    A reference that cannot be built here (no Triton, capture refused) falls back to eager, and says so.
    """
    if reference == "graphs" and device == "cuda":
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            return graph.replay, "cuda graph"
        except RuntimeError as error:
            return step, f"eager (graph capture failed: {error})"
    if reference == "compile":
        try:
            compiled = torch.compile(step, mode="max-autotune-no-cudagraphs", fullgraph=False)
            compiled()
            return compiled, "torch.compile"
        except Exception as error:  # noqa: BLE001 - Triton or the compiler missing: the eager reference, said
            return step, f"eager (torch.compile failed: {type(error).__name__})"
    return step, "eager"


def cd1_step(device: str, visible: int, hidden: int, batch: int, precision: str, reference: str,
             lr: float = 0.01, momentum: float = 0.5) -> tuple[Callable[[], None], str]:
    """A CD-1 update of a ``visible``-``hidden`` RBM on one resident minibatch, as the reference runs it."""
    generator = torch.Generator(device=device).manual_seed(0)
    v0 = (torch.rand(batch, visible, device=device, generator=generator) < 0.3).float()
    W = torch.randn(visible, hidden, device=device, generator=generator) * 0.01
    hb, vb = torch.zeros(hidden, device=device), torch.zeros(visible, device=device)
    vW, vh, vv = torch.zeros_like(W), torch.zeros_like(hb), torch.zeros_like(vb)

    def step() -> None:
        with autocast(device, precision):
            _cd1(v0, W, hb, vb, vW, vh, vv, lr, momentum)

    return reference_step(step, device, reference)


def lenet(device: str) -> nn.Module:
    """LeNet as sparkdbn's rbm.lenet: conv 5x5x20, max-pool 2, conv 5x5x50, max-pool 2, dense 500 ReLU, 10."""
    return nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10)).to(device)


def lenet_step(device: str, batch: int, precision: str, reference: str) -> tuple[Callable[[], None], str]:
    """One LeNet training step (forward, backward, SGD with momentum) on a resident minibatch."""
    net = lenet(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    X = torch.rand(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=False)  # gradients stay allocated: a CUDA graph needs them in place
        with autocast(device, precision):
            loss = nn.functional.cross_entropy(net(X), y)
        loss.backward()
        optimizer.step()

    return reference_step(step, device, reference)


def _batches(n: int, batch: int, generator: Any, device: str) -> list[Any]:
    order = torch.randperm(n, generator=generator, device="cpu").to(device)
    return [order[start:start + batch] for start in range(0, n, batch)]


def dbn_fit(device: str, X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, sizes: tuple[int, ...],
            pretrain_epochs: int, finetune_epochs: int, batch: int, pretrain_lr: float, finetune_lr: float,
            momentum: float, precision: str) -> float:
    """Fit the DBN sparkdbn fits (CD-1 per layer, then the sigmoid network fine-tuned); its held-out accuracy."""
    generator = torch.Generator().manual_seed(0)
    data = torch.as_tensor(X, dtype=torch.float32, device=device)
    labels = torch.as_tensor(y, dtype=torch.long, device=device)
    layers, inputs = [], data
    for hidden in sizes:
        visible = inputs.shape[1]
        W = (torch.randn(visible, hidden, generator=generator) * 0.01).to(device)
        hb, vb = torch.zeros(hidden, device=device), torch.zeros(visible, device=device)
        vW, vh, vv = torch.zeros_like(W), torch.zeros_like(hb), torch.zeros_like(vb)
        for _ in range(pretrain_epochs):
            for rows in _batches(len(inputs), batch, generator, device):
                with autocast(device, precision):
                    _cd1(inputs[rows], W, hb, vb, vW, vh, vv, pretrain_lr, momentum)
        linear = nn.Linear(visible, hidden).to(device)
        with torch.no_grad():
            linear.weight.copy_(W.t()), linear.bias.copy_(hb)
        layers += [linear, nn.Sigmoid()]
        with torch.no_grad():
            inputs = torch.sigmoid(inputs @ W + hb)
    net = nn.Sequential(*layers, nn.Linear(sizes[-1], int(labels.max()) + 1).to(device))
    optimizer = torch.optim.SGD(net.parameters(), lr=finetune_lr, momentum=momentum)
    for _ in range(finetune_epochs):
        for rows in _batches(len(data), batch, generator, device):
            optimizer.zero_grad(set_to_none=True)
            with autocast(device, precision):
                loss = nn.functional.cross_entropy(net(data[rows]), labels[rows])
            loss.backward()
            optimizer.step()
    return _accuracy(net, X_test, y_test, device)


def lenet_fit(device: str, X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, epochs: int,
              batch: int, precision: str) -> float:
    """Fit LeNet (SGD 0.01, momentum 0.9, as rbm.lenet) on resident data; its held-out accuracy."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    data = torch.as_tensor(X.reshape(len(X), 1, 28, 28), dtype=torch.float32, device=device)
    labels = torch.as_tensor(y, dtype=torch.long, device=device)
    net = lenet(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    for _ in range(epochs):
        for rows in _batches(len(data), batch, generator, device):
            optimizer.zero_grad(set_to_none=True)
            with autocast(device, precision):
                loss = nn.functional.cross_entropy(net(data[rows]), labels[rows])
            loss.backward()
            optimizer.step()
    return _accuracy(net, X_test.reshape(len(X_test), 1, 28, 28), y_test, device)


def _accuracy(net: nn.Module, X: np.ndarray, y: np.ndarray, device: str) -> float:
    with torch.no_grad():
        predicted = net(torch.as_tensor(X, dtype=torch.float32, device=device)).argmax(1).cpu().numpy()
    synchronize(device)
    return float(np.mean(predicted == y))
