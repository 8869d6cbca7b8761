"""A local SparkSession with embedded defaults, or the session spark-submit already made.

Defaults: ``local[2,4]`` (two worker threads, up to four attempts per task so that a
crashed Python worker is retried as it would be on a cluster; plain ``local[2]`` never
retries), loopback networking, UI and console progress off, executors running this very
Python (``PYSPARK_PYTHON = sys.executable``) so that they import the same packages.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Mapping

from pyspark.sql import SparkSession

__all__ = ["DEFAULT_MASTER", "get_spark_session", "running_under_spark_submit", "with_task_retries"]

logger = logging.getLogger(__name__)

DEFAULT_MASTER = "local[2,4]"

_DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Python workers are reused across tasks and jobs: the executor node lives in them.
    "spark.python.worker.reuse": "true",
    "spark.sql.shuffle.partitions": "4",
}


def with_task_retries(master: str, attempts: int = 4) -> str:
    """``local[N]`` -> ``local[N,attempts]``; other masters unchanged.

    Plain ``local[N]`` fails a job on the first task failure, so a crashed Python worker
    (which a cluster simply retries) would end the run.
    """
    match = re.fullmatch(r"local\[(\d+|\*)\]", master.strip())
    return f"local[{match.group(1)},{attempts}]" if match else master


def running_under_spark_submit() -> bool:
    """True when this Python was started by spark-submit (the JVM gateway already exists)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get_spark_session(
    master: str | None = None,
    app_name: str = "sparkdbn",
    conf: Mapping[str, str] | None = None,
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
        Extra Spark settings; they override the embedded defaults.

    Returns
    -------
    pyspark.sql.SparkSession
    """
    # Must be set before the JVM starts: the driver and the Python workers bind loopback
    # only, and executors run the interpreter (and virtualenv) the driver runs.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    active = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if active is not None and not active.sparkContext._jsc.sc().isStopped():
        return active
    builder = SparkSession.builder.appName(app_name)
    settings = dict(_DEFAULT_CONF)
    if running_under_spark_submit():
        # spark-submit decided the master and the network settings; keep only the quiet bits.
        settings = {key: value for key, value in settings.items() if key.startswith("spark.ui.")}
    else:
        builder = builder.master(with_task_retries(master or DEFAULT_MASTER))
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    logger.info("Spark session: master %s, default parallelism %d", session.sparkContext.master,
                session.sparkContext.defaultParallelism)
    return session
