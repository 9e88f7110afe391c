"""ndws._arena: the mechanics of ND4J's workspaces.

The arena (bump allocation, cycles, generations, learning, spills and pinned blocks, the ring of
a circular workspace, MMAP files, blocks left to exports), the per-thread state with its stack
of lexical scopes, the policy codes and the errors. Below NDArray (ndws._core), above the memory
blocks (ndws._memory); ndws.workspace is its Python face. See docs/architecture.md.
"""

cimport cython
from cpython.ref cimport PyObject
from cpython.pystate cimport PyThreadState_GetDict
from libc.stdint cimport uint64_t
from cpython.pyport cimport PY_SSIZE_T_MAX
from libc.string cimport memset

from ndws._memory cimport (MemoryBlock, NDWS_SANITIZED, ndws_poison, ndws_unpoison,
                           allocate_block, map_file, map_temp_file, held, BLOCK_MAIN,
                           BLOCK_SPILL, BLOCK_PINNED, BLOCK_EXTERNAL, BLOCK_MMAP)

import collections
import logging
import os
import warnings

from ndws._memory import fill_file as _fill_file

cdef extern from *:
    unsigned long PyThread_get_thread_ident() noexcept

# process-wide: bumped by every ThreadState.__dealloc__ (see _tls.h)
cdef uint64_t _ts_epoch = 1


cdef const uint64_t* epoch_ptr() noexcept:
    return &_ts_epoch


cdef const int* debug_mode_ptr() noexcept:
    return &_g_debug_mode


#: ND4J's pointer to its documentation, kept verbatim in every scope-panic message.
SCOPE_PANIC_MSG = ("For more details, see the ND4J User Guide: "
                   "https://deeplearning4j.konduit.ai/nd4j/overview#workspaces-scope-panic")

_log = logging.getLogger("ndws")

cdef int _g_debug_mode = 0      # DebugMode is process-wide, as on ND4J's singleton manager


# ------------------------------------------------------------------------------------------------
# Errors

class WorkspaceError(RuntimeError):
    """Misuse of a workspace or of an array that belongs to one.

    Attributes
    ----------
    kind : str
        ``"leaked"``, ``"outdated"``, ``"overwritten"``, ``"destroyed"`` for stale arrays;
        otherwise a short word naming the misuse (``"full"``, ``"borrowed"``, ``"thread"``,
        ``"closed"``, ``"exported"``, ``"configuration"``, ``"mmap"``, ``"no_such_workspace"``).
    workspace_id : str or None
        Id of the workspace concerned.
    op : str or None
        The operation that found the problem.
    """

    def __init__(self, message, kind=None, workspace_id=None, op=None):
        RuntimeError.__init__(self, message)
        self.kind = kind
        self.workspace_id = workspace_id
        self.op = op


class NoSuchWorkspaceError(WorkspaceError, KeyError):
    """No workspace with the requested id exists in this thread (ND4J's
    ``Nd4jNoSuchWorkspaceException``)."""

    def __init__(self, workspace_id, op=None):
        WorkspaceError.__init__(
            self, f"No workspace with id [{workspace_id}] exists in this thread",
            "no_such_workspace", workspace_id, op)

    def __str__(self):
        # KeyError would quote the message; keep it readable.
        return self.args[0]


class ConfigurationError(WorkspaceError, ValueError):
    """An invalid workspace configuration. Both a `WorkspaceError` and a `ValueError`.

    Attributes
    ----------
    field : str
        The `WorkspaceConfiguration` field at fault.
    """

    def __init__(self, message, field, workspace_id=None):
        WorkspaceError.__init__(self, message, "configuration", workspace_id, None)
        self.field = field


class WorkspaceWarning(RuntimeWarning):
    """Something a workspace did to keep data safe that costs memory (e.g. a cycle ended while
    NumPy views of its memory were alive, so the old block was left to them)."""


# Their public home is the package (ndws.WorkspaceError, ...): tracebacks and pickles name it,
# not whichever internal module defines them.
for _cls in (WorkspaceError, NoSuchWorkspaceError, ConfigurationError, WorkspaceWarning):
    _cls.__module__ = "ndws"
del _cls


# ------------------------------------------------------------------------------------------------
# Per-thread state

_TS_KEY = "ndws._core.ThreadState"


cdef class ThreadState:
    """The calling thread's current workspace and id -> workspace map (wrapped by
    `ndws.workspace.WorkspaceManager`)."""

    def __cinit__(self):
        self._current = None
        self._scopes = []
        self._workspaces = {}
        self._tid = ndws_current_tid()
        self._ident = PyThread_get_thread_ident()

    def __dealloc__(self):
        # every module's cached pointer to a ThreadState is now suspect (see _tls.h)
        global _ts_epoch
        _ts_epoch += 1

    @property
    def thread_ident(self):
        """`threading.get_ident()` of the thread this state belongs to."""
        return self._ident

    def _check_owner(self, action):
        """Raise WorkspaceError unless called from the thread this state belongs to."""
        if ndws_current_tid() != self._tid:
            raise WorkspaceError(
                f"The workspace manager of thread {self._ident} can't {action} from thread "
                f"{PyThread_get_thread_ident()}: workspaces belong to one thread",
                "thread")
        return 0


cdef ThreadState tstate_slow():
    cdef PyObject* d = PyThreadState_GetDict()
    if d == NULL:
        raise RuntimeError("ndws: no Python thread state")
    state = (<dict>d).get(_TS_KEY)
    if state is None:
        state = ThreadState()
        (<dict>d)[_TS_KEY] = state
    return <ThreadState>state


def _thread_state():
    """This thread's ThreadState (its WorkspaceManager)."""
    return tstate()


def current_workspace():
    """The calling thread's current workspace, or None (ND4J's
    ``Nd4j.getMemoryManager().getCurrentWorkspace()``)."""
    return tstate()._current


# ------------------------------------------------------------------------------------------------
# Scopes (docs/workspaces.md, "Scopes are lexical")
#
# Every entry, nested re-entry, borrow and scope-out pushes a _Scope on its thread's stack; the
# current workspace is what the innermost scope says (None for a scope-out or an empty stack).
# ND4J keeps only a `previousWorkspace` pointer per workspace, which an out-of-order close or
# the re-entry of an open outer workspace (A, B, A) leaves pointing at a closed workspace, so
# the thread allocates "leaked" arrays forever after. Here:
#   * a workspace stays open while any of its entries is open (_depth > 0): re-entering an open
#     workspace that is not current still starts a new cycle (offset 0, generation + 1: the
#     outer arrays are outdated, as in ND4J), but its close only ends that entry;
#   * ending a scope makes current what was current when it began, if that is still open, and
#     otherwise whatever the innermost remaining scope says; so a closed or destroyed
#     workspace is never current;
#   * leaving a `with` ends the scope that `with` began (whatever inner code closed or left
#     open), never raises because of an inner scope, and first drops the scopes opened inside
#     it and left open (their workspaces stay open until closed, but stop being current).

cdef enum:
    _SC_ENTRY = 0       # an entry that opened the workspace or started a new cycle of it
    _SC_NEST = 1        # re-entry of the current open workspace (ND4J's tagScope)
    _SC_BORROW = 2
    _SC_OUT = 3         # scope-out: no workspace is current


@cython.final
cdef class _Scope:
    """One open scope of a thread (internal; see "Scopes" above)."""

    @property
    def workspace(self):
        """The workspace of the scope (None for a scope-out)."""
        return self.ws

    def __repr__(self):
        kind = ("entry", "nested entry", "borrow", "scope-out")[self.kind]
        what = "no workspace" if self.ws is None else f"[{self.ws._id}]"
        return f"<scope: {kind} of {what}{'' if self.live else ', ended'}>"


cdef _Scope _push_scope(ThreadState ts, Arena ws, int kind):
    cdef _Scope s = _Scope.__new__(_Scope)
    s.ws = ws
    s.kind = kind
    s.restore = ts._current
    s.live = True
    ts._scopes.append(s)
    ts._current = None if kind == _SC_OUT else ws
    ts._scope_ops += 1
    return s


cdef inline bint _usable(Arena w) noexcept:
    return w is None or w._is_open


cdef Arena _innermost(ThreadState ts):
    # What the innermost scope makes current. Every scope on the stack is of an open
    # workspace (_end_cycle and destroy purge a workspace's scopes when it closes).
    cdef list st = ts._scopes
    cdef _Scope s
    if not st:
        return None
    s = <_Scope>st[len(st) - 1]
    return None if s.kind == _SC_OUT else s.ws


cdef Py_ssize_t _scope_index(list st, _Scope s) noexcept:
    cdef Py_ssize_t i
    for i in range(len(st) - 1, -1, -1):
        if st[i] is s:
            return i
    return -1


cdef _Scope _innermost_of(ThreadState ts, Arena ws):
    cdef list st = ts._scopes
    cdef Py_ssize_t i
    for i in range(len(st) - 1, -1, -1):
        if (<_Scope>st[i]).ws is ws:
            return <_Scope>st[i]
    return None


cdef void _forget_scope(_Scope s) noexcept:
    # The scope leaves the stack without ending a cycle: a borrow ends, an entry keeps its
    # workspace open (a later close() of it ends that entry).
    s.live = False
    if s.kind == _SC_BORROW:
        s.ws._borrows -= 1


cdef int _purge(ThreadState ts, Arena ws) except -1:
    # Drop every scope of `ws` (it was closed or destroyed).
    cdef list st = ts._scopes
    cdef Py_ssize_t i
    for i in range(len(st) - 1, -1, -1):
        if (<_Scope>st[i]).ws is ws:
            _forget_scope(<_Scope>st[i])
            del st[i]
    return 0


cdef int _settle(ThreadState ts, _Scope ended, bint was_innermost) except -1:
    # Choose the current workspace after `ended` left the stack.
    ts._scope_ops += 1
    if was_innermost and _usable(ended.restore):
        ts._current = ended.restore
    elif was_innermost or not _usable(ts._current):
        ts._current = _innermost(ts)
    return 0


cdef int _end_scope(ThreadState ts, _Scope s, bint lexical) except -1:
    """End scope `s`: a `with` exit (`lexical`) first drops the scopes opened above it; an
    entry that leaves its workspace with no open entry ends the cycle. A scope that already
    ended (closed or destroyed by inner code) is left alone."""
    cdef list st = ts._scopes
    cdef Py_ssize_t i = _scope_index(st, s)
    cdef Arena ws = s.ws
    cdef bint ends_cycle
    if i < 0:
        return 0
    ends_cycle = s.kind == _SC_ENTRY and ws._depth == 1
    if ends_cycle and ws._p_reset == RESET_BLOCK_LEFT:
        # the one check that may refuse a close (policy_exports=FAIL): before anything changes
        ws._fail_if_exported("the end of a cycle")
    if lexical:
        while len(st) - 1 > i:
            _forget_scope(<_Scope>st.pop())
    cdef bint innermost = i == len(st) - 1
    del st[i]
    s.live = False
    try:
        if s.kind == _SC_ENTRY:
            ws._depth -= 1
            if ends_cycle:
                _purge(ts, ws)
                ws._end_cycle()     # may raise (learning can't allocate): it closes first
        elif s.kind == _SC_BORROW:
            ws._borrows -= 1
    finally:
        _settle(ts, s, innermost)
    return 0


def _scope_out():
    """Make no workspace current until the returned scope ends (`_end_scope_of`)."""
    return _push_scope(tstate(), None, _SC_OUT)


def _end_scope_of(_Scope s, bint lexical):
    """End a scope returned by `_scope_out` or `Workspace._borrow_scope`."""
    cdef ThreadState ts = tstate()
    if s.live and _scope_index(ts._scopes, s) < 0:
        raise WorkspaceError("A scope can only be ended by the thread that began it", "thread",
                             None if s.ws is None else s.ws._id)
    _end_scope(ts, s, lexical)


def _clear_scopes():
    """Forget every scope of the calling thread (test hygiene: the workspaces stay as they
    are, none is current afterwards)."""
    cdef ThreadState ts = tstate()
    while ts._scopes:
        _forget_scope(<_Scope>ts._scopes.pop())
    ts._current = None
    ts._scope_ops += 1


def _scope_ops():
    """Scope changes so far in the calling thread (ndws internal: adoption tokens)."""
    return tstate()._scope_ops


def _set_debug_mode(int mode):
    global _g_debug_mode
    _g_debug_mode = mode


def _get_debug_mode():
    return _g_debug_mode


cdef str open_ids(ThreadState ts):
    # Java's List.toString of the ids whose scope is active on this thread.
    ids = [str(k) for k, w in list(ts._workspaces.items())
           if isinstance(w, Arena) and (<Arena>w)._is_open]
    return "[" + ", ".join(ids) + "]"


cdef bint _ring_pin_overrun(MemoryBlock b, long long new_end) except -1:
    # Would writing up to virtual position `new_end` overwrite a pinned array of this ring
    # block? (An array at v is overwritten once the ring has written past v + ring_size.)
    cdef long long v
    if b.pinned is None:
        return False
    for v in b.pinned:
        if new_end > v + b.ring_size:
            return True
    return False


# ------------------------------------------------------------------------------------------------
# The arena

#: The largest memory block ndws asks for: its byte count plus the alignment slack, and every
#: offset into it, stay representable (malloc refuses far less; this only rules out overflow).
MAX_BLOCK_BYTES = PY_SSIZE_T_MAX // 2


cdef object _sized_os_error(object exc, object wid, str field, Py_ssize_t size):
    # an MMAP workspace's file could not be made: the error names the workspace and the field
    return OSError(exc.errno, f"Workspace [{wid}]: {field}={size} bytes for its memory-mapped "
                              f"file: {exc.strerror if exc.strerror else exc}")


cdef Py_ssize_t _grown(Py_ssize_t size, double fraction, object wid) except -1:
    # size + floor(size * fraction), as ND4J's overallocation, refusing results that would
    # overflow (ND4J's long arithmetic wraps to a negative size and then spills everything).
    cdef double grown = <double>size + <double>size * fraction
    if not grown <= <double>MAX_BLOCK_BYTES:
        raise MemoryError(f"Workspace [{wid}]: {size} bytes overallocated by {fraction!r} "
                          f"would exceed {MAX_BLOCK_BYTES} bytes")
    return size + <Py_ssize_t>(<double>size * fraction)


cdef class Arena:
    """Mechanics of one workspace, following ND4J's ``Nd4jWorkspace``/``CpuWorkspace``.

    Not used directly: `ndws.workspace.Workspace` subclasses it and adds the configuration
    object and the context-manager API.
    """

    def __cinit__(self):
        self._id = None
        self._owner_tid = ndws_current_tid()
        self._owner_ident = PyThread_get_thread_ident()
        self._spills = []
        self._pinned = collections.deque()
        self._steps_number = 1
        self._is_used = True
        self._main = None
        self._previous = None
        self._with_scopes = []
        self._last_block = None
        self._last_vpos = -1

    def _configure(self, id, Py_ssize_t initial_size, Py_ssize_t min_size, Py_ssize_t max_size,
                   double overallocation_limit, int policy_allocation, int policy_learning,
                   int policy_spill, int policy_reset, int policy_location, int policy_exports,
                   temp_file_path, long long cycles_before_initialization):
        """Construct as ND4J's workspace constructor does (sizes in bytes), from a
        configuration `WorkspaceConfiguration` has validated (the one place it is checked)."""
        if self._id is not None:
            raise WorkspaceError(f"Workspace [{self._id}] is already configured", "configuration",
                                 self._id)
        self._id = id
        self._initial_size = initial_size
        self._min_size = min_size
        self._max_size = max_size
        self._overalloc = overallocation_limit
        self._p_alloc = policy_allocation
        self._p_learning = policy_learning
        self._p_spill = policy_spill
        self._p_reset = policy_reset
        self._p_location = policy_location
        self._p_exports = policy_exports
        self._cycles_before_init = cycles_before_initialization
        self._current_size = initial_size
        self._circular = policy_reset == RESET_ENDOFBUFFER_REACHED
        if self._circular and policy_allocation == ALLOC_OVERALLOCATE:
            # the number of blocks in the ring (the configuration has made the limit >= 1)
            self._steps_number = <int>(overallocation_limit + 1)
        if policy_location == LOCATION_MMAP:
            self._prepare_mmap_file(temp_file_path)
        self._init_buffer()

    def _prepare_mmap_file(self, temp_file_path):
        cdef Py_ssize_t flen
        if temp_file_path is not None:
            path = os.fspath(temp_file_path)
            flen = os.path.getsize(path) if os.path.exists(path) else 0
            if flen == 0 or flen < self._initial_size:
                if self._initial_size > 0:
                    try:
                        _fill_file(path, self._initial_size)
                    except OSError as exc:
                        raise _sized_os_error(exc, self._id, "initial_size",
                                              self._initial_size) from None
                else:
                    raise WorkspaceError("Memory-mapped file should have positive length.",
                                         "mmap", self._id)
            else:
                # ND4J overwrites initialSize with the file's length; the workspace uses it all.
                self._initial_size = flen
                self._current_size = flen
            self._mmap_path = path
            self._mmap_temp = False
        else:
            # no file given: a temporary one (the configuration has made initial_size > 0)
            self._mmap_path = None
            self._mmap_temp = True

    # -- helpers --------------------------------------------------------------------------------

    cdef int _check_thread(self, str action, str subject="Workspace", str op=None) except -1:
        # `subject` names the workspace as the caller knows it (a kernel's "lstm_forward:
        # loop_workspace", with `op`)
        if ndws_current_tid() != self._owner_tid:
            raise WorkspaceError(
                f"{subject} [{self._id}] belongs to thread {self._owner_ident} and can't be "
                f"{action} from thread {PyThread_get_thread_ident()}",
                "thread", self._id, op)
        return 0

    cdef int _install_main(self, MemoryBlock block) except -1:
        ndws_poison(block.data, block.size)     # no array owns any of it yet
        self._main = block
        block.ring_size = self._current_size
        block.ring_written_end = 0
        self._lap_base = 0
        self._prev_lap_end = 0
        self._offset = 0
        return 0

    cdef int _init_buffer(self) except -1:
        # ND4J's init(): overallocate once, cap at max size, then allocate (or map) the buffer.
        cdef MemoryBlock block
        if self._current_size > 0 and self._p_location != LOCATION_MMAP:
            if not self._is_over and self._p_alloc == ALLOC_OVERALLOCATE and self._overalloc > 0:
                self._current_size = _grown(self._current_size, self._overalloc, self._id)
                self._is_over = True
            if self._max_size > 0 and self._current_size > self._max_size:
                self._current_size = self._max_size
        if self._p_location == LOCATION_RAM:
            if self._current_size > 0:
                self._is_init = True
                try:
                    block = allocate_block(self._current_size, True, BLOCK_MAIN)
                except MemoryError:
                    raise self._no_block() from None
                self._install_main(block)
        elif self._mmap_temp:
            try:
                block = map_temp_file(self._initial_size, None)
            except OSError as exc:
                raise _sized_os_error(exc, self._id, "initial_size", self._initial_size) \
                    from None
            self._install_main(block)
        else:
            self._install_main(map_file(self._mmap_path))
        return 0

    cdef object _no_block(self):
        # The error of a main block the machine can't give, naming the fields that sized it.
        # The workspace is left without a block (its allocations spill), as before it first
        # sized itself, rather than claiming a size it does not have.
        cdef Py_ssize_t wanted = self._current_size
        self._current_size = 0
        self._is_over = False
        learned = (f", the largest cycle {self._max_cycle} bytes"
                   if self._p_learning != LEARN_NONE and self._max_cycle else "")
        return MemoryError(f"Workspace [{self._id}]: can't allocate its block of {wanted} "
                           f"bytes (initial_size={self._initial_size}, min_size="
                           f"{self._min_size}, max_size={self._max_size}, "
                           f"overallocation_limit={self._overalloc!r}{learned}): not enough "
                           f"memory")

    cdef void _clear_external(self) noexcept:
        # "Freeing" spills drops the workspace's references; arrays still on them keep the
        # memory alive (in a scoped workspace they are stale and raise on use, so a sanitizer
        # build poisons what no export or reader holds).
        cdef MemoryBlock b
        if NDWS_SANITIZED and not self._circular:
            for b in self._spills:
                if not held(b):
                    ndws_poison(b.data, b.size)
        self._spills.clear()
        self._external_count = 0
        self._spilled_size = 0

    cdef void _clear_pinned(self, bint extended) noexcept:
        while len(self._pinned):
            entry = self._pinned[0]
            if (<long long>entry[0]) + 2 < self._steps_count or extended:
                self._pinned.popleft()
                self._pinned_count -= 1
                self._pinned_size -= <Py_ssize_t>entry[1]
            else:
                break

    cdef int _destroy_buffers(self, bint extended) except -1:
        # CpuWorkspace.destroyWorkspace(extended), minus the manager bookkeeping.
        self._current_size = 0
        self._offset = 0
        if extended:
            self._clear_external()
        self._clear_pinned(extended)
        self._main = None
        return 0

    cdef int _fail_if_exported(self, str when) except -1:
        # Called before a cycle's memory is about to be reused. FAIL policy: refuse, changing
        # nothing. Default: warn once per workspace (before any state change, so a warning
        # turned into an error leaves the workspace as it was).
        if self._main is None or self._main.exports == 0:
            return 0
        if self._p_exports == EXPORTS_FAIL:
            raise WorkspaceError(
                f"Workspace [{self._id}]: {self._main.exports} NumPy export(s) of this workspace's "
                f"memory are still alive at {when}, and policy_exports=FAIL forbids leaving the "
                f"block to them. Release the exports (del the NumPy arrays / memoryviews) or "
                f"take copies with .numpy() instead.",
                "exported", self._id)
        if not self._export_warned:
            fresh = ("a freshly mapped temporary file (it stays memory-mapped)"
                     if self._p_location == LOCATION_MMAP else "a fresh block")
            warnings.warn(
                f"Workspace [{self._id}]: a cycle ended while {self._main.exports} NumPy export(s) "
                f"of its memory were alive; the old block ({self._main.size} bytes) is left to "
                f"them and the workspace continues on {fresh}. Take copies with .numpy() "
                f"to avoid the extra allocation. (Shown once per workspace.)",
                WorkspaceWarning, stacklevel=2)
            self._export_warned = True
        return 0

    cdef int _reuse_main(self) except -1:
        # The main block's memory is about to be handed out again. If exports or another
        # thread's reads hold it, give it to them and continue on a fresh block of the same
        # size: mapped from a new temporary file for an MMAP workspace (beside its file when the
        # user chose one), so the workspace never silently moves into RAM.
        cdef MemoryBlock old = self._main
        cdef MemoryBlock fresh
        if old is None or not held(old):
            return 0
        if old.kind == BLOCK_MMAP:
            fresh = map_temp_file(old.size, None if self._mmap_temp
                                   else os.path.dirname(os.path.abspath(self._mmap_path)))
        else:
            fresh = allocate_block(old.size, True, BLOCK_MAIN)
        self._blocks_left += 1
        self._bytes_left += old.size
        ndws_poison(fresh.data, fresh.size)
        fresh.ring_size = old.ring_size
        self._main = fresh
        # the old block keeps its ring position: what it had overwritten stays overwritten,
        # the rest is never written again. The fresh block holds no earlier lap.
        self._lap_base = 0
        self._prev_lap_end = 0
        return 0

    cdef char* _alloc(self, Py_ssize_t nbytes, bint zero) except NULL:
        # Nd4jWorkspace.alloc with ALIGNMENT rounding. The new array's owner block and ring
        # position are left in _last_block / _last_vpos; the caller takes the block (and clears
        # the field, so the workspace never keeps a released block alive).
        cdef Py_ssize_t req = round_up(nbytes)
        cdef bint trimmer, spill_all
        cdef char* ptr
        cdef MemoryBlock blk
        # No thread check here: callers pass either the calling thread's current workspace
        # (only its owner can make it current) or an explicit target they have checked.
        if not self._is_used:
            self._disabled_counter += 1
            if self._disabled_counter % 10 == 0:
                _log.warning("Workspace was turned off, and wasn't enabled after %d allocations",
                             self._disabled_counter)
            blk = allocate_block(req, zero, BLOCK_EXTERNAL)
            self._last_kind = _LAST_OTHER
            self._last_block = blk
            self._last_vpos = -1
            return blk.data

        trimmer = self._trimmed_mode or (
            self._circular and self._initial_block_size > 0
            and req + self._cycle_alloc > self._initial_block_size)
        if trimmer and self._p_spill == SPILL_REALLOCATE and not self._trimmed_mode:
            self._trimmed_mode = True
            self._trimmed_step = self._steps_count
        spill_all = _g_debug_mode == DEBUG_SPILL_EVERYTHING

        if not trimmer and not spill_all and self._main is not None:
            if (self._circular and self._offset + req > self._current_size
                    and req <= self._current_size):
                # Ring wrap. (ND4J retries unconditionally and recurses forever when a single
                # request is larger than the whole ring; such a request spills here instead.)
                if self._main.exports > 0:
                    self._fail_if_exported("a circular wrap-around")
                    self._reuse_main()
                self._prev_lap_end = <Py_ssize_t>(self._main.ring_written_end - self._lap_base)
                if self._prev_lap_end < 0:
                    self._prev_lap_end = 0
                self._lap_base += self._main.ring_size
                self._offset = 0
                self._reset_planned = True
            if self._offset + req <= self._current_size:
                if self._circular and (
                        (self._main.exports > 0 and self._offset < self._prev_lap_end)
                        or (self._main.pins > 0 and _ring_pin_overrun(
                            self._main, self._lap_base + self._offset + req))):
                    # the head is about to write over the previous lap, whose arrays may be
                    # exported to NumPy, or over an array another thread is reading: leave
                    # that memory to them first
                    self._fail_if_exported("a circular overwrite")
                    self._reuse_main()
                ptr = take_main(self, req, nbytes)
                self._last_block = self._main
                if zero:
                    memset(ptr, 0, nbytes)
                if self._debug:
                    _log.info("Workspace [%s]: Allocating array of %d bytes, prevOffset: %d; "
                              "currentOffset: %d", self._id, req, self._last_prev_offset,
                              self._offset)
                return ptr

        if self._p_spill == SPILL_FAIL:
            raise WorkspaceError("Can't allocate memory: Workspace is full", "full", self._id)
        blk = allocate_block(req, zero, BLOCK_PINNED if trimmer else BLOCK_SPILL)
        ndws_poison(blk.data + nbytes, req - nbytes)
        self._cycle_alloc += req
        self._last_bytes = req
        self._last_block = blk
        self._last_vpos = -1
        if trimmer:
            self._pinned_size += req
            self._pinned_count += 1
            self._pinned.append((self._steps_count, req, blk))
            self._last_kind = _LAST_PINNED
        else:
            self._spilled_size += req
            self._external_count += 1
            self._spills.append(blk)
            self._last_kind = _LAST_SPILL
        return blk.data

    cdef void _rollback(self, char* ptr, Py_ssize_t nbytes) noexcept:
        # Give back an allocation of `nbytes` at `ptr` when the operation that asked for it
        # failed, so an error leaves the counters as they were. Allocations are given back
        # newest first (an op with two outputs discards both), so only the top of the bump
        # region, the newest spill or the newest pinned block can be given back.
        cdef Py_ssize_t req = round_up(nbytes)
        cdef MemoryBlock m = self._main
        cdef Py_ssize_t end
        if (self._last_kind == _LAST_MAIN and m is not None
                and ptr == m.data + self._last_prev_offset
                and self._offset == self._last_prev_offset + req):
            # the newest allocation: restore exactly (including the ring's write mark)
            self._offset = self._last_prev_offset
            self._cycle_alloc -= req
            m.ring_written_end = self._last_prev_written
            ndws_poison(ptr, req)
        elif (m is not None and m.data <= ptr < m.data + m.size
                and ptr + req == m.data + self._offset):
            self._offset -= req
            self._cycle_alloc -= req
            ndws_poison(ptr, req)
            end = self._lap_base + self._offset
            if self._circular and m.ring_written_end > end:
                m.ring_written_end = end
        elif len(self._spills) and (<MemoryBlock>self._spills[len(self._spills) - 1]).data == ptr:
            self._spills.pop()
            self._spilled_size -= req
            self._external_count -= 1
            self._cycle_alloc -= req
        elif (len(self._pinned)
                and (<MemoryBlock>self._pinned[len(self._pinned) - 1][2]).data == ptr):
            self._pinned.pop()
            self._pinned_size -= req
            self._pinned_count -= 1
            self._cycle_alloc -= req
        self._last_kind = _LAST_NONE
        self._last_block = None

    # -- lifecycle (ND4J §2.4–2.6, 2.8, 2.11) ---------------------------------------------------

    cdef int _check_mmap_file(self) except -1:
        # Someone else may have truncated the mapped file: touching a page past its end is
        # SIGBUS, so refuse before the cycle hands out any of it.
        cdef MemoryBlock m = self._main
        cdef Py_ssize_t flen
        if m is None or m.kind != BLOCK_MMAP:
            return 0
        try:
            flen = m.keep.size()
        except (OSError, ValueError) as exc:
            raise WorkspaceError(f"Workspace [{self._id}]: the memory-mapped file can't be "
                                 f"checked ({exc})", "mmap", self._id) from None
        if flen < m.size:
            raise WorkspaceError(
                f"Workspace [{self._id}]: its memory-mapped file is now {flen} bytes, shorter "
                f"than the {m.size} bytes mapped (truncated by another program?); using it "
                f"would crash the process. Destroy this workspace and create a new one.",
                "mmap", self._id)
        return 0

    def notify_scope_entered(self):
        """Enter this workspace (ND4J ``notifyScopeEntered``); returns self.

        Re-entering the current open workspace only counts the nesting. Any other entry starts
        a new cycle: the generation increases, a scoped workspace's offset goes back to 0, and
        spilled memory of the previous cycle is released. Every entry needs its own `close`
        (a `with` statement does it).
        """
        self._check_thread("entered")
        cdef ThreadState ts = tstate()
        self._check_mmap_file()
        self._adopt_pending = False
        if ts._current is self and self._is_open:
            self._last_scope = _push_scope(ts, self, _SC_NEST)
            return self
        cdef bint reuse = self._p_reset == RESET_BLOCK_LEFT and self._is_open
        if reuse:
            # Entering an open, non-current workspace (A -> B -> A) resets it, as in ND4J.
            # What may fail comes before the scope is pushed: a failed entry changes nothing.
            self._fail_if_exported("re-entry of an open workspace")
            self._reuse_main()
        cdef _Scope scope = _push_scope(ts, self, _SC_ENTRY)
        self._last_scope = scope
        self._previous = scope.restore
        if self._external_count > 0 and (self._p_reset == RESET_BLOCK_LEFT or self._reset_planned):
            self._clear_external()
            self._reset_planned = False
        self._open_cycle()
        return self

    cdef void _open_cycle(self) noexcept nogil:
        # The counters of a new cycle (notify_scope_entered; the compiled loops' cycles): one
        # more open entry, a scoped workspace's offset back to 0, a new generation (arrays of
        # earlier cycles are outdated from here on)
        self._depth += 1
        self._is_open = True
        if self._p_reset == RESET_BLOCK_LEFT:
            self._offset = 0
        self._cycle_alloc = 0
        self._disabled_counter = 0
        self._generation += 1

    def close(self):
        """Leave this workspace (ND4J ``close``/``notifyScopeLeft``).

        Ends this workspace's innermost scope: a borrow, one level of re-entry, or an entry.
        When the last open entry ends, so does the cycle: counters and learning are updated, a
        scoped workspace's memory becomes reusable and every array allocated in the cycle
        becomes stale. The workspace that was current when the scope began becomes current
        again if it is still open (otherwise the innermost remaining scope decides).
        """
        self._check_thread("closed")
        cdef ThreadState ts = tstate()
        self._adopt_pending = False
        cdef _Scope scope = _innermost_of(ts, self)
        if scope is not None:
            _end_scope(ts, scope, False)
            return
        if self._depth == 0:
            raise WorkspaceError(f"Workspace [{self._id}] can't be closed: it is not open",
                                 "closed", self._id)
        # an entry a `with` left open when it ended (see "Scopes"): no longer on the stack
        if self._depth == 1 and self._p_reset == RESET_BLOCK_LEFT:
            self._fail_if_exported("the end of a cycle")
        self._depth -= 1
        try:
            if self._depth == 0:
                self._end_cycle()
        finally:
            ts._scope_ops += 1
            if not _usable(ts._current):
                ts._current = _innermost(ts)

    cdef int _end_cycle(self) except -1:
        # ND4J's close(), steps 3-12, once the last open entry has ended (the export check of
        # step 3 ran before anything changed).
        if self._end_cycle_plain():
            return 0
        cdef bint scoped = self._p_reset == RESET_BLOCK_LEFT
        cdef MemoryBlock cycle_block = self._main
        self._is_open = False
        self._cycles_count += 1
        if self._cycles_count > 1 and (self._cycles_count - 1) % self._steps_number == 0:
            self._steps_count += 1
        if not self._is_used:
            _log.warning("Workspace was turned off, and wasn't ever turned on back again")
            self._is_used = True
        if self._cycle_alloc > self._max_cycle:
            self._max_cycle = self._cycle_alloc
        if self._p_learning != LEARN_NONE and self._max_cycle > 0:
            if self._external_count > 0 and (scoped or self._reset_planned):
                self._clear_external()
                self._reset_planned = False
            if ((self._p_learning == LEARN_OVER_TIME and self._cycles_before_init == self._cycles_count)
                    or (self._p_learning == LEARN_FIRST_LOOP and self._current_size == 0)):
                if _g_debug_mode != DEBUG_SPILL_EVERYTHING:
                    self.initialize_workspace()
            elif (self._current_size > 0 and self._cycle_alloc > 0
                  and self._p_spill == SPILL_REALLOCATE and not self._circular):
                if _g_debug_mode != DEBUG_SPILL_EVERYTHING:
                    self.initialize_workspace()
        if self._pinned_count > 0:
            self._clear_pinned(False)
        if self._trimmed_mode and self._trimmed_step + 2 < self._steps_count:
            self._initial_block_size = self._max_cycle
            self.initialize_workspace()
            self._trimmed_mode = False
            self._trimmed_step = 0
            self._offset = 0
        self._last_cycle_alloc = self._cycle_alloc
        self._disabled_counter = 0
        if scoped:
            if cycle_block is not None and held(cycle_block):
                if self._main is cycle_block:
                    self._reuse_main()
                else:
                    # learning replaced the block; the exports alone keep the old one alive
                    self._blocks_left += 1
                    self._bytes_left += cycle_block.size
            elif self._main is not None:
                ndws_poison(self._main.data, self._main.size)   # every array of it is stale
            self._offset = 0
        elif self._circular and self._current_size > 0:
            # each cycle occupies whole blocks of the ring
            diff = self._initial_block_size - self._cycle_alloc
            if diff > 0 and not self._trimmed_mode and self._offset > 0:
                self._offset += diff
        self._cycle_alloc = 0
        return 0

    cdef bint _end_cycle_plain(self) noexcept nogil:
        # The common end of a scoped cycle, in C alone (_end_cycle runs it first; the compiled
        # loops run it without the GIL): what _end_cycle does when there is no spill or pinned
        # block to release, no learning or growing to do, no block held by exports or another
        # thread's read, and the workspace is on. Otherwise False, with nothing changed.
        cdef long long cycles = self._cycles_count + 1
        cdef Py_ssize_t mx = self._max_cycle
        if self._cycle_alloc > mx:
            mx = self._cycle_alloc
        if (self._p_reset != RESET_BLOCK_LEFT or not self._is_used or self._external_count > 0
                or self._pinned_count > 0 or self._trimmed_mode):
            return False
        if self._main is not None and (self._main.exports > 0 or self._main.pins > 0):
            return False
        if self._p_learning != LEARN_NONE and mx > 0:
            if ((self._p_learning == LEARN_OVER_TIME and self._cycles_before_init == cycles)
                    or (self._p_learning == LEARN_FIRST_LOOP and self._current_size == 0)):
                return False
            if (self._current_size > 0 and self._cycle_alloc > 0
                    and self._p_spill == SPILL_REALLOCATE and not self._reinit_is_noop(mx)):
                return False
        self._is_open = False
        self._cycles_count = cycles
        if cycles > 1 and (cycles - 1) % self._steps_number == 0:
            self._steps_count += 1
        self._max_cycle = mx
        self._last_cycle_alloc = self._cycle_alloc
        self._disabled_counter = 0
        if self._main is not None:
            ndws_poison(self._main.data, self._main.size)   # every array of it is stale
        self._offset = 0
        self._cycle_alloc = 0
        return True

    cdef bint _reinit_is_noop(self, Py_ssize_t max_cycle) noexcept nogil:
        # Whether initialize_workspace() would leave a scoped workspace as it is, with
        # `max_cycle` as its largest cycle: not outgrown (or capped by max_size), already
        # initialised (or not learning)
        if ((self._current_size < max_cycle or self._current_size < self._cycle_alloc)
                and self._p_spill == SPILL_REALLOCATE
                and (self._max_size == 0 or max_cycle < self._max_size)):
            return False
        return self._is_init or self._p_learning == LEARN_NONE

    # -- cycles of a compiled loop (see _arena.pxd) ---------------------------------------------
    #
    # A time loop of ndws.nn opens a cycle of its loop workspace at every step, as DL4J's
    # `notifyScopeEntered(RNN_FF_LOOP_WORKING_MEM)` around each step does, without a Python call
    # per step. A step's cycle does what `with ws:` around the step's allocations would, in
    # the same order, so every counter, learned size, spill and generation is the same; it
    # pushes no scope (nothing runs in between that could allocate through the current
    # workspace; the thread's scope count moves as the `with` blocks' would, at the end). The
    # common step runs the same C as NDArray creation and every `with` (_open_cycle,
    # plain_bump / take_main, _end_cycle_plain); the rest takes the GIL and runs the general
    # code (_clear_external, _alloc, _end_cycle).

    cdef int _loop_begin(self, Py_ssize_t per_cycle, str op) except -1:
        # `op` is the kernel, and the workspace its `loop_workspace` argument: every refusal
        # names both
        cdef ThreadState ts = tstate()
        cdef str arg = f"{op}: loop_workspace"
        self._check_thread("entered", arg, op)
        if self._in_loop:
            raise WorkspaceError(f"{arg} [{self._id}] is already in use by a running loop",
                                 "open", self._id, op)
        if self._is_open:
            raise WorkspaceError(
                f"{arg} [{self._id}] is open; the loop opens and closes a cycle of it at every "
                f"step (which would reset what the open cycle holds), so it must be closed when "
                f"the loop starts", "open", self._id, op)
        if self._circular:
            raise WorkspaceError(
                f"{arg} [{self._id}] is circular (ResetPolicy.ENDOFBUFFER_REACHED); a loop's "
                f"per-step working memory needs a scoped one (ResetPolicy.BLOCK_LEFT)",
                "configuration", self._id, op)
        if (self._p_spill == SPILL_FAIL and self._is_used and per_cycle > 0
                and (self._main is None or round_up(per_cycle) > self._current_size
                     or ndws_debug() == DEBUG_SPILL_EVERYTHING)):
            # the first step's allocation would fail: refuse before anything is written
            # (DL4J's message, after the argument's name)
            raise WorkspaceError(f"{arg} [{self._id}]: Can't allocate memory: Workspace is full",
                                 "full", self._id, op)
        self._check_mmap_file()
        self._adopt_pending = False
        self._previous = ts._current        # what each step's entry would record
        self._in_loop = True
        self._loop_cycles = 0
        return 0

    cdef int _loop_enter(self) except -1 nogil:
        if self._external_count > 0 or self._p_location == LOCATION_MMAP:
            with gil:
                self._check_mmap_file()
                if self._external_count > 0:
                    # the last cycle's spills are released at this entry (notify_scope_entered)
                    self._clear_external()
                    self._reset_planned = False
        self._open_cycle()
        self._loop_cycles += 1
        return 0

    cdef char* _loop_alloc(self, Py_ssize_t nbytes) except NULL nogil:
        cdef Py_ssize_t req = round_up(nbytes)
        cdef char* ptr
        if plain_bump(self, req):
            return take_main(self, req, nbytes)
        with gil:
            ptr = self._alloc(nbytes, False)
            if self._last_kind == _LAST_OTHER:
                # a switched-off workspace's block: only the new array would hold it, and a
                # loop makes none, so it lives until the step ends (freeing it here handed the
                # step freed memory)
                if self._loop_held is None:
                    self._loop_held = []
                self._loop_held.append(self._last_block)
            self._last_block = None     # a spill stays alive in _spills until the next entry
            return ptr

    cdef int _loop_leave(self) except -1 nogil:
        if self._loop_held is not None:
            with gil:
                self._loop_held = None      # the step's blocks of a switched-off workspace
        if self._depth == 1:
            self._depth = 0
            if self._end_cycle_plain():
                return 0
            self._depth = 1
        with gil:
            self._fail_if_exported("the end of a cycle")
            self._depth -= 1
            if self._depth == 0:
                self._end_cycle()
        return 0

    cdef Py_ssize_t _loop_repeat(self, Py_ssize_t k, const char* p1, Py_ssize_t n1,
                                 Py_ssize_t n2) noexcept nogil:
        # Up to k more steps of the loop, each ending the open cycle and opening the next with
        # the same allocations (n1 bytes, then n2 unless 0) exactly as _loop_leave, _loop_enter
        # and _loop_alloc do on their plain paths, while all three would take them: the open
        # cycle's allocations came from the start of the main block (p1), and each new cycle
        # hands out those same bytes again. A kernel then runs those steps at once in the bytes
        # it already has (ndws.nn's multi-threaded time loops: docs/architecture.md, "The time
        # loop and the workspace"); every counter, generation and learned size is what the
        # steps one by one would give. Returns how many steps were added (0 .. k, 0 when the
        # workspace is not in that steady state); a cycle is open at the end, with the bytes.
        cdef Py_ssize_t r1 = round_up(n1), r2 = round_up(n2) if n2 > 0 else 0
        cdef Py_ssize_t m = 0
        if (self._p_location == LOCATION_MMAP or self._loop_held is not None or self._depth != 1
                or self._main is None or <const char*>self._main.data != p1
                or self._offset != r1 + r2 or self._cycle_alloc != r1 + r2):
            return 0
        while m < k:
            # the next cycle's plain allocations: the offset goes back to 0 and they take
            # r1 + r2 bytes again, which is the offset now (no spill: its leave checks that)
            if not plain_bump(self, 0):
                break
            self._depth = 0
            if not self._end_cycle_plain():
                self._depth = 1
                break
            self._open_cycle()
            self._loop_cycles += 1
            take_main(self, r1, n1)
            if r2 > 0:
                take_main(self, r2, n2)
            m += 1
        return m

    cdef int _loop_end(self, bint failed) except -1:
        cdef ThreadState ts = tstate()
        self._in_loop = False
        self._last_kind = _LAST_NONE
        self._last_block = None
        self._loop_held = None
        ts._scope_ops += 2 * self._loop_cycles      # each step's entry and end
        if failed and self._is_open and self._depth > 0:
            # an error inside a step: end its cycle as its `with` would have
            self._depth -= 1
            if self._depth == 0:
                self._end_cycle()
        return 0

    def notify_scope_left(self):
        """Same as `close` (ND4J ``notifyScopeLeft``); returns self."""
        self.close()
        return self

    def notify_scope_borrowed(self):
        """Make this open workspace current without starting a cycle (ND4J
        ``notifyScopeBorrowed``).

        `close` ends the borrow and restores the workspace that was current before it.
        Borrowing a workspace that is not open raises (kind ``"closed"``): its arrays would be
        born stale.
        """
        self._check_thread("borrowed")
        cdef ThreadState ts = tstate()
        if not self._is_open:
            raise WorkspaceError(f"Workspace [{self._id}] can't be borrowed: it is not open",
                                 "closed", self._id)
        if self._borrows > 0:
            raise WorkspaceError(f"Workspace [{self._id}]: Can't borrow from borrowed workspace",
                                 "borrowed", self._id)
        self._adopt_pending = False
        self._last_scope = _push_scope(ts, self, _SC_BORROW)
        self._borrows += 1
        return self

    def _borrow_scope(self):
        """Borrow (`notify_scope_borrowed`) and return the scope, for `Workspace.borrow`."""
        self.notify_scope_borrowed()
        return self._last_scope

    def tag_out_of_scope_use(self):
        """Count one more scope of this open workspace that one `close` ends (ND4J
        ``tagOutOfScopeUse``); makes it current; returns self."""
        self._check_thread("scoped out")
        cdef ThreadState ts = tstate()
        if not self._is_open:
            raise WorkspaceError(f"Workspace [{self._id}] can't be tagged: it is not open",
                                 "closed", self._id)
        self._last_scope = _push_scope(ts, self, _SC_NEST)
        return self

    def __enter__(self):
        # get_and_activate_workspace() has already entered: `with` then manages that entry.
        if not self._take_adoption():
            self.notify_scope_entered()
        self._with_scopes.append(self._last_scope)
        return self

    def __exit__(self, *exc_info):
        self._check_thread("closed")
        if self._with_scopes:
            _end_scope(tstate(), <_Scope>self._with_scopes.pop(), True)
        return False

    def initialize_workspace(self):
        """Size the workspace from what it has learned (ND4J ``initializeWorkspace``)."""
        self._check_thread("initialized")
        if ((self._current_size < self._max_cycle or self._current_size < self._cycle_alloc)
                and self._p_spill == SPILL_REALLOCATE
                and (self._max_size == 0 or self._max_cycle < self._max_size)):
            if not self._circular:
                self._destroy_buffers(True)
                self._is_init = False
        if self._trimmed_mode and self._trimmed_step + 2 < self._steps_count:
            self._destroy_buffers(False)
            self._is_init = False
            self._is_over = False
        if not self._is_init and self._p_learning != LEARN_NONE:
            if self._max_size > 0:
                self._current_size = min(self._max_cycle, self._max_size)
            else:
                self._current_size = self._max_cycle
            if self._circular:
                # +30% against reallocations; ND4J then adds 8 - size % 8, which adds a full 8
                # to sizes that are already multiples of 8.
                if not <double>self._current_size * 1.3 <= <double>MAX_BLOCK_BYTES:
                    raise MemoryError(f"Workspace [{self._id}]: a ring of "
                                      f"{self._current_size} bytes * 1.3 would exceed "
                                      f"{MAX_BLOCK_BYTES} bytes")
                self._current_size = <Py_ssize_t>(<double>self._current_size * 1.3)
                self._current_size += 8 - (self._current_size % 8)
                self._max_cycle = self._current_size
            self._initial_block_size = self._current_size
            if not self._is_over:
                if (self._p_alloc == ALLOC_OVERALLOCATE and self._overalloc > 0
                        and self._current_size > 0):
                    self._current_size = _grown(self._current_size, self._overalloc, self._id)
                    self._is_over = True
            if self._min_size > 0 and self._current_size < self._min_size:
                self._current_size = self._min_size
            if self._external_count > 0 and (self._p_reset == RESET_BLOCK_LEFT or self._reset_planned):
                self._clear_external()
                self._reset_planned = False
            self._init_buffer()

    def destroy(self):
        """Release the workspace's memory (ND4J ``destroyWorkspace``).

        Counters and learned sizes are kept, as in ND4J; the size becomes 0, so a destroyed
        workspace that is entered again spills everything. Unlike ND4J, its open scopes end
        (without a cycle end): a destroyed workspace is never current, and the workspace that
        was current before it (if still open) becomes current again. Arrays allocated before
        the destruction keep their memory alive but raise ``WorkspaceError`` (kind
        ``destroyed``) on every use.
        """
        self._check_thread("destroyed")
        cdef ThreadState ts = tstate()
        # a destroyed workspace is never current: its scopes end here (without a cycle end),
        # and a `with` over it later finds nothing to close
        _purge(ts, self)
        self._depth = 0
        self._is_open = False
        self._borrows = 0
        ts._scope_ops += 1
        if not _usable(ts._current):
            ts._current = _innermost(ts)
        self._destroy_buffers(True)
        self._epoch += 1

    def toggle_workspace_use(self, bint is_enabled):
        """Switch the workspace off (allocations go to plain memory) or back on."""
        self._is_used = is_enabled

    def enable_debug(self, bint really_enable):
        """Log every allocation at INFO level (ND4J ``enableDebug``)."""
        self._debug = really_enable

    def _assert_owner(self, action):
        """Raise WorkspaceError unless called from the workspace's own thread."""
        self._check_thread(action)

    def _mark_adoptable(self):
        # get_and_activate_workspace() has just entered; a `with` on the result manages that
        # entry only if no scope change happened in this thread since (see _take_adoption)
        self._adopt_pending = True
        self._adopt_token = tstate()._scope_ops

    def _take_adoption(self):
        cdef bint pending = self._adopt_pending and tstate()._scope_ops == self._adopt_token
        self._adopt_pending = False
        return pending

    def _set_previous_workspace(self, Arena previous):
        cdef _Scope scope
        if previous is not None:
            previous._check_thread("made a parent")
        self._previous = previous
        scope = _innermost_of(tstate(), self)
        if scope is not None:
            scope.restore = previous

    # -- counters (ND4J §2.10) ------------------------------------------------------------------

    @property
    def id(self):
        """The workspace id."""
        return self._id

    @property
    def this_cycle_allocations(self):
        """Bytes allocated so far in the open cycle (aligned; spills and pinned included)."""
        return self._cycle_alloc

    @property
    def last_cycle_allocations(self):
        """Bytes allocated in the last closed cycle."""
        return self._last_cycle_alloc

    @property
    def max_cycle_allocations(self):
        """Largest cycle so far (for circular workspaces, the padded block size once learned)."""
        return self._max_cycle

    @property
    def current_size(self):
        """Usable bytes of the main buffer (0 before learning)."""
        return self._current_size

    @property
    def primary_offset(self):
        """Current offset into the main buffer (also ND4J's current/host offset)."""
        return self._offset

    @property
    def spilled_size(self):
        """Bytes in spilled (external) allocations of this cycle."""
        return self._spilled_size

    @property
    def pinned_size(self):
        """Bytes in pinned allocations (circular workspaces)."""
        return self._pinned_size

    @property
    def number_of_external_allocations(self):
        """Number of spilled allocations held."""
        return self._external_count

    @property
    def number_of_pinned_allocations(self):
        """Number of pinned allocations held."""
        return self._pinned_count

    @property
    def initial_block_size(self):
        """Bytes of one ring block (circular workspaces)."""
        return self._initial_block_size

    @property
    def step_number(self):
        """Full passes over the ring (ND4J ``getStepNumber``)."""
        return self._steps_count

    @property
    def generation(self):
        """Number of times a new cycle was entered (ND4J ``getGenerationId``)."""
        return self._generation

    @property
    def cycles_count(self):
        """Number of closed cycles."""
        return self._cycles_count

    @property
    def is_scope_active(self):
        """True while the workspace is open."""
        return self._is_open

    @property
    def is_borrowed(self):
        """True while the workspace is borrowed."""
        return self._borrows > 0

    @property
    def parent_workspace(self):
        """The workspace that was current when this one was entered (None at top level)."""
        return self._previous

    @property
    def is_initialized(self):
        """True once the main buffer has been allocated by learning or construction."""
        return self._is_init

    @property
    def blocks_left_to_exports(self):
        """Main blocks given up to live NumPy exports at the end of a cycle."""
        return self._blocks_left

    @property
    def bytes_left_to_exports(self):
        """Bytes of the blocks in `blocks_left_to_exports`."""
        return self._bytes_left

    @property
    def thread_ident(self):
        """`threading.get_ident()` of the thread the workspace belongs to."""
        return self._owner_ident

    @property
    def is_circular(self):
        """True for a circular workspace (ResetPolicy.ENDOFBUFFER_REACHED)."""
        return self._circular




cdef long long _steps(Arena ws, long long steps, const Py_ssize_t* sizes, Py_ssize_t n,
                      bint repeat) except -1 nogil:
    # the steps, as a kernel's loop runs them; with `repeat`, as ndws.nn's multi-threaded
    # loops do: after a step's allocations, as many more steps as _loop_repeat adds run in
    # those bytes. Returns how many times the loop entered a step (windows of steps)
    cdef long long t = 0, m, windows = 0
    cdef Py_ssize_t i, j
    cdef char* p[16]
    while t < steps:
        ws._loop_enter()
        windows += 1
        for i in range(n):
            p[i] = ws._loop_alloc(sizes[i])
            memset(p[i], 0x5a + i, sizes[i])     # the memory is the step's to write
        for i in range(n):
            # each allocation still holds what the step wrote: one released early would be
            # handed out again (malloc reuses a freed block of the same size) and overwritten
            for j in range(sizes[i]):
                if p[i][j] != <char>(0x5a + i):
                    with gil:
                        raise AssertionError(f"step {t}: allocation {i} was overwritten by a "
                                             f"later one of the same step")
        m = 0
        if repeat and 0 < n <= 2:
            m = ws._loop_repeat(steps - t - 1, p[0], sizes[0], sizes[1] if n == 2 else 0)
            # the steps added run in the same bytes, which stay the open cycle's
            for i in range(n):
                memset(p[i], 0x3c + i, sizes[i])
        ws._loop_leave()
        t += m + 1
    return windows


def _run_loop(Arena ws, long long steps, sizes, str op="loop", bint repeat=False):
    """Run `steps` cycles of `ws` as a compiled loop does, without the GIL, allocating `sizes`
    (bytes, in order) in each (tests compare the statistics with a loop of `with ws:`); with
    `repeat` (at most two sizes), letting _loop_repeat add steps to each. Returns how many
    times the loop entered a step itself."""
    cdef Py_ssize_t n = len(sizes), i, total = 0
    cdef Py_ssize_t buf[16]
    cdef long long windows
    if n > 16:
        raise ValueError("at most 16 allocations per step")
    for i in range(n):
        buf[i] = sizes[i]
        total += round_up(buf[i])
    ws._loop_begin(total, op)
    try:
        with nogil:
            windows = _steps(ws, steps, buf, n, repeat)
    except BaseException:
        ws._loop_end(True)
        raise
    ws._loop_end(False)
    return windows


ndws_share(&_ts_epoch, &_g_debug_mode)
