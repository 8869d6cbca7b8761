"""Race sparkdbn's GPU branch against PyTorch doing the same math on the same GPU -- like for like -- and the CPUs.

Rows, each timed several times after a warm-up, every timing ended by a device synchronisation; the tables
give the median and the spread ((max - min) / median) of the runs:

* ``cd1 V-H bB``: one CD-1 update of an RBM (784-500 at batch 100 and 1000, 784-2048 at 1000) on a
  resident minibatch, ``--runs`` runs of ``--steps`` steps: sparkdbn's fused ``cd_step`` against torch's
  reference (``scripts/_bench_gpu_torch.py``: ``addmm`` with the bias and the momentum folded in, under
  ``torch.compile`` in its default mode -- ``--reference graphs``: that compiled step captured in a CUDA
  graph; ``eager``: not compiled);
* ``lenet bB``: one LeNet training step (forward, backward, SGD) at batch 64 and 256, against torch +
  cuDNN compiled alike;
* fits on digits28, ``--fit-runs`` whole fits each: a DBN (256-256, 3 + 10 epochs, batch 50) and LeNet
  (1 epoch), sparkdbn's fit beside torch's fit of the same network trained the same way (the recipe read
  off sparkdbn's own parameters: ``DBNRecipe``, ``LeNetRecipe``; data uploaded once on both sides); the
  held-out accuracy of each is measured after its timing.

The parts run most important first: the GPU step rows, the GPU fits, the CPU fits (the DBN's is the
baseline of the "GPU over the CPUs" target), the CPU step rows (torch eager there).  With ``--json`` the
file is rewritten after every part (``"complete": false`` until the end; its "Parts" table says what ran,
what was skipped and what was not reached), so a run killed by a timeout keeps what finished.
``--budget-s N``: a part starts only when its rough need is left of N seconds, and a row's timed runs stop
early (one at least) when the next would overrun; what was skipped or cut is said in the Parts table.

Precision is the same on both sides: ``--precision float32`` turns TF32 off for sparkdbn's GEMMs and
convolutions and for torch's matmuls and cuDNN, ``tf32`` turns it on for both, ``bfloat16`` runs torch
under bfloat16 autocast.  Peak memory: what each side's caching allocator reserved from the device at most
during a row (cupy's pool, torch's ``max_memory_reserved``).  A targets table checks the issue's bars
(CD-1 and LeNet >= 1.0x torch; DBN fit >= 3x the CPUs; accuracies within 1 point).

The parts' bookkeeping (budget, checkpoints, tables, targets) is in ``scripts/_bench_gpu_report.py``, the
recipes torch's fits follow in ``scripts/_bench_gpu_recipes.py``, torch's side in ``scripts/_bench_gpu_torch.py``.

    python scripts/bench_gpu.py --json --budget-s 540       # on a GPU machine (minutes; the order above)
    python scripts/bench_gpu.py --cpu-only --quick          # anywhere: the CPU rows, small, in seconds
"""

from __future__ import annotations

import argparse
import functools
import signal
import time
from typing import Any, Callable, Sequence

import numpy as np

import rbm
from _bench_gpu_recipes import DBNRecipe, LeNetRecipe
from _bench_gpu_report import (FIT_COLUMNS, RUN_MARGIN, STEP_COLUMNS, Part, Report, Timing, lenet_steps, ratio,
                               target_rows, timed_fits, timed_steps)
from _results import BenchRun, add_json_option
from rbm.boltzmann import _cd
from rbm.datasets import load_digits28

__all__ = ["main", "parse_args", "BenchRun", "DBNRecipe", "LeNetRecipe", "FIT_COLUMNS", "STEP_COLUMNS", "Part",
           "Report", "Timing", "ratio", "target_rows"]

REFERENCES = ("compile", "graphs", "eager")
CD1_SHAPES = [(784, 500, 100), (784, 500, 1000), (784, 2048, 1000)]
LENET_BATCHES = [64, 256]
# --budget-s: a part starts only when its rough need is left: a step row's sparkdbn side, torch's compile, a fit
# (the CPU DBN fit: ~11 s a run on 16 cores)
STEP_NEED_S, COMPILE_NEED_S, FIT_NEED_S = 5.0, 30.0, 15.0


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
                        help="how torch's GPU steps run: torch.compile (default mode), that compiled step in a "
                             "CUDA graph, or eager (torch's CPU steps run eager)")
    parser.add_argument("--steps", type=int, default=50, help="steps per timed run of a step row (LeNet: a third)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per step row (median and spread)")
    parser.add_argument("--fit-runs", type=int, default=3, help="timed whole fits per fit row and side")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds the whole bench may take: parts that no longer fit are skipped, runs cut "
                             "short, and the Parts table says so (default: no budget)")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.runs < 1 or args.fit_runs < 1:
        parser.error(f"--steps, --runs and --fit-runs must be >= 1, got {args.steps}, {args.runs}, {args.fit_runs}")
    if args.cpu_only and args.no_cpu:
        parser.error("--cpu-only and --no-cpu leave nothing to run")
    if args.quick:
        args.steps, args.runs, args.fit_runs = min(args.steps, 3), min(args.runs, 2), min(args.fit_runs, 2)
    return args


def sync_for(xp: Any) -> Callable[[], None]:
    return (lambda: None) if xp is np else xp.cuda.Device().synchronize


class PoolPeak:
    """What cupy's memory pool reserved from the device during a row: its blocks are freed first, and the pool
    keeps what it reserved until asked, so its size at the end is its peak (None on the CPU)."""

    def __init__(self, xp: Any) -> None:
        self.pool = None if xp is np else xp.get_default_memory_pool()
        if self.pool is not None:
            xp.cuda.Device().synchronize()
            self.pool.free_all_blocks()

    def bytes(self) -> int | None:
        return None if self.pool is None else int(self.pool.total_bytes())


def _backend_array(xp: Any, array: np.ndarray) -> Any:
    return array if xp is np else xp.asarray(array)


def device_settings(name: str, args: Any) -> tuple[str, str, str]:
    """(precision, torch's device, torch's reference) of the rows on backend ``name``."""
    return (args.precision, "cuda", args.reference) if name == "gpu" else ("float32", "cpu", "eager")


# -- step rows ----------------------------------------------------------------------------------------------------

def sparkdbn_cd1(report: Report, xp: Any, visible: int, hidden: int, batch: int, precision: str, args: Any
                 ) -> tuple[Timing, Any]:
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

    return timed_steps(report, "sparkdbn", step, sync_for(xp), args.steps, args.runs), peak.bytes()


def sparkdbn_lenet(report: Report, xp: Any, batch: int, precision: str, args: Any) -> tuple[Timing, Any]:
    peak = PoolPeak(xp)
    rng = np.random.default_rng(0)
    net = rbm.lenet(batch_size=batch, device="cpu" if xp is np else "gpu", precision=precision, random_state=0)
    net.initialize(classes=np.arange(10))
    X = _backend_array(xp, rng.random((batch, 1, 28, 28), dtype=np.float32))
    y = _backend_array(xp, rng.integers(0, 10, size=batch))

    def step() -> None:
        _, grads = net._loss_and_gradients(X, y)
        net._optimizer.step(net._refs, grads, decay=net._decay)

    return timed_steps(report, "sparkdbn", step, sync_for(xp), lenet_steps(args), args.runs), peak.bytes()


def torch_steps(report: Report, torch_side: Any, make: Callable[[], tuple[Callable[[], None], str]], device: str,
                reference: str, steps: int, runs: int) -> tuple[Timing | None, int | None, str]:
    """A torch step row: its timing, peak bytes and what the reference became (compiled, graph, eager) -- or
    empty, with the reason, where there is no torch, no time left for its compile, or it failed."""
    if torch_side is None:
        return None, None, ""
    need = COMPILE_NEED_S if reference != "eager" else STEP_NEED_S
    if report.left() < need:
        report.say("torch skipped for the time budget")
        return None, None, "skipped (time budget)"
    try:
        torch_side.start_row(device)
        step, kind = make()
        timing = timed_steps(report, "torch", step, lambda: torch_side.synchronize(device), steps, runs)
        return timing, torch_side.peak(device), kind
    except Exception as error:  # noqa: BLE001 - sparkdbn's side of the row stands
        report.failed("torch", error)
        return None, None, f"failed: {type(error).__name__}"


def cd1_part(args: Any, name: str, xp: Any, torch_side: Any, visible: int, hidden: int, batch: int) -> Part:
    precision, device, reference = device_settings(name, args)
    label = f"cd1 {visible}-{hidden} b{batch}"

    def measure(report: Report) -> list[Any]:
        ours, our_peak = sparkdbn_cd1(report, xp, visible, hidden, batch, precision, args)
        theirs = torch_steps(report, torch_side, lambda: torch_side.cd1_step(
            device, visible, hidden, batch, precision, reference), device, reference, args.steps, args.runs)
        return step_row(label, name, batch, ours, our_peak, *theirs)

    return Part("steps", label, name, STEP_NEED_S, measure)


def lenet_part(args: Any, name: str, xp: Any, torch_side: Any, batch: int) -> Part:
    precision, device, reference = device_settings(name, args)
    label = f"lenet b{batch}"

    def measure(report: Report) -> list[Any]:
        ours, our_peak = sparkdbn_lenet(report, xp, batch, precision, args)
        theirs = torch_steps(report, torch_side, lambda: torch_side.lenet_step(device, batch, precision, reference),
                             device, reference, lenet_steps(args), args.runs)
        return step_row(label, name, batch, ours, our_peak, *theirs)

    return Part("steps", label, name, STEP_NEED_S, measure)


def step_parts(args: Any, name: str, xp: Any, torch_side: Any) -> list[Part]:
    shapes = CD1_SHAPES if not args.quick else [(64, 32, 20)]
    return ([cd1_part(args, name, xp, torch_side, *shape) for shape in shapes]
            + [lenet_part(args, name, xp, torch_side, batch) for batch in (LENET_BATCHES if not args.quick else [8])])


def megabytes(value: int | None) -> float | None:
    return None if value is None else value / 2**20


def step_row(label: str, device: str, batch: int, ours: Timing, our_peak: Any, theirs: Timing | None,
             their_peak: Any, kind: str) -> list[Any]:
    print(f"{label:<22}{device:<5}{batch / ours.median:>13,.0f}/s ±{ours.spread:>5.1%}"
          f"{'' if theirs is None else f'{batch / theirs.median:>13,.0f}/s ±{theirs.spread:>5.1%}'}"
          f"{'' if theirs is None else f'{ratio(ours, theirs):>7.2f}x'}  {kind}", flush=True)
    return [label, device, batch / ours.median, 100 * ours.spread,
            None if theirs is None else batch / theirs.median, None if theirs is None else 100 * theirs.spread,
            ratio(ours, theirs), megabytes(our_peak), megabytes(their_peak), kind]


# -- fits ---------------------------------------------------------------------------------------------------------

def dbn_settings(args: Any) -> dict[str, Any]:
    """The DBN both sides fit: sparkdbn's defaults but for its size, epochs and minibatch."""
    return dict(hidden_layer_sizes=(32, 32) if args.quick else (256, 256), pretrain_epochs=1 if args.quick else 3,
                finetune_epochs=1 if args.quick else 10, batch_size=50, random_state=0)


LENET_SETTINGS = dict(epochs=1, random_state=0)  # LeNet: sparkdbn's defaults, one epoch


@functools.lru_cache(maxsize=2)
def digits28(quick: bool, images: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """digits28's training and held-out rows (600 of each with ``quick``), as images (n, 1, 28, 28) or flat."""
    data = load_digits28()
    kept = 600 if quick else None
    shape = (1, 28, 28) if images else (-1,)
    X, X_test = data.X_train[:kept], data.X_test[:kept]
    return X.reshape(len(X), *shape), data.y_train[:kept], X_test.reshape(len(X_test), *shape), data.y_test[:kept]


def fit_part(args: Any, name: str, xp: Any, torch_side: Any, label: str) -> Part:
    precision, device, _ = device_settings(name, args)

    def make() -> Any:
        if label == "dbn fit":
            return rbm.DBN(device=name, precision=precision, **dbn_settings(args))
        return rbm.lenet(device=name, precision=precision, **LENET_SETTINGS)

    def measure(report: Report) -> list[Any]:
        X, y, X_test, y_test = digits28(args.quick, label == "lenet fit")
        make().fit(X[:200], y[:200])  # untimed: kernels compiled, plans built, cuDNN tuned
        ours, model = timed_fits(report, "sparkdbn", lambda: make().fit(X, y), sync_for(xp), args.fit_runs)
        accuracy = float(model.score(X_test, y_test))
        theirs, their_accuracy = torch_fit(report, torch_side, label, device, precision, args, (X, y, X_test, y_test),
                                           ours)
        print(f"{label:<12}{name:<5}{ours.median:>9.2f} s ±{ours.spread:>5.1%}  acc {accuracy:.4f}"
              f"{'' if theirs is None else f'   torch {theirs.median:>8.2f} s ±{theirs.spread:>5.1%}'}"
              f"{'' if their_accuracy is None else f'  acc {their_accuracy:.4f}'}", flush=True)
        return [label, name, ours.median, 100 * ours.spread, None if theirs is None else theirs.median,
                None if theirs is None else 100 * theirs.spread, ratio(ours, theirs), accuracy, their_accuracy]

    return Part("fits", label, name, FIT_NEED_S, measure)


def torch_fit(report: Report, torch_side: Any, label: str, device: str, precision: str, args: Any,
              data: tuple[np.ndarray, ...], ours: Timing) -> tuple[Timing | None, float | None]:
    """torch's fit of the same network trained the same way, timed as sparkdbn's (after an untimed small fit), and
    its held-out accuracy measured after; empty where there is no torch, no time for it, or it failed."""
    if torch_side is None:
        return None, None
    if report.left() < RUN_MARGIN * ours.median:
        report.say("torch skipped for the time budget")
        return None, None
    X, y, X_test, y_test = data
    try:
        if label == "dbn fit":
            recipe, classes = DBNRecipe.of(dbn_settings(args), X.shape[1]), int(y.max()) + 1

            def fit(rows: int | None = None) -> Any:
                return torch_side.dbn_fit(device, X[:rows], y[:rows], classes, recipe, precision)
        else:
            recipe = LeNetRecipe.of(rbm.lenet(**LENET_SETTINGS))

            def fit(rows: int | None = None) -> Any:
                return torch_side.lenet_fit(device, X[:rows], y[:rows], recipe, precision)
        fit(200)
        theirs, net = timed_fits(report, "torch", fit, lambda: torch_side.synchronize(device), args.fit_runs)
        return theirs, torch_side.accuracy(net, X_test, y_test, device, precision)
    except Exception as error:  # noqa: BLE001 - sparkdbn's side of the row stands
        report.failed("torch", error)
        return None, None


# -- targets, plan, main ------------------------------------------------------------------------------------------

def plan(args: Any, backends: list[tuple[str, Any]], torch_side: Any) -> list[Part]:
    """The parts, most important first: the GPU's steps and fits, then the CPUs' fits (the DBN's first: the
    baseline of the GPU's target) and steps."""
    parts = []
    for name, xp in backends:
        steps = step_parts(args, name, xp, torch_side)
        fits = [] if args.no_fits else [fit_part(args, name, xp, torch_side, fit) for fit in ("dbn fit", "lenet fit")]
        parts += steps + fits if name == "gpu" else fits + steps
    return parts


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
    print(f"torch {torch_side.describe()}")
    return torch_side


def main(argv: Sequence[str] | None = None) -> dict[str, list[list[Any]]]:
    """Run the race; returns the tables (also written with ``--json``, after every part)."""
    started = time.monotonic()  # the budget counts from here: torch's import and the GPU's start-up included
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
    report = Report(run, args, plan(args, backends, torch_side), started=started)
    report.measure()
    report.write(final=True)
    return {"steps": report.rows["steps"], "fits": report.rows["fits"],
            "targets": target_rows(report.rows["steps"], report.rows["fits"])}


def _stop(signum: int, frame: Any) -> None:  # noqa: ARG001 - signal's handler signature
    raise SystemExit(128 + signum)  # timeout's SIGTERM: Report.measure writes what finished, then the bench ends


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop)
    main()
