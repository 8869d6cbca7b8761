"""A run whose newest record entry cannot be read (a directory planted where it goes, a truncated file):
``status`` and ``evaluate`` name that entry and say where the run stands is unknown, rather than tell the
older readable record's story ("stopped without finishing", "still training") of a run that finished.

No Spark: a run's records, lease and model written through :mod:`storage` as a fit writes them.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pytest

import node
import storage
from node.run import DriverLease, open_run, run_model_arrays
from node.watch import run_status

#: The secret a user gives (``--key``); the run's records are signed with the key derived from it for the run.
SECRET = b"unreadable-record-test-key-32byt"


def finished_run(store_url: str) -> tuple[Path, bytes]:
    """A run of one generation: a "running" record, its model, a "done" record naming it, its lease released."""
    store = storage.open_store(store_url)
    key = node.resolve_run_key("r1", store_url, key=SECRET, create=False).key
    runs = storage.RunStore(store, "r1", key)
    buffer = io.BytesIO()
    np.savez(buffer, W=np.arange(6, dtype=np.float32).reshape(2, 3))
    payload = buffer.getvalue()
    with DriverLease(store, "r1", key, 3600.0) as lease:
        runs.write_record({"status": "running", "phases": ["rbm0"], "steps": {}}, generation=lease.generation)
        path = runs.model_path(lease.generation)
        store.write_bytes(path, payload)
        newest = runs.write_record({"status": "done", "phases": ["rbm0"], "steps": {}, "finished": 0.0,
                                    "model": {"path": path, "sha256": storage.sha256_hex(payload)}},
                                   generation=lease.generation)
    return Path(store_url.removeprefix("file://")) / newest, payload


@pytest.mark.parametrize("damage", ["a directory", "a truncated file"])
def test_status_and_evaluate_name_the_unreadable_newest_record_entry_instead_of_an_unfinished_story(
        store_url, damage):
    newest, _ = finished_run(store_url)
    original = newest.read_bytes()
    newest.unlink()
    if damage == "a directory":
        newest.mkdir()
    else:
        newest.write_bytes(original[:len(original) // 2])
    entry = f"{store_url}/runs/r1/record/{newest.name}"

    screen = run_status(store_url, "r1", key=SECRET)
    first, second = screen.splitlines()[:2]
    assert first.startswith("run r1: unknown: its newest record entry cannot be read (the newest readable record "
                            "says running)"), screen
    assert second.startswith(f"  unreadable record entry: {entry}: "), screen
    assert "released the run without marking" not in screen and "stopped without finishing" not in screen

    with pytest.raises(node.TrainingError) as raised:
        run_model_arrays(open_run(store_url, "r1", key=SECRET))
    message = str(raised.value)
    assert message.startswith("run 'r1': its newest record entry cannot be read, so where the run stands is unknown"
                              f" (it may have finished): {entry}: "), message
    assert "still training" not in message


def test_the_same_run_with_its_record_restored_reads_as_finished(store_url):
    newest, payload = finished_run(store_url)
    original = newest.read_bytes()
    newest.unlink()
    newest.mkdir()
    shutil.rmtree(newest)
    newest.write_bytes(original)  # restored from a backup

    assert run_status(store_url, "r1", key=SECRET).startswith("run r1: done")
    assert np.array_equal(run_model_arrays(open_run(store_url, "r1", key=SECRET))["W"],
                          np.load(io.BytesIO(payload))["W"])
