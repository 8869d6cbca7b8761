"""The restricted Boltzmann machine: a drop-in for scikit-learn's ``BernoulliRBM``.

Bernoulli or Gaussian visible units, Bernoulli hidden units, CD-k or persistent CD,
momentum with a schedule, L2 weight decay and an optional sparsity target, on numpy
or cupy.  The CD kernels live in :mod:`rbm.boltzmann._cd`, the trainer's seam (phases, parameters,
``train_partition``) in :mod:`rbm.boltzmann._rbm_seam`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils import Tags, check_random_state
from sklearn.utils.validation import validate_data

from .._backend import NamespacePickling, array_module, check_dtype, make_rng, resolve_device, to_device, to_host
from .._gpu import check_precision, effective_precision
from .._model import print_iteration, register_model
from .._params import check_integer, check_number
from .._updaters import anneal_factor
from .._validation import check_features, check_finite_parameters, check_width
from . import _cd
from ._rbm_inference import RBMInference
from ._rbm_seam import RBMSeam

__all__ = ["RBM"]

logger = logging.getLogger(__name__)

VISIBLE_UNITS = ("bernoulli", "gaussian")
# The reconstruction error (a monitoring metric) is measured on every 4th minibatch: it
# costs two passes over the batch.  Persistent chains leave no one-step reconstruction in
# the CD step; the mean-field one costs one more matrix product per row (a fifth of a CD-1
# step's), so it is measured on the pass's last minibatches only, those that cover its last
# 64 rows or its last 32nd, whichever is fewer (at most 0.6% of a pass; a minibatch of 100
# rows is 0.17% of a pass of 12,000).
_ERROR_EVERY = 4
_ERROR_SAMPLE_ROWS = 64
_ERROR_SAMPLE_SHARE = 32
# ``verbose`` prints BernoulliRBM's line after each pass of fit: the mean pseudo-likelihood, over
# the whole data as BernoulliRBM does when it has at most this many rows, else over this many
# evenly spaced rows (the same rows every pass: the curve shows the model, not the sample; about
# 1% of a pass of 36k rows).
_VERBOSE_SCORE_ROWS = 2048


@register_model("rbm")
class RBM(RBMInference, RBMSeam, NamespacePickling, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Restricted Boltzmann machine trained with contrastive divergence.

    The defaults are scikit-learn's ``BernoulliRBM`` algorithm, persistent CD-1 without
    momentum, with two changes that let its chains follow the true gradient well: initial
    weights of spread ``1 / sqrt(n_features)`` (not 0.01) and a learning rate that
    :meth:`fit` lowers to zero over its last quarter of updates.  Measured by
    ``scripts/bench_rbm_defaults.py`` (docs/models.md), this gives better features than
    ``BernoulliRBM`` (digits + logistic regression) and, given enough passes, a higher exact
    likelihood than plain CD-1 on bars-and-stripes; and ``BernoulliRBM``'s own tests pass with ``RBM`` in its place.
    Input may be dense or scipy sparse (densified one minibatch at a time).

    Parameters
    ----------
    n_components : int
        Number of hidden units.
    learning_rate : float
        Step size applied to the minibatch-mean gradient (as in ``BernoulliRBM``).
    batch_size : int
        Rows per minibatch.
    n_iter : int
        Passes over the data in :meth:`fit`.
    verbose : int
        When > 0, :meth:`fit` prints a line per pass to stdout as ``BernoulliRBM`` does,
        ``[BernoulliRBM] Iteration 1, pseudo-likelihood = -25.39, time = 0.14s`` (the mean over
        at most 2048 evenly spaced rows; Gaussian visible units: ``[GaussianBernoulliRBM]
        Iteration 1, reconstruction error = 0.123456, time = 0.14s``).
    random_state : None, int or numpy Generator
        Seed of the single generator used for initialization, shuffling and sampling.
    visible : {"bernoulli", "gaussian"}
        Bernoulli units need input in [0, 1]; Gaussian units (unit variance) expect
        standardized real-valued input.
    cd_k : int
        Gibbs steps per update (CD-k).
    persistent : bool
        Persistent CD (default): ``n_chains`` negative chains continue across minibatches.
        False: CD-k, the chains restart from the data at every update.
    n_chains : int or None
        Persistent chains (persistent CD only), each taking one Gibbs step per update whatever
        the minibatch's rows (Tieleman, 2008); ``None``: ``batch_size``.  The distributed trainer
        keeps them when it gives its nodes smaller minibatches (:meth:`spec_for_batch_size`).
    momentum : float
        Momentum for the first ``momentum_switch_iter`` passes (0 by default; 0.5 then 0.9 is the
        classic schedule for CD-k, too much for persistent chains).
    final_momentum : float
        Momentum from pass ``momentum_switch_iter`` on.
    momentum_switch_iter : int
        Passes (epochs of :meth:`fit`, or calls of :meth:`partial_fit` /
        :meth:`train_partition`, or the distributed trainer's epochs, which it sets with
        ``set_schedule_epoch``) run with ``momentum``.
    weight_decay : float
        L2 penalty on the weights.
    weight_init_std : float or None
        Spread of the normal initial weights; ``None``: ``1 / sqrt(n_features)``, so that the
        hidden inputs start with the same spread whatever the width.  Persistent CD follows
        the true gradient, which is flat at small symmetric weights: from
        ``BernoulliRBM``'s 0.01 it leaves that start slowly (CD-1's bias pushes harder there).
    anneal_fraction : float in [0, 1]
        :meth:`fit` keeps ``learning_rate`` for its first ``1 - anneal_fraction`` of updates,
        then lowers it linearly towards zero (0: constant).  Persistent CD is a
        stochastic-approximation method: at a constant rate its parameters keep jumping
        by the gradient noise, and on small problems drift away from a good solution;
        annealing lets them settle.  :meth:`partial_fit` and :meth:`train_partition` (which
        do not know how many passes follow) keep the rate constant.
    sparsity_target : float or None
        Target mean activation of each hidden unit; ``None`` disables the penalty.
    sparsity_cost : float
        Strength of the sparsity penalty.
    device : {"cpu", "gpu", "auto"}
        numpy on the CPU, cupy on the GPU; ``"auto"`` picks the GPU when one is usable.
    dtype : float32 or float64
        Precision of parameters and arithmetic.  Outputs follow scikit-learn's rule for the
        input (float32 stays float32; float64 and integers give float64).
    precision : {"float32", "tf32", "bfloat16"}
        Of the GEMMs on a GPU (see ``docs/gpu.md``): ``"tf32"`` and ``"bfloat16"`` use the tensor
        cores (float32 models only).  Refused with ``device="cpu"``; ignored (float32) when
        ``device="auto"`` lands on the CPU.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Weights (host copy; stored on the device as W of shape (n_features, n_components)).
    intercept_hidden_ : ndarray of shape (n_components,)
    intercept_visible_ : ndarray of shape (n_features,)
    h_samples_ : ndarray of shape (n_chains or batch_size, n_components)
        Hidden states of the persistent chains (persistent CD only).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        When fitted on a DataFrame with string column names.
    """

    _KIND = "rbm"
    _TRANSIENT = ("_workspaces",)  # scratch buffers: not pickled, rebuilt on demand

    def __init__(
        self,
        n_components: int = 256,
        *,
        learning_rate: float = 0.1,
        batch_size: int = 10,
        n_iter: int = 10,
        verbose: int = 0,
        random_state: Any = None,
        visible: str = "bernoulli",
        cd_k: int = 1,
        persistent: bool = True,
        n_chains: int | None = None,
        momentum: float = 0.0,
        final_momentum: float = 0.0,
        momentum_switch_iter: int = 5,
        weight_decay: float = 0.0,
        weight_init_std: float | None = None,
        anneal_fraction: float = 0.25,
        sparsity_target: float | None = None,
        sparsity_cost: float = 0.1,
        device: str = "cpu",
        dtype: Any = np.float32,
        precision: str = "float32",
    ) -> None:
        self.n_components = n_components
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.n_iter = n_iter
        self.verbose = verbose
        self.random_state = random_state
        self.visible = visible
        self.cd_k = cd_k
        self.persistent = persistent
        self.n_chains = n_chains
        self.momentum = momentum
        self.final_momentum = final_momentum
        self.momentum_switch_iter = momentum_switch_iter
        self.weight_decay = weight_decay
        self.weight_init_std = weight_init_std
        self.anneal_fraction = anneal_fraction
        self.sparsity_target = sparsity_target
        self.sparsity_cost = sparsity_cost
        self.device = device
        self.dtype = dtype
        self.precision = precision

    # ------------------------------------------------------------------ validation
    def _check_params(self) -> None:
        for name, low in (("n_components", 1), ("batch_size", 1), ("n_iter", 0), ("cd_k", 1), ("momentum_switch_iter", 0)):
            check_integer(name, getattr(self, name), low)
        if self.n_chains is not None:
            check_integer("n_chains", self.n_chains, 1)
        check_number("learning_rate", self.learning_rate, 0.0, low_open=True)
        check_number("momentum", self.momentum, 0.0, 1.0)
        check_number("final_momentum", self.final_momentum, 0.0, 1.0)
        check_number("weight_decay", self.weight_decay, 0.0)
        check_number("anneal_fraction", self.anneal_fraction, 0.0, 1.0, high_open=False)
        if self.weight_init_std is not None:
            check_number("weight_init_std", self.weight_init_std, 0.0, low_open=True)
        check_number("sparsity_cost", self.sparsity_cost, 0.0)
        if self.sparsity_target is not None:
            check_number("sparsity_target", self.sparsity_target, 0.0, 1.0, low_open=True)
        if self.visible not in VISIBLE_UNITS:
            raise ValueError(f"visible must be one of {VISIBLE_UNITS}, got {self.visible!r}")
        check_dtype(self.dtype)
        check_precision(self.precision, self.device, self.dtype, type(self).__name__)
        resolve_device(self.device)

    def _settings(self) -> _cd.CDSettings:
        return _cd.CDSettings(
            gaussian=self.visible == "gaussian",
            cd_k=int(self.cd_k),
            persistent=bool(self.persistent),
            weight_decay=float(self.weight_decay),
            sparsity_target=None if self.sparsity_target is None else float(self.sparsity_target),
            sparsity_cost=float(self.sparsity_cost),
        )

    def _validate(self, X: Any, *, reset: bool, training: bool) -> Any:
        """``X`` as a C-contiguous array (or CSR matrix) of the model dtype.

        Training input of Bernoulli units must lie in [0, 1]; inference accepts any finite
        values (``p(h | v)`` and ``F(v)`` are defined for real ``v``, as in ``BernoulliRBM``).
        ``reset`` records ``n_features_in_`` (and ``feature_names_in_``), else checks them.
        """
        array = check_features(
            X, dtype=check_dtype(self.dtype), bernoulli=training and self.visible == "bernoulli",
            model=type(self).__name__, accept_sparse=True, allow_nd=False,
        )
        validate_data(self, X, reset=reset, skip_check_array=True)
        return array

    def _require_fitted(self) -> None:
        if not self.__sklearn_is_fitted__():
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit or initialize first")

    def __sklearn_is_fitted__(self) -> bool:
        return getattr(self, "_W", None) is not None

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = self.visible == "bernoulli"
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    # ------------------------------------------------------------------ state
    def initialize(self, n_features: int, classes: Any = None) -> "RBM":
        """Allocate parameters for ``n_features`` visible units (no training).

        Idempotent when already initialized with the same width.  ``classes`` is ignored.
        """
        self._check_params()
        n_features = check_width(n_features, type(self).__name__)
        if self.__sklearn_is_fitted__() and self.n_features_in_ == n_features:
            return self
        self._allocate(n_features, make_rng(self.random_state))
        return self

    def _allocate(self, n_features: int, rng: np.random.Generator) -> None:
        self._dtype = check_dtype(self.dtype)
        self._device = resolve_device(self.device)
        self._precision = effective_precision(self.precision, self._device, type(self).__name__)
        self._xp = xp = array_module(self._device)
        self._rng = rng
        self.n_features_in_ = n_features
        std = self.weight_init_std if self.weight_init_std is not None else 1.0 / np.sqrt(n_features)
        W = rng.normal(0.0, std, size=(n_features, self.n_components))
        self._W = to_device(W, xp, self._dtype)
        self._hbias = xp.zeros(self.n_components, dtype=self._dtype)
        self._vbias = xp.zeros(n_features, dtype=self._dtype)
        self._velocity = (xp.zeros_like(self._W), xp.zeros_like(self._hbias), xp.zeros_like(self._vbias))
        self._sampler = _cd.device_generator(rng, xp)
        chains = self.n_chains or self.batch_size
        self._chain = xp.zeros((chains, self.n_components), dtype=self._dtype) if self.persistent else None
        target = self.sparsity_target if self.sparsity_target is not None else 0.0
        self._sparsity_mean = xp.full(self.n_components, target, dtype=self._dtype)
        self._workspaces: dict[int, _cd.Workspace] = {}
        self._passes = 0
        self._updates = 0

    def _workspace(self, b: int) -> _cd.Workspace:
        workspaces = self.__dict__.setdefault("_workspaces", {})  # not pickled: rebuilt on demand
        ws = workspaces.get(b)
        if ws is None:
            if len(workspaces) >= 4:  # even slices give at most two sizes per data size
                workspaces.clear()
            negatives = len(self._chain) if self._chain is not None else None
            ws = workspaces[b] = _cd.Workspace(self._xp, b, self.n_features_in_, self.n_components, self._dtype,
                                               negatives)
            ws.precision = getattr(self, "_precision", "float32")
        return ws

    @property
    def h_samples_(self) -> np.ndarray:
        """The persistent chains' hidden states, shape (n_chains, n_components) (persistent CD only)."""
        if getattr(self, "_chain", None) is None:
            raise AttributeError("h_samples_ exists only for a fitted RBM with persistent=True")
        return to_host(self._chain).copy()

    @property
    def components_(self) -> np.ndarray:
        self._require_fitted()
        return np.ascontiguousarray(to_host(self._W).T)

    @components_.setter
    def components_(self, value: np.ndarray) -> None:
        self.set_parameters({"W": np.asarray(value).T})

    @property
    def intercept_hidden_(self) -> np.ndarray:
        self._require_fitted()
        return to_host(self._hbias).copy()

    @intercept_hidden_.setter
    def intercept_hidden_(self, value: np.ndarray) -> None:
        self.set_parameters({"hbias": value})

    @property
    def intercept_visible_(self) -> np.ndarray:
        self._require_fitted()
        return to_host(self._vbias).copy()

    @intercept_visible_.setter
    def intercept_visible_(self, value: np.ndarray) -> None:
        self.set_parameters({"vbias": value})

    @property
    def _n_features_out(self) -> int:
        return int(self.n_components)

    # Defined here, not only on RBMInference: scikit-learn's set_output wraps a class's own methods only.
    transform = RBMInference.transform

    # ------------------------------------------------------------------ training
    def fit(self, X: Any, y: Any = None) -> "RBM":
        """Train from scratch for ``n_iter`` passes over ``X`` (n_samples, n_features).

        ``X`` may be a scipy sparse matrix: it is densified one minibatch at a time.
        """
        self._check_params()
        X = self._validate(X, reset=True, training=True)
        self._allocate(X.shape[1], make_rng(self.random_state))
        data = self._training_data(X)
        for done in range(self.n_iter):
            started = time.perf_counter()
            error = self._train_pass(data, self._rng, passes=(done, self.n_iter))
            if self.verbose:
                self._print_iteration(data, done + 1, error, time.perf_counter() - started)
        return self

    def _print_iteration(self, data: Any, iteration: int, error: float, seconds: float) -> None:
        """``verbose``'s line after pass ``iteration`` of :meth:`fit` (see ``_VERBOSE_SCORE_ROWS``)."""
        if self.visible == "gaussian":  # no pseudo-likelihood for real-valued units
            print_iteration("GaussianBernoulliRBM", iteration, f"reconstruction error = {error:.6f}", seconds)
            return
        n = int(data.shape[0])
        rows = np.linspace(0, n - 1, min(n, _VERBOSE_SCORE_ROWS)).round().astype(np.int64)
        # The flipped units: as score_samples draws them for an int random_state (so on small data the
        # line is score_samples(X).mean()); a Generator is never advanced here, so that verbose output
        # cannot change what the fit learns.
        state = self.random_state if not isinstance(self.random_state, np.random.Generator) else 0
        columns = check_random_state(state).randint(0, self.n_features_in_, len(rows))
        sample = data[rows].toarray() if sp.issparse(data) else data[to_device(rows, self._xp)]
        score = float(self._pseudo_likelihood(to_device(sample, self._xp), columns).mean())
        print_iteration("BernoulliRBM", iteration, f"pseudo-likelihood = {score:.2f}", seconds)

    def partial_fit(self, X: Any, y: Any = None) -> "RBM":
        """One pass over ``X`` in minibatches (a single update when ``len(X) <= batch_size``)."""
        X = self._prepare(X)
        self._train_pass(self._training_data(X), self._rng)
        return self

    def _prepare(self, X: Any) -> Any:
        """Validate training input ``X``; initialize the model from its width on first use."""
        if self.__sklearn_is_fitted__():
            return self._validate(X, reset=False, training=True)
        self._check_params()
        X = self._validate(X, reset=True, training=True)
        self.initialize(X.shape[1])
        return X

    def _training_data(self, X: Any) -> Any:
        """Dense input moves to the device whole; sparse input stays a host CSR matrix."""
        return X if sp.issparse(X) else to_device(X, self._xp)

    def _train_pass(self, data: Any, rng: np.random.Generator, passes: tuple[int, int] | None = None) -> float:
        """One shuffled pass over ``data`` (a device array or a host CSR matrix); returns the
        reconstruction error (mean squared error per visible unit).

        ``passes = (done, total)`` when this is pass ``done + 1`` of ``total`` planned ones
        (:meth:`fit`): the learning rate is then annealed over the last ``anneal_fraction``.
        """
        xp = self._xp
        started = time.perf_counter()
        n = int(data.shape[0])
        order = rng.permutation(n)
        if not sp.issparse(data):
            order = to_device(order, xp)
        momentum = self._current_momentum()
        learning_rate = float(self.learning_rate) * getattr(self, "_learning_rate_scale", 1.0)
        settings = self._settings()
        n_batches = -(-n // self.batch_size)
        # Even slices (as scikit-learn): sizes differ by at most one row.
        bounds = np.linspace(0, n, n_batches + 1).round().astype(np.int64)
        velocity = self._velocity
        error, measured = 0.0, 0
        measured_from = n - min(_ERROR_SAMPLE_ROWS, max(1, n // _ERROR_SAMPLE_SHARE))  # persistent CD's rows
        for index, (start, stop) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
            b = stop - start
            rate = learning_rate * anneal_factor(passes, index / n_batches, self.anneal_fraction)
            ws = self._workspace(b)
            _cd.gather_rows(data, order[start:stop], ws.V[:b])
            batch_error = _cd.cd_step(
                ws, b, self._W, self._hbias, self._vbias, velocity, self._sampler, settings,
                rate, float(momentum), chain=self._chain,
                sparsity_state=self._sparsity_mean,
                measure_error=stop > measured_from if settings.persistent else index % _ERROR_EVERY == 0,
            )
            if _cd.error_measured(batch_error):  # on the GPU a device scalar: summed there, read once a pass
                error += batch_error
                measured += b
            self._after_minibatch()
        self._passes += 1
        self._updates += n_batches
        check_finite_parameters(
            {"W": self._W, "hbias": self._hbias, "vbias": self._vbias}, where=f"RBM pass {self._passes}"
        )
        # The first (CD) or last (PCD) minibatch is always measured; on the GPU error is a device scalar.
        mse = float(error) / (measured * self.n_features_in_)
        logger.debug("RBM pass %d: reconstruction error %.6f, %.2f s", self._passes, mse, time.perf_counter() - started)
        return mse

    def _current_momentum(self) -> float:
        """Momentum of the next pass: ``momentum`` for the first ``momentum_switch_iter`` passes."""
        passes = self._schedule_passes(getattr(self, "_passes", 0))
        return float(self.momentum if passes < self.momentum_switch_iter else self.final_momentum)
