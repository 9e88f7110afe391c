"""`ComputationGraphConfiguration` and its `GraphBuilder` (DL4J's
``ComputationGraphConfiguration`` and ``NeuralNetConfiguration.Builder().graphBuilder()``): the
frozen, validated description of a `ComputationGraph`, with an exact JSON round trip
(docs/graphs.md).

A graph has named inputs (in `add_inputs` order: the order of the arrays given to `fit` and
`output`), named vertices (layers, and the vertices of `ndws.nn.graph.vertices`), each reading
the outputs of others, and named outputs (in `set_outputs` order). `build` checks it with
DL4J's messages, orders it (Kahn's algorithm with DL4J's tie-break, kept in the configuration so
a saved graph reloads in the same order) and, with `set_input_types`, gives every layer its
n_in and the preprocessors DL4J's ``setInputTypes`` inserts.

Examples
--------
>>> from ndws.nn import ComputationGraphConfiguration, DenseLayer, InputType, OutputLayer
>>> conf = (ComputationGraphConfiguration.builder(seed=1, activation="relu")
...         .add_inputs("a", "b")
...         .add_layer("da", DenseLayer(n_out=4), "a")
...         .add_layer("db", DenseLayer(n_out=4), "b")
...         .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "da", "db")
...         .set_outputs("out")
...         .set_input_types(InputType.feed_forward(3), InputType.feed_forward(5))
...         .build())
>>> conf.topological_order
('a', 'b', 'da', 'db', 'out-merge', 'out')
>>> [(n, conf.resolved_vertices[n].n_in) for n in ("da", "db", "out")]
[('da', 3), ('db', 5), ('out', 8)]
>>> ComputationGraphConfiguration.from_json(conf.to_json()) == conf
True
"""
from __future__ import annotations

from collections import deque
from typing import Any

from ndws.nn.conf import (DEFAULT_TBPTT_LENGTH, SETTINGS, TBPTT, BackpropType,
                          JsonConfiguration, check_index_dtype, check_tbptt, layer_defaults,
                          network_settings, parse_backprop_type, settings_dict,
                          settings_kwargs, tbptt_dict, tbptt_length, tbptt_settings)
from ndws.nn.graph.vertices import (GraphVertex, LastTimeStepVertex, MergeVertex,
                                    ReverseTimeSeriesVertex)
from ndws.nn.inputs import InputType
from ndws.nn.layers.base import Layer
from ndws.nn.preprocessors import InputPreProcessor
from ndws.nn.updaters import FieldTypeError

__all__ = ["ComputationGraphConfiguration", "GraphBuilder"]

#: what to_json writes as "format", and the version from_json reads
FORMAT, _VERSION = "ndws.ComputationGraphConfiguration", 1

_INVALID = "Invalid configuration: "


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise FieldTypeError(f"{what}: expected a non-empty str, got {type(value).__name__} "
                             f"{value!r:.40}")
    return value


class GraphBuilder:
    """Builds a `ComputationGraphConfiguration` (DL4J's ``GraphBuilder``); every method but
    `build` returns the builder. Get one from ``ComputationGraphConfiguration.builder(...)``,
    whose keyword arguments are the network-wide settings (those of
    `ndws.nn.MultiLayerConfiguration`)."""

    def __init__(self, **settings: Any):
        network_settings("ComputationGraphConfiguration", **settings)    # checked now
        if settings.get("seed") is None:
            settings["seed"] = network_settings("ComputationGraphConfiguration")["seed"]
        self._settings = settings
        self._inputs: list[str] = []
        self._outputs: list[str] = []
        self._vertices: dict[str, Any] = {}            # name -> Layer or GraphVertex
        self._vertex_inputs: dict[str, tuple] = {}
        self._preprocessors: dict[str, InputPreProcessor] = {}
        self._input_types: list[InputType] = []
        self._backprop_type = BackpropType.STANDARD
        self._tbptt_fwd = DEFAULT_TBPTT_LENGTH
        self._tbptt_back = DEFAULT_TBPTT_LENGTH
        self._last: str | None = None

    def add_inputs(self, *names: str) -> "GraphBuilder":
        """The network's inputs, in the order of the arrays `fit` and `output` take."""
        for n in names:
            n = _name(n, "add_inputs")
            if n in self._inputs:
                raise ValueError(f"{_INVALID}network input \"{n}\" is given twice")
            self._inputs.append(n)
            self._last = n
        return self

    def _add(self, name: str, obj: Any, inputs: tuple, max_inputs: Any) -> None:
        name = _name(name, "name")
        inputs = tuple(_name(i, f"inputs of \"{name}\"") for i in inputs)
        if name in self._vertices:
            raise ValueError(f"Cannot add vertex: a vertex with name \"{name}\" already exists")
        if max_inputs == 1 and len(inputs) > 1:
            # DL4J's automatic merge: a vertex of one input reads the concatenation of them
            merge = f"{name}-merge"
            self._add(merge, MergeVertex(), inputs, None)
            inputs = (merge,)
        self._vertices[name] = obj
        self._vertex_inputs[name] = inputs
        self._last = name

    def add_layer(self, name: str, layer: Layer, *inputs: str,
                  preprocessor: InputPreProcessor | None = None) -> "GraphBuilder":
        """Add `layer` as vertex `name` reading `inputs` (several: concatenated by an
        automatic ``<name>-merge`` MergeVertex); `preprocessor` runs on its input first."""
        if not isinstance(layer, Layer):
            raise FieldTypeError(f"add_layer: expected an ndws.nn layer for \"{name}\", got "
                                 f"{type(layer).__name__}")
        self._add(name, layer.clone(), inputs, 1)
        if preprocessor is not None:
            self.input_preprocessor(name, preprocessor)
        return self

    layer = add_layer

    def append_layer(self, name: str, layer: Layer) -> "GraphBuilder":
        """Add `layer` reading the vertex (or input) added last."""
        if self._last is None:
            raise ValueError("Can not use appendLayer with no previous layers")
        return self.add_layer(name, layer, self._last)

    def add_vertex(self, name: str, vertex: GraphVertex, *inputs: str) -> "GraphBuilder":
        """Add `vertex` (a `GraphVertex`) as vertex `name` reading `inputs`."""
        if not isinstance(vertex, GraphVertex):
            raise FieldTypeError(f"add_vertex: expected an ndws.nn.graph.GraphVertex for "
                                 f"\"{name}\", got {type(vertex).__name__}")
        self._add(name, vertex.clone(), inputs, vertex.max_inputs)
        return self

    def set_outputs(self, *names: str) -> "GraphBuilder":
        """The network's outputs, in the order of the labels `fit` takes and of the arrays
        `output` returns."""
        self._outputs = [_name(n, "set_outputs") for n in names]
        return self

    def set_input_types(self, *input_types: InputType) -> "GraphBuilder":
        """The type of each input, in `add_inputs` order (DL4J's ``setInputTypes``): every
        layer's n_in and the preprocessors are inferred from them."""
        for t in input_types:
            if not isinstance(t, InputType):
                raise FieldTypeError(f"set_input_types: expected ndws.nn.InputType, got "
                                     f"{type(t).__name__}")
        if len(self._input_types) + len(input_types) != len(self._inputs):
            raise ValueError(f"Invalid number of InputTypes: existing inputTypes "
                             f"({len(self._input_types)}) + additional inputTypes "
                             f"({len(input_types)}) != number of network inputs "
                             f"({len(self._inputs)})")
        self._input_types.extend(input_types)
        return self

    def input_preprocessor(self, name: str, preprocessor: InputPreProcessor) -> "GraphBuilder":
        """Run `preprocessor` on layer `name`'s input (DL4J's ``inputPreProcessor``)."""
        if not isinstance(preprocessor, InputPreProcessor):
            raise FieldTypeError(f"input_preprocessor: expected an ndws.nn.InputPreProcessor, "
                                 f"got {type(preprocessor).__name__}")
        self._preprocessors[_name(name, "input_preprocessor")] = preprocessor.clone()
        return self

    def backprop_type(self, value: Any) -> "GraphBuilder":
        self._backprop_type = parse_backprop_type(value)
        return self

    def tbptt_fwd_length(self, n: int) -> "GraphBuilder":
        self._tbptt_fwd = tbptt_length("tbptt_fwd_length", n)
        return self

    def tbptt_back_length(self, n: int) -> "GraphBuilder":
        self._tbptt_back = tbptt_length("tbptt_back_length", n)
        return self

    def remove_vertex(self, name: str, remove_connections: bool = True) -> "GraphBuilder":
        """Remove vertex `name`; with `remove_connections` also from the inputs of every
        other vertex and from the outputs."""
        if name not in self._vertices:
            raise ValueError(f"remove_vertex: no vertex named {name!r:.60}")
        del self._vertices[name]
        del self._vertex_inputs[name]
        self._preprocessors.pop(name, None)
        if remove_connections:
            for v, ins in self._vertex_inputs.items():
                self._vertex_inputs[v] = tuple(i for i in ins if i != name)
            self._outputs = [o for o in self._outputs if o != name]
        if self._last == name:
            self._last = None
        return self

    def build(self) -> "ComputationGraphConfiguration":
        """The configuration, checked (ValueError with DL4J's messages)."""
        vertices = {n: (v, self._vertex_inputs[n]) for n, v in self._vertices.items()}
        return ComputationGraphConfiguration(
            self._inputs, self._outputs, vertices,
            input_types=self._input_types or None, input_preprocessors=self._preprocessors,
            backprop_type=self._backprop_type, tbptt_fwd_length=self._tbptt_fwd,
            tbptt_back_length=self._tbptt_back, **self._settings)


class ComputationGraphConfiguration(JsonConfiguration):
    """A directed acyclic graph of layers and vertices and the network-wide settings. Build
    one with `builder`; the constructor takes what the builder collected.

    Parameters
    ----------
    inputs, outputs : sequence of str
        The network's inputs and outputs, in order.
    vertices : dict of str to (Layer or GraphVertex, tuple of str)
        Each vertex and the names it reads, in the order they were added (DL4J's indices).
    input_types : sequence of InputType, optional
        One per input (DL4J's ``setInputTypes``).
    input_preprocessors : dict of str to InputPreProcessor, optional
        Preprocessors of layer vertices by name.
    backprop_type, tbptt_fwd_length, tbptt_back_length
        Truncated backpropagation through time (DL4J's; defaults STANDARD, 20, 20).
    topological_order : sequence of str, optional
        The order to keep (a saved configuration's); it must be a topological order of the
        graph. Default: Kahn's algorithm with DL4J's tie-break.
    **settings
        The network-wide settings of `ndws.nn.MultiLayerConfiguration` (seed, updater,
        activation, ..., dtype).

    Attributes
    ----------
    topological_order : tuple of str
        Every vertex, inputs included, in the order the forward pass runs them (and the
        parameters are laid out).
    resolved_vertices : dict of str to Layer or GraphVertex
        Each vertex with the network's defaults, its input types and n_in filled in.
    resolved_preprocessors : dict of str to InputPreProcessor or None
        Each layer vertex's preprocessor (given or inserted).
    """

    _format, _version = FORMAT, _VERSION
    __slots__ = SETTINGS + ("network_inputs", "network_outputs", "vertices", "vertex_inputs",
                            "input_types", "input_preprocessors", "backprop_type",
                            "tbptt_fwd_length", "tbptt_back_length", "topological_order",
                            "resolved_vertices", "resolved_preprocessors", "vertex_types",
                            "_frozen")

    def __init__(self, inputs: Any, outputs: Any, vertices: Any, *,
                 input_types: Any = None, input_preprocessors: Any = None,
                 backprop_type: Any = BackpropType.STANDARD,
                 tbptt_fwd_length: int = DEFAULT_TBPTT_LENGTH,
                 tbptt_back_length: int = DEFAULT_TBPTT_LENGTH,
                 topological_order: Any = None, **settings: Any):
        set_ = object.__setattr__
        unknown = set(settings) - set(SETTINGS)
        if unknown:
            raise TypeError(f"ComputationGraphConfiguration: unknown settings {sorted(unknown)}")
        for k, v in network_settings("ComputationGraphConfiguration", **settings).items():
            set_(self, k, v)
        inputs = tuple(_name(n, "inputs") for n in _sequence(inputs, "inputs"))
        outputs = tuple(_name(n, "outputs") for n in _sequence(outputs, "outputs"))
        if not isinstance(vertices, dict):
            raise FieldTypeError(f"vertices: expected a dict of name -> (layer or vertex, "
                                 f"inputs), got {type(vertices).__name__}")
        objs, ins = {}, {}
        for name, entry in vertices.items():
            name = _name(name, "vertices")
            if not isinstance(entry, (tuple, list)) or len(entry) != 2:
                raise FieldTypeError(f"vertices[{name!r}]: expected (layer or vertex, inputs), "
                                     f"got {entry!r:.60}")
            obj, given = entry
            if not isinstance(obj, (Layer, GraphVertex)):
                raise FieldTypeError(f"vertices[{name!r}]: expected an ndws.nn layer or "
                                     f"GraphVertex, got {type(obj).__name__}")
            objs[name] = obj.clone()
            ins[name] = tuple(_name(i, f"inputs of \"{name}\"")
                              for i in _sequence(given, f"vertices[{name!r}] inputs"))
        set_(self, "network_inputs", inputs)
        set_(self, "network_outputs", outputs)
        set_(self, "vertices", objs)
        set_(self, "vertex_inputs", ins)
        _validate(inputs, outputs, objs, ins)
        pres = {}
        for name, p in (input_preprocessors or {}).items():
            if name not in objs or not isinstance(objs[name], Layer):
                raise ValueError(f"{_INVALID}input preprocessor for \"{name}\", which is not a "
                                 f"layer vertex")
            if not isinstance(p, InputPreProcessor):
                raise FieldTypeError(f"input_preprocessors[{name!r}]: expected an "
                                     f"ndws.nn.InputPreProcessor, got {type(p).__name__}")
            pres[name] = p.clone()
        set_(self, "input_preprocessors", pres)
        if input_types is not None:
            input_types = tuple(input_types)
            for t in input_types:
                if not isinstance(t, InputType):
                    raise FieldTypeError(f"input_types: expected ndws.nn.InputType, got "
                                         f"{type(t).__name__}")
            if len(input_types) != len(inputs):
                raise ValueError(f"Invalid number of InputTypes: existing inputTypes (0) + "
                                 f"additional inputTypes ({len(input_types)}) != number of "
                                 f"network inputs ({len(inputs)})")
        set_(self, "input_types", input_types)
        for k, v in tbptt_settings(backprop_type, tbptt_fwd_length, tbptt_back_length).items():
            set_(self, k, v)
        order = _topological_order(inputs, objs, ins)
        if topological_order is not None:
            order = _kept_order(topological_order, order, inputs, ins)
        set_(self, "topological_order", order)
        resolved, pres_out, types = self._resolve()
        if self.backprop_type is BackpropType.TRUNCATED_BPTT:
            check_tbptt(((f'"{n}"', v) for n, v in resolved.items()),
                        (LastTimeStepVertex, ReverseTimeSeriesVertex))
        check_index_dtype(((f'vertices["{n}"]', v) for n, v in resolved.items()
                           if isinstance(v, Layer)), self.dtype)
        set_(self, "resolved_vertices", resolved)
        set_(self, "resolved_preprocessors", pres_out)
        #: each vertex's output type (None where unknown), inputs included
        set_(self, "vertex_types", types)
        set_(self, "_frozen", True)

    @staticmethod
    def builder(**settings: Any) -> GraphBuilder:
        """A `GraphBuilder`; `settings` are the network-wide ones (seed, updater, activation,
        weight_init, dropout, l1, l2, weight_decay, bias_init, the workspace modes, dtype,
        convolution_mode)."""
        return GraphBuilder(**settings)

    def _resolve(self, input_types: Any = None) -> tuple:
        # Walk the vertices in topological order with the types between them (DL4J's
        # getLayerActivationTypes): each layer gets its preprocessor (given, or the one its
        # input type implies), its input type and n_in; each vertex its input types; both
        # pass their output type on. A layer with n_in reading an input of unknown type gets
        # rows of n_in (DL4J's inference for a first layer). `input_types`: walk with those
        # instead (time series of a given length, for a memory plan)
        defaults = layer_defaults(self)
        types: dict[str, Any] = {}
        given = input_types or self.input_types or (None,) * len(self.network_inputs)
        net_types = dict(zip(self.network_inputs, given))
        for name, t in net_types.items():
            types[name] = t
        resolved, pres = {}, {}
        index = 0
        for name in self.topological_order:
            if name in net_types:
                continue
            obj, ins = self.vertices[name], self.vertex_inputs[name]
            where = f'vertices["{name}"]'
            in_types = [types[i] for i in ins]
            try:
                if isinstance(obj, Layer):
                    if len(ins) != 1:
                        raise ValueError(f"a layer reads one input, got {len(ins)} "
                                         f"({', '.join(ins)}); give several to add_layer to "
                                         f"have them merged")
                    t = in_types[0]
                    pre = self.input_preprocessors.get(name)
                    if pre is None and t is not None:
                        pre = obj.preprocessor_for(t)
                    if pre is not None:
                        t = pre.output_type(t)
                    if t is None and ins[0] in net_types and obj.n_in is not None:
                        t = obj.implied_input_type()
                        if t is not None:
                            types[ins[0]] = net_types[ins[0]] = t
                    if obj.n_in is not None and t is not None and obj.n_in != obj.n_in_for(t):
                        raise ValueError(f"{where}.n_in: {obj.n_in} does not match the "
                                         f"{'channels' if t.kind == 'CNN' else 'width'} "
                                         f"{obj.n_in_for(t)} of its input \"{ins[0]}\" ({t!r})")
                    layer = obj.clone()
                    if layer.name is None:
                        layer.name = name
                    out = layer.resolved(defaults, t, where, index)
                    index += 1
                    resolved[name], pres[name] = out, pre
                    types[name] = out.output_type(t)
                else:
                    vertex = obj.clone()
                    vertex.name = name
                    n = len(ins)
                    if n < vertex.min_inputs or (vertex.max_inputs is not None
                                                 and n > vertex.max_inputs):
                        most = ("any number" if vertex.max_inputs is None
                                else str(vertex.max_inputs))
                        raise ValueError(f"{type(vertex).__name__} takes {vertex.min_inputs} "
                                         f"to {most} inputs, got {n}")
                    for f in vertex.input_name_fields:
                        ref = getattr(vertex, f)
                        if ref is not None and ref not in net_types:
                            raise ValueError(f"{f} \"{ref}\" is not a network input (inputs: "
                                             f"{', '.join(self.network_inputs)})")
                    vertex.network_input_types = net_types
                    vertex.input_types = in_types
                    resolved[name] = vertex
                    types[name] = (vertex.output_type(in_types)
                                   if all(t is not None for t in in_types) else None)
            except (TypeError, ValueError) as exc:
                msg = str(exc)
                raise type(exc)(msg if msg.startswith(where) else f"{where}: {msg}") from None
        return resolved, pres, types

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"ComputationGraphConfiguration is frozen: build a new one "
                             f"instead of setting {name}")

    @property
    def resolved_layers(self) -> tuple:
        """The layers, resolved, in topological order (their parameters' order)."""
        return tuple(v for n in self.topological_order
                     if isinstance(v := self.resolved_vertices.get(n), Layer))

    def _param_owners(self) -> list:
        # (where, layer or vertex) of every vertex, in topological order (the flat
        # parameters')
        return [(f'vertices["{n}"]', self.resolved_vertices[n]) for n in self.topological_order
                if n in self.resolved_vertices]

    def _state_layers(self) -> dict:
        # what a saved file names each layer's carried state by: name -> (name, layer)
        return {n: (n, v) for n, v in self.resolved_vertices.items() if isinstance(v, Layer)}

    # -- JSON -----------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """The configuration as JSON-ready data (the vertices as given, before defaults)."""
        vertices = []
        for name, obj in self.vertices.items():
            entry: dict[str, Any] = {"name": name, "inputs": list(self.vertex_inputs[name])}
            if isinstance(obj, Layer):
                entry["layer"] = obj.to_dict()
                pre = self.input_preprocessors.get(name)
                if pre is not None:
                    entry["preprocessor"] = pre.to_dict()
            else:
                entry["vertex"] = obj.to_dict()
            vertices.append(entry)
        out = {"format": FORMAT, "version": _VERSION, **settings_dict(self),
               "inputs": list(self.network_inputs), "outputs": list(self.network_outputs),
               "vertices": vertices, "topological_order": list(self.topological_order)}
        if self.input_types is not None:
            out["input_types"] = [t.to_dict() for t in self.input_types]
        out.update(tbptt_dict(self))
        return out

    @classmethod
    def from_dict(cls, data: Any) -> "ComputationGraphConfiguration":
        cls._checked(data, {"inputs", "outputs", "vertices", "topological_order",
                            "input_types", *TBPTT, *SETTINGS})
        entries = data.get("vertices")
        if not isinstance(entries, list):
            raise ValueError(f"configuration.vertices: expected a list, got {entries!r:.40}")
        vertices, pres = {}, {}
        for i, e in enumerate(entries):
            if not isinstance(e, dict) or set(e) - {"name", "inputs", "layer", "vertex",
                                                     "preprocessor"} \
                    or ("layer" in e) == ("vertex" in e) or not isinstance(e.get("name"), str):
                raise ValueError(f"configuration.vertices[{i}]: expected name, inputs and a "
                                 f"layer or a vertex, got {e!r:.80}")
            name = e["name"]
            try:
                obj = (Layer.from_dict(e["layer"]) if "layer" in e
                       else GraphVertex.from_dict(e["vertex"]))
                if "preprocessor" in e:
                    pres[name] = InputPreProcessor.from_dict(e["preprocessor"])
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"vertices[{name!r}]: {exc}") from None
            if not isinstance(e.get("inputs"), list):
                raise ValueError(f"configuration.vertices[{i}].inputs: expected a list")
            vertices[name] = (obj, e["inputs"])
        kwargs = settings_kwargs(data)
        if "input_types" in data:
            types = data["input_types"]
            if not isinstance(types, list):
                raise ValueError(f"configuration.input_types: expected a list, got "
                                 f"{types!r:.40}")
            kwargs["input_types"] = [InputType.from_dict(t) for t in types]
        for k in (*TBPTT, "topological_order"):
            if k in data:
                kwargs[k] = data[k]
        return cls(data.get("inputs"), data.get("outputs"), vertices,
                   input_preprocessors=pres, **kwargs)

    def __repr__(self) -> str:
        return (f"ComputationGraphConfiguration(inputs={list(self.network_inputs)}, "
                f"{len(self.vertices)} vertices, outputs={list(self.network_outputs)}, "
                f"seed={self.seed}, dtype={self.dtype.name})")


def _sequence(value: Any, what: str) -> list:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise FieldTypeError(f"{what}: expected a list of names, got {type(value).__name__}")
    return list(value)


def _validate(inputs: tuple, outputs: tuple, vertices: dict, vertex_inputs: dict) -> None:
    # DL4J's ComputationGraphConfiguration.validate, its messages and its order
    if not inputs:
        raise ValueError(f"{_INVALID}network has no inputs. Use .add_inputs(String...) to label "
                         f"(and give an ordering to) the network inputs")
    if not outputs:
        raise ValueError(f"{_INVALID}network has no outputs. Use .set_outputs(String...) to "
                         f"specify (and give an ordering to) the output vertices")
    for n in inputs:
        if n in vertices:
            raise ValueError(f"{_INVALID}name \"{n}\" is present in both network inputs and "
                             f"graph vertices/layers")
    if len(set(outputs)) != len(outputs):
        dup = next(o for o in outputs if outputs.count(o) > 1)
        raise ValueError(f"{_INVALID}output \"{dup}\" is given twice")
    for name, ins in vertex_inputs.items():
        if not ins:
            raise ValueError(f"{_INVALID}vertex \"{name}\" has no inputs")
        for i in ins:
            if i not in vertices and i not in inputs:
                raise ValueError(f"{_INVALID}Vertex \"{name}\" has input \"{i}\" that does "
                                 f"not exist")
    for o in outputs:
        if o not in vertices:
            raise ValueError(f"{_INVALID}Output name \"{o}\" is not a valid vertex")
    read = {i for ins in vertex_inputs.values() for i in ins}
    disconnected = [n for n in list(inputs) + list(vertices) if n not in read
                    and n not in outputs]
    if disconnected:
        raise ValueError(f"{_INVALID}disconnected vertices found - {disconnected}. Disconnected "
                         f"vertices are vertices that do not connect to either another vertex "
                         f"or the network output (an input no vertex reads is one too)")
    for name, ins in vertex_inputs.items():
        if name in ins:
            raise ValueError(f"{_INVALID}cycle detected in graph. Cannot calculate topological "
                             f"ordering with graph cycle (cycle includes vertex \"{name}\"): "
                             f"vertex \"{name}\" names itself as its input")


def _topological_order(inputs: tuple, vertices: dict, vertex_inputs: dict) -> tuple:
    # Kahn's algorithm with DL4J's tie-break: indices are the inputs in order, then the
    # vertices in the order they were added; the queue is FIFO, seeded with every vertex
    # without inputs in index order, and a vertex's consumers are released in index order.
    names = list(inputs) + list(vertices)
    index = {n: i for i, n in enumerate(names)}
    remaining = {n: set() for n in names}
    consumers: dict[str, set] = {n: set() for n in names}
    for n in vertices:
        for i in vertex_inputs[n]:
            remaining[n].add(i)
            consumers[i].add(n)
    queue = deque(n for n in names if not remaining[n])
    order = []
    while queue:
        n = queue.popleft()
        order.append(n)
        for c in sorted(consumers[n], key=index.__getitem__):
            remaining[c].discard(n)
            if not remaining[c]:
                queue.append(c)
    if len(order) != len(names):
        # a vertex on the cycle: walk back from any vertex left over along inputs not yet
        # ordered until one repeats (a vertex downstream of a cycle is left over too)
        left = next(n for n in names if remaining[n])
        seen: list = []
        while left not in seen:
            seen.append(left)
            left = min(remaining[left], key=index.__getitem__)
        raise ValueError(f"{_INVALID}cycle detected in graph. Cannot calculate topological "
                         f"ordering with graph cycle (cycle includes vertex \"{left}\")")
    return tuple(order)


def _kept_order(given: Any, computed: tuple, inputs: tuple, vertex_inputs: dict) -> tuple:
    # a saved configuration's order, kept when it is an order of this graph's vertices in
    # which every vertex comes after its inputs
    order = tuple(_name(n, "topological_order") for n in _sequence(given, "topological_order"))
    if sorted(order) != sorted(computed):
        raise ValueError(f"topological_order: expected every vertex and input once "
                         f"({len(computed)} names), got {list(order)!r:.200}")
    position = {n: i for i, n in enumerate(order)}
    for n, ins in vertex_inputs.items():
        for i in ins:
            if position[i] > position[n]:
                raise ValueError(f"topological_order: \"{n}\" comes before its input \"{i}\"")
    return order
