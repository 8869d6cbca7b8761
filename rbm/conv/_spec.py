"""Net specs: LeNet's layers, and JSON-safe copies of layer specs."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

__all__ = ["LENET_LAYERS", "plain"]

# Deeplearning4j's LeNet example; the softmax output layer is added by ConvNet.
LENET_LAYERS: list[dict[str, Any]] = [
    {"type": "conv", "filters": 20, "kernel": 5},
    {"type": "maxpool", "size": 2},
    {"type": "conv", "filters": 50, "kernel": 5},
    {"type": "maxpool", "size": 2},
    {"type": "dense", "units": 500, "activation": "relu"},
]


def plain(value: Any) -> Any:
    """``value`` with tuples as lists and numpy scalars as Python ones, so specs survive JSON unchanged."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
