"""The workspaces of a `MultiLayerNetwork` and a `ComputationGraph`: DL4J's names and
configurations (docs/networks.md, "The workspace modes"; docs/graphs.md, "Workspaces"), shared
by the networks, which enter them, and the memory reports, which plan their sizes."""
from __future__ import annotations

from ndws.workspace import LearningPolicy, SpillPolicy, WorkspaceConfiguration

# DL4J's workspace names
WS_ALL_LAYERS_ACT = "WS_ALL_LAYERS_ACT"
WS_LAYER_WORKING_MEM = "WS_LAYER_WORKING_MEM"
WS_LAYER_ACT = ("WS_LAYER_ACT_1", "WS_LAYER_ACT_2")
WS_SINGLE = "WS_SINGLE"
WS_INFERENCE = "WS_INFERENCE"
WS_OUTPUT_MEM = "WS_OUTPUT_MEM"
WS_LISTENER = "WS_LISTENER"          # NONE mode: what listeners see, for the call only
#: the recurrent layers' per-time-step working memory: a cycle per step, opened and closed by
#: the compiled time loops (RNN_FF_LOOP_WORKING_MEM and RNN_BP_LOOP_WORKING_MEM, as in DL4J)
WS_RNN_LOOP_WORKING_MEM = "WS_RNN_LOOP_WORKING_MEM"


def layer_act(k: int) -> str:
    """The name of a graph's k-th pooled activation (inference) or epsilon (training)
    workspace, DL4J's ``"WS_LAYER_ACT_" + k``."""
    return f"WS_LAYER_ACT_{k}"


def workspace_configs(n_layers: int, act_names: tuple = WS_LAYER_ACT
                      ) -> dict[str, WorkspaceConfiguration]:
    # DL4J's configurations of its network workspaces: `n_layers` counts the layers of a
    # MultiLayerNetwork, the vertices of a graph (whose pooled workspaces are `act_names`)
    over_time = dict(overallocation_limit=0.02, policy_learning=LearningPolicy.OVER_TIME,
                     policy_spill=SpillPolicy.REALLOCATE)
    all_act = WorkspaceConfiguration(overallocation_limit=0.05,
                                     policy_learning=LearningPolicy.FIRST_LOOP,
                                     policy_spill=SpillPolicy.REALLOCATE)
    return {
        WS_LAYER_WORKING_MEM: WorkspaceConfiguration(
            cycles_before_initialization=2 * n_layers, **over_time),
        WS_ALL_LAYERS_ACT: all_act,
        **{name: WorkspaceConfiguration(cycles_before_initialization=n_layers, **over_time)
           for name in act_names},
        WS_SINGLE: all_act,
        WS_INFERENCE: all_act,
        # DL4J's WS_RNN_LOOP_WORKING_MEM_CONFIG: as WS_ALL_LAYERS_ACT (every step's cycle is
        # the same size, so the first one teaches it)
        WS_RNN_LOOP_WORKING_MEM: all_act,
    }
