"""A driver whose own lease file is edited or damaged while it trains: other drivers ignore that file (it
no longer verifies), so the run is no longer held; the driver stops saying its own lease file no longer
verifies, naming the file -- not that another driver took the run, when none did.

No Spark: :class:`node.run.DriverLease` on a local store, the file edited as the audit's
``lease_tamper.py edit`` does (host, pid and started changed, the old MAC kept).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

import node
import storage
from node.run import DriverLease

KEY = b"edited-lease-test-run-key-32byte"
#: Renewals every 0.1 s keep these tests short.
TIMEOUT_S = 0.4
#: How long the renewal thread is given to notice: far above TIMEOUT_S.
DEADLINE_S = 60.0


def deadline_poll(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)  # polling the store with a deadline


def edit_by_hand(path: Path) -> None:
    entry = json.loads(path.read_text())
    entry["signed"].update(host="evil", pid=1, started=time.time() + 86400)  # the MAC left as it was
    path.write_text(json.dumps(entry))


def own_file_message(store: storage.Store) -> str:
    return (r"the lease file of run 'r1' \(generation 1\), " + f"{store.url}/runs/r1/lease/00000001.json".replace(
        ".", r"\.") + r", no longer verifies under the run key \(edited or damaged")


def test_a_hand_edited_own_lease_file_stops_the_driver_at_its_next_write_naming_the_file_not_another_driver(
        store_url):
    store = storage.open_store(store_url)
    holder = DriverLease(store, "r1", KEY, 3600.0)  # no renewal in this test: check_store alone looks
    holder.acquire()
    edit_by_hand(Path(store_url.removeprefix("file://")) / "runs/r1/lease/00000001.json")
    with pytest.raises(node.LeaseLostError, match=own_file_message(store)) as raised:
        holder.check_store()
    assert "another driver (" not in str(raised.value) and "unknown" not in str(raised.value)
    holder.release()  # writes nothing: the lease is not held
    assert not any(name.endswith(".released") for name in store.list("runs/r1/lease"))


def test_the_renewal_thread_says_the_same_and_a_next_fit_takes_the_run_at_once(store_url):
    store = storage.open_store(store_url)
    lost = []
    holder = DriverLease(store, "r1", KEY, TIMEOUT_S, on_lost=lambda: lost.append(True))
    holder.acquire()
    edit_by_hand(Path(store_url.removeprefix("file://")) / "runs/r1/lease/00000001.json")
    deadline_poll(lambda: holder.lost and lost, DEADLINE_S, "the renewal thread to notice and say so")
    with pytest.raises(node.LeaseLostError, match=own_file_message(store)):
        holder.check()
    holder.release()
    # Why the driver must stop: to every other driver the edited file holds nothing, so the run is free.
    assert storage.LeaseFolder(store, "r1", KEY).view().free
    with DriverLease(store, "r1", KEY, 3600.0) as taker:  # taken at once, above the edited generation
        assert taker.generation == 2


def test_the_fits_last_log_line_blames_no_other_driver_for_a_lease_lost_to_an_edited_file(store_url, caplog):
    from node.driver._fit_phases import _mark_failed

    store = storage.open_store(store_url)
    holder = DriverLease(store, "r1", KEY, 3600.0)
    holder.acquire()
    edit_by_hand(Path(store_url.removeprefix("file://")) / "runs/r1/lease/00000001.json")
    with pytest.raises(node.LeaseLostError) as raised:
        holder.check_store()
    with caplog.at_level(logging.ERROR, logger="node.driver._fit_phases"):
        _mark_failed(raised.value, record=object(), lease=holder, run_id="r1")  # lost: the record is not touched
    [line] = [record.getMessage() for record in caplog.records if record.name == "node.driver._fit_phases"]
    assert line.startswith("run r1 failed after its driver lost the run's lease (its record is left unmarked): "
                           "LeaseLostError: the lease file of run 'r1' (generation 1)"), line
    assert "another driver" not in line.split(":")[0]
    holder.release()
