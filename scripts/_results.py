"""A benchmark run as JSON: its tables and printed report, stamped with the machine and the date.

Every ``scripts/bench_*.py`` takes ``--json [PATH]`` (off by default; without PATH the file is
``docs/benchmarks/data/<script>.json``).  The documentation's benchmark pages are rendered from
these files when the site is built (``docs/hooks/benchmarks.py``), so no figure is copied by hand::

    parser = argparse.ArgumentParser(...)
    add_json_option(parser)
    args = parser.parse_args()
    run = BenchRun(__file__, args).start()      # records what the script prints from here on
    ...
    run.table("snapshot put / get", ["backend", "put ms", "get ms"], rows)
    run.finish()                                # writes the file (nothing without --json)

A long run may also write what it has so far, ``run.checkpoint()`` (say after each table, or each row of
a table it keeps up to date with ``run.table(..., replace=True)``), so that a run killed before
``finish`` (a timeout) leaves its finished parts on disk, marked ``"complete": false``.

A file holds one run: ``{"script", "command", "settings", "started", "finished", "complete", "machine",
"tables": [{"title", "columns", "rows", "note"}], "figures": [{"path", "caption"}], "output"}``
(a figure's path relative to the file; ``finished``: when the file was written).  Standard library only
(numpy's and the BLAS's versions are read when they are importable).
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.path.join(ROOT, "docs", "benchmarks", "data")
SCHEMA_VERSION = 1
_DEFAULT = "<default>"


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--json [PATH]``: write the run's results there (``docs/benchmarks/data/<script>.json`` without PATH)."""
    parser.add_argument("--json", nargs="?", const=_DEFAULT, default=None, metavar="PATH",
                        help="also write the results, stamped with machine and date, as JSON to PATH "
                             "(without PATH: docs/benchmarks/data/<script>.json, which the docs render)")


def default_json_path(script: str) -> str:
    """Where ``--json`` without a path writes the results of ``script`` (a path or a file name)."""
    return os.path.join(DATA_DIR, os.path.splitext(os.path.basename(script))[0] + ".json")


def machine() -> dict[str, Any]:
    """What the figures were measured on: CPU, cores, load, Python, numpy, BLAS, GPUs."""
    stamp: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }
    try:
        import numpy
        stamp["numpy"] = numpy.__version__
    except ImportError:
        stamp["numpy"] = None
    try:
        from threadpoolctl import threadpool_info
        stamp["blas"] = [f"{entry.get('internal_api')} {entry.get('version')} ({entry.get('num_threads')} threads)"
                         for entry in threadpool_info() if entry.get("user_api") == "blas"]
    except ImportError:
        stamp["blas"] = []
    stamp["gpus"] = _gpus()
    return stamp


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> list[str]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _git_commit() -> str | None:
    try:
        done = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


class _Tee(io.TextIOBase):
    """Writes to the real stream and keeps a copy (what the script printed)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


class BenchRun:
    """One benchmark run: collects tables, copies stdout, and writes the JSON file when it finishes.

    Parameters
    ----------
    script : the script's ``__file__``.
    args : the parsed arguments; its ``json`` attribute (``add_json_option``) says where to write,
        ``None`` to write nothing.  The other attributes are kept as the run's settings.
    """

    def __init__(self, script: str, args: argparse.Namespace | None = None) -> None:
        self.script = os.path.basename(script)
        settings = dict(vars(args)) if args is not None else {}
        target = settings.pop("json", None)
        self.path = None if target is None else (default_json_path(script) if target == _DEFAULT else target)
        self.settings = {key: value for key, value in settings.items() if _jsonable(value)}
        self.tables: list[dict[str, Any]] = []
        self.figures: list[dict[str, str]] = []
        self.started = _now()
        self._machine: dict[str, Any] | None = None  # stamped when the run starts (its load then)
        self._tee: _Tee | None = None

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], note: str = "",
              replace: bool = False) -> None:
        """Add a table: ``rows`` of cells (numbers or text; ``None`` for an empty cell), one per column.

        ``replace``: a table of the same title added before is replaced where it stands (a table kept up to
        date as its rows come, written by :meth:`checkpoint`), else the table is added.
        """
        width = len(columns)
        for row in rows:
            if len(row) != width:
                raise ValueError(f"table {title!r}: a row has {len(row)} cells for {width} columns: {row!r}")
        table = {"title": title, "columns": list(columns), "rows": [[_cell(value) for value in row] for row in rows],
                 "note": note}
        for index, kept in enumerate(self.tables):
            if replace and kept["title"] == title:
                self.tables[index] = table
                return
        self.tables.append(table)

    def figure(self, path: str, caption: str) -> None:
        """Name a figure the run drew; kept relative to the JSON file, so the docs can show it beside the tables."""
        where = os.path.dirname(os.path.abspath(self.path or default_json_path(self.script)))
        self.figures.append({"path": os.path.relpath(os.path.abspath(path), where), "caption": caption})

    def start(self) -> BenchRun:
        """Stamp the machine (its load now, before the run adds its own) and copy what the script prints from
        now on (when there is a file to write)."""
        self.started, self._machine = _now(), machine()
        if self.path is not None and self._tee is None:
            self._tee = _Tee(sys.stdout)
            sys.stdout = self._tee
        return self

    def finish(self) -> str | None:
        """Stop copying and write the file; return its path (``None`` without ``--json``)."""
        if self.path is None:
            return None
        output = ""
        if self._tee is not None:
            sys.stdout.flush()
            sys.stdout, output = self._tee.stream, self._tee.copy.getvalue()
            self._tee = None
        return self.write(output)

    def checkpoint(self) -> str | None:
        """Write what the run has so far, marked ``"complete": false``, and go on (copying stdout too): a run
        stopped before :meth:`finish` keeps its finished tables.  Returns the path (``None`` without ``--json``)."""
        if self.path is None:
            return None
        return self.write(self._tee.copy.getvalue() if self._tee is not None else "", complete=False)

    def write(self, output: str = "", complete: bool = True) -> str:
        """Write the run to its JSON file (atomically) and return the path; ``complete=False``: a checkpoint
        (written without a word on stderr)."""
        record = {
            "schema": SCHEMA_VERSION,
            "script": self.script,
            "command": " ".join([f"scripts/{self.script}", *sys.argv[1:]]),
            "settings": self.settings,
            "started": self.started,
            "finished": _now(),
            "complete": complete,
            "commit": _git_commit(),
            "machine": self._machine or machine(),
            "tables": self.tables,
            "figures": self.figures,
            "output": output,
        }
        path = self.path or default_json_path(self.script)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        temporary = f"{path}.tmp-{os.getpid()}"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1)
            handle.write("\n")
        os.replace(temporary, path)
        if complete:
            print(f"results written to {path}", file=sys.stderr)
        return path


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _cell(value: Any) -> Any:
    """A table cell as JSON: numpy scalars become Python numbers, NaN and infinities ``None``."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
