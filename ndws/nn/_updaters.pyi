# Typing stub for ndws.nn._updaters (the public surface is ndws.nn.functional).
from typing import Any, Literal, overload

import numpy as np
import numpy.typing as npt

from ndws._core import NDArray

_In = NDArray | npt.ArrayLike
_Out = NDArray | np.ndarray | None
_Approx = Literal["none", "tanh"]
_Reduction = Literal["mean", "sum", "none"]

def sgd_update(param: Any, grad: _In, lr: float) -> Any: ...
def momentum_update(param: Any, grad: _In, velocity: Any, lr: float, momentum: float = ...,
                    nesterov: bool = ...) -> Any: ...
def adam_update(param: Any, grad: _In, m: Any, v: Any, step: int, lr: float = ...,
                beta1: float = ..., beta2: float = ..., eps: float = ...) -> Any: ...
def adamw_update(param: Any, grad: _In, m: Any, v: Any, step: int, lr: float = ...,
                 beta1: float = ..., beta2: float = ..., eps: float = ...,
                 weight_decay: float = ...) -> Any: ...
def rmsprop_update(param: Any, grad: _In, sq: Any, lr: float = ..., rho: float = ...,
                   eps: float = ...) -> Any: ...
def adagrad_update(param: Any, grad: _In, hist: Any, lr: float = ..., eps: float = ...) -> Any: ...
