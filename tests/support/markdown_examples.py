"""The examples of a Markdown page (README.md, docs/*.md) as a reader copies them, and running them.

The rules, shared by tests/test_readme.py and tests/test_doc_examples.py:

- A ```python or ```yaml block whose first line is ``# file: NAME`` is a file the page tells the reader
  to save as ``NAME`` (:func:`saved_files`), not part of the page's script.
- Every other ```python block, in page order, is one script (:func:`python_script`), except a block whose
  first line is ``# needs a cluster`` (the virtual cluster's: root, network namespaces) or ``# fragment``
  (the shape of a piece of code that runs only inside something larger -- a test module, a call whose
  arguments the page cannot know -- kept rare). Every block, run or not, must compile.
- Every ``sparkdbn ...`` line of the ```bash blocks is a command (:func:`sparkdbn_commands`; a line ending
  with ``\\`` goes on on the next one; ``#`` starts a comment), except one marked with the comment
  ``# needs a cluster`` and a syntax synopsis (an optional part in brackets, ``[--epochs N]``).
- Every accuracy a run prints (``DBN accuracy 0.97``, a classification report's ``accuracy  0.95  359``
  row) must be plausible: above :data:`PLAUSIBLE_ACCURACY` (0.1 is chance on ten digits).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

__all__ = ["FRAGMENT", "NEEDS_CLUSTER", "PLAUSIBLE_ACCURACY", "TIMEOUT_S", "accuracies", "example_env",
           "fenced_blocks", "python_script", "run_example", "saved_files", "sparkdbn_commands"]

NEEDS_CLUSTER = "# needs a cluster"
FRAGMENT = "# fragment"
FILE_HEADER = re.compile(r"^# file: (\S+)[ \t]*$", re.MULTILINE)
ACCURACY = re.compile(r"\baccuracy\s+([01]\.\d+)")
PLAUSIBLE_ACCURACY = 0.8
TIMEOUT_S = 600  # a hung command fails the test instead of holding CI


def fenced_blocks(text: str, language: str) -> list[str]:
    """The contents of the ```language blocks of a Markdown text, in order (indented fences too)."""
    pattern = re.compile(rf"^([ \t]*)```{language}[ \t]*\n(.*?)^\1```[ \t]*$", re.MULTILINE | re.DOTALL)
    blocks = []
    for match in pattern.finditer(text):
        indent = len(match.group(1))
        blocks.append("".join(line[indent:] for line in match.group(2).splitlines(keepends=True)))
    return blocks


def python_script(text: str) -> str:
    """The page's Python blocks that run anywhere, as one script (files to save and marked blocks left out)."""
    blocks = [block for block in fenced_blocks(text, "python")
              if not block.startswith((NEEDS_CLUSTER, FRAGMENT)) and not FILE_HEADER.match(block)]
    return "\n".join(blocks)


def saved_files(text: str) -> dict[str, str]:
    """The ```yaml and ```python blocks a reader is told to save: ``{name: content}`` for each whose first line
    is ``# file: NAME``."""
    files = {}
    for language in ("yaml", "python"):
        for block in fenced_blocks(text, language):
            header = FILE_HEADER.match(block)
            if header:
                files[header.group(1)] = block
    return files


def sparkdbn_commands(text: str) -> list[list[str]]:
    """The page's ``sparkdbn`` command lines that run anywhere, as argument lists (see the module docstring)."""
    commands = []
    for block in fenced_blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            if not line.startswith("sparkdbn ") or NEEDS_CLUSTER in line or "[--" in line:
                continue
            commands.append(shlex.split(line, comments=True))
    return commands


def accuracies(output: str) -> list[float]:
    """Every accuracy printed in ``output`` (see the module docstring), in order."""
    return [float(value) for value in ACCURACY.findall(output)]


def example_env(checkout: Path) -> dict[str, str]:
    """The environment an example runs in: the virtualenv's ``bin`` first on the PATH (where ``sparkdbn`` is,
    as ``. .venv/bin/activate`` puts it), and ``checkout`` on PYTHONPATH, so the checkout under test is the
    one imported (the editable install may point at another).  BLAS takes one thread per process: beside
    the suite's other worker on a 2-core machine, its busy-waiting threads made LeNet's recipe several
    times slower (the examples' figures do not depend on it: every accuracy need only be plausible)."""
    python_path = os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
            "PYTHONPATH": python_path, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def run_example(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run one example process in ``cwd``; its output (stdout and stderr), after asserting that it exited 0."""
    done = subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{shlex.join(args)} exited {done.returncode}:\n{done.stdout[-6000:]}"
    return done.stdout
