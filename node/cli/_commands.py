"""What each ``sparkdbn`` subcommand does (``cmd_train``, ``cmd_evaluate``, ``cmd_predict``, ``cmd_report``,
``cmd_status``; ``stage``'s is :mod:`._stage_command`), given the options :mod:`._main` read; what ``train``
builds before Spark starts is :mod:`._train_inputs`."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any

import numpy as np
from py4j.protocol import Py4JJavaError

import storage

from ..data import RECIPE_IMAGES, RECIPES, check_output, check_staged_shards, read_staged_frame
from ..driver import Trainer, TrainingSettings, default_store_url, get_spark_session
from ..run import RunView, load_run_model, open_checked_store, open_run
from ..serve import evaluate, raise_input_errors_from, write_predictions
from ..watch import check_report_folder, render_report, run_status
from ._data import TrainedOn, check_known_classes, check_same_scaling, check_same_width, held_out_split
from ._inputs import hdfs_hint, java_message
from ._new_rows import NewRows, check_scale
from ._options import Interrupted, UsageError, closest, interrupt_word, is_interrupt, parse_spark_conf
from ._train_inputs import (
    build_model,
    check_local_ports,
    check_local_store_writable,
    check_model_fits,
    gpu_conf,
    is_classifier,
    load_dataset,
    on_device,
    train_seed,
    training_settings,
)

__all__ = ["cmd_train", "cmd_evaluate", "cmd_predict", "cmd_report", "cmd_status"]

logger = logging.getLogger(__name__)


def _session(options: dict[str, Any]) -> Any:
    conf = gpu_conf(options)
    conf.update(options.get("spark_conf") or {})  # Spark settings given by name win over the GPU flags
    conf.update(parse_spark_conf(options.get("conf")))  # --conf over the config file's spark_conf
    return get_spark_session(options.get("master"), conf=conf)


def _store_url(options: dict[str, Any]) -> str:
    return _as_url(options.get("store") or default_store_url())


def _as_url(given: str) -> str:
    """A local path or ``file:`` URL as an absolute ``file://`` URL (the run record keeps it: a relative one named
    another folder for every command run elsewhere); any other URL as given."""
    local = storage.local_path(given)
    return given if local is None else "file://" + os.path.abspath(os.path.expanduser(local))


def _dataset_url(name: str) -> str:
    """A recipe's name as it is; a staged dataset's path as an absolute ``file://`` URL: the run record keeps it
    (a relative one named another folder for every command run elsewhere), and the executors read it."""
    return name if name in (*RECIPES, "digits01") else _as_url(name)


def _dataset_error(url: str, error: Exception) -> UsageError:
    """``--dataset URL`` names no staged dataset the store has: say so, and name a recipe it may mean."""
    guess = closest(url, RECIPES) if "/" not in url else None  # a recipe's name mistyped, not a path
    hint = f"not a recipe ({', '.join(RECIPES)}; did you mean {guess!r}?), and " if guess else ""
    return UsageError(f"--dataset {url}: {hint}{error}")


def cmd_train(options: dict[str, Any]) -> int:
    asked = str(options["dataset"])  # as given: a mistyped recipe's name is said as typed
    options = {**options, "seed": train_seed(options), "dataset": _dataset_url(asked)}
    X, y, X_test, y_test = load_dataset(str(options["dataset"]), int(options["seed"]))
    if isinstance(X, str):
        try:
            dataset = storage.open_dataset(X)
        except storage.StoreError as error:
            raise _dataset_error(asked, error) from error
        check_staged_shards(dataset)  # a shard gone: said before Spark starts
        meta = dataset.meta
        n_features, n_classes = int(np.prod(meta["feature_shape"])), int(meta.get("n_classes") or 10)
        labelled = bool(meta.get("label_column"))
        images = meta.get("image_shape") or (meta["feature_shape"] if len(meta["feature_shape"]) == 3 else None)
        X_test, y_test = held_out_split(X) or (None, None)  # evaluated after training, as a recipe's split is
    else:
        n_features, n_classes, labelled = int(np.prod(X.shape[1:])), int(y.max()) + 1, True
        images = RECIPE_IMAGES.get(str(options["dataset"]))
    model = build_model(options["model"], options.get("layers"), n_features, n_classes, int(options["seed"]),
                        image_shape=images)
    if not labelled and is_classifier(model):
        raise UsageError(f"the dataset {X} is unlabelled (staged without a label column), but a {options['model']} "
                         "learns labels: train --model rbm on it, or stage the data with its labels (--label-col)")
    model = on_device(model, options)
    check_model_fits(model, X, y, n_features, n_classes, str(options["dataset"]),
                      meta.get("value_range") if isinstance(X, str) else None)
    settings = training_settings(options, model)
    if not isinstance(X, str) and settings.data_origin is None:  # a recipe's arrays: evaluate --run splits it again
        settings = dataclasses.replace(settings, data_origin=f"recipe {options['dataset']}")
    if isinstance(X, str) and settings.validation_fraction:  # said by the fit too, but after Spark started
        raise UsageError(f"settings: validation_fraction holds rows out of arrays, not out of the staged dataset {X}: "
                         f"give settings: validation_data: {X.rstrip('/')}/test (its held-out split) or a split "
                         "staged apart")
    if isinstance(settings.validation_data, str):  # a staged split: looked at before Spark starts
        try:
            storage.open_dataset(settings.validation_data)
        except storage.StoreError as error:
            raise UsageError(f"settings: validation_data {settings.validation_data}: {error}") from error
    if options.get("report"):
        check_report_folder(options["out"])  # a folder of other files: said before training, not after
    check_local_ports(options, settings)
    store_url = _store_url(options)
    store = open_checked_store(store_url, settings.store_retry_timeout_s)  # unreachable: said before Spark starts
    if settings.run_id:
        storage.has_run_record(store, settings.run_id)  # the store's own check of the run's name (a StorePathError)
    check_local_store_writable(store_url, settings.run_id)
    spark = _session(options)
    trainer = Trainer(spark, store_url, settings)
    started = time.perf_counter()
    try:
        model = trainer.fit(model, X, y)  # a CPU copy where the driver cannot hold a GPU model
    except BaseException as interrupt:  # Ctrl-C, SIGTERM: the run record says "failed"; the same run id resumes it
        if trainer.run_id_ is None or not is_interrupt(interrupt):
            raise
        again = "again" if settings.run_id else f"with --run-id {trainer.run_id_}"  # else a new id each time
        raise Interrupted(f"{interrupt_word(interrupt)}; run the same command {again} to resume run "
                          f"{trainer.run_id_}") from interrupt
    # A run done before trains nothing again (docs/training.md): said so, not "trained in".
    done = "trained in" if trainer.history_ else "nothing left to train (every phase was done), in"
    print(f"run {trainer.run_id_}: {done} {time.perf_counter() - started:.1f} s; "
          f"model saved in {trainer.store_url} under runs/{trainer.run_id_}/model")
    if X_test is not None and is_classifier(model):
        report = evaluate(model, (X_test, y_test), spark=spark)
        print(f"evaluation on {len(X_test)} held-out samples (computed with Spark):")
        print(report)
    elif X_test is not None:  # an RBM alone learns no labels: how well it reconstructs unseen data
        error = float(model.reconstruction_error(np.reshape(X_test, (len(X_test), -1))))
        print(f"reconstruction error on {len(X_test)} held-out samples: {error:.5f} (mean squared error per "
              "visible unit of the mean-field reconstruction)")
    else:
        print(f"nothing evaluated: {options['dataset']} has no held-out split (stage it with --test-fraction)")
    if options.get("report"):
        paths = render_report(trainer.store_url, trainer.run_id_, options["out"],
                              retry_timeout_s=settings.store_retry_timeout_s)
        for path in paths:
            print(f"wrote {path}")
    return 0


def _store_retry_timeout_s(options: dict[str, Any]) -> float:
    """How long the store is retried: a config file's ``settings: store_retry_timeout_s``, checked as ``train``
    checks its settings, else the default."""
    try:
        settings = TrainingSettings(**(options.get("settings") or {}))
        settings.validate()
    except (TypeError, ValueError) as error:
        raise UsageError(f"training settings: {error}") from error
    return settings.store_retry_timeout_s


def _open_run(options: dict[str, Any]) -> RunView:
    """The run ``--run`` names in the store ``--store`` names, read once for the whole command."""
    return open_run(_store_url(options), options["run"], retry_timeout_s=_store_retry_timeout_s(options))


#: The recipes ``train --dataset`` loads, by the width of their samples.
RECIPES_BY_WIDTH = {64: "digits", 784: "digits28"}


def _run_recipe(view: RunView) -> tuple[str | None, int]:
    """``(recipe, seed)`` of a run trained on arrays: the recipe its record names (``data.origin``; a record
    written before it did: the recipe of its samples' width, digits where it names none), None for other
    data, and the run's seed, which ``train`` split the recipe by."""
    record = view.record or {}
    data = record.get("data") or {}
    if "origin" in data:
        origin = str(data["origin"] or "")
        recipe = origin[len("recipe "):] if origin.startswith("recipe ") else None
    else:
        shape = data.get("feature_shape")
        recipe = RECIPES_BY_WIDTH.get(int(np.prod(shape))) if shape else "digits"
    return recipe, int((record.get("settings") or {}).get("seed") or 0)


def _staged(flag: str, given: str) -> storage.Dataset:
    """The staged dataset ``flag given`` names (``--dataset``), or a :class:`UsageError` saying what is there instead."""
    url = _dataset_url(given)
    if url in (*RECIPES, "digits01"):
        raise UsageError(f"{flag} {url} is a recipe; {flag} here is a staged dataset. Stage it first (sparkdbn stage "
                         f"--recipe {url} --url URL), then give URL, or URL/test for its held-out split")
    try:
        return storage.open_dataset(url)
    except storage.StoreError as error:
        raise _dataset_error(given, error) from error


def _features_cols_need_input(options: dict[str, Any]) -> None:
    if options.get("features_cols") and not options.get("input"):
        raise UsageError("--features-cols names columns of --input (new rows); a staged dataset's features are its "
                         "own: give --input, or leave --features-cols out")


def cmd_evaluate(options: dict[str, Any]) -> int:
    view = _open_run(options)
    model = load_run_model(view)
    if not is_classifier(model):
        raise UsageError(f"run {options['run']} holds an RBM alone, which learns no labels: evaluate reports "
                         "classifiers (`sparkdbn train` prints an RBM's held-out reconstruction error, and `sparkdbn "
                         f"status --run {options['run']}` shows its validation metrics when it was validated)")
    _features_cols_need_input(options)
    if options.get("input") and options.get("dataset"):  # a config file's dataset: the --input flag overrides
        raise UsageError("evaluate takes --input (a Parquet or CSV file or folder of new rows with their labels) or "
                         "--dataset (a recipe or a staged dataset URL): give one")
    trained = TrainedOn.of(view.record, options["run"])
    dataset = trained.url
    asked = None if options.get("dataset") is None else _dataset_url(str(options["dataset"]))
    staged = asked if asked is not None and asked not in (*RECIPES, "digits01") else None
    # What can be checked without Spark is checked before it starts.
    if options.get("input"):
        new_rows = NewRows.check(options, trained, model, labelled=True)
    elif staged is not None or (asked is None and dataset is not None):  # a staged dataset's held-out split
        url, what = staged or dataset, f"the held-out split of {staged or dataset}"
        try:
            named = storage.open_dataset(url) if staged is not None else None
            if named is not None and named.meta.get("split") == "test":  # a held-out split itself: <url>/test
                data, what = named.read_all(), f"{url}, a held-out split"
            else:
                data = held_out_split(url)
        except storage.StoreError as error:
            if staged is None:  # the dataset the run's record names, not one the user gave
                raise UsageError(f"run {options['run']} trained on the staged dataset {url}, which cannot be read "
                                 f"now ({error}); give --dataset or --input") from error
            raise _dataset_error(str(options["dataset"]), error) from error
        if data is None:
            whose = url if staged else f"run {options['run']} trained on {url}, which"
            raise UsageError(f"{whose} has no held-out split (stage with --test-fraction); give --input or "
                             "another --dataset")
        if named is not None:
            check_same_width("--dataset", url, named.meta, model)
            check_same_scaling("--dataset", url, named.meta, trained)
        check_known_classes(f"--dataset {url}" if staged else what, (named or storage.open_dataset(url)).meta,
                            np.asarray(model.classes_))
        print(f"evaluating on {what}")
    else:  # a recipe's held-out split, as `train --dataset` split it: the run's recipe and seed unless given
        recipe, seed = _run_recipe(view)
        recipe, seed = options.get("dataset") or recipe, seed if options.get("seed") is None else options["seed"]
        if recipe is None:
            raise UsageError(f"run {options['run']} trained on neither a staged dataset nor a recipe (arrays, a "
                             "DataFrame or an RDD of its own): give --input (new rows with their labels) or --dataset")
        _X, _y, X_test, y_test = load_dataset(str(recipe), int(seed))
        if X_test is None:
            raise UsageError("evaluate needs --input (a Parquet file) or a recipe --dataset")
        data = (X_test, y_test)
        print(f"evaluating on the held-out split of {recipe} (seed {seed})")
    spark = _session(options)
    scaling, features_col = None, options["features_col"]
    if options.get("input"):  # new rows: scaled as the run's staged dataset was
        (data, features_col, _), scaling = new_rows.frame(spark), new_rows.scaling
        check_scale(data, features_col, model, scaling, f"--input {options['input']}")
    report = evaluate(model, data, spark=spark, features_col=features_col, label_col=options["label_col"],
                      scaling=scaling)
    print(report)
    return 0


#: The columns ``predict`` adds (predict_dataframe's defaults).
PREDICTION_COLUMNS = ("rawPrediction", "probability", "prediction")


def cmd_predict(options: dict[str, Any]) -> int:
    view = _open_run(options)
    model = load_run_model(view)
    given, url = options.get("input"), options.get("dataset") and _dataset_url(str(options["dataset"]))
    if bool(given) == bool(url):
        raise UsageError("predict needs --input (a Parquet or CSV file or folder of new rows) or --dataset (a "
                         f"staged dataset URL; URL/test for its held-out split){', not both' if given else ''}")
    _features_cols_need_input(options)
    trained = TrainedOn.of(view.record, options["run"])
    # What can be checked without Spark is checked before it starts.
    if given:
        new_rows = NewRows.check(options, trained, model, adds=PREDICTION_COLUMNS)
        inputs = new_rows.files.local or (given,)  # a pattern's matches: each must stay apart from --output
    else:
        staged, inputs = _staged("--dataset", options["dataset"]), (url,)
    source = f"--input {given}" if given else f"--dataset {url}"
    # what can be seen of --output without Spark (checked again when written)
    check_output(options["output"], inputs=inputs, overwrite=bool(options.get("overwrite")))
    if not given:
        check_same_width("--dataset", url, staged.meta, model)
        check_same_scaling("--dataset", url, staged.meta, trained)
    spark = _session(options)
    if given:  # new rows: scaled as the run's staged dataset was; every column of theirs written back
        (frame, features_col, drop), scaling = new_rows.frame(spark), new_rows.scaling
        check_scale(frame, features_col, model, scaling, source)
    else:  # staged rows, as the shards hold them (scaled when staged): their number and label are written
        frame, features_col, scaling, drop = read_staged_frame(spark, staged), "features", None, ("features",)
    try:
        write_predictions(model, frame, options["output"], inputs=inputs, overwrite=bool(options.get("overwrite")),
                          source=source, features_col=features_col, scaling=scaling, drop_columns=drop)
    except Py4JJavaError as error:  # the job or the output's file system failed: one line (--verbose: the trace)
        raise_input_errors_from(error, source)
        message = java_message(error)
        raise UsageError(f"predicting {source} into --output {options['output']} failed: {message}"
                         f"{hdfs_hint(options['output'], message)}") from error
    print(f"wrote predictions of {given or url} to {options['output']}")
    return 0


def cmd_report(options: dict[str, Any]) -> int:
    for path in render_report(_store_url(options), options["run"], options["out"],
                              retry_timeout_s=_store_retry_timeout_s(options)):
        print(f"wrote {path}")
    return 0


def cmd_status(options: dict[str, Any]) -> int:
    print(run_status(_store_url(options), options["run"], retry_timeout_s=_store_retry_timeout_s(options)))
    return 0
