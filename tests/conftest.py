"""Suite-wide settings: loopback-only networking, quiet Spark, no stray threads."""

import os

# Everything binds and talks to loopback only (Spark included) and Spark's UI stays off.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
