# Typing stub for ndws._ufuncs (element-wise, reduction and linear-algebra entry points).
from typing import Any, Sequence

import numpy as np

from ndws._core import NDArray

_Shape = int | Sequence[int]
_DType = Any

def ufunc_call(ufunc: np.ufunc, args: tuple, out: Any = ..., **kwargs: Any) -> Any: ...
def reduce_call(name: str, func: Any, a: Any, axis: Any = ..., out: Any = ...,
                keepdims: bool = ..., **extra: Any) -> Any: ...
def matmul(x1: Any, x2: Any, out: Any = ...) -> NDArray: ...

# Native fast paths (published by ndws.ops under NumPy's names): NumPy's ufunc signature,
# keywords other than out= taking the NumPy path.
def _ufunc_add(x1: Any, x2: Any, /, out: Any = ..., *, where: Any = ..., casting: str = ...,
               order: str = ..., dtype: _DType = ..., subok: bool = ...,
               signature: Any = ...) -> NDArray: ...
_ufunc_subtract = _ufunc_add
_ufunc_multiply = _ufunc_add
_ufunc_divide = _ufunc_add
_ufunc_maximum = _ufunc_add
_ufunc_minimum = _ufunc_add
def _ufunc_exp(x: Any, /, out: Any = ..., *, where: Any = ..., casting: str = ...,
               order: str = ..., dtype: _DType = ..., subok: bool = ...,
               signature: Any = ...) -> NDArray: ...
_ufunc_negative = _ufunc_exp
_ufunc_absolute = _ufunc_exp
_ufunc_square = _ufunc_exp
_ufunc_sqrt = _ufunc_exp
_ufunc_log = _ufunc_exp
_ufunc_tanh = _ufunc_exp
_ufunc_reciprocal = _ufunc_exp
def _reduce_sum(a: Any, axis: int | None = ..., dtype: _DType = ..., out: Any = ...,
                keepdims: bool = ...) -> NDArray: ...
_reduce_mean = _reduce_sum
def _reduce_max(a: Any, axis: int | None = ..., out: Any = ...,
                keepdims: bool = ...) -> NDArray: ...
_reduce_min = _reduce_max
_reduce_argmax = _reduce_max
_reduce_argmin = _reduce_max
def _reduce_var(a: Any, axis: int | None = ..., dtype: _DType = ..., out: Any = ...,
                ddof: int = ..., keepdims: bool = ...) -> NDArray: ...
_reduce_std = _reduce_var
def _native_calls() -> dict[str, tuple[int, int]]: ...
def dot(a: Any, b: Any, out: Any = ...) -> NDArray: ...
def clip(a: Any, a_min: Any = ..., a_max: Any = ..., out: Any = ...) -> NDArray: ...
def norm(x: Any, ord: Any = ..., axis: Any = ..., keepdims: bool = ...) -> NDArray: ...
def _set_native_matmul(fn: Any) -> Any: ...
