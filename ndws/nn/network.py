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
import threading
import time
from typing import Any, Iterable

import numpy as np

import ndws
from ndws import _core
from ndws._core import NDArray
from ndws.data.async_iterators import AsyncDataSetIterator
from ndws.data.dataset import DataSet
from ndws.nn.conf import MultiLayerConfiguration
from ndws.evaluation import evaluate as _evaluate
from ndws.nn.history import History, _Epoch, _Progress
from ndws.nn._busy import FORWARD, FREE, STATE, TRAIN, WRITE, Busy, Exclusive
from ndws.nn.layers import (_FROM_OUTPUT, Activation, DenseLayer, Layer, LossFunction,
                            OutputLayer)
from ndws.nn.listeners import TrainingListener
from ndws.nn._layout import (WS_ALL_LAYERS_ACT, WS_INFERENCE, WS_LAYER_ACT, WS_LAYER_WORKING_MEM,
                             WS_LISTENER, WS_OUTPUT_MEM, WS_SINGLE, workspace_configs)
from ndws.nn._iteration import MODE_NONE, MODE_SEPARATE, MODE_SINGLE, DensePlan
from ndws.nn.memory_report import MemoryReport, merge as _merge, plan as _plan
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
        for i, layer in enumerate(layers):
            layer.index = i
            layer.input_gradient_needed = i > 0
        layout = _layout(layers)
        total = layout[-1][3] + layout[-1][4] if layout else 0
        dt = conf.dtype
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
            layer.params[name] = flat_p[off:off + size].reshape(shape)
            if flat_g is not None:
                layer.grads[name] = flat_g[off:off + size].reshape(shape)
        if params is None and sample:
            # from the seed; given parameters are copied in below instead (sampling them
            # first would only cost: a replica for ndws.parallel is built per fit; clone
            # copies them in at an iteration boundary)
            rng = np.random.default_rng(conf.seed)
            for layer in layers:
                layer.init_params(rng)
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
                         if name == "W" and layer.weight_decay]
        self._dropout_rng = np.random.default_rng([conf.seed, 1])
        for layer in layers:
            layer._rng = self._dropout_rng
        self.layers = layers
        self._params, self._grads = flat_p, flat_g
        self._layout = layout
        self._configs = workspace_configs(len(layers))
        self._managers: dict = {}
        self._presized: dict = {}
        # the compiled training iteration, where it applies (an inference replica never trains)
        self._dense_plan = None if share else _dense_plan(layers, self._configs)
        self._segment_views: tuple = (None, None, [])
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
                reg = sum(layer.regularization_score() for layer in self.layers)
                if reg:
                    ndws.add(per, reg, out=per)
            return per

    def _forward_score(self, ds: DataSet, per_example: bool = False) -> Any:
        out_layer = self._output_layer()
        x, labels, mask = self._batch_arrays(ds)
        mgr = self._manager(WorkspaceMode.NONE, True)
        saved = [getattr(layer, "_rng", None) for layer in self.layers]
        busy, around = self._busy, self._busy.inside
        busy.inside = _IN_FORWARD
        try:
            for layer in self.layers:
                layer._rng = None                  # no dropout when scoring
            with scope_out_of_workspaces():
                a = x
                for layer in self.layers:
                    # DL4J's score(ds): inference for every layer (running statistics, no
                    # dropout); the output layer's training pass only keeps its
                    # pre-activation for the loss
                    a = layer.activate(a, layer is out_layer, mgr)
                if per_example:
                    return out_layer.compute_score_examples(labels, mgr, mask)
                score = out_layer.compute_score(labels, mgr, mask)
        finally:
            busy.inside = around
            for layer, r in zip(self.layers, saved):
                layer._rng = r
                layer.clear()
        return score + sum(layer.regularization_score() for layer in self.layers)

    def _batch_arrays(self, ds: DataSet) -> tuple[NDArray, NDArray, NDArray | None]:
        x = self._as_input(ds.features, "features")
        if ds.labels is None:
            raise ValueError("the DataSet has no labels")
        labels = ds.labels
        mask = ds.labels_mask
        convert = labels.ndim == 2 and labels.dtype != self.conf.dtype
        if mask is None and not convert:
            return x, labels, None            # nothing to make (fit's every batch, typically)
        with scope_out_of_workspaces():
            if convert:
                labels = labels.astype(self.conf.dtype)
            if mask is not None:
                if mask.ndim == 2 and mask.shape[1] == 1:
                    mask = mask.reshape(mask.shape[0])        # DL4J's (n, 1) per-example mask
                if mask.dtype != self.conf.dtype:
                    mask = mask.astype(self.conf.dtype)
        return x, labels, mask

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

    def memory_report(self, batch_size: int) -> MemoryReport:
        """The bytes every workspace needs in every mode for batches of `batch_size`, per
        layer and in total, from the shapes (nothing runs); printable as a table."""
        self._check_init()
        return MemoryReport(self, batch_size)

    def _presize(self, batch: int) -> None:
        # before a thread's first pass with this batch size: create the workspaces at the size
        # the plan says for training and inference, so even the first pass does not spill
        # (they go on learning as configured); a custom layer without memory_use leaves them
        # to learn
        done = self._presized.setdefault(threading.get_ident(), set())
        if batch in done:
            return
        done.add(batch)
        size = self.conf.dtype.itemsize
        plans = []
        for mode, training in ((self._train_mode(), True), (self._inference_mode(), False)):
            uses = [layer.memory_use(batch, training, size) for layer in self.layers]
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
        if mode is WorkspaceMode.SINGLE:
            name = WS_SINGLE if training else WS_INFERENCE
            return LayerWorkspaceMgr.builder().default_workspace(name, c[name]).build()
        b = LayerWorkspaceMgr.builder()
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
    def _check_location(layer: Layer, t: ArrayType, array: Any, mgr: LayerWorkspaceMgr,
                        op: str) -> None:
        # what a layer returns must live where its ArrayType says (the classic mistake: an
        # activation left in the layer's working memory, gone when that scope closes)
        if not isinstance(array, NDArray):
            raise TypeError(f"layers[{layer.index}] ({type(layer).__name__}).{op} returned "
                            f"{type(array).__name__}, expected an ndws.NDArray")
        if array.workspace_id == mgr._names.get(t):
            return                     # the common case: where it belongs (or both detached)
        try:
            mgr.validate_array_location(t, array, False, False)
        except ndws.WorkspaceError as exc:
            raise ndws.WorkspaceError(
                f"layers[{layer.index}] ({type(layer).__name__}).{op}: array ({t}) workspace "
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

    # -- inference ------------------------------------------------------------------------------

    def _as_input(self, x: Any, name: str = "x") -> NDArray:
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
        if a.ndim != 2:
            raise ValueError(f"{name}: expected a 2-d array (n_samples, n_features), got shape "
                             f"{a.shape}")
        width = self.layers[0].n_in
        if width is not None and a.shape[1] != width:
            raise ValueError(f"{name}: expected {width} features (layers[0].n_in), got "
                             f"{a.shape[1]}")
        if a.dtype != dt:
            with scope_out_of_workspaces():
                a = a.astype(dt)
        return a

    def output(self, x: Any, train: bool = False, output_workspace: Any = None) -> NDArray:
        """The network's output for `x`: a detached array (the last layer writes straight into
        detached memory), or an array in `output_workspace`, an open workspace of the caller.
        Works whether or not the caller has a workspace open; the network's own workspaces
        never leak into the caller's scope."""
        self._check_init()
        # training mode writes running statistics (BatchNormalization): snapshots wait
        with self._exclusive("output", FORWARD, writes=bool(train)):
            a = self._as_input(x)
            if output_workspace is not None:
                if not isinstance(output_workspace, ndws.Workspace):
                    raise TypeError(f"output_workspace: expected an open ndws.Workspace, got "
                                    f"{type(output_workspace).__name__}")
                if not output_workspace.is_scope_active:
                    raise ndws.WorkspaceError(
                        f"output_workspace: workspace [{output_workspace.id}] is not open; open it "
                        f"before calling output (closing it stays the caller's job)", "closed",
                        output_workspace.id)
            mode = self._inference_mode() if not train else self._train_mode()
            return self._forward_detached(a, train, mode, output_workspace)[-1]

    def feed_forward(self, x: Any, train: bool = False) -> list[NDArray]:
        """Every layer's activations for `x` (the input first), each detached."""
        self._check_init()
        with self._exclusive("feed_forward", FORWARD, writes=bool(train)):
            a = self._as_input(x)
            outs = self._forward_detached(a, train, WorkspaceMode.NONE, None, keep_all=True)
            return [a.detach()] + outs

    def _forward_detached(self, a: NDArray, training: bool, mode: WorkspaceMode,
                          output_ws: Any, keep_all: bool = False) -> list[NDArray]:
        mgr = self._manager(mode, False)
        last = self._manager(mode, False, "last")
        if output_ws is None:
            last.set_scoped_out_for(ArrayType.ACTIVATIONS)
        else:
            last.set_workspace(ArrayType.ACTIVATIONS, output_ws.id, output_ws.config)
        if a.workspace_id is not None:
            mgr.set_no_leverage_override(a.workspace_id)     # never copy the caller's input
        if not keep_all:
            self._presize(a.shape[0])
        outs: list[NDArray] = []
        n = len(self.layers)
        held: list[Any] = []          # SEPARATE: the ping-pong scopes still open
        busy, around = self._busy, self._busy.inside
        with scope_out_of_workspaces():
            whole = (mgr.notify_scope_entered(ArrayType.ACTIVATIONS)
                     if mode is WorkspaceMode.SINGLE else contextlib.nullcontext())
            busy.inside = _IN_FORWARD
            try:
                with whole:
                    for i, layer in enumerate(self.layers):
                        m = last if i == n - 1 else mgr
                        if mode is WorkspaceMode.SEPARATE and i < n - 1:
                            # layer i's activations live in ACT_(i % 2) until layer i + 1 has
                            # read them (DL4J's WS_LAYER_ACT_1 / _2)
                            name = WS_LAYER_ACT[i % 2]
                            m._map(ArrayType.ACTIVATIONS, name, self._configs[name])
                            held.append(m.notify_scope_entered(ArrayType.ACTIVATIONS))
                        with self._scope(m, mode, ArrayType.FF_WORKING_MEM):
                            a = layer.activate(a, training, m)
                        self._check_location(layer, ArrayType.ACTIVATIONS, a, m, "activate")
                        if len(held) > 1 or (held and i == n - 1):
                            held.pop(0).close()          # layer i's input has been read
                        if keep_all:
                            outs.append(a.detach() if i < n - 1 else a)
            finally:
                busy.inside = around
                while held:
                    held.pop().close()
                for layer in self.layers:
                    layer.clear()
            if not keep_all:
                outs.append(a)
        return outs

    # -- training -------------------------------------------------------------------------------

    def fit(self, data: Any, labels: Any = None, *, batch_size: int | None = None,
            epochs: int = 1, progress: bool | None = None) -> History:
        """Train on `data`: a DataSet, an iterable (or DataSetIterator) of DataSets, or
        features with `labels` (arrays) cut into batches of `batch_size`; returns the `History`.
        `progress` shows a progress bar (default: when stderr is a terminal)."""
        self._check_init()
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"epochs: expected an int >= 1, got {epochs!r:.40}")
        if progress is not None and not isinstance(progress, bool):
            raise TypeError(f"progress: expected True, False or None, got {progress!r:.40}")
        history = History()
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
                    self._fit_epoch(data, labels, batch_size, progress, history)
            finally:
                if wrapper is not None:
                    wrapper.shutdown()
        return history

    def _fit_epoch(self, data: Any, labels: Any, batch_size: Any, progress: bool | None,
                   history: History) -> None:
        with _Epoch(self, self._listeners, history, _length(data, labels, batch_size),
                    progress) as epoch:
            batches = iter(self._batches(data, labels, batch_size))
            while True:
                waited = time.perf_counter()
                ds = next(batches, None)
                if ds is None:
                    break
                self.last_etl_time = (time.perf_counter() - waited) * 1000.0
                self._fit_batch(ds)
                epoch.iteration(self._iteration - 1, self._score, self.last_batch_size)
        if labels is None and hasattr(data, "reset") and callable(data.reset):
            data.reset()

    def _batches(self, data: Any, labels: Any, batch_size: Any) -> Iterable[DataSet]:
        if labels is not None:
            x = self._as_input(data)
            y = labels if isinstance(labels, NDArray) else ndws.from_numpy(
                np.ascontiguousarray(labels))
            n = x.shape[0]
            if y.shape[0] != n:
                raise ValueError(f"labels: {y.shape[0]} rows for {n} examples")
            if batch_size is None:
                batch_size = n
            if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
                raise ValueError(f"batch_size: expected an int >= 1, got {batch_size!r:.40}")
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

    def _fit_batch(self, ds: DataSet) -> None:
        # from the forward pass to the update the iteration writes the parameters: copies for
        # other threads wait for its end (ndws.nn._busy); a raise leaves it to fit's exit
        self._busy.begin()
        score = self._gradient_and_score(ds, self._train_mode())
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
        # label mask, no listener that looks at the activations, and workspaces in their normal
        # mode (the debug modes change how the manager finds them).
        plan = self._dense_plan
        if plan is None or ds.labels_mask is not None or _core._get_debug_mode() != 0:
            return None
        for listener in self._listeners:
            if type(listener).on_forward_pass is not TrainingListener.on_forward_pass:
                return None
        return plan

    def _gradient_and_score(self, ds: DataSet, mode: WorkspaceMode) -> float:
        # Forward and backward on ds: the gradients in the flat buffer, the score returned.
        out_layer = self._output_layer()
        x, labels, mask = self._batch_arrays(ds)
        mgr = self._manager(mode, True)
        if x.workspace_id is not None:
            mgr.set_no_leverage_override(x.workspace_id)
        self._presize(x.shape[0])
        plan = self._compiled(ds)
        if plan is not None:
            # + 0.0: the general path's regularization sum (no l1/l2 here)
            return plan.run(_PLAN_MODES[mode], x, labels, self._after_layer_gradients) + 0.0
        n = len(self.layers)
        open_eps: list[Any] = []      # SEPARATE: the epsilon scopes still open
        busy, around = self._busy, self._busy.inside
        with scope_out_of_workspaces():
            outer = (mgr.notify_scope_entered(ArrayType.ACTIVATIONS)
                     if mode is not WorkspaceMode.NONE else contextlib.nullcontext())
            # on_forward_pass and the layers run inside the pass (ndws.nn._busy)
            busy.inside = _IN_TRAINING
            try:
                with outer:
                    a = x
                    acts = [x] if self._listeners else None
                    for layer in self.layers:
                        with self._scope(mgr, mode, ArrayType.FF_WORKING_MEM):
                            a = layer.activate(a, True, mgr)
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
                            name = WS_LAYER_ACT[i % 2]
                            mgr._map(ArrayType.ACTIVATION_GRAD, name, self._configs[name])
                            open_eps.append(mgr.notify_scope_entered(ArrayType.ACTIVATION_GRAD))
                        with self._scope(mgr, mode, ArrayType.BP_WORKING_MEM):
                            if i == n - 1:
                                score, _, eps = out_layer.compute_score_and_gradient(labels, mgr,
                                                                                    mask)
                            else:
                                grads, eps = layer.backprop_gradient(eps, mgr)
                                self._take_gradients(layer, grads)
                        # layer i's gradients are final here (the compiled iteration calls the
                        # hook at the same point)
                        if self._after_layer_gradients is not None:
                            self._after_layer_gradients(i)
                        if i > 0:
                            self._check_location(layer, ArrayType.ACTIVATION_GRAD, eps, mgr,
                                                 "backprop_gradient")
                        if len(open_eps) > 1:
                            open_eps.pop(0).close()
                    while open_eps:
                        open_eps.pop().close()
                    # in the iteration's scope, so its temporaries are the iteration's
                    reg = sum(layer.regularization_score() for layer in self.layers)
            finally:
                busy.inside = around
                while open_eps:
                    open_eps.pop().close()
                for layer in self.layers:
                    layer.clear()
            for listener in self._listeners:
                listener.on_backward_pass(self)
        return score + reg

    def _notify_forward(self, acts: list, mode: WorkspaceMode) -> None:
        # Listeners get the activations valid for the call only. In a workspace mode they are
        # the iteration's own arrays (stale once it ends); with no workspace they would be
        # detached and live on, so a listener that looks at them gets copies in a workspace
        # closed right after the call.
        listening = [l for l in self._listeners
                     if type(l).on_forward_pass is not TrainingListener.on_forward_pass]
        if not listening:
            return
        if mode is not WorkspaceMode.NONE:
            for listener in listening:
                listener.on_forward_pass(self, acts)
            return
        with ndws.workspace(WS_LISTENER):
            copies = [a.dup() for a in acts]
            for listener in listening:
                listener.on_forward_pass(self, copies)

    @staticmethod
    def _take_gradients(layer: Layer, grads: Any) -> None:
        # a custom layer may return new arrays instead of writing into its views: copy them in
        if not isinstance(grads, dict):
            raise TypeError(f"layers[{layer.index}] ({type(layer).__name__}).backprop_gradient "
                            f"must return (gradients dict, epsilon), got {type(grads).__name__}")
        for name, g in grads.items():
            view = layer.grads.get(name)
            if view is None:
                raise ValueError(f"layers[{layer.index}] ({type(layer).__name__}): gradient "
                                 f"{name!r} is not one of its parameters "
                                 f"{sorted(layer.grads)}")
            if g is not view:
                view.assign(g)

    def summary(self, batch_size: int | None = None) -> str:
        """A table of the layers: index, type, n_in, n_out, parameters, activation (and loss);
        with `batch_size`, also the bytes each layer's arrays take in training and in inference
        (from `memory_report`; the modes place the same arrays in different workspaces)."""
        self._check_init()
        report = None if batch_size is None else MemoryReport(self, batch_size)
        rows = [("#", "layer", "n_in", "n_out", "params", "activation")
                + (() if report is None else (f"train B ({batch_size})",
                                              f"infer B ({batch_size})"))]
        for layer in self.layers:
            n = sum(int(np.prod(s)) for s in layer.param_shapes().values())
            act = layer.activation.value if layer.activation is not None else "-"
            loss = getattr(layer, "loss_function", None)
            row = (str(layer.index), type(layer).__name__, str(layer.n_in or "-"),
                   str(layer.output_width() or "-"), f"{n:,}",
                   act + (f" / {loss.name}" if loss is not None else ""))
            if report is not None:
                use = report.layers[layer.index]
                row += tuple("?" if use[k] is None else f"{sum(use[k].values()):,}"
                             for k in ("training", "inference"))
            rows.append(row)
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) if i in (1, 5) else c.rjust(w)
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

    def do_evaluation(self, iterator: Any, *evaluations: Any, progress: bool | None = None
                      ) -> Any:
        """Evaluate the network's output over `iterator` (DataSets with one-hot labels) with
        each evaluation; returns the evaluation when given one, else the tuple (the same
        objects). Each batch's output goes to a workspace (WS_OUTPUT_MEM) that starts a new
        cycle per batch, so after the first batch nothing is allocated per batch."""
        self._check_init()
        if progress is not None and not isinstance(progress, bool):
            raise TypeError(f"progress: expected True, False or None, got {progress!r:.40}")
        with self._exclusive("do_evaluation"):
            return self._do_evaluation_unlocked(iterator, *evaluations, progress=progress)

    def _do_evaluation_unlocked(self, iterator: Any, *evaluations: Any,
                                progress: bool | None = False) -> Any:
        mode = self._inference_mode()
        held: list[Any] = []
        ws = None
        if mode is not WorkspaceMode.NONE:
            ws = get_workspace_manager().get_workspace_for_current_thread(
                self._configs[WS_ALL_LAYERS_ACT], WS_OUTPUT_MEM)

        bar = _Progress(progress, _length(iterator, None, None), "evaluating")

        def predict(features: Any) -> NDArray:
            # the previous batch has been counted: end its cycle, start this one's
            while held:
                held.pop().close()
            bar.update(float("nan"))
            a = self._as_input(features, "features")
            if ws is None:
                return self._forward_detached(a, False, mode, None)[-1]
            held.append(ws.notify_scope_entered())
            with scope_out_of_workspaces():
                return self._forward_detached(a, False, mode, ws)[-1]

        try:
            return _evaluate(predict, iterator, *evaluations)
        finally:
            bar.close()
            while held:
                held.pop().close()

    def evaluate(self, iterator: Any) -> Any:
        """An `ndws.evaluation.Evaluation` of the network over `iterator`."""
        from ndws.evaluation import Evaluation
        return self.do_evaluation(iterator, Evaluation())

    def evaluate_roc_multi_class(self, iterator: Any, threshold_steps: int = 0) -> Any:
        """An `ndws.evaluation.ROCMultiClass` of the network over `iterator`."""
        from ndws.evaluation import ROCMultiClass
        return self.do_evaluation(iterator, ROCMultiClass(threshold_steps))

    def evaluate_regression(self, iterator: Any) -> Any:
        """An `ndws.evaluation.RegressionEvaluation` of the network over `iterator`."""
        from ndws.evaluation import RegressionEvaluation
        return self.do_evaluation(iterator, RegressionEvaluation())

    # -- saving -------------------------------------------------------------------------------

    def save(self, path: Any, save_updater: bool = True) -> None:
        """Save to `path`: a zip of the configuration, the parameters, the updater state (with
        `save_updater`) and the training counters and random state (docs/networks.md)."""
        self._check_init()
        with self._exclusive("save", STATE):
            self._save_unlocked(path, save_updater)

    def _save_unlocked(self, path: Any, save_updater: bool) -> None:
        save_network(self, path, save_updater)

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


def _layout(layers: list) -> list:
    # each parameter's place in the flat buffers, in layer order: (layer, name, shape, start,
    # size)
    layout, total = [], 0
    for layer in layers:
        for name, shape in layer.param_shapes().items():
            size = int(np.prod(shape, dtype=np.int64))
            layout.append((layer, name, shape, total, size))
            total += size
    return layout


def _counter(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name}: expected an int >= 0, got {value!r:.40}")
    return int(value)


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
        bs = batch_size if isinstance(batch_size, int) and batch_size > 0 else n
        return -(-n // bs) if bs else None
    if isinstance(data, DataSet):
        return 1
    try:
        return len(data)
    except TypeError:
        return None


def _check_flat(params: Any, total: int) -> Any:
    # a flat parameter array for a network of `total` parameters, or the reason it is not one
    src = params if isinstance(params, NDArray) else np.asarray(params)
    if src.shape != (total,):
        raise ValueError(f"params: expected shape ({total},), got {tuple(src.shape)}")
    if src.dtype.kind != "f":
        raise TypeError(f"params: expected a float array, got dtype {src.dtype}")
    return src

