"""What ``sparkdbn train`` builds from its options before Spark starts: the model, the training settings, the
recipe's data, the seed, the GPU settings of the session, and the checks that need no Spark (the model
against the data, the ports of a local master, a local store it may write)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

import rbm
import storage
from rbm.datasets import load_digits01, load_digits28

from ..driver import DEFAULT_MASTER, TrainingSettings, driver_spec, gpu_spark_conf, running_under_spark_submit
from ..executor import check_ports_for_nodes, local_master_threads
from ..watch import is_supervised
from ._options import UsageError, parse_spark_conf

logger = logging.getLogger(__name__)

__all__ = ["TRAIN_DEFAULTS", "build_model", "check_local_ports", "check_local_store_writable",
           "check_model_fits",
           "gpu_conf", "is_classifier", "load_dataset", "on_device", "train_seed", "training_settings"]


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
    "seed": None,  # --seed or the file's seed:, else settings: seed, else 0 (train_seed)
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


def load_dataset(name: str, seed: int) -> tuple[Any, Any, np.ndarray | None, np.ndarray | None]:
    """``(train data, train labels, X_test, y_test)`` for a recipe name or a staged dataset URL."""
    if name in ("digits", "digits01"):
        split = load_digits01(random_state=seed)
    elif name == "digits28":
        split = load_digits28(random_state=seed)
    else:
        return name, None, None, None  # a staged dataset URL: read by the executors
    return split.X_train, split.y_train, split.X_test, split.y_test


def build_model(kind: Any, layers: Sequence[int] | None, n_features: int, n_classes: int, seed: int,
                image_shape: Sequence[int] | None = None) -> Any:
    """The model a config names: a spec dict (with ``kind``), ``"dbn"``, ``"convnet"`` or ``"rbm"``.

    ``layers`` are the hidden layer sizes (default: 100, 100 for a DBN, 100 for an RBM); ``image_shape`` the
    ``(channels, height, width)`` a staged dataset's images had (its ``_meta.json``), a convnet's input shape.
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
        shape = convnet_input_shape(n_features, image_shape)
        small = max(shape[1:]) <= 8
        conv_layers = [
            {"type": "conv", "filters": 8 if small else 20, "kernel": 3 if small else 5, "padding": 1 if small else 0,
             "activation": "relu"},
            {"type": "maxpool", "size": 2},
            {"type": "dense", "units": 64 if small else 200, "activation": "relu"},
        ]
        return rbm.ConvNet(layers=conv_layers, input_shape=shape, n_classes=n_classes,
                           learning_rate=0.05, batch_size=32, random_state=seed)
    raise UsageError(f"unknown model {kind!r}; use dbn, convnet, rbm or a spec mapping with 'kind'")


def convnet_input_shape(n_features: int, image_shape: Sequence[int] | None) -> tuple[int, int, int]:
    """The ``(C, H, W)`` of ``--model convnet``: the staged images' own, else one-channel square images of
    ``n_features`` pixels, said in the log (flat rows do not say their channels: 3 x 12 x 16 = 576 = 24 x 24)."""
    how = "give the shape in --config: model: {kind: convnet, input_shape: [C, H, W], layers: [...]}"
    if image_shape is not None:
        shape = tuple(int(d) for d in image_shape)
        if len(shape) != 3 or int(np.prod(shape)) != n_features:
            raise UsageError(f"the dataset's images are {list(shape)}, which is not {n_features} features; {how}")
        return shape  # type: ignore[return-value]
    side = int(round(np.sqrt(n_features)))
    if side * side != n_features:
        raise UsageError(f"--model convnet takes flat rows as one-channel square images, and {n_features} features "
                         f"are not square; {how}, or stage the images as an NPZ array (n, C, H, W)")
    logger.warning("--model convnet takes the dataset's %d features as one-channel %dx%d images (flat rows do not "
                   "say their channels); for other images, %s", n_features, side, side, how)
    return 1, side, side


#: Epochs per phase when neither the config nor --epochs says: short pretraining, longer fine-tuning.
DEFAULT_EPOCHS = {"finetune": 20, "train": 10}
DEFAULT_PRETRAIN_EPOCHS = 5


def training_settings(options: dict[str, Any], model: Any) -> Any:
    """The :class:`~node.TrainingSettings` of ``train``: its flags, then the config's ``settings:`` over them,
    default epochs per phase of ``model`` where none are given; checked, or a :class:`UsageError`."""
    fields = {"epochs", "partitions", "batch_size", "fanout", "merge_alpha", "scale_rule", "seed", "run_id", "progress",
              "mode", "bind_host", "advertise_host", "port_range"}
    given = {key: options[key] for key in fields if options.get(key) is not None}
    if "epochs" not in given and "epochs" not in (options.get("settings") or {}):
        given["epochs"] = {phase: DEFAULT_EPOCHS.get(phase, DEFAULT_PRETRAIN_EPOCHS) for phase in model.phases()}
    given.update(options.get("settings") or {})
    try:
        settings = TrainingSettings(**given)
        settings.validate()
        settings.check_trains_something(model.phases())  # said by the fit too, but after Spark started
        return settings
    except (TypeError, ValueError) as error:
        raise UsageError(f"training settings: {error}") from error


#: The GPU discovery script shipped with sparkdbn (in a source checkout; a cluster needs it on every host).
DISCOVERY_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sparkdbn-gpus"


def gpu_conf(options: dict[str, Any]) -> dict[str, str]:
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


def on_device(model: Any, options: dict[str, Any]) -> Any:
    """``model`` with the ``device`` and ``precision`` that ``--device``/``--precision`` (or the config) name."""
    chosen = {name: options[name] for name in ("device", "precision") if options.get(name) is not None}
    if not chosen:
        return model
    try:
        return model.set_params(**chosen)
    except ValueError as error:
        raise UsageError(f"a {type(model).__name__} takes no {', '.join(chosen)}: {error}") from error


def train_seed(options: dict[str, Any]) -> int:
    """The one seed of ``train``: of a recipe's held-out split, of the model and of the training (recorded as the
    run's ``settings.seed``, by which ``evaluate --run`` splits the recipe again): ``--seed`` or the config's
    ``seed:``, else its ``settings: seed``, else 0.  Both, differing, are a :class:`UsageError`."""
    given, in_settings = options.get("seed"), (options.get("settings") or {}).get("seed")
    if given is not None and in_settings is not None and int(given) != int(in_settings):
        raise UsageError(f"seed {given} (--seed or the config's seed:) and the config's settings: seed {in_settings} "
                         "differ; a recipe's held-out split, the model and the training take one seed: give it once")
    seed = int(next((seed for seed in (given, in_settings) if seed is not None), 0))
    if not 0 <= seed < 2 ** 63:  # checked again with the settings, after the recipe would have been split by it
        raise UsageError(f"training settings: seed must be an integer in [0, 2**63), got {seed}")
    return seed


def check_local_store_writable(store_url: str, run_id: str | None) -> None:
    """A local store whose ``runs/`` folder (and the run's own, where it exists) this process may not write (a
    read-only file system, another user's folder), said before Spark starts; nothing is written to find out.

    Parameters
    ----------
    store_url : str
        The store's URL; one that is not local is left to the fit (its writes say so).
    run_id : str or None
        The run's name, where given (a resumed run writes into its folder).
    """
    local = storage.local_path(store_url)
    if local is None:
        return
    folders = [os.path.join(local, "runs")] + ([os.path.join(local, "runs", run_id)] if run_id else [])
    for folder in folders:
        if os.path.isdir(folder) and not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(f"the store {store_url!r} is not writable here: this process may not write {folder} "
                             "(a read-only file system or another user's folder); give --store a folder it may write")


def check_local_ports(options: dict[str, Any], settings: Any) -> None:
    """A ``--port-range`` with fewer ports than a local master's nodes, said before Spark starts (the fit checks
    again with the nodes the session has; under spark-submit the master is known only then)."""
    if running_under_spark_submit():
        return
    master = str(options.get("master") or DEFAULT_MASTER)
    nodes = settings.averaging_nodes or local_master_threads(master)
    parallelism = {**(options.get("spark_conf") or {}), **parse_spark_conf(options.get("conf"))}.get(
        "spark.default.parallelism")  # fewer nodes than task threads, where given
    if nodes and parallelism is not None and str(parallelism).strip().isdigit():
        nodes = min(nodes, int(parallelism))
    try:
        check_ports_for_nodes(settings.port_range, int(nodes or 1), master)
    except ValueError as error:
        raise UsageError(str(error)) from error


def check_model_fits(model: Any, X: Any, y: Any, n_features: int, n_classes: int, source: str,
                      staged_range: Any = None) -> None:
    """What the driver would refuse after Spark started, refused before: hyperparameters, width, value range
    (of a staged dataset: the ``value_range`` its meta records)."""
    try:
        replica = rbm.model_from_spec(driver_spec(model.to_spec()))  # the driver checks on its CPU
        shape = n_features if isinstance(X, str) or np.ndim(X) == 2 else tuple(np.shape(X)[1:])
        replica.initialize(shape, np.arange(n_classes) if is_classifier(model) else None)
    except ValueError as error:
        raise UsageError(f"the model does not fit the dataset {source}: {error}") from error
    bounds = replica.input_bounds()
    if bounds is None:
        return
    if isinstance(X, str):
        valid = (isinstance(staged_range, list) and len(staged_range) == 2
                 and all(isinstance(value, (int, float)) and np.isfinite(value) for value in staged_range))
        low, high = (float(staged_range[0]), float(staged_range[1])) if valid else bounds
        remedy = "stage it again with --scale minmax"
    elif np.size(X):
        low, high, remedy = float(np.min(X)), float(np.max(X)), "scale the data"
    else:
        return
    if low < bounds[0] or high > bounds[1]:
        raise UsageError(f"the dataset {source} holds values in [{low:g}, {high:g}]; this model takes "
                         f"[{bounds[0]:g}, {bounds[1]:g}] ({remedy}, or use Gaussian visible units)")


def is_classifier(model: Any) -> bool:
    """Whether ``model`` learns labels (a supervised phase); an RBM alone does not."""
    return any(is_supervised(phase) for phase in model.phases())
