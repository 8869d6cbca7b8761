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
import copy
import functools
import heapq
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from actors import (OuterState, check_snapshot, merge_snapshots, outer_settings_for_gain, outer_step,  # noqa: E402
                    outer_step_enabled)
from node import TrainingSettings  # noqa: E402
from node.modes import (NodeScaling, max_learning_rate_factor, mode_named, outer_gain, rates_cap,  # noqa: E402
                        schedule_epoch)
from node.modes._sharing import SparseUpdate, ThresholdAccumulator  # noqa: E402
import rbm  # noqa: E402

from _results import BenchRun, add_json_option  # noqa: E402
from _simulate_queue import PartitionQueue  # noqa: E402
from _simulate_workloads import (STAND_IN_RATE, WORKLOADS, load_data, measure_rate,  # noqa: E402
                                 pretrained_model)
from _simulate_report import Curve, SimulationDiverged, report  # noqa: E402

#: ``--outer default``: the step a fit takes when its settings name none (the rule's, :func:`rule_outer`).
RULE_OUTER = None


@dataclass(frozen=True)
class Clock:
    """The time model (seconds): see the module docstring.  Defaults: figures measured on the quiet
    build machine for the 784-500-500 DBN (a 2.6 MB snapshot) on the local store, the model the small
    one stands in for."""

    rate: float = STAND_IN_RATE  # samples/s of one node's fine-tuning (bench_spark.py: 1 node, 10.1k)
    write_s: float = 0.008  # a snapshot written (bench_storage.py: put 4.8 ms for 1.6 MB)
    read_s: float = 0.003  # a snapshot read (bench_storage.py: get 1.8 ms for 1.6 MB)
    update_write_s: float = 0.002  # a sparse update (about 1% of the entries) written ...
    update_read_s: float = 0.001  # ... and read: small files, the per-file cost dominates
    delay_s: float = 0.012  # publish -> visible to peers (bench_actors.py: announcement latency 12 ms)
    speed_sigma: float = 0.2  # node speeds: lognormal, fixed per node
    jitter_sigma: float = 0.1  # per-partition jitter: lognormal
    straggler: float = 1.0  # node 0 is this many times slower
    cores: int | None = None  # the nodes share this many cores, a partition holding one all along (None: one each)


# ----------------------------------------------------------------------------- the simulation
def _mean(params_list: list[dict]) -> dict:
    return {name: np.mean([p[name] for p in params_list], axis=0, dtype=np.float64).astype(params_list[0][name].dtype)
            for name in params_list[0]}


def _sparse_sum(updates: list[dict], params: dict) -> None:
    """Add the updates (per parameter: flat indices and values) to ``params`` in place."""
    for name, value in params.items():
        parts = [update[name] for update in updates if update[name][0].size]
        if parts:
            flat = value.reshape(-1)
            flat += np.bincount(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                                minlength=flat.size).astype(flat.dtype)


def _as_indices(update: SparseUpdate) -> dict:
    """A :class:`SparseUpdate` as (flat indices, values) per parameter: what ``apply_to`` adds."""
    return {name: (np.abs(codes).astype(np.int64) - 1, np.sign(codes) * np.float64(np.float32(update.threshold)))
            for name, codes in update.codes.items()}


def node_partitions(rows: int, nodes: int, partitions_per_node: int,
                    rng: np.random.Generator) -> list[list[np.ndarray]]:
    """Disjoint shards of the rows, one per node, each cut into the node's partitions (row indices)."""
    return [np.array_split(shard, partitions_per_node) for shard in np.array_split(rng.permutation(rows), nodes)]


def partitions_per_node(option: str, nodes: int, rows: int, batch_size: int, mode: str, fanout: int | None) -> int:
    """``--partitions-per-node`` for ``nodes`` nodes: the number given, or what a fit in ``mode`` takes by
    default (:meth:`node.modes._base.TrainingMode.default_partitions`, scale rule auto)."""
    if option != "default":
        return int(option)
    settings = TrainingSettings(mode=mode, fanout=fanout, scale_rule="auto")
    return mode_named(mode).default_partitions(settings, nodes, rows, batch_size) // nodes


def simulate(base, X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, *, nodes: int, mode: str,
             fanout: int | None, epochs: int, partitions_per_node: int, clock: Clock, seed: int,
             evaluations_per_epoch: int = 4, scale_rule: str = "auto", warmup_partitions: int = 2,
             sharing_threshold: float = 1e-3, sharing_sparsity: float = 0.01, evaluate: bool = True,
             outer_learning_rate: float = 1.0, outer_momentum: float = 0.0, stealing: bool = True,
             minibatch_merges: bool = True):
    """Simulate ``nodes`` nodes training ``base``'s last phase in ``mode`` ("async", "sync", "sharing").

    ``outer_learning_rate`` and ``outer_momentum``: the outer step of ``async`` and ``sync``
    (:func:`actors.outer_step`), applied after each partition (``async``) or round's average (``sync``)
    where more than one node trains, as the executor does; ``1.0, 0.0``: plain merging.

    ``stealing``: the partitions dealt as the real nodes deal them (:mod:`_simulate_queue`); False: each
    node trains its own shard only, never waiting for the others.  ``minibatch_merges`` (``async``): a node also
    merges between minibatches what its actor fetched while it trains, as the real nodes do; False: before
    each partition only.

    Returns the :class:`Curve` and the nodes' final parameters (list of dicts); raises
    :class:`SimulationDiverged`, with the curve so far, where a node's training diverges.
    """
    phase = base.phases()[-1]  # the simulated phase: a DBN's fine-tuning, LeNet's training
    rng = np.random.default_rng([seed, nodes])
    parts = node_partitions(len(X), nodes, partitions_per_node, rng)
    speeds = np.ones(nodes)  # one node alone: the reference, at the measured speed
    if nodes > 1:
        speeds = rng.lognormal(0.0, clock.speed_sigma, size=nodes) if clock.speed_sigma else speeds
        speeds[0] *= clock.straggler
    settings = TrainingSettings(mode=mode, fanout=fanout, scale_rule=scale_rule)
    node_batch = mode_named(mode).node_batch_size(settings, nodes, len(X), base.batch_size,  # as a fit's nodes
                                                  max_learning_rate_factor(base))
    # Copies of the initialized base: an RBM's persistent chains keep the base's count, as a fit's
    # nodes keep theirs (rbm.spec_for_batch_size).
    replicas = [copy.deepcopy(base).set_params(batch_size=node_batch) for _ in range(nodes)]
    spec = {"batch_size": base.batch_size}
    scalings = [NodeScaling(scale_rule, spec, warmup_partitions, fanout if mode == "async" else None, n_samples=len(X),
                            node_batch=node_batch, rates_cap=rates_cap(max_learning_rate_factor(base)))
                for _ in range(nodes)]
    for scaling in scalings:
        scaling.enter_phase(phase)
    probe = copy.deepcopy(base)
    outer = (nodes > 1 and mode in ("async", "sync") and node_batch == base.batch_size  # as the executor decides
             and outer_step_enabled(outer_learning_rate, outer_momentum))
    outer_states = [OuterState.start(r.parameters(phase)) for r in replicas] if outer else []

    def step_outer(i: int) -> None:  # node i's outer step on what training changed since its anchor
        params, outer_states[i] = outer_step(outer_states[i], replicas[i].parameters(phase), outer_learning_rate,
                                             outer_momentum)
        replicas[i].set_parameters(params)

    label = {"async": f"async f={fanout or 'all'}"}.get(mode, mode)
    if outer:
        label += f" outer {outer_learning_rate:g}/{outer_momentum:g}"
    curve = Curve(label, nodes)
    total_partitions = epochs * partitions_per_node
    done = np.zeros(nodes, dtype=int)
    samples = 0
    next_eval = [len(X) * (k + 1) // evaluations_per_epoch for k in range(epochs * evaluations_per_epoch)]

    def check(now: float) -> None:
        while next_eval and samples >= next_eval[0]:
            next_eval.pop(0)
            if evaluate:
                probe.set_parameters(_mean([r.parameters(phase) for r in replicas]))
                curve.samples.append(samples)
                curve.time_s.append(now)
                curve.accuracy.append(float(probe.score(X_test, y_test)))

    def train(i: int, merged_from: list[str], epoch: int, owner: int, index: int, between=None) -> float:
        """Node ``i`` trains partition ``index`` of node ``owner``'s list in ``epoch``; returns its compute
        time (simulated).  ``between(elapsed_s, merged)``: called after each minibatch with the partition's
        compute time gone (simulated) and the peers merged during it so far; returns those it merged (for
        the rates they count as merged before the partition)."""
        nonlocal samples
        rows = parts[owner][index]
        jitter = rng.lognormal(0.0, clock.jitter_sigma) if clock.jitter_sigma else 1.0
        compute_s = len(rows) / clock.rate * speeds[i] * jitter
        scalings[i].merged(merged_from)
        scale = scalings[i].scale()
        replicas[i].set_learning_rate_scale(scale)
        replicas[i].set_schedule_epoch(schedule_epoch(epoch, scale))  # as the trainer
        # The partition's place in the phase's plan, as the trainer gives it (the fine-tuning's anneal and
        # dropout ramp): position ``index`` of its owner's ``partitions_per_node`` in epoch ``epoch``.
        replicas[i].set_schedule_plan(epochs, epoch + index / partitions_per_node, 1.0 / partitions_per_node)
        during: list[str] = []
        if between is not None:
            steps, step = -(-len(rows) // node_batch), 0

            def hook() -> None:
                nonlocal step
                step += 1
                during.extend(between(compute_s * step / steps, len(during)))

            replicas[i].set_minibatch_hook(hook)
        try:
            replicas[i].train_partition(X[rows], y[rows], phase, np.random.default_rng([seed, i, int(done[i])]))
        except rbm.DivergenceError as error:  # a fit's task would fail here: so does the run, saying where
            curve.diverged = f"node {i}, epoch {epoch}: {error}"
            raise SimulationDiverged(curve) from error
        finally:
            replicas[i].set_minibatch_hook(None)
        scalings[i].also_merged(during)
        scalings[i].trained()
        done[i] += 1
        samples += len(rows)
        return compute_s

    if mode == "sync":
        now = 0.0
        names = [f"node-{j}" for j in range(nodes)]
        for round_ in range(total_partitions):
            epoch, index = divmod(round_, partitions_per_node)
            ends = [train(i, names[:i] + names[i + 1:], epoch, i, index) + clock.write_s for i in range(nodes)]
            now += max(ends) + (nodes - 1) * clock.read_s if nodes > 1 else ends[0]  # barrier, peers' snapshots
            curve.reads += nodes * (nodes - 1)
            if nodes > 1:
                average = _mean([r.parameters(phase) for r in replicas])
                for i, replica in enumerate(replicas):
                    replica.set_parameters(average)
                    if outer:
                        step_outer(i)
            check(now)
        curve.rows_trained, curve.partitions_by_node, curve.end_s = samples, done.tolist(), now
        return curve, [r.parameters(phase) for r in replicas]

    # async and sharing: every node on its own, ordered by a heap of (start time, node)
    published: list[list[tuple[float, int, object]]] = [[] for _ in range(nodes)]  # (visible at, version, payload)
    merged_version = np.full((nodes, nodes), -1)
    accumulators = [ThresholdAccumulator(sharing_threshold, sharing_sparsity) for _ in range(nodes)]

    def merge_fresh(i: int, at: float, now: float, limit: int | None, fetched_s: float = 0.0) -> list[str]:
        """Node ``i`` merges, at simulated time ``at`` (its event's time ``now`` or later), the newest version of
        each peer that is visible ``fetched_s`` before and that it has not merged yet -- at most ``limit`` of
        them (a random subset, as the node's actor picks them).  Returns the peers merged."""
        fresh = []
        for j in range(nodes):
            # Older versions than the newest visible ``now`` are never merged again: drop them (time only moves on).
            while len(published[j]) > 1 and published[j][1][0] <= now:
                published[j].pop(0)
            newest = None
            for entry in published[j]:
                if entry[0] + fetched_s > at:
                    break
                newest = entry
            if j != i and newest is not None and newest[1] > merged_version[i, j]:
                fresh.append((j, newest))
        if limit is not None and len(fresh) > limit:
            fresh = [fresh[k] for k in sorted(rng.choice(len(fresh), size=limit, replace=False))]
        if fresh:
            own = replicas[i].parameters(phase)
            # Each snapshot was checked once, when its author published it (as each reader's actor checks it).
            merged = merge_snapshots(own, [entry[2] for _, entry in fresh], checked=True)
            replicas[i].set_parameters(merged)
            if outer:  # the anchor moves with the merge, as the executor's (node.adopt_merge)
                outer_states[i] = outer_states[i].moved(own, merged)
            for j, entry in fresh:
                merged_version[i, j] = entry[1]
                curve.age_s += at - (entry[0] - clock.delay_s)
        return [f"node-{j}" for j, _ in fresh]

    def merge_during(i: int, now: float, computing_from: float, merged_before: int, elapsed_s: float,
                     merged: int) -> list[str]:
        """Between two minibatches of node ``i``'s partition (started ``now``, computing from ``computing_from``,
        ``elapsed_s`` into it, ``merged`` peers merged during it so far): what its actor fetched meanwhile, up
        to the fan-out (:mod:`node.modes._async`)."""
        left = None if fanout is None else fanout - merged_before - merged
        if left is not None and left <= 0:
            return []
        names = merge_fresh(i, computing_from + elapsed_s, now, left, fetched_s=clock.read_s)
        curve.reads += len(names)
        return names

    queue = PartitionQueue(nodes, partitions_per_node, epochs, stealing=stealing, ahead=1 if mode == "async" else None)
    training: list[int | None] = [None] * nodes  # the epoch of the partition each node is training
    waiting: list[int] = []  # nodes that wait for an epoch to finish (async's next job)
    cores = [0.0] * clock.cores if clock.cores else []  # when each core is free (a heap)
    events = [(0.0, i) for i in range(nodes)]  # (time node i is free, i)
    heapq.heapify(events)
    while events:
        now, i = heapq.heappop(events)
        if training[i] is not None:  # its partition ends now: an epoch may have finished, the waiting try again
            queue.finished(training[i])
            training[i] = None
            for j in waiting:
                heapq.heappush(events, (now, j))
            waiting.clear()
        if cores and cores[0] > now:  # every core busy: try again when one is free
            heapq.heappush(events, (cores[0], i))
            continue
        taken = queue.take(i)
        if taken is None:
            if queue.epoch[i] < epochs:
                waiting.append(i)
            continue
        training[i] = taken[0]
        between = None
        if mode == "async":
            merged_from = merge_fresh(i, now, now, fanout)
            reads = len(merged_from)
            if minibatch_merges and not outer:  # as node.modes._async.merges_between_minibatches
                between = functools.partial(merge_during, i, now, now + reads * clock.read_s, reads)
        else:  # sharing: every visible peer update not applied yet, each once
            own = replicas[i].parameters(phase)
            pending = []
            for j in range(nodes):
                applied = merged_version[i, j] + 1  # updates are numbered from 0 and become visible in order
                while j != i and applied < len(published[j]) and published[j][applied][0] <= now:
                    pending.append(published[j][applied][2])
                    curve.age_s += now - (published[j][applied][0] - clock.delay_s)
                    applied += 1
                merged_version[i, j] = applied - 1
            if pending:
                _sparse_sum(pending, own)
                replicas[i].set_parameters(own)
            merged_from = []  # peers' updates are added, not averaged: learning rates stay as given
            reads = len(pending)
        curve.reads += reads
        before = replicas[i].parameters(phase)
        compute_s = train(i, merged_from, *taken, between=between)
        if mode == "async":
            if outer:
                step_outer(i)
            end = now + reads * clock.read_s + compute_s + clock.write_s
            snapshot = replicas[i].parameters(phase)
            check_snapshot(snapshot, None, source=f"node-{i} version {int(done[i])}")  # once, not by every reader
            published[i].append((end + clock.delay_s, int(done[i]), snapshot))
        else:
            end = now + reads * clock.update_read_s + compute_s + clock.update_write_s
            after = replicas[i].parameters(phase)
            update = accumulators[i].add({name: after[name] - before[name] for name in after})
            published[i].append((end + clock.delay_s, len(published[i]), _as_indices(update)))
        check(end)
        curve.end_s = max(curve.end_s, end)
        if cores:
            heapq.heapreplace(cores, end)
        heapq.heappush(events, (end, i))
    curve.rows_trained, curve.partitions_by_node = samples, done.tolist()
    return curve, [r.parameters(phase) for r in replicas]


# ----------------------------------------------------------------------------- the runs and options
def configurations(nodes: int, fanouts: list[int]) -> list[tuple[str, int | None]]:
    """The modes run at ``nodes``: async per fan-out (those below ``nodes - 1``), async all-to-all, sync, sharing."""
    return [("async", f) for f in fanouts if f < nodes - 1] + [("async", None), ("sync", None), ("sharing", None)]


def rule_outer(base, nodes: int, rows: int, scale_rule: str) -> tuple[float, float]:
    """The step a fit of ``nodes`` takes in ``base``'s simulated phase when its settings name none, as the
    driver chooses it (:func:`node.modes.outer_gain`, :func:`actors.outer_settings_for_gain`)."""
    if not rbm.takes_outer_step(base, base.phases()[-1]):
        return 1.0, 0.0
    return outer_settings_for_gain(outer_gain(scale_rule, nodes, rows, base.batch_size))


def outer_settings(text: str) -> tuple[float, float] | None:
    """``ETA/MU`` -> (eta, mu); ``default``: :data:`RULE_OUTER`, the fit's default (the rule's)."""
    if text == "default":
        return RULE_OUTER
    try:
        eta, mu = (float(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--outer takes ETA/MU (e.g. 0.7/0.9) or 'default', got {text!r}") from None
    return eta, mu


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)
    run = BenchRun(__file__, args).start()
    if args.png is None:
        args.png = (os.path.splitext(run.path)[0] + ".png" if run.path else
                    os.path.join(os.path.dirname(os.path.abspath(__file__)), "figures", "simulate.png"))
    from threadpoolctl import threadpool_limits

    sizes = args.nodes or ([8, 32] if args.quick else [8, 64, 256])
    workload = WORKLOADS[args.model]
    title = workload.title.format(hidden=args.hidden)
    epochs = args.epochs or (2 if args.quick else workload.epochs)
    rate_option = args.rate or workload.rate
    outers = args.outer or [(1.0, 0.0), RULE_OUTER]
    seeds = [args.seed] + [seed for seed in range(args.seeds) if seed != args.seed]
    started = time.perf_counter()
    results: dict[tuple[int, str], list[Curve]] = {}
    with threadpool_limits(limits=1):
        X, y, X_test, y_test = load_data(args.quick, args.model)
        rate = None
        for seed in seeds:
            base = pretrained_model(X, y, args.hidden, seed, args.model)
            if rate is None:
                rate = measure_rate(base, X, y) if rate_option == "measured" else float(rate_option)
                clock = Clock(rate=rate, write_s=args.write_s, read_s=args.read_s, delay_s=args.delay_s,
                              straggler=args.straggler, cores=args.cores)
                print(f"# {title}: {len(X)} training rows, {len(X_test)} "
                      f"test rows; {epochs} epochs; partitions per node and epoch: {args.partitions_per_node} (column "
                      f"'parts'), a warm-up of a node's first epoch; scale rule {args.scale_rule}; seeds {seeds}")
                print(f"# clock: {rate:.0f} samples/s per node, snapshot write / read {clock.write_s * 1e3:.1f} / "
                      f"{clock.read_s * 1e3:.1f} ms, update write / read {clock.update_write_s * 1e3:.1f} / "
                      f"{clock.update_read_s * 1e3:.1f} ms, announcement delay {clock.delay_s * 1e3:.1f} ms, "
                      f"speeds lognormal sigma {clock.speed_sigma}, jitter {clock.jitter_sigma}, "
                      f"straggler x{clock.straggler:g}")
            one = partitions_per_node(args.partitions_per_node, 1, len(X), base.batch_size, "sync", None)
            reference, _ = simulate(base, X, y, X_test, y_test, nodes=1, mode="sync", fanout=None, epochs=epochs,
                                    partitions_per_node=one, warmup_partitions=one, clock=clock, seed=seed)
            reference.label, reference.parts = "1 node", one
            results.setdefault((1, "1 node"), []).append(reference)
            for n in sizes:
                for mode, fanout in configurations(n, args.fanouts):
                    if mode not in args.modes:
                        continue
                    steps = [rule_outer(base, n, len(X), args.scale_rule) if outer is RULE_OUTER else outer
                             for outer in (outers if mode in ("async", "sync") else [(1.0, 0.0)])]
                    for eta, mu in dict.fromkeys(steps):  # each step once (the rule's may be plain merging)
                        tick = time.perf_counter()
                        parts = partitions_per_node(args.partitions_per_node, n, len(X), base.batch_size, mode, fanout)
                        try:
                            curve, _ = simulate(base, X, y, X_test, y_test, nodes=n, mode=mode, fanout=fanout,
                                                epochs=epochs, partitions_per_node=parts, warmup_partitions=parts,
                                                clock=clock, seed=seed, scale_rule=args.scale_rule,
                                                outer_learning_rate=eta, outer_momentum=mu, stealing=args.stealing,
                                                minibatch_merges=args.minibatch_merges)
                        except SimulationDiverged as stopped:
                            curve = stopped.curve
                        curve.parts = parts
                        results.setdefault((n, curve.label), []).append(curve)
                        outcome = f"diverged ({curve.diverged})" if curve.diverged else f"{curve.accuracy[-1]:.4f}"
                        print(f"#   seed {seed}, {n} nodes, {curve.label}: {outcome} "
                              f"({time.perf_counter() - tick:.1f} s)", file=sys.stderr, flush=True)
    report(run, results, sizes=sizes, training_rows=len(X), epochs=epochs, seeds=len(seeds), title=title, clock=clock,
           seed=args.seed, target=args.target, png=args.png)
    print(f"\nfigure: {args.png}; runtime {time.perf_counter() - started:.0f} s")
    run.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
