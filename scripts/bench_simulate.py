"""Benchmark: a convergence simulation of 8, 64 and 256 nodes for every training mode (issues 11, 18 and 42).

In one process, no Spark: ``n`` simulated nodes each hold a replica of a model and a disjoint shard
of its data (``--model``): a small DBN (784-64-10) on digits28 (the default), the DBN(64, 64) on
digits, or LeNet on digits28.  A DBN's pretraining phases run once, in one process, before the
simulation (every node starts from the same pretrained weights); the last phase (the DBN's
fine-tuning, LeNet's training) is simulated.  A discrete-event clock orders the nodes' partitions:

* a partition takes ``rows / rate`` seconds (``rate``: for the DBN on digits28, the fine-tuning
  samples/s of the 784-500-500 DBN on one Spark node as ``bench_spark.py`` measured it, which the
  small model stands in for; for the other models, and with ``--rate measured``, the model's own
  speed measured in-process on one core) times the node's speed
  (lognormal, fixed per node; ``--straggler`` makes node 0 of several that many times slower) times a per-partition
  jitter, plus a fixed per-partition write cost and a read cost for every file the node reads from the store before it trains
  (snapshots for ``async`` and ``sync``, small sparse updates for ``sharing``; the local store's
  costs as ``bench_storage.py`` measured them), all on the node's critical path;
* the partitions are dealt as the real nodes deal them (``async``, ``sharing``; :mod:`_simulate_queue`): a
  free node trains its own, then a slower peer's not started yet, and ``async`` starts an epoch only
  once the one before the last is finished (each epoch is a job, queued behind the running one) --
  ``--no-stealing``: every node its own shard only, never waiting;
* ``--cores N``: the nodes share ``N`` cores, as ``local[n]`` on a smaller machine makes them (a
  partition holds a core from its first read to its write; a node waits for a free one);
* what a node publishes becomes visible to the others ``delay_s`` after the partition ends
  (the announcement latency measured by ``bench_actors.py``);
* ``async`` with fan-out ``f``: before a partition a node merges at most ``f`` of the peers whose
  newest visible version it has not merged yet (a random subset, as the node's actor picks them),
  with :func:`actors.merge_snapshots` (``a = m / (m + 1)``), and between two of its minibatches those
  that its actor fetched meanwhile (visible ``read_s`` earlier; ``f`` in all per partition; the time of a
  minibatch is its share of the partition's compute time; not with the outer step, as the executor) --
  ``--no-minibatch-merges``: before a partition only.  A peer's version is known to the simulation
  once the peer's partition has started, so one that a peer publishes from a partition it started
  after this one's start is merged next time;
* ``sync``: every node trains one partition, then all nodes average (a barrier: the round ends
  with its slowest node, then each reads ``n - 1`` snapshots);
* ``sharing``: the real mode's :class:`node.modes._sharing.ThresholdAccumulator` turns a node's
  change into a thresholded sparse update (with its residual); before a partition a node
  applies every visible peer update not applied yet, each once (summed with ``np.bincount``,
  equal to :meth:`SparseUpdate.apply_to` one after the other).

The outer step (``--outer ETA/MU`` or ``default``, by default both plain merging and the fit's
default, the rule's step for the nodes and rows, :func:`rule_outer`): after a
partition (``async``) or a round's average (``sync``) a node steps from its anchor with Nesterov
momentum on what its training changed (:func:`actors.outer_step`; in ``async`` a merge moves the anchor
with the weights), as the executor does, and
not where the nodes' minibatch is split.  ``--seeds N`` repeats everything for N seeds (each its own
pretraining, shards and node speeds) and adds a table of accuracy at equal epochs (mean, std, gap to
one node) and simulated time to one node's final accuracy.  A run whose training diverges (a node's
weights turn non-finite: a fit's task would fail there) ends where it diverged; the table averages the
seeds that finished and counts the diverged ones apart.

Learning rates follow the project's default rule through the executor's own
:class:`node.modes._scaling.NodeScaling` (``"auto"``, warm-up 2): ``async`` counts the peers merged
in the last 4 partitions, ``sync`` the round's nodes, ``sharing`` none (as the real modes do).

Output: held-out accuracy (the mean of the nodes' weights, as the phase consolidation takes it;
test images shifted by up to one pixel) against samples processed and simulated time; a table of
accuracy at equal samples and samples and time to a target; a PNG with one panel per node count.

The simulation itself, its clock and nodes, is in ``_simulate_nodes.py``; each node's rows and minibatch in
``_simulate_shares.py``; the dealing of partitions in ``_simulate_queue.py``; the models in
``_simulate_workloads.py``; the tables and figure in ``_simulate_report.py``.

    .venv/bin/python scripts/bench_simulate.py                   # 8, 64, 256 nodes (a few minutes)
    .venv/bin/python scripts/bench_simulate.py --quick           # a smoke run
    .venv/bin/python scripts/bench_simulate.py --straggler 3 --png /tmp/simulate-straggler.png
    .venv/bin/python scripts/bench_simulate.py --nodes 8 64 --fanouts --modes async --seeds 5 --outer 1/0 0.7/0.8
    .venv/bin/python scripts/bench_simulate.py --model lenet-digits28 --fanouts --modes async --outer default --seeds 5
"""

from __future__ import annotations

if __name__ == "__main__":  # started as a program: where the project is not importable, inside its virtualenv
    import _venv

    _venv.ensure()


import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from actors import outer_settings_for_gain  # noqa: E402
from node import TrainingSettings  # noqa: E402
from node.modes import mode_named, outer_gain  # noqa: E402
import rbm  # noqa: E402

from _results import BenchRun, add_json_option  # noqa: E402
from _simulate_nodes import Clock, _as_indices, _mean, _sparse_sum, simulate  # noqa: E402
from _simulate_report import Curve, SimulationDiverged, report  # noqa: E402
from _simulate_shares import node_partitions, simulated_node_batch  # noqa: E402
from _simulate_workloads import WORKLOADS, load_data, measure_rate, pretrained_model  # noqa: E402

# What callers and tests/test_bench_simulate.py take from this script, the simulation's helpers among them.
__all__ = ["main", "simulate", "Clock", "Curve", "SimulationDiverged", "RULE_OUTER", "configurations", "rule_outer",
           "outer_settings", "outer_steps", "simulated_node_batch", "partitions_per_node", "node_partitions", "_mean",
           "_sparse_sum", "_as_indices"]

#: ``--outer default``: the step a fit takes when its settings name none (the rule's, :func:`rule_outer`).
RULE_OUTER = None


# ----------------------------------------------------------------------------- the runs
def configurations(nodes: int, fanouts: list[int]) -> list[tuple[str, int | None]]:
    """The modes run at ``nodes``: async per fan-out (those below ``nodes - 1``), async all-to-all, sync, sharing."""
    return [("async", f) for f in fanouts if f < nodes - 1] + [("async", None), ("sync", None), ("sharing", None)]


def partitions_per_node(option: str, nodes: int, rows: int, batch_size: int, mode: str, fanout: int | None) -> int:
    """``--partitions-per-node`` for ``nodes`` nodes: the number given, or what a fit in ``mode`` takes by
    default (:meth:`node.modes._base.TrainingMode.default_partitions`, scale rule auto)."""
    if option != "default":
        return int(option)
    settings = TrainingSettings(mode=mode, fanout=fanout, scale_rule="auto")
    return mode_named(mode).default_partitions(settings, nodes, rows, batch_size) // nodes


def rule_outer(base, nodes: int, rows: int, scale_rule: str) -> tuple[float, float]:
    """The step a fit of ``nodes`` takes in ``base``'s simulated phase when its settings name none, as the
    driver chooses it (:func:`node.modes.outer_gain`, :func:`actors.outer_settings_for_gain`)."""
    if not rbm.takes_outer_step(base, base.phases()[-1]):
        return 1.0, 0.0
    return outer_settings_for_gain(outer_gain(scale_rule, nodes, rows, base.batch_size))


def outer_steps(outers: list[tuple[float, float] | None], base, nodes: int, rows: int, mode: str,
                scale_rule: str) -> list[tuple[float, float]]:
    """The outer steps (eta, mu) run for ``mode`` at ``nodes``: ``outers`` for async and sync (:data:`RULE_OUTER`
    the rule's), plain merging for sharing and where the nodes' minibatch is split (they take no step there,
    as the executor: each step the same run again); each once (the rule's may be plain merging)."""
    if mode not in ("async", "sync") or simulated_node_batch(base, mode, nodes, rows, scale_rule) != base.batch_size:
        return [(1.0, 0.0)]
    steps = [rule_outer(base, nodes, rows, scale_rule) if outer is RULE_OUTER else outer for outer in outers]
    return list(dict.fromkeys(steps))


def run_seed(args: argparse.Namespace, base, data: tuple, seed: int, clock: Clock, *, sizes: list[int],
             epochs: int) -> list[tuple[tuple[int, str], Curve]]:
    """The runs of ``seed``: the one-node reference, then every node count, configuration and outer step
    the options ask for; each curve under its (nodes, label), in that order."""
    X, y, X_test, y_test = data
    one = partitions_per_node(args.partitions_per_node, 1, len(X), base.batch_size, "sync", None)
    reference, _ = simulate(base, X, y, X_test, y_test, nodes=1, mode="sync", fanout=None, epochs=epochs,
                            partitions_per_node=one, warmup_partitions=one, clock=clock, seed=seed)
    reference.label, reference.parts = "1 node", one
    curves = [((1, "1 node"), reference)]
    outers = args.outer or [(1.0, 0.0), RULE_OUTER]  # --outer's default: plain merging and the rule's step
    for n in sizes:
        for mode, fanout in configurations(n, args.fanouts):
            if mode not in args.modes:
                continue
            for outer in outer_steps(outers, base, n, len(X), mode, args.scale_rule):
                curve = run_nodes(args, base, data, seed, clock, nodes=n, mode=mode, fanout=fanout, epochs=epochs,
                                  outer=outer)
                curves.append(((n, curve.label), curve))
    return curves


def run_nodes(args: argparse.Namespace, base, data: tuple, seed: int, clock: Clock, *, nodes: int, mode: str,
              fanout: int | None, epochs: int, outer: tuple[float, float]) -> Curve:
    """One run of ``nodes`` in ``mode``, said on stderr: its curve, as far as it got where it diverged."""
    tick = time.perf_counter()
    X = data[0]
    parts = partitions_per_node(args.partitions_per_node, nodes, len(X), base.batch_size, mode, fanout)
    try:
        curve, _ = simulate(base, *data, nodes=nodes, mode=mode, fanout=fanout, epochs=epochs,
                            partitions_per_node=parts, warmup_partitions=parts, clock=clock, seed=seed,
                            scale_rule=args.scale_rule, outer_learning_rate=outer[0], outer_momentum=outer[1],
                            stealing=args.stealing, minibatch_merges=args.minibatch_merges)
    except SimulationDiverged as stopped:
        curve = stopped.curve
    curve.parts = parts
    outcome = f"diverged ({curve.diverged})" if curve.diverged else f"{curve.accuracy[-1]:.4f}"
    print(f"#   seed {seed}, {nodes} nodes, {curve.label}: {outcome} "
          f"({time.perf_counter() - tick:.1f} s)", file=sys.stderr, flush=True)
    return curve


# ----------------------------------------------------------------------------- the options
def outer_settings(text: str) -> tuple[float, float] | None:
    """``ETA/MU`` -> (eta, mu); ``default``: :data:`RULE_OUTER`, the fit's default (the rule's)."""
    if text == "default":
        return RULE_OUTER
    try:
        eta, mu = (float(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--outer takes ETA/MU (e.g. 0.7/0.9) or 'default', got {text!r}") from None
    return eta, mu


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="dbn-digits28", choices=tuple(WORKLOADS),
                        help="the model and data simulated (default: the DBN 784-64-10 on digits28)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 8 and 32 nodes, 2 epochs (digits28: 9x smaller data)")
    parser.add_argument("--nodes", type=int, nargs="+", default=None, help="default 8 64 256 (quick: 8 32)")
    parser.add_argument("--fanouts", type=int, nargs="*", default=[2, 4, 8])
    parser.add_argument("--modes", nargs="+", default=["async", "sync", "sharing"], choices=("async", "sync", "sharing"))
    parser.add_argument("--outer", type=outer_settings, nargs="+", default=None, metavar="ETA/MU",
                        help="the outer step(s) run for async and sync: ETA/MU, or 'default' (the fit's: the rule's "
                             "for the nodes); 1/0 is plain merging (default: 1/0 and default)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="seeds 0 .. N-1 (each its own pretraining, shards and node speeds): the table of accuracy "
                             "at equal epochs is their mean; the figure and the per-run table show --seed")
    parser.add_argument("--epochs", type=int, default=None,
                        help="epochs of the simulated phase (default: the model's, 6 / 10 / 2; quick 2)")
    parser.add_argument("--partitions-per-node", default="default",
                        help="per epoch, or 'default': what a fit takes for these rows and nodes "
                             "(node.modes._scaling.default_partitions: 2, or 8 where the nodes take few steps)")
    parser.add_argument("--scale-rule", default="auto", choices=("auto", "linear", "sqrt", "none"))
    parser.add_argument("--hidden", type=int, default=64, help="the DBN on digits28's hidden units")
    parser.add_argument("--target", type=float, default=0.90)
    parser.add_argument("--straggler", type=float, default=1.0, help="node 0 this many times slower")
    parser.add_argument("--no-stealing", dest="stealing", action="store_false",
                        help="each node trains its own shard only, never waiting (the simulation before it "
                             "modelled work stealing)")
    parser.add_argument("--no-minibatch-merges", dest="minibatch_merges", action="store_false",
                        help="async nodes merge before each partition only, not also between its minibatches")
    parser.add_argument("--cores", type=int, default=None,
                        help="the nodes share this many cores (async, sharing), as local[n] on a smaller machine "
                             "(default: a core each)")
    parser.add_argument("--delay-s", type=float, default=Clock.delay_s)
    parser.add_argument("--read-s", type=float, default=Clock.read_s)
    parser.add_argument("--write-s", type=float, default=Clock.write_s)
    parser.add_argument("--rate", default=None,
                        help="samples/s of a node's training, or 'measured' (the model itself, one core); default: "
                             f"{Clock.rate:.0f} for the DBN on digits28 (the 784-500-500 DBN's), else measured")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--png", default=None,
                        help="the figure (default: beside the --json file, else scripts/figures/simulate.png, "
                             "which git ignores)")
    add_json_option(parser)
    return parser.parse_args(argv)


def clock_for(args: argparse.Namespace, base, X, y) -> Clock:
    """The clock the options ask for; ``--rate measured`` (or the workload's default): ``base``'s own speed."""
    rate_option = args.rate or WORKLOADS[args.model].rate
    rate = measure_rate(base, X, y) if rate_option == "measured" else float(rate_option)
    return Clock(rate=rate, write_s=args.write_s, read_s=args.read_s, delay_s=args.delay_s, straggler=args.straggler,
                 cores=args.cores)


def print_settings(args: argparse.Namespace, title: str, data: tuple, epochs: int, seeds: list[int],
                   clock: Clock) -> None:
    """The run's settings, printed once before its first simulation."""
    X, _, X_test, _ = data
    print(f"# {title}: {len(X)} training rows, {len(X_test)} "
          f"test rows; {epochs} epochs; partitions per node and epoch: {args.partitions_per_node} (column "
          f"'parts'), a warm-up of a node's first epoch; scale rule {args.scale_rule}; seeds {seeds}")
    print(f"# clock: {clock.rate:.0f} samples/s per node, snapshot write / read {clock.write_s * 1e3:.1f} / "
          f"{clock.read_s * 1e3:.1f} ms, update write / read {clock.update_write_s * 1e3:.1f} / "
          f"{clock.update_read_s * 1e3:.1f} ms, announcement delay {clock.delay_s * 1e3:.1f} ms, "
          f"speeds lognormal sigma {clock.speed_sigma}, jitter {clock.jitter_sigma}, "
          f"straggler x{clock.straggler:g}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = BenchRun(__file__, args).start()
    if args.png is None:
        args.png = (os.path.splitext(run.path)[0] + ".png" if run.path else
                    os.path.join(os.path.dirname(os.path.abspath(__file__)), "figures", "simulate.png"))
    from threadpoolctl import threadpool_limits

    sizes = args.nodes or ([8, 32] if args.quick else [8, 64, 256])
    workload = WORKLOADS[args.model]
    title = workload.title.format(hidden=args.hidden)
    epochs = args.epochs or (2 if args.quick else workload.epochs)
    seeds = [args.seed] + [seed for seed in range(args.seeds) if seed != args.seed]
    started = time.perf_counter()
    results: dict[tuple[int, str], list[Curve]] = {}
    with threadpool_limits(limits=1):
        data = load_data(args.quick, args.model)
        clock = None
        for seed in seeds:
            base = pretrained_model(data[0], data[1], args.hidden, seed, args.model)
            if clock is None:  # the first seed's model measures the rate, where it is measured
                clock = clock_for(args, base, data[0], data[1])
                print_settings(args, title, data, epochs, seeds, clock)
            for key, curve in run_seed(args, base, data, seed, clock, sizes=sizes, epochs=epochs):
                results.setdefault(key, []).append(curve)
    report(run, results, sizes=sizes, training_rows=len(data[0]), epochs=epochs, seeds=len(seeds), title=title,
           clock=clock, seed=args.seed, target=args.target, png=args.png)
    print(f"\nfigure: {args.png}; runtime {time.perf_counter() - started:.0f} s")
    run.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
