"""Spark's Python daemon with sparkdbn's executor side imported once, before it forks any worker.

PySpark's daemon forks every Python worker from itself, and a fresh worker imports what its first
task needs -- sparkdbn's models, actors and store, numpy, scikit-learn, pyarrow -- again each time
Spark replaces a worker (60 s idle, a task that raised).  Started as ``spark.python.daemon.module``
(:mod:`node.driver._session` sets it for the local sessions it makes), this module imports them in
the daemon, so every fork starts with them loaded.

Why forking after these imports is safe: a fork copies only the forking thread, so whatever another
thread held at that moment would stay held in the child.  Importing :mod:`node.executor` only
defines things -- it starts no Python thread, no pykka actor (their threads start with a fit's
node, inside a worker), no ZeroMQ context (made on first use, per process) -- and it does not
import cupy or touch a GPU (a node picks its device inside its task), so no CUDA context is
copied; ``tests/node/test_spark_conf.py`` checks all four in a fresh interpreter.  The native
threads the imports leave are made for fork: OpenBLAS's pool (stopped by its own ``pthread_atfork``
handler and restarted in the child on first use) and pyarrow's jemalloc background thread (jemalloc
takes its locks in its prefork handler and releases them in both processes); no OpenMP region has
run, so libgomp holds no pool.
"""

from pyspark.daemon import manager

import node.executor  # noqa: F401  -- loaded once here, shared by every worker the daemon forks

if __name__ == "__main__":
    manager()
