"""The convolution kernels (ndws.nn._conv, _winograd, _conv_gemm, _conv2d, _depthwise): conv2d and
its gradients, the transposed and depthwise convolutions,
im2col / col2im and the size helpers, against an independent NumPy reference (and PyTorch where
it is installed), by central differences, across thread counts and GEMM builds, and under
hostile input."""
from __future__ import annotations

import contextlib
import itertools

import numpy as np
import pytest

import ndws
import ndws._linalg as la
import ndws.nn.functional as F
from ndws import _threads

# ------------------------------------------------------------------------------------------------
# The NumPy reference (float64, loops over kernel taps; shares nothing with the kernels)


def _pad4(p):
    if isinstance(p, int):
        return (p, p, p, p)
    if len(p) == 2:
        return (p[0], p[0], p[1], p[1])
    return tuple(p)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _geom(x_hw, k, s, p, d):
    (H, W), (KH, KW), (sh, sw), (t, b, l, r), (dh, dw) = x_hw, k, s, p, d
    OH = (H + t + b - (KH - 1) * dh - 1) // sh + 1
    OW = (W + l + r - (KW - 1) * dw - 1) // sw + 1
    return OH, OW


def _taps(k, s, p, d, OH, OW):
    # (i, j, row slice, column slice) of the padded input under tap (i, j)
    (KH, KW), (sh, sw), (dh, dw) = k, s, d
    for i in range(KH):
        for j in range(KW):
            yield (i, j, slice(i * dh, i * dh + (OH - 1) * sh + 1, sh),
                   slice(j * dw, j * dw + (OW - 1) * sw + 1, sw))


def ref_conv(x, w, b, s=1, p=0, d=1):
    x, w = x.astype(np.float64), w.astype(np.float64)
    s, p, d = _pair(s), _pad4(p), _pair(d)
    N, C, H, W = x.shape
    O, _, KH, KW = w.shape
    OH, OW = _geom((H, W), (KH, KW), s, p, d)
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[1]), (p[2], p[3])))
    y = np.zeros((N, O, OH, OW))
    for i, j, rs, cs in _taps((KH, KW), s, p, d, OH, OW):
        y += np.einsum("nchw,oc->nohw", xp[:, :, rs, cs], w[:, :, i, j])
    if b is not None:
        y += b.astype(np.float64)[None, :, None, None]
    return y


def ref_conv_backward(x, w, dy, s=1, p=0, d=1):
    x, w, dy = x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64)
    s, p, d = _pair(s), _pad4(p), _pair(d)
    N, C, H, W = x.shape
    KH, KW = w.shape[2:]
    OH, OW = dy.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[1]), (p[2], p[3])))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for i, j, rs, cs in _taps((KH, KW), s, p, d, OH, OW):
        dw[:, :, i, j] = np.einsum("nohw,nchw->oc", dy, xp[:, :, rs, cs])
        dxp[:, :, rs, cs] += np.einsum("nohw,oc->nchw", dy, w[:, :, i, j])
    return dxp[:, :, p[0]:p[0] + H, p[2]:p[2] + W], dw, dy.sum(axis=(0, 2, 3))


def ref_conv_transpose(x, w, b, s=1, p=0, d=1):
    s, p, d = _pair(s), _pad4(p), _pair(d)
    KH, KW = w.shape[2:]
    Ho = s[0] * (x.shape[2] - 1) + (KH - 1) * d[0] + 1 - p[0] - p[1]
    Wo = s[1] * (x.shape[3] - 1) + (KW - 1) * d[1] + 1 - p[2] - p[3]
    dx, _, _ = ref_conv_backward(np.zeros((x.shape[0], w.shape[1], Ho, Wo)), w, x, s, p, d)
    return dx + (0 if b is None else b.astype(np.float64)[None, :, None, None])


def ref_depthwise(x, w, b, s=1, p=0, d=1):
    C, m = w.shape[:2]
    ys = [ref_conv(x[:, c:c + 1], w[c, j][None, None], None, s, p, d)
          for c in range(C) for j in range(m)]
    y = np.concatenate(ys, axis=1)
    return y + (0 if b is None else b.astype(np.float64)[None, :, None, None])


def close(got, ref, scale, dtype):
    """got (any array) equals the float64 reference up to the dtype's rounding of a sum whose
    absolute terms add up to `scale` (the same computation on |x|, |w|)."""
    got = np.asarray(got)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert got.dtype == dtype
    tol = (2e-6 if dtype == np.float32 else 1e-14) * (np.asarray(scale) + 1)
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= tol).all(), f"max error {err.max()} (tolerance {tol.max()})"


def nhwc(a):
    return np.ascontiguousarray(np.moveaxis(np.asarray(a), 1, 3))


def nchw(a):
    return np.moveaxis(np.asarray(a), 3, 1)


@pytest.fixture
def small_grains():
    """Make every kernel use the calling thread's limit even on tiny inputs (the thread tests
    need two threads on shapes small enough to check)."""
    prev = _threads._set_grains(gemm_f32=1, gemm_f64=1, nn_cheap=1)
    yield
    _threads._set_grains(**prev)


DTYPES = [np.float32, np.float64]

# (N, C, H, W, O, kernel): a few images, channels below and above a register tile's rows (the
# packed and direct panels, both weight-gradient tap groupings, both input-gradient paths)
SHAPES = [
    (2, 3, 9, 8, 5, (3, 3)),
    (3, 1, 12, 11, 6, (5, 5)),
    (2, 10, 7, 9, 40, (3, 2)),
    (1, 9, 6, 6, 3, (1, 1)),
    (2, 17, 9, 10, 20, (3, 3)),     # 3x3 stride 1 with 16+ channels: Winograd F(2x2, 3x3)
    (2, 20, 7, 7, 32, (1, 1)),      # 1x1: positions as the tile's rows
    (2, 5, 8, 11, 6, (2, 7)),       # 5 channels, wide kernel: the GEMM's column taps (8 rows)
    (2, 7, 8, 12, 5, (2, 6)),       # and on the 6-row tile (AVX2)
]
GRID = list(itertools.product([1, 2], [0, 1, (1, 0, 2, 1)], [1, 2]))   # stride, padding, dilation


def _fits(shape, s, p, d):
    N, C, H, W, O, k = shape
    p4, d2 = _pad4(p), _pair(d)
    return (k[0] - 1) * d2[0] + 1 <= H + p4[0] + p4[1] and (k[1] - 1) * d2[1] + 1 <= W + p4[2] + p4[3]


def _data(rng, shape, dtype):
    N, C, H, W, O, k = shape
    x = rng.standard_normal((N, C, H, W)).astype(dtype)
    w = rng.standard_normal((O, C) + k).astype(dtype)
    b = rng.standard_normal(O).astype(dtype)
    return x, w, b


# ------------------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", SHAPES)
def test_conv2d_forward_and_backward_match_numpy(rng, dtype, fmt, shape):
    for s, p, d in GRID:
        if not _fits(shape, s, p, d):
            continue
        x, w, b = _data(rng, shape, dtype)
        ref = ref_conv(x, w, b, s, p, d)
        scale = ref_conv(np.abs(x), np.abs(w), np.abs(b), s, p, d)
        xin = nhwc(x) if fmt == "NHWC" else x
        y = F.conv2d(xin, w, b, stride=s, padding=p, dilation=d, data_format=fmt)
        close(nchw(y) if fmt == "NHWC" else y, ref, scale, dtype)
        dy = rng.standard_normal(ref.shape).astype(dtype)
        gx, gw, gb = F.conv2d_backward(xin, w, nhwc(dy) if fmt == "NHWC" else dy, stride=s,
                                       padding=p, dilation=d, data_format=fmt)
        rx, rw, rb = ref_conv_backward(x, w, dy, s, p, d)
        sx, sw, sb = ref_conv_backward(np.abs(x), np.abs(w), np.abs(dy), s, p, d)
        close(nchw(gx) if fmt == "NHWC" else gx, rx, sx, dtype)
        close(gw, rw, sw, dtype)
        close(gb, rb, sb, dtype)


def test_the_grid_covers_every_algorithm():
    from ndws.nn import _conv2d
    seen = {"forward": set(), "input_grad": set(), "weight_grad": set()}
    # (and 10 -> 24 channels: row taps on every build's tile, 6x16 or 8x32)
    for (N, C, H, W, O, k), (s, p, d) in itertools.product(SHAPES + [(2, 10, 8, 8, 24, (3, 3))],
                                                           GRID):
        if _fits((N, C, H, W, O, k), s, p, d):
            algos = _conv2d._algorithms((N, C, H, W), (O, C) + k, s, p, d)
            for key in seen:
                seen[key].add(algos[key])
    assert seen["forward"] == {"winograd", "direct", "packed", "positions"}
    # the input gradient is the forward engine on the flipped kernel, or col2im
    assert {"winograd", "col2im", "direct"} <= seen["input_grad"]
    assert seen["weight_grad"] == {"channel taps", "column taps", "row taps", "few channels"}


def test_one_image_is_cut_into_tasks_of_whole_panels():
    # batch 1 (output() latency): a task holds at least a register panel of positions (NR of
    # them; Winograd: NR 2x2 tiles), so no GEMM runs on a fraction of its columns; larger
    # images still give a second thread work
    from ndws.nn import _conv2d
    nr = la._gemm_info()["float32"]["nr"]
    cases = [((1, 64, 16, 16), (64, 64, 3, 3), 1, "winograd", 8 * 8),     # VGG conv4
             ((1, 32, 32, 32), (32, 32, 3, 3), 1, "winograd", 16 * 16),   # VGG conv2
             ((1, 20, 12, 12), (50, 20, 5, 5), 0, "packed", 8 * 8),       # LeNet conv2
             ((1, 32, 32, 3), (32, 3, 3, 3), 1, "direct", 32 * 34)]       # VGG conv1, NHWC
    for x_shape, w_shape, p, algo, positions in cases:
        got = _conv2d._algorithms(x_shape, w_shape, padding=p,
                                  data_format="NHWC" if x_shape[3] == 3 else "NCHW")
        assert got["forward"] == algo
        # every task but the last holds R rows of at least NR positions
        assert (got["forward_tasks"] - 1) * nr <= positions, (w_shape, got)
    if nr == 32:
        # the rows per task that waste the fewest panel columns: VGG's conv1, 32 rows of 34
        # virtual positions, in 2 tasks of 16 rows (2 x 17 panels) rather than 8 of 4 (8 x 5)
        assert _conv2d._algorithms((1, 32, 32, 3), (32, 3, 3, 3), padding=1,
                                   data_format="NHWC")["forward_tasks"] == 2
    # a larger image is still cut for two threads
    assert _conv2d._algorithms((1, 32, 32, 32), (32, 32, 3, 3), padding=1)["forward_tasks"] >= 2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_conv_transpose2d_matches_numpy(rng, dtype, fmt):
    for (N, C, H, W, O, k), (s, p, d) in itertools.product(SHAPES[:3], GRID):
        x = rng.standard_normal((N, C, H, W)).astype(dtype)
        w = rng.standard_normal((C, O) + k).astype(dtype)      # (c_in, c_out, kh, kw)
        b = rng.standard_normal(O).astype(dtype)
        p4, d2, s2 = _pad4(p), _pair(d), _pair(s)
        if s2[0] * (H - 1) + (k[0] - 1) * d2[0] + 1 - p4[0] - p4[1] < 1 or \
                s2[1] * (W - 1) + (k[1] - 1) * d2[1] + 1 - p4[2] - p4[3] < 1:
            continue
        ref = ref_conv_transpose(x, w, b, s, p, d)
        scale = ref_conv_transpose(np.abs(x), np.abs(w), np.abs(b), s, p, d)
        xin = nhwc(x) if fmt == "NHWC" else x
        y = F.conv_transpose2d(xin, w, b, stride=s, padding=p, dilation=d, data_format=fmt)
        close(nchw(y) if fmt == "NHWC" else y, ref, scale, dtype)
        # its gradients: dx = conv2d(dy, w); dw and db by the conv's backward with roles swapped
        dy = rng.standard_normal(ref.shape).astype(dtype)
        gx, gw, gb = F.conv_transpose2d_backward(xin, w, nhwc(dy) if fmt == "NHWC" else dy,
                                                 stride=s, padding=p, dilation=d,
                                                 data_format=fmt)
        close(nchw(gx) if fmt == "NHWC" else gx, ref_conv(dy, w, None, s, p, d),
              ref_conv(np.abs(dy), np.abs(w), None, s, p, d), dtype)
        _, rw, _ = ref_conv_backward(dy, w, x, s, p, d)
        _, sw, _ = ref_conv_backward(np.abs(dy), np.abs(w), np.abs(x), s, p, d)
        close(gw, rw, sw, dtype)
        close(gb, dy.astype(np.float64).sum(axis=(0, 2, 3)),
              np.abs(dy).astype(np.float64).sum(axis=(0, 2, 3)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("mult", [1, 2])
def test_depthwise_conv2d_matches_numpy(rng, dtype, fmt, mult):
    # widths below, at and past the 16-lane row blocks (an overlapping last block, a masked
    # tail in the weight gradient's dot products)
    for (s, p, d), width in itertools.product(GRID, (7, 18, 41)):
        x = rng.standard_normal((2, 3, 8, width)).astype(dtype)
        w = rng.standard_normal((3, mult, 3, 2)).astype(dtype)
        b = rng.standard_normal(3 * mult).astype(dtype)
        ref = ref_depthwise(x, w, b, s, p, d)
        scale = ref_depthwise(np.abs(x), np.abs(w), np.abs(b), s, p, d)
        xin = nhwc(x) if fmt == "NHWC" else x
        y = F.depthwise_conv2d(xin, w, b, stride=s, padding=p, dilation=d, data_format=fmt)
        close(nchw(y) if fmt == "NHWC" else y, ref, scale, dtype)
        dy = rng.standard_normal(ref.shape).astype(dtype)
        gx, gw, gb = F.depthwise_conv2d_backward(xin, w, nhwc(dy) if fmt == "NHWC" else dy,
                                                 stride=s, padding=p, dilation=d,
                                                 data_format=fmt)
        # the depthwise gradients through the dense reference: a block-diagonal kernel
        dense = np.zeros((3 * mult, 3, 3, 2))
        for c in range(3):
            dense[c * mult:(c + 1) * mult, c] = w[c]
        rx, rw, rb = ref_conv_backward(x, dense, dy, s, p, d)
        sx, sw, sb = ref_conv_backward(np.abs(x), np.abs(dense), np.abs(dy), s, p, d)
        close(nchw(gx) if fmt == "NHWC" else gx, rx, sx, dtype)
        rw = np.stack([rw[c * mult:(c + 1) * mult, c] for c in range(3)])
        sw = np.stack([sw[c * mult:(c + 1) * mult, c] for c in range(3)])
        close(gw, rw, sw, dtype)
        close(gb, rb, sb, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_depthwise_planes_beyond_the_stack_buffer(rng, dtype):
    # 131x129 padded planes (more than 16K values): the row kernels with their border code
    for s, p, d in ((1, 1, 1), (2, (1, 0, 2, 1), 1), (1, 2, 2)):
        x = rng.standard_normal((1, 2, 129, 127)).astype(dtype)
        w = rng.standard_normal((2, 1, 3, 3)).astype(dtype)
        y = F.depthwise_conv2d(x, w, None, s, p, d)
        close(y, ref_depthwise(x, w, None, s, p, d),
              ref_depthwise(np.abs(x), np.abs(w), None, s, p, d), dtype)
        dy = rng.standard_normal(np.asarray(y).shape).astype(dtype)
        gx, gw, _ = F.depthwise_conv2d_backward(x, w, dy, s, p, d)
        dense = np.zeros((2, 2, 3, 3))
        dense[0, 0], dense[1, 1] = w[0, 0], w[1, 0]
        rx, rw, _ = ref_conv_backward(x, dense, dy, s, p, d)
        sx, sw, _ = ref_conv_backward(np.abs(x), np.abs(dense), np.abs(dy), s, p, d)
        close(gx, rx, sx, dtype)
        close(np.asarray(gw)[:, 0], np.stack([rw[0, 0], rw[1, 1]]),
              np.stack([sw[0, 0], sw[1, 1]]), dtype)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "baseline"])
def test_every_build_of_the_winograd_transforms(rng, isa):
    # the transforms only add, subtract and halve: every build gives the baseline's bits, for
    # rows of tiles shorter than a vector (7), one (8) and longer (17: overlapping blocks), full
    # and partial weight panels (16 and 20 output channels), bias, activation, and the input
    # gradient (the forward on the flipped kernel); rows of unit stride and not (NHWC, a
    # reversed view), odd output widths (a last 2x2 block of one column)
    from ndws.nn import _conv2d, _winograd
    cases = [((2, 16, 13, 14, 16), np.float32, None), ((1, 17, 16, 16, 20), np.float64, None),
             ((1, 16, 34, 20, 16), np.float32, None), ((2, 16, 11, 13, 16), np.float32, "NHWC"),
             ((1, 16, 10, 19, 16), np.float64, "reversed")]
    results = {}
    for name in ("baseline", isa):
        with _build(name, _winograd._wino_isas, _winograd._use_wino_isa):
            out = []
            for (N, C, H, W, O), dtype, how in cases:
                r = np.random.default_rng(7)
                x, w, b = _data(r, (N, C, H, W, O, (3, 3)), dtype)
                assert _conv2d._algorithms(x.shape, w.shape, padding=1)["forward"] == "winograd"
                fmt = "NHWC" if how == "NHWC" else "NCHW"
                xin = nhwc(x) if how == "NHWC" else x
                if how == "reversed":
                    xin = np.ascontiguousarray(x[..., ::-1])[..., ::-1]
                back = nchw if how == "NHWC" else np.asarray
                y = back(F.conv2d(xin, w, b, padding=1, activation="relu",
                                  data_format=fmt)).copy()
                close(y, np.maximum(ref_conv(x, w, b, 1, 1), 0),
                      ref_conv(np.abs(x), np.abs(w), np.abs(b), 1, 1), dtype)
                dy = r.standard_normal(y.shape).astype(dtype)
                gx = back(F.conv2d_backward(xin, w, nhwc(dy) if how == "NHWC" else dy,
                                            padding=1, data_format=fmt)[0]).copy()
                close(gx, ref_conv_backward(x, w, dy, 1, 1)[0],
                      ref_conv_backward(np.abs(x), np.abs(w), np.abs(dy), 1, 1)[0], dtype)
                out += [y, gx]
            results[name] = out
    for a, c in zip(results["baseline"], results[isa]):
        assert np.array_equal(a, c)
    with pytest.raises(ValueError, match="_use_wino_isa: expected one of"):
        _winograd._use_wino_isa("neon")


# The few-channel weight gradient (C_in <= 4): dY read in place (whole 16-lane rows, channels
# in blocks of 4) or copied; images cut into pieces of rows and the pieces into groups (a
# 1x202x102 image of 16 planes: 20-row pieces, 12 of them in 8 groups)
FEW = [((2, 3, 8, 8, 8, (3, 3)), 1),       # dY in place
       ((3, 1, 12, 11, 6, (5, 5)), 0),     # copied: 7-wide rows, 6 channels
       ((2, 4, 9, 9, 5, (2, 2)), (1, 0, 2, 1)),
       ((2, 1, 102, 202, 4, (3, 3)), 0),   # pieces and groups, dY in place
       ((1, 2, 102, 202, 5, (3, 3)), 1)]   # pieces and groups, copied


# The few-channel forward (C_in <= 4, stride 1 along rows, rows of 16 or more outputs):
# positions as lanes, rows of 16, 21 (an overlapping last vector) and 40; channels in blocks of
# 8 and a partial block
FEW_FWD = [((2, 3, 12, 18, 8, (3, 3)), 1, 1, 1),
           ((1, 1, 9, 25, 20, (5, 5)), (1, 0, 2, 1), (2, 1), 1),
           ((3, 4, 7, 44, 5, (2, 3)), 0, 1, (1, 2)),
           ((1, 2, 20, 17, 9, (3, 1)), 2, (1, 1), (2, 1))]


@pytest.mark.parametrize("dtype", DTYPES)
def test_few_channel_forward(rng, dtype, small_grains):
    from ndws.nn import _conv2d
    for shape, p, s, d in FEW_FWD:
        x, w, b = _data(rng, shape, dtype)
        assert _conv2d._algorithms(x.shape, w.shape, s, p, d)["forward"] == "few channels"
        ref = ref_conv(x, w, b, s, p, d)
        scale = ref_conv(np.abs(x), np.abs(w), np.abs(b), s, p, d)
        got = []
        for n in (1, 2):
            with ndws.num_threads(n):
                y = F.conv2d(x, w, b, s, p, d)
            close(y, ref, scale, dtype)
            got.append(np.asarray(y).copy())
        assert np.array_equal(got[0], got[1])
        for act, fn in (("relu", lambda v: np.maximum(v, 0)), ("tanh", np.tanh)):
            close(F.conv2d(x, w, b, s, p, d, activation=act), fn(ref), scale, dtype)
        close(F.conv2d(x, w, None, s, p, d), ref_conv(x, w, None, s, p, d), scale, dtype)
        # a strided input, an output whose rows are runs inside a wider array, and an output
        # that is no run of rows (NHWC: the GEMM path) all give the same values
        wide = np.zeros(x.shape[:3] + (2 * x.shape[3],), dtype)
        wide[..., ::2] = x
        close(F.conv2d(wide[..., ::2], w, b, s, p, d), ref, scale, dtype)
        big = np.full(ref.shape[:3] + (ref.shape[3] + 5,), np.nan, dtype)
        F.conv2d(x, w, b, s, p, d, out=big[..., 2:-3])
        close(big[..., 2:-3], ref, scale, dtype)
        assert np.isnan(big[..., :2]).all() and np.isnan(big[..., -3:]).all()
        y = F.conv2d(nhwc(x), w, b, s, p, d, data_format="NHWC")
        close(nchw(y), ref, scale, dtype)


def test_few_channel_forward_special_cases(rng):
    x, w, b = _data(rng, (1, 3, 8, 20, 1, (3, 3)), np.float32)
    ref = ref_conv(x, w, b, 1, 1)
    scale = ref_conv(np.abs(x), np.abs(w), np.abs(b), 1, 1)
    # NHWC with one output channel: its rows are runs, the few-channel path writes them
    close(nchw(F.conv2d(nhwc(x), w, b, padding=1, data_format="NHWC")), ref, scale,
          np.float32)
    # out aliasing the input (same shape: 1 channel in, 1 out): computed into a temporary
    x1 = np.ascontiguousarray(x[:, :1])
    w1 = rng.standard_normal((1, 1, 3, 3)).astype(np.float32)
    want = ref_conv(x1, w1, None, 1, 1)
    F.conv2d(x1, w1, None, padding=1, out=x1)
    close(x1, want, ref_conv(np.abs(want), np.abs(w1), None, 1, 1) + 1, np.float32)
    # NaN stays at the outputs it reaches; relu passes it
    x[0, 0, 4, 10] = np.nan
    y = np.asarray(F.conv2d(x, w, b, padding=1, activation="relu"))
    assert np.isnan(y[0, 0, 3:6, 9:12]).all() and np.isnan(y).sum() == 9
    # the scratch it reports covers the call on one thread
    need = F.conv2d_scratch_bytes(x.shape, w.shape, padding=1, threads=1)
    F.conv2d(x, w, b, padding=1, scratch=np.empty(need, np.uint8))
    # negative strides: input rows and channels reversed, the kernel flipped through strides,
    # an output with its channels reversed (rows still runs) or its rows reversed (no runs:
    # the GEMM path), dY reversed for the weight gradient
    base = rng.standard_normal((2, 3, 10, 22)).astype(np.float32)
    xv = base[:, ::-1, :, ::-1]
    wv = rng.standard_normal((9, 3, 3, 3)).astype(np.float32)[:, :, ::-1, ::-1]
    want = ref_conv(np.ascontiguousarray(xv), np.ascontiguousarray(wv), None, 1, 1)
    scale = ref_conv(np.abs(xv), np.abs(wv), None, 1, 1)
    for out in (np.zeros(want.shape, np.float32)[:, ::-1][:, ::-1],
                np.zeros((2, 9, 10, 22), np.float32)[:, ::-1],
                np.zeros((2, 9, 10, 22), np.float32)[..., ::-1]):
        y = F.conv2d(xv, wv, None, padding=1, out=out)
        assert y is out
        close(y, want, scale, np.float32)
    dy = rng.standard_normal(want.shape).astype(np.float32)
    gw = F.conv2d_backward(xv, wv, np.ascontiguousarray(dy[:, ::-1])[:, ::-1], padding=1,
                           need_input=False, need_bias=False)[1]
    close(gw, ref_conv_backward(np.ascontiguousarray(xv), np.ascontiguousarray(wv), dy, 1, 1)[1],
          ref_conv_backward(np.abs(xv), np.abs(wv), np.abs(dy), 1, 1)[1], np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_few_channel_weight_gradient(rng, dtype, small_grains):
    from ndws.nn import _conv2d
    for shape, p in FEW:
        x, w, _ = _data(rng, shape, dtype)
        assert _conv2d._algorithms(x.shape, w.shape, padding=p)["weight_grad"] == "few channels"
        for s, d in ((1, 1), (2, 1), (1, 2)):
            if not _fits(shape, s, p, d):
                continue
            dy = rng.standard_normal(ref_conv(x, w, None, s, p, d).shape).astype(dtype)
            want = ref_conv_backward(x, w, dy, s, p, d)[1]
            scale = ref_conv_backward(np.abs(x), np.abs(w), np.abs(dy), s, p, d)[1]
            got = []
            for n in (1, 2):
                with ndws.num_threads(n):
                    gw = F.conv2d_backward(x, w, dy, s, p, d, need_input=False,
                                           need_bias=False)[1]
                close(gw, want, scale, dtype)
                got.append(np.asarray(gw).copy())
            assert np.array_equal(got[0], got[1])
            # NHWC (dY's channels are its last axis: always copied) and a strided dY
            gw = F.conv2d_backward(nhwc(x), w, nhwc(dy), s, p, d, data_format="NHWC",
                                   need_input=False, need_bias=False)[1]
            close(gw, want, scale, dtype)
            wide = np.zeros(dy.shape[:3] + (2 * dy.shape[3],), dtype)
            wide[..., ::2] = dy
            gw = F.conv2d_backward(x, w, wide[..., ::2], s, p, d, need_input=False,
                                   need_bias=False)[1]
            close(gw, want, scale, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_few_channel_weight_gradient_groups_give_the_same_bits_on_1_2_and_3_threads(
        rng, dtype, small_grains):
    # The pieces go, in order, to a fixed number of groups (8 at most, by the shape), each
    # summed into its own accumulator by whichever thread claims it, the accumulators added in
    # group order at the end: 11 images into 8 groups (three of two pieces, five of one), 12
    # pieces of rows into 8, one image cut into 4 pieces of 8 rows (4 groups); dY in place or
    # copied (NHWC). The bits do not depend on the threads, nor on a scratch that holds copies
    # for fewer threads than asked.
    from ndws.nn import _conv2d
    for shape, p, fmt, groups in [((11, 3, 16, 16, 8, (3, 3)), 1, "NCHW", 8),
                                  ((11, 3, 16, 16, 8, (3, 3)), 1, "NHWC", 8),
                                  ((2, 1, 102, 202, 4, (3, 3)), 0, "NCHW", 8),
                                  ((1, 3, 32, 32, 32, (3, 3)), 1, "NCHW", 4)]:
        x, w, _ = _data(rng, shape, dtype)
        algos = _conv2d._algorithms(x.shape, w.shape, padding=p, dtype=dtype)
        assert (algos["weight_grad"], algos["weight_grad_tasks"]) == ("few channels", groups)
        dy = rng.standard_normal(ref_conv(x, w, None, 1, p).shape).astype(dtype)
        xx, dyy = (nhwc(x), nhwc(dy)) if fmt == "NHWC" else (x, dy)
        need = {n: F.conv2d_scratch_bytes(xx.shape, w.shape, padding=p, data_format=fmt,
                                          dtype=dtype, backward=True, threads=n)
                for n in (1, 2, 3)}
        assert need[1] < need[2] < need[3]      # a copy of a piece per thread
        got = []
        for n, scratch in [(1, None), (2, None), (3, None), (3, need[1]), (3, need[2])]:
            with ndws.num_threads(n):
                gw = F.conv2d_backward(
                    xx, w, dyy, padding=p, data_format=fmt, need_input=False, need_bias=False,
                    scratch=None if scratch is None else np.empty(scratch, np.uint8))[1]
            got.append(np.asarray(gw).copy())
        for g in got[1:]:
            assert np.array_equal(got[0], g)
        close(got[0], ref_conv_backward(x, w, dy, 1, p)[1],
              ref_conv_backward(np.abs(x), np.abs(w), np.abs(dy), 1, p)[1], dtype)


def test_few_channel_nan_stays_in_its_own_pairs(rng):
    # positions past a plane's end are zeros in both operands: an inf in dY's next plane (read
    # in place) never reaches a pair of another channel
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    dy[0, 1, 0, 0] = np.inf
    gw = np.asarray(F.conv2d_backward(x, w, dy, padding=1, need_input=False,
                                      need_bias=False)[1])
    assert np.isfinite(gw[[0, 2, 3]]).all()
    assert not np.isfinite(gw[1]).all()


@contextlib.contextmanager
def _build(isa, runnable, use):
    # the loops of one instruction-set build for the duration (skipped on a CPU without it)
    if isa not in runnable():
        pytest.skip(f"this CPU cannot run the {isa} loops")
    prev = use(isa)
    try:
        yield
    finally:
        use(prev)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "baseline"])
def test_every_build_of_the_few_channel_loops(rng, isa):
    from ndws.nn import _conv_few
    with _build(isa, _conv_few._few_isas, _conv_few._use_few_isa):
        for dtype in DTYPES:
            for shape, p in FEW[:3]:
                x, w, _ = _data(rng, shape, dtype)
                dy = rng.standard_normal(ref_conv(x, w, None, 1, p).shape).astype(dtype)
                gw = F.conv2d_backward(x, w, dy, padding=p, need_input=False,
                                       need_bias=False)[1]
                close(gw, ref_conv_backward(x, w, dy, 1, p)[1],
                      ref_conv_backward(np.abs(x), np.abs(w), np.abs(dy), 1, p)[1], dtype)
            for shape, p, s, d in FEW_FWD:
                x, w, b = _data(rng, shape, dtype)
                close(F.conv2d(x, w, b, s, p, d, activation="relu"),
                      np.maximum(ref_conv(x, w, b, s, p, d), 0),
                      ref_conv(np.abs(x), np.abs(w), np.abs(b), s, p, d), dtype)
    with pytest.raises(ValueError, match="_use_few_isa: expected one of"):
        _conv_few._use_few_isa("sse9")


@pytest.mark.parametrize("isa", ["avx512", "avx2", "baseline"])
def test_every_build_of_the_depthwise_loops(rng, isa):
    from ndws.nn import _depthwise
    with _build(isa, _depthwise._dw_isas, _depthwise._use_dw_isa):
        for dtype, width in itertools.product(DTYPES, (7, 18, 41)):
            x = rng.standard_normal((2, 3, 9, width)).astype(dtype)
            w = rng.standard_normal((3, 1, 3, 3)).astype(dtype)
            y = F.depthwise_conv2d(x, w, None, padding=1)
            close(y, ref_depthwise(x, w, None, 1, 1),
                  ref_depthwise(np.abs(x), np.abs(w), None, 1, 1), dtype)
            dy = rng.standard_normal(np.asarray(y).shape).astype(dtype)
            gx, gw, _ = F.depthwise_conv2d_backward(x, w, dy, padding=1)
            dense = np.zeros((3, 3, 3, 3))
            for c in range(3):
                dense[c, c] = w[c, 0]
            rx, rw, _ = ref_conv_backward(x, dense, dy, 1, 1)
            sx, sw, _ = ref_conv_backward(np.abs(x), np.abs(dense), np.abs(dy), 1, 1)
            close(gx, rx, sx, dtype)
            close(np.asarray(gw)[:, 0], np.stack([rw[c, c] for c in range(3)]),
                  np.stack([sw[c, c] for c in range(3)]), dtype)
            # a plane's rows go four at a time, the rest one by one: an output row computed in
            # a group of four (x cropped by a row: rows 1-4 of the 7) or alone (row 4 of 7)
            # has the same bits
            y7 = np.asarray(F.depthwise_conv2d(x, w, None))
            y6 = np.asarray(F.depthwise_conv2d(x[:, :, 1:], w, None))
            assert np.array_equal(y7[:, :, 1:], y6)
    with pytest.raises(ValueError, match="expected one of"):
        _depthwise._use_dw_isa("sse9")


def test_depthwise_kernel_beyond_the_vector_path(rng):
    # 17x17 = 289 taps: past the row kernels' limit, the generic loops
    x = rng.standard_normal((1, 2, 20, 40))
    w = rng.standard_normal((2, 1, 17, 17))
    y = F.depthwise_conv2d(x, w, None, padding=3)
    close(y, ref_depthwise(x, w, None, 1, 3), ref_depthwise(np.abs(x), np.abs(w), None, 1, 3),
          np.float64)
    dy = rng.standard_normal(np.asarray(y).shape)
    gx, gw, _ = F.depthwise_conv2d_backward(x, w, dy, padding=3)
    dense = np.zeros((2, 2, 17, 17))
    dense[0, 0], dense[1, 1] = w[0, 0], w[1, 0]
    rx, rw, _ = ref_conv_backward(x, dense, dy, 1, 3)
    np.testing.assert_allclose(np.asarray(gx), rx, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(gw)[:, 0], np.stack([rw[0, 0], rw[1, 1]]),
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,alpha", [("relu", None), ("leakyrelu", 0.1), ("tanh", None),
                                        ("sigmoid", None), ("elu", 0.5)])
def test_fused_activation(rng, dtype, name, alpha):
    params = {} if alpha is None else {"alpha": alpha}
    x, w, b = _data(rng, SHAPES[2], dtype)
    pre = F.conv2d(x, w, b, padding=1)
    for fn in (F.conv2d, F.conv_transpose2d):
        if fn is F.conv_transpose2d:
            pre = F.conv_transpose2d(x, w.transpose(1, 0, 2, 3)[:, :10].copy(), b[:10],
                                     padding=1)
            y = fn(x, w.transpose(1, 0, 2, 3)[:, :10].copy(), b[:10], padding=1,
                   activation=name, **params)
        else:
            y = fn(x, w, b, padding=1, activation=name, **params)
        expected = F.activation(name, pre, **params)
        np.testing.assert_allclose(np.asarray(y), np.asarray(expected),
                                   rtol=1e-6 if dtype == np.float32 else 1e-14, atol=1e-7)
    dwy = F.depthwise_conv2d(x, w[:10, :1].copy(), b[:10], padding=1, activation=name, **params)
    np.testing.assert_allclose(
        np.asarray(dwy),
        np.asarray(F.activation(name, F.depthwise_conv2d(x, w[:10, :1].copy(), b[:10],
                                                         padding=1), **params)),
        rtol=1e-6 if dtype == np.float32 else 1e-14, atol=1e-7)


@pytest.mark.parametrize("dtype", DTYPES)
def test_relu_applied_on_the_way_out_keeps_every_bit(rng, dtype):
    # relu (and the bias) are applied as the direct and packed drivers copy a tile out: the
    # same bits as relu after the convolution (NaN passing, a -0.0 bias kept), with and
    # without bias, in either data format
    bits = np.uint32 if dtype == np.float32 else np.uint64
    x, w, b = _data(rng, (2, 3, 9, 8, 5, (3, 3)), dtype)
    x[0, :, :4] = 0
    b[0] = -0.0
    x[1, 1, 5, 5] = np.nan
    for stride, fmt, bias in itertools.product((1, 2), ("NCHW", "NHWC"), (b, None)):
        xin = nhwc(x) if fmt == "NHWC" else x
        algo = _conv2d_algos(x.shape, w.shape, stride)
        assert algo == ("direct" if stride == 1 else "packed")
        y = np.asarray(F.conv2d(xin, w, bias, stride, 1, data_format=fmt, activation="relu"))
        want = np.asarray(F.activation("relu", F.conv2d(xin, w, bias, stride, 1,
                                                        data_format=fmt)))
        assert np.array_equal(y.view(bits), want.view(bits))
        assert np.isnan(y).any() and (y == 0).any()


def _conv2d_algos(x_shape, w_shape, stride):
    from ndws.nn import _conv2d
    return _conv2d._algorithms(x_shape, w_shape, stride, 1)["forward"]


def test_softmax_is_refused_as_fused_activation(rng):
    x, w, b = _data(rng, SHAPES[0], np.float32)
    with pytest.raises(ValueError, match="not elementwise"):
        F.conv2d(x, w, b, activation="softmax")


@pytest.mark.parametrize("dtype", DTYPES)
def test_im2col_col2im_match_numpy(rng, dtype):
    x = rng.standard_normal((2, 3, 7, 6)).astype(dtype)
    for s, p, d in GRID:
        col = F.im2col(x, (3, 2), stride=s, padding=p, dilation=d)
        s2, p4, d2 = _pair(s), _pad4(p), _pair(d)
        OH, OW = _geom((7, 6), (3, 2), s2, p4, d2)
        xp = np.pad(x, ((0, 0), (0, 0), (p4[0], p4[1]), (p4[2], p4[3])))
        ref = np.zeros((2, 3, 3, 2, OH, OW), dtype)
        for i, j, rs, cs in _taps((3, 2), s2, p4, d2, OH, OW):
            ref[:, :, i, j] = xp[:, :, rs, cs]
        assert np.array_equal(np.asarray(col), ref)
        # col2im: the adjoint (<im2col(x), c> == <x, col2im(c)>) and the scatter itself
        c = rng.standard_normal(ref.shape).astype(dtype)
        back = np.asarray(F.col2im(c, (7, 6), stride=s, padding=p, dilation=d))
        refb = np.zeros_like(xp, dtype=np.float64)
        for i, j, rs, cs in _taps((3, 2), s2, p4, d2, OH, OW):
            refb[:, :, rs, cs] += c[:, :, i, j]
        np.testing.assert_allclose(back, refb[:, :, p4[0]:p4[0] + 7, p4[2]:p4[2] + 6],
                                   rtol=1e-6, atol=1e-6)


def test_im2col_nhwc_layout(rng):
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    col = np.asarray(F.im2col(x, 3, padding=1))                     # (n, c, kh, kw, oh, ow)
    colh = np.asarray(F.im2col(nhwc(x), 3, padding=1, data_format="NHWC"))   # (n, oh, ow, kh, kw, c)
    assert colh.shape == (2, 6, 5, 3, 3, 3)
    assert np.array_equal(colh, col.transpose(0, 4, 5, 2, 3, 1))
    back = F.col2im(colh, (6, 5), padding=1, data_format="NHWC")
    assert np.array_equal(nchw(back), np.asarray(F.col2im(col, (6, 5), padding=1)))


# ------------------------------------------------------------------------------------------------
# Gradients by central differences (float64)


def _numgrad(f, a, rng, count=12, eps=1e-6):
    """Central differences of scalar f at `count` random entries of a (in place)."""
    flat = a.reshape(-1)
    idx = rng.choice(flat.size, size=min(count, flat.size), replace=False)
    out = []
    for i in idx:
        old = flat[i]
        flat[i] = old + eps
        up = f()
        flat[i] = old - eps
        down = f()
        flat[i] = old
        out.append((up - down) / (2 * eps))
    return idx, np.array(out)


@pytest.mark.parametrize("case", ["conv", "transpose", "depthwise"])
def test_gradients_by_central_differences(rng, case):
    s, p, d = 2, (1, 0, 2, 1), (1, 2)
    if case == "transpose":
        x = rng.standard_normal((2, 3, 4, 5))
        w = rng.standard_normal((3, 4, 3, 2))
        b = rng.standard_normal(4)
        fwd, bwd = F.conv_transpose2d, F.conv_transpose2d_backward
    elif case == "depthwise":
        x = rng.standard_normal((2, 3, 7, 8))
        w = rng.standard_normal((3, 2, 3, 2))
        b = rng.standard_normal(6)
        fwd, bwd = F.depthwise_conv2d, F.depthwise_conv2d_backward
    else:
        x = rng.standard_normal((2, 3, 7, 8))
        w = rng.standard_normal((4, 3, 3, 2))
        b = rng.standard_normal(4)
        fwd, bwd = F.conv2d, F.conv2d_backward
    r = rng.standard_normal(np.asarray(fwd(x, w, b, s, p, d)).shape)

    def loss():
        return float((np.asarray(fwd(x, w, b, s, p, d)) * r).sum())

    gx, gw, gb = bwd(x, w, r, s, p, d)
    for arr, grad in ((x, gx), (w, gw), (b, gb)):
        idx, num = _numgrad(loss, arr, rng)
        np.testing.assert_allclose(np.asarray(grad).reshape(-1)[idx], num, rtol=1e-6,
                                   atol=1e-7)


# ------------------------------------------------------------------------------------------------
# PyTorch as a second oracle

try:
    import torch as _torch
except ImportError:         # pragma: no cover - torch is optional
    _torch = None
needs_torch = pytest.mark.skipif(_torch is None, reason="PyTorch is not installed")


@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
def test_against_torch(rng, dtype):
    TF = _torch.nn.functional
    cases = [((8, 1, 28, 28), (20, 1, 5, 5), 1, 0, 1), ((4, 20, 12, 12), (50, 20, 5, 5), 1, 0, 1),
             ((2, 16, 10, 10), (16, 16, 3, 3), 1, 1, 1), ((2, 8, 11, 9), (12, 8, 3, 3), 2, 1, 2),
             ((2, 32, 7, 7), (8, 32, 1, 1), 1, 0, 1)]
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    for xs, ws, s, p, d in cases:
        x = rng.standard_normal(xs).astype(dtype)
        w = rng.standard_normal(ws).astype(dtype)
        b = rng.standard_normal(ws[0]).astype(dtype)
        xt = _torch.from_numpy(x).requires_grad_()
        wt = _torch.from_numpy(w).requires_grad_()
        bt = _torch.from_numpy(b).requires_grad_()
        yt = TF.conv2d(xt, wt, bt, stride=s, padding=p, dilation=d)
        dy = rng.standard_normal(tuple(yt.shape)).astype(dtype)
        yt.backward(_torch.from_numpy(dy))
        np.testing.assert_allclose(np.asarray(F.conv2d(x, w, b, s, p, d)), yt.detach().numpy(),
                                   **tol)
        gx, gw, gb = F.conv2d_backward(x, w, dy, s, p, d)
        np.testing.assert_allclose(np.asarray(gx), xt.grad.numpy(), **tol)
        np.testing.assert_allclose(np.asarray(gw), wt.grad.numpy(), **tol)
        np.testing.assert_allclose(np.asarray(gb), bt.grad.numpy(), **tol)
        # the transposed convolution (w read as (c_in_t, c_out_t, kh, kw)) and the depthwise
        bt2 = rng.standard_normal(ws[1]).astype(dtype)
        np.testing.assert_allclose(
            np.asarray(F.conv_transpose2d(dy, w, bt2, s, p, d)),
            TF.conv_transpose2d(_torch.from_numpy(dy), _torch.from_numpy(w),
                                _torch.from_numpy(bt2), stride=s, padding=p,
                                dilation=d).numpy(), **tol)
        dw = rng.standard_normal((xs[1], 2, 3, 3)).astype(dtype)
        np.testing.assert_allclose(
            np.asarray(F.depthwise_conv2d(x, dw, None, s, 1, d)),
            TF.conv2d(xt.detach(), _torch.from_numpy(dw.reshape(-1, 1, 3, 3)), stride=s,
                      padding=1, dilation=d, groups=xs[1]).numpy(), **tol)


# ------------------------------------------------------------------------------------------------
# Threads, instruction sets, placement


@pytest.mark.parametrize("dtype", DTYPES)
def test_bit_identical_on_one_and_two_threads(rng, dtype, small_grains):
    for shape, (s, p, d) in [(SHAPES[0], (1, 1, 1)), (SHAPES[1], (1, 0, 1)),
                             (SHAPES[2], (2, 1, 1)), ((9, 10, 9, 9, 40, (3, 3)), (1, 1, 1)),
                             ((1, 12, 20, 20, 16, (3, 3)), (1, 1, 1))]:
        x, w, b = _data(rng, shape, dtype)
        dy = rng.standard_normal(ref_conv(x, w, b, s, p, d).shape).astype(dtype)
        dwk = rng.standard_normal((shape[1], 2, 3, 3)).astype(dtype)
        results = []
        for n in (1, 2):
            with ndws.num_threads(n):
                y = np.asarray(F.conv2d(x, w, b, s, p, d)).copy()
                g = [np.asarray(a).copy() for a in F.conv2d_backward(x, w, dy, s, p, d)]
                t = np.asarray(F.conv_transpose2d(dy, w, None, s, p, d)).copy()
                dwy = np.asarray(F.depthwise_conv2d(x, dwk, None, s, 1, d)).copy()
                dwg = [np.asarray(a).copy() for a in F.depthwise_conv2d_backward(
                    x, dwk, np.ones_like(dwy), s, 1, d)]
                results.append([y, t, dwy] + g + dwg)
        for a, c in zip(*results):
            assert np.array_equal(a, c)


@pytest.mark.parametrize("dtype", DTYPES)
def test_weight_gradient_chunks_give_the_same_bits_on_one_and_two_threads(rng, dtype,
                                                                          small_grains):
    # Images of 1024+ output positions go two per chunk, so these batches take 3 chunks: with
    # two threads a chunk's copies run beside the previous chunk's products (three sets of
    # chunk buffers), with one they alternate; x is read in place when it has no padding and whole
    # register-tile groups of channels (24 = 3 x 8 = 4 x 6), else copied padded, or channels
    # last for row taps (16 -> 16 on an 8x32 tile, 16 -> 12 on 6x16). Also NHWC and a strided
    # view, and scratches for fewer sets of chunk buffers than two threads use.
    for shape, (s, p), fmt, view in [((5, 16, 32, 32, 12, (3, 3)), (1, 1), "NCHW", False),
                                     ((5, 16, 32, 32, 16, (3, 3)), (1, 1), "NCHW", False),
                                     ((5, 16, 32, 32, 16, (3, 3)), (1, 1), "NCHW", True),
                                     ((5, 16, 32, 32, 16, (3, 3)), (2, 1), "NHWC", False),
                                     ((5, 24, 33, 33, 20, (1, 1)), (1, 0), "NCHW", False),
                                     ((5, 24, 33, 33, 20, (1, 1)), (1, 0), "NCHW", True),
                                     ((5, 24, 34, 34, 9, (3, 3)), (1, 0), "NHWC", False),
                                     ((6, 3, 66, 66, 8, (3, 3)), (2, 1), "NCHW", False)]:
        x, w, _ = _data(rng, shape, dtype)
        if view:
            x = np.ascontiguousarray(np.concatenate([x, x], axis=1))[:, ::2]
        oh = (shape[2] + 2 * p - shape[5][0]) // s + 1
        dy = rng.standard_normal((shape[0], shape[4], oh, oh)).astype(dtype)
        xx, dyy = (nhwc(x), nhwc(dy)) if fmt == "NHWC" else (x, dy)
        got = {}
        for n in (1, 2):
            with ndws.num_threads(n):
                got[n] = np.asarray(F.conv2d_backward(xx, w, dyy, s, p, data_format=fmt,
                                                      need_input=False, need_bias=False)[1])
        need1, need2 = (F.conv2d_scratch_bytes(xx.shape, w.shape, s, p, data_format=fmt,
                                               dtype=dtype, backward=True, threads=n)
                        for n in (1, 2))
        assert need2 >= need1 + (s == 1)     # (stride 2: a single chunk of 5 images)
        # a scratch for one set of chunk buffers, and for two of the three
        for i, need in enumerate((need1, (need1 + need2) // 2), 3):
            with ndws.num_threads(2):
                got[i] = np.asarray(F.conv2d_backward(
                    xx, w, dyy, s, p, data_format=fmt, need_input=False, need_bias=False,
                    scratch=np.empty(need, np.uint8))[1])
        for i in (2, 3, 4):
            assert np.array_equal(got[1], got[i])
        close(got[1], ref_conv_backward(x, w, dy, s, p)[1],
              ref_conv_backward(np.abs(x), w, np.abs(dy), s, p)[1], dtype)


@pytest.mark.parametrize("isa", la.available_isas())
def test_an_image_gets_the_same_bits_alone_and_in_a_batch(rng, isa):
    # Every output is its own fma chain over the taps, whichever tile computes it: alone, an
    # image's last panel of positions (or Winograd tiles) is short and may run a tile one
    # vector wide; in a batch the same outputs sit in full panels. Also channel panels of
    # fewer than a vector (20 = 16 + 4 output channels of a 1x1 with positions as the rows).
    from ndws.nn import _conv2d
    with _build(isa, la.available_isas, la._use_isa):
        seen = set()
        for (N, C, H, W, O, k), p in [((3, 16, 6, 7, 16, (3, 3)), 1),
                                      ((3, 16, 9, 9, 24, (3, 3)), 1),
                                      ((3, 20, 10, 10, 50, (5, 5)), 0),
                                      ((3, 64, 7, 7, 20, (1, 1)), 0),
                                      ((3, 8, 9, 11, 12, (2, 2)), 0)]:
            for dtype in DTYPES:
                x, w, b = _data(rng, (N, C, H, W, O, k), dtype)
                seen.add(_conv2d._algorithms(x.shape, w.shape, padding=p)["forward"])
                whole = np.asarray(F.conv2d(x, w, b, padding=p))
                for i in range(N):
                    alone = np.asarray(F.conv2d(x[i:i + 1], w, b, padding=p))
                    np.testing.assert_array_equal(alone[0], whole[i])
        # (and positions for the 1x1 where the build's tile grid picks them: the baseline's)
        assert {"winograd", "packed", "direct"} <= seen, seen


@pytest.mark.parametrize("isa", la.available_isas())
def test_row_taps_give_the_bits_of_channel_taps(rng, isa):
    # Row taps (tiles of MR output channels x NR (kernel column, channel) pairs) and channel
    # taps (MR channels at one kernel position x NR output channels) sum the same products in
    # the same order. A row's last group of at most one vector of pairs (AVX-512 float32: 5 x 3
    # = 15, 12 x 3 = 36 = 32 + 4, 16 x 3 = 48 = 32 + 16) runs a tile one vector wide, which
    # must not change a bit either. 2*MR output channels take row taps, 4*MR channel taps; the
    # first 2*MR of the latter see the same dY.
    from ndws.nn import _conv2d
    with _build(isa, la.available_isas, la._use_isa):
        for dtype in DTYPES:
            mr = la._gemm_info()[np.dtype(dtype).name]["mr"]
            hits = 0
            for c in (5, 8, 12, 16, 24):
                x = rng.standard_normal((3, c, 20, 20)).astype(dtype)
                dy = rng.standard_normal((3, 4 * mr, 20, 20)).astype(dtype)
                w_row, w_cha = (np.zeros((k * mr, c, 3, 3), dtype) for k in (2, 4))
                kinds = [_conv2d._algorithms(x.shape, w_.shape, 1, 1, 1)["weight_grad"]
                         for w_ in (w_row, w_cha)]
                if kinds != ["row taps", "channel taps"]:
                    continue
                hits += 1
                row = F.conv2d_backward(x, w_row, np.ascontiguousarray(dy[:, :2 * mr]), 1, 1,
                                        need_input=False, need_bias=False)[1]
                cha = F.conv2d_backward(x, w_cha, dy, 1, 1, need_input=False,
                                        need_bias=False)[1]
                np.testing.assert_array_equal(np.asarray(row), np.asarray(cha)[:2 * mr])
            # the tile grids of the AVX-512 build take row taps for some of these channel counts
            assert hits > 0 or isa != "avx512"


@pytest.mark.parametrize("isa", la.available_isas())
def test_every_gemm_build_computes_the_same_convolution(rng, isa):
    # each build has its own register tile (MR x NR): the panels' edges move
    with _build(isa, la.available_isas, la._use_isa):
        for shape, (s, p, d) in [(SHAPES[0], (1, 1, 1)), (SHAPES[2], (2, 1, 1)),
                                 (SHAPES[1], (1, 0, 1)), ((2, 9, 6, 7, 13, (3, 3)), (1, 1, 2))]:
            for dtype in DTYPES:
                x, w, b = _data(rng, shape, dtype)
                ref = ref_conv(x, w, b, s, p, d)
                close(F.conv2d(x, w, b, s, p, d), ref,
                      ref_conv(np.abs(x), np.abs(w), np.abs(b), s, p, d), dtype)
                dy = rng.standard_normal(ref.shape).astype(dtype)
                got = F.conv2d_backward(x, w, dy, s, p, d)
                want = ref_conv_backward(x, w, dy, s, p, d)
                scale = ref_conv_backward(np.abs(x), np.abs(w), np.abs(dy), s, p, d)
                for g_, r_, s_ in zip(got, want, scale):
                    close(g_, r_, s_, dtype)


def test_results_and_scratch_are_placed_in_the_current_workspace(rng):
    x, w, b = _data(rng, SHAPES[0], np.float32)
    with ndws.num_threads(1):
        need = F.conv2d_scratch_bytes(x.shape, w.shape, padding=1, threads=1)
        with ndws.workspace("CONV_WS") as ws:
            before = ws.this_cycle_allocations
            y = F.conv2d(x, w, b, padding=1)
            used = ws.this_cycle_allocations - before
            assert y.workspace_id == "CONV_WS"
            rup = lambda n: -(-n // 64) * 64
            assert used == rup(y.nbytes) + rup(need)
            # with the caller's scratch, only the result is allocated
            scratch = ndws.empty(need, dtype=np.uint8)
            before = ws.this_cycle_allocations
            y2 = F.conv2d(x, w, b, padding=1, scratch=scratch)
            assert ws.this_cycle_allocations - before == rup(y2.nbytes)
            assert np.array_equal(np.asarray(y), np.asarray(y2))
            # and with out= as well, nothing at all
            before = ws.this_cycle_allocations
            F.conv2d(x, w, b, padding=1, scratch=scratch, out=y2)
            assert ws.this_cycle_allocations == before


def test_backward_scratch_bytes_cover_the_call(rng):
    for shape, (s, p, d) in [(SHAPES[0], (1, 1, 1)), (SHAPES[1], (2, 1, 1)),
                             (SHAPES[2], (1, (1, 0, 2, 1), 2))]:
        x, w, b = _data(rng, shape, np.float64)
        dy = rng.standard_normal(ref_conv(x, w, b, s, p, d).shape)
        for threads in (1, 2):
            need = F.conv2d_scratch_bytes(x.shape, w.shape, s, p, d, dtype=np.float64,
                                          backward=True, threads=threads)
            with ndws.num_threads(threads):
                got = F.conv2d_backward(x, w, dy, s, p, d, scratch=np.empty(need, np.uint8))
            want = F.conv2d_backward(x, w, dy, s, p, d)
            for a, c in zip(got, want):
                assert np.array_equal(np.asarray(a), np.asarray(c))
            with pytest.raises(ValueError, match="scratch has"):
                F.conv2d_backward(x, w, dy, s, p, d, scratch=np.empty(64, np.uint8))
        t_need = F.conv2d_scratch_bytes(dy.shape, w.shape, s, p, d, dtype=np.float64,
                                        transposed=True, threads=1)
        with ndws.num_threads(1):
            F.conv_transpose2d(dy, w, None, s, p, d, scratch=np.empty(t_need, np.uint8))


def test_a_smaller_scratch_only_uses_fewer_threads(rng, small_grains):
    x, w, b = _data(rng, (9, 10, 9, 9, 40, (3, 3)), np.float32)
    one = F.conv2d_scratch_bytes(x.shape, w.shape, padding=1, threads=1)
    two = F.conv2d_scratch_bytes(x.shape, w.shape, padding=1, threads=2)
    assert two > one
    with ndws.num_threads(2):
        a = np.asarray(F.conv2d(x, w, b, padding=1, scratch=np.empty(one, np.uint8)))
        c = np.asarray(F.conv2d(x, w, b, padding=1, scratch=np.empty(two, np.uint8)))
    assert np.array_equal(a, c)


def test_repeated_calls_in_a_workspace_learn_and_stop_allocating(rng):
    from ndws._memory import allocation_counters
    x, w, b = _data(rng, SHAPES[2], np.float32)
    dy = np.ones(ref_conv(x, w, b, 1, 1, 1).shape, np.float32)
    conf = ndws.WorkspaceConfiguration(policy_learning=ndws.LearningPolicy.FIRST_LOOP)

    def step():
        with ndws.workspace("CONV_LOOP", conf):
            F.conv2d(x, w, b, padding=1, activation="relu")
            F.conv2d_backward(x, w, dy, padding=1)

    for _ in range(3):
        step()
    before = allocation_counters()["allocations"]
    for _ in range(5):
        step()
    assert allocation_counters()["allocations"] == before


# ------------------------------------------------------------------------------------------------
# Hostile input


def test_bad_geometry_is_refused(rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    with pytest.raises(ValueError, match="kernel height 5 is larger than the input height 4 "
                                         r"plus padding \(0, 0\)"):
        F.conv2d(x, w)
    with pytest.raises(ValueError, match=r"kernel width 9 \(dilated from 5\)"):
        F.conv2d(x, w, padding=(1, 0), dilation=(1, 2))
    w3 = w[:, :, :3, :3]
    with pytest.raises(ValueError, match="stride must be >= 1, got 0"):
        F.conv2d(x, w3, stride=0)
    with pytest.raises(ValueError, match="padding must be >= 0, got -1"):
        F.conv2d(x, w3, padding=(0, 0, -1, 0))
    with pytest.raises(ValueError, match="padding must be an int, a pair"):
        F.conv2d(x, w3, padding=(1, 1, 1))
    with pytest.raises(TypeError, match="stride must be an int or a pair of ints"):
        F.conv2d(x, w3, stride=1.5)
    with pytest.raises(TypeError, match="dilation must be an int"):
        F.conv2d(x, w3, dilation=True)
    with pytest.raises(ValueError, match="x must be 4-D, got shape"):
        F.conv2d(x[0], w3)
    with pytest.raises(ValueError, match="w must be 4-D"):
        F.conv2d(x, w3[0])
    with pytest.raises(ValueError, match="x has 3 channels .* but w expects 2"):
        F.conv2d(x, w3[:, :2])
    with pytest.raises(ValueError, match="data_format must be 'NCHW' or 'NHWC'"):
        F.conv2d(x, w3, data_format="NWHC")
    with pytest.raises(ValueError, match=r"b must have shape \(4,\)"):
        F.conv2d(x, w3, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="the kernel must be at least 1x1"):
        F.conv2d(x, np.zeros((4, 3, 0, 3), np.float32))


def test_nhwc_data_into_nchw_is_named(rng):
    x = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)        # NHWC data
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    with pytest.raises(ValueError, match="x looks like NHWC data: pass data_format='NHWC'"):
        F.conv2d(x, w)
    with pytest.raises(ValueError, match="x looks like NCHW data"):
        F.conv2d(nchw(x).copy(), w, data_format="NHWC")
    with pytest.raises(ValueError, match="x looks like NHWC data"):
        F.depthwise_conv2d(x, np.ones((3, 1, 3, 3), np.float32))


def test_bad_dtypes_are_refused(rng):
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3))
    with pytest.raises(TypeError, match="w has dtype float64, expected float32"):
        F.conv2d(x, w)
    with pytest.raises(TypeError, match="float32 or float64"):
        F.conv2d(x.astype(np.int32), w.astype(np.int32))
    with pytest.raises(TypeError, match="float32 or float64"):
        F.conv2d(x.astype(np.complex64), w)
    with pytest.raises(TypeError, match="grad_output has dtype float64"):
        F.conv2d_backward(x, w.astype(np.float32), np.zeros((1, 3, 3, 3)))
    with pytest.raises(ValueError, match=r"grad_output has shape \(1, 3, 4, 3\), expected "
                                         r"\(1, 3, 3, 3\)"):
        F.conv2d_backward(x, w.astype(np.float32), np.zeros((1, 3, 4, 3), np.float32))
    with pytest.raises(TypeError, match="out has dtype float64, expected float32"):
        F.conv2d(x, w.astype(np.float32), out=np.zeros((1, 3, 3, 3)))
    with pytest.raises(ValueError, match=r"out has shape \(1, 3, 3, 4\), expected"):
        F.conv2d(x, w.astype(np.float32), out=np.zeros((1, 3, 3, 4), np.float32))
    ro = np.zeros((1, 3, 3, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        F.conv2d(x, w.astype(np.float32), out=ro)


def test_nan_and_inf_propagate(rng):
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    x[0, 0, 5, 5] = np.inf
    w = np.ones((1, 2, 3, 3), np.float32)
    y = np.asarray(F.conv2d(x, w))
    ref = ref_conv(x, w, None)
    assert np.array_equal(np.isnan(y), np.isnan(ref))
    assert np.array_equal(np.isinf(y), np.isinf(ref))


def test_zero_size_batch_and_channels(rng):
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    x = np.zeros((0, 3, 5, 5), np.float32)
    y = F.conv2d(x, w)
    assert y.shape == (0, 4, 3, 3)
    gx, gw, gb = F.conv2d_backward(x, w, np.zeros((0, 4, 3, 3), np.float32))
    assert gx.shape == (0, 3, 5, 5)
    assert np.array_equal(np.asarray(gw), np.zeros_like(w))
    assert np.array_equal(np.asarray(gb), np.zeros(4, np.float32))
    # no input channels: the bias alone
    y = F.conv2d(np.zeros((2, 0, 5, 5), np.float32), np.zeros((4, 0, 3, 3), np.float32),
                 np.arange(4, dtype=np.float32))
    assert np.array_equal(np.asarray(y), np.broadcast_to(np.arange(4.0)[:, None, None],
                                                         (2, 4, 3, 3)))
    assert F.depthwise_conv2d(x, np.ones((3, 2, 3, 3), np.float32)).shape == (0, 6, 3, 3)
    assert F.im2col(x, 3).shape == (0, 3, 3, 3, 3, 3)


def test_overflowing_sizes_fail_before_allocating():
    # 2**60-element stand-ins (zero strides): their results would pass 2**62 bytes
    zero = np.zeros((), np.float32)
    huge = np.broadcast_to(zero, (1 << 16, 1 << 16, 1 << 14, 1 << 14))
    w = np.broadcast_to(zero, (1 << 18, 1 << 16, 3, 3))
    with ndws.workspace("CONV_OVERFLOW") as ws:
        before = ws.this_cycle_allocations
        with pytest.raises(ValueError, match="im2col: out of shape .* too large"):
            F.im2col(huge, 3)
        with pytest.raises(ValueError, match="conv2d: out of shape .* too large"):
            F.conv2d(huge, w)
        with pytest.raises(ValueError, match="too large"):
            F.conv_transpose2d(huge, w[:1 << 16], stride=4)
        assert ws.this_cycle_allocations == before
    with pytest.raises(ValueError, match="dilated kernel size overflows"):
        F.conv2d(np.zeros((1, 1, 4, 4), np.float32), np.zeros((1, 1, 3, 3), np.float32),
                 dilation=1 << 61)


def test_out_aliasing_an_input(rng):
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4, 1, 1)).astype(np.float32)
    ref = ref_conv(x, w, None)
    got = F.conv2d(x, w, out=x)                      # 1x1, same shape: in place
    assert got is x
    close(x, ref, ref_conv(np.abs(ref), np.abs(w), None) * 0 + 1e3, np.float32)
    # a gradient written over its own input
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w3 = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    want = [np.asarray(a).copy() for a in F.conv2d_backward(x, w3, dy, padding=1)]
    gx, gw, gb = F.conv2d_backward(x, w3, dy, padding=1, grad_input=dy, grad_weight=w3)
    assert gx is dy and gw is w3
    assert np.array_equal(dy, want[0]) and np.array_equal(w3, want[1])
    with pytest.raises(ValueError, match="grad_input and grad_weight overlap"):
        buf = np.zeros(x.size + w3.size, np.float32)
        F.conv2d_backward(x, w3, dy, padding=1, grad_input=buf[:x.size].reshape(x.shape),
                          grad_weight=buf[x.size - 4:x.size - 4 + w3.size].reshape(w3.shape))
    with pytest.raises(ValueError, match="scratch overlaps"):
        F.conv2d(x, w3, padding=1, scratch=x.view(np.uint8).reshape(-1))


def test_stale_and_foreign_arrays(rng):
    x, w, b = _data(rng, SHAPES[0], np.float32)
    with ndws.workspace("CONV_STALE"):
        sx = ndws.array(x)
        scratch = ndws.empty(1 << 20, dtype=np.uint8)
        out = ndws.empty((2, 5, 9, 8), dtype=np.float32)
    for kwargs in ({"x": sx}, {"scratch": scratch}, {"out": out}):
        args = dict(x=x, scratch=None, out=None)
        args.update(kwargs)
        with pytest.raises(ndws.WorkspaceError, match="conv2d"):
            F.conv2d(args["x"], w, b, padding=1, scratch=args["scratch"], out=args["out"])
    result = {}

    def other():
        with ndws.workspace("CONV_OTHER"):
            result["y"] = np.asarray(F.conv2d(x, w, b, padding=1)).copy()
    import threading
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert np.array_equal(result["y"], np.asarray(F.conv2d(x, w, b, padding=1)))


def test_strided_and_negative_stride_views(rng):
    base = rng.standard_normal((3, 10, 13, 12)).astype(np.float32)
    views = [base[::2, ::2, 1::2, ::-1], base[:, 5:, ::-1, 2:11], base[::-1, :5, :, ::3]]
    for x, (k, p) in itertools.product(views, ((3, 0), (3, 1), (1, 0))):
        w = rng.standard_normal((40, 5, k, k)).astype(np.float32)
        if True:
            close(F.conv2d(x, w, None, padding=p), ref_conv(np.ascontiguousarray(x), w, None, 1, p),
                  ref_conv(np.abs(x), np.abs(w), None, 1, p), np.float32)
            dy = rng.standard_normal(ref_conv(x, w, None, 1, p).shape).astype(np.float32)
            dyv = np.ascontiguousarray(dy[:, ::-1])[:, ::-1]        # a negative-stride dY
            got = F.conv2d_backward(x, w[:, :, ::-1, :], dyv, padding=p)
            want = ref_conv_backward(x, np.ascontiguousarray(w[:, :, ::-1, :]), dy, 1, p)
            scale = ref_conv_backward(np.abs(x), np.abs(w), np.abs(dy), 1, p)
            for g_, r_, s_ in zip(got, want, scale):
                close(g_, r_, s_, np.float32)
    w = rng.standard_normal((6, 5, 3, 3)).astype(np.float32)
    out = np.zeros((2, 12, 6, 24), np.float32)[:, ::2, :, ::-2]     # a strided out=
    y = F.conv2d(views[0], w, None, padding=1, out=out)
    assert y is out
    close(y, ref_conv(views[0], w, None, 1, 1), ref_conv(np.abs(views[0]), np.abs(w), None, 1, 1),
          np.float32)


def test_scratch_arguments_are_checked(rng):
    x, w, b = _data(rng, SHAPES[0], np.float32)
    need = F.conv2d_scratch_bytes(x.shape, w.shape, padding=1, threads=1)
    with pytest.raises(ValueError, match="scratch has 16 bytes"):
        F.conv2d(x, w, padding=1, scratch=np.empty(16, np.uint8))
    ro = np.empty(need, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="scratch is read-only"):
        F.conv2d(x, w, padding=1, scratch=ro)
    with pytest.raises(ValueError, match="scratch must be C-contiguous"):
        F.conv2d(x, w, padding=1, scratch=np.empty(2 * need, np.uint8)[::2])
    with pytest.raises(TypeError, match="scratch must be an NDArray"):
        F.conv2d(x, w, padding=1, scratch=bytearray(need))
    # a failed call leaves the workspace as it was
    with ndws.workspace("CONV_FAIL") as ws:
        before = ws.this_cycle_allocations
        with pytest.raises(ValueError):
            F.conv2d(x, w, padding=1, scratch=np.empty(16, np.uint8))
        with pytest.raises(ValueError):
            F.conv2d_backward(x, w, np.zeros((2, 5, 9, 9), np.float32), padding=1)
        assert ws.this_cycle_allocations == before


def test_scratch_bytes_arguments():
    with pytest.raises(ValueError, match="x_shape must be a tuple of 4 ints"):
        F.conv2d_scratch_bytes((1, 2, 3), (1, 2, 3, 3))
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        F.conv2d_scratch_bytes((1, 2, 8, 8), (1, 2, 3, 3), dtype=np.int32)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        F.conv2d_scratch_bytes((1, 2, 8, 8), (1, 2, 3, 3), threads=0)
    with pytest.raises(ValueError, match="larger than the input"):
        F.conv2d_scratch_bytes((1, 2, 2, 2), (1, 2, 3, 3))
    one = F.conv2d_scratch_bytes((8, 16, 32, 32), (16, 16, 3, 3), padding=1, threads=1)
    assert F.conv2d_scratch_bytes((8, 16, 32, 32), (16, 16, 3, 3), padding=1, threads=2) > one
    assert F.conv2d_scratch_bytes((8, 16, 32, 32), (16, 16, 3, 3), padding=1, backward=True,
                                  threads=1) >= one


# ------------------------------------------------------------------------------------------------
# Size helpers: DL4J's modes


def test_conv_output_size_modes():
    assert F.conv_output_size(28, 5) == 24
    assert F.conv_output_size(28, 5, stride=2, padding=2) == 14
    assert F.conv_output_size(28, 3, stride=2) == 13                       # truncate
    assert F.conv_output_size(28, 3, stride=2, mode="SAME") == 14
    assert F.conv_output_size(10, 3, dilation=2, padding=(1, 2)) == 9
    assert F.conv_output_size(7, 3, stride=2, mode="causal") == 4
    assert F.conv_output_size(27, 3, stride=2, mode="Strict") == 13
    with pytest.raises(ValueError, match="ConvolutionMode.Strict requires: output width"):
        F.conv_output_size(28, 3, stride=2, mode="strict", dim="width")
    with pytest.raises(ValueError, match="Padding cannot be used when using the `same' "
                                         "convolution mode"):
        F.conv_output_size(28, 3, padding=1, mode="same")
    with pytest.raises(ValueError, match=r"Invalid input configuration for kernel height. "
                                         r"Require 0 < kH <= inHeight \+ padding; got \(kH=5, "
                                         r"inHeight=3, padding=\(0, 0\)\)"):
        F.conv_output_size(3, 5)
    with pytest.raises(ValueError, match="effective kernel"):
        F.conv_output_size(5, 3, dilation=3)
    with pytest.raises(ValueError, match=r"Invalid strides: strides must be > 0 \(stride "
                                         r"height = 0\)"):
        F.conv_output_size(28, 3, stride=0)
    with pytest.raises(ValueError, match="mode must be one of"):
        F.conv_output_size(28, 3, mode="valid")
    with pytest.raises(TypeError, match="kernel_size must be an int"):
        F.conv_output_size(28, 3.0)


def test_same_padding_splits_like_dl4j():
    for i, k, s, d in itertools.product([5, 7, 12, 28], [1, 2, 3, 5], [1, 2, 3], [1, 2]):
        top, bottom = F.same_padding(i, k, s, d)
        out = -(-i // s)
        assert bottom - top in (0, 1)
        assert F.conv_output_size(i, k, s, (top, bottom), d) == out
    assert F.same_padding(28, 5, stride=2) == (1, 2)


def test_conv_transpose_output_size():
    assert F.conv_transpose_output_size(12, 5) == 16
    assert F.conv_transpose_output_size(7, 3, stride=2, padding=1) == 13
    assert F.conv_transpose_output_size(7, 3, stride=2, mode="same") == 14
    with pytest.raises(ValueError, match="leaves no output"):
        F.conv_transpose_output_size(1, 1, padding=1)


def test_random_geometries(rng):
    # a sweep over geometries no hand-written case thought of (one found a crash: a depthwise
    # kernel larger than the vector path's table)
    done = 0
    while done < 25:
        dtype = (np.float32, np.float64)[rng.integers(2)]
        N, C, H, W, O = (int(v) for v in rng.integers(1, [3, 20, 14, 40, 36]))
        KH, KW = (int(v) for v in rng.integers(1, 7, 2))
        s = tuple(int(v) for v in rng.integers(1, 4, 2))
        d = tuple(int(v) for v in rng.integers(1, 4, 2))
        p = tuple(int(v) for v in rng.integers(0, 5, 4))
        if (KH - 1) * d[0] + 1 > H + p[0] + p[1] or (KW - 1) * d[1] + 1 > W + p[2] + p[3]:
            continue
        done += 1
        x = rng.standard_normal((N, C, H, W)).astype(dtype)
        w = rng.standard_normal((O, C, KH, KW)).astype(dtype)
        b = rng.standard_normal(O).astype(dtype)
        close(F.conv2d(x, w, b, s, p, d), ref_conv(x, w, b, s, p, d),
              ref_conv(np.abs(x), np.abs(w), np.abs(b), s, p, d), dtype)
        dy = rng.standard_normal(ref_conv(x, w, None, s, p, d).shape).astype(dtype)
        for g_, r_, sc in zip(F.conv2d_backward(x, w, dy, s, p, d),
                              ref_conv_backward(x, w, dy, s, p, d),
                              ref_conv_backward(np.abs(x), np.abs(w), np.abs(dy), s, p, d)):
            close(g_, r_, sc, dtype)
        wd = rng.standard_normal((C, 2, KH, KW)).astype(dtype)
        close(F.depthwise_conv2d(x, wd, None, s, p, d), ref_depthwise(x, wd, None, s, p, d),
              ref_depthwise(np.abs(x), np.abs(wd), None, s, p, d), dtype)
