"""Benchmark: the three training modes side by side, with and without a straggler.

One ``local[N]`` Spark session, one store; for each mode (``async``, ``sync``, ``sharing``) and each
straggler factor (1 = none, 3 = one node sleeps twice its compute time), a model is trained on the
same data through the real :class:`node.Trainer`, validated on a held-out fifth of the training set
after every epoch.  The model (``--model``):

* ``dbn`` (default): a DBN (``--hidden``, batch 10, learning rate 0.2 in pretraining and
  fine-tuning), on ``digits`` (8x8) or ``digits28`` flattened; ``--epochs RBM0 RBM1 FINETUNE``
  (default 5 5 20), ``--target`` 0.95 by default;
* ``lenet``: ``rbm.lenet`` (conv 5x5x20, max-pool 2, conv 5x5x50, max-pool 2, dense 500 ReLU,
  softmax 10; SGD at 0.01 with momentum 0.9, batch 64, as ``bench_lenet.py``; ``--updater adam``:
  Adam at 1e-3) on ``digits28`` as (n, 1, 28, 28) images; ``--epochs TRAIN`` (one value: its one
  phase, ``train``; default 3), ``--target`` 0.98 by default.

``--train-rows N`` keeps a stratified subset of N training rows (before the validation fifth is
held out), to keep runs short: digits28 has about 36k (1437 images in 25 shifts).

Printed per run, and as ratios to ``sync`` without a straggler:

* wall time of the fit, and time until the validation accuracy of the model's last phase
  (fine-tuning; LeNet's only phase) first reaches ``--target`` (seconds from the fit's start to
  the end of that epoch; "-" when never reached);
* held-out test accuracy of the final model;
* bytes the mode wrote to and read from the store per partition (means over the run's metrics);
* with a straggler: the share of partitions the slowed node trained, and the fast nodes' idle
  time (the gaps between their partitions, and from their last to the phase's end -- shown apart --,
  summed, and as a share of the phases' time).

    .venv/bin/python scripts/bench_modes.py                       # digits, local[2], 3 modes x {1, 3}
    .venv/bin/python scripts/bench_modes.py --modes async sync --stragglers 1 --target 0.95
    .venv/bin/python scripts/bench_modes.py --data digits28 --epochs 2 2 10 --target 0.97
    .venv/bin/python scripts/bench_modes.py --model lenet --train-rows 12000 --epochs 3   # digits28, target 0.98

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
from sklearn.model_selection import train_test_split

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _results, imported as well (tests)

import node  # noqa: E402
import rbm  # noqa: E402
from rbm.datasets import load_digits01, load_digits28  # noqa: E402

from _results import BenchRun, add_json_option  # noqa: E402


#: What each ``--model`` trains by default: its phases' epochs, the data it takes and the target.
MODEL_DEFAULTS = {
    "dbn": {"epochs": [5, 5, 20], "epoch_names": "RBM0 RBM1 FINETUNE", "data": "digits", "target": 0.95},
    "lenet": {"epochs": [3], "epoch_names": "TRAIN", "data": "digits28", "target": 0.98},
}

#: LeNet's training settings, here and in bench_torch.py's torch LeNet: SGD with momentum at
#: bench_lenet.py's rate, batch 64 per node, no decay of the rate or the weights.
LENET_SETTINGS = {"learning_rate": 0.01, "momentum": 0.9, "lr_decay": 0.0, "l2": 0.0, "batch_size": 64}
#: What ``--updater`` changes in them (Adam: Keras' and PyTorch's default rate).
LENET_UPDATERS = {"sgd": {"updater": "sgd"}, "adam": {"updater": "adam", "learning_rate": 0.001}}


def make_parser(description: str = __doc__.split("\n")[0]) -> argparse.ArgumentParser:
    """The options of this benchmark (``bench_torch.py`` adds its own to them); :func:`check_args` completes them."""
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)
    parser.add_argument("--model", choices=tuple(MODEL_DEFAULTS), default="dbn",
                        help="dbn (default) or lenet (LeNet on digits28 images)")
    parser.add_argument("--data", choices=("digits", "digits28"), default=None,
                        help="default: digits for dbn, digits28 for lenet (which needs 28x28 images)")
    parser.add_argument("--train-rows", type=int, default=None, metavar="N",
                        help="a stratified subset of N training rows, to keep runs short (default: all)")
    parser.add_argument("--nodes", type=int, default=2, help="local[N] (default 2)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--modes", nargs="+", default=["async", "sync", "sharing"])
    parser.add_argument("--stragglers", nargs="+", type=float, default=[1.0, 3.0])
    parser.add_argument("--epochs", nargs="+", type=int, default=None, metavar="N",
                        help="epochs per phase: RBM0 RBM1 FINETUNE for dbn (default 5 5 20), TRAIN for lenet "
                             "(default 3)")
    parser.add_argument("--hidden", nargs=2, type=int, default=[100, 100], help="the DBN's hidden layers")
    parser.add_argument("--updater", choices=tuple(LENET_UPDATERS), default="sgd",
                        help="LeNet's updater: sgd (0.01, momentum 0.9; the default) or adam (1e-3)")
    parser.add_argument("--target", type=float, default=None,
                        help="validation accuracy to time (default 0.95 for dbn, 0.98 for lenet)")
    add_json_option(parser)
    return parser


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Fill the per-model defaults into ``args`` and check the options against the model
    (``parser.error`` exits with a usage message otherwise)."""
    defaults = MODEL_DEFAULTS[args.model]
    args.data = defaults["data"] if args.data is None else args.data
    args.epochs = list(defaults["epochs"]) if args.epochs is None else args.epochs
    args.target = defaults["target"] if args.target is None else args.target
    expected = len(defaults["epochs"])
    if len(args.epochs) != expected:
        parser.error(f"--epochs takes {expected} value{'s' if expected > 1 else ''} for --model {args.model} "
                     f"({defaults['epoch_names']}), got {len(args.epochs)}: {' '.join(map(str, args.epochs))}")
    if any(count < 1 for count in args.epochs):
        parser.error(f"--epochs must be >= 1, got {' '.join(map(str, args.epochs))}")
    if args.model != "lenet" and args.updater != "sgd":
        parser.error("--updater is LeNet's (the DBN's updaters are set in make_dbn)")
    if args.model == "lenet" and args.data != "digits28":
        parser.error("--model lenet trains on 28x28 images: use --data digits28 (the default for lenet)")
    if args.train_rows is not None and args.train_rows < 50:
        parser.error(f"--train-rows must be at least 50 (a few rows of each class), got {args.train_rows}")
    return args


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    return check_args(parser, parser.parse_args(argv))


def load(data: str, model: str = "dbn", train_rows: int | None = None):
    """``(X_train, y_train, X_test, y_test)``: flat rows for the DBN, (n, 1, 28, 28) images for LeNet;
    with ``train_rows``, a stratified subset of that many training rows."""
    if data == "digits":
        split = load_digits01(test_fraction=0.25, random_state=0)
    else:
        split = load_digits28(flatten=model != "lenet")
    X, y = split.X_train, split.y_train
    if train_rows is not None and train_rows < len(X):
        X, _, y, _ = train_test_split(X, y, train_size=train_rows, stratify=y, random_state=0)
    return X, y, split.X_test, split.y_test


def make_dbn(args: argparse.Namespace) -> rbm.DBN:
    """The DBN every mode trains (the trainer sets its epochs per phase from ``--epochs``)."""
    return rbm.DBN(hidden_layer_sizes=tuple(args.hidden), batch_size=10, pretrain_learning_rate=0.2,
                   finetune_learning_rate=0.2, finetune_dropout=0.0, random_state=0)


def lenet_settings(updater: str = "sgd") -> dict:
    """LeNet's training settings with ``updater`` (:data:`LENET_SETTINGS`, :data:`LENET_UPDATERS`)."""
    return {**LENET_SETTINGS, **LENET_UPDATERS[updater]}


def make_lenet(updater: str = "sgd") -> rbm.ConvNet:
    """The LeNet every mode trains, for digits28's (1, 28, 28) images (the trainer sets its epochs)."""
    return rbm.lenet(input_shape=(1, 28, 28), n_classes=10, random_state=0, **lenet_settings(updater))


def make_model(args: argparse.Namespace) -> rbm.DBN | rbm.ConvNet:
    """``--model``'s model, untrained."""
    return make_lenet(args.updater) if args.model == "lenet" else make_dbn(args)


def one_run(spark, store_url: str, args: argparse.Namespace, mode: str, straggler: float, data,
            validation: tuple | None = None, run_id: str | None = None) -> dict:
    """Train and time one model; ``validation``: ``(X_val, y_val)`` held out by the caller, else a fifth of ``X``.

    Besides the figures :func:`show` prints: ``pretrain_s``, seconds from the fit's start to the end
    of the last epoch of the phases before the last (the DBN's pretraining, its validation included;
    0 for LeNet's single phase), ``finetune_scale``, the learning-rate scale the nodes used in the
    last phase's last epoch (docs/scaling-out.md), and ``timings``, where the fit's time went
    (``Trainer.timings_``).
    """
    X, y, X_test, y_test = data
    run_id = run_id or f"modes-{mode}-{straggler:g}".replace(".", "_")
    model = make_model(args)
    phases = model.phases()
    epochs = dict(zip(phases, args.epochs, strict=True))
    last = phases[-1]  # the supervised phase the target is timed in: "finetune" (DBN), "train" (LeNet)
    reached: list[float] = []
    pretrained = {"pretrain_s": 0.0, "finetune_scale": None}
    started = time.perf_counter()

    def on_epoch(summary: dict) -> None:
        if summary["phase"] != last:
            pretrained["pretrain_s"] = time.perf_counter() - started
        else:
            pretrained["finetune_scale"] = summary.get("learning_rate_scale")
        accuracy = (summary.get("validation") or {}).get("val_accuracy")
        if summary["phase"] == last and accuracy is not None and accuracy >= args.target and not reached:
            reached.append(time.perf_counter() - started)

    held_out = {"validation_fraction": 0.2} if validation is None else {"validation_data": validation}
    trainer = node.Trainer(spark, store_url, run_id=run_id, mode=mode, straggler_factor=straggler, epochs=epochs,
                           partitions=args.partitions, progress=False, log_dir=None, on_epoch=on_epoch, **held_out)
    model = trainer.fit(model, X, y)
    wall = time.perf_counter() - started
    metrics = [m for m in node.open_run(store_url, run_id).runs.read_metrics() if not m.get("error")]
    return {"mode": mode, "straggler": straggler, "wall_s": wall, "target_s": reached[0] if reached else None,
            "accuracy": model.score(X_test, y_test), **pretrained, **traffic(metrics, last),
            **straggler_figures(metrics), "timings": trainer.timings_}


def traffic(metrics: list[dict], last_phase: str = "finetune") -> dict:
    """Mean bytes written to and read from the store per trained partition; the last phase's bytes
    written per node and epoch (``finetune_sent_per_node_epoch``, to set beside an allreduce's)."""
    finetune = [m for m in metrics if m["phase"] == last_phase]
    node_epochs = len({(m["node"], m["epoch"]) for m in finetune})
    return {"sent_per_partition": float(np.mean([m["sent_bytes"] for m in metrics])),
            "read_per_partition": float(np.mean([m["read_bytes"] for m in metrics])),
            "finetune_sent_per_node_epoch": sum(m["sent_bytes"] for m in finetune) / node_epochs if node_epochs else None}


def straggler_figures(metrics: list[dict]) -> dict:
    """The slowed node's share of partitions, and the other nodes' idle time while a phase ran.

    A node's idle time in a phase: the gaps between the end of one of its partitions and the start
    of its next (Spark's hand-over of a task, a job's end while another node finishes the last
    partition, the next job's start), and from the end of its last partition to the end of the
    phase's (anyone's: ``fast_idle_phase_end_s``, the wait no scheduling removes -- the phase's
    result needs every node's last partition); summed over phases and fast nodes, and as a share of
    the phases' time (from their first partition's start to their last's end, per fast node).  Each
    partition's report says when it started (``time - task_s``) and ended (``time``).
    """
    slowed = {m["node"] for m in metrics if m.get("slowed_s", 0.0) > 0}
    if not slowed:
        return {"slowed_share": None, "fast_idle_s": None, "fast_idle_phase_end_s": None, "fast_idle_share": None}
    share = sum(1 for m in metrics if m["node"] in slowed) / len(metrics)
    spans: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for m in metrics:
        spans[m["phase"]][m["node"]].append((m["time"] - m["task_s"], m["time"]))
    between, at_ends, phases_s = 0.0, 0.0, 0.0
    for nodes in spans.values():
        phase_start = min(start for partitions in nodes.values() for start, _end in partitions)
        phase_end = max(end for partitions in nodes.values() for _start, end in partitions)
        for name, partitions in nodes.items():
            if name in slowed:
                continue
            partitions.sort()
            between += sum(max(0.0, start - end) for (_s, end), (start, _e) in zip(partitions, partitions[1:]))
            at_ends += phase_end - partitions[-1][1]
            phases_s += phase_end - phase_start
    return {"slowed_share": share, "fast_idle_s": between + at_ends, "fast_idle_phase_end_s": at_ends,
            "fast_idle_share": (between + at_ends) / phases_s if phases_s else None}


def result_rows(results: list[dict]) -> list[list]:
    """:func:`show`'s figures as table rows (``None``: not reached, or no straggler)."""
    base = next((r for r in results if r["mode"] == "sync" and r["straggler"] == 1.0), results[0])
    rows = []
    for r in results:
        rows.append([r["mode"], r["straggler"], r["wall_s"], r["wall_s"] / base["wall_s"], r["target_s"],
                     None if r["target_s"] is None or not base["target_s"] else r["target_s"] / base["target_s"],
                     r["accuracy"], r["sent_per_partition"] / 1e3, r["read_per_partition"] / 1e3, r["slowed_share"],
                     r["fast_idle_s"]])
    return rows


RESULT_COLUMNS = ["mode", "straggler", "wall s", "wall (x sync)", "s to target", "to target (x sync)",
                  "test accuracy", "store kB written per partition", "kB read per partition", "slow node's share",
                  "fast node idle s"]


def show(results: list[dict]) -> None:
    base = next((r for r in results if r["mode"] == "sync" and r["straggler"] == 1.0), results[0])

    def ratio(value, reference):
        return "-" if value is None or not reference else f"{value / reference:.2f}"

    def fmt(value, pattern):
        return "-" if value is None else pattern.format(value)

    def idle(r):
        if r["fast_idle_s"] is None:
            return "-"
        return f"{r['fast_idle_s']:.1f} ({r['fast_idle_phase_end_s']:.1f}), {100 * r['fast_idle_share']:.0f}%"

    print(f"\nratios against {base['mode']} without a straggler ({base['wall_s']:.1f} s wall, "
          f"{fmt(base['target_s'], '{:.1f}')} s to target)")
    print(f"{'mode':8} {'slow':>4} {'wall s':>7} {'wall/x':>6} {'target s':>8} {'target/x':>8} {'acc':>6} "
          f"{'sent kB/p':>9} {'read kB/p':>9} {'slow share':>10} {'fast idle s (phase ends), share':>31}")
    for r in results:
        print(f"{r['mode']:8} {r['straggler']:>4g} {r['wall_s']:7.1f} {ratio(r['wall_s'], base['wall_s']):>6} "
              f"{fmt(r['target_s'], '{:.1f}'):>8} {ratio(r['target_s'], base['target_s']):>8} {r['accuracy']:6.3f} "
              f"{r['sent_per_partition'] / 1e3:9.1f} {r['read_per_partition'] / 1e3:9.1f} "
              f"{fmt(r['slowed_share'], '{:.2f}'):>10} {idle(r):>31}")


def warm_up(spark, folder: str, args: argparse.Namespace, data, validation=None) -> None:
    """An untimed 1-epoch fit: the session's first fit starts the Python workers and imports them, which is
    no mode's cost (without it the first mode measured pays for them)."""
    warm = argparse.Namespace(**{**vars(args), "epochs": [1] * len(args.epochs)})
    one_run(spark, f"file://{folder}/warmup", warm, "sync", 1.0, data, validation=validation)


def describe(args: argparse.Namespace, train_rows: int) -> str:
    """The model (and, where ``--train-rows`` cut them, the training rows) for the results' heading."""
    name = f"DBN {args.hidden}" if args.model == "dbn" else "LeNet"
    return name if args.train_rows is None else f"{name}, {train_rows} training rows"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = BenchRun(__file__, args).start()
    data = load(args.data, args.model, args.train_rows)
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
    print(f"\n{args.data}, {describe(args, len(data[0]))}, epochs {args.epochs}, local[{args.nodes}], "
          f"{args.partitions} partitions, target validation accuracy {args.target}")
    show(results)
    run.table(f"{args.data}, {describe(args, len(data[0]))}, epochs {args.epochs}, local[{args.nodes}], "
              f"{args.partitions} partitions, target validation accuracy {args.target}", RESULT_COLUMNS,
              result_rows(results), "Ratios against sync without a straggler, in this run. Straggler 3: one node "
              "sleeps twice its compute time. Fast node idle: the gaps between its partitions and its wait at each "
              "phase's end, summed.")
    run.finish()


if __name__ == "__main__":
    main()
