"""Suite-wide settings and the one shared Spark session.

Everything binds and talks to loopback only (Spark included), Spark's UI stays off, and
the whole suite shares one ``local[2,4]`` session: two worker threads (so two Python
workers, two nodes) and up to four attempts per task, so a killed Python worker is retried
as on a cluster.  Starting a session costs 10-20 s, so no test file starts its own.
"""

import os
import sys
import tempfile

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Spark's UI is on by default (as Spark's own default); the tests, and every Spark process they
# start, turn it off -- a setting Spark is given, which sparkdbn's defaults never override.
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.enabled=false pyspark-shell")
# Run keys the fits generate are kept under $XDG_CONFIG_HOME/sparkdbn/keys: a folder of the
# suite's own, never the user's ~/.config; and no key from the environment leaks in.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="sparkdbn-test-config-")
for _name in ("SPARKDBN_KEY", "SPARKDBN_KEY_FILE"):
    os.environ.pop(_name, None)


@pytest.fixture(scope="session")
def spark():
    """The suite's one local SparkSession, stopped at the end."""
    from node import get_spark_session

    session = get_spark_session("local[2,4]", app_name="sparkdbn-tests")
    yield session
    session.stop()
