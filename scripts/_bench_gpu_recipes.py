"""How sparkdbn's DBN and LeNet fits train, read off their own parameters, for torch's fits in
scripts/_bench_gpu_torch.py to train the same way (scripts/bench_gpu.py races the two)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import rbm
from rbm._updaters import anneal_factor
from rbm.conv import LENET_LAYERS


@dataclass(frozen=True)
class DBNRecipe:
    """How sparkdbn's DBN fit trains, read off its parameters and its layers' RBMs, for torch's fit to train the
    same way (scripts/_bench_gpu_torch.py ``dbn_fit``).

    Pretraining: each layer in turn, ``pretrain_epochs`` passes of CD-1 (probabilities for the reconstruction
    and the negative hiddens, sampled positive hiddens) over even minibatches of a fresh shuffle, at a constant
    rate (a DBN does not anneal its layers), momentum ``momentum`` for the first ``momentum_switch`` passes then
    ``final_momentum``, from normal weights of spread ``init_std``.  Fine-tuning: the sigmoid layers with the
    RBMs' weights and hidden biases, a Glorot-uniform softmax layer, SGD with momentum (``v <- mu v - rate (g +
    l2 W)``, L2 on the weights only) at :meth:`rate`, inverted dropout :meth:`dropout_at` on every hidden layer.
    """

    sizes: tuple[int, ...]
    batch_size: int
    pretrain_epochs: int
    pretrain_lr: float
    momentum: float
    final_momentum: float
    momentum_switch: int
    init_std: float
    finetune_epochs: int
    finetune_lr: float
    finetune_momentum: float
    lr_decay: float
    anneal_fraction: float
    dropout: float
    dropout_ramp: float
    l2: float

    @classmethod
    def of(cls, settings: dict[str, Any], n_features: int) -> DBNRecipe:
        """The recipe of ``rbm.DBN(**settings)``; refused where that DBN trains in a way torch's fit does not."""
        dbn = rbm.DBN(**settings).initialize(n_features)
        layer = dbn.layers_[0]
        plain = dict(cd_k=layer.cd_k, persistent=layer.persistent, weight_decay=layer.weight_decay,
                     sparsity_target=layer.sparsity_target, visible=dbn.visible, layer_params=dbn.layer_params,
                     finetune_updater=dbn.finetune_updater, early_stopping=dbn.early_stopping)
        expected = dict(cd_k=1, persistent=False, weight_decay=0.0, sparsity_target=None, visible="bernoulli",
                        layer_params=None, finetune_updater="sgd", early_stopping=False)
        if plain != expected:
            raise ValueError(f"torch's DBN fit trains as {expected}, this DBN as {plain}")
        return cls(sizes=tuple(dbn._sizes()), batch_size=int(dbn.batch_size), pretrain_epochs=int(layer.n_iter),
                   pretrain_lr=float(layer.learning_rate), momentum=float(layer.momentum),
                   final_momentum=float(layer.final_momentum), momentum_switch=int(layer.momentum_switch_iter),
                   init_std=float(layer.weight_init_std), finetune_epochs=int(dbn.finetune_epochs),
                   finetune_lr=float(dbn.finetune_learning_rate), finetune_momentum=float(dbn.finetune_momentum),
                   lr_decay=float(dbn.finetune_lr_decay), anneal_fraction=float(dbn.finetune_anneal_fraction),
                   dropout=float(dbn.finetune_dropout), dropout_ramp=float(dbn.finetune_dropout_ramp_epochs),
                   l2=float(dbn.l2))

    def momentum_at(self, done: int) -> float:
        """The momentum of pretraining pass ``done`` (from 0)."""
        return self.momentum if done < self.momentum_switch else self.final_momentum

    def pretrain_slices(self, n: int) -> list[tuple[int, int]]:
        """The minibatches of a pretraining pass over ``n`` rows: even slices (their sizes differ by one at most)."""
        bounds = np.linspace(0, n, -(-n // self.batch_size) + 1).round().astype(np.int64).tolist()
        return list(zip(bounds[:-1], bounds[1:]))

    def rate(self, epoch: int, within: float) -> float:
        """The fine-tuning rate of the minibatch ``within`` (in [0, 1)) into epoch ``epoch`` (from 0): decayed as
        ``1 / (1 + decay * epoch)``, and annealed linearly to 0 over the last ``anneal_fraction`` of the updates."""
        decayed = self.finetune_lr / (1.0 + self.lr_decay * epoch)
        return decayed * anneal_factor((epoch, self.finetune_epochs), within, self.anneal_fraction)

    def dropout_at(self, epoch: int) -> float:
        """The dropout of fine-tuning epoch ``epoch`` (from 0): ramped linearly from 0 over ``dropout_ramp`` epochs."""
        return self.dropout if self.dropout_ramp == 0 else self.dropout * min(1.0, epoch / self.dropout_ramp)


@dataclass(frozen=True)
class LeNetRecipe:
    """How sparkdbn's LeNet fit trains (plain SGD with momentum at a constant rate), for torch's fit."""

    epochs: int
    batch_size: int
    learning_rate: float
    momentum: float

    @classmethod
    def of(cls, net: Any) -> LeNetRecipe:
        lenet = net.layers in (None, LENET_LAYERS)
        plain = dict(updater=net.updater, nesterov=net.nesterov, l2=net.l2, lr_decay=net.lr_decay, lenet=lenet)
        expected = dict(updater="sgd", nesterov=False, l2=0.0, lr_decay=0.0, lenet=True)
        if plain != expected:
            raise ValueError(f"torch's LeNet fit trains as {expected}, this net as {plain}")
        return cls(int(net.epochs), int(net.batch_size), float(net.learning_rate), float(net.momentum))
