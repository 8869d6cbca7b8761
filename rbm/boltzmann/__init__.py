"""The Boltzmann family: restricted Boltzmann machines and deep belief nets.

* :class:`RBM` -- Bernoulli or Gaussian visible units, CD-k or persistent CD, a drop-in
  for scikit-learn's ``BernoulliRBM`` (:mod:`._rbm`, kernels in :mod:`._cd`, inference
  in :mod:`._rbm_inference`);
* :class:`DBN` -- stacked RBMs pretrained greedily, then fine-tuned by backpropagation
  (:mod:`._dbn`; its hyperparameter checks in :mod:`._dbn_params`, the RBM stack and its
  pretraining in :mod:`._dbn_pretrain`, fine-tuning in :mod:`._dbn_finetune`, its trainable seam
  in :mod:`._dbn_seam`, the backprop math in :mod:`._finetune`);
* :mod:`._exact` -- exact likelihoods and gradients of tiny RBMs by enumeration.
"""

from ._dbn import DBN
from ._exact import exact_gradient, exact_log_likelihood, exact_log_partition
from ._rbm import RBM

__all__ = ["RBM", "DBN", "exact_log_likelihood", "exact_log_partition", "exact_gradient"]
