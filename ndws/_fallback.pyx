"""ndws._fallback: the NumPy path of every entry point. Operands are validated (invariant 2)
and viewed, the result is allocated in the current workspace (invariant 3) or `out=` is used,
and NumPy computes into it; an error gives the result's bytes back. It covers what the native
fast paths of ndws._ufuncs do not (other dtypes, broadcasting beyond a row or a column,
keywords, reductions over several axes) and is the reference the native paths are tested
against.

Below ndws._ufuncs (which tries its native paths first and calls `numpy_ufunc` for the rest) and
above the kernel contract (ndws._dispatch); see docs/architecture.md, "How x + y reaches a
loop".

Examples
--------
>>> import numpy as np, ndws
>>> from ndws._fallback import reduce_call
>>> x = ndws.asarray(np.arange(6, dtype=np.int32).reshape(2, 3))
>>> with ndws.workspace("FALLBACK") as ws:                 # int32: no native loop
...     y = x + x
...     (y.workspace_id, y.tolist())
('FALLBACK', [[0, 2, 4], [6, 8, 10]])
>>> reduce_call("sum", np.sum, x, axis=(0, 1)).item()
15
"""
cimport cython
from cpython.number cimport PyNumber_Index
cimport numpy as cnp

from ndws._core cimport (NDArray, NDWS_MAXDIMS, check_array, np_view, new_array, discard,
                         _check_dtype, _copy_numpy, _new_filled, _operand)
from ndws._dispatch cimport as_operand

import numpy as np

from ndws._core import new_filled as _place_filled

cnp.import_array()



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


cdef object numpy_ufunc(object ufunc, tuple args, object out, dict kwargs, bint dunder):
    # `dunder`: an operand NumPy can only see as an object makes the call NotImplemented (the
    # operators' cue) instead of a TypeError.
    cdef int nin = ufunc.nin, nout = ufunc.nout, i
    cdef int nd = 0
    cdef Py_ssize_t shape[NDWS_MAXDIMS]
    cdef NDArray o
    name = ufunc.__name__
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
            discard(o)
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


@cython.wraparound(True)
def numpy_matmul(x1, x2, out=None):
    """`matmul` computed by NumPy on views (the reference for the native kernel)."""
    a = as_operand(x1, "matmul", "x1")
    b = as_operand(x2, "matmul", "x2")
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
    return _place_filled(shape, dt, lambda v: np.matmul(a, b, out=v), op="matmul")
