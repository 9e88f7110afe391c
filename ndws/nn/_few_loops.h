/* The inner loops of the few-channel convolution (ndws/nn/_conv_few.pyx): the forward's output
 * rows and the weight gradient's dot products, in C so that GCC builds them once per instruction
 * set (AVX-512, AVX2, the x86-64 baseline: target attributes on
 * the same source, as ndws/nn/_dw_loops.h) and ndws picks one when the module loads
 * (ndws_few_use; the tests run every one this CPU supports through
 * ndws.nn._conv_few._use_few_isa).
 *
 * With 1-4 input channels a convolution has only C*KH*KW taps (27 for 3x3 RGB), too few rows
 * or columns for the GEMM's 8 x 32 register tile; the weight gradient is instead a 4 x 4 block
 * of (output channel, tap) pairs at a time, each a dot product over output positions held in
 * 16 lanes: position s*16 + l goes to lane l. The blocking (how many pairs share a pass over
 * the positions) differs between the builds, the lanes and their order do not, so a build's
 * result does not depend on it; a build that fuses the multiply and the add (AVX2, AVX-512)
 * rounds differently from the baseline, as the GEMM builds do.
 */
#ifndef NDWS_FEW_LOOPS_H
#define NDWS_FEW_LOOPS_H

#include <stddef.h>
#include <string.h>

#include "_conv_isa.h"

#define NDWS_FEW_LANES 16
#define NDWS_FEW_BLOCK 4            /* pairs per block: 4 output channels x 4 taps */

#if defined(__GNUC__)
/* each build's native vectors (GCC's vector extensions): 16 lanes are H of them */
typedef float ndws_few_f32x16 __attribute__((vector_size(64)));
typedef float ndws_few_f32x8 __attribute__((vector_size(32)));
typedef float ndws_few_f32x4 __attribute__((vector_size(16)));
typedef double ndws_few_f64x8 __attribute__((vector_size(64)));
typedef double ndws_few_f64x4 __attribute__((vector_size(32)));
typedef double ndws_few_f64x2 __attribute__((vector_size(16)));
typedef int ndws_few_i32x16 __attribute__((vector_size(64)));     /* lane masks */
typedef int ndws_few_i32x8 __attribute__((vector_size(32)));
typedef int ndws_few_i32x4 __attribute__((vector_size(16)));
typedef long long ndws_few_i64x8 __attribute__((vector_size(64)));
typedef long long ndws_few_i64x4 __attribute__((vector_size(32)));
typedef long long ndws_few_i64x2 __attribute__((vector_size(16)));
#define NDWS_FEW_VECTORS 1
#endif

/* acc[(a*4 + b)*16 + l] += sum_{s < n16} dy[a*das + s*16 + l] * col[b*dcs + s*16 + l] (:= with
 * load 0: the sums start from +0 instead of acc, the same bits as a zeroed acc) for the
 * block's a < 4 output channels and b < 4 taps, lane l = h*VL + (lane within vector h). BA
 * output channels share one pass over the positions, their sums and dY vectors in registers,
 * one tap's vectors loaded at a time: AVX-512 float32 holds 4 x 4 sums + 4 + 1 in 21 of its 32
 * registers, float64 (two vectors per 16 lanes) BA 2 in 22; AVX2's 16 hold BA 1 (8 + 2 + 2
 * float32 vectors). Every lane sums its positions in order, whatever V, H and BA. */
#if defined(NDWS_FEW_VECTORS)
#define NDWS_FEW_DOTS(NAME, T, V, ATTR, BA)                                                   \
ATTR                                                                                          \
static void NAME(const T* dy, ptrdiff_t das, const T* col, ptrdiff_t dcs, ptrdiff_t n16,      \
                 int load, T* acc) {                                                          \
    enum { VL = (int)(sizeof(V) / sizeof(T)), H = NDWS_FEW_LANES / VL };                      \
    int a0, a, b, h;                                                                          \
    ptrdiff_t s;                                                                              \
    for (a0 = 0; a0 < NDWS_FEW_BLOCK; a0 += BA) {                                             \
        V sum[BA][NDWS_FEW_BLOCK][H], d[BA][H], x[H];                                         \
        for (a = 0; a < BA; a++)                                                              \
            for (b = 0; b < NDWS_FEW_BLOCK; b++)                                              \
                for (h = 0; h < H; h++)                                                       \
                    if (load)                                                                 \
                        memcpy(&sum[a][b][h], acc + ((a0 + a) * NDWS_FEW_BLOCK + b)           \
                               * NDWS_FEW_LANES + h * VL, sizeof(V));                         \
                    else                                                                      \
                        memset(&sum[a][b][h], 0, sizeof(V));                                  \
        for (s = 0; s < n16; s++) {                                                           \
            for (a = 0; a < BA; a++)                                                          \
                for (h = 0; h < H; h++)                                                       \
                    memcpy(&d[a][h], dy + (a0 + a) * das + s * NDWS_FEW_LANES + h * VL,       \
                           sizeof(V));                                                        \
            for (b = 0; b < NDWS_FEW_BLOCK; b++) {                                            \
                for (h = 0; h < H; h++)                                                       \
                    memcpy(&x[h], col + b * dcs + s * NDWS_FEW_LANES + h * VL, sizeof(V));    \
                for (a = 0; a < BA; a++)                                                      \
                    for (h = 0; h < H; h++)                                                   \
                        sum[a][b][h] += d[a][h] * x[h];                                       \
            }                                                                                 \
        }                                                                                     \
        for (a = 0; a < BA; a++)                                                              \
            for (b = 0; b < NDWS_FEW_BLOCK; b++)                                              \
                for (h = 0; h < H; h++)                                                       \
                    memcpy(acc + ((a0 + a) * NDWS_FEW_BLOCK + b) * NDWS_FEW_LANES + h * VL,   \
                           &sum[a][b][h], sizeof(V));                                         \
    }                                                                                         \
}
#else
/* no vector extensions: the same lanes, one at a time */
#define NDWS_FEW_DOTS(NAME, T, V, ATTR, BA)                                                   \
static void NAME(const T* dy, ptrdiff_t das, const T* col, ptrdiff_t dcs, ptrdiff_t n16,      \
                 int load, T* acc) {                                                          \
    int a, b, l;                                                                              \
    ptrdiff_t s;                                                                              \
    for (a = 0; a < NDWS_FEW_BLOCK; a++)                                                      \
        for (b = 0; b < NDWS_FEW_BLOCK; b++)                                                  \
            for (l = 0; l < NDWS_FEW_LANES; l++) {                                            \
                T t = load ? acc[(a * NDWS_FEW_BLOCK + b) * NDWS_FEW_LANES + l] : 0;          \
                for (s = 0; s < n16; s++)                                                     \
                    t += dy[a * das + s * NDWS_FEW_LANES + l]                                 \
                        * col[b * dcs + s * NDWS_FEW_LANES + l];                              \
                acc[(a * NDWS_FEW_BLOCK + b) * NDWS_FEW_LANES + l] = t;                       \
            }                                                                                 \
}
#endif

/* The forward, one output row: y[r*ys + p] := f(sum_{t < K} w[t*8 + r] * src[toff[t] + p] +
 * b[r*bs]) for the nr <= 8 output channels r of a block and positions p < n, f relu (0 where
 * the value is below 0: NaN and -0.0 pass) or none. Positions are the lanes: a vector of them
 * per channel, the taps' input values loaded once for the 8 channels' broadcast weights. Each
 * output is one chain of multiply-adds over the taps in order from 0, then the bias (the GEMM
 * path's order). Vectors of VL positions, the last one overlapping the one before (the same values
 * again), one position at a time below a vector. */
#if defined(NDWS_FEW_VECTORS)
/* the vectors of a row for NR (a constant 8: the sums stay in registers, or nr) channels */
#define NDWS_FEW_ROW_VECTORS(T, V, IV, NR)                                                    \
    while (n >= VL && p < n) {                                                                \
        V acc[8], x, zero = {0};                                                              \
        if (p + VL > n)                                                                       \
            p = n - VL;                                                                       \
        for (r = 0; r < 8; r++)                                                               \
            acc[r] = zero;                                                                    \
        for (t = 0; t < K; t++) {                                                             \
            const T* wt = w + t * 8;                                                          \
            memcpy(&x, src + toff[t] + p, sizeof(V));                                         \
            for (r = 0; r < 8; r++)                                                           \
                acc[r] += x * wt[r];                                                          \
        }                                                                                     \
        for (r = 0; r < NR; r++) {                                                            \
            V v = acc[r];                                                                     \
            if (b)                                                                            \
                v = v + b[r * bs];                                                            \
            if (relu)                                                                         \
                v = (V)((IV)v & ~(IV)(v < zero));                                             \
            memcpy(y + r * ys + p, &v, sizeof(V));                                            \
        }                                                                                     \
        p += VL;                                                                              \
    }
#define NDWS_FEW_ROW(NAME, T, V, IV, ATTR)                                                    \
ATTR                                                                                          \
static void NAME(const T* src, const ptrdiff_t* toff, ptrdiff_t K, const T* w, int nr,        \
                 const T* b, ptrdiff_t bs, int relu, ptrdiff_t n, T* y, ptrdiff_t ys) {       \
    enum { VL = (int)(sizeof(V) / sizeof(T)) };                                               \
    ptrdiff_t p = 0, t;                                                                       \
    int r;                                                                                    \
    if (nr == 8)                                                                              \
        NDWS_FEW_ROW_VECTORS(T, V, IV, 8)                                                     \
    else                                                                                      \
        NDWS_FEW_ROW_VECTORS(T, V, IV, nr)                                                    \
    NDWS_FEW_ROW_TAIL(T)                                                                      \
}
#else
#define NDWS_FEW_ROW(NAME, T, V, IV, ATTR)                                                    \
static void NAME(const T* src, const ptrdiff_t* toff, ptrdiff_t K, const T* w, int nr,        \
                 const T* b, ptrdiff_t bs, int relu, ptrdiff_t n, T* y, ptrdiff_t ys) {       \
    ptrdiff_t p = 0, t;                                                                       \
    int r;                                                                                    \
    NDWS_FEW_ROW_TAIL(T)                                                                      \
}
#endif
#define NDWS_FEW_ROW_TAIL(T)                                                                  \
    for (; p < n; p++)                                                                        \
        for (r = 0; r < nr; r++) {                                                            \
            T v = 0;                                                                          \
            for (t = 0; t < K; t++)                                                           \
                v += src[toff[t] + p] * w[t * 8 + r];                                         \
            if (b)                                                                            \
                v = v + b[r * bs];                                                            \
            y[r * ys + p] = relu && v < 0 ? 0 : v;                                            \
        }

NDWS_FEW_ROW(ndws_few_row_f32_base, float, ndws_few_f32x4, ndws_few_i32x4, )
NDWS_FEW_ROW(ndws_few_row_f64_base, double, ndws_few_f64x2, ndws_few_i64x2, )
#if defined(NDWS_CONV_X86)
NDWS_FEW_ROW(ndws_few_row_f32_avx2, float, ndws_few_f32x8, ndws_few_i32x8, NDWS_CONV_AVX2)
NDWS_FEW_ROW(ndws_few_row_f64_avx2, double, ndws_few_f64x4, ndws_few_i64x4, NDWS_CONV_AVX2)
NDWS_FEW_ROW(ndws_few_row_f32_avx512, float, ndws_few_f32x16, ndws_few_i32x16, NDWS_CONV_AVX512)
NDWS_FEW_ROW(ndws_few_row_f64_avx512, double, ndws_few_f64x8, ndws_few_i64x8, NDWS_CONV_AVX512)
#endif

NDWS_FEW_DOTS(ndws_few_dots_f32_base, float, ndws_few_f32x4, , 1)
NDWS_FEW_DOTS(ndws_few_dots_f64_base, double, ndws_few_f64x2, , 1)
#if defined(NDWS_CONV_X86)
NDWS_FEW_DOTS(ndws_few_dots_f32_avx2, float, ndws_few_f32x8, NDWS_CONV_AVX2, 1)
NDWS_FEW_DOTS(ndws_few_dots_f64_avx2, double, ndws_few_f64x4, NDWS_CONV_AVX2, 1)
NDWS_FEW_DOTS(ndws_few_dots_f32_avx512, float, ndws_few_f32x16, NDWS_CONV_AVX512, 4)
NDWS_FEW_DOTS(ndws_few_dots_f64_avx512, double, ndws_few_f64x8, NDWS_CONV_AVX512, 2)
#endif

/* The variant in use, set by ndws_few_use (module load, tests). */
static struct {
    const char* isa;
    void (*dots_f32)(const float*, ptrdiff_t, const float*, ptrdiff_t, ptrdiff_t, int, float*);
    void (*dots_f64)(const double*, ptrdiff_t, const double*, ptrdiff_t, ptrdiff_t, int,
                     double*);
    void (*row_f32)(const float*, const ptrdiff_t*, ptrdiff_t, const float*, int, const float*,
                    ptrdiff_t, int, ptrdiff_t, float*, ptrdiff_t);
    void (*row_f64)(const double*, const ptrdiff_t*, ptrdiff_t, const double*, int,
                    const double*, ptrdiff_t, int, ptrdiff_t, double*, ptrdiff_t);
} ndws_few = {"baseline", ndws_few_dots_f32_base, ndws_few_dots_f64_base, ndws_few_row_f32_base,
              ndws_few_row_f64_base};

#define NDWS_FEW_SET(name, suffix) do {                                                    \
        ndws_few.isa = name;                                                                \
        ndws_few.dots_f32 = ndws_few_dots_f32_##suffix;                                     \
        ndws_few.dots_f64 = ndws_few_dots_f64_##suffix;                                     \
        ndws_few.row_f32 = ndws_few_row_f32_##suffix;                                       \
        ndws_few.row_f64 = ndws_few_row_f64_##suffix;                                       \
    } while (0)

/* Use the loops built for `isa` ("avx512", "avx2" or "baseline"): 1, or 0 (nothing changed)
 * when they were not built or this CPU (and OS) cannot run them. */
static int ndws_few_use(const char* isa) {
    switch (ndws_conv_isa(isa)) {
    case 0:
        NDWS_FEW_SET("baseline", base);
        return 1;
#if defined(NDWS_CONV_X86)
    case 1:
        NDWS_FEW_SET("avx2", avx2);
        return 1;
    case 2:
        NDWS_FEW_SET("avx512", avx512);
        return 1;
#endif
    default:
        return 0;
    }
}

static inline const char* ndws_few_isa(void) { return ndws_few.isa; }

static inline void ndws_few_dots_f32(const float* dy, ptrdiff_t das, const float* col,
                                     ptrdiff_t dcs, ptrdiff_t n16, int load, float* acc)
{ ndws_few.dots_f32(dy, das, col, dcs, n16, load, acc); }
static inline void ndws_few_dots_f64(const double* dy, ptrdiff_t das, const double* col,
                                     ptrdiff_t dcs, ptrdiff_t n16, int load, double* acc)
{ ndws_few.dots_f64(dy, das, col, dcs, n16, load, acc); }

#define NDWS_FEW_ROW_CALL(T, S)                                                               \
static inline void ndws_few_row_##S(const T* src, const ptrdiff_t* toff, ptrdiff_t K,         \
                                    const T* w, int nr, const T* b, ptrdiff_t bs, int relu,   \
                                    ptrdiff_t n, T* y, ptrdiff_t ys)                          \
{ ndws_few.row_##S(src, toff, K, w, nr, b, bs, relu, n, y, ys); }
NDWS_FEW_ROW_CALL(float, f32)
NDWS_FEW_ROW_CALL(double, f64)

#endif /* NDWS_FEW_LOOPS_H */
