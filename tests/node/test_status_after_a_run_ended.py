"""`sparkdbn status` after a run ended: its nodes are not shown alive, a resumed fit does not carry the earlier
fit's error as its own, an interrupt is said in words, a driver gone without releasing is not said "killed"."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import storage
from node.cli._options import Terminated
from node.driver._fit_phases import failure_text
from node.run import RunRecord
from node.watch._status import driver_state, format_status

PHASES = ["finetune"]


def _record(status: str, **fields) -> dict:
    return {"status": status, "created": 100.0, "phases": PHASES, **fields,
            "steps": {"finetune": {"epochs_done": 1, "epochs": 3, "nodes": [], "result": None, "restarts": []}}}


def _node_lines(screen: str) -> dict[str, str]:
    """``{node: its state}`` from the screen's node lines."""
    lines = screen.splitlines()
    first = lines.index(next(line for line in lines if line.startswith("nodes ("))) + 1
    return {line.split()[0]: line.split()[1] for line in lines[first:] if not line.startswith("    ")}


def _ended_pid() -> int:
    """The pid of a process of this host that has ended."""
    process = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                             check=True)
    return int(process.stdout)


def test_nodes_of_a_failed_or_finished_run_are_shown_gone_though_their_entries_say_alive():
    peers = {"n1": {"status": "alive", "last_seen": 150.0, "host": "elsewhere", "pid": 7},
             "n2": {"status": "gone", "last_seen": 150.0, "host": "elsewhere", "pid": 8}}
    for status in ("failed", "done"):
        screen = format_status("r1", _record(status, finished=160.0), peers, now=170.0)
        assert _node_lines(screen) == {"n1": "gone", "n2": "gone"}, screen
    running = format_status("r1", _record("running"), peers, now=170.0, driver=(True, "driver: host h, pid 1"))
    assert _node_lines(running) == {"n1": "alive", "n2": "gone"}, running


def test_nodes_of_an_earlier_fit_of_a_resumed_run_are_shown_gone_and_this_fits_alive():
    peers = {"old": {"status": "alive", "last_seen": 150.0, "host": "elsewhere", "pid": 7},
             "new": {"status": "alive", "last_seen": 210.0, "host": "elsewhere", "pid": 9}}
    record = _record("running", resumed=200.0, finished=160.0, devices={"old": {"kind": "cpu", "host": "elsewhere"}})
    screen = format_status("r1", record, peers, now=215.0, driver=(True, "driver: host h, pid 1"))
    assert _node_lines(screen) == {"old": "gone", "new": "alive"}, screen


def test_where_entries_and_record_name_the_fit_the_ids_decide_not_two_hosts_clocks():
    # A node of this fit on a host whose clock is behind the driver's was shown gone just after a resume.
    behind = {"status": "alive", "last_seen": 190.0, "host": "elsewhere", "pid": 9, "fit": "fit-2"}
    ahead = {"status": "alive", "last_seen": 230.0, "host": "elsewhere", "pid": 7, "fit": "fit-1"}
    record = _record("running", resumed=200.0, fit="fit-2")
    screen = format_status("r1", record, {"this": behind, "earlier": ahead}, now=215.0, driver=(True, "driver: h"))
    assert _node_lines(screen) == {"this": "alive", "earlier": "gone"}, screen
    # A record written before records named the fit: the clocks, as before.
    older = format_status("r1", _record("running", resumed=200.0), {"this": behind, "earlier": ahead}, now=215.0,
                          driver=(True, "driver: h"))
    assert _node_lines(older) == {"this": "gone", "earlier": "alive"}, older


def test_a_node_of_this_host_whose_process_ended_is_shown_gone_while_its_run_runs():
    here = socket.gethostname()
    peers = {"ended": {"status": "alive", "last_seen": 150.0, "host": here, "pid": _ended_pid()},
             "running": {"status": "alive", "last_seen": 150.0, "host": here, "pid": os.getppid()}}
    screen = format_status("r1", _record("running"), peers, now=155.0, driver=(True, "driver: host h, pid 1"))
    assert _node_lines(screen) == {"ended": "gone", "running": "alive"}, screen


class _Runs:
    run = "r1"

    def __init__(self) -> None:
        self.written: list[dict] = []

    def write_record(self, record: dict, *, generation: int = 0) -> str:
        self.written.append(dict(record))
        return "record"


class _Lease:
    generation = 2
    fit_id = "fit-2"

    def check_store(self) -> None:
        pass


def _resume(previous: dict) -> dict:
    runs = _Runs()
    record, resumed = RunRecord.start(runs, _Lease(), previous, spec={"kind": "dbn"}, phases=PHASES,
                                      epochs={"finetune": 3}, settings={}, store_url="file:///s",
                                      data_facts={"feature_shape": [4]}, classes=None)
    assert resumed and runs.written[-1]["status"] == "running"
    return record.data


def test_a_resumed_record_keeps_the_earlier_fits_error_as_history_not_as_its_own():
    failed = dict(_record("failed", finished=160.0, error="interrupted (Ctrl-C)"), spec={"kind": "dbn"},
                  version=2, data={"feature_shape": [4]})
    resumed = _resume(dict(failed, fit="fit-1"))
    assert "error" not in resumed and resumed["previous_error"] == "interrupted (Ctrl-C)"
    assert resumed["fit"] == "fit-2"  # the resuming fit's: its nodes' entries name it
    # Nor the earlier fit's end as its own: a running record said "resumed 5s ago, finished 9s ago".
    assert "finished" not in resumed and "finished" not in format_status("r1", resumed, {}, now=300.0)
    resumed.update(status="done", finished=300.0)
    screen = format_status("r1", resumed, {}, now=310.0).splitlines()
    assert screen[0].startswith("run r1: done ")
    assert not any(line.startswith("  error:") for line in screen), screen
    assert screen[1] == "  the fit before this one failed: interrupted (Ctrl-C)"

    # The fit after one that ended without an error (stopped after a phase, as asked) names none before it.
    again = _resume(dict(resumed, status="stopped"))
    assert "error" not in again and "previous_error" not in again


def test_an_interrupt_is_recorded_in_words_and_other_errors_by_type_and_message():
    assert failure_text(KeyboardInterrupt()) == "interrupted (Ctrl-C)"
    assert failure_text(Terminated()) == "terminated (SIGTERM)"
    try:  # py4j raises an error of its own where it cannot cancel the call the Ctrl-C interrupted
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("An error occurred while calling o42.collect")
    except RuntimeError as error:
        assert failure_text(error) == "interrupted (Ctrl-C)"
    assert failure_text(ValueError("no rows")) == "ValueError: no rows"


def test_a_driver_of_this_host_gone_without_releasing_is_said_so_not_killed(tmp_path):
    folder = storage.LeaseFolder(storage.open_store(str(tmp_path)), "r", b"status-screen-run-key-of-32-bytes")
    entry = {"token": "t", "fit": "f", **storage.process_identity(), "pid": _ended_pid(), "started": time.time(),
             "timeout_s": 60.0}
    assert folder.take(1, entry)
    running, line = driver_state(folder, now=time.time())
    assert not running and "killed" not in line
    assert line == (f"not running: its driver (host {entry['host']}, pid {entry['pid']}) ended without releasing the "
                    "run's lease (its process no longer runs); the next fit of the run takes it over at once and "
                    "resumes it")
