# ndws._dispatch for other Cython modules: the one contract every native kernel entry follows
# (docs/architecture.md, "Adding a kernel"). An entry reads its operands here (stale arrays
# refused with the argument's role, another thread's arrays pinned, NumPy arrays wrapped without
# a copy), asks for its result here (placed like every result, given back on failure), decides
# overlap with the one definition here, and signals "this path does not cover this case" by
# returning NotImplemented. The thread count and the GIL threshold are ndws._threads'.
from ndws._core cimport NDArray, NDWS_MAXDIMS, check_array, new_array, discard, _is_valid
from ndws._typedefs cimport intp_t


# -- results ---------------------------------------------------------------------------------

# A fresh C-contiguous result placed like every op's result (the current workspace, else
# detached memory) and checked like any output; the caller fills it in a nogil kernel. On an
# error before it is returned, `discard_result` gives its bytes back.
cdef inline NDArray new_result(object dtype, int ndim, const Py_ssize_t* shape, object op):
    # inline, so a kernel entry makes one call into _core for its result (new_array), not two
    cdef NDArray out = new_array(dtype, ndim, shape, False, False, None, False)
    if not _is_valid(out):
        # a closed current workspace yields a dead array: give its bytes back, then raise
        discard(out)
        check_array(out, op, "out")
    return out


cdef inline void discard_result(NDArray a) noexcept:
    discard(a)

cdef inline NDArray place_result(NDArray out, object dtype, int ndim, const Py_ssize_t* shape,
                                 object op):
    # `out` checked as the call's output, or (None) a new result: the last step of every
    # native entry before its kernel runs (its inputs are checked first, in argument order).
    if out is None:
        return new_result(dtype, ndim, shape, op)
    check_array(out, op, "out")
    return out


# -- names -----------------------------------------------------------------------------------

# A str argument naming one of two choices in any case (a layout: 'NCHW' or 'NHWC', 'NCW' or
# 'NWC'): False for `first`, True for `second`, else ValueError naming the argument.
cdef inline bint second_name(object v, str op, str role, str first, str second) except -1:
    if isinstance(v, str):
        f = v.upper()
        if f == first:
            return False
        if f == second:
            return True
    raise ValueError(f"{op}: {role} must be '{first}' or '{second}', got {v!r}")


# -- operands for NumPy ----------------------------------------------------------------------

# A NumPy view of an operand (an NDArray checked and viewed, a numeric NumPy array or
# array_like as it is), or NotImplemented for one that is not a numeric array: the operators
# then return NotImplemented, the public functions raise `operand_error`'s TypeError.
cdef object as_operand(object x, str name, str role)
cdef object operand_error(str name, tuple operands, tuple roles)
# as_operand's view, else operand_error raised (a function of one operand)
cdef object checked_operand(object x, str name, str role)


# -- float32/float64 operands of the native kernels ---------------------------------------------

# Pointer, shape and element strides of an NDArray or a NumPy array, read directly (no
# memoryview, no buffer export per call).
ctypedef struct Operand:
    char* data
    int ndim
    int f64                       # 0 float32, 1 float64
    intp_t shape[NDWS_MAXDIMS]
    intp_t strides[NDWS_MAXDIMS]  # in elements

# Fill `o` from `x`: 1 when a kernel can use it, 0 when it cannot (other dtypes, non-arrays,
# byte strides that are not whole elements, a read-only array when `write`). A stale NDArray
# raises WorkspaceError naming `role`.
cdef int read_operand(object x, str op, str role, Operand* o, bint write) except -1
# As read_operand, raising TypeError/ValueError naming `role` where it returns 0.
cdef int float_operand(object x, str role, Operand* o, bint write, str op) except -1

# Whether two operands' bytes intersect; whether an operand writes some element twice (a zero
# stride on a dimension longer than 1).
cdef bint operands_overlap(const Operand* x, const Operand* y) noexcept
cdef bint self_overlapping(const Operand* o) noexcept

# The same as NDArrays: a checked float32/float64 operand (another thread's array through a
# pinned view, array_likes converted with `dtype` when given, odd byte strides through a
# contiguous copy), TypeError naming `role` otherwise.
cdef NDArray float_arg(object x, str op, str role, object dtype=*)
# An array argument as it is (no conversion): an NDArray, or a NumPy array wrapped without a
# copy; another thread's array through a pinned view; checked (stale, destroyed); TypeError
# naming `role` for anything else. Outputs, caches, scratch and index arrays start here.
cdef NDArray array_arg(object x, str op, str role)
# A caller's `scratch=` array: an array argument that is writeable, C-contiguous and overlaps
# none of `others` (the call's inputs and outputs; None entries skipped), ValueError otherwise.
cdef NDArray scratch_arg(object scratch, str op, tuple others)
# A checked, writeable output of like's dtype and shape (`ref` names `like` in the messages).
cdef NDArray out_arg(object out, NDArray like, str op, str role, str ref)
# b must have a's dtype (TypeError) and shape (ValueError); `ref` names a.
cdef int same_as(NDArray a, NDArray b, str op, str role, str ref) except -1
cdef bint whole_strides(NDArray a) noexcept     # every byte stride a whole element
cdef tuple shape_of(NDArray a)
# A scalar hyper-parameter: an int or float (not a bool), TypeError naming `role` otherwise.
cdef double real_arg(object v, str op, str role) except? -1.0


# -- overlap ---------------------------------------------------------------------------------
# The one definition every kernel entry uses: [lo, hi) of a view, intersection of two ranges.
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


# True when output o and input a share memory other than element for element (a kernel
# writing o could then overwrite elements of a it has yet to read): such an `out=` is computed
# through a temporary.
cdef bint clashes(NDArray o, NDArray a) noexcept
