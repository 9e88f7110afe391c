# C-level API of ndws' activation kernels, for other Cython modules to `cimport` (the fused
# `linear` of ndws.nn._linear applies an activation to each GEMM output tile with these, while
# the tile is still in cache). Everything here is serial: the caller owns the parallelism (it runs
# these on tiles it already split between threads) and holds no GIL.
from ndws._core cimport NDArray
from ndws._typedefs cimport float32_t, float64_t, intp_t

# Activation codes. Elementwise codes come first; ACT_SOFTMAX and ACT_LOG_SOFTMAX act on rows.
cdef enum:
    ACT_IDENTITY = 0
    ACT_RELU = 1
    ACT_LEAKY_RELU = 2     # alpha = negative slope
    ACT_ELU = 3            # alpha = scale of the negative branch
    ACT_SIGMOID = 4
    ACT_TANH = 5
    ACT_SOFTPLUS = 6
    ACT_GELU = 7           # exact: x * Phi(x)
    ACT_GELU_TANH = 8      # tanh approximation (torch's approximate="tanh")
    ACT_HARDTANH = 9       # DL4J's: clip(x, -1, 1)
    ACT_HARDSIGMOID = 10   # DL4J's: clip(0.2 x + 0.5, 0, 1)
    ACT_SELU = 11
    ACT_SWISH = 12         # x * sigmoid(x) (torch's silu)
    ACT_SOFTSIGN = 13
    ACT_RATIONALTANH = 14  # DL4J's rational approximation of 1.7159 tanh(2x/3)
    ACT_RECTIFIEDTANH = 15 # max(0, tanh(x))
    ACT_CUBE = 16
    ACT_THRESHOLDEDRELU = 17  # alpha = theta
    ACT_SOFTMAX = 18
    ACT_LOG_SOFTMAX = 19
    ACT_N_ELEMENTWISE = 18    # codes below this are elementwise

# The code of activation `name` (the names and aliases of `ndws.nn.functional.activation`, e.g.
# "relu", "leakyrelu"/"leaky_relu", "gelu") with keyword parameters `params` (None or a dict:
# "alpha" for leaky_relu/elu, "theta" for thresholdedrelu, "approximate" ("none"|"tanh") for
# gelu, "axis" for the softmaxes, which must then be -1 or None here). Writes the scalar parameter to alpha[0] (0 when the
# activation has none). Raises ValueError (unknown name, listing the valid ones, or bad value)
# or TypeError (unknown parameter).
cdef int activation_code(object name, dict params, double* alpha) except -1

# Y := f(Y) in place on an m x n tile, element (i, j) at Y[i*rs + j*cs] (strides in ELEMENTS,
# any sign). Elementwise codes apply f to each element; ACT_SOFTMAX / ACT_LOG_SOFTMAX apply the
# numerically stable (row-max subtracted) softmax to each of the m rows of length n.
cdef void act_tile_f32(int code, float32_t alpha, float32_t* Y,
                       intp_t m, intp_t n, intp_t rs, intp_t cs) noexcept nogil
cdef void act_tile_f64(int code, float64_t alpha, float64_t* Y,
                       intp_t m, intp_t n, intp_t rs, intp_t cs) noexcept nogil

# Y := f(Y + B) in place on an m x n tile of contiguous rows rs elements apart (B: n contiguous
# values added to every row, or NULL), for the elementwise codes: one pass, the sum rounded to
# the element type before f (the same bits as adding, then act_tile).
cdef void bias_act_tile_f32(int code, float32_t alpha, float32_t* Y, const float32_t* B,
                            intp_t m, intp_t n, intp_t rs) noexcept nogil
cdef void bias_act_tile_f64(int code, float64_t alpha, float64_t* Y, const float64_t* B,
                            intp_t m, intp_t n, intp_t rs) noexcept nogil

# D := f'(X) * G on an m x n tile (X the forward INPUT, G = dL/dY; strides in elements per
# array). D may be X or G (same strides). For ACT_SOFTMAX / ACT_LOG_SOFTMAX each row gets the
# vector-Jacobian product of the row softmax instead.
cdef void act_backward_tile_f32(int code, float32_t alpha,
                                const float32_t* X, intp_t xrs, intp_t xcs,
                                const float32_t* G, intp_t grs, intp_t gcs,
                                float32_t* D, intp_t drs, intp_t dcs,
                                intp_t m, intp_t n) noexcept nogil
cdef void act_backward_tile_f64(int code, float64_t alpha,
                                const float64_t* X, intp_t xrs, intp_t xcs,
                                const float64_t* G, intp_t grs, intp_t gcs,
                                float64_t* D, intp_t drs, intp_t dcs,
                                intp_t m, intp_t n) noexcept nogil

# Row softmax (log_ = 0) or log-softmax (log_ = 1) of an m x n tile in place, rows of length n.
cdef void softmax_rows_f32(bint log_, float32_t* Y, intp_t m, intp_t n,
                           intp_t rs, intp_t cs) noexcept nogil
cdef void softmax_rows_f64(bint log_, float64_t* Y, intp_t m, intp_t n,
                           intp_t rs, intp_t cs) noexcept nogil

# dst := src element for element (same shape and dtype; dst may have any strides): how an
# `out=` that clashes with an input receives the result computed in a temporary.
cdef void copy_into(NDArray src, NDArray dst) noexcept

# One call's allocations, for the kernel-entry contract's rollback (docs/architecture.md), the
# base of the convolutions' and the time loops' _Call: the arrays placed for the call (`made`)
# and the temporaries computed in place of an output that overlaps an input (`temps`, pairs of
# temporary and output). fail() gives every placed array back, newest first; finish() copies
# each temporary into its output, then gives the temporaries back.
cdef class _CallAllocations:
    cdef str op
    cdef list made
    cdef list temps

    cdef void fail(self)
    cdef void finish(self)

# The entry of every elementwise activation, forward or (bwd) backward (g: grad_output, required
# then), and of the softmax / log-softmax along `axis`: x and g read with ndws._dispatch's
# checks (errors name `op` and the argument), the result placed or written to `out` (a clashing
# `out` through a temporary), the kernel run on as many threads as the size warrants.
cdef object elementwise_call(str op, int code, double alpha, object x, object g, object out,
                             bint bwd)
cdef object softmax_call(str op, bint log_, object x, object g, object axis, object out,
                         bint bwd)

# As activation_code, for the entries that also take a softmax's axis (written to axis[0]; -1
# by default) and name themselves `op` in errors.
cdef int lookup_activation(object name, dict params, double* alpha, list axis,
                           str op) except -1
# An activation's scalar parameter (a slope, a threshold): a finite real, else ValueError
# naming `op` and `role`.
cdef double activation_param(object value, str op, str role) except? -1.0
