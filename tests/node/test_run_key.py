"""Only holders of the run's key influence a Spark run: an intruder with full write access to the store
changes nothing; a resumed run needs the first fit's key and stops before training without it."""

from __future__ import annotations

import os

import numpy as np
import pytest
from crash_store import HARNESS_TOLERANCE, HARNESS_TRAINED, harness_model, harness_settings

import node
import storage

pytestmark = pytest.mark.slow

WRONG_KEY = b"an-intruder-has-this-key-not-the-run-key"
TOLERANCE = HARNESS_TOLERANCE


def fit(spark, store_url: str, run_id: str, digits, **options):
    key = options.pop("key", None)
    model = harness_model()
    node.Trainer(spark, store_url, run_id=run_id, key=key, **harness_settings(**options)).fit(
        model, digits.X_train, digits.y_train)
    return model


def test_an_intruder_with_the_store_but_a_wrong_key_changes_nothing(spark, digits, tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    clean = fit(spark, store_url, "clean", digits).score(digits.X_test, digits.y_test)
    store = storage.open_store(store_url)
    planted = []

    def intrude(summary: dict) -> None:  # after every epoch, into every honest node's folder and its own
        intruder = storage.WeightStore(store, summary["run"], WRONG_KEY)
        honest = storage.WeightStore(store, summary["run"], node.resolve_run_key(summary["run"], store_url).key)
        for name in summary["nodes"] + ["intruder"]:
            real = honest.consolidate(summary["phase"], summary["nodes"]).params
            planted.append(intruder.put_version(summary["phase"], name, 10**7 + len(planted),
                                                {key: np.full_like(value, 9.0) for key, value in real.items()}))
        storage.RunStore(store, summary["run"], WRONG_KEY).register_peer(
            "intruder", {"endpoint": "tcp://127.0.0.1:9", "host": "evil", "pid": 1})

    fit(spark, store_url, "attacked", digits, stop_after_phase="rbm0", on_epoch=intrude)
    forged = storage.WeightStore(store, "attacked", WRONG_KEY).put_phase_result(  # a forged rbm0 result ...
        "rbm0", {name: np.full_like(value, 9.0) for name, value in harness_model().initialize(64).parameters(
            "rbm0").items()})
    record = node.open_run(store_url, "attacked").record
    record["steps"]["rbm0"]["result"] = {**record["steps"]["rbm0"]["result"], **forged}
    storage.RunStore(store, "attacked", WRONG_KEY).write_record(record, generation=10**6)  # ... named by a newer record
    attacked = fit(spark, store_url, "attacked", digits, on_epoch=intrude)

    assert abs(attacked.score(digits.X_test, digits.y_test) - clean) <= TOLERANCE
    run = node.open_run(store_url, "attacked")
    for phase in ("rbm0", "finetune"):
        result = run.weights.get_phase_result(phase)
        assert result is not None and all(np.abs(value).max() < 9.0 for value in result.values())
    assert planted and run.weights.list_versions("rbm0", "intruder") == []  # written, never listed as valid
    assert "intruder" not in run.runs.list_peers()
    refused = run.weights.refusals()
    assert sum(refused.values()) > 0, refused  # counted, by kind
    stats = [record["stats"] for record in run.runs.read_metrics() if record["phase"] == "finetune"]
    assert sum(entry.get("dropped_unauthenticated", 0) + entry.get("refused_peer_entries", 0) for entry in stats) > 0


def test_a_run_resumes_with_its_key_and_stops_before_training_with_a_wrong_or_missing_one(spark, digits, tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    fit(spark, store_url, "keyed", digits, stop_after_phase="rbm0")
    metrics_before = len(node.open_run(store_url, "keyed").runs.read_metrics())

    with pytest.raises(node.TrainingError, match=r"run 'keyed' cannot be resumed with this key: .*wrong key"):
        fit(spark, store_url, "keyed", digits, key=WRONG_KEY)
    kept = node.stored_key_path("keyed", store_url)
    os.rename(kept, kept + ".away")
    try:
        with pytest.raises(node.RunKeyError, match="keyed"):
            fit(spark, store_url, "keyed", digits)
    finally:
        os.rename(kept + ".away", kept)
    assert len(node.open_run(store_url, "keyed").runs.read_metrics()) == metrics_before  # nothing trained

    resumed = fit(spark, store_url, "keyed", digits)
    assert node.open_run(store_url, "keyed").record["status"] == "done"
    assert resumed.score(digits.X_test, digits.y_test) >= HARNESS_TRAINED
