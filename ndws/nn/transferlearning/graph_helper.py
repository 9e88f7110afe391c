"""`TransferLearningHelper`'s graph form (DL4J's ``TransferLearningHelper(ComputationGraph,
String...)``; docs/training-tools.md): a `ComputationGraph` split at the boundary of its frozen
part into two graphs on its parameter buffer.

The frozen part is every frozen layer (`FrozenLayer`) and everything it reads, network inputs
included. The boundary is each frozen vertex an unfrozen vertex reads, and each network input
only unfrozen vertices read; the unfrozen graph takes them as its inputs, named as the
vertices and sorted by name (DL4J's order). The frozen graph (inference only) outputs the
boundary vertices; its parameters are views of the head of the whole graph's buffer, the
unfrozen graph's of its tail, so training the unfrozen graph trains the whole graph's
parameters in place.
"""
from __future__ import annotations

from typing import Any

from ndws.data.dataset import DataSet, MultiDataSet
from ndws.nn.transferlearning.graph_builder import (GraphBuilder, frozen_part, is_frozen,
                                                   kept_settings)

__all__ = ["GraphParts"]

_WHO = "TransferLearningHelper"


def _names(graph: Any, names: tuple) -> list:
    # frozen_output_at, checked: vertices of the graph that are not network inputs
    conf = graph.conf
    for i, n in enumerate(names):
        what = f"{_WHO}: frozen_output_at[{i}]"
        if not isinstance(n, str):
            raise TypeError(f"{what}: expected a vertex name (str), got {type(n).__name__} "
                            f"{n!r:.40}")
        if n in conf.network_inputs:
            raise ValueError(f"{what}: \"{n}\" is a network input, not a vertex (name the last "
                             f"vertices to freeze)")
        if n not in conf.vertices:
            known = ", ".join(v for v in conf.topological_order if v in conf.vertices)
            raise ValueError(f"{what}: no vertex is named {n!r:.60} (the graph's vertices: "
                             f"{known})")
    return list(names)


def _sub_conf(conf: Any, inputs: list, outputs: list, vertices: list, input_types: Any) -> Any:
    # the configuration of the part of `conf` made of `vertices` (in conf's topological order,
    # which the part keeps: its parameters lay out as in the whole graph), reading `inputs`
    from ndws.nn.graph import ComputationGraphConfiguration
    pres = conf.input_preprocessors if input_types is not None else {
        n: p for n, p in conf.resolved_preprocessors.items() if p is not None}
    return ComputationGraphConfiguration(
        inputs, outputs, {n: (conf.resolved_vertices[n], conf.vertex_inputs[n])
                          for n in vertices},
        input_types=input_types,
        input_preprocessors={n: p for n, p in pres.items() if n in vertices},
        topological_order=list(inputs) + vertices, **kept_settings(conf))


class GraphParts:
    """`graph` (frozen at `names` first, on a new graph, when given) as its frozen and unfrozen
    graphs: `network`, `boundary`, `frozen`, `unfrozen`."""

    def __init__(self, graph: Any, names: tuple):
        graph._check_init()
        if names:
            names = _names(graph, names)
            conf = graph.conf
            reached = frozen_part(conf.vertex_inputs, names)
            out = next((o for o in conf.network_outputs if o in reached), None)
            if out is not None:
                raise ValueError(f"{_WHO}: frozen_output_at: freezing {', '.join(names)} "
                                 f"freezes the graph's output \"{out}\": nothing would be left "
                                 f"to train")
            graph = GraphBuilder(graph).set_feature_extractor(*names).build()
        conf = graph.conf
        inputs = conf.network_inputs
        frozen = frozen_part(conf.vertex_inputs, [n for n, v in conf.resolved_vertices.items()
                                                  if is_frozen(v)])
        if not frozen:
            raise ValueError(f"{_WHO}: the graph has no frozen vertex (name the vertices to "
                             f"freeze: TransferLearningHelper(graph, *frozen_output_at), or "
                             f"freeze them with TransferLearning.GraphBuilder."
                             f"set_feature_extractor)")
        out = next((o for o in conf.network_outputs if o in frozen), None)
        if out is not None:
            raise ValueError(f"{_WHO}: the graph's output \"{out}\" is frozen: nothing would "
                             f"be left to train")
        order = conf.topological_order
        unfrozen = [n for n in order if n not in frozen and n not in inputs]
        read = {i for n in unfrozen for i in conf.vertex_inputs[n]}
        boundary = sorted(n for n in inputs + tuple(n for n in order if n in frozen)
                          if n in read)
        # the frozen part's parameters must lead the buffer (TransferLearning.GraphBuilder
        # builds graphs so), the unfrozen part's are the rest: two spans to view
        owners = [(graph._owner_name(o), off, size) for o, _, _, off, size in graph._layout]
        split = sum(size for n, _, size in owners if n in frozen)
        late = next((n for n, off, _ in owners if n in frozen and off >= split), None)
        if late is not None:
            first = next(n for n, _, _ in owners if n not in frozen)
            raise ValueError(f"{_WHO}: the frozen vertex \"{late}\" has its parameters after "
                             f"the trainable vertex \"{first}\" in the graph's parameter "
                             f"order; TransferLearning.GraphBuilder(graph).build() gives the "
                             f"same graph with its frozen part first")
        types = [conf.vertex_types.get(n) for n in boundary]
        tail = _sub_conf(conf, boundary, list(conf.network_outputs), unfrozen,
                         None if None in types else types)
        heads = [n for n in order if n in frozen and n not in inputs]
        frozen_inputs = [n for n in inputs if n in frozen]
        in_types = conf.input_types
        head = _sub_conf(conf, frozen_inputs, [n for n in boundary if n not in inputs], heads,
                         None if in_types is None else
                         [in_types[inputs.index(n)] for n in frozen_inputs])
        from ndws.nn.graph import ComputationGraph
        self.network = graph
        self.boundary = tuple(boundary)
        self.frozen = ComputationGraph(head)
        self.frozen._build(graph.params()[:split], share=True)
        self.unfrozen = ComputationGraph(tail)
        self.unfrozen._build(graph.params()[split:], share=False, sample=False, adopt=True)
        self._frozen_inputs = [inputs.index(n) for n in frozen_inputs]

    def featurize(self, data: Any) -> MultiDataSet:
        """`data` (a MultiDataSet, or a DataSet for a graph of one input and one output) with
        its features replaced by the boundary's outputs, in the unfrozen graph's input order;
        its labels and labels masks as they are."""
        if not isinstance(data, (MultiDataSet, DataSet)):
            raise TypeError(f"featurize: expected a MultiDataSet (or a DataSet for a graph of "
                            f"one input and one output), got {type(data).__name__}")
        g = self.network
        mds = g._batch(data, "featurize")
        if mds.features_masks is not None:
            # DL4J's neither: a boundary vertex's mask is not one of the graph's outputs
            raise ValueError("featurize: data has features masks; featurizing data with "
                             "features masks is not supported (fit the graph itself)")
        xs = g._as_inputs(list(mds.features), "featurize: features")
        outs = self.frozen.output(*[xs[k] for k in self._frozen_inputs])
        found = dict(zip(self.frozen.conf.network_outputs, outs))
        found.update(zip(g.conf.network_inputs, xs))
        return MultiDataSet([found[n] for n in self.boundary], mds.labels, None,
                            mds.labels_masks)
