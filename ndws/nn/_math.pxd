# Scalar math in the element type for ndws.nn's kernels (float32 stays in float); inline, so
# each kernel module compiles it into its own loops. exp, tanh and sigmoid are ndws' own
# branch-free functions (ndws/_vmath.h), which gcc vectorises inside those loops; libm's are a
# call per element.
from libc.math cimport (copysign, copysignf, erfc, erfcf, fabs, fabsf,
                        log, logf, log1p, sqrt, sqrtf)
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t
from ndws._vmath cimport (ndws_expf1, ndws_exp1, ndws_tanhf1, ndws_tanh1, ndws_sigmoidf1,
                          ndws_sigmoid1, ndws_log1pf1)

# the softmax rows' loops, built per instruction set (see the header)
cdef extern from "_act_loops.h" nogil:
    void ndws_shifted_exps_f32(const float32_t* X, float32_t shift, float32_t* E,
                               Py_ssize_t n) noexcept
    void ndws_shifted_exps_f64(const float64_t* X, float64_t shift, float64_t* E,
                               Py_ssize_t n) noexcept
    void ndws_sce_grad_f32(const float32_t* X, const float32_t* Q, double lse, double coef,
                           double qsum, float32_t* D, Py_ssize_t n) noexcept
    void ndws_sce_grad_f64(const float64_t* X, const float64_t* Q, double lse, double coef,
                           double qsum, float64_t* D, Py_ssize_t n) noexcept


cdef inline floating_t _exp(floating_t v) noexcept nogil:
    if floating_t is float32_t:
        return ndws_expf1(v)
    else:
        return ndws_exp1(v)


cdef inline floating_t _log(floating_t v) noexcept nogil:
    if floating_t is float32_t:
        return logf(v)
    else:
        return log(v)


cdef inline floating_t _log1p(floating_t v) noexcept nogil:
    # float32: ndws' own (vectorises; within 1 ulp, tests/test_losses.py); float64: libm's
    if floating_t is float32_t:
        return ndws_log1pf1(v)
    else:
        return log1p(v)


cdef inline floating_t _tanh(floating_t v) noexcept nogil:
    if floating_t is float32_t:
        return ndws_tanhf1(v)
    else:
        return ndws_tanh1(v)


cdef inline floating_t _erfc(floating_t v) noexcept nogil:
    if floating_t is float32_t:
        return erfcf(v)
    else:
        return erfc(v)


cdef inline floating_t _fabs(floating_t v) noexcept nogil:
    if floating_t is float32_t:
        return fabsf(v)
    else:
        return fabs(v)


cdef inline floating_t _copysign(floating_t v, floating_t sign) noexcept nogil:
    if floating_t is float32_t:
        return copysignf(v, sign)
    else:
        return copysign(v, sign)


cdef inline floating_t _sqrt(floating_t v) noexcept nogil:
    if floating_t is float32_t:
        return sqrtf(v)
    else:
        return sqrt(v)


cdef inline floating_t _sigmoid(floating_t v) noexcept nogil:
    # exp of a non-positive number only: never overflows; +-inf give exactly 1 / 0
    if floating_t is float32_t:
        return ndws_sigmoidf1(v)
    else:
        return ndws_sigmoid1(v)


cdef inline double _shifted_exps(const floating_t* X, floating_t shift, floating_t* E, intp_t n,
                                 double s) noexcept nogil:
    # E[k] := exp(X[k] - shift) over n contiguous values (a loop gcc vectorises; E may be X),
    # then s + E[0] + E[1] + ... added in that order in double: a softmax row's exponentials
    # and its running sum (the same sum to the bit whatever the block sizes a caller uses)
    cdef intp_t k
    if floating_t is float32_t:
        ndws_shifted_exps_f32(X, shift, E, n)
    else:
        ndws_shifted_exps_f64(X, shift, E, n)
    for k in range(n):
        s += E[k]
    return s
