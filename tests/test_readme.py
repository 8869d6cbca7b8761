"""README.md runs as written.

What runs, in an empty temporary folder (the working directory) and nothing else, as a reader who
copies the README's blocks into a folder of their own would run them -- nothing is read from the
checkout (the rules are :mod:`support.markdown_examples`, shared with tests/test_doc_examples.py):

0. Every ```yaml block whose first line is ``# file: NAME`` is written to ``NAME`` in that folder (the
   README tells the reader to save it so).
1. Every ```python block, in README order, joined into one script and run by one fresh Python
   process (the virtualenv's), so later blocks use the names earlier ones define -- except a block
   whose first line is ``# needs a cluster`` (the virtual cluster's: root, network namespaces).
2. Then every ``sparkdbn ...`` command of the ```bash blocks, in README order, each a process of its
   own (a line ending with ``\\`` goes on on the next one; ``#`` starts a comment), except
   - a command marked with the comment ``# needs a cluster`` (an HDFS store, a real cluster), and
   - a syntax synopsis: a command with an optional part in brackets (``[--epochs N]``).
   ``sparkdbn`` is the virtualenv's console script (what ``. .venv/bin/activate`` puts on the PATH).
   The Python script runs first because ``sparkdbn predict`` and ``sparkdbn stage`` read the Parquet
   and CSV files it writes.

What the blocks train is what the README shows, in full: quick variants where the documented
recipe takes minutes (a DBN(100, 100) with 30 fine-tuning epochs, LeNet without the shifted copies),
each saying in a comment what the full recipe is and reaches.  Measured on the 2-core build machine
while other suites ran (load average 4-10), before the tour ran from an empty folder: 266 s and 268 s,
of which the Python script 129 s (three small Spark fits in one Spark session) and the commands 137 s
(the four that start Spark 25-37 s each, the five others 2-5 s).  From an empty folder (one Spark
command fewer, one staging more), under a load average of 10-14: 831 s.

Asserted: every process exits 0, and every accuracy printed (``DBN accuracy 0.97``, the classification
reports' ``accuracy  0.95  359`` rows) is above 0.8 -- 0.1 is chance on ten digits.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

import pytest
from support.markdown_examples import (PLAUSIBLE_ACCURACY, accuracies, example_env, python_script, run_example,
                                       saved_files, sparkdbn_commands)

ROOT = Path(__file__).resolve().parents[1]


def test_the_extraction_rules_keep_runnable_blocks_and_commands_and_skip_marked_ones():
    text = ("```bash\nsparkdbn train [--epochs N] \\\n   [--out DIR]\nsparkdbn train --epochs 1 \\\n"
            "   --out plots  # a comment\nsparkdbn train --config c.yaml   # needs a cluster (HDFS)\n"
            "scripts/demo\n```\n\n  ```python\n  x = 1\n  ```\n```python\n# needs a cluster\ny = 2\n```\n"
            "```python\nprint(x)\n```\n")
    assert sparkdbn_commands(text) == [["sparkdbn", "train", "--epochs", "1", "--out", "plots"]]
    assert python_script(text) == "x = 1\n\nprint(x)\n"


def test_yaml_blocks_headed_by_a_file_name_are_the_files_to_save_and_others_are_not():
    text = ("```yaml\n# file: job.yaml\nepochs: 2\n```\n```yaml\n# an illustration\nepochs: 3\n```\n"
            "```yaml\nepochs: 4\n# file: late.yaml\n```\n")
    assert saved_files(text) == {"job.yaml": "# file: job.yaml\nepochs: 2\n"}


@pytest.mark.slow
def test_every_python_block_and_sparkdbn_command_of_the_readme_runs_and_learns(tmp_path):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for name, content in saved_files(text).items():
        (tmp_path / name).write_text(content, encoding="utf-8")
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(saved_files(text)), "the folder is not empty"
    env = example_env(ROOT)
    (tmp_path / "readme.py").write_text(python_script(text), encoding="utf-8")

    output = run_example([sys.executable, "readme.py"], tmp_path, env)
    found = accuracies(output)
    # The DBN, LeNet, the Spark-trained DBN's report, the pipeline, the watched run's best validation.
    assert len(found) == 5 and min(found) > PLAUSIBLE_ACCURACY, output[-3000:]

    commands = sparkdbn_commands(text)
    assert {args[1] for args in commands} >= {"train", "evaluate", "predict", "stage", "report", "status"}
    for args in commands:
        output = run_example([shutil.which("sparkdbn", path=env["PATH"]), *args[1:]], tmp_path, env)
        if args[1] in ("train", "evaluate"):
            found = accuracies(output)
            assert found and min(found) > PLAUSIBLE_ACCURACY, f"{shlex.join(args)}:\n{output[-3000:]}"
