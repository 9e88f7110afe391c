# Typing stub for ndws.nn._conv2d (the public surface is ndws.nn.functional).
from typing import Any

import numpy as np

from ndws._core import NDArray
from ndws.nn._conv import _In, _Out, _Pad, _Pair

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
