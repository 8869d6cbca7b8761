#!/usr/bin/env python3
"""Benchmark: where a fit's time goes, end to end, on the driver and on the nodes.

One process, one ``local[N]`` session (its start is timed), the same rows: fits through
:class:`node.Trainer`, ``--fits`` of each input kind in ``--inputs`` in turn:

* ``arrays``: numpy arrays (the driver checks, splits, summarizes and stores them itself);
* ``dataframe``: the same rows as a DataFrame with an array column (read by Spark through Arrow,
  summarized by a Spark job, cached, stored by another);
* ``dataset``: the same rows staged in the store first (``storage.stage_arrays``, untimed); each
  executor reads its own shard.

The session's first fit starts Spark's Python workers ("cold"); the later fits find them warm.
Each fit's ``Trainer.timings_`` is printed: the driver's steps in order with their start and
seconds, an epoch's with what its nodes spent before their first partition (starting the node,
taking the slot's data: "setup") and training, and the job that started the Python workers
beside the driver's steps.  A summary table gives each fit's total, its start-up (the driver's
steps before the first training job), the epochs, the validations and the rest.

Then the reference, in this process once Spark has stopped: the bare model (a fresh one, the same
settings) trained on one node's share of the rows by ``train_partition``, on one BLAS thread, the
phases' epochs in turn, best of two.  Its CPU seconds beside what each node's training thread spent
on a core in the warm fits say what the node adds to the model; the nodes' wall seconds beside
their CPU seconds say how long they waited for a core (a machine shared with other work).

The model (``--model``): ``lenet`` (default; LeNet on digits28 images, Adam 1e-3, batch 64, one
epoch, the held-out fifth validated: the race of ``bench_torch.py``) or ``dbn`` (784-128-128 on
digits28, one epoch of each RBM and two of fine-tuning).

    .venv/bin/python scripts/bench_fit_cost.py                          # lenet, arrays, 3 fits
    .venv/bin/python scripts/bench_fit_cost.py --inputs arrays dataframe dataset --fits 2
    .venv/bin/python scripts/bench_fit_cost.py --model dbn --json

The machine may be shared: compare fits of one run, not runs.
"""

from __future__ import annotations

if __name__ == "__main__":  # started as a program: where the project is not importable, inside its virtualenv
    import _venv

    _venv.ensure()

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np
from sklearn.model_selection import train_test_split
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import node  # noqa: E402
import rbm  # noqa: E402
import storage  # noqa: E402
from rbm.datasets import load_digits28  # noqa: E402

from _results import BenchRun, add_json_option  # noqa: E402

#: What each ``--model`` trains: the model, its epochs per phase.
MODELS = {
    "lenet": (lambda: rbm.lenet(input_shape=(1, 28, 28), n_classes=10, updater="adam", learning_rate=1e-3,
                                batch_size=64, random_state=0), {"train": 1}),
    "dbn": (lambda: rbm.DBN(hidden_layer_sizes=(128, 128), batch_size=32, finetune_dropout=0.0, random_state=0),
            {"rbm0": 1, "rbm1": 1, "finetune": 2}),
}
INPUTS = ("arrays", "dataframe", "dataset")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=tuple(MODELS), default="lenet")
    parser.add_argument("--inputs", nargs="+", choices=INPUTS, default=["arrays"])
    parser.add_argument("--fits", type=int, default=3, help="fits of each input kind (default 3)")
    parser.add_argument("--nodes", type=int, default=2, help="local[N] (default 2)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--mode", default="async")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if args.fits < 1:
        parser.error(f"--fits must be >= 1, got {args.fits}")
    return args


def load(model: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """digits28's training rows less a stratified fifth held out for validation: ``(X, y, X_val, y_val)``
    (images for LeNet, flat rows for the DBN), as ``bench_torch.py`` splits them."""
    split = load_digits28(flatten=model != "lenet")
    X, X_val, y, y_val = train_test_split(split.X_train, split.y_train, test_size=0.2, stratify=split.y_train,
                                          random_state=0)
    return X, y, X_val, y_val


def training_input(kind: str, spark: Any, X: np.ndarray, y: np.ndarray, folder: str) -> Any:
    """The rows as ``kind`` gives them to ``Trainer.fit`` (made before the clock starts)."""
    if kind == "arrays":
        return X
    flat = X.reshape(len(X), -1)
    if kind == "dataframe":
        import pyarrow as pa

        table = pa.table({"features": pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel()), flat.shape[1]),
                          "label": pa.array(y)})
        frame = spark.createDataFrame(table.to_pandas()).cache()
        frame.count()  # the DataFrame's own making is not the fit's
        return frame
    url = f"file://{folder}/datasets/digits28"
    storage.stage_arrays(url, flat, y, shards=8, overwrite=True)
    return url


def one_fit(spark: Any, store_url: str, args: argparse.Namespace, kind: str, data: Any, y: np.ndarray,
            validation: tuple[np.ndarray, np.ndarray], run_id: str) -> dict:
    """One timed fit: ``Trainer.timings_``, the wall time around ``fit``, the last validation accuracy."""
    make_model, epochs = MODELS[args.model]
    model = make_model()
    if args.model == "lenet" and kind != "arrays":
        validation = (validation[0].reshape(len(validation[0]), -1), validation[1])  # flat rows, as the data
    trainer = node.Trainer(spark, store_url, run_id=run_id, mode=args.mode, epochs=epochs, partitions=args.partitions,
                           progress=False, log_dir=None, validation_data=validation)
    started = time.perf_counter()
    trainer.fit(model, data, y if kind == "arrays" else None)
    wall = time.perf_counter() - started
    accuracy = (trainer.history_[-1].get("validation") or {}).get("val_accuracy")
    return {"input": kind, "wall_s": wall, "timings": trainer.timings_, "val_accuracy": accuracy,
            "load": os.getloadavg()[0]}


def bare_model_reference(args: argparse.Namespace, X: np.ndarray, y: np.ndarray, repeats: int = 2) -> dict[str, float]:
    """The model alone on one node's share of the rows (``len(X) // nodes``), one BLAS thread, this
    process: the wall and thread CPU seconds of its training passes (each phase's epochs), best of ``repeats``
    fresh models."""
    make_model, epochs = MODELS[args.model]
    share = len(X) // args.nodes
    rows, labels = X[:share], y[:share]  # digits28's rows are shuffled: any share is like a node's
    best = {"rows": share, "wall_s": float("inf"), "cpu_s": float("inf")}
    with threadpool_limits(1, "blas"):
        for _ in range(repeats):
            model = make_model()
            model.initialize(rows.shape[1:] if rows.ndim > 2 else rows.shape[1], classes=np.unique(y))
            rng = np.random.default_rng(0)
            wall, cpu = time.perf_counter(), time.thread_time()
            for phase in model.phases():
                for _ in range(epochs[phase]):
                    model.train_partition(rows, labels, phase, rng)
            best["wall_s"] = min(best["wall_s"], time.perf_counter() - wall)
            best["cpu_s"] = min(best["cpu_s"], time.thread_time() - cpu)
    return best


def split_steps(timings: dict) -> dict[str, float]:
    """A fit's seconds by kind of step: start-up (the driver's steps before the first training job),
    epochs, validation, the rest (phase results, the model, cleanup); the first job's node setup; and
    the nodes' training seconds over all epochs (summed over the nodes) with their CPU seconds."""
    own = [step for step in timings["steps"] if not step["background"]]
    epochs = [step for step in own if " epoch" in step["name"] and not step["name"].endswith("validation")]
    first = epochs[0]["start_s"] if epochs else timings["total_s"]
    validation = sum(step["seconds"] for step in own if step["name"].endswith("validation"))
    epoch_s = sum(step["seconds"] for step in epochs)
    workers = next((step["seconds"] for step in timings["steps"] if step["background"]), None)
    return {"total_s": timings["total_s"], "startup_s": first, "epochs_s": epoch_s, "validation_s": validation,
            "rest_s": timings["total_s"] - first - epoch_s - validation,
            "node_setup_s": epochs[0]["nodes"].get("setup_s", 0.0) if epochs else 0.0, "workers_s": workers,
            "node_train_s": sum(step["nodes"].get("train_s", 0.0) for step in epochs),
            "node_train_cpu_s": sum(step["nodes"].get("train_cpu_s", 0.0) for step in epochs)}


def show_fit(label: str, result: dict) -> None:
    print(f"\n{label}: {result['wall_s']:.2f} s around Trainer.fit, validation accuracy "
          f"{result['val_accuracy'] if result['val_accuracy'] is None else round(result['val_accuracy'], 4)}")
    print(f"  {'start s':>8} {'seconds':>8}  step")
    for step in result["timings"]["steps"]:
        nodes = step["nodes"]
        said = (f"  [nodes: setup {nodes['setup_s']:.2f} s (data {nodes['data_load_s']:.2f}), train "
                f"{nodes['train_s']:.2f} (on a core {nodes['train_cpu_s']:.2f}), merge {nodes['merge_s']:.2f}, "
                f"publish {nodes['publish_s']:.2f}; slowest node {nodes['slowest_node_s']:.2f} s]") if nodes else ""
        beside = " (beside the driver)" if step["background"] else ""
        print(f"  {step['start_s']:8.2f} {step['seconds']:8.2f}  {step['name']}{beside}{said}")


FIT_COLUMNS = ["input", "fit", "workers", "fit s", "start-up s", "epochs s", "validation s", "rest s",
               "nodes' setup s (summed)", "nodes' training s (summed)", "of it on a core s", "Python workers' start s",
               "validation accuracy", "load average"]


def fit_rows(results: list[dict]) -> list[list]:
    rows = []
    for r in results:
        parts = split_steps(r["timings"])
        rows.append([r["input"], r["fit"], "cold" if r["cold"] else "warm", parts["total_s"], parts["startup_s"],
                     parts["epochs_s"], parts["validation_s"], parts["rest_s"], parts["node_setup_s"],
                     parts["node_train_s"], parts["node_train_cpu_s"], parts["workers_s"], r["val_accuracy"],
                     r["load"]])
    return rows


def node_rows(results: list[dict], bare_cpu_s: float, nodes: int) -> tuple[list[str], list[list]]:
    """Each warm fit's nodes against the bare model: a node's training seconds and CPU seconds (the
    mean over the nodes), its CPU over the bare model's, its wall over its CPU."""
    columns = ["input", "fit", "bare model CPU s", "node's training s", "of it on a core s", "node CPU / bare CPU",
               "node wall / node CPU", "load average"]
    rows = []
    for r in results:
        if r["cold"]:
            continue
        parts = split_steps(r["timings"])
        wall_s, cpu_s = parts["node_train_s"] / nodes, parts["node_train_cpu_s"] / nodes
        rows.append([r["input"], r["fit"], bare_cpu_s, wall_s, cpu_s, cpu_s / bare_cpu_s,
                     wall_s / cpu_s if cpu_s else None, r["load"]])
    return columns, rows


def step_rows(results: list[dict]) -> tuple[list[str], list[list]]:
    """Each step's seconds: the session's first (cold) fit, and the median of the warm ones of each input kind."""
    columns, series = ["step"], []
    cold = next((r for r in results if r["cold"]), None)
    if cold is not None:
        columns.append(f"cold fit ({cold['input']}) s")
        series.append([cold])
    for kind in dict.fromkeys(r["input"] for r in results):
        warm = [r for r in results if r["input"] == kind and not r["cold"]]
        if warm:
            columns.append(f"warm {kind}, median of {len(warm)} s")
            series.append(warm)
    names = list(dict.fromkeys(step["name"] for r in results for step in r["timings"]["steps"]))
    rows = []
    for name in names:
        row: list[Any] = [name]
        for fits in series:
            seconds = [sum(s["seconds"] for s in r["timings"]["steps"] if s["name"] == name) for r in fits]
            row.append(statistics.median(seconds) if any(seconds) else None)
        rows.append(row)
    rows.append(["whole fit", *(statistics.median(r["timings"]["total_s"] for r in fits) for fits in series)])
    return columns, rows


def print_table(columns: list[str], rows: list[list]) -> None:
    print("  ".join(columns))
    for row in rows:
        print("  ".join("-" if cell is None else f"{cell:.2f}" if isinstance(cell, float) else str(cell)
                        for cell in row))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = BenchRun(__file__, args).start()
    X, y, X_val, y_val = load(args.model)
    started = time.perf_counter()
    spark = node.get_spark_session(f"local[{args.nodes}]", app_name="bench-fit-cost",
                                   conf={"spark.ui.enabled": "false", "spark.driver.memory": "4g"})
    session_s = time.perf_counter() - started
    print(f"digits28, {args.model}, {len(X)} training and {len(X_val)} validation rows, local[{args.nodes}], "
          f"{args.partitions} partitions, {args.mode}; load average {os.getloadavg()[0]:.1f}; "
          f"the session started in {session_s:.1f} s")
    results: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="sparkdbn-bench-fit-cost-") as folder:
            for kind in args.inputs:
                data = training_input(kind, spark, X, y, folder)
                for fit in range(1, args.fits + 1):
                    result = one_fit(spark, f"file://{folder}/store", args, kind, data, y, (X_val, y_val),
                                     run_id=f"{kind}-{fit}")
                    result.update(fit=fit, cold=not results)
                    results.append(result)
                    show_fit(f"{kind} fit {fit}{' (cold: it starts the Python workers)' if result['cold'] else ''}",
                             result)
    finally:
        spark.stop()
    heading = (f"digits28, {args.model}, {len(X)} rows, local[{args.nodes}], {args.partitions} partitions, {args.mode}"
               f" (session start {session_s:.1f} s)")
    rows = fit_rows(results)
    print(f"\n{heading}")
    print_table(FIT_COLUMNS, rows)
    run.table(f"Each fit: {heading}", FIT_COLUMNS, rows,
              "Start-up: the driver's steps before the first training job. Epochs: the driver waiting for the "
              "training jobs (their nodes' setup included). Rest: phase results, the model, the cleanup. The "
              "Python workers' start runs beside the driver's steps. The nodes' training: their passes' seconds, "
              "of which their training threads' CPU seconds (the rest waiting for a core). Load average: "
              "the machine's, one minute, after the fit.")
    reference = bare_model_reference(args, X, y)
    print(f"\nthe bare model on one node's {reference['rows']} rows, one BLAS thread, this process: "
          f"{reference['wall_s']:.2f} s ({reference['cpu_s']:.2f} s CPU); load average {os.getloadavg()[0]:.1f}")
    columns, rows = node_rows(results, reference["cpu_s"], args.nodes)
    print_table(columns, rows)
    run.table(f"A node's training against the bare model (warm fits): {heading}", columns, rows,
              f"Bare model: a fresh one trained by train_partition on one node's share ({reference['rows']} rows), "
              f"one BLAS thread, in the benchmark's process after Spark stopped, best of two "
              f"({reference['wall_s']:.2f} s wall). A node's: its passes' seconds and its training thread's CPU "
              "seconds in the fit, averaged over the nodes. Node CPU / bare CPU: what the node adds to the model's "
              "own work; node wall / node CPU: how long it waited for a core.")
    columns, steps = step_rows(results)
    run.table(f"Where a fit's time goes, step by step: {heading}", columns, steps,
              "Seconds of each step on the driver, in the order they begin; 'start the Python workers' runs "
              "beside them.")
    run.finish()


if __name__ == "__main__":
    main()
