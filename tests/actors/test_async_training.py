"""Asynchronous decentralized training of a real RBM: three processes, disjoint shards, pub-sub merging."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import rbm
import storage
from rbm.datasets import load_digits01

pytestmark = pytest.mark.slow

# CD-1 with momentum: persistent chains (the RBM's default) are local to a node and do not survive merges.
MODEL = dict(n_components=64, learning_rate=0.1, batch_size=10, random_state=0, persistent=False, momentum=0.5,
             final_momentum=0.9)
EPOCHS = 20


def error_of(params, X):
    model = rbm.RBM(**MODEL).initialize(X.shape[1])
    model.set_parameters(params)
    return model.reconstruction_error(X)


def test_three_processes_on_disjoint_shards_match_one_process_on_all_data(store, processes):
    split = load_digits01()
    names = [f"trainer-{index}" for index in range(3)]
    # Before each epoch a node merges what is fresh, waiting at most 10 s for both peers' newest: a bounded
    # wait, not a barrier (versions published meanwhile are merged later or coalesced).
    for index, name in enumerate(names):
        config = dict(mode="train", store=store.url, run="digits", node=name, peers=names, secret="ab" * 16)
        processes.start(dict(config, seed=10 + index, shard=index, n_shards=3, model=MODEL, rounds=EPOCHS,
                             wait_s=10.0, min_fresh=2))  # fmt: skip
    # The reference: one process, all the data, the same number of epochs.
    reference = rbm.RBM(**MODEL).initialize(split.X_train.shape[1])
    untrained_error = reference.reconstruction_error(split.X_test)
    rng = np.random.default_rng(0)
    with threadpool_limits(1):  # as the node processes run; tiny GEMMs only lose to thread hand-offs
        for _ in range(EPOCHS):
            reference.train_partition(split.X_train, None, "rbm", rng)
    reference_error = reference.reconstruction_error(split.X_test)
    assert reference_error < 0.5 * untrained_error  # the reference itself learned
    errors = []
    for name in names:
        assert processes.wait(name, timeout_s=120) == 0, processes.log(name)
        params, stats = processes.result(name)
        errors.append(error_of(params, split.X_test))
        assert stats["merged"] >= EPOCHS // 2  # it really trained with its peers, not alone
    # What the driver does at the end of a phase: average the newest snapshot of every node.
    consolidated = error_of(storage.WeightStore(store, "digits", bytes.fromhex("ab" * 16)).consolidate("rbm").params,
                            split.X_test)  # fmt: skip
    print(f"held-out reconstruction error: one process {reference_error:.4f}, consolidated {consolidated:.4f}, "
          f"nodes {np.round(errors, 4)}")  # fmt: skip
    assert consolidated <= 1.10 * reference_error
    assert max(errors) <= 1.5 * reference_error  # each node alone (before consolidation) is close too
