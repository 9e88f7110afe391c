"""The activations of `ndws.nn.functional` by name: `relu`, `relu_backward`, ..., `softmax`,
and `activation` / `activation_backward` by a name in a string. Each is a docstring and one call
of the entries of ndws.nn._activations (the kernels, the names and codes, the argument
handling), so adding an activation touches this module only for its public function.
"""
from ndws.nn._activations cimport (
    ACT_CUBE, ACT_ELU, ACT_GELU, ACT_GELU_TANH, ACT_HARDSIGMOID, ACT_HARDTANH, ACT_IDENTITY,
    ACT_LEAKY_RELU, ACT_LOG_SOFTMAX, ACT_RATIONALTANH, ACT_RECTIFIEDTANH, ACT_RELU, ACT_SELU,
    ACT_SIGMOID, ACT_SOFTMAX, ACT_SOFTPLUS, ACT_SOFTSIGN, ACT_SWISH, ACT_TANH,
    ACT_THRESHOLDEDRELU, activation_param, elementwise_call, lookup_activation, softmax_call)


def identity(x, out=None):
    """Identity activation: ``y := x`` (a copy, or into `out`).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
        A new array in the current workspace, or `out`.
    """
    return elementwise_call("identity", ACT_IDENTITY, 0.0, x, None, out, False)


def relu(x, out=None):
    """Rectified linear unit: ``y := max(x, 0)``; NaN stays NaN (as torch).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
        A new array in the current workspace, or `out`.

    Examples
    --------
    >>> import ndws, ndws.nn.functional as F
    >>> F.relu(ndws.array([-1.0, 0.5])).tolist()
    [0.0, 0.5]
    """
    return elementwise_call("relu", ACT_RELU, 0.0, x, None, out, False)


def leaky_relu(x, alpha=0.01, out=None):
    """Leaky ReLU: ``y := x if x > 0 else alpha * x``.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    alpha : float
        Slope for negative inputs (DL4J's and torch's default 0.01).
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("leaky_relu", ACT_LEAKY_RELU,
                            activation_param(alpha, "leaky_relu", "alpha"), x, None, out, False)


def elu(x, alpha=1.0, out=None):
    """Exponential linear unit: ``y := x if x > 0 else alpha * (exp(x) - 1)``.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    alpha : float
        Scale of the negative branch (default 1.0).
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("elu", ACT_ELU, activation_param(alpha, "elu", "alpha"), x, None, out,
                            False)


def sigmoid(x, out=None):
    """Logistic sigmoid: ``y := 1 / (1 + exp(-x))``, computed without overflow (+-inf give 1/0).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("sigmoid", ACT_SIGMOID, 0.0, x, None, out, False)


def tanh(x, out=None):
    """Hyperbolic tangent: ``y := tanh(x)`` (saturates at +-1).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("tanh", ACT_TANH, 0.0, x, None, out, False)


def softplus(x, out=None):
    """Softplus: ``y := log(1 + exp(x))``, computed as ``max(x, 0) + log1p(exp(-|x|))``.

    No overflow, and exactly x for large x (torch's beta=1 softplus switches to x above 20
    instead; the two differ by less than 2.1e-9 there).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("softplus", ACT_SOFTPLUS, 0.0, x, None, out, False)


cdef int _gelu_code(object approximate, str op) except -1:
    if approximate == "none":
        return ACT_GELU
    if approximate == "tanh":
        return ACT_GELU_TANH
    raise ValueError(f"{op}: approximate must be 'none' or 'tanh', got {approximate!r}")


def gelu(x, approximate="none", out=None):
    """Gaussian error linear unit, torch's two forms.

    ``approximate="none"``: ``y := x * Phi(x) = x/2 * erfc(-x/sqrt(2))``;
    ``approximate="tanh"``: ``y := x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3)))``.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    approximate : {"none", "tanh"}
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("gelu", _gelu_code(approximate, "gelu"), 0.0, x, None, out, False)


def hardtanh(x, out=None):
    """Hard tanh (DL4J's ``HARDTANH``): ``y := clip(x, -1, 1)``; NaN stays NaN.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("hardtanh", ACT_HARDTANH, 0.0, x, None, out, False)


def hardsigmoid(x, out=None):
    """Hard sigmoid (DL4J's ``HARDSIGMOID``): ``y := clip(0.2 * x + 0.5, 0, 1)``.

    DL4J's slope 0.2 (Keras' too); torch's ``hardsigmoid`` uses 1/6 instead.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("hardsigmoid", ACT_HARDSIGMOID, 0.0, x, None, out, False)


def selu(x, out=None):
    """Scaled ELU (DL4J's ``SELU``): ``y := lambda * x if x > 0 else lambda * alpha *
    (exp(x) - 1)`` with libnd4j's constants ``alpha = 1.6732632423543772848``, ``lambda =
    1.0507009873554804934`` (computed with expm1: exact near 0).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("selu", ACT_SELU, 0.0, x, None, out, False)


def swish(x, out=None):
    """Swish (DL4J's ``SWISH``, torch's ``silu``): ``y := x * sigmoid(x)``; the limits at
    +-inf (inf and 0), where the formula would give NaN.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("swish", ACT_SWISH, 0.0, x, None, out, False)


def softsign(x, out=None):
    """Softsign (DL4J's ``SOFTSIGN``): ``y := x / (1 + |x|)``; +-1 at +-inf.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("softsign", ACT_SOFTSIGN, 0.0, x, None, out, False)


def rational_tanh(x, out=None):
    """DL4J's ``RATIONALTANH``, a rational approximation of ``1.7159 * tanh(2x/3)``:
    ``y := 1.7159 * sgn(d) * (1 - 1 / (1 + |d| + d**2 + 1.41645 * d**4))``, ``d = 2x/3``.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("rational_tanh", ACT_RATIONALTANH, 0.0, x, None, out, False)


def rectified_tanh(x, out=None):
    """Rectified tanh (DL4J's ``RECTIFIEDTANH``): ``y := max(0, tanh(x))``; NaN stays NaN.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("rectified_tanh", ACT_RECTIFIEDTANH, 0.0, x, None, out, False)


def cube(x, out=None):
    """Cube (DL4J's ``CUBE``): ``y := x**3``.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("cube", ACT_CUBE, 0.0, x, None, out, False)


def thresholded_relu(x, theta=1.0, out=None):
    """Thresholded ReLU (DL4J's ``THRESHOLDEDRELU``): ``y := x if x > theta else 0``; NaN stays
    NaN (libnd4j's gives 0).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    theta : float
        The threshold (DL4J's default 1.0); a finite real.
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype

    Examples
    --------
    >>> import ndws, ndws.nn.functional as F
    >>> F.thresholded_relu(ndws.array([0.5, 1.0, 1.5])).tolist()
    [0.0, 0.0, 1.5]
    """
    return elementwise_call("thresholded_relu", ACT_THRESHOLDEDRELU,
                            activation_param(theta, "thresholded_relu", "theta"), x, None, out,
                            False)


def softmax(x, axis=-1, out=None):
    """Softmax along `axis`: ``y := exp(x - max) / sum(exp(x - max))`` (the row maximum is
    subtracted first, so no overflow; sums accumulate in float64).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64, at least 1-D
    axis : int
        The axis that sums to one (default the last; negative counts from the end).
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return softmax_call("softmax", False, x, None, axis, out, False)


def log_softmax(x, axis=-1, out=None):
    """Log-softmax along `axis`: ``y := x - max - log(sum(exp(x - max)))``.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64, at least 1-D
    axis : int
        Default the last axis.
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return softmax_call("log_softmax", True, x, None, axis, out, False)


def identity_backward(x, grad_output, out=None):
    """Gradient of `identity`: ``dx := grad_output``.

    All ``*_backward`` functions take the FORWARD INPUT `x` and ``grad_output`` = dL/dy (same
    shape and dtype) and return dL/dx = f'(x) * dL/dy (DL4J's ``IActivation.backprop(in,
    epsilon)``); `out` may be `x` or `grad_output` (in place). f'(NaN) is NaN.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("identity_backward", ACT_IDENTITY, 0.0, x, grad_output, out, True)


def relu_backward(x, grad_output, out=None):
    """Gradient of `relu`: ``dx := grad_output * (1 if x > 0 else 0)`` (see
    `identity_backward` for the convention).

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("relu_backward", ACT_RELU, 0.0, x, grad_output, out, True)


def leaky_relu_backward(x, grad_output, alpha=0.01, out=None):
    """Gradient of `leaky_relu`: ``dx := grad_output * (1 if x > 0 else alpha)``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    alpha : float
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("leaky_relu_backward", ACT_LEAKY_RELU,
                            activation_param(alpha, "leaky_relu_backward", "alpha"), x, grad_output,
                            out, True)


def elu_backward(x, grad_output, alpha=1.0, out=None):
    """Gradient of `elu`: ``dx := grad_output * (1 if x > 0 else alpha * exp(x))``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    alpha : float
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("elu_backward", ACT_ELU,
                            activation_param(alpha, "elu_backward", "alpha"), x, grad_output, out,
                            True)


def sigmoid_backward(x, grad_output, out=None):
    """Gradient of `sigmoid`: ``dx := grad_output * s * (1 - s)``, ``s = sigmoid(x)``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("sigmoid_backward", ACT_SIGMOID, 0.0, x, grad_output, out, True)


def tanh_backward(x, grad_output, out=None):
    """Gradient of `tanh`: ``dx := grad_output * (1 - tanh(x)**2)``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("tanh_backward", ACT_TANH, 0.0, x, grad_output, out, True)


def softplus_backward(x, grad_output, out=None):
    """Gradient of `softplus`: ``dx := grad_output * sigmoid(x)``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("softplus_backward", ACT_SOFTPLUS, 0.0, x, grad_output, out, True)


def gelu_backward(x, grad_output, approximate="none", out=None):
    """Gradient of `gelu`: ``dx := grad_output * (Phi(x) + x * phi(x))`` for the exact form,
    the derivative of the tanh formula for ``approximate="tanh"``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    approximate : {"none", "tanh"}
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("gelu_backward", _gelu_code(approximate, "gelu_backward"), 0.0, x,
                            grad_output, out, True)


def hardtanh_backward(x, grad_output, out=None):
    """Gradient of `hardtanh`: ``dx := grad_output * (1 if -1 <= x <= 1 else 0)`` (libnd4j's:
    the kinks count as inside).

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("hardtanh_backward", ACT_HARDTANH, 0.0, x, grad_output, out, True)


def hardsigmoid_backward(x, grad_output, out=None):
    """Gradient of `hardsigmoid`: ``dx := grad_output * (0.2 if -2.5 <= x <= 2.5 else 0)``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("hardsigmoid_backward", ACT_HARDSIGMOID, 0.0, x, grad_output, out, True)


def selu_backward(x, grad_output, out=None):
    """Gradient of `selu`: ``dx := grad_output * (lambda if x > 0 else lambda * alpha * exp(x))``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("selu_backward", ACT_SELU, 0.0, x, grad_output, out, True)


def swish_backward(x, grad_output, out=None):
    """Gradient of `swish`: ``dx := grad_output * (s + x * s * (1 - s))``, ``s = sigmoid(x)``
    (1 and 0 at +inf and -inf; libnd4j's form overflows to NaN for large x).

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("swish_backward", ACT_SWISH, 0.0, x, grad_output, out, True)


def softsign_backward(x, grad_output, out=None):
    """Gradient of `softsign`: ``dx := grad_output / (1 + |x|)**2``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("softsign_backward", ACT_SOFTSIGN, 0.0, x, grad_output, out, True)


def rational_tanh_backward(x, grad_output, out=None):
    """Gradient of `rational_tanh`: ``dx := grad_output * 1.7159 * 2/3 * (1 + 2|d| + 4 * 1.41645
    * |d|**3) / a**2`` (``d = 2x/3``, ``a`` the denominator of the forward), evaluated without
    overflow (0 at +-inf where libnd4j's gives NaN).

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("rational_tanh_backward", ACT_RATIONALTANH, 0.0, x, grad_output, out,
                            True)


def rectified_tanh_backward(x, grad_output, out=None):
    """Gradient of `rectified_tanh`: ``dx := grad_output * (1 - tanh(x)**2 if x > 0 else 0)``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("rectified_tanh_backward", ACT_RECTIFIEDTANH, 0.0, x, grad_output, out,
                            True)


def cube_backward(x, grad_output, out=None):
    """Gradient of `cube`: ``dx := grad_output * 3 * x**2``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("cube_backward", ACT_CUBE, 0.0, x, grad_output, out, True)


def thresholded_relu_backward(x, grad_output, theta=1.0, out=None):
    """Gradient of `thresholded_relu`: ``dx := grad_output * (1 if x > theta else 0)``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    theta : float
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return elementwise_call("thresholded_relu_backward", ACT_THRESHOLDEDRELU,
                            activation_param(theta, "thresholded_relu_backward", "theta"), x,
                            grad_output, out, True)


def softmax_backward(x, grad_output, axis=-1, out=None):
    """Gradient of `softmax` along `axis`: ``dx := y * (g - sum(g * y, axis))``, with
    ``y = softmax(x, axis)`` recomputed from the forward input `x` and ``g = grad_output``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    axis : int
    out : NDArray or numpy.ndarray, optional
        May be `x` or `grad_output` (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return softmax_call("softmax_backward", False, x, grad_output, axis, out, True)


def log_softmax_backward(x, grad_output, axis=-1, out=None):
    """Gradient of `log_softmax` along `axis`: ``dx := g - softmax(x, axis) * sum(g, axis)``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    axis : int
    out : NDArray or numpy.ndarray, optional
        May be `x` or `grad_output` (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return softmax_call("log_softmax_backward", True, x, grad_output, axis, out, True)


def activation(name, x, out=None, **params):
    """Apply activation `name` (one of `ACTIVATIONS`, case-insensitive: "identity"/"linear",
    "relu", "leakyrelu"/"leaky_relu", "elu", "sigmoid", "tanh", "softplus", "gelu",
    "hardtanh", "hardsigmoid", "selu", "swish"/"silu", "softsign", "rationaltanh",
    "rectifiedtanh", "cube", "thresholdedrelu" (DL4J's names; the two-word ones also with an
    underscore), "softmax", "logsoftmax"/"log_softmax").

    Parameters
    ----------
    name : str
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
    **params
        ``alpha`` (leaky_relu, elu), ``theta`` (thresholdedrelu), ``approximate`` (gelu),
        ``axis`` (softmax, log_softmax).

    Returns
    -------
    (...) NDArray of x's dtype

    Raises
    ------
    ValueError
        Unknown name (the message lists the valid ones).
    TypeError
        A parameter the activation does not take.
    """
    cdef double alpha
    cdef list ax = [-1]
    cdef int code = lookup_activation(name, params, &alpha, ax, "activation")
    axis = ax[0]
    if code == ACT_SOFTMAX or code == ACT_LOG_SOFTMAX:
        return softmax_call("activation", code == ACT_LOG_SOFTMAX, x, None, axis, out, False)
    return elementwise_call("activation", code, alpha, x, None, out, False)


def activation_backward(name, x, grad_output, out=None, **params):
    """dL/dx of activation `name` at forward input `x`, given ``grad_output`` = dL/dy (see
    `activation` for names and parameters, `identity_backward` for the convention).

    Parameters
    ----------
    name : str
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
    **params

    Returns
    -------
    (...) NDArray of x's dtype
    """
    cdef double alpha
    cdef list ax = [-1]
    cdef int code = lookup_activation(name, params, &alpha, ax, "activation_backward")
    axis = ax[0]
    if code == ACT_SOFTMAX or code == ACT_LOG_SOFTMAX:
        return softmax_call("activation_backward", code == ACT_LOG_SOFTMAX, x, grad_output, axis,
                            out, True)
    return elementwise_call("activation_backward", code, alpha, x, grad_output, out, True)
