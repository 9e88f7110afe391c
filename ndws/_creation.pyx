"""ndws._creation: the creation functions (``empty``, ``zeros``, ``full``, ``arange``, ``array``,
``asarray``, ``from_dlpack``, ...), with NumPy's signatures and semantics, each result placed
in the calling thread's current workspace (detached memory when none is current, or when
``detached=True``).

Above the arrays (ndws._core: placement, `from_numpy`); see docs/architecture.md.

Examples
--------
>>> import ndws
>>> with ndws.workspace("CREATE") as ws:
...     a = ndws.full((2, 2), 3.0)
...     (a.is_attached(), a.tolist())
(True, [[3.0, 3.0], [3.0, 3.0]])
"""
cimport numpy as cnp
from cpython.pyport cimport PY_SSIZE_T_MAX

from ndws._core cimport (NDArray, NDWS_MAXDIMS, check_array, np_view, new_array, discard,
                         _as_dtype, _check_dtype, _parse_shape, _shape_tuple, _fortran,
                         _fill_new, _alloc_like, _copy_numpy, _c_contiguous,
                         _f_contiguous, only_numbers)

import numpy as np

from ndws._core import from_numpy

cnp.import_array()

__all__ = ["empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like",
           "full_like", "arange", "linspace", "eye", "array", "asarray", "from_dlpack"]


cdef NDArray _new(object dtype, int nd, Py_ssize_t* shp, bint zero, bint fortran, bint detached,
                  object shape):
    # new_array for a `shape` argument: the core's "array is too big" (its only plain
    # ValueError) names the argument here
    try:
        return new_array(dtype, nd, shp, zero, fortran, None, detached)
    except ValueError as exc:
        if type(exc) is not ValueError:
            raise
        raise ValueError(f"shape: {shape!r:.60} of {dtype} is too many bytes: {exc}") from None


cdef object _numbers(object obj, str name, object dtype=None):
    # `obj` as a NumPy array of numbers (of `dtype` when given) or an error naming `name`:
    # NumPy would make a string or object array, or raise its own error without the name
    try:
        v = np.asarray(obj) if dtype is None else np.asarray(obj, dtype=dtype)
    except OverflowError as exc:
        raise ValueError(f"{name}: {obj!r:.40} is out of bounds for {dtype} ({exc})") from None
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{name}: can't be made an array of numbers ({exc})") from None
    if v.dtype.hasobject and dtype is None:
        # Python ints beyond 64 bits are the one kind of number NumPy keeps as objects
        try:
            np.asarray(obj, dtype=np.int64)
        except OverflowError:
            raise ValueError(f"{name}: {obj!r:.40} does not fit in a 64-bit integer (give a "
                             f"float, or a float dtype)") from None
        except (TypeError, ValueError):
            pass
    if v.dtype.hasobject or v.dtype.kind not in "biufc":
        raise TypeError(f"{name}: expected a number or an array of numbers, got "
                        f"{type(obj).__name__} {obj!r:.40}")
    _check_dtype(v.dtype, name)                   # native byte order
    return v


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
    return _new(_as_dtype(dtype), nd, shp, False, _fortran(order), detached, shape)


def zeros(shape, dtype=None, order="C", *, detached=False):
    """New array of zeros, placed as `empty` places it."""
    cdef Py_ssize_t shp[NDWS_MAXDIMS]
    cdef int nd = _parse_shape(shape, shp)
    return _new(_as_dtype(dtype), nd, shp, True, _fortran(order), detached, shape)


def ones(shape, dtype=None, order="C", *, detached=False):
    """New array of ones (float64 unless `dtype`), placed as `empty` places it."""
    return full(shape, 1, _as_dtype(dtype), order, detached=detached)


def full(shape, fill_value, dtype=None, order="C", *, detached=False):
    """New array filled with `fill_value` (dtype inferred from it, as NumPy does)."""
    cdef Py_ssize_t shp[NDWS_MAXDIMS]
    cdef int nd = _parse_shape(shape, shp)
    dt = None if dtype is None else _as_dtype(dtype)
    fill_value = _fill_operand(fill_value, "full", _shape_tuple(nd, shp), dt)
    if dt is None:
        dt = _as_dtype(fill_value.dtype)
    cdef NDArray out = _new(dt, nd, shp, False, _fortran(order), detached, shape)
    return _fill_new(out, lambda v: np.copyto(v, fill_value, casting="unsafe"), "full")


cdef object _fill_operand(object fill_value, str op, tuple shape, object dt):
    # `fill_value` of full/full_like as a NumPy array, checked before anything is allocated:
    # numbers, a Python int within the bounds of an integer `dt` (NumPy 2 refuses the others
    # too; a C cast would wrap), and broadcastable to the new array's shape
    if isinstance(fill_value, NDArray):
        check_array(<NDArray>fill_value, op, "fill_value")
        v = np_view(<NDArray>fill_value)
    else:
        if (dt is not None and dt.kind in "iu" and isinstance(fill_value, int)
                and not isinstance(fill_value, bool)):
            info = np.iinfo(dt)
            if not info.min <= fill_value <= info.max:
                raise ValueError(f"fill_value: {fill_value} is out of bounds for {dt} (it "
                                 f"holds [{info.min}, {info.max}])")
        try:
            v = _numbers(fill_value, "fill_value")
        except ValueError:
            if dt is None or dt.kind not in "fc":
                raise
            v = _numbers(fill_value, "fill_value", dt)     # a big int for a float array
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
        proto = from_numpy(_numbers(a, "a"))
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
        fill_value = _fill_operand(fill_value, "full_like", out.shape, out.dtype)
    except BaseException:
        discard(out)
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
    try:
        values = np.arange(*args, dtype=None if dtype is None else _as_dtype(dtype))
    except ValueError as exc:            # NumPy's "Maximum allowed size exceeded" and kin
        raise ValueError(f"stop: too many values from start={start!r:.40} to stop="
                         f"{stop!r:.40} by step={step!r:.40} ({exc})") from None
    return _copy_numpy(values, None, detached)


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
    dt = None if dtype is None else _as_dtype(dtype)
    n = _count_arg(num, "num")
    # checked first: NumPy would raise its own errors (a DTypePromotionError for a string)
    # without naming the argument, or try to allocate first
    _numbers(start, "start")
    _numbers(stop, "stop")
    _check_count(n, 8 if dt is None else dt.itemsize, "num")
    return _copy_numpy(np.linspace(start, stop, n, endpoint=bool(endpoint), dtype=dt),
                       None, detached)


def eye(N, M=None, k=0, dtype=None, *, detached=False):
    """2-D array with ones on diagonal `k` (NumPy's ``eye``)."""
    dt = _as_dtype(dtype)
    rows = _count_arg(N, "N")
    cols = rows if M is None else _count_arg(M, "M")
    _check_bound(k, "k")
    if isinstance(k, float):
        raise TypeError(f"k: expected an int, got float {k!r}")
    _check_count(rows * cols, dt.itemsize, "N, M")
    return _copy_numpy(np.eye(rows, cols, k, dtype=dt), None, detached)


cdef object _count_arg(object value, str name):
    # a number of elements along an axis: an int >= 0
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int >= 0, got {type(value).__name__} "
                        f"{value!r:.40}")
    if value < 0:
        raise ValueError(f"{name}: expected an int >= 0, got {value!r}")
    return int(value)


cdef int _check_count(object count, Py_ssize_t itemsize, str name) except -1:
    # `count` elements of `itemsize` bytes must be an array NumPy can make (NumPy's own
    # message names no argument)
    if count * itemsize > PY_SSIZE_T_MAX:
        raise ValueError(f"{name}: {count} elements of {itemsize} bytes are too many: array "
                         f"is too big; `arr.size * arr.dtype.itemsize` is larger than the "
                         f"maximum possible size.")
    return 0


def array(obj, dtype=None, *, copy=True, order="K", ndmin=0, detached=False):
    """Array from `obj` (nested sequences, NumPy arrays, NDArrays, scalars).

    NumPy's ``array`` semantics, with the result in the current workspace (or detached). With
    ``copy=False`` an NDArray of the right dtype is returned itself and anything needing a copy
    raises ``ValueError``; ``copy=None`` copies only when needed. Only numbers make an array:
    text and None raise ``TypeError`` with a `dtype` too (where NumPy would read ``"1.5"`` as
    1.5 and make None a NaN), as ``torch.tensor`` does.
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
    if isinstance(ndmin, bool) or not isinstance(ndmin, (int, np.integer)):
        raise TypeError(f"ndmin: expected an int, got {type(ndmin).__name__} {ndmin!r:.40}")
    dt = None if dtype is None else _as_dtype(dtype)
    if dt is not None:
        only_numbers(src, "obj")
    try:
        arr = np.asarray(src, dtype=dt, order=order)
    except OverflowError as exc:
        raise ValueError(f"obj: {obj!r:.40} is out of bounds for {dt} ({exc})") from None
    except (TypeError, ValueError) as exc:
        if order not in ("C", "F", "A", "K", "c", "f", "a", "k", None):
            raise ValueError(f"order: expected 'C', 'F', 'A' or 'K', got {order!r}") from None
        raise type(exc)(f"obj: can't be made an array of numbers ({exc})") from None
    if arr.ndim < ndmin:
        arr = arr.reshape((1,) * (ndmin - arr.ndim) + arr.shape)
    if arr.dtype.hasobject and dt is None:
        _numbers(src, "obj")               # says which number does not fit, if one does not
    _check_dtype(arr.dtype, "obj")
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
