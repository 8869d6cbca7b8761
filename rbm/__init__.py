"""Models on numpy or cupy: RBM, DBN, convolutional nets, and the array backend.

Nothing here knows about Spark, actors or the store.
"""

import logging

from ._backend import array_module, gpu_available, resolve_device, to_host
from ._convnet import ConvNet, lenet
from ._dbn import DBN
from ._model import TrainableModel, load_model, model_from_spec
from ._rbm import RBM
from ._validation import DivergenceError

__all__ = [
    "RBM",
    "DBN",
    "ConvNet",
    "lenet",
    "TrainableModel",
    "DivergenceError",
    "model_from_spec",
    "load_model",
    "array_module",
    "gpu_available",
    "resolve_device",
    "to_host",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
