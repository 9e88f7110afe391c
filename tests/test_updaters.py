"""ndws.nn.functional updaters against NumPy implementations of the documented formulas."""
from __future__ import annotations

import numpy as np
import pytest

import ndws
import ndws.nn.functional as F
from test_activations import _progress_during

DTYPES = [np.float32, np.float64]
#: (rtol, atol) per dtype after several steps on O(1) parameters (data, not code)
TOL = {np.dtype(np.float32): (2e-5, 2e-6), np.dtype(np.float64): (1e-12, 1e-14)}
STEPS = 5


def np_sgd(p, g, s, lr):
    p -= lr * g


def np_momentum(p, g, s, lr, momentum=0.9, nesterov=False):
    v, = s
    v *= momentum
    v += g
    p -= lr * (g + momentum * v if nesterov else v)


def np_adam(p, g, s, step, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0):
    m, v = s
    p *= 1 - lr * weight_decay
    m[...] = beta1 * m + (1 - beta1) * g
    v[...] = beta2 * v + (1 - beta2) * g * g
    p -= lr / (1 - beta1 ** step) * m / (np.sqrt(v) / np.sqrt(1 - beta2 ** step) + eps)


def np_rmsprop(p, g, s, lr=1e-2, rho=0.99, eps=1e-8):
    sq, = s
    sq[...] = rho * sq + (1 - rho) * g * g
    p -= lr * g / (np.sqrt(sq) + eps)


def np_adagrad(p, g, s, lr=1e-2, eps=1e-10):
    h, = s
    h += g * g
    p -= lr * g / (np.sqrt(h) + eps)


# name -> (ndws function, NumPy reference, number of state arrays, takes step, hyper-parameters)
CASES = {
    "sgd": (F.sgd_update, np_sgd, 0, False, {"lr": 0.1}),
    "momentum": (F.momentum_update, np_momentum, 1, False, {"lr": 0.05}),
    "nesterov": (F.momentum_update, np_momentum, 1, False,
                 {"lr": 0.05, "momentum": 0.8, "nesterov": True}),
    "adam": (F.adam_update, np_adam, 2, True, {}),
    "adam_hp": (F.adam_update, np_adam, 2, True,
                {"lr": 0.01, "beta1": 0.5, "beta2": 0.9, "eps": 1e-6}),
    "adamw": (F.adamw_update, np_adam, 2, True, {"weight_decay": 1e-2}),
    "adamw_hp": (F.adamw_update, np_adam, 2, True, {"lr": 0.02, "weight_decay": 0.1}),
    "rmsprop": (F.rmsprop_update, np_rmsprop, 1, False, {}),
    "rmsprop_hp": (F.rmsprop_update, np_rmsprop, 1, False, {"lr": 0.1, "rho": 0.95,
                                                            "eps": 1e-6}),
    "adagrad": (F.adagrad_update, np_adagrad, 1, False, {"lr": 0.1}),
}


def _run(name, dtype, n, rng, steps=STEPS, wrap=ndws.array):
    fn, ref, nstate, takes_step, hp = CASES[name]
    p0 = rng.standard_normal(n).astype(dtype)
    p, pr = wrap(p0), p0.copy()
    states = [wrap(np.zeros(n, dtype)) for _ in range(nstate)]
    rstates = [np.zeros(n, dtype) for _ in range(nstate)]
    for step in range(1, steps + 1):
        g0 = rng.standard_normal(n).astype(dtype)
        args = [p, wrap(g0)] + states + ([step] if takes_step else [])
        assert fn(*args, **hp) is p
        rargs = [pr, g0, rstates] + ([step] if takes_step else [])
        ref(*rargs, **hp)
        assert pr.dtype == np.dtype(dtype)
    return p, pr, states, rstates


def _np(a):
    return a.numpy() if isinstance(a, ndws.NDArray) else np.asarray(a)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("n", [1, 7, 65, 257])
def test_updaters_match_numpy_over_several_steps(name, dtype, n, rng):
    p, pr, states, rstates = _run(name, dtype, n, rng)
    rtol, atol = TOL[np.dtype(dtype)]
    np.testing.assert_allclose(_np(p), pr, rtol=rtol, atol=atol)
    assert _np(p).dtype == np.dtype(dtype)
    for s, rs in zip(states, rstates):
        np.testing.assert_allclose(_np(s), rs, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", ["sgd", "adam", "rmsprop"])
def test_numpy_arrays_are_updated_in_place(name, rng):
    p, pr, states, rstates = _run(name, np.float64, 33, rng, wrap=lambda a: a)
    assert isinstance(p, np.ndarray)
    np.testing.assert_allclose(p, pr, rtol=1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_empty_and_2d_parameters(name, rng):
    fn, _, nstate, takes_step, hp = CASES[name]
    for shape in [(0,), (5, 0)]:
        p = ndws.zeros(shape)
        args = [p, ndws.zeros(shape)] + [ndws.zeros(shape) for _ in range(nstate)]
        assert fn(*(args + ([1] if takes_step else [])), **hp) is p
    # any C-contiguous shape is a flat vector
    p2, pr2, _, _ = _run(name, np.float64, 12, np.random.default_rng(3), steps=2)
    fn2 = CASES[name][0]
    q = ndws.array(_np(p2).reshape(3, 4))
    args = [q, ndws.ones((3, 4))] + [ndws.zeros((3, 4)) for _ in range(nstate)]
    fn2(*(args + ([1] if takes_step else [])), **hp)
    flat = ndws.array(_np(p2))
    args = [flat, ndws.ones(12)] + [ndws.zeros(12) for _ in range(nstate)]
    fn2(*(args + ([1] if takes_step else [])), **hp)
    np.testing.assert_array_equal(q.numpy().ravel(), flat.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["sgd", "nesterov", "adamw", "rmsprop", "adagrad"])
def test_one_and_two_threads_bit_identical(name, dtype, rng):
    fn, _, nstate, takes_step, hp = CASES[name]
    n = 200_003
    p0 = rng.standard_normal(n).astype(dtype)
    g0 = rng.standard_normal(n).astype(dtype)
    results = []
    for threads in (1, 2):
        p = ndws.array(p0)
        states = [ndws.zeros(n, dtype=dtype) for _ in range(nstate)]
        with ndws.num_threads(threads):
            for step in (1, 2, 3):
                fn(*([p, g0] + states + ([step] if takes_step else [])), **hp)
        results.append(p.numpy().tobytes() + b"".join(s.numpy().tobytes() for s in states))
    assert results[0] == results[1]


def test_updater_errors():
    p = ndws.zeros(6)
    g = ndws.zeros(6)
    with pytest.raises(TypeError, match=r"sgd_update: param must be an NDArray or "
                                        r"numpy.ndarray \(updated in place\), got list"):
        F.sgd_update([0.0], [0.0], 0.1)
    with pytest.raises(ValueError, match=r"sgd_update: grad has shape \(5,\), expected \(6,\) "
                                         r"\(the shape of param\)"):
        F.sgd_update(p, ndws.zeros(5), 0.1)
    with pytest.raises(TypeError, match=r"adam_update: v has dtype float32, expected float64 "
                                        r"\(the dtype of param\)"):
        F.adam_update(p, g, ndws.zeros(6), ndws.zeros(6, dtype=np.float32), 1)
    with pytest.raises(TypeError, match=r"sgd_update: param must be a float32 or float64 "
                                        r"array, got dtype int64"):
        F.sgd_update(ndws.zeros(6, dtype=np.int64), g, 0.1)
    with pytest.raises(ValueError, match=r"momentum_update: velocity must be C-contiguous"):
        F.momentum_update(p, g, ndws.zeros(12)[::2], 0.1)
    with pytest.raises(ValueError, match=r"sgd_update: param must be C-contiguous"):
        F.sgd_update(ndws.zeros((3, 4)).T, ndws.zeros((4, 3)), 0.1)
    ro = np.zeros(6)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"rmsprop_update: sq is read-only"):
        F.rmsprop_update(p, g, ro)
    with pytest.raises(ValueError, match=r"sgd_update: lr must be in \[0, inf\], got -0.1"):
        F.sgd_update(p, g, -0.1)
    with pytest.raises(TypeError, match=r"sgd_update: lr must be a real number, got None"):
        F.sgd_update(p, g, None)
    with pytest.raises(ValueError, match=r"adam_update: beta2 must be in \[0, 1\), got 1.0"):
        F.adam_update(p, g, ndws.zeros(6), ndws.zeros(6), 1, beta2=1.0)
    with pytest.raises(ValueError, match=r"adam_update: step must be in \[1, 2\*\*63\)"):
        F.adam_update(p, g, ndws.zeros(6), ndws.zeros(6), 0)
    with pytest.raises(TypeError, match=r"adamw_update: step must be an int"):
        F.adamw_update(p, g, ndws.zeros(6), ndws.zeros(6), 1.0)
    with pytest.raises(ValueError, match=r"momentum_update: momentum must be in \[0, 1\]"):
        F.momentum_update(p, g, ndws.zeros(6), 0.1, momentum=1.5)
    with pytest.raises(ValueError, match=r"adagrad_update: eps must be in \[0, inf\]"):
        F.adagrad_update(p, g, ndws.zeros(6), eps=-1.0)


@pytest.mark.parametrize("call, exc, msg", [
    (lambda p, g, s: F.adam_update(p, g, s[0], s[1], 2**70), ValueError,
     r"^adam_update: step must be in \[1, 2\*\*63\) \(the 1-based number of this update\), "
     r"got 1180591620717411303424$"),
    (lambda p, g, s: F.adamw_update(p, g, s[0], s[1], np.uint64(2**63)), ValueError,
     r"^adamw_update: step must be in \[1, 2\*\*63\)"),
    (lambda p, g, s: F.adam_update(p, g, s[0], s[1], 1, lr=10**400), ValueError,
     r"^adam_update: lr must be a finite real number, got 1000000000"),
    (lambda p, g, s: F.adamw_update(p, g, s[0], s[1], 1, weight_decay=-10**400), ValueError,
     r"^adamw_update: weight_decay must be a finite real number"),
    (lambda p, g, s: F.sgd_update(p, g, 10**400), ValueError,
     r"^sgd_update: lr must be a finite real number"),
    (lambda p, g, s: F.sgd_update(p, g, float("nan")), ValueError,
     r"^sgd_update: lr must be in \[0, inf\], got nan$"),
    (lambda p, g, s: F.momentum_update(p, g, s[0], 0.1, momentum=10**400), ValueError,
     r"^momentum_update: momentum must be a finite real number"),
    (lambda p, g, s: F.momentum_update(p, g, s[0], 0.1, nesterov="no"), TypeError,
     r"^momentum_update: nesterov must be a bool, got 'no'$"),
    (lambda p, g, s: F.rmsprop_update(p, g, s[0], rho=float("inf")), ValueError,
     r"^rmsprop_update: rho must be in \[0, 1\], got inf$"),
    (lambda p, g, s: F.adagrad_update(p, g, s[0], lr=10**400), ValueError,
     r"^adagrad_update: lr must be a finite real number"),
    (lambda p, g, s: F.leaky_relu(p, alpha=10**400), ValueError,
     r"^leaky_relu: alpha must be a finite real number"),
])
def test_hostile_hyperparameters_name_the_argument_and_change_nothing(call, exc, msg):
    p = np.arange(6.0)
    g, state = np.ones(6), (np.full(6, 0.5), np.full(6, 0.25))
    with pytest.raises(exc, match=msg):
        call(p, g, state)
    assert p.tolist() == list(range(6))
    assert state[0].tolist() == [0.5] * 6 and state[1].tolist() == [0.25] * 6
    # the largest step is still a number: the bias corrections have converged
    F.adam_update(p, g, *state, 2**63 - 1)
    np.testing.assert_allclose(p, np.arange(6.0) - 1e-3 * (0.9 * 0.5 + 0.1) /
                               (np.sqrt(0.999 * 0.25 + 0.001) + 1e-8))


def test_stale_arrays_raise_workspace_error():
    p = ndws.zeros(4)
    with ndws.workspace("UPD_WS"):
        stale = ndws.zeros(4)
    for call in [lambda: F.sgd_update(stale, p, 0.1), lambda: F.sgd_update(p, stale, 0.1),
                 lambda: F.adam_update(p, p.copy(), ndws.zeros(4), stale, 1),
                 lambda: F.adagrad_update(p, p.copy(), stale)]:
        with pytest.raises(ndws.WorkspaceError, match=r"argument uses leaked workspace pointer "
                                                      r"from workspace \[UPD_WS\]"):
            call()


def test_gil_released_during_long_update():
    n = 8_000_000
    p, g, m, v = (np.zeros(n) for _ in range(4))
    with ndws.num_threads(1):
        assert _progress_during(lambda: F.adam_update(p, g, m, v, 1)) > 0


# -- in-place means in place --------------------------------------------------------------------

def _odd_strides(dtype):
    # a view whose strides are not whole elements (an itemsize and a half)
    raw = np.zeros(64, dtype=np.uint8)
    isz = np.dtype(dtype).itemsize
    return np.lib.stride_tricks.as_strided(raw.view(dtype), shape=(4,), strides=(isz + isz // 2,))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("make", [lambda a: a[::2], lambda a: a.reshape(2, 4).T,
                                  lambda a: ndws.from_numpy(a.copy())[::2]],
                         ids=["strided", "transposed", "ndarray-strided"])
def test_a_strided_param_or_state_is_refused_not_copied(dtype, make):
    p = make(np.zeros(8, dtype))
    g = np.ones(p.shape, dtype)
    with pytest.raises(ValueError, match=r"^sgd_update: param must be C-contiguous to be "
                                         r"updated in place, got strides "):
        F.sgd_update(p, g, 0.1)
    m = make(np.zeros(8, dtype))
    with pytest.raises(ValueError, match=r"^momentum_update: velocity must be C-contiguous to "
                                         r"be updated in place"):
        F.momentum_update(np.zeros(p.shape, dtype), g, m, 0.1)
    assert not np.asarray(p).any() and not np.asarray(m).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_non_element_strides_are_refused(dtype):
    p = _odd_strides(dtype)
    with pytest.raises(ValueError, match="param must be C-contiguous to be updated in place"):
        F.sgd_update(p, np.ones(4, dtype), 0.1)
    with pytest.raises(ValueError, match="param must be C-contiguous to be updated in place"):
        F.sgd_update(ndws.from_numpy(p), np.ones(4, dtype), 0.1)


@pytest.mark.parametrize("call, a, b", [
    (lambda p, g, m, v: F.adam_update(p, g, m, m, 1), "m", "v"),
    (lambda p, g, m, v: F.adam_update(m, g, m, v, 1), "param", "m"),
    (lambda p, g, m, v: F.adamw_update(p, g, v, v, 1), "m", "v"),
    (lambda p, g, m, v: F.rmsprop_update(p, g, p), "param", "sq"),
    (lambda p, g, m, v: F.adagrad_update(p, p, m), "param", "grad"),
    (lambda p, g, m, v: F.momentum_update(p, g, g, 0.1), "grad", "velocity"),
    (lambda p, g, m, v: F.sgd_update(p[1:], p[:-1], 0.1), "param", "grad"),
])
def test_arguments_that_share_memory_are_refused(call, a, b):
    base = np.arange(1.0, 5.0)
    p, g, m, v = base.copy(), np.ones(4), np.zeros(4), np.zeros(4)
    before = [x.copy() for x in (p, g, m, v)]
    with pytest.raises(ValueError) as info:
        call(p, g, m, v)
    assert str(info.value).endswith(f": {a} and {b} share memory; each must be an array of its "
                                    f"own")
    for x, y in zip((p, g, m, v), before):
        np.testing.assert_array_equal(x, y)


def _exact_step(kind, p, g, s, v, step, dt):
    # The kernel's exact sequence of operations: coefficients in the element type, each
    # product and sum rounded on its own (never fused), the moving averages' (1 - beta) terms
    # in double and rounded when stored.
    f, d = (lambda x: np.asarray(x, dt)), (lambda x: np.asarray(x, np.float64))
    lr, mu, b1, b2, eps, wd = 0.013, 0.9, 0.9, 0.999, 1e-8, 0.1
    if kind == "sgd":
        return p - f(lr) * g, s, v
    if kind in ("momentum", "nesterov"):
        s = f(mu) * s + g
        return p - f(lr) * ((g + f(mu) * s) if kind == "nesterov" else s), s, v
    if kind in ("adam", "adamw"):
        s = f(d(f(b1) * s) + (1.0 - d(f(b1))) * d(g))
        v = f(d(f(b2) * v) + (1.0 - d(f(b2))) * d(g) * d(g))
        step_size, bc2 = f(lr / (1.0 - b1 ** step)), f(np.sqrt(1.0 - b2 ** step))
        base = p * f(1.0 - lr * wd) if kind == "adamw" else p
        return base - step_size * s / (np.sqrt(v) / bc2 + f(eps)), s, v
    if kind == "rmsprop":
        s = f(d(f(mu) * s) + (1.0 - d(f(mu))) * d(g) * d(g))
        return p - f(lr) * g / (np.sqrt(s) + f(eps)), s, v
    s = s + g * g                                                        # adagrad
    return p - f(lr) * g / (np.sqrt(s) + f(eps)), s, v


_EXACT_CALLS = {
    "sgd": lambda p, g, s, v, t: F.sgd_update(p, g, 0.013),
    "momentum": lambda p, g, s, v, t: F.momentum_update(p, g, s, 0.013, 0.9),
    "nesterov": lambda p, g, s, v, t: F.momentum_update(p, g, s, 0.013, 0.9, nesterov=True),
    "adam": lambda p, g, s, v, t: F.adam_update(p, g, s, v, t, 0.013, eps=1e-8),
    "adamw": lambda p, g, s, v, t: F.adamw_update(p, g, s, v, t, 0.013, eps=1e-8,
                                                 weight_decay=0.1),
    "rmsprop": lambda p, g, s, v, t: F.rmsprop_update(p, g, s, 0.013, 0.9, 1e-8),
    "adagrad": lambda p, g, s, v, t: F.adagrad_update(p, g, s, 0.013, 1e-8),
}


@pytest.mark.parametrize("kind", list(_EXACT_CALLS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_element_is_the_scalar_formula_bit_for_bit(kind, dtype, rng):
    # The loops are built per instruction set (ndws/nn/_upd_loops.h): whichever this machine
    # runs, vector lanes, tails and every length give the scalar formula's bits (a fused
    # multiply-add would round differently).
    for n in list(range(1, 70)) + [100003]:
        p, g = rng.standard_normal((2, n)).astype(dtype)
        s, v = np.abs(rng.standard_normal((2, n))).astype(dtype)
        want = (p.copy(), s.copy(), v.copy())
        for t in (1, 2, 3):
            _EXACT_CALLS[kind](p, g, s, v, t)
            want = _exact_step(kind, *want[:1], g, *want[1:], t, dtype)
        np.testing.assert_array_equal(p, want[0], err_msg=f"{kind} n={n}")
        np.testing.assert_array_equal(s, want[1], err_msg=f"{kind} n={n}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_zero_divisor_gives_ieee_results_for_every_element(dtype):
    # eps=0 with zero state divides by zero: every element gets IEEE's answer (0/0 = NaN,
    # g/0 = +-inf, as torch), none is skipped and nothing is raised or reported
    p, g = np.ones(37, dtype), np.zeros(37, dtype)
    g[::2] = 1
    s, v = np.zeros(37, dtype), np.zeros(37, dtype)
    with np.errstate(all="ignore"):
        F.adagrad_update(p, g, s, 0.1, 0.0)
    assert np.isnan(p[1::2]).all() and np.isfinite(p[::2]).all()
    p2, s2 = np.ones(37, dtype), np.zeros(37, dtype)
    F.adam_update(p2, np.zeros(37, dtype), s2, v, 1, 0.1, eps=0.0)
    assert np.isnan(p2).all()
