/* The transforms of ndws' Winograd F(2x2, 3x3) convolution (ndws/nn/_winograd.pyx), in C so
 * that GCC builds them once per instruction set (AVX-512, AVX2, the x86-64 baseline: target
 * attributes on the same source, as ndws/nn/_dw_loops.h) and ndws picks one when the module
 * loads (ndws_wino_use; the tests run every one this CPU supports through
 * ndws.nn._winograd._use_wino_isa). Written in Cython they compiled to scalar code (the rows
 * of several pointers may alias), and at batch 1 they were three quarters of the instructions
 * of a 64->64 convolution on 16x16.
 *
 * The transforms only add, subtract and halve, in the same order in every build and lane (no
 * multiply to fuse with an add), so every build gives the same bits.
 */
#ifndef NDWS_WINO_LOOPS_H
#define NDWS_WINO_LOOPS_H

#include <stddef.h>
#include <string.h>

#include "_conv_isa.h"

#define NDWS_WINO_VL 8              /* tiles per vector: a 16x16 image has 8 tiles a row */

#if defined(__GNUC__)
typedef float ndws_wino_vf32 __attribute__((vector_size(NDWS_WINO_VL * 4)));
typedef double ndws_wino_vf64 __attribute__((vector_size(NDWS_WINO_VL * 8)));
#define NDWS_WINO_VECTORS 1
#endif

/* One tile's input transform: v[xi*VS] := (B^T d B)[xi] of the 4x4 patch whose rows are r0..r3
 * and whose column k is at x + k/2 + (k%2)*Wh (rows split into even then odd columns), with
 * B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]; E is a scalar or a vector
 * of NDWS_WINO_VL tiles. */
#define NDWS_WINO_IN_TILE(E, LOAD, STORE)                                                     \
    do {                                                                                      \
        E d[4][4], z0, z1, z2, z3;                                                            \
        int k;                                                                                \
        for (k = 0; k < 4; k++) {                                                             \
            ptrdiff_t o = (k >> 1) + (k & 1) * Wh;                                            \
            LOAD(d[0][k], r0 + o);                                                            \
            LOAD(d[1][k], r1 + o);                                                            \
            LOAD(d[2][k], r2 + o);                                                            \
            LOAD(d[3][k], r3 + o);                                                            \
        }                                                                                     \
        for (k = 0; k < 4; k++) {                                                             \
            /* row k of B^T d, then its columns times B */                                    \
            E e[4];                                                                           \
            int c;                                                                            \
            for (c = 0; c < 4; c++) {                                                         \
                z0 = d[0][c]; z1 = d[1][c]; z2 = d[2][c]; z3 = d[3][c];                       \
                e[c] = k == 0 ? z0 - z2 : k == 1 ? z1 + z2 : k == 2 ? z2 - z1 : z1 - z3;      \
            }                                                                                 \
            STORE(v + (4 * k + 0) * VS, e[0] - e[2]);                                         \
            STORE(v + (4 * k + 1) * VS, e[1] + e[2]);                                         \
            STORE(v + (4 * k + 2) * VS, e[2] - e[1]);                                         \
            STORE(v + (4 * k + 3) * VS, e[1] - e[3]);                                         \
        }                                                                                     \
    } while (0)

#define NDWS_WINO_SLOAD(dst, p) ((dst) = *(p))
#define NDWS_WINO_SSTORE(p, val) (*(p) = (val))
#define NDWS_WINO_VLOAD(dst, p) memcpy(&(dst), (p), sizeof(dst))
#define NDWS_WINO_VSTORE(p, val)                                                              \
    do { __typeof__(val) t_ = (val); memcpy((p), &t_, sizeof(t_)); } while (0)

/* v[xi*VS + b] for the n tiles b of one row segment; r0..r3 point at its first tile's first
 * column. Blocks of NDWS_WINO_VL tiles, the last one overlapping the one before (its tiles are
 * computed again to the same values), one tile at a time below a block. */
#if defined(NDWS_WINO_VECTORS)
#define NDWS_WINO_INPUT(NAME, T, V, ATTR)                                                     \
ATTR                                                                                          \
static void NAME(const T* r0_, const T* r1_, const T* r2_, const T* r3_, ptrdiff_t Wh,        \
                 ptrdiff_t n, T* v_, ptrdiff_t VS) {                                          \
    ptrdiff_t b = 0;                                                                          \
    while (n >= NDWS_WINO_VL && b < n) {                                                      \
        const T *r0, *r1, *r2, *r3;                                                           \
        T* v;                                                                                 \
        if (b + NDWS_WINO_VL > n)                                                             \
            b = n - NDWS_WINO_VL;                                                             \
        r0 = r0_ + b; r1 = r1_ + b; r2 = r2_ + b; r3 = r3_ + b; v = v_ + b;                   \
        NDWS_WINO_IN_TILE(V, NDWS_WINO_VLOAD, NDWS_WINO_VSTORE);                              \
        b += NDWS_WINO_VL;                                                                    \
    }                                                                                         \
    for (; b < n; b++) {                                                                      \
        const T *r0 = r0_ + b, *r1 = r1_ + b, *r2 = r2_ + b, *r3 = r3_ + b;                   \
        T* v = v_ + b;                                                                        \
        NDWS_WINO_IN_TILE(T, NDWS_WINO_SLOAD, NDWS_WINO_SSTORE);                              \
    }                                                                                         \
}
#else
#define NDWS_WINO_INPUT(NAME, T, V, ATTR)                                                     \
static void NAME(const T* r0_, const T* r1_, const T* r2_, const T* r3_, ptrdiff_t Wh,        \
                 ptrdiff_t n, T* v_, ptrdiff_t VS) {                                          \
    ptrdiff_t b;                                                                              \
    for (b = 0; b < n; b++) {                                                                 \
        const T *r0 = r0_ + b, *r1 = r1_ + b, *r2 = r2_ + b, *r3 = r3_ + b;                   \
        T* v = v_ + b;                                                                        \
        NDWS_WINO_IN_TILE(T, NDWS_WINO_SLOAD, NDWS_WINO_SSTORE);                              \
    }                                                                                         \
}
#endif

/* One tile's output transform: o[i*ldo] := (A^T M A)[i] + bv, i < 4 (row-major 2x2), from
 * m[xi*S], A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]; the additions in one fixed order. */
#define NDWS_WINO_OUT_TILE(E, LOAD, STORE)                                                    \
    do {                                                                                      \
        E q[16], t0, t1, t2, t3, s0, s1, s2, s3;                                              \
        int k;                                                                                \
        for (k = 0; k < 16; k++)                                                              \
            LOAD(q[k], m + k * S);                                                            \
        t0 = q[0] + q[4] + q[8];                                                              \
        t1 = q[1] + q[5] + q[9];                                                              \
        t2 = q[2] + q[6] + q[10];                                                             \
        t3 = q[3] + q[7] + q[11];                                                             \
        s0 = q[4] - q[8] - q[12];                                                             \
        s1 = q[5] - q[9] - q[13];                                                             \
        s2 = q[6] - q[10] - q[14];                                                            \
        s3 = q[7] - q[11] - q[15];                                                            \
        STORE(o + 0 * ldo, t0 + t1 + t2 + bv);                                                \
        STORE(o + 1 * ldo, t1 - t2 - t3 + bv);                                                \
        STORE(o + 2 * ldo, s0 + s1 + s2 + bv);                                                \
        STORE(o + 3 * ldo, s1 - s2 - s3 + bv);                                                \
    } while (0)

/* o[i*ldo + b] for the n tiles b of one row segment, m_ at its first tile. */
#if defined(NDWS_WINO_VECTORS)
#define NDWS_WINO_OUTPUT(NAME, T, V, ATTR)                                                    \
ATTR                                                                                          \
static void NAME(const T* m_, ptrdiff_t S, ptrdiff_t n, T bv, T* o_, ptrdiff_t ldo) {         \
    ptrdiff_t b = 0;                                                                          \
    while (n >= NDWS_WINO_VL && b < n) {                                                      \
        const T* m;                                                                           \
        T* o;                                                                                 \
        if (b + NDWS_WINO_VL > n)                                                             \
            b = n - NDWS_WINO_VL;                                                             \
        m = m_ + b; o = o_ + b;                                                               \
        NDWS_WINO_OUT_TILE(V, NDWS_WINO_VLOAD, NDWS_WINO_VSTORE);                             \
        b += NDWS_WINO_VL;                                                                    \
    }                                                                                         \
    for (; b < n; b++) {                                                                      \
        const T* m = m_ + b;                                                                  \
        T* o = o_ + b;                                                                        \
        NDWS_WINO_OUT_TILE(T, NDWS_WINO_SLOAD, NDWS_WINO_SSTORE);                             \
    }                                                                                         \
}
#else
#define NDWS_WINO_OUTPUT(NAME, T, V, ATTR)                                                    \
static void NAME(const T* m_, ptrdiff_t S, ptrdiff_t n, T bv, T* o_, ptrdiff_t ldo) {         \
    ptrdiff_t b;                                                                              \
    for (b = 0; b < n; b++) {                                                                 \
        const T* m = m_ + b;                                                                  \
        T* o = o_ + b;                                                                        \
        NDWS_WINO_OUT_TILE(T, NDWS_WINO_SLOAD, NDWS_WINO_SSTORE);                             \
    }                                                                                         \
}
#endif

/* The weight transform of one panel of mr <= 16 output channels, nrows of them real (zeros
 * for the others), for input channels c < C: U[xi*us + c*mr + r] := (G k G^T)[xi] of the 3x3
 * kernel at w + r*ws0 + c*ws1 (taps (i, j) at i*ws2 + j*ws3), G = [[1, 0, 0], [1/2, 1/2,
 * 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]. The arithmetic runs across the panel's rows; a full
 * panel of 8 (the AVX2 and AVX-512 tiles) builds each tap's vector from 8 loads in registers,
 * other panels go through a 16-lane array. */
#define NDWS_WINO_U(E, K, STORE)                                                              \
    do {                                                                                      \
        E t_[4][3];                                                                           \
        int i_, j_;                                                                           \
        for (j_ = 0; j_ < 3; j_++) {                                                          \
            E a_ = K(0, j_), b_ = K(1, j_), c_ = K(2, j_);                                    \
            t_[0][j_] = a_;                                                                   \
            t_[1][j_] = (a_ + b_ + c_) * h;                                                   \
            t_[2][j_] = (a_ - b_ + c_) * h;                                                   \
            t_[3][j_] = c_;                                                                   \
        }                                                                                     \
        for (i_ = 0; i_ < 4; i_++) {                                                          \
            E a_ = t_[i_][0], b_ = t_[i_][1], c_ = t_[i_][2];                                 \
            STORE(4 * i_ + 0, a_);                                                            \
            STORE(4 * i_ + 1, (a_ + b_ + c_) * h);                                            \
            STORE(4 * i_ + 2, (a_ - b_ + c_) * h);                                            \
            STORE(4 * i_ + 3, c_);                                                            \
        }                                                                                     \
    } while (0)

#if defined(NDWS_WINO_VECTORS)
#define NDWS_WINO_W8(T, V)                                                                    \
    if (mr == NDWS_WINO_VL && nrows == NDWS_WINO_VL) {                                        \
        for (c = 0; c < C; c++) {                                                             \
            const T* wc = w + c * ws1;                                                        \
            T* Uc = U + c * mr;                                                               \
            V kv[9];                                                                          \
            for (i = 0; i < 3; i++)                                                           \
                for (j = 0; j < 3; j++) {                                                     \
                    const T* p = wc + i * ws2 + j * ws3;                                      \
                    kv[i * 3 + j] = (V){p[0], p[ws0], p[2 * ws0], p[3 * ws0], p[4 * ws0],     \
                                        p[5 * ws0], p[6 * ws0], p[7 * ws0]};                  \
                }                                                                             \
            NDWS_WINO_U(V, NDWS_WINO_KV, NDWS_WINO_USTORE_V);                                 \
        }                                                                                     \
        return;                                                                               \
    }
#else
#define NDWS_WINO_W8(T, V)
#endif
#define NDWS_WINO_KV(i, j) kv[(i) * 3 + (j)]
#define NDWS_WINO_USTORE_V(xi, val) do {                                                      \
        __typeof__(val) v_ = (val); memcpy(Uc + (xi) * us, &v_, sizeof(v_)); } while (0)
#define NDWS_WINO_KA(i, j) k[(i) * 3 + (j)][r]
#define NDWS_WINO_USTORE_A(xi, val) (Uc[(xi) * us + r] = (val))

#define NDWS_WINO_WEIGHTS(NAME, T, V, ATTR)                                                   \
ATTR                                                                                          \
static void NAME(const T* w, ptrdiff_t ws0, ptrdiff_t ws1, ptrdiff_t ws2, ptrdiff_t ws3,      \
                 ptrdiff_t C, int nrows, int mr, T* U, ptrdiff_t us) {                        \
    const T h = (T)0.5;                                                                       \
    ptrdiff_t c;                                                                              \
    int i, j, r;                                                                              \
    NDWS_WINO_W8(T, V)                                                                        \
    for (c = 0; c < C; c++) {                                                                 \
        const T* wc = w + c * ws1;                                                            \
        T* Uc = U + c * mr;                                                                   \
        T k[9][16];                                                                           \
        for (i = 0; i < 3; i++)                                                               \
            for (j = 0; j < 3; j++)                                                           \
                for (r = 0; r < mr; r++)                                                      \
                    k[i * 3 + j][r] = r < nrows ? wc[r * ws0 + i * ws2 + j * ws3] : (T)0;     \
        for (r = 0; r < mr; r++)                                                              \
            NDWS_WINO_U(T, NDWS_WINO_KA, NDWS_WINO_USTORE_A);                                 \
    }                                                                                         \
}

/* The copies around the transforms. A task's input rows, each split into its even then its odd
 * columns: dst[c*ps + i*2Wh + e] := x[c, row0 + i, col0 + 2e] and dst[... + Wh + e] := x[...,
 * col0 + 2e + 1] (0 outside the image; rows past `rows` up to Hmax zeroed); and a row of 2x2
 * output blocks put back together, y[2e] := a[e], y[2e + 1] := b[e]. Compiled per instruction
 * set they are vector permutes; in the baseline-built Cython module they were scalar stores
 * or 4-lane loads, a quarter of a 16->16 3x3 convolution's time. */
#define NDWS_WINO_COPIES(NAME, T, ATTR)                                                       \
ATTR NDWS_NO_LIBC_LOOPS                                                                       \
static void NAME##_rows(const T* xn, ptrdiff_t xs1, ptrdiff_t xs2, ptrdiff_t sw, ptrdiff_t C, \
                        ptrdiff_t H, ptrdiff_t W, ptrdiff_t row0, ptrdiff_t rows,             \
                        ptrdiff_t col0, ptrdiff_t Wh, ptrdiff_t ps, ptrdiff_t Hmax,           \
                        T* __restrict dst) {                                                  \
    ptrdiff_t c, i, e, par;                                                                   \
    for (c = 0; c < C; c++) {                                                                 \
        for (i = 0; i < Hmax; i++) {                                                          \
            T* __restrict d = dst + c * ps + i * 2 * Wh;                                      \
            ptrdiff_t ih = row0 + i;                                                          \
            const T* s;                                                                       \
            if (i >= rows || ih < 0 || ih >= H) {                                             \
                memset(d, 0, (size_t)(2 * Wh) * sizeof(T));                                   \
                continue;                                                                     \
            }                                                                                 \
            s = xn + c * xs1 + ih * xs2;                                                      \
            for (par = 0; par < 2; par++, d += Wh) {                                          \
                /* e with 0 <= col0 + 2e + par < W */                                         \
                ptrdiff_t iw = col0 + par, lo = iw >= 0 ? 0 : (-iw + 1) / 2, hi = 0;          \
                if (W > iw)                                                                   \
                    hi = (W - iw + 1) / 2 < Wh ? (W - iw + 1) / 2 : Wh;                       \
                if (hi < lo)                                                                  \
                    hi = lo;                                                                  \
                for (e = 0; e < lo; e++)                                                      \
                    d[e] = 0;                                                                 \
                if (sw == 1)                                                                  \
                    for (e = lo; e < hi; e++)                                                 \
                        d[e] = s[iw + 2 * e];                                                 \
                else                                                                          \
                    for (e = lo; e < hi; e++)                                                 \
                        d[e] = s[(iw + 2 * e) * sw];                                          \
                for (e = hi; e < Wh; e++)                                                     \
                    d[e] = 0;                                                                 \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
ATTR                                                                                          \
static void NAME##_scatter2(const T* __restrict a, const T* __restrict b, ptrdiff_t n,        \
                            T* __restrict y) {                                                \
    ptrdiff_t e;                                                                              \
    for (e = 0; e < n; e++) {                                                                 \
        y[2 * e] = a[e];                                                                      \
        y[2 * e + 1] = b[e];                                                                  \
    }                                                                                         \
}

#define NDWS_WINO_ALL(SUFFIX, ATTR)                                                           \
NDWS_WINO_COPIES(ndws_wino_f32_##SUFFIX, float, ATTR)                                        \
NDWS_WINO_COPIES(ndws_wino_f64_##SUFFIX, double, ATTR)                                       \
NDWS_WINO_INPUT(ndws_wino_input_f32_##SUFFIX, float, ndws_wino_vf32, ATTR)                    \
NDWS_WINO_INPUT(ndws_wino_input_f64_##SUFFIX, double, ndws_wino_vf64, ATTR)                   \
NDWS_WINO_OUTPUT(ndws_wino_output_f32_##SUFFIX, float, ndws_wino_vf32, ATTR)                  \
NDWS_WINO_OUTPUT(ndws_wino_output_f64_##SUFFIX, double, ndws_wino_vf64, ATTR)                 \
NDWS_WINO_WEIGHTS(ndws_wino_weights_f32_##SUFFIX, float, ndws_wino_vf32, ATTR)                \
NDWS_WINO_WEIGHTS(ndws_wino_weights_f64_##SUFFIX, double, ndws_wino_vf64, ATTR)

NDWS_WINO_ALL(base, )
#if defined(NDWS_CONV_X86)
NDWS_WINO_ALL(avx2, NDWS_CONV_AVX2)
NDWS_WINO_ALL(avx512, NDWS_CONV_AVX512)
#endif

/* The variant in use, set by ndws_wino_use (module load, tests). */
static struct {
    const char* isa;
    void (*input_f32)(const float*, const float*, const float*, const float*, ptrdiff_t,
                      ptrdiff_t, float*, ptrdiff_t);
    void (*input_f64)(const double*, const double*, const double*, const double*, ptrdiff_t,
                      ptrdiff_t, double*, ptrdiff_t);
    void (*output_f32)(const float*, ptrdiff_t, ptrdiff_t, float, float*, ptrdiff_t);
    void (*output_f64)(const double*, ptrdiff_t, ptrdiff_t, double, double*, ptrdiff_t);
    void (*weights_f32)(const float*, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t,
                        int, int, float*, ptrdiff_t);
    void (*weights_f64)(const double*, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t,
                        int, int, double*, ptrdiff_t);
    void (*rows_f32)(const float*, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t,
                     ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t,
                     float*);
    void (*rows_f64)(const double*, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t,
                     ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t, ptrdiff_t,
                     double*);
    void (*scatter2_f32)(const float*, const float*, ptrdiff_t, float*);
    void (*scatter2_f64)(const double*, const double*, ptrdiff_t, double*);
} ndws_wino = {"baseline", ndws_wino_input_f32_base, ndws_wino_input_f64_base,
               ndws_wino_output_f32_base, ndws_wino_output_f64_base,
               ndws_wino_weights_f32_base, ndws_wino_weights_f64_base,
               ndws_wino_f32_base_rows, ndws_wino_f64_base_rows,
               ndws_wino_f32_base_scatter2, ndws_wino_f64_base_scatter2};

#define NDWS_WINO_SET(name, suffix) do {                                                   \
        ndws_wino.isa = name;                                                               \
        ndws_wino.input_f32 = ndws_wino_input_f32_##suffix;                                 \
        ndws_wino.input_f64 = ndws_wino_input_f64_##suffix;                                 \
        ndws_wino.output_f32 = ndws_wino_output_f32_##suffix;                               \
        ndws_wino.output_f64 = ndws_wino_output_f64_##suffix;                               \
        ndws_wino.weights_f32 = ndws_wino_weights_f32_##suffix;                             \
        ndws_wino.weights_f64 = ndws_wino_weights_f64_##suffix;                             \
        ndws_wino.rows_f32 = ndws_wino_f32_##suffix##_rows;                                 \
        ndws_wino.rows_f64 = ndws_wino_f64_##suffix##_rows;                                 \
        ndws_wino.scatter2_f32 = ndws_wino_f32_##suffix##_scatter2;                         \
        ndws_wino.scatter2_f64 = ndws_wino_f64_##suffix##_scatter2;                         \
    } while (0)

/* Use the loops built for `isa` ("avx512", "avx2" or "baseline"): 1, or 0 (nothing changed)
 * when they were not built or this CPU (and OS) cannot run them. */
static int ndws_wino_use(const char* isa) {
    switch (ndws_conv_isa(isa)) {
    case 0:
        NDWS_WINO_SET("baseline", base);
        return 1;
#if defined(NDWS_CONV_X86)
    case 1:
        NDWS_WINO_SET("avx2", avx2);
        return 1;
    case 2:
        NDWS_WINO_SET("avx512", avx512);
        return 1;
#endif
    default:
        return 0;
    }
}

static inline const char* ndws_wino_isa(void) { return ndws_wino.isa; }

#define NDWS_WINO_CALLS(T, S)                                                                 \
static inline void ndws_wino_input_##S(const T* r0, const T* r1, const T* r2, const T* r3,    \
                                       ptrdiff_t Wh, ptrdiff_t n, T* v, ptrdiff_t VS)         \
{ ndws_wino.input_##S(r0, r1, r2, r3, Wh, n, v, VS); }                                        \
static inline void ndws_wino_output_##S(const T* m, ptrdiff_t st, ptrdiff_t n, T bv, T* o,    \
                                        ptrdiff_t ldo)                                        \
{ ndws_wino.output_##S(m, st, n, bv, o, ldo); }                                               \
static inline void ndws_wino_weights_##S(const T* w, ptrdiff_t ws0, ptrdiff_t ws1,            \
                                         ptrdiff_t ws2, ptrdiff_t ws3, ptrdiff_t C,           \
                                         int nrows, int mr, T* U, ptrdiff_t us)               \
{ ndws_wino.weights_##S(w, ws0, ws1, ws2, ws3, C, nrows, mr, U, us); }                      \
static inline void ndws_wino_rows_##S(const T* xn, ptrdiff_t xs1, ptrdiff_t xs2, ptrdiff_t sw,  \
                                      ptrdiff_t C, ptrdiff_t H, ptrdiff_t W, ptrdiff_t row0,   \
                                      ptrdiff_t rows, ptrdiff_t col0, ptrdiff_t Wh,            \
                                      ptrdiff_t ps, ptrdiff_t Hmax, T* dst)                    \
{ ndws_wino.rows_##S(xn, xs1, xs2, sw, C, H, W, row0, rows, col0, Wh, ps, Hmax, dst); }        \
static inline void ndws_wino_scatter2_##S(const T* a, const T* b, ptrdiff_t n, T* y)           \
{ ndws_wino.scatter2_##S(a, b, n, y); }

NDWS_WINO_CALLS(float, f32)
NDWS_WINO_CALLS(double, f64)

#endif /* NDWS_WINO_LOOPS_H */
