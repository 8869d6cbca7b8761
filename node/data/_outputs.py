"""Writing a DataFrame to a folder without ever deleting what this program did not write.

Spark's ``overwrite`` mode empties the output folder first, whatever it holds -- including the
input being read.  :func:`write_parquet_safely` refuses instead:

* an output that is the input, lies inside it or contains it -- on the local file system with
  symlinks resolved (``os.path.realpath``), so a link into the input is the input;
* an output folder that holds anything, unless ``overwrite`` is asked *and* the folder is one this
  function wrote before (it holds the :data:`MARKER` file and nothing but Spark's own output files).

An existing empty folder is written into.  The frame is written to a temporary sibling folder
first and renamed into place at the end, so a failed write leaves nothing half-written where the
output was asked (and, with ``overwrite``, the earlier predictions stay until the new ones are
complete).  Paths are checked through Spark's own Hadoop file system, so ``file://``, plain paths
and ``hdfs://`` follow one rule.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import uuid
from typing import Any
from urllib.parse import urlsplit

from .._errors import InputDataError

__all__ = ["MARKER", "write_parquet_safely"]

logger = logging.getLogger(__name__)

#: Written into every folder of predictions, so that ``--overwrite`` knows the folder is ours to replace.
MARKER = "_SPARKDBN_PREDICTIONS"
#: What Spark itself writes into a Parquet output folder (besides the marker).
SPARK_OUTPUT_FILES = ("part-*", ".part-*", "_SUCCESS", "._SUCCESS.crc", "_committed_*", "_started_*", MARKER,
                      f".{MARKER}.crc")


def write_parquet_safely(frame: Any, output: str, *, inputs: tuple[str, ...] = (), overwrite: bool = False) -> None:
    """Write ``frame`` as Parquet to the folder ``output`` (see the module docstring).

    Raises
    ------
    InputDataError
        The output is an input, holds files this program did not write, or is a file.
    """
    spark = frame.sparkSession
    jvm, conf = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()
    target = _qualified(jvm, conf, output)
    resolved = _qualified(jvm, conf, _resolved(output))
    for source in inputs:
        origin = _qualified(jvm, conf, _resolved(source))
        if _inside(resolved, origin) or _inside(origin, resolved):
            raise InputDataError(f"--output {output} {'is' if resolved == origin else 'overlaps'} the input {source} "
                                 "(symlinks followed); choose an output folder outside the input")
    Path = jvm.org.apache.hadoop.fs.Path
    path = Path(target)
    fs = path.getFileSystem(conf)
    replaces = False
    if fs.exists(path):
        if not fs.getFileStatus(path).isDirectory():
            raise InputDataError(f"--output {output} is a file; give a folder to write the predictions into")
        names = [status.getPath().getName() for status in fs.listStatus(path)]
        foreign = [name for name in names if not any(fnmatch.fnmatch(name, pattern) for pattern in SPARK_OUTPUT_FILES)]
        if names and not overwrite:
            raise InputDataError(f"--output {output} already holds {len(names)} file(s) (e.g. {sorted(names)[0]}); "
                                 "nothing was written. Choose a new folder, or pass --overwrite to replace "
                                 "predictions an earlier `sparkdbn predict` wrote there")
        if names and (foreign or MARKER not in names):
            what = f"{sorted(foreign)[0]!r}, which it did not write" if foreign else "no predictions it wrote"
            raise InputDataError(f"--overwrite refused: {output} holds {what}; nothing was deleted")
        replaces = bool(names)  # else an empty folder, removed below (it holds nothing)
    suffix = uuid.uuid4().hex[:12]
    staging = Path(f"{target}.sparkdbn-tmp-{suffix}")
    try:
        frame.write.mode("errorifexists").parquet(str(staging))
        fs.create(Path(staging, MARKER), True).close()
        if replaces:
            earlier = Path(f"{target}.sparkdbn-old-{suffix}")
            _rename(fs, path, earlier)
            _rename(fs, staging, path)
            fs.delete(earlier, True)  # predictions this function wrote (checked above)
        else:
            if fs.exists(path):
                fs.delete(path, False)  # an empty folder: non-recursive, fails if anything appeared meanwhile
            _rename(fs, staging, path)
    finally:
        if fs.exists(staging):
            fs.delete(staging, True)  # our own half-written output
    logger.info("wrote %s (%s)", output, "replaced earlier predictions" if replaces else "new folder")


def _rename(fs: Any, source: Any, target: Any) -> None:
    if not fs.rename(source, target):
        raise InputDataError(f"could not rename {source} to {target}; nothing was written at {target}")


def _resolved(location: str) -> str:
    """``location`` with its symlinks resolved (``os.path.realpath``) when it is on the local file system."""
    parts = urlsplit(location)
    if parts.scheme == "file":
        return "file://" + os.path.realpath(parts.path)
    if not parts.scheme:
        return os.path.realpath(os.path.expanduser(location))
    return location  # hdfs:// and others: the file system's own paths, checked as they are


def _qualified(jvm: Any, conf: Any, location: str) -> str:
    path = jvm.org.apache.hadoop.fs.Path(location)
    return str(path.getFileSystem(conf).makeQualified(path)).rstrip("/")


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")
