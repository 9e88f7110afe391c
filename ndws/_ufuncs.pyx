"""ndws._ufuncs: the element-wise and reduction entry points (``ndws.add``, ``ndws.sum``, ...),
their native float32/float64 paths and loops, and the linear-algebra entry points; what the
native paths do not cover goes to the NumPy path of ndws._fallback. NDArray's operators reach
the same code through the operator table this module installs into ndws._core once, at import.

Above the kernel contract (ndws._dispatch), the GEMM (ndws._linalg) and the NumPy path
(ndws._fallback); see docs/architecture.md, "How x + y reaches a loop".

Examples
--------
>>> import ndws
>>> x = ndws.asarray([1.0, 2.0, 3.0])
>>> ndws.add(x, 1).tolist(), (x * x).sum().item()
([2.0, 3.0, 4.0], 14.0)
"""

cimport cython
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.float cimport FLT_MAX
from libc.math cimport isinf
from libc.stdlib cimport malloc, free
from libc.stdint cimport int64_t
cimport numpy as cnp

from ndws._core cimport (NDArray, NDWS_MAXDIMS, Operators, install_operators, check_array,
                         np_view, discard, _c_contiguous, _foreign, _as_dtype,
                         _check_dtype, _copy_numpy, _operand,
                         OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MAX, OP_MIN, OP_NEG, OP_ABS,
                         OP_SQUARE, OP_SQRT, OP_EXP, OP_LOG, OP_TANH, OP_RECIP,
                         RED_SUM, RED_MEAN, RED_MAX, RED_MIN, RED_ARGMAX, RED_ARGMIN, RED_VAR,
                         RED_STD, RKW_NONE, RKW_DTYPE, RKW_DDOF)
from ndws._dispatch cimport place_result, arrays_overlap, checked_operand, operand_error
from ndws._fallback cimport numpy_ufunc
from ndws._threads cimport threads_for, release_gil, run_blocks, GRAIN_ELEMENTWISE, GRAIN_REDUCE
from ndws._arena cimport epoch_ptr, debug_mode_ptr, ndws_share

import sys
import warnings

import numpy as np

from ndws._core import new_filled as _place_filled, _float_dtypes
# the NumPy path's public functions, where ndws.ops and the tests have always found them
from ndws._fallback import numpy_matmul as _numpy_matmul, reduce_call
from ndws._creation import array as _array
from ndws._linalg import matmul as _linalg_matmul

ndws_share(epoch_ptr(), debug_mode_ptr())

cnp.import_array()
cnp.import_ufunc()   # PyUFunc_GiveFloatingpointErrors (the fast paths' errstate reporting)

cdef object _F32, _F64
_F32, _F64 = _float_dtypes()


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
            discard(made)
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
    cdef NDArray a = None, b = None, big, o = None
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
    o = place_result(o, dt, big._ndim, big._shape, name)
    if out is None:
        made = o
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
    cdef NDArray a, o = None
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
    o = place_result(o, dt, a._ndim, a._shape, name)
    if out is None:
        made = o
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
                discard(made)
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
    outer == 1). Returns the NPY_FPE_* flags of the sums. Static blocks of rows run in
    parallel; one long row runs its pairwise tree's leaves (sums) or fixed chunks (extremes) in
    parallel, with the serial result's bits either way."""
    cdef Py_ssize_t i, c, chunk, best_i
    cdef _Job j
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
    chunk = (r + _TREE_LEAVES - 1) // _TREE_LEAVES  # extremes' fixed chunks, folded in order
    j.site, j.op, j.f64, j.X, j.O, j.K = _FLAT, kind, floating_t is float64_t, A__ri, O__r, K__r
    j.r, j.den, j.S, j.idx, j.step = r, den, vals, idx, 0 if outer > 1 else chunk
    if outer > 1:
        return run_blocks(_block, &j, outer, nthreads, nthreads)
    if extremes:
        run_blocks(_block, &j, _TREE_LEAVES, _TREE_LEAVES, nthreads)
    if kind == RED_MAX or kind == RED_MIN:
        s = vals[0]
        for c in range(1, _TREE_LEAVES):
            if c * chunk < r:
                s = _pick(want_max, s, vals[c])
        O__r[0] = s
        return 0
    if extremes:
        # argmax/argmin: a NaN ends the search, otherwise only a strictly better value
        # replaces the best (the first index of the extreme)
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
    s = <floating_t>0 + tree_sum(A__ri, r, False, <floating_t>0, nthreads, &fl)
    fl |= ndws_fpe_read()
    if kind == RED_VAR or kind == RED_STD:
        mu = _finish(RED_MEAN, s, r)
        ndws_fpe_clear()
        q = <floating_t>0 + tree_sum(A__ri, r, True, mu, nthreads, &fl)
        fl |= ndws_fpe_read()
        O__r[0] = _root(kind, _finish(RED_VAR, q, den))
    else:
        O__r[0] = _finish(kind, s, r)
    return fl


cdef inline int _piece(floating_t* O, _Job* j, Py_ssize_t lo, Py_ssize_t hi,
                       Py_ssize_t c) noexcept nogil:
    # block c of any loop (_Job.site): tree_sum's leaf lo, _reduce_strided's units [lo, hi) in
    # the c-th scratch slice, _reduce_flat's rows [lo, hi) or one row's c-th chunk
    cdef const floating_t* A = <const floating_t*>j.X
    cdef bint want_max = j.op == RED_MAX or j.op == RED_ARGMAX
    cdef int fl = 0
    if j.site == _ELEMENTWISE:
        return _ew_piece(O, j, lo, hi)
    if j.site == _LEAF:
        ndws_fpe_clear()
        O[lo] = (pairwise_ssd(A + j.idx[lo], j.ln[lo], (<const floating_t*>j.Y)[0]) if j.squares
                 else pairwise_sum(A + j.idx[lo], j.ln[lo]))
        return ndws_fpe_read()
    if j.site == _STRIDED:
        for lo in range(lo, hi):
            fl |= _strided_unit(j.op, A, j.r, j.n, j.den, O, j.K, <floating_t*>j.S + c * j.step,
                                j.levels, j.cw, j.nch, lo)
    elif j.step == 0:
        for lo in range(lo, hi):
            fl |= _flat_row(j.op, A + lo * j.r, j.r, j.den, O, j.K, lo, True)
    else:
        lo, hi = c * j.step, (c + 1) * j.step if (c + 1) * j.step < j.r else j.r
        if j.op == RED_MAX or j.op == RED_MIN:
            if lo < hi:
                (<floating_t*>j.S)[c] = extreme(A + lo, hi - lo, want_max)
        else:
            j.idx[c] = lo + arg_extreme(A + lo, hi - lo, want_max) if lo < hi else -1
    return fl


cdef int _block(void* ctx, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t c) noexcept nogil:
    cdef _Job* j = <_Job*>ctx
    return (_piece(<float64_t*>j.O, j, lo, hi, c) if j.f64
            else _piece(<float32_t*>j.O, j, lo, hi, c))


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
    (sum_rows / extreme_rows). Units are (outer, column chunk) pairs, in at most `nthreads`
    static blocks; block c works in the c-th `per_thread` slice of `scratch` (rows_levels(r) + 1
    rows of the chunk width; unused by max/min). Chunks depend on `inner` only, and every
    output element is computed the same way whatever the thread count."""
    cdef Py_ssize_t cw = _chunk_width(inner)
    cdef Py_ssize_t nch = (inner + cw - 1) // cw
    cdef Py_ssize_t levels = rows_levels(r)
    cdef _Job j
    j.site, j.op, j.f64, j.X, j.O, j.K, j.S = (_STRIDED, kind, floating_t is float64_t, A__orj,
                                               O__oj, K__oj, scratch)
    j.r, j.n, j.den, j.step, j.levels, j.cw, j.nch = r, inner, den, per_thread, levels, cw, nch
    return run_blocks(_block, &j, outer * nch, nthreads, nthreads)


cdef inline Py_ssize_t _chunk_width(Py_ssize_t inner) noexcept nogil:
    return inner if inner < _COL_CHUNK else _COL_CHUNK


cdef object _fast_reduce(int kind, object a, object axis, object dtype, object out,
                         object keepdims, object ddof, object name):
    """A reduction natively, or None when not covered: float32/float64 C-contiguous
    non-empty `a`, axis None or one int, no dtype change, a dense disjoint `out`. Sums that
    raise floating-point flags are redone by NumPy, so warnings and errstate are NumPy's."""
    cdef NDArray arr, o = None
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
    o = place_result(o, rdt, nd, shape, name)
    if out is None:
        made = o
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
                    discard(made)
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
            discard(made)
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
# NumPy's ufuncs on ndws operands (np.add(a, b), ndws.ufunc_call, the operators' fallback): the
# native path when it applies, else ndws._fallback's NumPy path.

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
    cdef int nin
    if try_native and not kwargs:
        # np.add(a, b) on NDArrays, ndws.ufunc_call, clip, ...: the native path when it applies
        op = _FAST_UFUNCS.get(ufunc)
        if op is not None:
            nin = ufunc.nin
            res = NotImplemented
            if nin == 2 and len(args) == 2:
                res = _fast_binary(op, args[0], args[1], out, ufunc.__name__)
            elif nin == 1 and len(args) == 1:
                res = _fast_unary(op, args[0], out, ufunc.__name__)
            if res is not NotImplemented:
                return res
    return numpy_ufunc(ufunc, args, out, kwargs, dunder)


cdef object _compare(object ufunc, NDArray a, object b):
    # == and != with an operand NumPy can only see as an object (None, a string, ...): NumPy
    # compares element-wise through object loops; so does ndws, into a bool result.
    r = _ufunc_call(ufunc, (a, b), None, {}, True)
    if r is NotImplemented:
        check_array(a, ufunc.__name__, "x1")
        res = ufunc(np_view(a), np.asarray(b, dtype=object))
        return _copy_numpy(np.asarray(res, dtype=np.bool_), None, False)
    return r


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


# ------------------------------------------------------------------------------------------------
# Linear algebra entry points: the native GEMM of ndws._linalg first (it returns NotImplemented
# for what it does not cover: integer and mixed dtypes), NumPy for the rest; the NumPy path is
# also the reference the tests compare the GEMM with.

cdef object _native_matmul = _linalg_matmul


def _set_native_matmul(fn):
    """Swap the native matmul (for the test proving every entry point reaches it); returns the
    previous one."""
    global _native_matmul
    prev, _native_matmul = _native_matmul, fn
    return prev


def matmul(x1, x2, out=None):
    """Matrix product with NumPy's ``matmul`` rules (1-D promotion, batch broadcasting)."""
    r = _matmul(x1, x2, out)
    if r is NotImplemented:
        raise operand_error("matmul", (x1, x2), ("x1", "x2"))
    return r


cdef object _matmul(object x1, object x2, object out):
    # NotImplemented for operands that are not numeric arrays (the operators' cue)
    if _native_matmul is not None:
        res = _native_matmul(x1, x2, out)
        if res is not NotImplemented:
            return res
    return _numpy_matmul(x1, x2, out)


@cython.wraparound(True)
def dot(a, b, out=None):
    """Dot product with NumPy's ``dot`` rules."""
    return _dot(a, b, out)


@cython.wraparound(True)
cdef object _dot(object a, object b, object out):
    av = checked_operand(a, "dot", "a")
    bv = checked_operand(b, "dot", "b")
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
    return _place_filled(shape, dt, lambda v: np.dot(av, bv, out=v), op="dot")


def clip(a, a_min=None, a_max=None, out=None):
    """Limit values to ``[a_min, a_max]`` (NumPy's ``clip``); either bound may be None."""
    return _clip(a, a_min, a_max, out)


cdef object _clip(object a, object a_min, object a_max, object out):
    if a_min is None and a_max is None:
        # NumPy >= 2.1: nothing to clip, a copy (or a copy into `out`)
        if out is not None:
            np.copyto(_operand(out, "clip", "out"), checked_operand(a, "clip", "a"))
            return out
        return _array(a)
    if a_min is None:
        return _ufunc_call(np.minimum, (a, a_max), out, {}, False)
    if a_max is None:
        return _ufunc_call(np.maximum, (a, a_min), out, {}, False)
    return _ufunc_call(np._core.umath.clip, (a, a_min, a_max), out, {}, False)


def norm(x, ord=None, axis=None, keepdims=False):
    """Vector or matrix norm with ``numpy.linalg.norm`` semantics, placed like any new array."""
    return _norm(x, ord, axis, keepdims)


cdef object _norm(object x, object ord, object axis, object keepdims):
    v = checked_operand(x, "norm", "x")
    r = np.asarray(np.linalg.norm(v, ord=ord, axis=axis, keepdims=keepdims))
    return _copy_numpy(r, None, False)


# ------------------------------------------------------------------------------------------------
# NDArray's operators and methods call the paths above through ndws._core's operator table,
# filled once here: the arrays sit below the ops and never import them.

cdef object _reduce_numpy(str name, object a, object axis, object dtype, object out,
                          object keepdims):
    return reduce_call(name, getattr(np, name), a, axis, out, keepdims, dtype=dtype)


cdef object _matmul_op(object x1, object x2, object out):
    return _matmul(x1, x2, out)


cdef object _ufunc_call_op(object ufunc, tuple args, object out, dict kwargs, bint dunder,
                           bint try_native):
    return _ufunc_call(ufunc, args, out, kwargs, dunder, try_native)


cdef Operators _table
_table.fast_binary = _fast_binary
_table.fast_unary = _fast_unary
_table.ufunc_call = _ufunc_call_op
_table.compare = _compare
_table.array_ufunc = _array_ufunc
_table.reduce_entry = _reduce_entry
_table.reduce_numpy = _reduce_numpy
_table.matmul = _matmul_op
_table.dot = _dot
_table.clip = _clip
_table.norm = _norm
install_operators(&_table)
