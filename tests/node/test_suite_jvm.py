"""The suite's own Spark driver JVMs: the options tests/conftest.py gives them (``SPARK_SUBMIT_OPTS``, the client
compiler only) reach the JVM, so every session, driver process and command the suite starts gets them."""

from __future__ import annotations

import os


def test_the_suites_spark_driver_jvm_runs_with_the_options_the_suite_gives_it(spark):
    given = os.environ["SPARK_SUBMIT_OPTS"].split()  # tests/conftest.py's, unless the environment gave others
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
    assert all(option in arguments for option in given), (given, arguments)
