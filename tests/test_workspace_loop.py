"""Cycles of a compiled loop (ndws._arena's `_loop_*`): a kernel opens and closes a cycle of a
workspace at every step without the GIL, and every statistic must be what the same loop of
`with ws:` blocks gives (docs/architecture.md, "The time loop and the workspace").

`_arena._run_loop(ws, steps, sizes)` is that loop with raw allocations of `sizes` bytes per
step; the Python twin allocates the same sizes as arrays (uint8: bytes are bytes)."""
from __future__ import annotations

import sys
import threading
import time
import warnings

import numpy as np
import pytest

import ndws
from ndws import _arena

C = ndws.WorkspaceConfiguration
mm = ndws.get_memory_manager()


def _stats(ws):
    d = ws.statistics()
    d.pop("id")
    d["parent"] = None if ws.parent_workspace is None else ws.parent_workspace.id
    return d


def _python_loop(ws, steps, sizes):
    for _ in range(steps):
        with ws:
            for n in sizes:
                ndws.empty(n, dtype=np.uint8)


def _both(conf, schedule, prefix="L", repeat=False):
    """Run `schedule` ([(steps, sizes), ...]) through a compiled loop on one workspace and
    through `with` blocks on another of the same configuration; return both workspaces and
    the heap allocations each made. `repeat`: the compiled loop lets the workspace add steps
    in the bytes a step holds (the multi-threaded time loops' windows)."""
    a = ndws.workspace(prefix + "_compiled", conf)
    b = ndws.workspace(prefix + "_python", conf)
    heap = []
    for run in (lambda s, z: _arena._run_loop(a, s, z, repeat=repeat),
                lambda s, z: _python_loop(b, s, z)):
        before = mm.allocation_statistics()["allocations"]
        for steps, sizes in schedule:
            run(steps, sizes)
        heap.append(mm.allocation_statistics()["allocations"] - before)
    return a, b, heap


CONFIGS = {
    "first_loop": C(),
    "dl4j_rnn_loop": C(overallocation_limit=0.05, policy_spill="REALLOCATE"),
    "over_time": C(policy_learning="OVER_TIME", cycles_before_initialization=3),
    "reallocate": C(policy_spill="REALLOCATE"),
    "no_learning": C(policy_learning="NONE"),
    "small_initial": C(initial_size=1000, policy_learning="NONE"),
    "strict_min_max": C(policy_allocation="STRICT", min_size=10_000, max_size=20_000,
                        policy_spill="REALLOCATE"),
    "mmap": C(initial_size=100_000, policy_location="MMAP", policy_learning="NONE"),
}
SCHEDULES = {
    "fixed": [(6, [4000, 100])],
    "growing": [(3, [1000]), (4, [5000, 64]), (2, [700]), (3, [9000, 1, 17])],
    "empty_steps": [(4, []), (2, [128])],
}


@pytest.mark.parametrize("repeat", [False, True], ids=["step_by_step", "windows"])
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", CONFIGS)
def test_statistics_equal_a_loop_of_with_blocks(name, schedule, repeat):
    a, b, heap = _both(CONFIGS[name], SCHEDULES[schedule], repeat=repeat)
    assert _stats(a) == _stats(b)
    assert heap[0] == heap[1]
    assert a.cycles_count == sum(s for s, _ in SCHEDULES[schedule])
    assert ndws.current_workspace() is None


def test_learns_then_allocates_nothing():
    # DL4J's WS_RNN_LOOP_WORKING_MEM: FIRST_LOOP, 5% over; the first step spills and learns,
    # every later step is served by the learned block
    conf = C(overallocation_limit=0.05, policy_spill="REALLOCATE")
    ws = ndws.workspace("RNN_LOOP", conf)
    _arena._run_loop(ws, 1, [64 * 2048 * 4])
    assert ws.current_size == 64 * 2048 * 4 + (64 * 2048 * 4) // 20
    assert ws.cycles_count == 1 and ws.spilled_size == 0
    before = mm.allocation_statistics()
    _arena._run_loop(ws, 100, [64 * 2048 * 4])
    after = mm.allocation_statistics()
    assert after["allocations"] == before["allocations"]
    assert ws.cycles_count == 101 and ws.generation == 101
    assert ws.last_cycle_allocations == ws.max_cycle_allocations == 64 * 2048 * 4
    # a longer step grows the workspace once (REALLOCATE), then stays
    _arena._run_loop(ws, 3, [64 * 2048 * 8])
    assert ws.current_size == 64 * 2048 * 8
    before = mm.allocation_statistics()["allocations"]
    _arena._run_loop(ws, 10, [64 * 2048 * 8])
    assert mm.allocation_statistics()["allocations"] == before


def test_windows_cover_the_steady_state_and_stop_where_a_step_would_not_be_plain():
    # a multi-threaded time loop runs a window of steps in the bytes of one: the workspace adds
    # a cycle per step while each would take its plain path and hand out the same bytes
    conf = C(overallocation_limit=0.05, policy_spill="REALLOCATE")
    ws = ndws.workspace("RNN_WINDOWS", conf)
    sizes = [64 * 2048 * 4, 64 * 1536 * 4]
    # the first step spills and learns (not plain): no window; the second learns nothing more
    assert _arena._run_loop(ws, 2, sizes, repeat=True) == 2
    before = mm.allocation_statistics()["allocations"]
    assert _arena._run_loop(ws, 100, sizes, repeat=True) == 1       # one window of 100 steps
    assert mm.allocation_statistics()["allocations"] == before
    assert ws.cycles_count == ws.generation == 102
    assert ws.last_cycle_allocations == sum(sizes)
    # a longer step spills (no window: its end grows the workspace), then one window of nine
    assert _arena._run_loop(ws, 10, [sizes[0] * 2], repeat=True) == 2
    assert ws.current_size == sizes[0] * 2
    assert ws.cycles_count == 112
    # a memory-mapped workspace checks its file at every entry: never a window
    mapped = ndws.workspace("RNN_WINDOWS_MMAP", C(initial_size=1 << 20, policy_location="MMAP",
                                                   policy_learning="NONE"))
    assert _arena._run_loop(mapped, 5, [4096], repeat=True) == 5
    assert mapped.cycles_count == 5


def test_inside_an_outer_workspace_the_parent_and_current_are_those_of_with_blocks():
    outer = ndws.workspace("OUTER", C(initial_size=1 << 16))
    with outer:
        x = ndws.zeros(8)
        a, b, _ = _both(C(), [(3, [256])], prefix="IN")
        assert ndws.current_workspace() is outer
        assert x.stale is None
    assert _stats(a) == _stats(b)
    assert a.parent_workspace is outer


def test_arrays_of_earlier_cycles_are_outdated():
    ws = ndws.workspace("STALE", C(initial_size=4096))
    with ws:
        old = ndws.zeros(4)
    gen = ws.generation
    _arena._run_loop(ws, 5, [64])
    assert ws.generation == gen + 5
    assert old.stale == "leaked"                    # the workspace is closed
    with ws:
        assert old.stale == "outdated"              # and reused since
        with pytest.raises(ndws.WorkspaceError, match="outdated workspace pointer"):
            old + 1


def test_debug_spill_everything_spills_every_step_as_with_blocks_do():
    ndws.get_workspace_manager().debug_mode = ndws.DebugMode.SPILL_EVERYTHING
    a, b, heap = _both(C(initial_size=1 << 16), [(4, [1000, 2000])])
    assert _stats(a) == _stats(b) and heap[0] == heap[1] == 8
    assert a.max_cycle_allocations == 3072     # 1024 + 2048 rounded, every one a spill


@pytest.mark.parametrize("repeat", [False, True], ids=["step_by_step", "windows"])
def test_switched_off_workspace(repeat):
    conf = C(initial_size=1 << 16)
    a = ndws.workspace("OFF_compiled", conf)
    b = ndws.workspace("OFF_python", conf)
    a.toggle_workspace_use(False)
    b.toggle_workspace_use(False)
    # two blocks per step: the second must not be the first one released early (each step
    # checks that what it wrote is still there). A switched-off step's blocks are its own, so
    # it is no window; the end of its cycle turns the workspace back on (ND4J's), and the
    # other two steps are one window
    assert _arena._run_loop(a, 3, [100, 100], repeat=repeat) == (2 if repeat else 3)
    _python_loop(b, 3, [100, 100])
    assert _stats(a) == _stats(b)


def test_a_block_left_to_an_export_is_left_as_with_blocks_leave_it():
    conf = C(initial_size=4096, policy_learning="NONE")
    views = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ndws.WorkspaceWarning)
        for name in ("EXP_compiled", "EXP_python"):
            ws = ndws.workspace(name, conf)
            with ws:
                views.append(np.asarray(ndws.zeros(4)))  # alive past the cycle's end
    a = ndws.workspace("EXP_compiled")
    b = ndws.workspace("EXP_python")
    _arena._run_loop(a, 3, [512], repeat=True)
    _python_loop(b, 3, [512])
    assert _stats(a) == _stats(b) and a.blocks_left_to_exports == 1


def test_the_thread_scope_count_moves_as_with_blocks_move_it():
    # get_and_activate_workspace + `with` adopts the entry only if no scope changed between:
    # a compiled loop in between counts as the `with` blocks it replaces
    m = ndws.get_workspace_manager()
    loop = ndws.workspace("OPS", C())
    ops = _arena._scope_ops()
    _arena._run_loop(loop, 4, [64])
    assert _arena._scope_ops() == ops + 8
    act = m.get_and_activate_workspace(C(initial_size=1024), "ACT")
    _arena._run_loop(loop, 1, [64])
    with act:                       # not adopted: a second (nested) entry
        pass
    assert act.is_scope_active
    act.close()
    assert not act.is_scope_active


# ------------------------------------------------------------------------------------------------
# refusals: nothing changes


def _frozen(ws):
    return _stats(ws), ws.generation


def test_an_open_workspace_is_refused():
    ws = ndws.workspace("OPEN", C(initial_size=4096))
    with ws:
        kept = ndws.zeros(3)
        state = _frozen(ws)
        with pytest.raises(ndws.WorkspaceError,
                           match=r"loop: loop_workspace \[OPEN\] is open") as e:
            _arena._run_loop(ws, 2, [64])
        assert e.value.kind == "open" and _frozen(ws) == state
        assert kept.stale is None


def test_a_circular_workspace_is_refused():
    ring = ndws.workspace("RING", C(policy_reset="ENDOFBUFFER_REACHED", overallocation_limit=1.0))
    with pytest.raises(ndws.WorkspaceError, match="circular") as e:
        _arena._run_loop(ring, 2, [64])
    assert e.value.kind == "configuration" and ring.cycles_count == 0


def test_another_threads_workspace_is_refused():
    ws = ndws.workspace("MINE", C())
    errors = []

    def other():
        try:
            _arena._run_loop(ws, 1, [64])
        except ndws.WorkspaceError as exc:
            errors.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors and errors[0].kind == "thread" and ws.cycles_count == 0


def test_fail_policy_refuses_before_the_first_step_when_a_step_cannot_fit():
    tight = ndws.workspace("TIGHT", C(initial_size=1024, policy_allocation="STRICT",
                                      policy_spill="FAIL"))
    state = _frozen(tight)
    with pytest.raises(ndws.WorkspaceError, match="Workspace is full") as e:
        _arena._run_loop(tight, 3, [512, 576])
    assert e.value.kind == "full" and _frozen(tight) == state
    _arena._run_loop(tight, 3, [512, 512])         # exactly full: fine
    assert tight.cycles_count == 3 and tight.spilled_size == 0


def test_a_loop_leaves_the_workspace_usable_after_an_error_inside_a_step(monkeypatch):
    # a step whose allocation fails (the heap refuses a spill) ends its cycle as its `with`
    # would, so the workspace is closed and usable afterwards
    ws = ndws.workspace("FAILING", C(policy_learning="NONE"))
    with pytest.raises(MemoryError):
        _arena._run_loop(ws, 3, [64, sys.maxsize // 4])
    assert not ws.is_scope_active and ws.cycles_count == 1
    _arena._run_loop(ws, 2, [64])
    assert ws.cycles_count == 3 and ndws.current_workspace() is None


def test_the_gil_is_released_between_steps():
    ws = ndws.workspace("NOGIL", C())
    _arena._run_loop(ws, 1, [1 << 20])
    counter = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counter[0] += 1
            time.sleep(0)

    old = sys.getswitchinterval()
    t = threading.Thread(target=count)
    t.start()
    try:
        while counter[0] == 0:
            time.sleep(0.001)
        sys.setswitchinterval(1000.0)
        before = counter[0]
        _arena._run_loop(ws, 3000, [1 << 20])        # 3 GB written, no Python call per step
        progressed = counter[0] - before
    finally:
        sys.setswitchinterval(old)
        stop.set()
        t.join()
    assert progressed > 0
