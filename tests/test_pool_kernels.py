"""ndws.nn._pool: max / average / sum / p-norm pooling and their gradients, zero padding,
cropping and nearest-neighbour upsampling, against an independent NumPy reference (and PyTorch
where installed), by central differences, across thread counts, and under hostile input."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import ndws
import ndws.nn.functional as F
from ndws import _threads

try:
    import torch as _torch
except ImportError:         # pragma: no cover - torch is optional
    _torch = None
needs_torch = pytest.mark.skipif(_torch is None, reason="PyTorch is not installed")

DTYPES = [np.float32, np.float64]


def _pad4(p):
    if isinstance(p, int):
        return (p, p, p, p)
    if len(p) == 2:
        return (p[0], p[0], p[1], p[1])
    return tuple(p)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def windows(x, k, s, p, d):
    """The windows of a pooling as (n, c, oh, ow, taps) arrays of values and of validity, the
    taps in (i, j) order, with each tap's flat input position."""
    s = k if s is None else s
    (KH, KW), (sh, sw), (t, b, l, r), (dh, dw) = _pair(k), _pair(s), _pad4(p), _pair(d)
    N, C, H, W = x.shape
    OH = (H + t + b - (KH - 1) * dh - 1) // sh + 1
    OW = (W + l + r - (KW - 1) * dw - 1) // sw + 1
    vals = np.zeros((N, C, OH, OW, KH * KW), x.dtype)
    valid = np.zeros((OH, OW, KH * KW), bool)
    pos = np.zeros((OH, OW, KH * KW), np.int64)
    for oh, ow, i, j in itertools.product(range(OH), range(OW), range(KH), range(KW)):
        ih, iw = oh * sh - t + i * dh, ow * sw - l + j * dw
        if 0 <= ih < H and 0 <= iw < W:
            vals[:, :, oh, ow, i * KW + j] = x[:, :, ih, iw]
            valid[oh, ow, i * KW + j] = True
            pos[oh, ow, i * KW + j] = ih * W + iw
    return vals, valid, pos


def ref_pool(x, kind, k, s, p, d, include_pad=False, pn=2.0):
    v, m, pos = windows(x.astype(np.float64), k, s, p, d)
    if kind == "max":
        vv = np.where(m, v, -np.inf)
        arg = np.argmax(vv, axis=-1)
        idx = np.take_along_axis(np.broadcast_to(pos, vv.shape), arg[..., None], -1)[..., 0]
        return vv.max(axis=-1), idx
    if kind == "avg":
        div = m.size // (m.shape[0] * m.shape[1]) if include_pad else m.sum(-1)
        return (v * m).sum(-1) / div, None
    if kind == "sum":
        return (v * m).sum(-1), None
    return ((np.abs(v) ** pn) * m).sum(-1) ** (1 / pn), None


def ref_pool_backward(x, g, kind, k, s, p, d, include_pad=False, pn=2.0):
    v, m, pos = windows(x.astype(np.float64), k, s, p, d)
    N, C, H, W = x.shape
    gi = np.zeros((N, C, H * W))
    if kind == "max":
        _, idx = ref_pool(x, "max", k, s, p, d)
        contrib = np.zeros(v.shape)
        for n, c in itertools.product(range(N), range(C)):
            np.add.at(gi[n, c], idx[n, c].reshape(-1), g[n, c].reshape(-1))
        return gi.reshape(x.shape)
    if kind == "avg":
        div = m.shape[-1] if include_pad else m.sum(-1)
        contrib = (g[..., None] / np.broadcast_to(div, g.shape)[..., None]) * m
    elif kind == "sum":
        contrib = g[..., None] * m
    else:
        S = ((np.abs(v) ** pn) * m).sum(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(S > 0, g * S ** ((1 - pn) / pn), 0)
        contrib = scale[..., None] * np.abs(v) ** (pn - 1) * np.sign(v) * m
    for n, c in itertools.product(range(N), range(C)):
        np.add.at(gi[n, c], np.broadcast_to(pos, contrib.shape[2:]).reshape(-1),
                  (contrib[n, c] * m).reshape(-1))
    return gi.reshape(x.shape)


def nhwc(a):
    return np.ascontiguousarray(np.moveaxis(np.asarray(a), 1, 3))


def nchw(a):
    return np.moveaxis(np.asarray(a), 3, 1)


GRID = [((2, 2), None, 0, 1), (3, 2, 1, 1), (3, 1, (1, 0, 2, 1), 1), ((2, 3), (1, 2), 0, 2),
        (3, 2, 2, (1, 2))]    # kernel, stride, padding, dilation


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("kind", ["max", "avg", "avg_inc", "sum", "pnorm2", "pnorm3"])
def test_pooling_matches_numpy(rng, dtype, fmt, kind):
    x = rng.standard_normal((2, 3, 9, 8)).astype(dtype)
    for k, s, p, d in GRID:
        base = kind.rstrip("23").replace("_inc", "")
        pn = {"pnorm2": 2.0, "pnorm3": 3.0}.get(kind, 2.0)
        inc = kind == "avg_inc"
        ref, idx = ref_pool(x, base, k, s, p, d, inc, pn)
        xin = nhwc(x) if fmt == "NHWC" else x
        kw = dict(stride=s, padding=p, dilation=d, data_format=fmt)
        if base == "max":
            y, i = F.max_pool2d(xin, k, return_indices=True, **kw)
            i = np.asarray(i)
            assert i.dtype == np.int32
            assert np.array_equal(nchw(i) if fmt == "NHWC" else i, idx)
        elif base == "avg":
            y = F.avg_pool2d(xin, k, include_padding=inc, **kw)
        elif base == "sum":
            y = F.sum_pool2d(xin, k, **kw)
        else:
            y = F.pnorm_pool2d(xin, pn, k, **kw)
        y = nchw(y) if fmt == "NHWC" else np.asarray(y)
        assert y.dtype == dtype
        np.testing.assert_allclose(y, ref, **_tol(dtype))
        g = rng.standard_normal(ref.shape).astype(dtype)
        gin = nhwc(g) if fmt == "NHWC" else g
        if base == "max":
            gx = F.max_pool2d_backward(xin, gin, k, **kw)
            gx2 = F.max_pool2d_backward(xin, gin, k, indices=nhwc(idx).astype(np.int32)
                                        if fmt == "NHWC" else idx.astype(np.int32), **kw)
            assert np.array_equal(np.asarray(gx), np.asarray(gx2))
        elif base == "avg":
            gx = F.avg_pool2d_backward(xin, gin, k, include_padding=inc, **kw)
        elif base == "sum":
            gx = F.sum_pool2d_backward(xin, gin, k, **kw)
        else:
            gx = F.pnorm_pool2d_backward(xin, gin, pn, k, **kw)
        gx = nchw(gx) if fmt == "NHWC" else np.asarray(gx)
        np.testing.assert_allclose(gx, ref_pool_backward(x, g, base, k, s, p, d, inc, pn),
                                   **_tol(dtype))


def test_max_pool_ties_nan_and_all_padding_rules(rng):
    x = np.array([[[[1., 3., 3.], [2., 3., 0.]]]], np.float32)
    y, i = F.max_pool2d(x, (2, 2), stride=1, return_indices=True)
    assert np.asarray(i).tolist() == [[[[1, 1]]]]           # the first of the tied maxima
    x[0, 0, 1, 0] = np.nan
    y, i = F.max_pool2d(x, (2, 2), stride=1, return_indices=True)
    assert np.isnan(np.asarray(y)[0, 0, 0, 0]) and np.asarray(i)[0, 0, 0, 0] == 3
    assert np.asarray(y)[0, 0, 0, 1] == 3
    # padding taps never win, even against -inf
    y = F.max_pool2d(np.full((1, 1, 2, 2), -np.inf, np.float32), 2, stride=1, padding=1)
    assert np.isneginf(np.asarray(y)).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_pool_2x2_rows_wide_enough_for_vectors(rng, dtype):
    # 2x2 / 2 rows run a vectorised loop (nn/_pool_loops.h): 37 outputs a row fill whole
    # vectors and a remainder taken by integer selects; in both, NaN in every tap position,
    # ties of equal values and of -0 / +0 (the first wins: its index and its sign), -inf and
    # inf, against the reference
    x = rng.standard_normal((2, 3, 8, 75)).astype(dtype)
    for at in (0, 56):                                   # (outputs 5-20, then 33-36 of 37)
        for q, (r, c) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
            x[0, 0, 2 * q + r, at + 2 * (5 + q) + c] = np.nan  # each tap of a window
        x[0, 1, 2:4, at + 10:at + 12] = np.nan
        x[1, 0, 0:2, at + 12:at + 14] = 4.0
        x[1, 1, 4, at + 14], x[1, 1, 4, at + 15] = -0.0, 0.0
        x[1, 1, 5, at + 14], x[1, 1, 5, at + 15] = 0.0, -0.0
        x[1, 2, 6, at + 16:at + 18], x[1, 2, 7, at + 16:at + 18] = -np.inf, np.inf
    ref, idx = ref_pool(x, "max", 2, None, 0, 1, False, 2.0)
    ref = ref.astype(dtype)
    y, i = F.max_pool2d(x, 2, return_indices=True)
    np.testing.assert_array_equal(np.asarray(i), idx)
    np.testing.assert_array_equal(np.asarray(y).view(np.uint8), ref.view(np.uint8))
    assert np.signbit(np.asarray(y)[1, 1, 2, 7]) and np.signbit(np.asarray(y)[1, 1, 2, 35])
    y_only = F.max_pool2d(x, 2)
    np.testing.assert_array_equal(np.asarray(y_only).view(np.uint8), ref.view(np.uint8))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [2, 3, (2, 3)])
def test_max_pool_of_windows_that_tile_the_plane(rng, dtype, k):
    # whole windows (LeNet's and VGG's 2x2/2): the forward reads each window's taps directly,
    # the backward zeroes each plane and adds every gradient at its index; rows and columns
    # no window covers (11 = 3 * 3 + 2, 7 = 2 * 3 + 1) get zero gradient; NaN still wins
    x = rng.standard_normal((2, 3, 11, 7)).astype(dtype)
    x[0, 1, 4, 3] = np.nan
    x[1, 2, 0, :] = 5.0                                  # ties: the first one wins
    ref, idx = ref_pool(x, "max", k, None, 0, 1, False, 2.0)
    y, i = F.max_pool2d(x, k, return_indices=True)
    np.testing.assert_array_equal(np.asarray(y), ref)
    np.testing.assert_array_equal(np.asarray(i), idx)
    g = rng.standard_normal(ref.shape).astype(dtype)
    out = np.full(x.shape, 7.0, dtype)                  # stale values everywhere
    F.max_pool2d_backward(x, g, k, indices=i, out=out)
    want = ref_pool_backward(x, g, "max", k, None, 0, 1, False, 2.0)
    np.testing.assert_array_equal(out, want)
    # indices inside the plane but outside their window (not max_pool2d's), two of them the
    # same position: each gradient is added at its index, as the general loop does
    odd = np.asarray(i).copy()
    odd[1, 0, 0, 0] = 10 * 7 + 6                         # the last position of the plane
    odd[1, 0, 0, 1] = 10 * 7 + 6
    F.max_pool2d_backward(x, g, k, indices=odd, out=out)
    want = np.zeros_like(x)
    n, c, oh, ow = np.indices(odd.shape).reshape(4, -1)
    np.add.at(want.reshape(2, 3, -1), (n, c, odd.reshape(-1)), g.reshape(-1))
    np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k, s", [(2, None), (3, 2), ((2, 3), 1), ((19, 21), None),
                                  ((5, 17), (3, 4))])
def test_avg_and_sum_of_whole_windows(rng, dtype, k, s):
    # windows inside the plane, undilated (VGG's 2x2/2; global pooling's one window per plane,
    # summed in 8 lanes when 16 or more wide: 21 and 17 leave a tail of 5 and 1): against NumPy,
    # forward and backward into stale memory, and the same through a strided grad_output
    x = rng.standard_normal((2, 3, 19, 23)).astype(dtype)
    for base in ("avg", "sum"):
        ref, _ = ref_pool(x, base, k, s, 0, 1, False, 2.0)
        pool = F.avg_pool2d if base == "avg" else F.sum_pool2d
        back = F.avg_pool2d_backward if base == "avg" else F.sum_pool2d_backward
        y = np.asarray(pool(x, k, stride=s))
        np.testing.assert_allclose(y, ref, **_tol(dtype))
        g = rng.standard_normal(ref.shape).astype(dtype)
        out = np.full(x.shape, 7.0, dtype)
        back(x, g, k, stride=s, out=out)
        want = ref_pool_backward(x, g, base, k, s, 0, 1, False, 2.0)
        np.testing.assert_allclose(out, want, **_tol(dtype))
        wide = np.zeros(g.shape[:3] + (2 * g.shape[3],), dtype)
        wide[..., ::2] = g
        np.testing.assert_array_equal(np.asarray(back(x, wide[..., ::2], k, stride=s)), out)


def test_pnorm_of_a_zero_window_passes_no_gradient():
    x = np.zeros((1, 1, 2, 4), np.float64)
    x[0, 0, :, 2:] = [[3., 4.], [0., 0.]]
    g = np.ones((1, 1, 1, 2))
    gx = np.asarray(F.pnorm_pool2d_backward(x, g, 2, 2))
    assert np.array_equal(gx[0, 0, :, :2], np.zeros((2, 2)))
    np.testing.assert_allclose(gx[0, 0, 0, 2:], [0.6, 0.8])


# ------------------------------------------------------------------------------------------------
# Padding, cropping, upsampling


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_pad_crop_upsample_match_numpy(rng, dtype, fmt):
    x = rng.standard_normal((2, 3, 5, 6)).astype(dtype)
    xin = nhwc(x) if fmt == "NHWC" else x

    def back(a):
        return nchw(a) if fmt == "NHWC" else np.asarray(a)

    def fwd(a):
        return nhwc(a) if fmt == "NHWC" else a

    for pad in (1, (2, 1), (0, 2, 1, 3)):
        t, b, l, r = _pad4(pad)
        ref = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
        assert np.array_equal(back(F.zero_pad2d(xin, pad, fmt)), ref)
        g = rng.standard_normal(ref.shape).astype(dtype)
        assert np.array_equal(back(F.zero_pad2d_backward(fwd(g), pad, fmt)),
                              g[:, :, t:t + 5, l:l + 6])
        crop = pad
        refc = x[:, :, t:5 - b, l:6 - r]
        assert np.array_equal(back(F.crop2d(xin, crop, fmt)), refc)
        gc = rng.standard_normal(refc.shape).astype(dtype)
        want = np.zeros_like(x)
        want[:, :, t:5 - b, l:6 - r] = gc
        assert np.array_equal(back(F.crop2d_backward(fwd(gc), crop, fmt)), want)
    for size in (1, 2, (2, 3)):
        sh, sw = _pair(size)
        ref = x.repeat(sh, axis=2).repeat(sw, axis=3)
        assert np.array_equal(back(F.upsample2d(xin, size, fmt)), ref)
        g = rng.standard_normal(ref.shape).astype(dtype)
        want = g.reshape(2, 3, 5, sh, 6, sw).sum(axis=(3, 5))
        np.testing.assert_allclose(back(F.upsample2d_backward(fwd(g), size, fmt)), want,
                                   **_tol(dtype))


def test_padding_arguments_follow_dl4j():
    x = np.ones((1, 1, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"Invalid padding values: must have exactly 4 values "
                                         r"\[top, bottom, left, right\]"):
        F.zero_pad2d(x, (1, 2, 3))
    with pytest.raises(ValueError, match="padding must be >= 0"):
        F.zero_pad2d(x, -1)
    with pytest.raises(ValueError, match=r"cropping \(2, 1, 0, 0\) leaves nothing"):
        F.crop2d(x, (2, 1, 0, 0))
    with pytest.raises(ValueError, match="not a multiple of the upsampling size"):
        F.upsample2d_backward(np.ones((1, 1, 3, 4), np.float32), 2)
    with pytest.raises(ValueError, match="size must be >= 1"):
        F.upsample2d(x, 0)


# ------------------------------------------------------------------------------------------------
# Central differences, torch, threads


@pytest.mark.parametrize("kind", ["max", "avg", "avg_inc", "sum", "pnorm", "pad", "crop", "up"])
def test_gradients_by_central_differences(rng, kind):
    x = rng.standard_normal((2, 2, 7, 6))
    k, s, p, d = 3, 2, (1, 0, 1, 1), (1, 2)
    kw = dict(stride=s, padding=p, dilation=d)
    fwd = {
        "max": lambda: F.max_pool2d(x, k, **kw),
        "avg": lambda: F.avg_pool2d(x, k, **kw),
        "avg_inc": lambda: F.avg_pool2d(x, k, include_padding=True, **kw),
        "sum": lambda: F.sum_pool2d(x, k, **kw),
        "pnorm": lambda: F.pnorm_pool2d(x, 3, k, **kw),
        "pad": lambda: F.zero_pad2d(x, (1, 2, 0, 3)),
        "crop": lambda: F.crop2d(x, (1, 2, 0, 3)),
        "up": lambda: F.upsample2d(x, (2, 3)),
    }[kind]
    r = rng.standard_normal(np.asarray(fwd()).shape)
    bwd = {
        "max": lambda: F.max_pool2d_backward(x, r, k, **kw),
        "avg": lambda: F.avg_pool2d_backward(x, r, k, **kw),
        "avg_inc": lambda: F.avg_pool2d_backward(x, r, k, include_padding=True, **kw),
        "sum": lambda: F.sum_pool2d_backward(x, r, k, **kw),
        "pnorm": lambda: F.pnorm_pool2d_backward(x, r, 3, k, **kw),
        "pad": lambda: F.zero_pad2d_backward(r, (1, 2, 0, 3)),
        "crop": lambda: F.crop2d_backward(r, (1, 2, 0, 3)),
        "up": lambda: F.upsample2d_backward(r, (2, 3)),
    }[kind]
    grad = np.asarray(bwd()).reshape(-1)
    flat = x.reshape(-1)
    eps = 1e-6
    for i in rng.choice(flat.size, 20, replace=False):
        old = flat[i]
        flat[i] = old + eps
        up = float((np.asarray(fwd()) * r).sum())
        flat[i] = old - eps
        down = float((np.asarray(fwd()) * r).sum())
        flat[i] = old
        assert abs((up - down) / (2 * eps) - grad[i]) <= 1e-6 * (1 + abs(grad[i]))


@needs_torch
def test_against_torch(rng):
    TF = _torch.nn.functional
    x = rng.standard_normal((4, 5, 24, 24)).astype(np.float32)
    t = _torch.from_numpy(x)
    y, i = F.max_pool2d(x, 2, 2, return_indices=True)
    ty, ti = TF.max_pool2d(t, 2, 2, return_indices=True)
    assert np.array_equal(np.asarray(y), ty.numpy())
    assert np.array_equal(np.asarray(i), ti.numpy())
    for pad, inc in ((1, False), (1, True)):
        np.testing.assert_allclose(np.asarray(F.avg_pool2d(x, 3, 2, pad, include_padding=inc)),
                                   TF.avg_pool2d(t, 3, 2, pad, count_include_pad=inc).numpy(),
                                   rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(F.pnorm_pool2d(x, 2, 2, 2)),
                               TF.lp_pool2d(t, 2, 2, 2).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(F.upsample2d(x, 2)),
                               TF.interpolate(t, scale_factor=2, mode="nearest").numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_bit_identical_on_one_and_two_threads(rng, dtype):
    prev = _threads._set_grains(nn_cheap=1)
    try:
        x = rng.standard_normal((3, 5, 13, 12)).astype(dtype)
        g = rng.standard_normal((3, 5, 7, 6)).astype(dtype)
        runs = []
        for n in (1, 2):
            with ndws.num_threads(n):
                outs = [F.max_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 3, 2, 1),
                        F.pnorm_pool2d(x, 3, 3, 2, 1), F.sum_pool2d(x, 3, 2, 1),
                        F.max_pool2d_backward(x, g, 3, 2, 1), F.avg_pool2d_backward(x, g, 3, 2, 1),
                        F.pnorm_pool2d_backward(x, g, 3, 3, 2, 1),
                        F.upsample2d_backward(F.upsample2d(x, 2), 2), F.zero_pad2d(x, 2)]
                runs.append([np.asarray(o).copy() for o in outs])
        for a, b in zip(*runs):
            assert np.array_equal(a, b)
    finally:
        _threads._set_grains(**prev)


# ------------------------------------------------------------------------------------------------
# Hostile input and placement


def test_pooling_geometry_is_checked(rng):
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    with pytest.raises(ValueError, match="output height position 0 has no input element in "
                                         "its window"):
        F.max_pool2d(x, 2, padding=2)
    # dilated windows can miss a narrow input entirely although each side's padding is
    # smaller than the effective kernel (found by a random sweep: max pooling then wrote
    # through index -1 in its backward, average pooling divided by zero)
    narrow = rng.standard_normal((2, 1, 5, 1)).astype(np.float32)
    for fn in (F.max_pool2d, F.avg_pool2d, F.sum_pool2d):
        with pytest.raises(ValueError, match="output width position 1 has no input element"):
            fn(narrow, (4, 4), stride=(1, 3), padding=(1, 6, 4, 6), dilation=2)
    with pytest.raises(ValueError, match="output width position 1 has no input element"):
        F.max_pool2d_backward(narrow, np.zeros((2, 1, 2, 2), np.float32), (4, 4), stride=(1, 3),
                              padding=(1, 6, 4, 6), dilation=2)
    with pytest.raises(ValueError, match="kernel height 5 is larger than the input height 4"):
        F.avg_pool2d(x, 5)
    with pytest.raises(ValueError, match="stride must be >= 1, got 0"):
        F.max_pool2d(x, 2, stride=0)
    with pytest.raises(ValueError, match="kernel_size must be >= 1"):
        F.max_pool2d(x, 0)
    with pytest.raises(ValueError, match="x must be 4-D"):
        F.max_pool2d(x[0], 2)
    with pytest.raises(ValueError, match="p must be positive and finite"):
        F.pnorm_pool2d(x, 0, 2)
    with pytest.raises(TypeError, match="p must be a real number"):
        F.pnorm_pool2d(x, "2", 2)
    with pytest.raises(TypeError, match="float32 or float64"):
        F.max_pool2d(x.astype(np.int64), 2)
    with pytest.raises(ValueError, match=r"grad_output has shape \(1, 2, 3, 3\), expected "
                                         r"\(1, 2, 2, 2\)"):
        F.max_pool2d_backward(x, np.zeros((1, 2, 3, 3), np.float32), 2)
    with pytest.raises(TypeError, match="grad_output has dtype float64"):
        F.avg_pool2d_backward(x, np.zeros((1, 2, 2, 2)), 2)


def test_max_pool_indices_are_checked_before_writing(rng):
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    g = np.ones((1, 2, 2, 2), np.float32)
    out = np.full(x.shape, 7.0, np.float32)
    bad = np.zeros((1, 2, 2, 2), np.int32)
    bad[0, 1, 1, 1] = 16
    with pytest.raises(ValueError, match=r"indices must be in \[0, 16\)"):
        F.max_pool2d_backward(x, g, 2, indices=bad, out=out)
    assert (out == 7.0).all()
    with pytest.raises(TypeError, match="indices must be int32"):
        F.max_pool2d_backward(x, g, 2, indices=bad.astype(np.int64))
    with pytest.raises(ValueError, match=r"indices has shape"):
        F.max_pool2d_backward(x, g, 2, indices=bad[:, :1])
    with pytest.raises(TypeError, match="indices has dtype int64, expected int32"):
        F.max_pool2d(x, 2, indices=np.zeros((1, 2, 2, 2), np.int64))


def test_outputs_placed_aliased_strided_and_stale(rng):
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    with ndws.workspace("POOL_WS") as ws:
        before = ws.this_cycle_allocations
        y, i = F.max_pool2d(x, 2, return_indices=True)
        assert y.workspace_id == "POOL_WS" and i.workspace_id == "POOL_WS"
        assert ws.this_cycle_allocations - before == 2 * 384      # 2*3*4*4 * 4 bytes, aligned
        before = ws.this_cycle_allocations
        with pytest.raises(ValueError):
            F.max_pool2d(x, 2, padding=5)
        with pytest.raises(ValueError):
            F.max_pool2d_backward(x, np.zeros((2, 3, 4, 4), np.float32), 2,
                                  indices=np.full((2, 3, 4, 4), -1, np.int32))
        assert ws.this_cycle_allocations == before
    with pytest.raises(ndws.WorkspaceError, match="max_pool2d"):
        F.max_pool2d(y, 2)
    with pytest.raises(ndws.WorkspaceError, match="max_pool2d_backward"):
        F.max_pool2d_backward(x, np.ones((2, 3, 4, 4), np.float32), 2, indices=i)
    # out= aliasing the input: upsampling of size 1 and a pad of 0 write over their input
    a = x.copy()
    F.upsample2d(a, 1, out=a)
    assert np.array_equal(a, x)
    sq = x[:, :, :4, :4].copy()
    want = np.asarray(F.avg_pool2d(sq, 3, stride=1, padding=1)).copy()
    F.avg_pool2d(sq, 3, stride=1, padding=1, out=sq)
    assert np.array_equal(sq, want)
    # strided and negative-stride views in and out
    v = x[:, ::-1, 1::2, ::-1]
    out = np.zeros((2, 6, 2, 8), np.float32)[:, ::2, :, ::-2]
    F.max_pool2d(v, 2, out=out)
    np.testing.assert_array_equal(out, ref_pool(np.ascontiguousarray(v), "max", 2, 2, 0, 1)[0])
    # zero-size
    assert F.max_pool2d(np.zeros((0, 3, 4, 4), np.float32), 2).shape == (0, 3, 2, 2)
    assert F.zero_pad2d(np.zeros((2, 0, 4, 4), np.float32), 1).shape == (2, 0, 6, 6)


def test_random_geometries(rng):
    # a sweep over geometries no hand-written case thought of (one found dilated windows that
    # miss the input entirely: now refused)
    done = 0
    while done < 40:
        dtype = (np.float32, np.float64)[rng.integers(2)]
        N, C, H, W = (int(v) for v in rng.integers(1, [3, 4, 12, 12]))
        k = tuple(int(v) for v in rng.integers(1, 5, 2))
        s = tuple(int(v) for v in rng.integers(1, 4, 2))
        d = tuple(int(v) for v in rng.integers(1, 3, 2))
        ek = ((k[0] - 1) * d[0] + 1, (k[1] - 1) * d[1] + 1)
        p = tuple(int(rng.integers(0, ek[i // 2])) for i in range(4))
        x = rng.standard_normal((N, C, H, W)).astype(dtype)
        try:
            F.max_pool2d(x, k, s, p, d)
        except ValueError:
            continue                    # too large a kernel, or an empty window: refused
        done += 1
        for kind in ("max", "avg", "avg_inc", "sum", "pnorm"):
            base, inc = kind.replace("_inc", ""), kind == "avg_inc"
            kw = dict(stride=s, padding=p, dilation=d)
            ref, _ = ref_pool(x, base, k, s, p, d, inc, 2.5)
            g = rng.standard_normal(ref.shape).astype(dtype)
            if base == "max":
                y, gx = F.max_pool2d(x, k, **kw), F.max_pool2d_backward(x, g, k, **kw)
            elif base == "avg":
                y = F.avg_pool2d(x, k, include_padding=inc, **kw)
                gx = F.avg_pool2d_backward(x, g, k, include_padding=inc, **kw)
            elif base == "sum":
                y, gx = F.sum_pool2d(x, k, **kw), F.sum_pool2d_backward(x, g, k, **kw)
            else:
                y = F.pnorm_pool2d(x, 2.5, k, **kw)
                gx = F.pnorm_pool2d_backward(x, g, 2.5, k, **kw)
            np.testing.assert_allclose(np.asarray(y), ref, **_tol(dtype))
            np.testing.assert_allclose(np.asarray(gx),
                                       ref_pool_backward(x, g, base, k, s, p, d, inc, 2.5),
                                       **_tol(dtype))
