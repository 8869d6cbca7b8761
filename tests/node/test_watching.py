"""Watching a run live: validation each epoch, TensorBoard events mid-run, early stopping, status, MLflow.

One small DBN (64-16) on part of the digits, on the suite's local Spark with two nodes.
"""

from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest
from support.numerics import forward_rtol, near_ties

import node
import node.cli
import rbm
import storage
from node.watch._early_stopping import EarlyStopping
from node.watch._validation import LOG_LOSS_EPS, ValidationSet, Validator, hold_out_validation

pytestmark = pytest.mark.slow

ROWS = 600
KEEP_VERSIONS = 1  # the fewest snapshots a node keeps: the one an epoch is validated on must be held

# The tolerances of a validation figure computed two ways (the driver's row blocks, a Spark task's, the
# test's own; one BLAS thread or two), for small_dbn (64 -> 16 -> 10), float32:
# - a row's class probabilities pass dot products of 64 and 16 terms: within (64 + 16) eps relative;
FORWARD_RTOL = forward_rtol(64, 16)
# - the mean log loss of 450 rows: measured 7.6e-10 relative apart over 1 and 2 threads, three row
#   splits and OpenBLAS's Haswell and SkylakeX kernels (a row's loss rounds at about 1e-7);
MEAN_LOSS_RTOL = 1e-6
# - the reconstruction error, a float32 mean of 450 x 64 squared errors behind 64- and 16-term dot products
#   (numpy's pairwise summation: about 24 roundings deep): within (64 + 16 + 24) eps; measured 8.9e-8 apart.
RECONSTRUCTION_RTOL = forward_rtol(64, 16, 24)


def small_dbn() -> rbm.DBN:
    return rbm.DBN(hidden_layer_sizes=(16,), batch_size=20, pretrain_learning_rate=0.1, finetune_learning_rate=0.2,
                   finetune_dropout=0.0, random_state=0)


def settings(**changes) -> dict:
    base = dict(partitions=2, progress=False, lease_timeout_s=30.0, log_dir=None)
    base.update(changes)
    return base


def accuracy_and_log_loss(model: rbm.DBN, X: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    proba = model.predict_proba(X).astype(np.float64)
    index = np.searchsorted(model.classes_, y)
    picked = np.clip(proba[np.arange(len(y)), index], LOG_LOSS_EPS, 1.0)
    return float((proba.argmax(axis=1) == index).mean()), float(-np.log(picked).mean())


def status_text(store_url: str, run: str, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = node.cli.main(["status", "--store", store_url, "--run", run])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_tensorboard_shows_every_node_and_the_validation_while_the_run_trains(spark, digits, tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    store_url, log_dir = "file://" + str(tmp_path / "store"), str(tmp_path / "logs")
    X, y = digits.X_train[:ROWS], digits.y_train[:ROWS]
    seen: list[dict] = []

    def check_live(summary: dict) -> None:
        if seen:
            return
        events = EventAccumulator(os.path.join(log_dir, summary["run"]))
        events.Reload()
        scalars = set(events.Tags()["scalars"])
        seen.append({"summary": summary, "scalars": scalars, "events": events})
        seen[0]["status"] = status_text(store_url, summary["run"], capsys)

    trainer = node.Trainer(spark, store_url, on_epoch=check_live,
                           **settings(run_id="live", epochs={"rbm0": 2, "finetune": 2}, validation_fraction=0.25,
                                      log_dir=log_dir))
    model = trainer.fit(small_dbn(), X, y)

    first = seen[0]
    summary, events = first["summary"], first["events"]
    # The epoch's nodes: its two tasks' Python workers, or one (a task that Spark launches after the other
    # ended takes the same idle worker, whose node trains both slots: seen on a loaded machine).
    assert summary["phase"] == "rbm0" and summary["epoch"] == 0 and 1 <= len(summary["nodes"]) <= 2
    assert {r["node"] for r in summary["records"]} == set(summary["nodes"])
    for node_id in summary["nodes"]:
        mine = [r for r in summary["records"] if r["node"] == node_id]
        loss = sum(r["loss"] * r["samples"] for r in mine) / sum(r["samples"] for r in mine)
        for name in ("loss", "samples_per_s", "merges", "dropped"):
            assert f"rbm0.{name}/{node_id}" in first["scalars"]
        assert events.Scalars(f"rbm0.loss/{node_id}")[0].value == pytest.approx(loss, rel=1e-5)
    assert events.Scalars("rbm0.run/val_reconstruction_error")[0].value == pytest.approx(
        summary["validation"]["val_reconstruction_error"], rel=1e-5)

    # `sparkdbn status` while the run trains: running, the epoch done, the newest validation, the epoch's nodes.
    # (Every node the registry holds by then: the next epoch's job is already running, and a task Spark hands
    # a fresh Python worker starts a third node.)
    code, text = first["status"]
    assert code == 0 and "run live: running" in text and "epochs 1/2" in text
    assert "val_reconstruction_error" in text
    listed = re.search(r"^nodes \((\d+)\):$", text, re.MULTILINE)
    assert listed and int(listed.group(1)) >= len(summary["nodes"]), text
    assert all(f"  {node_id}  " in text for node_id in summary["nodes"]), text

    # The recorded figures are those of the phase results (the last epoch's consolidation),
    # recomputed here without Spark on the same held-out rows.
    _, _, held = hold_out_validation(spark, X, y, fraction=0.25, given=None, seed=0, features_col="features",
                                     label_col="label")
    record = node.open_run(store_url, "live").record
    assert record["data"]["n_samples"] == ROWS - len(held.X) == 450
    finetune = record["steps"]["finetune"]["validation"]
    assert [entry["epoch"] for entry in finetune] == [0, 1]
    assert {entry["evaluated_on"] for entry in finetune} == {"driver"}  # 150 rows: cheaper than a Spark job
    accuracy, log_loss = accuracy_and_log_loss(model, held.X, held.y)
    ties = near_ties(model.predict_proba(held.X), FORWARD_RTOL).mean()  # rows a rounding could classify otherwise
    assert finetune[-1]["val_accuracy"] == pytest.approx(accuracy, abs=ties)
    assert finetune[-1]["val_loss"] == pytest.approx(log_loss, rel=1e-4)
    assert accuracy > 0.25  # it learns: ten classes, chance is 0.1 (two short epochs)
    rbm0 = record["steps"]["rbm0"]["validation"][-1]["val_reconstruction_error"]
    pretrained = small_dbn().initialize(X.shape[1], model.classes_)  # the rbm0 result, before fine-tuning
    pretrained.set_parameters(node.open_run(store_url, "live").weights.get_phase_result("rbm0"))
    assert rbm0 == pytest.approx(pretrained.layers_[0].reconstruction_error(held.X), rel=1e-4)

    # The phase ends: weight histograms and the first layer's filters; and every node of every epoch has its
    # scalars, whichever epoch it trained in.
    events.Reload()
    assert "rbm0.weights/rbm0.W" in events.Tags()["histograms"] and "rbm0.filters" in events.Tags()["images"]
    scalars = set(events.Tags()["scalars"])
    trained = {(epoch["phase"], r["node"]) for epoch in trainer.history_ for r in epoch["records"]}
    assert trained and all(f"{phase}.loss/{node_id}" in scalars for phase, node_id in trained), (trained, scalars)
    code, text = status_text(store_url, "live", capsys)
    assert code == 0 and "run live: done" in text and "finetune   done     epochs 2/2" in text

    paths = node.render_report(store_url, "live", str(tmp_path / "report"))
    assert str(tmp_path / "report" / "validation.png") in paths


@pytest.mark.parametrize("job_start_s, where", [(60.0, "driver"), (0.0, "spark")])
def test_validation_runs_on_the_driver_when_sooner_else_as_spark_jobs_with_the_same_figures(spark, digits, job_start_s,
                                                                                           where, numerics):
    model = small_dbn().initialize(digits.X_train.shape[1], np.unique(digits.y_train))  # its initial weights
    held = ValidationSet(X=numerics.arrange(digits.X_test), y=digits.y_test, source="the test rows")
    validator = Validator(spark, held, model.to_spec(), digits.X_train.shape[1], model.classes_, partitions=2,
                          job_start_s=job_start_s, local=False)  # the rule of a cluster, on the suite's local Spark
    sc = spark.sparkContext
    group = f"validation-on-the-{where}-{numerics.name}"
    sc.setJobGroup(group, "a test's validations")
    try:
        finetune = validator.evaluate("finetune", model.parameters())
        rbm0 = validator.evaluate("rbm0", model.parameters())
        again = validator.evaluate("finetune", model.parameters())
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        validator.close()

    # Where is decided once per phase: the driver's time on the first rows against a Spark job's start
    # and the same work spread over 2 partitions (with no time to start a job, Spark is always sooner).
    assert validator.evaluated_on == {"finetune": where, "rbm0": where}
    assert len(sc.statusTracker().getJobIdsForGroup(group)) == (0 if where == "driver" else 3)
    # The same figures, computed in other pieces: the driver's first evaluation takes the first 256 rows, then
    # the rest, `again` all rows at once, Spark one block per partition on one BLAS thread, this test all rows on
    # its own threads.  The row blocks of their float32 GEMMs differ, and with them the last bits of each row.
    accuracy, log_loss = accuracy_and_log_loss(model, held.X, held.y)
    reconstruction_error = model.layers_[0].reconstruction_error(held.X)
    # Accuracy is exact but for rows whose predicted class a rounding could flip (none here: 0 of 450).
    ties = near_ties(model.predict_proba(held.X), FORWARD_RTOL).mean()
    for figures in (finetune, again):
        assert figures["val_accuracy"] == pytest.approx(accuracy, abs=ties)
        assert figures["val_loss"] == pytest.approx(log_loss, rel=MEAN_LOSS_RTOL)
    assert rbm0["val_reconstruction_error"] == pytest.approx(reconstruction_error, rel=RECONSTRUCTION_RTOL)


def evaluated_where(spark, validator: Validator, group: str, *evaluations: tuple[str, bool]) -> tuple[list, int]:
    """Where each ``(phase, executors_busy)`` evaluation ran, and the Spark jobs they took."""
    model = small_dbn().initialize(validator.model_input, validator.classes)
    sc = spark.sparkContext
    sc.setJobGroup(group, "a test's validations")
    where = []
    try:
        for phase, busy in evaluations:
            validator.evaluate(phase, model.parameters(), executors_busy=busy)
            where.append(validator.last_evaluated_on)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        validator.close()
    return where, len(sc.statusTracker().getJobIdsForGroup(group))


def test_validation_waits_for_no_training_job_and_on_a_local_master_runs_on_the_driver(spark, digits):
    held = ValidationSet(X=digits.X_test, y=digits.y_test, source="the test rows")
    classes = np.unique(digits.y_train)

    def validator(**options) -> Validator:
        return Validator(spark, held, small_dbn().to_spec(), digits.X_train.shape[1], classes, partitions=2,
                         job_start_s=0.0, **options)  # with no time to start a job, Spark is always sooner

    # A cluster: the phase is evaluated by Spark, except while a training job holds the task slots.
    where, jobs = evaluated_where(spark, validator(local=False), "validation-beside-a-training-job",
                                  ("finetune", False), ("finetune", True), ("finetune", False))
    assert where == ["spark", "driver", "spark"] and jobs == 2
    # A local master: the executors are the driver's own cores, a job would only add its start.
    local = validator()
    assert local.local
    where, jobs = evaluated_where(spark, local, "validation-on-a-local-master", ("finetune", False), ("rbm0", False))
    assert where == ["driver", "driver"] and jobs == 0 and local.evaluated_on == {"finetune": "driver", "rbm0": "driver"}


def test_the_driver_validates_on_one_blas_thread_beside_a_training_job_and_on_all_of_them_when_none_runs(
        spark, digits, monkeypatch):
    held = ValidationSet(X=digits.X_test, y=digits.y_test, source="the test rows")
    validator = Validator(spark, held, small_dbn().to_spec(), digits.X_train.shape[1], np.unique(digits.y_train),
                          partitions=2)
    limits = []
    real = node.watch._validation.threadpool_limits
    monkeypatch.setattr(node.watch._validation, "threadpool_limits",
                        lambda limits=None, **options: limits_seen(limits, options))

    def limits_seen(given, options):
        limits.append(given)
        return real(limits=given, **options)

    where, _ = evaluated_where(spark, validator, "validation-threads", ("finetune", True), ("finetune", False))
    assert where == ["driver", "driver"] and limits == [1, None]


def test_async_validates_an_epoch_on_its_own_versions_while_the_next_epoch_trains_on(spark, digits, tmp_path,
                                                                                     monkeypatch):
    # async queues epoch e + 1's job behind e's, so the nodes write newer snapshots while the driver validates e.
    # Here the driver waits, before validating e, until e + 1's job has ended (each node keeps one version, so an
    # unheld version of e would be pruned): e must still be scored on its own.  A node may train none of an
    # epoch's partitions (the other took them all), so e + 1's end is Spark's word, not a count of e's nodes'
    # versions.
    phase, epochs, partitions, checked, moved = "finetune", 3, 8, [], []
    real_end_epoch, real_evaluate = node.watch.RunWatch.end_epoch, Validator.evaluate
    tracker = spark.sparkContext.statusTracker()

    def newest(watch, versions):
        return {name: watch.weights.list_versions(phase, name)[-1].version for name in versions}

    def end_epoch(watch, phase_, epoch, summary, **options):
        versions = summary["versions"]
        assert set(versions) == set(summary["nodes"]) and all(version > 0 for version in versions.values())
        if phase_ == phase and epoch + 1 < epochs:
            deadline = time.monotonic() + 120
            while tracker.getActiveJobsIds():
                assert time.monotonic() < deadline, f"epoch {epoch + 2}'s job has not ended: {newest(watch, versions)}"
                time.sleep(0.01)
            moved.append(newest(watch, versions) != versions)  # e's nodes wrote newer versions meanwhile
            own = watch.weights.consolidate(phase, summary["nodes"], as_of=versions)
            assert [ref.version for ref in own.refs] == [versions[name] for name in summary["nodes"]]
            checked.append((epoch, own.params))
        return real_end_epoch(watch, phase_, epoch, summary, **options)

    def evaluate(validator, phase_, params, executors_busy=False):
        if checked and checked[-1][0] is not None:
            epoch, own = checked[-1]
            for name, value in own.items():
                np.testing.assert_array_equal(params[name], value, err_msg=f"epoch {epoch + 1}'s {name}")
            checked[-1] = (None, epoch)
        return real_evaluate(validator, phase_, params, executors_busy)

    monkeypatch.setattr(node.watch.RunWatch, "end_epoch", end_epoch)
    monkeypatch.setattr(Validator, "evaluate", evaluate)
    X, y = digits.X_train[:ROWS], digits.y_train[:ROWS]
    trainer = node.Trainer(spark, "file://" + str(tmp_path / "store"), **settings(
        run_id="as-of", mode="async", partitions=partitions, keep_versions=KEEP_VERSIONS, epochs={"rbm0": 0, phase: epochs},
        validation_data=(digits.X_test[:200], digits.y_test[:200])))
    trainer.fit(small_dbn(), X, y)
    assert checked == [(None, epoch) for epoch in range(epochs - 1)]  # each epoch but the last checked, then scored
    assert any(moved), "no epoch's nodes wrote a newer version before it was validated: nothing was tested"
    assert [summary["epoch"] for summary in trainer.history_ if "validation" in summary] == list(range(epochs))


def test_status_of_an_unknown_run_says_so_without_a_traceback(tmp_path, capsys):
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    code, text = status_text("file://" + str(store), "nowhere", capsys)
    assert code == 2
    assert "there is no run 'nowhere'" in text and "Traceback" not in text


def test_early_stopping_stops_the_job_queued_behind_its_epoch_and_leaves_the_nodes_alive(spark, digits, tmp_path,
                                                                                        caplog):
    # async starts each epoch's job before the one before ends (node.modes._async): when early stopping
    # ends the phase, the next epoch's job is running.  The driver has its nodes skip what they have not
    # started and waits for them; cancelling it instead would kill their Python workers.
    store_url = "file://" + str(tmp_path / "store")
    rng = np.random.default_rng(1)
    X, y = digits.X_train[:ROWS], rng.permutation(digits.y_train[:ROWS])  # nothing to learn: it stops early
    X_val, y_val = digits.X_test[:200], rng.permutation(digits.y_test[:200])
    trainer = node.Trainer(spark, store_url, **settings(
        run_id="stop-queued", epochs={"rbm0": 0, "finetune": 20}, validation_data=(X_val, y_val),
        early_stopping={"metric": "val_accuracy", "patience": 1, "min_delta": 0.05}))
    with caplog.at_level("INFO", logger="node.driver._training_job"):
        trainer.fit(small_dbn(), X, y)

    epochs = [summary["epoch"] for summary in trainer.history_]
    assert epochs == list(range(len(epochs))) and len(epochs) < 20  # stopped early, every epoch up to it summarized
    stopped = [record.getMessage() for record in caplog.records if "stopped the job" in record.getMessage()]
    assert len(stopped) == 1 and f"finetune epoch {len(epochs) + 1}'" in stopped[0], stopped
    for pid in {record["pid"] for summary in trainer.history_ for record in summary["records"]}:
        os.kill(pid, 0)  # every Python worker that trained is alive (raises ProcessLookupError if not)
    # Each node's registry entry names the fit the run record names (`sparkdbn status` compares them, no clock).
    view = node.open_run(store_url, "stop-queued")
    assert {entry.get("fit") for entry in view.runs.list_peers().values()} == {view.record["fit"]}


def test_early_stopping_on_shuffled_labels_stops_keeps_the_best_and_resumes(spark, digits, tmp_path, capsys):
    store_url = "file://" + str(tmp_path / "store")
    rng = np.random.default_rng(0)
    X, y = digits.X_train[:ROWS], rng.permutation(digits.y_train[:ROWS])  # nothing to learn
    X_val, y_val = digits.X_test[:200], rng.permutation(digits.y_test[:200])
    rule = {"metric": "val_accuracy", "patience": 2, "min_delta": 0.05}
    epochs = 20

    def stopping_state() -> dict:
        return node.open_run(store_url, "stop").record["steps"]["finetune"].get("early_stopping") or {}

    def fit(stop_when) -> None:
        def on_epoch(summary: dict) -> None:
            if stop_when(stopping_state()):
                raise KeyboardInterrupt

        node.Trainer(spark, store_url, on_epoch=on_epoch,
                     **settings(run_id="stop", epochs={"rbm0": 0, "finetune": epochs}, validation_data=(X_val, y_val),
                                early_stopping=rule)).fit(small_dbn(), X, y)

    # 1. Interrupted while the patience count stands at 1; the record says failed.
    with pytest.raises(KeyboardInterrupt):
        fit(lambda state: state.get("wait") == 1)
    code, text = status_text(store_url, "stop", capsys)
    assert code == 0 and "run stop: failed" in text and "error: interrupted (Ctrl-C)" in text
    # 2. Resumed, it continues the count and stops the phase; interrupted right after.
    with pytest.raises(KeyboardInterrupt):
        fit(lambda state: state.get("stopped"))
    # 3. Resumed again, it trains no further epoch and ends the phase with the best weights.
    model = small_dbn()
    trained: list[dict] = []
    node.Trainer(spark, store_url, on_epoch=trained.append,
                 **settings(run_id="stop", epochs={"rbm0": 0, "finetune": epochs}, validation_data=(X_val, y_val),
                            early_stopping=rule)).fit(model, X, y)
    assert trained == []

    record = node.open_run(store_url, "stop").record
    step = record["steps"]["finetune"]
    state, entries = step["early_stopping"], step["validation"]
    assert state["stopped"] and step["epochs_done"] < epochs
    assert [entry["epoch"] for entry in entries] == list(range(step["epochs_done"]))
    # The same rule replayed over the recorded figures, without a restart in between, stops at
    # the same epoch with the same best: the count went on across the resumes.
    replayed, stopping = None, EarlyStopping(**rule)
    for entry in entries:
        assert not (replayed or {}).get("stopped")
        replayed = stopping.update(replayed, entry["epoch"], entry["val_accuracy"])
    assert replayed["stopped"] and replayed["best_epoch"] == state["best_epoch"]
    assert replayed["best"] == state["best"] == entries[state["best_epoch"]]["val_accuracy"]
    # The phase result (and so the model) is the best epoch's consolidation, not the last one's.
    accuracy, log_loss = accuracy_and_log_loss(model, X_val, y_val)
    best, last = entries[state["best_epoch"]], entries[-1]
    ties = near_ties(model.predict_proba(X_val), FORWARD_RTOL).mean()  # rows a rounding could classify otherwise
    assert accuracy == pytest.approx(best["val_accuracy"], abs=ties)
    assert best["val_accuracy"] == state["best"]
    # Shuffled labels keep every log loss near ln 10, yet epochs differ in the third digit (measured: 2.3196,
    # 2.3258, 2.3088), thousands of times MEAN_LOSS_RTOL.
    assert log_loss == pytest.approx(best["val_loss"], rel=MEAN_LOSS_RTOL)
    assert log_loss != pytest.approx(last["val_loss"], rel=MEAN_LOSS_RTOL)
    assert step["result"]["origin"].startswith("early stopping (stopped early)")
    code, text = status_text(store_url, "stop", capsys)
    assert code == 0 and "run stop: done" in text and "stopped early" in text


def test_mlflow_gets_the_params_the_metrics_of_every_epoch_and_the_model(spark, digits, tmp_path):
    mlflow = pytest.importorskip("mlflow", reason="MLflow is an extra: pip install 'sparkdbn[mlflow]'")
    store_url, tracking = "file://" + str(tmp_path / "store"), str(tmp_path / "mlruns")
    node.Trainer(spark, store_url, **settings(run_id="tracked", epochs={"rbm0": 1, "finetune": 2},
                                              validation_fraction=0.25, mlflow_tracking_uri=tracking)).fit(
        small_dbn(), digits.X_train[:ROWS], digits.y_train[:ROWS])

    client = mlflow.MlflowClient(tracking_uri="file://" + tracking)
    (run,) = client.search_runs([client.get_experiment_by_name("sparkdbn").experiment_id],
                                filter_string="tags.`sparkdbn.run` = 'tracked'")
    assert run.info.status == "FINISHED"
    assert run.data.params["settings.validation_fraction"] == "0.25"
    assert run.data.params["model.hidden_layer_sizes"] == "[16]"
    record = node.open_run(store_url, "tracked").record
    history = client.get_metric_history(run.info.run_id, "finetune.val_accuracy")
    validated = record["steps"]["finetune"]["validation"]
    assert [(m.step, m.value) for m in history] == [(entry["epoch"] + 1, pytest.approx(entry["val_accuracy"]))
                                                    for entry in validated]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "rbm0.loss")] == [1]
    artifact = client.download_artifacts(run.info.run_id, "model/model.npz", str(tmp_path / "download"))
    with open(artifact, "rb") as handle:
        assert storage.sha256_hex(handle.read()) == record["model"]["sha256"]


def test_validation_rows_are_held_out_of_arrays_and_dataframes_seeded_and_disjoint(spark):
    X = np.arange(200, dtype=np.float32).reshape(100, 2)
    y = np.arange(100) % 7
    kept_X, kept_y, held = hold_out_validation(spark, X, y, fraction=0.2, given=None, seed=3, features_col="features",
                                               label_col="label")
    assert len(held.X) == 20 and len(kept_X) == 80
    assert sorted(np.concatenate([kept_X[:, 0], held.X[:, 0]]).tolist()) == X[:, 0].tolist()  # disjoint, complete
    np.testing.assert_array_equal(held.y, (held.X[:, 0] // 2).astype(int) % 7)  # labels stay with their rows
    again = hold_out_validation(spark, X, y, fraction=0.2, given=None, seed=3, features_col="f", label_col="l")[2]
    other = hold_out_validation(spark, X, y, fraction=0.2, given=None, seed=4, features_col="f", label_col="l")[2]
    np.testing.assert_array_equal(again.X, held.X)
    assert not np.array_equal(other.X, held.X)

    frame = spark.createDataFrame([(row.tolist(), int(label)) for row, label in zip(X, y)], ["features", "label"])
    kept, _, held = hold_out_validation(spark, frame, None, fraction=0.2, given=None, seed=3, features_col="features",
                                        label_col="label")
    kept_first = [row.features[0] for row in kept.collect()]
    assert len(kept_first) + len(held.X) == 100 and 0 < len(held.X) < 100
    np.testing.assert_array_equal(held.y, (held.X[:, 0] // 2).astype(int) % 7)
    assert not set(held.X[:, 0].tolist()) & set(kept_first)


def test_a_validation_set_the_run_cannot_use_is_refused_before_any_epoch(spark, digits, tmp_path):
    store_url = "file://" + str(tmp_path / "store")
    X, y = digits.X_train[:200], digits.y_train[:200]
    unknown = np.where(digits.y_test[:50] == 3, 42, digits.y_test[:50])
    for run, validation, message in (("unlabelled", (digits.X_test[:50], None), "has no labels"),
                                     ("unknown", (digits.X_test[:50], unknown), "holds label 42")):
        trained: list[dict] = []
        with pytest.raises(node.InputDataError, match=message):
            node.Trainer(spark, store_url, on_epoch=trained.append,
                         **settings(run_id=run, epochs=1, validation_data=validation)).fit(small_dbn(), X, y)
        assert trained == [] and node.open_run(store_url, run).record["status"] == "failed"
