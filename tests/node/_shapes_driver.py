"""A driver on a session whose ``spark.default.parallelism`` names more tasks than run at once:
``python _shapes_driver.py JSON`` (see ``test_cluster_shapes.py``).

The JSON names the store URL, the master and ``spark.default.parallelism``; the driver fits the crash
harness's small DBN in ``sync`` mode with the fit's default node count and prints one JSON line: the
session's default parallelism, the nodes of each phase's last epoch and the held-out accuracy.
"""

from __future__ import annotations

import json
import sys

from crash_store import harness_model

import node
from rbm.datasets import load_digits01


def main() -> None:
    config = json.loads(sys.argv[1])
    spark = node.get_spark_session(config["master"], conf={"spark.ui.enabled": "false",
                                                           "spark.default.parallelism": str(config["parallelism"])})
    try:
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
