"""The forward and the weight gradient of a convolution with few input channels (an RGB or grey
first layer: C_in <= 4), without the GEMM (ndws.nn._conv2d's choice for those shapes;
docs/kernels.md, "Which algorithm, per shape").

Forward (stride 1 along rows, output rows of unit stride): output positions are the vector
lanes and the weights are broadcast, 8 output channels at a time, straight from a padded copy
of the task's input rows into Y with the bias and relu (ndws/nn/_few_loops.h): with 27 taps
(3x3 RGB) the GEMM's tiles spent as long storing and copying out as multiplying.

dW[co, c, i, j] = sum over images and output positions of dY[n, co, oh, ow] * X[n, c, oh*SH -
PT + i*DH, ow*SW - PL + j*DW]: with C*KH*KW taps (27 for 3x3 RGB, 25 for LeNet's 5x5 grey) the
GEMM's 8-tap x 32-channel register tile was at best 3/8 real taps (three channels padded to a
tile's eight rows) and its dY had to be transposed into channel panels. Here each tap gets a
plane of its input values at the output positions (an im2col whose rows are row copies of the
input), dY keeps its planes, and every (output channel, tap) pair is a dot product of two planes
held in 16 lanes (ndws/nn/_few_loops.h), 4 x 4 pairs at a time in registers.

Output rows are cut into pieces (a few rows of one image, their planes within
FEW_PIECE_BYTES, a core's L2), and the pieces, in order, into G groups of consecutive pieces
(FEW_GROUPS at most, fixed by the shape). The whole gradient is one pool run: a thread claims a
group, and for each of its pieces copies the planes into its own buffer and adds every block's
dot products over them to the group's accumulator; at the end the groups' accumulators are
added in group order and each pair's lanes in a fixed order. A piece's planes never leave the
core that copied them (when two threads shared each chunk's planes, the second thread spent its
time fetching the first one's cache lines and gained nothing), and every lane sums its
positions in one fixed order whichever thread runs a group, so the result does not depend on
the thread count.
"""

from libc.string cimport memcpy, memset

from ndws._threads cimport pool_run, ndws_claim, static_block
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t
from ndws.nn._activations cimport ACT_IDENTITY, ACT_RELU, act_tile_f32, act_tile_f64
from ndws.nn._conv cimport Geom, ALIGN, _rup, _cdiv, _imin, _imax, _take
from ndws.nn._conv_gemm cimport _pad_copy
from ndws.nn._conv import _runnable_isas, _switch_isa

cdef extern from "_few_loops.h" nogil:
    void ndws_few_dots_f32(const float32_t* dy, intp_t das, const float32_t* col, intp_t dcs,
                           intp_t n16, int load, float32_t* acc)
    void ndws_few_dots_f64(const float64_t* dy, intp_t das, const float64_t* col, intp_t dcs,
                           intp_t n16, int load, float64_t* acc)
    void ndws_few_row_f32(const float32_t* src, const intp_t* toff, intp_t K,
                          const float32_t* w, int nr, const float32_t* b, intp_t bs, int relu,
                          intp_t n, float32_t* y, intp_t ys)
    void ndws_few_row_f64(const float64_t* src, const intp_t* toff, intp_t K,
                          const float64_t* w, int nr, const float64_t* b, intp_t bs, int relu,
                          intp_t n, float64_t* y, intp_t ys)
    int ndws_few_use(const char* isa)
    const char* ndws_few_isa()

cdef enum:
    LANES = 16
    BLOCK = 4
    BLOCK_ELEMS = BLOCK * BLOCK * LANES


cdef bint _few_ok(const Geom* g) noexcept nogil:
    return 1 <= g.C <= FEW_CHANNELS


cdef void _few_plan(const Geom* g, intp_t item, FewPlan* P) noexcept nogil:
    cdef intp_t planes, rows_fit, want
    P.K = g.C * g.KH * g.KW
    P.Kp = _rup(P.K, BLOCK)
    P.COp = _rup(g.CO, BLOCK)
    planes = P.COp + P.Kp
    # as many output rows per piece as fit the piece's bytes (at least one); with fewer images
    # than groups, pieces of fewer rows (FEW_PIECE_POSITIONS or more) so a second thread gets
    # a group too (one image: 4 pieces of 8 rows of VGG's 32x32)
    rows_fit = FEW_PIECE_BYTES // _imax(1, planes * _imax(1, g.OW) * item)
    P.R = _imax(1, _imin(g.OH, rows_fit))
    if g.N * _cdiv(g.OH, P.R) < FEW_GROUPS:
        want = _imax(_cdiv(FEW_PIECE_POSITIONS, _imax(1, g.OW)),
                     _cdiv(g.OH, _cdiv(FEW_GROUPS, _imax(1, g.N))))
        P.R = _imax(1, _imin(P.R, want))
    P.tpi = _cdiv(g.OH, P.R)
    P.npieces = g.N * P.tpi
    P.Pp = _rup(P.R * g.OW, LANES)
    P.piece_elems = planes * P.Pp
    P.nab = P.COp // BLOCK
    P.nbb = P.Kp // BLOCK
    P.G = _imax(1, _imin(P.npieces, FEW_GROUPS))
    P.acc_elems = P.nab * P.nbb * BLOCK_ELEMS
    P.shared_bytes = _rup(P.G * P.acc_elems * item, ALIGN)
    P.Wp = (g.OW - 1) * g.SW + g.EKW
    P.thread_bytes = _rup((P.piece_elems + P.Wp) * item, ALIGN)


cdef inline void _copy_row(floating_t* d, const floating_t* s, intp_t n, intp_t stride
                           ) noexcept nogil:
    # rows of a few dozen values: a loop, not a call to memcpy (whose call and size dispatch
    # took as long as the copy: a third of phase 1's instructions for VGG's 32x32 rows)
    cdef intp_t k
    if stride == 1:
        for k in range(n):
            d[k] = s[k]
    else:
        for k in range(n):
            d[k] = s[k * stride]


cdef inline void _zeros(floating_t* d, intp_t n) noexcept nogil:
    cdef intp_t k
    for k in range(n):
        d[k] = 0


cdef void _few_piece(const FewJob* j, intp_t s, floating_t* base) noexcept nogil:
    # piece s's planes into base: dY's (COp of them, zeros past CO; none when dY is read in
    # place) and each tap's input values at the piece's positions (zeros outside the image),
    # each zero past its positions
    cdef const Geom* g = &j.g
    cdef const FewPlan* P = &j.p
    cdef intp_t n = s // P.tpi, oh0 = (s % P.tpi) * P.R
    cdef intp_t rows = _imin(g.OH, oh0 + P.R) - oh0, cnt = rows * g.OW
    cdef intp_t co, c, i, jj, r, ih, lo, hi, t
    cdef floating_t* d
    cdef floating_t* prow
    cdef const floating_t* src
    for co in range(0 if j.dy_direct else P.COp):
        d = base + co * P.Pp
        if co >= g.CO:
            _zeros(d, P.Pp)
            continue
        src = <const floating_t*>j.dy + n * j.ds[0] + co * j.ds[1] + oh0 * j.ds[2]
        if j.ds[3] == 1 and j.ds[2] == g.OW:
            memcpy(d, src, cnt * sizeof(floating_t))        # the piece's rows are one run
        else:
            for r in range(rows):
                _copy_row(d + r * g.OW, src + r * j.ds[2], g.OW, j.ds[3])
        _zeros(d + cnt, P.Pp - cnt)
    # the taps' rows: each input row the piece reads once into a zero-padded row (prow, after
    # the planes), then a kernel row's KW taps are slices of it (a tap's own zeros and copy per
    # row took as many instructions as the dot products)
    prow = base + P.piece_elems
    lo = _imin(P.Wp, _imax(0, g.PL))
    hi = _imax(lo, _imin(P.Wp, g.W + g.PL))
    _zeros(prow, lo)                    # its padding, the same for every row
    _zeros(prow + hi, P.Wp - hi)
    for c in range(g.C):
        for i in range(g.KH):
            t = (c * g.KH + i) * g.KW
            for r in range(rows):
                ih = (oh0 + r) * g.SH - g.PT + i * g.DH
                if ih < 0 or ih >= g.H:
                    for jj in range(g.KW):
                        _zeros(base + (P.COp + t + jj) * P.Pp + r * g.OW, g.OW)
                    continue
                src = (<const floating_t*>j.x + n * j.xs[0] + c * j.xs[1] + ih * j.xs[2]
                       + (lo - g.PL) * j.xs[3])
                _copy_row(prow + lo, src, hi - lo, j.xs[3])
                for jj in range(g.KW):
                    _copy_row(base + (P.COp + t + jj) * P.Pp + r * g.OW, prow + jj * g.DW,
                              g.OW, g.SW)
            for jj in range(g.KW):
                _zeros(base + (P.COp + t + jj) * P.Pp + cnt, P.Pp - cnt)
    for t in range(P.K, P.Kp):
        _zeros(base + (P.COp + t) * P.Pp, P.Pp)


cdef void _few_dots(const FewJob* j, intp_t s, const floating_t* base, int load,
                    floating_t* acc) noexcept nogil:
    # every block's 4 x 4 pairs over piece s (its planes at base) added to the accumulator (or,
    # load 0, stored into it), blocks of the same output channels one after another (their dY
    # planes stay in L1)
    cdef const Geom* g = &j.g
    cdef const FewPlan* P = &j.p
    cdef intp_t oh0 = (s % P.tpi) * P.R, ab, bb, das = P.Pp
    cdef intp_t n16 = _cdiv((_imin(g.OH, oh0 + P.R) - oh0) * g.OW, LANES)
    cdef const floating_t* dyp
    cdef floating_t* a
    for ab in range(P.nab):
        if j.dy_direct:
            dyp = (<const floating_t*>j.dy + (s // P.tpi) * j.ds[0] + ab * BLOCK * j.ds[1]
                   + oh0 * j.ds[2])
            das = j.ds[1]
        else:
            dyp = base + ab * BLOCK * P.Pp
        for bb in range(P.nbb):
            a = acc + (ab * P.nbb + bb) * BLOCK_ELEMS
            if floating_t is float32_t:
                ndws_few_dots_f32(dyp, das, base + (P.COp + bb * BLOCK) * P.Pp, P.Pp, n16, load,
                                  a)
            else:
                ndws_few_dots_f64(dyp, das, base + (P.COp + bb * BLOCK) * P.Pp, P.Pp, n16, load,
                                  a)


cdef void _few_group(const FewJob* j, intp_t grp, floating_t* buf) noexcept nogil:
    # group grp: its pieces (a fixed, balanced split of the pieces in order), each copied into
    # this thread's buffer and summed into the group's accumulator
    cdef const FewPlan* P = &j.p
    cdef intp_t s, lo, hi
    cdef floating_t* acc = <floating_t*>j.acc + grp * P.acc_elems
    static_block(P.npieces, P.G, grp, &lo, &hi)
    for s in range(lo, hi):
        _few_piece(j, s, buf)
        _few_dots(j, s, buf, s > lo, acc)       # the group's first piece starts its sums


cdef void _few_worker(void* ctx) noexcept nogil:
    # the caller and every helper that joins: a buffer of its own, then groups until none is left
    cdef FewJob* j = <FewJob*>ctx
    cdef char* mine = j.thr + ndws_claim(&j.next_slot) * j.p.thread_bytes
    cdef long long grp
    while True:
        grp = ndws_claim(&j.next_group)
        if grp >= j.p.G:
            return
        if j.f64:
            _few_group(j, <intp_t>grp, <float64_t*>mine)
        else:
            _few_group(j, <intp_t>grp, <float32_t*>mine)


cdef void _few_scatter(const FewJob* j, char* dw, const intp_t* dws, floating_t dummy
                       ) noexcept nogil:
    # dW[co, tap] := the pair's 16 lanes, the groups' accumulators added in group order into
    # the first one, then its lanes summed pairwise in a fixed order
    cdef const Geom* g = &j.g
    cdef const FewPlan* P = &j.p
    cdef floating_t* acc = <floating_t*>j.acc
    cdef const floating_t* other
    cdef const floating_t* v
    cdef floating_t* out = <floating_t*>dw
    cdef floating_t s8[8]
    cdef intp_t co, t, c, i, jj, k, grp
    for grp in range(1, P.G):
        other = acc + grp * P.acc_elems
        for k in range(P.acc_elems):
            acc[k] += other[k]
    for co in range(g.CO):
        for t in range(P.K):
            v = (acc + ((co // BLOCK) * P.nbb + t // BLOCK) * BLOCK_ELEMS
                 + ((co % BLOCK) * BLOCK + t % BLOCK) * LANES)
            for k in range(8):
                s8[k] = v[k] + v[k + 8]
            c = t // (g.KH * g.KW)
            i = (t // g.KW) % g.KH
            jj = t % g.KW
            out[co * dws[0] + c * dws[1] + i * dws[2] + jj * dws[3]] = (
                ((s8[0] + s8[4]) + (s8[2] + s8[6])) + ((s8[1] + s8[5]) + (s8[3] + s8[7])))


cdef void _few_run(FewJob* j, char* shared, intp_t nbytes, char* dw, const intp_t* dws, int nt
                   ) noexcept nogil:
    cdef const FewPlan* P = &j.p
    cdef char* cur = shared
    cdef intp_t item = 8 if j.f64 else 4
    j.acc = _take(&cur, P.G * P.acc_elems * item)
    j.thr = shared + P.shared_bytes
    # as many threads as there are groups and copies in the scratch (at least one)
    nt = <int>_imax(1, _imin(_imin(nt, P.G), (nbytes - P.shared_bytes) // P.thread_bytes))
    # dY read in place when a piece's rows are one run of whole 16-lane vectors in every plane
    # and the blocks have no padding channels (VGG's and LeNet's first layers in NCHW): its
    # copy was a quarter of the call (a 4 MiB dY streamed through the scratch)
    j.dy_direct = (j.ds[3] == 1 and j.ds[2] == j.g.OW and (P.R * j.g.OW) % LANES == 0
                   and ((j.g.OH % P.R) * j.g.OW) % LANES == 0 and j.g.CO % BLOCK == 0)
    j.next_group = 0
    j.next_slot = 0
    if nt <= 1:
        _few_worker(j)
    else:
        pool_run(_few_worker, j, nt - 1)
    if j.f64:
        _few_scatter(j, dw, dws, <float64_t>0)
    else:
        _few_scatter(j, dw, dws, <float32_t>0)


# ------------------------------------------------------------------------------------------------
# Forward


cdef bint _few_fwd_ok(const Geom* g) noexcept nogil:
    # a row of at least one AVX-512 vector of positions, read as a run of the padded copy
    return 1 <= g.C <= FEW_CHANNELS and g.SW == 1 and g.OW >= 16


cdef void _few_fwd_plan(const Geom* g, intp_t item, FewFwdPlan* P) noexcept nogil:
    P.K = g.C * g.KH * g.KW
    P.ncb = _cdiv(g.CO, 8)
    # whole images per task with 8 or more of them, else slices of rows (about 8 tasks)
    P.R = g.OH if g.N >= 8 else _cdiv(g.OH, _cdiv(8, g.N))
    P.tpi = _cdiv(g.OH, P.R)
    P.ntasks = g.N * P.tpi
    P.Ws = g.OW + g.EKW - 1
    P.Hs = (P.R - 1) * g.SH + g.EKH
    P.ps = P.Hs * P.Ws
    P.shared_bytes = _rup(P.ncb * P.K * 8 * item, ALIGN) + _rup(P.K * 8, ALIGN)
    P.thread_bytes = _rup(g.C * P.ps * item, ALIGN)


cdef void _few_fwd_task(FewFwdJob* j, floating_t* buf, intp_t t) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef const FewFwdPlan* P = &j.p
    cdef intp_t n = t // P.tpi, oh0 = (t % P.tpi) * P.R
    cdef intp_t rows = _imin(g.OH, oh0 + P.R) - oh0, oh, cb, nr
    cdef const floating_t* bias = <const floating_t*>j.bias
    cdef floating_t* yr
    cdef bint relu = j.act == ACT_RELU
    _pad_copy(<const floating_t*>j.x + n * j.xs[0], j.xs, g.C, g.H, g.W, oh0 * g.SH - g.PT,
              (rows - 1) * g.SH + g.EKH, -g.PL, P.Ws, P.ps, P.Hs, buf, g.C * P.ps)
    for oh in range(rows):
        for cb in range(P.ncb):
            nr = _imin(8, g.CO - cb * 8)
            yr = <floating_t*>j.y + n * j.ys[0] + cb * 8 * j.ys[1] + (oh0 + oh) * j.ys[2]
            if floating_t is float32_t:
                ndws_few_row_f32(buf + oh * g.SH * P.Ws, j.toff, P.K,
                                 <const float32_t*>j.wp + cb * P.K * 8, <int>nr,
                                 bias + cb * 8 * j.bs if bias != NULL else NULL, j.bs, relu,
                                 g.OW, yr, j.ys[1])
            else:
                ndws_few_row_f64(buf + oh * g.SH * P.Ws, j.toff, P.K,
                                 <const float64_t*>j.wp + cb * P.K * 8, <int>nr,
                                 bias + cb * 8 * j.bs if bias != NULL else NULL, j.bs, relu,
                                 g.OW, yr, j.ys[1])
            if j.act != ACT_IDENTITY and not relu:
                # other activations on the finished rows (in cache)
                if floating_t is float32_t:
                    act_tile_f32(j.act, <float32_t>j.alpha, yr, nr, g.OW, j.ys[1], 1)
                else:
                    act_tile_f64(j.act, j.alpha, yr, nr, g.OW, j.ys[1], 1)


cdef void _few_fwd_worker(void* ctx) noexcept nogil:
    cdef FewFwdJob* j = <FewFwdJob*>ctx
    cdef char* mine = j.thr + ndws_claim(&j.next_slot) * j.thread_bytes
    cdef long long t
    while True:
        t = ndws_claim(&j.next_task)
        if t >= j.p.ntasks:
            return
        if j.f64:
            _few_fwd_task(j, <float64_t*>mine, t)
        else:
            _few_fwd_task(j, <float32_t*>mine, t)


cdef void _few_pack(const floating_t* w, const intp_t* wst, const Geom* g, floating_t* wp
                    ) noexcept nogil:
    # wp[(cb*K + t)*8 + r] := w[cb*8 + r, tap t] (zeros past CO)
    cdef intp_t K = g.C * g.KH * g.KW, cb, t, r, co, c, i, jj
    for cb in range(_cdiv(g.CO, 8)):
        t = 0
        for c in range(g.C):
            for i in range(g.KH):
                for jj in range(g.KW):
                    for r in range(8):
                        co = cb * 8 + r
                        wp[(cb * K + t) * 8 + r] = (
                            w[co * wst[0] + c * wst[1] + i * wst[2] + jj * wst[3]]
                            if co < g.CO else 0)
                    t += 1


cdef void _few_fwd_run(FewFwdJob* j, const char* w, const intp_t* wst, char* shared, int nt
                       ) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef const FewFwdPlan* P = &j.p
    cdef char* cur = shared
    cdef intp_t item = 8 if j.f64 else 4, c, i, jj, t = 0
    j.wp = _take(&cur, P.ncb * P.K * 8 * item)
    j.toff = <intp_t*>_take(&cur, P.K * 8)
    j.thr = shared + P.shared_bytes
    j.thread_bytes = P.thread_bytes
    if j.f64:
        _few_pack(<const float64_t*>w, wst, g, <float64_t*>j.wp)
    else:
        _few_pack(<const float32_t*>w, wst, g, <float32_t*>j.wp)
    for c in range(g.C):
        for i in range(g.KH):
            for jj in range(g.KW):
                j.toff[t] = c * P.ps + i * g.DH * P.Ws + jj * g.DW
                t += 1
    j.next_task = 0
    j.next_slot = 0
    if nt <= 1 or P.ntasks <= 1:
        _few_fwd_worker(j)
    else:
        pool_run(_few_fwd_worker, j, <int>_imin(nt, P.ntasks) - 1)


def _use(name):
    return ndws_few_use(name.encode())


def _current():
    return ndws_few_isa().decode()


def _use_few_isa(name):
    """Run the loops built for instruction set `name` ("avx512", "avx2" or "baseline"; the
    tests run each); returns the previous one."""
    return _switch_isa("_use_few_isa", name, _use, _current)


def _few_isas():
    """The loops' instruction sets this CPU can run, best first."""
    return _runnable_isas(_use, _current)


_use(_few_isas()[0])           # the best this CPU runs
