/* The activations' loops over contiguous arrays (sigmoid, tanh, relu, leaky relu, and the
 * element functions below: hardtanh, swish, ELU, SELU, softsign, rectified and rational tanh,
 * GELU's tanh form, float32 GELU), a softmax row's exponentials and the softmax cross-entropy
 * gradient, in C so that the compiler builds them once per instruction set and picks one at
 * load time (GCC's target_clones: AVX-512, AVX2 or the x86-64 baseline), over ndws'
 * branch-free exp, expm1, tanh, sigmoid and erfc (ndws/_vmath.h). ndws/nn/_activations.pyx
 * (through its tables by activation code) and _losses.pyx run them; that module's own loops
 * are built for the baseline and, with a branch per element, gcc did not vectorise them: tanh
 * over 1M float32 took 34 ms with glibc's tanhf, 22 ms with the branch-free scalar, and runs
 * at about 1 ms here (AVX-512).
 *
 * Every clone computes each element with the same separately rounded operations as the scalar
 * code of _activations.pyx (fp-contract=off: no fused multiply-add), so contiguous and strided
 * arrays, and every instruction set, give the same bits.
 */
#ifndef NDWS_ACT_LOOPS_H
#define NDWS_ACT_LOOPS_H

#include <stddef.h>
#include <string.h>     /* defines __GLIBC__ where there is one (target_clones needs its ifunc) */
#include "_vmath.h"

/* The activations' constants (C macros, so they stay double literals exactly as written; the
   kernels cast them to the element type where the formulas do). GELU_BIG: |x| beyond which
   GELU is exactly x (x > 0) or 0 (x < 0) in both precisions: the formulas would give inf*0 =
   NaN at +-inf, so large inputs take the limit directly. SELU's constants are libnd4j's
   (ops.h, Klambauer et al.'s values); RationalTanh's are DL4J's (ActivationRationalTanh: 1.7159
   tanh(2x/3) approximated with 1.41645), written as decimals: libnd4j writes them as float
   literals (1.7159f), so its float64 kernel uses their float32 roundings (differences of a few
   1e-8, docs/porting-from-dl4j.md). */
#define NDWS_SQRT1_2 0.70710678118654752440
#define NDWS_INV_SQRT_2PI 0.39894228040143267794
#define NDWS_SQRT_2_PI 0.79788456080286535588
#define NDWS_GELU_C 0.044715
#define NDWS_GELU_BIG 1.0e4
#define NDWS_SELU_ALPHA 1.6732632423543772848170429916717
#define NDWS_SELU_LAMBDA 1.0507009873554804934193349852946
#define NDWS_RTANH_A 1.7159
#define NDWS_RTANH_C 1.41645
#define NDWS_TWO_THIRDS 0.66666666666666666667

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define NDWS_ISA_CLONES \
    __attribute__((target_clones("avx512f", "avx2", "default"), optimize("fp-contract=off")))
#else
#define NDWS_ISA_CLONES
#endif

/* Y[i] := f(X[i]) and D[i] := G[i] * f'(X[i]) for i in [0, n); Y may be X, D may be X or G. */
#define NDWS_ACT_LOOPS(SFX, T, SIGMOID, TANH)                                                 \
NDWS_ISA_CLONES                                                                               \
static void ndws_sigmoid_##SFX(const T* X, T* Y, ptrdiff_t n) {                               \
    for (ptrdiff_t i = 0; i < n; i++) Y[i] = SIGMOID(X[i]);                                   \
}                                                                                             \
NDWS_ISA_CLONES                                                                               \
static void ndws_tanh_##SFX(const T* X, T* Y, ptrdiff_t n) {                                  \
    for (ptrdiff_t i = 0; i < n; i++) Y[i] = TANH(X[i]);                                      \
}                                                                                             \
NDWS_ISA_CLONES                                                                               \
static void ndws_sigmoid_bwd_##SFX(const T* X, const T* G, T* D, ptrdiff_t n) {               \
    for (ptrdiff_t i = 0; i < n; i++) {                                                       \
        T s = SIGMOID(X[i]);                                                                  \
        D[i] = G[i] * (T)(s * (1.0 - s));  /* 1.0: in double, as Cython computes _dact */  \
    }                                                                                         \
}                                                                                             \
NDWS_ISA_CLONES                                                                               \
static void ndws_tanh_bwd_##SFX(const T* X, const T* G, T* D, ptrdiff_t n) {                  \
    for (ptrdiff_t i = 0; i < n; i++) {                                                       \
        T t = TANH(X[i]);                                                                     \
        D[i] = G[i] * (T)(1.0 - t * t);                                                       \
    }                                                                                         \
}

/* relu and leaky relu (a: its slope), the expressions of _activations.pyx's _act and _dact,
   at every instruction set's width: that module is built for the x86-64 baseline, where relu's
   loop runs 4 lanes (forward 0.145 against 0.10 ms for 1M float32) and gcc leaves leaky relu's
   forward select a branch (5.0 against 0.10 ms). */
#define NDWS_RELU_LOOPS(SFX, T)                                                               \
NDWS_ISA_CLONES                                                                               \
static void ndws_relu_##SFX(const T* X, T* Y, ptrdiff_t n) {                                  \
    for (ptrdiff_t i = 0; i < n; i++) {                                                       \
        T v = X[i];                                                                           \
        Y[i] = v < 0 ? (T)0 : v;                  /* NaN passes through */                    \
    }                                                                                         \
}                                                                                             \
NDWS_ISA_CLONES                                                                               \
static void ndws_relu_bwd_##SFX(const T* X, const T* G, T* D, ptrdiff_t n) {                  \
    for (ptrdiff_t i = 0; i < n; i++) {                                                       \
        T v = X[i];                                                                           \
        T d = (T)(v > 0);                                                                     \
        if (v != v) d = v;                                                                    \
        D[i] = G[i] * d;                                                                      \
    }                                                                                         \
}                                                                                             \
NDWS_ISA_CLONES                                                                               \
static void ndws_leaky_relu_##SFX(T a, const T* X, T* Y, ptrdiff_t n) {                       \
    for (ptrdiff_t i = 0; i < n; i++) {                                                       \
        T v = X[i];                                                                           \
        Y[i] = v > 0 ? v : a * v;                                                             \
    }                                                                                         \
}                                                                                             \
NDWS_ISA_CLONES                                                                               \
static void ndws_leaky_relu_bwd_##SFX(T a, const T* X, const T* G, T* D, ptrdiff_t n) {       \
    for (ptrdiff_t i = 0; i < n; i++) {                                                       \
        T v = X[i];                                                                           \
        T d = a;                                                                              \
        if (v > 0) d = 1;                                                                     \
        if (v != v) d = v;                                                                    \
        D[i] = G[i] * d;                                                                      \
    }                                                                                         \
}

/* A softmax row's exponentials, E[i] := exp(X[i] - shift) (E may be X), and the softmax
   cross-entropy gradient D[i] := coef * (qsum * exp(X[i] - lse) - Q[i]) (Q == NULL: an index
   label's row, without the subtraction; the caller writes the label's element), the
   expressions of ndws/nn/_math.pxd's _shifted_exps and _losses.pyx's _sce_row with their
   roundings (lse, coef and qsum are doubles there). Those modules are built for the x86-64
   baseline, where these loops ran 4 lanes wide (2 in the gradient's double part): a 1600 x 77
   softmax cross-entropy with its gradient took 1.19 ms. */
#define NDWS_SOFTMAX_LOOPS(SFX, T, EXP)                                                       \
NDWS_ISA_CLONES                                                                               \
static void ndws_shifted_exps_##SFX(const T* X, T shift, T* E, ptrdiff_t n) {                 \
    for (ptrdiff_t i = 0; i < n; i++) E[i] = EXP((T)(X[i] - shift));                          \
}                                                                                             \
NDWS_ISA_CLONES                                                                               \
static void ndws_sce_grad_##SFX(const T* X, const T* Q, double lse, double coef, double qsum, \
                                T* D, ptrdiff_t n) {                                          \
    if (Q == NULL)                                                                            \
        for (ptrdiff_t i = 0; i < n; i++)                                                     \
            D[i] = (T)(coef * (qsum * (double)EXP((T)((double)X[i] - lse))));                 \
    else                                                                                      \
        for (ptrdiff_t i = 0; i < n; i++)                                                     \
            D[i] = (T)(coef * (qsum * (double)EXP((T)((double)X[i] - lse)) - (double)Q[i]));  \
}

/* Activations built of ndws' exp / tanh / sigmoid with a special case (an infinity, a sign):
   one element function each, which ndws/nn/_activations.pyx's scalar path (strided arrays)
   calls too, so both paths give the same bits by construction. Written without branches
   (selects on bits, the special lanes computed on a harmless 0), so these loops vectorise; the
   module's own loops, built for the x86-64 baseline with a branch per element, ran swish at
   8.4 ms per 1M float32 (its derivative 19 ms), 5.9x NumPy's. `a` is the activation's
   parameter (ELU's alpha), unused by the others; the d-functions give f'(v), which the loops
   multiply into the incoming gradient as g * f'(v). */
#define NDWS_ELEM_FUNCS(SFX, T, UT, BITS, FROM, SEL, SIGNBIT, ABS, INF, EXP, EXPM1, TANH,      \
                        SIGMOID)                                                              \
/* ELU and SELU: the identity (scaled) above 0, expm1 below (exact near 0) */                 \
NDWS_VINLINE T ndws_elu_##SFX(T a, T v) {                                                     \
    T down = a * EXPM1(v);                                                                    \
    return FROM(SEL(v > 0, BITS(v), BITS(down)));                                             \
}                                                                                             \
NDWS_VINLINE T ndws_selu_##SFX(T a, T v) {                                                    \
    T up = (T)NDWS_SELU_LAMBDA * v;                                                           \
    T down = (T)(NDWS_SELU_LAMBDA * NDWS_SELU_ALPHA) * EXPM1(v);                              \
    (void)a;                                                                                  \
    return FROM(SEL(v > 0, BITS(up), BITS(down)));                                            \
}                                                                                             \
/* DL4J's hardtanh: clip(v, -1, 1), NaN passing through (the baseline loop's nested selects    \
   ran at half relu's speed) */                                                               \
NDWS_VINLINE T ndws_hardtanh_##SFX(T a, T v) {                                                \
    T one = 1, mone = -1;                                                                     \
    (void)a;                                                                                  \
    return FROM(SEL(v < -1, BITS(mone), SEL(v > 1, BITS(one), BITS(v))));                     \
}                                                                                             \
/* swish: v * sigmoid(v); +-inf: their limits v and 0 (inf * sigmoid(-inf) would be NaN) */   \
NDWS_VINLINE T ndws_swish_##SFX(T a, T v) {                                                   \
    UT u = BITS(v);                                                                           \
    int inf = (u & ABS) == INF;                                                               \
    T w = FROM(SEL(inf, 0, u));                                                               \
    T r = w * SIGMOID(w);                                                                     \
    (void)a;                                                                                  \
    return FROM(SEL(inf, SEL((u & SIGNBIT) != 0, 0, u), BITS(r)));                            \
}                                                                                             \
/* s + x s (1 - s) with s and 1 - s = t s from one t = exp(-|x|) (no cancellation), the form \
   of the sign: v >= 0 (NaN takes the other); +-inf: 1 and 0 */                               \
NDWS_VINLINE T ndws_dswish_##SFX(T a, T v) {                                                  \
    UT u = BITS(v);                                                                           \
    int inf = (u & ABS) == INF;                                                               \
    T w = FROM(SEL(inf, 0, u));                                                               \
    T t = EXP(-FROM(BITS(w) & ABS));                                                          \
    T s = 1 / (1 + t);                                                                        \
    T ts = t * s;                                                                             \
    T dp = s + w * s * ts;                                                                    \
    T dn = ts + w * ts * s;                                                                   \
    T one = 1, zero = 0;                                                                      \
    (void)a;                                                                                  \
    return FROM(SEL(inf, SEL((u & SIGNBIT) != 0, BITS(zero), BITS(one)),                      \
                    SEL(w >= 0, BITS(dp), BITS(dn))));                                        \
}                                                                                             \
/* rectified tanh: max(0, tanh(v)), NaN passing through */                                   \
NDWS_VINLINE T ndws_rectified_tanh_##SFX(T a, T v) {                                          \
    T t = TANH(v);                                                                            \
    (void)a;                                                                                  \
    return FROM(SEL(t < 0, 0, BITS(t)));                                                      \
}                                                                                             \
NDWS_VINLINE T ndws_drectified_tanh_##SFX(T a, T v) {                                         \
    T t = TANH(v);                                                                            \
    T d = 1 - t * t;                                                                          \
    (void)a;                                                                                  \
    return FROM(SEL(v != v, BITS(v), SEL(v > 0, BITS(d), 0)));                                \
}                                                                                             \
/* SELU's and ELU's derivatives: the constant slope above 0, the exponential's below */       \
NDWS_VINLINE T ndws_dselu_##SFX(T a, T v) {                                                   \
    T up = (T)NDWS_SELU_LAMBDA;                                                               \
    T down = (T)(NDWS_SELU_LAMBDA * NDWS_SELU_ALPHA) * EXP(v);                                \
    (void)a;                                                                                  \
    return FROM(SEL(v > 0, BITS(up), BITS(down)));                                            \
}                                                                                             \
NDWS_VINLINE T ndws_delu_##SFX(T a, T v) {                                                    \
    T up = 1;                                                                                 \
    T down = a * EXP(v);                                                                      \
    return FROM(SEL(v > 0, BITS(up), BITS(down)));                                            \
}                                                                                             \
/* softsign: v / (1 + |v|); beyond +-1e30 the quotient is already +-1 in both precisions, and \
   the selects make it so at +-inf (inf / inf would be NaN) */                                \
NDWS_VINLINE T ndws_softsign_##SFX(T a, T v) {                                                \
    T t = v / (1 + FROM(BITS(v) & ABS));                                                      \
    T one = 1, mone = -1;                                                                     \
    (void)a;                                                                                  \
    t = FROM(SEL(v > (T)1e30, BITS(one), BITS(t)));                                           \
    return FROM(SEL(v < (T)-1e30, BITS(mone), BITS(t)));                                      \
}                                                                                             \
/* d/dx of DL4J's rational tanh: 1.7159 * 2/3 * (1 + 2u + 4c u^3) / a^2, u = |2x/3| (libnd4j's  \
   formula), as (n / a) / a: a overflowing to inf then gives 0, not inf/inf. u is capped where \
   a is already inf and n still finite (1e12 in float32, 1e100 in float64), so the derivative  \
   goes to 0 where libnd4j's gives NaN (|x| > 6e12 in float32); NaN passes the cap */          \
NDWS_VINLINE T ndws_drational_tanh_##SFX(T a, T v) {                                           \
    T u = FROM(BITS((T)NDWS_TWO_THIRDS * v) & ABS);                                           \
    T big = (T)(sizeof(T) == 4 ? 1e12 : 1e100);                                               \
    T den, num;                                                                               \
    (void)a;                                                                                  \
    u = FROM(SEL(u > big, BITS(big), BITS(u)));                                               \
    den = 1 + u + u * u + (T)NDWS_RTANH_C * (u * u) * (u * u);                                \
    num = 1 + 2 * u + (T)(4 * NDWS_RTANH_C) * u * u * u;                                      \
    return (T)(NDWS_RTANH_A * NDWS_TWO_THIRDS) * (num / den) / den;                           \
}                                                                                             \
/* GELU, tanh approximation: 0.5 v (1 + tanh(sqrt(2/pi) (v + c v^3))); beyond GELU_BIG (and at \
   +-inf, where the formula gives inf * 0) exactly v or 0 */                                  \
NDWS_VINLINE T ndws_gelu_tanh_##SFX(T a, T v) {                                               \
    UT u = BITS(v);                                                                           \
    int big = FROM(u & ABS) > NDWS_GELU_BIG;                                                  \
    T w = FROM(SEL(big, 0, u));                                                               \
    T t = TANH((T)NDWS_SQRT_2_PI * (w + (T)NDWS_GELU_C * w * w * w));                         \
    T r = (T)0.5 * w * (1 + t);                                                               \
    (void)a;                                                                                  \
    return FROM(SEL(big, SEL(v > 0, u, 0), BITS(r)));                                         \
}                                                                                             \
NDWS_VINLINE T ndws_dgelu_tanh_##SFX(T a, T v) {                                              \
    UT u = BITS(v);                                                                           \
    int big = FROM(u & ABS) > NDWS_GELU_BIG;                                                  \
    T w = FROM(SEL(big, 0, u));                                                               \
    T t = TANH((T)NDWS_SQRT_2_PI * (w + (T)NDWS_GELU_C * w * w * w));                         \
    T d = (T)0.5 * (1 + t) + (T)0.5 * w * (1 - t * t) * (T)NDWS_SQRT_2_PI                     \
          * (1 + (T)(3 * NDWS_GELU_C) * w * w);                                               \
    T one = 1, zero = 0;                                                                      \
    (void)a;                                                                                  \
    return FROM(SEL(big, SEL(v > 0, BITS(one), BITS(zero)), BITS(d)));                        \
}

/* Y := f(X) and D := G * f'(X) over n contiguous elements, one loop pair per element function */
#define NDWS_ELEM_LOOPS(NAME, SFX, T)                                                         \
NDWS_ISA_CLONES                                                                               \
static void ndws_##NAME##_loop_##SFX(T a, const T* X, T* Y, ptrdiff_t n) {                    \
    for (ptrdiff_t i = 0; i < n; i++) Y[i] = ndws_##NAME##_##SFX(a, X[i]);                    \
}
#define NDWS_DELEM_LOOPS(NAME, SFX, T)                                                        \
NDWS_ISA_CLONES                                                                               \
static void ndws_d##NAME##_loop_##SFX(T a, const T* X, const T* G, T* D, ptrdiff_t n) {       \
    for (ptrdiff_t i = 0; i < n; i++) D[i] = G[i] * ndws_d##NAME##_##SFX(a, X[i]);            \
}
#define NDWS_ELEM_ALL(SFX, T)                                                                 \
NDWS_ELEM_LOOPS(swish, SFX, T) NDWS_DELEM_LOOPS(swish, SFX, T)                                \
NDWS_ELEM_LOOPS(rectified_tanh, SFX, T) NDWS_DELEM_LOOPS(rectified_tanh, SFX, T)              \
NDWS_ELEM_LOOPS(selu, SFX, T) NDWS_DELEM_LOOPS(selu, SFX, T)                                  \
NDWS_ELEM_LOOPS(elu, SFX, T) NDWS_DELEM_LOOPS(elu, SFX, T)                                    \
NDWS_ELEM_LOOPS(softsign, SFX, T) NDWS_DELEM_LOOPS(rational_tanh, SFX, T)                     \
NDWS_ELEM_LOOPS(hardtanh, SFX, T)                                                             \
NDWS_ELEM_LOOPS(gelu_tanh, SFX, T) NDWS_DELEM_LOOPS(gelu_tanh, SFX, T)

NDWS_ELEM_FUNCS(f32, float, uint32_t, ndws_f32_bits, ndws_f32_from_bits, ndws_sel, 0x80000000u,
                0x7fffffffu, 0x7f800000u, ndws_expf1, ndws_expm1f1, ndws_tanhf1, ndws_sigmoidf1)
NDWS_ELEM_FUNCS(f64, double, uint64_t, ndws_f64_bits, ndws_f64_from_bits, ndws_sel64,
                0x8000000000000000ull, 0x7fffffffffffffffull, 0x7ff0000000000000ull, ndws_exp1,
                ndws_expm1d1, ndws_tanh1, ndws_sigmoid1)
NDWS_ELEM_ALL(f32, float)
NDWS_ELEM_ALL(f64, double)

/* GELU (the erf form) in float32: v Phi(v) = 0.5 v erfc(-v/sqrt(2)) (no cancellation for
   negative v) with ndws' erfc; its derivative Phi(v) + v phi(v). Beyond GELU_BIG (and at +-inf,
   where v * 0 would be NaN) exactly v or 0, and 1 or 0. float64 keeps glibc's erfc, a call per
   element (_activations.pyx), as it keeps glibc's log1p. */
NDWS_VINLINE float ndws_gelu_f32(float a, float v) {
    uint32_t u = ndws_f32_bits(v);
    int big = ndws_f32_from_bits(u & 0x7fffffffu) > NDWS_GELU_BIG;
    float w = ndws_f32_from_bits(ndws_sel(big, 0, u));
    float r = w * 0.5f * ndws_erfcf1(-w * (float)NDWS_SQRT1_2);
    (void)a;
    return ndws_f32_from_bits(ndws_sel(big, ndws_sel(v > 0, u, 0), ndws_f32_bits(r)));
}
NDWS_VINLINE float ndws_dgelu_f32(float a, float v) {
    uint32_t u = ndws_f32_bits(v);
    int big = ndws_f32_from_bits(u & 0x7fffffffu) > NDWS_GELU_BIG;
    float w = ndws_f32_from_bits(ndws_sel(big, 0, u));
    float d = 0.5f * ndws_erfcf1(-w * (float)NDWS_SQRT1_2)
              + w * (float)NDWS_INV_SQRT_2PI * ndws_expf1(-0.5f * w * w);
    (void)a;
    return ndws_f32_from_bits(ndws_sel(big, ndws_sel(v > 0, 0x3f800000u, 0), ndws_f32_bits(d)));
}
NDWS_ELEM_LOOPS(gelu, f32, float) NDWS_DELEM_LOOPS(gelu, f32, float)

NDWS_SOFTMAX_LOOPS(f32, float, ndws_expf1)
NDWS_SOFTMAX_LOOPS(f64, double, ndws_exp1)
NDWS_ACT_LOOPS(f32, float, ndws_sigmoidf1, ndws_tanhf1)
NDWS_RELU_LOOPS(f32, float)
NDWS_RELU_LOOPS(f64, double)
NDWS_ACT_LOOPS(f64, double, ndws_sigmoid1, ndws_tanh1)

#endif /* NDWS_ACT_LOOPS_H */
