"""The window geometry and the kernel-entry contract the convolution and pooling kernels share,
DL4J's size helpers, and the column matrix (im2col / col2im) of `ndws.nn.functional`.

Every window kernel (ndws.nn._conv2d on the GEMM, ndws.nn._winograd, ndws.nn._depthwise,
ndws.nn._pool) works in a logical NCHW frame: an array in NHWC is the same four axes with other
strides, so every loop is written once for (n, c, h, w) and any strides. This module reads their
arguments into that frame (`Geom`, `logical`), places their outputs and scratch
(`_Call`, `_Scratch`: docs/architecture.md's kernel-entry contract, with the rollback of every
internal allocation when a call fails), and sums gradients per channel (the bias gradients).
"""

cimport numpy as cnp

import numpy as np

from ndws._core cimport NDArray
from ndws._dispatch cimport (array_arg, scratch_arg, float_arg, new_result, whole_strides,
                             shape_of, arrays_overlap, second_name)
from ndws._threads cimport threads_for, release_gil, run_tasks, GRAIN_NN_CHEAP
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t
from ndws.nn._activations cimport ACT_IDENTITY, ACT_N_ELEMENTWISE, activation_code

cnp.import_array()

cdef object _F32 = np.dtype(np.float32)
cdef object _F64 = np.dtype(np.float64)
cdef object _U8 = np.dtype(np.uint8)

# element counts and byte sizes a call may reach: far from intp's overflow in every product
cdef intp_t SIZE_LIMIT = (<intp_t>1) << 62

# ------------------------------------------------------------------------------------------------
# Arguments (GIL held): geometry, operands, outputs

cdef int _int_arg(object v, str op, str role, intp_t lo, intp_t* out) except -1:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{op}: {role} must be an int or a pair of ints, got {v!r}")
    if v < lo or v >= SIZE_LIMIT:
        raise ValueError(f"{op}: {role} must be >= {lo}, got {v!r}")
    out[0] = <intp_t>v
    return 0


cdef int parse_pair(object v, str op, str role, intp_t lo, intp_t* out) except -1:
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"{op}: {role} must be an int or a pair of ints, got {v!r}")
        _int_arg(v[0], op, role, lo, &out[0])
        _int_arg(v[1], op, role, lo, &out[1])
    else:
        _int_arg(v, op, role, lo, &out[0])
        out[1] = out[0]
    return 0


cdef int parse_padding(object v, str op, str role, intp_t* out) except -1:
    cdef intp_t two[2]
    if isinstance(v, (tuple, list)) and len(v) == 4:
        for i in range(4):
            _int_arg(v[i], op, role, 0, &out[i])
        return 0
    if isinstance(v, (tuple, list)) and len(v) != 2:
        raise ValueError(f"{op}: {role} must be an int, a pair (height, width) or four ints "
                         f"(top, bottom, left, right), got {v!r}")
    parse_pair(v, op, role, 0, two)
    out[0] = out[1] = two[0]
    out[2] = out[3] = two[1]
    return 0


cdef bint parse_format(object data_format, str op) except -1:
    return second_name(data_format, op, "data_format", "NCHW", "NHWC")


cdef int window_output(Geom* g, str op) except -1:
    cdef intp_t span
    g.EKH = (g.KH - 1) * g.DH + 1
    g.EKW = (g.KW - 1) * g.DW + 1
    for ax in range(2):
        ek = g.EKH if ax == 0 else g.EKW
        k = g.KH if ax == 0 else g.KW
        size = g.H if ax == 0 else g.W
        before = g.PT if ax == 0 else g.PL
        after = g.PB if ax == 0 else g.PR
        name = "height" if ax == 0 else "width"
        if ek > size + before + after:
            dil = f" (dilated from {k})" if ek != k else ""
            raise ValueError(f"{op}: kernel {name} {ek}{dil} is larger than the input {name} "
                             f"{size} plus padding ({before}, {after})")
    g.OH = (g.H + g.PT + g.PB - g.EKH) // g.SH + 1
    g.OW = (g.W + g.PL + g.PR - g.EKW) // g.SW + 1
    return 0


cdef int window_geom(Geom* g, object stride, object padding, object dilation, str op) except -1:
    cdef intp_t two[2]
    cdef intp_t pad[4]
    parse_pair(stride, op, "stride", 1, two)
    g.SH, g.SW = two[0], two[1]
    parse_pair(dilation, op, "dilation", 1, two)
    g.DH, g.DW = two[0], two[1]
    parse_padding(padding, op, "padding", pad)
    g.PT, g.PB, g.PL, g.PR = pad[0], pad[1], pad[2], pad[3]
    if (g.KH - 1) * g.DH >= SIZE_LIMIT // 4 or (g.KW - 1) * g.DW >= SIZE_LIMIT // 4:
        raise ValueError(f"{op}: dilated kernel size overflows")
    return window_output(g, op)


cdef NDArray arg4(object x, str op, str role, object dtype=None):
    cdef NDArray a = float_arg(x, op, role, dtype)
    if a._ndim != 4:
        raise ValueError(f"{op}: {role} must be 4-D, got shape {shape_of(a)}")
    return a


cdef void logical(NDArray a, bint nhwc, intp_t* dims, intp_t* strides) noexcept:
    cdef intp_t item = a._itemsize
    cdef int src[4]
    cdef int i
    src[0] = 0
    if nhwc:
        src[1], src[2], src[3] = 3, 1, 2
    else:
        src[1], src[2], src[3] = 1, 2, 3
    for i in range(4):
        dims[i] = a._shape[src[i]]
        strides[i] = a._strides[src[i]] // item


cdef tuple format_shape(const intp_t* dims, bint nhwc):
    if nhwc:
        return (dims[0], dims[2], dims[3], dims[1])
    return (dims[0], dims[1], dims[2], dims[3])


cdef int _check_size(int ndim, const intp_t* shape, intp_t itemsize, str op, str role
                     ) except -1:
    cdef object total = itemsize
    for i in range(ndim):
        total *= shape[i]
    if total >= SIZE_LIMIT:
        raise ValueError(f"{op}: {role} of shape {tuple(shape[i] for i in range(ndim))} would "
                         f"have {total} bytes: too large")
    return 0


cdef NDArray out_array(object out, object dtype, int ndim, const intp_t* shape, str op,
                       str role):
    cdef NDArray o = array_arg(out, op, role)
    cdef int d
    if o._dtype != dtype:
        raise TypeError(f"{op}: {role} has dtype {o._dtype}, expected {dtype}")
    if not o._writeable:
        raise ValueError(f"{op}: {role} is read-only")
    if not whole_strides(o):
        raise ValueError(f"{op}: {role} has strides {tuple(o._strides[d] for d in range(o._ndim))}"
                         f" that are not whole {o._itemsize}-byte elements")
    expected = tuple(shape[d] for d in range(ndim))
    if shape_of(o) != expected:
        raise ValueError(f"{op}: {role} has shape {shape_of(o)}, expected {expected}")
    for d in range(ndim):
        if o._strides[d] == 0 and o._shape[d] > 1:
            raise ValueError(f"{op}: {role} has a zero stride (strides "
                             f"{tuple(o._strides[i] for i in range(ndim))}): elements would "
                             f"overlap")
    return o


cdef NDArray place(object out, object dtype, int ndim, const intp_t* shape, str op, str role):
    if out is None:
        _check_size(ndim, shape, (<cnp.dtype>dtype).itemsize, op, role)
        return new_result(dtype, ndim, shape, op)
    return out_array(out, dtype, ndim, shape, op, role)


cdef class _Scratch:
    """The scratch memory of one call: the caller's `scratch=` array, or a uint8 array placed in
    the current workspace like a result (it then lives as long as the workspace's cycle, as
    DL4J's column buffers in working memory do)."""

    @staticmethod
    cdef _Scratch get(object scratch, intp_t need, str op, tuple inputs):
        cdef _Scratch s = _Scratch.__new__(_Scratch)
        cdef intp_t shape[1]
        cdef intp_t off
        if scratch is None:
            shape[0] = need + ALIGN
            s.arr = new_result(_U8, 1, shape, op)
        else:
            s.arr = scratch_arg(scratch, op, inputs)
        off = (-<size_t>s.arr._data) % ALIGN
        s.base = s.arr._data + off
        s.nbytes = s.arr._size * s.arr._itemsize - off
        if s.nbytes < need:
            raise ValueError(f"{op}: scratch has {s.arr._size * s.arr._itemsize} bytes, the "
                             f"call needs {need + ALIGN} (see conv2d_scratch_bytes)")
        return s

# ------------------------------------------------------------------------------------------------
# Channel sums (the bias gradients)

cdef void _chan_sums(const floating_t* t, const intp_t* ts, intp_t N, intp_t H, intp_t W,
                     intp_t c0, intp_t c1, floating_t* out, intp_t os) noexcept nogil:
    """out[c*os] := sum over n, h, w of t[n, c, h, w] for c in [c0, c1): float64 partial sums
    in a fixed order (4 lanes along w, then the lanes, rows and images in order)."""
    cdef intp_t c, n, h, w, sw = ts[3], w4 = W - W % 4
    cdef double s0, s1, s2, s3, total
    cdef const floating_t* row
    for c in range(c0, c1):
        total = 0
        for n in range(N):
            for h in range(H):
                row = t + n * ts[0] + c * ts[1] + h * ts[2]
                s0 = s1 = s2 = s3 = 0
                for w in range(0, w4, 4):
                    s0 += row[w * sw]
                    s1 += row[(w + 1) * sw]
                    s2 += row[(w + 2) * sw]
                    s3 += row[(w + 3) * sw]
                for w in range(w4, W):
                    s0 += row[w * sw]
                total += (s0 + s1) + (s2 + s3)
        out[c * os] = <floating_t>total


ctypedef struct _SumJob:
    const char* t
    intp_t ts[4]
    intp_t N, C, H, W
    char* out
    intp_t os
    int f64


cdef void _sum_task(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef _SumJob* j = <_SumJob*>ctx
    if j.f64:
        _chan_sums(<const float64_t*>j.t, j.ts, j.N, j.H, j.W, c, c + 1, <float64_t*>j.out, j.os)
    else:
        _chan_sums(<const float32_t*>j.t, j.ts, j.N, j.H, j.W, c, c + 1, <float32_t*>j.out, j.os)


cdef void _run_sums(_SumJob* j, int nt) noexcept nogil:
    # one task per channel: each channel's sum is computed whole by one thread
    run_tasks(_sum_task, j, j.C, nt)

# ------------------------------------------------------------------------------------------------
# Entry pieces the convolutions share (GIL held)

cdef int _conv_setup(NDArray X, NDArray Wt, bint nhwc, object stride, object padding,
                     object dilation, Geom* g, intp_t* xs, str op, str xrole, str wrole,
                     bint transposed) except -1:
    """Geometry of conv2d(x, w) into g and x's logical strides into xs. Transposed: g is the
    convolution whose input gradient conv_transpose2d(x, w) is (w (C_in, C_out, kh, kw) is its
    weight, x has the shape of its output; its input size comes from the stride, padding and
    dilation)."""
    cdef intp_t dims[4]
    cdef intp_t two[2]
    cdef intp_t pad[4]
    cdef intp_t want
    cdef str fmt = "NHWC" if nhwc else "NCHW"
    logical(X, nhwc, dims, xs)
    if Wt._dtype != X._dtype:
        raise TypeError(f"{op}: {wrole} has dtype {Wt._dtype}, expected {X._dtype} (the dtype "
                        f"of {xrole})")
    g.N = dims[0]
    g.CO, g.C = Wt._shape[0], Wt._shape[1]
    g.KH, g.KW = Wt._shape[2], Wt._shape[3]
    if g.KH < 1 or g.KW < 1:
        raise ValueError(f"{op}: {wrole} has shape {shape_of(Wt)}: the kernel must be at "
                         f"least 1x1")
    want = g.CO if transposed else g.C
    if dims[1] != want:
        msg = (f"{op}: {xrole} has {dims[1]} channels (data_format {fmt}, shape {shape_of(X)}) "
               f"but {wrole} expects {want} (its shape is {shape_of(Wt)})")
        if (X._shape[1] if nhwc else X._shape[3]) == want:
            msg += (f"; {xrole} looks like {'NCHW' if nhwc else 'NHWC'} data: pass "
                    f"data_format={'NCHW' if nhwc else 'NHWC'!r}")
        raise ValueError(msg)
    if not transposed:
        g.H, g.W = dims[2], dims[3]
        return window_geom(g, stride, padding, dilation, op)
    parse_pair(stride, op, "stride", 1, two)
    g.SH, g.SW = two[0], two[1]
    parse_pair(dilation, op, "dilation", 1, two)
    g.DH, g.DW = two[0], two[1]
    parse_padding(padding, op, "padding", pad)
    g.PT, g.PB, g.PL, g.PR = pad[0], pad[1], pad[2], pad[3]
    if max(g.KH * g.DH, g.KW * g.DW, dims[2] * g.SH, dims[3] * g.SW) >= SIZE_LIMIT // 4:
        raise ValueError(f"{op}: the output size overflows")
    g.H = g.SH * (dims[2] - 1) + (g.KH - 1) * g.DH + 1 - g.PT - g.PB
    g.W = g.SW * (dims[3] - 1) + (g.KW - 1) * g.DW + 1 - g.PL - g.PR
    if g.H < 1 or g.W < 1:
        raise ValueError(f"{op}: padding {(g.PT, g.PB, g.PL, g.PR)} leaves no output for "
                         f"input {dims[2]}x{dims[3]}, kernel {g.KH}x{g.KW}, stride "
                         f"{(g.SH, g.SW)}, dilation {(g.DH, g.DW)}")
    window_output(g, op)
    return 0

cdef NDArray _bias_arg(object b, NDArray X, intp_t n, str op, str role):
    cdef NDArray B = float_arg(b, op, role, X._dtype)
    if B._dtype != X._dtype:
        raise TypeError(f"{op}: {role} has dtype {B._dtype}, expected {X._dtype} (the dtype of "
                        f"x)")
    if B._ndim != 1 or B._shape[0] != n:
        raise ValueError(f"{op}: {role} must have shape ({n},), got {shape_of(B)}")
    return B

cdef int _act_arg(object activation, dict params, double* alpha, str op) except -1:
    cdef int code
    alpha[0] = 0
    if activation is None:
        if params:
            raise TypeError(f"{op}: unexpected keyword arguments {sorted(params)}")
        return ACT_IDENTITY
    code = activation_code(activation, params, alpha)
    if code >= ACT_N_ELEMENTWISE:
        raise ValueError(f"{op}: activation {activation!r} is not elementwise; apply it to the "
                         f"output")
    return code

cdef void _wstrides(NDArray Wt, intp_t* wst) noexcept:
    cdef int i
    for i in range(4):
        wst[i] = Wt._strides[i] // Wt._itemsize

cdef void _shape4(intp_t a, intp_t b, intp_t c, intp_t d, bint nhwc, intp_t* shape) noexcept:
    # logical (n, c, h, w) -> the array shape in the data format
    shape[0] = a
    if nhwc:
        shape[1], shape[2], shape[3] = c, d, b
    else:
        shape[1], shape[2], shape[3] = b, c, d

cdef class _Call(_CallAllocations):
    """The allocations of one call, for the contract's rollback (docs/architecture.md): results
    and an internal scratch placed in the current workspace, temporaries for outputs that
    overlap an input (computed there, copied into the output by finish()). fail() gives every
    internal allocation back, newest first; finish() gives back the temporaries (the newest)."""

    cdef NDArray out(self, object out, object dtype, int ndim, const intp_t* shape, str role):
        cdef NDArray r
        if out is None:
            _check_size(ndim, shape, (<cnp.dtype>dtype).itemsize, self.op, role)
            r = new_result(dtype, ndim, shape, self.op)
            self.made.append(r)
            return r
        return out_array(out, dtype, ndim, shape, self.op, role)

    cdef _Scratch scratch(self, object scratch, intp_t need_min, intp_t need_full,
                          tuple others):
        cdef _Scratch s = _Scratch.get(scratch, need_full if scratch is None else need_min,
                                       self.op, others)
        if scratch is None:
            self.made.append(s.arr)
        return s

    cdef NDArray temp_for(self, NDArray target, tuple inputs):
        cdef NDArray t
        if target is None:
            return None
        for a in inputs:
            if a is not None and arrays_overlap(target, <NDArray>a):
                t = new_result(target._dtype, target._ndim, target._shape, self.op)
                self.made.append(t)
                self.temps.append((t, target))
                return t
        return target

cdef int _distinct(tuple outs, tuple names, str op) except -1:
    # user outputs of one call must not share memory
    for i in range(len(outs)):
        for k in range(i + 1, len(outs)):
            if outs[i] is not None and outs[k] is not None and arrays_overlap(outs[i], outs[k]):
                raise ValueError(f"{op}: {names[i]} and {names[k]} overlap")
    return 0

cdef int _sums_into(NDArray T, const intp_t* ts, intp_t N, intp_t C, intp_t H, intp_t W,
                    NDArray out, int nt) except -1:
    cdef _SumJob j
    cdef int i
    j.t = T._data
    for i in range(4):
        j.ts[i] = ts[i]
    j.N, j.C, j.H, j.W = N, C, H, W
    j.out = out._data
    j.os = out._strides[0] // out._itemsize
    j.f64 = out._itemsize == 8
    nt = <int>_imin(nt, threads_for(N * C * H * W, GRAIN_NN_CHEAP))
    if release_gil(T._size * T._itemsize, nt):
        with nogil:
            _run_sums(&j, nt)
    else:
        _run_sums(&j, nt)
    return 0

cdef object _result(object out, NDArray made):
    return out if out is not None else made

cdef int _zero(NDArray a) except -1:
    # zeros into any strides (the weight gradient of an empty batch)
    if a._size:
        np.asarray(a)[...] = 0
    return 0

# ------------------------------------------------------------------------------------------------
# Size helpers (DL4J's ConvolutionUtils / InputTypeUtil, docs/kernels.md "Convolutions")

_MODES = ("strict", "truncate", "same", "causal")


def _mode_arg(mode):
    if not isinstance(mode, str) and hasattr(mode, "name"):
        mode = mode.name
    if not isinstance(mode, str) or mode.lower() not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)} (any case), got {mode!r}")
    return mode.lower()


def _size_arg(v, role, lo):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{role} must be an int, got {v!r}")
    if v < lo:
        raise ValueError(f"{role} must be >= {lo}, got {v!r}")
    return int(v)


def _pad_pair(padding):
    # one axis' padding: an int (both sides) or (before, after)
    if isinstance(padding, (tuple, list)):
        if len(padding) != 2:
            raise ValueError(f"padding must be an int or (before, after), got {padding!r}")
        return tuple(_size_arg(p, "padding", 0) for p in padding)
    p = _size_arg(padding, "padding", 0)
    return p, p


def conv_output_size(in_size, kernel_size, stride=1, padding=0, dilation=1, mode="truncate",
                     dim="height"):
    """Output size of a convolution or pooling window along one axis, with DL4J's modes.

    ``eK = (kernel_size - 1) * dilation + 1``. Strict: ``(in + p0 + p1 - eK) / stride + 1``,
    which must be a whole number; Truncate: the same rounded down (the last rows are ignored);
    Same and Causal: ``ceil(in / stride)`` (their padding comes from `same_padding` or is all
    before the input; an explicit padding is an error, as in DL4J).

    Parameters
    ----------
    in_size, kernel_size, stride, dilation : int
        Input size >= 1, kernel >= 1, stride >= 1, dilation >= 1.
    padding : int or (int, int)
        Padding on both sides, or (before, after); each >= 0.
    mode : {"strict", "truncate", "same", "causal"}, any case (or an enum with that name)
    dim : str
        The axis' name in error messages ("height", "width").

    Returns
    -------
    int

    Raises
    ------
    ValueError
        Stride or kernel < 1, an effective kernel larger than the padded input (always
        checked, DL4J 1.0.0-beta5's rule), padding with Same/Causal, or a Strict size that
        does not divide.

    Examples
    --------
    >>> from ndws.nn.functional import conv_output_size
    >>> conv_output_size(28, 5), conv_output_size(28, 5, stride=2, mode="same")
    (24, 14)
    >>> conv_output_size(28, 3, stride=2, mode="strict")
    Traceback (most recent call last):
    ...
    ValueError: ConvolutionMode.Strict requires: output height = (input height - kernelSize + 2*padding)/stride + 1 to be an integer. Got: (28 - 3 + 0)/2 + 1 = 13.50 (use Truncate to round down or Same for ceil(in/stride))
    """
    m = _mode_arg(mode)
    if isinstance(stride, (bool, np.bool_)) or not isinstance(stride, (int, np.integer)):
        raise TypeError(f"stride must be an int, got {stride!r}")
    if stride <= 0:
        raise ValueError(f"Invalid strides: strides must be > 0 (stride {dim} = {stride})")
    k = _size_arg(kernel_size, "kernel_size", 1)
    i = _size_arg(in_size, "in_size", 1)
    d = _size_arg(dilation, "dilation", 1)
    s = int(stride)
    p0, p1 = _pad_pair(padding)
    ek = (k - 1) * d + 1
    if m in ("same", "causal"):
        if p0 or p1:
            raise ValueError("Padding cannot be used when using the `same' convolution mode"
                             if m == "same" else
                             "Padding cannot be used with the causal convolution mode")
        return -(-i // s)
    if ek > i + p0 + p1:
        what = "effective kernel" if ek != k else "kernel"
        raise ValueError(f"Invalid input configuration for {what} {dim}. Require 0 < k{dim[0].upper()} "
                         f"<= in{dim.capitalize()} + padding; got (k{dim[0].upper()}={ek}, "
                         f"in{dim.capitalize()}={i}, padding=({p0}, {p1}))")
    if m == "strict" and (i - ek + p0 + p1) % s:
        pad = f"{p0 + p1}" if p0 != p1 else f"2*{p0}"
        raise ValueError(f"ConvolutionMode.Strict requires: output {dim} = (input {dim} - "
                         f"kernelSize + 2*padding)/stride + 1 to be an integer. Got: ({i} - "
                         f"{ek} + {p0 + p1})/{s} + 1 = {(i - ek + p0 + p1) / s + 1:.2f} (use "
                         f"Truncate to round down or Same for ceil(in/stride))")
    return (i - ek + p0 + p1) // s + 1


def same_padding(in_size, kernel_size, stride=1, dilation=1):
    """DL4J's Same-mode padding along one axis: ``(before, after)``.

    The output has ``out = ceil(in / stride)`` elements; the total padding
    ``T = (out - 1) * stride + eK - in`` is split with the smaller half before (top/left) and
    the larger after (bottom/right), as DL4J's ``getSameModeTopLeftPadding`` /
    ``getSameModeBottomRightPadding`` do. When the kernel is smaller than the stride T can be
    negative (the last input rows are then simply not read): ``(0, 0)``.

    Examples
    --------
    >>> from ndws.nn.functional import same_padding
    >>> same_padding(28, 5), same_padding(28, 5, stride=2), same_padding(5, 1, stride=2)
    ((2, 2), (1, 2), (0, 0))
    """
    i = _size_arg(in_size, "in_size", 1)
    k = _size_arg(kernel_size, "kernel_size", 1)
    s = _size_arg(stride, "stride", 1)
    d = _size_arg(dilation, "dilation", 1)
    out = -(-i // s)
    total = max(0, (out - 1) * s + (k - 1) * d + 1 - i)
    return (total // 2, total - total // 2)


def conv_transpose_output_size(in_size, kernel_size, stride=1, padding=0, dilation=1,
                               mode="truncate"):
    """Output size of a transposed convolution (DL4J's Deconvolution2D) along one axis:
    ``stride * (in - 1) + eK - p0 - p1``, or ``stride * in`` in Same mode.

    Examples
    --------
    >>> from ndws.nn.functional import conv_transpose_output_size
    >>> conv_transpose_output_size(12, 5), conv_transpose_output_size(7, 3, stride=2, mode="same")
    (16, 14)
    """
    m = _mode_arg(mode)
    i = _size_arg(in_size, "in_size", 1)
    k = _size_arg(kernel_size, "kernel_size", 1)
    s = _size_arg(stride, "stride", 1)
    d = _size_arg(dilation, "dilation", 1)
    p0, p1 = _pad_pair(padding)
    if m in ("same", "causal"):
        if p0 or p1:
            raise ValueError("Padding cannot be used when using the `same' convolution mode")
        return s * i
    out = s * (i - 1) + (k - 1) * d + 1 - p0 - p1
    if out < 1:
        raise ValueError(f"padding ({p0}, {p1}) leaves no output: stride * (in - 1) + "
                         f"effective kernel = {out + p0 + p1}")
    return out

# ------------------------------------------------------------------------------------------------
# im2col / col2im (DL4J's ops): the column matrix itself, for custom layers and for checking.
# The convolutions never build it.

cdef void _i2c_image(const Geom* g, const char* x, const intp_t* xs, char* col,
                     const intp_t* cs, intp_t n, bint back, floating_t dummy) noexcept nogil:
    # forward: col[n, c, i, j, oh, ow] := x[n, c, oh*SH - PT + i*DH, ow*SW - PL + j*DW] (0
    # outside); back: x[n, c, ...] := sum of the col entries that read it (x zeroed first)
    cdef intp_t c, i, kj, oh, ow, ih, off, lo, hi, h, w
    cdef const floating_t* xin = <const floating_t*>x
    cdef floating_t* xo = <floating_t*>x
    cdef floating_t* cr
    cdef intp_t xb = n * xs[0]
    if back:
        for c in range(g.C):
            for h in range(g.H):
                for w in range(g.W):
                    xo[xb + c * xs[1] + h * xs[2] + w * xs[3]] = 0
    for c in range(g.C):
        for i in range(g.KH):
            for kj in range(g.KW):
                _col_range(kj, g.DW, g.PL, g.SW, g.W, g.OW, &off, &lo, &hi)
                for oh in range(g.OH):
                    cr = <floating_t*>col + n * cs[0] + c * cs[1] + i * cs[2] + kj * cs[3] + \
                        oh * cs[4]
                    ih = oh * g.SH - g.PT + i * g.DH
                    if back:
                        if 0 <= ih < g.H:
                            for ow in range(lo, hi):
                                xo[xb + c * xs[1] + ih * xs[2] + (ow * g.SW + off) * xs[3]] += \
                                    cr[ow * cs[5]]
                        continue
                    if ih < 0 or ih >= g.H:
                        for ow in range(g.OW):
                            cr[ow * cs[5]] = 0
                        continue
                    for ow in range(lo):
                        cr[ow * cs[5]] = 0
                    for ow in range(lo, hi):
                        cr[ow * cs[5]] = xin[xb + c * xs[1] + ih * xs[2] + (ow * g.SW + off) * xs[3]]
                    for ow in range(hi, g.OW):
                        cr[ow * cs[5]] = 0


ctypedef struct _I2CJob:
    Geom g
    const char* x
    intp_t xs[4]
    char* col
    intp_t cs[6]
    bint back, f64


cdef void _i2c_task(void* ctx, Py_ssize_t n) noexcept nogil:
    cdef _I2CJob* j = <_I2CJob*>ctx
    if j.f64:
        _i2c_image(&j.g, j.x, j.xs, j.col, j.cs, n, j.back, <float64_t>0)
    else:
        _i2c_image(&j.g, j.x, j.xs, j.col, j.cs, n, j.back, <float32_t>0)


cdef void _col_strides(NDArray a, bint nhwc, intp_t* cs) noexcept:
    # logical (n, c, kh, kw, oh, ow) strides of a column array: NCHW (n, c, kh, kw, oh, ow),
    # NHWC (n, oh, ow, kh, kw, c)
    cdef intp_t it = a._itemsize
    cdef int i
    cdef int src[6]
    if nhwc:
        src[0], src[1], src[2], src[3], src[4], src[5] = 0, 5, 3, 4, 1, 2
    else:
        src[0], src[1], src[2], src[3], src[4], src[5] = 0, 1, 2, 3, 4, 5
    for i in range(6):
        cs[i] = a._strides[src[i]] // it


def im2col(x, kernel_size, stride=1, padding=0, dilation=1, data_format="NCHW", out=None):
    """The column matrix of a convolution (DL4J's ``im2col`` op).

    ``col[n, c, i, j, oh, ow] := x[n, c, oh*sh - pt + i*dh, ow*sw - pl + j*dw]`` (0 in the
    padding); reshaped to ``(n, c*kh*kw, oh*ow)`` it is PyTorch's ``unfold``.

    Parameters
    ----------
    x : (n, c, height, width) NDArray of float32 or float64 (NHWC: channels last)
    kernel_size : int or (int, int)
    stride, padding, dilation, data_format : as for `conv2d`
    out : NDArray, optional
        ``(n, c, kh, kw, out_h, out_w)``; NHWC: ``(n, out_h, out_w, kh, kw, c)``.

    Returns
    -------
    NDArray

    Raises
    ------
    ValueError
        When the column matrix's size would overflow (before anything is allocated).

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    >>> F.im2col(x, 2).shape, F.im2col(x, 2)[0, 0, :, :, 0, 0].tolist()
    ((1, 1, 2, 2, 2, 2), [[0.0, 1.0], [3.0, 4.0]])
    """
    return _im2col(x, kernel_size, stride, padding, dilation, data_format, out, None, "im2col")


def col2im(col, input_size, stride=1, padding=0, dilation=1, data_format="NCHW", out=None):
    """The adjoint of `im2col` (DL4J's ``col2im``): each input element receives the sum of the
    column entries that read it.

    Parameters
    ----------
    col : NDArray of float32 or float64
        ``(n, c, kh, kw, out_h, out_w)``; NHWC: ``(n, out_h, out_w, kh, kw, c)``.
    input_size : (int, int)
        (height, width) of the image.
    stride, padding, dilation, data_format : as for `im2col`
    out : (n, c, height, width) NDArray, optional (NHWC: channels last)

    Returns
    -------
    NDArray

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> F.col2im(np.ones((1, 1, 2, 2, 2, 2), np.float32), (3, 3)).tolist()
    [[[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]]]
    """
    return _im2col(col, None, stride, padding, dilation, data_format, out, input_size,
                   "col2im")


cdef object _im2col(object x, object kernel_size, object stride, object padding,
                    object dilation, object data_format, object out, object input_size,
                    str op):
    cdef bint nhwc = parse_format(data_format, op)
    cdef bint back = input_size is not None
    cdef NDArray A = float_arg(x, op, "col" if back else "x")
    cdef NDArray Y, R
    cdef _I2CJob j
    cdef Geom* g = &j.g
    cdef intp_t two[2]
    cdef intp_t dims[4]
    cdef intp_t shape[6]
    cdef intp_t ostr[4]
    cdef _Call call = _Call(op)
    cdef int nt
    if back:
        if A._ndim != 6:
            raise ValueError(f"{op}: col must be 6-D, got shape {shape_of(A)}")
        if nhwc:
            g.N, g.C, g.KH, g.KW = A._shape[0], A._shape[5], A._shape[3], A._shape[4]
        else:
            g.N, g.C, g.KH, g.KW = A._shape[0], A._shape[1], A._shape[2], A._shape[3]
        parse_pair(input_size, op, "input_size", 1, two)
        g.H, g.W = two[0], two[1]
    else:
        if A._ndim != 4:
            raise ValueError(f"{op}: x must be 4-D, got shape {shape_of(A)}")
        logical(A, nhwc, dims, j.xs)
        g.N, g.C, g.H, g.W = dims[0], dims[1], dims[2], dims[3]
        parse_pair(kernel_size, op, "kernel_size", 1, two)
        g.KH, g.KW = two[0], two[1]
    if g.KH < 1 or g.KW < 1:
        raise ValueError(f"{op}: col has shape {shape_of(A)}: the kernel must be at least 1x1")
    g.CO = g.C
    window_geom(g, stride, padding, dilation, op)
    if nhwc:
        shape[0], shape[1], shape[2], shape[3], shape[4], shape[5] = \
            g.N, g.OH, g.OW, g.KH, g.KW, g.C
    else:
        shape[0], shape[1], shape[2], shape[3], shape[4], shape[5] = \
            g.N, g.C, g.KH, g.KW, g.OH, g.OW
    if back:
        if shape_of(A) != tuple(shape[i] for i in range(6)):
            raise ValueError(f"{op}: col has shape {shape_of(A)}, expected "
                             f"{tuple(shape[i] for i in range(6))} for input_size "
                             f"{(g.H, g.W)}, stride, padding and dilation")
        _shape4(g.N, g.C, g.H, g.W, nhwc, ostr)
        Y = call.out(out, A._dtype, 4, ostr, "out")
    else:
        Y = call.out(out, A._dtype, 6, shape, "out")
    if Y._size == 0:
        return out if out is not None else Y
    try:
        R = call.temp_for(Y, (A,))
        j.back = back
        j.f64 = A._itemsize == 8
        if back:
            _col_strides(A, nhwc, j.cs)
            j.col = A._data
            logical(R, nhwc, dims, j.xs)
            j.x = R._data
        else:
            _col_strides(R, nhwc, j.cs)
            j.col = R._data
            j.x = A._data
        nt = <int>_imin(g.N, threads_for(A._size + R._size, GRAIN_NN_CHEAP))
        with nogil:
            run_tasks(_i2c_task, &j, g.N, nt)
        call.finish()
    except BaseException:
        call.fail()
        raise
    return out if out is not None else Y


# ------------------------------------------------------------------------------------------------
# The builds of the convolutions' C loops (ndws/nn/_conv_isa.h): a module's `use(name)` switches
# its loops and says whether it could, `current()` names the ones in use.

_ISAS = ("avx512", "avx2", "baseline")


def _switch_isa(op, name, use, current):
    """Switch a module's loops to the build `name` (tests); returns the previous one.
    ValueError for an unknown name or one this CPU cannot run."""
    if name not in _ISAS:
        raise ValueError(f"{op}: expected one of {', '.join(_ISAS)}, got {name!r}")
    previous = current()
    if not use(name):
        raise ValueError(f"{op}: this CPU cannot run the {name!r} loops")
    return previous


def _runnable_isas(use, current):
    """The builds this CPU runs, best first (the loops in use stay in use)."""
    previous = current()
    runnable = [name for name in _ISAS if use(name)]
    use(previous)
    return runnable
