"""Bounds on a statistic over seeds (a mean or median accuracy, a loss ratio), measurable on every BLAS kernel.

A seed-based test asserts a statistic of several trained models against a bound.  Which OpenBLAS kernel
family runs the products (Haswell, SkylakeX, ...) changes the last bits of every product, and over a fit
those bits become another draw of the same experiment: a bound set a test image above the mean of one
family fails on the other.  So every such bound goes through :func:`assert_at_least` or
:func:`assert_at_most`, and its test is marked ``seed_bound``:

- the assertion names the statistic, the bound, the margin and the per-seed values when it fails;
- with ``SPARKDBN_SEED_BOUNDS_LOG`` set to a file, each check appends one JSON line (the test, what was
  checked, the value, the bound, the margin, the values, the OpenBLAS kernel family that ran), which
  ``scripts/check-seed-bounds`` collects under each kernel family this CPU can run (docs/testing.md);
- a check in a test that is not marked ``seed_bound`` fails, so that the script never misses a bound.
"""

from __future__ import annotations

import json
import os
from typing import Sequence

import pytest

__all__ = ["LOG_ENV", "MARKER", "assert_at_least", "assert_at_most", "current_test", "openblas_architectures"]

#: The environment variable naming the JSON-lines file the checks append to (unset: nothing is written).
LOG_ENV = "SPARKDBN_SEED_BOUNDS_LOG"
#: The marker every test that checks a seed bound carries (``pytest -m seed_bound`` runs them all).
MARKER = "seed_bound"

#: The running test's item, set by the suite's autouse fixture (tests/conftest.py).
current_test: pytest.Item | None = None


def openblas_architectures() -> list[str]:
    """The kernel families of the OpenBLAS libraries loaded in this process (threadpoolctl's ``architecture``)."""
    from threadpoolctl import threadpool_info

    return sorted({str(info.get("architecture")) for info in threadpool_info() if info.get("internal_api") == "openblas"})


def assert_at_least(value: float, bound: float, what: str, values: Sequence[float] = ()) -> None:
    """Assert ``value >= bound`` for a statistic over seeds (e.g. the mean accuracy of eight seeds).

    Parameters
    ----------
    value : float
        The statistic, e.g. ``np.mean(scores)``.
    bound : float
        Its lowest allowed value.
    what : str
        What the statistic is, for the message and the log (``"mean accuracy, seeds 0-7"``): a fixed
        label, no measured number in it, since scripts/check-seed-bounds matches each family's check by it.
    values : sequence of float
        The per-seed values it was computed from (reported, logged).
    """
    _check(value, bound, what, values, at_least=True)


def assert_at_most(value: float, bound: float, what: str, values: Sequence[float] = ()) -> None:
    """Assert ``value <= bound`` for a statistic over seeds (e.g. the mean ratio of the last to the first loss)."""
    _check(value, bound, what, values, at_least=False)


def _check(value: float, bound: float, what: str, values: Sequence[float], *, at_least: bool) -> None:
    item = current_test
    if item is not None and item.get_closest_marker(MARKER) is None:
        raise AssertionError(f"{item.nodeid} checks a seed bound ({what}) but is not marked "
                             f"@pytest.mark.{MARKER}: scripts/check-seed-bounds would not measure it")
    value, bound = float(value), float(bound)
    margin = value - bound if at_least else bound - value
    _log(value, bound, what, values, at_least, margin, item)
    relation = ">=" if at_least else "<="
    assert margin >= 0, (f"{what}: {value:.4f}, expected {relation} {bound:.4f} (short by {-margin:.4f}); "
                         f"per seed {[round(float(v), 4) for v in values]}")


def _log(value: float, bound: float, what: str, values: Sequence[float], at_least: bool, margin: float,
         item: pytest.Item | None) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = {"test": item.nodeid if item is not None else os.environ.get("PYTEST_CURRENT_TEST", "?"),
            "what": what, "value": value, "bound": bound, "direction": "at_least" if at_least else "at_most",
            "margin": margin, "values": [float(v) for v in values], "kernels": openblas_architectures()}
    with open(path, "a", encoding="utf-8") as log:  # one short write per line: appends from one process
        log.write(json.dumps(line) + "\n")
