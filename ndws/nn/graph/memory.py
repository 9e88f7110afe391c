"""The memory plan of a `ComputationGraph`: the bytes each of its workspaces needs in each
`WorkspaceMode`, from the arrays each vertex declares (`memory_use`) and the graph's pooled
workspaces (docs/graphs.md, "Workspaces"). `MemoryReport` prints it; the graph sizes its
workspaces from it before its first pass.

In the SEPARATE layout a vertex's activations (inference) or epsilons (training) live in the
pooled workspace ``WS_LAYER_ACT_<k>`` the graph assigned it when it was built; a pooled
workspace needs the most any of its vertices puts there, as each of them has it to itself for
a cycle.
"""
from __future__ import annotations

from ndws.nn._layout import (WS_ALL_LAYERS_ACT, WS_INFERENCE, WS_LAYER_WORKING_MEM,
                             WS_RNN_LOOP_WORKING_MEM, WS_SINGLE, layer_act)
from ndws.nn.memory_report import _KEPT, _LOOP, _WORKING, _aligned
from ndws.nn.workspace_mgr import ArrayType
from ndws.workspace import WorkspaceMode

__all__ = ["graph_plan", "widest_cut", "minimal_live_set"]

_A, _G = ArrayType.ACTIVATIONS, ArrayType.ACTIVATION_GRAD


def graph_plan(nodes: list, uses: list, mode: WorkspaceMode, training: bool) -> dict[str, int]:
    """Workspace name -> bytes of its largest cycle, for the graph's vertices `nodes` (inputs
    left out, in topological order; each with its pooled slots and whether it is an output)
    and their `uses` (per vertex, ``(pass, ArrayType, bytes)``), in `mode` (never ENABLED:
    resolve it first)."""
    if mode is WorkspaceMode.NONE:
        return {}
    # a recurrent layer's time steps: a cycle of the loop workspace each, in every mode
    loop = max((_aligned(b) for use in uses for _, t, b in use if t in _LOOP), default=0)
    loops = {WS_RNN_LOOP_WORKING_MEM: loop} if loop else {}
    uses = [[u for u in use if u[1] not in _LOOP] for use in uses]
    if mode is WorkspaceMode.SINGLE:
        if training:
            return {WS_SINGLE: sum(_aligned(b) for use in uses for _, _, b in use), **loops}
        # inference: the outputs' activations are detached (or the caller's)
        return {WS_INFERENCE: sum(_aligned(b) for node, use in zip(nodes, uses)
                                  for _, t, b in use if not (node.output >= 0 and t is _A)),
                **loops}
    out: dict[str, int] = dict(loops)
    work = kept = 0
    pooled: dict[int, int] = {}
    for node, use in zip(nodes, uses):
        for phase in ("forward", "backward"):
            # training: the working-memory types (and the epsilons nobody reads); inference:
            # all but the activations (the inference manager puts the rest in working memory)
            cycle = sum(_aligned(b) for p, t, b in use if p == phase and (
                (t in _WORKING or (t is _G and node.grad_slot is None)) if training
                else t is not _A))
            work = max(work, cycle)
        if training:
            kept += sum(_aligned(b) for _, t, b in use if t in _KEPT)
            slot, t_pooled = node.grad_slot, _G
        else:
            slot, t_pooled = node.act_slot, _A
        if slot is not None:
            size = sum(_aligned(b) for _, t, b in use if t is t_pooled)
            pooled[slot] = max(pooled.get(slot, 0), size)
    if training:
        out[WS_ALL_LAYERS_ACT] = kept
    out[WS_LAYER_WORKING_MEM] = work
    for k in sorted(pooled):
        out[layer_act(k)] = pooled[k]
    return out


def widest_cut(nodes: list, training: bool) -> int:
    """How many pooled workspaces a pass of the graph holds open at once (its pool's size)."""
    slots = {n.grad_slot if training else n.act_slot for n in nodes}
    slots.discard(None)
    return len(slots)


def minimal_live_set(nodes: list, uses: list, training: bool) -> int:
    """The fewest bytes any layout needs for a pass of the graph (the yardstick of the pooled
    layout, docs/graphs.md): the largest, over the steps of the pass, of what must be alive at
    once (the arrays of the vertices whose last reader has not run yet, the widest cut, plus
    the step's working memory), plus in training everything the backward pass reads (the
    kept activations). `nodes` and `uses` as for `graph_plan`; inputs' positions are
    `node.pos`, the positions of a node's inputs and consumers `node.ins` / `node.consumers`."""
    uses = [[u for u in use if u[1] not in _LOOP] for use in uses]
    by_pos = {node.pos: (node, use) for node, use in zip(nodes, uses)}
    t_pooled = _G if training else _A
    size = {p: sum(_aligned(b) for _, t, b in use if t is t_pooled) for p, (_, use) in
            by_pos.items()}
    # each vertex's array lives from its step to the end of the step that last reads it:
    # forward, its last consumer; backward, the first of its inputs (steps run in reverse)
    ends = {}
    for p, (node, _) in by_pos.items():
        if training:
            ends[p] = min(node.ins) if node.ins else p
        elif node.output < 0 and node.consumers:
            ends[p] = max(node.consumers)
    peak = 0
    for p, (node, use) in by_pos.items():
        if training:
            live = sum(size[q] for q, e in ends.items() if e <= p <= q)
        else:
            live = sum(size[q] for q, e in ends.items() if q <= p <= e)
        work = max(sum(_aligned(b) for ph, t, b in use if ph == phase and (
            t in _WORKING if training else t is not _A)) for phase in ("forward", "backward"))
        peak = max(peak, live + work)
    kept = sum(_aligned(b) for use in uses for _, t, b in use if t in _KEPT) if training else 0
    return kept + peak
