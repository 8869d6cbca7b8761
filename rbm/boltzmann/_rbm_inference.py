"""Inference methods of :class:`~rbm.RBM`: hidden and visible expectations, free energy,
reconstruction, Gibbs sampling and the pseudo-likelihood.

A mixin so that ``_rbm.py`` stays about training; every method works on the model's
device arrays (``_W`` of shape (n_features, n_components), ``_hbias``, ``_vbias``).
Public methods take host input (dense or scipy sparse), validate it, compute on the
device -- sparse input one chunk of rows at a time, never densified whole -- and return
host arrays in scikit-learn's output dtype (float32 stays float32, all else is float64).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state

from .._backend import make_rng, to_device, to_host
from .._validation import output_dtype
from . import _cd

__all__ = ["RBMInference"]

# Rows of sparse input densified at a time at inference (bounds the dense copy).
SPARSE_CHUNK_ROWS = 1024


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
    def _inputs(self, X: Any) -> tuple[Any, np.dtype]:
        """Validated ``X`` (an array or a CSR matrix) and scikit-learn's output dtype for it."""
        self._require_fitted()
        out_dtype = output_dtype(X)
        return self._validate(X, reset=False, training=False), out_dtype

    def _map_rows(self, data: Any, compute: Callable[[Any, slice], Any], out_dtype: np.dtype) -> np.ndarray:
        """``compute(device_rows, row_slice)`` over validated ``data``, as a host array of ``out_dtype``.

        Dense input goes to the device whole; sparse input one chunk of rows at a time.
        """
        if not sp.issparse(data):
            return to_host(compute(to_device(data, self._xp), slice(0, len(data)))).astype(out_dtype, copy=False)
        chunks = []
        for start in range(0, data.shape[0], SPARSE_CHUNK_ROWS):
            rows = slice(start, min(start + SPARSE_CHUNK_ROWS, data.shape[0]))
            chunks.append(to_host(compute(to_device(data[rows].toarray(), self._xp), rows)).astype(out_dtype, copy=False))
        return np.concatenate(chunks)

    def _run(self, X: Any, compute: Callable[[Any, slice], Any]) -> np.ndarray:
        """Validate host ``X`` and apply ``compute`` to its rows on the device (see :meth:`_map_rows`)."""
        data, out_dtype = self._inputs(X)
        return self._map_rows(data, compute, out_dtype)

    def transform(self, X: Any) -> np.ndarray:
        """Hidden activation probabilities ``p(h=1 | v=X)``, shape (n_samples, n_components)."""
        return self._run(X, lambda v, rows: self._mean_hiddens(v))

    def reconstruct(self, X: Any) -> np.ndarray:
        """Mean-field reconstruction ``E[v | h = p(h | X)]``, shape (n_samples, n_features)."""
        return self._run(X, lambda v, rows: self._mean_visibles(self._mean_hiddens(v)))

    def reconstruction_error(self, X: Any) -> float:
        """Mean squared error per visible unit between ``X`` and :meth:`reconstruct`."""
        squared = self._run(X, lambda v, rows: ((self._mean_visibles(self._mean_hiddens(v)) - v) ** 2).sum(axis=1))
        return float(squared.sum() / (len(squared) * self.n_features_in_))

    def free_energy(self, X: Any) -> np.ndarray:
        """Free energy ``F(v)`` of each row, shape (n_samples,)."""
        gaussian = self.visible == "gaussian"
        return self._run(X, lambda v, rows: _cd.free_energy(v, self._W, self._hbias, self._vbias, gaussian))

    def gibbs(self, v: Any) -> np.ndarray:
        """One Gibbs step ``v -> h -> v'`` with samples drawn from the model's generator.

        Returns 0/1 floats for Bernoulli units (``BernoulliRBM`` returns booleans) and
        ``mean + N(0, 1)`` noise for Gaussian ones; shape (n_samples, n_features).
        """

        def step(data: Any, rows: slice) -> Any:
            hidden = self._mean_hiddens(data)
            _cd.sample_bernoulli_(self._sampler, hidden.copy(), hidden)
            visible = self._mean_visibles(hidden)
            if self.visible == "gaussian":
                return visible + _cd.normal_(self._sampler, self._xp.empty_like(visible))
            return _cd.sample_bernoulli_(self._sampler, visible.copy(), visible)

        return self._run(v, step)

    def score_samples(self, X: Any) -> np.ndarray:
        """Pseudo-log-likelihood of each row (as ``BernoulliRBM``), shape (n_samples,).

        One randomly chosen unit ``j`` per row is flipped (``v_j -> 1 - v_j``); the result is
        ``n_features * log sigmoid(F(v_flipped) - F(v))``.  The unit is drawn as
        ``BernoulliRBM`` draws it (``check_random_state(random_state).randint``), so for the
        same weights and an integer ``random_state`` both give the same numbers.  For
        Gaussian visible units the unnormalized log-density ``-F(v)`` is returned instead
        (flipping a bit is meaningless for real values).
        """
        if self.visible == "gaussian":
            return -self.free_energy(X)
        data, out_dtype = self._inputs(X)
        columns = self._flip_columns(data.shape[0], data.shape[1])
        return self._map_rows(data, lambda v, rows: self._pseudo_likelihood(v, columns[rows]), out_dtype)

    def _pseudo_likelihood(self, v: Any, columns: np.ndarray) -> Any:
        """``n_features * log sigmoid(F(v') - F(v))`` per row of device rows ``v`` (n, n_features),
        ``v'`` being ``v`` with unit ``columns[i]`` of row ``i`` flipped; shape (n,)."""
        xp = self._xp
        n_features = v.shape[1]
        flip = to_device(columns, xp)
        picked = v[xp.arange(v.shape[0]), flip]
        delta = 1.0 - 2.0 * picked  # how much v_j changes when flipped
        total = v @ self._W
        total += self._hbias
        flipped = total + delta[:, None] * xp.take(self._W, flip, axis=0)
        # F(v') - F(v) without forming either free energy (no cancellation of large terms).
        gap = -delta * xp.take(self._vbias, flip) - (xp.logaddexp(0, flipped) - xp.logaddexp(0, total)).sum(axis=1)
        return -n_features * xp.logaddexp(0, -gap)

    def _flip_columns(self, n_samples: int, n_features: int) -> np.ndarray:
        """The unit flipped in each row by :meth:`score_samples`, shape (n_samples,)."""
        state = self.random_state
        if isinstance(state, np.random.Generator):
            return make_rng(state).integers(0, n_features, n_samples)
        return check_random_state(state).randint(0, n_features, n_samples)
