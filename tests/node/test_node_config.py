"""The nodes' config is derived from the training settings by one declared list of fields."""

import dataclasses

import numpy as np
import pytest

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


def test_the_derived_node_config_equals_the_one_built_field_by_field_for_settings_away_from_their_defaults():
    settings = TrainingSettings(**NON_DEFAULT)
    defaults = TrainingSettings()
    assert all(getattr(settings, name) != getattr(defaults, name) for name in NON_DEFAULT)
    prepared, spec = prepared_digits(), {"kind": "rbm", "batch_size": 10}
    derived = node_config(settings, prepared, spec, run="r1", fit_id="f1", store_url="file:///tmp/store",
                          key=b"k" * 32, nodes=2, master="local[2]", driver_host="10.1.2.3")
    by_hand = NodeConfig(
        run="r1", fit_id="f1", store_url="file:///tmp/store", store_retry_timeout_s=7.5, key=b"k" * 32, spec=spec,
        feature_shape=(64,), classes=tuple(range(10)), seed=42, fanout=3, merge_alpha=0.25, keep_versions=5,
        anti_entropy_interval_s=1.25, peer_refresh_interval_s=0.75, flush_timeout_s=12.0, scale_rule="linear",
        warmup_partitions=3, n_samples=400, nodes=2, node_batch_size=derived.node_batch_size, rates_cap=4.0,
        kill_worker_once_at="rbm:1", straggler_factor=2.5, local_master=True,
        driver_host="10.1.2.3", bind_host="127.0.0.1", advertise_host="127.0.0.2",
        port_range="41000-41099", gpu_data_budget_bytes=123456, outer_learning_rate=0.7, outer_momentum=0.8)
    assert derived == by_hand


def test_a_node_config_without_a_gpu_data_budget_carries_the_contracts_zero():
    config = node_config(TrainingSettings(), prepared_digits(), {"kind": "rbm"}, run="r1", fit_id="f1",
                         store_url="file:///tmp/store", key=b"k" * 32, nodes=2, master="local[2]", driver_host=None)
    assert config.gpu_data_budget_bytes == 0 and config.warmup_partitions == 4  # a node's share of 8 partitions


@pytest.mark.parametrize("rows, settings, expected", [
    (400, {}, (1.0, 0.0, True)),  # 20 steps per node: the rates take the factor 2, the gain is 1
    (36_000, {}, (0.5858, 0.7071, True)),  # 1,800 steps: the factor 1, the gain 2
    (36_000, {"outer_momentum": 0.9}, (1.0, 0.9, False)),  # the settings' step, the rate's default 1.0
    (400, {"outer_learning_rate": 0.7, "outer_momentum": 0.8}, (0.7, 0.8, False)),
    (36_000, {"mode": "sync"}, (0.5858, 0.7071, True)),  # DiLoCo: the same rule
    (36_000, {"mode": "sharing"}, (1.0, 0.0, False)),  # it adds its peers' updates and takes no step
    (36_000, {"mode": "sharing", "outer_momentum": 0.9}, (1.0, 0.0, False)),
])
def test_without_outer_settings_the_node_config_carries_the_rules_step_for_the_fits_rows(rows, settings,
                                                                                           expected):
    prepared = PreparedData(n_samples=rows, feature_shape=(64,), classes=np.arange(10), partitions=8,
                            rows_per_partition=[rows // 8] * 8, source="digits")
    config = node_config(TrainingSettings(**settings), prepared, {"kind": "dbn", "batch_size": 10}, run="r1",
                         fit_id="f1", store_url="file:///tmp/store", key=b"k" * 32, nodes=2, master="local[2]",
                         driver_host=None)
    assert (config.outer_learning_rate, config.outer_momentum) == pytest.approx(expected[:2], abs=1e-4)
    assert config.outer_by_rule is expected[2]
