# Native element-wise and reduction kernels of the core (included by _core.pyx).
#
# Two layers, as everywhere in ndws: `cdef ... noexcept nogil` loops over raw pointers and
# lengths (fused float32/float64; no Python objects, no memoryviews), and the dispatchers in
# _core.pyx ("Native fast paths") that validate, place the output and release the GIL. Every
# loop here reads and writes only the buffers its caller passes; the caller keeps the owning
# NDArrays (and so their MemoryBlocks) alive for the whole call.
#
# Floating-point semantics are NumPy's, bit for bit where NumPy's own loop is plain C
# (+ - * / max min neg abs square sqrt, and the summation order of np.add.reduce); the build
# never uses -ffast-math, so the compiler may not reassociate anything written here.

from libc.math cimport sqrt as c_sqrt, sqrtf, exp as c_exp, expf, log as c_log, logf
from libc.math cimport tanh as c_tanh, tanhf, fabs, fabsf
from cython.parallel cimport prange, parallel, threadid
from ndws._typedefs cimport float32_t, float64_t, floating_t

cdef extern from *:
    """
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
    """
    void ndws_fpe_clear() noexcept nogil
    int ndws_fpe_read() noexcept nogil

cdef extern from *:
    """
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
    """
    void ndws_sqrt_loop_f32(float32_t* o, const float32_t* x, Py_ssize_t n) noexcept nogil
    void ndws_sqrt_loop_f64(float64_t* o, const float64_t* x, Py_ssize_t n) noexcept nogil


cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* float32 exp and tanh as branch-free loops gcc vectorises (SSE2 baseline, no -ffast-math):
       glibc's expf/tanhf are a call per element (~5-10 ns), which dominated small calls.
       Every range test is done on the integer bits: C's < and > on floats are signalling
       comparisons (cmpltps/comiss raise "invalid" on a quiet NaN, which libm never does), and
       integer tests raise no flag at all. NaN/inf lanes run the arithmetic on a harmless 0 and
       their result is selected at the end, so they raise nothing either. */
    static inline float ndws_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
    static inline uint32_t ndws_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
    /* c ? a : b on bits as mask arithmetic: gcc's if-conversion leaves some ?: as branches,
       which stop the vectoriser */
    static inline uint32_t ndws_sel(int c, uint32_t a, uint32_t b) {
        uint32_t m = (uint32_t)0 - (uint32_t)(c != 0);
        return (a & m) | (b & ~m);
    }

    /* exp(x) for |x| <= 105, without special cases. Cephes expf (S. L. Moshier, Cephes
       Math Library 2.2): x = n*ln2 + r, |r| <= ln2/2, ln2 split in two constants (C1 has 9
       significant bits, so n*C1 is exact for |n| < 2^15 and x - n*C1 loses nothing), then a
       degree-6 polynomial 1 + r + r^2*P(r) (Cephes' coefficients, relative error < 1 ulp).
       n = round(x*log2(e)) by adding 1.5*2^23 (round-to-nearest in the FPU; the low bits of the
       sum are n, no float->int conversion). The result is p * 2^n1 * 2^n2 with n1 + n2 = n and both
       halves normal: p * 2^n1 is exact, the second product rounds once, so results in the
       subnormal range are correctly scaled and an out-of-range result overflows (inf, overflow
       flag) or underflows (0/subnormal, underflow flag) in a real multiplication, as libm. */
    static inline float ndws_expf_core(float x) {
        const float shift = 12582912.0f;                   /* 1.5 * 2^23 */
        float t = x * 1.44269504088896341f + shift;
        float nf = t - shift;
        int32_t n = (int32_t)ndws_f32_bits(t) - (int32_t)0x4b400000;
        float r = x - nf * 0.693359375f;
        r = r - nf * -2.12194440e-4f;
        float z = r * r;
        float p = 1.9875691500E-4f;
        p = p * r + 1.3981999507E-3f;
        p = p * r + 8.3334519073E-3f;
        p = p * r + 4.1665795894E-2f;
        p = p * r + 1.6666665459E-1f;
        p = p * r + 5.0000001201E-1f;
        p = p * z + r + 1.0f;
        int32_t n1 = n >> 1;
        int32_t n2 = n - n1;
        float s1 = ndws_f32_from_bits((uint32_t)(n1 + 127) << 23);
        float s2 = ndws_f32_from_bits((uint32_t)(n2 + 127) << 23);
        return (p * s1) * s2;
    }

    static inline float ndws_expf1(float x) {
        uint32_t ix = ndws_f32_bits(x);
        uint32_t ax = ix & 0x7fffffffu;
        /* |x| > 105: exp is inf (x > 88.72) or 0 (x < -103.98) in float32; clamping keeps n in
           range and still overflows / underflows in the final product. |x| < 2^-30: the result
           is 1 and r*r would underflow (a flag libm does not raise): compute exp(0) instead. */
        uint32_t cx = ndws_sel(ax > 0x42d20000u, (ix & 0x80000000u) | 0x42d20000u, ix);
        cx = ndws_sel((ax < 0x30800000u) | (ax >= 0x7f800000u), 0u, cx);
        float y = ndws_expf_core(ndws_f32_from_bits(cx));
        uint32_t iy = ndws_f32_bits(y);
        /* exp(NaN) = NaN, exp(+inf) = inf, exp(-inf) = 0, all exact and without flags */
        uint32_t sp = ndws_sel((ax > 0x7f800000u) | (ix == 0x7f800000u), ix, 0u);
        return ndws_f32_from_bits(ndws_sel(ax >= 0x7f800000u, sp, iy));
    }

    /* tanh(x): Cephes tanhf: for |x| < 0.625 the odd polynomial x + x^3*P(x^2) (Cephes'
       coefficients), above 1 - 2/(exp(2|x|) + 1); both are computed (branch-free) and one kept.
       |x| is clamped to 20 (tanh is 1.0f from ~9.01 on, and exp(40) cannot overflow) and from
       below to 2^-12, under which tanh(x) rounds to x (returned as is; x^2 would underflow).
       The sign is put back as a bit, so tanh(-0) = -0 and tanh(+-inf) = +-1; NaN returns x. */
    static inline float ndws_tanhf1(float x) {
        uint32_t ix = ndws_f32_bits(x);
        uint32_t ax = ix & 0x7fffffffu;
        uint32_t sg = ix & 0x80000000u;
        uint32_t ca = ndws_sel(ax > 0x41a00000u, 0x41a00000u,              /* 20.0f, 2^-12 */
                               ndws_sel(ax < 0x39800000u, 0x39800000u, ax));
        float a = ndws_f32_from_bits(ca);
        float z = a * a;
        float p = -5.70498872745E-3f;
        p = p * z + 2.06390887954E-2f;
        p = p * z - 5.37397155531E-2f;
        p = p * z + 1.33314422036E-1f;
        p = p * z - 3.33332819422E-1f;
        float small = p * z * a + a;
        float e = ndws_expf_core(a + a);
        float large = 1.0f - 2.0f / (e + 1.0f);
        uint32_t ib = ndws_sel(ax < 0x3f200000u, ndws_f32_bits(small), ndws_f32_bits(large));
        ib = ndws_sel(ax < 0x39800000u, ax, ib);
        ib = ndws_sel(ax > 0x7f800000u, ix, ib | sg);
        return ndws_f32_from_bits(ib);
    }

    static void ndws_exp_loop_f32(float *o, const float *x, Py_ssize_t n) {
        for (Py_ssize_t i = 0; i < n; i++) o[i] = ndws_expf1(x[i]);
    }
    static void ndws_tanh_loop_f32(float *o, const float *x, Py_ssize_t n) {
        for (Py_ssize_t i = 0; i < n; i++) o[i] = ndws_tanhf1(x[i]);
    }
    """
    void ndws_exp_loop_f32(float32_t* o, const float32_t* x, Py_ssize_t n) noexcept nogil
    void ndws_tanh_loop_f32(float32_t* o, const float32_t* x, Py_ssize_t n) noexcept nogil


cdef extern from *:
    """
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
    """
    int ndws_give_fpe(const char* name, int flags) except -1


# Operation codes shared by the dispatchers and the loops.
cdef enum:
    OP_ADD = 0
    OP_SUB = 1
    OP_MUL = 2
    OP_DIV = 3
    OP_MAX = 4
    OP_MIN = 5
    OP_NEG = 16
    OP_ABS = 17
    OP_SQUARE = 18
    OP_SQRT = 19
    OP_EXP = 20
    OP_LOG = 21
    OP_TANH = 22
    OP_RECIP = 23

cdef enum:
    RED_SUM = 0
    RED_MEAN = 1
    RED_MAX = 2
    RED_MIN = 3
    RED_ARGMAX = 4
    RED_ARGMIN = 5
    RED_VAR = 6
    RED_STD = 7

# NumPy's pairwise-summation leaf size (PW_BLOCKSIZE in numpy/_core/src/umath/loops_utils.h.src):
# copying it makes our sums the same tree, so the same bits, as np.add.reduce's.
cdef enum:
    PW_BLOCKSIZE = 128


# -- element-wise ---------------------------------------------------------------------------------

@cython.cdivision(True)
cdef inline floating_t _bin1(int op, floating_t a, floating_t b) noexcept nogil:
    if op == OP_ADD:
        return a + b
    elif op == OP_SUB:
        return a - b
    elif op == OP_MUL:
        return a * b
    elif op == OP_DIV:
        return a / b
    elif op == OP_MAX:
        # NumPy's scalar_max_f: NaN from either side propagates; on a tie (0.0 vs -0.0) the
        # second operand wins, as in NumPy's loops
        return a if ((a > b) | (a != a)) else b
    else:
        # non-short-circuit `|`: both compares always run, so gcc if-converts and vectorises
        return a if ((a < b) | (a != a)) else b


cdef inline void _bin_rows_inl(int op, floating_t* O__ij,               # OUT
                               const floating_t* X__ij, Py_ssize_t xrs, bint xvec,  # IN
                               const floating_t* Y__ij, Py_ssize_t yrs, bint yvec,  # IN
                               Py_ssize_t m, Py_ssize_t n) noexcept nogil:
    # O[i, j] := X[i, j] op Y[i, j] for i < m, j < n; O is dense (row stride n), an operand's
    # row stride is `xrs`/`yrs` elements (0 for a broadcast row) and its column stride is 1
    # (`xvec`) or 0 (one value per row: a scalar or a column). Inlined with a constant `op`, so
    # gcc emits one vectorised loop per operation. O may be X or Y exactly (in-place ops): each
    # element is read before it is written at the same index.
    cdef Py_ssize_t i, j
    cdef floating_t s
    cdef floating_t* o
    cdef const floating_t* x
    cdef const floating_t* y
    for i in range(m):
        o = O__ij + i * n
        x = X__ij + i * xrs
        y = Y__ij + i * yrs
        if xvec and yvec:
            for j in range(n):
                o[j] = _bin1(op, x[j], y[j])
        elif xvec:
            s = y[0]
            for j in range(n):
                o[j] = _bin1(op, x[j], s)
        else:
            s = x[0]
            for j in range(n):
                o[j] = _bin1(op, s, y[j])


cdef void _bin_rows(int op, floating_t* O__ij,                                # OUT
                    const floating_t* X__ij, Py_ssize_t xrs, bint xvec,       # IN
                    const floating_t* Y__ij, Py_ssize_t yrs, bint yvec,       # IN
                    Py_ssize_t m, Py_ssize_t n) noexcept nogil:
    # one branch per operation, each an inlined copy with `op` constant
    if op == OP_ADD:
        _bin_rows_inl(OP_ADD, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)
    elif op == OP_SUB:
        _bin_rows_inl(OP_SUB, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)
    elif op == OP_MUL:
        _bin_rows_inl(OP_MUL, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)
    elif op == OP_DIV:
        _bin_rows_inl(OP_DIV, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)
    elif op == OP_MAX:
        _bin_rows_inl(OP_MAX, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)
    else:
        _bin_rows_inl(OP_MIN, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)


cdef int binary_kernel(int op, floating_t* O__ij,                             # OUT
                       const floating_t* X__ij, Py_ssize_t xrs, bint xvec,    # IN
                       const floating_t* Y__ij, Py_ssize_t yrs, bint yvec,    # IN
                       Py_ssize_t m, Py_ssize_t n, int nthreads) noexcept nogil:
    """O := X op Y over an (m, n) grid (see _bin_rows_inl); returns the NPY_FPE_* flags raised.

    With several threads, rows are split statically; a single row (the dense and scalar cases)
    is split into fixed column chunks. Element-wise results do not depend on the split."""
    cdef int fl = 0
    cdef Py_ssize_t c, lo, hi, chunk
    if nthreads <= 1:
        ndws_fpe_clear()
        _bin_rows(op, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)
        return ndws_fpe_read()
    if m == 1:
        # 64-element multiples keep chunk boundaries on cache lines
        chunk = ((n + nthreads - 1) // nthreads + 63) & ~(<Py_ssize_t>63)
        for c in prange(nthreads, schedule='static', num_threads=nthreads):
            lo = c * chunk
            hi = lo + chunk
            if hi > n:
                hi = n
            if lo < hi:
                ndws_fpe_clear()
                _bin_rows(op, O__ij + lo, X__ij + (lo if xvec else 0), 0, xvec,
                          Y__ij + (lo if yvec else 0), 0, yvec, 1, hi - lo)
                fl |= ndws_fpe_read()
        return fl
    for c in prange(m, schedule='static', num_threads=nthreads):
        ndws_fpe_clear()
        _bin_rows(op, O__ij + c * n, X__ij + c * xrs, 0, xvec, Y__ij + c * yrs, 0, yvec, 1, n)
        fl |= ndws_fpe_read()
    return fl


@cython.cdivision(True)
cdef inline floating_t _un1(int op, floating_t a) noexcept nogil:
    if op == OP_NEG:
        return -a
    elif op == OP_ABS:
        if floating_t is float32_t:
            return fabsf(a)
        else:
            return fabs(a)
    elif op == OP_SQUARE:
        return a * a
    elif op == OP_SQRT:
        if floating_t is float32_t:
            return sqrtf(a)
        else:
            return c_sqrt(a)
    elif op == OP_EXP:
        if floating_t is float32_t:
            return expf(a)
        else:
            return c_exp(a)
    elif op == OP_LOG:
        if floating_t is float32_t:
            return logf(a)
        else:
            return c_log(a)
    elif op == OP_TANH:
        if floating_t is float32_t:
            return tanhf(a)
        else:
            return c_tanh(a)
    else:
        return 1 / a


cdef inline void _un_run_inl(int op, floating_t* O__i, const floating_t* X__i,
                             Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        O__i[i] = _un1(op, X__i[i])


cdef void _un_run(int op, floating_t* O__i,            # OUT
                  const floating_t* X__i,              # IN
                  Py_ssize_t n) noexcept nogil:
    # O := f(X), element-wise; O may be X exactly.
    if op == OP_NEG:
        _un_run_inl(OP_NEG, O__i, X__i, n)
    elif op == OP_ABS:
        _un_run_inl(OP_ABS, O__i, X__i, n)
    elif op == OP_SQUARE:
        _un_run_inl(OP_SQUARE, O__i, X__i, n)
    elif op == OP_SQRT:
        if floating_t is float32_t:
            ndws_sqrt_loop_f32(O__i, X__i, n)
        else:
            ndws_sqrt_loop_f64(O__i, X__i, n)
    elif op == OP_EXP:
        if floating_t is float32_t:
            ndws_exp_loop_f32(O__i, X__i, n)
        else:
            _un_run_inl(OP_EXP, O__i, X__i, n)
    elif op == OP_LOG:
        _un_run_inl(OP_LOG, O__i, X__i, n)
    elif op == OP_TANH:
        if floating_t is float32_t:
            ndws_tanh_loop_f32(O__i, X__i, n)
        else:
            _un_run_inl(OP_TANH, O__i, X__i, n)
    else:
        _un_run_inl(OP_RECIP, O__i, X__i, n)


cdef int unary_kernel(int op, floating_t* O__i,        # OUT
                      const floating_t* X__i,          # IN
                      Py_ssize_t n, int nthreads) noexcept nogil:
    """O := f(X) over n dense elements; returns the NPY_FPE_* flags raised."""
    cdef int fl = 0
    cdef Py_ssize_t c, lo, hi, chunk
    if nthreads <= 1:
        ndws_fpe_clear()
        _un_run(op, O__i, X__i, n)
        return ndws_fpe_read()
    chunk = ((n + nthreads - 1) // nthreads + 63) & ~(<Py_ssize_t>63)
    for c in prange(nthreads, schedule='static', num_threads=nthreads):
        lo = c * chunk
        hi = lo + chunk
        if hi > n:
            hi = n
        if lo < hi:
            ndws_fpe_clear()
            _un_run(op, O__i + lo, X__i + lo, hi - lo)
            fl |= ndws_fpe_read()
    return fl


# -- reductions: sums -----------------------------------------------------------------------------

cdef floating_t pairwise_sum(const floating_t* A__i, Py_ssize_t n) noexcept nogil:
    """sum(A[0:n]) by NumPy's pairwise summation (same tree, so the same bits as
    np.add.reduce; error O(log n * eps) instead of O(n * eps))."""
    cdef Py_ssize_t i, n2
    cdef floating_t res, r0, r1, r2, r3, r4, r5, r6, r7
    if n < 8:
        # -0.0 keeps the sign of a sum of negative zeros (as NumPy)
        res = -0.0
        for i in range(n):
            res = res + A__i[i]
        return res
    elif n <= PW_BLOCKSIZE:
        # eight independent accumulators: the order NumPy's loop uses (and gcc vectorises)
        r0 = A__i[0]; r1 = A__i[1]; r2 = A__i[2]; r3 = A__i[3]
        r4 = A__i[4]; r5 = A__i[5]; r6 = A__i[6]; r7 = A__i[7]
        i = 8
        while i < n - (n % 8):
            r0 = r0 + A__i[i]; r1 = r1 + A__i[i + 1]
            r2 = r2 + A__i[i + 2]; r3 = r3 + A__i[i + 3]
            r4 = r4 + A__i[i + 4]; r5 = r5 + A__i[i + 5]
            r6 = r6 + A__i[i + 6]; r7 = r7 + A__i[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res = res + A__i[i]
            i += 1
        return res
    else:
        # halve, keeping the left part a multiple of the unroll factor (NumPy's split)
        n2 = n // 2
        n2 -= n2 % 8
        return pairwise_sum(A__i, n2) + pairwise_sum(A__i + n2, n - n2)


cdef floating_t pairwise_ssd(const floating_t* A__i, Py_ssize_t n,
                             floating_t mu) noexcept nogil:
    """sum((A[0:n] - mu)**2), each deviation and square rounded to the dtype as NumPy's var
    computes them (x = a - mean; x = x*x; sum), summed over the same pairwise tree."""
    cdef Py_ssize_t i, n2
    cdef floating_t res, d, r0, r1, r2, r3, r4, r5, r6, r7
    cdef floating_t d0, d1, d2, d3, d4, d5, d6, d7
    if n < 8:
        res = -0.0
        for i in range(n):
            d = A__i[i] - mu
            res = res + d * d
        return res
    elif n <= PW_BLOCKSIZE:
        d0 = A__i[0] - mu; d1 = A__i[1] - mu; d2 = A__i[2] - mu; d3 = A__i[3] - mu
        d4 = A__i[4] - mu; d5 = A__i[5] - mu; d6 = A__i[6] - mu; d7 = A__i[7] - mu
        r0 = d0 * d0; r1 = d1 * d1; r2 = d2 * d2; r3 = d3 * d3
        r4 = d4 * d4; r5 = d5 * d5; r6 = d6 * d6; r7 = d7 * d7
        i = 8
        while i < n - (n % 8):
            d0 = A__i[i] - mu; d1 = A__i[i + 1] - mu; d2 = A__i[i + 2] - mu
            d3 = A__i[i + 3] - mu; d4 = A__i[i + 4] - mu; d5 = A__i[i + 5] - mu
            d6 = A__i[i + 6] - mu; d7 = A__i[i + 7] - mu
            r0 = r0 + d0 * d0; r1 = r1 + d1 * d1; r2 = r2 + d2 * d2; r3 = r3 + d3 * d3
            r4 = r4 + d4 * d4; r5 = r5 + d5 * d5; r6 = r6 + d6 * d6; r7 = r7 + d7 * d7
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            d = A__i[i] - mu
            res = res + d * d
            i += 1
        return res
    else:
        n2 = n // 2
        n2 -= n2 % 8
        return pairwise_ssd(A__i, n2, mu) + pairwise_ssd(A__i + n2, n - n2, mu)


# Leaves of the pairwise tree handed to threads: 2**_TREE_DEPTH of them. The tree is the serial
# one (same split rule), so a parallel sum has exactly the serial sum's bits whatever the
# thread count; the depth only decides how much work each task gets.
cdef enum:
    _TREE_DEPTH = 4
    _TREE_LEAVES = 16


cdef floating_t tree_sum(const floating_t* A__i, Py_ssize_t n, bint squares, floating_t mu,
                         int nthreads) noexcept nogil:
    """pairwise_sum (or pairwise_ssd when `squares`) of A[0:n], its top levels run in
    parallel. Requires n > PW_BLOCKSIZE * 2**_TREE_DEPTH so every node above the leaves splits."""
    cdef Py_ssize_t lo[_TREE_LEAVES]
    cdef Py_ssize_t ln[_TREE_LEAVES]
    cdef floating_t part[_TREE_LEAVES]
    cdef Py_ssize_t n2, width
    cdef int level, k, count
    lo[0] = 0
    ln[0] = n
    count = 1
    for level in range(_TREE_DEPTH):
        # split every node in place, right halves after left ones: node k -> 2k, 2k+1
        for k in range(count - 1, -1, -1):
            n2 = ln[k] // 2
            n2 -= n2 % 8
            lo[2 * k] = lo[k]
            lo[2 * k + 1] = lo[k] + n2
            ln[2 * k + 1] = ln[k] - n2
            ln[2 * k] = n2
        count *= 2
    for k in prange(_TREE_LEAVES, schedule='static', num_threads=nthreads):
        if squares:
            part[k] = pairwise_ssd(A__i + lo[k], ln[k], mu)
        else:
            part[k] = pairwise_sum(A__i + lo[k], ln[k])
    # combine in the tree's own order: (0+1), (2+3), ... level by level
    width = _TREE_LEAVES
    while width > 1:
        for k in range(width // 2):
            part[k] = part[2 * k] + part[2 * k + 1]
        width //= 2
    return part[0]


cdef Py_ssize_t rows_levels(Py_ssize_t r) noexcept nogil:
    """Scratch rows `sum_rows` needs for r rows (one per recursion level of its right halves)."""
    cdef Py_ssize_t levels = 1, n2
    while r > PW_BLOCKSIZE:
        n2 = r // 2
        n2 -= n2 % 8
        r -= n2
        levels += 1
    return levels


cdef void sum_rows(const floating_t* A__rj, Py_ssize_t r, Py_ssize_t rs, Py_ssize_t w,  # IN
                   bint squares, const floating_t* M__j,                              # IN
                   floating_t* S__j,                                                  # OUT
                   floating_t* scratch, Py_ssize_t ss) noexcept nogil:
    """S[j] := sum over r rows of A[i*rs + j] (or of (A[i*rs + j] - M[j])**2 when `squares`),
    j < w. Up to PW_BLOCKSIZE rows: sequential, row after row, which is exactly
    np.add.reduce's order along a non-last axis; above, blocks of rows are combined by the
    pairwise split (error O(log r) like the flat sum, where NumPy's would be O(r)).
    `scratch` holds rows_levels(r) - 1 rows of `ss` elements; S may not overlap A."""
    cdef Py_ssize_t i, j, n2
    cdef const floating_t* a
    cdef floating_t d
    if r <= PW_BLOCKSIZE:
        if squares:
            for j in range(w):
                d = A__rj[j] - M__j[j]
                S__j[j] = d * d
            for i in range(1, r):
                a = A__rj + i * rs
                for j in range(w):
                    d = a[j] - M__j[j]
                    S__j[j] = S__j[j] + d * d
        else:
            for j in range(w):
                S__j[j] = A__rj[j]
            for i in range(1, r):
                a = A__rj + i * rs
                for j in range(w):
                    S__j[j] = S__j[j] + a[j]
        return
    n2 = r // 2
    n2 -= n2 % 8
    sum_rows(A__rj, n2, rs, w, squares, M__j, S__j, scratch + ss, ss)
    sum_rows(A__rj + n2 * rs, r - n2, rs, w, squares, M__j, scratch, scratch + ss, ss)
    for j in range(w):
        S__j[j] = S__j[j] + scratch[j]


# -- reductions: max, min, argmax, argmin ---------------------------------------------------------

cdef inline floating_t _pick(bint want_max, floating_t best, floating_t v) noexcept nogil:
    # np.maximum(best, v) folded as NumPy's reduction does: NaN sticks once seen; on ties
    # (0.0 vs -0.0) the later value wins. Non-short-circuit `|`/`&`: no branches, so loops
    # over it vectorise.
    if want_max:
        return v if (((v >= best) | (v != v)) & (best == best)) else best
    return v if (((v <= best) | (v != v)) & (best == best)) else best


cdef extern from *:
    """
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
    """
    Py_ssize_t ndws_find_f32(const float32_t* a, Py_ssize_t n, float32_t value) noexcept nogil
    Py_ssize_t ndws_find_f64(const float64_t* a, Py_ssize_t n, float64_t value) noexcept nogil
    float32_t ndws_extreme_f32(const float32_t* a, Py_ssize_t n, int want_max) noexcept nogil
    float64_t ndws_extreme_f64(const float64_t* a, Py_ssize_t n, int want_max) noexcept nogil


cdef floating_t extreme(const floating_t* A__i, Py_ssize_t n, bint want_max) noexcept nogil:
    """max (or min) of A[0:n], n >= 1; NaN if any element is NaN (np.max's rule)."""
    if floating_t is float32_t:
        return ndws_extreme_f32(A__i, n, want_max)
    else:
        return ndws_extreme_f64(A__i, n, want_max)


cdef Py_ssize_t arg_extreme(const floating_t* A__i, Py_ssize_t n, bint want_max) noexcept nogil:
    """Index of the first max (min) of A[0:n], n >= 1, or of the first NaN (np.argmax's rule).
    Two passes that both vectorise: the extreme value, then the first element equal to it (or
    the first NaN); the first element equal to the max is the first max."""
    cdef floating_t best = extreme(A__i, n, want_max)
    cdef Py_ssize_t i
    if floating_t is float32_t:
        i = ndws_find_f32(A__i, n, best)
    else:
        i = ndws_find_f64(A__i, n, best)
    return i if i < n else 0


cdef void extreme_rows(const floating_t* A__rj, Py_ssize_t r, Py_ssize_t rs, Py_ssize_t w,
                       bint want_max,                                          # IN
                       floating_t* B__j, int64_t* K__j, bint want_arg) noexcept nogil:
    """B[j] := max (min) over r >= 1 rows of A[i*rs + j], j < w; with `want_arg`, K[j] gets
    the row index of the first max (min) or first NaN. Row after row, so it vectorises."""
    cdef Py_ssize_t i, j
    cdef const floating_t* a
    cdef floating_t b, v
    for j in range(w):
        B__j[j] = A__rj[j]
    if want_arg:
        for j in range(w):
            K__j[j] = 0
        for i in range(1, r):
            a = A__rj + i * rs
            for j in range(w):
                b = B__j[j]
                v = a[j]
                if b == b and (v != v or ((v > b) if want_max else (v < b))):
                    B__j[j] = v
                    K__j[j] = i
    else:
        for i in range(1, r):
            a = A__rj + i * rs
            for j in range(w):
                B__j[j] = _pick(want_max, B__j[j], a[j])
