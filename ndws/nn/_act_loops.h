/* The loops of the activations recurrent gates use (sigmoid and tanh, forward and backward), in
 * C so that the compiler builds them once per instruction set and picks one at load time (GCC's
 * target_clones: AVX-512, AVX2 or the x86-64 baseline), over ndws' branch-free exp and tanh
 * (ndws/_vmath.h). ndws/nn/_activations.pyx runs its contiguous sigmoid and tanh loops here;
 * inside its generic per-activation loops gcc neither inlines the element function nor
 * vectorises the loop: tanh over 1M float32 took 34 ms with glibc's tanhf, 22 ms with the
 * branch-free scalar, and runs at about 1 ms here (AVX-512).
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

NDWS_SOFTMAX_LOOPS(f32, float, ndws_expf1)
NDWS_SOFTMAX_LOOPS(f64, double, ndws_exp1)
NDWS_ACT_LOOPS(f32, float, ndws_sigmoidf1, ndws_tanhf1)
NDWS_RELU_LOOPS(f32, float)
NDWS_RELU_LOOPS(f64, double)
NDWS_ACT_LOOPS(f64, double, ndws_sigmoid1, ndws_tanh1)

#endif /* NDWS_ACT_LOOPS_H */
