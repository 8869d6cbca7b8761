"""LeNet training throughput: sparkdbn's ConvNet (numpy) against PyTorch CPU, side by side.

Both train the same net (conv 5x5x20, max-pool 2, conv 5x5x50, max-pool 2, dense 500 ReLU,
dense 10 + softmax cross-entropy) on the same digits (28x28, float32), batch 64, SGD with
momentum, updater included, at 1 thread and at the default thread count.  Runs alternate
between the two libraries and the best of ``--repeats`` is kept, so a busy machine hurts
both alike; the ratio ours/torch is what counts.  A per-layer forward/backward time table
for ours follows.

    .venv/bin/python scripts/bench_lenet.py [--quick] [--batches 60] [--repeats 3]
"""

from __future__ import annotations

if __name__ == "__main__":  # started as a program: where the project is not importable, inside its virtualenv
    import _venv

    _venv.ensure()


import argparse
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

import rbm
from rbm import softmax_cross_entropy
from rbm.datasets import load_digits28

from _results import BenchRun, add_json_option

BATCH = 64


def ours_throughput(X: np.ndarray, y: np.ndarray, seed: int) -> tuple[float, float]:
    """Samples per wall-clock second and per CPU second of one training pass."""
    net = rbm.lenet(input_shape=X.shape[1:], n_classes=10, learning_rate=0.01, momentum=0.9, random_state=seed)
    net.initialize()
    rng = np.random.default_rng(seed)
    net.train_partition(X[: 4 * BATCH], y[: 4 * BATCH], "train", rng)  # warm up: buffers, BLAS
    cpu_started = time.process_time()
    result = net.train_partition(X, y, "train", rng)
    return result["samples"] / result["seconds"], result["samples"] / (time.process_time() - cpu_started)


def torch_throughput(X: np.ndarray, y: np.ndarray, seed: int) -> tuple[float, float]:
    """Samples per wall-clock second and per CPU second of one training pass."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Conv2d(X.shape[1], 20, 5), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10),
    )
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    features, labels = torch.from_numpy(X), torch.from_numpy(y)

    def one_pass(count: int) -> None:
        order = torch.randperm(count)
        for start in range(0, count, BATCH):
            batch = order[start : start + BATCH]
            optimizer.zero_grad()
            loss = loss_fn(net(features[batch]), labels[batch])
            loss.backward()
            optimizer.step()

    one_pass(4 * BATCH)
    started, cpu_started = time.perf_counter(), time.process_time()
    one_pass(len(X))
    return len(X) / (time.perf_counter() - started), len(X) / (time.process_time() - cpu_started)


def layer_table(X: np.ndarray, y: np.ndarray, repeats: int) -> list[tuple[str, str, float, float]]:
    """Median forward / backward milliseconds per layer for one batch of 64 (medians resist a busy machine)."""
    net = rbm.lenet(input_shape=X.shape[1:], n_classes=10, random_state=0).initialize()
    x0 = np.ascontiguousarray(X[:BATCH].transpose(1, 2, 3, 0))  # the net's inner layout, CHWN
    forward_ms: dict[str, list[float]] = {layer.name: [] for layer in net.layers_}
    backward_ms: dict[str, list[float]] = {layer.name: [] for layer in net.layers_}
    for round_index in range(repeats + 1):  # round 0 warms up (buffers, BLAS) and is not counted
        x = x0
        for layer in net.layers_:
            started = time.perf_counter()
            x = layer.forward(x, True)
            forward_ms[layer.name].append((time.perf_counter() - started) * 1e3)
        _, grad = softmax_cross_entropy(x, y[:BATCH], np)
        for layer in reversed(net.layers_):
            started = time.perf_counter()
            grad = layer.backward(grad)
            backward_ms[layer.name].append((time.perf_counter() - started) * 1e3)
            if grad is None:
                break
    return [(layer.name, layer.spec["type"], float(np.median(forward_ms[layer.name][1:])),
             float(np.median(backward_ms[layer.name][1:]))) for layer in net.layers_]


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (fewer batches and repeats)")
    parser.add_argument("--batches", type=int, default=60, help="training batches per timed pass")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per library; the best is kept")
    add_json_option(parser)
    args = parser.parse_args()
    run = BenchRun(__file__, args).start()
    batches, repeats = (15, 2) if args.quick else (args.batches, args.repeats)

    import torch

    split = load_digits28(flatten=False, shifts=[(0, 0), (1, 1), (-1, -1), (1, -1), (-1, 1)])
    X, y = split.X_train[: batches * BATCH], split.y_train[: batches * BATCH]
    default_threads = torch.get_num_threads()
    print(f"LeNet training, batch {BATCH}, float32, SGD momentum; {len(X)} samples per timed pass; "
          f"numpy {np.__version__}, torch {torch.__version__}, {os.cpu_count()} CPUs")
    print("samples/s: per wall-clock second (best of the alternating runs); per CPU second in brackets,")
    print("which a busy machine disturbs less (with several threads it also counts their spinning)")
    print(f"{'threads':>8} {'ours samples/s':>22} {'torch samples/s':>22} {'ours/torch':>18}")
    throughput = []
    for threads in (1, default_threads):
        torch.set_num_threads(threads)
        ours, theirs = [], []
        with threadpool_limits(limits=threads):
            for repeat in range(repeats):
                ours.append(ours_throughput(X, y, seed=repeat))
                theirs.append(torch_throughput(X, y, seed=repeat))
        (wall, cpu), (wall_torch, cpu_torch) = np.max(ours, axis=0), np.max(theirs, axis=0)
        print(f"{threads:>8} {wall:>10.0f} [{cpu:>7.0f} cpu] {wall_torch:>10.0f} [{cpu_torch:>7.0f} cpu] "
              f"{wall / wall_torch:>6.2f}x [{cpu / cpu_torch:.2f}x cpu]")
        throughput.append([threads, wall, cpu, wall_torch, cpu_torch, wall / wall_torch, cpu / cpu_torch])
    torch.set_num_threads(default_threads)

    print("\nours, per layer, batch 64, 1 thread (median ms):")
    print(f"{'layer':<10} {'type':<8} {'forward':>8} {'backward':>9}")
    with threadpool_limits(limits=1):
        rows = layer_table(X, y, repeats=5 if args.quick else 20)
    for name, kind, forward, backward in rows:
        print(f"{name:<10} {kind:<8} {forward:>8.2f} {backward:>9.2f}")
    print(f"{'total':<10} {'':<8} {sum(r[2] for r in rows):>8.2f} {sum(r[3] for r in rows):>9.2f}")
    run.table(f"LeNet training, batch {BATCH}, float32, SGD with momentum, {len(X)} samples per timed pass, "
              f"best of {repeats} alternating runs (torch {torch.__version__})",
              ["threads", "ours samples/s", "ours per CPU second", "torch samples/s", "torch per CPU second",
               "ours / torch", "ours / torch, CPU"], throughput)
    run.table("Ours, per layer, batch 64, 1 thread (median ms)", ["layer", "type", "forward", "backward"],
              [*map(list, rows), ["total", "", sum(r[2] for r in rows), sum(r[3] for r in rows)]])
    run.finish()


if __name__ == "__main__":
    main()
