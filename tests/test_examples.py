"""The examples under examples/ are what the command line reads: every key of a config known, every model builds,
and the CSV stages as docs/cli.md shows."""

from __future__ import annotations

from pathlib import Path

import pytest

import storage
from node.cli import _train_inputs as cli
from node.cli import build_parser, main
from node.cli._options import load_config

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))


def _train_keys() -> set[str]:
    args = build_parser().parse_args(["train"])
    return set(cli.TRAIN_DEFAULTS) | {key for key in vars(args) if key not in ("handler", "defaults", "subparsers")}


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_an_example_config_has_only_known_keys_and_its_model_builds(path):
    config = load_config(str(path), _train_keys())
    square = 784 if config.get("dataset") != "digits" else 64
    model = cli.build_model(config["model"], config.get("layers"), square, 10, 0)
    assert model.phases()
    options = {**cli.TRAIN_DEFAULTS, **config}
    assert cli.training_settings(options, model).epochs  # the settings validate


def test_a_config_takes_the_keys_the_command_line_page_names(tmp_path):
    # docs/cli.md: the long flags' names, - or _, and report/progress for --no-report/--no-progress
    path = tmp_path / "job.yaml"
    path.write_text("report: false\nprogress: false\nrun-id: r\nbatch_size: 32\n")
    assert load_config(str(path), _train_keys()) == {"report": False, "progress": False, "run_id": "r",
                                                      "batch_size": 32}


def test_the_three_examples_are_there():
    assert [path.name for path in EXAMPLES] == ["cluster-job.yaml", "dbn-digits.yaml", "lenet-digits28.yaml"]


def test_the_example_csv_stages_as_the_command_line_page_shows(tmp_path):
    # docs/cli.md: sparkdbn stage --input examples/digits-raw.csv --label-col digit --test-fraction 0.2 --scale minmax
    url = str(tmp_path / "datasets" / "raw")
    assert main(["stage", "--input", str(EXAMPLES[0].parent / "digits-raw.csv"), "--url", url, "--label-col", "digit",
                 "--test-fraction", "0.2", "--scale", "minmax"]) == 0
    meta = storage.open_dataset(url).meta
    assert (meta["n_samples"], meta["feature_shape"], meta["n_classes"]) == (240, [64], 10)
    assert meta["scaling"]["kind"] == "minmax" and storage.open_dataset(url + "/test").meta["n_samples"] == 60
