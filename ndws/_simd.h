/* A small vector abstraction for ndws' GEMM micro-kernel (ndws/_gemm_kernel.pxi), plus the
 * per-OS-thread packing scratch the kernel needs.
 *
 * The same Cython source is compiled once per instruction set (setup.py: GEMM_ISAS); the macros
 * the compiler defines for those flags pick one branch below, so each module gets the widest
 * vectors its flags allow:
 *   __AVX512F__            512-bit vectors, FMA      (ndws._gemm_avx512)
 *   __AVX2__ && __FMA__    256-bit vectors, FMA      (ndws._gemm_avx2)
 *   __SSE2__               128-bit vectors, mul+add  (ndws._gemm_baseline on x86-64)
 *   otherwise              plain C scalars           (ndws._gemm_baseline elsewhere)
 *
 * Register blocking: the micro-kernel keeps an MR x NR tile of C in NDWS_MR_* x NDWS_NV_*
 * vector accumulators (NR = NV * VLEN). Each FMA needs ~4 independent accumulators in flight
 * to hide its latency, and every k step costs MR broadcasts + NV loads for MR*NV FMAs, so the
 * tile is as tall as the register file allows: 16 registers (SSE2/AVX2) hold 12 accumulators +
 * 2 B vectors + 1 broadcast; AVX-512's 32 registers hold more rows (see NDWS_MR_F32 below).
 *
 * fmadd is a true fused multiply-add only where the ISA has one; the baseline rounds twice.
 * Every element of C goes through the same helpers in the same order whatever tile it sits
 * in, so results never depend on position or on the thread count.
 */
#ifndef NDWS_SIMD_H
#define NDWS_SIMD_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define NDWS_ISA "avx512"
typedef __m512 ndws_vf32;
typedef __m512d ndws_vf64;
#define NDWS_VLEN_F32 16
#define NDWS_VLEN_F64 8
/* 32 zmm registers would hold up to 14 rows x 2 vectors of accumulators. Measured on Zen 4
   (1 thread, squares 256-2048 and the MLP shapes; -DNDWS_MR_F32=... builds): 8, 10 and 12 rows
   are within the machine's noise of each other, 6 and 14 are slower; 8 rows waste no padding
   at the MLP's batch sizes (multiples of 8), so 8 it is. */
#ifndef NDWS_MR_F32
#define NDWS_MR_F32 8
#endif
#define NDWS_NV_F32 2
#ifndef NDWS_MR_F64
#define NDWS_MR_F64 8
#endif
#define NDWS_NV_F64 2
static inline ndws_vf32 ndws_vzero_f32(void) { return _mm512_setzero_ps(); }
static inline ndws_vf32 ndws_vload_f32(const float* p) { return _mm512_loadu_ps(p); }
static inline void ndws_vstore_f32(float* p, ndws_vf32 v) { _mm512_storeu_ps(p, v); }
static inline ndws_vf32 ndws_vset1_f32(float x) { return _mm512_set1_ps(x); }
static inline ndws_vf32 ndws_vmul_f32(ndws_vf32 a, ndws_vf32 b) { return _mm512_mul_ps(a, b); }
static inline ndws_vf32 ndws_vadd_f32(ndws_vf32 a, ndws_vf32 b) { return _mm512_add_ps(a, b); }
static inline ndws_vf32 ndws_vfmadd_f32(ndws_vf32 a, ndws_vf32 b, ndws_vf32 c)
{ return _mm512_fmadd_ps(a, b, c); }
static inline ndws_vf64 ndws_vzero_f64(void) { return _mm512_setzero_pd(); }
static inline ndws_vf64 ndws_vload_f64(const double* p) { return _mm512_loadu_pd(p); }
static inline void ndws_vstore_f64(double* p, ndws_vf64 v) { _mm512_storeu_pd(p, v); }
static inline ndws_vf64 ndws_vset1_f64(double x) { return _mm512_set1_pd(x); }
static inline ndws_vf64 ndws_vmul_f64(ndws_vf64 a, ndws_vf64 b) { return _mm512_mul_pd(a, b); }
static inline ndws_vf64 ndws_vadd_f64(ndws_vf64 a, ndws_vf64 b) { return _mm512_add_pd(a, b); }
static inline ndws_vf64 ndws_vfmadd_f64(ndws_vf64 a, ndws_vf64 b, ndws_vf64 c)
{ return _mm512_fmadd_pd(a, b, c); }

#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define NDWS_ISA "avx2"
typedef __m256 ndws_vf32;
typedef __m256d ndws_vf64;
#define NDWS_VLEN_F32 8
#define NDWS_VLEN_F64 4
#define NDWS_MR_F32 6
#define NDWS_NV_F32 2
#define NDWS_MR_F64 6
#define NDWS_NV_F64 2
/* float32 rows left over after the 6-row tiles are 2 or 4 for every even M: those go in tiles
   of 4 rows (see NDWS_TAIL4_F32 below) */
#define NDWS_TAIL4_F32 1
static inline ndws_vf32 ndws_vzero_f32(void) { return _mm256_setzero_ps(); }
static inline ndws_vf32 ndws_vload_f32(const float* p) { return _mm256_loadu_ps(p); }
static inline void ndws_vstore_f32(float* p, ndws_vf32 v) { _mm256_storeu_ps(p, v); }
static inline ndws_vf32 ndws_vset1_f32(float x) { return _mm256_set1_ps(x); }
static inline ndws_vf32 ndws_vmul_f32(ndws_vf32 a, ndws_vf32 b) { return _mm256_mul_ps(a, b); }
static inline ndws_vf32 ndws_vadd_f32(ndws_vf32 a, ndws_vf32 b) { return _mm256_add_ps(a, b); }
static inline ndws_vf32 ndws_vfmadd_f32(ndws_vf32 a, ndws_vf32 b, ndws_vf32 c)
{ return _mm256_fmadd_ps(a, b, c); }
static inline ndws_vf64 ndws_vzero_f64(void) { return _mm256_setzero_pd(); }
static inline ndws_vf64 ndws_vload_f64(const double* p) { return _mm256_loadu_pd(p); }
static inline void ndws_vstore_f64(double* p, ndws_vf64 v) { _mm256_storeu_pd(p, v); }
static inline ndws_vf64 ndws_vset1_f64(double x) { return _mm256_set1_pd(x); }
static inline ndws_vf64 ndws_vmul_f64(ndws_vf64 a, ndws_vf64 b) { return _mm256_mul_pd(a, b); }
static inline ndws_vf64 ndws_vadd_f64(ndws_vf64 a, ndws_vf64 b) { return _mm256_add_pd(a, b); }
static inline ndws_vf64 ndws_vfmadd_f64(ndws_vf64 a, ndws_vf64 b, ndws_vf64 c)
{ return _mm256_fmadd_pd(a, b, c); }

#elif defined(__SSE2__)
#include <emmintrin.h>
#define NDWS_ISA "baseline"
typedef __m128 ndws_vf32;
typedef __m128d ndws_vf64;
#define NDWS_VLEN_F32 4
#define NDWS_VLEN_F64 2
#define NDWS_MR_F32 6
#define NDWS_NV_F32 2
#define NDWS_MR_F64 6
#define NDWS_NV_F64 2
static inline ndws_vf32 ndws_vzero_f32(void) { return _mm_setzero_ps(); }
static inline ndws_vf32 ndws_vload_f32(const float* p) { return _mm_loadu_ps(p); }
static inline void ndws_vstore_f32(float* p, ndws_vf32 v) { _mm_storeu_ps(p, v); }
static inline ndws_vf32 ndws_vset1_f32(float x) { return _mm_set1_ps(x); }
static inline ndws_vf32 ndws_vmul_f32(ndws_vf32 a, ndws_vf32 b) { return _mm_mul_ps(a, b); }
static inline ndws_vf32 ndws_vadd_f32(ndws_vf32 a, ndws_vf32 b) { return _mm_add_ps(a, b); }
/* no FMA in SSE2: multiply, round, add, round (the same two roundings everywhere) */
static inline ndws_vf32 ndws_vfmadd_f32(ndws_vf32 a, ndws_vf32 b, ndws_vf32 c)
{ return _mm_add_ps(_mm_mul_ps(a, b), c); }
static inline ndws_vf64 ndws_vzero_f64(void) { return _mm_setzero_pd(); }
static inline ndws_vf64 ndws_vload_f64(const double* p) { return _mm_loadu_pd(p); }
static inline void ndws_vstore_f64(double* p, ndws_vf64 v) { _mm_storeu_pd(p, v); }
static inline ndws_vf64 ndws_vset1_f64(double x) { return _mm_set1_pd(x); }
static inline ndws_vf64 ndws_vmul_f64(ndws_vf64 a, ndws_vf64 b) { return _mm_mul_pd(a, b); }
static inline ndws_vf64 ndws_vadd_f64(ndws_vf64 a, ndws_vf64 b) { return _mm_add_pd(a, b); }
static inline ndws_vf64 ndws_vfmadd_f64(ndws_vf64 a, ndws_vf64 b, ndws_vf64 c)
{ return _mm_add_pd(_mm_mul_pd(a, b), c); }

#else
/* Non-x86 machines: plain C scalars. A 4 x 4 tile keeps 16 accumulators for the compiler to
   schedule. (Where the machine has an FMA, gcc may contract a*b + c into one; every element
   goes through these same helpers, so it does so for all of them alike.) */
#define NDWS_ISA "baseline"
typedef float ndws_vf32;
typedef double ndws_vf64;
#define NDWS_VLEN_F32 1
#define NDWS_VLEN_F64 1
#define NDWS_MR_F32 4
#define NDWS_NV_F32 4
#define NDWS_MR_F64 4
#define NDWS_NV_F64 4
static inline ndws_vf32 ndws_vzero_f32(void) { return 0.0f; }
static inline ndws_vf32 ndws_vload_f32(const float* p) { return *p; }
static inline void ndws_vstore_f32(float* p, ndws_vf32 v) { *p = v; }
static inline ndws_vf32 ndws_vset1_f32(float x) { return x; }
static inline ndws_vf32 ndws_vmul_f32(ndws_vf32 a, ndws_vf32 b) { return a * b; }
static inline ndws_vf32 ndws_vadd_f32(ndws_vf32 a, ndws_vf32 b) { return a + b; }
static inline ndws_vf32 ndws_vfmadd_f32(ndws_vf32 a, ndws_vf32 b, ndws_vf32 c)
{ ndws_vf32 t = a * b; return t + c; }
static inline ndws_vf64 ndws_vzero_f64(void) { return 0.0; }
static inline ndws_vf64 ndws_vload_f64(const double* p) { return *p; }
static inline void ndws_vstore_f64(double* p, ndws_vf64 v) { *p = v; }
static inline ndws_vf64 ndws_vset1_f64(double x) { return x; }
static inline ndws_vf64 ndws_vmul_f64(ndws_vf64 a, ndws_vf64 b) { return a * b; }
static inline ndws_vf64 ndws_vadd_f64(ndws_vf64 a, ndws_vf64 b) { return a + b; }
static inline ndws_vf64 ndws_vfmadd_f64(ndws_vf64 a, ndws_vf64 b, ndws_vf64 c)
{ ndws_vf64 t = a * b; return t + c; }
#endif

/* Scalar a*b + c with the vector fmadd's rounding: fused where the vectors are fused (so a
   lane and a scalar tail element agree), two roundings on the baseline. */
#if defined(__FMA__) || defined(__AVX512F__)
static inline float ndws_fma_f32(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}
static inline double ndws_fma_f64(double a, double b, double c) {
    return _mm_cvtsd_f64(_mm_fmadd_sd(_mm_set_sd(a), _mm_set_sd(b), _mm_set_sd(c)));
}
#elif defined(__SSE2__)
static inline float ndws_fma_f32(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_add_ss(_mm_mul_ss(_mm_set_ss(a), _mm_set_ss(b)), _mm_set_ss(c)));
}
static inline double ndws_fma_f64(double a, double b, double c) {
    return _mm_cvtsd_f64(_mm_add_sd(_mm_mul_sd(_mm_set_sd(a), _mm_set_sd(b)), _mm_set_sd(c)));
}
#else
static inline float ndws_fma_f32(float a, float b, float c) { return ndws_vfmadd_f32(a, b, c); }
static inline double ndws_fma_f64(double a, double b, double c) { return ndws_vfmadd_f64(a, b, c); }
#endif
#define NDWS_NR_F32 (NDWS_NV_F32 * NDWS_VLEN_F32)
#define NDWS_NR_F64 (NDWS_NV_F64 * NDWS_VLEN_F64)

/* ---------------------------------------------------------------------------------------------
 * The tile half a vector wide: MR rows x NDWS_HALF_* columns, for a last panel of at most that
 * many valid columns (N = 200 on AVX-512 is six 32-column panels and one of 8; the char model's
 * backward recurrent product and its input gradient have it). The one-vector tile computed 16
 * columns for those 8; on Zen 4 a 512-bit fma costs two 256-bit ones, so the half tile takes
 * half the time (on cores whose wide and narrow fmas cost the same, the same time). Every
 * column gets the full tile's operations in its order: acc = fma(a_p, b_p, acc) over p, then
 * C = fma(alpha, acc, beta * C) or C = alpha * acc, so the bits do not depend on the tile.
 * Only where the narrower vector has the same fma (AVX-512: 256-bit, AVX2: 128-bit);
 * NDWS_HALF_* is 0 elsewhere and the kernels are never called. */
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#if defined(__AVX512F__)
#define NDWS_HALF_F32 8
#define NDWS_HALF_F64 4
typedef __m256 ndws_hf32;
typedef __m256d ndws_hf64;
#define NDWS_H_F32(op) _mm256_##op##_ps
#define NDWS_H_F64(op) _mm256_##op##_pd
#else
#define NDWS_HALF_F32 4
#define NDWS_HALF_F64 2
typedef __m128 ndws_hf32;
typedef __m128d ndws_hf64;
#define NDWS_H_F32(op) _mm_##op##_ps
#define NDWS_H_F64(op) _mm_##op##_pd
#endif
#define NDWS_UKRH(SFX, T, V, H, MR)                                                                \
static inline void ndws_ukrh_##SFX(ptrdiff_t kc, const T* A, const T* B, ptrdiff_t ldb, T* C,      \
                                   ptrdiff_t ldc, T alpha, T beta, int load_c) {                   \
    V acc[MR], va, vb, bv;                                                                         \
    int r;                                                                                         \
    for (r = 0; r < MR; r++)                                                                       \
        acc[r] = H(setzero)();                                                                     \
    for (ptrdiff_t p = 0; p < kc; p++) {                                                           \
        bv = H(loadu)(B);                                                                          \
        for (r = 0; r < MR; r++)                                                                   \
            acc[r] = H(fmadd)(H(set1)(A[r]), bv, acc[r]);                                          \
        A += MR;                                                                                   \
        B += ldb;                                                                                  \
    }                                                                                              \
    va = H(set1)(alpha);                                                                           \
    if (load_c) {                                                                                  \
        vb = H(set1)(beta);                                                                        \
        for (r = 0; r < MR; r++)                                                                   \
            H(storeu)(C + r * ldc, H(fmadd)(                                                       \
                va, acc[r], H(mul)(vb, H(loadu)(C + r * ldc))));                                   \
    } else {                                                                                       \
        for (r = 0; r < MR; r++)                                                                   \
            H(storeu)(C + r * ldc, H(mul)(va, acc[r]));                                            \
    }                                                                                              \
}
NDWS_UKRH(f32, float, ndws_hf32, NDWS_H_F32, NDWS_MR_F32)
NDWS_UKRH(f64, double, ndws_hf64, NDWS_H_F64, NDWS_MR_F64)
#else
#define NDWS_HALF_F32 0
#define NDWS_HALF_F64 0
static inline void ndws_ukrh_f32(ptrdiff_t kc, const float* A, const float* B, ptrdiff_t ldb,
                                 float* C, ptrdiff_t ldc, float alpha, float beta, int load_c) {
    (void)kc; (void)A; (void)B; (void)ldb; (void)C; (void)ldc; (void)alpha; (void)beta;
    (void)load_c;
}
static inline void ndws_ukrh_f64(ptrdiff_t kc, const double* A, const double* B, ptrdiff_t ldb,
                                 double* C, ptrdiff_t ldc, double alpha, double beta,
                                 int load_c) {
    (void)kc; (void)A; (void)B; (void)ldb; (void)C; (void)ldc; (void)alpha; (void)beta;
    (void)load_c;
}
#endif

/* Cache blocking (GotoBLAS/BLIS): a KC x NR micro-panel of packed B is swept by the micro-kernel
 * for each MR-row panel of the MC x KC packed A block, which stays in L2; the KC x NC packed B
 * panel lives in L3. Zen 4: L1d 32-48 KiB, L2 1 MiB per core, L3 32 MiB shared. Values measured
 * with bench/bench_gemm.py (see its notes). KC is the only one that changes results (it sets
 * where partial sums are rounded into C); none depends on the thread count.
 * float32's KC is 512, not the 256 that keeps its micro-panel (KC x 32 floats) in a 32 KiB L1:
 * K <= 512 then takes one pass over C instead of two, and Zen 4 streams the 64 KiB micro-panel
 * from L2 at the tile's pace. Measured (1 thread, medians of three alternated runs): the LSTM
 * products 64 x 512 x 2048 109 -> 112 GFLOP/s, 6400 x 512 x 2048 100 -> 107, squares 1024 and
 * 2048 +5%, no shape slower beyond the noise; the LSTM 512 forward 264 -> 257 ms, and on two
 * threads 145 -> 131 ms. float64 keeps 256 (not measured at 512). */
#ifndef NDWS_KC_F32
#define NDWS_KC_F32 512
#endif
#ifndef NDWS_KC_F64
#define NDWS_KC_F64 256
#endif
#ifndef NDWS_MC_BYTES
#define NDWS_MC_BYTES (384 * 1024)
#endif
#define NDWS_MC_F32 ((NDWS_MC_BYTES / (NDWS_KC_F32 * 4)) / NDWS_MR_F32 * NDWS_MR_F32)
#define NDWS_MC_F64 ((NDWS_MC_BYTES / (NDWS_KC_F64 * 8)) / NDWS_MR_F64 * NDWS_MR_F64)
#ifndef NDWS_NC_F32
#define NDWS_NC_F32 4096
#endif
#ifndef NDWS_NC_F64
#define NDWS_NC_F64 2048
#endif

/* Tiles of 4 rows (float32, where MR is 6): an M that is not a multiple of 6 ends in 2 or 4
 * rows for every even M (32, 64, 200, ...), which the MR-row tile computed padded to 6, a third
 * or two thirds of its fmas wasted. A 4-row tile has 8 accumulators (4 rows x 2 vectors), just
 * the chains two fma pipes of latency 4 need, so it costs less than a padded full tile: the
 * last 8 rows go in two 4-row tiles and the last 4 in one (32 rows: 6+6+6+6+4+4; 64: ten 6s
 * and a 4). Each element gets the full tile's fma chain in the same order: the bits do not
 * change. Measured on Zen 3 (1 thread): 32 x 200 x 800 with B packed (the char model's
 * recurrent product at batch 32) 164 -> 140-158 us (24 rows: 113; a 4-row tile takes about
 * 0.85 of a 6-row one's time, not 4/6); the char model's fit() segment +1.5-3% (one process
 * switching it on and off, 25 and 40 pairs). */
#ifndef NDWS_TAIL4_F32
#define NDWS_TAIL4_F32 0
#endif

/* Software prefetch of the next packed B micro-panel into L2 (prefetcht1) while the first MR-row
 * panel of A sweeps the current one (_gemm_kernel.pxi: `pf`): one cache line per k step, so the
 * whole KC x NR micro-panel (32 KiB at KC 512) arrives during one micro-kernel call. It matters
 * where B streams from L3 or memory and each micro-panel serves few A panels: the recurrent
 * product of an LSTM (64 x 512 x 2048, its 4 MiB of packed weights read at every step, 11 A
 * panels per micro-panel). Measured on a Zen 3 core (L2 512 KiB, an L3 shared with other
 * tenants; 1 thread, one process switching it on and off between calls, 21 pairs, three runs):
 * 64 x 512 x 2048 +6-10% (faster in 17-19 of 21 pairs), 192 and 1024 rows +0-3%, the LSTM 512
 * forward +3% (21 of 25 pairs). Only AVX2 is measured; AVX-512 machines (Zen 4: L2 1 MiB) keep
 * the hardware prefetchers alone until measured. float64 fetches the same one line (8 values)
 * per k step. Prefetches never change a result. */
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define NDWS_PREFETCH_B 1
#else
#define NDWS_PREFETCH_B 0
#endif
static inline void ndws_prefetch_l2(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p, 0, 2);
#else
    (void)p;
#endif
}

/* ---------------------------------------------------------------------------------------------
 * Transposing pack: dst[p*ldd + r] = src[r*lds + p] for r < R, p < P. Packing a row-major A
 * (or the B of X @ W.T) is a transpose; done one element at a time it costs more than the
 * multiplication for shapes like 128x256 @ 256x10, so it goes by register blocks: 8x8 (AVX,
 * also for the 6 rows of an AVX2 tile) and 4x4 (SSE) for float32, 4x4 (AVX) and 2x2 (SSE2) for
 * float64, scalars for the rest. */
#if defined(__AVX__) || defined(__AVX2__) || defined(__AVX512F__)
#define NDWS_HAVE_AVX 1
#endif

#if defined(NDWS_HAVE_AVX)
/* x[0..7] (rows of 8 values) := their transpose */
static inline void ndws_t8x8_f32(__m256 x[8]) {
    __m256 t0 = _mm256_unpacklo_ps(x[0], x[1]), t1 = _mm256_unpackhi_ps(x[0], x[1]);
    __m256 t2 = _mm256_unpacklo_ps(x[2], x[3]), t3 = _mm256_unpackhi_ps(x[2], x[3]);
    __m256 t4 = _mm256_unpacklo_ps(x[4], x[5]), t5 = _mm256_unpackhi_ps(x[4], x[5]);
    __m256 t6 = _mm256_unpacklo_ps(x[6], x[7]), t7 = _mm256_unpackhi_ps(x[6], x[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    x[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    x[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    x[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    x[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    x[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    x[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    x[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    x[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}
#endif

#if defined(NDWS_HAVE_AVX)
#if defined(__GNUC__) || defined(__clang__)
#define NDWS_TPACK_INLINE static inline __attribute__((always_inline))
#else
#define NDWS_TPACK_INLINE static inline
#endif
/* Rows r0 .. r0 + rows - 1 (rows 8, or 6: the AVX2 float32 tile's, with two rows of zeros in
   the transposes and 6 values stored per p, 4 + 2) of ndws_tpack_f32; inlined for each
   constant row count, so the row tests fold away */
NDWS_TPACK_INLINE void ndws_tpack_rows_f32(const float* src, ptrdiff_t lds, ptrdiff_t rows,
                                       ptrdiff_t P, float* dst, ptrdiff_t ldd) {
    __m256 x[8];
    ptrdiff_t p0, r, p;
    for (p0 = 0; p0 + 8 <= P; p0 += 8) {
        for (r = 0; r < 8; r++)
            x[r] = r < rows ? _mm256_loadu_ps(src + r * lds + p0) : _mm256_setzero_ps();
        ndws_t8x8_f32(x);
        for (p = 0; p < 8; p++) {
            float* d = dst + (p0 + p) * ldd;
            if (rows == 8) {
                _mm256_storeu_ps(d, x[p]);
            } else {
                _mm_storeu_ps(d, _mm256_castps256_ps128(x[p]));
                _mm_storel_pi((__m64*)(d + 4), _mm256_extractf128_ps(x[p], 1));
            }
        }
    }
    for (r = 0; r < rows; r++)
        for (p = p0; p < P; p++)
            dst[p * ldd + r] = src[r * lds + p];
}
#endif

static inline void ndws_tpack_f32(const float* src, ptrdiff_t lds, ptrdiff_t R, ptrdiff_t P,
                                  float* dst, ptrdiff_t ldd) {
    ptrdiff_t r0 = 0, p0, r, p;
#if defined(NDWS_HAVE_AVX)
    for (; r0 + 8 <= R; r0 += 8)
        ndws_tpack_rows_f32(src + r0 * lds, lds, 8, P, dst + r0, ldd);
    if (R - r0 == 6) {
        /* a row-major A's 6-row panel: one 8x8 transpose per 8 K steps, not a 4x4 block and
           2 rows of scalars */
        ndws_tpack_rows_f32(src + r0 * lds, lds, 6, P, dst + r0, ldd);
        r0 += 6;
    }
#endif
#if defined(__SSE2__)
    for (; r0 + 4 <= R; r0 += 4) {
        for (p0 = 0; p0 + 4 <= P; p0 += 4) {
            const float* s = src + r0 * lds + p0;
            __m128 x0 = _mm_loadu_ps(s), x1 = _mm_loadu_ps(s + lds);
            __m128 x2 = _mm_loadu_ps(s + 2 * lds), x3 = _mm_loadu_ps(s + 3 * lds);
            float* d = dst + p0 * ldd + r0;
            _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
            _mm_storeu_ps(d, x0);
            _mm_storeu_ps(d + ldd, x1);
            _mm_storeu_ps(d + 2 * ldd, x2);
            _mm_storeu_ps(d + 3 * ldd, x3);
        }
        for (r = r0; r < r0 + 4; r++)
            for (p = p0; p < P; p++)
                dst[p * ldd + r] = src[r * lds + p];
    }
#endif
    for (r = r0; r < R; r++)
        for (p = 0; p < P; p++)
            dst[p * ldd + r] = src[r * lds + p];
}

static inline void ndws_tpack_f64(const double* src, ptrdiff_t lds, ptrdiff_t R, ptrdiff_t P,
                                  double* dst, ptrdiff_t ldd) {
    ptrdiff_t r0 = 0, p0, r, p;
#if defined(NDWS_HAVE_AVX)
    for (; r0 + 4 <= R; r0 += 4) {
        for (p0 = 0; p0 + 4 <= P; p0 += 4) {
            const double* s = src + r0 * lds + p0;
            __m256d x0 = _mm256_loadu_pd(s), x1 = _mm256_loadu_pd(s + lds);
            __m256d x2 = _mm256_loadu_pd(s + 2 * lds), x3 = _mm256_loadu_pd(s + 3 * lds);
            __m256d t0 = _mm256_unpacklo_pd(x0, x1), t1 = _mm256_unpackhi_pd(x0, x1);
            __m256d t2 = _mm256_unpacklo_pd(x2, x3), t3 = _mm256_unpackhi_pd(x2, x3);
            double* d = dst + p0 * ldd + r0;
            _mm256_storeu_pd(d, _mm256_permute2f128_pd(t0, t2, 0x20));
            _mm256_storeu_pd(d + ldd, _mm256_permute2f128_pd(t1, t3, 0x20));
            _mm256_storeu_pd(d + 2 * ldd, _mm256_permute2f128_pd(t0, t2, 0x31));
            _mm256_storeu_pd(d + 3 * ldd, _mm256_permute2f128_pd(t1, t3, 0x31));
        }
        for (r = r0; r < r0 + 4; r++)
            for (p = p0; p < P; p++)
                dst[p * ldd + r] = src[r * lds + p];
    }
#endif
#if defined(__SSE2__)
    for (; r0 + 2 <= R; r0 += 2) {
        for (p0 = 0; p0 + 2 <= P; p0 += 2) {
            const double* s = src + r0 * lds + p0;
            __m128d x0 = _mm_loadu_pd(s), x1 = _mm_loadu_pd(s + lds);
            double* d = dst + p0 * ldd + r0;
            _mm_storeu_pd(d, _mm_unpacklo_pd(x0, x1));
            _mm_storeu_pd(d + ldd, _mm_unpackhi_pd(x0, x1));
        }
        for (r = r0; r < r0 + 2; r++)
            for (p = p0; p < P; p++)
                dst[p * ldd + r] = src[r * lds + p];
    }
#endif
    for (r = r0; r < R; r++)
        for (p = 0; p < P; p++)
            dst[p * ldd + r] = src[r * lds + p];
}

/* ---------------------------------------------------------------------------------------------
 * Per-OS-thread packing scratch: one 64-byte aligned buffer per thread (the GEMM's helper
 * threads live for the process, so they keep theirs across calls), grown when a call needs
 * more and never shrunk; freed by the pthread key's destructor when the thread exits. Each GEMM module has its
 * own key and its own counter (the header is compiled into each one). The counter counts
 * (re)allocations, so tests can assert the steady state allocates nothing.
 * Windows has no pthread keys: there the buffer is a thread-local that a thread's exit leaks
 * (ndws is developed on POSIX; a FlsAlloc callback would be the fix). */
typedef struct {
    void* raw;      /* what malloc returned; freed by the destructor */
    char* data;     /* raw rounded up to 64 bytes */
    size_t cap;     /* usable bytes at data */
} ndws_scratch_t;

/* the counters are touched by whichever threads run the GEMM */
#if defined(__GNUC__) || defined(__clang__)
#define NDWS_ATOMIC_ADD(x, d) __atomic_add_fetch(&(x), (d), __ATOMIC_RELAXED)
#define NDWS_ATOMIC_LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#else
#define NDWS_ATOMIC_ADD(x, d) ((x) += (d))
#define NDWS_ATOMIC_LOAD(x) (x)
#endif

/* Sanitizer builds (NDWS_SANITIZE=1): the part of the buffer beyond what this call asked for
 * is poisoned, so a kernel that packs past its panel is caught even inside the buffer. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define NDWS_SCRATCH_FIT(s, bytes) do { \
        ASAN_UNPOISON_MEMORY_REGION((s)->data, (bytes)); \
        ASAN_POISON_MEMORY_REGION((s)->data + (bytes), (s)->cap + 64 - (bytes) \
                                  - (size_t)((s)->data - (char*)(s)->raw)); \
    } while (0)
#else
#define NDWS_SCRATCH_FIT(s, bytes) ((void)0)
#endif

static long long ndws_scratch_count = 0;   /* (re)allocations, ever */
static long long ndws_scratch_live = 0;    /* threads holding a buffer now */

static void ndws_scratch_release(void* p) {
    ndws_scratch_t* s = (ndws_scratch_t*)p;
    if (s != NULL) {
        if (s->raw != NULL) {
            NDWS_ATOMIC_ADD(ndws_scratch_live, -1);
        }
        free(s->raw);
        free(s);
    }
}

#if defined(_WIN32)
static __declspec(thread) ndws_scratch_t* ndws_scratch_tls = NULL;
static inline ndws_scratch_t* ndws_scratch_self(void) {
    if (ndws_scratch_tls == NULL)
        ndws_scratch_tls = (ndws_scratch_t*)calloc(1, sizeof(ndws_scratch_t));
    return ndws_scratch_tls;
}
#else
#include <pthread.h>
static pthread_key_t ndws_scratch_key;
static pthread_once_t ndws_scratch_once = PTHREAD_ONCE_INIT;
static int ndws_scratch_key_ok = 0;
static void ndws_scratch_make_key(void) {
    ndws_scratch_key_ok = pthread_key_create(&ndws_scratch_key, ndws_scratch_release) == 0;
}
static inline ndws_scratch_t* ndws_scratch_self(void) {
    ndws_scratch_t* s;
    pthread_once(&ndws_scratch_once, ndws_scratch_make_key);
    if (!ndws_scratch_key_ok)
        return NULL;
    s = (ndws_scratch_t*)pthread_getspecific(ndws_scratch_key);
    if (s == NULL) {
        s = (ndws_scratch_t*)calloc(1, sizeof(ndws_scratch_t));
        if (s != NULL && pthread_setspecific(ndws_scratch_key, s) != 0) {
            free(s);
            s = NULL;
        }
    }
    return s;
}
#endif

/* The calling thread's scratch, at least `bytes` long and 64-byte aligned; NULL when memory is
 * exhausted (the old buffer, if any, is kept). */
static inline char* ndws_scratch_get(size_t bytes) {
    ndws_scratch_t* s = ndws_scratch_self();
    void* raw;
    if (s == NULL)
        return NULL;
    if (s->cap >= bytes && s->data != NULL) {
        NDWS_SCRATCH_FIT(s, bytes);
        return s->data;
    }
    raw = malloc(bytes + 64);
    if (raw == NULL)
        return NULL;
    if (s->raw == NULL) {
        NDWS_ATOMIC_ADD(ndws_scratch_live, 1);
    }
    free(s->raw);
    s->raw = raw;
    s->data = (char*)(((size_t)raw + 63) & ~(size_t)63);
    s->cap = bytes;
    NDWS_ATOMIC_ADD(ndws_scratch_count, 1);
    NDWS_SCRATCH_FIT(s, bytes);
    return s->data;
}

static inline long long ndws_scratch_buffers(void) {
    return NDWS_ATOMIC_LOAD(ndws_scratch_live);
}

static inline long long ndws_scratch_allocations(void) {
    return NDWS_ATOMIC_LOAD(ndws_scratch_count);
}

#endif /* NDWS_SIMD_H */
