"""Every example of the documentation site's pages (docs/*.md) runs as written.

Per page, in an empty temporary folder, as a reader who copies the page's blocks into a folder of their
own would run them (the rules: :mod:`support.markdown_examples`, the README's too):

1. Every ```python or ```yaml block whose first line is ``# file: NAME`` is saved as ``NAME`` there.
2. Every other ```python block, in page order, joined into one script and run by one fresh Python process
   (the virtualenv's, the checkout under test on PYTHONPATH), except a block whose first line is
   ``# needs a cluster`` or ``# fragment`` (every block, run or not, must compile: a quick test).
3. Then every ``sparkdbn ...`` command of the page's ```bash blocks (not a ``# needs a cluster`` one, not
   a synopsis), each a process of its own.  A page whose commands name ``examples/...`` files is read in
   the checkout (docs/cli.md says so): the folder holds a copy of the checkout's ``examples/``.

Asserted: every process exits 0, each page prints the accuracies listed in :data:`ACCURACIES` and every
accuracy printed is above 0.8 -- 0.1 is chance on ten digits.

What the blocks train is what the pages show, in full: a DBN(100, 100) on Spark (docs/training.md), one
with early stopping (docs/watching.md), a model of one's own (docs/how-it-works.md), LeNet's recipe on
its 13 shifted copies (docs/models.md: about 19 s of CPU on one BLAS thread), and the command line
page's DBN run of ``examples/dbn-digits.yaml`` with the commands that use it (docs/cli.md).  Measured on
the 2-core build machine under a load average of 8-18 (other suites running), one page at a time:
scaling-out 10 s, how-it-works 43 s, training 52 s, watching 76 s, models 132 s, cli 167 s (of which
train 59 s, evaluate 29 s, predict 45 s, the four others 5-8 s each).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from support.markdown_examples import (PLAUSIBLE_ACCURACY, accuracies, example_env, fenced_blocks,
                                       python_script, run_example, saved_files, sparkdbn_commands)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# How many accuracies each page's Python script prints: the report of a Spark-trained DBN, the best
# validation accuracy of the watched run, the report of the model of one's own, LeNet's score.
ACCURACIES = {"training.md": 1, "watching.md": 1, "how-it-works.md": 1, "models.md": 1}


def _text(page: str) -> str:
    return (DOCS / page).read_text(encoding="utf-8")


def _pages_with_examples() -> list[str]:
    return sorted(path.name for path in DOCS.glob("*.md")
                  if python_script(_text(path.name)).strip() or sparkdbn_commands(_text(path.name)))


def test_fragments_and_python_files_to_save_are_kept_out_of_the_script():
    text = ("```python\n# file: my_models.py\nclass Model: ...\n```\n```python\n# fragment: a test's shape\n"
            "def test_it(): ...\n```\n```python\nfrom my_models import Model\n```\n"
            "```python\n# needs a cluster\nz = 3\n```\n")
    assert python_script(text) == "from my_models import Model\n"
    assert saved_files(text) == {"my_models.py": "# file: my_models.py\nclass Model: ...\n"}


def test_the_pages_with_examples_to_run_are_found():
    assert set(ACCURACIES) <= set(_pages_with_examples()) and "cli.md" in _pages_with_examples()


@pytest.mark.parametrize("page", sorted(path.name for path in DOCS.glob("*.md")))
def test_every_python_block_of_a_page_compiles_the_ones_it_does_not_run_too(page):
    for block in fenced_blocks(_text(page), "python"):
        compile(block, f"docs/{page}", "exec")


@pytest.mark.slow
@pytest.mark.parametrize("page", _pages_with_examples())
def test_every_python_block_and_sparkdbn_command_of_a_docs_page_runs_and_learns(page, tmp_path):
    text = _text(page)
    for name, content in saved_files(text).items():
        (tmp_path / name).write_text(content, encoding="utf-8")
    commands = sparkdbn_commands(text)
    if any(arg.startswith("examples/") for args in commands for arg in args):
        shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = example_env(ROOT)

    script = python_script(text)
    if script.strip():
        (tmp_path / "page.py").write_text(script, encoding="utf-8")
        output = run_example([sys.executable, "page.py"], tmp_path, env)
        found = accuracies(output)
        assert len(found) == ACCURACIES.get(page, 0), output[-3000:]
        assert all(value > PLAUSIBLE_ACCURACY for value in found), output[-3000:]

    for args in commands:
        output = run_example([shutil.which("sparkdbn", path=env["PATH"]), *args[1:]], tmp_path, env)
        found = accuracies(output)
        if args[1] in ("train", "evaluate"):
            assert found, f"{' '.join(args)} printed no accuracy:\n{output[-3000:]}"
        assert all(value > PLAUSIBLE_ACCURACY for value in found), f"{' '.join(args)}:\n{output[-3000:]}"
