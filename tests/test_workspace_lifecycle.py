"""Acceptance tests for the workspace lifecycle, ported from ND4J's workspace tests.

Sources: ``BasicWorkspaceTests``, ``WorkspaceProviderTests`` (nesting, borrowing, manager),
``SpecialWorkspaceTests`` (statistics printout) and ``AccountingTests`` (memory released by
destruction). Byte counts are re-derived from ND4J's allocation rules (docs/workspaces.md)
with ``ALIGNMENT = 64`` and float64 data: ``array([1., 2., 3., 4., 5.])`` = 40 B -> 64,
``zeros(10)`` = 80 B -> 128, ``zeros(100)`` = 800 B -> 832, a full reduction's 0-d result
one 64-byte slot.

Skipped (Java specifics or owned elsewhere): ``unsafeDuplication`` (no ndws equivalent; ``dup``
is used instead), the scope-panic message checks of ``testInvalidLeverageMigrateDetach`` /
``testBadGenerationLeverageMigrateDetach`` (stale-array validation has its own tests),
``AccountingTests.testDetached_*`` / ``testManualDeallocation_1`` / ``testTracker_1``
(constant buffers, ``INDArray.close`` and Java allocation trackers), ``testNestedWorkspaces11``
(``@Ignore`` upstream) and ``testWorkspaceGc_1`` (JVM GC).
"""
from __future__ import annotations

import gc
import io
import re

import numpy as np
import pytest

import ndws
from conftest import assert_matches
from ndws import LearningPolicy, Workspace

from nd4j_configs import BASIC, LOOP_FIRST, LOOP_OVER_TIME, MiB, aligned, conf, mgr
# WorkspaceProviderTests.basicConfiguration: 81920 + floor(81920 * 0.1) = 90112 bytes
PROVIDER_BASIC = conf(initial_size=81920, overallocation_limit=0.1,
                      policy_learning=LearningPolicy.NONE)
# WorkspaceProviderTests.loopConfiguration / firstConfiguration
PROVIDER_LOOP = conf(overallocation_limit=0.1, policy_learning="OVER_TIME",
                     policy_allocation="STRICT")
PROVIDER_FIRST = PROVIDER_LOOP.replace(policy_learning=LearningPolicy.FIRST_LOOP)

FIVE = [1.0, 2.0, 3.0, 4.0, 5.0]


# ------------------------------------------------------------------------------------------------
# Counters and queries (§2.10)


def test_cycle_counters():
    ws = ndws.workspace("CNT_1", BASIC)
    assert (ws.cycles_count, ws.this_cycle_allocations, ws.last_cycle_allocations,
            ws.max_cycle_allocations) == (0, 0, 0, 0)
    with ws:
        ndws.zeros(100)
        ndws.zeros(10)
        assert ws.this_cycle_allocations == 960         # 832 + 128
        assert ws.primary_offset == 960
    assert ws.this_cycle_allocations == 0               # reset at close
    assert ws.last_cycle_allocations == 960
    assert ws.max_cycle_allocations == 960
    assert ws.cycles_count == 1
    with ws:
        ndws.zeros(10)
        assert ws.this_cycle_allocations == 128
    assert ws.last_cycle_allocations == 128
    assert ws.max_cycle_allocations == 960
    assert ws.cycles_count == 2
    assert ws.current_size == 10 * MiB


def test_offset_aliases():
    ws = ndws.workspace("CNT_OFFSETS", BASIC)
    with ws:
        ndws.zeros(100)
        assert ws.primary_offset == ws.current_offset == ws.host_offset == ws.device_offset == 832


def test_generation_counts_fresh_entries():
    ws = ndws.workspace("CNT_GEN", BASIC)
    assert ws.generation == 0
    for g in (1, 2, 3):
        with ws:
            a = ndws.zeros(10)
            assert ws.generation == g
            assert a.generation == g
        assert ws.generation == g                       # close does not change it


def test_is_scope_active_and_initialized():
    ws = ndws.workspace("CNT_ACTIVE", LOOP_FIRST)
    assert not ws.is_scope_active
    assert not ws.is_initialized                        # size 0: nothing allocated yet
    with ws:
        assert ws.is_scope_active
        ndws.zeros(10)
    assert not ws.is_scope_active
    assert ws.is_initialized
    assert ndws.workspace("CNT_ACTIVE_2", BASIC).is_initialized


# ------------------------------------------------------------------------------------------------
# Entering and closing (§2.4, §2.5)


def test_reentry_of_current_workspace():
    # testNestedWorkspaces5: re-entering the current workspace only counts the nesting: no
    # reset, no new generation; the offset keeps growing (832 per zeros(100)).
    mgr().set_default_workspace_configuration(PROVIDER_BASIC)
    ws1 = mgr().get_workspace_for_current_thread("RE_WS1").notify_scope_entered()
    gen = ws1.generation
    a1 = ndws.zeros(100)
    ws2 = mgr().get_workspace_for_current_thread("RE_WS1").notify_scope_entered()
    assert ws2 is ws1
    assert ws1.generation == gen
    ndws.zeros(100)
    ws2.close()
    assert ndws.current_workspace() is ws1
    assert ws1.is_scope_active
    assert ws1.primary_offset == 1664
    ndws.zeros(100)
    assert ws1.primary_offset == 2496
    assert a1.stale is None
    ws1.close()
    assert ndws.current_workspace() is None
    assert ws1.cycles_count == 1


def test_reentry_with_nested_with_blocks():
    ws = ndws.workspace("RE_WITH", BASIC)
    with ws:
        a = ndws.zeros(10)
        with ws:
            assert ws.generation == 1
            ndws.zeros(10)
        assert ndws.current_workspace() is ws
        assert ws.primary_offset == 256
        assert a.stale is None
    assert ndws.current_workspace() is None
    assert ws.cycles_count == 1


def test_reentry_of_open_non_current_workspace_resets_it():
    # §2.4 hazard: A -> B -> A is a fresh entry of A: offset 0, generation + 1, so arrays of
    # the outer A scope are outdated and their memory is handed out again. Unlike ND4J, the
    # inner entry's close only ends that entry: A stays open (its outer entry is still open)
    # and becomes current again when B closes, so nothing is stranded.
    a_ws = ndws.workspace("ABA_A", BASIC)
    b_ws = ndws.workspace("ABA_B", BASIC)
    a_ws.notify_scope_entered()
    outer = ndws.zeros(10)
    assert (a_ws.generation, a_ws.primary_offset) == (1, 128)
    b_ws.notify_scope_entered()
    assert b_ws.parent_workspace is a_ws
    a_ws.notify_scope_entered()
    assert a_ws.generation == 2
    assert a_ws.primary_offset == 0
    assert a_ws.parent_workspace is b_ws
    inner = ndws.zeros(10)
    assert a_ws.primary_offset == 128                   # the outer array's slot again
    assert inner.stale is None
    assert outer.stale == "outdated"
    with pytest.raises(ndws.WorkspaceError) as ei:
        outer + 1
    assert ei.value.kind == "outdated"
    assert ei.value.workspace_id == "ABA_A"
    a_ws.close()
    assert ndws.current_workspace() is b_ws
    assert a_ws.is_scope_active and a_ws.cycles_count == 0
    b_ws.close()
    assert ndws.current_workspace() is a_ws
    assert (outer.stale, inner.stale) == ("outdated", None)
    late = ndws.zeros(10)
    assert a_ws.primary_offset == 256 and late.stale is None
    a_ws.close()
    assert ndws.current_workspace() is None
    assert not a_ws.is_scope_active
    assert a_ws.cycles_count == 1
    assert (outer.stale, inner.stale, late.stale) == ("leaked", "leaked", "leaked")


def test_close_of_a_workspace_that_is_not_open_raises():
    ws = ndws.workspace("CLOSE_NOT_OPEN", BASIC)
    with pytest.raises(ndws.WorkspaceError) as ei:
        ws.close()
    assert ei.value.kind == "closed"
    with ws:
        pass
    with pytest.raises(ndws.WorkspaceError) as ei:
        ws.close()
    assert ei.value.kind == "closed"
    assert ws.cycles_count == 1


def test_exception_inside_with_closes_the_workspace():
    # testBreakout2
    ws = mgr().get_workspace_for_current_thread(BASIC, "BREAK_2")
    with pytest.raises(KeyError):
        with mgr().get_and_activate_workspace(BASIC, "BREAK_2"):
            raise KeyError("boom")
    assert ndws.current_workspace() is None
    assert not ws.is_scope_active
    assert ws.cycles_count == 1


def test_array_returned_from_a_closed_scope():
    # testBreakout1 + testScope1: still attached, no longer in scope.
    def out_scope():
        with mgr().get_and_activate_workspace(BASIC, "BREAK_1"):
            a = ndws.zeros(10)
            assert a.is_in_scope()
            return a

    a = out_scope()
    assert ndws.current_workspace() is None
    assert a.is_attached()
    assert not a.is_in_scope()


def test_get_and_activate_enters_immediately_and_once():
    m = mgr()
    ws = m.get_and_activate_workspace(BASIC, "ACT_ONCE")
    assert ws.is_scope_active
    assert ndws.current_workspace() is ws
    assert ws.generation == 1
    with ws:                                            # manages that entry
        assert ws.generation == 1
        ndws.zeros(10)
    assert not ws.is_scope_active
    assert ndws.current_workspace() is None
    ws2 = m.get_and_activate_workspace(BASIC, "ACT_ONCE")
    assert ws2 is ws and ws.generation == 2
    ws2.close()
    assert ndws.current_workspace() is None


def test_notify_scope_left_is_close():
    ws = ndws.workspace("LEFT", BASIC)
    assert ws.notify_scope_entered() is ws
    ndws.zeros(10)
    assert ws.notify_scope_left() is ws
    assert not ws.is_scope_active
    assert ws.last_cycle_allocations == 128
    assert ndws.current_workspace() is None


def test_tag_out_of_scope_use_is_undone_by_one_close():
    # §2.5 step 2: a tagged scope-out is ended by a close that only decrements the tag and
    # makes the workspace current again; the next close ends the cycle.
    ws = ndws.workspace("TAG_OUT", BASIC)
    ws.notify_scope_entered()
    assert ws.tag_out_of_scope_use() is ws
    ws.close()
    assert ws.is_scope_active
    assert ndws.current_workspace() is ws
    assert ws.cycles_count == 0
    ws.close()
    assert not ws.is_scope_active
    assert ndws.current_workspace() is None
    assert ws.cycles_count == 1


def test_scoped_step_number():
    # Scoped workspaces keep stepsNumber 1: the counter moves at every close after the first.
    ws = ndws.workspace("STEPS_SCOPED", BASIC)
    for k in range(1, 5):
        with ws:
            ndws.zeros(10)
        assert ws.step_number == k - 1


def test_workspace_of_another_thread_cannot_be_entered(threaded):
    # docs/architecture.md's invariant 7: workspaces belong to the thread that created them.
    ws = ndws.workspace("THREAD_OWNED", BASIC)

    def body(i):
        with pytest.raises(ndws.WorkspaceError):
            ws.notify_scope_entered()
        return ndws.current_workspace()

    assert threaded(body, 1) == [None]
    assert ws.generation == 0
    assert not ws.is_scope_active


# ------------------------------------------------------------------------------------------------
# Nesting (§2.8)


def test_nested_three_levels():
    # testNestedWorkspaces4 (+1): each workspace has its own offset; closing restores the parent.
    m = mgr()
    m.set_default_workspace_configuration(PROVIDER_BASIC)
    with m.get_workspace_for_current_thread("NEST_WS1") as ws1:
        assert ws1.current_size == 90112
        assert ws1.parent_workspace is None
        ndws.zeros(100)
        with m.get_workspace_for_current_thread("NEST_WS2") as ws2:
            assert ws2.parent_workspace is ws1
            assert ws2.primary_offset == 0
            ndws.zeros(100)
            with m.get_workspace_for_current_thread("NEST_WS3") as ws3:
                assert ws3.parent_workspace is ws2
                ndws.zeros(100)
                assert ws1.primary_offset == ws2.primary_offset == ws3.primary_offset == 832
                assert m.any_workspace_active_for_current_thread()
            assert ndws.current_workspace() is ws2
            ndws.zeros(100)
            assert ws2.primary_offset == 1664
        assert ndws.current_workspace() is ws1
        ndws.zeros(100)
        assert ws1.primary_offset == 1664
    assert ndws.current_workspace() is None
    for wid in ("NEST_WS1", "NEST_WS2", "NEST_WS3"):
        assert m.get_workspace_for_current_thread(wid).primary_offset == 0
    assert not m.any_workspace_active_for_current_thread()


def test_nested_siblings():
    # testNestedWorkspaces3: two sibling scopes inside WS1; the outer offset is untouched.
    m = mgr()
    m.set_default_workspace_configuration(PROVIDER_BASIC)
    with m.get_workspace_for_current_thread("SIB_WS1") as ws1:
        ndws.zeros(100)
        for wid in ("SIB_WS2", "SIB_WS3"):
            with m.get_workspace_for_current_thread(wid) as inner:
                assert inner.primary_offset == 0
                ndws.zeros(100)
                assert ws1.primary_offset == inner.primary_offset == 832
        ndws.zeros(100)
        assert ws1.primary_offset == 1664
    assert ndws.current_workspace() is None


def test_nested_over_time_inner_workspace():
    # testNestedWorkspaces2: the inner OVER_TIME workspace spills zeros(x) each cycle; its
    # last cycle is aligned(8 x); a manual initialize takes maxCycle = aligned(800) = 832.
    m = mgr()
    m.set_default_workspace_configuration(PROVIDER_BASIC)
    with m.get_workspace_for_current_thread("NOT_WS1") as ws1:
        ndws.zeros(100)
        assert ws1.primary_offset == 832
        for x in range(1, 101):
            with m.get_workspace_for_current_thread(PROVIDER_LOOP, "NOT_WS2"):
                ndws.zeros(x)
            ws2 = m.get_workspace_for_current_thread("NOT_WS2")
            assert ws2.last_cycle_allocations == aligned(8 * x), x
        m.get_workspace_for_current_thread("NOT_WS2").initialize_workspace()
        assert m.get_workspace_for_current_thread("NOT_WS2").current_size == 832
        assert ws1.primary_offset == 832
    assert ndws.current_workspace() is None


def test_set_previous_workspace_overrides_the_parent():
    a_ws = ndws.workspace("PREV_A", BASIC)
    b_ws = ndws.workspace("PREV_B", BASIC)
    c_ws = ndws.workspace("PREV_C", BASIC)
    a_ws.notify_scope_entered()
    c_ws.notify_scope_entered()
    b_ws.notify_scope_entered()
    b_ws.set_previous_workspace(a_ws)
    assert b_ws.parent_workspace is a_ws
    b_ws.close()
    assert ndws.current_workspace() is a_ws             # not C
    a_ws.close()                                        # out of order: C is still open
    assert ndws.current_workspace() is c_ws
    c_ws.close()
    assert ndws.current_workspace() is None


def test_set_previous_workspace_to_a_closed_one_is_not_honoured():
    # a closed workspace never becomes current: the innermost open scope decides instead
    a_ws = ndws.workspace("PREV_OPEN", BASIC)
    b_ws = ndws.workspace("PREV_NEXT", BASIC)
    closed = ndws.workspace("PREV_CLOSED", BASIC)
    with a_ws:
        b_ws.notify_scope_entered()
        b_ws.set_previous_workspace(closed)
        assert b_ws.parent_workspace is closed
        b_ws.close()
        assert ndws.current_workspace() is a_ws
    assert ndws.current_workspace() is None


# ------------------------------------------------------------------------------------------------
# Scopes are lexical and never strand a thread (docs/workspaces.md, "Scopes are lexical")


def assert_thread_is_usable():
    """No workspace is current, and a new array is detached and usable."""
    assert ndws.current_workspace() is None
    x = ndws.ones(3)
    assert not x.is_attached() and x.stale is None
    assert (x + 1).sum().item() == 6.0


def test_nested_with_over_a_reentered_workspace_unwinds_without_error():
    # A, then B, then A again (ND4J's re-entry hazard) as nested `with` blocks: ND4J raised
    # "can't be closed: it is not open" at the outermost exit and left the closed A current.
    a_ws, b_ws = ndws.workspace("LEX_A", BASIC), ndws.workspace("LEX_B", BASIC)
    with a_ws:
        outer = ndws.zeros(4)
        with b_ws:
            in_b = ndws.zeros(4)
            with a_ws:
                assert ndws.current_workspace() is a_ws and a_ws.generation == 2
                inner = ndws.zeros(4)
            assert ndws.current_workspace() is b_ws
            assert (outer.stale, in_b.stale, inner.stale) == ("outdated", None, None)
        assert ndws.current_workspace() is a_ws and a_ws.is_scope_active
        with pytest.raises(ndws.WorkspaceError) as ei:
            outer + 1
        assert ei.value.kind == "outdated"
        assert ndws.zeros(4).workspace is a_ws
    assert not a_ws.is_scope_active and not b_ws.is_scope_active
    assert (a_ws.cycles_count, b_ws.cycles_count) == (1, 1)
    assert inner.stale == "leaked"
    assert_thread_is_usable()


def test_out_of_order_manual_closes_do_not_strand_the_thread():
    a_ws, b_ws = ndws.workspace("OOO_A", BASIC), ndws.workspace("OOO_B", BASIC)
    a_ws.__enter__()
    b_ws.__enter__()
    a_ws.close()                     # A ends; B, entered later, stays current
    assert not a_ws.is_scope_active
    assert ndws.current_workspace() is b_ws
    assert ndws.zeros(2).workspace is b_ws
    b_ws.close()
    assert_thread_is_usable()
    with pytest.raises(ndws.WorkspaceError) as ei:
        a_ws.close()
    assert ei.value.kind == "closed"
    assert_thread_is_usable()


def test_with_exit_restores_what_was_current_at_entry():
    # a scope entered inside a `with` and left open stays open, but leaving the `with`
    # restores what was current when it was entered; a later close ends the entry
    a_ws, b_ws = ndws.workspace("RESTORE_A", BASIC), ndws.workspace("RESTORE_B", BASIC)
    with a_ws:
        b_ws.notify_scope_entered()
        kept = ndws.zeros(2)
    assert ndws.current_workspace() is None
    assert b_ws.is_scope_active and kept.stale is None
    b_ws.close()
    assert kept.stale == "leaked" and b_ws.cycles_count == 1
    assert_thread_is_usable()


def test_with_exit_after_an_inner_close_of_the_same_workspace_does_not_raise():
    ws = ndws.workspace("EARLY_CLOSE", BASIC)
    other = ndws.workspace("EARLY_OTHER", BASIC)
    with other:
        with ws:
            ws.close()
            assert ndws.current_workspace() is other
        assert ndws.current_workspace() is other
    assert ws.cycles_count == 1
    assert_thread_is_usable()


def test_exception_in_nested_scopes_unwinds_them_all():
    a_ws, b_ws = ndws.workspace("EXC_A", BASIC), ndws.workspace("EXC_B", BASIC)
    with pytest.raises(ZeroDivisionError):
        with a_ws:
            with b_ws:
                with a_ws:
                    1 / 0
    assert not a_ws.is_scope_active and not b_ws.is_scope_active
    assert_thread_is_usable()


@pytest.mark.parametrize("inside", ["with", "nested"])
def test_destroy_all_inside_an_open_with(inside):
    a_ws, b_ws = ndws.workspace("DALL_A", BASIC), ndws.workspace("DALL_B", BASIC)
    with a_ws:
        a = ndws.zeros(3)
        if inside == "nested":
            with b_ws:
                ndws.destroy_all_workspaces_for_current_thread()
                assert_thread_is_usable()
        else:
            ndws.destroy_all_workspaces_for_current_thread()
        assert_thread_is_usable()
        assert a.stale == "destroyed"
    assert_thread_is_usable()
    assert mgr().get_all_workspaces_ids_for_current_thread() == []
    with ndws.workspace("DALL_A", BASIC) as fresh:      # a new workspace under the old id
        assert fresh is not a_ws and ndws.zeros(1).workspace is fresh
    assert_thread_is_usable()


def test_destroy_inside_a_borrow_and_a_scope_out():
    ws = ndws.workspace("DES_BORROWED", BASIC)
    other = ndws.workspace("DES_BORROWER", BASIC)
    with ws, other:
        with ws.borrow():
            with ndws.scope_out_of_workspaces():
                ws.destroy()
                assert ndws.current_workspace() is None
            assert ndws.current_workspace() is other
            assert not ws.is_borrowed
        assert ndws.current_workspace() is other
    assert_thread_is_usable()


def test_leverage_to_a_closed_workspace_raises_and_changes_nothing():
    target = ndws.workspace("LEV_CLOSED", BASIC)
    with target:
        pass
    src_ws = ndws.workspace("LEV_SRC", BASIC)
    with src_ws:
        a = ndws.arange(4.0)
        before = (target.statistics(), src_ws.statistics())
        with pytest.raises(ndws.WorkspaceError) as ei:
            a.leverage_to("LEV_CLOSED")
        assert ei.value.kind == "closed" and ei.value.workspace_id == "LEV_CLOSED"
        assert str(ei.value) == "Workspace [LEV_CLOSED] can't be allocated in: it is not open"
        assert (target.statistics(), src_ws.statistics()) == before
        assert ndws.current_workspace() is src_ws
        # leverage_or_detach detaches instead, as documented
        d = a.leverage_or_detach("LEV_CLOSED")
        assert not d.is_attached() and d.numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert_thread_is_usable()


def test_leverage_into_a_closed_parent_raises():
    a_ws, b_ws = ndws.workspace("LEVP_A", BASIC), ndws.workspace("LEVP_B", BASIC)
    a_ws.notify_scope_entered()
    b_ws.notify_scope_entered()
    x = ndws.arange(3.0)
    a_ws.close()                     # B's parent is closed now
    with pytest.raises(ndws.WorkspaceError) as ei:
        x.leverage()
    assert ei.value.kind == "closed"
    assert a_ws.this_cycle_allocations == 0
    b_ws.close()
    assert_thread_is_usable()


def test_tag_out_of_scope_use_of_a_closed_workspace_raises():
    ws = ndws.workspace("TAG_CLOSED", BASIC)
    with pytest.raises(ndws.WorkspaceError) as ei:
        ws.tag_out_of_scope_use()
    assert ei.value.kind == "closed"
    assert_thread_is_usable()


# ------------------------------------------------------------------------------------------------
# Borrowing (§2.8)


def test_borrowed_workspace_receives_dup():
    # testNestedWorkspacesOverlap2: a dup while WS1 is borrowed lands in WS1 (64 more bytes),
    # WS2 is untouched; closing the borrow makes WS2 current again.
    m = mgr()
    m.set_default_workspace_configuration(PROVIDER_BASIC)
    assert not m.check_if_workspace_exists("OVL_WS1")
    assert not m.check_if_workspace_exists("OVL_WS2")
    with m.get_workspace_for_current_thread("OVL_WS1") as ws1:
        ndws.array([6.0, 3.0, 1.0, 9.0, 21.0])
        assert ws1.primary_offset == 64
        with m.get_workspace_for_current_thread("OVL_WS2") as ws2:
            array2 = ndws.array(FIVE)
            assert ws1.primary_offset == ws2.primary_offset == 64
            gen1 = ws1.generation
            with m.get_workspace_for_current_thread("OVL_WS1").borrow() as ws3:
                assert ws3 is ws1
                assert ndws.current_workspace() is ws1
                assert ws1.is_borrowed
                array3 = array2.dup()
                assert array3.workspace is ws1
                assert ws2.primary_offset == 64
                assert ws1.primary_offset == 128
                assert ws1.generation == gen1           # borrowing is no new cycle
            assert ndws.current_workspace() is ws2
            assert not ws1.is_borrowed
            assert ws2.primary_offset == 64
            assert ws1.primary_offset == 128
            assert array3.sum().item() == 15.0
    assert ndws.current_workspace() is None


def test_borrowed_workspace_receives_new_arrays_float32():
    # testNestedWorkspacesOverlap1: 5 float32 = 20 B -> 64 in each workspace.
    m = mgr()
    m.set_default_workspace_configuration(PROVIDER_BASIC)
    with m.get_workspace_for_current_thread("OVL32_WS1") as ws1:
        ndws.array(FIVE, dtype=np.float32)
        assert ws1.primary_offset == 64
        with m.get_workspace_for_current_thread("OVL32_WS2") as ws2:
            ndws.array(FIVE, dtype=np.float32)
            assert ws1.primary_offset == ws2.primary_offset == 64
            with m.get_workspace_for_current_thread("OVL32_WS1").borrow() as ws3:
                assert ws3 is ws1
                a3 = ndws.array(FIVE, dtype=np.float32)
                assert a3.workspace_id == "OVL32_WS1"
                assert ws2.primary_offset == 64
                assert ws1.primary_offset == 128
    assert ndws.current_workspace() is None


def test_scope_out_inside_a_borrow():
    # testNestedWorkspaces7
    m = mgr()
    with m.get_and_activate_workspace(PROVIDER_BASIC, "NW7_EXT") as ext:
        ndws.zeros(10)
        with m.get_and_activate_workspace(PROVIDER_BASIC, "NW7_FF") as ff:
            array2 = ndws.zeros(10)
            assert array2.is_attached()
            with m.get_workspace_for_current_thread("NW7_EXT").borrow():
                array3 = ndws.zeros(10)
                assert array3.workspace is ext
                with ndws.scope_out_of_workspaces():
                    array4 = ndws.zeros(10)
                array5 = ndws.zeros(10)
                assert array4.workspace is None
                assert not array4.is_attached()
                assert array5.workspace is ext
            assert array3.is_attached()
            assert not array4.is_attached()
            assert array5.is_attached()
            assert ext.primary_offset == 384            # array1, array3, array5: 3 * 128
            assert ff.primary_offset == 128
    assert ndws.current_workspace() is None


def test_borrow_of_an_unsized_workspace_spills_into_it():
    # testNestedWorkspaces6 (FIRST_LOOP from 0): the outer workspace stays at size 0 during
    # its first cycle; the borrowed allocation spills into it and both are learned at close.
    m = mgr()
    with m.get_and_activate_workspace(PROVIDER_FIRST, "NW6_EXT") as ext:
        ndws.zeros(10)
        with m.get_and_activate_workspace(PROVIDER_FIRST, "NW6_FF") as ff:
            assert ndws.zeros(10).is_attached()
            with m.get_workspace_for_current_thread("NW6_EXT").borrow():
                array3 = ndws.zeros(10)
                assert array3.workspace is ext
            assert array3.is_attached()
            with ndws.scope_out_of_workspaces():
                array4 = ndws.zeros(10)
            assert not array4.is_attached()
            assert ff.spilled_size == 128
        assert ext.current_size == 0
        assert ext.spilled_size == 256
        assert ext.number_of_external_allocations == 2
    assert ext.current_size == 256
    assert ff.current_size == 128


def test_borrowing_a_borrowed_workspace_raises():
    ws = ndws.workspace("BORROW_TWICE", BASIC)
    other = ndws.workspace("BORROW_OTHER", BASIC)
    with ws, other:
        with ws.borrow():
            with pytest.raises(ndws.WorkspaceError) as ei:
                ws.borrow()
            assert str(ei.value) == "Workspace [BORROW_TWICE]: Can't borrow from borrowed workspace"
            with pytest.raises(ndws.WorkspaceError):
                ws.notify_scope_borrowed()
            assert ndws.current_workspace() is ws
            assert ws.is_borrowed
        assert ndws.current_workspace() is other
        assert not ws.is_borrowed
    assert ndws.current_workspace() is None


def test_borrow_with_notify_scope_borrowed():
    ws = ndws.workspace("BORROW_MANUAL", BASIC)
    inner = ndws.workspace("BORROW_MANUAL_INNER", BASIC)
    with ws:
        ndws.zeros(10)
        gen = ws.generation
        with inner:
            assert ws.notify_scope_borrowed() is ws
            assert ndws.current_workspace() is ws
            assert ws.generation == gen
            assert ws.primary_offset == 128
            a = ndws.zeros(10)
            assert ws.primary_offset == 256
            ws.close()                                  # ends the borrow, not a cycle
            assert ndws.current_workspace() is inner
            assert ws.cycles_count == 0 and ws.is_scope_active
            assert a.stale is None
        assert ndws.current_workspace() is ws
    assert ndws.current_workspace() is None
    assert ws.cycles_count == 1


def test_borrowing_a_closed_workspace_raises_and_changes_nothing():
    # ND4J lets a closed workspace be borrowed: its arrays are then born "leaked" and, once the
    # borrow ends, the thread could be left with it current. ndws refuses up front.
    ws = ndws.workspace("BORROW_CLOSED", BASIC)
    with ws:
        ndws.zeros(10)
    before = ws.statistics()
    for borrow in (ws.borrow, ws.notify_scope_borrowed):
        with pytest.raises(ndws.WorkspaceError) as ei:
            borrow()
        assert ei.value.kind == "closed" and ei.value.workspace_id == "BORROW_CLOSED"
        assert str(ei.value) == "Workspace [BORROW_CLOSED] can't be borrowed: it is not open"
    assert ws.statistics() == before
    assert not ws.is_borrowed
    assert ndws.current_workspace() is None
    assert ndws.zeros(3).is_attached() is False


def test_reentry_and_borrow_of_the_same_workspace_unwind():
    # testNestedWorkspaces10: entry, re-entry and a borrow of the same workspace; all three
    # arrays go to the same buffer (3 * aligned(800 x)); three closes end exactly one cycle.
    m = mgr()
    ws = m.get_workspace_for_current_thread(PROVIDER_BASIC, "NW10")
    for x in range(1, 10):
        with m.get_and_activate_workspace(PROVIDER_BASIC, "NW10"):
            ndws.zeros(100 * x)
            with m.get_and_activate_workspace(PROVIDER_BASIC, "NW10"):
                ndws.zeros(100 * x)
                with m.get_workspace_for_current_thread(PROVIDER_BASIC, "NW10").borrow():
                    ndws.zeros(100 * x)
                    assert ws.primary_offset == 3 * aligned(800 * x)
        assert ndws.current_workspace() is None
        assert not ws.is_scope_active
        assert not ws.is_borrowed
        assert ws.primary_offset == 0
        assert ws.cycles_count == x
        assert ws.generation == x


# ------------------------------------------------------------------------------------------------
# Scoping out (§2.8)


def test_scope_out_with_statement():
    # testOutOfScope1: arrays created while scoped out are detached; the workspace becomes
    # current again and continues at its offset.
    with mgr().get_and_activate_workspace(BASIC, "OOS_EXT") as ws:
        array1 = ndws.array(FIVE)
        assert ws.primary_offset == 64
        with ndws.scope_out_of_workspaces():
            assert ndws.current_workspace() is None
            array2 = ndws.array(FIVE)
        assert not array2.is_attached()
        assert ndws.current_workspace() is ws
        ndws.array(FIVE)
        assert ws.primary_offset == 128
        array1 += array2
        assert_matches(array1, np.array(FIVE) * 2)
        assert array1.sum().item() == 30.0


def test_scope_out_explicit_close():
    ws = ndws.workspace("OOS_CLOSE", BASIC)
    with ws:
        scope = ndws.scope_out_of_workspaces()          # scopes out at the call
        assert ndws.current_workspace() is None
        a = ndws.zeros(10)
        scope.close()
        assert ndws.current_workspace() is ws
        assert not a.is_attached()
        assert ws.primary_offset == 0


def test_scope_out_restores_the_innermost_workspace():
    outer = ndws.workspace("OOS_OUTER", BASIC)
    inner = ndws.workspace("OOS_INNER", BASIC)
    with outer:
        with inner:
            with ndws.scope_out_of_workspaces():
                assert ndws.current_workspace() is None
            assert ndws.current_workspace() is inner
        assert ndws.current_workspace() is outer


def test_scope_out_without_a_current_workspace():
    scope = ndws.scope_out_of_workspaces()
    assert isinstance(scope, ndws.DummyWorkspace)
    with scope:
        assert ndws.current_workspace() is None
        assert not ndws.zeros(10).is_attached()
    assert ndws.current_workspace() is None


def test_manager_scope_out():
    ws = ndws.workspace("OOS_MGR", BASIC)
    with ws:
        with mgr().scope_out_of_workspaces():
            assert ndws.current_workspace() is None
            assert ndws.zeros(10).workspace_id is None
        assert ndws.current_workspace() is ws


def test_dummy_workspace():
    d = ndws.DummyWorkspace()
    assert d.id is None
    assert d.generation == 0
    assert d.current_size == d.spilled_size == d.pinned_size == 0
    assert d.is_scope_active is False
    assert d.workspace_type is ndws.WorkspaceType.DUMMY
    assert d.notify_scope_borrowed() is None
    with pytest.raises(NotImplementedError, match="DummyWorkspace shouldn't be used for allocation"):
        d.alloc(64)


# ------------------------------------------------------------------------------------------------
# Array placement and offsets (BasicWorkspaceTests)


def test_allocation_and_values_in_workspace():
    # testAllocation1-3
    exp = np.array(FIVE)
    ws = mgr().get_and_activate_workspace(BASIC, "ALLOC_1")
    assert ndws.current_workspace() is ws
    a = ndws.array(FIVE)
    assert ws.primary_offset == 64
    assert_matches(a, exp)
    assert a.sum().item() == 15.0
    b = ndws.array(FIVE[::-1])
    a += b
    assert_matches(a, np.full(5, 6.0))
    ws.close()
    assert ndws.current_workspace() is None


@pytest.mark.parametrize("shape,first", [((1, 5), 64), ((100, 10), 8000)])
def test_dup_allocates_in_the_workspace(shape, first):
    # testAllocation5 / testAllocation6
    ws = mgr().get_and_activate_workspace(BASIC, f"DUP_{shape[0]}")
    a = ndws.ones(shape)
    assert ws.primary_offset == first
    d = a.dup()
    assert d.workspace is ws
    assert ws.primary_offset == 2 * first
    assert d.sum().item() == float(np.prod(shape))
    ws.close()


def test_detach_inside_workspace():
    # testDetach1
    with mgr().get_and_activate_workspace(BASIC, "DET_ITER") as ws:
        a = ndws.array(FIVE)
        assert a.is_in_scope() and a.is_attached()
        assert ws.primary_offset == 64
        copy = a.detach()
        assert a.is_in_scope() and a.is_attached()
        assert not copy.is_attached()
        assert copy.is_in_scope()
        assert ws.primary_offset == 64
    assert copy.sum().item() == 15.0
    assert copy is not a


def test_detached_factory_inside_workspace():
    # testCreateDetached1
    with mgr().get_and_activate_workspace(BASIC, "CDET_ITER") as ws:
        a1 = ndws.array(FIVE)
        a2 = ndws.empty(5, detached=True)
        a2.assign(a1)
        assert not a2.is_attached()
        assert ws.primary_offset == 64
        assert_matches(a2, np.array(FIVE))


def test_leverage_into_the_parent():
    # testLeverage1
    m = mgr()
    with m.get_and_activate_workspace(BASIC, "LEV_EXT") as ext:
        assert ext.primary_offset == 0
        with m.get_and_activate_workspace(BASIC, "LEV_INT") as inner:
            a = ndws.array(FIVE)
            assert ext.primary_offset == 0
            assert inner.primary_offset == 64
            copy = a.leverage()
            assert inner.primary_offset == 64
            assert ext.primary_offset == 64
            assert copy.is_attached()
            assert copy.workspace_id == "LEV_EXT"
            assert copy.sum().item() == 15.0


def test_leverage_to_a_named_workspace():
    # testLeverageTo1
    m = mgr()
    with m.get_and_activate_workspace(BASIC, "LEVTO_EXT") as ext:
        ndws.zeros(5)
        with m.get_and_activate_workspace(BASIC, "LEVTO_INT"):
            a2 = ndws.array(FIVE)
            assert ext.primary_offset == 64
            a2.leverage_to("LEVTO_EXT")
            assert ext.primary_offset == 128


def test_leverage_to_an_unsized_workspace_spills_there():
    # testLeverageTo2: the target (OVER_TIME, size 0) takes the copy as a spill; the copy
    # outlives the inner workspace's cycles.
    m = mgr()
    with m.get_and_activate_workspace(LOOP_OVER_TIME, "LEVTO2_EXT") as ext:
        ndws.array(FIVE)
        with m.get_and_activate_workspace(BASIC, "LEVTO2_INT"):
            a3 = ndws.array(FIVE).leverage_to("LEVTO2_EXT")
            assert ext.current_size == 0
            assert ext.spilled_size == 128
            assert a3.sum().item() == 15.0
        with m.get_and_activate_workspace(BASIC, "LEVTO2_INT"):
            ndws.zeros(100)
        assert a3.stale is None
        assert a3.sum().item() == 15.0


def test_leverage_to_with_a_view():
    # testLeverage3: a (1, 40) view of a (32, 1, 40) matrix; its leveraged copy needs
    # 40 * 8 = 320 bytes (a multiple of 64) in EXT.
    m = mgr()
    with m.get_and_activate_workspace(BASIC, "LEV3_EXT") as ext:
        with m.get_and_activate_workspace(BASIC, "LEV3_INT") as inner:
            matrix = ndws.zeros((32, 1, 40))
            assert inner.primary_offset == 10240
            view = matrix[0]
            view.fill(1.0)
            assert matrix.sum().item() == 40.0
            assert view.sum().item() == 40.0
            array = view.leverage_to("LEV3_EXT")
            assert ext.primary_offset == 320
        assert array.sum().item() == 40.0
        assert_matches(array, np.ones((1, 40)))


def test_detached_arrays_stay_detached():
    # testIsAttached1-3
    outside = ndws.zeros(100)
    assert not outside.is_attached()
    with mgr().get_and_activate_workspace(LOOP_FIRST, "ISATT_ITER"):
        lev = outside.leverage_to("ISATT_ITER")
        assert not outside.is_attached()
        assert not lev.is_attached()
        inside = ndws.zeros(100)
        assert inside.is_attached()
    assert not ndws.zeros(100).is_attached()
    assert not outside.is_attached()


# ------------------------------------------------------------------------------------------------
# The per-thread manager (§2.12)


def test_default_workspace_lookup():
    # testNewWorkspace1
    m = mgr()
    w1 = m.get_workspace_for_current_thread()
    w2 = m.get_workspace_for_current_thread()
    assert w1 is w2
    assert w1.id == ndws.DEFAULT_ID == "DefaultWorkspace"
    assert w1.config == m.default_workspace_configuration


def test_configuration_ignored_for_an_existing_id():
    m = mgr()
    c1 = conf(initial_size=1000, policy_allocation="STRICT")
    c2 = conf(initial_size=5000, policy_allocation="STRICT")
    ws = m.get_workspace_for_current_thread(c1, "MGR_IGNORE")
    assert m.get_workspace_for_current_thread(c2, "MGR_IGNORE") is ws
    assert ndws.workspace("MGR_IGNORE", c2) is ws
    with m.get_and_activate_workspace(c2, "MGR_IGNORE") as active:
        assert active is ws
    assert ws.current_size == 1000
    assert ws.config == c1


def test_one_argument_lookups_use_the_default_configuration():
    m = mgr()
    m.set_default_workspace_configuration(PROVIDER_BASIC)
    assert m.default_workspace_configuration == PROVIDER_BASIC
    ws = m.get_workspace_for_current_thread("MGR_ONE_ARG")
    assert ws.config == PROVIDER_BASIC
    assert ws.current_size == 90112
    with m.get_and_activate_workspace("MGR_ONE_ARG_2") as ws2:
        assert ws2.current_size == 90112
        assert ws2.id == "MGR_ONE_ARG_2"


def test_create_new_workspace_replaces_the_entry():
    m = mgr()
    w1 = ndws.workspace("MGR_NEW", conf(initial_size=1000, policy_allocation="STRICT"))
    w2 = m.create_new_workspace(conf(initial_size=2000, policy_allocation="STRICT"), "MGR_NEW")
    assert w2 is not w1
    assert m.get_workspace_for_current_thread("MGR_NEW") is w2
    assert w2.current_size == 2000
    assert m.get_all_workspaces_ids_for_current_thread().count("MGR_NEW") == 1


def test_create_new_workspace_default_id():
    m = mgr()
    ws = m.create_new_workspace(conf(initial_size=1000, policy_allocation="STRICT"))
    assert ws.id == "DefaultWorkspace"
    assert m.get_workspace_for_current_thread() is ws


def test_existence_checks():
    m = mgr()
    assert not m.check_if_workspace_exists("MGR_EXISTS")
    assert not m.check_if_workspace_exists_and_active("MGR_EXISTS")
    ws = ndws.workspace("MGR_EXISTS", BASIC)
    assert m.check_if_workspace_exists("MGR_EXISTS")
    assert not m.check_if_workspace_exists_and_active("MGR_EXISTS")
    assert not m.any_workspace_active_for_current_thread()
    with ws:
        assert m.check_if_workspace_exists_and_active("MGR_EXISTS")
        assert m.any_workspace_active_for_current_thread()
    assert not m.check_if_workspace_exists_and_active("MGR_EXISTS")
    assert not m.any_workspace_active_for_current_thread()


def test_listing_workspaces():
    m = mgr()
    made = [ndws.workspace(f"MGR_LIST_{i}", BASIC) for i in range(3)]
    assert sorted(m.get_all_workspaces_ids_for_current_thread()) == \
        ["MGR_LIST_0", "MGR_LIST_1", "MGR_LIST_2"]
    assert {id(w) for w in m.get_all_workspaces_for_current_thread()} == {id(w) for w in made}


def test_destroy_workspace_removes_it():
    m = mgr()
    ws = ndws.workspace("MGR_DESTROY", BASIC)
    m.destroy_workspace(ws)
    assert not m.check_if_workspace_exists("MGR_DESTROY")
    assert ws.current_size == 0
    fresh = ndws.workspace("MGR_DESTROY", BASIC)
    assert fresh is not ws
    assert fresh.current_size == 10 * MiB


def test_destroy_workspace_ignores_none_and_dummies():
    m = mgr()
    ws = ndws.workspace("MGR_KEEP", BASIC)
    m.destroy_workspace(None)
    m.destroy_workspace(ndws.DummyWorkspace())
    assert m.get_all_workspaces_ids_for_current_thread() == ["MGR_KEEP"]
    assert ws.current_size == 10 * MiB


def test_destroy_workspace_without_argument_only_forgets_the_default_entry():
    m = mgr()
    m.set_default_workspace_configuration(PROVIDER_BASIC)
    default = m.get_workspace_for_current_thread()
    other = ndws.workspace("MGR_OTHER", BASIC)
    m.destroy_workspace()
    assert not m.check_if_workspace_exists(ndws.DEFAULT_ID)
    assert m.check_if_workspace_exists("MGR_OTHER")
    assert default.current_size == 90112                # removed, not freed
    assert other.current_size == 10 * MiB
    assert m.get_workspace_for_current_thread() is not default


def test_destroy_all_workspaces_for_current_thread():
    m = mgr()
    made = [ndws.workspace(f"MGR_ALL_{i}", BASIC) for i in range(3)]
    ndws.destroy_all_workspaces_for_current_thread()
    assert m.get_all_workspaces_ids_for_current_thread() == []
    assert all(w.current_size == 0 for w in made)
    ndws.workspace("MGR_ALL_X", BASIC)
    ndws.destroyAllWorkspacesForCurrentThread()
    assert m.get_all_workspaces_ids_for_current_thread() == []


def test_get_uuid():
    m = mgr()
    u1, u2 = m.get_uuid(), m.get_uuid()
    n1 = int(re.fullmatch(r"Workspace_(\d+)", u1).group(1))
    n2 = int(re.fullmatch(r"Workspace_(\d+)", u2).group(1))
    assert n2 > n1


def test_twenty_threads_get_twenty_default_workspaces(threaded):
    # testMultithreading1: the manager's map is thread-local.
    mgr().set_default_workspace_configuration(PROVIDER_BASIC)
    main_default = mgr().get_workspace_for_current_thread()

    def body(i):
        m = ndws.get_workspace_manager()
        ws = m.get_workspace_for_current_thread()
        info = (ws.id, ws.current_size, m.get_workspace_for_current_thread() is ws)
        m.destroy_all_workspaces_for_current_thread()
        return ws, info                                 # keeps every object alive

    results = threaded(body, 20)
    objects = [ws for ws, _ in results]
    assert len({id(ws) for ws in objects}) == 20
    assert all(ws is not main_default for ws in objects)
    assert all(info == ("DefaultWorkspace", 90112, True) for _, info in results)
    assert ndws.current_workspace() is None


def test_same_id_on_another_thread_is_another_workspace(threaded):
    main_ws = ndws.workspace("MGR_SHARED", BASIC)
    ndws.workspace("MGR_MAIN_ONLY", BASIC)

    def body(i):
        m = ndws.get_workspace_manager()
        seen = m.check_if_workspace_exists("MGR_MAIN_ONLY")
        ws = ndws.workspace("MGR_SHARED", BASIC)
        with ws:
            ndws.zeros(10)
        m.destroy_all_workspaces_for_current_thread()
        return ws, seen

    ((other, seen),) = threaded(body, 1)
    assert other is not main_ws
    assert seen is False
    assert main_ws.cycles_count == 0
    assert mgr().get_workspace_for_current_thread("MGR_SHARED") is main_ws


def test_set_workspace_for_current_thread():
    m = mgr()
    ws = Workspace(BASIC, "MGR_SET")
    assert not m.check_if_workspace_exists("MGR_SET")
    m.set_workspace_for_current_thread(ws, "MGR_SET")
    assert m.get_workspace_for_current_thread("MGR_SET") is ws


# ------------------------------------------------------------------------------------------------
# Destruction (§2.11)


def test_destroy_keeps_counters_and_zeroes_the_size():
    m = mgr()
    ws = ndws.workspace("DES_COUNTERS", LOOP_FIRST)
    with ws:
        ndws.zeros(100)                                 # learns 832
    with ws:
        ndws.zeros(10)
    assert (ws.current_size, ws.cycles_count, ws.generation) == (832, 2, 2)
    m.destroy_workspace(ws)
    assert ws.current_size == 0
    assert ws.primary_offset == 0
    assert ws.cycles_count == 2
    assert ws.generation == 2
    assert ws.last_cycle_allocations == 128
    assert ws.max_cycle_allocations == 832
    assert ws.is_initialized                            # §2.11: isInit is not reset
    assert not m.check_if_workspace_exists("DES_COUNTERS")


def test_destroyed_workspace_reused_spills_everything():
    # Still initialized at size 0, so FIRST_LOOP never learns again: every cycle spills.
    ws = ndws.workspace("DES_REUSE", LOOP_FIRST)
    with ws:
        ndws.zeros(100)
    mgr().destroy_workspace(ws)
    for _ in range(2):
        with ws:
            a = ndws.zeros(10)
            assert a.is_attached()
            assert ws.primary_offset == 0
            assert ws.spilled_size == 128
            assert ws.number_of_external_allocations == 1
        assert ws.current_size == 0
    assert ws.cycles_count == 3


def test_destroy_of_an_open_workspace():
    # a destroyed workspace is never current (ND4J keeps it current at size 0): its scopes end,
    # the workspace current before it is current again, and its `with` exits quietly
    outer = ndws.workspace("DES_OUTER", BASIC)
    ws = ndws.workspace("DES_OPEN", BASIC)
    with outer:
        with ws:
            a = ndws.zeros(10)
            mgr().destroy_workspace(ws)
            assert ws.current_size == 0
            assert not ws.is_scope_active
            assert a.stale == "destroyed"
            assert ndws.current_workspace() is outer
            b = ndws.zeros(10)
            assert b.workspace is outer and b.stale is None
        assert ndws.current_workspace() is outer
        assert ws.cycles_count == 0
    assert ndws.current_workspace() is None
    assert a.stale == "destroyed"


def test_workspace_memory_is_accounted_and_released():
    # AccountingTests.testWorkspaceAccounting_1: a 10 MiB STRICT buffer is live heap memory
    # until the workspace is destroyed (no hidden safety tail beyond the rules).
    stats = ndws.get_memory_manager().allocation_statistics
    gc.disable()
    try:
        before = stats()
        ws = mgr().create_new_workspace(conf(initial_size=10 * MiB, policy_allocation="STRICT"),
                                        "ACC_1")
        middle = stats()
        assert middle["live_bytes"] - before["live_bytes"] == 10 * MiB
        assert middle["live_blocks"] - before["live_blocks"] == 1
        ws.destroy()
        after = stats()
        assert after["live_bytes"] == before["live_bytes"]
        assert after["live_blocks"] == before["live_blocks"]
    finally:
        gc.enable()


def test_spilled_memory_is_released_with_its_array():
    # AccountingTests.testWorkspaceAccounting_2: the (5, 5) spill (200 B -> 256) is live
    # heap memory; the close of the learning cycle frees the workspace's spills (§2.5 step 7),
    # so once the array is gone too, nothing of it may stay alive.
    stats = ndws.get_memory_manager().allocation_statistics
    c = conf(policy_allocation="STRICT", policy_learning="OVER_TIME",
             cycles_before_initialization=3)
    gc.disable()
    try:
        before = stats()
        with mgr().get_and_activate_workspace(c, "ACC_2") as ws:
            arr = ndws.zeros((5, 5))
            middle = stats()
            assert ws.spilled_size == 256
            assert middle["live_bytes"] - before["live_bytes"] == 256
        assert ws.spilled_size == 0
        del arr
        after = stats()
        assert after["live_bytes"] == before["live_bytes"]
    finally:
        gc.enable()


def test_destroy_after_use_releases_the_buffer():
    # AccountingTests.testWorkspaceAccounting_1 after a cycle: once the arrays are gone,
    # destroying the workspace releases its 10 MiB buffer even if the object is still alive.
    stats = ndws.get_memory_manager().allocation_statistics
    gc.disable()
    try:
        before = stats()
        ws = ndws.workspace("ACC_3", conf(initial_size=10 * MiB, policy_allocation="STRICT"))
        with ws:
            a = ndws.zeros(10)
        del a
        assert stats()["live_bytes"] - before["live_bytes"] == 10 * MiB
        mgr().destroy_workspace(ws)
        after = stats()
        assert after["live_bytes"] == before["live_bytes"]
        assert after["live_blocks"] == before["live_blocks"]
    finally:
        gc.enable()


# ------------------------------------------------------------------------------------------------
# Statistics printout (§2.12)


ROW = "%-26s %8s / %8s / %8s (%11d / %11d / %11d)"
HEADER = ["Workspace statistics: ---------------------------------",
          "Number of workspaces in current thread: {}",
          "Workspace name: Allocated / external (spilled) / external (pinned)"]


def _three_workspaces():
    # STAT_A: 1331 B allocated. STAT_B: learning NONE keeps its 832 B spill after close.
    # STAT_C: circular STRICT ring of 168 B (block from zeros(10)), the cold cycle's 128 B
    # spill (kept until a wrap) and a pinned zeros(100) (832 B).
    ndws.workspace("STAT_A", conf(initial_size=1331, policy_allocation="STRICT",
                                  policy_learning="NONE"))
    with ndws.workspace("STAT_B", conf(policy_learning="NONE")):
        ndws.zeros(100)
    c = ndws.workspace("STAT_C", conf(policy_reset="ENDOFBUFFER_REACHED",
                                      policy_allocation="STRICT"))
    with c:
        ndws.zeros(10)
    with c:
        ndws.zeros(100)
    return [
        ROW % ("STAT_A:", "1.30 KiB", ".00 B", ".00 B", 1331, 0, 0),
        ROW % ("STAT_B:", ".00 B", "832.00 B", ".00 B", 0, 832, 0),
        ROW % ("STAT_C:", "168.00 B", "128.00 B", "832.00 B", 168, 128, 832),
    ]


def _check_lines(lines, rows):
    assert lines[0] == HEADER[0]
    assert lines[1] == HEADER[1].format(len(rows))
    assert lines[2] == HEADER[2]
    assert sorted(lines[3:]) == sorted(rows)


def test_print_allocation_statistics_layout(capsys):
    rows = _three_workspaces()
    mgr().print_allocation_statistics_for_current_thread()
    out = capsys.readouterr().out
    assert out.endswith("\n")
    _check_lines(out[:-1].split("\n"), rows)


def test_print_allocation_statistics_to_a_file(capsys):
    rows = _three_workspaces()
    buf = io.StringIO()
    mgr().print_allocation_statistics_for_current_thread(file=buf)
    assert capsys.readouterr().out == ""
    _check_lines(buf.getvalue().rstrip("\n").split("\n"), rows)
    assert mgr().allocation_statistics_lines() == buf.getvalue().rstrip("\n").split("\n")


def test_statistics_return_the_printed_numbers():
    _three_workspaces()
    stats = mgr().statistics()
    assert set(stats) == {"STAT_A", "STAT_B", "STAT_C"}
    got = {k: (v["current_size"], v["spilled_size"], v["pinned_size"]) for k, v in stats.items()}
    assert got == {"STAT_A": (1331, 0, 0), "STAT_B": (0, 832, 0), "STAT_C": (168, 128, 832)}
    assert stats["STAT_C"]["number_of_pinned_allocations"] == 1
    assert stats["STAT_C"]["initial_block_size"] == 168
    assert stats["STAT_A"]["id"] == "STAT_A"
    assert ndws.workspace("STAT_C").statistics() == stats["STAT_C"]


@pytest.mark.parametrize("size,text", [
    (0, ".00 B"),              # DecimalFormat("#.00") drops the leading zero
    (1000, "1000.00 B"),
    (1023, "1023.00 B"),
    (1024, "1.00 KiB"),
    (1331, "1.30 KiB"),        # 1.2998...
    (1536, "1.50 KiB"),
    (90112, "88.00 KiB"),
    (5 * MiB + 123, "5.00 MiB"),
    (10 * MiB, "10.00 MiB"),
])
def test_statistics_binary_units(size, text):
    ndws.workspace("UNITS", conf(initial_size=size, policy_allocation="STRICT",
                                 policy_learning="NONE"))
    lines = mgr().allocation_statistics_lines()
    assert lines[1] == "Number of workspaces in current thread: 1"
    assert lines[3] == ROW % ("UNITS:", text, ".00 B", ".00 B", size, 0, 0)
