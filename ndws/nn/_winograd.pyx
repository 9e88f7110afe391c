"""Winograd F(2x2, 3x3) for stride-1, undilated 3x3 convolutions (ndws.nn._conv2d's forward
choice for them; docs/kernels.md, "Which algorithm, per shape").

Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (2016): a 2x2 block of
outputs from a 4x4 input patch d and a 3x3 kernel g is Y = A^T [ (G g G^T) . (B^T d B) ] A,
with 16 multiplications instead of 36. Summed over input channels, the 16 elementwise products
become 16 GEMMs, one per position xi of the 4x4 transform:

  M[xi][o][t] = sum_c U[xi][o][c] * V[xi][c][t],   U = G g G^T (weights), V = B^T d B (tiles)

run on the same indirect micro-kernel as the direct convolution (MR output channels x NR
tiles). A task (output rows of one image, as in the direct driver) copies its padded input
rows, and for each panel of NR tiles transforms the input (V for all channels, packed per xi
as the micro-kernel's B), then for each A panel of MR output channels runs the 16 GEMMs into
16 tiles in L1 and transforms them back (A^T M A, bias, activation) straight into Y.

The transforms only add, subtract and halve (exact), so the rounding differs from the direct
convolution's by a small factor: each output is a sum of 16 products of transformed values,
themselves sums of up to 4 inputs and 9 weights (float32: relative errors around 1e-6 of
sum |x||w| instead of 1e-7; docs/kernels.md).

Work: 2.25x fewer multiplications; the transforms cost about 2 + 1.5 adds per input and output
value per channel. Measured on the 2-core Zen 4 against the direct driver: see docs/kernels.md.
"""

from libc.string cimport memset

from ndws._gemm_types cimport GemmTable
from ndws._threads cimport pool_run, ndws_claim
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t
from ndws.nn._activations cimport ACT_IDENTITY, act_tile_f32, act_tile_f64
from ndws.nn._conv cimport Geom, ALIGN, _rup, _cdiv, _imin, _imax, _ukr

cdef enum:
    WINO_TASK_BYTES = 1 << 20       # a task's padded rows stay within this


cdef bint _wino_ok(const Geom* g, intp_t MR) noexcept nogil:
    # 3x3, stride 1, no dilation, and enough channels for the 16 GEMMs to run full tiles
    return (g.KH == 3 and g.KW == 3 and g.SH == 1 and g.SW == 1 and g.DH == 1 and g.DW == 1
            and g.C >= 16 and g.CO >= MR)


cdef void _wino_plan(const Geom* g, intp_t MR, intp_t NR, intp_t item, WinoPlan* P
                     ) noexcept nogil:
    cdef intp_t rcap
    P.MR = MR
    P.NR = NR
    P.nap = _cdiv(g.CO, MR)
    P.TH = _cdiv(g.OH, 2)
    P.TW = _cdiv(g.OW, 2)
    P.Ws = 2 * P.TW + 2
    # as the direct driver: whole images with 8 or more of them, else slices of tile rows
    P.R = P.TH if g.N >= 8 else _cdiv(P.TH, _cdiv(8, g.N))
    rcap = (WINO_TASK_BYTES // _imax(1, g.C * P.Ws * item) - 2) // 2
    P.R = _imax(1, _imin(P.R, rcap))
    P.tpi = _cdiv(P.TH, P.R)
    P.ntasks = g.N * P.tpi
    P.Hs = 2 * P.R + 2
    P.ps = P.Hs * P.Ws
    P.pad_elems = g.C * P.ps
    # V's 16 planes are written together, one value each per tile: planes a multiple of 4 KiB
    # apart would fall into the same L1 sets, so the stride is padded by a cache line
    P.vs = g.C * NR + 64 // item
    P.v_elems = 16 * P.vs
    P.m_elems = 16 * MR * NR
    P.shared_bytes = _rup(16 * P.nap * MR * g.C * item, ALIGN)
    P.thread_bytes = (_rup(P.pad_elems * item, ALIGN) + _rup(P.v_elems * item, ALIGN)
                      + _rup(P.m_elems * item, ALIGN))




cdef void _wino_weights(const floating_t* w, const intp_t* ws, const Geom* g, intp_t MR,
                        floating_t* U) noexcept nogil:
    """U[(xi*nap + q)*C*MR + c*MR + r] := (G w[q*MR + r, c] G^T)[xi] (zeros past CO), with
    G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]; w through its logical
    (out, in, kh, kw) strides."""
    cdef intp_t nap = _cdiv(g.CO, MR), q, c, r, co, i, k, xi
    cdef floating_t k3[3][3]
    cdef floating_t t[4][3]
    cdef floating_t u[4][4]
    cdef const floating_t* wc
    for q in range(nap):
        for c in range(g.C):
            for r in range(MR):
                co = q * MR + r
                if co < g.CO:
                    wc = w + co * ws[0] + c * ws[1]
                    for i in range(3):
                        for k in range(3):
                            k3[i][k] = wc[i * ws[2] + k * ws[3]]
                    # t = G k3 (4 x 3), u = t G^T (4 x 4)
                    for k in range(3):
                        t[0][k] = k3[0][k]
                        t[1][k] = (k3[0][k] + k3[1][k] + k3[2][k]) * <floating_t>0.5
                        t[2][k] = (k3[0][k] - k3[1][k] + k3[2][k]) * <floating_t>0.5
                        t[3][k] = k3[2][k]
                    for i in range(4):
                        u[i][0] = t[i][0]
                        u[i][1] = (t[i][0] + t[i][1] + t[i][2]) * <floating_t>0.5
                        u[i][2] = (t[i][0] - t[i][1] + t[i][2]) * <floating_t>0.5
                        u[i][3] = t[i][2]
                else:
                    for i in range(4):
                        for k in range(4):
                            u[i][k] = 0
                for xi in range(16):
                    U[(xi * nap + q) * g.C * MR + c * MR + r] = u[xi // 4][xi % 4]


cdef void _wino_rows(const floating_t* xn, const intp_t* xs, intp_t C, intp_t H, intp_t W,
                     intp_t row0, intp_t rows, intp_t col0, intp_t Wh, intp_t ps, intp_t Hmax,
                     floating_t* dst) noexcept nogil:
    """The task's padded input rows, each row split into its even columns then its odd ones:
    dst[c*ps + i*2Wh + e] := x[c, row0 + i, col0 + 2e], dst[... + Wh + e] := x[..., col0 + 2e
    + 1] (0 outside the image). A tile's 4x4 patch then reads columns 2b..2b+3 as even[b],
    odd[b], even[b+1], odd[b+1]: unit-stride vectors across the tiles of a row."""
    cdef intp_t c, i, ih, e, iw, par, lo, hi, sw = xs[3], Ws = 2 * Wh
    cdef floating_t* d
    cdef const floating_t* s
    for c in range(C):
        for i in range(rows):
            d = dst + c * ps + i * Ws
            ih = row0 + i
            if ih < 0 or ih >= H:
                memset(d, 0, Ws * sizeof(floating_t))
                continue
            s = xn + c * xs[1] + ih * xs[2]
            for par in range(2):
                # e with 0 <= col0 + 2e + par < W
                iw = col0 + par
                lo = 0 if iw >= 0 else (-iw + 1) // 2
                hi = _imin(Wh, (W - iw + 1) // 2) if W > iw else 0
                if hi < lo:
                    hi = lo
                for e in range(lo):
                    d[par * Wh + e] = 0
                for e in range(lo, hi):
                    d[par * Wh + e] = s[(iw + 2 * e) * sw]
                for e in range(hi, Wh):
                    d[par * Wh + e] = 0
        if rows < Hmax:
            memset(dst + c * ps + rows * Ws, 0, (Hmax - rows) * Ws * sizeof(floating_t))


cdef inline intp_t _wino_segments(const WinoPlan* P, intp_t t0, intp_t cnt, intp_t* sa,
                                  intp_t* sb, intp_t* sj, intp_t* sl) noexcept nogil:
    # the panel's tiles as runs along one tile row: (tile row, first column, panel index, length)
    cdef intp_t ns = 0, jj = 0, a, b, run
    while jj < cnt:
        a = (t0 + jj) // P.TW
        b = t0 + jj - a * P.TW
        run = _imin(P.TW - b, cnt - jj)
        sa[ns], sb[ns], sj[ns], sl[ns] = a, b, jj, run
        ns += 1
        jj += run
    return ns


cdef void _wino_input(const WinoJob* j, const floating_t* buf, intp_t t0, intp_t cnt,
                      floating_t* V) noexcept nogil:
    """V[xi*VS + c*NR + jj] := (B^T d B)[xi] of the 4x4 patch of tile t0 + jj (task-local,
    row-major over the task's tile rows) in channel c; zeros for jj >= cnt. B^T = [[1, 0, -1,
    0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]. Every loop over b is unit-stride (the rows
    are split into even and odd columns) and vectorises."""
    cdef const WinoPlan* P = &j.p
    cdef intp_t C = j.g.C, NR = P.NR, VS = P.vs, Wh = P.Ws // 2, c, b, k, u, ns, n, x
    cdef intp_t sa[64]
    cdef intp_t sb[64]
    cdef intp_t sj[64]
    cdef intp_t sl[64]
    cdef const floating_t* r0
    cdef const floating_t* r1
    cdef const floating_t* r2
    cdef const floating_t* r3
    cdef floating_t* v
    cdef floating_t d0, d1, d2, d3, e0, e1, e2, e3
    cdef floating_t z[4][4]
    ns = _wino_segments(P, t0, cnt, sa, sb, sj, sl)
    for c in range(C):
        for u in range(ns):
            r0 = buf + c * P.ps + 2 * sa[u] * P.Ws + sb[u]
            r1 = r0 + P.Ws
            r2 = r1 + P.Ws
            r3 = r2 + P.Ws
            v = V + c * NR + sj[u]
            n = sl[u]
            for b in range(n):
                # column phase k of the patch: even[b], odd[b], even[b+1], odd[b+1]
                for k in range(4):
                    x = b + (k >> 1) + (k & 1) * Wh
                    d0 = r0[x]
                    d1 = r1[x]
                    d2 = r2[x]
                    d3 = r3[x]
                    z[0][k] = d0 - d2
                    z[1][k] = d1 + d2
                    z[2][k] = d2 - d1
                    z[3][k] = d1 - d3
                for k in range(4):
                    e0, e1, e2, e3 = z[k][0], z[k][1], z[k][2], z[k][3]
                    v[(4 * k + 0) * VS + b] = e0 - e2
                    v[(4 * k + 1) * VS + b] = e1 + e2
                    v[(4 * k + 2) * VS + b] = e2 - e1
                    v[(4 * k + 3) * VS + b] = e1 - e3
        if cnt < NR:
            for k in range(16):
                for b in range(cnt, NR):
                    V[k * VS + c * NR + b] = 0


cdef void _wino_output(const WinoJob* j, const floating_t* M, intp_t n, intp_t co0,
                       intp_t row0, intp_t t0, intp_t cnt) noexcept nogil:
    """Y := f(A^T M A + b) for the MR x cnt tiles of M (M[xi*MR*NR + r*NR + jj]), A^T =
    [[1, 1, 1, 0], [0, 1, -1, -1]], computed across the tiles of a row (unit stride), then
    stored as each tile's 2x2 block at output rows 2a, 2a+1, columns 2b, 2b+1 (clipped)."""
    cdef const Geom* g = &j.g
    cdef const WinoPlan* P = &j.p
    cdef intp_t MR = P.MR, NR = P.NR, S = MR * NR, rv = _imin(MR, g.CO - co0), r, b, u, ns
    cdef intp_t oh, ow, n_, k, y2 = j.ys[2], y3 = j.ys[3]
    cdef intp_t sa[64]
    cdef intp_t sb[64]
    cdef intp_t sj[64]
    cdef intp_t sl[64]
    cdef const floating_t* m
    cdef floating_t o[4][64]
    cdef floating_t t0_, t1_, t2_, t3_, s0, s1, s2, s3
    cdef floating_t bv
    cdef floating_t* yr
    ns = _wino_segments(P, t0, cnt, sa, sb, sj, sl)
    for r in range(rv):
        bv = (<const floating_t*>j.bias)[(co0 + r) * j.bs] if j.bias != NULL else 0
        for u in range(ns):
            m = M + r * NR + sj[u]
            n_ = sl[u]
            for b in range(n_):
                # rows of A^T M (the 4 columns k), then its columns
                t0_ = m[0 * S + b] + m[4 * S + b] + m[8 * S + b]
                t1_ = m[1 * S + b] + m[5 * S + b] + m[9 * S + b]
                t2_ = m[2 * S + b] + m[6 * S + b] + m[10 * S + b]
                t3_ = m[3 * S + b] + m[7 * S + b] + m[11 * S + b]
                s0 = m[4 * S + b] - m[8 * S + b] - m[12 * S + b]
                s1 = m[5 * S + b] - m[9 * S + b] - m[13 * S + b]
                s2 = m[6 * S + b] - m[10 * S + b] - m[14 * S + b]
                s3 = m[7 * S + b] - m[11 * S + b] - m[15 * S + b]
                o[0][b] = t0_ + t1_ + t2_ + bv
                o[1][b] = t1_ - t2_ - t3_ + bv
                o[2][b] = s0 + s1 + s2 + bv
                o[3][b] = s1 - s2 - s3 + bv
            if j.act != ACT_IDENTITY:
                if floating_t is float32_t:
                    act_tile_f32(j.act, <float32_t>j.alpha, &o[0][0], 4, n_, 64, 1)
                else:
                    act_tile_f64(j.act, j.alpha, &o[0][0], 4, n_, 64, 1)
            oh = row0 + 2 * sa[u]
            for k in range(2):
                if oh + k >= g.OH:
                    break
                yr = <floating_t*>j.y + n * j.ys[0] + (co0 + r) * j.ys[1] + (oh + k) * y2
                for b in range(n_):
                    ow = 2 * (sb[u] + b)
                    yr[ow * y3] = o[2 * k][b]
                    if ow + 1 < g.OW:
                        yr[(ow + 1) * y3] = o[2 * k + 1][b]


cdef void _wino_task(WinoJob* j, floating_t* buf, floating_t* V, floating_t* M, intp_t t
                     ) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef const WinoPlan* P = &j.p
    cdef intp_t n = t // P.tpi, a0 = (t % P.tpi) * P.R
    cdef intp_t trows = _imin(P.TH, a0 + P.R) - a0, ntiles = trows * P.TW
    cdef intp_t MR = P.MR, NR = P.NR, C = g.C, t0, cnt, ap, xi
    cdef const floating_t* U = <const floating_t*>j.U
    # the task's input rows: 2*trows + 2 of them from output row 2*a0, zero padded, split
    _wino_rows(<const floating_t*>j.x + n * j.xs[0], j.xs, C, g.H, g.W, 2 * a0 - g.PT,
               2 * trows + 2, -g.PL, P.Ws // 2, P.ps, P.Hs, buf)
    t0 = 0
    while t0 < ntiles:
        cnt = _imin(NR, ntiles - t0)
        _wino_input(j, buf, t0, cnt, V)
        for ap in range(P.nap):
            for xi in range(16):
                _ukr(j.T, C, U + (xi * P.nap + ap) * C * MR, NULL, 1, V + xi * P.vs, NULL,
                     M + xi * MR * NR, NR, 0)
            _wino_output(j, M, n, ap * MR, 2 * a0, t0, cnt)
        t0 += NR


cdef void _wino_worker(void* ctx) noexcept nogil:
    cdef WinoJob* j = <WinoJob*>ctx
    cdef intp_t item = 8 if j.f64 else 4
    cdef char* mine = j.thr + ndws_claim(&j.next_slot) * j.p.thread_bytes
    cdef char* V = mine + _rup(j.p.pad_elems * item, ALIGN)
    cdef char* M = V + _rup(j.p.v_elems * item, ALIGN)
    cdef long long t
    while True:
        t = ndws_claim(&j.next_task)
        if t >= j.p.ntasks:
            return
        if j.f64:
            _wino_task(j, <float64_t*>mine, <float64_t*>V, <float64_t*>M, t)
        else:
            _wino_task(j, <float32_t*>mine, <float32_t*>V, <float32_t*>M, t)


cdef void _wino_run(WinoJob* j, const char* w, const intp_t* wst, char* shared, int nt
                    ) noexcept nogil:
    j.U = shared
    j.thr = shared + j.p.shared_bytes
    if j.f64:
        _wino_weights(<const float64_t*>w, wst, &j.g, j.p.MR, <float64_t*>shared)
    else:
        _wino_weights(<const float32_t*>w, wst, &j.g, j.p.MR, <float32_t*>shared)
    j.next_task = 0
    j.next_slot = 0
    if nt <= 1 or j.p.ntasks <= 1:
        _wino_worker(j)
    else:
        pool_run(_wino_worker, j, <int>_imin(nt, j.p.ntasks) - 1)
