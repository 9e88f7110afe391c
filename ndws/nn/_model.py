"""What `MultiLayerNetwork` and `ComputationGraph` have in common, written once: the flat
parameter, gradient and updater-state buffers and the update over them, the training counters,
the busy state (ndws.nn._busy), the listeners, the workspace modes as each phase resolves them,
the location check of what a layer or vertex returns, the epoch loop of `fit`, saving and
loading (docs/networks.md, docs/graphs.md).

A network lays its parameters out in one flat, contiguous array (each layer's or vertex's
weights are views into it, in the order of `flat_layout`'s owners) and its gradients in another;
the updater state is one buffer per run of owners sharing an updater, so an update is one fused
kernel call per run.
"""
from __future__ import annotations

import contextlib
import itertools
import math
import threading
import time
from typing import Any, Iterator

import numpy as np

import ndws
from ndws import _core
from ndws._core import NDArray
from ndws.data.async_iterators import _end_of_epoch
from ndws.data.dataset import DataSet
from ndws.nn import _checks
from ndws.nn._busy import FORWARD, FREE, STATE, TRAIN, WRITE, Busy, Exclusive
from ndws.nn._layout import (WS_ALL_LAYERS_ACT, WS_INFERENCE, WS_LAYER_WORKING_MEM,
                             WS_LISTENER, WS_RNN_LOOP_WORKING_MEM, WS_SINGLE)
from ndws.nn.conf import BackpropType
from ndws.nn.layers.embedding import EmbeddingSequenceLayer, _Embedding
from ndws.nn.layers.wrappers import _Wrapper
from ndws.nn.history import History, _Epoch
from ndws.nn.listeners import TrainingListener
from ndws.nn.memory_report import merge
from ndws.nn.preprocessors import FeedForwardToRnnPreProcessor, RnnToFeedForwardPreProcessor
from ndws.nn.serialization import load_network, save_network
from ndws.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr
from ndws.workspace import WorkspaceMode, get_workspace_manager, scope_out_of_workspaces

__all__ = ["Model", "flat_layout", "param_view", "check_flat", "count", "counter",
           "batch_count", "listener_list", "input_array", "index_reader", "index_time_axis",
           "numbers",
           "fit_options", "layer_step_runner", "step_program", "steps_one_at_a_time"]

_memory_manager = ndws.get_memory_manager()

# what a nested call is refused inside of (ndws.nn._busy)
_IN_FORWARD = "a forward pass"
_IN_TRAINING = "the forward and backward pass of a training iteration"


def flat_layout(owners: list, itemsize: int) -> list:
    """Each parameter's place in the flat buffers, in the order of `owners` (layers or
    vertices): ``(owner, name, shape, start, size)``, from the owners' checked shapes (a
    negative size would overlap the next one)."""
    layout, total = [], 0
    for owner in owners:
        for name, shape in _checks.param_shapes(owner, itemsize).items():
            size = math.prod(shape)
            layout.append((owner, name, shape, total, size))
            total += size
    return layout


def param_view(flat: NDArray, off: int, size: int, shape: tuple, order: str) -> NDArray:
    """A parameter's view of the flat buffer: row-major, or column-major ("F": DL4J's order of
    the recurrent and embedding weights)."""
    part = flat[off:off + size]
    if order == "F":
        return part.reshape(tuple(reversed(shape))).transpose()
    return part.reshape(shape)


def check_flat(params: Any, total: int) -> Any:
    """A flat parameter array for a network of `total` parameters, or the reason it is not
    one."""
    src = params if isinstance(params, NDArray) else np.asarray(params)
    if src.shape != (total,):
        raise ValueError(f"params: expected shape ({total},), got {tuple(src.shape)}")
    if src.dtype.kind != "f":
        raise TypeError(f"params: expected a float array, got dtype {src.dtype}")
    return src


def input_array(x: Any, dtype: Any, name: str, reader: Any = None) -> NDArray:
    """`x` as an NDArray of the network's `dtype` (an NDArray is kept when it has it; NumPy
    data is wrapped without a copy when it can be), or a TypeError naming `name` for what is
    not an array of numbers. `reader`: the embedding layer reading `x` as indices
    (`index_reader`), which checks them as given, before the cast could round one (float32
    holds whole numbers exactly only up to 2**24): ValueError naming `name` and the index."""
    given = x if isinstance(x, NDArray) else numbers(x, name)
    if reader is not None:
        try:
            reader.check_indices(given)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    if isinstance(given, NDArray):
        a = given
    else:
        if given.dtype != dtype or not given.flags.c_contiguous:
            try:
                given = np.ascontiguousarray(given, dtype=dtype)
            except MemoryError as exc:      # a view of a huge shape (a zero stride)
                raise MemoryError(f"{name}: {exc}") from None
        a = ndws.from_numpy(given)
    if a.dtype != dtype:
        with scope_out_of_workspaces():
            a = a.astype(dtype)
    return a


def index_reader(layer: Any, pre: Any) -> Any:
    """The embedding layer (EmbeddingLayer, EmbeddingSequenceLayer, frozen or not) that reads
    a network input as indices: `layer`, the input's reader behind its preprocessor `pre`; or
    None. Behind RnnToFeedForwardPreProcessor (which only reorders) or none: another
    preprocessor may change the values the layer gets, so only the layer checks them."""
    while isinstance(layer, _Wrapper):
        layer = layer.layer
    if not isinstance(layer, _Embedding) or (pre is not None and
                                             type(pre) is not RnnToFeedForwardPreProcessor):
        return None
    return layer


def index_time_axis(layer: Any, a: Any) -> int | None:
    """The time axis of input `a` when `layer` reads it as a series of indices (an
    EmbeddingSequenceLayer's (n, time) or (n, 1, time): the last), else None."""
    accepts = getattr(layer, "accepts_input", None)
    return a.ndim - 1 if accepts is not None and accepts(tuple(a.shape)) else None


def layer_step_runner(layer: Any, pre: Any, batch: int, dtype: Any) -> Any:
    """`layer`'s step runner (`ndws.nn.Layer.step_runner`) behind its preprocessor `pre`, or
    None (the general path): one step's rows are what RnnToFeedForwardPreProcessor and
    FeedForwardToRnnPreProcessor make of them (a series of one step and its rows are the same
    memory); any other preprocessor runs on the general path."""
    if pre is not None and type(pre) not in (RnnToFeedForwardPreProcessor,
                                             FeedForwardToRnnPreProcessor):
        return None
    return layer.step_runner(batch, dtype)


def steps_one_at_a_time(t: Any) -> bool:
    """Whether input type `t` is a time series that `rnn_time_step` may feed one step at a
    time: its length not fixed (or fixed at 1). A series of a fixed length is refused one step
    by the general path's shape check, which the one-step path leaves to it."""
    return t is not None and t.kind == "RNN" and t.time_series_length in (None, 1)


def step_program(batch: int, dtype: Any, n_inputs: int, steps: list, outputs: list) -> Any:
    """rnn_time_step's one-step path of a network as one function ``run(*inputs) -> list``,
    both network types: slot k < `n_inputs` holds input k as C-contiguous (batch, width)
    rows; each of `steps`, ``(runner, slots)`` in order, calls ``runner(*rows_of_slots)`` and
    fills the next slot with what it returns (its own buffer, reused at the next call); the
    steps whose slots `outputs` lists, as ``(slot, width)``, write into new detached
    (batch, width) arrays instead, returned in that order."""
    written = {slot: width for slot, width in outputs}
    program = [(runner, tuple(ins), written.get(n_inputs + k))
               for k, (runner, ins) in enumerate(steps)]
    order = [slot for slot, _ in outputs]
    data, empty = ndws.from_numpy, ndws.empty

    def run(*xs: Any) -> list:
        slots = []
        for x in xs:
            a = x if isinstance(x, NDArray) else data(np.ascontiguousarray(x))
            if not a.flags.c_contiguous:
                with scope_out_of_workspaces():
                    a = a.copy()         # a strided view's rows, copied outside any workspace
            slots.append(a)
        for runner, ins, width in program:
            args = [slots[i] for i in ins]
            if width is None:
                slots.append(runner(*args))
            else:
                slots.append(runner(*args, out=empty((batch, width), dtype=dtype,
                                                     detached=True)))
        return [slots[k] for k in order]
    return run


def numbers(x: Any, name: str) -> np.ndarray:
    """`x` as a NumPy array of numbers (no copy when it is one), or a TypeError naming `name`
    (the networks' inputs, ParallelInference's requests)."""
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: expected an array of numbers, got "
                        f"{type(x).__name__}") from exc
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected an array of numbers, got dtype {arr.dtype}")
    return arr


def fit_options(epochs: Any, progress: Any, shuffle: Any) -> int:
    """fit's epochs (returned as an int), progress and shuffle checked (both network types)."""
    epochs = count("epochs", epochs)
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress: expected True, False or None, got {progress!r:.40}")
    if not isinstance(shuffle, (bool, np.bool_)):
        raise TypeError(f"shuffle: expected True or False, got {shuffle!r:.40}")
    return epochs


def count(name: str, value: Any, low: int = 1) -> int:
    """An int argument >= low, a NumPy integer too but never a bool (fit's epochs and
    batch_size in every trainer, the counters)."""
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer))
            or value < low):
        raise ValueError(f"{name}: expected an int >= {low}, got {value!r:.40}")
    return int(value)


def counter(name: str, value: Any) -> int:
    return count(name, value, 0)


def batch_count(data: Any, labels: Any, batch_size: Any) -> int | None:
    """The number of batches of an epoch, when it can be known without consuming anything."""
    if labels is not None:
        n = len(data)
        bs = (int(batch_size) if isinstance(batch_size, (int, np.integer))
              and not isinstance(batch_size, bool) and batch_size > 0 else n)
        return -(-n // bs) if bs else None
    if isinstance(data, DataSet) or type(data).__name__ == "MultiDataSet":
        return 1
    try:
        return len(data)
    except TypeError:
        return None


def listener_list(listeners: tuple) -> list:
    for i, listener in enumerate(listeners):
        if not isinstance(listener, TrainingListener):
            raise TypeError(f"listeners[{i}]: expected an ndws.nn.listeners.TrainingListener, got "
                            f"{type(listener).__name__}")
    return list(listeners)


class _Abandoned(Exception):
    # raised out of an epoch whose fit a driver's `stop()` ended after a batch (caught by
    # Model._fit_loop: ndws.nn.earlystopping)
    pass


class Model:
    """The base of `MultiLayerNetwork` and `ComputationGraph` (see the module docstring)."""

    #: the class name errors and busy messages use, and the configuration's class
    _kind = "Model"
    _conf_class: type = object
    #: whether the backward pass calls _after_layer_gradients(i) for each owner i (an index of
    #: _owners(): a layer, or a graph's vertex) right after its gradients are final, in the
    #: order _backward_order() gives
    _layer_hook = False

    def _init_state(self, conf: Any) -> None:
        if not isinstance(conf, self._conf_class):
            raise TypeError(f"conf: expected an ndws.nn.{self._conf_class.__name__}, got "
                            f"{type(conf).__name__}")
        self.conf = conf
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

    def _lay_out(self, owners: list, params: Any, share: bool, sample: bool,
                 adopt: bool = False) -> tuple:
        """The flat buffers of `owners`' parameters (each owner's `params` / `grads` views into
        them), initialised from the seed or copied from `params`; the updater segments and
        the decayed ranges. Returns what `_adopt` makes the network's, once the rest of the
        network is built. share=True: an inference-only network whose parameters are views of
        `params` itself (a detached flat array laid out as this configuration's): no
        gradients, no updater state, nothing copied or initialised. adopt=True: the same
        parameters, but a network that trains them in place (TransferLearningHelper's
        unfrozen layers, on the tail of the original's buffer)."""
        conf = self.conf
        dt = conf.dtype
        layout = flat_layout(owners, dt.itemsize)
        total = layout[-1][3] + layout[-1][4] if layout else 0
        if params is not None:
            check_flat(params, total)      # before anything of the network is replaced
        if share or adopt:
            if not isinstance(params, NDArray) or params.dtype != dt or params.is_attached():
                raise ValueError(f"params: a shared parameter array must be a detached "
                                 f"ndws.NDArray of {dt}")
            flat_p = params
            flat_g = None if share else ndws.zeros(total, dt, detached=True)
        else:
            flat_p = ndws.zeros(total, dt, detached=True)
            flat_g = ndws.zeros(total, dt, detached=True)
        for owner, name, shape, off, size in layout:
            order = owner.param_order(name)
            owner.params[name] = param_view(flat_p, off, size, shape, order)
            if flat_g is not None:
                owner.grads[name] = param_view(flat_g, off, size, shape, order)
        if params is None and sample:
            # from the seed; given parameters are copied in below instead (sampling them
            # first would only cost: a replica for ndws.parallel is built per fit; clone
            # copies them in at an iteration boundary)
            rng = np.random.default_rng(conf.seed)
            for owner in owners:
                views = dict(owner.params)
                owner.init_params(rng)
                _checks.params_kept(owner, views)
        # one updater segment per run of owners sharing an updater: [start, end) of the buffers
        segments = []
        for owner, name, shape, off, size in layout if not share else ():
            if not owner.trainable(name):
                continue                      # e.g. running statistics: no updater state
            upd = owner.updater or conf.updater
            if segments and segments[-1][0] == upd and segments[-1][2] == off:
                segments[-1][2] = off + size
            else:
                segments.append([upd, off, off + size])
        self._segments = [(u, s, e, [ndws.zeros(e - s, dt, detached=True)
                                     for _ in range(u.n_state)]) for u, s, e in segments]
        # DL4J's WeightDecay: the weights' [start, end) in the flat buffers
        self._decayed = [(owner, off, off + size) for owner, name, shape, off, size in layout
                         if name in owner.weight_keys and owner.weight_decay]
        self._dropout_rng = np.random.default_rng([conf.seed, 1])
        for owner in owners:
            owner._rng = self._dropout_rng
        if params is not None and not share and not adopt:
            flat_p.assign(check_flat(params, total))
        return flat_p, flat_g, layout

    def _adopt(self, flat: tuple) -> None:
        # the flat buffers of _lay_out become the network's: the last step of building it
        self._params, self._grads, self._layout = flat
        # rnn_time_step's one-step path, (batch, input widths, run): built at the first call
        # of a batch size, over these layers' views (_one_step_path)
        self._step_plan: tuple | None = None
        self._managers: dict = {}
        self._presized: dict = {}
        self._segment_views: tuple = (None, None, [])

    def _check_init(self) -> None:
        if self._params is None:
            raise RuntimeError(f"{self._kind}: call init() first")

    def _exclusive(self, op: str, kind: int = FORWARD, writes: bool = False) -> Exclusive:
        # one network serves one thread at a time: a second caller fails at once, by name; its
        # owner may call back from a listener what is safe where it is (ndws.nn._busy). `op`:
        # a method of this network, or another class's "Class" or "Class.method"
        return Exclusive(self._busy, op if op[:1].isupper() else f"{self._kind}.{op}",
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
        src = check_flat(params, self.num_params())
        with self._exclusive("set_params", WRITE, writes=True):
            self._params.assign(src)

    def _copy_params_into(self, out: NDArray, op: str) -> None:
        # ndws.parallel's snapshots: the parameters into `out` (detached, num_params()
        # values), at an iteration boundary: never a copy torn by a fit in another thread
        self._check_init()
        params = self._params
        self._busy.snapshot(op, lambda: out.assign(params))

    def gradient(self) -> NDArray:
        """The flat gradient array of the last backward pass (layers' gradients are views)."""
        self._check_init()
        return self._grads

    @property
    def iteration(self) -> int:
        """Training iterations done so far (DL4J's iteration count; the next one's number)."""
        return self._iteration

    @iteration.setter
    def iteration(self, value: int) -> None:
        value = counter("iteration", value)
        with self._exclusive("iteration", FREE):
            self._iteration = value

    @property
    def epoch(self) -> int:
        """Epochs done so far (DL4J's epoch count)."""
        return self._epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        value = counter("epoch", value)
        with self._exclusive("epoch", FREE):
            self._epoch = value

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
        for owner, s, e in self._decayed:
            a, b = max(s, lo), min(e, hi)
            if a < b:
                upd = owner.updater or self.conf.updater
                w = self._params[a:b]
                ndws.multiply(w, 1.0 - upd.learning_rate_at(it, ep) * owner.weight_decay,
                              out=w)

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

    def _copy_state_from(self, other: "Model") -> None:
        # clone's copy: parameters, updater state and counters (at an iteration boundary)
        self._params.assign(other._params)
        for (_, _, _, mine), (_, _, _, theirs) in zip(other._segments, self._segments):
            for a, b in zip(mine, theirs):
                b.assign(a)
        self._iteration, self._epoch = other._iteration, other._epoch

    def clone(self) -> Any:
        """A new network of this type with the same configuration and a copy of the parameters
        and updater state (counters included). From another thread while this network trains,
        the copy is taken at the next iteration boundary (the caller waits for it); from a
        listener, at iteration_done or an epoch hook (inside an iteration: RuntimeError)."""
        self._check_init()
        other = type(self)(self.conf)
        other._build(None, share=False, sample=False)   # built first: the copy is all we wait for
        self._busy.snapshot(f"{self._kind}.clone", lambda: other._copy_state_from(self))
        return other

    def _owners(self) -> list:
        # every layer (and a graph's every vertex), in the order of the flat buffers
        return list(self.layers)

    def _backward_order(self) -> list[int]:
        # the owners (indices of _owners()) in the order the backward pass calls
        # _after_layer_gradients for them: the layers from the output layer down
        return list(range(len(self.layers) - 1, -1, -1))

    def _replica(self, share: str, stream: int) -> Any:
        """Another thread's copy of this network (ndws.parallel's workers), its dropout drawn
        from its own stream. `share`: "none" copies everything (as clone); "trainable" makes
        the parameters the updater changes this network's own views (one shared parameter set:
        running statistics stay the replica's, as the forward pass writes them); "all" gives an
        inference-only network on this network's flat parameter array itself (no copy, no
        gradients, no updater state: nothing may train it)."""
        if share == "all":
            other = type(self)(self.conf)
            other._build(self._params, share=True)
        elif share in ("none", "trainable"):
            other = self.clone()
            if share == "trainable":
                for mine, theirs in zip(self._owners(), other._owners()):
                    for name, view in mine.params.items():
                        if mine.trainable(name):
                            theirs.params[name] = view
        else:
            raise ValueError(f"share: expected 'none', 'trainable' or 'all', got {share!r}")
        other._dropout_rng = np.random.default_rng([self.conf.seed, 1, stream])
        for owner in other._owners():
            owner._rng = other._dropout_rng
        return other

    # -- the step around a pass -------------------------------------------------------------------

    def _fit_batch(self, batch: Any, on_iteration: Any = None) -> None:
        # one iteration on the batch, or with truncated BPTT one per segment of it (the
        # network's _fit_tbptt); on_iteration() after each (the epoch's record and progress bar)
        if self.conf.backprop_type is BackpropType.TRUNCATED_BPTT:
            self._fit_tbptt(batch, on_iteration)
            return
        self._fit_step(batch, None)
        if on_iteration is not None:
            on_iteration()

    def _fit_step(self, batch: Any, state: str | None) -> None:
        # one training step, its two halves written once for every trainer (ParallelWrapper's
        # SHARED_GRADIENTS round and MPITrainer's step call the same parts around their
        # combination of the gradients). From the forward pass to the update the iteration
        # writes the parameters: copies for other threads wait for its end (ndws.nn._busy); a
        # raise leaves it to fit's exit. `state`: "tbptt" for a segment of truncated BPTT
        self._busy.begin()
        self._compute_step(batch, state)
        self._gradient_done()
        self._update(0, int(self._params.shape[0]))
        done = self._count_iteration()
        self._busy.end()                   # the boundary: iteration_done may copy or save
        self._iteration_done(done)

    def _compute_step(self, batch: Any, state: str | None = None) -> float:
        # the compute half of a step: forward and backward on `batch` in the training layout,
        # the gradients in the flat buffer, the score and the batch's rows recorded
        score = self._gradient_and_score(batch, self._train_mode(), state)
        self._score = score
        self.last_batch_size = int(batch.num_examples())
        return score

    def _gradient_done(self) -> None:
        # the gradient the update will apply is final (a trainer's combined one, after it set
        # _score and last_batch_size to the combined step's): DL4J's onGradientCalculation
        for listener in self._listeners:
            listener.on_gradient_calculation(self)

    def _count_iteration(self) -> int:
        # the apply half ends: the iteration counted; returns its number for _iteration_done
        done = self._iteration
        self._iteration += 1
        return done

    def _iteration_done(self, done: int) -> None:
        # after the iteration boundary (the busy mark ended): the listeners' iteration_done
        for listener in self._listeners:
            listener.iteration_done(self, done, self._epoch)
        # DL4J asks the memory manager once per iteration; it collects only when its occasional
        # GC is configured (off by default), so fit never triggers a collection on its own
        _memory_manager.invoke_gc_occasionally()

    def _training_pass(self, run: Any) -> float:
        # The forward and backward pass of an iteration (`run`, returning the score): the
        # forward pass's listeners and the layers run inside it (marked for nested calls,
        # ndws.nn._busy), the backward pass's listeners after it, with every workspace of the
        # pass closed; every path of every network surrounds its pass with this, so none can
        # miss a hook another calls.
        busy, around = self._busy, self._busy.inside
        busy.inside = _IN_TRAINING
        try:
            score = run()
        finally:
            busy.inside = around
        for listener in self._listeners:
            listener.on_backward_pass(self)
        return score

    def _fit_loop(self, data: Any, labels: Any, batch_size: Any, epochs: int | None,
                  progress: bool | None, shuffle: bool = False, seed: int | None = None,
                  validate: Any = None, stop: Any = None) -> History:
        # fit's epochs (both network types, their fit's arguments checked), also driven by the
        # tools around the training loop (ndws.nn.earlystopping): `epochs` None runs until
        # `stop` says so; `stop()` (None: never) is asked after each batch (True abandons the
        # epoch there: no end record, no validation, no on_epoch_end, as DL4J's early stopping
        # does) and after each epoch; `validate` is the epoch's held-out score (_Epoch). Each
        # network type says what an epoch reads (_epoch_data: its shuffled rows) and which
        # iterator it prefetches (_prefetch)
        history = History(epochs)
        if stop is not None:
            # the driver's stop test answers a non-finite score (early stopping ends the run
            # on it, saying so): no warning as well
            history._warned = True
        with self._exclusive("fit", TRAIN):
            wrapper = self._prefetch(data, labels)
            if wrapper is not None:
                data = wrapper
            try:
                for _ in (range(epochs) if epochs is not None else itertools.count()):
                    x, y, size = self._epoch_data(data, labels, batch_size, shuffle, seed)
                    self._fit_epoch(x, y, size, progress, history, validate, stop)
                    if stop is not None and stop():
                        break
            except _Abandoned:
                pass                           # stop() ended the fit inside an epoch
            finally:
                history._close()
                if wrapper is not None:
                    wrapper.shutdown()
        return history

    def _prefetch(self, data: Any, labels: Any) -> Any:
        # the asynchronous iterator fit reads `data` through (shut down at fit's end), or None
        return None

    def _epoch_data(self, data: Any, labels: Any, batch_size: Any, shuffle: bool,
                    seed: int | None) -> tuple:
        # what an epoch reads: (data, labels, batch_size) for _fit_epoch
        return data, labels, batch_size

    def _epoch_length(self, data: Any, labels: Any, batch_size: Any) -> int | None:
        # the batches of an epoch of fit's `data` (None: unknown), for progress bars and the
        # trainers' rounds
        return batch_count(data, labels, batch_size)

    def _fit_epoch(self, data: Any, labels: Any, batch_size: Any, progress: bool | None,
                   history: History, validate: Any = None, stop: Any = None) -> None:
        with _Epoch(self, self._listeners, history, self._epoch_length(data, labels, batch_size),
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
                if stop is not None and stop():
                    raise _Abandoned
        _end_of_epoch(data, labels)

    # -- workspace modes ------------------------------------------------------------------------

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

    def _build_manager(self, mode: WorkspaceMode, training: bool, act: str | None
                       ) -> LayerWorkspaceMgr:
        # the manager of a phase in a (resolved) mode; `act`: in SEPARATE, the workspace of a
        # pass's activations (inference) or epsilons (training), which the network re-points
        # per layer (the ping-pong pair, a graph's pool)
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
            if act is not None:
                b.with_(ArrayType.ACTIVATION_GRAD, act, c[act])
        elif act is not None:
            # inference: the activations in `act`; what a layer keeps for a backward pass that
            # will not come (output(train=True): dropout masks, pre-activations) is working
            # memory of that layer's pass
            b.with_(ArrayType.ACTIVATIONS, act, c[act])
        return b.default_workspace(WS_LAYER_WORKING_MEM, c[WS_LAYER_WORKING_MEM]).build()

    @staticmethod
    def _check_location(layer: Any, t: ArrayType, array: Any, mgr: LayerWorkspaceMgr,
                        op: str, who: str = "") -> None:
        # what a layer, vertex or preprocessor (`who` names it) returns must live where its
        # ArrayType says (the classic mistake: an activation left in the layer's working
        # memory, gone when that scope closes)
        who = who or _checks.where(layer)
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

    def _run_preprocessor(self, pre: Any, a: NDArray, mgr: LayerWorkspaceMgr, backward: bool,
                          who: str) -> NDArray:
        # a preprocessor (`who` names it), forward on its layer's input or backward on the
        # layer's epsilon, inside the layer's scopes; its result is a view of its argument
        # (living as long) or an array of the type's workspace
        if backward:
            out, t, op = pre.backprop(a, mgr), ArrayType.ACTIVATION_GRAD, "backprop"
        else:
            out, t, op = pre.pre_process(a, mgr), ArrayType.ACTIVATIONS, "pre_process"
        if out is not a and (not isinstance(out, NDArray) or out.workspace_id != a.workspace_id):
            self._check_location(None, t, out, mgr, op, who)
        return out

    def _presize(self, batch: int, length: int | None) -> None:
        # before a thread's first pass with this batch size (and number of time steps, for a
        # time series of varying length: the network's _plan_length): create the workspaces
        # at the size the plan says for training and inference, so even the first pass does
        # not spill (they go on learning as configured); a custom layer or vertex without
        # memory_use leaves them to learn. A longer batch later makes them spill once and
        # grow (SpillPolicy.REALLOCATE): the next such batch fits
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
            uses = self._memory_uses(batch, training, size, length)
            if any(u is None for u in uses):
                return
            plans.append(self._memory_plan(uses, mode, training))
        wsm = get_workspace_manager()
        for name, nbytes in merge(*plans).items():
            if nbytes and not wsm.check_if_workspace_exists(name):
                wsm.create_new_workspace(self._configs[name].replace(initial_size=nbytes), name)

    @staticmethod
    def _scope(mgr: LayerWorkspaceMgr, mode: WorkspaceMode, t: ArrayType) -> Any:
        # a per-layer scope: none in SINGLE mode, whose one workspace is entered once per
        # iteration (entering it again would start a new cycle under the layers' feet)
        if mode is WorkspaceMode.SINGLE:
            return contextlib.nullcontext()
        return mgr.notify_scope_entered(t)

    # -- recurrent state (rnn_time_step, truncated BPTT) ---------------------------------------

    def rnn_get_previous_state(self, layer: Any) -> dict[str, NDArray]:
        """Copies of the state recurrent layer `layer` (an index of a MultiLayerNetwork, a
        vertex name of a ComputationGraph) carries between `rnn_time_step` calls:
        {"prevAct": (n, n_out)} (and "prevMem", the cell, for an LSTM); empty when none."""
        found = self._recurrent(layer, "rnn_get_previous_state")
        with self._exclusive("rnn_get_previous_state", STATE):
            return found.rnn_get_previous_state()

    def rnn_set_previous_state(self, layer: Any, state: dict) -> None:
        """Set the state recurrent layer `layer` starts the next `rnn_time_step` from (arrays
        of (n, n_out) under the keys `rnn_get_previous_state` gives; copied)."""
        found = self._recurrent(layer, "rnn_set_previous_state")
        with self._exclusive("rnn_set_previous_state", STATE):
            found.rnn_set_previous_state(state)

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

    @contextlib.contextmanager
    def _all_states_or_none(self) -> Iterator[None]:
        # rnn_time_step moves every recurrent layer's state or none: when a layer fails (a
        # batch of another size than its state's, a Bidirectional, a bad input further up)
        # after layers below it have stepped, theirs go back to what the call started from
        kept = [(layer, layer._state_snapshot()) for layer in self.layers
                if hasattr(layer, "_state_snapshot")]
        try:
            yield
        except BaseException:
            for layer, snapshot in kept:
                layer._state_restore(snapshot)
            raise

    @staticmethod
    def _recurrent_layer(layer: Any, where: str, op: str) -> Any:
        # `layer` (named `where`) if it keeps rnn_time_step state
        if not hasattr(layer, "rnn_get_previous_state"):
            raise ValueError(f"{op}: {where} ({type(layer).__name__}) is not a recurrent layer "
                             f"(it keeps no state)")
        return layer

    def _one_step_path(self, xs: tuple) -> Any:
        # rnn_time_step's path for one step of a batch of the last size (text generation:
        # batch 1, one step at a time), both network types: the plan _build_step_plan made for
        # the batch size (the layers' and vertices' step runners in order, the stored state
        # read and written as on the general path, no workspace, no per-layer Python beyond
        # the kernel call), built at the first call of a size. None (the general path, which
        # says what is wrong with an input) for anything else: a network without such a plan,
        # inputs other than valid 2-D arrays of the network's dtype, rows and widths, a debug
        # mode
        if _core._get_debug_mode() != 0 or not xs:
            return None
        dtype, rows = self.conf.dtype, None
        for x in xs:
            if not isinstance(x, (NDArray, np.ndarray)) or x.ndim != 2 or x.dtype != dtype:
                return None
            if isinstance(x, NDArray) and x.stale is not None:
                return None               # from a closed workspace: the general path says so
            if rows is None:
                rows = x.shape[0]
            elif x.shape[0] != rows:
                return None
        if not rows:
            return None
        plan = self._step_plan
        if plan is None or plan[0] != rows:
            # a refusal is kept too: what decides it (the layers, their preprocessors, user
            # code) is fixed once the network is built
            plan = self._step_plan = (rows,) + (self._build_step_plan(rows) or (None, None))
        run = plan[2]
        if run is None or len(xs) != len(plan[1]) or any(x.shape[1] != w
                                                         for x, w in zip(xs, plan[1])):
            return None
        return run

    def _build_step_plan(self, batch: int) -> tuple | None:
        # (each input's width, run) of the one-step path for batches of `batch` rows (run:
        # a step_program), or None when the network has none
        return None

    @staticmethod
    def _one_step_series(x: Any, t: Any, reader: Any, name: str) -> tuple[Any, bool]:
        # rnn_time_step's input `x` (argument `name`) of time-series type `t` read by layer
        # `reader`: a 2-D (n, size) array is one step of each, made a series of one step (but
        # the (n, time) indices of an EmbeddingSequenceLayer); returns (array, whether it was
        # one step). A wrong one step is refused here, in the caller's terms (the series it
        # would become is not what the caller gave)
        a = x if isinstance(x, (NDArray, np.ndarray)) else np.asarray(x)
        one_step = getattr(a, "ndim", 0) == 2 and not isinstance(reader, EmbeddingSequenceLayer)
        if one_step:
            length = t.time_series_length
            if length not in (None, 1):
                raise ValueError(f"{name}: the input type {t!r} fixes the series at {length} "
                                 f"steps, so rnn_time_step takes all {length} at once, not one "
                                 f"step of shape {tuple(a.shape)}")
            if t.size is not None and a.shape[1] != t.size:
                raise ValueError(f"{name}: one step of each sequence is (n_samples, size="
                                 f"{t.size}), got shape {tuple(a.shape)}")
            a = a.reshape((a.shape[0], a.shape[1], 1) if t.data_format.name == "NCW"
                          else (a.shape[0], 1, a.shape[1]))
        return a, one_step

    @staticmethod
    def _time_axis(t: Any) -> int:
        # the time axis of a time series of type t (NCW when not known)
        return 1 if t is not None and t.data_format is not None and \
            t.data_format.name == "NWC" else 2

    @staticmethod
    def _check_output_workspace(output_workspace: Any) -> None:
        if output_workspace is None:
            return
        if not isinstance(output_workspace, ndws.Workspace):
            raise TypeError(f"output_workspace: expected an open ndws.Workspace, got "
                            f"{type(output_workspace).__name__}")
        if output_workspace.thread_ident != threading.get_ident():
            # open or not there, it is another thread's: say so rather than "not open"
            raise ndws.WorkspaceError(
                f"output_workspace: workspace [{output_workspace.id}] belongs to thread "
                f"{output_workspace.thread_ident} and can't be used from thread "
                f"{threading.get_ident()}", "thread", output_workspace.id)
        if not output_workspace.is_scope_active:
            raise ndws.WorkspaceError(
                f"output_workspace: workspace [{output_workspace.id}] is not open; open it "
                f"before calling output (closing it stays the caller's job)", "closed",
                output_workspace.id)

    # -- listeners ----------------------------------------------------------------------------

    def set_listeners(self, *listeners: TrainingListener) -> None:
        """Replace the listeners (hooks in docs/networks.md, "Listeners")."""
        self._listeners = listener_list(listeners)

    def add_listeners(self, *listeners: TrainingListener) -> None:
        self._listeners = self._listeners + listener_list(listeners)

    def get_listeners(self) -> list[TrainingListener]:
        return list(self._listeners)

    def _forward_listeners(self) -> list:
        # the listeners that look at the activations (overriding on_forward_pass): for the
        # others the forward pass keeps no list and, compiled, computes no probabilities
        return [l for l in self._listeners
                if type(l).on_forward_pass is not TrainingListener.on_forward_pass]

    def _notify_forward(self, acts: Any, mode: WorkspaceMode) -> None:
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
            copies = ({k: a.dup() for k, a in acts.items()} if isinstance(acts, dict)
                      else [a.dup() for a in acts])
            for listener in listening:
                listener.on_forward_pass(self, copies)

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
    def load(cls, path: Any, load_updater: bool = True) -> Any:
        """A network saved by `save`; with the updater state it resumes training exactly. A
        file of the other network type is refused, naming the type it holds."""
        return load_network(cls, path, load_updater)
