"""Ctrl-C and a reader that leaves early: one line or none, never a traceback.

The commands run as real processes with ``JAVA_HOME`` pointing nowhere (as in test_cli_errors.py):
what they are sent reaches them before Spark could start.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from node.cli import _commands, main

SETTLE_S = 60.0  # the longest a process may take to start or to end
ROOT = Path(__file__).resolve().parent.parent.parent
RESUME_MINE = "sparkdbn train: interrupted; run the same command again to resume run mine"
RESUME_TERMINATED = "sparkdbn train: terminated (SIGTERM); run the same command again to resume run mine"


def start_sparkdbn(*args: str, cwd: Path) -> subprocess.Popen:
    env = dict(os.environ, JAVA_HOME=str(cwd / "no-java-here"))
    return subprocess.Popen([sys.executable, "-m", "node.cli", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def open_writer_once_read(fifo: Path, process: subprocess.Popen) -> int:
    """The write end of ``fifo``, opened once ``process`` has opened it to read (it then waits in a read)."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline and process.poll() is None:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:  # ENXIO: no reader yet
            if error.errno != errno.ENXIO:
                raise
        time.sleep(0.05)
    pytest.fail(f"the command never read {fifo}: {process.poll()=}")


@pytest.mark.parametrize("sent, status, said", [(signal.SIGINT, 130, "interrupted"),
                                                (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_ctrl_c_or_sigterm_is_one_line_and_its_exit_status(tmp_path, sent, status, said):
    # Ctrl-C during `sparkdbn train` printed PySpark's KeyboardInterrupt traceback, some 90 lines; `kill PID`
    # (SIGTERM) ended it at once with no line, a fit killed so leaving its record "running" and its lease held.
    # The command waits reading its --config, a pipe nobody writes to, when it is interrupted.
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    process = start_sparkdbn("train", "--store", str(tmp_path / "store"), "--config", str(fifo), cwd=tmp_path)
    writer = open_writer_once_read(fifo, process)
    try:
        process.send_signal(sent)
        out, err = process.communicate(timeout=SETTLE_S)
    finally:
        os.close(writer)
    assert process.returncode == status, err
    assert err.strip() == f"sparkdbn train: {said}" and out == ""


def train_until_an_epoch_is_recorded(store_url: str, run: str, attempt: int = 1,
                                     command: list[str] | None = None) -> subprocess.Popen:
    """``sparkdbn train`` of ``run`` (far more epochs than it gets; or ``command``), once the record of its
    ``attempt``-th fit counts an epoch."""
    import node

    command = command or [sys.executable, "-m", "node.cli", "train", "--store", store_url, "--run-id", run,
                          "--epochs", "200", "--no-report", "--no-progress", "--master", "local[2]"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 4 * SETTLE_S
    while time.monotonic() < deadline and process.poll() is None:
        record = None
        if storage_has_run(store_url, run):
            record = node.open_run(store_url, run).record
        if (record and record["status"] == "running" and record["attempts"] == attempt
                and any(step["epochs_done"] for step in record["steps"].values())):
            return process
        time.sleep(0.5)  # another process's files: nothing to wait on
    process.kill()
    pytest.fail(f"no epoch recorded: {process.communicate()[1][-3000:]}")


def storage_has_run(store_url: str, run: str) -> bool:
    return os.path.isdir(os.path.join(store_url[len("file://"):], "runs", run))


@pytest.mark.slow
def test_a_killed_driver_shows_as_stopped_and_sigterm_fails_the_record_and_releases_the_lease(tmp_path, capsys):
    # SIGKILL: `status` said "running", every node "alive", for as long as one cared to look, and the next
    # fit waited out the lease timeout (60 s) though the driver's process was gone from this host.
    import node
    import storage

    store_url = "file://" + str(tmp_path / "store")
    process = train_until_an_epoch_is_recorded(store_url, "mine")
    process.kill()
    process.communicate(timeout=SETTLE_S)
    assert main(["status", "--store", store_url, "--run", "mine"]) == 0
    screen = capsys.readouterr().out.splitlines()
    assert screen[0].startswith("run mine: stopped without finishing (its record says running)"), screen
    assert screen[1] == (f"  not running: its driver (host {os.uname().nodename}, pid {process.pid}) ended without "
                         "releasing the run's lease (its process no longer runs); the next fit of the run takes it "
                         "over at once and resumes it")
    nodes = screen[screen.index(next(line for line in screen if line.startswith("nodes ("))) + 1:]
    assert nodes and not any("alive" in line for line in nodes), screen

    # SIGTERM, in the fit that took the run over: handled as Ctrl-C.
    process = train_until_an_epoch_is_recorded(store_url, "mine", attempt=2)
    try:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=2 * SETTLE_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 143, err[-3000:]
    # One line of its own (the JVM may log after it, as it stops the Python workers).
    said = [line for line in err.splitlines() if line.startswith("sparkdbn train: ")]
    assert said == ["sparkdbn train: terminated (SIGTERM); run the same command again to resume run mine"], err[-3000:]
    key = node.resolve_run_key("mine", store_url, create=False).key
    record = node.open_run(store_url, "mine").record
    assert record["status"] == "failed" and record["error"] == "terminated (SIGTERM)", record.get("error")
    assert storage.LeaseFolder(storage.open_store(store_url), "mine", key).view().released
    assert main(["status", "--store", store_url, "--run", "mine"]) == 0
    assert capsys.readouterr().out.startswith("run mine: failed")


def main_interrupted(args: list[str]) -> int:
    try:
        return main(args)
    except KeyboardInterrupt as error:  # raised on, it would end pytest's session too
        pytest.fail(f"main raised {error!r}")


def test_ctrl_c_during_training_says_how_to_resume_the_run(tmp_path, monkeypatch, capsys):
    from node.driver import Trainer

    def interrupted_fit(trainer, model, data, y=None):
        trainer.run_id_ = trainer.settings.run_id or "20261202-140000-abcdef"  # as Trainer.fit names the run
        raise KeyboardInterrupt

    monkeypatch.setattr(_commands, "_session", lambda options: None)
    monkeypatch.setattr(Trainer, "fit", interrupted_fit)
    store = str(tmp_path / "store")
    given = ["train", "--store", store, "--no-report", "--run-id", "mine"]
    assert main_interrupted(given) == 130
    assert capsys.readouterr().err.strip() == RESUME_MINE
    assert main_interrupted(["train", "--store", store, "--no-report"]) == 130  # a new run id each time: say it
    assert capsys.readouterr().err.strip() == ("sparkdbn train: interrupted; run the same command with --run-id "
                                               "20261202-140000-abcdef to resume run 20261202-140000-abcdef")


def test_ctrl_c_that_py4j_turns_into_an_error_of_its_own_is_said_as_ctrl_c(tmp_path, monkeypatch, capsys):
    # py4j raises "Gateway must be connected to send cancel cmd." where it cannot cancel the interrupted call.
    from py4j.protocol import Py4JError

    from node.driver import Trainer

    def interrupted_fit(trainer, model, data, y=None):
        trainer.run_id_ = trainer.settings.run_id
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise Py4JError("Gateway must be connected to send cancel cmd.")

    monkeypatch.setattr(_commands, "_session", lambda options: None)
    monkeypatch.setattr(Trainer, "fit", interrupted_fit)
    assert main_interrupted(["train", "--store", str(tmp_path / "store"), "--no-report", "--run-id", "mine"]) == 130
    assert capsys.readouterr().err.strip() == RESUME_MINE
    monkeypatch.setattr(Trainer, "fit", lambda trainer, model, data, y=None: (_ for _ in ()).throw(Py4JError("down")))
    with pytest.raises(Py4JError, match="down"):  # an error of py4j's without a Ctrl-C is no interrupt
        main(["train", "--store", str(tmp_path / "store"), "--no-report", "--run-id", "mine"])


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path):
    # `sparkdbn status --run X | head -1` ended in a BrokenPipeError traceback.
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "no-java-here"))
    command = [sys.executable, "-c", "import sys; from node.cli import _commands, main; "
               "_commands.render_report = lambda store, run, out, **_: [f'plot {n}.png' for n in range(3)]; "
               "raise SystemExit(main(sys.argv[1:]))", "report", "--run", "planted"]
    with open(os.devnull) as stdin:
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdin=stdin, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # the reader is gone before anything is written: every write fails
    err = process.stderr.read()
    process.wait(timeout=SETTLE_S)
    assert process.returncode == 1, err
    assert err == ""


def test_ctrl_c_during_a_call_to_the_jvm_is_one_line_without_py4js_logged_traceback(tmp_path):
    # py4j logs a KeyboardInterrupt that arrives while it waits for the JVM as an ERROR with the traceback
    # (some 50 lines, on the root logger); the command's own line says it.
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "no-java-here"))
    # ... or the error of the call PySpark's Ctrl-C handler makes to cancel the jobs, inside the interrupted one,
    # or (on its own logger) the error of closing the interrupted call's connection
    py4j_interrupted = ("def fit(trainer, model, data, y=None):\n"
                        "    trainer.run_id_ = 'mine'\n"
                        "    try:\n"
                        "        try:\n"
                        "            raise RuntimeError('reentrant call inside <_io.BufferedReader name=3>')\n"
                        "        except RuntimeError:\n"
                        "            raise OSError('Error while sending or receiving')\n"
                        "    except OSError:\n"
                        "        logging.exception('Exception while sending command.')\n"
                        "    try:\n"
                        "        raise KeyboardInterrupt\n"
                        "    except KeyboardInterrupt:\n"
                        "        logging.exception('KeyboardInterrupt while sending command.')\n"
                        "        try:\n"
                        "            raise BrokenPipeError(32, 'Broken pipe')\n"
                        "        except BrokenPipeError:\n"
                        "            logging.getLogger('py4j.clientserver').exception('Exception occurred while '\n"
                        "                                                             'shutting down connection')\n"
                        "        raise\n")
    command = [sys.executable, "-c", "import logging, sys\nfrom node.cli import _commands, main\n"
               "from node.driver import Trainer\n" + py4j_interrupted + "Trainer.fit = fit\n"
               "_commands._session = lambda options: None\nraise SystemExit(main(sys.argv[1:]))",
               "train", "--store", str(tmp_path / "store"), "--run-id", "mine", "--no-report"]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=SETTLE_S)
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip() == RESUME_MINE


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, parent, ...), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def descendants(root: int) -> list[tuple[int, str]]:
    """The processes started by ``root``, and by those, read from /proc (any thread's children), each as
    ``(pid, start time)``: a pid the system gives another process later is never taken for one of them."""
    stats = {int(entry): _stat(int(entry)) for entry in os.listdir("/proc") if entry.isdigit()}
    found, todo = [], [root]
    while todo:
        above = todo.pop()
        children = [pid for pid, fields in stats.items() if fields and int(fields[1]) == above]
        found += [(pid, stats[pid][19]) for pid in children]
        todo += children
    return found


def running(process: tuple[int, str]) -> bool:
    """Whether ``(pid, start time)`` still runs (not ended, not a zombie, not another process of that pid)."""
    fields = _stat(process[0])
    return fields is not None and fields[19] == process[1] and fields[0] != "Z"


@pytest.mark.slow
def test_sparkdbn_submit_stopped_or_killed_ends_its_driver_and_the_record_says_so(tmp_path):
    # `kill -9` of sparkdbn-submit left spark-submit's JVM and the driver's Python training on, with no one to stop
    # them, and `kill PID` ended the script alone as well: a rerun was refused while the lease was held.
    import node
    import storage

    store_url = "file://" + str(tmp_path / "store")
    command = [sys.executable, str(ROOT / "scripts" / "sparkdbn-submit"), "--master", "local[2]", "--", "train",
               "--store", store_url, "--run-id", "mine", "--epochs", "200", "--no-report", "--no-progress"]
    for attempt, sent in ((1, signal.SIGTERM), (2, signal.SIGKILL)):
        process = train_until_an_epoch_is_recorded(store_url, "mine", attempt=attempt, command=command)
        started = descendants(process.pid)
        assert started, "spark-submit runs under the script"
        try:
            process.send_signal(sent)
            out, err = process.communicate(timeout=SETTLE_S)
            deadline = time.monotonic() + SETTLE_S
            while time.monotonic() < deadline and any(running(child) for child in started):
                time.sleep(0.2)  # another process's end: nothing to wait on
            assert not [child for child in started if running(child)], (sent, err[-3000:])
        finally:  # what the test started ends with it, whatever happened
            if process.poll() is None:
                process.kill()
            for pid, start in started:
                if running((pid, start)):
                    os.kill(pid, signal.SIGKILL)
        record = node.open_run(store_url, "mine").record
        assert record["status"] == "failed", (sent, record.get("error"))
        if sent == signal.SIGTERM:  # passed on to the driver, which ended as `kill PID` ends it
            assert process.returncode == 143 and record["error"] == "terminated (SIGTERM)", err[-3000:]
            # Its one line reaches the terminal (spark-submit's JVM copies the driver's output to its stdout and
            # exits as the driver ends: the line was lost, and Spark's traces of its stop came instead).
            lines = [line for line in out.splitlines() if line.strip()]
            assert lines[-1:] == [RESUME_TERMINATED], (out[-2000:], err[-2000:])
        key = node.resolve_run_key("mine", store_url, create=False).key
        assert storage.LeaseFolder(storage.open_store(store_url), "mine", key).view().released
