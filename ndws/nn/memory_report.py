"""`MemoryReport`: the bytes each workspace of a network needs in each `WorkspaceMode`, per layer
and in total, computed from the shapes before anything runs (DL4J's ``MemoryReport``). The
network also sizes its workspaces from it before the first iteration, so that iteration does
not spill.

Every array a layer makes takes its size rounded up to ``ndws.ALIGNMENT`` in a workspace; a
workspace's need is its largest cycle: one iteration for the workspaces entered once per
iteration, one layer's pass for the per-layer working memory and the ping-pong workspaces, one
time step for the recurrent layers' loop workspace (a layer declares one step's bytes under
RNN_FF_LOOP_WORKING_MEM / RNN_BP_LOOP_WORKING_MEM). Time series of varying length are planned
for a given `sequence_length`.
"""
from __future__ import annotations

import numbers
from typing import Any

import ndws
from ndws.nn import _checks
from ndws.nn._layout import (WS_ALL_LAYERS_ACT, WS_INFERENCE, WS_LAYER_ACT, WS_LAYER_WORKING_MEM,
                             WS_RNN_LOOP_WORKING_MEM, WS_SINGLE)
from ndws.nn.workspace_mgr import ArrayType
from ndws.workspace import WorkspaceMode

__all__ = ["MemoryReport", "plan", "layer_uses", "uses_of", "merge"]

_KEPT = (ArrayType.ACTIVATIONS, ArrayType.INPUT, ArrayType.UPDATER_WORKING_MEM,
         ArrayType.FF_CACHE)
_WORKING = (ArrayType.FF_WORKING_MEM, ArrayType.BP_WORKING_MEM)
#: one time step's temporaries: a cycle of WS_RNN_LOOP_WORKING_MEM per step, in every mode
_LOOP = (ArrayType.RNN_FF_LOOP_WORKING_MEM, ArrayType.RNN_BP_LOOP_WORKING_MEM)


def _aligned(nbytes: int) -> int:
    a = ndws.ALIGNMENT
    return -(-nbytes // a) * a


def plan(uses: list, mode: WorkspaceMode, training: bool) -> dict[str, int]:
    """Workspace name -> bytes of its largest cycle, for per-layer `uses` (a list, per layer,
    of ``(pass, ArrayType, bytes)``) in `mode` (never ENABLED: resolve it first)."""
    n = len(uses)
    if mode is WorkspaceMode.NONE:
        return {}
    loop = max((_aligned(b) for layer in uses for _, t, b in layer if t in _LOOP), default=0)
    loops = {WS_RNN_LOOP_WORKING_MEM: loop} if loop else {}
    if mode is WorkspaceMode.SINGLE:
        if training:
            return {WS_SINGLE: sum(_aligned(b) for layer in uses for _, t, b in layer
                                   if t not in _LOOP), **loops}
        total = sum(_aligned(b) for i, layer in enumerate(uses) for _, t, b in layer
                    if not (i == n - 1 and t is ArrayType.ACTIVATIONS) and t not in _LOOP)
        return {WS_INFERENCE: total, **loops}
    out: dict[str, int] = dict(loops)
    work = 0
    ping = [0, 0]
    kept = 0
    for i, layer in enumerate(uses):
        for phase in ("forward", "backward"):
            cycle = sum(_aligned(b) for p, t, b in layer if p == phase and t in _WORKING)
            work = max(work, cycle)
        if training:
            kept += sum(_aligned(b) for _, t, b in layer if t in _KEPT)
            grads = sum(_aligned(b) for _, t, b in layer if t is ArrayType.ACTIVATION_GRAD)
            ping[i % 2] = max(ping[i % 2], grads)
        elif i < n - 1:
            acts = sum(_aligned(b) for _, t, b in layer if t is ArrayType.ACTIVATIONS)
            ping[i % 2] = max(ping[i % 2], acts)
    if training:
        out[WS_ALL_LAYERS_ACT] = kept
    out[WS_LAYER_WORKING_MEM] = work
    # the ping-pong workspaces a pass enters: training, one per layer's backward (layer i in
    # ACT_(i % 2)); inference, one per layer but the last
    users = range(n) if training else range(n - 1)
    for k in (0, 1):
        if any(i % 2 == k for i in users):
            out[WS_LAYER_ACT[k]] = ping[k]
    return out


def layer_uses(net: Any, batch: int, training: bool, itemsize: int,
               length: int | None = None) -> list:
    """Per layer, the arrays one pass makes (`Layer.memory_use`), its preprocessor's first:
    the network runs a preprocessor inside its layer's scopes. None for a layer (or
    preprocessor) that does not declare its use. `length`: the time steps of a network whose
    input is a time series of varying length (its layers then see that length)."""
    layers, pres = net.layers, net._preprocessors
    if length is not None:
        layers, pres = net._layers_for_length(length)
    return uses_of(list(zip(layers, pres)), batch, training, itemsize)


def uses_of(pairs: list, batch: int, training: bool, itemsize: int) -> list:
    """Per (layer or vertex, preprocessor or None) of `pairs`, the arrays one pass makes,
    the preprocessor's first (it runs inside its layer's scopes); None where undeclared."""
    out = []
    for layer, pre in pairs:
        use = _checks.memory_use(layer, batch, training, itemsize)
        if pre is not None and use is not None:
            pre_use = pre.memory_use(batch, training, itemsize)
            use = None if pre_use is None else list(pre_use) + list(use)
        out.append(use)
    return out


def merge(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    """Two plans of one thread's workspaces: the larger need per workspace."""
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out.get(k, 0), v)
    return out


class MemoryReport:
    """What `MultiLayerNetwork.memory_report(batch_size)` (and `ComputationGraph`'s) returns.

    Attributes
    ----------
    batch_size : int
    sequence_length : int or None
        The time steps planned for (a network of time series of varying length).
    layers : list of dict
        Per layer (a graph: per vertex, with its name, in topological order): index, type,
        and its bytes per `ArrayType` in training and in inference (None for a layer that does
        not declare its use).
    parameter_bytes : int
        Parameters, gradients and updater state (the flat buffers, outside every workspace).
    """

    def __init__(self, net: Any, batch_size: int, sequence_length: int | None = None):
        # a NumPy integer too (numbers.Integral), never a bool
        if (isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral)
                or batch_size < 1):
            raise ValueError(f"batch_size: expected an int >= 1, got {batch_size!r:.40}")
        if sequence_length is not None and (isinstance(sequence_length, bool) or not isinstance(
                sequence_length, numbers.Integral) or not 1 <= sequence_length <= 1 << 31):
            raise ValueError(f"sequence_length: expected an int in [1, 2**31] (the time steps "
                             f"of a time series), got {sequence_length!r:.40}")
        batch_size = self.batch_size = int(batch_size)
        self.sequence_length = None if sequence_length is None else int(sequence_length)
        itemsize = net.conf.dtype.itemsize
        self._uses = {}
        for training in (True, False):
            self._uses[training] = net._memory_uses(batch_size, training, itemsize,
                                                    self.sequence_length)
        self._plan = net._memory_plan
        self.complete = all(u is not None for uses in self._uses.values() for u in uses)
        state = sum(a.shape[0] for _, _, _, s in net._segments for a in s)
        self.parameter_bytes = (2 * net.num_params() + state) * itemsize
        self.layers = []
        for i, row in enumerate(net._memory_rows()):
            for training, key in ((True, "training"), (False, "inference")):
                use = self._uses[training][i]
                if use is None:
                    row[key] = None
                    continue
                per: dict[str, int] = {}
                for _, t, b in use:
                    per[t.name] = per.get(t.name, 0) + _aligned(b)
                row[key] = per
            self.layers.append(row)
        self._modes = {mode: (net._resolve(mode, True), net._resolve(mode, False))
                       for mode in WorkspaceMode}

    def workspace_bytes(self, mode: WorkspaceMode, training: bool) -> dict[str, int] | None:
        """Workspace name -> bytes in `mode` for training or inference (None when a layer does
        not declare its use)."""
        if not self.complete:
            return None
        resolved = self._modes[mode][0 if training else 1]
        return self._plan(self._uses[training], resolved, training)

    def workspaces(self, mode: WorkspaceMode) -> dict[str, int] | None:
        """Workspace name -> bytes for training and inference together in `mode` (a workspace
        both phases use needs the larger of the two)."""
        if not self.complete:
            return None
        return merge(self.workspace_bytes(mode, True), self.workspace_bytes(mode, False))

    def total_bytes(self, mode: WorkspaceMode) -> int | None:
        """Parameters, gradients and updater state plus every workspace of training and of
        inference in `mode` (None when a layer does not declare its use)."""
        if not self.complete:
            return None
        return self.parameter_bytes + sum(self.workspaces(mode).values())

    def __str__(self) -> str:
        steps = ("" if self.sequence_length is None
                 else f", sequences of {self.sequence_length} steps")
        lines = [f"Memory report, batch size {self.batch_size}{steps} (bytes)",
                 f"parameters + gradients + updater state: {self.parameter_bytes:,}"]
        whats = [row["type"] if "name" not in row else f"{row['name']} ({row['type']})"
                 for row in self.layers]
        width = max([20] + [len(w) + 1 for w in whats])
        lines.append(f"{'#':>3}  {'layer':<{width}}{'training':>12}{'inference':>12}")
        for row, what in zip(self.layers, whats):
            cells = ["?" if row[k] is None else f"{sum(row[k].values()):,}"
                     for k in ("training", "inference")]
            lines.append(f"{row['index']:>3}  {what:<{width}}{cells[0]:>12}{cells[1]:>12}")
        for mode in WorkspaceMode:
            if not self.complete:
                lines.append(f"{mode.name}: unknown (a layer does not declare its memory use)")
                continue
            parts = []
            for training, key in ((True, "training"), (False, "inference")):
                ws = self.workspace_bytes(mode, training)
                parts.append(f"{key} " + (", ".join(f"{k} {v:,}" for k, v in ws.items())
                                          or "no workspace"))
            lines.append(f"{mode.name}: total {self.total_bytes(mode):,}; " + "; ".join(parts))
        return "\n".join(lines)

    __repr__ = __str__
