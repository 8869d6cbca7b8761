"""``sparkdbn``: train, evaluate, predict, stage datasets and render reports from the shell.

    sparkdbn train                       # DBN on digits, 2 nodes on local Spark, ./sparkdbn-store
    sparkdbn train --config job.yaml     # settings from JSON/YAML; flags override them
    sparkdbn train --master spark://h:7077 --gpus-per-executor 4 --device gpu   # a node per GPU
    sparkdbn evaluate --run RUN          # the run's saved model on the dataset's test split
    sparkdbn predict --run RUN --input in.parquet --output out.parquet
    sparkdbn stage --recipe digits --url file:///data/sparkdbn-store/datasets/digits --shards 4
    sparkdbn report --run RUN --out plots/
    sparkdbn status --run RUN            # phases, epochs, validation, nodes: where a run stands

Under spark-submit the master comes from spark-submit; otherwise ``--master`` (default
``local[2,4]``: 2 worker threads, so 2 nodes, each task tried up to 4 times).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from pyspark.errors import AnalysisException

import rbm
import storage
from rbm.datasets import load_digits01, load_digits28

from .._errors import NodeError
from ..data import stage_input, stage_recipe, write_parquet_safely
from ..driver import Trainer, TrainingSettings, default_store_url, driver_spec, get_spark_session, gpu_spark_conf
from ..modes import MODE_NAMES
from ..run import load_run_model, open_checked_store, open_run
from ..serve import evaluate, predict_dataframe
from ..watch import check_report_folder, is_supervised, render_report, run_status
from ._data import dataset_scaling, held_out_split, run_dataset_url, scale_frame
from ._options import OneLineParser, UsageError, load_config, parse_spark_conf

__all__ = ["main", "build_parser", "build_model", "load_config", "UsageError"]

logger = logging.getLogger(__name__)


#: Settings of ``train`` when neither the config nor a flag sets them.
TRAIN_DEFAULTS: dict[str, Any] = {
    "master": None,
    "store": None,
    "run_id": None,
    "dataset": "digits",
    "model": "dbn",
    "layers": None,
    "epochs": None,
    "partitions": None,
    "batch_size": None,
    "fanout": None,
    "merge_alpha": None,
    "scale_rule": None,
    "mode": None,
    "seed": 0,
    "bind_host": None,
    "advertise_host": None,
    "port_range": None,
    "device": None,
    "precision": None,
    "gpus_per_executor": None,
    "gpu_discovery_script": None,
    "out": "sparkdbn-report",
    "report": True,
    "progress": True,
}


def _load_dataset(name: str, seed: int) -> tuple[Any, Any, np.ndarray | None, np.ndarray | None]:
    """``(train data, train labels, X_test, y_test)`` for a recipe name or a staged dataset URL."""
    if name in ("digits", "digits01"):
        split = load_digits01(random_state=seed)
    elif name == "digits28":
        split = load_digits28(random_state=seed)
    else:
        return name, None, None, None  # a staged dataset URL: read by the executors
    return split.X_train, split.y_train, split.X_test, split.y_test


def build_model(kind: Any, layers: Sequence[int] | None, n_features: int, n_classes: int, seed: int) -> Any:
    """The model a config names: a spec dict (with ``kind``), ``"dbn"``, ``"convnet"`` or ``"rbm"``.

    ``layers`` are the hidden layer sizes (default: 100, 100 for a DBN, 100 for an RBM).
    """
    if isinstance(kind, dict):
        return rbm.model_from_spec(kind)
    if kind == "dbn":
        hidden = list(layers or [100, 100])
        return rbm.DBN(hidden_layer_sizes=tuple(hidden), batch_size=10, pretrain_learning_rate=0.1,
                       finetune_learning_rate=0.1, random_state=seed)
    if kind == "rbm":
        return rbm.RBM(int((layers or [100])[0]), random_state=seed)
    if kind == "convnet":
        side = int(round(np.sqrt(n_features)))
        if side * side != n_features:
            raise UsageError(f"a convnet needs square images, got {n_features} features")
        small = side <= 8
        conv_layers = [
            {"type": "conv", "filters": 8 if small else 20, "kernel": 3 if small else 5, "padding": 1 if small else 0,
             "activation": "relu"},
            {"type": "maxpool", "size": 2},
            {"type": "dense", "units": 64 if small else 200, "activation": "relu"},
        ]
        return rbm.ConvNet(layers=conv_layers, input_shape=(1, side, side), n_classes=n_classes,
                           learning_rate=0.05, batch_size=32, random_state=seed)
    raise UsageError(f"unknown model {kind!r}; use dbn, convnet, rbm or a spec mapping with 'kind'")


#: Epochs per phase when neither the config nor --epochs says: short pretraining, longer fine-tuning.
DEFAULT_EPOCHS = {"finetune": 20, "train": 10}
DEFAULT_PRETRAIN_EPOCHS = 5


def _settings(options: dict[str, Any], model: Any) -> Any:
    fields = {"epochs", "partitions", "batch_size", "fanout", "merge_alpha", "scale_rule", "seed", "run_id", "progress",
              "mode", "bind_host", "advertise_host", "port_range"}
    given = {key: options[key] for key in fields if options.get(key) is not None}
    if "epochs" not in given and "epochs" not in (options.get("settings") or {}):
        given["epochs"] = {phase: DEFAULT_EPOCHS.get(phase, DEFAULT_PRETRAIN_EPOCHS) for phase in model.phases()}
    given.update(options.get("settings") or {})
    try:
        settings = TrainingSettings(**given)
        settings.validate()
        return settings
    except (TypeError, ValueError) as error:
        raise UsageError(f"training settings: {error}") from error


#: The GPU discovery script shipped with sparkdbn (in a source checkout; a cluster needs it on every host).
DISCOVERY_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sparkdbn-gpus"


def _gpu_conf(options: dict[str, Any]) -> dict[str, str]:
    """The Spark settings of ``--gpus-per-executor`` and ``--gpu-discovery-script`` (none without them)."""
    gpus, script = options.get("gpus_per_executor"), options.get("gpu_discovery_script")
    if gpus is None:
        if script:
            raise UsageError("--gpu-discovery-script goes with --gpus-per-executor N")
        return {}
    if script is None and DISCOVERY_SCRIPT.is_file():
        script = str(DISCOVERY_SCRIPT)
    try:
        return gpu_spark_conf(int(gpus), script)
    except ValueError as error:
        raise UsageError(f"--gpus-per-executor: {error}") from error


def _session(options: dict[str, Any]) -> Any:
    conf = _gpu_conf(options)
    conf.update(options.get("spark_conf") or {})  # Spark settings given by name win over the GPU flags
    conf.update(parse_spark_conf(options.get("conf")))  # --conf over the config file's spark_conf
    return get_spark_session(options.get("master"), conf=conf)


def _on_device(model: Any, options: dict[str, Any]) -> Any:
    """``model`` with the ``device`` and ``precision`` that ``--device``/``--precision`` (or the config) name."""
    chosen = {name: options[name] for name in ("device", "precision") if options.get(name) is not None}
    if not chosen:
        return model
    try:
        return model.set_params(**chosen)
    except ValueError as error:
        raise UsageError(f"a {type(model).__name__} takes no {', '.join(chosen)}: {error}") from error


def _store_url(options: dict[str, Any]) -> str:
    store = options.get("store") or default_store_url()
    return store if "://" in store else "file://" + os.path.abspath(store)


def cmd_train(options: dict[str, Any]) -> int:
    X, y, X_test, y_test = _load_dataset(str(options["dataset"]), int(options["seed"]))
    if isinstance(X, str):
        try:
            meta = storage.open_dataset(X).meta
        except storage.StoreError as error:
            raise UsageError(f"--dataset {X}: {error}") from error
        n_features, n_classes = int(np.prod(meta["feature_shape"])), int(meta.get("n_classes") or 10)
    else:
        n_features, n_classes = int(np.prod(X.shape[1:])), int(y.max()) + 1
    model = build_model(options["model"], options.get("layers"), n_features, n_classes, int(options["seed"]))
    model = _on_device(model, options)
    _check_model_fits(model, X, y, n_features, n_classes, str(options["dataset"]))
    settings = _settings(options, model)
    if options.get("report"):
        check_report_folder(options["out"])  # a folder of other files: said before training, not after
    store_url = _store_url(options)
    open_checked_store(store_url, settings.store_retry_timeout_s)  # unreachable: said before Spark starts
    spark = _session(options)
    trainer = Trainer(spark, store_url, settings)
    started = time.perf_counter()
    model = trainer.fit(model, X, y)  # a CPU copy where the driver cannot hold a GPU model
    print(f"run {trainer.run_id_}: trained in {time.perf_counter() - started:.1f} s; "
          f"model saved in {trainer.store_url} under runs/{trainer.run_id_}/model")
    if X_test is not None and _is_classifier(model):
        report = evaluate(model, (X_test, y_test), spark=spark)
        print(f"evaluation on {len(X_test)} held-out samples (computed with Spark):")
        print(report)
    elif X_test is not None:  # an RBM alone learns no labels: how well it reconstructs unseen data
        error = float(model.reconstruction_error(np.reshape(X_test, (len(X_test), -1))))
        print(f"reconstruction error on {len(X_test)} held-out samples: {error:.5f} (mean squared error per "
              "visible unit of the mean-field reconstruction)")
    if options.get("report"):
        paths = render_report(trainer.store_url, trainer.run_id_, options["out"])
        for path in paths:
            print(f"wrote {path}")
    return 0


def _is_classifier(model: Any) -> bool:
    """Whether ``model`` learns labels (a supervised phase); an RBM alone does not."""
    return any(is_supervised(phase) for phase in model.phases())


def _check_model_fits(model: Any, X: Any, y: Any, n_features: int, n_classes: int, source: str) -> None:
    """What the driver would refuse after Spark started, refused before: hyperparameters, width, value range."""
    try:
        replica = rbm.model_from_spec(driver_spec(model.to_spec()))  # the driver checks on its CPU
        shape = n_features if isinstance(X, str) or np.ndim(X) == 2 else tuple(np.shape(X)[1:])
        replica.initialize(shape, np.arange(n_classes) if _is_classifier(model) else None)
    except ValueError as error:
        raise UsageError(f"the model does not fit the dataset {source}: {error}") from error
    bounds = replica.input_bounds()
    if bounds is not None and not isinstance(X, str) and np.size(X):
        low, high = float(np.min(X)), float(np.max(X))
        if low < bounds[0] or high > bounds[1]:
            raise UsageError(f"the dataset {source} holds values in [{low:g}, {high:g}]; this model takes "
                             f"[{bounds[0]:g}, {bounds[1]:g}] (scale the data, or use Gaussian visible units)")


def _check_input(path: str) -> None:
    """A local ``--input`` that does not exist is refused before Spark starts."""
    local = path[len("file://"):] if path.startswith("file://") else (None if "://" in path else path)
    if local is not None and not os.path.exists(local):
        raise UsageError(f"--input {path} does not exist")


def _read_parquet(spark: Any, path: str) -> Any:
    try:
        return spark.read.parquet(path)
    except AnalysisException as error:
        raise UsageError(f"--input {path} cannot be read as Parquet: {str(error).splitlines()[0]}") from error


def _load_run_model(store_url: str, run: str) -> Any:
    return load_run_model(open_run(store_url, run))


def _run_dataset(store_url: str, run: str) -> str | None:
    """The staged dataset the run trained on (its record says), or None."""
    return run_dataset_url(open_run(store_url, run).record)


def _new_data(spark: Any, options: dict[str, Any], dataset: str | None) -> tuple[Any, str]:
    """``(frame, features column)``: the ``--input`` Parquet, its features scaled as the run's staged dataset was."""
    frame = _read_parquet(spark, options["input"])
    return scale_frame(frame, options["features_col"], dataset_scaling(dataset))


def cmd_evaluate(options: dict[str, Any]) -> int:
    store_url = _store_url(options)
    model = _load_run_model(store_url, options["run"])
    if not _is_classifier(model):
        raise UsageError(f"run {options['run']} holds an RBM alone, which learns no labels: evaluate reports "
                         "classifiers (its held-out reconstruction error is printed by train, and its validation "
                         "metrics are in `sparkdbn status --run ID`)")
    dataset = _run_dataset(store_url, options["run"])
    # What can be checked without Spark is checked before it starts.
    if options.get("input"):
        _check_input(options["input"])
    elif options.get("dataset") is None and dataset is not None:  # the run's own held-out split
        data = held_out_split(dataset)
        if data is None:
            raise UsageError(f"run {options['run']} trained on {dataset}, which has no held-out split "
                             "(stage with --test-fraction); give --input or --dataset")
        print(f"evaluating on the held-out split of {dataset}")
    else:
        _X, _y, X_test, y_test = _load_dataset(str(options.get("dataset") or "digits"), int(options["seed"]))
        if X_test is None:
            raise UsageError("evaluate needs --input (a Parquet file) or a recipe --dataset")
        data = (X_test, y_test)
    spark = _session(options)
    features_col = options["features_col"]
    if options.get("input"):
        data, features_col = _new_data(spark, options, dataset)
    print(evaluate(model, data, spark=spark, features_col=features_col, label_col=options["label_col"]))
    return 0


def cmd_predict(options: dict[str, Any]) -> int:
    store_url = _store_url(options)
    model = _load_run_model(store_url, options["run"])
    if not options.get("input"):
        raise UsageError("predict needs --input (a Parquet file or folder with a features column)")
    _check_input(options["input"])
    dataset = _run_dataset(store_url, options["run"])
    spark = _session(options)
    frame, features_col = _new_data(spark, options, dataset)
    result = predict_dataframe(model, frame, features_col=features_col)
    if features_col != options["features_col"]:
        result = result.drop(features_col)  # the scaled copy: the input's own columns are what is written
    write_parquet_safely(result, options["output"], inputs=(options["input"],), overwrite=bool(options.get("overwrite")))
    print(f"wrote predictions of {options['input']} to {options['output']}")
    return 0


def cmd_stage(options: dict[str, Any]) -> int:
    if options.get("input"):
        columns = options.get("features_cols")
        meta = stage_input(options["input"], options["url"], label_col=options.get("label_col") or None,
                           features_cols=columns.split(",") if isinstance(columns, str) else columns,
                           labels=options.get("labels"), test_fraction=options.get("test_fraction"),
                           scale=options.get("scale"), shards=options.get("shards"),
                           overwrite=bool(options.get("overwrite")), seed=int(options.get("seed") or 0))
        held_out = f"; held out: {options['url'].rstrip('/')}/test" if meta.get("splits") else ""
        print(f"staged {options['input']} at {options['url']}: {meta['n_samples']} training samples of "
              f"{meta['feature_shape']} features, {meta.get('n_classes')} classes{held_out}"
              f"{'; scaled to [0, 1] (minmax)' if meta.get('scaling') else ''}")
        return 0
    meta = stage_recipe(options["recipe"], options["url"], shards=int(options["shards"]),
                             overwrite=bool(options.get("overwrite")))
    print(f"staged {options['recipe']} at {options['url']}: {meta.get('n_samples')} samples in "
          f"{len(meta.get('shards', []))} shards, feature shape {meta.get('feature_shape')}")
    return 0


def cmd_report(options: dict[str, Any]) -> int:
    for path in render_report(_store_url(options), options["run"], options["out"]):
        print(f"wrote {path}")
    return 0


def cmd_status(options: dict[str, Any]) -> int:
    print(run_status(_store_url(options), options["run"]))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="sparkdbn", description=__doc__.split("\n\n")[0],
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", "-v", action="store_true", help="log at INFO level")
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--config", help="JSON or YAML file of settings (flags override it)")
        sub.add_argument("--master", help="Spark master (ignored under spark-submit); default local[2,4]")
        sub.add_argument("--store", help="store URL or path; default ./sparkdbn-store")

    def spark_settings(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--conf", action="append", metavar="KEY=VALUE",
                         help="a Spark setting, as spark-submit takes it (repeatable); settings spark-submit "
                              "was given are never overridden by sparkdbn's defaults")

    train = commands.add_parser("train", help="train a model on Spark, evaluate it, write the report plots")
    common(train)
    spark_settings(train)
    train.add_argument("--run-id", help="run name in the store; an existing run resumes")
    train.add_argument("--dataset", help="digits (default), digits28, or a staged dataset URL")
    train.add_argument("--model", help="dbn (default), convnet or rbm")
    train.add_argument("--layers", type=lambda text: [int(v) for v in text.split(",")],
                       help="hidden layer sizes, e.g. 100,100")
    train.add_argument("--epochs", type=int, help="epochs per phase")
    train.add_argument("--partitions", type=int, help="RDD partitions per epoch")
    train.add_argument("--batch-size", type=int)
    train.add_argument("--fanout", type=int, help="peers merged per partition at most")
    train.add_argument("--merge-alpha", type=float, help="weight of the peers' mean in a merge")
    train.add_argument("--scale-rule", choices=("auto", "linear", "sqrt", "none"),
                       help="how learning rates follow the number of nodes "
                            "(default auto: linear while nodes take few steps per epoch)")
    train.add_argument("--mode", choices=MODE_NAMES,
                       help="how nodes combine their progress: async (default), sync or sharing")
    train.add_argument("--seed", type=int)
    train.add_argument("--bind-host", help="where each node listens (default: automatic -- loopback on local[N], "
                       "else SPARK_LOCAL_IP or the interface that reaches the driver; 0.0.0.0 needs --advertise-host)")
    train.add_argument("--advertise-host", help="host name or address peers connect to (default: the bind host)")
    train.add_argument("--port-range", help="ports the nodes bind, e.g. 40000-40100 (default: any free port)")
    train.add_argument("--device", choices=("cpu", "gpu", "auto"),
                       help="where the nodes compute: cpu, gpu (the GPU Spark assigns each task; fails without one) "
                            "or auto (that GPU where cupy sees it, else the CPU); default: the model's (cpu)")
    train.add_argument("--precision", choices=rbm.PRECISIONS,
                       help="the GEMMs' and convolutions' precision on GPUs with tensor cores (default float32)")
    train.add_argument("--gpus-per-executor", type=int, metavar="N",
                       help="Spark hands each executor N GPUs and each task one: a node per GPU (sets "
                            "spark.executor/task/worker.resource.gpu.*; before the session starts)")
    train.add_argument("--gpu-discovery-script", metavar="PATH",
                       help="with --gpus-per-executor: the script that lists a host's GPUs, a path on every "
                            "executor host (default: scripts/sparkdbn-gpus of this checkout)")
    train.add_argument("--out", help="folder for the report plots (default ./sparkdbn-report)")
    train.add_argument("--no-report", dest="report", action="store_const", const=False, default=None)
    train.add_argument("--no-progress", dest="progress", action="store_const", const=False, default=None)
    train.set_defaults(handler=cmd_train, defaults=TRAIN_DEFAULTS)

    for name, handler, text in (("evaluate", cmd_evaluate, "evaluate a run's model with Spark"),
                                ("predict", cmd_predict, "add prediction columns to a Parquet dataset")):
        sub = commands.add_parser(name, help=text)
        common(sub)
        spark_settings(sub)
        sub.add_argument("--run", required=True, help="the run whose saved model to use")
        sub.add_argument("--input", help="Parquet input with a features column (and a label column)")
        sub.add_argument("--features-col")
        sub.add_argument("--label-col")
        if name == "predict":
            sub.add_argument("--output", required=True, help="Parquet output folder (new or empty)")
            sub.add_argument("--overwrite", action="store_const", const=True,
                             help="replace predictions an earlier predict wrote to --output (nothing else)")
        else:
            sub.add_argument("--dataset", help="recipe whose test split to use (default: the held-out split of "
                                               "the staged dataset the run trained on, else digits)")
        sub.set_defaults(handler=handler, defaults={"dataset": None, "seed": 0, "features_col": "features",
                                                    "label_col": "label"})

    stage = commands.add_parser("stage", help="stage a file of your own or a dataset recipe as Parquet shards")
    stage.add_argument("--config")
    stage.add_argument("--input", help="a CSV, Parquet, NPZ (arrays X, y) or IDX file (.gz too), path or URL")
    stage.add_argument("--label-col", help="--input's label column (default label; '' for none)")
    stage.add_argument("--features-cols", help="--input's feature columns, comma-separated (default: every other)")
    stage.add_argument("--labels", help="the IDX labels file of an IDX --input")
    stage.add_argument("--test-fraction", type=float, help="hold out this stratified share at <url>/test")
    stage.add_argument("--scale", choices=("minmax",), help="scale each feature to [0, 1] by the training "
                       "part's min/max (recorded in _meta.json, applied again to new data)")
    stage.add_argument("--seed", type=int, help="seed of the held-out split (default 0)")
    stage.add_argument("--recipe", help="digits or digits28 (without --input)")
    stage.add_argument("--url", help="dataset directory URL, e.g. file:///data/store/datasets/digits")
    stage.add_argument("--shards", type=int)
    stage.add_argument("--overwrite", action="store_const", const=True,
                       help="replace a dataset staged at --url before (nothing else is ever replaced)")
    stage.set_defaults(handler=cmd_stage, defaults={"recipe": "digits", "url": None, "shards": 4,
                                                    "label_col": "label"})

    report = commands.add_parser("report", help="render the PNG plots of a run")
    common(report)
    report.add_argument("--run", required=True)
    report.add_argument("--out", help="output folder (default ./sparkdbn-report)")
    report.set_defaults(handler=cmd_report, defaults={"out": "sparkdbn-report"})

    status = commands.add_parser("status", help="where a run stands: phases, epochs, validation, nodes")
    status.add_argument("--store", help="store URL or path; default ./sparkdbn-store")
    status.add_argument("--run", required=True)
    status.set_defaults(handler=cmd_status, defaults={})
    parser.set_defaults(subparsers=commands.choices)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sparkdbn`` console script; returns the exit status.

    Mistakes in what was asked (a missing file or run, a model that does not fit the data, a store
    that does not answer) print one line ``sparkdbn <command>: <what is wrong>`` and return 2.
    """
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser: `sparkdbn train: unrecognized arguments: ...`
        args.subparsers[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        options = dict(args.defaults)
        internal = ("handler", "defaults", "config", "command", "verbose", "subparsers")
        known = set(options) | {key for key in vars(args) if key not in internal}
        options.update(load_config(getattr(args, "config", None), known))
        options.update({key: value for key, value in vars(args).items() if value is not None and key not in internal})
        parse_spark_conf(options.get("conf"))  # a malformed --conf is said before anything runs
        if args.command == "stage" and not options.get("url"):
            raise UsageError("stage needs --url (the dataset directory)")
        return int(args.handler(options) or 0)
    except (NodeError, storage.StoreError, UsageError) as error:
        if args.verbose:
            traceback.print_exc()
        print(f"sparkdbn {args.command}: {error}", file=sys.stderr)
        return 2

