"""Transfer learning (DL4J's ``org.deeplearning4j.nn.transferlearning``; docs/training-tools.md):
`TransferLearning.Builder` edits a trained network (`TransferLearning.GraphBuilder` a graph)
into a new one with frozen lower layers
(`FrozenLayer`, `FrozenLayerWithBackprop`, in ``ndws.nn.layers``), and
`TransferLearningHelper` trains the unfrozen layers on features the frozen ones computed once."""
from ndws.nn.layers.wrappers import FrozenLayer, FrozenLayerWithBackprop
from ndws.nn.transferlearning.builder import FineTuneConfiguration, TransferLearning
from ndws.nn.transferlearning.graph_builder import GraphBuilder
from ndws.nn.transferlearning.helper import TransferLearningHelper

TransferLearning.GraphBuilder = GraphBuilder     # (its module imports builder's helpers)

__all__ = ["FineTuneConfiguration", "FrozenLayer", "FrozenLayerWithBackprop",
           "TransferLearning", "TransferLearningHelper"]
