"""What ``bench_simulate.py --model`` simulates: the models, their data, their pretraining, their speed."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np

import rbm
from rbm.datasets import load_digits01, load_digits28, shift_images

#: Samples/s of one node's fine-tuning of the 784-500-500 DBN (bench_spark.py: 1 node, 10.1k), which the
#: small DBN on digits28 stands in for: the simulation clock's default rate.
STAND_IN_RATE = 10_100.0


@dataclass(frozen=True)
class Workload:
    """What ``--model`` simulates: a model on its data, the epochs of its simulated (last) phase, the
    epochs of each pretraining phase run beforehand in one process, and the clock's samples/s
    (``"measured"``: the model's own, in-process on one core)."""

    title: str
    data: str  # "digits28" or "digits"
    epochs: int
    pretrain_epochs: int = 0
    rate: str = "measured"


WORKLOADS = {
    "dbn-digits28": Workload("DBN 784-{hidden}-10 fine-tuning on digits28", "digits28", 6, 1, str(STAND_IN_RATE)),
    "dbn-digits": Workload("DBN(64, 64) fine-tuning on digits", "digits", 10, 3),
    "lenet-digits28": Workload("LeNet on digits28", "digits28", 2),
}
TEST_SHIFTS = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]


def load_data(quick: bool, model: str = "dbn-digits28"):
    """Training rows and held-out rows: digits28's test images shifted by up to one pixel (more test
    rows), as LeNet's images or flat; digits split as ``bench_scaling.py`` splits it."""
    if WORKLOADS[model].data == "digits":
        split = load_digits01(test_fraction=0.25, random_state=0)
        return split.X_train, split.y_train, split.X_test, split.y_test
    split = load_digits28(shifts=TEST_SHIFTS if quick else None, flatten=model != "lenet-digits28")
    X_test = shift_images(split.X_test.reshape(-1, 28, 28), TEST_SHIFTS).reshape(-1, *split.X_test.shape[1:])
    return split.X_train, split.y_train, X_test, np.tile(split.y_test, len(TEST_SHIFTS))


def pretrained_model(X: np.ndarray, y: np.ndarray, hidden: int, seed: int, model: str = "dbn-digits28"):
    """The start of every simulated node: the model initialized, a DBN's RBM layers pretrained in one
    process (the workload's epochs per layer)."""
    base = {"dbn-digits28": lambda: rbm.DBN((hidden,), random_state=seed),
            "dbn-digits": lambda: rbm.DBN((64, 64), random_state=seed),
            "lenet-digits28": lambda: rbm.lenet(random_state=seed)}[model]()
    base.initialize(X.shape[1] if X.ndim == 2 else X.shape[1:], 10)
    for phase in base.phases()[:-1]:
        for epoch in range(WORKLOADS[model].pretrain_epochs):
            base.train_partition(X, None, phase, np.random.default_rng([seed, epoch]))
    return base


def measure_rate(model, X: np.ndarray, y: np.ndarray) -> float:
    """Samples/s of one replica's simulated phase (best of 3 passes over up to 2,000 rows)."""
    probe = copy.deepcopy(model)
    rows = min(2000, len(X))
    best = float("inf")
    for attempt in range(3):
        started = time.perf_counter()
        probe.train_partition(X[:rows], y[:rows], probe.phases()[-1], np.random.default_rng(attempt))
        best = min(best, time.perf_counter() - started)
    return rows / best
