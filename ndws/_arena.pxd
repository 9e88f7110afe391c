# ndws._arena: the workspace mechanics (the arena, the per-thread state and its scope stack, the
# policies, the errors), between the memory blocks (ndws._memory) and NDArray (ndws._core).
# See docs/architecture.md.
from cpython.ref cimport PyObject
from libc.stdint cimport uint64_t
from ndws._memory cimport MemoryBlock, NDWS_ALIGNMENT, ndws_unpoison

cdef extern from "_tls.h":
    void ndws_share(const uint64_t* epoch, const int* debug_mode) noexcept
    uint64_t ndws_current_tid() noexcept
    PyObject* ndws_tls_get() noexcept
    void ndws_tls_set(PyObject* o) noexcept
    int ndws_debug() noexcept nogil

# The workspace policies, declared once. C code uses the member names as constants; Python sees
# each as an IntEnum of ndws._arena, and ndws.workspace re-exports them under DL4J's member
# names (the prefix dropped: SpillPolicy.FAIL and ExportPolicy.FAIL can't share a C name).
cpdef enum AllocationPolicyCode:
    ALLOC_STRICT = 0
    ALLOC_OVERALLOCATE = 1

cpdef enum LearningPolicyCode:
    LEARN_FIRST_LOOP = 0
    LEARN_OVER_TIME = 1
    LEARN_NONE = 2

cpdef enum SpillPolicyCode:
    SPILL_EXTERNAL = 0
    SPILL_FAIL = 1
    SPILL_REALLOCATE = 2

cpdef enum ResetPolicyCode:
    RESET_BLOCK_LEFT = 0
    RESET_ENDOFBUFFER_REACHED = 1

cpdef enum LocationPolicyCode:
    LOCATION_RAM = 0
    LOCATION_MMAP = 1

cpdef enum ExportPolicyCode:
    EXPORTS_FRESH_BLOCK = 0
    EXPORTS_FAIL = 1

cpdef enum DebugModeCode:
    DEBUG_DISABLED = 0
    DEBUG_SPILL_EVERYTHING = 1
    DEBUG_BYPASS_EVERYTHING = 2

# last-allocation kinds, for rollback
cdef enum:
    _LAST_NONE = 0
    _LAST_MAIN = 1
    _LAST_SPILL = 2
    _LAST_PINNED = 3
    _LAST_OTHER = 4

cdef class _Scope:
    # One open scope of a thread (see "Scopes" in _arena.pyx): an entry, a nested re-entry, a
    # borrow or a scope-out, and the workspace that was current when it began.
    cdef Arena ws               # None for a scope-out
    cdef Arena restore          # made current again when this scope ends as the innermost one
    cdef int kind
    cdef bint live              # still on its thread's stack

cdef class ThreadState:
    # Per Python thread: the current workspace, the stack of open scopes that decides it, and
    # the id -> workspace map (ND4J keeps the pointer and the map in thread-locals). The Python
    # WorkspaceManager wraps this.
    cdef Arena _current         # always None or an open workspace of this thread
    cdef list _scopes           # _Scope objects, innermost last
    cdef readonly dict _workspaces
    cdef unsigned long long _scope_ops    # counts scope changes (enter/close/borrow/scope-out)
    cdef uint64_t _tid
    cdef unsigned long _ident
    cdef int _nthreads      # `ndws.num_threads(n)` override for this thread; 0 = the pool size

cdef class Arena:
    # The mechanics of one ND4J workspace: bump allocation, cycles, generations, learning,
    # spill/pinned lists, circular ring. The Python `Workspace` class subclasses it.
    cdef readonly object _id
    cdef uint64_t _owner_tid
    cdef unsigned long _owner_ident

    # configuration, as C values (see WorkspaceConfiguration)
    cdef int _p_alloc, _p_learning, _p_spill, _p_reset, _p_location, _p_exports
    cdef Py_ssize_t _initial_size, _min_size, _max_size
    cdef double _overalloc
    cdef long long _cycles_before_init
    cdef object _mmap_path
    cdef bint _mmap_temp

    # state, named after Nd4jWorkspace's fields
    cdef MemoryBlock _main
    cdef Py_ssize_t _current_size, _offset, _cycle_alloc, _last_cycle_alloc, _max_cycle
    cdef Py_ssize_t _spilled_size, _pinned_size, _initial_block_size
    cdef long long _generation, _epoch, _cycles_count, _steps_count, _trimmed_step
    cdef long long _disabled_counter
    cdef int _steps_number, _external_count, _pinned_count
    cdef bint _circular, _is_open, _is_init, _is_over, _is_used
    cdef bint _reset_planned, _trimmed_mode, _debug, _adopt_pending, _export_warned
    cdef unsigned long long _adopt_token
    cdef list _spills
    cdef object _pinned
    cdef Arena _previous        # parent: what was current when the open cycle was entered

    # scopes (see "Scopes" in _arena.pyx): entries that keep the workspace open (_is_open is
    # _depth > 0), live borrows, the scope the last entry or borrow pushed, and the scopes of
    # the `with` statements over this object, innermost last
    cdef int _depth, _borrows
    cdef _Scope _last_scope
    cdef list _with_scopes

    # circular ring: virtual position of the main block's offset 0 in the current lap, and how
    # far (physical bytes) the previous lap wrote: data there is alive until the head passes
    cdef long long _lap_base
    cdef Py_ssize_t _prev_lap_end

    # exports left behind at the end of a cycle (docs/architecture.md, invariant 6)
    cdef Py_ssize_t _blocks_left, _bytes_left

    # the last allocation, for handing its block to the new array and for rollback on error
    cdef MemoryBlock _last_block
    cdef long long _last_vpos
    cdef int _last_kind
    cdef Py_ssize_t _last_bytes, _last_prev_offset, _last_prev_written

    # a compiled loop's cycles in flight (see "Cycles of a compiled loop" in _arena.pyx)
    cdef bint _in_loop
    cdef long long _loop_cycles
    # a switched-off workspace's blocks of the running step: nothing else holds them (an array
    # would, outside a compiled loop), so they are kept here until the step ends
    cdef list _loop_held

    cdef int _check_thread(self, str action, str subject=*, str op=*) except -1
    cdef char* _alloc(self, Py_ssize_t nbytes, bint zero) except NULL
    cdef void _open_cycle(self) noexcept nogil
    cdef bint _end_cycle_plain(self) noexcept nogil
    cdef bint _reinit_is_noop(self, Py_ssize_t max_cycle) noexcept nogil

    # Cycles of a compiled loop (docs/architecture.md, "The time loop and the workspace"): a
    # kernel opens and closes a cycle of this workspace at every step of its loop without the
    # GIL and without a Python call, with every counter, learning step, spill and generation
    # what the same loop of `with ws:` blocks would give. `_loop_begin` (GIL held) refuses a
    # workspace that is open, circular, of another thread, already in a loop, or one whose
    # FAIL spill policy could not serve `per_cycle` bytes (nothing changed then); then, for
    # each step, `_loop_enter`, any number of `_loop_alloc` (raw memory, valid until the
    # step's `_loop_leave`: the cycle's end makes it the next step's), and `_loop_leave`.
    # Steady-state steps touch only C fields; a step that must spill, learn, release spills
    # or warn takes the GIL for it (`with gil`), and its errors propagate. `_loop_end` (GIL
    # held) ends the loop, closing a cycle an error left open (`failed`). `_loop_repeat` lets a
    # kernel run several steps at once in the bytes its open cycle holds (see there).
    cdef int _loop_begin(self, Py_ssize_t per_cycle, str op) except -1
    cdef int _loop_enter(self) except -1 nogil
    cdef char* _loop_alloc(self, Py_ssize_t nbytes) except NULL nogil
    cdef int _loop_leave(self) except -1 nogil
    cdef Py_ssize_t _loop_repeat(self, Py_ssize_t k, const char* p1, Py_ssize_t n1,
                                 Py_ssize_t n2) noexcept nogil
    cdef int _loop_end(self, bint failed) except -1
    cdef void _rollback(self, char* ptr, Py_ssize_t nbytes) noexcept
    cdef int _reuse_main(self) except -1
    cdef int _fail_if_exported(self, str when) except -1
    cdef int _install_main(self, MemoryBlock block) except -1
    cdef int _init_buffer(self) except -1
    cdef object _no_block(self)
    cdef void _clear_external(self) noexcept
    cdef void _clear_pinned(self, bint extended) noexcept
    cdef int _destroy_buffers(self, bint extended) except -1
    cdef int _end_cycle(self) except -1
    cdef int _check_mmap_file(self) except -1


# The calling Python thread's state (created on first use). Inline, with this module's cache
# (see _tls.h): no call into _arena unless the cache misses.
cdef ThreadState tstate_slow()

cdef inline ThreadState tstate():
    cdef PyObject* p = ndws_tls_get()
    cdef ThreadState st
    if p != NULL:
        return <ThreadState>p
    st = tstate_slow()
    ndws_tls_set(<PyObject*>st)
    return st

# Where a module that includes _tls.h points its shared pointers, once, at import:
# ndws_share(epoch_ptr(), debug_mode_ptr()).
cdef const uint64_t* epoch_ptr() noexcept
cdef const int* debug_mode_ptr() noexcept

# Java's List.toString of the ids of the workspaces open on this thread (error messages).
cdef str open_ids(ThreadState ts)


cdef inline Py_ssize_t round_up(Py_ssize_t n) noexcept nogil:
    # ND4J's alignment rule for every workspace allocation
    return (n + NDWS_ALIGNMENT - 1) & ~(<Py_ssize_t>NDWS_ALIGNMENT - 1)


cdef inline bint plain_bump(Arena w, Py_ssize_t req) noexcept nogil:
    # Whether Arena._alloc would simply bump the offset of the main block by `req` (rounded)
    # bytes: the steady state of a scoped workspace, which NDArray creation (ndws._core) and
    # the compiled loops' cycles take inline, through take_main
    return (not w._circular and w._is_used and not w._trimmed_mode and not w._debug
            and ndws_debug() != DEBUG_SPILL_EVERYTHING and w._main is not None
            and w._offset + req <= w._current_size)


cdef inline char* take_main(Arena w, Py_ssize_t req, Py_ssize_t nbytes) noexcept nogil:
    # Book `req` (rounded) bytes of the main block at the offset for `nbytes` of data: the one
    # definition of a main-block allocation (Arena._alloc, ndws._core's inline bump, the
    # compiled loops' cycles). The caller keeps the block alive (w._main) as it needs.
    cdef char* ptr = w._main.data + w._offset
    w._last_kind = _LAST_MAIN
    w._last_bytes = req
    w._last_prev_offset = w._offset
    w._last_prev_written = w._main.ring_written_end
    w._last_vpos = w._lap_base + w._offset
    w._cycle_alloc += req
    w._offset += req
    if w._circular:
        w._main.ring_written_end = w._lap_base + w._offset
    ndws_unpoison(ptr, nbytes)         # the alignment slack stays poisoned
    return ptr
