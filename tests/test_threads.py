"""Workspaces belong to one thread (DESIGN invariant 7); threads cycling their own workspaces
run side by side without interference."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import ndws
from ndws import WorkspaceError


def test_each_thread_has_its_own_manager_map_and_current_workspace(threaded):
    main_mgr = ndws.get_workspace_manager()

    def body(i):
        mgr = ndws.get_workspace_manager()
        assert mgr is ndws.get_workspace_manager()
        assert ndws.current_workspace() is None
        ws = ndws.workspace("SHARED_ID")
        with ws:
            assert ndws.current_workspace() is ws
            ndws.zeros(10)
        ids = mgr.get_all_workspaces_ids_for_current_thread()
        mgr.destroy_all_workspaces_for_current_thread()
        # return the objects themselves: ids of freed objects could be reused
        return mgr, ws, ids, mgr.thread_ident == threading.get_ident()

    results = threaded(body, 6)
    assert len({id(r[0]) for r in results}) == 6
    assert len({id(r[1]) for r in results}) == 6
    assert all(r[2] == ["SHARED_ID"] and r[3] for r in results)
    assert all(r[0] is not main_mgr for r in results)
    assert not main_mgr.check_if_workspace_exists("SHARED_ID")


@pytest.mark.parametrize("action, word", [
    (lambda ws: ws.notify_scope_entered(), "entered"),
    (lambda ws: ws.close(), "closed"),
    (lambda ws: ws.notify_scope_borrowed(), "borrowed"),
    (lambda ws: ws.destroy(), "destroyed"),
    (lambda ws: ws.initialize_workspace(), "initialized"),
])
def test_another_threads_workspace_cannot_be_driven(action, word):
    ws = ndws.workspace("MINE")
    errors = []

    def other():
        try:
            action(ws)
        except WorkspaceError as exc:
            errors.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1
    assert errors[0].kind == "thread" and errors[0].workspace_id == "MINE"
    assert f"can't be {word} from thread" in str(errors[0])
    assert not ws.is_scope_active and ndws.current_workspace() is None


def test_another_threads_manager_refuses_mutations():
    mgr = ndws.get_workspace_manager()
    errors = []

    def other():
        for call in (lambda: mgr.get_workspace_for_current_thread("X"),
                     lambda: mgr.create_new_workspace(None, "X"),
                     mgr.destroy_all_workspaces_for_current_thread,
                     mgr.scope_out_of_workspaces):
            try:
                call()
            except WorkspaceError as exc:
                errors.append(exc.kind)
        # read-only queries are fine from anywhere
        errors.append(mgr.check_if_workspace_exists("X"))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors == ["thread"] * 4 + [False]


def test_valid_arrays_can_be_read_from_another_thread():
    with ndws.workspace("READ_ME") as ws:
        a = ndws.arange(100.0)
        out = []
        t = threading.Thread(target=lambda: out.append(((a * 2).sum().item(),
                                                        a.workspace_id, np.asarray(a)[5])))
        t.start()
        t.join()
        assert out == [(9900.0, "READ_ME", 5.0)]
    stale = []

    def read_stale():
        try:
            a.sum()
        except WorkspaceError as exc:
            stale.append(exc.kind)
    t = threading.Thread(target=read_stale)
    t.start()
    t.join()
    assert stale == ["leaked"]
    assert ws.generation == 1


def test_arrays_made_in_another_thread_land_in_that_threads_workspace(threaded):
    def body(i):
        with ndws.workspace("W") as ws:
            a = ndws.full(4, float(i))
            ok = a.workspace is ws and a.workspace_id == "W"
            total = a.sum().item()
        ndws.destroy_all_workspaces_for_current_thread()
        return ok, total

    assert threaded(body, 4) == [(True, 4.0 * i) for i in range(4)]


def test_eight_threads_cycling_their_own_workspaces_10000_times(threaded):
    # Each thread runs 10,000 cycles of a few ops over its own workspaces and checks every
    # result against a NumPy checksum computed independently; any cross-thread interference
    # (shared offsets, a wrong current workspace, reused memory) would change a checksum.
    cycles = 10_000
    conf = ndws.WorkspaceConfiguration(policy_learning="FIRST_LOOP")

    def body(i):
        rng = np.random.default_rng(1000 + i)
        base_np = rng.standard_normal(64)
        base = ndws.from_numpy(base_np)
        outer = ndws.workspace("OUTER", conf)
        inner = ndws.workspace("INNER", conf)
        total = 0.0
        expected = 0.0
        for c in range(cycles):
            scale = float((c % 7) + i)
            with outer:
                x = base * scale
                with inner:
                    y = (x + float(c % 3)).sum()
                    total += y.item()
                assert x.stale is None
            assert x.stale == "leaked"
            expected += float((base_np * scale + float(c % 3)).sum())
        stats = (outer.cycles_count, inner.cycles_count, outer.spilled_size,
                 outer.current_size > 0)
        ndws.destroy_all_workspaces_for_current_thread()
        return total, expected, stats

    results = threaded(body, 8)
    for total, expected, stats in results:
        assert total == pytest.approx(expected, rel=1e-9)
        assert stats == (cycles, cycles, 0, True)
