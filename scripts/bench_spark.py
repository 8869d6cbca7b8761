"""Benchmark: decentralized DBN training on local Spark, and a many-node simulation.

Part 1 (Spark, this machine): a 784-500-500 DBN on digits28 trained

* in-process on one core (no Spark: the reference the distributed runs are compared to),
* on local Spark by 1 node (``local[1]``) and by 2 nodes (``local[2]``),

reporting samples/s per phase from the second epoch on (the first, which also starts the nodes and
stores the training partitions, on a line of its own), the fraction of node time spent merging
and publishing, and the training time until the consolidated model first reaches a target test
accuracy (checked after every fine-tuning epoch; the check itself is not counted).  For the
2-node speed-up it also runs the in-process reference twice at once, in two processes: what this
machine gives two independent single-thread trainings (its own ceiling for 2 nodes).

Part 2 (pure Python, no Spark): a discrete-event simulation of N nodes with heterogeneous
speeds training a noisy quadratic, publishing after every partition and merging up to
``fanout`` fresh peers, to show store traffic per node, staleness and agreement between nodes
as N grows far past this machine.

    .venv/bin/python scripts/bench_spark.py            # full (a few minutes)
    .venv/bin/python scripts/bench_spark.py --quick    # a short run
    .venv/bin/python scripts/bench_spark.py --repeats 3 --json   # part 1 three times: the speed-ups' medians
"""

from __future__ import annotations

if __name__ == "__main__":  # started as a program: where the project is not importable, inside its virtualenv
    import _venv

    _venv.ensure()


import argparse
import heapq
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import node
import rbm
from node.modes import schedule_place
from _results import BenchRun, add_json_option
from rbm.datasets import load_digits28


# ----------------------------------------------------------------------------- part 1: Spark
def make_dbn(seed: int):
    return rbm.DBN(hidden_layer_sizes=(500, 500), batch_size=32, random_state=seed)


def in_process_reference(X, y, X_test, y_test, epochs: dict[str, int], partitions: int, seed: int) -> dict:
    """The same DBN trained by one process through the same seam, without Spark, on one core
    (Spark gives each Python worker ``OMP_NUM_THREADS = spark.task.cpus = 1``)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        return _in_process(X, y, X_test, y_test, epochs, partitions, seed)


def _in_process(X, y, X_test, y_test, epochs: dict[str, int], partitions: int, seed: int) -> dict:
    model = make_dbn(seed)
    model.initialize(X.shape[1], int(y.max()) + 1)
    order = np.random.default_rng(seed).permutation(len(X))
    parts = np.array_split(order, partitions)
    phase_rates = {}
    for phase_index, phase in enumerate(model.phases()):
        samples, seconds = 0, 0.0
        for epoch in range(epochs[phase]):
            model.set_schedule_epoch(epoch)  # as the trainer does
            for index, rows in enumerate(parts):
                model.set_schedule_plan(epochs[phase], *schedule_place(epoch, [range(partitions)], index))
                rng = np.random.default_rng([seed, phase_index, epoch, index])
                metrics = model.train_partition(X[rows], y[rows], phase, rng)
                samples += metrics["samples"]
                seconds += metrics["seconds"]
        phase_rates[phase] = samples / seconds if seconds else float("nan")
    return {"rates": phase_rates, "accuracy": model.score(X_test, y_test)}


def spark_run(nodes: int, X, y, X_test, y_test, epochs: dict[str, int], partitions: int, seed: int,
              target: float, store_root: str, mode: str = "async") -> dict:
    spark = node.get_spark_session(f"local[{nodes}]", app_name=f"bench-{nodes}-nodes")
    try:
        # Start the Python workers and import the packages first: not part of training speed.
        spark.sparkContext.parallelize(range(2 * nodes), 2 * nodes).map(
            lambda _: __import__("node.executor._node") and os.getpid()).collect()
        store_url = "file://" + os.path.join(store_root, f"store-{mode}-{nodes}")
        model = make_dbn(seed)
        checks: list[tuple[float, float]] = []
        clock = {"train_s": 0.0}
        weights_holder = {}

        def on_epoch(summary: dict) -> None:
            clock["train_s"] += summary["wall_s"]
            if summary["phase"] != "finetune":
                return
            if "weights" not in weights_holder:
                weights_holder["weights"] = node.open_run(store_url, summary["run"]).weights
            probe = make_dbn(seed)
            probe.initialize(X.shape[1], int(y.max()) + 1)
            probe.set_parameters(model.parameters())  # earlier phases (consolidated) ...
            probe.set_parameters(weights_holder["weights"].consolidate("finetune").params)  # ... and the nodes' newest
            checks.append((clock["train_s"], probe.score(X_test, y_test)))

        trainer = node.Trainer(spark, store_url, epochs=epochs, partitions=partitions, seed=seed, progress=False,
                               on_epoch=on_epoch, mode=mode)
        started = time.perf_counter()
        trainer.fit(model, X, y)
        wall_s = time.perf_counter() - started
        rates, first_rates, merge, publish, merges = {}, {}, {}, {}, {}
        for phase in model.phases():
            rows = [h for h in trainer.history_ if h["phase"] == phase]
            records = [r for h in rows for r in h["records"]]
            node_s = sum(r["task_s"] for r in records)
            steady = rows[1:] or rows  # from the second epoch on
            rates[phase] = sum(h["samples"] for h in steady) / sum(h["wall_s"] for h in steady)
            first_rates[phase] = rows[0]["samples"] / rows[0]["wall_s"]
            merge[phase] = sum(r["merge_s"] for r in records) / node_s
            publish[phase] = sum(r["publish_s"] for r in records) / node_s
            merges[phase] = sum(r["merged"] for r in records)
        reached = next((t for t, accuracy in checks if accuracy >= target), None)
        return {"rates": rates, "first_rates": first_rates, "merge": merge, "publish": publish, "merges": merges,
                "wall_s": wall_s, "accuracy": model.score(X_test, y_test), "checks": checks,
                "time_to_target_s": reached,
                "nodes_seen": len({r["node"] for h in trainer.history_ for r in h["records"]})}
    finally:
        spark.stop()


def part1_setup(quick: bool, seed: int) -> tuple:
    """The data, epochs, partitions and target of part 1."""
    split = load_digits28(shifts=[(0, 0), (1, 0), (0, 1), (-1, 0), (0, -1)] if quick else None, random_state=seed)
    epochs = {"rbm0": 2, "rbm1": 2, "finetune": 4 if quick else 6}
    return split, epochs, 8, 0.90 if quick else 0.95


def two_references_at_once(quick: bool, seed: int) -> dict[str, float]:
    """The in-process reference in two processes at once: their summed samples/s per phase."""
    command = [sys.executable, os.path.abspath(__file__), "--reference-json", "--seed", str(seed)] + (
        ["--quick"] if quick else [])
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    rates = [json.loads(run.communicate()[0].strip().splitlines()[-1]) for run in runs]
    return {phase: rates[0][phase] + rates[1][phase] for phase in rates[0]}


def reference_json(quick: bool, seed: int) -> None:
    (X, y, X_test, y_test), epochs, partitions, _target = part1_setup(quick, seed)
    print(json.dumps(in_process_reference(X, y, X_test, y_test, epochs, partitions, seed)["rates"]))


def part1(quick: bool, seed: int, modes: list[str], run: BenchRun, repeats: int = 1) -> None:
    (X, y, X_test, y_test), epochs, partitions, target = part1_setup(quick, seed)
    print(f"== Part 1: 784-500-500 DBN on digits28 ({len(X)} training, {len(X_test)} test samples), "
          f"epochs {epochs}, {partitions} partitions per epoch, target accuracy {target:.2f}")
    trials = []
    for repeat in range(repeats):
        reference = in_process_reference(X, y, X_test, y_test, epochs, partitions, seed)
        reference["pair_rates"] = two_references_at_once(quick, seed)
        store_root = tempfile.mkdtemp(prefix="sparkdbn-bench-")
        try:
            by_mode = {mode: {nodes: spark_run(nodes, X, y, X_test, y_test, epochs, partitions, seed, target,
                                               store_root, mode) for nodes in (1, 2)} for mode in modes}
        finally:
            shutil.rmtree(store_root, ignore_errors=True)
        trials.append((reference, by_mode))
        of = f", repeat {repeat + 1} of {repeats}" if repeats > 1 else ""
        for mode, runs in by_mode.items():
            print(f"-- mode {mode!r}{of}")
            show_runs(reference, runs, epochs, target)
            run.table(f"784-500-500 DBN on digits28, mode {mode!r}{of}: {len(X)} training rows, epochs {epochs}, "
                      f"{partitions} partitions per epoch (samples/s from each phase's second epoch on)",
                      ["", *epochs], phase_rows(reference, runs, epochs),
                      f"Final test accuracy: in-process {reference['accuracy']:.4f}, "
                      + ", ".join(f"{n} node(s) {r['accuracy']:.4f}" for n, r in runs.items()) + ". Time to "
                      f"{target:.2f}: " + ", ".join(f"{n} node(s) " + ("not reached" if r["time_to_target_s"] is None
                                                                        else f"{r['time_to_target_s']:.1f} s")
                                                     for n, r in runs.items()) + ".")
    if repeats > 1:
        for mode in modes:
            rows = speedup_rows([(reference, by_mode[mode]) for reference, by_mode in trials], epochs)
            print(f"-- mode {mode!r}: the {repeats} repeats, median [lowest, highest]")
            width = max(len(row[0]) for row in rows)
            for label, *cells in rows:
                print(f"{label:{width}s}" + "".join(f"{cell:>20s}" for cell in cells))
            run.table(f"784-500-500 DBN on digits28, mode {mode!r}: the speed-ups of the {repeats} repeats, "
                      "median [lowest, highest]", ["", *epochs], rows)


def speedup_rows(trials: list[tuple[dict, dict[int, dict]]], epochs: dict[str, int]) -> list[list[str]]:
    """The speed-ups of repeated part-1 runs, one row per ratio, a ``median [lowest, highest]`` cell per phase."""
    ratios = {
        "2 nodes / 1 node": lambda reference, runs, p: runs[2]["rates"][p] / runs[1]["rates"][p],
        "2 nodes / in-process (one process on one core)":
            lambda reference, runs, p: runs[2]["rates"][p] / reference["rates"][p],
        "the machine's ceiling (two in-process at once / one)":
            lambda reference, runs, p: reference["pair_rates"][p] / reference["rates"][p],
        "2 nodes / in-process, of the ceiling":
            lambda reference, runs, p: runs[2]["rates"][p] / reference["pair_rates"][p],
    }

    def cell(values: list[float]) -> str:
        return f"{np.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"

    return [[label, *(cell([ratio(reference, runs, phase) for reference, runs in trials]) for phase in epochs)]
            for label, ratio in ratios.items()]


def phase_rows(reference: dict, runs: dict[int, dict], epochs: dict[str, int]) -> list[list]:
    """show_runs' figures as table rows, one column per phase."""
    phases = list(epochs)
    rows = [["samples/s, in-process (no Spark)", *(reference["rates"][p] for p in phases)]]
    rows += [[f"samples/s, Spark {nodes} node(s)", *(run["rates"][p] for p in phases)] for nodes, run in runs.items()]
    rows += [["speed-up, 2 nodes / 1 node", *(runs[2]["rates"][p] / runs[1]["rates"][p] for p in phases)],
             ["two in-process trainings at once / one (the machine's ceiling)",
              *(reference["pair_rates"][p] / reference["rates"][p] for p in phases)],
             ["Spark 1 node / in-process", *(runs[1]["rates"][p] / reference["rates"][p] for p in phases)],
             ["  its first epoch (starts the nodes, stores the data)",
              *(runs[1]["first_rates"][p] / reference["rates"][p] for p in phases)]]
    for nodes, run in runs.items():
        rows += [[f"node time merging, {nodes} node(s)", *(f"{run['merge'][p]:.1%}" for p in phases)],
                 [f"node time publishing, {nodes} node(s)", *(f"{run['publish'][p]:.1%}" for p in phases)],
                 [f"merges, {nodes} node(s)", *(run["merges"][p] for p in phases)]]
    return rows


def _column(cell: float | int | str) -> str:
    """One cell of show_runs' text table: counts as integers, rates without decimals, ratios with two."""
    if isinstance(cell, str):
        return f"{cell:>12s}"
    if isinstance(cell, int):
        return f"{cell:12d}"
    return f"{cell:12.0f}" if cell >= 100 else f"{cell:12.2f}"


def show_runs(reference: dict, runs: dict[int, dict], epochs: dict[str, int], target: float) -> None:
    rows = phase_rows(reference, runs, epochs)
    width = max(len(row[0]) for row in rows)
    print(" " * width + "".join(f"{phase:>12s}" for phase in epochs))
    for label, *cells in rows:
        print(f"{label:{width}s}" + "".join(_column(cell) for cell in cells))
    print(f"final accuracy: in-process {reference['accuracy']:.4f}, "
          + ", ".join(f"{n} node(s) {r['accuracy']:.4f}" for n, r in runs.items()))
    for nodes, run in runs.items():
        curve = ", ".join(f"{t:.1f}s:{a:.3f}" for t, a in run["checks"])
        reached = "not reached" if run["time_to_target_s"] is None else f"{run['time_to_target_s']:.1f} s"
        print(f"{nodes} node(s): wall {run['wall_s']:.1f} s (incl. session work), time to {target:.2f}: {reached} "
              f"(training time: accuracy after each fine-tuning epoch: {curve})")


# ----------------------------------------------------------------------------- part 2: simulation
def simulate(n_nodes: int, fanout: int | None, *, partitions_per_node: int = 30, dim: int = 200,
             snapshot_bytes: int = 2_600_000, announce_bytes: int = 200, delay: float = 0.05,
             lr: float = 0.3, noise: float = 1.0, seed: int = 0) -> dict:
    """N asynchronous nodes on a noisy quadratic: publish after each partition, merge fresh peers.

    A partition takes ``1 / speed`` time units (speeds lognormal, sigma 0.3).  A published
    version reaches the others' announcements after ``delay``.  Before a partition a node merges
    at most ``fanout`` peers (random among those with a version it has not merged yet):
    ``w <- (1 - a) w + a mean(peers)``, ``a = m / (m + 1)``; it reads each merged snapshot from
    the store once.  Returns per-node traffic per partition, staleness and agreement.
    """
    rng = np.random.default_rng(seed)
    target = rng.normal(size=dim)
    speeds = rng.lognormal(0.0, 0.3, size=n_nodes)
    w = np.zeros((n_nodes, dim))
    published = [[] for _ in range(n_nodes)]  # (time visible, version, params)
    merged_version = np.full((n_nodes, n_nodes), -1)
    versions = np.zeros(n_nodes, dtype=int)
    done = np.zeros(n_nodes, dtype=int)
    reads = np.zeros(n_nodes)
    merges, staleness_versions, staleness_time = [], [], []
    events = [(1.0 / speeds[i] * rng.uniform(0.2, 1.0), i) for i in range(n_nodes)]
    heapq.heapify(events)
    now = 0.0
    while events:
        now, i = heapq.heappop(events)
        # 1. merge: peers with a visible version newer than the one last merged from them
        fresh = []
        for j in range(n_nodes):
            if j == i or not published[j]:
                continue
            visible = [entry for entry in published[j] if entry[0] <= now]
            if visible and visible[-1][1] > merged_version[i, j]:
                fresh.append((j, visible[-1]))
        if fanout is not None and len(fresh) > fanout:
            picks = rng.choice(len(fresh), size=fanout, replace=False)
            fresh = [fresh[k] for k in picks]
        if fresh:
            peers = np.mean([entry[2] for _, entry in fresh], axis=0)
            a = len(fresh) / (len(fresh) + 1)
            w[i] = (1 - a) * w[i] + a * peers
            for j, entry in fresh:
                merged_version[i, j] = entry[1]
                staleness_versions.append(versions[j] - entry[1])
                staleness_time.append(now - (entry[0] - delay))
            reads[i] += len(fresh)
        merges.append(len(fresh))
        # 2. train: a few noisy gradient steps
        for _ in range(5):
            w[i] -= lr * (w[i] - target + noise * rng.normal(size=dim))
        # 3. publish
        versions[i] += 1
        published[i].append((now + delay, versions[i], w[i].copy()))
        if len(published[i]) > 3:  # keep_versions
            published[i].pop(0)
        done[i] += 1
        if done[i] < partitions_per_node:
            heapq.heappush(events, (now + 1.0 / speeds[i], i))
    mean = w.mean(axis=0)
    return {
        "nodes": n_nodes, "fanout": fanout,
        "written_mb": snapshot_bytes / 1e6,  # per node per partition: one snapshot
        "read_mb": float(reads.mean() / partitions_per_node * snapshot_bytes / 1e6),
        "announce_kb": (n_nodes - 1) * announce_bytes / 1e3,  # announcements received per partition
        "merged": float(np.mean(merges)),
        "stale_versions": float(np.mean(staleness_versions)) if staleness_versions else 0.0,
        "stale_time": float(np.mean(staleness_time)) if staleness_time else 0.0,
        "spread": float(np.mean(np.linalg.norm(w - mean, axis=1))),
        "error": float(np.linalg.norm(mean - target)),
        "single_node_noise_floor": float(noise * np.sqrt(dim * lr / (2 - lr))),
    }


def part2(quick: bool, seed: int, run: BenchRun) -> None:
    sizes = [2, 8, 32, 128] if quick else [2, 8, 32, 128, 512]
    print("\n== Part 2: simulation (no Spark) of N nodes, snapshot 2.6 MB (the 784-500-500 DBN's fine-tuning "
          "weights), 30 partitions per node")
    print(f"{'nodes':>6s} {'fanout':>7s} {'write MB':>9s} {'read MB':>8s} {'announce kB':>12s} {'merged':>7s} "
          f"{'stale(v)':>9s} {'stale(t)':>9s} {'spread':>8s} {'error':>7s}")
    rows = []
    for n in sizes:
        for fanout in (None, 4):
            if fanout is not None and fanout >= n - 1:
                continue
            r = simulate(n, fanout, seed=seed)
            print(f"{r['nodes']:6d} {str(r['fanout'] or 'all'):>7s} {r['written_mb']:9.2f} {r['read_mb']:8.2f} "
                  f"{r['announce_kb']:12.1f} {r['merged']:7.2f} {r['stale_versions']:9.2f} {r['stale_time']:9.2f} "
                  f"{r['spread']:8.3f} {r['error']:7.3f}")
            rows.append([r["nodes"], str(r["fanout"] or "all"), r["written_mb"], r["read_mb"], r["announce_kb"],
                         r["merged"], r["stale_versions"], r["stale_time"], r["spread"], r["error"]])
    print("write/read MB and announce kB are per node per partition; merged = peers merged per partition; "
          "stale(v) = versions the merged snapshot was behind its author; stale(t) = its age in partition times; "
          "spread = mean distance of a node's weights from the nodes' mean; error = distance of that mean from "
          f"the optimum (one node alone: noise floor about {simulate(2, None, seed=seed)['single_node_noise_floor']:.2f}).")
    run.table("Simulation (no Spark) of N nodes: 2.6 MB snapshots (the 784-500-500 DBN's fine-tuning weights), "
              "30 partitions per node",
              ["nodes", "fan-out", "written MB", "read MB", "announced kB", "peers merged", "staleness (versions)",
               "staleness (partition times)", "spread", "error"], rows,
              "Per node and partition. Spread: mean distance of a node's weights from the nodes' mean; error: "
              "distance of that mean from the optimum of the noisy quadratic the nodes train.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller data and fewer epochs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-spark", action="store_true", help="only the simulation")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run part 1 this many times and summarize its speed-ups (median, range; default 1)")
    parser.add_argument("--reference-json", action="store_true", help=argparse.SUPPRESS)  # two_references_at_once
    parser.add_argument("--modes", nargs="+", default=["async"], choices=("async", "sync", "sharing"),
                        help="training modes of the Spark runs (default async)")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.reference_json:
        reference_json(args.quick, args.seed)
        return 0
    run = BenchRun(__file__, args).start()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    print("(machine shared with other jobs: absolute numbers are noisy; compare the ratios)")
    if not args.skip_spark:
        part1(args.quick, args.seed, args.modes, run, repeats=args.repeats)
    part2(args.quick, args.seed, run)
    run.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
