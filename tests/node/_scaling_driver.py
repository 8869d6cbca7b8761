"""A driver process with its own ``local[8]`` Spark (8 nodes): ``python _scaling_driver.py JSON``.

The suite shares one ``local[2,4]`` session per process, and one process holds one Spark
context, so the 8-node fits of ``test_scaling_nodes.py`` run here.  The JSON names the store
folder, the runs (``"dbn"``, ``"rbm"``), the partitions per node (null: the fit's default) and,
optionally, the nodes (default 8), the seeds of the DBN's runs (default ``[0]``) and more settings of
the fits (e.g. ``{"outer_momentum": 0.0}``) and the DBN's minibatch (``"batch_size"``, default the model's);
one JSON line per run is printed: the 8-node score, the partitions, the factors the nodes trained
with, the nodes merging and the epoch warnings.  The driver's log (warnings) goes to stderr.
"""

from __future__ import annotations

import json
import logging
import sys

import numpy as np

import node
import rbm
from rbm.datasets import load_digits01

NODES = 8
#: DBN(64, 64) on digits, epochs rbm0/rbm1/finetune as in docs/scaling-out.md's table.
DBN_EPOCHS = {"rbm0": 3, "rbm1": 3, "finetune": 10}
RBM_EPOCHS = {"rbm": 5}
KEY = b"scaling-test-key-0123456789abcdef"


def make(kind: str, seed: int = 0, batch_size: int | None = None):
    if kind != "dbn":
        return rbm.RBM(64, random_state=seed)
    return rbm.DBN((64, 64), random_state=seed, **({"batch_size": batch_size} if batch_size else {}))


def main() -> None:
    config = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    nodes = int(config.get("nodes", NODES))
    spark = node.get_spark_session(f"local[{nodes}]", app_name="sparkdbn-scaling-driver")
    split = load_digits01(test_fraction=0.25)
    try:
        for kind, seed in [(kind, seed) for kind in config["runs"] for seed in config.get("seeds", [0])]:
            model = make(kind, seed, config.get("batch_size"))
            epochs = DBN_EPOCHS if kind == "dbn" else RBM_EPOCHS
            store_url = f"{config['store']}/{kind}-{seed}"
            per_node = config.get("partitions_per_node")
            trainer = node.Trainer(spark, store_url, epochs=epochs, partitions=per_node and per_node * nodes,
                                   progress=False, key=KEY, seed=seed, **config.get("settings", {}))
            trainer.fit(model, split.X_train, None if kind == "rbm" else split.y_train)
            score = (model.score(split.X_test, split.y_test) if kind == "dbn"
                     else float(model._reconstruction_mse(split.X_test)))
            run_record = node.open_run(store_url, trainer.run_id_, key=KEY).record
            records = [record for summary in trainer.history_ for record in summary["records"]]
            print(json.dumps({
                "kind": kind, "seed": seed, "score": float(score), "nodes": sorted({r["node"] for r in records}),
                "partitions": run_record["data"]["partitions"],
                "max_scale": max(r["learning_rate_scale"] for r in records),
                "max_nodes_merging": max(r["nodes_merging"] for r in records),
                "warnings": [summary["warning"] for summary in trainer.history_ if summary["warning"]],
                "mean_scale": float(np.mean([r["learning_rate_scale"] for r in records])),
                "recorded": {phase: step.get("scaling") for phase, step in run_record["steps"].items()},
                "settings_rule": run_record["settings"]["scale_rule"]}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
