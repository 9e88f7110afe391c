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
import math
import threading
import time
import traceback
from typing import Any, Iterable

import numpy as np

import ndws
from ndws import _core
from ndws._core import NDArray
from ndws.data.async_iterators import AsyncDataSetIterator
from ndws.data.dataset import DataSet
from ndws.nn.conf import MultiLayerConfiguration
from ndws.evaluation._evaluate import batches, check_evaluations, count
from ndws.nn import _checks
from ndws.nn._fit_options import Validation, check_seed, labels_array, shuffled
from ndws.nn.history import History, _Epoch, _Progress
from ndws.nn._busy import FORWARD, FREE, STATE, TRAIN, WRITE, Busy, Exclusive
from ndws.nn.layers.base import (_FROM_OUTPUT, Activation, DenseLayer, Layer, LossFunction,
                            OutputLayer)
from ndws.nn.layers.embedding import EmbeddingSequenceLayer
from ndws.nn.listeners import TrainingListener
from ndws.nn._layout import (WS_ALL_LAYERS_ACT, WS_INFERENCE, WS_LAYER_ACT, WS_LAYER_WORKING_MEM,
                             WS_LISTENER, WS_OUTPUT_MEM, WS_RNN_LOOP_WORKING_MEM, WS_SINGLE,
                             activation_workspace, epsilon_workspace, workspace_configs)
from ndws.nn.conf import BackpropType
from ndws.nn.inputs import InputType
from ndws.nn.preprocessors import (FeedForwardToRnnPreProcessor, MaskState,
                                   RnnToFeedForwardPreProcessor)
from ndws.nn._iteration import MODE_NONE, MODE_SEPARATE, MODE_SINGLE, DensePlan
from ndws.nn.memory_report import (MemoryReport, layer_uses as _layer_uses, merge as _merge,
                                   plan as _plan)
from ndws.nn.serialization import load_network, save_network
from ndws.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr
from ndws.workspace import WorkspaceMode, get_workspace_manager, scope_out_of_workspaces

__all__ = ["MultiLayerNetwork"]

_memory_manager = ndws.get_memory_manager()

# what a nested call is refused inside of (ndws.nn._busy)
_IN_FORWARD = "a forward pass"
_IN_TRAINING = "the forward and backward pass of a training iteration"

# the training layouts of the compiled iteration (ENABLED is resolved to SEPARATE before)
_PLAN_MODES = {WorkspaceMode.NONE: MODE_NONE, WorkspaceMode.SINGLE: MODE_SINGLE,
               WorkspaceMode.SEPARATE: MODE_SEPARATE}

class MultiLayerNetwork:
    """A feed-forward network of `conf`'s layers.

    Parameters
    ----------
    conf : MultiLayerConfiguration

    Call `init` before using it. One network serves one thread at a time: a second thread that
    calls `fit` / `output` while the first is inside gets a ``RuntimeError``; `clone()` and
    `ndws.parallel.ParallelInference` copy it from any thread at an iteration boundary. What a
    listener may call back is in docs/networks.md, "Threads, listeners and snapshots".
    """

    def __init__(self, conf: MultiLayerConfiguration):
        if not isinstance(conf, MultiLayerConfiguration):
            raise TypeError(f"conf: expected an ndws.nn.MultiLayerConfiguration, got "
                            f"{type(conf).__name__}")
        self.conf = conf
        self.layers: list[Layer] = []
        self._iteration = 0
        self._epoch = 0
        self._score = float("nan")
        self._busy = Busy()
        self._params: NDArray | None = None
        self._listeners: list[TrainingListener] = []
        # ndws.parallel's workers train in the wrapper's workspace mode (DL4J's
        # ParallelWrapper workspaceMode) without changing the configuration
        self._workspace_override: WorkspaceMode | None = None
        # ndws.parallel.MPITrainer: called as hook(i) in the backward pass right after layer
        # i's gradients are in the flat buffer, to start their allreduce while the layers
        # below still backpropagate (docs/distributed.md); None: no call
        self._after_layer_gradients: Any = None
        #: milliseconds the last fit iteration waited for its batch (DL4J's lastEtlTime)
        self.last_etl_time = 0.0
        #: examples in the last fit iteration's batch
        self.last_batch_size = 0
        #: the History of the running (or last) fit, for listeners (Keras' model.history)
        self.history: History | None = None

    # -- building -------------------------------------------------------------------------------

    def init(self, params: Any = None) -> None:
        """Build the layers, lay their parameters out in one flat array and initialise them
        from the seed (or copy `params`, a flat array of `num_params()` values)."""
        with self._exclusive("init", TRAIN, writes=True):
            self._build(params, share=False)

    def _build(self, params: Any, share: bool, sample: bool = True) -> None:
        # share=True: an inference-only network (ndws.parallel's serving replicas) whose
        # parameters are views of `params` itself, a detached flat array laid out as this
        # configuration's; no gradients, no updater state, nothing copied or initialised
        conf = self.conf
        layers = [layer.clone() for layer in conf.resolved_layers]
        tbptt = conf.backprop_type is BackpropType.TRUNCATED_BPTT
        for i, layer in enumerate(layers):
            layer.index = i
            layer.input_gradient_needed = i > 0
            if tbptt and hasattr(layer, "back_length"):
                # truncated BPTT: the errors of a segment flow back through its last
                # tbptt_back_length steps (docs/recurrent.md)
                layer.back_length = conf.tbptt_back_length
        dt = conf.dtype
        layout = _layout(layers, dt.itemsize)
        total = layout[-1][3] + layout[-1][4] if layout else 0
        if params is not None:
            _check_flat(params, total)      # before anything of the network is replaced
        if share:
            if not isinstance(params, NDArray) or params.dtype != dt or params.is_attached():
                raise ValueError(f"params: a shared parameter array must be a detached "
                                 f"ndws.NDArray of {dt}")
            flat_p, flat_g = params, None
        else:
            flat_p = ndws.zeros(total, dt, detached=True)
            flat_g = ndws.zeros(total, dt, detached=True)
        for layer, name, shape, off, size in layout:
            order = layer.param_order(name)
            layer.params[name] = _param_view(flat_p, off, size, shape, order)
            if flat_g is not None:
                layer.grads[name] = _param_view(flat_g, off, size, shape, order)
        if params is None and sample:
            # from the seed; given parameters are copied in below instead (sampling them
            # first would only cost: a replica for ndws.parallel is built per fit; clone
            # copies them in at an iteration boundary)
            rng = np.random.default_rng(conf.seed)
            for layer in layers:
                views = dict(layer.params)
                layer.init_params(rng)
                _checks.params_kept(layer, views)
        # one updater segment per run of layers sharing an updater: [start, end) of the buffers
        segments = []
        for layer, name, shape, off, size in layout if not share else ():
            if not layer.trainable(name):
                continue                      # e.g. running statistics: no updater state
            upd = layer.updater or conf.updater
            if segments and segments[-1][0] == upd and segments[-1][2] == off:
                segments[-1][2] = off + size
            else:
                segments.append([upd, off, off + size])
        self._segments = [(u, s, e, [ndws.zeros(e - s, dt, detached=True)
                                     for _ in range(u.n_state)]) for u, s, e in segments]
        # DL4J's WeightDecay: the weights' [start, end) in the flat buffers
        self._decayed = [(layer, off, off + size) for layer, name, shape, off, size in layout
                         if name in layer.weight_keys and layer.weight_decay]
        self._dropout_rng = np.random.default_rng([conf.seed, 1])
        for layer in layers:
            layer._rng = self._dropout_rng
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
        self._params, self._grads = flat_p, flat_g
        self._layout = layout
        self._configs = workspace_configs(len(layers))
        self._managers: dict = {}
        self._presized: dict = {}
        # the compiled training iteration, where it applies (an inference replica never trains)
        self._dense_plan = (None if share or any(self._preprocessors)
                            else _dense_plan(layers, self._configs))
        self._segment_views: tuple = (None, None, [])
        # rnn_time_step's one-step path: (batch, input width, run), built at the first call
        # of a batch size
        self._step_plan: tuple | None = None
        if params is not None and not share:
            flat_p.assign(_check_flat(params, total))

    def _check_init(self) -> None:
        if self._params is None:
            raise RuntimeError("MultiLayerNetwork: call init() first")

    def _exclusive(self, op: str, kind: int = FORWARD, writes: bool = False) -> Exclusive:
        # one network serves one thread at a time: a second caller fails at once, by name; its
        # owner may call back from a listener what is safe where it is (ndws.nn._busy). `op`:
        # a method of MultiLayerNetwork, or another class's "Class" or "Class.method"
        return Exclusive(self._busy, op if op[:1].isupper() else "MultiLayerNetwork." + op,
                         kind, writes)

    # -- parameters -----------------------------------------------------------------------------

    def params(self) -> NDArray:
        """The flat parameter array: the network's own, detached, and live (layers' weights
        are views of it, and fit updates it in place). From another thread while the network
        trains its values change under the reader, and a copy of it may mix two iterations;
        `clone()` copies the network at an iteration boundary instead."""
        self._check_init()
        return self._params

    def num_params(self) -> int:
        self._check_init()
        return int(self._params.shape[0])

    def set_params(self, params: Any) -> None:
        """Copy `params` (a flat array of num_params() values) into the network's parameters.
        Refused (RuntimeError) while another thread uses the network, and from a listener
        inside a training iteration (iteration_done and the epoch hooks may call it)."""
        self._check_init()
        src = _check_flat(params, self.num_params())
        with self._exclusive("set_params", WRITE, writes=True):
            self._params.assign(src)

    def _copy_params_into(self, out: NDArray, op: str) -> None:
        # ndws.parallel's snapshots: the parameters into `out` (detached, num_params()
        # values), at an iteration boundary: never a copy torn by a fit in another thread
        self._check_init()
        params = self._params
        self._busy.snapshot(op, lambda: out.assign(params))

    @property
    def iteration(self) -> int:
        """Training iterations done so far (DL4J's iteration count; the next one's number)."""
        return self._iteration

    @iteration.setter
    def iteration(self, value: int) -> None:
        value = _counter("iteration", value)
        with self._exclusive("iteration", FREE):
            self._iteration = value

    @property
    def epoch(self) -> int:
        """Epochs done so far (DL4J's epoch count)."""
        return self._epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        value = _counter("epoch", value)
        with self._exclusive("epoch", FREE):
            self._epoch = value

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
        # DL4J's features mask: (n, time) for a time series, (n,) or (n, 1) per example for
        # rows; anything else named with the shape it should have
        t = self.conf._network_input
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
            raise ValueError(f"features_mask: expected shape {expected} "
                             f"({'(n_samples, time)' if len(expected) == 2 else 'one per example'}"
                             f") for features of shape {tuple(x.shape)}, got "
                             f"{tuple(fmask.shape)}")
        if fmask.dtype.kind not in "biuf":
            raise TypeError(f"features_mask: expected numbers (0 masks a step), got dtype "
                            f"{fmask.dtype}")
        _finite_mask("features_mask", fmask)
        return fmask

    # -- workspace managers ---------------------------------------------------------------------

    @staticmethod
    def _resolve(mode: WorkspaceMode, training: bool) -> WorkspaceMode:
        # ENABLED: the recommended layout for the phase
        if mode is WorkspaceMode.ENABLED:
            return WorkspaceMode.SEPARATE if training else WorkspaceMode.SINGLE
        return mode

    def _train_mode(self) -> WorkspaceMode:
        mode = self._workspace_override
        return self._resolve(self.conf.training_workspace_mode if mode is None else mode, True)

    def _inference_mode(self) -> WorkspaceMode:
        return self._resolve(self.conf.inference_workspace_mode, False)

    def memory_report(self, batch_size: int, sequence_length: int | None = None
                      ) -> MemoryReport:
        """The bytes every workspace needs in every mode for batches of `batch_size`, per
        layer and in total, from the shapes (nothing runs); printable as a table. A network
        of time series of varying length is planned for `sequence_length` steps (without it,
        its recurrent layers say "unknown")."""
        self._check_init()
        return MemoryReport(self, batch_size, sequence_length)

    def _variable_length(self) -> bool:
        t = self.conf._network_input
        return t is not None and t.kind == "RNN" and t.time_series_length is None

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

    def _presize(self, x: NDArray) -> None:
        # before a thread's first pass with this batch size (and number of time steps, for a
        # time series of varying length): create the workspaces at the size the plan says for
        # training and inference, so even the first pass does not spill (they go on learning
        # as configured); a custom layer without memory_use leaves them to learn. A longer
        # batch later makes them spill once and grow (SpillPolicy.REALLOCATE): the next such
        # batch fits
        batch = x.shape[0]
        length = None
        if self._variable_length() and x.ndim == 3:
            length = x.shape[self._time_axis(self.conf._network_input)]
            if length == 0:
                return
        # once per batch size: the workspaces exist then, and a new length only changes how
        # much they need (planning every length of a varying one would cost a walk of the
        # configuration per batch)
        done = self._presized.setdefault(threading.get_ident(), set())
        if batch in done:
            return
        done.add(batch)
        size = self.conf.dtype.itemsize
        plans = []
        for mode, training in ((self._train_mode(), True), (self._inference_mode(), False)):
            uses = _layer_uses(self, batch, training, size, length)
            if any(u is None for u in uses):
                return
            plans.append(_plan(uses, mode, training))
        wsm = get_workspace_manager()
        for name, nbytes in _merge(*plans).items():
            if nbytes and not wsm.check_if_workspace_exists(name):
                wsm.create_new_workspace(self._configs[name].replace(initial_size=nbytes), name)

    def _manager(self, mode: WorkspaceMode, training: bool, role: str = "") -> LayerWorkspaceMgr:
        # built once per (mode, phase, role) and kept: only the ping-pong mappings change
        key = (mode, training, role)
        mgr = self._managers.get(key)
        if mgr is None:
            mgr = self._managers[key] = self._build_manager(mode, training)
        return mgr

    def _build_manager(self, mode: WorkspaceMode, training: bool) -> LayerWorkspaceMgr:
        c = self._configs
        if mode is WorkspaceMode.NONE:
            return LayerWorkspaceMgr.no_workspaces()
        b = LayerWorkspaceMgr.builder()
        # a recurrent layer's time step: a cycle of its own workspace per step, opened and
        # closed by the compiled loop (DL4J's WS_RNN_LOOP_WORKING_MEM, in every mode: the
        # iteration's one workspace of SINGLE cannot start a cycle per step)
        for t in (ArrayType.RNN_FF_LOOP_WORKING_MEM, ArrayType.RNN_BP_LOOP_WORKING_MEM):
            b.with_(t, WS_RNN_LOOP_WORKING_MEM, c[WS_RNN_LOOP_WORKING_MEM])
        if mode is WorkspaceMode.SINGLE:
            name = WS_SINGLE if training else WS_INFERENCE
            return b.default_workspace(name, c[name]).build()
        if training:
            for t in (ArrayType.ACTIVATIONS, ArrayType.INPUT, ArrayType.UPDATER_WORKING_MEM,
                      ArrayType.FF_CACHE):
                b.with_(t, WS_ALL_LAYERS_ACT, c[WS_ALL_LAYERS_ACT])
            b.with_(ArrayType.ACTIVATION_GRAD, WS_LAYER_ACT[0], c[WS_LAYER_ACT[0]])
        else:
            # inference: the activations ping-pong; what a layer keeps for a backward pass that
            # will not come (output(train=True): dropout masks, pre-activations) is working
            # memory of that layer's pass
            b.with_(ArrayType.ACTIVATIONS, WS_LAYER_ACT[0], c[WS_LAYER_ACT[0]])
        return b.default_workspace(WS_LAYER_WORKING_MEM, c[WS_LAYER_WORKING_MEM]).build()

    @staticmethod
    def _check_location(layer: Any, t: ArrayType, array: Any, mgr: LayerWorkspaceMgr,
                        op: str, who: str = "") -> None:
        # what a layer (or preprocessor: `who` names it) returns must live where its ArrayType
        # says (the classic mistake: an activation left in the layer's working memory, gone
        # when that scope closes)
        who = who or f"layers[{layer.index}] ({type(layer).__name__})"
        if not isinstance(array, NDArray):
            raise TypeError(f"{who}.{op} returned {type(array).__name__}, expected an "
                            f"ndws.NDArray")
        if array.workspace_id == mgr._names.get(t):
            return                     # the common case: where it belongs (or both detached)
        try:
            mgr.validate_array_location(t, array, False, False)
        except ndws.WorkspaceError as exc:
            raise ndws.WorkspaceError(
                f"{who}.{op}: array ({t}) workspace "
                f"validation failed - array is defined in incorrect workspace: {exc}. Make it "
                f"with mgr.create({t}, ...) or move it there with mgr.leverage_to({t}, array) "
                f"before returning it", "location", array.workspace_id) from None

    @staticmethod
    def _scope(mgr: LayerWorkspaceMgr, mode: WorkspaceMode, t: ArrayType) -> Any:
        # a per-layer scope: none in SINGLE mode, whose one workspace is entered once per
        # iteration (entering it again would start a new cycle under the layers' feet)
        if mode is WorkspaceMode.SINGLE:
            return contextlib.nullcontext()
        return mgr.notify_scope_entered(t)

    def _preprocess(self, i: int, a: NDArray, mgr: LayerWorkspaceMgr, backward: bool
                    ) -> NDArray:
        # layer i's preprocessor, forward on its input or backward on its epsilon, inside the
        # layer's scopes; its result is a view of its argument (living as long) or an array of
        # the type's workspace
        pre = self._preprocessors[i]
        if backward:
            out, t, op = pre.backprop(a, mgr), ArrayType.ACTIVATION_GRAD, "backprop"
        else:
            out, t, op = pre.pre_process(a, mgr), ArrayType.ACTIVATIONS, "pre_process"
        if out is not a and (not isinstance(out, NDArray) or out.workspace_id != a.workspace_id):
            self._check_location(None, t, out, mgr, op,
                                 f"input_preprocessors[{i}] ({type(pre).__name__})")
        return out

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
        if _one_example(tuple(a.shape), self.conf._network_input):
            return a.reshape((1,) + tuple(a.shape)), True
        return a, False

    def _as_input(self, x: Any, name: str = "x", allow_row: bool = False) -> NDArray:
        dt = self.conf.dtype
        if isinstance(x, NDArray):
            a = x
        else:
            try:
                arr = np.asarray(x)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"{name}: expected an array of numbers, got "
                                f"{type(x).__name__}") from exc
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"{name}: expected an array of numbers, got dtype {arr.dtype}")
            if arr.dtype != dt or not arr.flags.c_contiguous:
                arr = np.ascontiguousarray(arr, dtype=dt)
            a = ndws.from_numpy(arr)
        _check_input_shape(tuple(a.shape), self.conf._network_input, self.layers[0], name,
                           allow_row)
        if a.dtype != dt:
            with scope_out_of_workspaces():
                a = a.astype(dt)
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
        with self._exclusive("rnn_time_step"):
            if output_workspace is None and (isinstance(x, np.ndarray) or isinstance(x, NDArray)):
                run = self._one_step_path(x)
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

    def _one_step_path(self, x: Any) -> Any:
        # rnn_time_step's path for one step of a batch of the last size (text generation:
        # batch 1, one step at a time): the layers' step runners chained on rows, the stored
        # state read and written as on the general path, no workspace, no per-layer Python
        # beyond the kernel call. None (the general path) for anything else: a first call, a
        # new batch size, a layer or preprocessor without such a path, another dtype or
        # shape, a debug mode, listeners of the forward pass
        shape = x.shape
        if len(shape) != 2 or _core._get_debug_mode() != 0:
            return None
        plan = self._step_plan
        if plan is None or plan[0] != shape[0] or x.dtype != self.conf.dtype \
                or shape[1] != plan[1]:
            if plan is not None and plan[0] == shape[0]:
                return None
            plan = self._step_plan = self._build_step_plan(shape[0])
            if plan is None:
                return None
        return plan[2]

    def _build_step_plan(self, batch: int) -> tuple | None:
        t = self.conf._network_input
        if t is None or t.kind != "RNN" or self._checked_any():
            return None
        runners = []
        for layer, pre in zip(self.layers, self._preprocessors):
            if pre is not None and type(pre) not in (RnnToFeedForwardPreProcessor,
                                                     FeedForwardToRnnPreProcessor):
                return None                 # one step's rows are these two's views only
            runner = layer.step_runner(batch, self.conf.dtype)
            if runner is None:
                return None
            runners.append(runner)
        last = runners[-1]
        inner = runners[:-1]
        width, dtype = self.layers[-1].output_width(), self.conf.dtype
        data = ndws.from_numpy

        def run(x: Any) -> NDArray:
            a = x if isinstance(x, NDArray) else data(np.ascontiguousarray(x))
            if not a.flags.c_contiguous:
                a = a.copy()
            for step in inner:
                a = step(a)
            return last(a, ndws.empty((batch, width), dtype=dtype, detached=True))
        return (batch, t.size, run)

    def _checked_any(self) -> bool:
        # user code among the layers: its own activate must run (the general path)
        return any(self._checked)

    def _step_input(self, x: Any) -> tuple[NDArray, bool]:
        # rnn_time_step's input as a time series; a 2-D (n, size) array is one step of each
        t = self.conf._network_input
        if t is None or t.kind != "RNN":
            raise ValueError(f"rnn_time_step: the network's input is not a time series (its "
                             f"input type is {t!r}); use output()")
        a = x if isinstance(x, NDArray) else np.asarray(x) if not isinstance(x, np.ndarray) \
            else x
        one_step = getattr(a, "ndim", 0) == 2 and not isinstance(
            self.layers[0], EmbeddingSequenceLayer)
        if one_step:
            a = a.reshape((a.shape[0], a.shape[1], 1) if t.data_format.name == "NCW"
                          else (a.shape[0], 1, a.shape[1]))
        return self._as_input(a), one_step

    def _recurrent(self, layer_index: Any, op: str) -> Any:
        self._check_init()
        if (isinstance(layer_index, (bool, np.bool_))
                or not isinstance(layer_index, (int, np.integer))):
            raise TypeError(f"{op}: layer_index must be an int, got {layer_index!r:.40}")
        if not 0 <= layer_index < len(self.layers):
            raise ValueError(f"{op}: layer_index {layer_index} is not a layer index (0 to "
                             f"{len(self.layers) - 1})")
        layer = self.layers[layer_index]
        if not hasattr(layer, "rnn_get_previous_state"):
            raise ValueError(f"{op}: layers[{layer_index}] ({type(layer).__name__}) is not a "
                             f"recurrent layer (it keeps no state)")
        return layer

    def rnn_get_previous_state(self, layer_index: int) -> dict[str, NDArray]:
        """Copies of the state layer `layer_index` carries between `rnn_time_step` calls:
        {"prevAct": (n, n_out)} (and "prevMem", the cell, for an LSTM); empty when none."""
        layer = self._recurrent(layer_index, "rnn_get_previous_state")
        with self._exclusive("rnn_get_previous_state", STATE):
            return layer.rnn_get_previous_state()

    def rnn_set_previous_state(self, layer_index: int, state: dict) -> None:
        """Set the state layer `layer_index` starts the next `rnn_time_step` from (arrays of
        (n, n_out) under the keys `rnn_get_previous_state` gives; copied)."""
        layer = self._recurrent(layer_index, "rnn_set_previous_state")
        with self._exclusive("rnn_set_previous_state", STATE):
            layer.rnn_set_previous_state(state)

    def rnn_clear_previous_state(self) -> None:
        """Forget every recurrent layer's carried state (of `rnn_time_step` and truncated
        BPTT)."""
        self._check_init()
        with self._exclusive("rnn_clear_previous_state", STATE):
            self._clear_rnn_state()

    def _clear_rnn_state(self) -> None:
        for layer in self.layers:
            if hasattr(layer, "rnn_clear_previous_state"):
                layer.rnn_clear_previous_state()

    def _check_output_workspace(self, output_workspace: Any) -> None:
        if output_workspace is None:
            return
        if not isinstance(output_workspace, ndws.Workspace):
            raise TypeError(f"output_workspace: expected an open ndws.Workspace, got "
                            f"{type(output_workspace).__name__}")
        if not output_workspace.is_scope_active:
            raise ndws.WorkspaceError(
                f"output_workspace: workspace [{output_workspace.id}] is not open; open it "
                f"before calling output (closing it stays the caller's job)", "closed",
                output_workspace.id)

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
            self._presize(a)
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
        epochs = _count("epochs", epochs)
        if progress is not None and not isinstance(progress, bool):
            raise TypeError(f"progress: expected True, False or None, got {progress!r:.40}")
        if not isinstance(shuffle, (bool, np.bool_)):
            raise TypeError(f"shuffle: expected True or False, got {shuffle!r:.40}")
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
        history = History(epochs)
        with self._exclusive("fit", TRAIN):
            wrapper = None
            if (labels is None and not isinstance(data, (DataSet, AsyncDataSetIterator))
                    and callable(getattr(data, "async_supported", None))
                    and data.async_supported()):
                # DL4J's fit: an async-capable iterator is prefetched on a producer thread
                # (queue 2); the time fit waits for a batch is the ETL time
                wrapper = data = AsyncDataSetIterator(data, queue_size=2)
            try:
                for _ in range(epochs):
                    x, y = data, labels
                    if shuffle:
                        x, y = shuffled(data, labels, self.conf.seed if seed is None else seed,
                                        self._epoch)
                    self._fit_epoch(x, y, batch_size, progress, history, validate)
            finally:
                history._close()
                if wrapper is not None:
                    wrapper.shutdown()
        return history

    def _fit_arrays(self, data: Any, labels: Any) -> tuple[NDArray, NDArray]:
        _refuse_labels_for_batches(data)
        x = self._as_input(data)
        y = labels_array(labels, "labels")
        if y.ndim == 0 or y.shape[0] != x.shape[0]:
            raise ValueError(f"labels: {y.shape[0] if y.ndim else 'no'} rows for "
                             f"{x.shape[0]} examples")
        return x, y

    def _fit_epoch(self, data: Any, labels: Any, batch_size: Any, progress: bool | None,
                   history: History, validate: Any = None) -> None:
        with _Epoch(self, self._listeners, history, _length(data, labels, batch_size),
                    progress, validate=validate) as epoch:
            batches = iter(self._batches(data, labels, batch_size))
            while True:
                waited = time.perf_counter()
                ds = next(batches, None)
                if ds is None:
                    break
                self.last_etl_time = (time.perf_counter() - waited) * 1000.0
                self._fit_batch(ds, lambda: epoch.iteration(self._iteration - 1, self._score,
                                                            self.last_batch_size))
        if labels is None and hasattr(data, "reset") and callable(data.reset):
            data.reset()

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

    def _fit_batch(self, ds: DataSet, on_iteration: Any = None) -> None:
        # one iteration on the batch, or with truncated BPTT one per segment of it;
        # on_iteration() after each (the epoch's record and progress bar)
        if self.conf.backprop_type is BackpropType.TRUNCATED_BPTT:
            self._fit_tbptt(ds, on_iteration)
            return
        self._fit_step(ds, None)
        if on_iteration is not None:
            on_iteration()

    def _fit_tbptt(self, ds: DataSet, on_iteration: Any) -> None:
        # DL4J's doTruncatedBPTT: segments of tbptt_fwd_length steps of the features, labels
        # and masks (views), one update each, the recurrent layers' state carried from one
        # segment to the next (detached) and cleared before and after the batch. ndws'
        # segment backpropagates from the state carried into it through its last
        # tbptt_back_length steps (docs/porting-from-dl4j.md)
        x, labels = ds.features, ds.labels
        if x is None or labels is None:
            raise ValueError("the DataSet has no labels")
        if x.ndim != 3 or labels.ndim != 3:
            raise ValueError(f"fit: truncated BPTT needs time series features and labels "
                             f"(rank 3), got features of shape {tuple(x.shape)} and labels of "
                             f"shape {tuple(labels.shape)} (DL4J: \"Cannot do truncated BPTT "
                             f"with non-3d inputs or labels\")")
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
        length = self.conf.tbptt_fwd_length
        self._clear_rnn_state()
        try:
            for start in range(0, steps, length):
                end = min(start + length, steps)
                seg = DataSet(_steps(x, x_axis, start, end), _steps(labels, y_axis, start, end),
                              _mask_steps(ds.features_mask, start, end),
                              _mask_steps(ds.labels_mask, start, end))
                self._fit_step(seg, "tbptt")
                if on_iteration is not None:
                    on_iteration()
        finally:
            self._clear_rnn_state()

    @staticmethod
    def _time_axis(t: Any) -> int:
        # the time axis of a time series of type t (NCW when not known)
        return 1 if t is not None and t.data_format is not None and \
            t.data_format.name == "NWC" else 2

    def _fit_step(self, ds: DataSet, state: str | None) -> None:
        # from the forward pass to the update the iteration writes the parameters: copies for
        # other threads wait for its end (ndws.nn._busy); a raise leaves it to fit's exit
        self._busy.begin()
        score = self._gradient_and_score(ds, self._train_mode(), state)
        self._score = score
        self.last_batch_size = int(ds.features.shape[0])
        for listener in self._listeners:
            listener.on_gradient_calculation(self)
        self._update(0, int(self._params.shape[0]))
        done = self._iteration
        self._iteration += 1
        self._busy.end()                   # the boundary: iteration_done may copy or save
        for listener in self._listeners:
            listener.iteration_done(self, done, self._epoch)
        # DL4J asks the memory manager once per iteration; it collects only when its occasional
        # GC is configured (off by default), so fit never triggers a collection on its own
        _memory_manager.invoke_gc_occasionally()

    def _update(self, lo: int, hi: int) -> None:
        # The update of the flat range [lo, hi) from the gradients: one fused kernel call per
        # updater segment's part of it (detached memory: no workspace needs to be open), then
        # DL4J's WeightDecay (applyLR: W -= lr * coefficient * W after the update, in place).
        # Both are element-wise, so threads may update disjoint ranges at once (ndws.parallel).
        it, ep = self._iteration, self._epoch
        params, grads = self._params, self._grads
        p_key, g_key, views = self._segment_views
        if p_key is not params or g_key is not grads:
            # each whole segment's views, made once (fit updates whole segments every
            # iteration); remade if a flat buffer is replaced (ndws.parallel's replicas)
            views = [(params[s:e], grads[s:e]) for _, s, e, _ in self._segments]
            self._segment_views = (params, grads, views)
        for (upd, s, e, state), (p, g) in zip(self._segments, views):
            a, b = max(s, lo), min(e, hi)
            if (a, b) == (s, e):
                upd.apply(p, g, state, it, ep)
            elif a < b:
                upd.apply(params[a:b], grads[a:b], [st[a - s:b - s] for st in state], it, ep)
        for layer, s, e in self._decayed:
            a, b = max(s, lo), min(e, hi)
            if a < b:
                upd = layer.updater or self.conf.updater
                w = self._params[a:b]
                ndws.multiply(w, 1.0 - upd.learning_rate_at(it, ep) * layer.weight_decay,
                              out=w)

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

    def gradient(self) -> NDArray:
        """The flat gradient array of the last backward pass (layers' gradients are views)."""
        self._check_init()
        return self._grads

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
        self._presize(x)
        plan = self._compiled(ds) if state is None else None
        busy, around = self._busy, self._busy.inside
        # on_forward_pass and the layers run inside the pass, on either path (ndws.nn._busy)
        busy.inside = _IN_TRAINING
        try:
            if plan is not None:
                forward = ((lambda acts: self._notify_forward(acts, mode))
                           if self._listeners and self._forward_listeners() else None)
                # + 0.0: the general path's regularization sum (no l1/l2 here)
                score = plan.run(_PLAN_MODES[mode], x, labels, self._after_layer_gradients,
                                 forward) + 0.0
            else:
                score = self._general_pass(x, labels, mask, out_layer, mgr, mode, fmask, state)
        finally:
            busy.inside = around
        for listener in self._listeners:
            listener.on_backward_pass(self)
        return score

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
                    for i in range(n - 1, -1, -1):
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
                            if i > 0:
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
                    # in the iteration's scope, so its temporaries are the iteration's
                    reg = self._regularization()
            finally:
                while open_eps:
                    open_eps.pop().close()
                self._clear()
        return score + reg

    def _forward_listeners(self) -> list:
        # the listeners that look at the activations (overriding on_forward_pass): for the
        # others the forward pass keeps no list and, compiled, computes no probabilities
        return [l for l in self._listeners
                if type(l).on_forward_pass is not TrainingListener.on_forward_pass]

    def _notify_forward(self, acts: list, mode: WorkspaceMode) -> None:
        # Listeners get the activations valid for the call only. In a workspace mode they are
        # the iteration's own arrays (stale once it ends); with no workspace they would be
        # detached and live on, so a listener that looks at them gets copies in a workspace
        # closed right after the call.
        listening = self._forward_listeners()
        if not listening:
            return
        if mode is not WorkspaceMode.NONE:
            # the iteration's open workspace: a listener that starts a new cycle of it (by
            # training a network in this thread: the same names) takes the activations the
            # backward pass is about to read; say so, by name, instead of an outdated array
            name = WS_SINGLE if mode is WorkspaceMode.SINGLE else WS_ALL_LAYERS_ACT
            ws = get_workspace_manager().get_workspace_for_current_thread(self._configs[name],
                                                                          name)
            generation = ws.generation
            for listener in listening:
                listener.on_forward_pass(self, acts)
                if ws.generation != generation:
                    raise ndws.WorkspaceError(
                        f"{type(listener).__name__}.on_forward_pass started a new cycle of "
                        f"workspace [{name}] while this network's training iteration had it "
                        f"open (e.g. by training a network in this thread): the activations "
                        f"its backward pass reads are gone. Do such work in iteration_done, "
                        f"after the iteration's workspaces are closed", "outdated", name)
            return
        with ndws.workspace(WS_LISTENER):
            copies = [a.dup() for a in acts]
            for listener in listening:
                listener.on_forward_pass(self, copies)

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
            act = layer.activation.value if layer.activation is not None else "-"
            loss = getattr(layer, "loss_function", None)
            row = ((str(layer.index), type(layer).__name__, str(layer.n_in or "-"),
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

    # -- listeners ----------------------------------------------------------------------------

    def set_listeners(self, *listeners: TrainingListener) -> None:
        """Replace the listeners (hooks in docs/networks.md, "Listeners")."""
        self._listeners = _listener_list(listeners)

    def add_listeners(self, *listeners: TrainingListener) -> None:
        self._listeners = self._listeners + _listener_list(listeners)

    def get_listeners(self) -> list[TrainingListener]:
        return list(self._listeners)

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

    # -- saving -------------------------------------------------------------------------------

    def save(self, path: Any, save_updater: bool = True, save_rnn_state: bool = False) -> None:
        """Save to `path`: a zip of the configuration, the parameters, the updater state (with
        `save_updater`) and the training counters and random state (docs/networks.md); with
        `save_rnn_state`, the state the recurrent layers carry between `rnn_time_step` calls
        (a checkpoint leaves it out: it belongs to a stream, not to the model)."""
        self._check_init()
        with self._exclusive("save", STATE):
            save_network(self, path, save_updater, save_rnn_state)

    @classmethod
    def load(cls, path: Any, load_updater: bool = True) -> "MultiLayerNetwork":
        """A network saved by `save`; with the updater state it resumes training exactly."""
        return load_network(cls, path, load_updater)

    def _updater_state_flat(self) -> np.ndarray:
        parts = [a.numpy() for _, _, _, state in self._segments for a in state]
        return np.concatenate(parts) if parts else np.zeros(0, self.conf.dtype)

    def _set_updater_state_flat(self, flat: np.ndarray, where: str) -> None:
        sizes = [a.shape[0] for _, _, _, state in self._segments for a in state]
        if flat.shape != (sum(sizes),) or flat.dtype != self.conf.dtype:
            raise ValueError(f"{where} holds {flat.dtype} {flat.shape}, the configuration's "
                             f"updaters need {self.conf.dtype} ({sum(sizes)},)")
        off = 0
        for _, _, _, state in self._segments:
            for a in state:
                a.assign(flat[off:off + a.shape[0]])
                off += a.shape[0]

    # -- misc -----------------------------------------------------------------------------------

    def clone(self) -> "MultiLayerNetwork":
        """A new network with the same configuration and a copy of the parameters and updater
        state (counters included). From another thread while this network trains, the copy is
        taken at the next iteration boundary (the caller waits for it); from a listener, at
        iteration_done or an epoch hook (inside an iteration: RuntimeError)."""
        self._check_init()
        other = MultiLayerNetwork(self.conf)
        other._build(None, share=False, sample=False)   # built first: the copy is all we wait for

        def copy() -> None:
            other._params.assign(self._params)
            for (_, _, _, mine), (_, _, _, theirs) in zip(self._segments, other._segments):
                for a, b in zip(mine, theirs):
                    b.assign(a)
            other._iteration, other._epoch = self._iteration, self._epoch

        self._busy.snapshot("MultiLayerNetwork.clone", copy)
        return other

    def _replica(self, share: str, stream: int) -> "MultiLayerNetwork":
        """Another thread's copy of this network (ndws.parallel's workers), its dropout drawn
        from its own stream. `share`: "none" copies everything (as clone); "trainable" makes
        the parameters the updater changes this network's own views (one shared parameter set:
        running statistics stay the replica's, as the forward pass writes them); "all" gives an
        inference-only network on this network's flat parameter array itself (no copy, no
        gradients, no updater state: nothing may train it)."""
        if share == "all":
            other = MultiLayerNetwork(self.conf)
            other._build(self._params, share=True)
        elif share in ("none", "trainable"):
            other = self.clone()
            if share == "trainable":
                for mine, theirs in zip(self.layers, other.layers):
                    for name, view in mine.params.items():
                        if mine.trainable(name):
                            theirs.params[name] = view
        else:
            raise ValueError(f"share: expected 'none', 'trainable' or 'all', got {share!r}")
        other._dropout_rng = np.random.default_rng([self.conf.seed, 1, stream])
        for layer in other.layers:
            layer._rng = other._dropout_rng
        return other

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


def _param_view(flat: NDArray, off: int, size: int, shape: tuple, order: str) -> NDArray:
    # a parameter's view of the flat buffer: row-major, or column-major ("F": DL4J's order of
    # the recurrent and embedding weights)
    part = flat[off:off + size]
    if order == "F":
        return part.reshape(tuple(reversed(shape))).transpose()
    return part.reshape(shape)


def _finite_mask(name: str, mask: NDArray) -> None:
    # a mask weighs values: NaN or inf in it would make every score and gradient it touches
    # NaN, far from the batch that brought it
    m = np.asarray(mask)
    if m.dtype.kind == "f" and not np.isfinite(m).all():
        bad = np.argwhere(~np.isfinite(m))[0]
        raise ValueError(f"{name}: holds {m[tuple(bad)]} at {tuple(int(i) for i in bad)}: a "
                         f"mask must be finite (0 masks, 1 keeps)")


def _steps(a: NDArray, axis: int, start: int, end: int) -> NDArray:
    # steps [start, end) of a time series along `axis` (a view)
    return a[:, :, start:end] if axis == 2 else a[:, start:end]


def _mask_steps(mask: Any, start: int, end: int) -> Any:
    # steps [start, end) of a (n, time) mask; a per-example or per-output mask as it is
    if mask is None or mask.ndim == 1:
        return mask
    if mask.ndim == 2:
        return mask[:, start:end] if mask.shape[1] != 1 else mask
    return mask[:, :, start:end]


def _layout(layers: list, itemsize: int) -> list:
    # each parameter's place in the flat buffers, in layer order: (layer, name, shape, start,
    # size), from the layers' checked shapes (a negative size would overlap the next one)
    layout, total = [], 0
    for layer in layers:
        for name, shape in _checks.param_shapes(layer, itemsize).items():
            size = math.prod(shape)
            layout.append((layer, name, shape, total, size))
            total += size
    return layout


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


def _one_example(shape: tuple, t: Any) -> bool:
    """Whether input of `shape` is one example of input type `t` (no batch axis)."""
    if t is None or t.kind == "FF":
        return len(shape) == 1
    return t.is_example(shape)


def _check_input_shape(shape: tuple, t: Any, first: Layer, name: str,
                       allow_row: bool = False) -> None:
    # the network's input against its input type (`allow_row`: one example without the batch
    # axis too): a ValueError naming the first layer and the shape it expects (and the likely
    # mistake: NHWC data into an NCHW network, one image without its batch axis)
    accepts = getattr(first, "accepts_input", None)
    if accepts is not None and (accepts(shape) or (allow_row and accepts((1,) + shape))):
        return                            # e.g. EmbeddingSequenceLayer's (n, time) indices
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
            raise ValueError(f"{name}: expected {t.size} features (layers[0].n_in), got "
                             f"{shape[-1]}")
        return
    if t.is_example(shape[1:]) or (allow_row and t.is_example(shape)):
        return
    where = f"layers[0] ({type(first).__name__})"
    msg = (f"{name}: expected a {len(t.shape()) + 1}-d array {t.describe_shape()} for {where}, "
           f"the network's input type {t!r}; got shape {shape}")
    if t.kind == "CNN" and len(shape) == 4:
        other = (shape[1:] == (t.height, t.width, t.channels) if t.data_format.name == "NCHW"
                 else shape[1:] == (t.channels, t.height, t.width))
        if other:
            have = "NHWC (channels last)" if t.data_format.name == "NCHW" else "NCHW"
            axes = "(0, 3, 1, 2)" if t.data_format.name == "NCHW" else "(0, 2, 3, 1)"
            msg += (f": the data is {have} and the network {t.data_format.name} (transpose it "
                    f"with x.transpose{axes}, or configure InputType.convolutional(..., "
                    f"data_format='{'NHWC' if t.data_format.name == 'NCHW' else 'NCHW'}'))")
    if _one_example(shape, t):
        msg += ": one example without its batch dimension? (x[None] adds it)"
    raise ValueError(msg)


def _count(name: str, value: Any, low: int = 1) -> int:
    # an int argument >= low, a NumPy integer too but never a bool (fit's epochs and
    # batch_size in every trainer, the counters)
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer))
            or value < low):
        raise ValueError(f"{name}: expected an int >= {low}, got {value!r:.40}")
    return int(value)


def _counter(name: str, value: Any) -> int:
    return _count(name, value, 0)


def _listener_list(listeners: tuple) -> list:
    for i, listener in enumerate(listeners):
        if not isinstance(listener, TrainingListener):
            raise TypeError(f"listeners[{i}]: expected an ndws.nn.listeners.TrainingListener, got "
                            f"{type(listener).__name__}")
    return list(listeners)


def _length(data: Any, labels: Any, batch_size: Any) -> int | None:
    # the number of batches of an epoch, when it can be known without consuming anything
    if labels is not None:
        n = len(data)
        bs = (int(batch_size) if isinstance(batch_size, (int, np.integer))
              and not isinstance(batch_size, bool) and batch_size > 0 else n)
        return -(-n // bs) if bs else None
    if isinstance(data, DataSet):
        return 1
    try:
        return len(data)
    except TypeError:
        return None


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


def _check_flat(params: Any, total: int) -> Any:
    # a flat parameter array for a network of `total` parameters, or the reason it is not one
    src = params if isinstance(params, NDArray) else np.asarray(params)
    if src.shape != (total,):
        raise ValueError(f"params: expected shape ({total},), got {tuple(src.shape)}")
    if src.dtype.kind != "f":
        raise TypeError(f"params: expected a float array, got dtype {src.dtype}")
    return src

