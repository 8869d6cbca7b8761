#!/usr/bin/env python3
"""Benchmark: the driver-side data check's cost, as a fraction of one training epoch, on digits28.

Before the first epoch the driver runs one Spark job over the training data that caches the
partitions and summarizes each one (rows, shape, first NaN/Inf, per-column minimum and maximum
with their rows, distinct labels), then checks the summaries against the model: the width, the
visible units' input range, the labels.  This script times, on ``local[1]`` (one node, so the
figures compare like with like):

* ``prepare``: that whole job (reading the arrays into cached partitions + the summaries);
* ``summaries``: the summarizing alone, in-process over the same partitions;
* ``check``: the driver's check of the summaries against the model;
* ``epoch``: one epoch of the first phase of a 784-500-500 DBN over the same partitions (the
  second epoch, so start-up costs are out);

and prints each as a fraction of the epoch.

    .venv/bin/python scripts/bench_data_check.py [--partitions 8] [--repeats 3]
"""

from __future__ import annotations

if __name__ == "__main__":  # started as a program: where the project is not importable, inside its virtualenv
    import _venv

    _venv.ensure()


import argparse
import os
import statistics
import tempfile
import time

import numpy as np

import node
import rbm
from node.data._prepare import DataOptions, check_model_input, prepare_training_data, summarize_block
from rbm.datasets import load_digits28

from _results import BenchRun, add_json_option


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    add_json_option(parser)
    args = parser.parse_args()
    run = BenchRun(__file__, args).start()
    split = load_digits28()
    X, y = split.X_train, split.y_train
    spark = node.get_spark_session("local[1]", app_name="bench-data-check")
    spark.sparkContext.parallelize(range(2), 2).map(lambda _: __import__("node.executor._node") and os.getpid()).collect()

    prepare_s, check_s = [], []
    for _ in range(args.repeats):
        started = time.perf_counter()
        prepared = prepare_training_data(spark, X, y, DataOptions(partitions=args.partitions))
        prepare_s.append(time.perf_counter() - started)
        replica = rbm.DBN(hidden_layer_sizes=(500, 500)).initialize(X.shape[1], prepared.classes)
        started = time.perf_counter()
        check_model_input(prepared, X.shape[1], replica.input_bounds())
        check_s.append(time.perf_counter() - started)
        prepared.unpersist()

    summary_s = []
    parts = np.array_split(np.random.default_rng(0).permutation(len(X)), args.partitions)
    for _ in range(args.repeats):
        started = time.perf_counter()
        for index, rows in enumerate(parts):
            summarize_block(index, X[rows], y[rows], max_classes=10_000)
        summary_s.append(time.perf_counter() - started)

    with tempfile.TemporaryDirectory(prefix="bench-data-check-") as folder:
        trainer = node.Trainer(spark, "file://" + folder, epochs={"rbm0": 2, "rbm1": 0, "finetune": 0},
                               partitions=args.partitions, progress=False)
        trainer.fit(rbm.DBN(hidden_layer_sizes=(500, 500), batch_size=32, random_state=0), X, y)
        epoch_s = trainer.history_[-1]["wall_s"]

    rows = [("prepare (cache + summaries job)", statistics.median(prepare_s)),
            ("summaries alone (in-process)", statistics.median(summary_s)),
            ("driver check of the summaries", statistics.median(check_s)),
            ("one epoch, 784-500 phase (reference)", epoch_s)]
    print(f"digits28: {len(X)} rows x {X.shape[1]} features, {args.partitions} partitions, local[1], "
          f"median of {args.repeats}")
    print(f"{'step':<40} {'seconds':>9} {'of an epoch':>12}")
    for name, seconds in rows:
        print(f"{name:<40} {seconds:>9.3f} {seconds / epoch_s:>11.1%}")
    spark.stop()
    run.table(f"The driver's data check on digits28 ({len(X)} rows x {X.shape[1]} features, {args.partitions} "
              f"partitions, local[1], median of {args.repeats})", ["step", "seconds", "of an epoch"],
              [[name, seconds, f"{seconds / epoch_s:.1%}"] for name, seconds in rows])
    run.finish()


if __name__ == "__main__":
    main()
