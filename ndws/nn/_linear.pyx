"""The fused dense layer `linear` of `ndws.nn.functional`: GEMM + bias + activation in one pass
over the output, on ndws._linalg's GEMM with the bias and activation as its tile epilogue.
"""
cimport cython
cimport numpy as cnp

import numpy as np

from ndws._core cimport NDArray, pin_foreign
from ndws._dispatch cimport (Operand, float_operand, operands_overlap, self_overlapping,
                             new_result, discard_result)
from ndws._gemm_types cimport epilogue_fn
from ndws._linalg cimport gemm_arrays
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t
from ndws.nn._activations cimport (ACT_IDENTITY, ACT_LOG_SOFTMAX, ACT_N_ELEMENTWISE,
                                   activation_code, act_tile_f32, act_tile_f64,
                                   bias_act_tile_f32, bias_act_tile_f64, softmax_rows_f32,
                                   softmax_rows_f64)
from ndws._core import from_numpy as _from_numpy

cnp.import_array()


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
    if cs_c == 1 and (t.bias == NULL or t.bias_stride == 1) and t.code < ACT_N_ELEMENTWISE:
        # contiguous rows (every dense layer's output): bias and activation in one pass over
        # the tile, one vectorised loop per activation
        if t.f64:
            bias_act_tile_f64(t.code, t.alpha, <float64_t*>c,
                              <const float64_t*>t.bias + j0 if t.bias != NULL else NULL,
                              m, n, rs_c)
        else:
            bias_act_tile_f32(t.code, <float32_t>t.alpha, <float32_t*>c,
                              <const float32_t*>t.bias + j0 if t.bias != NULL else NULL,
                              m, n, rs_c)
        return
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


cdef int linear_into(NDArray X, NDArray W, NDArray B, int code, double alpha,
                     NDArray Y) except -1:
    # Y := f(X @ W + B) on checked arrays (see _linear.pxd): the bias and an elementwise
    # activation as the GEMM's epilogue, a row activation (softmax) after the product
    cdef _LinearCtx ctx
    cdef epilogue_fn ep = _linear_epilogue
    ctx.code = code
    ctx.alpha = alpha
    ctx.f64 = X._itemsize == 8
    ctx.bias = NULL
    ctx.bias_stride = 0
    if B is not None:
        ctx.bias = B._data
        ctx.bias_stride = B._strides[0] // B._itemsize
    elif code == ACT_IDENTITY:
        ep = NULL                      # a plain product
    gemm_arrays(X, W, Y, 1.0, 0.0, False, False, ep, &ctx, "linear")
    if code >= ACT_N_ELEMENTWISE:
        # whole rows are needed: after the product, serially (rows are short: n_out)
        with nogil:
            if ctx.f64:
                softmax_rows_f64(code == ACT_LOG_SOFTMAX, <float64_t*>Y._data, Y._shape[0],
                                 Y._shape[1], Y._strides[0] // 8, Y._strides[1] // 8)
            else:
                softmax_rows_f32(code == ACT_LOG_SOFTMAX, <float32_t*>Y._data, Y._shape[0],
                                 Y._shape[1], Y._strides[0] // 4, Y._strides[1] // 4)
    return 0


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
    cdef double alpha = 0.0
    cdef int code
    cdef Operand ox, ow, ob, oy
    cdef NDArray X = _linear_arg(x, "x", &ox, False)
    cdef NDArray W = _linear_arg(w, "w", &ow, False)
    cdef NDArray B = None, Y, target = None
    cdef Py_ssize_t shape[2]
    cdef bint temp
    code = ACT_IDENTITY if activation is None else activation_code(activation, params, &alpha)
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
    if b is not None:
        B = _linear_arg(b, "b", &ob, False)
        if ob.f64 != ox.f64:
            raise TypeError(f"linear: b must have x's dtype {x.dtype}, got {b.dtype}")
        if B._ndim != 1 or B._shape[0] != shape[1]:
            raise ValueError(f"linear: b must have shape ({shape[1]},), got {b.shape}")
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
        linear_into(X, W, B, code, alpha, Y)
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
