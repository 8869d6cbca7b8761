"""A fit's last store calls after Ctrl-C or a store failure: one short attempt each (storage.Store.end_fast).

With the namenode's link cut, Ctrl-C took 133-135 s to end a fit (a virtual-cluster audit): marking the run failed,
releasing the lease and removing the work folders each waited out the store's retries and a 60 s answer timeout.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import storage
from node.driver._fit import _end_fast


def ended(error: BaseException, tmp_path) -> tuple[storage.Store, SimpleNamespace]:
    store = storage.open_store(str(tmp_path / "store"), retry_timeout_s=30)
    lease = SimpleNamespace(store_failed=False, run="r1", timeout_s=60.0)
    _end_fast(store, lease, error)
    return store, lease


def raised_while_handling(first: BaseException, then: BaseException) -> BaseException:
    try:
        try:
            raise first
        except BaseException:
            raise then
    except BaseException as error:
        return error


@pytest.mark.parametrize("error", [KeyboardInterrupt(), raised_while_handling(KeyboardInterrupt(), RuntimeError(
    "reentrant call"))], ids=["ctrl-c", "py4j's error raised for ctrl-c"])
def test_after_ctrl_c_the_last_store_calls_end_fast_without_a_store_warning(error, tmp_path):
    store, lease = ended(error, tmp_path)
    assert store.ending_fast and store.retry_timeout_s == 0.0
    assert not lease.store_failed  # a store that fails then is still said: nothing said it before


def test_after_a_store_failure_the_last_store_calls_end_fast_and_their_failures_are_not_said_again(tmp_path):
    store, lease = ended(storage.StoreUnavailableError("store x unavailable"), tmp_path)
    assert store.ending_fast and lease.store_failed


def test_any_other_error_leaves_the_last_store_calls_their_retries(tmp_path):
    store, lease = ended(ValueError("bad input"), tmp_path)
    assert not store.ending_fast and store.retry_timeout_s == 30.0 and not lease.store_failed
