"""A store with no room for a write, or mounted read-only: one error that says so and names the file.

Before, a full disk (ENOSPC) was a plain ``StoreError`` ("write failed on ...: [Errno 28] No space left on
device"), which a Spark task raised and Spark ran again, 4 times per task: a fit whose store filled up
printed 754 lines.  A full store is now :class:`storage.StoreFullError`, one of the failures a task reports
instead of raising (``node._errors.STORE_FAILURES``, tested end to end in tests/node/test_store_outage.py).
"""

from __future__ import annotations

import os

import pytest
from support.small_disk import small_disk, small_disk_unavailable_reason
from support.webhdfs_server import WebHDFSServer

import storage
from node._errors import STORE_FAILURES

needs_mount = pytest.mark.skipif(small_disk_unavailable_reason() is not None,
                                 reason=str(small_disk_unavailable_reason()))


@needs_mount
def test_a_full_local_store_says_so_naming_the_file_and_keeps_what_it_held(tmp_path):
    with small_disk(tmp_path / "small", 64) as folder:
        store = storage.open_store(f"file://{folder}")
        store.write_bytes("kept.bin", b"k" * 1000)
        for write in (store.write_bytes, store.create_exclusive):
            with pytest.raises(storage.StoreFullError, match=rf"the store is full at {folder}/runs/big.bin "
                                                             r"\(No space left on device\); make room"):
                write("runs/big.bin", b"x" * 200_000)
        assert store.read_bytes("kept.bin") == b"k" * 1000  # nothing it held is lost
        assert not store.exists("runs/big.bin")
        assert sorted(os.listdir(folder / "runs")) == []  # no temporary left behind
    assert isinstance(storage.StoreFullError("x"), STORE_FAILURES)  # reported by a task, not run again


@needs_mount
def test_a_read_only_local_store_is_a_permission_error_naming_the_file(tmp_path):
    with small_disk(tmp_path / "ro", 64, read_only=True) as folder:
        store = storage.open_store(f"file://{folder}")
        with pytest.raises(storage.StorePermissionError, match=rf"permission denied on {folder}/a.json: its file "
                                                              "system is mounted read-only"):
            store.write_bytes("a.json", b"{}")


def test_an_hdfs_folder_over_its_quota_is_a_full_store_and_its_files_still_read(tmp_path):
    with WebHDFSServer(tmp_path / "hdfs") as server:
        store = storage.open_store(server.store_url("/sparkdbn"))
        store.write_bytes("runs/r/kept.bin", b"k" * 10)
        server.faults.over_quota("/sparkdbn/runs")
        for write in (store.write_bytes, store.create_exclusive):
            with pytest.raises(storage.StoreFullError, match=r"the store is full at hdfs /sparkdbn/runs/r/new.bin on "
                                                             r"http://.*: DSQuotaExceededException: .*raise the folder's "
                                                             "quota"):
                write("runs/r/new.bin", b"x" * 10)
        assert store.read_bytes("runs/r/kept.bin") == b"k" * 10
        assert server.faults.requests_seen < 20  # refused at once, not retried as an outage
