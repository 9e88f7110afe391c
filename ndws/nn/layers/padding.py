"""Layers that resize images without parameters: `ZeroPaddingLayer`, `Cropping2D` and
`Upsampling2D` (DL4J's), each one pass of a kernel of `ndws.nn.functional` (`zero_pad2d`,
`crop2d`, `upsample2d` and their gradients) into the manager's arrays.

Examples
--------
>>> from ndws.nn import (Cropping2D, InputType, MultiLayerConfiguration, OutputLayer,
...                      Upsampling2D, ZeroPaddingLayer)
>>> conf = MultiLayerConfiguration(
...     [ZeroPaddingLayer(padding=(1, 2)), Cropping2D(cropping=(0, 1, 2, 3)),
...      Upsampling2D(size=2), OutputLayer(n_out=2, activation="softmax")],
...     input_type=InputType.convolutional(5, 6, 3), seed=0)
>>> [l.output_type(l.input_type) for l in conf.resolved_layers[:3]]  # doctest: +NORMALIZE_WHITESPACE
[InputType.convolutional(7, 10, 3), InputType.convolutional(6, 5, 3),
 InputType.convolutional(12, 10, 3)]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ndws.nn import functional as F
from ndws.nn.inputs import CNN2DFormat, InputType
from ndws.nn.layers._geometry import ImageLayer, check_image, pair, too_large
from ndws.nn.layers.base import FieldTypeError, Layer
from ndws.nn.workspace_mgr import ArrayType

__all__ = ["ZeroPaddingLayer", "Cropping2D", "Upsampling2D"]


def _sides(owner: str, name: str, value: Any, pairs: str) -> tuple[int, int, int, int]:
    # DL4J's 1, 2 or 4 values: all sides; (`pairs`); (top, bottom, left, right)
    items = value if isinstance(value, (tuple, list)) else (value,)
    if len(items) not in (1, 2, 4) or any(isinstance(v, (bool, np.bool_))
                                          or not isinstance(v, (int, np.integer))
                                          for v in items):
        raise FieldTypeError(f"{owner}.{name}: Invalid {name} values: expected 1, 2 "
                             f"({pairs}) or 4 ints [top, bottom, left, right], got "
                             f"{value!r:.40}")
    if any(not 0 <= v <= 1 << 31 for v in items):
        raise ValueError(f"{owner}.{name}: expected ints in [0, 2**31], got {value!r:.40}")
    if len(items) == 1:
        items = items * 4
    elif len(items) == 2:
        items = (items[0], items[0], items[1], items[1])
    return tuple(int(v) for v in items)


class _Resize(ImageLayer, Layer):
    # a parameterless image layer: no activation, no dropout; its own data_format or the
    # input's; a forward kernel and its gradient

    keeps_width = True

    def __init__(self, data_format: Any, n_in: int | None, n_out: int | None,
                 name: str | None):
        super().__init__(n_in=n_in, n_out=n_out, name=name)
        self.data_format = (None if data_format is None else
                            CNN2DFormat.parse(data_format, f"{type(self).__name__}.data_format"))

    def _out_hw(self) -> tuple[int, int]:
        raise NotImplementedError

    def _check_resolved(self, where):
        super()._check_resolved(where)
        h, w = self._out_hw()
        if h < 1 or w < 1:
            raise ValueError(f"{where}: {type(self).__name__} leaves no output from "
                             f"{self.input_type!r} (height {h}, width {w})")
        too_large(self, where, h * w * self.n_in)          # before anything is allocated

    def output_type(self, input_type):
        h, w = self._out_hw()
        return InputType.convolutional(h, w, self.n_in, self.data_format.name)

    def memory_use(self, batch, training, itemsize):
        out = self.output_type(self.input_type).elements_per_example()
        use = [("forward", ArrayType.ACTIVATIONS, batch * out * itemsize)]
        if training and self.input_gradient_needed:
            use.append(("backward", ArrayType.ACTIVATION_GRAD,
                        batch * self.input_type.elements_per_example() * itemsize))
        return use

    def activate(self, x, training, mgr):
        check_image(self, x)
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS,
                                     self.output_type(self.input_type).shape(x.shape[0]),
                                     dtype=x.dtype)
        self._forward(x, y)
        return y

    def backprop_gradient(self, epsilon, mgr):
        if not self.input_gradient_needed:
            return {}, None
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD,
                                       self.input_type.shape(epsilon.shape[0]),
                                       dtype=epsilon.dtype)
        self._backward(epsilon, eps)
        return {}, eps


class ZeroPaddingLayer(_Resize):
    """Zeros around images (DL4J's ``ZeroPaddingLayer``).

    Parameters
    ----------
    padding : int, (int, int) or (int, int, int, int)
        All sides; (height, width) padding; or (top, bottom, left, right).
    data_format : {"NCHW", "NHWC"}, optional
        None: the input's.
    """

    fields = ("n_in", "n_out", "name", "padding", "data_format")

    def __init__(self, padding: Any = 0, *, data_format: Any = None, n_in: int | None = None,
                 n_out: int | None = None, name: str | None = None):
        super().__init__(data_format, n_in, n_out, name)
        self.padding = _sides("ZeroPaddingLayer", "padding", padding, "height, width")

    def _out_hw(self):
        t, b, l, r = self.padding
        return self.input_type.height + t + b, self.input_type.width + l + r

    def _forward(self, x, y):
        F.zero_pad2d(x, self.padding, self.data_format.name, out=y)

    def _backward(self, epsilon, eps):
        F.zero_pad2d_backward(epsilon, self.padding, self.data_format.name, out=eps)


class Cropping2D(_Resize):
    """Rows and columns cut from the sides of images (DL4J's ``Cropping2D``): a copy into the
    layer's activations (DL4J returns a view of the input).

    Parameters
    ----------
    cropping : int, (int, int) or (int, int, int, int)
        All sides; (top and bottom, left and right); or (top, bottom, left, right).
    data_format : {"NCHW", "NHWC"}, optional
        None: the input's.
    """

    fields = ("n_in", "n_out", "name", "cropping", "data_format")

    def __init__(self, cropping: Any = 0, *, data_format: Any = None, n_in: int | None = None,
                 n_out: int | None = None, name: str | None = None):
        super().__init__(data_format, n_in, n_out, name)
        self.cropping = _sides("Cropping2D", "cropping", cropping,
                               "top and bottom, left and right")

    def _out_hw(self):
        t, b, l, r = self.cropping
        return self.input_type.height - t - b, self.input_type.width - l - r

    def _forward(self, x, y):
        F.crop2d(x, self.cropping, self.data_format.name, out=y)

    def _backward(self, epsilon, eps):
        F.crop2d_backward(epsilon, self.cropping, self.data_format.name, out=eps)


class Upsampling2D(_Resize):
    """Nearest-neighbour upsampling (DL4J's ``Upsampling2D``): each pixel repeated
    size[0] x size[1] times; the gradient sums each block.

    Parameters
    ----------
    size : int or (int, int)
        Default 1 (DL4J's builder).
    data_format : {"NCHW", "NHWC"}, optional
        None: the input's.
    """

    fields = ("n_in", "n_out", "name", "size", "data_format")

    def __init__(self, size: Any = 1, *, data_format: Any = None, n_in: int | None = None,
                 n_out: int | None = None, name: str | None = None):
        super().__init__(data_format, n_in, n_out, name)
        self.size = pair("Upsampling2D", "size", size, 1)

    def _out_hw(self):
        return self.input_type.height * self.size[0], self.input_type.width * self.size[1]

    def _check_resolved(self, where):
        t = self.input_type
        h, w = self._out_hw() if t is not None and t.kind == "CNN" else (0, 0)
        if h > 1 << 31 or w > 1 << 31:
            raise ValueError(f"{where}: Upsampling2D of {self.input_type!r} by {self.size} is "
                             f"larger than 2**31 rows or columns")
        super()._check_resolved(where)

    def _forward(self, x, y):
        F.upsample2d(x, self.size, self.data_format.name, out=y)

    def _backward(self, epsilon, eps):
        F.upsample2d_backward(epsilon, self.size, self.data_format.name, out=eps)
