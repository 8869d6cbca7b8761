"""The project's scripts (``scripts/<name>``, with or without ``.py``) as modules the tests can call."""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path
from typing import Iterator

__all__ = ["SCRIPTS", "script_module"]

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@contextlib.contextmanager
def script_module(file_name: str) -> Iterator[types.ModuleType]:
    """``scripts/<file_name>`` imported as a module, registered in ``sys.modules`` while in use (dataclasses
    and cloudpickle look a module up by its name), removed after.  ``scripts/`` is on ``sys.path`` as when a
    script runs as a program, so its sibling modules (``_results``, ``bench_modes``) import.  Importing a
    script never replaces the process (scripts/_venv.py acts only when a script runs as a program; tested in
    tests/test_scripts.py)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.append(str(SCRIPTS))
    name = file_name.removesuffix(".py").replace("-", "_")
    loader = importlib.machinery.SourceFileLoader(name, str(SCRIPTS / file_name))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    sys.modules[name] = module
    try:
        loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
