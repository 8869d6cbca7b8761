"""Fixtures for the actors tests: a real local store in tmp_path and node processes we clean up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import actors
import storage
from _support import RUN, SECRET, Intruder

WORKER = Path(__file__).with_name("_worker.py")


@pytest.fixture
def store(tmp_path):
    return storage.open_store(str(tmp_path / "store"))


class Processes:
    """Starts ``_worker.py`` processes and always kills (by PID) those still running at teardown."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.out = root / "out"
        self.out.mkdir()
        self.started: dict[str, subprocess.Popen] = {}

    def start(self, config: dict) -> subprocess.Popen:
        config = {"out": str(self.out), **config}
        log = open(self.root / f"{config['node']}.log", "wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        command = [sys.executable, str(WORKER), json.dumps(config)]
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        self.started[config["node"]] = process
        return process

    def log(self, node: str) -> str:
        return (self.root / f"{node}.log").read_text(errors="replace")

    def wait(self, node: str, timeout_s: float = 60.0) -> int:
        try:
            return self.started[node].wait(timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"node process {node} did not finish within {timeout_s} s; its log:\n{self.log(node)}")

    def result(self, node: str):
        import numpy as np

        with np.load(self.out / f"{node}.npz", allow_pickle=False) as data:
            params = {name: data[name] for name in data.files}
        return params, json.loads((self.out / f"{node}.json").read_text())

    def poll(self, condition, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
            time.sleep(0.02)

    def kill_all(self) -> None:
        for process in self.started.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)


@pytest.fixture
def processes(tmp_path):
    launched = Processes(tmp_path)
    try:
        yield launched
    finally:
        launched.kill_all()


@pytest.fixture
def node(store):
    """A started node ("victim") whose periodic store listing is off: tests trigger listings themselves."""
    handle = actors.start_node(RUN, "victim", store, SECRET, anti_entropy_interval_s=600.0, peer_refresh_interval_s=0.05)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def intruder(store):
    """A raw XPUB socket registered as a peer with the run's key."""
    with Intruder(store) as sender:
        yield sender
