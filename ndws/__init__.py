"""ndws: ND-arrays in memory workspaces.

Arrays live in *workspaces*, arenas a cyclic workload reuses every iteration instead of asking
the allocator (and the garbage collector) again: ND4J's workspace model, with every stale array
caught. See ``docs/workspaces.md`` for the tutorial and ``docs/porting-from-dl4j.md`` for the
ND4J name table.
"""
from ndws import _core
from ndws import _ufuncs  # noqa: F401  (fills NDArray's operator table: x + y, x.sum(), x @ y)
from ndws._config import __version__, show_config
from ndws._core import (
    ALIGNMENT,
    SCOPE_PANIC_MSG,
    ConfigurationError,
    NDArray,
    NoSuchWorkspaceError,
    WorkspaceError,
    WorkspaceWarning,
    from_numpy,
)
from ndws._creation import (
    arange,
    array,
    asarray,
    empty,
    empty_like,
    eye,
    from_dlpack,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from ndws._threads import get_num_threads, num_threads, set_num_threads
from ndws import ops as _ops
from ndws.ops import *  # noqa: F403  (the NumPy-named math surface; see ndws.ops.__all__)
from ndws.memory import MemoryManager, get_memory_manager
from ndws.workspace import (
    DEFAULT_ID,
    AllocationPolicy,
    DebugMode,
    DummyWorkspace,
    ExportPolicy,
    LearningPolicy,
    LocationPolicy,
    MirroringPolicy,
    ResetPolicy,
    SpillPolicy,
    Workspace,
    WorkspaceConfiguration,
    WorkspaceManager,
    WorkspaceMode,
    WorkspaceType,
    current_workspace,
    destroyAllWorkspacesForCurrentThread,
    destroy_all_workspaces_for_current_thread,
    get_workspace_manager,
    scope_out_of_workspaces,
    workspace,
)
from ndws import random

__all__ = [
    "ALIGNMENT", "SCOPE_PANIC_MSG", "ConfigurationError", "NDArray", "NoSuchWorkspaceError",
    "WorkspaceError", "WorkspaceWarning", "__version__", "arange", "array", "asarray", "empty",
    "empty_like", "eye", "from_dlpack", "from_numpy", "full", "full_like", "get_num_threads", "linspace",
    "num_threads", "ones", "ones_like", "random", "set_num_threads", "show_config", "zeros",
    "zeros_like",
    "MemoryManager", "get_memory_manager",
    "DEFAULT_ID", "AllocationPolicy", "DebugMode", "DummyWorkspace", "ExportPolicy",
    "LearningPolicy", "LocationPolicy", "MirroringPolicy", "ResetPolicy", "SpillPolicy",
    "Workspace", "WorkspaceConfiguration", "WorkspaceManager", "WorkspaceMode", "WorkspaceType",
    "current_workspace", "destroyAllWorkspacesForCurrentThread",
    "destroy_all_workspaces_for_current_thread", "get_workspace_manager",
    "scope_out_of_workspaces", "workspace",
] + list(_ops.__all__)
