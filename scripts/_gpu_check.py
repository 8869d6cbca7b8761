"""The Spark half of scripts/gpu-check: real Spark nodes on a machine's GPUs, every outcome as JSON.

    python scripts/_gpu_check.py --out DIR --discovery SCRIPT [--dry-run]

On a ``local-cluster[2,1,...]`` whose workers find their GPUs with ``SCRIPT`` (one GPU per executor and
task; on a one-GPU machine both executors get address 0, so two nodes share it and split its data
budget), it runs, each step written to ``DIR/gpu-check.json`` as soon as it is done (a timeout keeps
what finished):

1. a DBN fit with ``device="gpu"`` (TF32) and one with ``"auto"``: seconds, held-out accuracy, where each
   node computed (address, free memory, warm-up), the data cache's report, failed Spark tasks;
2. a LeNet fit with ``device="gpu"``: the same, and how its convolutions ran (cuDNN or im2col);
3. serving: ``evaluate`` and ``predict_dataframe`` of the GPU-fitted DBN on the GPU session (the
   executors' tasks hold GPUs: the model serves there) against the driver's own predictions;
4. a full GPU: the driver takes all but 128 MiB of GPU 0, then ``device="gpu"`` must end in one line at
   the probe with no task retried, and ``"auto"`` must train on the CPUs saying why;
5. the processes holding GPU memory once the fits are done (``nvidia-smi``): the nodes, not the probe;
6. the same DBN fit on the CPUs of a ``local-cluster`` without GPUs: the Spark GPU/CPU speed-up.

``--dry-run`` runs the same steps on a machine without a GPU (the tests do): the fits ask for
``device="cpu"`` where they would ask for ``"gpu"``, the data is the small digits set, and the
full-GPU and nvidia-smi steps are skipped.

Every session starts through :func:`spark_session`, with Spark's UI off (:data:`SESSION_CONF`): the slim
jars staged for the GPU machine hold only the classes of workloads that ran without the UI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

import numpy as np

import node
import rbm
from rbm.datasets import load_digits01, load_digits28

FULL_GPU_LEFT_BYTES = 128 << 20  # what the driver leaves free on GPU 0 in step 4: below a node's 256 MiB

#: What every session of the check gets over its own settings.  The GPU machine runs the slim jars of
#: ../shared/tools/stage-spark-for-gpu.sh, cut to the classes that logged workloads loaded, so:
#: the UI off (those workloads ran without it: Jetty's servlets, Jersey are absent, and a session with the UI on
#: would fail there with NoClassDefFoundError); and connections never idle out during a part (netty's idle-state
#: event, which Spark's transport closes a connection idle for ``spark.network.timeout`` by, loads only after
#: 120 s of idling -- one staging kept its classes, the next did not), so the timeout exceeds a part's length.
SESSION_CONF = {"spark.ui.enabled": "false", "spark.network.timeout": "900s"}


def spark_session(master: str, app_name: str, conf: dict[str, str] | None = None) -> Any:
    """``node.get_spark_session`` with :data:`SESSION_CONF` over ``conf``: the only way this check starts Spark."""
    return node.get_spark_session(master, app_name=app_name, conf={**(conf or {}), **SESSION_CONF})


def spark_tasks(sc: Any, first_job: int) -> dict[str, int]:
    """Task attempts of the jobs from ``first_job`` on (each retry is one more attempt), and how many failed."""
    tracker, totals, job = sc.statusTracker(), {"jobs": 0, "tasks": 0, "failed_tasks": 0}, first_job
    while (info := tracker.getJobInfo(job)) is not None:
        totals["jobs"] += 1
        for stage in filter(None, map(tracker.getStageInfo, info.stageIds)):
            totals["tasks"] += stage.numCompletedTasks + stage.numFailedTasks
            totals["failed_tasks"] += stage.numFailedTasks
        job += 1
    return totals


def next_job_id(sc: Any) -> int:
    tracker, job = sc.statusTracker(), 0
    while tracker.getJobInfo(job) is not None:
        job += 1
    return job


class Check:
    """The results so far, rewritten to ``<out>/gpu-check.json`` after every step."""

    def __init__(self, out: str, dry_run: bool, resume: bool = False) -> None:
        self.path = os.path.join(out, "gpu-check.json")
        self.results: dict[str, Any] = {"dry_run": dry_run, "started": time.time(), "steps": {}, "checks": {}}
        if resume and os.path.exists(self.path):  # the CPU part adds to what the GPU part wrote
            with open(self.path, encoding="utf-8") as handle:
                self.results = json.load(handle)

    def step(self, name: str, work: Callable[[], dict]) -> dict:
        started = time.perf_counter()
        try:
            outcome = work()
        except Exception:  # noqa: BLE001 - a check reports what broke and goes on with the next step
            outcome = {"crash": traceback.format_exc()}
        outcome["step_s"] = round(time.perf_counter() - started, 2)
        self.results["steps"][name] = public(outcome)
        print(f"gpu-check {name}: {json.dumps(public(outcome), default=str)[:400]}", flush=True)
        self.save()
        return outcome

    def check(self, name: str, holds: bool) -> None:
        self.results["checks"][name] = bool(holds)
        self.save()

    def save(self) -> None:
        temporary = f"{self.path}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(self.results, handle, indent=1, default=str)
        os.replace(temporary, self.path)


def fit(spark: Any, store_url: str, run_id: str, model: Any, X: np.ndarray, y: np.ndarray, X_test: np.ndarray,
        y_test: np.ndarray, epochs: dict[str, int]) -> dict:
    """One Spark fit through node.Trainer: seconds, accuracy, error, devices, cache reports, tasks."""
    first_job = next_job_id(spark.sparkContext)
    outcome: dict[str, Any] = {"requested": model.device, "precision": model.precision}
    started = time.perf_counter()
    try:
        trained = node.Trainer(spark, store_url, run_id=run_id, epochs=epochs, partitions=4,
                               progress=False).fit(model, X, y)
        outcome["accuracy"] = float(trained.score(X_test, y_test))
        outcome["model"] = trained
    except node.NodeError as error:
        outcome.update(error=str(error), error_type=type(error).__name__)
    outcome["seconds"] = round(time.perf_counter() - started, 2)
    view = node.open_run(store_url, run_id)
    record = view.record or {}
    outcome["devices"] = {name: {key: device.get(key) for key in ("kind", "address", "index", "name", "free_bytes",
                                                                  "memory_bytes", "warm_up_s", "convolutions",
                                                                  "reason")}
                          for name, device in (record.get("devices") or {}).items()}
    outcome["device_data"] = [m.get("device_data") for m in view.runs.read_metrics() if m.get("device_data")][-2:]
    outcome["spark"] = spark_tasks(spark.sparkContext, first_job)
    return outcome


def public(outcome: dict) -> dict:
    return {key: value for key, value in outcome.items() if key != "model"}


def gpu_processes() -> list[dict[str, str]]:
    """The processes holding GPU memory now, as nvidia-smi lists them ([] without nvidia-smi)."""
    if shutil.which("nvidia-smi") is None:
        return []
    done = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=30, check=False)
    return [dict(zip(("pid", "name", "used"), (part.strip() for part in line.split(","))))
            for line in done.stdout.splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for gpu-check.json")
    parser.add_argument("--discovery", required=True, help="the GPU discovery script Spark's workers run")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: device='cpu' for 'gpu', small data")
    parser.add_argument("--part", choices=("gpu", "cpu"), required=True,
                        help="gpu: the steps on the GPU session; cpu: the CPU baseline, added to the same file "
                             "(each in its own process: a session's settings outlive it in pyspark's builder)")
    parser.add_argument("--cpu-cores", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                        help="cores of each of the CPU baseline's two executors")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    check = Check(args.out, args.dry_run, resume=args.part == "cpu")
    gpu = "cpu" if args.dry_run else "gpu"
    split = load_digits01() if args.dry_run else load_digits28()
    X, y, X_test, y_test = split.X_train, split.y_train, split.X_test, split.y_test
    images, test_images = (X.reshape(len(X), 1, 28, 28), X_test.reshape(len(X_test), 1, 28, 28)) if not args.dry_run \
        else (None, None)
    dbn = dict(hidden_layer_sizes=(64,) if args.dry_run else (256, 256), batch_size=50, pretrain_learning_rate=0.1,
               finetune_learning_rate=0.1, random_state=0)
    epochs = {"rbm0": 1, "finetune": 5} if args.dry_run else {"rbm0": 2, "rbm1": 2, "finetune": 6}
    store = tempfile.mkdtemp(prefix="gpu-check-store-")
    store_url = f"file://{store}"
    try:
        if args.part == "gpu":
            gpu_part(args, check, store_url, gpu, dbn, epochs, X, y, X_test, y_test, images, test_images)
        else:
            cpu_part(args, check, store_url, dbn, epochs, X, y, X_test, y_test)
    finally:
        shutil.rmtree(store, ignore_errors=True)  # only the store this check made
    return check.results


def gpu_part(args: Any, check: Check, store_url: str, gpu: str, dbn: dict, epochs: dict, X: np.ndarray,
             y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, images: Any, test_images: Any) -> None:
    """Steps 1-5 on the GPU session."""
    check.results["environment"] = {"python": sys.version.split()[0], "numpy": np.__version__,
                                    "gpu_available": rbm.gpu_available(), "gpu_processes_before": gpu_processes()}
    spark = spark_session(f"local-cluster[2,1,{1024 if args.dry_run else 4096}]", "sparkdbn-gpu-check",
                          node.gpu_spark_conf(1, args.discovery))
    fits: dict[str, dict] = {}
    for name, make, data in (
            ("dbn_gpu", lambda: rbm.DBN(device=gpu, precision="tf32" if gpu == "gpu" else "float32", **dbn), "flat"),
            ("dbn_auto", lambda: rbm.DBN(device="auto", **dbn), "flat"),
            ("lenet_gpu", lambda: rbm.lenet(input_shape=(1, 28, 28), n_classes=10, device=gpu, random_state=0,
                                            batch_size=64), "images")):
        if data == "images" and images is None:
            continue
        train, held_out = (images, test_images) if data == "images" else (X, X_test)
        phase_epochs = {"train": 1} if data == "images" else epochs
        fits[name] = check.step(name, lambda: fit(spark, store_url, name, make(), train, y, held_out, y_test,
                                                  phase_epochs))
    check.check("gpu fits trained", all("accuracy" in fits[name] for name in fits))
    check.check("no task failed in the fits", all(fits[name].get("spark", {}).get("failed_tasks", 1) == 0
                                                  for name in fits))
    if not args.dry_run:
        check.check("every node of the gpu fits on a GPU",
                    all(device["kind"] == "gpu" for name in ("dbn_gpu", "lenet_gpu") if name in fits
                        for device in fits[name]["devices"].values()))
    model = fits["dbn_gpu"].get("model")
    if model is not None:
        def serve() -> dict:
            report = node.evaluate(model, (X_test, y_test), spark=spark)
            df = spark.createDataFrame([(k, x.astype(float).tolist()) for k, x in enumerate(X_test)], ["id", "features"])
            rows = sorted(node.predict_dataframe(model, df, probability_type="array").collect(), key=lambda r: r["id"])
            predicted = np.array([row["prediction"] for row in rows])
            return {"evaluate_accuracy": report.accuracy,
                    "predict_accuracy": float(np.mean(predicted == y_test)),
                    "driver_accuracy": float(model.score(X_test, y_test))}
        served = check.step("serving", serve)
        check.check("serving matches the driver within 0.5 point",
                    "crash" not in served and abs(served["predict_accuracy"] - served["driver_accuracy"]) <= 0.005)
    if not args.dry_run:
        check.results["gpu_processes_after_fits"] = gpu_processes()

        def full_gpu() -> dict:
            import cupy

            free, _ = cupy.cuda.runtime.memGetInfo()
            ballast = cupy.empty(max(0, int(free) - FULL_GPU_LEFT_BYTES), dtype=np.uint8)
            try:
                refused = fit(spark, store_url, "full_gpu", rbm.DBN(device="gpu", **dbn), X, y, X_test, y_test, epochs)
                auto = fit(spark, store_url, "full_auto", rbm.DBN(device="auto", **dbn), X, y, X_test, y_test, epochs)
            finally:
                del ballast
                cupy.get_default_memory_pool().free_all_blocks()
            return {"gpu": public(refused), "auto": public(auto)}
        full = check.step("full_gpu", full_gpu)
        if "crash" not in full:
            check.check("a full GPU is refused in one line without retries",
                        full["gpu"].get("error_type") == "NodeDeviceError" and "\n" not in full["gpu"]["error"]
                        and full["gpu"]["spark"]["failed_tasks"] == 0)
            check.check("auto on a full GPU trains on the CPUs", "accuracy" in full["auto"] and all(
                device["kind"] == "cpu" for device in full["auto"]["devices"].values()))
    spark.stop()


def cpu_part(args: Any, check: Check, store_url: str, dbn: dict, epochs: dict, X: np.ndarray, y: np.ndarray,
             X_test: np.ndarray, y_test: np.ndarray) -> None:
    """Step 6: the same DBN fit on a CPU local-cluster, and the Spark GPU/CPU comparison."""
    fits = {"dbn_gpu": check.results["steps"].get("dbn_gpu", {})}
    cpu_spark = spark_session(f"local-cluster[2,{args.cpu_cores},{1024 if args.dry_run else 8192}]",
                              "sparkdbn-gpu-check-cpu")
    cpu_fit = check.step("dbn_cpu", lambda: public(fit(cpu_spark, store_url, "dbn_cpu", rbm.DBN(device="cpu", **dbn),
                                                       X, y, X_test, y_test, epochs)))
    cpu_spark.stop()
    if "seconds" in cpu_fit and "seconds" in fits.get("dbn_gpu", {}):
        check.results["spark_dbn_gpu_over_cpu"] = cpu_fit["seconds"] / fits["dbn_gpu"]["seconds"]
        check.check("Spark DBN fit on GPUs at least 3x the CPUs", check.results["spark_dbn_gpu_over_cpu"] >= 3.0)
        if "accuracy" in cpu_fit and "accuracy" in fits["dbn_gpu"]:
            check.check("GPU and CPU accuracy within 1 point",
                        abs(cpu_fit["accuracy"] - fits["dbn_gpu"]["accuracy"]) <= 0.01)
    check.results["finished"] = time.time()
    check.save()


if __name__ == "__main__":
    main()
