"""`MultiLayerNetwork`: a stack of layers trained and served with every temporary in workspaces
(DL4J's ``MultiLayerNetwork``), in the layout its `ndws.WorkspaceMode` says.

All parameters live in one flat, contiguous array and all gradients in another (each layer's
weights are views into them, as DL4J's flattened params), and the updater state is flat too, so
an update is one fused kernel call per updater over one buffer.

Examples
--------
>>> import numpy as np, ndws
>>> from ndws.nn import MultiLayerConfiguration, MultiLayerNetwork, DenseLayer, OutputLayer, Sgd
>>> conf = MultiLayerConfiguration(
...     [DenseLayer(n_in=2, n_out=8, activation="tanh"),
...      OutputLayer(n_out=2, activation="softmax", loss_function="MCXENT")],
...     seed=0, updater=Sgd(0.5))
>>> net = MultiLayerNetwork(conf)
>>> net.init()
>>> x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32)
>>> y = np.array([0, 1, 1, 0])
>>> history = net.fit(x, y, batch_size=4, epochs=500)
>>> history.epoch_scores[-1] < 0.1
True
>>> out = net.output(x)
>>> out.is_attached(), out.numpy().argmax(axis=1).tolist()
(False, [0, 1, 1, 0])
"""
from __future__ import annotations

import contextlib
import traceback
from typing import Any, Iterable

import numpy as np

import ndws
from ndws import _core
from ndws._core import NDArray
from ndws.data.async_iterators import _prefetch_for_fit
from ndws.data.dataset import DataSet
from ndws.nn.conf import MultiLayerConfiguration
from ndws.nn.inputs import check_input_shape, one_example as _one_example
from ndws.evaluation._evaluate import batches, check_evaluations, count
from ndws.nn import _checks
from ndws.nn._fit_options import Validation, check_seed, labels_array, shuffled
from ndws.nn.history import History, _Progress
from ndws.nn._busy import FORWARD, STATE, TRAIN
from ndws.nn.layers.base import (_FROM_OUTPUT, Activation, DenseLayer, Layer, LossFunction,
                            OutputLayer)
from ndws.nn._model import (_IN_FORWARD, Model, batch_count as _length,
                            count as _count, fit_options, index_reader, index_time_axis,
                            input_array, layer_step_runner, step_program, steps_one_at_a_time)
from ndws.nn._layout import (WS_ALL_LAYERS_ACT, WS_LAYER_ACT, WS_OUTPUT_MEM,
                             activation_workspace, epsilon_workspace, workspace_configs)
from ndws.nn.conf import SETTINGS, BackpropType
from ndws.nn.layers.wrappers import FrozenLayer
from ndws.nn.inputs import InputType
from ndws.nn.preprocessors import MaskState
from ndws.nn._iteration import MODE_NONE, MODE_SEPARATE, MODE_SINGLE, DensePlan
from ndws.nn.memory_report import MemoryReport, layer_uses as _layer_uses, plan as _plan
from ndws.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr
from ndws.workspace import WorkspaceMode, get_workspace_manager, scope_out_of_workspaces

__all__ = ["MultiLayerNetwork"]

_memory_manager = ndws.get_memory_manager()

# what a nested call is refused inside of (ndws.nn._busy)

# the training layouts of the compiled iteration (ENABLED is resolved to SEPARATE before)
_PLAN_MODES = {WorkspaceMode.NONE: MODE_NONE, WorkspaceMode.SINGLE: MODE_SINGLE,
               WorkspaceMode.SEPARATE: MODE_SEPARATE}

class MultiLayerNetwork(Model):
    """A feed-forward network of `conf`'s layers.

    Parameters
    ----------
    conf : MultiLayerConfiguration

    Call `init` before using it. One network serves one thread at a time: a second thread that
    calls `fit` / `output` while the first is inside gets a ``RuntimeError``; `clone()` and
    `ndws.parallel.ParallelInference` copy it from any thread at an iteration boundary. What a
    listener may call back is in docs/networks.md, "Threads, listeners and snapshots".
    """

    _kind = "MultiLayerNetwork"
    _conf_class = MultiLayerConfiguration
    _layer_hook = True

    def __init__(self, conf: MultiLayerConfiguration):
        self._init_state(conf)
        self.layers: list[Layer] = []

    # -- building -------------------------------------------------------------------------------

    def init(self, params: Any = None) -> None:
        """Build the layers, lay their parameters out in one flat array and initialise them
        from the seed (or copy `params`, a flat array of `num_params()` values)."""
        with self._exclusive("init", TRAIN, writes=True):
            self._build(params, share=False)

    def _build(self, params: Any, share: bool, sample: bool = True, adopt: bool = False
               ) -> None:
        # share=True: an inference-only network (ndws.parallel's serving replicas) whose
        # parameters are views of `params` itself, a detached flat array laid out as this
        # configuration's; no gradients, no updater state, nothing copied or initialised.
        # adopt=True: the same parameters, but a network that trains them in place
        # (TransferLearningHelper's unfrozen layers, on the tail of the original's buffer)
        conf = self.conf
        layers = [layer.clone() for layer in conf.resolved_layers]
        tbptt = conf.backprop_type is BackpropType.TRUNCATED_BPTT
        stop = _backward_stop(layers)
        for i, layer in enumerate(layers):
            layer.index = i
            # an epsilon only for a layer above one that trains (the first layer's input
            # gradient, and a frozen bottom's, nothing reads)
            layer.input_gradient_needed = i > stop
            if tbptt and hasattr(layer, "back_length"):
                # truncated BPTT: the errors of a segment flow back through its last
                # tbptt_back_length steps (docs/recurrent.md)
                layer.back_length = conf.tbptt_back_length
        flat = self._lay_out(layers, params, share, sample, adopt)
        self.layers = layers
        # each layer's preprocessor (the configuration's, cloned: one may keep what a pass
        # needs for its backward, like a layer)
        self._preprocessors = [None if p is None else p.clone()
                               for p in conf.resolved_preprocessors]
        # each layer's declared output shape per example (what activate must return; None:
        # any size there) and whether what its passes return is checked (user code:
        # ndws._checks)
        self._out_shapes = [_declared_shape(layer) for layer in layers]
        self._checked = [_checks.user_code(layer) for layer in layers]
        # the backward pass runs from the output layer down to this layer (the lowest that
        # trains): below it nothing needs a gradient or an epsilon (frozen layers)
        self._backward_stop = stop
        self._configs = workspace_configs(len(layers))
        # the compiled training iteration, where it applies (an inference replica never trains)
        self._dense_plan = (None if share or any(self._preprocessors)
                            else _dense_plan(layers, self._configs))
        self._adopt(flat)

    def get_layer(self, index: int) -> Layer:
        self._check_init()
        return self.layers[index]

    def n_layers(self) -> int:
        return len(self.conf.layers)

    def score(self, ds: DataSet | None = None) -> float:
        """The score (loss plus regularisation) of the last training iteration, or of `ds`
        (an inference pass: no dropout, running statistics, nothing updated)."""
        if ds is None:
            return self._score
        self._check_init()
        if not isinstance(ds, DataSet):
            raise TypeError(f"ds: expected a DataSet, got {type(ds).__name__}")
        _refuse_no_examples("score", ds)           # a mean over no example has no value
        with self._exclusive("score"):
            return self._forward_score(ds)

    def score_examples(self, ds: DataSet, add_regularization: bool = True) -> NDArray:
        """Each example's score in `ds` (an inference pass), with the regularisation terms
        added to each when `add_regularization` (DL4J's ``scoreExamples``); detached."""
        self._check_init()
        if not isinstance(ds, DataSet):
            raise TypeError(f"ds: expected a DataSet, got {type(ds).__name__}")
        if not isinstance(add_regularization, bool):
            raise TypeError(f"add_regularization: expected a bool, got "
                            f"{type(add_regularization).__name__}")
        with self._exclusive("score_examples"):
            per = self._forward_score(ds, per_example=True)
            if add_regularization:
                reg = self._regularization()
                if reg:
                    ndws.add(per, reg, out=per)
            return per

    def _forward_score(self, ds: DataSet, per_example: bool = False,
                       outputs: list | None = None) -> Any:
        # outputs: a list to append the output layer's activations to (detached)
        out_layer = self._output_layer()
        x, labels, mask, fmask = self._batch_arrays(ds)
        mgr = self._manager(WorkspaceMode.NONE, True)
        saved = [getattr(layer, "_rng", None) for layer in self.layers]
        busy, around = self._busy, self._busy.inside
        busy.inside = _IN_FORWARD
        try:
            for layer in self.layers:
                layer._rng = None                  # no dropout when scoring
            with scope_out_of_workspaces():
                a = x
                rows, dt = x.shape[0], self.conf.dtype
                masks = self._begin_pass(rows, fmask)
                for layer, shape in zip(self.layers, self._out_shapes):
                    # DL4J's score(ds): inference for every layer (running statistics, no
                    # dropout); the output layer's training pass only keeps its
                    # pre-activation for the loss
                    a, masks = self._activate(layer.index, a, layer is out_layer, mgr, masks,
                                              None)
                    if self._checked[layer.index]:
                        _checks.returned(layer, "activate", a, (rows,) + shape, dt)
                if outputs is not None:
                    outputs.append(a)
                if per_example:
                    per = out_layer.compute_score_examples(labels, mgr, mask)
                    if self._checked[-1]:
                        _checks.returned(out_layer, "compute_score_examples", per, (rows,), dt)
                    return per
                score = _checks.real(out_layer, "compute_score",
                                     out_layer.compute_score(labels, mgr, mask))
        finally:
            busy.inside = around
            for layer, r in zip(self.layers, saved):
                layer._rng = r
            self._clear()
        return score + self._regularization()

    def _regularization(self) -> float:
        # the layers' l1/l2 terms of the score (ndws calls: their temporaries go to the
        # current workspace, the iteration's when called inside it)
        return sum(_checks.real(layer, "regularization_score", layer.regularization_score())
                   for layer in self.layers)

    def _batch_arrays(self, ds: DataSet) -> tuple:
        # (features, labels, labels mask, features mask) of a batch, checked against the
        # network; the masks in the network's dtype, a per-example (n, 1) mask as (n,)
        x = self._as_input(ds.features, "features")
        if ds.labels is None:
            raise ValueError("the DataSet has no labels")
        labels = ds.labels
        mask, fmask = ds.labels_mask, ds.features_mask
        if fmask is not None:
            fmask = self._check_features_mask(x, fmask)
        # targets (one-hot rows, per-pixel labels) in the network's dtype; class indices stay
        convert = labels.ndim >= 2 and labels.dtype != self.conf.dtype
        if mask is None and fmask is None and not convert:
            return x, labels, None, None      # nothing to make (fit's every batch, typically)
        with scope_out_of_workspaces():
            if convert:
                labels = labels.astype(self.conf.dtype)
            if mask is not None:
                _finite_mask("labels_mask", mask)
                if mask.ndim == 2 and mask.shape[1] == 1:
                    mask = mask.reshape(mask.shape[0])        # DL4J's (n, 1) per-example mask
                if mask.dtype != self.conf.dtype:
                    mask = mask.astype(self.conf.dtype)
            if fmask is not None and fmask.dtype != self.conf.dtype:
                fmask = fmask.astype(self.conf.dtype)
        return x, labels, mask, fmask

    def _check_features_mask(self, x: NDArray, fmask: NDArray) -> NDArray:
        return check_features_mask(x, fmask, self.conf._network_input, "features_mask")

    # -- workspace managers ---------------------------------------------------------------------

    def memory_report(self, batch_size: int, sequence_length: int | None = None
                      ) -> MemoryReport:
        """The bytes every workspace needs in every mode for batches of `batch_size`, per
        layer and in total, from the shapes (nothing runs); printable as a table. A network
        of time series of varying length is planned for `sequence_length` steps (without it,
        its recurrent layers say "unknown")."""
        self._check_init()
        return MemoryReport(self, batch_size, sequence_length)

    def _memory_uses(self, batch: int, training: bool, itemsize: int,
                     length: int | None = None) -> list:
        return _layer_uses(self, batch, training, itemsize, length)

    _memory_plan = staticmethod(_plan)

    def _memory_rows(self) -> list:
        return [{"index": i, "type": type(layer).__name__} for i, layer in enumerate(self.layers)]

    def _variable_length(self) -> bool:
        t = self.conf._network_input
        return t is not None and t.kind == "RNN" and t.time_series_length is None

    def _plan_length(self, x: NDArray) -> int | None:
        # the time steps a memory plan is for: a batch's, for a time series of varying length
        if self._variable_length() and x.ndim == 3:
            return x.shape[self._time_axis(self.conf._network_input)]
        return None

    def _layers_for_length(self, length: int) -> tuple:
        # the layers and preprocessors as they would be resolved for time series of `length`
        # steps (copies with this network's runtime settings), for a memory plan
        t = self.conf._network_input
        if not self._variable_length():
            return self.layers, self._preprocessors
        typed = InputType.recurrent(t.size, length, t.data_format.name)
        layers, pres = self.conf._resolve(typed)
        for mine, other in zip(self.layers, layers):
            other.input_gradient_needed = mine.input_gradient_needed
            if hasattr(mine, "back_length"):
                other.back_length = mine.back_length
        return layers, pres

    def _manager(self, mode: WorkspaceMode, training: bool, role: str = "") -> LayerWorkspaceMgr:
        # built once per (mode, phase, role) and kept: only the ping-pong mappings change
        key = (mode, training, role)
        mgr = self._managers.get(key)
        if mgr is None:
            mgr = self._managers[key] = self._build_manager(mode, training, WS_LAYER_ACT[0])
        return mgr

    def _preprocess(self, i: int, a: NDArray, mgr: LayerWorkspaceMgr, backward: bool
                    ) -> NDArray:
        # layer i's preprocessor, forward on its input or backward on its epsilon, inside the
        # layer's scopes; its result is a view of its argument (living as long) or an array of
        # the type's workspace
        pre = self._preprocessors[i]
        return self._run_preprocessor(pre, a, mgr, backward,
                                      f"input_preprocessors[{i}] ({type(pre).__name__})")

    def _begin_pass(self, rows: int, fmask: Any) -> tuple | None:
        # what a pass's layers get besides their input: the preprocessors the batch's examples
        # (rows of a time series do not say it), and the features mask with its state
        for pre in self._preprocessors:
            if pre is not None:
                pre.minibatch = rows
        return None if fmask is None else (fmask, MaskState.ACTIVE)

    def _activate(self, i: int, a: NDArray, training: bool, mgr: LayerWorkspaceMgr,
                  masks: tuple | None, state: str | None, shapes: list | None = None) -> tuple:
        # layer i's forward inside its scopes: its preprocessor, the features mask through both
        # (DL4J's feedForwardMaskArray), the layer (from its stored state for rnn_time_step
        # and truncated BPTT: `state` "step" or "tbptt"); returns (output, masks). `shapes`:
        # a list to append the layer's input shape to (its epsilon's)
        layer, pre = self.layers[i], self._preprocessors[i]
        if pre is not None:
            a = self._preprocess(i, a, mgr, False)
            if masks is not None:
                masks = pre.feed_forward_mask(masks[0], masks[1], mgr)
        if shapes is not None:
            shapes.append(a.shape)
        if masks is not None:
            masks = layer.feed_forward_mask(masks[0], masks[1], mgr)
            if masks[0] is None:
                masks = None
        if state is not None and hasattr(layer, "activate_with_state"):
            return layer.activate_with_state(a, training, mgr, state), masks
        return layer.activate(a, training, mgr), masks

    def _clear(self) -> None:
        # what the last pass kept on the layers and preprocessors (DL4J's clear)
        for layer in self.layers:
            layer.clear()
        for pre in self._preprocessors:
            if pre is not None:
                pre.clear()

    # -- inference ------------------------------------------------------------------------------

    def _as_row_or_batch(self, x: Any) -> tuple[NDArray, bool]:
        # output/predict/feed_forward: one example ((n_features,), or one image) is served as a
        # batch of one and answered without the batch axis, as
        # ndws.parallel.ParallelInference.output answers it
        a = self._as_input(x, allow_row=True)
        shape = tuple(a.shape)
        accepts = getattr(self.layers[0], "accepts_input", None)
        # a first layer that reads other shapes than its input type's says what a batch is:
        # an EmbeddingSequenceLayer's (1, time) indices are a batch of one (as an input type
        # of size 1 they would pass for one example), its (time,) one example
        row = (not accepts(shape) if accepts is not None
               else _one_example(shape, self.conf._network_input))
        if row:
            return a.reshape((1,) + shape), True
        return a, False

    def _as_input(self, x: Any, name: str = "x", allow_row: bool = False) -> NDArray:
        # an embedding's indices are checked as given, before the cast to the network's dtype
        a = input_array(x, self.conf.dtype, name,
                        index_reader(self.layers[0], self._preprocessors[0]))
        check_input_shape(tuple(a.shape), self.conf._network_input,
                          f"layers[0] ({type(self.layers[0]).__name__})", "layers[0].n_in", name,
                          allow_row, self.layers[0])
        return a

    def output(self, x: Any, train: bool = False, output_workspace: Any = None, *,
               features_mask: Any = None) -> NDArray:
        """The network's output for `x`, a batch (n_samples, n_features) or one example
        (n_features,), answered (n_samples, n_out) or (n_out,) as
        `ndws.parallel.ParallelInference.output` answers them: a detached array (the last
        layer writes straight into detached memory), or an array in `output_workspace`, an
        open workspace of the caller. Works whether or not the caller has a workspace open;
        the network's own workspaces never leak into the caller's scope. `features_mask`:
        DL4J's, (n_samples, time) for time series of varying length (docs/recurrent.md)."""
        self._check_init()
        # training mode writes running statistics (BatchNormalization): snapshots wait
        with self._exclusive("output", FORWARD, writes=bool(train)):
            a, row = self._as_row_or_batch(x)
            self._check_output_workspace(output_workspace)
            fmask = None
            if features_mask is not None:
                fmask = self._check_features_mask(a, labels_array(features_mask,
                                                                  "features_mask"))
                if fmask.dtype != self.conf.dtype:
                    with scope_out_of_workspaces():
                        fmask = fmask.astype(self.conf.dtype)
            mode = self._inference_mode() if not train else self._train_mode()
            out = self._forward_detached(a, train, mode, output_workspace, fmask=fmask)[-1]
            return out[0] if row else out

    def predict(self, x: Any) -> Any:
        """Each example's class (DL4J's ``predict``): the index of its largest output, as a
        detached (n_samples,) NDArray of int64, or one NumPy int64 for one example
        (n_features,). An output of one column is a binary classifier: class 1 where it is
        above 0.5, as `ndws.evaluation.Evaluation` counts it (DL4J's argmax would always say
        0). A per-pixel output (CnnLossLayer) gives a class per pixel, (n_samples, h, w). A
        row whose output holds NaN has no class: ValueError."""
        self._check_init()
        with self._exclusive("predict"):
            a, row = self._as_row_or_batch(x)
            out = self._forward_detached(a, False, self._inference_mode(), None)[-1]
            nan = np.flatnonzero(np.isnan(np.asarray(out)).any(axis=tuple(range(1, out.ndim))))
            if nan.size:
                raise ValueError(f"predict: the output of row {int(nan[0])} holds NaN (rows "
                                 f"{nan[:5].tolist()}{'...' if nan.size > 5 else ''} of "
                                 f"{out.shape[0]}): no class can be chosen")
            # the class axis: the columns of rows; the channels of per-pixel (or per-step)
            # outputs, which give a class per pixel
            t = self.layers[-1].output_type(self.layers[-1].input_type)
            axis = -1 if t is not None and t.data_format is not None and \
                t.data_format.name in ("NHWC", "NWC") else 1
            with scope_out_of_workspaces():
                if out.shape[axis] == 1:
                    classes = (out.reshape(out.shape[:axis % out.ndim]
                                           + out.shape[axis % out.ndim + 1:]) > 0.5
                               ).astype(np.int64)
                else:
                    classes = out.argmax(axis=axis % out.ndim)
            return classes[0] if row else classes

    def feed_forward(self, x: Any, train: bool = False) -> list[NDArray]:
        """Every layer's activations for `x` (the input first), each detached; for one
        example (n_features,) each is 1-d, as `output` answers it."""
        self._check_init()
        with self._exclusive("feed_forward", FORWARD, writes=bool(train)):
            a, row = self._as_row_or_batch(x)
            outs = [a.detach()] + self._forward_detached(a, train, WorkspaceMode.NONE, None,
                                                         keep_all=True)
            return [o[0] for o in outs] if row else outs

    # -- stateful inference (DL4J's rnnTimeStep) ------------------------------------------------

    def rnn_time_step(self, x: Any, output_workspace: Any = None) -> NDArray:
        """The output for the next steps of the sequences, from the state the recurrent layers
        kept at the end of the last call (DL4J's ``rnnTimeStep``): `x` is one step
        (n_samples, size) or several (n_samples, size, time) (NWC: (n_samples, time, size));
        one step gives (n_samples, n_out) when the last layer is recurrent. The state is kept
        per recurrent layer in detached memory (it survives every workspace reset and
        ``destroy_all_workspaces_for_current_thread``) until `rnn_clear_previous_state`; a
        batch of another size without clearing it is an error. The output is detached, or in
        `output_workspace`, an open workspace of the caller. A Bidirectional layer refuses
        (its backward direction needs the whole sequence)."""
        self._check_init()
        with self._exclusive("rnn_time_step"), self._all_states_or_none():
            if output_workspace is None:
                run = self._one_step_path((x,))
                if run is not None:
                    return run(x)
            a, one_step = self._step_input(x)
            self._check_output_workspace(output_workspace)
            out = self._forward_detached(a, False, self._inference_mode(), output_workspace,
                                         state="step")[-1]
            if one_step and out.ndim == 3:
                axis = self._time_axis(self.layers[-1].output_type(self.layers[-1].input_type))
                if out.shape[axis] == 1:
                    out = out[:, :, 0] if axis == 2 else out[:, 0, :]
            return out

    # DL4J's rnnGetPreviousState(int layer) / rnnSetPreviousState(int layer, state), under the
    # parameter name this network's index takes everywhere (ComputationGraph's take a name)
    def rnn_get_previous_state(self, layer_index: int) -> dict[str, NDArray]:
        """Copies of the state the recurrent layer at `layer_index` carries between
        `rnn_time_step` calls: {"prevAct": (n, n_out)} (and "prevMem", the cell, for an LSTM);
        empty when none."""
        return super().rnn_get_previous_state(layer_index)

    def rnn_set_previous_state(self, layer_index: int, state: dict) -> None:
        """Set the state the recurrent layer at `layer_index` starts the next `rnn_time_step`
        from (arrays of (n, n_out) under the keys `rnn_get_previous_state` gives; copied)."""
        super().rnn_set_previous_state(layer_index, state)

    def _build_step_plan(self, batch: int) -> tuple | None:
        # rnn_time_step's one-step path (Model._one_step_path): the layers' step runners in a
        # chain
        t = self.conf._network_input
        if not steps_one_at_a_time(t) or self._checked_any():
            return None
        steps = []
        for i, (layer, pre) in enumerate(zip(self.layers, self._preprocessors)):
            runner = layer_step_runner(layer, pre, batch, self.conf.dtype)
            if runner is None:
                return None
            steps.append((runner, (i,)))
        n = len(steps)
        program = step_program(batch, self.conf.dtype, 1, steps,
                               [(n, self.layers[-1].output_width())])
        return (t.size,), lambda x: program(x)[0]

    def _checked_any(self) -> bool:
        # user code among the layers: its own activate must run (the general path)
        return any(self._checked)

    def _step_input(self, x: Any) -> tuple[NDArray, bool]:
        # rnn_time_step's input as a time series; a 2-D (n, size) array is one step of each
        t = self.conf._network_input
        if t is None or t.kind != "RNN":
            raise ValueError(f"rnn_time_step: the network's input is not a time series (its "
                             f"input type is {t!r}); use output()")
        a, one_step = self._one_step_series(x, t, self.layers[0], "x")
        return self._as_input(a), one_step

    def _input_readers(self) -> list:
        # (layer, preprocessor) reading each network input: the first layer's
        return [(self.layers[0], self._preprocessors[0])]

    def _state_layers(self) -> dict:
        # what a saved file names each layer's carried state by (the configuration's keys)
        return {str(i): (i, layer) for i, layer in enumerate(self.layers)}

    def _recurrent(self, layer_index: Any, op: str) -> Any:
        self._check_init()
        if (isinstance(layer_index, (bool, np.bool_))
                or not isinstance(layer_index, (int, np.integer))):
            raise TypeError(f"{op}: layer_index must be an int, got {layer_index!r:.40}")
        if not 0 <= layer_index < len(self.layers):
            raise ValueError(f"{op}: layer_index {layer_index} is not a layer index (0 to "
                             f"{len(self.layers) - 1})")
        return self._recurrent_layer(self.layers[layer_index], f"layers[{layer_index}]", op)

    def _forward_detached(self, a: NDArray, training: bool, mode: WorkspaceMode,
                          output_ws: Any, keep_all: bool = False, fmask: Any = None,
                          state: str | None = None) -> list[NDArray]:
        mgr = self._manager(mode, False)
        last = self._manager(mode, False, "last")
        if output_ws is None:
            last.set_scoped_out_for(ArrayType.ACTIVATIONS)
        else:
            last.set_workspace(ArrayType.ACTIVATIONS, output_ws.id, output_ws.config)
        if a.workspace_id is not None:
            mgr.set_no_leverage_override(a.workspace_id)     # never copy the caller's input
        if not keep_all:
            self._presize(a.shape[0], self._plan_length(a))
        outs: list[NDArray] = []
        n = len(self.layers)
        rows, dt = a.shape[0], self.conf.dtype
        held: list[Any] = []          # SEPARATE: the ping-pong scopes still open
        busy, around = self._busy, self._busy.inside
        with scope_out_of_workspaces():
            whole = (mgr.notify_scope_entered(ArrayType.ACTIVATIONS)
                     if mode is WorkspaceMode.SINGLE else contextlib.nullcontext())
            busy.inside = _IN_FORWARD
            masks = self._begin_pass(rows, fmask)
            try:
                with whole:
                    for i, layer in enumerate(self.layers):
                        m = last if i == n - 1 else mgr
                        if mode is WorkspaceMode.SEPARATE and i < n - 1:
                            # layer i's activations live in ACT_(i % 2) until layer i + 1 has
                            # read them (DL4J's WS_LAYER_ACT_1 / _2)
                            name = activation_workspace(i)
                            m._map(ArrayType.ACTIVATIONS, name, self._configs[name])
                            held.append(m.notify_scope_entered(ArrayType.ACTIVATIONS))
                        with self._scope(m, mode, ArrayType.FF_WORKING_MEM):
                            a, masks = self._activate(i, a, training, m, masks, state)
                        if self._checked[i]:
                            _checks.returned(layer, "activate", a, (rows,) + self._out_shapes[i],
                                             dt)
                        self._check_location(layer, ArrayType.ACTIVATIONS, a, m, "activate")
                        if len(held) > 1 or (held and i == n - 1):
                            held.pop(0).close()          # layer i's input has been read
                        if keep_all:
                            outs.append(a.detach() if i < n - 1 else a)
            finally:
                busy.inside = around
                while held:
                    held.pop().close()
                self._clear()
            if not keep_all:
                outs.append(a)
        return outs

    # -- training -------------------------------------------------------------------------------

    def fit(self, data: Any, labels: Any = None, *, batch_size: int | None = None,
            epochs: int = 1, progress: bool | None = None, shuffle: bool = False,
            seed: int | None = None, validation_data: Any = None) -> History:
        """Train on `data` for `epochs` epochs; returns the `History` (docs/networks.md,
        "Training options").

        Parameters
        ----------
        data : DataSet, iterable of DataSets, or (n_samples, n_features) array
            A DataSet, a DataSetIterator, a list or a generator of DataSets, or features.
        labels : (n_samples,) or (n_samples, n_outputs) array, optional
            With features: class indices or one-hot rows for a softmax output, targets for
            a regression output.
        batch_size : int, optional
            With features and labels: rows per batch (default: all of them).
        epochs : int
            Passes over the data.
        progress : bool, optional
            One progress bar over the whole fit, the epoch in its text (default: on a
            terminal or in a notebook).
        shuffle : bool
            With features and labels arrays: visit the rows in a new order each epoch, drawn
            from `seed` (default: the configuration's) and the network's epoch counter, so a
            run repeats exactly, and a resumed one (save, load, fit) goes on with the orders
            the uninterrupted run would have used.
        validation_data : (features, labels), DataSet, or iterable of DataSets, optional
            Held-out data scored after every epoch: ``History.validation_scores`` (and
            ``validation_accuracy`` for a classifier), shown on the bar. An iterable is read
            once per epoch, so it must be re-iterable (a list, a DataSetIterator), not a
            generator.
        """
        self._check_init()
        epochs = fit_options(epochs, progress, shuffle)
        _refuse_no_examples("fit", data, labels)     # before an epoch starts or a hook fires
        if labels is not None:
            if batch_size is not None:
                batch_size = _count("batch_size", batch_size)
            # once for the whole fit, not per epoch: the arrays as the network's dtype
            data, labels = self._fit_arrays(data, labels)
        elif batch_size is not None:
            raise ValueError("batch_size: only with features and labels arrays (a DataSet or an "
                             "iterator brings its own batches)")
        elif shuffle:
            raise ValueError("shuffle: only with features and labels arrays (a DataSet or an "
                             "iterator brings its own order, e.g. ArrayDataSetIterator(..., "
                             "shuffle=True, seed=...))")
        if seed is not None:
            if not shuffle:
                raise ValueError("seed: only with shuffle=True (it seeds the order of the rows)")
            seed = check_seed(seed)
        validate = None if validation_data is None else Validation(self, validation_data)
        return self._fit_loop(data, labels, batch_size, epochs, progress, shuffle, seed,
                              validate)

    def _prefetch(self, data: Any, labels: Any) -> Any:
        # DL4J's fit: an iterator with loading to hide is prefetched on a producer thread
        # (queue 2); the time fit waits for a batch is the ETL time (docs/data.md, "Prefetch
        # in fit")
        return _prefetch_for_fit(data, labels, queue_size=2)

    def _epoch_data(self, data: Any, labels: Any, batch_size: Any, shuffle: bool,
                    seed: int | None) -> tuple:
        if shuffle:
            data, labels = shuffled(data, labels, self.conf.seed if seed is None else seed,
                                    self._epoch)
        return data, labels, batch_size

    def _fit_arrays(self, data: Any, labels: Any) -> tuple[NDArray, NDArray]:
        _refuse_labels_for_batches(data)
        x = self._as_input(data)
        y = labels_array(labels, "labels")
        if y.ndim == 0 or y.shape[0] != x.shape[0]:
            raise ValueError(f"labels: {y.shape[0] if y.ndim else 'no'} rows for "
                             f"{x.shape[0]} examples")
        return x, y

    def _batches(self, data: Any, labels: Any, batch_size: Any) -> Iterable[DataSet]:
        if labels is not None:
            _refuse_labels_for_batches(data)
            x = self._as_input(data)
            y = labels if isinstance(labels, NDArray) else ndws.from_numpy(
                np.ascontiguousarray(labels))
            n = x.shape[0]
            if y.shape[0] != n:
                raise ValueError(f"labels: {y.shape[0]} rows for {n} examples")
            if n == 0:
                raise ValueError("fit: no examples (data has 0 rows)")
            if batch_size is None:
                batch_size = n
            batch_size = _count("batch_size", batch_size)
            for s in range(0, n, batch_size):
                yield DataSet(x[s:s + batch_size], y[s:s + batch_size])
            return
        if batch_size is not None:
            raise ValueError("batch_size: only with features and labels arrays (a DataSet or an "
                             "iterator brings its own batches)")
        if isinstance(data, DataSet):
            yield data
            return
        if not hasattr(data, "__iter__"):
            raise TypeError(f"data: expected a DataSet, an iterable of DataSets or arrays, got "
                            f"{type(data).__name__}")
        for i, ds in enumerate(data):
            if not isinstance(ds, DataSet):
                raise TypeError(f"data: item {i} is a {type(ds).__name__}, not a DataSet")
            yield ds

    def _output_layer(self) -> Layer:
        layer = self.layers[-1]
        if not hasattr(layer, "compute_score_and_gradient"):
            raise ValueError(f"fit: the last layer ({type(layer).__name__}) is not an output "
                             f"layer (OutputLayer or LossLayer)")
        return layer

    def _fit_tbptt(self, ds: DataSet, on_iteration: Any) -> None:
        # DL4J's doTruncatedBPTT: segments of tbptt_fwd_length steps of the features, labels
        # and masks (views), one update each, the recurrent layers' state carried from one
        # segment to the next (detached) and cleared before and after the batch. ndws'
        # segment backpropagates from the state carried into it through its last
        # tbptt_back_length steps (docs/porting-from-dl4j.md)
        x, labels = ds.features, ds.labels
        if x is None or labels is None:
            raise ValueError("the DataSet has no labels")
        # an EmbeddingSequenceLayer's (n, time) indices are a time series too
        x_axis = index_time_axis(self.layers[0], x)
        if (x_axis is None and x.ndim != 3) or labels.ndim != 3:
            raise ValueError(f"fit: truncated BPTT needs time series features and labels "
                             f"(rank 3), got features of shape {tuple(x.shape)} and labels of "
                             f"shape {tuple(labels.shape)} (DL4J: \"Cannot do truncated BPTT "
                             f"with non-3d inputs or labels\")")
        if x_axis is None:
            x_axis = self._time_axis(self.conf._network_input)
        y_axis = self._time_axis(self.layers[-1].output_type(self.layers[-1].input_type))
        steps = x.shape[x_axis]
        if labels.shape[y_axis] != steps:
            raise ValueError(f"fit: features and labels have different lengths ({steps} and "
                             f"{labels.shape[y_axis]} time steps): truncated BPTT cuts both "
                             f"into the same segments (DL4J: \"Input and label time series "
                             f"have different lengths\")")
        if steps == 0:
            raise ValueError("fit: a time series of 0 steps has nothing to train on")
        # the whole batch checked as a standard iteration checks it (the features against the
        # network and an embedding's indices, both masks), before the first segment updates
        # anything and with every place named in the batch, not in a segment; the segments
        # are checked again as they run (cheap: the same checks)
        self._batch_arrays(ds)
        out = self.layers[-1]
        _segment_labels("labels", labels, out, f"layers[{out.index}] ({type(out).__name__})")
        _segment_mask("labels_mask", ds.labels_mask, labels, y_axis)
        length = self.conf.tbptt_fwd_length
        # a segment that fails after all (a listener, labels its output layer refuses) leaves
        # rnn_time_step's state as it found it, though the batch clears it when it is done
        with self._all_states_or_none():
            self._clear_rnn_state()
            try:
                for start in range(0, steps, length):
                    end = min(start + length, steps)
                    seg = DataSet(_steps(x, x_axis, start, end),
                                  _steps(labels, y_axis, start, end),
                                  _mask_steps(ds.features_mask, start, end),
                                  _mask_steps(ds.labels_mask, start, end, y_axis))
                    self._fit_step(seg, "tbptt")
                    if on_iteration is not None:
                        on_iteration()
            finally:
                self._clear_rnn_state()

    def compute_gradient_and_score(self, ds: DataSet) -> float:
        """Forward and backward on `ds` without updating (DL4J's
        ``computeGradientAndScore``): the gradients are left in `gradient()`; returns the score
        (loss plus regularisation). Dropout is on, as in training."""
        self._check_init()
        if not isinstance(ds, DataSet):
            raise TypeError(f"ds: expected a DataSet, got {type(ds).__name__}")
        _refuse_no_examples("compute_gradient_and_score", ds)
        with self._exclusive("compute_gradient_and_score", TRAIN, writes=True):
            self._score = self._gradient_and_score(ds, self._train_mode())
            return self._score

    def _compiled(self, ds: DataSet) -> DensePlan | None:
        # The compiled iteration (ndws.nn._iteration) when it does exactly what the general path
        # of _gradient_and_score would: a network of built-in dense layers (_dense_plan), no
        # mask, and workspaces in their normal mode (the debug modes change how the manager
        # finds them).
        plan = self._dense_plan
        if (plan is None or ds.labels_mask is not None or ds.features_mask is not None
                or _core._get_debug_mode() != 0):
            return None
        return plan

    def _gradient_and_score(self, ds: DataSet, mode: WorkspaceMode,
                            state: str | None = None) -> float:
        # Forward and backward on ds: the gradients in the flat buffer, the score returned.
        # The two paths share what surrounds the pass: the forward pass's listeners (called
        # back from inside either), the backward pass's (here, after every workspace of the
        # pass is closed), so neither can miss a hook the other calls.
        out_layer = self._output_layer()
        x, labels, mask, fmask = self._batch_arrays(ds)
        if x.shape[0] == 0:
            # e.g. an iterator's empty batch mid-epoch: refused before anything moves (a loss
            # averaged over no example has no value, and an updater would still step)
            raise ValueError(f"fit: no examples in the batch of iteration {self._iteration} "
                             f"(0 rows)")
        mgr = self._manager(mode, True)
        if x.workspace_id is not None:
            mgr.set_no_leverage_override(x.workspace_id)
        self._presize(x.shape[0], self._plan_length(x))
        plan = self._compiled(ds) if state is None else None

        def run() -> float:
            if plan is not None:
                forward = ((lambda acts: self._notify_forward(acts, mode))
                           if self._listeners and self._forward_listeners() else None)
                # + 0.0: the general path's regularization sum (no l1/l2 here)
                return plan.run(_PLAN_MODES[mode], x, labels, self._after_layer_gradients,
                                forward) + 0.0
            return self._general_pass(x, labels, mask, out_layer, mgr, mode, fmask, state)
        return self._training_pass(run)

    def _general_pass(self, x: NDArray, labels: NDArray, mask: Any, out_layer: Layer,
                      mgr: LayerWorkspaceMgr, mode: WorkspaceMode, fmask: Any = None,
                      state: str | None = None) -> float:
        # the general path of _gradient_and_score: any layers, any workspace mode
        n = len(self.layers)
        open_eps: list[Any] = []      # SEPARATE: the epsilon scopes still open
        with scope_out_of_workspaces():
            outer = (mgr.notify_scope_entered(ArrayType.ACTIVATIONS)
                     if mode is not WorkspaceMode.NONE else contextlib.nullcontext())
            try:
                with outer:
                    a = x
                    acts = [x] if self._listeners else None
                    rows, dt = x.shape[0], self.conf.dtype
                    shapes = []                # each layer's input shape: its epsilon's
                    masks = self._begin_pass(rows, fmask)
                    for i, layer in enumerate(self.layers):
                        with self._scope(mgr, mode, ArrayType.FF_WORKING_MEM):
                            a, masks = self._activate(i, a, True, mgr, masks, state, shapes)
                        if self._checked[i]:
                            _checks.returned(layer, "activate", a,
                                             (rows,) + self._out_shapes[i], dt)
                        self._check_location(layer, ArrayType.ACTIVATIONS, a, mgr, "activate")
                        if acts is not None:
                            acts.append(a)
                    if acts is not None:
                        self._notify_forward(acts, mode)
                    # backward; in SEPARATE mode the epsilons ping-pong between two workspaces,
                    # each closed once the layer below has read it
                    eps = None
                    stop = self._backward_stop
                    for i in range(n - 1, stop - 1, -1):
                        layer = self.layers[i]
                        if mode is WorkspaceMode.SEPARATE:
                            name = epsilon_workspace(i)
                            mgr._map(ArrayType.ACTIVATION_GRAD, name, self._configs[name])
                            open_eps.append(mgr.notify_scope_entered(ArrayType.ACTIVATION_GRAD))
                        with self._scope(mgr, mode, ArrayType.BP_WORKING_MEM):
                            if i == n - 1:
                                op = "compute_score_and_gradient"
                                score, grads, eps = _checks.output_result(
                                    layer, layer.compute_score_and_gradient(labels, mgr, mask))
                            else:
                                op = "backprop_gradient"
                                grads, eps = _checks.backprop_result(
                                    layer, layer.backprop_gradient(eps, mgr))
                            _checks.gradients(layer, grads, self._checked[i])
                            if i > stop:
                                if self._checked[i]:
                                    _checks.returned(layer, op, eps, shapes[i], dt)
                                self._check_location(layer, ArrayType.ACTIVATION_GRAD, eps,
                                                     mgr, op)
                                if self._preprocessors[i] is not None:
                                    eps = self._preprocess(i, eps, mgr, True)
                        # layer i's gradients are final here (the compiled iteration calls the
                        # hook at the same point)
                        if self._after_layer_gradients is not None:
                            self._after_layer_gradients(i)
                        if len(open_eps) > 1:
                            open_eps.pop(0).close()
                    while open_eps:
                        open_eps.pop().close()
                    if self._after_layer_gradients is not None:
                        for i in range(stop - 1, -1, -1):
                            # no backward pass below `stop`: those gradients are final as
                            # they are (zero: nothing trains there)
                            self._after_layer_gradients(i)
                    # in the iteration's scope, so its temporaries are the iteration's
                    reg = self._regularization()
            finally:
                while open_eps:
                    open_eps.pop().close()
                self._clear()
        return score + reg

    def summary(self, batch_size: int | None = None) -> str:
        """A table of the layers: index, type, n_in, n_out, parameters, activation (and loss);
        with `batch_size`, also the bytes each layer's arrays take in training and in inference
        (from `memory_report`; the modes place the same arrays in different workspaces)."""
        self._check_init()
        report = None if batch_size is None else MemoryReport(self, batch_size)
        # images or time series anywhere: a column with each layer's output shape
        types = [layer.output_type(layer.input_type) for layer in self.layers]
        shapes = any(t is not None and t.kind != "FF" for t in types) or any(self._preprocessors)
        rows = [("#", "layer", "n_in", "n_out")
                + (("output",) if shapes else ()) + ("params", "activation")
                + (() if report is None else (f"train B ({batch_size})",
                                              f"infer B ({batch_size})"))]
        for layer, t in zip(self.layers, types):
            n = sum(int(np.prod(s)) for s in layer.param_shapes().values())
            name = type(layer).__name__
            if isinstance(layer, FrozenLayer):
                # what is frozen, and its activation
                name = f"{name}({type(layer.layer).__name__})"
                act_of = layer.layer.activation
            else:
                act_of = layer.activation
            act = act_of.value if act_of is not None else "-"
            loss = getattr(layer, "loss_function", None)
            row = ((str(layer.index), name, str(layer.n_in or "-"),
                    str(layer.output_width() or "-"))
                   + (("x".join("T" if d == -1 else str(d) for d in t.shape())
                       if t is not None else "-",) if shapes
                      else ())
                   + (f"{n:,}", act + (f" / {loss.name}" if loss is not None else "")))
            if report is not None:
                use = report.layers[layer.index]
                row += tuple("?" if use[k] is None else f"{sum(use[k].values()):,}"
                             for k in ("training", "inference"))
            rows.append(row)
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        left = (1, len(rows[0]) - (3 if report is not None else 1))    # the layer, activation
        lines = ["  ".join(c.ljust(w) if i in left else c.rjust(w)
                           for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
        lines.insert(1, "-" * len(lines[0]))
        lines.append(f"total parameters: {self.num_params():,}; dtype {self.conf.dtype.name}; "
                     f"workspace modes: training {self.conf.training_workspace_mode.name}, "
                     f"inference {self.conf.inference_workspace_mode.name}")
        return "\n".join(lines)

    # -- evaluation -----------------------------------------------------------------------------

    def do_evaluation(self, data: Any, *evaluations: Any, labels: Any = None,
                      batch_size: int | None = None, progress: bool | None = None) -> Any:
        """Evaluate the network's output over `data` with each evaluation (DL4J's
        ``doEvaluation``); returns the evaluation when given one, else the tuple (the same
        objects).

        `data` is what `fit` takes: a DataSet, an iterator or iterable of DataSets (or of
        ``(features, labels)`` pairs), or a features array with its labels, given after it
        (``do_evaluation(X, y, Evaluation())``) or as ``labels=``, cut into batches of
        `batch_size` (default: one batch). Labels are one-hot rows or class indices.

        Each batch is taken from `data` while none of the network's workspaces is open (so an
        iterator's arrays are never born in a cycle that ends under them); then one cycle of
        the output workspace (WS_OUTPUT_MEM) holds the batch's output while the evaluations
        count it, and ends before the next batch is taken: after the first batch nothing is
        allocated per batch. An evaluation other than ndws' own gets predictions valid during
        its ``eval`` call only."""
        self._check_init()
        if progress is not None and not isinstance(progress, bool):
            raise TypeError(f"progress: expected True, False or None, got {progress!r:.40}")
        if (labels is None and evaluations and _is_features(data)
                and not callable(getattr(evaluations[0], "eval", None))):
            labels, evaluations = evaluations[0], evaluations[1:]     # do_evaluation(X, y, ev)
        with self._exclusive("do_evaluation"):
            return self._evaluate_batches(data, evaluations, labels, batch_size, progress)

    def _evaluate_batches(self, data: Any, evaluations: tuple, labels: Any,
                          batch_size: Any, progress: bool | None) -> Any:
        check_evaluations(evaluations)
        source = self._evaluation_batches(data, labels, batch_size)
        mode = self._inference_mode()
        ws = None
        if mode is not WorkspaceMode.NONE:
            ws = get_workspace_manager().get_workspace_for_current_thread(
                self._configs[WS_ALL_LAYERS_ACT], WS_OUTPUT_MEM)
        bar = _Progress(progress, _length(data, labels, batch_size), "evaluating")
        # a channels-last output of a class per pixel (or step) is counted channels-first, as
        # the evaluations read rank-4 (rank-3) arrays: views of the output and labels
        t = self.layers[-1].output_type(self.layers[-1].input_type)
        last = (t is not None and t.data_format is not None
                and t.data_format.name in ("NHWC", "NWC"))
        try:
            # each batch is taken with no cycle of the network open: an iterator makes its
            # arrays in the caller's workspace (or detached), never in WS_OUTPUT_MEM's cycle
            for features, batch_labels, mask, fmask in source:
                a = self._as_input(features, "features")
                if fmask is not None:
                    fmask = self._check_features_mask(a, fmask)
                bar.update(float("nan"))
                with ws if ws is not None else contextlib.nullcontext():
                    try:
                        with scope_out_of_workspaces():
                            out = self._forward_detached(a, False, mode, ws, fmask=fmask)[-1]
                            if last:
                                out, batch_labels, mask = (
                                    _channels_first(v, out.ndim) for v in (out, batch_labels,
                                                                            mask))
                            count(evaluations, batch_labels, out, mask)
                    except BaseException as exc:
                        # an evaluation that refused the batch left NumPy views of the output
                        # in its frames: free them before the cycle ends (the traceback keeps
                        # its lines), or the workspace would leave its block to them
                        traceback.clear_frames(exc.__traceback__)
                        raise
                    finally:
                        out = None     # the batch's output goes with its cycle
                features = batch_labels = mask = fmask = a = None
        finally:
            bar.close()
        return evaluations[0] if len(evaluations) == 1 else evaluations

    def _evaluation_batches(self, data: Any, labels: Any, batch_size: Any
                            ) -> Iterable[tuple[Any, Any, Any]]:
        # (features, labels, mask) of each batch of what do_evaluation accepts
        if labels is None:
            if batch_size is not None:
                raise ValueError("batch_size: only with features and labels arrays (a DataSet "
                                 "or an iterator brings its own batches)")
            if _is_features(data):
                raise TypeError("labels: features arrays need their labels (e.g. "
                                "evaluate(X, y) or do_evaluation(X, y, Evaluation()))")
            if isinstance(data, DataSet):
                return batches([data], features_mask=True)
            if not hasattr(data, "__iter__"):
                raise TypeError(f"data: expected a DataSet, an iterable of DataSets or "
                                f"(features, labels) pairs, or features and labels arrays, "
                                f"got {type(data).__name__}")
            return batches(data, features_mask=True)
        _refuse_labels_for_batches(data)
        x = self._as_input(data)
        y = labels if isinstance(labels, NDArray) else np.asarray(labels)
        n = x.shape[0]
        if y.ndim == 0 or y.shape[0] != n:
            raise ValueError(f"labels: {y.shape[0] if y.ndim else 'no'} rows for {n} examples")
        if batch_size is None:
            batch_size = max(n, 1)
        if (isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer))
                or batch_size < 1):
            raise ValueError(f"batch_size: expected an int >= 1, got {batch_size!r:.40}")
        return ((x[s:s + batch_size], y[s:s + batch_size], None, None)
                for s in range(0, n, int(batch_size)))

    def evaluate(self, data: Any, labels: Any = None, *, batch_size: int | None = None,
                 progress: bool | None = None) -> Any:
        """An `ndws.evaluation.Evaluation` of the network over `data` (what `do_evaluation`
        takes: ``evaluate(X, y)``, a DataSet, an iterator, a list)."""
        from ndws.evaluation import Evaluation
        return self.do_evaluation(data, Evaluation(), labels=labels, batch_size=batch_size,
                                  progress=progress)

    def evaluate_roc_multi_class(self, data: Any, labels: Any = None, *,
                                 threshold_steps: int = 0, batch_size: int | None = None,
                                 progress: bool | None = None) -> Any:
        """An `ndws.evaluation.ROCMultiClass` of the network over `data` (as `evaluate`);
        DL4J's ``evaluateROCMultiClass(iterator, steps)`` form, an int after the data, is
        `threshold_steps`."""
        from ndws.evaluation import ROCMultiClass
        if (isinstance(labels, (int, np.integer)) and not isinstance(labels, bool)
                and not _is_features(data)):
            labels, threshold_steps = None, labels
        return self.do_evaluation(data, ROCMultiClass(threshold_steps), labels=labels,
                                  batch_size=batch_size, progress=progress)

    def evaluate_regression(self, data: Any, labels: Any = None, *,
                            batch_size: int | None = None, progress: bool | None = None) -> Any:
        """An `ndws.evaluation.RegressionEvaluation` of the network over `data` (as
        `evaluate`)."""
        from ndws.evaluation import RegressionEvaluation
        return self.do_evaluation(data, RegressionEvaluation(), labels=labels,
                                  batch_size=batch_size, progress=progress)

    # -- misc -----------------------------------------------------------------------------------

    def to_computation_graph(self) -> Any:
        """This network as an `ndws.nn.ComputationGraph` (DL4J's ``toComputationGraph``): input
        ``"in"``, the layers as vertices ``"0"``, ``"1"``, ... in a chain with the same
        preprocessors, the same parameter vector, updater state, counters and dropout state, so
        both train on to the same bits."""
        from ndws.nn.graph import ComputationGraph, ComputationGraphConfiguration
        self._check_init()
        conf = self.conf
        b = ComputationGraphConfiguration.builder(**{k: getattr(conf, k) for k in SETTINGS})
        b.backprop_type(conf.backprop_type).tbptt_fwd_length(conf.tbptt_fwd_length)
        b.tbptt_back_length(conf.tbptt_back_length)
        b.add_inputs("in")
        for i, layer in enumerate(conf.layers):
            b.add_layer(str(i), layer, "in" if i == 0 else str(i - 1),
                        preprocessor=conf.input_preprocessors.get(i))
        b.set_outputs(str(len(conf.layers) - 1))
        if conf._network_input is not None:
            b.set_input_types(conf._network_input)
        graph = ComputationGraph(b.build())
        with self._exclusive("to_computation_graph", STATE):
            graph.init(self._params)
            graph._copy_state_from(self)
            graph._dropout_rng.bit_generator.state = self._dropout_rng.bit_generator.state
        return graph

    def __repr__(self) -> str:
        state = f"{self.num_params()} params" if self._params is not None else "not initialised"
        return f"<MultiLayerNetwork {len(self.conf.layers)} layers, {state}>"


def _dense_plan(layers: list, configs: dict) -> DensePlan | None:
    # The compiled iteration of these layers, when they are what it covers: DenseLayers under
    # an OutputLayer with softmax and MCXENT / NEGATIVELOGLIKELIHOOD, none with dropout, l1 or
    # l2. Exact classes: a subclass may change activate or backprop_gradient.
    if not layers:
        return None
    out = layers[-1]
    if (type(out) is not OutputLayer or out.activation is not Activation.SOFTMAX
            or out.loss_function not in (LossFunction.MCXENT, LossFunction.NEGATIVELOGLIKELIHOOD)):
        return None
    acts, keeps = [], []
    for layer in layers:
        if ((type(layer) is not DenseLayer and layer is not out)
                or (layer.dropout is not None and layer.dropout < 1.0) or layer.l1 or layer.l2):
            return None
        act = layer.activation or Activation.IDENTITY
        acts.append(act.value)
        # what DenseLayer.activate / OutputLayer.activate keep for the derivative
        keeps.append(layer is out or act not in _FROM_OUTPUT)
    return DensePlan(layers, acts, keeps, configs)


def check_features_mask(x: NDArray, fmask: NDArray, t: Any, name: str) -> NDArray:
    """DL4J's features mask `fmask` (named `name`) of input `x` of type `t`: (n, time) for a
    time series, (n,) or (n, 1) per example for rows (returned as (n,)); anything else named
    with the shape it should have, non-numbers and NaN or inf refused (both network types)."""
    n = x.shape[0]
    if x.ndim == 3:
        steps = x.shape[2] if t is None or t.data_format is None or \
            t.data_format.name == "NCW" else x.shape[1]
        expected = (n, steps)
    elif x.ndim == 2 and t is not None and t.kind == "RNN":
        expected = tuple(x.shape)             # EmbeddingSequenceLayer's (n, time)
    else:
        expected = (n,)
        if fmask.ndim == 2 and fmask.shape == (n, 1):
            fmask = fmask.reshape(n)
    if tuple(fmask.shape) != expected:
        raise ValueError(f"{name}: expected shape {expected} "
                         f"({'(n_samples, time)' if len(expected) == 2 else 'one per example'}"
                         f") for features of shape {tuple(x.shape)}, got "
                         f"{tuple(fmask.shape)}")
    _finite_mask(name, fmask)
    return fmask


def _backward_stop(layers: list) -> int:
    # The lowest layer the backward pass must reach: the lowest with a parameter the updater
    # trains (the output layer when none has: the score and its gradient come from it). A
    # FrozenLayer above it would hand it no epsilon: refused, naming both.
    n = len(layers)
    stop = next((i for i, layer in enumerate(layers)
                 if any(layer.trainable(name) for name in layer.param_shapes())), n - 1)
    for i in range(stop + 1, n):
        layer = layers[i]
        if isinstance(layer, FrozenLayer) and not layer._with_backprop:
            raise ValueError(f"layers[{i}] (FrozenLayer) passes no gradient down, but "
                             f"layers[{stop}] ({type(layers[stop]).__name__}) below it trains: "
                             f"wrap layers[{i}] in FrozenLayerWithBackprop, or freeze the "
                             f"layers below it too")
    return min(stop, n - 1)


def _finite_mask(name: str, mask: NDArray) -> None:
    # a mask weighs values (0 masks, 1 keeps): real numbers only (a complex one would lose
    # its imaginary part in the cast to the network's dtype); NaN or inf would make every
    # score and gradient it touches NaN, and a negative weight would turn the score's sign,
    # both far from the batch that brought them
    m = np.asarray(mask)
    if m.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected numbers (0 masks, 1 keeps), got dtype {m.dtype}")
    bad = ~np.isfinite(m) if m.dtype.kind == "f" else None
    if bad is None or not bad.any():
        bad = m < 0
    if bad.any():
        at = np.argwhere(bad)[0]
        raise ValueError(f"{name}: holds {m[tuple(at)]} at {tuple(int(i) for i in at)}: a "
                         f"mask must be finite and not negative (0 masks, 1 keeps)")


def _steps(a: NDArray, axis: int, start: int, end: int) -> NDArray:
    # steps [start, end) of a time series along `axis` (a view)
    return a[:, :, start:end] if axis == 2 else a[:, start:end]


def _mask_steps(mask: Any, start: int, end: int, axis: int = 2) -> Any:
    # steps [start, end) of a (n, time) mask, or of a per-output mask (the labels' shape:
    # time along the labels' `axis`, 1 for NWC); a per-example mask as it is
    if mask is None or mask.ndim == 1:
        return mask
    if mask.ndim == 2:
        return mask[:, start:end] if mask.shape[1] != 1 else mask
    return _steps(mask, axis, start, end)


def _segment_labels(name: str, labels: Any, layer: Layer, where: str) -> None:
    # truncated BPTT's labels `labels` (argument `name`) of output layer `layer` (named
    # `where`), checked whole against the time series it declares: the layer checks each
    # segment's, and would name the segment's shape, not the batch's
    shape = _declared_shape(layer)
    if len(shape) != 2 or labels.ndim != 3:
        return
    expected = (labels.shape[0],) + tuple(g if d is None else d
                                          for d, g in zip(shape, labels.shape[1:]))
    if tuple(labels.shape) != expected:
        raise ValueError(f"{name}: expected shape {expected} for the output of {where}, got "
                         f"{tuple(labels.shape)}")


def _segment_mask(name: str, mask: Any, series: Any, axis: int) -> None:
    # truncated BPTT's mask `mask` (argument `name`) of time series `series` (time along
    # `axis`), checked whole before it is cut: one a step longer or shorter would otherwise
    # be cut short or left over at the last segment (or hold out until then). Per step
    # (n, time), per example (n,) or (n, 1), or per output (the series' shape)
    if mask is None:
        return
    n, steps, shape = series.shape[0], series.shape[axis], tuple(mask.shape)
    if shape not in ((n, steps), (n,), (n, 1), tuple(series.shape)):
        raise ValueError(f"{name}: expected (n_samples, time) = {(n, steps)} per step, "
                         f"({n},) or ({n}, 1) per example, or the labels' shape "
                         f"{tuple(series.shape)} per output; got {shape}")


def _channels_first(a: Any, ndim: int) -> Any:
    # a channels-last array of rank `ndim` as channels-first (a view); others as they are
    if a is None or a.ndim != ndim:
        return a
    return a.transpose((0, ndim - 1) + tuple(range(1, ndim - 1)))


def _declared_shape(layer: Layer) -> tuple:
    # what a layer's activate must return per example: its output type's shape (None where
    # any size goes: a time series of varying length, a width not declared)
    t = layer.output_type(layer.input_type)
    if t is None:
        return (layer.output_width(),)
    return tuple(None if d == -1 else d for d in t.shape())


def _refuse_no_examples(op: str, data: Any, labels: Any = None) -> None:
    # ValueError for features arrays or a DataSet of zero rows (an iterator's batches are
    # checked as they come)
    if isinstance(data, DataSet):
        if data.features.shape[0] == 0:
            raise ValueError(f"{op}: no examples (the DataSet has 0 rows)")
    elif labels is not None:
        try:
            shape = data.shape if isinstance(data, NDArray) else np.shape(data)
        except (TypeError, ValueError):
            return                       # not an array: the conversion says why, later
        if len(shape) and shape[0] == 0:
            raise ValueError(f"{op}: no examples (data has 0 rows)")


def _refuse_labels_for_batches(data: Any) -> None:
    # labels go with features arrays; a DataSet or an iterator brings its own
    if isinstance(data, DataSet) or (hasattr(data, "__iter__")
                                     and not isinstance(data, (list, tuple, NDArray, np.ndarray))):
        raise ValueError(f"labels: only with features arrays (the {type(data).__name__} "
                         f"brings its own labels)")


def _is_features(data: Any) -> bool:
    # a features array (what fit cuts into batches with its labels), not a source of batches
    return isinstance(data, (NDArray, np.ndarray))
