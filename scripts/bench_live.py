#!/usr/bin/env python3
"""Benchmark: what watching a run costs -- live TensorBoard logs and per-epoch validation -- on digits28.

The same short DBN run (784-256-256 on digits28, two nodes on ``local[2]``) is trained three
ways: watching off (``log_dir=None``, no validation), the live TensorBoard log only, and the log
plus a validation set of 10% of the rows evaluated with Spark at every epoch's end.  All train on
the same rows: the validation rows are held out of the training data of every run.  The runs
alternate, each repeat starting with the next configuration, after one uncounted warm-up fit,
so drift on a shared machine and start-up costs hit all alike,
and the script prints, side by side, the median fit time and its ratio to "off", the median
training-job time (the epochs' Spark jobs alone), and the validation's own seconds (as the
record notes them) as a share of the fit.

    .venv/bin/python scripts/bench_live.py [--repeats 3] [--epochs 2] [--partitions 4]
"""

from __future__ import annotations

if __name__ == "__main__":  # started as a program: where the project is not importable, inside its virtualenv
    import _venv

    _venv.ensure()


import argparse
import statistics
import tempfile
import time

import numpy as np

import node
import rbm
from rbm.datasets import load_digits28
from node.watch._live import LiveLog

from _results import BenchRun, add_json_option


CONFIGURATIONS = ("off", "log", "log + validation")


def one_fit(spark, folder: str, run: str, X, y, validation, epochs: int, partitions: int, watch: str) -> dict:
    changes: dict = {"log_dir": None if watch == "off" else f"{folder}/logs"}
    if watch == "log + validation":
        changes["validation_data"] = validation
    trainer = node.Trainer(spark, f"file://{folder}/store", run_id=run, progress=False, partitions=partitions,
                           epochs={"rbm0": epochs, "rbm1": epochs, "finetune": epochs}, **changes)
    model = rbm.DBN(hidden_layer_sizes=(256, 256), batch_size=32, random_state=0)
    started = time.perf_counter()
    trainer.fit(model, X, y)
    fit_s = time.perf_counter() - started
    record = node.open_run(f"file://{folder}/store", run).record
    validation_s = sum(entry["seconds"] for step in record["steps"].values() for entry in step.get("validation", []))
    return {"fit_s": fit_s, "epochs_s": sum(summary["wall_s"] for summary in trainer.history_),
            "validation_s": validation_s, "history": trainer.history_}


def live_log_write_s(folder: str, history: list[dict], repeats: int = 50) -> float:
    """Seconds one epoch's TensorBoard writes take on the driver (median over the run's epochs, repeated)."""
    log = LiveLog(f"{folder}/timing")
    times = []
    for _ in range(repeats):
        for summary in history:
            started = time.perf_counter()
            log.epoch(summary, summary.get("validation"), 0.1)
            times.append(time.perf_counter() - started)
    log.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="epochs per phase")
    parser.add_argument("--partitions", type=int, default=4)
    add_json_option(parser)
    args = parser.parse_args()
    run = BenchRun(__file__, args).start()
    split = load_digits28()
    order = np.random.default_rng(0).permutation(len(split.X_train))
    held = len(order) // 10
    X, y = split.X_train[order[held:]], split.y_train[order[held:]]
    validation = (split.X_train[order[:held]], split.y_train[order[:held]])
    # Each fit caches its ~100 MB of partitions; several fits in one session need more than the 1 GB default.
    spark = node.get_spark_session("local[2]", app_name="bench-live", conf={"spark.driver.memory": "4g"})

    results: dict[str, list[dict]] = {watch: [] for watch in CONFIGURATIONS}
    with tempfile.TemporaryDirectory(prefix="bench-live-") as folder:
        # A first fit warms the session up (JVM, Python workers, imports): not counted.
        one_fit(spark, folder, "warm-up", X, y, validation, 1, args.partitions, "off")
        for repeat in range(args.repeats):
            for index, watch in enumerate(CONFIGURATIONS[repeat % 3:] + CONFIGURATIONS[:repeat % 3]):
                results[watch].append(one_fit(spark, folder, f"w{index}-{repeat}", X, y, validation,
                                              args.epochs, args.partitions, watch))
        write_s = live_log_write_s(folder, results["log + validation"][-1]["history"])

    def median(watch: str, name: str) -> float:
        return statistics.median(result[name] for result in results[watch])

    print(f"digits28 DBN 784-256-256: {len(X)} training rows, {held} validation rows, {args.epochs} epoch(s) per "
          f"phase, {args.partitions} partitions, local[2], median of {args.repeats}")
    print(f"{'':<20} {'fit (s)':>9} {'/ off':>7} {'training jobs (s)':>18} {'validation (s)':>15} {'of the fit':>11}")
    for watch in CONFIGURATIONS:
        fit_s, validation_s = median(watch, "fit_s"), median(watch, "validation_s")
        print(f"{watch:<20} {fit_s:>9.2f} {fit_s / median('off', 'fit_s'):>7.3f} {median(watch, 'epochs_s'):>18.2f} "
              f"{validation_s:>15.2f} {validation_s / fit_s:>11.1%}")
    epochs_s = median("log", "epochs_s") / len(results["log"][0]["history"])
    print(f"TensorBoard writes per epoch (driver, timed alone): {write_s * 1e3:.2f} ms = {write_s / epochs_s:.3%} "
          f"of a median epoch ({epochs_s:.2f} s)")
    spark.stop()
    run.table(f"Watching a run: digits28 DBN 784-256-256, {len(X)} training rows, {held} validation rows, "
              f"{args.epochs} epoch(s) per phase, {args.partitions} partitions, local[2], median of {args.repeats}",
              ["watching", "fit (s)", "fit / off", "training jobs (s)", "validation (s)", "validation, of the fit"],
              [[watch, median(watch, "fit_s"), median(watch, "fit_s") / median("off", "fit_s"),
                median(watch, "epochs_s"), median(watch, "validation_s"),
                f"{median(watch, 'validation_s') / median(watch, 'fit_s'):.1%}"] for watch in CONFIGURATIONS],
              f"TensorBoard writes per epoch (the driver's, timed alone): {write_s * 1e3:.2f} ms, "
              f"{write_s / epochs_s:.3%} of a median epoch ({epochs_s:.2f} s).")
    run.finish()


if __name__ == "__main__":
    main()
