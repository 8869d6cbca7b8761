"""Net specs: LeNet's layers, the ConvNet settings, and reading JSON/YAML config files."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np

__all__ = ["LENET_LAYERS", "SETTINGS", "plain", "read_config"]

# Deeplearning4j's LeNet example; the softmax output layer is added by ConvNet.
LENET_LAYERS: list[dict[str, Any]] = [
    {"type": "conv", "filters": 20, "kernel": 5},
    {"type": "maxpool", "size": 2},
    {"type": "conv", "filters": 50, "kernel": 5},
    {"type": "maxpool", "size": 2},
    {"type": "dense", "units": 500, "activation": "relu"},
]
# Every ConvNet constructor argument, in order: what a spec or config file may hold.
SETTINGS = ("layers", "input_shape", "n_classes", "updater", "learning_rate", "momentum", "nesterov", "l2",
            "batch_size", "epochs", "device", "dtype", "random_state", "verbose")


def plain(value: Any) -> Any:
    """``value`` with tuples as lists and numpy scalars as Python ones, so specs survive JSON unchanged."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def read_config(path: str | os.PathLike) -> dict[str, Any]:
    """The settings mapping in a JSON (``.json``) or YAML (``.yaml``/``.yml``) file."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as handle:
        if path.endswith((".yaml", ".yml")):
            import yaml

            spec = yaml.safe_load(handle)
        else:
            spec = json.load(handle)
    if not isinstance(spec, dict):
        raise ValueError(f"config {path!r} must hold a mapping of ConvNet settings, got {type(spec).__name__}")
    return spec
