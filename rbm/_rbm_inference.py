"""Inference methods of :class:`~rbm.RBM`: hidden and visible expectations, free energy,
reconstruction, Gibbs sampling and the pseudo-likelihood.

A mixin so that ``_rbm.py`` stays about training; every method works on the model's
device arrays (``_W`` of shape (n_features, n_components), ``_hbias``, ``_vbias``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _cd
from ._backend import make_rng, to_device, to_host

__all__ = ["RBMInference"]


class RBMInference:
    """Mixin: inference for a fitted RBM (see :class:`rbm.RBM`)."""

    def _mean_hiddens(self, v: Any) -> Any:
        """``p(h = 1 | v)``: (n, n_features) device array -> (n, n_components)."""
        hidden = v @ self._W
        hidden += self._hbias
        return _cd.sigmoid_(hidden)

    def _mean_visibles(self, h: Any) -> Any:
        """``E[v | h]``: (n, n_components) -> (n, n_features); sigmoid or linear (Gaussian)."""
        visible = h @ self._W.T
        visible += self._vbias
        return visible if self.visible == "gaussian" else _cd.sigmoid_(visible)

    def _reconstruction_mse(self, v: Any) -> float:
        """Mean squared error per visible unit of the mean-field reconstruction of ``v``."""
        difference = self._mean_visibles(self._mean_hiddens(v)) - v
        return float((difference * difference).mean())

    # ------------------------------------------------------------------ inference (public)
    def _run(self, X: Any, compute: Any) -> np.ndarray:
        """Validate host ``X``, apply ``compute`` on the device, return host output in X's float dtype."""
        self._require_fitted()
        out_dtype = np.asarray(X).dtype if np.asarray(X).dtype in (np.float32, np.float64) else self._dtype
        data = to_device(self._check_input(X), self._xp)
        return to_host(compute(data)).astype(out_dtype, copy=False)

    def transform(self, X: Any) -> np.ndarray:
        """Hidden activation probabilities ``p(h=1 | v=X)``, shape (n_samples, n_components)."""
        return self._run(X, self._mean_hiddens)

    def reconstruct(self, X: Any) -> np.ndarray:
        """Mean-field reconstruction ``E[v | h = p(h | X)]``, shape (n_samples, n_features)."""
        return self._run(X, lambda v: self._mean_visibles(self._mean_hiddens(v)))

    def reconstruction_error(self, X: Any) -> float:
        """Mean squared error per visible unit between ``X`` and :meth:`reconstruct`."""
        self._require_fitted()
        return self._reconstruction_mse(to_device(self._check_input(X), self._xp))

    def free_energy(self, X: Any) -> np.ndarray:
        """Free energy ``F(v)`` of each row, shape (n_samples,)."""
        return self._run(
            X, lambda v: _cd.free_energy(v, self._W, self._hbias, self._vbias, self.visible == "gaussian")
        )

    def gibbs(self, v: Any) -> np.ndarray:
        """One Gibbs step ``v -> h -> v'`` with samples drawn from the model's generator.

        Returns 0/1 floats for Bernoulli units (``BernoulliRBM`` returns booleans) and
        ``mean + N(0, 1)`` noise for Gaussian ones; shape (n_samples, n_features).
        """

        def step(data: Any) -> Any:
            hidden = self._mean_hiddens(data)
            _cd.sample_bernoulli_(self._sampler, hidden.copy(), hidden)
            visible = self._mean_visibles(hidden)
            if self.visible == "gaussian":
                return visible + _cd.normal_(self._sampler, self._xp.empty_like(visible))
            return _cd.sample_bernoulli_(self._sampler, visible.copy(), visible)

        return self._run(v, step)

    def score_samples(self, X: Any) -> np.ndarray:
        """Pseudo-log-likelihood of each row (as ``BernoulliRBM``), shape (n_samples,).

        One randomly chosen unit per row is flipped; the result is
        ``-n_features * softplus(F(v) - F(v_flipped))``.  Deterministic for an integer
        ``random_state``.  For Gaussian visible units the unnormalized log-density
        ``-F(v)`` is returned instead (flipping a bit is meaningless for real values).
        """
        if self.visible == "gaussian":
            return -self.free_energy(X)
        self._require_fitted()
        data = self._check_input(X)
        rng = make_rng(self.random_state if isinstance(self.random_state, (int, np.integer)) else None)
        corrupted = data.copy()
        rows = np.arange(len(data))
        columns = rng.integers(0, data.shape[1], len(data))
        corrupted[rows, columns] = 1 - corrupted[rows, columns]
        fe = self.free_energy(data).astype(np.float64)
        fe_corrupted = self.free_energy(corrupted).astype(np.float64)
        out_dtype = np.asarray(X).dtype if np.asarray(X).dtype in (np.float32, np.float64) else self._dtype
        return (-data.shape[1] * np.logaddexp(0, -(fe_corrupted - fe))).astype(out_dtype)
