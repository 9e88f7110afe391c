"""What flows between the layers of a network: `InputType` (DL4J's ``InputType``: feed-forward
rows, images, time series) and the enums a layer's geometry takes: `CNN2DFormat` and
`RNNFormat` (where the channels sit), `ConvolutionMode` (how a window meets the border) and
`PoolingType`.

A configuration given ``input_type=`` walks its layers with it: each layer learns the type of
its input (and from it its n_in and its output's shape), and gets the preprocessor DL4J's
``setInputType`` would insert (docs/convolution.md).

Examples
--------
>>> from ndws.nn import InputType, ConvolutionMode
>>> t = InputType.convolutional(28, 28, 1)
>>> t, t.shape(64), t.elements_per_example()
(InputType.convolutional(28, 28, 1), (64, 1, 28, 28), 784)
>>> InputType.convolutional(28, 28, 3, data_format="nhwc").shape()
(28, 28, 3)
>>> ConvolutionMode.parse("same", "mode")
<ConvolutionMode.SAME: 'Same'>
"""
from __future__ import annotations

import enum
from typing import Any

import numpy as np

from ndws.nn.updaters import FieldTypeError

__all__ = ["InputType", "CNN2DFormat", "RNNFormat", "ConvolutionMode", "PoolingType", "member",
           "one_example", "check_input_shape", "config_dict", "field_json", "registered"]


def member(cls: type, value: Any, unknown: str, hint: str = "") -> Any:
    """`value` as a member of enum `cls`: the member itself or its name in any case; else
    ValueError "<unknown> <value>; expected one of <names> <hint>"."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str) and value.upper() in cls.__members__:
        return cls[value.upper()]
    raise ValueError(f"{unknown} {value!r:.40}; expected one of "
                     f"{', '.join(cls.__members__)}{' ' + hint if hint else ''}")


def config_dict(obj: Any, key: str) -> dict:
    """{"@class": key, field: value, ...} of a layer, preprocessor or vertex `obj` (its
    ``fields``), JSON-ready (`field_json`)."""
    return {"@class": key, **{f: field_json(getattr(obj, f)) for f in obj.fields}}


def field_json(value: Any) -> Any:
    """A configuration field as JSON-ready data: an enum member by name, an object with
    `to_dict` (an updater, a preprocessor) as its dict, a tuple as a list."""
    if isinstance(value, enum.Enum):
        return value.name
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, tuple):
        return list(value)
    return value


def registered(registry: dict, data: Any, what: str, unknown: str) -> tuple[type, dict]:
    """The class and keyword arguments a `to_dict` output describes: a dict whose "@class"
    names a class of `registry` (only classes already imported: a configuration never imports
    code) and whose other entries are fields of that class; ValueError naming `what` (a layer,
    a preprocessor, a vertex) otherwise."""
    if not isinstance(data, dict) or not isinstance(data.get("@class"), str):
        raise ValueError(f"{what}: expected a dict with an '@class' entry, got {data!r:.60}")
    cls = registry.get(data["@class"])
    if cls is None:
        raise ValueError(f"{what}: {unknown} {data['@class']!r} (a custom {what}'s module must "
                         f"be imported before its configuration is loaded)")
    kwargs = {k: v for k, v in data.items() if k != "@class"}
    extra = set(kwargs) - set(cls.fields)
    if extra:
        raise ValueError(f"{cls.__name__}: unknown fields {sorted(extra)}")
    return cls, kwargs


class _Parsed(enum.Enum):
    # an enum field of a layer: its members or their names in any case
    @classmethod
    def parse(cls, value: Any, where: str) -> Any:
        return member(cls, value, f"{where}: unknown {cls.__name__}",
                      f"(any case, or an ndws.nn.{cls.__name__})")


class CNN2DFormat(_Parsed):
    """Where an image's channels sit (DL4J's ``CNN2DFormat``): ``NCHW`` (channels first, the
    default) or ``NHWC`` (channels last, TensorFlow's)."""

    NCHW = "NCHW"
    NHWC = "NHWC"


class RNNFormat(_Parsed):
    """Where a time series' features sit (DL4J's ``RNNFormat``): ``NCW`` ((n, features, time),
    the default) or ``NWC`` ((n, time, features))."""

    NCW = "NCW"
    NWC = "NWC"


class ConvolutionMode(_Parsed):
    """How a convolution or pooling window meets the input's border (DL4J's
    ``ConvolutionMode``; docs/convolution.md has the size formulas).

    STRICT: ``(in - k + 2p) / s + 1`` must be a whole number. TRUNCATE (DL4J's default):
    rounded down, the last rows left out. SAME: ``ceil(in / s)``, padded as needed (the smaller
    half before). CAUSAL: as SAME with all the padding before the input (1-D layers only)."""

    STRICT = "Strict"
    TRUNCATE = "Truncate"
    SAME = "Same"
    CAUSAL = "Causal"


class PoolingType(_Parsed):
    """How a pooling layer reduces a window (DL4J's ``PoolingType``): MAX, AVG, SUM, or PNORM
    (``(sum |x|^p)^(1/p)``)."""

    MAX = "MAX"
    AVG = "AVG"
    SUM = "SUM"
    PNORM = "PNORM"


def _dimension(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise FieldTypeError(f"{owner}: {name} must be an int >= 1, got "
                             f"{type(value).__name__} {value!r:.40}")
    if not 1 <= value <= 1 << 31:
        raise ValueError(f"{owner}: {name} must be an int in [1, 2**31], got {value!r}")
    return int(value)


class InputType:
    """The type of the data between two layers, without the batch dimension (DL4J's
    ``InputType``). Make one with the factory methods; instances are immutable, compare by
    value and round-trip through `to_dict` / `from_dict`.

    Attributes
    ----------
    kind : {"FF", "RNN", "CNN", "CNNFlat"}
        DL4J's ``InputType.Type``.
    size : int or None
        FF and RNN: features per example (per time step).
    height, width, channels : int or None
        CNN and CNNFlat.
    time_series_length : int or None
        RNN: time steps, when fixed.
    data_format : CNN2DFormat or RNNFormat or None
    """

    __slots__ = ("kind", "size", "height", "width", "channels", "time_series_length",
                 "data_format")

    KINDS = ("FF", "RNN", "CNN", "CNNFlat")

    def __init__(self, kind: str, *, size: int | None = None, height: int | None = None,
                 width: int | None = None, channels: int | None = None,
                 time_series_length: int | None = None, data_format: Any = None):
        # the factory methods check their arguments; this only stores them
        set_ = object.__setattr__
        set_(self, "kind", kind)
        set_(self, "size", size)
        set_(self, "height", height)
        set_(self, "width", width)
        set_(self, "channels", channels)
        set_(self, "time_series_length", time_series_length)
        set_(self, "data_format", data_format)

    # -- factories (DL4J's names in snake_case) --------------------------------------------------

    @staticmethod
    def feed_forward(size: int) -> "InputType":
        """Rows of `size` features: arrays (n, size)."""
        return InputType("FF", size=_dimension("InputType.feed_forward", "size", size))

    @staticmethod
    def convolutional(height: int, width: int, channels: int,
                      data_format: Any = "NCHW") -> "InputType":
        """Images: arrays (n, channels, height, width), or (n, height, width, channels) with
        ``data_format="NHWC"``."""
        where = "InputType.convolutional"
        return InputType("CNN", height=_dimension(where, "height", height),
                         width=_dimension(where, "width", width),
                         channels=_dimension(where, "channels", channels),
                         data_format=CNN2DFormat.parse(data_format, f"{where}: data_format"))

    @staticmethod
    def convolutional_flat(height: int, width: int, channels: int) -> "InputType":
        """Images flattened into rows (n, channels * height * width) (MNIST's 784 pixels);
        a layer that wants images gets them through a `FeedForwardToCnnPreProcessor`."""
        where = "InputType.convolutional_flat"
        return InputType("CNNFlat", height=_dimension(where, "height", height),
                         width=_dimension(where, "width", width),
                         channels=_dimension(where, "channels", channels))

    @staticmethod
    def recurrent(size: int, time_series_length: int | None = None,
                  data_format: Any = "NCW") -> "InputType":
        """Time series: arrays (n, size, time) or, with ``data_format="NWC"``,
        (n, time, size); `time_series_length` None when it varies."""
        where = "InputType.recurrent"
        length = (None if time_series_length is None
                  else _dimension(where, "time_series_length", time_series_length))
        return InputType("RNN", size=_dimension(where, "size", size),
                         time_series_length=length,
                         data_format=RNNFormat.parse(data_format, f"{where}: data_format"))

    # -- shapes ---------------------------------------------------------------------------------

    def shape(self, batch: int | None = None) -> tuple:
        """The array shape of this type: per example, or with `batch` first. An RNN type of
        variable length has -1 for its time steps (DL4J's ``getShape``)."""
        if self.kind == "FF":
            per: tuple = (self.size,)
        elif self.kind == "CNNFlat":
            per = (self.height * self.width * self.channels,)
        elif self.kind == "CNN":
            per = ((self.channels, self.height, self.width)
                   if self.data_format is CNN2DFormat.NCHW
                   else (self.height, self.width, self.channels))
        else:
            t = -1 if self.time_series_length is None else self.time_series_length
            per = (self.size, t) if self.data_format is RNNFormat.NCW else (t, self.size)
        return per if batch is None else (batch,) + per

    def example_shapes(self) -> tuple:
        """The shapes one example of this type may have: its own, and for
        convolutional_flat also the image it flattens (its preprocessor takes images as they
        are). -1 stands for any length of a time series."""
        if self.kind == "CNNFlat":
            return (self.shape(), (self.channels, self.height, self.width))
        return (self.shape(),)

    def is_example(self, shape: tuple) -> bool:
        """Whether an array of `shape` is one example of this type (no batch axis)."""
        return any(len(shape) == len(e) and all(d in (-1, g) for d, g in zip(e, shape))
                   for e in self.example_shapes())

    def elements_per_example(self) -> int:
        """Values per example (DL4J's ``arrayElementsPerExample``); an RNN type of variable
        length counts one time step."""
        n = 1
        for d in self.shape():
            n *= max(d, 1)
        return n

    def describe_shape(self) -> str:
        """The expected array shape in words, for error messages:
        ``(n_samples, channels=1, height=28, width=28)``."""
        if self.kind in ("FF", "CNNFlat"):
            return f"(n_samples, {self.shape()[0]})"
        if self.kind == "CNN":
            c, h, w = (f"channels={self.channels}", f"height={self.height}",
                       f"width={self.width}")
            parts = (c, h, w) if self.data_format is CNN2DFormat.NCHW else (h, w, c)
            return f"(n_samples, {', '.join(parts)})"
        t = "time" if self.time_series_length is None else f"time={self.time_series_length}"
        s = f"size={self.size}"
        parts = (s, t) if self.data_format is RNNFormat.NCW else (t, s)
        return f"(n_samples, {', '.join(parts)})"

    # -- identity and JSON ----------------------------------------------------------------------

    def _key(self) -> tuple:
        return tuple(getattr(self, f) for f in self.__slots__)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, InputType) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("InputType is immutable: make a new one with its factory methods")

    def __repr__(self) -> str:
        if self.kind == "FF":
            return f"InputType.feed_forward({self.size})"
        if self.kind == "CNNFlat":
            return f"InputType.convolutional_flat({self.height}, {self.width}, {self.channels})"
        if self.kind == "CNN":
            fmt = "" if self.data_format is CNN2DFormat.NCHW else ", data_format='NHWC'"
            return (f"InputType.convolutional({self.height}, {self.width}, {self.channels}"
                    f"{fmt})")
        t = "" if self.time_series_length is None else f", {self.time_series_length}"
        fmt = "" if self.data_format is RNNFormat.NCW else ", data_format='NWC'"
        return f"InputType.recurrent({self.size}{t}{fmt})"

    def to_dict(self) -> dict:
        """JSON-ready data; `from_dict` rebuilds an equal type."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in ("size", "height", "width", "channels", "time_series_length"):
            if getattr(self, f) is not None:
                out[f] = getattr(self, f)
        if self.data_format is not None:
            out["data_format"] = self.data_format.name
        return out

    @staticmethod
    def from_dict(data: Any) -> "InputType":
        """The type `to_dict` described (ValueError for anything else)."""
        if not isinstance(data, dict) or data.get("kind") not in InputType.KINDS:
            raise ValueError(f"input_type: expected a dict with a kind in "
                             f"{', '.join(InputType.KINDS)}, got {data!r:.80}")
        kind = data["kind"]
        fields = {"FF": ("size",), "CNNFlat": ("height", "width", "channels"),
                  "CNN": ("height", "width", "channels", "data_format"),
                  "RNN": ("size", "time_series_length", "data_format")}[kind]
        unknown = set(data) - set(fields) - {"kind"}
        if unknown:
            raise ValueError(f"input_type: unknown fields {sorted(unknown)} for kind {kind}")
        kwargs = {k: data[k] for k in fields if k in data}
        make = {"FF": InputType.feed_forward, "CNNFlat": InputType.convolutional_flat,
                "CNN": InputType.convolutional, "RNN": InputType.recurrent}[kind]
        try:
            return make(**kwargs)
        except TypeError as exc:
            raise ValueError(f"input_type: {exc}") from None


def one_example(shape: tuple, t: Any) -> bool:
    """Whether input of `shape` is one example of input type `t` (no batch axis)."""
    if t is None or t.kind == "FF":
        return len(shape) == 1
    return t.is_example(shape)


def check_input_shape(shape: tuple, t: Any, where: str, features: str, name: str,
                      allow_row: bool = False, reader: Any = None) -> None:
    """A network's input of `shape` against its input type `t` (`allow_row`: one example
    without the batch axis too): a ValueError naming the argument (`name`), what reads it
    (`where`, e.g. ``layers[0] (DenseLayer)``; `features` for rows, e.g. ``layers[0].n_in``)
    and the shape it expects, with the likely mistake (NHWC data into an NCHW network, one
    image without its batch axis). `reader`: the layer reading it, whose ``accepts_input``
    may take other shapes (EmbeddingSequenceLayer's (n, time) indices)."""
    accepts = getattr(reader, "accepts_input", None)
    if accepts is not None and (accepts(shape) or (allow_row and accepts((1,) + shape))):
        return
    if t is not None and t.kind == "RNN" and len(shape) == 3:
        steps = shape[2] if t.data_format.name == "NCW" else shape[1]
        if steps == 0 and t.is_example(shape[1:]):
            raise ValueError(f"{name}: a time series of 0 steps (shape {shape}): there is "
                             f"nothing to compute")
    if t is None or t.kind == "FF":
        if len(shape) != 2 and not (allow_row and len(shape) == 1):
            expected = ("one example (n_features,) or a batch (n_samples, n_features)"
                        if allow_row else "a 2-d array (n_samples, n_features)")
            raise ValueError(f"{name}: expected {expected}, got shape {shape}")
        if t is not None and shape[-1] != t.size:
            raise ValueError(f"{name}: expected {t.size} features ({features}), got "
                             f"{shape[-1]}")
        return
    if t.is_example(shape[1:]) or (allow_row and t.is_example(shape)):
        return
    # with the other shapes the reader takes (an EmbeddingSequenceLayer's indices)
    also = "" if accepts is None else " or (n_samples, time) indices"
    msg = (f"{name}: expected a {len(t.shape()) + 1}-d array {t.describe_shape()}{also} for "
           f"{where}, the network's input type {t!r}; got shape {shape}")
    if t.kind == "CNN" and len(shape) == 4:
        other = (shape[1:] == (t.height, t.width, t.channels) if t.data_format.name == "NCHW"
                 else shape[1:] == (t.channels, t.height, t.width))
        if other:
            have = "NHWC (channels last)" if t.data_format.name == "NCHW" else "NCHW"
            axes = "(0, 3, 1, 2)" if t.data_format.name == "NCHW" else "(0, 2, 3, 1)"
            msg += (f": the data is {have} and the network {t.data_format.name} (transpose it "
                    f"with x.transpose{axes}, or configure InputType.convolutional(..., "
                    f"data_format='{'NHWC' if t.data_format.name == 'NCHW' else 'NCHW'}'))")
    if accepts is not None:
        if accepts((1,) + shape):
            msg += ": one sequence of indices without its batch dimension? (x[None] adds it)"
    elif one_example(shape, t):
        msg += ": one example without its batch dimension? (x[None] adds it)"
    raise ValueError(msg)
