"""The hyperparameters of :class:`~rbm.DBN` checked, and what follows from them alone.

A mixin of :class:`rbm.DBN`: ``fit``, ``initialize`` and the first ``train_partition`` validate every
hyperparameter here (the scikit-learn contract: ``__init__`` stores them untouched); the layer
widths and the fine-tuning updater are read from them here too.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any

import numpy as np

from .._backend import check_dtype, resolve_device
from .._gpu import check_precision
from .._params import check_integer, check_number
from .._updaters import Updater, make_updater
from ._rbm import RBM, VISIBLE_UNITS

__all__ = ["DBNParams", "LAYER_OVERRIDES"]

# Hyperparameters a per-layer override may set (the rest are fixed by the DBN).
# (``anneal_fraction`` is not one: it shapes ``RBM.fit``, and the DBN runs the passes itself.)
LAYER_OVERRIDES = frozenset(RBM._get_param_names()) - {"n_components", "device", "dtype", "precision",
                                                       "random_state", "anneal_fraction"}


class DBNParams:
    """Mixin: the hyperparameter checks of :class:`rbm.DBN`."""

    def _check_params(self) -> None:
        sizes = self.hidden_layer_sizes
        if isinstance(sizes, (int, np.integer)):
            sizes = (sizes,)
        if (
            not isinstance(sizes, (list, tuple))
            or not sizes
            or any(isinstance(s, bool) or not isinstance(s, Integral) or s < 1 for s in sizes)
        ):
            raise ValueError(f"hidden_layer_sizes must be a non-empty sequence of integers >= 1, got {sizes!r}")
        for name, low in (("pretrain_epochs", 0), ("finetune_epochs", 0), ("batch_size", 1), ("n_iter_no_change", 1)):
            check_integer(name, getattr(self, name), low)
        check_number("pretrain_learning_rate", self.pretrain_learning_rate, 0.0, low_open=True)
        check_number("finetune_learning_rate", self.finetune_learning_rate, 0.0, low_open=True)
        check_number("validation_fraction", self.validation_fraction, 0.0, 1.0, low_open=True)
        check_number("finetune_momentum", self.finetune_momentum, 0.0, 1.0)
        check_number("finetune_lr_decay", self.finetune_lr_decay, 0.0)
        check_number("finetune_anneal_fraction", self.finetune_anneal_fraction, 0.0, 1.0, high_open=False)
        check_number("finetune_dropout", self.finetune_dropout, 0.0, 1.0)
        check_number("finetune_dropout_ramp_epochs", self.finetune_dropout_ramp_epochs, 0.0)
        check_number("l2", self.l2, 0.0)
        self._make_updater()  # validates finetune_updater
        if self.visible not in VISIBLE_UNITS:
            raise ValueError(f"visible must be one of {VISIBLE_UNITS}, got {self.visible!r}")
        overrides = self.layer_params
        if overrides is not None:
            if not isinstance(overrides, (list, tuple)) or len(overrides) != len(sizes):
                raise ValueError(
                    f"layer_params must be a list with one dict (or None) per layer ({len(sizes)}), got {overrides!r}"
                )
            for k, entry in enumerate(overrides):
                unknown = sorted(set(entry or {}) - LAYER_OVERRIDES)
                if unknown:
                    raise ValueError(f"layer_params[{k}] has unknown keys {unknown}; "
                                     f"allowed: {sorted(LAYER_OVERRIDES)}")
        check_dtype(self.dtype)
        check_precision(self.precision, self.device, self.dtype, type(self).__name__)
        resolve_device(self.device)

    def _make_updater(self) -> Updater:
        settings: dict[str, Any] = {"learning_rate": self.finetune_learning_rate, "l2": self.l2}
        if self.finetune_updater == "sgd":
            settings["momentum"] = self.finetune_momentum
        return make_updater(self.finetune_updater, **settings)

    def _sizes(self) -> tuple[int, ...]:
        sizes = self.hidden_layer_sizes
        return (int(sizes),) if isinstance(sizes, (int, np.integer)) else tuple(int(s) for s in sizes)
