/* The inner loops of ndws' depthwise convolution (ndws/nn/_conv.pyx), in C so that GCC builds
 * them once per instruction set and picks one at load time (target_clones: AVX-512, AVX2 or
 * the x86-64 baseline), as ndws/nn/_upd_loops.h does for the updaters. A depthwise convolution
 * multiplies each input value by only kh*kw weights: nothing for a GEMM to block, all in the
 * vector width and in keeping partial sums in registers.
 *
 * Rounding: the row kernel sums the taps of each output in one fixed order (kh, then kw) and a
 * dot product sums fixed lanes in a fixed order, so the result never depends on the thread
 * count; it may differ between instruction sets (a clone may fuse a multiply and an add), as
 * the GEMM builds do.
 */
#ifndef NDWS_DW_LOOPS_H
#define NDWS_DW_LOOPS_H

#include <stddef.h>
#include <string.h>     /* defines __GLIBC__ where there is one (target_clones needs its ifunc) */

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define NDWS_DW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NDWS_DW_CLONES
#endif

#define NDWS_DW_BLOCK 16        /* outputs kept in registers: one AVX-512 float32 vector */

/* NDWS_DW_BLOCK lanes as one vector value (GCC's vector extensions: one zmm register in the
 * AVX-512 clone, two ymm in the AVX2 one, four xmm in the baseline); unaligned loads and stores
 * through memcpy, which GCC turns into single vector moves. */
#if defined(__GNUC__)
typedef float ndws_dw_vf32 __attribute__((vector_size(NDWS_DW_BLOCK * 4)));
typedef double ndws_dw_vf64 __attribute__((vector_size(NDWS_DW_BLOCK * 8)));
/* lane masks of the same sizes (reinterpreting casts are free) */
typedef int ndws_dw_vi32 __attribute__((vector_size(NDWS_DW_BLOCK * 4)));
typedef long long ndws_dw_vi64 __attribute__((vector_size(NDWS_DW_BLOCK * 8)));
#define NDWS_DW_VECTORS 1
#endif

/* y[i] = b + sum_{kh < KH, kw < KW} w[kh*KW + kw] * x[kh*xs + kw*dw + i] for i < n: one output
 * row (unit strides), every tap inside x. */
#if defined(NDWS_DW_VECTORS)
#define NDWS_DW_ROW_BLOCKS(T, V)                                                              \
    while (n >= NDWS_DW_BLOCK && i < n) {                                                     \
        /* the last block ends at n, overlapping the one before: its outputs are computed  */ \
        /* again the same way, to the same bits, instead of one by one                     */ \
        V acc = (V){0} + b, xv;                                                               \
        if (i + NDWS_DW_BLOCK > n)                                                            \
            i = n - NDWS_DW_BLOCK;                                                            \
        for (kh = 0; kh < KH; kh++)                                                           \
            for (kw = 0; kw < KW; kw++) {                                                     \
                memcpy(&xv, x + kh * xs + kw * dw + i, sizeof(V));                            \
                acc += w[kh * KW + kw] * xv;                                                  \
            }                                                                                 \
        memcpy(y + i, &acc, sizeof(V));                                                       \
        i += NDWS_DW_BLOCK;                                                                   \
    }
#else
#define NDWS_DW_ROW_BLOCKS(T, V)
#endif

#define NDWS_DW_ROW(NAME, T, V)                                                               \
NDWS_DW_CLONES                                                                                \
static void NAME(T* y, const T* x, ptrdiff_t xs, ptrdiff_t dw, const T* w, int KH, int KW,   \
                 T b, ptrdiff_t n) {                                                          \
    ptrdiff_t i = 0;                                                                          \
    int kh, kw;                                                                               \
    NDWS_DW_ROW_BLOCKS(T, V)                                                                  \
    for (; i < n; i++) {                                                                      \
        T s = b;                                                                              \
        for (kh = 0; kh < KH; kh++)                                                           \
            for (kw = 0; kw < KW; kw++)                                                       \
                s += w[kh * KW + kw] * x[kh * xs + kw * dw + i];                              \
        y[i] = s;                                                                             \
    }                                                                                         \
}

NDWS_DW_ROW(ndws_dw_row_f32, float, ndws_dw_vf32)
NDWS_DW_ROW(ndws_dw_row_f64, double, ndws_dw_vf64)

/* out[kw] += sum_{r < R} sum_{i < n} g[r*gr + i] * x[r*xr + kw*dw + i] for kw < KW: the kernel
 * row's weight gradients from R output rows of one image (unit strides, every tap inside x),
 * NDWS_DW_BLOCK lanes per tap kept in registers over all the rows, summed lane by lane in a
 * fixed order at the end. KW <= 16. */
#if defined(NDWS_DW_VECTORS)
/* One tap at a time, so that its lane sums stay in registers (an array of accumulators indexed
 * by a run-time tap would live on the stack: every fma a store-load round trip); two of them,
 * alternating blocks, for two independent fma chains. */
#define NDWS_DW_DOT_BLOCKS(T, V, VI)                                                          \
    {                                                                                         \
        V a0, a1, gv, xv;                                                                     \
        T lanes[NDWS_DW_BLOCK];                                                               \
        VI keep;                                                                              \
        ptrdiff_t r, last = n - NDWS_DW_BLOCK, rem = n % NDWS_DW_BLOCK;                      \
        for (e = 0; e < NDWS_DW_BLOCK; e++)                                                   \
            keep[e] = e >= NDWS_DW_BLOCK - rem ? -1 : 0;                                      \
        for (kw = 0; kw < KW; kw++) {                                                         \
            a0 = (V){0};                                                                      \
            a1 = (V){0};                                                                      \
            for (r = 0; r < R; r++) {                                                         \
                const T* gp = g + r * gr;                                                     \
                const T* xp = x + r * xr + kw * dw;                                           \
                for (i = 0; i + 2 * NDWS_DW_BLOCK <= n; i += 2 * NDWS_DW_BLOCK) {             \
                    memcpy(&gv, gp + i, sizeof(V));                                           \
                    memcpy(&xv, xp + i, sizeof(V));                                           \
                    a0 += gv * xv;                                                            \
                    memcpy(&gv, gp + i + NDWS_DW_BLOCK, sizeof(V));                           \
                    memcpy(&xv, xp + i + NDWS_DW_BLOCK, sizeof(V));                           \
                    a1 += gv * xv;                                                            \
                }                                                                             \
                if (i + NDWS_DW_BLOCK <= n) {                                                 \
                    memcpy(&gv, gp + i, sizeof(V));                                           \
                    memcpy(&xv, xp + i, sizeof(V));                                           \
                    a0 += gv * xv;                                                            \
                }                                                                             \
                if (rem) {                                                                    \
                    /* the tail as the block ending at n, the lanes already counted cleared */\
                    /* (bitwise: a cleared NaN or inf adds nothing)                        */ \
                    memcpy(&gv, gp + last, sizeof(V));                                        \
                    memcpy(&xv, xp + last, sizeof(V));                                        \
                    gv = (V)((VI)gv & keep);                                                  \
                    xv = (V)((VI)xv & keep);                                                  \
                    a1 += gv * xv;                                                            \
                }                                                                             \
            }                                                                                 \
            a0 += a1;                                                                         \
            memcpy(lanes, &a0, sizeof(V));                                                    \
            for (e = 0; e < NDWS_DW_BLOCK; e++)                                               \
                part[kw] += lanes[e];                                                         \
        }                                                                                     \
        done = 1;                                                                             \
    }
#else
#define NDWS_DW_DOT_BLOCKS(T, V, VI)
#endif

#define NDWS_DW_DOTS(NAME, T, V, VI)                                                              \
NDWS_DW_CLONES                                                                                \
static void NAME(const T* g, ptrdiff_t gr, const T* x, ptrdiff_t xr, ptrdiff_t R,            \
                 ptrdiff_t dw, int KW, ptrdiff_t n, double* out) {                            \
    T part[16];                                                                               \
    ptrdiff_t i, e, r;                                                                        \
    int kw, done = 0;                                                                         \
    for (kw = 0; kw < KW; kw++)                                                               \
        part[kw] = 0;                                                                         \
    if (n >= NDWS_DW_BLOCK)                                                                   \
        NDWS_DW_DOT_BLOCKS(T, V, VI)                                                          \
    if (!done)                                                                                \
        for (r = 0; r < R; r++)                                                               \
            for (kw = 0; kw < KW; kw++)                                                       \
                for (e = 0; e < n; e++)                                                       \
                    part[kw] += g[r * gr + e] * x[r * xr + kw * dw + e];                      \
    for (kw = 0; kw < KW; kw++)                                                               \
        out[kw] += part[kw];                                                                  \
}

NDWS_DW_DOTS(ndws_dw_dots_f32, float, ndws_dw_vf32, ndws_dw_vi32)
NDWS_DW_DOTS(ndws_dw_dots_f64, double, ndws_dw_vf64, ndws_dw_vi64)

#endif /* NDWS_DW_LOOPS_H */
