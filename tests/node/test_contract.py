"""The driver-executor contract: typed, versioned, and read only by a matching version."""

from __future__ import annotations

import dataclasses

import msgpack
import numpy as np
import pytest

from node._contract import (
    CONTRACT_VERSION,
    AsyncOptions,
    ContractError,
    NodeConfig,
    PartitionReport,
    SharingOptions,
    SyncOptions,
    TaskSpec,
    decode,
    encode,
    params_digest,
)


def a_task() -> TaskSpec:
    config = NodeConfig(run="r1", fit_id="f1", store_url="file:///tmp/s", store_retry_timeout_s=30.0,
                        key=b"\x00\x01" * 16, spec={"kind": "dbn", "hidden_layer_sizes": [16]}, feature_shape=(1, 8, 8),
                        classes=("cat", "dog"), seed=0, fanout=None, merge_alpha=0.5, keep_versions=3,
                        anti_entropy_interval_s=2.0, peer_refresh_interval_s=0.5, flush_timeout_s=60.0)
    return TaskSpec(node=config, mode="async", phase="rbm0", phase_index=0, epoch=3, start_digest="ab" * 32,
                    planned_epochs=5, start_nodes=("h-1", "h-2"), start_versions={"h-1": 4, "h-2": 7})


def test_a_task_survives_the_wire_exactly_with_tuples_bytes_and_nested_config():
    task = a_task()
    assert decode(encode(task), TaskSpec) == task


def test_a_report_survives_the_wire_and_optional_fields_may_be_none():
    report = PartitionReport(node="h-1", run="r1", phase="rbm0", epoch=0, partition=2, samples=10, loss=0.5,
                             train_s=0.1, merge_s=0.0, publish_s=0.01, task_s=0.2, merged=1, merged_from=("h-2",),
                             staleness_s=None, samples_seen=10, time=1.0, pid=7, stats={"merged": 1})
    assert decode(encode(report), PartitionReport) == report
    assert report.to_record()["merged_from"] == ["h-2"]


def test_an_executor_of_another_version_refuses_the_task_saying_so():
    payload = msgpack.unpackb(encode(a_task()), raw=False)
    payload["contract"] = CONTRACT_VERSION + 1
    with pytest.raises(ContractError, match="different sparkdbn contracts.*same sparkdbn version"):
        decode(msgpack.packb(payload, use_bin_type=True), TaskSpec)


def test_fields_an_executor_does_not_know_are_named():
    payload = msgpack.unpackb(encode(a_task()), raw=False)
    payload["fields"]["node"]["gpu_count"] = 2
    del payload["fields"]["epoch"]
    with pytest.raises(ContractError, match=r"TaskSpec: fields differ.*missing \['epoch'\]"):
        decode(msgpack.packb(payload, use_bin_type=True), TaskSpec)
    payload = msgpack.unpackb(encode(a_task()), raw=False)
    payload["fields"]["node"]["gpu_count"] = 2
    with pytest.raises(ContractError, match=r"TaskSpec.node: fields differ.*unknown \['gpu_count'\]"):
        decode(msgpack.packb(payload, use_bin_type=True), TaskSpec)


def test_wrongly_typed_fields_and_other_types_are_refused():
    payload = msgpack.unpackb(encode(a_task()), raw=False)
    payload["fields"]["epoch"] = "three"
    with pytest.raises(ContractError, match="TaskSpec.epoch: expected int, got str"):
        decode(msgpack.packb(payload, use_bin_type=True), TaskSpec)
    with pytest.raises(ContractError, match="expected a PartitionReport, got a 'TaskSpec'"):
        decode(encode(a_task()), PartitionReport)
    with pytest.raises(ContractError, match="not a sparkdbn TaskSpec"):
        decode(b"\xc1 garbage", TaskSpec)


def test_the_params_digest_changes_with_any_name_dtype_shape_or_value():
    params = {"W": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(3, np.float32)}
    digest = params_digest(params)
    assert params_digest(dict(reversed(list(params.items())))) == digest
    changed = [{**params, "W": params["W"].astype(np.float64)}, {**params, "W": params["W"].reshape(3, 2)},
               {**params, "b": params["b"] + 1e-7}, {"W2": params["W"], "b": params["b"]}]
    assert all(params_digest(other) != digest for other in changed)
    assert dataclasses.is_dataclass(TaskSpec) and TaskSpec.__dataclass_params__.frozen


@pytest.mark.parametrize("mode, options", [("async", AsyncOptions()),
                                           ("sync", SyncOptions(averaging_frequency=2, barrier_timeout_s=30.0)),
                                           ("sharing", SharingOptions(threshold=1e-3, sparsity=0.01))])
def test_each_modes_options_cross_the_wire_as_their_own_type_with_the_jobs_slots_and_epochs(mode, options):
    task = dataclasses.replace(a_task(), mode=mode, options=options, slots=((0, 2), (1,)), end_epoch=5)
    back = decode(encode(task), TaskSpec)
    assert back == task and type(back.options) is type(options)
    assert back.epochs == range(3, 5) and back.slots == ((0, 2), (1,))
    assert a_task().epochs == range(3, 4)  # no end_epoch: the job trains its one epoch


def test_options_of_an_unknown_type_or_with_other_fields_are_refused_naming_what_differs():
    payload = msgpack.unpackb(encode(dataclasses.replace(a_task(), options=SyncOptions(2, 30.0))), raw=False)
    payload["fields"]["options"]["type"] = "GossipOptions"
    with pytest.raises(ContractError, match=r"TaskSpec.options: expected one of \['AsyncOptions', 'SharingOptions', "
                                            r"'SyncOptions'\], got 'GossipOptions'"):
        decode(msgpack.packb(payload, use_bin_type=True), TaskSpec)
    payload["fields"]["options"] = {"type": "SyncOptions", "fields": {"averaging_frequency": 2}}
    with pytest.raises(ContractError, match=r"TaskSpec.options: fields differ.*missing \['barrier_timeout_s'\]"):
        decode(msgpack.packb(payload, use_bin_type=True), TaskSpec)
    payload["fields"]["options"] = {"averaging_frequency": 2, "barrier_timeout_s": 30.0}  # untagged, as before v7
    with pytest.raises(ContractError, match="TaskSpec.options: expected one of"):
        decode(msgpack.packb(payload, use_bin_type=True), TaskSpec)
