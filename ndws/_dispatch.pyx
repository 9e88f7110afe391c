"""ndws._dispatch: the one contract every native kernel entry follows.

Between the arrays (ndws._core) and the kernels (ndws._ufuncs, ndws._linalg, ndws.nn's kernels,
ndws.evaluation's counting): how an entry reads its operands, gets its result placed and given
back on failure, and decides overlap; see ndws/_dispatch.pxd for the contract and
docs/architecture.md ("Adding a kernel") for a worked example. How many threads a kernel uses
and whether it drops the GIL is ndws._threads'.
"""
cimport numpy as cnp

from ndws._core cimport NDArray, NDWS_MAXDIMS, check_array, np_view, pin_foreign
from ndws._typedefs cimport intp_t

import numpy as np

from ndws._core import from_numpy as _from_numpy, _float_dtypes

cnp.import_array()

cdef object _F32, _F64
_F32, _F64 = _float_dtypes()


# ------------------------------------------------------------------------------------------------
# Operands for NumPy (the fallback paths)

cdef object as_operand(object x, str name, str role):
    # A NumPy view of an operand, or NotImplemented for one that is not a numeric array (the
    # operators then return NotImplemented; the public functions raise `operand_error`).
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


cdef object operand_error(str name, tuple operands, tuple roles):
    # the TypeError a public function raises for the first operand as_operand refuses
    for x, role in zip(operands, roles):
        if as_operand(x, name, role) is NotImplemented:
            if isinstance(x, np.ndarray):
                return TypeError(f"{name}: unsupported operand {role} of dtype {x.dtype}")
            return TypeError(f"{name}: unsupported operand {role} of type "
                             f"{type(x).__name__!r}")
    return TypeError(f"{name}: unsupported operands")


cdef object checked_operand(object x, str name, str role):
    # as_operand's NumPy view, or operand_error's TypeError for an operand of no numbers (and
    # NumPy's error for a ragged list, naming `role`): the public functions of one operand
    try:
        v = as_operand(x, name, role)
    except ValueError as e:
        raise ValueError(f"{name}: {role}: {e}") from None
    if v is NotImplemented:
        raise operand_error(name, (x,), (role,))
    return v


def numeric_operand(x, str name, str role):
    """checked_operand for the Python entries (ndws.ops)."""
    return checked_operand(x, name, role)


# ------------------------------------------------------------------------------------------------
# float32/float64 operands of the native kernels: as records (the GEMM reads pointer, shape and
# element strides) ...

cdef int _dtype_code(object dt) noexcept:
    # 0 float32, 1 float64 (native byte order), -1 anything else
    if dt is _F32:
        return 0
    if dt is _F64:
        return 1
    if dt == _F32:
        return 0
    if dt == _F64:
        return 1
    return -1


cdef int read_operand(object x, str op, str role, Operand* o, bint write) except -1:
    cdef NDArray arr
    cdef cnp.ndarray nd
    cdef int i, code
    cdef intp_t item, s
    cdef cnp.npy_intp* dims
    cdef cnp.npy_intp* strides
    if isinstance(x, NDArray):
        arr = <NDArray>x
        check_array(arr, op, role)
        code = _dtype_code(arr._dtype)
        if code < 0 or (write and not arr._writeable):
            return 0
        item = arr._itemsize
        o.data = arr._data
        o.ndim = arr._ndim
        o.f64 = code
        for i in range(arr._ndim):
            s = arr._strides[i]
            if s % item:
                return 0
            o.shape[i] = arr._shape[i]
            o.strides[i] = s // item
        return 1
    if isinstance(x, cnp.ndarray):
        nd = <cnp.ndarray>x
        code = _dtype_code(<object>cnp.PyArray_DESCR(nd))
        if code < 0 or cnp.PyArray_NDIM(nd) > NDWS_MAXDIMS:
            return 0
        if write and not cnp.PyArray_ISWRITEABLE(nd):
            return 0
        item = 8 if code else 4
        dims = cnp.PyArray_DIMS(nd)
        strides = cnp.PyArray_STRIDES(nd)
        o.data = <char*>cnp.PyArray_DATA(nd)
        o.ndim = cnp.PyArray_NDIM(nd)
        o.f64 = code
        for i in range(o.ndim):
            s = strides[i]
            if s % item:
                return 0
            o.shape[i] = dims[i]
            o.strides[i] = s // item
        return 1
    return 0


cdef bint operands_overlap(const Operand* x, const Operand* y) noexcept:
    cdef char* xl
    cdef char* xh
    cdef char* yl
    cdef char* yh
    cdef intp_t xi = 8 if x.f64 else 4, yi = 8 if y.f64 else 4
    byte_extent(x.data, x.ndim, x.shape, x.strides, xi, xi, &xl, &xh)
    byte_extent(y.data, y.ndim, y.shape, y.strides, yi, yi, &yl, &yh)
    return ranges_overlap(xl, xh, yl, yh)


cdef bint self_overlapping(const Operand* o) noexcept:
    # a zero stride on a dimension longer than 1 writes one element twice
    cdef int i
    for i in range(o.ndim):
        if o.strides[i] == 0 and o.shape[i] > 1:
            return True
    return False



cdef int float_operand(object x, str role, Operand* o, bint write, str op) except -1:
    if not read_operand(x, op, role, o, write):
        if (write and isinstance(x, (NDArray, np.ndarray)) and _dtype_code(x.dtype) >= 0
                and not x.flags.writeable):
            raise ValueError(f"{op}: {role} is read-only")
        if isinstance(x, (NDArray, np.ndarray)) and _dtype_code(x.dtype) >= 0:
            raise ValueError(f"{op}: {role} has strides {x.strides} that are not whole "
                             f"{x.dtype.itemsize}-byte elements")
        what = (f"dtype {x.dtype}" if isinstance(x, (NDArray, np.ndarray))
                else f"type {type(x).__name__}")
        raise TypeError(f"{op}: {role} must be an NDArray of float32 or float64, got {what}")
    return 0


# ... and as NDArrays (the element-wise nn kernels, losses and updaters)

cdef inline bint is_float(NDArray a) noexcept:
    cdef int t = (<cnp.dtype>a._dtype).type_num
    return t == cnp.NPY_FLOAT32 or t == cnp.NPY_FLOAT64


cdef bint whole_strides(NDArray a) noexcept:
    # element strides must be whole elements (NumPy allows odd byte strides; kernels index
    # by element)
    cdef int d
    for d in range(a._ndim):
        if a._strides[d] % a._itemsize != 0:
            return False
    return True


cdef NDArray _wrap_numpy(object x, str op, str role):
    # a NumPy array wrapped without a copy; ndws arrays hold native byte order, so one in the
    # other order is refused here by name (the wrap's own error names neither)
    if not x.dtype.isnative:
        raise TypeError(f"{op}: {role} has dtype {x.dtype.str!r}, not in native byte order "
                        f"(ndws arrays use it: convert with "
                        f".astype({x.dtype.newbyteorder('=').str!r}))")
    return <NDArray>_from_numpy(x)


cdef NDArray _convert(object x, str op, str role, object dtype):
    # A NumPy array is wrapped without a copy; anything else goes through numpy.asarray
    # (`dtype`, when given, is the dtype a Python sequence/scalar is converted to).
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(x, dtype=dtype)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{op}: {role} must be an NDArray or array_like of float32/float64, "
                            f"got {type(x).__name__}") from exc
    if x.dtype.kind not in "biufc":
        raise TypeError(f"{op}: {role} must be a float32 or float64 array, got dtype {x.dtype}")
    return _wrap_numpy(x, op, role)


cdef NDArray float_arg(object x, str op, str role, object dtype=None):
    """A checked float32/float64 operand (TypeError naming `role` otherwise)."""
    cdef NDArray a
    if x is None:
        raise TypeError(f"{op}: {role} is required: an NDArray or array_like of float32 or "
                        f"float64, got None")
    x = pin_foreign(x, op, role)       # another thread's array: read through a pinned view
    if isinstance(x, NDArray):
        a = <NDArray>x
    else:
        a = _convert(x, op, role, dtype)
    check_array(a, op, role)
    if not is_float(a):
        raise TypeError(f"{op}: {role} must be a float32 or float64 array, got dtype {a._dtype}")
    if not whole_strides(a):
        a = _convert(np.ascontiguousarray(np.asarray(a)), op, role, None)
    return a


cdef int same_as(NDArray a, NDArray b, str op, str role, str ref) except -1:
    """b must have a's dtype (TypeError) and shape (ValueError)."""
    cdef int d
    if b._itemsize != a._itemsize or (<cnp.dtype>b._dtype).type_num != (
            <cnp.dtype>a._dtype).type_num:
        raise TypeError(f"{op}: {role} has dtype {b._dtype}, expected {a._dtype} (the dtype of "
                        f"{ref})")
    if b._ndim == a._ndim:
        for d in range(a._ndim):
            if a._shape[d] != b._shape[d]:
                break
        else:
            return 0
    raise ValueError(f"{op}: {role} has shape {shape_of(b)}, expected {shape_of(a)} (the shape "
                     f"of {ref})")


cdef tuple shape_of(NDArray a):
    return tuple([a._shape[d] for d in range(a._ndim)])


cdef NDArray array_arg(object x, str op, str role):
    """An NDArray or NumPy array argument, unconverted, pinned when foreign, and checked."""
    cdef NDArray a
    x = pin_foreign(x, op, role)
    if isinstance(x, NDArray):
        a = <NDArray>x
    elif isinstance(x, np.ndarray):
        a = _wrap_numpy(x, op, role)
    else:
        raise TypeError(f"{op}: {role} must be an NDArray or numpy.ndarray, "
                        f"got {type(x).__name__}")
    check_array(a, op, role)
    return a


cdef NDArray scratch_arg(object scratch, str op, tuple others):
    """A caller's scratch array, checked to be writeable, C-contiguous and apart from `others`."""
    cdef NDArray a = array_arg(scratch, op, "scratch")
    if not a._writeable:
        raise ValueError(f"{op}: scratch is read-only")
    if not a.flags.c_contiguous:
        raise ValueError(f"{op}: scratch must be C-contiguous")
    for other in others:
        if other is not None and arrays_overlap(a, <NDArray>other):
            raise ValueError(f"{op}: scratch overlaps an input or output array")
    return a


cdef NDArray out_arg(object out, NDArray like, str op, str role, str ref):
    """A checked, writeable output of like's dtype and shape."""
    cdef NDArray o = array_arg(out, op, role)
    if not o._writeable:
        raise ValueError(f"{op}: {role} is read-only")
    if not whole_strides(o):
        raise ValueError(f"{op}: {role} has strides {tuple(o._strides[d] for d in range(o._ndim))}"
                         f" that are not whole {o._itemsize}-byte elements")
    same_as(like, o, op, role, ref)
    return o


cdef bint clashes(NDArray o, NDArray a) noexcept:
    cdef int d
    if a is None or not arrays_overlap(o, a):
        return False
    if o._data == a._data:
        for d in range(o._ndim):
            if o._strides[d] != a._strides[d] and o._shape[d] > 1:
                return True
        return False
    return True


cdef double real_arg(object v, str op, str role) except? -1.0:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: {role} must be a real number, got {v!r}")
    try:
        return <double>v
    except OverflowError:          # a Python int beyond any double
        raise ValueError(f"{op}: {role} must be a finite real number, got {v!r:.40}") from None
