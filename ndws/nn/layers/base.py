"""The base of every layer (`Layer`, for custom layers too), the enums layers take
(`Activation`, `LossFunction`, `WeightInit`), the field checks, and the dense family's layers
(see the package's docstring, `ndws.nn.layers`)."""
from __future__ import annotations

import enum
import math
from typing import Any, ClassVar

import numpy as np

import ndws
from ndws._core import NDArray, _np_view
from ndws.nn import functional as F
from ndws.nn.inputs import InputType, config_dict, member, registered
from ndws.nn.preprocessors import (CnnToFeedForwardPreProcessor, MaskState,
                                   RnnToFeedForwardPreProcessor)
from ndws.nn.updaters import FieldTypeError, Updater, real_field
from ndws.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr

__all__ = ["Activation", "LossFunction", "WeightInit", "Layer", "DenseLayer", "OutputLayer",
           "LossLayer", "ActivationLayer", "DropoutLayer"]


class Activation(enum.Enum):
    """Activation functions with a native kernel (DL4J's ``Activation`` names, each with DL4J's
    default parameters: LEAKYRELU's alpha 0.01, THRESHOLDEDRELU's theta 1.0); layers also take
    the lower-case names (``"relu"``, ``"leakyrelu"`` / ``"leaky_relu"``, ...). The formulas
    are those of `ndws.nn.functional` (docs/networks.md lists them)."""

    IDENTITY = "identity"
    RELU = "relu"
    LEAKYRELU = "leakyrelu"
    ELU = "elu"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    SOFTPLUS = "softplus"
    GELU = "gelu"
    HARDTANH = "hardtanh"
    HARDSIGMOID = "hardsigmoid"
    SELU = "selu"
    SWISH = "swish"
    SOFTSIGN = "softsign"
    RATIONALTANH = "rationaltanh"
    RECTIFIEDTANH = "rectifiedtanh"
    CUBE = "cube"
    THRESHOLDEDRELU = "thresholdedrelu"
    SOFTMAX = "softmax"

    @classmethod
    def parse(cls, value: Any, where: str) -> "Activation":
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            key = value.lower().replace("_", "")
            for m in cls:
                if m.value == key or m.name.lower() == key:
                    return m
            if key == "linear":
                return cls.IDENTITY
            if key == "silu":                  # torch's name of swish
                return cls.SWISH
        names = ", ".join(m.value for m in cls)
        raise ValueError(f"{where}: unknown activation {value!r:.40}; expected one of {names} "
                         f"(or an ndws.nn.Activation)")


class LossFunction(enum.Enum):
    """Losses of output layers (DL4J's ``LossFunctions.LossFunction`` names). Scores follow
    DL4J: the per-example loss (summed over outputs; averaged over them for MSE,
    MEAN_ABSOLUTE_ERROR, MEAN_SQUARED_LOGARITHMIC_ERROR, MEAN_ABSOLUTE_PERCENTAGE_ERROR and
    WASSERSTEIN; one value per example for MCXENT, NEGATIVELOGLIKELIHOOD and
    COSINE_PROXIMITY), averaged over the examples (docs/networks.md has the table)."""

    MCXENT = "MCXENT"
    NEGATIVELOGLIKELIHOOD = "NEGATIVELOGLIKELIHOOD"
    XENT = "XENT"
    MSE = "MSE"
    L1 = "L1"
    L2 = "L2"
    SQUARED_LOSS = "SQUARED_LOSS"
    MEAN_ABSOLUTE_ERROR = "MEAN_ABSOLUTE_ERROR"
    COSINE_PROXIMITY = "COSINE_PROXIMITY"
    HINGE = "HINGE"
    SQUARED_HINGE = "SQUARED_HINGE"
    KL_DIVERGENCE = "KL_DIVERGENCE"
    POISSON = "POISSON"
    MEAN_SQUARED_LOGARITHMIC_ERROR = "MEAN_SQUARED_LOGARITHMIC_ERROR"
    MEAN_ABSOLUTE_PERCENTAGE_ERROR = "MEAN_ABSOLUTE_PERCENTAGE_ERROR"
    WASSERSTEIN = "WASSERSTEIN"

    @classmethod
    def parse(cls, value: Any, where: str) -> "LossFunction":
        return member(cls, value, f"{where}: unknown loss function",
                      "(any case, or an ndws.nn.LossFunction)")


class WeightInit(enum.Enum):
    """Weight initialisation schemes (DL4J's ``WeightInit``), fan-in / fan-out based."""

    XAVIER = "XAVIER"     # N(0, 2 / (fan_in + fan_out))
    RELU = "RELU"         # He: N(0, 2 / fan_in)
    UNIFORM = "UNIFORM"   # U(-a, a), a = 1 / sqrt(fan_in)
    NORMAL = "NORMAL"     # N(0, 1 / fan_in)
    ZERO = "ZERO"

    @classmethod
    def parse(cls, value: Any, where: str) -> "WeightInit":
        return member(cls, value, f"{where}: unknown weight_init")

    def sample(self, rng: np.random.Generator, shape: tuple, fan_in: int, fan_out: int
               ) -> np.ndarray:
        """Initial values of a weight array (float64; the network casts them)."""
        if self is WeightInit.ZERO:
            return np.zeros(shape)
        if self is WeightInit.UNIFORM:
            a = 1.0 / math.sqrt(fan_in)
            return rng.uniform(-a, a, shape)
        std = {WeightInit.XAVIER: math.sqrt(2.0 / (fan_in + fan_out)),
               WeightInit.RELU: math.sqrt(2.0 / fan_in),
               WeightInit.NORMAL: 1.0 / math.sqrt(fan_in)}[self]
        return rng.standard_normal(shape) * std


def _size(owner: str, name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise FieldTypeError(f"{owner}.{name}: expected an int >= 1, got {type(value).__name__} "
                        f"{value!r:.40}")
    if not 1 <= value <= 1 << 31:
        raise ValueError(f"{owner}.{name}: expected an int in [1, 2**31], got {value!r}")
    return int(value)


def _nonneg(owner: str, name: str, value: Any, hi: float = math.inf,
            open_lo: bool = False) -> float | None:
    # an optional field in [0, hi] ((0, hi] with open_lo); None means "the default"
    return None if value is None else real_field(owner, name, value, 0.0, hi, lo_open=open_lo)


def _finite(owner: str, name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise FieldTypeError(f"{owner}.{name}: expected a finite real number, got "
                             f"{type(value).__name__} {value!r:.40}")
    try:
        v = float(value)
    except OverflowError:                # a Python int beyond any double
        v = math.inf
    if not math.isfinite(v):
        raise ValueError(f"{owner}.{name}: expected a finite real number, got {value!r:.40}")
    return v


_LAYERS: dict[str, type] = {}
#: the package of ndws' own layers (one module per family), whose classes "@class" names bare
_PACKAGE = __name__.rpartition(".")[0]


def _class_key(cls: type) -> str:
    # what "@class" says: the bare name for ndws' own layers, module.qualname for the others
    # (two custom layers may share a name)
    builtin = cls.__module__ == _PACKAGE or cls.__module__.startswith(_PACKAGE + ".")
    return cls.__name__ if builtin else f"{cls.__module__}.{cls.__qualname__}"


class Layer:
    """Base class of layers, built-in and custom.

    A custom layer sets its fields in ``__init__`` (listing them in ``fields`` so
    `to_dict` / `MultiLayerConfiguration.from_json` can rebuild it), declares its parameters in
    `param_shapes`, fills them in `init_params`, and implements `activate` and
    `backprop_gradient` with arrays from the manager it is given.

    Parameters (common to every layer; None takes the network's default)
    ----------
    n_in, n_out : int, optional
        Input and output width (n_in is inferred from the previous layer when omitted).
    activation : str or Activation, optional
    dropout : float in (0, 1], optional
        DL4J's retain probability of the layer's *input* (0.8 keeps 80%), inverted dropout.
    weight_init : str or WeightInit, optional
    bias_init : float, optional
    l1, l2, weight_decay : float >= 0, optional
        Regularisation of the weights (not of biases): l1 and l2 enter the score and the
        gradient; weight_decay is DL4J's ``WeightDecay`` (``W -= lr * weight_decay * W`` after
        each update, not part of the score).
    updater : Updater, optional
        This layer's updater instead of the network's.
    name : str, optional
    """

    #: the constructor's keyword arguments (what to_dict stores and from_dict passes back)
    fields: ClassVar[tuple[str, ...]] = ("n_in", "n_out", "activation", "dropout", "weight_init",
                                         "bias_init", "l1", "l2", "weight_decay", "updater",
                                         "name")
    #: whether the layer has weights of shape (n_in, n_out) (n_in/n_out required)
    has_weights: ClassVar[bool] = False
    #: whether the output is as wide as the input (an n_out given must equal n_in)
    keeps_width: ClassVar[bool] = False
    #: the parameters l1, l2 and weight_decay act on (DL4J's weight parameters; never biases)
    weight_keys: ClassVar[tuple[str, ...]] = ("W",)

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        _LAYERS[_class_key(cls)] = cls

    def __init__(self, *, n_in: int | None = None, n_out: int | None = None,
                 activation: Any = None, dropout: float | None = None, weight_init: Any = None,
                 bias_init: float | None = None, l1: float | None = None,
                 l2: float | None = None, weight_decay: float | None = None,
                 updater: Updater | None = None, name: str | None = None):
        owner = type(self).__name__
        self.n_in = _size(owner, "n_in", n_in)
        self.n_out = _size(owner, "n_out", n_out)
        self.activation = (None if activation is None
                           else Activation.parse(activation, f"{owner}.activation"))
        self.dropout = _nonneg(owner, "dropout", dropout, 1.0, open_lo=True)
        self.weight_init = (None if weight_init is None
                            else WeightInit.parse(weight_init, f"{owner}.weight_init"))
        self.bias_init = _finite(owner, "bias_init", bias_init)
        self.l1 = _nonneg(owner, "l1", l1)
        self.l2 = _nonneg(owner, "l2", l2)
        self.weight_decay = _nonneg(owner, "weight_decay", weight_decay)
        if updater is not None and not isinstance(updater, Updater):
            raise FieldTypeError(f"{owner}.updater: expected an ndws.nn updater (Sgd, Adam, ...), got "
                            f"{type(updater).__name__}")
        self.updater = updater
        if name is not None and not isinstance(name, str):
            raise FieldTypeError(f"{owner}.name: expected a str, got {type(name).__name__}")
        self.name = name
        # set by the network when it is built
        self.params: dict[str, NDArray] = {}
        self.grads: dict[str, NDArray] = {}
        self.index: int = -1
        #: the type of this layer's input (after its preprocessor), set when the configuration
        #: resolves the layer; None when unknown (a stack of dense layers without input_type)
        self.input_type: InputType | None = None
        #: whether backprop_gradient must return dL/d(input): the network clears it for its
        #: first layer, whose input gradient nothing reads (a built-in layer then returns
        #: None and skips that product, the largest of a typical first layer)
        self.input_gradient_needed = True

    # -- configuration --------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """The layer's configuration: {"@class": class name, field: value} (JSON-ready)."""
        return config_dict(self, _class_key(type(self)))

    @staticmethod
    def from_dict(data: dict) -> "Layer":
        """Rebuild a layer from `to_dict`'s output. Only classes already defined (imported) are
        known: a configuration never imports code."""
        cls, kwargs = registered(_LAYERS, data, "layer", "unknown layer class")
        if isinstance(kwargs.get("updater"), dict):
            kwargs["updater"] = Updater.from_dict(kwargs["updater"])
        return cls(**kwargs)

    def clone(self) -> "Layer":
        """A fresh layer with the same configuration and input type (no parameters)."""
        kwargs = {f: getattr(self, f) for f in self.fields}
        layer = type(self)(**kwargs)
        layer.input_type = self.input_type
        return layer

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable at run time

    def __repr__(self) -> str:
        shown = []
        for f in self.fields:
            v = getattr(self, f)
            if v is not None:
                shown.append(f"{f}={v}" if not isinstance(v, str) else f"{f}={v!r}")
        return f"{type(self).__name__}({', '.join(shown)})"

    def resolved(self, defaults: dict, input_type: InputType | None, where: str,
                 index: int = -1) -> "Layer":
        """A copy with every None field that has a network default filled in, its input type
        and index set, and `n_in` taken from the input type when it was omitted (the
        configuration calls this, after checking an n_in that was given; errors name
        `where`)."""
        layer = self.clone()
        for f, v in defaults.items():
            if f in layer.fields and getattr(layer, f) is None and v is not None:
                setattr(layer, f, v)
        layer.input_type = input_type
        layer.index = index
        if layer.n_in is None and input_type is not None:
            layer.n_in = layer.n_in_for(input_type)
        layer._check_resolved(where)
        return layer

    def implied_input_type(self) -> InputType | None:
        """The network's input type when this first layer has n_in and no input_type is given
        (DL4J infers rows for its feed-forward layers; a layer of images infers nothing)."""
        return None if self.n_in is None else InputType.feed_forward(self.n_in)

    def n_in_for(self, input_type: InputType) -> int:
        """The n_in an input of `input_type` means for this layer (DL4J's ``setNIn``): the
        width of rows, the channels of images, the features of time series."""
        if input_type.kind == "CNN":
            return input_type.channels
        if input_type.kind == "CNNFlat":
            return input_type.elements_per_example()
        return input_type.size

    def preprocessor_for(self, input_type: InputType) -> Any:
        """The preprocessor DL4J's ``setInputType`` puts before this layer for input of
        `input_type` (an ``ndws.nn.InputPreProcessor``), or None; ValueError for a type the
        layer cannot take."""
        return None

    def output_type(self, input_type: InputType | None) -> InputType | None:
        """The type of this layer's output for input of `input_type` (DL4J's
        ``getOutputType``; None when unknown). A layer without n_out, or that keeps its width,
        passes its input's type on; any other gives rows of n_out."""
        if input_type is None or input_type.kind == "FF":
            width = self.output_width()
            return None if width is None else InputType.feed_forward(width)
        if self.keeps_width or self.n_out is None:
            return input_type
        return InputType.feed_forward(self.n_out)

    def _input_elements(self) -> int:
        # values per example of the input (n_in for rows)
        t = self.input_type
        return self.n_in if t is None or t.kind == "FF" else t.elements_per_example()

    def _check_resolved(self, where: str) -> None:
        if self.has_weights and self.n_in is None:
            raise ValueError(f"{where}.n_in: unknown (set n_in on the first layer)")
        if self.has_weights and self.n_out is None:
            raise ValueError(f"{where}.n_out: required for {type(self).__name__}")
        if (self.keeps_width and self.n_out is not None and self.n_in is not None
                and self.n_out != self.n_in):
            name = type(self).__name__
            article = "an" if name[0] in "AEIOU" else "a"
            raise ValueError(f"{where}.n_out: {article} {name} keeps its width ({self.n_in}), "
                             f"got {self.n_out}")

    def output_width(self) -> int | None:
        """The width of this layer's output (n_out; n_in for layers that keep the width)."""
        return self.n_out if self.n_out is not None else self.n_in

    # -- parameters -----------------------------------------------------------------------------

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Parameter name -> shape, in the order they sit in the flat buffer."""
        return {}

    def param_order(self, name: str) -> str:
        """How parameter `name`'s elements sit in the flat buffer: "C" (row-major, the default)
        or "F" (column-major: DL4J's order of the recurrent and embedding weights, so that a
        flat parameter vector of DL4J means the same here)."""
        return "C"

    def trainable(self, name: str) -> bool:
        """Whether the updater changes parameter `name` (running statistics are parameters
        that only the forward pass changes)."""
        return True

    def init_params(self, rng: np.random.Generator) -> None:
        """Fill `self.params` (views the network set) with initial values."""

    def regularization_score(self) -> float:
        """The l1/l2 terms of the score (DL4J's: l1*sum|W| + 0.5*l2*sum(W**2))."""
        return 0.0

    def memory_use(self, batch: int, training: bool, itemsize: int) -> list | None:
        """The arrays one pass makes, as ``(pass, ArrayType, bytes)`` with pass "forward" or
        "backward" (bytes before alignment), for `MultiLayerNetwork.memory_report`; None when
        the layer does not say (a custom layer, by default)."""
        return None

    def _dropout_use(self, batch: int, training: bool, itemsize: int) -> list:
        if not training or self.dropout is None or self.dropout >= 1.0:
            return []
        size = batch * self._input_elements() * itemsize
        return [("forward", ArrayType.INPUT, size), ("forward", ArrayType.INPUT, size)]

    # -- forward and backward -------------------------------------------------------------------

    def activate(self, x: NDArray, training: bool, mgr: LayerWorkspaceMgr) -> NDArray:
        """This layer's output for input `x`, made with ``mgr.create(ArrayType.ACTIVATIONS,
        ...)``; keep on `self` what `backprop_gradient` needs."""
        raise NotImplementedError(f"{type(self).__name__}.activate")

    def backprop_gradient(self, epsilon: NDArray, mgr: LayerWorkspaceMgr
                          ) -> tuple[dict[str, NDArray], NDArray]:
        """Given dL/d(output), return ``(gradients, dL/d(input))``: gradients by parameter name
        (written into `self.grads` views, or returned to be copied there), the epsilon in
        ``ArrayType.ACTIVATION_GRAD``."""
        raise NotImplementedError(f"{type(self).__name__}.backprop_gradient")

    #: attributes a pass leaves on the layer for the next step (arrays in the network's
    #: workspaces); `clear` drops them
    _pass_state: ClassVar[tuple[str, ...]] = ("_x", "_z", "_mask", "_x_hat", "_inv_std",
                                              "_fmask")

    def feed_forward_mask(self, mask: NDArray | None, state: MaskState | None,
                          mgr: LayerWorkspaceMgr) -> tuple[NDArray | None, MaskState | None]:
        """Take the features mask of the pass (after this layer's preprocessor; None when
        there is none) and return the mask and state the next layer gets (DL4J's
        ``feedForwardMaskArray``; docs/recurrent.md, "Masks"). The default keeps it for the
        pass (``self._fmask``: the dense layers multiply their output and their dL/dz by a
        mask of one value per row) and passes it on unchanged. The network calls it inside the
        layer's forward scope, before `activate`; a mask a layer makes belongs in
        ACTIVATIONS."""
        self._fmask = mask
        return mask, state

    def step_runner(self, batch: int, dtype: Any) -> Any:
        """For `rnn_time_step`'s one-step path (both network types): a function
        ``run(rows, out=None) -> rows`` taking this layer's input for one time step as
        (batch, n_in) rows and returning its output as (batch, n_out) rows (into `out` when
        given, else into a buffer it may reuse at the next call), computing exactly what
        `activate` computes for a time series of one step; None when the layer has no such
        path (the network then takes the general one)."""
        return None

    def _row_mask(self, rows: int) -> NDArray | None:
        # the kept features mask as one value per row of a (rows, width) array, or None
        m = getattr(self, "_fmask", None)
        if m is None or m.size != rows or (m.ndim == 2 and m.shape[1] != 1):
            return None
        return m.reshape(rows, 1)

    def clear(self) -> None:
        """Forget what the last pass kept for backprop (DL4J's ``clear``): the network calls it
        after every iteration and inference pass, so no workspace memory stays referenced
        between them. A custom layer keeping other arrays overrides it (and calls super)."""
        for name in self._pass_state:
            self.__dict__.pop(name, None)

    def _apply_dropout(self, x: NDArray, training: bool, mgr: LayerWorkspaceMgr,
                       rng: np.random.Generator | None) -> NDArray:
        # inverted dropout on the input (DL4J's retain probability): kept / p, dropped 0; the
        # scaled input and its mask live as long as the input (backprop needs the mask)
        self._mask = None
        if not training or self.dropout is None or self.dropout >= 1.0 or rng is None:
            return x
        p = self.dropout
        keep = rng.random(x.shape) < p
        mask = mgr.create_uninitialized(ArrayType.INPUT, x.shape, dtype=x.dtype)
        np.multiply(keep, 1.0 / p, out=_np_view(mask), casting="unsafe")
        out = mgr.create_uninitialized(ArrayType.INPUT, x.shape, dtype=x.dtype)
        ndws.multiply(x, mask, out=out)
        self._mask = mask
        return out

    def _dropout_backward(self, eps: NDArray | None) -> NDArray | None:
        if eps is not None and self._mask is not None:
            ndws.multiply(eps, self._mask, out=eps)
        return eps


def rows_preprocessor(layer: Layer, input_type: InputType) -> Any:
    """What DL4J's feed-forward layers (dense, output, loss) insert before themselves: a
    `CnnToFeedForwardPreProcessor` for images; rows need none."""
    if input_type.kind == "CNN":
        return CnnToFeedForwardPreProcessor(input_type.height, input_type.width,
                                            input_type.channels, input_type.data_format)
    if input_type.kind == "RNN":
        # one row per example and step (DL4J's RnnToFeedForwardPreProcessor)
        return RnnToFeedForwardPreProcessor(input_type.data_format)
    return None


class _RowsInput:
    # the feed-forward layers' input: rows, images flattened before them
    def preprocessor_for(self, input_type):
        return rows_preprocessor(self, input_type)

    def _check_resolved(self, where):
        t = self.input_type
        if t is not None and t.kind not in ("FF", "CNNFlat"):
            raise ValueError(f"{where}: {type(self).__name__} takes rows, got {t!r} (its "
                             f"preprocessor must make rows, e.g. CnnToFeedForwardPreProcessor)")
        super()._check_resolved(where)


class _Regularized:
    # l1 / l2 on the weights W (never on biases): the score terms and their gradient, DL4J's
    # l1*sum|W| + 0.5*l2*sum(W**2)

    def regularization_score(self):
        # ndws calls, so the temporaries land in the current workspace (the network computes
        # this inside the iteration's scope): nothing on the heap
        s = 0.0
        for key in self.weight_keys:
            w = self.params[key]
            if self.l1:
                s += self.l1 * ndws.sum(ndws.abs(w)).item()
            if self.l2:
                s += 0.5 * self.l2 * ndws.sum(ndws.multiply(w, w)).item()
        return s

    def _regularize_gradient(self) -> None:
        # dW += l2 * W + l1 * sign(W), after the data's gradient is in the flat buffer
        for key in self.weight_keys:
            g, w = self.grads[key], self.params[key]
            if self.l2:
                ndws.add(g, ndws.multiply(w, self.l2), out=g)
            if self.l1:
                ndws.add(g, ndws.multiply(ndws.sign(w), self.l1), out=g)

    def _regularization_use(self, itemsize: int) -> list:
        # what _regularize_gradient makes (its temporaries, in the working memory) and
        # regularization_score at the end of the iteration (|W| or W*W and a 0-d sum each)
        use = []
        shapes = self.param_shapes()
        for key in self.weight_keys:
            w = int(np.prod(shapes[key])) * itemsize
            if self.l2:
                use.append(("backward", ArrayType.BP_WORKING_MEM, w))
            if self.l1:
                use += [("backward", ArrayType.BP_WORKING_MEM, w)] * 2
            for coefficient in (self.l1, self.l2):
                if coefficient:
                    use += [("backward", ArrayType.UPDATER_WORKING_MEM, w),
                            ("backward", ArrayType.UPDATER_WORKING_MEM, itemsize)]
        return use


def init_dense(layer: Layer, rng: np.random.Generator) -> None:
    """W (n_in, n_out) from the layer's weight_init with fan-in n_in and fan-out n_out, and b
    (if the layer has one) at bias_init: every dense-like layer's initialisation."""
    w = (layer.weight_init or WeightInit.XAVIER).sample(rng, (layer.n_in, layer.n_out),
                                                        layer.n_in, layer.n_out)
    np.copyto(_np_view(layer.params["W"]), w, casting="unsafe")
    if "b" in layer.params:
        layer.params["b"].fill(layer.bias_init or 0.0)


class _WeightsMixin(_RowsInput, _Regularized):
    # W (n_in, n_out) and b (n_out,), the first sized by fan-in/fan-out
    has_weights = True

    def param_shapes(self):
        return {"W": (self.n_in, self.n_out), "b": (self.n_out,)}

    def init_params(self, rng):
        init_dense(self, rng)

    def step_runner(self, batch, dtype):
        # DenseLayer's and OutputLayer's inference activate on one step's rows (no features
        # mask on that path): one fused linear + activation
        if self.dropout is not None and self.dropout < 1.0:
            return None
        buf = ndws.empty((batch, self.n_out), dtype=dtype, detached=True)
        act = (self.activation or Activation.IDENTITY).value
        params = self.params

        def run(rows, out=None):
            return F.linear(rows, params["W"], params["b"], act, out=buf if out is None else out)
        return run

    def _weight_gradient_use(self, batch: int, itemsize: int) -> list:
        # what _weight_gradients makes: the regularisation's temporaries, the input gradient
        use = self._regularization_use(itemsize)
        if self.input_gradient_needed:
            use.append(("backward", ArrayType.ACTIVATION_GRAD, batch * self.n_in * itemsize))
        return use

    def _weight_gradients(self, x: NDArray, dz: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        # dW := x.T @ dz, db := sum over rows of dz, written into the flat gradient views;
        # returns dL/dx := dz @ W.T in ACTIVATION_GRAD
        ndws.gemm(x, dz, out=self.grads["W"], trans_a=True)
        self._regularize_gradient()
        ndws.sum(dz, axis=0, out=self.grads["b"])
        if not self.input_gradient_needed:
            return None
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, x.shape, dtype=x.dtype)
        ndws.gemm(dz, self.params["W"], out=eps, trans_b=True)
        return eps


#: activations whose derivative the output determines as well as the input does
_FROM_OUTPUT = (Activation.RELU, Activation.IDENTITY)


class DenseLayer(_WeightsMixin, Layer):
    """Fully connected layer, ``y = f(x @ W + b)``; W is (n_in, n_out) (DL4J's layout)."""

    def memory_use(self, batch, training, itemsize):
        out = batch * self.n_out * itemsize
        use = self._dropout_use(batch, training, itemsize)
        act = self.activation or Activation.IDENTITY
        if training and act not in _FROM_OUTPUT:
            use.append(("forward", ArrayType.INPUT, out))
        use.append(("forward", ArrayType.ACTIVATIONS, out))
        if training:
            use.append(("backward", ArrayType.BP_WORKING_MEM, out))
            use += self._weight_gradient_use(batch, itemsize)
        return use

    def activate(self, x, training, mgr):
        x = self._apply_dropout(x, training, mgr, getattr(self, "_rng", None))
        self._x = x
        act = self.activation or Activation.IDENTITY
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, (x.shape[0], self.n_out),
                                     dtype=x.dtype)
        if not training or act in _FROM_OUTPUT:
            # one fused pass; relu's and identity's derivatives are read off the output
            # (relu(z) > 0 exactly where z > 0; a masked row's dL/dz is zeroed anyway), so
            # training keeps y itself
            F.linear(x, self.params["W"], self.params["b"], act.value, out=y)
            self._z = y
        else:
            # other activations need the pre-activation for the derivative
            z = mgr.create_uninitialized(ArrayType.INPUT, y.shape, dtype=x.dtype)
            F.linear(x, self.params["W"], self.params["b"], "identity", out=z)
            self._z = z
            F.activation(act.value, z, out=y)
        m = self._row_mask(x.shape[0])
        if m is not None:
            ndws.multiply(y, m, out=y)          # DL4J's BaseLayer.applyMask
        return y

    def backprop_gradient(self, epsilon, mgr):
        act = self.activation or Activation.IDENTITY
        dz = mgr.create_uninitialized(ArrayType.BP_WORKING_MEM, self._z.shape,
                                      dtype=self._z.dtype)
        F.activation_backward(act.value, self._z, epsilon, out=dz)
        m = self._row_mask(dz.shape[0])
        if m is not None:
            ndws.multiply(dz, m, out=dz)
        eps = self._weight_gradients(self._x, dz, mgr)
        return dict(self.grads), self._dropout_backward(eps)


_PROBABILITY_LOSSES = (LossFunction.MCXENT, LossFunction.NEGATIVELOGLIKELIHOOD)

#: the losses on the activated output: loss -> (its kernel, how DL4J reduces an example's
#: outputs: "sum", "mean", or "row" for a kernel with one value per example)
_ON_OUTPUT = {
    LossFunction.MSE: (F.mse_loss, "mean"),
    LossFunction.L2: (F.mse_loss, "sum"),
    LossFunction.SQUARED_LOSS: (F.mse_loss, "sum"),
    LossFunction.L1: (F.mae_loss, "sum"),
    LossFunction.MEAN_ABSOLUTE_ERROR: (F.mae_loss, "mean"),
    LossFunction.COSINE_PROXIMITY: (F.cosine_proximity_loss, "row"),
    LossFunction.HINGE: (F.hinge_loss, "sum"),
    LossFunction.SQUARED_HINGE: (F.squared_hinge_loss, "sum"),
    LossFunction.KL_DIVERGENCE: (F.kl_divergence_loss, "sum"),
    LossFunction.POISSON: (F.poisson_loss, "sum"),
    LossFunction.MEAN_SQUARED_LOGARITHMIC_ERROR: (F.msle_loss, "mean"),
    LossFunction.MEAN_ABSOLUTE_PERCENTAGE_ERROR: (F.mape_loss, "mean"),
    LossFunction.WASSERSTEIN: (F.wasserstein_loss, "mean"),
}


def _reduces(loss: LossFunction) -> str:
    # how DL4J reduces one example's outputs to its loss ("sum", "mean" or "row")
    if loss in _PROBABILITY_LOSSES:
        return "row"
    if loss is LossFunction.XENT:
        return "sum"
    return _ON_OUTPUT[loss][1]


def _check_loss_fits(loss: LossFunction, act: Activation, where: str) -> None:
    if loss in _PROBABILITY_LOSSES and act is not Activation.SOFTMAX:
        raise ValueError(f"{where}.loss_function: {loss.name} needs activation softmax (class "
                         f"probabilities), got {act.value}")
    if loss is LossFunction.XENT and act is not Activation.SIGMOID:
        raise ValueError(f"{where}.loss_function: XENT needs activation sigmoid (independent "
                         f"probabilities), got {act.value}")


class _LossMixin:
    # the score and dL/dz of an output: fused with its activation where the kernels allow
    # (softmax + cross-entropy, sigmoid + binary cross-entropy), else loss then activation
    # backward; DL4J's scaling (per-example sums averaged over the batch). Shared by the
    # output layers: their loss_function field, its check against the activation, the score.

    fields = Layer.fields + ("loss_function",)

    def __init__(self, *, loss_function: Any = "MCXENT", **common: Any):
        super().__init__(**common)
        self.loss_function = LossFunction.parse(loss_function,
                                                f"{type(self).__name__}.loss_function")

    def _check_resolved(self, where):
        super()._check_resolved(where)
        _check_loss_fits(self.loss_function, self.activation or Activation.IDENTITY, where)

    def compute_score(self, labels: NDArray, mgr: LayerWorkspaceMgr,
                      mask: NDArray | None = None) -> float:
        """After a training `activate`: the score only (without regularisation)."""
        return self._loss(self._z, labels, mgr, False, mask)[0]

    def _loss(self, z: NDArray, labels: NDArray, mgr: LayerWorkspaceMgr,
              want_grad: bool, mask: NDArray | None = None, examples: int | None = None
              ) -> tuple[float, NDArray | None]:
        # `examples`: what the sum of the rows' losses is divided by when it is not the rows
        # (a per-pixel loss: the minibatch, DL4J's divisor)
        loss = self.loss_function
        act = self.activation or Activation.IDENTITY
        n, width = z.shape
        dz = (mgr.create_uninitialized(ArrayType.BP_WORKING_MEM, z.shape, dtype=z.dtype)
              if want_grad else None)
        reduces = _reduces(loss)
        weights = None
        reduction = "mean"
        if mask is not None or examples is not None:
            # DL4J: masked-out examples add nothing and the sum is still divided by the
            # batch size (not by the mask's sum); a mask value weighs its example's loss
            reduction = "sum"
            m = n if examples is None else examples
            scale = 1.0 / (m * width) if reduces == "mean" else 1.0 / m
            weights = self._width_weights(n, scale, z.dtype)
        elif reduces == "sum" and width > 1:
            # mean over all elements times the width = per-example sum averaged over examples
            weights = self._width_weights(n, float(width), z.dtype)
        if loss in _PROBABILITY_LOSSES:
            return self._unpack(F.softmax_cross_entropy(
                z, labels, weights=weights, mask=mask, reduction=reduction, grad=want_grad,
                grad_out=dz), want_grad)
        if loss is LossFunction.XENT:
            return self._unpack(F.binary_cross_entropy_with_logits(
                z, labels, weights=weights, mask=mask, reduction=reduction, grad=want_grad,
                grad_out=dz), want_grad)
        # the other losses act on the activated output: dL/d(output), then through the
        # activation's derivative (DL4J's ILossFunction.computeGradient)
        pred = mgr.create_uninitialized(ArrayType.FF_WORKING_MEM, z.shape, dtype=z.dtype)
        F.activation(act.value, z, out=pred)
        res = _ON_OUTPUT[loss][0](pred, labels, weights=weights, mask=mask, reduction=reduction,
                                  grad=want_grad, grad_out=pred if want_grad else None)
        score, dpred = self._unpack(res, want_grad)
        if want_grad:
            F.activation_backward(act.value, z, dpred, out=dz)
        return score, dz

    def _loss_use(self, batch: int, itemsize: int) -> list:
        # the gradient buffer, and the activated output of the regression losses
        out = batch * self.output_width() * itemsize
        use = [("backward", ArrayType.BP_WORKING_MEM, out)]
        if self.loss_function not in _PROBABILITY_LOSSES + (LossFunction.XENT,):
            use.append(("backward", ArrayType.FF_WORKING_MEM, out))
        return use

    def compute_score_examples(self, labels: NDArray, mgr: LayerWorkspaceMgr,
                               mask: NDArray | None = None) -> NDArray:
        """After a training `activate`: each example's loss, (n_samples,) (DL4J's scaling; a
        label mask multiplies it)."""
        loss = self.loss_function
        act = self.activation or Activation.IDENTITY
        z = self._z
        if loss in _PROBABILITY_LOSSES:
            return F.softmax_cross_entropy(z, labels, mask=mask, reduction="none", grad=False)
        if loss is LossFunction.XENT:
            per = F.binary_cross_entropy_with_logits(z, labels, mask=mask, reduction="none",
                                                     grad=False)
        else:
            pred = mgr.create_uninitialized(ArrayType.FF_WORKING_MEM, z.shape, dtype=z.dtype)
            F.activation(act.value, z, out=pred)
            per = _ON_OUTPUT[loss][0](pred, labels, mask=mask, reduction="none", grad=False)
        if per.ndim == 1:
            return per
        if _reduces(loss) == "mean":
            return ndws.mean(per, axis=1)
        return ndws.sum(per, axis=1)

    @staticmethod
    def _unpack(res: Any, want_grad: bool) -> tuple[float, Any]:
        return (res[0], res[1]) if want_grad else (res, None)

    def _width_weights(self, n: int, value: float, dtype: Any) -> NDArray:
        # a constant per-example weight array: a view of one detached array per (value, dtype)
        # that grows to the most rows seen (time series of varying length change the rows of
        # every batch: one array each would pile up)
        cache = self.__dict__.setdefault("_weights_cache", {})
        key = (value, np.dtype(dtype).str)
        cached = cache.get(key)
        if cached is None or cached.shape[0] < n:
            cached = cache[key] = ndws.full(max(n, 1), value, dtype=dtype, detached=True)
        return cached[:n]


class OutputLayer(_LossMixin, _WeightsMixin, Layer):
    """Dense output layer with a loss: ``p = f(x @ W + b)``, scored against the labels.

    Parameters
    ----------
    loss_function : str or LossFunction
        MCXENT / NEGATIVELOGLIKELIHOOD need softmax, XENT needs sigmoid; the others take any
        activation, as in DL4J (KL_DIVERGENCE expects probabilities, e.g. softmax; POISSON a
        positive rate, e.g. softplus; HINGE and SQUARED_HINGE labels of -1 / +1).
    **common
        As `Layer` (n_out required).
    """

    def activate(self, x, training, mgr):
        x = self._apply_dropout(x, training, mgr, getattr(self, "_rng", None))
        self._x = x
        act = self.activation or Activation.IDENTITY
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, (x.shape[0], self.n_out),
                                     dtype=x.dtype)
        if not training:
            return F.linear(x, self.params["W"], self.params["b"], act.value, out=y)
        z = mgr.create_uninitialized(ArrayType.INPUT, y.shape, dtype=x.dtype)
        F.linear(x, self.params["W"], self.params["b"], "identity", out=z)
        self._z = z
        return F.activation(act.value, z, out=y)

    def memory_use(self, batch, training, itemsize):
        out = batch * self.n_out * itemsize
        use = self._dropout_use(batch, training, itemsize)
        use.append(("forward", ArrayType.ACTIVATIONS, out))
        if training:
            use.append(("forward", ArrayType.INPUT, out))
            use += self._loss_use(batch, itemsize)
            use += self._weight_gradient_use(batch, itemsize)
        return use

    def compute_score_and_gradient(self, labels: NDArray, mgr: LayerWorkspaceMgr,
                                   mask: NDArray | None = None
                                   ) -> tuple[float, dict, NDArray]:
        """After a training `activate`: the score (without regularisation), the parameter
        gradients and dL/d(input). `mask`: DL4J's label mask, (n,) or like the labels."""
        score, dz = self._loss(self._z, labels, mgr, True, mask)
        eps = self._weight_gradients(self._x, dz, mgr)
        return score, dict(self.grads), self._dropout_backward(eps)


class LossLayer(_RowsInput, _LossMixin, Layer):
    """A loss on its input, without parameters (DL4J's ``LossLayer``): the input is the
    pre-activation."""

    keeps_width = True

    def activate(self, x, training, mgr):
        act = self.activation or Activation.IDENTITY
        self._z = x
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        return F.activation(act.value, x, out=y)

    def memory_use(self, batch, training, itemsize):
        use = [("forward", ArrayType.ACTIVATIONS, batch * self.n_in * itemsize)]
        if training:
            use += self._loss_use(batch, itemsize)
            if self.input_gradient_needed:
                use.append(("backward", ArrayType.ACTIVATION_GRAD, batch * self.n_in * itemsize))
        return use

    def compute_score_and_gradient(self, labels, mgr, mask=None):
        score, dz = self._loss(self._z, labels, mgr, True, mask)
        if not self.input_gradient_needed:
            return score, {}, None
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, dz.shape, dtype=dz.dtype)
        ndws.multiply(dz, 1, out=eps)
        return score, {}, eps


class ActivationLayer(Layer):
    """An activation function on its input, without parameters."""

    keeps_width = True

    def memory_use(self, batch, training, itemsize):
        size = batch * self._input_elements() * itemsize
        use = [("forward", ArrayType.ACTIVATIONS, size)]
        if training:
            use.append(("backward", ArrayType.ACTIVATION_GRAD, size))
        return use

    def activate(self, x, training, mgr):
        self._x = x
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        return F.activation((self.activation or Activation.IDENTITY).value, x, out=y)

    def backprop_gradient(self, epsilon, mgr):
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, epsilon.shape,
                                       dtype=epsilon.dtype)
        F.activation_backward((self.activation or Activation.IDENTITY).value, self._x, epsilon,
                              out=eps)
        return {}, eps


class DropoutLayer(Layer):
    """Inverted dropout of its input during training (`dropout` is DL4J's retain probability);
    the identity at inference."""

    keeps_width = True

    def __init__(self, dropout: float | None = None, **common: Any):
        super().__init__(dropout=dropout, **common)

    def memory_use(self, batch, training, itemsize):
        size = batch * self._input_elements() * itemsize
        use = self._dropout_use(batch, training, itemsize)
        use.append(("forward", ArrayType.ACTIVATIONS, size))
        if training:
            use.append(("backward", ArrayType.ACTIVATION_GRAD, size))
        return use

    def activate(self, x, training, mgr):
        x = self._apply_dropout(x, training, mgr, getattr(self, "_rng", None))
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        ndws.multiply(x, 1, out=y)
        return y

    def backprop_gradient(self, epsilon, mgr):
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, epsilon.shape,
                                       dtype=epsilon.dtype)
        ndws.multiply(epsilon, 1, out=eps)
        return {}, self._dropout_backward(eps)
