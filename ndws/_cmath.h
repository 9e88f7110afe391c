/* The C of the core's native element-wise and reduction loops (ndws/_loops.pxi declares what
 * it uses): floating-point status flags as NumPy's NPY_FPE_* bits, vectorised sqrt, exp and
 * tanh loops, NumPy's floating-point error reporting, and NaN-aware max/min/find scans.
 * Plain C with intrinsics where the compiler cannot vectorise the portable loop; the build
 * never uses -ffast-math. Included once, by _ufuncs (through _loops.pxi). */
#ifndef NDWS_CMATH_H
#define NDWS_CMATH_H

/* IEEE status flags as NumPy's NPY_FPE_* bits (numpy/npy_math.h), so a kernel's flags can
   be handed to PyUFunc_GiveFloatingpointErrors, which warns/raises per np.errstate. The
   flags are per OS thread: each OpenMP worker clears and reads its own.
   On x86-64 all float/double arithmetic (and glibc's float/double libm) runs in SSE, whose
   flags live in MXCSR alone: clearing them there costs a few cycles, where feclearexcept
   also rewrites the x87 environment (fnstenv/fldenv, ~100 cycles: a third of a 16-element
   add). Elsewhere, C99 fenv. */
#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
static inline void ndws_fpe_clear(void) { _mm_setcsr(_mm_getcsr() & ~0x3Fu); }
static inline int ndws_fpe_read(void) {
    unsigned int f = _mm_getcsr();   /* IE=1 DE=2 ZE=4 OE=8 UE=16 PE=32 */
    return ((f & 0x04u) ? 1 : 0) | ((f & 0x08u) ? 2 : 0)
         | ((f & 0x10u) ? 4 : 0) | ((f & 0x01u) ? 8 : 0);
}
#else
#include <fenv.h>
#define NDWS_FE_ALL (FE_DIVBYZERO | FE_OVERFLOW | FE_UNDERFLOW | FE_INVALID)
static inline void ndws_fpe_clear(void) { feclearexcept(NDWS_FE_ALL); }
static inline int ndws_fpe_read(void) {
    int f = fetestexcept(NDWS_FE_ALL);
    return ((f & FE_DIVBYZERO) ? 1 : 0) | ((f & FE_OVERFLOW) ? 2 : 0)
         | ((f & FE_UNDERFLOW) ? 4 : 0) | ((f & FE_INVALID) ? 8 : 0);
}
#endif

/* ------------------------------------------------------------------------------------------- */

#include <math.h>
/* sqrt loops written with intrinsics: C's sqrt must set errno for x < 0 (-fmath-errno is
   the default and not a flag ndws may drop globally), so gcc guards each element with a
   branch to libm and never vectorises the plain loop (4x slower than NumPy here). The
   hardware instruction is the IEEE sqrt: same results, same invalid flag. AVX-512 when the
   CPU has it (chosen once, at the first call), SSE2 (every x86-64) otherwise, plain C on
   other machines. */
#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx512f")))
static void ndws_sqrt_f32_avx512(float *o, const float *x, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(o + i, _mm512_sqrt_ps(_mm512_loadu_ps(x + i)));
    for (; i < n; i++) _mm_store_ss(o + i, _mm_sqrt_ss(_mm_load_ss(x + i)));
}
__attribute__((target("avx512f")))
static void ndws_sqrt_f64_avx512(double *o, const double *x, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm512_storeu_pd(o + i, _mm512_sqrt_pd(_mm512_loadu_pd(x + i)));
    for (; i < n; i++) _mm_store_sd(o + i, _mm_sqrt_sd(_mm_setzero_pd(), _mm_load_sd(x + i)));
}
static void ndws_sqrt_f32_sse2(float *o, const float *x, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(o + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
    for (; i < n; i++) _mm_store_ss(o + i, _mm_sqrt_ss(_mm_load_ss(x + i)));
}
static void ndws_sqrt_f64_sse2(double *o, const double *x, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 2 <= n; i += 2) _mm_storeu_pd(o + i, _mm_sqrt_pd(_mm_loadu_pd(x + i)));
    for (; i < n; i++) _mm_store_sd(o + i, _mm_sqrt_sd(_mm_setzero_pd(), _mm_load_sd(x + i)));
}
static int ndws_have_avx512 = -1;
static inline int ndws_avx512(void) {
    if (ndws_have_avx512 < 0) {
        __builtin_cpu_init();
        ndws_have_avx512 = __builtin_cpu_supports("avx512f") ? 1 : 0;
    }
    return ndws_have_avx512;
}
static void ndws_sqrt_loop_f32(float *o, const float *x, Py_ssize_t n) {
    if (ndws_avx512()) ndws_sqrt_f32_avx512(o, x, n); else ndws_sqrt_f32_sse2(o, x, n);
}
static void ndws_sqrt_loop_f64(double *o, const double *x, Py_ssize_t n) {
    if (ndws_avx512()) ndws_sqrt_f64_avx512(o, x, n); else ndws_sqrt_f64_sse2(o, x, n);
}
#else
static void ndws_sqrt_loop_f32(float *o, const float *x, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) o[i] = sqrtf(x[i]);
}
static void ndws_sqrt_loop_f64(double *o, const double *x, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) o[i] = sqrt(x[i]);
}
#endif

/* ------------------------------------------------------------------------------------------- */

#include "_vmath.h"   /* ndws_expf1, ndws_tanhf1 */

static void ndws_exp_loop_f32(float *o, const float *x, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) o[i] = ndws_expf1(x[i]);
}
static void ndws_tanh_loop_f32(float *o, const float *x, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) o[i] = ndws_tanhf1(x[i]);
}

/* ------------------------------------------------------------------------------------------- */

#include "numpy/ufuncobject.h"
/* NumPy's own floating-point error reporting, PyUFunc_GiveFloatingpointErrors (ufunc C-API
   slot 46, NumPy >= 2.0): "overflow encountered in add" etc., warned, raised, ignored or
   called per np.errstate. The build targets an older C-API, whose headers hide the slot,
   so it is reached through the table after a runtime version check. -1 with an exception
   set when the errstate says raise; -2 when the running NumPy lacks the slot. */
static int ndws_give_fpe(const char *name, int flags) {
#if defined(NPY_2_0_API_VERSION)
    if (PyArray_RUNTIME_VERSION >= NPY_2_0_API_VERSION) {
        return (*(int (*)(const char *, int))PyUFunc_API[46])(name, flags);
    }
#endif
    return -2;
}

/* ------------------------------------------------------------------------------------------- */

/* max/min of a dense run with np.max's rules (NaN if any NaN; otherwise the value of the
   last extreme element -- NumPy's fold, maximum(acc, x), keeps x on ties -- the sign of a
   zero included). gcc cannot vectorise the serial
   NaN-aware scan (a loop-carried select with a side condition): 10x slower than NumPy.
   Here four SSE2 accumulators take max/min lane-wise (maxps(acc, x) gives x on ties)
   while a separate unordered-compare mask records any NaN (NaN lanes are then
   irrelevant); lanes are combined at the end, and a zero result is resolved to the last
   zero of the input, so the answer equals the serial fold's bit for bit. */
#include <math.h>
#define NDWS_PICK(want_max, best, v) \
    ((want_max) ? ((((v) >= (best)) || (v) != (v)) && (best) == (best) ? (v) : (best)) \
                : ((((v) <= (best)) || (v) != (v)) && (best) == (best) ? (v) : (best)))
#if defined(__SSE2__)
#include <emmintrin.h>
#define NDWS_EXTREME_SIMD(NAME, T, VT, W, LOADU, MAX, MIN, CMPUNORD, OR, MOVEMASK, STOREU) \
static T NAME(const T *a, Py_ssize_t n, int want_max) { \
    Py_ssize_t i, k; T best, v, lanes[4 * W]; VT m0, m1, m2, m3, u; \
    if (n < 8 * W) { \
        best = a[0]; \
        for (i = 1; i < n; i++) { v = a[i]; best = NDWS_PICK(want_max, best, v); } \
        return best; \
    } \
    m0 = LOADU(a); m1 = LOADU(a + W); m2 = LOADU(a + 2 * W); m3 = LOADU(a + 3 * W); \
    u = OR(OR(CMPUNORD(m0, m0), CMPUNORD(m1, m1)), OR(CMPUNORD(m2, m2), CMPUNORD(m3, m3))); \
    i = 4 * W; \
    if (want_max) { \
        for (; i + 4 * W <= n; i += 4 * W) { \
            VT v0 = LOADU(a + i), v1 = LOADU(a + i + W); \
            VT v2 = LOADU(a + i + 2 * W), v3 = LOADU(a + i + 3 * W); \
            u = OR(u, OR(OR(CMPUNORD(v0, v0), CMPUNORD(v1, v1)), \
                         OR(CMPUNORD(v2, v2), CMPUNORD(v3, v3)))); \
            m0 = MAX(m0, v0); m1 = MAX(m1, v1); m2 = MAX(m2, v2); m3 = MAX(m3, v3); \
        } \
    } else { \
        for (; i + 4 * W <= n; i += 4 * W) { \
            VT v0 = LOADU(a + i), v1 = LOADU(a + i + W); \
            VT v2 = LOADU(a + i + 2 * W), v3 = LOADU(a + i + 3 * W); \
            u = OR(u, OR(OR(CMPUNORD(v0, v0), CMPUNORD(v1, v1)), \
                         OR(CMPUNORD(v2, v2), CMPUNORD(v3, v3)))); \
            m0 = MIN(m0, v0); m1 = MIN(m1, v1); m2 = MIN(m2, v2); m3 = MIN(m3, v3); \
        } \
    } \
    if (MOVEMASK(u)) return (T)NAN; \
    STOREU(lanes, m0); STOREU(lanes + W, m1); STOREU(lanes + 2 * W, m2); \
    STOREU(lanes + 3 * W, m3); \
    best = lanes[0]; \
    for (k = 1; k < 4 * W; k++) { v = lanes[k]; best = NDWS_PICK(want_max, best, v); } \
    for (; i < n; i++) { \
        v = a[i]; \
        if (v != v) return v; \
        best = NDWS_PICK(want_max, best, v); \
    } \
    if (best == 0) { \
        for (i = n - 1; i >= 0; i--) if (a[i] == 0) return a[i]; \
    } \
    return best; \
}
NDWS_EXTREME_SIMD(ndws_extreme_f32, float, __m128, 4, _mm_loadu_ps, _mm_max_ps, _mm_min_ps,
                  _mm_cmpunord_ps, _mm_or_ps, _mm_movemask_ps, _mm_storeu_ps)
NDWS_EXTREME_SIMD(ndws_extreme_f64, double, __m128d, 2, _mm_loadu_pd, _mm_max_pd,
                  _mm_min_pd, _mm_cmpunord_pd, _mm_or_pd, _mm_movemask_pd, _mm_storeu_pd)
/* index of the first element equal to `value` (or the first NaN when value is NaN), n if
   none: argmax's second pass, W elements per compare */
#define NDWS_FIND_SIMD(NAME, T, VT, W, LOADU, SET1, CMPEQ, CMPUNORD, MOVEMASK) \
static Py_ssize_t NAME(const T *a, Py_ssize_t n, T value) { \
    Py_ssize_t i = 0; int bits; VT key = SET1(value); \
    if (value != value) { \
        for (; i + W <= n; i += W) { \
            VT v = LOADU(a + i); bits = MOVEMASK(CMPUNORD(v, v)); \
            if (bits) return i + __builtin_ctz(bits); \
        } \
        for (; i < n; i++) if (a[i] != a[i]) return i; \
    } else { \
        for (; i + W <= n; i += W) { \
            bits = MOVEMASK(CMPEQ(LOADU(a + i), key)); \
            if (bits) return i + __builtin_ctz(bits); \
        } \
        for (; i < n; i++) if (a[i] == value) return i; \
    } \
    return n; \
}
NDWS_FIND_SIMD(ndws_find_f32, float, __m128, 4, _mm_loadu_ps, _mm_set1_ps, _mm_cmpeq_ps,
               _mm_cmpunord_ps, _mm_movemask_ps)
NDWS_FIND_SIMD(ndws_find_f64, double, __m128d, 2, _mm_loadu_pd, _mm_set1_pd, _mm_cmpeq_pd,
               _mm_cmpunord_pd, _mm_movemask_pd)
#else
#define NDWS_EXTREME_C(NAME, T) \
static T NAME(const T *a, Py_ssize_t n, int want_max) { \
    Py_ssize_t i; T best = a[0], v; \
    for (i = 1; i < n; i++) { v = a[i]; best = NDWS_PICK(want_max, best, v); } \
    return best; \
}
NDWS_EXTREME_C(ndws_extreme_f32, float)
NDWS_EXTREME_C(ndws_extreme_f64, double)
#define NDWS_FIND_C(NAME, T) \
static Py_ssize_t NAME(const T *a, Py_ssize_t n, T value) { \
    Py_ssize_t i; \
    for (i = 0; i < n; i++) if (value != value ? a[i] != a[i] : a[i] == value) return i; \
    return n; \
}
NDWS_FIND_C(ndws_find_f32, float)
NDWS_FIND_C(ndws_find_f64, double)
#endif

#endif /* NDWS_CMATH_H */
