"""The trainable-model seam of :class:`~rbm.RBM`: its one phase, parameters, ``train_partition``,
the scaling hooks, spec and save/load.

A mixin so that ``_rbm.py`` stays about the model itself (as :mod:`rbm.boltzmann._dbn_seam` for the
DBN).  Parameter names: ``W`` (n_features, n_components), ``hbias``, ``vbias``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping

import numpy as np

from .._gpu import download_all
from .._model import MinibatchHook, ScheduleClock, copy_parameters, empty_partition_metrics, is_empty, save_model
from .._params import SpecConstructors, check_learning_rate_scale, spec_from_params
from . import _cd

__all__ = ["PARAMETER_NAMES", "RBMSeam"]

PARAMETER_NAMES = ("W", "hbias", "vbias")


class RBMSeam(SpecConstructors, MinibatchHook, ScheduleClock):
    """Mixin: the distributed trainer's view of an RBM (see :class:`rbm.RBM`)."""

    def set_learning_rate_scale(self, factor: float) -> None:
        """Multiply the learning rate of every following update by ``factor`` (default 1.0).

        Not a hyperparameter: it is not in ``get_params``, the spec or the saved file.  The
        distributed trainer uses it to scale learning rates with the number of nodes.
        """
        self._learning_rate_scale = check_learning_rate_scale(factor)

    def takes_outer_step(self, phase: str) -> bool:
        """False: the nodes merge an RBM's phase plainly, without the outer step (docs/scaling-out.md).

        Measured on Spark (``scripts/bench_scaling.py --spark --kind rbm``, digits28, 5 epochs, 3 runs;
        one process 0.0257): the test reconstruction error of 4 / 8 / 16 nodes 0.0207 / 0.0200 / 0.0200
        merging plainly, 0.0230 / 0.0235 / 0.0232 with the outer step at 0.7/0.8.
        """
        return False

    def max_learning_rate_factor(self) -> float | None:
        """1 with persistent chains, else None (the trainer's cap): how far the scaling rule may raise the rates.

        Persistent chains follow the model only while each update changes it little (Tieleman,
        2008), so the trainer's factor for more nodes comes as smaller minibatches instead.
        Measured (``scripts/bench_scaling.py``, 8 simulated nodes on digits, 6 seeds, one node 0.0411):
        test reconstruction error with the rates taking at most 4 / 2 / 1 of the factor 0.0461 /
        0.0449 / 0.0445 at 8 partitions per node and epoch, 0.0441 / 0.0432 / 0.0427 at 16, 0.0465 /
        0.0422 / 0.0406 at 32.
        """
        return 1.0 if self.persistent else None

    def spec_for_batch_size(self, batch_size: int) -> dict:
        """This RBM's spec with minibatches of ``batch_size`` rows and its persistent chains kept.

        The distributed trainer's replicas train in smaller minibatches where its scaling rule
        says so (:func:`rbm.spec_for_batch_size`); each keeps the fit's ``n_chains`` (by default
        its ``batch_size``) for the negative phase.  Measured (``scripts/bench_scaling.py``, RBM(64)
        on digits, 6 seeds, one node 0.0408): 8 nodes training in minibatches of 1 end at a test
        reconstruction error of 0.0445 with one chain each, 0.0425 with 10.
        """
        return {**self.to_spec(), "batch_size": int(batch_size), "n_chains": self.n_chains or self.batch_size}

    def to_spec(self) -> dict:
        """JSON-able hyperparameters, ``{"kind": "rbm", ...}``."""
        return spec_from_params("rbm", self.get_params(deep=False))

    def input_bounds(self) -> tuple[float, float] | None:
        """The range every input value must lie in: ``(0, 1)`` for Bernoulli visible units, else None."""
        return (0.0, 1.0) if self.visible == "bernoulli" else None

    def phases(self) -> list[str]:
        """A single training phase, ``["rbm"]``."""
        return ["rbm"]

    def parameters(self, phase: str | None = None) -> dict[str, np.ndarray]:
        """Host copies ``{"W": (n_features, n_components), "hbias", "vbias"}``."""
        if phase not in (None, "rbm"):
            raise ValueError(f"unknown phase {phase!r} for an RBM; phases are ['rbm']")
        self._require_fitted()
        return download_all({name: getattr(self, "_" + name) for name in PARAMETER_NAMES})  # one copy from a GPU

    def set_parameters(self, params: Mapping[str, np.ndarray]) -> None:
        """Copy the given named arrays into the model (in place, on its device)."""
        unknown = sorted(set(params) - set(PARAMETER_NAMES))
        if unknown:
            raise ValueError(f"unknown RBM parameter names {unknown}; expected some of {list(PARAMETER_NAMES)}")
        if not self.__sklearn_is_fitted__():
            if "W" not in params:
                raise ValueError("the RBM is not initialized: call initialize(n_features) or pass 'W'")
            self.initialize(np.shape(params["W"])[0])
        copy_parameters([(name, value, getattr(self, "_" + name)) for name, value in params.items()], self._xp)

    def train_partition(self, X: Any, y: Any, phase: str, rng: np.random.Generator) -> dict:
        """One pass over a partition; ``loss`` is the reconstruction error (MSE per unit).

        ``y`` is ignored; an empty partition is skipped.
        """
        if phase != "rbm":
            raise ValueError(f"unknown phase {phase!r} for an RBM; phases are ['rbm']")
        if is_empty(X):  # empty partitions are simply skipped
            return empty_partition_metrics()
        started = time.perf_counter()
        X = self._prepare(X)
        loss = self._partition_pass(self._training_data(X), rng)
        return {"samples": int(len(X)), "seconds": time.perf_counter() - started, "loss": float(loss)}

    def _partition_pass(self, data: Any, rng: np.random.Generator) -> float:
        """A pass of the distributed seam (:meth:`train_partition`, a DBN's ``rbmK`` phases), sampling from ``rng``.

        The Gibbs samples come from the partition's generator, not from the one :meth:`initialize`
        seeded from ``random_state``: the nodes of a fit build their replicas from one spec, and
        with one sampler stream their persistent chains would coincide after every merge, so that
        ``n`` averaged nodes learned from one node's negative samples.  (Measured: 8 replicas
        merged after every minibatch of 2 rows ended 19% above one process's reconstruction error
        sharing a stream, and 1% apart drawing their own.)
        """
        self._sampler = _cd.device_generator(rng, self._xp)
        return self._train_pass(data, rng)

    def save(self, path: str | os.PathLike) -> None:
        """Write the spec and the weights to one ``.npz`` (see :func:`rbm.load_model`)."""
        save_model(path, self.to_spec(), self.parameters())

    def _restore(self, spec: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        self.initialize(int(arrays["W"].shape[0]))
        self.set_parameters({name: arrays[name] for name in PARAMETER_NAMES})
