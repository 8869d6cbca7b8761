"""The WebHDFS test server split in two, as the virtual cluster runs it: a namenode that redirects the
data to a datanode elsewhere, and a datanode-only server over the same folder (here on loopback)."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import storage
from support.webhdfs_server import WebHDFSServer


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_namenode_only_server_sends_the_data_through_the_datanode_only_server(tmp_path: Path):
    payload = np.random.default_rng(0).bytes(100_000)
    root = tmp_path / "hdfs"
    with WebHDFSServer(root, datanode_only=True) as data, WebHDFSServer(root, datanode_url=data.url) as name:
        store = storage.open_store(name.store_url("/s"), retry_timeout_s=5)
        store.write_bytes("a.bin", payload)
        assert data.faults.requests_seen == 1  # the upload; metadata and the rename went to the namenode
        assert store.read_bytes("a.bin") == payload
        assert data.faults.requests_seen == 2
        assert (root / "s" / "a.bin").read_bytes() == payload
        # Each serves only its own endpoint.
        assert _status(f"{name.url}/datanode/v1/s/a.bin?op=OPEN") == 404
        assert _status(f"{data.url}/webhdfs/v1/s/a.bin?op=GETFILESTATUS") == 404
        assert _status(f"{name.url}/webhdfs/v1/s/a.bin?op=GETFILESTATUS") == 200


def test_a_server_cannot_be_a_namenode_elsewhere_and_a_datanode_only_at_once(tmp_path: Path):
    with pytest.raises(ValueError, match="datanode-only"):
        WebHDFSServer(tmp_path, datanode_url="http://datanode:9864", datanode_only=True)
    with pytest.raises(ValueError, match="http"):
        WebHDFSServer(tmp_path, datanode_url="datanode:9864")
