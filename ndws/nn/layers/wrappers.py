"""Layers that wrap a recurrent layer (DL4J's ``BaseWrapperLayer`` family): `Bidirectional`
(a forward and a backward copy of the layer over the sequence, their outputs combined),
`LastTimeStep` (each example's last unmasked step) and `MaskZeroLayer` (the mask read off the
input: a step whose features all equal `masking_value` is padding).

A wrapper's parameters are its layer's (Bidirectional's twice, DL4J's ``f`` / ``b`` prefixes:
``fW, fRW, fb, bW, bRW, bb``), views of the network's flat buffer like any layer's; its
configuration nests the layer's.

Examples
--------
>>> from ndws.nn import LSTM, Bidirectional
>>> bi = Bidirectional(LSTM(n_in=3, n_out=4, activation="tanh"))
>>> bi.mode, list(bi.param_shapes())
(<Mode.CONCAT: 'CONCAT'>, ['fW', 'fRW', 'fb', 'bW', 'bRW', 'bb'])
"""
from __future__ import annotations

import enum
from typing import Any

import numpy as np

import ndws
from ndws._core import NDArray, _np_view
from ndws.nn.inputs import InputType, RNNFormat, member
from ndws.nn.layers.base import FieldTypeError, Layer, _finite
from ndws.nn.layers.recurrent import BaseRecurrentLayer, check_sequence
from ndws.nn.preprocessors import sequence_view, time_major
from ndws.nn.workspace_mgr import ArrayType

__all__ = ["Bidirectional", "FrozenLayer", "FrozenLayerWithBackprop", "LastTimeStep",
           "MaskZeroLayer"]


def _wrapped(owner: str, layer: Any, recurrent: bool) -> Layer:
    # a layer to wrap (a dict: its configuration): with `recurrent`, a recurrent layer or a
    # wrapper of one
    if isinstance(layer, dict):
        layer = Layer.from_dict(layer)
    if not isinstance(layer, Layer):
        raise FieldTypeError(f"{owner}.layer: expected an ndws.nn layer, got "
                             f"{type(layer).__name__}")
    if recurrent and not isinstance(layer, (BaseRecurrentLayer, _RecurrentWrapper)):
        raise FieldTypeError(f"{owner}.layer: Cannot wrap a non-recurrent layer: config must "
                             f"be a recurrent layer (LSTM, GravesLSTM, SimpleRnn) or a wrapper "
                             f"of one. Got class: {type(layer).__name__}")
    return layer.clone()


class _Wrapper(Layer):
    # one wrapped layer: its configuration nested, its parameters this layer's, its input type,
    # index and defaults resolved with this layer's

    fields = ("layer", "name")
    #: whether only recurrent layers (or wrappers of them) may be wrapped
    _recurrent_only = True

    def __init__(self, layer: Any, *, name: str | None = None):
        super().__init__(name=name)
        self.layer = _wrapped(type(self).__name__, layer, self._recurrent_only)
        self.n_in, self.n_out = self.layer.n_in, self.layer.n_out

    def to_dict(self):
        out = super().to_dict()
        out["layer"] = self.layer.to_dict()
        return out

    def clone(self):
        other = type(self)(**{f: getattr(self, f) for f in self.fields})
        other.input_type = self.input_type
        return other

    def resolved(self, defaults, input_type, where, index=-1):
        inner = self.layer.resolved(defaults, input_type, f"{where}.layer", index)
        other = self.clone()
        other.layer = inner
        other.input_type, other.index = input_type, index
        other.n_in, other.n_out = inner.n_in, inner.n_out
        other._check_resolved(where)
        return other

    def implied_input_type(self):
        return self.layer.implied_input_type()

    def n_in_for(self, input_type):
        return self.layer.n_in_for(input_type)

    def preprocessor_for(self, input_type):
        return self.layer.preprocessor_for(input_type)

    def output_type(self, input_type):
        return self.layer.output_type(input_type)

    # -- the wrapped layer's parameters are this layer's ----------------------------------------

    def param_shapes(self):
        return self.layer.param_shapes()

    def param_order(self, name):
        return self.layer.param_order(name)

    def trainable(self, name):
        return self.layer.trainable(name)

    @property
    def weight_keys(self) -> tuple:
        return self.layer.weight_keys

    def _link(self) -> None:
        # the wrapped layer works on this layer's parameter views (the network sets them
        # here, and ndws.parallel may replace them) and flags
        inner = self.layer
        inner.params, inner.grads = self.params, self.grads
        inner.index, inner.input_gradient_needed = self.index, self.input_gradient_needed
        inner._rng = getattr(self, "_rng", None)

    def init_params(self, rng):
        self._link()
        self.layer.init_params(rng)

    def regularization_score(self):
        self._link()
        return self.layer.regularization_score()

    def memory_use(self, batch, training, itemsize):
        self._link()
        return self.layer.memory_use(batch, training, itemsize)

    def clear(self):
        super().clear()
        self.layer.clear()

    def activate(self, x, training, mgr):
        self._link()
        return self.layer.activate(x, training, mgr)

    def backprop_gradient(self, epsilon, mgr):
        return self.layer.backprop_gradient(epsilon, mgr)

    def feed_forward_mask(self, mask, state, mgr):
        return self.layer.feed_forward_mask(mask, state, mgr)


class _RecurrentWrapper(_Wrapper):
    # a wrapper of a recurrent layer: its data format and the state it carries are the wrapped
    # layer's

    @property
    def data_format(self) -> RNNFormat:
        return self.layer.data_format

    @property
    def state_keys(self) -> tuple:
        return self.layer.state_keys

    # -- state: the wrapped layer's ---------------------------------------------------------------

    @property
    def back_length(self) -> int | None:
        return self.layer.back_length

    @back_length.setter
    def back_length(self, value: int | None) -> None:
        self.layer.back_length = value

    def rnn_get_previous_state(self):
        return self.layer.rnn_get_previous_state()

    def rnn_set_previous_state(self, state):
        self._link()
        self.layer.rnn_set_previous_state(state)

    def rnn_clear_previous_state(self):
        self.layer.rnn_clear_previous_state()

    def _state_snapshot(self):
        return self.layer._state_snapshot()

    def _state_restore(self, snapshot):
        self.layer._state_restore(snapshot)

    def set_mask(self, mask):
        self.layer.set_mask(mask)

    def activate_with_state(self, x, training, mgr, mode):
        self._link()
        return self.layer.activate_with_state(x, training, mgr, mode)


class LastTimeStep(_RecurrentWrapper):
    """The last time step of a recurrent layer's output (DL4J's ``LastTimeStep``): (n, n_out)
    rows, the output at step time-1, or with a features mask each example's last unmasked step
    (the wrapped layer then runs masked too); an example masked out entirely is an error naming
    it. A network trained with truncated BPTT refuses it (DL4J's rule)."""

    _pass_state = Layer._pass_state + ("_last", "_shape")

    def output_type(self, input_type):
        return InputType.feed_forward(self.layer.n_out)

    def memory_use(self, batch, training, itemsize):
        use = super().memory_use(batch, training, itemsize)
        if use is None:
            return None
        t = self.layer.input_type
        out = batch * self.layer.n_out * itemsize
        use = list(use) + [("forward", ArrayType.ACTIVATIONS, out)]
        if training:
            use.append(("backward", ArrayType.BP_WORKING_MEM,
                        batch * t.time_series_length * self.layer.n_out * itemsize))
        return use

    def feed_forward_mask(self, mask, state, mgr):
        # the wrapped layer runs masked, and the mask picks each example's last step; the
        # layers after get rows of examples: no mask
        self.layer.feed_forward_mask(mask, state, mgr)
        self.layer.set_mask(mask)
        self._fmask = mask
        return None, None

    def _last_steps(self, n: int, steps: int) -> np.ndarray | None:
        # each example's last unmasked step (None: the last step of all)
        m = getattr(self, "_fmask", None)
        if m is None:
            return None
        v = np.asarray(m)
        if v.shape != (n, steps):
            raise ValueError(f"LastTimeStep (layer index = {self.index}): the features mask "
                             f"has shape {v.shape}, expected (n_samples, time) = {(n, steps)}")
        nonzero = v != 0
        any_step = nonzero.any(axis=1)
        if not any_step.all():
            i = int(np.flatnonzero(~any_step)[0])
            raise ValueError(f"LastTimeStep (layer index = {self.index}): Invalid last time "
                             f"step index: example {i} in minibatch is entirely masked out (the "
                             f"features mask of that example is all 0): it has no last step")
        return steps - 1 - np.argmax(nonzero[:, ::-1], axis=1)

    def activate(self, x, training, mgr):
        return self._last_of(x, training, mgr, None)

    def activate_with_state(self, x, training, mgr, mode):
        # rnn_time_step: the wrapped layer goes on from its stored state, and the output is
        # the last step of the steps given, as activate's (DL4J hands the wrapped layer's
        # whole series on, which the layer after refuses: docs/porting-from-dl4j.md)
        return self._last_of(x, training, mgr, mode)

    def _last_of(self, x, training, mgr, mode):
        self._link()
        fmt = self.layer.data_format
        n, steps = check_sequence(self.layer, x, fmt)
        if steps == 0:
            raise ValueError(f"LastTimeStep (layer index = {self.index}): a sequence of length "
                             f"0 has no last step")
        last = self._last_steps(n, steps)
        y3 = (self.layer.activate(x, training, mgr) if mode is None else
              self.layer.activate_with_state(x, training, mgr, mode))
        out = mgr.create_uninitialized(ArrayType.ACTIVATIONS, (n, self.layer.n_out),
                                       dtype=y3.dtype)
        tbn = time_major(y3, fmt)                     # (time, n, n_out)
        if last is None:
            out.assign(tbn[steps - 1])
        else:
            np.copyto(_np_view(out), np.asarray(tbn)[last, np.arange(n)])
        self._last, self._shape = last, (steps, n, self.layer.n_out)
        return out

    def backprop_gradient(self, epsilon, mgr):
        steps, n, width = self._shape
        full = mgr.create(ArrayType.BP_WORKING_MEM, self._shape, dtype=epsilon.dtype)
        if self._last is None:
            full[steps - 1].assign(epsilon)
        else:
            _np_view(full)[self._last, np.arange(n)] = np.asarray(epsilon)
        return self.layer.backprop_gradient(sequence_view(full, self.layer.data_format), mgr)


class MaskZeroLayer(_RecurrentWrapper):
    """A recurrent layer masked where its input is padding (DL4J's ``MaskZeroLayer``): a step
    whose features all equal `masking_value` is masked (the mask is the wrapped layer's, and
    goes no further).

    Parameters
    ----------
    layer : recurrent layer
    masking_value : float
        Default 0.0.
    """

    fields = ("layer", "masking_value", "name")
    _pass_state = Layer._pass_state + ("_derived",)

    def __init__(self, layer: Any, *, masking_value: float = 0.0, name: str | None = None):
        super().__init__(layer, name=name)
        if masking_value is None:
            raise FieldTypeError("MaskZeroLayer.masking_value: expected a finite real number, "
                                 "got None")
        self.masking_value = _finite("MaskZeroLayer", "masking_value", masking_value)

    def memory_use(self, batch, training, itemsize):
        use = super().memory_use(batch, training, itemsize)
        if use is None:
            return None
        steps = self.layer.input_type.time_series_length
        return list(use) + [("forward", ArrayType.INPUT if training else
                             ArrayType.FF_WORKING_MEM, batch * steps * itemsize)]

    def feed_forward_mask(self, mask, state, mgr):
        self.layer.feed_forward_mask(mask, state, mgr)
        return None, None

    def _mask_of(self, x: NDArray, training: bool, mgr) -> NDArray:
        # 1 where a step's features are not all masking_value (DL4J's
        # input.eq(v).sum(1).neq(nFeatures))
        fmt = self.layer.data_format
        n, steps = check_sequence(self.layer, x, fmt)
        axis = 1 if fmt is RNNFormat.NCW else 2
        m = mgr.create_uninitialized(ArrayType.INPUT if training else ArrayType.FF_WORKING_MEM,
                                     (n, steps), dtype=x.dtype)
        np.copyto(_np_view(m), (np.asarray(x) != self.masking_value).any(axis=axis),
                  casting="unsafe")
        return m

    def activate(self, x, training, mgr):
        self._link()
        m = self._derived = self._mask_of(x, training, mgr)
        self.layer.set_mask(m)
        return self.layer.activate(x, training, mgr)

    def activate_with_state(self, x, training, mgr, mode):
        self._link()
        m = self._derived = self._mask_of(x, training, mgr)
        self.layer.set_mask(m)
        return self.layer.activate_with_state(x, training, mgr, mode)


class Bidirectional(_RecurrentWrapper):
    """A recurrent layer run forwards and, as a copy with its own parameters, backwards over
    each sequence (the whole length reversed), the two outputs combined step by step (DL4J's
    ``Bidirectional``).

    Parameters
    ----------
    layer : recurrent layer
        Copied: the forward and the backward layer.
    mode : {"CONCAT", "ADD", "MUL", "AVERAGE"} or Bidirectional.Mode
        CONCAT (default) stacks the two outputs' features (2 n_out); ADD, MUL and AVERAGE
        combine them element by element. DL4J's order, ``Bidirectional(mode, layer)``, is
        taken too.

    Parameters are the layer's twice, prefixed ``f`` (forward) and ``b`` (backward). A
    features mask is applied to both directions (the backward one gets it reversed), whatever
    the wrapped layer: see docs/porting-from-dl4j.md. `rnn_time_step` and truncated BPTT
    refuse it (the backward direction needs the whole sequence).
    """

    class Mode(enum.Enum):
        """How the two directions' outputs are combined."""

        ADD = "ADD"
        MUL = "MUL"
        AVERAGE = "AVERAGE"
        CONCAT = "CONCAT"

    fields = ("layer", "mode", "name")
    _pass_state = Layer._pass_state + ("_yf", "_yb")

    def __init__(self, layer: Any, mode: Any = "CONCAT", *, name: str | None = None):
        if isinstance(mode, Layer) and not isinstance(layer, Layer):
            layer, mode = mode, layer       # DL4J's order, new Bidirectional(Mode, Layer)
        super().__init__(layer, name=name)
        self.mode = member(Bidirectional.Mode, mode, "Bidirectional.mode: unknown mode",
                           "(any case, or a Bidirectional.Mode)")
        self.fwd, self.bwd = self.layer, self.layer.clone()
        self.n_out = None if self.layer.n_out is None else self.output_width()

    def resolved(self, defaults, input_type, where, index=-1):
        other = super().resolved(defaults, input_type, where, index)
        other.fwd = other.layer
        other.bwd = other.layer.clone()
        other.bwd.input_type, other.bwd.index = other.layer.input_type, index
        other.bwd.data_format = other.layer.data_format
        other.n_out = other.output_width()
        return other

    def output_width(self):
        n = self.layer.n_out
        return None if n is None else (2 * n if self.mode is Bidirectional.Mode.CONCAT else n)

    def output_type(self, input_type):
        t = self.layer.output_type(input_type)
        return InputType.recurrent(self.output_width(), t.time_series_length,
                                   t.data_format.name)

    def param_shapes(self):
        inner = self.layer.param_shapes()
        return {**{"f" + k: v for k, v in inner.items()},
                **{"b" + k: v for k, v in inner.items()}}

    def param_order(self, name):
        return self.layer.param_order(name[1:])

    def trainable(self, name):
        return self.layer.trainable(name[1:])

    @property
    def weight_keys(self) -> tuple:
        return tuple(p + k for p in "fb" for k in self.layer.weight_keys)

    def _link(self):
        for prefix, inner in (("f", self.fwd), ("b", self.bwd)):
            inner.params = {k[1:]: v for k, v in self.params.items() if k[0] == prefix}
            inner.grads = {k[1:]: v for k, v in self.grads.items() if k[0] == prefix}
            inner.index, inner.input_gradient_needed = self.index, self.input_gradient_needed
            inner._rng = getattr(self, "_rng", None)

    def init_params(self, rng):
        self._link()
        self.fwd.init_params(rng)
        self.bwd.init_params(rng)

    def regularization_score(self):
        self._link()
        return self.fwd.regularization_score() + self.bwd.regularization_score()

    def memory_use(self, batch, training, itemsize):
        self._link()
        use = self.fwd.memory_use(batch, training, itemsize)
        if use is None:
            return None
        use = list(use) * 2
        steps = self.layer.input_type.time_series_length
        n = self.layer.n_out
        use.append(("forward", ArrayType.ACTIVATIONS, steps * batch * self.output_width()
                    * itemsize))
        if training:
            use.append(("backward", ArrayType.BP_WORKING_MEM, steps * batch * n * itemsize))
            if self.mode is not Bidirectional.Mode.CONCAT:
                use.append(("backward", ArrayType.BP_WORKING_MEM, steps * batch * n * itemsize))
            if self.input_gradient_needed:
                use.append(("backward", ArrayType.ACTIVATION_GRAD,
                            steps * batch * self.n_in * itemsize))
        return use

    def clear(self):
        Layer.clear(self)
        self.fwd.clear()
        self.bwd.clear()

    def rnn_get_previous_state(self):
        raise ValueError("Bidirectional: Cannot RnnTimeStep bidirectional layers (the backward "
                         "direction needs the whole sequence)")

    rnn_set_previous_state = rnn_get_previous_state

    def rnn_clear_previous_state(self):
        self.fwd.rnn_clear_previous_state()
        self.bwd.rnn_clear_previous_state()

    def activate_with_state(self, x, training, mgr, mode):
        raise ValueError("Bidirectional: Cannot RnnTimeStep bidirectional layers (nor train "
                         "them with truncated BPTT: the backward direction needs the whole "
                         "sequence)")

    @property
    def back_length(self):
        return None

    @back_length.setter
    def back_length(self, value):
        pass

    def set_mask(self, mask):
        self._fmask = mask

    def feed_forward_mask(self, mask, state, mgr):
        self._fmask = mask
        self.fwd.feed_forward_mask(mask, state, mgr)
        _, out_state = self.bwd.feed_forward_mask(mask, state, mgr)
        return mask, out_state

    @staticmethod
    def _reverse(a: NDArray, fmt: RNNFormat) -> NDArray:
        # the whole length reversed along time (a view with a negative stride)
        return a[:, :, ::-1] if fmt is RNNFormat.NCW else a[:, ::-1, :]

    def activate(self, x, training, mgr):
        self._link()
        fmt = self.layer.data_format
        m = getattr(self, "_fmask", None)
        # the mask in both directions (the backward one reversed): ndws masks a Bidirectional
        # whatever it wraps (docs/porting-from-dl4j.md)
        self.fwd.set_mask(m)
        self.bwd.set_mask(None if m is None else m[:, ::-1])
        yf = self.fwd.activate(x, training, mgr)
        yb = self._reverse(self.bwd.activate(self._reverse(x, fmt), training, mgr), fmt)
        n = self.layer.n_out
        steps, batch = time_major(yf, fmt).shape[:2]
        out_tbn = mgr.create_uninitialized(ArrayType.ACTIVATIONS,
                                           (steps, batch, self.output_width()), dtype=yf.dtype)
        out = sequence_view(out_tbn, fmt)
        mode = self.mode
        if mode is Bidirectional.Mode.CONCAT:
            out_tbn[:, :, :n].assign(time_major(yf, fmt))
            out_tbn[:, :, n:].assign(time_major(yb, fmt))
        elif mode is Bidirectional.Mode.ADD:
            ndws.add(yf, yb, out=out)
        elif mode is Bidirectional.Mode.MUL:
            ndws.multiply(yf, yb, out=out)
        else:
            ndws.add(yf, yb, out=out)
            ndws.multiply(out, 0.5, out=out)
        self._yf, self._yb = yf, yb
        return out

    def backprop_gradient(self, epsilon, mgr):
        fmt = self.layer.data_format
        mode = self.mode
        n = self.layer.n_out
        if mode is Bidirectional.Mode.CONCAT:
            ef = sequence_view(time_major(epsilon, fmt)[:, :, :n], fmt)
            eb = sequence_view(time_major(epsilon, fmt)[:, :, n:], fmt)
        elif mode is Bidirectional.Mode.ADD:
            ef = eb = epsilon
        else:
            tbn = time_major(epsilon, fmt).shape
            ef = sequence_view(mgr.create_uninitialized(ArrayType.BP_WORKING_MEM, tbn,
                                                        dtype=epsilon.dtype), fmt)
            eb = sequence_view(mgr.create_uninitialized(ArrayType.BP_WORKING_MEM, tbn,
                                                        dtype=epsilon.dtype), fmt)
            if mode is Bidirectional.Mode.MUL:
                ndws.multiply(epsilon, self._yb, out=ef)
                ndws.multiply(epsilon, self._yf, out=eb)
            else:
                ndws.multiply(epsilon, 0.5, out=ef)
                ndws.multiply(epsilon, 0.5, out=eb)
        gf, dxf = self.fwd.backprop_gradient(ef, mgr)
        gb, dxb = self.bwd.backprop_gradient(self._reverse(eb, fmt), mgr)
        grads = {**{"f" + k: v for k, v in gf.items()}, **{"b" + k: v for k, v in gb.items()}}
        if dxf is None:
            return grads, None
        ndws.add(dxf, self._reverse(dxb, fmt), out=dxf)
        return grads, dxf


#: what a frozen recurrent layer answers for the layer it wraps (the state it carries for
#: rnn_time_step and truncated BPTT, read and set as the layer's own)
_STATE_ATTRIBUTES = frozenset(("data_format", "state_keys", "rnn_get_previous_state",
                               "rnn_clear_previous_state", "set_mask", "_state_snapshot",
                               "_state_restore"))


class FrozenLayer(_Wrapper):
    """A layer whose parameters never change (DL4J's ``FrozenLayer``): the updater has no state
    for them and never touches them, whatever it is and whatever l1, l2 or weight decay say
    (they add nothing to the score either), and the layer runs as at inference (no dropout;
    a BatchNormalization uses and keeps its running statistics). It passes no gradient down:
    the network skips its backward pass, and that of every layer below it, so freezing the
    lower layers of a network makes a training step cheaper (docs/training-tools.md). A
    trainable layer below a FrozenLayer is refused when the network is built: wrap the frozen
    one in `FrozenLayerWithBackprop` instead.

    Parameters
    ----------
    layer : Layer
        Any layer but an output layer (the score comes from it: something must train).

    `TransferLearning.Builder.set_feature_extractor` wraps the layers it freezes; the wrapper is
    part of the configuration, so a saved network loads frozen.
    """

    _recurrent_only = False
    _with_backprop = False

    def __init__(self, layer: Any, *, name: str | None = None):
        if isinstance(layer, FrozenLayer) or (isinstance(layer, dict)
                                              and layer.get("@class") in _FROZEN_NAMES):
            layer = layer.layer if isinstance(layer, FrozenLayer) else layer["layer"]
        super().__init__(layer, name=name)
        if hasattr(self.layer, "compute_score_and_gradient"):
            raise ValueError(f"{type(self).__name__}.layer: {type(self.layer).__name__} is an "
                             f"output layer, and the network's score comes from it: it cannot "
                             f"be frozen (freeze the layers below it)")

    def __getattr__(self, name: str) -> Any:
        # only reached for what the class does not define: a recurrent layer's state
        inner = self.__dict__.get("layer")
        if name in _STATE_ATTRIBUTES and inner is not None:
            return getattr(inner, name)
        if name == "activate_with_state" and hasattr(inner, "activate_with_state"):
            return self._activate_with_state
        if name == "rnn_set_previous_state" and hasattr(inner, "rnn_set_previous_state"):
            return self._rnn_set_previous_state
        if name == "accepts_input" and hasattr(inner, "accepts_input"):
            return inner.accepts_input     # the shapes an EmbeddingSequenceLayer reads
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def output_width(self):
        return self.layer.output_width()

    def trainable(self, name):
        return False

    @property
    def weight_keys(self) -> tuple:
        return ()

    def regularization_score(self):
        return 0.0

    def memory_use(self, batch, training, itemsize):
        self._link()
        return self.layer.memory_use(batch, training and self._with_backprop, itemsize)

    def activate(self, x, training, mgr):
        self._link()
        self.layer._rng = None
        return self.layer.activate(x, training and self._with_backprop, mgr)

    def _activate_with_state(self, x, training, mgr, mode):
        self._link()
        self.layer._rng = None
        return self.layer.activate_with_state(x, training and self._with_backprop, mgr, mode)

    def _rnn_set_previous_state(self, state):
        # the wrapped layer takes the state's dtype from its parameters: this layer's views,
        # linked before it reads them (a network loaded with its state has run no pass yet)
        self._link()
        self.layer.rnn_set_previous_state(state)

    def backprop_gradient(self, epsilon, mgr):
        # not called by a network (nothing below a FrozenLayer trains); no gradient either way
        return {}, None


class FrozenLayerWithBackprop(FrozenLayer):
    """A frozen layer that still passes the gradient to the layers below it (DL4J's
    ``FrozenLayerWithBackprop``): its parameters never change, as `FrozenLayer`'s, but its
    forward pass keeps what the backward pass needs and the backward pass computes dL/d(input)
    (when a trainable layer below needs it). A layer whose training pass writes parameters
    (BatchNormalization's running statistics) cannot be wrapped: its input gradient in
    inference mode is not what its backward pass computes; use FrozenLayer."""

    _with_backprop = True

    def resolved(self, defaults, input_type, where, index=-1):
        other = super().resolved(defaults, input_type, where, index)
        inner = other.layer
        fixed = [n for n in inner.param_shapes() if not inner.trainable(n)]
        if fixed:
            raise ValueError(f"{where}: FrozenLayerWithBackprop cannot wrap a "
                             f"{type(inner).__name__}: its training pass changes its "
                             f"parameters {fixed}; wrap it in FrozenLayer (inference mode)")
        return other

    def backprop_gradient(self, epsilon, mgr):
        # the wrapped layer's backward pass for its input gradient; its parameter gradients
        # land in the network's gradient buffer, which no updater reads for this layer
        _, eps = self.layer.backprop_gradient(epsilon, mgr)
        return {}, eps


_FROZEN_NAMES = ("FrozenLayer", "FrozenLayerWithBackprop")
