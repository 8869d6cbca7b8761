"""A driver on a Spark whose executors have GPUs -- as far as Spark knows: ``python _gpu_cluster_driver.py JSON``.

Spark trusts a GPU discovery script, so a script printing addresses hands GPUs to the tasks of a
machine that has none.  The session is ``local-cluster[1,2,1024]`` (one executor, two task slots)
with ``node.gpu_spark_conf(2, script)``: two GPUs per executor, one per task.  Its own process,
because the suite's shared session is ``local[2,4]`` and a process holds one SparkContext.

The JSON names the store URL and the discovery script.  It fits a small DBN with
``device="auto"`` (cupy sees no GPU here: the nodes compute on their CPUs) and then with
``device="gpu"`` (the probe finds no usable GPU), and prints one JSON line per fit: the record, the
metrics' devices, the error, and every task Spark ran for the fit (from its status tracker).
"""

from __future__ import annotations

import json
import sys
import traceback

import node
import rbm
from rbm.datasets import load_digits01


def spark_tasks(sc, first_job: int) -> dict:
    """Tasks of the jobs from ``first_job`` on: how many ran, how many failed (each retry is a task attempt)."""
    tracker, totals, job = sc.statusTracker(), {"jobs": 0, "tasks": 0, "failed_tasks": 0}, first_job
    while (info := tracker.getJobInfo(job)) is not None:
        totals["jobs"] += 1
        for stage in filter(None, map(tracker.getStageInfo, info.stageIds)):
            totals["tasks"] += stage.numCompletedTasks + stage.numFailedTasks
            totals["failed_tasks"] += stage.numFailedTasks
        job += 1
    return totals


def next_job_id(sc) -> int:
    tracker, job = sc.statusTracker(), 0
    while tracker.getJobInfo(job) is not None:
        job += 1
    return job


def fit(spark, store_url: str, run_id: str, device: str) -> dict:
    split = load_digits01()
    model = rbm.DBN(hidden_layer_sizes=(32,), batch_size=10, pretrain_learning_rate=0.1, finetune_learning_rate=0.2,
                    random_state=0, device=device, precision="tf32")
    first_job = next_job_id(spark.sparkContext)
    outcome = {"device": device}
    try:
        trained = node.Trainer(spark, store_url, run_id=run_id, epochs={"rbm0": 2, "finetune": 10}, partitions=4,
                               progress=False).fit(model, split.X_train, split.y_train)
        outcome.update(accuracy=float(trained.score(split.X_test, split.y_test)), returned_given=trained is model)
    except node.NodeError as error:
        outcome.update(error=str(error), error_type=type(error).__name__)
    view = node.open_run(store_url, run_id)
    outcome.update(record=view.record, metric_devices=[m.get("device") for m in view.runs.read_metrics()],
                   status=node.watch.run_status(store_url, run_id) if view.record else None,
                   spark=spark_tasks(spark.sparkContext, first_job))
    return outcome


def main() -> None:
    config = json.loads(sys.argv[1])
    spark = node.get_spark_session("local-cluster[1,2,1024]", app_name="sparkdbn-gpu-cluster",
                                   conf=node.gpu_spark_conf(2, config["discovery_script"]))
    for device in ("auto", "gpu"):
        try:
            print(json.dumps(fit(spark, config["store_url"], f"gpu-{device}", device), default=str), flush=True)
        except Exception:  # noqa: BLE001 - the test shows what broke
            print(json.dumps({"device": device, "crash": traceback.format_exc()}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
