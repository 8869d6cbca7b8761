#!/usr/bin/env python
"""How well RBM settings learn: the table behind the RBM's defaults (docs/models.md, Defaults and quality).

Two kinds of problems, mean over seeds (0, 1, 2 unless ``--seeds``), one BLAS thread:

* **digits**: RBM features + logistic regression on scikit-learn's nudged digits, with its RBM
  example's own arguments (``n_components=100, learning_rate=0.06, n_iter=10``; the
  classifier with ``tol=1e-4``), against scikit-learn's ``BernoulliRBM``;
* **tiny problems, exact log-likelihood** (mean ``log p`` of the distinct training patterns,
  the partition function summed over every visible state): 3x3 bars-and-stripes (9-12 RBM,
  10 copies of the 14 patterns; start -6.24, optimum -log 14 = -2.64) after three budgets,
  4x4 bars-and-stripes (16-16 RBM, 10 copies of the 30 patterns; optimum -log 30 = -3.40) and
  32 random 8-pixel patterns (8-8 RBM, 5 copies; optimum -log 32 = -3.47), batch 10.

Every row but scikit-learn's is :class:`rbm.RBM` with its defaults except what the row names;
"plain CD-1" is CD-1 without momentum at a constant learning rate.

Run:  .venv/bin/python scripts/bench_rbm_defaults.py [--quick] [--seeds 0 1 2 3 4 5]
"""

from __future__ import annotations

if __name__ == "__main__":  # started as a program: where the project is not importable, inside its virtualenv
    import _venv

    _venv.ensure()

import argparse
import time
import warnings

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import BernoulliRBM
from threadpoolctl import threadpool_limits

from rbm import RBM
from rbm.boltzmann import exact_log_likelihood
from rbm.datasets import bars_and_stripes, load_nudged_digits

from _results import BenchRun, add_json_option

EXAMPLE = dict(n_components=100, learning_rate=0.06, n_iter=10)  # scikit-learn's RBM example's arguments
PLAIN_CD1 = dict(persistent=False, momentum=0.0, final_momentum=0.0, anneal_fraction=0.0)
EARLIER = dict(weight_init_std=0.01, anneal_fraction=0.0)  # BernoulliRBM's initial weights, constant rate

# Rows of the table: RBM hyperparameters on top of the defaults.
SETTINGS = {
    "plain CD-1, initial weights 0.01": dict(PLAIN_CD1, weight_init_std=0.01),
    "plain CD-1": PLAIN_CD1,
    "CD-1, momentum 0.5 -> 0.9, weight decay 1e-4, init 0.01": dict(
        persistent=False, momentum=0.5, final_momentum=0.9, weight_decay=1e-4, **EARLIER),
    "persistent CD-1, init 0.01, constant (earlier default)": EARLIER,
    "persistent CD-1, init 0.01, annealed": dict(weight_init_std=0.01),
    "persistent CD-1, constant rate": dict(anneal_fraction=0.0),
    "persistent CD-1, annealed over the last half": dict(anneal_fraction=0.5),
    "persistent CD-1, annealed over all of fit": dict(anneal_fraction=1.0),
    "defaults: persistent CD-1, annealed over the last quarter": {},
}


class Problem:
    """A tiny binary data set, the RBM size and the training budgets it is measured with."""

    def __init__(self, name: str, patterns: np.ndarray, copies: int, n_components: int,
                 budgets: list[tuple[float, int]]) -> None:
        self.name, self.patterns, self.n_components, self.budgets = name, patterns, n_components, budgets
        self.X = np.tile(patterns, (copies, 1))

    def log_likelihood(self, settings: dict, learning_rate: float, passes: int, seed: int) -> float:
        model = RBM(self.n_components, learning_rate=learning_rate, batch_size=10, n_iter=passes,
                    dtype=np.float64, random_state=seed, **settings).fit(self.X)
        p = model.parameters()
        return exact_log_likelihood(p["W"], p["hbias"], p["vbias"], self.patterns)


def random_patterns(n_patterns: int, n_pixels: int, seed: int = 0) -> np.ndarray:
    """``n_patterns`` distinct random binary rows of ``n_pixels``."""
    codes = np.random.default_rng(seed).choice(2**n_pixels, size=n_patterns, replace=False)
    return ((codes[:, None] >> np.arange(n_pixels)) & 1).astype(np.float64)


PROBLEMS = [
    Problem("bars-and-stripes 3x3", bars_and_stripes(3), 10, 12, [(0.05, 100), (0.05, 400), (0.01, 1600)]),
    Problem("bars-and-stripes 4x4", bars_and_stripes(4), 10, 16, [(0.05, 100), (0.02, 500)]),
    Problem("random 8-pixel", random_patterns(32, 8), 5, 8, [(0.05, 400), (0.05, 2000)]),
]


def digits_accuracy(model: object, split: object) -> float:
    """RBM features + logistic regression (scikit-learn's example, with tol=1e-4) on the nudged digits."""
    features = model.fit(split.X_train).transform(split.X_train)
    classifier = LogisticRegression(solver="newton-cg", C=6000, tol=1e-4, max_iter=2000).fit(features, split.y_train)
    return classifier.score(model.transform(split.X_test), split.y_test)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="digits and 3x3 bars-and-stripes only")
    add_json_option(parser)
    args = parser.parse_args()
    run = BenchRun(__file__, args).start()
    problems = PROBLEMS[:1] if args.quick else PROBLEMS
    split = load_nudged_digits()
    columns = [f"{p.name} lr {lr} x{n}" for p in problems for lr, n in p.budgets]
    print(f"mean over seeds {args.seeds}; digits: RBM features + logistic regression, {EXAMPLE}; "
          "tiny problems: exact mean log-likelihood, batch 10")
    print("columns: digits accuracy | " + " | ".join(columns) + "\n")
    started = time.perf_counter()
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = np.mean([digits_accuracy(BernoulliRBM(random_state=seed, **EXAMPLE), split) for seed in args.seeds])
        print(f"{'scikit-learn BernoulliRBM':58s} {theirs:7.4f}", flush=True)
        rows = [["scikit-learn BernoulliRBM", theirs, *([None] * len(columns))]]
        for name, settings in SETTINGS.items():
            accuracy = np.mean([digits_accuracy(RBM(random_state=seed, **EXAMPLE, **settings), split)
                                for seed in args.seeds])
            likelihoods = [np.mean([p.log_likelihood(settings, lr, n, seed) for seed in args.seeds])
                           for p in problems for lr, n in p.budgets]
            print(f"{name:58s} {accuracy:7.4f}  " + " ".join(f"{value:6.2f}" for value in likelihoods), flush=True)
            rows.append([name, accuracy, *likelihoods])
    print(f"\n{time.perf_counter() - started:.0f} s")
    run.table(f"RBM settings, mean over seeds {args.seeds}", ["setting", "digits accuracy", *columns], rows,
              f"Digits: RBM features + logistic regression, {EXAMPLE}. The other columns: the exact mean "
              "log-likelihood of the training patterns (batch 10) after fit at the learning rate x passes shown.")
    run.finish()


if __name__ == "__main__":
    main()
