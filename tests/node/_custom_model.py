"""A model of the user's own for the distributed trainer: a softmax regression in numpy.

Only the required seam of :class:`rbm.TrainableModel` plus ``predict`` / ``score`` (none of the
optional methods, no ``save``), registered with :func:`rbm.register_model`.  The tests ship this
file to the executors with ``SparkContext.addPyFile``, as a user ships their model's module.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import numpy as np

import rbm


@rbm.register_model("test-softmax")
class SoftmaxRegression:
    """Multinomial logistic regression trained by minibatch gradient descent; one phase, ``"train"``."""

    def __init__(self, learning_rate: float = 0.5, batch_size: int = 16, epochs: int = 10, seed: int = 0) -> None:
        self.learning_rate, self.batch_size, self.epochs, self.seed = learning_rate, batch_size, epochs, seed
        self._scale = 1.0
        self._hook = None

    # ------------------------------------------------------------------ the seam
    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "SoftmaxRegression":
        return cls(**{name: value for name, value in spec.items() if name != "kind"})

    def to_spec(self) -> dict:
        return {"kind": "test-softmax", "learning_rate": self.learning_rate, "batch_size": self.batch_size,
                "epochs": self.epochs, "seed": self.seed}

    def initialize(self, n_features: Any, classes: Any = None) -> "SoftmaxRegression":
        self.classes_ = np.arange(classes) if np.isscalar(classes) else np.asarray(classes)
        self.n_features_in_ = int(np.prod(n_features))
        self.W = np.zeros((self.n_features_in_, len(self.classes_)))
        self.b = np.zeros(len(self.classes_))
        return self

    def phases(self) -> list[str]:
        return ["train"]

    def input_bounds(self) -> None:
        return None

    def parameters(self, phase: str | None = None) -> dict[str, np.ndarray]:
        return {"W": self.W.copy(), "b": self.b.copy()}

    def set_parameters(self, params: Mapping[str, np.ndarray]) -> None:
        self.W[...] = params["W"]
        self.b[...] = params["b"]

    def train_partition(self, X: np.ndarray, y: np.ndarray | None, phase: str, rng: np.random.Generator) -> dict:
        began, losses = time.perf_counter(), []
        X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
        order = rng.permutation(len(X))
        for start in range(0, len(X), self.batch_size):
            rows = order[start:start + self.batch_size]
            proba = self._proba(X[rows])
            losses.append(-np.mean(np.log(proba[np.arange(len(rows)), y[rows]] + 1e-12)))
            proba[np.arange(len(rows)), y[rows]] -= 1.0
            rate = self.learning_rate * self._scale / len(rows)
            self.W -= rate * X[rows].T @ proba
            self.b -= rate * proba.sum(axis=0)
            if self._hook is not None:
                self._hook()
        return {"samples": len(X), "seconds": time.perf_counter() - began, "loss": float(np.mean(losses or [0.0]))}

    def set_learning_rate_scale(self, factor: float) -> None:
        self._scale = float(factor)

    def set_minibatch_hook(self, hook: Any) -> None:
        self._hook = hook

    # ------------------------------------------------------------------ one process, and its answers
    def fit(self, X: np.ndarray, y: np.ndarray) -> "SoftmaxRegression":
        classes = np.unique(y)
        self.initialize(X.shape[1:], classes)
        indices = np.searchsorted(classes, y)
        rng = np.random.default_rng(self.seed)
        for _ in range(self.epochs):
            self.train_partition(X, indices, "train", rng)
        return self

    def _proba(self, X: np.ndarray) -> np.ndarray:
        logits = np.asarray(X, dtype=np.float64).reshape(len(X), -1) @ self.W + self.b
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self._proba(X)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.classes_[np.argmax(self._proba(X), axis=1)]

    def score(self, X: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(self.predict(X) == np.asarray(y)))


@rbm.register_model("test-softmax-broken")
class BrokenSoftmaxRegression(SoftmaxRegression):
    """The softmax regression with a bug of its user's: its ``partitions_before_failing + 1``-th partition in a
    process raises (a RuntimeError: no input error the trainer reports, the same on every retry)."""

    def __init__(self, learning_rate: float = 0.5, batch_size: int = 16, epochs: int = 10, seed: int = 0,
                 partitions_before_failing: int = 2) -> None:
        super().__init__(learning_rate, batch_size, epochs, seed)
        self.partitions_before_failing = partitions_before_failing
        self._trained = 0

    def to_spec(self) -> dict:
        return {**super().to_spec(), "kind": "test-softmax-broken",
                "partitions_before_failing": self.partitions_before_failing}

    def train_partition(self, X: np.ndarray, y: np.ndarray | None, phase: str, rng: np.random.Generator) -> dict:
        if self._trained >= self.partitions_before_failing:
            raise RuntimeError("the user's model broke")
        self._trained += 1
        return super().train_partition(X, y, phase, rng)
