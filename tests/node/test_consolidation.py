"""The one consolidation rule, where the driver and a node use it.

* A phase's result is the element-wise mean, accumulated in float64, of the newest verified
  snapshot of each node that trained the phase's last epoch -- not the first node's snapshot,
  not an older version, not a node that stopped training earlier.
* A fresh node entering a phase that already has snapshots starts from their mean, not from the
  phase's start parameters.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import node
import rbm
import storage
from node._contract import NodeConfig
from node.executor._node import ExecutorNode


KEY = b"consolidation-test-key-0123456789"


def float64_mean(snapshots: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {name: np.mean([s[name].astype(np.float64) for s in snapshots], axis=0).astype(snapshots[0][name].dtype)
            for name in snapshots[0]}


@pytest.mark.slow
def test_a_phase_result_is_the_float64_mean_of_the_newest_snapshots_of_the_last_epochs_nodes(spark, digits,
                                                                                              tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    store = storage.open_store(store_url)
    epochs = {"rbm0": 2, "finetune": 1}

    def plant_a_ghost(summary: dict) -> None:
        # A node that stopped training before the last epoch: its snapshot is newer than anyone's
        # (the highest version) but must not count.
        if summary["phase"] == "rbm0" and summary["epoch"] == epochs["rbm0"] - 1:
            key = node.resolve_run_key(summary["run"], store_url, create=False).key
            weights = storage.WeightStore(store, summary["run"], key)  # a key holder's snapshot
            ghost = {name: np.full_like(value, 50.0) for name, value in
                     weights.consolidate("rbm0", summary["nodes"]).params.items()}
            weights.put_version("rbm0", "ghost-node", 10**6, ghost)

    # Partitions long enough (tens of ms) that both nodes train the last epoch: async starts an epoch's job
    # before the one before ends, and on partitions of a few ms one worker may run both of its tasks.  On a
    # loaded machine one worker still may (a load of 11 on 2 cores is enough): then the rule has nothing
    # to show, and the fit is tried again, at most three times.
    X, y = np.tile(digits.X_train, (8, 1)), np.tile(digits.y_train, 8)
    for attempt in range(3):
        run_id = f"mean-{attempt}"
        model = rbm.DBN(hidden_layer_sizes=(32,), batch_size=10, random_state=0)
        node.Trainer(spark, store_url, run_id=run_id, epochs=epochs, partitions=4, progress=False,
                     on_epoch=plant_a_ghost).fit(model, X, y)
        run = node.open_run(store_url, run_id)
        weights, record = run.weights, run.record
        nodes = record["steps"]["rbm0"]["nodes"]
        assert "ghost-node" not in nodes
        if len(nodes) == 2:
            break
    assert len(nodes) == 2, f"one worker trained the last epoch alone in all three fits: {nodes}"
    newest = [weights.newest_verified("rbm0", name)[1] for name in nodes]
    assert not all(np.array_equal(newest[0][name], newest[1][name]) for name in newest[0])  # two different replicas
    result = weights.get_phase_result("rbm0")
    for name, expected in float64_mean(newest).items():
        assert result[name].dtype == expected.dtype
        np.testing.assert_array_equal(result[name], expected)


def a_node_config(store_url: str, spec: dict) -> NodeConfig:
    return NodeConfig(run="start", fit_id="f1", store_url=store_url, store_retry_timeout_s=5.0, key=KEY,
                      spec=spec, feature_shape=(16,), classes=None, seed=0, fanout=None, merge_alpha=None,
                      keep_versions=3, anti_entropy_interval_s=60.0, peer_refresh_interval_s=60.0,
                      flush_timeout_s=10.0)


def an_rbm_phase_in_a_store(tmp_path):
    """The store's URL, an RBM template, its parameters of phase ``rbm`` (the start) and the run's weights."""
    store_url = "file://" + str(tmp_path / "store")
    template = rbm.RBM(n_components=8, random_state=0).initialize(16)
    return store_url, template, template.parameters("rbm"), storage.WeightStore(storage.open_store(store_url),
                                                                                 "start", KEY)


def perturbed(params: dict, rng: np.random.Generator) -> dict:
    """``params`` plus standard normal noise, in their own dtypes."""
    return {name: (value + rng.standard_normal(value.shape)).astype(value.dtype) for name, value in params.items()}


def test_a_fresh_node_enters_a_phase_at_the_mean_of_the_snapshots_already_stored(tmp_path):
    store_url, template, start, weights = an_rbm_phase_in_a_store(tmp_path)
    rng = np.random.default_rng(0)
    snapshots = []
    for index in range(3):
        params = perturbed(start, rng)
        weights.put_version("rbm", f"peer-{index}", 1, {name: value - 1 for name, value in params.items()})
        weights.put_version("rbm", f"peer-{index}", 2, params)  # the newest counts, not the first
        snapshots.append(params)
    payload = storage.encode_params(start, "start")

    fresh = ExecutorNode(a_node_config(store_url, template.to_spec())).start()
    try:
        assert fresh.enter_phase("rbm", "digest", lambda: payload) == "store(3 nodes)"
        for name, expected in float64_mean(snapshots).items():
            np.testing.assert_array_equal(fresh.model.parameters("rbm")[name], expected)
    finally:
        fresh.stop()


def test_a_node_entering_mid_phase_starts_from_the_last_epochs_nodes_and_merges_no_stored_snapshot_again(tmp_path):
    # Where Python workers do not outlive a task every epoch's nodes are new: the stored snapshots of
    # the nodes before them are older than the last epoch's, and already in the consolidation.
    store_url, template, start, weights = an_rbm_phase_in_a_store(tmp_path)
    rng = np.random.default_rng(1)
    snapshots = {}
    for name in ("epoch0-a", "epoch0-b", "epoch1-a", "epoch1-b"):
        snapshots[name] = perturbed(start, rng)
        weights.put_version("rbm", name, 1, snapshots[name])
    payload = storage.encode_params(start, "start")

    fresh = ExecutorNode(a_node_config(store_url, template.to_spec())).start()
    try:
        assert fresh.enter_phase("rbm", "digest", lambda: payload, ("epoch1-a", "epoch1-b")) == "store(2 nodes)"
        for name, expected in float64_mean([snapshots["epoch1-a"], snapshots["epoch1-b"]]).items():
            np.testing.assert_array_equal(fresh.model.parameters("rbm")[name], expected)
        fresh.handle._maintenance.anti_entropy()  # a store listing: it offers all four again
        assert fresh.handle.fresh_snapshots("rbm", wait_s=1.0) == []
        weights.put_version("rbm", "epoch1-b", 2, snapshots["epoch0-a"])  # what comes after the start is fresh
        fresh.handle._maintenance.anti_entropy()
        deadline = time.monotonic() + 10.0
        found = []
        while not found and time.monotonic() < deadline:
            found = fresh.handle.fresh_snapshots("rbm", wait_s=1.0)
        assert [(snapshot.node, snapshot.version) for snapshot in found] == [("epoch1-b", 2)]
    finally:
        fresh.stop()

    gone = ExecutorNode(a_node_config(store_url, template.to_spec())).start()
    try:  # named nodes that left nothing usable: every node's mean, as without names
        assert gone.enter_phase("rbm", "digest", lambda: payload, ("never-ran",)) == "store(4 nodes)"
    finally:
        gone.stop()


def test_a_resumed_fits_node_enters_where_the_record_says_the_epoch_ended_not_at_newer_snapshots(tmp_path):
    # An async fit stopped at an epoch's end: its next epoch's job had written version 3 of a and 2 of b, which
    # the record does not count (it names a's version 2 and b's 1); the resumed fit trains that epoch again.
    store_url, template, start, weights = an_rbm_phase_in_a_store(tmp_path)
    rng = np.random.default_rng(2)
    snapshots = {}
    for name, version in (("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2)):
        snapshots[name, version] = perturbed(start, rng)
        weights.put_version("rbm", name, version, snapshots[name, version])
    payload = storage.encode_params(start, "start")

    def entered(versions: dict) -> tuple[str, dict]:
        fresh = ExecutorNode(a_node_config(store_url, template.to_spec())).start()
        try:
            return fresh.enter_phase("rbm", "digest", lambda: payload, ("a", "b"), versions), \
                fresh.model.parameters("rbm")
        finally:
            fresh.stop()

    origin, params = entered({"a": 2, "b": 1})
    assert origin == "store(2 nodes)"
    for name, expected in float64_mean([snapshots["a", 2], snapshots["b", 1]]).items():
        np.testing.assert_array_equal(params[name], expected)
    weights.store.delete(weights.list_versions("rbm", "b")[0].path)  # b's recorded version is gone: the newest
    origin, params = entered({"a": 2, "b": 1})
    for name, expected in float64_mean([snapshots["a", 3], snapshots["b", 2]]).items():
        np.testing.assert_array_equal(params[name], expected)


def test_a_node_entering_a_phase_nobody_trained_yet_starts_from_the_broadcast_start(tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    template = rbm.RBM(n_components=8, random_state=0).initialize(16)
    start = {name: value + 0.25 for name, value in template.parameters("rbm").items()}
    fresh = ExecutorNode(a_node_config(store_url, template.to_spec())).start()
    try:
        assert fresh.enter_phase("rbm", "digest", lambda: storage.encode_params(start, "start")) == "start"
        for name, expected in start.items():
            np.testing.assert_array_equal(fresh.model.parameters("rbm")[name], expected)
    finally:
        fresh.stop()
