# Typing stub for ndws.nn._conv (the public surface is ndws.nn.functional).
from typing import Any

import numpy as np
import numpy.typing as npt

from ndws._core import NDArray

_In = NDArray | npt.ArrayLike
_Out = NDArray | np.ndarray | None
_Pair = int | tuple[int, int]
_Pad = int | tuple[int, int] | tuple[int, int, int, int]

def im2col(x: _In, kernel_size: _Pair, stride: _Pair = ..., padding: _Pad = ...,
           dilation: _Pair = ..., data_format: str = ..., out: _Out = ...) -> NDArray: ...
def col2im(col: _In, input_size: tuple[int, int], stride: _Pair = ..., padding: _Pad = ...,
           dilation: _Pair = ..., data_format: str = ..., out: _Out = ...) -> NDArray: ...
def conv_output_size(in_size: int, kernel_size: int, stride: int = ...,
                     padding: int | tuple[int, int] = ..., dilation: int = ...,
                     mode: Any = ..., dim: str = ...) -> int: ...
def same_padding(in_size: int, kernel_size: int, stride: int = ...,
                 dilation: int = ...) -> tuple[int, int]: ...
def conv_transpose_output_size(in_size: int, kernel_size: int, stride: int = ...,
                               padding: int | tuple[int, int] = ..., dilation: int = ...,
                               mode: Any = ...) -> int: ...
