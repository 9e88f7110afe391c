"""ndws._core: NDArray, the validity check, the native element-wise and reduction paths with
their NumPy fallback, the kernel-thread settings and the creation functions.

Above the workspace mechanics (ndws._arena) and the memory blocks (ndws._memory); see
docs/architecture.md. The pure-Python layers (`ndws.workspace`, `ndws.ops`, `ndws.random`)
decide *what* to do; this module places every array, keeps its memory alive exactly as long as
something refers to it, and refuses every stale use.

Examples
--------
>>> import ndws
>>> with ndws.workspace("DOCTEST") as ws:
...     a = ndws.zeros((2, 3), dtype="float32")
...     (a + 1).sum().item()
6.0
>>> ws.this_cycle_allocations
0
>>> a.shape
(2, 3)
>>> a + 1
Traceback (most recent call last):
...
ndws.WorkspaceError: Op [add] x1 argument uses leaked workspace pointer from workspace [DOCTEST]: Workspace the array was defined in is no longer open.
All open workspaces: []
For more details, see the ND4J User Guide: https://deeplearning4j.konduit.ai/nd4j/overview#workspaces-scope-panic
>>> ndws.destroy_all_workspaces_for_current_thread()
"""

cimport cython
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from cpython.pycapsule cimport (PyCapsule_New, PyCapsule_IsValid, PyCapsule_GetPointer,
                                PyCapsule_SetName)
from cpython.object cimport PyTypeObject
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE, PyBUF_FORMAT,
                             PyBUF_ND, PyBUF_STRIDES, PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS,
                             PyBUF_ANY_CONTIGUOUS)
from cpython.pystate cimport PyThreadState_GetDict
from cpython.number cimport PyNumber_Index
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.float cimport FLT_MAX
from libc.math cimport isinf
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset, memcpy
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t, int32_t, int64_t
from cpython.pyport cimport PY_SSIZE_T_MAX
cimport numpy as cnp

from ndws._openmp cimport NDWS_OPENMP, ndws_omp_get_max_threads, ndws_omp_set_num_threads
from ndws._arena cimport (Arena, ThreadState, tstate, open_ids, round_up, epoch_ptr,
                          debug_mode_ptr, ndws_share, ndws_current_tid, ndws_debug,
                          DEBUG_SPILL_EVERYTHING, _LAST_MAIN)
from ndws._memory cimport (MemoryBlock, NDWS_ALIGNMENT, NDWS_SANITIZED, ndws_unpoison,
                           allocate_block, foreign_block, empty_block, held, BLOCK_DETACHED)

import collections
import sys
import warnings

import numpy as np

from ndws._memory import allocation_counters
# the workspace mechanics' Python surface, published by this module as before
from ndws._arena import (WorkspaceError, NoSuchWorkspaceError, ConfigurationError,
                         WorkspaceWarning, SCOPE_PANIC_MSG, MAX_BLOCK_BYTES, current_workspace,
                         _thread_state, _scope_out, _end_scope_of,
                         _clear_scopes, _scope_ops, _set_debug_mode, _get_debug_mode)

ndws_share(epoch_ptr(), debug_mode_ptr())

cnp.import_array()
cnp.import_ufunc()   # PyUFunc_GiveFloatingpointErrors (the fast paths' errstate reporting)

cdef extern from "numpy/arrayobject.h":
    # Cython's numpy.pxd leaves this one out. It steals a reference to `descr`.
    ctypedef struct _Descr "PyArray_Descr"
    PyTypeObject PyArray_Type
    object PyArray_NewFromDescr(PyTypeObject* subtype, _Descr* descr, int nd,
                                cnp.npy_intp* dims, cnp.npy_intp* strides, void* data, int flags,
                                PyObject* obj)

cdef extern from *:
    """
    #include <stdint.h>
    static inline int ndws_mul_overflow(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out) {
    #if defined(__GNUC__) || defined(__clang__)
        return __builtin_mul_overflow(a, b, out);
    #else
        if (a != 0 && b > PY_SSIZE_T_MAX / a) return 1;
        *out = a * b;
        return 0;
    #endif
    }
    """
    bint ndws_mul_overflow(Py_ssize_t a, Py_ssize_t b, Py_ssize_t* out) noexcept
    unsigned long PyThread_get_thread_ident() noexcept
    const char* NDWS_BUILD_CYTHON_VERSION
    const char* NDWS_BUILD_NUMPY_VERSION
    const char* NDWS_BUILD_CFLAGS


# ------------------------------------------------------------------------------------------------
# Constants

#: Bytes every workspace allocation is rounded up to, and the alignment of every memory block
#: (main buffers, spills, detached arrays): one cache line and one AVX-512 vector. ND4J used 16
#: (2021); byte counts follow its rules with 64. Arrays in scoped workspaces are therefore
#: 64-byte aligned; in a circular workspace each cycle starts at a ring-block boundary, and
#: ND4J's block size is only rounded to 8 bytes, so arrays there are 8-byte aligned.
ALIGNMENT = NDWS_ALIGNMENT
MAXDIMS = NDWS_MAXDIMS

# the shared block of zero-size arrays, held here so creating one calls nothing in _memory
cdef MemoryBlock _EMPTY_BLOCK = empty_block()


# ------------------------------------------------------------------------------------------------
# Kernel threads
#
# ndws owns one OpenMP pool. Its size is `_pool_threads`: OMP_NUM_THREADS (what
# omp_get_max_threads() reports at import, the CPU count when unset) until
# `set_num_threads` changes it. A Python thread may lower or raise its own limit with
# `num_threads(n)` (ThreadState._nthreads), so N Python workers can each run 1-thread kernels
# without oversubscribing the cores. Kernels never read these: every wrapper asks `threads_for`
# with the GIL held and passes the count into its nogil region as `num_threads=`.

cdef int _pool_threads = max(1, ndws_omp_get_max_threads())


cdef int thread_limit() noexcept:
    """The calling thread's kernel-thread limit (always 1 in a build without OpenMP)."""
    cdef int n
    cdef ThreadState st
    if not NDWS_OPENMP:
        return 1
    try:
        st = tstate()
    except BaseException:      # no Python thread state (never while a caller holds the GIL)
        return _pool_threads
    n = st._nthreads
    return n if n > 0 else _pool_threads


# The grains: the work per kernel thread below which a second thread does not pay (a call uses
# 2 threads from 2 * grain on). Each was measured on the 2-core Zen 4 (1 vs 2 threads, medians):
# - elementwise, reduce (`python bench/bench_ops.py --grain`, float32, us per call):
#     add (out=):     32768: 2.6 / 2.5   65536: 5.0 / 4.1   131072: 10.3 / 7.4
#     sum (flat):     65536: 3.3 / 4.5  131072: 6.5 / 9.2   262144: 13.9 / 13.1  1M: 55 / 50
#     sum(axis=0):    65536: 4.9 / 4.6  131072: 9.7 / 7.2   262144: 20.3 / 11.8
#   i.e. two threads win from ~64K elements for streaming loops and 128K-256K for reductions
#   (a parallel region costs ~2 us; a sum runs at ~5 elements/ns);
# - gemm (flops; squares 32-160, 32 x 256 x n, 128 x 256 x 10): float32 breaks even at ~0.55
#   Mflop (64^3: 0.87-1.01x, 80^3: 1.13x, 128x256x10 = 0.66 Mflop: 1.45x), float64 at ~0.3
#   Mflop (48^3: 0.92x, 64^3: 1.3x);
# - nn (ndws.nn.functional, float32, 21 repeats): relu/relu backward/sgd/momentum (memory
#   bound, under 1 ns/element) gain from 128K-256K elements (relu 262144: 22.5 vs 17.7 us; sgd
#   131072: 10.8 vs 7.9 us; at 65536 two threads still lose: 6.4 vs 8.6 us); exp/erf/tanh
#   activations, softmax rows, the losses and the sqrt-based updaters (2-10 ns/element) gain
#   from 4096 elements (gelu 29.3 vs 17.2 us, softmax 29.1 vs 18.9, cross-entropy 58.0 vs 35.9,
#   adam 13.2 vs 9.7) and lose or tie at 1024;
# - eval_rows (ndws.evaluation's confusion counting): a row is C loads from each of two arrays,
#   ~2-4 ns for C = 10, against a few microseconds of OpenMP start-up.
cdef Py_ssize_t _grains[N_GRAINS]
_grains[:] = [1 << 15, 1 << 16, 300000, 150000, 65536, 2048, 2048, 16384]
_GRAIN_NAMES = ("elementwise", "reduce", "gemm_f32", "gemm_f64", "nn_cheap", "nn_transc",
                "nn_update", "eval_rows")


cdef int threads_for(Py_ssize_t work, Grain grain) noexcept:
    cdef Py_ssize_t g
    cdef int n
    cdef Py_ssize_t useful
    if <unsigned int>grain >= N_GRAINS:
        return 1                   # not a Grain: never read outside the table
    g = _grains[<int>grain]
    if g <= 0 or work < 2 * g:
        return 1                   # before the thread-local lookup: most calls are small
    n = thread_limit()
    if n <= 1:
        return 1
    useful = work // g
    if useful < n:
        return <int>useful if useful > 1 else 1
    return n


def _set_grains(**grains):
    """Set thread grains by name (elementwise, reduce, gemm_f32, gemm_f64, nn_cheap,
    nn_transc, nn_update); returns all of them as they were. For the benchmarks' threshold
    measurements and the tests."""
    prev = {name: _grains[i] for i, name in enumerate(_GRAIN_NAMES)}
    new = []
    for name, value in grains.items():  # all checked before any is set
        if name not in _GRAIN_NAMES:
            raise TypeError(f"_set_grains: unknown grain {name!r}; expected one of "
                            f"{', '.join(_GRAIN_NAMES)}")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 62:
            raise ValueError(f"_set_grains: {name} must be an int in [0, 2**62), got {value!r}")
        new.append((_GRAIN_NAMES.index(name), value))
    for i, value in new:
        _grains[i] = value
    return prev


cdef int _thread_count(object n, str name) except -1:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name}: expected a positive int, got {n!r}")
    if n < 1:
        raise ValueError(f"{name}: expected a positive int, got {n!r}")
    return <int>min(n, 1 << 16)   # a sanity cap; OpenMP would refuse more anyway


def set_num_threads(n):
    """Set the size of ndws' kernel thread pool (all Python threads without their own
    `num_threads` limit).

    Parameters
    ----------
    n : int
        Threads per kernel call, >= 1. Starts as ``OMP_NUM_THREADS`` (the CPU count when unset).
        A build without OpenMP accepts any n and runs every kernel on one thread.
    """
    global _pool_threads
    _pool_threads = _thread_count(n, "n")
    ndws_omp_set_num_threads(_pool_threads)


def get_num_threads():
    """Kernel threads the calling thread's next kernel may use: its `num_threads` limit, else
    the pool size (1 in a build without OpenMP).

    >>> import ndws
    >>> with ndws.num_threads(1):
    ...     ndws.get_num_threads()
    1
    """
    return thread_limit()


def _set_thread_override(int n):
    """Set the calling thread's own limit (0 = follow the pool); returns the previous one."""
    cdef ThreadState ts = tstate()
    cdef int prev = ts._nthreads
    ts._nthreads = n
    return prev


class num_threads:
    """Context manager limiting the kernel threads of the calling Python thread only.

    Parameters
    ----------
    n : int
        Threads per kernel call inside the block, >= 1.

    Examples
    --------
    One kernel thread per Python worker, so two workers share two cores without fighting:

    >>> import ndws
    >>> with ndws.num_threads(1):
    ...     ndws.get_num_threads()
    1
    """

    def __init__(self, n):
        self.n = _thread_count(n, "n")
        self._prev = []

    def __enter__(self):
        self._prev.append(_set_thread_override(self.n))
        return self

    def __exit__(self, *exc):
        _set_thread_override(self._prev.pop())
        return False


# ------------------------------------------------------------------------------------------------
# The validity check (docs/architecture.md, invariant 2). The fast path is a handful of compares;
# everything else runs only when an array is stale.

cdef str _stale_kind(NDArray a):
    cdef Arena w = a._arena
    if w is None:
        return None
    if w._circular:
        if a._epoch != w._epoch:
            return "destroyed"
        if a._vpos >= 0 and a._block.ring_written_end > a._vpos + a._block.ring_size:
            return "overwritten"
        return None
    if a._epoch != w._epoch:
        return "destroyed"        # before "leaked": destruction now closes the workspace
    if not w._is_open:
        return "leaked"
    if a._gen != w._generation:
        return "outdated"
    return None


cdef inline bint _is_valid(NDArray a) noexcept:
    cdef Arena w = a._arena
    if w is None:
        return True
    if w._circular:
        return a._epoch == w._epoch and (
            a._vpos < 0 or a._block.ring_written_end <= a._vpos + a._block.ring_size)
    return w._is_open and a._gen == w._generation and a._epoch == w._epoch


cdef int _raise_stale(NDArray a, object op, object role, object prefix) except -1:
    cdef str kind = _stale_kind(a)
    cdef Arena w = a._arena
    ids = open_ids(tstate())
    wid = w._id
    if prefix is None:
        head = f"Op [{op}] {role} argument uses {kind} workspace pointer from workspace [{wid}]: "
        if kind == "leaked":
            why = "Workspace the array was defined in is no longer open."
        elif kind == "outdated":
            why = ("Workspace array was defined in has been closed and reopened at least once "
                   f"since array creation. Array WS iteration: {a._gen}. "
                   f"Workspace current iteration: {w._generation}")
        elif kind == "overwritten":
            why = ("Circular workspace has wrapped around and reused the memory of this array "
                   "since its creation; detach() arrays that must outlive their ring slot.")
        else:
            why = "Workspace the array was defined in has been destroyed since array creation."
        msg = f"{head}{why}\nAll open workspaces: {ids}\n{SCOPE_PANIC_MSG}"
    else:
        if kind == "outdated":
            msg = (f"{prefix}: Array outdated workspace pointer from workspace {wid} "
                   f"(array generation {a._gen}, current workspace generation {w._generation})")
        elif kind == "overwritten":
            msg = (f"{prefix}: Array uses overwritten workspace pointer from workspace {wid} "
                   f"(the circular workspace has wrapped around since array creation)")
        else:
            msg = f"{prefix}: Array uses {kind} workspace pointer from workspace {wid}"
        msg = f"{msg}\nAll open workspaces: {ids}"
    raise WorkspaceError(msg, kind, wid, op)


cdef int check_array(NDArray a, object op, object role) except -1:
    """Raise WorkspaceError (ND4J's op-message format) unless `a` may be used."""
    if _is_valid(a):
        return 0
    return _raise_stale(a, op, role, None)


cdef inline int _assert_valid(NDArray a, str prefix, str op) except -1:
    # WorkspaceUtils.assertValidArray: the non-op message format of ND4J §3.4
    if _is_valid(a):
        return 0
    return _raise_stale(a, op, None, prefix)


def check(NDArray a, op="check", role="a"):
    """Raise `WorkspaceError` unless `a` may be used; the check every operation runs.

    Parameters
    ----------
    a : NDArray
    op, role : str
        Operation and argument names for the message.
    """
    check_array(a, op, role)


# ------------------------------------------------------------------------------------------------
# dtypes and shapes

# The two float dtypes the native kernels cover, compared by identity (NumPy's builtin dtypes are
# singletons); ndws._linalg takes the same objects from `_float_dtypes`.
cdef object _F32 = np.dtype(np.float32)
cdef object _F64 = np.dtype(np.float64)


def _float_dtypes():
    """(float32, float64): the dtype objects the kernels compare by identity."""
    return _F32, _F64
cdef dict _dtype_cache = {}
cdef dict _format_cache = {}
_PEP3118 = {"F": b"Zf", "D": b"Zd", "G": b"Zg"}


cdef object _last_dtype_key = None     # the last dtype argument seen, and its dtype:
cdef object _last_dtype = None         # a loop asks for the same one every time


cdef object _as_dtype(object obj):
    global _last_dtype_key, _last_dtype
    cdef object dt
    if obj is None:
        return _F64
    if obj is _last_dtype_key:
        return _last_dtype
    try:
        dt = _dtype_cache.get(obj)
    except TypeError:  # unhashable
        dt = None
    if dt is None:
        dt = np.dtype(obj)
        _check_dtype(dt)
        try:
            _dtype_cache[obj] = dt
        except TypeError:
            return dt                  # unhashable: not remembered either
    _last_dtype_key = obj
    _last_dtype = dt
    return dt


cdef int _check_dtype(object dt, str what="dtype") except -1:
    # Every dtype an ndws array is made with passes here before any memory is touched: raw
    # workspace memory can't hold Python objects, and datetimes, strings or structs have no
    # kernels. `what` names the argument (or says "<op>: the result") in the message.
    if dt.kind not in "biufc" or dt.hasobject or dt.fields is not None or dt.subdtype is not None:
        raise TypeError(f"{what}: ndws arrays hold numbers (bool, int, uint, float, complex); "
                        f"got {dt!r}")
    if not dt.isnative:
        raise TypeError(f"dtype: ndws arrays use native byte order; got {dt!r} "
                        f"(use .astype(dtype.newbyteorder('=')) first)")
    return 0


cdef int _parse_shape(object shape, Py_ssize_t* out) except -1:
    # NumPy's shape rules and its messages for negative sizes and too many dimensions; the
    # other errors name the argument instead of surfacing from C.
    cdef int ndim, i
    if isinstance(shape, (tuple, list)):
        ndim = len(shape)
        if ndim > NDWS_MAXDIMS:
            raise ValueError(f"maximum supported dimension for an ndarray is currently "
                             f"{NDWS_MAXDIMS}, found {ndim}")
        for i in range(ndim):
            out[i] = _dimension(shape[i], shape)
        return ndim
    out[0] = _dimension(shape, shape)
    return 1


cdef inline Py_ssize_t _dimension(object v, object shape) except -1:
    cdef Py_ssize_t d
    cdef int overflow = 0
    if type(v) is int:
        # the common case, in C: every array-producing call with a shape passes here
        d = PyLong_AsLongLongAndOverflow(v, &overflow)
        if overflow == 0 and d >= 0:
            return d
    return _dimension_slow(v, shape)


cdef Py_ssize_t _dimension_slow(object v, object shape) except -1:
    cdef object n
    if isinstance(v, (bool, np.bool_)):
        n = None
    else:
        try:
            n = PyNumber_Index(v)
        except TypeError:
            n = None
    if n is None:
        raise TypeError(f"shape: expected an int or a sequence of ints, got {shape!r:.60}")
    if n < 0:
        raise ValueError("negative dimensions are not allowed")
    if n > PY_SSIZE_T_MAX:
        raise ValueError("array is too big; `arr.size * arr.dtype.itemsize` is larger than the "
                         "maximum possible size.")
    return n


cdef inline Py_ssize_t _size_of(int ndim, const Py_ssize_t* shape,
                                Py_ssize_t itemsize) except -1:
    # Element count, refusing sizes whose byte count overflows Py_ssize_t (NumPy's message).
    # Overflow builtins, not divisions: this runs for every array created.
    cdef Py_ssize_t size = 1, nbytes
    cdef int i
    cdef bint overflow = False
    for i in range(ndim):
        if shape[i] == 0:
            return 0
    for i in range(ndim):
        overflow |= ndws_mul_overflow(size, shape[i], &size)
    overflow |= ndws_mul_overflow(size, itemsize, &nbytes)
    if overflow:
        raise ValueError("array is too big; `arr.size * arr.dtype.itemsize` is larger than the "
                         "maximum possible size.")
    return size


cdef tuple _shape_tuple(int ndim, const Py_ssize_t* shape):
    return tuple([shape[i] for i in range(ndim)])


# ------------------------------------------------------------------------------------------------
# NDArray

@cython.no_gc
cdef class _Export:
    """Base object of a zero-copy NumPy array handed out by `NDArray.__array__`: keeps the array
    alive and counts the export on its memory block until NumPy lets go."""
    cdef MemoryBlock block
    cdef NDArray array

    def __dealloc__(self):
        if self.block is not None:
            self.block.exports -= 1


cdef inline int _set_ndim(NDArray a, int ndim) except -1:
    # Point shape/strides at storage for `ndim` dimensions (see NDArray in _core.pxd).
    cdef Py_ssize_t* heap
    if ndim > NDWS_INLINE_DIMS:
        if ndim > NDWS_MAXDIMS:
            raise ValueError(f"maximum supported dimension for an ndarray is currently "
                             f"{NDWS_MAXDIMS}, found {ndim}")
        heap = <Py_ssize_t*>malloc(2 * ndim * sizeof(Py_ssize_t))
        if heap == NULL:
            raise MemoryError()
        if a._shape != a._dims:
            free(a._shape)
        a._shape = heap
        a._strides = heap + ndim
    a._ndim = ndim
    return 0


cdef NDArray _make(object dtype, int ndim, const Py_ssize_t* shape, const Py_ssize_t* strides,
                   char* data, MemoryBlock block, Arena arena, long long gen, long long epoch,
                   long long vpos, bint writeable):
    cdef NDArray a = NDArray.__new__(NDArray)
    cdef int i
    cdef Py_ssize_t size = 1
    _set_ndim(a, ndim)
    a._initialized = True
    a._dtype = dtype
    a._itemsize = cnp.PyDataType_ELSIZE(<cnp.dtype>dtype)
    for i in range(ndim):
        a._shape[i] = shape[i]
        a._strides[i] = strides[i]
        size *= shape[i]
    a._size = size
    a._data = data
    a._block = block
    a._arena = arena
    a._gen = gen
    a._epoch = epoch
    a._vpos = vpos
    a._writeable = writeable
    return a


cdef inline void _contiguous_strides(int ndim, const Py_ssize_t* shape, Py_ssize_t itemsize,
                                     bint fortran, Py_ssize_t* strides) noexcept:
    cdef int i
    cdef Py_ssize_t s = itemsize
    if fortran:
        for i in range(ndim):
            strides[i] = s
            s *= shape[i] if shape[i] > 0 else 1
    else:
        for i in range(ndim - 1, -1, -1):
            strides[i] = s
            s *= shape[i] if shape[i] > 0 else 1


cdef inline bint _plain_bump(Arena w, Py_ssize_t req) noexcept:
    # Whether Arena._alloc would simply bump the offset of the main block (see new_array)
    return (not w._circular and w._is_used and not w._trimmed_mode and not w._debug
            and ndws_debug() != DEBUG_SPILL_EVERYTHING and w._main is not None
            and w._offset + req <= w._current_size)


cdef NDArray new_array(object dtype, int ndim, const Py_ssize_t* shape, bint zero, bint fortran,
                       Arena target, bint detached):
    """Allocate an array: in `target`, else (unless `detached`) the current workspace, else
    detached memory. Zero-size arrays are never attached (ND4J: empty arrays aren't)."""
    # The hot path of every array-producing call: memory first (it may raise), then the object
    # filled in place, with no intermediate shape/stride copies.
    cdef Py_ssize_t itemsize = cnp.PyDataType_ELSIZE(<cnp.dtype>dtype)
    cdef Py_ssize_t size = _size_of(ndim, shape, itemsize)
    cdef Arena arena = None
    cdef MemoryBlock block
    cdef char* data
    cdef NDArray a
    cdef int i
    cdef Py_ssize_t req
    cdef long long vpos = -1
    if size == 0:
        block = _EMPTY_BLOCK
        data = block.data
    else:
        if not detached:
            if target is not None:
                target._check_thread("allocated in")
                if not target._is_open:
                    # its arrays would be born stale ("leaked"): refuse before allocating
                    raise WorkspaceError(f"Workspace [{target._id}] can't be allocated in: it "
                                         f"is not open", "closed", target._id)
                arena = target
            else:
                arena = tstate()._current
        if arena is None:
            block = allocate_block(size * itemsize, zero, BLOCK_DETACHED)
            data = block.data
        elif _plain_bump(arena, round_up(size * itemsize)):
            # the steady state of a scoped workspace, inlined: Arena._alloc's main-block
            # branch without the ring, spill, trim and debug cases it has ruled out
            req = round_up(size * itemsize)
            block = arena._main
            data = block.data + arena._offset
            arena._last_kind = _LAST_MAIN
            arena._last_bytes = req
            arena._last_prev_offset = arena._offset
            arena._last_prev_written = block.ring_written_end
            arena._offset += req
            arena._cycle_alloc += req
            ndws_unpoison(data, size * itemsize)
            if zero:
                memset(data, 0, size * itemsize)
        else:
            data = arena._alloc(size * itemsize, zero)
            block = arena._last_block
            arena._last_block = None
            vpos = arena._last_vpos
    a = NDArray.__new__(NDArray)
    if ndim > NDWS_INLINE_DIMS:
        try:
            _set_ndim(a, ndim)
        except BaseException:
            if arena is not None:
                arena._rollback(data, size * itemsize)
            raise
    a._ndim = ndim
    a._initialized = True
    a._dtype = dtype
    a._itemsize = itemsize
    a._size = size
    a._data = data
    a._block = block
    a._owns = True
    for i in range(ndim):
        a._shape[i] = shape[i]
    _contiguous_strides(ndim, shape, itemsize, fortran, a._strides)
    a._vpos = vpos
    if arena is not None:
        a._arena = arena
        a._gen = arena._generation
        a._epoch = arena._epoch
    return a


cdef void _discard(NDArray a) noexcept:
    # An array made for an operation that then failed: give its bytes back if it was the
    # workspace's last allocation.
    if a is not None and a._arena is not None:
        a._arena._rollback(a._data, a._size * a._itemsize)


cdef NDArray _fill_new(NDArray out, object fill, object op):
    # How the NumPy fallback and the creation functions fill a fresh result: check the newly
    # allocated `out` like any op output (a closed current workspace yields a dead array: refuse
    # to write it), let `fill(view)` write the values through a NumPy view, and give the memory
    # back on error so a failed op leaves the workspace as it was. (Native kernels fill the
    # results of `new_result` themselves.)
    try:
        check_array(out, op, "out")
        fill(np_view(out))
    except BaseException:
        _discard(out)
        raise
    return out


cdef NDArray new_result(object dtype, int ndim, const Py_ssize_t* shape, object op):
    """A fresh C-contiguous result for native kernels (the placement rule of `new_array`),
    checked like any output. The caller fills it in a nogil kernel; on an error before it is
    returned, the caller gives the bytes back with `discard_result`."""
    cdef NDArray out = new_array(dtype, ndim, shape, False, False, None, False)
    if not _is_valid(out):
        # a closed current workspace yields a dead array: give its bytes back, then raise
        _discard(out)
        _raise_stale(out, op, "out", None)
    return out


cdef void discard_result(NDArray a) noexcept:
    _discard(a)


cdef inline NDArray _new_filled(object dtype, int ndim, const Py_ssize_t* shape, object fill,
                                object op, bint fortran=False, bint detached=False):
    return _fill_new(new_array(dtype, ndim, shape, False, fortran, None, detached), fill, op)


def new_filled(shape, dtype, fill, *, op="fill", detached=False):
    """A new array placed like every result (current workspace, else detached memory), whose
    values `fill(numpy_view)` writes; if `fill` raises, the allocation is given back. `op`
    names the operation in the error raised when the new array can't be used.

    For ndws' own Python modules; `fill` must not keep the view.
    """
    cdef Py_ssize_t shp[NDWS_MAXDIMS]
    cdef int nd = _parse_shape(shape, shp)
    return _new_filled(_as_dtype(dtype), nd, shp, fill, op, False, detached)


cdef void _order_strides(int ndim, const Py_ssize_t* shape, const Py_ssize_t* src,
                         Py_ssize_t itemsize, bint keep, bint fortran, Py_ssize_t* out) noexcept:
    # Dense strides for a new array of `shape`. keep: the axes ordered like `src` by
    # decreasing |stride| (stable), as NumPy's order='K' does; else C or Fortran order.
    cdef int perm[NDWS_MAXDIMS]
    cdef int i, j, t
    cdef Py_ssize_t s = itemsize, ai, aj
    for i in range(ndim):
        perm[i] = i
    if keep:
        for i in range(1, ndim):          # insertion sort: stable, ndim is tiny
            t = perm[i]
            ai = src[t] if src[t] >= 0 else -src[t]
            j = i - 1
            while j >= 0:
                aj = src[perm[j]] if src[perm[j]] >= 0 else -src[perm[j]]
                if aj >= ai:
                    break
                perm[j + 1] = perm[j]
                j -= 1
            perm[j + 1] = t
    elif fortran:
        for i in range(ndim):
            perm[i] = ndim - 1 - i
    for j in range(ndim - 1, -1, -1):
        out[perm[j]] = s
        s *= shape[perm[j]] if shape[perm[j]] > 0 else 1


cdef NDArray _alloc_like(object dtype, int ndim, const Py_ssize_t* shape,
                         const Py_ssize_t* src_strides, Py_ssize_t src_itemsize, object order,
                         bint c_contig, bint f_contig, Arena target, bint detached):
    # A new array of `shape` laid out per NumPy's `order` relative to a source with the given
    # strides: 'K' keeps the source's axis order, 'A' is 'F' for Fortran-only sources. The
    # order is checked before anything is allocated.
    cdef bint keep = False, fortran = False
    if order is None or order == "K" or order == "k":
        if f_contig and not c_contig:
            fortran = True
        elif not c_contig:
            keep = True
    elif order == "A" or order == "a":
        fortran = f_contig and not c_contig
    elif order == "F" or order == "f":
        fortran = True
    elif not (order == "C" or order == "c"):
        raise ValueError(f"order: expected 'C', 'F', 'A' or 'K', got {order!r}")
    cdef NDArray a = new_array(dtype, ndim, shape, False, False, target, detached)
    if keep or fortran:
        _order_strides(ndim, shape, src_strides, a._itemsize, keep, fortran, a._strides)
    return a


cdef NDArray _array_like(NDArray src, object dtype, object order):
    return _alloc_like(src._dtype if dtype is None else dtype, src._ndim, src._shape,
                       src._strides, src._itemsize, order, _c_contiguous(src),
                       _f_contiguous(src), None, False)


# -- reads from other threads (docs/workspaces.md, "Threads") ----------------------------------
# Another thread may read (or write through out=) a valid array of a workspace it does not
# own, while the owner goes on: its cycle end makes that memory the next cycle's, and a kernel
# running without the GIL would then read a mix of two cycles. Such an operation pins the
# block for as long as it runs (the pin is the base of the NumPy views it works on, so it ends
# when they go), and the owner leaves a pinned block to it exactly as it leaves an exported
# one, continuing on a fresh block. Native fast paths decline foreign operands (the NumPy path
# pins them), so the hot path pays one compare.

@cython.final
@cython.no_gc
cdef class _Pin:
    """Keeps one memory block from being reused by its workspace while another thread reads
    it (the base object of that thread's NumPy views). In a ring only the pinned array's
    place matters (`vpos`): the ring goes on around it until it would write over it."""
    cdef MemoryBlock block
    cdef long long vpos

    def __dealloc__(self):
        if self.block is not None:
            self.block.pins -= 1
            if self.vpos >= 0:
                self.block.pinned.remove(self.vpos)


cdef inline bint _foreign(NDArray a) noexcept:
    # an attached array of a workspace that belongs to another thread
    return a._arena is not None and a._arena._owner_tid != ndws_current_tid()


cdef object np_view(NDArray a):
    """An internal NumPy view of `a`'s memory (not counted as an export; never handed out).
    A view of another thread's array pins its block (see _Pin) and is checked once more after
    pinning, so it holds the values the array had when the view was made."""
    cdef object descr = a._dtype
    cdef int flags = cnp.NPY_ARRAY_WRITEABLE if a._writeable else 0
    cdef _Pin pin
    Py_INCREF(descr)  # PyArray_NewFromDescr steals it
    arr = PyArray_NewFromDescr(&PyArray_Type, <_Descr*>descr, a._ndim,
                               <cnp.npy_intp*>a._shape, <cnp.npy_intp*>a._strides, a._data,
                               flags, NULL)
    if _foreign(a):
        pin = _Pin.__new__(_Pin)
        pin.block = a._block
        pin.vpos = a._vpos if a._arena._circular else -1
        if pin.vpos >= 0:
            if a._block.pinned is None:
                a._block.pinned = []
            a._block.pinned.append(pin.vpos)
        a._block.pins += 1
        cnp.set_array_base(arr, pin)
        # the caller validated `a`, but making the view may have let the owner run (a GC
        # finaliser can switch threads): valid now means its block is ours until the pin goes
        _assert_valid(a, "Cannot read INDArray of another thread", "read")
    else:
        cnp.set_array_base(arr, a._block)
    return arr


cdef object pin_foreign(object x, object op, object role):
    """`x` itself, unless it is another thread's NDArray: then (checked like any operand) a
    detached NDArray over a pinned view of it, which a kernel may read or write without the
    GIL while the owner goes on (see _Pin). The caller keeps the result until the kernel is
    done."""
    cdef NDArray a
    if not isinstance(x, NDArray) or not _foreign(<NDArray>x):
        return x
    a = <NDArray>x
    check_array(a, op, role)
    return from_numpy(np_view(a))


def _np_view(NDArray a, op="op", role="a"):
    """Validated internal NumPy view, for ndws' own Python modules (valid during the call)."""
    check_array(a, op, role)
    return np_view(a)


cdef NDArray _view_of(NDArray base, object res):
    # Wrap a NumPy view `res` of base's memory as an NDArray view born with base. Refuses
    # anything not inside base's memory block, so no view can ever point past its owner.
    cdef cnp.ndarray r = <cnp.ndarray>res
    cdef int ndim = cnp.PyArray_NDIM(r)
    cdef Py_ssize_t* shape = <Py_ssize_t*>cnp.PyArray_DIMS(r)
    cdef Py_ssize_t* strides = <Py_ssize_t*>cnp.PyArray_STRIDES(r)
    cdef char* data = <char*>cnp.PyArray_DATA(r)
    cdef Py_ssize_t lo = 0, hi = 0, itemsize = base._itemsize
    cdef int i
    cdef bint empty = False
    if ndim > NDWS_MAXDIMS:
        raise ValueError(f"maximum supported dimension for an ndarray is currently "
                         f"{NDWS_MAXDIMS}, found {ndim}")
    for i in range(ndim):
        if shape[i] == 0:
            empty = True
        elif strides[i] >= 0:
            hi += strides[i] * (shape[i] - 1)
        else:
            lo += strides[i] * (shape[i] - 1)
    if empty:
        return _make(base._dtype, ndim, shape, strides, _EMPTY_BLOCK.data, _EMPTY_BLOCK, None,
                     0, 0, -1, True)
    if (data + lo < base._block.data
            or data + hi + itemsize > base._block.data + base._block.size):
        raise RuntimeError("ndws internal error: view outside its memory block")
    return _make(base._dtype, ndim, shape, strides, data, base._block, base._arena, base._gen,
                 base._epoch, base._vpos, base._writeable and r.flags.writeable)


cdef bint _owns_range(NDArray base, object res):
    # True when NumPy result `res` is a view into base's block (not a fresh copy).
    cdef cnp.ndarray r
    if not isinstance(res, np.ndarray):
        return False
    r = <cnp.ndarray>res
    if cnp.PyArray_SIZE(r) == 0:
        return False
    cdef char* data = <char*>cnp.PyArray_DATA(r)
    return base._block.data <= data < base._block.data + base._block.size


cdef NDArray _from_result(NDArray base, object res):
    # A NumPy result of a view-producing function: a view if it still points into base's
    # memory, otherwise (NumPy had to copy) a copy placed like any new array.
    if _owns_range(base, res):
        return _view_of(base, res)
    return _copy_numpy(res, None, False)


cdef NDArray _copy_numpy(object src, Arena target, bint detached):
    # A new array in the usual place holding a copy of NumPy array `src`.
    cdef cnp.ndarray s = <cnp.ndarray>src
    dt = s.dtype
    _check_dtype(dt)
    cdef NDArray out = _alloc_like(dt, cnp.PyArray_NDIM(s), <Py_ssize_t*>cnp.PyArray_DIMS(s),
                                   <Py_ssize_t*>cnp.PyArray_STRIDES(s), dt.itemsize, "K",
                                   s.flags.c_contiguous, s.flags.f_contiguous, target, detached)
    if out._size:
        np.copyto(np_view(out), s, casting="unsafe")  # same shape and a castable dtype: can't fail
    return out


# -- fill: the one element-wise loop the core owns -------------------------------------------------
# Dense arrays of the common dtypes are filled here; anything where NumPy's conversion rules
# could differ from a C cast (big ints into floats, floats into ints, other dtypes) goes
# through NumPy. Above NOGIL_BYTES the loop runs without the GIL (docs/architecture.md,
# invariant 5).

cdef object _EXACT_INT_IN_DOUBLE = 1 << 53


ctypedef fused _fill_t:
    double
    float
    int64_t
    int32_t


cdef void _fill_loop(_fill_t* p, Py_ssize_t n, _fill_t v) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        p[i] = v


cdef void _fill_run(_fill_t* p, Py_ssize_t n, _fill_t v, bint big) noexcept:
    # releasing the GIL costs more than filling a small array
    if big:
        with nogil:
            _fill_loop(p, n, v)
    else:
        _fill_loop(p, n, v)


cdef bint _fill_fast(NDArray a, object value) except -1:
    cdef char code
    cdef Py_ssize_t n = a._size
    cdef bint big = release_gil(n * a._itemsize, 1)
    if (n == 0 or not a._writeable or not (_c_contiguous(a) or _f_contiguous(a))
            or _foreign(a)):
        return False
    code = ord(a._dtype.char)
    t = type(value)
    if code == b'd' or code == b'f':
        if not (t is float
                or (t is int and -_EXACT_INT_IN_DOUBLE <= value <= _EXACT_INT_IN_DOUBLE)):
            return False
        if code == b'd':
            _fill_run(<double*>a._data, n, <double>value, big)
        else:
            _fill_run(<float*>a._data, n, <float><double>value, big)
        return True
    if not (t is int or t is bool):
        return False
    if a._itemsize == 8 and (code == b'l' or code == b'q'):
        if not -(1 << 63) <= value < (1 << 63):
            return False
        _fill_run(<int64_t*>a._data, n, <int64_t>value, big)
        return True
    if a._itemsize == 4 and (code == b'i' or code == b'l'):
        if not -(1 << 31) <= value < (1 << 31):
            return False
        _fill_run(<int32_t*>a._data, n, <int32_t>value, big)
        return True
    if code == b'?' and t is bool:
        memset(a._data, 1 if value else 0, n)
        return True
    return False


cdef bint _c_contiguous(NDArray a) noexcept:
    cdef Py_ssize_t s = a._itemsize
    cdef int i
    if a._size == 0:
        return True
    for i in range(a._ndim - 1, -1, -1):
        if a._shape[i] != 1:
            if a._strides[i] != s:
                return False
            s *= a._shape[i]
    return True


cdef bint _f_contiguous(NDArray a) noexcept:
    cdef Py_ssize_t s = a._itemsize
    cdef int i
    if a._size == 0:
        return True
    for i in range(a._ndim):
        if a._shape[i] != 1:
            if a._strides[i] != s:
                return False
            s *= a._shape[i]
    return True


cdef NDArray _copy_array(NDArray a, Arena target, bint detached):
    # A C-contiguous copy of (already validated) `a` placed in target / current / detached.
    cdef NDArray out = new_array(a._dtype, a._ndim, a._shape, False, False, target, detached)
    if a._size == 0:
        return out
    if _c_contiguous(a) and not _foreign(a):
        memcpy(out._data, a._data, a._size * a._itemsize)
    else:
        np.copyto(np_view(out), np_view(a))
    return out


cdef class _ArrayFlags:
    cdef NDArray a

    @property
    def c_contiguous(self):
        return _c_contiguous(self.a)

    @property
    def f_contiguous(self):
        return _f_contiguous(self.a)

    @property
    def writeable(self):
        return self.a._writeable

    @property
    def owndata(self):
        return self.a._owns

    def __getitem__(self, key):
        names = {"C_CONTIGUOUS": "c_contiguous", "C": "c_contiguous",
                 "F_CONTIGUOUS": "f_contiguous", "F": "f_contiguous",
                 "WRITEABLE": "writeable", "W": "writeable", "OWNDATA": "owndata"}
        return getattr(self, names[key])

    def __repr__(self):
        return (f"  C_CONTIGUOUS : {self.c_contiguous}\n  F_CONTIGUOUS : {self.f_contiguous}\n"
                f"  OWNDATA : {self.owndata}\n  WRITEABLE : {self.writeable}")


cdef inline bint _is_basic_key_item(object k):
    return (k is None or k is Ellipsis or isinstance(k, slice)
            or (isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))))


cdef bint _is_basic_key(object key):
    if isinstance(key, tuple):
        for k in key:
            if not _is_basic_key_item(k):
                return False
        return True
    return _is_basic_key_item(key)


cdef object _key_to_numpy(object key, str op):
    # NDArrays used as indices become validated NumPy views.
    if isinstance(key, NDArray):
        check_array(<NDArray>key, op, "key")
        return np_view(<NDArray>key)
    if isinstance(key, tuple):
        return tuple([_key_to_numpy(k, op) for k in key])
    if isinstance(key, list):
        return [_key_to_numpy(k, op) for k in key]
    return key


cdef object _operand(object x, object op, object role):
    # An operand for NumPy: NDArrays become validated views, everything else passes through.
    if isinstance(x, NDArray):
        check_array(<NDArray>x, op, role)
        return np_view(<NDArray>x)
    return x


# -- DLPack (docs/workspaces.md, "NumPy interop") ----------------------------------------------
# The structs of dlpack.h (v1.0), declared here so the build needs no extra header. A DLPack
# capsule is an export like a buffer: the block's export count holds it until the consumer's
# deleter runs, so a cycle end leaves the block to it (docs/architecture.md, invariant 6).

cdef extern from *:
    """
    #include <stdint.h>
    typedef struct { uint32_t major; uint32_t minor; } ndws_DLPackVersion;
    typedef struct { int32_t device_type; int32_t device_id; } ndws_DLDevice;
    typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } ndws_DLDataType;
    typedef struct {
        void *data; ndws_DLDevice device; int32_t ndim; ndws_DLDataType dtype;
        int64_t *shape; int64_t *strides; uint64_t byte_offset;
    } ndws_DLTensor;
    typedef struct ndws_DLManagedTensor {
        ndws_DLTensor dl_tensor; void *manager_ctx;
        void (*deleter)(struct ndws_DLManagedTensor *self);
    } ndws_DLManagedTensor;
    typedef struct ndws_DLManagedTensorVersioned {
        ndws_DLPackVersion version; void *manager_ctx;
        void (*deleter)(struct ndws_DLManagedTensorVersioned *self);
        uint64_t flags; ndws_DLTensor dl_tensor;
    } ndws_DLManagedTensorVersioned;
    """
    ctypedef struct DLPackVersion "ndws_DLPackVersion":
        uint32_t major
        uint32_t minor
    ctypedef struct DLDevice "ndws_DLDevice":
        int32_t device_type
        int32_t device_id
    ctypedef struct DLDataType "ndws_DLDataType":
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct DLTensor "ndws_DLTensor":
        void* data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset
    ctypedef struct DLManagedTensor "ndws_DLManagedTensor":
        DLTensor dl_tensor
        void* manager_ctx
        void (*deleter)(DLManagedTensor*) noexcept
    ctypedef struct DLManagedTensorVersioned "ndws_DLManagedTensorVersioned":
        DLPackVersion version
        void* manager_ctx
        void (*deleter)(DLManagedTensorVersioned*) noexcept
        uint64_t flags
        DLTensor dl_tensor

cdef enum:
    _DL_CPU = 1
    _DL_INT = 0
    _DL_UINT = 1
    _DL_FLOAT = 2
    _DL_COMPLEX = 5
    _DL_BOOL = 6
    _DL_READ_ONLY = 1
    _DL_IS_COPIED = 2

#: the DLPack version ndws produces (and the newest it understands)
DLPACK_VERSION = (1, 0)


cdef void _dl_release(void* ctx) noexcept with gil:
    # the manager context is an _Export: dropping it gives back the export count
    Py_DECREF(<object>ctx)


cdef void _dl_deleter(DLManagedTensor* t) noexcept with gil:
    if t != NULL:
        _dl_release(t.manager_ctx)
        free(t)


cdef void _dl_deleter_versioned(DLManagedTensorVersioned* t) noexcept with gil:
    if t != NULL:
        _dl_release(t.manager_ctx)
        free(t)


cdef void _dl_capsule_destructor(object capsule) noexcept:
    # a capsule the consumer never took (still named "dltensor") frees its tensor
    cdef DLManagedTensor* t
    if PyCapsule_IsValid(capsule, b"dltensor"):
        t = <DLManagedTensor*>PyCapsule_GetPointer(capsule, b"dltensor")
        t.deleter(t)


cdef void _dl_capsule_destructor_versioned(object capsule) noexcept:
    cdef DLManagedTensorVersioned* t
    if PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        t = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        t.deleter(t)


cdef int _dl_dtype(object dt, DLDataType* out) except -1:
    cdef str kind = dt.kind
    out.lanes = 1
    out.bits = <uint8_t>(dt.itemsize * 8)
    if kind == "b":
        out.code = _DL_BOOL
    elif kind == "i":
        out.code = _DL_INT
    elif kind == "u":
        out.code = _DL_UINT
    elif kind == "f" and dt.itemsize <= 8:
        out.code = _DL_FLOAT
    elif kind == "c" and dt.itemsize <= 16:
        out.code = _DL_COMPLEX
    else:
        raise BufferError(f"DLPack has no type for dtype {dt!r}")
    return 0


cdef object _dlpack_capsule(NDArray a, bint versioned, bint copied):
    # One malloc holds the managed tensor and its int64 shape and strides (in elements).
    cdef size_t head = sizeof(DLManagedTensorVersioned) if versioned else sizeof(DLManagedTensor)
    cdef char* mem
    cdef DLTensor* t
    cdef int64_t* dims
    cdef int i
    cdef _Export ctx
    for i in range(a._ndim):
        if a._strides[i] % a._itemsize:
            raise BufferError(f"DLPack strides count elements; this array's strides "
                              f"{a.strides} are not multiples of its itemsize {a._itemsize}")
    mem = <char*>malloc(head + 2 * (a._ndim + 1) * sizeof(int64_t))
    if mem == NULL:
        raise MemoryError()
    dims = <int64_t*>(mem + head)
    if versioned:
        t = &(<DLManagedTensorVersioned*>mem).dl_tensor
    else:
        t = &(<DLManagedTensor*>mem).dl_tensor
    try:
        _dl_dtype(a._dtype, &t.dtype)
    except BaseException:
        free(mem)
        raise
    # counted before anything else can run: the owner's cycle end now leaves the block to it
    ctx = _Export.__new__(_Export)
    ctx.block = a._block
    ctx.array = a
    a._block.exports += 1
    Py_INCREF(ctx)
    t.data = a._data
    t.device.device_type = _DL_CPU
    t.device.device_id = 0
    t.ndim = a._ndim
    t.shape = dims
    t.strides = dims + a._ndim + 1
    t.byte_offset = 0
    for i in range(a._ndim):
        t.shape[i] = a._shape[i]
        t.strides[i] = a._strides[i] // a._itemsize
    if versioned:
        (<DLManagedTensorVersioned*>mem).version.major = DLPACK_VERSION[0]
        (<DLManagedTensorVersioned*>mem).version.minor = DLPACK_VERSION[1]
        (<DLManagedTensorVersioned*>mem).manager_ctx = <void*>ctx
        (<DLManagedTensorVersioned*>mem).deleter = _dl_deleter_versioned
        (<DLManagedTensorVersioned*>mem).flags = ((0 if a._writeable else _DL_READ_ONLY)
                                                  | (_DL_IS_COPIED if copied else 0))
        return PyCapsule_New(mem, b"dltensor_versioned", _dl_capsule_destructor_versioned)
    (<DLManagedTensor*>mem).manager_ctx = <void*>ctx
    (<DLManagedTensor*>mem).deleter = _dl_deleter
    return PyCapsule_New(mem, b"dltensor", _dl_capsule_destructor)


def from_dlpack(x, *, device=None, copy=None):
    """An NDArray of `x`'s memory, through the DLPack protocol (Array API ``from_dlpack``).

    Parameters
    ----------
    x : object with ``__dlpack__`` and ``__dlpack_device__``
        A CPU tensor: a NumPy array, a PyTorch CPU tensor, an NDArray, ...
    device : {None, "cpu"}
    copy : bool or None
        None or False: share `x`'s memory (the result is detached and keeps `x`'s memory
        alive, like `from_numpy`); True: a copy, placed like any new array (the current
        workspace, else detached memory).

    Returns
    -------
    NDArray

    Examples
    --------
    >>> import numpy as np, ndws
    >>> a = ndws.from_dlpack(np.arange(3.0))
    >>> a.tolist(), a.is_attached()
    ([0.0, 1.0, 2.0], False)
    """
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"x: expected an object with __dlpack__ (a DLPack tensor), got "
                        f"{type(x).__name__}")
    if device not in (None, "cpu"):
        raise ValueError(f"device: ndws arrays live on the CPU, got {device!r}")
    if not (copy is None or copy is True or copy is False):
        raise ValueError(f"copy: expected True, False or None, got {copy!r}")
    view = np.from_dlpack(x)       # never copies a CPU tensor
    if copy:
        return array(view)
    return from_numpy(view)


# Untracked by the cyclic GC, like numpy.ndarray: creating an array in a hot loop must not
# count toward gen-0 collections. An NDArray refers to its dtype, memory block and birth
# workspace, none of which refers back to arrays.
@cython.freelist(64)
@cython.no_gc
cdef class NDArray:
    """An N-dimensional array whose memory may live in a workspace.

    Create arrays with `ndws.empty`, `ndws.zeros`, `ndws.array` and friends: they are placed in
    the calling thread's current workspace, or in ordinary (detached) memory when none is
    current. Every operation checks that the array is still valid (its workspace is open and
    has not started a new cycle since, or its ring has not passed it) and raises
    `ndws.WorkspaceError` otherwise.

    Calling ``NDArray(shape, dtype=float, order="C")`` is the same as `ndws.empty`.
    """

    def __cinit__(self):
        # a valid empty array whatever happens next (NDArray.__new__ from Python included)
        # (the allocator zeroed the object: the size and the one dimension are 0 already)
        self._shape = self._dims
        self._strides = self._dims + NDWS_INLINE_DIMS
        self._data = _EMPTY_BLOCK.data
        self._block = _EMPTY_BLOCK
        self._dtype = _F64
        self._itemsize = 8
        self._ndim = 1
        self._strides[0] = 8
        self._writeable = True

    def __dealloc__(self):
        if self._shape != self._dims:
            free(self._shape)

    def __init__(self, shape, dtype=None, order="C"):
        # Runs once: a second call would drop the memory block that live views, exports and
        # memoryviews of this object still point into.
        if self._initialized:
            raise TypeError("NDArray.__init__ can't re-initialise an existing array; create a "
                            "new one with ndws.empty (or NDArray(shape, dtype))")
        cdef NDArray tmp = empty(shape, dtype, order)
        cdef int i
        _set_ndim(self, tmp._ndim)
        self._initialized = True
        self._data = tmp._data
        self._block = tmp._block
        self._dtype = tmp._dtype
        self._itemsize = tmp._itemsize
        for i in range(tmp._ndim):
            self._shape[i] = tmp._shape[i]
            self._strides[i] = tmp._strides[i]
        self._size = tmp._size
        self._owns = tmp._owns
        self._arena = tmp._arena
        self._gen = tmp._gen
        self._epoch = tmp._epoch
        self._vpos = tmp._vpos

    # -- basic attributes -----------------------------------------------------------------------

    @property
    def shape(self):
        """Tuple of dimensions."""
        return _shape_tuple(self._ndim, self._shape)

    @property
    def strides(self):
        """Tuple of byte steps per dimension."""
        return _shape_tuple(self._ndim, self._strides)

    @property
    def dtype(self):
        """The NumPy dtype of the elements."""
        return self._dtype

    @property
    def ndim(self):
        """Number of dimensions."""
        return self._ndim

    @property
    def size(self):
        """Number of elements."""
        return self._size

    @property
    def itemsize(self):
        """Bytes per element."""
        return self._itemsize

    @property
    def nbytes(self):
        """Bytes of the elements (size * itemsize)."""
        return self._size * self._itemsize

    @property
    def flags(self):
        """Memory layout flags (C_CONTIGUOUS, F_CONTIGUOUS, OWNDATA, WRITEABLE)."""
        f = _ArrayFlags()
        f.a = self
        return f

    @property
    def workspace_id(self):
        """Id of the workspace the array was born in; None when detached."""
        return None if self._arena is None else self._arena._id

    @property
    def workspace(self):
        """The workspace the array was born in; None when detached."""
        return self._arena

    @property
    def generation(self):
        """The birth workspace's generation when the array was created (0 when detached)."""
        return self._gen

    @property
    def memory_kind(self):
        """Where the array's memory lives: ``"main"`` (the workspace buffer or ring),
        ``"spill"``, ``"pinned"``, ``"external"`` (allocated while the workspace was toggled
        off), ``"detached"``, ``"foreign"`` (a NumPy array's, via `from_numpy`), ``"mmap"`` or
        ``"static"`` (zero-size arrays). Useful to see whether a loop still spills."""
        return self._block.kind_name

    @property
    def T(self):
        """The transposed view (``transpose()``)."""
        return self.transpose()

    @property
    def stale(self):
        """None for a usable array, else why it is not: ``"leaked"``, ``"outdated"``,
        ``"overwritten"`` or ``"destroyed"``."""
        return _stale_kind(self)

    def __len__(self):
        if self._ndim == 0:
            raise TypeError("len() of unsized object")
        return self._shape[0]

    # -- workspace-side methods (ND4J §2.9) -----------------------------------------------------

    def is_attached(self):
        """True when the array lives in a workspace (empty arrays never do)."""
        return self._arena is not None

    def is_in_scope(self):
        """True for detached arrays; otherwise whether the birth workspace is open.

        Like ND4J, this does not look at generations: use `stale` for the full check.
        """
        return self._arena is None or self._arena._is_open

    def detach(self):
        """A copy in ordinary memory that outlives every workspace; detached arrays return
        themselves."""
        if self._arena is None:
            return self
        _assert_valid(self, "Cannot detach INDArray", "detach")
        return _copy_array(self, None, True)

    def leverage(self):
        """Copy the array into the parent of the current workspace.

        Detached arrays, and arrays already in that parent, return themselves; with no current
        workspace or a current workspace without parent the array is detached.
        """
        _assert_valid(self, "Cannot leverage INDArray to new workspace", "leverage")
        if self._arena is None:
            return self
        current = tstate()._current
        if current is None:
            return self.detach()
        parent = (<Arena>current)._previous
        if self._arena is parent:
            return self
        if parent is None:
            return self.detach()
        return _copy_array(self, <Arena>parent, False)   # raises if the parent is closed

    def leverage_to(self, id, enforce_existence=False):
        """Copy the array into this thread's workspace `id`.

        Returns the array itself when it is detached, already in that workspace, or when no
        such workspace exists (unless `enforce_existence`, which raises
        `NoSuchWorkspaceError`). A workspace that exists but is not open raises
        ``WorkspaceError`` (kind ``"closed"``): the copy would be born stale.
        """
        _assert_valid(self, "Cannot leverage INDArray to new workspace", "leverage_to")
        if self._arena is None:
            return self
        target = tstate()._workspaces.get(id)
        if not isinstance(target, Arena):
            if enforce_existence:
                raise NoSuchWorkspaceError(id, "leverage_to")
            return self
        if self._arena is target:
            return self
        return _copy_array(self, <Arena>target, False)   # raises if the target is closed

    def leverage_or_detach(self, id):
        """`leverage_to(id)` when workspace `id` exists and is open, else `detach()`."""
        if self._arena is None:
            return self
        target = tstate()._workspaces.get(id)
        if not isinstance(target, Arena) or not (<Arena>target)._is_open:
            return self.detach()
        return self.leverage_to(id)

    def migrate(self, detach_on_no_ws=False):
        """Copy the array into the current workspace; with none, return it (or detach it when
        `detach_on_no_ws`)."""
        _assert_valid(self, "Cannot leverage INDArray to new workspace", "migrate")
        current = tstate()._current
        if current is None:
            return self.detach() if detach_on_no_ws else self
        return _copy_array(self, <Arena>current, False)

    def dup(self):
        """A copy in the current workspace (or detached memory when none is current)."""
        _assert_valid(self, "Cannot duplicate INDArray", "dup")
        return _copy_array(self, None, False)

    # -- conversion -----------------------------------------------------------------------------

    def copy(self, order="C"):
        """A copy in the current workspace (``order`` 'C', 'F', 'A' or 'K' as in NumPy)."""
        check_array(self, "copy", "a")
        if order == "C":
            return _copy_array(self, None, False)
        cdef NDArray out = _array_like(self, None, order)
        if out._size:
            np.copyto(np_view(out), np_view(self))
        return out

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def numpy(self):
        """A NumPy copy of the data, independent of every workspace."""
        check_array(self, "numpy", "a")
        return np.array(np_view(self), copy=True)

    def tolist(self):
        """The data as nested Python lists (as ``numpy.ndarray.tolist``)."""
        check_array(self, "tolist", "a")
        return np_view(self).tolist()

    def item(self, *args):
        """One element as a Python scalar (as ``numpy.ndarray.item``)."""
        check_array(self, "item", "a")
        return np_view(self).item(*args)

    def __array__(self, dtype=None, copy=None):
        """NumPy conversion with NumPy 2 semantics.

        Without a copy the result is a zero-copy view whose export is counted: if it is still
        alive when the workspace's cycle ends, the workspace leaves that memory to it.
        """
        check_array(self, "__array__", "a")
        if copy:
            return np.array(np_view(self), dtype=dtype, copy=True)
        if dtype is not None and np.dtype(dtype) != self._dtype:
            if copy is False:
                raise ValueError("Unable to avoid copy while creating an array as requested.")
            return np_view(self).astype(dtype)
        return self._export()

    def _export(self):
        cdef object descr = self._dtype
        cdef int flags = cnp.NPY_ARRAY_WRITEABLE if self._writeable else 0
        cdef _Export base = _Export.__new__(_Export)
        # counted first: from here on the owner's cycle end leaves the block to the export
        base.block = self._block
        base.array = self
        self._block.exports += 1
        Py_INCREF(descr)  # PyArray_NewFromDescr steals it
        arr = PyArray_NewFromDescr(&PyArray_Type, <_Descr*>descr, self._ndim,
                                   <cnp.npy_intp*>self._shape, <cnp.npy_intp*>self._strides,
                                   self._data, flags, NULL)
        cnp.set_array_base(arr, base)
        if _foreign(self):
            # another thread's array: still valid after the allocations above (see _Pin)
            _assert_valid(self, "Cannot read INDArray of another thread", "__array__")
        return arr

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (the Array API protocol), zero-copy unless `copy`.

        Counted like a NumPy export: if the capsule (or the tensor a consumer made of it) is
        still alive when the workspace's cycle ends, the workspace leaves this memory to it.
        `max_version` ``(1, x)`` or later gets a versioned capsule (which can say read-only);
        older consumers get the legacy one, which can't, so a read-only array refuses it.
        """
        check_array(self, "__dlpack__", "a")
        if stream is not None and stream != -1:
            raise BufferError(f"stream: ndws arrays live on the CPU, which has no streams; "
                              f"got {stream!r}")
        if dl_device is not None and tuple(dl_device) != (_DL_CPU, 0):
            raise BufferError(f"dl_device: ndws arrays live on the CPU (1, 0), got "
                              f"{dl_device!r}")
        if not (copy is None or copy is True or copy is False):
            raise ValueError(f"copy: expected True, False or None, got {copy!r}")
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        if not versioned and not self._writeable:
            raise BufferError("a read-only array can only be exported to a DLPack consumer "
                              "that accepts versioned capsules (max_version >= (1, 0))")
        src = self
        if copy:
            src = _copy_array(self, None, True)
        capsule = _dlpack_capsule(src, versioned, bool(copy))
        if _foreign(self) and not copy:
            # another thread's array: still valid after the allocations above (see _Pin)
            _assert_valid(self, "Cannot read INDArray of another thread", "__dlpack__")
        return capsule

    def __dlpack_device__(self):
        """``(1, 0)``: DLPack's CPU device."""
        return (_DL_CPU, 0)

    def __getbuffer__(self, Py_buffer* buf, int flags):
        check_array(self, "__buffer__", "a")
        if (flags & PyBUF_WRITABLE) == PyBUF_WRITABLE and not self._writeable:
            raise BufferError("NDArray is read-only")
        if (flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS and not _c_contiguous(self):
            raise BufferError("NDArray is not C-contiguous")
        if (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS and not _f_contiguous(self):
            raise BufferError("NDArray is not Fortran-contiguous")
        if ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS
                and not (_c_contiguous(self) or _f_contiguous(self))):
            raise BufferError("NDArray is not contiguous")
        if (flags & PyBUF_STRIDES) != PyBUF_STRIDES and not _c_contiguous(self):
            raise BufferError("NDArray is not C-contiguous; request strides")
        fmt = _format_cache.get(self._dtype)
        if fmt is None:
            ch = self._dtype.char
            fmt = _PEP3118.get(ch, ch.encode())
            _format_cache[self._dtype] = fmt
        buf.buf = self._data
        buf.obj = self
        buf.len = self._size * self._itemsize
        buf.readonly = 0 if self._writeable else 1
        buf.itemsize = self._itemsize
        buf.format = <char*>(<bytes>fmt) if (flags & PyBUF_FORMAT) == PyBUF_FORMAT else NULL
        buf.ndim = self._ndim
        buf.shape = self._shape if (flags & PyBUF_ND) == PyBUF_ND else NULL
        buf.strides = self._strides if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else NULL
        buf.suboffsets = NULL
        buf.internal = NULL
        self._block.exports += 1

    def __releasebuffer__(self, Py_buffer* buf):
        self._block.exports -= 1

    def astype(self, dtype, order="K", casting="unsafe", copy=True):
        """A copy converted to `dtype` (NumPy's ``astype``: layout kept with order 'K',
        unsafe casting by default); `copy=False` returns the array itself when nothing
        changes."""
        check_array(self, "astype", "a")
        dt = _as_dtype(dtype)
        if not copy and dt == self._dtype and (order in ("K", "k", "A", "a")
                                               or (order in ("C", "c") and _c_contiguous(self))
                                               or (order in ("F", "f") and _f_contiguous(self))):
            return self
        src = np_view(self)
        return _fill_new(_array_like(self, dt, order),
                         lambda v: np.copyto(v, src, casting=casting), "astype")

    def __reduce__(self):
        # Pickles carry a NumPy copy and come back detached: a workspace never travels.
        check_array(self, "pickle", "a")
        return (_unpickle, (np.array(np_view(self), copy=True),))

    def __float__(self):
        check_array(self, "float", "a")
        return float(np_view(self))

    def __int__(self):
        check_array(self, "int", "a")
        return int(np_view(self))

    def __complex__(self):
        check_array(self, "complex", "a")
        return complex(np_view(self))

    def __index__(self):
        check_array(self, "index", "a")
        return np_view(self).__index__()

    def __bool__(self):
        check_array(self, "bool", "a")
        return bool(np_view(self))

    def __repr__(self):
        kind = _stale_kind(self)
        wid = self.workspace_id
        if kind is not None:
            return (f"<ndws.NDArray shape={self.shape}, dtype={self._dtype}, "
                    f"workspace={wid!r}: {kind} (the data is no longer accessible)>")
        body = np.array2string(np_view(self), separator=", ", prefix="NDArray(",
                               threshold=1000)
        return f"NDArray({body}, dtype={self._dtype}, workspace={wid!r})"

    def __str__(self):
        kind = _stale_kind(self)
        if kind is not None:
            return repr(self)
        return str(np_view(self))

    def __format__(self, spec):
        check_array(self, "format", "a")
        return format(np_view(self), spec)

    __hash__ = None

    # -- shape ----------------------------------------------------------------------------------

    def reshape(self, *shape, order="C", copy=None):
        """The array with a new shape: a view when the memory allows it, else a copy (NumPy)."""
        check_array(self, "reshape", "a")
        if len(shape) == 1:
            shape = shape[0]
        if copy:
            # NumPy checks the new shape and order first (on a zero-stride stand-in, which
            # reshapes without copying), so a bad one allocates nothing
            np.broadcast_to(np.zeros((), self._dtype), self.shape).reshape(shape, order=order)
            return _copy_array(self, None, False).reshape(shape, order=order)
        res = np_view(self).reshape(shape, order=order, copy=copy)
        return _from_result(self, res)

    def transpose(self, *axes):
        """View with axes permuted (reversed by default)."""
        check_array(self, "transpose", "a")
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        v = np_view(self)
        return _view_of(self, v.transpose() if not axes else v.transpose(axes))

    def swapaxes(self, axis1, axis2):
        """View with two axes interchanged."""
        check_array(self, "swapaxes", "a")
        return _view_of(self, np_view(self).swapaxes(axis1, axis2))

    def squeeze(self, axis=None):
        """View without length-one axes (all of them, or those in `axis`)."""
        check_array(self, "squeeze", "a")
        return _view_of(self, np_view(self).squeeze(axis))

    def ravel(self, order="C"):
        """Flattened view when possible, else a copy."""
        check_array(self, "ravel", "a")
        return _from_result(self, np_view(self).ravel(order))

    def flatten(self, order="C"):
        """Flattened copy in the current workspace."""
        check_array(self, "flatten", "a")
        if order == "C":
            return _copy_array(self, None, False).reshape(-1)
        return _copy_numpy(np_view(self).flatten(order), None, False)

    def __iter__(self):
        check_array(self, "iter", "a")
        if self._ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return _rows(self)

    # -- indexing -------------------------------------------------------------------------------

    def __getitem__(self, key):
        check_array(self, "getitem", "a")
        if _is_basic_key(key):
            res = np_view(self)[key]
            if isinstance(res, np.ndarray):
                return _view_of(self, res)
            return res
        res = np_view(self)[_key_to_numpy(key, "getitem")]
        if isinstance(res, np.ndarray):
            return _copy_numpy(res, None, False)
        return res

    def __setitem__(self, key, value):
        check_array(self, "setitem", "a")
        v = _operand(value, "setitem", "value")
        np_view(self)[_key_to_numpy(key, "setitem")] = v

    def fill(self, value):
        """Set every element to `value` (NumPy's ``fill``)."""
        check_array(self, "fill", "a")
        if not _fill_fast(self, value):
            np_view(self).fill(value)

    def assign(self, value):
        """Copy `value` (broadcast) into this array, ND4J's ``assign``; returns self."""
        check_array(self, "assign", "a")
        np.copyto(np_view(self), _operand(value, "assign", "value"), casting="unsafe")
        return self

    # -- arithmetic (NumPy semantics; see ndws.ops for the module-level functions) -------------

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _array_ufunc(ufunc, method, inputs, kwargs)

    def __add__(self, other):
        r = _fast_binary(OP_ADD, self, other, None, "add")
        if r is not NotImplemented:
            return r
        return _binop(np.add, self, other)

    def __radd__(self, other):
        r = _fast_binary(OP_ADD, other, self, None, "add")
        if r is not NotImplemented:
            return r
        return _binop(np.add, other, self)

    def __iadd__(self, other):
        r = _fast_binary(OP_ADD, self, other, self, "add")
        if r is not NotImplemented:
            return r
        return _inplace(np.add, self, other)

    def __sub__(self, other):
        r = _fast_binary(OP_SUB, self, other, None, "subtract")
        if r is not NotImplemented:
            return r
        return _binop(np.subtract, self, other)

    def __rsub__(self, other):
        r = _fast_binary(OP_SUB, other, self, None, "subtract")
        if r is not NotImplemented:
            return r
        return _binop(np.subtract, other, self)

    def __isub__(self, other):
        r = _fast_binary(OP_SUB, self, other, self, "subtract")
        if r is not NotImplemented:
            return r
        return _inplace(np.subtract, self, other)

    def __mul__(self, other):
        r = _fast_binary(OP_MUL, self, other, None, "multiply")
        if r is not NotImplemented:
            return r
        return _binop(np.multiply, self, other)

    def __rmul__(self, other):
        r = _fast_binary(OP_MUL, other, self, None, "multiply")
        if r is not NotImplemented:
            return r
        return _binop(np.multiply, other, self)

    def __imul__(self, other):
        r = _fast_binary(OP_MUL, self, other, self, "multiply")
        if r is not NotImplemented:
            return r
        return _inplace(np.multiply, self, other)

    def __truediv__(self, other):
        r = _fast_binary(OP_DIV, self, other, None, "divide")
        if r is not NotImplemented:
            return r
        return _binop(np.true_divide, self, other)

    def __rtruediv__(self, other):
        r = _fast_binary(OP_DIV, other, self, None, "divide")
        if r is not NotImplemented:
            return r
        return _binop(np.true_divide, other, self)

    def __itruediv__(self, other):
        r = _fast_binary(OP_DIV, self, other, self, "divide")
        if r is not NotImplemented:
            return r
        return _inplace(np.true_divide, self, other)

    def __floordiv__(self, other):
        return _binop(np.floor_divide, self, other)

    def __rfloordiv__(self, other):
        return _binop(np.floor_divide, other, self)

    def __ifloordiv__(self, other):
        return _inplace(np.floor_divide, self, other)

    def __mod__(self, other):
        return _binop(np.remainder, self, other)

    def __rmod__(self, other):
        return _binop(np.remainder, other, self)

    def __imod__(self, other):
        return _inplace(np.remainder, self, other)

    def __divmod__(self, other):
        return _binop(np.divmod, self, other)

    def __rdivmod__(self, other):
        return _binop(np.divmod, other, self)

    def __pow__(self, other, mod):
        if mod is not None:
            return NotImplemented
        return _binop(np.power, self, other)

    def __rpow__(self, other, mod):
        if mod is not None:
            return NotImplemented
        return _binop(np.power, other, self)

    def __ipow__(self, other):
        return _inplace(np.power, self, other)

    def __matmul__(self, other):
        return _matmul(self, other, None)

    def __rmatmul__(self, other):
        return _matmul(other, self, None)

    def __imatmul__(self, other):
        return _matmul(self, other, self)

    def __and__(self, other):
        return _binop(np.bitwise_and, self, other)

    def __rand__(self, other):
        return _binop(np.bitwise_and, other, self)

    def __iand__(self, other):
        return _inplace(np.bitwise_and, self, other)

    def __or__(self, other):
        return _binop(np.bitwise_or, self, other)

    def __ror__(self, other):
        return _binop(np.bitwise_or, other, self)

    def __ior__(self, other):
        return _inplace(np.bitwise_or, self, other)

    def __xor__(self, other):
        return _binop(np.bitwise_xor, self, other)

    def __rxor__(self, other):
        return _binop(np.bitwise_xor, other, self)

    def __ixor__(self, other):
        return _inplace(np.bitwise_xor, self, other)

    def __lshift__(self, other):
        return _binop(np.left_shift, self, other)

    def __rlshift__(self, other):
        return _binop(np.left_shift, other, self)

    def __ilshift__(self, other):
        return _inplace(np.left_shift, self, other)

    def __rshift__(self, other):
        return _binop(np.right_shift, self, other)

    def __rrshift__(self, other):
        return _binop(np.right_shift, other, self)

    def __irshift__(self, other):
        return _inplace(np.right_shift, self, other)

    def __neg__(self):
        r = _fast_unary(OP_NEG, self, None, "negative")
        if r is not NotImplemented:
            return r
        return _ufunc_call(np.negative, (self,), None, {}, False, False)

    def __pos__(self):
        return ufunc_call(np.positive, (self,))

    def __abs__(self):
        r = _fast_unary(OP_ABS, self, None, "absolute")
        if r is not NotImplemented:
            return r
        return _ufunc_call(np.absolute, (self,), None, {}, False, False)

    def __invert__(self):
        return ufunc_call(np.invert, (self,))

    def __eq__(self, other):
        return _compare(np.equal, self, other)

    def __ne__(self, other):
        return _compare(np.not_equal, self, other)

    def __lt__(self, other):
        return _binop(np.less, self, other)

    def __le__(self, other):
        return _binop(np.less_equal, self, other)

    def __gt__(self, other):
        return _binop(np.greater, self, other)

    def __ge__(self, other):
        return _binop(np.greater_equal, self, other)

    # -- reductions and friends -----------------------------------------------------------------

    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        """Sum over `axis` (all axes by default); the result is placed like any new array."""
        return _reduce_entry(RED_SUM, "sum", self, axis, dtype, out, keepdims, 0,
                             RKW_DTYPE)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False):
        """Arithmetic mean over `axis` (see `ndws.mean`)."""
        return _reduce_entry(RED_MEAN, "mean", self, axis, dtype, out, keepdims, 0,
                             RKW_DTYPE)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False):
        """Product over `axis` (see `ndws.prod`)."""
        return reduce_call("prod", np.prod, self, axis, out, keepdims, dtype=dtype)

    def max(self, axis=None, out=None, keepdims=False):
        """Maximum over `axis` (see `ndws.max`)."""
        return _reduce_entry(RED_MAX, "max", self, axis, None, out, keepdims, 0,
                             RKW_NONE)

    def min(self, axis=None, out=None, keepdims=False):
        """Minimum over `axis` (see `ndws.min`)."""
        return _reduce_entry(RED_MIN, "min", self, axis, None, out, keepdims, 0,
                             RKW_NONE)

    def argmax(self, axis=None, out=None, keepdims=False):
        """Index of the maximum along `axis` (see `ndws.argmax`)."""
        return _reduce_entry(RED_ARGMAX, "argmax", self, axis, None, out, keepdims, 0,
                             RKW_NONE)

    def argmin(self, axis=None, out=None, keepdims=False):
        """Index of the minimum along `axis` (see `ndws.argmin`)."""
        return _reduce_entry(RED_ARGMIN, "argmin", self, axis, None, out, keepdims, 0,
                             RKW_NONE)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        """Standard deviation over `axis` (see `ndws.std`)."""
        return _reduce_entry(RED_STD, "std", self, axis, dtype, out, keepdims, ddof,
                             RKW_DDOF)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        """Variance over `axis` (see `ndws.var`)."""
        return _reduce_entry(RED_VAR, "var", self, axis, dtype, out, keepdims, ddof,
                             RKW_DDOF)

    def any(self, axis=None, out=None, keepdims=False):
        """Whether any element along `axis` is true (see `ndws.any`)."""
        return reduce_call("any", np.any, self, axis, out, keepdims)

    def all(self, axis=None, out=None, keepdims=False):
        """Whether all elements along `axis` are true (see `ndws.all`)."""
        return reduce_call("all", np.all, self, axis, out, keepdims)

    def norm(self, ord=None, axis=None, keepdims=False):
        """Vector or matrix norm (as ``numpy.linalg.norm``)."""
        return norm(self, ord, axis, keepdims)

    def clip(self, min=None, max=None, out=None):
        """Values limited to ``[min, max]`` (see `ndws.clip`)."""
        return clip(self, min, max, out=out)

    def dot(self, b, out=None):
        """Dot product with `b` (see `ndws.dot`)."""
        return dot(self, b, out=out)


def _rows(NDArray a):
    # each step re-validates through __getitem__: a stale array stops the iteration
    for i in range(a._shape[0]):
        yield a[i]


def _unpickle(data):
    return array(data, detached=True)


# ------------------------------------------------------------------------------------------------
# Native fast paths: element-wise ops and reductions for float32/float64
#
# Tried before any generic machinery (no kwargs dict, no tuples, no NumPy views, no dtype
# resolution): each returns the result, or NotImplemented when the case is not covered (the
# one "not covered" signal of every native path, the GEMM's included), and the caller
# then takes the NumPy path of "Op dispatch" below, which stays the reference oracle. Covered:
# C-contiguous operands of one float dtype, same shape or a scalar (Python int/float with
# NEP 50's weak promotion, or a one-element array of the same dtype) or a row (n,) / column
# (m, 1) broadcast; reductions over all axes or one axis of a C-contiguous array. Operands
# are classified from their fields first (no memory is read), then validated in the generic
# path's order and with its roles, so a stale array gets the very same WorkspaceError.

include "_loops.pxi"

cdef object _INTP = np.dtype(np.intp)
cdef object _SAME_KIND = "same_kind"
cdef object _ORDER_K = "K"


# Column-chunk width of reductions along a non-last axis: each task owns these many output
# columns (and a private scratch), so chunks never share a cache line between threads.
cdef Py_ssize_t _COL_CHUNK = 512

# Up to this many elements exp/log/tanh run natively (the per-call cost wins); above, NumPy's
# SIMD loops are faster than libm's scalar functions (measured: equal at ~64 float32 elements).
cdef Py_ssize_t _LIBM_MAX = 32
cdef dict _LIBM_UFUNCS = {OP_EXP: np.exp, OP_LOG: np.log, OP_TANH: np.tanh}

# ufunc -> operation code, for calls that arrive with a NumPy ufunc (np.add(a, b) on NDArrays)
cdef dict _FAST_UFUNCS = {
    np.add: OP_ADD, np.subtract: OP_SUB, np.multiply: OP_MUL, np.true_divide: OP_DIV,
    np.maximum: OP_MAX, np.minimum: OP_MIN, np.negative: OP_NEG, np.absolute: OP_ABS,
    np.square: OP_SQUARE, np.sqrt: OP_SQRT, np.exp: OP_EXP, np.log: OP_LOG, np.tanh: OP_TANH,
    np.reciprocal: OP_RECIP,
}


# Calls completed by each native kernel family, per dtype (tests prove with these that every
# fused specialisation ran): binary, unary, reductions, and exp/log/tanh handed to NumPy's SIMD.
cdef Py_ssize_t _native_hits[4][2]


def _native_calls():
    """Completed native fast-path calls so far: {family: (float32, float64)} (for tests)."""
    return {name: (_native_hits[i][0], _native_hits[i][1])
            for i, name in enumerate(("binary", "unary", "reduce", "numpy_simd"))}


cdef inline bint _fast_dtype(object dt) noexcept:
    # identity: the canonical native-order dtype objects only (a byte-swapped '>f4' is not it)
    return dt is _F32 or dt is _F64


cdef inline bint _default_ufunc_kw(object where, object casting, object order, object dtype,
                                   object subok, object signature):
    return (where is True and dtype is None and signature is None and subok is True
            and (casting is _SAME_KIND or casting == "same_kind")
            and (order is _ORDER_K or order == "K"))


cdef dict _ufunc_kw(object where, object casting, object order, object dtype, object subok,
                    object signature):
    # the keyword arguments a caller really gave, for the generic path
    kw = {}
    if where is not True:
        kw["where"] = where
    if not (casting is _SAME_KIND or casting == "same_kind"):
        kw["casting"] = casting
    if not (order is _ORDER_K or order == "K"):
        kw["order"] = order
    if dtype is not None:
        kw["dtype"] = dtype
    if subok is not True:
        kw["subok"] = subok
    if signature is not None:
        kw["signature"] = signature
    return kw


cdef bint _weak_scalar(object v, object dt, double* value) except -1:
    # A Python int/float operand under NEP 50: converted to the array's float dtype. Only
    # values the conversion takes exactly (ints) or without overflow (floats) are taken here;
    # the rest go to NumPy, which warns or raises as it does.
    cdef object t = type(v)
    cdef double d
    cdef long long i
    cdef int overflow = 0
    if t is float:
        d = PyFloat_AS_DOUBLE(v)
        if dt is _F32 and d == d and (d > FLT_MAX or d < -FLT_MAX) and not isinf(d):
            return False
        value[0] = d
        return True
    if t is int:
        i = PyLong_AsLongLongAndOverflow(v, &overflow)
        if overflow:
            return False
        # exact in the target: 2**24 for float32, 2**53 for float64
        if dt is _F32:
            if i > 16777216 or i < -16777216:
                return False
        elif i > 9007199254740992 or i < -9007199254740992:
            return False
        value[0] = <double>i
        return True
    return False


cdef bint _broadcast_layout(NDArray big, NDArray small, Py_ssize_t* m, Py_ssize_t* n,
                            Py_ssize_t* srs, bint* svec) noexcept:
    # Whether `small` broadcasts to `big`'s shape as: the same shape, one element, a trailing
    # row (leading dims of 1 allowed) or a column (same rank, last dim 1). Sets the (m, n) grid
    # over `big` and `small`'s row stride / column kind (see _bin_rows_inl).
    cdef int d = big._ndim - small._ndim, i, k
    cdef int last = big._ndim - 1
    if d < 0:
        return False
    if d == 0:
        for i in range(big._ndim):
            if big._shape[i] != small._shape[i]:
                break
        else:
            m[0] = 1; n[0] = big._size; srs[0] = 0; svec[0] = True
            return True
    if small._size == 1:
        m[0] = 1; n[0] = big._size; srs[0] = 0; svec[0] = False
        return True
    k = 0
    while k < small._ndim and small._shape[k] == 1:
        k += 1
    for i in range(k, small._ndim):
        if small._shape[i] != big._shape[i + d]:
            break
    else:
        n[0] = small._size
        m[0] = big._size // small._size if small._size else 0
        srs[0] = 0; svec[0] = True
        return True
    if d == 0 and last >= 1 and small._shape[last] == 1:
        for i in range(last):
            if big._shape[i] != small._shape[i]:
                return False
        n[0] = big._shape[last]
        m[0] = big._size // n[0] if n[0] else 0
        srs[0] = 1; svec[0] = False
        return True
    return False


cdef inline bint _same_shape(NDArray a, NDArray b) noexcept:
    cdef int i
    if a._ndim != b._ndim:
        return False
    for i in range(a._ndim):
        if a._shape[i] != b._shape[i]:
            return False
    return True


cdef bint _out_ok(NDArray o, object dt, NDArray a, NDArray b) noexcept:
    # An `out=` the kernels can write: right dtype, dense, writeable, and either disjoint from
    # each input or that very input (same start, same size: element k of one is element k of
    # the other). Partial overlaps go to NumPy, which copies first.
    if o._dtype is not dt or not o._writeable or not _c_contiguous(o) or _foreign(o):
        return False
    if a is not None and arrays_overlap(o, a) and not (o._data == a._data
                                                      and o._size == a._size):
        return False
    if b is not None and arrays_overlap(o, b) and not (o._data == b._data
                                                      and o._size == b._size):
        return False
    return True


cdef int _give_fpe(object name, int flags, NDArray made) except -1:
    # NumPy's floating-point error reporting (warn / raise / ignore per np.errstate); a result
    # this call allocated is given back when the errstate turns the flags into an exception.
    cdef bytes b = name.encode()
    try:
        if ndws_give_fpe(b, flags) == -2:
            _py_give_fpe(name, flags)
    except BaseException:
        if made is not None:
            _discard(made)
        raise
    return 0


def _py_give_fpe(name, int flags):
    # NumPy 1.x has no C entry for its error reporting: the same rules through np.geterr()
    errs = np.geterr()
    for bit, key, what in ((1, "divide", "divide by zero"), (2, "over", "overflow"),
                           (4, "under", "underflow"), (8, "invalid", "invalid value")):
        if not flags & bit:
            continue
        mode = errs[key]
        msg = f"{what} encountered in {name}"
        if mode == "warn":
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
        elif mode == "raise":
            raise FloatingPointError(msg)
        elif mode in ("call", "log"):
            handler = np.geterrcall()
            if mode == "call":
                handler(what, bit)
            else:
                handler.write(f"Warning: {msg}\n")
        elif mode == "print":
            sys.stderr.write(f"Warning: {msg}\n")


cdef object _fast_binary(int op, object x1, object x2, object out, object name):
    """x1 op x2 natively, or NotImplemented when the case is not covered (see the section
    comment)."""
    cdef NDArray a = None, b = None, big, o
    cdef NDArray made = None
    cdef object dt
    cdef Py_ssize_t m = 1, n, srs = 0, xrs, yrs
    cdef bint svec = False, xvec, yvec, a_big
    cdef double sval
    cdef float32_t s32
    cdef float64_t s64
    cdef char* xp
    cdef char* yp
    cdef int nt, fl
    if isinstance(x1, NDArray):
        a = <NDArray>x1
    if isinstance(x2, NDArray):
        b = <NDArray>x2
    if a is not None:
        dt = a._dtype
        if not _fast_dtype(dt) or not _c_contiguous(a) or _foreign(a):
            return NotImplemented
        if b is not None:
            if b._dtype is not dt or not _c_contiguous(b) or _foreign(b):
                return NotImplemented
            if _broadcast_layout(a, b, &m, &n, &srs, &svec):
                a_big = True
            elif _broadcast_layout(b, a, &m, &n, &srs, &svec):
                a_big = False
            else:
                return NotImplemented
        elif not _weak_scalar(x2, dt, &sval):
            return NotImplemented
        else:
            a_big = True
            n = a._size
    elif b is not None:
        dt = b._dtype
        if (not _fast_dtype(dt) or not _c_contiguous(b) or _foreign(b)
                or not _weak_scalar(x1, dt, &sval)):
            return NotImplemented
        a_big = False
        n = b._size
    else:
        return NotImplemented
    big = a if a_big else b
    if out is not None:
        if not isinstance(out, NDArray):
            return NotImplemented
        o = <NDArray>out
        if not _same_shape(o, big) or not _out_ok(o, dt, a, b):
            return NotImplemented
    if a is not None:
        check_array(a, name, "x1")
    if b is not None:
        check_array(b, name, "x2")
    if out is None:
        o = made = new_result(dt, big._ndim, big._shape, name)
    else:
        check_array(o, name, "out")
    if m * n == 0:
        return o
    # operand pointers: the big one walks rows of n; the other per _broadcast_layout, or a
    # scalar held in a local (typed below) that the kernel reads as a one-element operand
    s32 = <float32_t>sval
    s64 = sval
    if a is not None and b is not None:
        if a_big:
            xp, xrs, xvec = a._data, n, True
            yp, yrs, yvec = b._data, srs, svec
        else:
            xp, xrs, xvec = a._data, srs, svec
            yp, yrs, yvec = b._data, n, True
    elif a is not None:
        xp, xrs, xvec = a._data, n, True
        yp = <char*>&s32 if dt is _F32 else <char*>&s64
        yrs, yvec = 0, False
    else:
        xp = <char*>&s32 if dt is _F32 else <char*>&s64
        xrs, xvec = 0, False
        yp, yrs, yvec = b._data, n, True
    nt = threads_for(m * n, GRAIN_ELEMENTWISE)
    if dt is _F32:
        if release_gil(m * n * 4, nt):
            with nogil:
                fl = binary_kernel(op, <float32_t*>o._data, <const float32_t*>xp, xrs, xvec,
                                   <const float32_t*>yp, yrs, yvec, m, n, nt)
        else:
            fl = binary_kernel(op, <float32_t*>o._data, <const float32_t*>xp, xrs, xvec,
                               <const float32_t*>yp, yrs, yvec, m, n, 1)
    else:
        if release_gil(m * n * 8, nt):
            with nogil:
                fl = binary_kernel(op, <float64_t*>o._data, <const float64_t*>xp, xrs, xvec,
                                   <const float64_t*>yp, yrs, yvec, m, n, nt)
        else:
            fl = binary_kernel(op, <float64_t*>o._data, <const float64_t*>xp, xrs, xvec,
                               <const float64_t*>yp, yrs, yvec, m, n, 1)
    _native_hits[0][dt is _F64] += 1
    # maximum/minimum clear their flags in NumPy (ordered compares with NaN raise "invalid")
    if fl and op != OP_MAX and op != OP_MIN:
        _give_fpe(name, fl, made)
    return o


cdef object _fast_unary(int op, object x, object out, object name):
    """f(x) natively, or NotImplemented when the case is not covered."""
    cdef NDArray a, o
    cdef NDArray made = None
    cdef object dt
    cdef Py_ssize_t n
    cdef int nt, fl
    if not isinstance(x, NDArray):
        return NotImplemented
    a = <NDArray>x
    dt = a._dtype
    if not _fast_dtype(dt) or not _c_contiguous(a) or _foreign(a):
        return NotImplemented
    if out is not None:
        if not isinstance(out, NDArray):
            return NotImplemented
        o = <NDArray>out
        if not _same_shape(o, a) or not _out_ok(o, dt, a, None):
            return NotImplemented
    check_array(a, name, "x")
    if out is None:
        o = made = new_result(dt, a._ndim, a._shape, name)
    else:
        check_array(o, name, "out")
    n = a._size
    if n == 0:
        return o
    if n > _LIBM_MAX and (op == OP_EXP or op == OP_LOG or op == OP_TANH):
        # NumPy's own SIMD exp/log/tanh (AVX-512 here) beat a libm call per element from a few
        # dozen elements on (tanh 1M float32: 0.24 ms vs 22 ms): they compute into the placed
        # result directly, still skipping the generic dispatch. NumPy releases the GIL and
        # reports floating-point errors itself.
        try:
            _LIBM_UFUNCS[op](np_view(a), out=np_view(o))
        except BaseException:
            if made is not None:
                _discard(made)
            raise
        _native_hits[3][dt is _F64] += 1
        return o
    nt = threads_for(n, GRAIN_ELEMENTWISE)
    if dt is _F32:
        if release_gil(n * 4, nt):
            with nogil:
                fl = unary_kernel(op, <float32_t*>o._data, <const float32_t*>a._data, n, nt)
        else:
            fl = unary_kernel(op, <float32_t*>o._data, <const float32_t*>a._data, n, 1)
    else:
        if release_gil(n * 8, nt):
            with nogil:
                fl = unary_kernel(op, <float64_t*>o._data, <const float64_t*>a._data, n, nt)
        else:
            fl = unary_kernel(op, <float64_t*>o._data, <const float64_t*>a._data, n, 1)
    _native_hits[1][dt is _F64] += 1
    if fl:
        _give_fpe(name, fl, made)
    return o


# -- reductions --

@cython.cdivision(True)
cdef inline floating_t _finish(int kind, floating_t s, Py_ssize_t count) noexcept nogil:
    # NumPy divides by the count as an intp: in double, then rounds to the dtype
    if kind == RED_SUM:
        return s
    return <floating_t>(<double>s / <double>count)


cdef inline floating_t _root(int kind, floating_t v) noexcept nogil:
    if kind == RED_STD:
        if floating_t is float32_t:
            return sqrtf(v)
        else:
            return c_sqrt(v)
    return v


cdef inline int _flat_row(int kind, const floating_t* A__i, Py_ssize_t r, Py_ssize_t den,
                          floating_t* O__r, int64_t* K__r, Py_ssize_t i,
                          bint track) noexcept nogil:
    # row i of _reduce_flat; with `track`, returns the NPY_FPE_* flags of its sums (the serial
    # caller clears and reads the flags once around all rows instead)
    cdef floating_t s, mu, q
    if kind == RED_MAX or kind == RED_MIN:
        O__r[i] = extreme(A__i, r, kind == RED_MAX)
        return 0
    if kind == RED_ARGMAX or kind == RED_ARGMIN:
        K__r[i] = arg_extreme(A__i, r, kind == RED_ARGMAX)
        return 0
    if track:
        ndws_fpe_clear()
    # np.add.reduce starts from the identity 0 and adds the row's pairwise sum
    s = <floating_t>0 + pairwise_sum(A__i, r)
    if kind == RED_VAR or kind == RED_STD:
        mu = _finish(RED_MEAN, s, r)
        q = <floating_t>0 + pairwise_ssd(A__i, r, mu)
        O__r[i] = _root(kind, _finish(RED_VAR, q, den))
    else:
        O__r[i] = _finish(kind, s, r)
    return ndws_fpe_read() if track else 0


cdef int _reduce_flat(int kind, const floating_t* A__ri, Py_ssize_t outer, Py_ssize_t r,  # IN
                      Py_ssize_t den,                                                     # IN
                      floating_t* O__r, int64_t* K__r,                                    # OUT
                      int nthreads) noexcept nogil:
    """Reduce each of `outer` dense rows of length r >= 1 (the last axis, or everything when
    outer == 1). Returns the NPY_FPE_* flags of the sums. Rows run in parallel; one long row
    runs its pairwise tree's top levels (sums) or fixed chunks (extremes) in parallel, with the
    serial result's bits either way."""
    cdef Py_ssize_t i, c, chunk, lo, hi, best_i
    cdef int fl = 0
    cdef floating_t s, mu, q
    cdef Py_ssize_t idx[_TREE_LEAVES]
    cdef floating_t vals[_TREE_LEAVES]
    cdef bint want_max = kind == RED_MAX or kind == RED_ARGMAX
    cdef bint extremes = (kind == RED_MAX or kind == RED_MIN or kind == RED_ARGMAX
                          or kind == RED_ARGMIN)
    if nthreads <= 1:
        ndws_fpe_clear()
        for i in range(outer):
            _flat_row(kind, A__ri + i * r, r, den, O__r, K__r, i, False)
        return 0 if extremes else ndws_fpe_read()
    if outer > 1:
        for i in prange(outer, schedule='static', num_threads=nthreads):
            fl |= _flat_row(kind, A__ri + i * r, r, den, O__r, K__r, i, True)
        return fl
    if kind == RED_MAX or kind == RED_MIN:
        # fixed chunks (by length only), folded in order with the serial rule (_pick)
        chunk = (r + _TREE_LEAVES - 1) // _TREE_LEAVES
        for c in prange(_TREE_LEAVES, schedule='static', num_threads=nthreads):
            lo = c * chunk
            hi = lo + chunk
            if hi > r:
                hi = r
            if lo < hi:
                vals[c] = extreme(A__ri + lo, hi - lo, want_max)
        s = vals[0]
        for c in range(1, _TREE_LEAVES):
            if c * chunk < r:
                s = _pick(want_max, s, vals[c])
        O__r[0] = s
        return 0
    if extremes:
        # argmax/argmin: fixed chunks, then the chunks in order with the serial rule: a NaN
        # ends the search, otherwise only a strictly better value replaces the best (the
        # first index of the extreme)
        chunk = (r + _TREE_LEAVES - 1) // _TREE_LEAVES
        for c in prange(_TREE_LEAVES, schedule='static', num_threads=nthreads):
            lo = c * chunk
            hi = lo + chunk
            if hi > r:
                hi = r
            idx[c] = -1
            if lo < hi:
                idx[c] = lo + arg_extreme(A__ri + lo, hi - lo, want_max)
        best_i = idx[0]
        s = A__ri[best_i]
        for c in range(1, _TREE_LEAVES):
            if s != s or idx[c] < 0:
                break
            q = A__ri[idx[c]]
            if q != q or ((q > s) if want_max else (q < s)):
                s = q
                best_i = idx[c]
        K__r[0] = best_i
        return 0
    if r <= PW_BLOCKSIZE * _TREE_LEAVES:
        return _flat_row(kind, A__ri, r, den, O__r, K__r, 0, True)
    ndws_fpe_clear()
    s = <floating_t>0 + tree_sum(A__ri, r, False, <floating_t>0, nthreads)
    fl = ndws_fpe_read()
    if kind == RED_VAR or kind == RED_STD:
        mu = _finish(RED_MEAN, s, r)
        ndws_fpe_clear()
        q = <floating_t>0 + tree_sum(A__ri, r, True, mu, nthreads)
        fl |= ndws_fpe_read()
        O__r[0] = _root(kind, _finish(RED_VAR, q, den))
    else:
        O__r[0] = _finish(kind, s, r)
    return fl


cdef inline int _strided_unit(int kind, const floating_t* A__orj, Py_ssize_t r,
                              Py_ssize_t inner, Py_ssize_t den, floating_t* O__oj,
                              int64_t* K__oj, floating_t* sc, Py_ssize_t levels,
                              Py_ssize_t cw, Py_ssize_t nch, Py_ssize_t u) noexcept nogil:
    # task u of _reduce_strided: outer index u // nch, columns [lo, lo + cw) of the row
    cdef Py_ssize_t oi = u // nch, lo = (u % nch) * cw, w = inner - lo, j
    cdef const floating_t* base
    cdef floating_t* o
    cdef floating_t* acc = sc + levels * cw
    if w > cw:
        w = cw
    base = A__orj + oi * r * inner + lo
    o = O__oj + oi * inner + lo
    if kind == RED_MAX or kind == RED_MIN:
        extreme_rows(base, r, inner, w, kind == RED_MAX, o, NULL, False)
        return 0
    if kind == RED_ARGMAX or kind == RED_ARGMIN:
        extreme_rows(base, r, inner, w, kind == RED_ARGMAX, acc, K__oj + oi * inner + lo, True)
        return 0
    ndws_fpe_clear()
    sum_rows(base, r, inner, w, False, NULL, o, sc, cw)
    if kind == RED_VAR or kind == RED_STD:
        for j in range(w):
            o[j] = _finish(RED_MEAN, o[j], r)
        sum_rows(base, r, inner, w, True, o, acc, sc, cw)
        for j in range(w):
            o[j] = _root(kind, _finish(RED_VAR, acc[j], den))
    elif kind == RED_MEAN:
        for j in range(w):
            o[j] = _finish(RED_MEAN, o[j], r)
    return ndws_fpe_read()


cdef int _reduce_strided(int kind, const floating_t* A__orj, Py_ssize_t outer, Py_ssize_t r,
                         Py_ssize_t inner, Py_ssize_t den,                         # IN
                         floating_t* O__oj, int64_t* K__oj,                        # OUT
                         floating_t* scratch, Py_ssize_t per_thread,
                         int nthreads) noexcept nogil:
    """Reduce A viewed as (outer, r, inner), inner > 1, over its middle axis, row after row
    (sum_rows / extreme_rows). Tasks are (outer, column chunk) pairs; each thread works in its
    own `per_thread` slice of `scratch` (rows_levels(r) + 1 rows of the chunk width; unused
    by max/min). Chunks depend on `inner` only, and every output element is computed the
    same way whatever the thread count."""
    cdef Py_ssize_t cw = _chunk_width(inner)
    cdef Py_ssize_t nch = (inner + cw - 1) // cw
    cdef Py_ssize_t u, levels = rows_levels(r)
    cdef int fl = 0
    if nthreads <= 1:
        for u in range(outer * nch):
            fl |= _strided_unit(kind, A__orj, r, inner, den, O__oj, K__oj, scratch, levels,
                                cw, nch, u)
        return fl
    for u in prange(outer * nch, schedule='static', num_threads=nthreads):
        fl |= _strided_unit(kind, A__orj, r, inner, den, O__oj, K__oj,
                            scratch + threadid() * per_thread, levels, cw, nch, u)
    return fl


cdef inline Py_ssize_t _chunk_width(Py_ssize_t inner) noexcept nogil:
    return inner if inner < _COL_CHUNK else _COL_CHUNK


cdef object _fast_reduce(int kind, object a, object axis, object dtype, object out,
                         object keepdims, object ddof, object name):
    """A reduction natively, or None when not covered: float32/float64 C-contiguous
    non-empty `a`, axis None or one int, no dtype change, a dense disjoint `out`. Sums that
    raise floating-point flags are redone by NumPy, so warnings and errstate are NumPy's."""
    cdef NDArray arr, o
    cdef NDArray made = None
    cdef object dt, rdt
    cdef int ndim, ax = -1, i, nd = 0, nt, fl = 0
    cdef Py_ssize_t outer = 1, r, inner = 1, den = 0, levels, per_thread = 0
    cdef Py_ssize_t shape[NDWS_MAXDIMS]
    cdef bint arg = kind == RED_ARGMAX or kind == RED_ARGMIN
    cdef void* scratch = NULL
    cdef double small_scratch[256]
    if not isinstance(a, NDArray):
        return NotImplemented
    arr = <NDArray>a
    dt = arr._dtype
    if not _fast_dtype(dt) or arr._size == 0 or not _c_contiguous(arr) or _foreign(arr):
        return NotImplemented
    if dtype is not None and (arg or _as_dtype(dtype) is not dt):
        return NotImplemented
    if keepdims is not True and keepdims is not False:
        return NotImplemented
    ndim = arr._ndim
    if axis is not None:
        # out of range (however large): the generic path raises NumPy's AxisError
        if type(axis) is not int or not (<object>(-ndim) <= axis < <object>ndim):
            return NotImplemented
        ax = axis
        if ax < 0:
            ax += ndim
    r = arr._size
    if ax >= 0:
        r = arr._shape[ax]
        for i in range(ax):
            outer *= arr._shape[i]
        for i in range(ax + 1, ndim):
            inner *= arr._shape[i]
        for i in range(ndim):
            if i != ax:
                shape[nd] = arr._shape[i]
                nd += 1
            elif keepdims:
                shape[nd] = 1
                nd += 1
    elif keepdims:
        for i in range(ndim):
            shape[i] = 1
        nd = ndim
    if kind == RED_VAR or kind == RED_STD:
        if type(ddof) is not int or ddof >= r:
            return NotImplemented   # NumPy warns "Degrees of freedom <= 0"
        den = r - <Py_ssize_t>ddof
    rdt = _INTP if arg else dt
    if out is not None:
        if not isinstance(out, NDArray):
            return NotImplemented
        o = <NDArray>out
        if (o._ndim != nd or o._dtype is not rdt or not o._writeable or not _c_contiguous(o)
                or arrays_overlap(o, arr) or _foreign(o)):
            return NotImplemented
        for i in range(nd):
            if o._shape[i] != shape[i]:
                return NotImplemented
    check_array(arr, name, "a")
    if out is None:
        o = made = new_result(rdt, nd, shape, name)
    else:
        check_array(o, name, "out")
    nt = threads_for(arr._size, GRAIN_REDUCE)
    if inner > 1 and not (kind == RED_MAX or kind == RED_MIN):
        levels = rows_levels(r)
        per_thread = (levels + 1) * _chunk_width(inner)
        if per_thread * nt * arr._itemsize <= sizeof(small_scratch):
            scratch = <void*>small_scratch     # small calls: no malloc
        else:
            scratch = malloc(<size_t>(per_thread * nt * arr._itemsize))
            if scratch == NULL:
                if made is not None:
                    _discard(made)
                raise MemoryError()
    try:
        if dt is _F32:
            if release_gil(arr._size * 4, nt):
                with nogil:
                    fl = _reduce_dispatch(kind, <const float32_t*>arr._data, outer, r, inner,
                                          den, <float32_t*>o._data, <int64_t*>o._data,
                                          <float32_t*>scratch, per_thread, nt)
            else:
                fl = _reduce_dispatch(kind, <const float32_t*>arr._data, outer, r, inner, den,
                                      <float32_t*>o._data, <int64_t*>o._data,
                                      <float32_t*>scratch, per_thread, 1)
        else:
            if release_gil(arr._size * 8, nt):
                with nogil:
                    fl = _reduce_dispatch(kind, <const float64_t*>arr._data, outer, r, inner,
                                          den, <float64_t*>o._data, <int64_t*>o._data,
                                          <float64_t*>scratch, per_thread, nt)
            else:
                fl = _reduce_dispatch(kind, <const float64_t*>arr._data, outer, r, inner, den,
                                      <float64_t*>o._data, <int64_t*>o._data,
                                      <float64_t*>scratch, per_thread, 1)
    finally:
        if scratch != <void*>small_scratch:
            free(scratch)
    if fl:
        # inf - inf, overflow, ...: NumPy recomputes and reports in its own words
        if made is not None:
            _discard(made)
        return NotImplemented
    _native_hits[2][dt is _F64] += 1
    return o


cdef int _reduce_dispatch(int kind, const floating_t* A, Py_ssize_t outer, Py_ssize_t r,
                          Py_ssize_t inner, Py_ssize_t den, floating_t* O, int64_t* K,
                          floating_t* scratch, Py_ssize_t per_thread,
                          int nthreads) noexcept nogil:
    if inner == 1:
        return _reduce_flat(kind, A, outer, r, den, O, K, nthreads)
    return _reduce_strided(kind, A, outer, r, inner, den, O, K, scratch, per_thread, nthreads)


# -- entry points: NumPy's signatures, the native path first -------------------------------
# ndws.ops publishes these under NumPy's names (with their docstrings); NDArray's operators and
# methods call the same fast paths.

cdef inline object _binary_entry(int op, str name, object x1, object x2, object out,
                                 object where, object casting, object order, object dtype,
                                 object subok, object signature):
    # The body of every binary entry point: the native path when only out= is given, else
    # NumPy's full ufunc machinery. The ufunc is looked up by name only on that fallback: an
    # `np.<name>` lookup per call would cost the fast path ~15 ns.
    cdef bint plain = _default_ufunc_kw(where, casting, order, dtype, subok, signature)
    if plain:
        r = _fast_binary(op, x1, x2, out, name)
        if r is not NotImplemented:
            return r
    return _ufunc_call(getattr(np, name), (x1, x2), out,
                       _ufunc_kw(where, casting, order, dtype, subok, signature), False,
                       not plain)


cdef inline object _unary_entry(int op, str name, object x, object out, object where,
                                object casting, object order, object dtype, object subok,
                                object signature):
    # As _binary_entry, for one operand.
    cdef bint plain = _default_ufunc_kw(where, casting, order, dtype, subok, signature)
    if plain:
        r = _fast_unary(op, x, out, name)
        if r is not NotImplemented:
            return r
    return _ufunc_call(getattr(np, name), (x,), out,
                       _ufunc_kw(where, casting, order, dtype, subok, signature), False,
                       not plain)


# What the reduction keywords of `reduce_call` include besides axis/out/keepdims: NumPy's max,
# min, argmax and argmin take no dtype, only var and std take ddof.
cdef enum:
    RKW_NONE = 0
    RKW_DTYPE = 1
    RKW_DDOF = 2


cdef inline object _reduce_entry(int kind, str name, object a, object axis, object dtype,
                                 object out, object keepdims, object ddof, int kw):
    # The body of every reduction entry point (the ndws.* functions and NDArray's methods):
    # the native path first, else NumPy's reduction (`np.<name>`, looked up only here) on views.
    r = _fast_reduce(kind, a, axis, dtype, out, keepdims, ddof, name)
    if r is not NotImplemented:
        return r
    func = getattr(np, name)
    if kw == RKW_DDOF:
        _check_ddof(ddof)
        return reduce_call(name, func, a, axis, out, keepdims, dtype=dtype, ddof=ddof)
    if kw == RKW_DTYPE:
        return reduce_call(name, func, a, axis, out, keepdims, dtype=dtype)
    return reduce_call(name, func, a, axis, out, keepdims)


cdef int _check_ddof(object ddof) except -1:
    # NumPy takes any real ddof; a huge int would otherwise surface as a C OverflowError
    if isinstance(ddof, (int, np.integer)):
        if not -(1 << 63) <= ddof < (1 << 63):
            raise ValueError(f"ddof: must fit in a 64-bit integer, got {ddof!r}")
    elif not isinstance(ddof, (float, np.floating)):
        raise TypeError(f"ddof: expected a number, got {type(ddof).__name__} {ddof!r:.40}")
    return 0


# The entry points (ndws.add, ndws.sum, ...): generated from _entries.pxi.tp, one per NumPy name.
include "_entries.pxi"


# ------------------------------------------------------------------------------------------------
# Op dispatch, the fallback of the native fast paths above: operands are validated and viewed,
# the output is allocated in the current workspace (or `out=` is used), and NumPy computes into
# it.

cdef object _ROLES = {1: ("x",), 2: ("x1", "x2"), 3: ("x1", "x2", "x3")}
cdef dict _resolve_cache = {}
_PY_SCALARS = (int, float, complex)


cdef object _dtype_key(object v):
    # What NumPy's type resolution sees for an operand: a dtype, or the Python scalar type for
    # NEP 50's weakly typed Python numbers.
    t = type(v)
    if t is int or t is float or t is complex:
        return t
    if isinstance(v, np.ndarray) or isinstance(v, np.generic):
        return v.dtype
    return None


cdef tuple _resolve(object ufunc, tuple keys, object dtype, object casting, object sig):
    cdef object ck = (ufunc, keys, dtype, casting, sig)
    try:
        res = _resolve_cache.get(ck)
    except TypeError:
        res = None
        ck = None
    if res is not None:
        return res
    nout = ufunc.nout
    kw = {}
    if casting is not None:
        kw["casting"] = casting
    if sig is not None:
        kw["signature"] = sig
    elif dtype is not None:
        kw["signature"] = (None,) * ufunc.nin + (np.dtype(dtype),) * nout
    res = ufunc.resolve_dtypes(keys + (None,) * nout, **kw)
    if ck is not None:
        _resolve_cache[ck] = res
    return res


cdef int _broadcast(int* nd, Py_ssize_t* res, object v) except -1:
    # Fold operand `v`'s shape into the broadcast shape (res[0:nd]). Returns 1 on a mismatch.
    cdef int vn, i, j
    cdef Py_ssize_t d, r
    cdef Py_ssize_t* vshape
    cdef cnp.ndarray arr
    if isinstance(v, np.ndarray):
        arr = <cnp.ndarray>v
        vn = cnp.PyArray_NDIM(arr)
        vshape = <Py_ssize_t*>cnp.PyArray_DIMS(arr)
    else:
        return 0
    if vn > nd[0]:
        for i in range(nd[0] - 1, -1, -1):
            res[i + vn - nd[0]] = res[i]
        for i in range(vn - nd[0]):
            res[i] = 1
        nd[0] = vn
    for i in range(vn):
        j = nd[0] - vn + i
        d = vshape[i]
        r = res[j]
        if r == d or d == 1:
            continue
        if r == 1:
            res[j] = d
        else:
            return 1
    return 0


def ufunc_call(ufunc, tuple args, out=None, **kwargs):
    """Apply NumPy ufunc `ufunc` to `args` with ndws placement.

    NDArray operands are validated (``WorkspaceError`` when stale) and used in place; the
    output is a new array in the current workspace (or detached memory) unless `out` is
    given. Type promotion, broadcasting and errors are NumPy's.
    """
    return _ufunc_call(ufunc, args, out, kwargs, False)


cdef object _ufunc_call(object ufunc, tuple args, object out, dict kwargs, bint dunder,
                        bint try_native=True):
    # `dunder`: an operand NumPy can only see as an object makes the call NotImplemented (the
    # operators' cue) instead of a TypeError. `try_native=False` from callers that have just
    # tried the native path themselves.
    cdef int nin = ufunc.nin, nout = ufunc.nout, i
    cdef int nd = 0
    cdef Py_ssize_t shape[NDWS_MAXDIMS]
    cdef NDArray o
    name = ufunc.__name__
    if try_native and not kwargs:
        # np.add(a, b) on NDArrays, ndws.ufunc_call, clip, ...: the native path when it applies
        op = _FAST_UFUNCS.get(ufunc)
        if op is not None:
            res = NotImplemented
            if nin == 2 and len(args) == 2:
                res = _fast_binary(op, args[0], args[1], out, name)
            elif nin == 1 and len(args) == 1:
                res = _fast_unary(op, args[0], out, name)
            if res is not NotImplemented:
                return res
    if len(args) != nin:
        raise TypeError(f"{name}() takes from {nin} to {nin + nout} positional arguments but "
                        f"{len(args)} were given")
    roles = _ROLES.get(nin) or tuple(f"x{i + 1}" for i in range(nin))
    views = []
    keys = []
    for i in range(nin):
        x = args[i]
        if isinstance(x, NDArray):
            check_array(<NDArray>x, name, roles[i])
            v = np_view(<NDArray>x)
        elif isinstance(x, np.ndarray) or type(x) in _PY_SCALARS or isinstance(x, np.generic):
            v = x
        elif isinstance(x, bool):
            v = np.bool_(x)
        else:
            v = np.asarray(x)
            if v.dtype.hasobject or v.dtype.kind not in "biufc":
                if dunder:
                    return NotImplemented
                raise TypeError(f"{name}: unsupported operand {roles[i]} of type "
                                f"{type(x).__name__!r}")
        views.append(v)
        keys.append(_dtype_key(v))

    where = kwargs.get("where")
    if isinstance(where, NDArray):
        check_array(<NDArray>where, name, "where")
        kwargs["where"] = np_view(<NDArray>where)

    outs = _normalize_out(out, nout, name)
    if all(o_ is not None for o_ in outs):
        # Caller-provided outputs: NumPy checks shapes and casting before writing anything.
        ov = tuple([_operand(o_, name, "out") for o_ in outs])
        ufunc(*views, out=ov, **kwargs)
        return outs[0] if nout == 1 else tuple(outs)

    for v in views:
        if _broadcast(&nd, shape, v):
            ufunc(*views, **kwargs)   # NumPy raises its own broadcasting error
            raise ValueError(f"{name}: operands could not be broadcast together")
    dts = _resolve(ufunc, tuple(keys), kwargs.get("dtype"), kwargs.get("casting"),
                   kwargs.get("signature"))
    for i in range(nout):
        if outs[i] is None:
            _check_dtype(dts[nin + i], f"{name}: the result")
    made = []
    try:
        final = []
        for i in range(nout):
            if outs[i] is None:
                o = new_array(dts[nin + i], nd, shape, False, False, None, False)
                made.append(o)
                final.append(o)
            else:
                final.append(outs[i])
        ov = tuple([_operand(o_, name, "out") for o_ in final])
        ufunc(*views, out=ov, **kwargs)
    except BaseException:
        for o in reversed(made):
            _discard(o)
        raise
    return final[0] if nout == 1 else tuple(final)


cdef tuple _normalize_out(object out, int nout, object name):
    if out is None:
        return (None,) * nout
    if isinstance(out, tuple):
        if len(out) != nout:
            raise ValueError(f"{name}: 'out' tuple must have exactly {nout} entries, "
                             f"got {len(out)}")
        for o in out:
            _check_out(o, name)
        return out
    if nout != 1:
        raise TypeError(f"{name}: 'out' must be a tuple of {nout} arrays")
    _check_out(out, name)
    return (out,)


cdef int _check_out(object o, object name) except -1:
    if o is None or isinstance(o, NDArray) or isinstance(o, np.ndarray):
        return 0
    raise TypeError(f"{name}: out must be an NDArray (or a numpy.ndarray), got "
                    f"{type(o).__name__} {o!r:.40}")


cdef object _binop(object ufunc, object a, object b):
    # the operators' fallback: they have tried the native path already
    return _ufunc_call(ufunc, (a, b), None, {}, True, False)


cdef object _compare(object ufunc, NDArray a, object b):
    # == and != with an operand NumPy can only see as an object (None, a string, ...): NumPy
    # compares element-wise through object loops; so does ndws, into a bool result.
    r = _ufunc_call(ufunc, (a, b), None, {}, True)
    if r is NotImplemented:
        check_array(a, ufunc.__name__, "x1")
        res = ufunc(np_view(a), np.asarray(b, dtype=object))
        return _copy_numpy(np.asarray(res, dtype=np.bool_), None, False)
    return r


cdef object _inplace(object ufunc, NDArray a, object b):
    # the in-place operators' fallback: they have tried the native path already
    return _ufunc_call(ufunc, (a, b), a, {}, True, False)


cdef object _array_ufunc(object ufunc, str method, tuple inputs, dict kwargs):
    # NumPy hands us every ufunc call that involves an NDArray (np.exp(a), ndarray + NDArray).
    out = kwargs.pop("out", None)
    if method == "__call__" and ufunc.signature is None:
        if isinstance(out, tuple) and len(out) == 1 and ufunc.nout == 1:
            out = out[0]
        return _ufunc_call(ufunc, inputs, out, kwargs, False)
    if method == "__call__" and ufunc is np.matmul:
        if isinstance(out, tuple):
            out = out[0]
        return matmul(inputs[0], inputs[1], out=out)
    name = f"{ufunc.__name__}.{method}"
    views = [_operand(x, name, "x") for x in inputs]
    if out is not None:
        outs = out if isinstance(out, tuple) else (out,)
        kwargs["out"] = tuple([_operand(o, name, "out") for o in outs])
    res = getattr(ufunc, method)(*views, **kwargs)
    if out is not None:
        outs = out if isinstance(out, tuple) else (out,)
        return outs[0] if len(outs) == 1 else outs
    if isinstance(res, np.ndarray):
        return _copy_numpy(res, None, False)
    return res


cdef tuple _reduce_axes(object axis, int ndim, bint single):
    # NumPy's C-level reduction checks and messages (not numpy.lib's "repeated axis").
    cdef Py_ssize_t i
    if axis is None:
        return tuple(range(ndim))
    items = (axis,) if single or not isinstance(axis, tuple) else axis
    out = []
    for item in items:
        big = PyNumber_Index(item)
        if not -ndim <= big < ndim:          # before the C conversion: no OverflowError
            raise np.exceptions.AxisError(big, ndim)
        i = big
        if i < -ndim or i >= ndim:
            raise np.exceptions.AxisError(i, ndim)
        if i < 0:
            i += ndim
        if i in out:
            raise ValueError("duplicate value in 'axis'")
        out.append(i)
    return tuple(out)


cdef dict _reduce_dtype_cache = {}


cdef object _reduce_dtype(str name, object func, object dt, dict extra):
    key = (name, dt, extra.get("dtype"))
    res = _reduce_dtype_cache.get(key)
    if res is None:
        kw = {"dtype": extra["dtype"]} if extra.get("dtype") is not None else {}
        res = np.asarray(func(np.zeros(1, dt), **kw)).dtype
        _reduce_dtype_cache[key] = res
    return res


def reduce_call(str name, func, a, axis=None, out=None, keepdims=False, **extra):
    """Apply NumPy reduction `func` (``np.sum``, ``np.max``, ...) to `a` with ndws placement.

    The result (a 0-d array for a full reduction, which takes one aligned slot in the current
    workspace as ND4J's scalar results do) is placed like any new array unless `out` is given.
    """
    cdef NDArray arr
    cdef Py_ssize_t shape[NDWS_MAXDIMS]
    cdef int nd = 0, i
    if isinstance(a, NDArray):
        arr = <NDArray>a
        check_array(arr, name, "a")
        view = np_view(arr)
    else:
        view = np.asarray(a)
        if view.dtype.hasobject or view.dtype.kind not in "biufc":
            raise TypeError(f"{name}: a must be an array of numbers, got "
                            f"{type(a).__name__} {a!r:.40}" if view.dtype.hasobject else
                            f"{name}: a must be an array of numbers, got dtype {view.dtype}")
    extra = {k: v for k, v in extra.items() if v is not None and not (k == "ddof" and v == 0)}
    if out is not None:
        _check_out(out, name)
        func(view, axis=axis, out=_operand(out, name, "out"), keepdims=keepdims, **extra)
        return out
    ndim = view.ndim
    if name in ("std", "var"):
        # NumPy's std/var only honour an integer dtype when they return a scalar; computing
        # without out= and copying keeps every such rule (they build a full temporary anyway).
        res = func(view, axis=axis, keepdims=keepdims, **extra)
        return _copy_numpy(np.asarray(res), None, False)
    try:
        axes = _reduce_axes(axis, ndim, name in ("argmax", "argmin"))
    except np.exceptions.AxisError:
        raise                   # NumPy's own words (NumPy itself overflows on a huge axis)
    except (TypeError, ValueError):
        # each NumPy reduction words its axis errors its own way: let it raise on a dummy of
        # the same rank (one element per axis, so the check costs nothing)
        func(np.zeros((1,) * ndim, view.dtype), axis=axis, keepdims=keepdims, **extra)
        raise
    if name in ("argmax", "argmin") and axis is None:
        if keepdims:
            for i in range(ndim):
                shape[i] = 1
            nd = ndim
    else:
        for i in range(ndim):
            if i in axes:
                if keepdims:
                    shape[nd] = 1
                    nd += 1
            else:
                shape[nd] = view.shape[i]
                nd += 1
    rdt = _reduce_dtype(name, func, view.dtype, extra)
    _check_dtype(rdt, f"{name}: the result")
    return _new_filled(rdt, nd, shape,
                       lambda v: func(view, axis=axis, out=v, keepdims=keepdims, **extra), name)


# ------------------------------------------------------------------------------------------------
# Linear algebra entry points: the native GEMM of ndws._linalg first, NumPy for what it does not
# cover (integer and mixed dtypes)

cdef object _as_operand(object x, str name, str role):
    # A NumPy view of an operand, or NotImplemented for one that is not a numeric array (the
    # operators then return NotImplemented; the public functions raise `_operand_error`).
    if isinstance(x, NDArray):
        check_array(<NDArray>x, name, role)
        return np_view(<NDArray>x)
    if isinstance(x, np.ndarray):
        if x.dtype.hasobject or x.dtype.kind not in "biufc":
            return NotImplemented
        return x
    v = np.asarray(x)
    if v.dtype.hasobject or v.dtype.kind not in "biufc":
        return NotImplemented
    return v


cdef object _operand_error(str name, tuple operands, tuple roles):
    # the TypeError a public function raises for the first operand _as_operand refuses
    for x, role in zip(operands, roles):
        if _as_operand(x, name, role) is NotImplemented:
            if isinstance(x, np.ndarray):
                return TypeError(f"{name}: unsupported operand {role} of dtype {x.dtype}")
            return TypeError(f"{name}: unsupported operand {role} of type "
                             f"{type(x).__name__!r}")
    return TypeError(f"{name}: unsupported operands")


# The native matrix product lives in ndws._linalg, which cimports this module and so installs
# itself here at import (`_set_native_matmul`). It is tried first and returns NotImplemented for
# what it does not cover (integer dtypes, mixed dtypes); the NumPy path below is the fallback and
# the reference the tests compare it with.
cdef object _native_matmul = None


def _set_native_matmul(fn):
    global _native_matmul
    _native_matmul = fn


def matmul(x1, x2, out=None):
    """Matrix product with NumPy's ``matmul`` rules (1-D promotion, batch broadcasting)."""
    r = _matmul(x1, x2, out)
    if r is NotImplemented:
        raise _operand_error("matmul", (x1, x2), ("x1", "x2"))
    return r


cdef object _matmul(object x1, object x2, object out):
    # NotImplemented for operands that are not numeric arrays (the operators' cue)
    if _native_matmul is not None:
        res = _native_matmul(x1, x2, out)
        if res is not NotImplemented:
            return res
    return _numpy_matmul(x1, x2, out)


@cython.wraparound(True)
def _numpy_matmul(x1, x2, out=None):
    """`matmul` computed by NumPy on views (the reference for the native kernel)."""
    a = _as_operand(x1, "matmul", "x1")
    b = _as_operand(x2, "matmul", "x2")
    if a is NotImplemented or b is NotImplemented:
        return NotImplemented
    if out is not None:
        np.matmul(a, b, out=_operand(out, "matmul", "out"))
        return out
    if a.ndim == 0 or b.ndim == 0:
        np.matmul(a, b)  # raises NumPy's error
    an = a.shape if a.ndim > 1 else (1,) + a.shape
    bn = b.shape if b.ndim > 1 else b.shape + (1,)
    if an[-1] != bn[-2]:
        np.matmul(a, b)  # raises NumPy's error
        raise ValueError("matmul: core dimension mismatch")
    try:
        batch = np.broadcast_shapes(an[:-2], bn[:-2])
    except ValueError:
        np.matmul(a, b)
        raise
    shape = batch + ((an[-2],) if a.ndim > 1 else ()) + ((bn[-1],) if b.ndim > 1 else ())
    dt = np.matmul.resolve_dtypes((a.dtype, b.dtype, None))[2]
    _check_dtype(dt, "matmul: the result")
    return new_filled(shape, dt, lambda v: np.matmul(a, b, out=v), op="matmul")


@cython.wraparound(True)
def dot(a, b, out=None):
    """Dot product with NumPy's ``dot`` rules."""
    av = _as_operand(a, "dot", "a")
    bv = _as_operand(b, "dot", "b")
    if av is NotImplemented or bv is NotImplemented:
        raise _operand_error("dot", (a, b), ("a", "b"))
    if out is not None:
        np.dot(av, bv, out=_operand(out, "dot", "out"))
        return out
    if av.ndim == 0 or bv.ndim == 0:
        return ufunc_call(np.multiply, (a, b))
    k_b = bv.shape[0] if bv.ndim == 1 else bv.shape[-2]
    if av.shape[-1] != k_b:
        np.dot(av, bv)  # raises NumPy's error
        raise ValueError("dot: shapes not aligned")
    shape = av.shape[:-1] + bv.shape[:-2] + (bv.shape[-1:] if bv.ndim > 1 else ())
    dt = np.result_type(av, bv)
    _check_dtype(dt, "dot: the result")
    return new_filled(shape, dt, lambda v: np.dot(av, bv, out=v), op="dot")


def clip(a, a_min=None, a_max=None, out=None):
    """Limit values to ``[a_min, a_max]`` (NumPy's ``clip``); either bound may be None."""
    if a_min is None and a_max is None:
        # NumPy >= 2.1: nothing to clip, a copy (or a copy into `out`)
        if out is not None:
            np.copyto(_operand(out, "clip", "out"), _as_operand(a, "clip", "a"))
            return out
        return array(a)
    if a_min is None:
        return _ufunc_call(np.minimum, (a, a_max), out, {}, False)
    if a_max is None:
        return _ufunc_call(np.maximum, (a, a_min), out, {}, False)
    return _ufunc_call(np._core.umath.clip, (a, a_min, a_max), out, {}, False)


def norm(x, ord=None, axis=None, keepdims=False):
    """Vector or matrix norm with ``numpy.linalg.norm`` semantics, placed like any new array."""
    v = _as_operand(x, "norm", "x")
    r = np.asarray(np.linalg.norm(v, ord=ord, axis=axis, keepdims=keepdims))
    return _copy_numpy(r, None, False)


# ------------------------------------------------------------------------------------------------
# Creation

cdef inline bint _fortran(object order) except -1:
    # identity first: the default "C" is the same interned object on every call
    if order is "C":
        return False
    if order == "F" or order == "f":
        return True
    if order == "C" or order == "c" or order is None:
        return False
    raise ValueError(f"order: expected 'C' or 'F', got {order!r}")


def empty(shape, dtype=None, order="C", *, detached=False):
    """New uninitialized array in the current workspace (detached memory when none is current
    or `detached` is set).

    Parameters
    ----------
    shape : int or tuple of int
    dtype : data-type, default float64
    order : {'C', 'F'}
    detached : bool
        Allocate outside every workspace.

    Returns
    -------
    NDArray
    """
    cdef Py_ssize_t shp[NDWS_MAXDIMS]
    cdef int nd = _parse_shape(shape, shp)
    return new_array(_as_dtype(dtype), nd, shp, False, _fortran(order), None, detached)


def zeros(shape, dtype=None, order="C", *, detached=False):
    """New array of zeros, placed as `empty` places it."""
    cdef Py_ssize_t shp[NDWS_MAXDIMS]
    cdef int nd = _parse_shape(shape, shp)
    return new_array(_as_dtype(dtype), nd, shp, True, _fortran(order), None, detached)


def ones(shape, dtype=None, order="C", *, detached=False):
    """New array of ones (float64 unless `dtype`), placed as `empty` places it."""
    return full(shape, 1, _as_dtype(dtype), order, detached=detached)


def full(shape, fill_value, dtype=None, order="C", *, detached=False):
    """New array filled with `fill_value` (dtype inferred from it, as NumPy does)."""
    cdef Py_ssize_t shp[NDWS_MAXDIMS]
    cdef int nd = _parse_shape(shape, shp)
    fill_value = _fill_operand(fill_value, "full", _shape_tuple(nd, shp))
    dt = _as_dtype(fill_value.dtype if dtype is None else dtype)
    return _new_filled(dt, nd, shp, lambda v: np.copyto(v, fill_value, casting="unsafe"),
                       "full", _fortran(order), detached)


cdef object _fill_operand(object fill_value, str op, tuple shape):
    # `fill_value` of full/full_like as a NumPy array, checked before anything is allocated:
    # numeric, and broadcastable to the new array's shape
    if isinstance(fill_value, NDArray):
        check_array(<NDArray>fill_value, op, "fill_value")
        v = np_view(<NDArray>fill_value)
    else:
        v = np.asarray(fill_value)
    if v.dtype.hasobject or v.dtype.kind not in "biufc":
        raise TypeError(f"fill_value: expected a number or an array of numbers, got "
                        f"{type(fill_value).__name__} {fill_value!r:.40}")
    vs = v.shape
    if len(vs) > len(shape) or any(d != 1 and d != n for d, n in zip(vs[::-1], shape[::-1])):
        raise ValueError(f"fill_value: shape {vs} can't be broadcast to the array's shape "
                         f"{shape}")
    return v


cdef NDArray _new_like(object a, object dtype, object order, object shape, bint detached):
    # NumPy's *_like: same shape (unless `shape`), same dtype (unless `dtype`), layout per
    # `order` relative to the prototype ('K' by default).
    cdef Py_ssize_t shp[NDWS_MAXDIMS]
    cdef int nd
    cdef bint f_only
    cdef NDArray proto
    if isinstance(a, NDArray):
        proto = <NDArray>a
        check_array(proto, "like", "a")
    else:
        if a is None:
            raise TypeError("a: expected an array (the prototype of the new array's shape and "
                            "dtype), got None")
        proto = from_numpy(np.asarray(a))
    dt = proto._dtype if dtype is None else _as_dtype(dtype)
    if shape is not None:
        # a new shape has no strides to keep: lay it out as the prototype's kind of
        # contiguity ('K' and 'A' follow a Fortran-only prototype; C otherwise)
        nd = _parse_shape(shape, shp)
        f_only = _f_contiguous(proto) and not _c_contiguous(proto)
        return _alloc_like(dt, nd, shp, shp, proto._itemsize,
                           order if order not in ("K", "k") else "A",
                           not f_only, f_only, None, detached)
    return _alloc_like(dt, proto._ndim, proto._shape, proto._strides, proto._itemsize, order,
                       _c_contiguous(proto), _f_contiguous(proto), None, detached)


def empty_like(a, dtype=None, order="K", *, shape=None, detached=False):
    """`empty` with the shape, dtype and layout of `a` (NumPy's ``empty_like``)."""
    return _new_like(a, dtype, order, shape, detached)


def zeros_like(a, dtype=None, order="K", *, shape=None, detached=False):
    """`zeros` with the shape, dtype and layout of `a` (NumPy's ``zeros_like``)."""
    return full_like(a, 0, dtype, order, shape=shape, detached=detached)


def ones_like(a, dtype=None, order="K", *, shape=None, detached=False):
    """`ones` with the shape, dtype and layout of `a` (NumPy's ``ones_like``)."""
    return full_like(a, 1, dtype, order, shape=shape, detached=detached)


def full_like(a, fill_value, dtype=None, order="K", *, shape=None, detached=False):
    """`full` with the shape, dtype and layout of `a` (NumPy's ``full_like``)."""
    cdef NDArray out = _new_like(a, dtype, order, shape, detached)
    try:
        fill_value = _fill_operand(fill_value, "full_like", out.shape)
    except BaseException:
        _discard(out)
        raise
    return _fill_new(out, lambda v: np.copyto(v, fill_value, casting="unsafe"), "full_like")


def arange(start, stop=None, step=None, dtype=None, *, detached=False):
    """Evenly spaced values in ``[start, stop)`` (NumPy's ``arange``), placed as `empty`
    places arrays."""
    args = (start,) if stop is None and step is None else (
        (start, stop) if step is None else (start, stop, step))
    for name, value in zip(("start", "stop", "step"), (start, stop, step)):
        if value is not None:
            _check_bound(value, name)
    if step is not None and step == 0:
        raise ValueError("step: must not be zero")
    return _copy_numpy(np.arange(*args, dtype=None if dtype is None else _as_dtype(dtype)),
                       None, detached)


cdef int _check_bound(object value, str name) except -1:
    # a real scalar NumPy computes with: Python ints beyond int64 would make NumPy fall back
    # to object arithmetic (or a C OverflowError)
    if isinstance(value, NDArray):
        value = value.item()
    if isinstance(value, (int, np.integer)):
        if not -(1 << 63) <= value < (1 << 63):
            raise ValueError(f"{name}: must fit in a 64-bit integer, got {value!r}")
    elif not isinstance(value, (float, np.floating)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__} "
                        f"{value!r:.40}")
    return 0


def linspace(start, stop, num=50, endpoint=True, dtype=None, *, detached=False):
    """`num` evenly spaced values over ``[start, stop]`` (NumPy's ``linspace``)."""
    return _copy_numpy(np.linspace(start, stop, num, endpoint=endpoint,
                                   dtype=None if dtype is None else _as_dtype(dtype)),
                       None, detached)


def eye(N, M=None, k=0, dtype=None, *, detached=False):
    """2-D array with ones on diagonal `k` (NumPy's ``eye``)."""
    return _copy_numpy(np.eye(N, M, k, dtype=_as_dtype(dtype)), None, detached)


def array(obj, dtype=None, *, copy=True, order="K", ndmin=0, detached=False):
    """Array from `obj` (nested sequences, NumPy arrays, NDArrays, scalars).

    NumPy's ``array`` semantics, with the result in the current workspace (or detached). With
    ``copy=False`` an NDArray of the right dtype is returned itself and anything needing a copy
    raises ``ValueError``; ``copy=None`` copies only when needed.
    """
    if isinstance(obj, NDArray):
        check_array(<NDArray>obj, "array", "obj")
        if not copy and (dtype is None or _as_dtype(dtype) == (<NDArray>obj)._dtype) \
                and ndmin <= (<NDArray>obj)._ndim and not (detached and (<NDArray>obj)._arena is not None):
            return obj
        if copy is False:
            raise ValueError("Unable to avoid copy while creating an array as requested.")
        src = np_view(<NDArray>obj)
    else:
        if copy is False:
            raise ValueError("Unable to avoid copy while creating an array as requested.")
        src = obj
    arr = np.asarray(src, dtype=None if dtype is None else _as_dtype(dtype), order=order)
    if arr.ndim < ndmin:
        arr = arr.reshape((1,) * (ndmin - arr.ndim) + arr.shape)
    _check_dtype(arr.dtype)
    if order in ("F", "f") or (order in ("K", "A") and arr.flags.f_contiguous
                               and not arr.flags.c_contiguous):
        out = empty(arr.shape, arr.dtype, "F", detached=detached)
        if out.size:
            np.copyto(np_view(out), arr)
        return out
    return _copy_numpy(arr, None, detached)


def asarray(obj, dtype=None, *, detached=False):
    """NDArrays of the right dtype are returned as they are; anything else is copied into the
    current workspace (or detached memory)."""
    if isinstance(obj, NDArray):
        check_array(<NDArray>obj, "asarray", "obj")
        if dtype is None or _as_dtype(dtype) == (<NDArray>obj)._dtype:
            if not (detached and (<NDArray>obj)._arena is not None):
                return obj
    return array(obj, dtype, copy=True, detached=detached)


def from_numpy(ndarray):
    """Wrap NumPy array `ndarray` without copying.

    The result is detached (it belongs to no workspace) and shares memory with `ndarray`,
    which stays the owner: the NumPy array is kept alive as long as the NDArray or any view of
    it. Read-only NumPy arrays give read-only NDArrays.
    """
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"ndarray: expected a numpy.ndarray, got {type(ndarray).__name__}")
    cdef cnp.ndarray src = <cnp.ndarray>ndarray
    _check_dtype(src.dtype)
    cdef int nd = cnp.PyArray_NDIM(src), i
    cdef Py_ssize_t* shape = <Py_ssize_t*>cnp.PyArray_DIMS(src)
    cdef Py_ssize_t* strides = <Py_ssize_t*>cnp.PyArray_STRIDES(src)
    cdef char* data = <char*>cnp.PyArray_DATA(src)
    cdef Py_ssize_t lo = 0, hi = 0
    if nd > NDWS_MAXDIMS:
        raise ValueError(f"maximum supported dimension for an ndarray is currently "
                         f"{NDWS_MAXDIMS}, found {nd}")
    if cnp.PyArray_SIZE(src) == 0:
        return _make(src.dtype, nd, shape, strides, _EMPTY_BLOCK.data, _EMPTY_BLOCK, None, 0, 0,
                     -1, True)
    for i in range(nd):
        if strides[i] >= 0:
            hi += strides[i] * (shape[i] - 1)
        else:
            lo += strides[i] * (shape[i] - 1)
    cdef MemoryBlock block = foreign_block(ndarray, data + lo, hi - lo + src.dtype.itemsize)
    return _make(src.dtype, nd, shape, strides, data, block, None, 0, 0, -1,
                 src.flags.writeable)


def _np_result(result, *, detached=False):
    """Copy a NumPy result into a new array placed as usual (for ndws' Python modules)."""
    return _copy_numpy(np.asarray(result), None, detached)


def _wrap_result(NDArray base, res):
    """A NumPy result of a view-producing function on `base` as an NDArray: a view when it
    points into base's memory, else a copy placed as usual (ndws internal)."""
    check_array(base, "view", "a")
    return _from_result(base, res)


def _build_info():
    """Build facts for `ndws.show_config()`."""
    return {"openmp": bool(NDWS_OPENMP), "max_threads": thread_limit(),
            "sanitized": bool(NDWS_SANITIZED),
            "cython": NDWS_BUILD_CYTHON_VERSION.decode(),
            "numpy_headers": NDWS_BUILD_NUMPY_VERSION.decode(),
            "cflags": NDWS_BUILD_CFLAGS.decode()}
