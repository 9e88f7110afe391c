/* MAX pooling over 2x2 windows with stride 2 along the row (LeNet's and VGG's pooling), a
 * plane per call, in C so that the compiler builds it once per instruction set and picks
 * one at load time (GCC's target_clones, as nn/_act_loops.h). Each output takes the first
 * largest of its four taps in the general loop's order (row 0: columns 0, 1; row 1: columns 0,
 * 1), a NaN winning over a number, with the same comparisons as ndws/nn/_pool.pyx's loops: the
 * same values and arg-max indices. The taps are taken by selects, never branches, so the loop
 * vectorises (as a scalar loop whose branches the data decided it was 8% of a VGG fit; gcc
 * vectorises the select from a _Bool made with || and &&, not from int bit operations). */
#ifndef NDWS_POOL_LOOPS_H
#define NDWS_POOL_LOOPS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>     /* defines __GLIBC__ where there is one (target_clones needs its ifunc) */

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define NDWS_POOL_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NDWS_POOL_CLONES
#endif

/* y[ow] := max of r0[2ow], r0[2ow+1], r1[2ow], r1[2ow+1]; idx[ow] := base + 2ow + the winner's
 * offset (0, 1, w, w + 1), when idx is not NULL. Whole vectors of outputs (16) go through the
 * vectorised loop; the rest (all of a LeNet row: 12 and 4 outputs) through the same choices as
 * integer selects: compiled as a scalar remainder, gcc made the choices branches on the data,
 * mispredicted half the time (3 ns per input of an 8x8 plane against 0.12 on 32x32). */
#define NDWS_MAX2X2_TAKE(T, UT, acc, best, v, off) do {                                       \
        int tk_ = ((v) > (acc)) | (((v) != (v)) & ((acc) == (acc)));                          \
        UT m_ = (UT)0 - (UT)tk_, ua_, uv_;                                                    \
        memcpy(&ua_, &(acc), sizeof(T));                                                      \
        memcpy(&uv_, &(v), sizeof(T));                                                        \
        ua_ = (uv_ & m_) | (ua_ & ~m_);                                                       \
        memcpy(&(acc), &ua_, sizeof(T));                                                      \
        best = (int32_t)(((uint32_t)(off) & (uint32_t)m_) | ((uint32_t)best & ~(uint32_t)m_));\
    } while (0)
#define NDWS_MAX2X2(SFX, T, UT)                                                               \
static inline __attribute__((always_inline)) void                                            \
ndws_max2x2_row_##SFX(const T* r0, const T* r1, ptrdiff_t ow_n, T* y, int32_t* idx,           \
                      int32_t base, int32_t w) {                                              \
    ptrdiff_t nv = ow_n - ow_n % 16;                                                          \
    for (ptrdiff_t o = 0; o < nv; o++) {                                                      \
        T a = r0[2 * o], b = r0[2 * o + 1], c = r1[2 * o], d = r1[2 * o + 1];                 \
        T acc = a;                                                                            \
        int32_t best = 0;                                                                     \
        _Bool tk = (b > acc) || (b != b && acc == acc);                                       \
        acc = tk ? b : acc;                                                                   \
        best = tk ? 1 : best;                                                                 \
        tk = (c > acc) || (c != c && acc == acc);                                             \
        acc = tk ? c : acc;                                                                   \
        best = tk ? w : best;                                                                 \
        tk = (d > acc) || (d != d && acc == acc);                                             \
        acc = tk ? d : acc;                                                                   \
        best = tk ? w + 1 : best;                                                             \
        y[o] = acc;                                                                           \
        if (idx != NULL)                                                                      \
            idx[o] = base + 2 * (int32_t)o + best;                                            \
    }                                                                                         \
    for (ptrdiff_t o = nv; o < ow_n; o++) {                                                   \
        T b = r0[2 * o + 1], c = r1[2 * o], d = r1[2 * o + 1];                                \
        T acc = r0[2 * o];                                                                    \
        int32_t best = 0;                                                                     \
        NDWS_MAX2X2_TAKE(T, UT, acc, best, b, 1);                                             \
        NDWS_MAX2X2_TAKE(T, UT, acc, best, c, w);                                             \
        NDWS_MAX2X2_TAKE(T, UT, acc, best, d, w + 1);                                         \
        y[o] = acc;                                                                           \
        if (idx != NULL)                                                                      \
            idx[o] = base + 2 * (int32_t)o + best;                                            \
    }                                                                                         \
}                                                                                             \
/* The plane's oh_n output rows in one call (LeNet's 4 x 4 outputs were four calls): input  \
   rows oh sh and oh sh + 1 at x + oh sh xs2, outputs at y + oh ys2, indices at idx + oh is2, \
   the indices counted on the logical width w */                                              \
NDWS_POOL_CLONES                                                                              \
static void ndws_max2x2_##SFX(const T* x, ptrdiff_t xs2, ptrdiff_t sh, ptrdiff_t oh_n,        \
                              ptrdiff_t ow_n, T* y, ptrdiff_t ys2, int32_t* idx,              \
                              ptrdiff_t is2, int32_t w) {                                     \
    for (ptrdiff_t oh = 0; oh < oh_n; oh++)                                                   \
        ndws_max2x2_row_##SFX(x + oh * sh * xs2, x + oh * sh * xs2 + xs2, ow_n, y + oh * ys2, \
                              idx != NULL ? idx + oh * is2 : NULL, (int32_t)(oh * sh) * w,    \
                              w);                                                             \
}

NDWS_MAX2X2(f32, float, uint32_t)
NDWS_MAX2X2(f64, double, uint64_t)

#endif /* NDWS_POOL_LOOPS_H */
