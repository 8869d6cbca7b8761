"""``sparkdbn stage``: a file of one's own (``--input``) or a recipe staged as a dataset, and the flags that
contradict each other or would be ignored refused before anything is written (:func:`check_stage_flags`)."""

from __future__ import annotations

from typing import Any

import storage

from ..data import input_format, stage_input, stage_recipe
from ._options import UsageError

__all__ = ["STAGE_INPUT_SETTINGS", "check_stage_flags", "cmd_stage"]


#: ``stage`` settings that only a file of one's own (``--input``) takes.
STAGE_INPUT_SETTINGS = ("label_col", "features_cols", "labels", "test_fraction", "scale", "seed")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_stage_flags(options: dict[str, Any], given: set[str]) -> None:
    """Refuse ``stage`` settings that contradict each other or would be ignored, before anything is written.

    Parameters
    ----------
    options : dict
        The command's settings: its defaults, then a config file's, then its flags.
    given : set of str
        The settings a config file or a flag gave (not defaulted): ``recipe`` defaults to digits, which
        ``--input`` does not contradict, but ``--recipe`` does.
    """
    source = options.get("input")
    if not source:
        ignored = [name for name in STAGE_INPUT_SETTINGS if name in given]
        if ignored:
            raise UsageError(f"{_flag(ignored[0])} applies to --input (a file of your own), and there is none: the "
                             f"recipe {options.get('recipe')} would be staged without it")
        return
    if "recipe" in given:
        raise UsageError(f"--input {source} and --recipe {options.get('recipe')}: give one, a file of your own or a "
                         "recipe")
    kind = input_format(source)
    where = {"npz": "its features and labels are its arrays X and y",
             "idx": "its features are its images, its labels in the file --labels names"}
    for name in ("label_col", "features_cols"):
        if name in given and kind in where:
            raise UsageError(f"{_flag(name)} names columns of a CSV or Parquet --input; {source} is {kind.upper()}: "
                             f"{where[kind]}")
    if options.get("seed") is not None and not 0 <= int(options["seed"]) < 2 ** 63:
        raise UsageError(f"--seed must be an integer in [0, 2**63), got {options['seed']}")
    if "labels" in given and kind != "idx":
        raise UsageError(f"--labels names the labels file of an IDX --input; {source} is {kind.upper()}, whose labels "
                         f"are {'its array y' if kind == 'npz' else 'its --label-col column'}")


def cmd_stage(options: dict[str, Any]) -> int:
    try:
        return _stage(options)
    except storage.DestinationNotEmptyError as error:  # the command line's way of asking: --overwrite
        raise UsageError(error.message("--overwrite")) from error


def _stage(options: dict[str, Any]) -> int:
    if options.get("input"):
        columns = options.get("features_cols")
        meta = stage_input(options["input"], options["url"], label_col=options.get("label_col") or None,
                           features_cols=columns.split(",") if isinstance(columns, str) else columns,
                           labels=options.get("labels"), test_fraction=options.get("test_fraction"),
                           scale=options.get("scale"), shards=options.get("shards"),
                           overwrite=bool(options.get("overwrite")), seed=int(options.get("seed") or 0))
        held_out = f"; held out: {options['url'].rstrip('/')}/test" if meta.get("splits") else ""
        classes = "unlabelled" if meta.get("n_classes") is None else f"{meta['n_classes']} classes"
        print(f"staged {options['input']} at {options['url']}: {meta['n_samples']} training samples of "
              f"{meta['feature_shape']} features, {classes}{held_out}"
              f"{'; scaled to [0, 1] (minmax)' if meta.get('scaling') else ''}")
        return 0
    meta = stage_recipe(options["recipe"], options["url"], shards=int(options["shards"]),
                             overwrite=bool(options.get("overwrite")))
    print(f"staged {options['recipe']} at {options['url']}: {meta.get('n_samples')} samples in "
          f"{len(meta.get('shards', []))} shards, feature shape {meta.get('feature_shape')}")
    return 0
