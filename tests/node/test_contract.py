"""The driver-executor contract: typed, versioned, and read only by a matching version."""

from __future__ import annotations

import dataclasses

import msgpack
import numpy as np
import pytest

from node._contract import (
    CONTRACT_VERSION,
    ContractError,
    NodeConfig,
    PartitionReport,
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
    return TaskSpec(node=config, mode="async", phase="rbm0", phase_index=0, epoch=3, start_digest="ab" * 32)


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
