"""Pack a Python environment for Spark's executors (``sparkdbn-submit --pack-env``).

A virtualenv is packed with ``venv-pack``, a conda environment with ``conda-pack``, into a
``.tar.gz`` that spark-submit ships with ``--archives <archive>#environment``: every executor
unpacks it into its working directory and runs ``./environment/bin/python``, as pyspark's
"Python Package Management" guide describes.

What is left out, and why:

* pyspark (500 MB, more than half of this project's virtualenv): Spark puts its own pyspark and
  py4j first on every Python worker's path (``$SPARK_HOME/python/lib/*.zip``), so a packed copy
  would only be shipped, unpacked and shadowed.
* an editable install of sparkdbn (``pip install -e``): it points at the submitting machine's
  checkout; the executors get the code as ``--py-files``.

Packing a few hundred MB takes tens of seconds, so archives are cached, named after the
environment's path and a digest of what is installed in it (each distribution's name and its
``RECORD``, which lists every installed file with its sha256; conda's ``conda-meta`` records):
installing, upgrading or removing a package packs again, a second submit does not.

Standard library only: the packers run as separate processes.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

#: The alias the archive is unpacked under in each executor's working directory.
ALIAS = "environment"
#: The executors' Python inside the unpacked archive (a path relative to their working directory).
PACKED_PYTHON = f"./{ALIAS}/bin/python"
#: Left out of every archive (glob patterns on paths relative to the environment; see the module notes).
LEFT_OUT = ("lib/python*/site-packages/pyspark/*", "lib/python*/site-packages/pyspark-*.dist-info/*",
            "lib/python*/site-packages/*__editable__*sparkdbn*")  # the .pth, its finder (and its .pyc)
#: gzip's level for the archive (venv-pack's and conda-pack's default): 200 MB of 640 in ~20 s here.
DEFAULT_COMPRESS_LEVEL = 4
PACKERS = {"venv": ("venv_pack", "venv-pack", "pip install 'sparkdbn[cluster]' (or: pip install venv-pack)"),
           "conda": ("conda_pack", "conda-pack", "conda install -c conda-forge conda-pack")}


class PackError(Exception):
    """An environment that cannot be packed; the message says what to do."""


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/sparkdbn/packed-envs`` (``~/.cache/...`` when unset)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparkdbn" / "packed-envs"


def environment_kind(prefix: Path) -> str:
    """``"conda"`` (a ``conda-meta`` folder) or ``"venv"`` (a ``pyvenv.cfg``); PackError otherwise."""
    if not prefix.is_dir():
        raise PackError(f"--pack-env {prefix}: no such folder")
    if (prefix / "conda-meta").is_dir():
        return "conda"
    if (prefix / "pyvenv.cfg").is_file():
        return "venv"
    raise PackError(f"--pack-env {prefix}: neither a virtualenv (no pyvenv.cfg) nor a conda environment "
                    "(no conda-meta/)")


def packer_command(kind: str) -> list[str]:
    """How to run the packer for ``kind``: installed beside this Python, else on the PATH."""
    module, tool, install = PACKERS[kind]
    if kind == "venv" and importlib.util.find_spec(module) is not None:
        return [sys.executable, "-m", module]
    found = shutil.which(tool, path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    if found:
        return [found]
    raise PackError(f"--pack-env needs {tool} to pack a {kind} environment, and it is not installed: {install}")


def fingerprint(prefix: Path, kind: str, excludes: tuple[str, ...]) -> str:
    """sha256 over what is installed in ``prefix`` and how it is packed (hex)."""
    digest = hashlib.sha256(f"{kind}\0{'|'.join(excludes)}\0".encode())
    config = prefix / "pyvenv.cfg"
    if config.is_file():
        digest.update(config.read_bytes())  # the interpreter the venv runs
    for site in sorted(prefix.glob("lib/python*/site-packages")):
        for dist in sorted([*site.glob("*.dist-info"), *site.glob("*.egg-info")]):
            record = dist / "RECORD"
            stamp = record.read_bytes() if record.is_file() else str(dist.stat().st_mtime_ns).encode()
            digest.update(f"{dist.name}\0".encode() + hashlib.sha256(stamp).digest())
    if kind == "conda":
        for meta in sorted((prefix / "conda-meta").glob("*.json")):
            digest.update(f"{meta.name}\0{meta.stat().st_size}\0".encode())
    return digest.hexdigest()


def archive_path(prefix: Path, kind: str, cache: Path, excludes: tuple[str, ...], compress_level: int) -> Path:
    """``<cache>/<stem>-<content digest>-<level>.tar.gz`` for the environment as it is now."""
    return cache / f"{_stem(prefix)}-{fingerprint(prefix, kind, excludes)[:16]}-{compress_level}.tar.gz"


def _stem(prefix: Path) -> str:
    """The start of the names of ``prefix``'s archives: its folder name and a digest of its path."""
    return f"{prefix.name.lstrip('.') or 'env'}-{hashlib.sha256(str(prefix).encode()).hexdigest()[:8]}"


def interpreter_note(prefix: Path, kind: str) -> str:
    """What the executors' hosts must have for the archive to run."""
    if kind == "conda":
        return "the archive holds its own interpreter"
    base = os.path.realpath(prefix / "bin" / "python")
    return f"the archive links bin/python to {base}: every executor host needs that interpreter at that path"


def pack_environment(prefix: Path, cache: Path, extra_excludes: tuple[str, ...] = (), *,
                     compress_level: int = DEFAULT_COMPRESS_LEVEL, repack: bool = False, dry_run: bool = False,
                     say=print) -> Path:
    """The cached archive of ``prefix`` (packed now when missing or stale); PackError on failure.

    ``compress_level`` is gzip's, 0 (store only) to 9.  ``say`` receives one line per step.
    ``dry_run`` returns the archive's path without packing.
    """
    if not 0 <= compress_level <= 9:
        raise PackError(f"--pack-compress-level {compress_level}: give 0 (no compression) to 9")
    prefix = Path(os.path.abspath(prefix))
    kind = environment_kind(prefix)
    excludes = (*LEFT_OUT, *extra_excludes)
    archive = archive_path(prefix, kind, cache, excludes, compress_level)
    if archive.is_file() and not repack:
        say(f"using {archive} ({archive.stat().st_size / 1e6:.0f} MB), packed from {prefix} as it is now "
            "(--repack packs again)")
        return archive
    if dry_run:
        say(f"would pack {prefix} with {PACKERS[kind][1]} into {archive} (dry run: not packed)")
        return archive
    command = packer_command(kind)
    cache.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f".{archive.name}.{os.getpid()}.partial")
    # Always .tar.gz (level 0 only stores): Spark unpacks a plain .tar with Java code that refuses
    # a link leading out of the archive, and a venv's bin/python is one (to its base interpreter).
    arguments = ["--prefix", str(prefix), "--output", str(partial), "--format", "tar.gz",
                 "--compress-level", str(compress_level), "--force", "--quiet"]
    if kind == "conda":
        arguments.append("--ignore-editable-packages")
    for pattern in excludes:
        arguments += ["--exclude", pattern]
    say(f"packing {prefix} with {PACKERS[kind][1]}, without pyspark (Spark's executors bring their own); "
        "once for each set of installed packages")
    started = time.monotonic()
    try:
        done = subprocess.run([*command, *arguments], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            reason = " ".join(done.stdout.split())[-600:] or f"exit status {done.returncode}"  # one line
            raise PackError(f"{PACKERS[kind][1]} could not pack {prefix}: {reason}")
        os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)
    for stale in cache.glob(glob.escape(_stem(prefix)) + "-*.tar.gz"):
        if stale != archive:
            stale.unlink(missing_ok=True)  # an earlier packing of the same environment
    say(f"packed {archive} ({archive.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - started:.0f} s; "
        f"{interpreter_note(prefix, kind)}")
    return archive
