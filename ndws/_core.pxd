# Declarations of ndws' Cython core, for other Cython modules to `cimport` (the kernels of the
# next layer read an NDArray's pointer, shape and strides directly, without memoryviews).
from libc.stdint cimport uint64_t
from ndws._memory cimport MemoryBlock
from ndws._arena cimport Arena, ThreadState, ndws_current_tid

cdef enum:
    NDWS_MAXDIMS = 64          # NumPy 2's limit (NPY_MAXDIMS): every NumPy array fits
    NDWS_INLINE_DIMS = 4       # shape/strides of up to this many dimensions live in the object

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

# -- validity (docs/architecture.md, invariant 2) ------------------------------------------------

cdef inline bint _is_valid(NDArray a) noexcept:
    # the check every use runs: a handful of compares (the slow path, with the message, is
    # check_array's)
    cdef Arena w = a._arena
    if w is None:
        return True
    if w._circular:
        return a._epoch == w._epoch and (
            a._vpos < 0 or a._block.ring_written_end <= a._vpos + a._block.ring_size)
    return w._is_open and a._gen == w._generation and a._epoch == w._epoch


cdef inline bint _foreign(NDArray a) noexcept:
    # an attached array of a workspace that belongs to another thread
    return a._arena is not None and a._arena._owner_tid != ndws_current_tid()


# WorkspaceError (ND4J's op-message format, naming `op` and `role`) unless `a` may be used:
# inline, so every entry in every module pays the compares, not a call.
cdef int raise_stale(NDArray a, object op, object role) except -1


cdef inline int check_array(NDArray a, object op, object role) except -1:
    if _is_valid(a):
        return 0
    return raise_stale(a, op, role)

# -- placement (docs/architecture.md, invariant 3) -----------------------------------------------

# Allocate an array: in `target`, else (unless `detached`) the current workspace, else
# detached memory.
cdef NDArray new_array(object dtype, int ndim, const Py_ssize_t* shape, bint zero, bint fortran,
                       Arena target, bint detached)
# Give back the bytes of an array made for an operation that then failed (when it was its
# workspace's last allocation).
cdef void discard(NDArray a) noexcept
# A new array placed as usual whose values fill(numpy_view) writes (its bytes given back if
# fill raises); a new array holding a copy of NumPy array src.
cdef NDArray _new_filled(object dtype, int ndim, const Py_ssize_t* shape, object fill,
                         object op, bint fortran=*, bint detached=*)
cdef NDArray _copy_numpy(object src, Arena target, bint detached)
# A fresh array's values written by fill(numpy_view) after it is checked like any output (its
# bytes given back on error); a new array of `shape` laid out per NumPy's `order` relative to
# a source with the given strides.
cdef NDArray _fill_new(NDArray out, object fill, object op)
cdef NDArray _alloc_like(object dtype, int ndim, const Py_ssize_t* shape,
                         const Py_ssize_t* src_strides, Py_ssize_t src_itemsize, object order,
                         bint c_contig, bint f_contig, Arena target, bint detached)


cdef inline bint _fortran(object order) except -1:
    # the order= of the creation functions ('C' or 'F'); identity first: the default "C" is the
    # same interned object on every call
    if order is "C":
        return False
    if order == "F" or order == "f":
        return True
    if order == "C" or order == "c" or order is None:
        return False
    raise ValueError(f"order: expected 'C' or 'F', got {order!r}")

# -- dtypes ----------------------------------------------------------------------------------------

cdef object _as_dtype(object obj)                                  # cached numpy.dtype(obj)
cdef int _check_dtype(object dt, str what=*) except -1             # numbers only, native order
cdef int only_numbers(object src, str what) except -1               # no text, no None
# NumPy's shape rules: the dimensions of `shape` (an int or a sequence) into out[], returns ndim
cdef int _parse_shape(object shape, Py_ssize_t* out) except -1
cdef tuple _shape_tuple(int ndim, const Py_ssize_t* shape)

# -- views -----------------------------------------------------------------------------------------

cdef object np_view(NDArray a)
# An operand for NumPy: an NDArray as a validated view, anything else as it is.
cdef object _operand(object x, object op, object role)
# Another thread's NDArray as a detached NDArray over a pinned view (its block stays out of the
# owner's reuse while the result lives); anything else as it is. For kernels that read raw
# pointers without the GIL (docs/workspaces.md, "Threads").
cdef object pin_foreign(object x, object op, object role)
# Whether `a` is C- / Fortran-contiguous (size-1 axes may have any stride; empty arrays are);
# inline: every fast path asks.
cdef inline bint _c_contiguous(NDArray a) noexcept:
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


cdef inline bint _f_contiguous(NDArray a) noexcept:
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



# -- the operator table ----------------------------------------------------------------------------
# NDArray's operators and methods (x + y, x.sum(), x @ y, ...) compute through these functions,
# which ndws._ufuncs (above this module) installs once at import: the arrays never import the
# ops. The codes name the native operations.

cdef enum:
    OP_ADD = 0
    OP_SUB = 1
    OP_MUL = 2
    OP_DIV = 3
    OP_MAX = 4
    OP_MIN = 5
    OP_NEG = 16
    OP_ABS = 17
    OP_SQUARE = 18
    OP_SQRT = 19
    OP_EXP = 20
    OP_LOG = 21
    OP_TANH = 22
    OP_RECIP = 23

cdef enum:
    RED_SUM = 0
    RED_MEAN = 1
    RED_MAX = 2
    RED_MIN = 3
    RED_ARGMAX = 4
    RED_ARGMIN = 5
    RED_VAR = 6
    RED_STD = 7

cdef enum:                     # which keywords a reduction takes besides axis/out/keepdims
    RKW_NONE = 0               # max, min, argmax, argmin
    RKW_DTYPE = 1              # sum, mean
    RKW_DDOF = 2               # var, std

ctypedef struct Operators:
    # x1 <op> x2 / <op>(x) natively, or NotImplemented when the native path does not cover it
    object (*fast_binary)(int op, object x1, object x2, object out, object name)
    object (*fast_unary)(int op, object x, object out, object name)
    # any NumPy ufunc with ndws placement (`dunder`: NotImplemented for operands NumPy sees only
    # as objects; `try_native`: try the native path first)
    object (*ufunc_call)(object ufunc, tuple args, object out, dict kwargs, bint dunder,
                         bint try_native)
    object (*compare)(object ufunc, NDArray a, object b)
    object (*array_ufunc)(object ufunc, str method, tuple inputs, dict kwargs)
    # reductions: the native path, then NumPy's; NumPy's only (prod, any, all)
    object (*reduce_entry)(int kind, str name, object a, object axis, object dtype, object out,
                           object keepdims, object ddof, int kw)
    object (*reduce_numpy)(str name, object a, object axis, object dtype, object out,
                           object keepdims)
    object (*matmul)(object x1, object x2, object out)
    object (*dot)(object a, object b, object out)
    object (*clip)(object a, object a_min, object a_max, object out)
    object (*norm)(object x, object ord, object axis, object keepdims)

cdef void install_operators(const Operators* table) noexcept
