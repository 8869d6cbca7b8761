"""PyTorch's side of scripts/bench_gpu.py: the same math as sparkdbn's, written the way a careful torch user would.

* CD-1: bias-added GEMMs as ``torch.addmm`` (one cuBLAS call each, the bias in its epilogue), the
  momentum update as ``addmm`` with ``beta=momentum`` into the velocity, sigmoid and Bernoulli
  sampling in place -- then, per ``reference``, compiled (``torch.compile`` in its default mode: the
  elementwise work fused into Triton kernels, the GEMMs left to cuBLAS), that compiled step captured in a
  CUDA graph (no launch overhead), or eager;
* LeNet: ``nn.Sequential`` with cuDNN's autotuner and sparkdbn's initial weights, SGD with momentum,
  compiled or captured alike;
* whole fits, eager, trained as sparkdbn trains (``DBNRecipe``, ``LeNetRecipe`` of scripts/_bench_gpu_recipes.py,
  read off sparkdbn's own parameters): a DBN (CD-1 pre-training of each layer, then fine-tuning of the
  sigmoid network with a softmax output, dropout ramped in, L2 on the weights, the rate decayed and
  annealed, sparkdbn's SGD) and LeNet, both with the data uploaded once, as sparkdbn's fits do.  They
  return the network: its held-out :func:`accuracy` is measured by the caller, outside the timing.

Precision: ``float32`` turns TF32 off for matmuls and cuDNN, ``tf32`` on, ``bfloat16`` runs the steps under
``torch.autocast(bfloat16)`` -- what sparkdbn's ``precision`` means, on both sides alike.  Timing is the
caller's (``scripts/bench_gpu.py``); peak memory is what torch's caching allocator reserved from the device
(:func:`peak`, as cupy's pool on sparkdbn's side).  Imported only where torch is.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

__all__ = ["set_precision", "describe", "autocast", "cd1_step", "lenet_step", "reference_step", "dbn_fit",
           "lenet_fit", "accuracy", "peak", "start_row", "synchronize"]


def set_precision(precision: str) -> None:
    """TF32 on for ``tf32`` (and ``bfloat16``'s float32 parts), off for ``float32``: matmuls and cuDNN alike.

    Through the ``allow_tf32`` flags: each also sets the newer ``fp32_precision`` flag it stands for, so that
    the two stay in step (torch >= 2.9 raises where code -- Inductor's included -- reads flags set apart).
    """
    tf32 = precision != "float32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True


def describe() -> str:
    """torch's version and its TF32 flags as torch reads them."""
    try:
        state = f"matmul {torch.backends.cuda.matmul.allow_tf32}, cuDNN {torch.backends.cudnn.allow_tf32}"
    except RuntimeError as error:  # flags set apart (see set_precision)
        state = f"unreadable ({error})"
    return f"{torch.__version__}: TF32 {state}"


def autocast(device: str, precision: str) -> Any:
    """The context a step runs in: bfloat16 autocast for ``bfloat16``, nothing otherwise."""
    if precision == "bfloat16":
        return torch.autocast(device_type="cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def start_row(device: str) -> None:
    """Before a step row: earlier rows' compiled code dropped; on the GPU, cached blocks freed and the peak reset."""
    torch._dynamo.reset()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak(device: str) -> int | None:
    """Bytes torch's caching allocator reserved from the device at most since :func:`start_row` (None on the CPU)."""
    return int(torch.cuda.max_memory_reserved()) if device == "cuda" else None


def _cd1(v0: Any, W: Any, hb: Any, vb: Any, vW: Any, vh: Any, vv: Any, lr: float, momentum: float) -> None:
    """One CD-1 update in place: five GEMMs as addmm, the gradients folded into the velocities."""
    batch, dtype = v0.shape[0], W.dtype  # under bfloat16 autocast the GEMMs' outputs come back in bfloat16
    h0 = torch.addmm(hb, v0, W).sigmoid_().to(dtype)
    hs = torch.rand_like(h0).lt_(h0)
    vk = torch.addmm(vb, hs, W.t()).sigmoid_().to(dtype)
    hk = torch.addmm(hb, vk, W).sigmoid_().to(dtype)
    scale = lr / batch
    vW.addmm_(v0.t(), h0, beta=momentum, alpha=scale).addmm_(vk.t(), hk, alpha=-scale)
    vh.mul_(momentum).add_(h0.sum(0) - hk.sum(0), alpha=scale)
    vv.mul_(momentum).add_(v0.sum(0) - vk.sum(0), alpha=scale)
    W.add_(vW), hb.add_(vh), vb.add_(vv)


def _captured(step: Callable[[], None]) -> Callable[[], None]:
    """``step`` captured in a CUDA graph (after warm-up steps on a side stream); its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def reference_step(step: Callable[[], None], device: str, reference: str) -> tuple[Callable[[], None], str]:
    """``step`` made the reference -- compiled (default mode, static shapes), that compiled step captured in a CUDA
    graph, or eager -- and what it became.  A reference that cannot be built here (no Triton, capture refused)
    falls back (compiled, else eager) and says so."""
    if reference == "eager":
        return step, "eager"
    try:
        compiled = torch.compile(step, dynamic=False)
        for _ in range(3):  # compiled, and recompiled where the first steps changed state (optimizer momentum)
            compiled()
    except Exception as error:  # noqa: BLE001 - Triton or the compiler missing: the eager reference, said
        return step, f"eager (torch.compile failed: {type(error).__name__})"
    if reference != "graphs" or device != "cuda":
        return compiled, "torch.compile"
    try:
        return _captured(compiled), "torch.compile + CUDA graph"
    except Exception as error:  # noqa: BLE001 - capture refused: the compiled reference, said
        return compiled, f"torch.compile (graph capture failed: {str(error)[:80]})"


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
    """LeNet as sparkdbn's rbm.lenet: conv 5x5x20, max-pool 2, conv 5x5x50, max-pool 2, dense 500 ReLU, 10 -- with its
    initial weights: Glorot-uniform, He-normal for the ReLU layer, zero biases."""
    net = nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10)).to(device)
    conv1, conv2, dense, out = net[0], net[2], net[5], net[7]
    for layer in (conv1, conv2, out):
        nn.init.xavier_uniform_(layer.weight)
    nn.init.kaiming_normal_(dense.weight, nonlinearity="relu")
    for layer in (conv1, conv2, dense, out):
        nn.init.zeros_(layer.bias)
    return net


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


def _sgd_step(params: list[Any], grads: list[Any], velocity: list[Any], rate: float, momentum: float,
              l2: float) -> None:
    """sparkdbn's SGD (rbm._updaters.SGD) in multi-tensor ops: ``v <- momentum v - rate (g + l2 w)``, ``w <- w + v``;
    L2 on the weights only (``params`` alternate weight, bias)."""
    if l2:
        torch._foreach_add_(grads[0::2], params[0::2], alpha=l2)
    torch._foreach_mul_(velocity, momentum)
    torch._foreach_add_(velocity, grads, alpha=-rate)
    torch._foreach_add_(params, velocity)


def dbn_fit(device: str, X: np.ndarray, y: np.ndarray, classes: int, recipe: Any, precision: str) -> nn.Module:
    """Fit the DBN sparkdbn fits, trained as ``recipe`` (_bench_gpu_recipes.DBNRecipe) says; the fine-tuned network."""
    torch.manual_seed(0)  # dropout's masks
    generator = torch.Generator().manual_seed(0)  # initial weights and shuffles
    data = torch.as_tensor(X, dtype=torch.float32, device=device)
    labels = torch.as_tensor(y, dtype=torch.long, device=device)
    hidden, inputs = [], data
    for size in recipe.sizes:
        visible = inputs.shape[1]
        W = (torch.randn(visible, size, generator=generator) * recipe.init_std).to(device)
        hb, vb = torch.zeros(size, device=device), torch.zeros(visible, device=device)
        vW, vh, vv = torch.zeros_like(W), torch.zeros_like(hb), torch.zeros_like(vb)
        slices = recipe.pretrain_slices(len(inputs))
        for done in range(recipe.pretrain_epochs):
            momentum = recipe.momentum_at(done)
            order = torch.randperm(len(inputs), generator=generator).to(device)
            for start, stop in slices:
                with autocast(device, precision):
                    _cd1(inputs[order[start:stop]], W, hb, vb, vW, vh, vv, recipe.pretrain_lr, momentum)
        linear = nn.Linear(visible, size, device=device)
        with torch.no_grad():
            linear.weight.copy_(W.t()), linear.bias.copy_(hb)
            inputs = torch.sigmoid(torch.addmm(hb, inputs, W))
        hidden.append(linear)
    out = nn.Linear(recipe.sizes[-1], classes, device=device)
    nn.init.xavier_uniform_(out.weight), nn.init.zeros_(out.bias)
    params = [p for layer in (*hidden, out) for p in (layer.weight, layer.bias)]
    velocity = [torch.zeros_like(p) for p in params]
    n, batch = len(data), recipe.batch_size
    for epoch in range(recipe.finetune_epochs):
        dropout = recipe.dropout_at(epoch)
        order = torch.randperm(n, generator=generator).to(device)
        shuffled, targets = data[order], labels[order]  # the pass's rows gathered once, as sparkdbn's GPU branch
        for start in range(0, n, batch):
            x = shuffled[start:start + batch]
            with autocast(device, precision):
                for linear in hidden:
                    x = torch.sigmoid(linear(x))
                    if dropout:
                        x = nn.functional.dropout(x, dropout)
                loss = nn.functional.cross_entropy(out(x), targets[start:start + batch])
            grads = list(torch.autograd.grad(loss, params))
            with torch.no_grad():
                _sgd_step(params, grads, velocity, recipe.rate(epoch, start / n), recipe.finetune_momentum, recipe.l2)
    return nn.Sequential(*(module for linear in hidden for module in (linear, nn.Sigmoid())), out)


def lenet_fit(device: str, X: np.ndarray, y: np.ndarray, recipe: Any, precision: str) -> nn.Module:
    """Fit LeNet on resident data as ``recipe`` (_bench_gpu_recipes.LeNetRecipe: SGD with momentum) says; the network."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    data = torch.as_tensor(X.reshape(len(X), 1, 28, 28), dtype=torch.float32, device=device)
    labels = torch.as_tensor(y, dtype=torch.long, device=device)
    net = lenet(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=recipe.learning_rate, momentum=recipe.momentum)
    for _ in range(recipe.epochs):
        order = torch.randperm(len(data), generator=generator).to(device)
        for start in range(0, len(data), recipe.batch_size):
            rows = order[start:start + recipe.batch_size]
            optimizer.zero_grad(set_to_none=True)
            with autocast(device, precision):
                loss = nn.functional.cross_entropy(net(data[rows]), labels[rows])
            loss.backward()
            optimizer.step()
    return net


def accuracy(net: nn.Module, X: np.ndarray, y: np.ndarray, device: str, precision: str) -> float:
    """The share of ``X``'s rows ``net`` classifies as ``y`` does."""
    with torch.no_grad(), autocast(device, precision):
        predicted = net(torch.as_tensor(X, dtype=torch.float32, device=device)).argmax(1).cpu().numpy()
    return float(np.mean(predicted == y))
