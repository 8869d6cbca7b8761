"""A writer killed with SIGKILL in the middle of a write leaves the previous version intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from storage import WeightStore

# The writer streams 64 KiB chunks, paced, to the file that already holds version 1.
WRITER = textwrap.dedent(
    """
    import sys, time
    from storage import open_store

    store = open_store(sys.argv[1], retry_timeout_s=5)
    def chunks():
        for i in range(100_000):
            yield bytes([i % 256]) * 65536
            time.sleep(0.01)  # pacing: a slow producer, so the test can catch it mid-write
    store.write_stream(sys.argv[2], chunks())
    """
)


def _temporaries(directory: str) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith("._tmp-")] if os.path.isdir(directory) else []


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "webhdfs"])
def test_a_writer_killed_mid_write_leaves_the_previous_version_intact(request, backend):
    store = request.getfixturevalue("local_store" if backend == "local" else "hdfs_store")
    if backend == "local":
        on_disk = store.root
    else:
        on_disk = os.path.join(request.getfixturevalue("webhdfs_server").root, store.root.lstrip("/"))
    weights = WeightStore(store, "r", b"k" * 32)
    params = {"W": np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)}
    ref = weights.put_version("rbm0", "n", 1, params)
    final = ref.path  # the writer overwrites this very file, slowly
    directory = os.path.join(on_disk, os.path.dirname(final))

    writer = subprocess.Popen([sys.executable, "-c", WRITER, store.url, final])
    try:
        deadline = time.monotonic() + 60
        while True:  # poll until the temporary file has grown past a few chunks
            sizes = [os.path.getsize(os.path.join(directory, n)) for n in _temporaries(directory)]
            if sizes and max(sizes) > 4 * 65536:
                break
            assert writer.poll() is None, "writer exited before it was killed"
            assert time.monotonic() < deadline, "writer never started writing"
            time.sleep(0.02)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert writer.returncode == -signal.SIGKILL

    np.testing.assert_array_equal(weights.get_version(ref)["W"], params["W"])  # sha256-verified
    assert weights.list_versions("rbm0", "n") == [ref]
    assert store.list(os.path.dirname(final)) == [os.path.basename(final)]  # the partial file stays hidden
    assert _temporaries(directory), "the killed writer's partial file should be a hidden temporary"
    assert store.remove_stale_temporaries(os.path.dirname(final), older_than_s=3600) == 0  # maybe still "in flight"
    assert store.remove_stale_temporaries(os.path.dirname(final), older_than_s=-1) >= 1
    assert not _temporaries(directory)
    np.testing.assert_array_equal(weights.get_version(ref)["W"], params["W"])
