"""The torch-like functional surface of ndws' native kernels: ``import ndws.nn.functional as F``.

The fused dense layer `linear` (GEMM + bias + activation), activations (forward and
derivative), softmax / log-softmax along an axis, losses with their gradients, fused in-place
updaters, the convolutional kernels: `conv2d` and its gradients, the transposed and
depthwise convolutions, `im2col` / `col2im`, pooling, zero padding, cropping and upsampling,
with DL4J's size helpers, and the recurrent time loops (`lstm_forward` / `lstm_backward`,
`simple_rnn_forward` / `simple_rnn_backward`: whole sequences in compiled code). Every
function is a compiled function of `ndws.nn._act_entries`, `_losses`, `_updaters`, `_linear`,
`_conv`, `_conv2d`, `_depthwise`, `_pool` or `_rnn_entries` (the dense layer, the convolutions
and the time loops run on `ndws._linalg`'s GEMM kernels), with no Python layer in between: a
call on a small array costs a few hundred nanoseconds.

Conventions
-----------
* Inputs are `ndws.NDArray` or anything `numpy.asarray` accepts (NumPy arrays are wrapped
  without a copy); the dtype must be float32 or float64, else TypeError naming the argument.
  Any strides work (views, negative strides).
* Results go to ``out=`` when given (it may be an input: in place), else to the calling
  thread's current workspace (detached memory when none).
* ``*_backward(x, grad_output)`` take the FORWARD INPUT `x` and dL/dy and return
  dL/dx = f'(x) * dL/dy (DL4J's ``IActivation.backprop(in, epsilon)``).
* Losses return a Python float (fixed-order float64 sums: the same with any thread count), or
  ``(loss, grad)`` when ``grad=True`` (the default).
* Updaters change `param` and the state arrays in place and return `param`.

>>> import ndws, ndws.nn.functional as F
>>> x = ndws.array([[1.0, 2.0, 3.0]])
>>> [round(v, 4) for v in F.softmax(x).tolist()[0]]
[0.09, 0.2447, 0.6652]
>>> loss, dx = F.softmax_cross_entropy(x, ndws.array([2]))
>>> round(loss, 4)
0.4076
"""
from ndws.nn._act_entries import (
    activation,
    activation_backward,
    cube,
    cube_backward,
    elu,
    elu_backward,
    gelu,
    gelu_backward,
    hardsigmoid,
    hardsigmoid_backward,
    hardtanh,
    hardtanh_backward,
    identity,
    identity_backward,
    leaky_relu,
    leaky_relu_backward,
    log_softmax,
    log_softmax_backward,
    rational_tanh,
    rational_tanh_backward,
    rectified_tanh,
    rectified_tanh_backward,
    relu,
    relu_backward,
    selu,
    selu_backward,
    sigmoid,
    sigmoid_backward,
    softmax,
    softmax_backward,
    softplus,
    softplus_backward,
    softsign,
    softsign_backward,
    swish,
    swish_backward,
    tanh,
    tanh_backward,
    thresholded_relu,
    thresholded_relu_backward,
)
from ndws.nn._activations import ACTIVATIONS
from ndws.nn._conv import (
    col2im,
    conv_output_size,
    conv_transpose_output_size,
    im2col,
    same_padding,
)
from ndws.nn._conv2d import (
    conv2d,
    conv2d_backward,
    conv2d_scratch_bytes,
    conv_transpose2d,
    conv_transpose2d_backward,
)
from ndws.nn._depthwise import depthwise_conv2d, depthwise_conv2d_backward
from ndws.nn._linear import linear
from ndws.nn._rnn_entries import (
    lstm_backward,
    lstm_cache_shape,
    lstm_forward,
    lstm_scratch_bytes,
    simple_rnn_backward,
    simple_rnn_cache_shape,
    simple_rnn_forward,
    simple_rnn_scratch_bytes,
)
from ndws.nn._losses import (
    binary_cross_entropy_with_logits,
    cosine_proximity_loss,
    hinge_loss,
    kl_divergence_loss,
    mae_loss,
    mape_loss,
    mse_loss,
    msle_loss,
    poisson_loss,
    softmax_cross_entropy,
    squared_hinge_loss,
    wasserstein_loss,
)
from ndws.nn._pool import (
    avg_pool2d,
    avg_pool2d_backward,
    crop2d,
    crop2d_backward,
    max_pool2d,
    max_pool2d_backward,
    pnorm_pool2d,
    pnorm_pool2d_backward,
    sum_pool2d,
    sum_pool2d_backward,
    upsample2d,
    upsample2d_backward,
    zero_pad2d,
    zero_pad2d_backward,
)
from ndws.nn._updaters import (
    adagrad_update,
    adam_update,
    adamw_update,
    momentum_update,
    rmsprop_update,
    sgd_update,
)

__all__ = [
    "linear",
    "ACTIVATIONS", "activation", "activation_backward",
    "identity", "relu", "leaky_relu", "elu", "sigmoid", "tanh", "softplus", "gelu", "hardtanh",
    "hardsigmoid", "selu", "swish", "softsign", "rational_tanh", "rectified_tanh", "cube",
    "thresholded_relu", "softmax", "log_softmax",
    "identity_backward", "relu_backward", "leaky_relu_backward", "elu_backward",
    "sigmoid_backward", "tanh_backward", "softplus_backward", "gelu_backward",
    "hardtanh_backward", "hardsigmoid_backward", "selu_backward", "swish_backward",
    "softsign_backward", "rational_tanh_backward", "rectified_tanh_backward", "cube_backward",
    "thresholded_relu_backward", "softmax_backward", "log_softmax_backward",
    "softmax_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss", "mae_loss",
    "cosine_proximity_loss", "hinge_loss", "squared_hinge_loss", "kl_divergence_loss",
    "poisson_loss", "msle_loss", "mape_loss", "wasserstein_loss",
    "sgd_update", "momentum_update", "adam_update", "adamw_update", "rmsprop_update",
    "adagrad_update",
    "conv2d", "conv2d_backward", "conv2d_scratch_bytes", "conv_transpose2d",
    "conv_transpose2d_backward", "depthwise_conv2d", "depthwise_conv2d_backward", "im2col",
    "col2im", "conv_output_size", "same_padding", "conv_transpose_output_size",
    "max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward", "sum_pool2d",
    "sum_pool2d_backward", "pnorm_pool2d", "pnorm_pool2d_backward", "zero_pad2d",
    "zero_pad2d_backward", "crop2d", "crop2d_backward", "upsample2d", "upsample2d_backward",
    "lstm_forward", "lstm_backward", "simple_rnn_forward", "simple_rnn_backward",
    "lstm_cache_shape", "simple_rnn_cache_shape", "lstm_scratch_bytes",
    "simple_rnn_scratch_bytes",
]
