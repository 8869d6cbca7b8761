"""A driver on a session whose ``spark.default.parallelism`` names more tasks than run at once:
``python _shapes_driver.py JSON`` (see ``test_cluster_shapes.py``).

The JSON names the store URL, the master and ``spark.default.parallelism``; the driver fits the crash
harness's small DBN in ``sync`` mode with the fit's default node count and prints one JSON line: the
session's default parallelism, the nodes of each phase's last epoch and the held-out accuracy.
With ``"fair": true`` the session schedules FAIR and two threads each fit their own run, in a pool of
their own; the line holds each run's accuracy, or its error.
"""

from __future__ import annotations

import json
import sys
import threading

from crash_store import harness_model

import node
from rbm.datasets import load_digits01


def fit_side_by_side(spark, store: str) -> dict:
    """Two sync fits at once, each in a FAIR pool of its own: each run's accuracy, or its error."""
    digits, results = load_digits01(), {}

    def fit(run: str) -> None:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", run)
        try:
            model = node.Trainer(spark, store, run_id=run, mode="sync", epochs={"rbm0": 2, "finetune": 4},
                                 barrier_timeout_s=20.0, progress=False).fit(harness_model(), digits.X_train,
                                                                             digits.y_train)
            results[run] = model.score(digits.X_test, digits.y_test)
        except Exception as error:  # reported in the line the test reads
            results[run] = f"{type(error).__name__}: {error}"[:2000]

    threads = [threading.Thread(target=fit, args=(run,)) for run in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def main() -> None:
    config = json.loads(sys.argv[1])
    conf = {"spark.ui.enabled": "false", "spark.default.parallelism": str(config["parallelism"])}
    if config.get("fair"):
        conf["spark.scheduler.mode"] = "FAIR"
    spark = node.get_spark_session(config["master"], conf=conf)
    try:
        if config.get("fair"):
            print(json.dumps(fit_side_by_side(spark, config["store"])), flush=True)
            return
        digits = load_digits01()
        model = node.Trainer(spark, config["store"], run_id="shapes", mode="sync", epochs={"rbm0": 2, "finetune": 6},
                             barrier_timeout_s=30.0, progress=False).fit(harness_model(), digits.X_train,
                                                                         digits.y_train)
        record = node.open_run(config["store"], "shapes").record
        print(json.dumps({"default_parallelism": spark.sparkContext.defaultParallelism,
                          "nodes": {phase: step["nodes"] for phase, step in record["steps"].items()},
                          "accuracy": model.score(digits.X_test, digits.y_test)}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
