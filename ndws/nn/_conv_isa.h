/* The instruction sets the convolutions' C loops are built for (ndws/nn/_few_loops.h,
 * ndws/nn/_wino_loops.h, ndws/nn/_dw_loops.h): GCC target attributes on one source give an
 * AVX-512, an AVX2 and a baseline build of each loop, and a module picks one when it loads,
 * the tests each in turn.
 */
#ifndef NDWS_CONV_ISA_H
#define NDWS_CONV_ISA_H

#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define NDWS_CONV_X86 1
#define NDWS_CONV_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))
#define NDWS_CONV_AVX2 __attribute__((target("avx2,fma")))
#endif

/* On a copy loop: keep it a loop. GCC otherwise calls memset / memcpy for a row's one or two
 * padding zeros and its few dozen values, a call costlier than the copy (a depthwise plane's
 * padded copy: 2.6 -> 2.3 ms for 4096 planes of 32x32). */
#if defined(__GNUC__) && !defined(__clang__)
#define NDWS_NO_LIBC_LOOPS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define NDWS_NO_LIBC_LOOPS
#endif

/* 0 baseline, 1 avx2, 2 avx512: the build of `isa` when it was built and this CPU (and OS)
 * runs it, else -1. */
static int ndws_conv_isa(const char* isa) {
    if (strcmp(isa, "baseline") == 0)
        return 0;
#if defined(NDWS_CONV_X86)
    __builtin_cpu_init();
    if (strcmp(isa, "avx2") == 0 && __builtin_cpu_supports("avx2")
            && __builtin_cpu_supports("fma"))
        return 1;
    if (strcmp(isa, "avx512") == 0 && __builtin_cpu_supports("avx512f")
            && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw")
            && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx2")
            && __builtin_cpu_supports("fma"))
        return 2;
#endif
    return -1;
}

#endif /* NDWS_CONV_ISA_H */
