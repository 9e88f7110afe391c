"""The native fast paths of ndws._ufuncs (element-wise ops and reductions, float32/float64), with
NumPy as the oracle: exact values where NumPy's loop is plain IEEE arithmetic, a few ulp for
exp/log/tanh; every fused specialisation proven to run (``_ufuncs._native_calls``); the cases
the kernels do not cover falling back to the NumPy path with the same results and errors."""
from __future__ import annotations

import sys
import threading
import time
import warnings

import numpy as np
import pytest

import ndws
from ndws import _threads, _ufuncs

FLOATS = [np.float32, np.float64]
F_IDS = ["float32", "float64"]
SIZES = [1, 7, 65, 257]

#: max error of ndws' exp/log/tanh vs NumPy's own SIMD versions, in units in the last place of
#: the result (both sides are within ~1-2 ulp of the true value; data, not code)
ULP_TOL = {"exp": 4, "log": 4, "tanh": 4}
#: max error of ndws' own float32 exp/tanh loops (Cephes polynomials, not libm) against the
#: float64 result rounded to float32, in float32 ulp (measured: exp 0.99, tanh 1.29)
F32_TRUE_ULP = {"exp": 1.5, "tanh": 1.5}
#: relative tolerance of sums along a non-last axis of more than 128 rows, where ndws adds
#: blocks of rows pairwise and NumPy adds row after row (per dtype; relative to sum(|x|))
SUM_RTOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-13}

BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
          "divide": np.divide, "maximum": np.maximum, "minimum": np.minimum}
OPERATORS = {"add": "__add__", "subtract": "__sub__", "multiply": "__mul__",
             "divide": "__truediv__"}
EXACT_UNARY = ["negative", "absolute", "square", "sqrt", "reciprocal"]
LIBM_UNARY = ["exp", "log", "tanh"]
REDUCTIONS = ["sum", "mean", "max", "min", "argmax", "argmin", "var", "std"]


def hits(family: str, dtype) -> int:
    return _ufuncs._native_calls()[family][0 if np.dtype(dtype) == np.float32 else 1]


class Hit:
    """Asserts that the block ran the native `family` kernel for `dtype` exactly `times` times
    (None: at least once; 0: it fell back)."""

    def __init__(self, family: str, dtype, times: int | None = None):
        self.family, self.dtype, self.times = family, dtype, times

    def __enter__(self):
        self.before = hits(self.family, self.dtype)
        return self

    def __exit__(self, exc_type, *rest):
        if exc_type is None:
            done = hits(self.family, self.dtype) - self.before
            if self.times is None:
                assert done >= 1, f"native {self.family} kernel not used"
            else:
                assert done == self.times, (self.family, done, self.times)
        return False


def data(rng, shape, dtype, positive=False):
    a = rng.standard_normal(shape)
    if positive:
        a = np.abs(a) + 0.25
    return a.astype(dtype)


def same(got, expected):
    """Equal dtype, shape and values (NaN == NaN; the sign of zeros too)."""
    g = got.numpy() if isinstance(got, ndws.NDArray) else np.asarray(got)
    e = np.asarray(expected)
    assert g.dtype == e.dtype, (g.dtype, e.dtype)
    assert g.shape == e.shape, (g.shape, e.shape)
    np.testing.assert_array_equal(g, e)
    if e.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(g), np.signbit(e))


def within_ulp(got, expected, ulps):
    g = got.numpy()
    e = np.asarray(expected)
    assert g.dtype == e.dtype and g.shape == e.shape
    np.testing.assert_array_equal(np.isnan(g), np.isnan(e))
    fin = np.isfinite(e)
    np.testing.assert_array_equal(g[~fin & ~np.isnan(e)], e[~fin & ~np.isnan(e)])
    err = np.abs(g[fin].astype(np.float64) - e[fin]) / np.spacing(np.abs(e[fin]))
    assert err.size == 0 or err.max() <= ulps, err.max()


# -- element-wise ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_same_shape_and_scalars(rng, name, n, dtype):
    a, b = data(rng, (n,), dtype), data(rng, (n,), dtype, positive=True)
    x, y = ndws.array(a), ndws.array(b)
    f, nf = getattr(ndws, name), BINARY[name]
    with Hit("binary", dtype, 6):
        same(f(x, y), nf(a, b))
        same(f(x, 3), nf(a, 3))                # Python int: NEP 50, stays `dtype`
        same(f(0.1, y), nf(0.1, b))            # Python float: rounded to `dtype` first
        same(f(x, -2.5), nf(a, -2.5))
        same(f(x, y[:1]), nf(a, b[:1]))        # one-element array of the same dtype
        same(f(ndws.array(b[0]), x), nf(b[0:1].reshape(()), a))   # 0-d array
    if name in OPERATORS:
        op = OPERATORS[name]
        rop = "__r" + op[2:]
        with Hit("binary", dtype, 3):
            same(getattr(x, op)(y), nf(a, b))
            same(getattr(x, op)(1.5), nf(a, 1.5))
            same(getattr(y, rop)(2), nf(2, b))


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_row_and_column_broadcast(rng, name, dtype):
    f, nf = getattr(ndws, name), BINARY[name]
    for m, n in [(1, 1), (7, 65), (65, 7), (3, 257)]:
        a = data(rng, (m, n), dtype)
        row = data(rng, (n,), dtype, positive=True)
        row2 = row.reshape(1, n)
        col = data(rng, (m, 1), dtype, positive=True)
        x, r, r2, c = ndws.array(a), ndws.array(row), ndws.array(row2), ndws.array(col)
        with Hit("binary", dtype, 6):
            same(f(x, r), nf(a, row))
            same(f(r, x), nf(row, a))
            same(f(x, r2), nf(a, row2))
            same(f(x, c), nf(a, col))
            same(f(c, x), nf(col, a))
            same(f(r2, x), nf(row2, a))
    # a row over the last axes of a 3-D array
    a3 = data(rng, (2, 3, 5), dtype)
    b2 = data(rng, (3, 5), dtype, positive=True)
    with Hit("binary", dtype, 1):
        same(f(ndws.array(a3), ndws.array(b2)), nf(a3, b2))


def test_python_scalars_follow_nep50(rng):
    a = data(rng, (5,), np.float32)
    x = ndws.array(a)
    same(x * 0.1, a * 0.1)                      # float32 result, 0.1 rounded to float32
    assert (x * 0.1).dtype == np.float32
    same(x + 2 ** 24, a + 2 ** 24)
    with Hit("binary", np.float32, 0):          # not exact in float32: NumPy's conversion
        same(x + (2 ** 24 + 1), a + (2 ** 24 + 1))
        same(x * 2 ** 70, a * 2 ** 70)
        same(x + ndws.array(np.float64(1.5)), a + np.float64(1.5).reshape(()))  # strong 0-d
        same(x + np.float64(1.5), a + np.float64(1.5))   # NumPy scalar: strong, float64
        same(x + True, a + True)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        r = x * 1e300                            # overflow in NumPy's cast: its warning
    with warnings.catch_warnings(record=True) as exp:
        warnings.simplefilter("always")
        e = a * 1e300
    same(r, e)
    assert [str(w.message) for w in got] == [str(w.message) for w in exp]


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
@pytest.mark.parametrize("n", SIZES + [1000])
@pytest.mark.parametrize("name", EXACT_UNARY + LIBM_UNARY)
def test_unary(rng, name, n, dtype):
    a = data(rng, (n,), dtype, positive=name in ("sqrt", "log"))
    x = ndws.array(a)
    f, nf = getattr(ndws, name), getattr(np, name)
    family = "numpy_simd" if name in LIBM_UNARY and n > 32 else "unary"
    with Hit(family, dtype, 2):
        got, from_np_call = f(x), nf(x)          # np.exp(x) on an NDArray: the same path
    if name in ULP_TOL:
        within_ulp(got, nf(a), ULP_TOL[name])
        within_ulp(from_np_call, nf(a), ULP_TOL[name])
    else:
        same(got, nf(a))
        same(from_np_call, nf(a))
    if name in ("negative", "absolute"):
        dunder = {"negative": "__neg__", "absolute": "__abs__"}[name]
        with Hit("unary", dtype, 1):
            same(getattr(x, dunder)(), nf(a))


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_unary_special_values(dtype):
    v = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30, 88.0, 89.0, 710.0,
                  -104.0, -750.0, 20.0, -20.0], dtype=dtype)
    x = ndws.array(v)
    with np.errstate(all="ignore"):
        for name in EXACT_UNARY:
            same(getattr(ndws, name)(x), getattr(np, name)(v))
        for name in LIBM_UNARY:
            within_ulp(getattr(ndws, name)(x), getattr(np, name)(v), ULP_TOL[name])


def _native_f32(name, v):
    """ndws' float32 exp/tanh of v in native calls of at most 32 elements (larger calls go to
    NumPy's loops)."""
    f = getattr(ndws, name)
    out = np.empty_like(v)
    for i in range(0, v.size, 32):
        out[i:i + 32] = f(ndws.array(v[i:i + 32])).numpy()
    return out


def test_float32_exp_tanh_special_values_exact():
    inf, nan, tiny = np.inf, np.nan, np.float32(1e-45)
    cases = {
        "exp": ([nan, inf, -inf, 0.0, -0.0, 1e-30, -1e-30, 88.8, 100.0, 1e30, -104.0, -110.0,
                 -1e30, tiny],
                [nan, inf, 0.0, 1.0, 1.0, 1.0, 1.0, inf, inf, inf, 0.0, 0.0, 0.0, 1.0]),
        "tanh": ([nan, inf, -inf, 0.0, -0.0, 1e-30, -1e-30, tiny, -tiny, 9.1, 20.0, -20.0,
                  1e30, -3e38],
                 [nan, 1.0, -1.0, 0.0, -0.0, 1e-30, -1e-30, tiny, -tiny, 1.0, 1.0, -1.0, 1.0,
                  -1.0]),
    }
    for name, (v, expected) in cases.items():
        v = np.array(v, np.float32)
        with np.errstate(all="ignore"), Hit("unary", np.float32, 1):
            got = getattr(ndws, name)(ndws.array(v))
        same(got, np.array(expected, np.float32))
    # the smallest results of exp are subnormals, scaled like NumPy's
    v = np.array([-87.0, -88.0, -95.0, -100.0, -103.0, -103.9], np.float32)
    with np.errstate(under="ignore"):
        within_ulp(ndws.exp(ndws.array(v)), np.exp(v), ULP_TOL["exp"])


def test_float32_exp_tanh_floating_point_flags():
    quiet = {"exp": [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 1e-45, 88.7, -87.0],
             "tanh": [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 1e-45, 0.625, 20.0, 3e38]}
    for name, v in quiet.items():
        v = np.array(v, np.float32)
        with np.errstate(all="raise"), Hit("unary", np.float32, 1):
            getattr(ndws, name)(ndws.array(v))      # raises nothing (no invalid on NaN)
    # overflow warns by default; underflow (NumPy ignores it by default) only raises
    for v in ([88.8], [100.0, 1.0], [3.4e38], [-100.0], [-110.0, 0.0]):
        a = np.array(v, np.float32)
        x = ndws.array(a)
        expected = _warnings_of(lambda: np.exp(a))
        assert bool(expected) == (v[0] > 0), v
        assert _warnings_of(lambda: ndws.exp(x)) == expected
        with np.errstate(all="raise"):
            with pytest.raises(FloatingPointError) as np_info:
                np.exp(a)
            with pytest.raises(FloatingPointError) as nd_info:
                ndws.exp(x)
        assert str(nd_info.value) == str(np_info.value)


@pytest.mark.parametrize("name", ["exp", "tanh"])
def test_float32_exp_tanh_dense_ulp_sweep(name):
    v = np.concatenate([np.linspace(-100, 100, 640_000, dtype=np.float32),
                        np.linspace(-1, 1, 160_000, dtype=np.float32)])
    with np.errstate(all="ignore"):
        got = _native_f32(name, v).astype(np.float64)
        ref = getattr(np, name)(v.astype(np.float64))
    fin = np.abs(ref) <= np.finfo(np.float32).max
    np.testing.assert_array_equal(got[~fin], np.inf)
    ulp = np.spacing(np.abs(ref[fin]).astype(np.float32)).astype(np.float64)
    err = np.abs(got[fin] - ref[fin]) / ulp
    assert err.max() <= F32_TRUE_ULP[name], (err.max(), v[fin][err.argmax()])


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_nan_inf_and_signed_zeros_in_maximum_minimum(dtype):
    a = np.array([0.0, -0.0, np.nan, 1.0, np.nan, np.inf, -np.inf, 2.0], dtype)
    b = np.array([-0.0, 0.0, 1.0, np.nan, np.nan, np.nan, 5.0, -np.inf], dtype)
    x, y = ndws.array(a), ndws.array(b)
    with Hit("binary", dtype, 6):
        for name in ("maximum", "minimum", "add", "subtract", "multiply", "divide"):
            with np.errstate(all="ignore"):
                same(getattr(ndws, name)(x, y), BINARY[name](a, b))


def _warnings_of(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return sorted((w.category.__name__, str(w.message)) for w in caught)


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_floating_point_errors_are_numpys(dtype):
    inf_a = np.array([np.inf, 1.0, 0.0], dtype)
    big = np.array([np.finfo(dtype).max, 1.0], dtype)
    cases = [
        (lambda v: v - v, [inf_a]),             # inf - inf: invalid in subtract
        (lambda v: np.divide(1.0, v), [inf_a]),  # 1/0: divide by zero
        (lambda v: v * v, [big]),               # overflow in multiply
        (lambda v: np.sqrt(-v), [inf_a]),       # invalid in sqrt
        (lambda v: np.log(v), [inf_a]),         # divide by zero in log
        (lambda v: np.exp(v), [big]),           # overflow in exp
        (lambda v: np.square(v), [big]),
    ]
    for fn, (arr,) in cases:
        expected = _warnings_of(lambda: fn(arr))
        assert expected, fn
        x = ndws.array(arr)
        assert _warnings_of(lambda: fn(x)) == expected
        with np.errstate(all="raise"):
            with pytest.raises(FloatingPointError) as np_info:
                fn(arr)
            with pytest.raises(FloatingPointError) as nd_info:
                fn(x)
        assert str(nd_info.value) == str(np_info.value)


def test_errstate_raise_rolls_back_the_result():
    a = ndws.array(np.array([1.0, 0.0]), detached=True)
    with ndws.workspace("FASTPATH_RB") as ws:
        before = (ws.this_cycle_allocations, ws.primary_offset)
        with np.errstate(divide="raise"):
            with Hit("binary", np.float64, 1):
                with pytest.raises(FloatingPointError, match="divide by zero"):
                    ndws.divide(1.0, a)
            with pytest.raises(FloatingPointError):
                ndws.log(a)
        assert (ws.this_cycle_allocations, ws.primary_offset) == before
        # a failed reduction (bad out=) leaves it too
        with pytest.raises(ValueError):
            a.sum(axis=0, out=ndws.empty((3,), "float64", detached=True))
        assert (ws.this_cycle_allocations, ws.primary_offset) == before


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_empty_operands(dtype):
    for sa, sb in [((0,), (0,)), ((3, 0), (0,)), ((0, 4), (4,)), ((0, 4), (0, 1)),
                   ((0,), ())]:
        a = np.ones(sa, dtype)
        b = np.ones(sb, dtype)
        same(ndws.add(ndws.array(a), ndws.array(b)), a + b)
        same(ndws.exp(ndws.array(a)), np.exp(a))
    same(ndws.array(np.ones((0,), dtype)) * 2.0, np.ones((0,), dtype) * 2.0)


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_views_fall_back_correctly(rng, dtype):
    a = data(rng, (9, 8), dtype)
    b = data(rng, (9, 8), dtype, positive=True)
    x, y = ndws.array(a), ndws.array(b)
    with Hit("binary", dtype, 0), Hit("unary", dtype, 0):
        same(ndws.add(x[::2], y[::2]), a[::2] + b[::2])
        same(x[::-1] * y[::-1], a[::-1] * b[::-1])
        same(ndws.maximum(x.T, y.T), np.maximum(a.T, b.T))
        same(x[:, ::-1] - 1.0, a[:, ::-1] - 1.0)
        same(ndws.sqrt(y[::-2]), np.sqrt(b[::-2]))
        same(-x[:, 1:5], -a[:, 1:5])
        same(ndws.add(x, y[:, 2:3]), np.add(a, b[:, 2:3]))           # non-contiguous column
        same(ndws.add(x[:, :1], y[0]), np.add(a[:, :1], b[0]))        # (m,1) op (n,): outer
    # mixed dtypes and integer arrays take NumPy's promotion
    same(x + ndws.array(b.astype(np.float64 if dtype == np.float32 else np.float32)),
         a + b.astype(np.float64 if dtype == np.float32 else np.float32))
    same(x * ndws.array(np.arange(8, dtype=np.int32)), a * np.arange(8, dtype=np.int32))
    # keywords other than out= take the NumPy path
    same(ndws.add(x, y, dtype=np.float64), np.add(a, b, dtype=np.float64))
    w = b > 0.5
    o = ndws.zeros_like(x)
    ndws.multiply(x, y, out=o, where=ndws.array(w))
    expected = np.zeros_like(a)
    np.multiply(a, b, out=expected, where=w)
    same(o, expected)


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
@pytest.mark.parametrize("name", list(BINARY))
def test_out_aliasing_inputs(rng, name, dtype):
    a = data(rng, (7, 65), dtype)
    b = data(rng, (7, 65), dtype, positive=True)
    f, nf = getattr(ndws, name), BINARY[name]
    with Hit("binary", dtype, 5):
        x, y = ndws.array(a), ndws.array(b)
        assert f(x, y, out=x) is x
        same(x, nf(a, b))
        x, y = ndws.array(a), ndws.array(b)
        assert f(x, y, out=y) is y
        same(y, nf(a, b))
        x = ndws.array(a)
        assert f(x, x, out=x) is x
        same(x, nf(a, a))
        x, r = ndws.array(a), ndws.array(b[0])
        assert f(x, r, out=x) is x                # row broadcast into the big operand
        same(x, nf(a, b[0]))
        o = ndws.empty((7, 65), dtype)
        assert f(ndws.array(a), 2.0, out=o) is o
        same(o, nf(a, 2.0))
    # partial overlap: NumPy's copy-first semantics through the fallback
    e = np.arange(10.0, dtype=dtype)
    v = ndws.array(e)
    with Hit("binary", dtype, 0):
        f(v[:-1], v[1:], out=v[1:])
    nf(e[:-1], e[1:], out=e[1:])
    same(v, e)


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_inplace_operators(rng, dtype):
    a = data(rng, (5, 65), dtype)
    b = data(rng, (5, 65), dtype, positive=True)
    x, y, r, c = ndws.array(a), ndws.array(b), ndws.array(b[1]), ndws.array(b[:, :1])
    e = a.copy()
    with Hit("binary", dtype, 8):
        x += y
        e += b
        x -= 2
        e -= 2
        x *= r
        e *= b[1]
        x /= c
        e /= b[:, :1]
        x += 0.1
        e += 0.1
        x *= x
        e *= e
        x -= y
        e -= b
        x /= 3.0
        e /= 3.0
    same(x, e)
    # in place with a wider operand: same_kind casting, NumPy's path
    x64 = ndws.array(b.astype(np.float64))
    if dtype == np.float32:
        x += x64
        e += b.astype(np.float64)
        same(x, e)
    # unary into out= (aliasing the input)
    z = ndws.array(b)
    with Hit("unary", dtype, 2):
        assert ndws.sqrt(z, out=z) is z
        assert ndws.negative(z, out=z) is z
    same(z, -np.sqrt(b))


def test_read_only_out_and_bad_out_fall_back_to_numpys_errors():
    ro = ndws.from_numpy(np.ones(4))
    ro_np = np.ones(4)
    ro_np.setflags(write=False)
    ro = ndws.from_numpy(ro_np)
    x = ndws.ones(4)
    with pytest.raises(ValueError, match="read-only"):
        ndws.add(x, x, out=ro)
    with pytest.raises(ValueError):
        ndws.add(x, x, out=ndws.ones(5))
    with pytest.raises(ValueError):
        ndws.add(x, ndws.ones(3))            # NumPy's broadcast error


def test_np_ufunc_calls_and_ufunc_call_use_the_fast_path(rng):
    a = data(rng, (6, 7), np.float32)
    x = ndws.array(a)
    with Hit("binary", np.float32, 3), Hit("unary", np.float32, 1):
        same(np.add(x, x), a + a)
        same(np.maximum(x, 0.5), np.maximum(a, 0.5))
        same(_ufuncs.ufunc_call(np.multiply, (x, x)), a * a)
        same(np.negative(x), -a)


# -- placement, validity, threads, the GIL -----------------------------------------------------

def test_results_are_placed_in_the_current_workspace(rng):
    a = data(rng, (4, 8), np.float32)
    x = ndws.array(a, detached=True)
    with ndws.workspace("FASTPATH_PLACE") as ws:
        before = ws.this_cycle_allocations
        results = [x + x, ndws.exp(x), x.sum(), x.sum(axis=0), ndws.argmax(x, axis=1), -x,
                   x * 2.0, ndws.exp(ndws.array(np.ones(100, np.float32)))]
        for res in results:
            assert res.workspace_id == "FASTPATH_PLACE"
        assert ws.this_cycle_allocations > before
    assert (x + x).workspace_id is None       # no workspace: detached
    assert x.sum().workspace_id is None


def _stale_pair():
    keep = ndws.ones((3, 4), dtype="float32", detached=True)
    with ndws.workspace("FASTPATH_STALE"):
        stale = ndws.ones((3, 4), dtype="float32")
    return stale, keep


def test_stale_arrays_raise_the_generic_paths_error():
    stale, keep = _stale_pair()
    cases = [
        # (fast call, the same call forced onto the generic NumPy path)
        (lambda: ndws.add(stale, keep), lambda: ndws.add(stale, keep, casting="unsafe")),
        (lambda: ndws.add(keep, stale), lambda: ndws.add(keep, stale, casting="unsafe")),
        (lambda: stale + keep, lambda: _ufuncs.ufunc_call(np.add, (stale, keep), casting="unsafe")),
        (lambda: keep * stale, lambda: _ufuncs.ufunc_call(np.multiply, (keep, stale),
                                                        casting="unsafe")),
        (lambda: ndws.exp(stale), lambda: ndws.exp(stale, casting="unsafe")),
        (lambda: -stale, lambda: ndws.negative(stale, casting="unsafe")),
        (lambda: ndws.add(keep, keep, out=stale), lambda: ndws.add(keep, keep, out=stale,
                                                                  casting="unsafe")),
        (lambda: stale.sum(), lambda: stale.sum(axis=(0, 1))),
        (lambda: ndws.max(stale, axis=1), lambda: ndws.max(stale, axis=(1,))),
        (lambda: keep.sum(axis=0, out=stale[0]), lambda: keep.sum(axis=(0,), out=stale[0])),
    ]
    for fast, generic in cases:
        with pytest.raises(ndws.WorkspaceError) as f_info:
            fast()
        with pytest.raises(ndws.WorkspaceError) as g_info:
            generic()
        assert str(f_info.value) == str(g_info.value)
        assert f_info.value.kind == "leaked"
    with pytest.raises(ndws.WorkspaceError, match=r"Op \[add\] x2 argument"):
        keep + stale
    with pytest.raises(ndws.WorkspaceError, match=r"Op \[subtract\] x1 argument"):
        keep.__rsub__(stale)


def test_unsupported_operand_type_still_returns_notimplemented():
    stale, keep = _stale_pair()
    with pytest.raises(TypeError):
        keep + "text"
    with pytest.raises(TypeError):
        "text" + stale          # the operand is rejected before the stale array is looked at


def test_grains_are_set_by_name_and_an_unknown_name_changes_nothing():
    before = _threads._set_grains()
    assert set(before) == {"elementwise", "reduce", "gemm_f32", "gemm_f64", "nn_cheap",
                           "nn_transc", "nn_update", "eval_rows"}
    with pytest.raises(TypeError, match=r"^_set_grains: unknown grain 'bogus'; expected one of "
                                        r"elementwise, reduce, "):
        _threads._set_grains(elementwise=5, bogus=1)
    try:
        assert _threads._set_grains() == before          # checked before anything was set
        assert _threads._set_grains(reduce=7)["reduce"] == before["reduce"]
        assert _threads._set_grains()["reduce"] == 7
    finally:
        _threads._set_grains(**before)


def test_one_and_two_threads_give_identical_bits(rng):
    grains = _threads._set_grains()
    e_grain, r_grain = grains["elementwise"], grains["reduce"]
    n = 1 << 19
    assert n >= 2 * max(e_grain, r_grain), "inputs too small for 2 threads"
    a = rng.standard_normal(n).astype(np.float32)
    a[n - 5] = np.nan
    b = rng.standard_normal(n).astype(np.float32)
    m2 = rng.standard_normal((300, n // 256)).astype(np.float32)
    x, y, x2 = ndws.array(a), ndws.array(b), ndws.array(m2)
    x2f = ndws.array(m2.astype(np.float64))
    xf = ndws.array(b.astype(np.float64))
    calls = [
        lambda: x + y, lambda: ndws.maximum(x, y), lambda: x * 0.5, lambda: ndws.sqrt(y * y),
        lambda: ndws.tanh(x[:32]),
        lambda: y.sum(), lambda: xf.sum(), lambda: y.var(), lambda: xf.std(), lambda: y.mean(),
        lambda: x.max(), lambda: y.argmax(), lambda: x.argmin(), lambda: y.min(),
        lambda: x2.sum(axis=0), lambda: x2.sum(axis=1), lambda: x2.var(axis=0),
        lambda: x2.argmax(axis=0), lambda: x2.max(axis=1), lambda: x2.mean(axis=0),
        lambda: x2f.sum(axis=0), lambda: x2f.std(axis=0), lambda: x2f.argmin(axis=1),
        lambda: ndws.divide(x2f, x2f[0]), lambda: xf.max(), lambda: xf.argmax(),
    ]
    for call in calls:
        with ndws.num_threads(1):
            one = call().numpy()
        with ndws.num_threads(2):
            two = call().numpy()
        assert one.dtype == two.dtype and one.tobytes() == two.tobytes()
    # the parallel flat sum is NumPy's pairwise tree: the same bits as NumPy
    with ndws.num_threads(2):
        same(y.sum(), np.sum(b))
        same(xf.sum(), np.sum(b.astype(np.float64)))
        same(y.var(), np.var(b))
        assert x.argmax().item() == n - 5      # the NaN, found in a later chunk


def test_kernels_release_the_gil():
    # A Python thread counts while the main thread runs a long native kernel. With a long
    # switch interval the main thread never hands the GIL over by itself between the two
    # reads of the counter, so the count can only move if the kernel released the GIL.
    n = 1 << 22
    x = ndws.array(np.random.default_rng(0).random(n), detached=True)
    out = ndws.empty(n, "float64", detached=True)
    count = [0]
    stop = threading.Event()
    running = threading.Event()

    def counter():
        running.set()
        while not stop.is_set():
            count[0] += 1
            time.sleep(0)   # hands the GIL back at once whenever the main thread wants it

    old = sys.getswitchinterval()
    t = threading.Thread(target=counter)
    try:
        t.start()
        running.wait()
        sys.setswitchinterval(30.0)
        progressed = []
        with ndws.num_threads(1):
            for call in (lambda: ndws.sqrt(x, out=out), lambda: x.var(),
                         lambda: ndws.add(x, x, out=out)):
                for _ in range(5):
                    before = count[0]
                    call()
                    if count[0] > before:
                        progressed.append(True)
                        break
                else:
                    progressed.append(False)
        assert all(progressed), progressed
    finally:
        sys.setswitchinterval(old)
        stop.set()
        t.join()


# -- reductions -----------------------------------------------------------------------------------

def _reduce(name, arr, **kw):
    return getattr(np, name)(arr, **kw)


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_match_numpy_exactly(rng, name, dtype):
    shapes = [(1,), (7,), (65,), (257,), (7, 65), (65, 7), (3, 5, 7), (128, 3), (2, 1, 9)]
    f = getattr(ndws, name)
    for shape in shapes:
        a = data(rng, shape, dtype)
        x = ndws.array(a)
        axes = [None] + list(range(-len(shape), len(shape)))
        for axis in axes:
            for keepdims in (False, True):
                with Hit("reduce", dtype, 2):
                    got = f(x, axis=axis, keepdims=keepdims)
                    method = getattr(x, name)(axis=axis, keepdims=keepdims)
                exp = np.asarray(_reduce(name, a, axis=axis, keepdims=keepdims))
                same(got, exp)
                same(method, exp)


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_reductions_out_dtype_and_ddof(rng, dtype):
    a = data(rng, (9, 65), dtype)
    x = ndws.array(a)
    with Hit("reduce", dtype, 6):
        o = ndws.empty((65,), dtype)
        assert x.sum(axis=0, out=o) is o
        same(o, a.sum(axis=0))
        oi = ndws.empty((9, 1), np.int64)
        assert ndws.argmax(x, axis=1, out=oi, keepdims=True) is oi
        same(oi, np.argmax(a, axis=1, keepdims=True))
        same(x.sum(dtype=dtype), a.sum(dtype=dtype))                # trivial dtype=
        same(x.var(ddof=1), a.var(ddof=1))
        same(ndws.std(x, axis=1, ddof=2), np.std(a, axis=1, ddof=2))
        o0 = ndws.empty((), dtype)
        assert ndws.mean(x, out=o0) is o0
        same(o0, a.mean())
    with Hit("reduce", dtype, 0):
        other = np.float64 if dtype == np.float32 else np.float32
        same(x.sum(dtype=other), a.sum(dtype=other))                # a real dtype change
        same(x.sum(axis=(0, 1)), a.sum(axis=(0, 1)))
        same(x[::2].sum(axis=0), a[::2].sum(axis=0))                # not contiguous
        same(x.T.max(axis=0), a.T.max(axis=0))
        same(ndws.var(x, ddof=0.5), np.var(a, ddof=0.5))
        with pytest.raises(np.exceptions.AxisError):
            x.sum(axis=2)
        with pytest.raises(ValueError):
            x.sum(axis=0, out=ndws.empty((9,), dtype))              # NumPy's shape error


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_long_non_last_axis_sums_are_accurate(rng, dtype):
    # more than 128 rows: blocks of rows combined pairwise (NumPy adds row after row)
    for shape, axis in [((1000, 5), 0), ((3, 777, 4), 1), ((129, 2), 0)]:
        a = (data(rng, shape, dtype) + 3).astype(dtype)
        x = ndws.array(a)
        exact = np.sum(a.astype(np.longdouble), axis=axis)
        scale = np.sum(np.abs(a.astype(np.float64)), axis=axis)
        tol = SUM_RTOL[np.dtype(dtype)] * scale
        with Hit("reduce", dtype, 4):
            for got in (x.sum(axis=axis), x.mean(axis=axis) * shape[axis]):
                err = np.abs(got.numpy().astype(np.longdouble) - exact)
                assert np.all(err <= tol), (shape, err.max(), tol.max())
            var = x.var(axis=axis).numpy()
            np.testing.assert_allclose(var, np.var(a.astype(np.float64), axis=axis),
                                       rtol=SUM_RTOL[np.dtype(dtype)] * 10)
            same(x.max(axis=axis), np.max(a, axis=axis))


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_reductions_nan_and_inf(dtype):
    a = np.array([[1.0, np.nan, 3.0, np.nan], [np.inf, 2.0, -np.inf, 0.5],
                  [-1.0, -2.0, -3.0, np.nan]], dtype)
    x = ndws.array(a)
    for name in ("max", "min", "argmax", "argmin"):
        for axis in (None, 0, 1):
            with Hit("reduce", dtype, 1):
                got = getattr(ndws, name)(x, axis=axis)
            same(got, getattr(np, name)(a, axis=axis))
    # sums with inf - inf: NumPy's value and warning ("invalid value encountered in reduce")
    for name in ("sum", "mean", "var", "std"):
        for axis in (None, 0, 1):
            expected = _warnings_of(lambda: getattr(np, name)(a, axis=axis))
            assert _warnings_of(lambda: getattr(ndws, name)(x, axis=axis)) == expected
            with np.errstate(all="ignore"):
                same(getattr(ndws, name)(x, axis=axis), getattr(np, name)(a, axis=axis))
    b = np.array([np.nan, 1.0, 2.0], dtype)
    same(ndws.sum(ndws.array(b)), np.sum(b))       # a NaN alone raises no flag: native
    with Hit("reduce", dtype, 1):
        same(ndws.argmax(ndws.array(b[::-1].copy())), np.argmax(b[::-1]))


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_extremes_of_long_rows_follow_numpys_fold(rng, dtype):
    # SIMD lanes and thread chunks still give NumPy's values: NaN wherever it sits, argmax the
    # first extreme / first NaN. (Which of two equal zeros, 0.0 or -0.0, is "the" max is left
    # to the implementation: NumPy's own answer changes with length and alignment, so only
    # the value is compared with NumPy, and the bits between thread counts.)
    for n in (31, 32, 33, 100, 1000, 1 << 18):
        a = (rng.standard_normal(n) - 10).astype(dtype)
        variants = [a]
        for first, last in ((-0.0, 0.0), (0.0, -0.0)):
            z = a.copy()
            z[5], z[n - 3] = first, last
            variants.append(z)
        for pos in (0, 7, n // 2, n - 1):
            q = a.copy()
            q[pos] = np.nan
            variants.append(q)
        for v in variants:
            x = ndws.array(v)
            m = ndws.array(np.stack([v, v[::-1]]))
            bits = {}
            for threads in (1, 2):
                with ndws.num_threads(threads), Hit("reduce", dtype, 8):
                    for name in ("max", "min", "argmax", "argmin"):
                        for axis, arr, ref in ((None, x, v), (1, m, m.numpy())):
                            got = getattr(arr, name)(axis=axis).numpy()
                            exp = np.asarray(getattr(np, name)(ref, axis=axis))
                            assert got.dtype == exp.dtype and got.shape == exp.shape
                            np.testing.assert_array_equal(got, exp)
                            bits.setdefault((name, axis), set()).add(got.tobytes())
            assert all(len(b) == 1 for b in bits.values()), bits


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_empty_reductions_keep_numpys_rules(dtype):
    e = np.ones((0, 3), dtype)
    x = ndws.array(e)
    same(x.sum(), e.sum())
    same(x.sum(axis=0), e.sum(axis=0))
    same(x.max(axis=1), e.max(axis=1))
    for name in ("max", "min", "argmax"):
        with pytest.raises(ValueError) as np_info:
            getattr(np, name)(e)
        with pytest.raises(ValueError) as nd_info:
            getattr(ndws, name)(x)
        assert str(nd_info.value) == str(np_info.value)
    # the mean of nothing: NumPy's "Mean of empty slice" warning first, as the NumPy path
    # (unchanged by the fast paths) gives it
    expected = _warnings_of(lambda: np.mean(e))
    got = _warnings_of(lambda: ndws.mean(x))
    assert ("RuntimeWarning", "Mean of empty slice") in expected
    assert ("RuntimeWarning", "Mean of empty slice") in got
    assert {w[0] for w in got} == {"RuntimeWarning"}
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same(ndws.mean(x), np.mean(e))
        same(ndws.var(x, axis=0), np.var(e, axis=0))
