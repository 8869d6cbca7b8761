"""The three training modes on local[2]: what each promises, checked on real Spark, store and sockets."""

from __future__ import annotations

import glob
import logging
import os
import threading

import numpy as np
import pytest
from support.seed_bounds import assert_at_least

import node
import rbm
import storage
from node.modes._sharing import SparseUpdate, ThresholdAccumulator, UpdateExchange, many_nodes_warning

pytestmark = pytest.mark.slow

# Plain SGD/CD (no momentum): then one node's result is a pure function of the data order and
# the seed, whichever Python worker trains which phase.
NO_MOMENTUM = dict(hidden_layer_sizes=(32, 16), batch_size=10, pretrain_learning_rate=0.1,
                   finetune_learning_rate=0.1, finetune_momentum=0.0, finetune_dropout=0.0, random_state=0,
                   layer_params=[{"momentum": 0.0, "final_momentum": 0.0}] * 2)
SHORT_EPOCHS = {"rbm0": 2, "rbm1": 1, "finetune": 3}


def reports_of(store_url: str, run: str) -> list[dict]:
    return node.open_run(store_url, run).runs.read_metrics()


def test_sync_mode_with_one_node_averaging_after_every_partition_equals_training_in_one_process(
        spark, store_url, digits, one_node_reference):
    X, y, _X_test, _y_test = digits
    reference = one_node_reference(rbm.DBN(**NO_MOMENTUM), X, y, SHORT_EPOCHS, partitions=4)

    trainer = node.Trainer(spark, store_url, run_id="sync-one", mode="sync", averaging_nodes=1,
                           averaging_frequency=1, epochs=SHORT_EPOCHS, partitions=4, progress=False)
    model = trainer.fit(rbm.DBN(**NO_MOMENTUM), X, y)

    # Bit for bit: the node and the reference run the same operations -- the same partitions (C-ordered), the
    # same generators, and the same BLAS thread count (one_node_reference takes the executors'; one thread
    # against two rounded the last bit differently on OpenBLAS's Haswell kernels).
    expected, got = reference.parameters(), model.parameters()
    assert sorted(got) == sorted(expected)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    metrics = reports_of(store_url, "sync-one")
    for phase in SHORT_EPOCHS:  # one node trained each phase (which worker may differ from phase to phase)
        assert len({record["node"] for record in metrics if record["phase"] == phase}) == 1, phase
    assert sum(record["samples"] for record in metrics) == len(X) * sum(SHORT_EPOCHS.values())


def fit_no_more_than_a_point_below_one_process(spark, store_url, digits, dbn_recipe, mode: str, runs: int = 1):
    """Train the shared DBN on two nodes in ``mode`` ``runs`` times (run ids ``<mode>-two``, ``<mode>-two-1``,
    ...), assert their mean accuracy is no more than a point below one process's, and return the first run's model.

    One-sided: a mode that loses what it should keep lands below; since the DBN anneals its fine-tuning
    rate by the phase's plan, one process on this small recipe lands lower (0.9666 on the
    shared split, from 0.975) while sync's two nodes land 0.978 (every run alike), more than a point
    above it -- not what these tests guard against.

    None of the runs warns that the nodes cannot reach each other: a mode that exchanges through the
    store by design counts its merges neither as announced nor as found by listing.
    """
    single_accuracy = dbn_recipe.reference_accuracy(digits)
    accuracies, models = [], []
    for run in range(runs):
        trainer = node.Trainer(spark, store_url, run_id=f"{mode}-two" + (f"-{run}" if run else ""), mode=mode,
                               epochs=dbn_recipe.epochs, partitions=dbn_recipe.partitions, progress=False)
        models.append(trainer.fit(dbn_recipe.make(), digits.X_train, digits.y_train))
        accuracies.append(models[-1].score(digits.X_test, digits.y_test))
        records = [record for summary in trainer.history_ for record in summary["records"]]
        assert not [summary for summary in trainer.history_ if summary.get("reachability_warning")], mode
        assert sum(record["merged_listed"] + record["merged_announced"] for record in records) == 0, mode
    assert_at_least(np.mean(accuracies) - single_accuracy, -0.01,
                    f"{mode}'s mean accuracy on two nodes minus one process's", accuracies)
    return models[0]


@pytest.mark.seed_bound
def test_sync_mode_on_two_nodes_trains_a_dbn_no_more_than_a_point_below_one_process_averaging_every_round(
        spark, store_url, digits, dbn_recipe):
    # Three runs: one run landed 0.967-0.981 against one process's 0.975 (18 runs, before the plan's anneal).
    fit_no_more_than_a_point_below_one_process(spark, store_url, digits, dbn_recipe, "sync", runs=3)
    metrics = reports_of(store_url, "sync-two")
    for phase, epochs in dbn_recipe.epochs.items():
        records = [record for record in metrics if record["phase"] == phase]
        nodes = {record["node"] for record in records}
        assert len(nodes) == 2, (phase, nodes)
        for name in nodes:  # each node trained its half, and averaged with the other after every partition
            own = [record for record in records if record["node"] == name]
            assert len(own) == epochs * dbn_recipe.partitions // 2
            assert all(record["merged_from"] == sorted(nodes - {name}) for record in own), (phase, name)


@pytest.mark.seed_bound
def test_sharing_mode_on_two_nodes_trains_a_dbn_no_more_than_a_point_below_one_process_publishing_sparse_updates(
        spark, store_url, digits, dbn_recipe):
    # Three runs: one run landed 0.964-0.969 against one process's 0.975 (8 runs, before the plan's
    # anneal; once 0.964, 1.1 points short), their mean within the point.
    model = fit_no_more_than_a_point_below_one_process(spark, store_url, digits, dbn_recipe, "sharing", runs=3)

    # What a node sends per partition is a fraction of a full snapshot: measured 3.7x smaller in
    # the RBM phases (the first updates, before the threshold adapted, carry nearly every entry)
    # and 9.4x in fine-tuning, with the default target of 1% of the entries per update.
    metrics = reports_of(store_url, "sharing-two")
    for phase in dbn_recipe.epochs:
        records = [record for record in metrics if record["phase"] == phase]
        assert len({record["node"] for record in records}) == 2, phase
        snapshot_bytes = sum(value.nbytes for value in model.parameters(phase).values())
        sent_bytes = np.mean([record["sent_bytes"] for record in records])
        assert 0 < sent_bytes * 3 < snapshot_bytes, (phase, sent_bytes, snapshot_bytes)
        assert any(record["merged_from"] for record in records), f"no node applied a peer update in {phase}"


def test_the_residual_keeps_exactly_what_the_sparse_updates_did_not_publish():
    rng = np.random.default_rng(0)
    shapes = {"W": (30, 20), "b": (20,)}
    accumulator = ThresholdAccumulator(threshold=1e-3, sparsity=0.05)
    total = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
    published = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
    fractions = []
    for step in range(40):
        change = {name: (rng.normal(0, 0.01, shape) * (1 + step % 3)).astype(np.float32)
                  for name, shape in shapes.items()}
        update = accumulator.add(change)
        for name in shapes:
            total[name] += change[name]
            published[name] += update.dense(shapes)[name]
        fractions.append(update.entries / 620)
        for name in shapes:  # published + residual == everything this node changed
            np.testing.assert_allclose(published[name] + accumulator.residual[name], total[name], atol=1e-5)
    assert fractions[0] > 0.5  # the first threshold is far too low ...
    assert 0.05 / 3 < np.mean(fractions[-20:]) < 0.05 * 3  # ... and it adapted to the target


def test_a_peer_update_is_applied_exactly_once_even_when_the_store_lists_it_again(tmp_path):
    store = storage.open_store(str(tmp_path / "store"))
    key = b"k" * 32
    sender = UpdateExchange(store, "r1", key, "node-a")
    receiver = UpdateExchange(store, "r1", key, "node-b")
    first, retried = SparseUpdate(0.5, {"W": np.array([1, -4], np.int32)}), SparseUpdate(0.5, {"W": np.array([2], np.int32)})
    second = SparseUpdate(0.25, {"W": np.array([-1], np.int32)})
    sender.publish("rbm0", 1, first)
    sender.publish("rbm0", 1, retried)  # seq 1 again, other content (a retried task)
    sender.publish("rbm0", 2, second)
    forged = SparseUpdate(9.0, {"W": np.array([3], np.int32)}).encode()
    store.write_bytes(f"runs/r1/updates/rbm0/node-a/00000003-{storage.sha256_hex(forged)}-{'0' * 64}.npz", forged)

    params = {"W": np.zeros((2, 2), np.float32)}
    for _listing in range(3):  # the same files, listed three times
        for _peer, _seq, update, _size in receiver.receive("rbm0", SparseUpdate.size_bound({"W": (2, 2)})):
            update.apply_to(params)
    assert sorted((peer, seq) for _phase, peer, seq in receiver.applied) == [("node-a", 1), ("node-a", 2)]
    assert len(receiver.refused) == 1  # the forged update, never applied
    shapes = {"W": (2, 2)}
    once = [one.dense(shapes)["W"] + second.dense(shapes)["W"] for one in (first, retried)]
    assert any(np.array_equal(params["W"], expected) for expected in once), params["W"]


def _started(record: dict) -> float:
    return record["time"] - record["task_s"]


def test_with_one_node_slowed_3x_async_gives_the_fast_node_most_partitions_and_sync_waits_for_the_slow_one(
        spark, store_url, digits):
    X, y, _X_test, _y_test = digits
    X, y = np.tile(X, (12, 1)), np.tile(y, 12)  # partitions long enough that training, not bookkeeping, sets a node's pace
    recipe = dict(hidden_layer_sizes=(400,), batch_size=10, random_state=0)
    epochs = {"rbm0": 2, "finetune": 0}
    by_mode = {}
    for mode in ("async", "sync"):
        node.Trainer(spark, store_url, run_id=f"straggler-{mode}", mode=mode, epochs=epochs, partitions=8,
                     straggler_factor=3.0, progress=False).fit(rbm.DBN(**recipe), X, y)
        by_mode[mode] = [record for record in reports_of(store_url, f"straggler-{mode}")
                         if record["phase"] == "rbm0"]

    for mode, records in by_mode.items():  # one node, the same in every partition it trained, was slowed
        slow = {record["node"] for record in records if record["slowed_s"] > 0}
        assert len(slow) == 1, (mode, slow)
        assert all(record["slowed_s"] > 0 for record in records if record["node"] in slow)
        for epoch in range(epochs["rbm0"]):  # every partition of every epoch trained, once
            assert sorted(record["partition"] for record in records if record["epoch"] == epoch) == list(range(8))
        # Two nodes trained side by side (over the run, idle Python workers may take turns): in sync every
        # epoch; in async the first only -- a later epoch's two tasks may both run in the fast node's worker,
        # the slow one still busy with the epoch before (its one partition left to whoever starts its task).
        for epoch in range(epochs["rbm0"] if mode == "sync" else 1):
            assert len({record["node"] for record in records if record["epoch"] == epoch}) == 2, (mode, epoch)

    records = by_mode["async"]
    slow = next(record["node"] for record in records if record["slowed_s"] > 0)
    fast_count = sum(record["node"] != slow for record in records)
    assert fast_count > len(records) - fast_count, (fast_count, len(records))  # nobody waited for the slow node

    slow = next(record["node"] for record in by_mode["sync"] if record["slowed_s"] > 0)
    slow_epochs = {record["epoch"] for record in by_mode["sync"] if record["node"] == slow}
    records = sorted((record for record in by_mode["sync"] if record["epoch"] in slow_epochs), key=_started)
    fast = [record for record in records if record["node"] != slow]
    slowed = [record for record in records if record["node"] == slow]
    assert len(fast) == len(slowed)  # sync: every node trains the same share ...
    for later, earlier in zip(fast[1:], slowed[:-1]):  # ... and starts a round only after the slow one ended its last
        assert _started(later) >= _started(earlier) + earlier["train_s"] + earlier["slowed_s"], (later, earlier)


def test_an_epoch_no_node_trained_every_partition_of_ends_the_fit_with_an_error_naming_them(spark, store_url, digits):
    # A process that is no node of the fit claims partition 1 of the last epoch before any node can:
    # nobody trains it (a claim is an exclusive create); the epoch is not recorded, the fit never "done".
    X, y, _X_test, _y_test = digits
    claims = os.path.join(store_url[len("file://"):], "runs", "forged-claim", "claims")
    done = threading.Event()

    def forge() -> None:
        while not done.wait(0.002):
            phases = glob.glob(os.path.join(claims, "*", "train"))
            if phases:
                with open(os.path.join(phases[0], "0002-00001"), "x") as handle:
                    handle.write("7 intruder claimed")
                return

    forger = threading.Thread(target=forge, daemon=True)
    forger.start()
    summaries = []
    try:
        with pytest.raises(node.TrainingError, match=r"train epoch 3: no node of the fit trained partition\(s\) \[1\]"):
            node.Trainer(spark, store_url, run_id="forged-claim", mode="async", epochs={"train": 3}, partitions=4,
                         progress=False, on_epoch=summaries.append).fit(small_conv_net(), X, y)
    finally:
        done.set()
        forger.join()

    assert len(summaries) == 2  # epochs 1 and 2 recorded, not 3
    record = node.open_run(store_url, "forged-claim").record
    assert record["status"] == "failed" and record["steps"]["train"]["epochs_done"] == 2
    trained = [record["partition"] for record in reports_of(store_url, "forged-claim") if record["epoch"] == 2]
    assert sorted(trained) == [0, 2, 3]


def test_with_one_node_slowed_3x_sharing_lets_the_fast_node_take_the_partitions_the_slow_one_has_not_started(
        spark, store_url, digits):
    X, y, _X_test, _y_test = digits
    X, y = np.tile(X, (12, 1)), np.tile(y, 12)  # partitions long enough that training sets a node's pace
    epochs = {"rbm0": 3, "finetune": 0}
    node.Trainer(spark, store_url, run_id="straggler-sharing", mode="sharing", epochs=epochs, partitions=8,
                 straggler_factor=3.0, progress=False).fit(rbm.DBN(hidden_layer_sizes=(400,), batch_size=10,
                                                                    random_state=0), X, y)
    records = [record for record in reports_of(store_url, "straggler-sharing") if record["phase"] == "rbm0"]

    # Each partition of each epoch trained exactly once, by one of the two nodes.
    assert sorted((record["epoch"], record["partition"]) for record in records) == [
        (epoch, partition) for epoch in range(3) for partition in range(8)]
    slow = {record["node"] for record in records if record["slowed_s"] > 0}
    assert len(slow) == 1 and len({record["node"] for record in records}) == 2, slow
    fast = [record for record in records if record["node"] not in slow]
    assert len(fast) > len(records) - len(fast), len(fast)  # dealt half each, the fast node trained most ...
    stolen = [record for record in fast if record["stolen"]]
    assert stolen and stolen[0]["data_read_bytes"] > 0  # ... taking partitions of the slow one's, from the store
    assert not any(record["stolen"] for record in records if record["node"] in slow)
    run_folder = store_url.removeprefix("file://") + "/runs/straggler-sharing"
    assert not {"claims", "blocks"} & set(os.listdir(run_folder))  # the fit's work folders are gone


def small_conv_net(seed: int = 0) -> rbm.ConvNet:
    """A LeNet in miniature (conv, pool, dense) for the 8x8 digits."""
    layers = [{"type": "conv", "filters": 8, "kernel": 3, "padding": 1, "activation": "relu"},
              {"type": "maxpool", "size": 2}, {"type": "dense", "units": 32, "activation": "relu"}]
    return rbm.ConvNet(layers=layers, input_shape=(1, 8, 8), n_classes=10, learning_rate=0.05, batch_size=32,
                       random_state=seed)


@pytest.mark.seed_bound
def test_a_conv_net_learns_in_every_mode_at_least_as_well_as_one_process_give_or_take_two_points(spark, store_url, digits,
                                                                          one_node_reference):
    # The median over seven seeds, 10 epochs (near the plateau). Measured on a quiet 2-core machine (8 runs
    # per mode and seed, seeds 0-4): one process 0.950-0.972 by seed (median 0.958); each mode's runs
    # 0.94-0.98, and async's and sync's (their learning rates doubled for two nodes) land 3-6 points low in
    # about one run in ten (0.922-0.936 here; 0.9025 once on CI's host): a mean over two seeds failed on that
    # one run; the median of five needed three such runs to fail (about 1 in 120 per mode), of seven it
    # needs four (about 1 in 370).
    X, y, X_test, y_test = digits
    epochs, seeds = {"train": 10}, range(7)
    single = np.median([one_node_reference(small_conv_net(seed), X, y, epochs, partitions=4, seed=seed)
                        .score(X_test, y_test) for seed in seeds])
    for mode in node.MODE_NAMES:
        accuracies = [node.Trainer(spark, store_url, run_id=f"conv-{mode}-{seed}", mode=mode, epochs=epochs,
                                   partitions=4, seed=seed, progress=False).fit(small_conv_net(seed), X, y)
                      .score(X_test, y_test) for seed in seeds]
        assert_at_least(np.median(accuracies) - single, -0.02,
                        f"{mode}'s median accuracy minus one process's, seeds 0-6", accuracies)
        assert node.open_run(store_url, f"conv-{mode}-0").record["settings"]["mode"] == mode


@pytest.mark.parametrize("mode", ["sync", "sharing"])
def test_a_mode_that_trains_a_phase_in_one_job_validates_only_its_last_epoch(spark, store_url, digits, mode):
    # Their nodes went on from the earlier epochs within the job: what the store holds is the last
    # epoch's weights, which every epoch was validated on before (six equal figures in run.json).
    X, y, X_test, y_test = digits
    trainer = node.Trainer(spark, store_url, run_id=f"validated-{mode}", mode=mode, epochs={"rbm0": 1, "finetune": 4},
                           partitions=4, validation_fraction=0.2, progress=False)
    model = trainer.fit(rbm.DBN(hidden_layer_sizes=(16,), random_state=0), X, y)
    finetune = [summary for summary in trainer.history_ if summary["phase"] == "finetune"]
    assert ["validation" in summary for summary in finetune] == [False, False, False, True]
    record = node.open_run(store_url, f"validated-{mode}").record
    assert [entry["epoch"] for entry in record["steps"]["finetune"]["validation"]] == [3]
    assert finetune[-1]["validation"]["val_accuracy"] > 0.5 and model.score(X_test, y_test) > 0.5


def test_sharing_on_more_nodes_than_it_was_seen_to_work_on_warns_once_naming_async(spark, store_url, digits, caplog):
    X, y, _, _ = digits
    with caplog.at_level(logging.WARNING, logger="node"):
        node.Trainer(spark, store_url, run_id="sharing-five", mode="sharing", averaging_nodes=5, partitions=5,
                     epochs={"rbm0": 1, "finetune": 1}, progress=False).fit(rbm.DBN(hidden_layer_sizes=(8,)), X, y)
    warned = [record.getMessage() for record in caplog.records if "mode 'sharing' on" in record.getMessage()]
    assert len(warned) == 1 and "on 5 nodes" in warned[0] and "mode='async'" in warned[0]  # once per fit
    assert many_nodes_warning(4) is None


def test_the_cli_and_the_spark_ml_estimator_pass_the_mode_on(spark, store_url, digits):
    from pyspark.ml.linalg import Vectors

    from node.cli import _train_inputs, build_parser

    options = vars(build_parser().parse_args(["train", "--mode", "sharing"]))
    assert _train_inputs.training_settings(options, rbm.DBN()).mode == "sharing"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--mode", "bulk"])

    X, y, _X_test, _y_test = digits
    frame = spark.createDataFrame([(Vectors.dense(row.tolist()), int(label)) for row, label in zip(X[:200], y[:200])],
                                  ["features", "label"])
    classifier = node.DBNClassifier(hiddenLayerSizes=[16], pretrainEpochs=1, finetuneEpochs=1, batchSize=10,
                                    storeUrl=store_url, numPartitions=2, progress=False, trainingMode="sync")
    fitted = classifier.fit(frame)
    assert node.open_run(store_url, fitted.getRunId()).record["settings"]["mode"] == "sync"
