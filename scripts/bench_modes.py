"""Benchmark: the three training modes side by side, with and without a straggler (issue 11).

One ``local[N]`` Spark session, one store; for each mode (``async``, ``sync``, ``sharing``) and each
straggler factor (1 = none, 3 = one node sleeps twice its compute time), a DBN is trained on the
same data through the real :class:`node.Trainer`, validated on a held-out fifth of the training set
after every epoch.  Printed per run, and as ratios to ``sync`` without a straggler:

* wall time of the fit, and time until the validation accuracy of fine-tuning first reaches
  ``--target`` (seconds from the fit's start to the end of that epoch; "-" when never reached);
* held-out test accuracy of the final model;
* bytes the mode wrote to and read from the store per partition (means over the run's metrics);
* with a straggler: the share of partitions the slowed node trained, and the fast nodes' idle
  time (between their last partition in a Spark job and the job's end, summed).

    .venv/bin/python scripts/bench_modes.py                       # digits, local[2], 3 modes x {1, 3}
    .venv/bin/python scripts/bench_modes.py --modes async sync --stragglers 1 --target 0.95
    .venv/bin/python scripts/bench_modes.py --data digits28 --epochs 2 2 10 --target 0.97

An untimed 1-epoch fit goes first (it starts Spark's Python workers, which no mode should pay for).
Ratios are taken within one run of this script: these machines are noisy, absolute seconds are not
comparable between runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import node  # noqa: E402
import rbm  # noqa: E402
from rbm.datasets import load_digits01, load_digits28  # noqa: E402


def make_parser(description: str = __doc__.split("\n")[0]) -> argparse.ArgumentParser:
    """The options of this benchmark (``bench_torch.py`` adds its own to them)."""
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)
    parser.add_argument("--data", choices=("digits", "digits28"), default="digits")
    parser.add_argument("--nodes", type=int, default=2, help="local[N] (default 2)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--modes", nargs="+", default=["async", "sync", "sharing"])
    parser.add_argument("--stragglers", nargs="+", type=float, default=[1.0, 3.0])
    parser.add_argument("--epochs", nargs=3, type=int, default=[5, 5, 20], metavar=("RBM0", "RBM1", "FINETUNE"))
    parser.add_argument("--hidden", nargs=2, type=int, default=[100, 100])
    parser.add_argument("--target", type=float, default=0.95, help="validation accuracy to time (default 0.95)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return make_parser().parse_args(argv)


def load(data: str):
    split = load_digits01(test_fraction=0.25, random_state=0) if data == "digits" else load_digits28(flatten=True)
    return split.X_train, split.y_train, split.X_test, split.y_test


def make_dbn(args: argparse.Namespace) -> rbm.DBN:
    """The DBN every mode trains (the trainer sets its epochs per phase from ``--epochs``)."""
    return rbm.DBN(hidden_layer_sizes=tuple(args.hidden), batch_size=10, pretrain_learning_rate=0.2,
                   finetune_learning_rate=0.2, finetune_dropout=0.0, random_state=0)


def one_run(spark, store_url: str, args: argparse.Namespace, mode: str, straggler: float, data,
            validation: tuple | None = None) -> dict:
    """Train and time one DBN; ``validation``: ``(X_val, y_val)`` held out by the caller, else a fifth of ``X``.

    Besides the figures :func:`show` prints: ``pretrain_s``, seconds from the fit's start to the end
    of the last pretraining epoch (its validation included), and ``finetune_scale``, the learning-rate
    scale the nodes used in fine-tuning's last epoch (see README, Scaling out).
    """
    X, y, X_test, y_test = data
    run_id = f"modes-{mode}-{straggler:g}".replace(".", "_")
    epochs = dict(zip(("rbm0", "rbm1", "finetune"), args.epochs))
    reached: list[float] = []
    pretrained = {"pretrain_s": 0.0, "finetune_scale": None}
    started = time.perf_counter()

    def on_epoch(summary: dict) -> None:
        if summary["phase"] != "finetune":
            pretrained["pretrain_s"] = time.perf_counter() - started
        else:
            pretrained["finetune_scale"] = summary.get("learning_rate_scale")
        accuracy = (summary.get("validation") or {}).get("val_accuracy")
        if summary["phase"] == "finetune" and accuracy is not None and accuracy >= args.target and not reached:
            reached.append(time.perf_counter() - started)

    held_out = {"validation_fraction": 0.2} if validation is None else {"validation_data": validation}
    trainer = node.Trainer(spark, store_url, run_id=run_id, mode=mode, straggler_factor=straggler, epochs=epochs,
                           partitions=args.partitions, progress=False, log_dir=None, on_epoch=on_epoch, **held_out)
    model = trainer.fit(make_dbn(args), X, y)
    wall = time.perf_counter() - started
    metrics = [m for m in node.open_run(store_url, run_id).runs.read_metrics() if not m.get("error")]
    return {"mode": mode, "straggler": straggler, "wall_s": wall, "target_s": reached[0] if reached else None,
            "accuracy": model.score(X_test, y_test), **pretrained, **traffic(metrics),
            **straggler_figures(metrics, mode)}


def traffic(metrics: list[dict]) -> dict:
    """Mean bytes written to and read from the store per trained partition; fine-tuning's bytes
    written per node and epoch (``finetune_sent_per_node_epoch``, to set beside an allreduce's)."""
    finetune = [m for m in metrics if m["phase"] == "finetune"]
    node_epochs = len({(m["node"], m["epoch"]) for m in finetune})
    return {"sent_per_partition": float(np.mean([m["sent_bytes"] for m in metrics])),
            "read_per_partition": float(np.mean([m["read_bytes"] for m in metrics])),
            "finetune_sent_per_node_epoch": sum(m["sent_bytes"] for m in finetune) / node_epochs if node_epochs else None}


def straggler_figures(metrics: list[dict], mode: str) -> dict:
    """The slowed node's share of partitions, and the other nodes' idle time at the ends of Spark jobs.

    A node's idle time in a job: from the end of its last partition to the end of the job's last
    partition (anyone's); summed over jobs and fast nodes.  ``async`` runs one job per epoch, the
    other modes one job per phase.
    """
    slowed = {m["node"] for m in metrics if m.get("slowed_s", 0.0) > 0}
    share = (sum(1 for m in metrics if m["node"] in slowed) / len(metrics)) if slowed else None
    ends: dict[tuple, dict[str, float]] = defaultdict(dict)
    for m in metrics:
        key = (m["phase"], m["epoch"]) if mode == "async" else (m["phase"],)
        ends[key][m["node"]] = max(ends[key].get(m["node"], 0.0), m["time"])
    idle = sum(max(nodes.values()) - end for nodes in ends.values() for name, end in nodes.items()
               if name not in slowed) if slowed else None
    return {"slowed_share": share, "fast_idle_s": idle}


def show(results: list[dict]) -> None:
    base = next((r for r in results if r["mode"] == "sync" and r["straggler"] == 1.0), results[0])

    def ratio(value, reference):
        return "-" if value is None or not reference else f"{value / reference:.2f}"

    def fmt(value, pattern):
        return "-" if value is None else pattern.format(value)

    print(f"\nratios against {base['mode']} without a straggler ({base['wall_s']:.1f} s wall, "
          f"{fmt(base['target_s'], '{:.1f}')} s to target)")
    print(f"{'mode':8} {'slow':>4} {'wall s':>7} {'wall/x':>6} {'target s':>8} {'target/x':>8} {'acc':>6} "
          f"{'sent kB/p':>9} {'read kB/p':>9} {'slow share':>10} {'fast idle s':>11}")
    for r in results:
        print(f"{r['mode']:8} {r['straggler']:>4g} {r['wall_s']:7.1f} {ratio(r['wall_s'], base['wall_s']):>6} "
              f"{fmt(r['target_s'], '{:.1f}'):>8} {ratio(r['target_s'], base['target_s']):>8} {r['accuracy']:6.3f} "
              f"{r['sent_per_partition'] / 1e3:9.1f} {r['read_per_partition'] / 1e3:9.1f} "
              f"{fmt(r['slowed_share'], '{:.2f}'):>10} {fmt(r['fast_idle_s'], '{:.1f}'):>11}")


def warm_up(spark, folder: str, args: argparse.Namespace, data, validation=None) -> None:
    """An untimed 1-epoch fit: the session's first fit starts the Python workers and imports them, which is
    no mode's cost (without it the first mode measured pays for them)."""
    warm = argparse.Namespace(**{**vars(args), "epochs": [1, 1, 1]})
    one_run(spark, f"file://{folder}/warmup", warm, "sync", 1.0, data, validation=validation)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    data = load(args.data)
    spark = node.get_spark_session(f"local[{args.nodes}]", app_name="bench-modes", conf={"spark.ui.enabled": "false", "spark.driver.memory": "4g"})
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="sparkdbn-bench-modes-") as folder:
            warm_up(spark, folder, args, data)
            for straggler in args.stragglers:
                for mode in args.modes:
                    result = one_run(spark, f"file://{folder}/store", args, mode, straggler, data)
                    print(f"{mode} straggler x{straggler:g}: {result['wall_s']:.1f} s, accuracy {result['accuracy']:.3f}",
                          flush=True)
                    results.append(result)
    finally:
        spark.stop()
    print(f"\n{args.data}, DBN {args.hidden}, epochs {args.epochs}, local[{args.nodes}], {args.partitions} partitions, "
          f"target validation accuracy {args.target}")
    show(results)


if __name__ == "__main__":
    main()
