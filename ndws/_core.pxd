# Declarations of ndws' Cython core, for other Cython modules to `cimport` (the kernels of the
# next layer read an NDArray's pointer, shape and strides directly, without memoryviews).
from libc.stdint cimport uint64_t
from ndws._memory cimport MemoryBlock

cdef enum:
    NDWS_MAXDIMS = 64          # NumPy 2's limit (NPY_MAXDIMS): every NumPy array fits
    NDWS_INLINE_DIMS = 4       # shape/strides of up to this many dimensions live in the object

cdef class _Scope:
    # One open scope of a thread (see "Scopes" in _core.pyx): an entry, a nested re-entry, a
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

    # scopes (see "Scopes" in _core.pyx): entries that keep the workspace open (_is_open is
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

    cdef int _check_thread(self, str action) except -1
    cdef char* _alloc(self, Py_ssize_t nbytes, bint zero) except NULL
    cdef void _rollback(self, char* ptr, Py_ssize_t nbytes) noexcept
    cdef int _reuse_main(self) except -1
    cdef int _fail_if_exported(self, str when) except -1
    cdef int _install_main(self, MemoryBlock block) except -1
    cdef int _init_buffer(self) except -1
    cdef void _clear_external(self) noexcept
    cdef void _clear_pinned(self, bint extended) noexcept
    cdef int _destroy_buffers(self, bint extended) except -1
    cdef int _end_cycle(self) except -1
    cdef int _check_mmap_file(self) except -1

cdef class NDArray:
    cdef char* _data
    cdef int _ndim
    cdef Py_ssize_t _size
    cdef Py_ssize_t _itemsize
    # shape and strides: _dims for up to NDWS_INLINE_DIMS dimensions, else one heap block of
    # 2 * ndim (freed in __dealloc__). Inline storage keeps the object small, which is what a
    # hand-out pays for (the allocator zeroes the whole object).
    cdef Py_ssize_t* _shape
    cdef Py_ssize_t* _strides
    cdef Py_ssize_t _dims[2 * NDWS_INLINE_DIMS]
    cdef object _dtype          # numpy.dtype
    cdef MemoryBlock _block     # owner of the memory (never None)
    cdef Arena _arena           # birth workspace; None when detached
    cdef long long _gen         # birth generation of _arena
    cdef long long _epoch       # _arena's destruction epoch at birth
    cdef long long _vpos        # circular workspaces: virtual ring position at birth
    cdef bint _writeable
    cdef bint _owns             # allocated for this array (NumPy's OWNDATA); False for views
    cdef bint _initialized      # set up by a constructor: __init__ may not run again

cdef int check_array(NDArray a, object op, object role) except -1
cdef NDArray new_array(object dtype, int ndim, const Py_ssize_t* shape, bint zero, bint fortran,
                       Arena target, bint detached)
cdef object np_view(NDArray a)
# Another thread's NDArray as a detached NDArray over a pinned view (its block stays out of the
# owner's reuse while the result lives); anything else as it is. For kernels that read raw
# pointers without the GIL (docs/workspaces.md, "Threads").
cdef object pin_foreign(object x, object op, object role)
# For native kernels: a checked, C-contiguous result placed like every op's result, and the
# rollback that gives its bytes back when the op fails before returning it.
cdef NDArray new_result(object dtype, int ndim, const Py_ssize_t* shape, object op)
# Whether `a` is C-contiguous (size-1 axes may have any stride; empty arrays are).
cdef bint _c_contiguous(NDArray a) noexcept
cdef void discard_result(NDArray a) noexcept

# Kernel threads (see "Kernel threads" in _core.pyx): the one helper every kernel wrapper asks,
# with the GIL held, how many OpenMP threads to use for `work` units when each thread should get
# at least `grain` units (a measured per-kernel constant, so small calls stay on one thread).
# One thread-and-GIL policy for every kernel entry (docs/architecture.md, "How x + y reaches a
# loop"): `threads_for(work, grain)` gives the kernel threads a call may use, and a kernel runs
# without the GIL when it uses more than one or touches more than NOGIL_BYTES.
cdef enum:
    NOGIL_BYTES = 16384        # releasing and re-taking the GIL costs about a 16 KiB add

cdef enum Grain:               # the measured grains themselves are in _core.pyx (_grains)
    GRAIN_ELEMENTWISE = 0      # elements
    GRAIN_REDUCE = 1           # elements
    GRAIN_GEMM_F32 = 2         # flops
    GRAIN_GEMM_F64 = 3         # flops
    GRAIN_NN_CHEAP = 4         # elements: relu, sgd, momentum (memory bound)
    GRAIN_NN_TRANSC = 5        # elements: exp/tanh/erf activations, softmax, losses
    GRAIN_NN_UPDATE = 6        # elements: the sqrt-based updaters
    N_GRAINS = 7

cdef int threads_for(Py_ssize_t work, int grain) noexcept

cdef inline bint release_gil(Py_ssize_t nbytes, int nthreads) noexcept:
    return nthreads > 1 or nbytes > NOGIL_BYTES
cdef int thread_limit() noexcept


# Memory overlap, the one definition every kernel entry uses (an `out=` that shares memory with
# an input is computed through a temporary, or refused, by each entry's own rule).
cdef inline void byte_extent(char* data, int ndim, const Py_ssize_t* shape,
                             const Py_ssize_t* strides, Py_ssize_t unit, Py_ssize_t itemsize,
                             char** lo, char** hi) noexcept nogil:
    # [lo, hi): the bytes a strided view's elements occupy, strides counted in `unit` bytes
    # (1 for an NDArray's byte strides, the itemsize for element strides); empty (lo == hi)
    # when any dimension is 0
    cdef Py_ssize_t a = 0, b = 0, span
    cdef int i
    for i in range(ndim):
        if shape[i] == 0:
            lo[0] = hi[0] = data
            return
        span = (shape[i] - 1) * strides[i] * unit
        if span < 0:
            a += span
        else:
            b += span
    lo[0] = data + a
    hi[0] = data + b + itemsize


cdef inline bint ranges_overlap(char* alo, char* ahi, char* blo, char* bhi) noexcept nogil:
    return alo < ahi and blo < bhi and alo < bhi and blo < ahi


cdef inline bint arrays_overlap(NDArray a, NDArray b) noexcept:
    """True when the bytes of a and b intersect (never for an empty array)."""
    cdef char* alo
    cdef char* ahi
    cdef char* blo
    cdef char* bhi
    byte_extent(a._data, a._ndim, a._shape, a._strides, 1, a._itemsize, &alo, &ahi)
    byte_extent(b._data, b._ndim, b._shape, b._strides, 1, b._itemsize, &blo, &bhi)
    return ranges_overlap(alo, ahi, blo, bhi)
