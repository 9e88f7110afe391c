"""Input preprocessors: the reshapes a network runs on a layer's input before the layer, and on
its epsilon after it (DL4J's ``InputPreProcessor``): `CnnToFeedForwardPreProcessor` flattens
images into rows for a dense layer, `FeedForwardToCnnPreProcessor` makes rows into images for a
convolution; `RnnToFeedForwardPreProcessor` / `FeedForwardToRnnPreProcessor` turn time series
into rows (one per example and step) and back, `CnnToRnnPreProcessor` / `RnnToCnnPreProcessor`
images into time series and back. A configuration with ``input_type=`` inserts them where
DL4J's ``setInputType`` does; ``input_preprocessors={i: p}`` sets them by hand.

They are views when the array's memory is already in the order they need (every built-in
layer's output is), so they cost nothing; otherwise they copy into the manager's ACTIVATIONS
(forward) or ACTIVATION_GRAD (backward) workspace, as DL4J's do.

Time series become rows in DL4J's order: row ``t * n_samples + i`` is example i at step t
(time-major blocks of the minibatch). The recurrent layers keep their outputs in that order in
memory, a (time, n_samples, size) array seen as (n_samples, size, time) for NCW or (n_samples,
time, size) for NWC, so the rows of a time series are a view of it.

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
from ndws.nn.inputs import CNN2DFormat, InputType, RNNFormat, _dimension, config_dict, registered
from ndws.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr

__all__ = ["InputPreProcessor", "CnnToFeedForwardPreProcessor", "FeedForwardToCnnPreProcessor",
           "RnnToFeedForwardPreProcessor", "FeedForwardToRnnPreProcessor",
           "CnnToRnnPreProcessor", "RnnToCnnPreProcessor", "MaskState"]

_PREPROCESSORS: dict[str, type] = {}


def _class_key(cls: type) -> str:
    # "@class": the bare name for ndws' own, module.qualname for a custom one
    return cls.__name__ if cls.__module__ == __name__ else f"{cls.__module__}.{cls.__qualname__}"


class MaskState(enum.Enum):
    """How a mask travels with the activations (DL4J's ``MaskState``): ACTIVE masks are applied
    by the layers that get them, PASSTHROUGH ones are carried on (a recurrent layer's output is
    not masked, its padded steps are left to the loss) and only some layers use them."""

    ACTIVE = "Active"
    PASSTHROUGH = "Passthrough"


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
    #: the examples of the batch in flight, which the network sets before each call (DL4J's
    #: ``miniBatchSize`` argument): rows of a time series do not say it
    minibatch: int = 0

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

    def feed_forward_mask(self, mask: NDArray | None, state: MaskState | None,
                          mgr: LayerWorkspaceMgr) -> tuple[NDArray | None, MaskState | None]:
        """The features mask as the layer after this preprocessor sees it (DL4J's
        ``feedForwardMaskArray``): unchanged by default."""
        return mask, state

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


# -- time series ----------------------------------------------------------------------------------

def time_major(x: NDArray, fmt: RNNFormat) -> NDArray:
    """The (time, n_samples, size) view of a time series of format `fmt` (no copy)."""
    return x.transpose(2, 0, 1) if fmt is RNNFormat.NCW else x.transpose(1, 0, 2)


def sequence_view(tbn: NDArray, fmt: RNNFormat) -> NDArray:
    """A (time, n_samples, size) array seen as a time series of format `fmt` (no copy)."""
    return tbn.transpose(1, 2, 0) if fmt is RNNFormat.NCW else tbn.transpose(1, 0, 2)


def rows_of_sequence(x: NDArray, fmt: RNNFormat, t: ArrayType, mgr: LayerWorkspaceMgr
                     ) -> NDArray:
    """The time series `x` as rows (time * n_samples, size), row ``t * n + i`` = example i at
    step t: a view when its memory is time-major (what the recurrent layers make), else a copy
    in t's workspace."""
    tbn = time_major(x, fmt)
    if not tbn.flags.c_contiguous:
        tbn = mgr.dup(t, tbn)
    return tbn.reshape(tbn.shape[0] * tbn.shape[1], tbn.shape[2])


def sequence_of_rows(rows: NDArray, batch: int, fmt: RNNFormat, t: ArrayType,
                     mgr: LayerWorkspaceMgr) -> NDArray:
    """Rows (time * batch, size) in DL4J's order as a time series of format `fmt`: a view of
    C-contiguous rows, else of their copy in t's workspace."""
    if not rows.flags.c_contiguous:
        rows = mgr.dup(t, rows)
    return sequence_view(rows.reshape(rows.shape[0] // batch, batch, rows.shape[1]), fmt)


def mask_rows(mask: NDArray | None, mgr: LayerWorkspaceMgr) -> NDArray | None:
    """A (n_samples, time) mask as one value per row (time * n_samples,) in DL4J's row order
    (its ``reshapeTimeSeriesMaskToVector``), in ACTIVATIONS; other masks as they are."""
    if mask is None or mask.ndim != 2 or mask.shape[1] == 1:
        return mask
    tm = mask.transpose(1, 0)
    if not tm.flags.c_contiguous:
        tm = mgr.dup(ArrayType.ACTIVATIONS, tm)
    return tm.reshape(mask.shape[0] * mask.shape[1])


def mask_of_rows(mask: NDArray | None, batch: int, mgr: LayerWorkspaceMgr) -> NDArray | None:
    """One value per row (time * batch,) as a (batch, time) mask (DL4J's
    ``reshapeVectorToTimeSeriesMask``), in ACTIVATIONS; None as it is."""
    if mask is None:
        return None
    if mask.ndim == 2 and mask.shape[1] != 1:
        return mask                                     # already per step
    flat = mask.reshape(mask.shape[0])
    if batch < 1 or flat.shape[0] % batch:
        raise ValueError(f"mask: {flat.shape[0]} rows are not whole time steps of a batch of "
                         f"{batch}")
    return mgr.dup(ArrayType.ACTIVATIONS, flat.reshape(flat.shape[0] // batch, batch)
                   .transpose(1, 0))


def _rnn_format(owner: str, value: Any) -> RNNFormat:
    return RNNFormat.parse(value, f"{owner}.data_format")


class RnnToFeedForwardPreProcessor(InputPreProcessor):
    """Time series (n, size, time) (or (n, time, size) for NWC) into rows (time * n, size),
    row ``t * n + i`` = example i at step t (DL4J's ``RnnToFeedForwardPreProcessor``): what a
    dense, output or embedding layer after a recurrent one gets. Rows pass through. The
    epsilon goes back the same way; a (n, time) mask becomes one value per row.

    Parameters
    ----------
    data_format : {"NCW", "NWC"} or RNNFormat
    """

    fields = ("data_format",)

    def __init__(self, data_format: Any = "NCW"):
        self.data_format = _rnn_format(type(self).__name__, data_format)

    def pre_process(self, x, mgr):
        if x.ndim == 2:
            self._in_shape = None
            return x
        if x.ndim != 3:
            raise ValueError(f"RnnToFeedForwardPreProcessor: invalid input: expected a time "
                             f"series {'(n, size, time)' if self.data_format is RNNFormat.NCW else '(n, time, size)'}"
                             f" ({self.data_format.name}) or rows, got shape {tuple(x.shape)}")
        self._in_shape = tuple(x.shape)
        return rows_of_sequence(x, self.data_format, ArrayType.ACTIVATIONS, mgr)

    def backprop(self, epsilon, mgr):
        shape = getattr(self, "_in_shape", None)
        if shape is None or epsilon.ndim == 3:
            return epsilon
        return sequence_of_rows(epsilon, shape[0], self.data_format, ArrayType.ACTIVATION_GRAD,
                                mgr)

    def feed_forward_mask(self, mask, state, mgr):
        return mask_rows(mask, mgr), state

    def clear(self):
        self.__dict__.pop("_in_shape", None)

    def output_type(self, input_type):
        if input_type is None:
            return None
        if input_type.kind != "RNN":
            raise ValueError(f"RnnToFeedForwardPreProcessor: expected a time series "
                             f"(InputType.recurrent), got {input_type!r}")
        return InputType.feed_forward(input_type.size)

    def memory_use(self, batch, training, itemsize):
        return []      # the recurrent layers' outputs are time-major: a view


class FeedForwardToRnnPreProcessor(InputPreProcessor):
    """Rows (time * n, size) in DL4J's order into time series (n, size, time) (or (n, time,
    size) for NWC), the inverse of `RnnToFeedForwardPreProcessor`; n is the batch's examples
    (the network says it: `minibatch`). Time series pass through. A mask of one value per row
    becomes (n, time).

    Parameters
    ----------
    data_format : {"NCW", "NWC"} or RNNFormat
    """

    fields = ("data_format",)

    def __init__(self, data_format: Any = "NCW"):
        self.data_format = _rnn_format(type(self).__name__, data_format)

    def _batch(self, rows: int) -> int:
        n = self.minibatch or rows
        if rows % n:
            raise ValueError(f"FeedForwardToRnnPreProcessor: {rows} rows are not whole time "
                             f"steps of a batch of {n} examples")
        return n

    def pre_process(self, x, mgr):
        if x.ndim == 3:
            self._rows = False
            return x
        if x.ndim != 2:
            raise ValueError(f"FeedForwardToRnnPreProcessor: invalid input: expected rows "
                             f"(time * n_samples, size) or a time series, got shape "
                             f"{tuple(x.shape)}")
        self._rows = True
        return sequence_of_rows(x, self._batch(x.shape[0]), self.data_format,
                                ArrayType.ACTIVATIONS, mgr)

    def backprop(self, epsilon, mgr):
        if not getattr(self, "_rows", True) or epsilon.ndim != 3:
            return epsilon
        return rows_of_sequence(epsilon, self.data_format, ArrayType.ACTIVATION_GRAD, mgr)

    def feed_forward_mask(self, mask, state, mgr):
        if mask is None or mask.ndim == 2 and mask.shape[1] != 1:
            return mask, state
        return mask_of_rows(mask, self._batch(mask.shape[0]), mgr), state

    def clear(self):
        self.__dict__.pop("_rows", None)

    def output_type(self, input_type):
        if input_type is None:
            return None
        if input_type.kind == "RNN":
            return input_type
        if input_type.kind not in ("FF", "CNNFlat"):
            raise ValueError(f"FeedForwardToRnnPreProcessor: expected rows (InputType."
                             f"feed_forward), got {input_type!r}")
        return InputType.recurrent(input_type.elements_per_example(),
                                   data_format=self.data_format.name)

    def memory_use(self, batch, training, itemsize):
        return []      # the rows of built-in layers are C-contiguous: a view


class _ImageSeries(_Image):
    # images of one step each <-> time series: the images' geometry and the series' format,
    # the work done by the two preprocessors they chain (made by each subclass's _parts)
    fields = _Image.fields + ("rnn_data_format",)

    def __init__(self, height: int, width: int, channels: int, data_format: Any = "NCHW",
                 rnn_data_format: Any = "NCW"):
        super().__init__(height, width, channels, data_format)
        self.rnn_data_format = RNNFormat.parse(rnn_data_format, f"{type(self).__name__}."
                                               f"rnn_data_format")
        self._parts()

    def _parts(self) -> None:
        raise NotImplementedError


class CnnToRnnPreProcessor(_ImageSeries):
    """Images (time * n, c, h, w) (NCHW; (time * n, h, w, c) for NHWC), one per example and
    step in DL4J's row order, into time series (n, c*h*w, time) (or (n, time, c*h*w) for
    NWC): `CnnToFeedForwardPreProcessor`'s flattening, then `FeedForwardToRnnPreProcessor`
    (DL4J's ``CnnToRnnPreProcessor``).

    Parameters
    ----------
    height, width, channels : int
    data_format : {"NCHW", "NHWC"} or CNN2DFormat
        Of the images.
    rnn_data_format : {"NCW", "NWC"} or RNNFormat
        Of the time series.
    """

    def _parts(self):
        self._flat = CnnToFeedForwardPreProcessor(self.height, self.width, self.channels,
                                                  self.data_format)
        self._seq = FeedForwardToRnnPreProcessor(self.rnn_data_format)

    def pre_process(self, x, mgr):
        if x.ndim == 3:
            return x
        self._seq.minibatch = self.minibatch
        return self._seq.pre_process(self._flat.pre_process(x, mgr), mgr)

    def backprop(self, epsilon, mgr):
        return self._flat.backprop(self._seq.backprop(epsilon, mgr), mgr)

    def feed_forward_mask(self, mask, state, mgr):
        self._seq.minibatch = self.minibatch
        return self._seq.feed_forward_mask(mask, state, mgr)

    def clear(self):
        self._seq.clear()

    def output_type(self, input_type):
        if input_type is not None and input_type.kind != "CNN":
            raise ValueError(f"CnnToRnnPreProcessor: expected images (InputType.convolutional),"
                             f" got {input_type!r}")
        if input_type is not None and input_type != self._image_type():
            raise ValueError(f"CnnToRnnPreProcessor: configured for {self._image_type()!r}, got "
                             f"{input_type!r}")
        return InputType.recurrent(self.height * self.width * self.channels,
                                   data_format=self.rnn_data_format.name)


class RnnToCnnPreProcessor(_ImageSeries):
    """Time series (n, c*h*w, time) (or (n, time, c*h*w) for NWC) into images (time * n, c, h,
    w) (or NHWC), one per example and step in DL4J's row order: `RnnToFeedForwardPreProcessor`,
    then `FeedForwardToCnnPreProcessor` (DL4J's ``RnnToCnnPreProcessor``), e.g. video frames
    for a convolution.

    Parameters
    ----------
    height, width, channels : int
    data_format : {"NCHW", "NHWC"} or CNN2DFormat
        Of the images.
    rnn_data_format : {"NCW", "NWC"} or RNNFormat
        Of the time series.
    """

    def _parts(self):
        self._rows = RnnToFeedForwardPreProcessor(self.rnn_data_format)
        self._image = FeedForwardToCnnPreProcessor(self.height, self.width, self.channels,
                                                   self.data_format)

    def pre_process(self, x, mgr):
        if x.ndim == 4:
            return x
        size = self.height * self.width * self.channels
        if x.ndim != 3 or x.shape[1 if self.rnn_data_format is RNNFormat.NCW else 2] != size:
            raise ValueError(f"RnnToCnnPreProcessor: invalid input: expected a time series of "
                             f"{size} features (height {self.height} x width {self.width} x "
                             f"channels {self.channels}), got shape {tuple(x.shape)}")
        return self._image.pre_process(self._rows.pre_process(x, mgr), mgr)

    def backprop(self, epsilon, mgr):
        return self._rows.backprop(self._image.backprop(epsilon, mgr), mgr)

    def feed_forward_mask(self, mask, state, mgr):
        return self._rows.feed_forward_mask(mask, state, mgr)

    def clear(self):
        self._rows.clear()
        self._image.clear()

    def output_type(self, input_type):
        size = self.height * self.width * self.channels
        if input_type is not None and (input_type.kind != "RNN" or input_type.size != size):
            raise ValueError(f"RnnToCnnPreProcessor: expected a time series of {size} features "
                             f"(InputType.recurrent({size})), got {input_type!r}")
        return self._image_type()
