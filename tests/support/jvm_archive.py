"""A class-data-sharing archive for the suite's Spark driver JVMs (``-XX:SharedArchiveFile``).

The suite starts well over a hundred short-lived Spark drivers: its sessions, every ``sparkdbn``
command it runs, the driver processes it kills, spark-submit.  Each is a JVM that loads and verifies
thousands of classes from Spark's jars before it does anything.  A dynamic CDS archive (JDK 13 on)
holds those classes ready to map.  Measured on the 2-core build machine: a session's start, four
small jobs (an RDD, Parquet written and read, a CSV read) and its stop took 12.7-13.2 s without it,
8.1 s with it; the start alone 3.9-4.0 s against 2.0 s.

:func:`driver_jvm_options` makes the archive once per JVM build and pyspark install, under
``.dev/jvm/`` (about 12 s and 180 MB, by a session that runs those jobs and dumps the classes
it loaded when it exits), and returns the options that use it.  A JVM that cannot use it (another
build, another class path) runs without it, and says nothing (``-Xlog:cds*=off``): the suite's
tests read what Spark prints.  Without ``java``, or when the archive cannot be made, the options
are the plain ones, and the suite runs as before.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["driver_jvm_options"]

ROOT = Path(__file__).resolve().parents[2]
ARCHIVES = ROOT / ".dev" / "jvm"
QUIET = "-Xlog:cds*=off"
MAKE_TIMEOUT_S = 300.0

# The jobs whose classes the archive holds: what the suite's drivers do most.
_WORKLOAD = """
import sys, tempfile
from node import get_spark_session
spark = get_spark_session("local[2]", app_name="sparkdbn-jvm-archive")
spark.sparkContext.parallelize(range(4), 2).map(lambda x: x).collect()
folder = tempfile.mkdtemp(prefix="sparkdbn-jvm-archive-")
frame = spark.createDataFrame([(1.0, [1.0, 2.0]), (0.0, [3.0, 4.0])], ["label", "features"])
frame.write.parquet(folder + "/rows")
spark.read.parquet(folder + "/rows").collect()
spark.read.option("header", "true").option("inferSchema", "true").csv(sys.argv[1]).limit(3).collect()
spark.stop()
"""


def driver_jvm_options(base: str) -> str:
    """``base`` with the options that map the archive (made first if it is not there), else ``base``."""
    archive = _archive_path()
    if archive is None:
        return base
    if not archive.exists() and not _make(archive, base):
        return base
    return f"{base} -XX:SharedArchiveFile={archive} {QUIET}"


def _archive_path() -> Path | None:
    """Where the archive of this JVM build and pyspark install lives; None without ``java``."""
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if os.environ.get("JAVA_HOME") \
        else shutil.which("java")
    if java is None:
        return None
    try:
        version = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
        import pyspark
    except (OSError, subprocess.SubprocessError, ImportError):
        return None
    key = "\n".join([os.path.realpath(java), version, pyspark.__version__, os.path.dirname(pyspark.__file__)])
    return ARCHIVES / f"spark-driver-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def _make(archive: Path, base: str) -> bool:
    """Dump the classes of one run of :data:`_WORKLOAD` into ``archive`` (one maker at a time); True if it exists."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(archive.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another suite may be making it: then it is there after the wait
        if archive.exists():
            return True
        handle, partial = tempfile.mkstemp(dir=archive.parent, prefix=".making-", suffix=".jsa")
        os.close(handle)
        os.unlink(partial)  # the JVM writes it
        env = dict(os.environ, SPARK_SUBMIT_OPTS=f"{base} -XX:ArchiveClassesAtExit={partial} {QUIET}",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        try:
            made = subprocess.run([sys.executable, "-c", _WORKLOAD, str(ROOT / "examples" / "digits-raw.csv")],
                                  env=env, capture_output=True, timeout=MAKE_TIMEOUT_S, cwd=ROOT)
            if made.returncode == 0 and os.path.getsize(partial) > 0:
                os.replace(partial, archive)
        except (OSError, subprocess.SubprocessError):
            pass
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        return archive.exists()
