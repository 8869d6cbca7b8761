"""Race sparkdbn's GPU branch against PyTorch doing the same math on the same GPU -- like for like -- and the CPUs.

Rows, each timed ``--runs`` times (5) after a warm-up, every timing ended by a device synchronisation;
the tables give the median and the spread ((max - min) / median) of the runs:

* ``cd1 V-H bB``: one CD-1 update of an RBM (784-500 at batch 100 and 1000, 784-2048 at 1000) on a
  resident minibatch: sparkdbn's fused ``cd_step`` against torch's reference (``scripts/_bench_gpu_torch.py``:
  ``addmm`` with the bias and the momentum folded in, then ``torch.compile`` -- or a CUDA graph with
  ``--reference graphs``, or ``eager``);
* ``lenet bB``: one LeNet training step (forward, backward, SGD) at batch 64 and 256, against torch +
  cuDNN compiled or captured alike;
* fits on digits28: a DBN (256-256, 3 + 10 epochs, batch 50) and LeNet (1 epoch): sparkdbn's fit beside
  torch's fit of the same networks (data uploaded once on both sides), on the GPU and on the CPUs, with
  their held-out accuracies.

Precision is the same on both sides: ``--precision float32`` turns TF32 off for sparkdbn's GEMMs and
convolutions and for torch's matmuls and cuDNN, ``tf32`` turns it on for both, ``bfloat16`` runs torch
under bfloat16 autocast.  Peak memory: what cupy's pool (sparkdbn) and torch's allocator held at most
during a row.  ``--json`` writes the run for docs/benchmarks/gpu.md; a targets table checks the issue's
bars (CD-1 and LeNet >= 1.0x torch; DBN fit >= 3x the CPUs; accuracies within 1 point).

    python scripts/bench_gpu.py --json                     # on a GPU machine (about 10 minutes on an H100)
    python scripts/bench_gpu.py --cpu-only --quick         # anywhere: the CPU rows, small, in seconds
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

import rbm
from _results import BenchRun, add_json_option
from rbm.boltzmann import _cd
from rbm.datasets import load_digits28

REFERENCES = ("compile", "graphs", "eager")
CD1_SHAPES = [(784, 500, 100), (784, 500, 1000), (784, 2048, 1000)]
LENET_BATCHES = [64, 256]
TARGET_STEP_RATIO, TARGET_FIT_OVER_CPU, TARGET_ACCURACY_POINTS = 1.0, 3.0, 1.0


@dataclass(frozen=True)
class Timing:
    """Seconds of each run (per step for step rows, per fit for fits)."""

    runs: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def spread(self) -> float:
        """(max - min) / median: how far the runs swing."""
        return (max(self.runs) - min(self.runs)) / self.median if self.median > 0 else 0.0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-only", action="store_true", help="CPU rows only (no GPU needed)")
    parser.add_argument("--no-cpu", action="store_true", help="GPU rows only (the fits' CPU baseline too)")
    parser.add_argument("--no-fits", action="store_true", help="the step rows only")
    parser.add_argument("--no-torch", action="store_true", help="sparkdbn alone (torch's columns empty)")
    parser.add_argument("--quick", action="store_true", help="small sizes, few steps and 2 runs: seconds, not minutes")
    parser.add_argument("--precision", default="float32", choices=rbm.PRECISIONS,
                        help="on the GPU, for both sparkdbn and torch (the CPUs compute in float32)")
    parser.add_argument("--reference", default="compile", choices=REFERENCES,
                        help="how torch's steps run: torch.compile (default), a CUDA graph, or eager")
    parser.add_argument("--steps", type=int, default=50, help="steps per timed run of a step row")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per row (median and spread)")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.runs < 1:
        parser.error(f"--steps and --runs must be >= 1, got {args.steps} and {args.runs}")
    if args.cpu_only and args.no_cpu:
        parser.error("--cpu-only and --no-cpu leave nothing to run")
    if args.quick:
        args.steps, args.runs = min(args.steps, 3), min(args.runs, 2)
    return args


def timed(step: Callable[[], None], sync: Callable[[], None], steps: int, runs: int) -> Timing:
    """Seconds per step in each of ``runs`` runs of ``steps`` steps, after one untimed step; synchronised."""
    step()
    sync()
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        seconds.append((time.perf_counter() - started) / steps)
    return Timing(tuple(seconds))


def sync_for(xp: Any) -> Callable[[], None]:
    return (lambda: None) if xp is np else xp.cuda.Device().synchronize


class PoolPeak:
    """The most cupy's memory pool held during a row (its blocks are freed first; None on the CPU)."""

    def __init__(self, xp: Any) -> None:
        self.pool = None if xp is np else xp.get_default_memory_pool()
        if self.pool is not None:
            xp.cuda.Device().synchronize()
            self.pool.free_all_blocks()

    def bytes(self) -> int | None:
        return None if self.pool is None else int(self.pool.total_bytes())


def _backend_array(xp: Any, array: np.ndarray) -> Any:
    return array if xp is np else xp.asarray(array)


def sparkdbn_cd1(xp: Any, visible: int, hidden: int, batch: int, precision: str, args: Any) -> tuple[Timing, Any]:
    peak = PoolPeak(xp)
    rng = np.random.default_rng(0)
    model = rbm.RBM(hidden, batch_size=batch, persistent=False, random_state=0, precision=precision,
                    device="cpu" if xp is np else "gpu").initialize(visible)
    data = _backend_array(xp, (rng.random((batch, visible)) < 0.3).astype(np.float32))
    ws = model._workspace(batch)
    ws.V[:batch] = data
    settings = model._settings()

    def step() -> None:
        _cd.cd_step(ws, batch, model._W, model._hbias, model._vbias, model._velocity, model._sampler, settings,
                    0.01, 0.5, measure_error=False)

    return timed(step, sync_for(xp), args.steps, args.runs), peak.bytes()


def lenet_steps(args: Any) -> int:
    """Steps per timed LeNet run: a third of ``--steps`` (a LeNet step is ~10x a CD-1 step)."""
    return max(args.steps // 3, 2)


def sparkdbn_lenet(xp: Any, batch: int, precision: str, args: Any) -> tuple[Timing, Any]:
    peak = PoolPeak(xp)
    rng = np.random.default_rng(0)
    net = rbm.lenet(batch_size=batch, device="cpu" if xp is np else "gpu", precision=precision, random_state=0)
    net.initialize(classes=np.arange(10))
    X = _backend_array(xp, rng.random((batch, 1, 28, 28), dtype=np.float32))
    y = _backend_array(xp, rng.integers(0, 10, size=batch))

    def step() -> None:
        _, grads = net._loss_and_gradients(X, y)
        net._optimizer.step(net._refs, grads, decay=net._decay)

    return timed(step, sync_for(xp), lenet_steps(args), args.runs), peak.bytes()


def torch_row(torch_side: Any, make: Callable[[], tuple[Callable[[], None], str]], device: str, steps: int,
              runs: int) -> tuple[Timing, int | None, str]:
    """A torch step row: its timing, peak bytes and what the reference became (compiled, graph, eager)."""
    torch_side.reset_peak(device)
    step, kind = make()
    timing = timed(step, lambda: torch_side.synchronize(device), steps, runs)
    return timing, torch_side.peak(device), kind


def megabytes(value: int | None) -> float | None:
    return None if value is None else value / 2**20


def ratio(ours: Timing | None, theirs: Timing | None) -> float | None:
    """How many times faster sparkdbn's median is (theirs / ours in seconds)."""
    return None if ours is None or theirs is None else theirs.median / ours.median


def step_rows(args: Any, backends: list[tuple[str, Any]], torch_side: Any) -> list[list[Any]]:
    """The step table: CD-1 and LeNet, sparkdbn beside torch on each device."""
    rows = []
    shapes = CD1_SHAPES if not args.quick else [(64, 32, 20)]
    for name, xp in backends:
        precision, device = (args.precision, "cuda") if name == "gpu" else ("float32", "cpu")
        for visible, hidden, batch in shapes:
            ours, our_peak = sparkdbn_cd1(xp, visible, hidden, batch, precision, args)
            theirs = their_peak = kind = None
            if torch_side is not None:
                theirs, their_peak, kind = torch_row(torch_side, lambda: torch_side.cd1_step(
                    device, visible, hidden, batch, precision, args.reference), device, args.steps, args.runs)
            rows.append(_step_row(f"cd1 {visible}-{hidden} b{batch}", name, batch, ours, theirs, our_peak, their_peak,
                                  kind))
        for batch in (LENET_BATCHES if not args.quick else [8]):
            ours, our_peak = sparkdbn_lenet(xp, batch, precision, args)
            theirs = their_peak = kind = None
            if torch_side is not None:
                theirs, their_peak, kind = torch_row(torch_side, lambda: torch_side.lenet_step(
                    device, batch, precision, args.reference), device, lenet_steps(args), args.runs)
            rows.append(_step_row(f"lenet b{batch}", name, batch, ours, theirs, our_peak, their_peak, kind))
    return rows


def _step_row(label: str, device: str, batch: int, ours: Timing, theirs: Timing | None, our_peak: Any,
              their_peak: Any, kind: str | None) -> list[Any]:
    print(f"{label:<22}{device:<5}{batch / ours.median:>13,.0f}/s ±{ours.spread:>5.1%}"
          f"{'' if theirs is None else f'{batch / theirs.median:>13,.0f}/s ±{theirs.spread:>5.1%}'}"
          f"{'' if theirs is None else f'{ratio(ours, theirs):>7.2f}x'}  {kind or ''}", flush=True)
    return [label, device, batch / ours.median, 100 * ours.spread,
            None if theirs is None else batch / theirs.median, None if theirs is None else 100 * theirs.spread,
            ratio(ours, theirs), megabytes(our_peak), megabytes(their_peak), kind or ""]


STEP_COLUMNS = ["row", "device", "sparkdbn samples/s", "spread %", "torch samples/s", "torch spread %",
                "sparkdbn / torch", "sparkdbn peak MiB", "torch peak MiB", "torch reference"]
FIT_COLUMNS = ["fit", "device", "sparkdbn s", "spread %", "torch s", "torch spread %", "sparkdbn / torch",
               "sparkdbn accuracy", "torch accuracy"]


def fit_rows(args: Any, backends: list[tuple[str, Any]], torch_side: Any) -> list[list[Any]]:
    """The fit table: sparkdbn's and torch's whole fits of the DBN and LeNet on each device."""
    data = load_digits28()
    rows_kept = 600 if args.quick else None
    X, y = (data.X_train[:rows_kept], data.y_train[:rows_kept]) if rows_kept else (data.X_train, data.y_train)
    X_test, y_test = (data.X_test[:rows_kept], data.y_test[:rows_kept]) if rows_kept else (data.X_test, data.y_test)
    dbn = dict(hidden_layer_sizes=(32, 32) if args.quick else (256, 256), pretrain_epochs=1 if args.quick else 3,
               finetune_epochs=1 if args.quick else 10, batch_size=50, random_state=0)
    lenet_epochs = 1
    rows = []
    for name, xp in backends:
        precision, device = (args.precision, "cuda") if name == "gpu" else ("float32", "cpu")
        sync = sync_for(xp)
        for label in ("dbn fit", "lenet fit"):
            shape = (1, 28, 28) if label == "lenet fit" else (-1,)
            images, held_out = X.reshape(len(X), *shape), X_test.reshape(len(X_test), *shape)

            def make() -> Any:
                if label == "dbn fit":
                    return rbm.DBN(device=name, precision=precision, **dbn)
                return rbm.lenet(epochs=lenet_epochs, device=name, precision=precision, random_state=0)

            seconds, accuracy = [], None
            make().fit(images[:200], y[:200])  # untimed: kernels compiled, plans built, cuDNN tuned
            for _ in range(args.runs):
                sync()
                started = time.perf_counter()
                model = make().fit(images, y)
                sync()
                seconds.append(time.perf_counter() - started)
                accuracy = float(model.score(held_out, y_test))
            ours, theirs, their_accuracy = Timing(tuple(seconds)), None, None
            if torch_side is not None:
                theirs, their_accuracy = torch_fit(torch_side, label, device, X, y, X_test, y_test, dbn, lenet_epochs,
                                                   precision, args.runs)
            print(f"{label:<12}{name:<5}{ours.median:>9.2f} s ±{ours.spread:>5.1%}  acc {accuracy:.4f}"
                  f"{'' if theirs is None else f'   torch {theirs.median:>8.2f} s ±{theirs.spread:>5.1%}'}"
                  f"{'' if their_accuracy is None else f'  acc {their_accuracy:.4f}'}", flush=True)
            rows.append([label, name, ours.median, 100 * ours.spread, None if theirs is None else theirs.median,
                         None if theirs is None else 100 * theirs.spread, ratio(ours, theirs), accuracy,
                         their_accuracy])
    return rows


def torch_fit(torch_side: Any, label: str, device: str, X: np.ndarray, y: np.ndarray, X_test: np.ndarray,
              y_test: np.ndarray, dbn: dict, lenet_epochs: int, precision: str, runs: int) -> tuple[Timing, float]:
    """torch's fit of the same network, ``runs`` times after an untimed small one; synchronised."""
    def fit(rows: int | None = None) -> float:
        X_fit, y_fit = (X[:rows], y[:rows]) if rows else (X, y)
        if label == "lenet fit":
            return torch_side.lenet_fit(device, X_fit, y_fit, X_test, y_test, lenet_epochs, 64, precision)
        return torch_side.dbn_fit(device, X_fit, y_fit, X_test, y_test, tuple(dbn["hidden_layer_sizes"]),
                                  dbn["pretrain_epochs"], dbn["finetune_epochs"], dbn["batch_size"], 0.1, 0.1, 0.9,
                                  precision)
    fit(200)
    seconds, accuracy = [], 0.0
    for _ in range(runs):
        torch_side.synchronize(device)
        started = time.perf_counter()
        accuracy = fit()
        torch_side.synchronize(device)
        seconds.append(time.perf_counter() - started)
    return Timing(tuple(seconds)), accuracy


def target_rows(steps: list[list[Any]], fits: list[list[Any]]) -> list[list[Any]]:
    """The issue's bars, each with what was measured and whether it holds (only where the GPU rows ran)."""
    rows = []
    for row in steps:
        if row[1] == "gpu" and row[0] in ("cd1 784-500 b100", "cd1 784-500 b1000", "lenet b64", "lenet b256"):
            rows.append([f"{row[0]}: sparkdbn / torch >= {TARGET_STEP_RATIO}", row[6],
                         None if row[6] is None else row[6] >= TARGET_STEP_RATIO])
    by = {(row[0], row[1]): row for row in fits}
    for label in ("dbn fit", "lenet fit"):
        gpu, cpu = by.get((label, "gpu")), by.get((label, "cpu"))
        if gpu is None or cpu is None:
            continue
        if label == "dbn fit":
            over = cpu[2] / gpu[2]
            rows.append([f"dbn fit: GPU over the CPUs >= {TARGET_FIT_OVER_CPU}x", over, over >= TARGET_FIT_OVER_CPU])
        points = abs(gpu[7] - cpu[7]) * 100
        rows.append([f"{label}: GPU and CPU accuracy within {TARGET_ACCURACY_POINTS} point", points,
                     points <= TARGET_ACCURACY_POINTS])
    return rows


def load_torch_side(args: Any) -> Any:
    """scripts/_bench_gpu_torch.py with torch's precision set, or None (no torch, or --no-torch)."""
    if args.no_torch:
        return None
    try:
        import _bench_gpu_torch as torch_side
    except ImportError as error:
        print(f"no torch ({error}): torch's columns stay empty")
        return None
    torch_side.set_precision(args.precision)
    return torch_side


def main(argv: Sequence[str] | None = None) -> dict[str, list[list[Any]]]:
    """Run the race; returns the tables (also written with ``--json``)."""
    args = parse_args(argv)
    run = BenchRun(__file__, args).start()
    torch_side = load_torch_side(args)
    backends: list[tuple[str, Any]] = [] if args.no_cpu else [("cpu", np)]
    if not args.cpu_only and rbm.gpu_available():
        import cupy

        rbm.configure_kernel_cache()
        backends.insert(0, ("gpu", cupy))
        print(f"GPU: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, precision {args.precision}, "
              f"torch reference {args.reference}")
    elif not args.cpu_only:
        print("no usable GPU: CPU rows only")
    tables: dict[str, list[list[Any]]] = {"steps": step_rows(args, backends, torch_side)}
    run.table("Steps: samples per second (median of the runs), spread of the runs, peak memory", STEP_COLUMNS,
              tables["steps"], note=f"{args.runs} runs of {args.steps} steps (LeNet: {lenet_steps(args)}) per row, "
                                    f"precision {args.precision} on the GPU for both sides.")
    if not args.no_fits:
        tables["fits"] = fit_rows(args, backends, torch_side)
        run.table("Fits on digits28: seconds (median of the runs) and held-out accuracy", FIT_COLUMNS,
                  tables["fits"], note="Every fit ends with a device synchronisation; both sides upload the data once.")
    tables["targets"] = target_rows(tables["steps"], tables.get("fits", []))
    if tables["targets"]:
        run.table("Targets", ["target", "measured", "met"], tables["targets"])
    run.finish()
    return tables


if __name__ == "__main__":
    main()
