"""Weight snapshots: versions, checksums, pruning, consolidation, phase results -- on both backends."""

from __future__ import annotations

import numpy as np
import pytest

from storage import ChecksumError, SnapshotValueError, StoreNotFoundError, WeightStore


def _params(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "rbm0.W": rng.standard_normal((784, 50)).astype(np.float32),
        "rbm0.b": rng.standard_normal(784).astype(np.float32),
        "rbm0.c": rng.standard_normal(50).astype(np.float32),
    }


def test_a_snapshot_reads_back_bit_exact_with_its_checksum_in_the_name(store):
    weights = WeightStore(store, "run1")
    params = _params(0)
    ref = weights.put_version("rbm0", "node-a", 7, params)
    assert ref.path == f"runs/run1/weights/rbm0/node-a/00000007-{ref.sha256}.npz"
    back = weights.get_version(ref)
    assert set(back) == set(params)
    for name in params:
        assert back[name].dtype == params[name].dtype
        np.testing.assert_array_equal(back[name], params[name])


def test_versions_are_listed_oldest_first_and_newest_per_node_is_found(store):
    weights = WeightStore(store, "run1")
    for version in [3, 1, 10, 2]:
        weights.put_version("rbm0", "a", version, _params(version))
    weights.put_version("rbm0", "b", 5, _params(5))
    weights.put_version("rbm1", "c", 1, _params(6))
    assert [ref.version for ref in weights.list_versions("rbm0", "a")] == [1, 2, 3, 10]
    newest = weights.newest_per_node("rbm0")
    assert {node: ref.version for node, ref in newest.items()} == {"a": 10, "b": 5}
    assert weights.list_versions("rbm0", "nobody") == []


def test_prune_keeps_only_the_newest_versions(store):
    weights = WeightStore(store, "run1")
    for version in range(1, 6):
        weights.put_version("rbm0", "a", version, _params(version))
    assert weights.prune("rbm0", "a", keep=2) == 3
    assert [ref.version for ref in weights.list_versions("rbm0", "a")] == [4, 5]
    assert weights.prune("rbm0", "a", keep=2) == 0


def _damage(store, ref, how: str) -> None:
    data = bytearray(store.read_bytes(ref.path))
    if how == "corrupt":
        data[len(data) // 2] ^= 0xFF
    else:
        data = data[: len(data) // 3]
    store.backend.write_bytes(ref.path, bytes(data))


@pytest.mark.parametrize("how", ["corrupt", "truncate"])
def test_a_damaged_snapshot_is_detected_by_its_checksum(store, how):
    weights = WeightStore(store, "run1")
    ref = weights.put_version("rbm0", "a", 1, _params(0))
    _damage(store, ref, how)
    with pytest.raises(ChecksumError, match="sha256"):
        weights.get_version(ref)


def test_consolidate_averages_the_newest_snapshot_of_each_node(store):
    weights = WeightStore(store, "run1")
    weights.put_version("rbm0", "a", 1, _params(100))  # older, must be ignored
    weights.put_version("rbm0", "a", 2, _params(1))
    weights.put_version("rbm0", "b", 9, _params(2))
    weights.put_version("rbm0", "c", 4, _params(3))
    mean = weights.consolidate("rbm0")
    for name, value in mean.items():
        expected = (_params(1)[name].astype(np.float64) + _params(2)[name] + _params(3)[name]) / 3
        assert value.dtype == np.float32
        np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-6)


def test_consolidate_skips_a_damaged_newest_snapshot_and_uses_the_previous_one(store, caplog):
    weights = WeightStore(store, "run1")
    weights.put_version("rbm0", "a", 1, _params(1))
    bad = weights.put_version("rbm0", "a", 2, _params(50))
    weights.put_version("rbm0", "b", 1, _params(2))
    _damage(store, bad, "truncate")
    mean = weights.consolidate("rbm0")
    expected = (_params(1)["rbm0.W"].astype(np.float64) + _params(2)["rbm0.W"]) / 2
    np.testing.assert_allclose(mean["rbm0.W"], expected, rtol=1e-6, atol=1e-6)
    assert "skipping damaged snapshot" in caplog.text


def test_consolidate_of_a_phase_without_snapshots_is_not_found(store):
    with pytest.raises(StoreNotFoundError, match="no valid snapshot"):
        WeightStore(store, "run1").consolidate("rbm3")


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
def test_non_finite_parameters_are_never_published(store, bad_value):
    weights = WeightStore(store, "run1")
    params = _params(0)
    params["rbm0.W"][3, 4] = bad_value
    with pytest.raises(SnapshotValueError, match="NaN/Inf"):
        weights.put_version("rbm0", "a", 1, params)
    assert weights.list_versions("rbm0", "a") == []


def test_bad_versions_names_and_dtypes_are_refused(store):
    weights = WeightStore(store, "run1")
    with pytest.raises(SnapshotValueError):
        weights.put_version("rbm0", "a", -1, _params(0))
    with pytest.raises(SnapshotValueError, match="non-numeric"):
        weights.put_version("rbm0", "a", 1, {"w": np.array(["x"], dtype=object)})
    with pytest.raises(ValueError):
        weights.put_version("rbm0", "../../etc", 1, _params(0))
    with pytest.raises(ValueError):
        WeightStore(store, "a/b")


def test_phase_results_round_trip_and_are_none_when_missing(store):
    weights = WeightStore(store, "run1")
    assert weights.get_phase_result("rbm0") is None
    weights.put_phase_result("rbm0", _params(4))
    back = weights.get_phase_result("rbm0")
    np.testing.assert_array_equal(back["rbm0.W"], _params(4)["rbm0.W"])


def test_a_truncated_phase_result_is_refused(store):
    weights = WeightStore(store, "run1")
    weights.put_phase_result("rbm0", _params(4))
    path = "runs/run1/phases/rbm0.npz"
    store.backend.write_bytes(path, store.read_bytes(path)[:-1000])
    with pytest.raises(ChecksumError):
        weights.get_phase_result("rbm0")
