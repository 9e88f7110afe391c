# Typing stub for ndws.nn._rnn_entries (the public surface is ndws.nn.functional).
from typing import Any

import numpy as np
import numpy.typing as npt

from ndws._core import NDArray
from ndws.workspace import DummyWorkspace, Workspace

_In = NDArray | npt.ArrayLike
_Out = NDArray | np.ndarray | None
_Loop = Workspace | DummyWorkspace | None
_G = NDArray | np.ndarray

def lstm_forward(x: _In, W: _In, RW: _In, b: _In, h0: _In | None = ..., c0: _In | None = ...,
                 mask: _In | None = ..., *, activation: str | None = ...,
                 gate_activation: str | None = ..., peepholes: bool = ...,
                 data_format: str = ..., out: _Out = ..., h_out: _Out = ..., c_out: _Out = ...,
                 cache: _Out = ..., loop_workspace: _Loop = ...,
                 scratch: _Out = ...) -> tuple[_G, _G, _G]: ...
def lstm_backward(x: _In, W: _In, RW: _In, cache: _G, grad_output: _In,
                  h0: _In | None = ..., c0: _In | None = ..., mask: _In | None = ...,
                  grad_h: _In | None = ..., grad_c: _In | None = ..., *,
                  activation: str | None = ..., gate_activation: str | None = ...,
                  peepholes: bool = ..., data_format: str = ..., back_length: int | None = ...,
                  need_input: bool = ..., grad_input: _Out = ..., grad_W: _Out = ...,
                  grad_RW: _Out = ..., grad_b: _Out = ..., grad_h0: _Out = ...,
                  grad_c0: _Out = ..., loop_workspace: _Loop = ...,
                  scratch: _Out = ...) -> tuple[_G | None, _G, _G, _G, _G, _G]: ...
def simple_rnn_forward(x: _In, W: _In, RW: _In, b: _In, h0: _In | None = ...,
                       mask: _In | None = ..., *, activation: str | None = ...,
                       data_format: str = ..., out: _Out = ..., h_out: _Out = ...,
                       cache: _Out = ..., loop_workspace: _Loop = ...,
                       scratch: _Out = ...) -> tuple[_G, _G]: ...
def simple_rnn_backward(x: _In, W: _In, RW: _In, cache: _G, grad_output: _In,
                        h0: _In | None = ..., mask: _In | None = ..., grad_h: _In | None = ...,
                        *, activation: str | None = ..., data_format: str = ...,
                        back_length: int | None = ..., need_input: bool = ...,
                        grad_input: _Out = ..., grad_W: _Out = ..., grad_RW: _Out = ...,
                        grad_b: _Out = ..., grad_h0: _Out = ..., loop_workspace: _Loop = ...,
                        scratch: _Out = ...) -> tuple[_G | None, _G, _G, _G, _G]: ...
def lstm_cache_shape(time: int, batch: int, n_out: int, *, activation: str | None = ...,
                     gate_activation: str | None = ...) -> tuple[int, int, int]: ...
def simple_rnn_cache_shape(time: int, batch: int, n_out: int, *,
                           activation: str | None = ...) -> tuple[int, int, int]: ...
def lstm_scratch_bytes(batch: int, n_in: int, n_out: int, time: int, *, dtype: Any = ...,
                       backward: bool = ..., peepholes: bool = ..., cache: bool = ...,
                       mask: bool = ..., loop_workspace: bool = ...,
                       back_length: int | None = ...) -> int: ...
def simple_rnn_scratch_bytes(batch: int, n_in: int, n_out: int, time: int, *,
                             dtype: Any = ..., backward: bool = ..., cache: bool = ...,
                             mask: bool = ..., loop_workspace: bool = ...,
                             back_length: int | None = ...) -> int: ...
