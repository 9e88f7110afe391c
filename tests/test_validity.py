"""The validity check (docs/architecture.md, invariant 2), NumPy exports (invariant 6) and memory
safety (invariant 1): every stale use raises with ND4J's message, nothing a user holds is silently
overwritten, and no sequence of calls crashes."""
from __future__ import annotations

import gc
import re
import warnings

import numpy as np
import pytest

import ndws
from ndws import SCOPE_PANIC_MSG, WorkspaceError

SMALL = ndws.WorkspaceConfiguration(initial_size=8192, policy_learning="NONE",
                                    policy_allocation="STRICT")


def leaked_message(op, role, wid, open_ids="[]"):
    return (f"Op [{op}] {role} argument uses leaked workspace pointer from workspace [{wid}]: "
            f"Workspace the array was defined in is no longer open.\n"
            f"All open workspaces: {open_ids}\n{SCOPE_PANIC_MSG}")


def outdated_message(op, role, wid, array_gen, ws_gen, open_ids):
    return (f"Op [{op}] {role} argument uses outdated workspace pointer from workspace "
            f"[{wid}]: Workspace array was defined in has been closed and reopened at least "
            f"once since array creation. Array WS iteration: {array_gen}. Workspace current "
            f"iteration: {ws_gen}\nAll open workspaces: {open_ids}\n{SCOPE_PANIC_MSG}")


def raises_exactly(message, kind):
    class _Ctx:
        def __enter__(self):
            self.ctx = pytest.raises(WorkspaceError)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.ctx.__exit__(*exc)
            assert str(self.info.value) == message
            assert self.info.value.kind == kind
            return handled
    return _Ctx()


# -- leaked -----------------------------------------------------------------------------------

def test_leaked_message_names_op_role_and_workspace():
    with ndws.workspace("WS_L", SMALL):
        a = ndws.ones(4)
    with raises_exactly(leaked_message("add", "x1", "WS_L"), "leaked") as info:
        a + 1
    assert info.value.workspace_id == "WS_L"
    assert info.value.op == "add"
    with raises_exactly(leaked_message("add", "x2", "WS_L"), "leaked"):
        1 + a
    with raises_exactly(leaked_message("exp", "x", "WS_L"), "leaked"):
        ndws.exp(a)
    with raises_exactly(leaked_message("sum", "a", "WS_L"), "leaked"):
        a.sum()
    with raises_exactly(leaked_message("getitem", "a", "WS_L"), "leaked"):
        a[0]
    with raises_exactly(leaked_message("setitem", "a", "WS_L"), "leaked"):
        a[0] = 1.0


def test_leaked_output_argument_is_checked_before_writing():
    good = ndws.zeros(4)
    with ndws.workspace("WS_OUT", SMALL):
        out = ndws.zeros(4)
    with raises_exactly(leaked_message("add", "out", "WS_OUT"), "leaked"):
        ndws.add(good, 1.0, out=out)
    with raises_exactly(leaked_message("setitem", "value", "WS_OUT"), "leaked"):
        good[:] = out


def test_open_workspaces_are_listed_in_creation_order():
    with ndws.workspace("WS_GONE", SMALL):
        a = ndws.ones(2)
    with ndws.workspace("WS_A", SMALL), ndws.workspace("WS_B", SMALL):
        with raises_exactly(leaked_message("multiply", "x1", "WS_GONE", "[WS_A, WS_B]"),
                            "leaked"):
            a * 2


def test_exports_of_stale_arrays_raise():
    with ndws.workspace("WS_EXP", SMALL):
        a = ndws.ones(3)
    # NumPy tries the buffer protocol, then __array__: either path must refuse
    with pytest.raises(WorkspaceError, match=r"Op \[__(buffer|array)__\] a argument uses leaked"):
        np.asarray(a)
    with pytest.raises(WorkspaceError, match=r"Op \[__buffer__\]"):
        memoryview(a)
    with pytest.raises(WorkspaceError, match=r"Op \[__array__\]"):
        a.__array__()
    for fn in (a.numpy, a.tolist, a.item, lambda: float(a), lambda: len(list(a))):
        with pytest.raises(WorkspaceError):
            fn()


def test_repr_and_str_of_stale_array_say_so_without_raising():
    with ndws.workspace("WS_REPR", SMALL):
        a = ndws.ones((2, 2), dtype=np.float32)
    text = repr(a)
    assert "leaked" in text and "WS_REPR" in text and "float32" in text and "(2, 2)" in text
    assert str(a) == text
    assert a.stale == "leaked"
    assert a.shape == (2, 2) and a.dtype == np.float32  # metadata stays readable


def test_views_share_their_base_birth():
    with ndws.workspace("WS_VIEW", SMALL):
        a = ndws.arange(10.0)
        v = a[2:5]
        assert v.workspace_id == "WS_VIEW" and v.stale is None
        v[:] = -1.0
        assert a.tolist()[2:5] == [-1.0, -1.0, -1.0]
    with pytest.raises(WorkspaceError) as info:
        v.sum()
    assert info.value.kind == "leaked"


# -- outdated ---------------------------------------------------------------------------------

def test_outdated_after_reopen_with_generations_in_message():
    ws = ndws.workspace("WS_OUTD", SMALL)
    with ws:
        a = ndws.ones(4)
        born = ws.generation
    with ws:
        with raises_exactly(outdated_message("subtract", "x1", "WS_OUTD", born, born + 1,
                                             "[WS_OUTD]"), "outdated"):
            a - 1


def test_reentering_open_noncurrent_workspace_outdates_its_arrays():
    outer = ndws.workspace("WS_OUTER", SMALL)
    inner = ndws.workspace("WS_INNER", SMALL)
    outer.notify_scope_entered()
    a = ndws.ones(4)
    inner.notify_scope_entered()
    outer.notify_scope_entered()  # A -> B -> A: a fresh entry in ND4J (its re-entry hazard)
    assert outer.parent_workspace is inner
    assert a.stale == "outdated"
    with pytest.raises(WorkspaceError) as info:
        a + 1
    assert info.value.kind == "outdated"
    outer.close()
    assert ndws.current_workspace() is inner
    inner.close()
    # ND4J would make the (by then closed) outer workspace current; ndws keeps it open until
    # its first entry closes, so it is current and usable, and `a` stays outdated
    assert ndws.current_workspace() is outer and outer.is_scope_active
    b = ndws.zeros(1)
    assert b.stale is None and a.stale == "outdated"
    with pytest.raises(WorkspaceError) as info:
        a.sum()
    assert info.value.kind == "outdated" and info.value.op == "sum"
    outer.close()
    assert ndws.current_workspace() is None
    assert b.stale == "leaked"


def test_reentering_the_current_workspace_keeps_arrays_valid():
    ws = ndws.workspace("WS_RE", SMALL)
    with ws:
        a = ndws.ones(4)
        gen = ws.generation
        with ws:
            assert ws.generation == gen
            assert (a + 1).sum().item() == 8.0
        assert a.stale is None
        assert ws.is_scope_active


# -- non-op messages (ND4J §3.4) --------------------------------------------------------------

@pytest.mark.parametrize("call, prefix, op", [
    (lambda a: a.detach(), "Cannot detach INDArray", "detach"),
    (lambda a: a.dup(), "Cannot duplicate INDArray", "dup"),
    (lambda a: a.leverage(), "Cannot leverage INDArray to new workspace", "leverage"),
    (lambda a: a.leverage_to("WS_ANY"), "Cannot leverage INDArray to new workspace",
     "leverage_to"),
    (lambda a: a.migrate(), "Cannot leverage INDArray to new workspace", "migrate"),
])
def test_non_op_paths_use_assert_valid_array_format(call, prefix, op):
    with ndws.workspace("WS_NONOP", SMALL):
        a = ndws.ones(2)
    with ndws.workspace("WS_OTHER", SMALL):
        with pytest.raises(WorkspaceError) as info:
            call(a)
    assert str(info.value) == (f"{prefix}: Array uses leaked workspace pointer from workspace "
                               f"WS_NONOP\nAll open workspaces: [WS_OTHER]")
    assert info.value.kind == "leaked" and info.value.op == op


def test_non_op_outdated_format():
    ws = ndws.workspace("WS_NONOP2", SMALL)
    with ws:
        a = ndws.ones(2)
    with ws:
        with pytest.raises(WorkspaceError) as info:
            a.dup()
    gen = ws.generation
    assert str(info.value) == (
        f"Cannot duplicate INDArray: Array outdated workspace pointer from workspace WS_NONOP2 "
        f"(array generation {gen - 1}, current workspace generation {gen})\n"
        f"All open workspaces: [WS_NONOP2]")


def test_leverage_to_missing_workspace():
    with ndws.workspace("WS_LEV", SMALL):
        a = ndws.ones(2)
        assert a.leverage_to("NOPE") is a
        with pytest.raises(ndws.NoSuchWorkspaceError) as info:
            a.leverage_to("NOPE", enforce_existence=True)
        assert isinstance(info.value, KeyError) and info.value.workspace_id == "NOPE"
        assert "NOPE" in str(info.value)


# -- destroyed --------------------------------------------------------------------------------

def test_destroying_an_open_workspace_invalidates_its_arrays_without_freeing_them():
    ws = ndws.workspace("WS_DESTROY", SMALL)
    with ws:
        a = ndws.full(1000, 3.0)
        view = np.asarray(a).copy()  # values before destruction
        exported = np.asarray(a)     # a live export keeps the memory
        ws.destroy()
        assert ws.current_size == 0
        with pytest.raises(WorkspaceError) as info:
            a + 1
        assert info.value.kind == "destroyed"
        assert "destroyed workspace pointer from workspace [WS_DESTROY]" in str(info.value)
        # a destroyed workspace is no longer current: new arrays are detached and valid
        b = ndws.ones(3)
        assert not b.is_attached() and b.sum().item() == 3.0
        np.testing.assert_array_equal(exported, view)
    with pytest.raises(WorkspaceError) as info:
        a.sum()
    assert info.value.kind == "destroyed"


def test_manager_destroy_all_then_use_raises_and_memory_stays_valid():
    with pytest.warns(ndws.WorkspaceWarning):
        with ndws.workspace("WS_DA", SMALL):
            a = ndws.arange(50.0)
            exported = np.asarray(a)
    ndws.destroy_all_workspaces_for_current_thread()
    gc.collect()
    with pytest.raises(WorkspaceError):
        a[3]
    np.testing.assert_array_equal(exported, np.arange(50.0))


# -- circular: overwritten --------------------------------------------------------------------

def ring(id_):
    conf = ndws.WorkspaceConfiguration(policy_reset="ENDOFBUFFER_REACHED",
                                       overallocation_limit=2.0)
    ws = ndws.workspace(id_, conf)
    with ws:  # learning cycle: a (100,) float64 batch, spilled
        ndws.full(100, -1.0)
    return ws


def test_circular_array_stays_valid_after_close_until_the_ring_passes_it():
    ws = ring("WS_RING")
    assert ws.initial_block_size == 1088  # floor(832 * 1.3) = 1081 -> + (8 - 1) = 1088
    assert ws.current_size == 3264        # 3 blocks (overallocation_limit 2.0)
    kept = []
    for i in range(3):
        with ws:
            kept.append(ndws.full(100, float(i)))
    assert [k.sum().item() for k in kept] == [0.0, 100.0, 200.0]
    with ws:                              # wraps to block 0: overwrites kept[0]
        ndws.full(100, 9.0)
    assert kept[0].stale == "overwritten"
    with pytest.raises(WorkspaceError) as info:
        kept[0] + 0
    assert info.value.kind == "overwritten"
    assert "overwritten workspace pointer from workspace [WS_RING]" in str(info.value)
    assert [k.stale for k in kept[1:]] == [None, None]
    assert kept[1].sum().item() == 100.0


def test_circular_detach_survives_the_ring():
    ws = ring("WS_RING2")
    with ws:
        batch = ndws.full(100, 5.0)
        safe = batch.detach()
    for i in range(6):
        with ws:
            ndws.full(100, float(i))
    assert batch.stale == "overwritten"
    assert safe.stale is None and not safe.is_attached()
    assert safe.sum().item() == 500.0


def test_circular_wrap_with_live_export_keeps_the_exported_values():
    ws = ring("WS_RING3")
    with ws:
        a = ndws.full(100, 1.0)
        exported = np.asarray(a)
    with pytest.warns(ndws.WorkspaceWarning, match="WS_RING3"):
        for i in range(5):
            with ws:
                ndws.full(100, 100.0 + i)
    np.testing.assert_array_equal(exported, np.ones(100))
    assert ws.blocks_left_to_exports == 1
    assert a.stale is None  # its old block is no longer the ring's: never overwritten


# -- exports across cycle ends ----------------------------------------------------------------

def test_cycle_end_with_live_export_leaves_block_and_warns_once():
    ws = ndws.workspace("WS_X", SMALL)
    with pytest.warns(ndws.WorkspaceWarning, match=r"Workspace \[WS_X\]"):
        with ws:
            exported = np.asarray(ndws.arange(10.0))
    assert ws.blocks_left_to_exports == 1
    assert ws.bytes_left_to_exports == 8192
    before = ndws.get_memory_manager().allocation_statistics()["allocations"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # second time: no warning
        with ws:
            ndws.full(10, -5.0)
            still = memoryview(ndws.zeros(2))
        del still
    assert ws.blocks_left_to_exports == 2
    assert ndws.get_memory_manager().allocation_statistics()["allocations"] == before + 1
    np.testing.assert_array_equal(exported, np.arange(10.0))


def test_released_exports_cost_nothing():
    ws = ndws.workspace("WS_X2", SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            with ws:
                total = float(np.asarray(ndws.arange(10.0)).sum())
    assert total == 45.0
    assert ws.blocks_left_to_exports == 0


def test_export_fail_policy_refuses_to_close_and_changes_nothing():
    conf = SMALL.replace(policy_exports="FAIL")
    ws = ndws.workspace("WS_XF", conf)
    ws.notify_scope_entered()
    a = ndws.arange(4.0)
    exported = np.asarray(a)
    gen, offset = ws.generation, ws.primary_offset
    with pytest.raises(WorkspaceError) as info:
        ws.close()
    assert info.value.kind == "exported"
    assert "policy_exports=FAIL" in str(info.value)
    assert ws.is_scope_active and ndws.current_workspace() is ws
    assert (ws.generation, ws.primary_offset) == (gen, offset)
    assert a.stale is None
    del exported
    ws.close()
    assert not ws.is_scope_active and ws.blocks_left_to_exports == 0


def test_array_interface_semantics_numpy2():
    a = ndws.arange(6.0)
    assert a.__array__().base is not None            # zero-copy
    c = a.__array__(copy=True)
    c[0] = 100.0
    assert a.item(0) == 0.0
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        a.__array__(dtype=np.float32, copy=False)
    f = a.__array__(dtype=np.float32)
    assert f.dtype == np.float32 and f.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    view = np.asarray(a)
    view[1] = 42.0
    assert a.item(1) == 42.0


def test_buffer_protocol_metadata():
    a = ndws.zeros((3, 4), dtype=np.int32)
    m = memoryview(a)
    assert m.shape == (3, 4) and m.strides == (16, 4) and m.format == "i" and not m.readonly
    t = memoryview(a.T)
    assert t.strides == (4, 16) and not t.c_contiguous and t.f_contiguous


def test_read_only_foreign_memory_stays_read_only():
    base = np.arange(4.0)
    base.flags.writeable = False
    a = ndws.from_numpy(base)
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 1.0
    with pytest.raises(ValueError):
        ndws.add(a, 1.0, out=a)
    assert memoryview(a).readonly


# -- errors leave nothing half-written ---------------------------------------------------------

@pytest.mark.parametrize("make, bad", [
    (lambda: (ndws.ones((2, 3)), ndws.ones(4)), lambda a, b: a + b),
    (lambda: (ndws.zeros(0), None), lambda a, b: ndws.max(a)),
    (lambda: (ndws.ones((2, 3)), ndws.ones((4, 2))), lambda a, b: ndws.matmul(a, b)),
    (lambda: (ndws.ones(3, dtype=np.int8), None), lambda a, b: a + 1000),
    (lambda: (ndws.ones((2, 3)), ndws.ones((3, 2))), lambda a, b: ndws.concatenate([a, b])),
    (lambda: (ndws.ones(3) > 0, ndws.ones(4)), lambda c, b: ndws.where(c, 1.0, b)),
])
def test_failed_operation_gives_its_bytes_back(make, bad):
    ws = ndws.workspace("WS_ROLL", SMALL)
    with ws:
        a, b = make()
        before = (ws.this_cycle_allocations, ws.primary_offset)
        with pytest.raises((ValueError, OverflowError)):
            bad(a, b)
        assert (ws.this_cycle_allocations, ws.primary_offset) == before


def test_check_is_public_and_cheap_to_call():
    with ndws.workspace("WS_CHK", SMALL):
        a = ndws.ones(2)
        ndws._core.check(a)
    with pytest.raises(WorkspaceError, match=re.escape("Op [mine] thing argument")):
        ndws._core.check(a, "mine", "thing")


def test_memory_kind_tells_where_an_array_lives(tmp_path):
    assert ndws.zeros(3).memory_kind == "detached"
    assert ndws.zeros(0).memory_kind == "static"
    assert ndws.from_numpy(np.zeros(3)).memory_kind == "foreign"
    ws = ndws.workspace("WS_KIND", ndws.WorkspaceConfiguration(initial_size=128,
                                                               policy_learning="NONE",
                                                               policy_allocation="STRICT"))
    with ws:
        fits, spilled = ndws.zeros(8), ndws.zeros(100)
        assert (fits.memory_kind, spilled.memory_kind, fits[2:].memory_kind) == \
            ("main", "spill", "main")
        ws.toggle_workspace_use(False)
        assert ndws.zeros(2).memory_kind == "external"
        ws.toggle_workspace_use(True)
    mm = ndws.workspace("WS_KIND_MM", ndws.WorkspaceConfiguration(
        initial_size=4096, policy_location="MMAP", policy_learning="NONE",
        temp_file_path=tmp_path / "f.bin"))
    with mm:
        assert ndws.zeros(2).memory_kind == "mmap"
