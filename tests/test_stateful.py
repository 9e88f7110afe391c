"""Model-based (Hypothesis stateful) test of workspace lifecycles and array validity.

Hypothesis drives random sequences of workspace operations (enter, re-enter, close, borrow,
scope out, destroy, an occasional invalid close) and array operations (create, view, detach,
dup, leverage_to, arithmetic, reductions, in-place writes, NumPy exports and reads) against a
small pure-Python model of ND4J's rules, and checks after every step that ndws agrees with it:

* the current-workspace pointer, open state, generation and borrow flag follow
  ND4J's workspace lifecycle (enter, re-entry = nesting count, entry of an open non-current
  workspace = new cycle; close; borrow, scope out, nesting; destruction), with ndws' lexical scopes (docs/workspaces.md, "Scopes are lexical"): a
  workspace stays open while any entry of it is open, leaving a `with` ends exactly its own
  scope, and the current workspace is always open or None;
* every array is valid or stale exactly as §3.2 and invariant 2 of docs/architecture.md say
  (kinds "leaked", "destroyed", "outdated"; "overwritten"/"destroyed" in the circular
  workspace), every use of a stale array raises ``WorkspaceError`` of that kind with ND4J's
  message (§3.3, §3.4), repr never raises;
* valid arrays always hold exactly the values NumPy computes on the model (the oracle);
* NumPy exports are never silently overwritten (invariant 6) and a cycle that ends while they
  live warns once per workspace;
* nothing crashes (invariant 1).

The model tracks placement (main block vs spill, ring position) exactly for the two
workspaces with a fixed size ("S1": scoped, no learning; "C": circular, no learning), which is
what the ring's "overwritten" rule and the export hand-over depend on; the learning workspaces
"S2" and "S3" are checked for everything else. Once ring memory is exported, when the ring
leaves its block to the export is ndws' choice, so from then on the model accepts "valid with
the right values" or "overwritten" (for good) for that ring's arrays.

The run is deterministic and takes a few seconds; set NDWS_HYPOTHESIS_SHRINK=1 to have a
failing program shrunk to a minimal one. The plain tests at the end pin sequences the machine
found.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import re
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import ndws
from ndws import WorkspaceConfiguration, WorkspaceError, WorkspaceWarning

A = ndws.ALIGNMENT

#: The workspaces the machine uses, by id (small fixed configurations so spills, learning and
#: ring wrap-arounds all happen within a few steps).
CONFS = {
    # scoped, never learns: 192 + 30% = 249 usable bytes (three 64-byte slots); the rest
    # of a cycle spills
    "S1": WorkspaceConfiguration(initial_size=192, policy_learning="NONE"),
    # scoped, learns its size at the end of the first cycle that allocated (ND4J default)
    "S2": WorkspaceConfiguration(),
    # scoped, learns and re-learns (REALLOCATE) whenever a cycle outgrows it
    "S3": WorkspaceConfiguration(policy_spill="REALLOCATE"),
    # circular, never learns: a ring of 96 * (1 + 1.0) = 192 bytes (three 64-byte slots)
    "C": WorkspaceConfiguration(initial_size=96, overallocation_limit=1.0,
                                policy_reset="ENDOFBUFFER_REACHED", policy_learning="NONE"),
}
KEYS = tuple(CONFS)
#: Main-buffer sizes of the workspaces whose placement the model follows exactly.
FIXED_SIZE = {"S1": 192 + int(192 * 0.3), "C": 96 * 2}

DTYPES = ("float64", "float32", "int64")
SHAPES = ((), (0,), (1,), (3,), (5,), (2, 3), (3, 2), (4, 4), (2, 0), (1, 4), (3, 1))


def _round_up(nbytes: int) -> int:
    return (nbytes + A - 1) // A * A


class MWs:
    """Model of one workspace object (§2.1 state that matters to validity)."""

    def __init__(self, key: str, obj, block: int | None):
        self.key = key
        self.obj = obj
        self.circular = key == "C"
        self.fixed = key in FIXED_SIZE
        self.is_open = False
        self.generation = 0
        self.epoch = 0            # destructions
        self.depth = 0            # open entries (the workspace is open while depth > 0)
        self.borrowed = False
        self.previous = None      # parent (§2.8)
        self.warned = False       # the once-per-workspace export warning was shown
        # placement, followed for fixed-size workspaces only
        self.size = FIXED_SIZE.get(key, 0)
        self.main = block         # id of the main block (None: none, e.g. destroyed)
        self.offset = 0
        self.lap_base = 0         # ring: absolute position of the current lap's start
        self.written = 0          # ring: absolute end of the last write into the main block
        self.blocks_left = 0
        # ring only: set when the model can no longer follow placement (see `export`)
        self.uncertain = False
        # entered by get_and_activate_workspace() and not yet entered/closed/borrowed again
        self.adopt_pending = False

    def __repr__(self) -> str:
        return f"<MWs {self.key} open={self.is_open} gen={self.generation}>"


class MScope:
    """Model of one scope on the thread's stack (an entry, a nested re-entry, a borrow or a
    scope-out) and what was current when it began."""

    def __init__(self, kind: str, w: "MWs | None", restore: "MWs | None"):
        self.kind = kind
        self.w = w
        self.restore = restore
        self.live = True

    def __repr__(self) -> str:
        return f"<MScope {self.kind} {self.w.key if self.w else None} live={self.live}>"


class MArr:
    """An NDArray and what the model expects of it."""

    __slots__ = ("nd", "exp", "ws", "gen", "epoch", "block", "vpos")

    def __init__(self, nd, exp, ws, gen, epoch, block, vpos):
        self.nd = nd
        self.exp = exp            # NumPy array (a view into the model's copy of the memory)
        self.ws = ws              # MWs it was born in; None when detached
        self.gen = gen
        self.epoch = epoch
        # model id of the main block it is on (fixed-size workspaces; None: spilled or not
        # followed); "?" on a ring the model no longer follows; "overwritten" once known so
        self.block = block
        self.vpos = vpos          # ring position (circular)

    def view(self, nd, exp):
        if exp.size == 0:         # empty views are never attached
            return MArr(nd, exp, None, 0, 0, None, 0)
        return MArr(nd, exp, self.ws, self.gen, self.epoch, self.block, self.vpos)


def _same(got: np.ndarray, exp: np.ndarray, what: str) -> None:
    assert got.shape == exp.shape, f"{what}: shape {got.shape} != {exp.shape}"
    assert got.dtype == exp.dtype, f"{what}: dtype {got.dtype} != {exp.dtype}"
    assert np.array_equal(got, exp), f"{what}: values differ\n got {got!r}\n exp {exp!r}"


def raised(exc_type: type[BaseException], fn) -> BaseException:
    """Call fn, which must raise exc_type; return the exception with its traceback dropped
    (a traceback would keep the calling frame, and any NumPy export in it, alive)."""
    try:
        fn()
    except exc_type as e:
        e.__traceback__ = None
        return e
    raise AssertionError(f"did not raise {getattr(exc_type, '__name__', exc_type)}")


def _values(shape, dtype, k: int, c: int) -> np.ndarray:
    size = int(np.prod(shape, dtype=np.int64))
    return (np.arange(size, dtype=np.int64) * k + c).astype(dtype).reshape(shape)


@st.composite
def basic_keys(draw, shape):
    """A basic (view-producing) NumPy index for an array of `shape`."""
    if draw(st.integers(0, 5)) == 0:
        return ...
    parts = []
    for n in shape:
        how = draw(st.sampled_from(("int", "slice", "all") if n > 0 else ("slice", "all")))
        if how == "int":
            parts.append(draw(st.integers(-n, n - 1)))
        elif how == "slice":
            bound = st.none() | st.integers(-n - 1, n + 1)
            parts.append(slice(draw(bound), draw(bound),
                               draw(st.sampled_from((None, 1, 2, -1, -2)))))
        else:
            parts.append(slice(None))
    return tuple(parts)


class WorkspaceMachine(RuleBasedStateMachine):
    """Random workspace/array programs checked step by step against the model."""

    MAX_ARRAYS = 24
    MAX_EXPORTS = 6

    def __init__(self):
        super().__init__()
        self.mgr = ndws.get_workspace_manager()
        assert ndws.current_workspace() is None
        assert self.mgr.get_all_workspaces_ids_for_current_thread() == []
        self.blocks = itertools.count(1)
        self.map: dict[str, MWs] = {}     # the manager's id -> workspace map, in its order
        self.all_ws: list[MWs] = []       # every workspace object made (destroyed ones too)
        self.cur: MWs | None = None
        self.scopes: list[MScope] = []    # the thread's scope stack, innermost last
        # What the program has opened, innermost last: (how, MScope or None, MWs, end), where
        # `how` says what `end()` does: "with" (a `with` exit: ends exactly that scope,
        # lexically), "scope" (a borrow handle's or a dummy's close(): ends that scope),
        # "close" (Workspace.close(): ends the workspace's innermost scope).
        self.frames: list[tuple] = []
        self.arrays: list[MArr] = []
        self.exports: list[tuple[np.ndarray, MArr]] = []
        self.expected_warnings: list[tuple[MWs, bool]] = []

    # -- the model ------------------------------------------------------------------------------

    def kind(self, m: MArr) -> str | None:
        """Expected staleness of `m` (None: valid), per §3.2 and invariant 2."""
        w = m.ws
        if w is None:
            return None
        if w.circular:
            if m.epoch != w.epoch:
                return "destroyed"
            if m.block == "overwritten":
                return "overwritten"
            if w.uncertain and m.block is not None and m.block in (w.main, "?"):
                # Placement no longer followed: ndws's own claim is taken if it is one of
                # the two possible answers, and stays taken (overwritten is for good);
                # values are still checked whenever the array is valid.
                got = m.nd.stale
                assert got in (None, "overwritten"), got
                if got == "overwritten":
                    m.block = "overwritten"
                return got
            # the ring has passed the array: a later lap of the same block wrote beyond it
            if w.main is not None and m.block == w.main and w.written > m.vpos + w.size:
                return "overwritten"
            return None
        if m.epoch != w.epoch:
            return "destroyed"
        if not w.is_open:
            return "leaked"
        if m.gen != w.generation:
            return "outdated"
        return None

    def open_ids(self) -> str:
        return "[" + ", ".join(k for k, w in self.map.items() if w.is_open) + "]"

    def get_ws(self, key: str) -> MWs:
        """ndws.workspace(key, conf): the map entry, created when missing."""
        obj = ndws.workspace(key, CONFS[key])
        w = self.map.get(key)
        if w is None:
            w = MWs(key, obj, next(self.blocks) if key in FIXED_SIZE else None)
            self.map[key] = w
            self.all_ws.append(w)
            if w.fixed:
                assert obj.current_size == w.size
        assert obj is w.obj, f"ndws.workspace({key!r}) returned another object"
        return w

    def export_check(self, w: MWs) -> None:
        """w's main block is about to be reused (cycle end, re-entry, ring wrap): live exports
        of it get the old block, the workspace continues on a fresh one, warning once."""
        if w.fixed:
            if w.main is not None and any(m.block == w.main for _, m in self.exports):
                # arrays the ring had already passed stay overwritten on the old block
                for m in self.arrays:
                    if m.ws is w and m.block == w.main and self.kind(m) == "overwritten":
                        m.block = "overwritten"
                if not w.warned:
                    self.expected_warnings.append((w, True))
                    w.warned = True
                w.main = next(self.blocks)
                w.blocks_left += 1
                w.lap_base = 0
                w.written = 0
        elif not w.warned and any(m.ws is w for _, m in self.exports):
            # placement not followed: a warning is allowed (once) but not required
            self.expected_warnings.append((w, False))

    def alloc(self, w: MWs | None, nbytes: int, fail: bool = False):
        """Placement (block, vpos) of an nbytes allocation in w (§2.3); `fail`: the operation
        fails after allocating and ndws gives the bytes back."""
        if w is None or nbytes == 0 or not w.fixed or w.main is None:
            return None, 0
        req = _round_up(nbytes)
        if w.circular and w.uncertain:
            if req > w.size or fail:
                return None, 0
            if not w.warned and any(m.ws is w for _, m in self.exports):
                self.expected_warnings.append((w, False))
            return "?", 0
        if w.circular:
            if w.offset + req > w.size and req <= w.size:
                self.export_check(w)
                w.lap_base += w.size
                w.offset = 0
            if w.offset + req > w.size:
                return None, 0
            if fail:
                return None, 0
            vpos = w.lap_base + w.offset
            w.offset += req
            w.written = w.lap_base + w.offset
            return w.main, vpos
        if w.offset + req > w.size or fail:
            return None, 0
        w.offset += req
        return w.main, 0

    def new_array(self, nd, exp: np.ndarray, target: MWs | None) -> MArr:
        """Register an array just allocated in `target` (None: detached)."""
        exp = np.array(exp, order="C", copy=True)
        if exp.size == 0:
            target = None
        if target is None:
            m = MArr(nd, exp, None, 0, 0, None, 0)
        else:
            block, vpos = self.alloc(target, exp.nbytes)
            m = MArr(nd, exp, target, target.generation, target.epoch, block, vpos)
        self.check_new(m)
        self.add(m)
        return m

    def check_new(self, m: MArr) -> None:
        assert isinstance(m.nd, ndws.NDArray), type(m.nd)
        if m.ws is not None and m.ws.circular:
            assert m.nd.stale is None, "a new array in a ring is valid"
        assert m.nd.workspace is (m.ws.obj if m.ws is not None else None)
        assert self.kind(m) == m.nd.stale
        if self.kind(m) is None:
            _same(m.nd.numpy(), m.exp, "new array")

    def add(self, m: MArr) -> None:
        self.arrays.append(m)
        if len(self.arrays) > self.MAX_ARRAYS:
            del self.arrays[0]

    def push(self, kind: str, w: MWs | None) -> MScope:
        scope = MScope(kind, w, self.cur)
        self.scopes.append(scope)
        self.cur = None if kind == "out" else w
        return scope

    @staticmethod
    def usable(w: MWs | None) -> bool:
        return w is None or w.is_open

    def innermost(self) -> MWs | None:
        if not self.scopes or self.scopes[-1].kind == "out":
            return None
        return self.scopes[-1].w

    def forget(self, scope: MScope) -> None:
        """`scope` leaves the stack without ending a cycle (its entry stays open)."""
        scope.live = False
        if scope.kind == "borrow":
            scope.w.borrowed = False

    def purge(self, w: MWs) -> None:
        for scope in [sc for sc in self.scopes if sc.w is w]:
            self.forget(scope)
            self.scopes.remove(scope)

    def end_cycle(self, w: MWs) -> None:
        self.purge(w)
        w.is_open = False
        if not w.circular:
            w.offset = 0

    def model_enter(self, w: MWs) -> tuple[str, MScope]:
        """§2.4 notifyScopeEntered."""
        w.adopt_pending = False
        if self.cur is w and w.is_open:
            return "reenter", self.push("nest", w)
        reset = not w.circular and w.is_open
        if reset:
            self.export_check(w)
        scope = self.push("entry", w)
        w.previous = scope.restore
        w.depth += 1
        w.is_open = True
        if not w.circular:
            w.offset = 0
        w.generation += 1
        return ("reset" if reset else "enter"), scope

    def end_scope(self, scope: MScope, lexical: bool) -> None:
        """End `scope` (nothing if it already ended); `lexical`: a `with` exit, which first
        drops the scopes above it."""
        if not scope.live:
            return
        w = scope.w
        ends = scope.kind == "entry" and w.depth == 1
        if ends and not w.circular:
            self.export_check(w)
        i = self.scopes.index(scope)
        if lexical:
            while len(self.scopes) - 1 > i:
                self.forget(self.scopes.pop())
        innermost = i == len(self.scopes) - 1
        del self.scopes[i]
        scope.live = False
        if scope.kind == "entry":
            w.depth -= 1
            if ends:
                self.end_cycle(w)
        elif scope.kind == "borrow":
            w.borrowed = False
        if innermost and self.usable(scope.restore):
            self.cur = scope.restore
        elif innermost or not self.usable(self.cur):
            self.cur = self.innermost()

    def model_close(self, w: MWs) -> str:
        """Workspace.close(): ends w's innermost scope, or an entry no longer on the stack."""
        w.adopt_pending = False
        mine = [sc for sc in self.scopes if sc.w is w]
        if mine:
            self.end_scope(mine[-1], False)
            return "closed"
        if w.depth == 0:
            return "error"
        if w.depth == 1 and not w.circular:
            self.export_check(w)
        w.depth -= 1
        if w.depth == 0:
            self.end_cycle(w)
        if not self.usable(self.cur):
            self.cur = self.innermost()
        return "closed"

    # -- checking helpers ----------------------------------------------------------------------

    @contextlib.contextmanager
    def step(self):
        """Run a step recording warnings; afterwards only the model's WorkspaceWarnings may
        have been issued (pytest makes every warning an error)."""
        self.expected_warnings = []
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            yield
        got = []
        for r in rec:
            assert issubclass(r.category, WorkspaceWarning), (
                f"unexpected {r.category.__name__}: {r.message}")
            mo = re.match(r"Workspace \[(\w+)\]: ", str(r.message))
            assert mo, f"WorkspaceWarning without the workspace id: {r.message}"
            got.append(mo.group(1))
        for w, required in self.expected_warnings:
            if w.key in got:
                got.remove(w.key)
                w.warned = True
            else:
                assert not required, f"expected a WorkspaceWarning for workspace {w.key}"
        assert not got, f"unexpected WorkspaceWarning(s) for {got}"
        self.expected_warnings = []

    def expect_stale(self, exc: WorkspaceError, m: MArr, op: str, role: str | None = None,
                     prefix: str | None = None) -> None:
        """`exc` is the error ND4J's check gives for stale array `m` (§3.3, §3.4)."""
        kind, w = self.kind(m), m.ws
        msg = str(exc)
        assert type(exc) is WorkspaceError, type(exc)
        assert exc.kind == kind, (exc.kind, kind, msg)
        assert exc.workspace_id == w.key, (exc.workspace_id, w.key)
        assert exc.op == op, (exc.op, op)
        ids = self.open_ids()
        if prefix is None:
            head = (f"Op [{op}] {role} argument uses {kind} workspace pointer from workspace "
                    f"[{w.key}]: ")
            assert msg.startswith(head), (head, msg)
            assert msg.endswith(f"\nAll open workspaces: {ids}\n{ndws.SCOPE_PANIC_MSG}"), msg
            if kind == "outdated":
                assert (f"Array WS iteration: {m.gen}. Workspace current iteration: "
                        f"{w.generation}\n") in msg, msg
        elif kind == "outdated":
            assert msg == (f"{prefix}: Array outdated workspace pointer from workspace {w.key} "
                           f"(array generation {m.gen}, current workspace generation "
                           f"{w.generation})\nAll open workspaces: {ids}"), msg
        elif kind == "overwritten":
            assert msg.startswith(f"{prefix}: Array uses overwritten workspace pointer from "
                                  f"workspace {w.key}"), msg
            assert msg.endswith(f"\nAll open workspaces: {ids}"), msg
        else:
            assert msg == (f"{prefix}: Array uses {kind} workspace pointer from workspace "
                           f"{w.key}\nAll open workspaces: {ids}"), msg

    def first_stale(self, *operands):
        for role, x in operands:
            if isinstance(x, MArr) and self.kind(x) is not None:
                return role, x
        return None, None

    def pick(self, i: int) -> MArr:
        """Array number i; i >= 32 picks among attached arrays (the interesting ones) when
        there are any."""
        pool = self.arrays
        if i >= 32:
            pool = [m for m in self.arrays if m.ws is not None] or pool
        return pool[i % len(pool)]

    # -- workspace rules ----------------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS),
          how=st.sampled_from(("with", "notify", "activate", "activate_only")),
          reset_ok=st.sampled_from((False, False, False, True)))
    def enter(self, key, how, reset_ok):
        w = self.map.get(key)
        if w is not None and w.is_open and self.cur is not w and not reset_ok:
            return  # a new cycle of an open outer workspace: kept rarer than plain nesting
        if how == "with" and w is not None and w.adopt_pending and self.cur is w:
            # `with` right after get_and_activate_workspace() takes over that entry (the
            # documented idiom); whether a later one, with nothing in between, re-enters or
            # takes over is not specified
            how = "notify"
        with self.step():
            if how.startswith("activate"):
                obj = self.mgr.get_and_activate_workspace(CONFS[key], key)
                w = self.get_ws(key)
                assert obj is w.obj
                _, scope = self.model_enter(w)
                if how == "activate":
                    # `with` on the result manages that entry instead of entering again
                    assert obj.__enter__() is obj
                    frame = ("with", scope, w, lambda o=obj: o.__exit__(None, None, None))
                else:
                    frame = ("close", scope, w, obj.close)
            else:
                w = self.get_ws(key)
                if how == "with":
                    assert w.obj.__enter__() is w.obj
                    frame = ("with", None, w, lambda o=w.obj: o.__exit__(None, None, None))
                else:
                    assert w.obj.notify_scope_entered() is w.obj
                    frame = ("close", None, w, w.obj.close)
                _, scope = self.model_enter(w)
                frame = (frame[0], scope) + frame[2:]
            w.adopt_pending = how == "activate_only"
        self.frames.append(frame)
        assert w.obj.parent_workspace is (w.previous.obj if w.previous else None), (
            f"entered {key} ({how}): parent {w.obj.parent_workspace!r}, expected {w.previous}")

    def end_frame(self, frame) -> None:
        how, scope, w, end = frame
        with self.step():
            if how == "with":
                self.end_scope(scope, True)
                end()
            elif how == "scope":
                if scope is not None:
                    self.end_scope(scope, False)
                end()
            else:
                if self.model_close(w) == "error":
                    exc = raised(WorkspaceError, end)
                    assert exc.kind == "closed", exc.kind
                    assert str(exc) == f"Workspace [{w.key}] can't be closed: it is not open"
                    assert exc.workspace_id == w.key
                else:
                    end()

    @precondition(lambda self: self.frames)
    @rule()
    def close_innermost(self):
        self.end_frame(self.frames.pop())

    @precondition(lambda self: any(w.is_open for w in self.all_ws))
    @rule(i=st.integers(0, 15))
    def close_out_of_order(self, i):
        """Workspace.close() on any open workspace, innermost or not (non-nested orders)."""
        cands = [w for w in self.all_ws if w.is_open]
        w = cands[i % len(cands)]
        with self.step():
            assert self.model_close(w) == "closed"
            w.obj.close()

    @initialize(key=st.sampled_from(KEYS), how=st.sampled_from(("with", "notify", "activate")))
    def start_inside(self, key, how):
        """Programs start inside a workspace (most array work happens in one)."""
        self.enter(key, how, False)

    @rule(action=st.sampled_from(("borrow", "borrow_scope", "scope_out", "destroy",
                                  "close_not_open", "destroy_all")),
          key=st.sampled_from(KEYS), i=st.integers(0, 15))
    def workspace_misc(self, action, key, i):
        """The rarer workspace operations, in one rule so that array work gets most steps."""
        if action.startswith("borrow"):
            self.borrow(key, action == "borrow_scope")
        elif action == "scope_out":
            self.scope_out(via_manager=bool(i % 2), lexical=i >= 8)
        elif action == "destroy":
            self.destroy(key)
        elif action == "destroy_all":
            if i == 0:                       # rare: it ends every workspace of the program
                for k in list(self.map):
                    self.destroy(k)
        else:
            self.close_not_open(i)

    def close_not_open(self, i):
        """Closing a workspace that is not open raises kind "closed" and changes nothing."""
        cands = [w for w in self.all_ws if not w.is_open]
        if not cands:
            return
        w = cands[i % len(cands)]
        w.adopt_pending = False
        with self.step():
            exc = raised(WorkspaceError, lambda: w.obj.close())
        assert exc.kind == "closed"
        assert str(exc) == f"Workspace [{w.key}] can't be closed: it is not open"

    def borrow(self, key, scoped):
        w = self.map.get(key)
        if w is None:
            return
        if not w.is_open or w.borrowed:
            with self.step():
                exc = raised(WorkspaceError,
                             w.obj.borrow if scoped else w.obj.notify_scope_borrowed)
            if w.borrowed:
                assert str(exc) == f"Workspace [{key}]: Can't borrow from borrowed workspace"
            else:
                assert (exc.kind, str(exc)) == (
                    "closed", f"Workspace [{key}] can't be borrowed: it is not open")
            return
        with self.step():
            if scoped:
                handle = w.obj.borrow()
                end = handle.close
            else:
                assert w.obj.notify_scope_borrowed() is w.obj
                end = None
            w.adopt_pending = False
            w.borrowed = True
            scope = self.push("borrow", w)
        self.frames.append(("scope", scope, w, end) if scoped else ("close", scope, w, w.obj.close))

    def scope_out(self, via_manager, lexical):
        with self.step():
            if via_manager:
                dummy = self.mgr.scope_out_of_workspaces()
            else:
                dummy = ndws.scope_out_of_workspaces()
            scope = self.push("out", None) if self.cur is not None else None
        assert isinstance(dummy, ndws.DummyWorkspace)
        if lexical and scope is not None:
            # the dummy entered at the call; a `with` on it manages that scope-out
            dummy.__enter__()
            self.frames.append(("with", scope, None,
                                lambda d=dummy: d.__exit__(None, None, None)))
        else:
            self.frames.append(("scope", scope, None, dummy.close))

    def destroy(self, key):
        w = self.map.get(key)
        if w is None:
            return
        with self.step():
            self.mgr.destroy_workspace(w.obj)
        del self.map[key]
        w.epoch += 1
        self.purge(w)
        w.depth = 0
        w.is_open = False
        w.borrowed = False
        if not self.usable(self.cur):
            self.cur = self.innermost()
        if w.fixed:
            w.main = None
            w.size = 0
            w.offset = 0
        assert not self.mgr.check_if_workspace_exists(key)

    # -- array rules --------------------------------------------------------------------------

    @rule(how=st.sampled_from(("zeros", "full", "arange", "array", "ones_like")),
          shape=st.sampled_from(SHAPES), dtype=st.sampled_from(DTYPES),
          k=st.integers(-3, 3), c=st.integers(-9, 9),
          detached=st.sampled_from((False, False, False, True)))
    def create(self, how, shape, dtype, k, c, detached):
        vals = _values(shape, dtype, k, c)
        with self.step():
            if how == "zeros":
                nd = ndws.zeros(shape, dtype, detached=detached)
                exp = np.zeros(shape, dtype)
            elif how == "full":
                nd = ndws.full(shape, c, dtype, detached=detached)
                exp = np.full(shape, c, dtype)
            elif how == "arange":
                nd = ndws.arange(c, c + vals.size, dtype=dtype, detached=detached)
                exp = np.arange(c, c + vals.size, dtype=dtype)
                m = self.new_array(nd, exp, None if detached else self.cur)
                # reshape needs a valid array (one born in a closed current workspace is not)
                if self.kind(m) is None:
                    v = m.view(nd.reshape(shape), m.exp.reshape(shape))
                    self.check_new(v)
                    self.add(v)
                return
            elif how == "array":
                nd = ndws.array(vals, detached=detached)
                exp = vals
            else:
                nd = ndws.ones_like(vals, detached=detached)
                exp = np.ones_like(vals)
            self.new_array(nd, exp, None if detached else self.cur)

    @precondition(lambda self: self.arrays)
    @rule(i=st.integers(0, 63), data=st.data())
    def view(self, i, data):
        m = self.pick(i)
        transpose = data.draw(st.booleans())
        key = None if transpose else data.draw(basic_keys(m.exp.shape))
        with self.step():
            if self.kind(m) is not None:
                exc = raised(WorkspaceError, lambda: m.nd.T if transpose else m.nd[key])
                self.expect_stale(exc, m, "transpose" if transpose else "getitem", "a")
                return
            res = m.nd.T if transpose else m.nd[key]
            exp = m.exp.T if transpose else m.exp[key]
            if not isinstance(exp, np.ndarray):
                assert not isinstance(res, ndws.NDArray), type(res)
                assert type(res) is type(exp) and res == exp, (res, exp)
                return
            v = m.view(res, exp)
            self.check_new(v)
            self.add(v)

    @precondition(lambda self: self.arrays)
    @rule(i=st.integers(0, 63),
          how=st.sampled_from(("detach", "dup", "copy", "astype", "leverage_to",
                               "leverage_or_detach", "migrate")),
          key=st.sampled_from(KEYS + ("NOPE",)), dtype=st.sampled_from(DTYPES))
    def copy_like(self, i, how, key, dtype):
        m = self.pick(i)
        kind = self.kind(m)
        prefix, op = {
            "detach": ("Cannot detach INDArray", "detach"),
            "dup": ("Cannot duplicate INDArray", "dup"),
            "leverage_to": ("Cannot leverage INDArray to new workspace", "leverage_to"),
            "leverage_or_detach": ("Cannot detach INDArray", "detach"),
            "migrate": ("Cannot leverage INDArray to new workspace", "migrate"),
        }.get(how, (None, how))
        call = {
            "detach": lambda: m.nd.detach(),
            "dup": lambda: m.nd.dup(),
            "copy": lambda: m.nd.copy(),
            "astype": lambda: m.nd.astype(dtype),
            "leverage_to": lambda: m.nd.leverage_to(key),
            "leverage_or_detach": lambda: m.nd.leverage_or_detach(key),
            "migrate": lambda: m.nd.migrate(),
        }[how]
        target_w = self.map.get(key)
        if how == "leverage_or_detach" and m.ws is not None and target_w is not None \
                and target_w.is_open:
            prefix, op = "Cannot leverage INDArray to new workspace", "leverage_to"
        with self.step():
            if kind is not None:
                exc = raised(WorkspaceError, lambda: call())
                self.expect_stale(exc, m, op, "a", prefix)
                return
            if (how == "leverage_to" and m.ws is not None and target_w is not None
                    and target_w is not m.ws and not target_w.is_open):
                # §2.9 does not check the target; ndws refuses a closed one (the copy would
                # be born stale), changing nothing
                exc = raised(WorkspaceError, call)
                assert (exc.kind, exc.workspace_id, str(exc)) == (
                    "closed", key, f"Workspace [{key}] can't be allocated in: it is not open")
                return
            res = call()
            if how == "astype":
                self.new_array(res, m.exp.astype(dtype), self.cur)
            elif how in ("dup", "copy"):
                self.new_array(res, m.exp, self.cur)
            elif how == "migrate":
                if self.cur is None:
                    assert res is m.nd        # nowhere to migrate to
                else:
                    self.new_array(res, m.exp, self.cur)
            elif m.ws is None:
                assert res is m.nd            # detached arrays are returned as they are
            elif how == "detach" or (how == "leverage_or_detach"
                                     and (target_w is None or not target_w.is_open)):
                self.new_array(res, m.exp, None)
            elif target_w is None or target_w is m.ws:
                assert res is m.nd            # no such workspace / already there
            else:
                assert target_w.is_open       # (a closed target raised above)
                self.new_array(res, m.exp, target_w)

    @precondition(lambda self: self.arrays)
    @rule(i=st.integers(0, 63), j=st.integers(0, 63) | st.sampled_from((2, -1)),
          op=st.sampled_from(("add", "subtract", "multiply", "sum", "max")),
          reflected=st.booleans(), other_is_array=st.booleans())
    def arith(self, i, j, op, reflected, other_is_array):
        """a + b, a - b, 2 * a, ..., a.sum(), a.max(): results placed in the current
        workspace."""
        if op in ("sum", "max"):
            return self.reduce(i, op)
        a = self.pick(i)
        if op == "multiply" and other_is_array:
            op = "add"    # keep int64 values far from overflow
        b = self.pick(j) if other_is_array else (2 if op == "multiply" else j % 7 - 3)
        f = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply}[op]
        sym = {"add": "__add__", "subtract": "__sub__", "multiply": "__mul__"}[op]
        x1, x2 = (b, a) if reflected else (a, b)
        with self.step():
            role, bad = self.first_stale(("x1", x1), ("x2", x2))
            nd1 = x1.nd if isinstance(x1, MArr) else x1
            nd2 = x2.nd if isinstance(x2, MArr) else x2

            def run():
                if isinstance(x1, MArr):
                    return getattr(nd1, sym)(nd2)
                return getattr(nd2, "__r" + sym[2:])(nd1)
            if bad is not None:
                exc = raised(WorkspaceError, lambda: run())
                self.expect_stale(exc, bad, op, role)
                return
            e1 = x1.exp if isinstance(x1, MArr) else x1
            e2 = x2.exp if isinstance(x2, MArr) else x2
            try:
                exp = np.asarray(f(e1, e2))
            except ValueError as e:
                raised(type(e), lambda: run())
                return
            self.new_array(run(), exp, self.cur)

    def reduce(self, i, how):
        m = self.pick(i)
        with self.step():
            if self.kind(m) is not None:
                exc = raised(WorkspaceError, lambda: getattr(m.nd, how)())
                self.expect_stale(exc, m, how, "a")
                return
            try:
                exp = np.asarray(getattr(np, how)(m.exp))
            except ValueError as e:
                # NumPy refuses (max of nothing) after ndws placed the 0-d result: the bytes
                # are given back, but a ring wrap the allocation caused stays
                raised(type(e), lambda: getattr(m.nd, how)())
                self.alloc(self.cur, m.exp.dtype.itemsize, fail=True)
                return
            self.new_array(getattr(m.nd, how)(), exp, self.cur)

    @precondition(lambda self: self.arrays)
    @rule(i=st.integers(0, 63), j=st.integers(0, 63),
          how=st.sampled_from(("fill_all", "iadd", "setitem", "fill", "assign_array",
                               "iadd_array")),
          v=st.integers(-5, 5), data=st.data())
    def write(self, i, j, how, v, data):
        m = self.pick(i)
        b = self.pick(j)
        key = data.draw(basic_keys(m.exp.shape)) if how == "setitem" else ...
        op, role_b = {"fill_all": ("setitem", None), "setitem": ("setitem", None),
                      "iadd": ("add", None), "fill": ("fill", None),
                      "assign_array": ("setitem", "value"), "iadd_array": ("add", "x2")}[how]
        uses_b = role_b is not None

        def apply(target, other):
            if how in ("fill_all", "setitem"):
                target[key] = v
            elif how == "iadd":
                target += 1
            elif how == "fill":
                target.fill(v)
            elif how == "assign_array":
                target[...] = other
            else:
                target += other
        with self.step():
            role, bad = self.first_stale(("x1" if op == "add" else "a", m),
                                         *((role_b, b),) if uses_b else ())
            if bad is not None:
                exc = raised(WorkspaceError, lambda: apply(m.nd, b.nd))
                self.expect_stale(exc, bad, op, role)
                return
            try:
                apply(m.exp.copy(), b.exp)    # does NumPy accept it?
            except (ValueError, TypeError) as e:
                raised(type(e), lambda: apply(m.nd, b.nd))
                return
            nd = m.nd
            apply(nd, b.nd)
            apply(m.exp, b.exp)               # aliases (views, exports) see it too

    @precondition(lambda self: self.arrays)
    @rule(i=st.integers(0, 63))
    def export(self, i):
        m = self.pick(i)
        with self.step():
            if self.kind(m) is not None:
                exc = raised(WorkspaceError, lambda: np.asarray(m.nd))
                self.expect_stale(exc, m, "__array__", "a")
                return
            e = np.asarray(m.nd)
        _same(e, m.exp, "export")
        w = m.ws
        if w is not None:
            assert not e.flags.owndata    # zero-copy
            if (w.circular and w.fixed and not w.uncertain and w.main is not None
                    and m.block == w.main):
                # Exported ring memory must not be reused (invariant 6), but when the
                # ring leaves its block to the export (at the latest before it would write
                # over the exported bytes, at the earliest now) is ndws' choice: from here on
                # the model accepts either answer for arrays on this ring, and checks values.
                w.uncertain = True
        self.exports.append((e, m))
        if len(self.exports) > self.MAX_EXPORTS:
            del self.exports[0]

    @precondition(lambda self: self.arrays or self.exports)
    @rule(what=st.sampled_from(("array", "export", "write_export")), k=st.integers(0, 63),
          v=st.integers(-5, 5))
    def forget_or_write_export(self, what, k, v):
        """Drop an array (memory is freed when nothing refers to it), drop an export (its
        memory may then be reused), or write through an export: allowed even after the array
        went stale, since the export keeps a block nobody else writes."""
        if what == "array" or not self.exports:
            if self.arrays:
                del self.arrays[k % len(self.arrays)]
            return
        idx = k % len(self.exports)
        if what == "export":
            del self.exports[idx]
            return
        e, m = self.exports[idx]
        e[...] = v
        m.exp[...] = v

    @precondition(lambda self: self.arrays)
    @rule(i=st.integers(0, 63),
          how=st.sampled_from(("numpy", "tolist", "asarray", "memoryview", "getitem", "item",
                               "float", "repr", "str", "is_in_scope")))
    def use(self, i, how):
        m = self.pick(i)
        kind = self.kind(m)
        nd, exp = m.nd, m.exp
        if how == "float" and exp.ndim != 0:
            how = "item"              # float() of an array with ndim > 0 is deprecated
        if how == "item" and exp.size != 1:
            how = "numpy"
        with self.step():
            if how in ("repr", "str"):
                text = repr(nd) if how == "repr" else str(nd)
                if kind is not None:
                    assert f": {kind} (" in text and f"workspace={m.ws.key!r}" in text, text
                elif how == "repr":
                    assert text.startswith("NDArray(") and str(exp.dtype) in text, text
                else:
                    assert text == str(exp), (text, str(exp))
                return
            if how == "is_in_scope":
                assert nd.is_in_scope() == (m.ws is None or m.ws.is_open)
                assert nd.is_attached() == (m.ws is not None)
                return
            op = {"asarray": "__array__", "memoryview": "__buffer__"}.get(how, how)
            call = {
                "numpy": lambda: nd.numpy(),
                "tolist": lambda: np.array(nd.tolist(), dtype=exp.dtype).reshape(exp.shape),
                "asarray": lambda: np.array(np.asarray(nd), copy=True),
                "memoryview": lambda: np.frombuffer(memoryview(nd).tobytes(),
                                                    exp.dtype).reshape(exp.shape),
                "getitem": lambda: nd[...].numpy(),
                "item": lambda: np.array(nd.item(), exp.dtype).reshape(exp.shape),
                "float": lambda: np.array(float(nd)).astype(exp.dtype).reshape(exp.shape),
            }[how]
            if kind is not None:
                exc = raised(WorkspaceError, lambda: call())
                self.expect_stale(exc, m, op, "a")
                return
            _same(call(), exp, how)

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def current_workspace_is_open_or_none(self):
        """Scopes never strand the thread: whatever happened, the current workspace is open
        (so new arrays are usable) or there is none."""
        cur = ndws.current_workspace()
        assert cur is None or cur.is_scope_active, cur

    @invariant()
    def ndws_agrees_with_model(self):
        assert ndws.current_workspace() is (self.cur.obj if self.cur else None), (
            ndws.current_workspace(), self.cur)
        for w in self.all_ws:
            o = w.obj
            assert o.is_scope_active == w.is_open, (w.key, o.is_scope_active, w.is_open)
            assert o.generation == w.generation, (w.key, o.generation, w.generation)
            assert o.is_borrowed == w.borrowed, (w.key, o.is_borrowed)
            if w.fixed and not w.uncertain:
                assert o.blocks_left_to_exports == w.blocks_left, (
                    w.key, o.blocks_left_to_exports, w.blocks_left)
                assert o.current_size == w.size, (w.key, o.current_size, w.size)
        assert self.mgr.get_all_workspaces_ids_for_current_thread() == list(self.map)
        assert all(a is b.obj for a, b in zip(self.mgr.get_all_workspaces_for_current_thread(),
                                               self.map.values()))
        assert self.mgr.any_workspace_active_for_current_thread() == any(
            w.is_open for w in self.map.values())
        for key in KEYS:
            assert self.mgr.check_if_workspace_exists_and_active(key) == (
                key in self.map and self.map[key].is_open)
        for m in self.arrays:
            kind = self.kind(m)
            assert m.nd.stale == kind, (m.nd.stale, kind, m.ws)
            if kind is None:
                _same(m.nd.numpy(), m.exp, "valid array")
            else:
                exc = raised(WorkspaceError, lambda: m.nd.numpy())
                assert exc.kind == kind
        for e, m in self.exports:
            _same(e, m.exp, "NumPy export")   # nothing a user holds is silently overwritten

    def teardown(self):
        if sys.exc_info()[0] is not None:
            # a step failed: only clean up, so that the report shows that failure alone
            self.exports.clear()
            self.arrays.clear()
            ndws._core._clear_scopes()
            self.mgr.destroy_all_workspaces_for_current_thread()
            return
        try:
            while self.frames:
                self.end_frame(self.frames.pop())
                self.ndws_agrees_with_model()
                self.current_workspace_is_open_or_none()
            for w in self.all_ws:        # entries a `with` left open when it ended
                while w.is_open:
                    with self.step():
                        assert self.model_close(w) == "closed"
                        w.obj.close()
                    self.ndws_agrees_with_model()
            assert self.cur is None and ndws.current_workspace() is None
            assert not self.scopes
        finally:
            self.exports.clear()
            self.arrays.clear()
            ndws._core._clear_scopes()   # keep later examples independent
            self.mgr.destroy_all_workspaces_for_current_thread()


# Deterministic (derandomize: the same programs on every run) and bounded: about 5 s when
# passing. Shrinking a failure can take minutes, so it only runs on request
# (NDWS_HYPOTHESIS_SHRINK=1), to turn a failing program into a minimal one.
_PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
if os.environ.get("NDWS_HYPOTHESIS_SHRINK"):
    _PHASES += [Phase.shrink, Phase.explain]
WorkspaceMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None, derandomize=True, database=None,
    report_multiple_bugs=False, phases=_PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def test_workspace_state_machine():
    run_state_machine_as_test(WorkspaceMachine, settings=WorkspaceMachine.TestCase.settings)


# -- sequences pinned as plain tests ------------------------------------------------------------

def _ring(key: str = "C") -> ndws.Workspace:
    """The machine's circular workspace: a ring of three 64-byte slots."""
    ws = ndws.workspace(key, CONFS["C"])
    assert ws.current_size == 192
    return ws


def test_ring_result_landing_on_its_own_input():
    """A result whose allocation wraps the ring onto its operand is computed from the operand
    (NumPy's overlap handling), and the operand is then reported overwritten."""
    with _ring():
        a = ndws.arange(8.0)                 # slot 0
        b = ndws.arange(8.0) * 2             # slot 1 (arange) and slot 2 (product)
        assert b.stale is None
        s = a.sum()                          # wraps: slot 0, on top of a
        assert s.item() == 28.0
        assert a.stale == "overwritten"
        c = b + 1                            # slot 1, on top of b's arange temporary
        np.testing.assert_array_equal(c.numpy(), np.arange(8.0) * 2 + 1)
        d = b * 3                            # slot 2: on top of b itself
        np.testing.assert_array_equal(d.numpy(), np.arange(8.0) * 6)
        assert b.stale == "overwritten"
        exc = raised(WorkspaceError, lambda: b + 1)
        assert exc.kind == "overwritten" and exc.workspace_id == "C" and exc.op == "add"
        assert repr(b).endswith("workspace='C': overwritten (the data is no longer accessible)>")


def test_reentered_outer_workspace_hazard():
    """ND4J §2.4 hazard, pinned: entering an open, non-current workspace starts a new cycle
    (outer arrays outdated). In ND4J its close closes the workspace, so the inner one's close
    makes a closed workspace current (§2.5 step 3), which can't be closed again. In ndws the
    workspace stays open while its outer entry is: S2's close makes it current again, usable,
    and its last close ends the cycle."""
    s1, s2 = ndws.workspace("S1", CONFS["S1"]), ndws.workspace("S2", CONFS["S2"])
    s1.notify_scope_entered()
    a = ndws.arange(3.0)
    s2.notify_scope_entered()
    b = ndws.arange(3.0)
    s1.notify_scope_entered()                # open but not current: a new cycle
    assert (s1.generation, a.stale, s1.parent_workspace) == (2, "outdated", s2)
    exc = raised(WorkspaceError, lambda: a + 1)
    assert str(exc) == (
        "Op [add] x1 argument uses outdated workspace pointer from workspace [S1]: Workspace "
        "array was defined in has been closed and reopened at least once since array "
        "creation. Array WS iteration: 1. Workspace current iteration: 2\n"
        f"All open workspaces: [S1, S2]\n{ndws.SCOPE_PANIC_MSG}")
    s1.close()
    assert ndws.current_workspace() is s2 and s1.is_scope_active
    assert (a.stale, b.stale) == ("outdated", None)
    s2.close()
    assert ndws.current_workspace() is s1 and s1.is_scope_active
    c = ndws.arange(3.0)
    assert (c + 1).tolist() == [1.0, 2.0, 3.0]
    s1.close()
    assert ndws.current_workspace() is None
    exc = raised(WorkspaceError, s1.close)
    assert exc.kind == "closed" and str(exc) == "Workspace [S1] can't be closed: it is not open"
    assert (a.stale, b.stale, c.stale) == ("leaked", "leaked", "leaked")


def test_export_keeps_its_block_across_cycles():
    """Invariant 6 with the default policy: the cycle end leaves the exported block to
    the NumPy view (counted, warned once per workspace), later cycles don't touch it."""
    ws = ndws.workspace("S1", CONFS["S1"])
    with pytest.warns(WorkspaceWarning, match=r"^Workspace \[S1\]: a cycle ended while 1 "):
        with ws:
            x = ndws.full(3, 7.0)
            e = np.asarray(x)
    assert (ws.blocks_left_to_exports, ws.bytes_left_to_exports) == (1, 249)
    with ws:
        y = ndws.full(3, -1.0)               # offset 0 again, in the fresh block
        e2 = np.asarray(y)
    assert (ws.blocks_left_to_exports, ws.bytes_left_to_exports) == (2, 498)  # no 2nd warning
    with ws:
        ndws.full(3, 5.0)
    np.testing.assert_array_equal(e, [7.0, 7.0, 7.0])
    np.testing.assert_array_equal(e2, [-1.0, -1.0, -1.0])
    assert x.stale == "leaked"
    exc = raised(WorkspaceError, lambda: np.asarray(x))
    assert (exc.kind, exc.op) == ("leaked", "__array__")


def test_ring_export_of_previous_lap_array_is_not_overwritten():
    """Invariant 6 in a ring: an array of the previous lap that the ring has not
    reached yet may be exported; the ring must not then write over the exported memory."""
    with _ring():
        ndws.full((), 1.0)                   # slot 0
        b = ndws.full((), 2.0)               # slot 1
        ndws.full((), 3.0)                   # slot 2
        ndws.full((), 4.0)                   # wraps to slot 0
        assert b.stale is None
        e = np.asarray(b)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", WorkspaceWarning)
            f = ndws.full((), 5.0)           # the next slot is b's
        assert f.item() == 5.0
        assert float(e) == 2.0, "the NumPy export was silently overwritten"
        assert b.stale is not None or b.item() == 2.0


def test_overwritten_ring_array_stays_overwritten_after_fresh_block():
    """Invariant 2: once the ring has passed an array it stays stale; a wrap that
    leaves the block to a live export must not make it valid again (its memory holds another
    array's data)."""
    with _ring():
        a = ndws.full((), 1.0)               # slot 0
        ndws.full((), 2.0)
        ndws.full((), 3.0)
        d = ndws.full((), 4.0)               # wraps: slot 0, over a
        assert a.stale == "overwritten"
        e = np.asarray(d)                    # export of a current-lap array
        with pytest.warns(WorkspaceWarning, match=r"^Workspace \[C\]: "):
            ndws.full((), 5.0)
            ndws.full((), 6.0)
            ndws.full((), 7.0)               # the ring moves to a fresh block (by this wrap)
        assert float(e) == 4.0
        assert a.stale == "overwritten"
        exc = raised(WorkspaceError, a.item)
        assert exc.kind == "overwritten"


def test_overwritten_ring_array_stays_overwritten_after_ring_rebuild():
    """Same as above when a REALLOCATE ring is rebuilt after trimmed mode (§2.5 step 9)."""
    conf = WorkspaceConfiguration(overallocation_limit=1.0, policy_reset="ENDOFBUFFER_REACHED",
                                  policy_spill="REALLOCATE")
    ws = ndws.workspace("R", conf)
    with ws:
        ndws.full(8, -1.0)                   # learns an 88-byte block, ring of 176
    arrays = []
    for cycle in range(10):
        with ws:
            arrays.append(ndws.full(8, float(cycle)))
            if cycle == 5:
                ndws.full(64, 9.0)           # bigger than a block: trimmed mode, rebuild later
    rebuilt = ws.current_size
    assert rebuilt > 176
    for cycle, x in enumerate(arrays):
        assert x.stale is not None or x.numpy()[0] == cycle, (cycle, x.numpy())


def test_with_on_activated_workspace_from_elsewhere_enters_it():
    """`with ws:` on get_and_activate_workspace()'s result takes over that entry only when
    used directly; after other workspace changes it enters like any `with` (§2.4: an open,
    non-current workspace starts a new cycle and becomes current)."""
    mgr = ndws.get_workspace_manager()
    a = mgr.get_and_activate_workspace(WorkspaceConfiguration(), "A")
    with ndws.scope_out_of_workspaces():
        with a:
            current, generation = ndws.current_workspace(), a.generation
        assert ndws.current_workspace() is None      # the scope-out is current again
    assert ndws.current_workspace() is a and a.is_scope_active
    a.close()                                       # the activation's entry
    assert ndws.current_workspace() is None and not a.is_scope_active
    assert current is a
    assert generation == 2


def test_ops_never_see_a_closed_current_workspace():
    """The closing sequence that left a closed workspace current in ND4J (§2.4 hazard, then
    out-of-order closes) now leaves an open one or none, so ufuncs and reductions place their
    results in usable memory."""
    s1, s2 = ndws.workspace("S1", CONFS["S1"]), ndws.workspace("S2", CONFS["S2"])
    x = ndws.arange(4.0)
    s1.notify_scope_entered()
    s2.notify_scope_entered()
    s1.notify_scope_entered()
    s1.close()
    s2.close()
    assert ndws.current_workspace() is s1 and s1.is_scope_active
    r1, r2 = x + 1, x.sum()
    assert (r1.stale, r2.stale, r2.item()) == (None, None, 6.0)
    s1.close()
    assert ndws.current_workspace() is None
    r3, r4 = x + 1, x.sum()
    assert not r3.is_attached() and not r4.is_attached() and r4.item() == 6.0
