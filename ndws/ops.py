"""The public math surface over NDArray, with NumPy's names and semantics.

Every function validates its NDArray arguments (``WorkspaceError`` for a stale one), places its
result in the calling thread's current workspace (detached memory when none is current) unless
``out=`` is given. The common float32/float64 cases of the arithmetic functions (``add``,
``multiply``, ``exp``, ...) and reductions (``sum``, ``max``, ``argmax``, ``var``, ...) run in
native kernels of `ndws._ufuncs`, which these names are bound to directly (no Python wrapper in
between, for a small per-call cost); every other case computes with NumPy on views of the
memory, through `ndws._ufuncs.ufunc_call` and `ndws._ufuncs.reduce_call`.

Examples
--------
>>> import ndws, numpy as np
>>> a = ndws.array([[1.0, -2.0], [3.0, -4.0]])
>>> ndws.maximum(a, 0).tolist()
[[1.0, 0.0], [3.0, 0.0]]
>>> ndws.sum(a, axis=1).tolist()
[-1.0, -1.0]
>>> ndws.where(a > 0, a, 0.5).tolist()
[[1.0, 0.5], [3.0, 0.5]]
"""
from __future__ import annotations

import builtins
from typing import Any, Callable, Sequence

import numpy as np

from ndws import _core, _creation, _dispatch, _ufuncs
from ndws._core import NDArray
from ndws._ufuncs import clip, dot, matmul, norm
from ndws._linalg import gemm

__all__ = [
    # element-wise (NumPy ufuncs)
    "absolute", "abs", "add", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctan2",
    "arctanh", "bitwise_and", "bitwise_or", "bitwise_xor", "cbrt", "ceil", "copysign", "cos",
    "cosh", "divide", "equal", "exp", "exp2", "expm1", "floor", "floor_divide", "fmax", "fmin",
    "greater", "greater_equal", "hypot", "invert", "isfinite", "isinf", "isnan", "left_shift",
    "less", "less_equal", "log", "log10", "log1p", "log2", "logaddexp", "logical_and",
    "logical_not", "logical_or", "logical_xor", "maximum", "minimum", "mod", "multiply",
    "negative", "not_equal", "positive", "power", "reciprocal", "remainder", "right_shift",
    "rint", "sign", "signbit", "sin", "sinh", "sqrt", "square", "subtract", "tan", "tanh",
    "true_divide", "trunc",
    # reductions
    "all", "amax", "amin", "any", "argmax", "argmin", "max", "mean", "min", "norm", "prod",
    "std", "sum", "var",
    # linear algebra and selection
    "clip", "dot", "gemm", "matmul", "where",
    # shape and joining
    "concatenate", "copy", "expand_dims", "ravel", "reshape", "squeeze", "stack", "swapaxes",
    "transpose",
]

_UFUNC_DOC = """{summary}

Same as ``numpy.{npname}``, with the result placed in the calling thread's current workspace
(detached memory when none is current) unless `out` is given.

Parameters
----------
{params} : array_like or NDArray
    Operands; NDArrays are validated and read in place.
out : NDArray, optional
    Where to write the result.
**kwargs
    ``where``, ``casting``, ``dtype`` or ``signature``, as for NumPy ufuncs.

Returns
-------
NDArray
    The result, or `out`.

Raises
------
ndws.WorkspaceError
    When an NDArray argument is stale.
"""


_NATIVE_UFUNC_DOC = """{summary}

Same as ``numpy.{npname}``, with the result placed in the calling thread's current workspace
(detached memory when none is current) unless `out` is given. float32/float64 operands that are
C-contiguous, of one dtype, and of the same shape, a scalar, or a row ``(n,)`` / column
``(m, 1)`` broadcast, run in ndws' native kernel (NumPy's results and floating-point warnings);
everything else computes with NumPy.

Parameters
----------
{params} : array_like or NDArray
    Operands; NDArrays are validated and read in place.
out : NDArray, optional
    Where to write the result (it may be an input).
where, casting, order, dtype, subok, signature : optional
    As for NumPy ufuncs; a non-default value takes the NumPy path.

Returns
-------
NDArray
    The result, or `out`.

Raises
------
ndws.WorkspaceError
    When an NDArray argument is stale.
"""


def _native(fn: Callable[..., Any], np_ufunc: np.ufunc, summary: str) -> Callable[..., Any]:
    # `fn` is a compiled function of ndws._ufuncs with NumPy's signature; it is published as is,
    # only named and documented here.
    fn.__name__ = fn.__qualname__ = np_ufunc.__name__
    fn.__module__ = "ndws"
    fn.__doc__ = _NATIVE_UFUNC_DOC.format(summary=summary, npname=np_ufunc.__name__,
                                          params="x" if np_ufunc.nin == 1 else "x1, x2")
    return fn


def _ufunc(np_ufunc: np.ufunc, summary: str, name: str | None = None) -> Callable[..., Any]:
    name = name or np_ufunc.__name__
    call = _ufuncs.ufunc_call
    if np_ufunc.nin == 1:
        def op(x, /, out=None, **kwargs):
            return call(np_ufunc, (x,), out, **kwargs)
        params = "x"
    else:
        def op(x1, x2, /, out=None, **kwargs):
            return call(np_ufunc, (x1, x2), out, **kwargs)
        params = "x1, x2"
    op.__name__ = op.__qualname__ = name
    op.__module__ = "ndws"
    op.__doc__ = _UFUNC_DOC.format(summary=summary, npname=np_ufunc.__name__, params=params)
    return op


add = _native(_ufuncs._ufunc_add, np.add, "Add arguments element-wise.")
subtract = _native(_ufuncs._ufunc_subtract, np.subtract, "Subtract arguments element-wise.")
multiply = _native(_ufuncs._ufunc_multiply, np.multiply, "Multiply arguments element-wise.")
divide = _native(_ufuncs._ufunc_divide, np.divide,
                 "Divide arguments element-wise (true division).")
true_divide = divide  # one function, as in NumPy 2 (np.true_divide is np.divide)
floor_divide = _ufunc(np.floor_divide, "Largest integer not greater than the quotient.")
remainder = _ufunc(np.remainder, "Element-wise remainder of division (Python's %).")
mod = _ufunc(np.remainder, "Element-wise remainder of division (Python's %).", "mod")
power = _ufunc(np.power, "First array raised to powers from the second, element-wise.")
maximum = _native(_ufuncs._ufunc_maximum, np.maximum, "Element-wise maximum (NaNs propagate).")
minimum = _native(_ufuncs._ufunc_minimum, np.minimum, "Element-wise minimum (NaNs propagate).")
fmax = _ufunc(np.fmax, "Element-wise maximum ignoring NaNs.")
fmin = _ufunc(np.fmin, "Element-wise minimum ignoring NaNs.")
arctan2 = _ufunc(np.arctan2, "Element-wise arc tangent of x1/x2 choosing the quadrant.")
hypot = _ufunc(np.hypot, "Element-wise hypotenuse sqrt(x1**2 + x2**2).")
copysign = _ufunc(np.copysign, "x1 with the sign of x2, element-wise.")
logaddexp = _ufunc(np.logaddexp, "log(exp(x1) + exp(x2)), computed stably.")
equal = _ufunc(np.equal, "x1 == x2 element-wise.")
not_equal = _ufunc(np.not_equal, "x1 != x2 element-wise.")
less = _ufunc(np.less, "x1 < x2 element-wise.")
less_equal = _ufunc(np.less_equal, "x1 <= x2 element-wise.")
greater = _ufunc(np.greater, "x1 > x2 element-wise.")
greater_equal = _ufunc(np.greater_equal, "x1 >= x2 element-wise.")
logical_and = _ufunc(np.logical_and, "Element-wise logical AND.")
logical_or = _ufunc(np.logical_or, "Element-wise logical OR.")
logical_xor = _ufunc(np.logical_xor, "Element-wise logical XOR.")
bitwise_and = _ufunc(np.bitwise_and, "Element-wise bitwise AND.")
bitwise_or = _ufunc(np.bitwise_or, "Element-wise bitwise OR.")
bitwise_xor = _ufunc(np.bitwise_xor, "Element-wise bitwise XOR.")
left_shift = _ufunc(np.left_shift, "Shift the bits of x1 left by x2.")
right_shift = _ufunc(np.right_shift, "Shift the bits of x1 right by x2.")

negative = _native(_ufuncs._ufunc_negative, np.negative, "Numerical negative, element-wise.")
positive = _ufunc(np.positive, "Numerical positive (a copy), element-wise.")
absolute = _native(_ufuncs._ufunc_absolute, np.absolute, "Absolute value, element-wise.")
abs = absolute  # one function, as in NumPy (np.abs is np.absolute)
sign = _ufunc(np.sign, "Sign (-1, 0, 1), element-wise.")
exp = _native(_ufuncs._ufunc_exp, np.exp, "Exponential, element-wise.")
exp2 = _ufunc(np.exp2, "2**x, element-wise.")
expm1 = _ufunc(np.expm1, "exp(x) - 1, accurate for small x.")
log = _native(_ufuncs._ufunc_log, np.log, "Natural logarithm, element-wise.")
log2 = _ufunc(np.log2, "Base-2 logarithm, element-wise.")
log10 = _ufunc(np.log10, "Base-10 logarithm, element-wise.")
log1p = _ufunc(np.log1p, "log(1 + x), accurate for small x.")
sqrt = _native(_ufuncs._ufunc_sqrt, np.sqrt, "Non-negative square root, element-wise.")
square = _native(_ufuncs._ufunc_square, np.square, "Square, element-wise.")
cbrt = _ufunc(np.cbrt, "Cube root, element-wise.")
reciprocal = _native(_ufuncs._ufunc_reciprocal, np.reciprocal, "1/x, element-wise.")
sin = _ufunc(np.sin, "Sine, element-wise.")
cos = _ufunc(np.cos, "Cosine, element-wise.")
tan = _ufunc(np.tan, "Tangent, element-wise.")
arcsin = _ufunc(np.arcsin, "Inverse sine, element-wise.")
arccos = _ufunc(np.arccos, "Inverse cosine, element-wise.")
arctan = _ufunc(np.arctan, "Inverse tangent, element-wise.")
sinh = _ufunc(np.sinh, "Hyperbolic sine, element-wise.")
cosh = _ufunc(np.cosh, "Hyperbolic cosine, element-wise.")
tanh = _native(_ufuncs._ufunc_tanh, np.tanh, "Hyperbolic tangent, element-wise.")
arcsinh = _ufunc(np.arcsinh, "Inverse hyperbolic sine, element-wise.")
arccosh = _ufunc(np.arccosh, "Inverse hyperbolic cosine, element-wise.")
arctanh = _ufunc(np.arctanh, "Inverse hyperbolic tangent, element-wise.")
floor = _ufunc(np.floor, "Floor, element-wise.")
ceil = _ufunc(np.ceil, "Ceiling, element-wise.")
trunc = _ufunc(np.trunc, "Truncate toward zero, element-wise.")
rint = _ufunc(np.rint, "Round to the nearest integer (half to even), element-wise.")
isnan = _ufunc(np.isnan, "True where NaN.")
isinf = _ufunc(np.isinf, "True where +/-inf.")
isfinite = _ufunc(np.isfinite, "True where finite.")
signbit = _ufunc(np.signbit, "True where the sign bit is set.")
logical_not = _ufunc(np.logical_not, "Element-wise logical NOT.")
invert = _ufunc(np.invert, "Bitwise NOT (logical NOT for bool), element-wise.")


# -- reductions -------------------------------------------------------------------------------

_REDUCE_DOC = """{summary}

Same as ``numpy.{npname}``. The result, a 0-d array for a reduction over all axes, is placed in
the calling thread's current workspace unless `out` is given (as ND4J's scalar results are,
it takes one aligned slot there); use ``.item()`` for a Python number.

Parameters
----------
a : array_like or NDArray
axis : None or int or tuple of ints, optional
{extra}out : NDArray, optional
keepdims : bool, optional

Returns
-------
NDArray
"""


def _native_reduction(fn: Callable[..., Any], np_func: Callable[..., Any], name: str,
                      summary: str, extra: str = "") -> Callable[..., Any]:
    # a compiled reduction of ndws._ufuncs (native for float32/float64 C-contiguous arrays with
    # axis None or one int; NumPy otherwise), named and documented here
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = "ndws"
    fn.__doc__ = _REDUCE_DOC.format(summary=summary, npname=np_func.__name__, extra=extra)
    return fn


_DTYPE_DOC = "dtype : data-type, optional\n"
_DDOF_DOC = "dtype : data-type, optional\nddof : int, optional\n"


def _reduction(np_func: Callable[..., Any], name: str, summary: str,
               with_dtype: bool = False, with_ddof: bool = False) -> Callable[..., Any]:
    call = _ufuncs.reduce_call
    if with_ddof:
        def op(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
            return call(name, np_func, a, axis, out, keepdims, dtype=dtype, ddof=ddof)
        extra = "dtype : data-type, optional\nddof : int, optional\n"
    elif with_dtype:
        def op(a, axis=None, dtype=None, out=None, keepdims=False):
            return call(name, np_func, a, axis, out, keepdims, dtype=dtype)
        extra = "dtype : data-type, optional\n"
    else:
        def op(a, axis=None, out=None, keepdims=False):
            return call(name, np_func, a, axis, out, keepdims)
        extra = ""
    op.__name__ = op.__qualname__ = name
    op.__module__ = "ndws"
    op.__doc__ = _REDUCE_DOC.format(summary=summary, npname=np_func.__name__, extra=extra)
    return op


sum = _native_reduction(_ufuncs._reduce_sum, np.sum, "sum",
                       "Sum of elements over the given axes.", _DTYPE_DOC)
mean = _native_reduction(_ufuncs._reduce_mean, np.mean, "mean",
                        "Arithmetic mean over the given axes.", _DTYPE_DOC)
prod = _reduction(np.prod, "prod", "Product of elements over the given axes.", with_dtype=True)
max = _native_reduction(_ufuncs._reduce_max, np.max, "max", "Maximum over the given axes.")
min = _native_reduction(_ufuncs._reduce_min, np.min, "min", "Minimum over the given axes.")
amax = max
amin = min
argmax = _native_reduction(_ufuncs._reduce_argmax, np.argmax, "argmax",
                          "Index of the maximum (int64) along an axis.")
argmin = _native_reduction(_ufuncs._reduce_argmin, np.argmin, "argmin",
                          "Index of the minimum (int64) along an axis.")
std = _native_reduction(_ufuncs._reduce_std, np.std, "std",
                       "Standard deviation over the given axes.", _DDOF_DOC)
var = _native_reduction(_ufuncs._reduce_var, np.var, "var",
                       "Variance over the given axes.", _DDOF_DOC)
any = _reduction(np.any, "any", "Whether any element is true over the given axes.")
all = _reduction(np.all, "all", "Whether all elements are true over the given axes.")


# -- selection ----------------------------------------------------------------------------------

def _view(x: Any, op: str, role: str) -> Any:
    if isinstance(x, NDArray):
        return _core._np_view(x, op, role)
    return x


def _numbers(x: Any, op: str, role: str) -> Any:
    """Operand `x` of `op` as NumPy computes with it: a Python number as it is (NumPy's weak
    scalar promotion), anything else a NumPy view that holds numbers; text, None and other
    objects are refused naming `role` (NumPy would parse text, compute with objects, or read a
    list as a dtype in `np.result_type`)."""
    if type(x) in (bool, int, float, complex):
        return x
    return _dispatch.numeric_operand(x, op, role)


def _shape_of(v: Any) -> tuple:
    return np.shape(v)


def where(condition: Any, x: Any = None, y: Any = None, *, out: Any = None) -> Any:
    """Elements of `x` where `condition` holds, else of `y` (NumPy's ``where``).

    With only `condition`, the indices of its non-zero elements, as a tuple of int64 arrays.

    Parameters
    ----------
    condition, x, y : array_like or NDArray
    out : NDArray, optional
        Where to write the result (an ndws addition; it must have the broadcast shape).

    Returns
    -------
    NDArray or tuple of NDArray
    """
    c = _numbers(condition, "where", "condition")
    if x is None and y is None:
        if out is not None:
            raise TypeError("where: out is only supported with x and y")
        return tuple(_core._np_result(i) for i in np.nonzero(c))
    if x is None or y is None:
        raise ValueError("either both or neither of x and y should be given")
    xv = _numbers(x, "where", "x")
    yv = _numbers(y, "where", "y")
    try:
        shape = np.broadcast_shapes(_shape_of(c), _shape_of(xv), _shape_of(yv))
    except ValueError:
        np.where(c, xv, yv)  # NumPy's own broadcasting message
        raise

    rdt = np.result_type(xv, yv)

    def fill(v: np.ndarray) -> None:
        np.copyto(v, yv, casting="unsafe")
        np.copyto(v, xv, casting="unsafe", where=np.asarray(c, dtype=bool))
    if out is not None:
        if not isinstance(out, (NDArray, np.ndarray)):
            raise TypeError(f"where: out must be an NDArray (or a numpy.ndarray), got "
                            f"{type(out).__name__}")
        target = _view(out, "where", "out")
        if np.shape(target) != shape:
            raise ValueError(f"where: out has shape {np.shape(target)}, the result has "
                             f"shape {shape}")
        if not np.can_cast(rdt, target.dtype, casting="same_kind"):
            # the rule of every other out= (NumPy's ufuncs)
            raise TypeError(f"where: cannot cast the result from {rdt!r} to out's dtype "
                            f"{target.dtype!r} with casting rule 'same_kind'")
        if builtins.any(isinstance(v, np.ndarray) and np.may_share_memory(target, v)
               for v in (c, xv, yv)):
            # out aliases an input: the two-step fill would read values it already wrote
            np.copyto(target, np.where(c, xv, yv), casting="same_kind")
        else:
            fill(target)
        return out
    return _core.new_filled(shape, rdt, fill, op="where")


# -- shape and joining --------------------------------------------------------------------------

def reshape(a: NDArray, shape: Any, order: str = "C") -> NDArray:
    """`a` with a new shape: a view when possible, else a copy (NumPy's ``reshape``)."""
    return _creation.asarray(a).reshape(shape, order=order)


def transpose(a: NDArray, axes: Sequence[int] | None = None) -> NDArray:
    """View of `a` with its axes permuted (reversed by default)."""
    return _creation.asarray(a).transpose(axes)


def swapaxes(a: NDArray, axis1: int, axis2: int) -> NDArray:
    """View of `a` with two axes interchanged."""
    return _creation.asarray(a).swapaxes(axis1, axis2)


def squeeze(a: NDArray, axis: int | Sequence[int] | None = None) -> NDArray:
    """View of `a` without length-one axes."""
    return _creation.asarray(a).squeeze(axis)


def expand_dims(a: NDArray, axis: int | Sequence[int]) -> NDArray:
    """View of `a` with length-one axes inserted at `axis`."""
    arr = _creation.asarray(a)
    return _core._wrap_result(arr, np.expand_dims(_core._np_view(arr, "expand_dims", "a"), axis))


def ravel(a: NDArray, order: str = "C") -> NDArray:
    """Flattened view when possible, else a copy."""
    return _creation.asarray(a).ravel(order)


def copy(a: Any, order: str = "K") -> NDArray:
    """A copy of `a` in the current workspace (NumPy's ``copy``: layout kept by default)."""
    if isinstance(a, NDArray):
        return a.copy(order)
    return _creation.array(a, order=order)


def _join(name: str, arrays: Sequence[Any], axis: int | None, out: Any, dtype: Any,
          casting: str, shape_of: Callable[[list], tuple]) -> NDArray:
    if isinstance(arrays, NDArray):
        arrays = list(arrays)  # NumPy treats an array as the sequence of its rows
    views = [_numbers(a, name, f"arrays[{i}]") for i, a in enumerate(arrays)]
    func = getattr(np, name)
    if out is not None:
        func(views, axis=axis, out=_view(out, name, "out"), dtype=dtype, casting=casting)
        return out
    views = [np.asarray(v) for v in views]
    try:
        shape = shape_of(views)
    except (ValueError, IndexError):
        func(views, axis=axis, dtype=dtype, casting=casting)  # NumPy's own message
        raise
    result_dtype = np.dtype(dtype) if dtype is not None else np.result_type(*views)
    # the output already has the requested dtype: NumPy takes out= or dtype=, not both
    return _core.new_filled(shape, result_dtype,
                            lambda v: func(views, axis=axis, out=v, casting=casting), op=name)


def concatenate(arrays: Sequence[Any], axis: int | None = 0, out: Any = None, *,
                dtype: Any = None, casting: str = "same_kind") -> NDArray:
    """Join arrays along an existing axis (NumPy's ``concatenate``)."""
    def shape_of(views: list) -> tuple:
        if not views:
            raise ValueError("need at least one array to concatenate")
        if axis is None:
            return (builtins.sum(v.size for v in views),)
        first = views[0].shape
        ax = np.lib.array_utils.normalize_axis_index(axis, len(first))
        total = 0
        for v in views:
            if v.ndim != len(first) or v.shape[:ax] + v.shape[ax + 1:] != first[:ax] + first[ax + 1:]:
                raise ValueError("shape mismatch")
            total += v.shape[ax]
        return first[:ax] + (total,) + first[ax + 1:]
    return _join("concatenate", arrays, axis, out, dtype, casting, shape_of)


def stack(arrays: Sequence[Any], axis: int = 0, out: Any = None, *, dtype: Any = None,
          casting: str = "same_kind") -> NDArray:
    """Join arrays along a new axis (NumPy's ``stack``)."""
    def shape_of(views: list) -> tuple:
        if not views:
            raise ValueError("need at least one array to stack")
        first = views[0].shape
        if builtins.any(v.shape != first for v in views):
            raise ValueError("all input arrays must have the same shape")
        ax = np.lib.array_utils.normalize_axis_index(axis, len(first) + 1)
        return first[:ax] + (len(views),) + first[ax:]
    return _join("stack", arrays, axis, out, dtype, casting, shape_of)
