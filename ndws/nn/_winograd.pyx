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

from ndws._gemm_types cimport GemmTable
from ndws._threads cimport pool_run, ndws_claim
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t
from ndws.nn._activations cimport ACT_IDENTITY, act_tile_f32, act_tile_f64
from ndws.nn._conv cimport Geom, ALIGN, _rup, _cdiv, _imin, _imax, _ukr, _panel_rows
from ndws.nn._conv import _runnable_isas, _switch_isa

cdef extern from "_wino_loops.h" nogil:
    void ndws_wino_input_f32(const float32_t* r0, const float32_t* r1, const float32_t* r2,
                             const float32_t* r3, intp_t Wh, intp_t n, float32_t* v, intp_t VS)
    void ndws_wino_input_f64(const float64_t* r0, const float64_t* r1, const float64_t* r2,
                             const float64_t* r3, intp_t Wh, intp_t n, float64_t* v, intp_t VS)
    void ndws_wino_output_f32(const float32_t* m, intp_t S, intp_t n, float32_t bv,
                              float32_t* o, intp_t ldo)
    void ndws_wino_output_f64(const float64_t* m, intp_t S, intp_t n, float64_t bv,
                              float64_t* o, intp_t ldo)
    void ndws_wino_weights_f32(const float32_t* w, intp_t ws0, intp_t ws1, intp_t ws2,
                               intp_t ws3, intp_t C, int nrows, int mr, float32_t* U, intp_t us)
    void ndws_wino_weights_f64(const float64_t* w, intp_t ws0, intp_t ws1, intp_t ws2,
                               intp_t ws3, intp_t C, int nrows, int mr, float64_t* U, intp_t us)
    void ndws_wino_rows_f32(const float32_t* xn, intp_t xs1, intp_t xs2, intp_t sw, intp_t C,
                            intp_t H, intp_t W, intp_t row0, intp_t rows, intp_t col0,
                            intp_t Wh, intp_t ps, intp_t Hmax, float32_t* dst)
    void ndws_wino_rows_f64(const float64_t* xn, intp_t xs1, intp_t xs2, intp_t sw, intp_t C,
                            intp_t H, intp_t W, intp_t row0, intp_t rows, intp_t col0,
                            intp_t Wh, intp_t ps, intp_t Hmax, float64_t* dst)
    void ndws_wino_scatter2_f32(const float32_t* a, const float32_t* b, intp_t n, float32_t* y)
    void ndws_wino_scatter2_f64(const float64_t* a, const float64_t* b, intp_t n, float64_t* y)
    int ndws_wino_use(const char* isa)
    const char* ndws_wino_isa()

cdef enum:
    WINO_TASK_BYTES = 1 << 20       # a task's padded rows stay within this


cdef bint _wino_ok(const Geom* g, intp_t MR) noexcept nogil:
    # 3x3, stride 1, no dilation, and enough channels for the 16 GEMMs to run full tiles
    return (g.KH == 3 and g.KW == 3 and g.SH == 1 and g.SW == 1 and g.DH == 1 and g.DW == 1
            and g.C >= 16 and g.CO >= MR and MR <= 16)      # (the weight transform's lanes)


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
    # but never fewer tiles per task than a panel holds: one image of 16x16 outputs (8x8
    # tiles) cut into 8 tasks of one tile row ran every GEMM on 8 of its NR = 32 columns (VGG's
    # 64->64 at batch 1: 600 -> 334 us, docs/kernels.md)
    P.R = _panel_rows(P.TH, P.TW, NR, _imax(P.R, _cdiv(NR, P.TW)))
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
    (out, in, kh, kw) strides; a panel's MR rows at once (ndws/nn/_wino_loops.h)."""
    cdef intp_t nap = _cdiv(g.CO, MR), q
    cdef int rows
    for q in range(nap):
        rows = <int>_imin(MR, g.CO - q * MR)
        if floating_t is float32_t:
            ndws_wino_weights_f32(w + q * MR * ws[0], ws[0], ws[1], ws[2], ws[3], g.C, rows,
                                  <int>MR, U + q * g.C * MR, nap * g.C * MR)
        else:
            ndws_wino_weights_f64(w + q * MR * ws[0], ws[0], ws[1], ws[2], ws[3], g.C, rows,
                                  <int>MR, U + q * g.C * MR, nap * g.C * MR)


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
    0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]. The rows are split into even and odd
    columns, so a tile's patch column k is at b + k/2 + (k%2)*Wh: unit stride across the tiles
    of a row, vectorised across them (ndws/nn/_wino_loops.h)."""
    cdef const WinoPlan* P = &j.p
    cdef intp_t C = j.g.C, NR = P.NR, VS = P.vs, Wh = P.Ws // 2, c, b, k, u, ns
    cdef intp_t sa[64]
    cdef intp_t sb[64]
    cdef intp_t sj[64]
    cdef intp_t sl[64]
    cdef const floating_t* r0
    ns = _wino_segments(P, t0, cnt, sa, sb, sj, sl)
    for c in range(C):
        for u in range(ns):
            r0 = buf + c * P.ps + 2 * sa[u] * P.Ws + sb[u]
            if floating_t is float32_t:
                ndws_wino_input_f32(r0, r0 + P.Ws, r0 + 2 * P.Ws, r0 + 3 * P.Ws, Wh, sl[u],
                                    V + c * NR + sj[u], VS)
            else:
                ndws_wino_input_f64(r0, r0 + P.Ws, r0 + 2 * P.Ws, r0 + 3 * P.Ws, Wh, sl[u],
                                    V + c * NR + sj[u], VS)
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
    cdef intp_t oh, ow, n_, nf, k, y2 = j.ys[2], y3 = j.ys[3]
    cdef intp_t sa[64]
    cdef intp_t sb[64]
    cdef intp_t sj[64]
    cdef intp_t sl[64]
    cdef floating_t o[4][64]
    cdef floating_t bv
    cdef floating_t* yr
    ns = _wino_segments(P, t0, cnt, sa, sb, sj, sl)
    for r in range(rv):
        bv = (<const floating_t*>j.bias)[(co0 + r) * j.bs] if j.bias != NULL else 0
        for u in range(ns):
            n_ = sl[u]
            # rows of A^T M, then its columns, across the segment's tiles (_wino_loops.h)
            if floating_t is float32_t:
                ndws_wino_output_f32(M + r * NR + sj[u], S, n_, bv, &o[0][0], 64)
            else:
                ndws_wino_output_f64(M + r * NR + sj[u], S, n_, bv, &o[0][0], 64)
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
                # whole 2x2 blocks; the last one of an odd width has one column
                nf = _imin(n_, (g.OW - 2 * sb[u]) // 2)
                if y3 == 1:
                    if floating_t is float32_t:
                        ndws_wino_scatter2_f32(o[2 * k], o[2 * k + 1], nf, yr + 2 * sb[u])
                    else:
                        ndws_wino_scatter2_f64(o[2 * k], o[2 * k + 1], nf, yr + 2 * sb[u])
                else:
                    for b in range(nf):
                        ow = 2 * (sb[u] + b)
                        yr[ow * y3] = o[2 * k][b]
                        yr[(ow + 1) * y3] = o[2 * k + 1][b]
                if nf < n_:
                    yr[2 * (sb[u] + nf) * y3] = o[2 * k][nf]


cdef void _wino_task(WinoJob* j, floating_t* buf, floating_t* V, floating_t* M, intp_t t
                     ) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef const WinoPlan* P = &j.p
    cdef intp_t n = t // P.tpi, a0 = (t % P.tpi) * P.R
    cdef intp_t trows = _imin(P.TH, a0 + P.R) - a0, ntiles = trows * P.TW
    cdef intp_t MR = P.MR, NR = P.NR, C = g.C, t0, cnt, ap, xi
    cdef const floating_t* U = <const floating_t*>j.U
    # the task's input rows: 2*trows + 2 of them from output row 2*a0, zero padded, each split
    # into its even then its odd columns (a tile's 4x4 patch then reads columns 2b..2b+3 as
    # even[b], odd[b], even[b+1], odd[b+1]: unit-stride vectors across the tiles of a row)
    if floating_t is float32_t:
        ndws_wino_rows_f32(<const float32_t*>j.x + n * j.xs[0], j.xs[1], j.xs[2], j.xs[3], C,
                           g.H, g.W, 2 * a0 - g.PT, 2 * trows + 2, -g.PL, P.Ws // 2, P.ps,
                           P.Hs, buf)
    else:
        ndws_wino_rows_f64(<const float64_t*>j.x + n * j.xs[0], j.xs[1], j.xs[2], j.xs[3], C,
                           g.H, g.W, 2 * a0 - g.PT, 2 * trows + 2, -g.PL, P.Ws // 2, P.ps,
                           P.Hs, buf)
    t0 = 0
    while t0 < ntiles:
        cnt = _imin(NR, ntiles - t0)
        _wino_input(j, buf, t0, cnt, V)
        for ap in range(P.nap):
            for xi in range(16):
                _ukr(j.T, C, U + (xi * P.nap + ap) * C * MR, NULL, 1, V + xi * P.vs, NULL,
                     M + xi * MR * NR, NR, 0, NULL, cnt)
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


def _use(name):
    return ndws_wino_use(name.encode())


def _current():
    return ndws_wino_isa().decode()


def _use_wino_isa(name):
    """Run the transforms built for instruction set `name` ("avx512", "avx2" or "baseline";
    the tests run each); returns the previous one."""
    return _switch_isa("_use_wino_isa", name, _use, _current)


def _wino_isas():
    """The transforms' instruction sets this CPU can run, best first."""
    return _runnable_isas(_use, _current)


_use(_wino_isas()[0])          # the best this CPU runs
