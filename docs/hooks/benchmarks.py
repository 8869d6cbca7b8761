"""MkDocs hook: benchmark pages rendered from the JSON files the bench scripts write.

A page names a run with a line of its own, ``<!-- bench-results: bench_rbm -->``, which becomes
the run's stamp (date, command, commit, machine), its tables and, folded, everything the script
printed -- all read from ``docs/benchmarks/data/bench_rbm.json`` (``scripts/bench_rbm.py --json``;
the format is ``scripts/_results.py``'s).  No figure is typed by hand.  A run that was never
recorded renders as a warning saying so and how to record it; a run recorded on a loaded machine
(a load average above ``LOADED_PER_CORE`` per core when it started) carries a warning that its
timings are not to be trusted; a data file that no page shows is a warning (an error under
``mkdocs build --strict``), and so is a file that cannot be read.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

log = logging.getLogger("mkdocs.hooks.benchmarks")

DATA_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
MARKER = re.compile(r"^<!--\s*bench-results:\s*([A-Za-z0-9_.-]+)\s*-->[ \t]*$", re.MULTILINE)
# Above this 1-minute load average per core when a run started, other work competed with it for the
# cores: its timings measure the machine's load as much as the code, and its page says so.
LOADED_PER_CORE = 1.5
#: Scripts whose times are a simulated clock's: the machine's load moves none of their figures.
SIMULATED_CLOCK = frozenset({"bench_simulate.py"})
_shown: set[str] = set()


class BenchDataError(ValueError):
    """A benchmark data file that cannot be rendered: unreadable, or not in the expected format."""


def format_cell(value: Any) -> str:
    """A table cell as text: integers with thousands separators, floats to about 4 significant digits."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.1f}"
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_table(table: dict[str, Any]) -> str:
    lines = [f"**{table['title']}**", "", "| " + " | ".join(format_cell(c) for c in table["columns"]) + " |",
             "|" + "---|" * len(table["columns"])]
    lines += ["| " + " | ".join(format_cell(cell) for cell in row) + " |" for row in table["rows"]]
    if table.get("note"):
        lines += ["", table["note"]]
    return "\n".join(lines)


def render_machine(machine: dict[str, Any]) -> str:
    parts = [f"{machine.get('cpu')}, {machine.get('cores')} cores"]
    if machine.get("load_average_1min") is not None:
        parts[0] += f" (load average {machine['load_average_1min']} at the start)"
    parts.append(f"Python {machine.get('python')}")
    if machine.get("numpy"):
        parts.append(f"numpy {machine['numpy']}")
    if machine.get("blas"):
        parts.append("BLAS " + ", ".join(machine["blas"]))
    parts.append("GPU " + ", ".join(machine["gpus"]) if machine.get("gpus") else "no GPU")
    return "; ".join(parts)


def load_per_core(machine: dict[str, Any]) -> float | None:
    """The 1-minute load average per core when the run started (None when the run did not record it)."""
    load, cores = machine.get("load_average_1min"), machine.get("cores")
    if load is None or not cores:
        return None
    return load / cores


def render_load_warning(machine: dict[str, Any], script: str = "") -> str:
    """A warning for a run recorded on a loaded machine, or an empty string for one on a quiet machine or
    of a script whose times are simulated (:data:`SIMULATED_CLOCK`)."""
    if script in SIMULATED_CLOCK:
        return ""
    per_core = load_per_core(machine)
    if per_core is None or per_core <= LOADED_PER_CORE:
        return ""
    return (f'!!! warning "Recorded on a loaded machine: load {per_core:.1f} per core"\n'
            f"    The load average was {machine['load_average_1min']} on {machine['cores']} cores when this run "
            f"started (above {LOADED_PER_CORE} per core): other work shared the cores, so its times and "
            f"throughputs, and the ratios between them, measure that load as much as this code. It is to be "
            f"recorded again on a quiet machine.\n")


def render_run(run: dict[str, Any], page_dir: Path = DATA_DIR) -> str:
    """The Markdown of one recorded run (see ``scripts/_results.py`` for its fields)."""
    try:
        date = run["finished"].replace("T", " ").replace("+00:00", " UTC")
        commit = f", commit `{run['commit']}`" if run.get("commit") else ""
        blocks = [
            f'!!! info "Recorded {date}{commit}"',
            f"    `{run['command']}`  ",
            f"    on {render_machine(run['machine'])}.",
        ]
        warning = render_load_warning(run["machine"], run.get("script", ""))
        if warning:
            blocks += ["", warning]
        blocks += ["", *(render_table(table) + "\n" for table in run["tables"])]
        for figure in run.get("figures", []):
            path = os.path.relpath(DATA_DIR / figure["path"], page_dir).replace(os.sep, "/")
            blocks += [f"![{figure['caption']}]({path})", ""]
        output = run.get("output", "").rstrip()
        if output:
            blocks += ['??? note "Everything the script printed"', "", "    ```text"]
            blocks += [f"    {line}" if line else "" for line in output.splitlines()]
            blocks += ["    ```", ""]
    except (KeyError, TypeError, AttributeError) as error:
        raise BenchDataError(f"a recorded run lacks or mistypes {error}") from error
    return "\n".join(blocks)


def not_recorded(name: str) -> str:
    return (f'!!! warning "No recorded run of {name} yet"\n'
            f"    This page shows no figure of this run until it is recorded: run "
            f"`scripts/{name.split('-')[0]}.py --json docs/benchmarks/data/{name}.json` (with the settings "
            f"this page names), then build the docs again.\n")


def render_marker(name: str, page_dir: Path = DATA_DIR) -> str:
    path = DATA_DIR / f"{name}.json"
    if not path.exists():
        log.info("benchmark data %s not recorded yet", path.name)
        return not_recorded(name)
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
        return render_run(run, page_dir)
    except (OSError, ValueError) as error:
        raise BenchDataError(f"{path}: {error}") from error


def on_pre_build(config):  # noqa: ARG001 -- MkDocs' hook signature
    _shown.clear()


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 -- MkDocs' hook signature
    def replace(match: re.Match) -> str:
        _shown.add(match.group(1))
        try:
            return render_marker(match.group(1), Path(config["docs_dir"]) / Path(page.file.src_uri).parent)
        except BenchDataError as error:
            raise PluginError(f"{page.file.src_uri}: {error}") from error

    return MARKER.sub(replace, markdown)


def on_post_build(config):  # noqa: ARG001 -- MkDocs' hook signature
    for path in sorted(DATA_DIR.glob("*.json")):
        if path.stem not in _shown:
            log.warning("benchmark data %s is shown on no page: add <!-- bench-results: %s --> to one",
                        path.relative_to(DATA_DIR.parents[1]), path.stem)
