"""ndws.nn.workspace_mgr: ArrayType, LayerWorkspaceMgr (DL4J's LayerWorkspaceMgr /
BaseWorkspaceMgr), WorkspacesCloseable, and ndws.WorkspaceMode."""
import threading

import numpy as np
import pytest

import ndws
from ndws.nn import ArrayType, LayerWorkspaceMgr, WorkspacesCloseable

CONF = ndws.WorkspaceConfiguration(initial_size=1 << 16)
A, W, G = ArrayType.ACTIVATIONS, ArrayType.FF_WORKING_MEM, ArrayType.ACTIVATION_GRAD


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


def mgr_act_work():
    # ACTIVATIONS -> WS_ACT, FF working memory -> WS_WORK, everything else detached
    return (LayerWorkspaceMgr.builder().with_(A, "WS_ACT", CONF).with_(W, "WS_WORK", CONF)
            .default_no_workspace().build())


def test_array_type_has_every_dl4j_value():
    assert [t.name for t in ArrayType] == [
        "INPUT", "ACTIVATIONS", "ACTIVATION_GRAD", "FF_WORKING_MEM", "BP_WORKING_MEM",
        "RNN_FF_LOOP_WORKING_MEM", "RNN_BP_LOOP_WORKING_MEM", "UPDATER_WORKING_MEM", "FF_CACHE"]
    assert str(ArrayType.FF_CACHE) == "FF_CACHE"


def test_workspace_mode_values():
    assert [m.name for m in ndws.WorkspaceMode] == ["NONE", "ENABLED", "SINGLE", "SEPARATE"]
    from ndws.workspace import WorkspaceMode
    assert ndws.WorkspaceMode is WorkspaceMode


def test_builder_defaults_fill_only_what_is_not_set():
    mgr = (LayerWorkspaceMgr.builder().with_(A, "WS_ACT", CONF).no_workspace_for(G)
           .default_workspace("WS_ALL", CONF).build())
    assert mgr.get_workspace_name(A) == "WS_ACT"
    assert mgr.is_scoped_out(G) and mgr.get_workspace_name(G) is None
    for t in ArrayType:
        if t not in (A, G):
            assert mgr.get_workspace_name(t) == "WS_ALL"
            assert mgr.get_configuration(t) is CONF
    out = LayerWorkspaceMgr.builder().with_(A, "WS_ACT", CONF).default_no_workspace().build()
    assert [t for t in ArrayType if out.is_scoped_out(t)] == [t for t in ArrayType if t is not A]
    # with_ after no_workspace_for un-scopes the type
    again = LayerWorkspaceMgr.builder().no_workspace_for(A).with_(A, "X", CONF).build()
    assert not again.is_scoped_out(A) and again.get_workspace_name(A) == "X"


def test_unconfigured_type_raises_dl4j_message():
    mgr = LayerWorkspaceMgr.builder().with_(A, "WS_ACT", CONF).build()
    for call in (lambda: mgr.create(W, 3), lambda: mgr.is_workspace_open(W),
                 lambda: mgr.notify_scope_entered(W), lambda: mgr.get_workspace_name(W),
                 lambda: mgr.leverage_to(W, ndws.zeros(2))):
        with pytest.raises(ndws.WorkspaceError,
                           match=r"^No workspace configuration has been provided for "
                                 r"arrayType: FF_WORKING_MEM$"):
            call()
    assert not mgr.has_configuration(W) and mgr.has_configuration(A)


def test_constructor_checks_keys_and_types():
    with pytest.raises(ValueError, match=r"^Keys for config may and workspace names must "
                                         r"match: names has \['ACTIVATIONS'\], configs has \[\]$"):
        LayerWorkspaceMgr({A: "X"}, {})
    with pytest.raises(ValueError, match=r"^ACTIVATIONS: both configured and scoped out$"):
        LayerWorkspaceMgr({A: "X"}, {A: CONF}, scoped_out=[A])
    with pytest.raises(TypeError, match=r"^scoped_out: expected an ndws.nn.ArrayType, got str"):
        LayerWorkspaceMgr(scoped_out=["ACTIVATIONS"])


@pytest.mark.parametrize("call, msg", [
    (lambda b: b.with_("ACTIVATIONS", "X", CONF), r"^type: expected an ndws.nn.ArrayType, got str"),
    (lambda b: b.with_(A, "", CONF), r"^name: expected a non-empty str \(a workspace id\), got str"),
    (lambda b: b.with_(A, 7, CONF), r"^name: expected a non-empty str \(a workspace id\), got int"),
    (lambda b: b.with_(A, "X", {"initial_size": 1}), r"^conf: expected an ndws.WorkspaceConfiguration"),
    (lambda b: b.no_workspace_for(None), r"^type: expected an ndws.nn.ArrayType, got NoneType"),
    (lambda b: b.default_workspace("X", None), r"^conf: expected an ndws.WorkspaceConfiguration"),
])
def test_builder_refuses_wrong_types(call, msg):
    with pytest.raises(TypeError, match=msg):
        call(LayerWorkspaceMgr.builder())


def test_methods_refuse_wrong_types_before_touching_anything():
    mgr = mgr_act_work()
    with mgr.notify_scope_entered(A) as ws:
        before = ws.this_cycle_allocations
        with pytest.raises(TypeError, match=r"^array: expected an ndws.NDArray, got ndarray$"):
            mgr.dup(A, np.zeros(3))
        with pytest.raises(TypeError, match=r"^array: expected an ndws.NDArray, got list$"):
            mgr.leverage_to(A, [1.0])
        with pytest.raises(TypeError, match=r"^type: expected an ndws.nn.ArrayType, got int"):
            mgr.create(3, (2,))
        with pytest.raises(TypeError, match=r"^notify_scope_entered: expected at least one"):
            mgr.notify_scope_entered()
        with pytest.raises(TypeError, match=r"^types: expected an ndws.nn.ArrayType, got str"):
            mgr.notify_scope_entered(A, "FF_WORKING_MEM")
        with pytest.raises(ValueError, match="negative dimensions"):
            mgr.create(A, (-1, 2))
        with pytest.raises(ValueError, match="array is too big"):
            mgr.create(A, (1 << 40, 1 << 40))
        assert ws.this_cycle_allocations == before          # nothing was allocated
        assert ndws.current_workspace() is ws


def test_single_type_scope_is_the_workspace_and_restores_the_caller():
    mgr = mgr_act_work()
    with ndws.workspace("OUTER") as outer:
        with mgr.notify_scope_entered(A) as ws:
            assert isinstance(ws, ndws.Workspace) and ws.id == "WS_ACT"
            assert ndws.current_workspace() is ws
            a = mgr.create(A, (2, 3), dtype="float32")
            assert a.workspace_id == "WS_ACT" and a.tolist() == [[0.0] * 3] * 2
            assert ws.this_cycle_allocations == 64           # one aligned 24-byte array
        assert ndws.current_workspace() is outer
    with pytest.raises(ndws.WorkspaceError, match="leaked"):
        a + 1
    # close() instead of `with`, as in DL4J's try/finally
    ws = mgr.notify_scope_entered(A)
    assert ndws.current_workspace() is ws
    ws.close()
    assert ndws.current_workspace() is None


def test_several_types_close_in_reverse_order():
    mgr = mgr_act_work()
    with mgr.notify_scope_entered(A, W, G) as entered:
        act, work, scoped = entered
        assert (act.id, work.id) == ("WS_ACT", "WS_WORK")
        assert ndws.current_workspace() is None                # G is scoped out, entered last
        assert not mgr.create(G, 2).is_attached()
        assert mgr.create(W, 2).workspace_id == "WS_WORK"      # borrowed: no new cycle
        gen = work.generation
        cycles = act.cycles_count, work.cycles_count
    assert not act.is_scope_active and not work.is_scope_active
    assert (act.cycles_count, work.cycles_count) == (cycles[0] + 1, cycles[1] + 1)
    assert work.generation == gen
    assert ndws.current_workspace() is None


def test_close_order_is_innermost_first(monkeypatch):
    mgr = mgr_act_work()
    handle = mgr.notify_scope_entered(A, W)
    assert isinstance(handle, WorkspacesCloseable)
    act, work = handle.workspaces
    assert ndws.current_workspace() is work
    order = []
    real_exit = ndws.Workspace.__exit__

    def spy(self, *exc):
        order.append((self.id, ndws.current_workspace().id))
        return real_exit(self, *exc)

    monkeypatch.setattr(ndws.Workspace, "__exit__", spy)
    handle.close()
    assert order == [("WS_WORK", "WS_WORK"), ("WS_ACT", "WS_ACT")]
    assert not act.is_scope_active and not work.is_scope_active
    assert ndws.current_workspace() is None
    handle.close()                                              # a second close is a no-op
    assert len(order) == 2


def test_entering_is_all_or_nothing(monkeypatch):
    mgr = mgr_act_work()
    real = LayerWorkspaceMgr._enter
    calls = []

    def failing(self, t, adopt):
        calls.append(t)
        if t is W:
            raise RuntimeError("cannot enter")
        return real(self, t, adopt)

    monkeypatch.setattr(LayerWorkspaceMgr, "_enter", failing)
    with pytest.raises(RuntimeError, match="cannot enter"):
        mgr.notify_scope_entered(A, W)
    assert calls == [A, W]
    act = ndws.get_workspace_manager().get_workspace_for_current_thread("WS_ACT")
    assert not act.is_scope_active                     # the first one was closed again
    assert ndws.current_workspace() is None


def test_borrowed_scope_needs_an_open_workspace():
    mgr = mgr_act_work()
    with pytest.raises(ndws.WorkspaceError,
                       match=r'^Workspace "WS_ACT" for array type ACTIVATIONS is not open$'):
        mgr.notify_scope_borrowed(A)
    with pytest.raises(ndws.WorkspaceError,
                       match=r'^Workspace "WS_ACT" for array type ACTIVATIONS is not open$'):
        mgr.create(A, 3)
    with mgr.notify_scope_entered(A) as act:
        gen = act.generation
        with ndws.workspace("OTHER"):
            with mgr.notify_scope_borrowed(A) as ws:
                assert ws is act and ndws.current_workspace() is act
                x = ndws.ones(4)
            assert ndws.current_workspace().id == "OTHER"
        assert act.generation == gen                       # borrowing starts no cycle
        assert x.workspace_id == "WS_ACT" and x.sum().item() == 4.0
    with mgr.notify_scope_borrowed(G):                     # scoped out: detached
        assert not ndws.zeros(2).is_attached()


def test_open_queries_and_assertions():
    mgr = mgr_act_work()
    assert mgr.is_workspace_open(G)                        # scoped out counts as open
    assert not mgr.is_workspace_open(A)
    with pytest.raises(ndws.WorkspaceError, match=r"^Assertion failed: expected workspace for "
                                                  r"array type ACTIVATIONS to be open: fwd$"):
        mgr.assert_open(A, "fwd")
    mgr.assert_not_open(A, "ok")
    mgr.assert_not_open(G, "scoped out is never 'open'")
    with pytest.raises(ndws.WorkspaceError, match=r'^Assertion failed: expected current '
                       r'workspace to be "WS_ACT" \(for array type ACTIVATIONS\) - actual '
                       r'current workspace is null: x$'):
        mgr.assert_current_workspace(A, "x")
    with mgr.notify_scope_entered(A):
        assert mgr.is_workspace_open(A)
        mgr.assert_open(A)
        mgr.assert_current_workspace(A)
        with pytest.raises(ndws.WorkspaceError, match=r"^Assertion failed: expected workspace "
                                                      r"for array type ACTIVATIONS to not be "
                                                      r"open: bp$"):
            mgr.assert_not_open(A, "bp")
        with mgr.notify_scope_entered(W):
            with pytest.raises(ndws.WorkspaceError, match=r'actual current workspace is '
                                                          r'"WS_WORK": $'):
                mgr.assert_current_workspace(A)
        mgr.assert_current_workspace(G)                    # nothing to check when scoped out


def test_create_variants_place_and_size():
    mgr = mgr_act_work()
    with mgr.notify_scope_entered(A) as ws:
        z = mgr.create(A, (3, 4), dtype=np.float64, order="F")
        e = mgr.create_uninitialized(A, 5, dtype="int32")
        d = mgr.create(G, (2,))
        assert z.flags.f_contiguous and z.dtype == np.float64 and not z.numpy().any()
        assert e.shape == (5,) and e.workspace_id == "WS_ACT"
        assert not d.is_attached()
        assert ws.this_cycle_allocations == 128 + 64       # 96 and 20 bytes, each to 64s


def test_dup_and_cast_to():
    mgr = mgr_act_work()
    src = ndws.arange(6.0).reshape(2, 3)
    with mgr.notify_scope_entered(A):
        c = mgr.dup(A, src)
        assert c.workspace_id == "WS_ACT" and c.tolist() == src.tolist()
        f = mgr.dup(A, src, order="F")
        assert f.flags.f_contiguous
        assert mgr.cast_to(A, src, "float64") is src       # detached, right dtype: as it is
        assert mgr.cast_to(A, c, "float64") is c           # already in WS_ACT
        assert mgr.cast_to(A, src, "float64", dup_if_correct_type=True) is not src
        s = mgr.cast_to(A, src, np.float32)
        assert s.dtype == np.float32 and s.workspace_id == "WS_ACT"
        with ndws.workspace("ELSEWHERE"):
            other = ndws.ones(3)
        with pytest.raises(ndws.WorkspaceError, match="leaked"):
            mgr.dup(A, other)                              # a stale array is never copied
        with pytest.raises(TypeError):
            mgr.cast_to(A, src, "not a dtype")


def test_leverage_to():
    mgr = mgr_act_work()
    assert mgr.leverage_to(A, None) is None
    det = ndws.ones(3)
    with pytest.raises(ndws.WorkspaceError, match=r"^Workspace for array type ACTIVATIONS is not "
                                                  r"open$"):
        with ndws.workspace("W0"):
            mgr.leverage_to(A, ndws.ones(2))
    with mgr.notify_scope_entered(A):
        assert mgr.leverage_to(A, det) is det              # detached arrays stay as they are
        with mgr.notify_scope_entered(W):
            work = mgr.create(W, 3)
            moved = mgr.leverage_to(A, work)
            detached = mgr.leverage_to(G, work)
            assert moved.workspace_id == "WS_ACT" and moved is not work
            assert not detached.is_attached()
            mgr.set_no_leverage_override("WS_WORK")
            assert mgr.leverage_to(A, work) is work
        assert moved.tolist() == [0.0, 0.0, 0.0]


def test_validate_array_location():
    mgr = mgr_act_work()
    with mgr.notify_scope_entered(A, W):
        act, work = mgr.create(A, 2), mgr.create(W, 2)
        det = ndws.zeros(2, detached=True)
        assert mgr.validate_array_location(A, act, False, True) is act
        assert mgr.validate_array_location(A, det, False, False) is det
        with pytest.raises(ndws.WorkspaceError, match=r'^Array workspace validation failed: '
                           r'Array of type ACTIVATIONS should be in workspace "WS_ACT" but is '
                           r'detached$'):
            mgr.validate_array_location(A, det, False, True)
        with pytest.raises(ndws.WorkspaceError, match=r'^Array workspace validation failed: '
                           r'Array of type ACTIVATIONS should be in workspace "WS_ACT" but is '
                           r'in workspace "WS_WORK"$') as info:
            mgr.validate_array_location(A, work, False, True)
        assert info.value.kind == "location"
        with pytest.raises(ndws.WorkspaceError, match=r'^Array workspace validation failed: '
                           r'Array of type ACTIVATION_GRAD should be detached \(no workspace\) '
                           r'but is in workspace: WS_WORK$'):
            mgr.validate_array_location(G, work, False, True)
        migrated = mgr.validate_array_location(A, work, True, True)
        assert migrated.workspace_id == "WS_ACT"
        assert not mgr.validate_array_location(G, work, True, True).is_attached()
        mgr.set_no_leverage_override("WS_WORK")
        assert mgr.validate_array_location(A, work, False, True) is work


def test_setters_and_immutable_manager():
    mgr = LayerWorkspaceMgr.no_workspaces()
    assert all(mgr.is_scoped_out(t) for t in ArrayType)
    mgr.set_workspace(A, "WS_ACT", CONF)
    assert not mgr.is_scoped_out(A) and mgr.get_configuration(A) is CONF
    mgr.set_scoped_out_for(A)
    assert mgr.is_scoped_out(A)
    frozen = LayerWorkspaceMgr.no_workspaces_immutable()
    assert frozen is LayerWorkspaceMgr.no_workspaces_immutable()
    for call in (lambda: frozen.set_workspace(A, "X", CONF), lambda: frozen.set_scoped_out_for(A),
                 lambda: frozen.set_no_leverage_override("X")):
        with pytest.raises(ndws.WorkspaceError, match="immutable"):
            call()
    assert all(frozen.is_scoped_out(t) for t in ArrayType)
    assert "ACTIVATIONS: -" in repr(frozen)


def test_each_thread_gets_its_own_workspaces():
    mgr = mgr_act_work()
    ready, done = threading.Event(), threading.Event()
    seen = {}

    def worker():
        with mgr.notify_scope_entered(A) as ws:
            seen["worker"] = (ws, mgr.create(A, 2).workspace)
            ready.set()
            done.wait(5)
        ndws.destroy_all_workspaces_for_current_thread()

    with mgr.notify_scope_entered(A) as mine:
        t = threading.Thread(target=worker)
        t.start()
        assert ready.wait(5)
        theirs, where = seen["worker"]
        assert theirs is not mine and where is theirs
        assert mgr.create(A, 2).workspace is mine
        done.set()
        t.join(5)
    assert not t.is_alive()


def test_bypass_debug_mode_is_honoured_for_existing_workspaces():
    mgr = mgr_act_work()
    with mgr.notify_scope_entered(A):                  # the workspace exists from now on
        pass
    wsm = ndws.get_workspace_manager()
    wsm.debug_mode = ndws.DebugMode.BYPASS_EVERYTHING
    try:
        scope = mgr.notify_scope_entered(A)
        assert isinstance(scope, ndws.DummyWorkspace)
        scope.close()
    finally:
        wsm.debug_mode = ndws.DebugMode.DISABLED
    with mgr.notify_scope_entered(A) as ws:
        assert isinstance(ws, ndws.Workspace) and ws.id == "WS_ACT"
