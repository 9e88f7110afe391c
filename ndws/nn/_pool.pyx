"""Pooling, zero padding, cropping and nearest-neighbour upsampling kernels of
`ndws.nn.functional`, forward and backward.

Every kernel is one pass over its output (a backward one over its input gradient) that
allocates nothing but its result: one output plane (n, c) is one task on the kernel pool, so
each element is computed, or accumulated, in a fixed order whatever the thread count. Arrays
may have any strides and either data format (NCHW or NHWC: the loops see logical (n, c, h, w)
axes, ndws.nn._conv's frame).

Windows follow DL4J's pooling ops (libnd4j ``pooling2d``): a window covers the taps
``(oh*sh - pt + i*dh, ow*sw - pl + j*dw)``; taps in the padding are never read. MAX takes the
first largest value (NaN wins: it propagates); AVG divides by the taps inside the input unless
``include_padding`` (then by kh*kw, DL4J's ``avgPoolIncludePadInDivisor``); PNORM is
``(sum |x|^p)^(1/p)``; SUM adds.
"""
from libc.math cimport fabs, pow, sqrt, isnan
from libc.string cimport memset
cimport numpy as cnp

import numpy as np

from ndws._core cimport NDArray
from ndws._dispatch cimport (array_arg, float_arg, shape_of, arrays_overlap, new_result,
                             discard_result)
from ndws._threads cimport threads_for, release_gil, run_items, GRAIN_NN_CHEAP
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t, int32_t
from ndws.nn._activations cimport copy_into
from ndws.nn._conv cimport (Geom, _imin, _cdiv, parse_pair, parse_padding, parse_format,
                            window_geom, arg4, logical, format_shape, out_array, place)

cnp.import_array()

cdef object _I32 = np.dtype(np.int32)

cdef enum:
    P_MAX = 0
    P_AVG = 1
    P_SUM = 2
    P_PNORM = 3


# ------------------------------------------------------------------------------------------------
# Pooling

ctypedef struct PoolJob:
    Geom g
    int kind, f64
    bint include_pad, back
    bint fast                    # whole windows (MAX, AVG, SUM) or MAX backward by indices
    double p                     # PNORM's exponent
    const char* x
    intp_t xs[4]
    char* y                      # forward: output; backward: grad_output (read)
    intp_t ys[4]
    char* dx                     # backward: the input gradient
    intp_t dxs[4]
    char* idx                    # MAX: int32 flat indices (ih*W + iw) per output, or NULL
    intp_t is_[4]


cdef inline void _taps(const Geom* g, intp_t o, intp_t S, intp_t P, intp_t D, intp_t K,
                       intp_t size, intp_t* first, intp_t* last) noexcept nogil:
    # taps k in [first, last) of window o that fall inside [0, size)
    cdef intp_t start = o * S - P
    first[0] = 0 if start >= 0 else _cdiv(-start, D)
    last[0] = _imin(K, _cdiv(size - start, D)) if size > start else 0
    if last[0] < first[0]:
        last[0] = first[0]


cdef inline floating_t _pnorm_pow(floating_t v, double p) noexcept nogil:
    if p == 2:
        return v * v
    if p == 1:
        return fabs(v)
    return <floating_t>pow(fabs(v), p)


cdef inline bint _whole_windows(const PoolJob* j) noexcept nogil:
    # every window lies inside the input, undilated, along rows of unit stride (NCHW, or any
    # layout whose width is its innermost axis): the taps need no clipping and no division.
    # MAX, AVG and SUM have loops for such windows; PNORM's exponent costs more than the
    # clipping, so it keeps the general loop.
    cdef const Geom* g = &j.g
    return (j.kind != P_PNORM and g.DH == 1 and g.DW == 1 and g.PT == 0 and g.PL == 0
            and (g.OH - 1) * g.SH + g.KH <= g.H and (g.OW - 1) * g.SW + g.KW <= g.W
            and j.xs[3] == 1 and j.ys[3] == 1 and (j.idx == NULL or j.is_[3] == 1))


cdef inline floating_t _window_sum(const floating_t* row, intp_t xs2, intp_t KH,
                                   intp_t KW) noexcept nogil:
    # the sum of a whole window. Wide windows (global pooling: one window per plane) are
    # summed in 8 lanes, combined pairwise: a single accumulator waits on every add's latency
    # (4 cycles), 8 hide it and let the compiler vectorize; narrow ones in the general loop's
    # order. Either way a fixed order: the same bits whatever the thread count.
    cdef floating_t acc = 0
    cdef floating_t s[8]
    cdef const floating_t* r
    cdef intp_t i, k, l
    if KW < 16:
        for i in range(KH):
            for k in range(KW):
                acc += row[i * xs2 + k]
        return acc
    for l in range(8):
        s[l] = 0
    for i in range(KH):
        r = row + i * xs2
        k = 0
        while k + 8 <= KW:
            for l in range(8):
                s[l] += r[k + l]
            k += 8
        while k < KW:
            s[k & 7] += r[k]
            k += 1
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))


cdef void _sum_plane_fwd(const PoolJob* j, const floating_t* xc, floating_t* yc) noexcept nogil:
    # AVG and SUM over whole windows (`_whole_windows`): every window holds KH*KW taps
    cdef intp_t OH = j.g.OH, OW = j.g.OW, KH = j.g.KH, KW = j.g.KW, SH = j.g.SH, SW = j.g.SW
    cdef intp_t xs2 = j.xs[2], ys2 = j.ys[2], oh, ow
    cdef floating_t scale = <floating_t>1.0 / <floating_t>(KH * KW)
    cdef bint avg = j.kind == P_AVG
    cdef const floating_t* row
    cdef floating_t acc
    for oh in range(OH):
        row = xc + oh * SH * xs2
        for ow in range(OW):
            acc = _window_sum(row + ow * SW, xs2, KH, KW)
            yc[oh * ys2 + ow] = acc * scale if avg else acc


cdef void _sum_plane_bwd(const PoolJob* j, const floating_t* gc, floating_t* dxc) noexcept nogil:
    # AVG's and SUM's gradient over whole windows: the plane zeroed, then each output's
    # (scaled) gradient added over its window, in the general loop's order (the same bits)
    cdef intp_t OH = j.g.OH, OW = j.g.OW, KH = j.g.KH, KW = j.g.KW, SH = j.g.SH, SW = j.g.SW
    cdef intp_t H = j.g.H, W = j.g.W, ys2 = j.ys[2], ys3 = j.ys[3]
    cdef intp_t d2 = j.dxs[2], d3 = j.dxs[3], oh, ow, i, k, h
    cdef floating_t scale = <floating_t>1.0 / <floating_t>(KH * KW)
    cdef floating_t gv
    cdef floating_t* r
    if d3 == 1 and d2 == W:
        memset(dxc, 0, <size_t>(H * W) * sizeof(floating_t))
    else:
        for h in range(H):
            for k in range(W):
                dxc[h * d2 + k * d3] = 0
    for oh in range(OH):
        for ow in range(OW):
            gv = gc[oh * ys2 + ow * ys3]
            if j.kind == P_AVG:
                gv = gv * scale
            for i in range(KH):
                r = dxc + (oh * SH + i) * d2 + ow * SW * d3
                if d3 == 1:
                    for k in range(KW):
                        r[k] += gv
                else:
                    for k in range(KW):
                        r[k * d3] += gv


cdef extern from "_pool_loops.h" nogil:
    void ndws_max2x2_f32(const float32_t* x, Py_ssize_t xs2, Py_ssize_t sh, Py_ssize_t oh_n,
                         Py_ssize_t ow_n, float32_t* y, Py_ssize_t ys2, int32_t* idx,
                         Py_ssize_t is2, int32_t w) noexcept
    void ndws_max2x2_f64(const float64_t* x, Py_ssize_t xs2, Py_ssize_t sh, Py_ssize_t oh_n,
                         Py_ssize_t ow_n, float64_t* y, Py_ssize_t ys2, int32_t* idx,
                         Py_ssize_t is2, int32_t w) noexcept


cdef void _max_plane_fwd(const PoolJob* j, const floating_t* xc, floating_t* yc,
                         int32_t* ic) noexcept nogil:
    # MAX over whole windows (`_whole_windows`): the first largest value, a NaN winning, as
    # the general loop of `_pool_plane` takes it. The geometry is read into locals: extensions
    # build with -fno-strict-aliasing, so each store would reload it through `j` otherwise.
    cdef intp_t OH = j.g.OH, OW = j.g.OW, KH = j.g.KH, KW = j.g.KW, SH = j.g.SH, SW = j.g.SW
    cdef intp_t W = j.g.W, xs2 = j.xs[2], ys2 = j.ys[2], is2 = j.is_[2]
    cdef intp_t oh, ow, i, k, best, base
    cdef const floating_t* row
    cdef floating_t* yr
    cdef int32_t* ir
    cdef floating_t v, acc
    if KH == 2 and KW == 2 and SW == 2:
        # the common 2x2 / 2: vectorised rows (nn/_pool_loops.h), the same taps in the same
        # order by selects, the whole plane in one call
        if floating_t is float32_t:
            ndws_max2x2_f32(xc, xs2, SH, OH, OW, yc, ys2, ic, is2, <int32_t>W)
        else:
            ndws_max2x2_f64(xc, xs2, SH, OH, OW, yc, ys2, ic, is2, <int32_t>W)
        return
    for oh in range(OH):
        row = xc + oh * SH * xs2
        yr = yc + oh * ys2
        ir = ic + oh * is2 if ic != NULL else NULL
        base = oh * SH * W
        for ow in range(OW):
            if KH == 2 and KW == 2:
                # LeNet's and VGG's 2x2: the four taps in the general loop's order
                acc = row[0]
                best = 0
                v = row[1]
                if v > acc or (v != v and acc == acc):
                    acc = v
                    best = 1
                v = row[xs2]
                if v > acc or (v != v and acc == acc):
                    acc = v
                    best = W
                v = row[xs2 + 1]
                if v > acc or (v != v and acc == acc):
                    acc = v
                    best = W + 1
            else:
                acc = row[0]
                best = 0
                for i in range(KH):
                    for k in range(KW):
                        v = row[i * xs2 + k]
                        if v > acc or (v != v and acc == acc):
                            acc = v
                            best = i * W + k
            yr[ow] = acc
            if ir != NULL:
                ir[ow] = <int32_t>(base + best)
            row += SW
            base += SW


cdef void _max_plane_bwd_scatter(const PoolJob* j, const floating_t* gc, floating_t* dxc,
                                 const int32_t* ic) noexcept nogil:
    # the MAX gradient through the arg-max indices into a plane whose rows follow each other
    # (NCHW: contiguous, one memset; NHWC: every C-th value): the plane zeroed, then each
    # output's gradient added at its flat index times the column stride (the general loop
    # divides each index into a row and a column, and clips both windows it does not need).
    # The same additions in the same order: the same bits.
    cdef intp_t OH = j.g.OH, OW = j.g.OW, ys2 = j.ys[2], ys3 = j.ys[3]
    cdef intp_t is2 = j.is_[2], is3 = j.is_[3], d3 = j.dxs[3], oh, ow, k
    cdef intp_t size = j.g.H * j.g.W
    cdef const floating_t* gr
    cdef const int32_t* ir
    if d3 == 1:
        memset(dxc, 0, <size_t>size * sizeof(floating_t))
    else:
        for k in range(size):
            dxc[k * d3] = 0
    for oh in range(OH):
        gr = gc + oh * ys2
        ir = ic + oh * is2
        for ow in range(OW):
            dxc[ir[ow * is3] * d3] += gr[ow * ys3]


cdef void _pool_plane(const PoolJob* j, intp_t t, floating_t dummy) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef intp_t n = t // g.C, c = t % g.C
    cdef intp_t oh, ow, i0, i1, k0, k1, i, k, ih, iw, best, h, w
    cdef const floating_t* xc = <const floating_t*>j.x + n * j.xs[0] + c * j.xs[1]
    cdef floating_t* yc = <floating_t*>j.y + n * j.ys[0] + c * j.ys[1]
    cdef floating_t* dxc = NULL
    cdef int32_t* ic = NULL
    cdef floating_t v, acc, gv, scale
    cdef intp_t cnt
    cdef double s
    if j.idx != NULL:
        ic = <int32_t*>j.idx + n * j.is_[0] + c * j.is_[1]
    if j.fast:
        if j.kind != P_MAX:
            if j.back:
                _sum_plane_bwd(j, yc, <floating_t*>j.dx + n * j.dxs[0] + c * j.dxs[1])
            else:
                _sum_plane_fwd(j, xc, yc)
        elif j.back:
            _max_plane_bwd_scatter(j, yc, <floating_t*>j.dx + n * j.dxs[0] + c * j.dxs[1], ic)
        else:
            _max_plane_fwd(j, xc, yc, ic)
        return
    if j.back:
        dxc = <floating_t*>j.dx + n * j.dxs[0] + c * j.dxs[1]
        for h in range(g.H):
            for w in range(g.W):
                dxc[h * j.dxs[2] + w * j.dxs[3]] = 0
    for oh in range(g.OH):
        _taps(g, oh, g.SH, g.PT, g.DH, g.KH, g.H, &i0, &i1)
        for ow in range(g.OW):
            _taps(g, ow, g.SW, g.PL, g.DW, g.KW, g.W, &k0, &k1)
            cnt = (i1 - i0) * (k1 - k0)
            if j.back:
                gv = yc[oh * j.ys[2] + ow * j.ys[3]]
            if j.kind == P_MAX:
                if j.back and ic != NULL:
                    best = ic[oh * j.is_[2] + ow * j.is_[3]]
                    dxc[(best // g.W) * j.dxs[2] + (best % g.W) * j.dxs[3]] += gv
                    continue
                best = -1
                acc = 0
                for i in range(i0, i1):
                    ih = oh * g.SH - g.PT + i * g.DH
                    for k in range(k0, k1):
                        iw = ow * g.SW - g.PL + k * g.DW
                        v = xc[ih * j.xs[2] + iw * j.xs[3]]
                        # the first largest value; a NaN wins over numbers (it propagates)
                        if best < 0 or v > acc or (isnan(v) and not isnan(acc)):
                            acc = v
                            best = ih * g.W + iw
                if j.back:
                    dxc[(best // g.W) * j.dxs[2] + (best % g.W) * j.dxs[3]] += gv
                else:
                    yc[oh * j.ys[2] + ow * j.ys[3]] = acc
                    if ic != NULL:
                        ic[oh * j.is_[2] + ow * j.is_[3]] = <int32_t>best
            elif j.kind == P_PNORM:
                s = 0
                for i in range(i0, i1):
                    ih = oh * g.SH - g.PT + i * g.DH
                    for k in range(k0, k1):
                        iw = ow * g.SW - g.PL + k * g.DW
                        s += _pnorm_pow(xc[ih * j.xs[2] + iw * j.xs[3]], j.p)
                if not j.back:
                    yc[oh * j.ys[2] + ow * j.ys[3]] = <floating_t>(
                        sqrt(s) if j.p == 2 else (s if j.p == 1 else pow(s, 1.0 / j.p)))
                    continue
                # DL4J's pnormpool2d_bp: g * S^((1-p)/p) * |x|^(p-1) * sgn(x); an all-zero
                # window (S = 0, where DL4J gives NaN) passes no gradient
                if s == 0:
                    continue
                scale = <floating_t>(gv * pow(s, (1.0 - j.p) / j.p))
                for i in range(i0, i1):
                    ih = oh * g.SH - g.PT + i * g.DH
                    for k in range(k0, k1):
                        iw = ow * g.SW - g.PL + k * g.DW
                        v = xc[ih * j.xs[2] + iw * j.xs[3]]
                        if v == 0:
                            continue
                        if j.p == 2:
                            dxc[ih * j.dxs[2] + iw * j.dxs[3]] += scale * v
                        else:
                            dxc[ih * j.dxs[2] + iw * j.dxs[3]] += scale * <floating_t>(
                                pow(fabs(v), j.p - 1.0)) * (1 if v > 0 else -1)
            else:
                if j.kind == P_AVG:
                    scale = <floating_t>1.0 / <floating_t>(g.KH * g.KW if j.include_pad
                                                            else cnt)
                else:
                    scale = 1
                if j.back:
                    gv = gv * scale
                    for i in range(i0, i1):
                        ih = oh * g.SH - g.PT + i * g.DH
                        for k in range(k0, k1):
                            iw = ow * g.SW - g.PL + k * g.DW
                            dxc[ih * j.dxs[2] + iw * j.dxs[3]] += gv
                    continue
                acc = 0
                for i in range(i0, i1):
                    ih = oh * g.SH - g.PT + i * g.DH
                    for k in range(k0, k1):
                        iw = ow * g.SW - g.PL + k * g.DW
                        acc += xc[ih * j.xs[2] + iw * j.xs[3]]
                yc[oh * j.ys[2] + ow * j.ys[3]] = acc * scale if j.kind == P_AVG else acc


cdef void _pool_task(void* ctx, Py_ssize_t t) noexcept nogil:
    cdef PoolJob* j = <PoolJob*>ctx
    if j.f64:
        _pool_plane(j, t, <float64_t>0)
    else:
        _pool_plane(j, t, <float32_t>0)


cdef int _run(PoolJob* j, intp_t nbytes) except -1:
    cdef intp_t planes = j.g.N * j.g.C
    # backward: any MAX geometry with indices, into planes whose rows follow each other (the
    # indices were checked to lie in [0, H*W) before)
    # (AVG and SUM backward read no x: their windows need only be whole)
    if j.back:
        j.fast = ((j.kind == P_MAX and j.idx != NULL and j.dxs[2] == j.g.W * j.dxs[3])
                  or ((j.kind == P_AVG or j.kind == P_SUM) and _whole_windows(j)))
    else:
        j.fast = _whole_windows(j)
    cdef double work = <double>j.g.N * j.g.C * j.g.OH * j.g.OW * j.g.KH * j.g.KW
    cdef int nt = <int>_imin(planes, threads_for(<Py_ssize_t>(work if work < 4e18 else 4e18),
                                                 GRAIN_NN_CHEAP))
    if nt < 1:
        nt = 1
    if release_gil(nbytes, nt):
        with nogil:
            run_items(_pool_task, j, planes, nt)
    else:
        run_items(_pool_task, j, planes, nt)
    return 0


cdef int _nonempty(intp_t O, intp_t S, intp_t P, intp_t D, intp_t K, intp_t size, str name,
                   const Geom* g, str op) except -1:
    cdef intp_t o, first, last
    for o in range(O):
        _taps(g, o, S, P, D, K, size, &first, &last)
        if first == last:
            raise ValueError(f"{op}: output {name} position {o} has no input element in its "
                             f"window (kernel {(g.KH, g.KW)}, stride {(g.SH, g.SW)}, padding "
                             f"{(g.PT, g.PB, g.PL, g.PR)}, dilation {(g.DH, g.DW)}, input "
                             f"{g.H}x{g.W}): reduce the padding or the dilation")
    return 0


cdef int _pool_geom(PoolJob* j, NDArray X, bint nhwc, object kernel_size, object stride,
                    object padding, object dilation, str op) except -1:
    cdef intp_t dims[4]
    cdef intp_t two[2]
    cdef Geom* g = &j.g
    logical(X, nhwc, dims, j.xs)
    g.N, g.C, g.H, g.W = dims[0], dims[1], dims[2], dims[3]
    g.CO = g.C
    parse_pair(kernel_size, op, "kernel_size", 1, two)
    g.KH, g.KW = two[0], two[1]
    window_geom(g, kernel_size if stride is None else stride, padding, dilation, op)
    # Every window must hold at least one input element: a window wholly in the padding (or,
    # dilated, wholly in the gaps around a narrow input) has no maximum and no average.
    _nonempty(g.OH, g.SH, g.PT, g.DH, g.KH, g.H, "height", g, op)
    _nonempty(g.OW, g.SW, g.PL, g.DW, g.KW, g.W, "width", g, op)
    j.x = X._data
    j.f64 = X._itemsize == 8
    j.idx = NULL
    j.dx = NULL
    j.back = False
    j.include_pad = False
    j.p = 0
    return 0


cdef double _p_arg(object p, str op) except? -1:
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer,
                                                              np.floating)):
        raise TypeError(f"{op}: p must be a real number, got {p!r}")
    if not (p > 0 and p < float("inf")):
        raise ValueError(f"{op}: p must be positive and finite, got {p!r}")
    return <double>p


cdef NDArray _indices_out(object indices, NDArray Y, str op, bint create):
    # an int32 array of the output's shape
    cdef NDArray o
    cdef intp_t shape[4]
    cdef int d
    for d in range(4):
        shape[d] = Y._shape[d]
    if indices is None:
        return new_result(_I32, 4, shape, op) if create else None
    return out_array(indices, _I32, 4, shape, op, "indices")


cdef object _pool_fwd(str op, int kind, object x, object kernel_size, object stride,
                      object padding, object dilation, object data_format, object out,
                      bint include_pad, double p, object indices, bint want_indices):
    cdef bint nhwc = parse_format(data_format, op)
    cdef NDArray X = arg4(x, op, "x")
    cdef NDArray Y, I = None, R
    cdef PoolJob j
    cdef intp_t shape[4]
    cdef intp_t dims[4]
    cdef bint made_y = out is None, made_i = False, temp = False
    _pool_geom(&j, X, nhwc, kernel_size, stride, padding, dilation, op)
    j.kind = kind
    j.include_pad = include_pad
    j.p = p
    if kind == P_MAX and j.g.H * j.g.W >= (1 << 31):
        raise ValueError(f"{op}: input planes of {j.g.H}x{j.g.W} do not fit int32 indices")
    for d, v in enumerate(format_shape([j.g.N, j.g.C, j.g.OH, j.g.OW], nhwc)):
        shape[d] = v
    Y = place(out, X._dtype, 4, shape, op, "out")
    try:
        if kind == P_MAX and (want_indices or indices is not None):
            made_i = indices is None
            I = _indices_out(indices, Y, op, True)
            if arrays_overlap(I, Y) or arrays_overlap(I, X):
                raise ValueError(f"{op}: indices overlaps x or out")
            logical(I, nhwc, dims, j.is_)
            j.idx = I._data
        temp = not made_y and arrays_overlap(Y, X)
        R = new_result(Y._dtype, 4, Y._shape, op) if temp else Y
        logical(R, nhwc, dims, j.ys)
        j.y = R._data
        if Y._size:
            _run(&j, X._size * X._itemsize)
        if temp:
            copy_into(R, Y)
            discard_result(R)
    except BaseException:
        if temp:
            discard_result(R)
        if made_i:
            discard_result(I)
        if made_y:
            discard_result(Y)
        raise
    res = out if out is not None else Y
    if kind == P_MAX and (want_indices or indices is not None):
        return res, (indices if indices is not None else I)
    return res


cdef object _pool_bwd(str op, int kind, object x, object grad_output, object kernel_size,
                      object stride, object padding, object dilation, object data_format,
                      object out, bint include_pad, double p, object indices):
    cdef bint nhwc = parse_format(data_format, op)
    cdef NDArray X = arg4(x, op, "x")
    cdef NDArray G = arg4(grad_output, op, "grad_output", X._dtype)
    cdef NDArray DX, I = None, R
    cdef PoolJob j
    cdef intp_t dims[4]
    cdef bint made = out is None, temp = False
    cdef intp_t total, q, h, w, c, n
    _pool_geom(&j, X, nhwc, kernel_size, stride, padding, dilation, op)
    j.kind = kind
    j.include_pad = include_pad
    j.p = p
    j.back = True
    if G._dtype != X._dtype:
        raise TypeError(f"{op}: grad_output has dtype {G._dtype}, expected {X._dtype} (the "
                        f"dtype of x)")
    expected = format_shape([j.g.N, j.g.C, j.g.OH, j.g.OW], nhwc)
    if shape_of(G) != expected:
        raise ValueError(f"{op}: grad_output has shape {shape_of(G)}, expected {expected}")
    logical(G, nhwc, dims, j.ys)
    j.y = G._data
    if indices is not None:
        I = array_arg(indices, op, "indices")
        if I._dtype != _I32:
            raise TypeError(f"{op}: indices must be int32 (max_pool2d's), got {I._dtype}")
        if shape_of(I) != expected:
            raise ValueError(f"{op}: indices has shape {shape_of(I)}, expected {expected}")
        # a corrupt index would write outside its plane: all are checked before any write
        iv = np.asarray(I)
        if iv.size and (iv.min() < 0 or iv.max() >= j.g.H * j.g.W):
            raise ValueError(f"{op}: indices must be in [0, {j.g.H * j.g.W}) (flat positions "
                             f"in a {j.g.H}x{j.g.W} plane), got values in "
                             f"[{iv.min()}, {iv.max()}]")
        logical(I, nhwc, dims, j.is_)
        j.idx = I._data
    DX = place(out, X._dtype, 4, X._shape, op, "out")
    try:
        temp = not made and (arrays_overlap(DX, X) or arrays_overlap(DX, G)
                             or (I is not None and arrays_overlap(DX, I)))
        R = new_result(DX._dtype, 4, DX._shape, op) if temp else DX
        logical(R, nhwc, dims, j.dxs)
        j.dx = R._data
        if DX._size:
            _run(&j, X._size * X._itemsize)
        if temp:
            copy_into(R, DX)
            discard_result(R)
    except BaseException:
        if temp:
            discard_result(R)
        if made:
            discard_result(DX)
        raise
    return out if out is not None else DX




def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, data_format="NCHW",
               out=None, indices=None, return_indices=False):
    """Max pooling: the first largest value of each window (NaN propagates).

    Parameters
    ----------
    x : (n, c, height, width) NDArray of float32 or float64 (NHWC: channels last)
    kernel_size : int or (int, int)
    stride : int or (int, int), optional
        Default: the kernel size (DL4J's SubsamplingLayer defaults to 2: pass it).
    padding : int, (int, int) or (top, bottom, left, right)
        Each side smaller than the effective kernel.
    dilation : int or (int, int)
    data_format : {"NCHW", "NHWC"}
    out : NDArray, optional
        ``(n, c, out_h, out_w)`` (NHWC: channels last); any strides.
    indices : int32 NDArray of the output's shape, optional
        Receives each maximum's flat position ``ih * width + iw`` in its plane (PyTorch's
        ``return_indices``), for `max_pool2d_backward` (DL4J keeps them in working memory).
    return_indices : bool
        Return ``(out, indices)``, indices placed like the output when not given.

    Returns
    -------
    NDArray, or (NDArray, NDArray of int32)

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> x = np.array([[[[1., 5., 2., 0.], [3., 4., 8., 1.]]]], np.float32)
    >>> y, i = F.max_pool2d(x, 2, return_indices=True)
    >>> y.tolist(), i.tolist()
    ([[[[5.0, 8.0]]]], [[[[1, 6]]]])
    """
    return _pool_fwd("max_pool2d", P_MAX, x, kernel_size, stride, padding, dilation,
                     data_format, out, False, 0, indices, bool(return_indices))


def max_pool2d_backward(x, grad_output, kernel_size, stride=None, padding=0, dilation=1,
                        data_format="NCHW", indices=None, out=None):
    """Gradient of `max_pool2d`: each output's gradient goes to its window's maximum (the
    recorded `indices`, or the first largest value of x), summed where windows overlap.

    Parameters
    ----------
    x : the forward's input
    grad_output : NDArray of the forward output's shape
    indices : int32 NDArray, optional
        From ``max_pool2d(..., return_indices=True)``: no search again. Checked to lie in
        their plane before anything is written.
    out : NDArray of x's shape, optional

    Returns
    -------
    NDArray
        dL/dx.
    """
    return _pool_bwd("max_pool2d_backward", P_MAX, x, grad_output, kernel_size, stride,
                     padding, dilation, data_format, out, False, 0, indices)


def avg_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, data_format="NCHW",
               include_padding=False, out=None):
    """Average pooling. The divisor is the number of window taps inside the input (padding
    excluded, DL4J's default since 1.0.0-beta5), or kh*kw with ``include_padding=True``
    (``avgPoolIncludePadInDivisor``; beta4 and earlier).

    Parameters
    ----------
    x : (n, c, height, width) NDArray of float32 or float64 (NHWC: channels last)
    kernel_size : int or (int, int)
    stride : int or (int, int), optional
        Default: the kernel size (DL4J's SubsamplingLayer defaults to 2: pass it).
    padding : int, (int, int) or (top, bottom, left, right)
        Each side smaller than the effective kernel.
    dilation : int or (int, int)
    data_format : {"NCHW", "NHWC"}
    out : NDArray, optional
        ``(n, c, out_h, out_w)`` (NHWC: channels last); any strides.
    include_padding : bool

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> x = np.ones((1, 1, 2, 2), np.float32)
    >>> F.avg_pool2d(x, 2, stride=1, padding=1).tolist()[0][0][0]
    [1.0, 1.0, 1.0]
    >>> F.avg_pool2d(x, 2, stride=1, padding=1, include_padding=True).tolist()[0][0][0]
    [0.25, 0.5, 0.25]
    """
    return _pool_fwd("avg_pool2d", P_AVG, x, kernel_size, stride, padding, dilation,
                     data_format, out, bool(include_padding), 0, None, False)


def avg_pool2d_backward(x, grad_output, kernel_size, stride=None, padding=0, dilation=1,
                        data_format="NCHW", include_padding=False, out=None):
    """Gradient of `avg_pool2d` (x gives the shape and the windows; its values are not
    read)."""
    return _pool_bwd("avg_pool2d_backward", P_AVG, x, grad_output, kernel_size, stride,
                     padding, dilation, data_format, out, bool(include_padding), 0, None)


def sum_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, data_format="NCHW",
               out=None):
    """Sum pooling: the sum of each window's taps inside the input (DL4J's PoolingType.SUM).

    Parameters
    ----------
    x : (n, c, height, width) NDArray of float32 or float64 (NHWC: channels last)
    kernel_size : int or (int, int)
    stride : int or (int, int), optional
        Default: the kernel size (DL4J's SubsamplingLayer defaults to 2: pass it).
    padding : int, (int, int) or (top, bottom, left, right)
        Each side smaller than the effective kernel.
    dilation : int or (int, int)
    data_format : {"NCHW", "NHWC"}
    out : NDArray, optional
        ``(n, c, out_h, out_w)`` (NHWC: channels last); any strides.
    """
    return _pool_fwd("sum_pool2d", P_SUM, x, kernel_size, stride, padding, dilation,
                     data_format, out, False, 0, None, False)


def sum_pool2d_backward(x, grad_output, kernel_size, stride=None, padding=0, dilation=1,
                        data_format="NCHW", out=None):
    """Gradient of `sum_pool2d`."""
    return _pool_bwd("sum_pool2d_backward", P_SUM, x, grad_output, kernel_size, stride,
                     padding, dilation, data_format, out, False, 0, None)


def pnorm_pool2d(x, p, kernel_size, stride=None, padding=0, dilation=1, data_format="NCHW",
                 out=None):
    """P-norm pooling, ``(sum |x|^p)^(1/p)`` over each window's taps inside the input (DL4J's
    PNORM with ``pnorm = p``).

    Parameters
    ----------
    p : float
        Positive and finite (DL4J's is an int >= 1).
    x : (n, c, height, width) NDArray of float32 or float64 (NHWC: channels last)
    kernel_size : int or (int, int)
    stride : int or (int, int), optional
        Default: the kernel size (DL4J's SubsamplingLayer defaults to 2: pass it).
    padding : int, (int, int) or (top, bottom, left, right)
        Each side smaller than the effective kernel.
    dilation : int or (int, int)
    data_format : {"NCHW", "NHWC"}
    out : NDArray, optional
        ``(n, c, out_h, out_w)`` (NHWC: channels last); any strides.

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> F.pnorm_pool2d(np.array([[[[3., 4.]]]], np.float32), 2, (1, 2)).tolist()
    [[[[5.0]]]]
    """
    cdef double pv = _p_arg(p, "pnorm_pool2d")
    return _pool_fwd("pnorm_pool2d", P_PNORM, x, kernel_size, stride, padding, dilation,
                     data_format, out, False, pv, None, False)


def pnorm_pool2d_backward(x, grad_output, p, kernel_size, stride=None, padding=0, dilation=1,
                          data_format="NCHW", out=None):
    """Gradient of `pnorm_pool2d`: ``g * S^((1-p)/p) * |x|^(p-1) * sign(x)`` for each tap of a
    window with ``S = sum |x|^p`` (DL4J's ``pnormpool2d_bp``); a window of zeros passes no
    gradient (DL4J gives NaN there)."""
    cdef double pv = _p_arg(p, "pnorm_pool2d_backward")
    return _pool_bwd("pnorm_pool2d_backward", P_PNORM, x, grad_output, kernel_size, stride,
                     padding, dilation, data_format, out, False, pv, None)


# ------------------------------------------------------------------------------------------------
# Zero padding / cropping (one kernel: an offset copy with zeros outside) and upsampling

ctypedef struct MoveJob:
    intp_t N, C, H, W, OH, OW
    intp_t top, left             # out[h, w] = in[h - top, w - left] (0 outside)
    intp_t sh, sw                # upsampling factors (0: offset copy)
    bint back                    # upsampling's backward: block sums
    int f64
    const char* x
    intp_t xs[4]
    char* y
    intp_t ys[4]


cdef void _move_plane(const MoveJob* j, intp_t t, floating_t dummy) noexcept nogil:
    cdef intp_t n = t // j.C, c = t % j.C, h, w, ih, lo, hi, a, b
    cdef const floating_t* xc = <const floating_t*>j.x + n * j.xs[0] + c * j.xs[1]
    cdef floating_t* yc = <floating_t*>j.y + n * j.ys[0] + c * j.ys[1]
    cdef floating_t* yr
    cdef const floating_t* xr
    cdef floating_t s
    cdef intp_t y3 = j.ys[3], x3 = j.xs[3]
    if j.sh == 0:
        lo = _imin(j.OW, j.left if j.left > 0 else 0)
        hi = _imin(j.OW, j.W + j.left)
        if hi < lo:
            hi = lo
        for h in range(j.OH):
            yr = yc + h * j.ys[2]
            ih = h - j.top
            if ih < 0 or ih >= j.H:
                for w in range(j.OW):
                    yr[w * y3] = 0
                continue
            xr = xc + ih * j.xs[2] + (lo - j.left) * x3
            for w in range(lo):
                yr[w * y3] = 0
            if y3 == 1 and x3 == 1:
                for w in range(hi - lo):
                    yr[lo + w] = xr[w]
            else:
                for w in range(hi - lo):
                    yr[(lo + w) * y3] = xr[w * x3]
            for w in range(hi, j.OW):
                yr[w * y3] = 0
    elif not j.back:
        for h in range(j.OH):
            yr = yc + h * j.ys[2]
            xr = xc + (h // j.sh) * j.xs[2]
            for w in range(j.OW):
                yr[w * y3] = xr[(w // j.sw) * x3]
    else:
        # out (the input gradient, OH x OW) := block sums of x (the output gradient), each
        # block added row by row in a fixed order
        for h in range(j.OH):
            yr = yc + h * j.ys[2]
            for w in range(j.OW):
                s = 0
                for a in range(j.sh):
                    xr = xc + (h * j.sh + a) * j.xs[2] + w * j.sw * x3
                    for b in range(j.sw):
                        s += xr[b * x3]
                yr[w * y3] = s


cdef void _move_task(void* ctx, Py_ssize_t t) noexcept nogil:
    cdef MoveJob* j = <MoveJob*>ctx
    if j.f64:
        _move_plane(j, t, <float64_t>0)
    else:
        _move_plane(j, t, <float32_t>0)


cdef object _move(str op, object x, object data_format, object out, intp_t top, intp_t bottom,
                  intp_t left, intp_t right, intp_t sh, intp_t sw, bint back, str xrole):
    cdef bint nhwc = parse_format(data_format, op)
    cdef NDArray X = arg4(x, op, xrole)
    cdef NDArray Y, R
    cdef MoveJob j
    cdef intp_t dims[4]
    cdef intp_t shape[4]
    cdef bint made = out is None, temp = False
    cdef int nt
    logical(X, nhwc, dims, j.xs)
    j.N, j.C, j.H, j.W = dims[0], dims[1], dims[2], dims[3]
    j.sh, j.sw, j.back, j.top, j.left = sh, sw, back, top, left
    if sh == 0:
        j.OH = j.H + top + bottom
        j.OW = j.W + left + right
        if j.OH < 1 or j.OW < 1:
            raise ValueError(f"{op}: cropping {(-top, -bottom, -left, -right)} leaves nothing "
                             f"of a {j.H}x{j.W} input")
    elif back:
        if j.H % sh or j.W % sw:
            raise ValueError(f"{op}: {xrole} is {j.H}x{j.W}, not a multiple of the upsampling "
                             f"size {(sh, sw)}")
        j.OH, j.OW = j.H // sh, j.W // sw
    else:
        if j.H * sh >= (1 << 40) or j.W * sw >= (1 << 40):
            raise ValueError(f"{op}: the upsampled size overflows")
        j.OH, j.OW = j.H * sh, j.W * sw
    for d, v in enumerate(format_shape([j.N, j.C, j.OH, j.OW], nhwc)):
        shape[d] = v
    Y = place(out, X._dtype, 4, shape, op, "out")
    try:
        temp = not made and arrays_overlap(Y, X)
        R = new_result(Y._dtype, 4, Y._shape, op) if temp else Y
        logical(R, nhwc, dims, j.ys)
        j.x = X._data
        j.y = R._data
        j.f64 = X._itemsize == 8
        if Y._size:
            nt = <int>_imin(j.N * j.C, threads_for(Y._size + X._size, GRAIN_NN_CHEAP))
            if release_gil(Y._size * Y._itemsize, nt):
                with nogil:
                    run_items(_move_task, &j, j.N * j.C, nt)
            else:
                run_items(_move_task, &j, j.N * j.C, nt)
        if temp:
            copy_into(R, Y)
            discard_result(R)
    except BaseException:
        if temp:
            discard_result(R)
        if made:
            discard_result(Y)
        raise
    return out if out is not None else Y


cdef int _sides(object v, str op, str role, intp_t* out) except -1:
    # DL4J's ZeroPaddingLayer / Cropping2D: 1 value (all sides), 2 (top=bottom, left=right) or
    # 4 (top, bottom, left, right)
    if isinstance(v, (tuple, list)) and len(v) not in (2, 4):
        raise ValueError(f"Invalid {role} values: must have exactly 4 values [top, bottom, "
                         f"left, right] (or 1 or 2), got {v!r}")
    parse_padding(v, op, role, out)
    return 0


def zero_pad2d(x, padding, data_format="NCHW", out=None):
    """Zero padding (DL4J's ZeroPaddingLayer): ``out[n, c, h, w] = x[n, c, h - top, w - left]``,
    zeros around. One pass over the output.

    Parameters
    ----------
    x : (n, c, height, width) NDArray of float32 or float64 (NHWC: channels last)
    padding : int, (int, int) or (top, bottom, left, right)
        Each >= 0; a pair is (top and bottom, left and right).
    data_format : {"NCHW", "NHWC"}
    out : NDArray of the padded shape, optional

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> F.zero_pad2d(np.ones((1, 1, 1, 2), np.float32), (1, 0, 0, 1)).tolist()
    [[[[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]]]
    """
    cdef intp_t p[4]
    _sides(padding, "zero_pad2d", "padding", p)
    return _move("zero_pad2d", x, data_format, out, p[0], p[1], p[2], p[3], 0, 0, False, "x")


def crop2d(x, cropping, data_format="NCHW", out=None):
    """Cropping (DL4J's Cropping2D): ``out[n, c, h, w] = x[n, c, h + top, w + left]`` for the
    size left after cutting (top, bottom, left, right); a copy (DL4J returns a view).

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> F.crop2d(np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3), (0, 1, 1, 0)).tolist()
    [[[[1.0, 2.0]]]]
    """
    cdef intp_t p[4]
    _sides(cropping, "crop2d", "cropping", p)
    return _move("crop2d", x, data_format, out, -p[0], -p[1], -p[2], -p[3], 0, 0, False, "x")


def zero_pad2d_backward(grad_output, padding, data_format="NCHW", out=None):
    """Gradient of `zero_pad2d`: the interior of grad_output (a crop)."""
    cdef intp_t p[4]
    _sides(padding, "zero_pad2d_backward", "padding", p)
    return _move("zero_pad2d_backward", grad_output, data_format, out, -p[0], -p[1], -p[2],
                 -p[3], 0, 0, False, "grad_output")


def crop2d_backward(grad_output, cropping, data_format="NCHW", out=None):
    """Gradient of `crop2d`: grad_output in the kept region, zeros where the input was cut."""
    cdef intp_t p[4]
    _sides(cropping, "crop2d_backward", "cropping", p)
    return _move("crop2d_backward", grad_output, data_format, out, p[0], p[1], p[2], p[3], 0,
                 0, False, "grad_output")


def upsample2d(x, size=2, data_format="NCHW", out=None):
    """Nearest-neighbour upsampling (DL4J's Upsampling2D): each value repeated size[0] x
    size[1] times.

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> F.upsample2d(np.array([[[[1., 2.]]]], np.float32), (1, 2)).tolist()
    [[[[1.0, 1.0, 2.0, 2.0]]]]
    """
    cdef intp_t s[2]
    parse_pair(size, "upsample2d", "size", 1, s)
    return _move("upsample2d", x, data_format, out, 0, 0, 0, 0, s[0], s[1], False, "x")


def upsample2d_backward(grad_output, size=2, data_format="NCHW", out=None):
    """Gradient of `upsample2d`: the sum of each size[0] x size[1] block of grad_output."""
    cdef intp_t s[2]
    parse_pair(size, "upsample2d_backward", "size", 1, s)
    return _move("upsample2d_backward", grad_output, data_format, out, 0, 0, 0, 0, s[0], s[1],
                 True, "grad_output")
