"""Models on numpy or cupy: RBM, DBN, convolutional nets, and the array backend.

Grouped by idea: :mod:`rbm.boltzmann` (RBM, DBN), :mod:`rbm.conv` (ConvNet, LeNet and
their kernels), :mod:`rbm.datasets`; the pieces every model shares stay flat here (the
array backend, BLAS, updaters, input checks, hyperparameter specs, the trainable-model
seam with save/load).  Nothing here knows about Spark, actors or the store.
"""

import logging

from ._backend import array_module, gpu_available, resolve_device, to_host
from ._gpu import PRECISIONS, DeviceDataCache, configure_kernel_cache
from ._model import (TrainableModel, check_trainable, load_model, model_from_spec, model_spec, read_model_file,
                     register_model, save_model, save_trained, spec_for_batch_size, takes_outer_step)
from ._params import read_config
from ._validation import DivergenceError, check_features, check_labels
from ._warm_up import warm_up
from .boltzmann import DBN, RBM
from .conv import ConvNet, lenet, softmax_cross_entropy

__all__ = [
    "RBM",
    "DBN",
    "ConvNet",
    "lenet",
    "TrainableModel",
    "DivergenceError",
    "register_model",
    "model_spec",
    "check_trainable",
    "model_from_spec",
    "spec_for_batch_size",
    "takes_outer_step",
    "load_model",
    "save_model",
    "save_trained",
    "read_model_file",
    "read_config",
    "check_features",
    "check_labels",
    "softmax_cross_entropy",
    "array_module",
    "gpu_available",
    "resolve_device",
    "to_host",
    "PRECISIONS",
    "DeviceDataCache",
    "configure_kernel_cache",
    "warm_up",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
