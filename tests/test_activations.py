"""ndws.nn.functional activations and their derivatives against NumPy references."""
from __future__ import annotations

import math
import sys
import threading
import time

import numpy as np
import pytest

import ndws
import ndws.nn.functional as F
from ndws.nn import (_act_entries, _activations, _conv, _conv2d, _depthwise, _linear, _losses,
                     _pool, _rnn, _rnn_entries, _updaters)

#: the compiled modules behind ndws.nn.functional (their doctests run, their stubs are complete)
KERNEL_MODULES = (_activations, _act_entries, _linear, _losses, _updaters, _conv, _conv2d,
                  _depthwise, _pool, _rnn, _rnn_entries)

DTYPES = [np.float32, np.float64]
SIZES = [1, 7, 65, 257]
#: (rtol, atol) per dtype for kernel results vs the float64 NumPy reference (data, not code)
TOL = {np.dtype(np.float32): (2e-5, 2e-6), np.dtype(np.float64): (1e-12, 1e-14)}

_erf = np.vectorize(math.erf, otypes=[np.float64])
_K = math.sqrt(2.0 / math.pi)


def _nanfix(d, x):
    # f'(NaN) is NaN (relu, leaky_relu: the branch choice is undefined)
    return np.where(np.isnan(x), np.nan, d)


def _gelu_tanh_parts(x):
    t = np.tanh(_K * (x + 0.044715 * x ** 3))
    return t


# libnd4j's constants (ops.h) and DL4J's RationalTanh ones
SELU_ALPHA, SELU_LAMBDA = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
RT_A, RT_C = 1.7159, 1.41645


def _sig(x):
    # exact in the tails too: exp(-log(1 + e^-x))
    return np.exp(-np.logaddexp(0, -x))


def _rtanh(x):
    d = 2 * x / 3
    return RT_A * np.sign(d) * (1 - 1 / (1 + np.abs(d) + d ** 2 + RT_C * d ** 4))


def _drtanh(x):
    u = np.abs(2 * x / 3)
    a = 1 + u + u ** 2 + RT_C * u ** 4
    return RT_A * 2 / 3 * (1 + 2 * u + 4 * RT_C * u ** 3) / a ** 2


# name -> (forward reference, derivative reference, kwargs); references take float64 inputs
REF = {
    "identity": (lambda x, **k: x, lambda x, **k: np.ones_like(x), {}),
    "relu": (lambda x, **k: np.where(x < 0, 0.0, x),
             lambda x, **k: _nanfix((x > 0).astype(float), x), {}),
    "leaky_relu": (lambda x, alpha=0.01: np.where(x > 0, x, alpha * x),
                   lambda x, alpha=0.01: _nanfix(np.where(x > 0, 1.0, alpha), x),
                   {"alpha": 0.2}),
    "elu": (lambda x, alpha=1.0: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))),
            lambda x, alpha=1.0: np.where(x > 0, 1.0, alpha * np.exp(np.minimum(x, 0))),
            {"alpha": 0.7}),
    "sigmoid": (lambda x: 0.5 * (1 + np.tanh(x / 2)),
                lambda x: 0.25 * (1 - np.tanh(x / 2) ** 2), {}),
    "tanh": (np.tanh, lambda x: 1 - np.tanh(x) ** 2, {}),
    "softplus": (lambda x: np.logaddexp(0, x), lambda x: 0.5 * (1 + np.tanh(x / 2)), {}),
    "gelu": (lambda x, approximate="none": 0.5 * x * (1 + _erf(x / math.sqrt(2))),
             lambda x, approximate="none": 0.5 * (1 + _erf(x / math.sqrt(2)))
             + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi), {}),
    "gelu_tanh": (lambda x: 0.5 * x * (1 + _gelu_tanh_parts(x)),
                  lambda x: 0.5 * (1 + _gelu_tanh_parts(x)) + 0.5 * x
                  * (1 - _gelu_tanh_parts(x) ** 2) * _K * (1 + 3 * 0.044715 * x * x), {}),
    # DL4J's other activations (formulas from libnd4j's ops.h and activation helpers)
    "hardtanh": (lambda x: np.clip(x, -1, 1),
                 lambda x: _nanfix(np.where(np.abs(x) <= 1, 1.0, 0.0), x), {}),
    "hardsigmoid": (lambda x: np.clip(0.2 * x + 0.5, 0, 1),
                    lambda x: _nanfix(np.where(np.abs(x) <= 2.5, 0.2, 0.0), x), {}),
    "selu": (lambda x: np.where(x > 0, SELU_LAMBDA * x,
                                SELU_LAMBDA * SELU_ALPHA * np.expm1(np.minimum(x, 0))),
             lambda x: np.where(x > 0, SELU_LAMBDA,
                                SELU_LAMBDA * SELU_ALPHA * np.exp(np.minimum(x, 0))), {}),
    "swish": (lambda x: x * _sig(x), lambda x: _sig(x) + x * _sig(x) * _sig(-x), {}),
    "softsign": (lambda x: x / (1 + np.abs(x)), lambda x: 1 / (1 + np.abs(x)) ** 2, {}),
    "rational_tanh": (_rtanh, _drtanh, {}),
    "rectified_tanh": (lambda x: np.maximum(np.tanh(x), 0),
                       lambda x: _nanfix(np.where(x > 0, 1 - np.tanh(x) ** 2, 0.0), x), {}),
    "cube": (lambda x: x ** 3, lambda x: 3 * x ** 2, {}),
    "thresholded_relu": (lambda x, theta=1.0: np.where(x > theta, x, 0.0),
                         lambda x, theta=1.0: _nanfix(np.where(x > theta, 1.0, 0.0), x),
                         {"theta": 0.5}),
}
#: where each activation's derivative jumps (finite differences skip their neighbourhood)
KINKS = {"hardtanh": (-1.0, 1.0), "hardsigmoid": (-2.5, 2.5), "thresholded_relu": (0.5,)}
NEW = ["hardtanh", "hardsigmoid", "selu", "swish", "softsign", "rational_tanh",
       "rectified_tanh", "cube", "thresholded_relu"]
NAMES = list(REF)


def _fwd(name):
    if name == "gelu_tanh":
        return lambda x, **k: F.gelu(x, approximate="tanh", **k)
    return getattr(F, name)


def _bwd(name):
    if name == "gelu_tanh":
        return lambda x, g, **k: F.gelu_backward(x, g, approximate="tanh", **k)
    return getattr(F, name + "_backward")


def _params(name):
    return REF[name][2]


def _close(got, exp, dtype):
    got = got.numpy() if isinstance(got, ndws.NDArray) else np.asarray(got)
    assert got.dtype == np.dtype(dtype)
    assert got.shape == np.shape(exp)
    rtol, atol = TOL[np.dtype(dtype)]
    np.testing.assert_allclose(got.astype(np.float64), exp, rtol=rtol, atol=atol,
                               equal_nan=True)


def _ref_f(name, x):
    return REF[name][0](x.astype(np.float64), **_params(name))


def _ref_d(name, x, g):
    return REF[name][1](x.astype(np.float64), **_params(name)) * g.astype(np.float64)


# ------------------------------------------------------------------------------------------------
# forward / backward vs NumPy, every dtype (both fused specialisations) and odd sizes


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", SIZES)
def test_forward_and_backward_match_numpy(name, dtype, n, rng):
    x = (rng.standard_normal(n) * 3).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    y = _fwd(name)(ndws.array(x), **_params(name))
    assert isinstance(y, ndws.NDArray) and y.dtype == np.dtype(dtype)
    _close(y, _ref_f(name, x), dtype)
    d = _bwd(name)(ndws.array(x), ndws.array(g), **_params(name))
    _close(d, _ref_d(name, x, g), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_strided_views_and_numpy_inputs(name, dtype, rng):
    base = (rng.standard_normal((9, 14)) * 3).astype(dtype)
    gbase = rng.standard_normal((9, 14)).astype(dtype)
    for key in [np.s_[::2, 1::3], np.s_[::-1, ::-2], np.s_[3, ::-1], np.s_[:, 5]]:
        x, g = base[key], gbase[key]
        # NDArray views (non-contiguous, negative strides)
        y = _fwd(name)(ndws.array(base)[key], **_params(name))
        _close(y, _ref_f(name, x), dtype)
        d = _bwd(name)(ndws.array(base)[key], ndws.array(gbase)[key], **_params(name))
        _close(d, _ref_d(name, x, g), dtype)
        # NumPy views are accepted too (wrapped without a copy)
        _close(_fwd(name)(x, **_params(name)), _ref_f(name, x), dtype)
    # a transposed 3-D array
    x3 = (rng.standard_normal((3, 4, 5)) * 3).astype(dtype)
    _close(_fwd(name)(ndws.array(x3).transpose((2, 0, 1)), **_params(name)),
           _ref_f(name, x3.transpose(2, 0, 1)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_out_in_place_and_into_strided_out(name, dtype, rng):
    x = (rng.standard_normal((6, 11)) * 3).astype(dtype)
    g = rng.standard_normal((6, 11)).astype(dtype)
    a = ndws.array(x)
    assert _fwd(name)(a, out=a, **_params(name)) is a          # in place
    _close(a, _ref_f(name, x), dtype)
    a, b = ndws.array(x), ndws.array(g)
    assert _bwd(name)(a, b, out=b, **_params(name)) is b       # out is grad_output
    _close(b, _ref_d(name, x, g), dtype)
    a, b = ndws.array(x), ndws.array(g)
    assert _bwd(name)(a, b, out=a, **_params(name)) is a       # out is x
    _close(a, _ref_d(name, x, g), dtype)
    # a strided, reversed out= of another array
    big = ndws.zeros((6, 22), dtype=dtype)
    view = big[:, ::-2]
    assert _fwd(name)(ndws.array(x), out=view, **_params(name)) is view
    _close(view, _ref_f(name, x), dtype)
    assert np.all(big.numpy()[:, ::2] == 0)
    # a NumPy out= is written through
    nout = np.empty_like(x)
    assert _fwd(name)(x, out=nout, **_params(name)) is nout
    _close(nout, _ref_f(name, x), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_partially_overlapping_input(dtype, rng):
    # out= a shifted view of x: computed through a temporary, never reading overwritten input
    x = (rng.standard_normal(40) * 3).astype(dtype)
    a = ndws.array(x)
    F.sigmoid(a[:-3], out=a[3:])
    _close(a[3:], REF["sigmoid"][0](x[:-3].astype(np.float64)), dtype)
    b = ndws.array(x)
    F.tanh(b[::-1], out=b)                     # reversed self: not element for element
    _close(b, np.tanh(x[::-1].astype(np.float64)), dtype)
    c = ndws.array(x.reshape(5, 8))
    F.softmax(c.T, axis=0, out=c.T)            # same elements: in place is fine
    _close(c, _softmax_ref(x.reshape(5, 8).T, 0).T, dtype)


@pytest.mark.parametrize("name", NAMES + ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_arrays(name, dtype):
    for shape in [(0,), (3, 0), (0, 4)]:
        x = ndws.zeros(shape, dtype=dtype)
        if name in ("softmax", "log_softmax"):
            y = getattr(F, name)(x, axis=0)
            d = getattr(F, name + "_backward")(x, x, axis=0)
        else:
            y = _fwd(name)(x, **_params(name))
            d = _bwd(name)(x, x, **_params(name))
        assert y.shape == shape and y.dtype == np.dtype(dtype)
        assert d.shape == shape


# ------------------------------------------------------------------------------------------------
# softmax / log_softmax


def _softmax_ref(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax_ref(x, axis):
    x = x.astype(np.float64)
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_softmax_any_axis(dtype, axis, rng):
    x = (rng.standard_normal((5, 7, 65)) * 4).astype(dtype)
    g = rng.standard_normal((5, 7, 65)).astype(dtype)
    _close(F.softmax(ndws.array(x), axis=axis), _softmax_ref(x, axis), dtype)
    _close(F.log_softmax(ndws.array(x), axis=axis), _log_softmax_ref(x, axis), dtype)
    y = _softmax_ref(x, axis)
    g64 = g.astype(np.float64)
    exp_sm = y * (g64 - (g64 * y).sum(axis=axis, keepdims=True))
    exp_lsm = g64 - y * g64.sum(axis=axis, keepdims=True)
    _close(F.softmax_backward(ndws.array(x), ndws.array(g), axis=axis), exp_sm, dtype)
    _close(F.log_softmax_backward(ndws.array(x), ndws.array(g), axis=axis), exp_lsm, dtype)
    # a reversed, strided view and in place
    xv = x[::-1, ::2]
    _close(F.softmax(ndws.array(x)[::-1, ::2], axis=axis), _softmax_ref(xv, axis), dtype)
    a = ndws.array(x)
    F.log_softmax(a, axis=axis, out=a)
    _close(a, _log_softmax_ref(x, axis), dtype)
    a, b = ndws.array(x), ndws.array(g)
    F.softmax_backward(a, b, axis=axis, out=b)
    _close(b, exp_sm, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_softmax_stable_and_1d(dtype, n, rng):
    x = (rng.standard_normal(n) * 3).astype(dtype)
    big = x + dtype(80 if dtype == np.float32 else 700)   # exp would overflow unshifted
    _close(F.softmax(ndws.array(big)), _softmax_ref(big, -1), dtype)
    _close(F.log_softmax(big), _log_softmax_ref(big, -1), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_contiguous_rows_give_the_strided_bits(dtype, rng):
    # a contiguous row takes a vectorised loop, a strided one the scalar loop: the same
    # exponentials added in the same order, so the same bits (NaN and inf rows included)
    x = (rng.standard_normal((9, 77)) * 5).astype(dtype)
    x[3, 5], x[4, 0], x[5, 7] = np.nan, np.inf, -np.inf
    wide = np.zeros((9, 154), dtype)
    wide[:, ::2] = x
    with np.errstate(all="ignore"):
        dense = np.asarray(F.softmax(ndws.array(x), axis=1))
        strided = np.asarray(F.softmax(ndws.array(wide)[:, ::2], axis=1))
    np.testing.assert_array_equal(dense.view(np.uint8), strided.view(np.uint8))
    assert np.isnan(dense[3]).all() and np.isnan(dense[4]).all()
    assert dense[5, 7] == 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["relu", "leaky_relu"])
def test_relu_loops_give_the_strided_bits(name, dtype, rng):
    # contiguous arrays take the per-instruction-set loops of _act_loops.h, strided ones the
    # scalar path: the same bits, forward and backward, through NaN, +-0, +-inf and subnormals
    # (-0 * 0: the gradient's sign), alone and as a dense layer's bias + activation epilogue
    tiny = np.finfo(dtype).smallest_subnormal
    special = np.array([np.nan, 0.0, -0.0, np.inf, -np.inf, tiny, -tiny, 1.0, -1.0], dtype)
    x = np.concatenate([special, (rng.standard_normal(1000) * 3).astype(dtype)])
    g = np.concatenate([np.array([1, -1, -2, np.inf, 3, -1, 1, np.nan, -0.0], dtype),
                        rng.standard_normal(1000).astype(dtype)])
    kw = {"alpha": 0.3} if name == "leaky_relu" else {}
    f, fb = getattr(F, name), _bwd(name)
    with np.errstate(invalid="ignore"):
        y = f(x, **kw).numpy()
        assert y.tobytes() == np.ascontiguousarray(f(x[::-1], **kw).numpy()[::-1]).tobytes()
        d = fb(x, g, **kw).numpy()
        d_strided = fb(x[::-1], g[::-1], **kw).numpy()[::-1]
    assert d.tobytes() == np.ascontiguousarray(d_strided).tobytes()
    ref = np.where(x > 0, x, 0 if name == "relu" else dtype(0.3) * x).astype(dtype)
    np.testing.assert_array_equal(y[1:], ref[1:])
    assert np.isnan(y[0]) and np.isnan(d[0]) and np.isnan(d[7])
    # the fused epilogue: Y := f(X @ W + b) against the activation applied after
    a = (rng.standard_normal((7, 5)) * 2).astype(dtype)
    w = rng.standard_normal((5, 9)).astype(dtype)
    b = rng.standard_normal(9).astype(dtype)
    fused = F.linear(a, w, b, name if name == "relu" else "leakyrelu").numpy()
    plain = F.linear(a, w, b, "identity").numpy()
    alpha = 0.01
    np.testing.assert_array_equal(fused, np.where(plain > 0, plain,
                                                  0 if name == "relu" else dtype(alpha) * plain))


def _fwd(name):
    if name == "gelu_tanh":
        return lambda x, **k: F.gelu(x, approximate="tanh", **k)
    return getattr(F, name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["swish", "rectified_tanh", "softsign", "gelu_tanh", "selu",
                                  "elu", "rational_tanh", "hardtanh", "gelu"])
def test_element_function_loops_give_the_strided_bits(name, dtype, rng):
    # contiguous arrays take _act_loops.h's per-instruction-set loops over the element
    # functions the strided (scalar) path calls too: the same bits, through NaN, +-0, +-inf,
    # subnormals, the special cases' edges (GELU_BIG, 1e30) and a spread of ordinary values;
    # and the limits at +-inf that the formulas alone would turn into NaN
    tiny = np.finfo(dtype).smallest_subnormal
    special = np.array([np.nan, 0.0, -0.0, np.inf, -np.inf, tiny, -tiny, 1.0, -1.0, 1e4, -1e4,
                        1.0001e4, -1.0001e4, 3e30 if dtype == np.float32 else 1e31, -1e31, 88.0,
                        -88.0, 700.0 if dtype == np.float64 else 90.0, -104.0], dtype)
    x = np.concatenate([special, (rng.standard_normal(3000) * 4).astype(dtype)])
    g = rng.standard_normal(x.size).astype(dtype)
    g[:4] = [1, -1, -2, 3]
    kw = {"alpha": 0.7} if name == "elu" else {}
    fb = _bwd(name)
    with np.errstate(all="ignore"):
        d = fb(x, g, **kw).numpy()
        d_strided = np.ascontiguousarray(fb(x[::-1], g[::-1], **kw).numpy()[::-1])
        np.testing.assert_array_equal(d, d_strided)
        assert d[~np.isnan(d)].tobytes() == d_strided[~np.isnan(d)].tobytes()
        if name not in ("selu", "elu", "rational_tanh"):     # (forwards tested elsewhere)
            f = _fwd(name)
            y = f(x).numpy()
            y_strided = np.ascontiguousarray(f(x[::-1]).numpy()[::-1])
            np.testing.assert_array_equal(y, y_strided)
            assert y[~np.isnan(y)].tobytes() == y_strided[~np.isnan(y)].tobytes()
            assert np.isnan(y[0]) and np.isfinite(y[1:3]).all()
            lim = {"swish": (np.inf, 0.0), "rectified_tanh": (1.0, 0.0),
                   "softsign": (1.0, -1.0), "gelu_tanh": (np.inf, 0.0),
                   "hardtanh": (1.0, -1.0), "gelu": (np.inf, 0.0)}[name]
            assert (y[3], y[4]) == lim
    assert np.isnan(d[0])
    if name in ("swish", "gelu_tanh", "gelu"):
        assert (d[3], d[4]) == (1.0 * g[3], 0.0)          # the derivative's limits, not NaN
    # the values against the float64 formulas
    want = {"swish": lambda v: v / (1 + np.exp(-v)),
            "rectified_tanh": lambda v: np.maximum(np.tanh(v), 0),
            "softsign": lambda v: v / (1 + np.abs(v)),
            "hardtanh": lambda v: np.clip(v, -1, 1),
            "gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi)
                                                          * (v + 0.044715 * v ** 3))),
            "gelu": lambda v: 0.5 * v * np.vectorize(math.erfc)(-v / math.sqrt(2))}
    if name in want:
        v = x[19:].astype(np.float64)
        f32 = dtype == np.float32
        np.testing.assert_allclose(y[19:], want[name](v), rtol=2e-6 if f32 else 1e-14,
                                   atol=1e-6 if f32 else 1e-14)


def test_softmax_errors():
    with pytest.raises(ValueError, match=r"softmax: axis 2 is out of bounds for an array of "
                                         r"dimension 2"):
        F.softmax(ndws.zeros((2, 3)), axis=2)
    with pytest.raises(TypeError, match=r"softmax: axis must be an int, got 0.5"):
        F.softmax(ndws.zeros((2, 3)), axis=0.5)
    with pytest.raises(ValueError, match=r"softmax: x must have at least one dimension"):
        F.softmax(ndws.array(1.0))


# ------------------------------------------------------------------------------------------------
# NaN / inf


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_and_inf(dtype):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30], dtype=dtype)
    with np.errstate(all="ignore"):
        for name in NAMES:
            y = _fwd(name)(x, **_params(name)).numpy()
            assert np.isnan(y[0]), name                        # NaN propagates (relu too)
            d = _bwd(name)(x, np.ones_like(x), **_params(name)).numpy()
            assert np.isnan(d[0]) or name == "identity", name   # f'(NaN) is NaN
            assert not np.isnan(y[1:]).any(), (name, y)        # infinities are handled
            assert not np.isnan(d[1:]).any(), (name, d)
    inf = np.array([np.inf, -np.inf], dtype=dtype)
    assert F.sigmoid(inf).tolist() == [1.0, 0.0]
    assert F.tanh(inf).tolist() == [1.0, -1.0]
    assert F.softplus(inf).tolist() == [np.inf, 0.0]
    assert F.relu(inf).tolist() == [np.inf, 0.0]
    assert F.gelu(inf).tolist() == [np.inf, 0.0]
    assert F.gelu(inf, approximate="tanh").tolist() == [np.inf, 0.0]
    assert F.elu(inf).tolist() == [np.inf, -1.0]
    big = np.array([50.0, 1e4, 3e38], dtype=dtype)
    np.testing.assert_array_equal(F.softplus(big).numpy(), big)   # x for large x, no overflow
    np.testing.assert_array_equal(F.sigmoid_backward(-big[1:], np.ones(2, dtype)).numpy(), 0)
    # a NaN anywhere in a softmax row makes that row NaN, and only that row
    rows = np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0]], dtype=dtype)
    s = F.softmax(rows).numpy()
    assert np.isnan(s[0]).all() and not np.isnan(s[1]).any()


def _ulps(got, ref, dtype):
    # |got - ref| in units of the last place of ref in `dtype` (ref in extended precision)
    ref_d = ref.astype(dtype)
    spacing = np.spacing(np.abs(ref_d)).astype(np.longdouble)
    return np.abs(got.astype(np.longdouble) - ref) / spacing


#: largest error of ndws' own tanh, sigmoid and expm1 (ndws/_vmath.h) in ulps, both dtypes
ULPS = {"tanh": 1.3, "sigmoid": 2.5, "expm1": 1.1}


@pytest.mark.parametrize("dtype", DTYPES)
def test_own_sigmoid_and_tanh_are_accurate(dtype):
    # a dense sweep over every range the branch-free formulas switch between (tiny, the
    # polynomial, 1 - 2/(e+1), saturation, exp's subnormal tail), against extended precision
    mags = np.concatenate([np.geomspace(1e-30, 1e-3, 2000), np.linspace(1e-3, 30, 60001),
                           np.geomspace(30, 3e38 if dtype == np.float32 else 1e300, 2000),
                           [0.625, 0.62499, 0.62501, 9.01, 20.0, 22.0, 87.3, 88.7, 103.9,
                            104.0, 708.0, 745.0, 746.0]])
    x = np.concatenate([mags, -mags]).astype(dtype)
    xl = x.astype(np.longdouble)
    t = F.tanh(x).numpy()
    assert _ulps(t, np.tanh(xl), dtype).max() <= ULPS["tanh"]
    s = F.sigmoid(x).numpy()
    with np.errstate(over="ignore"):
        ref = 1 / (1 + np.exp(-xl))
    ok = ref >= np.finfo(dtype).tiny           # subnormal results: absolute error only
    assert _ulps(s[ok], ref[ok], dtype).max() <= ULPS["sigmoid"]
    tail = np.abs(s[~ok].astype(np.longdouble) - ref[~ok])
    assert tail.max() <= np.finfo(dtype).smallest_subnormal
    # the contiguous per-instruction-set loops and the strided scalar path: the same bits
    for f in (F.tanh, F.sigmoid):
        assert f(x).numpy().tobytes() == np.ascontiguousarray(f(x[::-1]).numpy()[::-1]).tobytes()
    g = np.linspace(-2, 2, x.size).astype(dtype)
    for name in ("tanh", "sigmoid"):
        d = _bwd(name)(x, g).numpy()
        d_strided = _bwd(name)(x[::-1], g[::-1]).numpy()[::-1]
        assert d.tobytes() == np.ascontiguousarray(d_strided).tobytes(), name
    # special values: exact, odd symmetry, no NaN from a finite input
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype=dtype)
    t = F.tanh(special).numpy()
    assert t[:4].tolist() == [0.0, 0.0, 1.0, -1.0] and np.signbit(t[1]) and np.isnan(t[4])
    s = F.sigmoid(special).numpy()
    assert s[:4].tolist() == [0.5, 0.5, 1.0, 0.0] and np.isnan(s[4])
    assert np.array_equal(F.tanh(-x).numpy(), -F.tanh(x).numpy())
    # a NaN of either sign keeps its payload and comes back quiet with the sign bit set (from
    # exp(-|x|) through the division by 1 + e), on the vector loops and the strided path alike
    ut, sign, quiet = ((np.uint32, 1 << 31, 1 << 22) if dtype == np.float32
                       else (np.uint64, 1 << 63, 1 << 51))
    top = np.array(np.inf, dtype).view(ut)                          # exponent all ones
    nans = np.array([top | quiet | 1, sign | top | quiet | 2, top | 3, sign | top | 5], ut)
    for got in (F.sigmoid(nans.view(dtype)).numpy(),
                np.ascontiguousarray(F.sigmoid(nans.view(dtype)[::-1]).numpy()[::-1])):
        assert got.view(ut).tolist() == (nans | sign | quiet).tolist()


@pytest.mark.parametrize("dtype", DTYPES)
def test_own_expm1_is_accurate(dtype):
    # ELU with alpha 1 is expm1 below 0 (ndws/_vmath.h's, branch-free): a dense sweep over the
    # Taylor range (n = 0), the reconstructed one (2^n expm1(r) + 2^n - 1), the clamp and the
    # subnormals, against extended precision; SELU's negative branch is the same function
    mags = np.concatenate([np.geomspace(np.finfo(dtype).smallest_subnormal, 1e-3, 3000),
                           np.linspace(1e-3, 45, 90001),
                           [0.3465, 0.3466, 0.3467, 1.0397, 1.0398, 17.0, 17.4, 20.0, 20.001,
                            36.0, 37.5, 40.0, 40.001, 1e3, 3e38]])
    x = (-mags).astype(dtype)
    e = F.elu(x, alpha=1.0).numpy()
    assert _ulps(e, np.expm1(x.astype(np.longdouble)), dtype).max() <= ULPS["expm1"]
    s = F.selu(x).numpy()
    ref = np.longdouble(SELU_LAMBDA * SELU_ALPHA) * np.expm1(x.astype(np.longdouble))
    assert _ulps(s, ref, dtype).max() <= ULPS["expm1"] + 1.0    # (one more rounding)
    special = np.array([0.0, -0.0, -np.inf, np.nan, np.inf, 5.0], dtype)
    e = F.elu(special, alpha=1.0).numpy()
    assert e[:3].tolist() == [0.0, 0.0, -1.0] and np.signbit(e[1]) and np.isnan(e[3])
    assert e[4] == np.inf and e[5] == 5.0
    # contiguous loops and the strided path: one element function, the same bits
    for f in (lambda v: F.elu(v, alpha=0.7), F.selu):
        assert f(x).numpy().tobytes() == np.ascontiguousarray(f(x[::-1]).numpy()[::-1]).tobytes()


def test_float32_gelu_through_ndws_erfc():
    # float32 GELU is 0.5 v erfc(-v/sqrt(2)) with ndws' branch-free erfc (ndws/_vmath.h): over a
    # dense sweep, within 3e-6 of the float64 formula relative to the value wherever that is
    # above 1e-7 (glibc's erfcf there: 1.6e-6; both mostly the rounding of v/sqrt(2)), within
    # 1e-11 below, the derivative Phi(v) + v phi(v) likewise, and the limits exact
    v = np.linspace(-14, 14, 400_001).astype(np.float32)
    ref = 0.5 * v.astype(np.float64) * np.vectorize(math.erfc)(-v.astype(np.float64)
                                                                / math.sqrt(2))
    y = F.gelu(v).numpy()
    ok = np.abs(ref) > 1e-7
    assert (np.abs(y[ok] - ref[ok]) / np.abs(ref[ok])).max() <= 3e-6
    assert np.abs(y[~ok] - ref[~ok]).max() <= 1e-11          # the tail: tiny values, 2e-5 of them
    w = v.astype(np.float64)
    cdf, pdf = (0.5 * np.vectorize(math.erfc)(-w / math.sqrt(2)),
                w * np.exp(-0.5 * w * w) / math.sqrt(2 * math.pi))
    d = F.gelu_backward(v, np.ones_like(v)).numpy()
    scale = cdf + np.abs(pdf)               # (the two terms cancel at GELU's minimum, -0.75)
    ok = scale > 1e-7
    assert (np.abs(d[ok] - (cdf + pdf)[ok]) / scale[ok]).max() <= 3e-6
    edge = np.array([0.0, -0.0, 20.0, -20.0, 1e30], np.float32)
    assert F.gelu(edge).numpy().tobytes() == np.array([0.0, -0.0, 20.0, -0.0, 1e30],
                                                      np.float32).tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_softplus_is_accurate(dtype):
    # softplus is max(v, 0) + log1p(exp(-|v|)) (float32: ndws' own branch-free log1p,
    # ndws/_vmath.h, within 1.44 ulp; float64: glibc's) after ndws' exp: within 2 (float32) /
    # 3 (float64) ulp of extended precision over a dense sweep, exact at the limits, and the
    # same bits strided
    mags = np.concatenate([np.geomspace(1e-30, 1e-3, 2000), np.linspace(1e-3, 120, 120001),
                           [700.0, 745.0, 800.0]])
    x = np.concatenate([mags, -mags, [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(dtype)
    y = F.softplus(x).numpy()
    xl = x[:-5].astype(np.longdouble)
    ref = np.maximum(xl, 0) + np.log1p(np.exp(-np.abs(xl)))
    ok = ref >= np.finfo(dtype).tiny
    assert _ulps(y[:-5][ok], ref[ok], dtype).max() <= (2.0 if dtype == np.float32 else 3.0)
    assert (np.abs(y[:-5][~ok].astype(np.longdouble) - ref[~ok]).max(initial=0)
            <= np.finfo(dtype).smallest_subnormal)
    ln2 = dtype(np.log(2.0))
    assert y[-5] == ln2 and y[-4] == ln2 and y[-3] == np.inf and y[-2] == 0.0
    assert np.isnan(y[-1])
    assert y.tobytes() == np.ascontiguousarray(F.softplus(x[::-1]).numpy()[::-1]).tobytes()


def test_own_exp_in_the_ufunc_and_the_nn_kernels_is_one_definition():
    # ndws.exp's float32 loop (small arrays) and the nn kernels' exp are the same function:
    # selu_backward's negative branch is lambda*alpha*exp(x), computed in float32
    from ndws import _ufuncs
    x = -np.linspace(0.01, 20, 31).astype(np.float32)
    before = _ufuncs._native_calls()["unary"][0]
    e = ndws.exp(ndws.asarray(x)).numpy()
    assert _ufuncs._native_calls()["unary"][0] == before + 1     # ndws' own float32 loop ran
    np.testing.assert_array_equal(
        F.selu_backward(x, np.ones_like(x)).numpy(),
        np.float32(SELU_LAMBDA * SELU_ALPHA) * e)
    assert _ulps(e, np.exp(x.astype(np.longdouble)), np.float32).max() <= 1.3


@pytest.mark.parametrize("dtype", DTYPES)
def test_dl4j_activations_at_the_extremes(dtype):
    # the limits where a formula would give inf/inf or inf*0 (libnd4j's do: NaN)
    inf = np.array([np.inf, -np.inf], dtype=dtype)
    one = np.ones(2, dtype=dtype)
    lam_alpha = dtype(SELU_LAMBDA * SELU_ALPHA)
    assert F.hardtanh(inf).tolist() == [1.0, -1.0]
    assert F.hardsigmoid(inf).tolist() == [1.0, 0.0]
    assert F.selu(inf).tolist() == [np.inf, -float(lam_alpha)]
    assert F.swish(inf).tolist() == [np.inf, 0.0]
    assert F.swish_backward(inf, one).tolist() == [1.0, 0.0]
    assert F.softsign(inf).tolist() == [1.0, -1.0]
    assert F.softsign_backward(inf, one).tolist() == [0.0, 0.0]
    assert F.rational_tanh(inf).tolist() == [float(dtype(RT_A)), -float(dtype(RT_A))]
    assert F.rational_tanh_backward(inf, one).tolist() == [0.0, 0.0]
    assert F.rectified_tanh(inf).tolist() == [1.0, 0.0]
    assert F.cube(inf).tolist() == [np.inf, -np.inf]
    assert F.thresholded_relu(inf).tolist() == [np.inf, 0.0]
    # large finite inputs: libnd4j's swish derivative overflows (e^x)^2 to NaN past x = 44
    # (float32), its rational tanh derivative divides inf by inf past |x| = 6e12
    big = np.array([100.0, -100.0, 1e30, -1e30, 3e38], dtype=dtype)
    ones = np.ones_like(big)
    d = F.swish_backward(big, ones).numpy()
    np.testing.assert_allclose(d, REF["swish"][1](big.astype(np.float64)), rtol=1e-6,
                               atol=1e-40)           # float32's subnormals lose digits
    assert d.tolist()[2:] == [1.0, 0.0, 1.0]
    d = F.rational_tanh_backward(big, ones).numpy()
    np.testing.assert_allclose(d, _drtanh(big.astype(np.float64)).astype(dtype), rtol=1e-5,
                               atol=0)
    y = F.rational_tanh(big).numpy()
    np.testing.assert_allclose(y[2:], [RT_A, -RT_A, RT_A], rtol=1e-7)
    # the kinks: libnd4j's closed intervals (the slope at the kink itself)
    kinks = np.array([-1.0, 1.0, -2.5, 2.5, 1.0], dtype=dtype)
    assert F.hardtanh_backward(kinks[:2], one).tolist() == [1.0, 1.0]
    assert F.hardsigmoid_backward(kinks[2:4], one).tolist() == [0.2 if dtype == np.float64
                                                               else float(np.float32(0.2))] * 2
    assert F.thresholded_relu(kinks[4:], theta=1.0).tolist() == [0.0]     # x > theta only
    assert F.thresholded_relu_backward(kinks[4:], kinks[4:]).tolist() == [0.0]
    # -0.0 keeps its sign where the function is odd
    z = np.array([-0.0], dtype=dtype)
    for name in ("hardtanh", "softsign", "rational_tanh", "cube", "selu"):
        assert np.signbit(getattr(F, name)(z).numpy()[0]), name


@pytest.mark.parametrize("dtype", DTYPES)
def test_activation_parameters_must_be_finite(dtype):
    # a NaN threshold would make every comparison false (thresholded_relu the identity); a NaN
    # or inf slope turns outputs into NaN: both refused before anything is written
    x = ndws.array(np.array([-1.0, 2.0], dtype=dtype))
    out = ndws.zeros(2, dtype=dtype)
    for bad in (float("nan"), float("inf"), -np.inf, np.float32("nan"), 10 ** 400):
        with pytest.raises(ValueError, match=r"^thresholded_relu: theta must be a finite real "
                                             r"number, got "):
            F.thresholded_relu(x, theta=bad, out=out)
        with pytest.raises(ValueError, match=r"^thresholded_relu_backward: theta must be a "
                                             r"finite real number"):
            F.thresholded_relu_backward(x, x, theta=bad, out=out)
        with pytest.raises(ValueError, match=r"^activation: theta must be a finite real"):
            F.activation("thresholdedrelu", x, theta=bad, out=out)
        with pytest.raises(ValueError, match=r"^leaky_relu: alpha must be a finite real"):
            F.leaky_relu(x, alpha=bad, out=out)
        with pytest.raises(ValueError, match=r"^elu_backward: alpha must be a finite real"):
            F.elu_backward(x, x, alpha=bad, out=out)
        with pytest.raises(ValueError, match=r"^activation: alpha must be a finite real"):
            F.activation("leakyrelu", x, alpha=bad, out=out)
    for bad in ("1", True, None, [1.0]):
        with pytest.raises(TypeError, match=r"^thresholded_relu: theta must be a real number"):
            F.thresholded_relu(x, theta=bad, out=out)
    assert out.tolist() == [0.0, 0.0]
    # any finite theta, negative too (DL4J's ThresholdedReLU takes any double)
    assert F.thresholded_relu(x, theta=-2).tolist() == [-1.0, 2.0]
    assert F.thresholded_relu(x, theta=np.float32(1.5)).tolist() == [0.0, 2.0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NEW)
def test_fused_linear_applies_each_dl4j_activation(name, dtype, rng):
    # the fused layer's two tile paths: bias + activation on contiguous rows, and the
    # activation alone on a strided out=
    x = rng.standard_normal((37, 19)).astype(dtype)
    w = (rng.standard_normal((19, 41)) / 3).astype(dtype)
    b = rng.standard_normal(41).astype(dtype)
    z = x.astype(np.float64) @ w.astype(np.float64) + b
    exp = REF[name][0](z, **_params(name))
    got = F.linear(x, w, b, name, **_params(name))
    np.testing.assert_allclose(got.numpy(), exp, rtol=TOL[np.dtype(dtype)][0] * 50,
                               atol=TOL[np.dtype(dtype)][1] * 50)
    big = ndws.zeros((37, 82), dtype=dtype)
    view = big[:, ::-2]
    assert F.linear(x, w, b, name, out=view, **_params(name)) is view
    np.testing.assert_allclose(view.numpy(), exp, rtol=TOL[np.dtype(dtype)][0] * 50,
                               atol=TOL[np.dtype(dtype)][1] * 50)
    assert not big.numpy()[:, ::2].any()


# ------------------------------------------------------------------------------------------------
# finite-difference gradient checks (float64)


@pytest.mark.parametrize("name", NAMES)
def test_derivatives_by_finite_differences(name, rng):
    x = rng.standard_normal(257) * 3
    for kink in KINKS.get(name, (0.0,)):
        x = x[np.abs(x - kink) > 1e-3]          # relu-like kinks
    g = rng.standard_normal(x.size)
    h = 1e-6
    f = _fwd(name)
    num = (f(x + h, **_params(name)).numpy() - f(x - h, **_params(name)).numpy()) / (2 * h)
    got = _bwd(name)(x, g, **_params(name)).numpy()
    np.testing.assert_allclose(got, num * g, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [0, 1])
def test_softmax_vjp_by_finite_differences(name, axis, rng):
    x = rng.standard_normal((4, 5)) * 2
    g = rng.standard_normal((4, 5))
    f = getattr(F, name)
    h = 1e-6
    num = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        num[idx] = np.sum(g * (f(xp, axis=axis).numpy() - f(xm, axis=axis).numpy())) / (2 * h)
    got = getattr(F, name + "_backward")(x, g, axis=axis).numpy()
    np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-8)


# ------------------------------------------------------------------------------------------------
# generic activation(name, ...)


@pytest.mark.parametrize("dtype", DTYPES)
def test_generic_activation_names_and_aliases(dtype, rng):
    x = (rng.standard_normal((3, 8)) * 3).astype(dtype)
    g = rng.standard_normal((3, 8)).astype(dtype)
    cases = [("identity", "identity", {}), ("RELU", "relu", {}), ("leakyrelu", "leaky_relu", {}),
             ("leaky_relu", "leaky_relu", {"alpha": 0.3}), ("elu", "elu", {"alpha": 2.0}),
             ("sigmoid", "sigmoid", {}), ("tanh", "tanh", {}), ("softplus", "softplus", {}),
             ("gelu", "gelu", {}), ("gelu", "gelu", {"approximate": "tanh"}),
             ("HardTanh", "hardtanh", {}), ("hard_tanh", "hardtanh", {}),
             ("hardsigmoid", "hardsigmoid", {}), ("hard_sigmoid", "hardsigmoid", {}),
             ("SELU", "selu", {}), ("swish", "swish", {}), ("silu", "swish", {}),
             ("softsign", "softsign", {}), ("rationaltanh", "rational_tanh", {}),
             ("rational_tanh", "rational_tanh", {}), ("rectifiedtanh", "rectified_tanh", {}),
             ("rectified_tanh", "rectified_tanh", {}), ("cube", "cube", {}),
             ("thresholdedrelu", "thresholded_relu", {}),
             ("thresholded_relu", "thresholded_relu", {"theta": -0.5})]
    for alias, name, params in cases:
        exp = _fwd(name)(x, **params).numpy()
        np.testing.assert_array_equal(F.activation(alias, x, **params).numpy(), exp)
        expd = _bwd(name)(x, g, **params).numpy()
        np.testing.assert_array_equal(F.activation_backward(alias, x, g, **params).numpy(),
                                      expd)
    for alias, name in [("softmax", "softmax"), ("logsoftmax", "log_softmax"),
                        ("log_softmax", "log_softmax")]:
        for axis in (0, -1):
            np.testing.assert_array_equal(F.activation(alias, x, axis=axis).numpy(),
                                          getattr(F, name)(x, axis=axis).numpy())
            np.testing.assert_array_equal(
                F.activation_backward(alias, x, g, axis=axis).numpy(),
                getattr(F, name + "_backward")(x, g, axis=axis).numpy())
    out = ndws.empty((3, 8), dtype=dtype)
    assert F.activation("relu", x, out=out) is out
    _close(out, _ref_f("relu", x), dtype)


def test_generic_activation_errors():
    x = ndws.zeros(3)
    with pytest.raises(ValueError, match=r"unknown activation 'mish'; valid names: cube, elu, "
                                         r"gelu, hard_sigmoid, hard_tanh, hardsigmoid, "
                                         r"hardtanh, identity, leaky_relu, leakyrelu, linear, "
                                         r"log_softmax, logsoftmax, rational_tanh, "
                                         r"rationaltanh, rectified_tanh, rectifiedtanh, relu, "
                                         r"selu, sigmoid, silu, softmax, softplus, softsign, "
                                         r"swish, tanh, thresholded_relu, thresholdedrelu$"):
        F.activation("mish", x)
    with pytest.raises(TypeError, match=r"unexpected parameter 'alpha' for activation 'relu'"):
        F.activation("relu", x, alpha=0.1)
    with pytest.raises(TypeError, match=r"unexpected parameter 'theta' for activation 'selu'"):
        F.activation("selu", x, theta=0.1)
    with pytest.raises(TypeError, match=r"unexpected parameter 'alpha' for activation "
                                        r"'thresholdedrelu'"):
        F.activation("thresholdedrelu", x, alpha=0.1)
    with pytest.raises(ValueError, match=r"approximate must be 'none' or 'tanh', got 'fast'"):
        F.activation("gelu", x, approximate="fast")
    with pytest.raises(TypeError, match=r"activation: name must be a str"):
        F.activation(3, x)
    assert F.ACTIVATIONS == tuple(sorted(F.ACTIVATIONS))


# ------------------------------------------------------------------------------------------------
# argument validation


def test_argument_errors():
    x = ndws.zeros((2, 3))
    with pytest.raises(TypeError, match=r"relu: x must be a float32 or float64 array, got "
                                        r"dtype int64"):
        F.relu(ndws.zeros((2, 3), dtype=np.int64))
    with pytest.raises(TypeError, match=r"relu: x must be a float32 or float64 array, got "
                                        r"dtype <U1"):
        F.relu(["a"])
    with pytest.raises(TypeError, match=r"^relu: x is required: an NDArray or array_like of "
                                        r"float32 or float64, got None$"):
        F.relu(None)
    with pytest.raises(TypeError, match=r"tanh_backward: grad_output has dtype float32, "
                                        r"expected float64 \(the dtype of x\)"):
        F.tanh_backward(x, ndws.zeros((2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match=r"tanh_backward: grad_output has shape \(3, 2\), "
                                         r"expected \(2, 3\) \(the shape of x\)"):
        F.tanh_backward(x, ndws.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"sigmoid: out has shape \(3,\), expected \(2, 3\)"):
        F.sigmoid(x, out=ndws.zeros(3))
    with pytest.raises(TypeError, match=r"sigmoid: out has dtype float32, expected float64"):
        F.sigmoid(x, out=ndws.zeros((2, 3), dtype=np.float32))
    with pytest.raises(TypeError, match=r"sigmoid: out must be an NDArray or numpy.ndarray, "
                                        r"got list"):
        F.sigmoid(x, out=[0.0])
    ro = np.zeros((2, 3))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"sigmoid: out is read-only"):
        F.sigmoid(x, out=ro)
    with pytest.raises(TypeError, match=r"leaky_relu: alpha must be a real number, got 'a'"):
        F.leaky_relu(x, alpha="a")
    with pytest.raises(ValueError, match=r"gelu: approximate must be 'none' or 'tanh'"):
        F.gelu(x, approximate=None)
    # lists are converted (float64), results are NDArrays
    assert F.relu([-1.0, 2.0]).tolist() == [0.0, 2.0]


# ------------------------------------------------------------------------------------------------
# workspaces: placement and stale arrays


def test_results_placed_in_current_workspace_and_out_wins():
    x = ndws.array(np.linspace(-2, 2, 50))
    with ndws.workspace("ACT_WS") as ws:
        y = F.relu(x)
        assert y.workspace_id == "ACT_WS"
        d = F.softmax_backward(x, x)
        assert d.workspace_id == "ACT_WS"
        before = ws.this_cycle_allocations
        out = ndws.empty(50, detached=True)
        assert F.sigmoid(x, out=out) is out and not out.is_attached()
        assert ws.this_cycle_allocations == before      # out= allocates nothing
    assert not F.relu(x).is_attached()                  # no workspace: detached


def test_stale_arrays_raise_workspace_error():
    good = ndws.zeros(4)
    with ndws.workspace("STALE_WS"):
        stale = ndws.zeros(4)
    for call in [lambda: F.relu(stale), lambda: F.relu(good, out=stale),
                 lambda: F.relu_backward(good, stale), lambda: F.softmax(stale),
                 lambda: F.log_softmax_backward(good, stale),
                 lambda: F.activation("tanh", stale)]:
        with pytest.raises(ndws.WorkspaceError, match=r"Op \[.*\] .* argument uses leaked "
                                                      r"workspace pointer from workspace "
                                                      r"\[STALE_WS\]"):
            call()


# ------------------------------------------------------------------------------------------------
# threads


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_and_two_threads_bit_identical(dtype, rng):
    x = (rng.standard_normal(300_001) * 3).astype(dtype)
    g = rng.standard_normal(300_001).astype(dtype)
    x3 = (rng.standard_normal((301, 1001)) * 3).astype(dtype)
    calls = [lambda: F.relu(x), lambda: F.gelu(x), lambda: F.softplus_backward(x, g),
             lambda: F.elu(x[::-1]), lambda: F.tanh(x3.T),
             lambda: F.hardtanh(x), lambda: F.hardtanh_backward(x3.T, x3.T),
             lambda: F.hardsigmoid(x), lambda: F.hardsigmoid_backward(x3.T, x3.T),
             lambda: F.selu(x), lambda: F.selu_backward(x3.T, x3.T),
             lambda: F.swish(x), lambda: F.swish_backward(x3.T, x3.T),
             lambda: F.softsign(x), lambda: F.softsign_backward(x3.T, x3.T),
             lambda: F.rational_tanh(x), lambda: F.rational_tanh_backward(x3.T, x3.T),
             lambda: F.rectified_tanh(x), lambda: F.rectified_tanh_backward(x3.T, x3.T),
             lambda: F.cube(x), lambda: F.cube_backward(x3.T, x3.T),
             lambda: F.thresholded_relu(x), lambda: F.thresholded_relu_backward(x3.T, x3.T),
             lambda: F.softmax(x3), lambda: F.softmax(x3, axis=0),
             lambda: F.log_softmax_backward(x3, x3)]
    for call in calls:
        with ndws.num_threads(1):
            one = call().numpy()
        with ndws.num_threads(2):
            two = call().numpy()
        assert one.tobytes() == two.tobytes()


def _progress_during(kernel):
    """Run `kernel()` while another Python thread counts; return how far it counted during
    the call. A huge switch interval means the main thread never gives up the GIL on its own,
    so the counter can only move while the kernel has released it."""
    counter = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counter[0] += 1
            time.sleep(0)            # gives the GIL back, so the main thread can resume

    old = sys.getswitchinterval()
    t = threading.Thread(target=count)
    t.start()
    try:
        while counter[0] == 0:
            time.sleep(0.001)
        sys.setswitchinterval(1000.0)
        before = counter[0]
        kernel()
        after = counter[0]
    finally:
        sys.setswitchinterval(old)
        stop.set()
        t.join()
    return after - before


def test_gil_released_during_long_kernels():
    x = np.random.default_rng(0).standard_normal(4_000_000)
    with ndws.num_threads(1):
        assert _progress_during(lambda: F.gelu(x)) > 0
        assert _progress_during(lambda: F.softmax_backward(x.reshape(1000, -1),
                                                           x.reshape(1000, -1))) > 0


def test_concurrent_python_threads(threaded, rng):
    x = rng.standard_normal((64, 100))
    expected = F.softmax(x).numpy()

    def work(i):
        with ndws.num_threads(1):
            for _ in range(20):
                np.testing.assert_array_equal(F.softmax(x).numpy(), expected)
        return i

    assert threaded(work, 4) == [0, 1, 2, 3]


def test_public_module_all():
    import ndws.nn
    assert ndws.nn.functional is F
    for name in F.__all__:
        assert callable(getattr(F, name)) or name == "ACTIVATIONS"
    import doctest
    failures, tried = doctest.testmod(F, optionflags=doctest.ELLIPSIS)
    assert tried > 0 and failures == 0
    tried_all = 0
    for module in KERNEL_MODULES:
        failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert failures == 0, module.__name__
        tried_all += tried
    assert tried_all > 0


def test_stub_lists_every_public_kernel():
    import pathlib
    public = []
    for module in KERNEL_MODULES:
        name = module.__name__.rsplit(".", 1)[1]
        stub = (pathlib.Path(module.__file__).parent / f"{name}.pyi").read_text()
        names = [n for n in dir(module) if not n.startswith("_") and n != "np"]
        missing = [n for n in names if n not in stub]
        assert not missing, f"{name}.pyi lacks {missing}"
        public += names
    # F is exactly the kernel modules' public surface (the fused linear layer and the
    # convolutional kernels included)
    assert sorted(F.__all__) == sorted(public)


# the backward functions never fall back to the forward when grad_output is missing
@pytest.mark.parametrize("call, op", [
    (lambda x: F.relu_backward(x, None), "relu_backward"),
    (lambda x: F.leaky_relu_backward(x, None), "leaky_relu_backward"),
    (lambda x: F.elu_backward(x, None), "elu_backward"),
    (lambda x: F.sigmoid_backward(x, None), "sigmoid_backward"),
    (lambda x: F.tanh_backward(x, None), "tanh_backward"),
    (lambda x: F.softplus_backward(x, None), "softplus_backward"),
    (lambda x: F.gelu_backward(x, None), "gelu_backward"),
    (lambda x: F.identity_backward(x, None), "identity_backward"),
    (lambda x: F.hardtanh_backward(x, None), "hardtanh_backward"),
    (lambda x: F.hardsigmoid_backward(x, None), "hardsigmoid_backward"),
    (lambda x: F.selu_backward(x, None), "selu_backward"),
    (lambda x: F.swish_backward(x, None), "swish_backward"),
    (lambda x: F.softsign_backward(x, None), "softsign_backward"),
    (lambda x: F.rational_tanh_backward(x, None), "rational_tanh_backward"),
    (lambda x: F.rectified_tanh_backward(x, None), "rectified_tanh_backward"),
    (lambda x: F.cube_backward(x, None), "cube_backward"),
    (lambda x: F.thresholded_relu_backward(x, None), "thresholded_relu_backward"),
    (lambda x: F.softmax_backward(x, None), "softmax_backward"),
    (lambda x: F.log_softmax_backward(x, None), "log_softmax_backward"),
    (lambda x: F.activation_backward("relu", x, None), "activation_backward"),
    (lambda x: F.activation_backward("softmax", x, None), "activation_backward"),
], ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_missing_grad_output_raises(call, op, dtype):
    x = ndws.array(np.array([[1.0, -2.0, 0.5]], dtype=dtype))
    out = ndws.zeros((1, 3), dtype=dtype)
    with pytest.raises(TypeError) as info:
        call(x)
    assert str(info.value) == (f"{op}: grad_output is required: an NDArray or array_like of "
                               f"float32 or float64, got None")
    assert out.numpy().tolist() == [[0.0, 0.0, 0.0]]
