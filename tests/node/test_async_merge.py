"""The ``async`` mode takes in a peer snapshot fetched while a partition trains, between two minibatches.

Before, a node merged only before each partition, so what arrived during one waited for the next;
with partitions that follow each other closely (a task's Spark overhead is tens of ms) it often
missed the peer's concurrent partition altogether.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np

import actors

import rbm
from actors import Snapshot
from node.modes._async import AsyncMode
from node.modes._protocols import Trained
from node.modes._scaling import NodeScaling

PHASE = "train"


class FakeHandle:
    """A node actor's handle: snapshot k is fetched after the partition's ``arrivals[k]``-th minibatch."""

    def __init__(self, snapshots: list[Snapshot], arrivals: list[int]) -> None:
        self.waiting = list(zip(arrivals, snapshots))
        self.minibatches = 0
        self.published = None
        self.jumps: list[dict] = []

    def _arrived(self) -> list[Snapshot]:
        return [snapshot for arrives_at, snapshot in self.waiting if self.minibatches >= arrives_at]

    def has_fresh(self) -> bool:
        self.minibatches += 1  # asked once after every minibatch
        return bool(self._arrived())

    def merge(self, phase, own, alpha=None, wait_s=1.0):
        used = self._arrived()
        self.waiting = [(at, snapshot) for at, snapshot in self.waiting if snapshot not in used]
        merged = {name: (value + sum(s.params[name] for s in used)) / (1 + len(used)) for name, value in own.items()}
        if used:
            self.jumps.append({name: merged[name] - own[name] for name in own})  # what each merge moved
        return merged, used

    def publish(self, phase, params, samples_seen):
        self.published = params

    def flush(self, timeout_s):
        pass

    def published_version(self, phase):
        return 1


class FakeNode:
    """What AsyncMode uses of a node (node.modes.ModeNode): a real model and scaling, a fake actor handle."""

    def __init__(self, model, handle, outer: tuple[float, float] | None = None) -> None:
        self.model, self.handle, self.samples_seen = model, handle, {PHASE: 0}
        self.scaling = NodeScaling("none", {"batch_size": model.batch_size})
        self.scaling.enter_phase(PHASE)
        self.weights_when_merged = None
        self.outer_settings = outer  # (eta, mu): the outer step, anchored at the model's start
        self.outer = actors.OuterState.start(model.parameters(PHASE)) if outer else None
        self.saved_outer = 0

    @property
    def outer_enabled(self):
        return self.outer is not None

    def adopt_merge(self, phase, before, merged):
        self.model.set_parameters(merged)
        if self.outer is not None:
            self.outer = self.outer.moved(before, merged)

    def outer_step(self, phase):
        if self.outer is not None:
            params, self.outer = actors.outer_step(self.outer, self.model.parameters(phase), *self.outer_settings)
            self.model.set_parameters(params)

    def save_outer(self, phase):
        self.saved_outer += 1

    def train(self, task, partition, X, y, merged_from=()):
        self.scaling.merged(merged_from)
        metrics = self.model.train_partition(X, y, PHASE, np.random.default_rng(partition))
        self.samples_seen[PHASE] += metrics["samples"]
        self.scaling.trained()
        return Trained(partition, metrics, self.samples_seen[PHASE])

    def also_merged(self, peers):
        self.scaling.also_merged(peers)

    def report(self, task, work):
        return dataclasses.asdict(work)


def small_net():
    layers = [{"type": "dense", "units": 16, "activation": "relu"}]
    return rbm.ConvNet(layers=layers, input_shape=(64,), n_classes=10, batch_size=10, random_state=0).initialize()


def peer_snapshot(name: str, X, y, seed: int) -> Snapshot:
    peer = small_net()
    peer.train_partition(X, y, PHASE, np.random.default_rng(seed))
    return Snapshot(node=name, phase=PHASE, version=3, samples_seen=len(X), sent_at=0.0,
                    params=peer.parameters(PHASE), announced=True)


def digits200():
    from rbm.datasets import load_digits01

    split = load_digits01()
    return split.X_train[:200], split.y_train[:200]


def task(fanout=None):
    return SimpleNamespace(phase=PHASE, node=SimpleNamespace(merge_alpha=None, flush_timeout_s=1.0, fanout=fanout))


def test_a_snapshot_fetched_mid_partition_is_merged_before_the_partition_ends():
    X, y = digits200()
    handle = FakeHandle([peer_snapshot("peer", X, y, 9)], arrivals=[5])  # fetched after the 5th of 20 minibatches
    node = FakeNode(small_net(), handle)

    report = AsyncMode().train_partition(node, task(), 0, X, y)

    assert handle.waiting == [] and report["merged_from"] == ["peer"]
    assert node.scaling.nodes() == 2  # the peer counts as merging for the learning-rate factor
    alone = small_net()
    alone.train_partition(X, y, PHASE, np.random.default_rng(0))
    assert not np.allclose(handle.published["out.W"], alone.parameters(PHASE)["out.W"])
    assert "_minibatch_hook" not in vars(node.model)  # the hook lives for the partition only


def test_the_published_snapshot_is_the_outer_step_on_what_the_partitions_training_changed():
    X, y = digits200()
    plain = FakeHandle([peer_snapshot("peer", X, y, 9)], arrivals=[0])  # fetched before the partition
    AsyncMode().train_partition(FakeNode(small_net(), plain), task(), 0, X, y)
    stepped = FakeHandle([peer_snapshot("peer", X, y, 9)], arrivals=[0])
    node = FakeNode(small_net(), stepped, outer=(0.7, 0.8))

    AsyncMode().train_partition(node, task(), 0, X, y)

    # The same merge and minibatches, then one outer step from the start moved by the merge (the
    # anchor follows it): d = x - w is the training's change alone, and x - 0.7 (d + 0.8 d).
    (jump,) = plain.jumps
    start = small_net().parameters(PHASE)
    state = actors.OuterState.start(start).moved(start, {name: start[name] + jump[name] for name in start})
    expected, _ = actors.outer_step(state, plain.published, 0.7, 0.8)
    # The step on what merging and training changed together (the anchor left behind) differs.
    unmoved, _ = actors.outer_step(actors.OuterState.start(start), plain.published, 0.7, 0.8)
    assert not np.allclose(expected["out.W"], unmoved["out.W"])
    for name, value in expected.items():
        np.testing.assert_allclose(stepped.published[name], value, rtol=0, atol=1e-5)
    assert not np.allclose(stepped.published["out.W"], plain.published["out.W"])
    np.testing.assert_array_equal(node.outer.anchor["out.W"], stepped.published["out.W"])  # the next anchor


def test_a_node_taking_the_outer_step_merges_what_arrives_mid_partition_before_its_next_partition():
    X, y = digits200()
    handle = FakeHandle([peer_snapshot("peer", X, y, 9)], arrivals=[5])  # fetched after the 5th of 20 minibatches
    node = FakeNode(small_net(), handle, outer=(0.7, 0.8))

    first = AsyncMode().train_partition(node, task(), 0, X, y)

    # Merged mid-partition, the training the step has not taken yet would count twice: once averaged
    # with the peer, once whole in the step's change (the anchor moves with the merge).
    assert first["merged_from"] == [] and [snapshot.node for _, snapshot in handle.waiting] == ["peer"]
    assert handle.minibatches == 0  # nothing was asked between minibatches
    handle.minibatches = 20  # the partition's time has passed: the snapshot is fetched
    second = AsyncMode().train_partition(node, task(), 1, X, y)
    assert second["merged_from"] == ["peer"] and handle.waiting == []
    assert AsyncMode().train_partition(FakeNode(small_net(), FakeHandle([peer_snapshot("peer", X, y, 9)], [5])),
                                       task(), 0, X, y)["merged_from"] == ["peer"]  # plain merging: mid-partition


def test_with_a_fanout_a_partition_merges_at_most_that_many_peers_in_all():
    X, y = digits200()
    handle = FakeHandle([peer_snapshot("early", X, y, 8), peer_snapshot("late", X, y, 9)], arrivals=[0, 5])
    node = FakeNode(small_net(), handle)

    report = AsyncMode().train_partition(node, task(fanout=1), 0, X, y)

    assert report["merged_from"] == ["early"]  # merged before the partition; "late" waits for the next one
    assert [snapshot.node for _, snapshot in handle.waiting] == ["late"]


def test_between_minibatches_a_node_copies_its_weights_only_when_a_fresh_snapshot_waits():
    X, y = digits200()  # 20 minibatches; the peer's snapshot is fetched after the 5th
    handle = FakeHandle([peer_snapshot("peer", X, y, 9)], arrivals=[5])
    node = FakeNode(small_net(), handle)
    merges, copies = [], []
    merge, parameters = handle.merge, node.model.parameters

    def counted_merge(*args, **kwargs):
        merges.append(args[0])
        return merge(*args, **kwargs)

    def counted_parameters(phase=None):  # every call copies all the weights
        copies.append(phase)
        return parameters(phase)

    handle.merge, node.model.parameters = counted_merge, counted_parameters
    AsyncMode().train_partition(node, task(), 0, X, y)

    assert len(merges) == 2  # before the partition, then once when the snapshot arrived
    assert len(copies) == 3  # for those two merges, and for the publication
    assert handle.minibatches == 20  # the flag was asked after every minibatch instead
