"""Real nodes on local[2] whose advertised address nobody can reach: they learn by listing the store, the
stats and the epoch summaries say so, and the driver warns in plain words naming the settings."""

from __future__ import annotations

import logging
import socket

import pytest

import node
import rbm
from node.driver._progress import summary_line

pytestmark = pytest.mark.slow

EPOCHS = 6
PARTITIONS = 4


def small_rbm() -> rbm.RBM:
    return rbm.RBM(n_components=16, batch_size=20, learning_rate=0.05, n_iter=1, random_state=0)


def reachability_warnings(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.levelno >= logging.WARNING and "cannot reach each other's ports" in record.getMessage()]


def fit(spark, store_url, digits, run_id, **settings):
    X, y, _, _ = digits
    settings = {"anti_entropy_interval_s": 0.3, **settings}
    trainer = node.Trainer(spark, store_url, run_id=run_id, epochs=EPOCHS, partitions=PARTITIONS, progress=False,
                           **settings)
    trainer.fit(small_rbm(), X)
    return trainer


def test_nodes_advertising_an_address_nobody_listens_on_merge_by_listing_and_the_driver_warns_once(
        spark, store_url, digits, caplog):
    caplog.set_level(logging.WARNING)
    # The nodes bind loopback (local master) but tell their peers 127.0.0.2, where nothing listens.  They
    # list the store every 50 ms: the run lasts about a second, and listing every 0.3 s merged as few as
    # 3 peer versions in it (the driver warns from 4) where the Python workers were already warm.
    trainer = fit(spark, store_url, digits, "unreachable", advertise_host="127.0.0.2", anti_entropy_interval_s=0.05)
    warnings = reachability_warnings(caplog)
    assert len(warnings) == 1, warnings  # one phase, one warning
    for setting in ("advertise_host", "spark.sparkdbn.advertise_host", "port_range", "firewall", "tcp://127.0.0.2:"):
        assert setting in warnings[0]
    records = [record for summary in trainer.history_ for record in summary["records"]]
    assert sum(record["merged_listed"] for record in records) >= 4
    assert sum(record["merged_announced"] for record in records) == 0
    assert all(record["endpoint"].startswith("tcp://127.0.0.2:") for record in records)
    assert max(record["stats"]["peers_unreachable"] for record in records) >= 1
    stored = node.open_run(store_url, "unreachable").runs.read_metrics()
    assert {record["node"] for record in stored} == {record["node"] for record in records}
    assert sum(record["merged_listed"] for record in stored) == sum(record["merged_listed"] for record in records)
    merging = [summary for summary in trainer.history_ if summary["merges"]][-1]  # the last epoch may merge none
    line = summary_line(merging, EPOCHS)
    assert "0 by announcement" in line and all(f"{name} 0/" in line for name in merging["nodes"])

    # The same run with the automatic address: the nodes hear each other, and nobody warns.
    caplog.clear()
    trainer = fit(spark, store_url, digits, "reachable")
    records = [record for summary in trainer.history_ for record in summary["records"]]
    assert reachability_warnings(caplog) == []
    announced = sum(record["merged_announced"] for record in records)
    assert announced > sum(record["merged_listed"] for record in records)
    assert all(record["endpoint"].startswith("tcp://127.0.0.1:") for record in records)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_node_that_finds_no_free_port_of_the_port_range_ends_the_fit_at_once_naming_the_range(
        spark, store_url, digits, mode):
    # Spark ran such a task again, and an attempt in the worker whose node held the range's free port trained it:
    # a phase went on with fewer nodes than asked, saying nothing, until a later job failed four times over.
    # In sync, the other node's barrier ends on it too, not on barrier_timeout_s (5 minutes by default).
    with socket.socket() as taken, socket.socket() as free:  # a range of two ports, one held by someone else
        taken.bind(("127.0.0.1", 0))
        free.bind(("127.0.0.1", taken.getsockname()[1] + 1))
        port = taken.getsockname()[1]
        free.close()
        with pytest.raises(node.TrainingError, match=rf"the node on host {socket.gethostname()} cannot start: every "
                                                     rf"port of the port range {port}-{port + 1} on host '127.0.0.1' "
                                                     "is taken .*widen port_range or free ports$"):
            fit(spark, store_url, digits, f"no-free-port-{mode}", port_range=f"{port}-{port + 1}", mode=mode,
                anti_entropy_interval_s=0.3)
    record = node.open_run(store_url, f"no-free-port-{mode}").record
    assert record["status"] == "failed" and "cannot start" in record["error"]
