"""Workspaces: configuration, the context-manager API and the per-thread manager.

The mechanics (bump allocation, cycles, learning, spills, the ring) are ND4J's, implemented in
`ndws._arena.Arena`; this module gives them ND4J's configuration object and names in Python
form (see ``docs/porting-from-dl4j.md`` for the name table).

Examples
--------
>>> import ndws
>>> from ndws.workspace import WorkspaceConfiguration, LearningPolicy
>>> conf = WorkspaceConfiguration(initial_size=1024, policy_learning=LearningPolicy.NONE)
>>> with ndws.workspace("EXAMPLE", conf) as ws:
...     a = ndws.zeros(10)          # 80 bytes, rounded up to 128 (two 64-byte slots)
...     ws.this_cycle_allocations
128
>>> ws.current_size                 # 1024 plus 30% overallocation
1331
>>> ndws.destroy_all_workspaces_for_current_thread()
"""
from __future__ import annotations

import enum
import itertools
import math
import numbers
import operator
import os
import sys
import threading
from dataclasses import dataclass, fields, replace
from typing import Any

from ndws import _arena, _core, _gc
from ndws._core import ConfigurationError, current_workspace

__all__ = [
    "AllocationPolicy",
    "DEFAULT_ID",
    "DebugMode",
    "DummyWorkspace",
    "ExportPolicy",
    "LearningPolicy",
    "LocationPolicy",
    "MirroringPolicy",
    "ResetPolicy",
    "SpillPolicy",
    "Workspace",
    "WorkspaceConfiguration",
    "WorkspaceManager",
    "WorkspaceMode",
    "WorkspaceType",
    "current_workspace",
    "destroyAllWorkspacesForCurrentThread",
    "destroy_all_workspaces_for_current_thread",
    "get_workspace_manager",
    "scope_out_of_workspaces",
    "workspace",
]

#: Id of the workspace ND4J's no-id calls use.
DEFAULT_ID = "DefaultWorkspace"


def _policy(name: str, codes: type, prefix: str, doc: str) -> type:
    """DL4J's enum `name` over the core's policy codes (declared once, in the core): the same
    values, the members named without the C prefix."""
    cls = enum.Enum(name, [(m.name[len(prefix):], int(m)) for m in codes], module=__name__,
                    qualname=name)
    cls.__doc__ = doc
    return cls


AllocationPolicy = _policy("AllocationPolicy", _arena.AllocationPolicyCode, "ALLOC_",
                           "Whether headroom is added on top of the initial or learned size.")
LearningPolicy = _policy("LearningPolicy", _arena.LearningPolicyCode, "LEARN_",
                         "How and when a workspace learns its size.")
SpillPolicy = _policy("SpillPolicy", _arena.SpillPolicyCode, "SPILL_",
                      "What happens to an allocation that does not fit.")
ResetPolicy = _policy("ResetPolicy", _arena.ResetPolicyCode, "RESET_",
                      "BLOCK_LEFT: scoped workspace; ENDOFBUFFER_REACHED: circular workspace "
                      "(a ring).")
LocationPolicy = _policy("LocationPolicy", _arena.LocationPolicyCode, "LOCATION_",
                         "RAM, or a memory-mapped file.")
ExportPolicy = _policy("ExportPolicy", _arena.ExportPolicyCode, "EXPORTS_", """What a cycle end \
does when NumPy views of the workspace's memory are still alive.

FRESH_BLOCK (default) leaves the old block to the views and continues on a new one (counted in
`Workspace.blocks_left_to_exports`, warned once per workspace); FAIL raises ``WorkspaceError``
(kind ``"exported"``) instead and changes nothing. An ndws addition.
""")
DebugMode = _policy("DebugMode", _arena.DebugModeCode, "DEBUG_",
                    "Process-wide workspace debug switch (ND4J ``DebugMode``).")


class MirroringPolicy(enum.Enum):
    """Host/device mirroring; only meaningful on GPUs, kept for configuration parity (no core
    code reads it)."""

    FULL = 0
    HOST_ONLY = 1


class WorkspaceType(enum.Enum):
    """ND4J ``MemoryWorkspace.Type``."""

    DUMMY = 0
    SCOPED = 1
    CIRCULAR = 2


class WorkspaceMode(enum.Enum):
    """How a network uses workspaces (DL4J's ``WorkspaceMode``). Unlike DL4J, where SINGLE and
    SEPARATE are deprecated aliases of ENABLED, each is its own layout (docs/porting-from-dl4j.md,
    "Deliberate differences")."""

    #: no workspaces: every temporary is ordinary memory
    NONE = "NONE"
    #: the recommended layout for the phase: SEPARATE for training, SINGLE for inference
    ENABLED = "ENABLED"
    #: one workspace entered once per iteration holds all of it (fastest, most memory)
    SINGLE = "SINGLE"
    #: DL4J's per-layer working memory and ping-pong activation workspaces (least memory)
    SEPARATE = "SEPARATE"


_ENUM_FIELDS = {
    "policy_allocation": AllocationPolicy,
    "policy_learning": LearningPolicy,
    "policy_spill": SpillPolicy,
    "policy_reset": ResetPolicy,
    "policy_location": LocationPolicy,
    "policy_mirroring": MirroringPolicy,
    "policy_exports": ExportPolicy,
}
_SIZE_FIELDS = ("initial_size", "min_size", "max_size")
#: more blocks than a C int counts (ND4J's stepsNumber is an int)
_MAX_RING_BLOCKS = 2**31 - 2


def _bad(field: str, message: str) -> ConfigurationError:
    return ConfigurationError(f"{field}: {message}", field)


@dataclass(frozen=True)
class WorkspaceConfiguration:
    """Immutable, validated workspace configuration (ND4J ``WorkspaceConfiguration``).

    Parameters
    ----------
    initial_size : int
        Bytes allocated at construction, before overallocation.
    min_size : int
        Lower bound applied after learning.
    max_size : int
        Upper bound for the initial and learned sizes; 0 means no cap.
    overallocation_limit : float
        Fraction added on OVERALLOCATE; for circular workspaces the number of extra ring
        blocks (must then be at least 1).
    policy_allocation, policy_learning, policy_spill, policy_reset, policy_location
        The ND4J policies (enum members or their names).
    policy_mirroring : MirroringPolicy
        Accepted for parity; CPU workspaces ignore it.
    temp_file_path : str or os.PathLike, optional
        File backing an MMAP workspace; a temporary file is used when omitted.
    cycles_before_initialization : int
        OVER_TIME learning: the cycle at whose close the workspace sizes itself (0: never).
    steps_number : int
        Kept for parity; unused, as in ND4J.
    policy_exports : ExportPolicy
        ndws addition: what a cycle end does while NumPy views of the memory are alive.

    Raises
    ------
    ndws.ConfigurationError
        (both a ``ValueError`` and a ``WorkspaceError``) naming the field at fault.

    Examples
    --------
    >>> WorkspaceConfiguration(initial_size=-1)
    Traceback (most recent call last):
    ...
    ndws.ConfigurationError: initial_size: must be a non-negative number of bytes, got -1
    """

    initial_size: int = 0
    min_size: int = 0
    max_size: int = 0
    overallocation_limit: float = 0.3
    policy_allocation: AllocationPolicy = AllocationPolicy.OVERALLOCATE
    policy_learning: LearningPolicy = LearningPolicy.FIRST_LOOP
    policy_spill: SpillPolicy = SpillPolicy.EXTERNAL
    policy_reset: ResetPolicy = ResetPolicy.BLOCK_LEFT
    policy_location: LocationPolicy = LocationPolicy.RAM
    policy_mirroring: MirroringPolicy = MirroringPolicy.FULL
    temp_file_path: Any = None
    cycles_before_initialization: int = 0
    steps_number: int = 2
    policy_exports: ExportPolicy = ExportPolicy.FRESH_BLOCK

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name in _SIZE_FIELDS + ("cycles_before_initialization", "steps_number"):
            value = getattr(self, name)
            if isinstance(value, bool):
                raise _bad(name, f"must be an integer, got {value!r}")
            try:
                number = operator.index(value)
            except TypeError:
                raise _bad(name, f"must be an integer, got {value!r}") from None
            if number < 0:
                what = "number of bytes" if name in _SIZE_FIELDS else "integer"
                raise _bad(name, f"must be a non-negative {what}, got {number!r}")
            if name in _SIZE_FIELDS and number > _core.MAX_BLOCK_BYTES:
                raise _bad(name, f"must be at most {_core.MAX_BLOCK_BYTES} bytes, got "
                                 f"{number!r}")
            if number > sys.maxsize:
                raise _bad(name, f"must be at most {sys.maxsize}, got {number!r}")
            set_(self, name, number)
        limit = self.overallocation_limit
        if (isinstance(limit, bool) or not isinstance(limit, numbers.Real)     # NumPy's too
                or not math.isfinite(limit)):
            raise _bad("overallocation_limit", f"must be a finite number, got {limit!r}")
        if limit < 0:
            raise _bad("overallocation_limit", f"must not be negative, got {limit!r}")
        set_(self, "overallocation_limit", float(limit))
        for name, kind in _ENUM_FIELDS.items():
            value = getattr(self, name)
            if isinstance(value, str):
                try:
                    value = kind[value]
                except KeyError:
                    raise _bad(name, f"expected one of {[m.name for m in kind]}, "
                                     f"got {value!r}") from None
            if not isinstance(value, kind):
                raise _bad(name, f"expected a {kind.__name__}, got {value!r}")
            set_(self, name, value)
        if self.temp_file_path is not None and not isinstance(self.temp_file_path,
                                                               (str, bytes, os.PathLike)):
            raise _bad("temp_file_path", f"expected a path, got {self.temp_file_path!r}")
        if self.policy_location is LocationPolicy.MMAP:
            if self.policy_learning is not LearningPolicy.NONE:
                raise _bad("policy_learning", "Workspace backed by memory-mapped file can't "
                                              "have LearningPolicy defined")
            if self.temp_file_path is None and self.initial_size == 0:
                raise _bad("initial_size", "MMAP target file path should be non-null or "
                                           "workspace initialSize should be >0 for temp file")
        if (self.policy_reset is ResetPolicy.ENDOFBUFFER_REACHED
                and self.policy_allocation is AllocationPolicy.OVERALLOCATE
                and self.overallocation_limit < 1.0):
            raise _bad("overallocation_limit", "For cyclic workspace overallocation should be "
                                               f"positive integral value. Got "
                                               f"{self.overallocation_limit!r}")
        if self.policy_allocation is AllocationPolicy.OVERALLOCATE:
            # the sizes the workspace will really ask for (ND4J's arithmetic overflows here
            # into a negative size that then spills every allocation)
            if self.policy_reset is ResetPolicy.ENDOFBUFFER_REACHED and \
                    self.overallocation_limit >= _MAX_RING_BLOCKS:
                raise _bad("overallocation_limit", f"a ring of more than {_MAX_RING_BLOCKS} "
                                                   f"blocks can't be built, got "
                                                   f"{self.overallocation_limit!r}")
            for name in ("initial_size", "min_size", "a learned cycle"):
                # (a learned cycle is at least one aligned slot)
                size = getattr(self, name, _core.ALIGNMENT)
                grown = size + size * self.overallocation_limit
                if grown > _core.MAX_BLOCK_BYTES:
                    raise _bad("overallocation_limit",
                               f"{name}={size} overallocated by {self.overallocation_limit!r} "
                               f"is {grown:.4g} bytes, more than the {_core.MAX_BLOCK_BYTES} "
                               f"a workspace can allocate")

    @staticmethod
    def builder() -> "_ConfigurationBuilder":
        """ND4J-style builder: ``WorkspaceConfiguration.builder().initial_size(10).build()``."""
        return _ConfigurationBuilder()

    def replace(self, **changes: Any) -> "WorkspaceConfiguration":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)


class _ConfigurationBuilder:
    _names = {f.name for f in fields(WorkspaceConfiguration)}

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def __getattr__(self, name: str):
        if name not in self._names:
            raise AttributeError(f"WorkspaceConfiguration has no field {name!r}")

        def setter(value: Any) -> "_ConfigurationBuilder":
            self._values[name] = value
            return self

        return setter

    def build(self) -> WorkspaceConfiguration:
        return WorkspaceConfiguration(**self._values)


def _arena_args(config: WorkspaceConfiguration) -> tuple:
    return (config.initial_size, config.min_size, config.max_size, config.overallocation_limit,
            config.policy_allocation.value, config.policy_learning.value,
            config.policy_spill.value, config.policy_reset.value, config.policy_location.value,
            config.policy_exports.value, config.temp_file_path,
            config.cycles_before_initialization)


class Workspace(_arena.Arena):
    """A memory workspace (ND4J ``MemoryWorkspace``), used as a context manager.

    ``with ws:`` enters a cycle and leaving the block closes it; arrays allocated inside are
    valid until the cycle ends. Obtain workspaces from `ndws.workspace` or the thread's
    `WorkspaceManager`; a directly constructed one is not registered with the manager.

    Parameters
    ----------
    config : WorkspaceConfiguration, optional
        Defaults to the manager's default configuration.
    id : str
        The workspace id.
    """

    def __init__(self, config: WorkspaceConfiguration | None = None, id: str = DEFAULT_ID):
        if config is None:
            config = WorkspaceManager._default_configuration
        if not isinstance(config, WorkspaceConfiguration):
            raise TypeError(f"config: expected a WorkspaceConfiguration, got "
                            f"{type(config).__name__}")
        if not isinstance(id, str):
            raise TypeError(f"id: expected a str, got {type(id).__name__}")
        self._config = config
        self._configure(id, *_arena_args(config))

    @property
    def config(self) -> WorkspaceConfiguration:
        """The configuration the workspace was created with."""
        return self._config

    @property
    def workspace_type(self) -> WorkspaceType:
        """SCOPED or CIRCULAR."""
        return WorkspaceType.CIRCULAR if self.is_circular else WorkspaceType.SCOPED

    @property
    def current_offset(self) -> int:
        """Same as `primary_offset` (ND4J ``getCurrentOffset``)."""
        return self.primary_offset

    @property
    def host_offset(self) -> int:
        """Same as `primary_offset` (ND4J ``getHostOffset``)."""
        return self.primary_offset

    @property
    def device_offset(self) -> int:
        """Same as `primary_offset`: a CPU workspace has no device copy (ND4J
        ``getDeviceOffset``)."""
        return self.primary_offset

    # `with ws:` is Arena.__enter__/__exit__: it enters (or takes over the entry of
    # get_and_activate_workspace), and its exit ends exactly that scope (docs/workspaces.md,
    # "Scopes are lexical").

    def borrow(self) -> "_BorrowScope":
        """Borrow the workspace (make it current without a new cycle) until the returned
        scope is closed: ``with ws.borrow(): ...``. The workspace must be open."""
        return _BorrowScope(self._borrow_scope())

    def set_previous_workspace(self, previous: "Workspace | None") -> None:
        """Choose the workspace the next `close` of this one makes current (ND4J
        ``setPreviousWorkspace``, for non-nested open/close orders). It is only made current
        if it is still open then: a closed workspace never becomes current."""
        self._set_previous_workspace(previous)

    def statistics(self) -> dict[str, Any]:
        """The workspace's counters as a dict (byte counts in bytes)."""
        return {
            "id": self.id,
            "workspace_type": self.workspace_type.name,
            "current_size": self.current_size,
            "spilled_size": self.spilled_size,
            "pinned_size": self.pinned_size,
            "this_cycle_allocations": self.this_cycle_allocations,
            "last_cycle_allocations": self.last_cycle_allocations,
            "max_cycle_allocations": self.max_cycle_allocations,
            "number_of_external_allocations": self.number_of_external_allocations,
            "number_of_pinned_allocations": self.number_of_pinned_allocations,
            "initial_block_size": self.initial_block_size,
            "cycles_count": self.cycles_count,
            "generation": self.generation,
            "step_number": self.step_number,
            "is_scope_active": self.is_scope_active,
            "blocks_left_to_exports": self.blocks_left_to_exports,
            "bytes_left_to_exports": self.bytes_left_to_exports,
        }

    def __repr__(self) -> str:
        state = "open" if self.is_scope_active else "closed"
        return (f"<Workspace {self.id!r} {self.workspace_type.name} {state}, "
                f"current_size={self.current_size}, generation={self.generation}>")


class _BorrowScope:
    """Handle returned by `Workspace.borrow`; closing it ends the borrow."""

    def __init__(self, scope: Any):
        self._scope = scope

    def __enter__(self) -> Workspace:
        return self._scope.workspace

    def __exit__(self, *exc_info: Any) -> bool:
        self._end(lexical=True)
        return False

    def close(self) -> None:
        self._end(lexical=False)

    def _end(self, lexical: bool) -> None:
        if self._scope is not None:
            scope, self._scope = self._scope, None
            _core._end_scope_of(scope, lexical)


class DummyWorkspace:
    """A workspace that is no workspace (ND4J ``DummyWorkspace``): entering it scopes out of
    every workspace until it is closed. Returned by `scope_out_of_workspaces` and, under
    ``DebugMode.BYPASS_EVERYTHING``, by every manager lookup."""

    id = None
    generation = 0
    current_size = 0
    spilled_size = 0
    pinned_size = 0
    primary_offset = 0
    this_cycle_allocations = 0
    last_cycle_allocations = 0
    max_cycle_allocations = 0
    cycles_count = 0
    is_scope_active = False
    parent_workspace = None
    workspace_type = WorkspaceType.DUMMY

    def __init__(self) -> None:
        self._scopes: list[Any] = []       # scope-outs this object began, innermost last
        self._adopt_token: int | None = None

    def notify_scope_entered(self) -> "DummyWorkspace":
        self._scopes.append(_core._scope_out())
        return self

    def _mark_adoptable(self) -> None:
        # entered by the call that returned it: a `with` right after manages that entry
        self._adopt_token = _core._scope_ops()

    def close(self) -> None:
        self._end(lexical=False)

    def _end(self, lexical: bool) -> None:
        self._adopt_token = None
        if self._scopes:
            _core._end_scope_of(self._scopes.pop(), lexical)

    notify_scope_left = close

    def notify_scope_borrowed(self) -> None:
        return None

    def alloc(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("DummyWorkspace shouldn't be used for allocation")

    def initialize_workspace(self) -> None:
        pass

    def destroy(self) -> None:
        pass

    def toggle_workspace_use(self, is_enabled: bool) -> None:
        pass

    def __enter__(self) -> "DummyWorkspace":
        token, self._adopt_token = self._adopt_token, None
        if token is None or token != _core._scope_ops():
            self.notify_scope_entered()
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        self._end(lexical=True)
        return False

    def __repr__(self) -> str:
        return "<DummyWorkspace>"


def scope_out_of_workspaces() -> DummyWorkspace:
    """Leave every workspace until the returned object is closed: arrays created meanwhile are
    detached.

    Scoping out happens at the call, as in ND4J, so both ``with scope_out_of_workspaces():``
    and ``s = scope_out_of_workspaces(); ...; s.close()`` work. With no current workspace the
    result is an unentered `DummyWorkspace` (entering it changes nothing).
    """
    dummy = DummyWorkspace()
    if current_workspace() is not None:
        dummy.notify_scope_entered()
        dummy._mark_adoptable()
    return dummy


_DEFAULT_ENTRY = object()
# the debug mode's code -> member, without an Enum call per lookup (managers ask per scope)
_DEBUG_BY_CODE = {m.value: m for m in DebugMode}
_BYPASS = DebugMode.BYPASS_EVERYTHING.value


def _lookup_args(conf: Any, id: Any) -> tuple[Any, Any]:
    # ND4J's overloads: get...(id) and get...(conf, id) in one signature.
    if isinstance(conf, str):
        if id != DEFAULT_ID:
            raise TypeError("conf: expected a WorkspaceConfiguration, got a str (the id goes "
                            "second, as in ND4J)")
        return None, conf
    if conf is not None and not isinstance(conf, WorkspaceConfiguration):
        raise TypeError(f"conf: expected a WorkspaceConfiguration, got {type(conf).__name__}")
    if not isinstance(id, str):
        raise TypeError(f"id: expected a str, got {type(id).__name__}")
    return conf, id


def _binary_byte_format(n: int) -> str:
    # BinaryByteUnit.format(n, "#.00") as used by ND4J's statistics printout: 1024-based units
    # and DecimalFormat("#.00"), which drops the leading zero (".00 B").
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    count = float(n)
    i = 0
    while count >= 1024.0 and i < len(units) - 1:
        count /= 1024.0
        i += 1
    text = "%.2f" % count
    if text.startswith("0."):
        text = text[1:]
    return f"{text} {units[i]}"


class WorkspaceManager:
    """The calling thread's workspaces (ND4J ``MemoryWorkspaceManager``).

    Each Python thread has its own manager (`get_workspace_manager`), its own map of id to
    workspace and its own current workspace; a workspace can only be entered, closed or
    allocated in from the thread that created it. The default configuration and the debug
    mode are process-wide, as on ND4J's singleton.

    The manager wraps the thread's state in the core (its current workspace, scope stack and
    id -> workspace map), which the core creates for any thread that allocates.
    """

    __slots__ = ("_state",)
    _default_configuration = WorkspaceConfiguration()
    _uuid = itertools.count(1)

    def __init__(self, state: _arena.ThreadState) -> None:
        if not isinstance(state, _arena.ThreadState):
            raise TypeError(f"state: expected a ThreadState, got {type(state).__name__}")
        self._state = state

    @property
    def _workspaces(self) -> dict:
        return self._state._workspaces

    def _check_owner(self, action: str) -> None:
        self._state._check_owner(action)

    @property
    def thread_ident(self) -> int:
        """`threading.get_ident()` of the thread this manager belongs to."""
        return self._state.thread_ident

    # -- lookup and creation --------------------------------------------------------------------

    def get_workspace_for_current_thread(self, conf: WorkspaceConfiguration | str | None = None,
                                         id: str = DEFAULT_ID) -> Workspace | DummyWorkspace:
        """The workspace `id` of this thread, created with `conf` (or the default
        configuration) if it does not exist yet. An existing workspace is returned as it is:
        `conf` is ignored for it, as in ND4J. ``get_workspace_for_current_thread("ID")`` is the
        one-argument form."""
        conf, id = _lookup_args(conf, id)
        self._check_owner("create workspaces")
        if _core._get_debug_mode() == _BYPASS:
            return DummyWorkspace()
        ws = self._state._workspaces.get(id)
        if ws is None:
            ws = Workspace(conf or self._default_configuration, id)
            self._workspaces[id] = ws
        return ws

    def get_and_activate_workspace(self, conf: WorkspaceConfiguration | str | None = None,
                                   id: str = DEFAULT_ID) -> Workspace | DummyWorkspace:
        """`get_workspace_for_current_thread` then enter it. The entry happens now, as in ND4J;
        using the result directly in ``with`` manages that entry rather than entering again."""
        ws = self.get_workspace_for_current_thread(conf, id)
        ws.notify_scope_entered()
        ws._mark_adoptable()
        return ws

    def create_new_workspace(self, conf: WorkspaceConfiguration | None = None,
                             id: str = DEFAULT_ID) -> Workspace | DummyWorkspace:
        """A new workspace that replaces any map entry with the same id."""
        conf, id = _lookup_args(conf, id)
        self._check_owner("create workspaces")
        if self.debug_mode is DebugMode.BYPASS_EVERYTHING:
            return DummyWorkspace()
        ws = Workspace(conf or self._default_configuration, id)
        self._workspaces[id] = ws
        return ws

    def set_workspace_for_current_thread(self, ws: Workspace, id: str = DEFAULT_ID) -> None:
        """Register `ws` under `id` in this thread's map."""
        self._check_owner("register workspaces")
        if not isinstance(ws, Workspace):
            raise TypeError(f"ws: expected a Workspace, got {type(ws).__name__}")
        ws._assert_owner("registered")
        self._workspaces[id] = ws

    def check_if_workspace_exists(self, id: str) -> bool:
        """True when this thread's map holds `id`."""
        return id in self._workspaces

    def check_if_workspace_exists_and_active(self, id: str) -> bool:
        """True when `id` exists and its scope is open."""
        ws = self._workspaces.get(id)
        return ws is not None and ws.is_scope_active

    def any_workspace_active_for_current_thread(self) -> bool:
        """True when any of this thread's workspaces is open."""
        return any(ws.is_scope_active for ws in list(self._workspaces.values()))

    def get_all_workspaces_ids_for_current_thread(self) -> list[str]:
        """Ids of this thread's workspaces, in creation order."""
        return list(self._workspaces)

    def get_all_workspaces_for_current_thread(self) -> list[Workspace]:
        """This thread's workspaces, in creation order."""
        return list(self._workspaces.values())

    def current_workspace(self) -> Workspace | None:
        """This thread's current workspace (None when none)."""
        self._check_owner("read its current workspace")
        return current_workspace()

    # -- destruction ----------------------------------------------------------------------------

    def destroy_workspace(self, ws: Any = _DEFAULT_ENTRY) -> None:
        """Free `ws`'s memory and remove it from the map (None and dummies are ignored).

        Without an argument, only removes the default-id entry without freeing it (ND4J's
        no-argument ``destroyWorkspace()``).
        """
        self._check_owner("destroy workspaces")
        if ws is _DEFAULT_ENTRY:
            self._workspaces.pop(DEFAULT_ID, None)
            return
        if ws is None or isinstance(ws, DummyWorkspace):
            return
        if not isinstance(ws, Workspace):
            raise TypeError(f"ws: expected a Workspace, got {type(ws).__name__}")
        ws.destroy()
        self._workspaces.pop(ws.id, None)

    def destroy_all_workspaces_for_current_thread(self) -> None:
        """Destroy and remove every workspace of this thread; then, while periodic GC is
        active, run a collection (ND4J calls ``invokeGc`` here; with periodic GC off ndws
        never triggers one)."""
        self._check_owner("destroy workspaces")
        for ws in list(self._workspaces.values()):
            self.destroy_workspace(ws)
        if _gc.collector.is_periodic_gc_active():
            _gc.collector.invoke_gc()

    # -- settings -------------------------------------------------------------------------------

    @property
    def default_workspace_configuration(self) -> WorkspaceConfiguration:
        """Configuration for lookups that give none (process-wide)."""
        return WorkspaceManager._default_configuration

    def set_default_workspace_configuration(self, conf: WorkspaceConfiguration) -> None:
        """Configuration for lookups that give none (process-wide)."""
        if not isinstance(conf, WorkspaceConfiguration):
            raise TypeError(f"conf: expected a WorkspaceConfiguration, got {type(conf).__name__}")
        WorkspaceManager._default_configuration = conf

    @property
    def debug_mode(self) -> DebugMode:
        """Process-wide DebugMode (None sets DISABLED, as in ND4J)."""
        return _DEBUG_BY_CODE[_core._get_debug_mode()]

    @debug_mode.setter
    def debug_mode(self, mode: DebugMode | None) -> None:
        if mode is None:
            mode = DebugMode.DISABLED
        if not isinstance(mode, DebugMode):
            raise TypeError(f"debug_mode: expected a DebugMode, got {mode!r}")
        _core._set_debug_mode(mode.value)

    def set_debug_mode(self, mode: DebugMode | None) -> None:
        """Set the process-wide `debug_mode` (ND4J ``setDebugMode``)."""
        self.debug_mode = mode

    def get_uuid(self) -> str:
        """A process-wide unique name, ``"Workspace_<n>"``."""
        return f"Workspace_{next(WorkspaceManager._uuid)}"

    def scope_out_of_workspaces(self) -> DummyWorkspace:
        """Same as `ndws.scope_out_of_workspaces`."""
        self._check_owner("scope out")
        return scope_out_of_workspaces()

    # -- statistics -----------------------------------------------------------------------------

    def statistics(self) -> dict[str, dict[str, Any]]:
        """Every workspace's counters, keyed by id (the numbers the printout shows, and more)."""
        return {id: ws.statistics() for id, ws in list(self._workspaces.items())
                if isinstance(ws, Workspace)}

    def allocation_statistics_lines(self) -> list[str]:
        """The lines `print_allocation_statistics_for_current_thread` prints."""
        items = [(k, ws) for k, ws in list(self._workspaces.items()) if isinstance(ws, Workspace)]
        lines = ["Workspace statistics: ---------------------------------",
                 f"Number of workspaces in current thread: {len(items)}",
                 "Workspace name: Allocated / external (spilled) / external (pinned)"]
        for key, ws in items:
            current, spilled, pinned = ws.current_size, ws.spilled_size, ws.pinned_size
            lines.append("%-26s %8s / %8s / %8s (%11d / %11d / %11d)" % (
                f"{key}:", _binary_byte_format(current), _binary_byte_format(spilled),
                _binary_byte_format(pinned), current, spilled, pinned))
        return lines

    def print_allocation_statistics_for_current_thread(self, file: Any = None) -> None:
        """Print the workspace table in ND4J's layout (to `file`, a text stream with a
        ``write`` method; default stdout)."""
        if file is not None and not callable(getattr(file, "write", None)):
            raise TypeError(f"file: expected a text stream with a write() method, got "
                            f"{type(file).__name__} {file!r:.40}")
        print("\n".join(self.allocation_statistics_lines()), file=file or sys.stdout)

    def __repr__(self) -> str:
        return f"<WorkspaceManager of thread {self.thread_ident}: {list(self._workspaces)}>"


_managers = threading.local()


def get_workspace_manager() -> WorkspaceManager:
    """The calling thread's `WorkspaceManager` (the same object on every call in a thread)."""
    state = _core._thread_state()
    manager = getattr(_managers, "manager", None)
    if manager is None or manager._state is not state:
        manager = _managers.manager = WorkspaceManager(state)
    return manager


def workspace(id: str = DEFAULT_ID, conf: WorkspaceConfiguration | None = None
              ) -> Workspace | DummyWorkspace:
    """This thread's workspace `id` (created with `conf` when new); enter it with ``with``.

    ``with ndws.workspace("LOOP", conf) as ws:`` is ND4J's
    ``try (MemoryWorkspace ws = getAndActivateWorkspace(conf, "LOOP"))``.
    """
    if isinstance(id, WorkspaceConfiguration) and (conf is None or isinstance(conf, str)):
        id, conf = (conf or DEFAULT_ID), id
    return get_workspace_manager().get_workspace_for_current_thread(conf, id)


def destroy_all_workspaces_for_current_thread() -> None:
    """Destroy every workspace of the calling thread (see
    `WorkspaceManager.destroy_all_workspaces_for_current_thread`)."""
    get_workspace_manager().destroy_all_workspaces_for_current_thread()


#: The camelCase name the design card uses.
destroyAllWorkspacesForCurrentThread = destroy_all_workspaces_for_current_thread
