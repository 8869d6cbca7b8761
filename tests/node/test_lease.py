"""The run lease: one driver per run, generations taken by exclusive create, staleness on the observer's clock.

No Spark here: :class:`node.run.DriverLease` on a store, in this process and in helper processes
(``_lease_process.py``) that race for leases, hold them, or run with a shifted wall clock.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import node
import storage
from node.run import DriverLease
from support.webhdfs_server import WebHDFSServer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROCESS_TIMEOUT_S = 120.0
#: Short leases keep these tests fast: renewals every 0.1 s.
TIMEOUT_S = 0.4
#: The timeout of a driver that must be refused: long, so it is refused at the holder's next renewal (0.1 s
#: apart) whatever the load, yet polls every 0.5 s (timeout / 8); a holder that never renews fails it in 4 s.
REFUSED_TAKER_TIMEOUT_S = 4.0
#: The run key the leases here are signed with.
KEY = b"lease-test-run-key-32-bytes-long"

#: Shifts this process's ``time.time`` (and ``time_ns``) by ``SPARKDBN_TEST_CLOCK_SHIFT_S`` seconds;
#: ``time.monotonic`` is left alone, as a host whose wall clock is set wrong would have it.
SHIFTED_CLOCK = '''
import os, time
_shift_s = float(os.environ.get("SPARKDBN_TEST_CLOCK_SHIFT_S", "0"))
if _shift_s:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _shift_s
    time.time_ns = lambda: _time_ns() + int(_shift_s * 1e9)
'''


def deadline_poll(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)  # polling another process's files with a deadline


def lease_process(config: dict, clock_shift_s: float = 0.0, sitecustomize: Path | None = None) -> subprocess.Popen:
    paths = ([str(sitecustomize)] if sitecustomize else []) + [str(HERE), str(ROOT), str(ROOT / "tests")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), SPARKDBN_TEST_CLOCK_SHIFT_S=str(clock_shift_s))
    return subprocess.Popen([sys.executable, str(HERE / "_lease_process.py"), json.dumps(config)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def first_line(process: subprocess.Popen) -> dict:
    line = process.stdout.readline()
    assert line.startswith("{"), (line, process.stderr.read()[-3000:] if process.poll() is not None else "")
    return json.loads(line)


@pytest.fixture
def shifted_clock(tmp_path) -> Path:
    folder = tmp_path / "shifted-clock"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SHIFTED_CLOCK)
    return folder


@pytest.fixture
def started() -> list[subprocess.Popen]:
    """Processes a test started; the ones still running are killed (by PID) after it."""
    processes: list[subprocess.Popen] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def test_a_held_lease_refuses_a_second_driver_naming_the_holder_and_a_released_one_is_taken_at_once(store_url):
    store = storage.open_store(store_url)
    with DriverLease(store, "r1", KEY, TIMEOUT_S, fit_id="first-fit") as first:
        assert first.generation == 1
        with pytest.raises(node.LeaseHeldError, match=rf"another driver \(host .*, pid {os.getpid()}, fit first-fit"):
            DriverLease(store, "r1", KEY, REFUSED_TAKER_TIMEOUT_S).acquire()
    started_at = time.monotonic()
    with DriverLease(store, "r1", KEY, 60.0) as second:  # released: no watching, even with a long timeout
        assert second.generation == 2
    assert time.monotonic() - started_at < 60.0
    assert storage.LeaseFolder(store, "r1", KEY).view() == storage.LeaseView(generation=2, renewal=-1, released=True, highest=2)


def test_a_silent_lease_is_taken_over_only_after_it_stayed_unchanged_for_the_timeout_on_the_takers_clock(store_url,
                                                                                                       caplog):
    store = storage.open_store(store_url)
    dead = DriverLease(store, "r1", KEY, TIMEOUT_S)
    dead.acquire()
    dead._stop.set()  # a driver killed with SIGKILL: it neither renews nor releases
    dead._thread.join()
    watching = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="node.run._lease"):
        with DriverLease(store, "r1", KEY, TIMEOUT_S) as taker:
            assert time.monotonic() - watching >= TIMEOUT_S  # it watched the whole timeout first
            assert taker.generation == 2
    # Said as a warning, which the command line shows: the wait (60 s by default) was silent there.
    assert f"run r1 is held by driver host {os.uname().nodename}, pid {os.getpid()}" in caplog.text
    assert f"watching its renewals for up to {TIMEOUT_S:.0f} s before taking the run over" in caplog.text
    with pytest.raises(node.LeaseLostError, match=r"taken over by another driver .*lease generation 2"):
        dead.check_store()


def test_a_holder_of_this_host_whose_process_is_gone_is_taken_over_at_once_in_its_own_pid_namespace_only(
        tmp_path, started, caplog):
    # A driver killed with SIGKILL kept its run for the lease timeout (60 s by default) though the next fit,
    # on the same host, could see that its process no longer ran.
    store_url = "file://" + str(tmp_path / "store")
    store = storage.open_store(store_url)
    holder = lease_process({"store_url": store_url, "timeout_s": TIMEOUT_S, "run": "killed", "mode": "hold"})
    started.append(holder)
    assert first_line(holder)["held"] == 1
    holder.kill()
    holder.wait(timeout=30)
    with caplog.at_level(logging.WARNING, logger="node.run._lease"):
        with DriverLease(store, "killed", KEY, REFUSED_TAKER_TIMEOUT_S) as taker:
            assert taker.generation == 2
    assert "a process of this host that no longer runs" in caplog.text and "did not change for" not in caplog.text

    # The same host name and a pid that does not run here, in another pid namespace (a container sharing the
    # host's name): not known to be gone, so watched for the timeout.
    caplog.clear()
    entry = {**storage.process_identity(), "token": "t", "fit": "f", "pid": holder.pid, "pid_namespace": "pid:[1]",
             "started": time.time(), "timeout_s": TIMEOUT_S}
    assert storage.LeaseFolder(store, "elsewhere", KEY).take(1, entry)
    with caplog.at_level(logging.WARNING, logger="node.run._lease"):
        with DriverLease(store, "elsewhere", KEY, TIMEOUT_S) as taker:
            assert taker.generation == 2
    assert "did not change for" in caplog.text and "no longer runs" not in caplog.text


def _process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rpartition(")")[2].split()[0]


def test_a_renewing_holder_of_this_host_refuses_a_second_driver_at_once_and_a_stopped_one_is_watched(tmp_path,
                                                                                                      started, caplog):
    # A second `sparkdbn train` of a running run waited for the holder's next renewal (15 s by default) before
    # its refusal, though the holder ran on the same host and had renewed a moment before.
    store = storage.open_store("file://" + str(tmp_path / "store"))
    # Renewing every second: stopped, its newest renewal is younger than half its timeout for a while yet.
    holder = lease_process({"store_url": store.url, "timeout_s": REFUSED_TAKER_TIMEOUT_S, "run": "live",
                            "mode": "hold", "delay_s": storage.START_TIME_SLACK_S + 0.5})
    started.append(holder)
    assert first_line(holder)["held"] == 1
    with caplog.at_level(logging.WARNING, logger="node.run._lease"):
        # The taker's long timeout would have it watch for renewals: it is refused before any watching.
        with pytest.raises(node.LeaseHeldError, match=rf"pid {holder.pid}, .*runs on this host \(pid {holder.pid}\) "
                                                      r"and renewed its lease \d+ s ago"):
            DriverLease(store, "live", KEY, 3600.0).acquire()
    assert "watching its renewals" not in caplog.text

    # Stopped (Ctrl-Z): it runs no more, so it is watched and, silent for its timeout, taken over.
    holder.send_signal(signal.SIGSTOP)
    deadline_poll(lambda: _process_state(holder.pid) == "T", 30.0, "the holder to stop")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="node.run._lease"):
        with DriverLease(store, "live", KEY, TIMEOUT_S) as taker:
            assert taker.generation == 2
    assert "watching its renewals" in caplog.text and "did not change for" in caplog.text
    holder.send_signal(signal.SIGCONT)


def test_a_running_process_of_this_host_is_refused_at_once_only_as_the_holder_it_names_while_renewing(tmp_path,
                                                                                                      started):
    store = storage.open_store("file://" + str(tmp_path / "store"))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    started.append(sleeper)
    time.sleep(storage.START_TIME_SLACK_S + 1.5)  # a process started well before its entry, as a holder is
    identity = {**storage.process_identity(), "pid": sleeper.pid, "token": "t", "fit": "f", "timeout_s": TIMEOUT_S}

    def outcome(run: str, started_s: float, renewed: bool = False) -> str:
        folder = storage.LeaseFolder(store, run, KEY)
        assert folder.take(1, {**identity, "started": started_s})
        if renewed:
            folder.renew(1, 0, "t")  # just now
        try:
            with DriverLease(store, run, KEY, TIMEOUT_S):  # released again: no renewal thread outlives the test
                return "taken over"
        except node.LeaseHeldError as error:
            return "refused" if "runs on this host" in str(error) else f"refused after watching: {error}"

    assert outcome("fresh", time.time()) == "refused"  # taken a moment ago, not yet renewed
    # Its newest renewal (here: its taking) older than half the timeout: not known to renew, so watched.
    assert outcome("silent", time.time() - TIMEOUT_S) == "taken over"
    assert outcome("renewed", time.time() - TIMEOUT_S, renewed=True) == "refused"
    # An entry written before its pid's process started names another process (the pid reused): watched, though
    # renewed just now (by a holder elsewhere in this test; by no one, were the pid reused, so taken over).
    entry_s = time.time() - 1.0
    reused = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    started.append(reused)
    identity["pid"] = reused.pid
    assert outcome("reused", entry_s, renewed=True) == "taken over"


def test_a_taker_with_a_shorter_timeout_than_the_holders_watches_for_the_holders_own(store_url):
    store = storage.open_store(store_url)
    with DriverLease(store, "r1", KEY, 1.6):  # renewed every 0.4 s
        for _ in range(3):  # watching only 0.1 s, these would take a lease renewed four times slower
            with pytest.raises(node.LeaseHeldError, match="renewed its lease"):
                DriverLease(store, "r1", KEY, 0.1).acquire()


def test_a_driver_that_finds_a_newer_generation_stops_at_once_says_who_took_over_and_never_renews_again(store_url):
    store = storage.open_store(store_url)
    lost = []
    old = DriverLease(store, "r1", KEY, TIMEOUT_S, on_lost=lambda: lost.append(True))
    old.acquire()
    folder = storage.LeaseFolder(store, "r1", KEY)
    deadline_poll(lambda: folder.view().renewal >= 1, 10.0, "the holder's renewals")
    # Another driver took generation 2 while this one was paused (as after a SIGSTOP longer than the timeout).
    assert folder.take(2, {"token": "newer", "host": "elsewhere", "pid": 4242, "fit": "newer-fit", "started": 0.0})
    # The thread marks the lease lost, then calls on_lost: wait for both (under load the call came a moment later).
    deadline_poll(lambda: old.lost and lost, 10.0, "the old holder's renewal thread to notice and say so")
    assert lost == [True]
    with pytest.raises(node.LeaseLostError, match=r"host elsewhere, pid 4242, fit newer-fit.*lease generation 2"):
        old.check()
    renewals = [name for name in store.list("runs/r1/lease") if name.endswith(".renewal")]
    old._thread.join(timeout=10.0)
    old.release()  # writes nothing for a lost lease
    assert [name for name in store.list("runs/r1/lease") if name.endswith(".renewal")] == renewals
    assert folder.view() == storage.LeaseView(generation=2, highest=2)  # the newer holder's lease, untouched


def test_exactly_one_of_two_processes_released_together_takes_a_stale_or_released_lease_in_every_trial(tmp_path,
                                                                                                          started):
    trials = 200
    store_url = "file://" + str(tmp_path / "store")
    store = storage.open_store(store_url)
    for trial in range(trials):  # even trials: a released lease; odd ones: a lease whose holder died silent
        folder = storage.LeaseFolder(store, f"race-{trial}", KEY)
        folder.take(1, {"token": "dead", "host": "gone", "pid": 1})
        if trial % 2 == 0:
            folder.release(1, -1, "dead")
    config = {"mode": "race", "store_url": store_url, "timeout_s": 0.2, "trials": trials, "prefix": "race-",
              "barrier": str(tmp_path / "barrier"), "parties": 2}
    started += [lease_process(config), lease_process(config)]
    outcomes = []
    for process in started:
        out, err = process.communicate(timeout=PROCESS_TIMEOUT_S)
        assert process.returncode == 0, err[-3000:]
        outcomes.append([json.loads(line) for line in out.splitlines()])
    assert [len(lines) for lines in outcomes] == [trials, trials]
    for trial in range(trials):
        pair = [lines[trial] for lines in outcomes]
        took = [line for line in pair if "generation" in line]
        # Never two holders of one generation.  Both may return from acquire() only as a takeover: the
        # winner of generation 2 missed its renewals (a loaded machine) and the other took generation 3.
        assert len({line["generation"] for line in took}) == len(took), pair
        first = min(took, key=lambda line: line["generation"])
        assert first["generation"] == 2, pair  # the lease they raced for: exactly one took it
        assert storage.LeaseFolder(store, f"race-{trial}", KEY).holder(2)["token"] == first["token"]
        other = next(line for line in pair if line is not first)
        if "generation" in other:
            assert other["generation"] == 3, pair
            assert storage.LeaseFolder(store, f"race-{trial}", KEY).holder(3)["token"] == other["token"]
        else:
            assert f"pid {first['pid']}" in other["refused"], pair  # ... the other was refused, naming the winner
    # The two really met at the exclusive create, not one after the other, in a good share of the trials.
    met = sum("at the same moment" in line.get("refused", "") for lines in outcomes for line in lines)
    assert met >= trials // 20, met


@pytest.mark.parametrize("ahead", ["holder", "taker"])
def test_a_wall_clock_far_ahead_on_either_side_never_lets_a_renewed_lease_be_taken(tmp_path, shifted_clock, started,
                                                                                    monkeypatch, ahead):
    store_url = "file://" + str(tmp_path / "store")
    store = storage.open_store(store_url)
    hour_s = 3600.0
    holder = lease_process({"store_url": store_url, "timeout_s": TIMEOUT_S, "run": "skewed", "mode": "hold"},
                           hour_s if ahead == "holder" else 0.0, shifted_clock)
    started.append(holder)
    held = first_line(holder)
    assert held["held"] == 1 and (held["time"] - time.time() > hour_s / 2) == (ahead == "holder")  # the shift works
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + (hour_s if ahead == "taker" else -hour_s))
    for _ in range(3):  # the taker in this process, its wall clock two hours off the holder's, either way
        with pytest.raises(node.LeaseHeldError, match="renewed its lease while this fit watched"):
            DriverLease(store, "skewed", KEY, REFUSED_TAKER_TIMEOUT_S).acquire()
    holder.send_signal(signal.SIGKILL)  # now it is gone: its lease goes silent and is taken over (at once: its
    holder.wait(timeout=30)  # process of this host no longer runs), a holder's clock ahead notwithstanding
    monkeypatch.setattr(time, "time", lambda: real_time() + (hour_s if ahead == "taker" else 0.0))
    with DriverLease(store, "skewed", KEY, TIMEOUT_S) as taker:
        assert taker.generation == 2


def test_a_lease_kept_by_the_earlier_layout_is_watched_the_same_way(store_url):
    store = storage.open_store(store_url)
    legacy = "runs/r1/lease.json"
    store.write_bytes(legacy, json.dumps({"run": "r1", "host": "old-host", "pid": 7, "renewed": 1.0}).encode())
    stop_renewing = time.monotonic() + 2.0

    def old_driver_renews() -> None:  # a layout-2 driver rewrites lease.json at each renewal
        while time.monotonic() < stop_renewing:
            store.write_bytes(legacy, json.dumps({"run": "r1", "host": "old-host", "pid": 7,
                                                  "renewed": time.monotonic()}).encode())
            time.sleep(TIMEOUT_S / 8)  # the renewal interval of the simulated old driver

    renewer = threading.Thread(target=old_driver_renews, daemon=True)
    renewer.start()
    with pytest.raises(node.LeaseHeldError, match=r"host old-host, pid 7"):
        DriverLease(store, "r1", KEY, REFUSED_TAKER_TIMEOUT_S).acquire()
    renewer.join()
    with DriverLease(store, "r1", KEY, TIMEOUT_S) as taker:  # silent now: taken over after the timeout
        assert taker.generation == 1
    assert store.exists(legacy)  # not ours to delete


def test_renewals_on_a_store_whose_rename_cannot_overwrite_never_leave_a_moment_without_a_lease(tmp_path):
    with WebHDFSServer(tmp_path / "hdfs", rename_overwrite=False) as server:
        store = storage.open_store(server.store_url("/store"), retry_timeout_s=5.0)
        with DriverLease(store, "r1", KEY, TIMEOUT_S) as holder:
            folder = storage.LeaseFolder(store, "r1", KEY)
            deadline_poll(lambda: folder.view().renewal >= 2, 30.0, "two renewals")
            for _ in range(5):  # each taker watches through one or more renewals of the holder
                with pytest.raises(node.LeaseHeldError, match="renewed its lease"):
                    DriverLease(store, "r1", KEY, REFUSED_TAKER_TIMEOUT_S).acquire()
            assert not holder.lost
        assert store.backend.replaces_atomically is None  # nothing on the lease's path replaced a file


def test_a_lease_released_as_the_store_ends_fast_leaves_a_renewal_still_sending_as_it_is_and_is_not_released(
        tmp_path, monkeypatch):
    # Ctrl-C with the namenode's link cut: the renewal under way would hold the release for its 60 s answer
    # timeout, and, still sending, could land after a release; so the release is skipped, and the process ends.
    server = WebHDFSServer(tmp_path / "hdfs").start()
    try:
        monkeypatch.setattr(node.run._lease, "END_FAST_RENEWAL_WAIT_S", 0.2)
        store = storage.open_store(server.store_url("/s"))
        lease = DriverLease(store, "r1", KEY, TIMEOUT_S)
        lease.acquire()
        server.faults.stall_answers(seconds=3.0)
        deadline_poll(lambda: server.faults.requests_stalled >= 1, 10.0, "a renewal held back")
        store.end_fast()
        lease.release()
        lease._thread.join()  # its call ends with the stall: the renewal lands after the release was skipped
        after = storage.open_store(server.store_url("/s"))
        assert not storage.LeaseFolder(after, "r1", KEY).view().released
    finally:
        server.stop()


def test_a_store_outage_while_a_driver_holds_its_lease_is_ridden_out_and_never_read_as_another_holder(store_url,
                                                                                                     monkeypatch):
    store = storage.open_store(store_url)
    lease = DriverLease(store, "r1", KEY, TIMEOUT_S)
    lease.acquire()
    try:
        folder = storage.LeaseFolder(store, "r1", KEY)
        deadline_poll(lambda: folder.view().renewal >= 1, 10.0, "the holder's renewals")

        def unreachable(path, **_):
            raise storage.StoreUnavailableError(f"{store.url}/{path}: read_bytes failed (connection refused)")

        with monkeypatch.context() as outage:
            outage.setattr(store, "read_bytes", unreachable)
            # The check says the store is unreachable, naming it; the renewals retry; the lease is not lost.
            with pytest.raises(storage.StoreUnavailableError, match="connection refused"):
                lease.check_store()
            time.sleep(8 * TIMEOUT_S / 4.0)  # eight renewal intervals of the outage
            assert not lease.lost, lease._lost
        renewal = folder.view().renewal
        deadline_poll(lambda: folder.view().renewal > renewal, 10.0, "renewals after the outage")
        lease.check_store()
        assert not lease.lost
    finally:
        lease.release()
