"""Depthwise convolution of `ndws.nn.functional` (DL4J's DepthwiseConvolution2D, the first half
of SeparableConvolution2D) and its gradients: output channel o = c*m + j sees input channel c
only, through kernel W[c, j]. There is no GEMM to block: a 16-lane register-blocked row kernel
and a lane-summing dot kernel in C (ndws/nn/_dw_loops.h, one variant per instruction set chosen
when the module loads), over one output plane (or one channel's weight gradient) per task, so
every element is summed in one fixed order whatever the thread count (docs/kernels.md).
"""

from ndws._core cimport NDArray
from ndws._dispatch cimport shape_of
from ndws._threads cimport threads_for, release_gil, run_items, run_tasks, GRAIN_NN_CHEAP
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t
from ndws.nn._activations cimport ACT_IDENTITY, act_tile_f32, act_tile_f64
from ndws.nn._conv cimport (Geom, _cdiv, _imin, _imax, _col_range, parse_format, window_geom,
                            arg4, logical, _bias_arg, _act_arg, _wstrides, _shape4, _Call,
                            _distinct, _sums_into, _result)

cdef enum:
    DW_FWD = 0                  # DwJob.kind: the pass its tasks run
    DW_DX = 1
    DW_DW = 2


ctypedef struct DwJob:
    Geom g
    int kind
    intp_t m                    # channel multiplier
    int f64, act
    double alpha
    const char* x
    intp_t xs[4]
    const char* w
    intp_t ws[4]                # logical (c, j, kh, kw)
    char* y                     # forward: output; backward: dY (read)
    intp_t ys[4]
    char* dx                    # backward: dX (NULL: not asked)
    intp_t dxs[4]
    char* dw                    # backward: dW (NULL: not asked)
    intp_t dws[4]
    const char* bias
    intp_t bs


cdef inline void _row_axpy(floating_t* y, intp_t y3, const floating_t* x, intp_t x3,
                           floating_t a, intp_t lo, intp_t hi, intp_t SW, intp_t off
                           ) noexcept nogil:
    # y[ow] += a * x[ow*SW + off] for ow in [lo, hi)
    cdef intp_t ow
    if y3 == 1 and x3 == 1 and SW == 1:
        for ow in range(lo, hi):
            y[ow] += a * x[ow + off]
    else:
        for ow in range(lo, hi):
            y[ow * y3] += a * x[(ow * SW + off) * x3]


cdef inline void _row_scatter(floating_t* x, intp_t x3, const floating_t* y, intp_t y3,
                              floating_t a, intp_t lo, intp_t hi, intp_t SW, intp_t off
                              ) noexcept nogil:
    # x[ow*SW + off] += a * y[ow] for ow in [lo, hi)
    cdef intp_t ow
    if y3 == 1 and x3 == 1 and SW == 1:
        for ow in range(lo, hi):
            x[ow + off] += a * y[ow]
    else:
        for ow in range(lo, hi):
            x[(ow * SW + off) * x3] += a * y[ow * y3]


cdef inline floating_t _row_dot(const floating_t* y, intp_t y3, const floating_t* x, intp_t x3,
                                intp_t lo, intp_t hi, intp_t SW, intp_t off) noexcept nogil:
    # sum of y[ow] * x[ow*SW + off] over [lo, hi): 8 partial sums in a fixed order
    cdef floating_t s[8]
    cdef intp_t ow = lo, k
    for k in range(8):
        s[k] = 0
    if y3 == 1 and x3 == 1 and SW == 1:
        while ow + 8 <= hi:
            for k in range(8):
                s[k] += y[ow + k] * x[ow + k + off]
            ow += 8
    while ow < hi:
        s[0] += y[ow * y3] * x[(ow * SW + off) * x3]
        ow += 1
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))


cdef extern from "_dw_loops.h" nogil:
    void ndws_dw_row_f32(float32_t* y, const float32_t* x, intp_t xs, intp_t dw,
                         const float32_t* w, int KH, int KW, float32_t b, intp_t n)
    void ndws_dw_row_f64(float64_t* y, const float64_t* x, intp_t xs, intp_t dw,
                         const float64_t* w, int KH, int KW, float64_t b, intp_t n)
    void ndws_dw_dots_f32(const float32_t* g, intp_t gr, const float32_t* x, intp_t xr,
                          intp_t R, intp_t dw, int KW, intp_t n, double* out)
    void ndws_dw_dots_f64(const float64_t* g, intp_t gr, const float64_t* x, intp_t xr,
                          intp_t R, intp_t dw, int KW, intp_t n, double* out)
    void ndws_dw_plane_f32(float32_t* y, intp_t ys, const float32_t* p, intp_t ps, intp_t xs,
                           intp_t dw, const float32_t* w, int KH, int KW, float32_t b,
                           intp_t rows, intp_t n)
    void ndws_dw_plane_f64(float64_t* y, intp_t ys, const float64_t* p, intp_t ps, intp_t xs,
                           intp_t dw, const float64_t* w, int KH, int KW, float64_t b,
                           intp_t rows, intp_t n)
    void ndws_dw_pad_f32(const float32_t* src, intp_t s2, intp_t s3, intp_t H, intp_t W,
                         intp_t top, intp_t left, intp_t Hp, intp_t Wp, float32_t* buf)
    void ndws_dw_pad_f64(const float64_t* src, intp_t s2, intp_t s3, intp_t H, intp_t W,
                         intp_t top, intp_t left, intp_t Hp, intp_t Wp, float64_t* buf)
    int ndws_dw_use(const char* isa)
    const char* ndws_dw_isa()

cdef enum:
    DW_TAPS = 256               # kernels up to this many taps take the vector row kernels
    DW_PLANE = 16384            # planes up to this many values (padded) are copied, padded,
                                # to a stack buffer: then no row or column has a border


ctypedef struct _DwCols:
    intp_t off[DW_TAPS]         # per kernel column kw: input column of output 0, and the output
    intp_t lo[DW_TAPS]          # columns [lo, hi) whose tap lies inside the input
    intp_t hi[DW_TAPS]
    intp_t clo, chi             # columns where every tap lies inside


cdef void _dw_cols(const Geom* g, intp_t KW, intp_t DW, intp_t PL, intp_t W, intp_t OW,
                   _DwCols* c) noexcept nogil:
    # The table holds the first DW_TAPS kernel columns (the vector paths only run kernels of at
    # most DW_TAPS taps; the others compute their ranges with _col_range): a kernel's width
    # is the caller's, never an index past a fixed-size array.
    cdef intp_t kw, off, lo, hi
    c.clo = 0
    c.chi = OW
    for kw in range(KW):
        _col_range(kw, DW, PL, g.SW, W, OW, &off, &lo, &hi)
        if kw < DW_TAPS:
            c.off[kw], c.lo[kw], c.hi[kw] = off, lo, hi
        c.clo = _imax(c.clo, lo)
        c.chi = _imin(c.chi, hi)
    if c.chi < c.clo:
        c.chi = c.clo


cdef inline void _dw_row(floating_t* y, const floating_t* x, intp_t xs, intp_t dw,
                         const floating_t* w, intp_t KH, intp_t KW, floating_t b, intp_t n
                         ) noexcept nogil:
    if floating_t is float32_t:
        ndws_dw_row_f32(y, x, xs, dw, w, <int>KH, <int>KW, b, n)
    else:
        ndws_dw_row_f64(y, x, xs, dw, w, <int>KH, <int>KW, b, n)


cdef inline void _dw_plane(floating_t* y, intp_t ys, const floating_t* p, intp_t ps,
                           intp_t xs, intp_t dw, const floating_t* w, intp_t KH, intp_t KW,
                           floating_t b, intp_t rows, intp_t n) noexcept nogil:
    # `rows` output rows (row stride ys) of the row kernel over p + oh*ps (ndws/nn/_dw_loops.h)
    if floating_t is float32_t:
        ndws_dw_plane_f32(y, ys, p, ps, xs, dw, w, <int>KH, <int>KW, b, rows, n)
    else:
        ndws_dw_plane_f64(y, ys, p, ps, xs, dw, w, <int>KH, <int>KW, b, rows, n)


cdef inline void _dw_pad_plane(const floating_t* src, intp_t s2, intp_t s3, intp_t H,
                               intp_t W, intp_t top, intp_t left, intp_t Hp, intp_t Wp,
                               floating_t* buf) noexcept nogil:
    # buf[i*Wp + j] := src[(i - top)*s2 + (j - left)*s3], 0 outside (a negative top or left
    # crops), in C per instruction set (ndws/nn/_dw_loops.h)
    if floating_t is float32_t:
        ndws_dw_pad_f32(src, s2, s3, H, W, top, left, Hp, Wp, buf)
    else:
        ndws_dw_pad_f64(src, s2, s3, H, W, top, left, Hp, Wp, buf)


cdef inline floating_t _dw_point(const floating_t* x, intp_t xs, const floating_t* w,
                                 intp_t KH, intp_t KW, floating_t b, intp_t ow,
                                 const _DwCols* cols) noexcept nogil:
    # one output of a row whose taps are all inside vertically (unit strides): b + the taps
    # inside horizontally, in the row kernel's order
    cdef floating_t s = b
    cdef intp_t kh, kw
    for kh in range(KH):
        for kw in range(KW):
            if cols.lo[kw] <= ow < cols.hi[kw]:
                s += w[kh * KW + kw] * x[kh * xs + ow + cols.off[kw]]
    return s


cdef void _dw_fwd_plane(const DwJob* j, intp_t t, floating_t dummy) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef intp_t n = t // g.CO, o = t % g.CO, c = o // j.m, jm = o % j.m
    cdef intp_t oh, kh, kw, ih, ih0, ow, y3 = j.ys[3], taps = g.KH * g.KW, off, lo, hi
    cdef const floating_t* xc = <const floating_t*>j.x + n * j.xs[0] + c * j.xs[1]
    cdef const floating_t* wc = <const floating_t*>j.w + c * j.ws[0] + jm * j.ws[1]
    cdef floating_t* yr
    cdef floating_t b0 = (<const floating_t*>j.bias)[o * j.bs] if j.bias != NULL else 0
    cdef floating_t wl[DW_TAPS]
    cdef floating_t plane[DW_PLANE]
    cdef intp_t Hp, Wp
    cdef _DwCols cols
    # the vector row kernel for rows whose taps are all inside, over the columns whose taps are
    cdef bint vec = (taps <= DW_TAPS and g.SW == 1 and j.xs[3] == 1 and y3 == 1)
    _dw_cols(g, g.KW, g.DW, g.PL, g.W, g.OW, &cols)
    if vec:
        for kh in range(g.KH):
            for kw in range(g.KW):
                wl[kh * g.KW + kw] = wc[kh * j.ws[2] + kw * j.ws[3]]
        Hp = (g.OH - 1) * g.SH + g.EKH
        Wp = g.OW + g.EKW - 1
        if Hp * Wp <= DW_PLANE:
            # the plane, padded, in L1: every row is the row kernel's, no border
            _dw_pad_plane(xc, j.xs[2], 1, g.H, g.W, g.PT, g.PL, Hp, Wp, plane)
            yr = <floating_t*>j.y + n * j.ys[0] + o * j.ys[1]
            _dw_plane(yr, j.ys[2], plane, g.SH * Wp, Wp * g.DH, g.DW, wl, g.KH, g.KW, b0, g.OH,
                      g.OW)
            if j.act != ACT_IDENTITY:
                if floating_t is float32_t:
                    act_tile_f32(j.act, <float32_t>j.alpha, yr, g.OH, g.OW, j.ys[2], 1)
                else:
                    act_tile_f64(j.act, j.alpha, yr, g.OH, g.OW, j.ys[2], 1)
            return
    for oh in range(g.OH):
        yr = <floating_t*>j.y + n * j.ys[0] + o * j.ys[1] + oh * j.ys[2]
        ih0 = oh * g.SH - g.PT
        if vec and ih0 >= 0 and ih0 + (g.KH - 1) * g.DH < g.H and cols.chi > cols.clo:
            _dw_row(yr + cols.clo, xc + ih0 * j.xs[2] + cols.clo + cols.off[0], j.xs[2] * g.DH,
                    g.DW, wl, g.KH, g.KW, b0, cols.chi - cols.clo)
            # the border columns one by one (their taps in the same order)
            for ow in range(cols.clo):
                yr[ow] = _dw_point(xc + ih0 * j.xs[2], j.xs[2] * g.DH, wl, g.KH, g.KW, b0, ow,
                                   &cols)
            for ow in range(cols.chi, g.OW):
                yr[ow] = _dw_point(xc + ih0 * j.xs[2], j.xs[2] * g.DH, wl, g.KH, g.KW, b0, ow,
                                   &cols)
        else:
            for ow in range(g.OW):
                yr[ow * y3] = b0
            for kh in range(g.KH):
                ih = ih0 + kh * g.DH
                if ih < 0 or ih >= g.H:
                    continue
                for kw in range(g.KW):
                    _col_range(kw, g.DW, g.PL, g.SW, g.W, g.OW, &off, &lo, &hi)
                    _row_axpy(yr, y3, xc + ih * j.xs[2], j.xs[3],
                              wc[kh * j.ws[2] + kw * j.ws[3]], lo, hi, g.SW, off)
        if j.act != ACT_IDENTITY:
            if floating_t is float32_t:
                act_tile_f32(j.act, <float32_t>j.alpha, yr, 1, g.OW, 0, y3)
            else:
                act_tile_f64(j.act, j.alpha, yr, 1, g.OW, 0, y3)


cdef void _dw_dx_plane(const DwJob* j, intp_t t, floating_t dummy) noexcept nogil:
    # dX[n, c] = sum over j, taps of W[c, j, kh, kw] * dY[n, c*m + j] scattered back; for
    # stride 1 and one output channel per input channel, a gather instead: the forward row
    # kernel over dY with the flipped kernel
    cdef const Geom* g = &j.g
    cdef intp_t n = t // g.C, c = t % g.C, jm, o, oh, kh, kw, ih, h, w, PT2, PL2, iw
    cdef intp_t taps = g.KH * g.KW, oh0, x3 = j.dxs[3], off, lo, hi
    cdef floating_t* dxc = <floating_t*>j.dx + n * j.dxs[0] + c * j.dxs[1]
    cdef floating_t* dxr
    cdef const floating_t* wc
    cdef const floating_t* dyr
    cdef const floating_t* dyc
    cdef floating_t wf[DW_TAPS]
    cdef floating_t plane[DW_PLANE]
    cdef intp_t Hp, Wp
    cdef _DwCols cols
    cdef Geom f
    if (j.m == 1 and g.SH == 1 and g.SW == 1 and taps <= DW_TAPS and x3 == 1
            and j.ys[3] == 1):
        # gather: dX[ih, iw] = sum W[kh, kw] dY[ih + PT - kh*DH, iw + PL - kw*DW], i.e. a
        # forward pass with the flipped kernel and padding (K-1)*D - P
        wc = <const floating_t*>j.w + c * j.ws[0]
        dyc = <const floating_t*>j.y + n * j.ys[0] + c * j.ys[1]
        for kh in range(g.KH):
            for kw in range(g.KW):
                wf[kh * g.KW + kw] = wc[(g.KH - 1 - kh) * j.ws[2] + (g.KW - 1 - kw) * j.ws[3]]
        PT2 = (g.KH - 1) * g.DH - g.PT
        PL2 = (g.KW - 1) * g.DW - g.PL
        if (g.H + g.EKH - 1) * (g.W + g.EKW - 1) <= DW_PLANE:
            # dY padded by the flipped kernel's padding (negative: cropped), in L1
            Hp = g.H + g.EKH - 1
            Wp = g.W + g.EKW - 1
            _dw_pad_plane(dyc, j.ys[2], 1, g.OH, g.OW, PT2, PL2, Hp, Wp, plane)
            _dw_plane(dxc, j.dxs[2], plane, Wp, Wp * g.DH, g.DW, wf, g.KH, g.KW, 0, g.H, g.W)
            return
        f = g[0]
        f.SW = 1
        _dw_cols(&f, g.KW, g.DW, PL2, g.OW, g.W, &cols)
        for h in range(g.H):
            dxr = dxc + h * j.dxs[2]
            oh0 = h - PT2
            if oh0 >= 0 and oh0 + (g.KH - 1) * g.DH < g.OH and cols.chi > cols.clo:
                _dw_row(dxr + cols.clo, dyc + oh0 * j.ys[2] + cols.clo + cols.off[0],
                        j.ys[2] * g.DH, g.DW, wf, g.KH, g.KW, 0, cols.chi - cols.clo)
                for iw in range(cols.clo):
                    dxr[iw] = _dw_point(dyc + oh0 * j.ys[2], j.ys[2] * g.DH, wf, g.KH, g.KW, 0,
                                        iw, &cols)
                for iw in range(cols.chi, g.W):
                    dxr[iw] = _dw_point(dyc + oh0 * j.ys[2], j.ys[2] * g.DH, wf, g.KH, g.KW, 0,
                                        iw, &cols)
            else:
                for iw in range(g.W):
                    dxr[iw] = 0
                for kh in range(g.KH):
                    oh = oh0 + kh * g.DH
                    if oh < 0 or oh >= g.OH:
                        continue
                    for kw in range(g.KW):
                        _row_axpy(dxr, 1, dyc + oh * j.ys[2], 1, wf[kh * g.KW + kw],
                                  cols.lo[kw], cols.hi[kw], 1, cols.off[kw])
        return
    for h in range(g.H):
        for w in range(g.W):
            dxc[h * j.dxs[2] + w * x3] = 0
    for jm in range(j.m):
        o = c * j.m + jm
        wc = <const floating_t*>j.w + c * j.ws[0] + jm * j.ws[1]
        for oh in range(g.OH):
            dyr = <const floating_t*>j.y + n * j.ys[0] + o * j.ys[1] + oh * j.ys[2]
            for kh in range(g.KH):
                ih = oh * g.SH - g.PT + kh * g.DH
                if ih < 0 or ih >= g.H:
                    continue
                for kw in range(g.KW):
                    _col_range(kw, g.DW, g.PL, g.SW, g.W, g.OW, &off, &lo, &hi)
                    _row_scatter(dxc + ih * j.dxs[2], x3, dyr, j.ys[3],
                                 wc[kh * j.ws[2] + kw * j.ws[3]], lo, hi, g.SW, off)


cdef void _dw_dw_chan(const DwJob* j, intp_t c, floating_t dummy) noexcept nogil:
    # dW[c, j, kh, kw] = sum over n, oh, ow of dY[n, c*m + j, oh, ow] * X[n, c, ih, iw]: per
    # image and kernel row, the columns where every tap is inside through the vector dot kernel
    # over all the image's rows whose tap row is inside, the border columns one by one; images
    # summed in order in float64
    cdef const Geom* g = &j.g
    cdef intp_t jm, o, n, oh, kh, kw, ih, ow, r0, r1, oh_lo, oh_hi
    cdef const floating_t* xc
    cdef const floating_t* xr
    cdef const floating_t* dyc
    cdef const floating_t* dyr
    cdef double acc[DW_TAPS]
    cdef double s
    cdef floating_t plane[DW_PLANE]
    cdef intp_t Hp, Wp
    cdef _DwCols cols
    cdef bint vec = (g.KW <= 16 and g.SW == 1 and j.xs[3] == 1 and j.ys[3] == 1
                     and g.KH * g.KW <= DW_TAPS)
    cdef intp_t off, lo, hi
    if g.KH * g.KW > DW_TAPS:
        # a kernel too large for the per-tap table: one tap at a time, all images
        for jm in range(j.m):
            o = c * j.m + jm
            for kh in range(g.KH):
                for kw in range(g.KW):
                    _col_range(kw, g.DW, g.PL, g.SW, g.W, g.OW, &off, &lo, &hi)
                    s = 0
                    for n in range(g.N):
                        xc = <const floating_t*>j.x + n * j.xs[0] + c * j.xs[1]
                        for oh in range(g.OH):
                            ih = oh * g.SH - g.PT + kh * g.DH
                            if 0 <= ih < g.H:
                                s += _row_dot(<const floating_t*>j.y + n * j.ys[0]
                                              + o * j.ys[1] + oh * j.ys[2], j.ys[3],
                                              xc + ih * j.xs[2], j.xs[3], lo, hi, g.SW, off)
                    (<floating_t*>j.dw)[c * j.dws[0] + jm * j.dws[1] + kh * j.dws[2]
                                         + kw * j.dws[3]] = <floating_t>s
        return
    Hp = (g.OH - 1) * g.SH + g.EKH
    Wp = g.OW + g.EKW - 1
    if vec and Hp * Wp <= DW_PLANE:
        # each image's plane padded in L1: one dot call per kernel row over all output rows
        for jm in range(j.m):
            o = c * j.m + jm
            for kh in range(g.KH * g.KW):
                acc[kh] = 0
            for n in range(g.N):
                _dw_pad_plane(<const floating_t*>j.x + n * j.xs[0] + c * j.xs[1], j.xs[2], 1,
                              g.H, g.W, g.PT, g.PL, Hp, Wp, plane)
                dyc = <const floating_t*>j.y + n * j.ys[0] + o * j.ys[1]
                for kh in range(g.KH):
                    if floating_t is float32_t:
                        ndws_dw_dots_f32(dyc, j.ys[2], plane + kh * g.DH * Wp, g.SH * Wp, g.OH,
                                         g.DW, <int>g.KW, g.OW, acc + kh * g.KW)
                    else:
                        ndws_dw_dots_f64(dyc, j.ys[2], plane + kh * g.DH * Wp, g.SH * Wp, g.OH,
                                         g.DW, <int>g.KW, g.OW, acc + kh * g.KW)
            for kh in range(g.KH):
                for kw in range(g.KW):
                    (<floating_t*>j.dw)[c * j.dws[0] + jm * j.dws[1] + kh * j.dws[2]
                                         + kw * j.dws[3]] = <floating_t>acc[kh * g.KW + kw]
        return
    _dw_cols(g, g.KW, g.DW, g.PL, g.W, g.OW, &cols)
    for jm in range(j.m):
        o = c * j.m + jm
        for kh in range(g.KH * g.KW):
            acc[kh] = 0
        for n in range(g.N):
            xc = <const floating_t*>j.x + n * j.xs[0] + c * j.xs[1]
            dyc = <const floating_t*>j.y + n * j.ys[0] + o * j.ys[1]
            for kh in range(g.KH):
                # output rows whose tap row kh is inside: 0 <= oh*SH - PT + kh*DH < H
                r0 = g.PT - kh * g.DH
                oh_lo = 0 if r0 <= 0 else _cdiv(r0, g.SH)
                oh_hi = _imin(g.OH, _cdiv(g.H + r0, g.SH)) if g.H + r0 > 0 else 0
                if oh_hi <= oh_lo:
                    continue
                if vec:
                    ih = oh_lo * g.SH - r0
                    if cols.chi > cols.clo:
                        if floating_t is float32_t:
                            ndws_dw_dots_f32(dyc + oh_lo * j.ys[2] + cols.clo, j.ys[2],
                                             xc + ih * j.xs[2] + cols.clo + cols.off[0],
                                             j.xs[2] * g.SH, oh_hi - oh_lo, g.DW, <int>g.KW,
                                             cols.chi - cols.clo, acc + kh * g.KW)
                        else:
                            ndws_dw_dots_f64(dyc + oh_lo * j.ys[2] + cols.clo, j.ys[2],
                                             xc + ih * j.xs[2] + cols.clo + cols.off[0],
                                             j.xs[2] * g.SH, oh_hi - oh_lo, g.DW, <int>g.KW,
                                             cols.chi - cols.clo, acc + kh * g.KW)
                    if cols.clo > 0 or cols.chi < g.OW:
                        for kw in range(g.KW):
                            s = 0
                            for oh in range(oh_lo, oh_hi):
                                dyr = dyc + oh * j.ys[2]
                                xr = xc + (oh * g.SH - r0) * j.xs[2]
                                for ow in range(cols.lo[kw], _imin(cols.clo, cols.hi[kw])):
                                    s += dyr[ow] * xr[ow + cols.off[kw]]
                                for ow in range(_imax(cols.chi, cols.lo[kw]), cols.hi[kw]):
                                    s += dyr[ow] * xr[ow + cols.off[kw]]
                            acc[kh * g.KW + kw] += s
                else:
                    for oh in range(oh_lo, oh_hi):
                        dyr = dyc + oh * j.ys[2]
                        xr = xc + (oh * g.SH - r0) * j.xs[2]
                        for kw in range(g.KW):
                            _col_range(kw, g.DW, g.PL, g.SW, g.W, g.OW, &off, &lo, &hi)
                            acc[kh * g.KW + kw] += _row_dot(dyr, j.ys[3], xr, j.xs[3], lo, hi,
                                                            g.SW, off)
        for kh in range(g.KH):
            for kw in range(g.KW):
                (<floating_t*>j.dw)[c * j.dws[0] + jm * j.dws[1] + kh * j.dws[2]
                                     + kw * j.dws[3]] = <floating_t>acc[kh * g.KW + kw]


cdef inline void _dw_one(const DwJob* j, intp_t t, floating_t dummy) noexcept nogil:
    if j.kind == DW_FWD:
        _dw_fwd_plane(j, t, dummy)
    elif j.kind == DW_DX:
        _dw_dx_plane(j, t, dummy)
    else:
        _dw_dw_chan(j, t, dummy)


cdef void _dw_task(void* ctx, Py_ssize_t t) noexcept nogil:
    # task t of pass j.kind: an output plane (forward), an input-gradient plane, or a channel's
    # weight gradient
    cdef DwJob* j = <DwJob*>ctx
    if j.f64:
        _dw_one(j, t, <float64_t>0)
    else:
        _dw_one(j, t, <float32_t>0)


cdef int _dw_setup(NDArray X, NDArray Wt, bint nhwc, object stride, object padding,
                   object dilation, DwJob* j, str op) except -1:
    cdef intp_t dims[4]
    cdef int i
    cdef Geom* g = &j.g
    logical(X, nhwc, dims, j.xs)
    if Wt._dtype != X._dtype:
        raise TypeError(f"{op}: w has dtype {Wt._dtype}, expected {X._dtype} (the dtype of x)")
    if Wt._shape[0] != dims[1]:
        msg = (f"{op}: x has {dims[1]} channels (data_format {'NHWC' if nhwc else 'NCHW'}, "
               f"shape {shape_of(X)}) but w has {Wt._shape[0]} (w shape {shape_of(Wt)}: "
               f"(c_in, multiplier, kh, kw))")
        if (X._shape[1] if nhwc else X._shape[3]) == Wt._shape[0]:
            msg += (f"; x looks like {'NCHW' if nhwc else 'NHWC'} data: pass "
                    f"data_format={'NCHW' if nhwc else 'NHWC'!r}")
        raise ValueError(msg)
    if Wt._shape[1] < 1 or Wt._shape[2] < 1 or Wt._shape[3] < 1:
        raise ValueError(f"{op}: w has shape {shape_of(Wt)}: the multiplier and the kernel "
                         f"must be at least 1")
    g.N, g.C, g.H, g.W = dims[0], dims[1], dims[2], dims[3]
    j.m = Wt._shape[1]
    g.CO = g.C * j.m
    g.KH, g.KW = Wt._shape[2], Wt._shape[3]
    window_geom(g, stride, padding, dilation, op)
    j.f64 = X._itemsize == 8
    j.x = X._data
    j.w = Wt._data
    _wstrides(Wt, j.ws)
    j.act = ACT_IDENTITY
    j.alpha = 0
    j.bias = NULL
    j.bs = 0
    j.dx = NULL
    j.dw = NULL
    j.kind = DW_FWD
    return 0


cdef int _dw_threads(const DwJob* j, intp_t ntasks) noexcept:
    cdef const Geom* g = &j.g
    cdef double work = <double>g.N * g.CO * g.OH * g.OW * g.KH * g.KW
    return <int>_imax(1, _imin(ntasks, threads_for(<Py_ssize_t>(work if work < 4e18 else 4e18),
                                                   GRAIN_NN_CHEAP)))


def depthwise_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, data_format="NCHW",
                     activation=None, out=None, **params):
    """Depthwise 2-D convolution: output channel ``c*m + j`` is input channel c convolved with
    ``w[c, j]`` (PyTorch's ``groups=c_in`` convolution).

    ``Y[n, c*m + j, h, w] := f(b[c*m + j] + sum_{i, k} W[c, j, i, k] * X[n, c, h*sh - pt + i*dh,
    w*sw - pl + k*dw])``.

    Parameters
    ----------
    x : (n, c_in, height, width) NDArray of float32 or float64 (NHWC: channels last)
    w : (c_in, multiplier, kh, kw) NDArray of the same dtype
        DL4J's DepthwiseConvolution2D keeps ``W`` as (kh, kw, c_in, multiplier) and
        SeparableConvolution2D as (multiplier, c_in, kh, kw): pass the transposed view
        (``W.transpose(2, 3, 0, 1)``, ``W.transpose(1, 0, 2, 3)``; no copy).
    b : (c_in * multiplier,) NDArray, optional
    stride, padding, dilation, data_format, activation, out, **params
        As for `conv2d`. No scratch is needed.

    Returns
    -------
    NDArray
        ``(n, c_in * multiplier, out_h, out_w)`` (NHWC: channels last).

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> x = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2)
    >>> F.depthwise_conv2d(x, np.ones((2, 1, 2, 2), np.float32)).tolist()
    [[[[6.0]], [[22.0]]]]
    """
    cdef str op = "depthwise_conv2d"
    cdef bint nhwc = parse_format(data_format, op)
    cdef NDArray X = arg4(x, op, "x")
    cdef NDArray Wt = arg4(w, op, "w", X._dtype)
    cdef NDArray B = None, Y, R
    cdef DwJob j
    cdef intp_t shape[4]
    cdef intp_t dims[4]
    cdef double alpha
    cdef int nt
    cdef _Call call = _Call(op)
    _dw_setup(X, Wt, nhwc, stride, padding, dilation, &j, op)
    if b is not None:
        B = _bias_arg(b, X, j.g.CO, op, "b")
        j.bias = B._data
        j.bs = B._strides[0] // B._itemsize
    j.act = _act_arg(activation, params, &alpha, op)
    j.alpha = alpha
    _shape4(j.g.N, j.g.CO, j.g.OH, j.g.OW, nhwc, shape)
    Y = call.out(out, X._dtype, 4, shape, "out")
    if Y._size == 0:
        return out if out is not None else Y
    try:
        R = call.temp_for(Y, (X, Wt, B))
        logical(R, nhwc, dims, j.ys)
        j.y = R._data
        nt = _dw_threads(&j, j.g.N * j.g.CO)
        if release_gil(R._size * R._itemsize, nt):
            with nogil:
                run_items(_dw_task, &j, j.g.N * j.g.CO, nt)
        else:
            run_items(_dw_task, &j, j.g.N * j.g.CO, nt)
        call.finish()
    except BaseException:
        call.fail()
        raise
    return out if out is not None else Y


def depthwise_conv2d_backward(x, w, grad_output, stride=1, padding=0, dilation=1,
                              data_format="NCHW", need_input=True, need_weight=True,
                              need_bias=True, grad_input=None, grad_weight=None,
                              grad_bias=None):
    """Gradients of `depthwise_conv2d`: ``(dL/dx, dL/dw, dL/db)`` for dL/d(pre-activation)
    `grad_output`. Each input-gradient plane and each channel's weight gradient is computed
    whole by one thread, in a fixed order. Parameters as for `conv2d_backward` (no scratch).
    """
    cdef str op = "depthwise_conv2d_backward"
    cdef bint nhwc = parse_format(data_format, op)
    cdef NDArray X = arg4(x, op, "x")
    cdef NDArray Wt = arg4(w, op, "w", X._dtype)
    cdef NDArray G = arg4(grad_output, op, "grad_output", X._dtype)
    cdef NDArray GX = None, GW = None, GB = None, RX, RW, RB
    cdef DwJob j
    cdef intp_t shape[4]
    cdef intp_t dims[4]
    cdef intp_t one[1]
    cdef int nt
    cdef bint ni = bool(need_input), nw = bool(need_weight), nb = bool(need_bias)
    cdef _Call call = _Call(op)
    if G._dtype != X._dtype:
        raise TypeError(f"{op}: grad_output has dtype {G._dtype}, expected {X._dtype} (the "
                        f"dtype of x)")
    _dw_setup(X, Wt, nhwc, stride, padding, dilation, &j, op)
    _shape4(j.g.N, j.g.CO, j.g.OH, j.g.OW, nhwc, shape)
    expected = tuple(shape[i] for i in range(4))
    if shape_of(G) != expected:
        raise ValueError(f"{op}: grad_output has shape {shape_of(G)}, expected {expected}")
    if not ni and grad_input is not None or not nw and grad_weight is not None or \
            not nb and grad_bias is not None:
        raise ValueError(f"{op}: an output was given for a gradient that is not asked for")
    logical(G, nhwc, dims, j.ys)
    j.y = G._data
    if ni:
        GX = call.out(grad_input, X._dtype, 4, X._shape, "grad_input")
    if nw:
        GW = call.out(grad_weight, X._dtype, 4, Wt._shape, "grad_weight")
    if nb:
        one[0] = j.g.CO
        GB = call.out(grad_bias, X._dtype, 1, one, "grad_bias")
    try:
        _distinct((GX, GW, GB), ("grad_input", "grad_weight", "grad_bias"), op)
        RX = call.temp_for(GX, (X, Wt, G))
        RW = call.temp_for(GW, (X, Wt, G))
        RB = call.temp_for(GB, (X, Wt, G))
        nt = _dw_threads(&j, 1 << 30)
        if ni and RX._size:
            logical(RX, nhwc, dims, j.dxs)
            j.dx = RX._data
            with nogil:
                j.kind = DW_DX
                run_items(_dw_task, &j, j.g.N * j.g.C, <int>_imin(nt, j.g.N * j.g.C))
        if nw and RW._size:
            _wstrides(RW, j.dws)
            j.dw = RW._data
            with nogil:
                j.kind = DW_DW
                run_tasks(_dw_task, &j, j.g.C, <int>_imin(nt, j.g.C))
        if nb:
            _sums_into(G, j.ys, j.g.N, j.g.CO, j.g.OH, j.g.OW, RB, nt)
        call.finish()
    except BaseException:
        call.fail()
        raise
    return (_result(grad_input, GX), _result(grad_weight, GW), _result(grad_bias, GB))

_DW_ISAS = ("avx512", "avx2", "baseline")


def _use_dw_isa(name):
    """Run the depthwise loops built for instruction set `name` ("avx512", "avx2" or
    "baseline"; the tests run each); returns the previous one. ValueError for one this CPU
    cannot run (or that was not built)."""
    if name not in _DW_ISAS:
        raise ValueError(f"_use_dw_isa: expected one of {', '.join(_DW_ISAS)}, got {name!r}")
    previous = ndws_dw_isa().decode()
    if not ndws_dw_use(name.encode()):
        raise ValueError(f"_use_dw_isa: this CPU cannot run the {name!r} depthwise loops")
    return previous


def _dw_isas():
    """The depthwise loops' instruction sets this CPU can run, best first."""
    previous = ndws_dw_isa()
    runnable = [name for name in _DW_ISAS if ndws_dw_use(name.encode())]
    ndws_dw_use(previous)
    return runnable


# the best variant this CPU runs
for _name in _DW_ISAS:
    if ndws_dw_use(_name.encode()):
        break
