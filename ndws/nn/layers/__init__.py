"""Layers of a `MultiLayerNetwork`, one module per family, each with its forward and backward
side by side on the kernels of `ndws.nn.functional`, and `Layer`, the base class of custom
layers.

A layer object is first a configuration (its keyword arguments, DL4J's builder fields in
snake_case; None means "the network's default"); the network clones it when it is built and
gives the clone views of its parameters and gradients in the network's flat buffers
(``layer.params["W"]``, ``layer.grads["W"]``). Every array a layer makes comes from the
`LayerWorkspaceMgr` it is handed, under the `ArrayType` that says how long it lives.

Examples
--------
>>> from ndws.nn import DenseLayer, OutputLayer
>>> DenseLayer(n_in=4, n_out=3, activation="relu")
DenseLayer(n_in=4, n_out=3, activation=Activation.RELU)
>>> OutputLayer(n_out=2, activation="softmax", loss_function="mcxent").loss_function
<LossFunction.MCXENT: 'MCXENT'>
"""
from __future__ import annotations

from ndws.nn.layers import (base, convolution, embedding, normalization, output, padding,
                            pooling, recurrent, wrappers)
from ndws.nn.layers.base import *  # noqa: F401,F403  (the public names, listed in __all__)
from ndws.nn.layers.convolution import *  # noqa: F401,F403
from ndws.nn.layers.embedding import *  # noqa: F401,F403
from ndws.nn.layers.normalization import *  # noqa: F401,F403
from ndws.nn.layers.output import *  # noqa: F401,F403
from ndws.nn.layers.padding import *  # noqa: F401,F403
from ndws.nn.layers.pooling import *  # noqa: F401,F403
from ndws.nn.layers.recurrent import *  # noqa: F401,F403
from ndws.nn.layers.wrappers import *  # noqa: F401,F403

__all__ = (base.__all__ + convolution.__all__ + embedding.__all__ + normalization.__all__
           + output.__all__ + padding.__all__ + pooling.__all__ + recurrent.__all__
           + wrappers.__all__)
