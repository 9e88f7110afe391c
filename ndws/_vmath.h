/* ndws' own exp, expm1, tanh, sigmoid, and float32 log1p and erfc: branch-free scalar
 * functions that gcc vectorises inside a loop, one definition for the core's ufuncs
 * (ndws/_cmath.h includes this file) and ndws.nn's kernels (ndws/nn/_math.pxd, through
 * ndws/_vmath.pxd). glibc's expf/tanhf/exp/tanh are a call per element that no loop around
 * them can vectorise: tanh over 1M float32 took 34 ms in the nn kernels against NumPy's 0.4 ms.
 *
 * Accuracy against extended precision (tests/test_activations.py sweeps tanh, sigmoid and, below
 * 0 through ELU, expm1): exp within 1.0 ulp (float32) and 1.7 ulp (float64), tanh within 1.3 ulp,
 * sigmoid within 2.5 ulp, expm1 within 1.1 ulp (largest errors measured: 0.98, 1.64, 1.19,
 * 2.40, and 0.80 / 1.04 ulp); float32 log1p within 1.44 ulp of log1pl over every 7th float
 * (checked once by a C sweep; tests/test_activations.py sweeps softplus, which uses it); NaN in
 * gives NaN out, +-inf
 * their limits, and no special input raises a floating-point flag
 * (the ufuncs report flags to NumPy's errstate). Plain C, no -ffast-math: every element takes
 * the same separately rounded operations whatever the vector width, so a loop built for AVX-512
 * gives the bits of the scalar code when it is compiled without contraction
 * (fp-contract=off, as ndws/nn/_rnn_cell.h does). */
#ifndef NDWS_VMATH_H
#define NDWS_VMATH_H

/* Always inlined: they exist to be inlined into loops, and gcc does not inline a plain inline
   function into one built with other options (the per-instruction-set clones of
   nn/_rnn_cell.h, optimize("fp-contract=off")): the LSTM cell then made 33 calls per unit. */
#if defined(__GNUC__) || defined(__clang__)
#define NDWS_VINLINE static inline __attribute__((always_inline))
#else
#define NDWS_VINLINE static inline
#endif

#include <stdint.h>
#include <string.h>
/* float32 exp and tanh as branch-free loops gcc vectorises (SSE2 baseline, no -ffast-math):
   glibc's expf/tanhf are a call per element (~5-10 ns), which dominated small calls.
   Every range test is done on the integer bits: C's < and > on floats are signalling
   comparisons (cmpltps/comiss raise "invalid" on a quiet NaN, which libm never does), and
   integer tests raise no flag at all. NaN/inf lanes run the arithmetic on a harmless 0 and
   their result is selected at the end, so they raise nothing either. */
NDWS_VINLINE float ndws_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
NDWS_VINLINE uint32_t ndws_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
/* c ? a : b on bits as mask arithmetic: gcc's if-conversion leaves some ?: as branches,
   which stop the vectoriser */
NDWS_VINLINE uint32_t ndws_sel(int c, uint32_t a, uint32_t b) {
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
   flag) or underflows (0/subnormal, underflow flag) in a real multiplication, as libm.
   ndws_expf_poly returns p and n, ndws_expf_core applies the scale. */
NDWS_VINLINE float ndws_expf_poly(float x, int32_t* n_out) {
    const float shift = 12582912.0f;                   /* 1.5 * 2^23 */
    float t = x * 1.44269504088896341f + shift;
    float nf = t - shift;
    *n_out = (int32_t)ndws_f32_bits(t) - (int32_t)0x4b400000;
    float r = x - nf * 0.693359375f;
    r = r - nf * -2.12194440e-4f;
    float z = r * r;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    return p * z + r + 1.0f;
}

NDWS_VINLINE float ndws_expf_core(float x) {
    int32_t n;
    float p = ndws_expf_poly(x, &n);
    int32_t n1 = n >> 1;
    int32_t n2 = n - n1;
    float s1 = ndws_f32_from_bits((uint32_t)(n1 + 127) << 23);
    float s2 = ndws_f32_from_bits((uint32_t)(n2 + 127) << 23);
    return (p * s1) * s2;
}

/* ndws_expf_core for -131 < x < 43 (n in [-189, 63]), the range of sigmoid's exp(-|x|) and
   tanh's exp(2|x|): p * 2^(n+64) is then normal, so exact, and the product by 2^-64 rounds
   once, to the value the two halves give (the correctly scaled p * 2^n either way: the same
   bits) with four integer operations fewer. */
NDWS_VINLINE float ndws_expf_mid(float x) {
    int32_t n;
    float p = ndws_expf_poly(x, &n);
    float s = ndws_f32_from_bits((uint32_t)(n + 191) << 23);     /* 2^(n + 64) */
    return (p * s) * 0x1p-64f;
}

NDWS_VINLINE float ndws_expf1(float x) {
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
NDWS_VINLINE float ndws_tanhf1(float x) {
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
    float e = ndws_expf_mid(a + a);
    float large = 1.0f - 2.0f / (e + 1.0f);
    uint32_t ib = ndws_sel(ax < 0x3f200000u, ndws_f32_bits(small), ndws_f32_bits(large));
    ib = ndws_sel(ax < 0x39800000u, ax, ib);
    ib = ndws_sel(ax > 0x7f800000u, ix, ib | sg);
    return ndws_f32_from_bits(ib);
}


/* sigmoid(x) = 1 / (1 + exp(-x)), from e = exp(-|x|) only (it never overflows): 1 / (1 + e)
   for x >= 0, e / (1 + e) below, chosen on the sign bit. The formulas of ndws' earlier scalar
   sigmoid, with this file's exp specialised to -|x| (the LSTM cell runs three per unit): -|x| is
   clamped at -105 as ndws_expf1 clamps (e is 0 below -103.98 either way), and ndws_expf1's
   other cases need nothing: below 2^-30 the polynomial's 1 - |x| rounds to its exp(0) = 1,
   -inf computes on -105 (e = 0), and a NaN is put back at the end, the input with its sign bit
   set and quieted, as the division by 1 + NaN made it. The same bits as through ndws_expf1
   (compared on all 2^32 inputs), for about a sixth fewer operations. */
NDWS_VINLINE float ndws_sigmoidf1(float x) {
    uint32_t ix = ndws_f32_bits(x);
    uint32_t ax = ix & 0x7fffffffu;
    float e = ndws_expf_mid(ndws_f32_from_bits(ndws_sel(ax > 0x42d20000u, 0xc2d20000u,
                                                        ix | 0x80000000u)));
    float num = ndws_f32_from_bits(ndws_sel((ix >> 31) != 0, ndws_f32_bits(e), 0x3f800000u));
    float y = num / (1.0f + e);
    return ndws_f32_from_bits(ndws_sel(ax > 0x7f800000u, ix | 0x80400000u, ndws_f32_bits(y)));
}

/* expm1(x) = exp(x) - 1 without the cancellation near 0: x = n*ln2 + r (|r| <= ln2/2, ln2 split
   as in ndws_expf_core), expm1(r) by its Taylor series to r^8 (the first omitted term is below
   2^-30 of the result on that range), then expm1(x) = 2^n expm1(r) + (2^n - 1): the product is
   exact and 2^n - 1 too for |n| <= 24, so the result rounds once. x is clamped to [-20, 20]:
   below, expm1 is -1 in float32 (e^-20 < 2^-25); above 20, exp(x) - 1 rounds to exp(x) and
   that takes over (overflow to inf beyond 88.72). x = +-0 and NaN return x; -inf gives -1.
   Accuracy against extended precision: tests/test_activations.py sweeps it. */
NDWS_VINLINE float ndws_expm1f1(float x) {
    const float shift = 12582912.0f;                   /* 1.5 * 2^23 */
    uint32_t ix = ndws_f32_bits(x);
    uint32_t ax = ix & 0x7fffffffu;
    int neg = (ix >> 31) != 0;
    int big = !neg & (ax > 0x41a00000u);               /* x > 20 (+inf; NaN: below) */
    uint32_t cx = ndws_sel(neg & (ax > 0x41a00000u), 0xc1a00000u, ix);       /* x < -20: -20 */
    cx = ndws_sel(big | (ax > 0x7f800000u), 0u, cx);  /* the big and NaN lanes compute on 0 */
    float c = ndws_f32_from_bits(cx);
    float t = c * 1.44269504088896341f + shift;
    float nf = t - shift;
    int32_t n = (int32_t)ndws_f32_bits(t) - (int32_t)0x4b400000;
    float r = c - nf * 0.693359375f;
    r = r - nf * -2.12194440e-4f;
    float p = 2.48015873e-5f;                          /* 1/8! */
    p = p * r + 1.98412698e-4f;                        /* 1/7! */
    p = p * r + 1.38888889e-3f;
    p = p * r + 8.33333333e-3f;
    p = p * r + 4.16666667e-2f;
    p = p * r + 1.66666667e-1f;
    p = p * r + 0.5f;
    float em = r + (r * r) * p;
    float sc = ndws_f32_from_bits((uint32_t)(n + 127) << 23);
    float y = sc * em + (sc - 1.0f);
    float e = ndws_expf1(x) - 1.0f;                    /* x > 20 */
    uint32_t iy = ndws_sel(big, ndws_f32_bits(e), ndws_f32_bits(y));
    iy = ndws_sel((ax == 0u) | (ax > 0x7f800000u), ix, iy);
    return ndws_f32_from_bits(iy);
}

/* erfc(x) in float32, branch-free: Numerical Recipes' erfcc (a Chebyshev fit whose fractional
   error is below 1.2e-7 for every x in exact arithmetic): t = 1/(1 + |x|/2), erfc(|x|) =
   t exp(t P(t) - 1.26551223 - x^2), and erfc(x) = 2 - erfc(|x|) for x < 0. One exp and one
   division. In float32 the rounding of x^2 adds a relative error of about x^2 2^-24, so the
   largest relative error is 7.8e-6, at |x| = 8.7 where erfc is 1e-34; GELU, its user, rounds
   its own argument x/sqrt(2) with an error of the same size (tests/test_activations.py sweeps
   GELU). NaN gives NaN, erfc(+inf) = 0 (t = 0 and exp(-inf) = 0, no inf * 0), erfc(-inf) = 2. */
NDWS_VINLINE float ndws_erfcf1(float x) {
    uint32_t ix = ndws_f32_bits(x);
    float z = ndws_f32_from_bits(ix & 0x7fffffffu);
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    float r = t * ndws_expf1(p - z * z);
    return ndws_f32_from_bits(ndws_sel((ix >> 31) != 0, ndws_f32_bits(2.0f - r),
                                       ndws_f32_bits(r)));
}

/* log1p(x) in float32, branch-free: u = 1 + x rounded, then log1p(x) = log(u) - ((u - 1) - x) / u
   (the second term puts back what rounding 1 + x lost; for |x| < 2^-25, u is 1 and the result
   is x itself), with log(u) as Cephes logf (S. L. Moshier): u = m 2^e, m in [sqrt(1/2),
   sqrt(2)), log(m) = f - f^2/2 + f^3 P(f) with f = m - 1 (Cephes' coefficients), plus e ln2 in
   two parts. x = -1 gives -inf, x < -1 NaN, +inf inf; NaN and +-0 return x. No special input
   raises a flag: those lanes compute on 1 and their result is selected. */
NDWS_VINLINE float ndws_log1pf1(float x) {
    uint32_t ix = ndws_f32_bits(x);
    uint32_t ax = ix & 0x7fffffffu;
    int neg = (ix >> 31) != 0;
    /* special: NaN, +inf, x <= -1 (including -inf), +-0 */
    int nan_ = ax > 0x7f800000u;
    int pinf = ix == 0x7f800000u;
    int minus1 = ix == 0xbf800000u;
    int below = neg & (ax > 0x3f800000u);
    int zero = ax == 0u;
    int special = nan_ | pinf | minus1 | below | zero;
    float c = ndws_f32_from_bits(ndws_sel(special, 0x3f800000u, ix));     /* 1.0: harmless */
    float u = 1.0f + c;
    uint32_t iu = ndws_f32_bits(u);
    int32_t e = (int32_t)(iu >> 23) - 127;
    float m = ndws_f32_from_bits((iu & 0x007fffffu) | 0x3f800000u);        /* [1, 2) */
    int big = m > 1.41421356f;
    m = ndws_f32_from_bits(ndws_sel(big, ndws_f32_bits(m * 0.5f), ndws_f32_bits(m)));
    e = e + big;
    float f = m - 1.0f;
    float z = f * f;
    float y = 7.0376836292E-2f;
    y = y * f - 1.1514610310E-1f;
    y = y * f + 1.1676998740E-1f;
    y = y * f - 1.2420140846E-1f;
    y = y * f + 1.4249322787E-1f;
    y = y * f - 1.6668057665E-1f;
    y = y * f + 2.0000714765E-1f;
    y = y * f - 2.4999993993E-1f;
    y = y * f + 3.3333331174E-1f;
    y = y * f * z;
    float fe = (float)e;
    y = y + fe * -2.12194440e-4f;
    y = y - 0.5f * z;
    float lg = f + y;
    lg = lg + fe * 0.693359375f;
    float r = lg - ((u - 1.0f) - c) / u;
    uint32_t res = ndws_f32_bits(r);
    res = ndws_sel(zero | nan_ | pinf, ix, res);
    res = ndws_sel(minus1, 0xff800000u, res);                              /* -inf */
    res = ndws_sel(below, 0x7fc00000u, res);                               /* NaN */
    return ndws_f32_from_bits(res);
}

/* ------------------------------------------------------------------------------------------- */
/* float64: the same constructions on 64-bit bits. */

NDWS_VINLINE double ndws_f64_from_bits(uint64_t u) { double f; memcpy(&f, &u, 8); return f; }
NDWS_VINLINE uint64_t ndws_f64_bits(double f) { uint64_t u; memcpy(&u, &f, 8); return u; }
NDWS_VINLINE uint64_t ndws_sel64(int c, uint64_t a, uint64_t b) {
    uint64_t m = (uint64_t)0 - (uint64_t)(c != 0);
    return (a & m) | (b & ~m);
}

/* exp(x) for |x| <= 746, without special cases: Cephes exp (x = n*ln2 + r with ln2 split in
   C1 (15 significant bits: n*C1 exact) and C2, then Cephes' Pade form
   1 + 2 r P(r^2) / (Q(r^2) - r P(r^2)), relative error below 2.2e-16), n rounded by adding
   1.5*2^52, the scale 2^n applied as two normal halves as in ndws_expf_core. */
NDWS_VINLINE double ndws_exp_core(double x) {
    const double shift = 6755399441055744.0;           /* 1.5 * 2^52 */
    double t = x * 1.4426950408889634073599 + shift;
    double nf = t - shift;
    int64_t n = (int64_t)ndws_f64_bits(t) - (int64_t)0x4338000000000000LL;
    double r = x - nf * 6.93145751953125E-1;
    r = r - nf * 1.42860682030941723212E-6;
    double z = r * r;
    double p = 1.26177193074810590878E-4;
    p = p * z + 3.02994407707441961300E-2;
    p = p * z + 9.99999999999999999910E-1;
    p = p * r;
    double q = 3.00198505138664455042E-6;
    q = q * z + 2.52448340349684104192E-3;
    q = q * z + 2.27265548208155028766E-1;
    q = q * z + 2.00000000000000000009E0;
    double e = 1.0 + 2.0 * (p / (q - p));
    int64_t n1 = n >> 1;
    int64_t n2 = n - n1;
    double s1 = ndws_f64_from_bits((uint64_t)(n1 + 1023) << 52);
    double s2 = ndws_f64_from_bits((uint64_t)(n2 + 1023) << 52);
    return (e * s1) * s2;
}

NDWS_VINLINE double ndws_exp1(double x) {
    uint64_t ix = ndws_f64_bits(x);
    uint64_t ax = ix & 0x7fffffffffffffffULL;
    /* |x| > 746: inf or 0 (clamped, still overflowing / underflowing in the last product);
       |x| < 2^-60: 1 (computed as exp(0): r*r would underflow); NaN and +-inf exactly */
    uint64_t cx = ndws_sel64(ax > 0x4087500000000000ULL,
                             (ix & 0x8000000000000000ULL) | 0x4087500000000000ULL, ix);
    cx = ndws_sel64((ax < 0x3c30000000000000ULL) | (ax >= 0x7ff0000000000000ULL), 0u, cx);
    double y = ndws_exp_core(ndws_f64_from_bits(cx));
    uint64_t sp = ndws_sel64((ax > 0x7ff0000000000000ULL) | (ix == 0x7ff0000000000000ULL),
                             ix, 0u);
    return ndws_f64_from_bits(ndws_sel64(ax >= 0x7ff0000000000000ULL, sp, ndws_f64_bits(y)));
}

/* tanh(x): Cephes tanh: x + x^3 P(x^2)/Q(x^2) for |x| < 0.625, 1 - 2/(exp(2|x|) + 1) above,
   both computed and one kept; |x| clamped to [2^-28, 22] (tanh is x below, 1.0 above) and the
   sign put back as a bit. */
NDWS_VINLINE double ndws_tanh1(double x) {
    uint64_t ix = ndws_f64_bits(x);
    uint64_t ax = ix & 0x7fffffffffffffffULL;
    uint64_t sg = ix & 0x8000000000000000ULL;
    uint64_t ca = ndws_sel64(ax > 0x4036000000000000ULL, 0x4036000000000000ULL,   /* 22, 2^-28 */
                             ndws_sel64(ax < 0x3e30000000000000ULL, 0x3e30000000000000ULL, ax));
    double a = ndws_f64_from_bits(ca);
    double z = a * a;
    double p = -9.64399179425052238628E-1;
    p = p * z - 9.92877231001918586564E1;
    p = p * z - 1.61468768441708447952E3;
    double q = z + 1.12811678491632931402E2;
    q = q * z + 2.23548839060100448583E3;
    q = q * z + 4.84406305325125486048E3;
    double small = a + a * (z * (p / q));
    double e = ndws_exp_core(a + a);
    double large = 1.0 - 2.0 / (e + 1.0);
    uint64_t ib = ndws_sel64(ax < 0x3fe4000000000000ULL, ndws_f64_bits(small),
                             ndws_f64_bits(large));
    ib = ndws_sel64(ax < 0x3e30000000000000ULL, ax, ib);
    ib = ndws_sel64(ax > 0x7ff0000000000000ULL, ix, ib | sg);
    return ndws_f64_from_bits(ib);
}

/* expm1 in float64: ndws_expm1f1's construction with ndws_exp_core's ln2 split, the Taylor
   series to r^14 (the first omitted term below 2^-60 of the result), x clamped to [-40, 40]
   (e^-40 < 2^-57; above 40, exp(x) - 1 rounds to exp(x)). */
NDWS_VINLINE double ndws_expm1d1(double x) {
    const double shift = 6755399441055744.0;           /* 1.5 * 2^52 */
    uint64_t ix = ndws_f64_bits(x);
    uint64_t ax = ix & 0x7fffffffffffffffULL;
    int neg = (ix >> 63) != 0;
    int big = !neg & (ax > 0x4044000000000000ULL);     /* x > 40 */
    uint64_t cx = ndws_sel64(neg & (ax > 0x4044000000000000ULL), 0xc044000000000000ULL, ix);
    cx = ndws_sel64(big | (ax > 0x7ff0000000000000ULL), 0u, cx);
    double c = ndws_f64_from_bits(cx);
    double t = c * 1.4426950408889634073599 + shift;
    double nf = t - shift;
    int64_t n = (int64_t)ndws_f64_bits(t) - (int64_t)0x4338000000000000LL;
    double r = c - nf * 6.93145751953125E-1;
    r = r - nf * 1.42860682030941723212E-6;
    double p = 1.1470745597729725e-11;                 /* 1/14! */
    p = p * r + 1.6059043836821613e-10;                /* 1/13! */
    p = p * r + 2.08767569878681e-09;
    p = p * r + 2.505210838544172e-08;
    p = p * r + 2.755731922398589e-07;
    p = p * r + 2.7557319223985893e-06;
    p = p * r + 2.48015873015873e-05;
    p = p * r + 0.0001984126984126984;
    p = p * r + 0.001388888888888889;
    p = p * r + 0.008333333333333333;
    p = p * r + 0.041666666666666664;
    p = p * r + 0.16666666666666666;
    p = p * r + 0.5;
    double em = r + (r * r) * p;
    double sc = ndws_f64_from_bits((uint64_t)(n + 1023) << 52);
    double y = sc * em + (sc - 1.0);
    double e = ndws_exp1(x) - 1.0;                     /* x > 40 */
    uint64_t iy = ndws_sel64(big, ndws_f64_bits(e), ndws_f64_bits(y));
    iy = ndws_sel64((ax == 0u) | (ax > 0x7ff0000000000000ULL), ix, iy);
    return ndws_f64_from_bits(iy);
}

NDWS_VINLINE double ndws_sigmoid1(double x) {
    uint64_t ix = ndws_f64_bits(x);
    double e = ndws_exp1(ndws_f64_from_bits(ix | 0x8000000000000000ULL));
    double num = ndws_f64_from_bits(ndws_sel64((ix >> 63) != 0, ndws_f64_bits(e),
                                               0x3ff0000000000000ULL));
    return num / (1.0 + e);
}

#endif /* NDWS_VMATH_H */
