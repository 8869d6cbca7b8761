#!/usr/bin/env python
"""CD-1 training throughput of a 784-500 RBM (batch 100, float32), side by side.

Compares, in one process and on the same data (digits upsampled to 28x28 and
shift-augmented, ``rbm.datasets.load_digits28``):

* ``ours``     -- :class:`rbm.RBM`, one pass (``train_partition``), with CD-1 and with the
                 default persistent CD-1 (scikit-learn's algorithm);
* ``sklearn``  -- scikit-learn's ``BernoulliRBM`` (persistent CD-1, same batch size), one ``fit`` pass;
* ``gemm``     -- only the five matrix products of a CD-1 step, in their fastest layouts
                 (``v0 W``, ``h0 W^T``, ``v1 W``, ``v0^T h0``, ``v1^T h1``): the physical limit;
                 "one W" reads the same W transposed for ``h0 W^T``, as CD with one stored
                 weight matrix must (OpenBLAS is slower on that layout).

at one BLAS thread and at the default thread count.  Measurements are interleaved and
the best of ``--repeats`` rounds is kept, so a noisy shared machine hurts less.  Then a
breakdown of one CD-1 step (GEMMs, sigmoid, sampling, updates, batch gather).

Run:  .venv/bin/python scripts/bench_rbm.py [--quick]
(How well RBM settings learn, the table behind the defaults: ``scripts/bench_rbm_defaults.py``.)
Targets: ours >= 2x sklearn and >= 85% of the GEMM bound at 1 thread.
"""

from __future__ import annotations

if __name__ == "__main__":  # started as a program: where the project is not importable, inside its virtualenv
    import _venv

    _venv.ensure()


import argparse
import time
import warnings

import numpy as np
from sklearn.neural_network import BernoulliRBM
from threadpoolctl import threadpool_info, threadpool_limits

from rbm import RBM
from rbm import _blas
from rbm.boltzmann import _cd
from rbm.datasets import load_digits28

from _results import BenchRun, add_json_option

N_VISIBLE, N_HIDDEN, BATCH = 784, 500, 100


def time_ours(X: np.ndarray, persistent: bool) -> float:
    model = RBM(N_HIDDEN, learning_rate=0.05, batch_size=BATCH, persistent=persistent, random_state=0)
    model.initialize(N_VISIBLE)
    model.train_partition(X[: 5 * BATCH], None, "rbm", np.random.default_rng(0))  # warm-up: buffers, caches
    started = time.perf_counter()
    model.train_partition(X, None, "rbm", np.random.default_rng(1))
    return time.perf_counter() - started


def time_sklearn(X: np.ndarray) -> float:
    model = BernoulliRBM(N_HIDDEN, learning_rate=0.05, batch_size=BATCH, n_iter=1, random_state=0)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X)
    return time.perf_counter() - started


def time_gemm(X: np.ndarray, one_layout: bool = False) -> float:
    """The five products of CD-1 per batch, each with contiguous operands (its fastest layout).

    With ``one_layout`` the reconstruction product reads the same W through a transposed
    view, as any CD implementation that stores one weight matrix must.
    """
    rng = np.random.default_rng(0)
    W = rng.normal(0, 0.01, (N_VISIBLE, N_HIDDEN)).astype(np.float32)
    WT = W.T if one_layout else np.ascontiguousarray(W.T)
    h0, h1 = np.empty((BATCH, N_HIDDEN), np.float32), np.empty((BATCH, N_HIDDEN), np.float32)
    v1 = np.empty((BATCH, N_VISIBLE), np.float32)
    grad = np.empty((N_VISIBLE, N_HIDDEN), np.float32)
    batches = [X[i : i + BATCH] for i in range(0, len(X) - BATCH + 1, BATCH)]
    started = time.perf_counter()
    for v0 in batches:
        np.matmul(v0, W, out=h0)
        np.matmul(h0, WT, out=v1)
        np.matmul(v1, W, out=h1)
        np.matmul(v0.T, h0, out=grad)
        np.matmul(v1.T, h1, out=grad)
    return (time.perf_counter() - started) * len(X) / (len(batches) * BATCH)


def breakdown(X: np.ndarray, steps: int) -> dict[str, float]:
    """Seconds per CD-1 step by kind of work, mirroring ``rbm.boltzmann._cd.cd_step`` with timers."""
    model = RBM(N_HIDDEN, learning_rate=0.05, batch_size=BATCH, persistent=False, random_state=0).initialize(N_VISIBLE)
    W, hb, vb = model._W, model._hbias, model._vbias
    vel_W, vel_h, vel_v = model._velocity
    ws = _cd.Workspace(np, BATCH, N_VISIBLE, N_HIDDEN, np.float32)
    generator = model._sampler
    order = np.random.default_rng(0).permutation(len(X))
    totals = dict.fromkeys(["batch gather", "GEMMs", "bias adds", "sigmoid", "sampling", "error", "updates"], 0.0)
    v0, vk, h0, hk, hs = ws.V[:BATCH], ws.V[BATCH:], ws.H[:BATCH], ws.H[BATCH:], ws.h_sample
    clock = time.perf_counter
    for step in range(steps):
        start = (step * BATCH) % (len(X) - BATCH)
        t0 = clock()
        _cd.gather_rows(X, order[start : start + BATCH], v0)
        t1 = clock()
        np.matmul(v0, W, out=h0)
        t2 = clock()
        h0 += hb
        t3 = clock()
        _cd.sigmoid_(h0)
        t4 = clock()
        _cd.sample_bernoulli_(generator, h0, hs)
        t5 = clock()
        np.matmul(hs, W.T, out=vk)
        t6 = clock()
        vk += vb
        t7 = clock()
        _cd.sigmoid_(vk)
        t8 = clock()
        if step % 4 == 0:  # the reconstruction error is measured on every 4th minibatch
            np.subtract(v0, vk, out=ws.scratch)
            float(np.vdot(ws.scratch.ravel(), ws.scratch.ravel()))
        t9 = clock()
        np.matmul(vk, W, out=hk)
        t10 = clock()
        hk += hb
        t11 = clock()
        _cd.sigmoid_(hk, negate=True)
        t12 = clock()
        ws.H *= 0.05 / BATCH
        t12b = clock()
        _blas.gemm_tn_accumulate(ws.V, ws.H, vel_W, alpha=1.0, beta=0.5, scratch=ws.grad_W)  # momentum inside
        t13 = clock()
        np.sum(ws.H, axis=0, out=ws.grad_hbias)
        np.matmul(ws.sign, ws.V, out=ws.grad_vbias)
        vel_h *= 0.5
        vel_h += ws.grad_hbias
        vel_v *= 0.5
        ws.grad_vbias *= 0.05 / BATCH
        vel_v += ws.grad_vbias
        W += vel_W
        hb += vel_h
        vb += vel_v
        t14 = clock()
        totals["batch gather"] += t1 - t0
        totals["GEMMs"] += (t2 - t1) + (t6 - t5) + (t10 - t9) + (t13 - t12b)
        totals["bias adds"] += (t3 - t2) + (t7 - t6) + (t11 - t10)
        totals["sigmoid"] += (t4 - t3) + (t8 - t7) + (t12 - t11)
        totals["sampling"] += t5 - t4
        totals["error"] += t9 - t8
        totals["updates"] += (t14 - t13) + (t12b - t12)
    return {name: value / steps for name, value in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (fewer samples and rounds)")
    parser.add_argument("--samples", type=int, default=None, help="samples per measurement")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved rounds; the best is kept")
    add_json_option(parser)
    args = parser.parse_args()
    run = BenchRun(__file__, args).start()
    samples = args.samples or (3000 if args.quick else 12000)
    repeats = args.repeats or (2 if args.quick else 5)

    X_all = load_digits28().X_train
    X = np.ascontiguousarray(X_all[:samples])
    blas = threadpool_info()
    default_threads = max((entry["num_threads"] for entry in blas), default=1)
    print(f"data: load_digits28() training set {X_all.shape}, using {len(X)} samples per measurement, float32")
    print(f"RBM {N_VISIBLE}-{N_HIDDEN}, batch {BATCH}; BLAS: "
          + ", ".join(f"{e['internal_api']} {e.get('version')}" for e in blas))
    print(f"best of {repeats} interleaved rounds; shared machines make absolute numbers noisy, ratios less so\n")

    throughput = []
    for threads in sorted({1, default_threads}):
        with threadpool_limits(threads):
            best = dict.fromkeys(["cd", "pcd", "sklearn", "gemm", "gemm1"], np.inf)
            for _ in range(repeats):
                best["cd"] = min(best["cd"], time_ours(X, persistent=False))
                best["pcd"] = min(best["pcd"], time_ours(X, persistent=True))
                best["sklearn"] = min(best["sklearn"], time_sklearn(X))
                best["gemm"] = min(best["gemm"], time_gemm(X))
                best["gemm1"] = min(best["gemm1"], time_gemm(X, one_layout=True))
            rate = {name: len(X) / seconds for name, seconds in best.items()}
            print(f"threads={threads}")
            print(f"  ours CD-1       {rate['cd']:10.0f} samples/s")
            print(f"  ours PCD-1      {rate['pcd']:10.0f} samples/s   (the default)")
            print(f"  sklearn PCD-1   {rate['sklearn']:10.0f} samples/s")
            print(f"  GEMM bound      {rate['gemm']:10.0f} samples/s   (fastest layouts)")
            print(f"  GEMM, one W     {rate['gemm1']:10.0f} samples/s   (the reconstruction reads W transposed)")
            print(f"  PCD/sklearn     {rate['pcd'] / rate['sklearn']:10.2f}x   (target >= 2)")
            print(f"  CD-1/GEMM       {rate['cd'] / rate['gemm']:10.1%}   (target >= 85% at 1 thread)")
            print(f"  CD-1/GEMM 1W    {rate['cd'] / rate['gemm1']:10.1%}\n")
            throughput.append([threads, rate["cd"], rate["pcd"], rate["sklearn"], rate["gemm"], rate["gemm1"],
                               f"{rate['pcd'] / rate['sklearn']:.2f}x", f"{rate['cd'] / rate['gemm']:.1%}"])
    run.table(f"RBM {N_VISIBLE}-{N_HIDDEN} training, batch {BATCH}, samples/s (best of {repeats} interleaved rounds, "
              f"{len(X)} samples)",
              ["BLAS threads", "ours CD-1", "ours PCD-1 (default)", "sklearn BernoulliRBM", "GEMM bound",
               "GEMM, one W", "PCD / sklearn", "CD-1 / GEMM bound"], throughput,
              "GEMM bound: only the five matrix products of a CD-1 step, in their fastest layouts; "
              "\"one W\" reads W transposed for the reconstruction, as CD with one stored matrix must.")

    with threadpool_limits(1):
        steps = 40 if args.quick else 150
        breakdown(X, 10)  # warm-up
        parts = breakdown(X, steps)
    total = sum(parts.values())
    print(f"breakdown of one CD-1 step at 1 thread ({steps} steps, {total * 1e3:.2f} ms/step):")
    for name, seconds in parts.items():
        print(f"  {name:13s} {seconds * 1e6:8.0f} us  {seconds / total:6.1%}")
    run.table(f"One CD-1 step at 1 thread, by kind of work ({steps} steps, {total * 1e3:.2f} ms a step)",
              ["work", "us a step", "share"],
              [[name, seconds * 1e6, f"{seconds / total:.1%}"] for name, seconds in parts.items()])
    run.finish()


if __name__ == "__main__":
    main()
