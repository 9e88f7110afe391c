/* MAX pooling over 2x2 windows with stride 2 along the row (LeNet's and VGG's pooling), one
 * output row at a time, in C so that the compiler builds it once per instruction set and picks
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
 * offset (0, 1, w, w + 1), when idx is not NULL */
#define NDWS_MAX2X2(SFX, T)                                                                   \
NDWS_POOL_CLONES                                                                              \
static void ndws_max2x2_##SFX(const T* r0, const T* r1, ptrdiff_t ow_n, T* y, int32_t* idx,   \
                              int32_t base, int32_t w) {                                      \
    for (ptrdiff_t o = 0; o < ow_n; o++) {                                                    \
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
}

NDWS_MAX2X2(f32, float)
NDWS_MAX2X2(f64, double)

#endif /* NDWS_POOL_LOOPS_H */
