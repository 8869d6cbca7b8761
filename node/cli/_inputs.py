"""What the command line checks of the data files it is given (``--input``) before Spark starts, and Spark's
own refusals of them (and of ``--output``) as one line.

* :func:`check_input` -- a local ``--input``: a Parquet file, a folder of them or a pattern Spark expands;
* :func:`read_parquet` -- Spark's reader, its refusals one line naming the input;
* :func:`java_message`, :func:`hdfs_hint` -- a Java error's first line, and what an ``hdfs://`` URL on
  the WebHDFS port (a sparkdbn store URL's) needs for Spark.
"""

from __future__ import annotations

import glob
import os
from typing import Any, Iterator

from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException

from ._options import UsageError

__all__ = ["PARQUET_MAGIC", "GLOB_CHARACTERS", "data_files", "check_input", "java_message", "hdfs_hint",
           "read_parquet"]


#: How a Parquet file begins (``PARE``: one with an encrypted footer).
PARQUET_MAGIC = (b"PAR1", b"PARE")


def data_files(folder: str) -> Iterator[str]:
    """The files Spark reads as data in ``folder``: all but the hidden ones (``_*``, ``.*``), in subfolders too."""
    for root, folders, files in os.walk(folder):
        folders[:] = sorted(name for name in folders if not name.startswith(("_", ".")))
        for name in sorted(files):
            if not name.startswith(("_", ".")):
                yield os.path.join(root, name)


#: What makes a path a pattern for Spark (Hadoop's glob), as for the shell.
GLOB_CHARACTERS = "*?["


def check_input(path: str) -> tuple[str, ...]:
    """A local ``--input`` that does not exist (a pattern that matches nothing), or holds a file that is not
    Parquet, is refused before Spark starts.  Returns the local files and folders it names (a pattern's
    matches, as Spark reads them), ``()`` on another file system."""
    local = path[len("file://"):] if path.startswith("file://") else (None if "://" in path else path)
    if local is None:
        return ()
    if any(character in local for character in GLOB_CHARACTERS):
        matches = tuple(sorted(glob.glob(os.path.expanduser(local))))
        if not matches:
            raise UsageError(f"--input {path} matches no file")
    elif not os.path.exists(local):
        raise UsageError(f"--input {path} does not exist")
    else:
        matches = (local,)
    for match in matches:
        for file in data_files(match) if os.path.isdir(match) else [match]:
            with open(file, "rb") as handle:
                head = handle.read(4)
            if head and head not in PARQUET_MAGIC:  # Spark skips an empty file
                where = ("" if file == local else f" holds {os.path.relpath(file, local)}, which" if match == local
                         else f" matches {file}, which")
                raise UsageError(f"--input {path}{where} is not a Parquet file ({head!r} where Parquet begins with "
                                 "'PAR1'): --input is a Parquet file or folder with a features column")
    return matches


def java_message(error: Py4JJavaError) -> str:
    """The first line of the Java exception's message (or its class, without one)."""
    return (str(error.java_exception.getMessage() or "") or error.java_exception.getClass().getName()).splitlines()[0]


#: What Hadoop says where an ``hdfs://`` URL names an HTTP port (WebHDFS's) that its RPC client cannot speak to.
RPC_TO_HTTP = ("RPC response has a length", "exceeds maximum data length")


def hdfs_hint(location: str, message: str) -> str:
    """A hint for an ``hdfs://`` location Spark reached on a port that does not speak Hadoop's RPC (WebHDFS's)."""
    if not location.startswith("hdfs://") or not any(text in message for text in RPC_TO_HTTP):
        return ""
    return (". Spark reads and writes hdfs:// through the namenode's RPC port (usually 8020), not the WebHDFS "
            "port a sparkdbn store URL names (usually 9870): give hdfs://NAMENODE:8020/... or webhdfs://NAMENODE:9870/...")


def read_parquet(spark: Any, path: str) -> Any:
    try:
        return spark.read.parquet(path)
    except AnalysisException as error:
        raise UsageError(f"--input {path} cannot be read as Parquet: {str(error).splitlines()[0]}") from error
    except Py4JJavaError as error:  # a file Spark could not read (not Parquet, truncated, a port it cannot speak to)
        message = java_message(error)
        raise UsageError(f"--input {path} cannot be read as Parquet: {message}{hdfs_hint(path, message)}") from error
