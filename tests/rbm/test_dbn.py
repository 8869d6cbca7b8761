"""The DBN: accuracy on held-out digits, its phases, per-phase parameters, specs and configs."""

import json
import re
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPClassifier
from threadpoolctl import threadpool_limits

from rbm import DBN, RBM, load_model, model_from_spec, spec_for_batch_size
from rbm.boltzmann import _cd, _finetune
from rbm.datasets import load_digits01, load_digits28, shift_images
from support.seed_bounds import assert_at_least


@pytest.fixture(scope="module")
def digits():
    return load_digits01()


def small_dbn(**settings):
    base = dict(hidden_layer_sizes=(32, 16), pretrain_epochs=2, finetune_epochs=3, random_state=0)
    return DBN(**{**base, **settings})


@pytest.mark.slow
@pytest.mark.seed_bound
def test_dbn_with_default_settings_matches_a_plain_mlp_and_reaches_98_percent_on_held_out_digits():
    # The defaults (fine-tuning epochs, learning rate, dropout) were tuned on a validation
    # split carved from the training part of split 0; asserted here on splits 1-6.
    ours, mlp = [], []
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for seed in range(6):
            split = load_digits01(random_state=seed + 1)
            dbn = DBN(hidden_layer_sizes=(256, 256), random_state=seed).fit(split.X_train, split.y_train)
            ours.append(dbn.score(split.X_test, split.y_test))
            reference = MLPClassifier((256, 256), max_iter=500, random_state=seed).fit(split.X_train, split.y_train)
            mlp.append(reference.score(split.X_test, split.y_test))
    # Measured on OpenBLAS's SkylakeX kernels: DBN 0.986, 0.983, 0.992, 0.992, 0.994, 0.983 (mean 0.988, median
    # 0.989); on its Haswell kernels: 0.989, 0.983, 0.992, 0.992, 0.994, 0.983 (mean 0.989, median 0.990); the MLP
    # 0.989, 0.981, 0.992, 0.986, 0.994, 0.978 on both (mean 0.987).  DBN minus MLP per split: -0.3 to +0.6 points,
    # mean +0.1 or +0.2 (sd of a mean of six about 0.13 points): "the DBN's mean not below the MLP's" was about
    # one sd from failing, so the bound is now half a point below it (4 sd); the median stood 0.4-0.5 point (2 sd)
    # above the former 0.985, now 0.98.  A DBN that fine-tunes badly falls well below both.  (Those DBN figures
    # predate fit's anneal and dropout ramp; with them: mean 0.9893, median 0.9916.)
    assert_at_least(np.median(ours), 0.98, "median DBN accuracy, splits 1-6", ours)
    assert_at_least(np.mean(ours) - np.mean(mlp), -0.005, "mean DBN minus mean MLP accuracy, splits 1-6",
                    np.subtract(ours, mlp))


def test_fit_runs_exactly_the_per_phase_steps_of_train_partition_but_for_its_anneal_and_dropout_ramp(digits, numerics):
    # fit lowers the fine-tuning rate over its last epochs and ramps dropout up over its first (it plans its
    # epochs; train_partition does not): without them, the very same steps.
    X, y = numerics.arrange(digits.X_train[:400]), digits.y_train[:400]
    unplanned = dict(finetune_anneal_fraction=0.0, finetune_dropout_ramp_epochs=0.0)
    fitted = small_dbn(**unplanned).fit(X, y)
    stepped = small_dbn(**unplanned).initialize(64, classes=np.unique(y))
    for phase in stepped.phases():
        epochs = stepped.finetune_epochs if phase == "finetune" else stepped.pretrain_epochs
        for _ in range(epochs):
            result = stepped.train_partition(X, y if phase == "finetune" else None, phase, stepped._rng)
            assert result["samples"] == 400 and np.isfinite(result["loss"])
    for name, value in fitted.parameters().items():
        np.testing.assert_array_equal(stepped.parameters()[name], value, err_msg=name)


def test_fit_lowers_the_fine_tuning_rate_linearly_to_zero_over_the_last_half_of_its_updates(digits):
    X, y = digits.X_train[:400], digits.y_train[:400]  # 4 minibatches of 100 per epoch
    model = small_dbn(pretrain_epochs=0, finetune_epochs=2, batch_size=100, finetune_lr_decay=0.5)
    rates = []
    model.set_minibatch_hook(lambda: rates.append(model._updater.learning_rate))  # the rate of the step just taken
    model.fit(X, y)
    # Fit progress 0, 1/8, ..., 7/8: the rate of epoch t is 0.1 / (1 + 0.5 t) * min(1, (1 - progress) / 0.5).
    falling = (1.0, 0.75, 0.5, 0.25)
    np.testing.assert_allclose(rates, [0.1] * 4 + [0.1 / 1.5 * factor for factor in falling], rtol=1e-12)
    rates.clear()
    model.finetune(X, y)  # finetune plans its own epochs: annealed alike, at the decay's epochs 2 and 3
    np.testing.assert_allclose(rates, [0.05] * 4 + [0.1 / 2.5 * factor for factor in falling], rtol=1e-12)
    rates.clear()
    model.train_partition(X, y, "finetune", np.random.default_rng(0))  # how many passes follow is unknown
    np.testing.assert_allclose(rates, [0.1 / 3.0] * 4, rtol=1e-12)


def test_train_partition_placed_in_the_fits_plan_takes_the_fits_very_steps_anneal_and_dropout_ramp_included(
        digits, numerics):
    # The distributed trainer places each partition in the phase's plan (set_schedule_plan): one partition
    # per epoch, placed at its epoch of the three planned, steps as fit does -- the rate annealed over the
    # last half, dropout ramped over the first 2 epochs (0, 0.15, 0.3) -- to the last bit.
    X, y = numerics.arrange(digits.X_train[:400]), digits.y_train[:400]
    planned = dict(finetune_dropout_ramp_epochs=2.0)
    fitted = small_dbn(**planned).fit(X, y)
    stepped = small_dbn(**planned).initialize(64, classes=np.unique(y))
    for phase in stepped.phases():
        epochs = stepped.finetune_epochs if phase == "finetune" else stepped.pretrain_epochs
        for epoch in range(epochs):
            stepped.set_schedule_plan(epochs, epoch, 1.0)  # the pretraining phases plan nothing: the same steps
            stepped.train_partition(X, y if phase == "finetune" else None, phase, stepped._rng)
    for name, value in fitted.parameters().items():
        np.testing.assert_array_equal(stepped.parameters()[name], value, err_msg=name)


def test_a_placed_partition_anneals_at_its_place_in_the_epoch_and_past_the_plan_its_rate_stays_zero(digits):
    # Two partitions of 200 rows an epoch, 2 planned epochs, minibatches of 100: the same rates as fit's
    # (test above: 0.1 for the first half, then 0.1 / 1.5 times 1, 0.75, 0.5, 0.25), partition by partition.
    X, y = digits.X_train[:400], digits.y_train[:400]
    model = small_dbn(pretrain_epochs=0, finetune_epochs=2, batch_size=100, finetune_lr_decay=0.5)
    model.initialize(64, classes=np.unique(y))
    rates = []
    model.set_minibatch_hook(lambda: rates.append(model._updater.learning_rate))
    for epoch in range(2):
        model.set_schedule_epoch(epoch)
        for index, rows in enumerate((slice(0, 200), slice(200, 400))):
            model.set_schedule_plan(2, epoch + index / 2, 0.5)
            model.train_partition(X[rows], y[rows], "finetune", np.random.default_rng(index))
    np.testing.assert_allclose(rates, [0.1] * 4 + [0.1 / 1.5 * factor for factor in (1.0, 0.75, 0.5, 0.25)],
                               rtol=1e-12)
    rates.clear()
    model.set_schedule_plan(2, 2.0, 0.5)  # a task past the plan (never dealt so; the factor clamps at 0)
    model.train_partition(X[:200], y[:200], "finetune", np.random.default_rng(0))
    assert rates == [0.0, 0.0]
    rates.clear()
    model.set_schedule_plan(None)  # no plan: the constant rate of the decay alone (at the clock's epoch 1)
    model.train_partition(X[:200], y[:200], "finetune", np.random.default_rng(0))
    np.testing.assert_allclose(rates, [0.1 / 1.5] * 2, rtol=1e-12)
    for bad in ((0, 0.0, 1.0), (2.5, 0.0, 1.0), (2, -1.0, 1.0), (2, 0.0, 0.0), (2, 0.0, 1.5), (2, float("nan"), 1.0),
                (True, 0.0, 1.0)):
        with pytest.raises(ValueError, match="set_schedule_plan takes planned_epochs >= 1"):
            model.set_schedule_plan(*bad)


SHIFTS_3X3 = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]


@pytest.mark.seed_bound
def test_a_fit_of_few_epochs_over_many_rows_keeps_its_accuracy_over_sixteen_seeds():
    # A fit plans its fine-tuning: the rate anneals over its last epochs and dropout ramps up over its first.
    # Without them a fit of a few epochs over many rows loses a point: DBN(64, 64) on 12.9k rows of digits28,
    # 1 + 2 epochs.  Scored on the held-out images in the training's nine shifts (3,231 rows: half the
    # per-seed spread of the 359 originals, where the two kernel families' means differed by 0.004), mean
    # over seeds 0-15, one BLAS thread (scripts/check-seed-bounds):
    #   SkylakeX kernels: 0.9633 (sd of the mean 0.0007); without the ramp 0.9520, without the anneal 0.9516
    #   Haswell kernels:  0.9613 (0.0007);                without the ramp 0.9515, without the anneal 0.9533
    # The bound lies 5 sd of the mean below the lower family and 3.5 sd above the highest ablation.
    split = load_digits28(shifts=SHIFTS_3X3)
    X_test = shift_images(split.X_test.reshape(-1, 28, 28), SHIFTS_3X3).reshape(len(split.X_test) * 9, -1)
    y_test = np.tile(split.y_test, 9)
    with threadpool_limits(1):
        models = [DBN((64, 64), pretrain_epochs=1, finetune_epochs=2, random_state=seed) for seed in range(16)]
        scores = [model.fit(split.X_train, split.y_train).score(X_test, y_test) for model in models]
    assert_at_least(np.mean(scores), 0.9575, "mean accuracy on the shifted held-out images, seeds 0-15", scores)


def test_a_fit_ramps_dropout_up_over_its_first_epochs_and_train_partition_drops_the_full_share(digits):
    model = small_dbn(finetune_dropout=0.4, finetune_dropout_ramp_epochs=4)
    assert [model._dropout(epoch) for epoch in (0, 1, 2, 4, 9)] == pytest.approx([0.0, 0.1, 0.2, 0.4, 0.4])
    assert model._dropout(None) == 0.4  # train_partition's without a plan: the full share
    assert small_dbn(finetune_dropout=0.4, finetune_dropout_ramp_epochs=0)._dropout(0) == 0.4
    # What fit does with it: its first epoch drops nothing, the very weights of a fit without dropout.
    X, y = digits.X_train[:300], digits.y_train[:300]
    first = {ramp: small_dbn(finetune_epochs=1, finetune_dropout_ramp_epochs=ramp).fit(X, y).parameters("finetune")
             for ramp in (10, 0)}
    plain = small_dbn(finetune_epochs=1, finetune_dropout=0.0).fit(X, y).parameters("finetune")
    for name, value in plain.items():
        np.testing.assert_array_equal(first[10][name], value, err_msg=name)
    assert not np.array_equal(first[0]["out.W"], plain["out.W"])


def test_verbose_fit_prints_a_line_per_layer_pass_and_fine_tuning_epoch_and_nothing_without_it(digits, capsys):
    X, y = digits.X_train[:200], digits.y_train[:200]
    small_dbn().fit(X, y)
    small_dbn(verbose=True).train_partition(X, None, "rbm0", np.random.default_rng(0))  # an executor's pass
    assert capsys.readouterr().out == ""
    model = small_dbn(verbose=1).fit(X, y)
    lines = capsys.readouterr().out.splitlines()
    number, time_s = r"\d+\.\d{6}", r"time = \d+\.\d\ds"
    expected = [rf"\[DBN rbm{k}\] Iteration {i}, reconstruction error = {number}, {time_s}"
                for k in (0, 1) for i in (1, 2)]
    expected += [rf"\[DBN finetune\] Iteration {i}, loss = {number}, {time_s}" for i in (1, 2, 3)]
    assert len(lines) == len(expected), lines
    for line, pattern in zip(lines, expected):
        assert re.fullmatch(pattern, line), (line, pattern)
    model.set_params(early_stopping=True, finetune_epochs=1).finetune(X, y)
    assert re.fullmatch(rf"\[DBN finetune\] Iteration 1, loss = {number}, validation score = \d\.\d{{4}}, {time_s}",
                        capsys.readouterr().out.strip())


def test_a_pretraining_phase_samples_from_the_partitions_generator_not_the_replicas_seed(digits):
    """As an RBM's replicas do (tests/rbm/test_rbm.py): two nodes of one spec do not share a sampler stream."""
    X = np.repeat(digits.X_train[:1], 10, axis=0)  # one minibatch of one row ten times: no order to it
    weights = []
    for partition_seed in (1, 1, 2):
        model = DBN(hidden_layer_sizes=(12,), batch_size=10, random_state=0).initialize(64, classes=np.arange(10))
        model.train_partition(X, None, "rbm0", np.random.default_rng(partition_seed))
        weights.append(model.parameters("rbm0")["rbm0.W"])
    np.testing.assert_array_equal(weights[0], weights[1])
    assert not np.array_equal(weights[0], weights[2])


def test_phases_name_each_layer_then_finetune_and_parameters_are_filtered_by_phase(digits):
    model = small_dbn().fit(digits.X_train[:200], digits.y_train[:200])
    assert model.phases() == ["rbm0", "rbm1", "finetune"]
    assert sorted(model.parameters("rbm1")) == ["rbm1.W", "rbm1.hbias", "rbm1.vbias"]
    assert sorted(model.parameters("finetune")) == [
        "out.W", "out.b", "rbm0.W", "rbm0.hbias", "rbm1.W", "rbm1.hbias"
    ]
    assert len(model.parameters()) == 8
    assert model.parameters("rbm0")["rbm0.W"].shape == (64, 32)
    assert model.parameters("finetune")["out.W"].shape == (16, 10)


def test_training_one_phase_changes_only_that_phases_parameters(digits):
    model = small_dbn().initialize(64, classes=10)
    before = model.parameters()
    model.train_partition(digits.X_train[:100], None, "rbm1", np.random.default_rng(0))
    after = model.parameters()
    changed = sorted(name for name in before if not np.array_equal(before[name], after[name]))
    assert changed == ["rbm1.W", "rbm1.hbias", "rbm1.vbias"]


def test_distributed_style_training_over_partitions_learns_digits(digits):
    model = DBN(hidden_layer_sizes=(64,), random_state=0).initialize(64, classes=10)
    partitions = np.array_split(np.arange(len(digits.X_train)), 4)
    rng = np.random.default_rng(0)
    for phase, epochs in (("rbm0", 5), ("finetune", 10)):
        for _ in range(epochs):
            for rows in partitions:
                labels = digits.y_train[rows] if phase == "finetune" else None
                model.train_partition(digits.X_train[rows], labels, phase, rng)
    # Measured: 0.950 (0.942 with seed 1); lr decay counts partition passes here.
    assert model.score(digits.X_test, digits.y_test) > 0.92


def test_set_parameters_round_trips_through_a_replica(digits):
    model = small_dbn().fit(digits.X_train[:200], digits.y_train[:200])
    replica = DBN.from_spec(model.to_spec()).initialize(64, classes=model.classes_)
    replica.set_parameters(model.parameters())
    np.testing.assert_array_equal(replica.predict_proba(digits.X_test), model.predict_proba(digits.X_test))
    with pytest.raises(ValueError, match="unknown DBN parameter name"):
        replica.set_parameters({"rbm7.W": np.zeros((2, 2))})
    with pytest.raises(ValueError, match="shape"):
        replica.set_parameters({"out.b": np.zeros(3)})


def test_early_stopping_keeps_the_best_validation_weights_and_stops(digits):
    model = small_dbn(hidden_layer_sizes=(64,), finetune_epochs=60, early_stopping=True, n_iter_no_change=3,
                      validation_fraction=0.2)
    model.fit(digits.X_train, digits.y_train)
    assert model._finetune_epochs_done < 60
    assert model.score(digits.X_test, digits.y_test) > 0.9


def test_spec_from_json_and_yaml_config_files_builds_the_same_model(tmp_path):
    spec = {"kind": "dbn", "hidden_layer_sizes": [20, 10], "pretrain_epochs": 1, "finetune_epochs": 2,
            "layer_params": [{"learning_rate": 0.01, "cd_k": 2}, None], "random_state": 3}
    (tmp_path / "dbn.json").write_text(json.dumps(spec))
    (tmp_path / "dbn.yaml").write_text(
        "kind: dbn\nhidden_layer_sizes: [20, 10]\npretrain_epochs: 1\nfinetune_epochs: 2\n"
        "layer_params:\n  - {learning_rate: 0.01, cd_k: 2}\n  - null\nrandom_state: 3\n"
    )
    from_json = DBN.from_config(tmp_path / "dbn.json")
    from_yaml = DBN.from_config(tmp_path / "dbn.yaml")
    assert from_json.to_spec() == from_yaml.to_spec()
    assert from_json.hidden_layer_sizes == (20, 10)
    model = from_json.initialize(64, classes=10)
    assert model.layers_[0].learning_rate == 0.01 and model.layers_[0].cd_k == 2
    assert model.layers_[1].learning_rate == model.pretrain_learning_rate
    assert json.loads(json.dumps(model.to_spec())) == model.to_spec()


def test_config_with_unknown_keys_or_bad_syntax_is_rejected(tmp_path):
    (tmp_path / "typo.json").write_text(json.dumps({"hidden_layer_size": [10]}))
    with pytest.raises(ValueError, match="unknown DBN hyperparameters.*hidden_layer_size"):
        DBN.from_config(tmp_path / "typo.json")
    (tmp_path / "broken.yaml").write_text("hidden_layer_sizes: [10\n")
    with pytest.raises(ValueError, match="cannot parse config .*broken.yaml.* as YAML"):
        DBN.from_config(tmp_path / "broken.yaml")
    with pytest.raises(ValueError, match=r"layer_params\[0\] has unknown keys \['n_components'\]"):
        DBN(hidden_layer_sizes=(4,), layer_params=[{"n_components": 3}]).initialize(8)


def test_transform_gives_the_top_hidden_layer_and_save_load_is_exact(digits, tmp_path):
    model = small_dbn().fit(digits.X_train[:300], digits.y_train[:300])
    assert model.transform(digits.X_test).shape == (len(digits.X_test), 16)
    model.save(tmp_path / "dbn.npz")
    loaded = load_model(tmp_path / "dbn.npz")
    np.testing.assert_array_equal(loaded.classes_, model.classes_)
    np.testing.assert_array_equal(loaded.predict_proba(digits.X_test), model.predict_proba(digits.X_test))
    np.testing.assert_array_equal(loaded.transform(digits.X_test), model.transform(digits.X_test))


def test_partial_fit_is_one_fine_tuning_pass_from_the_pretrained_layers_and_learns_over_passes(digits):
    X, y = digits.X_train, digits.y_train
    pretrained = DBN(hidden_layer_sizes=(64,), pretrain_epochs=3, finetune_learning_rate=1e-7,
                     random_state=0).pretrain(X)
    before = pretrained.parameters("rbm0")["rbm0.W"]
    pretrained.partial_fit(X[:100], y[:100], classes=np.unique(y))
    # Fine-tuned from the pretrained weights (a re-initialized layer would differ by ~0.1), one pass only:
    np.testing.assert_allclose(pretrained.parameters("rbm0")["rbm0.W"], before, atol=1e-4)
    assert pretrained._finetune_epochs_done == 1
    pretrained.set_params(finetune_learning_rate=0.1)
    for _ in range(6):
        for start in range(0, len(X), 200):
            assert pretrained.partial_fit(X[start:start + 200], y[start:start + 200]) is pretrained
    assert pretrained.score(digits.X_test, digits.y_test) > 0.9  # 0.930 here; 0.93-0.97 over six seeds and splits


def test_partial_fit_asks_for_the_classes_once_and_refuses_others_later(digits):
    X, y = digits.X_train[:50], digits.y_train[:50]
    model = small_dbn()
    with pytest.raises(ValueError, match="pass classes .* on the first call"):
        model.partial_fit(X, y)
    model.partial_fit(X, y, classes=range(10))
    with pytest.raises(ValueError, match="classes \\[0, 1, 2\\] differ from the classes of the first call"):
        model.partial_fit(X, y, classes=[0, 1, 2])
    with pytest.raises(ValueError, match="outside the class range"):
        model.partial_fit(X[:2], [3, 11])


def test_labels_outside_the_class_range_are_rejected_with_the_row(digits):
    model = small_dbn().initialize(64, classes=10)
    y = digits.y_train[:50].copy()
    y[7] = 10
    with pytest.raises(ValueError, match="label 10 at row 7, outside the class range"):
        model.train_partition(digits.X_train[:50], y, "finetune", np.random.default_rng(0))
    with pytest.raises(ValueError, match="needs labels"):
        model.train_partition(digits.X_train[:50], None, "finetune", np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown phase 'rbm5'"):
        model.train_partition(digits.X_train[:50], None, "rbm5", np.random.default_rng(0))


def test_finetune_phase_before_classes_are_known_says_what_to_do(digits):
    model = small_dbn().initialize(64)
    with pytest.raises(ValueError, match="initialize\\(n_features, classes\\)"):
        model.train_partition(digits.X_train[:20], digits.y_train[:20], "finetune", np.random.default_rng(0))


def test_fine_tuning_gradients_with_dropout_match_central_finite_differences():
    rng = np.random.default_rng(0)
    X, labels = rng.random((5, 6)), np.array([0, 2, 1, 2, 0])
    weights = [rng.normal(0, 0.5, (6, 4)), rng.normal(0, 0.5, (4, 3))]
    biases = [rng.normal(0, 0.1, 4), rng.normal(0, 0.1, 3)]
    out_W, out_b = rng.normal(0, 0.5, (3, 3)), rng.normal(0, 0.1, 3)

    def run():  # the same dropout masks every time: a fresh generator with a fixed seed
        generator = _cd.device_generator(np.random.default_rng(7), np)
        inputs, activations = _finetune.forward(X, weights, biases, 0.4, generator)
        return inputs, activations, _finetune.cross_entropy_backward(inputs, activations, weights, out_W, out_b, labels)

    inputs, _, (_, grad_W, grad_b, grad_out_W, grad_out_b) = run()
    assert (inputs[1] == 0).any() and (inputs[2] == 0).any()  # some units really were dropped
    analytic = [*grad_W, *grad_b, grad_out_W, grad_out_b]
    for array, grad in zip([*weights, *biases, out_W, out_b], analytic):
        numeric = np.zeros_like(array)
        for index in np.ndindex(array.shape):
            saved = array[index]
            array[index] = saved + 1e-6
            up = float(run()[2][0])
            array[index] = saved - 1e-6
            down = float(run()[2][0])
            array[index] = saved
            numeric[index] = (up - down) / 2e-6
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-9)


def test_learning_rate_scale_multiplies_one_plain_sgd_fine_tuning_step_exactly(digits):
    X, y = digits.X_train[:50].astype(np.float64), digits.y_train[:50]
    model = small_dbn(finetune_momentum=0.0, finetune_dropout=0.0, l2=0.0, batch_size=50, dtype=np.float64)
    model.initialize(64, classes=10)
    model.set_learning_rate_scale(0.3)
    before = model.parameters("finetune")
    order = np.random.default_rng(4).permutation(50)  # the one minibatch, in the order train_partition draws it
    weights, biases = [before["rbm0.W"], before["rbm1.W"]], [before["rbm0.hbias"], before["rbm1.hbias"]]
    inputs, activations = _finetune.forward(X[order], weights, biases)
    _, grad_W, grad_b, grad_out_W, grad_out_b = _finetune.cross_entropy_backward(
        inputs, activations, weights, before["out.W"], before["out.b"], y[order])
    model.train_partition(X, y, "finetune", np.random.default_rng(4))
    after, step = model.parameters("finetune"), model.finetune_learning_rate * 0.3
    grads = {"rbm0.W": grad_W[0], "rbm1.W": grad_W[1], "rbm0.hbias": grad_b[0], "rbm1.hbias": grad_b[1],
             "out.W": grad_out_W, "out.b": grad_out_b}
    for name, grad in grads.items():
        np.testing.assert_array_equal(after[name], before[name] - step * grad, err_msg=name)


def test_a_replica_in_smaller_minibatches_keeps_the_persistent_chains_of_every_layer_and_of_an_rbm():
    # The distributed trainer builds its nodes' replicas from spec_for_batch_size (the scaling rule's
    # smaller minibatch): a persistent layer's negative statistics keep the fit's chains.
    dbn = DBN(hidden_layer_sizes=(6, 4), batch_size=10, layer_params=[{"persistent": True}, None])
    replica = model_from_spec(spec_for_batch_size(dbn.to_spec(), 2)).initialize(8, 3)
    assert [layer.batch_size for layer in replica.layers_] == [2, 2]
    assert replica.layers_[0].h_samples_.shape == (10, 6)  # the fit's 10 chains, in minibatches of 2
    assert not replica.layers_[1].persistent
    assert dbn.layer_params == [{"persistent": True}, None]  # the fit's own spec is untouched
    plain = DBN(hidden_layer_sizes=(6, 4), batch_size=10)  # CD-1 pretraining: only the minibatch changes
    assert spec_for_batch_size(plain.to_spec(), 2) == {**plain.to_spec(), "batch_size": 2}
    lone = model_from_spec(spec_for_batch_size(RBM(4, batch_size=10).to_spec(), 1)).initialize(8)
    assert lone.batch_size == 1 and lone.h_samples_.shape == (10, 4)
    assert spec_for_batch_size(RBM(4, batch_size=10, n_chains=3).to_spec(), 1)["n_chains"] == 3
