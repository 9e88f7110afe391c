"""Native activation and softmax kernels, forward and backward, and what every entry to them
shares: the names and codes of the activations, the argument handling of an elementwise or
softmax call (elementwise_call, softmax_call), and the tile API the fused `linear`, the
convolutions and the time loops apply to their own tiles (_activations.pxd). The named public
functions (`relu`, `activation`, ...) are ndws.nn._act_entries'.

Conventions (inputs, dtypes, out=, placement) are those of `ndws.nn.functional`.
"""
cimport numpy as cnp
from libc.math cimport log

import numpy as np

from ndws._core cimport NDArray, NDWS_MAXDIMS
from ndws._dispatch cimport (new_result, discard_result, float_arg, out_arg, same_as, clashes,
                             real_arg)
from ndws._threads cimport (threads_for, release_gil, run_tasks, Grain, GRAIN_NN_CHEAP,
                            GRAIN_NN_TRANSC)
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t
from ndws.nn._math cimport (_exp, _log1p, _tanh, _erfc, _fabs, _sigmoid,
                            _copysign, _shifted_exps)

cnp.import_array()

# sigmoid, tanh, relu and leaky relu over contiguous arrays, built per instruction set (see the
# header)
cdef extern from "_act_loops.h" nogil:
    void ndws_sigmoid_f32(const float32_t* X, float32_t* Y, Py_ssize_t n) noexcept
    void ndws_tanh_f32(const float32_t* X, float32_t* Y, Py_ssize_t n) noexcept
    void ndws_sigmoid_bwd_f32(const float32_t* X, const float32_t* G, float32_t* D,
                              Py_ssize_t n) noexcept
    void ndws_tanh_bwd_f32(const float32_t* X, const float32_t* G, float32_t* D,
                           Py_ssize_t n) noexcept
    void ndws_sigmoid_f64(const float64_t* X, float64_t* Y, Py_ssize_t n) noexcept
    void ndws_tanh_f64(const float64_t* X, float64_t* Y, Py_ssize_t n) noexcept
    void ndws_sigmoid_bwd_f64(const float64_t* X, const float64_t* G, float64_t* D,
                              Py_ssize_t n) noexcept
    void ndws_tanh_bwd_f64(const float64_t* X, const float64_t* G, float64_t* D,
                           Py_ssize_t n) noexcept
    void ndws_relu_f32(const float32_t* X, float32_t* Y, Py_ssize_t n) noexcept
    void ndws_relu_f64(const float64_t* X, float64_t* Y, Py_ssize_t n) noexcept
    void ndws_relu_bwd_f32(const float32_t* X, const float32_t* G, float32_t* D,
                           Py_ssize_t n) noexcept
    void ndws_relu_bwd_f64(const float64_t* X, const float64_t* G, float64_t* D,
                           Py_ssize_t n) noexcept
    void ndws_leaky_relu_f32(float32_t a, const float32_t* X, float32_t* Y, Py_ssize_t n) noexcept
    void ndws_leaky_relu_f64(float64_t a, const float64_t* X, float64_t* Y, Py_ssize_t n) noexcept
    void ndws_leaky_relu_bwd_f32(float32_t a, const float32_t* X, const float32_t* G,
                                 float32_t* D, Py_ssize_t n) noexcept
    void ndws_leaky_relu_bwd_f64(float64_t a, const float64_t* X, const float64_t* G,
                                 float64_t* D, Py_ssize_t n) noexcept
    # the element functions both paths share, and their loops (see the header)
    float32_t ndws_swish_f32(float32_t a, float32_t v) noexcept
    float32_t ndws_hardtanh_f32(float32_t a, float32_t v) noexcept
    float32_t ndws_elu_f32(float32_t a, float32_t v) noexcept
    float32_t ndws_selu_f32(float32_t a, float32_t v) noexcept
    float32_t ndws_rectified_tanh_f32(float32_t a, float32_t v) noexcept
    float32_t ndws_softsign_f32(float32_t a, float32_t v) noexcept
    float32_t ndws_gelu_tanh_f32(float32_t a, float32_t v) noexcept
    float32_t ndws_dswish_f32(float32_t a, float32_t v) noexcept
    float32_t ndws_drational_tanh_f32(float32_t a, float32_t v) noexcept
    float32_t ndws_drectified_tanh_f32(float32_t a, float32_t v) noexcept
    float32_t ndws_dselu_f32(float32_t a, float32_t v) noexcept
    float32_t ndws_delu_f32(float32_t a, float32_t v) noexcept
    float32_t ndws_dgelu_tanh_f32(float32_t a, float32_t v) noexcept
    void ndws_swish_loop_f32(float32_t a, const float32_t* X, float32_t* Y, Py_ssize_t n) noexcept
    void ndws_hardtanh_loop_f32(float32_t a, const float32_t* X, float32_t* Y,
                                Py_ssize_t n) noexcept
    void ndws_elu_loop_f32(float32_t a, const float32_t* X, float32_t* Y, Py_ssize_t n) noexcept
    void ndws_selu_loop_f32(float32_t a, const float32_t* X, float32_t* Y, Py_ssize_t n) noexcept
    void ndws_rectified_tanh_loop_f32(float32_t a, const float32_t* X, float32_t* Y,
                                      Py_ssize_t n) noexcept
    void ndws_softsign_loop_f32(float32_t a, const float32_t* X, float32_t* Y,
                                Py_ssize_t n) noexcept
    void ndws_gelu_tanh_loop_f32(float32_t a, const float32_t* X, float32_t* Y,
                                 Py_ssize_t n) noexcept
    void ndws_drational_tanh_loop_f32(float32_t a, const float32_t* X, const float32_t* G,
                                      float32_t* D, Py_ssize_t n) noexcept
    void ndws_dswish_loop_f32(float32_t a, const float32_t* X, const float32_t* G, float32_t* D,
                              Py_ssize_t n) noexcept
    void ndws_drectified_tanh_loop_f32(float32_t a, const float32_t* X, const float32_t* G,
                                       float32_t* D, Py_ssize_t n) noexcept
    void ndws_dselu_loop_f32(float32_t a, const float32_t* X, const float32_t* G, float32_t* D,
                             Py_ssize_t n) noexcept
    void ndws_delu_loop_f32(float32_t a, const float32_t* X, const float32_t* G, float32_t* D,
                            Py_ssize_t n) noexcept
    void ndws_dgelu_tanh_loop_f32(float32_t a, const float32_t* X, const float32_t* G, float32_t* D,
                                  Py_ssize_t n) noexcept
    float32_t ndws_gelu_f32(float32_t a, float32_t v) noexcept
    float32_t ndws_dgelu_f32(float32_t a, float32_t v) noexcept
    void ndws_gelu_loop_f32(float32_t a, const float32_t* X, float32_t* Y, Py_ssize_t n) noexcept
    void ndws_dgelu_loop_f32(float32_t a, const float32_t* X, const float32_t* G, float32_t* D,
                             Py_ssize_t n) noexcept
    float64_t ndws_swish_f64(float64_t a, float64_t v) noexcept
    float64_t ndws_hardtanh_f64(float64_t a, float64_t v) noexcept
    float64_t ndws_elu_f64(float64_t a, float64_t v) noexcept
    float64_t ndws_selu_f64(float64_t a, float64_t v) noexcept
    float64_t ndws_rectified_tanh_f64(float64_t a, float64_t v) noexcept
    float64_t ndws_softsign_f64(float64_t a, float64_t v) noexcept
    float64_t ndws_gelu_tanh_f64(float64_t a, float64_t v) noexcept
    float64_t ndws_dswish_f64(float64_t a, float64_t v) noexcept
    float64_t ndws_drational_tanh_f64(float64_t a, float64_t v) noexcept
    float64_t ndws_drectified_tanh_f64(float64_t a, float64_t v) noexcept
    float64_t ndws_dselu_f64(float64_t a, float64_t v) noexcept
    float64_t ndws_delu_f64(float64_t a, float64_t v) noexcept
    float64_t ndws_dgelu_tanh_f64(float64_t a, float64_t v) noexcept
    void ndws_swish_loop_f64(float64_t a, const float64_t* X, float64_t* Y, Py_ssize_t n) noexcept
    void ndws_hardtanh_loop_f64(float64_t a, const float64_t* X, float64_t* Y,
                                Py_ssize_t n) noexcept
    void ndws_elu_loop_f64(float64_t a, const float64_t* X, float64_t* Y, Py_ssize_t n) noexcept
    void ndws_selu_loop_f64(float64_t a, const float64_t* X, float64_t* Y, Py_ssize_t n) noexcept
    void ndws_rectified_tanh_loop_f64(float64_t a, const float64_t* X, float64_t* Y,
                                      Py_ssize_t n) noexcept
    void ndws_softsign_loop_f64(float64_t a, const float64_t* X, float64_t* Y,
                                Py_ssize_t n) noexcept
    void ndws_gelu_tanh_loop_f64(float64_t a, const float64_t* X, float64_t* Y,
                                 Py_ssize_t n) noexcept
    void ndws_drational_tanh_loop_f64(float64_t a, const float64_t* X, const float64_t* G,
                                      float64_t* D, Py_ssize_t n) noexcept
    void ndws_dswish_loop_f64(float64_t a, const float64_t* X, const float64_t* G, float64_t* D,
                              Py_ssize_t n) noexcept
    void ndws_drectified_tanh_loop_f64(float64_t a, const float64_t* X, const float64_t* G,
                                       float64_t* D, Py_ssize_t n) noexcept
    void ndws_dselu_loop_f64(float64_t a, const float64_t* X, const float64_t* G, float64_t* D,
                             Py_ssize_t n) noexcept
    void ndws_delu_loop_f64(float64_t a, const float64_t* X, const float64_t* G, float64_t* D,
                            Py_ssize_t n) noexcept
    void ndws_dgelu_tanh_loop_f64(float64_t a, const float64_t* X, const float64_t* G, float64_t* D,
                                  Py_ssize_t n) noexcept


# The per-instruction-set loops of _act_loops.h by activation code (NULL: the activation has
# none), one table per precision and direction, filled once below. All take the activation's
# parameter `a`; relu, sigmoid and tanh, which have none, through the wrappers here.
ctypedef void (*_fwd_f32)(float32_t, const float32_t*, float32_t*, Py_ssize_t) noexcept nogil
ctypedef void (*_fwd_f64)(float64_t, const float64_t*, float64_t*, Py_ssize_t) noexcept nogil
ctypedef void (*_bwd_f32)(float32_t, const float32_t*, const float32_t*, float32_t*,
                          Py_ssize_t) noexcept nogil
ctypedef void (*_bwd_f64)(float64_t, const float64_t*, const float64_t*, float64_t*,
                          Py_ssize_t) noexcept nogil
cdef _fwd_f32 _FWD_F32[ACT_N_ELEMENTWISE]
cdef _fwd_f64 _FWD_F64[ACT_N_ELEMENTWISE]
cdef _bwd_f32 _BWD_F32[ACT_N_ELEMENTWISE]
cdef _bwd_f64 _BWD_F64[ACT_N_ELEMENTWISE]


cdef void _relu32(float32_t a, const float32_t* X, float32_t* Y, Py_ssize_t n) noexcept nogil:
    ndws_relu_f32(X, Y, n)
cdef void _relu64(float64_t a, const float64_t* X, float64_t* Y, Py_ssize_t n) noexcept nogil:
    ndws_relu_f64(X, Y, n)
cdef void _sigmoid32(float32_t a, const float32_t* X, float32_t* Y, Py_ssize_t n) noexcept nogil:
    ndws_sigmoid_f32(X, Y, n)
cdef void _sigmoid64(float64_t a, const float64_t* X, float64_t* Y, Py_ssize_t n) noexcept nogil:
    ndws_sigmoid_f64(X, Y, n)
cdef void _tanh32(float32_t a, const float32_t* X, float32_t* Y, Py_ssize_t n) noexcept nogil:
    ndws_tanh_f32(X, Y, n)
cdef void _tanh64(float64_t a, const float64_t* X, float64_t* Y, Py_ssize_t n) noexcept nogil:
    ndws_tanh_f64(X, Y, n)
cdef void _drelu32(float32_t a, const float32_t* X, const float32_t* G, float32_t* D,
                   Py_ssize_t n) noexcept nogil:
    ndws_relu_bwd_f32(X, G, D, n)
cdef void _drelu64(float64_t a, const float64_t* X, const float64_t* G, float64_t* D,
                   Py_ssize_t n) noexcept nogil:
    ndws_relu_bwd_f64(X, G, D, n)
cdef void _dsigmoid32(float32_t a, const float32_t* X, const float32_t* G, float32_t* D,
                      Py_ssize_t n) noexcept nogil:
    ndws_sigmoid_bwd_f32(X, G, D, n)
cdef void _dsigmoid64(float64_t a, const float64_t* X, const float64_t* G, float64_t* D,
                      Py_ssize_t n) noexcept nogil:
    ndws_sigmoid_bwd_f64(X, G, D, n)
cdef void _dtanh32(float32_t a, const float32_t* X, const float32_t* G, float32_t* D,
                   Py_ssize_t n) noexcept nogil:
    ndws_tanh_bwd_f32(X, G, D, n)
cdef void _dtanh64(float64_t a, const float64_t* X, const float64_t* G, float64_t* D,
                   Py_ssize_t n) noexcept nogil:
    ndws_tanh_bwd_f64(X, G, D, n)


cdef void _fill_loop_tables() noexcept:
    cdef int i
    for i in range(ACT_N_ELEMENTWISE):
        _FWD_F32[i] = NULL
        _FWD_F64[i] = NULL
        _BWD_F32[i] = NULL
        _BWD_F64[i] = NULL
    _FWD_F32[ACT_RELU], _FWD_F64[ACT_RELU] = _relu32, _relu64
    _BWD_F32[ACT_RELU], _BWD_F64[ACT_RELU] = _drelu32, _drelu64
    _FWD_F32[ACT_SIGMOID], _FWD_F64[ACT_SIGMOID] = _sigmoid32, _sigmoid64
    _BWD_F32[ACT_SIGMOID], _BWD_F64[ACT_SIGMOID] = _dsigmoid32, _dsigmoid64
    _FWD_F32[ACT_TANH], _FWD_F64[ACT_TANH] = _tanh32, _tanh64
    _BWD_F32[ACT_TANH], _BWD_F64[ACT_TANH] = _dtanh32, _dtanh64
    _FWD_F32[ACT_LEAKY_RELU] = ndws_leaky_relu_f32
    _FWD_F64[ACT_LEAKY_RELU] = ndws_leaky_relu_f64
    _BWD_F32[ACT_LEAKY_RELU] = ndws_leaky_relu_bwd_f32
    _BWD_F64[ACT_LEAKY_RELU] = ndws_leaky_relu_bwd_f64
    _FWD_F32[ACT_ELU], _FWD_F64[ACT_ELU] = ndws_elu_loop_f32, ndws_elu_loop_f64
    _BWD_F32[ACT_ELU], _BWD_F64[ACT_ELU] = ndws_delu_loop_f32, ndws_delu_loop_f64
    _FWD_F32[ACT_SELU], _FWD_F64[ACT_SELU] = ndws_selu_loop_f32, ndws_selu_loop_f64
    _BWD_F32[ACT_SELU], _BWD_F64[ACT_SELU] = ndws_dselu_loop_f32, ndws_dselu_loop_f64
    _FWD_F32[ACT_SWISH], _FWD_F64[ACT_SWISH] = ndws_swish_loop_f32, ndws_swish_loop_f64
    _BWD_F32[ACT_SWISH], _BWD_F64[ACT_SWISH] = ndws_dswish_loop_f32, ndws_dswish_loop_f64
    _FWD_F32[ACT_RECTIFIEDTANH] = ndws_rectified_tanh_loop_f32
    _FWD_F64[ACT_RECTIFIEDTANH] = ndws_rectified_tanh_loop_f64
    _BWD_F32[ACT_RECTIFIEDTANH] = ndws_drectified_tanh_loop_f32
    _BWD_F64[ACT_RECTIFIEDTANH] = ndws_drectified_tanh_loop_f64
    _FWD_F32[ACT_SOFTSIGN], _FWD_F64[ACT_SOFTSIGN] = ndws_softsign_loop_f32, ndws_softsign_loop_f64
    _FWD_F32[ACT_HARDTANH] = ndws_hardtanh_loop_f32
    _FWD_F64[ACT_HARDTANH] = ndws_hardtanh_loop_f64
    _BWD_F32[ACT_RATIONALTANH] = ndws_drational_tanh_loop_f32
    _BWD_F64[ACT_RATIONALTANH] = ndws_drational_tanh_loop_f64
    _FWD_F32[ACT_GELU] = ndws_gelu_loop_f32
    _BWD_F32[ACT_GELU] = ndws_dgelu_loop_f32
    _FWD_F32[ACT_GELU_TANH] = ndws_gelu_tanh_loop_f32
    _FWD_F64[ACT_GELU_TANH] = ndws_gelu_tanh_loop_f64
    _BWD_F32[ACT_GELU_TANH] = ndws_dgelu_tanh_loop_f32
    _BWD_F64[ACT_GELU_TANH] = ndws_dgelu_tanh_loop_f64


_fill_loop_tables()


cdef inline bint _isa_fwd(int code, floating_t a, const floating_t* X, floating_t* Y,
                          intp_t n) noexcept nogil:
    # Y := f(X) over n contiguous elements with the per-instruction-set loops of _act_loops.h
    # (the same bits as _act: gcc vectorises none of these in the loops below); False for the
    # other activations
    if code < 0 or code >= ACT_N_ELEMENTWISE:
        return False
    if floating_t is float32_t:
        if _FWD_F32[code] == NULL:
            return False
        _FWD_F32[code](a, X, Y, n)
    else:
        if _FWD_F64[code] == NULL:
            return False
        _FWD_F64[code](a, X, Y, n)
    return True


cdef inline bint _isa_bwd(int code, floating_t a, const floating_t* X, const floating_t* G,
                          floating_t* D, intp_t n) noexcept nogil:
    # D := f'(X) * G over n contiguous elements, as _isa_fwd
    if code < 0 or code >= ACT_N_ELEMENTWISE:
        return False
    if floating_t is float32_t:
        if _BWD_F32[code] == NULL:
            return False
        _BWD_F32[code](a, X, G, D, n)
    else:
        if _BWD_F64[code] == NULL:
            return False
        _BWD_F64[code](a, X, G, D, n)
    return True

# the activations' constants: C macros of _act_loops.h (which says where each comes from), so
# they stay double literals exactly as written, in nogil code
cdef extern from "_act_loops.h":
    const double SQRT1_2 "NDWS_SQRT1_2"
    const double INV_SQRT_2PI "NDWS_INV_SQRT_2PI"
    const double SQRT_2_PI "NDWS_SQRT_2_PI"
    const double GELU_C "NDWS_GELU_C"
    const double GELU_BIG "NDWS_GELU_BIG"
    const double SELU_ALPHA "NDWS_SELU_ALPHA"
    const double SELU_LAMBDA "NDWS_SELU_LAMBDA"
    const double RTANH_A "NDWS_RTANH_A"
    const double RTANH_C "NDWS_RTANH_C"
    const double TWO_THIRDS "NDWS_TWO_THIRDS"


# ------------------------------------------------------------------------------------------------
# Elementwise activations: value and derivative of one element (inlined into one loop per
# activation by _fwd_1d / _bwd_1d).

cdef inline floating_t _elem(int code, floating_t a, floating_t v) noexcept nogil:
    # f(v) of the activations whose element function is _act_loops.h's (the one definition the
    # per-instruction-set loops use too)
    if floating_t is float32_t:
        if code == ACT_HARDTANH:
            return ndws_hardtanh_f32(a, v)
        if code == ACT_SWISH:
            return ndws_swish_f32(a, v)
        if code == ACT_ELU:
            return ndws_elu_f32(a, v)
        if code == ACT_SELU:
            return ndws_selu_f32(a, v)
        if code == ACT_RECTIFIEDTANH:
            return ndws_rectified_tanh_f32(a, v)
        if code == ACT_SOFTSIGN:
            return ndws_softsign_f32(a, v)
        return ndws_gelu_tanh_f32(a, v)
    else:
        if code == ACT_HARDTANH:
            return ndws_hardtanh_f64(a, v)
        if code == ACT_SWISH:
            return ndws_swish_f64(a, v)
        if code == ACT_ELU:
            return ndws_elu_f64(a, v)
        if code == ACT_SELU:
            return ndws_selu_f64(a, v)
        if code == ACT_RECTIFIEDTANH:
            return ndws_rectified_tanh_f64(a, v)
        if code == ACT_SOFTSIGN:
            return ndws_softsign_f64(a, v)
        return ndws_gelu_tanh_f64(a, v)


cdef inline floating_t _delem(int code, floating_t a, floating_t v) noexcept nogil:
    # f'(v) likewise
    if floating_t is float32_t:
        if code == ACT_SWISH:
            return ndws_dswish_f32(a, v)
        if code == ACT_RATIONALTANH:
            return ndws_drational_tanh_f32(a, v)
        if code == ACT_RECTIFIEDTANH:
            return ndws_drectified_tanh_f32(a, v)
        if code == ACT_SELU:
            return ndws_dselu_f32(a, v)
        if code == ACT_ELU:
            return ndws_delu_f32(a, v)
        return ndws_dgelu_tanh_f32(a, v)
    else:
        if code == ACT_SWISH:
            return ndws_dswish_f64(a, v)
        if code == ACT_RATIONALTANH:
            return ndws_drational_tanh_f64(a, v)
        if code == ACT_RECTIFIEDTANH:
            return ndws_drectified_tanh_f64(a, v)
        if code == ACT_SELU:
            return ndws_dselu_f64(a, v)
        if code == ACT_ELU:
            return ndws_delu_f64(a, v)
        return ndws_dgelu_tanh_f64(a, v)


cdef inline floating_t _act(int code, floating_t a, floating_t v) noexcept nogil:
    cdef floating_t t, u
    if code == ACT_RELU:
        return 0 if v < 0 else v                  # NaN passes through (as torch)
    elif code == ACT_LEAKY_RELU:
        return v if v > 0 else a * v
    elif code == ACT_ELU:
        return _elem(ACT_ELU, a, v)               # expm1: exact near 0
    elif code == ACT_SIGMOID:
        return _sigmoid(v)
    elif code == ACT_TANH:
        return _tanh(v)
    elif code == ACT_SOFTPLUS:
        # log(1 + e^v) = max(v, 0) + log1p(e^-|v|): no overflow, exactly v for large v
        return (v if v > 0 else 0) + _log1p(_exp(-_fabs(v)))
    elif code == ACT_GELU:
        if floating_t is float32_t:
            return ndws_gelu_f32(a, v)          # ndws' erfc (_act_loops.h)
        else:
            if _fabs(v) > GELU_BIG:
                return v if v > 0 else 0
            # x * Phi(x) with Phi through erfc: no cancellation for negative x
            return v * <floating_t>0.5 * _erfc(-v * <floating_t>SQRT1_2)
    elif code == ACT_GELU_TANH:
        return _elem(ACT_GELU_TANH, a, v)
    elif code == ACT_HARDTANH:
        return _elem(ACT_HARDTANH, a, v)                  # NaN passes through
    elif code == ACT_HARDSIGMOID:
        t = <floating_t>0.2 * v + <floating_t>0.5
        return 0 if t < 0 else (1 if t > 1 else t)
    elif code == ACT_SELU:
        # expm1 rather than libnd4j's alpha*exp(x) - alpha: exact near 0
        return _elem(ACT_SELU, a, v)
    elif code == ACT_SWISH or code == ACT_SOFTSIGN:
        return _elem(code, a, v)
    elif code == ACT_RATIONALTANH:
        # 1.7159 * sgn(d) * (1 - 1/a), d = 2x/3, a = 1 + |d| + d^2 + 1.41645 d^4; a overflowing
        # to inf gives the limit +-1.7159
        t = <floating_t>TWO_THIRDS * v
        u = _fabs(t)
        u = 1 - 1 / (1 + u + u * u + <floating_t>RTANH_C * (u * u) * (u * u))
        return <floating_t>RTANH_A * _copysign(u, t)        # u is 0 at 0: sgn(0) = 0
    elif code == ACT_RECTIFIEDTANH:
        return _elem(ACT_RECTIFIEDTANH, a, v)
    elif code == ACT_CUBE:
        return v * v * v
    elif code == ACT_THRESHOLDEDRELU:
        return 0 if v <= a else v                         # NaN passes through (as torch's)
    return v


cdef inline floating_t _dact(int code, floating_t a, floating_t v, floating_t g) noexcept nogil:
    # g * f'(v); f'(NaN) is NaN for every activation but identity
    cdef floating_t s, t, d
    if code == ACT_RELU or code == ACT_THRESHOLDEDRELU:
        # the comparison's value itself (0 or 1), not a branch on it: where gcc does not
        # vectorise the loop, a branch on the data's sign mispredicted every other element of
        # random data (relu_backward of 524,288 float32: 13.9 ms against 0.56 ms for
        # all-positive data, one thread); NaN keeps its own, predictable, branch
        d = <floating_t>(v > (a if code == ACT_THRESHOLDEDRELU else 0))
        if v != v:
            d = v
    elif code == ACT_LEAKY_RELU:
        # plain selects (no nested branches), so gcc vectorises them
        d = a
        if v > 0:
            d = 1
        if v != v:
            d = v
    elif code == ACT_HARDTANH or code == ACT_HARDSIGMOID:
        # libnd4j's: the slope on the closed interval, kinks included; plain selects, as above
        d = 1 if code == ACT_HARDTANH else <floating_t>0.2
        t = 1 if code == ACT_HARDTANH else <floating_t>2.5
        if v < -t:
            d = 0
        if v > t:
            d = 0
        if v != v:
            d = v
    elif code == ACT_SELU or code == ACT_SWISH:
        # (swish's: s + x s (1 - s) from one exp(-|x|), the limits at +-inf directly; libnd4j's
        # e^x (x + e^x + 1) / (e^x + 1)^2 overflows to NaN for x > 88 in float32)
        d = _delem(code, a, v)
    elif code == ACT_SOFTSIGN:
        t = 1 + _fabs(v)
        d = 1 / (t * t)
    elif code == ACT_RATIONALTANH:
        d = _delem(ACT_RATIONALTANH, a, v)
    elif code == ACT_RECTIFIEDTANH:
        d = _delem(ACT_RECTIFIEDTANH, a, v)
    elif code == ACT_CUBE:
        d = 3 * v * v
    elif code == ACT_ELU:
        d = _delem(ACT_ELU, a, v)
    elif code == ACT_SIGMOID or code == ACT_SOFTPLUS:
        s = _sigmoid(v)
        d = s * (1 - s) if code == ACT_SIGMOID else s
    elif code == ACT_TANH:
        t = _tanh(v)
        d = 1 - t * t
    elif code == ACT_GELU:
        if floating_t is float32_t:
            d = ndws_dgelu_f32(a, v)
        elif _fabs(v) > GELU_BIG:
            d = 1 if v > 0 else 0
        else:
            d = (<floating_t>0.5 * _erfc(-v * <floating_t>SQRT1_2)
                 + v * <floating_t>INV_SQRT_2PI * _exp(<floating_t>-0.5 * v * v))
    elif code == ACT_GELU_TANH:
        d = _delem(ACT_GELU_TANH, a, v)
    else:
        return g
    return g * d


cdef inline void _fwd_loop(int code, floating_t a, const floating_t* X__i, intp_t xs,
                           floating_t* Y__i, intp_t ys, intp_t n) noexcept nogil:
    cdef intp_t i
    if xs == 1 and ys == 1:
        for i in range(n):
            Y__i[i] = _act(code, a, X__i[i])
    else:
        for i in range(n):
            Y__i[i * ys] = _act(code, a, X__i[i * xs])


cdef void _fwd_1d(int code, floating_t a, const floating_t* X__i, intp_t xs,  # IN
                  floating_t* Y__i, intp_t ys, intp_t n) noexcept nogil:      # OUT
    """Y[i*ys] := f(X[i*xs]) for i < n."""
    if xs == 1 and ys == 1 and _isa_fwd(code, a, X__i, Y__i, n):
        return
    # one call per code with a literal constant: gcc inlines _act into a loop of its own
    # (relu, leaky_relu and the identity then vectorise)
    if code == ACT_RELU:
        _fwd_loop(ACT_RELU, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_LEAKY_RELU:
        _fwd_loop(ACT_LEAKY_RELU, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_ELU:
        _fwd_loop(ACT_ELU, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_SIGMOID:
        _fwd_loop(ACT_SIGMOID, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_TANH:
        _fwd_loop(ACT_TANH, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_SOFTPLUS:
        _fwd_loop(ACT_SOFTPLUS, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_GELU:
        _fwd_loop(ACT_GELU, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_GELU_TANH:
        _fwd_loop(ACT_GELU_TANH, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_HARDTANH:
        _fwd_loop(ACT_HARDTANH, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_HARDSIGMOID:
        _fwd_loop(ACT_HARDSIGMOID, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_SELU:
        _fwd_loop(ACT_SELU, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_SWISH:
        _fwd_loop(ACT_SWISH, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_SOFTSIGN:
        _fwd_loop(ACT_SOFTSIGN, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_RATIONALTANH:
        _fwd_loop(ACT_RATIONALTANH, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_RECTIFIEDTANH:
        _fwd_loop(ACT_RECTIFIEDTANH, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_CUBE:
        _fwd_loop(ACT_CUBE, a, X__i, xs, Y__i, ys, n)
    elif code == ACT_THRESHOLDEDRELU:
        _fwd_loop(ACT_THRESHOLDEDRELU, a, X__i, xs, Y__i, ys, n)
    else:
        _fwd_loop(ACT_IDENTITY, a, X__i, xs, Y__i, ys, n)


cdef inline void _bwd_loop(int code, floating_t a, const floating_t* X__i, intp_t xs,
                           const floating_t* G__i, intp_t gs,
                           floating_t* D__i, intp_t ds, intp_t n) noexcept nogil:
    cdef intp_t i
    if xs == 1 and gs == 1 and ds == 1:
        for i in range(n):
            D__i[i] = _dact(code, a, X__i[i], G__i[i])
    else:
        for i in range(n):
            D__i[i * ds] = _dact(code, a, X__i[i * xs], G__i[i * gs])


cdef void _bwd_1d(int code, floating_t a, const floating_t* X__i, intp_t xs,  # IN
                  const floating_t* G__i, intp_t gs,                          # IN
                  floating_t* D__i, intp_t ds, intp_t n) noexcept nogil:      # OUT
    """D[i*ds] := f'(X[i*xs]) * G[i*gs] for i < n."""
    if xs == 1 and gs == 1 and ds == 1 and _isa_bwd(code, a, X__i, G__i, D__i, n):
        return
    if code == ACT_RELU:
        _bwd_loop(ACT_RELU, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_LEAKY_RELU:
        _bwd_loop(ACT_LEAKY_RELU, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_ELU:
        _bwd_loop(ACT_ELU, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_SIGMOID:
        _bwd_loop(ACT_SIGMOID, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_TANH:
        _bwd_loop(ACT_TANH, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_SOFTPLUS:
        _bwd_loop(ACT_SOFTPLUS, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_GELU:
        _bwd_loop(ACT_GELU, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_GELU_TANH:
        _bwd_loop(ACT_GELU_TANH, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_HARDTANH:
        _bwd_loop(ACT_HARDTANH, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_HARDSIGMOID:
        _bwd_loop(ACT_HARDSIGMOID, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_SELU:
        _bwd_loop(ACT_SELU, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_SWISH:
        _bwd_loop(ACT_SWISH, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_SOFTSIGN:
        _bwd_loop(ACT_SOFTSIGN, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_RATIONALTANH:
        _bwd_loop(ACT_RATIONALTANH, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_RECTIFIEDTANH:
        _bwd_loop(ACT_RECTIFIEDTANH, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_CUBE:
        _bwd_loop(ACT_CUBE, a, X__i, xs, G__i, gs, D__i, ds, n)
    elif code == ACT_THRESHOLDEDRELU:
        _bwd_loop(ACT_THRESHOLDEDRELU, a, X__i, xs, G__i, gs, D__i, ds, n)
    else:
        _bwd_loop(ACT_IDENTITY, a, X__i, xs, G__i, gs, D__i, ds, n)


# ------------------------------------------------------------------------------------------------
# Softmax rows: the row maximum is subtracted before exp (no overflow); sums accumulate in double.

cdef void _softmax_row(bint log_, const floating_t* X__k, intp_t xs,   # IN
                       floating_t* Y__k, intp_t ys, intp_t n) noexcept nogil:  # OUT
    """Y := softmax(X) (or log_softmax) of one row; Y may be X (same stride)."""
    cdef intp_t k
    cdef floating_t mx, e
    cdef double s = 0.0, lse
    if n <= 0:
        return
    mx = X__k[0]
    for k in range(1, n):
        if X__k[k * xs] > mx:
            mx = X__k[k * xs]
    if log_:
        for k in range(n):
            s += _exp(X__k[k * xs] - mx)
        lse = mx + log(s)
        for k in range(n):
            Y__k[k * ys] = <floating_t>(X__k[k * xs] - lse)
    elif xs == 1 and ys == 1:
        # a contiguous row: the same exponentials made by a vectorised loop, then added in the
        # same order (the same sum to the bit); Y may be X, elementwise in place
        s = _shifted_exps(X__k, mx, Y__k, n, s)
        e = <floating_t>(1.0 / s)
        for k in range(n):
            Y__k[k] = Y__k[k] * e
    else:
        # exp written once into Y (which may be X: each X[k] is read before Y[k] is written)
        for k in range(n):
            e = _exp(X__k[k * xs] - mx)
            Y__k[k * ys] = e
            s += e
        e = <floating_t>(1.0 / s)
        for k in range(n):
            Y__k[k * ys] = Y__k[k * ys] * e


cdef void _softmax_bwd_row(bint log_, const floating_t* X__k, intp_t xs,  # IN
                           const floating_t* G__k, intp_t gs,             # IN
                           floating_t* D__k, intp_t ds, intp_t n) noexcept nogil:  # OUT
    """D := J(X)^T G for the row softmax (D = y*(G - <G, y>)) or log-softmax
    (D = G - softmax(X)*sum(G)); D may be X or G."""
    cdef intp_t k
    cdef floating_t mx
    cdef double s = 0.0, lse, dot = 0.0, y
    if n <= 0:
        return
    mx = X__k[0]
    for k in range(1, n):
        if X__k[k * xs] > mx:
            mx = X__k[k * xs]
    for k in range(n):
        s += _exp(X__k[k * xs] - mx)
    lse = mx + log(s)
    if log_:
        for k in range(n):
            dot += G__k[k * gs]
        for k in range(n):
            y = _exp(<floating_t>(X__k[k * xs] - lse))
            D__k[k * ds] = <floating_t>(G__k[k * gs] - y * dot)
    else:
        for k in range(n):
            dot += G__k[k * gs] * <double>_exp(<floating_t>(X__k[k * xs] - lse))
        for k in range(n):
            y = _exp(<floating_t>(X__k[k * xs] - lse))
            D__k[k * ds] = <floating_t>(y * (G__k[k * gs] - dot))


cdef inline void _bias_act_rows(int code, floating_t a, floating_t* Y__ij,        # IN/OUT
                                const floating_t* B__j, intp_t m, intp_t n,       # IN
                                intp_t rs) noexcept nogil:
    # Y[i, j] := f(Y[i, j] + B[j]) (f(Y[i, j]) without B) over m contiguous rows rs apart: the
    # sum is rounded to the element type before f, exactly as adding then activating in place
    cdef intp_t i, j
    cdef floating_t* row
    for i in range(m):
        row = Y__ij + i * rs
        if (code == ACT_SIGMOID or code == ACT_TANH or code == ACT_RELU
                or code == ACT_LEAKY_RELU):
            if B__j != NULL:
                for j in range(n):
                    row[j] = row[j] + B__j[j]
            _isa_fwd(code, a, row, row, n)
        elif B__j != NULL:
            for j in range(n):
                row[j] = _act(code, a, row[j] + B__j[j])
        else:
            for j in range(n):
                row[j] = _act(code, a, row[j])


cdef void _bias_act_2d(int code, floating_t a, floating_t* Y, const floating_t* B, intp_t m,
                       intp_t n, intp_t rs) noexcept nogil:
    # one call per code with a literal constant, as _fwd_1d: a vectorised loop per activation,
    # chosen once per tile instead of once per row
    if code == ACT_RELU:
        _bias_act_rows(ACT_RELU, a, Y, B, m, n, rs)
    elif code == ACT_LEAKY_RELU:
        _bias_act_rows(ACT_LEAKY_RELU, a, Y, B, m, n, rs)
    elif code == ACT_ELU:
        _bias_act_rows(ACT_ELU, a, Y, B, m, n, rs)
    elif code == ACT_SIGMOID:
        _bias_act_rows(ACT_SIGMOID, a, Y, B, m, n, rs)
    elif code == ACT_TANH:
        _bias_act_rows(ACT_TANH, a, Y, B, m, n, rs)
    elif code == ACT_SOFTPLUS:
        _bias_act_rows(ACT_SOFTPLUS, a, Y, B, m, n, rs)
    elif code == ACT_GELU:
        _bias_act_rows(ACT_GELU, a, Y, B, m, n, rs)
    elif code == ACT_GELU_TANH:
        _bias_act_rows(ACT_GELU_TANH, a, Y, B, m, n, rs)
    elif code == ACT_HARDTANH:
        _bias_act_rows(ACT_HARDTANH, a, Y, B, m, n, rs)
    elif code == ACT_HARDSIGMOID:
        _bias_act_rows(ACT_HARDSIGMOID, a, Y, B, m, n, rs)
    elif code == ACT_SELU:
        _bias_act_rows(ACT_SELU, a, Y, B, m, n, rs)
    elif code == ACT_SWISH:
        _bias_act_rows(ACT_SWISH, a, Y, B, m, n, rs)
    elif code == ACT_SOFTSIGN:
        _bias_act_rows(ACT_SOFTSIGN, a, Y, B, m, n, rs)
    elif code == ACT_RATIONALTANH:
        _bias_act_rows(ACT_RATIONALTANH, a, Y, B, m, n, rs)
    elif code == ACT_RECTIFIEDTANH:
        _bias_act_rows(ACT_RECTIFIEDTANH, a, Y, B, m, n, rs)
    elif code == ACT_CUBE:
        _bias_act_rows(ACT_CUBE, a, Y, B, m, n, rs)
    elif code == ACT_THRESHOLDEDRELU:
        _bias_act_rows(ACT_THRESHOLDEDRELU, a, Y, B, m, n, rs)
    else:
        _bias_act_rows(ACT_IDENTITY, a, Y, B, m, n, rs)


# ------------------------------------------------------------------------------------------------
# The C-level tile API (see _activations.pxd)

cdef void bias_act_tile_f32(int code, float32_t alpha, float32_t* Y, const float32_t* B,
                            intp_t m, intp_t n, intp_t rs) noexcept nogil:
    _bias_act_2d(code, alpha, Y, B, m, n, rs)


cdef void bias_act_tile_f64(int code, float64_t alpha, float64_t* Y, const float64_t* B,
                            intp_t m, intp_t n, intp_t rs) noexcept nogil:
    _bias_act_2d(code, alpha, Y, B, m, n, rs)


cdef inline void _tile(int code, floating_t alpha, floating_t* Y, intp_t m, intp_t n,
                       intp_t rs, intp_t cs) noexcept nogil:
    cdef intp_t i
    for i in range(m):
        if code == ACT_SOFTMAX or code == ACT_LOG_SOFTMAX:
            _softmax_row(code == ACT_LOG_SOFTMAX, Y + i * rs, cs, Y + i * rs, cs, n)
        else:
            _fwd_1d(code, alpha, Y + i * rs, cs, Y + i * rs, cs, n)


cdef inline void _btile(int code, floating_t alpha, const floating_t* X, intp_t xrs,
                        intp_t xcs, const floating_t* G, intp_t grs, intp_t gcs, floating_t* D,
                        intp_t drs, intp_t dcs, intp_t m, intp_t n) noexcept nogil:
    cdef intp_t i
    for i in range(m):
        if code == ACT_SOFTMAX or code == ACT_LOG_SOFTMAX:
            _softmax_bwd_row(code == ACT_LOG_SOFTMAX, X + i * xrs, xcs, G + i * grs, gcs,
                             D + i * drs, dcs, n)
        else:
            _bwd_1d(code, alpha, X + i * xrs, xcs, G + i * grs, gcs, D + i * drs, dcs, n)


cdef void act_tile_f32(int code, float32_t alpha, float32_t* Y,
                       intp_t m, intp_t n, intp_t rs, intp_t cs) noexcept nogil:
    _tile(code, alpha, Y, m, n, rs, cs)


cdef void act_tile_f64(int code, float64_t alpha, float64_t* Y,
                       intp_t m, intp_t n, intp_t rs, intp_t cs) noexcept nogil:
    _tile(code, alpha, Y, m, n, rs, cs)


cdef void act_backward_tile_f32(int code, float32_t alpha,
                                const float32_t* X, intp_t xrs, intp_t xcs,
                                const float32_t* G, intp_t grs, intp_t gcs,
                                float32_t* D, intp_t drs, intp_t dcs,
                                intp_t m, intp_t n) noexcept nogil:
    _btile(code, alpha, X, xrs, xcs, G, grs, gcs, D, drs, dcs, m, n)


cdef void act_backward_tile_f64(int code, float64_t alpha,
                                const float64_t* X, intp_t xrs, intp_t xcs,
                                const float64_t* G, intp_t grs, intp_t gcs,
                                float64_t* D, intp_t drs, intp_t dcs,
                                intp_t m, intp_t n) noexcept nogil:
    _btile(code, alpha, X, xrs, xcs, G, grs, gcs, D, drs, dcs, m, n)


cdef void softmax_rows_f32(bint log_, float32_t* Y, intp_t m, intp_t n,
                           intp_t rs, intp_t cs) noexcept nogil:
    _tile(ACT_LOG_SOFTMAX if log_ else ACT_SOFTMAX, <float32_t>0, Y, m, n, rs, cs)


cdef void softmax_rows_f64(bint log_, float64_t* Y, intp_t m, intp_t n,
                           intp_t rs, intp_t cs) noexcept nogil:
    _tile(ACT_LOG_SOFTMAX if log_ else ACT_SOFTMAX, <float64_t>0, Y, m, n, rs, cs)


# ------------------------------------------------------------------------------------------------
# Strided N-D iteration. Operands of one shape are described by a collapsed plan: size-1 axes
# dropped, neighbouring axes merged where every operand is contiguous across them (a C-contiguous
# array becomes one axis). The last plan axis is the inner loop; the others are "rows" that
# threads split between them. An axis may be left out (softmax's reduction axis).

cdef struct Plan:
    int nd
    intp_t shape[NDWS_MAXDIMS]
    intp_t s0[NDWS_MAXDIMS]    # element strides of operand 0 (x)
    intp_t s1[NDWS_MAXDIMS]    # operand 1 (grad_output), 0 when absent
    intp_t s2[NDWS_MAXDIMS]    # operand 2 (the output)


cdef void _plan(Plan* p, NDArray a, NDArray b, NDArray c, int skip) noexcept:
    cdef intp_t isz = a._itemsize, n, t0, t1, t2
    cdef int d, k = 0
    for d in range(a._ndim):
        n = a._shape[d]
        if d == skip or n == 1:
            continue
        t0 = a._strides[d] // isz
        t1 = b._strides[d] // isz if b is not None else 0
        t2 = c._strides[d] // isz
        if k > 0 and p.s0[k - 1] == t0 * n and p.s1[k - 1] == t1 * n and p.s2[k - 1] == t2 * n:
            p.shape[k - 1] *= n
            p.s0[k - 1] = t0
            p.s1[k - 1] = t1
            p.s2[k - 1] = t2
        else:
            p.shape[k] = n
            p.s0[k] = t0
            p.s1[k] = t1
            p.s2[k] = t2
            k += 1
    if k == 0:
        p.shape[0] = 1
        p.s0[0] = p.s1[0] = p.s2[0] = 1
        k = 1
    p.nd = k


cdef inline void _offsets(const Plan* p, int nd, intp_t r, intp_t* o0, intp_t* o1,
                          intp_t* o2) noexcept nogil:
    # element offsets of "row" r: r unravelled over the first nd plan axes (C order)
    cdef int d
    cdef intp_t i
    o0[0] = o1[0] = o2[0] = 0
    for d in range(nd - 1, -1, -1):
        i = r % p.shape[d]
        r = r // p.shape[d]
        o0[0] += i * p.s0[d]
        o1[0] += i * p.s1[d]
        o2[0] += i * p.s2[d]


cdef void _ew_block(bint bwd, int code, floating_t a, const Plan* p,
                    const floating_t* X, const floating_t* G, floating_t* Y,  # IN, IN, OUT
                    intp_t r0, intp_t r1, intp_t l0, intp_t l1) noexcept nogil:
    """Rows [r0, r1) x inner elements [l0, l1) of an elementwise op."""
    cdef int nd = p.nd
    cdef intp_t r, o0, o1, o2
    cdef intp_t i0 = p.s0[nd - 1], i1 = p.s1[nd - 1], i2 = p.s2[nd - 1]
    for r in range(r0, r1):
        _offsets(p, nd - 1, r, &o0, &o1, &o2)
        o0 += l0 * i0
        o1 += l0 * i1
        o2 += l0 * i2
        if bwd:
            _bwd_1d(code, a, X + o0, i0, G + o1, i1, Y + o2, i2, l1 - l0)
        else:
            _fwd_1d(code, a, X + o0, i0, Y + o2, i2, l1 - l0)


ctypedef struct _EwJob:
    # one elementwise or softmax call cut into `ntasks` fixed blocks for the kernel pool
    bint bwd, log_, by_rows, f64
    int code
    double a                   # the activation's alpha, exact for float32 too
    const Plan* p
    const void* X
    const void* G
    void* Y
    intp_t rows, L, a0, a1, a2
    Py_ssize_t ntasks


cdef void _ew_task(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef _EwJob* j = <_EwJob*>ctx
    cdef intp_t lo, hi
    if j.by_rows:
        # a fixed, contiguous range of rows
        lo = c * j.rows // j.ntasks
        hi = (c + 1) * j.rows // j.ntasks
        if j.f64:
            _ew_block(j.bwd, j.code, j.a, j.p, <const float64_t*>j.X, <const float64_t*>j.G,
                      <float64_t*>j.Y, lo, hi, 0, j.L)
        else:
            _ew_block(j.bwd, j.code, <float32_t>j.a, j.p, <const float32_t*>j.X,
                      <const float32_t*>j.G, <float32_t*>j.Y, lo, hi, 0, j.L)
    else:
        # few long rows: a fixed range of the inner axis, cut on 16-element (64-byte for
        # float32) boundaries so no two threads share a cache line of Y
        lo = (c * j.L // j.ntasks) & ~(<intp_t>15)
        hi = j.L if c == j.ntasks - 1 else ((c + 1) * j.L // j.ntasks) & ~(<intp_t>15)
        if j.f64:
            _ew_block(j.bwd, j.code, j.a, j.p, <const float64_t*>j.X, <const float64_t*>j.G,
                      <float64_t*>j.Y, 0, j.rows, lo, hi)
        else:
            _ew_block(j.bwd, j.code, <float32_t>j.a, j.p, <const float32_t*>j.X,
                      <const float32_t*>j.G, <float32_t*>j.Y, 0, j.rows, lo, hi)


cdef void _ew_run(bint bwd, int code, floating_t a, const Plan* p,
                  const floating_t* X, const floating_t* G, floating_t* Y,
                  int nthreads) noexcept nogil:
    cdef intp_t rows = 1, L = p.shape[p.nd - 1]
    cdef int d
    cdef _EwJob j
    for d in range(p.nd - 1):
        rows *= p.shape[d]
    if nthreads <= 1:
        _ew_block(bwd, code, a, p, X, G, Y, 0, rows, 0, L)
        return
    # a few blocks per thread, on the one kernel pool (ndws._threads)
    j.bwd, j.code, j.a, j.p, j.X, j.G, j.Y = bwd, code, a, p, X, G, Y
    j.rows, j.L, j.f64 = rows, L, floating_t is float64_t
    j.by_rows = rows >= nthreads
    j.ntasks = 4 * nthreads
    if j.by_rows and j.ntasks > rows:
        j.ntasks = rows
    run_tasks(_ew_task, &j, j.ntasks, nthreads)


cdef void _sm_block(bint bwd, bint log_, const Plan* p, intp_t L, intp_t a0, intp_t a1,
                    intp_t a2, const floating_t* X, const floating_t* G, floating_t* Y,
                    intp_t r0, intp_t r1) noexcept nogil:
    cdef intp_t r, o0, o1, o2
    for r in range(r0, r1):
        _offsets(p, p.nd, r, &o0, &o1, &o2)
        if bwd:
            _softmax_bwd_row(log_, X + o0, a0, G + o1, a1, Y + o2, a2, L)
        else:
            _softmax_row(log_, X + o0, a0, Y + o2, a2, L)


cdef void _sm_task(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef _EwJob* j = <_EwJob*>ctx
    cdef intp_t lo = c * j.rows // j.ntasks, hi = (c + 1) * j.rows // j.ntasks
    if j.f64:
        _sm_block(j.bwd, j.log_, j.p, j.L, j.a0, j.a1, j.a2, <const float64_t*>j.X,
                  <const float64_t*>j.G, <float64_t*>j.Y, lo, hi)
    else:
        _sm_block(j.bwd, j.log_, j.p, j.L, j.a0, j.a1, j.a2, <const float32_t*>j.X,
                  <const float32_t*>j.G, <float32_t*>j.Y, lo, hi)


cdef void _sm_run(bint bwd, bint log_, const Plan* p, intp_t rows, intp_t L, intp_t a0,
                  intp_t a1, intp_t a2, const floating_t* X, const floating_t* G, floating_t* Y,
                  int nthreads) noexcept nogil:
    cdef _EwJob j
    if nthreads <= 1 or rows < nthreads:
        _sm_block(bwd, log_, p, L, a0, a1, a2, X, G, Y, 0, rows)
        return
    j.bwd, j.log_, j.p, j.X, j.G, j.Y = bwd, log_, p, X, G, Y
    j.rows, j.L, j.a0, j.a1, j.a2, j.f64 = rows, L, a0, a1, a2, floating_t is float64_t
    j.ntasks = 4 * nthreads if rows >= 4 * nthreads else rows
    run_tasks(_sm_task, &j, j.ntasks, nthreads)


# ------------------------------------------------------------------------------------------------
# Argument handling (GIL held): the operand readers are ndws._dispatch's (float_arg, out_arg, ...)

cdef void copy_into(NDArray src, NDArray dst) noexcept:
    # identity kernel from a fresh contiguous temporary into a (clashing) out=
    cdef Plan p
    _plan(&p, src, None, dst, -1)
    if src._itemsize == 4:
        _ew_run(False, ACT_IDENTITY, <float32_t>0, &p, <float32_t*>src._data, NULL,
                <float32_t*>dst._data, 1)
    else:
        _ew_run(False, ACT_IDENTITY, <float64_t>0, &p, <float64_t*>src._data, NULL,
                <float64_t*>dst._data, 1)


cdef class _CallAllocations:
    def __cinit__(self, str op):
        self.op = op
        self.made = []
        self.temps = []

    cdef void fail(self):
        for a in reversed(self.made):
            discard_result(<NDArray>a)
        self.made = []

    cdef void finish(self):
        for t, target in self.temps:
            copy_into(<NDArray>t, <NDArray>target)
        for t, target in reversed(self.temps):
            discard_result(<NDArray>t)


cdef inline Grain _grain(int code) noexcept:
    # memory-bound activations (compares and a multiply or two) vs those with a transcendental
    # function or a division per element
    if (code <= ACT_LEAKY_RELU or code == ACT_HARDTANH or code == ACT_HARDSIGMOID
            or code == ACT_CUBE or code == ACT_THRESHOLDEDRELU):
        return GRAIN_NN_CHEAP
    return GRAIN_NN_TRANSC


cdef object elementwise_call(str op, int code, double alpha, object x, object g, object out,
                             bint bwd):
    """Forward or (bwd) backward of an elementwise activation: validate, place, run. A
    backward call needs `g` (grad_output): None is an error, never a silent forward."""
    cdef NDArray a = float_arg(x, op, "x")
    cdef NDArray b = None, y, o = None
    cdef Plan p
    cdef int nt
    if bwd:
        b = float_arg(g, op, "grad_output", a._dtype)
        same_as(a, b, op, "grad_output", "x")
    if out is None:
        y = new_result(a._dtype, a._ndim, a._shape, op)
    else:
        o = out_arg(out, a, op, "out", "x")
        y = o
        if clashes(o, a) or clashes(o, b):
            y = new_result(a._dtype, a._ndim, a._shape, op)
    if a._size:
        _plan(&p, a, b, y, -1)
        nt = threads_for(a._size, _grain(code))
        if a._itemsize == 4:
            if release_gil(a._size * a._itemsize, nt):
                with nogil:
                    _ew_run(bwd, code, <float32_t>alpha, &p, <float32_t*>a._data,
                            <float32_t*>(b._data if bwd else NULL), <float32_t*>y._data, nt)
            else:
                _ew_run(bwd, code, <float32_t>alpha, &p, <float32_t*>a._data,
                        <float32_t*>(b._data if bwd else NULL), <float32_t*>y._data, nt)
        else:
            if release_gil(a._size * a._itemsize, nt):
                with nogil:
                    _ew_run(bwd, code, alpha, &p, <float64_t*>a._data,
                            <float64_t*>(b._data if bwd else NULL), <float64_t*>y._data, nt)
            else:
                _ew_run(bwd, code, alpha, &p, <float64_t*>a._data,
                        <float64_t*>(b._data if bwd else NULL), <float64_t*>y._data, nt)
    if o is None:
        return y
    if y is not o:
        copy_into(y, o)
        discard_result(y)
    return out


cdef int _axis(object axis, int ndim, str op) except -100:
    cdef long ax
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:          # compared as Python ints: no OverflowError
        raise ValueError(f"{op}: axis {axis} is out of bounds for an array of dimension {ndim}")
    ax = axis
    return ax + ndim if ax < 0 else ax


cdef void _sm_dispatch(bint bwd, bint log_, const Plan* p, intp_t rows, intp_t L, int ax,
                       NDArray a, NDArray b, NDArray y, int nt) noexcept nogil:
    # reads only C fields of the (GIL-held, referenced by the caller) arrays
    cdef intp_t isz = a._itemsize
    cdef intp_t gs = b._strides[ax] // isz if bwd else 0
    if isz == 4:
        _sm_run(bwd, log_, p, rows, L, a._strides[ax] // isz, gs, y._strides[ax] // isz,
                <float32_t*>a._data, <float32_t*>(b._data if bwd else NULL),
                <float32_t*>y._data, nt)
    else:
        _sm_run(bwd, log_, p, rows, L, a._strides[ax] // isz, gs, y._strides[ax] // isz,
                <float64_t*>a._data, <float64_t*>(b._data if bwd else NULL),
                <float64_t*>y._data, nt)


cdef object softmax_call(str op, bint log_, object x, object g, object axis, object out,
                         bint bwd):
    cdef NDArray a = float_arg(x, op, "x")
    cdef NDArray b = None, y, o = None
    cdef Plan p
    cdef int nt, ax
    cdef intp_t L, rows, isz = a._itemsize
    if a._ndim == 0:
        raise ValueError(f"{op}: x must have at least one dimension, got a 0-d array")
    ax = _axis(axis, a._ndim, op)
    if bwd:
        b = float_arg(g, op, "grad_output", a._dtype)
        same_as(a, b, op, "grad_output", "x")
    if out is None:
        y = new_result(a._dtype, a._ndim, a._shape, op)
    else:
        o = out_arg(out, a, op, "out", "x")
        y = o
        if clashes(o, a) or clashes(o, b):
            y = new_result(a._dtype, a._ndim, a._shape, op)
    if a._size:
        _plan(&p, a, b, y, ax)
        L = a._shape[ax]
        rows = a._size // L
        nt = threads_for(a._size, GRAIN_NN_TRANSC)
        if release_gil(a._size * a._itemsize, nt):
            with nogil:
                _sm_dispatch(bwd, log_, &p, rows, L, ax, a, b, y, nt)
        else:
            _sm_dispatch(bwd, log_, &p, rows, L, ax, a, b, y, nt)
    if o is None:
        return y
    if y is not o:
        copy_into(y, o)
        discard_result(y)
    return out


# ------------------------------------------------------------------------------------------------
# Activation names (DL4J-ish and torch-ish aliases) and the C-level code lookup

_NAMES = {
    "identity": ACT_IDENTITY, "linear": ACT_IDENTITY,
    "relu": ACT_RELU,
    "leakyrelu": ACT_LEAKY_RELU, "leaky_relu": ACT_LEAKY_RELU,
    "elu": ACT_ELU,
    "sigmoid": ACT_SIGMOID,
    "tanh": ACT_TANH,
    "softplus": ACT_SOFTPLUS,
    "gelu": ACT_GELU,
    "hardtanh": ACT_HARDTANH, "hard_tanh": ACT_HARDTANH,
    "hardsigmoid": ACT_HARDSIGMOID, "hard_sigmoid": ACT_HARDSIGMOID,
    "selu": ACT_SELU,
    "swish": ACT_SWISH, "silu": ACT_SWISH,
    "softsign": ACT_SOFTSIGN,
    "rationaltanh": ACT_RATIONALTANH, "rational_tanh": ACT_RATIONALTANH,
    "rectifiedtanh": ACT_RECTIFIEDTANH, "rectified_tanh": ACT_RECTIFIEDTANH,
    "cube": ACT_CUBE,
    "thresholdedrelu": ACT_THRESHOLDEDRELU, "thresholded_relu": ACT_THRESHOLDEDRELU,
    "softmax": ACT_SOFTMAX,
    "logsoftmax": ACT_LOG_SOFTMAX, "log_softmax": ACT_LOG_SOFTMAX,
}
ACTIVATIONS = tuple(sorted(_NAMES))
# DL4J's defaults: LeakyReLU's alpha 0.01, ELU's 1.0, ThresholdedReLU's theta 1.0
_DEFAULT_ALPHA = {ACT_LEAKY_RELU: 0.01, ACT_ELU: 1.0, ACT_THRESHOLDEDRELU: 1.0}


cdef double activation_param(object value, str op, str role) except? -1.0:
    # an activation's scalar parameter: a finite real (a NaN slope or threshold would turn
    # every output it touches into NaN, or silently disable the threshold)
    cdef double v
    try:
        v = real_arg(value, op, role)
    except OverflowError:
        raise ValueError(f"{op}: {role} must be a finite real number, got {value!r:.40}") from None
    if v != v or v - v != 0:
        raise ValueError(f"{op}: {role} must be a finite real number, got {value!r}")
    return v


cdef int lookup_activation(object name, dict params, double* alpha, list axis,
                           str op) except -1:
    """The code of `name` with `params`; the scalar parameter into alpha[0], the softmax axis
    into axis[0] (-1 by default)."""
    cdef int code
    if not isinstance(name, str):
        raise TypeError(f"{op}: name must be a str, got {name!r}")
    code = _NAMES.get(name.lower(), -1)
    if code < 0:
        raise ValueError(f"{op}: unknown activation {name!r}; valid names: "
                         f"{', '.join(ACTIVATIONS)}")
    alpha[0] = _DEFAULT_ALPHA.get(code, 0.0)
    axis[0] = -1
    for key, value in (params or {}).items():
        if key == "alpha" and code in (ACT_LEAKY_RELU, ACT_ELU):
            alpha[0] = activation_param(value, op, "alpha")
        elif key == "theta" and code == ACT_THRESHOLDEDRELU:
            alpha[0] = activation_param(value, op, "theta")
        elif key == "approximate" and code == ACT_GELU:
            if value == "tanh":
                code = ACT_GELU_TANH
            elif value != "none":
                raise ValueError(f"{op}: approximate must be 'none' or 'tanh', got {value!r}")
        elif key == "axis" and code in (ACT_SOFTMAX, ACT_LOG_SOFTMAX):
            axis[0] = value
        else:
            raise TypeError(f"{op}: unexpected parameter {key!r} for activation {name!r}")
    return code


cdef int activation_code(object name, dict params, double* alpha) except -1:
    cdef list ax = [-1]
    cdef int code = lookup_activation(name, params, alpha, ax, "activation")
    axis = ax[0]
    if code >= ACT_N_ELEMENTWISE and axis is not None and axis != -1:
        raise ValueError(f"activation: a fused {name!r} works along the last axis only, "
                         f"got axis={axis!r}")
    return code
