# Typing stub for ndws.nn._losses (the public surface is ndws.nn.functional).
from typing import Any, Literal, overload

import numpy as np
import numpy.typing as npt

from ndws._core import NDArray

_In = NDArray | npt.ArrayLike
_Out = NDArray | np.ndarray | None
_Approx = Literal["none", "tanh"]
_Reduction = Literal["mean", "sum", "none"]

def softmax_cross_entropy(logits: _In, labels: _In, weights: _In | None = ...,
                          mask: _In | None = ..., reduction: _Reduction = ..., grad: bool = ...,
                          grad_out: _Out = ...) -> Any: ...
def binary_cross_entropy_with_logits(logits: _In, targets: _In, weights: _In | None = ...,
                                     mask: _In | None = ..., reduction: _Reduction = ...,
                                     grad: bool = ..., grad_out: _Out = ...) -> Any: ...
def mse_loss(pred: _In, target: _In, weights: _In | None = ..., mask: _In | None = ...,
             reduction: _Reduction = ..., grad: bool = ..., grad_out: _Out = ...) -> Any: ...
def mae_loss(pred: _In, target: _In, weights: _In | None = ..., mask: _In | None = ...,
             reduction: _Reduction = ..., grad: bool = ..., grad_out: _Out = ...) -> Any: ...
def cosine_proximity_loss(pred: _In, target: _In, weights: _In | None = ...,
                          mask: _In | None = ..., reduction: _Reduction = ..., grad: bool = ...,
                          grad_out: _Out = ...) -> Any: ...
def hinge_loss(pred: _In, target: _In, weights: _In | None = ..., mask: _In | None = ...,
               reduction: _Reduction = ..., grad: bool = ..., grad_out: _Out = ...) -> Any: ...
def squared_hinge_loss(pred: _In, target: _In, weights: _In | None = ...,
                       mask: _In | None = ..., reduction: _Reduction = ..., grad: bool = ...,
                       grad_out: _Out = ...) -> Any: ...
def kl_divergence_loss(pred: _In, target: _In, weights: _In | None = ...,
                       mask: _In | None = ..., reduction: _Reduction = ..., grad: bool = ...,
                       grad_out: _Out = ...) -> Any: ...
def poisson_loss(pred: _In, target: _In, weights: _In | None = ..., mask: _In | None = ...,
                 reduction: _Reduction = ..., grad: bool = ..., grad_out: _Out = ...) -> Any: ...
def msle_loss(pred: _In, target: _In, weights: _In | None = ..., mask: _In | None = ...,
              reduction: _Reduction = ..., grad: bool = ..., grad_out: _Out = ...) -> Any: ...
def mape_loss(pred: _In, target: _In, weights: _In | None = ..., mask: _In | None = ...,
              reduction: _Reduction = ..., grad: bool = ..., grad_out: _Out = ...) -> Any: ...
def wasserstein_loss(pred: _In, target: _In, weights: _In | None = ...,
                     mask: _In | None = ..., reduction: _Reduction = ..., grad: bool = ...,
                     grad_out: _Out = ...) -> Any: ...
