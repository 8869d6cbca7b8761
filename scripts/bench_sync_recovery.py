#!/usr/bin/env python3
"""Benchmark: what a ``sync`` fit pays for its barrier-stage jobs, and what a lost node costs it.

One process, one ``local[N]`` session, the DBN of ``tests/node`` (64-64-10 on the 8x8 digits, 2 RBM
epochs and ``--finetune-epochs`` of fine-tuning, ``--partitions`` partitions) in ``mode="sync"``:

* **job kind**: fits whose jobs are Spark barrier stages (the default: their tasks start together),
  alternating with fits whose jobs are ordinary stages (as under dynamic allocation; the switch is
  :attr:`node.driver.FitJobs.gang_scheduling`), ``--fits`` of each after one untimed fit that starts the
  Python workers;
* **a lost node**: fits where one node's Python worker kills itself with SIGKILL in the middle of
  fine-tuning epoch ``--kill-epoch`` (the fault hook ``kill_worker_once_at``; the driver then runs the
  job again from the last round every node completed), alternating with the same fits undisturbed.

Printed: the median fit seconds of each kind, the ratio to its reference (barrier stages against
ordinary ones; a lost node against none), the held-out accuracy, and the attempts the lost-node fits'
fine-tuning jobs took.

    .venv/bin/python scripts/bench_sync_recovery.py
    .venv/bin/python scripts/bench_sync_recovery.py --fits 5 --json

The machine may be shared: compare the kinds of one run, alternated in it, not runs.
"""

from __future__ import annotations

if __name__ == "__main__":  # started as a program: where the project is not importable, inside its virtualenv
    import _venv

    _venv.ensure()

import argparse  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "node"))

import node  # noqa: E402
import node.driver._fit_jobs as fit_jobs  # noqa: E402
import storage  # noqa: E402
from crash_store import harness_model  # noqa: E402
from rbm.datasets import load_digits01  # noqa: E402

from _results import BenchRun, add_json_option  # noqa: E402

BARRIER_STAGES = fit_jobs.FitJobs.gang_scheduling
ORDINARY_STAGES = property(lambda jobs: False)


def _fit(spark, store_url: str, run: str, digits, args: argparse.Namespace, *, barrier: bool = True,
         kill: bool = False) -> tuple[float, float]:
    """``(seconds, held-out accuracy)`` of one sync fit."""
    fit_jobs.FitJobs.gang_scheduling = BARRIER_STAGES if barrier else ORDINARY_STAGES
    settings = dict(mode="sync", epochs={"rbm0": 2, "finetune": args.finetune_epochs}, partitions=args.partitions,
                    progress=False, run_id=run)
    if kill:
        settings["kill_worker_once_at"] = f"finetune:{args.kill_epoch}"
    started = time.perf_counter()
    model = node.Trainer(spark, store_url, **settings).fit(harness_model(), digits.X_train, digits.y_train)
    return time.perf_counter() - started, model.score(digits.X_test, digits.y_test)


def _attempts(store_url: str, run: str) -> int:
    store = storage.open_store(store_url)
    jobs = store.list(f"runs/{run}/rounds/finetune")
    return max(len(store.list(f"runs/{run}/rounds/finetune/{job}")) for job in jobs)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2, help="local[N] (default 2)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--finetune-epochs", type=int, default=6)
    parser.add_argument("--kill-epoch", type=int, default=3, help="the fine-tuning epoch a node dies in (0-based)")
    parser.add_argument("--fits", type=int, default=4, help="fits of each kind (default 4)")
    add_json_option(parser)
    args = parser.parse_args()
    if not 0 <= args.kill_epoch < args.finetune_epochs:
        parser.error(f"--kill-epoch must lie in [0, {args.finetune_epochs})")
    run = BenchRun(__file__, args).start()
    digits = load_digits01()
    spark = node.get_spark_session(f"local[{args.nodes}]", conf={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("FATAL")  # the lost node's task failures are the point, not news
    results: dict[str, list[tuple[float, float]]] = {"barrier": [], "ordinary": [], "lost": [], "undisturbed": []}
    attempts = []
    try:
        with tempfile.TemporaryDirectory(prefix="sparkdbn-bench-sync-") as tmp:
            store_url = "file://" + os.path.join(tmp, "store")
            _fit(spark, store_url, "warm-up", digits, args)  # starts the Python workers: no kind pays for it
            for index in range(args.fits):
                results["barrier"].append(_fit(spark, store_url, f"barrier-{index}", digits, args))
                results["ordinary"].append(_fit(spark, store_url, f"ordinary-{index}", digits, args, barrier=False))
            for index in range(args.fits):
                results["lost"].append(_fit(spark, store_url, f"lost-{index}", digits, args, kill=True))
                attempts.append(_attempts(store_url, f"lost-{index}"))
                results["undisturbed"].append(_fit(spark, store_url, f"undisturbed-{index}", digits, args))
    finally:
        fit_jobs.FitJobs.gang_scheduling = BARRIER_STAGES
        spark.stop()

    def median(kind: str, column: int) -> float:
        return statistics.median(value[column] for value in results[kind])

    rows = []
    print(f"\nsync fits, DBN 64-64-10 on digits, local[{args.nodes}], {args.partitions} partitions, "
          f"2 + {args.finetune_epochs} epochs, median of {args.fits} fits each")
    print(f"{'fit':<34} {'wall s':>7} {'ratio':>6} {'accuracy':>9}")
    for kind, reference, label in (("barrier", "ordinary", "jobs as barrier stages"),
                                   ("ordinary", "ordinary", "jobs as ordinary stages (reference)"),
                                   ("lost", "undisturbed", f"a node lost in fine-tuning epoch {args.kill_epoch + 1}"),
                                   ("undisturbed", "undisturbed", "no node lost (reference)")):
        wall, ratio, accuracy = median(kind, 0), median(kind, 0) / median(reference, 0), median(kind, 1)
        print(f"{label:<34} {wall:7.2f} {ratio:6.2f} {accuracy:9.3f}")
        rows.append([label, wall, ratio, accuracy])
    print(f"attempts of the fine-tuning job in the lost-node fits: {attempts}")
    run.table(f"sync fits, local[{args.nodes}], median of {args.fits} fits each, alternated",
              ["fit", "wall s", "ratio to its reference", "held-out accuracy"], rows,
              f"attempts of the fine-tuning job where a node was lost: {attempts}")
    run.finish()


if __name__ == "__main__":
    main()
