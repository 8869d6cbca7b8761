"""Benchmark: accuracy at equal epochs as nodes grow, for the ways to keep it.

Part 1 (in-process simulation, no Spark): ``n`` replicas of a model each train one partition per
round on ``1/n`` of the data (as many partitions per epoch as a fit on ``local[n]`` takes by default,
or ``--partitions-per-node``; the warm-up a node's first epoch, or ``--warmup``), then combine their
progress as the asynchronous nodes do when every peer's snapshot is fresh.  Strategies:

* ``average``       -- average the replicas after every round (today's behaviour);
* ``linear``/``sqrt`` -- the same, learning rates times ``n`` / ``sqrt(n)`` with the warm-up of
  :mod:`node.modes._scaling`; ``auto`` (the default rule) is linear capped by the steps per node and
  epoch; ``linear-nowarmup`` without the warm-up;
* ``delta-D``        -- add the peers' progress since their last merged version, damped by D,
  instead of averaging whole models;
* ``every-K``        -- average only every K rounds (merge less often);
* ``linear-every-2`` -- a combination;
* ``average+outer``, ``auto+outer`` -- ``average`` / ``auto`` with the outer step after each average
  (:func:`actors.outer_step`, DiLoCo: every replica steps from the same anchor on the same average;
  ``--outer ETA/MU``, 0.7/0.8 when not given), its state reset at each phase.

Part 2 (``--spark``): the chosen default confirmed on ``local[n]`` Spark through the real
:class:`node.Trainer` (``scale_rule="auto"`` vs ``"none"``): the score at equal epochs per node count
and rule over ``--seeds`` runs, against one process's (``local[1]``), and with ``--json`` a figure of
it (``--png``).

Part 3 (``--bound K [K ...]``): the large-batch bound -- what no way of combining ``n`` nodes'
progress can beat at equal epochs short of merging after every minibatch: one process trained
with the nodes' combined minibatch (``n`` times the model's) at ``K`` times its learning rates
(ramped up from 1 over its first epoch, as the nodes' warm-up), per node count ``n`` of
``--nodes``.  Averaging ``n`` nodes after every minibatch step is exactly that training.

    .venv/bin/python scripts/bench_scaling.py                       # digits DBN, 1/2/4/8 nodes
    .venv/bin/python scripts/bench_scaling.py --kind rbm            # an RBM alone (reconstruction MSE)
    .venv/bin/python scripts/bench_scaling.py --spark --nodes 2 4 8 # the Spark confirmation
    .venv/bin/python scripts/bench_scaling.py --spark --nodes 1 2 4 8 16 --rules auto --seeds 1 --target 0.93
    .venv/bin/python scripts/bench_scaling.py --data digits28 --kind dbn128 --nodes 1 8 16
    .venv/bin/python scripts/bench_scaling.py --data digits28 --kind lenet --nodes 1 8
    .venv/bin/python scripts/bench_scaling.py --data digits28 --kind lenet --nodes 8 --bound 1 2.86 4 6 8 --seeds 4
"""

from __future__ import annotations

if __name__ == "__main__":  # started as a program: where the project is not importable, inside its virtualenv
    import _venv

    _venv.ensure()


import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import node  # noqa: E402
import rbm  # noqa: E402
from actors import OuterState, outer_step  # noqa: E402
from node import TrainingSettings  # noqa: E402
from node.modes import mode_named  # noqa: E402
from node.modes._scaling import (default_warmup_partitions, learning_rate_scale, max_learning_rate_factor,  # noqa: E402
                                 rates_cap, resolve_rule, schedule_epoch, schedule_place)
from rbm.datasets import load_digits01, load_digits28  # noqa: E402

from _results import BenchRun, add_json_option  # noqa: E402

STRATEGIES = ("average", "linear", "sqrt", "auto", "linear-nowarmup", "delta-1.0", "delta-0.5", "every-2", "every-4",
              "linear-every-2", "average+outer", "auto+outer")


# ----------------------------------------------------------------------------- models and data
def load(data: str, kind: str = "dbn"):
    if data == "digits":
        return load_digits01(test_fraction=0.25, random_state=0)
    return load_digits28(flatten=kind != "lenet")


def make_model(kind: str, seed: int):
    if kind == "dbn":
        return rbm.DBN((64, 64), random_state=seed)
    if kind == "dbn-adam":
        return rbm.DBN((64, 64), finetune_updater="adam", finetune_learning_rate=0.003, random_state=seed)
    if kind == "dbn128":
        return rbm.DBN((128, 128), random_state=seed)
    if kind == "rbm":
        return rbm.RBM(64, random_state=seed)
    if kind == "lenet":
        return rbm.lenet(random_state=seed)
    raise ValueError(kind)


EPOCHS = {"dbn": {"rbm0": 3, "rbm1": 3, "finetune": 10}, "dbn-adam": {"rbm0": 3, "rbm1": 3, "finetune": 10},
          "dbn128": {"rbm0": 2, "rbm1": 2, "finetune": 4}, "rbm": {"rbm": 5},
          "lenet": {"train": 2}}


def score(model, kind: str, split) -> float:
    """Test accuracy (classifiers) or test reconstruction error (an RBM alone)."""
    if kind == "rbm":
        return float(model._reconstruction_mse(split.X_test))
    return float(model.score(split.X_test, split.y_test))


# ----------------------------------------------------------------------------- the simulation
def _mean(params_list):
    return {name: np.mean([p[name] for p in params_list], axis=0) for name in params_list[0]}


def simulate(kind: str, split, nodes: int, strategy: str, seed: int, per_node: int | str = "default",
             warmup: int | None = None, outer: tuple[float, float] | None = None) -> float:
    """Train ``nodes`` replicas with ``strategy`` on ``per_node * nodes`` partitions per epoch
    (``"default"``: as many as an ``async`` fit takes by default,
    :meth:`node.modes._base.TrainingMode.default_partitions`), warming up over each node's first epoch of a
    phase (the default warm-up; ``warmup``: over that many partitions); the score of their
    consolidation (the mean)."""
    import copy

    base = make_model(kind, seed)
    X, y = split.X_train, split.y_train
    strategy, with_outer = strategy.removesuffix("+outer"), strategy.endswith("+outer")
    if with_outer and outer is None:
        outer = (0.7, 0.8)  # the candidate measured in docs/scaling-out.md, "The outer step"
    rule = {"average": "none", "linear-nowarmup": "linear", "linear-every-2": "linear"}.get(strategy, strategy)
    if strategy.startswith(("delta", "every")):
        rule = "none"
    settings = TrainingSettings(scale_rule=rule)
    mode = mode_named(settings.mode)
    batch_size = base.batch_size
    node_batch = mode.node_batch_size(settings, nodes, len(X), batch_size,  # "auto": smaller past the rates' share
                                      max_learning_rate_factor(base))
    base = rbm.model_from_spec(rbm.spec_for_batch_size(base.to_spec(), node_batch))  # as a fit's nodes build it
    base.initialize(X.shape[1] if X.ndim == 2 else X.shape[1:], None if kind == "rbm" else np.unique(y))
    replicas = [copy.deepcopy(base) for _ in range(nodes)]
    if per_node == "default":
        per_node = mode.default_partitions(settings, nodes, len(X), batch_size) // nodes
    parts = np.array_split(np.random.default_rng(seed).permutation(len(X)), per_node * nodes)
    slots = [list(range(i, per_node * nodes, nodes)) for i in range(nodes)]  # dealt as a fit deals them
    if warmup is None:
        warmup = default_warmup_partitions(per_node * nodes, nodes)
    if strategy == "linear-nowarmup":
        warmup = 0
    merge_every = int(strategy.rsplit("-", 1)[1]) if "every" in strategy else 1
    damping = float(strategy.split("-")[1]) if strategy.startswith("delta") else None
    for phase_index, phase in enumerate(base.phases()):
        resolved = resolve_rule(rule)
        bases = [r.parameters(phase) for r in replicas]
        # A phase starts without one; none where the nodes' minibatch is split (as the executor decides).
        outer_state = OuterState.start(bases[0]) if with_outer and nodes > 1 and node_batch == batch_size else None
        done = 0
        rounds = EPOCHS[kind][phase] * per_node
        for round_index in range(rounds):
            epoch, half = divmod(round_index, per_node)
            for i, replica in enumerate(replicas):
                steps = len(X) / (nodes * batch_size) if rule == "auto" else None
                scale = learning_rate_scale(resolved, nodes, done, warmup, steps, node_batch / batch_size,
                                            rates_cap(max_learning_rate_factor(base)))
                replica.set_learning_rate_scale(scale)
                replica.set_schedule_epoch(schedule_epoch(epoch, scale))  # as the trainer (node.modes._scaling)
                partition = half * nodes + i
                replica.set_schedule_plan(EPOCHS[kind][phase], *schedule_place(epoch, slots, partition))
                rows = parts[partition]
                replica.train_partition(X[rows], None if kind == "rbm" else y[rows], phase,
                                        np.random.default_rng([seed, phase_index, epoch, partition]))
            done += 1
            if nodes == 1 or ((round_index + 1) % merge_every and round_index + 1 < rounds):
                continue
            params = [r.parameters(phase) for r in replicas]
            if damping is None:
                merged = _mean(params)
                if outer_state is not None:  # the replicas are equal: one step for all
                    merged, outer_state = outer_step(outer_state, merged, *outer)
                for replica in replicas:
                    replica.set_parameters(merged)
                bases = [merged] * nodes
            else:
                deltas = [{k: p[k] - b[k] for k in p} for p, b in zip(params, bases)]
                total = {k: sum(d[k] for d in deltas) for k in deltas[0]}
                bases = []
                for i, replica in enumerate(replicas):
                    new = {k: params[i][k] + damping * (total[k] - deltas[i][k]) for k in total}
                    replica.set_parameters(new)
                    bases.append(new)
        consolidated = _mean([r.parameters(phase) for r in replicas])
        for replica in replicas:
            replica.set_parameters(consolidated)
    for replica in replicas:
        replica.set_learning_rate_scale(1.0)
    return score(replicas[0], kind, split)


def part_simulation(args) -> None:
    from threadpoolctl import threadpool_limits

    split = load(args.data, args.kind)
    what = "test reconstruction MSE" if args.kind == "rbm" else "test accuracy"
    print(f"# {args.data}: {len(split.X_train)} training rows; {args.seeds} seed(s); score = {what}; "
          f"epochs {EPOCHS[args.kind]}")
    header = f"{'strategy':<16}" + "".join(f"{n:>8} nodes" for n in args.nodes)
    for per_node in args.partitions_per_node:
        print(f"## {args.kind}, {per_node} partitions per node and epoch\n{header}")
        with threadpool_limits(limits=1):
            for strategy in args.strategies:
                cells = []
                for n in args.nodes:
                    try:
                        values = [simulate(args.kind, split, n, strategy, seed, per_node, args.warmup, args.outer)
                                  for seed in range(args.seeds)]
                    except ValueError as error:  # rbm.DivergenceError: the scaled rates were past the stable range
                        cells.append(f"{'diverged':>14}")
                        print(f"# {strategy} on {n} nodes: {error}", file=sys.stderr)
                        continue
                    cells.append(f"{np.mean(values):>8.4f}±{np.std(values):.3f}")
                print(f"{strategy:<16}" + "".join(f"{c:>14}" for c in cells), flush=True)


# ----------------------------------------------------------------------------- the large-batch bound
BOUND_PARTITIONS_PER_EPOCH = 8  # the steps of the bound's warm-up ramp (its first epoch)


def large_batch_bound(kind: str, split, nodes: int, rate_factor: float, seed: int) -> float:
    """One process with ``nodes`` times the model's minibatch, its learning rates times ``rate_factor``
    (ramped up from 1 over its first epoch); its score after the model's epochs."""
    model = make_model(kind, seed)
    model = rbm.model_from_spec(rbm.spec_for_batch_size(model.to_spec(), model.batch_size * nodes))
    X, y = split.X_train, split.y_train
    model.initialize(X.shape[1] if X.ndim == 2 else X.shape[1:], None if kind == "rbm" else np.unique(y))
    parts = np.array_split(np.random.default_rng(seed).permutation(len(X)), BOUND_PARTITIONS_PER_EPOCH)
    for phase_index, phase in enumerate(model.phases()):
        for epoch in range(EPOCHS[kind][phase]):
            for index, rows in enumerate(parts):
                done = epoch * len(parts) + index
                scale = learning_rate_scale("linear", rate_factor, done, len(parts)) if rate_factor > 1 else 1.0
                model.set_learning_rate_scale(scale)
                model.set_schedule_epoch(schedule_epoch(epoch, scale))  # as the trainer (node.modes._scaling)
                model.set_schedule_plan(EPOCHS[kind][phase], *schedule_place(epoch, [range(len(parts))], index))
                model.train_partition(X[rows], None if kind == "rbm" else y[rows], phase,
                                      np.random.default_rng([seed, phase_index, epoch, index]))
    model.set_learning_rate_scale(1.0)
    return score(model, kind, split)


def part_bound(args) -> None:
    from threadpoolctl import threadpool_limits

    split = load(args.data, args.kind)
    print(f"# {args.data}: the large-batch bound of {args.kind}, epochs {EPOCHS[args.kind]}; {args.seeds} seed(s); "
          f"one process, minibatch n x the model's, rates x K; '*': a seed diverged, the mean of the others")
    print(f"{'rates':<8}" + "".join(f"{n:>10} x batch" for n in args.nodes))
    with threadpool_limits(limits=1):
        for factor in args.bound:
            cells = []
            for n in args.nodes:
                values = []
                for seed in range(args.seeds):
                    try:
                        values.append(large_batch_bound(args.kind, split, n, factor, seed))
                    except ValueError as error:  # rbm.DivergenceError
                        print(f"# rates x{factor}, {n} x batch, seed {seed}: {error}", file=sys.stderr)
                diverged = "*" if len(values) < args.seeds else " "
                cells.append(f"{np.mean(values):>8.4f}{diverged}" if values else f"{'diverged':>9}")
            print(f"x{factor:<7g}" + "".join(f"{c:>16}" for c in cells), flush=True)


# ----------------------------------------------------------------------------- Spark confirmation
def part_spark(args, run: BenchRun | None = None) -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    split = load(args.data, args.kind)
    per_node = args.partitions_per_node[0]
    partitions = "the default" if per_node == "default" else f"{per_node}n"
    target = args.target if args.kind != "rbm" else None  # a classifier's last phase is validated on the test rows
    print(f"# Spark local[n], partitions {partitions}, {args.kind} on {args.data}, epochs {EPOCHS[args.kind]}"
          + (f"; epochs of the last phase to {target} test accuracy" if target else ""))
    outer = ("the rule's" if args.outer is None else f"{args.outer[0]:g}/{args.outer[1]:g}")
    outer_settings = ({} if args.outer is None else
                      {"outer_learning_rate": args.outer[0], "outer_momentum": args.outer[1]})
    print(f"# outer step {outer} (1/0: off); the one-process line: 1 node")
    print(f"{'nodes':>5} {'rule':>6} {'seed':>4} {'score':>8} {'fit_s':>7} {'max factor':>10} {'nodes merging':>13} "
          f"{'epochs to':>9} {'s/epoch':>7}")
    scores: dict[tuple[int, str], list[float]] = {}
    fit_times: dict[tuple[int, str], list[float]] = {}
    for n in args.nodes:
        spark = (SparkSession.builder.master(f"local[{n}]").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.memory", "1g").getOrCreate())
        for rule in args.rules:
            for seed in range(args.seeds):
                model = make_model(args.kind, seed)
                with tempfile.TemporaryDirectory() as store:
                    started = time.perf_counter()
                    validation = {"validation_data": (split.X_test, split.y_test)} if target else {}
                    trainer = node.Trainer(spark=spark, store_url=store, epochs=EPOCHS[args.kind],
                                           partitions=None if per_node == "default" else per_node * n,
                                           progress=False, seed=seed, scale_rule=rule, key=b"bench-scaling-key",
                                           log_dir=None, fanout=args.fanout, **outer_settings, **validation)
                    trainer.fit(model, split.X_train, None if args.kind == "rbm" else split.y_train)
                    fit_s = time.perf_counter() - started
                records = [r for summary in trainer.history_ for r in summary["records"]]
                last = [summary for summary in trainer.history_ if summary["phase"] == model.phases()[-1]]
                reached = [index + 1 for index, summary in enumerate(last)
                           if target and (summary.get("validation") or {}).get("val_accuracy", 0.0) >= target]
                scores.setdefault((n, rule), []).append(score(model, args.kind, split))
                fit_times.setdefault((n, rule), []).append(fit_s)
                print(f"{n:>5} {rule:>6} {seed:>4} {score(model, args.kind, split):>8.4f} {fit_s:>7.1f} "
                      f"{max(r['learning_rate_scale'] for r in records):>10.2f} "
                      f"{max(r['nodes_merging'] for r in records):>13} "
                      f"{(reached[0] if reached else '-') if target else '':>9} "
                      f"{np.mean([summary['wall_s'] for summary in last]):>7.2f}", flush=True)
        spark.stop()
    one = [values for (n, _), values in scores.items() if n == 1]
    reference = float(np.mean(one[0])) if one else None
    rows = [[n, rule, len(values), float(np.mean(values)), float(np.min(values)), float(np.max(values)),
             None if reference is None else 100.0 * (float(np.mean(values)) - reference),
             float(np.mean(fit_times[n, rule]))] for (n, rule), values in scores.items()]
    print(f"\n{'nodes':>5} {'rule':>6} {'runs':>4} {'mean':>8} {'min':>8} {'max':>8} {'gap (points)':>12} "
          f"{'fit_s':>7}")
    for n, rule, runs, mean, low, high, gap, fit_s in rows:
        print(f"{n:>5} {rule:>6} {runs:>4} {mean:>8.4f} {low:>8.4f} {high:>8.4f} "
              f"{'-' if gap is None else f'{gap:+.2f}':>12} {fit_s:>7.1f}")
    if run is not None:
        if args.png:
            plot_spark(scores, reference, args.png, f"{args.kind} on {args.data}, Spark local[n], equal epochs",
                       "test reconstruction MSE" if args.kind == "rbm" else "test accuracy")
            run.figure(args.png, "score at equal epochs against nodes (mean over the runs, bars: min to max); "
                                 "dashed: one process (local[1])")
        run.table(f"{args.kind} on {args.data}, Spark local[n], epochs {EPOCHS[args.kind]}, outer step "
                  f"{outer}", ["nodes", "rule", "runs", "score (mean)", "min", "max", "gap to 1 node (points)",
                               "fit (s)"], rows,
                  "1 node: one process's line (a fit on local[1]). Fit times are the driver's wall time on a "
                  "shared machine: not a speed measurement.")


def plot_spark(scores: dict[tuple[int, str], list[float]], reference: float | None, png: str, title: str,
               ylabel: str) -> None:
    """Score against nodes, one line per rule (mean, min-max bars), the one-process line dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5.6, 3.6))
    for rule in dict.fromkeys(rule for _, rule in scores):
        sizes = sorted(n for n, r in scores if r == rule)
        means = np.array([np.mean(scores[n, rule]) for n in sizes])
        spread = np.array([[means[k] - np.min(scores[n, rule]), np.max(scores[n, rule]) - means[k]]
                           for k, n in enumerate(sizes)]).T
        axis.errorbar(sizes, means, yerr=spread, marker="o", capsize=3, label=f"scale_rule={rule}")
    if reference is not None:
        axis.axhline(reference, color="black", linestyle="--", linewidth=0.8, label="one process")
    axis.set_xscale("log", base=2)
    axis.set_xticks(sorted({n for n, _ in scores}), [str(n) for n in sorted({n for n, _ in scores})])
    axis.set_xlabel("nodes (local[n])")
    axis.set_ylabel(ylabel)
    axis.set_title(title, fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    figure.savefig(png, dpi=72)
    plt.close(figure)


def _outer(text: str) -> tuple[float, float]:
    try:
        eta, mu = (float(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--outer takes ETA/MU, e.g. 0.7/0.9, got {text!r}") from None
    return eta, mu


def _per_node(text: str) -> int | str:
    return text if text == "default" else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="digits", choices=("digits", "digits28"), help="the dataset")
    parser.add_argument("--kind", default="dbn", choices=tuple(EPOCHS), help="the model trained")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4, 8], help="the node counts compared")
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES,
                        help="the simulation's ways of combining the nodes' progress (above)")
    parser.add_argument("--seeds", type=int, default=2, help="runs per setting, seeds 0 .. N-1")
    parser.add_argument("--partitions-per-node", type=_per_node, nargs="+", default=["default"],
                        help="partitions per node and epoch, or 'default': what a fit takes when given none "
                             "(Spark: partitions = this x nodes)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="warm-up partitions per node and phase (default: a node's first epoch, as a fit)")
    parser.add_argument("--spark", action="store_true", help="confirm on local[n] Spark instead of simulating")
    parser.add_argument("--outer", type=_outer, default=None, metavar="ETA/MU",
                        help="the outer step's rate and momentum (strategies '+outer'; --spark: the fits'; 1/0: off); "
                             "default: 0.7/0.8 for the strategies, the fit's default (the rule's) for --spark")
    parser.add_argument("--rules", nargs="+", default=["none", "auto"], help="--spark: the scale_rule values")
    parser.add_argument("--fanout", type=int, default=None,
                        help="--spark: peers a node merges per partition at most (default: the fit's, every fresh one)")
    parser.add_argument("--target", type=float, default=None,
                        help="--spark: also count the last phase's epochs until this test accuracy (classifiers)")
    parser.add_argument("--bound", type=float, nargs="+", default=None, metavar="K",
                        help="the large-batch bound instead: one process, minibatch n x the model's, rates x K")
    parser.add_argument("--png", default=None,
                        help="--spark: the figure of score against nodes (default: beside the --json file)")
    add_json_option(parser)
    args = parser.parse_args()
    run = BenchRun(__file__, args).start()  # its tables are printed text: the JSON keeps the printed report
    if args.spark and args.png is None and run.path:
        args.png = os.path.splitext(run.path)[0] + ".png"
    if args.bound:
        part_bound(args)
    else:
        part_spark(args, run) if args.spark else part_simulation(args)
    run.finish()


if __name__ == "__main__":
    main()
