"""MkDocs hook: the command-line reference shows each command's own ``--help``, so it cannot go stale.

A line ``<!-- cli-help: train -->`` becomes the text ``sparkdbn train --help`` prints (``<!-- cli-help: -->``:
``sparkdbn --help``), taken from the ``sparkdbn`` console script's entry point in the project's
environment, at 100 columns.  A command that cannot be loaded or printed fails the build.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from importlib.metadata import entry_points

from mkdocs.exceptions import PluginError

MARKER = re.compile(r"^<!--\s*cli-help:\s*([a-z-]*)\s*-->[ \t]*$", re.MULTILINE)
WIDTH_COLUMNS = "100"


def command_help(command: str) -> str:
    """What ``sparkdbn [command] --help`` prints."""
    (script,) = [entry for entry in entry_points(group="console_scripts") if entry.name == "sparkdbn"] or [None]
    if script is None:
        raise PluginError("cli-help: no 'sparkdbn' console script is installed (pip install -e .)")
    main = script.load()
    output = io.StringIO()
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH_COLUMNS
    try:
        with contextlib.redirect_stdout(output), contextlib.suppress(SystemExit):
            main([command, "--help"] if command else ["--help"])
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    text = output.getvalue().rstrip()
    if not text.startswith("usage:"):
        raise PluginError(f"cli-help: 'sparkdbn {command} --help' printed no usage:\n{text[:500]}")
    return text


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 -- MkDocs' hook signature
    return MARKER.sub(lambda match: f"```text\n{command_help(match.group(1))}\n```", markdown)
