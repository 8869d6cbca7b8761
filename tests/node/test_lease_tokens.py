"""The lease's fencing token: above every generation the run shows, checked before each write, signed.

No Spark: :class:`node.run.DriverLease` and :class:`storage.RunStore` on a local store, with what an
operator or someone without the run key does to ``runs/<run>/lease/`` in between.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

import node
import storage
from node.run import DriverLease

KEY = b"lease-token-test-run-key-32bytes"
#: Renewals every 0.1 s keep these tests short.
TIMEOUT_S = 0.4
#: The timeout of a fit that must be refused: long, so it is refused at the holder's next renewal (0.1 s
#: apart) whatever the load, yet polls every 0.5 s (timeout / 8); a holder that never renews fails it in 4 s.
REFUSED_TAKER_TIMEOUT_S = 4.0
#: How long a taker that should be refused (or a holder that should stop) is given: far above TIMEOUT_S.
DEADLINE_S = 60.0


def deadline_poll(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)  # polling the store with a deadline


def record_names(store: storage.Store, run: str) -> list[str]:
    return sorted(store.list(f"runs/{run}/record"))


def test_a_deleted_lease_folder_never_brings_back_a_generation_the_run_already_used(store_url):
    store = storage.open_store(store_url)
    runs = storage.RunStore(store, "r1", KEY)
    for generation in (1, 2, 3):  # three earlier fits; their lease files are gone (an operator's "unlock")
        runs.write_record({"status": "running", "by": generation}, generation=generation)
    holder = DriverLease(store, "r1", KEY, TIMEOUT_S)
    holder.acquire()
    assert holder.generation == 4  # above the records' generations, not 1
    runs.write_record({"status": "running", "by": 4}, generation=holder.generation)
    store.delete("runs/r1/lease", recursive=True)  # the operator removes lease/ while generation 4 trains
    taker = DriverLease(store, "r1", KEY, TIMEOUT_S)
    taker.acquire()  # free at once: nothing in lease/
    assert taker.generation == 5
    with pytest.raises(node.LeaseLostError):  # the live holder stops at its next write instead of writing on
        holder.check_store()
    holder.release()  # releases nothing: generation 5 is not its own
    assert not any(name.endswith(".released") for name in store.list("runs/r1/lease"))
    with pytest.raises(node.LeaseHeldError):  # a third fit is refused: generation 5 is held and renewed
        DriverLease(store, "r1", KEY, REFUSED_TAKER_TIMEOUT_S).acquire()
    runs.write_record({"status": "done", "by": 5}, generation=taker.generation)
    assert storage.RunStore(store, "r1", KEY).read_record()["by"] == 5  # readers see the newest fit
    taker.release()


def test_a_generation_taken_again_under_the_holder_stops_the_holder_and_its_release_leaves_it_alone(store_url):
    store = storage.open_store(store_url)
    holder = DriverLease(store, "r1", KEY, TIMEOUT_S)
    holder.acquire()
    assert holder.generation == 1
    # lease/ removed before the holder wrote anything else, then generation 1 taken by another driver
    store.delete("runs/r1/lease", recursive=True)
    other = storage.LeaseFolder(store, "r1", KEY)
    assert other.take(1, {"token": "other", "host": "elsewhere", "pid": 4242, "fit": "other-fit", "started": 0.0})
    with pytest.raises(node.LeaseLostError, match=r"now names another driver \(host elsewhere, pid 4242"):
        holder.check_store()
    holder.release()
    assert store.list("runs/r1/lease") == ["00000001.json"]  # the other's lease, untouched: no release of it


def test_a_model_folder_of_a_later_generation_also_counts(store_url):
    store = storage.open_store(store_url)
    store.write_bytes("runs/r1/model/00000007/model.npz", b"not read here")
    with DriverLease(store, "r1", KEY, TIMEOUT_S) as lease:
        assert lease.generation == 8


def forge(store: storage.Store, path: str, content: dict | None) -> None:
    """Write a lease file as someone with write access to the store but without the run key would."""
    store.write_bytes(path, b"" if content is None else json.dumps(content).encode())


def test_a_forged_next_generation_neither_stops_the_live_holder_nor_delays_the_next_fits_refusal(store_url, caplog):
    store = storage.open_store(store_url)
    holder = DriverLease(store, "r1", KEY, TIMEOUT_S)
    holder.acquire()
    forge(store, "runs/r1/lease/00000002.json", {"run": "r1", "generation": 2, "token": "forged", "host": "mallory",
                                                 "pid": 1, "fit": "forged", "started": 0.0, "timeout_s": 1e9})
    folder = storage.LeaseFolder(store, "r1", KEY)
    seen = folder.view().renewal
    deadline_poll(lambda: folder.view().renewal >= seen + 4, DEADLINE_S, "four more renewals of the holder")
    assert not holder.lost  # it renewed through four checks of lease/ with the forged generation in it
    holder.check_store()
    outcome: list[BaseException] = []

    def take() -> None:
        try:
            DriverLease(store, "r1", KEY, REFUSED_TAKER_TIMEOUT_S).acquire()
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            outcome.append(error)

    with caplog.at_level(logging.WARNING, logger="storage._lease"):
        taker = threading.Thread(target=take, daemon=True)  # a forged timeout_s of 1e9 would keep it waiting
        taker.start()
        deadline_poll(lambda: not taker.is_alive(), DEADLINE_S, "the next fit's answer")
    assert len(outcome) == 1 and isinstance(outcome[0], node.LeaseHeldError), outcome
    assert "renewed its lease" in str(outcome[0])
    assert any("00000002.json" in message and "ignored" in message for message in caplog.messages)
    holder.release()
    with DriverLease(store, "r1", KEY, TIMEOUT_S) as next_fit:  # above the forged name too
        assert next_fit.generation == 3


def test_a_forged_renewal_with_a_huge_count_never_lets_a_live_run_be_taken(store_url):
    store = storage.open_store(store_url)
    with DriverLease(store, "r1", KEY, TIMEOUT_S) as holder:
        forge(store, "runs/r1/lease/00000001-99999999.renewal", None)  # static, the highest count the folder shows
        for _ in range(3):  # each taker watches the holder's real renewals advance
            with pytest.raises(node.LeaseHeldError, match="renewed its lease"):
                DriverLease(store, "r1", KEY, REFUSED_TAKER_TIMEOUT_S).acquire()
        assert not holder.lost


def test_a_forged_release_of_a_live_lease_is_ignored(store_url):
    store = storage.open_store(store_url)
    with DriverLease(store, "r1", KEY, TIMEOUT_S) as holder:
        forge(store, "runs/r1/lease/00000001.released", None)
        with pytest.raises(node.LeaseHeldError, match="renewed its lease"):
            DriverLease(store, "r1", KEY, REFUSED_TAKER_TIMEOUT_S).acquire()
        assert not holder.lost


def test_lease_files_signed_with_another_runs_key_do_not_verify(store_url):
    store = storage.open_store(store_url)
    with DriverLease(store, "r1", b"another-run-key-of-32-bytes-long", TIMEOUT_S):
        view = storage.LeaseFolder(store, "r1", KEY).view()
        assert view.generation == 0 and view.highest == 1 and view.free
