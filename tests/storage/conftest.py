"""Fixtures: a WebHDFS-protocol server in-process on a free loopback port, and stores on both backends."""

from __future__ import annotations

from typing import Iterator

import pytest

from storage import Store, open_store
from support.webhdfs_server import WebHDFSServer

# Short enough that a test of a long outage gives up quickly, long enough to ride out short ones.
RETRY_TIMEOUT_S = 3.0


@pytest.fixture
def webhdfs_server(tmp_path) -> Iterator[WebHDFSServer]:
    """A started WebHDFS server serving ``tmp_path/hdfs``; stopped (all connections closed) after the test."""
    server = WebHDFSServer(tmp_path / "hdfs").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def hdfs_store(webhdfs_server) -> Store:
    """A store at ``/store`` on the test WebHDFS server, through the real ``hdfs`` client."""
    return open_store(webhdfs_server.store_url("/store"), user="tester", retry_timeout_s=RETRY_TIMEOUT_S)


@pytest.fixture
def local_store(tmp_path) -> Store:
    """A store on a local directory."""
    return open_store(str(tmp_path / "local-store"), retry_timeout_s=RETRY_TIMEOUT_S)


@pytest.fixture(params=["local", "webhdfs"])
def store(request) -> Store:
    """The same tests on both backends."""
    return request.getfixturevalue("local_store" if request.param == "local" else "hdfs_store")
