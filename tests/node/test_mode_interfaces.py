"""The training modes see the driver and a node through the small interfaces they define (node.modes._protocols):
the driver's FitJobs and the executor's ExecutorNode have every member those ask for, a task whose options are not its
mode's is refused before any training, and the registry, not the settings, knows the modes."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from node import TrainingSettings
from node._contract import (AsyncOptions, ContractError, NodeConfig, SharingOptions, SyncOptions, TaskSpec,
                            encode)
from node.driver._fit_jobs import FitJobs
from node.executor._node import ExecutorNode
from node.executor._resident import NodeData
from node.executor._tasks import run_training_task
from node.modes._protocols import ModeDriver, ModeNode, ModeSettings, NodePartitions
from node.modes._registry import MODE_NAMES, check_mode, mode_named


def protocol_members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


@pytest.mark.parametrize("protocol, implementation", [(ModeDriver, FitJobs), (ModeNode, ExecutorNode),
                                                      (NodePartitions, NodeData)])
def test_each_side_has_every_member_the_modes_ask_of_it(protocol, implementation):
    config = NodeConfig(run="r", fit_id="f", store_url="file:///unused", store_retry_timeout_s=1.0, key=b"k" * 32,
                        spec={"kind": "rbm", "n_components": 2}, feature_shape=(3,), classes=None, seed=0, fanout=None,
                        merge_alpha=None, keep_versions=3, anti_entropy_interval_s=1.0, peer_refresh_interval_s=1.0,
                        flush_timeout_s=1.0)
    instance_attributes = set(vars(ExecutorNode(config))) if implementation is ExecutorNode else set()
    missing = protocol_members(protocol) - set(dir(implementation)) - instance_attributes
    assert not missing, f"{implementation.__name__} lacks {sorted(missing)} of {protocol.__name__}"


def test_the_training_settings_have_every_setting_a_mode_reads():
    fields = {field.name for field in dataclasses.fields(TrainingSettings)}
    assert protocol_members(ModeSettings) <= fields


@pytest.mark.parametrize("name", MODE_NAMES)
def test_every_mode_makes_options_of_its_own_type_from_the_settings(name):
    mode = mode_named(name)
    options = mode.options(TrainingSettings(averaging_frequency=3, sharing_threshold=0.01))
    assert type(options) is mode.options_type
    assert typing.get_args(typing.get_type_hints(TaskSpec)["options"]).count(mode.options_type) == 1


def test_a_task_whose_options_are_not_its_modes_is_refused_before_any_node_starts(tmp_path):
    config = NodeConfig(run="r", fit_id="f", store_url=f"file://{tmp_path}/store", store_retry_timeout_s=0.1,
                        key=b"k" * 32, spec={}, feature_shape=(3,), classes=None, seed=0, fanout=None, merge_alpha=None,
                        keep_versions=3, anti_entropy_interval_s=1.0, peer_refresh_interval_s=1.0, flush_timeout_s=1.0)
    for mode, options in (("sync", SharingOptions(1e-3, 0.01)), ("sharing", AsyncOptions()),
                          ("async", SyncOptions(1, 1.0))):
        task = TaskSpec(node=config, mode=mode, phase="rbm0", phase_index=0, epoch=0, start_digest="d", end_epoch=1,
                        slots=((0,),), options=options)
        with pytest.raises(ContractError, match=f"a '{mode}' task carries {type(options).__name__}"):
            list(run_training_task(encode(task), None, 0, iter([0])))
    assert not (tmp_path / "store").exists()  # no node started


def test_the_registry_refuses_an_unknown_mode_and_early_stopping_in_a_mode_of_one_job_per_phase():
    with pytest.raises(ValueError, match="mode must be one of async, sync, sharing, got 'gossip'"):
        check_mode("gossip")
    with pytest.raises(ValueError, match="mode must be one of"):
        TrainingSettings(mode="gossip").validate()  # the settings ask the registry
    check_mode("sync")
    check_mode("async", early_stopping=True)
    with pytest.raises(ValueError, match="use mode='async' with early_stopping"):
        check_mode("sync", early_stopping=True)
