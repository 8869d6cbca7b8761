"""Learning rates that follow the number of nodes: the scaling rule.

Averaging ``n`` replicas that each took a step on ``1/n`` of the data moves the model as far as
one step of a batch ``n`` times larger at the same learning rate: without a correction every
node added costs accuracy at a fixed number of epochs.  The rule multiplies every learning
rate of a node (pretraining and fine-tuning, every updater) by a factor of the number of nodes
whose progress it merges (Goyal et al., 2017; Krizhevsky, 2014):

* ``"linear"``: ``n``, for SGD with or without momentum (and the RBMs' CD updates);
* ``"sqrt"``: ``sqrt(n)``, the rule proposed for adaptive updaters (Adam, Adagrad), whose steps do
  not grow with the gradient's size;
* ``"auto"`` (the default): the linear factor, for every updater, applied only as far as the
  nodes' progress is limited by their steps: ``n`` capped at ``STEP_LIMITED_STEPS / s`` (at least
  1), ``s`` being the minibatch steps each node takes per epoch.  With Adam fine-tuning, linear beat
  sqrt at every node count measured (digits, 8 nodes: 0.888 vs 0.788; one node 0.928): where the
  factor applies at all, the nodes' steps still agree, and their mean is one step, not ``n``.
  Measured (scripts/bench_scaling.py): on 1,347 digits (``s`` = 17 on 8 nodes) the full factor
  takes 8 nodes from 0.13 to 0.87 accuracy; on 36k digits28 rows (``s`` = 450) the full factor
  ruins a run that averaging alone keeps at one node's accuracy (0.87 vs 0.98: the scaled rates
  are past the stable range, and nodes with hundreds of steps per epoch lose nothing by averaging);
* ``"none"``: the factor is always 1 (for users who scale by hand).

Under ``"auto"`` the learning rates take at most :data:`MAX_RATE_FACTOR` (4) of the factor (or less
where the model says so: an RBM with persistent chains takes none, see
:meth:`rbm.RBM.max_learning_rate_factor`); the rest
comes as more minibatch steps: each node trains with a minibatch of ``batch_size * 4 / factor``
rows (at least 1, :func:`node_batch_size`; the factor for the fit's nodes), its rates times
``factor * node_batch / batch_size`` and never more than the cap (where even one row leaves more,
the rest of the factor is dropped).  In the linear regime ``b`` steps of ``1/b`` the minibatch
move a model as far as one step at ``b`` times the rate, but each stays at a rate the model was
tuned for (the large factor is where the nodes take fewest steps).  Measured
(scripts/bench_scaling.py, 6 seeds): digits on 8 nodes 0.906 -> 0.930 (one node 0.947), on 16
0.383 (4 seeds) -> 0.869, an RBM's reconstruction error on 8 0.0581 -> 0.0498 (one node 0.0418), Adam
fine-tuning on 8 0.848 -> 0.871 (0.922, 4 seeds); at 4 nodes (factor 4) the split gained nothing
(0.943 / 0.940); on Spark, 16 nodes 0.827-0.849 -> 0.891-0.918 (3 runs each).

The factor ramps up from 1 over the first ``warmup_partitions`` partitions a node trains in a
phase (a "gradual warm-up", by default the node's first epoch of the phase): early in a phase the
replicas differ most and the count of nodes is still being learned.  Where the factor is large,
a fit's default partitions let the nodes merge more often (:func:`default_partitions`: 8 per node
instead of 2), which is what keeps most of one node's accuracy when each node takes few steps
(digits on 8 nodes: 0.870 -> 0.914 in simulation; LeNet on 8 nodes 0.975 -> 0.981, where a
warm-up of a quarter epoch diverged).  The number of nodes is what the executor sees merging: itself plus
the distinct peers whose snapshots it merged in its last :data:`PEER_WINDOW` partitions
(at most ``fanout`` + 1, and at most the fit's nodes: an executor's idle Python workers may take
turns at a fit's tasks, each a node, but no more of them run at once than the fit has tasks).  A
training mode hands the peers it merged before a partition to
:meth:`node.executor._node_training.NodePartitionTraining.train` (``merged_from``), which sets the model's
``set_learning_rate_scale`` from the node's :class:`NodeScaling` (count and warm-up); a mode that
averages all nodes at once names them all (``sync``: the round's slots); ``sharing`` names
none: it adds the peers' updates instead of averaging, so their sum already is one process's
progress.  :func:`learning_rate_scale` is the rule itself.
"""

from __future__ import annotations

import collections
import math
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["SCALE_RULES", "DEFAULT_WARMUP_PARTITIONS", "PEER_WINDOW", "STEP_LIMITED_STEPS", "MIN_STEPS_PER_NODE_EPOCH",
           "ADVISED_PARTITIONS_PER_NODE", "DEFAULT_PARTITIONS_PER_NODE", "MERGE_OFTEN_ABOVE_FACTOR", "MAX_RATE_FACTOR",
           "MAX_OUTER_GAIN", "NodeScaling", "default_partitions", "default_warmup_partitions", "fit_factor",
           "learning_rate_scale", "max_learning_rate_factor", "node_batch_size", "outer_gain", "rates_cap",
           "resolve_rule", "scale_target", "scaling_warning", "schedule_epoch", "schedule_place"]

#: Every rule's name; ``"auto"`` is linear, capped by the nodes' steps per epoch.
SCALE_RULES = ("auto", "linear", "sqrt", "none")

#: Partitions per node and phase over which the factor ramps up from 1, where nothing else says
#: (a fit's default is a node's first epoch of the phase: :func:`default_warmup_partitions`).
DEFAULT_WARMUP_PARTITIONS = 2

#: A peer counts as merging when one of its snapshots was merged in this many of the node's last partitions.
PEER_WINDOW = 4

#: Minibatch steps per node and epoch below which "auto" scales (fully below ``STEP_LIMITED_STEPS / n``).
STEP_LIMITED_STEPS = 200

#: Fewer minibatch steps than this per node and epoch: scaled learning rates cannot make up for the
#: steps the nodes no longer take one after the other (the large-batch limit), accuracy at equal
#: epochs falls short (scripts/bench_scaling.py: 8 nodes on 1,347 digits, 17 steps: -7.5 points).
MIN_STEPS_PER_NODE_EPOCH = 48

#: Partitions per node and epoch that made up most of that shortfall in the same measurements
#: (merging more often: 8 nodes on digits -7.5 -> -2.0 points); the default where the nodes' steps are few.
ADVISED_PARTITIONS_PER_NODE = 8

#: Partitions per node and epoch where the nodes take many steps: merging more often there costs
#: accuracy (DBN(128, 128) on digits28, 16 nodes, 225 steps: 0.965 with 2 per node, 0.942 with 8).
DEFAULT_PARTITIONS_PER_NODE = 2

#: Above this learning-rate factor the nodes merge :data:`ADVISED_PARTITIONS_PER_NODE` times per epoch
#: by default (measured: factor 8, digits on 8 nodes, +4.4 points; 2.9, LeNet on 8 nodes, +0.6; 2,
#: digits on 2 nodes, no gain for four times the tasks).
MERGE_OFTEN_ABOVE_FACTOR = 2.0

#: The largest share of the ``"auto"`` factor the learning rates take; the rest comes as a smaller
#: minibatch per node (:func:`node_batch_size`).  Measured (digits, 6 seeds): at the factor 8 the
#: rates times 4 and half the minibatch, 0.930, beat the rates times 8, 0.906; at the factor 4 the
#: split gained nothing.
MAX_RATE_FACTOR = 4.0

#: The most the outer step's rule multiplies a node's progress (:func:`outer_gain`): the gain of the
#: step 0.7/0.8 that gained on the DBNs and LeNet on 8 nodes (docs/scaling-out.md, "The outer step").
MAX_OUTER_GAIN = 3.5


def default_partitions(rule: str, nodes: int, rows: int | None, batch_size: int | None,
                       fanout: int | None = None) -> int:
    """Partitions of an epoch when the user names none: how often the nodes merge.

    :data:`DEFAULT_PARTITIONS_PER_NODE` per node; :data:`ADVISED_PARTITIONS_PER_NODE` where the
    rule scales the learning rates by more than :data:`MERGE_OFTEN_ABOVE_FACTOR` (``"auto"``: few
    minibatch steps per node and epoch) and every merge averages all nodes (no ``fanout`` below
    ``nodes - 1``), then never fewer than a minibatch per partition.  ``rows`` unknown (None): the
    default per node.  Measured in the many-node simulation (scripts/bench_simulate.py, 64 and
    256 nodes): merging 4 times as often takes full averaging to 0.90 in 0.8 instead of 1.5 epochs
    (64 nodes) and 1.3 instead of 4.5 (256), but gossip with a fan-out of 2-8 from 1.3 to 1.5
    epochs, and at 256 nodes from 5.5 to never.
    """
    nodes = max(1, int(nodes))
    per_node = DEFAULT_PARTITIONS_PER_NODE
    full_average = fanout is None or int(fanout) >= nodes - 1
    if rows and batch_size and full_average and fit_factor(rule, nodes, rows, batch_size) > MERGE_OFTEN_ABOVE_FACTOR:
        per_node = max(per_node, min(ADVISED_PARTITIONS_PER_NODE, int(rows / (nodes * int(batch_size)))))
    return nodes * per_node


def fit_factor(rule: str, nodes: int, rows: int, batch_size: int) -> float:
    """The factor ``rule`` gives a fit's ``nodes`` after the warm-up, each taking ``rows / (nodes * batch_size)``
    minibatch steps per epoch (what ``"auto"`` caps by)."""
    steps = rows / (max(1, int(nodes)) * int(batch_size))
    return scale_target(resolve_rule(rule), nodes, steps if rule == "auto" else None)


def outer_gain(rule: str, nodes: int, rows: int, batch_size: int) -> float:
    """The gain of the outer step the fit's ``nodes`` take by default: ``min(3.5, max(1, nodes / f))``.

    ``f`` is the learning rates' factor after the warm-up (:func:`fit_factor`): the nodes already move
    ``f`` times one node's pace, where ``nodes`` nodes need about ``nodes`` times.  The outer step
    (:func:`actors.outer_settings_for_gain`) makes up the rest, at most :data:`MAX_OUTER_GAIN`.  Where
    ``f`` is ``nodes`` (few steps per node: the rates take the whole factor) the gain is 1, plain merging:
    a small ConvNet on 2 nodes whose rates the rule doubles diverged with a gain of 3.5 on top
    (docs/scaling-out.md, "The outer step").
    """
    if nodes < 2 or not rows or not batch_size:
        return 1.0
    factor = fit_factor(rule, nodes, rows, batch_size)
    return min(MAX_OUTER_GAIN, max(1.0, nodes / factor))


def node_batch_size(rule: str, batch_size: int | None, nodes: int, n_samples: int | None,
                    max_rate_factor: float | None = None) -> int | None:
    """The minibatch each node trains with: ``batch_size``, smaller where ``"auto"``'s factor passes the rates' cap.

    The factor is the one for the fit's ``nodes`` (:func:`fit_factor`); the cap is
    :data:`MAX_RATE_FACTOR`, or the model's own where it is lower (``max_rate_factor``: its
    ``max_learning_rate_factor()``, see :func:`rates_cap`).  Above the cap the minibatch is
    ``batch_size * cap / factor`` rounded, at least 1.  Other rules, a model without a
    ``batch_size`` (None) and unknown rows keep the model's own.
    """
    if rule != "auto" or not batch_size or not n_samples or nodes < 2:
        return batch_size
    factor, cap = fit_factor(rule, nodes, n_samples, batch_size), rates_cap(max_rate_factor)
    if factor <= cap:
        return int(batch_size)
    return max(1, int(int(batch_size) * cap / factor + 0.5))


def max_learning_rate_factor(model: Any) -> float | None:
    """A model's own limit on the rates' factor (the seam's optional ``max_learning_rate_factor()``), else None."""
    limit = getattr(model, "max_learning_rate_factor", None)
    return None if limit is None else limit()


def rates_cap(max_rate_factor: float | None) -> float:
    """The largest share of the ``"auto"`` factor the rates take: :data:`MAX_RATE_FACTOR`, or a model's lower limit."""
    return MAX_RATE_FACTOR if max_rate_factor is None else max(1.0, min(MAX_RATE_FACTOR, float(max_rate_factor)))


def default_warmup_partitions(partitions: int, nodes: int) -> int:
    """The warm-up when the user names none: a node's first epoch of each phase (its share of the partitions)."""
    return max(1, -(-int(partitions) // max(1, int(nodes))))

def resolve_rule(rule: str) -> str:
    """``rule`` as :func:`scale_target` takes it: ``"auto"`` is the linear rule (capped by the steps)."""
    if rule not in SCALE_RULES:
        raise ValueError(f"scale_rule must be one of {', '.join(SCALE_RULES)}, got {rule!r}")
    return "linear" if rule == "auto" else rule


def scale_target(rule: str, nodes: int, steps_per_node_epoch: float | None = None) -> float:
    """The factor after the warm-up: ``nodes`` (linear) or its root (sqrt), 1 for none.

    With ``steps_per_node_epoch`` (the ``"auto"`` rule) only the step-limited share is scaled:
    the linear factor is ``min(nodes, max(1, STEP_LIMITED_STEPS / steps_per_node_epoch))``.
    """
    if rule == "none":
        return 1.0
    if rule not in ("linear", "sqrt"):
        raise ValueError(f"scale_target takes a resolved rule (linear, sqrt, none), got {rule!r}")
    factor = float(max(1, nodes))
    if steps_per_node_epoch is not None and steps_per_node_epoch > 0:
        factor = min(factor, max(1.0, STEP_LIMITED_STEPS / float(steps_per_node_epoch)))
    return factor if rule == "linear" else math.sqrt(factor)


def learning_rate_scale(rule: str, nodes: int, partitions_done: int = 0,
                        warmup_partitions: int = DEFAULT_WARMUP_PARTITIONS,
                        steps_per_node_epoch: float | None = None, batch_ratio: float = 1.0,
                        rates_cap: float | None = None) -> float:
    """The learning-rate factor of a node that merges the progress of ``nodes`` nodes (itself included).

    Parameters
    ----------
    rule : {"linear", "sqrt", "none"}
        Resolved rule (see :func:`resolve_rule`).
    nodes : int
        Nodes merging, >= 1.
    partitions_done : int
        Partitions this node trained in the phase before this one (the warm-up position).
    warmup_partitions : int
        The factor grows linearly from 1 to its target over this many partitions (0: no warm-up).
    steps_per_node_epoch : float, optional
        Minibatch steps each node takes per epoch: scale only the step-limited share (see :func:`scale_target`).
    batch_ratio : float
        The node's minibatch over the model's (:func:`node_batch_size`): the learning rates take the
        factor times this.
    rates_cap : float, optional
        Where the minibatch is split (``batch_ratio`` below 1), the most the learning rates take
        (:func:`rates_cap`): a minibatch cannot shrink below one row, and what of the factor it cannot
        take is dropped, not given to the rates (digits on 64 simulated nodes, a minibatch of 1: the
        rates times 6.4 left 0.20 accuracy, capped at 4 they left 0.72; scripts/bench_simulate.py).

    The warm-up ramps the learning rates' factor up from 1 -- the model's own step -- and does not
    ramp a factor of at most 1: a node whose smaller minibatch takes steps no larger than the model's
    needs none (an RBM with persistent chains on 8 nodes of digits trains at 0.8 times its rate in
    minibatches of 1: ramping it from 0.1 left 8 simulated nodes 4.2% above one node's test
    reconstruction error at 5 epochs and 8.5% at 3; without, 2.2% and 5.1%).
    """
    target = scale_target(rule, nodes, steps_per_node_epoch) * batch_ratio
    if batch_ratio < 1.0 and rates_cap is not None:
        target = min(target, float(rates_cap))
    start = min(1.0, target)
    if warmup_partitions > 0 and partitions_done < warmup_partitions:
        return start + (target - start) * (partitions_done + 1) / (warmup_partitions + 1)
    return target


def schedule_epoch(epoch: int, factor: float) -> float:
    """Where a node's schedules stand in ``epoch`` with its learning rates times ``factor``: ``epoch * factor``.

    A model's schedules (its learning-rate decay ``lr / (1 + d t)``, the RBMs' momentum switch)
    count epochs of the data (``rbm.ScheduleClock``), not the partitions a node trains.  Where the
    rule scales the rates by ``k``, the clock runs ``k`` times as fast: the scaled rate
    ``k lr / (1 + d k t)`` starts ``k`` times one process's and comes down to one process's own,
    ``lr / (d t)``, late in the phase, when what is left to learn is fine detail that the nodes'
    asynchronous merges would blur at ``k`` times the rate.  Measured on 8 nodes (digits, the
    factor 8, ``local[8]``): with the clock at the epoch alone, 0.876-0.942 over about 20 runs; at
    ``epoch * factor``, 0.924-0.940 in 6 (counting partitions, before: 0.920-0.938); one process
    (factor 1) counts epochs as ``fit`` does: 0.958, where counting its 2 partitions an epoch gave 0.949.
    """
    return float(epoch) * float(factor)


def schedule_place(epoch: int, slots: Sequence[Sequence[int]], partition: int) -> tuple[float, float] | None:
    """Where ``partition`` stands in the phase's plan: ``(epochs done when it starts, its share of an epoch)``.

    What a node tells a model that shapes its steps by the plan as its ``fit`` does
    (``rbm.ScheduleClock.set_schedule_plan``: the DBN anneals its fine-tuning rate to 0 over the last
    half of the planned updates).  The nodes train their slots side by side, each its own partitions in
    index order, so the partition at position ``i`` of a slot of ``m`` covers ``epoch + [i / m, (i + 1) / m)``
    -- whoever trains it: a partition taken from a slower node's slot (work stealing takes them from the
    ends of the lists) keeps the place its slot gives it, near the epoch's end, where its owner would have
    trained it.  So a node that trains more or fewer partitions than it was dealt never places one past
    its epoch's end, and the phase's last partitions end at the plan's end, the rate at 0.

    These are epochs of the fit, not the clock of :func:`schedule_epoch`: that one runs ``factor`` times
    as fast so that the decay brings a scaled rate down to one process's own; the anneal must end the
    rate exactly when the phase's updates end (on the scaled clock it would reach 0 after ``1 / factor`` of
    the phase, the rest trained at no rate at all).  None when no slot holds ``partition``.
    """
    for slot in slots:
        if partition in slot:
            ordered = sorted(slot)
            return float(epoch) + ordered.index(partition) / len(ordered), 1.0 / len(ordered)
    return None


def scaling_warning(samples_per_node: Mapping[str, int], partitions: int, batch_size: int | None, *,
                    staged: bool = False) -> str | None:
    """What to change when the nodes' shares of an epoch are too small to learn from at equal epochs, else None.

    Parameters
    ----------
    samples_per_node : dict of str to int
        Rows each node trained in the epoch.
    partitions : int
        Partitions of the epoch.
    batch_size : int, optional
        The model's minibatch size (None: no warning).
    staged : bool
        The data is a staged dataset, whose shards are its partitions: more of them is a staging of more shards.
    """
    nodes = len(samples_per_node)
    if not batch_size or nodes < 2:
        return None
    rows = sum(samples_per_node.values()) // nodes  # Spark hands some nodes more partitions than others
    steps = -(-rows // int(batch_size))
    if steps >= MIN_STEPS_PER_NODE_EPOCH:
        return None
    advice = ["train more epochs", "use fewer nodes for this data"]
    advised = nodes * min(ADVISED_PARTITIONS_PER_NODE, steps)  # never a partition smaller than a minibatch
    if partitions < advised:
        more = f"stage the dataset again with --shards {advised}" if staged else f"partitions={advised}"
        advice.append(f"merge more often ({more}), which makes up part of the shortfall")
    return (f"each of the {nodes} nodes takes only {steps} minibatch steps of {batch_size} per epoch "
            f"(~{rows} rows), fewer than {MIN_STEPS_PER_NODE_EPOCH} steps: the scaled learning rates cannot make up "
            f"for so few steps, and accuracy at these epochs will fall short of one node's; {', or '.join(advice)}")


class NodeScaling:
    """One node's scaling state in its current phase: peers seen merging, partitions trained.

    Parameters
    ----------
    rule : str
        One of :data:`SCALE_RULES`.
    spec : dict
        The model's spec (its ``batch_size``).
    warmup_partitions : int
    fanout : int, optional
        At most this many peers are merged per partition: at most ``fanout + 1`` nodes count.
    n_samples : int, optional
        Training rows of the whole run (with the spec's ``batch_size``: the steps per node and epoch
        that ``"auto"`` needs; unknown: the full factor).
    node_batch : int, optional
        The minibatch this node trains with (:func:`node_batch_size`; None: the spec's): where it is
        smaller than the spec's, the learning rates take the factor times their ratio.
    rates_cap : float, optional
        Where ``node_batch`` is smaller than the spec's, the most the learning rates take
        (:func:`rates_cap`; see :func:`learning_rate_scale`).
    fit_nodes : int, optional
        The fit's nodes (tasks per job): at most this many count.  A Spark executor keeps more idle
        Python workers than it runs tasks at once after some jobs, and hands a job's tasks to any of
        them: over a fit more processes are nodes than run at once, and their peers would count them all
        (measured on ``local[2]`` with four idle workers: 4 nodes counted, the factor 4 instead of 2,
        0.950-0.967 against one process's 0.975).
    """

    def __init__(self, rule: str, spec: Mapping[str, Any], warmup_partitions: int = DEFAULT_WARMUP_PARTITIONS,
                 fanout: int | None = None, n_samples: int | None = None, fit_nodes: int | None = None,
                 node_batch: int | None = None, rates_cap: float | None = None) -> None:
        self.rule = rule
        self.fit_nodes = fit_nodes
        self.spec = spec
        self.n_samples = n_samples
        batch_size = spec.get("batch_size")
        self.batch_ratio = node_batch / int(batch_size) if node_batch and batch_size else 1.0
        self.rates_cap = rates_cap
        self.warmup_partitions = int(warmup_partitions)
        self.fanout = fanout
        self.phase: str | None = None
        self.partitions_done = 0
        self._recent: collections.deque[frozenset[str]] = collections.deque(maxlen=PEER_WINDOW)

    def enter_phase(self, phase: str) -> None:
        """Start counting afresh (the warm-up restarts at every phase start)."""
        if phase != self.phase:
            self.phase, self.partitions_done = phase, 0
            self._recent.clear()

    def merged(self, peers: Iterable[str]) -> None:
        """Note the peers whose snapshots the node merged before its next partition."""
        self._recent.append(frozenset(peers))

    def also_merged(self, peers: Iterable[str]) -> None:
        """Note peers merged during the partition just trained (they count as merged before it)."""
        if self._recent:
            self._recent[-1] = self._recent[-1] | frozenset(peers)
        else:
            self._recent.append(frozenset(peers))

    def nodes(self) -> int:
        """Nodes merging: this one and the distinct peers merged in its last :data:`PEER_WINDOW` partitions,
        at most ``fanout + 1`` and at most the fit's nodes."""
        peers = len(frozenset().union(*self._recent)) if self._recent else 0
        if self.fanout is not None:
            peers = min(peers, int(self.fanout))
        if self.fit_nodes:
            peers = min(peers, int(self.fit_nodes) - 1)
        return 1 + peers

    def scale(self) -> float:
        """The learning rates' factor for the next partition (call :meth:`merged` first, :meth:`trained` after it):
        the rule's factor, times the node's minibatch over the spec's."""
        return learning_rate_scale(resolve_rule(self.rule), self.nodes(), self.partitions_done, self.warmup_partitions,
                                   self.steps_per_node_epoch() if self.rule == "auto" else None, self.batch_ratio,
                                   self.rates_cap)

    def steps_per_node_epoch(self) -> float | None:
        """Minibatch steps of the spec's size each of the merging nodes takes per epoch (None: unknown)."""
        batch_size = self.spec.get("batch_size")
        if not self.n_samples or not batch_size:
            return None
        return self.n_samples / (self.nodes() * int(batch_size))

    def trained(self) -> None:
        """One more partition trained in the phase."""
        self.partitions_done += 1
