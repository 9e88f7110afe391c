"""`TransferLearningHelper` (DL4J's): compute the frozen layers' output once ("featurize"), then
train the unfrozen layers on it, so every epoch after the first costs only the unfrozen layers'
passes (docs/training-tools.md). A graph's split is ndws.nn.transferlearning.graph_helper's."""
from __future__ import annotations

from typing import Any

from ndws.data.dataset import DataSet
from ndws.nn._busy import TRAIN
from ndws.nn.conf import MultiLayerConfiguration
from ndws.nn.layers.wrappers import FrozenLayer
from ndws.nn.transferlearning.builder import TransferLearning, settings
from ndws.nn.transferlearning.graph_helper import GraphParts

__all__ = ["TransferLearningHelper"]


class TransferLearningHelper:
    """The frozen bottom and the trainable top of a network, or of a graph, as two networks.

    Parameters
    ----------
    net : MultiLayerNetwork or ComputationGraph
        Initialised; a network's lowest layers frozen (`FrozenLayer`), or see `frozen_till`; a
        graph with frozen vertices, or see `frozen_output_at`.
    *frozen_output_at : str
        A graph's vertices to freeze, with everything they read, first (DL4J's
        ``TransferLearningHelper(ComputationGraph, String...)``): the helper then works on a
        new graph, ``TransferLearning.GraphBuilder(net).set_feature_extractor(*names)
        .build()``. For a network, one positional int or str is `frozen_till` (DL4J's
        ``TransferLearningHelper(MultiLayerNetwork, int)``).
    frozen_till : int or str, optional
        Freeze layers 0 to `frozen_till` of a network first: the helper then works on a new
        network, ``TransferLearning.Builder(net).set_feature_extractor(frozen_till).build()``.
        DL4J freezes the given network or graph in place; ndws leaves it as it is.

    Attributes
    ----------
    network : MultiLayerNetwork or ComputationGraph
        The whole network (`net`, or the frozen copy). Training the unfrozen part trains its
        parameters in place: the unfrozen network's parameters are views of its buffer.
    frozen_till : int
        A network's highest frozen layer (None for a graph).
    boundary : tuple of str
        A graph's boundary, the unfrozen graph's inputs in order: each frozen vertex an
        unfrozen one reads and each network input only unfrozen ones read, sorted by name
        (DL4J's order; None for a network). `featurize` gives their outputs.
    """

    def __init__(self, net: Any, *frozen_output_at: Any, frozen_till: Any = None):
        from ndws.nn.graph import ComputationGraph
        from ndws.nn.network import MultiLayerNetwork
        self._graph = None
        self.boundary = self.frozen_till = None
        if isinstance(net, ComputationGraph):
            if frozen_till is not None:
                raise TypeError("TransferLearningHelper: frozen_till is a MultiLayerNetwork's "
                                "layer index; name a graph's vertices to freeze "
                                "(TransferLearningHelper(graph, *frozen_output_at))")
            self._graph = GraphParts(net, frozen_output_at)
            self.network, self.boundary = self._graph.network, self._graph.boundary
            self._unfrozen = self._graph.unfrozen
            return
        if not isinstance(net, MultiLayerNetwork):
            raise TypeError(f"TransferLearningHelper: expected an initialised "
                            f"ndws.nn.MultiLayerNetwork or ComputationGraph, got "
                            f"{type(net).__name__}")
        if frozen_output_at:
            if len(frozen_output_at) > 1 or frozen_till is not None:
                given = len(frozen_output_at) + (frozen_till is not None)
                raise TypeError(f"TransferLearningHelper: a MultiLayerNetwork takes one "
                                f"frozen_till, got {given}")
            frozen_till = frozen_output_at[0]
        self._split_network(net, frozen_till)

    def _split_network(self, net: Any, frozen_till: Any) -> None:
        from ndws.nn.network import MultiLayerNetwork
        net._check_init()
        if frozen_till is not None:
            net = TransferLearning.Builder(net).set_feature_extractor(frozen_till).build()
        layers = net.layers
        frozen = [isinstance(layer, FrozenLayer) for layer in layers]
        if not frozen[0]:
            raise ValueError("TransferLearningHelper: the network's first layer is not frozen "
                             "(give frozen_till, or freeze its lowest layers with "
                             "TransferLearning.Builder.set_feature_extractor)")
        k = frozen.index(False) - 1 if False in frozen else len(frozen) - 1
        if any(frozen[k + 1:]):
            j = frozen.index(True, k + 1)
            raise ValueError(f"TransferLearningHelper: layer {j} is frozen above the "
                             f"trainable layer {k + 1}: the frozen layers must be the lowest")
        self.network = net
        self.frozen_till = k
        conf = net.conf
        split = sum(size for layer, _, _, _, size in net._layout if layer.index <= k)
        pres = conf.resolved_preprocessors
        head = MultiLayerConfiguration(
            conf.resolved_layers[:k + 1],
            input_preprocessors={i: p for i, p in enumerate(pres[:k + 1]) if p is not None},
            **settings(conf))
        self._frozen = MultiLayerNetwork(head)
        self._frozen._build(net.params()[:split], share=True)
        last = conf.resolved_layers[k]
        tail = MultiLayerConfiguration(
            conf.resolved_layers[k + 1:],
            input_preprocessors={i: p for i, p in enumerate(pres[k + 1:]) if p is not None},
            **settings(conf, input_type=last.output_type(last.input_type)))
        self._unfrozen = MultiLayerNetwork(tail)
        self._unfrozen._build(net.params()[split:], share=False, sample=False, adopt=True)

    def featurize(self, ds: Any) -> Any:
        """A network's: `ds` (a DataSet) with its features replaced by the frozen layers'
        output (detached; its labels and masks as they are). A graph's: `ds` (a MultiDataSet,
        or a DataSet for a graph of one input and one output) as a MultiDataSet whose features
        are the `boundary` vertices' outputs, computed once by the frozen part in inference
        mode (detached; the labels and labels masks as they are; data with features masks is
        refused, as in DL4J)."""
        if self._graph is not None:
            return self._graph.featurize(ds)
        if not isinstance(ds, DataSet):
            raise TypeError(f"featurize: expected a DataSet, got {type(ds).__name__}")
        out = self._frozen.output(ds.features, features_mask=ds.features_mask)
        return DataSet(out, ds.labels, ds.features_mask, ds.labels_mask)

    def fit_featurized(self, data: Any, labels: Any = None, **fit_options: Any) -> Any:
        """Train the unfrozen layers on featurized data (what the unfrozen network's or
        graph's `fit` takes, with its options); returns the History. It trains `network`'s
        parameters, so it holds `network` as its own training call would: from another
        thread, or nested in a call of `network` (a listener), either is refused by name."""
        with self.network._exclusive("TransferLearningHelper.fit_featurized", TRAIN):
            return self._unfrozen.fit(data, labels, **fit_options)

    def output_from_featurized(self, *features: Any) -> Any:
        """The output for featurized input: a network's for one array; a graph's outputs (a
        list, as `ComputationGraph.output`) for one array per `boundary` vertex."""
        if self._graph is None and len(features) != 1:
            raise TypeError(f"output_from_featurized: a network takes one features array, got "
                            f"{len(features)}")
        with self.network._exclusive("TransferLearningHelper.output_from_featurized"):
            return self._unfrozen.output(*features)

    def unfrozen_mln(self) -> Any:
        """The network of the unfrozen layers (its parameters are views of `network`'s)."""
        if self._graph is not None:
            raise TypeError("unfrozen_mln: this helper splits a ComputationGraph: "
                            "unfrozen_graph() is its unfrozen part")
        return self._unfrozen

    def unfrozen_graph(self) -> Any:
        """The graph of the unfrozen vertices, whose inputs are the `boundary` vertices (its
        parameters are views of `network`'s; its updater state is its own)."""
        if self._graph is None:
            raise TypeError("unfrozen_graph: this helper splits a MultiLayerNetwork: "
                            "unfrozen_mln() is its unfrozen part")
        return self._unfrozen
