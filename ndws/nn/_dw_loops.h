/* The inner loops of ndws' depthwise convolution (ndws/nn/_conv.pyx), in C so that GCC builds
 * them once per instruction set (AVX-512, AVX2, the x86-64 baseline: target attributes on the
 * same source) and ndws picks one when the module loads (ndws_dw_use; the tests run every one
 * this CPU supports through ndws.nn._conv._use_dw_isa). A depthwise convolution multiplies each
 * input value by only kh*kw weights: nothing for a GEMM to block, all in the vector width and
 * in keeping partial sums in registers.
 *
 * Rounding: the row kernel sums the taps of each output in one fixed order (kh, then kw) and a
 * dot product sums fixed lanes in a fixed order, so the result never depends on the thread
 * count; it may differ between instruction sets (one may fuse a multiply and an add), as the
 * GEMM builds do.
 */
#ifndef NDWS_DW_LOOPS_H
#define NDWS_DW_LOOPS_H

#include <stddef.h>
#include <string.h>

#include "_conv_isa.h"

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

#define NDWS_DW_ROW(NAME, T, V, ATTR)                                                         \
ATTR                                                                                          \
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

/* A whole output plane from a padded plane p (every tap inside): row oh of y (row stride ys)
 * is the row kernel's output row over p + oh*ps, for oh < rows. Four rows at a time: one block
 * of each is four independent fma chains in flight (one row's blocks are a chain each, of
 * KH*KW dependent fmas, the latency the row kernel waits on), each output the row kernel's
 * expression, so the same bits. Narrow rows (under a block) go row by row. */
#if defined(NDWS_DW_VECTORS)
#define NDWS_DW_PLANE4(T, V)                                                                  \
    if (n >= NDWS_DW_BLOCK)                                                                   \
        for (; oh + 4 <= rows; oh += 4) {                                                     \
            const T* q0 = p + oh * ps;                                                        \
            T* y0 = y + oh * ys;                                                              \
            ptrdiff_t i = 0;                                                                  \
            while (i < n) {                                                                   \
                V a0 = (V){0} + b, a1 = a0, a2 = a0, a3 = a0, xv;                             \
                int kh, kw;                                                                   \
                if (i + NDWS_DW_BLOCK > n)                                                    \
                    i = n - NDWS_DW_BLOCK;                                                    \
                for (kh = 0; kh < KH; kh++)                                                   \
                    for (kw = 0; kw < KW; kw++) {                                             \
                        const T* q = q0 + kh * xs + kw * dw + i;                              \
                        T wv = w[kh * KW + kw];                                               \
                        memcpy(&xv, q, sizeof(V));                                            \
                        a0 += wv * xv;                                                        \
                        memcpy(&xv, q + ps, sizeof(V));                                       \
                        a1 += wv * xv;                                                        \
                        memcpy(&xv, q + 2 * ps, sizeof(V));                                   \
                        a2 += wv * xv;                                                        \
                        memcpy(&xv, q + 3 * ps, sizeof(V));                                   \
                        a3 += wv * xv;                                                        \
                    }                                                                         \
                memcpy(y0 + i, &a0, sizeof(V));                                               \
                memcpy(y0 + ys + i, &a1, sizeof(V));                                          \
                memcpy(y0 + 2 * ys + i, &a2, sizeof(V));                                      \
                memcpy(y0 + 3 * ys + i, &a3, sizeof(V));                                      \
                i += NDWS_DW_BLOCK;                                                           \
            }                                                                                 \
        }
#else
#define NDWS_DW_PLANE4(T, V)
#endif

#define NDWS_DW_PLANE(NAME, ROW, T, V, ATTR)                                                  \
ATTR                                                                                          \
static void NAME(T* y, ptrdiff_t ys, const T* p, ptrdiff_t ps, ptrdiff_t xs, ptrdiff_t dw,    \
                 const T* w, int KH, int KW, T b, ptrdiff_t rows, ptrdiff_t n) {              \
    ptrdiff_t oh = 0;                                                                         \
    NDWS_DW_PLANE4(T, V)                                                                      \
    for (; oh < rows; oh++)                                                                   \
        ROW(y + oh * ys, p + oh * ps, xs, dw, w, KH, KW, b, n);                               \
}

/* The padded plane: buf[i*Wp + j] := src[(i - top)*s2 + (j - left)*s3], 0 outside (a negative
 * top or left crops). Built per instruction set: in the baseline-built Cython module these
 * copies were a quarter of a 3x3 depthwise forward. */
#define NDWS_DW_PAD(NAME, T, ATTR)                                                            \
ATTR NDWS_NO_LIBC_LOOPS                                                                       \
static void NAME(const T* src, ptrdiff_t s2, ptrdiff_t s3, ptrdiff_t H, ptrdiff_t W,          \
                 ptrdiff_t top, ptrdiff_t left, ptrdiff_t Hp, ptrdiff_t Wp, T* buf) {         \
    ptrdiff_t i, j, lo = left < 0 ? 0 : (left < Wp ? left : Wp);                              \
    ptrdiff_t hi = W + left < Wp ? W + left : Wp;                                             \
    if (hi < lo)                                                                              \
        hi = lo;                                                                              \
    for (i = 0; i < Hp; i++) {                                                                \
        T* d = buf + i * Wp;                                                                  \
        ptrdiff_t ih = i - top;                                                               \
        const T* r;                                                                           \
        if (ih < 0 || ih >= H) {                                                              \
            for (j = 0; j < Wp; j++)                                                          \
                d[j] = 0;                                                                     \
            continue;                                                                         \
        }                                                                                     \
        r = src + ih * s2 + (lo - left) * s3;                                                 \
        for (j = 0; j < lo; j++)                                                              \
            d[j] = 0;                                                                         \
        if (s3 == 1)                                                                          \
            for (j = 0; j < hi - lo; j++)                                                     \
                d[lo + j] = r[j];                                                             \
        else                                                                                  \
            for (j = 0; j < hi - lo; j++)                                                     \
                d[lo + j] = r[j * s3];                                                        \
        for (j = hi; j < Wp; j++)                                                             \
            d[j] = 0;                                                                         \
    }                                                                                         \
}

#define NDWS_DW_PLANES(SFX, ATTR)                                                             \
NDWS_DW_PLANE(ndws_dw_plane_f32_##SFX, ndws_dw_row_f32_##SFX, float, ndws_dw_vf32, ATTR)      \
NDWS_DW_PLANE(ndws_dw_plane_f64_##SFX, ndws_dw_row_f64_##SFX, double, ndws_dw_vf64, ATTR)     \
NDWS_DW_PAD(ndws_dw_pad_f32_##SFX, float, ATTR)                                               \
NDWS_DW_PAD(ndws_dw_pad_f64_##SFX, double, ATTR)

NDWS_DW_ROW(ndws_dw_row_f32_base, float, ndws_dw_vf32, )
NDWS_DW_ROW(ndws_dw_row_f64_base, double, ndws_dw_vf64, )
#if defined(NDWS_CONV_X86)
NDWS_DW_ROW(ndws_dw_row_f32_avx2, float, ndws_dw_vf32, NDWS_CONV_AVX2)
NDWS_DW_ROW(ndws_dw_row_f64_avx2, double, ndws_dw_vf64, NDWS_CONV_AVX2)
NDWS_DW_ROW(ndws_dw_row_f32_avx512, float, ndws_dw_vf32, NDWS_CONV_AVX512)
NDWS_DW_ROW(ndws_dw_row_f64_avx512, double, ndws_dw_vf64, NDWS_CONV_AVX512)
#endif
NDWS_DW_PLANES(base, )
#if defined(NDWS_CONV_X86)
NDWS_DW_PLANES(avx2, NDWS_CONV_AVX2)
NDWS_DW_PLANES(avx512, NDWS_CONV_AVX512)
#endif

/* out[kw] += sum_{r < R} sum_{i < n} g[r*gr + i] * x[r*xr + kw*dw + i] for kw < KW: the kernel
 * row's weight gradients from R output rows of one image (unit strides, every tap inside x),
 * NDWS_DW_BLOCK lanes per tap kept in registers over all the rows, summed lane by lane in a
 * fixed order at the end. KW <= 16. */
#if defined(NDWS_DW_VECTORS)
/* Taps in groups of K <= 4 that share each load of g: 2K accumulators (two per tap, for
 * alternating blocks: independent fma chains), a[K][2] with constant indices only, so that
 * GCC keeps them in registers (an array indexed at run time would live on the stack: every fma
 * a store-load round trip). K is a literal at every expansion. */
#define NDWS_DW_DOT_GROUP(T, V, VI, K)                                                        \
    {                                                                                         \
        V a[K][2], gv, xv;                                                                    \
        for (k = 0; k < K; k++)                                                               \
            a[k][0] = a[k][1] = (V){0};                                                       \
        for (r = 0; r < R; r++) {                                                             \
            const T* gp = g + r * gr;                                                         \
            const T* xp = x + r * xr + kw0 * dw;                                              \
            for (i = 0; i + 2 * NDWS_DW_BLOCK <= n; i += 2 * NDWS_DW_BLOCK) {                 \
                memcpy(&gv, gp + i, sizeof(V));                                               \
                for (k = 0; k < K; k++) {                                                     \
                    memcpy(&xv, xp + k * dw + i, sizeof(V));                                  \
                    a[k][0] += gv * xv;                                                       \
                }                                                                             \
                memcpy(&gv, gp + i + NDWS_DW_BLOCK, sizeof(V));                               \
                for (k = 0; k < K; k++) {                                                     \
                    memcpy(&xv, xp + k * dw + i + NDWS_DW_BLOCK, sizeof(V));                  \
                    a[k][1] += gv * xv;                                                       \
                }                                                                             \
            }                                                                                 \
            if (i + NDWS_DW_BLOCK <= n) {                                                     \
                memcpy(&gv, gp + i, sizeof(V));                                               \
                for (k = 0; k < K; k++) {                                                     \
                    memcpy(&xv, xp + k * dw + i, sizeof(V));                                  \
                    a[k][0] += gv * xv;                                                       \
                }                                                                             \
            }                                                                                 \
            if (rem) {                                                                        \
                /* the tail as the block ending at n, the lanes already counted cleared */    \
                /* (bitwise: a cleared NaN or inf adds nothing)                          */   \
                memcpy(&gv, gp + last, sizeof(V));                                            \
                gv = (V)((VI)gv & keep);                                                      \
                for (k = 0; k < K; k++) {                                                     \
                    memcpy(&xv, xp + k * dw + last, sizeof(V));                               \
                    xv = (V)((VI)xv & keep);                                                  \
                    a[k][1] += gv * xv;                                                       \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        for (k = 0; k < K; k++) {                                                             \
            a[k][0] += a[k][1];                                                               \
            memcpy(lanes, &a[k][0], sizeof(V));                                               \
            for (e = 0; e < NDWS_DW_BLOCK; e++)                                               \
                part[kw0 + k] += lanes[e];                                                    \
        }                                                                                     \
    }

#define NDWS_DW_DOT_BLOCKS(T, V, VI)                                                          \
    {                                                                                         \
        T lanes[NDWS_DW_BLOCK];                                                               \
        VI keep;                                                                              \
        ptrdiff_t r, k, last = n - NDWS_DW_BLOCK, rem = n % NDWS_DW_BLOCK;                   \
        int kw0;                                                                              \
        for (e = 0; e < NDWS_DW_BLOCK; e++)                                                   \
            keep[e] = e >= NDWS_DW_BLOCK - rem ? -1 : 0;                                      \
        for (kw0 = 0; kw0 < KW; kw0 += 4) {                                                   \
            switch (KW - kw0 >= 4 ? 4 : KW - kw0) {                                           \
            case 4: NDWS_DW_DOT_GROUP(T, V, VI, 4) break;                                     \
            case 3: NDWS_DW_DOT_GROUP(T, V, VI, 3) break;                                     \
            case 2: NDWS_DW_DOT_GROUP(T, V, VI, 2) break;                                     \
            default: NDWS_DW_DOT_GROUP(T, V, VI, 1) break;                                    \
            }                                                                                 \
        }                                                                                     \
        done = 1;                                                                             \
    }
#else
#define NDWS_DW_DOT_BLOCKS(T, V, VI)
#endif

#define NDWS_DW_DOTS(NAME, T, V, VI, ATTR)                                                    \
ATTR                                                                                          \
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

NDWS_DW_DOTS(ndws_dw_dots_f32_base, float, ndws_dw_vf32, ndws_dw_vi32, )
NDWS_DW_DOTS(ndws_dw_dots_f64_base, double, ndws_dw_vf64, ndws_dw_vi64, )
#if defined(NDWS_CONV_X86)
NDWS_DW_DOTS(ndws_dw_dots_f32_avx2, float, ndws_dw_vf32, ndws_dw_vi32, NDWS_CONV_AVX2)
NDWS_DW_DOTS(ndws_dw_dots_f64_avx2, double, ndws_dw_vf64, ndws_dw_vi64, NDWS_CONV_AVX2)
NDWS_DW_DOTS(ndws_dw_dots_f32_avx512, float, ndws_dw_vf32, ndws_dw_vi32, NDWS_CONV_AVX512)
NDWS_DW_DOTS(ndws_dw_dots_f64_avx512, double, ndws_dw_vf64, ndws_dw_vi64, NDWS_CONV_AVX512)
#endif

/* The variant in use: one pointer per loop, set by ndws_dw_use (module load, tests). */
static struct {
    const char* isa;
    void (*row_f32)(float*, const float*, ptrdiff_t, ptrdiff_t, const float*, int, int, float,
                    ptrdiff_t);
    void (*row_f64)(double*, const double*, ptrdiff_t, ptrdiff_t, const double*, int, int,
                    double, ptrdiff_t);
    void (*dots_f32)(const float*, ptrdiff_t, const float*, ptrdiff_t, ptrdiff_t, ptrdiff_t,
                     int, ptrdiff_t, double*);
    void (*dots_f64)(const double*, ptrdiff_t, const double*, ptrdiff_t, ptrdiff_t, ptrdiff_t,
                     int, ptrdiff_t, double*);
    void (*plane_f32)(float*, ptrdiff_t, const float*, ptrdiff_t, ptrdiff_t, ptrdiff_t,
                      const float*, int, int, float, ptrdiff_t, ptrdiff_t);
    void (*plane_f64)(double*, ptrdiff_t, const double*, ptrdiff_t, ptrdiff_t, ptrdiff_t,
                      const double*, int, int, double, ptrdiff_t, ptrdiff_t);
    void (*pad_f32)(const float*, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t,
                    ptrdiff_t, ptrdiff_t, ptrdiff_t, float*);
    void (*pad_f64)(const double*, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t,
                    ptrdiff_t, ptrdiff_t, ptrdiff_t, double*);
} ndws_dw = {"baseline", ndws_dw_row_f32_base, ndws_dw_row_f64_base, ndws_dw_dots_f32_base,
             ndws_dw_dots_f64_base, ndws_dw_plane_f32_base, ndws_dw_plane_f64_base,
             ndws_dw_pad_f32_base, ndws_dw_pad_f64_base};

#define NDWS_DW_SET(name, suffix) do {                                                     \
        ndws_dw.isa = name;                                                                 \
        ndws_dw.row_f32 = ndws_dw_row_f32_##suffix;                                         \
        ndws_dw.row_f64 = ndws_dw_row_f64_##suffix;                                         \
        ndws_dw.dots_f32 = ndws_dw_dots_f32_##suffix;                                       \
        ndws_dw.dots_f64 = ndws_dw_dots_f64_##suffix;                                       \
        ndws_dw.plane_f32 = ndws_dw_plane_f32_##suffix;                                     \
        ndws_dw.plane_f64 = ndws_dw_plane_f64_##suffix;                                     \
        ndws_dw.pad_f32 = ndws_dw_pad_f32_##suffix;                                         \
        ndws_dw.pad_f64 = ndws_dw_pad_f64_##suffix;                                         \
    } while (0)

/* Use the loops built for `isa` ("avx512", "avx2" or "baseline"): 1, or 0 (nothing changed)
 * when they were not built or this CPU (and OS) cannot run them. */
static int ndws_dw_use(const char* isa) {
    switch (ndws_conv_isa(isa)) {
    case 0:
        NDWS_DW_SET("baseline", base);
        return 1;
#if defined(NDWS_CONV_X86)
    case 1:
        NDWS_DW_SET("avx2", avx2);
        return 1;
    case 2:
        NDWS_DW_SET("avx512", avx512);
        return 1;
#endif
    default:
        return 0;
    }
}

static inline const char* ndws_dw_isa(void) { return ndws_dw.isa; }

static inline void ndws_dw_row_f32(float* y, const float* x, ptrdiff_t xs, ptrdiff_t dw,
                                   const float* w, int KH, int KW, float b, ptrdiff_t n)
{ ndws_dw.row_f32(y, x, xs, dw, w, KH, KW, b, n); }
static inline void ndws_dw_row_f64(double* y, const double* x, ptrdiff_t xs, ptrdiff_t dw,
                                   const double* w, int KH, int KW, double b, ptrdiff_t n)
{ ndws_dw.row_f64(y, x, xs, dw, w, KH, KW, b, n); }
static inline void ndws_dw_dots_f32(const float* g, ptrdiff_t gr, const float* x, ptrdiff_t xr,
                                    ptrdiff_t R, ptrdiff_t dw, int KW, ptrdiff_t n, double* out)
{ ndws_dw.dots_f32(g, gr, x, xr, R, dw, KW, n, out); }
static inline void ndws_dw_dots_f64(const double* g, ptrdiff_t gr, const double* x,
                                    ptrdiff_t xr, ptrdiff_t R, ptrdiff_t dw, int KW,
                                    ptrdiff_t n, double* out)
{ ndws_dw.dots_f64(g, gr, x, xr, R, dw, KW, n, out); }

#define NDWS_DW_PLANE_CALLS(T, S)                                                             \
static inline void ndws_dw_plane_##S(T* y, ptrdiff_t ys, const T* p, ptrdiff_t ps,             \
                                     ptrdiff_t xs, ptrdiff_t dw, const T* w, int KH, int KW,   \
                                     T b, ptrdiff_t rows, ptrdiff_t n)                         \
{ ndws_dw.plane_##S(y, ys, p, ps, xs, dw, w, KH, KW, b, rows, n); }                            \
static inline void ndws_dw_pad_##S(const T* src, ptrdiff_t s2, ptrdiff_t s3, ptrdiff_t H,      \
                                   ptrdiff_t W, ptrdiff_t top, ptrdiff_t left, ptrdiff_t Hp,   \
                                   ptrdiff_t Wp, T* buf)                                       \
{ ndws_dw.pad_##S(src, s2, s3, H, W, top, left, Hp, Wp, buf); }
NDWS_DW_PLANE_CALLS(float, f32)
NDWS_DW_PLANE_CALLS(double, f64)

#endif /* NDWS_DW_LOOPS_H */
