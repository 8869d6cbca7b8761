"""A node process for the multi-process tests: ``python _worker.py '<json config>'``.

Modes
-----
``average``: start from seeded random weights; once every node of ``peers`` has registered (up to
``start_wait_s``), ``rounds`` times: merge fresh peer snapshots (waiting up to ``wait_s`` for
``min_fresh`` of them, default 1, while a peer still publishes), publish.
``train``: the same loop around ``rbm.RBM.train_partition`` on this node's shard of digits, one
round per epoch.
``intrude``: a process with full write access to the store but the wrong key (``secret``): it runs
a node of its own and, every ``pace_s`` until the honest ``peers`` are done, plants snapshots of
``value`` (signed with its key, and unsigned old-style names) with huge versions in its own and
the honest nodes' folders, registers an unsigned peer entry and overwrites the phase result
``forge_phase``.

After its last round an honest node writes ``<out>/<node>.last.json`` (its last version), then
its final merge waits (up to ``final_wait_s``) until it holds every live peer's last version and
merges them all at once.  It writes ``<out>/<node>.npz`` (final weights) and ``<out>/<node>.json``
(stats), then waits until every other node of ``peers`` has finished (or died) before stopping,
so that stragglers can still fetch its last version.  Prints one JSON line per round on stdout.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

import actors
import storage


def peer_finished(config: dict, runs: storage.RunStore, peer: str) -> bool:
    if os.path.exists(os.path.join(config["out"], f"{peer}.json")):
        return True
    if os.path.exists(os.path.join(config["out"], f"{peer}.last.json")):
        return False  # done publishing, still merging
    info = runs.list_peers().get(peer)
    if info is None:
        return False
    if info.get("status") == "gone":
        return True
    try:
        os.kill(int(info["pid"]), 0)
    except ProcessLookupError:
        return True
    return False


def keep_newest(newest, snapshots):
    """Remember the newest snapshot of each peer (the final merge needs every peer's last one)."""
    for snapshot in snapshots:
        if snapshot.version > getattr(newest.get(snapshot.node), "version", -1):
            newest[snapshot.node] = snapshot


def done_publishing(config: dict, runs: storage.RunStore, peer: str) -> bool:
    """Whether ``peer`` will publish no further version (its last one is out, or it is gone)."""
    return last_version(config, peer) is not None or peer_finished(config, runs, peer)


def wait_for_peers(config: dict, runs: storage.RunStore) -> None:
    """Start round 0 once every named peer has registered (up to ``start_wait_s``), so the rounds overlap
    however slowly the processes started (a node that started last would otherwise find everyone done)."""
    deadline = time.monotonic() + config.get("start_wait_s", 30.0)
    while time.monotonic() < deadline and not set(config["peers"]) <= set(runs.list_peers()) | {config["node"]}:
        time.sleep(0.01)


def merge_waiting(node, config, runs, phase, own, newest):
    """Merge fresh snapshots, polling up to wait_s for ``min_fresh`` (default 1) while some peer still publishes."""
    deadline = time.monotonic() + config["wait_s"]
    merged_total = 0
    while True:
        own, used = node.merge(phase, own)
        keep_newest(newest, used)
        merged_total += len(used)
        if merged_total >= config.get("min_fresh", 1) or time.monotonic() > deadline:
            return own, merged_total
        if all(done_publishing(config, runs, peer) for peer in config["peers"] if peer != config["node"]):
            return own, merged_total  # nothing fresh will come: the final merge collects their last versions
        time.sleep(0.005)


def last_version(config: dict, peer: str) -> int | None:
    """The last version ``peer`` published, once it has said so; None before (or if it died first)."""
    try:
        with open(os.path.join(config["out"], f"{peer}.last.json")) as handle:
            return int(json.load(handle)["version"])
    except FileNotFoundError:
        return None


def final_merge(node, config, runs, phase, own, newest):
    """Merge every peer's last version at once into ``own`` (this node's last version): all nodes then end at
    the mean of everyone's last version (peers that died before their last version are left out).

    Waits (up to ``final_wait_s``) until, for each peer, its last version has been fetched (now, or merged in an
    earlier round: ``newest``), or the peer died first.
    """
    peers = [peer for peer in config["peers"] if peer != config["node"]]
    deadline = time.monotonic() + config.get("final_wait_s", 60.0)
    while True:
        keep_newest(newest, node.fresh_snapshots(phase))

        def has_last(peer):
            last = last_version(config, peer)
            if last is None:
                return peer_finished(config, runs, peer)  # died before its last version: nothing to wait for
            return peer in newest and newest[peer].version >= last

        if all(has_last(peer) for peer in peers):
            break
        if time.monotonic() > deadline:
            print(json.dumps({"node": config["node"], "final_merge": "timed out", "have": sorted(newest)}), flush=True)
            break
        time.sleep(0.005)
    finished = [peer for peer in peers if last_version(config, peer) is not None and peer in newest]
    return actors.merge_snapshots(own, [newest[peer].params for peer in finished])


def intrude(config: dict, store: storage.Store) -> None:
    """Write everything a store writer without the key can write, until the honest peers are done."""
    wrong_key = bytes.fromhex(config["secret"])
    honest_runs = storage.RunStore(store, config["run"], wrong_key)  # reads nothing useful: every entry refuses
    phase, run = config.get("phase", "rbm"), config["run"]
    evil = {"W": np.full(tuple(config["shape"]), config["value"], np.float32),
            "b": np.full(config["shape"][0], config["value"], np.float32)}  # fmt: skip
    forger = storage.WeightStore(store, run, wrong_key)
    data = storage.encode_params(evil)
    with actors.start_node(run, config["node"], store, wrong_key, anti_entropy_interval_s=1.0,
                           peer_refresh_interval_s=0.2) as node:  # fmt: skip
        endpoint = node.endpoint
        for round_index in range(config["rounds"]):
            node.publish(phase, evil, round_index)
            for victim in [config["node"], *config["peers"]]:
                forger.put_version(phase, victim, 10**8 + round_index, evil)
                store.write_bytes(f"runs/{run}/weights/{phase}/{victim}/{10**8 + round_index:08d}-"
                                  f"{storage.sha256_hex(data)}.npz", data)  # fmt: skip
            entry = {"node": "unsigned-peer", "endpoint": endpoint, "host": "elsewhere", "pid": 0, "status": "alive",
                     "last_seen": time.time(), "started": 0.0}  # fmt: skip
            store.write_bytes(f"runs/{run}/peers/unsigned-peer.json", json.dumps(entry).encode())
            forger.put_phase_result(config["forge_phase"], evil)
            print(json.dumps({"node": config["node"], "round": round_index}), flush=True)
            if all(peer_finished(config, honest_runs, peer) for peer in config["peers"]):
                break
            time.sleep(config["pace_s"])
        node.flush()
    with open(os.path.join(config["out"], f"{config['node']}.json"), "w") as handle:
        json.dump({"rounds": round_index + 1}, handle)


def say(name: str, stage: str, **fields) -> None:
    """One JSON line on stdout: where this node is (a test that times out shows the last one)."""
    print(json.dumps({"node": name, "stage": stage, **fields, "t": round(time.time(), 3)}), flush=True)


def main() -> None:
    config = json.loads(sys.argv[1])
    name, phase = config["node"], config.get("phase", "rbm")
    store = storage.open_store(config["store"])
    if config["mode"] == "intrude":
        intrude(config, store)
        return
    secret = bytes.fromhex(config["secret"])
    runs = storage.RunStore(store, config["run"], secret)
    rng = np.random.default_rng(config["seed"])
    model = shard = None
    if config["mode"] == "train":
        import rbm
        from rbm.datasets import load_digits01

        X = load_digits01().X_train
        shard = X[config["shard"] :: config["n_shards"]]
        model = rbm.RBM(**config["model"]).initialize(X.shape[1])
        own = model.parameters(phase)
    else:
        own = {
            "W": (config["scale"] * rng.standard_normal(tuple(config["shape"]))).astype(np.float32),
            "b": (config["scale"] * rng.standard_normal(config["shape"][0])).astype(np.float32),
        }
    node = actors.start_node(config["run"], name, store, secret,
                             anti_entropy_interval_s=config.get("anti_entropy_interval_s", 1.0),
                             peer_refresh_interval_s=config.get("peer_refresh_interval_s", 0.2))  # fmt: skip
    try:
        wait_for_peers(config, runs)
        samples = 0
        newest = {}  # peer -> newest snapshot seen
        for round_index in range(config["rounds"]):
            own, merged = merge_waiting(node, config, runs, phase, own, newest) if round_index else (own, 0)
            if model is not None:
                model.set_parameters(own)
                metrics = model.train_partition(shard, None, phase, rng)
                samples += metrics["samples"]
                own = model.parameters(phase)
            node.publish(phase, own, samples)
            print(json.dumps({"node": name, "round": round_index, "merged": merged, "t": round(time.time(), 3)}), flush=True)
        node.flush()
        last = storage.WeightStore(store, config["run"], secret).list_versions(phase, name)[-1].version
        with open(os.path.join(config["out"], f"{name}.last.json.tmp"), "w") as handle:
            json.dump({"version": last}, handle)
        os.replace(os.path.join(config["out"], f"{name}.last.json.tmp"), os.path.join(config["out"], f"{name}.last.json"))
        say(name, "final merge", version=last)
        own = final_merge(node, config, runs, phase, own, newest)
        say(name, "merged last versions")
        np.savez(os.path.join(config["out"], f"{name}.npz.tmp.npz"), **own)
        os.replace(os.path.join(config["out"], f"{name}.npz.tmp.npz"), os.path.join(config["out"], f"{name}.npz"))
        with open(os.path.join(config["out"], f"{name}.json.tmp"), "w") as handle:
            json.dump(node.stats(), handle)
        os.replace(os.path.join(config["out"], f"{name}.json.tmp"), os.path.join(config["out"], f"{name}.json"))
        deadline = time.monotonic() + config.get("linger_s", 20.0)
        while time.monotonic() < deadline and not all(
            peer_finished(config, runs, peer) for peer in config["peers"] if peer != name
        ):
            time.sleep(0.01)
        say(name, "stopping")
    finally:
        node.stop()
    say(name, "stopped")


if __name__ == "__main__":
    main()
