"""Staging what only the Spark side knows: Spark DataFrames and the built-in dataset recipes.

Both end in :func:`storage.stage_arrays` (Parquet shards + ``_meta.json``): ``storage`` knows
files, runs, weights and datasets, not Spark and not the models, so the two are composed here.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from rbm import datasets
from storage import DatasetError, Store, open_store, stage_arrays, stage_split_pair

from .._errors import InputDataError
from ._frames import check_label_column, feature_column_kind, features_from_arrow, labels_from_arrow

__all__ = ["RECIPE_IMAGES", "RECIPES", "stage_dataframe", "stage_recipe"]

logger = logging.getLogger(__name__)

#: Built-in datasets ``stage_recipe`` knows.
RECIPES = ("digits", "digits28")

#: The images of each recipe, ``(channels, height, width)`` (``digits01`` is the digits recipe's split).
RECIPE_IMAGES = {"digits": (1, 8, 8), "digits01": (1, 8, 8), "digits28": (1, 28, 28)}


def stage_dataframe(
    url: str | Store,
    df: Any,
    features_col: str = "features",
    label_col: str | None = "label",
    *,
    dtype: str = "float32",
    feature_shape: tuple[int, ...] | None = None,
    seed: int | None = 0,
    **stage_options: Any,
) -> dict:
    """Stage a Spark DataFrame whose features column is an array or a ``pyspark.ml`` Vector.

    The rows travel to the driver as Arrow record batches (``DataFrame.toArrow``) and are
    converted column-wise (:mod:`node.data._frames`); nothing is done per row in Python.  They are
    shuffled before they are cut into shards, as ``sparkdbn stage`` shuffles a file's: the shards are
    a fit's partitions, and rows sorted or grouped by label would give each node a few classes.

    Parameters
    ----------
    url : str or Store
        Where to stage the dataset.
    df : pyspark.sql.DataFrame
        The rows to stage.
    features_col : str
        Column of the features.
    label_col : str or None
        Column of the labels (None for unlabelled data); labels of a single class are refused
        (:class:`InputDataError`): a classifier needs at least 2, an RBM none.
    dtype : str
        Feature dtype to store (Spark vectors hold doubles).
    feature_shape : tuple of int, optional
        Reshape each sample, e.g. ``(1, 28, 28)``.
    seed : int or None
        Seeds the shuffle (the same seed, the same shards); None keeps the frame's order.
    **stage_options
        Passed on to :func:`storage.stage_arrays` (``shards``, ``overwrite``, ...).
    """
    feature_column_kind(df, features_col)
    if label_col is not None:
        check_label_column(df, label_col)
    selected = df.select(*[column for column in (features_col, label_col) if column is not None])
    table = selected.toArrow()
    if table.num_rows == 0:
        raise InputDataError("empty input: the DataFrame has no rows")
    X = features_from_arrow(table.column(0), name=features_col, dtype=dtype)
    if feature_shape is not None:
        X = X.reshape((len(X), *feature_shape))
    y = labels_from_arrow(table.column(1), name=label_col) if label_col is not None else None
    if y is not None and len(classes := np.unique(y)) == 1:  # as `sparkdbn stage` refuses it, before a write
        raise InputDataError(f"label column {label_col!r} holds one class ({classes[0].item()!r}): a classifier needs "
                             "at least 2; stage without labels (label_col=None) for an RBM")
    if seed is not None:
        if int(seed) < 0:
            raise InputDataError(f"seed must be >= 0 or None, got {seed}")
        rows = np.random.default_rng(int(seed)).permutation(len(X))
        X, y = X[rows], (None if y is None else y[rows])
    return stage_arrays(url, X, y, extra_meta={"source": "spark-dataframe", "seed": seed}, **stage_options)


def stage_recipe(recipe: str, url: str | Store, *, shards: int | None = None, random_state: int = 0,
                 **stage_options: Any) -> dict:
    """Stage a built-in dataset: training split at ``url``, held-out split at ``url/test``.

    Recipes: ``"digits"`` (scikit-learn's 8x8 digits, (n, 64) float32 in [0, 1]) and
    ``"digits28"`` (the same digits upsampled to 28x28, training images augmented with
    integer shifts, held-out images never augmented nor in training; (n, 784) float32).
    Both are deterministic for a given ``random_state``.  The held-out split has one shard
    per ``shards`` too when it is large enough, else fewer.

    Returns
    -------
    dict
        The meta of the training split; ``meta["splits"]["test"]`` is the relative path of
        the held-out split (open it with ``open_dataset(url + "/test")``).
    """
    if recipe == "digits":
        split = datasets.load_digits01(random_state=random_state)
    elif recipe == "digits28":
        split = datasets.load_digits28(random_state=random_state)
    else:
        raise DatasetError(f"unknown recipe {recipe!r}; known recipes: {', '.join(RECIPES)}")
    store = open_store(url, user=stage_options.pop("user", None), retry_timeout_s=stage_options.pop("retry_timeout_s", 30.0))
    name = stage_options.pop("name", recipe)
    extra = {"source": f"recipe:{recipe}", "random_state": random_state,
             "image_shape": list(RECIPE_IMAGES[recipe])}  # staged flat: the images' shape, what a convnet takes
    overwrite = bool(stage_options.pop("overwrite", False))
    test_shards = None if shards is None else min(shards, len(split.X_test))
    meta, test_meta = stage_split_pair(store, (split.X_train, split.y_train), (split.X_test, split.y_test),
                                       shards=shards, test_shards=test_shards, name=name, extra_meta=extra,
                                       overwrite=overwrite, **stage_options)
    logger.info("recipe %s: %d training samples at %s, %d held out at %s/test", recipe, meta["n_samples"],
                store.url, test_meta["n_samples"], store.url)
    return meta
