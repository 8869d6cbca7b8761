"""A local SparkSession with embedded defaults, or the session spark-submit already made.

Defaults: ``local[2,4]`` (two worker threads, up to four attempts per task so that a crashed Python worker is
retried as it would be on a cluster; plain ``local[2]`` never retries), loopback networking for a local master
(a standalone master's driver binds the address that routes to the master, or ``SPARK_LOCAL_IP``:
:func:`~node.executor.driver_address`), console progress off (the driver draws its own), executors running
this very Python (``PYSPARK_PYTHON = sys.executable``) so that they import the same packages.  The Spark UI
follows Spark's own default (on, port 4040 and up).

Spark settings come, strongest first, from ``conf`` (the command line's ``--conf``), then from
what Spark was already given -- spark-submit's ``--conf``/``--master``, ``PYSPARK_SUBMIT_ARGS``,
``spark-defaults.conf`` -- and only then from these defaults, which never override a setting
Spark was given.

A local master's Python workers fork from sparkdbn's daemon (``spark.python.daemon.module``,
:mod:`node.executor._daemon`), which imports the executor side once: Spark replaces a worker that
was idle for 60 s, and a fresh one imported sparkdbn again -- digits28 LeNet, a fit after 70 s
idle on ``local[2]``: the workers ready in 6.5-13 s, from the daemon 2.6-3.1 s (load 3-11).  The
executors of a local master run this very Python, so the daemon imports what the tasks import.

A session this module starts begins starting its Python workers at once, in a job of one short task
per slot that nobody waits for (:func:`start_python_workers`): a daemon's imports and the workers'
start take seconds, and whatever the caller does before the first fit -- reading or loading its
data -- hides them.  The fit itself starts them too (its first job would wait for them otherwise).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Mapping

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from ..executor import driver_address, start_worker_task
from ._progress import SparkJob

__all__ = ["DEFAULT_MASTER", "dynamic_allocation", "get_spark_session", "given_spark_conf", "session_settings",
           "running_under_spark_submit", "start_python_workers", "task_slots", "with_task_retries"]

#: The job group of :func:`start_python_workers`'s jobs.
START_WORKERS_GROUP = "sparkdbn-start-workers"

logger = logging.getLogger(__name__)

DEFAULT_MASTER = "local[2,4]"

_DEFAULT_CONF: dict[str, str] = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Python workers are reused across tasks and jobs: the executor node lives in them.
    "spark.python.worker.reuse": "true",
    "spark.sql.shuffle.partitions": "4",
}

#: What a local master's session gets besides (its executors run this Python: see the module docstring).
_LOCAL_CONF: dict[str, str] = {"spark.python.daemon.module": "node.executor._daemon"}


def with_task_retries(master: str, attempts: int = 4) -> str:
    """``local[N]`` -> ``local[N,attempts]``; other masters unchanged.

    Plain ``local[N]`` fails a job on the first task failure, so a crashed Python worker
    (which a cluster simply retries) would end the run.
    """
    match = re.fullmatch(r"local\[(\d+|\*)\]", master.strip())
    return f"local[{match.group(1)},{attempts}]" if match else master


#: What pyspark's own launcher puts in the SparkConf of a local session: not settings a user gave.
_LAUNCHER_KEYS = ("spark.master", "spark.app.name", "spark.app.submitTime", "spark.submit.deployMode",
                  "spark.submit.pyFiles", "spark.ui.showConsoleProgress")


def given_spark_conf(launch: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings Spark has before sparkdbn adds any (spark-submit's, PYSPARK_SUBMIT_ARGS', spark-defaults.conf).

    Starts (or joins, under spark-submit) the JVM gateway: the SparkConf a new context would load.
    A gateway started here gets ``launch`` (the caller's ``--conf``) on its command line: settings
    such as ``spark.driver.memory`` act only when the JVM starts, never after.
    """
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized(conf=SparkConf(loadDefaults=False).setAll(list((launch or {}).items())))
    given = dict(SparkConf().getAll())
    if not running_under_spark_submit():
        for key in _LAUNCHER_KEYS:
            given.pop(key, None)
    return given


def session_settings(given: Mapping[str, str], conf: Mapping[str, str] | None = None, *,
                     under_spark_submit: bool = False, local_master: bool = False,
                     driver_host: str | None = None) -> dict[str, str]:
    """The settings sparkdbn adds to a new session: its defaults where Spark was given nothing, then ``conf``.

    Under spark-submit only the quiet bits (console progress) are defaulted: spark-submit decided
    the master and the network.  A ``local_master`` gets sparkdbn's Python daemon too, and a
    ``driver_host`` (:func:`~node.executor.driver_address`) is where the driver binds and its executors
    reach it (None: Spark's own choice).
    """
    defaults = dict(_DEFAULT_CONF, **(_LOCAL_CONF if local_master else {}))
    if driver_host is not None:
        defaults.update({"spark.driver.host": driver_host, "spark.driver.bindAddress": driver_host})
    if under_spark_submit:
        defaults = {key: value for key, value in defaults.items() if key.startswith("spark.ui.")}
    settings = {key: value for key, value in defaults.items() if key not in given}  # never over what was given
    settings.update(conf or {})
    return settings


def running_under_spark_submit() -> bool:
    """True when this Python was started by spark-submit (the JVM gateway already exists)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get_spark_session(
    master: str | None = None,
    app_name: str = "sparkdbn",
    conf: Mapping[str, str] | None = None,
    *,
    start_workers: bool = True,
):
    """Return the active SparkSession, or start one with the embedded defaults.

    Parameters
    ----------
    master : str, optional
        Spark master URL (``local[N]`` becomes ``local[N,4]``, see :func:`with_task_retries`).  Ignored under spark-submit (its ``--master`` wins) and when
        a session is already active; defaults to :data:`DEFAULT_MASTER`.
    app_name : str
        Application name shown by the cluster manager.
    conf : mapping, optional
        Spark settings of the caller (the command line's ``--conf``); they override the
        embedded defaults and what Spark was given before.
    start_workers : bool
        When this call starts the session: start its Python workers now, in the background
        (:func:`start_python_workers`), so the first fit finds them ready.

    Returns
    -------
    pyspark.sql.SparkSession
    """
    active = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if active is not None and not active.sparkContext._jsc.sc().isStopped():
        return active
    builder = SparkSession.builder.appName(app_name)
    master = with_task_retries(master or DEFAULT_MASTER)
    driver_host = None
    if not running_under_spark_submit():
        builder = builder.master(master)
        driver_host = driver_address(master)  # a local master's driver binds loopback; a standalone's, towards it
    # Must be set before the JVM starts: the driver and the Python workers bind where the driver does, and
    # executors run the interpreter (and virtualenv) the driver runs.
    if driver_host is not None:
        os.environ.setdefault("SPARK_LOCAL_IP", driver_host)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = session_settings(given_spark_conf(conf), conf, under_spark_submit=running_under_spark_submit(),
                                local_master=master.startswith("local"), driver_host=driver_host)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    logger.info("Spark session: master %s, default parallelism %d", session.sparkContext.master,
                session.sparkContext.defaultParallelism)
    if start_workers:
        start_python_workers(session.sparkContext)
    return session


def start_python_workers(sc, slots: int | None = None, group: str = START_WORKERS_GROUP,
                         description: str = "sparkdbn: start the Python workers") -> SparkJob:
    """Start the Python workers of ``sc``'s executors in the background: a job of one short task per
    slot (default ``defaultParallelism``) in job group ``group``, collected by a daemon thread; the
    returned :class:`~node.driver._progress.SparkJob` may be waited for or not.  Jobs submitted
    meanwhile queue behind its tasks, which end as soon as their worker has imported sparkdbn's
    executor side.  Unwaited, a failure (the session stopped at once) is dropped: a fit starts the
    workers again with its own job."""
    slots = max(1, sc.defaultParallelism if slots is None else slots)
    rdd = sc.parallelize(range(slots), slots).mapPartitions(start_worker_task)
    return SparkJob(sc, rdd, group, description)


def dynamic_allocation(spark_conf: Mapping[str, str]) -> bool:
    """Whether Spark adds executors as jobs need them (then the tasks it runs at once now say little, and
    a job cannot be a barrier stage)."""
    return spark_conf.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true"


def task_slots(sc) -> int | None:
    """How many tasks ``sc``'s executors run at once now (Spark's count for its default resource
    profile: cores over ``spark.task.cpus``, GPUs over their per-task amount), or None where Spark
    does not say (no executor registered yet, or a Spark without the call).

    Unlike ``defaultParallelism`` it is not ``spark.default.parallelism``, which users set to a multiple
    of the cores for their own jobs: a node per *that* would queue tasks behind each other.
    """
    try:
        context = sc._jsc.sc()
        slots = int(context.maxNumConcurrentTasks(context.resourceProfileManager().defaultResourceProfile()))
    except Py4JError as error:  # a Spark whose JVM has no such method: the caller keeps its own count
        logger.debug("Spark does not say how many tasks run at once: %s", error)
        return None
    return slots if slots > 0 else None
