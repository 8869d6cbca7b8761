"""Bad input is refused on the driver, with a message naming the problem, before any training."""

from __future__ import annotations

import socket
import warnings

import numpy as np
import pytest
from support.spark_jobs import failed_tasks_since, newest_job

import node
import rbm
import storage
from rbm.datasets import load_digits01

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def some_digits():
    split = load_digits01()
    return split.X_train[:400], split.y_train[:400]


def small_net() -> rbm.ConvNet:
    layers = [{"type": "conv", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
              {"type": "maxpool", "size": 2}, {"type": "dense", "units": 16, "activation": "relu"}]
    return rbm.ConvNet(layers=layers, input_shape=(1, 8, 8), n_classes=10, batch_size=32, random_state=0)


def trainer(spark, store_url: str, **settings) -> node.Trainer:
    settings = {"run_id": "bad", "epochs": 1, "partitions": 2, "progress": False, **settings}
    return node.Trainer(spark, store_url, **settings)


def nothing_trained(store_url: str) -> bool:
    """No weights, no metrics, and no training partition left behind (the job that checks them stores them)."""
    store = storage.open_store(store_url)
    return not any(store.exists(f"runs/bad/{folder}") for folder in ("weights", "metrics", "blocks"))


def test_wrong_feature_width_is_refused_before_training(spark, store_url, some_digits):
    X, y = some_digits
    with pytest.raises(node.InputDataError, match=r"\(63,\).*(1, 8, 8)|63 features"):
        trainer(spark, store_url).fit(small_net(), X[:, :63], y)
    assert nothing_trained(store_url)


def test_a_model_class_instead_of_a_model_is_refused_saying_so(spark, store_url, some_digits):
    X, y = some_digits
    with pytest.raises(TypeError, match=r"fit takes a model, and DBN is its class: give DBN\(...\)"):
        trainer(spark, store_url).fit(rbm.DBN, X, y)
    assert nothing_trained(store_url)


def test_a_model_asking_for_early_stopping_of_its_own_is_told_where_a_distributed_fit_takes_it(spark, store_url,
                                                                                                some_digits):
    X, y = some_digits
    X = X.copy()
    X[3, 5] = np.nan  # refused after the warning: nothing trains
    with pytest.warns(UserWarning, match="the model's early_stopping=True is for its own one-process fit"), \
            pytest.raises(node.InputDataError):
        trainer(spark, store_url).fit(rbm.DBN(hidden_layer_sizes=(8,), early_stopping=True), X, y)


def test_a_model_given_epochs_of_its_own_is_told_what_the_distributed_fit_trains_instead(spark, store_url,
                                                                                           some_digits):
    X, y = some_digits
    X = X.copy()
    X[3, 5] = np.nan  # refused after the warnings: nothing trains
    model = rbm.DBN(hidden_layer_sizes=(8,), pretrain_epochs=2, finetune_epochs=50)
    with pytest.warns(UserWarning) as told, pytest.raises(node.InputDataError):
        trainer(spark, store_url).fit(model, X, y)
    lines = [str(warning.message) for warning in told]
    assert any("the model's pretrain_epochs=2 is for its own one-process fit" in line
               and "(rbm0 1): give epochs={'rbm0': 2} to train 2" in line for line in lines), lines
    assert any("finetune_epochs=50" in line and "(finetune 1): give epochs={'finetune': 50}" in line
               for line in lines), lines
    with warnings.catch_warnings():  # the settings train what the model asks: nothing to say
        warnings.filterwarnings("error", message=".*for its own one-process fit")
        with pytest.raises(node.InputDataError):
            trainer(spark, store_url, epochs={"rbm0": 2, "finetune": 50}).fit(model, X, y)
        with pytest.raises(node.InputDataError):  # the class's own defaults were not asked for
            trainer(spark, store_url).fit(rbm.DBN(hidden_layer_sizes=(8,)), X, y)


def test_nan_in_a_vector_dataframe_names_the_partition_and_row(spark, store_url, some_digits):
    from pyspark.ml.linalg import Vectors

    X, y = some_digits
    X = X[:40].astype(np.float64)
    X[7, 3] = np.nan
    frame = spark.createDataFrame([(Vectors.dense(row), int(label)) for row, label in zip(X, y[:40])],
                                  ["features", "label"]).coalesce(1)
    with pytest.raises(node.InputDataError, match=r"partition \d+ row 7 column 3 holds NaN"):
        trainer(spark, store_url, partitions=1).fit(small_net(), frame)
    assert nothing_trained(store_url)


def test_a_label_outside_the_classes_a_model_fixes_is_named_with_its_partition_and_row(spark, store_url,
                                                                                        some_digits):
    X, y = some_digits
    labels = y.copy()
    labels[5] = 10
    rdd = spark.sparkContext.parallelize(list(zip(X, labels.tolist())), 1)
    model = rbm.DBN(hidden_layer_sizes=(16,), random_state=0).initialize(64, 10)
    with pytest.raises(node.InputDataError, match=r"partition 0 row 5 has label 10, which the model does not know"):
        trainer(spark, store_url, partitions=1).fit(model, rdd)
    assert nothing_trained(store_url)


def test_more_distinct_labels_than_max_classes_is_refused_naming_the_count(spark, store_url, some_digits):
    X, _ = some_digits
    ids = np.arange(len(X)) * 1000  # an id column passed as labels by mistake
    with pytest.raises(node.InputDataError, match=r"\d+ distinct labels, more than max_classes=50"):
        trainer(spark, store_url, max_classes=50).fit(small_net(), X, ids)
    assert nothing_trained(store_url)


def test_a_missing_dataset_url_is_named_in_the_error(spark, store_url, tmp_path):
    url = "file://" + str(tmp_path / "datasets" / "nowhere")
    with pytest.raises(node.InputDataError, match="nowhere"):
        trainer(spark, store_url).fit(small_net(), url)
    assert nothing_trained(store_url)


def test_an_unreachable_store_is_named_in_the_error(spark, some_digits):
    X, y = some_digits
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"hdfs://127.0.0.1:{port}/sparkdbn"
    with pytest.raises(node.StoreAccessError, match=f"127.0.0.1:{port}"):
        trainer(spark, url, store_retry_timeout_s=1.0).fit(small_net(), X, y)


def test_a_dbn_initialized_for_64_features_refuses_63(spark, store_url, some_digits):
    X, y = some_digits
    model = rbm.DBN(hidden_layer_sizes=(16,), random_state=0).initialize(64, 10)
    with pytest.raises(node.InputDataError, match="63 features per sample, the model was initialized for 64"):
        trainer(spark, store_url).fit(model, X[:, :63], y)
    assert nothing_trained(store_url)


def test_a_dbn_with_ten_classes_refuses_label_ten(spark, store_url, some_digits):
    X, y = some_digits
    labels = y.copy()
    labels[3] = 10
    model = rbm.DBN(hidden_layer_sizes=(16,), random_state=0).initialize(64, 10)
    with pytest.raises(node.InputDataError, match=r"row 3 has label 10, not one of the classes"):
        trainer(spark, store_url).fit(model, X, labels)
    assert nothing_trained(store_url)


def test_an_rdd_row_that_is_not_a_feature_row_is_named_without_a_failed_task(spark, store_url, some_digits):
    X, y = some_digits
    rows = list(zip(X, y.tolist()))
    rows[230] = (X[230], int(y[230]), "an extra field")  # 2 partitions of 200: partition 1, row 30
    before = newest_job(spark)
    with pytest.raises(node.InputDataError, match=r"partition 1: row 30 \(a tuple of 3 items\) is neither a "
                                                  r"\(features, label\) pair nor a feature vector"):
        trainer(spark, store_url).fit(small_net(), spark.sparkContext.parallelize(rows, 2))
    assert failed_tasks_since(spark, before) == 0  # refused once, not a task Spark retried until it gave up
    assert nothing_trained(store_url)


def test_image_shaped_samples_for_a_dbn_are_refused_naming_the_shape(spark, store_url, some_digits):
    X, y = some_digits
    model = rbm.DBN(hidden_layer_sizes=(16,), random_state=0)
    with pytest.raises(ValueError, match=r"Found array with dim 3"):
        model.fit(X.reshape(-1, 8, 8), y)  # in process: scikit-learn's refusal
    with pytest.raises(node.InputDataError, match=r"per-sample shape \(8, 8\).*DBN takes flat feature vectors"):
        trainer(spark, store_url).fit(model, X.reshape(-1, 8, 8), y)
    assert nothing_trained(store_url)


def test_an_epochs_dict_naming_a_phase_the_model_does_not_have_is_refused_before_anything(spark, store_url,
                                                                                         some_digits):
    X, y = some_digits
    misspelled = {"rbm0": 1, "fintune": 20}  # would train fine-tuning for default_epochs, silently
    with pytest.raises(node.TrainingError,
                       match=r"epochs names 'fintune', not a phase of this model \(rbm0, finetune\)"):
        trainer(spark, store_url, epochs=misspelled).fit(rbm.DBN(hidden_layer_sizes=(16,), random_state=0), X, y)
    with pytest.raises(node.TrainingError,
                       match=r"epochs names 'rbm0', 'finetune', not a phase of this model \(train\)"):
        trainer(spark, store_url, epochs={"rbm0": 1, "finetune": 2}).fit(small_net(), X, y)
    assert not storage.open_store(store_url).exists("runs/bad")


def test_validation_data_the_model_would_refuse_is_refused_before_training(spark, store_url, some_digits):
    X, y = some_digits
    narrow = (X[:20, :63], y[:20])
    with pytest.raises(node.InputDataError, match=r"validation_data \(20 rows\) has 63 features per sample, the "
                                                  r"training data \(arrays \(400, 64\)\) 64"):
        trainer(spark, store_url, validation_data=narrow).fit(small_net(), X, y)
    assert nothing_trained(store_url)
    holed = X[:20].copy()
    holed[12, 7] = np.nan
    with pytest.raises(node.InputDataError, match=r"validation_data \(20 rows\): X contains NaN or Inf \(first at "
                                                  r"row 12\)"):
        trainer(spark, store_url, validation_data=(holed, y[:20])).fit(small_net(), X, y)
    assert nothing_trained(store_url)
    # Rows of another scale than the training data (raw 0..16 pixels) were scored without a word: a Bernoulli
    # model's validation accuracy 0.86, of rows it would not have trained on.
    raw = X[:20] * 16
    with pytest.raises(node.InputDataError, match=r"validation_data \(20 rows\): row 0 column \d+ holds \d+, outside "
                                                  r"\[0, 1\], the range the model's input takes .*scale it as the "
                                                  r"training data is scaled"):
        trainer(spark, store_url, validation_data=(raw, y[:20])).fit(rbm.DBN(hidden_layer_sizes=(8,)), X, y)
    assert nothing_trained(store_url)
    trainer(spark, store_url, validation_data=(raw, y[:20]), initialize_only=True).fit(small_net(), X, y)  # any input


def test_a_value_that_is_no_number_is_named_by_row_and_column_and_a_frames_column_name(spark, store_url, some_digits):
    # scikit-learn's own error, which the Spark fit passed on, named only the value: "could not convert string
    # to float: 'x'".
    import pandas as pd

    X, y = some_digits
    frame = pd.DataFrame(X, columns=[f"px{i}" for i in range(X.shape[1])]).astype({"px9": str})
    frame.loc[5, "px9"] = "x"
    with pytest.raises(node.InputDataError, match=r"^X row 5 column 9 \('px9'\) holds 'x', not a number"):
        trainer(spark, store_url).fit(small_net(), frame, y)
    rows = X.tolist()
    rows[3][1] = "n/a"
    with pytest.raises(node.InputDataError, match=r"^X row 3 column 1 holds 'n/a', not a number"):
        trainer(spark, store_url).fit(small_net(), rows, y)
    assert nothing_trained(store_url)
    frame.loc[5, "px9"] = "0.5"  # a number written as a string is a number, as scikit-learn takes it
    assert trainer(spark, store_url, initialize_only=True).fit(small_net(), frame, y).n_features_in_ == 64


def test_labels_given_beside_a_dataframe_are_refused_not_ignored(spark, store_url, some_digits):
    X, y = some_digits
    frame = spark.createDataFrame([(row.tolist(), int(label)) for row, label in zip(X[:40], y[:40])],
                                  ["features", "label"])
    with pytest.raises(node.InputDataError, match=r"y must not be given with a DataFrame \(its labels are its "
                                                  r"column 'label'\)"):
        trainer(spark, store_url).fit(small_net(), frame, (y[:40] + 1) % 10)
    assert nothing_trained(store_url)


def test_features_in_separate_columns_are_refused_with_the_way_to_gather_them(spark, store_url, some_digits):
    X, y = some_digits
    columns = [f"pixel{k}" for k in range(X.shape[1])]
    frame = spark.createDataFrame([tuple(map(float, row)) + (int(label),) for row, label in zip(X[:20], y[:20])],
                                  columns + ["label"])
    with pytest.raises(node.InputDataError, match=r"no features column 'features'; its columns are \['pixel0', .*"
                                                  r"'label'\]; gather scalar feature columns into one with "
                                                  r"pyspark.ml.feature.VectorAssembler"):
        trainer(spark, store_url).fit(small_net(), frame)
    assert nothing_trained(store_url)


@pytest.mark.parametrize("name, message", [
    ("n_nodes", "'n_nodes': the number of nodes is not a setting: one node trains in each executor Python worker"),
    ("epoch", "'epoch': did you mean 'epochs'"),
    ("zzz", "'zzz': node.TrainingSettings lists the settings"),
])
def test_an_unknown_training_setting_is_named_with_the_closest_one(name, message):
    with pytest.raises(TypeError, match=f"unknown training setting {message}"):
        node.Trainer(None, "file:///nowhere", **{name: 3})
