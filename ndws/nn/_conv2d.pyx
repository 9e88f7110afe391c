"""conv2d and its gradients, and the transposed convolution, of `ndws.nn.functional`: each call
validated and placed under the kernel-entry contract (ndws.nn._conv), its algorithm chosen per
shape (Winograd, the direct, packed or positions forward, the flipped-kernel or col2im input
gradient, the channel- or column-tap weight gradient, and for 1-4 input channels a forward and
weight gradient of their own: docs/kernels.md, "Which algorithm, per shape"), then run without
the GIL on ndws.nn._winograd, ndws.nn._conv_gemm and ndws.nn._conv_few.

Scratch memory (packed weights, offset tables, each thread's padded image and panel) comes from
`scratch=` or is placed in the calling thread's current workspace like a result;
`conv2d_scratch_bytes` says how much a call needs.
"""

import numpy as np

from ndws._core cimport NDArray
from ndws._dispatch cimport shape_of, byte_extent
from ndws._gemm_types cimport GemmTable
from ndws._linalg cimport gemm_table
from ndws._threads cimport (threads_for, release_gil, thread_limit, GRAIN_GEMM_F32,
                            GRAIN_GEMM_F64)
from ndws._typedefs cimport intp_t
from ndws.nn._activations cimport ACT_IDENTITY
from ndws.nn._conv cimport (Geom, ALIGN, _imin, _imax, parse_format, arg4, logical, _int_arg,
                            _conv_setup, _bias_arg, _act_arg, _wstrides, _shape4, _Call,
                            _Scratch, _distinct, _sums_into, _result, _zero)
from ndws.nn._winograd cimport WinoJob, _wino_ok, _wino_plan, _wino_run
from ndws.nn._conv_few cimport (FewJob, FewPlan, FewFwdJob, FewFwdPlan, _few_ok, _few_plan,
                                _few_run, _few_fwd_ok, _few_fwd_plan, _few_fwd_run)
from ndws.nn._conv_gemm cimport (FwdJob, DxJob, WgJob, WgPlan, FWD_DIRECT, FWD_PACKED, FWD_POS,
                                 _fwd_plan, _fwd_prepare, _fwd_run, _dx_plan, _dx_run,
                                 _wg_plan, _wg_run, _tile_of)

cdef object _F32 = np.dtype(np.float32)
cdef object _F64 = np.dtype(np.float64)

cdef void _extent(NDArray a, char** lo, char** hi) noexcept:
    byte_extent(a._data, a._ndim, a._shape, a._strides, 1, a._itemsize, lo, hi)

cdef int _threads(const Geom* g, bint f64, intp_t ntasks) noexcept:
    cdef double flops = 2.0 * g.N * g.CO * g.OH * g.OW * g.C * g.KH * g.KW
    cdef Py_ssize_t work = <Py_ssize_t>flops if flops < 4e18 else <Py_ssize_t>4e18
    cdef int nt = threads_for(work, GRAIN_GEMM_F64 if f64 else GRAIN_GEMM_F32)
    return <int>_imax(1, _imin(nt, ntasks))

cdef int _fwd_init(FwdJob* j, const Geom* g, bint f64) except -1:
    # the plan of a forward convolution: Winograd for 3x3 stride-1 shapes with enough channels,
    # else the direct driver; j.p's scratch and task counts are the chosen one's
    cdef intp_t MR, NR, item = 8 if f64 else 4
    j.g = g[0]
    j.T = gemm_table()
    j.f64 = f64
    j.act = ACT_IDENTITY
    j.alpha = 0
    j.bias = NULL
    j.bs = 0
    _tile_of(j.T, f64, &MR, &NR)
    _fwd_plan(g, MR, NR, j.T.kc_f64 if f64 else j.T.kc_f32, item, &j.p)
    j.wino = _wino_ok(g, MR)
    if j.wino:
        _wino_plan(g, MR, NR, item, &j.wp)
        j.p.shared_bytes = j.wp.shared_bytes
        j.p.thread_bytes = j.wp.thread_bytes
        j.p.ntasks = j.wp.ntasks
    return 0


cdef void _fwd_io(FwdJob* j, NDArray X, const intp_t* xs, NDArray Y, const intp_t* ys,
                  NDArray B) noexcept:
    cdef char* lo
    cdef char* hi
    cdef int i
    j.x = X._data
    _extent(X, &lo, &hi)
    j.x_hi = hi
    j.y = Y._data
    for i in range(4):
        j.xs[i] = xs[i]
        j.ys[i] = ys[i]
    if B is not None:
        j.bias = B._data
        j.bs = B._strides[0] // B._itemsize


cdef void _fwd_all(FwdJob* j, const char* w, const intp_t* wst, char* shared, int nt,
                   bint release) noexcept:
    cdef WinoJob wj
    cdef int i
    if j.wino:
        wj.g = j.g
        wj.p = j.wp
        wj.T = j.T
        wj.f64, wj.act, wj.alpha = j.f64, j.act, j.alpha
        wj.x, wj.y, wj.bias, wj.bs = j.x, j.y, j.bias, j.bs
        for i in range(4):
            wj.xs[i] = j.xs[i]
            wj.ys[i] = j.ys[i]
        if release:
            with nogil:
                _wino_run(&wj, w, wst, shared, nt)
        else:
            _wino_run(&wj, w, wst, shared, nt)
        return
    if release:
        with nogil:
            _fwd_prepare(j, w, wst, shared)
            _fwd_run(j, nt)
    else:
        _fwd_prepare(j, w, wst, shared)
        _fwd_run(j, nt)


cdef void _flip_geom(const Geom* g, Geom* f) noexcept:
    # the stride-1 convolution of dY with the flipped, transposed kernel that gives dX
    f.N, f.C, f.H, f.W, f.CO = g.N, g.CO, g.OH, g.OW, g.C
    f.KH, f.KW, f.SH, f.SW, f.DH, f.DW = g.KH, g.KW, 1, 1, g.DH, g.DW
    f.PT, f.PB = g.EKH - 1 - g.PT, g.EKH - 1 - g.PB
    f.PL, f.PR = g.EKW - 1 - g.PL, g.EKW - 1 - g.PR
    f.EKH, f.EKW, f.OH, f.OW = g.EKH, g.EKW, g.H, g.W


cdef void _flip_w(const char* w, const intp_t* wst, const Geom* g, intp_t item,
                  const char** fw, intp_t* fst) noexcept:
    # logical (out=c, in=co, kh, kw) of the flipped kernel, through strides
    fw[0] = w + ((g.KH - 1) * wst[2] + (g.KW - 1) * wst[3]) * item
    fst[0], fst[1], fst[2], fst[3] = wst[1], wst[0], -wst[2], -wst[3]


cdef bint _dx_flip(const Geom* g, intp_t MR) noexcept:
    # The input gradient as a forward convolution of dY with the flipped kernel: for stride 1,
    # when it fills half a tile's rows (C >= MR/2 output channels) and does not multiply much
    # padding: it computes H*W outputs of all taps where the col2im computes OH*OW columns
    # (LeNet's 20->50 5x5 on 12x12: 144 against 64 positions, 2.3x the work: col2im measured
    # 2.3x faster there)
    return (g.SH == 1 and g.SW == 1 and 2 * g.C >= MR
            and 8 * g.H * g.W <= 9 * g.OH * g.OW)


cdef int _dx_need(const Geom* g, bint f64, int nt, intp_t* shared, intp_t* thread,
                  intp_t* ntasks) except -1:
    cdef FwdJob fj
    cdef Geom f
    cdef intp_t MR, NR
    cdef const GemmTable* T = gemm_table()
    _tile_of(T, f64, &MR, &NR)
    if _dx_flip(g, MR):
        _flip_geom(g, &f)
        _fwd_init(&fj, &f, f64)
        shared[0], thread[0], ntasks[0] = fj.p.shared_bytes, fj.p.thread_bytes, fj.p.ntasks
    else:
        _dx_plan(g, MR, NR, 8 if f64 else 4, shared, thread)
        ntasks[0] = g.N
    return 0


cdef int _dx_into(const Geom* g, bint f64, NDArray G, const intp_t* gs, const char* w,
                  const intp_t* wst, NDArray DX, const intp_t* dxs, NDArray B, int code,
                  double alpha, char* shared, int nt) except -1:
    """dX (the input gradient of convolution g; conv_transpose2d's output, with its bias and
    activation) from dY = G."""
    cdef FwdJob fj
    cdef DxJob dj
    cdef Geom f
    cdef intp_t MR, NR, item = 8 if f64 else 4
    cdef intp_t fst[4]
    cdef const char* fw
    cdef bint rel = release_gil(DX._size * item, nt)
    cdef int i
    _tile_of(gemm_table(), f64, &MR, &NR)
    if _dx_flip(g, MR):
        _flip_geom(g, &f)
        _fwd_init(&fj, &f, f64)
        _fwd_io(&fj, G, gs, DX, dxs, B)
        fj.act = code
        fj.alpha = alpha
        _flip_w(w, wst, g, item, &fw, fst)
        _fwd_all(&fj, fw, fst, shared, nt, rel)
        return 0
    dj.g = g[0]
    dj.T = gemm_table()
    dj.f64 = f64
    dj.MR, dj.NR = MR, NR
    dj.act, dj.alpha = code, alpha
    dj.dy = G._data
    dj.dx = DX._data
    for i in range(4):
        dj.ds[i] = gs[i]
        dj.xs[i] = dxs[i]
    dj.bias = NULL
    dj.bs = 0
    if B is not None:
        dj.bias = B._data
        dj.bs = B._strides[0] // B._itemsize
    if rel:
        with nogil:
            _dx_run(&dj, w, wst, shared, nt)
    else:
        _dx_run(&dj, w, wst, shared, nt)
    return 0


cdef int _wg_into(const Geom* g, bint f64, NDArray X, const intp_t* xs, NDArray G,
                  const intp_t* gs, NDArray DW, const intp_t* dws, char* shared, intp_t nbytes,
                  int nt) except -1:
    # the GEMM's weight gradient, or few input channels' (ndws.nn._conv_few)
    cdef WgJob j
    cdef FewJob fj
    cdef intp_t MR, NR
    cdef int i
    cdef bint few = _few_ok(g)
    if few:
        fj.g = g[0]
        fj.f64 = f64
        _few_plan(g, 8 if f64 else 4, &fj.p)
        fj.x, fj.dy = X._data, G._data
    else:
        _tile_of(gemm_table(), f64, &MR, &NR)
        j.g = g[0]
        j.T = gemm_table()
        j.f64 = f64
        _wg_plan(g, MR, NR, 8 if f64 else 4, &j.w)
        j.x, j.dy = X._data, G._data
    for i in range(4):
        fj.xs[i] = j.xs[i] = xs[i]
        fj.ds[i] = j.ds[i] = gs[i]
    if release_gil(DW._size * DW._itemsize + G._size * G._itemsize, nt):
        with nogil:
            _wg_go(few, &fj, &j, shared, nbytes, DW._data, dws, nt)
    else:
        _wg_go(few, &fj, &j, shared, nbytes, DW._data, dws, nt)
    return 0


cdef inline void _wg_go(bint few, FewJob* fj, WgJob* j, char* shared, intp_t nbytes, char* dw,
                        const intp_t* dws, int nt) noexcept nogil:
    if few:
        _few_run(fj, shared, nbytes, dw, dws, nt)
    else:
        _wg_run(j, shared, nbytes, dw, dws, nt)


cdef intp_t _wg_need(const Geom* g, bint f64, int nt) except -1:
    # the weight gradient's scratch on nt threads: with two or more, two more sets of chunk
    # buffers let a chunk's copies run beside the previous chunk's products (_wg_run); few
    # channels': the groups' accumulators and a piece's copy per thread (_few_run)
    cdef WgPlan W
    cdef FewPlan F
    cdef intp_t MR, NR
    if _few_ok(g):
        _few_plan(g, 8 if f64 else 4, &F)
        return F.shared_bytes + F.thread_bytes * _imin(nt, F.G)
    _tile_of(gemm_table(), f64, &MR, &NR)
    _wg_plan(g, MR, NR, 8 if f64 else 4, &W)
    if nt > 1 and W.nchunks > 1:
        return W.shared_bytes + 2 * W.set_bytes
    return W.shared_bytes

def conv2d(x, w, b=None, stride=1, padding=0, dilation=1, data_format="NCHW", activation=None,
           out=None, scratch=None, **params):
    """2-D convolution (cross-correlation, as DL4J and PyTorch compute it) with bias and an
    optional fused activation.

    ``Y[n, o, h, w] := f(b[o] + sum_{c, i, j} W[o, c, i, j] * X[n, c, h*sh - pt + i*dh,
    w*sw - pl + j*dw])`` with zeros outside the input.

    Parameters
    ----------
    x : (n, c_in, height, width) NDArray of float32 or float64
        ``(n, height, width, c_in)`` when ``data_format="NHWC"``. Any strides.
    w : (c_out, c_in, kh, kw) NDArray of the same dtype
        DL4J's ``W`` layout (and PyTorch's ``weight``), in either data format.
    b : (c_out,) NDArray of the same dtype, optional
    stride, dilation : int or (int, int)
        Each >= 1.
    padding : int, (int, int) or (top, bottom, left, right)
        Zeros around the input, each >= 0 (SAME's and CAUSAL's asymmetric padding come from
        `same_padding`; DL4J's modes are the layer's business).
    data_format : {"NCHW", "NHWC"}
    activation : str, optional
        An elementwise activation of `activation`, applied to each output tile while it is in
        cache (``**params``: its parameters, e.g. ``alpha=``).
    out : (n, c_out, out_h, out_w) NDArray, optional
        (``(n, out_h, out_w, c_out)`` for NHWC); any strides. May overlap an input (the result
        then goes through a temporary).
    scratch : NDArray or numpy.ndarray, optional
        C-contiguous, writeable, at least `conv2d_scratch_bytes` bytes (fewer threads are used
        when it only fits fewer). When omitted, it is placed in the current workspace like a
        result (detached memory without one) and lives until that workspace's cycle ends.

    Returns
    -------
    NDArray
        `out`, or a new array placed in the current workspace.

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    >>> w = np.ones((1, 1, 2, 2), np.float32)
    >>> F.conv2d(x, w, np.array([0.5], np.float32), stride=2).tolist()
    [[[[10.5, 18.5], [42.5, 50.5]]]]
    """
    cdef str op = "conv2d"
    cdef bint nhwc = parse_format(data_format, op)
    cdef NDArray X = arg4(x, op, "x")
    cdef NDArray Wt = arg4(w, op, "w", X._dtype)
    cdef NDArray B = None, Y, R
    cdef Geom g
    cdef FwdJob j
    cdef intp_t xs[4]
    cdef intp_t wst[4]
    cdef intp_t ys[4]
    cdef intp_t dims[4]
    cdef intp_t shape[4]
    cdef double alpha
    cdef int code, nt
    cdef bint f64
    cdef _Scratch S
    cdef _Call call = _Call(op)
    _conv_setup(X, Wt, nhwc, stride, padding, dilation, &g, xs, op, "x", "w", False)
    if b is not None:
        B = _bias_arg(b, X, g.CO, op, "b")
    code = _act_arg(activation, params, &alpha, op)
    f64 = X._itemsize == 8
    _shape4(g.N, g.CO, g.OH, g.OW, nhwc, shape)
    Y = call.out(out, X._dtype, 4, shape, "out")
    if Y._size == 0:
        return out if out is not None else Y
    try:
        logical(Y, nhwc, dims, ys)
        if _few_fwd_ok(&g) and ys[3] == 1:
            _few_fwd(call, &g, f64, X, xs, Wt, B, Y, scratch, code, alpha, nhwc)
            call.finish()
            return out if out is not None else Y
        _fwd_init(&j, &g, f64)
        nt = _threads(&g, f64, j.p.ntasks)
        S = call.scratch(scratch, j.p.shared_bytes + j.p.thread_bytes,
                         j.p.shared_bytes + nt * j.p.thread_bytes, (X, Wt, B, Y))
        nt = <int>_imin(nt, (S.nbytes - j.p.shared_bytes) // j.p.thread_bytes)
        R = call.temp_for(Y, (X, Wt, B))
        logical(R, nhwc, dims, ys)
        _fwd_io(&j, X, xs, R, ys, B)
        j.act = code
        j.alpha = alpha
        _wstrides(Wt, wst)
        _fwd_all(&j, Wt._data, wst, S.base, nt, release_gil(R._size * R._itemsize, nt))
        call.finish()
    except BaseException:
        call.fail()
        raise
    return out if out is not None else Y


cdef int _few_fwd(_Call call, const Geom* g, bint f64, NDArray X, const intp_t* xs, NDArray Wt,
                  NDArray B, NDArray Y, object scratch, int code, double alpha, bint nhwc
                  ) except -1:
    # conv2d's forward with few input channels (ndws.nn._conv_few): its scratch, output, run
    cdef FewFwdJob j
    cdef intp_t wst[4]
    cdef intp_t dims[4]
    cdef int nt, i
    cdef _Scratch S
    cdef NDArray R
    j.g = g[0]
    j.f64 = f64
    j.act = code
    j.alpha = alpha
    _few_fwd_plan(g, 8 if f64 else 4, &j.p)
    nt = _threads(g, f64, j.p.ntasks)
    S = call.scratch(scratch, j.p.shared_bytes + j.p.thread_bytes,
                     j.p.shared_bytes + nt * j.p.thread_bytes, (X, Wt, B, Y))
    nt = <int>_imin(nt, (S.nbytes - j.p.shared_bytes) // j.p.thread_bytes)
    R = call.temp_for(Y, (X, Wt, B))
    logical(R, nhwc, dims, j.ys)
    j.x = X._data
    j.y = R._data
    for i in range(4):
        j.xs[i] = xs[i]
    j.bias = NULL
    j.bs = 0
    if B is not None:
        j.bias = B._data
        j.bs = B._strides[0] // B._itemsize
    _wstrides(Wt, wst)
    if release_gil(R._size * R._itemsize, nt):
        with nogil:
            _few_fwd_run(&j, Wt._data, wst, S.base, nt)
    else:
        _few_fwd_run(&j, Wt._data, wst, S.base, nt)
    return 0


def conv2d_backward(x, w, grad_output, stride=1, padding=0, dilation=1, data_format="NCHW",
                    need_input=True, need_weight=True, need_bias=True, grad_input=None,
                    grad_weight=None, grad_bias=None, scratch=None):
    """Gradients of `conv2d`'s convolution: ``(dL/dx, dL/dw, dL/db)``.

    ``grad_output`` is dL/d(pre-activation) (apply the activation's backward first, as DL4J's
    ``afn.backprop`` does). The weight gradient's reduction over the batch and positions runs
    in a fixed order, so every thread count gives the same bits.

    Parameters
    ----------
    x, w : the forward's input and weights (see `conv2d`)
    grad_output : (n, c_out, out_h, out_w) NDArray (``(n, out_h, out_w, c_out)`` for NHWC)
    stride, padding, dilation, data_format : as for `conv2d`
    need_input, need_weight, need_bias : bool
        Which gradients to compute (a first layer needs no input gradient; a frozen one only
        that); the others are returned as None.
    grad_input, grad_weight, grad_bias : NDArray, optional
        Outputs (shapes of x, w and (c_out,)); any strides; they must not overlap each other.
    scratch : as for `conv2d` (``conv2d_scratch_bytes(..., backward=True)``)

    Returns
    -------
    tuple of (NDArray or None)
        ``(grad_input, grad_weight, grad_bias)``.
    """
    return _backward(x, w, grad_output, data_format, stride, padding, dilation, need_input,
                     need_weight, need_bias, grad_input, grad_weight, grad_bias, scratch, False,
                     "conv2d_backward")


cdef tuple _backward(object x, object w, object grad_output, object data_format, object stride,
                     object padding, object dilation, object need_input, object need_weight,
                     object need_bias, object grad_input, object grad_weight, object grad_bias,
                     object scratch, bint transposed, str op):
    # conv2d's gradients, or (transposed) conv_transpose2d's: with x -> g's output side and
    # grad_output -> g's input side, dx = conv2d(grad_output, w), dw the weight gradient with
    # the roles of x and grad_output swapped, db = sums of grad_output
    cdef Geom g
    cdef intp_t xs[4]
    cdef intp_t gs[4]
    cdef intp_t ws[4]
    cdef intp_t dims[4]
    cdef intp_t shape[4]
    cdef intp_t one[1]
    cdef intp_t sh_x, th_x, nt_x, need_min = 0, need_full = 0
    cdef NDArray GX = None, GW = None, GB = None, RX, RW, RB, In, Gr
    cdef intp_t *ins
    cdef intp_t *grs
    cdef _Call call = _Call(op)
    cdef _Scratch S
    cdef FwdJob fj
    cdef bint nhwc = parse_format(data_format, op)
    cdef NDArray X = arg4(x, op, "x")
    cdef NDArray Wt = arg4(w, op, "w", X._dtype)
    cdef NDArray G = arg4(grad_output, op, "grad_output", X._dtype)
    cdef bint ni = bool(need_input), nw = bool(need_weight), nb = bool(need_bias)
    cdef bint f64 = X._itemsize == 8
    cdef int nt
    if G._dtype != X._dtype:
        raise TypeError(f"{op}: grad_output has dtype {G._dtype}, expected {X._dtype} (the "
                        f"dtype of x)")
    _conv_setup(X, Wt, nhwc, stride, padding, dilation, &g, xs, op, "x", "w", transposed)
    logical(G, nhwc, dims, gs)
    if transposed:
        _shape4(g.N, g.C, g.H, g.W, nhwc, shape)
    else:
        _shape4(g.N, g.CO, g.OH, g.OW, nhwc, shape)
    expected = tuple(shape[i] for i in range(4))
    if shape_of(G) != expected:
        raise ValueError(f"{op}: grad_output has shape {shape_of(G)}, expected {expected}")
    if not ni and grad_input is not None or not nw and grad_weight is not None or \
            not nb and grad_bias is not None:
        raise ValueError(f"{op}: an output was given for a gradient that is not asked for")
    # In: the convolution's input side (x, or grad_output when transposed); Gr: its output side
    In, Gr = (G, X) if transposed else (X, G)
    if transposed:
        ins, grs = gs, xs
    else:
        ins, grs = xs, gs
    if ni:
        GX = call.out(grad_input, X._dtype, X._ndim, X._shape, "grad_input")
    if nw:
        GW = call.out(grad_weight, X._dtype, 4, Wt._shape, "grad_weight")
    if nb:
        one[0] = Wt._shape[1] if transposed else Wt._shape[0]
        GB = call.out(grad_bias, X._dtype, 1, one, "grad_bias")
    try:
        _distinct((GX, GW, GB), ("grad_input", "grad_weight", "grad_bias"), op)
        nt = _threads(&g, f64, 1 << 30)
        if ni and X._size:
            if transposed:
                _fwd_init(&fj, &g, f64)
                nt_x = fj.p.ntasks
                sh_x, th_x = fj.p.shared_bytes, fj.p.thread_bytes
            else:
                _dx_need(&g, f64, nt, &sh_x, &th_x, &nt_x)
            need_min = sh_x + th_x
            need_full = sh_x + th_x * _imin(nt, nt_x)
        if nw and X._size and G._size:
            need_min = _imax(need_min, _wg_need(&g, f64, 1))
            need_full = _imax(need_full, _wg_need(&g, f64, nt))
        S = call.scratch(scratch, need_min, need_full, (X, Wt, G, GX, GW, GB))
        RX = call.temp_for(GX, (X, Wt, G))
        RW = call.temp_for(GW, (X, Wt, G))
        RB = call.temp_for(GB, (X, Wt, G))
        if nw:
            # (transposed: w (c_in_t, c_out_t, kh, kw) is g's own weight layout (CO, C, kh, kw))
            _wstrides(RW, ws)
            if In._size and Gr._size:
                _wg_into(&g, f64, In, ins, Gr, grs, RW, ws, S.base, S.nbytes, nt)
            else:
                _zero(RW)
        if nb:
            if transposed:
                _sums_into(G, gs, g.N, g.C, g.H, g.W, RB, nt)
            else:
                _sums_into(G, gs, g.N, g.CO, g.OH, g.OW, RB, nt)
        if ni and X._size:
            logical(RX, nhwc, dims, xs)
            _wstrides(Wt, ws)
            if transposed:
                # conv2d(grad_output, w): the convolution g itself, without bias
                _fwd_init(&fj, &g, f64)
                nt_x = <int>_imin(nt, (S.nbytes - fj.p.shared_bytes) // fj.p.thread_bytes)
                _fwd_io(&fj, G, gs, RX, xs, None)
                _fwd_all(&fj, Wt._data, ws, S.base, <int>nt_x,
                         release_gil(RX._size * RX._itemsize, <int>nt_x))
            else:
                nt_x = _imin(nt, (S.nbytes - sh_x) // th_x)
                _dx_into(&g, f64, G, gs, Wt._data, ws, RX, xs, None, ACT_IDENTITY, 0, S.base,
                         <int>nt_x)
        call.finish()
    except BaseException:
        call.fail()
        raise
    return (_result(grad_input, GX), _result(grad_weight, GW), _result(grad_bias, GB))

def conv_transpose2d(x, w, b=None, stride=1, padding=0, dilation=1, data_format="NCHW",
                     activation=None, out=None, scratch=None, **params):
    """Transposed convolution (DL4J's Deconvolution2D): the input gradient of `conv2d`, as a
    layer of its own.

    ``Y`` is the ``dL/dx`` of ``conv2d(., w, stride, padding, dilation)`` for ``dL/dy = x``,
    plus the bias and the activation. The output size is
    ``stride * (in - 1) + (k - 1) * dilation + 1 - p_before - p_after`` per axis
    (`conv_transpose_output_size`).

    Parameters
    ----------
    x : (n, c_in, height, width) NDArray of float32 or float64 (NHWC: channels last)
    w : (c_in, c_out, kh, kw) NDArray of the same dtype
        DL4J's Deconvolution2D ``W`` layout (PyTorch's ``ConvTranspose2d.weight``).
    b : (c_out,) NDArray, optional
    stride, padding, dilation, data_format, activation, out, scratch, **params
        As for `conv2d` (``conv2d_scratch_bytes(..., transposed=True)``).

    Returns
    -------
    NDArray

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> x = np.ones((1, 1, 2, 2), np.float32)
    >>> F.conv_transpose2d(x, np.ones((1, 1, 2, 2), np.float32), stride=2).shape
    (1, 1, 4, 4)
    """
    cdef str op = "conv_transpose2d"
    cdef bint nhwc = parse_format(data_format, op)
    cdef NDArray X = arg4(x, op, "x")
    cdef NDArray Wt = arg4(w, op, "w", X._dtype)
    cdef NDArray B = None, Y, R
    cdef Geom g
    cdef intp_t xs[4]
    cdef intp_t wst[4]
    cdef intp_t ys[4]
    cdef intp_t shape[4]
    cdef intp_t sh, th, ntasks
    cdef double alpha
    cdef int code, nt
    cdef bint f64 = X._itemsize == 8
    cdef _Scratch S
    cdef _Call call = _Call(op)
    _conv_setup(X, Wt, nhwc, stride, padding, dilation, &g, xs, op, "x", "w", True)
    if b is not None:
        B = _bias_arg(b, X, g.C, op, "b")
    code = _act_arg(activation, params, &alpha, op)
    _shape4(g.N, g.C, g.H, g.W, nhwc, shape)
    Y = call.out(out, X._dtype, 4, shape, "out")
    if Y._size == 0:
        return out if out is not None else Y
    try:
        nt = _threads(&g, f64, 1 << 30)
        _dx_need(&g, f64, nt, &sh, &th, &ntasks)
        nt = <int>_imin(nt, ntasks)
        S = call.scratch(scratch, sh + th, sh + nt * th, (X, Wt, B, Y))
        nt = <int>_imin(nt, (S.nbytes - sh) // th)
        R = call.temp_for(Y, (X, Wt, B))
        logical(R, nhwc, shape, ys)
        _wstrides(Wt, wst)
        _dx_into(&g, f64, X, xs, Wt._data, wst, R, ys, B, code, alpha, S.base, nt)
        call.finish()
    except BaseException:
        call.fail()
        raise
    return out if out is not None else Y


def conv_transpose2d_backward(x, w, grad_output, stride=1, padding=0, dilation=1,
                              data_format="NCHW", need_input=True, need_weight=True,
                              need_bias=True, grad_input=None, grad_weight=None, grad_bias=None,
                              scratch=None):
    """Gradients of `conv_transpose2d`: ``(dL/dx, dL/dw, dL/db)``.

    ``dL/dx = conv2d(grad_output, w)``; ``dL/dw`` is `conv2d_backward`'s weight gradient with
    grad_output as the input and x as the output gradient; ``dL/db`` sums grad_output over
    everything but its channels. Parameters as for `conv2d_backward` (shapes of x, w and
    (c_out,)).
    """
    return _backward(x, w, grad_output, data_format, stride, padding, dilation, need_input,
                     need_weight, need_bias, grad_input, grad_weight, grad_bias, scratch, True,
                     "conv_transpose2d_backward")


def conv2d_scratch_bytes(x_shape, w_shape, stride=1, padding=0, dilation=1,
                         data_format="NCHW", dtype=np.float32, backward=False,
                         transposed=False, threads=None):
    """Bytes of scratch one call needs: what a layer reserves in its working memory (or passes
    as ``scratch=``) and reports in its memory report.

    Parameters
    ----------
    x_shape, w_shape : tuple of 4 ints
        The shapes the call gets (`conv2d`: x and w; ``transposed``: `conv_transpose2d`'s).
    stride, padding, dilation, data_format : as for the call
    dtype : float32 or float64
    backward : bool
        The gradients' call (`conv2d_backward` / `conv_transpose2d_backward`, all three
        gradients) instead of the forward.
    threads : int, optional
        Kernel threads to size for (default: ``ndws.get_num_threads()``); a smaller scratch
        runs the call on fewer threads, with the same result.

    Returns
    -------
    int
        Including 64 bytes for aligning the start.

    Examples
    --------
    >>> import ndws.nn.functional as F
    >>> F.conv2d_scratch_bytes((64, 1, 28, 28), (20, 1, 5, 5), threads=1) > 0
    True
    """
    cdef str op = "conv2d_scratch_bytes"
    cdef Geom g
    cdef FewFwdPlan ffp
    cdef intp_t sh = 0, th = 0, ntasks = 1, need = 0, tmp
    cdef intp_t xs[4]
    cdef FwdJob fj
    cdef NDArray X, Wt
    cdef bint nhwc = parse_format(data_format, op)
    cdef bint f64
    cdef int nt
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{op}: dtype must be float32 or float64, got {dtype!r}") from None
    if dt != _F32 and dt != _F64:
        raise TypeError(f"{op}: dtype must be float32 or float64, got {dt}")
    f64 = dt == _F64
    for name, shp in (("x_shape", x_shape), ("w_shape", w_shape)):
        if not isinstance(shp, (tuple, list)) or len(shp) != 4:
            raise ValueError(f"{op}: {name} must be a tuple of 4 ints, got {shp!r}")
        for v in shp:
            _int_arg(v, op, name, 0, &tmp)
    if threads is None:
        nt = thread_limit()
    else:
        _int_arg(threads, op, "threads", 1, &tmp)
        nt = <int>_imin(tmp, 1 << 16)
    # the geometry of the call itself, from stand-in arrays of those shapes (no memory)
    zero = np.zeros((), dt)
    X = arg4(np.broadcast_to(zero, tuple(x_shape)), op, "x_shape")
    Wt = arg4(np.broadcast_to(zero, tuple(w_shape)), op, "w_shape")
    _conv_setup(X, Wt, nhwc, stride, padding, dilation, &g, xs, op, "x", "w", bool(transposed))
    if g.N == 0 or g.OH == 0:
        return ALIGN
    if bool(backward) == bool(transposed):
        # the forward driver: conv2d's forward, conv_transpose2d's input gradient
        _fwd_init(&fj, &g, f64)
        sh, th, ntasks = fj.p.shared_bytes, fj.p.thread_bytes, fj.p.ntasks
    else:
        # the input-gradient driver: conv2d's input gradient, conv_transpose2d's forward
        _dx_need(&g, f64, nt, &sh, &th, &ntasks)
    need = sh + th * _imin(nt, ntasks)
    if not backward and not transposed and _few_fwd_ok(&g):
        # or few input channels' forward (taken when the output's rows are runs)
        _few_fwd_plan(&g, 8 if f64 else 4, &ffp)
        need = _imax(need, ffp.shared_bytes + ffp.thread_bytes * _imin(nt, ffp.ntasks))
    if backward:
        need = _imax(need, _wg_need(&g, f64, nt))
    return need + ALIGN

cdef str _fwd_name(const Geom* g, bint f64):
    cdef FwdJob fj
    _fwd_init(&fj, g, f64)
    if fj.wino:
        return "winograd"
    return {FWD_DIRECT: "direct", FWD_PACKED: "packed", FWD_POS: "positions"}[fj.p.mode]


def _algorithms(x_shape, w_shape, stride=1, padding=0, dilation=1, data_format="NCHW",
                dtype=np.float32):
    """Which algorithm each pass of conv2d(x, w) takes here (this CPU's GEMM build): for the
    tests (every path covered) and docs/kernels.md's table.

    Returns
    -------
    dict
        ``forward``: "winograd", "direct" (virtual columns), "packed", "positions" (1x1) or
        "few channels" (ndws.nn._conv_few);
        ``input_grad``: one of those (the flipped kernel) or "col2im"; ``weight_grad``: "channel
        taps", "column taps" or "row taps" (the GEMM's tap groups), or "few channels"
        (ndws.nn._conv_few); ``forward_tasks``: how many tasks the forward is cut into (the
        most threads it can use); ``weight_grad_tasks``: how many of the weight gradient's
        product tasks can run at once (few channels: its groups of pieces, fixed by the shape;
        the GEMM's: a chunk's tiles).
    """
    cdef str op = "_algorithms"
    cdef Geom g, f
    cdef FwdJob fj
    cdef FewFwdPlan ffp
    cdef FewPlan fwp
    cdef intp_t xs[4]
    cdef intp_t MR, NR
    cdef WgPlan W
    cdef bint nhwc = parse_format(data_format, op)
    dt = np.dtype(dtype)
    zero = np.zeros((), dt)
    X = arg4(np.broadcast_to(zero, tuple(x_shape)), op, "x_shape")
    Wt = arg4(np.broadcast_to(zero, tuple(w_shape)), op, "w_shape")
    _conv_setup(X, Wt, nhwc, stride, padding, dilation, &g, xs, op, "x", "w", False)
    out = {"forward": _fwd_name(&g, dt == _F64)}
    _fwd_init(&fj, &g, dt == _F64)
    out["forward_tasks"] = fj.p.ntasks
    if _few_fwd_ok(&g) and not nhwc:
        # (NHWC output rows are not runs unless there is one output channel)
        _few_fwd_plan(&g, dt.itemsize, &ffp)
        out["forward"], out["forward_tasks"] = "few channels", ffp.ntasks
    _tile_of(gemm_table(), dt == _F64, &MR, &NR)
    if _dx_flip(&g, MR):
        _flip_geom(&g, &f)
        out["input_grad"] = _fwd_name(&f, dt == _F64)
    else:
        out["input_grad"] = "col2im"
    _wg_plan(&g, MR, NR, dt.itemsize, &W)
    out["weight_grad"] = ("few channels" if _few_ok(&g) else "row taps" if W.rowmode
                          else "column taps" if W.kwmode else "channel taps")
    out["weight_grad_tasks"] = W.ntiles
    if _few_ok(&g):
        _few_plan(&g, dt.itemsize, &fwp)
        out["weight_grad_tasks"] = fwp.G
    return out
