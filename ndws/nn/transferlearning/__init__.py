"""Transfer learning (DL4J's ``org.deeplearning4j.nn.transferlearning``; docs/training-tools.md):
`TransferLearning.Builder` edits a trained network into a new one with frozen lower layers
(`FrozenLayer`, `FrozenLayerWithBackprop`, in ``ndws.nn.layers``), and
`TransferLearningHelper` trains the unfrozen layers on features the frozen ones computed once."""
from ndws.nn.layers.wrappers import FrozenLayer, FrozenLayerWithBackprop
from ndws.nn.transferlearning.builder import FineTuneConfiguration, TransferLearning
from ndws.nn.transferlearning.helper import TransferLearningHelper

__all__ = ["FineTuneConfiguration", "FrozenLayer", "FrozenLayerWithBackprop",
           "TransferLearning", "TransferLearningHelper"]
