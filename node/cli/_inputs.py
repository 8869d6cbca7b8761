"""What the command line checks of the data files it is given (``--input``) before Spark starts, and Spark's
own refusals of them (and of ``--output``) as one line.

* :func:`check_input` -- a ``--input``: a Parquet or CSV file, a folder of them or a pattern Spark expands;
  a local one is looked at before Spark starts (:class:`InputFiles`: its format and columns);
* :func:`feature_columns` -- where its features are: a column of vectors or arrays, or scalar columns (the
  ones the run's dataset was staged from, or ``--features-cols``), which :func:`gather_features` joins;
* :func:`read_input` -- Spark's reader, its refusals one line naming the input;
* :func:`java_message`, :func:`hdfs_hint` -- a Java error's first line, and what an ``hdfs://`` URL on
  the WebHDFS port (a sparkdbn store URL's) needs for Spark.
"""

from __future__ import annotations

import csv
import glob
import gzip
import os
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import pyarrow.parquet as pq
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException

import storage

from ._options import UsageError

__all__ = ["PARQUET_MAGIC", "CSV_SUFFIXES", "GLOB_CHARACTERS", "InputFiles", "data_files", "check_input",
           "feature_columns", "gather_features", "column_list", "java_message", "hdfs_hint", "read_input"]


#: How a Parquet file begins (``PARE``: one with an encrypted footer).
PARQUET_MAGIC = (b"PAR1", b"PARE")
#: How the name of a CSV file ends (its first line names the columns, as ``sparkdbn stage`` reads it).
CSV_SUFFIXES = (".csv", ".csv.gz")


def data_files(folder: str) -> Iterator[str]:
    """The files Spark reads as data in ``folder``: all but the hidden ones (``_*``, ``.*``), in subfolders too."""
    for root, folders, files in os.walk(folder):
        folders[:] = sorted(name for name in folders if not name.startswith(("_", ".")))
        for name in sorted(files):
            if not name.startswith(("_", ".")):
                yield os.path.join(root, name)


#: What makes a path a pattern for Spark (Hadoop's glob), as for the shell.
GLOB_CHARACTERS = "*?["


@dataclass(frozen=True)
class InputFiles:
    """A ``--input`` as :func:`check_input` found it.

    Attributes
    ----------
    path : str
        As given.
    format : {"parquet", "csv"}
        How Spark reads it.
    local : tuple of str
        The local files and folders it names (a pattern's matches), ``()`` on another file system.
    columns : tuple of str or None
        Its columns, where they are seen without Spark (a local input), else None.
    """

    path: str
    format: str
    local: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None


def check_input(path: str) -> InputFiles:
    """A local ``--input`` that does not exist (a pattern that matches nothing), or holds a file that is neither
    Parquet nor CSV, or both, is refused before Spark starts.  Returns what it is (:class:`InputFiles`)."""
    local = storage.local_path(path)
    if local is None:
        return InputFiles(path, "csv" if path.lower().endswith(CSV_SUFFIXES) else "parquet")
    if any(character in local for character in GLOB_CHARACTERS):
        matches = tuple(sorted(glob.glob(os.path.expanduser(local))))
        if not matches:
            raise UsageError(f"--input {path} matches no file")
    elif not os.path.exists(local):
        raise UsageError(f"--input {path} does not exist")
    else:
        matches = (local,)
    kinds: dict[str, str] = {}  # format -> its first file
    for match in matches:
        for file in data_files(match) if os.path.isdir(match) else [match]:
            kind = _file_format(file)
            if kind is None:
                where = ("" if file == local else f" holds {os.path.relpath(file, local)}, which" if match == local
                         else f" matches {file}, which")
                raise UsageError(f"--input {path}{where} is neither a Parquet file ({_head(file)!r} where Parquet "
                                 "begins with 'PAR1') nor a CSV file (named *.csv): --input is a Parquet or CSV file, "
                                 "or a folder of them")
            if kind != "empty":  # Spark skips an empty file
                kinds.setdefault(kind, file)
    if len(kinds) > 1:
        raise UsageError(f"--input {path} holds both Parquet ({kinds['parquet']}) and CSV files ({kinds['csv']}): "
                         "give one kind")
    kind = next(iter(kinds), "parquet")
    return InputFiles(path, kind, matches, _columns(kinds[kind], matches) if kinds else None)


def _head(file: str) -> bytes:
    with open(file, "rb") as handle:
        return handle.read(4)


def _file_format(file: str) -> str | None:
    """``"parquet"``, ``"csv"`` (by its name), ``"empty"``, or None for anything else."""
    head = _head(file)
    if not head:
        return "empty"
    if head in PARQUET_MAGIC:
        return "parquet"
    return "csv" if file.lower().endswith(CSV_SUFFIXES) else None


def _columns(file: str, matches: Sequence[str]) -> tuple[str, ...] | None:
    """The columns of the input whose first data file is ``file``, with the ``key=value`` folders Spark reads as
    columns too; None where they cannot be read here (Spark says why, then)."""
    try:
        if file.lower().endswith(CSV_SUFFIXES):
            with (gzip.open if file.lower().endswith(".gz") else open)(file, "rt", newline="") as handle:
                names = tuple(next(csv.reader(handle), []))
        else:
            names = tuple(pq.read_schema(file).names)
    except (OSError, ValueError, csv.Error):
        return None
    folder = next((match for match in matches if os.path.isdir(match) and file.startswith(match + os.sep)), None)
    below = os.path.relpath(os.path.dirname(file), folder).split(os.sep) if folder else []
    keys = tuple(part.split("=", 1)[0] for part in below if "=" in part)
    return names + tuple(key for key in keys if key not in names)


def feature_columns(columns: Sequence[str], *, source: str, features_col: str, features_cols: Sequence[str] | None,
                    staged: Sequence[str] | None) -> tuple[str, ...] | None:
    """Where the features of an input with ``columns`` are: None for its column ``features_col`` (vectors or
    arrays), else the scalar columns to gather in order -- ``features_cols`` where given, else the columns the
    run's dataset was ``staged`` from, where the input has every one."""
    if features_cols:
        missing = [name for name in features_cols if name not in columns]
        if missing:
            raise UsageError(f"{source} has no column {missing[0]!r} of --features-cols; its columns are "
                             f"{column_list(columns)}")
        return tuple(features_cols)
    if features_col in columns:
        return None
    if staged and all(name in columns for name in staged):
        return tuple(staged)
    said = (f" nor every column the run's dataset was staged from ({column_list(staged)}: "
            f"{next(name for name in staged if name not in columns)!r} is missing)" if staged else "")
    raise UsageError(f"{source} has no features column {features_col!r}{said}; its columns are {column_list(columns)}: "
                     "give --features-col (a column of vectors or arrays) or --features-cols a,b,c (scalar columns)")


def column_list(names: Sequence[str]) -> str:
    """Up to ten of ``names``, as a list is printed (`` ...`` where there are more)."""
    return f"{list(names[:10])}{' ...' if len(names) > 10 else ''}"


def gather_features(frame: Any, columns: Sequence[str], into: str) -> Any:
    """``frame`` with the scalar ``columns`` gathered into one ``array<double>`` column ``into``."""
    from pyspark.sql import functions as F

    quoted = [F.col("`" + name.replace("`", "``") + "`").cast("double") for name in columns]
    return frame.withColumn(into, F.array(*quoted))


def java_message(error: Py4JJavaError) -> str:
    """The first line of the Java exception's message (or its class, without one)."""
    return (str(error.java_exception.getMessage() or "") or error.java_exception.getClass().getName()).splitlines()[0]


#: What Hadoop says where an ``hdfs://`` URL names an HTTP port (WebHDFS's) that its RPC client cannot speak to.
RPC_TO_HTTP = ("RPC response has a length", "exceeds maximum data length")


def hdfs_hint(location: str, message: str) -> str:
    """A hint for an ``hdfs://`` location Spark reached on a port that does not speak Hadoop's RPC (WebHDFS's)."""
    if not location.startswith("hdfs://") or not any(text in message for text in RPC_TO_HTTP):
        return ""
    # Not webhdfs://: the pip pyspark's Hadoop client cannot read it (a shaded class it lacks).
    return (". Spark reads and writes hdfs:// through the namenode's RPC port (usually 8020), not the WebHDFS "
            "port a sparkdbn store URL names (usually 9870): give hdfs://NAMENODE:8020/... (a dataset staged with "
            "sparkdbn stage is read with --dataset URL)")


def read_input(spark: Any, given: InputFiles) -> Any:
    """The DataFrame of ``given``: Parquet as it is; CSV by its header, each column's type inferred."""
    kind = {"parquet": "Parquet", "csv": "CSV"}[given.format]
    try:
        if given.format == "csv":
            return spark.read.csv(given.path, header=True, inferSchema=True)
        return spark.read.parquet(given.path)
    except AnalysisException as error:
        raise UsageError(f"--input {given.path} cannot be read as {kind}: {str(error).splitlines()[0]}") from error
    except Py4JJavaError as error:  # a file Spark could not read (truncated, a port it cannot speak to)
        message = java_message(error)
        raise UsageError(f"--input {given.path} cannot be read as {kind}: {message}"
                         f"{hdfs_hint(given.path, message)}") from error
