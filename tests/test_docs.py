"""The documentation's build hooks (docs/hooks/) and the benchmark results they render (scripts/_results.py).

``mkdocs build --strict`` (run by scripts/test) builds the real site; these tests pin the rules the
hooks add to it: a benchmark run is rendered from its JSON file with its stamp and tables (and a
warning when the machine was loaded), a data file that no page shows is an error, the README's links
into docs/ work on the site, and a page still being written is left out of the nav until its file
exists.  On the built site: the API page prints no raw Sphinx role and one entry per parameter, and a
benchmark page types no measured figure of its own.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from mkdocs.exceptions import PluginError
from support.scripts import script_module

ROOT = Path(__file__).resolve().parents[1]


def hook(name: str) -> types.ModuleType:
    path = ROOT / "docs" / "hooks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def results(monkeypatch):
    """scripts/_results.py, run as ``scripts/bench_example.py --quick`` would run it (whatever started pytest)."""
    monkeypatch.setattr(sys, "argv", ["/somewhere/bench_example.py", "--quick"])
    with script_module("_results.py") as module:
        yield module


def recorded_run(results, tmp_path: Path) -> dict:
    """A run written by BenchRun as a bench script writes it: a table, a figure, the printed report."""
    path = tmp_path / "bench_example.json"
    run = results.BenchRun("/somewhere/bench_example.py", argparse.Namespace(quick=True, json=str(path))).start()
    print("a line the script printed")
    run.table("Throughput", ["threads", "samples/s", "ratio"], [[1, 18734.2, 1.4321], [2, float("nan"), "2.08x"]])
    (tmp_path / "bench_example.png").write_bytes(b"png")
    run.figure(str(tmp_path / "bench_example.png"), "a figure")
    assert run.finish() == str(path)
    return json.loads(path.read_text(encoding="utf-8"))


def test_a_recorded_run_holds_its_stamp_settings_tables_figures_and_printed_report(results, tmp_path, capsys):
    run = recorded_run(results, tmp_path)
    assert run["script"] == "bench_example.py" and run["settings"] == {"quick": True}
    assert run["command"] == "scripts/bench_example.py --quick"
    assert run["machine"]["cores"] == os.cpu_count() and run["machine"]["python"] == ".".join(
        map(str, sys.version_info[:3]))
    assert run["started"] <= run["finished"] and run["finished"].endswith("+00:00")
    assert run["tables"] == [{"title": "Throughput", "columns": ["threads", "samples/s", "ratio"],
                              "rows": [[1, 18734.2, 1.4321], [2, None, "2.08x"]], "note": ""}]
    assert run["figures"] == [{"path": "bench_example.png", "caption": "a figure"}]
    assert run["output"] == "a line the script printed\n"
    assert "a line the script printed" in capsys.readouterr().out  # still printed, not only kept


def test_a_run_stamps_the_machine_when_it_starts_not_when_it_ends(results, tmp_path, monkeypatch):
    # The load that other work put on the machine is what a page warns of; a run's own load (16 nodes on
    # 2 cores) at its end is not.
    load = {"now": 0.5}
    monkeypatch.setattr(results, "machine", lambda: {"load_average_1min": load["now"]})
    path = tmp_path / "bench_example.json"
    run = results.BenchRun("bench_example.py", argparse.Namespace(json=str(path))).start()
    load["now"] = 23.0  # the run's own nodes
    run.finish()
    assert json.loads(path.read_text(encoding="utf-8"))["machine"] == {"load_average_1min": 0.5}


def test_without_json_a_run_writes_nothing_and_leaves_stdout_alone(results, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    stdout = sys.stdout
    run = results.BenchRun("bench_example.py", argparse.Namespace(json=None)).start()
    assert sys.stdout is stdout
    run.table("t", ["a"], [[1]])
    assert run.finish() is None and list(tmp_path.iterdir()) == []


def test_json_without_a_path_writes_where_the_docs_read(results):
    args = results.argparse.ArgumentParser()
    results.add_json_option(args)
    run = results.BenchRun("/x/scripts/bench_rbm.py", args.parse_args(["--json"]))
    assert run.path == str(ROOT / "docs" / "benchmarks" / "data" / "bench_rbm.json")
    assert results.BenchRun("bench_rbm.py", args.parse_args([])).path is None


def test_a_row_of_the_wrong_width_is_refused_naming_the_table(results):
    run = results.BenchRun("bench_example.py")
    with pytest.raises(ValueError, match="table 'Throughput': a row has 1 cells for 2 columns"):
        run.table("Throughput", ["a", "b"], [[1]])


def test_the_benchmark_page_shows_the_runs_stamp_tables_figure_and_output(results, tmp_path):
    benchmarks = hook("benchmarks")
    run = recorded_run(results, tmp_path)
    benchmarks.DATA_DIR = tmp_path
    markdown = benchmarks.on_page_markdown(
        "# Page\n\n<!-- bench-results: bench_example -->\n",
        types.SimpleNamespace(file=types.SimpleNamespace(src_uri="benchmarks/page.md")),
        {"docs_dir": str(tmp_path.parent)}, None)
    assert "bench-results" not in markdown
    assert f'!!! info "Recorded {run["finished"].replace("T", " ").replace("+00:00", " UTC")}' in markdown
    assert "`scripts/bench_example.py " in markdown and f"{os.cpu_count()} cores" in markdown
    assert "| threads | samples/s | ratio |" in markdown
    assert "| 1 | 18,734 | 1.432 |" in markdown and "| 2 |  | 2.08x |" in markdown
    figure = os.path.relpath(tmp_path / "bench_example.png", tmp_path.parent / "benchmarks")
    assert f"![a figure]({figure})" in markdown
    assert "    a line the script printed" in markdown


def test_a_run_never_recorded_renders_as_a_warning_saying_how_to_record_it(tmp_path):
    benchmarks = hook("benchmarks")
    benchmarks.DATA_DIR = tmp_path
    markdown = benchmarks.render_marker("bench_modes-lenet")
    assert markdown.startswith('!!! warning "No recorded run of bench_modes-lenet yet"')
    assert "This page shows no figure of this run until it is recorded" in markdown
    assert "scripts/bench_modes.py --json docs/benchmarks/data/bench_modes-lenet.json" in markdown


def test_a_data_file_that_no_page_shows_is_a_warning_and_so_fails_a_strict_build(tmp_path, caplog):
    benchmarks = hook("benchmarks")
    benchmarks.DATA_DIR = tmp_path / "docs" / "benchmarks" / "data"
    benchmarks.DATA_DIR.mkdir(parents=True)
    (benchmarks.DATA_DIR / "bench_shown.json").write_text("{}")
    (benchmarks.DATA_DIR / "bench_orphan.json").write_text("{}")
    benchmarks.on_pre_build({})
    benchmarks._shown.add("bench_shown")
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.benchmarks"):
        benchmarks.on_post_build({})
    assert [record.getMessage() for record in caplog.records] == [
        "benchmark data benchmarks/data/bench_orphan.json is shown on no page: add "
        "<!-- bench-results: bench_orphan --> to one"]


def test_a_data_file_that_cannot_be_rendered_fails_the_build_naming_it(tmp_path):
    benchmarks = hook("benchmarks")
    benchmarks.DATA_DIR = tmp_path
    (tmp_path / "bench_broken.json").write_text(json.dumps({"finished": "2026-11-27T00:00:00+00:00"}))
    page = types.SimpleNamespace(file=types.SimpleNamespace(src_uri="benchmarks/page.md"))
    with pytest.raises(PluginError, match=r"^benchmarks/page.md: .*/bench_broken.json: a recorded run lacks or mistypes 'command'$"):
        benchmarks.on_page_markdown("<!-- bench-results: bench_broken -->\n", page, {"docs_dir": str(tmp_path)},
                                    None)


def test_the_readmes_links_into_docs_become_links_within_the_site():
    readme = hook("readme")
    text = ("See [How it works](docs/how-it-works.md#phases), [x](https://example.org/docs/a.md) and "
            "[the changelog](CHANGELOG.md).")
    assert readme.front_page_markdown(text) == (
        "See [How it works](how-it-works.md#phases), [x](https://example.org/docs/a.md) and "
        "[the changelog](changelog.md).")


def test_the_command_line_reference_is_what_each_installed_command_prints_for_help():
    cli_help = hook("cli_help")
    markdown = cli_help.on_page_markdown("### status\n\n<!-- cli-help: status -->\n", None, None, None)
    assert markdown.startswith("### status\n\n```text\nusage: sparkdbn status [-h] [--config CONFIG] [--store STORE] "
                               "[--run RUN]")
    assert markdown.endswith("\n```\n") and "--run RUN" in markdown
    with pytest.raises(PluginError, match="'sparkdbn no-such-command --help' printed no usage"):
        cli_help.command_help("no-such-command")


def test_every_flag_in_the_command_line_reference_says_what_it_does_and_does_something():
    # The reference prints each command's --help: a flag without a help text is a bare name there, and
    # a flag a command ignores (--master of a command that starts no Spark) misleads.
    from node.cli import build_parser

    parser = build_parser()
    assert "``" not in parser.description  # printed as it is, not rendered
    starts_spark = {"train", "evaluate", "predict"}
    for name, command in parser.parse_args(["status", "--run", "r"]).subparsers.items():
        flags = [action for action in command._actions if action.option_strings]
        assert [action.dest for action in flags if not action.help] == [], name
        options = {option for action in flags for option in action.option_strings}
        assert {"--master", "--conf"} <= options if name in starts_spark else not options & {"--master", "--conf"}, name
        assert {"--verbose", "-v"} <= options, name  # `sparkdbn <command> ... --verbose`, as the errors page says


# -- The built site's API page ----------------------------------------------------------------------------

# A Sphinx role as mkdocstrings prints it when nothing converts it: ``:meth:`fit``` renders as
# ``:meth:<code>fit</code>``.
RAW_ROLE = re.compile(r":(?:py:)?(?:mod|meth|class|data|func|attr|exc|obj|const|term|ref):(?:<code>|`)")
_ROW = re.compile(r'<tr class="doc-section-item">(.*?)</tr>', re.DOTALL)
_CELL = re.compile(r"<td>(.*?)</td>", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")


def _newest_source_mtime() -> float:
    sources = [ROOT / "mkdocs.yml", *(ROOT / "docs").rglob("*.py"), *(ROOT / "docs").rglob("*.md")]
    for package in ("rbm", "storage", "actors", "node"):
        sources += (ROOT / package).rglob("*.py")
    return max(path.stat().st_mtime for path in sources)


@pytest.fixture(scope="module")
def api_page_html(tmp_path_factory) -> str:
    """The built API page: site/ as scripts/test builds it when it is newer than every source, else built here."""
    built = ROOT / "site" / "api" / "index.html"
    if not built.exists() or built.stat().st_mtime < _newest_source_mtime():
        site = tmp_path_factory.mktemp("site")
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
                       cwd=ROOT, check=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
        built = site / "api" / "index.html"
    return built.read_text(encoding="utf-8")


def raw_roles(page_html: str) -> list[str]:
    """Each Sphinx role the page prints raw, with the text around it."""
    return [_TAG.sub("", page_html[match.start():match.end() + 60]) for match in RAW_ROLE.finditer(page_html)]


def grouped_parameters(page_html: str) -> list[tuple[str, str]]:
    """Pairs of neighbouring parameter rows of one table that differ only by name: one numpydoc entry
    written for several parameters (``a, b : float, int``) renders as rows sharing the first one's type,
    description and default."""
    pairs = []
    for table in page_html.split("<table")[1:]:
        rows = [[_TAG.sub("", cell).strip() for cell in _CELL.findall(row)] for row in _ROW.findall(table)]
        for before, after in zip(rows, rows[1:]):
            if len(before) >= 3 and before[1:] == after[1:] and any(before[2:]):
                pairs.append((before[0], after[0]))
    return pairs


def test_the_grouped_parameter_check_finds_rows_that_share_everything_but_their_name():
    row = ('<tr class="doc-section-item"><td><code>{}</code></td><td><code>{}</code></td>'
           '<td><div><p>{}</p></div></td><td><code>{}</code></td></tr>')
    grouped = "<table>" + row.format("a", "float", "Both.", "0.01") + row.format("b", "float", "Both.", "0.01")
    split = "<table>" + row.format("a", "float", "A.", "0.01") + row.format("b", "float", "B.", "0.9")
    assert grouped_parameters(grouped) == [("a", "b")] and grouped_parameters(split) == []


def test_the_raw_role_check_finds_a_role_printed_raw_and_not_a_converted_one():
    assert raw_roles("see :meth:<code>fit</code> and <code>fit</code>") == [":meth:fit and fit"]
    assert raw_roles('see <autoref identifier="rbm.RBM.fit" optional><code>fit</code></autoref>') == []


def test_the_api_page_prints_no_sphinx_role_and_one_entry_per_parameter(api_page_html):
    assert raw_roles(api_page_html) == []
    assert grouped_parameters(api_page_html) == []


def test_the_api_page_links_the_names_its_docstrings_cross_reference(api_page_html):
    # ConvNet's docstring names :meth:`fit`; the page shows ConvNet.fit, so the name links to it.
    assert re.search(r'<a class="autorefs autorefs-internal"[^<]*href="#rbm\.ConvNet\.fit"[^<]*><code>fit</code></a>',
                     api_page_html)


def test_the_api_page_prints_each_packages_introduction_once(api_page_html):
    text = _TAG.sub("", api_page_html)
    assert text.count("Models on numpy or cupy") == 1


# -- Benchmark pages: figures come from recorded runs ---------------------------------------------------

# A measured figure typed into a page: a number (or a range) with a unit of time, size, throughput or a
# ratio -- ``3.2k``, ``1.36x``, ``0.40-0.48x``, ``7.6 s``, ``282 kB``, ``5%``.  Settings a page describes
# are counts without such units (``batch 64``, ``784-500``, ``5x5x20``) or code (``0.2 * 2``).
TYPED_FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:-\d[\d,]*(?:\.\d+)?)?\s?(?:x|ms|s|k|kB|MB|GB|%|samples/s)"
                          r"(?![\w/])")
_NOT_PROSE = [re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL),  # code blocks
              re.compile(r"^<!--.*?-->$", re.MULTILINE),  # the markers the hook renders runs at
              re.compile(r"`[^`\n]+`"),  # code spans
              re.compile(r"\]\([^)]*\)")]  # link targets


def typed_figures(markdown: str) -> list[str]:
    """The measured figures typed into a page's own prose (outside code, markers and link targets)."""
    for pattern in _NOT_PROSE:
        markdown = pattern.sub(" ", markdown)
    return [match.group() for match in TYPED_FIGURE.finditer(markdown)]


def test_the_typed_figure_check_finds_measurements_and_leaves_settings_alone():
    assert typed_figures("3.2k samples/s against 2.5k (1.29x); 0.40-0.48x in 7.6 s, 282 kB, 5%.") == [
        "3.2k", "2.5k", "1.29x", "0.40-0.48x", "7.6 s", "282 kB", "5%"]
    assert typed_figures("A 784-500 RBM, batch 64, conv 5x5x20 on digits28, `0.2 x 2`, 0.95 accuracy.\n"
                         "```\nbench.py --took 3.2 s\n```\n<!-- bench-results: bench_rbm -->\n") == []


# The pages of the site's Benchmarks section.
BENCHMARK_PAGES = [*sorted((ROOT / "docs" / "benchmarks").glob("*.md")), ROOT / "docs" / "quality.md"]


@pytest.mark.parametrize("page", BENCHMARK_PAGES, ids=lambda page: page.name)
def test_a_benchmark_page_types_no_measured_figure_outside_its_recorded_runs(page):
    assert typed_figures(page.read_text(encoding="utf-8")) == []


def test_a_run_recorded_on_a_loaded_machine_carries_a_warning_and_a_quiet_one_none():
    benchmarks = hook("benchmarks")
    run = {"finished": "2026-11-27T03:20:27+00:00", "command": "scripts/bench_rbm.py", "tables": [],
           "machine": {"cpu": "x86_64", "cores": 2, "load_average_1min": 11.79, "python": "3.11.7"}}
    assert '!!! warning "Recorded on a loaded machine: load 5.9 per core"' in benchmarks.render_run(run)
    run["machine"]["load_average_1min"] = 3.02  # 1.51 per core: just above the limit
    assert '!!! warning "Recorded on a loaded machine: load 1.5 per core"' in benchmarks.render_run(run)
    run["machine"]["load_average_1min"] = 3.0  # 1.5 per core: at the limit, not above it
    assert "loaded machine" not in benchmarks.render_run(run)
    del run["machine"]["load_average_1min"]
    assert "loaded machine" not in benchmarks.render_run(run)
    # A simulation's times are its clock's, not the machine's: no warning however loaded the machine was.
    simulated = {**run, "script": "bench_simulate.py", "machine": {**run["machine"], "load_average_1min": 11.79}}
    assert "loaded machine" not in benchmarks.render_run(simulated)
    assert "loaded machine" in benchmarks.render_run({**simulated, "script": "bench_rbm.py"})


def test_sphinx_roles_become_references_resolved_in_the_docstring_owners_scope():
    import griffe

    sphinx_roles = hook("sphinx_roles")
    code = ('"""See :class:`Model` and :mod:`pkg.sub`."""\n'
            "class Model:\n"
            '    """:meth:`fit` trains it, :meth:`~pkg.Model.fit` too, :func:`the helper <helper>`."""\n'
            "    def fit(self): ...\n"
            "def helper(): ...\n")
    with griffe.temporary_visited_package("pkg", {"__init__.py": code},
                                          extensions=griffe.load_extensions(sphinx_roles.SphinxRoles)) as package:
        assert package.docstring.value == (
            'See <autoref identifier="pkg.Model" optional><code>Model</code></autoref> and '
            '<autoref identifier="pkg.sub" optional><code>pkg.sub</code></autoref>.')
        assert package["Model"].docstring.value == (
            '<autoref identifier="pkg.Model.fit" optional><code>fit</code></autoref> trains it, '
            '<autoref identifier="pkg.Model.fit" optional><code>fit</code></autoref> too, '
            '<autoref identifier="pkg.helper" optional><code>the helper</code></autoref>.')
