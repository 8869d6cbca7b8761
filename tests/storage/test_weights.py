"""Weight snapshots: versions, authentication, checksums, pruning, consolidation, phase results -- on both backends."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from storage import (
    AuthenticationError,
    ChecksumError,
    FileTooLargeError,
    NoUsableSnapshotError,
    RunStore,
    SnapshotRef,
    SnapshotValueError,
    StoreError,
    WeightStore,
    sha256_hex,
    sign_json,
    snapshot_size_bound,
)

KEY = b"k" * 32
OTHER_KEY = b"x" * 32


def _params(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "rbm0.W": rng.standard_normal((784, 50)).astype(np.float32),
        "rbm0.b": rng.standard_normal(784).astype(np.float32),
        "rbm0.c": rng.standard_normal(50).astype(np.float32),
    }


def _npz(arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_a_snapshot_reads_back_bit_exact_with_its_checksum_and_mac_in_the_name(store):
    weights = WeightStore(store, "run1", KEY)
    params = _params(0)
    ref = weights.put_version("rbm0", "node-a", 7, params)
    assert ref.path == f"runs/run1/weights/rbm0/node-a/00000007-{ref.sha256}-{ref.mac}.npz"
    assert ref.sha256 == sha256_hex(store.read_bytes(ref.path))
    back = weights.get_version(ref)
    assert set(back) == set(params)
    for name in params:
        assert back[name].dtype == params[name].dtype
        np.testing.assert_array_equal(back[name], params[name])


def test_versions_are_listed_oldest_first_and_newest_per_node_is_found(store):
    weights = WeightStore(store, "run1", KEY)
    for version in [3, 1, 10, 2]:
        weights.put_version("rbm0", "a", version, _params(version))
    weights.put_version("rbm0", "b", 5, _params(5))
    weights.put_version("rbm1", "c", 1, _params(6))
    assert [ref.version for ref in weights.list_versions("rbm0", "a")] == [1, 2, 3, 10]
    newest = weights.newest_per_node("rbm0")
    assert {node: ref.version for node, ref in newest.items()} == {"a": 10, "b": 5}
    assert weights.list_versions("rbm0", "nobody") == []


def test_snapshots_of_another_key_or_moved_to_another_node_phase_or_version_are_never_listed(store):
    honest = WeightStore(store, "run1", KEY)
    ref = honest.put_version("rbm0", "a", 2, _params(2))
    data = store.read_bytes(ref.path)
    forger = WeightStore(store, "run1", OTHER_KEY)
    forger.put_version("rbm0", "a", 99, _params(99))  # a huge version under the wrong key, in a's folder
    forger.put_version("rbm0", "intruder", 1, _params(98))
    digest = sha256_hex(_npz(_params(97)))
    store.write_bytes(f"runs/run1/weights/rbm0/a/00000500-{digest}.npz", _npz(_params(97)))  # old style, no MAC
    store.write_bytes(f"runs/run1/weights/rbm0/b/00000002-{ref.sha256}-{ref.mac}.npz", data)  # another node
    store.write_bytes(f"runs/run1/weights/rbm1/a/00000002-{ref.sha256}-{ref.mac}.npz", data)  # another phase
    store.write_bytes(f"runs/run1/weights/rbm0/a/00000003-{ref.sha256}-{ref.mac}.npz", data)  # another version
    assert [(r.node, r.version) for r in honest.list_versions("rbm0", "a")] == [("a", 2)]
    assert honest.newest_per_node("rbm0") == {"a": ref}
    assert honest.list_versions("rbm1", "a") == []
    # Each planted file is counted once, however often the folders are listed.
    honest.newest_per_node("rbm0")
    assert honest.refusals() == {"unauthenticated": 6}
    forged = forger.list_versions("rbm0", "a")[-1]
    with pytest.raises(AuthenticationError, match="not written by a holder of the run's key"):
        honest.get_version(forged)


def test_a_snapshot_whose_content_was_replaced_under_its_authentic_name_is_refused(store):
    weights = WeightStore(store, "run1", KEY)
    ref = weights.put_version("rbm0", "a", 1, _params(1))
    store.backend.write_bytes(ref.path, _npz(_params(66)))
    with pytest.raises(ChecksumError, match="sha256"):
        weights.get_version(ref)


def test_a_snapshot_larger_than_the_bound_is_refused_before_it_is_read_whole(store):
    weights = WeightStore(store, "run1", KEY)
    ref = weights.put_version("rbm0", "a", 1, _params(1))
    bound = snapshot_size_bound({name: value.shape for name, value in _params(1).items()}, itemsize=4)
    size = len(store.read_bytes(ref.path))
    assert size <= bound < size + 4096
    assert weights.get_version(ref, max_bytes=bound)["rbm0.W"].shape == (784, 50)
    with pytest.raises(FileTooLargeError, match="larger than the 1000 bytes"):
        weights.get_version(ref, max_bytes=1000)


def test_prune_keeps_only_the_newest_versions_and_never_deletes_what_it_did_not_write(store):
    weights = WeightStore(store, "run1", KEY)
    for version in range(1, 6):
        weights.put_version("rbm0", "a", version, _params(version))
    planted = WeightStore(store, "run1", OTHER_KEY).put_version("rbm0", "a", 1, _params(0))
    assert weights.prune("rbm0", "a", keep=2) == 3
    assert [ref.version for ref in weights.list_versions("rbm0", "a")] == [4, 5]
    assert weights.prune("rbm0", "a", keep=2) == 0
    assert store.exists(planted.path)


def test_prune_also_keeps_the_versions_it_is_told_to_keep(store):
    weights = WeightStore(store, "run1", KEY)
    for version in range(1, 8):
        weights.put_version("rbm0", "a", version, _params(version))
    assert weights.prune("rbm0", "a", keep=2, also_keep=(2, 4, 99)) == 3
    assert [ref.version for ref in weights.list_versions("rbm0", "a")] == [2, 4, 6, 7]


def _damage(store, ref, how: str) -> None:
    data = bytearray(store.read_bytes(ref.path))
    if how == "corrupt":
        data[len(data) // 2] ^= 0xFF
    else:
        data = data[: len(data) // 3]
    store.backend.write_bytes(ref.path, bytes(data))


@pytest.mark.parametrize("how", ["corrupt", "truncate"])
def test_a_damaged_snapshot_is_detected_by_its_checksum(store, how):
    weights = WeightStore(store, "run1", KEY)
    ref = weights.put_version("rbm0", "a", 1, _params(0))
    _damage(store, ref, how)
    with pytest.raises(ChecksumError, match="sha256"):
        weights.get_version(ref)


def _float64_mean(*snapshots):
    return {name: (sum(s[name].astype(np.float64) for s in snapshots) / len(snapshots)) for name in snapshots[0]}


def test_consolidate_is_the_float64_mean_of_the_newest_snapshot_of_each_node(store):
    weights = WeightStore(store, "run1", KEY)
    weights.put_version("rbm0", "a", 1, _params(100))  # older: must be ignored
    weights.put_version("rbm0", "a", 2, _params(1))
    weights.put_version("rbm0", "b", 9, _params(2))
    weights.put_version("rbm0", "b", 3, _params(200))  # written later, but an older version
    weights.put_version("rbm0", "c", 4, _params(3))
    result = weights.consolidate("rbm0")
    expected = _float64_mean(_params(1), _params(2), _params(3))
    for name, value in result.params.items():
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value, expected[name].astype(np.float32))
    assert [(ref.node, ref.version) for ref in result.refs] == [("a", 2), ("b", 9), ("c", 4)]


def test_consolidate_as_of_versions_takes_each_node_s_newest_snapshot_up_to_its_version(store):
    # An async epoch's weights, read while the nodes train the next: a's version 2 and b's 3, not the newer ones.
    weights = WeightStore(store, "run1", KEY)
    for node, versions in (("a", (1, 2, 3, 4)), ("b", (3, 5)), ("c", (7,))):
        for version in versions:
            weights.put_version("rbm0", node, version, _params(10 * version + len(node)))
    result = weights.consolidate("rbm0", ["a", "b", "c"], as_of={"a": 2, "b": 4})
    assert [(ref.node, ref.version) for ref in result.refs] == [("a", 2), ("b", 3), ("c", 7)]
    expected = _float64_mean(_params(21), _params(31), _params(71))
    for name, value in result.params.items():
        np.testing.assert_array_equal(value, expected[name].astype(np.float32))
    # A node whose versions up to the one named are all gone is left out, as one without a snapshot.
    assert [ref.node for ref in weights.consolidate("rbm0", ["a", "c"], as_of={"c": 6}).refs] == ["a"]


def test_consolidate_accumulates_in_float64_where_float32_would_lose_the_answer(store):
    # float32: 1e8 + 1 rounds to 1e8 and the mean comes out 0 (float16: 2048 + 1); in float64 it is 1/3.
    weights = WeightStore(store, "run1", KEY)
    for node, big in (("a", 1), ("b", 0), ("c", -1)):
        value = {"w": np.full(4, big * 1e8 if big else 1.0, np.float32),
                 "h": np.full(2, big * 2048.0 if big else 1.0, np.float16)}  # fmt: skip
        weights.put_version("rbm0", node, 1, value)
    result = weights.consolidate("rbm0")
    np.testing.assert_array_equal(result.params["w"], np.full(4, np.float32(1 / 3)))
    assert result.params["w"].dtype == np.float32
    assert result.params["h"].dtype == np.float16 and np.all(result.params["h"] == np.float16(1 / 3))


def test_consolidate_of_given_nodes_leaves_out_the_others_and_those_without_a_snapshot(store):
    weights = WeightStore(store, "run1", KEY)
    for seed, node in enumerate(("a", "b", "c"), start=1):
        weights.put_version("rbm0", node, 1, _params(seed))
    result = weights.consolidate("rbm0", nodes=["c", "a", "gone"])
    expected = _float64_mean(_params(1), _params(3))
    np.testing.assert_array_equal(result.params["rbm0.W"], expected["rbm0.W"].astype(np.float32))
    assert [ref.node for ref in result.refs] == ["a", "c"]
    with pytest.raises(NoUsableSnapshotError, match=r"among nodes \['gone'\]"):
        weights.consolidate("rbm0", nodes=["gone"])


def test_consolidate_ignores_snapshots_planted_without_the_key(store):
    weights = WeightStore(store, "run1", KEY)
    weights.put_version("rbm0", "a", 1, _params(1))
    weights.put_version("rbm0", "b", 1, _params(2))
    forger = WeightStore(store, "run1", OTHER_KEY)
    forger.put_version("rbm0", "a", 7, {name: np.full_like(v, 100.0) for name, v in _params(0).items()})
    forger.put_version("rbm0", "intruder", 1, {name: np.full_like(v, 100.0) for name, v in _params(0).items()})
    result = weights.consolidate("rbm0")
    np.testing.assert_array_equal(result.params["rbm0.W"], _float64_mean(_params(1), _params(2))["rbm0.W"].astype(np.float32))
    assert [ref.node for ref in result.refs] == ["a", "b"]


def test_consolidate_skips_a_damaged_newest_snapshot_and_uses_the_previous_one(store, caplog):
    weights = WeightStore(store, "run1", KEY)
    weights.put_version("rbm0", "a", 1, _params(1))
    bad = weights.put_version("rbm0", "a", 2, _params(50))
    weights.put_version("rbm0", "b", 1, _params(2))
    _damage(store, bad, "truncate")
    result = weights.consolidate("rbm0")
    np.testing.assert_array_equal(result.params["rbm0.W"], _float64_mean(_params(1), _params(2))["rbm0.W"].astype(np.float32))
    assert [(ref.node, ref.version) for ref in result.refs] == [("a", 1), ("b", 1)]
    assert "refused (corrupt)" in caplog.text and weights.refusals() == {"corrupt": 1}


def test_consolidate_names_the_snapshot_whose_shapes_differ(store):
    weights = WeightStore(store, "run1", KEY)
    weights.put_version("rbm0", "a", 1, _params(1))
    odd = weights.put_version("rbm0", "b", 1, {**_params(2), "rbm0.c": np.zeros(51, np.float32)})
    with pytest.raises(StoreError, match=odd.path.replace(".", r"\.") + ".*rbm0.c: \\(51,\\)"):
        weights.consolidate("rbm0")


def test_consolidate_of_a_phase_without_snapshots_is_not_found(store):
    with pytest.raises(NoUsableSnapshotError, match="no authenticated, intact snapshot"):
        WeightStore(store, "run1", KEY).consolidate("rbm3")


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
def test_non_finite_parameters_are_never_published(store, bad_value):
    weights = WeightStore(store, "run1", KEY)
    params = _params(0)
    params["rbm0.W"][3, 4] = bad_value
    with pytest.raises(SnapshotValueError, match="NaN/Inf"):
        weights.put_version("rbm0", "a", 1, params)
    assert weights.list_versions("rbm0", "a") == []


def test_bad_versions_names_dtypes_and_keys_are_refused(store):
    weights = WeightStore(store, "run1", KEY)
    with pytest.raises(SnapshotValueError):
        weights.put_version("rbm0", "a", -1, _params(0))
    with pytest.raises(SnapshotValueError, match="non-numeric"):
        weights.put_version("rbm0", "a", 1, {"w": np.array(["x"], dtype=object)})
    with pytest.raises(ValueError):
        weights.put_version("rbm0", "../../etc", 1, _params(0))
    with pytest.raises(ValueError):
        WeightStore(store, "a/b", KEY)
    with pytest.raises(ValueError, match="at least 16"):
        WeightStore(store, "run1", b"short")
    with pytest.raises(TypeError, match="must be bytes"):
        WeightStore(store, "run1", "a passphrase as str")  # type: ignore[arg-type]


def test_phase_results_are_new_files_named_by_content_and_the_run_record_names_the_current_one(store):
    weights = WeightStore(store, "run1", KEY)
    assert weights.get_phase_result("rbm0") is None
    first = weights.put_phase_result("rbm0", _params(4))
    second = weights.put_phase_result("rbm0", _params(5))  # nothing replaced: both stay until their run removes them
    assert sorted(store.list("runs/run1/phases")) == sorted([first["file"], second["file"]])
    assert first["file"] == f"rbm0-{first['file_sha256']}.npz"
    np.testing.assert_array_equal(weights.get_phase_result("rbm0", first)["rbm0.W"], _params(4)["rbm0.W"])
    assert weights.get_phase_result("rbm0") is None  # no record names one yet
    RunStore(store, "run1", KEY).write_record({"steps": {"rbm0": {"result": {"sha256": "p", **second}}}}, generation=1)
    np.testing.assert_array_equal(weights.get_phase_result("rbm0")["rbm0.W"], _params(5)["rbm0.W"])
    assert weights.put_phase_result("rbm0", _params(4)) == first  # the same result again: the same file, kept


def test_a_phase_result_damaged_or_replaced_under_its_name_is_refused_and_a_foreign_name_is_an_error(store):
    weights = WeightStore(store, "run1", KEY)
    ref = weights.put_phase_result("rbm0", _params(4))
    path = "runs/run1/phases/" + ref["file"]
    store.backend.write_bytes(path, store.read_bytes(path)[:-1000])
    with pytest.raises(ChecksumError, match="does not match the .* the run record names"):
        weights.get_phase_result("rbm0", ref)
    store.backend.write_bytes(path, store.read_bytes(path) + b"\0" * 2000)
    with pytest.raises(ChecksumError, match="larger than the"):
        weights.get_phase_result("rbm0", ref)
    assert weights.put_phase_result("rbm0", _params(4)) == ref  # a damaged file under its name is written again
    np.testing.assert_array_equal(weights.get_phase_result("rbm0", ref)["rbm0.W"], _params(4)["rbm0.W"])
    with pytest.raises(StoreError, match="names no result file"):
        weights.get_phase_result("rbm1", ref)  # another phase's file
    store.delete(path)
    assert weights.get_phase_result("rbm0", ref) is None  # gone: absent, said in the log


def _legacy_phase_result(store, key: bytes, phase: str, params, *, as_phase: str | None = None) -> None:
    """A phase result as sparkdbn up to 0.2 stored it: content by digest plus a signed pointer."""
    data = _npz(params)
    name = f"{phase}-{sha256_hex(data)}.npz"
    store.write_bytes(f"runs/run1/phases/{name}", data)
    pointer = {"file": name, "sha256": sha256_hex(data), "size_bytes": len(data)}
    store.write_bytes(f"runs/run1/phases/{as_phase or phase}.json",
                      sign_json(key, pointer, "sparkdbn phase result v1", "run1", phase))


def test_a_phase_result_of_the_earlier_layout_is_read_through_its_signed_pointer(store):
    _legacy_phase_result(store, KEY, "rbm0", _params(4))
    np.testing.assert_array_equal(WeightStore(store, "run1", KEY).get_phase_result("rbm0")["rbm0.W"],
                                  _params(4)["rbm0.W"])


@pytest.mark.parametrize("forgery", ["other key", "unsigned", "moved from another phase"])
def test_a_forged_or_unsigned_phase_result_is_absent_and_counted(store, forgery):
    weights = WeightStore(store, "run1", KEY)
    if forgery == "other key":
        _legacy_phase_result(store, OTHER_KEY, "rbm0", _params(6))
    elif forgery == "unsigned":
        data = _npz(_params(6))
        name = f"rbm0-{sha256_hex(data)}.npz"
        store.write_bytes(f"runs/run1/phases/{name}", data)
        pointer = {"file": name, "sha256": sha256_hex(data), "size_bytes": len(data)}
        store.write_bytes("runs/run1/phases/rbm0.json", json.dumps(pointer).encode())
    else:
        _legacy_phase_result(store, KEY, "rbm1", _params(6), as_phase="rbm0")
    assert weights.get_phase_result("rbm0") is None
    assert weights.refusals() == {"unauthenticated": 1}


def test_a_snapshot_ref_with_a_forged_mac_is_refused_without_reading(store):
    weights = WeightStore(store, "run1", KEY)
    ref = weights.put_version("rbm0", "a", 1, _params(1))
    forged = SnapshotRef(ref.run, ref.phase, ref.node, 2, ref.sha256, ref.mac)
    with pytest.raises(AuthenticationError):
        weights.get_version(forged)
