"""ComputationGraph: networks of any directed acyclic graph of layers and vertices (DL4J's
``ComputationGraph``), its configuration and builder, and the vertices (docs/graphs.md)."""
from ndws.nn.graph.conf import BackpropType, ComputationGraphConfiguration, GraphBuilder
from ndws.nn.graph.network import ComputationGraph
from ndws.nn.graph.vertices import (
    DuplicateToTimeSeriesVertex,
    ElementWiseVertex,
    GraphVertex,
    L2NormalizeVertex,
    L2Vertex,
    LastTimeStepVertex,
    MergeVertex,
    PreprocessorVertex,
    ReshapeVertex,
    ReverseTimeSeriesVertex,
    ScaleVertex,
    ShiftVertex,
    StackVertex,
    SubsetVertex,
    UnstackVertex,
)

__all__ = ["BackpropType", "ComputationGraph", "ComputationGraphConfiguration",
           "DuplicateToTimeSeriesVertex", "ElementWiseVertex", "GraphBuilder", "GraphVertex",
           "L2NormalizeVertex", "L2Vertex", "LastTimeStepVertex", "MergeVertex",
           "PreprocessorVertex", "ReshapeVertex", "ReverseTimeSeriesVertex", "ScaleVertex",
           "ShiftVertex", "StackVertex", "SubsetVertex", "UnstackVertex"]
