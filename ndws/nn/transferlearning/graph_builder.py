"""`TransferLearning.GraphBuilder` (DL4J's ``TransferLearning.GraphBuilder``): a new
`ComputationGraph` from a trained one, with vertices frozen (a named vertex and every ancestor
of it), removed, resized or added, new outputs and new training settings
(docs/training-tools.md).

Each edit applies at once to the builder's copy of the graph (vertex names, each one's inputs,
the outputs), so later edits see earlier ones, as in DL4J. `build` makes the new configuration
(through the graph's own `GraphBuilder`: the same checks and automatic merge vertices) and the
new graph, copying the parameters of every kept vertex whose shape did not change; resized and
added layers start from the new seed. Nothing mutable is shared with the original.

The new graph runs its frozen part first (`frozen_first`): its topological order, and so its
parameter layout, puts every frozen vertex before the trainable ones, keeping the original's
order within each part.
"""
from __future__ import annotations

from typing import Any

from ndws.nn.conf import SETTINGS
from ndws.nn.layers.base import Layer, WeightInit
from ndws.nn.layers.wrappers import FrozenLayer
from ndws.nn.transferlearning.builder import FineTuneConfiguration, changed, n_out_checked

__all__ = ["GraphBuilder", "frozen_first", "frozen_part", "is_frozen", "kept_settings"]


def frozen_part(vertex_inputs: dict, names: Any) -> set:
    """The vertices `names` and every vertex and network input they read from, directly or not
    (`vertex_inputs`: each vertex's inputs; a name without an entry is a network input)."""
    out: set = set()
    todo = list(names)
    while todo:
        n = todo.pop()
        if n not in out:
            out.add(n)
            todo.extend(vertex_inputs.get(n, ()))
    return out


def is_frozen(obj: Any) -> bool:
    """Whether vertex `obj` is a frozen layer that passes no gradient down (a
    FrozenLayerWithBackprop is not: the vertices below it may train)."""
    return isinstance(obj, FrozenLayer) and not obj._with_backprop


def kept_settings(conf: Any) -> dict:
    """Graph configuration `conf`'s network-wide and truncated-BPTT settings, as keyword
    arguments of `ComputationGraphConfiguration` (for a configuration made from its parts)."""
    return dict({k: getattr(conf, k) for k in SETTINGS}, backprop_type=conf.backprop_type,
                tbptt_fwd_length=conf.tbptt_fwd_length, tbptt_back_length=conf.tbptt_back_length)


def frozen_first(conf: Any) -> Any:
    """`conf` with its topological order changed so that the network inputs and the frozen
    part (every frozen layer and everything it reads) come first, the rest in its order: the
    frozen vertices' parameters then lead the flat buffer and the trainable ones are one span
    after them (what TransferLearningHelper trains in place). `conf` itself when already so."""
    from ndws.nn.graph import ComputationGraphConfiguration
    frozen = frozen_part(conf.vertex_inputs, [n for n, v in conf.resolved_vertices.items()
                                              if is_frozen(v)])
    if not frozen:
        return conf
    head = set(conf.network_inputs) | frozen
    order = ([n for n in conf.topological_order if n in head]
             + [n for n in conf.topological_order if n not in head])
    if tuple(order) == tuple(conf.topological_order):
        return conf
    return ComputationGraphConfiguration(
        conf.network_inputs, conf.network_outputs,
        {n: (v, conf.vertex_inputs[n]) for n, v in conf.vertices.items()},
        input_types=conf.input_types, input_preprocessors=conf.input_preprocessors,
        topological_order=order, **kept_settings(conf))


class GraphBuilder:
    """Edits of `graph` (an initialised ComputationGraph); each method returns the builder and
    `build()` the new, initialised graph. Vertices are named as in the original."""

    def __init__(self, graph: Any):
        from ndws.nn.graph import ComputationGraph
        if not isinstance(graph, ComputationGraph):
            raise TypeError(f"TransferLearning.GraphBuilder: expected an initialised "
                            f"ndws.nn.ComputationGraph, got {type(graph).__name__}")
        graph._check_init()
        conf = graph.conf
        self._graph = graph
        # in the original's topological order: parameters lay out, and DL4J's indices, alike
        self._vertices = {n: conf.resolved_vertices[n] for n in conf.topological_order
                          if n in conf.resolved_vertices}
        self._inputs = {n: conf.vertex_inputs[n] for n in self._vertices}
        self._outputs = list(conf.network_outputs)
        self._fine_tune: FineTuneConfiguration | None = None
        self._frozen: set[str] = set()
        self._fresh: set[str] = set()            # initialised anew: no parameters copied
        self._added: set[str] = set()

    def _vertex(self, op: str, name: Any) -> str:
        if not isinstance(name, str):
            raise TypeError(f"{op}: expected a vertex name, got {type(name).__name__} "
                            f"{name!r:.40}")
        if name not in self._vertices:
            known = ", ".join(self._vertices)
            raise ValueError(f"{op}: no vertex is named {name!r:.60} (the graph's vertices: "
                             f"{known})")
        return name

    def fine_tune_configuration(self, config: FineTuneConfiguration) -> "GraphBuilder":
        if not isinstance(config, FineTuneConfiguration):
            raise TypeError(f"fine_tune_configuration: expected a FineTuneConfiguration, got "
                            f"{type(config).__name__}")
        self._fine_tune = config
        return self

    def set_feature_extractor(self, *names: str) -> "GraphBuilder":
        """Freeze the named vertices and every vertex they read from, directly or not
        (`FrozenLayer`): their parameters never change and the backward pass skips them."""
        if not names:
            raise ValueError("set_feature_extractor: name at least one vertex")
        named = [self._vertex("set_feature_extractor", n) for n in names]
        self._frozen |= {n for n in frozen_part(self._inputs, named) if n in self._vertices}
        return self

    def n_out_replace(self, name: str, n_out: int, weight_init: Any = "XAVIER",
                      weight_init_next: Any = None) -> "GraphBuilder":
        """Give layer `name` `n_out` outputs (initialised anew with `weight_init`) and each
        layer reading it the matching n_in (initialised anew with `weight_init_next`, default
        `weight_init`)."""
        name = self._vertex("n_out_replace", name)
        n_out = n_out_checked(n_out)
        scheme = WeightInit.parse(weight_init, "n_out_replace.weight_init")
        nxt = scheme if weight_init_next is None else WeightInit.parse(
            weight_init_next, "n_out_replace.weight_init_next")
        layer = self._vertices[name]
        if name in self._frozen or isinstance(layer, FrozenLayer):
            raise ValueError(f"n_out_replace: vertex \"{name}\" is frozen: its shape cannot "
                             f"change")
        if not isinstance(layer, Layer) or "weight_init" not in layer.fields \
                or not layer.has_weights:
            raise ValueError(f"n_out_replace: vertex \"{name}\" ({type(layer).__name__}) has no "
                             f"n_out to replace")
        readers = [v for v, ins in self._inputs.items() if name in ins]
        for v in readers:
            after = self._vertices[v]
            if not isinstance(after, Layer) or not after.has_weights \
                    or isinstance(after, FrozenLayer) or v in self._frozen:
                raise ValueError(f"n_out_replace: vertex \"{v}\" ({type(after).__name__}) reads "
                                 f"\"{name}\" and cannot take a new width (a vertex, a frozen "
                                 f"or parameterless layer); replace the vertices from there "
                                 f"(remove_vertex_keep_connections, add_layer)")
        self._vertices[name] = changed(layer, n_out=n_out, weight_init=scheme)
        self._fresh.add(name)
        for v in readers:
            self._vertices[v] = changed(self._vertices[v], n_in=None, weight_init=nxt)
            self._fresh.add(v)
        return self

    def remove_vertex_keep_connections(self, name: str) -> "GraphBuilder":
        """Remove vertex `name` but keep the vertices reading it and the outputs naming it
        (DL4J's): add a vertex of the same name back before `build`."""
        self._remove(self._vertex("remove_vertex_keep_connections", name))
        return self

    def remove_vertex_and_connections(self, name: str) -> "GraphBuilder":
        """Remove vertex `name`, its name from every vertex's inputs and from the outputs."""
        name = self._vertex("remove_vertex_and_connections", name)
        self._remove(name)
        for v, ins in self._inputs.items():
            self._inputs[v] = tuple(i for i in ins if i != name)
        self._outputs = [o for o in self._outputs if o != name]
        return self

    def _remove(self, name: str) -> None:
        del self._vertices[name], self._inputs[name]
        self._frozen.discard(name)
        self._added.discard(name)

    def _add(self, op: str, name: Any, obj: Any, inputs: tuple) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"{op}: expected a vertex name, got {name!r:.40}")
        if name in self._vertices or name in self._graph.conf.network_inputs:
            raise ValueError(f"{op}: a vertex named \"{name}\" already exists")
        if not inputs:
            raise ValueError(f"{op}: vertex \"{name}\" reads nothing (give its inputs)")
        self._vertices[name] = obj.clone()
        self._inputs[name] = tuple(inputs)
        self._fresh.add(name)
        self._added.add(name)

    def add_layer(self, name: str, layer: Layer, *inputs: str) -> "GraphBuilder":
        """Add `layer` (a configuration: copied) as vertex `name` reading `inputs`."""
        if not isinstance(layer, Layer):
            raise TypeError(f"add_layer: expected an ndws.nn layer, got {type(layer).__name__}")
        if len(inputs) > 1:
            # the graph builder's automatic merge vertex, made here: a removed layer's merge
            # vertex is kept (remove_vertex_keep_connections), and reused when it reads the same
            merge = f"{name}-merge"
            if merge not in self._vertices:
                from ndws.nn.graph.vertices import MergeVertex
                self._add("add_layer", merge, MergeVertex(), inputs)
            elif self._inputs[merge] != tuple(inputs):
                raise ValueError(f"add_layer: vertex \"{merge}\" exists and reads "
                                 f"{self._inputs[merge]}, not {tuple(inputs)}")
            inputs = (merge,)
        self._add("add_layer", name, layer, inputs)
        return self

    def add_vertex(self, name: str, vertex: Any, *inputs: str) -> "GraphBuilder":
        """Add `vertex` (a GraphVertex: copied) as vertex `name` reading `inputs`."""
        from ndws.nn.graph.vertices import GraphVertex
        if not isinstance(vertex, GraphVertex):
            raise TypeError(f"add_vertex: expected an ndws.nn.graph.GraphVertex, got "
                            f"{type(vertex).__name__}")
        self._add("add_vertex", name, vertex, inputs)
        return self

    def set_outputs(self, *names: str) -> "GraphBuilder":
        """The new graph's outputs (replacing the original's)."""
        if not names:
            raise ValueError("set_outputs: name at least one output")
        self._outputs = [self._vertex("set_outputs", n) for n in names]
        return self

    def build(self) -> Any:
        """The new, initialised graph (ValueError naming what is inconsistent: an input or an
        output that no longer exists, a frozen output layer, no vertex left)."""
        from ndws.nn.graph import ComputationGraph, ComputationGraphConfiguration
        graph, conf = self._graph, self._graph.conf
        if not self._vertices:
            raise ValueError("build: the builder removes every vertex of the graph and adds "
                             "none")
        known = set(self._vertices) | set(conf.network_inputs)
        for v, ins in self._inputs.items():
            missing = [i for i in ins if i not in known]
            if missing:
                raise ValueError(f"build: vertex \"{v}\" reads \"{missing[0]}\", which was "
                                 f"removed (add a vertex of that name back, or "
                                 f"remove_vertex_and_connections)")
        for o in self._outputs:
            if o not in self._vertices:
                raise ValueError(f"build: output \"{o}\" was removed (set_outputs)")
        ft = self._fine_tune
        settings = {k: getattr(conf, k) for k in SETTINGS}
        settings.update(ft.conf_changes() if ft is not None else {})
        b = ComputationGraphConfiguration.builder(**settings).add_inputs(*conf.network_inputs)
        for name, obj in self._vertices.items():
            if isinstance(obj, Layer):
                if name in self._frozen and not isinstance(obj, FrozenLayer):
                    try:
                        obj = FrozenLayer(obj)
                    except ValueError as exc:
                        raise ValueError(f"set_feature_extractor: vertex \"{name}\": "
                                         f"{exc}") from None
                elif ft is not None and not isinstance(obj, FrozenLayer):
                    obj = ft.apply(obj, fill_only=name in self._added)
                pre = conf.input_preprocessors.get(name)
                b.add_layer(name, obj, *self._inputs[name], preprocessor=pre)
            else:
                b.add_vertex(name, obj, *self._inputs[name])
        b.set_outputs(*self._outputs)
        if conf.input_types is not None:
            b.set_input_types(*conf.input_types)
        b.backprop_type(conf.backprop_type).tbptt_fwd_length(conf.tbptt_fwd_length)
        b.tbptt_back_length(conf.tbptt_back_length)
        new = ComputationGraph(frozen_first(b.build()))
        new.init()
        # the kept vertices' parameters, copied (the rest keep their fresh initialisation)
        old = {n.name: n.obj for n in graph._nodes if n.obj is not None}
        for node in new._nodes:
            if node.obj is None or node.name in self._fresh or node.name not in old:
                continue
            mine = old[node.name].params
            for key, view in node.obj.params.items():
                view.assign(mine[key])
        return new
