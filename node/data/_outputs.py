"""Writing a DataFrame to a folder without ever deleting what this program did not write.

Spark's ``overwrite`` mode empties the output folder first, whatever it holds -- including the
input being read.  :func:`write_parquet_safely` refuses instead:

* an output that is the input, lies inside it or contains it -- on the local file system compared
  by file identity (device and inode, ``st_dev``/``st_ino``) along the whole path, so a symlink, a
  bind mount or a second mount of the same file system into the input is the input; and by name
  with symlinks resolved, for the parts of a path that do not exist yet;
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
import tempfile
import uuid
from typing import Any, Callable
from urllib.parse import urlsplit

from .._errors import InputDataError

__all__ = ["MARKER", "check_output", "write_parquet_safely"]

logger = logging.getLogger(__name__)

#: Written into every folder of predictions, so that ``--overwrite`` knows the folder is ours to replace.
MARKER = "_SPARKDBN_PREDICTIONS"
#: What Spark itself writes into a Parquet output folder (besides the marker).
SPARK_OUTPUT_FILES = ("part-*", ".part-*", "_SUCCESS", "._SUCCESS.crc", "_committed_*", "_started_*", MARKER,
                      f".{MARKER}.crc")


def write_parquet_safely(frame: Any, output: str, *, inputs: tuple[str, ...] = (), overwrite: bool = False,
                         check: Callable[[], None] | None = None) -> None:
    """Write ``frame`` as Parquet to the folder ``output`` (see the module docstring).

    ``check``, when given, is called once the frame is written to the temporary folder and before
    it is renamed into place: whatever it raises leaves nothing at ``output`` (and the temporary
    folder removed), e.g. bad input the write job's tasks reported instead of failing.

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
        _check_apart(output, source, resolved, _qualified(jvm, conf, _resolved(source)))
    Path = jvm.org.apache.hadoop.fs.Path
    path = Path(target)
    fs = path.getFileSystem(conf)
    replaces = False
    if fs.exists(path):
        names = [status.getPath().getName() for status in fs.listStatus(path)]
        _check_folder(output, fs.getFileStatus(path).isDirectory(), names, overwrite)
        replaces = bool(names)  # else an empty folder, removed below (it holds nothing)
    suffix = uuid.uuid4().hex[:12]
    staging = Path(f"{target}.sparkdbn-tmp-{suffix}")
    try:
        frame.write.mode("errorifexists").parquet(str(staging))
        if check is not None:
            check()
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


def check_output(output: str, *, inputs: tuple[str, ...] = (), overwrite: bool = False) -> None:
    """Refuse now what :func:`write_parquet_safely` would refuse, where it can be seen without Spark: an
    output on the local file system (``hdfs://`` and others are checked when written, as is everything
    again then).

    Raises
    ------
    InputDataError
        The output is an input, holds files this program did not write, is a file, or cannot be created.
    """
    local = _local_path(output)
    if local is None:
        return
    for source in inputs:
        path = _local_path(source)
        if path is not None:  # an input elsewhere (hdfs://) is no local output's
            _check_apart(output, source, os.path.realpath(local), os.path.realpath(path))
    if os.path.exists(local):
        folder = os.path.isdir(local)
        _check_folder(output, folder, os.listdir(local) if folder else [], overwrite)
    _check_creatable(output, local)


def _check_creatable(output: str, local: str) -> None:
    """Refuse an output whose folder (and the temporary sibling it is written to first) cannot be made: the
    nearest existing folder above it is a file, or takes no new folder (read-only, not ours, ``/proc``).
    Seen by making and removing a folder there, as permissions alone do not tell (root, read-only mounts)."""
    existing = os.path.dirname(os.path.abspath(local))
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise InputDataError(f"--output {output} cannot be created: {existing} is a file")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".sparkdbn-probe-", dir=existing))
    except OSError as error:
        raise InputDataError(f"--output {output} cannot be created: {existing} takes no new folder "
                             f"({error.strerror})") from error


def _check_apart(output: str, source: str, resolved: str, origin: str) -> None:
    """Refuse an output that is the input ``source``, lies inside it or contains it (``resolved`` and
    ``origin``: their names with symlinks resolved, in one form)."""
    same = resolved == origin or _same_file(output, source)
    if same or _inside(resolved, origin) or _inside(origin, resolved) or _overlap_by_identity(output, source):
        raise InputDataError(f"--output {output} {'is' if same else 'overlaps'} the input {source} (compared by "
                             "device and inode: symlinks and bind mounts followed); choose an output folder "
                             "outside the input")


def _check_folder(output: str, is_folder: bool, names: list[str], overwrite: bool) -> None:
    """Refuse an existing output that is a file, or a folder holding ``names`` it may not replace."""
    if not is_folder:
        raise InputDataError(f"--output {output} is a file; give a folder to write the predictions into")
    foreign = [name for name in names if not any(fnmatch.fnmatch(name, pattern) for pattern in SPARK_OUTPUT_FILES)]
    if names and not overwrite:
        raise InputDataError(f"--output {output} already holds {len(names)} file(s) (e.g. {sorted(names)[0]}); "
                             "nothing was written. Choose a new folder, or pass --overwrite (overwrite=True from "
                             "Python) to replace predictions written there before, by sparkdbn predict or "
                             "write_predictions")
    if names and (foreign or MARKER not in names):
        what = f"{sorted(foreign)[0]!r}, which it did not write" if foreign else "no predictions it wrote"
        raise InputDataError(f"--overwrite refused: {output} holds {what}; nothing was deleted")


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


def _local_path(location: str) -> str | None:
    """The local file-system path of ``location``; None for other file systems (hdfs://, ...)."""
    parts = urlsplit(location)
    if parts.scheme == "file":
        return parts.path
    return None if parts.scheme else os.path.abspath(os.path.expanduser(location))


def _identity(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _identity_chain(path: str) -> list[tuple[int, int]]:
    """(st_dev, st_ino) of ``path`` (when it exists) and of every folder above it, up to the root."""
    chain, current = [], os.path.abspath(path)
    while True:
        identity = _identity(current)
        if identity is not None:
            chain.append(identity)
        parent = os.path.dirname(current)
        if parent == current:
            return chain
        current = parent


def _same_file(first: str, second: str) -> bool:
    a, b = _local_path(first), _local_path(second)
    return a is not None and b is not None and _identity(a) is not None and _identity(a) == _identity(b)


def _overlap_by_identity(output: str, source: str) -> bool:
    """Whether ``output`` is ``source``, lies inside it or contains it, by the identity of the files on the path.

    Names can differ for one folder (a bind mount, a second mount of a file system); the device and
    inode of a folder cannot.
    """
    out, inp = _local_path(output), _local_path(source)
    if out is None or inp is None:
        return False
    out_id, inp_id = _identity(out), _identity(inp)
    return (inp_id is not None and inp_id in _identity_chain(out)) or (
        out_id is not None and out_id in _identity_chain(inp))


def _qualified(jvm: Any, conf: Any, location: str) -> str:
    path = jvm.org.apache.hadoop.fs.Path(location)
    return str(path.getFileSystem(conf).makeQualified(path)).rstrip("/")


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")
