"""Injected WebHDFS faults: short outages are ridden out, long ones give a clear StoreUnavailableError."""

from __future__ import annotations

import numpy as np
import pytest

from storage import StorePermissionError, StoreUnavailableError, WeightStore, open_store
from support.webhdfs_server import WebHDFSServer

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


def test_a_short_spell_of_dropped_connections_is_retried_and_survived(hdfs_store, webhdfs_server):
    webhdfs_server.faults.refuse_connections(seconds=0.5)
    hdfs_store.write_bytes("a/file", PAYLOAD)
    assert hdfs_store.read_bytes("a/file") == PAYLOAD
    assert webhdfs_server.faults.faults_injected > 0


@pytest.mark.parametrize("exception", [None, "StandbyException", "RetriableException"])
def test_a_burst_of_unavailable_answers_is_retried_and_survived(hdfs_store, webhdfs_server, exception):
    webhdfs_server.faults.fail_requests(count=4, exception=exception)
    weights = WeightStore(hdfs_store, "r", b"k" * 32)
    params = {"W": np.arange(12, dtype=np.float32).reshape(3, 4)}
    ref = weights.put_version("rbm0", "n", 1, params)
    np.testing.assert_array_equal(weights.get_version(ref)["W"], params["W"])
    assert webhdfs_server.faults.faults_injected == 4


def test_a_response_cut_short_is_never_returned_as_the_file(hdfs_store, webhdfs_server):
    hdfs_store.write_bytes("big", PAYLOAD)
    webhdfs_server.faults.cut_responses(count=2, after_bytes=1000)
    assert hdfs_store.read_bytes("big") == PAYLOAD
    assert webhdfs_server.faults.faults_injected == 2


def test_a_long_outage_gives_up_naming_the_url_and_the_operation(webhdfs_server):
    store = open_store(webhdfs_server.store_url("/store"), retry_timeout_s=0.5)
    store.write_bytes("f", b"x")
    webhdfs_server.faults.fail_requests(seconds=60)
    with pytest.raises(StoreUnavailableError) as caught:
        store.read_bytes("f")
    message = str(caught.value)
    assert store.url in message and "read_bytes 'f'" in message and "503" in message
    webhdfs_server.faults.clear()
    webhdfs_server.faults.refuse_connections(seconds=60)
    with pytest.raises(StoreUnavailableError, match="write_bytes 'g'"):
        store.write_bytes("g", b"y")


def test_a_stopped_namenode_gives_up_with_connection_refused(tmp_path):
    server = WebHDFSServer(tmp_path / "hdfs").start()
    store = open_store(server.store_url("/s"), retry_timeout_s=0.3)
    store.write_bytes("f", b"x")
    server.stop()
    with pytest.raises(StoreUnavailableError, match="exists 'f'") as caught:
        store.exists("f")
    # Said briefly (the client's own text was about 600 characters of its retry stack), with what it may mean.
    assert "last error: connection refused (no server listens at that host and port: a wrong port in the store " \
           "URL, or the namenode down)." in str(caught.value)
    assert "HTTPConnectionPool" not in str(caught.value) and len(str(caught.value)) < 450


def test_permission_errors_are_raised_at_once_without_retrying(hdfs_store, webhdfs_server):
    webhdfs_server.faults.deny("/store/secret")
    before = webhdfs_server.faults.requests_seen
    with pytest.raises(StorePermissionError, match="Permission denied"):
        hdfs_store.read_bytes("secret/file")
    assert webhdfs_server.faults.requests_seen - before == 1


def test_an_ha_pair_with_a_standby_namenode_is_served_by_the_active_one(tmp_path):
    root = tmp_path / "shared-hdfs"
    with WebHDFSServer(root) as standby, WebHDFSServer(root) as active:
        standby.faults.fail_requests(seconds=600, exception="StandbyException")
        url = f"hdfs://127.0.0.1:{standby.port};127.0.0.1:{active.port}/store"
        store = open_store(url, retry_timeout_s=2.0)
        store.write_bytes("x/y", PAYLOAD)
        assert store.read_bytes("x/y") == PAYLOAD
        assert standby.faults.faults_injected >= 1 and active.faults.requests_seen >= 3


def test_the_server_answers_the_rest_of_the_webhdfs_api(webhdfs_server):
    from hdfs import HdfsError, InsecureClient

    client = InsecureClient(webhdfs_server.url, user="alice")
    client.write("/d/f", data=b"hello", overwrite=False)
    client.write("/d/f", data=b" world", append=True)
    with client.read("/d/f", offset=2, length=5) as reader:
        assert reader.read() == b"llo w"
    assert client.content("/d") == {"directoryCount": 1, "fileCount": 1, "length": 11, "quota": -1,
                                    "spaceConsumed": 11, "spaceQuota": -1}
    assert client.checksum("/d/f")["length"] == 32
    assert client.status("/d/f")["type"] == "FILE" and client.status("/nope", strict=False) is None
    assert client.resolve("rel") == "/user/alice/rel"  # GETHOMEDIRECTORY
    client.write("/d/g", data=b"g")
    with pytest.raises(HdfsError):
        client.rename("/d/g", "/d/f")  # plain RENAME refuses an existing destination
    client.rename("/d/g", "/e")
    assert client.list("/") == ["d", "e"]
    with pytest.raises(HdfsError, match="already exists"):
        client.write("/d/f", data=b"x")
    assert client.delete("/d", recursive=True) is True and client.delete("/d") is False


def test_an_upload_cut_mid_way_is_retried_for_bytes_and_reported_for_generators(hdfs_store, webhdfs_server):
    hdfs_store.write_bytes("f", b"old")
    webhdfs_server.faults.cut_uploads(count=1, after_bytes=100_000)
    hdfs_store.write_bytes("f", PAYLOAD)  # bytes can be sent again
    assert hdfs_store.read_bytes("f") == PAYLOAD
    webhdfs_server.faults.cut_uploads(count=1, after_bytes=100_000)
    before = webhdfs_server.faults.requests_seen
    with pytest.raises(StoreUnavailableError, match="broke mid-stream"):
        hdfs_store.write_stream("f", (PAYLOAD[i:i + 65536] for i in range(0, len(PAYLOAD), 65536)))
    assert hdfs_store.read_bytes("f") == PAYLOAD  # the previous content, untouched
    # CREATE, upload, DELETE of the temporary, OPEN + redirected OPEN: no retry loop
    assert webhdfs_server.faults.requests_seen - before == 5


def test_a_retry_budget_lowered_mid_call_ends_the_retries_at_the_next_failure():
    # A fit that saw its store stay down sets its store's retry_timeout_s to 0: a call already retrying (the
    # lease's renewal) gave up only at its own 30 s deadline, and the fit's end waited for it.
    from storage._retry import TransientError, call_with_retry

    budget = {"s": 3600.0}
    attempts = []

    def refused() -> None:
        attempts.append(1)
        if len(attempts) == 3:
            budget["s"] = 0.0  # the caller gives up on the store
        raise TransientError("connection refused")

    with pytest.raises(StoreUnavailableError, match=r"failed 3 time\(s\) .*\(retry_timeout_s=0\)"):
        call_with_retry(refused, operation="list 'runs'", url="hdfs://nowhere/x", retry_timeout_s=lambda: budget["s"])
    assert len(attempts) == 3


def test_a_store_ending_fast_tries_once_and_waits_a_short_time_for_an_answer_a_cut_link_holds_back(webhdfs_server):
    store = open_store(webhdfs_server.store_url("/store"), retry_timeout_s=30)
    store.write_bytes("f", b"x")
    webhdfs_server.faults.stall_answers(seconds=2.0)
    assert store.read_bytes("f") == b"x"  # as it is: waits for the late answer (READ_TIMEOUT_S, 60 s)
    store.end_fast(answer_timeout_s=0.2)
    webhdfs_server.faults.stall_answers(seconds=2.0)
    with pytest.raises(StoreUnavailableError, match=r"read_bytes 'f' failed 1 time\(s\).*timed out"):
        store.read_bytes("f")
    assert store.ending_fast and store.retry_timeout_s == 0.0
