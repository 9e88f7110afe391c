"""`ComputationGraph`: a network of any directed acyclic graph of layers and vertices, with
several inputs and several outputs (DL4J's ``ComputationGraph``), trained and served with every
temporary in workspaces, laid out as its `ndws.WorkspaceMode` says (docs/graphs.md).

The vertices run in the configuration's topological order, forward, and in reverse for the
backward pass; the parameters are flattened in that order, so a `MultiLayerNetwork` and its
`to_computation_graph()` hold the same parameter vector and train to the same bits.

In the SEPARATE layout each vertex's activations (inference) or epsilons (training) live in a
workspace of a pool, ``WS_LAYER_ACT_<k>``, opened at the vertex's step and closed at the end of
the step of its last consumer (the pool is as large as the widest cut of the graph, not as the
graph): DL4J's reference counting, with the slots assigned once from the graph's shape.

Examples
--------
>>> import numpy as np
>>> from ndws.nn import (ComputationGraph, ComputationGraphConfiguration, DenseLayer,
...                      InputType, OutputLayer, Adam)
>>> conf = (ComputationGraphConfiguration.builder(seed=0, updater=Adam(0.05))
...         .add_inputs("a", "b")
...         .add_layer("ha", DenseLayer(n_out=4, activation="tanh"), "a")
...         .add_layer("hb", DenseLayer(n_out=4, activation="tanh"), "b")
...         .add_layer("h", DenseLayer(n_out=8, activation="tanh"), "ha", "hb")   # merged
...         .append_layer("out", OutputLayer(n_out=2, activation="softmax"))
...         .set_outputs("out")
...         .set_input_types(InputType.feed_forward(1), InputType.feed_forward(1))
...         .build())
>>> g = ComputationGraph(conf)
>>> g.init()
>>> a = np.array([[0.], [0.], [1.], [1.]], dtype=np.float32)
>>> b = np.array([[0.], [1.], [0.], [1.]], dtype=np.float32)
>>> y = np.eye(2, dtype=np.float32)[[0, 1, 1, 0]]                 # XOR of the two inputs
>>> _ = g.fit([a, b], [y], epochs=300)
>>> g.output(a, b)[0].numpy().argmax(axis=1).tolist()
[0, 1, 1, 0]
"""
from __future__ import annotations

import contextlib
import traceback
from typing import Any, Iterable

import numpy as np

import ndws
from ndws import _core
from ndws._core import NDArray, _np_view
from ndws.data.async_iterators import _prefetch_for_fit
from ndws.data.dataset import DataSet, MultiDataSet
from ndws.evaluation._evaluate import check_evaluations, count as count_batch
from ndws.nn import _checks
from ndws.nn._busy import FORWARD, TRAIN
from ndws.nn._layout import (WS_ALL_LAYERS_ACT, WS_LAYER_WORKING_MEM, WS_OUTPUT_MEM, layer_act,
                             workspace_configs)
from ndws.nn._fit_options import (_correct, check_seed, labels_array, reiterable,
                                  shuffled_order)
from ndws.nn._model import (_IN_FORWARD, Model, count, fit_options, index_reader,
                            index_time_axis, input_array, layer_step_runner, step_program,
                            steps_one_at_a_time)
from ndws.nn.conf import BackpropType
from ndws.nn.graph.conf import ComputationGraphConfiguration
from ndws.nn.graph.memory import graph_plan
from ndws.nn.history import History, _Progress
from ndws.nn.inputs import InputType, check_input_shape
from ndws.nn.layers.base import Layer
from ndws.nn.layers.wrappers import FrozenLayer
from ndws.nn.memory_report import MemoryReport, uses_of
from ndws.nn.network import (_PLAN_MODES, _declared_shape, _dense_plan, _finite_mask,
                              _mask_steps, _segment_labels, _segment_mask, _steps,
                              check_features_mask)
from ndws.nn.preprocessors import MaskState
from ndws.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr
from ndws.workspace import WorkspaceMode, get_workspace_manager, scope_out_of_workspaces

__all__ = ["ComputationGraph"]

_A, _G = ArrayType.ACTIVATIONS, ArrayType.ACTIVATION_GRAD
_INPUT, _LAYER, _VERTEX = 0, 1, 2


class _Node:
    """One vertex of the running graph, at its topological position `pos`."""

    __slots__ = ("name", "pos", "kind", "obj", "pre", "ins", "consumers", "output", "shape",
                 "checked", "backprop", "wants_grad", "act_slot", "grad_slot", "where")

    def __init__(self, name: str, pos: int, kind: int, obj: Any, pre: Any):
        self.name, self.pos, self.kind, self.obj, self.pre = name, pos, kind, obj, pre
        self.ins: list[int] = []             # the positions of its inputs, in order
        self.consumers: list[int] = []       # the positions reading it (once per edge)
        self.output = -1                     # its index among the graph's outputs
        self.shape: tuple = ()               # a layer's declared output shape per example
        self.checked = False                 # user code: what its passes return is checked
        self.backprop = False                # the backward pass runs it
        self.wants_grad = False              # an epsilon for it is needed
        self.act_slot: int | None = None     # SEPARATE inference: its pooled workspace
        self.grad_slot: int | None = None    # SEPARATE training: its epsilons' workspace
        self.where = ""


def _refuse_stale(a: NDArray, label: str) -> None:
    # an input from a closed workspace is refused before any vertex runs: a pass failing at
    # the vertex that reads it would have moved what the vertices before it keep (running
    # statistics, a recurrent layer's stored state)
    if a.stale is not None:
        _core.check(a, "input", label)


def _pool(steps: Iterable[int], opens: dict) -> tuple[dict, int]:
    # DL4J's free list of workspace managers, run once on the graph's shape: at step p a
    # node of `opens` (p -> the step whose end closes it) takes the most recently freed slot
    # (or a new one); at the end of step p the slots closing there are freed. Returns
    # {p: slot} and the number of slots (the widest cut).
    free: list[int] = []
    closing: dict[int, list] = {}
    slots, n = {}, 0
    for p in steps:
        if p in opens:
            if free:
                k = free.pop()
            else:
                k, n = n, n + 1
            slots[p] = k
            closing.setdefault(opens[p], []).append(k)
        free.extend(closing.pop(p, ()))
    return slots, n


class ComputationGraph(Model):
    """A network of `conf`'s vertices (DL4J's ``ComputationGraph``).

    Parameters
    ----------
    conf : ComputationGraphConfiguration

    Call `init` before using it. Inputs are given in `add_inputs` order, labels in
    `set_outputs` order; the outputs' scores are summed. One graph serves one thread at a time,
    as a `MultiLayerNetwork` does (docs/networks.md, "Threads, listeners and snapshots").
    """

    _kind = "ComputationGraph"
    _conf_class = ComputationGraphConfiguration
    _layer_hook = True

    def __init__(self, conf: ComputationGraphConfiguration):
        self._init_state(conf)
        self._nodes: list[_Node] = []
        self._pass_inputs: dict = {}

    # -- building -------------------------------------------------------------------------------

    def init(self, params: Any = None) -> None:
        """Build the vertices, lay their parameters out in one flat array (topological order)
        and initialise them from the seed (or copy `params`, a flat array of `num_params()`
        values)."""
        with self._exclusive("init", TRAIN, writes=True):
            self._build(params, share=False)

    def _build(self, params: Any, share: bool, sample: bool = True, adopt: bool = False
               ) -> None:
        # share=True: an inference-only graph whose parameters are views of `params` (a
        # detached flat array laid out as this configuration's); adopt=True: the same views,
        # trained in place (TransferLearningHelper's frozen and unfrozen parts: Model._lay_out)
        conf = self.conf
        order = conf.topological_order
        position = {name: p for p, name in enumerate(order)}
        inputs = set(conf.network_inputs)
        tbptt = conf.backprop_type is BackpropType.TRUNCATED_BPTT
        nodes, owners, layers = [], [], []
        for p, name in enumerate(order):
            if name in inputs:
                nodes.append(_Node(name, p, _INPUT, None, None))
                continue
            obj = conf.resolved_vertices[name].clone()
            if isinstance(obj, Layer):
                if tbptt and hasattr(obj, "back_length"):
                    # truncated BPTT: the errors of a segment flow back through its last
                    # tbptt_back_length steps (docs/recurrent.md)
                    obj.back_length = conf.tbptt_back_length
                obj.index = len(layers)
                layers.append(obj)
                pre = conf.resolved_preprocessors.get(name)
                node = _Node(name, p, _LAYER, obj, None if pre is None else pre.clone())
                node.shape = _declared_shape(obj)
            else:
                obj._network = self
                node = _Node(name, p, _VERTEX, obj, None)
            obj._where = node.where = f'vertices["{name}"] ({type(obj).__name__})'
            node.checked = _checks.user_code(obj)
            node.ins = [position[i] for i in conf.vertex_inputs[name]]
            nodes.append(node)
            owners.append(obj)
        for node in nodes:
            for i in node.ins:
                nodes[i].consumers.append(node.pos)
        for k, name in enumerate(conf.network_outputs):
            nodes[position[name]].output = k
        # what the backward pass runs: a vertex with trainable parameters or an output, and
        # every vertex between them and the inputs; a layer computes its input's epsilon only
        # where something upstream wants it (the first layers of a chain do not)
        for node in nodes:
            if node.kind == _INPUT:
                continue
            upstream = any(nodes[i].wants_grad for i in node.ins)
            if upstream and isinstance(node.obj, FrozenLayer) and not node.obj._with_backprop:
                # it would hand the trainable vertices it reads no epsilon (as a network's)
                below = next(nodes[i].name for i in node.ins if nodes[i].wants_grad)
                raise ValueError(f"{node.where} passes no gradient down, but \"{below}\" "
                                 f"below it trains: wrap it in FrozenLayerWithBackprop, or "
                                 f"freeze the vertices below it too")
            has_params = any(node.obj.trainable(k) for k in node.obj.param_shapes())
            node.wants_grad = has_params or upstream
            node.backprop = node.wants_grad or node.output >= 0
            if node.kind == _LAYER:
                node.obj.input_gradient_needed = upstream
        flat = self._lay_out(owners, params, share, sample, adopt)
        self.layers = layers
        self._nodes = nodes
        self._position = position
        # the pooled workspaces of the SEPARATE layout: inference keeps a vertex's activations
        # until its last consumer ran (outputs are detached or the caller's); training keeps a
        # vertex's epsilons until the first of its inputs (in topological order) read them. A
        # vertex whose epsilons nobody reads (the first layers) makes them, if at all, in the
        # working memory of its backward pass.
        act_opens = {n.pos: max(n.consumers) for n in nodes
                     if n.kind != _INPUT and n.output < 0 and n.consumers}
        grad_opens = {n.pos: min(n.ins) for n in nodes if n.kind != _INPUT and n.backprop
                      and any(nodes[i].wants_grad for i in n.ins)}
        act_slots, n_act = _pool(range(len(nodes)), act_opens)
        grad_slots, n_grad = _pool(range(len(nodes) - 1, -1, -1), grad_opens)
        for node in nodes:
            node.act_slot = act_slots.get(node.pos)
            node.grad_slot = grad_slots.get(node.pos)
        self._configs = workspace_configs(len(owners),
                                          tuple(layer_act(k) for k in range(max(n_act, n_grad))))
        # a chain of built-in dense layers trains on MultiLayerNetwork's compiled iteration
        # (ndws.nn._iteration), in that network's own workspace layout
        chain = (len(conf.network_inputs) == 1 and len(conf.network_outputs) == 1
                 and all(n.kind == _LAYER and n.pre is None and n.ins == [n.pos - 1]
                         for n in nodes[1:])
                 and nodes[-1].output == 0)
        self._dense_plan = (_dense_plan(layers, workspace_configs(len(layers)))
                            if chain and not share else None)
        self._adopt(flat)

    # -- lookups --------------------------------------------------------------------------------

    @property
    def topological_order(self) -> tuple:
        """Every vertex's name, inputs included, in the order the forward pass runs them."""
        return self.conf.topological_order

    def get_vertex(self, name: str) -> Any:
        """The vertex `name`: its layer for a layer vertex, its `GraphVertex` otherwise (None
        for a network input)."""
        self._check_init()
        p = self._position.get(name) if isinstance(name, str) else None
        if p is None:
            raise ValueError(f"get_vertex: no vertex named {name!r:.60} (vertices: "
                             f"{', '.join(self.conf.topological_order)})")
        return self._nodes[p].obj

    def get_layer(self, name: Any) -> Layer:
        """The layer of vertex `name` (or the `name`-th layer, in topological order)."""
        self._check_init()
        if isinstance(name, (int, np.integer)) and not isinstance(name, bool):
            return self.layers[name]
        obj = self.get_vertex(name)
        if not isinstance(obj, Layer):
            raise ValueError(f"get_layer: vertex {name!r} is a "
                             f"{'network input' if obj is None else type(obj).__name__}, not "
                             f"a layer")
        return obj

    def _owners(self) -> list:
        return [n.obj for n in self._nodes if n.obj is not None]

    def _owner_indices(self) -> dict:
        # each layer or vertex's position -> its index in _owners() (what the backward hook
        # is called with, and the flat layout's order)
        index = {id(owner): k for k, owner in enumerate(self._owners())}
        return {n.pos: index[id(n.obj)] for n in self._nodes if n.obj is not None}

    def _backward_order(self) -> list[int]:
        # the backward pass finishes the vertices in reverse topological order (_general_pass)
        index = self._owner_indices()
        return [index[n.pos] for n in reversed(self._nodes) if n.obj is not None]

    def _input_readers(self) -> list:
        # (vertex object, preprocessor) reading each network input, in add_inputs order
        nodes = [self._nodes[self._nodes[self._position[name]].consumers[0]]
                 for name in self.conf.network_inputs]
        return [(node.obj, node.pre) for node in nodes]

    def _state_layers(self) -> dict:
        # what a saved file names each layer's carried state by: its vertex name
        return {self._owner_name(layer): (self._owner_name(layer), layer)
                for layer in self.layers}

    def _recurrent(self, name: Any, op: str) -> Any:
        # the recurrent layer of vertex `name` (rnn_get/set_previous_state)
        self._check_init()
        if not isinstance(name, str):
            raise TypeError(f"{op}: expected a vertex name (str), got {name!r:.40}")
        obj = self.get_vertex(name)
        return self._recurrent_layer(obj, f'vertices["{name}"]', op)

    def n_layers(self) -> int:
        return len(self.conf.resolved_layers)

    def param_table(self) -> dict[str, NDArray]:
        """Every parameter by ``<vertex>_<param>`` (DL4J's keys: ``dense1_W``), views of the
        flat array, in its order."""
        self._check_init()
        return {f"{self._owner_name(owner)}_{name}": owner.params[name]
                for owner, name, _, _, _ in self._layout}

    def _owner_name(self, owner: Any) -> str:
        return owner._where.split('"')[1]

    # -- inputs ---------------------------------------------------------------------------------

    def _as_inputs(self, xs: Any, what: str = "inputs") -> list[NDArray]:
        # the graph's input arrays, one per input in add_inputs order, in the network's dtype,
        # each against its input type, all with the same number of examples
        names = self.conf.network_inputs
        if isinstance(xs, (NDArray, np.ndarray)) or not isinstance(xs, (list, tuple)):
            xs = [xs]
        if len(xs) != len(names):
            raise ValueError(f"{what}: the graph has {len(names)} input"
                             f"{'s' if len(names) != 1 else ''} ({', '.join(names)}), got "
                             f"{len(xs)} array{'s' if len(xs) != 1 else ''}")
        out = []
        for i, (x, name) in enumerate(zip(xs, names)):
            label = f"{what}[{i}] (input \"{name}\")"
            reader = self._nodes[self._nodes[self._position[name]].consumers[0]]
            if isinstance(x, NDArray):
                _refuse_stale(x, label)            # before anything reads it
            # an embedding's indices are checked as given, before the cast to the dtype
            a = input_array(x, self.conf.dtype, label, index_reader(reader.obj, reader.pre))
            t = self.conf.vertex_types.get(name)
            check_input_shape(tuple(a.shape), t, reader.where, f"the input type of \"{name}\"",
                              label, reader=reader.obj)
            out.append(a)
        rows = {a.shape[0] for a in out}
        if len(rows) > 1:
            raise ValueError(f"{what}: the inputs have different numbers of examples: "
                             + ", ".join(f"{n} {a.shape[0]}" for n, a in zip(names, out)))
        return out

    def _masks(self, masks: Any, xs: list, what: str) -> list:
        # the features masks of inputs `xs`: None, or one per input (None entries: none), each
        # checked against its input (as a network's: check_features_mask) in the network's
        # dtype
        n = len(xs)
        if masks is None:
            return [None] * n
        if not isinstance(masks, (list, tuple)) or len(masks) != n:
            raise ValueError(f"{what}: expected a list of {n} masks (None for none), got "
                             f"{masks!r:.60}")
        out = []
        for i, (m, x, name) in enumerate(zip(masks, xs, self.conf.network_inputs)):
            if m is None:
                out.append(None)
                continue
            if not isinstance(m, NDArray):
                m = labels_array(m, f"{what}[{i}]")
            m = check_features_mask(x, m, self.conf.vertex_types.get(name), f"{what}[{i}]")
            if m.dtype != self.conf.dtype:
                with scope_out_of_workspaces():
                    m = m.astype(self.conf.dtype)
            out.append(m)
        return out

    def _pass_input(self, name: str, vertex: Any) -> tuple:
        # for a vertex reading a network input by name (LastTimeStepVertex's mask, ...): the
        # (array, feature mask) of the pass in progress
        found = self._pass_inputs.get(name)
        if found is None:
            raise ValueError(f"{vertex._where}: no network input named {name!r} in this pass")
        return found

    def _labels(self, mds: MultiDataSet) -> tuple[list, list]:
        # the labels (and label masks) of a batch, one per output, as the network's dtype where
        # they are targets (class indices stay integers)
        outs = self.conf.network_outputs
        labels = list(mds.labels)
        if len(labels) != len(outs):
            raise ValueError(f"labels: the graph has {len(outs)} output"
                             f"{'s' if len(outs) != 1 else ''} ({', '.join(outs)}), got "
                             f"{len(labels)} labels array{'s' if len(labels) != 1 else ''}")
        lmasks = list(mds.labels_masks or [None] * len(labels))
        dt = self.conf.dtype
        with scope_out_of_workspaces():
            for k, y in enumerate(labels):
                if y.ndim >= 2 and y.dtype != dt:
                    labels[k] = y.astype(dt)
                m = lmasks[k]
                if m is not None:
                    _finite_mask(f"labels_masks[{k}]", m)
                    if m.ndim == 2 and m.shape[1] == 1:
                        m = m.reshape(m.shape[0])        # DL4J's (n, 1) per-example mask
                    lmasks[k] = m if m.dtype == dt else m.astype(dt)
        return labels, lmasks

    def _batch(self, item: Any, what: str) -> MultiDataSet:
        # a batch of fit / score / evaluation as a MultiDataSet (DL4J: a DataSet only for a
        # graph of one input and one output)
        if isinstance(item, MultiDataSet):
            return item
        if isinstance(item, DataSet):
            if len(self.conf.network_inputs) != 1 or len(self.conf.network_outputs) != 1:
                raise ValueError(f"{what}: Cannot train ComputationGraph network with multiple "
                                 f"inputs or outputs using a DataSet (this graph has "
                                 f"{len(self.conf.network_inputs)} inputs and "
                                 f"{len(self.conf.network_outputs)} outputs): use a "
                                 f"MultiDataSet")
            return MultiDataSet([item.features], [] if item.labels is None else [item.labels],
                                [item.features_mask],
                                None if item.labels is None else [item.labels_mask])
        raise TypeError(f"{what}: expected a MultiDataSet or a DataSet, got "
                        f"{type(item).__name__}")

    # -- workspace managers ---------------------------------------------------------------------

    def _manager(self, key: tuple) -> LayerWorkspaceMgr:
        # built once per (mode, training, role[, pooled slot]) and kept
        mgr = self._managers.get(key)
        if mgr is None:
            slot = key[3] if len(key) > 3 else None
            mgr = self._managers[key] = self._build_manager(
                key[0], key[1], None if slot is None else layer_act(slot))
        return mgr

    def _output_manager(self, mode: WorkspaceMode, output_ws: Any) -> LayerWorkspaceMgr:
        # the manager of an inference pass's outputs: their activations detached, or in the
        # caller's open workspace
        mgr = self._manager((mode, False, "out"))
        if mode is WorkspaceMode.NONE:
            return mgr
        if output_ws is None:
            mgr.set_scoped_out_for(_A)
        else:
            mgr.set_workspace(_A, output_ws.id, output_ws.config)
        return mgr

    # -- one vertex -----------------------------------------------------------------------------

    def _forward_node(self, node: _Node, ins: list, in_masks: list | None, training: bool,
                      mgr: LayerWorkspaceMgr, state: str | None = None) -> tuple:
        # the vertex's output from its inputs' activations, checked (a layer's preprocessor
        # first, in the same scopes), and its features mask with the mask's state (DL4J's
        # feedForwardMaskArray(s)): a layer takes its input's before it activates, a vertex
        # combines its inputs' by its rule. `in_masks`: each input's (mask, state) or None
        # (None: no mask in the pass). `state`: "step" or "tbptt", a recurrent layer's pass
        # from its stored state (rnn_time_step, truncated BPTT). Returns (output, mask)
        rows = ins[0].shape[0]
        obj = node.obj
        masks = None
        if node.kind == _LAYER:
            x = ins[0]
            masks = None if in_masks is None else in_masks[0]
            if node.pre is not None:
                node.pre.minibatch = rows      # rows of a time series do not say it
                x = self._run_preprocessor(node.pre, x, mgr, False,
                                           f"{node.where}.preprocessor "
                                           f"({type(node.pre).__name__})")
                if masks is not None:
                    masks = node.pre.feed_forward_mask(masks[0], masks[1], mgr)
            if masks is not None:
                masks = obj.feed_forward_mask(masks[0], masks[1], mgr)
                if masks[0] is None:
                    masks = None
            if state is not None and hasattr(obj, "activate_with_state"):
                out = obj.activate_with_state(x, training, mgr, state)
            else:
                out = obj.activate(x, training, mgr)
            if node.checked:
                _checks.returned(obj, "activate", out, (rows,) + node.shape, self.conf.dtype)
        else:
            out = obj.activate(list(ins), training, mgr)
            if node.checked:
                self._check_vertex_array(node, "activate", out, None, rows)
            if in_masks is not None and any(m is not None for m in in_masks):
                masks = self._vertex_mask(node, in_masks, rows)
        self._check_location(obj, _A, out, mgr, "activate")
        return out, masks

    def _enter_input(self, node: _Node, x: NDArray, fmask: Any, acts: list,
                     masks: list) -> None:
        # a pass reaches network input `node`: its array and features mask (ACTIVE) become
        # the position's, and vertices that name the input find them (_pass_input)
        acts[node.pos] = x
        masks[node.pos] = None if fmask is None else (fmask, MaskState.ACTIVE)
        self._pass_inputs[node.name] = (x, fmask)

    @staticmethod
    def _vertex_mask(node: _Node, in_masks: list, rows: int) -> tuple | None:
        # a vertex's output mask by its rule (outside every workspace: it outlives the step),
        # ACTIVE when one of its inputs' is (DL4J's MaskState: a mask that still applies)
        with scope_out_of_workspaces():
            m = node.obj.feed_forward_mask([None if m is None else m[0] for m in in_masks],
                                           rows)
        if m is None:
            return None
        states = [m[1] for m in in_masks if m is not None]
        return m, (MaskState.ACTIVE if MaskState.ACTIVE in states or not states
                   else states[0])

    def _check_vertex_array(self, node: _Node, op: str, array: Any, shape: tuple | None,
                            rows: int) -> None:
        # what a custom vertex returned: an NDArray of the network's dtype with `shape` (or,
        # for its output, one row per example)
        if not isinstance(array, NDArray):
            raise TypeError(f"{node.where}.{op} returned {type(array).__name__}, expected an "
                            f"ndws.NDArray")
        if array.dtype != self.conf.dtype:
            raise TypeError(f"{node.where}.{op} returned dtype {array.dtype}, expected "
                            f"{self.conf.dtype} (the network's dtype)")
        if shape is not None and tuple(array.shape) != shape:
            raise ValueError(f"{node.where}.{op} returned shape {tuple(array.shape)}, expected "
                             f"{shape} (its input's shape)")
        if shape is None and (array.ndim == 0 or array.shape[0] != rows):
            raise ValueError(f"{node.where}.{op} returned shape {tuple(array.shape)}, expected "
                             f"{rows} rows (one per example)")

    def _backward_node(self, node: _Node, eps: Any, ins: list, labels: list, lmasks: list,
                       mgr: LayerWorkspaceMgr) -> tuple[float, list]:
        # the vertex's backward pass: its gradients copied into the flat buffer, its inputs'
        # epsilons returned (None where nothing reads one), and an output layer's score
        obj, score = node.obj, 0.0
        dt = self.conf.dtype
        if node.kind == _LAYER:
            if node.output >= 0:
                if eps is not None:
                    raise ValueError(f"{node.where}: an output layer that other vertices also "
                                     f"read cannot be trained (its epsilon would come from its "
                                     f"labels and from them)")
                op = "compute_score_and_gradient"
                score, grads, e = _checks.output_result(obj, obj.compute_score_and_gradient(
                    labels[node.output], mgr, lmasks[node.output]))
            else:
                op = "backprop_gradient"
                grads, e = _checks.backprop_result(obj, obj.backprop_gradient(eps, mgr))
            _checks.gradients(obj, grads, node.checked)
            if not obj.input_gradient_needed:
                return score, [None]
            shape = self._layer_input_shape(node, ins[0])
            if node.checked:
                _checks.returned(obj, op, e, shape, dt)
            self._check_location(obj, _G, e, mgr, op)
            if node.pre is not None:
                e = self._run_preprocessor(node.pre, e, mgr, True,
                                           f"{node.where}.preprocessor "
                                           f"({type(node.pre).__name__})")
            return score, [e]
        if eps is None:
            raise ValueError(f"{node.where}: a vertex that is an output of the graph cannot be "
                             f"trained (only output layers have a loss)")
        result = obj.backprop_gradient(eps, mgr)
        if not isinstance(result, (tuple, list)) or len(result) != 2 \
                or not isinstance(result[1], (tuple, list)):
            raise TypeError(f"{node.where}.backprop_gradient must return (gradients dict, list "
                            f"of epsilons), got {_checks._kind(result)}")
        grads, es = result
        _checks.gradients(obj, grads, node.checked)
        if len(es) != len(ins):
            raise ValueError(f"{node.where}.backprop_gradient returned {len(es)} epsilons for "
                             f"its {len(ins)} inputs")
        es = list(es)
        for j, (e, x) in enumerate(zip(es, ins)):
            if node.checked:
                self._check_vertex_array(node, "backprop_gradient", e, tuple(x.shape), 0)
                # an epsilon handed to two inputs would be summed into twice: copy it
                if any(e is f or np.may_share_memory(_np_view(e), _np_view(f))
                       for f in es[:j]):
                    es[j] = e = mgr.dup(_G, e)
            self._check_location(obj, _G, e, mgr, "backprop_gradient")
        return score, es

    @staticmethod
    def _layer_input_shape(node: _Node, x: NDArray) -> tuple:
        # the shape of what the layer read: its input after the preprocessor
        pre = node.pre
        if pre is None:
            return tuple(x.shape)
        t = node.obj.input_type
        return (x.shape[0],) + tuple(t.shape()) if t is not None else tuple(x.shape)

    # -- inference ------------------------------------------------------------------------------

    def _run_forward(self, xs: list, fmasks: list, training: bool, mode: WorkspaceMode,
                     output_ws: Any, keep_all: bool = False, scoring: bool = False,
                     state: str | None = None) -> list:
        """The forward pass of an inference: every vertex up to the last output, in `mode`'s
        layout (SEPARATE: each vertex's activations in its pooled workspace, closed at the end
        of its last consumer's step). Returns each position's activation (detached copies of
        all with `keep_all`, else the outputs, detached or in `output_ws`). `scoring`: the
        output layers run a training pass (their loss needs it), the rest inference."""
        nodes = self._nodes
        n = len(nodes)
        last = n - 1 if keep_all else max(nodes[self._position[o]].pos
                                           for o in self.conf.network_outputs)
        if not keep_all and not scoring:
            self._presize(xs[0].shape[0], self._plan_length(xs))
        acts: list[Any] = [None] * n
        masks: list[Any] = [None] * n
        kept: list[Any] = [None] * n
        closing: dict[int, list] = {}
        out_mgr = self._output_manager(mode, output_ws)
        mgr = self._manager((mode, False, ""))
        for x in xs:
            if x.workspace_id is not None:
                mgr.set_no_leverage_override(x.workspace_id)     # never copy the caller's input
                out_mgr.set_no_leverage_override(x.workspace_id)
        any_mask = any(m is not None for m in fmasks)
        k = 0
        busy, around = self._busy, self._busy.inside
        self._pass_inputs = {}
        with scope_out_of_workspaces():
            whole = (mgr.notify_scope_entered(_A) if mode is WorkspaceMode.SINGLE
                     else contextlib.nullcontext())
            busy.inside = _IN_FORWARD
            try:
                with whole:
                    for p in range(last + 1):
                        node = nodes[p]
                        if node.kind == _INPUT:
                            self._enter_input(node, xs[k], fmasks[k], acts, masks)
                            k += 1
                            if keep_all:
                                kept[p] = xs[k - 1].detach()
                            continue
                        if node.output >= 0 and not keep_all:
                            m = out_mgr
                        elif mode is WorkspaceMode.SEPARATE and node.act_slot is not None:
                            m = self._manager((mode, False, "act", node.act_slot))
                            if x_ws := [x.workspace_id for x in xs if x.workspace_id]:
                                for w in x_ws:
                                    m.set_no_leverage_override(w)
                            ws = m.notify_scope_entered(_A)
                            closing.setdefault(max(node.consumers), []).append(ws)
                        else:
                            m = mgr
                        with self._scope(m, mode, ArrayType.FF_WORKING_MEM):
                            acts[p], masks[p] = self._forward_node(
                                node, [acts[i] for i in node.ins],
                                [masks[i] for i in node.ins] if any_mask else None,
                                training or (scoring and node.output >= 0), m, state)
                        if keep_all:
                            kept[p] = acts[p].detach()
                        for ws in closing.pop(p, ()):
                            ws.close()
                    if not scoring:
                        # the outputs: detached (or the caller's) already; the rest of the
                        # pass's arrays go with their workspaces
                        result = kept if keep_all else [acts[self._position[o]]
                                                        for o in self.conf.network_outputs]
                    else:
                        result = acts
            finally:
                busy.inside = around
                for group in closing.values():
                    for ws in group:
                        ws.close()
                self._pass_inputs = {}
                if not scoring:
                    self._clear()
        return result

    def _clear(self) -> None:
        # what the last pass kept on the vertices and preprocessors (DL4J's clear)
        for node in self._nodes:
            if node.obj is not None:
                node.obj.clear()
            if node.pre is not None:
                node.pre.clear()

    def output(self, *inputs: Any, train: bool = False, output_workspace: Any = None,
               masks: Any = None) -> list[NDArray]:
        """The graph's outputs for `inputs` (one array per network input, in `add_inputs`
        order), a list in `set_outputs` order: detached arrays, or arrays in
        `output_workspace`, an open workspace of the caller. `masks`: a feature mask per input
        (None entries: none). Works whether or not the caller has a workspace open; the
        graph's own workspaces never leak into the caller's scope."""
        self._check_init()
        with self._exclusive("output", FORWARD, writes=bool(train)):
            xs = self._as_inputs(list(inputs))
            fmasks = self._masks(masks, xs, "masks")
            self._check_output_workspace(output_workspace)
            mode = self._inference_mode() if not train else self._train_mode()
            return self._run_forward(xs, fmasks, bool(train), mode, output_workspace)

    def output_single(self, *inputs: Any, train: bool = False, output_workspace: Any = None,
                      masks: Any = None) -> NDArray:
        """The one output of a graph with exactly one (DL4J's ``outputSingle``)."""
        self._check_init()
        if len(self.conf.network_outputs) != 1:
            raise RuntimeError(f"Cannot use output_single with ComputationGraph that does not "
                               f"have exactly 1 output. nOutputs: "
                               f"{len(self.conf.network_outputs)}")
        return self.output(*inputs, train=train, output_workspace=output_workspace,
                           masks=masks)[0]

    def feed_forward(self, *inputs: Any, train: bool = False, masks: Any = None
                     ) -> dict[str, NDArray]:
        """Every vertex's output for `inputs` (the inputs too), by name, each detached."""
        self._check_init()
        with self._exclusive("feed_forward", FORWARD, writes=bool(train)):
            xs = self._as_inputs(list(inputs))
            fmasks = self._masks(masks, xs, "masks")
            kept = self._run_forward(xs, fmasks, bool(train), WorkspaceMode.NONE, None,
                                     keep_all=True)
            return {node.name: kept[node.pos] for node in self._nodes}

    # -- scores ---------------------------------------------------------------------------------

    def score(self, data: Any = None) -> float:
        """The score (the outputs' losses summed, plus regularisation once) of the last
        training iteration, or of `data` (a MultiDataSet, or a DataSet for a graph of one input
        and one output: an inference pass, no dropout, nothing updated)."""
        if data is None:
            return self._score
        self._check_init()
        mds = self._batch(data, "data")
        if mds.num_examples() == 0:
            raise ValueError("score: no examples (the data has 0 rows)")
        with self._exclusive("score"):
            return self._forward_score(mds, False)

    def score_examples(self, data: Any, add_regularization: bool = True) -> NDArray:
        """Each example's score in `data` (the outputs' losses summed; an inference pass), with
        the regularisation terms added to each when `add_regularization`; detached (n,)."""
        self._check_init()
        mds = self._batch(data, "data")
        if not isinstance(add_regularization, bool):
            raise TypeError(f"add_regularization: expected a bool, got "
                            f"{type(add_regularization).__name__}")
        with self._exclusive("score_examples"):
            per = self._forward_score(mds, True)
            if add_regularization:
                reg = self._regularization()
                if reg:
                    ndws.add(per, reg, out=per)
            return per

    def _forward_score(self, mds: MultiDataSet, per_example: bool) -> Any:
        # DL4J's score(ds): inference for every vertex (running statistics, no dropout), the
        # output layers' training pass only keeping their pre-activations for the loss
        xs = self._as_inputs(list(mds.features), "features")
        fmasks = self._masks(mds.features_masks, xs, "features_masks")
        labels, lmasks = self._labels(mds)
        outs = [self._output_layer(o) for o in self.conf.network_outputs]
        mgr = self._manager((WorkspaceMode.NONE, True, ""))
        saved = [getattr(o, "_rng", None) for o in self.layers]
        try:
            for layer in self.layers:
                layer._rng = None                  # no dropout when scoring
            self._run_forward(xs, fmasks, False, WorkspaceMode.NONE, None, scoring=True)
            with scope_out_of_workspaces():
                total = None if per_example else 0.0
                rows, dt = xs[0].shape[0], self.conf.dtype
                for k, layer in enumerate(outs):
                    if per_example:
                        per = layer.compute_score_examples(labels[k], mgr, lmasks[k])
                        if _checks.user_code(layer):
                            _checks.returned(layer, "compute_score_examples", per, (rows,), dt)
                        total = per if total is None else ndws.add(total, per, out=total)
                    else:
                        total += _checks.real(layer, "compute_score",
                                              layer.compute_score(labels[k], mgr, lmasks[k]))
        finally:
            for layer, r in zip(self.layers, saved):
                layer._rng = r
            self._clear()
        return total if per_example else total + self._regularization()

    def _regularization(self) -> float:
        # the vertices' l1/l2 terms of the score, once (DL4J adds them with the first output)
        return sum(_checks.real(n.obj, "regularization_score", n.obj.regularization_score())
                   for n in self._nodes if n.obj is not None)

    def _output_layer(self, name: str) -> Layer:
        obj = self._nodes[self._position[name]].obj
        if not hasattr(obj, "compute_score_and_gradient"):
            raise ValueError(f"output \"{name}\" ({type(obj).__name__}) is not an output layer "
                             f"(OutputLayer, LossLayer, ...): only output layers have a loss")
        return obj

    # -- training -------------------------------------------------------------------------------

    def compute_gradient_and_score(self, data: Any) -> float:
        """Forward and backward on `data` (a MultiDataSet, or a DataSet for one input and one
        output) without updating (DL4J's ``computeGradientAndScore``): the gradients are left
        in `gradient()`; returns the score. Dropout is on, as in training."""
        self._check_init()
        mds = self._batch(data, "data")
        if mds.num_examples() == 0:
            raise ValueError("compute_gradient_and_score: no examples (the data has 0 rows)")
        with self._exclusive("compute_gradient_and_score", TRAIN, writes=True):
            self._score = self._gradient_and_score(mds, self._train_mode())
            return self._score

    def _gradient_and_score(self, mds: MultiDataSet, mode: WorkspaceMode,
                            state: str | None = None) -> float:
        # Forward and backward on a batch: the gradients in the flat buffer, the score
        # returned. SEPARATE: the activations in WS_ALL_LAYERS_ACT for the whole pass, each
        # vertex's working memory per pass, its epsilons in its pooled workspace until the
        # first of its inputs (in topological order) has read them; an input read by several
        # vertices has their epsilons summed into the first one's array.
        mds = self._batch(mds, "data")
        xs = self._as_inputs(list(mds.features), "features")
        rows = xs[0].shape[0]
        if rows == 0:
            raise ValueError(f"fit: no examples in the batch of iteration {self._iteration} "
                             f"(0 rows)")
        fmasks = self._masks(mds.features_masks, xs, "features_masks")
        labels, lmasks = self._labels(mds)
        for o in self.conf.network_outputs:
            self._output_layer(o)
        plan = self._dense_plan
        if (plan is not None and state is None and fmasks[0] is None and lmasks[0] is None
                and _core._get_debug_mode() == 0):
            names = [n.name for n in self._nodes]
            forward = ((lambda acts: self._notify_forward(dict(zip(names, acts)), mode))
                       if self._listeners and self._forward_listeners() else None)
            # + 0.0: the general path's regularization sum (no l1/l2 here)
            return self._training_pass(lambda: plan.run(
                _PLAN_MODES[mode], xs[0], labels[0], self._after_layer_gradients,
                forward) + 0.0)
        mgr = self._manager((mode, True, ""))
        for x in xs:
            if x.workspace_id is not None:
                mgr.set_no_leverage_override(x.workspace_id)
        self._presize(rows, self._plan_length(xs))
        return self._training_pass(
            lambda: self._general_pass(xs, fmasks, labels, lmasks, mgr, mode, state))

    def _general_pass(self, xs: list, fmasks: list, labels: list, lmasks: list,
                      mgr: LayerWorkspaceMgr, mode: WorkspaceMode, state: str | None = None
                      ) -> float:
        nodes = self._nodes
        n = len(nodes)
        acts: list[Any] = [None] * n
        masks: list[Any] = [None] * n
        eps: list[Any] = [None] * n
        closing: dict[int, list] = {}
        any_mask = any(m is not None for m in fmasks)
        separate = mode is WorkspaceMode.SEPARATE
        score = 0.0
        self._pass_inputs = {}
        hook = self._after_layer_gradients
        owner = self._owner_indices() if hook is not None else None
        with scope_out_of_workspaces():
            outer = (mgr.notify_scope_entered(_A) if mode is not WorkspaceMode.NONE
                     else contextlib.nullcontext())
            try:
                with outer:
                    k = 0
                    for p, node in enumerate(nodes):
                        if node.kind == _INPUT:
                            self._enter_input(node, xs[k], fmasks[k], acts, masks)
                            k += 1
                            continue
                        with self._scope(mgr, mode, ArrayType.FF_WORKING_MEM):
                            acts[p], masks[p] = self._forward_node(
                                node, [acts[i] for i in node.ins],
                                [masks[i] for i in node.ins] if any_mask else None, True, mgr,
                                state)
                    if self._listeners and self._forward_listeners():
                        self._notify_forward({nd.name: acts[nd.pos] for nd in nodes}, mode)
                    for p in range(n - 1, -1, -1):
                        node = nodes[p]
                        if node.backprop:
                            if separate:
                                name = (WS_LAYER_WORKING_MEM if node.grad_slot is None
                                        else layer_act(node.grad_slot))
                                mgr._map(_G, name, self._configs[name])
                                if node.grad_slot is not None:
                                    closing.setdefault(min(node.ins), []).append(
                                        mgr.notify_scope_entered(_G))
                            ins = [acts[i] for i in node.ins]
                            with self._scope(mgr, mode, ArrayType.BP_WORKING_MEM):
                                s, es = self._backward_node(node, eps[p], ins, labels, lmasks,
                                                            mgr)
                            score += s
                            eps[p] = None
                            for i, e in zip(node.ins, es):
                                if e is None or not nodes[i].wants_grad:
                                    continue
                                if eps[i] is None:
                                    eps[i] = e       # lives in this vertex's workspace, which
                                else:                # closes no earlier than input i's step
                                    ndws.add(eps[i], e, out=eps[i])
                        if hook is not None and node.obj is not None:
                            # the vertex's gradients are final here: the vertices it reads come
                            # later in this loop, and only its own backward pass writes them
                            # (one not run leaves them as they are: nothing trains there)
                            hook(owner[p])
                        for ws in closing.pop(p, ()):
                            ws.close()
                    # in the iteration's scope, so its temporaries are the iteration's
                    reg = self._regularization()
            finally:
                for group in closing.values():
                    for ws in group:
                        ws.close()
                self._pass_inputs = {}
                self._clear()
        return score + reg

    def fit(self, data: Any, labels: Any = None, *, epochs: int = 1,
            batch_size: int | None = None, progress: bool | None = None,
            shuffle: bool = False, seed: int | None = None,
            validation_data: Any = None) -> History:
        """Train on `data` for `epochs` epochs; returns the `History`.

        Parameters
        ----------
        data : MultiDataSet, DataSet, list of arrays, or iterable of MultiDataSets / DataSets
            A MultiDataSet (features and labels per input and output), a DataSet (for a
            graph of one input and one output), an iterator, a list or a generator of them; or
            the features, one array per input (a list; one array for one input), with
            `labels`.
        labels : array or list of arrays, optional
            With features: one per output, in `set_outputs` order.
        epochs : int
        batch_size : int, optional
            With features and labels: rows per batch (default: all of them).
        progress : bool, optional
            One progress bar over the whole fit (default: on a terminal or in a notebook).
        shuffle, seed : optional
            With features and labels arrays: the rows in a new order each epoch, as
            `MultiLayerNetwork.fit` draws it (from `seed`, default the configuration's, and
            the epoch counter), the same permutation for every input and output.
        validation_data : optional
            Held-out data scored after every epoch (``History.validation_scores``, and the
            accuracy of output 0 when it is a classifier): (features, labels) as `fit` takes
            them, a MultiDataSet, a DataSet, or a re-iterable of them.
        """
        self._check_init()
        epochs = fit_options(epochs, progress, shuffle)
        if seed is not None:
            if not shuffle:
                raise ValueError("seed: only with shuffle=True (it seeds the order of the rows)")
            seed = check_seed(seed)
        if shuffle and labels is None:
            raise ValueError("shuffle: only with features and labels arrays (a MultiDataSet or "
                             "an iterator brings its own order)")
        validate = None if validation_data is None else _Validation(self, validation_data)
        if labels is not None:
            batches = self._array_batches(data, labels, batch_size)   # checks them all
            if shuffle:
                # the arrays, cut into this epoch's order per epoch (_epoch_data)
                data = (list(data) if isinstance(data, (list, tuple)) else [data],
                        list(labels) if isinstance(labels, (list, tuple)) else [labels])
            else:
                data = batches
        elif batch_size is not None:
            raise ValueError("batch_size: only with features and labels arrays (a MultiDataSet "
                             "or an iterator brings its own batches)")
        elif isinstance(data, (MultiDataSet, DataSet)):
            data = self._batch(data, "data")
            if data.num_examples() == 0:
                raise ValueError("fit: no examples (the data has 0 rows)")
            data = [data]
        elif not hasattr(data, "__iter__") or isinstance(data, (NDArray, np.ndarray)):
            raise TypeError(f"data: expected a MultiDataSet, a DataSet, an iterable of them, or "
                            f"features arrays with labels, got {type(data).__name__}")
        return self._fit_loop(data, None, batch_size if shuffle else None, epochs, progress,
                              shuffle, seed, validate)

    def _prefetch(self, data: Any, labels: Any) -> Any:
        # as MultiLayerNetwork's: an iterator with loading to hide (a DataSetIterator or a
        # MultiDataSetIterator) is prefetched on a producer thread (docs/data.md)
        return _prefetch_for_fit(data, labels, queue_size=2)

    def _epoch_data(self, data: Any, labels: Any, batch_size: Any, shuffle: bool,
                    seed: int | None) -> tuple:
        if not shuffle:
            return data, labels, batch_size
        # the rows in this epoch's order (MultiLayerNetwork.fit's draw), the same permutation
        # for every input and output
        xs, ys = data
        order = shuffled_order(xs[0].shape[0], self.conf.seed if seed is None else seed,
                               self._epoch)
        return self._array_batches([_rows(x, order) for x in xs], [_rows(y, order) for y in ys],
                                   batch_size), None, None

    def _epoch_length(self, data: Any, labels: Any, batch_size: Any) -> int | None:
        # features arrays come one per input: the rows are the first one's (not the count of
        # inputs)
        if labels is not None and isinstance(data, (list, tuple)) and data:
            data = data[0]
        return super()._epoch_length(data, labels, batch_size)

    def _array_batches(self, data: Any, labels: Any, batch_size: Any) -> list:
        # (fit's arrays, batch_size checked here: it is None or the rows of each batch)
        # features (one array per input) and labels (one per output) cut into MultiDataSets
        xs = self._as_inputs(data if isinstance(data, (list, tuple)) else [data], "data")
        ys = labels if isinstance(labels, (list, tuple)) else [labels]
        n = xs[0].shape[0]
        if n == 0:
            raise ValueError("fit: no examples (data has 0 rows)")
        outs = self.conf.network_outputs
        if len(ys) != len(outs):
            raise ValueError(f"labels: the graph has {len(outs)} output"
                             f"{'s' if len(outs) != 1 else ''} ({', '.join(outs)}), got "
                             f"{len(ys)} labels array{'s' if len(ys) != 1 else ''}")
        ys = [labels_array(y, f"labels[{k}]") for k, y in enumerate(ys)]
        for k, y in enumerate(ys):
            if y.ndim == 0 or y.shape[0] != n:
                raise ValueError(f"labels[{k}]: {y.shape[0] if y.ndim else 'no'} rows for "
                                 f"{n} examples")
        size = n if batch_size is None else count("batch_size", batch_size)
        return [MultiDataSet([x[s:s + size] for x in xs], [y[s:s + size] for y in ys])
                for s in range(0, n, size)]

    def _batches(self, data: Any, labels: Any, batch_size: Any) -> Iterable[MultiDataSet]:
        # the batches of an epoch as MultiDataSets: fit's (already checked), or a trainer's
        # (ndws.parallel) from anything fit takes
        if labels is not None:
            yield from self._array_batches(data, labels, batch_size)
            return
        if isinstance(data, (MultiDataSet, DataSet)):
            yield self._batch(data, "data")
            return
        if not hasattr(data, "__iter__") or isinstance(data, (NDArray, np.ndarray)):
            raise TypeError(f"data: expected a MultiDataSet, a DataSet, an iterable of them, or "
                            f"features arrays with labels, got {type(data).__name__}")
        for i, item in enumerate(data):
            if not isinstance(item, (MultiDataSet, DataSet)):
                raise TypeError(f"data: item {i} is a {type(item).__name__}, not a MultiDataSet "
                                f"or a DataSet")
            yield self._batch(item, f"data: item {i}")

    def _fit_tbptt(self, mds: MultiDataSet, on_iteration: Any) -> None:
        # DL4J's doTruncatedBPTT on a graph: every time-series input and label (rank 3) and
        # their masks cut into segments of tbptt_fwd_length steps (views), the other inputs
        # whole in each, one update per segment, the recurrent layers' state carried from one
        # segment to the next (detached) and cleared before and after the batch; each segment
        # backpropagates from its carried state through its last tbptt_back_length steps, as
        # a MultiLayerNetwork's (docs/recurrent.md)
        names, outs = self.conf.network_inputs, self.conf.network_outputs
        xs, ys = list(mds.features), list(mds.labels)
        if len(ys) != len(outs):
            self._labels(mds)                      # says what is wrong
        x_axes = [self._series_axis(x, self.conf.vertex_types.get(n), reader)
                  for x, n, (reader, _) in zip(xs, names, self._input_readers())]
        y_axes = []
        for y, o in zip(ys, outs):
            layer = self._output_layer(o)
            y_axes.append(self._series_axis(y, layer.output_type(layer.input_type)))
        if all(a is None for a in x_axes) or all(a is None for a in y_axes):
            raise ValueError(f"fit: truncated BPTT needs time series features and labels "
                             f"(rank 3), got features of shapes "
                             f"{[tuple(x.shape) for x in xs]} and labels of shapes "
                             f"{[tuple(y.shape) for y in ys]} (DL4J: \"Cannot do truncated "
                             f"BPTT with non-3d inputs or labels\")")
        lengths = {a.shape[ax] for a, ax in zip(xs + ys, x_axes + y_axes) if ax is not None}
        if len(lengths) > 1:
            raise ValueError(f"fit: the time series have different lengths ({sorted(lengths)} "
                             f"time steps): truncated BPTT cuts them all into the same "
                             f"segments (DL4J: \"Input and label time series have different "
                             f"lengths\")")
        steps = lengths.pop()
        if steps == 0:
            raise ValueError("fit: a time series of 0 steps has nothing to train on")
        fms = list(mds.features_masks or [None] * len(xs))
        lms = list(mds.labels_masks or [None] * len(ys))
        # the whole batch checked as a standard iteration checks it (the inputs against their
        # types and an embedding's indices, every mask), before the first segment updates
        # anything and with every place named in the batch, not in a segment
        self._masks(mds.features_masks, self._as_inputs(xs, "features"), "features_masks")
        self._labels(mds)
        for k, (m, y, ax, o) in enumerate(zip(lms, ys, y_axes, outs)):
            if ax is not None:
                layer = self._output_layer(o)
                _segment_labels(f"labels[{k}]", y, layer,
                                f"output \"{o}\" ({type(layer).__name__})")
                _segment_mask(f"labels_masks[{k}]", m, y, ax)
        length = self.conf.tbptt_fwd_length

        def cut(arrays: list, axes: list, start: int, end: int) -> list:
            return [a if ax is None else _steps(a, ax, start, end) for a, ax in zip(arrays, axes)]

        def cut_masks(masks: list, axes: list, start: int, end: int) -> list:
            # the masks of the time series; another's mask (per example, per output of rows)
            # goes whole to every segment, as its array does
            return [m if ax is None else _mask_steps(m, start, end, ax)
                    for m, ax in zip(masks, axes)]

        # a segment that fails after all leaves rnn_time_step's state as it found it
        with self._all_states_or_none():
            self._clear_rnn_state()
            try:
                for start in range(0, steps, length):
                    end = min(start + length, steps)
                    seg = MultiDataSet(cut(xs, x_axes, start, end), cut(ys, y_axes, start, end),
                                       cut_masks(fms, x_axes, start, end),
                                       cut_masks(lms, y_axes, start, end))
                    self._fit_step(seg, "tbptt")
                    if on_iteration is not None:
                        on_iteration()
            finally:
                self._clear_rnn_state()

    def _series_axis(self, a: Any, t: Any, reader: Any = None) -> int | None:
        # the time axis of `a` if it is a time series (rank 3) of type t, or the indices of an
        # EmbeddingSequenceLayer `reader`; else None
        axis = index_time_axis(reader, a)
        if axis is not None:
            return axis
        return self._time_axis(t) if a.ndim == 3 else None

    # -- stateful inference (DL4J's rnnTimeStep) ------------------------------------------------

    def rnn_time_step(self, *inputs: Any, output_workspace: Any = None) -> list[NDArray]:
        """The outputs for the next steps of the sequences, from the state the recurrent
        layers kept at the end of the last call (DL4J's ``rnnTimeStep``), a list in
        `set_outputs` order. Each time-series input is one step (n_samples, size) or several
        (n_samples, size, time) (NWC: (n_samples, time, size)); when every one is one step, a
        recurrent output of one step is given as (n_samples, n_out). The state is kept per
        recurrent layer in detached memory until `rnn_clear_previous_state` (as
        `MultiLayerNetwork.rnn_time_step`); a batch of another size without clearing it is an
        error; the outputs are detached, or in `output_workspace`."""
        self._check_init()
        with self._exclusive("rnn_time_step"), self._all_states_or_none():
            if output_workspace is None:
                run = self._one_step_path(inputs)
                if run is not None:
                    return run(*inputs)
            names = self.conf.network_inputs
            if len(inputs) != len(names):
                self._as_inputs(list(inputs))      # says what is wrong
            series = [self.conf.vertex_types.get(n) for n in names]
            if not any(t is not None and t.kind == "RNN" for t in series):
                raise ValueError(f"rnn_time_step: no input of the graph is a time series (its "
                                 f"input types are {list(series)!r}); use output()")
            arrays, one_step = [], True
            for i, (x, t, name) in enumerate(zip(inputs, series, names)):
                if t is not None and t.kind == "RNN":
                    reader = self._nodes[self._nodes[self._position[name]].consumers[0]].obj
                    a, one = self._one_step_series(x, t, reader,
                                                   f"inputs[{i}] (input \"{name}\")")
                    one_step = one_step and one
                    arrays.append(a)
                else:
                    arrays.append(x)
            xs = self._as_inputs(arrays)
            self._check_output_workspace(output_workspace)
            outs = self._run_forward(xs, [None] * len(xs), False, self._inference_mode(),
                                     output_workspace, state="step")
            if one_step:
                for k, o in enumerate(self.conf.network_outputs):
                    layer = self._nodes[self._position[o]].obj
                    out = outs[k]
                    if out.ndim == 3 and isinstance(layer, Layer):
                        axis = self._time_axis(layer.output_type(layer.input_type))
                        if out.shape[axis] == 1:
                            outs[k] = out[:, :, 0] if axis == 2 else out[:, 0, :]
            return outs

    def _build_step_plan(self, batch: int) -> tuple | None:
        # rnn_time_step's one-step path (Model._one_step_path): every vertex up to the last
        # output in topological order (as the general path runs them), each a step runner on
        # one step's rows: the layers' (behind their preprocessors), and the vertices' that are
        # one on rows. Inputs of known types, rows or time series of any length; outputs that
        # the general path gives as rows (layers, vertices of rows)
        conf, dt = self.conf, self.conf.dtype
        names = conf.network_inputs
        types = [conf.vertex_types.get(n) for n in names]
        if (any(t is None or t.kind not in ("FF", "RNN") for t in types)
                or not any(t.kind == "RNN" for t in types)
                or not all(steps_one_at_a_time(t) for t in types if t.kind == "RNN")):
            return None
        slot = {self._position[n]: k for k, n in enumerate(names)}
        last = max(self._position[o] for o in conf.network_outputs)
        steps, outputs = [], [None] * len(conf.network_outputs)
        for node in self._nodes[:last + 1]:
            if node.kind == _INPUT:
                continue
            if node.checked:
                return None                  # user code: its own activate must run
            if node.kind == _LAYER:
                runner = layer_step_runner(node.obj, node.pre, batch, dt)
            else:
                runner = node.obj.step_runner(batch, dt)
            if runner is None:
                return None
            slot[node.pos] = len(names) + len(steps)
            steps.append((runner, [slot[i] for i in node.ins]))
            if node.output >= 0:
                if node.kind == _LAYER:
                    width = node.obj.output_width()
                else:
                    t = conf.vertex_types.get(node.name)
                    if t is None or t.kind != "FF":
                        return None          # the general path gives a series of one step
                    width = t.size
                outputs[node.output] = (slot[node.pos], width)
        return (tuple(t.size for t in types),
                step_program(batch, dt, len(names), steps, outputs))

    # -- evaluation -----------------------------------------------------------------------------

    def do_evaluation(self, data: Any, *evaluations: Any, progress: bool | None = None) -> Any:
        """Evaluate the graph's outputs over `data` (a MultiDataSet, a DataSet for one input
        and one output, or an iterable of them): ``do_evaluation(data, ev1, ev2)`` counts the
        first output in each evaluation; ``do_evaluation(data, {0: [ev], 1: [reg]})`` counts
        output k in the evaluations listed for it. Returns the evaluation when given one, else
        what was given.

        Each batch is taken from `data` while none of the graph's workspaces is open; then one
        cycle of the output workspace (WS_OUTPUT_MEM) holds the batch's outputs while the
        evaluations count them, and ends before the next batch is taken."""
        self._check_init()
        if progress is not None and not isinstance(progress, bool):
            raise TypeError(f"progress: expected True, False or None, got {progress!r:.40}")
        if len(evaluations) == 1 and isinstance(evaluations[0], dict):
            per_output = {}
            for k, evs in evaluations[0].items():
                if (isinstance(k, bool) or not isinstance(k, (int, np.integer))
                        or not 0 <= k < len(self.conf.network_outputs)):
                    raise ValueError(f"evaluations: {k!r:.20} is not an output index (0 to "
                                     f"{len(self.conf.network_outputs) - 1})")
                evs = tuple(evs) if isinstance(evs, (list, tuple)) else (evs,)
                check_evaluations(evs)
                per_output[int(k)] = evs
            result = evaluations[0]
        else:
            check_evaluations(evaluations)
            per_output = {0: evaluations}
            result = evaluations[0] if len(evaluations) == 1 else evaluations
        with self._exclusive("do_evaluation"):
            self._evaluate_batches(data, per_output, progress)
        return result

    def evaluate(self, data: Any, output: int = 0, *, progress: bool | None = None) -> Any:
        """An `ndws.evaluation.Evaluation` of output `output` (an index in `set_outputs`
        order) over `data`."""
        from ndws.evaluation import Evaluation
        if (isinstance(output, bool) or not isinstance(output, (int, np.integer))
                or not 0 <= output < len(self.conf.network_outputs)):
            raise ValueError(f"output: expected an output index (0 to "
                             f"{len(self.conf.network_outputs) - 1}), got {output!r:.20}")
        ev = Evaluation()
        self.do_evaluation(data, {int(output): [ev]}, progress=progress)
        return ev

    def _evaluate_batches(self, data: Any, per_output: dict, progress: bool | None) -> None:
        if isinstance(data, (MultiDataSet, DataSet)):
            data = [data]
        elif not hasattr(data, "__iter__") or isinstance(data, (NDArray, np.ndarray)):
            raise TypeError(f"data: expected a MultiDataSet, a DataSet or an iterable of them, "
                            f"got {type(data).__name__}")
        reset = getattr(data, "reset", None)
        if callable(reset):
            reset()
        mode = self._inference_mode()
        ws = None
        if mode is not WorkspaceMode.NONE:
            ws = get_workspace_manager().get_workspace_for_current_thread(
                self._configs[WS_ALL_LAYERS_ACT], WS_OUTPUT_MEM)
        try:
            length = len(data)
        except TypeError:
            length = None
        bar = _Progress(progress, length, "evaluating")
        try:
            # each batch is taken with no cycle of the graph open (see the docstring)
            for i, item in enumerate(data):
                mds = self._batch(item, f"data: item {i}")
                xs = self._as_inputs(list(mds.features), "features")
                fmasks = self._masks(mds.features_masks, xs, "features_masks")
                labels = list(mds.labels)
                lmasks = list(mds.labels_masks or [None] * len(labels))
                if len(labels) != len(self.conf.network_outputs):
                    self._labels(mds)              # says what is wrong
                bar.update(float("nan"))
                with ws if ws is not None else contextlib.nullcontext():
                    outs = None
                    try:
                        with scope_out_of_workspaces():
                            outs = self._run_forward(xs, fmasks, False, mode, ws)
                            for k, evs in per_output.items():
                                count_batch(evs, labels[k], outs[k], lmasks[k])
                    except BaseException as exc:
                        # an evaluation that refused the batch left NumPy views of the outputs
                        # in its frames: free them before the cycle ends
                        traceback.clear_frames(exc.__traceback__)
                        raise
                    finally:
                        outs = None     # the batch's outputs go with their cycle
                xs = labels = lmasks = fmasks = mds = item = None
        finally:
            bar.close()

    # -- memory ---------------------------------------------------------------------------------

    def memory_report(self, batch_size: int, sequence_length: int | None = None
                      ) -> MemoryReport:
        """The bytes every workspace needs in every mode for batches of `batch_size`, per
        vertex and in total, from the shapes (nothing runs); printable as a table. A graph
        whose inputs include time series of varying length is planned for `sequence_length`
        steps of each (without it, what reads them says "unknown")."""
        self._check_init()
        return MemoryReport(self, batch_size, sequence_length)

    def _memory_uses(self, batch: int, training: bool, itemsize: int,
                     length: int | None = None) -> list:
        # per vertex but the inputs, in topological order: the arrays one pass makes (a
        # layer's preprocessor's first), None where undeclared; `length`: the steps of the
        # time-series inputs of varying length (the vertices resolved again for it)
        pairs = [(n.obj, n.pre) for n in self._nodes if n.kind != _INPUT]
        if length is not None and self._varying():
            pairs = self._pairs_for_length(length)
        return uses_of(pairs, batch, training, itemsize)

    def _varying(self) -> list:
        # the positions (in add_inputs order) of the time-series inputs of varying length
        return [k for k, t in enumerate(self.conf.input_types or ())
                if t is not None and t.kind == "RNN" and t.time_series_length is None]

    def _plan_length(self, xs: list) -> int | None:
        # the time steps a memory plan is for: the longest of the batch's time-series inputs
        # of varying length
        steps = [xs[k].shape[self._time_axis(self.conf.input_types[k])]
                 for k in self._varying() if xs[k].ndim == 3]
        return max(steps) if steps else None

    def _pairs_for_length(self, length: int) -> list:
        # (vertex, preprocessor) of every vertex as resolved for time-series inputs of
        # `length` steps (copies with this graph's runtime settings), for a memory plan
        types = list(self.conf.input_types)
        for k in self._varying():
            t = types[k]
            types[k] = InputType.recurrent(t.size, length, t.data_format.name)
        resolved, pres, _ = self.conf._resolve(types)
        pairs = []
        for node in self._nodes:
            if node.kind == _INPUT:
                continue
            other = resolved[node.name]
            other._where = node.where           # what errors call it
            if node.kind == _LAYER:
                other.index = node.obj.index
                other.input_gradient_needed = node.obj.input_gradient_needed
                if hasattr(node.obj, "back_length"):
                    other.back_length = node.obj.back_length
            pairs.append((other, pres.get(node.name)))
        return pairs

    def _memory_plan(self, uses: list, mode: WorkspaceMode, training: bool) -> dict:
        return graph_plan([n for n in self._nodes if n.kind != _INPUT], uses, mode, training)

    def _memory_rows(self) -> list:
        return [{"index": n.pos, "name": n.name, "type": type(n.obj).__name__}
                for n in self._nodes if n.kind != _INPUT]

    # -- misc -----------------------------------------------------------------------------------

    def summary(self, batch_size: int | None = None) -> str:
        """A table of the vertices in topological order: name, type, inputs, n_in, n_out,
        parameters, activation (and loss); with `batch_size`, also the bytes each vertex's
        arrays take in training and in inference (from `memory_report`)."""
        self._check_init()
        report = None if batch_size is None else MemoryReport(self, batch_size)
        uses = {} if report is None else {row["name"]: row for row in report.layers}
        rows = [("vertex", "type", "inputs", "n_in", "n_out", "params", "activation")
                + (() if report is None else (f"train B ({batch_size})",
                                              f"infer B ({batch_size})"))]
        for node in self._nodes:
            names = ", ".join(self._nodes[i].name for i in node.ins) or "-"
            if node.kind == _INPUT:
                t = self.conf.vertex_types.get(node.name)
                row = (node.name, "input", "-", "-", "-" if t is None else str(
                    t.elements_per_example()), "0", "-")
            else:
                obj = node.obj
                n_params = sum(int(np.prod(s)) for s in obj.param_shapes().values())
                if node.kind == _LAYER:
                    act = obj.activation.value if obj.activation is not None else "-"
                    loss = getattr(obj, "loss_function", None)
                    row = (node.name, type(obj).__name__, names, str(obj.n_in or "-"),
                           str(obj.output_width() or "-"), f"{n_params:,}",
                           act + (f" / {loss.name}" if loss is not None else ""))
                else:
                    t = self.conf.vertex_types.get(node.name)
                    row = (node.name, type(obj).__name__, names, "-",
                           "-" if t is None else str(t.elements_per_example()),
                           f"{n_params:,}", "-")
            if report is not None:
                use = uses.get(node.name)
                row += (("-", "-") if use is None else tuple(
                    "?" if use[k] is None else f"{sum(use[k].values()):,}"
                    for k in ("training", "inference")))
            rows.append(row)
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) if i < 3 or i == 6 else c.rjust(w)
                           for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
        lines.insert(1, "-" * len(lines[0]))
        lines.append(f"total parameters: {self.num_params():,}; dtype {self.conf.dtype.name}; "
                     f"inputs {', '.join(self.conf.network_inputs)}; outputs "
                     f"{', '.join(self.conf.network_outputs)}; workspace modes: training "
                     f"{self.conf.training_workspace_mode.name}, inference "
                     f"{self.conf.inference_workspace_mode.name}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        state = f"{self.num_params()} params" if self._params is not None else "not initialised"
        return (f"<ComputationGraph inputs={list(self.conf.network_inputs)}, "
                f"{len(self.conf.vertices)} vertices, outputs="
                f"{list(self.conf.network_outputs)}, {state}>")


def _rows(a: NDArray, order: np.ndarray) -> NDArray:
    # the rows of `a` in `order` (a new detached array)
    return ndws.from_numpy(np.asarray(a)[order])


class _Validation:
    """A graph's held-out data scored after each epoch (as `MultiLayerNetwork.fit`'s
    validation_data): the score over all rows (`score`: an inference pass, the outputs'
    losses summed) and, when output 0 gives class scores, its accuracy (else None)."""

    def __init__(self, g: ComputationGraph, data: Any):
        self._g = g
        if isinstance(data, tuple) and len(data) == 2 and not isinstance(
                data[0], (DataSet, MultiDataSet)):
            self._source: Any = g._array_batches(data[0], data[1], 256)
        elif isinstance(data, (DataSet, MultiDataSet)):
            self._source = [g._batch(data, "validation_data")]
        else:
            self._source = reiterable(data, "MultiDataSets")

    def __call__(self) -> tuple[float, float | None]:
        g = self._g
        # an accuracy for rows of class scores (not for per-pixel or per-step outputs)
        t = g.conf.vertex_types.get(g.conf.network_outputs[0])
        classifier = t is not None and t.kind == "FF" and t.size > 1
        rows, total, right, counted = 0, 0.0, 0, 0
        try:
            for i, item in enumerate(self._source):
                mds = g._batch(item, f"validation_data: item {i}")
                n = mds.num_examples()
                if n == 0:
                    continue
                total += g._forward_score(mds, False) * n
                rows += n
                if classifier:
                    masks = mds.labels_masks
                    first = DataSet(mds.features[0], mds.labels[0], None,
                                    None if masks is None else masks[0])
                    predicted = g._run_forward(
                        g._as_inputs(list(mds.features), "validation_data"),
                        [None] * len(mds.features), False, WorkspaceMode.NONE, None)[0]
                    r, c = _correct(predicted, first)
                    right += r
                    counted += c
        finally:
            if callable(getattr(self._source, "reset", None)):
                self._source.reset()
        if rows == 0:
            raise ValueError("validation_data: no examples")
        return total / rows, (right / counted if classifier and counted else None)
