/* One example's LSTM cell for one step, forward and backward, as one pass over its units, for
 * the activations whose derivatives come from their outputs (identity, sigmoid, tanh: every
 * LSTM DL4J users configure), in C so that the compiler builds it once per instruction set
 * (AVX-512, AVX2, the x86-64 baseline); the best this CPU runs is chosen at import, and tests
 * switch to each of the others (ndws_cell_use, below). ndws/nn/_rnn.pyx's per-example
 * passes run these; other activations take its general path, which applies the activations
 * block by block through the activations' tile API.
 *
 * Each unit takes exactly the operations of the general path, in the same order, with the same
 * exp/tanh/sigmoid (ndws/_vmath.h) and no contraction (fp-contract=off), so both paths, and
 * every instruction set, give the same bits (tests/test_rnn_kernels.py checks it). The codes
 * are 0 identity, 1 sigmoid, 2 tanh; each entry point inlines the body once per pair of codes,
 * so the loop the compiler vectorises has no activation switch in it. */
#ifndef NDWS_RNN_CELL_H
#define NDWS_RNN_CELL_H

#include <stddef.h>
#include "_vmath.h"

/* No two arguments overlap (the callers' buffers are distinct): without saying so, the
   compiler's run-time overlap checks for the loop's dozen arrays exceed its limit and it does
   not vectorise the loop at all. */
#if defined(_MSC_VER)
#define NDWS_R __restrict
#else
#define NDWS_R restrict
#endif

#define NDWS_CELL_ACT(CODE, SIG, TANH, v) ((CODE) == 2 ? TANH(v) : (CODE) == 1 ? SIG(v) : (v))
/* f'(.) from the output y, as _rnn.pyx's _dact: in double, rounded to T */
#define NDWS_CELL_DACT(T, CODE, y) \
    ((CODE) == 2 ? (T)(1.0 - (y) * (y)) : (CODE) == 1 ? (T)((y) * (1.0 - (y))) : (T)1)

/* Forward: G (4n: the activated gates g, f, o, i), Ct (c~ = f c + i g, before the mask), At
 * (act(c~)), and the step's state: c (in: c_{t-1}; out: m c~) and hb (h = m o act(c~)). P: x W
 * of this step and example; S: h_{t-1} RW (zeros at a first step without state, as DL4J's
 * product with a zero state); peep: wFF, wOO, wGG (PEEP only); m: the step's mask, 1 without
 * one (multiplying by 1 changes no bit; the caller writes a masked step's zeros). No two
 * arrays overlap, so the compiler vectorises the loops across units. STORE 0 (G and At NULL:
 * inference, no backward reads them) writes Ct and the state only.
 * Two passes over the units, the gates g, f, i and c~ first, then o, act(c~) and the state:
 * in one pass a unit's work is one chain of dependent transcendentals (sigmoid, then c~, then
 * tanh), about 170 cycles deep for 250 instructions, so the out-of-order window could not
 * overlap the next units' chains and the loop ran at that latency (4.1 ns per unit on Zen 4);
 * two passes, each one transcendental deep, run at 3.6 ns. Each unit takes the same operations
 * in the same order either way, so the bits are the one pass's. */
#define NDWS_LSTM_FWD_BODY(T, SIG, TANH, ACT, GACT, PEEP, STORE)                              \
    for (ptrdiff_t k = 0; k < n; k++) {                                                       \
        T zg = (P[k] + S[k]) + bias[k];                                                       \
        T zf = (P[n + k] + S[n + k]) + bias[n + k];                                           \
        T zi = (P[3 * n + k] + S[3 * n + k]) + bias[3 * n + k];                               \
        T g, f, i;                                                                            \
        if (PEEP) {                                                                           \
            zf = zf + c[k] * peep[k];                                                         \
            zi = zi + c[k] * peep[2 * n + k];                                                 \
        }                                                                                     \
        g = NDWS_CELL_ACT(ACT, SIG, TANH, zg);                                                \
        f = NDWS_CELL_ACT(GACT, SIG, TANH, zf);                                               \
        i = NDWS_CELL_ACT(GACT, SIG, TANH, zi);                                               \
        if (STORE) {                                                                          \
            G[k] = g;                                                                         \
            G[n + k] = f;                                                                     \
            G[3 * n + k] = i;                                                                 \
        }                                                                                     \
        Ct[k] = c[k] * f + i * g;                                                             \
    }                                                                                         \
    for (ptrdiff_t k = 0; k < n; k++) {                                                       \
        T zo = (P[2 * n + k] + S[2 * n + k]) + bias[2 * n + k];                               \
        T ct = Ct[k], o, at;                                                                  \
        if (PEEP)                                                                             \
            zo = zo + ct * peep[n + k];                                                       \
        o = NDWS_CELL_ACT(GACT, SIG, TANH, zo);                                               \
        at = NDWS_CELL_ACT(ACT, SIG, TANH, ct);                                               \
        if (STORE) {                                                                          \
            G[2 * n + k] = o;                                                                 \
            At[k] = at;                                                                       \
        }                                                                                     \
        hb[k] = m * (o * at);                                                                 \
        c[k] = m * ct;                                                                        \
    }

/* Backward: D (4n: dL/dz of g, f, o, i) and dcp (dL/dc_{t-1}) from dh (dL/dh_t, already
 * multiplied by the mask) and dc (dL/dc_t likewise), the step's cached gates G and act(c~) At,
 * and cp (c_{t-1} as the forward used it). */
#define NDWS_LSTM_BWD_BODY(T, ACT, GACT, PEEP)                                                \
    for (ptrdiff_t k = 0; k < n; k++) {                                                       \
        T g = G[k], f = G[n + k], o = G[2 * n + k], i = G[3 * n + k];                         \
        T d_o, d_c, d_f, d_i, d_g, u;                                                         \
        d_o = dh[k] * At[k];                                                                  \
        d_o = d_o * NDWS_CELL_DACT(T, GACT, o);                                               \
        u = o * dh[k];                                                                        \
        u = u * NDWS_CELL_DACT(T, ACT, At[k]);                                                \
        d_c = dc[k] + u;                                                                      \
        if (PEEP)                                                                             \
            d_c = d_c + d_o * peep[n + k];                                                    \
        d_f = d_c * cp[k];                                                                    \
        d_i = d_c * g;                                                                        \
        d_g = d_c * i;                                                                        \
        d_f = d_f * NDWS_CELL_DACT(T, GACT, f);                                               \
        d_i = d_i * NDWS_CELL_DACT(T, GACT, i);                                               \
        d_g = d_g * NDWS_CELL_DACT(T, ACT, g);                                                \
        D[k] = d_g;                                                                           \
        D[n + k] = d_f;                                                                       \
        D[2 * n + k] = d_o;                                                                   \
        D[3 * n + k] = d_i;                                                                   \
        u = d_c * f;                                                                          \
        if (PEEP)                                                                             \
            u = (u + d_f * peep[k]) + d_i * peep[2 * n + k];                                  \
        dcp[k] = u;                                                                           \
    }

/* One function per (activation, gate activation, peepholes): the body inlined with constant
 * codes, so the vectorised loop holds no switch */
#define NDWS_FWD_ARGS(T)                                                                      \
    ptrdiff_t n, const T* NDWS_R P, const T* NDWS_R S, const T* NDWS_R bias,                  \
    const T* NDWS_R peep, T* NDWS_R c, T* NDWS_R hb, T* NDWS_R G, T* NDWS_R Ct,               \
    T* NDWS_R At, T m
#define NDWS_BWD_ARGS(T)                                                                      \
    ptrdiff_t n, const T* NDWS_R G, const T* NDWS_R At, const T* NDWS_R cp,                   \
    const T* NDWS_R dh, const T* NDWS_R dc, const T* NDWS_R peep, T* NDWS_R D, T* NDWS_R dcp
#define NDWS_LSTM_CASE(SFX, T, SIG, TANH, ACT, GACT, PEEP)                                    \
static inline __attribute__((always_inline)) void                                             \
ndws_lstm_fwd_##SFX##_##ACT##GACT##PEEP(NDWS_FWD_ARGS(T)) {                                   \
    NDWS_LSTM_FWD_BODY(T, SIG, TANH, ACT, GACT, PEEP, 1)                                      \
}                                                                                             \
static inline __attribute__((always_inline)) void                                             \
ndws_lstm_inf_##SFX##_##ACT##GACT##PEEP(NDWS_FWD_ARGS(T)) {                                   \
    NDWS_LSTM_FWD_BODY(T, SIG, TANH, ACT, GACT, PEEP, 0)                                      \
}                                                                                             \
static inline __attribute__((always_inline)) void                                             \
ndws_lstm_bwd_##SFX##_##ACT##GACT##PEEP(NDWS_BWD_ARGS(T)) {                                   \
    NDWS_LSTM_BWD_BODY(T, ACT, GACT, PEEP)                                                    \
}
#define NDWS_LSTM_PAIR(SFX, T, SIG, TANH, ACT, GACT)                                          \
    NDWS_LSTM_CASE(SFX, T, SIG, TANH, ACT, GACT, 0)                                           \
    NDWS_LSTM_CASE(SFX, T, SIG, TANH, ACT, GACT, 1)
#define NDWS_FWD_CASE(SFX, ACT, GACT)                                                         \
    case ACT * 3 + GACT:                                                                      \
        if (G == NULL) {                                                                      \
            if (peep != NULL) ndws_lstm_inf_##SFX##_##ACT##GACT##1(n, P, S, bias, peep, c, hb,\
                                                                   G, Ct, At, m);             \
            else ndws_lstm_inf_##SFX##_##ACT##GACT##0(n, P, S, bias, peep, c, hb, G, Ct, At,  \
                                                      m);                                     \
        } else if (peep != NULL) ndws_lstm_fwd_##SFX##_##ACT##GACT##1(n, P, S, bias, peep, c, \
                                                                      hb, G, Ct, At, m);      \
        else ndws_lstm_fwd_##SFX##_##ACT##GACT##0(n, P, S, bias, peep, c, hb, G, Ct, At, m);  \
        break;
#define NDWS_BWD_CASE(SFX, ACT, GACT)                                                         \
    case ACT * 3 + GACT:                                                                      \
        if (peep != NULL) ndws_lstm_bwd_##SFX##_##ACT##GACT##1(n, G, At, cp, dh, dc, peep, D, \
                                                               dcp);                          \
        else ndws_lstm_bwd_##SFX##_##ACT##GACT##0(n, G, At, cp, dh, dc, peep, D, dcp);        \
        break;

/* The nine cases of one precision, and the switch over them built once per instruction set
   (ISA: the attributes of the clone, ISFX: its suffix). */
#define NDWS_LSTM_CASES(SFX, T, SIG, TANH)                                                    \
NDWS_LSTM_PAIR(SFX, T, SIG, TANH, 0, 0) NDWS_LSTM_PAIR(SFX, T, SIG, TANH, 0, 1)               \
NDWS_LSTM_PAIR(SFX, T, SIG, TANH, 0, 2) NDWS_LSTM_PAIR(SFX, T, SIG, TANH, 1, 0)               \
NDWS_LSTM_PAIR(SFX, T, SIG, TANH, 1, 1) NDWS_LSTM_PAIR(SFX, T, SIG, TANH, 1, 2)               \
NDWS_LSTM_PAIR(SFX, T, SIG, TANH, 2, 0) NDWS_LSTM_PAIR(SFX, T, SIG, TANH, 2, 1)               \
NDWS_LSTM_PAIR(SFX, T, SIG, TANH, 2, 2)
#define NDWS_LSTM_SWITCH(SFX, T, ISA, ISFX)                                                   \
ISA static void ndws_lstm_fwd_##SFX##_##ISFX(int act, int gact, NDWS_FWD_ARGS(T)) {           \
    switch (act * 3 + gact) {                                                                 \
    NDWS_FWD_CASE(SFX, 0, 0) NDWS_FWD_CASE(SFX, 0, 1) NDWS_FWD_CASE(SFX, 0, 2)                \
    NDWS_FWD_CASE(SFX, 1, 0) NDWS_FWD_CASE(SFX, 1, 1) NDWS_FWD_CASE(SFX, 1, 2)                \
    NDWS_FWD_CASE(SFX, 2, 0) NDWS_FWD_CASE(SFX, 2, 1) NDWS_FWD_CASE(SFX, 2, 2)                \
    }                                                                                         \
}                                                                                             \
ISA static void ndws_lstm_bwd_##SFX##_##ISFX(int act, int gact, NDWS_BWD_ARGS(T)) {           \
    switch (act * 3 + gact) {                                                                 \
    NDWS_BWD_CASE(SFX, 0, 0) NDWS_BWD_CASE(SFX, 0, 1) NDWS_BWD_CASE(SFX, 0, 2)                \
    NDWS_BWD_CASE(SFX, 1, 0) NDWS_BWD_CASE(SFX, 1, 1) NDWS_BWD_CASE(SFX, 1, 2)                \
    NDWS_BWD_CASE(SFX, 2, 0) NDWS_BWD_CASE(SFX, 2, 1) NDWS_BWD_CASE(SFX, 2, 2)                \
    }                                                                                         \
}

NDWS_LSTM_CASES(f32, float, ndws_sigmoidf1, ndws_tanhf1)
NDWS_LSTM_CASES(f64, double, ndws_sigmoid1, ndws_tanh1)

/* One clone per instruction set, chosen once at import (the best this CPU runs) and switchable
   by the tests (ndws_cell_use), so that every clone this CPU runs is checked against the
   general path; each compiles without contraction (no fused multiply-add: the general path's
   roundings). As target_clones, but with a choice a test can make. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define NDWS_CELL_MULTI 1
#define NDWS_CELL_AVX512 __attribute__((target("avx512f"), optimize("fp-contract=off")))
#define NDWS_CELL_AVX2 __attribute__((target("avx2"), optimize("fp-contract=off")))
#endif
#if defined(__GNUC__) && !defined(__clang__)
#define NDWS_CELL_BASE __attribute__((optimize("fp-contract=off")))
#else
#define NDWS_CELL_BASE
#endif

#ifdef NDWS_CELL_MULTI
NDWS_LSTM_SWITCH(f32, float, NDWS_CELL_AVX512, avx512)
NDWS_LSTM_SWITCH(f64, double, NDWS_CELL_AVX512, avx512)
NDWS_LSTM_SWITCH(f32, float, NDWS_CELL_AVX2, avx2)
NDWS_LSTM_SWITCH(f64, double, NDWS_CELL_AVX2, avx2)
#endif
NDWS_LSTM_SWITCH(f32, float, NDWS_CELL_BASE, baseline)
NDWS_LSTM_SWITCH(f64, double, NDWS_CELL_BASE, baseline)

typedef struct {
    const char* isa;
    void (*fwd_f32)(int, int, NDWS_FWD_ARGS(float));
    void (*fwd_f64)(int, int, NDWS_FWD_ARGS(double));
    void (*bwd_f32)(int, int, NDWS_BWD_ARGS(float));
    void (*bwd_f64)(int, int, NDWS_BWD_ARGS(double));
} ndws_cell_table;

#define NDWS_CELL_ROW(ISFX) {#ISFX, ndws_lstm_fwd_f32_##ISFX, ndws_lstm_fwd_f64_##ISFX,            \
                             ndws_lstm_bwd_f32_##ISFX, ndws_lstm_bwd_f64_##ISFX}
/* best first */
static const ndws_cell_table ndws_cell_tables[] = {
#ifdef NDWS_CELL_MULTI
    NDWS_CELL_ROW(avx512), NDWS_CELL_ROW(avx2),
#endif
    NDWS_CELL_ROW(baseline)};
#define NDWS_CELL_N ((int)(sizeof(ndws_cell_tables) / sizeof(ndws_cell_tables[0])))
static const ndws_cell_table* ndws_cell = &ndws_cell_tables[NDWS_CELL_N - 1];

/* Whether this CPU runs clone i (0 .. NDWS_CELL_N - 1) */
static int ndws_cell_runs(int i) {
    if (i < 0 || i >= NDWS_CELL_N)
        return 0;
#ifdef NDWS_CELL_MULTI
    __builtin_cpu_init();
    if (i == 0)
        return __builtin_cpu_supports("avx512f");
    if (i == 1)
        return __builtin_cpu_supports("avx2");
#endif
    return 1;
}
static int ndws_cell_count(void) { return NDWS_CELL_N; }
static const char* ndws_cell_name(int i) { return ndws_cell_tables[i].isa; }
static const char* ndws_cell_isa(void) { return ndws_cell->isa; }
/* Use clone i (the caller checked ndws_cell_runs(i)); -1: the best this CPU runs */
static void ndws_cell_use(int i) {
    if (i < 0)
        for (i = 0; !ndws_cell_runs(i); i++) {}
    ndws_cell = &ndws_cell_tables[i];
}

static inline void ndws_lstm_fwd_f32(int act, int gact, NDWS_FWD_ARGS(float)) {
    ndws_cell->fwd_f32(act, gact, n, P, S, bias, peep, c, hb, G, Ct, At, m);
}
static inline void ndws_lstm_fwd_f64(int act, int gact, NDWS_FWD_ARGS(double)) {
    ndws_cell->fwd_f64(act, gact, n, P, S, bias, peep, c, hb, G, Ct, At, m);
}
static inline void ndws_lstm_bwd_f32(int act, int gact, NDWS_BWD_ARGS(float)) {
    ndws_cell->bwd_f32(act, gact, n, G, At, cp, dh, dc, peep, D, dcp);
}
static inline void ndws_lstm_bwd_f64(int act, int gact, NDWS_BWD_ARGS(double)) {
    ndws_cell->bwd_f64(act, gact, n, G, At, cp, dh, dc, peep, D, dcp);
}

#endif /* NDWS_RNN_CELL_H */
