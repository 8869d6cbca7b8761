"""The GPU stand-in of the CPU suite: ``fake_cupy/cupy`` answers what sparkdbn asks a GPU before it computes.

In this process, :func:`install_fake_cupy` puts it in ``sys.modules`` for one test; in a child
process, put :data:`FAKE_CUPY_PATH` first on ``PYTHONPATH``.  The GPUs it shows come from the
``FAKE_CUPY_GPUS`` environment variable (:func:`gpus_env`).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

__all__ = ["FAKE_CUPY_PATH", "gpus_env", "install_fake_cupy"]

#: The folder holding the fake ``cupy`` package.
FAKE_CUPY_PATH = str(Path(__file__).resolve().parent / "fake_cupy")


def gpus_env(*gpus: dict) -> str:
    """``FAKE_CUPY_GPUS`` for GPUs given as dicts (name, total, free, busy)."""
    return json.dumps([{"name": "Fake GPU", "total": 80 << 30, "free": 70 << 30, "busy": False, **gpu}
                       for gpu in gpus])


def install_fake_cupy(monkeypatch: pytest.MonkeyPatch, *gpus: dict) -> types.ModuleType:
    """A fresh fake cupy as ``cupy`` for the test, showing ``gpus`` (default: one idle 80 GB GPU)."""
    monkeypatch.setenv("FAKE_CUPY_GPUS", gpus_env(*(gpus or ({},))))
    spec = importlib.util.spec_from_file_location("cupy", Path(FAKE_CUPY_PATH) / "cupy" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "cupy", module)
    return module
