"""`MultiLayerConfiguration`: the frozen, validated description of a `MultiLayerNetwork` (DL4J's
``MultiLayerConfiguration`` / ``NeuralNetConfiguration.Builder().list()``), with an exact JSON
round trip.

Network-wide defaults (activation, weight_init, dropout, l1, l2, weight_decay, bias_init,
convolution_mode) apply to every layer that leaves the field unset (None); a layer's own value
wins. A layer's `n_in` is inferred from the previous layer's output when omitted. With
``input_type`` (DL4J's ``setInputType``) every layer learns the type of its input, its n_in
comes from it, the preprocessors DL4J inserts are inserted (``input_preprocessors`` sets them
by hand), and every convolution and pooling geometry is checked here, not at the first `fit`
(docs/convolution.md). ``backprop_type=BackpropType.TRUNCATED_BPTT`` trains recurrent networks
on segments of ``tbptt_fwd_length`` steps (docs/recurrent.md).

Examples
--------
>>> from ndws.nn import MultiLayerConfiguration, DenseLayer, OutputLayer, Adam
>>> conf = MultiLayerConfiguration(
...     layers=[DenseLayer(n_in=4, n_out=8), OutputLayer(n_out=3, activation="softmax")],
...     seed=42, updater=Adam(1e-2), activation="relu")
>>> [(l.n_in, l.n_out, l.activation.value) for l in conf.resolved_layers]
[(4, 8, 'relu'), (8, 3, 'softmax')]
>>> MultiLayerConfiguration.from_json(conf.to_json()) == conf
True
"""
from __future__ import annotations

import enum
import json
import secrets
from typing import Any

import numpy as np

from ndws.nn.inputs import ConvolutionMode, InputType
from ndws.nn.layers.base import Activation, Layer, WeightInit, _finite, _nonneg, member
from ndws.nn.layers.embedding import EmbeddingLayer, EmbeddingSequenceLayer
from ndws.nn.layers.pooling import GlobalPoolingLayer
from ndws.nn.layers.wrappers import Bidirectional, LastTimeStep, _Wrapper
from ndws.nn.preprocessors import InputPreProcessor
from ndws.nn.updaters import FieldTypeError, Sgd, Updater
from ndws.workspace import WorkspaceMode

__all__ = ["MultiLayerConfiguration", "BackpropType", "DEFAULT_TBPTT_LENGTH",
           "JsonConfiguration", "SETTINGS", "network_settings", "settings_dict",
           "settings_kwargs", "layer_defaults",
           "parse_backprop_type", "tbptt_length", "tbptt_settings", "check_tbptt",
           "check_index_dtype", "TBPTT", "tbptt_dict"]


class BackpropType(enum.Enum):
    """How a network's fit backpropagates time series (DL4J's ``BackpropType``): STANDARD
    (through the whole sequence) or TRUNCATED_BPTT (segments of ``tbptt_fwd_length`` steps,
    one update each, the state carried from one to the next; docs/recurrent.md)."""

    STANDARD = "Standard"
    TRUNCATED_BPTT = "TruncatedBPTT"


#: DL4J's default segment length (DEFAULT_TBPTT_LENGTH)
DEFAULT_TBPTT_LENGTH = 20

#: what to_json writes as "format", and the version from_json reads
_FORMAT, _VERSION = "ndws.MultiLayerConfiguration", 1

_DTYPES = {"float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}


def _mode(value: Any, name: str) -> WorkspaceMode:
    return member(WorkspaceMode, value, f"{name}: unknown workspace mode",
                  "(or an ndws.WorkspaceMode)")


#: the network-wide settings of both configurations (MultiLayerConfiguration and
#: ndws.nn.graph.ComputationGraphConfiguration), in the order to_dict writes them
SETTINGS = ("seed", "updater", "activation", "weight_init", "dropout", "l1", "l2",
            "weight_decay", "bias_init", "training_workspace_mode", "inference_workspace_mode",
            "dtype", "convolution_mode")


def network_settings(owner: str, seed: int | None = None, updater: Updater | None = None,
                     activation: Any = None, weight_init: Any = None,
                     dropout: float | None = None, l1: float | None = None,
                     l2: float | None = None, weight_decay: float | None = None,
                     bias_init: float | None = None,
                     training_workspace_mode: Any = WorkspaceMode.ENABLED,
                     inference_workspace_mode: Any = WorkspaceMode.ENABLED,
                     dtype: Any = "float32", convolution_mode: Any = None) -> dict:
    """The network-wide settings checked, with DL4J's defaults filled in: a dict of SETTINGS
    (a random seed drawn when none is given). Errors name the setting; `owner` the
    configuration."""
    if seed is None:
        seed = secrets.randbits(63)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) \
            or not 0 <= seed < 1 << 63:
        raise ValueError(f"seed: expected an int in [0, 2**63), got {seed!r:.40}")
    if updater is None:
        updater = Sgd(1e-3)
    if not isinstance(updater, Updater):
        raise FieldTypeError(f"updater: expected an ndws.nn updater (Sgd, Adam, ...), got "
                             f"{type(updater).__name__}")
    dt = _DTYPES.get(str(np.dtype(dtype)) if _is_dtype(dtype) else None)
    if dt is None:
        raise ValueError(f"dtype: expected float32 or float64, got {dtype!r:.40}")
    return {
        "seed": int(seed), "updater": updater,
        "activation": Activation.parse(activation or Activation.SIGMOID, "activation"),
        "weight_init": WeightInit.parse(weight_init or WeightInit.XAVIER, "weight_init"),
        "dropout": _nonneg(owner, "dropout", dropout, 1.0, open_lo=True),
        "l1": _nonneg(owner, "l1", l1), "l2": _nonneg(owner, "l2", l2),
        "weight_decay": _nonneg(owner, "weight_decay", weight_decay),
        "bias_init": _finite(owner, "bias_init", bias_init),
        "training_workspace_mode": _mode(training_workspace_mode, "training_workspace_mode"),
        "inference_workspace_mode": _mode(inference_workspace_mode, "inference_workspace_mode"),
        "dtype": dt,
        "convolution_mode": ConvolutionMode.parse(
            ConvolutionMode.TRUNCATE if convolution_mode is None else convolution_mode,
            "convolution_mode")}


def settings_dict(conf: Any) -> dict:
    """`conf`'s network-wide settings as JSON-ready data (convolution_mode only when it is not
    the default, so a configuration without convolutions keeps the JSON it always had)."""
    out = {"seed": conf.seed, "updater": conf.updater.to_dict(),
           "activation": conf.activation.name, "weight_init": conf.weight_init.name,
           "dropout": conf.dropout, "l1": conf.l1, "l2": conf.l2,
           "weight_decay": conf.weight_decay, "bias_init": conf.bias_init,
           "training_workspace_mode": conf.training_workspace_mode.name,
           "inference_workspace_mode": conf.inference_workspace_mode.name,
           "dtype": conf.dtype.name}
    if conf.convolution_mode is not ConvolutionMode.TRUNCATE:
        out["convolution_mode"] = conf.convolution_mode.name
    return out


def settings_kwargs(data: dict) -> dict:
    """The network-wide settings of `settings_dict`'s data as keyword arguments (the updater
    rebuilt)."""
    kwargs = {k: data[k] for k in SETTINGS if k in data}
    if isinstance(kwargs.get("updater"), dict):
        kwargs["updater"] = Updater.from_dict(kwargs["updater"])
    return kwargs


def layer_defaults(conf: Any) -> dict:
    """The settings a layer that leaves them unset takes from `conf`."""
    return {"activation": conf.activation, "weight_init": conf.weight_init,
            "dropout": conf.dropout, "l1": conf.l1, "l2": conf.l2,
            "weight_decay": conf.weight_decay, "bias_init": conf.bias_init,
            "convolution_mode": conf.convolution_mode}


class JsonConfiguration:
    """What a frozen configuration of a network is as JSON: `to_json` writes its `to_dict`,
    `from_json` rebuilds an equal one through `from_dict`; two are equal when their dicts
    are."""

    __slots__ = ()

    def to_json(self, indent: int | None = 2) -> str:
        """`to_dict` as JSON text; `from_json` rebuilds an equal configuration."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> Any:
        """Rebuild a configuration from `to_json`'s text (ValueError for anything else)."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"configuration: not JSON text ({exc})") from None
        return cls.from_dict(data)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, type(self)) and other.to_dict() == self.to_dict()

    __hash__ = None  # type: ignore[assignment]

    #: what to_dict writes as "format", and the version from_dict reads
    _format = ""
    _version = 1

    @classmethod
    def _checked(cls, data: Any, known: set) -> dict:
        # from_dict's `data`: this configuration's format and version, no field but `known`
        if not isinstance(data, dict) or data.get("format") != cls._format:
            raise ValueError(f"configuration: expected a dict with format {cls._format!r}, got "
                             f"{data!r:.80}")
        if data.get("version") != cls._version:
            raise ValueError(f"configuration: unsupported version {data.get('version')!r} "
                             f"(this ndws reads version {cls._version})")
        unknown = set(data) - known - {"format", "version"}
        if unknown:
            raise ValueError(f"configuration: unknown fields {sorted(unknown)}")
        return data


class MultiLayerConfiguration(JsonConfiguration):
    """A stack of layers and the network-wide settings.

    Parameters
    ----------
    layers : sequence of Layer
        At least one; copied, so changing the objects afterwards changes nothing here.
    seed : int, optional
        Seeds weight initialisation and dropout; drawn at random (and kept) when omitted.
    updater : Updater, optional
        Default ``Sgd(1e-3)`` (DL4J's).
    activation : str or Activation, optional
        Default for layers without one: ``sigmoid`` (DL4J's).
    weight_init : str or WeightInit, optional
        Default ``XAVIER``.
    dropout, l1, l2, weight_decay, bias_init : float, optional
        Defaults for layers without their own.
    training_workspace_mode, inference_workspace_mode : WorkspaceMode or str
        Default ENABLED (SEPARATE for training, SINGLE for inference).
    dtype : {"float32", "float64"}
        Of parameters, activations and gradients.
    convolution_mode : str or ConvolutionMode, optional
        Default of the convolution and pooling layers: ``TRUNCATE`` (DL4J's).
    input_type : InputType, optional
        The network's input (DL4J's ``setInputType``): ``InputType.convolutional_flat(28, 28,
        1)`` for MNIST's rows of pixels, ``InputType.convolutional(h, w, c)`` for images.
        Needed by convolution and pooling layers, whose geometry it gives.
    input_preprocessors : dict of int to InputPreProcessor, optional
        Preprocessors by layer index (DL4J's ``inputPreProcessor(i, p)``); a layer without one
        gets the one ``input_type`` implies, if any.
    backprop_type : BackpropType or str
        STANDARD (default) or TRUNCATED_BPTT (DL4J's ``backpropType``).
    tbptt_fwd_length, tbptt_back_length : int
        Truncated BPTT's segment length and the steps of each segment the errors flow back
        through (default 20 each, DL4J's; ``tbptt_back_length <= tbptt_fwd_length``). Used only
        with TRUNCATED_BPTT.

    Raises
    ------
    TypeError, ValueError
        Naming the layer (``layers[i]``) and the field, e.g. a layer whose n_in disagrees
        with the previous layer's output, a kernel larger than its padded input, or a loss that
        does not fit its activation.
    """

    _format, _version = _FORMAT, _VERSION
    __slots__ = ("layers", "seed", "updater", "activation", "weight_init", "dropout", "l1", "l2",
                 "weight_decay", "bias_init", "training_workspace_mode",
                 "inference_workspace_mode", "dtype", "convolution_mode", "input_type",
                 "input_preprocessors", "backprop_type", "tbptt_fwd_length",
                 "tbptt_back_length", "resolved_layers", "resolved_preprocessors",
                 "_network_input", "_frozen")

    def __init__(self, layers: Any, *, seed: int | None = None, updater: Updater | None = None,
                 activation: Any = None, weight_init: Any = None, dropout: float | None = None,
                 l1: float | None = None, l2: float | None = None,
                 weight_decay: float | None = None, bias_init: float | None = None,
                 training_workspace_mode: Any = WorkspaceMode.ENABLED,
                 inference_workspace_mode: Any = WorkspaceMode.ENABLED,
                 dtype: Any = "float32", convolution_mode: Any = None,
                 input_type: InputType | None = None,
                 input_preprocessors: dict | None = None,
                 backprop_type: Any = BackpropType.STANDARD,
                 tbptt_fwd_length: int = DEFAULT_TBPTT_LENGTH,
                 tbptt_back_length: int = DEFAULT_TBPTT_LENGTH):
        set_ = object.__setattr__
        if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__"):
            raise FieldTypeError(f"layers: expected a sequence of ndws.nn layers, got "
                            f"{type(layers).__name__}")
        layers = list(layers)
        if not layers:
            raise ValueError("layers: a network needs at least one layer")
        for i, layer in enumerate(layers):
            if not isinstance(layer, Layer):
                raise FieldTypeError(f"layers[{i}]: expected an ndws.nn layer (DenseLayer, "
                                f"OutputLayer, ... or a Layer subclass), got "
                                f"{type(layer).__name__}")
        settings = network_settings(
            "MultiLayerConfiguration", seed, updater, activation, weight_init, dropout, l1, l2,
            weight_decay, bias_init, training_workspace_mode, inference_workspace_mode, dtype,
            convolution_mode)
        set_(self, "layers", tuple(layer.clone() for layer in layers))
        for k, v in settings.items():
            set_(self, k, v)
        if input_type is not None and not isinstance(input_type, InputType):
            raise FieldTypeError(f"input_type: expected an ndws.nn.InputType (e.g. "
                                 f"InputType.convolutional_flat(28, 28, 1)), got "
                                 f"{type(input_type).__name__}")
        set_(self, "input_type", input_type)
        set_(self, "input_preprocessors", _preprocessors(input_preprocessors, len(layers)))
        for k, v in tbptt_settings(backprop_type, tbptt_fwd_length, tbptt_back_length).items():
            set_(self, k, v)
        resolved, pres = self._resolve()
        if self.backprop_type is BackpropType.TRUNCATED_BPTT:
            check_tbptt(enumerate(resolved))
        check_index_dtype(((f"layers[{i}]", layer) for i, layer in enumerate(resolved)),
                          self.dtype)
        set_(self, "resolved_layers", resolved)
        #: the preprocessor of each layer (given or inserted), None where there is none
        set_(self, "resolved_preprocessors", pres)
        set_(self, "_frozen", True)

    def _resolve(self, network_input: InputType | None = None) -> tuple:
        # Walk the layers with the type of the data between them (DL4J's setInputType): each
        # layer gets its preprocessor (given, or the one its input type implies), its input
        # type and n_in, and passes on its output type. Without input_type, rows as wide as
        # the first layer's n_in (DL4J infers that type the same way). `network_input`: walk
        # with that type instead (a time series of a given length, for a memory plan)
        defaults = layer_defaults(self)
        out, pres = [], []
        t = self.input_type
        if t is None and 0 not in self.input_preprocessors:
            t = self.layers[0].implied_input_type()
        if network_input is not None:
            t = network_input
        else:
            object.__setattr__(self, "_network_input", t)
        for i, layer in enumerate(self.layers):
            where = f"layers[{i}]"
            try:
                pre = self.input_preprocessors.get(i)
                if pre is None and t is not None:
                    pre = layer.preprocessor_for(t)
                if pre is not None:
                    t = pre.output_type(t)
                if layer.n_in is not None and t is not None and layer.n_in != layer.n_in_for(t):
                    raise ValueError(self._n_in_mismatch(i, layer, t, pre))
                resolved = layer.resolved(defaults, t, where, i)
                t = resolved.output_type(t)
            except (TypeError, ValueError) as exc:
                msg = str(exc)
                raise type(exc)(msg if msg.startswith(where) else f"{where}: {msg}") from None
            out.append(resolved)
            pres.append(pre)
        return tuple(out), tuple(pres)

    def _n_in_mismatch(self, i: int, layer: Layer, t: InputType, pre: Any) -> str:
        # the message of an n_in that disagrees with what the layer gets
        where, expected = f"layers[{i}].n_in: {layer.n_in}", layer.n_in_for(t)
        if t.kind == "FF" and pre is None and i > 0:
            return f"{where} does not match the output width {expected} of layers[{i - 1}]"
        what = "channels" if t.kind == "CNN" else "width"
        after = f" after {pre!r}" if pre is not None else ""
        source = "the network's input" if i == 0 and pre is None else (
            f"its input{after}" if i == 0 else f"the output of layers[{i - 1}]{after}")
        return f"{where} does not match the {what} {expected} of {source} ({t!r})"

    def _param_owners(self) -> list:
        # (where, layer) of every layer, in the order of the flat parameters
        return [(f"layers[{i}]", layer) for i, layer in enumerate(self.resolved_layers)]

    def _state_layers(self) -> dict:
        # what a saved file names each layer's carried state by: str(index) -> (index, layer)
        return {str(i): (i, layer) for i, layer in enumerate(self.resolved_layers)}

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"MultiLayerConfiguration is frozen: build a new one instead of "
                             f"setting {name}")

    # -- JSON -----------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """The configuration as JSON-ready data (the layers as given, before defaults)."""
        out = {"format": _FORMAT, "version": _VERSION, **settings_dict(self),
               "layers": [layer.to_dict() for layer in self.layers]}
        # written only when set, so a stack of dense layers keeps the JSON it always had
        if self.input_type is not None:
            out["input_type"] = self.input_type.to_dict()
        if self.input_preprocessors:
            out["input_preprocessors"] = {str(i): p.to_dict()
                                          for i, p in sorted(self.input_preprocessors.items())}
        out.update(tbptt_dict(self))
        return out

    @classmethod
    def from_dict(cls, data: Any) -> "MultiLayerConfiguration":
        cls._checked(data, {"layers", "input_type", "input_preprocessors", *TBPTT, *SETTINGS})
        layers = data.get("layers")
        if not isinstance(layers, list):
            raise ValueError(f"configuration.layers: expected a list, got {layers!r:.40}")
        kwargs = {**settings_kwargs(data), **{k: data[k] for k in TBPTT if k in data}}
        if "input_type" in data:
            kwargs["input_type"] = InputType.from_dict(data["input_type"])
        if "input_preprocessors" in data:
            given = data["input_preprocessors"]
            if not isinstance(given, dict):
                raise ValueError(f"configuration.input_preprocessors: expected a dict, got "
                                 f"{given!r:.40}")
            pres = {}
            for k, d in given.items():
                if not (isinstance(k, str) and k.isdigit()):
                    raise ValueError(f"configuration.input_preprocessors: expected layer "
                                     f"indices as keys, got {k!r:.40}")
                try:
                    pres[int(k)] = InputPreProcessor.from_dict(d)
                except (TypeError, ValueError) as exc:
                    raise type(exc)(f"input_preprocessors[{k}]: {exc}") from None
            kwargs["input_preprocessors"] = pres
        built = []
        for i, d in enumerate(layers):
            try:
                built.append(Layer.from_dict(d))
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"layers[{i}]: {exc}") from None
        return cls(built, **kwargs)

    def __repr__(self) -> str:
        return (f"MultiLayerConfiguration({len(self.layers)} layers, seed={self.seed}, "
                f"updater={self.updater!r}, dtype={self.dtype.name})")


def parse_backprop_type(value: Any) -> BackpropType:
    """A BackpropType from a member, its name in any case or DL4J's name
    (``"TruncatedBPTT"``); ValueError naming backprop_type otherwise."""
    if isinstance(value, str):
        value = {t.value.lower(): t for t in BackpropType}.get(value.lower(), value)
    return member(BackpropType, value, "backprop_type: unknown BackpropType",
                  "(or an ndws.nn.BackpropType)")


def tbptt_length(name: str, value: Any) -> int:
    """A truncated-BPTT length: an int in [1, 2**31] (TypeError / ValueError naming `name`)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise FieldTypeError(f"{name}: expected an int >= 1, got {type(value).__name__} "
                             f"{value!r:.40}")
    if not 1 <= value <= 1 << 31:
        raise ValueError(f"{name}: expected an int in [1, 2**31], got {value!r}")
    return int(value)


#: the truncated-BPTT settings of both configurations
TBPTT = ("backprop_type", "tbptt_fwd_length", "tbptt_back_length")


def tbptt_dict(conf: Any) -> dict:
    """`conf`'s truncated-BPTT settings as JSON-ready data, each only when it is not the
    default (so a network without them keeps the JSON it always had)."""
    out: dict[str, Any] = {}
    if conf.backprop_type is not BackpropType.STANDARD:
        out["backprop_type"] = conf.backprop_type.name
    for name in ("tbptt_fwd_length", "tbptt_back_length"):
        if getattr(conf, name) != DEFAULT_TBPTT_LENGTH:
            out[name] = getattr(conf, name)
    return out


def tbptt_settings(backprop_type: Any, tbptt_fwd_length: Any, tbptt_back_length: Any) -> dict:
    """backprop_type, tbptt_fwd_length and tbptt_back_length checked (both configurations),
    the back length no longer than the forward one."""
    out = {"backprop_type": parse_backprop_type(backprop_type),
           "tbptt_fwd_length": tbptt_length("tbptt_fwd_length", tbptt_fwd_length),
           "tbptt_back_length": tbptt_length("tbptt_back_length", tbptt_back_length)}
    if out["tbptt_back_length"] > out["tbptt_fwd_length"]:
        raise ValueError(f"tbptt_back_length: {out['tbptt_back_length']} is longer than "
                         f"tbptt_fwd_length {out['tbptt_fwd_length']} (a segment's errors "
                         f"cannot flow back through more steps than it has)")
    return out


def _nested(layer: Layer) -> list:
    # `layer` and the layers it wraps, outermost first (a wrapper keeps its layer in .layer)
    chain = [layer]
    while isinstance(chain[-1], _Wrapper):
        chain.append(chain[-1].layer)
    return chain


def _type_name(chain: list) -> str:
    # a chain of wrappers as the user built it, down to the layer that matters:
    # FrozenLayer(LastTimeStep)
    names = [type(layer).__name__ for layer in chain]
    return "(".join(names) + ")" * (len(names) - 1)


def check_tbptt(layers: Any, vertices: tuple = ()) -> None:
    """DL4J's validateTbpttConfig over `layers`, (where, layer) pairs: layers that need the
    whole sequence at once, wrapped or not (a FrozenLayer or MaskZeroLayer runs its layer over
    what it is given: a segment); Bidirectional too (DL4J refuses it only when the first
    segment runs); and a graph's vertices of the types `vertices` (its LastTimeStepVertex and
    ReverseTimeSeriesVertex would act on each segment as if it were the sequence)."""
    for where, layer in layers:
        chain = _nested(layer)
        whole = [isinstance(inner, (LastTimeStep, GlobalPoolingLayer, Bidirectional) + vertices)
                 for inner in chain]
        if any(whole):
            chain = chain[:whole.index(True) + 1]
            noun = "layer" if isinstance(layer, Layer) else "vertex"
            raise ValueError(f"Invalid network configuration detected: Truncated "
                             f"backpropagation through time (TBPTT) cannot be used with "
                             f"{noun} {where} of type {_type_name(chain)}: TBPTT is "
                             f"incompatible with this {noun} type (which needs the whole "
                             f"sequence at once). Use BackpropType.STANDARD, or a layer that "
                             f"works step by step")


def check_index_dtype(layers: Any, dtype: np.dtype) -> None:
    """The embeddings among `layers`, (where, layer) pairs, wrapped or not, against the
    network's `dtype`: the network reads indices in it (DL4J's features are floats too), and
    a float holds every whole number only up to 2**24 (float32) or 2**53 (float64); above it
    an index would be rounded to a neighbour's and read that row. ValueError naming the layer
    for a vocabulary (n_in) larger than that."""
    exact = 2 ** (np.finfo(dtype).nmant + 1)
    for where, layer in layers:
        chain = _nested(layer)
        inner = chain[-1]
        if isinstance(inner, (EmbeddingLayer, EmbeddingSequenceLayer)) and inner.n_in > exact:
            raise ValueError(f"{where} ({_type_name(chain)}): n_in {inner.n_in} is more "
                             f"indices than the network's dtype {dtype.name} holds exactly: "
                             f"the network reads indices as {dtype.name}, whose whole numbers "
                             f"are exact only up to 2**{exact.bit_length() - 1} = {exact} (a "
                             f"larger index could be rounded to another's and read its row); "
                             f"use dtype=\"float64\" or a vocabulary of at most {exact}")


def _preprocessors(given: Any, n_layers: int) -> dict:
    # input_preprocessors: {layer index: preprocessor}, copied (the configuration is frozen)
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise FieldTypeError(f"input_preprocessors: expected a dict of layer index to "
                             f"preprocessor, got {type(given).__name__}")
    out = {}
    for i, p in given.items():
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) \
                or not 0 <= i < n_layers:
            raise ValueError(f"input_preprocessors: {i!r:.20} is not a layer index (0 to "
                             f"{n_layers - 1})")
        if not isinstance(p, InputPreProcessor):
            raise FieldTypeError(f"input_preprocessors[{i}]: expected an "
                                 f"ndws.nn.InputPreProcessor, got {type(p).__name__}")
        out[int(i)] = p.clone()
    return out


def _is_dtype(value: Any) -> bool:
    try:
        np.dtype(value)
    except TypeError:
        return False
    return True
