"""Output layers of images: `CnnLossLayer` (DL4J's), a loss at every pixel (segmentation,
denoising), scored as DL4J scores it: the pixels' losses summed and divided by the minibatch.

Examples
--------
>>> import numpy as np
>>> from ndws.nn import (CnnLossLayer, ConvolutionLayer, InputType, MultiLayerConfiguration,
...                      MultiLayerNetwork)
>>> net = MultiLayerNetwork(MultiLayerConfiguration(
...     [ConvolutionLayer(kernel_size=3, n_out=2, convolution_mode="same"),
...      CnnLossLayer(activation="softmax", loss_function="mcxent")],
...     input_type=InputType.convolutional(5, 5, 1), seed=0))
>>> net.init()
>>> net.output(np.zeros((1, 1, 5, 5), np.float32)).shape            # per-pixel probabilities
(1, 2, 5, 5)
"""
from __future__ import annotations

from typing import Any

import ndws
from ndws._core import NDArray
from ndws.nn import functional as F
from ndws.nn.inputs import CNN2DFormat
from ndws.nn.layers._geometry import ImageLayer, check_image
from ndws.nn.layers.base import Activation, Layer, _LossMixin
from ndws.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr

__all__ = ["CnnLossLayer"]


class CnnLossLayer(ImageLayer, _LossMixin, Layer):
    """A loss at every pixel of images, without parameters (DL4J's ``CnnLossLayer``): the
    input is the pre-activation, the labels have its shape (n, c, h, w) (channels last for
    NHWC) and the activation acts across the channels of each pixel (softmax: per-pixel class
    probabilities). The score sums every pixel's loss and divides by the minibatch (not by the
    pixels), as DL4J does.

    Parameters
    ----------
    loss_function : str or LossFunction
        As for `OutputLayer` (MCXENT needs softmax, XENT sigmoid).
    data_format : {"NCHW", "NHWC"}, optional
        None: the input's.
    **common
        As `Layer` (activation; n_out, when given, equals n_in: the channels).
    """

    fields = _LossMixin.fields + ("data_format",)
    keeps_width = True

    def __init__(self, *, data_format: Any = None, **common: Any):
        super().__init__(**common)
        self.data_format = (None if data_format is None
                            else CNN2DFormat.parse(data_format, "CnnLossLayer.data_format"))

    def output_type(self, input_type):
        return self.input_type

    def _channel_axis(self) -> int:
        return 1 if self.data_format is CNN2DFormat.NCHW else 3

    def memory_use(self, batch, training, itemsize):
        size = batch * self._input_elements() * itemsize
        use = [("forward", ArrayType.ACTIVATIONS, size)]
        if training:
            use += self._loss_use(batch * self.input_type.height * self.input_type.width,
                                  itemsize)
            if self.data_format is CNN2DFormat.NCHW:
                # the pre-activation and the labels as rows (n*h*w, c): pixel-major copies
                use += [("backward", ArrayType.BP_WORKING_MEM, size)] * 2
            if self.input_gradient_needed:
                use.append(("backward", ArrayType.ACTIVATION_GRAD, size))
        return use

    # -- forward --------------------------------------------------------------------------------

    def activate(self, x, training, mgr):
        check_image(self, x)
        act = self.activation or Activation.IDENTITY
        self._x = x
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        if act is Activation.SOFTMAX:
            return F.softmax(x, axis=self._channel_axis(), out=y)
        return F.activation(act.value, x, out=y)

    # -- the loss on rows of pixels -------------------------------------------------------------

    def _rows(self, a: NDArray, mgr: LayerWorkspaceMgr, name: str) -> NDArray:
        # (n, c, h, w) / (n, h, w, c) as (n*h*w, c), one row per pixel: a view of NHWC, a
        # pixel-major copy of NCHW in the working memory (DL4J's reshape4dTo2d dups too)
        t = self.input_type
        shape = (a.shape[0],) + t.shape()
        if tuple(a.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape} (the input's) for layers"
                             f"[{self.index}] (CnnLossLayer), got {tuple(a.shape)}")
        rows = a.shape[0] * t.height * t.width
        if self.data_format is CNN2DFormat.NHWC and a.flags.c_contiguous:
            return a.reshape(rows, t.channels)
        r = mgr.create_uninitialized(ArrayType.BP_WORKING_MEM,
                                     (a.shape[0], t.height, t.width, t.channels), dtype=a.dtype)
        r.assign(a.transpose(0, 2, 3, 1) if self.data_format is CNN2DFormat.NCHW else a)
        return r.reshape(rows, t.channels)

    def _pixel_mask(self, mask: NDArray | None, n: int, mgr: LayerWorkspaceMgr) -> Any:
        # DL4J's masks: per example (n,) repeated over its pixels, or per pixel (n, 1, h, w) /
        # (n, h, w, 1) / (n, h, w)
        if mask is None:
            return None
        t = self.input_type
        hw = t.height * t.width
        if mask.ndim == 1 and mask.shape[0] == n:
            m = mgr.create_uninitialized(ArrayType.BP_WORKING_MEM, (n, hw), dtype=mask.dtype)
            m.assign(mask.reshape(n, 1))
            return m.reshape(n * hw)
        if mask.size == n * hw and mask.shape[0] == n:
            flat = mask if mask.flags.c_contiguous else mgr.dup(ArrayType.BP_WORKING_MEM, mask)
            return flat.reshape(n * hw)
        raise ValueError(f"labels mask: expected (n,) per example or (n, 1, h, w) per pixel for "
                         f"layers[{self.index}] (CnnLossLayer), got shape {tuple(mask.shape)}")

    def _score(self, labels, mgr, mask, want_grad):
        x = self._x
        n = x.shape[0]
        z = self._rows(x, mgr, "input")
        return self._loss(z, self._rows(labels, mgr, "labels"), mgr, want_grad,
                          self._pixel_mask(mask, n, mgr), examples=max(n, 1))

    def compute_score(self, labels, mgr, mask=None):
        return self._score(labels, mgr, mask, False)[0]

    def compute_score_and_gradient(self, labels, mgr, mask=None):
        score, dz = self._score(labels, mgr, mask, True)
        if not self.input_gradient_needed:
            return score, {}, None
        x = self._x
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, x.shape, dtype=x.dtype)
        t = self.input_type
        pixels = dz.reshape(x.shape[0], t.height, t.width, t.channels)
        eps.assign(pixels.transpose(0, 3, 1, 2) if self.data_format is CNN2DFormat.NCHW
                   else pixels)
        return score, {}, eps

    def compute_score_examples(self, labels, mgr, mask=None):
        x = self._x
        n = x.shape[0]
        self._z = self._rows(x, mgr, "input")
        per = super().compute_score_examples(self._rows(labels, mgr, "labels"), mgr,
                                             self._pixel_mask(mask, n, mgr))
        return ndws.sum(per.reshape(n, per.shape[0] // max(n, 1)), axis=1)
