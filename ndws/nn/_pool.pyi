# Typing stub for ndws.nn._pool (the public surface is ndws.nn.functional).
import numpy as np
import numpy.typing as npt

from ndws._core import NDArray

_In = NDArray | npt.ArrayLike
_Out = NDArray | np.ndarray | None
_Pair = int | tuple[int, int]
_Pad = int | tuple[int, int] | tuple[int, int, int, int]

def max_pool2d(x: _In, kernel_size: _Pair, stride: _Pair | None = ..., padding: _Pad = ...,
               dilation: _Pair = ..., data_format: str = ..., out: _Out = ...,
               indices: _Out = ...,
               return_indices: bool = ...) -> NDArray | tuple[NDArray, NDArray]: ...
def max_pool2d_backward(x: _In, grad_output: _In, kernel_size: _Pair,
                        stride: _Pair | None = ..., padding: _Pad = ..., dilation: _Pair = ...,
                        data_format: str = ..., indices: _Out = ...,
                        out: _Out = ...) -> NDArray: ...
def avg_pool2d(x: _In, kernel_size: _Pair, stride: _Pair | None = ..., padding: _Pad = ...,
               dilation: _Pair = ..., data_format: str = ..., include_padding: bool = ...,
               out: _Out = ...) -> NDArray: ...
def avg_pool2d_backward(x: _In, grad_output: _In, kernel_size: _Pair,
                        stride: _Pair | None = ..., padding: _Pad = ..., dilation: _Pair = ...,
                        data_format: str = ..., include_padding: bool = ...,
                        out: _Out = ...) -> NDArray: ...
def sum_pool2d(x: _In, kernel_size: _Pair, stride: _Pair | None = ..., padding: _Pad = ...,
               dilation: _Pair = ..., data_format: str = ..., out: _Out = ...) -> NDArray: ...
def sum_pool2d_backward(x: _In, grad_output: _In, kernel_size: _Pair,
                        stride: _Pair | None = ..., padding: _Pad = ..., dilation: _Pair = ...,
                        data_format: str = ..., out: _Out = ...) -> NDArray: ...
def pnorm_pool2d(x: _In, p: float, kernel_size: _Pair, stride: _Pair | None = ...,
                 padding: _Pad = ..., dilation: _Pair = ..., data_format: str = ...,
                 out: _Out = ...) -> NDArray: ...
def pnorm_pool2d_backward(x: _In, grad_output: _In, p: float, kernel_size: _Pair,
                          stride: _Pair | None = ..., padding: _Pad = ...,
                          dilation: _Pair = ..., data_format: str = ...,
                          out: _Out = ...) -> NDArray: ...
def zero_pad2d(x: _In, padding: _Pad, data_format: str = ..., out: _Out = ...) -> NDArray: ...
def zero_pad2d_backward(grad_output: _In, padding: _Pad, data_format: str = ...,
                        out: _Out = ...) -> NDArray: ...
def crop2d(x: _In, cropping: _Pad, data_format: str = ..., out: _Out = ...) -> NDArray: ...
def crop2d_backward(grad_output: _In, cropping: _Pad, data_format: str = ...,
                    out: _Out = ...) -> NDArray: ...
def upsample2d(x: _In, size: _Pair = ..., data_format: str = ...,
               out: _Out = ...) -> NDArray: ...
def upsample2d_backward(grad_output: _In, size: _Pair = ..., data_format: str = ...,
                        out: _Out = ...) -> NDArray: ...
