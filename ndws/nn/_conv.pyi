# Typing stub for ndws.nn._conv (the public surface is ndws.nn.functional).
from typing import Any

import numpy as np
import numpy.typing as npt

from ndws._core import NDArray

_In = NDArray | npt.ArrayLike
_Out = NDArray | np.ndarray | None
_Pair = int | tuple[int, int]
_Pad = int | tuple[int, int] | tuple[int, int, int, int]
_Grads = tuple[NDArray | np.ndarray | None, NDArray | np.ndarray | None,
               NDArray | np.ndarray | None]

def conv2d(x: _In, w: _In, b: _In | None = ..., stride: _Pair = ..., padding: _Pad = ...,
           dilation: _Pair = ..., data_format: str = ..., activation: str | None = ...,
           out: _Out = ..., scratch: _Out = ..., **params: Any) -> NDArray: ...
def conv2d_backward(x: _In, w: _In, grad_output: _In, stride: _Pair = ..., padding: _Pad = ...,
                    dilation: _Pair = ..., data_format: str = ..., need_input: bool = ...,
                    need_weight: bool = ..., need_bias: bool = ..., grad_input: _Out = ...,
                    grad_weight: _Out = ..., grad_bias: _Out = ...,
                    scratch: _Out = ...) -> _Grads: ...
def conv_transpose2d(x: _In, w: _In, b: _In | None = ..., stride: _Pair = ...,
                     padding: _Pad = ..., dilation: _Pair = ..., data_format: str = ...,
                     activation: str | None = ..., out: _Out = ..., scratch: _Out = ...,
                     **params: Any) -> NDArray: ...
def conv_transpose2d_backward(x: _In, w: _In, grad_output: _In, stride: _Pair = ...,
                              padding: _Pad = ..., dilation: _Pair = ...,
                              data_format: str = ..., need_input: bool = ...,
                              need_weight: bool = ..., need_bias: bool = ...,
                              grad_input: _Out = ..., grad_weight: _Out = ...,
                              grad_bias: _Out = ..., scratch: _Out = ...) -> _Grads: ...
def conv2d_scratch_bytes(x_shape: tuple[int, int, int, int], w_shape: tuple[int, int, int, int],
                         stride: _Pair = ..., padding: _Pad = ..., dilation: _Pair = ...,
                         data_format: str = ..., dtype: Any = ..., backward: bool = ...,
                         transposed: bool = ..., threads: int | None = ...) -> int: ...
def depthwise_conv2d(x: _In, w: _In, b: _In | None = ..., stride: _Pair = ...,
                     padding: _Pad = ..., dilation: _Pair = ..., data_format: str = ...,
                     activation: str | None = ..., out: _Out = ..., **params: Any) -> NDArray: ...
def depthwise_conv2d_backward(x: _In, w: _In, grad_output: _In, stride: _Pair = ...,
                              padding: _Pad = ..., dilation: _Pair = ...,
                              data_format: str = ..., need_input: bool = ...,
                              need_weight: bool = ..., need_bias: bool = ...,
                              grad_input: _Out = ..., grad_weight: _Out = ...,
                              grad_bias: _Out = ...) -> _Grads: ...
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
