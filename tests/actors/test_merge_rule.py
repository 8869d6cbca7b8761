"""The merge rule: w <- (1 - a) * w + a * mean(peers)."""

import numpy as np
import pytest
from support.numerics import assert_within, unit_roundoff

from actors import MergeError, merge_snapshots


def params(rng, scale=1.0):
    return {"W": (scale * rng.standard_normal((6, 4))).astype(np.float32), "b": rng.standard_normal(6).astype(np.float32)}


def blend_bound(own: np.ndarray, peers: list[np.ndarray], alpha: float) -> np.ndarray:
    """How far two float32 evaluations of ``(1 - a) own + a mean(peers)`` may be apart, element by element:
    each rounds at most m + 2 times (m peers), each time by at most u times the terms' magnitudes."""
    terms = (1 - alpha) * np.abs(own) + alpha / len(peers) * np.sum(np.abs(peers), axis=0)
    return 2 * (len(peers) + 2) * unit_roundoff(np.float32) * terms


def test_the_default_merge_is_the_plain_average_of_self_and_fresh_peers():
    rng = np.random.default_rng(0)
    own, peers = params(rng), [params(rng), params(rng), params(rng)]
    merged = merge_snapshots(own, peers)
    for name in own:
        expected = np.mean([own[name]] + [peer[name] for peer in peers], axis=0)
        assert_within(merged[name], expected, blend_bound(own[name], [peer[name] for peer in peers], 3 / 4), name)
        assert merged[name].dtype == np.float32


def test_an_explicit_alpha_weighs_the_peers_mean():
    rng = np.random.default_rng(1)
    own, peers = params(rng), [params(rng), params(rng)]
    merged = merge_snapshots(own, peers, alpha=0.25)
    expected = 0.75 * own["W"] + 0.25 * (peers[0]["W"] + peers[1]["W"]) / 2
    assert_within(merged["W"], expected, blend_bound(own["W"], [peer["W"] for peer in peers], 0.25), "W")


def test_merging_nothing_returns_an_independent_copy_of_own():
    rng = np.random.default_rng(2)
    own = params(rng)
    merged = merge_snapshots(own, [])
    merged["W"][0, 0] += 1.0
    assert merged["W"][0, 0] != own["W"][0, 0]
    np.testing.assert_array_equal(merged["b"], own["b"])


def test_merge_does_not_modify_its_inputs():
    rng = np.random.default_rng(3)
    own, peer = params(rng), params(rng)
    before = {name: value.copy() for name, value in own.items()}, {name: value.copy() for name, value in peer.items()}
    merge_snapshots(own, [peer])
    for original, now in zip(before, (own, peer)):
        for name in original:
            np.testing.assert_array_equal(original[name], now[name])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_peer_with_non_finite_values_is_refused(bad):
    rng = np.random.default_rng(4)
    own, peer = params(rng), params(rng)
    peer["W"][2, 1] = bad
    with pytest.raises(MergeError, match="NaN or Inf"):
        merge_snapshots(own, [peer])


def test_own_non_finite_weights_are_reported_as_divergence():
    rng = np.random.default_rng(5)
    own = params(rng)
    own["b"][0] = np.nan
    with pytest.raises(MergeError, match="diverged"):
        merge_snapshots(own, [params(rng)])
    with pytest.raises(MergeError, match="diverged"):  # own is checked even where the peers were checked before
        merge_snapshots(own, [params(rng)], checked=True)


def test_peers_checked_before_are_not_checked_again_and_merge_alike():
    # The node's handle checks each peer against its own weights before it merges (NodeHandle.merge_and_get);
    # merge_snapshots(checked=True) takes that check as done and merges exactly as it does after its own.
    rng = np.random.default_rng(6)
    own, peers = params(rng), [params(rng), params(rng)]
    expected = merge_snapshots(own, peers)
    merged = merge_snapshots(own, peers, checked=True)
    for name in own:
        np.testing.assert_array_equal(merged[name], expected[name])
    peers[0]["W"][0, 0] = np.nan
    assert np.isnan(merge_snapshots(own, peers, checked=True)["W"][0, 0])  # not refused: the caller checked


def test_mismatched_shapes_or_names_are_refused():
    rng = np.random.default_rng(6)
    own = params(rng)
    wrong_shape = {"W": np.zeros((4, 6), np.float32), "b": own["b"]}
    wrong_names = {"W": own["W"], "c": own["b"]}
    with pytest.raises(MergeError, match="shape"):
        merge_snapshots(own, [wrong_shape])
    with pytest.raises(MergeError, match="names"):
        merge_snapshots(own, [wrong_names])


def test_alpha_outside_the_unit_interval_is_refused():
    rng = np.random.default_rng(7)
    with pytest.raises(MergeError, match="alpha"):
        merge_snapshots(params(rng), [params(rng)], alpha=1.5)


def test_repeated_pairwise_merging_contracts_a_population_to_a_point_inside_its_start():
    # Gossip averaging: each round every member merges one random other; the spread shrinks to zero and
    # the common value is a convex combination of the starting weights.
    rng = np.random.default_rng(8)
    population = [params(rng, scale=10.0) for _ in range(5)]
    start = np.stack([member["W"] for member in population])
    for _ in range(60):
        order = rng.permutation(5)
        population = [merge_snapshots(population[i], [population[(i + 1 + rng.integers(4)) % 5]]) for i in order]
    spread = max(np.abs(member["W"] - population[0]["W"]).max() for member in population)
    assert spread < 1e-3
    assert np.all(population[0]["W"] >= start.min(axis=0) - 1e-4) and np.all(population[0]["W"] <= start.max(axis=0) + 1e-4)
