"""Stagings of one dataset exclude each other; a training set and its held-out split are one pair.

Real local store, no Spark: a staging held at one of its shard writes (as a slow or paused stager is)
while a second staging of the same dataset starts; a ``--test-fraction --overwrite`` staging killed
between its two datasets.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import storage._dataset_staging as dataset_staging
from node.cli._data import held_out_split
from node.data import stage_input, stage_recipe
from rbm.datasets import load_digits01
from storage import (
    DatasetError,
    DatasetLease,
    Store,
    StoreUnavailableError,
    open_dataset,
    open_split,
    open_store,
    stage_arrays,
)

#: Renewals every 0.1 s: a second staging sees the first renew within a fraction of a second.
LEASE_TIMEOUT_S = 0.4
#: The lease timeout of a staging that must be refused: long, so it is refused at the holder's next renewal
#: (0.1 s apart) whatever the load, yet polls every 0.5 s (timeout / 8); a holder that never renews fails it in 4 s.
REFUSED_STAGING_LEASE_TIMEOUT_S = 4.0
DEADLINE_S = 60.0


def _data(n: int, offset: float) -> tuple[np.ndarray, np.ndarray]:
    X = (np.arange(n * 4, dtype=np.float32).reshape(n, 4) + offset) / (n * 4 + offset)
    return X, np.arange(n) % 3


class HeldStore(Store):
    """A store whose write of a second shard waits until ``go`` is set (``held`` says it got there)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.held, self.go = threading.Event(), threading.Event()

    def write_bytes(self, path: str, data: bytes) -> None:
        if path.endswith("part-00001.parquet"):
            self.held.set()
            assert self.go.wait(DEADLINE_S), "the test never let the held staging go on"
        super().write_bytes(path, data)


def test_a_second_staging_of_a_dataset_is_refused_while_the_first_runs_and_the_first_completes_whole(tmp_path):
    url = str(tmp_path / "d")
    X0, y0 = _data(30, 0.0)
    stage_arrays(url, X0, y0, shards=3)
    (XA, yA), (XB, yB) = _data(60, 1.0), _data(45, 2.0)
    first = HeldStore(url)
    outcome: list[BaseException | dict] = []

    def stage_first() -> None:
        try:
            outcome.append(stage_arrays(first, XA, yA, shards=3, overwrite=True, lease_timeout_s=LEASE_TIMEOUT_S))
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            outcome.append(error)

    thread = threading.Thread(target=stage_first, daemon=True)
    thread.start()
    assert first.held.wait(DEADLINE_S)  # the first staging is writing its shards
    with pytest.raises(DatasetError, match=r"another staging of .* is running \(host .*, pid \d+.*renewed its lease"):
        stage_arrays(url, XB, yB, shards=3, overwrite=True, lease_timeout_s=REFUSED_STAGING_LEASE_TIMEOUT_S)
    first.go.set()
    thread.join(DEADLINE_S)
    assert len(outcome) == 1 and isinstance(outcome[0], dict), outcome
    X, y = open_dataset(url).read_all()  # every shard the meta names is there and verifies
    np.testing.assert_array_equal(X, XA)
    np.testing.assert_array_equal(y, yA)
    folder = open_dataset(url).meta["shards"][0]["name"].split("/")[0]
    assert sorted(open_store(url).list("")) == ["_meta.json", folder]  # no lease left between stagings


def test_a_second_pair_staging_is_refused_while_the_first_writes_its_training_set_and_the_pair_stays_one(tmp_path):
    # The window two `sparkdbn stage` of one URL at once met: the first's held-out split complete, its training
    # set not yet.  The second took that split for what a killed staging left and staged it again (no lease of
    # the pair's), the first's training set came beside it, and training refused the pair as two stagings'.
    url = str(tmp_path / "d")
    first, outcome = HeldStore(url), []

    def stage_first() -> None:
        try:
            outcome.append(stage_recipe("digits", first, shards=3, random_state=0, lease_timeout_s=LEASE_TIMEOUT_S))
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            outcome.append(error)

    thread = threading.Thread(target=stage_first, daemon=True)
    thread.start()
    assert first.held.wait(DEADLINE_S)  # writing its training set's shards
    assert open_store(url).exists("test/_meta.json")  # ... its held-out split complete: the window
    with pytest.raises(DatasetError, match=r"another staging of .* is running \(host .*, pid \d+.*renewed its lease"):
        stage_recipe("digits", url, shards=3, random_state=1, lease_timeout_s=REFUSED_STAGING_LEASE_TIMEOUT_S)
    first.go.set()
    thread.join(DEADLINE_S)
    assert len(outcome) == 1 and isinstance(outcome[0], dict), outcome
    split = load_digits01(random_state=0)
    np.testing.assert_array_equal(open_dataset(url).read_all()[0], split.X_train)
    np.testing.assert_array_equal(open_split(url).read_all()[0], split.X_test)  # one staging's pair: it opens


def test_a_staging_that_ended_without_releasing_is_taken_over_at_once_by_the_same_command(tmp_path):
    url = str(tmp_path / "d")
    X, y = _data(30, 0.0)

    class FailingAtTheSwap(Store):
        def write_bytes(self, path: str, data: bytes) -> None:
            if path == "_meta.json":
                raise OSError("injected: the disk filled up at the swap")
            super().write_bytes(path, data)

        def delete(self, path: str, recursive: bool = False) -> bool:  # its cleanup fails too: the lease stays
            raise StoreUnavailableError("injected: the store refuses")

    with pytest.raises(OSError, match="disk filled up"):
        stage_arrays(FailingAtTheSwap(url), X, y, shards=2, lease_timeout_s=3600.0)
    assert open_store(url).list("_staging-lease")  # its lease was left behind
    started = time.monotonic()
    stage_arrays(url, X, y, shards=2, lease_timeout_s=3600.0)  # not an hour of watching: its holder ended
    assert time.monotonic() - started < 3600.0
    np.testing.assert_array_equal(open_dataset(url).read_all()[0], X)
    assert "_staging-lease" not in open_store(url).list("")


def _split_source(tmp_path, n: int, offset: int) -> str:
    rows = [",".join([str(k % 3)] + [str(offset + k + j) for j in range(4)]) for k in range(n)]
    path = tmp_path / f"source-{offset}.csv"
    path.write_text("label,a,b,c,d\n" + "\n".join(rows) + "\n")
    return str(path)


def test_a_test_fraction_staging_killed_between_its_two_datasets_is_refused_as_a_pair_then_completed(tmp_path,
                                                                                                     monkeypatch):
    url = "file://" + str(tmp_path / "store" / "mine")
    stage_input(_split_source(tmp_path, 90, 0), url, test_fraction=0.2)
    first_test = open_split(url).read_all()[0]
    real_stage, calls = dataset_staging._stage_leased, []

    def killed_after_the_test_split(*args, **kwargs):  # noqa: ANN002, ANN003 - _stage_leased's signature
        calls.append(args[0])
        if len(calls) == 2:  # the training set: killed before it
            raise KeyboardInterrupt
        return real_stage(*args, **kwargs)

    monkeypatch.setattr(dataset_staging, "_stage_leased", killed_after_the_test_split)
    new_source = _split_source(tmp_path, 120, 1000)
    with pytest.raises(KeyboardInterrupt):
        stage_input(new_source, url, test_fraction=0.2, overwrite=True)
    monkeypatch.undo()
    with pytest.raises(DatasetError, match=r"is not the test split of .*different stagings.*run the same staging "
                                           r"command again") as refused:
        held_out_split(url)
    assert "\n" not in str(refused.value)  # one line
    stage_input(new_source, url, test_fraction=0.2, overwrite=True)  # the same command again completes the pair
    X_test, _ = held_out_split(url)
    X_train, _ = open_dataset(url).read_all()
    assert len(X_test) + len(X_train) == 120 and not np.array_equal(X_test, first_test)
    assert not {tuple(row) for row in X_test} & {tuple(row) for row in X_train}  # no training row held out


STAGER = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = [sys.argv[1]]
    from storage import START_TIME_SLACK_S, DatasetLease, open_store
    time.sleep(START_TIME_SLACK_S + 0.5)  # a process started well before its entry, as a stager is
    with DatasetLease(open_store(sys.argv[2]), float(sys.argv[3])):
        print("held", flush=True)
        sys.stdin.read()  # hold it until the test is done
    """
)


def _other_stager(url: str, timeout_s: float) -> subprocess.Popen:
    root = str(Path(__file__).resolve().parents[2])
    stager = subprocess.Popen([sys.executable, "-c", STAGER, root, url, str(timeout_s)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert stager.stdout.readline().strip() == "held"
    return stager


def test_a_staging_held_by_a_running_process_of_this_host_is_refused_at_once_a_stopped_one_watched(tmp_path):
    # A second staging watched the holder until its next renewal (a quarter of its timeout, 15 s by default).
    url = str(tmp_path / "d")
    stager = _other_stager(url, 60.0)  # renews every 15 s: a watcher would wait for that renewal
    try:
        time.sleep(0.2)
        refused = rf"runs on this host \(pid {stager.pid}\) and renewed its lease \d+ s ago"
        with pytest.raises(DatasetError, match=refused):
            DatasetLease(open_store(url), 60.0).acquire()
    finally:
        stager.stdin.close()
        stager.wait(10)
    stager = _other_stager(url, 4.0)  # renews every second: judged by the time its renewal file holds
    try:
        time.sleep(1.5)
        assert any(name.endswith(".renewal") for name in open_store(url).list("_staging-lease"))
        with pytest.raises(DatasetError, match=rf"runs on this host \(pid {stager.pid}\) and renewed its lease"):
            DatasetLease(open_store(url), 60.0).acquire()
        stager.send_signal(signal.SIGSTOP)  # Ctrl-Z: it runs no more, so it is watched, then taken over
        while Path(f"/proc/{stager.pid}/stat").read_text().rpartition(")")[2].split()[0] != "T":
            time.sleep(0.01)  # the signal is delivered a moment later
        with DatasetLease(open_store(url), 1.0) as taker:
            assert taker.generation == 2  # over the stopped stager's 1 (the first left no lease folder)
    finally:
        stager.send_signal(signal.SIGCONT)
        stager.stdin.close()
        stager.wait(10)
