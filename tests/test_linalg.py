"""ndws._linalg: the native GEMM (every instruction-set variant this machine runs), matmul and
gemm semantics against NumPy, placement, aliasing, threads, the GIL and scratch reuse."""
from __future__ import annotations

import doctest
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import ndws
from conftest import child_env
from ndws import _linalg as la

ISAS = la.available_isas()
DTYPES = [np.float32, np.float64]
#: max |error| allowed per unit of k * eps * (|A| @ |B|): fma chains round once per step
ERR_PER_K_EPS = {np.dtype(np.float32): 2.0, np.dtype(np.float64): 2.0}


@pytest.fixture(params=ISAS)
def isa(request):
    """Run the test once per GEMM module this CPU can run."""
    previous = la._use_isa(request.param)
    yield request.param
    la._use_isa(previous)


def blocking(dtype):
    return la._gemm_info()[np.dtype(dtype).name]


def reference(a, b, alpha=1.0, beta=0.0, c=None):
    """float64 (or longdouble for float64 inputs) oracle and the error bound per element."""
    wide = np.longdouble if a.dtype == np.float64 else np.float64
    aw, bw = a.astype(wide), b.astype(wide)
    exact = alpha * (aw @ bw)
    if c is not None and beta != 0:
        exact = exact + beta * c.astype(wide)
    k = a.shape[-1]
    eps = np.finfo(a.dtype).eps
    scale = abs(alpha) * (np.abs(aw) @ np.abs(bw))
    if c is not None and beta != 0:
        scale = scale + abs(beta) * np.abs(c.astype(wide))
    bound = ERR_PER_K_EPS[a.dtype] * (k + 2) * eps * scale + np.finfo(a.dtype).tiny
    return exact, bound


def check_close(got, a, b, alpha=1.0, beta=0.0, c=None):
    got = got.numpy() if isinstance(got, ndws.NDArray) else np.asarray(got)
    exact, bound = reference(a, b, alpha, beta, c)
    assert got.dtype == a.dtype
    assert got.shape == exact.shape, (got.shape, exact.shape)
    err = np.abs(got.astype(exact.dtype) - exact)
    assert np.all(err <= bound), f"max err {err.max()} vs bound {bound[err > bound].min()}"


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def edge_shapes(dtype):
    """(m, k, n) crossing MR/NR edges and MC/KC/NC blocks of the kernel in use."""
    blk = blocking(dtype)
    mr, nr, mc, kc, nc = blk["mr"], blk["nr"], blk["mc"], blk["kc"], blk["nc"]
    return [
        (1, 1, 1), (7, 7, 7), (65, 65, 65), (257, 257, 257),
        (mr, 3, nr), (mr + 1, 5, nr - 1), (mr - 1 or 1, 9, nr + 1), (2 * mr + 1, 17, 3 * nr + 1),
        (3, kc + 1, 5), (mc + mr + 1, 19, nr + 3), (mc - 1, kc * 2 + 3, 2 * nr - 1),
        (5, 11, nc + nr + 1),
        (300, 70, 1), (1, 70, 300), (129, 3, 1), (1, 1, 1000),     # matrix-vector path
    ]


# ------------------------------------------------------------------------------------------------
# The kernel against the oracle

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
def test_gemm_matches_numpy_every_isa(isa, rng, dtype, trans_a, trans_b):
    assert la.gemm_isa() == isa
    for m, k, n in edge_shapes(dtype):
        a = rand(rng, (k, m) if trans_a else (m, k), dtype)
        b = rand(rng, (n, k) if trans_b else (k, n), dtype)
        got = la.gemm(ndws.asarray(a), ndws.asarray(b), trans_a=trans_a, trans_b=trans_b)
        check_close(got, a.T if trans_a else a, b.T if trans_b else b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_alpha_beta(isa, rng, dtype):
    for m, k, n in [(7, 9, 5), (65, 257, 33), (40, 3, 100)]:
        a, b, c0 = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype), rand(rng, (m, n), dtype)
        out = ndws.asarray(c0)
        res = la.gemm(ndws.asarray(a), ndws.asarray(b), out=out, alpha=-0.75, beta=1.5)
        assert res is out
        check_close(out, a, b, -0.75, 1.5, c0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_beta_zero_ignores_nan_in_c(isa, rng, dtype):
    a, b = rand(rng, (33, 20), dtype), rand(rng, (20, 45), dtype)
    out = ndws.full((33, 45), np.nan, dtype=dtype)
    la.gemm(ndws.asarray(a), ndws.asarray(b), out=out, beta=0.0)
    assert not np.isnan(out.numpy()).any()
    check_close(out, a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_alpha_zero_and_k_zero_give_beta_c(isa, rng, dtype):
    a = rand(rng, (6, 4), dtype)
    a[2, 1] = np.nan                       # alpha == 0: A is not read (BLAS's rule)
    b = rand(rng, (4, 5), dtype)
    c0 = rand(rng, (6, 5), dtype)
    out = ndws.asarray(c0)
    la.gemm(ndws.asarray(a), ndws.asarray(b), out=out, alpha=0.0, beta=2.0)
    np.testing.assert_array_equal(out.numpy(), (2 * c0).astype(dtype))
    out = ndws.asarray(c0)
    la.gemm(ndws.empty((6, 0), dtype=dtype), ndws.empty((0, 5), dtype=dtype), out=out, beta=-1)
    np.testing.assert_array_equal(out.numpy(), -c0)
    z = la.gemm(ndws.empty((6, 0), dtype=dtype), ndws.empty((0, 5), dtype=dtype))
    np.testing.assert_array_equal(z.numpy(), np.zeros((6, 5), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0, 5, 4), (4, 5, 0), (4, 0, 6), (0, 0, 0)])
def test_empty_dimensions(isa, dtype, shape):
    m, k, n = shape
    a, b = np.ones((m, k), dtype), np.ones((k, n), dtype)
    got = la.matmul(ndws.asarray(a), ndws.asarray(b))
    assert isinstance(got, ndws.NDArray)
    np.testing.assert_array_equal(got.numpy(), a @ b)
    batched = la.matmul(ndws.ones((0, m, k), dtype=dtype), ndws.asarray(b))
    assert batched.shape == (0, m, n)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_inf_propagate_like_numpy(isa, rng, dtype):
    for m, k, n in [(7, 5, 9), (40, 300, 70)]:
        a, b = rand(rng, (m, k), dtype), np.abs(rand(rng, (k, n), dtype)) + 1
        a[0, 1] = np.nan
        a[1, 2] = np.inf
        a[2, 3] = np.inf
        a[2, 4] = -np.inf
        b[0, 5] = np.inf
        b[2, 6] = 0.0                      # inf * 0 at C[1, 6]
        with np.errstate(invalid="ignore"):
            ref = a.astype(np.float64) @ b.astype(np.float64)
        got = la.matmul(ndws.asarray(a), ndws.asarray(b)).numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
        assert np.isnan(got[0]).all() and np.isnan(got[2]).all() and np.isnan(got[1, 6])
        assert np.isinf(got[3:, 5]).all()
        finite = np.isfinite(ref)
        exact, bound = reference(np.where(np.isfinite(a), a, 0), np.where(np.isfinite(b), b, 0))
        assert np.all(np.abs(got[finite] - exact[finite]) <= bound[finite])


# ------------------------------------------------------------------------------------------------
# Strides, views, out=, aliasing

@pytest.mark.parametrize("dtype", DTYPES)
def test_non_contiguous_and_negative_stride_views(isa, rng, dtype):
    big_a, big_b = rand(rng, (90, 140), dtype), rand(rng, (150, 80), dtype)
    A, B = ndws.asarray(big_a), ndws.asarray(big_b)
    cases = [
        ((slice(None, None, 2), slice(None, None, -2)), (slice(None, 70), slice(None, None, 3))),
        ((slice(None, None, -3), slice(1, 66)), (slice(64, None, -1), slice(5, None, 2))),
        ((slice(3, 40), slice(None, 65)), (slice(None, 65), slice(None, None, -1))),
    ]
    for ka, kb in cases:
        a, b = big_a[ka], big_b[kb]
        a_view, b_view = A[ka], B[kb]
        got = la.matmul(a_view, b_view)
        check_close(got, a, b)
        got_t = la.matmul(b_view.T, a_view.T)       # transposes are only strides
        check_close(got_t, b.T, a.T)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["C", "F", "strided", "negative"])
def test_out_of_any_layout(isa, rng, dtype, layout):
    a, b = rand(rng, (37, 50), dtype), rand(rng, (50, 45), dtype)
    if layout == "C":
        out = ndws.empty((37, 45), dtype=dtype)
    elif layout == "F":
        out = ndws.empty((37, 45), dtype=dtype, order="F")
    elif layout == "strided":
        out = ndws.zeros((80, 140), dtype=dtype)[::2, ::3][:37, :45]
    else:
        out = ndws.zeros((37, 45), dtype=dtype)[::-1, ::-1]
    res = la.matmul(ndws.asarray(a), ndws.asarray(b), out=out)
    assert res is out
    check_close(out, a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_aliasing_an_input(isa, rng, dtype):
    a0, b0 = rand(rng, (40, 40), dtype), rand(rng, (40, 40), dtype)
    a, b = ndws.asarray(a0), ndws.asarray(b0)
    a @= b
    check_close(a, a0, b0)
    a, b = ndws.asarray(a0), ndws.asarray(b0)
    la.matmul(a, b, out=b)
    check_close(b, a0, b0)
    a = ndws.asarray(a0)
    la.matmul(a, a, out=a)
    check_close(a, a0, a0)
    # out overlapping an input only partly (a view into the same memory)
    buf0 = rand(rng, (80, 40), dtype)
    buf = ndws.asarray(buf0)
    la.matmul(buf[:40], buf[40:], out=buf[20:60])
    check_close(buf[20:60], buf0[:40], buf0[40:])
    # gemm with beta reads C: the aliased path must start from C's old values
    a, c0 = ndws.asarray(a0), a0.copy()
    la.gemm(a, ndws.asarray(b0), out=a, alpha=2.0, beta=0.5)
    check_close(a, a0, b0, 2.0, 0.5, c0)


def test_aliased_temporary_is_given_back(rng):
    a, b = ndws.ones((30, 30)), ndws.ones((30, 30))
    with ndws.workspace("LINALG_ALIAS") as ws:
        x = ndws.asarray(rand(rng, (30, 30), np.float64))
        used = ws.this_cycle_allocations
        la.matmul(x, b, out=x)
        assert ws.this_cycle_allocations == used
    del a


# ------------------------------------------------------------------------------------------------
# matmul semantics: 1-D, batches, NumPy operands, fallback

@pytest.mark.parametrize("dtype", DTYPES)
def test_vectors_and_batches(isa, rng, dtype):
    cases = [
        ((5,), (5,)), ((7, 5), (5,)), ((5,), (5, 9)), ((3, 4, 5), (5,)), ((5,), (2, 5, 6)),
        ((2, 3, 7, 5), (3, 5, 4)), ((1, 7, 5), (4, 5, 3)), ((4, 1, 7, 5), (1, 3, 5, 2)),
        ((3, 70, 65), (65, 33)),
    ]
    for sa, sb in cases:
        a, b = rand(rng, sa, dtype), rand(rng, sb, dtype)
        got = la.matmul(ndws.asarray(a), ndws.asarray(b))
        assert isinstance(got, ndws.NDArray)
        ref = np.matmul(a, b)
        assert got.shape == ref.shape and got.dtype == ref.dtype
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4 if dtype == np.float32 else 1e-12,
                                   atol=1e-4 if dtype == np.float32 else 1e-12)
        out = ndws.zeros(ref.shape, dtype=dtype)
        assert la.matmul(ndws.asarray(a), ndws.asarray(b), out=out) is out
        np.testing.assert_array_equal(out.numpy(), got.numpy())


def test_operator_and_public_entry_points_use_the_native_kernel(rng, monkeypatch):
    a, b = rand(rng, (9, 7), np.float32), rand(rng, (7, 5), np.float32)
    A, B = ndws.asarray(a), ndws.asarray(b)
    calls = []

    def spy(x1, x2, out):
        res = la.matmul(x1, x2, out)
        calls.append(res is not NotImplemented)
        return res

    ndws._ufuncs._set_native_matmul(spy)
    try:
        for res in (A @ B, ndws.matmul(A, B), np.matmul(a, B), ndws.matmul(a, b)):
            assert isinstance(res, ndws.NDArray)
            check_close(res, a, b)
    finally:
        ndws._ufuncs._set_native_matmul(la.matmul)
    assert calls == [True, True, True, True]


def test_numpy_operands_are_native_and_lists_fall_back(rng):
    a, b = rand(rng, (6, 4), np.float64), rand(rng, (4, 3), np.float64)
    got = la.matmul(a, ndws.asarray(b))
    assert isinstance(got, ndws.NDArray)
    check_close(got, a, b)
    out = np.zeros((6, 3))
    assert la.matmul(ndws.asarray(a), b, out=out) is out
    check_close(out, a, b)
    assert la.matmul(a.tolist(), ndws.asarray(b)) is NotImplemented
    res = ndws.matmul(a.tolist(), ndws.asarray(b))
    np.testing.assert_allclose(res.numpy(), a @ b)


@pytest.mark.parametrize("dt1,dt2", [(np.int32, np.int32), (np.int64, np.float32),
                                     (np.float32, np.float64), (np.float16, np.float16)])
def test_other_dtypes_fall_back_to_numpy(rng, dt1, dt2):
    a = (rng.standard_normal((5, 4)) * 10).astype(dt1)
    b = (rng.standard_normal((4, 3)) * 10).astype(dt2)
    A, B = ndws.asarray(a), ndws.asarray(b)
    assert la.matmul(A, B) is NotImplemented
    got = A @ B
    ref = a @ b
    assert got.dtype == ref.dtype
    np.testing.assert_array_equal(got.numpy(), ref)
    out = ndws.zeros((5, 3), dtype=np.float64)       # an out of another dtype: NumPy's casting
    assert la.matmul(ndws.asarray(a.astype(np.float32)), ndws.asarray(b.astype(np.float32)),
                     out=out) is NotImplemented


def test_unaligned_strides_fall_back(rng):
    # byte strides that are not whole elements: NumPy's path (it copies), same values
    base = np.zeros(64, np.uint8)
    weird = np.ndarray((3, 3), dtype=np.float32, buffer=base, offset=0, strides=(18, 6))
    weird[...] = rand(rng, (3, 3), np.float32)
    assert la.matmul(weird, weird) is NotImplemented
    np.testing.assert_array_equal(ndws.matmul(weird, weird).numpy(), weird @ weird)


# ------------------------------------------------------------------------------------------------
# Errors

@pytest.mark.parametrize("sa,sb", [((3, 4), (5, 6)), ((4,), (5,)), ((2, 3, 4), (3, 4, 5)),
                                   ((3, 4), (3,))])
def test_shape_errors_are_numpys(sa, sb):
    a, b = np.ones(sa, np.float32), np.ones(sb, np.float32)
    with pytest.raises(ValueError) as np_err:
        np.matmul(a, b)
    with pytest.raises(ValueError) as our:
        ndws.asarray(a) @ ndws.asarray(b)
    assert str(our.value) == str(np_err.value)


def test_scalar_operand_error_is_numpys():
    with pytest.raises(ValueError) as np_err:
        np.matmul(np.float32(2), np.ones(3, np.float32))
    with pytest.raises(ValueError) as our:
        ndws.matmul(ndws.array(2.0, dtype=np.float32), ndws.ones(3, dtype=np.float32))
    assert str(our.value) == str(np_err.value)


def test_out_shape_error_is_numpys():
    a = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError) as np_err:
        np.matmul(a, a.T, out=np.empty((3, 4), np.float32))
    with pytest.raises(ValueError) as our:
        ndws.matmul(ndws.asarray(a), ndws.asarray(a).T, out=ndws.empty((3, 4), dtype="float32"))
    assert str(our.value) == str(np_err.value)


def test_read_only_out_error_is_numpys():
    a = np.ones((3, 3), np.float32)
    with pytest.raises(ValueError) as np_err:
        np.matmul(a, a, out=_readonly((3, 3)))
    with pytest.raises(ValueError) as our:
        ndws.matmul(ndws.asarray(a), ndws.asarray(a), out=ndws.from_numpy(_readonly((3, 3))))
    assert str(our.value) == str(np_err.value)


def test_gemm_errors():
    f32, f64 = ndws.ones((3, 4), dtype=np.float32), ndws.ones((4, 2), dtype=np.float64)
    b32 = ndws.ones((4, 2), dtype=np.float32)
    with pytest.raises(TypeError, match=r"gemm: a must be an NDArray of float32 or float64, "
                                        r"got dtype int64"):
        la.gemm(ndws.ones((3, 4), dtype=np.int64), b32)
    with pytest.raises(TypeError, match=r"gemm: b must be an NDArray .* got type list"):
        la.gemm(f32, [[1.0]])
    with pytest.raises(TypeError, match=r"gemm: a and b must have the same dtype"):
        la.gemm(f32, f64)
    with pytest.raises(ValueError, match=r"gemm: beta=0\.5 reads C, so it requires out="):
        la.gemm(f32, b32, beta=0.5)
    with pytest.raises(ValueError, match=r"gemm: op\(a\) has shape \(4, 3\) and op\(b\) has "
                                         r"shape \(4, 2\): k = 3 != 4"):
        la.gemm(f32, b32, trans_a=True)
    with pytest.raises(ValueError, match=r"gemm: a must have at least 2 dimensions"):
        la.gemm(ndws.ones(4, dtype=np.float32), b32)
    with pytest.raises(ValueError, match=r"gemm: out has shape \(2, 3\), expected \(3, 2\)"):
        la.gemm(f32, b32, out=ndws.empty((2, 3), dtype=np.float32))
    with pytest.raises(TypeError, match=r"gemm: out must have dtype float32, got float64"):
        la.gemm(f32, b32, out=ndws.empty((3, 2)))
    with pytest.raises(TypeError, match=r"gemm: alpha must be a real number, got 'x'"):
        la.gemm(f32, b32, alpha="x")
    with pytest.raises(ValueError, match=r"gemm: batch dimensions of a \(2,\) and b \(3,\)"):
        la.gemm(ndws.ones((2, 3, 4), dtype=np.float32), ndws.ones((3, 4, 2), dtype=np.float32))
    with pytest.raises(ValueError, match=r"gemm: out is read-only"):
        la.gemm(f32, b32, out=_readonly((3, 2)))
    with pytest.raises(ValueError, match=r"gemm: out is read-only"):
        la.gemm(f32, b32, out=ndws.from_numpy(_readonly((3, 2))))


def _readonly(shape):
    x = np.zeros(shape, np.float32)
    x.flags.writeable = False
    return x


@pytest.mark.parametrize("role", ["x1", "x2", "out"])
def test_stale_arrays_raise_workspace_error(role):
    with ndws.workspace("LINALG_STALE"):
        stale = ndws.ones((4, 4), dtype=np.float32)
    fresh = ndws.ones((4, 4), dtype=np.float32)
    args = {"x1": fresh, "x2": fresh, "out": None}
    args[role] = stale
    with pytest.raises(ndws.WorkspaceError, match=rf"Op \[matmul\] {role} argument uses leaked"):
        la.matmul(args["x1"], args["x2"], out=args["out"])
    with pytest.raises(ndws.WorkspaceError):
        ndws.matmul(args["x1"], args["x2"], out=args["out"])
    with pytest.raises(ndws.WorkspaceError, match=r"Op \[gemm\] a argument uses leaked"):
        la.gemm(stale, fresh)


# ------------------------------------------------------------------------------------------------
# Placement, threads, GIL, scratch, dispatch

def test_results_land_in_the_current_workspace(rng):
    a, b = ndws.asarray(rand(rng, (20, 30), np.float32)), ndws.asarray(rand(rng, (30, 10),
                                                                            np.float32))
    detached = a @ b
    assert detached.workspace_id is None and detached.memory_kind == "detached"
    with ndws.workspace("LINALG_PLACE") as ws:
        before = ws.this_cycle_allocations
        r = a @ b
        g = la.gemm(a, b, trans_b=False)
        # (the first cycle of a learning workspace spills; later cycles use its buffer)
        assert r.workspace_id == "LINALG_PLACE" and r.memory_kind in ("main", "spill")
        assert g.workspace_id == "LINALG_PLACE"
        assert ws.this_cycle_allocations > before
        np.testing.assert_array_equal(r.numpy(), detached.numpy())


def matmul_on_one_and_two_threads(a, b):
    A, B = ndws.asarray(a), ndws.asarray(b)
    with ndws.num_threads(1):
        one = la.matmul(A, B).numpy()
    with ndws.num_threads(2):
        two = la.matmul(A, B).numpy()
    return one, two


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_and_two_threads_bit_identical(isa, rng, dtype):
    # all far above the 2-thread grain; slices cut N, cut M, and the transposed orientation
    for (m, k, n) in [(300, 700, 500), (900, 300, 10), (10, 600, 900), (257, 513, 129),
                      (2001, 300, 1), (1, 300, 2001)]:
        a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
        A, B = ndws.asarray(a), ndws.asarray(b)
        with ndws.num_threads(1):
            one = la.matmul(A, B).numpy()
            one_t = la.gemm(A.T.copy(), B, trans_a=True).numpy()
        with ndws.num_threads(2):
            two = la.matmul(A, B).numpy()
            two_t = la.gemm(A.T.copy(), B, trans_a=True).numpy()
        np.testing.assert_array_equal(one, two)
        np.testing.assert_array_equal(one_t, two_t)
        if m > 1 and n > 1:
            # GEMM path: orientation and packing never change a bit (matrix-vector products
            # use a dot or an axpy form by A's layout, each thread-count independent)
            np.testing.assert_array_equal(one, one_t)
        check_close(two, a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_narrow_last_panel_gives_the_bits_of_a_full_one(isa, rng, dtype):
    # A last panel of at most one vector of valid columns (N = NR*q + r, r <= VLEN) runs a
    # tile one vector wide; padding B with zero columns to a whole panel puts the same columns
    # in a full tile instead: each column is the same fma chain either way, so the same bits,
    # with and without beta (the tile's load of C), in both orientations, every row count
    nr = blocking(dtype)["nr"]
    for r in sorted({1, 3, max(1, nr // 4), max(1, nr // 2)}):
        for m, k in [(37, 200), (8, 513), (5, 31)]:
            n = 2 * nr + r
            a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
            c0 = rand(rng, (m, n), dtype)
            bpad = np.zeros((k, 3 * nr), dtype)
            bpad[:, :n] = b
            cpad = np.zeros((m, 3 * nr), dtype)
            cpad[:, :n] = c0
            A = ndws.asarray(a)
            got = la.gemm(A, ndws.asarray(b), out=ndws.asarray(c0.copy()), alpha=0.5,
                          beta=-1.25).numpy()
            full = la.gemm(A, ndws.asarray(bpad), out=ndws.asarray(cpad), alpha=0.5,
                           beta=-1.25).numpy()[:, :n]
            np.testing.assert_array_equal(got, full)
            np.testing.assert_array_equal(la.matmul(A, ndws.asarray(b)).numpy(),
                                          la.matmul(A, ndws.asarray(bpad)).numpy()[:, :n])
            check_close(got, a, b, alpha=0.5, beta=-1.25, c=c0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_short_row_tiles_give_the_bits_of_full_ones(isa, rng, dtype):
    # M not a multiple of MR ends in shorter tiles (AVX2 float32: the last 8 or 4 rows in
    # tiles of 4, packed 4 values per k); zero rows appended to A up to a multiple of MR put
    # the same rows in full tiles instead. Same bits, with and without beta, in place and on
    # the edge tile buffer, one and two K blocks, C with a column stride, A column-major (its
    # own packing path, K steps in groups of 16), 1 and 2 threads
    mr, nr, kc = (blocking(dtype)[key] for key in ("mr", "nr", "kc"))
    for m in (2, 4, 8, 10, 14, 20, 32, 64):
        mpad = -(-m // mr) * mr + mr
        for k, n in [(31, 2 * nr), (kc + 9, 2 * nr + 5), (200, nr // 2)]:
            a, b, c0 = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype), rand(rng, (m, n), dtype)
            apad = np.zeros((mpad, k), dtype)
            apad[:m] = a
            cpad = np.zeros((mpad, n), dtype)
            cpad[:m] = c0
            packed = la._pack_b(b)
            for threads in (1, 2):
                full = la._gemm_packed_b(apad, packed, n, 0.5, cpad.copy(), threads)[:m]
                got = la._gemm_packed_b(a, packed, n, 0.5, c0.copy(), threads)
                assert got.tobytes() == full.tobytes(), (m, k, n, threads)
                tr = la._gemm_packed_b(np.asfortranarray(a), packed, n, 0.5, c0.copy(), threads)
                assert tr.tobytes() == full.tobytes(), (m, k, n, threads)
                col = la._gemm_packed_b(a, packed, n, 0.5, np.asfortranarray(c0), threads)
                assert np.array_equal(col, full), (m, k, n, threads)
                plain = la._gemm_packed_b(a, packed, n, 0.0, np.empty((m, n), dtype), threads)
                assert plain.tobytes() == la._gemm_packed_b(
                    apad, packed, n, 0.0, np.empty((mpad, n), dtype), threads)[:m].tobytes()
            check_close(got, a, b, alpha=1.0, beta=0.5, c=c0)


def test_threads_bit_identical_when_a_is_too_big_to_keep_packed(rng):
    # 600 x 1800 float64 is over the 8 MiB of packed A a thread keeps for all its chunks: the
    # chunks then pack their own A blocks (one chunk per thread), with the same bits
    a, b = rand(rng, (600, 1800), np.float64), rand(rng, (1800, 640), np.float64)
    one, two = matmul_on_one_and_two_threads(a, b)
    np.testing.assert_array_equal(one, two)
    check_close(two, a, b)


def test_gemms_from_two_python_threads_at_once(rng):
    # Both threads ask for 2 kernel threads; whichever finds the helper pool busy computes
    # alone. Every result must be the one-thread result, bit for bit.
    a, b = rand(rng, (256, 384), np.float32), rand(rng, (384, 320), np.float32)
    A, B = ndws.asarray(a), ndws.asarray(b)
    want, _ = matmul_on_one_and_two_threads(a, b)
    start = threading.Barrier(2)
    bad = []

    def work():
        with ndws.num_threads(2):
            start.wait()
            for _ in range(40):
                got = la.matmul(A, B).numpy()
                if not np.array_equal(got, want):
                    bad.append(got)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_gemm_threads_work_in_a_forked_child():
    # the helper threads do not survive fork(): the child must start its own, not wait for
    # the parent's
    script = textwrap.dedent("""
        import os, sys
        import numpy as np, ndws
        import ndws._linalg as la
        a = ndws.asarray(np.arange(512 * 512, dtype=np.float32).reshape(512, 512) % 7)
        with ndws.num_threads(2):
            want = la.matmul(a, a).numpy()
        pid = os.fork()
        if pid == 0:
            with ndws.num_threads(2):
                ok = np.array_equal(la.matmul(a, a).numpy(), want)
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr


def test_gil_is_released_during_gemm(rng):
    a = ndws.asarray(rand(rng, (1024, 1024), np.float32))
    counter = [0]
    stop = threading.Event()

    def spin():
        # sleeps hand the GIL back voluntarily, so the main thread never waits for a switch
        while not stop.is_set():
            counter[0] += 1
            time.sleep(0.0001)

    old = sys.getswitchinterval()
    # No forced switches: the spinner can run while the main thread holds the GIL only if the
    # main thread gives it up, i.e. inside the kernel's nogil section. (Checked with a
    # GIL-holding C call, sorted() of a big list: the counter does not move.)
    sys.setswitchinterval(100.0)
    t = threading.Thread(target=spin)
    t.start()
    try:
        with ndws.num_threads(1):
            progress = []
            for _ in range(3):
                c0 = counter[0]
                la.matmul(a, a)
                progress.append(counter[0] - c0)
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
    assert all(p > 0 for p in progress), progress


def test_scratch_is_reused_not_reallocated(rng):
    a, b = ndws.asarray(rand(rng, (300, 400), np.float32)), ndws.asarray(rand(rng, (400, 300),
                                                                             np.float32))
    for n in (1, 2):
        with ndws.num_threads(n):
            la.matmul(a, b)
            la.matmul(a, b)
            before = la._scratch_allocations()
            for _ in range(5):
                la.matmul(a, b)
                la.matmul(a[:100], b[:, :50])        # smaller problems fit the same buffers
            assert la._scratch_allocations() == before


def test_scratch_grows_for_a_bigger_problem_then_stays(rng):
    with ndws.num_threads(1):
        small = ndws.ones((8, 8), dtype=np.float64)
        la.matmul(small, small)
        start = la._scratch_allocations()
        big = ndws.ones((600, 700), dtype=np.float64)
        big2 = ndws.ones((700, 2600), dtype=np.float64)
        la.matmul(big, big2)
        grown = la._scratch_allocations()
        assert grown >= start
        la.matmul(big, big2)
        la.matmul(small, small)
        assert la._scratch_allocations() == grown


def test_scratch_is_freed_when_its_thread_exits(rng):
    a = ndws.asarray(rand(rng, (64, 64), np.float32))
    with ndws.num_threads(1):
        la.matmul(a, a)                       # this thread's buffer exists from here on
    before = la._scratch_buffers()
    seen = []

    def work():
        with ndws.num_threads(1):
            la.matmul(a, a)
        seen.append(la._scratch_buffers())

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [before + 1]               # the thread had its own buffer ...
    # ... and its exit frees it: join() returns when the Python thread is done, the pthread
    # key destructor runs a moment later as the OS thread exits, so wait for that event
    deadline = time.monotonic() + 60
    while la._scratch_buffers() != before and time.monotonic() < deadline:
        time.sleep(0.001)
    assert la._scratch_buffers() == before


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False), (False, True)])
def test_epilogue_sees_every_final_tile_once(isa, rng, dtype, trans_a, trans_b):
    for m, k, n, layout in [(70, 300, 90, "C"), (13, 600, 5, "C"), (33, 20, 41, "F"),
                            (5, 0, 7, "C")]:
        a = rand(rng, (k, m) if trans_a else (m, k), dtype)
        b = rand(rng, (n, k) if trans_b else (k, n), dtype)
        out = ndws.empty((m, n), dtype=dtype, order=layout)
        with ndws.num_threads(2):
            hits = la._gemm_traced(ndws.asarray(a), ndws.asarray(b), out, 1.0, 0.0,
                                   trans_a, trans_b)
        assert (hits == 1).all()
        plain = la.gemm(ndws.asarray(a), ndws.asarray(b), trans_a=trans_a, trans_b=trans_b)
        np.testing.assert_array_equal(out.numpy(), plain.numpy() + dtype(1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_packed_b_gemm_gives_the_bits_of_gemm(isa, rng, dtype):
    # B packed once for many products (the recurrent weights of a time loop) reads the same
    # values through the same micro-kernel: every shape, edge tile, K block, stride and thread
    # count gives gemm's bits (gemm's matrix-vector products, m or n = 1, sum otherwise: the
    # time loops do not pack for those)
    kc = blocking(dtype)["kc"]
    for m, k, n in [(64, 512, 2048), (7, 3, 5), (2, 1, 2), (33, kc + 1, 31), (70, 2 * kc + 7, 90),
                    (130, 20, 2), (2, 40, 130), (9, 0, 4)]:
        a = rand(rng, (m, k), dtype)
        for b in (rand(rng, (k, n), dtype), rand(rng, (n, k), dtype).T,
                  rand(rng, (k, 2 * n), dtype)[:, ::-2]):
            c0 = rand(rng, (m, n), dtype)
            want = la.gemm(ndws.asarray(a), ndws.asarray(np.ascontiguousarray(b)),
                           out=ndws.asarray(c0.copy()), beta=0.5).numpy()
            packed = la._pack_b(b)
            for threads in (1, 2):
                got = la._gemm_packed_b(a, packed, n, 0.5, c0.copy(), threads)
                assert got.tobytes() == want.tobytes(), (m, k, n, threads)
            col = np.asfortranarray(c0)                   # C with a column stride
            assert la._gemm_packed_b(a, packed, n, 0.5, col, 2).tobytes() == np.asfortranarray(
                want).tobytes()


def test_gemm_arrays_rejects_overlap():
    a = ndws.ones((4, 4))
    with pytest.raises(ValueError, match="gemm: out overlaps an input or itself"):
        la._gemm_traced(a, ndws.ones((4, 4)), a)


def test_available_isas_and_dispatch():
    assert ISAS and ISAS[-1] == "baseline"
    assert la.gemm_isa() == ISAS[0] or os.environ.get("NDWS_GEMM_ISA")
    for name in ISAS:
        assert la._cpu_supports(name)
    with pytest.raises(ValueError, match=r"isa: expected one of avx512, avx2, baseline, "
                                         r"got 'sse9'"):
        la._use_isa("sse9")
    info = la._gemm_info()
    assert info["float32"]["nr"] % 2 == 0 and info["float32"]["mc"] % info["float32"]["mr"] == 0


def _run_python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env(**env), timeout=120)


def test_environment_override():
    last = ISAS[-1]
    res = _run_python("import ndws._linalg as la; print(la.gemm_isa())", NDWS_GEMM_ISA=last)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == last
    res = _run_python("import ndws._linalg", NDWS_GEMM_ISA="sse9")
    assert res.returncode != 0
    assert "NDWS_GEMM_ISA: expected one of avx512, avx2, baseline, got 'sse9'" in res.stderr


def test_module_docstring_examples():
    failures, tried = doctest.testmod(la, optionflags=doctest.ELLIPSIS)
    assert tried > 0 and failures == 0


# ------------------------------------------------------------------------------------------------
# The fused linear layer: Y := f(X @ W + b), bias and activation applied per finished tile

import math  # noqa: E402

import ndws.nn.functional as F  # noqa: E402

_erf = np.vectorize(math.erf)


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


#: NumPy oracles of each activation (params: alpha 0.2 for leakyrelu, 0.7 for elu)
ACTIVATION_ORACLES = {
    "identity": lambda z: z,
    "relu": lambda z: np.maximum(z, 0),
    "leakyrelu": lambda z: np.where(z > 0, z, 0.2 * z),
    "elu": lambda z: np.where(z > 0, z, 0.7 * np.expm1(z)),
    "sigmoid": lambda z: 1 / (1 + np.exp(-z)),
    "tanh": np.tanh,
    "softplus": lambda z: np.logaddexp(0, z),
    "gelu": lambda z: 0.5 * z * (1 + _erf(z / math.sqrt(2))),
    "softmax": _softmax,
    "logsoftmax": lambda z: np.log(_softmax(z)),
}
ACTIVATION_PARAMS = {"leakyrelu": {"alpha": 0.2}, "elu": {"alpha": 0.7}}
LINEAR_TOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-12}


def _linear_case(rng, m, k, n, dtype, bias=True):
    x = rng.standard_normal((m, k)).astype(dtype)
    w = (rng.standard_normal((k, n)) / math.sqrt(max(k, 1))).astype(dtype)
    b = rng.standard_normal(n).astype(dtype) if bias else None
    return x, w, b


def _linear_expected(x, w, b, name):
    z = x.astype(np.float64) @ w.astype(np.float64)
    if b is not None:
        z = z + b
    return ACTIVATION_ORACLES[name](z)


def _assert_linear(got, want, dtype):
    tol = LINEAR_TOL[np.dtype(dtype)]
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol * 50, atol=tol * 50)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(ACTIVATION_ORACLES))
@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (7, 65, 257), (65, 300, 10), (130, 37, 70)])
def test_linear_matches_numpy(isa, rng, dtype, name, m, k, n):
    x, w, b = _linear_case(rng, m, k, n, dtype)
    got = F.linear(ndws.asarray(x), ndws.asarray(w), ndws.asarray(b), name,
                   **ACTIVATION_PARAMS.get(name, {}))
    assert got.dtype == dtype and got.shape == (m, n)
    _assert_linear(got, _linear_expected(x, w, b, name), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", [None, "identity", "relu", "softmax"])
def test_linear_without_bias_and_with_numpy_operands(rng, dtype, name):
    x, w, _ = _linear_case(rng, 9, 20, 33, dtype, bias=False)
    got = F.linear(x, w, None, name)      # NumPy arrays are read in place
    _assert_linear(got, _linear_expected(x, w, None, name or "identity"), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_reads_views_and_writes_strided_out(rng, dtype):
    x, w, b = _linear_case(rng, 40, 66, 50, dtype)
    xs = ndws.asarray(np.asfortranarray(x[::-1]))[::-1]          # F-order, negative strides
    ws_ = ndws.asarray(np.repeat(w, 2, axis=1))[:, ::2]          # column stride 2
    bs = ndws.asarray(np.repeat(b, 3))[::3]
    big = ndws.zeros((40, 150), dtype=dtype)
    out = big[:, ::3]
    assert F.linear(xs, ws_, bs, "tanh", out=out) is out
    _assert_linear(out, _linear_expected(x, w, b, "tanh"), dtype)
    untouched = np.asarray(big).copy()
    untouched[:, ::3] = 0
    assert not untouched.any()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alias", ["x", "w"])
def test_linear_out_may_be_an_input(rng, dtype, alias):
    x, w, b = _linear_case(rng, 48, 48, 48, dtype)
    X, W, B = ndws.asarray(x), ndws.asarray(w), ndws.asarray(b)
    out = X if alias == "x" else W
    assert F.linear(X, W, B, "relu", out=out) is out
    _assert_linear(out, _linear_expected(x, w, b, "relu"), dtype)


def test_linear_results_are_placed_in_the_current_workspace_and_do_not_depend_on_threads(rng):
    x, w, b = _linear_case(rng, 256, 512, 384, np.float32)
    X, W, B = (ndws.asarray(v) for v in (x, w, b))
    results = []
    for n in (1, 2):
        with ndws.num_threads(n), ndws.workspace("LINEAR") as ws:
            y = F.linear(X, W, B, "gelu")
            assert y.workspace_id == "LINEAR"
            assert ws.this_cycle_allocations >= y.nbytes
            results.append(np.asarray(y).copy())
    assert np.array_equal(results[0], results[1])


def test_linear_validates_its_arguments(rng):
    x, w, b = (ndws.asarray(v) for v in _linear_case(rng, 4, 3, 5, np.float32))
    with pytest.raises(ValueError, match=r"^linear: x must be 2-D \(n_samples, n_in\), got "
                                         r"shape \(3,\)$"):
        F.linear(x[0, :3], w, b)
    with pytest.raises(ValueError, match=r"^linear: x has 3 features but w has shape \(5, 5\)"):
        F.linear(x, ndws.ones((5, 5), dtype=np.float32), b)
    with pytest.raises(TypeError, match=r"^linear: w must have x's dtype float32, got float64$"):
        F.linear(x, ndws.ones((3, 5)), b)
    with pytest.raises(ValueError, match=r"^linear: b must have shape \(5,\), got \(4,\)$"):
        F.linear(x, w, b[:4])
    with pytest.raises(TypeError, match=r"^linear: x must be an NDArray of float32 or float64, "
                                        r"got dtype int64$"):
        F.linear(ndws.ones((4, 3), dtype=np.int64), w, b)
    with pytest.raises(ValueError, match=r"^linear: out has shape \(4, 4\), expected \(4, 5\)$"):
        F.linear(x, w, b, out=ndws.zeros((4, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="mish"):
        F.linear(x, w, b, "mish")
    with ndws.workspace("LINEAR_STALE"):
        stale = ndws.ones((4, 3), dtype=np.float32)
    with pytest.raises(ndws.WorkspaceError, match=r"Op \[linear\] x argument uses leaked"):
        F.linear(stale, w, b)


def test_linear_gives_its_bytes_back_when_it_fails(rng):
    x, w, b = (ndws.asarray(v) for v in _linear_case(rng, 4, 3, 5, np.float32))
    with ndws.workspace("LINEAR_ROLLBACK") as ws:
        before = ws.this_cycle_allocations
        with pytest.raises(ValueError):
            F.linear(x, w, b, "nope")
        assert ws.this_cycle_allocations == before
