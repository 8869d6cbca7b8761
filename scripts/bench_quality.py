#!/usr/bin/env python
"""Short-run quality benchmark: the DBN on digits28 and the RBM on digits, over seeds, against references.

A change of defaults can lower the DBN's held-out accuracy after a short fit by 1-2 points with no
test noticing; this prints the figures that show such a loss, every row measured in this run, one BLAS thread:

* **DBN**: ``DBN((128, 128), pretrain_epochs=2, finetune_epochs=4)``, defaults otherwise, on
  ``load_digits28()`` (35,950 shifted training images, 359 held-out ones); held-out accuracy.
  Against, in the same run: the same DBN with round 1's fine-tuning (rate 0.05, no dropout, no anneal:
  c57343f's defaults, which reached 0.9822 on seeds 0-4 here), the same without the fit's anneal and
  dropout ramp (154f46c's defaults: the regression), and scikit-learn's ``MLPClassifier((128, 128))``
  for as many passes over the data (8: the DBN's 2 + 2 + 4).
* **RBM**: ``RBM(100)`` features + logistic regression on scikit-learn's nudged digits, with its RBM
  example's arguments (``learning_rate=0.06, n_iter=10``; the classifier with ``tol=1e-4``), against
  the same pipeline with scikit-learn's ``BernoulliRBM``.
* **DBN on Spark** (``--parts spark``, not in the defaults): the same DBN trained by ``node.Trainer``
  on ``local[2]`` (2 nodes, ``async``, the fit's default partitions, the same epochs, the trainer's
  ``seed`` the model's), whose nodes place each partition in the phase's plan (the fine-tuning anneal
  and dropout ramp of ``fit``), against the same without both (154f46c's steps: what every Spark fit
  did before), and one process's ``fit`` of the defaults.  One Spark session for the block; each
  Python worker (a node) at one BLAS thread.

Each row: per-seed scores, mean, standard deviation, and the difference of the means from the
first row of its block (our defaults) in points.  Seconds per fit are printed for orientation only.

Run:  .venv/bin/python scripts/bench_quality.py [--quick] [--seeds 0 1 2 3 4] [--parts dbn rbm spark] [--json [PATH]]
(``--quick``: seeds 0-2, the DBN against round 1's fine-tuning only; about 4 minutes on a quiet core.
``--json``: also write the tables, stamped with machine and date, for the docs: ``scripts/_results.py``.)
"""

from __future__ import annotations

import os as _os, sys as _sys  # noqa: E402 -- first: run inside the project's virtualenv
_sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))
import _venv  # noqa: E402
_venv.ensure()

import argparse
import tempfile
import time
import warnings
from typing import Any, Callable

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import BernoulliRBM, MLPClassifier
from threadpoolctl import threadpool_limits

import node
from rbm import DBN, RBM
from rbm.datasets import Split, load_digits28, load_nudged_digits

from _results import BenchRun, add_json_option

DBN_SIZES, PRETRAIN_EPOCHS, FINETUNE_EPOCHS = (128, 128), 2, 4
ROUND_ONE_FINETUNING = dict(finetune_learning_rate=0.05, finetune_dropout=0.0, finetune_anneal_fraction=0.0)
BEFORE_ISSUE_34 = dict(finetune_anneal_fraction=0.0, finetune_dropout_ramp_epochs=0.0)
RBM_EXAMPLE = dict(n_components=100, learning_rate=0.06, n_iter=10)  # scikit-learn's RBM example's arguments
SPARK_NODES = 2


def make_dbn(seed: int, **settings: Any) -> DBN:
    return DBN(DBN_SIZES, pretrain_epochs=PRETRAIN_EPOCHS, finetune_epochs=FINETUNE_EPOCHS, random_state=seed,
               **settings)


def dbn_rows(full: bool) -> dict[str, Callable[[int], Any]]:
    """Row name -> a classifier for a seed, our defaults first."""
    rows: dict[str, Callable[[int], Any]] = {
        "DBN, defaults": make_dbn,
        "DBN, round 1's fine-tuning (c57343f)": lambda seed: make_dbn(seed, **ROUND_ONE_FINETUNING),
    }
    if full:
        rows["DBN, no anneal nor dropout ramp (154f46c)"] = lambda seed: make_dbn(seed, **BEFORE_ISSUE_34)
        passes = PRETRAIN_EPOCHS * len(DBN_SIZES) + FINETUNE_EPOCHS
        rows[f"scikit-learn MLPClassifier({DBN_SIZES}), {passes} epochs"] = (
            lambda seed: MLPClassifier(DBN_SIZES, max_iter=passes, random_state=seed))
    return rows


def rbm_rows() -> dict[str, Callable[[int], Any]]:
    return {
        "RBM(100) + logistic regression": lambda seed: RBM(random_state=seed, **RBM_EXAMPLE),
        "scikit-learn BernoulliRBM(100) + logistic regression": lambda seed: BernoulliRBM(random_state=seed,
                                                                                          **RBM_EXAMPLE),
    }


def spark_rows(spark: Any, folder: str) -> dict[str, Any]:
    """Row name -> (a DBN for a seed, how it is scored): on Spark with and without the plan, then one process."""
    epochs = {**{f"rbm{k}": PRETRAIN_EPOCHS for k in range(len(DBN_SIZES))}, "finetune": FINETUNE_EPOCHS}

    def on_spark(model: DBN, split: Split) -> float:
        trainer = node.Trainer(spark, f"file://{folder}/store", epochs=epochs, seed=int(model.random_state),
                               progress=False, log_dir=None)
        return float(trainer.fit(model, split.X_train, split.y_train).score(split.X_test, split.y_test))

    return {
        f"DBN on Spark, {SPARK_NODES} nodes: defaults, each partition placed in the plan": (make_dbn, on_spark),
        f"DBN on Spark, {SPARK_NODES} nodes: no anneal nor dropout ramp (as before)": (
            lambda seed: make_dbn(seed, **BEFORE_ISSUE_34), on_spark),
        "DBN, one process (fit), defaults": (make_dbn, classifier_accuracy),
    }


def classifier_accuracy(model: Any, split: Split) -> float:
    return float(model.fit(split.X_train, split.y_train).score(split.X_test, split.y_test))


def feature_accuracy(model: Any, split: Split) -> float:
    """RBM features + logistic regression (scikit-learn's example, with ``tol=1e-4``)."""
    features = model.fit(split.X_train).transform(split.X_train)
    classifier = LogisticRegression(solver="newton-cg", C=6000, tol=1e-4, max_iter=2000).fit(features, split.y_train)
    return float(classifier.score(model.transform(split.X_test), split.y_test))


def run_block(run: BenchRun, title: str, rows: dict[str, Any], score: Callable[[Any, Split], float] | None,
              split: Split, seeds: list[int]) -> dict[str, list[float]]:
    """Score every row on every seed; print a line per row as it completes; record the block as a table.

    A row is a model for a seed, scored by ``score``, or a pair (a model for a seed, its own score).
    """
    print(f"{title}\n  {'':58s} {'per seed':>{8 * len(seeds)}s}    mean   (std)   vs first   s/fit")
    results: dict[str, list[float]] = {}
    table = []
    for name, build in rows.items():
        build, row_score = build if isinstance(build, tuple) else (build, score)
        started = time.perf_counter()
        scores = [row_score(build(seed), split) for seed in seeds]
        results[name] = scores
        seconds = (time.perf_counter() - started) / len(seeds)
        difference = 100 * (np.mean(scores) - np.mean(next(iter(results.values()))))
        versus = "" if len(results) == 1 else f"{difference:+7.2f} pt"
        print(f"  {name:58s} " + " ".join(f"{value:7.4f}" for value in scores)
              + f"  {np.mean(scores):7.4f} ({np.std(scores):.4f}) {versus:>9s} {seconds:7.1f}", flush=True)
        table.append([name, *scores, np.mean(scores), np.std(scores), None if len(results) == 1 else difference,
                      seconds])
    run.table(title, ["", *(f"seed {seed}" for seed in seeds), "mean", "std", "vs first row (points)", "s a fit"],
              table, "Held-out accuracy; one BLAS thread; seconds a fit are for orientation only.")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0-4 (--quick: 0-2)")
    parser.add_argument("--quick", action="store_true", help="3 seeds; the DBN against round 1's fine-tuning only")
    parser.add_argument("--parts", nargs="+", choices=["dbn", "rbm", "spark"], default=["dbn", "rbm"],
                        help="spark: the DBN trained by node.Trainer on local[2] (not in the defaults)")
    add_json_option(parser)
    args = parser.parse_args()
    run = BenchRun(__file__, args).start()
    seeds = args.seeds if args.seeds is not None else ([0, 1, 2] if args.quick else [0, 1, 2, 3, 4])
    started = time.perf_counter()
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # the MLP's epochs are the budget, on purpose
        if "dbn" in args.parts:
            split = load_digits28()
            title = (f"DBN{DBN_SIZES} on digits28 ({len(split.X_train)} training rows, {len(split.X_test)} held out), "
                     f"{PRETRAIN_EPOCHS} pretraining + {FINETUNE_EPOCHS} fine-tuning epochs: held-out accuracy, "
                     f"seeds {seeds}")
            run_block(run, title, dbn_rows(full=not args.quick), classifier_accuracy, split, seeds)
        if "rbm" in args.parts:
            split = load_nudged_digits()
            print()
            title = (f"RBM features + logistic regression on nudged digits ({len(split.X_train)} training rows), "
                     f"{RBM_EXAMPLE}: held-out accuracy, seeds {seeds}")
            run_block(run, title, rbm_rows(), feature_accuracy, split, seeds)
        if "spark" in args.parts:
            spark_block(run, seeds)
    print(f"\n{time.perf_counter() - started:.0f} s in all, one BLAS thread")
    run.finish()


def spark_block(run: BenchRun, seeds: list[int]) -> None:
    """The DBN block on Spark (:func:`spark_rows`), in a ``local[2]`` session of its own."""
    split = load_digits28()
    spark = node.get_spark_session(f"local[{SPARK_NODES}]", app_name="bench-quality",
                                   conf={"spark.ui.enabled": "false"})
    try:
        with tempfile.TemporaryDirectory(prefix="bench-quality-") as folder:
            print()
            title = (f"DBN{DBN_SIZES} on digits28 trained by node.Trainer on local[{SPARK_NODES}] (async), "
                     f"{PRETRAIN_EPOCHS} pretraining + {FINETUNE_EPOCHS} fine-tuning epochs: held-out accuracy, "
                     f"seeds {seeds}")
            run_block(run, title, spark_rows(spark, folder), None, split, seeds)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
