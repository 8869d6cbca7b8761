"""The outer step's state on a node: anchored where the node enters a phase, its momentum carried
through the store to a restarted or new node, never mixed across phases or with the weights, and,
where the step is the rule's, taken only in the phases the model takes it in (a DBN's fine-tuning,
not an RBM's contrastive divergence)."""

from __future__ import annotations

import numpy as np
import pytest

import rbm
import storage
from node._contract import NodeConfig
from node.executor._node import ExecutorNode
from support.numerics import assert_within, unit_roundoff

KEY = b"outer-state-test-key-0123456789ab"
ETA, MU = 0.7, 0.9


def a_node_config(store_url: str, spec: dict, *, nodes: int = 2, eta: float = ETA, mu: float = MU,
                  node_batch_size: int = 0, by_rule: bool = False) -> NodeConfig:
    classes = (0, 1) if spec["kind"] == "dbn" else None
    return NodeConfig(run="outer", fit_id="f1", store_url=store_url, store_retry_timeout_s=5.0, key=KEY,
                      spec=spec, feature_shape=(16,), classes=classes, seed=0, fanout=None, merge_alpha=None,
                      keep_versions=3, anti_entropy_interval_s=60.0, peer_refresh_interval_s=60.0,
                      flush_timeout_s=10.0, nodes=nodes, outer_learning_rate=eta, outer_momentum=mu,
                      outer_by_rule=by_rule, node_batch_size=node_batch_size)


def shifted(params: dict, by: dict) -> dict:
    return {name: (value + by[name]).astype(value.dtype) for name, value in params.items()}


def roundoff(*arrays: np.ndarray) -> np.ndarray:
    """Six float32 operations on terms of at most the arrays' summed magnitude."""
    return 6 * unit_roundoff(np.float32) * sum(np.abs(a) for a in arrays)


@pytest.fixture
def an_rbm_run(tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    template = rbm.RBM(n_components=8, random_state=0).initialize(16)
    start = template.parameters("rbm")
    return store_url, template.to_spec(), start, storage.encode_params(start, "start")


def test_the_outer_momentum_survives_a_restart_through_the_store(an_rbm_run):
    store_url, spec, start, payload = an_rbm_run
    rng = np.random.default_rng(0)
    change = {name: rng.standard_normal(value.shape).astype(np.float32) for name, value in start.items()}
    first = ExecutorNode(a_node_config(store_url, spec)).start()
    try:
        assert first.enter_phase("rbm", "digest", lambda: payload) == "start"
        first.model.set_parameters(shifted(start, change))  # what merging and training changed: w = x + c
        first.outer_step("rbm")
        # d = -c, v = -c, x' = x - eta (1 + mu) (-c) = x + 1.33 c.
        for name in start:
            expected = start[name] + ETA * (1 + MU) * change[name]
            assert_within(first.model.parameters("rbm")[name], expected, roundoff(start[name], 3 * change[name]), name)
        momentum = {name: value.copy() for name, value in first.outer.momentum.items()}
        first.save_outer("rbm")
        first.weights.put_version("rbm", first.name, 1, first.model.parameters("rbm"))  # its snapshot, as published
        published = first.model.parameters("rbm")
    finally:
        first.stop()

    restarted = ExecutorNode(a_node_config(store_url, spec)).start()  # a new process of the run, same phase
    try:
        assert restarted.enter_phase("rbm", "digest", lambda: payload, (first.name,)) == "store(1 nodes)"
        for name in start:  # anchored at the stored snapshot, with the stored momentum exactly
            np.testing.assert_array_equal(restarted.outer.anchor[name], published[name])
            np.testing.assert_array_equal(restarted.outer.momentum[name], momentum[name])
        restarted.model.set_parameters(published)  # nothing changed since: the momentum alone moves it
        restarted.outer_step("rbm")
        # d = 0, v = mu v, x' = x - eta mu (mu v) = x - 0.567 v; with the momentum lost it would not move.
        for name in start:
            expected = published[name] - ETA * MU * MU * momentum[name]
            assert_within(restarted.model.parameters("rbm")[name], expected,
                          roundoff(published[name], momentum[name]), name)
            assert not np.allclose(restarted.model.parameters("rbm")[name], published[name])
    finally:
        restarted.stop()


def test_a_node_of_a_mode_that_does_not_join_from_the_store_starts_from_the_jobs_start(an_rbm_run):
    # A sync node that entered its barrier stage a moment after the others took the mean of their first
    # snapshots ("store(2 nodes)"); a sync node starts where the job does, or where the record names.
    store_url, spec, start, payload = an_rbm_run
    weights = storage.WeightStore(storage.open_store(store_url), "outer", KEY)
    moved = shifted(start, {name: np.ones_like(value) for name, value in start.items()})
    weights.put_version("rbm", "peer-a", 4, moved)
    late = ExecutorNode(a_node_config(store_url, spec)).start()
    try:
        assert late.enter_phase("rbm", "digest", lambda: payload, ("peer-a",), join=False) == "start"
        for name, value in start.items():
            np.testing.assert_array_equal(late.model.parameters("rbm")[name], value)
        # where the record names the snapshots a phase's last epoch ended with, it starts from their mean
        assert late.enter_phase("rbm", "digest-2", lambda: payload, ("peer-a",), {"peer-a": 4}, join=False) \
            == "store(1 nodes)"
        for name, value in moved.items():
            np.testing.assert_array_equal(late.model.parameters("rbm")[name], value)
    finally:
        late.stop()


def test_the_momentum_is_stored_apart_from_the_weights_and_a_phase_nobody_trained_starts_without_one(an_rbm_run):
    store_url, spec, start, payload = an_rbm_run
    weights = storage.WeightStore(storage.open_store(store_url), "outer", KEY)
    weights.put_outer_momentum("rbm", "peer-a", 3, {name: np.ones_like(value) for name, value in start.items()})
    assert weights.list_nodes("rbm") == []  # no weight snapshot: the consolidation never sees a momentum
    with pytest.raises(storage.NoUsableSnapshotError):
        weights.consolidate("rbm")
    fresh = ExecutorNode(a_node_config(store_url, spec)).start()
    try:  # no snapshot of the phase: it starts at the phase's start, with the run's stored momentum
        assert fresh.enter_phase("rbm", "digest", lambda: payload) == "start"
        for name, value in start.items():
            np.testing.assert_array_equal(fresh.outer.momentum[name], np.ones_like(value))
    finally:
        fresh.stop()
    other = storage.WeightStore(storage.open_store(store_url), "outer", b"another-key-of-32-bytes-012345678")
    assert other.outer_momentum("rbm") is None  # written under another key: never read


def test_a_node_of_a_one_node_fit_with_a_split_minibatch_or_with_the_outer_step_off_keeps_its_weights(an_rbm_run):
    store_url, spec, start, payload = an_rbm_run
    change = {name: np.full_like(value, 0.5) for name, value in start.items()}
    for config in (a_node_config(store_url, spec, nodes=1), a_node_config(store_url, spec, eta=1.0, mu=0.0),
                   a_node_config(store_url, spec, node_batch_size=3)):
        plain = ExecutorNode(config).start()
        try:
            plain.enter_phase("rbm", "digest", lambda: payload)
            plain.model.set_parameters(shifted(start, change))
            plain.outer_step("rbm")
            plain.save_outer("rbm")
            assert plain.outer is None and not plain.outer_enabled
            for name, value in shifted(start, change).items():
                np.testing.assert_array_equal(plain.model.parameters("rbm")[name], value)
        finally:
            plain.stop()
    assert storage.WeightStore(storage.open_store(store_url), "outer", KEY).outer_momentum("rbm") is None


@pytest.mark.parametrize("make, phase, by_rule, steps", [
    (lambda: rbm.RBM(n_components=8, random_state=0).initialize(16), "rbm", True, False),
    (lambda: rbm.DBN((8,), random_state=0).initialize(16, 2), "rbm0", True, False),
    (lambda: rbm.DBN((8,), random_state=0).initialize(16, 2), "finetune", True, True),
    (lambda: rbm.RBM(n_components=8, random_state=0).initialize(16), "rbm", False, True),  # the settings' step
    (lambda: rbm.DBN((8,), random_state=0).initialize(16, 2), "rbm0", False, True),
])
def test_the_rules_step_is_taken_in_the_phases_the_model_takes_it_in_the_settings_step_in_every_phase(
        tmp_path, make, phase, by_rule, steps):
    template = make()
    store_url, spec = "file://" + str(tmp_path / "store"), template.to_spec()
    payload = storage.encode_params(template.parameters(), "start")
    start = template.parameters(phase)
    trained = shifted(start, {name: np.full_like(value, 0.5) for name, value in start.items()})
    node = ExecutorNode(a_node_config(store_url, spec, by_rule=by_rule)).start()
    try:
        node.enter_phase(phase, "digest", lambda: payload)
        assert node.outer_enabled is steps and (node.outer is not None) is steps
        node.model.set_parameters(trained)
        node.outer_step(phase)
        # With the step: x + eta (1 + mu) 0.5 = x + 0.665; without, what training made: x + 0.5.
        for name, value in start.items():
            expected = value + (ETA * (1 + MU) * 0.5 if steps else 0.5)
            assert_within(node.model.parameters(phase)[name], expected, roundoff(value, np.full_like(value, 2.0)),
                          name)
    finally:
        node.stop()


@pytest.mark.parametrize("field, value", [("outer_learning_rate", 0.0), ("outer_learning_rate", 2.5),
                                          ("outer_momentum", 1.0), ("outer_momentum", -0.5)])
def test_outer_settings_outside_the_stable_range_are_refused_naming_the_setting(field, value):
    import node

    with pytest.raises(ValueError, match=field):
        node.TrainingSettings(**{field: value}).validate()
