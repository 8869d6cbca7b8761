"""Suite-wide settings, the one shared Spark session and the ``numerics`` fixture.

Everything binds and talks to loopback only (Spark included), Spark's UI stays off, and
the whole suite shares one ``local[2,4]`` session: two worker threads (so two Python
workers, two nodes) and up to four attempts per task, so a killed Python worker is retried
as on a cluster.  Starting a session costs 10-20 s, so no test file starts its own.

A test that asserts a statistic over seeds against a bound is marked ``seed_bound`` and checks it with
:mod:`support.seed_bounds`, so that ``scripts/check-seed-bounds`` measures every such bound under each
OpenBLAS kernel family (docs/testing.md).

A test that compares floating-point results of two code paths takes the ``numerics`` fixture:
it runs once per :data:`support.numerics.NUMERICS_SETTINGS` (the process's BLAS threads and C
order, then another thread count and Fortran order) and is marked ``numerics`` (docs/testing.md).
"""

import os
import shutil
import sys
import tempfile

import pytest
import support.seed_bounds
from support.jvm_archive import driver_jvm_options
from support.numerics import NUMERICS_SETTINGS, BlasSetting

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Spark's UI is on by default (as Spark's own default); the tests, and every Spark process they
# start, turn it off -- a setting Spark is given, which sparkdbn's defaults never override.
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.enabled=false pyspark-shell")
# Every Spark driver JVM the suite starts (its sessions, the driver processes and commands it runs,
# spark-submit) compiles with the client compiler only, as the virtual cluster's daemons do: its work
# happens in Python, and on 2 busy cores the server compiler's threads only took CPU from it.  A session's
# start and two small jobs used 11.5 s of the JVM's CPU, 7.2 s so; four DBN fits in one session 15.8 s,
# 8.7 s so (and under a load of 4-8 the start took 12-17 s instead of 21-25 s).  spark-submit adds
# SPARK_SUBMIT_OPTS to its JVM's options: no Spark setting changes.  (The collector stays the default:
# the serial one sizes the heap Runtime.maxMemory() reports differently, and tests read that.)
# They also map a class-data-sharing archive of Spark's classes, made once under .dev/jvm/ by the first
# suite to start (support.jvm_archive: a session's start took 2.0 s instead of 3.9-4.0 s).  pytest-xdist's
# workers inherit the options of the process that starts them.
# SPARK_SUBMIT_OPTS= (empty) in the environment turns both off.
if "SPARK_SUBMIT_OPTS" not in os.environ:
    os.environ["SPARK_SUBMIT_OPTS"] = driver_jvm_options("-XX:TieredStopAtLevel=1")
# The same for the standalone clusters' daemons (tests/support/standalone.py: a master and two workers
# used 10.4 s of CPU to start and stop, 5.9 s so).
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", "-XX:TieredStopAtLevel=1")
# Run keys the fits generate are kept under $XDG_CONFIG_HOME/sparkdbn/keys: a folder of the
# suite's own, never the user's ~/.config; and no key from the environment leaks in.
CONFIG_HOME = tempfile.mkdtemp(prefix="sparkdbn-test-config-")  # removed when the session ends
os.environ["XDG_CONFIG_HOME"] = CONFIG_HOME
for _name in ("SPARKDBN_KEY", "SPARKDBN_KEY_FILE"):
    os.environ.pop(_name, None)


@pytest.fixture(scope="session")
def spark():
    """The suite's one local SparkSession, stopped at the end."""
    from node import get_spark_session

    session = get_spark_session("local[2,4]", app_name="sparkdbn-tests")
    yield session
    session.stop()


@pytest.fixture(params=NUMERICS_SETTINGS, ids=lambda setting: setting.name)
def numerics(request) -> BlasSetting:
    """The BLAS setting this run of the test is under (applied for the test's duration); ``arrange``
    puts the test's input arrays in its memory order."""
    with request.param.applied() as setting:
        yield setting


def pytest_configure(config):
    config.addinivalue_line("markers", f"{support.seed_bounds.MARKER}: asserts a statistic over seeds against a bound "
                                       "(support.seed_bounds); scripts/check-seed-bounds measures each under every "
                                       "OpenBLAS kernel family")


@pytest.fixture(autouse=True)
def _seed_bound_test(request):
    """Tells :mod:`support.seed_bounds` which test is running (its marker, its id in the log)."""
    support.seed_bounds.current_test = request.node
    yield
    support.seed_bounds.current_test = None


def pytest_collection_modifyitems(items):
    for item in items:  # `-m numerics` selects every test that runs under each BLAS setting
        if "numerics" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.numerics)


def pytest_unconfigure(config):
    shutil.rmtree(CONFIG_HOME, ignore_errors=True)
