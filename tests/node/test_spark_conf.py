"""Spark as Spark users know it: ``--conf`` reaches Spark, what Spark was given is never overridden, the UI is Spark's."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.standalone import free_port

from node.driver._session import START_WORKERS_GROUP, session_settings

RUN_TIMEOUT_S = 300


def test_defaults_fill_only_what_spark_was_not_given_and_conf_wins():
    given = {"spark.sql.shuffle.partitions": "7", "spark.ui.enabled": "false"}
    settings = session_settings(given, {"spark.ui.enabled": "true"})
    assert "spark.sql.shuffle.partitions" not in settings  # spark-submit's 7 stays
    assert settings["spark.ui.enabled"] == "true"  # the command line's --conf is the user's latest word
    assert settings["spark.ui.showConsoleProgress"] == "false"
    assert "spark.ui.enabled" not in session_settings({})  # the UI follows Spark's default: on
    local = session_settings({}, local_master=True, driver_host="127.0.0.1")
    assert local["spark.driver.host"] == local["spark.driver.bindAddress"] == "127.0.0.1"
    assert "spark.driver.host" not in session_settings({}, driver_host=None)  # e.g. yarn: Spark's own choice
    assert "spark.driver.host" not in session_settings({"spark.driver.host": "10.0.0.9"}, driver_host="10.0.0.5")
    submitted = session_settings({"spark.driver.host": "10.0.0.5"}, under_spark_submit=True, driver_host="10.0.0.5")
    assert submitted == {"spark.ui.showConsoleProgress": "false"}  # spark-submit decided master and network


def test_a_local_session_forks_its_python_workers_from_sparkdbns_daemon_and_a_cluster_keeps_pysparks():
    assert session_settings({}, local_master=True)["spark.python.daemon.module"] == "node.executor._daemon"
    assert "spark.python.daemon.module" not in session_settings({})  # a cluster's executors may run another Python
    assert "spark.python.daemon.module" not in session_settings({"spark.python.daemon.module": "theirs"},
                                                                local_master=True)
    assert "spark.python.daemon.module" not in session_settings({}, under_spark_submit=True, local_master=True)


def test_the_suites_local_workers_are_forks_of_a_daemon_that_imported_sparkdbn(spark):
    def daemon_command(_rows):
        list(_rows)
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
            yield handle.read().replace(b"\0", b" ").decode()

    commands = spark.sparkContext.parallelize(range(2), 2).mapPartitions(daemon_command).collect()
    assert len(commands) == 2 and all("-m node.executor._daemon" in command for command in commands), commands


_STARTED_WORKERS_PROBE = f"""
import json, time
import node
spark = node.get_spark_session(conf={{"spark.ui.enabled": "false"}})
tracker = spark.sparkContext.statusTracker()
deadline = time.monotonic() + {RUN_TIMEOUT_S}
jobs = []
while time.monotonic() < deadline:  # a wait for the outcome, not a timing: the job may still run
    jobs = [tracker.getJobInfo(job) for job in tracker.getJobIdsForGroup({START_WORKERS_GROUP!r}) or []]
    if jobs and all(job is not None and job.status in ("SUCCEEDED", "FAILED") for job in jobs):
        break
    time.sleep(0.2)
stage = tracker.getStageInfo(jobs[0].stageIds[0]) if jobs else None
print(json.dumps({{"jobs": [job.status for job in jobs], "tasks": stage and stage.numTasks,
                  "failed": stage and stage.numFailedTasks, "slots": spark.sparkContext.defaultParallelism}}))
spark.stop()
"""


def test_a_session_sparkdbn_starts_starts_its_python_workers_at_once_in_a_job_nobody_waits_for():
    """A fresh session from ``get_spark_session``: its first job, in its own group, starts a Python worker per
    slot before anything asks for one.  (In a process of its own: Spark's status tracker forgets the oldest
    jobs past ``spark.ui.retainedJobs``, so the suite's long-lived session may no longer know its first.)"""
    done = subprocess.run([sys.executable, "-c", _STARTED_WORKERS_PROBE], capture_output=True, text=True,
                          env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"), timeout=2 * RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["jobs"] == ["SUCCEEDED"], seen
    assert seen["tasks"] == seen["slots"] == 2 and seen["failed"] == 0, seen  # get_spark_session's local[2]


_FORK_SAFETY_PROBE = """
import sys, threading, pykka, zmq
import node.executor._daemon
print(len(threading.enumerate()), len(pykka.ActorRegistry.get_all()), zmq.Context._instance is None,
      any(name == "cupy" or name.startswith(("cupy.", "cupy_backends")) for name in sys.modules))
"""


def test_the_daemon_forks_from_a_process_with_no_threads_actors_zmq_context_or_cupy():
    # a fork copies only the forking thread: a lock another thread held stays held in every worker
    done = subprocess.run([sys.executable, "-c", _FORK_SAFETY_PROBE], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "0", "True", "False"], done.stdout


def _ui_answers(port: int) -> str | None:
    """The page Spark's UI serves at /jobs/ on 127.0.0.1:port, or None while nothing answers there."""
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        connection.request("GET", "/jobs/")
        response = connection.getresponse()
        return response.read().decode(errors="replace") if response.status == 200 else None
    except OSError:
        return None


def _train_with_the_ui_at(port: int, folder: Path) -> tuple[int, str, str | None]:
    """A run of the command line with Spark's UI at ``port``: its exit code, its output, and the UI's jobs
    page as last read while the run trained (None if it never answered)."""
    command = [sys.executable, "-m", "node.cli", "train", "--store", str(folder / "store"), "--run-id", "ui",
               "--layers", "16", "--epochs", "1", "--no-report", "--no-progress",
               "--conf", "spark.ui.enabled=true", "--conf", f"spark.ui.port={port}"]
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")  # PYSPARK_SUBMIT_ARGS (conftest) turns the UI off: --conf wins
    process = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    page = None
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while "Spark Jobs" not in (page or "") and process.poll() is None and time.monotonic() < deadline:
            page = _ui_answers(port)  # "Spark is starting up" first, then the jobs page
            time.sleep(0.2)  # polling the port with a deadline while the run goes on
        output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, output, page


@pytest.mark.slow
def test_conf_turns_on_spark_ui_at_the_port_given_while_a_run_trains(tmp_path: Path):
    # A port found free may be taken by another process before the driver's JVM binds it (Spark then moves
    # its UI to the next port): a run whose UI never answered at its port is tried again on another, at
    # most three times.
    for attempt in range(3):
        folder = tmp_path / f"attempt-{attempt}"
        folder.mkdir()
        returncode, output, page = _train_with_the_ui_at(free_port(), folder)
        assert returncode == 0, output[-3000:]
        if page is not None and "Spark Jobs" in page:
            break
    assert page is not None and "Spark Jobs" in page, output[-3000:]


def test_conf_that_acts_only_when_the_jvm_starts_reaches_it():
    # spark.driver.memory sizes the driver JVM's heap (local mode: the executors' too): given after the
    # JVM started it would be recorded and ignored (1 GB, Spark's default).
    script = ("import node\n"
              "spark = node.get_spark_session(conf={'spark.driver.memory': '1536m'})\n"
              "print('heap', spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory() // 2**20)\n"
              "spark.stop()\n")
    done = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"),
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    heap_mb = int(next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("heap ")))
    assert heap_mb == 1536, done.stdout
