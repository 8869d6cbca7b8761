"""Run a script of scripts/ in the environment it was started in, or, where the project is not importable there,
inside the project's virtualenv.  Standard library only.

A Python script calls :func:`ensure` first thing, and only when started as a program (under
``if __name__ == "__main__":``): importing a script -- as the tests do -- never replaces the
process.  Where this Python finds the project's packages (an installed sparkdbn, a conda
environment, CI's own virtualenv, ``.venv``), :func:`ensure` returns and the script runs right
there.  Elsewhere (a bare ``python3``) it sources ``scripts/_setup.sh`` -- which makes the
virtualenv (``$SPARKDBN_VENV`` or ``.venv``) and installs the project when needed, as
``scripts/demo``, ``scripts/test`` and ``scripts/sparkdbn`` do -- and runs the script again with
the virtualenv's Python and the same arguments.
"""

from __future__ import annotations

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_AGAIN = "SPARKDBN_VENV_REEXEC"

#: The project's packages: a Python that finds them all runs the scripts as it is.
PACKAGES = ("rbm", "storage", "actors", "node")


def venv_dir() -> str:
    """The project's virtualenv: ``$SPARKDBN_VENV`` or ``<root>/.venv`` (as ``_setup.sh`` decides)."""
    return os.environ.get("SPARKDBN_VENV") or os.path.join(ROOT, ".venv")


def project_importable() -> bool:
    """Whether this Python finds every package of the project (installed, or on its path)."""
    return all(importlib.util.find_spec(name) is not None for name in PACKAGES)


def ensure() -> None:
    """Return where the project is importable; elsewhere replace this process by the script run in the virtualenv."""
    if project_importable():
        os.environ.pop(_AGAIN, None)
        return
    venv = venv_dir()
    script = os.path.abspath(sys.argv[0])
    if os.environ.get(_AGAIN):  # _setup.sh ran, yet the project is not importable: say so instead of looping
        raise SystemExit(f"{os.path.basename(script)}: {venv}/bin/python does not find sparkdbn's packages "
                         f"({', '.join(PACKAGES)})")
    os.environ[_AGAIN] = "1"
    setup = os.path.join(ROOT, "scripts", "_setup.sh")
    sys.stdout.flush()
    os.execvp("bash", ["bash", "-c", 'source "$0" && exec "$VENV/bin/python" "$@"', setup, script, *sys.argv[1:]])
