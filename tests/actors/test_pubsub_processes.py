"""Real node processes talking over real sockets on 127.0.0.1 through a real store."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

import actors
import storage

pytestmark = pytest.mark.slow

SECRET = "5eed" * 8
KEY = bytes.fromhex(SECRET)


def average_config(store, node, peers, seed, **changes):
    config = dict(mode="average", store=store.url, run="gossip", node=node, peers=peers, secret=SECRET, seed=seed,
                  shape=[64, 32], scale=1.0, rounds=30, wait_s=3.0)  # fmt: skip
    config.update(changes)
    return config


def spread(results):
    return max(np.abs(params["W"] - results[0]["W"]).max() for params in results)


def last_published(store, names):
    """Each node's newest version in the store (what the others merge last)."""
    weights = storage.WeightStore(store, "gossip", KEY)
    return [weights.get_version(weights.list_versions("rbm", name)[-1]) for name in names]


def initial_weights(seeds):
    return [np.random.default_rng(seed).standard_normal((64, 32)).astype(np.float32) for seed in seeds]


def assert_consensus_of(results, last, initial):
    """Everyone ends at the mean of everyone's last version, a point inside the hull of the initial weights."""
    mean = np.mean([params["W"].astype(np.float64) for params in last], axis=0)
    for params in results:
        np.testing.assert_allclose(params["W"], mean, rtol=0, atol=1e-5)
    consensus = results[0]["W"]
    assert np.all(consensus >= np.min(initial, axis=0) - 1e-3) and np.all(consensus <= np.max(initial, axis=0) + 1e-3)


def test_four_processes_from_different_weights_reach_consensus_without_a_central_one(store, processes):
    names = [f"node-{index}" for index in range(4)]
    initial = initial_weights(range(4))
    for seed, name in enumerate(names):
        processes.start(average_config(store, name, names, seed))
    for name in names:
        assert processes.wait(name) == 0, processes.log(name)
    results, stats = zip(*(processes.result(name) for name in names))
    initial_spread = max(np.abs(w - initial[0]).max() for w in initial)
    assert initial_spread > 2.0
    # Gossip alone brought the nodes together: their last published versions are far closer than their
    # first ones (without merging they would stay 1x apart; how close depends on how the processes were
    # scheduled, hence the wide margin) ...
    last = last_published(store, names)
    assert spread(last) < 0.2 * initial_spread
    # ... and the final round, which waits for every peer's last version, leaves them all at one point.
    assert spread(results) < 1e-3 * initial_spread
    assert_consensus_of(results, last, initial)
    # Symmetric roles: every node published (versions queued faster than written are coalesced) and merged.
    for stat in stats:
        assert stat["published"] + stat.get("publish_coalesced", 0) == 30 and stat["merged"] >= 10
        assert stat["peers_known"] == 3
        assert all(stat[f"dropped_{reason}"] == 0 for reason in ("bad_signature", "malformed", "wrong_run", "corrupt"))


def test_a_late_node_catches_up_from_the_store_without_hearing_any_announcement(store, processes):
    early = ["early-0", "early-1"]
    for seed, name in enumerate(early):
        processes.start(average_config(store, name, early, seed, rounds=3, anti_entropy_interval_s=60.0))
    for name in early:
        assert processes.wait(name) == 0, processes.log(name)
    weights = storage.WeightStore(store, "gossip", KEY)
    newest = {name: weights.get_version(weights.newest_per_node("rbm")[name]) for name in early}
    own = {"W": np.zeros((64, 32), np.float32), "b": np.zeros(64, np.float32)}
    found = []

    with actors.start_node("gossip", "late", store, KEY, anti_entropy_interval_s=60.0) as late:

        def collect():
            found.extend(late.fresh_snapshots("rbm"))
            return len(found) >= 2

        processes.poll(collect, 10.0, "the late node to find both snapshots in the store")
        stats = late.stats()
    assert sorted(snapshot.node for snapshot in found) == early
    for snapshot in found:
        np.testing.assert_array_equal(snapshot.params["W"], newest[snapshot.node]["W"])
    merged = actors.merge_snapshots(own, [snapshot.params for snapshot in found])
    np.testing.assert_allclose(merged["W"], (newest["early-0"]["W"] + newest["early-1"]["W"]) / 3, rtol=1e-5, atol=1e-6)
    assert stats["received"] == 0 and stats["discovered"] == 2 and stats["fetched"] == 2


def test_a_node_killed_with_sigkill_does_not_stop_or_stall_the_others(store, processes):
    names = ["steady-0", "steady-1", "doomed"]
    for seed, name in enumerate(names):
        rounds = 400 if name == "doomed" else 25
        processes.start(average_config(store, name, names, seed, rounds=rounds, wait_s=2.0))
    weights = storage.WeightStore(store, "gossip", KEY)
    processes.poll(lambda: len(weights.list_versions("rbm", "doomed")) >= 2, 30.0, "the doomed node to publish twice")
    processes.started["doomed"].send_signal(signal.SIGKILL)
    assert processes.wait("doomed") == -signal.SIGKILL
    for name in names[:2]:
        assert processes.wait(name) == 0, processes.log(name)
    (first, first_stats), (second, _) = processes.result("steady-0"), processes.result("steady-1")
    assert first_stats["published"] + first_stats["publish_coalesced"] == 25  # it kept going to the end
    assert spread([first, second]) < 1e-2


def test_an_intruder_with_store_access_but_a_wrong_key_changes_nothing(store, processes):
    names = [f"honest-{index}" for index in range(3)]
    initial = initial_weights(range(3))
    weights = storage.WeightStore(store, "gossip", KEY)
    before = weights.put_phase_result("rbm-before", {"W": initial[0]})  # a finished phase's result
    # The intruder goes first (and keeps going until the honest nodes are done): whatever it plants is there
    # from the honest nodes' first look at the store on.
    processes.start(dict(average_config(store, "intruder", names, 99, rounds=2000), mode="intrude",
                         secret="bad0" * 8, value=100.0, pace_s=0.02, forge_phase="rbm-before"))  # fmt: skip
    processes.poll(lambda: '"round": 1' in processes.log("intruder"), 60.0, "the intruder's first two rounds")
    for seed, name in enumerate(names):
        processes.start(average_config(store, name, names, seed, rounds=15))
    for name in [*names, "intruder"]:
        assert processes.wait(name, timeout_s=120) == 0, processes.log(name)
    results, stats = zip(*(processes.result(name) for name in names))
    # The honest nodes agree on the mean of their own last versions, far from the intruder's 100.
    last = last_published(store, names)
    assert_consensus_of(results, last, initial)
    assert np.abs(results[0]["W"]).max() < 10.0
    # The intruder did write all it could: it published, planted files in every folder, registered itself.
    assert json.loads((processes.out / "intruder.json").read_text())["rounds"] >= 2
    planted = store.list("runs/gossip/weights/rbm/honest-0")
    assert sum(name.startswith("1000000") for name in planted) >= 4
    assert {"intruder", "unsigned-peer"} <= {name[: -len(".json")] for name in store.list("runs/gossip/peers")}
    # What a driver would consolidate and resume from is the honest nodes' alone.
    consolidation = weights.consolidate("rbm")
    assert [ref.node for ref in consolidation.refs] == names
    np.testing.assert_allclose(consolidation.params["W"], np.mean([p["W"].astype(np.float64) for p in last], axis=0),
                               rtol=0, atol=1e-6)  # fmt: skip
    np.testing.assert_array_equal(weights.get_phase_result("rbm-before", before)["W"], initial[0])  # never the forgery
    # Each honest node refused what it saw, and never even subscribed to the intruder.
    for stat in stats:
        assert stat["dropped_unauthenticated"] >= 2 and stat["refused_peer_entries"] >= 2, stat
        assert stat["peers_known"] == 2 and stat["dropped_bad_signature"] == 0, stat


def test_entries_of_the_wrong_kind_planted_in_the_registry_and_the_weights_neither_block_nor_stop_nodes(store,
                                                                                                        processes):
    names = ["honest-0", "honest-1"]
    run = Path(store.root) / "runs" / "gossip"
    (run / "peers").mkdir(parents=True)
    os.mkfifo(run / "peers" / "fifo.json")  # a reader that opened it would wait for a writer forever
    (run / "peers" / "folder.json").mkdir()
    (run / "weights" / "rbm").mkdir(parents=True)
    (run / "weights" / "rbm" / "planted").write_bytes(b"a file where a node's folder would be")
    for seed, name in enumerate(names):
        processes.start(average_config(store, name, names, seed, rounds=10))
    for name in names:
        assert processes.wait(name, timeout_s=120) == 0, processes.log(name)
    results, stats = zip(*(processes.result(name) for name in names))
    assert_consensus_of(results, last_published(store, names), initial_weights(range(2)))
    for stat in stats:  # skipped and counted; the store listings that catch a node up never failed on them
        assert stat["refused_peer_entries"] == 2 and stat["dropped_unauthenticated"] == 1, stat
        assert stat["store_errors"] == 0 and stat["anti_entropy_rounds"] >= 1, stat
