"""The nodes' config is derived from the training settings by one declared list of fields."""

import dataclasses

import numpy as np

from node._contract import NodeConfig
from node.data import PreparedData
from node.driver import TrainingSettings
from node.driver._node_config import SETTINGS_FIELDS, node_config

#: Every setting of the list away from its default (a default would hide a field that is not handed on).
NON_DEFAULT = dict(store_retry_timeout_s=7.5, seed=42, fanout=3, merge_alpha=0.25, keep_versions=5,
                   anti_entropy_interval_s=1.25, peer_refresh_interval_s=0.75, flush_timeout_s=12.0,
                   scale_rule="linear", kill_worker_once_at="rbm:1", straggler_factor=2.5, bind_host="127.0.0.1",
                   advertise_host="127.0.0.2", port_range="41000-41099", gpu_data_budget_bytes=123456,
                   warmup_partitions=3, mode="sync", outer_learning_rate=0.7, outer_momentum=0.8)


def prepared_digits() -> PreparedData:
    return PreparedData(n_samples=400, feature_shape=(64,), classes=np.arange(10), partitions=8,
                        rows_per_partition=[50] * 8, source="digits")


def test_every_listed_setting_is_a_field_of_both_the_settings_and_the_node_config():
    settings_fields = {field.name for field in dataclasses.fields(TrainingSettings)}
    config_fields = {field.name for field in dataclasses.fields(NodeConfig)}
    assert len(set(SETTINGS_FIELDS)) == len(SETTINGS_FIELDS)
    assert set(SETTINGS_FIELDS) <= settings_fields, set(SETTINGS_FIELDS) - settings_fields
    assert set(SETTINGS_FIELDS) <= config_fields, set(SETTINGS_FIELDS) - config_fields


def test_the_derived_node_config_equals_the_one_built_field_by_field_for_settings_away_from_their_defaults(spark):
    settings = TrainingSettings(**NON_DEFAULT)
    defaults = TrainingSettings()
    assert all(getattr(settings, name) != getattr(defaults, name) for name in NON_DEFAULT)
    sc, prepared, spec = spark.sparkContext, prepared_digits(), {"kind": "rbm", "batch_size": 10}
    derived = node_config(settings, prepared, spec, run="r1", fit_id="f1", store_url="file:///tmp/store",
                          key=b"k" * 32, nodes=2, sc=sc)
    by_hand = NodeConfig(
        run="r1", fit_id="f1", store_url="file:///tmp/store", store_retry_timeout_s=7.5, key=b"k" * 32, spec=spec,
        feature_shape=(64,), classes=tuple(range(10)), seed=42, fanout=3, merge_alpha=0.25, keep_versions=5,
        anti_entropy_interval_s=1.25, peer_refresh_interval_s=0.75, flush_timeout_s=12.0, scale_rule="linear",
        warmup_partitions=3, n_samples=400, nodes=2, node_batch_size=derived.node_batch_size, rates_cap=4.0,
        kill_worker_once_at="rbm:1", straggler_factor=2.5, local_master=True,
        driver_host=sc.getConf().get("spark.driver.host"), bind_host="127.0.0.1", advertise_host="127.0.0.2",
        port_range="41000-41099", gpu_data_budget_bytes=123456, outer_learning_rate=0.7, outer_momentum=0.8)
    assert derived == by_hand


def test_a_node_config_without_a_gpu_data_budget_carries_the_contracts_zero(spark):
    config = node_config(TrainingSettings(), prepared_digits(), {"kind": "rbm"}, run="r1", fit_id="f1",
                         store_url="file:///tmp/store", key=b"k" * 32, nodes=2, sc=spark.sparkContext)
    assert config.gpu_data_budget_bytes == 0 and config.warmup_partitions == 4  # a node's share of 8 partitions
