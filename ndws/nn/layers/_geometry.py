"""What the layers of images share: their size fields (an int or a pair), the geometry of a
window (kernel, stride, padding, dilation, mode) on the input type, checked with DL4J's
messages when the configuration is built, and the check of the arrays they get.

The output sizes are `ndws.nn.functional.conv_output_size` / `same_padding`'s (DL4J's
``ConvolutionUtils``); what this module adds is the layer's name, index and input type in
every message (DL4J's ``InputTypeUtil.getOutputTypeCnnLayers``)."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ndws.nn import functional as F
from ndws.nn.inputs import CNN2DFormat, ConvolutionMode, InputType, RNNFormat
from ndws.nn.preprocessors import FeedForwardToCnnPreProcessor
from ndws.nn.updaters import FieldTypeError

__all__ = ["type_cache", "pair", "size_1d", "Call", "Window", "window", "images_of_rows", "image_input",
           "data_format", "check_image", "too_large", "ImageLayer", "WindowLayer"]

#: a layer's arrays per example may not exceed this many bytes: past it an im2col buffer or an
#: activation of a batch overflows what an allocation can ask (caught when the configuration is
#: built, before anything is allocated)
MAX_EXAMPLE_BYTES = 1 << 48


#: the input types a layer keeps worked-out geometry for: a time series of varying length is
#: a new type per length, and the caches must not grow with every batch
MAX_CACHED_TYPES = 64


def type_cache(layer: Any, name: str) -> dict:
    """The layer's dict `name` of values worked out per input type, emptied when it holds
    MAX_CACHED_TYPES of them (time series of ever new lengths)."""
    cache = layer.__dict__.setdefault(name, {})
    if len(cache) >= MAX_CACHED_TYPES:
        cache.clear()
    return cache


def pair(owner: str, name: str, value: Any, lo: int) -> tuple[int, int]:
    """An int or a pair of ints >= lo as a pair (DL4J's ``int[2]`` builder fields)."""
    items = value if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2 or any(isinstance(v, (bool, np.bool_))
                              or not isinstance(v, (int, np.integer)) for v in items):
        raise FieldTypeError(f"{owner}.{name}: expected an int or a pair of ints, got "
                             f"{value!r:.40}")
    if any(not lo <= v <= 1 << 31 for v in items):
        raise ValueError(f"{owner}.{name}: expected ints in [{lo}, 2**31], got {value!r:.40}")
    return (int(items[0]), int(items[1]))


class Call(NamedTuple):
    """What one kernel call of a window layer on images of one type needs, worked out once
    per type: the kernel's keyword arguments, the output's shape per example, and the scratch
    bytes the layer remembers per (batch, pass, threads, itemsize)."""

    kwargs: dict
    out_shape: tuple
    scratch: dict


class Window(NamedTuple):
    """A window layer's geometry on its input: output size and the padding actually applied
    (top, bottom, left, right)."""

    out_h: int
    out_w: int
    padding: tuple[int, int, int, int]


def _prefix(layer: Any, dim: str) -> str:
    return (f"Invalid configuration for layer (idx={layer.index}, name="
            f"{layer.name or '(not named)'}, type={type(layer).__name__}) for {dim} dimension: ")


def window(layer: Any, t: InputType, kernel: tuple, stride: tuple, padding: tuple,
           dilation: tuple, mode: ConvolutionMode, n_out: int,
           dims: tuple = ("height", "width")) -> Window:
    """The output size and padding of `layer`'s window on images of type `t` (DL4J's
    ``getOutputTypeCnnLayers``), or ValueError with DL4J's message, the layer's index, type
    and the dimension: a kernel larger than the padded input (always checked: DL4J beta5's
    rule), a Strict size that does not divide, padding with Same."""
    suffix = (f"\nInput type = {t!r}, kernel = {list(kernel)}, strides = {list(stride)}, "
              f"padding = {list(padding)}, layer size (output channels) = {n_out}, "
              f"convolution mode = {mode.name}")
    if mode is ConvolutionMode.SAME and any(padding):
        raise ValueError(f"{_prefix(layer, 'height')}Padding cannot be used when using the "
                         f"`same' convolution mode (padding = {list(padding)}){suffix}")
    if mode is ConvolutionMode.CAUSAL and not getattr(layer, "allow_causal", False):
        raise ValueError(f"{type(layer).__name__}: Causal convolution mode can only be used with "
                         f"1D convolutional neural network layers")
    same = mode in (ConvolutionMode.SAME, ConvolutionMode.CAUSAL)
    if mode is ConvolutionMode.CAUSAL and any(padding):
        raise ValueError(f"{_prefix(layer, 'height')}Padding cannot be used with the causal "
                         f"convolution mode (padding = {list(padding)}){suffix}")
    sizes, pads = [], []
    for axis, dim, size in ((0, dims[0], t.height), (1, dims[1], t.width)):
        k, s, p, d = kernel[axis], stride[axis], padding[axis], dilation[axis]
        ek = (k - 1) * d + 1
        if not same and ek > size + 2 * p:
            what = (f"kernel size {k}" if d == 1
                    else f"effective kernel size {ek} (kernel {k}, dilation {d})")
            letter = dim[0].upper()
            raise ValueError(f"{_prefix(layer, dim)}{what} larger than input {dim} {size} plus "
                             f"padding 2*{p}. Require 0 < k{letter} <= in{dim.capitalize()} + "
                             f"2*pad{letter}; got (k{letter}={ek}, in{dim.capitalize()}={size}, "
                             f"pad{letter}={p}){suffix}")
        try:
            sizes.append(F.conv_output_size(size, k, s, p, d, mode.name, dim))
        except ValueError as exc:
            raise ValueError(f"{_prefix(layer, dim)}\nCombination of kernel size, stride and "
                             f"padding are not valid for given input {dim}, using "
                             f"ConvolutionMode.{mode.value}\n{exc}{suffix}") from None
        if mode is ConvolutionMode.SAME:
            pads.append(F.same_padding(size, k, s, d))
        elif mode is ConvolutionMode.CAUSAL:
            pads.append((sum(F.same_padding(size, k, s, d)), 0))    # all before the input
        else:
            pads.append((p, p))
    return Window(sizes[0], sizes[1], pads[0] + pads[1])


def images_of_rows(t: InputType) -> Any:
    """What DL4J's layers of images insert before themselves: rows of pixels
    (convolutional_flat) made images by a `FeedForwardToCnnPreProcessor`; None otherwise."""
    if t.kind == "CNNFlat":
        return FeedForwardToCnnPreProcessor(t.height, t.width, t.channels)
    return None


def image_input(layer: Any, t: InputType | None, where: str) -> InputType:
    """`t` when it is images; else ValueError saying what the layer needs."""
    name = type(layer).__name__
    if t is None:
        raise ValueError(f"{where}: {name} needs the height and width of its input: give the "
                         f"configuration input_type=InputType.convolutional(height, width, "
                         f"channels) (or convolutional_flat)")
    if t.kind != "CNN":
        raise ValueError(f"{where}: {name} takes images (InputType.convolutional), got {t!r}"
                         + ("; set input_type=InputType.convolutional_flat(height, width, "
                            "channels) for rows of pixels" if t.kind == "FF" else ""))
    return t


def data_format(layer: Any, t: InputType, where: str) -> CNN2DFormat:
    """The layer's data format: its own (which must be its input's), or its input's."""
    own = layer.data_format
    if own is not None and own is not t.data_format:
        raise ValueError(f"{where}.data_format: {own.name} does not match its input "
                         f"{t!r} ({t.data_format.name})")
    return t.data_format


def too_large(layer: Any, where: str, values: int, itemsize: int = 8) -> None:
    """ValueError when one example's array of `values` elements exceeds MAX_EXAMPLE_BYTES."""
    if values * itemsize > MAX_EXAMPLE_BYTES:
        raise ValueError(f"{where}: {type(layer).__name__} would need {values:,} values per "
                         f"example for one of its arrays, more than 2**48 bytes")


def check_image(layer: Any, x: Any) -> None:
    """The array `layer` got against its input type (DL4J's ``validateInputRank`` /
    ``validateInputDepth`` messages); a custom layer before it may have made anything."""
    t = layer.input_type
    expected = t.shape()
    if x.ndim == 4 and tuple(x.shape[1:]) == expected:
        return
    name = type(layer).__name__
    who = f"(layer name = {layer.name or '(not named)'}, layer index = {layer.index})"
    if x.ndim != 4:
        layout = ("[minibatchSize, layerInputDepth, inputHeight, inputWidth]"
                  if t.data_format is CNN2DFormat.NCHW
                  else "[minibatchSize, inputHeight, inputWidth, layerInputDepth]")
        hint = (" (Wrong input type (see InputType.convolutional_flat()) or wrong data type?)"
                if x.ndim == 2 else "")
        raise ValueError(f"Got rank {x.ndim} array as input to {name} {who} with shape "
                         f"{tuple(x.shape)}. Expected rank 4 array with shape {layout}.{hint}")
    c_axis = 1 if t.data_format is CNN2DFormat.NCHW else 3
    if x.shape[c_axis] != t.channels:
        other = 3 if c_axis == 1 else 1
        hint = (f" (the other layout's channel axis has {t.channels}: NHWC data into an NCHW "
                f"layer, or the reverse?)" if x.shape[other] == t.channels else "")
        raise ValueError(f"Cannot do forward pass in {name} {who}: input array channels does "
                         f"not match CNN layer configuration (data format = "
                         f"{t.data_format.name}, data input channels = {x.shape[c_axis]}, "
                         f"{tuple(x.shape)}; expected input channels = {t.channels}){hint}")
    raise ValueError(f"{name} {who}: input of shape {tuple(x.shape)}, expected "
                     f"{t.describe_shape()} ({t!r}): the geometry and memory plan are made "
                     f"for that height and width")


class ImageLayer:
    """Mixin of the layers that take images: DL4J's preprocessor for rows of pixels
    (convolutional_flat), no input type implied by n_in (channels), the data format taken from
    the input type, and the runtime check of the input array."""

    def implied_input_type(self):
        return None                     # n_in is channels: it says nothing of height and width

    def preprocessor_for(self, input_type):
        return images_of_rows(input_type)

    def _check_resolved(self, where):
        t = image_input(self, self.input_type, where)
        self.data_format = data_format(self, t, where)
        super()._check_resolved(where)


def size_1d(owner: str, name: str, value: Any, lo: int) -> int:
    """An int >= lo (or a 1-tuple of one): a 1-D layer's size field (DL4J's ``int``)."""
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise FieldTypeError(f"{owner}.{name}: expected an int, got {value!r:.40}")
        value = value[0]
    return pair(owner, name, value, lo)[0]


class WindowLayer(ImageLayer):
    """Mixin of the layers with a window (convolutions and pooling): the fields kernel_size,
    stride, padding, dilation, convolution_mode (None: the network's, TRUNCATE by default) and
    data_format (None: the input's), checked when set; the geometry on the input type, checked
    when the configuration is built.

    A 1-D layer (``spatial_dims = 1``, DL4J's Convolution1DLayer / Subsampling1DLayer) takes
    time series (n, c, T) (NCW) or (n, T, c) (NWC), seen as images one row high, (n, c, 1, T) /
    (n, 1, T, c) (views: the kernels then find the steps contiguous along a row), so the same
    window and kernels do the work; its sizes are ints, CAUSAL is allowed, and a series of
    varying length gets its geometry when it comes."""

    window_fields = ("kernel_size", "stride", "padding", "dilation", "convolution_mode",
                     "data_format")
    #: 2 for images, 1 for time series
    spatial_dims = 2

    @property
    def allow_causal(self) -> bool:
        return self.spatial_dims == 1

    def _init_window(self, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                     convolution_mode: Any, data_format: Any) -> None:
        owner = type(self).__name__
        size = pair if self.spatial_dims == 2 else size_1d
        self.kernel_size = size(owner, "kernel_size", kernel_size, 1)
        self.stride = size(owner, "stride", stride, 1)
        self.padding = size(owner, "padding", padding, 0)
        self.dilation = size(owner, "dilation", dilation, 1)
        self.convolution_mode = (None if convolution_mode is None else
                                 ConvolutionMode.parse(convolution_mode,
                                                       f"{owner}.convolution_mode"))
        fmt = CNN2DFormat if self.spatial_dims == 2 else RNNFormat
        self.data_format = (None if data_format is None
                            else fmt.parse(data_format, f"{owner}.data_format"))
        self._check_mode(owner)

    def pairs(self) -> tuple:
        """(kernel, stride, padding, dilation) of the 2-D window, each a pair."""
        if self.spatial_dims == 2:
            return self.kernel_size, self.stride, self.padding, self.dilation
        return ((1, self.kernel_size), (1, self.stride), (0, self.padding),
                (1, self.dilation))

    def _check_mode(self, where: str) -> None:
        mode = self.convolution_mode
        if mode is ConvolutionMode.CAUSAL and not self.allow_causal:
            raise ValueError(f"{where}.convolution_mode: Causal convolution mode can only be "
                             f"used with 1D convolutional neural network layers")
        if mode in (ConvolutionMode.SAME, ConvolutionMode.CAUSAL) and any(self.pairs()[2]):
            raise ValueError(f"{where}.padding: Padding cannot be used when using the "
                             f"`{mode.value.lower()}' convolution mode (padding = "
                             f"{self.padding!r})")

    # -- the input: images, or time series seen as images ---------------------------------------

    def implied_input_type(self):
        return None

    def preprocessor_for(self, input_type):
        return super().preprocessor_for(input_type) if self.spatial_dims == 2 else None

    def _check_resolved(self, where):
        if self.spatial_dims == 2:
            super()._check_resolved(where)
        else:
            t, name = self.input_type, type(self).__name__
            if t is None:
                raise ValueError(f"{where}: {name} needs the type of its input: give the "
                                 f"configuration input_type=InputType.recurrent(size, length)")
            if t.kind != "RNN":
                raise ValueError(f"{where}: {name} takes time series (InputType.recurrent), "
                                 f"got {t!r}")
            own = self.data_format
            if own is not None and own is not t.data_format:
                raise ValueError(f"{where}.data_format: {own.name} does not match its input "
                                 f"{t!r} ({t.data_format.name})")
            self.data_format = t.data_format
            super(ImageLayer, self)._check_resolved(where)      # past ImageLayer's image check
        self._check_mode(where)
        if self.image_type() is not None:
            self.geometry()

    def image_type(self, length: int | None = None) -> InputType | None:
        """The images the window moves over: the input's; for a 1-D layer its time series as
        an image one row high (of `length` steps, default the input type's; None when
        unknown)."""
        t = self.input_type
        if self.spatial_dims == 2:
            return t
        if length is None:
            cached = self.__dict__.get("_series_image")
            if cached is not None and cached[0] is t:
                return cached[1]
            length = t.time_series_length
            if length is None:
                return None
        fmt = "NCHW" if t.data_format is RNNFormat.NCW else "NHWC"
        image = InputType.convolutional(1, length, t.size, fmt)
        if length == t.time_series_length:
            self._series_image = (t, image)
        return image

    def images(self, x: Any) -> tuple:
        """The layer's input array as images, and their type (checked; a view for 1-D)."""
        if self.spatial_dims == 2:
            check_image(self, x)
            return x, self.input_type
        t = self.input_type
        ncw = t.data_format is RNNFormat.NCW
        name = f"{type(self).__name__} (layer index = {self.index})"
        if x.ndim != 3 or x.shape[1 if ncw else 2] != t.size:
            raise ValueError(f"{name}: expected a time series {t.describe_shape()} ({t!r}), "
                             f"got shape {tuple(x.shape)}")
        length = x.shape[2 if ncw else 1]
        if t.time_series_length not in (None, length):
            raise ValueError(f"{name}: expected {t.time_series_length} time steps ({t!r}), got "
                             f"{length}")
        image = self.image_type(length)
        if length != t.time_series_length:
            self._check_image_sizes(f"layers[{self.index}]", image)
        if not x.flags.c_contiguous:
            raise ValueError(f"{name}: the time series must be C-contiguous")
        return x.reshape(image.shape(x.shape[0])), image

    def _check_image_sizes(self, where: str, t: InputType) -> None:
        # a series of a length first seen at run time: its geometry and sizes, checked now
        self.geometry(t)

    def as_series(self, a: Any) -> Any:
        """An image array (n, c, 1, T) / (n, 1, T, c) of a 1-D layer as its time series (a
        view); an image layer's array as it is."""
        if self.spatial_dims == 2:
            return a
        s = a.shape
        return a.reshape((s[0], s[1], s[3]) if self.data_format is RNNFormat.NCW
                         else (s[0], s[2], s[3]))

    def output_image(self, t: InputType) -> InputType:
        """The type of the output of images of type `t`."""
        g = self.geometry(t)
        return InputType.convolutional(g.out_h, g.out_w, self._window_channels(),
                                       t.data_format.name)

    def output_type(self, input_type):
        t = self.image_type()
        if self.spatial_dims == 2:
            return self.output_image(t)
        fmt = self.data_format.name
        if t is None:
            return InputType.recurrent(self._window_channels(), None, fmt)
        out = self.output_image(t)
        return InputType.recurrent(out.channels, out.width, fmt)

    def _window_channels(self) -> int:
        # the output channels (DL4J's "layer size" in the messages)
        return self.n_out if self.n_out is not None else self.n_in

    def geometry(self, t: InputType | None = None) -> Window:
        """The output size and applied padding on images of type `t` (default: the layer's
        input; computed once per type)."""
        t = self.image_type() if t is None else t
        cache = type_cache(self, "_windows")
        w = cache.get(t)
        if w is None:
            mode = self.convolution_mode or ConvolutionMode.TRUNCATE
            k, s, p, d = self.pairs()
            dims = ("height", "width") if self.spatial_dims == 2 else ("height", "length")
            w = cache[t] = window(self, t, k, s, p, d, mode, self._window_channels(), dims)
        return w

    def kernel_call(self, t: InputType) -> Call:
        """The kernel call on images of type t, worked out once (the last one found by
        identity: a layer of fixed input meets one type, and a pass asks twice)."""
        last = self.__dict__.get("_last_call")
        if last is not None and last[0] is t:
            return last[1]
        calls = type_cache(self, "_calls")
        c = calls.get(t)
        if c is None:
            g = self.geometry(t)
            k, stride, _, dilation = self.pairs()
            kwargs = {"stride": stride, "padding": g.padding, "dilation": dilation,
                      "data_format": t.data_format.name}
            if self.kernel_in_kwargs:
                kwargs["kernel_size"] = k
            c = calls[t] = Call(kwargs, self.output_image(t).shape(), {})
        self._last_call = (t, c)
        return c

    #: whether the kernels take kernel_size (pooling) or read it off the weights (convolution)
    kernel_in_kwargs = False
