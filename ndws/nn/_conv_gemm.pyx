"""The dense convolution's passes on the GEMM build's indirect micro-kernel, without the GIL:
the forward drivers (direct, packed and 1x1 "positions" panels), the weight gradient and the
col2im input gradient. ndws.nn._conv2d chooses among them per shape and runs them.

No im2col buffer (docs/kernels.md, "Convolutions"): the GEMM's register tile (the
per-instruction-set micro-kernel of ndws._gemm_<isa>, MR output channels x NR output positions)
reads the input where it lies, through a table of one offset per tap: for a stride-1
convolution over a zero-padded copy of an image, tap (c, kh, kw) of NR consecutive output
positions is NR consecutive floats of the copy when the positions are counted on the padded
width (the "virtual" columns past the output width are computed and dropped). Strided
convolutions, and shapes where the dropped columns would cost more than a copy, pack each panel
of NR real positions instead (an im2col of 32 columns at a time, in L1). Weights are packed once
per call. Every output element is one fma chain over all taps, computed by one micro-kernel
call, whichever thread runs it: results do not depend on the thread count.
"""

from libc.string cimport memcpy, memset

from ndws._gemm_types cimport GemmTable
from ndws._threads cimport pool_run, ndws_claim
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t
from ndws.nn._activations cimport ACT_IDENTITY, ACT_RELU, act_tile_f32, act_tile_f64
from ndws.nn._conv cimport (Geom, ALIGN, TILE_MAX, _rup, _cdiv, _imin, _imax, _take, _ukr,
                            _tpose, _panel_rows)

cdef extern from *:
    void __builtin_prefetch(const void* p) noexcept nogil

cdef extern from *:
    """
    /* the weight gradient's dependencies: a task publishes its writes with a release add, a
       waiter acquires them; it spins (yielding now and then: the task it waits for may want
       this core) */
    #if defined(__unix__) || defined(__APPLE__)
    #include <sched.h>
    #define NDWS_WG_YIELD() sched_yield()
    #else
    #define NDWS_WG_YIELD() ((void)0)
    #endif
    static inline void ndws_wg_done(long long* p) { __atomic_add_fetch(p, 1, __ATOMIC_RELEASE); }
    static inline void ndws_wg_wait(long long* p, long long v) {
        unsigned spins = 0;
        while (__atomic_load_n(p, __ATOMIC_ACQUIRE) < v) {
    #if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
    #endif
            if (++spins % 1024 == 0)
                NDWS_WG_YIELD();
        }
    }
    """
    void ndws_wg_done(long long* p) noexcept nogil
    void ndws_wg_wait(long long* p, long long v) noexcept nogil

# ------------------------------------------------------------------------------------------------
# Shared nogil pieces: the padded copy of an image, weight packing, bias and activation

cdef void _pad_copy(const floating_t* xn, const intp_t* xs, intp_t C, intp_t H, intp_t W,
                    intp_t row0, intp_t rows, intp_t col0, intp_t Ws, intp_t ps, intp_t Hmax,
                    floating_t* dst, intp_t total) noexcept nogil:
    """dst[c*ps + i*Ws + j] := x[c, row0 + i, col0 + j] (0 outside the image) for i < rows,
    j < Ws; rows rows..Hmax of each plane and everything past the last plane up to `total`
    elements are zeroed (a direct panel's tail reads there, and feeds only dropped columns)."""
    cdef intp_t lo = _imin(Ws, _imax(0, -col0)), hi = _imax(lo, _imin(Ws, W - col0))
    cdef intp_t c, i, ih, j, sw = xs[3]
    cdef floating_t* d
    cdef const floating_t* s
    for c in range(C):
        for i in range(rows):
            d = dst + c * ps + i * Ws
            ih = row0 + i
            if ih < 0 or ih >= H or hi == lo:
                memset(d, 0, Ws * sizeof(floating_t))
                continue
            if lo:
                memset(d, 0, lo * sizeof(floating_t))
            s = xn + c * xs[1] + ih * xs[2] + (col0 + lo) * sw
            if sw == 1:
                memcpy(d + lo, s, (hi - lo) * sizeof(floating_t))
            else:
                for j in range(hi - lo):
                    d[lo + j] = s[j * sw]
            if hi < Ws:
                memset(d + hi, 0, (Ws - hi) * sizeof(floating_t))
        if rows < Hmax:
            memset(dst + c * ps + rows * Ws, 0, (Hmax - rows) * Ws * sizeof(floating_t))
    if total > C * ps:
        memset(dst + C * ps, 0, (total - C * ps) * sizeof(floating_t))


cdef void _pack_w(const floating_t* w, const intp_t* ws, intp_t CO, intp_t CI, intp_t KH,
                  intp_t KW, intp_t MR, floating_t* Ap) noexcept nogil:
    """A panels of the weights: panel q holds output channels q*MR .. q*MR + MR - 1 (zeros
    past CO), tap-major: Ap[q*K*MR + p*MR + r] = w[q*MR + r, c, i, j], p = (c*KH + i)*KW + j.
    `ws` are the element strides of w's logical (out, in, kh, kw) axes, any sign: the input
    gradient packs the flipped, transposed kernel through negative strides."""
    cdef intp_t K = CI * KH * KW, q, p, r, co, c, i, j
    cdef floating_t* dst
    for q in range(_cdiv(CO, MR)):
        dst = Ap + q * K * MR
        p = 0
        for c in range(CI):
            for i in range(KH):
                for j in range(KW):
                    for r in range(MR):
                        co = q * MR + r
                        dst[p * MR + r] = w[co * ws[0] + c * ws[1] + i * ws[2] + j * ws[3]] \
                            if co < CO else 0
                    p += 1

cdef inline void _tile_bias_act(floating_t* tile, intp_t rv, intp_t NR, const char* bias,
                                intp_t bs, intp_t co0, int act, double alpha) noexcept nogil:
    # bias of each tile row (an output channel) and the activation, on the whole tile while it
    # is in L1 (dropped columns included: cheaper than skipping them)
    cdef intp_t r, jj
    cdef floating_t bv
    if bias != NULL:
        for r in range(rv):
            bv = (<const floating_t*>bias)[(co0 + r) * bs]
            for jj in range(NR):
                tile[r * NR + jj] += bv
    if act != ACT_IDENTITY:
        if floating_t is float32_t:
            act_tile_f32(act, <float32_t>alpha, tile, rv, NR, NR, 1)
        else:
            act_tile_f64(act, alpha, tile, rv, NR, NR, 1)

# ------------------------------------------------------------------------------------------------
# Forward: Y[n, co, oh, ow] = f(b[co] + sum_{c, i, j} W[co, c, i, j] * X[n, c, oh*SH - PT + i*DH,
# ow*SW - PL + j*DW]). The output is cut into tasks of R output rows of one image (a split that
# depends on the shape only); a thread copies its task's input rows, zero-padded, into its own
# scratch (or reads x in place when no padding is needed) and sweeps panels of NR output
# positions, each through every A panel of MR output channels.



cdef void _fwd_plan(const Geom* g, intp_t MR, intp_t NR, intp_t KC, intp_t item, FwdPlan* P
                    ) noexcept nogil:
    cdef double waste, pack
    cdef intp_t rcap
    P.MR = MR
    P.NR = NR
    P.K = g.C * g.KH * g.KW
    P.nap = _cdiv(g.CO, MR)
    # K blocks of equal size (the GEMM's KC at most): a block of B (kc x NR values) stays in L1
    # while every A panel passes over it; each output tile is summed block after block
    P.nkb = _imax(1, _cdiv(P.K, KC))
    P.kc = _cdiv(P.K, P.nkb)
    P.Ws = (g.OW - 1) * g.SW + g.EKW
    # Direct panels compute Ws - OW dropped columns per row; packing costs a copy of each
    # tap's NR values per panel, against the micro-kernel's nap * NR/VLEN fmas on them
    # (about 10 cycles for 16 * nap: measured, docs/kernels.md).
    P.mode = FWD_PACKED
    if g.SH == 1 and g.SW == 1:
        waste = <double>(P.Ws - g.OW) / P.Ws
        pack = 10.0 / (16.0 * P.nap)
        if waste <= pack:
            P.mode = FWD_DIRECT
    if (g.KH == 1 and g.KW == 1 and g.SH == 1 and g.SW == 1 and g.PT == 0 and g.PB == 0
            and g.PL == 0 and g.PR == 0):
        # A 1x1 convolution is a GEMM per image: computed with positions as the tile's MR rows
        # and channels as its NR columns when that pads less (1x1 256->64 on 14x14: 196
        # positions fill 7 panels of 32 (12.5% padding) but 25 rows of 8 (2%))
        if (<double>_rup(g.OH * g.OW, MR) * _rup(g.CO, NR)
                < <double>_rup(g.OH * g.OW, NR) * _rup(g.CO, MR)):
            P.mode = FWD_POS
            P.nap = _cdiv(g.CO, NR)
    # Whole images per task when the batch has at least 8, else each image in slices so that
    # there are about 8 tasks; and no task's padded rows beyond TASK_BYTES.
    P.R = g.OH if g.N >= 8 else _cdiv(g.OH, _cdiv(8, g.N))
    # but at least a panel of NR positions per task (LeNet's 20->50 on 12x12 at batch 1: 8
    # tasks of one 8-position row each filled a quarter of every panel; 190 -> 84 us)
    P.R = _panel_rows(g.OH, P.Ws if P.mode == FWD_DIRECT else g.OW, NR,
                      _imax(P.R, _cdiv(NR, P.Ws if P.mode == FWD_DIRECT else g.OW)))
    if g.C > 0:
        rcap = (TASK_BYTES // (g.C * P.Ws * item) - g.EKH) // g.SH + 1
        P.R = _imax(1, _imin(P.R, rcap))
    P.tpi = _cdiv(g.OH, P.R)
    P.ntasks = g.N * P.tpi
    P.Hs = (P.R - 1) * g.SH + g.EKH
    P.ps = P.Hs * P.Ws
    # slack past the last plane: the last direct panel reads up to NR + Ws values beyond
    P.pad_elems = g.C * P.ps + NR + P.Ws
    P.panel_elems = P.kc * NR if P.mode != FWD_POS else P.K * MR
    if P.mode == FWD_POS:
        P.pad_elems = 0                 # x is read in place
    # packed weights: nap panels of K x MR (FWD_POS: of K x NR), two offset tables
    P.shared_bytes = (_rup(P.nap * P.K * (NR if P.mode == FWD_POS else MR) * item, ALIGN)
                      + 2 * _rup(P.K * 8, ALIGN))
    # per thread: padded rows, a packed panel block, and the tiles of one panel's A panels
    P.thread_bytes = (_rup(P.pad_elems * item, ALIGN) + _rup(P.panel_elems * item, ALIGN)
                      + _rup(P.nap * MR * NR * item, ALIGN))




cdef void _pack_panel(const FwdJob* j, const floating_t* buf, intp_t q0, intp_t nq,
                      intp_t pc, intp_t kc, floating_t* panel) noexcept nogil:
    """panel[p*NR + jj] := the padded input under tap pc + p (p < kc) for real output position
    q0 + jj of the task (an im2col of one panel's K block), zeros past the task's nq
    positions."""
    cdef const Geom* g = &j.g
    cdef intp_t NR = j.p.NR, cnt = _imin(NR, nq - q0), ns = 0, jj = 0, q, rr, cc, run
    cdef intp_t p, k, i, SW = g.SW
    cdef intp_t soff[64]
    cdef intp_t sj[64]
    cdef intp_t sl[64]
    cdef floating_t* d
    cdef floating_t* dd
    cdef const floating_t* s0
    cdef const floating_t* s
    # the panel's runs of positions along one output row
    while jj < cnt:
        q = q0 + jj
        rr = q // g.OW
        cc = q - rr * g.OW
        run = _imin(g.OW - cc, cnt - jj)
        soff[ns] = rr * g.SH * j.p.Ws + cc * SW
        sj[ns] = jj
        sl[ns] = run
        ns += 1
        jj += run
    for p in range(kc):
        d = panel + p * NR
        s0 = buf + j.boff_pad[pc + p]
        for k in range(ns):
            s = s0 + soff[k]
            dd = d + sj[k]
            if SW == 1:
                for i in range(sl[k]):
                    dd[i] = s[i]
            else:
                for i in range(sl[k]):
                    dd[i] = s[i * SW]
        for i in range(cnt, NR):
            d[i] = 0


cdef void _fwd_store(const FwdJob* j, floating_t* tile, intp_t n, intp_t co0, intp_t q0,
                     intp_t ws, intp_t oh0, intp_t lim, bint direct) noexcept nogil:
    """Bias and activation on a finished MR x NR tile, then its valid columns into Y: direct
    panels count positions on the padded width ws (columns >= OW are dropped) over lim rows;
    packed panels count real positions, lim of them."""
    cdef const Geom* g = &j.g
    cdef intp_t NR = j.p.NR, rv = _imin(j.p.MR, g.CO - co0), r, jj, q, rr, cc, run, i
    cdef intp_t y1 = j.ys[1], y3 = j.ys[3]
    cdef floating_t* yn = <floating_t*>j.y + n * j.ys[0] + co0 * y1
    cdef floating_t* d
    cdef floating_t* s
    cdef floating_t bv = 0, v
    # Without an activation, or with relu, the bias (and relu) are applied as the valid columns
    # are copied out: the same bits as in the tile, without a pass over the whole tile (LeNet's
    # conv1 forward, 8 x 32 tiles over K = 25 taps: that pass was a quarter of its
    # instructions; VGG's relu conv1, K = 27 at batch 1: the tile passes were half of them)
    cdef bint relu = j.act == ACT_RELU, has_bias = j.bias != NULL
    cdef bint fused = (has_bias and j.act == ACT_IDENTITY) or relu
    if not fused:
        _tile_bias_act(tile, rv, NR, j.bias, j.bs, co0, j.act, j.alpha)
    jj = 0
    while jj < NR:
        q = q0 + jj
        if direct:
            rr = q // ws
            cc = q - rr * ws
            if rr >= lim:
                break
            if cc >= g.OW:
                jj += ws - cc
                continue
            run = _imin(g.OW - cc, NR - jj)
        else:
            if q >= lim:
                break
            rr = q // g.OW
            cc = q - rr * g.OW
            run = _imin(_imin(g.OW - cc, NR - jj), lim - q)
        for r in range(rv):
            d = yn + r * y1 + (oh0 + rr) * j.ys[2] + cc * y3
            s = tile + r * NR + jj
            if relu:
                # relu(v) = 0 if v < 0 else v, NaN passing (the activation's own definition);
                # no bias: nothing added (x + 0 would turn -0.0 into 0.0)
                if has_bias:
                    bv = (<const floating_t*>j.bias)[(co0 + r) * j.bs]
                    for i in range(run):
                        v = s[i] + bv
                        d[i * y3] = 0 if v < 0 else v
                else:
                    for i in range(run):
                        d[i * y3] = 0 if s[i] < 0 else s[i]
            elif fused:
                bv = (<const floating_t*>j.bias)[(co0 + r) * j.bs]
                if y3 == 1:
                    for i in range(run):
                        d[i] = s[i] + bv
                else:
                    for i in range(run):
                        d[i * y3] = s[i] + bv
            elif y3 == 1:
                for i in range(run):
                    d[i] = s[i]
            else:
                for i in range(run):
                    d[i * y3] = s[i]
        jj += run


cdef void _fwd_task_pos(FwdJob* j, floating_t* apanel, floating_t* tiles, intp_t t
                        ) noexcept nogil:
    # 1x1 stride 1 without padding: per panel of MR output positions (rows of the task, flat),
    # C (MR positions x NR channels) = X^T (positions x c_in) @ W^T (c_in x NR channels): the
    # positions' values read where they lie (MR consecutive positions are xs3 apart in every
    # channel when a row is xs2 = W*xs3 after the one before), the weights packed once
    cdef const Geom* g = &j.g
    cdef const FwdPlan* P = &j.p
    cdef intp_t n = t // P.tpi, oh0 = (t % P.tpi) * P.R
    cdef intp_t rows = _imin(g.OH, oh0 + P.R) - oh0, npos = rows * g.OW
    cdef intp_t K = P.K, MR = P.MR, NR = P.NR, p0, cnt, cb, kb, pc, kc, r, c, q, oh, ow, jj
    cdef intp_t rv, cv, ars
    cdef const floating_t* xn = <const floating_t*>j.x + n * j.xs[0]
    cdef const floating_t* Bw = <const floating_t*>j.Ap
    cdef const floating_t* A
    cdef const intp_t* aoff
    cdef const floating_t* bias = <const floating_t*>j.bias
    cdef floating_t* tile
    cdef floating_t* yn = <floating_t*>j.y + n * j.ys[0]
    cdef floating_t* d
    cdef bint flat = j.xs[2] == g.W * j.xs[3] and j.ys[2] == g.OW * j.ys[3]
    p0 = 0
    while p0 < npos:
        cnt = _imin(MR, npos - p0)
        if flat and cnt == MR:
            A = xn + (oh0 * g.W + p0) * j.xs[3]
            aoff = j.boff_x                     # c * xs1
            ars = j.xs[3]
            # the panels after next, one cache line further in every channel: each k step of
            # this panel reads a new line from L3 otherwise (1x1 256->64 on 14x14, batch 32,
            # minimum per image: 94 -> 77-85 us)
            if npos - p0 > 2 * MR:
                for c in range(K):
                    __builtin_prefetch(A + aoff[c] + 2 * MR * ars)
        else:
            # a short last panel (or rows that are not one run): its values packed, zeros after
            for c in range(K):
                for r in range(MR):
                    if r < cnt:
                        q = oh0 * g.OW + p0 + r
                        oh = q // g.OW
                        apanel[c * MR + r] = xn[c * j.xs[1] + oh * j.xs[2]
                                                + (q - oh * g.OW) * j.xs[3]]
                    else:
                        apanel[c * MR + r] = 0
            A = apanel
            aoff = NULL
            ars = 1
        for cb in range(P.nap):
            tile = tiles + cb * MR * NR
            cv = _imin(NR, g.CO - cb * NR)          # the panel's channels (C's columns)
            for kb in range(P.nkb):
                pc = kb * P.kc
                kc = _imin(P.kc, K - pc)
                if aoff != NULL:
                    _ukr(j.T, kc, A, aoff + pc, ars, Bw + (cb * K + pc) * NR, NULL, tile, NR,
                         kb > 0, NULL, cv)
                else:
                    _ukr(j.T, kc, A + pc * MR, NULL, 1, Bw + (cb * K + pc) * NR, NULL, tile,
                         NR, kb > 0, NULL, cv)
            # bias per column (channel), activation, then each channel's cnt positions: a
            # transposed copy into planes whose positions are contiguous (the scalar copy was a
            # fifth of 1x1 256->64's forward)
            if bias != NULL:
                for r in range(cnt):
                    for jj in range(cv):
                        tile[r * NR + jj] += bias[(cb * NR + jj) * j.bs]
            if j.act != ACT_IDENTITY:
                if floating_t is float32_t:
                    act_tile_f32(j.act, <float32_t>j.alpha, tile, cnt, NR, NR, 1)
                else:
                    act_tile_f64(j.act, j.alpha, tile, cnt, NR, NR, 1)
            if flat and j.ys[3] == 1:
                _tpose(j.T, tile, NR, cnt, cv, yn + cb * NR * j.ys[1] + oh0 * g.OW + p0,
                       j.ys[1])
                continue
            for jj in range(cv):
                d = yn + (cb * NR + jj) * j.ys[1]
                if flat:
                    d = d + (oh0 * g.OW + p0) * j.ys[3]
                    for r in range(cnt):
                        d[r * j.ys[3]] = tile[r * NR + jj]
                else:
                    for r in range(cnt):
                        q = oh0 * g.OW + p0 + r
                        oh = q // g.OW
                        d[oh * j.ys[2] + (q - oh * g.OW) * j.ys[3]] = tile[r * NR + jj]
        p0 += MR


cdef void _fwd_task(FwdJob* j, floating_t* buf, floating_t* panel, floating_t* tiles, intp_t t
                    ) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef const FwdPlan* P = &j.p
    cdef intp_t n = t // P.tpi, oh0 = (t % P.tpi) * P.R
    cdef intp_t rows = _imin(g.OH, oh0 + P.R) - oh0
    cdef intp_t K = P.K, MR = P.MR, NR = P.NR, ws = P.Ws, nq, q0, ap, kb, pc, kc
    cdef const floating_t* xn = <const floating_t*>j.x + n * j.xs[0]
    cdef const floating_t* A = <const floating_t*>j.Ap
    cdef const floating_t* src = NULL
    cdef const intp_t* boff = j.boff_pad
    cdef bint direct = P.mode == FWD_DIRECT
    if direct and j.boff_x != NULL:
        src = xn + oh0 * j.xs[2]
        if <const char*>(src + j.boff_x_max + _rup(rows * g.W, NR)) > j.x_hi:
            src = NULL          # the last panel would read past x (its last image): copy
        else:
            boff = j.boff_x
            ws = g.W
    if src == NULL:
        _pad_copy(xn, j.xs, g.C, g.H, g.W, oh0 * g.SH - g.PT, (rows - 1) * g.SH + g.EKH,
                  -g.PL, P.Ws, P.ps, P.Hs, buf, P.pad_elems)
        src = buf
    # direct panels: NR positions counted on the padded width ws; packed: NR real positions
    nq = rows * ws if direct else rows * g.OW
    q0 = 0
    while q0 < nq:
        for kb in range(P.nkb):
            pc = kb * P.kc
            kc = _imin(P.kc, K - pc)
            # The block of B goes into an aligned, contiguous panel: in L1 for every A panel and
            # streamed in order (read in place, the NR-value runs of a direct panel straddle
            # cache lines and defeat the prefetcher: 19% L1 misses against 7.6% packed, 1x1
            # 256->64 in callgrind). A direct block is packed by the first A panel's pass.
            ap = 0
            if direct:
                _ukr(j.T, kc, A + pc * MR, NULL, 1, src + q0, boff + pc, tiles, NR, kb > 0,
                     panel)
                ap = 1
            else:
                _pack_panel(j, src, q0, nq, pc, kc, panel)
            while ap < P.nap:
                _ukr(j.T, kc, A + ap * K * MR + pc * MR, NULL, 1, panel, NULL,
                     tiles + ap * MR * NR, NR, kb > 0, NULL, nq - q0)
                ap += 1
        for ap in range(P.nap):
            _fwd_store(j, tiles + ap * MR * NR, n, ap * MR, q0, ws if direct else g.OW, oh0,
                       rows if direct else nq, direct)
        q0 += NR


cdef void _fwd_worker(void* ctx) noexcept nogil:
    # the caller and each helper that joins: its own slot of the scratch, then tasks until none
    # is left (pool_run admits at most the helpers asked for, so slots never run out)
    cdef FwdJob* j = <FwdJob*>ctx
    cdef char* mine = j.thr + ndws_claim(&j.next_slot) * j.p.thread_bytes
    cdef intp_t item = 8 if j.f64 else 4
    cdef char* panel = mine + _rup(j.p.pad_elems * item, ALIGN)
    cdef char* tiles = panel + _rup(j.p.panel_elems * item, ALIGN)
    cdef long long t
    while True:
        t = ndws_claim(&j.next_task)
        if t >= j.p.ntasks:
            return
        if j.p.mode == FWD_POS:
            if j.f64:
                _fwd_task_pos(j, <float64_t*>panel, <float64_t*>tiles, t)
            else:
                _fwd_task_pos(j, <float32_t*>panel, <float32_t*>tiles, t)
        elif j.f64:
            _fwd_task(j, <float64_t*>mine, <float64_t*>panel, <float64_t*>tiles, t)
        else:
            _fwd_task(j, <float32_t*>mine, <float32_t*>panel, <float32_t*>tiles, t)


cdef void _fwd_prepare(FwdJob* j, const char* w, const intp_t* wst, char* shared
                       ) noexcept nogil:
    """Carve the shared scratch (packed weights, the two offset tables), pack the weights
    (logical (out, in, kh, kw) strides wst), fill the tables; j.thr = the per-thread parts."""
    cdef const Geom* g = &j.g
    cdef FwdPlan* P = &j.p
    cdef char* cur = shared
    cdef intp_t item = 8 if j.f64 else 4, c, i, jj, p = 0
    cdef char* Ap = _take(&cur, P.nap * P.K * (P.NR if P.mode == FWD_POS else P.MR) * item)
    cdef intp_t* bp = <intp_t*>_take(&cur, P.K * 8)
    cdef intp_t* bx = <intp_t*>_take(&cur, P.K * 8)
    cdef bint direct_x = (P.mode == FWD_DIRECT and g.PT == 0 and g.PB == 0 and g.PL == 0
                          and g.PR == 0 and j.xs[3] == 1 and j.xs[2] == g.W and j.xs[1] > 0)
    j.thr = cur
    j.Ap = Ap
    # weights in panels of MR output channels (as A), or of NR (as B, FWD_POS): the same layout
    # with the panel height as the parameter
    if j.f64:
        _pack_w(<const float64_t*>w, wst, g.CO, g.C, g.KH, g.KW,
                P.NR if P.mode == FWD_POS else P.MR, <float64_t*>Ap)
    else:
        _pack_w(<const float32_t*>w, wst, g.CO, g.C, g.KH, g.KW,
                P.NR if P.mode == FWD_POS else P.MR, <float32_t*>Ap)
    j.boff_x_max = 0
    for c in range(g.C):
        for i in range(g.KH):
            for jj in range(g.KW):
                bp[p] = c * P.ps + i * g.DH * P.Ws + jj * g.DW
                bx[p] = c * j.xs[1] + i * g.DH * j.xs[2] + jj * g.DW
                if bx[p] > j.boff_x_max:
                    j.boff_x_max = bx[p]
                p += 1
    j.boff_pad = bp
    j.boff_x = bx if direct_x or P.mode == FWD_POS else NULL


cdef void _fwd_run(FwdJob* j, int nt) noexcept nogil:
    j.next_task = 0
    j.next_slot = 0
    if nt <= 1 or j.p.ntasks <= 1:
        _fwd_worker(j)
    else:
        pool_run(_fwd_worker, j, <int>_imin(nt, j.p.ntasks) - 1)

# ------------------------------------------------------------------------------------------------
# Weight gradient: dW[co, c, i, j] = sum_{n, oh, ow} dY[n, co, oh, ow] * X[n, c, oh*SH - PT +
# i*DH, ow*SW - PL + j*DW]. A GEMM whose reduction runs over output positions: C tiles are MR
# taps x NR output channels; A is the input (a padded copy, or x itself when there is no
# padding), read in place (the MR taps of a tile are MR channels at one (i, j), or MR
# consecutive kernel columns of one channel when there are few channels: either way a fixed
# stride apart, so one offset per position addresses them), B is dY transposed into panels of
# NR channels. Or, with few output channels ("row taps"), C tiles are MR output channels x NR
# taps: A is dY read in place, B a channels-last copy of the input. Images go in chunks of a
# shape-fixed size. One pool run does it all: chunk s's copies (each image's copy, each image's
# dY panels) and chunk s-1's products (a task per tile) are claimed in that order, into one of
# up to three sets of chunk buffers, each task waiting only for what it reads, so the copies
# run beside the products and no thread idles between chunks. The micro-kernel sums a chunk in
# a fresh fma chain over its positions, in order, and adds it to the tile, chunk after chunk:
# the reduction over the batch does not depend on the thread count (docs/kernels.md,
# "Threads").


cdef enum:
    WG_PACK_ROWS = 64           # positions per block of the dY transpose


cdef void _wg_plan(const Geom* g, intp_t MR, intp_t NR, intp_t item, WgPlan* W) noexcept nogil:
    W.MR = MR
    W.NR = NR
    # tap groups: MR channels at one kernel position, or MR kernel columns of one channel,
    # whichever computes fewer padding rows
    W.kwmode = g.C * _rup(g.KW, MR) < g.KW * _rup(g.C, MR)
    if W.kwmode:
        W.CIp = g.C
        W.KWr = _rup(g.KW, MR)
        W.nkwb = W.KWr // MR
        W.ncblk = 0
        W.ngroups = g.C * g.KH * W.nkwb
        W.Ws = (g.OW - 1) * g.SW + (W.KWr - 1) * g.DW + 1
    else:
        W.CIp = _rup(g.C, MR)
        W.KWr = g.KW
        W.nkwb = 0
        W.ncblk = W.CIp // MR
        W.ngroups = g.KH * g.KW * W.ncblk
        W.Ws = (g.OW - 1) * g.SW + g.EKW
    W.Hs = (g.OH - 1) * g.SH + g.EKH
    W.P = g.OH * g.OW
    # Row taps when the output channels fill MR-row panels exactly but waste much of an NR-wide
    # one and their groups waste less: tiles of MR output channels x NR taps of one kernel row,
    # NR consecutive (kernel column, channel) pairs, which a channels-last copy holds
    # contiguously at every position (res 16->16 3x3: 48 of 64 columns used, against 16 of 32
    # channel columns; the residual graph's 3->16 stem: 9 of 32 against 3 of 8 times 16 of 32,
    # 1.94 -> 0.91 ms at batch 32). dY is then A, read in place.
    W.ngr = _cdiv(g.KW * g.C, NR)
    W.rowmode = (g.DW == 1 and g.CO % MR == 0
                 and <double>g.KW * g.C / (W.ngr * NR) * _rup(g.CO, NR)
                 > <double>(g.KW * g.C if W.kwmode else g.C)
                   / (g.C * W.KWr if W.kwmode else W.CIp) * g.CO)
    if W.rowmode:
        W.kwmode = False
        W.CIp = g.C
        W.Ws = (g.OW - 1) * g.SW + g.EKW
        W.ps = W.Ws * g.C                   # a copy row: Ws pixels of C channels
        W.img = W.Hs * W.ps + NR            # the last group of the last row reads past it
        W.COp = g.CO
        W.ncb = g.CO // MR                  # panels of MR output channels
        W.ngroups = g.KH * W.ngr
    else:
        W.ps = W.Hs * W.Ws
        W.img = W.CIp * W.ps
        W.COp = _rup(g.CO, NR)
        W.ncb = W.COp // NR
    W.Bc = _imax(1, _imin(g.N, _imin(_cdiv(CHUNK_POSITIONS, W.P),
                                      CHUNK_BYTES // _imax(1, W.img * item))))
    W.nchunks = _cdiv(g.N, W.Bc)
    W.ntiles = W.ngroups * W.ncb
    W.set_bytes = _rup(W.Bc * W.img * item, ALIGN)
    if not W.rowmode:
        W.set_bytes += _rup(W.COp * W.Bc * W.P * item, ALIGN)
    W.shared_bytes = (W.set_bytes + _rup(W.Bc * W.P * 8, ALIGN) * (2 if W.rowmode else 1)
                      + _rup(W.ngroups * (NR if W.rowmode else MR) * W.COp * item, ALIGN)
                      + _rup((2 * W.nchunks + W.ntiles) * 8, ALIGN))


cdef void _hwc_copy(const GemmTable* T, const floating_t* xn, const intp_t* xs, intp_t C,
                    intp_t H, intp_t W, intp_t row0, intp_t rows, intp_t col0, intp_t Ws,
                    floating_t* dst, intp_t total) noexcept nogil:
    """dst[(i*Ws + j)*C + c] := x[c, row0 + i, col0 + j] (0 outside the image) for i < rows,
    j < Ws: channels last (a row's transpose by the GEMM build's register blocks when x's
    rows are contiguous: element by element it was a tenth of the 16->16 weight gradient);
    the rest up to `total` elements zeroed."""
    cdef intp_t i, ih, j, c, iw, lo = _imin(Ws, _imax(0, -col0))
    cdef intp_t hi = _imax(lo, _imin(Ws, W - col0))
    cdef floating_t* d
    cdef const floating_t* s
    for i in range(rows):
        d = dst + i * Ws * C
        ih = row0 + i
        if ih < 0 or ih >= H or hi == lo:
            memset(d, 0, Ws * C * sizeof(floating_t))
            continue
        if lo:
            memset(d, 0, lo * C * sizeof(floating_t))
        if xs[3] == 1:
            _tpose(T, xn + ih * xs[2] + col0 + lo, xs[1], C, hi - lo, d + lo * C, C)
        else:
            for c in range(C):
                s = xn + c * xs[1] + ih * xs[2] + col0 * xs[3]
                for j in range(lo, hi):
                    d[j * C + c] = s[j * xs[3]]
        if hi < Ws:
            memset(d + hi * C, 0, (Ws - hi) * C * sizeof(floating_t))
    if total > rows * Ws * C:
        memset(dst + rows * Ws * C, 0, (total - rows * Ws * C) * sizeof(floating_t))


cdef void _wg_pre(WgJob* j, intp_t ch, intp_t t, floating_t dummy) noexcept nogil:
    # copy task t of chunk ch: image t's padded copy (unless x is read in place), or the dY
    # panel cb of image b (t = [nb +] cb*nb + b)
    cdef const Geom* g = &j.g
    cdef const WgPlan* W = &j.w
    cdef intp_t n0 = ch * W.Bc, nb = _imin(W.Bc, g.N - n0), cb, b, q, oh, ow, jj
    cdef intp_t st = ch % j.nsets
    cdef intp_t NR = W.NR, P = W.P, cv, q0, qn, oh0, ow0
    cdef const floating_t* dyn
    cdef const floating_t* src
    cdef floating_t* dst
    cdef floating_t* d
    if W.rowmode:
        _hwc_copy(j.T, <const floating_t*>j.x + (n0 + t) * j.xs[0], j.xs, g.C, g.H, g.W,
                  -g.PT, W.Hs, -g.PL, W.Ws, <floating_t*>j.pad[st] + t * W.img, W.img)
        return
    if not j.inplace:
        if t < nb:
            _pad_copy(<const floating_t*>j.x + (n0 + t) * j.xs[0], j.xs, g.C, g.H, g.W, -g.PT,
                      W.Hs, -g.PL, W.Ws, W.ps, W.Hs, <floating_t*>j.pad[st] + t * W.img,
                      g.C * W.ps)
            return
        t -= nb
    cb = t // nb
    b = t - cb * nb
    dst = <floating_t*>j.Bt[st] + (cb * W.Bc + b) * P * NR
    dyn = <const floating_t*>j.dy + (n0 + b) * j.ds[0] + cb * NR * j.ds[1]
    cv = _imin(NR, g.CO - cb * NR)
    # by blocks of WG_PACK_ROWS positions, whose NR-wide rows (8 KiB for 64 x 32 float32)
    # stay in L1 while each channel's run is written down a column: a channel's column over
    # a whole image touches a cache line per position (res 16->16 on 32x32: 1024 lines, past
    # L1, for every one of the 32 channels)
    # (a dY image whose positions follow each other: the GEMM build's register-block
    # transposes; element by element this copy was a sixth of 64->64's weight gradient)
    q0 = 0
    oh0 = ow0 = 0
    while q0 < P:
        qn = _imin(WG_PACK_ROWS, P - q0)
        if j.ds[3] == 1 and j.ds[2] == g.OW:
            _tpose(j.T, dyn + q0, j.ds[1], cv, qn, dst + q0 * NR, NR)
        else:
            for jj in range(cv):
                src = dyn + jj * j.ds[1]
                oh, ow = oh0, ow0
                d = dst + q0 * NR + jj
                for q in range(qn):
                    d[q * NR] = src[oh * j.ds[2] + ow * j.ds[3]]
                    ow += 1
                    if ow == g.OW:
                        ow = 0
                        oh += 1
        if cv < NR:
            for q in range(qn):
                memset(dst + (q0 + q) * NR + cv, 0, (NR - cv) * sizeof(floating_t))
        ow0 += qn
        oh0 += ow0 // g.OW
        ow0 %= g.OW
        q0 += qn


cdef void _wg_tile(WgJob* j, intp_t ch, intp_t t, floating_t dummy) noexcept nogil:
    # tile t (tap group, channel panel) of chunk ch: its products added to the accumulator
    cdef const Geom* g = &j.g
    cdef const WgPlan* W = &j.w
    cdef intp_t grp = t // W.ncb, cb = t % W.ncb, tap, ars, i, jj, c, st = ch % j.nsets
    cdef intp_t nb = _imin(W.Bc, g.N - ch * W.Bc)
    cdef const floating_t* A
    if W.rowmode:
        # cb: the panel of MR output channels; grp = i*ngr + gr: taps gr*NR .. gr*NR + NR - 1
        # of kernel row i, (kernel column, channel) pairs in the copy's order
        i = grp // W.ngr
        _ukr(j.T, nb * W.P, <const floating_t*>j.dy + ch * W.Bc * j.ds[0]
             + cb * W.MR * j.ds[1], j.dyoff, j.ds[1],
             <const floating_t*>j.pad[st] + i * g.DH * W.ps + (grp % W.ngr) * W.NR,
             j.posoff, <floating_t*>j.acc + cb * W.MR * W.ngroups * W.NR + grp * W.NR,
             W.ngroups * W.NR, ch > 0, NULL, g.KW * g.C - (grp % W.ngr) * W.NR)
        return
    if W.kwmode:
        # grp = (c*KH + i)*nkwb + kwb: MR consecutive kernel columns of channel c, row i
        c = grp // (g.KH * W.nkwb)
        i = (grp // W.nkwb) % g.KH
        jj = (grp % W.nkwb) * W.MR
        ars = g.DW * j.es
    else:
        # grp = (i*KW + jj)*ncblk + cblk: MR consecutive channels at kernel position (i, jj)
        i = grp // (g.KW * W.ncblk)
        jj = (grp // W.ncblk) % g.KW
        c = (grp % W.ncblk) * W.MR
        ars = j.cs
    tap = c * j.cs + i * g.DH * j.rs + jj * g.DW * j.es
    if j.inplace:
        A = <const floating_t*>j.x + ch * W.Bc * j.xs[0] + tap
    else:
        A = <const floating_t*>j.pad[st] + tap
    _ukr(j.T, nb * W.P, A, j.posoff, ars,
         <const floating_t*>j.Bt[st] + cb * (W.Bc * W.P) * W.NR, NULL,
         <floating_t*>j.acc + grp * W.MR * W.COp + cb * W.NR, W.COp, ch > 0)


cdef inline intp_t _wg_copies(const WgJob* j, intp_t ch) noexcept nogil:
    # copy tasks of chunk ch: per image its copy (none when x is read in place) and, unless
    # dY is read in place (row taps), its ncb dY panels
    cdef intp_t nb = _imin(j.w.Bc, j.g.N - ch * j.w.Bc)
    if j.w.rowmode:
        return nb
    return (0 if j.inplace else nb) + j.w.ncb * nb


cdef void _wg_worker(void* ctx) noexcept nogil:
    # slots claimed in order until none is left; each task first waits for what it reads
    # (always a task claimed before it, so some thread is running it)
    cdef WgJob* j = <WgJob*>ctx
    cdef long long i
    cdef intp_t step, r, ch
    while True:
        i = ndws_claim(&j.next)
        if i >= j.ntasks:
            return
        step = <intp_t>(i // (j.cp + j.ct))
        r = <intp_t>(i - step * (j.cp + j.ct))
        if r < j.cp:
            ch = step
            if ch >= j.nchunks or r >= _wg_copies(j, ch):
                continue
            if ch >= j.nsets:       # the set's previous chunk: all its products summed
                ndws_wg_wait(&j.tiles_done[ch - j.nsets], j.ct)
            if j.f64:
                _wg_pre(j, ch, r, <float64_t>0)
            else:
                _wg_pre(j, ch, r, <float32_t>0)
            ndws_wg_done(&j.copies_done[ch])
        else:
            ch = step - j.L
            r -= j.cp
            if ch < 0:
                continue
            ndws_wg_wait(&j.copies_done[ch], _wg_copies(j, ch))
            ndws_wg_wait(&j.tile_next[r], ch)       # the tile's sum of the chunks before
            if j.f64:
                _wg_tile(j, ch, r, <float64_t>0)
            else:
                _wg_tile(j, ch, r, <float32_t>0)
            ndws_wg_done(&j.tile_next[r])
            ndws_wg_done(&j.tiles_done[ch])


cdef void _wg_scatter(const WgJob* j, char* dw, const intp_t* dws, floating_t dummy
                      ) noexcept nogil:
    # dW[co, c, i, jj] from the accumulator rows of the tap groups
    cdef const Geom* g = &j.g
    cdef const WgPlan* W = &j.w
    cdef intp_t co, c, i, jj, row
    cdef const floating_t* acc = <const floating_t*>j.acc
    cdef floating_t* out = <floating_t*>dw
    if W.rowmode:
        # acc row co, column (i*ngr)*NR + jj*C + c
        for co in range(g.CO):
            for c in range(g.C):
                for i in range(g.KH):
                    for jj in range(g.KW):
                        out[co * dws[0] + c * dws[1] + i * dws[2] + jj * dws[3]] = \
                            acc[co * W.ngroups * W.NR + i * W.ngr * W.NR + jj * g.C + c]
        return
    for c in range(g.C):
        for i in range(g.KH):
            for jj in range(g.KW):
                if W.kwmode:
                    row = ((c * g.KH + i) * W.nkwb + jj // W.MR) * W.MR + jj % W.MR
                else:
                    row = ((i * g.KW + jj) * W.ncblk + c // W.MR) * W.MR + c % W.MR
                for co in range(g.CO):
                    out[co * dws[0] + c * dws[1] + i * dws[2] + jj * dws[3]] = \
                        acc[row * W.COp + co]


cdef void _wg_run(WgJob* j, char* shared, intp_t nbytes, char* dw, const intp_t* dws, int nt
                  ) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef const WgPlan* W = &j.w
    cdef char* cur = shared
    cdef intp_t item = 8 if j.f64 else 4, b, q, oh, ow, s
    # x itself as A when no copy would add anything: no padding and whole groups of MR channels
    j.inplace = (not W.kwmode and not W.rowmode and W.CIp == g.C and g.PT == 0 and g.PB == 0
                 and g.PL == 0 and g.PR == 0)
    if W.rowmode:
        j.cs, j.rs, j.es, j.imgs = 1, W.ps, g.C, W.img
    elif j.inplace:
        j.cs, j.rs, j.es, j.imgs = j.xs[1], j.xs[2], j.xs[3], j.xs[0]
    else:
        j.cs, j.rs, j.es, j.imgs = W.ps, W.Ws, 1, W.img
    # one set of chunk buffers on one thread (each chunk copied, then summed); on more, up to
    # three (the scratch of conv2d_scratch_bytes), so the next chunk's copies run beside the
    # products and a set is free long before it is refilled
    j.nsets = 1
    if nt > 1 and W.nchunks > 1:
        j.nsets = _imax(1, _imin(3, 1 + (nbytes - W.shared_bytes) // W.set_bytes))
    j.L = 1 if j.nsets > 1 else 0
    for s in range(j.nsets):
        j.pad[s] = _take(&cur, W.Bc * W.img * item)
        j.Bt[s] = NULL if W.rowmode else _take(&cur, W.COp * W.Bc * W.P * item)
        # padding planes (channels C..CIp) stay zero: the copies only write the real channels
        if not j.inplace and not W.rowmode:
            memset(j.pad[s], 0, W.Bc * W.img * item)
    j.posoff = <intp_t*>_take(&cur, W.Bc * W.P * 8)
    j.dyoff = <intp_t*>_take(&cur, W.Bc * W.P * 8) if W.rowmode else NULL
    j.acc = _take(&cur, W.ngroups * (W.NR if W.rowmode else W.MR) * W.COp * item)
    j.copies_done = <long long*>_take(&cur, (2 * W.nchunks + W.ntiles) * 8)
    j.tiles_done = j.copies_done + W.nchunks
    j.tile_next = j.tiles_done + W.nchunks
    memset(j.copies_done, 0, (2 * W.nchunks + W.ntiles) * 8)
    q = 0
    for b in range(W.Bc):
        for oh in range(g.OH):
            for ow in range(g.OW):
                j.posoff[q] = b * j.imgs + oh * g.SH * j.rs + ow * g.SW * j.es
                if W.rowmode:
                    j.dyoff[q] = b * j.ds[0] + oh * j.ds[2] + ow * j.ds[3]
                q += 1
    if g.N == 0:
        memset(j.acc, 0, W.ngroups * (W.NR if W.rowmode else W.MR) * W.COp * item)
    j.nchunks = W.nchunks
    j.ct = W.ntiles
    j.cp = _wg_copies(j, 0)
    j.ntasks = (j.nchunks + j.L) * (j.cp + j.ct)
    j.next = 0
    if nt <= 1 or j.ntasks <= 1:
        _wg_worker(j)
    else:
        pool_run(_wg_worker, j, <int>_imin(nt, j.ntasks) - 1)
    if j.f64:
        _wg_scatter(j, dw, dws, <float64_t>0)
    else:
        _wg_scatter(j, dw, dws, <float32_t>0)

# ------------------------------------------------------------------------------------------------
# Input gradient by col2im (strided convolutions, and few input channels): per image, panels
# of NR output positions of dY (packed) times the transposed weights (taps as rows, packed once)
# give MR taps x NR positions of the column matrix, scattered onto dX at once. An image is one
# task: its dX elements receive their contributions in a fixed order. (Stride-1 convolutions
# with enough channels run the forward driver on the flipped kernel instead.)



cdef void _dx_plan(const Geom* g, intp_t MR, intp_t NR, intp_t item, intp_t* shared,
                   intp_t* thread) noexcept nogil:
    cdef intp_t K = g.C * g.KH * g.KW
    shared[0] = _rup(_cdiv(K, MR) * g.CO * MR * item, ALIGN)
    thread[0] = _rup(g.CO * NR * item, ALIGN)


cdef void _pack_wt(const floating_t* w, const intp_t* ws, intp_t CO, intp_t CI, intp_t KH,
                   intp_t KW, intp_t MR, floating_t* At) noexcept nogil:
    cdef intp_t K = CI * KH * KW, tp, co, r, tap, c, i, jj
    for tp in range(_cdiv(K, MR)):
        for co in range(CO):
            for r in range(MR):
                tap = tp * MR + r
                if tap >= K:
                    At[(tp * CO + co) * MR + r] = 0
                    continue
                c = tap // (KH * KW)
                i = (tap // KW) % KH
                jj = tap % KW
                At[(tp * CO + co) * MR + r] = w[co * ws[0] + c * ws[1] + i * ws[2] + jj * ws[3]]


cdef void _dx_task(DxJob* j, floating_t* Bp, intp_t n) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef intp_t MR = j.MR, NR = j.NR, npos = g.OH * g.OW, p0, cnt, co, jj, tp, r, rv, tap
    cdef intp_t c, i, kj, q, oh, ow, run, ih, iw0, lo, hi, k, h, w, nr, u
    cdef const floating_t* dyn = <const floating_t*>j.dy + n * j.ds[0]
    cdef floating_t* dxn = <floating_t*>j.dx + n * j.xs[0]
    cdef const floating_t* At = <const floating_t*>j.At
    cdef const floating_t* dyc
    cdef floating_t* row
    cdef floating_t* s
    cdef floating_t tile[TILE_MAX]
    cdef intp_t doff[64]            # dY offset of each panel position
    cdef intp_t roh[64]             # the panel's runs along one output row: row, first column,
    cdef intp_t row_[64]            # first panel position, length
    cdef intp_t rj[64]
    cdef intp_t rl[64]
    cdef intp_t x3 = j.xs[3], SW = g.SW
    cdef intp_t roff[64]            # fast path: dX offset of each run's first position
    cdef floating_t* base
    # stride 1, no padding, unit column stride: no tap of any output falls outside dX (LeNet's
    # conv2): no bounds per tap and run (they were a third of its input gradient)
    cdef bint inside = (g.SH == 1 and SW == 1 and x3 == 1 and g.PT == 0 and g.PL == 0
                        and g.PB == 0 and g.PR == 0)
    cdef bint flat = j.ds[3] == 1 and j.ds[2] == g.OW     # dY's positions follow each other
    for c in range(g.C):
        for h in range(g.H):
            row = dxn + c * j.xs[1] + h * j.xs[2]
            if x3 == 1:
                memset(row, 0, g.W * sizeof(floating_t))
            else:
                for w in range(g.W):
                    row[w * x3] = 0
    p0 = 0
    while p0 < npos:
        cnt = _imin(NR, npos - p0)
        nr = 0
        jj = 0
        while jj < cnt:
            q = p0 + jj
            oh = q // g.OW
            ow = q - oh * g.OW
            run = _imin(g.OW - ow, cnt - jj)
            roh[nr], row_[nr], rj[nr], rl[nr] = oh, ow, jj, run
            for u in range(run):
                doff[jj + u] = oh * j.ds[2] + (ow + u) * j.ds[3]
            nr += 1
            jj += run
        for co in range(g.CO):
            dyc = dyn + co * j.ds[1]
            # a later panel's lines of this channel: a panel reads a line or two of each of
            # CO planes, too many streams for the hardware prefetcher, and every load went to
            # memory (VGG's conv1 3->32 on 32x32 at batch 32: 7.5 -> 1.5 ms; 8 panels ahead)
            __builtin_prefetch(dyc + doff[cnt - 1] + 8 * NR * j.ds[3])
            __builtin_prefetch(dyc + doff[cnt - 1] + (8 * NR + 16) * j.ds[3])
            if flat:
                for jj in range(cnt):
                    Bp[co * NR + jj] = dyc[p0 + jj]
            else:
                for jj in range(cnt):
                    Bp[co * NR + jj] = dyc[doff[jj]]
            for jj in range(cnt, NR):
                Bp[co * NR + jj] = 0
        if inside:
            # every tap of every output lands inside dX: each run adds to one span of a row
            for u in range(nr):
                roff[u] = roh[u] * j.xs[2] + row_[u]
        for tp in range(j.ntp):
            _ukr(j.T, g.CO, At + tp * g.CO * MR, NULL, 1, Bp, NULL, tile, NR, 0)
            rv = _imin(MR, j.K - tp * MR)
            for r in range(rv):
                tap = tp * MR + r
                c = tap // (g.KH * g.KW)
                i = (tap // g.KW) % g.KH
                kj = tap % g.KW
                if inside:
                    base = dxn + c * j.xs[1] + i * g.DH * j.xs[2] + kj * g.DW
                    for u in range(nr):
                        row = base + roff[u]
                        s = tile + r * NR + rj[u]
                        for k in range(rl[u]):
                            row[k] += s[k]
                    continue
                for u in range(nr):
                    ih = roh[u] * g.SH - g.PT + i * g.DH
                    if ih < 0 or ih >= g.H:
                        continue
                    iw0 = row_[u] * SW - g.PL + kj * g.DW
                    row = dxn + c * j.xs[1] + ih * j.xs[2]
                    s = tile + r * NR + rj[u]
                    if SW == 1 and x3 == 1:
                        # ow + k lands inside the row while 0 <= iw0 + k < W (no division)
                        lo = 0 if iw0 >= 0 else -iw0
                        hi = _imin(rl[u], g.W - iw0)
                        for k in range(lo, hi):
                            row[iw0 + k] += s[k]
                    else:
                        # ... while 0 <= iw0 + k*SW < W
                        lo = 0 if iw0 >= 0 else _cdiv(-iw0, SW)
                        hi = _imin(rl[u], _cdiv(g.W - iw0, SW)) if g.W > iw0 else 0
                        for k in range(lo, hi):
                            row[(iw0 + k * SW) * x3] += s[k]
        p0 += NR
    if j.bias != NULL or j.act != ACT_IDENTITY:
        for c in range(g.C):
            for h in range(g.H):
                row = dxn + c * j.xs[1] + h * j.xs[2]
                if x3 == 1:
                    _tile_bias_act(row, 1, g.W, j.bias, j.bs, c, j.act, j.alpha)
                else:
                    for w in range(g.W):
                        _tile_bias_act(row + w * x3, 1, 1, j.bias, j.bs, c, j.act, j.alpha)


cdef void _dx_worker(void* ctx) noexcept nogil:
    cdef DxJob* j = <DxJob*>ctx
    cdef char* mine = j.thr + ndws_claim(&j.next_slot) * j.thread_bytes
    cdef long long t
    while True:
        t = ndws_claim(&j.next_task)
        if t >= j.g.N:
            return
        if j.f64:
            _dx_task(j, <float64_t*>mine, t)
        else:
            _dx_task(j, <float32_t*>mine, t)


cdef void _dx_run(DxJob* j, const char* w, const intp_t* wst, char* shared, int nt
                  ) noexcept nogil:
    cdef intp_t item = 8 if j.f64 else 4, sh, th
    cdef const Geom* g = &j.g
    _dx_plan(g, j.MR, j.NR, item, &sh, &th)
    j.K = g.C * g.KH * g.KW
    j.ntp = _cdiv(j.K, j.MR)
    j.At = shared
    j.thr = shared + sh
    j.thread_bytes = th
    if j.f64:
        _pack_wt(<const float64_t*>w, wst, g.CO, g.C, g.KH, g.KW, j.MR, <float64_t*>shared)
    else:
        _pack_wt(<const float32_t*>w, wst, g.CO, g.C, g.KH, g.KW, j.MR, <float32_t*>shared)
    j.next_task = 0
    j.next_slot = 0
    if nt <= 1 or g.N <= 1:
        _dx_worker(j)
    else:
        pool_run(_dx_worker, j, <int>_imin(nt, g.N) - 1)

# ------------------------------------------------------------------------------------------------
# The register tile of this CPU's GEMM build (GIL held)

cdef int _tile_of(const GemmTable* T, bint f64, intp_t* MR, intp_t* NR) except -1:
    MR[0] = T.mr_f64 if f64 else T.mr_f32
    NR[0] = T.nr_f64 if f64 else T.nr_f32
    if MR[0] * NR[0] > TILE_MAX or NR[0] > 64:
        raise RuntimeError(f"the GEMM build's register tile {MR[0]}x{NR[0]} is larger than "
                           f"the convolutions' tile buffer")
    return 0
