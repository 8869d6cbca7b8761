"""The simulated nodes of ``bench_simulate.py``: ``n`` replicas training a model's last phase on one clock.

:func:`simulate` runs one configuration.  A :class:`Simulation` holds its state (the nodes' replicas,
learning-rate scalings, outer-step anchors, what each has published and merged) and advances it:
``sync`` in rounds behind a barrier (:meth:`Simulation.run_rounds`), ``async`` and ``sharing`` one
partition at a time, in the order of the nodes' free times (:meth:`Simulation.run_events`).
:class:`Clock` is the time model; ``bench_simulate.py``'s docstring says what each mode does and why.
"""

from __future__ import annotations

import copy
import functools
import heapq
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np

from actors import OuterState, check_snapshot, merge_snapshots, outer_step, outer_step_enabled
from node.modes import NodeScaling, max_learning_rate_factor, rates_cap, schedule_epoch
from node.modes._sharing import SparseUpdate, ThresholdAccumulator
import rbm

from _simulate_queue import PartitionQueue
from _simulate_report import Curve, SimulationDiverged
from _simulate_shares import node_partitions, simulated_node_batch
from _simulate_workloads import STAND_IN_RATE


@dataclass(frozen=True)
class Clock:
    """The time model (seconds): see ``bench_simulate.py``'s docstring.  Defaults: figures measured on the
    quiet build machine for the 784-500-500 DBN (a 2.6 MB snapshot) on the local store, the model the small
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


class Publication(NamedTuple):
    """What a node published after a partition: ``async`` a snapshot, ``sharing`` a sparse update."""

    visible_s: float  # when the peers can see it: the partition's end plus the announcement delay
    version: int  # async: the author's partitions trained before it; sharing: the update's number, from 0
    payload: Any  # the snapshot (name -> array), or the update as :func:`_as_indices` gives it


# ----------------------------------------------------------------------------- parameters as dicts of arrays
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


# ----------------------------------------------------------------------------- the simulation
def simulate(base, X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, *, nodes: int, mode: str,
             fanout: int | None, epochs: int, partitions_per_node: int, clock: Clock, seed: int,
             evaluations_per_epoch: int = 4, scale_rule: str = "auto", warmup_partitions: int = 2,
             sharing_threshold: float = 1e-3, sharing_sparsity: float = 0.01, evaluate: bool = True,
             outer_learning_rate: float = 1.0, outer_momentum: float = 0.0, stealing: bool = True,
             minibatch_merges: bool = True) -> tuple[Curve, list[dict]]:
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
    simulation = Simulation(base, X, y, X_test, y_test, nodes=nodes, mode=mode, fanout=fanout, epochs=epochs,
                            partitions_per_node=partitions_per_node, clock=clock, seed=seed,
                            evaluations_per_epoch=evaluations_per_epoch, scale_rule=scale_rule,
                            warmup_partitions=warmup_partitions, sharing_threshold=sharing_threshold,
                            sharing_sparsity=sharing_sparsity, evaluate=evaluate,
                            outer_learning_rate=outer_learning_rate, outer_momentum=outer_momentum,
                            stealing=stealing, minibatch_merges=minibatch_merges)
    return simulation.run()


class Simulation:
    """One run of :func:`simulate`, built from the same arguments: node ``i``'s state is item ``i`` of each list.

    Every random draw comes from one generator, ``rng``, in the order the run makes them: the shards, the
    node speeds, then per partition its jitter and (``async`` with a fan-out) the peers it merges.
    """

    def __init__(self, base, X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, *, nodes: int,
                 mode: str, fanout: int | None, epochs: int, partitions_per_node: int, clock: Clock, seed: int,
                 evaluations_per_epoch: int, scale_rule: str, warmup_partitions: int, sharing_threshold: float,
                 sharing_sparsity: float, evaluate: bool, outer_learning_rate: float, outer_momentum: float,
                 stealing: bool, minibatch_merges: bool) -> None:
        self.X, self.y, self.X_test, self.y_test = X, y, X_test, y_test
        self.nodes, self.mode, self.fanout, self.clock, self.seed = nodes, mode, fanout, clock, seed
        self.epochs, self.partitions_per_node, self.evaluate = epochs, partitions_per_node, evaluate
        self.outer_learning_rate, self.outer_momentum = outer_learning_rate, outer_momentum
        self.stealing, self.minibatch_merges = stealing, minibatch_merges
        self.phase = base.phases()[-1]  # the simulated phase: a DBN's fine-tuning, LeNet's training
        self.rng = np.random.default_rng([seed, nodes])
        self.parts = node_partitions(len(X), nodes, partitions_per_node, self.rng)
        self.speeds = np.ones(nodes)  # one node alone: the reference, at the measured speed
        if nodes > 1:
            self.speeds = self.rng.lognormal(0.0, clock.speed_sigma, size=nodes) if clock.speed_sigma else self.speeds
            self.speeds[0] *= clock.straggler
        self.node_batch = simulated_node_batch(base, mode, nodes, len(X), scale_rule)
        # Copies of the initialized base: an RBM's persistent chains keep the base's count, as a fit's
        # nodes keep theirs (rbm.spec_for_batch_size).
        self.replicas = [copy.deepcopy(base).set_params(batch_size=self.node_batch) for _ in range(nodes)]
        spec = {"batch_size": base.batch_size}
        self.scalings = [NodeScaling(scale_rule, spec, warmup_partitions, fanout if mode == "async" else None,
                                     n_samples=len(X), node_batch=self.node_batch,
                                     rates_cap=rates_cap(max_learning_rate_factor(base)))
                         for _ in range(nodes)]
        for scaling in self.scalings:
            scaling.enter_phase(self.phase)
        self.probe = copy.deepcopy(base)  # scores the mean of the nodes' weights
        self.outer = (nodes > 1 and mode in ("async", "sync") and self.node_batch == base.batch_size  # as the executor
                      and outer_step_enabled(outer_learning_rate, outer_momentum))
        self.outer_states = [OuterState.start(r.parameters(self.phase)) for r in self.replicas] if self.outer else []
        label = {"async": f"async f={fanout or 'all'}"}.get(mode, mode)
        if self.outer:
            label += f" outer {outer_learning_rate:g}/{outer_momentum:g}"
        self.curve = Curve(label, nodes)
        self.done = np.zeros(nodes, dtype=int)  # partitions each node has trained
        self.samples = 0  # rows trained by all nodes
        self.next_eval = [len(X) * (k + 1) // evaluations_per_epoch for k in range(epochs * evaluations_per_epoch)]
        # async and sharing: what each node published, and what each has merged (async) or applied (sharing)
        # of each peer's: ``merged_version[i, j]``, node j's newest version node i has taken, -1 for none.
        self.published: list[list[Publication]] = [[] for _ in range(nodes)]
        self.merged_version = np.full((nodes, nodes), -1)
        self.accumulators = [ThresholdAccumulator(sharing_threshold, sharing_sparsity) for _ in range(nodes)]

    def run(self) -> tuple[Curve, list[dict]]:
        """Train every node's partitions of every epoch: the :class:`Curve` and the nodes' final parameters."""
        if self.mode == "sync":
            self.run_rounds()
        else:
            self.run_events()
        self.curve.rows_trained, self.curve.partitions_by_node = self.samples, self.done.tolist()
        return self.curve, [r.parameters(self.phase) for r in self.replicas]

    # ------------------------------------------------------------------------- what every mode does
    def train(self, i: int, merged_from: list[str], epoch: int, owner: int, index: int,
              between: Callable[[float, int], list[str]] | None = None) -> float:
        """Node ``i`` trains partition ``index`` of node ``owner``'s list in ``epoch``; returns its compute
        time (simulated).  ``between(elapsed_s, merged)``: called after each minibatch with the partition's
        compute time gone (simulated) and the peers merged during it so far; returns those it merged (for
        the rates they count as merged before the partition)."""
        rows = self.parts[owner][index]
        jitter = self.rng.lognormal(0.0, self.clock.jitter_sigma) if self.clock.jitter_sigma else 1.0
        compute_s = len(rows) / self.clock.rate * self.speeds[i] * jitter
        replica, scaling = self.replicas[i], self.scalings[i]
        scaling.merged(merged_from)
        scale = scaling.scale()
        replica.set_learning_rate_scale(scale)
        replica.set_schedule_epoch(schedule_epoch(epoch, scale))  # as the trainer
        # The partition's place in the phase's plan, as the trainer gives it (the fine-tuning's anneal and
        # dropout ramp): position ``index`` of its owner's ``partitions_per_node`` in epoch ``epoch``.
        replica.set_schedule_plan(self.epochs, epoch + index / self.partitions_per_node, 1.0 / self.partitions_per_node)
        during: list[str] = []
        if between is not None:
            replica.set_minibatch_hook(self._minibatch_hook(between, compute_s, len(rows), during))
        try:
            replica.train_partition(self.X[rows], self.y[rows], self.phase,
                                    np.random.default_rng([self.seed, i, int(self.done[i])]))
        except rbm.DivergenceError as error:  # a fit's task would fail here: so does the run, saying where
            self.curve.diverged = f"node {i}, epoch {epoch}: {error}"
            raise SimulationDiverged(self.curve) from error
        finally:
            replica.set_minibatch_hook(None)
        scaling.also_merged(during)
        scaling.trained()
        self.done[i] += 1
        self.samples += len(rows)
        return compute_s

    def _minibatch_hook(self, between: Callable[[float, int], list[str]], compute_s: float, rows: int,
                        during: list[str]) -> Callable[[], None]:
        """What a replica calls after each of its minibatches (of ``rows`` in all): ``between``, with the compute
        time gone; the peers it merged are added to ``during``."""
        steps, step = -(-rows // self.node_batch), 0

        def hook() -> None:
            nonlocal step
            step += 1
            during.extend(between(compute_s * step / steps, len(during)))

        return hook

    def step_outer(self, i: int) -> None:
        """Node ``i``'s outer step on what training changed since its anchor."""
        params, self.outer_states[i] = outer_step(self.outer_states[i], self.replicas[i].parameters(self.phase),
                                                  self.outer_learning_rate, self.outer_momentum)
        self.replicas[i].set_parameters(params)

    def record_accuracy(self, now: float) -> None:
        """At each evaluation point the samples have passed: the accuracy of the nodes' mean, at ``now``."""
        while self.next_eval and self.samples >= self.next_eval[0]:
            self.next_eval.pop(0)
            if self.evaluate:
                self.probe.set_parameters(_mean([r.parameters(self.phase) for r in self.replicas]))
                self.curve.samples.append(self.samples)
                self.curve.time_s.append(now)
                self.curve.accuracy.append(float(self.probe.score(self.X_test, self.y_test)))

    # ------------------------------------------------------------------------- sync: rounds behind a barrier
    def run_rounds(self) -> None:
        """Every node trains one partition, then all average (and take the outer step), round after round."""
        nodes, clock = self.nodes, self.clock
        now = 0.0
        names = [f"node-{j}" for j in range(nodes)]
        for round_ in range(self.epochs * self.partitions_per_node):
            epoch, index = divmod(round_, self.partitions_per_node)
            ends = [self.train(i, names[:i] + names[i + 1:], epoch, i, index) + clock.write_s for i in range(nodes)]
            now += max(ends) + (nodes - 1) * clock.read_s if nodes > 1 else ends[0]  # barrier, peers' snapshots
            self.curve.reads += nodes * (nodes - 1)
            if nodes > 1:
                average = _mean([r.parameters(self.phase) for r in self.replicas])
                for i, replica in enumerate(self.replicas):
                    replica.set_parameters(average)
                    if self.outer:
                        self.step_outer(i)
            self.record_accuracy(now)
        self.curve.end_s = now

    # ------------------------------------------------------------------------- async and sharing: a node at a time
    def run_events(self) -> None:
        """Every node on its own: a heap of (time node ``i`` is free, ``i``) orders the partitions, which
        :class:`PartitionQueue` deals; a node waits for a free core (``clock.cores``) and, in ``async``,
        for the epoch before the last to finish."""
        queue = PartitionQueue(self.nodes, self.partitions_per_node, self.epochs, stealing=self.stealing,
                               ahead=1 if self.mode == "async" else None)
        training: list[int | None] = [None] * self.nodes  # the epoch of the partition each node is training
        waiting: list[int] = []  # nodes that wait for an epoch to finish (async's next job)
        cores = [0.0] * self.clock.cores if self.clock.cores else []  # when each core is free (a heap)
        events = [(0.0, i) for i in range(self.nodes)]
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
                if queue.epoch[i] < self.epochs:
                    waiting.append(i)
                continue
            training[i] = taken[0]
            end = self.train_async(i, now, taken) if self.mode == "async" else self.train_sharing(i, now, taken)
            self.record_accuracy(end)
            self.curve.end_s = max(self.curve.end_s, end)
            if cores:
                heapq.heapreplace(cores, end)
            heapq.heappush(events, (end, i))

    def train_async(self, i: int, now: float, taken: tuple[int, int, int]) -> float:
        """Node ``i``, free at ``now``, merges its fresh peers, trains partition ``taken`` (epoch, owner,
        index), takes the outer step and publishes its snapshot; returns when the partition ends."""
        merged_from = self.merge_fresh(i, now, now, self.fanout)
        reads = len(merged_from)
        between = None
        if self.minibatch_merges and not self.outer:  # as node.modes._async.merges_between_minibatches
            between = functools.partial(self.merge_during, i, now, now + reads * self.clock.read_s, reads)
        self.curve.reads += reads
        compute_s = self.train(i, merged_from, *taken, between=between)
        if self.outer:
            self.step_outer(i)
        end = now + reads * self.clock.read_s + compute_s + self.clock.write_s
        snapshot = self.replicas[i].parameters(self.phase)
        check_snapshot(snapshot, None, source=f"node-{i} version {int(self.done[i])}")  # once, not by every reader
        self.published[i].append(Publication(end + self.clock.delay_s, int(self.done[i]), snapshot))
        return end

    def train_sharing(self, i: int, now: float, taken: tuple[int, int, int]) -> float:
        """Node ``i``, free at ``now``, applies its peers' updates, trains partition ``taken`` (epoch, owner,
        index) and publishes its change as a sparse update; returns when the partition ends."""
        reads = self.apply_updates(i, now)
        self.curve.reads += reads
        before = self.replicas[i].parameters(self.phase)
        compute_s = self.train(i, [], *taken)  # peers' updates are added, not averaged: learning rates stay as given
        end = now + reads * self.clock.update_read_s + compute_s + self.clock.update_write_s
        after = self.replicas[i].parameters(self.phase)
        update = self.accumulators[i].add({name: after[name] - before[name] for name in after})
        self.published[i].append(Publication(end + self.clock.delay_s, len(self.published[i]), _as_indices(update)))
        return end

    def merge_fresh(self, i: int, at: float, now: float, limit: int | None, fetched_s: float = 0.0) -> list[str]:
        """Node ``i`` merges, at simulated time ``at`` (its event's time ``now`` or later), the newest version of
        each peer that is visible ``fetched_s`` before and that it has not merged yet -- at most ``limit`` of
        them (a random subset, as the node's actor picks them).  Returns the peers merged."""
        fresh = []
        for j in range(self.nodes):
            newest = self._newest_visible(j, at, now, fetched_s)
            if j != i and newest is not None and newest.version > self.merged_version[i, j]:
                fresh.append((j, newest))
        if limit is not None and len(fresh) > limit:
            fresh = [fresh[k] for k in sorted(self.rng.choice(len(fresh), size=limit, replace=False))]
        if fresh:
            own = self.replicas[i].parameters(self.phase)
            # Each snapshot was checked once, when its author published it (as each reader's actor checks it).
            merged = merge_snapshots(own, [entry.payload for _, entry in fresh], checked=True)
            self.replicas[i].set_parameters(merged)
            if self.outer:  # the anchor moves with the merge, as the executor's (node.adopt_merge)
                self.outer_states[i] = self.outer_states[i].moved(own, merged)
            for j, entry in fresh:
                self.merged_version[i, j] = entry.version
                self.curve.age_s += at - (entry.visible_s - self.clock.delay_s)
        return [f"node-{j}" for j, _ in fresh]

    def _newest_visible(self, j: int, at: float, now: float, fetched_s: float) -> Publication | None:
        """Node ``j``'s newest snapshot visible ``fetched_s`` before ``at``, if any."""
        published = self.published[j]
        # Older versions than the newest visible ``now`` are never merged again: drop them (time only moves on).
        while len(published) > 1 and published[1].visible_s <= now:
            published.pop(0)
        newest = None
        for entry in published:
            if entry.visible_s + fetched_s > at:
                break
            newest = entry
        return newest

    def merge_during(self, i: int, now: float, computing_from: float, merged_before: int, elapsed_s: float,
                     merged: int) -> list[str]:
        """Between two minibatches of node ``i``'s partition (started ``now``, computing from ``computing_from``,
        ``elapsed_s`` into it, ``merged`` peers merged during it so far): what its actor fetched meanwhile, up
        to the fan-out (:mod:`node.modes._async`)."""
        left = None if self.fanout is None else self.fanout - merged_before - merged
        if left is not None and left <= 0:
            return []
        names = self.merge_fresh(i, computing_from + elapsed_s, now, left, fetched_s=self.clock.read_s)
        self.curve.reads += len(names)
        return names

    def apply_updates(self, i: int, now: float) -> int:
        """Node ``i`` adds every peer update visible at ``now`` that it has not applied yet, each once (summed,
        :func:`_sparse_sum`); returns how many."""
        own = self.replicas[i].parameters(self.phase)
        pending = []
        for j in range(self.nodes):
            applied = self.merged_version[i, j] + 1  # updates are numbered from 0 and become visible in order
            while j != i and applied < len(self.published[j]) and self.published[j][applied].visible_s <= now:
                pending.append(self.published[j][applied].payload)
                self.curve.age_s += now - (self.published[j][applied].visible_s - self.clock.delay_s)
                applied += 1
            self.merged_version[i, j] = applied - 1
        if pending:
            _sparse_sum(pending, own)
            self.replicas[i].set_parameters(own)
        return len(pending)
