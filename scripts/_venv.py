"""Run a script of scripts/ inside the project's virtualenv, whichever ``python3`` started it.

The Python scripts call :func:`ensure` before they import the project.  Outside the virtualenv
(``$SPARKDBN_VENV`` or ``.venv``) it sources ``scripts/_setup.sh`` -- which makes the virtualenv
and installs the project when needed, as ``scripts/demo`` and ``scripts/test`` do -- and runs the
script again with the virtualenv's Python and the same arguments.  Standard library only.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_AGAIN = "SPARKDBN_VENV_REEXEC"


def venv_dir() -> str:
    """The project's virtualenv: ``$SPARKDBN_VENV`` or ``<root>/.venv`` (as ``_setup.sh`` decides)."""
    return os.environ.get("SPARKDBN_VENV") or os.path.join(ROOT, ".venv")


def ensure() -> None:
    """Return inside the virtualenv; elsewhere replace this process by the script run inside it."""
    venv = venv_dir()
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        os.environ.pop(_AGAIN, None)
        return
    script = os.path.abspath(sys.argv[0])
    if os.environ.get(_AGAIN):  # _setup.sh ran, yet we are not inside: say so instead of looping
        raise SystemExit(f"{os.path.basename(script)}: {venv}/bin/python did not start inside {venv}")
    os.environ[_AGAIN] = "1"
    setup = os.path.join(ROOT, "scripts", "_setup.sh")
    sys.stdout.flush()
    os.execvp("bash", ["bash", "-c", 'source "$0" && exec "$VENV/bin/python" "$@"', setup, script, *sys.argv[1:]])
