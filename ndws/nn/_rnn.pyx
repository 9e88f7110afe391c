"""Recurrent time loops of `ndws.nn.functional`: LSTM (with GravesLSTM's peepholes) and
SimpleRnn, forward and backward over whole sequences, with DL4J's parameters, gate order and
masks (docs/kernels.md, "Recurrent time loops").

How a forward pass runs. The input projection ``X @ W`` is a GEMM with the (step, example)
pairs as rows in time-major order (an input whose rows are not one strided matrix in that order
is copied first), made a chunk of steps at a time (at least 256 KiB of result and twice W's
bytes, W packed once for the chunks) just before the loop reaches them, so that the scratch
holds one chunk, not every step's, and W is read once per chunk, not once per step. Then, per
step, without the GIL and without a Python call: the recurrent GEMM ``h_{t-1} @ RW`` into the
step's temporary, and one pass per example that adds the projection and the bias, applies the
activations, updates the cell, applies the mask and writes the output, the new state and, when
training, the step's cache row (what the backward needs: gates, cell, output). The backward
runs the steps in reverse: per step one GEMM for the recurrent error ``dz_{t+1} @ RW^T`` and
one pass per example that writes the step's gate errors; after the loop three GEMMs over all
steps give dW, dRW and dx, and a matrix-vector product the bias gradient.

On several threads the examples are cut into groups (whole rows of the GEMM's micro-kernel)
that run as lanes over windows of steps (_lane_step): a group's step makes its rows of the
recurrent product and then runs their passes. An example's product reads only its own row of
the previous step (h_{t-1}, or dz_{t+1} backward), so no step waits for the whole batch; each
chunk's input projection is one GEMM on the pool before the windows of its steps.

The step's temporaries live in a cycle of the caller's loop workspace, opened and closed at
every step from the compiled loop (ndws._arena, "cycles of a compiled loop": DL4J's
WS_RNN_LOOP_WORKING_MEM, with the statistics a loop of `with ws:` would give), or, without
one, in the call's scratch. Everything else the call needs (the projection, copies, state
buffers, the backward's gate errors) is scratch: `scratch=` or placed in the current workspace
like a result (`*_scratch_bytes` says how much).

Every GEMM is ndws._linalg's (results independent of the thread count), every example's pass
runs on one thread in a fixed order, and the reductions are GEMMs or fixed-order loops: 1 and 2
threads give the same bits.
"""
from libc.string cimport memcpy, memset
cimport numpy as cnp

import numpy as np

from ndws._arena cimport Arena
from ndws._core cimport NDArray, check_array, pin_foreign
from ndws._dispatch cimport array_arg, shape_of, arrays_overlap
from ndws._gemm_types cimport GemmTable
from ndws._linalg cimport gemm_table
from ndws._threads cimport (threads_for, run_tasks, run_lanes, LANES_MAX, GRAIN_GEMM_F32,
                            GRAIN_GEMM_F64, GRAIN_NN_CHEAP, GRAIN_NN_UPDATE)
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t
from ndws.nn._activations cimport (ACT_IDENTITY, ACT_SIGMOID, ACT_TANH, ACT_N_ELEMENTWISE,
                                   act_tile_f32, act_tile_f64, act_backward_tile_f32,
                                   act_backward_tile_f64)
from ndws.nn._rnn_args cimport (ALIGN, _Call, _activation, _check_size, _es, _loop_workspace,
                               _ncw, _operand, _seq_shape, _seq_strides, _shape_is, size_arg)
from ndws._core import from_numpy as _from_numpy

cnp.import_array()

# one example's LSTM step for identity / sigmoid / tanh, built per instruction set (see there)
cdef extern from "_rnn_cell.h" nogil:
    void ndws_lstm_fwd_f32(int act, int gact, Py_ssize_t n, const float32_t* P,
                           const float32_t* S, const float32_t* bias, const float32_t* peep,
                           float32_t* c, float32_t* hb, float32_t* G, float32_t* Ct,
                           float32_t* At, float32_t m) noexcept
    void ndws_lstm_fwd_f64(int act, int gact, Py_ssize_t n, const float64_t* P,
                           const float64_t* S, const float64_t* bias, const float64_t* peep,
                           float64_t* c, float64_t* hb, float64_t* G, float64_t* Ct,
                           float64_t* At, float64_t m) noexcept
    void ndws_lstm_bwd_f32(int act, int gact, Py_ssize_t n, const float32_t* G,
                           const float32_t* At, const float32_t* cp, const float32_t* dh,
                           const float32_t* dc, const float32_t* peep, float32_t* D,
                           float32_t* dcp) noexcept
    void ndws_lstm_bwd_f64(int act, int gact, Py_ssize_t n, const float64_t* G,
                           const float64_t* At, const float64_t* cp, const float64_t* dh,
                           const float64_t* dc, const float64_t* peep, float64_t* D,
                           float64_t* dcp) noexcept
    int ndws_cell_count() noexcept
    int ndws_cell_runs(int i) noexcept
    const char* ndws_cell_name(int i) noexcept
    const char* ndws_cell_isa() noexcept
    void ndws_cell_use(int i) noexcept

ndws_cell_use(-1)                   # the best clone this CPU runs

# the general path for every example (tests: the fused cells give its bits)
cdef bint _fused_cells = True


def _cell_isas():
    """The instruction sets of the fused cells this CPU runs, best first (a subset of
    ``["avx512", "avx2", "baseline"]``)."""
    return [(<bytes>ndws_cell_name(i)).decode() for i in range(ndws_cell_count())
            if ndws_cell_runs(i)]


def _use_cell_isa(name):
    """Run the fused cells built for instruction set `name` (one of `_cell_isas()`; None: the
    best), so tests check every clone; returns the one in use before."""
    previous = (<bytes>ndws_cell_isa()).decode()
    if name is None:
        ndws_cell_use(-1)
        return previous
    names = _cell_isas()
    if name not in names:
        raise ValueError(f"isa: expected one of {', '.join(names)}, got {name!r}")
    for i in range(ndws_cell_count()):
        if (<bytes>ndws_cell_name(i)).decode() == name:
            ndws_cell_use(i)
    return previous


# The forward's input projection per GEMM, in bytes of result (see _proj_steps): at least this
# (256 KiB keeps a small layer's chunk in L2), and at least twice W's bytes.
cdef intp_t _proj_chunk_bytes = 256 << 10


def _use_proj_chunk_bytes(intp_t nbytes):
    """The least result of one input projection GEMM, in bytes (a chunk is at least one step
    and at least twice W's bytes, at most all steps): tests set it so that small problems take
    several chunks whatever the default; returns the previous value."""
    global _proj_chunk_bytes
    if nbytes < 1:
        raise ValueError(f"nbytes: expected at least 1, got {nbytes}")
    previous = _proj_chunk_bytes
    _proj_chunk_bytes = nbytes
    return previous


def _use_fused_cells(bint on):
    """Whether LSTM steps with identity / sigmoid / tanh run the per-instruction-set cell of
    _rnn_cell.h (the default) or the general path (tests compare their bits); returns the
    previous setting."""
    global _fused_cells
    previous = _fused_cells
    _fused_cells = on
    return previous


cdef enum:
    TILE = 16              # the transposing copies move 16 x 16 tiles

cdef inline intp_t _rup(intp_t x, intp_t q) noexcept nogil:
    return (x + q - 1) // q * q


cdef inline intp_t _imin(intp_t a, intp_t b) noexcept nogil:
    return a if a < b else b


# ------------------------------------------------------------------------------------------------
# The cache layout (see _rnn.pxd)

cdef bint needs_input(int code) noexcept nogil:
    # identity, sigmoid and tanh have their derivatives from their outputs
    return not (code == ACT_IDENTITY or code == ACT_SIGMOID or code == ACT_TANH)


cdef Py_ssize_t lstm_cache_width(Py_ssize_t n, bint with_z) noexcept nogil:
    return 11 * n if with_z else 7 * n


cdef Py_ssize_t simple_rnn_cache_width(Py_ssize_t n, bint with_z) noexcept nogil:
    return 3 * n if with_z else 2 * n


# ------------------------------------------------------------------------------------------------
# One call's problem, shared read-only by the threads of a step (the per-step fields change
# between steps only, on the calling thread)

ctypedef struct Job:
    int kind
    bint f64, peep, with_z
    int act, gact                      # activation codes (ndws.nn._activations)
    double aalpha, galpha              # their parameters
    int fused                          # 1: the LSTM cell of _rnn_cell.h (its codes in fact, fgact)
    int fact, fgact
    intp_t B, T, nin, n, K, Kc, item   # K: gate columns (4n or n); Kc: cache row width
    const GemmTable* gt
    int nt_gemm, nt_rows, ntasks
    # several threads (nt_step > 1): groups of grp examples as the lanes of the time loop, each
    # lane's step its rows of the products and then their cells (see _lane_step)
    int nt_step, ngroups
    intp_t grp
    # x as time-major rows (row t*B + b at xr + r*xrs, columns xcs apart), after any copy
    char* xr
    intp_t xrs, xcs
    # the input projection, made pchunk steps at a time (see _forward_loop) from W, or from W
    # packed once for all chunks (Wp, NULL with a single chunk)
    char* W
    intp_t ws0, ws1
    char* Wp
    intp_t pchunk, pt0                 # steps per chunk; the chunk in proj's first step
    int nt_proj
    # the recurrent product's right operand: RW[:, :K] (forward, rw_k = n rows, rw_n = K
    # columns) or its transpose (backward, K x n), as strides into RW, and packed once for all
    # steps (RWp, NULL for a single step: ndws._linalg's packed-B GEMM gives the same bits)
    char* RW
    intp_t rwrs, rwcs, rw_k, rw_n
    char* RWp
    char* peep_w                       # GravesLSTM: wFF, wOO, wGG, n each, contiguous
    char* bias                         # K contiguous
    char* mask                         # B x T contiguous, or NULL
    char* y                            # logical (B, n, T)
    intp_t ysb, ysk, yst
    char* proj                         # pchunk*B x K: x @ W of the chunk's steps
    char* cache                        # T*B x Kc, or NULL
    char* hbuf                         # B x n: h of the last step
    char* cbuf                         # B x n: c of the last step (LSTM)
    char* c0                           # backward: B x n contiguous copy of c0, or NULL
    # backward
    char* dy                           # logical (B, n, T)
    intp_t dysb, dysk, dyst
    char* dh_last                      # dL/dh of the last step's output (B x n), or NULL
    intp_t dhs0, dhs1
    char* dc_last                      # dL/dc of the last step's cell, or NULL
    intp_t dcs0, dcs1
    char* dz                           # Tw*B x K: the window's gate errors
    char* dcbuf                        # B x n: dL/dc carried to the previous step
    intp_t t0                          # the window's first step
    # the step in flight
    intp_t t
    bint has_s
    char* S                            # the step's GEMM result (B x K forward, B x n backward)
    char* rows_tmp                     # the step's per-example temporaries
    intp_t rtw                         # their width per example (elements)
    bint bwd


# ------------------------------------------------------------------------------------------------
# Per-example passes (each example of a step on one thread, in a fixed order)

cdef inline void _act(const Job* j, int code, double alpha, floating_t* v, intp_t n
                      ) noexcept nogil:
    # v := f(v) over n contiguous values: the activations' tile API, whose sigmoid and tanh
    # run per-instruction-set loops (nn/_act_loops.h)
    if code == ACT_IDENTITY:
        return
    if floating_t is float32_t:
        act_tile_f32(code, <float32_t>alpha, v, 1, n, n, 1)
    else:
        act_tile_f64(code, alpha, v, 1, n, n, 1)


cdef inline void _dact(int code, double alpha, const floating_t* y, const floating_t* z,
                       floating_t* d, intp_t n) noexcept nogil:
    # d := d * f'(.) over n values: from the output y for identity / sigmoid / tanh, with the
    # same operations as the activations' backward from the input (so the same bits), else
    # from the input z through the activations' backward
    cdef intp_t k
    if code == ACT_IDENTITY:
        return
    if code == ACT_SIGMOID:
        for k in range(n):
            d[k] = d[k] * <floating_t>(y[k] * (1.0 - y[k]))
    elif code == ACT_TANH:
        for k in range(n):
            d[k] = d[k] * <floating_t>(1.0 - y[k] * y[k])
    elif floating_t is float32_t:
        act_backward_tile_f32(code, <float32_t>alpha, z, n, 1, d, n, 1, d, n, 1, 1, n)
    else:
        act_backward_tile_f64(code, alpha, z, n, 1, d, n, 1, d, n, 1, 1, n)


cdef inline floating_t _mask_of(const Job* j, intp_t b, intp_t t, floating_t* unused
                                ) noexcept nogil:
    return (<floating_t*>j.mask)[b * j.T + t]


cdef inline int _cell_code(int code) noexcept nogil:
    # _rnn_cell.h's activation codes: 0 identity, 1 sigmoid, 2 tanh (-1: another one)
    return 0 if code == ACT_IDENTITY else 1 if code == ACT_SIGMOID else 2 if code == ACT_TANH \
        else -1


cdef void _lstm_fwd_row(const Job* j, intp_t b, floating_t* proj) noexcept nogil:
    cdef intp_t n = j.n, t = j.t, k
    cdef intp_t r = t * j.B + b
    cdef floating_t* P = proj + ((t - j.pt0) * j.B + b) * j.K
    cdef const floating_t* S = (<floating_t*>j.S) + b * j.K
    cdef const floating_t* bias = <floating_t*>j.bias
    cdef floating_t* cprev = (<floating_t*>j.cbuf) + b * n
    cdef floating_t* hb = (<floating_t*>j.hbuf) + b * n
    cdef floating_t* y = (<floating_t*>j.y) + b * j.ysb + t * j.yst
    cdef const floating_t* wff = <floating_t*>j.peep_w
    cdef const floating_t* woo = wff + n
    cdef const floating_t* wgg = wff + 2 * n
    cdef floating_t* G
    cdef floating_t* Ct
    cdef floating_t* At
    cdef floating_t* H = NULL
    cdef floating_t m = 1
    cdef intp_t ysk = j.ysk
    if j.mask != NULL:
        m = _mask_of(j, b, t, proj)
    if m == 0:
        # a masked step: output and state exactly 0 (whatever the padding held), DL4J's reset
        memset(cprev, 0, n * sizeof(floating_t))
        memset(hb, 0, n * sizeof(floating_t))
        for k in range(n):
            y[k * ysk] = 0
        if j.cache != NULL:
            # the step's whole row: the backward reads none of it but the output, whose
            # products with a zero error must not meet uninitialised memory (NaN * 0)
            memset((<floating_t*>j.cache) + r * j.Kc, 0, j.Kc * sizeof(floating_t))
        return
    if j.cache != NULL:
        G = (<floating_t*>j.cache) + r * j.Kc
        H = G + 6 * n
    else:
        G = (<floating_t*>j.rows_tmp) + b * j.rtw
    Ct = G + 4 * n
    At = G + 5 * n
    if j.fused:
        # without a cache (inference) the cell keeps nothing of the step but its state (c~
        # passes from its first pass to its second through the row's temporaries)
        if floating_t is float32_t:
            ndws_lstm_fwd_f32(j.fact, j.fgact, n, P, S, bias, wff if j.peep else NULL, cprev,
                              hb, G if H != NULL else NULL, Ct, At if H != NULL else NULL, m)
        else:
            ndws_lstm_fwd_f64(j.fact, j.fgact, n, P, S, bias, wff if j.peep else NULL, cprev,
                              hb, G if H != NULL else NULL, Ct, At if H != NULL else NULL, m)
    else:
        # z = (x W + h RW) + b, DL4J's association (LSTMHelpers: mmul, gemm beta=1,
        # addiRowVector; S is 0 at a first step without state, its product with zeros)
        for k in range(4 * n):
            G[k] = (P[k] + S[k]) + bias[k]
        if j.peep:
            for k in range(n):
                G[n + k] = G[n + k] + cprev[k] * wff[k]
                G[3 * n + k] = G[3 * n + k] + cprev[k] * wgg[k]
        if j.with_z and H != NULL:
            # the pre-activations the backward differentiates at (o's gets its peephole below)
            memcpy(G + 7 * n, G, 4 * n * sizeof(floating_t))
        _act(j, j.act, j.aalpha, G, n)                     # g: block input, layer activation
        _act(j, j.gact, j.galpha, G + n, n)                # f
        _act(j, j.gact, j.galpha, G + 3 * n, n)            # i
        for k in range(n):
            Ct[k] = cprev[k] * G[n + k] + G[3 * n + k] * G[k]
        if j.peep:
            for k in range(n):
                G[2 * n + k] = G[2 * n + k] + Ct[k] * woo[k]
            if j.with_z and H != NULL:
                memcpy(G + 9 * n, G + 2 * n, n * sizeof(floating_t))
        _act(j, j.gact, j.galpha, G + 2 * n, n)            # o, after the cell (its peephole)
        memcpy(At, Ct, n * sizeof(floating_t))
        _act(j, j.act, j.aalpha, At, n)
        for k in range(n):
            hb[k] = m * (G[2 * n + k] * At[k])             # m is 1 without a mask: no change
            cprev[k] = m * Ct[k]
    for k in range(n):
        y[k * ysk] = hb[k]
    if H != NULL:
        memcpy(H, hb, n * sizeof(floating_t))


cdef void _simple_fwd_row(const Job* j, intp_t b, floating_t* proj) noexcept nogil:
    cdef intp_t n = j.n, t = j.t, k
    cdef intp_t r = t * j.B + b
    cdef floating_t* P = proj + ((t - j.pt0) * j.B + b) * n
    cdef const floating_t* S = (<floating_t*>j.S) + b * n
    cdef const floating_t* bias = <floating_t*>j.bias
    cdef floating_t* hb = (<floating_t*>j.hbuf) + b * n
    cdef floating_t* y = (<floating_t*>j.y) + b * j.ysb + t * j.yst
    cdef floating_t* A
    cdef floating_t* H = NULL
    cdef floating_t m = 1, v
    cdef intp_t ysk = j.ysk
    if j.cache != NULL:
        A = (<floating_t*>j.cache) + r * j.Kc
        H = A + n
    else:
        A = P
    # z = (x W + b) + h RW: DL4J's SimpleRnn adds the bias first, then each product (S is 0
    # at a first step without state)
    for k in range(n):
        A[k] = (P[k] + bias[k]) + S[k]
    if j.with_z and H != NULL:
        memcpy(A + 2 * n, A, n * sizeof(floating_t))
    _act(j, j.act, j.aalpha, A, n)
    if j.mask != NULL:
        m = _mask_of(j, b, t, proj)
    if m == 0:
        for k in range(n):
            hb[k] = 0
            y[k * ysk] = 0
        if H != NULL:
            memset(A, 0, j.Kc * sizeof(floating_t))       # the whole row, as the LSTM's
        return
    for k in range(n):
        v = A[k]
        if j.mask != NULL:
            v = m * v
        hb[k] = v
        y[k * ysk] = v
    if H != NULL:
        memcpy(H, hb, n * sizeof(floating_t))


cdef void _lstm_bwd_row(const Job* j, intp_t b, floating_t* dz) noexcept nogil:
    # dz of step t for example b (gates g, f, o, i) and dL/dc_{t-1} into dcbuf
    cdef intp_t n = j.n, t = j.t, B = j.B, k
    cdef intp_t r = t * B + b
    cdef floating_t* G = (<floating_t*>j.cache) + r * j.Kc
    cdef const floating_t* Ct = G + 4 * n
    cdef const floating_t* At = G + 5 * n
    cdef const floating_t* Z = G + 7 * n
    cdef const floating_t* Cp
    cdef floating_t* D = dz + ((t - j.t0) * B + b) * j.K
    cdef floating_t* dcb = (<floating_t*>j.dcbuf) + b * n
    cdef floating_t* dh = (<floating_t*>j.rows_tmp) + b * j.rtw
    cdef floating_t* dc = dh + n
    cdef floating_t* cp = dh + 2 * n
    cdef const floating_t* dyp = (<floating_t*>j.dy) + b * j.dysb + t * j.dyst
    cdef const floating_t* R = (<floating_t*>j.S) + b * n
    cdef const floating_t* wff
    cdef const floating_t* woo
    cdef const floating_t* wgg
    cdef floating_t m = 1, mp = 1
    cdef intp_t dysk = j.dysk
    # dL/dh_t: this step's output error plus what step t + 1 sends back (the last step: the
    # caller's dL/dh of the final state); dL/dc_t likewise
    if j.has_s:
        for k in range(n):
            dh[k] = dyp[k * dysk] + R[k]
        memcpy(dc, dcb, n * sizeof(floating_t))
    else:
        for k in range(n):
            dh[k] = dyp[k * dysk]
        if j.dh_last != NULL:
            for k in range(n):
                dh[k] = dh[k] + (<floating_t*>j.dh_last)[b * j.dhs0 + k * j.dhs1]
        if j.dc_last != NULL:
            for k in range(n):
                dc[k] = (<floating_t*>j.dc_last)[b * j.dcs0 + k * j.dcs1]
        else:
            memset(dc, 0, n * sizeof(floating_t))
    if j.mask != NULL:
        m = _mask_of(j, b, t, dz)
        if m == 0:
            # nothing of a masked step reaches the parameters or the earlier steps
            memset(D, 0, 4 * n * sizeof(floating_t))
            memset(dcb, 0, n * sizeof(floating_t))
            return
        for k in range(n):
            dh[k] = m * dh[k]
            dc[k] = m * dc[k]
    # c_{t-1} as the forward used it: the previous step's cell after its mask, or c0. Read
    # where it lies when nothing scales it: a copy was a pass of its own that waited on the
    # cache's misses (1.6% of a char-model segment), which the cell's loop overlaps with work
    if t > 0:
        Cp = G - B * j.Kc + 4 * n
        if j.mask != NULL:
            mp = _mask_of(j, b, t - 1, dz)
            if mp == 0:
                memset(cp, 0, n * sizeof(floating_t))
            else:
                for k in range(n):
                    cp[k] = mp * Cp[k]
        else:
            cp = <floating_t*>Cp
    elif j.c0 != NULL:
        cp = (<floating_t*>j.c0) + b * n
    else:
        memset(cp, 0, n * sizeof(floating_t))
    if j.fused:
        if floating_t is float32_t:
            ndws_lstm_bwd_f32(j.fact, j.fgact, n, G, At, cp, dh, dc,
                              <float32_t*>j.peep_w if j.peep else NULL, D, dcb)
        else:
            ndws_lstm_bwd_f64(j.fact, j.fgact, n, G, At, cp, dh, dc,
                              <float64_t*>j.peep_w if j.peep else NULL, D, dcb)
        return
    # o: dL/dz_o = dh * act(c~) * gate'(o)
    for k in range(n):
        D[2 * n + k] = dh[k] * At[k]
    _dact(j.gact, j.galpha, G + 2 * n, Z + 2 * n, D + 2 * n, n)
    # dL/dc~ += act'(c~) * (o * dh) (+ the output gate's peephole), with D's g block as room
    for k in range(n):
        D[k] = G[2 * n + k] * dh[k]
    _dact(j.act, j.aalpha, At, Ct, D, n)
    for k in range(n):
        dc[k] = dc[k] + D[k]
    if j.peep:
        wff = <floating_t*>j.peep_w
        woo = wff + n
        wgg = wff + 2 * n
        for k in range(n):
            dc[k] = dc[k] + D[2 * n + k] * woo[k]
    # f, i, g
    for k in range(n):
        D[n + k] = dc[k] * cp[k]
        D[3 * n + k] = dc[k] * G[k]
        D[k] = dc[k] * G[3 * n + k]
    _dact(j.gact, j.galpha, G + n, Z + n, D + n, n)
    _dact(j.gact, j.galpha, G + 3 * n, Z + 3 * n, D + 3 * n, n)
    _dact(j.act, j.aalpha, G, Z, D, n)
    # dL/dc_{t-1}
    for k in range(n):
        dcb[k] = dc[k] * G[n + k]
    if j.peep:
        for k in range(n):
            dcb[k] = (dcb[k] + D[n + k] * wff[k]) + D[3 * n + k] * wgg[k]


cdef void _simple_bwd_row(const Job* j, intp_t b, floating_t* dz) noexcept nogil:
    cdef intp_t n = j.n, t = j.t, k
    cdef intp_t r = t * j.B + b
    cdef const floating_t* A = (<floating_t*>j.cache) + r * j.Kc
    cdef floating_t* D = dz + ((t - j.t0) * j.B + b) * n
    cdef const floating_t* dyp = (<floating_t*>j.dy) + b * j.dysb + t * j.dyst
    cdef const floating_t* R = (<floating_t*>j.S) + b * n
    cdef floating_t m = 1
    cdef intp_t dysk = j.dysk
    if j.has_s:
        for k in range(n):
            D[k] = dyp[k * dysk] + R[k]
    else:
        for k in range(n):
            D[k] = dyp[k * dysk]
        if j.dh_last != NULL:
            for k in range(n):
                D[k] = D[k] + (<floating_t*>j.dh_last)[b * j.dhs0 + k * j.dhs1]
    if j.mask != NULL:
        m = _mask_of(j, b, t, dz)
        if m == 0:
            memset(D, 0, n * sizeof(floating_t))
            return
        for k in range(n):
            D[k] = m * D[k]
    _dact(j.act, j.aalpha, A, A + 2 * n, D, n)


cdef void _rows(const Job* j, intp_t b0, intp_t b1) noexcept nogil:
    cdef intp_t b
    for b in range(b0, b1):
        if j.f64:
            if j.bwd:
                if j.kind == K_LSTM:
                    _lstm_bwd_row(j, b, <float64_t*>j.dz)
                else:
                    _simple_bwd_row(j, b, <float64_t*>j.dz)
            elif j.kind == K_LSTM:
                _lstm_fwd_row(j, b, <float64_t*>j.proj)
            else:
                _simple_fwd_row(j, b, <float64_t*>j.proj)
        else:
            if j.bwd:
                if j.kind == K_LSTM:
                    _lstm_bwd_row(j, b, <float32_t*>j.dz)
                else:
                    _simple_bwd_row(j, b, <float32_t*>j.dz)
            elif j.kind == K_LSTM:
                _lstm_fwd_row(j, b, <float32_t*>j.proj)
            else:
                _simple_fwd_row(j, b, <float32_t*>j.proj)


cdef void _rows_task(void* ctx, Py_ssize_t c) noexcept nogil:
    # a fixed range of examples: which thread runs it never changes a bit
    cdef const Job* j = <const Job*>ctx
    _rows(j, c * j.B // j.ntasks, (c + 1) * j.B // j.ntasks)


cdef void _run_rows(Job* j) noexcept nogil:
    if j.nt_rows <= 1 or j.ntasks <= 1:
        _rows(j, 0, j.B)
    else:
        run_tasks(_rows_task, j, j.ntasks, j.nt_rows)


# ------------------------------------------------------------------------------------------------
# GEMMs and copies

cdef int _gemm(const Job* j, intp_t m, intp_t n, intp_t k,
               const char* a, intp_t rsa, intp_t csa, const char* b, intp_t rsb, intp_t csb,
               double beta, char* c, intp_t rsc, intp_t csc, int nt) except -1 nogil:
    # C := A @ B + beta*C (strides in elements) on ndws._linalg's GEMM
    cdef int ret
    if j.f64:
        ret = j.gt.dgemm(m, n, k, 1.0, <const float64_t*>a, rsa, csa, <const float64_t*>b,
                         rsb, csb, beta, <float64_t*>c, rsc, csc, nt, NULL, NULL)
    else:
        ret = j.gt.sgemm(m, n, k, 1.0, <const float32_t*>a, rsa, csa, <const float32_t*>b,
                         rsb, csb, <float32_t>beta, <float32_t*>c, rsc, csc, nt, NULL, NULL)
    if ret != 0:
        with gil:
            raise MemoryError("could not allocate the GEMM's packing scratch")
    return 0


cdef int _rw_product(const Job* j, intp_t m, const char* a, intp_t rsa, char* c, intp_t rsc,
                     intp_t csc, int nt) noexcept nogil:
    # C (m x rw_n) := A (m x rw_k, unit column stride) @ RW or RW^T, from RW packed once when
    # the call runs it more than once; 0, or -1 when the packing scratch failed. Each row's dot
    # products are the same whatever rows one product gets (ndws._linalg's GEMM).
    if j.RWp == NULL:
        if j.f64:
            return j.gt.dgemm(m, j.rw_n, j.rw_k, 1.0, <const float64_t*>a, rsa, 1,
                              <const float64_t*>j.RW, j.rwrs, j.rwcs, 0.0, <float64_t*>c,
                              rsc, csc, nt, NULL, NULL)
        return j.gt.sgemm(m, j.rw_n, j.rw_k, 1.0, <const float32_t*>a, rsa, 1,
                          <const float32_t*>j.RW, j.rwrs, j.rwcs, 0.0, <float32_t*>c, rsc,
                          csc, nt, NULL, NULL)
    if j.f64:
        return j.gt.dgemm_packed_b(m, j.rw_n, j.rw_k, 1.0, <const float64_t*>a, rsa, 1,
                                   <const float64_t*>j.RWp, 0.0, <float64_t*>c, rsc, csc, nt)
    return j.gt.sgemm_packed_b(m, j.rw_n, j.rw_k, 1.0, <const float32_t*>a, rsa, 1,
                               <const float32_t*>j.RWp, 0.0, <float32_t*>c, rsc, csc, nt)


cdef int _gemm_rw(const Job* j, const char* a, intp_t rsa, char* c, intp_t rsc, intp_t csc,
                  int nt) except -1 nogil:
    # C (B x rw_n) := A (B x rw_k) @ RW or RW^T (_rw_product over all the examples)
    if _rw_product(j, j.B, a, rsa, c, rsc, csc, nt) != 0:
        with gil:
            raise MemoryError("could not allocate the GEMM's packing scratch")
    return 0


cdef int _step_product(const Job* j, intp_t b0, intp_t b1, int nt) noexcept nogil:
    # rows b0 .. b1 - 1 of the step's recurrent product into S: dz_{t+1} @ RW^T backward (the
    # error step t + 1 sends to h_t), h_{t-1} @ RW forward (the recurrent part of every gate),
    # zeros forward without a previous state (its product with a zero state); 0, or -1 when
    # the GEMM's packing scratch failed
    cdef intp_t item = j.item
    if j.has_s:
        if j.bwd:
            return _rw_product(j, b1 - b0, j.dz + ((j.t + 1 - j.t0) * j.B + b0) * j.K * item,
                               j.K, j.S + b0 * j.n * item, j.n, 1, nt)
        return _rw_product(j, b1 - b0, j.hbuf + b0 * j.n * item, j.n, j.S + b0 * j.K * item,
                           j.K, 1, nt)
    if not j.bwd:
        memset(j.S + b0 * j.K * item, 0, (b1 - b0) * j.K * item)
    return 0


cdef int _run_step(Job* j) except -1 nogil:
    # one step, a phase at a time: the recurrent product on nt_gemm threads, then the cells
    if _step_product(j, 0, j.B, j.nt_gemm) != 0:
        with gil:
            raise MemoryError("could not allocate the GEMM's packing scratch")
    _run_rows(j)
    return 0


cdef int _x_w(const Job* j, intp_t m, const char* a, char* c, int nt) noexcept nogil:
    # C (m x K, contiguous) := A (m of x's time-major rows) @ W, from W packed once for all
    # chunks (Wp) or W where it lies (a single chunk, or no input features: the GEMM's empty
    # sums are zeros); 0, or -1 when the GEMM's packing scratch failed. Each row's dot products
    # are the same whatever rows one GEMM gets and whether W comes packed (ndws._linalg)
    if j.Wp == NULL:
        if j.f64:
            return j.gt.dgemm(m, j.K, j.nin, 1.0, <const float64_t*>a, j.xrs, j.xcs,
                              <const float64_t*>j.W, j.ws0, j.ws1, 0.0, <float64_t*>c, j.K, 1,
                              nt, NULL, NULL)
        return j.gt.sgemm(m, j.K, j.nin, 1.0, <const float32_t*>a, j.xrs, j.xcs,
                          <const float32_t*>j.W, j.ws0, j.ws1, 0.0, <float32_t*>c, j.K, 1, nt,
                          NULL, NULL)
    if j.f64:
        return j.gt.dgemm_packed_b(m, j.K, j.nin, 1.0, <const float64_t*>a, j.xrs, j.xcs,
                                   <const float64_t*>j.Wp, 0.0, <float64_t*>c, j.K, 1, nt)
    return j.gt.sgemm_packed_b(m, j.K, j.nin, 1.0, <const float32_t*>a, j.xrs, j.xcs,
                               <const float32_t*>j.Wp, 0.0, <float32_t*>c, j.K, 1, nt)


ctypedef struct _Window:
    const Job* j
    intp_t t_a                         # the window's first step (backward: its last)


cdef int _lane_step(void* ctx, Py_ssize_t g, Py_ssize_t s) noexcept nogil:
    # step s of the window for example group g (run_lanes): its rows of the recurrent product
    # and its cells. A group's rows depend only on its own rows of the previous step, so
    # groups need no barrier between steps: a thread that is descheduled holds back its group
    # alone. The bits are the step-by-step loop's (a row's products are the same whatever rows
    # one product gets).
    cdef const _Window* w = <const _Window*>ctx
    cdef Job jj = w.j[0]
    cdef intp_t b0 = g * jj.grp, b1 = _imin(b0 + jj.grp, jj.B)
    if jj.bwd:
        jj.t = w.t_a - s
        jj.has_s = jj.t < jj.T - 1
    else:
        jj.t = w.t_a + s
        jj.has_s = jj.t > 0 or jj.has_s
    if _step_product(&jj, b0, b1, 1) != 0:
        return -1
    _rows(&jj, b0, b1)
    return 0


cdef int _run_window(Job* j, intp_t t_a, intp_t nsteps) except -1 nogil:
    # steps t_a .. t_a + nsteps - 1 (backward: down to t_a - nsteps + 1) on nt_step threads,
    # the example groups as lanes
    cdef _Window w
    w.j, w.t_a = j, t_a
    if run_lanes(_lane_step, &w, j.ngroups, nsteps, j.nt_step) != 0:
        with gil:
            raise MemoryError("could not allocate the GEMM's packing scratch")
    return 0


cdef void _plan_steps(Job* j) noexcept nogil:
    # the groups as lanes when the product takes several threads and the examples make at
    # least two groups of whole micro-kernel row tiles (the GEMM's MR rows), at most LANES_MAX
    cdef intp_t mr = j.gt.mr_f64 if j.f64 else j.gt.mr_f32
    cdef intp_t tiles = (j.B + mr - 1) // mr
    j.nt_step = 0
    if j.nt_gemm > 1 and tiles >= 2:
        j.ngroups = <int>_imin(_imin(tiles, 4 * j.nt_gemm), LANES_MAX)
        j.grp = ((tiles + j.ngroups - 1) // j.ngroups) * mr
        j.ngroups = <int>((j.B + j.grp - 1) // j.grp)
        j.nt_step = j.nt_gemm


cdef void _pack_rw(Job* j) noexcept nogil:
    # RWp := the recurrent operand, in the layout of ndws._linalg's packed-B GEMM
    if j.f64:
        j.gt.pack_b_f64(j.rw_k, j.rw_n, <const float64_t*>j.RW, j.rwrs, j.rwcs,
                        <float64_t*>j.RWp)
    else:
        j.gt.pack_b_f32(j.rw_k, j.rw_n, <const float32_t*>j.RW, j.rwrs, j.rwcs,
                        <float32_t*>j.RWp)


cdef void _copy2(const char* src, intp_t ss0, intp_t ss1, char* dst, intp_t ds0, intp_t ds1,
                 intp_t n0, intp_t n1, intp_t item) noexcept nogil:
    # dst[i, k] := src[i, k] for an n0 x n1 matrix (strides in elements), in 16 x 16 tiles, so
    # a transposing copy reads and writes whole cache lines
    cdef intp_t i0 = 0, k0, i, k, i1, k1
    while i0 < n0:
        i1 = _imin(i0 + TILE, n0)
        k0 = 0
        while k0 < n1:
            k1 = _imin(k0 + TILE, n1)
            for i in range(i0, i1):
                if item == 8:
                    for k in range(k0, k1):
                        (<float64_t*>dst)[i * ds0 + k * ds1] = (<const float64_t*>src)[
                            i * ss0 + k * ss1]
                else:
                    for k in range(k0, k1):
                        (<float32_t*>dst)[i * ds0 + k * ds1] = (<const float32_t*>src)[
                            i * ss0 + k * ss1]
            k0 = k1
        i0 = i1


ctypedef struct _TMCopy:
    const char* src
    char* dst
    intp_t sb, sk, st, B, T, nin, item, ntasks
    bint back                          # True: time-major src into the (B, nin, T) view dst


cdef void _tm_rows(const _TMCopy* c, intp_t b0, intp_t b1) noexcept nogil:
    cdef intp_t b
    for b in range(b0, b1):
        if c.back:
            _copy2(c.src + b * c.nin * c.item, c.B * c.nin, 1, c.dst + b * c.sb * c.item, c.st,
                   c.sk, c.T, c.nin, c.item)
        else:
            _copy2(c.src + b * c.sb * c.item, c.st, c.sk, c.dst + b * c.nin * c.item,
                   c.B * c.nin, 1, c.T, c.nin, c.item)


cdef void _tm_task(void* ctx, Py_ssize_t i) noexcept nogil:
    cdef const _TMCopy* c = <const _TMCopy*>ctx
    _tm_rows(c, i * c.B // c.ntasks, (i + 1) * c.B // c.ntasks)


cdef int _copy_threads(intp_t B, intp_t T, intp_t nin):
    return threads_for(B * T * nin, GRAIN_NN_CHEAP)


cdef void _copy_tm(const char* src, char* dst, intp_t sb, intp_t sk, intp_t st, intp_t B,
                   intp_t T, intp_t nin, intp_t item, bint back, int nt) noexcept nogil:
    # the (B, nin, T) view's copy to or from time-major rows on nt threads (_copy_threads),
    # examples in parallel (a copy: the same bytes whoever copies them; serial, it was a
    # twentieth of a 2-thread LSTM pass)
    cdef _TMCopy c
    c.src, c.dst, c.sb, c.sk, c.st = src, dst, sb, sk, st
    c.B, c.T, c.nin, c.item, c.back = B, T, nin, item, back
    c.ntasks = _imin(B, 4 * nt)
    if nt <= 1 or c.ntasks <= 1:
        _tm_rows(&c, 0, B)
    else:
        run_tasks(_tm_task, &c, c.ntasks, nt)


cdef void _copy_time_major(const char* x, intp_t sb, intp_t sk, intp_t st, char* dst,
                           intp_t B, intp_t T, intp_t nin, intp_t item, int nt) noexcept nogil:
    # dst[t, b, :] := x[b, :, t] (logical NCW strides sb, sk, st), dst C-contiguous (T, B, nin)
    _copy_tm(x, dst, sb, sk, st, B, T, nin, item, False, nt)


cdef void _copy_from_time_major(const char* src, char* x, intp_t sb, intp_t sk, intp_t st,
                                intp_t B, intp_t T, intp_t nin, intp_t item, int nt
                                ) noexcept nogil:
    # x[b, :, t] := src[t, b, :] (the inverse of _copy_time_major)
    _copy_tm(src, x, sb, sk, st, B, T, nin, item, True, nt)


# ------------------------------------------------------------------------------------------------
# The time loops (no GIL; the loop workspace's slow steps take it)

cdef intp_t _step_temps(Job* j, Arena loop, intp_t s_elems, intp_t more) except -1 nogil:
    # the step's temporaries: in a cycle of the loop workspace, or the call's scratch; returns
    # how many of the next `more` steps run in them too (a window, _run_window): all of them
    # in the scratch, in the loop workspace as many as Arena._loop_repeat adds a cycle for,
    # each handing out the same bytes
    cdef intp_t a1 = s_elems * j.item
    cdef intp_t a2 = j.B * j.rtw * j.item if j.rtw > 0 else 0
    if loop is None:
        return more
    loop._loop_enter()
    if a1 > 0:                          # zero-size arrays take nothing from a workspace
        j.S = loop._loop_alloc(a1)
    if a2 > 0:
        j.rows_tmp = loop._loop_alloc(a2)
    if more <= 0:
        return 0
    if a1 > 0:
        return loop._loop_repeat(more, j.S, a1, a2)
    return loop._loop_repeat(more, j.rows_tmp, a2, 0) if a2 > 0 else 0


cdef int _project(Job* j, intp_t t0) except -1 nogil:
    # proj := x @ W for the rows of steps t0 .. t0 + pchunk - 1 (_x_w): the chunks, and each
    # group's rows of a step (_lane_step), give the bits of one GEMM over all steps
    cdef intp_t m = (_imin(t0 + j.pchunk, j.T) - t0) * j.B
    j.pt0 = t0
    if m > 0 and _x_w(j, m, j.xr + t0 * j.B * j.xrs * j.item, j.proj, j.nt_proj) != 0:
        with gil:
            raise MemoryError("could not allocate the GEMM's packing scratch")
    return 0


cdef int _forward_loop(Job* j, Arena loop) except -1 nogil:
    cdef intp_t t = 0, m
    if j.nt_step > 1:
        # several threads: each chunk's projection on the pool, then windows of the chunk's
        # steps with the example groups as lanes (_lane_step)
        while t < j.T:
            if t % j.pchunk == 0:
                _project(j, t)
            m = _step_temps(j, loop, j.B * j.K, _imin(j.T, j.pt0 + j.pchunk) - t - 1)
            _run_window(j, t, m + 1)
            if loop is not None:
                loop._loop_leave()
            t += m + 1
        return 0
    for t in range(j.T):
        if t % j.pchunk == 0:
            # the next chunk's input projection, made just before the cells read it (one GEMM
            # over all steps took T*B*K of scratch; one per step read all of W every step)
            _project(j, t)
        _step_temps(j, loop, j.B * j.K, 0)
        j.t = t
        j.has_s = t > 0 or j.has_s
        _run_step(j)
        if loop is not None:
            loop._loop_leave()
    return 0


cdef int _backward_loop(Job* j, Arena loop) except -1 nogil:
    cdef intp_t t = j.T - 1, m
    if j.nt_step > 1:
        # several threads: windows of steps, the example groups as lanes (_lane_step)
        while t >= j.t0:
            m = _step_temps(j, loop, j.B * j.n, t - j.t0)
            _run_window(j, t, m + 1)
            if loop is not None:
                loop._loop_leave()
            t -= m + 1
        return 0
    for t in range(j.T - 1, j.t0 - 1, -1):
        _step_temps(j, loop, j.B * j.n, 0)
        j.t = t
        j.has_s = t < j.T - 1
        _run_step(j)
        if loop is not None:
            loop._loop_leave()
    return 0


cdef int _run_loop(Job* j, Arena loop, bint backward) except -1:
    # the GIL is released for the whole loop; a loop workspace's slow step takes it back
    if loop is not None:
        loop._loop_begin(_rup(j.B * (j.n if backward else j.K) * j.item, ALIGN)
                         + (_rup(j.B * j.rtw * j.item, ALIGN) if j.rtw > 0 else 0),
                         "lstm_backward" if backward and j.kind == K_LSTM else
                         "lstm_forward" if j.kind == K_LSTM else
                         "simple_rnn_backward" if backward else "simple_rnn_forward")
    try:
        if j.B > 0:              # batch 0: nothing to compute, however many steps
            with nogil:
                if backward:
                    _backward_loop(j, loop)
                else:
                    _forward_loop(j, loop)
    except BaseException:
        if loop is not None:
            loop._loop_end(True)
        raise
    if loop is not None:
        loop._loop_end(False)
    return 0


cdef void _peephole_grads(const Job* j, floating_t* dRW, intp_t rs, intp_t cs) noexcept:
    # dL/dwFF, dwOO, dwGG (RW's last three columns): sums over the window's rows in order
    cdef intp_t n = j.n, B = j.B, t, b, k
    cdef floating_t* G
    cdef const floating_t* D
    cdef floating_t* cp
    cdef floating_t mp
    cdef floating_t* dff = dRW + 4 * n * cs
    cdef floating_t* doo = dff + cs
    cdef floating_t* dgg = dff + 2 * cs
    with nogil:
        for k in range(n):
            dff[k * rs] = 0
            doo[k * rs] = 0
            dgg[k * rs] = 0
        for t in range(j.t0, j.T if B > 0 else j.t0):
            for b in range(B):
                G = (<floating_t*>j.cache) + (t * B + b) * j.Kc
                D = (<floating_t*>j.dz) + ((t - j.t0) * B + b) * j.K
                mp = 1
                if t > 0:
                    cp = G - B * j.Kc + 4 * n
                    if j.mask != NULL:
                        mp = (<floating_t*>j.mask)[b * j.T + t - 1]
                elif j.c0 != NULL:
                    cp = (<floating_t*>j.c0) + b * n
                else:
                    cp = NULL
                for k in range(n):
                    doo[k * rs] = doo[k * rs] + D[2 * n + k] * G[4 * n + k]
                    if cp != NULL and mp != 0:
                        dff[k * rs] = dff[k * rs] + D[n + k] * (mp * cp[k] if t > 0 and
                                                                 j.mask != NULL else cp[k])
                        dgg[k * rs] = dgg[k * rs] + D[3 * n + k] * (mp * cp[k] if t > 0 and
                                                                    j.mask != NULL else cp[k])


cdef inline intp_t _part(intp_t* total, intp_t nbytes) noexcept:
    # the offset of the next scratch part (parts start on cache lines)
    cdef intp_t off = total[0]
    total[0] = off + _rup(nbytes, ALIGN)
    return off


cdef bint _time_major(intp_t B, intp_t T, intp_t sb, intp_t st, intp_t* rs) noexcept:
    # whether the (t, b) rows of a sequence array are one strided matrix in time-major order
    if T == 1:
        rs[0] = sb
        return True
    if B == 1:
        rs[0] = st
        return True
    if st == B * sb:
        rs[0] = sb
        return True
    return False


# ------------------------------------------------------------------------------------------------
# The parts of a call that forward and backward share

ctypedef struct Sizes:
    # what a call's scratch holds, in bytes (see _fwd_scratch / _bwd_scratch)
    intp_t total
    intp_t proj, wp, xcopy, rwp, hbuf, cbuf, mask, bias, peep, stmp, rtmp
    intp_t dz, dxtmp, dcbuf, c0, ones


cdef intp_t _proj_steps(intp_t B, intp_t T, intp_t nin, intp_t K, intp_t item) noexcept nogil:
    # the steps of one input projection GEMM: about _proj_chunk_bytes of its result or twice
    # W's bytes, whichever is more; at least one step, at most all. W is read again for every
    # chunk: with 256 KiB chunks an LSTM of 512 at batch 64 (a step's result is 512 KiB) read
    # the whole 4 MiB of packed W from L3 or memory at every step, which on a Zen 3 core whose
    # L3 other tenants share left its forward at 0.98-1.00x PyTorch's speed (one thread,
    # medians in alternation); chunks of twice W (8 MiB, 16 steps) 1.07-1.09x, all 100 steps
    # at once 1.05-1.12x for 52 MiB of scratch. Layers with a small W keep chunks near L2's size.
    cdef intp_t per = B * K * item
    cdef intp_t twice_w = 2 * nin * K * item
    cdef intp_t least = twice_w if twice_w > _proj_chunk_bytes else _proj_chunk_bytes
    cdef intp_t q = least // per if per > 0 else T
    return _imin(q if q > 1 else 1, T if T > 1 else 1)


cdef void _fwd_scratch(Sizes* z, int kind, intp_t B, intp_t T, intp_t nin, intp_t n,
                       intp_t item, bint copy_x, bint pack_rw, bint has_mask, bint peep,
                       bint loop, intp_t rtw) noexcept:
    cdef intp_t K = 4 * n if kind == K_LSTM else n
    cdef intp_t steps = _proj_steps(B, T, nin, K, item)
    z.total = 0
    z.proj = _part(&z.total, steps * B * K * item)
    # W packed once when more than one chunk reads it
    z.wp = _part(&z.total, gemm_table().packed_b_elems(nin, K, item == 8) * item
                 if steps < T and nin > 0 else 0)
    z.xcopy = _part(&z.total, T * B * nin * item if copy_x else 0)
    z.rwp = _part(&z.total, gemm_table().packed_b_elems(n, K, item == 8) * item if pack_rw
                  else 0)
    z.hbuf = _part(&z.total, B * n * item)
    z.cbuf = _part(&z.total, B * n * item if kind == K_LSTM else 0)
    z.mask = _part(&z.total, B * T * item if has_mask else 0)
    z.bias = _part(&z.total, K * item)
    z.peep = _part(&z.total, 3 * n * item if peep else 0)
    z.stmp = _part(&z.total, B * K * item if not loop else 0)
    z.rtmp = _part(&z.total, B * rtw * item if not loop else 0)


cdef void _bwd_scratch(Sizes* z, int kind, intp_t B, intp_t T, intp_t Tw, intp_t nin, intp_t n,
                       intp_t item, bint copy_x, bint copy_dx, bint has_mask, bint peep,
                       bint loop, bint pack_rw, intp_t rtw) noexcept:
    cdef intp_t K = 4 * n if kind == K_LSTM else n
    z.total = 0
    z.dz = _part(&z.total, Tw * B * K * item)
    z.rwp = _part(&z.total, gemm_table().packed_b_elems(K, n, item == 8) * item if pack_rw
                  else 0)
    z.xcopy = _part(&z.total, Tw * B * nin * item if copy_x else 0)
    z.dxtmp = _part(&z.total, Tw * B * nin * item if copy_dx else 0)
    z.dcbuf = _part(&z.total, B * n * item if kind == K_LSTM else 0)
    z.c0 = _part(&z.total, B * n * item if kind == K_LSTM else 0)
    z.mask = _part(&z.total, B * T * item if has_mask else 0)
    z.ones = _part(&z.total, Tw * B * item)
    z.peep = _part(&z.total, 3 * n * item if peep else 0)
    z.stmp = _part(&z.total, B * n * item if not loop else 0)
    z.rtmp = _part(&z.total, B * rtw * item if not loop else 0)


cdef intp_t _rows_width(int kind, bint backward, bint cached) noexcept:
    # per-example temporaries of a step, in units of n: the forward LSTM's gates, c~ and
    # act(c~) when there is no cache to hold them, the backward LSTM's dh, dc and c_{t-1}
    if kind == K_LSTM:
        return 3 if backward else (0 if cached else 6)
    return 0


cdef void _fuse(Job* j) noexcept:
    j.fact = _cell_code(j.act)
    j.fgact = _cell_code(j.gact)
    j.fused = _fused_cells and j.kind == K_LSTM and j.fact >= 0 and j.fgact >= 0


cdef int _read_params(Job* j, int kind, NDArray X, NDArray W, NDArray RW, bint peep,
                      bint ncw, str op) except -1:
    # shapes of x, W, RW against each other; fills j's sizes
    cdef intp_t B, T, nin, n, K
    if X._ndim != 3:
        raise ValueError(f"{op}: x must be 3-D {'(batch, n_in, time)' if ncw else '(batch, time, n_in)'}"
                         f" ({'NCW' if ncw else 'NWC'}), got shape {shape_of(X)}")
    B = X._shape[0]
    nin = X._shape[1] if ncw else X._shape[2]
    T = X._shape[2] if ncw else X._shape[1]
    if RW._ndim != 2:
        raise ValueError(f"{op}: RW must be 2-D (n_out, "
                         f"{'4*n_out' + (' + 3' if peep else '') if kind == K_LSTM else 'n_out'})"
                         f", got shape {shape_of(RW)}")
    n = RW._shape[0]
    if n < 1:
        raise ValueError(f"{op}: RW must have at least one row (n_out >= 1), got shape "
                         f"{shape_of(RW)}")
    K = 4 * n if kind == K_LSTM else n
    if kind == K_LSTM:
        _shape_is(RW, (n, K + 3) if peep else (n, K), op, "RW",
                  "n_out, 4*n_out + 3: GravesLSTM's peephole columns last" if peep else
                  "n_out, 4*n_out: blocks g, f, o, i; peepholes=True takes 3 more columns")
    else:
        _shape_is(RW, (n, n), op, "RW", "n_out, n_out")
    if W._ndim != 2 or W._shape[1] != K:
        raise ValueError(f"{op}: W must have shape (n_in, {K}), got {shape_of(W)}")
    if W._shape[0] != nin:
        raise ValueError(f"{op}: x has {nin} features (size of its "
                         f"{'axis 1' if ncw else 'axis 2'}) but W has shape {shape_of(W)} "
                         f"(expected ({nin}, {K}))")
    _check_size((B, T, max(nin, 1), K), op)
    _check_size((B, T, 11 * n), op)
    j.kind = kind
    j.f64 = X._itemsize == 8
    j.item = X._itemsize
    j.B, j.T, j.nin, j.n, j.K = B, T, nin, n, K
    j.peep = peep
    j.gt = gemm_table()
    return 0


cdef NDArray _read_state(object v, str op, str role, NDArray X, intp_t B, intp_t n):
    cdef NDArray a
    if v is None:
        return None
    a = _operand(v, op, role, X._dtype)
    _shape_is(a, (B, n), op, role, "batch, n_out")
    return a


cdef NDArray _read_mask(object mask, str op, intp_t B, intp_t T):
    cdef NDArray m
    if mask is None:
        return None
    if isinstance(mask, NDArray):
        check_array(<NDArray>mask, op, "mask")
        mask = pin_foreign(mask, op, "mask")
        v = np.asarray(mask)
    else:
        try:
            v = np.asarray(mask)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{op}: mask must be an array of numbers, got "
                            f"{type(mask).__name__}") from exc
    if v.dtype.kind not in "biuf":
        raise TypeError(f"{op}: mask must be an array of numbers (0 masks a step), got dtype "
                        f"{v.dtype}")
    if v.shape != (B, T):
        raise ValueError(f"{op}: mask must have shape (batch, time) = {(B, T)}, got "
                         f"{v.shape}")
    return mask if isinstance(mask, NDArray) else _from_numpy(v)


cdef object _from_numpy_view(char* p, intp_t B, intp_t T, bint f64):
    # a NumPy view of raw scratch memory (kept alive by the call's scratch array)
    cdef cnp.npy_intp dims[2]
    dims[0] = B
    dims[1] = T
    return cnp.PyArray_SimpleNewFromData(2, dims, cnp.NPY_FLOAT64 if f64 else cnp.NPY_FLOAT32,
                                         <void*>p)


cdef void _contiguous(NDArray a, char* dst, intp_t n0, intp_t n1) noexcept:
    # dst (n0 x n1, C order) := a, any strides
    with nogil:
        _copy2(a._data, _es(a, 0), _es(a, 1), dst, n1, 1, n0, n1, a._itemsize)


cdef void _vector(NDArray a, char* dst, intp_t n) noexcept:
    # dst (n, contiguous) := a 1-D array or a (1, n) row
    cdef intp_t s = _es(a, a._ndim - 1)
    with nogil:
        _copy2(a._data, 0, s, dst, 0, 1, 1, n, a._itemsize)


cdef int _zero2(char* p, intp_t s0, intp_t s1, intp_t n0, intp_t n1, intp_t item) except -1:
    cdef intp_t i, k
    with nogil:
        for i in range(n0):
            for k in range(n1):
                if item == 8:
                    (<float64_t*>p)[i * s0 + k * s1] = 0
                else:
                    (<float32_t*>p)[i * s0 + k * s1] = 0
    return 0


cdef NDArray _cache_arg(object cache, object dtype, tuple shape, str op, bint write):
    # the cache: C-contiguous (its rows are read and written as one block), of the shape the
    # activations decide (lstm_cache_shape / simple_rnn_cache_shape)
    cdef NDArray c = array_arg(cache, op, "cache")
    if c._dtype != dtype:
        raise TypeError(f"{op}: cache has dtype {c._dtype}, expected {dtype} (the dtype of x)")
    if shape_of(c) != shape:
        raise ValueError(f"{op}: cache must have shape {shape} (time, batch, width: see "
                         f"{'lstm' if op.startswith('lstm') else 'simple_rnn'}_cache_shape, "
                         f"for the same activations), got {shape_of(c)}")
    if not c.flags.c_contiguous:
        raise ValueError(f"{op}: cache must be C-contiguous")
    if write and not c._writeable:
        raise ValueError(f"{op}: cache is read-only")
    return c


cdef tuple rnn_forward(int kind, object x, object W, object RW, object b, object h0, object c0,
                       object mask, object activation, object gate_activation, bint peep,
                       object data_format, object out, object h_out, object c_out, object cache,
                       object loop_workspace, object scratch, str op):
    cdef Job j
    cdef Sizes z
    cdef bint ncw = _ncw(data_format, op)
    cdef NDArray X = _operand(x, op, "x")
    cdef NDArray Wa = _operand(W, op, "W", X._dtype)
    cdef NDArray RWa = _operand(RW, op, "RW", X._dtype)
    cdef NDArray Ba = _operand(b, op, "b", X._dtype)
    cdef NDArray H0, C0 = None, M, Y, Hn, Cn = None, CA = None
    cdef Arena loop
    cdef intp_t B, T, nin, n, K, item, xsb, xsk, xst, rs
    cdef bint copy_x, pack_rw
    cdef int nt, q
    cdef char* base
    cdef _Call call
    cdef object dt = X._dtype
    memset(&j, 0, sizeof(Job))
    _read_params(&j, kind, X, Wa, RWa, peep, ncw, op)
    B, T, nin, n, K, item = j.B, j.T, j.nin, j.n, j.K, j.item
    if not ((Ba._ndim == 1 and Ba._shape[0] == K)
            or (Ba._ndim == 2 and Ba._shape[0] == 1 and Ba._shape[1] == K)):
        raise ValueError(f"{op}: b must have shape ({K},) or (1, {K}), got {shape_of(Ba)}")
    j.act = _activation(activation, op, "activation", &j.aalpha)
    if kind == K_LSTM:
        j.gact = _activation(gate_activation, op, "gate_activation", &j.galpha)
    j.with_z = needs_input(j.act) or (kind == K_LSTM and needs_input(j.gact))
    j.Kc = lstm_cache_width(n, j.with_z) if kind == K_LSTM else simple_rnn_cache_width(
        n, j.with_z)
    _fuse(&j)
    H0 = _read_state(h0, op, "h0", X, B, n)
    if kind == K_LSTM:
        C0 = _read_state(c0, op, "c0", X, B, n)
    M = _read_mask(mask, op, B, T)
    loop = _loop_workspace(loop_workspace, op)
    inputs = (X, Wa, RWa, Ba, H0, C0, M)
    call = _Call(op)
    if cache is not None:
        CA = _cache_arg(cache, dt, (T, B, j.Kc), op, True)
        for a in inputs:
            if a is not None and arrays_overlap(CA, <NDArray>a):
                raise ValueError(f"{op}: cache overlaps an input array")
        call.outs.append(("cache", CA))
    try:
        Y = call.out(out, dt, _seq_shape(B, n, T, ncw), "out", inputs)
        Hn = call.out(h_out, dt, (B, n), "h_out", inputs)
        if kind == K_LSTM:
            Cn = call.out(c_out, dt, (B, n), "c_out", inputs)
        _seq_strides(X, ncw, &xsb, &xsk, &xst)
        copy_x = not _time_major(B, T, xsb, xst, &rs) and B > 0
        # RW packed once when it serves more than one step (not for a matrix-vector product,
        # which the GEMM sums in another order: a step gives the same bits alone or in a
        # sequence)
        pack_rw = T > 1 and B > 1 and K > 1
        j.rtw = _rows_width(kind, False, CA is not None) * n
        _fwd_scratch(&z, kind, B, T, nin, n, item, copy_x, pack_rw, M is not None, peep,
                     loop is not None, j.rtw)
        base = call.scratch(scratch, z.total, inputs + (Y, Hn, Cn, CA))
        j.proj = base + z.proj
        j.hbuf = base + z.hbuf
        j.cbuf = base + z.cbuf
        j.bias = base + z.bias
        _vector(Ba, j.bias, K)
        if M is not None:
            j.mask = base + z.mask
            np.copyto(_from_numpy_view(j.mask, B, T, j.f64), np.asarray(M), casting="unsafe")
        if peep:
            j.peep_w = base + z.peep
            for q in range(3):
                _copy2(RWa._data + (K + q) * RWa._strides[1], _es(RWa, 0), 0,
                       j.peep_w + q * n * item, 1, 0, n, 1, item)
        j.RW, j.rwrs, j.rwcs, j.rw_k, j.rw_n = RWa._data, _es(RWa, 0), _es(RWa, 1), n, K
        if pack_rw:
            j.RWp = base + z.rwp
            with nogil:
                _pack_rw(&j)
        if loop is None:
            j.S = base + z.stmp
            j.rows_tmp = base + z.rtmp
        j.cache = CA._data if CA is not None else NULL
        j.y = Y._data
        _seq_strides(Y, ncw, &j.ysb, &j.ysk, &j.yst)
        if H0 is not None:
            _contiguous(H0, j.hbuf, B, n)
        j.has_s = H0 is not None
        if kind == K_LSTM:
            if C0 is not None:
                _contiguous(C0, j.cbuf, B, n)
            else:
                memset(j.cbuf, 0, B * n * item)
        if copy_x:
            j.xr = base + z.xcopy
            nt = _copy_threads(B, T, nin)
            with nogil:
                _copy_time_major(X._data, xsb, xsk, xst, j.xr, B, T, nin, item, nt)
            j.xrs, j.xcs = nin, 1
        else:
            j.xr, j.xrs, j.xcs = X._data, rs, xsk
        j.nt_gemm = threads_for(2 * B * n * K, GRAIN_GEMM_F64 if j.f64 else GRAIN_GEMM_F32)
        j.nt_rows = threads_for(B * n, GRAIN_NN_UPDATE)
        j.ntasks = <int>_imin(B, 4 * j.nt_rows)
        _plan_steps(&j)
        # the input projection, a chunk of steps at a time (_forward_loop)
        j.pchunk = _proj_steps(B, T, nin, K, item)
        j.nt_proj = threads_for(2 * j.pchunk * B * nin * K,
                                GRAIN_GEMM_F64 if j.f64 else GRAIN_GEMM_F32)
        j.W, j.ws0, j.ws1 = Wa._data, _es(Wa, 0), _es(Wa, 1)
        if j.pchunk < T and nin > 0:
            j.Wp = base + z.wp
            with nogil:
                if j.f64:
                    j.gt.pack_b_f64(nin, K, <const float64_t*>j.W, j.ws0, j.ws1,
                                    <float64_t*>j.Wp)
                else:
                    j.gt.pack_b_f32(nin, K, <const float32_t*>j.W, j.ws0, j.ws1,
                                    <float32_t*>j.Wp)
        _run_loop(&j, loop, False)
        # the final state (the caller keeps it, e.g. for rnn_time_step or the next segment)
        if T == 0 and H0 is None:
            memset(j.hbuf, 0, B * n * item)
        _copy2(j.hbuf, n, 1, Hn._data, _es(Hn, 0), _es(Hn, 1), B, n, item)
        if kind == K_LSTM:
            _copy2(j.cbuf, n, 1, Cn._data, _es(Cn, 0), _es(Cn, 1), B, n, item)
        call.finish()
    except BaseException:
        call.fail()
        raise
    y_res = out if out is not None else Y
    h_res = h_out if h_out is not None else Hn
    if kind == K_LSTM:
        return (y_res, h_res, c_out if c_out is not None else Cn)
    return (y_res, h_res)


cdef tuple rnn_backward(int kind, object x, object W, object RW, object cache, object grad_output,
                        object h0, object c0, object mask, object grad_h, object grad_c,
                        object activation, object gate_activation, bint peep, object data_format,
                        object back_length, bint need_input, object grad_input, object grad_W,
                        object grad_RW, object grad_b, object grad_h0, object grad_c0,
                        object loop_workspace, object scratch, str op):
    cdef Job j
    cdef Sizes z
    cdef bint ncw = _ncw(data_format, op)
    cdef NDArray X = _operand(x, op, "x")
    cdef NDArray Wa = _operand(W, op, "W", X._dtype)
    cdef NDArray RWa = _operand(RW, op, "RW", X._dtype)
    cdef NDArray CA, DY, DH = None, DC = None, H0, C0 = None, M
    cdef NDArray dX = None, dW, dRW, db, dH0, dC0 = None
    cdef Arena loop
    cdef intp_t B, T, nin, n, K, item, xsb, xsk, xst, rs, Tw, R
    cdef intp_t dsb = 0, dsk = 0, dst = 0, drs = 0
    cdef intp_t t0, t, hoff
    cdef int nt, q, nt_copy
    cdef bint copy_x, copy_dx = False, pack_rw
    cdef char* base
    cdef char* xw
    cdef char* dxw
    cdef _Call call
    cdef object dt = X._dtype
    memset(&j, 0, sizeof(Job))
    _read_params(&j, kind, X, Wa, RWa, peep, ncw, op)
    B, T, nin, n, K, item = j.B, j.T, j.nin, j.n, j.K, j.item
    j.act = _activation(activation, op, "activation", &j.aalpha)
    if kind == K_LSTM:
        j.gact = _activation(gate_activation, op, "gate_activation", &j.galpha)
    j.with_z = needs_input(j.act) or (kind == K_LSTM and needs_input(j.gact))
    j.Kc = lstm_cache_width(n, j.with_z) if kind == K_LSTM else simple_rnn_cache_width(
        n, j.with_z)
    _fuse(&j)
    if cache is None:
        raise TypeError(f"{op}: cache is required: the array the forward pass filled "
                        f"(cache=...)")
    CA = _cache_arg(cache, dt, (T, B, j.Kc), op, False)
    if grad_output is None:
        raise TypeError(f"{op}: grad_output is required (dL/d(output), the forward's output "
                        f"shape)")
    DY = _operand(grad_output, op, "grad_output", dt)
    _shape_is(DY, _seq_shape(B, n, T, ncw), op, "grad_output",
              "the forward's output: " + ("batch, n_out, time" if ncw else
                                          "batch, time, n_out"))
    DH = _read_state(grad_h, op, "grad_h", X, B, n)
    H0 = _read_state(h0, op, "h0", X, B, n)
    if kind == K_LSTM:
        DC = _read_state(grad_c, op, "grad_c", X, B, n)
        C0 = _read_state(c0, op, "c0", X, B, n)
    M = _read_mask(mask, op, B, T)
    if back_length is None:
        t0 = 0
    else:
        if isinstance(back_length, (bool, np.bool_)) or not isinstance(back_length,
                                                                         (int, np.integer)):
            raise TypeError(f"{op}: back_length must be an int or None, got {back_length!r}")
        if back_length < 0:
            raise ValueError(f"{op}: back_length must be >= 0, got {back_length!r}")
        t0 = T - back_length if back_length < T else 0
    loop = _loop_workspace(loop_workspace, op)
    inputs = (X, Wa, RWa, CA, DY, DH, DC, H0, C0, M)
    if grad_input is not None and not need_input:
        raise ValueError(f"{op}: grad_input is given but need_input is False (no input "
                         f"gradient is computed): pass need_input=True, or no grad_input")
    call = _Call(op)
    try:
        if need_input:
            dX = call.out(grad_input, dt, shape_of(X), "grad_input", inputs)
        dW = call.out(grad_W, dt, (nin, K), "grad_W", inputs)
        dRW = call.out(grad_RW, dt, shape_of(RWa), "grad_RW", inputs)
        if isinstance(grad_b, (NDArray, np.ndarray)) and grad_b.ndim == 2:
            db = call.out(grad_b, dt, (1, K), "grad_b", inputs)
        else:
            db = call.out(grad_b, dt, (K,), "grad_b", inputs)
        dH0 = call.out(grad_h0, dt, (B, n), "grad_h0", inputs)
        if kind == K_LSTM:
            dC0 = call.out(grad_c0, dt, (B, n), "grad_c0", inputs)
        Tw = T - t0
        R = Tw * B
        _seq_strides(X, ncw, &xsb, &xsk, &xst)
        # NaN or inf in masked padding would reach dW through x^T dz (0 * NaN): then x is
        # copied and its masked steps zeroed, the result of finite padding
        pad = _nonfinite_padding(X, M, ncw, t0) if M is not None and B > 0 else None
        copy_x = (not _time_major(B, T, xsb, xst, &rs) or pad is not None) and B > 0
        if dX is not None:
            _seq_strides(dX, ncw, &dsb, &dsk, &dst)
            copy_dx = not _time_major(B, T, dsb, dst, &drs) and B > 0
        j.rtw = _rows_width(kind, True, True) * n
        pack_rw = Tw > 1 and B > 1 and n > 1
        _bwd_scratch(&z, kind, B, T, Tw, nin, n, item, copy_x, copy_dx, M is not None, peep,
                     loop is not None, pack_rw, j.rtw)
        base = call.scratch(scratch, z.total, inputs + (dX, dW, dRW, db, dH0, dC0))
        j.bwd = True
        j.t0 = t0
        j.dz = base + z.dz
        # RW^T: T - 1 steps and the initial state's error use it
        j.RW, j.rwrs, j.rwcs, j.rw_k, j.rw_n = RWa._data, _es(RWa, 1), _es(RWa, 0), K, n
        if pack_rw:
            j.RWp = base + z.rwp
            with nogil:
                _pack_rw(&j)
        j.dcbuf = base + z.dcbuf
        if C0 is not None:
            j.c0 = base + z.c0
            _contiguous(C0, j.c0, B, n)
        if M is not None:
            j.mask = base + z.mask
            np.copyto(_from_numpy_view(j.mask, B, T, j.f64), np.asarray(M), casting="unsafe")
        if peep:
            j.peep_w = base + z.peep
            for q in range(3):
                _copy2(RWa._data + (K + q) * RWa._strides[1], _es(RWa, 0), 0,
                       j.peep_w + q * n * item, 1, 0, n, 1, item)
        if loop is None:
            j.S = base + z.stmp
            j.rows_tmp = base + z.rtmp
        j.cache = CA._data
        j.dy = DY._data
        _seq_strides(DY, ncw, &j.dysb, &j.dysk, &j.dyst)
        if DH is not None:
            j.dh_last, j.dhs0, j.dhs1 = DH._data, _es(DH, 0), _es(DH, 1)
        if DC is not None:
            j.dc_last, j.dcs0, j.dcs1 = DC._data, _es(DC, 0), _es(DC, 1)
        j.nt_gemm = threads_for(2 * B * n * K, GRAIN_GEMM_F64 if j.f64 else GRAIN_GEMM_F32)
        j.nt_rows = threads_for(B * n, GRAIN_NN_UPDATE)
        j.ntasks = <int>_imin(B, 4 * j.nt_rows)
        _plan_steps(&j)
        _run_loop(&j, loop, True)
        # -- the window's parameter gradients: GEMMs over all its rows at once --------------
        nt = threads_for(2 * R * K * (n if n > nin else nin),
                         GRAIN_GEMM_F64 if j.f64 else GRAIN_GEMM_F32)
        if copy_x:
            xw = base + z.xcopy
            nt_copy = _copy_threads(B, Tw, nin)
            with nogil:
                _copy_time_major(X._data + t0 * xst * item, xsb, xsk, xst, xw, B, Tw, nin,
                                 item, nt_copy)
            xsk, rs = 1, nin
            if pad is not None:
                _from_numpy_view(xw, R, nin, j.f64)[pad.T.reshape(-1)] = 0
        else:
            xw = X._data + t0 * B * rs * item
        hoff = 6 * n if kind == K_LSTM else n
        with nogil:
            # dW := x^T @ dz
            _gemm(&j, nin, K, R, xw, xsk, rs, j.dz, K, 1, 0.0, dW._data, _es(dW, 0),
                  _es(dW, 1), nt)
            # dRW := h_{t-1}^T @ dz (h of the previous step from the cache; h0 at step 0)
            if t0 > 0:
                _gemm(&j, n, K, R, j.cache + ((t0 - 1) * B * j.Kc + hoff) * item, 1, j.Kc,
                      j.dz, K, 1, 0.0, dRW._data, _es(dRW, 0), _es(dRW, 1), nt)
            else:
                _gemm(&j, n, K, R - B if R > B else 0, j.cache + hoff * item, 1, j.Kc,
                      j.dz + B * K * item, K, 1, 0.0, dRW._data, _es(dRW, 0), _es(dRW, 1), nt)
                if H0 is not None and R > 0:
                    _gemm(&j, n, K, B, H0._data, _es(H0, 1), _es(H0, 0), j.dz, K, 1, 1.0,
                          dRW._data, _es(dRW, 0), _es(dRW, 1), nt)
        # db := ones^T @ dz (a matrix-vector product: the same sums for any thread count)
        if R > 0:
            np.copyto(_from_numpy_view(base + z.ones, 1, R, j.f64), 1.0)
        with nogil:
            _gemm(&j, 1, K, R, base + z.ones, R, 1, j.dz, K, 1, 0.0, db._data, 0,
                  _es(db, db._ndim - 1), nt)
        if peep:
            if j.f64:
                _peephole_grads(&j, <float64_t*>dRW._data, _es(dRW, 0), _es(dRW, 1))
            else:
                _peephole_grads(&j, <float32_t*>dRW._data, _es(dRW, 0), _es(dRW, 1))
        # dx := dz @ W^T for the window's steps, 0 before it
        if dX is not None:
            if t0 > 0:
                if ncw:
                    _zero_steps(dX, 2, t0)
                else:
                    _zero_steps(dX, 1, t0)
            dxw = base + z.dxtmp if copy_dx else dX._data + t0 * B * drs * item
            nt_copy = _copy_threads(B, Tw, nin)
            with nogil:
                _gemm(&j, R, nin, K, j.dz, K, 1, Wa._data, _es(Wa, 1), _es(Wa, 0), 0.0, dxw,
                      nin if copy_dx else drs, 1 if copy_dx else dsk, nt)
                if copy_dx:
                    _copy_from_time_major(dxw, dX._data + t0 * dst * item, dsb, dsk, dst, B,
                                          Tw, nin, item, nt_copy)
        # the initial state's gradients: what step 0 sends back, unless the window is shorter
        if T == 0:
            _state_or_zero(DH, dH0, B, n)
            if kind == K_LSTM:
                _state_or_zero(DC, dC0, B, n)
        elif t0 > 0:
            _zero2(dH0._data, _es(dH0, 0), _es(dH0, 1), B, n, item)
            if kind == K_LSTM:
                _zero2(dC0._data, _es(dC0, 0), _es(dC0, 1), B, n, item)
        else:
            with nogil:
                _gemm_rw(&j, j.dz, K, dH0._data, _es(dH0, 0), _es(dH0, 1), j.nt_gemm)
            if kind == K_LSTM:
                _copy2(j.dcbuf, n, 1, dC0._data, _es(dC0, 0), _es(dC0, 1), B, n, item)
        call.finish()
    except BaseException:
        call.fail()
        raise
    res = [grad_input if grad_input is not None else dX,
           grad_W if grad_W is not None else dW,
           grad_RW if grad_RW is not None else dRW,
           grad_b if grad_b is not None else db,
           grad_h0 if grad_h0 is not None else dH0]
    if not need_input:
        res[0] = None
    if kind == K_LSTM:
        res.append(grad_c0 if grad_c0 is not None else dC0)
    return tuple(res)


cdef object _nonfinite_padding(NDArray X, object M, bint ncw, intp_t t0):
    # the window's masked steps, (B, Tw) bools, when x holds NaN or inf at one of them (the
    # steps to zero in the copy); else None. Only the masked steps of x are read
    cdef object masked = np.asarray(M)[:, t0:] == 0
    if not masked.any():
        return None
    x = np.asarray(X)[:, :, t0:] if ncw else np.asarray(X)[:, t0:]
    if np.isfinite(x.transpose(0, 2, 1)[masked] if ncw else x[masked]).all():
        return None
    return masked


cdef int _zero_steps(NDArray a, int axis, intp_t t0) except -1:
    # a[..., :t0] (the time axis `axis` of a 3-D array) := 0
    cdef intp_t d0 = a._shape[0], d1 = a._shape[1], d2 = a._shape[2]
    cdef intp_t s0 = _es(a, 0), s1 = _es(a, 1), s2 = _es(a, 2), i
    for i in range(t0 if a._size > 0 else 0):
        if axis == 2:
            _zero2(a._data + i * s2 * a._itemsize, s0, s1, d0, d1, a._itemsize)
        else:
            _zero2(a._data + i * s1 * a._itemsize, s0, s2, d0, d2, a._itemsize)
    return 0


cdef int _state_or_zero(NDArray src, NDArray dst, intp_t B, intp_t n) except -1:
    if src is None:
        _zero2(dst._data, _es(dst, 0), _es(dst, 1), B, n, dst._itemsize)
    else:
        _copy2(src._data, _es(src, 0), _es(src, 1), dst._data, _es(dst, 0), _es(dst, 1), B, n,
               dst._itemsize)
    return 0


# ------------------------------------------------------------------------------------------------
# Sizes (the public entries of ndws.nn._rnn_entries read them)

cdef bint with_z(object activation, object gate_activation, str op) except -1:
    cdef double a
    cdef int code = _activation(activation, op, "activation", &a)
    if gate_activation is not None and needs_input(
            _activation(gate_activation, op, "gate_activation", &a)):
        return True
    return needs_input(code)


cdef Py_ssize_t rnn_scratch_bytes(int kind, object batch, object n_in, object n_out, object time,
                                  object dtype, bint backward, bint peep, bint cache, bint mask,
                                  bint loop, object back_length, str op) except -1:
    cdef Sizes z
    cdef intp_t B = size_arg(batch, op, "batch", 0)
    cdef intp_t nin = size_arg(n_in, op, "n_in", 0)
    cdef intp_t n = size_arg(n_out, op, "n_out", 1)
    cdef intp_t T = size_arg(time, op, "time", 0)
    cdef intp_t Tw = T, item
    dt = np.dtype(dtype)
    if dt != np.float32 and dt != np.float64:
        raise TypeError(f"{op}: dtype must be float32 or float64, got {dt}")
    item = dt.itemsize
    if back_length is not None:
        Tw = _imin(T, size_arg(back_length, op, "back_length", 0))
    _check_size((B, T, max(nin, 1), 11 * n), op)
    if backward:
        _bwd_scratch(&z, kind, B, T, Tw, nin, n, item, True, True, mask, peep, loop, True,
                     _rows_width(kind, True, True) * n)
    else:
        _fwd_scratch(&z, kind, B, T, nin, n, item, True, True, mask, peep, loop,
                     _rows_width(kind, False, cache) * n)
    return z.total + ALIGN
