"""Suite-wide settings and the one shared Spark session.

Everything binds and talks to loopback only (Spark included), Spark's UI stays off, and
the whole suite shares one ``local[2,4]`` session: two worker threads (so two Python
workers, two nodes) and up to four attempts per task, so a killed Python worker is retried
as on a cluster.  Starting a session costs 10-20 s, so no test file starts its own.
"""

import os
import sys

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark():
    """The suite's one local SparkSession, stopped at the end."""
    from node import get_spark_session

    session = get_spark_session("local[2,4]", app_name="sparkdbn-tests")
    yield session
    session.stop()
