/* The loops of ndws' fused updaters (ndws/nn/_updaters.pyx), in C so that the compiler can
 * build them once per instruction set and pick one at load time (GCC's target_clones: AVX-512,
 * AVX2 or the x86-64 baseline). An update streams the whole flat parameter buffer, its gradient
 * and its state once per iteration: with 16-float vectors instead of the baseline's 4 it runs at
 * the memory's speed rather than the instruction rate's (plain SGD over 269k parameters: about
 * half the time).
 *
 * Every clone computes each element with the same IEEE operations in the same order as the
 * scalar code, so every instruction set gives the same bits: multiplications and additions stay
 * separate (fp-contract=off; the AVX-512 and AVX2 clones could otherwise fuse them into FMAs,
 * which round once), and sqrt and division are correctly rounded everywhere. The coefficients
 * are in the element type, as torch computes them for a float32 parameter; the moving averages'
 * (1 - beta) terms are computed in double and rounded when stored, as this kernel always has.
 */
#ifndef NDWS_UPD_LOOPS_H
#define NDWS_UPD_LOOPS_H

#include <math.h>
#include <stddef.h>
#include <string.h>     /* defines __GLIBC__ where there is one (target_clones needs its ifunc) */

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define NDWS_UPD_CLONES \
    __attribute__((target_clones("avx512f", "avx2", "default"), optimize("fp-contract=off")))
#else
#define NDWS_UPD_CLONES
#endif

#if defined(_MSC_VER)
#define NDWS_RESTRICT __restrict
#else
#define NDWS_RESTRICT restrict
#endif

enum { NDWS_UPD_SGD = 0, NDWS_UPD_MOMENTUM = 1, NDWS_UPD_ADAM = 2, NDWS_UPD_RMSPROP = 3,
       NDWS_UPD_ADAGRAD = 4 };

/* One update's kind and coefficients: lr the learning rate, mu the momentum or RMSProp's decay,
 * b1/b2/eps/wd Adam's (wd: AdamW's decoupled weight decay), step_size and bc2_sqrt Adam's bias
 * corrections for the update's step number. */
typedef struct {
    int kind;
    int nesterov;
    double lr, mu, b1, b2, eps, wd, step_size, bc2_sqrt;
} ndws_hyper;

/* P[i], S[i], V[i] := the update of element i from G[i], for i in [0, n); S and V are the
 * kind's state arrays (NULL when it has none). No argument aliases another. */
#define NDWS_UPD_LOOP(NAME, T, SQRT)                                                          \
NDWS_UPD_CLONES                                                                               \
static void NAME(const ndws_hyper* h, T* NDWS_RESTRICT P, const T* NDWS_RESTRICT G,          \
                 T* NDWS_RESTRICT S, T* NDWS_RESTRICT V, ptrdiff_t n) {                       \
    const T lr = (T)h->lr, mu = (T)h->mu, b1 = (T)h->b1, b2 = (T)h->b2, eps = (T)h->eps;      \
    const T decay = (T)(1.0 - h->lr * h->wd);                                                 \
    const T step_size = (T)h->step_size, bc2 = (T)h->bc2_sqrt;                                \
    ptrdiff_t i;                                                                              \
    T g, s;                                                                                   \
    switch (h->kind) {                                                                        \
    case NDWS_UPD_SGD:                                                                        \
        for (i = 0; i < n; i++)                                                               \
            P[i] = P[i] - lr * G[i];                                                          \
        break;                                                                                \
    case NDWS_UPD_MOMENTUM:                                                                   \
        for (i = 0; i < n; i++) {                                                             \
            g = G[i];                                                                         \
            s = mu * S[i] + g;                                                                \
            S[i] = s;                                                                         \
            P[i] = P[i] - lr * (h->nesterov ? g + mu * s : s);                                \
        }                                                                                     \
        break;                                                                                \
    case NDWS_UPD_ADAM:                                                                       \
        for (i = 0; i < n; i++) {                                                             \
            g = G[i];                                                                         \
            s = b1 * S[i] + (1.0 - b1) * g;                                                     \
            S[i] = s;                                                                         \
            V[i] = b2 * V[i] + (1.0 - b2) * g * g;                                              \
            P[i] = (h->wd != 0 ? P[i] * decay : P[i]) - step_size * s / (SQRT(V[i]) / bc2 + eps); \
        }                                                                                     \
        break;                                                                                \
    case NDWS_UPD_RMSPROP:                                                                    \
        for (i = 0; i < n; i++) {                                                             \
            g = G[i];                                                                         \
            s = mu * S[i] + (1.0 - mu) * g * g;                                                 \
            S[i] = s;                                                                         \
            P[i] = P[i] - lr * g / (SQRT(s) + eps);                                           \
        }                                                                                     \
        break;                                                                                \
    default:  /* NDWS_UPD_ADAGRAD */                                                          \
        for (i = 0; i < n; i++) {                                                             \
            g = G[i];                                                                         \
            s = S[i] + g * g;                                                                 \
            S[i] = s;                                                                         \
            P[i] = P[i] - lr * g / (SQRT(s) + eps);                                           \
        }                                                                                     \
    }                                                                                         \
}

NDWS_UPD_LOOP(ndws_upd_f32, float, sqrtf)
NDWS_UPD_LOOP(ndws_upd_f64, double, sqrt)

#endif /* NDWS_UPD_LOOPS_H */
