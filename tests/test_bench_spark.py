"""bench_spark.py's summary of repeated runs: the speed-ups it reports, from the rates each run measured."""

from __future__ import annotations

import pytest
from support.scripts import script_module


def _trial(in_process: float, pair: float, one_node: float, two_nodes: float) -> tuple[dict, dict]:
    """One repeat's rates (samples/s) in one phase, ``rbm0``."""
    reference = {"rates": {"rbm0": in_process}, "pair_rates": {"rbm0": pair}}
    return reference, {1: {"rates": {"rbm0": one_node}}, 2: {"rates": {"rbm0": two_nodes}}}


def test_the_repeats_give_each_speed_up_as_median_lowest_and_highest():
    trials = [_trial(100, 200, 100, 180), _trial(100, 190, 90, 150), _trial(80, 160, 80, 160)]
    with script_module("bench_spark.py") as module:
        rows = {label: cells for label, *cells in module.speedup_rows(trials, {"rbm0": 2})}
    assert rows["2 nodes / 1 node"] == ["1.80 [1.67, 2.00]"]  # 1.80, 1.67, 2.00
    assert rows["2 nodes / in-process (one process on one core)"] == ["1.80 [1.50, 2.00]"]  # 1.80, 1.50, 2.00
    assert rows["the machine's ceiling (two in-process at once / one)"] == ["2.00 [1.90, 2.00]"]
    assert rows["2 nodes / in-process, of the ceiling"] == ["0.90 [0.79, 1.00]"]  # 0.90, 0.79, 1.00


def test_repeats_below_one_are_refused_by_name(capsys):
    with script_module("bench_spark.py") as module, pytest.raises(SystemExit):
        module.main(["--repeats", "0"])
    assert "--repeats must be at least 1, got 0" in capsys.readouterr().err
