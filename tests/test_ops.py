"""Operators, reductions and the ndws.ops functions, with NumPy as the oracle for every value,
dtype, shape and error; placement of every result (docs/architecture.md's invariant 3) and failed
operations leaving the workspace as it was."""
from __future__ import annotations

import operator
import re

import numpy as np
import pytest

import ndws
from conftest import assert_matches

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]
DT_IDS = [np.dtype(d).name for d in DTYPES]


def sample(rng: np.random.Generator, shape, dtype, low=-4.0, high=4.0) -> np.ndarray:
    """Random NumPy data of `dtype` (both signs for signed types)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(int(low) * 2 - 1, int(high) * 2 + 2, size=shape).astype(dt)
    return rng.uniform(low, high, size=shape).astype(dt)


def _np_equiv(x):
    """The NumPy counterpart of an operand: NDArrays become NumPy copies."""
    if isinstance(x, ndws.NDArray):
        return x.numpy()
    if isinstance(x, (list, tuple)):
        return type(x)(_np_equiv(v) for v in x)
    return x


def check(np_call, nd_call, *, result_type=ndws.NDArray):
    """NumPy and ndws must agree: the same exception (exact type and message), or results equal
    in shape, dtype and values. NumPy scalar results correspond to 0-d NDArrays."""
    with np.errstate(all="ignore"):
        try:
            expected = np_call()
        except Exception as exc:  # NumPy's error is the reference
            with pytest.raises(Exception) as info:
                nd_call()
            assert type(info.value) is type(exc), (type(info.value), type(exc), info.value)
            assert str(info.value) == str(exc)
            return None
        got = nd_call()
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            assert isinstance(g, result_type)
            assert_matches(g, np.asarray(e))
        return got
    assert isinstance(got, result_type), type(got)
    assert_matches(got, np.asarray(expected))
    return got


def alloc(ws) -> int:
    return ws.this_cycle_allocations


# ------------------------------------------------------------------------------------------------
# binary operators


BINOPS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "&": operator.and_,
    "|": operator.or_, "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift,
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}
NONNEG_RHS = {"**", "<<", ">>"}


def operands(rng, sym, dta, dtb, sa=(3, 4), sb=(3, 4)):
    a = sample(rng, sa, dta)
    b = sample(rng, sb, dtb)
    if sym in NONNEG_RHS and b.dtype.kind in "iuf":
        b = (np.abs(b) % 4).astype(b.dtype)
    return a, b


@pytest.mark.parametrize("sym", list(BINOPS))
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_binary_operator_same_dtype(rng, sym, dtype):
    op = BINOPS[sym]
    a, b = operands(rng, sym, dtype, dtype)
    x, y = ndws.array(a), ndws.array(b)
    check(lambda: op(a, b), lambda: op(x, y))
    # NumPy on either side gives an NDArray too
    check(lambda: op(a, b), lambda: op(x, b))
    check(lambda: op(a, b), lambda: op(a, y))


@pytest.mark.parametrize("sym", ["+", "*", "/", "//", "<", "-"])
@pytest.mark.parametrize("dta", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("dtb", DTYPES, ids=DT_IDS)
def test_binary_operator_promotion(rng, sym, dta, dtb):
    op = BINOPS[sym]
    a, b = operands(rng, sym, dta, dtb)
    check(lambda: op(a, b), lambda: op(ndws.array(a), ndws.array(b)))


SCALARS = [1, 2.5, True, -3, 0.5, np.float64(1.5), np.float32(2.0), np.int32(3), np.int64(-2),
           np.bool_(True)]


@pytest.mark.parametrize("scalar", SCALARS, ids=lambda s: f"{type(s).__name__}({s})")
@pytest.mark.parametrize("sym", ["+", "-", "*", "/", "//", "%", "**", "<", "==", "&"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_python_and_numpy_scalars_nep50(rng, scalar, sym, dtype):
    op = BINOPS[sym]
    a = sample(rng, (5,), dtype)
    if sym == "**":
        a = np.abs(a).astype(dtype) if np.dtype(dtype).kind != "b" else a
    x = ndws.array(a)
    check(lambda: op(a, scalar), lambda: op(x, scalar))
    check(lambda: op(scalar, a), lambda: op(scalar, x))


def test_nep50_weak_python_scalars_keep_array_dtype():
    f32 = ndws.ones(3, np.float32)
    assert (f32 + 1.0).dtype == np.float32
    assert (2.0 * f32).dtype == np.float32
    assert (f32 + np.float64(1.0)).dtype == np.float64
    i32 = ndws.ones(3, np.int32)
    assert (i32 + 1).dtype == np.int32
    assert (i32 + 1.5).dtype == np.float64
    assert (ndws.ones(3, bool) + 1).dtype == np.int64
    with pytest.raises(OverflowError) as np_info:
        np.ones(3, np.int32) + 2**40
    with pytest.raises(OverflowError) as info:
        i32 + 2**40
    assert str(info.value) == str(np_info.value)


@pytest.mark.parametrize("sa, sb", [
    ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((5, 1, 3), (2, 1)), ((), (3,)), ((0, 3), (1, 3)),
    ((1,), (2, 2)), ((4, 1, 1), (1, 3, 1)), ((2, 0), (2, 1)),
    ((3,), (4,)), ((2, 3), (3, 2)), ((2, 3, 4), (3, 1, 2)),
], ids=str)
@pytest.mark.parametrize("sym", ["+", "*", "<", "&"])
def test_broadcasting_and_its_error(rng, sa, sb, sym):
    op = BINOPS[sym]
    a = sample(rng, sa, np.int64)
    b = sample(rng, sb, np.int64)
    check(lambda: op(a, b), lambda: op(ndws.array(a), ndws.array(b)))
    check(lambda: op(a, b), lambda: op(ndws.array(a), b))


@pytest.mark.parametrize("dtype", [np.float64, np.int32], ids=str)
def test_divmod_builtin(rng, dtype):
    a = sample(rng, (6,), dtype)
    b = (np.abs(sample(rng, (6,), dtype)) + 1).astype(dtype)
    check(lambda: divmod(a, b), lambda: divmod(ndws.array(a), ndws.array(b)))
    check(lambda: divmod(a, 3), lambda: divmod(ndws.array(a), 3))
    check(lambda: divmod(7, b), lambda: divmod(7, ndws.array(b)))
    check(lambda: np.divmod(a, b), lambda: np.divmod(ndws.array(a), ndws.array(b)))


def test_ndarray_numpy_mix_returns_ndarray():
    e = np.arange(6.0).reshape(2, 3)
    a = ndws.array(e)
    for r in (e + a, a + e, e - a, e * a, e / (a + 1), e < a, e @ a.T, a @ e.T, e ** a,
              e % (a + 1), e // (a + 1)):
        assert isinstance(r, ndws.NDArray)
    assert_matches(e - a, e - e)
    assert_matches(e @ a.T, e @ e.T)


def test_comparison_with_none_is_elementwise():
    e = np.arange(3.0)
    a = ndws.array(e)
    check(lambda: e == None, lambda: a == None)  # noqa: E711
    check(lambda: e != None, lambda: a != None)  # noqa: E711


def test_unsupported_operands_raise_type_error():
    a = ndws.ones(3)
    for bad in (None, "x", object()):
        with pytest.raises(TypeError):
            a + bad
        with pytest.raises(TypeError):
            bad * a
    with pytest.raises(TypeError):
        a < "x"


def test_integer_negative_power_error_is_numpys():
    check(lambda: np.array([2, 3]) ** -1, lambda: ndws.array([2, 3]) ** -1)
    check(lambda: np.array([2, 3]) ** np.array([1, -1]),
          lambda: ndws.array([2, 3]) ** ndws.array([1, -1]))


def _warnings_of(fn):
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return sorted((w.category.__name__, str(w.message)) for w in caught)


def test_division_by_zero_warns_like_numpy():
    e = np.array([1.0, 0.0])
    a = ndws.array(e)
    expected = _warnings_of(lambda: e / 0.0)
    assert len(expected) == 2
    assert _warnings_of(lambda: a / 0.0) == expected
    assert _warnings_of(lambda: ndws.divide(a, 0.0)) == expected
    with np.errstate(all="raise"):
        with pytest.raises(FloatingPointError) as np_info:
            e / 0.0
        with pytest.raises(FloatingPointError) as info:
            a / 0.0
        assert str(info.value) == str(np_info.value)


# ------------------------------------------------------------------------------------------------
# unary operators


UNARY = {"-": operator.neg, "+": operator.pos, "abs": abs, "~": operator.invert}


@pytest.mark.parametrize("sym", list(UNARY))
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_unary_operators(rng, sym, dtype):
    op = UNARY[sym]
    a = sample(rng, (3, 4), dtype)
    x = ndws.array(a)
    check(lambda: op(a), lambda: op(x))
    check(lambda: op(a[::-1, ::2]), lambda: op(x[::-1, ::2]))


def test_unary_result_is_new_array():
    a = ndws.arange(3.0)
    b = +a
    assert b is not a
    b[0] = 9.0
    assert a[0] == 0.0


# ------------------------------------------------------------------------------------------------
# in-place operators


IOPS = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "&=": operator.iand,
    "|=": operator.ior, "^=": operator.ixor, "<<=": operator.ilshift, ">>=": operator.irshift,
}


def check_inplace(op, a_np, b, b_nd=None):
    """`op` applied in place to an NDArray copy of `a_np` and to `a_np`: same error, or the
    same values in the same object."""
    x = ndws.array(a_np)
    keep = a_np.copy()
    with np.errstate(all="ignore"):
        try:
            expected = op(a_np, b)
        except Exception as exc:
            with pytest.raises(Exception) as info:
                op(x, b if b_nd is None else b_nd)
            assert type(info.value) is type(exc), (type(info.value), type(exc))
            assert str(info.value) == str(exc)
            assert_matches(x, keep)  # nothing written
            return
        r = op(x, b if b_nd is None else b_nd)
    assert r is x
    assert_matches(x, expected)


@pytest.mark.parametrize("sym", list(IOPS))
@pytest.mark.parametrize("dta", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("dtb", DTYPES, ids=DT_IDS)
def test_inplace_operators(rng, sym, dta, dtb):
    op = IOPS[sym]
    a, b = operands(rng, sym.rstrip("="), dta, dtb)
    check_inplace(op, a, b, ndws.array(b))


@pytest.mark.parametrize("sym", list(IOPS))
@pytest.mark.parametrize("scalar", [1, 1.5, True, np.float32(2.0)], ids=repr)
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_inplace_with_scalars(rng, sym, scalar, dtype):
    a = sample(rng, (4,), dtype)
    check_inplace(IOPS[sym], a, scalar)


def test_inplace_casting_error_is_numpys():
    a = ndws.array([1, 2, 3], dtype=np.int32)
    with pytest.raises(np._core._exceptions._UFuncOutputCastingError) as info:
        a += 1.5
    assert isinstance(info.value, TypeError)
    assert str(info.value) == ("Cannot cast ufunc 'add' output from dtype('float64') to "
                               "dtype('int32') with casting rule 'same_kind'")
    assert a.tolist() == [1, 2, 3]
    with pytest.raises(TypeError):
        a /= 2


def test_inplace_broadcast_into_smaller_target_fails():
    e = np.zeros(3)
    a = ndws.zeros(3)
    with pytest.raises(ValueError) as np_info:
        e += np.ones((2, 3))
    with pytest.raises(ValueError) as info:
        a += ndws.ones((2, 3))
    assert str(info.value) == str(np_info.value)


def test_inplace_on_view_writes_base_and_allocates_nothing():
    e = np.arange(12.0).reshape(3, 4)
    with ndws.workspace("IP") as ws:
        a = ndws.array(e)
        before = alloc(ws)
        v = a[:, 1::2]
        v *= 10.0
        v += ndws.array([1.0, 2.0], detached=True)
        assert alloc(ws) == before
        expected = a.numpy()
    e[:, 1::2] *= 10.0
    e[:, 1::2] += [1.0, 2.0]
    np.testing.assert_array_equal(expected, e)
    b = ndws.array(np.arange(12.0).reshape(3, 4))
    w = b[:, 1::2]
    w *= 10.0
    w += ndws.array([1.0, 2.0])
    assert_matches(b, e)


def test_inplace_aliasing_self():
    e = np.arange(5.0)
    a = ndws.array(e)
    a += a
    a *= a[::-1]
    e += e
    e *= e[::-1].copy()
    assert_matches(a, e)


# ------------------------------------------------------------------------------------------------
# matmul / dot


MATMUL_SHAPES = [
    ((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4, 5)),
    ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4,)), ((4,), (2, 4, 3)), ((1, 4), (4, 1)),
    ((0, 4), (4, 3)), ((3, 0), (0, 2)),
    ((3, 4), (3, 4)), ((2, 3, 4), (3, 4, 5)), ((4,), (3,)), ((), (3,)), ((3,), ()),
]


@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_matmul_operator(rng, sa, sb, dtype):
    a = sample(rng, sa, dtype)
    b = sample(rng, sb, dtype)
    x, y = ndws.array(a), ndws.array(b)
    check(lambda: a @ b if a.ndim and b.ndim else np.matmul(a, b), lambda: x @ y)
    check(lambda: np.matmul(a, b), lambda: ndws.matmul(x, y))
    check(lambda: np.matmul(a, b), lambda: ndws.matmul(a, y))


@pytest.mark.parametrize("dta, dtb", [(np.int32, np.float32), (np.bool_, np.int64),
                                      (np.float32, np.float64), (np.int32, np.int64)])
def test_matmul_promotion(rng, dta, dtb):
    a = sample(rng, (2, 3), dta)
    b = sample(rng, (3, 2), dtb)
    check(lambda: a @ b, lambda: ndws.array(a) @ ndws.array(b))
    check(lambda: a @ b, lambda: a @ ndws.array(b))


def test_matmul_inplace_square():
    e = np.arange(9.0).reshape(3, 3)
    a = ndws.array(e)
    a @= a
    assert_matches(a, e @ e)


def test_matmul_out():
    e = np.arange(6.0).reshape(2, 3)
    a = ndws.array(e)
    o = ndws.zeros((2, 2))
    assert ndws.matmul(a, a.T, out=o) is o
    assert_matches(o, e @ e.T)
    bad = ndws.zeros((3, 3))
    with pytest.raises(ValueError) as np_info:
        np.matmul(e, e.T, out=np.zeros((3, 3)))
    with pytest.raises(ValueError) as info:
        ndws.matmul(a, a.T, out=bad)
    assert str(info.value) == str(np_info.value)


DOT_SHAPES = [((3, 4), (4, 5)), ((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 2)),
              ((2, 3, 4), (4, 5)), ((2, 3, 4), (5, 4, 2)), ((), (3,)), ((3, 2), ()),
              ((3, 4), (3, 4)), ((4,), (3,)), ((2, 3, 4), (2, 3, 4))]


@pytest.mark.parametrize("sa, sb", DOT_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_dot(rng, sa, sb, dtype):
    a = sample(rng, sa, dtype)
    b = sample(rng, sb, dtype)
    x, y = ndws.array(a), ndws.array(b)
    check(lambda: np.dot(a, b), lambda: ndws.dot(x, y))
    check(lambda: np.dot(a, b), lambda: x.dot(y))
    check(lambda: np.dot(a, b), lambda: ndws.dot(a, y))


def test_dot_mixed_dtypes_and_out():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.linspace(0, 1, 6).reshape(3, 2).astype(np.float32)
    check(lambda: np.dot(a, b), lambda: ndws.dot(ndws.array(a), ndws.array(b)))
    o = ndws.zeros((2, 2))
    assert ndws.dot(ndws.array(a), ndws.array(b).astype(np.float64), out=o) is o
    assert_matches(o, np.dot(a, b.astype(np.float64)))


# ------------------------------------------------------------------------------------------------
# reductions


REDUCTIONS = ["sum", "mean", "prod", "max", "min", "argmax", "argmin", "std", "var", "any",
              "all"]
AXES = [None, 0, 1, -1, -3, (0, 2), (2, 0), (), (0, 1, 2), (-1, 0)]


@pytest.mark.parametrize("keepdims", [False, True], ids=["", "keep"])
@pytest.mark.parametrize("axis", AXES, ids=repr)
@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_reductions(rng, name, axis, keepdims, dtype):
    a = sample(rng, (3, 4, 5), dtype)
    x = ndws.array(a)
    np_f = getattr(np, name)
    check(lambda: np_f(a, axis=axis, keepdims=keepdims),
          lambda: getattr(x, name)(axis=axis, keepdims=keepdims))
    check(lambda: np_f(a, axis=axis, keepdims=keepdims),
          lambda: getattr(ndws, name)(x, axis=axis, keepdims=keepdims))


@pytest.mark.parametrize("name", REDUCTIONS)
def test_full_reduction_is_zero_d_ndarray_in_workspace(rng, name):
    a = sample(rng, (4, 5), np.float64)
    with ndws.workspace("R") as ws:
        x = ndws.array(a)
        before = alloc(ws)
        r = getattr(x, name)()
        assert isinstance(r, ndws.NDArray)
        assert r.shape == () and r.workspace_id == "R"
        assert alloc(ws) - before == ndws.ALIGNMENT  # one aligned slot
        exp = getattr(np, name)(a)
        assert type(r.item()) is type(exp.item())
        if isinstance(exp.item(), float):
            assert r.item() == pytest.approx(exp.item(), rel=1e-12)
        else:
            assert r.item() == exp.item()
    assert getattr(ndws.array(a), name)().workspace_id is None


# std with an integer dtype has its own test (test_std_with_integer_dtype)
RED_DTYPE_CASES = [(n, r) for n in ["sum", "mean", "prod", "std", "var"]
                   for r in (np.float32, np.float64, np.int64, np.int32)
                   if not (n == "std" and np.dtype(r).kind == "i")]


@pytest.mark.parametrize("name, rdtype", RED_DTYPE_CASES,
                         ids=[f"{n}-{np.dtype(r).name}" for n, r in RED_DTYPE_CASES])
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_reduction_dtype_argument(rng, name, rdtype, dtype):
    a = sample(rng, (4, 6), dtype)
    x = ndws.array(a)
    np_f = getattr(np, name)
    for axis in (None, 0, 1):
        check(lambda: np_f(a, axis=axis, dtype=rdtype),
              lambda: getattr(x, name)(axis=axis, dtype=rdtype))


def test_std_with_integer_dtype():
    # NumPy: a full std with an integer dtype is that integer type (its axis forms raise).
    a = np.arange(24.0).reshape(4, 6)
    for dt in (np.int64, np.int32):
        for axis in (None, 0):
            check(lambda: np.std(a, axis=axis, dtype=dt),
                  lambda: ndws.std(ndws.array(a), axis=axis, dtype=dt))


@pytest.mark.parametrize("ddof", [0, 1, 2])
@pytest.mark.parametrize("name", ["std", "var"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=str)
def test_std_var_ddof(rng, name, ddof, dtype):
    a = sample(rng, (5, 3), dtype)
    x = ndws.array(a)
    for axis in (None, 0, -1, (0, 1)):
        check(lambda: getattr(np, name)(a, axis=axis, ddof=ddof),
              lambda: getattr(x, name)(axis=axis, ddof=ddof))
        check(lambda: getattr(np, name)(a, axis=axis, ddof=ddof),
              lambda: getattr(ndws, name)(x, axis=axis, ddof=ddof))


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction_out(rng, name):
    a = sample(rng, (3, 4), np.float64)
    x = ndws.array(a)
    exp = getattr(np, name)(a, axis=0)
    o = ndws.zeros(exp.shape, exp.dtype)
    r = getattr(x, name)(axis=0, out=o)
    assert r is o
    assert_matches(o, exp)
    o2 = ndws.zeros(exp.shape, exp.dtype)
    assert getattr(ndws, name)(x, axis=0, out=o2) is o2
    assert_matches(o2, exp)
    full = getattr(np, name)(a)
    o0 = ndws.zeros((), np.asarray(full).dtype)
    assert getattr(x, name)(out=o0) is o0
    assert_matches(o0, np.asarray(full))
    # keepdims with out
    expk = getattr(np, name)(a, axis=1, keepdims=True)
    ok = ndws.zeros(expk.shape, expk.dtype)
    assert getattr(x, name)(axis=1, keepdims=True, out=ok) is ok
    assert_matches(ok, expk)


@pytest.mark.parametrize("name", ["sum", "max", "mean", "argmax"])
def test_reduction_out_shape_error_is_numpys(name):
    a = np.ones((3, 4))
    x = ndws.array(a)
    with pytest.raises(ValueError) as np_info:
        getattr(np, name)(a, axis=0, out=np.zeros(3))
    with pytest.raises(ValueError) as info:
        getattr(x, name)(axis=0, out=ndws.zeros(3))
    assert str(info.value) == str(np_info.value)


@pytest.mark.parametrize("name", ["max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("shape, axis", [((0,), None), ((0, 3), 0), ((3, 0), 1), ((0, 3), None)],
                         ids=str)
def test_empty_reductions_without_identity(name, shape, axis):
    a = np.zeros(shape)
    check(lambda: getattr(np, name)(a, axis=axis),
          lambda: getattr(ndws.zeros(shape), name)(axis=axis))


@pytest.mark.parametrize("name", ["sum", "prod", "any", "all", "max"])
def test_empty_reductions_with_identity_or_axis(name):
    a = np.zeros((0, 3))
    x = ndws.zeros((0, 3))
    for axis in (0, 1):
        check(lambda: getattr(np, name)(a, axis=axis), lambda: getattr(x, name)(axis=axis))


@pytest.mark.parametrize("axis", [3, -4, (0, 3), (0, 0), (1, -2), 1.0], ids=repr)
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction_bad_axis_error_type(name, axis):
    a = np.ones((2, 3, 4))
    x = ndws.array(a)
    with pytest.raises(Exception) as np_info:
        getattr(np, name)(a, axis=axis)
    with pytest.raises(Exception) as info:
        getattr(x, name)(axis=axis)
    assert type(info.value) is type(np_info.value)


@pytest.mark.parametrize("axis", [3, -4, (0, 3), (0, 0), (1, -2), 1.0], ids=repr)
def test_reduction_bad_axis_message_is_numpys(axis):
    a = np.ones((2, 3, 4))
    x = ndws.array(a)
    for name in REDUCTIONS:
        check(lambda: getattr(np, name)(a, axis=axis), lambda: getattr(x, name)(axis=axis))


def test_axis_error_type():
    with pytest.raises(np.exceptions.AxisError):
        ndws.ones((2, 3)).sum(axis=2)
    with pytest.raises(np.exceptions.AxisError):
        ndws.ones((2, 3)).argmax(axis=-3)


NORM_CASES = [
    ({}, (3, 4)), ({}, (5,)), ({"ord": 1}, (5,)), ({"ord": np.inf}, (5,)), ({"ord": 0}, (5,)),
    ({"ord": -np.inf}, (5,)), ({"ord": 3}, (5,)), ({"ord": "fro"}, (3, 4)),
    ({"ord": "nuc"}, (3, 4)), ({"ord": 1}, (3, 4)), ({"ord": 2}, (3, 4)),
    ({"ord": np.inf}, (3, 4)), ({"axis": 0}, (3, 4)), ({"axis": 1, "ord": 1}, (3, 4)),
    ({"axis": (0, 1)}, (3, 4)), ({"axis": (1, 2)}, (2, 3, 4)), ({"axis": -1}, (2, 3, 4)),
    ({"keepdims": True}, (3, 4)), ({"axis": 1, "keepdims": True}, (3, 4)),
    ({"ord": "fro"}, (5,)), ({"axis": 2}, (3, 4)), ({"ord": 3}, (3, 4)),
]


@pytest.mark.parametrize("kwargs, shape", NORM_CASES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=str)
def test_norm(rng, kwargs, shape, dtype):
    a = sample(rng, shape, dtype)
    x = ndws.array(a)
    check(lambda: np.linalg.norm(a, **kwargs), lambda: ndws.norm(x, **kwargs))
    check(lambda: np.linalg.norm(a, **kwargs), lambda: x.norm(**kwargs))


def test_reductions_of_noncontiguous_views(rng):
    a = sample(rng, (6, 8), np.float64)
    x = ndws.array(a)
    for key in [(slice(None, None, -2), slice(1, None, 3)), (Ellipsis, slice(None, None, -1))]:
        for name in REDUCTIONS:
            check(lambda: getattr(np, name)(a[key], axis=0),
                  lambda: getattr(x[key], name)(axis=0))
        check(lambda: np.asarray(a.T[key].sum()), lambda: x.T[key].sum())


def test_module_reductions_accept_numpy_and_lists():
    check(lambda: np.sum([1, 2, 3]), lambda: ndws.sum([1, 2, 3]))
    check(lambda: np.mean(np.arange(4.0)), lambda: ndws.mean(np.arange(4.0)))
    check(lambda: np.max([[1, 5], [3, 2]], axis=1), lambda: ndws.amax([[1, 5], [3, 2]], axis=1))
    check(lambda: np.min([[1, 5], [3, 2]], axis=0), lambda: ndws.amin([[1, 5], [3, 2]], axis=0))


# ------------------------------------------------------------------------------------------------
# element-wise functions in ndws.ops.__all__


UFUNC_NAMES = [n for n in ndws.ops.__all__ if isinstance(getattr(np, n, None), np.ufunc)]
UNARY_UFUNCS = [n for n in UFUNC_NAMES if getattr(np, n).nin == 1]
BINARY_UFUNCS = [n for n in UFUNC_NAMES if getattr(np, n).nin == 2]
NONNEG_SECOND = {"power", "left_shift", "right_shift"}


def test_ops_all_is_exported_and_complete():
    for name in ndws.ops.__all__:
        assert getattr(ndws, name) is getattr(ndws.ops, name), name
    # every element-wise name in __all__ is a NumPy ufunc of that name
    elementwise = ndws.ops.__all__[:ndws.ops.__all__.index("true_divide") + 1]
    assert set(elementwise) <= set(UFUNC_NAMES)
    for name in ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "exp",
                 "log", "sqrt", "abs", "clip", "where", "matmul", "dot"]:
        assert name in ndws.ops.__all__


@pytest.mark.parametrize("name", UNARY_UFUNCS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_unary_ufuncs(rng, name, dtype):
    a = sample(rng, (4, 5), dtype)
    if np.dtype(dtype).kind == "f":
        a[0, :3] = [np.nan, np.inf, -0.0]
    x = ndws.array(a)
    f, nf = getattr(ndws, name), getattr(np, name)
    check(lambda: nf(a), lambda: f(x))
    check(lambda: nf(a[::-1, 1::2]), lambda: f(x[::-1, 1::2]))
    check(lambda: nf(a), lambda: f(a))  # NumPy input, NDArray result


@pytest.mark.parametrize("name", BINARY_UFUNCS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_binary_ufuncs(rng, name, dtype):
    a = sample(rng, (4, 5), dtype)
    b = sample(rng, (4, 5), dtype)
    if name in NONNEG_SECOND and b.dtype.kind != "b":
        b = (np.abs(b) % 4).astype(dtype)
    x, y = ndws.array(a), ndws.array(b)
    f, nf = getattr(ndws, name), getattr(np, name)
    check(lambda: nf(a, b), lambda: f(x, y))
    check(lambda: nf(a, b[0]), lambda: f(x, y[0]))          # broadcasting
    check(lambda: nf(a[:, :1], b), lambda: f(x[:, :1], b))   # NumPy operand
    check(lambda: nf(a, 2), lambda: f(x, 2))                 # Python scalar
    check(lambda: nf(3.0, b), lambda: f(3.0, y))


@pytest.mark.parametrize("name", ["add", "multiply", "maximum", "arctan2", "power", "equal",
                                  "logical_and", "bitwise_or", "floor_divide", "hypot"])
@pytest.mark.parametrize("dta, dtb", [(np.float32, np.float64), (np.int32, np.float32),
                                      (np.int32, np.int64), (np.bool_, np.int32),
                                      (np.bool_, np.float32)], ids=str)
def test_binary_ufunc_promotion(rng, name, dta, dtb):
    a = sample(rng, (6,), dta)
    b = sample(rng, (6,), dtb)
    if name == "power" and b.dtype.kind != "b":
        b = np.abs(b).astype(dtb)
    check(lambda: getattr(np, name)(a, b),
          lambda: getattr(ndws, name)(ndws.array(a), ndws.array(b)))


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "true_divide", "maximum",
                                  "power", "remainder", "copysign", "logaddexp"])
@pytest.mark.parametrize("which", ["x1", "x2", "both"])
def test_ufunc_out_aliasing_an_input(rng, name, which):
    a = sample(rng, (3, 4), np.float64, 0.5, 3.0)
    b = sample(rng, (3, 4), np.float64, 0.5, 3.0)
    x, y = ndws.array(a), ndws.array(b)
    f, nf = getattr(ndws, name), getattr(np, name)
    if which == "both":
        exp = nf(a, a)
        r = f(x, x, out=x)
        assert r is x
    else:
        exp = nf(a, b)
        target = x if which == "x1" else y
        r = f(x, y, out=target)
        assert r is target
    assert_matches(r, exp)


def test_ufunc_out_aliasing_overlapping_views():
    e = np.arange(10.0)
    a = ndws.array(e)
    ndws.add(a[:-1], a[1:], out=a[1:])
    np.add(e[:-1], e[1:], out=e[1:])
    assert_matches(a, e)
    ndws.negative(a[::-1], out=a)
    np.negative(e[::-1], out=e)
    assert_matches(a, e)


@pytest.mark.parametrize("name", ["add", "multiply", "sqrt", "exp", "negative", "maximum",
                                  "greater"])
def test_ufunc_out_and_where(rng, name):
    nf = getattr(np, name)
    f = getattr(ndws, name)
    a = sample(rng, (3, 4), np.float64, 0.5, 3.0)
    b = sample(rng, (3, 4), np.float64, 0.5, 3.0)
    args_np = (a,) if nf.nin == 1 else (a, b)
    args_nd = tuple(ndws.array(v) for v in args_np)
    rdt = nf(*args_np).dtype
    mask = sample(rng, (3, 4), np.bool_)
    for w in (mask, ndws.array(mask), mask[0], True, False):
        exp = np.full((3, 4), 7, rdt)
        nf(*args_np, out=exp, where=w.numpy() if isinstance(w, ndws.NDArray) else w)
        o = ndws.full((3, 4), 7, rdt)
        r = f(*args_nd, out=o, where=w)
        assert r is o
        assert_matches(o, exp)


def test_ufunc_out_tuple_and_numpy_out():
    a = ndws.arange(4.0)
    o = ndws.zeros(4)
    assert ndws.add(a, 1.0, out=(o,)) is o
    assert_matches(o, np.arange(4.0) + 1)
    n = np.zeros(4)
    assert ndws.multiply(a, 2.0, out=n) is n
    np.testing.assert_array_equal(n, np.arange(4.0) * 2)


def test_ufunc_out_casting_and_shape_errors_are_numpys():
    e = np.arange(4.0)
    a = ndws.array(e)
    for bad_np, bad_nd in [(np.zeros(4, np.int32), ndws.zeros(4, np.int32)),
                           (np.zeros(3), ndws.zeros(3)), (np.zeros((2, 4)), ndws.zeros((2, 4)))]:
        try:
            np.add(e, 1.0, out=bad_np)
        except Exception as exc:
            with pytest.raises(type(exc)) as info:
                ndws.add(a, 1.0, out=bad_nd)
            assert str(info.value) == str(exc)
        else:
            ndws.add(a, 1.0, out=bad_nd)
            assert_matches(bad_nd, bad_np)


@pytest.mark.parametrize("kwargs", [{"dtype": np.float32}, {"casting": "unsafe", "dtype": np.int32},
                                    {"dtype": np.int64}, {"signature": (None, None, np.float64)}],
                         ids=str)
def test_ufunc_dtype_casting_kwargs(rng, kwargs):
    a = sample(rng, (5,), np.int32)
    b = sample(rng, (5,), np.float64)
    check(lambda: np.add(a, b, **kwargs), lambda: ndws.add(ndws.array(a), ndws.array(b), **kwargs))


@pytest.mark.parametrize("name", ["log", "sqrt", "arccos", "log10", "reciprocal"])
def test_ufunc_warnings_are_numpys(name):
    e = np.array([-1.0, 0.0, 1.0, 2.0])
    x = ndws.array(e)
    expected = _warnings_of(lambda: getattr(np, name)(e))
    assert expected
    assert _warnings_of(lambda: getattr(ndws, name)(x)) == expected


def test_ufunc_wrong_argument_count():
    with pytest.raises(TypeError):
        ndws.add(ndws.ones(2))
    with pytest.raises(TypeError):
        ndws.exp(ndws.ones(2), ndws.ones(2), ndws.ones(2))


# ------------------------------------------------------------------------------------------------
# clip and where


CLIP_CASES = [(0.0, 1.0), (None, 1.0), (-1.0, None), (1, 2), (None, 2), (0, None), (2.5, 1.5),
              ("arr", None), (None, "arr"), ("arr", "arr"), (None, None)]


@pytest.mark.parametrize("lo, hi", CLIP_CASES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64], ids=str)
def test_clip(rng, lo, hi, dtype):
    a = sample(rng, (4, 5), dtype)
    if np.dtype(dtype).kind == "f":
        a[0, 0] = np.nan
    lo_v = sample(rng, (5,), dtype) - 1 if lo == "arr" else lo
    hi_v = sample(rng, (4, 1), dtype) + 1 if hi == "arr" else hi
    lo_nd = ndws.array(lo_v) if lo == "arr" else lo
    hi_nd = ndws.array(hi_v) if hi == "arr" else hi
    x = ndws.array(a)
    check(lambda: np.clip(a, lo_v, hi_v), lambda: ndws.clip(x, lo_nd, hi_nd))
    check(lambda: np.clip(a, lo_v, hi_v), lambda: x.clip(lo_nd, hi_nd))
    check(lambda: a.clip(min=lo_v, max=hi_v), lambda: x.clip(min=lo_nd, max=hi_nd))


def test_clip_out():
    e = np.linspace(-2, 2, 9)
    a = ndws.array(e)
    o = ndws.zeros(9)
    assert ndws.clip(a, -1, 1, out=o) is o
    assert_matches(o, np.clip(e, -1, 1))
    assert ndws.clip(a, None, 0.5, out=a) is a
    assert_matches(a, np.clip(e, None, 0.5))


WHERE_DT = [np.float32, np.float64, np.int32, np.bool_]


@pytest.mark.parametrize("dtx", WHERE_DT, ids=str)
@pytest.mark.parametrize("dty", WHERE_DT, ids=str)
def test_where_three_args(rng, dtx, dty):
    c = sample(rng, (3, 4), np.bool_)
    xv = sample(rng, (3, 4), dtx)
    yv = sample(rng, (4,), dty)
    check(lambda: np.where(c, xv, yv),
          lambda: ndws.where(ndws.array(c), ndws.array(xv), ndws.array(yv)))
    check(lambda: np.where(c, xv, yv), lambda: ndws.where(c, ndws.array(xv), yv))


@pytest.mark.parametrize("x, y", [(0.5, 1), (1, 2), (True, 0), (1.5, "arr"), ("arr", 0),
                                  ("arr", 2.5), ("arr", np.float64(2.5)), (np.int32(1), 2)],
                         ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_], ids=str)
def test_where_scalars_nep50(rng, x, y, dtype):
    c = sample(rng, (2, 3), np.bool_)
    arr = sample(rng, (2, 3), dtype)
    xv = arr if x == "arr" else x
    yv = arr if y == "arr" else y
    xn = ndws.array(arr) if x == "arr" else x
    yn = ndws.array(arr) if y == "arr" else y
    check(lambda: np.where(c, xv, yv), lambda: ndws.where(ndws.array(c), xn, yn))


def test_where_condition_non_bool_and_broadcast():
    c = np.array([[0], [3]])
    check(lambda: np.where(c, np.arange(3.0), -1.0),
          lambda: ndws.where(ndws.array(c), ndws.arange(3.0), -1.0))
    check(lambda: np.where(c, np.ones((2, 3)), np.zeros(4)),
          lambda: ndws.where(ndws.array(c), ndws.ones((2, 3)), ndws.zeros(4)))


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 2), ()], ids=str)
def test_where_one_arg(rng, shape):
    c = sample(rng, shape, np.int32) if shape else np.array(1)
    check(lambda: np.where(c), lambda: ndws.where(ndws.array(c)))
    if shape:
        got = ndws.where(ndws.array(c))
        assert all(g.dtype == np.int64 for g in got)


@pytest.mark.parametrize("alias", ["x", "y", "condition"])
def test_where_out_aliasing_an_input_matches_numpy(alias):
    # the fill writes y then x: an `out` that is one of them must not read what it wrote
    c = np.array([True, False, False])
    x, y = np.array([9.0, 9.0, 9.0]), np.array([1.0, 2.0, 3.0])
    expected = np.where(c, x, y)
    nc, nx, ny = ndws.array(c.astype(np.float64)), ndws.array(x), ndws.array(y)
    out = {"x": nx, "y": ny, "condition": nc}[alias]
    got = ndws.where(nc, nx, ny, out=out)
    assert got is out
    np.testing.assert_array_equal(got.numpy(), expected)


def test_where_out_aliasing_through_a_view():
    a = ndws.arange(6.0)
    got = ndws.where(ndws.array([True, False, True]), a[::2], a[1::2], out=a[1::2])
    np.testing.assert_array_equal(got.numpy(), [0.0, 3.0, 4.0])


@pytest.mark.parametrize("out_dtype, ok", [(np.int8, False), (np.float32, True),
                                           (np.complex128, True), (np.bool_, False)])
def test_where_out_casting_is_same_kind_like_every_out(out_dtype, ok):
    c, x = ndws.array([True, False]), ndws.array([1.5, 2.5])
    out = ndws.zeros(2, dtype=out_dtype)
    if ok:
        ndws.where(c, x, 0.5, out=out)
        np.testing.assert_array_equal(out.numpy(), np.array([1.5, 0.5]).astype(out_dtype))
        return
    with pytest.raises(TypeError, match=r"^where: cannot cast the result from "
                                        r"dtype\('float64'\) to out's dtype "):
        ndws.where(c, x, 0.5, out=out)
    assert not out.numpy().any()        # nothing was written
    with pytest.raises(TypeError):      # NumPy's rule for a ufunc's out= says the same
        np.add(x.numpy(), 0.5, out=np.zeros(2, dtype=out_dtype))


def test_where_two_args_is_an_error():
    check(lambda: np.where(np.array([True]), 1), lambda: ndws.where(ndws.array([True]), 1))


def test_where_takes_lists_and_tuples_as_numpy_does():
    # np.result_type read a list operand as a dtype description ("Field elements must be 2-
    # or 3-tuples")
    c = np.array([True, False, True])
    x32 = np.arange(3, dtype=np.float32)
    check(lambda: np.where(c, x32, [7, 8, 9]), lambda: ndws.where(c, ndws.array(x32), [7, 8, 9]))
    check(lambda: np.where([1, 0, 1], (1.5, 2.5, 3.5), x32),
          lambda: ndws.where([1, 0, 1], (1.5, 2.5, 3.5), ndws.array(x32)))
    check(lambda: np.where(c, np.float32(2), 7), lambda: ndws.where(c, np.float32(2), 7))
    check(lambda: np.concatenate([x32, [4, 5]]),
          lambda: ndws.concatenate([ndws.array(x32), [4, 5]]))


@pytest.mark.parametrize("call, exc, msg", [
    (lambda c, x: ndws.where(c, x, "a"), TypeError, "where: unsupported operand y of type 'str'"),
    (lambda c, x: ndws.where(c, [1, None, 2], x), TypeError,
     "where: unsupported operand x of type 'list'"),
    (lambda c, x: ndws.where("abc", x, x), TypeError,
     "where: unsupported operand condition of type 'str'"),
    (lambda c, x: ndws.where(c, x, np.array(["a"] * 3)), TypeError,
     "where: unsupported operand y of dtype <U1"),
    (lambda c, x: ndws.where(c, x, np.datetime64(1, "D")), TypeError,
     "where: unsupported operand y of type 'datetime64'"),
    (lambda c, x: ndws.where(c, x, [[1], [1, 2]]), ValueError,
     "where: y: setting an array element with a sequence"),
    (lambda c, x: ndws.concatenate([x, ["a", "b"]]), TypeError,
     "concatenate: unsupported operand arrays[1] of type 'list'"),
    (lambda c, x: ndws.stack([x, None]), TypeError,
     "stack: unsupported operand arrays[1] of type 'NoneType'"),
])
def test_where_and_joins_name_an_operand_of_no_numbers(call, exc, msg):
    # NumPy would parse text, compute with objects, or fail in np.result_type
    with ndws.workspace("OPERANDS") as ws:
        c, x = ndws.array([True, False, True]), ndws.ones(3)
        before = (ws.this_cycle_allocations, ws.primary_offset)
        with pytest.raises(exc, match="^" + re.escape(msg)):
            call(c, x)
        assert (ws.this_cycle_allocations, ws.primary_offset) == before


# ------------------------------------------------------------------------------------------------
# joining


@pytest.mark.parametrize("axis", [0, 1, -1, 2, -3, None], ids=repr)
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_concatenate(rng, axis, dtype):
    parts = [sample(rng, (2, 3, 4), dtype), sample(rng, (2, 3, 4), dtype)]
    if axis is not None:
        grown = list(parts[1].shape)
        grown[axis] = 1
        parts.append(sample(rng, tuple(grown), dtype))
    nd = [ndws.array(p) for p in parts]
    check(lambda: np.concatenate(parts, axis=axis), lambda: ndws.concatenate(nd, axis=axis))
    mixed = [nd[0]] + parts[1:]
    check(lambda: np.concatenate(parts, axis=axis), lambda: ndws.concatenate(mixed, axis=axis))


@pytest.mark.parametrize("dta, dtb", [(np.int32, np.float32), (np.bool_, np.int64),
                                      (np.float32, np.float64)], ids=str)
def test_concatenate_promotes_and_casts(rng, dta, dtb):
    a = sample(rng, (2, 2), dta)
    b = sample(rng, (3, 2), dtb)
    check(lambda: np.concatenate([a, b]), lambda: ndws.concatenate([ndws.array(a), ndws.array(b)]))
    check(lambda: np.concatenate([a, b], dtype=np.float32),
          lambda: ndws.concatenate([ndws.array(a), ndws.array(b)], dtype=np.float32))
    check(lambda: np.concatenate([a, b], dtype=np.int32, casting="unsafe"),
          lambda: ndws.concatenate([ndws.array(a), ndws.array(b)], dtype=np.int32,
                                   casting="unsafe"))


@pytest.mark.parametrize("arrays_np, kwargs", [
    ([np.ones((2, 3)), np.ones((2, 4))], {}),
    ([np.ones((2, 3)), np.ones(3)], {}),
    ([np.ones((2, 3)), np.ones((2, 3))], {"axis": 2}),
    ([], {}),
    ([np.ones((2, 3)), np.ones((2, 3))], {"axis": 0, "dtype": np.int32}),
    ([np.ones(()), np.ones(())], {}),
], ids=["shape", "ndim", "axis", "empty", "casting", "0d"])
def test_concatenate_errors_are_numpys(arrays_np, kwargs):
    check(lambda: np.concatenate(arrays_np, **kwargs),
          lambda: ndws.concatenate([ndws.array(a) for a in arrays_np], **kwargs))


def test_concatenate_single_array_argument_like_numpy():
    e = np.arange(6.0).reshape(2, 3)
    check(lambda: np.concatenate(e), lambda: ndws.concatenate(ndws.array(e)))


def test_concatenate_out():
    a = ndws.arange(3.0)
    o = ndws.zeros(6)
    assert ndws.concatenate([a, a], out=o) is o
    assert_matches(o, np.concatenate([np.arange(3.0)] * 2))
    with pytest.raises(ValueError):
        ndws.concatenate([a, a], out=ndws.zeros(5))


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3], ids=repr)
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_stack(rng, axis, dtype):
    parts = [sample(rng, (2, 3), dtype) for _ in range(4)]
    nd = [ndws.array(p) for p in parts]
    check(lambda: np.stack(parts, axis=axis), lambda: ndws.stack(nd, axis=axis))
    check(lambda: np.stack(parts, axis=axis), lambda: ndws.stack(parts, axis=axis))


@pytest.mark.parametrize("arrays_np, kwargs", [
    ([np.ones((2, 3)), np.ones((3, 2))], {}),
    ([np.ones((2, 3)), np.ones((2, 3))], {"axis": 3}),
    ([np.ones((2, 3)), np.ones((2, 3))], {"axis": -4}),
    ([], {}),
], ids=["shape", "axis", "negaxis", "empty"])
def test_stack_errors_are_numpys(arrays_np, kwargs):
    check(lambda: np.stack(arrays_np, **kwargs),
          lambda: ndws.stack([ndws.array(a) for a in arrays_np], **kwargs))


def test_stack_out_and_dtype():
    a = ndws.arange(3)
    o = ndws.zeros((2, 3))
    assert ndws.stack([a, a], out=o) is o
    assert_matches(o, np.stack([np.arange(3)] * 2).astype(np.float64))
    check(lambda: np.stack([np.arange(3)] * 2, dtype=np.float32),
          lambda: ndws.stack([a, a], dtype=np.float32))


# ------------------------------------------------------------------------------------------------
# shape functions


def shares(view: ndws.NDArray, base: ndws.NDArray) -> bool:
    return np.shares_memory(np.asarray(view), np.asarray(base))


def _layout(b, layout):
    """A 12-element source of the given memory layout taken from 4x6 base `b`."""
    if layout == "c":
        return b[:2]                       # C-contiguous view (2, 6)
    if layout == "f":                      # Fortran-contiguous (2, 6)
        if isinstance(b, np.ndarray):
            return np.asfortranarray(b[:2])
        return ndws.array(b[:2], order="F")
    if layout == "t":
        return b[:3, :4].T                 # transposed view (4, 3)
    return b[:, ::2]                       # strided view (4, 3)


@pytest.mark.parametrize("shape, order", [((-1,), "C"), ((3, -1), "C"), ((2, 2, 3), "C"),
                                          ((-1,), "F"), ((4, 3), "F"), ((12, 1), "C"),
                                          ((1, -1, 1), "F"), ((5, -1), "C"), ((-1, -1), "C")],
                         ids=str)
@pytest.mark.parametrize("layout", ["c", "f", "t", "strided"])
def test_reshape(shape, order, layout):
    base = np.arange(24.0).reshape(4, 6)
    src_np = _layout(base.copy(), layout)
    src = _layout(ndws.array(base), layout)
    assert src.strides == src_np.strides
    r = check(lambda: src_np.reshape(shape, order=order), lambda: src.reshape(shape, order=order))
    check(lambda: np.reshape(src_np, shape, order=order),
          lambda: ndws.reshape(src, shape, order=order))
    if r is not None:
        exp = src_np.reshape(shape, order=order)
        assert shares(r, src) == np.shares_memory(exp, src_np)


def test_reshape_varargs_and_copy_keyword():
    a = ndws.arange(6.0)
    assert a.reshape(2, 3).shape == (2, 3)
    assert a.reshape((3, 2)).shape == (3, 2)
    assert a.reshape([1, 6]).shape == (1, 6)
    c = a.reshape(2, 3, copy=True)
    c[0, 0] = 5.0
    assert a[0] == 0.0
    v = a.reshape(3, 2, copy=False)
    v[0, 0] = 9.0
    assert a[0] == 9.0
    t = ndws.arange(6.0).reshape(2, 3).T
    with pytest.raises(ValueError) as np_info:
        np.arange(6.0).reshape(2, 3).T.reshape(6, copy=False)
    with pytest.raises(ValueError) as info:
        t.reshape(6, copy=False)
    assert str(info.value) == str(np_info.value)


@pytest.mark.parametrize("shape", [(5,), (4, 5), (-1, 5), (2, -1, -1)], ids=str)
def test_reshape_errors_are_numpys(shape):
    check(lambda: np.arange(12.0).reshape(shape), lambda: ndws.arange(12.0).reshape(shape))


def test_reshape_copy_is_placed_and_view_stays():
    with ndws.workspace("RS") as ws:
        a = ndws.arange(12.0).reshape(3, 4)
        before = alloc(ws)
        v = a.reshape(4, 3)
        assert alloc(ws) == before and v.workspace_id == "RS" and shares(v, a)
        c = a.T.reshape(-1)
        assert c.workspace_id == "RS" and alloc(ws) > before and not shares(c, a)
        assert_matches(c, np.arange(12.0).reshape(3, 4).T.reshape(-1))


@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1), (-1, 0, 1), (0, 1, 2)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_transpose(rng, axes, dtype):
    e = sample(rng, (2, 3, 4), dtype)
    a = ndws.array(e)
    r = check(lambda: np.transpose(e, axes), lambda: ndws.transpose(a, axes))
    assert r.strides == np.transpose(e, axes).strides and shares(r, a)
    check(lambda: e.transpose(axes), lambda: a.transpose(axes))
    if axes is not None:
        check(lambda: e.transpose(*axes), lambda: a.transpose(*axes))


def test_transpose_errors_are_numpys():
    e = np.ones((2, 3))
    a = ndws.ones((2, 3))
    check(lambda: e.transpose((0, 0)), lambda: a.transpose((0, 0)))
    check(lambda: e.transpose((0, 2)), lambda: a.transpose((0, 2)))
    check(lambda: e.transpose((0,)), lambda: a.transpose((0,)))


@pytest.mark.parametrize("a1, a2", [(0, 1), (0, 2), (-1, 0), (1, 1), (0, 3)], ids=str)
def test_swapaxes(rng, a1, a2):
    e = sample(rng, (2, 3, 4), np.float32)
    a = ndws.array(e)
    r = check(lambda: np.swapaxes(e, a1, a2), lambda: ndws.swapaxes(a, a1, a2))
    if r is not None:
        assert shares(r, a)
    check(lambda: e.swapaxes(a1, a2), lambda: a.swapaxes(a1, a2))


@pytest.mark.parametrize("axis", [None, 0, 2, (0, 2), -1, 1, (0, 1)], ids=repr)
def test_squeeze(rng, axis):
    e = sample(rng, (1, 3, 1), np.int64)
    a = ndws.array(e)
    r = check(lambda: np.squeeze(e, axis), lambda: ndws.squeeze(a, axis))
    if r is not None:
        assert shares(r, a)
    check(lambda: e.squeeze(axis), lambda: a.squeeze(axis))


@pytest.mark.parametrize("axis", [0, 1, -1, 3, (0, 2), (0, 0), 4, -5], ids=repr)
def test_expand_dims(rng, axis):
    e = sample(rng, (2, 3), np.float64)
    a = ndws.array(e)
    r = check(lambda: np.expand_dims(e, axis), lambda: ndws.expand_dims(a, axis))
    if r is not None:
        assert shares(r, a)
        with ndws.workspace("ED"):
            b = ndws.array(e)
            assert ndws.expand_dims(b, axis).workspace_id == "ED"


@pytest.mark.parametrize("order", ["C", "F", "K", "A"])
@pytest.mark.parametrize("layout", ["c", "t", "rev", "strided"])
def test_ravel_and_flatten(order, layout):
    e = np.arange(24.0).reshape(4, 6)
    a = ndws.array(e)
    pick = {"c": lambda b: b, "t": lambda b: b.T, "rev": lambda b: b.T[::-1],
            "strided": lambda b: b[::2, 1::2]}[layout]
    src_np, src = pick(e), pick(a)
    r = check(lambda: src_np.ravel(order), lambda: src.ravel(order))
    check(lambda: np.ravel(src_np, order), lambda: ndws.ravel(src, order))
    assert shares(r, a) == np.shares_memory(src_np.ravel(order), e)
    f = check(lambda: src_np.flatten(order), lambda: src.flatten(order))
    assert not shares(f, a)


@pytest.mark.parametrize("order", ["C", "F", "A", "K"])
@pytest.mark.parametrize("layout", ["c", "f", "t"])
def test_copy_order(order, layout):
    e = np.arange(12.0).reshape(3, 4)
    src_np = {"c": e, "f": np.asfortranarray(e), "t": e.T}[layout]
    src = ndws.array(src_np) if layout != "t" else ndws.array(e).T
    assert src.strides == src_np.strides
    for c in (src.copy(order), ndws.copy(src, order)):
        exp = src_np.copy(order)
        assert_matches(c, exp)
        assert c.strides == exp.strides
        assert not shares(c, src)
    assert_matches(ndws.copy(src_np), np.copy(src_np))


def test_copy_is_placed_in_current_workspace():
    a = ndws.arange(4.0)
    with ndws.workspace("CP"):
        for c in (a.copy(), ndws.copy(a), ndws.copy(np.arange(4.0)), a.dup(), a.copy("F")):
            assert c.workspace_id == "CP"
            assert_matches(c, np.arange(4.0))


@pytest.mark.parametrize("to", DTYPES + [np.uint8, np.int16, np.float16, np.complex64],
                         ids=DT_IDS + ["uint8", "int16", "float16", "complex64"])
@pytest.mark.parametrize("frm", DTYPES, ids=DT_IDS)
def test_astype(rng, frm, to):
    e = sample(rng, (3, 4), frm)
    if np.dtype(frm).kind == "f":
        e[0, 0] = 1e10  # out-of-range casts: NumPy's (unsafe) result, no error
    a = ndws.array(e)
    with np.errstate(all="ignore"):
        check(lambda: e.astype(to), lambda: a.astype(to))
        check(lambda: e.T.astype(to), lambda: a.T.astype(to))


def test_astype_copy_false_and_layout():
    a = ndws.arange(4.0)
    assert a.astype(np.float64, copy=False) is a
    assert a.astype(np.float64) is not a
    b = a.astype(np.float32, copy=False)
    assert b is not a and b.dtype == np.float32
    f = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    # NumPy's astype keeps the layout (order='K')
    assert ndws.array(f).astype(np.float32).strides == f.astype(np.float32).strides
    with pytest.raises(TypeError):
        a.astype(object)


def test_fill_and_assign():
    e = np.zeros((2, 3), np.int32)
    a = ndws.zeros((2, 3), np.int32)
    a.fill(7)
    e.fill(7)
    assert_matches(a, e)
    assert a.assign(ndws.array([1.9, 2.1, -3.7])) is a
    np.copyto(e, np.array([1.9, 2.1, -3.7]), casting="unsafe")
    assert_matches(a, e)
    a[:, ::2].fill(0)
    e[:, ::2].fill(0)
    assert_matches(a, e)
    with pytest.raises(ValueError):
        a.assign(ndws.ones(4))


# ------------------------------------------------------------------------------------------------
# placement: every array-producing call lands in the current workspace; out= wins


def _producers():
    e = np.arange(1.0, 13.0).reshape(3, 4)
    return e, {
        "binop": lambda a: a + a,
        "scalar_binop": lambda a: 2.0 * a,
        "compare": lambda a: a > 3,
        "unary": lambda a: -a,
        "abs": lambda a: abs(a),
        "invert": lambda a: ~(a > 2),
        "numpy_left": lambda a: e + a,
        "np_ufunc": lambda a: np.sqrt(a),
        "ufunc_fn": lambda a: ndws.exp(a),
        "binary_fn": lambda a: ndws.maximum(a, 2.0),
        "matmul": lambda a: a @ a.T,
        "matmul_fn": lambda a: ndws.matmul(a, a.T),
        "dot": lambda a: ndws.dot(a, a.T),
        "sum_axis": lambda a: a.sum(axis=0),
        "sum_full": lambda a: a.sum(),
        "mean_fn": lambda a: ndws.mean(a, axis=1),
        "argmax": lambda a: a.argmax(axis=1),
        "std": lambda a: ndws.std(a),
        "norm": lambda a: ndws.norm(a),
        "any": lambda a: (a > 5).any(axis=0),
        "clip": lambda a: ndws.clip(a, 2, 5),
        "clip1": lambda a: a.clip(max=4),
        "where3": lambda a: ndws.where(a > 5, a, 0.0),
        "where1": lambda a: ndws.where(a > 5)[0],
        "concatenate": lambda a: ndws.concatenate([a, a]),
        "stack": lambda a: ndws.stack([a, a]),
        "astype": lambda a: a.astype(np.int32),
        "copy": lambda a: a.copy(),
        "copy_fn": lambda a: ndws.copy(a),
        "flatten": lambda a: a.flatten(),
        "ravel_copy": lambda a: a.T.ravel(),
        "reshape_copy": lambda a: a.T.reshape(-1),
        "fancy": lambda a: a[[0, 2]],
        "mask": lambda a: a[a > 4],
        "view": lambda a: a[1:, ::2],
        "T": lambda a: a.T,
        "expand_dims": lambda a: ndws.expand_dims(a, 0),
        "squeeze": lambda a: ndws.squeeze(a[None]),
        "reduce_ufunc_method": lambda a: np.add.reduce(a, axis=0),
        "accumulate": lambda a: np.add.accumulate(a, axis=1),
        "outer": lambda a: np.multiply.outer(a[0], a[1]),
    }


@pytest.mark.parametrize("name", list(_producers()[1]))
def test_placement_of_every_producer(name):
    e, producers = _producers()
    make = producers[name]
    with ndws.workspace("P") as ws:
        a = ndws.array(e)
        before = alloc(ws)
        r = make(a)
        assert isinstance(r, ndws.NDArray), type(r)
        assert r.workspace_id == "P"
        assert r.stale is None
        if name not in ("view", "T", "expand_dims", "squeeze"):
            assert alloc(ws) > before
        expected = r.numpy()
    b = ndws.array(e)
    r2 = make(b)
    assert isinstance(r2, ndws.NDArray) and r2.workspace_id is None
    np.testing.assert_array_equal(r2.numpy(), expected)
    with ndws.workspace("Q"):
        d = ndws.array(e, detached=True)
        r3 = make(d)
        if name in ("view", "T", "expand_dims", "squeeze"):
            assert r3.workspace_id is None  # a view stays where its base is
        else:
            assert r3.workspace_id == "Q"


@pytest.mark.parametrize("call", [
    lambda a, o: ndws.add(a, 1.0, out=o),
    lambda a, o: np.add(a, 1.0, out=o),
    lambda a, o: ndws.exp(a, out=o),
    lambda a, o: a.sum(axis=0, out=o[0]),
    lambda a, o: ndws.clip(a, 0, 1, out=o),
    lambda a, o: ndws.matmul(a, np.eye(4), out=o),
    lambda a, o: ndws.concatenate([a[:1], a[1:]], out=o),
], ids=["add", "np.add", "exp", "sum", "clip", "matmul", "concatenate"])
def test_out_always_wins(call):
    e = np.arange(12.0).reshape(3, 4) / 10
    with ndws.workspace("OUTER") as outer:
        o_outer = ndws.zeros((3, 4))
        with ndws.workspace("P") as ws:
            a = ndws.array(e)
            o_det = ndws.zeros((3, 4), detached=True)
            before = alloc(ws)
            for o in (o_det, o_outer):
                r = call(a, o)
                assert isinstance(r, ndws.NDArray)
                assert r is o or r.shape == (4,)  # the sum case writes into the view o[0]
                assert o.workspace_id == (None if o is o_det else "OUTER")
            assert alloc(ws) == before
        assert o_outer.stale is None
        assert outer.this_cycle_allocations > 0


def test_out_wins_exact_allocation_count():
    with ndws.workspace("P") as ws:
        a = ndws.ones((3, 4))
        o = ndws.zeros((3, 4), detached=True)
        before = alloc(ws)
        ndws.add(a, a, out=o)
        ndws.multiply(a, 2, out=o)
        a.sum(axis=1, out=o[0, :3])
        ndws.where(a > 0)  # allocates, for contrast
        assert alloc(ws) > before
        mid = alloc(ws)
        ndws.negative(a, out=o)
        assert alloc(ws) == mid
    assert_matches(o, -np.ones((3, 4)))


# ------------------------------------------------------------------------------------------------
# a failed operation leaves nothing half-written


def _failing_ops():
    return {
        "broadcast": lambda a, e, i: a + ndws.ones(5, detached=True),
        "broadcast_numpy": lambda a, e, i: a * np.ones((2, 4)),
        "broadcast_fn": lambda a, e, i: ndws.arctan2(a, np.ones(5)),
        "max_empty": lambda a, e, i: e.max(),
        "argmin_empty": lambda a, e, i: e.argmin(),
        "min_empty_axis": lambda a, e, i: ndws.zeros((0, 3), detached=True).min(axis=0),
        "matmul": lambda a, e, i: a @ a,
        "dot": lambda a, e, i: ndws.dot(a, a),
        "concatenate": lambda a, e, i: ndws.concatenate([a, ndws.ones((3, 5), detached=True)]),
        "stack": lambda a, e, i: ndws.stack([a, a.T]),
        "where": lambda a, e, i: ndws.where(np.ones((3, 4), bool), a, np.ones(5)),
        "inplace_cast": lambda a, e, i: operator.iadd(i, 1.5),
        "overflow": lambda a, e, i: i + 2**40,
        "neg_power": lambda a, e, i: i ** -1,
        "neg_power_arr": lambda a, e, i: i ** np.array([1, -1, 2, 3]),
        "bad_axis": lambda a, e, i: a.sum(axis=5),
        "dup_axis": lambda a, e, i: a.mean(axis=(0, 0)),
        "no_loop": lambda a, e, i: ~a,
        "shift_float": lambda a, e, i: a << 1,
        "bool_neg": lambda a, e, i: -ndws.ones(3, bool, detached=True),
        "reshape": lambda a, e, i: a.reshape(7),
        "astype_bad": lambda a, e, i: a.astype("U4"),
        "fpe": lambda a, e, i: _with_raise(lambda: a / 0.0),
        "fpe_fn": lambda a, e, i: _with_raise(lambda: ndws.log(ndws.zeros(2, detached=True))),
        "sum_out_shape": lambda a, e, i: a.sum(axis=0, out=ndws.zeros(7, detached=True)),
        "norm_ord": lambda a, e, i: ndws.norm(a, ord="bad"),
        "unsupported": lambda a, e, i: a + "x",
        "ufunc_out_cast": lambda a, e, i: ndws.add(a, 0.5, out=i),
    }


def _with_raise(fn):
    with np.errstate(all="raise"):
        return fn()


@pytest.mark.parametrize("name", list(_failing_ops()))
def test_failed_op_leaves_workspace_unchanged(name):
    op = _failing_ops()[name]
    with ndws.workspace("F") as ws:
        a = ndws.arange(1.0, 13.0).reshape(3, 4)
        e = ndws.zeros(0)
        i = ndws.array([1, 2, 3, 4], dtype=np.int32)
        before = (ws.this_cycle_allocations, ws.primary_offset, ws.spilled_size)
        with pytest.raises(Exception) as info:
            op(a, e, i)
        assert not isinstance(info.value, ndws.WorkspaceError)
        assert (ws.this_cycle_allocations, ws.primary_offset, ws.spilled_size) == before
        # operands untouched
        assert_matches(a, np.arange(1.0, 13.0).reshape(3, 4))
        assert_matches(i, np.array([1, 2, 3, 4], np.int32))
        # and the workspace still works: the next allocation lands where the failed one would
        n = ndws.ones(3)
        assert n.workspace_id == "F"
        assert ws.this_cycle_allocations == before[0] + ndws.ALIGNMENT


def test_where_with_out():
    c = ndws.array([True, False, True])
    out = ndws.zeros(3)
    assert ndws.where(c, 1.0, ndws.array([5.0, 6.0, 7.0]), out=out) is out
    assert out.tolist() == [1.0, 6.0, 1.0]
    with pytest.raises(ValueError, match=r"where: out has shape \(2,\)"):
        ndws.where(c, 1.0, 2.0, out=ndws.zeros(2))
    with pytest.raises(TypeError):
        ndws.where(c, out=out)
