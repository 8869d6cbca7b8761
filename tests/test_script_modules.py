"""A script a test imports (support.scripts.script_module) runs in the test's own process."""

from __future__ import annotations

import os

from support.scripts import script_module


def test_a_script_imported_by_a_test_never_replaces_the_test_process_even_outside_the_virtualenv(monkeypatch,
                                                                                               tmp_path):
    # From the command line outside the virtualenv a script execs itself inside it (scripts/_venv.py);
    # imported by a test that would end the run whenever pytest runs on another interpreter.
    monkeypatch.setenv("SPARKDBN_VENV", str(tmp_path / "elsewhere"))  # this interpreter is not "inside"
    monkeypatch.delenv("SPARKDBN_VENV_REEXEC", raising=False)

    def refuse(*args, **kwargs):
        raise AssertionError(f"the script tried to replace the test process: {args}")

    for name in ("execv", "execve", "execvp", "execvpe"):
        monkeypatch.setattr(os, name, refuse)
    with script_module("bench_scaling.py") as bench:  # as tests/test_bench_scaling.py imports it
        assert bench.EPOCHS["lenet"] == {"train": 2}  # and it works here
