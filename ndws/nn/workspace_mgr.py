"""Where a layer's arrays live: `ArrayType` and `LayerWorkspaceMgr` (DL4J's ``ArrayType`` and
``LayerWorkspaceMgr`` / ``BaseWorkspaceMgr``).

A network hands each layer a manager that maps every kind of array the layer makes (its
activations, its working memory, the gradient it passes back, ...) to a workspace, or to no
workspace ("scoped out": detached memory). A layer never names workspaces itself: it asks the
manager, ``mgr.create(ArrayType.ACTIVATIONS, shape)``, so the same layer code runs in every
workspace mode. The manager is per thread, like the workspaces it names.

Examples
--------
>>> import ndws
>>> from ndws.nn import ArrayType, LayerWorkspaceMgr
>>> mgr = (LayerWorkspaceMgr.builder()
...        .with_(ArrayType.ACTIVATIONS, "WS_ACT", ndws.WorkspaceConfiguration())
...        .default_no_workspace()
...        .build())
>>> with mgr.notify_scope_entered(ArrayType.ACTIVATIONS):
...     a = mgr.create(ArrayType.ACTIVATIONS, (2, 3), dtype="float32")
...     w = mgr.create(ArrayType.FF_WORKING_MEM, (3,))
...     (a.workspace_id, w.is_attached())
('WS_ACT', False)
>>> ndws.destroy_all_workspaces_for_current_thread()
"""
from __future__ import annotations

import contextlib
import enum
from typing import Any, Iterable

import numpy as np

import ndws
from ndws import _core
from ndws._core import NDArray, WorkspaceError
from ndws.workspace import (
    DebugMode,
    Workspace,
    WorkspaceConfiguration,
    current_workspace,
    get_workspace_manager,
    scope_out_of_workspaces,
)

__all__ = ["ArrayType", "LayerWorkspaceMgr", "WorkspacesCloseable"]

_BYPASS = DebugMode.BYPASS_EVERYTHING.value


class ArrayType(enum.Enum):
    """The kinds of arrays a layer makes (DL4J's ``ArrayType``)."""

    #: layer inputs, as stored for backprop
    INPUT = "INPUT"
    #: layer outputs
    ACTIVATIONS = "ACTIVATIONS"
    #: gradients with respect to layer inputs (epsilons) passed backwards
    ACTIVATION_GRAD = "ACTIVATION_GRAD"
    #: temporary memory within one layer's forward pass
    FF_WORKING_MEM = "FF_WORKING_MEM"
    #: temporary memory within one layer's backward pass
    BP_WORKING_MEM = "BP_WORKING_MEM"
    #: per-time-step temporaries of recurrent forward loops
    RNN_FF_LOOP_WORKING_MEM = "RNN_FF_LOOP_WORKING_MEM"
    #: per-time-step temporaries of recurrent backward loops
    RNN_BP_LOOP_WORKING_MEM = "RNN_BP_LOOP_WORKING_MEM"
    #: updater temporaries
    UPDATER_WORKING_MEM = "UPDATER_WORKING_MEM"
    #: forward-pass values kept for backprop
    FF_CACHE = "FF_CACHE"

    def __str__(self) -> str:
        return self.value

    # members are singletons compared by identity: hash them in C (Enum's own __hash__ is a
    # Python call, and the managers look types up in dicts several times per layer and pass)
    __hash__ = object.__hash__


def _bypassed() -> bool:
    # DebugMode.BYPASS_EVERYTHING: every workspace lookup gives a DummyWorkspace
    return _core._get_debug_mode() == _BYPASS


def _array_type(value: Any, name: str = "type") -> ArrayType:
    if not isinstance(value, ArrayType):
        raise TypeError(f"{name}: expected an ndws.nn.ArrayType, got {type(value).__name__} "
                        f"{value!r:.40}")
    return value


def _workspace_name(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"name: expected a non-empty str (a workspace id), got "
                        f"{type(value).__name__} {value!r:.40}")
    return value


def _configuration(value: Any) -> WorkspaceConfiguration:
    if not isinstance(value, WorkspaceConfiguration):
        raise TypeError(f"conf: expected an ndws.WorkspaceConfiguration, got "
                        f"{type(value).__name__} {value!r:.40}")
    return value


def _ndarray(value: Any, name: str = "array") -> NDArray:
    if not isinstance(value, NDArray):
        raise TypeError(f"{name}: expected an ndws.NDArray, got {type(value).__name__}")
    return value


class WorkspacesCloseable:
    """The workspaces one `LayerWorkspaceMgr.notify_scope_entered` call entered, closed in
    reverse order by `close` or at the end of a ``with`` block (DL4J's
    ``WorkspacesCloseable``). ``with`` yields the tuple of workspaces."""

    def __init__(self, workspaces: Iterable[Any]):
        self._workspaces = list(workspaces)

    @property
    def workspaces(self) -> tuple:
        return tuple(self._workspaces)

    def __enter__(self) -> tuple:
        return tuple(self._workspaces)

    def __exit__(self, *exc_info: Any) -> bool:
        self.close()
        return False

    def close(self) -> None:
        # innermost first; each scope is ended once even if ending one of them raises
        errors = []
        while self._workspaces:
            ws = self._workspaces.pop()
            try:
                ws.__exit__(None, None, None)    # ends exactly the scope __enter__ adopted
            except BaseException as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


class LayerWorkspaceMgr:
    """Maps every `ArrayType` to a workspace (name and configuration) or to none.

    Build one with `builder` (or `no_workspaces`); networks build theirs per workspace mode.
    Every method that takes an `ArrayType` refuses a type that is neither configured nor scoped
    out (``WorkspaceError``: "No workspace configuration has been provided for arrayType: T").

    Parameters
    ----------
    names : dict of ArrayType to str, optional
        Workspace id per configured type.
    configs : dict of ArrayType to WorkspaceConfiguration, optional
        Configuration per configured type; its keys must equal those of `names`.
    scoped_out : iterable of ArrayType, optional
        Types that get no workspace (detached memory).
    """

    def __init__(self, names: dict | None = None, configs: dict | None = None,
                 scoped_out: Iterable[ArrayType] = ()):
        names = dict(names or {})
        configs = dict(configs or {})
        if set(names) != set(configs):
            raise ValueError("Keys for config may and workspace names must match: names has "
                             f"{sorted(map(str, names))}, configs has "
                             f"{sorted(map(str, configs))}")
        checked_out = {_array_type(t, "scoped_out") for t in scoped_out}
        for t, name in names.items():
            _array_type(t, "names")
            _workspace_name(name)
            _configuration(configs[t])
            if t in checked_out:
                raise ValueError(f"{t}: both configured and scoped out")
        self._names: dict[ArrayType, str] = names
        self._configs: dict[ArrayType, WorkspaceConfiguration] = configs
        self._scoped_out: set[ArrayType] = checked_out
        self._no_leverage: set[str] = set()
        self._frozen = False

    # -- construction ---------------------------------------------------------------------------

    @staticmethod
    def builder() -> "LayerWorkspaceMgrBuilder":
        """A builder: ``with_(type, name, conf)``, ``no_workspace_for(type)``,
        ``default_workspace(name, conf)``, ``default_no_workspace()``, ``build()``."""
        return LayerWorkspaceMgrBuilder()

    @staticmethod
    def no_workspaces() -> "LayerWorkspaceMgr":
        """A new manager with every type scoped out: every array detached."""
        return LayerWorkspaceMgr(scoped_out=list(ArrayType))

    @staticmethod
    def no_workspaces_immutable() -> "LayerWorkspaceMgr":
        """The shared manager with every type scoped out; changing it raises."""
        return _NO_WORKSPACES

    def _check_mutable(self) -> None:
        if self._frozen:
            raise WorkspaceError("This LayerWorkspaceMgr is immutable (no_workspaces_immutable); "
                                 "use LayerWorkspaceMgr.no_workspaces() for one you can change",
                                 "immutable")

    def set_workspace(self, type: ArrayType, name: str, conf: WorkspaceConfiguration) -> None:
        """Give `type` the workspace `name` with configuration `conf` (un-scoping it)."""
        self._check_mutable()
        t = _array_type(type)
        name = _workspace_name(name)
        conf = _configuration(conf)
        self._scoped_out.discard(t)
        self._names[t] = name
        self._configs[t] = conf

    def _map(self, t: ArrayType, name: str, conf: WorkspaceConfiguration) -> None:
        # set_workspace for ndws' own callers, whose arguments are known to be right (the
        # network re-points its ping-pong types for every layer of every pass)
        self._scoped_out.discard(t)
        self._names[t] = name
        self._configs[t] = conf

    def set_scoped_out_for(self, type: ArrayType) -> None:
        """Give `type` no workspace: its arrays are detached."""
        self._check_mutable()
        t = _array_type(type)
        self._names.pop(t, None)
        self._configs.pop(t, None)
        self._scoped_out.add(t)

    def set_no_leverage_override(self, id: str) -> None:
        """Never copy arrays of workspace `id` in `leverage_to` / `validate_array_location`
        (how a network keeps an input that lives in an iterator's workspace where it is)."""
        self._check_mutable()
        self._no_leverage.add(_workspace_name(id))

    # -- queries --------------------------------------------------------------------------------

    def _validate(self, t: ArrayType) -> None:
        if t in self._scoped_out:
            return
        if t not in self._configs:
            raise WorkspaceError(
                f"No workspace configuration has been provided for arrayType: {t}",
                "configuration")
        if t not in self._names:
            raise WorkspaceError(f"No workspace name has been provided for arrayType: {t}",
                                 "configuration")

    def is_scoped_out(self, type: ArrayType) -> bool:
        """True when `type` gets no workspace."""
        t = _array_type(type)
        self._validate(t)
        return t in self._scoped_out

    def has_configuration(self, type: ArrayType) -> bool:
        """True when `type` is configured or scoped out."""
        t = _array_type(type)
        return t in self._scoped_out or t in self._configs

    def get_workspace_name(self, type: ArrayType) -> str | None:
        """The workspace id of `type` (None when scoped out)."""
        t = _array_type(type)
        self._validate(t)
        return self._names.get(t)

    def get_configuration(self, type: ArrayType) -> WorkspaceConfiguration | None:
        """The workspace configuration of `type` (None when scoped out)."""
        t = _array_type(type)
        self._validate(t)
        return self._configs.get(t)

    def is_workspace_open(self, type: ArrayType) -> bool:
        """True when `type` is scoped out, or its workspace exists in this thread and is open."""
        t = _array_type(type)
        self._validate(t)
        if t in self._scoped_out:
            return True
        return get_workspace_manager().check_if_workspace_exists_and_active(self._names[t])

    def assert_open(self, type: ArrayType, msg: str = "") -> None:
        """Raise ``WorkspaceError`` unless `type`'s workspace is open."""
        if not self.is_workspace_open(type):
            raise WorkspaceError(f"Assertion failed: expected workspace for array type {type} "
                                 f"to be open: {msg}", "closed", self._names.get(type))

    def assert_not_open(self, type: ArrayType, msg: str = "") -> None:
        """Raise ``WorkspaceError`` when `type` has a workspace and it is open."""
        t = _array_type(type)
        self._validate(t)
        if t not in self._scoped_out and self.is_workspace_open(t):
            raise WorkspaceError(f"Assertion failed: expected workspace for array type {t} to "
                                 f"not be open: {msg}", "open", self._names[t])

    def assert_current_workspace(self, type: ArrayType, msg: str = "") -> None:
        """Raise ``WorkspaceError`` unless `type`'s workspace is this thread's current one
        (nothing to check for a scoped-out type)."""
        t = _array_type(type)
        self._validate(t)
        if t in self._scoped_out:
            return
        curr = current_workspace()
        name = self._names[t]
        if curr is None or curr.id != name:
            actual = "null" if curr is None else f'"{curr.id}"'
            raise WorkspaceError(f'Assertion failed: expected current workspace to be "{name}" '
                                 f"(for array type {t}) - actual current workspace is {actual}: "
                                 f"{msg}", "current", name)

    # -- scopes ---------------------------------------------------------------------------------

    def _enter(self, t: ArrayType, adopt: bool) -> Any:
        # entered now (ND4J's order); `adopt` also takes the entry over as a `with` would, so
        # WorkspacesCloseable can end exactly this scope later (a later entry would otherwise
        # make the object forget it was just entered)
        if t in self._scoped_out:
            ws = scope_out_of_workspaces()
        else:
            wsm = get_workspace_manager()
            ws = wsm._workspaces.get(self._names[t])
            if ws is not None and not _bypassed():
                # what get_and_activate_workspace does for an existing workspace, without its
                # argument parsing (this runs for every layer and pass)
                ws.notify_scope_entered()
                ws._mark_adoptable()
            else:
                ws = wsm.get_and_activate_workspace(self._configs[t], self._names[t])
        if adopt:
            ws.__enter__()
        return ws

    def notify_scope_entered(self, *types: ArrayType) -> Any:
        """Enter the workspace of each type, in order (a scoped-out type scopes out).

        One type returns its workspace (a `Workspace`, or a `DummyWorkspace` when scoped out);
        several return a `WorkspacesCloseable` that closes them in reverse order. Either is a
        context manager. If entering one fails, those already entered are closed again.
        """
        if len(types) == 1 and type(types[0]) is ArrayType:
            self._validate(types[0])
            return self._enter(types[0], False)
        if not types:
            raise TypeError("notify_scope_entered: expected at least one ArrayType")
        checked = [_array_type(t, "types") for t in types]
        for t in checked:
            self._validate(t)
        entered = []
        try:
            for t in checked:
                entered.append(self._enter(t, True))
        except BaseException:
            WorkspacesCloseable(entered).close()
            raise
        return WorkspacesCloseable(entered)

    def notify_scope_borrowed(self, type: ArrayType) -> Any:
        """Borrow `type`'s workspace (current without a new cycle) until the returned scope is
        closed; it must exist and be open. A scoped-out type scopes out instead."""
        t = _array_type(type)
        self._validate(t)
        if t in self._scoped_out:
            return scope_out_of_workspaces()
        ws = self._open_workspace(t)
        return ws.borrow()

    def _open_workspace(self, t: ArrayType) -> Workspace:
        name = self._names[t]
        ws = get_workspace_manager()._workspaces.get(name)
        if ws is None or not ws.is_scope_active:
            raise WorkspaceError(f'Workspace "{name}" for array type {t} is not open', "closed",
                                 name)
        return ws

    # -- allocation -----------------------------------------------------------------------------

    def _in(self, t: ArrayType) -> Any:
        # the scope an allocation of type t happens in: its workspace borrowed, or scoped out;
        # nothing to do when that workspace is already the current one (the common case: a
        # layer allocating in the scope the network entered for it)
        name = self._names.get(t)
        if name is not None:
            current = current_workspace()
            if current is not None and current.id == name:
                return contextlib.nullcontext()
        self._validate(t)
        if t in self._scoped_out:
            return scope_out_of_workspaces() if current_workspace() is not None \
                else contextlib.nullcontext()
        return self._open_workspace(t).borrow()

    def create(self, type: ArrayType, shape: Any, dtype: Any = None, order: str = "C") -> NDArray:
        """Zeros of `shape` in `type`'s workspace (detached when scoped out); the workspace must
        be open."""
        t = _array_type(type)
        with self._in(t):
            return ndws.zeros(shape, dtype, order)

    def create_uninitialized(self, type: ArrayType, shape: Any, dtype: Any = None,
                             order: str = "C") -> NDArray:
        """As `create`, without zeroing the memory."""
        t = _array_type(type)
        with self._in(t):
            return ndws.empty(shape, dtype, order)

    def dup(self, type: ArrayType, array: NDArray, order: str = "C") -> NDArray:
        """A copy of `array` in `type`'s workspace."""
        t = _array_type(type)
        a = _ndarray(array)
        with self._in(t):
            return a.copy(order)

    def cast_to(self, type: ArrayType, array: NDArray, dtype: Any,
                dup_if_correct_type: bool = False) -> NDArray:
        """`array` as `dtype` in `type`'s workspace. `array` itself when it already has that
        dtype, `dup_if_correct_type` is false, and it is detached or already in that
        workspace."""
        t = _array_type(type)
        a = _ndarray(array)
        dt = np.dtype(dtype)
        self._validate(t)
        if a.dtype == dt and not dup_if_correct_type and (
                not a.is_attached() or a.workspace_id == self._names.get(t)):
            return a
        with self._in(t):
            return a.astype(dt)

    def leverage_to(self, type: ArrayType, array: NDArray | None) -> NDArray | None:
        """`array` moved to `type`'s workspace (DL4J's ``leverageTo``): None and detached arrays
        as they are, arrays of a no-leverage workspace as they are, detached for a scoped-out
        type, else copied into the type's workspace (which must be open)."""
        if array is None:
            return None
        a = _ndarray(array)
        t = _array_type(type)
        self._validate(t)
        if not a.is_attached() or a.workspace_id in self._no_leverage:
            return a
        if not self.is_workspace_open(t):
            raise WorkspaceError(f"Workspace for array type {t} is not open", "closed",
                                 self._names.get(t))
        if t in self._scoped_out:
            return a.detach()
        return a.leverage_to(self._names[t], True)

    def validate_array_location(self, type: ArrayType, array: NDArray,
                                migrate_if_invalid: bool, exception_if_detached: bool) -> NDArray:
        """Check that `array` lives where `type`'s arrays belong; returns it, or (with
        `migrate_if_invalid`) its copy in the right place. Raises ``WorkspaceError`` otherwise.
        """
        a = _ndarray(array)
        t = _array_type(type)
        self._validate(t)
        ws_id = a.workspace_id
        if ws_id is not None and ws_id in self._no_leverage:
            return a
        if t in self._scoped_out:
            if ws_id is None:
                return a
            if migrate_if_invalid:
                return self.leverage_to(t, a)
            raise WorkspaceError(f"Array workspace validation failed: Array of type {t} should "
                                 f"be detached (no workspace) but is in workspace: {ws_id}",
                                 "location", ws_id)
        name = self._names[t]
        if ws_id is None:
            if exception_if_detached:
                raise WorkspaceError(f"Array workspace validation failed: Array of type {t} "
                                     f'should be in workspace "{name}" but is detached',
                                     "location", name)
            return a
        if ws_id != name:
            if migrate_if_invalid:
                return self.leverage_to(t, a)
            raise WorkspaceError(f"Array workspace validation failed: Array of type {t} should "
                                 f'be in workspace "{name}" but is in workspace "{ws_id}"',
                                 "location", ws_id)
        return a

    def __repr__(self) -> str:
        parts = [f"{t}: {'-' if t in self._scoped_out else self._names.get(t, '?')}"
                 for t in ArrayType if t in self._scoped_out or t in self._names]
        return f"<LayerWorkspaceMgr {', '.join(parts) or 'unconfigured'}>"


class LayerWorkspaceMgrBuilder:
    """Builds a `LayerWorkspaceMgr` (DL4J's ``LayerWorkspaceMgr.Builder``)."""

    def __init__(self) -> None:
        self._names: dict[ArrayType, str] = {}
        self._configs: dict[ArrayType, WorkspaceConfiguration] = {}
        self._scoped_out: set[ArrayType] = set()

    def with_(self, type: ArrayType, name: str, conf: WorkspaceConfiguration
              ) -> "LayerWorkspaceMgrBuilder":
        """`type`'s arrays go to workspace `name` with `conf` (``with`` is a Python keyword)."""
        t = _array_type(type)
        self._names[t] = _workspace_name(name)
        self._configs[t] = _configuration(conf)
        self._scoped_out.discard(t)
        return self

    def no_workspace_for(self, type: ArrayType) -> "LayerWorkspaceMgrBuilder":
        """`type`'s arrays are detached."""
        t = _array_type(type)
        self._names.pop(t, None)
        self._configs.pop(t, None)
        self._scoped_out.add(t)
        return self

    def default_workspace(self, name: str, conf: WorkspaceConfiguration
                          ) -> "LayerWorkspaceMgrBuilder":
        """Every type not configured or scoped out yet goes to workspace `name`."""
        name = _workspace_name(name)
        conf = _configuration(conf)
        for t in ArrayType:
            if t not in self._names and t not in self._scoped_out:
                self._names[t] = name
                self._configs[t] = conf
        return self

    def default_no_workspace(self) -> "LayerWorkspaceMgrBuilder":
        """Every type not configured yet is scoped out."""
        for t in ArrayType:
            if t not in self._names:
                self._scoped_out.add(t)
        return self

    def build(self) -> LayerWorkspaceMgr:
        return LayerWorkspaceMgr(self._names, self._configs, self._scoped_out)


_NO_WORKSPACES = LayerWorkspaceMgr.no_workspaces()
_NO_WORKSPACES._frozen = True
