"""The outer step: d = x - w, v <- mu v + d, x <- x - eta (d + mu v) (Nesterov), w <- x.

The expected values are worked out by hand in the comments; a wrong sign, eta and mu swapped,
a dropped momentum or plain (non-Nesterov) momentum each give other values (listed beside them).
"""

import numpy as np
import pytest
from support.numerics import assert_within, unit_roundoff

from actors import (MergeError, OuterState, check_outer_settings, merge_snapshots, outer_settings_for_gain, outer_step,
                    outer_step_enabled)


def f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def few_roundings(expected: np.ndarray) -> np.ndarray:
    """Six float32 operations on terms of magnitude at most 4 (these examples'): each rounds by at most u of 4."""
    return np.full(expected.shape, 6 * 4 * unit_roundoff(np.float32))


def test_one_outer_step_moves_the_anchor_by_the_nesterov_step_on_the_change():
    state = OuterState(anchor={"W": f32(1.0, 2.0)}, momentum={"W": f32(0.5, -1.0)})
    weights = {"W": f32(0.5, 2.5)}
    new_weights, new_state = outer_step(state, weights, learning_rate=0.5, momentum=0.8)
    # d = x - w = (0.5, -0.5); v = 0.8 (0.5, -1) + d = (0.9, -1.3); d + 0.8 v = (1.22, -1.54);
    # x = (1, 2) - 0.5 (1.22, -1.54) = (0.39, 2.77).
    # Wrong sign: (1.61, 1.23); eta and mu swapped: (0.3, 2.8); momentum dropped (v = d): (0.55, 2.45);
    # plain momentum (x - eta v): (0.55, 2.65).
    assert_within(new_weights["W"], f32(0.39, 2.77), few_roundings(f32(0, 0)), "weights")
    assert_within(new_state.momentum["W"], f32(0.9, -1.3), few_roundings(f32(0, 0)), "momentum")
    np.testing.assert_array_equal(new_state.anchor["W"], new_weights["W"])  # the new anchor is the new weights
    assert new_weights["W"].dtype == np.float32 and new_state.momentum["W"].dtype == np.float32
    np.testing.assert_array_equal(state.anchor["W"], f32(1.0, 2.0))  # the inputs are left as they were
    np.testing.assert_array_equal(state.momentum["W"], f32(0.5, -1.0))
    np.testing.assert_array_equal(weights["W"], f32(0.5, 2.5))


def test_a_merge_moves_the_anchor_with_the_weights_and_leaves_the_momentum():
    state = OuterState(anchor={"W": f32(1.0, 2.0)}, momentum={"W": f32(0.5, -1.0)})
    before, after = {"W": f32(1.5, 1.0)}, {"W": f32(2.0, 0.0)}
    moved = state.moved(before, after)
    # x + (after - before) = (1, 2) + (0.5, -1) = (1.5, 1); the momentum as it was.
    assert_within(moved.anchor["W"], f32(1.5, 1.0), few_roundings(f32(0, 0)), "anchor")
    np.testing.assert_array_equal(moved.momentum["W"], f32(0.5, -1.0))
    np.testing.assert_array_equal(state.anchor["W"], f32(1.0, 2.0))  # the inputs are left as they were
    with pytest.raises(MergeError, match="'W' has shape"):
        state.moved({"W": f32(1.0)}, after)


def test_a_peers_snapshot_and_the_nodes_own_change_give_the_stated_update_and_the_momentum_carries_it_on():
    state = OuterState.start({"W": f32(1.0, 2.0)})  # anchored at the node's weights, no momentum yet
    np.testing.assert_array_equal(state.momentum["W"], f32(0.0, 0.0))
    own = {"W": f32(1.0, 2.0)}
    merged = merge_snapshots(own, [{"W": f32(3.0, 0.0)}])  # (x + peer) / 2 = (2, 1)
    state = state.moved(own, merged)  # the merge moves the anchor: (2, 1)
    trained = {"W": merged["W"] + f32(-0.5, 0.25)}  # the node's own training: w = (1.5, 1.25)
    first, state = outer_step(state, trained, learning_rate=0.7, momentum=0.9)
    # d = (2, 1) - (1.5, 1.25) = (0.5, -0.25), the training alone; v = d; d + 0.9 v = 1.9 d = (0.95, -0.475);
    # x = (2, 1) - 0.7 (0.95, -0.475) = (1.335, 1.3325).  With the anchor left where the merge found it
    # (the merge's change in d as well): (1.665, 1.0025).
    assert_within(first["W"], f32(1.335, 1.3325), few_roundings(f32(0, 0)), "first step")
    second, state = outer_step(state, {"W": first["W"] + f32(0.1, -0.1)}, learning_rate=0.7, momentum=0.9)
    # d = (-0.1, 0.1); v = 0.9 (0.5, -0.25) + d = (0.35, -0.125); d + 0.9 v = (0.215, -0.0125);
    # x = (1.335, 1.3325) - 0.7 (0.215, -0.0125) = (1.1845, 1.34125).  Without the momentum the
    # second step would give (1.405, 1.2625).
    assert_within(second["W"], f32(1.1845, 1.34125), few_roundings(f32(0, 0)), "second step")
    assert_within(state.momentum["W"], f32(0.35, -0.125), few_roundings(f32(0, 0)), "momentum")


def test_an_outer_rate_of_one_without_momentum_is_plain_merging_and_is_skipped():
    rng = np.random.default_rng(0)
    anchor = {"W": rng.standard_normal((5, 3)).astype(np.float32)}
    weights = {"W": rng.standard_normal((5, 3)).astype(np.float32)}
    new_weights, _ = outer_step(OuterState.start(anchor), weights, learning_rate=1.0, momentum=0.0)
    # x - (x - w): two roundings of terms of magnitude |x| + |w|.
    assert_within(new_weights["W"], weights["W"], 2 * unit_roundoff(np.float32) * (np.abs(anchor["W"]) +
                                                                                     np.abs(weights["W"])), "W")
    assert not outer_step_enabled(1.0, 0.0)
    assert outer_step_enabled(1.0, 0.5) and outer_step_enabled(0.7, 0.0)


def test_weights_or_a_momentum_of_another_layout_are_refused_naming_the_parameter():
    state = OuterState.start({"W": f32(1.0, 2.0), "b": f32(0.0)})
    with pytest.raises(MergeError, match="names"):
        outer_step(state, {"W": f32(1.0, 2.0)}, 0.7, 0.9)
    with pytest.raises(MergeError, match="'W' has shape"):
        outer_step(state, {"W": f32(1.0, 2.0, 3.0), "b": f32(0.0)}, 0.7, 0.9)
    with pytest.raises(MergeError, match="outer momentum"):
        OuterState.start({"W": f32(1.0, 2.0)}, {"W": f32(1.0)})


@pytest.mark.parametrize("rate, momentum, message", [(0.0, 0.9, "outer_learning_rate"), (2.5, 0.9, "outer_learning_rate"),
                                                     (0.7, 1.0, "outer_momentum"), (0.7, -0.1, "outer_momentum")])
def test_outer_settings_outside_the_stable_range_are_refused(rate, momentum, message):
    with pytest.raises(ValueError, match=message):
        check_outer_settings(rate, momentum)


def test_the_step_of_a_gain_moves_a_node_at_once_by_its_own_progress_and_by_the_gain_on_a_steady_change():
    assert outer_settings_for_gain(1.0) == (1.0, 0.0)  # plain merging
    for gain, expected in ((2.0, (0.5858, 0.7071)), (2.81, (0.5548, 0.8026)), (3.5, (0.5420, 0.8452))):
        eta, mu = outer_settings_for_gain(gain)
        # mu = sqrt(1 - 1/g), eta = 1 / (1 + mu); at 3.5 the old 0.7/0.8 would give 1.26 at once.
        assert (eta, mu) == pytest.approx(expected, abs=1e-4)
        assert eta * (1 + mu) == pytest.approx(1.0, rel=1e-12)
        assert eta / (1 - mu) == pytest.approx(gain, rel=1e-12)
        # The same with outer_step itself: a steady change c per step moves the node c at once (the
        # first step: eta (1 + mu) c) and, once the momentum has built up, g c a step.
        state, weights, moved = OuterState.start({"W": np.zeros(1)}), {"W": np.zeros(1)}, []
        for _ in range(400):
            before = weights["W"].copy()
            weights, state = outer_step(state, {"W": weights["W"] + 1.0}, eta, mu)
            moved.append(float(weights["W"][0] - before[0]))
        assert moved[0] == pytest.approx(1.0, rel=1e-12) and moved[-1] == pytest.approx(gain, rel=1e-9)


@pytest.mark.parametrize("gain", [0.5, 0.999, float("nan"), float("inf")])
def test_a_gain_below_one_or_not_finite_is_refused(gain):
    with pytest.raises(ValueError, match="gain must be a finite number >= 1"):
        outer_settings_for_gain(gain)
