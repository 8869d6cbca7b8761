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


def _load(name: str, path: Path) -> tuple[importlib.machinery.SourceFileLoader, types.ModuleType]:
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    return loader, importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))


@contextlib.contextmanager
def _in_this_process() -> Iterator[None]:
    """``scripts/_venv.py`` with an ``ensure()`` that returns: run from the command line outside the
    virtualenv, a script replaces its process by one inside it, which imported by a test would end the
    test run (or restart it under another interpreter).  Imported here, the script runs in this process."""
    path = SCRIPTS / "_venv.py"
    if not path.exists():
        yield
        return
    loader, venv = _load("_venv", path)
    loader.exec_module(venv)  # standard library only, and nothing happens on import
    venv.ensure = lambda *args, **kwargs: None
    previous = sys.modules.get("_venv")
    sys.modules["_venv"] = venv
    try:
        yield
    finally:
        if previous is None:
            sys.modules.pop("_venv", None)
        else:
            sys.modules["_venv"] = previous


@contextlib.contextmanager
def script_module(file_name: str) -> Iterator[types.ModuleType]:
    """``scripts/<file_name>`` imported as a module, registered in ``sys.modules`` while in use (dataclasses
    and cloudpickle look a module up by its name), removed after; it never re-executes the process."""
    name = file_name.removesuffix(".py").replace("-", "_")
    loader, module = _load(name, SCRIPTS / file_name)
    with _in_this_process():
        sys.modules[name] = module
        try:
            loader.exec_module(module)
            yield module
        finally:
            sys.modules.pop(name, None)
