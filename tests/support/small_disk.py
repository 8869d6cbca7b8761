"""A small file system of the test's own: a tmpfs mounted on a folder under the test's ``tmp_path``.

Mounting needs root (CI runs as root); elsewhere the tests that use one skip, saying why.  Each is
unmounted when the test ends, whatever happened.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

__all__ = ["remount_read_only", "small_disk", "small_disk_unavailable_reason"]


@functools.lru_cache(maxsize=1)
def small_disk_unavailable_reason() -> str | None:
    """Why no tmpfs can be mounted here (not root, or mounting refused: a container without the right), or None;
    found by mounting a tiny one once, on a folder of its own, and unmounting it."""
    if os.geteuid() != 0:
        return "a small file system (a tmpfs) needs root to mount: run as root, as CI does"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "a small file system (a tmpfs) needs mount and umount (util-linux)"
    with tempfile.TemporaryDirectory(prefix="sparkdbn-mount-probe-") as folder:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "sparkdbn-test", folder],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return f"a small file system (a tmpfs) cannot be mounted here: mount said {done.stderr.strip()!r}"
        subprocess.run(["umount", folder], check=True, capture_output=True, text=True)
    return None


@contextlib.contextmanager
def small_disk(folder: Path, size_kib: int, *, read_only: bool = False) -> Iterator[Path]:
    """Mount a ``size_kib`` KiB tmpfs on ``folder`` (made here), read-only if asked; unmount it afterwards."""
    folder.mkdir(parents=True)
    options = f"size={size_kib}k" + (",ro" if read_only else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "sparkdbn-test", str(folder)], check=True,
                   capture_output=True, text=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True, capture_output=True, text=True)


def remount_read_only(folder: Path) -> None:
    """Make the tmpfs :func:`small_disk` mounted on ``folder`` read-only from now on (what it holds stays)."""
    subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True, capture_output=True, text=True)
