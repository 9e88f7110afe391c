"""Native activation, softmax, loss and updater kernels.

Two layers, as everywhere in ndws: ``cdef ... noexcept nogil`` kernels over raw pointers,
lengths and element strides (fused float32/float64), and thin ``def`` wrappers that validate
every argument, place the output (``out=`` wins, else the current workspace) and run the kernel
without the GIL. The public surface is `ndws.nn.functional`.

Inputs: an `ndws.NDArray`, or anything `numpy.asarray` accepts (a NumPy array is wrapped
without a copy, as `ndws.from_numpy` does; other array_likes are converted first). The dtype
must be float32 or float64 (TypeError naming the argument otherwise); all float operands of a
call share one dtype. Any strides work (views, negative strides); contiguous operands take the
fast path.
"""
cimport cython
cimport numpy as cnp
from cython.parallel cimport prange
from libc.math cimport (INFINITY, NAN, erfc, erfcf, exp, expf, expm1, expm1f, fabs, fabsf,
                        isinf, log, log1p, log1pf, logf, sqrt, sqrtf, tanhf)
from libc.math cimport tanh as c_tanh   # `tanh` is the public activation below

import numpy as np

from ndws._core cimport NDArray, NDWS_MAXDIMS, _c_contiguous, check_array, pin_foreign
from ndws._dispatch cimport (Operand, float_operand, operands_overlap, self_overlapping,
                             new_result, discard_result, float_arg, out_arg, same_as, clashes,
                             whole_strides, shape_of, arrays_overlap)
from ndws._threads cimport (threads_for, release_gil, Grain, GRAIN_NN_CHEAP, GRAIN_NN_TRANSC,
                            GRAIN_NN_UPDATE)
from ndws._typedefs cimport float32_t, float64_t, floating_t, int32_t, int64_t, intp_t
from ndws._core import from_numpy as _from_numpy
from ndws._gemm_types cimport epilogue_fn
from ndws._linalg cimport gemm_arrays

cnp.import_array()

# Losses reduce in a fixed number of row chunks that depends only on the row count, summed in
# order afterwards: the loss is bit-identical whatever the thread count.
cdef enum:
    LOSS_CHUNKS = 64

cdef enum:
    LOSS_SCE = 0
    LOSS_BCE = 1
    LOSS_MSE = 2
    LOSS_MAE = 3

cdef enum:
    UPD_SGD = 0
    UPD_MOMENTUM = 1
    UPD_ADAM = 2
    UPD_RMSPROP = 3
    UPD_ADAGRAD = 4

# GELU constants: 1/sqrt(2), 1/sqrt(2*pi), sqrt(2/pi), and the cubic coefficient of the tanh form
# (C macros, so they stay compile-time double literals exactly as written, in nogil code).
# GELU_BIG: |x| beyond which GELU is exactly x (x > 0) or 0 (x < 0) in both precisions: the
# formulas would give inf*0 = NaN at +-inf, so large inputs take the limit directly.
cdef extern from *:
    """
    #define NDWS_SQRT1_2 0.70710678118654752440
    #define NDWS_INV_SQRT_2PI 0.39894228040143267794
    #define NDWS_SQRT_2_PI 0.79788456080286535588
    #define NDWS_GELU_C 0.044715
    #define NDWS_GELU_BIG 1.0e4
    """
    const double SQRT1_2 "NDWS_SQRT1_2"
    const double INV_SQRT_2PI "NDWS_INV_SQRT_2PI"
    const double SQRT_2_PI "NDWS_SQRT_2_PI"
    const double GELU_C "NDWS_GELU_C"
    const double GELU_BIG "NDWS_GELU_BIG"


# ------------------------------------------------------------------------------------------------
# Scalar math in the element type (float32 stays in float: expf etc.)

cdef inline floating_t _exp(floating_t v) noexcept nogil:
    if floating_t is float32_t:
        return expf(v)
    else:
        return exp(v)


cdef inline floating_t _expm1(floating_t v) noexcept nogil:
    if floating_t is float32_t:
        return expm1f(v)
    else:
        return expm1(v)


cdef inline floating_t _log1p(floating_t v) noexcept nogil:
    if floating_t is float32_t:
        return log1pf(v)
    else:
        return log1p(v)


cdef inline floating_t _tanh(floating_t v) noexcept nogil:
    if floating_t is float32_t:
        return tanhf(v)
    else:
        return c_tanh(v)


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


cdef inline floating_t _sqrt(floating_t v) noexcept nogil:
    if floating_t is float32_t:
        return sqrtf(v)
    else:
        return sqrt(v)


cdef inline floating_t _sigmoid(floating_t v) noexcept nogil:
    # exp of a non-positive number only: never overflows; +-inf give exactly 1 / 0
    cdef floating_t e
    if v >= 0:
        return 1 / (1 + _exp(-v))
    e = _exp(v)
    return e / (1 + e)


# ------------------------------------------------------------------------------------------------
# Elementwise activations: value and derivative of one element (inlined into one loop per
# activation by _fwd_1d / _bwd_1d).

cdef inline floating_t _act(int code, floating_t a, floating_t v) noexcept nogil:
    cdef floating_t t
    if code == ACT_RELU:
        return 0 if v < 0 else v                  # NaN passes through (as torch)
    elif code == ACT_LEAKY_RELU:
        return v if v > 0 else a * v
    elif code == ACT_ELU:
        return v if v > 0 else a * _expm1(v)      # expm1: exact near 0
    elif code == ACT_SIGMOID:
        return _sigmoid(v)
    elif code == ACT_TANH:
        return _tanh(v)
    elif code == ACT_SOFTPLUS:
        # log(1 + e^v) = max(v, 0) + log1p(e^-|v|): no overflow, exactly v for large v
        return (v if v > 0 else 0) + _log1p(_exp(-_fabs(v)))
    elif code == ACT_GELU:
        if _fabs(v) > GELU_BIG:
            return v if v > 0 else 0
        # x * Phi(x) with Phi through erfc: no cancellation for negative x
        return v * <floating_t>0.5 * _erfc(-v * <floating_t>SQRT1_2)
    elif code == ACT_GELU_TANH:
        if _fabs(v) > GELU_BIG:
            return v if v > 0 else 0
        t = _tanh(<floating_t>SQRT_2_PI * (v + <floating_t>GELU_C * v * v * v))
        return <floating_t>0.5 * v * (1 + t)
    return v


cdef inline floating_t _dact(int code, floating_t a, floating_t v, floating_t g) noexcept nogil:
    # g * f'(v); f'(NaN) is NaN for every activation but identity
    cdef floating_t s, t, d
    if code == ACT_RELU or code == ACT_LEAKY_RELU:
        # plain selects (no nested branches), so gcc vectorises them
        d = 0 if code == ACT_RELU else a
        if v > 0:
            d = 1
        if v != v:
            d = v
    elif code == ACT_ELU:
        d = 1 if v > 0 else a * _exp(v)
    elif code == ACT_SIGMOID or code == ACT_SOFTPLUS:
        s = _sigmoid(v)
        d = s * (1 - s) if code == ACT_SIGMOID else s
    elif code == ACT_TANH:
        t = _tanh(v)
        d = 1 - t * t
    elif code == ACT_GELU:
        if _fabs(v) > GELU_BIG:
            d = 1 if v > 0 else 0
        else:
            d = (<floating_t>0.5 * _erfc(-v * <floating_t>SQRT1_2)
                 + v * <floating_t>INV_SQRT_2PI * _exp(<floating_t>-0.5 * v * v))
    elif code == ACT_GELU_TANH:
        if _fabs(v) > GELU_BIG:
            d = 1 if v > 0 else 0
        else:
            t = _tanh(<floating_t>SQRT_2_PI * (v + <floating_t>GELU_C * v * v * v))
            d = (<floating_t>0.5 * (1 + t) + <floating_t>0.5 * v * (1 - t * t)
                 * <floating_t>SQRT_2_PI * (1 + <floating_t>(3 * GELU_C) * v * v))
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


# ------------------------------------------------------------------------------------------------
# The C-level tile API (see _kernels.pxd)

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


cdef void _ew_run(bint bwd, int code, floating_t a, const Plan* p,
                  const floating_t* X, const floating_t* G, floating_t* Y,
                  int nthreads) noexcept nogil:
    cdef intp_t rows = 1, L = p.shape[p.nd - 1], lo, hi
    cdef int d, c
    for d in range(p.nd - 1):
        rows *= p.shape[d]
    if nthreads <= 1:
        _ew_block(bwd, code, a, p, X, G, Y, 0, rows, 0, L)
    elif rows >= nthreads:
        # each thread a fixed, contiguous range of rows
        for c in prange(nthreads, schedule='static', num_threads=nthreads):
            _ew_block(bwd, code, a, p, X, G, Y, c * rows // nthreads,
                      (c + 1) * rows // nthreads, 0, L)
    else:
        # few long rows: each thread a fixed range of the inner axis, cut on 16-element
        # (64-byte for float32) boundaries so no two threads share a cache line of Y
        for c in prange(nthreads, schedule='static', num_threads=nthreads):
            lo = (c * L // nthreads) & ~(<intp_t>15)
            hi = L if c == nthreads - 1 else ((c + 1) * L // nthreads) & ~(<intp_t>15)
            _ew_block(bwd, code, a, p, X, G, Y, 0, rows, lo, hi)


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


cdef void _sm_run(bint bwd, bint log_, const Plan* p, intp_t rows, intp_t L, intp_t a0,
                  intp_t a1, intp_t a2, const floating_t* X, const floating_t* G, floating_t* Y,
                  int nthreads) noexcept nogil:
    cdef int c
    if nthreads <= 1 or rows < nthreads:
        _sm_block(bwd, log_, p, L, a0, a1, a2, X, G, Y, 0, rows)
    else:
        for c in prange(nthreads, schedule='static', num_threads=nthreads):
            _sm_block(bwd, log_, p, L, a0, a1, a2, X, G, Y, c * rows // nthreads,
                      (c + 1) * rows // nthreads)


# ------------------------------------------------------------------------------------------------
# Argument handling (GIL held): the operand readers are ndws._dispatch's (float_arg, out_arg, ...)

cdef void _copy_into(NDArray src, NDArray dst) noexcept:
    # identity kernel from a fresh contiguous temporary into a (clashing) out=
    cdef Plan p
    _plan(&p, src, None, dst, -1)
    if src._itemsize == 4:
        _ew_run(False, ACT_IDENTITY, <float32_t>0, &p, <float32_t*>src._data, NULL,
                <float32_t*>dst._data, 1)
    else:
        _ew_run(False, ACT_IDENTITY, <float64_t>0, &p, <float64_t*>src._data, NULL,
                <float64_t*>dst._data, 1)


cdef inline Grain _grain(int code) noexcept:
    if code <= ACT_LEAKY_RELU:
        return GRAIN_NN_CHEAP
    return GRAIN_NN_TRANSC


cdef object _elementwise(str op, int code, double alpha, object x, object g, object out,
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
        _copy_into(y, o)
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


cdef object _softmax_call(str op, bint log_, object x, object g, object axis, object out,
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
        _copy_into(y, o)
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
    "softmax": ACT_SOFTMAX,
    "logsoftmax": ACT_LOG_SOFTMAX, "log_softmax": ACT_LOG_SOFTMAX,
}
ACTIVATIONS = tuple(sorted(_NAMES))
_DEFAULT_ALPHA = {ACT_LEAKY_RELU: 0.01, ACT_ELU: 1.0}


cdef double _real(object v, str op, str role) except? -1.0:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: {role} must be a real number, got {v!r}")
    return <double>v


cdef int _lookup(object name, dict params, double* alpha, list axis, str op) except -1:
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
            alpha[0] = _real(value, op, "alpha")
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
    cdef int code = _lookup(name, params, alpha, ax, "activation")
    axis = ax[0]
    if code >= ACT_N_ELEMENTWISE and axis is not None and axis != -1:
        raise ValueError(f"activation: a fused {name!r} works along the last axis only, "
                         f"got axis={axis!r}")
    return code


# ------------------------------------------------------------------------------------------------
# Public activations (re-exported by ndws.nn.functional)

def identity(x, out=None):
    """Identity activation: ``y := x`` (a copy, or into `out`).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
        A new array in the current workspace, or `out`.
    """
    return _elementwise("identity", ACT_IDENTITY, 0.0, x, None, out, False)


def relu(x, out=None):
    """Rectified linear unit: ``y := max(x, 0)``; NaN stays NaN (as torch).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
        A new array in the current workspace, or `out`.

    Examples
    --------
    >>> import ndws, ndws.nn.functional as F
    >>> F.relu(ndws.array([-1.0, 0.5])).tolist()
    [0.0, 0.5]
    """
    return _elementwise("relu", ACT_RELU, 0.0, x, None, out, False)


def leaky_relu(x, alpha=0.01, out=None):
    """Leaky ReLU: ``y := x if x > 0 else alpha * x``.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    alpha : float
        Slope for negative inputs (DL4J's and torch's default 0.01).
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("leaky_relu", ACT_LEAKY_RELU, _real(alpha, "leaky_relu", "alpha"), x,
                        None, out, False)


def elu(x, alpha=1.0, out=None):
    """Exponential linear unit: ``y := x if x > 0 else alpha * (exp(x) - 1)``.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    alpha : float
        Scale of the negative branch (default 1.0).
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("elu", ACT_ELU, _real(alpha, "elu", "alpha"), x, None, out,
                        False)


def sigmoid(x, out=None):
    """Logistic sigmoid: ``y := 1 / (1 + exp(-x))``, computed without overflow (+-inf give 1/0).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("sigmoid", ACT_SIGMOID, 0.0, x, None, out, False)


def tanh(x, out=None):
    """Hyperbolic tangent: ``y := tanh(x)`` (saturates at +-1).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("tanh", ACT_TANH, 0.0, x, None, out, False)


def softplus(x, out=None):
    """Softplus: ``y := log(1 + exp(x))``, computed as ``max(x, 0) + log1p(exp(-|x|))``.

    No overflow, and exactly x for large x (torch's beta=1 softplus switches to x above 20
    instead; the two differ by less than 2.1e-9 there).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("softplus", ACT_SOFTPLUS, 0.0, x, None, out, False)


cdef int _gelu_code(object approximate, str op) except -1:
    if approximate == "none":
        return ACT_GELU
    if approximate == "tanh":
        return ACT_GELU_TANH
    raise ValueError(f"{op}: approximate must be 'none' or 'tanh', got {approximate!r}")


def gelu(x, approximate="none", out=None):
    """Gaussian error linear unit, torch's two forms.

    ``approximate="none"``: ``y := x * Phi(x) = x/2 * erfc(-x/sqrt(2))``;
    ``approximate="tanh"``: ``y := x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3)))``.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64
    approximate : {"none", "tanh"}
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("gelu", _gelu_code(approximate, "gelu"), 0.0, x, None, out,
                        False)


def softmax(x, axis=-1, out=None):
    """Softmax along `axis`: ``y := exp(x - max) / sum(exp(x - max))`` (the row maximum is
    subtracted first, so no overflow; sums accumulate in float64).

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64, at least 1-D
    axis : int
        The axis that sums to one (default the last; negative counts from the end).
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _softmax_call("softmax", False, x, None, axis, out, False)


def log_softmax(x, axis=-1, out=None):
    """Log-softmax along `axis`: ``y := x - max - log(sum(exp(x - max)))``.

    Parameters
    ----------
    x : (...) NDArray or array_like of float32 or float64, at least 1-D
    axis : int
        Default the last axis.
    out : NDArray or numpy.ndarray, optional
        Same shape and dtype as `x`; may be `x` itself (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _softmax_call("log_softmax", True, x, None, axis, out, False)


def identity_backward(x, grad_output, out=None):
    """Gradient of `identity`: ``dx := grad_output``.

    All ``*_backward`` functions take the FORWARD INPUT `x` and ``grad_output`` = dL/dy (same
    shape and dtype) and return dL/dx = f'(x) * dL/dy (DL4J's ``IActivation.backprop(in,
    epsilon)``); `out` may be `x` or `grad_output` (in place). f'(NaN) is NaN.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("identity_backward", ACT_IDENTITY, 0.0, x, grad_output, out, True)


def relu_backward(x, grad_output, out=None):
    """Gradient of `relu`: ``dx := grad_output * (1 if x > 0 else 0)`` (see
    `identity_backward` for the convention).

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("relu_backward", ACT_RELU, 0.0, x, grad_output, out, True)


def leaky_relu_backward(x, grad_output, alpha=0.01, out=None):
    """Gradient of `leaky_relu`: ``dx := grad_output * (1 if x > 0 else alpha)``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    alpha : float
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("leaky_relu_backward", ACT_LEAKY_RELU,
                        _real(alpha, "leaky_relu_backward", "alpha"), x, grad_output, out,
                        True)


def elu_backward(x, grad_output, alpha=1.0, out=None):
    """Gradient of `elu`: ``dx := grad_output * (1 if x > 0 else alpha * exp(x))``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    alpha : float
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("elu_backward", ACT_ELU, _real(alpha, "elu_backward", "alpha"), x,
                        grad_output, out, True)


def sigmoid_backward(x, grad_output, out=None):
    """Gradient of `sigmoid`: ``dx := grad_output * s * (1 - s)``, ``s = sigmoid(x)``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("sigmoid_backward", ACT_SIGMOID, 0.0, x, grad_output, out, True)


def tanh_backward(x, grad_output, out=None):
    """Gradient of `tanh`: ``dx := grad_output * (1 - tanh(x)**2)``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("tanh_backward", ACT_TANH, 0.0, x, grad_output, out, True)


def softplus_backward(x, grad_output, out=None):
    """Gradient of `softplus`: ``dx := grad_output * sigmoid(x)``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("softplus_backward", ACT_SOFTPLUS, 0.0, x, grad_output, out, True)


def gelu_backward(x, grad_output, approximate="none", out=None):
    """Gradient of `gelu`: ``dx := grad_output * (Phi(x) + x * phi(x))`` for the exact form,
    the derivative of the tanh formula for ``approximate="tanh"``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    approximate : {"none", "tanh"}
    out : NDArray or numpy.ndarray, optional

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _elementwise("gelu_backward", _gelu_code(approximate, "gelu_backward"), 0.0, x,
                        grad_output, out, True)


def softmax_backward(x, grad_output, axis=-1, out=None):
    """Gradient of `softmax` along `axis`: ``dx := y * (g - sum(g * y, axis))``, with
    ``y = softmax(x, axis)`` recomputed from the forward input `x` and ``g = grad_output``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    axis : int
    out : NDArray or numpy.ndarray, optional
        May be `x` or `grad_output` (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _softmax_call("softmax_backward", False, x, grad_output, axis, out, True)


def log_softmax_backward(x, grad_output, axis=-1, out=None):
    """Gradient of `log_softmax` along `axis`: ``dx := g - softmax(x, axis) * sum(g, axis)``.

    Parameters
    ----------
    x, grad_output : (...) NDArray or array_like of float32 or float64
    axis : int
    out : NDArray or numpy.ndarray, optional
        May be `x` or `grad_output` (in place).

    Returns
    -------
    (...) NDArray of x's dtype
    """
    return _softmax_call("log_softmax_backward", True, x, grad_output, axis, out, True)


def activation(name, x, out=None, **params):
    """Apply activation `name` (one of `ACTIVATIONS`, case-insensitive: "identity", "relu",
    "leakyrelu"/"leaky_relu", "elu", "sigmoid", "tanh", "softplus", "gelu", "softmax",
    "logsoftmax"/"log_softmax").

    Parameters
    ----------
    name : str
    x : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
    **params
        ``alpha`` (leaky_relu, elu), ``approximate`` (gelu), ``axis`` (softmax, log_softmax).

    Returns
    -------
    (...) NDArray of x's dtype

    Raises
    ------
    ValueError
        Unknown name (the message lists the valid ones).
    TypeError
        A parameter the activation does not take.
    """
    cdef double alpha
    cdef list ax = [-1]
    cdef int code = _lookup(name, params, &alpha, ax, "activation")
    axis = ax[0]
    if code == ACT_SOFTMAX or code == ACT_LOG_SOFTMAX:
        return _softmax_call("activation", code == ACT_LOG_SOFTMAX, x, None, axis, out, False)
    return _elementwise("activation", code, alpha, x, None, out, False)


def activation_backward(name, x, grad_output, out=None, **params):
    """dL/dx of activation `name` at forward input `x`, given ``grad_output`` = dL/dy (see
    `activation` for names and parameters, `identity_backward` for the convention).

    Parameters
    ----------
    name : str
    x, grad_output : (...) NDArray or array_like of float32 or float64
    out : NDArray or numpy.ndarray, optional
    **params

    Returns
    -------
    (...) NDArray of x's dtype
    """
    cdef double alpha
    cdef list ax = [-1]
    cdef int code = _lookup(name, params, &alpha, ax, "activation_backward")
    axis = ax[0]
    if code == ACT_SOFTMAX or code == ACT_LOG_SOFTMAX:
        return _softmax_call("activation_backward", code == ACT_LOG_SOFTMAX, x, grad_output,
                             axis, out, True)
    return _elementwise("activation_backward", code, alpha, x, grad_output, out, True)


# ------------------------------------------------------------------------------------------------
# Losses. Every loss is a sum over rows (examples) of a row kernel that returns the row's loss
# and writes the row's gradient; rows are cut into LOSS_CHUNKS fixed chunks whose partial sums
# (float64) are added in order, so the loss does not depend on the thread count.

cdef struct LossArgs:
    int kind
    intp_t n, c
    char* x                  # predictions / logits (n, c), element strides xr, xc
    intp_t xr, xc
    char* t                  # targets / probabilities, same shape; NULL with integer labels
    intp_t tr, tc
    char* lab                # integer class indices (n,) (int32 or int64), or NULL
    intp_t ls
    bint lab64
    char* w                  # per-example weights (n,), or NULL
    intp_t ws
    char* m                  # mask, or NULL: per example (n,) when not m_out, else (n, c)
    intp_t mr, mc
    bint m_out
    char* d                  # gradient out (n, c), or NULL
    intp_t dr, dc
    char* e                  # reduction="none" losses: (n,) for SCE, (n, c) otherwise; or NULL
    intp_t er, ec
    double gscale            # gradient scale: 1/denominator for "mean", else 1


cdef double _sce_row(const LossArgs* A, const floating_t* X__k, const floating_t* T__k,  # IN
                     intp_t label, const floating_t* M__k, double coef,                  # IN
                     floating_t* D__k) noexcept nogil:                                   # OUT
    # -sum_k q_k * log softmax(x)_k with q = labels (one-hot for an index) times the
    # per-output mask; gradient coef * (sum(q) * softmax(x) - q). Terms with q_k == 0 are
    # skipped, so -inf logits of impossible classes give no NaN (0 * log 0 = 0).
    cdef intp_t k, c = A.c, xc = A.xc, tc = A.tc, mc = A.mc, dc = A.dc
    cdef floating_t mx = X__k[0], q
    cdef double s = 0.0, lse, loss = 0.0, qsum = 0.0
    for k in range(1, c):
        if X__k[k * xc] > mx:
            mx = X__k[k * xc]
    for k in range(c):
        s += _exp(X__k[k * xc] - mx)
    lse = mx + log(s)
    if label >= 0:
        q = M__k[label * mc] if M__k != NULL else 1
        if q != 0:
            loss = q * (lse - X__k[label * xc])
            qsum = q
    else:
        for k in range(c):
            q = T__k[k * tc]
            if M__k != NULL:
                q = q * M__k[k * mc]
            if q != 0:
                loss += q * (lse - X__k[k * xc])
                qsum += q
    if D__k != NULL:
        if qsum == 0:
            for k in range(c):
                D__k[k * dc] = 0
        else:
            for k in range(c):
                if label >= 0:
                    q = (M__k[label * mc] if M__k != NULL else 1) if k == label else 0
                else:
                    q = T__k[k * tc] * (M__k[k * mc] if M__k != NULL else 1)
                D__k[k * dc] = <floating_t>(coef * (qsum * _exp(<floating_t>(X__k[k * xc] - lse))
                                                    - q))
    return loss


cdef double _ew_loss_row(const LossArgs* A, const floating_t* X__k, const floating_t* T__k,
                         const floating_t* M__k, double wrow, double coef,
                         floating_t* D__k, floating_t* E__k) noexcept nogil:
    # elementwise losses of one row: sum_k m_k * l(x_k, t_k); gradient coef * m_k * dl/dx_k
    cdef intp_t k, c = A.c
    cdef floating_t v, t, mk, l, dl, diff
    cdef double acc = 0.0
    for k in range(c):
        mk = M__k[k * A.mc] if M__k != NULL else 1
        if mk == 0:
            if D__k != NULL:
                D__k[k * A.dc] = 0
            if E__k != NULL:
                E__k[k * A.ec] = 0
            continue
        v = X__k[k * A.xc]
        t = T__k[k * A.tc]
        if A.kind == LOSS_BCE:
            # max(x, 0) - x*t + log1p(exp(-|x|)): no overflow for any x
            l = (v if v > 0 else 0) - v * t + _log1p(_exp(-_fabs(v)))
            dl = _sigmoid(v) - t
        elif A.kind == LOSS_MSE:
            diff = v - t
            l = diff * diff
            dl = 2 * diff
        else:
            diff = v - t
            l = _fabs(diff)
            dl = 1 if diff > 0 else (-1 if diff < 0 else diff)    # sign; 0 at 0, NaN at NaN
        acc += mk * l
        if D__k != NULL:
            D__k[k * A.dc] = <floating_t>(coef * mk * dl)
        if E__k != NULL:
            E__k[k * A.ec] = <floating_t>(wrow * mk * l)
    return acc


cdef double _loss_rows(const floating_t* X, const LossArgs* A, intp_t r0,
                       intp_t r1) noexcept nogil:
    """Sum over rows [r0, r1) of weight * mask * row loss (rows summed in order)."""
    cdef const floating_t* T = <const floating_t*>A.t
    cdef const floating_t* W = <const floating_t*>A.w
    cdef const floating_t* M = <const floating_t*>A.m
    cdef floating_t* D = <floating_t*>A.d
    cdef floating_t* E = <floating_t*>A.e
    cdef const floating_t* Mrow
    cdef intp_t r, k, label = -1
    cdef double wrow, l, acc = 0.0
    for r in range(r0, r1):
        wrow = W[r * A.ws] if W != NULL else 1.0
        Mrow = NULL
        if M != NULL:
            if A.m_out:
                Mrow = M + r * A.mr
            else:
                wrow *= M[r * A.mr]
        if wrow == 0:
            # masked out (or zero weight): contributes exactly 0, even with NaN predictions
            for k in range(A.c):
                if D != NULL:
                    D[r * A.dr + k * A.dc] = 0
                if E != NULL and A.kind != LOSS_SCE:
                    E[r * A.er + k * A.ec] = 0
            if E != NULL and A.kind == LOSS_SCE:
                E[r * A.er] = 0
            continue
        if A.kind == LOSS_SCE:
            if A.lab != NULL:
                label = ((<int64_t*>A.lab)[r * A.ls] if A.lab64
                         else (<int32_t*>A.lab)[r * A.ls])
            l = _sce_row(A, X + r * A.xr, (T + r * A.tr) if T != NULL else NULL, label, Mrow,
                         wrow * A.gscale, (D + r * A.dr) if D != NULL else NULL)
            if E != NULL:
                E[r * A.er] = <floating_t>(wrow * l)
            acc += wrow * l
        else:
            acc += wrow * _ew_loss_row(A, X + r * A.xr, T + r * A.tr, Mrow, wrow,
                                       wrow * A.gscale, (D + r * A.dr) if D != NULL else NULL,
                                       (E + r * A.er) if E != NULL else NULL)
    return acc


cdef double _loss_run(const floating_t* X, const LossArgs* A, int nthreads) noexcept nogil:
    cdef double part[LOSS_CHUNKS]
    cdef double total = 0.0
    cdef intp_t n = A.n
    cdef int nch = <int>(n if n < LOSS_CHUNKS else LOSS_CHUNKS), c
    if nthreads <= 1:
        for c in range(nch):
            part[c] = _loss_rows(X, A, c * n // nch, (c + 1) * n // nch)
    else:
        for c in prange(nch, schedule='static', num_threads=nthreads):
            part[c] = _loss_rows(X, A, c * n // nch, (c + 1) * n // nch)
    for c in range(nch):
        total += part[c]
    return total


cdef double _mask_count(const floating_t* M, const LossArgs* A) noexcept nogil:
    """The denominator of reduction="mean" when a mask is given (fixed order)."""
    cdef intp_t r, k
    cdef double cnt = 0.0
    cdef bint any_
    for r in range(A.n):
        if not A.m_out:
            cnt += M[r * A.mr] * (A.c if A.kind != LOSS_SCE else 1)
        elif A.kind == LOSS_SCE:
            any_ = False
            for k in range(A.c):
                if M[r * A.mr + k * A.mc] != 0:
                    any_ = True
            cnt += 1 if any_ else 0
        else:
            for k in range(A.c):
                cnt += M[r * A.mr + k * A.mc]
    return cnt


cdef inline void _rc(NDArray a, intp_t* rs, intp_t* cs) noexcept:
    # element strides of a (n,) or (n, c) operand viewed as (n, c)
    rs[0] = a._strides[0] // a._itemsize if a._ndim >= 1 else 0
    cs[0] = a._strides[1] // a._itemsize if a._ndim == 2 else 1


cdef LossArgs _A0     # all zero (static storage)


cdef object _loss_call(str op, int kind, object pred, object target, object weights,
                       object mask, object reduction, bint grad, object grad_out):
    cdef NDArray x, t = None, lab = None, w = None, m = None, d = None, e = None
    cdef NDArray gout = None
    cdef LossArgs A = _A0
    cdef intp_t n, c, r, v
    cdef double total, den
    cdef int nt
    cdef bint mean
    cdef str xname = "logits" if kind in (LOSS_SCE, LOSS_BCE) else "pred"
    cdef str tname = ("labels" if kind == LOSS_SCE else
                      "targets" if kind == LOSS_BCE else "target")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    mean = reduction == "mean"
    x = float_arg(pred, op, xname)
    if kind == LOSS_SCE and x._ndim != 2:
        raise ValueError(f"{op}: logits must be 2-D (n_samples, n_classes), got shape "
                         f"{shape_of(x)}")
    if x._ndim not in (1, 2):
        raise ValueError(f"{op}: {xname} must be (n_samples,) or (n_samples, n_outputs), got "
                         f"shape {shape_of(x)}")
    n = x._shape[0]
    c = x._shape[1] if x._ndim == 2 else 1
    # targets: integer class indices (softmax cross-entropy only) or floats of x's shape
    if kind == LOSS_SCE and not isinstance(target, NDArray) and not isinstance(target,
                                                                                  np.ndarray):
        target = np.asarray(target)
        if target.dtype.kind == "f":
            target = target.astype(x._dtype, copy=False)
    if kind == LOSS_SCE and isinstance(target, NDArray):
        check_array(<NDArray>target, op, tname)
    tdt = target.dtype if kind == LOSS_SCE else None
    if tdt is not None and tdt.kind in "iu":
        if tdt not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise TypeError(f"{op}: integer labels must be int32 or int64, got dtype {tdt}")
        lab = target if isinstance(target, NDArray) else <NDArray>_from_numpy(target)
        if lab._ndim != 1 or lab._shape[0] != n:
            raise ValueError(f"{op}: integer labels must have shape ({n},), got {shape_of(lab)}")
        for r in range(n):
            v = ((<int64_t*>(lab._data + r * lab._strides[0]))[0] if lab._itemsize == 8
                 else (<int32_t*>(lab._data + r * lab._strides[0]))[0])
            if v < 0 or v >= c:
                raise ValueError(f"{op}: labels[{r}] = {v} is out of range for {c} classes")
    else:
        t = float_arg(target, op, tname, x._dtype)
        same_as(x, t, op, tname, xname)
    if weights is not None:
        w = float_arg(weights, op, "weights", x._dtype)
        if w._itemsize != x._itemsize:
            same_as(x, w, op, "weights", xname)      # raises the dtype TypeError
        if w._ndim != 1 or w._shape[0] != n:
            raise ValueError(f"{op}: weights must have shape ({n},), got {shape_of(w)}")
    if mask is not None:
        m = float_arg(mask, op, "mask", x._dtype)
        if m._itemsize != x._itemsize:
            same_as(x, m, op, "mask", xname)
        if not ((m._ndim == 1 and m._shape[0] == n) or
                (m._ndim == x._ndim and m._shape[0] == n and (m._ndim == 1 or m._shape[1] == c))):
            raise ValueError(f"{op}: mask must have shape ({n},) or {shape_of(x)}, got "
                             f"{shape_of(m)}")
    if grad:
        if grad_out is None:
            d = new_result(x._dtype, x._ndim, x._shape, op)
        else:
            gout = out_arg(grad_out, x, op, "grad_out", "logits")
            d = gout
            if clashes(d, x) or clashes(d, t) or clashes(d, w) or clashes(d, m) or (
                    lab is not None and clashes(d, lab)):
                d = new_result(x._dtype, x._ndim, x._shape, op)
    try:
        if reduction == "none":
            if kind == LOSS_SCE:
                e = new_result(x._dtype, 1, x._shape, op)
            else:
                e = new_result(x._dtype, x._ndim, x._shape, op)
        A.kind = kind
        A.n = n
        A.c = c
        A.x = x._data
        _rc(x, &A.xr, &A.xc)
        A.t = t._data if t is not None else NULL
        if t is not None:
            _rc(t, &A.tr, &A.tc)
        A.lab = lab._data if lab is not None else NULL
        A.ls = lab._strides[0] // lab._itemsize if lab is not None else 0
        A.lab64 = lab is not None and lab._itemsize == 8
        A.w = w._data if w is not None else NULL
        A.ws = w._strides[0] // w._itemsize if w is not None else 0
        A.m = m._data if m is not None else NULL
        A.m_out = m is not None and (m._ndim == 2 or (x._ndim == 1 and m._ndim == 1))
        if m is not None:
            _rc(m, &A.mr, &A.mc)
        A.d = d._data if d is not None else NULL
        if d is not None:
            _rc(d, &A.dr, &A.dc)
        A.e = e._data if e is not None else NULL
        if e is not None:
            _rc(e, &A.er, &A.ec)
        if x._ndim == 1 and m is not None:
            # a 1-D prediction has one output per example: its mask is both kinds at once
            A.m_out = True
            A.mc = 0
        A.gscale = 1.0
        nt = threads_for(n * c, GRAIN_NN_TRANSC) if n >= 2 else 1
        with nogil:
            if mean:
                if A.m == NULL:
                    den = <double>n * (c if kind != LOSS_SCE else 1)
                elif x._itemsize == 4:
                    den = _mask_count(<float32_t*>A.m, &A)
                else:
                    den = _mask_count(<float64_t*>A.m, &A)
                # a fully masked batch: loss 0 and a zero gradient (torch would give NaN)
                A.gscale = 1.0 / den if den != 0 else 0.0
            if x._itemsize == 4:
                total = _loss_run(<float32_t*>A.x, &A, nt)
            else:
                total = _loss_run(<float64_t*>A.x, &A, nt)
        if mean:
            total = total * A.gscale
    except BaseException:
        if e is not None:
            discard_result(e)
        if d is not None and d is not gout:
            discard_result(d)
        raise
    loss = e if reduction == "none" else total
    if not grad:
        return loss
    if gout is None:
        return loss, d
    if d is not gout:
        _copy_into(d, gout)
        if e is None:
            discard_result(d)
    return loss, grad_out


def softmax_cross_entropy(logits, labels, weights=None, mask=None, reduction="mean",
                          grad=True, grad_out=None):
    """Softmax cross-entropy from logits, with its gradient (stable log-sum-exp).

    Per example ``l_i = -sum_k q_ik * log_softmax(x_i)_k``, where ``q`` is the label row
    (one-hot of an index, or probabilities) times the per-output mask; terms with
    ``q_ik == 0`` are skipped (so ``-inf`` logits of impossible classes give no NaN). With
    weights ``w`` and per-example mask ``m``: ``L = sum_i w_i m_i l_i``, and

    * ``reduction="sum"``: L;
    * ``reduction="mean"`` (default): L / N, N = n_samples without a mask, ``sum(m)`` with a
      per-example mask, the number of rows with a nonzero entry with a per-output mask (weights
      never enter N; a fully masked batch gives 0 and a zero gradient);
    * ``reduction="none"``: the per-example ``w_i m_i l_i``, (n_samples,) NDArray.

    Masked entries contribute exactly 0 to the loss and the gradient, even with NaN logits.

    Parameters
    ----------
    logits : (n_samples, n_classes) NDArray or array_like of float32 or float64
    labels : (n_samples, n_classes) float array (one-hot or probabilities, logits' dtype), or
        (n_samples,) int32/int64 class indices (ValueError when out of range)
    weights : (n_samples,) float array, optional
        Per-example weights.
    mask : (n_samples,) or (n_samples, n_classes) float array, optional
        Per-example or per-output mask (DL4J's label masks).
    reduction : {"mean", "sum", "none"}
    grad : bool
        Also return dL/dlogits (for "none": the gradient of the sum).
    grad_out : (n_samples, n_classes) NDArray or numpy.ndarray, optional
        Where to write the gradient (may be `logits` itself); else the current workspace.

    Returns
    -------
    loss : float, or (n_samples,) NDArray for reduction="none"
    dlogits : (n_samples, n_classes) NDArray of logits' dtype
        Only when `grad`: ``w_i m_i (sum_k q_ik * softmax(x_i) - q_i) / N``.
    """
    return _loss_call("softmax_cross_entropy", LOSS_SCE, logits, labels, weights, mask,
                      reduction, grad, grad_out)


def binary_cross_entropy_with_logits(logits, targets, weights=None, mask=None, reduction="mean",
                                     grad=True, grad_out=None):
    """Binary cross-entropy from logits, with its gradient.

    Per element ``l = max(x, 0) - x*t + log1p(exp(-|x|))`` (stable for any x; torch's
    formula), gradient ``sigmoid(x) - t``. ``L = sum_ij w_i m_ij l_ij``; ``"mean"`` divides by
    N = the number of elements (torch's mean) without a mask, ``sum(m) * n_outputs`` with a
    per-example mask, ``sum(m)`` with a per-output mask; ``"none"`` returns the per-element
    ``w_i m_ij l_ij`` with logits' shape. Masked entries contribute exactly 0.

    Parameters
    ----------
    logits : (n_samples, n_outputs) or (n_samples,) NDArray or array_like of float32/float64
    targets : same shape and dtype as logits, values in [0, 1]
    weights : (n_samples,) float array, optional
    mask : (n_samples,) or logits-shaped float array, optional
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : NDArray or numpy.ndarray of logits' shape, optional

    Returns
    -------
    loss : float, or NDArray of logits' shape for reduction="none"
    dlogits : NDArray of logits' shape and dtype (only when `grad`)
    """
    return _loss_call("binary_cross_entropy_with_logits", LOSS_BCE, logits, targets, weights,
                      mask, reduction, grad, grad_out)


def mse_loss(pred, target, weights=None, mask=None, reduction="mean", grad=True,
             grad_out=None):
    """Mean squared error with its gradient: per element ``l = (p - t)**2``, ``dl/dp =
    2 (p - t)``; reductions, weights and masks as in `binary_cross_entropy_with_logits`
    ("mean" without a mask divides by the number of elements, as torch's ``mse_loss``).

    Parameters
    ----------
    pred : (n_samples, n_outputs) or (n_samples,) NDArray or array_like of float32/float64
    target : same shape and dtype as pred
    weights : (n_samples,) float array, optional
    mask : (n_samples,) or pred-shaped float array, optional
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : NDArray or numpy.ndarray of pred's shape, optional

    Returns
    -------
    loss : float, or NDArray of pred's shape for reduction="none"
    dpred : NDArray of pred's shape and dtype (only when `grad`)
    """
    return _loss_call("mse_loss", LOSS_MSE, pred, target, weights, mask, reduction, grad,
                      grad_out)


def mae_loss(pred, target, weights=None, mask=None, reduction="mean", grad=True,
             grad_out=None):
    """Mean absolute error with its gradient: per element ``l = |p - t|``, ``dl/dp =
    sign(p - t)`` (0 where p == t, as torch); reductions, weights and masks as in
    `binary_cross_entropy_with_logits`.

    Parameters
    ----------
    pred : (n_samples, n_outputs) or (n_samples,) NDArray or array_like of float32/float64
    target : same shape and dtype as pred
    weights : (n_samples,) float array, optional
    mask : (n_samples,) or pred-shaped float array, optional
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : NDArray or numpy.ndarray of pred's shape, optional

    Returns
    -------
    loss : float, or NDArray of pred's shape for reduction="none"
    dpred : NDArray of pred's shape and dtype (only when `grad`)
    """
    return _loss_call("mae_loss", LOSS_MAE, pred, target, weights, mask, reduction, grad,
                      grad_out)


# ------------------------------------------------------------------------------------------------
# Updaters: fused in-place loops over a flat parameter array, its gradient and state arrays
# (PyTorch's formulas and defaults: ndws' DL4J reference states none for updaters).

cdef struct Hyper:
    int kind
    bint nesterov
    double lr, mu, b1, b2, eps, wd, step_size, bc2_sqrt


cdef void _upd_chunk(const Hyper* h, floating_t* P__i, const floating_t* G__i,  # OUT, IN
                     floating_t* S__i, floating_t* V__i, intp_t n) noexcept nogil:  # OUT, OUT
    # coefficients in the element type, as torch computes with a float32 parameter
    cdef floating_t lr = <floating_t>h.lr, mu = <floating_t>h.mu, b1 = <floating_t>h.b1
    cdef floating_t b2 = <floating_t>h.b2, eps = <floating_t>h.eps
    cdef floating_t decay = <floating_t>(1.0 - h.lr * h.wd)
    cdef floating_t step_size = <floating_t>h.step_size, bc2 = <floating_t>h.bc2_sqrt
    cdef floating_t g, s
    cdef intp_t i
    if h.kind == UPD_SGD:
        for i in range(n):
            P__i[i] = P__i[i] - lr * G__i[i]
    elif h.kind == UPD_MOMENTUM:
        for i in range(n):
            g = G__i[i]
            s = mu * S__i[i] + g
            S__i[i] = s
            P__i[i] = P__i[i] - lr * ((g + mu * s) if h.nesterov else s)
    elif h.kind == UPD_ADAM:
        for i in range(n):
            g = G__i[i]
            s = b1 * S__i[i] + (1 - b1) * g
            S__i[i] = s
            V__i[i] = b2 * V__i[i] + (1 - b2) * g * g
            P__i[i] = (P__i[i] * decay if h.wd != 0 else P__i[i]) - step_size * s / (
                _sqrt(V__i[i]) / bc2 + eps)
    elif h.kind == UPD_RMSPROP:
        for i in range(n):
            g = G__i[i]
            s = mu * S__i[i] + (1 - mu) * g * g
            S__i[i] = s
            P__i[i] = P__i[i] - lr * g / (_sqrt(s) + eps)
    else:  # UPD_ADAGRAD
        for i in range(n):
            g = G__i[i]
            s = S__i[i] + g * g
            S__i[i] = s
            P__i[i] = P__i[i] - lr * g / (_sqrt(s) + eps)


cdef void _upd_run(const Hyper* h, floating_t* P, const floating_t* G, floating_t* S,
                   floating_t* V, intp_t n, int nthreads) noexcept nogil:
    cdef int c
    cdef intp_t lo, hi
    if nthreads <= 1:
        _upd_chunk(h, P, G, S, V, n)
        return
    # fixed ranges cut on 16-element boundaries (no cache line shared between threads)
    for c in prange(nthreads, schedule='static', num_threads=nthreads):
        lo = (c * n // nthreads) & ~(<intp_t>15)
        hi = n if c == nthreads - 1 else ((c + 1) * n // nthreads) & ~(<intp_t>15)
        _upd_chunk(h, P + lo, G + lo, (S + lo) if S != NULL else NULL,
                   (V + lo) if V != NULL else NULL, hi - lo)


cdef NDArray _upd_arg(object x, str op, str role, NDArray like, bint write):
    cdef NDArray a
    if write and not isinstance(x, (NDArray, np.ndarray)):
        raise TypeError(f"{op}: {role} must be an NDArray or numpy.ndarray (updated in place), "
                        f"got {type(x).__name__}")
    if write and not (x.flags.c_contiguous if isinstance(x, np.ndarray)
                      else whole_strides(<NDArray>x) and _c_contiguous(<NDArray>x)):
        # checked before _arg, which would make a contiguous copy: the update would then go
        # to the copy and the caller's array would never change
        raise ValueError(f"{op}: {role} must be C-contiguous to be updated in place, got "
                         f"strides {x.strides}")
    a = float_arg(x, op, role, like._dtype if like is not None else None)
    if like is not None:
        same_as(like, a, op, role, "param")
    if not _c_contiguous(a):
        raise ValueError(f"{op}: {role} must be C-contiguous (updaters run over flat arrays)")
    if write and not a._writeable:
        raise ValueError(f"{op}: {role} is read-only")
    return a


cdef double _hyper(object v, str op, str role, double lo, double hi, bint hi_open) except? -1.0:
    cdef double f = _real(v, op, role)
    if not (f >= lo and (f < hi if hi_open else f <= hi)):
        raise ValueError(f"{op}: {role} must be in [{lo:g}, {hi:g}{')' if hi_open else ']'}, "
                         f"got {v!r}")
    return f


cdef object _update(str op, Hyper* h, object param, object grad, object s1, object s2):
    cdef NDArray p = _upd_arg(param, op, "param", None, True)
    cdef NDArray g = _upd_arg(grad, op, "grad", p, False)
    cdef NDArray a = None, b = None
    cdef int nt, i, j
    if s1 is not None:
        a = _upd_arg(s1[1], op, s1[0], p, True)
    if s2 is not None:
        b = _upd_arg(s2[1], op, s2[0], p, True)
    # the kernel updates param and the state in one pass: arrays that share memory would read
    # values it has already written (adam_update(p, g, m, m, ...)), so refuse them all
    cdef list args = [("param", p), ("grad", g)]
    if a is not None:
        args.append((s1[0], a))
    if b is not None:
        args.append((s2[0], b))
    for i in range(len(args)):
        for j in range(i + 1, len(args)):
            if arrays_overlap(<NDArray>args[i][1], <NDArray>args[j][1]):
                raise ValueError(f"{op}: {args[i][0]} and {args[j][0]} share memory; each must "
                                 f"be an array of its own")
    nt = threads_for(p._size, GRAIN_NN_CHEAP if h.kind <= UPD_MOMENTUM else GRAIN_NN_UPDATE)
    if p._itemsize == 4:
        if release_gil(p._size * p._itemsize, nt):
            with nogil:
                _upd_run(h, <float32_t*>p._data, <float32_t*>g._data,
                         <float32_t*>(a._data if a is not None else NULL),
                         <float32_t*>(b._data if b is not None else NULL), p._size, nt)
        else:
            _upd_run(h, <float32_t*>p._data, <float32_t*>g._data,
                     <float32_t*>(a._data if a is not None else NULL),
                     <float32_t*>(b._data if b is not None else NULL), p._size, nt)
    else:
        if release_gil(p._size * p._itemsize, nt):
            with nogil:
                _upd_run(h, <float64_t*>p._data, <float64_t*>g._data,
                         <float64_t*>(a._data if a is not None else NULL),
                         <float64_t*>(b._data if b is not None else NULL), p._size, nt)
        else:
            _upd_run(h, <float64_t*>p._data, <float64_t*>g._data,
                     <float64_t*>(a._data if a is not None else NULL),
                     <float64_t*>(b._data if b is not None else NULL), p._size, nt)
    return param


cdef double _INF = float("inf")
cdef Hyper _H0        # all zero (static storage): the start of every Hyper


def sgd_update(param, grad, lr):
    """Plain SGD, in place: ``p := p - lr * g``.

    Parameters
    ----------
    param : NDArray or numpy.ndarray of float32 or float64, C-contiguous, writeable
    grad : same shape and dtype as param, C-contiguous
    lr : float >= 0

    Returns
    -------
    param
    """
    cdef Hyper h = _H0
    h.kind = UPD_SGD
    h.lr = _hyper(lr, "sgd_update", "lr", 0.0, _INF, False)
    return _update("sgd_update", &h, param, grad, None, None)


def momentum_update(param, grad, velocity, lr, momentum=0.9, nesterov=False):
    """SGD with momentum (torch's, dampening 0), in place:
    ``v := momentum*v + g; p := p - lr * (g + momentum*v if nesterov else v)``.

    Parameters
    ----------
    param : NDArray or numpy.ndarray of float32 or float64, C-contiguous, writeable
    grad : same shape and dtype as param
    velocity : same shape and dtype as param, writeable; start at zeros
    lr : float >= 0
    momentum : float in [0, 1]
    nesterov : bool

    Returns
    -------
    param
    """
    cdef Hyper h = _H0
    h.kind = UPD_MOMENTUM
    h.lr = _hyper(lr, "momentum_update", "lr", 0.0, _INF, False)
    h.mu = _hyper(momentum, "momentum_update", "momentum", 0.0, 1.0, False)
    h.nesterov = bool(nesterov)
    return _update("momentum_update", &h, param, grad, ("velocity", velocity), None)


cdef object _adam(str op, object param, object grad, object m, object v, object step,
                  object lr, object beta1, object beta2, object eps, object weight_decay):
    cdef Hyper h = _H0
    cdef long t
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"{op}: step must be an int (the 1-based number of this update), "
                        f"got {step!r}")
    if step < 1:
        raise ValueError(f"{op}: step must be >= 1 (the 1-based number of this update), "
                         f"got {step!r}")
    t = step
    h.kind = UPD_ADAM
    h.lr = _hyper(lr, op, "lr", 0.0, _INF, False)
    h.b1 = _hyper(beta1, op, "beta1", 0.0, 1.0, True)
    h.b2 = _hyper(beta2, op, "beta2", 0.0, 1.0, True)
    h.eps = _hyper(eps, op, "eps", 0.0, _INF, False)
    h.wd = _hyper(weight_decay, op, "weight_decay", 0.0, _INF, False)
    h.step_size = h.lr / (1.0 - h.b1 ** t)
    h.bc2_sqrt = sqrt(1.0 - h.b2 ** t)
    return _update(op, &h, param, grad, ("m", m), ("v", v))


def adam_update(param, grad, m, v, step, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
    """Adam (torch's formulation), in place:
    ``m := b1*m + (1-b1)*g; v := b2*v + (1-b2)*g**2;
    p := p - lr/(1-b1**step) * m / (sqrt(v)/sqrt(1-b2**step) + eps)``.

    Parameters
    ----------
    param : NDArray or numpy.ndarray of float32 or float64, C-contiguous, writeable
    grad : same shape and dtype as param
    m, v : same shape and dtype as param, writeable; first and second moments, start at zeros
    step : int >= 1
        The number of this update (1 for the first).
    lr : float >= 0
    beta1, beta2 : float in [0, 1)
    eps : float >= 0

    Returns
    -------
    param
    """
    return _adam("adam_update", param, grad, m, v, step, lr, beta1, beta2, eps, 0.0)


def adamw_update(param, grad, m, v, step, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                 weight_decay=1e-2):
    """AdamW (decoupled weight decay, torch's), in place: ``p := p * (1 - lr*weight_decay)``,
    then the `adam_update` step.

    Parameters
    ----------
    param, grad, m, v, step, lr, beta1, beta2, eps
        As in `adam_update`.
    weight_decay : float >= 0

    Returns
    -------
    param
    """
    return _adam("adamw_update", param, grad, m, v, step, lr, beta1, beta2, eps, weight_decay)


def rmsprop_update(param, grad, sq, lr=1e-2, rho=0.99, eps=1e-8):
    """RMSProp (torch's, not centered, no momentum), in place:
    ``sq := rho*sq + (1-rho)*g**2; p := p - lr * g / (sqrt(sq) + eps)``.

    Parameters
    ----------
    param : NDArray or numpy.ndarray of float32 or float64, C-contiguous, writeable
    grad : same shape and dtype as param
    sq : same shape and dtype as param, writeable; running mean of squares, start at zeros
    lr : float >= 0
    rho : float in [0, 1]
        Decay (torch's ``alpha``, default 0.99; DL4J's RmsProp uses 0.95).
    eps : float >= 0

    Returns
    -------
    param
    """
    cdef Hyper h = _H0
    h.kind = UPD_RMSPROP
    h.lr = _hyper(lr, "rmsprop_update", "lr", 0.0, _INF, False)
    h.mu = _hyper(rho, "rmsprop_update", "rho", 0.0, 1.0, False)
    h.eps = _hyper(eps, "rmsprop_update", "eps", 0.0, _INF, False)
    return _update("rmsprop_update", &h, param, grad, ("sq", sq), None)


def adagrad_update(param, grad, hist, lr=1e-2, eps=1e-10):
    """AdaGrad (torch's), in place: ``hist := hist + g**2; p := p - lr * g / (sqrt(hist) +
    eps)``.

    Parameters
    ----------
    param : NDArray or numpy.ndarray of float32 or float64, C-contiguous, writeable
    grad : same shape and dtype as param
    hist : same shape and dtype as param, writeable; sum of squares, start at zeros
    lr : float >= 0
    eps : float >= 0

    Returns
    -------
    param
    """
    cdef Hyper h = _H0
    h.kind = UPD_ADAGRAD
    h.lr = _hyper(lr, "adagrad_update", "lr", 0.0, _INF, False)
    h.eps = _hyper(eps, "adagrad_update", "eps", 0.0, _INF, False)
    return _update("adagrad_update", &h, param, grad, ("hist", hist), None)


# ------------------------------------------------------------------------------------------------
# Fused linear layer: GEMM + bias + activation in one pass over the output

ctypedef struct _LinearCtx:
    const char* bias            # NULL: no bias
    intp_t bias_stride          # in elements
    int code                    # activation code (ACT_*)
    double alpha
    int f64


cdef inline void _add_bias(floating_t* y, const floating_t* b, intp_t bs, intp_t m, intp_t n,
                           intp_t rs, intp_t cs) noexcept nogil:
    # y[i, j] += b[j] over an m x n tile (element strides rs/cs; b's stride bs)
    cdef intp_t i, j
    for i in range(m):
        for j in range(n):
            y[i * rs + j * cs] += b[j * bs]


cdef void _linear_epilogue(const void* ctx, void* c, intp_t i0, intp_t j0, intp_t m, intp_t n,
                           intp_t rs_c, intp_t cs_c) noexcept nogil:
    # Runs on each finished tile of Y while it is still in cache, inside the GEMM's threads:
    # tiles are disjoint and the bias is only read, so no two threads touch the same element.
    # Row activations (softmax) need whole rows, so for them only the bias is added here.
    cdef const _LinearCtx* t = <const _LinearCtx*>ctx
    cdef bint act = t.code != ACT_IDENTITY and t.code < ACT_N_ELEMENTWISE
    if t.f64:
        if t.bias != NULL:
            _add_bias(<float64_t*>c, <const float64_t*>t.bias + j0 * t.bias_stride,
                      t.bias_stride, m, n, rs_c, cs_c)
        if act:
            act_tile_f64(t.code, t.alpha, <float64_t*>c, m, n, rs_c, cs_c)
    else:
        if t.bias != NULL:
            _add_bias(<float32_t*>c, <const float32_t*>t.bias + j0 * t.bias_stride,
                      t.bias_stride, m, n, rs_c, cs_c)
        if act:
            act_tile_f32(t.code, <float32_t>t.alpha, <float32_t*>c, m, n, rs_c, cs_c)


cdef NDArray _linear_arg(object x, str role, Operand* o, bint write):
    # NDArrays as they are (another thread's through a pinned view), NumPy arrays wrapped
    # without a copy; dtype, stride and staleness checks are _gemm_operand's.
    x = pin_foreign(x, "linear", role)
    float_operand(x, role, o, write, "linear")
    return <NDArray>x if isinstance(x, NDArray) else _from_numpy(x)


def linear(x, w, b=None, activation="identity", out=None, **params):
    """Fused dense layer, ``Y := f(X @ W + b)``, in one pass over the output.

    The bias and an elementwise activation are applied to each tile of Y by the GEMM itself,
    right after the tile's last block of the product, while it is still in cache; softmax and
    log-softmax (which need whole rows) run on the rows afterwards.

    Parameters
    ----------
    x : (n_samples, n_in) NDArray of float32 or float64
    w : (n_in, n_out) NDArray of the same dtype
        DL4J's DenseLayer layout (PyTorch's ``weight`` is its transpose: pass ``weight.T``).
    b : (n_out,) NDArray of the same dtype, optional
    activation : str, optional
        A name of `ndws.nn.functional.activation` ("identity", "relu", "leakyrelu", "elu",
        "sigmoid", "tanh", "softplus", "gelu", "softmax", "logsoftmax", ...); None is identity.
    out : (n_samples, n_out) NDArray, optional
        Where to write Y; may be `x`, `w` or `b` (the product then goes through a temporary).
    **params
        The activation's parameters (``alpha=`` for leaky relu and elu, ``approximate=`` for
        gelu).

    Returns
    -------
    (n_samples, n_out) NDArray
        `out`, or a new array placed in the current workspace.

    Examples
    --------
    >>> import ndws, ndws.nn.functional as F
    >>> x = ndws.array([[1.0, -2.0]])
    >>> w = ndws.array([[1.0, 2.0, 0.0], [1.0, 0.0, 3.0]])
    >>> F.linear(x, w, ndws.array([0.5, 0.0, 1.0]), "relu").tolist()
    [[0.0, 2.0, 0.0]]
    """
    cdef _LinearCtx ctx
    cdef double alpha = 0.0
    cdef Operand ox, ow, ob, oy
    cdef NDArray X = _linear_arg(x, "x", &ox, False)
    cdef NDArray W = _linear_arg(w, "w", &ow, False)
    cdef NDArray B = None, Y, target = None
    cdef Py_ssize_t shape[2]
    cdef bint temp
    cdef epilogue_fn ep = _linear_epilogue
    ctx.code = ACT_IDENTITY if activation is None else activation_code(activation, params, &alpha)
    if X._ndim != 2:
        raise ValueError(f"linear: x must be 2-D (n_samples, n_in), got shape {x.shape}")
    if W._ndim != 2:
        raise ValueError(f"linear: w must be 2-D (n_in, n_out), got shape {w.shape}")
    if ow.f64 != ox.f64:
        raise TypeError(f"linear: w must have x's dtype {x.dtype}, got {w.dtype}")
    if W._shape[0] != X._shape[1]:
        raise ValueError(f"linear: x has {X._shape[1]} features but w has shape {w.shape} "
                         f"(expected ({X._shape[1]}, n_out))")
    shape[0] = X._shape[0]
    shape[1] = W._shape[1]
    ctx.bias = NULL
    ctx.bias_stride = 0
    if b is not None:
        B = _linear_arg(b, "b", &ob, False)
        if ob.f64 != ox.f64:
            raise TypeError(f"linear: b must have x's dtype {x.dtype}, got {b.dtype}")
        if B._ndim != 1 or B._shape[0] != shape[1]:
            raise ValueError(f"linear: b must have shape ({shape[1]},), got {b.shape}")
        ctx.bias = B._data
        ctx.bias_stride = ob.strides[0]
    ctx.alpha = alpha
    ctx.f64 = ox.f64
    if ctx.bias == NULL and ctx.code == ACT_IDENTITY:
        ep = NULL                      # a plain product
    temp = out is None
    if out is not None:
        target = _linear_arg(out, "out", &oy, True)
        if oy.f64 != ox.f64:
            raise TypeError(f"linear: out must have x's dtype {x.dtype}, got {out.dtype}")
        if oy.ndim != 2 or oy.shape[0] != shape[0] or oy.shape[1] != shape[1]:
            raise ValueError(f"linear: out has shape {out.shape}, expected "
                             f"({shape[0]}, {shape[1]})")
        if self_overlapping(&oy):
            raise ValueError(f"linear: out has a zero stride (strides {out.strides}): "
                             f"elements would overlap")
        # out that is an input: compute into a temporary, copy, give the temporary back
        temp = (operands_overlap(&oy, &ox) or operands_overlap(&oy, &ow)
                or (B is not None and operands_overlap(&oy, &ob)))
    Y = new_result(X._dtype, 2, shape, "linear") if temp else target
    try:
        gemm_arrays(X, W, Y, 1.0, 0.0, False, False, ep, &ctx, "linear")
        if ctx.code >= ACT_N_ELEMENTWISE:
            # whole rows are needed: after the product, serially (rows are short: n_out)
            with nogil:
                if ctx.f64:
                    softmax_rows_f64(ctx.code == ACT_LOG_SOFTMAX, <float64_t*>Y._data, shape[0],
                                     shape[1], Y._strides[0] // 8, Y._strides[1] // 8)
                else:
                    softmax_rows_f32(ctx.code == ACT_LOG_SOFTMAX, <float32_t*>Y._data, shape[0],
                                     shape[1], Y._strides[0] // 4, Y._strides[1] // 4)
        if temp and target is not None:
            target[...] = Y
    except BaseException:
        if temp:
            discard_result(Y)
        raise
    if target is not None:
        if temp:
            discard_result(Y)
        return out
    return Y
