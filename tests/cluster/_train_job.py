"""The multi-host training driver: runs inside the virtual cluster's driver host (see test_hosts.py).

Usage: ``_train_job.py PLAN_JSON``.  The plan names the Spark conf, the store URL, a folder for
results, and a list of fits ``{"name", "run_id", "model": "dbn"|"rbm", "settings": {...}}``.  Before
fit ``i`` the driver waits for ``go-<i>`` in the folder when the fit says ``"wait": true``; after
each epoch it writes ``progress-<i>.json`` (phase, epoch, wall time) so the test can time its
faults; after each fit ``fit-<i>.json``: the epoch summaries, the held-out accuracy, or the
error the fit raised.  The Spark session is started once for all fits.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path

from pyspark.sql import SparkSession

import node
import rbm
from rbm.datasets import load_digits01

#: The small DBN of tests/node (conftest.DBN_SETTINGS).
DBN_SETTINGS = dict(hidden_layer_sizes=(100, 100), batch_size=10, pretrain_learning_rate=0.2,
                    finetune_learning_rate=0.2, finetune_dropout=0.0, random_state=0)
KEY = b"virtual-cluster-run-key-0123456789"


def make_model(kind: str):
    if kind == "dbn":
        return rbm.DBN(**DBN_SETTINGS)
    return rbm.RBM(n_components=16, batch_size=20, learning_rate=0.05, n_iter=1, random_state=0)


def write_json(path: Path, value) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(value, default=str))
    os.replace(temporary, path)


def plain_summary(summary: dict) -> dict:
    keep = ("phase", "epoch", "samples", "loss", "wall_s", "samples_per_s", "merges", "merges_by_node", "nodes",
            "reachability_warning", "records")
    return {key: summary.get(key) for key in keep}


def run_fit(spark, plan: dict, index: int, fit: dict, folder: Path) -> dict:
    X, y, X_test, y_test = load_digits01()
    if fit.get("wait"):
        while not (folder / f"go-{index}").exists():
            time.sleep(0.1)  # the test's signal: polled, the fault it arranges is ready
    history: list[dict] = []
    started = time.time()

    def on_epoch(summary: dict) -> None:
        history.append(plain_summary(summary))
        write_json(folder / f"progress-{index}.json", {"phase": summary["phase"], "epoch": summary["epoch"],
                                                       "epochs_seen": len(history), "time": time.time()})

    result: dict = {"name": fit["name"], "run_id": fit["run_id"], "started": started}
    try:
        trainer = node.Trainer(spark, plan["store_url"], run_id=fit["run_id"], progress=False, on_epoch=on_epoch,
                               key=KEY, **fit["settings"])
        model = trainer.fit(make_model(fit["model"]), X, y if fit["model"] == "dbn" else None)
        if fit["model"] == "dbn":
            result["accuracy"] = float(model.score(X_test, y_test))
        result["status"] = "done"
    except Exception as error:  # reported to the test, which judges the message
        result["status"] = "failed"
        result["error_type"] = type(error).__name__
        result["error"] = str(error)
        result["traceback"] = traceback.format_exc()[-4000:]
    result["wall_s"] = time.time() - started
    result["history"] = history
    write_json(folder / f"fit-{index}.json", result)
    return result


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[0]).read_text())
    folder = Path(plan["folder"])
    builder = SparkSession.builder.appName("sparkdbn-hosts")
    for key, value in plan["conf"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    write_json(folder / "session.json", {"driver": socket.gethostname(), "master": spark.sparkContext.master})
    try:
        for index, fit in enumerate(plan["fits"]):
            run_fit(spark, plan, index, fit, folder)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
