"""Recurrent layers: `LSTM`, `GravesLSTM` (DL4J's LSTM with peephole connections) and
`SimpleRnn`, on the compiled time loops of `ndws.nn.functional` (``lstm_forward`` /
``lstm_backward``, ``simple_rnn_forward`` / ``simple_rnn_backward``), with DL4J's parameters,
gate order, masks and stored state (docs/recurrent.md).

A layer's output is a time series (n, n_out, time) (NCW, the default) or (n, time, n_out)
(NWC) whose memory is time-major, (time, n, n_out): each step's rows are contiguous, the next
layer's input projection reads them as one matrix, and the rows an RnnOutputLayer or a dense
layer after it gets are a view (docs/recurrent.md, "Time series and a first network").

What a pass keeps and where (docs/recurrent.md, "What goes in which workspace"): the output in
ACTIVATIONS; in training, what the backward pass reads of every step (the gates, the cell, the
output: the loops' cache) in FF_CACHE, so the backward pass does not run the forward again; the
loops' scratch in FF_WORKING_MEM / BP_WORKING_MEM; each time step's temporaries in the cycle of
RNN_FF_LOOP_WORKING_MEM / RNN_BP_LOOP_WORKING_MEM's workspace that the compiled loop opens and
closes per step; the epsilon in ACTIVATION_GRAD. State kept between calls (`rnn_time_step`,
truncated BPTT) is detached memory owned by the layer, never a workspace's.

Examples
--------
>>> from ndws.nn import LSTM
>>> lstm = LSTM(n_in=3, n_out=4, activation="tanh")
>>> lstm.param_shapes()
{'W': (3, 16), 'RW': (4, 16), 'b': (1, 16)}
>>> lstm.forget_gate_bias_init, lstm.gate_activation
(1.0, <Activation.SIGMOID: 'sigmoid'>)
"""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

import ndws
from ndws._core import NDArray, _np_view
from ndws.nn import functional as F
from ndws.nn.inputs import InputType, RNNFormat
from ndws.nn.layers.base import (Activation, FieldTypeError, Layer, WeightInit, _finite,
                                 _Regularized)
from ndws.nn.preprocessors import (CnnToRnnPreProcessor, FeedForwardToRnnPreProcessor,
                                   MaskState, sequence_view)
from ndws.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr
from ndws.workspace import DummyWorkspace, get_workspace_manager

__all__ = ["LSTM", "GravesLSTM", "SimpleRnn", "BaseRecurrentLayer"]


def check_sequence(layer: Layer, x: NDArray, fmt: RNNFormat) -> tuple[int, int]:
    """(n_samples, time) of the time series `x` a recurrent layer got, or ValueError with
    DL4J's messages naming the layer: rank 3, and n_in features on the format's axis."""
    name = f"{type(layer).__name__} (layer index = {layer.index})"
    if x.ndim != 3:
        layout = "[minibatch, size, timeSeriesLength]" if fmt is RNNFormat.NCW \
            else "[minibatch, timeSeriesLength, size]"
        raise ValueError(f"{name}: 3D input expected to RNN layer, got rank {x.ndim} array of "
                         f"shape {tuple(x.shape)} (expected {layout}, {fmt.name})")
    axis = 1 if fmt is RNNFormat.NCW else 2
    if x.shape[axis] != layer.n_in:
        other = x.shape[3 - axis] == layer.n_in
        hint = (f" (the other layout's feature axis has {layer.n_in}: "
                f"{'NWC' if fmt is RNNFormat.NCW else 'NCW'} data into an {fmt.name} layer?)"
                if other else "")
        raise ValueError(f"{name}: Received input with size({axis}) = {x.shape[axis]} (input "
                         f"array shape = {list(x.shape)}); input.size({axis}) must match layer "
                         f"nIn size (nIn = {layer.n_in}){hint}")
    return x.shape[0], x.shape[2 if fmt is RNNFormat.NCW else 1]


def loop_workspace(mgr: LayerWorkspaceMgr, t: ArrayType) -> Any:
    """The workspace whose cycles a compiled time loop opens and closes per step for arrays of
    type `t` (RNN_FF_LOOP_WORKING_MEM / RNN_BP_LOOP_WORKING_MEM: DL4J's
    WS_RNN_LOOP_WORKING_MEM), or None when `t` is scoped out: the step's temporaries are then
    the loop's scratch."""
    name = mgr.get_workspace_name(t)
    if name is None:
        return None
    return get_workspace_manager().get_workspace_for_current_thread(mgr.get_configuration(t),
                                                                    name)


def _check_mask_shape(layer: Layer, mask: NDArray, n: int, steps: int) -> None:
    if tuple(mask.shape) != (n, steps):
        raise ValueError(f"{type(layer).__name__} (layer index = {layer.index}): the features "
                         f"mask has shape {tuple(mask.shape)}, expected (n_samples, time) = "
                         f"{(n, steps)}")


class SequenceInput:
    """Mixin of the layers that take time series (recurrent and RNN output layers): rows get a
    `FeedForwardToRnnPreProcessor` and images a `CnnToRnnPreProcessor` before the layer, n_in
    implies a time series of n_in features, and the layer's data_format left unset is its
    input's (one that contradicts it is an error)."""

    def implied_input_type(self):
        if self.n_in is None:
            return None
        return InputType.recurrent(self.n_in, data_format=(self.data_format or RNNFormat.NCW).name)

    def preprocessor_for(self, input_type):
        fmt = (self.data_format or RNNFormat.NCW).name
        if input_type.kind in ("FF", "CNNFlat"):
            return FeedForwardToRnnPreProcessor(fmt)
        if input_type.kind == "CNN":
            return CnnToRnnPreProcessor(input_type.height, input_type.width,
                                        input_type.channels, input_type.data_format, fmt)
        return None

    def _check_resolved(self, where):
        t = self.input_type
        if t is not None:
            if t.kind != "RNN":
                raise ValueError(f"{where}: {type(self).__name__} takes time series "
                                 f"(InputType.recurrent), got {t!r}")
            if self.data_format is not None and self.data_format is not t.data_format:
                raise ValueError(f"{where}.data_format: {self.data_format.name}, but the "
                                 f"layer's input is {t.data_format.name} ({t!r})")
            self.data_format = t.data_format
        elif self.data_format is None:
            self.data_format = RNNFormat.NCW
        super()._check_resolved(where)


class BaseRecurrentLayer(SequenceInput, _Regularized, Layer):
    """What the recurrent layers share (DL4J's ``BaseRecurrentLayer``): time series in, time
    series out; rows get a `FeedForwardToRnnPreProcessor` and images a `CnnToRnnPreProcessor`
    before the layer; the state kept for `rnn_time_step` and for truncated BPTT; the masks.

    Parameters
    ----------
    weight_init_recurrent : str or WeightInit, optional
        Of RW (default: `weight_init`).
    data_format : {"NCW", "NWC"} or RNNFormat, optional
        None: the input's.
    **common
        As `Layer`.
    """

    fields = Layer.fields + ("weight_init_recurrent", "data_format")
    has_weights = True
    weight_keys = ("W", "RW")
    #: the names of the state a step carries (DL4J's stateMap keys)
    state_keys: ClassVar[tuple[str, ...]] = ("prevAct",)
    _pass_state = Layer._pass_state + ("_cache", "_h0", "_c0", "_rnn_mask", "_steps", "_loops")

    def __init__(self, *, weight_init_recurrent: Any = None, data_format: Any = None,
                 **common: Any):
        super().__init__(**common)
        owner = type(self).__name__
        self.weight_init_recurrent = (None if weight_init_recurrent is None else
                                      WeightInit.parse(weight_init_recurrent,
                                                       f"{owner}.weight_init_recurrent"))
        self.data_format = (None if data_format is None
                            else RNNFormat.parse(data_format, f"{owner}.data_format"))
        # DL4J's stateMap (rnn_time_step) and tBpttStateMap (truncated BPTT): detached arrays
        # of this layer, written by the loops' final state; two of each so that a call reads
        # one and writes the other (never an output overlapping its input)
        self._state: dict[str, NDArray] = {}
        self._tbptt_state: dict[str, NDArray] = {}
        self._spare: dict[str, list] = {}
        #: the steps the backward pass sends errors back through (truncated BPTT's
        #: tbptt_back_length; None: all); the network sets it for its segments
        self.back_length: int | None = None

    # -- configuration --------------------------------------------------------------------------

    def output_type(self, input_type):
        t = self.input_type
        length = None if t is None else t.time_series_length
        return InputType.recurrent(self.n_out, length, (self.data_format or RNNFormat.NCW).name)

    def param_order(self, name):
        # DL4J's weight views are 'f' order: a flat vector of DL4J means the same here
        return "C" if name == "b" else "F"

    def _sample(self, rng: np.random.Generator, key: str, shape: tuple, fan_in: int,
                fan_out: int, recurrent: bool = False) -> None:
        init = (self.weight_init_recurrent if recurrent and self.weight_init_recurrent
                else self.weight_init) or WeightInit.XAVIER
        np.copyto(_np_view(self.params[key]), init.sample(rng, shape, fan_in, fan_out),
                  casting="unsafe")

    # -- the time series of a pass --------------------------------------------------------------

    def _sequence(self, x: NDArray) -> tuple[int, int]:
        n, steps = check_sequence(self, x, self.data_format)
        self._steps = steps
        return n, steps

    def _kernel_mask(self, n: int, steps: int) -> NDArray | None:
        # the mask the loops apply: set by a wrapper (LastTimeStep, Bidirectional, MaskZero)
        # or, for SimpleRnn, the features mask it keeps
        m = getattr(self, "_rnn_mask", None)
        if m is not None:
            _check_mask_shape(self, m, n, steps)
        return m

    def set_mask(self, mask: NDArray | None) -> None:
        """Apply `mask` ((n_samples, time), 0 at padded steps) in this layer's loops for the
        pass (DL4J's ``setMaskArray``: what the wrappers do to the layer they wrap)."""
        self._rnn_mask = mask

    def _output(self, n: int, steps: int, mgr: LayerWorkspaceMgr, dtype: Any) -> NDArray:
        # the output: a time-major (time, n, n_out) array seen in the layer's format
        return sequence_view(mgr.create_uninitialized(ArrayType.ACTIVATIONS,
                                                      (steps, n, self.n_out), dtype=dtype),
                             self.data_format)

    def _input_gradient(self, x: NDArray, mgr: LayerWorkspaceMgr) -> NDArray | None:
        if not self.input_gradient_needed:
            return None
        n, steps = x.shape[0], self._steps
        return sequence_view(mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD,
                                                      (steps, n, self.n_in), dtype=x.dtype),
                             self.data_format)

    # -- state between calls (DL4J's rnnTimeStep / tBpttStateMap) -------------------------------

    def _initial_state(self, mode: str | None, n: int) -> dict:
        # the state a pass starts from: zeros (None) for a standard pass, the stored one for
        # rnn_time_step ("step") and truncated BPTT ("tbptt")
        if mode is None:
            return {}
        stored = self._state if mode == "step" else self._tbptt_state
        if stored:
            got = next(iter(stored.values())).shape[0]
            if got != n:
                raise ValueError(
                    f"{type(self).__name__} (layer index = {self.index}): Invalid RNN previous "
                    f"state (last time step activations/initialization): rnnTimeStep with "
                    f"different minibatch size, or forgot to call rnnClearPreviousState between "
                    f"batches? (the stored state is for {got} examples, the input has {n}; call "
                    f"rnn_clear_previous_state())")
        return stored

    def _final_state(self, mode: str | None, n: int, dtype: Any) -> dict:
        # where the loops write the final state: the stored state's other buffers (detached,
        # owned by the layer; allocated when the batch size changes), or None (the loops place
        # it in the working memory)
        if mode is None:
            return {}
        stored = self._state if mode == "step" else self._tbptt_state
        out = {}
        for key in self.state_keys:
            spare = self._spare.setdefault(mode + key, [])
            current = stored.get(key)
            for buf in spare:
                if buf is not current and buf.shape == (n, self.n_out) and buf.dtype == dtype:
                    out[key] = buf
                    break
            else:
                buf = ndws.empty((n, self.n_out), dtype=dtype, detached=True)
                spare[:] = [b for b in spare if b.shape == (n, self.n_out)
                            and b.dtype == dtype][:1] + [buf]
                out[key] = buf
        return out

    def _store_state(self, mode: str | None, final: dict) -> None:
        if mode == "step":
            self._state = final
        elif mode == "tbptt":
            self._tbptt_state = final

    def rnn_get_previous_state(self) -> dict[str, NDArray]:
        """Copies (detached) of the state `rnn_time_step` carries: {"prevAct": (n, n_out)}
        (and "prevMem" for an LSTM); empty before the first call and after a clear."""
        return {k: v.dup().detach() for k, v in self._state.items()}

    def rnn_set_previous_state(self, state: dict) -> None:
        """Replace the carried state (arrays of shape (n, n_out), one per key of
        `state_keys`); copied into the layer's own detached memory."""
        if not isinstance(state, dict):
            raise TypeError(f"state: expected a dict of {', '.join(self.state_keys)} arrays, "
                            f"got {type(state).__name__}")
        if set(state) != set(self.state_keys):
            raise ValueError(f"state: expected the keys {list(self.state_keys)} for "
                             f"{type(self).__name__}, got {sorted(state)}")
        dtype = self.params[next(iter(self.params))].dtype
        arrays = {}
        n = None
        for key in self.state_keys:
            v = state[key]
            a = v.numpy() if isinstance(v, NDArray) else np.asarray(v)
            if a.dtype.kind not in "biuf":
                raise TypeError(f"state[{key!r}]: expected an array of numbers, got dtype "
                                f"{a.dtype}")
            if a.ndim != 2 or a.shape[1] != self.n_out or (n is not None and a.shape[0] != n):
                raise ValueError(f"state[{key!r}]: expected shape (n_samples, {self.n_out})"
                                 f"{'' if n is None else f' with n_samples = {n}'}, got "
                                 f"{a.shape}")
            if not np.isfinite(a).all():
                raise ValueError(f"state[{key!r}]: holds NaN or inf")
            with np.errstate(over="ignore"):
                cast = a.astype(dtype)
            if not np.isfinite(cast).all():
                raise ValueError(f"state[{key!r}]: holds values beyond the range of the "
                                 f"network's {np.dtype(dtype)} (at most "
                                 f"{np.finfo(dtype).max:.4g} in magnitude)")
            n = a.shape[0]
            arrays[key] = cast
        final = self._final_state("step", n, dtype)
        for key, a in arrays.items():
            np.copyto(_np_view(final[key]), a, casting="unsafe")
        self._state = final

    def rnn_clear_previous_state(self) -> None:
        """Forget the carried state of `rnn_time_step` and of truncated BPTT (both of DL4J's
        maps)."""
        self._state = {}
        self._tbptt_state = {}

    def _state_snapshot(self) -> dict:
        # the state an rnn_time_step call starts from: the call writes its final state into
        # spare buffers (_final_state), never into these, so a failed call is undone by
        # putting this back (_state_restore)
        return self._state

    def _state_restore(self, snapshot: dict) -> None:
        self._state = snapshot

    # -- forward and backward (one implementation over each layer's loops) ----------------------

    #: the names of the layer's loops in ndws.nn.functional (forward, backward)
    loops: ClassVar[tuple[str, str]] = ("", "")

    def _kernel_args(self) -> dict:
        return {"activation": (self.activation or Activation.SIGMOID).value,
                "data_format": self.data_format.name}

    def _cache_shape(self, steps: int, n: int) -> tuple:
        raise NotImplementedError

    def _scratch_bytes(self, n: int, steps: int, itemsize: int, cache: bool, backward: bool,
                       loop: bool = True) -> int:
        raise NotImplementedError

    def memory_use(self, batch, training, itemsize):
        t = self.input_type
        if t is None or t.time_series_length is None:
            return None                  # the steps are known when the sequence comes
        steps, n = t.time_series_length, self.n_out
        state = batch * n * itemsize
        use = [("forward", ArrayType.ACTIVATIONS, steps * batch * n * itemsize),
               ("forward", ArrayType.FF_WORKING_MEM,
                self._scratch_bytes(batch, steps, itemsize, training, False))]
        use += [("forward", ArrayType.FF_WORKING_MEM, state)] * len(self.state_keys)
        use.append(("forward", ArrayType.RNN_FF_LOOP_WORKING_MEM,
                    self._step_bytes(batch, steps, itemsize, training, False)))
        if training:
            use.append(("forward", ArrayType.FF_CACHE,
                        int(np.prod(self._cache_shape(steps, batch))) * itemsize))
            use.append(("backward", ArrayType.BP_WORKING_MEM,
                        self._scratch_bytes(batch, steps, itemsize, True, True)))
            use += [("backward", ArrayType.BP_WORKING_MEM, state)] * len(self.state_keys)
            use.append(("backward", ArrayType.RNN_BP_LOOP_WORKING_MEM,
                        self._step_bytes(batch, steps, itemsize, True, True)))
            use += self._regularization_use(itemsize)
            if self.input_gradient_needed:
                use.append(("backward", ArrayType.ACTIVATION_GRAD,
                            steps * batch * self.n_in * itemsize))
        return use

    def _step_bytes(self, n: int, steps: int, itemsize: int, cache: bool, backward: bool
                    ) -> int:
        # one time step's temporaries, a cycle of the loop workspace: what the loops' scratch
        # holds in their place when there is no loop workspace
        return (self._scratch_bytes(n, steps, itemsize, cache, backward, False)
                - self._scratch_bytes(n, steps, itemsize, cache, backward, True))

    def _scratch(self, mgr: LayerWorkspaceMgr, t: ArrayType, loop: Any, n: int, steps: int,
                 dtype: Any, cache: bool, backward: bool) -> NDArray:
        # the loops' scratch, sized for any layout of the arrays (what memory_use declares)
        has_loop = loop is not None and not isinstance(loop, DummyWorkspace)
        nbytes = self._scratch_bytes(n, steps, np.dtype(dtype).itemsize, cache, backward,
                                     has_loop)
        return mgr.create_uninitialized(t, (nbytes,), dtype=np.uint8)

    def activate(self, x, training, mgr):
        return self._forward(x, training, mgr, None)

    def activate_with_state(self, x: NDArray, training: bool, mgr: LayerWorkspaceMgr,
                            mode: str) -> NDArray:
        """A pass from the stored state, storing the final one (detached): ``mode="step"`` for
        `rnn_time_step` (DL4J's ``rnnTimeStep``), ``"tbptt"`` for a segment of truncated BPTT
        (DL4J's ``rnnActivateUsingStoredState`` with storeLastForTBPTT)."""
        return self._forward(x, training, mgr, mode)

    def _forward(self, x, training, mgr, mode):
        n, steps = self._sequence(x)
        self._x = x
        start = self._initial_state(mode, n)
        final = self._final_state(mode, n, x.dtype)
        for key in self.state_keys:
            if key not in final:         # a standard pass: the final state is not kept
                final[key] = mgr.create_uninitialized(ArrayType.FF_WORKING_MEM,
                                                      (n, self.n_out), dtype=x.dtype)
        y = self._output(n, steps, mgr, x.dtype)
        cache = None
        if training:
            cache = mgr.create_uninitialized(ArrayType.FF_CACHE, self._cache_shape(steps, n),
                                             dtype=x.dtype)
        loop = loop_workspace(mgr, ArrayType.RNN_FF_LOOP_WORKING_MEM)
        scratch = self._scratch(mgr, ArrayType.FF_WORKING_MEM, loop, n, steps, x.dtype,
                                training, False)
        kw = self._kernel_args()
        self._state_args(kw, "h0", "c0", start)
        self._state_args(kw, "h_out", "c_out", final)
        getattr(F, self.loops[0])(x, self.params["W"], self.params["RW"], self.params["b"],
                                  mask=self._kernel_mask(n, steps), out=y, cache=cache,
                                  loop_workspace=loop, scratch=scratch, **kw)
        self._cache = cache
        self._h0, self._c0 = start.get("prevAct"), start.get("prevMem")
        self._store_state(mode, final)
        return y

    def step_runner(self, batch, dtype):
        # rnn_time_step's one step: the loops on the rows viewed as a series of one step, the
        # stored state in and out as in activate_with_state(..., "step"), the scratch and the
        # output buffer kept (no workspace: one step has nothing to cycle)
        ncw = self.data_format is RNNFormat.NCW
        seq_in = (batch, self.n_in, 1) if ncw else (batch, 1, self.n_in)
        seq_out = (batch, self.n_out, 1) if ncw else (batch, 1, self.n_out)
        scratch = ndws.empty(self._scratch_bytes(batch, 1, np.dtype(dtype).itemsize, False,
                                                 False, False), dtype=np.uint8, detached=True)
        buf = ndws.empty((batch, self.n_out), dtype=dtype, detached=True)
        loop = getattr(F, self.loops[0])
        base = self._kernel_args()
        params = self.params

        def run(rows, out=None):
            out = buf if out is None else out
            start = self._initial_state("step", batch)
            final = self._final_state("step", batch, dtype)
            kw = dict(base)
            self._state_args(kw, "h0", "c0", start)
            self._state_args(kw, "h_out", "c_out", final)
            loop(rows.reshape(seq_in), params["W"], params["RW"], params["b"],
                 out=out.reshape(seq_out), scratch=scratch, **kw)
            self._store_state("step", final)
            return out
        return run

    def _state_args(self, kw: dict, h: str, c: str, state: dict) -> None:
        kw[h] = state.get("prevAct")
        if "prevMem" in self.state_keys:
            kw[c] = state.get("prevMem")

    def backprop_gradient(self, epsilon, mgr):
        x = self._x
        n, steps = x.shape[0], self._steps
        dx = self._input_gradient(x, mgr)
        kw = self._kernel_args()
        grads = {}
        for key, name in (("prevAct", "grad_h0"), ("prevMem", "grad_c0")):
            if key in self.state_keys:
                grads[name] = mgr.create_uninitialized(ArrayType.BP_WORKING_MEM,
                                                       (n, self.n_out), dtype=x.dtype)
        self._state_args(kw, "h0", "c0", {"prevAct": self._h0, "prevMem": self._c0})
        loop = loop_workspace(mgr, ArrayType.RNN_BP_LOOP_WORKING_MEM)
        scratch = self._scratch(mgr, ArrayType.BP_WORKING_MEM, loop, n, steps, x.dtype, True,
                                True)
        getattr(F, self.loops[1])(x, self.params["W"], self.params["RW"], self._cache, epsilon,
                                  mask=self._kernel_mask(n, steps),
                                  back_length=self.back_length, need_input=dx is not None,
                                  grad_input=dx, grad_W=self.grads["W"],
                                  grad_RW=self.grads["RW"], grad_b=self.grads["b"],
                                  loop_workspace=loop, scratch=scratch, **grads, **kw)
        self._regularize_gradient()
        return dict(self.grads), dx

    def feed_forward_mask(self, mask, state, mgr):
        # DL4J's LSTM: "don't make any changes to the data OR the mask arrays": the padded
        # steps are left to the loss's label mask (SimpleRnn overrides this)
        return mask, (None if mask is None else MaskState.PASSTHROUGH)


class LSTM(BaseRecurrentLayer):
    """Long short-term memory (DL4J's ``LSTM``): per step, with the gate blocks (g, f, o, i) of
    DL4J's columns::

        z   = x_t W + h_{t-1} RW + b
        c_t = gate(z_f) * c_{t-1} + gate(z_i) * act(z_g)
        h_t = gate(z_o) * act(c_t)

    Parameters
    ----------
    n_in, n_out : int
    activation : str or Activation, optional
        Of the block input and the cell output (DL4J's default: the network's, sigmoid; tanh
        is what is usually meant).
    gate_activation : str or Activation
        Default sigmoid.
    forget_gate_bias_init : float
        The forget gate's bias (default 1.0); the other biases start at 0 (DL4J's).
    weight_init_recurrent, data_format, **common
        As `BaseRecurrentLayer`.

    Parameters are DL4J's: ``W`` (n_in, 4 n_out), ``RW`` (n_out, 4 n_out), ``b`` (1, 4 n_out),
    W and RW in column-major order in the flat buffer.
    """

    fields = BaseRecurrentLayer.fields + ("gate_activation", "forget_gate_bias_init")
    state_keys = ("prevAct", "prevMem")
    #: GravesLSTM's three peephole columns at the end of RW
    peepholes: ClassVar[bool] = False

    def __init__(self, *, gate_activation: Any = Activation.SIGMOID,
                 forget_gate_bias_init: float = 1.0, **common: Any):
        super().__init__(**common)
        owner = type(self).__name__
        self.gate_activation = Activation.parse(gate_activation, f"{owner}.gate_activation")
        if forget_gate_bias_init is None:
            raise FieldTypeError(f"{owner}.forget_gate_bias_init: expected a finite real "
                                 f"number, got None")
        self.forget_gate_bias_init = _finite(owner, "forget_gate_bias_init",
                                             forget_gate_bias_init)

    def _check_resolved(self, where):
        super()._check_resolved(where)
        for name in ("activation", "gate_activation"):
            act = getattr(self, name) or Activation.IDENTITY
            if act is Activation.SOFTMAX:
                raise ValueError(f"{where}.{name}: softmax is not an element-wise activation "
                                 f"(an LSTM's gates and cell need one)")

    def param_shapes(self):
        n = self.n_out
        return {"W": (self.n_in, 4 * n), "RW": (n, 4 * n + (3 if self.peepholes else 0)),
                "b": (1, 4 * n)}

    def init_params(self, rng):
        n = self.n_out
        # DL4J's LSTMParamInitializer: fan-in n_out and fan-out n_in + n_out for both W and RW
        fan_in, fan_out = n, self.n_in + n
        self._sample(rng, "W", (self.n_in, 4 * n), fan_in, fan_out)
        self._sample(rng, "RW", self.param_shapes()["RW"], fan_in, fan_out, recurrent=True)
        b = _np_view(self.params["b"])
        b[...] = 0.0
        b[0, n:2 * n] = self.forget_gate_bias_init

    loops = ("lstm_forward", "lstm_backward")

    def _kernel_args(self):
        return {"activation": (self.activation or Activation.SIGMOID).value,
                "gate_activation": self.gate_activation.value, "peepholes": self.peepholes,
                "data_format": self.data_format.name}

    def _cache_shape(self, steps, n):
        return F.lstm_cache_shape(steps, n, self.n_out,
                                  activation=(self.activation or Activation.SIGMOID).value,
                                  gate_activation=self.gate_activation.value)

    def _scratch_bytes(self, n, steps, itemsize, cache, backward, loop=True):
        return F.lstm_scratch_bytes(n, self.n_in, self.n_out, steps,
                                    dtype=np.float64 if itemsize == 8 else np.float32,
                                    backward=backward, peepholes=self.peepholes, cache=cache,
                                    mask=True, loop_workspace=loop,
                                    back_length=self.back_length)


class GravesLSTM(LSTM):
    """DL4J's ``GravesLSTM``: an `LSTM` with peephole connections, RW (n_out, 4 n_out + 3)
    whose last three columns are wFF, wOO and wGG (the forget gate sees c_{t-1}, the output
    gate c_t, the input gate c_{t-1})."""

    peepholes = True


class SimpleRnn(BaseRecurrentLayer):
    """DL4J's ``SimpleRnn``: ``h_t = act(x_t W + b + h_{t-1} RW)``.

    Unlike an LSTM it applies the features mask itself (DL4J's): a padded step's output and
    state are 0 and nothing flows back from it.

    Parameters
    ----------
    n_in, n_out, activation, weight_init_recurrent, data_format, **common
        As `BaseRecurrentLayer`; ``bias_init`` sets b.

    Parameters are DL4J's: ``W`` (n_in, n_out), ``RW`` (n_out, n_out), ``b`` (1, n_out).
    """

    def param_shapes(self):
        n = self.n_out
        return {"W": (self.n_in, n), "RW": (n, n), "b": (1, n)}

    def init_params(self, rng):
        n = self.n_out
        self._sample(rng, "W", (self.n_in, n), self.n_in, n)
        self._sample(rng, "RW", (n, n), n, n, recurrent=True)
        self.params["b"].fill(self.bias_init or 0.0)

    def _check_resolved(self, where):
        super()._check_resolved(where)
        if self.activation is Activation.SOFTMAX:
            raise ValueError(f"{where}.activation: softmax is not an element-wise activation")

    def feed_forward_mask(self, mask, state, mgr):
        # DL4J's SimpleRnn keeps the features mask and applies it at every step
        self._rnn_mask = mask
        return mask, state

    loops = ("simple_rnn_forward", "simple_rnn_backward")

    def _cache_shape(self, steps, n):
        return F.simple_rnn_cache_shape(steps, n, self.n_out,
                                        activation=(self.activation or Activation.SIGMOID).value)

    def _scratch_bytes(self, n, steps, itemsize, cache, backward, loop=True):
        return F.simple_rnn_scratch_bytes(n, self.n_in, self.n_out, steps,
                                          dtype=np.float64 if itemsize == 8 else np.float32,
                                          backward=backward, cache=cache, mask=True,
                                          loop_workspace=loop, back_length=self.back_length)
