"""Input preprocessors: the reshapes a network runs on a layer's input before the layer, and on
its epsilon after it (DL4J's ``InputPreProcessor``): `CnnToFeedForwardPreProcessor` flattens
images into rows for a dense layer, `FeedForwardToCnnPreProcessor` makes rows into images for a
convolution. A configuration with ``input_type=`` inserts them where DL4J's ``setInputType``
does; ``input_preprocessors={i: p}`` sets them by hand.

Both are views when the array is C-contiguous (every built-in layer's output is), so they
cost nothing; otherwise they copy into the manager's ACTIVATIONS (forward) or ACTIVATION_GRAD
(backward) workspace, as DL4J's do.

Examples
--------
>>> import numpy as np, ndws
>>> from ndws.nn import CnnToFeedForwardPreProcessor, LayerWorkspaceMgr
>>> p = CnnToFeedForwardPreProcessor(2, 2, 3)
>>> x = ndws.asarray(np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2))
>>> rows = p.pre_process(x, LayerWorkspaceMgr.no_workspaces())
>>> rows.shape, rows[0, :5].tolist()                  # (c, h, w) order, as DL4J flattens
((2, 12), [0.0, 1.0, 2.0, 3.0, 4.0])
>>> p.output_type(ndws.nn.InputType.convolutional(2, 2, 3))
InputType.feed_forward(12)
"""
from __future__ import annotations

import enum
from typing import Any, ClassVar

from ndws._core import NDArray
from ndws.nn.inputs import CNN2DFormat, InputType, _dimension, config_dict, registered
from ndws.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr

__all__ = ["InputPreProcessor", "CnnToFeedForwardPreProcessor", "FeedForwardToCnnPreProcessor"]

_PREPROCESSORS: dict[str, type] = {}


def _class_key(cls: type) -> str:
    # "@class": the bare name for ndws' own, module.qualname for a custom one
    return cls.__name__ if cls.__module__ == __name__ else f"{cls.__module__}.{cls.__qualname__}"


class InputPreProcessor:
    """Base class of preprocessors, built-in and custom (DL4J's ``InputPreProcessor``).

    A subclass lists its constructor's keyword arguments in ``fields`` (for `to_dict` /
    `from_dict`), says what its output is (`output_type`) and implements `pre_process` and
    `backprop` with arrays from the manager it is given: the forward's result in
    ``ArrayType.ACTIVATIONS`` (or a view of its input), the backward's in
    ``ArrayType.ACTIVATION_GRAD`` (or a view of the epsilon). The network runs both inside the
    scopes of the layer the preprocessor belongs to.
    """

    fields: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        _PREPROCESSORS[_class_key(cls)] = cls

    def pre_process(self, x: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        """The layer's input made from `x` (DL4J's ``preProcess``)."""
        raise NotImplementedError(f"{type(self).__name__}.pre_process")

    def backprop(self, epsilon: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        """dL/d(`x`) from dL/d(the layer's input) (DL4J's ``backprop``)."""
        raise NotImplementedError(f"{type(self).__name__}.backprop")

    def output_type(self, input_type: InputType | None) -> InputType | None:
        """The type of `pre_process`'s result for input of `input_type` (None: unknown);
        ValueError when this preprocessor does not take that type."""
        return input_type

    def memory_use(self, batch: int, training: bool, itemsize: int) -> list | None:
        """The arrays one pass makes, as for `Layer.memory_use` (None: not declared)."""
        return None

    def clear(self) -> None:
        """Forget what the last pass kept (the network calls it with the layers' `clear`)."""

    # -- configuration --------------------------------------------------------------------------

    def to_dict(self) -> dict:
        return config_dict(self, _class_key(type(self)))

    @staticmethod
    def from_dict(data: Any) -> "InputPreProcessor":
        """Rebuild a preprocessor from `to_dict`'s output (only classes already imported)."""
        cls, kwargs = registered(_PREPROCESSORS, data, "preprocessor", "unknown class")
        return cls(**kwargs)

    def clone(self) -> "InputPreProcessor":
        """A fresh preprocessor with the same configuration."""
        return type(self)(**{f: getattr(self, f) for f in self.fields})

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        args = ", ".join(f"{getattr(self, f).name}" if isinstance(getattr(self, f), enum.Enum)
                         else repr(getattr(self, f)) for f in self.fields)
        return f"{type(self).__name__}({args})"


def _reshaped(a: NDArray, shape: tuple, t: ArrayType, mgr: LayerWorkspaceMgr) -> NDArray:
    # a view when `a` is C-contiguous; else a C-ordered copy in t's workspace first (DL4J's
    # "dup to c order whenever the input is not c-contiguous with default strides")
    if not a.flags.c_contiguous:
        a = mgr.dup(t, a)
    return a.reshape(shape)


class _Image(InputPreProcessor):
    # the one image geometry both preprocessors carry
    fields = ("height", "width", "channels", "data_format")

    def __init__(self, height: int, width: int, channels: int, data_format: Any = "NCHW"):
        owner = type(self).__name__
        self.height = _dimension(owner, "height", height)
        self.width = _dimension(owner, "width", width)
        self.channels = _dimension(owner, "channels", channels)
        self.data_format = CNN2DFormat.parse(data_format, f"{owner}.data_format")

    def _image_shape(self) -> tuple:
        if self.data_format is CNN2DFormat.NCHW:
            return (self.channels, self.height, self.width)
        return (self.height, self.width, self.channels)

    def _image_type(self) -> InputType:
        return InputType.convolutional(self.height, self.width, self.channels,
                                       self.data_format.name)

    def _describe(self) -> str:
        if self.data_format is CNN2DFormat.NCHW:
            return (f"[minibatch, numChannels={self.channels}, inputHeight={self.height}, "
                    f"inputWidth={self.width}]")
        return (f"[minibatch, inputHeight={self.height}, inputWidth={self.width}, "
                f"numChannels={self.channels}]")

    def memory_use(self, batch, training, itemsize):
        # views of C-contiguous arrays (what every built-in layer makes)
        return []


class CnnToFeedForwardPreProcessor(_Image):
    """Images (n, c, h, w) (or (n, h, w, c) for NHWC) into rows (n, c*h*w), flattened in
    (c, h, w) order for NCHW and (h, w, c) for NHWC, as DL4J (and Keras for NHWC) flatten;
    the epsilon goes back the same way.

    Parameters
    ----------
    height, width, channels : int
    data_format : {"NCHW", "NHWC"} or CNN2DFormat
    """

    def pre_process(self, x, mgr):
        if x.ndim == 2 and x.shape[1] == self.height * self.width * self.channels:
            return x                           # already rows (DL4J passes them through)
        if x.ndim != 4 or tuple(x.shape[1:]) != self._image_shape():
            raise ValueError(f"CnnToFeedForwardPreProcessor: invalid input, does not match "
                             f"configuration: expected {self._describe()} but got input array "
                             f"of shape {tuple(x.shape)}")
        return _reshaped(x, (x.shape[0], self.height * self.width * self.channels),
                         ArrayType.ACTIVATIONS, mgr)

    def backprop(self, epsilon, mgr):
        if epsilon.ndim == 4:
            return epsilon
        return _reshaped(epsilon, (epsilon.shape[0],) + self._image_shape(),
                         ArrayType.ACTIVATION_GRAD, mgr)

    def output_type(self, input_type):
        if input_type is not None and input_type.kind != "CNN":
            raise ValueError(f"CnnToFeedForwardPreProcessor: expected convolutional input "
                             f"(InputType.convolutional), got {input_type!r}")
        if input_type is not None and input_type != self._image_type():
            raise ValueError(f"CnnToFeedForwardPreProcessor: configured for "
                             f"{self._image_type()!r}, got {input_type!r}")
        return InputType.feed_forward(self.height * self.width * self.channels)


class FeedForwardToCnnPreProcessor(_Image):
    """Rows (n, c*h*w) into images (n, c, h, w) (or (n, h, w, c) for NHWC), the inverse of
    `CnnToFeedForwardPreProcessor`; images of the configured shape pass through. DL4J's
    ``FeedForwardToCnnPreProcessor(inputHeight, inputWidth, numChannels)``: height first.

    Parameters
    ----------
    height, width, channels : int
    data_format : {"NCHW", "NHWC"} or CNN2DFormat
    """

    def pre_process(self, x, mgr):
        size = self.height * self.width * self.channels
        self._in_shape = tuple(x.shape)
        if x.ndim == 4 and tuple(x.shape[1:]) == self._image_shape():
            return x
        if x.ndim != 2 or x.shape[1] != size:
            raise ValueError(f"FeedForwardToCnnPreProcessor: invalid input: expected "
                             f"{size} columns (height {self.height} x width {self.width} x "
                             f"channels {self.channels}) or images {self._describe()}, got "
                             f"shape {tuple(x.shape)}")
        return _reshaped(x, (x.shape[0],) + self._image_shape(), ArrayType.ACTIVATIONS, mgr)

    def backprop(self, epsilon, mgr):
        shape = getattr(self, "_in_shape", None)
        if shape is None or len(shape) == 4:
            return epsilon
        return _reshaped(epsilon, (epsilon.shape[0], shape[1]), ArrayType.ACTIVATION_GRAD, mgr)

    def clear(self):
        self.__dict__.pop("_in_shape", None)

    def output_type(self, input_type):
        size = self.height * self.width * self.channels
        if input_type is not None:
            if input_type.kind == "CNN":
                if input_type != self._image_type():
                    raise ValueError(f"FeedForwardToCnnPreProcessor: configured for "
                                     f"{self._image_type()!r}, got {input_type!r}")
            elif input_type.kind not in ("FF", "CNNFlat") \
                    or input_type.elements_per_example() != size:
                raise ValueError(f"FeedForwardToCnnPreProcessor: expected rows of {size} "
                                 f"values (height {self.height} x width {self.width} x "
                                 f"channels {self.channels}), got {input_type!r}")
        return self._image_type()
