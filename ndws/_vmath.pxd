# ndws' own branch-free exp, tanh, sigmoid, and float32 log1p and erfc (ndws/_vmath.h: one
# definition for the core's ufuncs and ndws.nn's kernels); accuracy and NaN/inf rules are there.
cdef extern from "_vmath.h" nogil:
    float ndws_expf1(float x) noexcept
    float ndws_tanhf1(float x) noexcept
    float ndws_sigmoidf1(float x) noexcept
    double ndws_exp1(double x) noexcept
    double ndws_tanh1(double x) noexcept
    double ndws_sigmoid1(double x) noexcept
    float ndws_log1pf1(float x) noexcept
    float ndws_erfcf1(float x) noexcept
