"""Convolutional nets on numpy or cupy: layers, im2col kernels, the sequential :class:`ConvNet`.

* :mod:`._im2col` -- convolution and pooling kernels on CHWN arrays;
* :mod:`._ops` -- activations, weight initialization, softmax cross-entropy;
* :mod:`._layers` -- layers built from JSON-able spec dicts, shapes inferred;
* :mod:`._convnet` -- the net, scikit-learn style, with the trainable seam;
* :mod:`._spec` -- LeNet's layers and the net's settings.
"""

from ._convnet import ConvNet, lenet
from ._cudnn import convolution_backend
from ._ops import softmax_cross_entropy
from ._spec import LENET_LAYERS

__all__ = ["ConvNet", "lenet", "LENET_LAYERS", "softmax_cross_entropy", "convolution_backend"]
