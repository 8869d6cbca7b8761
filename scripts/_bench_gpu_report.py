"""The bookkeeping of scripts/bench_gpu.py: timings, the parts it runs within a time budget, and its tables.

:class:`Report` runs the :class:`Part` s in order, skips one whose rough need is no longer left of
``--budget-s`` and cuts a row's timed runs short (:meth:`Report.runs`), and rewrites the JSON file after every
part (:meth:`BenchRun.checkpoint`): a run killed by a timeout keeps what finished, its Parts table saying
what ran, what was skipped and what was not reached.
"""

from __future__ import annotations

import math
import statistics
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from _results import BenchRun

TARGET_STEP_RATIO, TARGET_FIT_OVER_CPU, TARGET_ACCURACY_POINTS = 1.0, 3.0, 1.0
#: --budget-s: a timed run starts only while RUN_MARGIN x the longest run so far is left.
RUN_MARGIN = 1.2
STEP_COLUMNS = ["row", "device", "sparkdbn samples/s", "spread %", "torch samples/s", "torch spread %",
                "sparkdbn / torch", "sparkdbn peak MiB", "torch peak MiB", "torch reference"]
FIT_COLUMNS = ["fit", "device", "sparkdbn s", "spread %", "torch s", "torch spread %", "sparkdbn / torch",
               "sparkdbn accuracy", "torch accuracy"]
PART_COLUMNS = ["part", "device", "status", "seconds"]


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


def ratio(ours: Timing | None, theirs: Timing | None) -> float | None:
    """How many times faster sparkdbn's median is (theirs / ours in seconds)."""
    return None if ours is None or theirs is None else theirs.median / ours.median


def lenet_steps(args: Any) -> int:
    """Steps per timed LeNet run: a third of ``--steps`` (a LeNet step is ~10x a CD-1 step)."""
    return max(args.steps // 3, 2)


@dataclass(frozen=True)
class Part:
    """One row to measure: ``measure(report)`` returns its cells; ``need_s``: about what it needs to start."""

    table: str  # "steps" or "fits"
    label: str
    device: str
    need_s: float
    measure: Callable[[Report], list[Any]]


class Report:
    """Runs the parts in order within the time budget, and writes the tables after every part (``--json``).

    ``--budget-s`` (None: none) counts from ``started`` (default: now); a part whose ``need_s`` is no longer
    left is skipped, and :meth:`runs` cuts a row's timed runs short.  What happened to each part is its status
    in the Parts table.
    """

    def __init__(self, run: BenchRun, args: Any, parts: list[Part], clock: Callable[[], float] = time.monotonic,
                 started: float | None = None) -> None:
        self.run, self.args, self.parts, self.clock = run, args, parts, clock
        started = clock() if started is None else started
        self.deadline = None if args.budget_s is None else started + args.budget_s
        self.rows: dict[str, list[list[Any]]] = {"steps": [], "fits": []}
        self.status = ["not reached when this file was written"] * len(parts)
        self.seconds: list[float | None] = [None] * len(parts)
        self.said: list[str] = []  # what the part under way says of itself (runs cut, torch's side skipped or failed)

    def left(self) -> float:
        """Seconds left of the budget (infinite without one)."""
        return math.inf if self.deadline is None else self.deadline - self.clock()

    def say(self, text: str) -> None:
        print(f"  ({text})", flush=True)
        self.said.append(text)

    def failed(self, who: str, error: BaseException) -> str:
        print(traceback.format_exc(), flush=True)
        text = f"{who} failed: {type(error).__name__}: {str(error)[:200]}"
        self.say(text)
        return text

    def runs(self, who: str, once: Callable[[], float], planned: int) -> tuple[float, ...]:
        """The seconds of up to ``planned`` calls of ``once`` (each a timed run); after the first, a run starts only
        while ``RUN_MARGIN`` times the longest so far is left of the budget (a cut is said)."""
        seconds: list[float] = []
        while len(seconds) < planned:
            if seconds and self.left() < RUN_MARGIN * max(seconds):
                self.say(f"{who}: {len(seconds)} of {planned} runs, for the time budget")
                break
            seconds.append(once())
        return tuple(seconds)

    def measure(self) -> None:
        """Every part in order, the file rewritten after each; a kill (SIGTERM) marks the part under way."""
        for index, part in enumerate(self.parts):
            started, self.said = time.perf_counter(), []
            try:
                self.status[index] = self._measure(part)
            except BaseException:  # SystemExit (SIGTERM) or KeyboardInterrupt: what finished is kept, then it stops
                self.status[index] = "stopped while running: the bench was killed"
                raise
            finally:
                self.seconds[index] = time.perf_counter() - started
                self.write()

    def _measure(self, part: Part) -> str:
        left = max(self.left(), 0.0)
        if left < part.need_s:
            print(f"{part.label:<22}{part.device:<5}skipped: {left:.0f} s left of the budget", flush=True)
            return f"skipped: {left:.0f} s left of the budget, it needs about {part.need_s:.0f} s"
        try:
            self.rows[part.table].append(part.measure(self))
        except Exception as error:  # noqa: BLE001 - one part failing leaves the others to run
            return self.failed(f"{part.label} {part.device}", error)
        return "; ".join(["done", *self.said])

    def write(self, final: bool = False) -> None:
        """The tables as they stand, into the file (a checkpoint, or the finished run)."""
        args, run = self.args, self.run
        run.table("Steps: samples per second (median of the runs), spread of the runs, peak memory", STEP_COLUMNS,
                  self.rows["steps"], replace=True,
                  note=f"{args.runs} runs of {args.steps} steps (LeNet: {lenet_steps(args)}) per row, precision "
                       f"{args.precision} on the GPU for both sides; torch's GPU steps: --reference {args.reference}, "
                       f"its CPU steps eager. Peak memory: what each side's allocator reserved from the device.")
        if any(part.table == "fits" for part in self.parts):
            run.table("Fits on digits28: seconds (median of the runs) and held-out accuracy", FIT_COLUMNS,
                      self.rows["fits"], replace=True,
                      note=f"{args.fit_runs} whole fits per side, each between device synchronisations; both sides "
                           f"upload the data once and train the same way; accuracy measured after the timing.")
        run.table("Targets", ["target", "measured", "met"], target_rows(self.rows["steps"], self.rows["fits"]),
                  replace=True, note="Measured only where the GPU rows (and for the fits, the CPU fits) ran.")
        run.table("Parts, in the order run", PART_COLUMNS, replace=True,
                  rows=[[part.label, part.device, status, seconds]
                        for part, status, seconds in zip(self.parts, self.status, self.seconds)],
                  note="seconds: the part's wall time, warm-ups and torch's compile included."
                       + ("" if self.deadline is None else f" Time budget: {args.budget_s:.0f} s (--budget-s)."))
        if final:
            run.finish()
        else:
            run.checkpoint()


def timed_steps(report: Report, who: str, step: Callable[[], None], sync: Callable[[], None], steps: int,
                runs: int) -> Timing:
    """Seconds per step in each of (up to) ``runs`` runs of ``steps`` steps, after one untimed step; synchronised."""
    step()
    sync()

    def once() -> float:
        started = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        return time.perf_counter() - started

    return Timing(tuple(seconds / steps for seconds in report.runs(who, once, runs)))


def timed_fits(report: Report, who: str, fit: Callable[[], Any], sync: Callable[[], None], runs: int
               ) -> tuple[Timing, Any]:
    """Seconds of each of (up to) ``runs`` whole fits, each between device synchronisations, and the last model
    fitted (its accuracy is measured by the caller, outside the timing)."""
    fitted: list[Any] = []

    def once() -> float:
        sync()
        started = time.perf_counter()
        fitted[:] = [fit()]
        sync()
        return time.perf_counter() - started

    return Timing(report.runs(who, once, runs)), fitted[0]


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
