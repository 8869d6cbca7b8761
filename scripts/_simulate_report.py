"""The report of ``bench_simulate.py``: what a run returns (:class:`Curve`), its printed tables, the
recorded run's tables and its figure.

:func:`report` takes what the simulation's runs returned (per node count and configuration, a
:class:`Curve` per seed, the one-node reference under ``(1, "1 node")``) and prints, records and draws
them; :func:`equal_epochs_rows` and :func:`plot` are its parts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Curve:
    """Accuracy of the consolidated model against samples processed and simulated time."""

    label: str
    nodes: int
    parts: int = 0  # partitions per node and epoch
    samples: list[int] = field(default_factory=list)
    time_s: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    reads: int = 0
    age_s: float = 0.0  # summed over the snapshots or updates merged: time since their author published them
    rows_trained: int = 0
    end_s: float = 0.0  # when the last partition ended (simulated)
    partitions_by_node: list[int] = field(default_factory=list)  # the partitions each node trained
    diverged: str = ""  # why the run stopped early: a node's training diverged (its weights are not finite)

    def at_samples(self, samples: float) -> float:
        index = int(np.searchsorted(self.samples, samples))
        return self.accuracy[min(index, len(self.accuracy) - 1)]

    def first_reaching(self, target: float) -> tuple[int, float] | None:
        for samples, time_s, accuracy in zip(self.samples, self.time_s, self.accuracy):
            if accuracy >= target:
                return samples, time_s
        return None


class SimulationDiverged(Exception):
    """A node's training diverged: the run ends there, its ``curve`` as far as it got (``curve.diverged`` says why)."""

    def __init__(self, curve: Curve):
        super().__init__(curve.diverged)
        self.curve = curve


def report(run: Any, results: dict[tuple[int, str], list[Curve]], *, sizes: list[int], training_rows: int,
           epochs: int, seeds: int, title: str, clock: Any, seed: int, target: float, png: str) -> None:
    """Print the per-run table of ``seed`` (the first seed's curves) and the table at equal epochs over the
    ``seeds``, record both in ``run`` (a ``_results.BenchRun``) and draw ``png``."""
    curves = {n: [results[1, "1 node"][0]] + [found[0] for (size, _), found in results.items() if size == n]
              for n in sizes}  # the figure and the per-run table: the first seed
    marks = sorted({training_rows * k // 2 for k in (1, 2, 4, epochs * 2)})
    print(f"\n## seed {seed}")
    print(f"{'nodes':>5} {'mode':<24}{'parts':>6} " + "".join(f"{f'acc @{m / training_rows:g} ep':>11}" for m in marks)
          + f"{f'epochs to {target}':>15}{f'time to {target}':>14}{'sim time':>10}{'reads/part':>11}"
          f"{'age ms':>8}"
          f"{'best':>7}")
    rows = []
    for n in sizes:
        for curve in curves[n]:
            if not curve.accuracy:  # diverged before its first evaluation
                print(f"{n:>5} {curve.label:<24}{curve.parts:>6} diverged: {curve.diverged}")
                continue
            reached = curve.first_reaching(target)
            to_samples = "never" if reached is None else f"{reached[0] / training_rows:.1f}"
            to_time = "never" if reached is None else f"{reached[1]:.2f} s"
            parts = curve.parts
            per_partition = curve.reads / max(1, curve.nodes * epochs * parts)
            age_ms = f"{curve.age_s / curve.reads * 1e3:.0f}" if curve.reads and not curve.label.startswith("sync") else "-"
            label = f"{curve.label} (diverged)" if curve.diverged else curve.label
            print(f"{n:>5} {label:<24}{parts:>6} " + "".join(f"{curve.at_samples(m):>11.3f}" for m in marks)
                  + f"{to_samples:>15}{to_time:>14}{curve.time_s[-1]:>9.2f}s{per_partition:>11.1f}{age_ms:>8}"
                  f"{max(curve.accuracy):>7.3f}")
            rows.append([n, label, parts, *(curve.at_samples(m) for m in marks), to_samples, to_time,
                         curve.time_s[-1], per_partition, age_ms, max(curve.accuracy)])
    one_final = float(np.mean([c.accuracy[-1] for c in results[1, "1 node"]]))
    plot(curves, png, target, one_final)
    equal = equal_epochs_rows(results, sizes, epochs, training_rows)
    print(f"\n## accuracy after {epochs} epochs over {seeds} seed(s), and simulated time to one node's accuracy")
    print(f"{'nodes':>5} {'mode':<24}{'parts':>6}{'accuracy':>10}{'std':>7}{'gap (points)':>13}{'time to 1-node acc':>19}"
          f"{'reached':>8}{'speed-up':>9}{'diverged':>9}")
    for row in equal:
        time_s = "never" if row[6] is None else f"{row[6]:.3f} s"
        speed = "-" if row[8] is None else f"{row[8]:.1f}x"
        accuracy = "-" if row[3] is None else f"{row[3]:.4f}"
        std = "-" if row[4] is None else f"{row[4]:.4f}"
        gap = "-" if row[5] is None else f"{row[5]:+.2f}"
        print(f"{row[0]:>5} {row[1]:<24}{row[2]:>6}{accuracy:>10}{std:>7}{gap:>13}{time_s:>19}"
              f"{row[7]:>8}{speed:>9}{row[9]:>9}")
    run.table(f"Accuracy after {epochs} epochs (mean over {seeds} seeds) and simulated time to one node's "
              f"accuracy: {title}, simulated",
              ["nodes", "mode", "partitions per node and epoch", "accuracy", "std", "gap to 1 node (points)",
               "simulated time to 1 node's accuracy (s)", "seeds reaching it", "speed-up over 1 node",
               "seeds diverged"], equal,
              "Speed-up: one node's simulated time for its epochs over the time the nodes take to reach its final "
              "accuracy (mean over the seeds that reach it). 'outer ETA/MU': the outer step; none: plain merging. "
              "Accuracy and its gap are over the seeds that did not diverge (a node's weights turned non-finite: a "
              "fit would fail there).")
    run.table(f"{title}, {training_rows} training rows, {epochs} epochs, simulated, "
              f"seed {seed}",
              ["nodes", "mode", "partitions per node and epoch",
               *(f"accuracy at {m / training_rows:g} epochs" for m in marks),
               f"epochs to {target}", f"simulated time to {target}", "simulated time (s)",
               "store reads per partition", "age of what is merged (ms)", "best accuracy"], rows,
              f"Clock: {clock.rate:.0f} samples/s per node, snapshot write / read {clock.write_s * 1e3:.1f} / "
              f"{clock.read_s * 1e3:.1f} ms, announcement delay {clock.delay_s * 1e3:.1f} ms, straggler "
              f"x{clock.straggler:g}. Each block of rows starts with the 1-node reference.")
    run.figure(png, "accuracy against samples and simulated time, one panel per node count; dashed: one node's "
                         "final accuracy (mean over the seeds)")
    print("parts: partitions per node and epoch; reads/part: store files read per node and partition; "
          "age ms: mean time since a merged snapshot or applied update was published (sync: none, it waits)")


def equal_epochs_rows(results: dict, sizes: list[int], epochs: int, rows_per_epoch: int) -> list[list]:
    """Per node count and configuration, over the seeds: accuracy after ``epochs`` (mean, std), its gap to one
    node's, and the simulated time to one node's final accuracy (mean over the seeds that reach it)."""
    one = results[1, "1 node"]
    rows = [[1, "1 node", "-", float(np.mean([c.accuracy[-1] for c in one])), float(np.std([c.accuracy[-1] for c in one])),
             0.0, float(np.mean([c.time_s[-1] for c in one])), f"{len(one)}/{len(one)}", 1.0, f"0/{len(one)}"]]
    for n in sizes:
        for (size, label), curves in results.items():
            if size != n:
                continue
            final = [c.accuracy[-1] for c in curves if not c.diverged]
            times, reached = [], 0
            for curve, reference in zip(curves, one):
                hit = None if curve.diverged else curve.first_reaching(reference.accuracy[-1])
                if hit is not None:
                    reached += 1
                    times.append(hit[1])
            time_s = float(np.mean(times)) if times else None
            one_s = float(np.mean([c.time_s[-1] for c in one]))
            accuracy = float(np.mean(final)) if final else None
            rows.append([n, label, curves[0].parts, accuracy, float(np.std(final)) if final else None,
                         None if accuracy is None else 100.0 * (accuracy - rows[0][3]), time_s,
                         f"{reached}/{len(curves)}", None if time_s is None else one_s / time_s,
                         f"{len(curves) - len(final)}/{len(curves)}"])
    return rows


def plot(curves: dict[int, list[Any]], png: str, target: float, one_node: float | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(curves)
    labels = list(dict.fromkeys(curve.label for n in reversed(sizes) for curve in curves[n]))  # the most fan-outs first
    colors = {label: plt.get_cmap("tab10")(index % 10) for index, label in enumerate(labels)}  # same in every panel
    figure, axes = plt.subplots(2, len(sizes), figsize=(4.2 * len(sizes), 6.4), squeeze=False)
    for column, n in enumerate(sizes):
        for curve in curves[n]:
            if not curve.accuracy:  # diverged before its first evaluation
                continue
            style = "--" if curve.label.startswith("async") else "-"
            color = colors[curve.label]
            axes[0][column].plot(np.array(curve.samples) / 1e3, curve.accuracy, style, color=color, label=curve.label,
                                 linewidth=1.2)
            axes[1][column].plot(curve.time_s, curve.accuracy, style, color=color, label=curve.label, linewidth=1.2)
        for row, xlabel in enumerate(("samples processed (thousands)", "simulated time (s)")):
            axis = axes[row][column]
            axis.axhline(target, color="grey", linewidth=0.6, linestyle=":")
            if one_node is not None:  # one node's final accuracy: the line the nodes are to reach
                axis.axhline(one_node, color="black", linewidth=0.8, linestyle="--")
            axis.set_ylim(max(0.0, target - 0.25), 1.0)
            axis.set_xlabel(xlabel)
            axis.grid(alpha=0.3)
            if column == 0:
                axis.set_ylabel("held-out accuracy")
        axes[0][column].set_title(f"{n} nodes")
        axes[1][column].set_xscale("log")
    handles = {label: handle for axis in axes[0] for handle, label in zip(*axis.get_legend_handles_labels())}
    axes[0][-1].legend([handles[label] for label in labels], labels, fontsize=7, loc="lower right")
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    figure.savefig(png, dpi=72)
    plt.close(figure)
