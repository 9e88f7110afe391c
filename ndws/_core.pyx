"""ndws._core: NDArray (storage, views, exports), the validity check, placement (`new_array`) and
`from_numpy`; the creation functions are ndws._creation's.

Above the workspace mechanics (ndws._arena) and the memory blocks (ndws._memory); below the
kernel contract (ndws._dispatch) and the ops (ndws._ufuncs, which fills NDArray's operator
table); see docs/architecture.md. The pure-Python layers (`ndws.workspace`, `ndws.ops`,
`ndws.random`) decide *what* to do; this module places every array, keeps its memory alive
exactly as long as something refers to it, and refuses every stale use.

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
from cpython.pycapsule cimport PyCapsule_New, PyCapsule_IsValid, PyCapsule_GetPointer
from cpython.object cimport PyTypeObject
from cpython.buffer cimport (PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES,
                             PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS)
from cpython.number cimport PyNumber_Index
from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.stdlib cimport malloc, free
from libc.string cimport memset, memcpy
from libc.stdint cimport uint8_t, int32_t, int64_t
from cpython.pyport cimport PY_SSIZE_T_MAX
cimport numpy as cnp

from ndws._openmp cimport NDWS_OPENMP
from ndws._dlpack cimport (DLDataType, DLTensor, DLManagedTensor, DLManagedTensorVersioned,
                          DL_CPU, DL_INT, DL_UINT, DL_FLOAT, DL_COMPLEX, DL_BOOL,
                          DL_READ_ONLY, DL_IS_COPIED)
from ndws._threads cimport release_gil, thread_limit
from ndws._arena cimport (Arena, tstate, open_ids, round_up, plain_bump, take_main, epoch_ptr,
                          debug_mode_ptr, ndws_share, ndws_debug)
from ndws._memory cimport (MemoryBlock, NDWS_ALIGNMENT, NDWS_SANITIZED, ndws_unpoison,
                           allocate_block, foreign_block, empty_block, BLOCK_DETACHED)

import numbers

import numpy as np

from ndws._memory import allocation_counters
# the workspace mechanics' Python surface, published by this module as before
from ndws._arena import (WorkspaceError, NoSuchWorkspaceError, ConfigurationError,
                         WorkspaceWarning, SCOPE_PANIC_MSG, MAX_BLOCK_BYTES, current_workspace,
                         _thread_state, _scope_out, _end_scope_of,
                         _clear_scopes, _scope_ops, _set_debug_mode, _get_debug_mode)

ndws_share(epoch_ptr(), debug_mode_ptr())

cnp.import_array()

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


cdef int raise_stale(NDArray a, object op, object role) except -1:
    # check_array's slow path (check_array itself is inline in _core.pxd)
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
        raise ValueError(f"shape: {shape!r:.60} is too many bytes: array is too big; "
                         f"`arr.size * arr.dtype.itemsize` is larger than the maximum possible "
                         f"size.")
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
        elif plain_bump(arena, round_up(size * itemsize)):
            # the steady state of a scoped workspace, inlined: Arena._alloc's main-block
            # branch without the ring, spill, trim and debug cases it has ruled out
            block = arena._main
            data = take_main(arena, round_up(size * itemsize), size * itemsize)
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


cdef void discard(NDArray a) noexcept:
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
        discard(out)
        raise
    return out


cdef NDArray _new_filled(object dtype, int ndim, const Py_ssize_t* shape, object fill,
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


# what an object array may hold for only_numbers (Python's and NumPy's numbers, Decimal too)
cdef object _NUMBER_TYPES = (numbers.Number, np.number, np.bool_)


cdef int only_numbers(object src, str what) except -1:
    # A value NumPy converts to a given dtype, checked to be numbers first: NumPy reads text
    # ("1.5" becomes 1.5) and makes None a NaN, where an ndws array holds numbers only, as it
    # does without a dtype (and as torch.tensor's); an object array's elements are all checked
    # before any is converted, since NumPy's cast writes those before the first it can't
    # convert (an assign would be half done). `what` names the argument. Any other failure is
    # left to the conversion.
    t = type(src)
    if t is float or t is int or t is bool or t is complex or isinstance(src, NDArray):
        return 0
    if isinstance(src, np.ndarray):
        probe = src
    else:
        try:
            probe = np.asarray(src)
        except (TypeError, ValueError, OverflowError):
            return 0
    if probe.dtype.kind in "biufc":
        return 0
    if probe.dtype.hasobject:
        for v in probe.flat:
            if not isinstance(v, _NUMBER_TYPES):
                raise TypeError(f"{what}: expected a number or an array of numbers, got "
                                f"{type(src).__name__} {src!r:.40}")
        return 0
    raise TypeError(f"{what}: ndws arrays hold numbers (bool, int, uint, float, complex); got "
                    f"{probe.dtype!r}")


cdef object _operand(object x, object op, object role):
    # An operand for NumPy: NDArrays become validated views, everything else passes through.
    if isinstance(x, NDArray):
        check_array(<NDArray>x, op, role)
        return np_view(<NDArray>x)
    return x


# -- DLPack (docs/workspaces.md, "NumPy interop") ----------------------------------------------
# The structs of dlpack.h (v1.0) and its codes are in _dlpack.h / _dlpack.pxd. A DLPack
# capsule is an export like a buffer: the block's export count holds it until the consumer's
# deleter runs, so a cycle end leaves the block to it (docs/architecture.md, invariant 6).

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
        out.code = DL_BOOL
    elif kind == "i":
        out.code = DL_INT
    elif kind == "u":
        out.code = DL_UINT
    elif kind == "f" and dt.itemsize <= 8:
        out.code = DL_FLOAT
    elif kind == "c" and dt.itemsize <= 16:
        out.code = DL_COMPLEX
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
    t.device.device_type = DL_CPU
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
        (<DLManagedTensorVersioned*>mem).flags = ((0 if a._writeable else DL_READ_ONLY)
                                                  | (DL_IS_COPIED if copied else 0))
        return PyCapsule_New(mem, b"dltensor_versioned", _dl_capsule_destructor_versioned)
    (<DLManagedTensor*>mem).manager_ctx = <void*>ctx
    (<DLManagedTensor*>mem).deleter = _dl_deleter
    return PyCapsule_New(mem, b"dltensor", _dl_capsule_destructor)


# ------------------------------------------------------------------------------------------------
# The operator table (see _core.pxd): NDArray's operators and methods compute through it.

cdef Operators _ops
cdef bint _ops_installed = False


cdef void install_operators(const Operators* table) noexcept:
    global _ops, _ops_installed
    _ops = table[0]
    _ops_installed = True


cdef int _not_installed() except -1:
    # `import ndws` installs the table before any array exists; this only guards a partial import
    raise RuntimeError("ndws._ufuncs is not imported: import ndws first")


cdef inline int _need_ops() except -1:
    # inline: the operators pay one predictable branch, not a call
    if not _ops_installed:
        _not_installed()
    return 0


cdef inline object _fast_binary(int op, object x1, object x2, object out, object name):
    _need_ops()
    return _ops.fast_binary(op, x1, x2, out, name)


cdef inline object _fast_unary(int op, object x, object out, object name):
    _need_ops()
    return _ops.fast_unary(op, x, out, name)


cdef inline object _ufunc_call(object ufunc, tuple args, object out, dict kwargs, bint dunder,
                               bint try_native):
    _need_ops()
    return _ops.ufunc_call(ufunc, args, out, kwargs, dunder, try_native)


# Operands an operator refuses itself rather than returning NotImplemented: Python would go on
# to the builtin sequence's repetition or concatenation (`x * "2"` asks x.__index__), whose
# error names neither the operation nor the operand.
cdef object _BUILTIN_SEQUENCES = (str, bytes, bytearray, list, tuple)


cdef object _no_sequence(object ufunc, object a, object b):
    # NotImplemented, after refusing a builtin sequence NumPy saw as no numbers
    for role, x in (("x1", a), ("x2", b)):
        if isinstance(x, _BUILTIN_SEQUENCES):
            raise TypeError(f"{ufunc.__name__}: unsupported operand {role} of type "
                            f"{type(x).__name__!r}")
    return NotImplemented


cdef inline object _binop(object ufunc, object a, object b):
    # the operators' fallback: they have tried the native path already
    r = _ufunc_call(ufunc, (a, b), None, {}, True, False)
    return _no_sequence(ufunc, a, b) if r is NotImplemented else r


cdef inline object _inplace(object ufunc, NDArray a, object b):
    # the in-place operators' fallback: they have tried the native path already
    r = _ufunc_call(ufunc, (a, b), a, {}, True, False)
    return _no_sequence(ufunc, a, b) if r is NotImplemented else r


cdef inline object _compare(object ufunc, NDArray a, object b):
    _need_ops()
    return _ops.compare(ufunc, a, b)


cdef inline object _array_ufunc(object ufunc, str method, tuple inputs, dict kwargs):
    _need_ops()
    return _ops.array_ufunc(ufunc, method, inputs, kwargs)


cdef inline object _reduce_entry(int kind, str name, object a, object axis, object dtype,
                                 object out, object keepdims, object ddof, int kw):
    _need_ops()
    return _ops.reduce_entry(kind, name, a, axis, dtype, out, keepdims, ddof, kw)


cdef inline object _reduce_numpy(str name, object a, object axis, object dtype, object out,
                                 object keepdims):
    _need_ops()
    return _ops.reduce_numpy(name, a, axis, dtype, out, keepdims)


cdef inline object _matmul(object x1, object x2, object out):
    _need_ops()
    return _ops.matmul(x1, x2, out)


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
        cdef Py_ssize_t shp[NDWS_MAXDIMS]
        cdef int nd = _parse_shape(shape, shp)
        cdef NDArray tmp = new_array(_as_dtype(dtype), nd, shp, False, _fortran(order), None,
                                     False)
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
        if dl_device is not None and tuple(dl_device) != (DL_CPU, 0):
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
        return (DL_CPU, 0)

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
        only_numbers(value, "setitem: value")
        if type(value) is list or type(value) is tuple:
            # converted whole before the write: NumPy assigns a sequence element by element,
            # so one it can't convert (1000 into int8) would leave those before it written
            value = np.asarray(value, dtype=self._dtype)
        v = _operand(value, "setitem", "value")
        np_view(self)[_key_to_numpy(key, "setitem")] = v

    def fill(self, value):
        """Set every element to `value` (NumPy's ``fill``)."""
        check_array(self, "fill", "a")
        if not _fill_fast(self, value):
            only_numbers(value, "fill: value")
            np_view(self).fill(value)

    def assign(self, value):
        """Copy `value` (broadcast) into this array, ND4J's ``assign``; returns self."""
        check_array(self, "assign", "a")
        only_numbers(value, "assign: value")
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
        return _ufunc_call(np.positive, (self,), None, {}, False, True)

    def __abs__(self):
        r = _fast_unary(OP_ABS, self, None, "absolute")
        if r is not NotImplemented:
            return r
        return _ufunc_call(np.absolute, (self,), None, {}, False, False)

    def __invert__(self):
        return _ufunc_call(np.invert, (self,), None, {}, False, True)

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
        return _reduce_numpy("prod", self, axis, dtype, out, keepdims)

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
        return _reduce_numpy("any", self, axis, None, out, keepdims)

    def all(self, axis=None, out=None, keepdims=False):
        """Whether all elements along `axis` are true (see `ndws.all`)."""
        return _reduce_numpy("all", self, axis, None, out, keepdims)

    def norm(self, ord=None, axis=None, keepdims=False):
        """Vector or matrix norm (as ``numpy.linalg.norm``)."""
        _need_ops()
        return _ops.norm(self, ord, axis, keepdims)

    def clip(self, min=None, max=None, out=None):
        """Values limited to ``[min, max]`` (see `ndws.clip`)."""
        _need_ops()
        return _ops.clip(self, min, max, out)

    def dot(self, b, out=None):
        """Dot product with `b` (see `ndws.dot`)."""
        _need_ops()
        return _ops.dot(self, b, out)


def _rows(NDArray a):
    # each step re-validates through __getitem__: a stale array stops the iteration
    for i in range(a._shape[0]):
        yield a[i]


def _unpickle(data):
    # (the name pickles refer to: it stays here)
    return _copy_numpy(np.asarray(data), None, True)


# ------------------------------------------------------------------------------------------------
# NumPy arrays as NDArrays (the creation functions are ndws._creation's)

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
