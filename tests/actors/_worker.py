"""A node process for the multi-process tests: ``python _worker.py '<json config>'``.

Modes
-----
``average``: start from seeded random weights, then ``rounds`` times: merge fresh peer snapshots
(waiting up to ``wait_s`` for ``min_fresh`` of them, default 1, while a peer still runs), publish.
``train``: the same loop around ``rbm.RBM.train_partition`` on this node's shard of digits, one
round per epoch.

Writes ``<out>/<node>.npz`` (final weights) and ``<out>/<node>.json`` (stats), then waits until
every other node of ``peers`` has finished (or died) before stopping, so that stragglers can
still merge its last version.  Prints one JSON line per published round on stdout.
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


def merge_waiting(node, config, runs, phase, own):
    """Merge fresh snapshots, polling up to wait_s for ``min_fresh`` (default 1) while some peer still runs."""
    deadline = time.monotonic() + config["wait_s"]
    merged_total = 0
    while True:
        own, used = node.merge(phase, own)
        merged_total += len(used)
        if merged_total >= config.get("min_fresh", 1) or time.monotonic() > deadline:
            return own, merged_total
        if all(peer_finished(config, runs, peer) for peer in config["peers"] if peer != config["node"]):
            return own, merged_total
        time.sleep(0.005)


def main() -> None:
    config = json.loads(sys.argv[1])
    name, phase = config["node"], config.get("phase", "rbm")
    store = storage.open_store(config["store"])
    runs = storage.RunStore(store, config["run"])
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
    node = actors.start_node(config["run"], name, store, bytes.fromhex(config["secret"]),
                             anti_entropy_interval_s=config.get("anti_entropy_interval_s", 1.0),
                             peer_refresh_interval_s=config.get("peer_refresh_interval_s", 0.2))  # fmt: skip
    try:
        samples = 0
        for round_index in range(config["rounds"]):
            own, merged = merge_waiting(node, config, runs, phase, own) if round_index else (own, 0)
            if model is not None:
                model.set_parameters(own)
                metrics = model.train_partition(shard, None, phase, rng)
                samples += metrics["samples"]
                own = model.parameters(phase)
            node.publish(phase, own, samples)
            print(json.dumps({"node": name, "round": round_index, "merged": merged, "t": round(time.time(), 3)}), flush=True)
        node.flush()
        # One last merge so everyone ends near the same point, then report.
        own, _ = node.merge(phase, own)
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
    finally:
        node.stop()


if __name__ == "__main__":
    main()
