"""Convolution kernels of `ndws.nn.functional`: conv2d and its gradients, the transposed and
depthwise convolutions, im2col / col2im, and the size helpers of DL4J's convolution modes.

How the dense convolution runs (docs/kernels.md, "Convolutions"): no im2col buffer. The GEMM's
register tile (the per-instruction-set micro-kernel of ndws._gemm_<isa>, MR output channels x NR
output positions) reads the input where it lies, through a table of one offset per tap: for a
stride-1 convolution over a zero-padded copy of an image, tap (c, kh, kw) of NR consecutive
output positions is NR consecutive floats of the copy when the positions are counted on the
padded width (the "virtual" columns past the output width are computed and dropped). Strided
convolutions, and shapes where the dropped columns would cost more than a copy, pack each
panel of NR real positions instead (an im2col of 32 columns at a time, in L1). Weights are
packed once per call. Every output element is one fma chain over all taps, computed by one
micro-kernel call, whichever thread runs it: results do not depend on the thread count.

All loops work in a logical NCHW frame (an NHWC array is the same four axes with other
strides); every array may have any strides. Scratch memory (packed weights, offset tables,
each thread's padded image and panel) comes from `scratch=` or is placed in the calling
thread's current workspace like a result; `conv2d_scratch_bytes` says how much a call needs.
"""
cimport cython
from libc.math cimport ceil
from libc.string cimport memcpy, memset
cimport numpy as cnp

import numpy as np

from ndws._core cimport NDArray, check_array, pin_foreign
from ndws._dispatch cimport (float_arg, new_result, discard_result, whole_strides, shape_of,
                             arrays_overlap, byte_extent)
from ndws._gemm_types cimport GemmTable
from ndws._linalg cimport gemm_table
from ndws._threads cimport (threads_for, release_gil, pool_run, run_tasks, ndws_claim, thread_limit,
                            GRAIN_GEMM_F32, GRAIN_GEMM_F64, GRAIN_NN_CHEAP)
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t
from ndws.nn._activations cimport (ACT_IDENTITY, ACT_N_ELEMENTWISE, activation_code,
                                   act_tile_f32, act_tile_f64, copy_into)
from ndws._core import from_numpy as _from_numpy

cnp.import_array()

cdef object _F32 = np.dtype(np.float32)
cdef object _F64 = np.dtype(np.float64)
cdef object _U8 = np.dtype(np.uint8)

cdef enum:
    TILE_MAX = 1024         # elements of a stack tile: >= MR * NR of every GEMM build
    ALIGN = 64              # scratch parts start on cache lines


# element counts and byte sizes a call may reach: far from intp's overflow in every product
cdef intp_t SIZE_LIMIT = (<intp_t>1) << 62


cdef inline intp_t _rup(intp_t x, intp_t q) noexcept nogil:
    return (x + q - 1) // q * q


cdef inline intp_t _cdiv(intp_t x, intp_t q) noexcept nogil:
    return (x + q - 1) // q


cdef inline intp_t _imin(intp_t a, intp_t b) noexcept nogil:
    return a if a < b else b


cdef inline intp_t _imax(intp_t a, intp_t b) noexcept nogil:
    return a if a > b else b


cdef inline char* _take(char** cur, intp_t nbytes) noexcept nogil:
    # carve the next part of a scratch buffer (parts start on cache lines)
    cdef char* p = cur[0]
    cur[0] = p + _rup(nbytes, ALIGN)
    return p


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
    if isinstance(data_format, str):
        f = data_format.upper()
        if f == "NCHW":
            return False
        if f == "NHWC":
            return True
    raise ValueError(f"{op}: data_format must be 'NCHW' or 'NHWC', got {data_format!r}")


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
    cdef NDArray o
    cdef int d
    out = pin_foreign(out, op, role)
    if isinstance(out, NDArray):
        o = <NDArray>out
    elif isinstance(out, np.ndarray):
        o = <NDArray>_from_numpy(out)
    else:
        raise TypeError(f"{op}: {role} must be an NDArray or numpy.ndarray, "
                        f"got {type(out).__name__}")
    check_array(o, op, role)
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


cdef void _extent(NDArray a, char** lo, char** hi) noexcept:
    byte_extent(a._data, a._ndim, a._shape, a._strides, 1, a._itemsize, lo, hi)


cdef bint _overlaps(NDArray a, NDArray b) noexcept:
    return a is not None and b is not None and arrays_overlap(a, b)


cdef class _Scratch:
    """The scratch memory of one call: the caller's `scratch=` array, or a uint8 array placed in
    the current workspace like a result (it then lives as long as the workspace's cycle, as
    DL4J's column buffers in working memory do)."""
    cdef NDArray arr
    cdef char* base            # 64-byte aligned start
    cdef intp_t nbytes         # usable bytes from base

    @staticmethod
    cdef _Scratch get(object scratch, intp_t need, str op, tuple inputs):
        cdef _Scratch s = _Scratch.__new__(_Scratch)
        cdef intp_t shape[1]
        cdef NDArray a
        cdef intp_t off
        if scratch is None:
            shape[0] = need + ALIGN
            s.arr = new_result(_U8, 1, shape, op)
        else:
            scratch = pin_foreign(scratch, op, "scratch")
            if isinstance(scratch, NDArray):
                a = <NDArray>scratch
            elif isinstance(scratch, np.ndarray):
                a = <NDArray>_from_numpy(scratch)
            else:
                raise TypeError(f"{op}: scratch must be an NDArray or numpy.ndarray, got "
                                f"{type(scratch).__name__}")
            check_array(a, op, "scratch")
            if not a._writeable:
                raise ValueError(f"{op}: scratch is read-only")
            if not a.flags.c_contiguous:
                raise ValueError(f"{op}: scratch must be C-contiguous")
            for other in inputs:
                if _overlaps(a, <NDArray?>other) if other is not None else False:
                    raise ValueError(f"{op}: scratch overlaps an input or output array")
            s.arr = a
        off = (-<size_t>s.arr._data) % ALIGN
        s.base = s.arr._data + off
        s.nbytes = s.arr._size * s.arr._itemsize - off
        if s.nbytes < need:
            raise ValueError(f"{op}: scratch has {s.arr._size * s.arr._itemsize} bytes, the "
                             f"call needs {need + ALIGN} (see conv2d_scratch_bytes)")
        return s


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
    if isinstance(padding, (tuple, list)):
        if len(padding) != 2:
            raise ValueError(f"padding must be an int or (before, after), got {padding!r}")
        p0, p1 = (_size_arg(p, "padding", 0) for p in padding)
    else:
        p0 = p1 = _size_arg(padding, "padding", 0)
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
    if isinstance(padding, (tuple, list)):
        if len(padding) != 2:
            raise ValueError(f"padding must be an int or (before, after), got {padding!r}")
        p0, p1 = (_size_arg(p, "padding", 0) for p in padding)
    else:
        p0 = p1 = _size_arg(padding, "padding", 0)
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
# Shared nogil pieces: the padded copy of an image, weight packing, channel sums

cdef void _pad_copy(const floating_t* xn, const intp_t* xs, intp_t C, intp_t H, intp_t W,
                    intp_t row0, intp_t rows, intp_t col0, intp_t Ws, intp_t ps, intp_t Hmax,
                    floating_t* dst, intp_t total) noexcept nogil:
    """dst[c*ps + i*Ws + j] := x[c, row0 + i, col0 + j] (0 outside the image) for i < rows,
    j < Ws; rows rows..Hmax of each plane and everything past the last plane up to `total`
    elements are zeroed (a direct panel's tail reads there, and feeds only dropped columns)."""
    cdef intp_t lo = _imin(Ws, _imax(0, -col0)), hi = _imax(lo, _imin(Ws, W - col0))
    cdef intp_t c, i, ih, j, sw = xs[3]
    cdef floating_t* d
    cdef const floating_t* s
    for c in range(C):
        for i in range(rows):
            d = dst + c * ps + i * Ws
            ih = row0 + i
            if ih < 0 or ih >= H or hi == lo:
                memset(d, 0, Ws * sizeof(floating_t))
                continue
            if lo:
                memset(d, 0, lo * sizeof(floating_t))
            s = xn + c * xs[1] + ih * xs[2] + (col0 + lo) * sw
            if sw == 1:
                memcpy(d + lo, s, (hi - lo) * sizeof(floating_t))
            else:
                for j in range(hi - lo):
                    d[lo + j] = s[j * sw]
            if hi < Ws:
                memset(d + hi, 0, (Ws - hi) * sizeof(floating_t))
        if rows < Hmax:
            memset(dst + c * ps + rows * Ws, 0, (Hmax - rows) * Ws * sizeof(floating_t))
    if total > C * ps:
        memset(dst + C * ps, 0, (total - C * ps) * sizeof(floating_t))


cdef void _pack_w(const floating_t* w, const intp_t* ws, intp_t CO, intp_t CI, intp_t KH,
                  intp_t KW, intp_t MR, floating_t* Ap) noexcept nogil:
    """A panels of the weights: panel q holds output channels q*MR .. q*MR + MR - 1 (zeros
    past CO), tap-major: Ap[q*K*MR + p*MR + r] = w[q*MR + r, c, i, j], p = (c*KH + i)*KW + j.
    `ws` are the element strides of w's logical (out, in, kh, kw) axes, any sign: the input
    gradient packs the flipped, transposed kernel through negative strides."""
    cdef intp_t K = CI * KH * KW, q, p, r, co, c, i, j
    cdef floating_t* dst
    for q in range(_cdiv(CO, MR)):
        dst = Ap + q * K * MR
        p = 0
        for c in range(CI):
            for i in range(KH):
                for j in range(KW):
                    for r in range(MR):
                        co = q * MR + r
                        dst[p * MR + r] = w[co * ws[0] + c * ws[1] + i * ws[2] + j * ws[3]] \
                            if co < CO else 0
                    p += 1


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


cdef inline void _ukr(const GemmTable* T, intp_t kc, const floating_t* A, const intp_t* aoff,
                      intp_t ars, const floating_t* B, const intp_t* boff, floating_t* C,
                      intp_t ldc, int load_c, floating_t* Bc=NULL) noexcept nogil:
    if floating_t is float32_t:
        T.ukr_ind_f32(kc, A, aoff, ars, B, boff, C, ldc, load_c, Bc)
    else:
        T.ukr_ind_f64(kc, A, aoff, ars, B, boff, C, ldc, load_c, Bc)


cdef inline void _tile_bias_act(floating_t* tile, intp_t rv, intp_t NR, const char* bias,
                                intp_t bs, intp_t co0, int act, double alpha) noexcept nogil:
    # bias of each tile row (an output channel) and the activation, on the whole tile while it
    # is in L1 (dropped columns included: cheaper than skipping them)
    cdef intp_t r, jj
    cdef floating_t bv
    if bias != NULL:
        for r in range(rv):
            bv = (<const floating_t*>bias)[(co0 + r) * bs]
            for jj in range(NR):
                tile[r * NR + jj] += bv
    if act != ACT_IDENTITY:
        if floating_t is float32_t:
            act_tile_f32(act, <float32_t>alpha, tile, rv, NR, NR, 1)
        else:
            act_tile_f64(act, alpha, tile, rv, NR, NR, 1)


# ------------------------------------------------------------------------------------------------
# Forward: Y[n, co, oh, ow] = f(b[co] + sum_{c, i, j} W[co, c, i, j] * X[n, c, oh*SH - PT + i*DH,
# ow*SW - PL + j*DW]). The output is cut into tasks of R output rows of one image (a split that
# depends on the shape only); a thread copies its task's input rows, zero-padded, into its own
# scratch (or reads x in place when no padding is needed) and sweeps panels of NR output
# positions, each through every A panel of MR output channels.

cdef enum:
    FWD_DIRECT = 0      # panels of NR virtual positions read in place (stride 1)
    FWD_PACKED = 1      # panels of NR real positions packed from the padded rows
    TASK_BYTES = 1 << 20    # a task's padded rows stay within this (an L2 cache)


ctypedef struct FwdPlan:
    int mode
    intp_t MR, NR, K, nap        # register tile, taps, A panels
    intp_t kc, nkb               # K blocks: nkb blocks of (at most) kc taps
    intp_t R, tpi, ntasks        # output rows per task, tasks per image, tasks
    intp_t Hs, Ws, ps            # padded rows (at most), padded width, plane stride
    intp_t pad_elems, panel_elems
    intp_t shared_bytes, thread_bytes


cdef void _fwd_plan(const Geom* g, intp_t MR, intp_t NR, intp_t KC, intp_t item, FwdPlan* P
                    ) noexcept nogil:
    cdef double waste, pack
    cdef intp_t rcap
    P.MR = MR
    P.NR = NR
    P.K = g.C * g.KH * g.KW
    P.nap = _cdiv(g.CO, MR)
    # K blocks of equal size (the GEMM's KC at most): a block of B (kc x NR values) stays in L1
    # while every A panel passes over it; each output tile is summed block after block
    P.nkb = _imax(1, _cdiv(P.K, KC))
    P.kc = _cdiv(P.K, P.nkb)
    P.Ws = (g.OW - 1) * g.SW + g.EKW
    # Direct panels compute Ws - OW dropped columns per row; packing costs a copy of each
    # tap's NR values per panel, against the micro-kernel's nap * NR/VLEN fmas on them
    # (about 10 cycles for 16 * nap: measured, docs/kernels.md).
    P.mode = FWD_PACKED
    if g.SH == 1 and g.SW == 1:
        waste = <double>(P.Ws - g.OW) / P.Ws
        pack = 10.0 / (16.0 * P.nap)
        if waste <= pack:
            P.mode = FWD_DIRECT
    # Whole images per task when the batch has at least 8, else each image in slices so that
    # there are about 8 tasks; and no task's padded rows beyond TASK_BYTES.
    P.R = g.OH if g.N >= 8 else _cdiv(g.OH, _cdiv(8, g.N))
    if g.C > 0:
        rcap = (TASK_BYTES // (g.C * P.Ws * item) - g.EKH) // g.SH + 1
        P.R = _imax(1, _imin(P.R, rcap))
    P.tpi = _cdiv(g.OH, P.R)
    P.ntasks = g.N * P.tpi
    P.Hs = (P.R - 1) * g.SH + g.EKH
    P.ps = P.Hs * P.Ws
    # slack past the last plane: the last direct panel reads up to NR + Ws values beyond
    P.pad_elems = g.C * P.ps + NR + P.Ws
    P.panel_elems = P.kc * NR
    P.shared_bytes = (_rup(P.nap * P.K * MR * item, ALIGN) + 2 * _rup(P.K * 8, ALIGN))
    # per thread: padded rows, a packed panel block, and the tiles of one panel's A panels
    P.thread_bytes = (_rup(P.pad_elems * item, ALIGN) + _rup(P.panel_elems * item, ALIGN)
                      + _rup(P.nap * MR * NR * item, ALIGN))


ctypedef struct WinoPlan:
    intp_t MR, NR, nap, TH, TW      # tile grid: TH x TW tiles of 2x2 outputs
    intp_t R                        # tile rows per task
    intp_t tpi, ntasks
    intp_t Hs, Ws, ps               # padded rows (at most), width, plane stride
    intp_t vs                       # stride of V's xi planes (C*NR, padded off 4 KiB multiples)
    intp_t pad_elems, v_elems, m_elems
    intp_t shared_bytes, thread_bytes


ctypedef struct FwdJob:
    Geom g
    FwdPlan p
    bint wino                   # run as Winograd F(2x2, 3x3) (_winograd.pxi) with plan wp
    WinoPlan wp
    const GemmTable* T
    int f64, act
    double alpha
    const char* x
    intp_t xs[4]
    const char* x_hi            # end of x's bytes: direct reads stay below it
    char* y
    intp_t ys[4]
    const char* bias            # NULL: none
    intp_t bs
    const char* Ap              # packed weights
    const intp_t* boff_pad      # tap offsets in a padded copy
    const intp_t* boff_x        # tap offsets in x itself, NULL when x cannot be read in place
    intp_t boff_x_max
    char* thr                   # per-thread parts of the scratch
    long long next_task, next_slot


cdef void _pack_panel(const FwdJob* j, const floating_t* buf, intp_t q0, intp_t nq,
                      intp_t pc, intp_t kc, floating_t* panel) noexcept nogil:
    """panel[p*NR + jj] := the padded input under tap pc + p (p < kc) for real output position
    q0 + jj of the task (an im2col of one panel's K block), zeros past the task's nq
    positions."""
    cdef const Geom* g = &j.g
    cdef intp_t NR = j.p.NR, cnt = _imin(NR, nq - q0), ns = 0, jj = 0, q, rr, cc, run
    cdef intp_t p, k, i, SW = g.SW
    cdef intp_t soff[64]
    cdef intp_t sj[64]
    cdef intp_t sl[64]
    cdef floating_t* d
    cdef floating_t* dd
    cdef const floating_t* s0
    cdef const floating_t* s
    # the panel's runs of positions along one output row
    while jj < cnt:
        q = q0 + jj
        rr = q // g.OW
        cc = q - rr * g.OW
        run = _imin(g.OW - cc, cnt - jj)
        soff[ns] = rr * g.SH * j.p.Ws + cc * SW
        sj[ns] = jj
        sl[ns] = run
        ns += 1
        jj += run
    for p in range(kc):
        d = panel + p * NR
        s0 = buf + j.boff_pad[pc + p]
        for k in range(ns):
            s = s0 + soff[k]
            dd = d + sj[k]
            if SW == 1:
                for i in range(sl[k]):
                    dd[i] = s[i]
            else:
                for i in range(sl[k]):
                    dd[i] = s[i * SW]
        for i in range(cnt, NR):
            d[i] = 0


cdef void _fwd_store(const FwdJob* j, floating_t* tile, intp_t n, intp_t co0, intp_t q0,
                     intp_t ws, intp_t oh0, intp_t lim, bint direct) noexcept nogil:
    """Bias and activation on a finished MR x NR tile, then its valid columns into Y: direct
    panels count positions on the padded width ws (columns >= OW are dropped) over lim rows;
    packed panels count real positions, lim of them."""
    cdef const Geom* g = &j.g
    cdef intp_t NR = j.p.NR, rv = _imin(j.p.MR, g.CO - co0), r, jj, q, rr, cc, run, i
    cdef intp_t y1 = j.ys[1], y3 = j.ys[3]
    cdef floating_t* yn = <floating_t*>j.y + n * j.ys[0] + co0 * y1
    cdef floating_t* d
    cdef floating_t* s
    _tile_bias_act(tile, rv, NR, j.bias, j.bs, co0, j.act, j.alpha)
    jj = 0
    while jj < NR:
        q = q0 + jj
        if direct:
            rr = q // ws
            cc = q - rr * ws
            if rr >= lim:
                break
            if cc >= g.OW:
                jj += ws - cc
                continue
            run = _imin(g.OW - cc, NR - jj)
        else:
            if q >= lim:
                break
            rr = q // g.OW
            cc = q - rr * g.OW
            run = _imin(_imin(g.OW - cc, NR - jj), lim - q)
        for r in range(rv):
            d = yn + r * y1 + (oh0 + rr) * j.ys[2] + cc * y3
            s = tile + r * NR + jj
            if y3 == 1:
                for i in range(run):
                    d[i] = s[i]
            else:
                for i in range(run):
                    d[i * y3] = s[i]
        jj += run


cdef void _fwd_task(FwdJob* j, floating_t* buf, floating_t* panel, floating_t* tiles, intp_t t
                    ) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef const FwdPlan* P = &j.p
    cdef intp_t n = t // P.tpi, oh0 = (t % P.tpi) * P.R
    cdef intp_t rows = _imin(g.OH, oh0 + P.R) - oh0
    cdef intp_t K = P.K, MR = P.MR, NR = P.NR, ws = P.Ws, nq, q0, ap, kb, pc, kc
    cdef const floating_t* xn = <const floating_t*>j.x + n * j.xs[0]
    cdef const floating_t* A = <const floating_t*>j.Ap
    cdef const floating_t* src = NULL
    cdef const intp_t* boff = j.boff_pad
    cdef bint direct = P.mode == FWD_DIRECT
    if direct and j.boff_x != NULL:
        src = xn + oh0 * j.xs[2]
        if <const char*>(src + j.boff_x_max + _rup(rows * g.W, NR)) > j.x_hi:
            src = NULL          # the last panel would read past x (its last image): copy
        else:
            boff = j.boff_x
            ws = g.W
    if src == NULL:
        _pad_copy(xn, j.xs, g.C, g.H, g.W, oh0 * g.SH - g.PT, (rows - 1) * g.SH + g.EKH,
                  -g.PL, P.Ws, P.ps, P.Hs, buf, P.pad_elems)
        src = buf
    # direct panels: NR positions counted on the padded width ws; packed: NR real positions
    nq = rows * ws if direct else rows * g.OW
    q0 = 0
    while q0 < nq:
        for kb in range(P.nkb):
            pc = kb * P.kc
            kc = _imin(P.kc, K - pc)
            # The block of B goes into an aligned, contiguous panel: in L1 for every A panel and
            # streamed in order (read in place, the NR-value runs of a direct panel straddle
            # cache lines and defeat the prefetcher: 19% L1 misses against 7.6% packed, 1x1
            # 256->64 in callgrind). A direct block is packed by the first A panel's pass.
            ap = 0
            if direct:
                _ukr(j.T, kc, A + pc * MR, NULL, 1, src + q0, boff + pc, tiles, NR, kb > 0,
                     panel)
                ap = 1
            else:
                _pack_panel(j, src, q0, nq, pc, kc, panel)
            while ap < P.nap:
                _ukr(j.T, kc, A + ap * K * MR + pc * MR, NULL, 1, panel, NULL,
                     tiles + ap * MR * NR, NR, kb > 0)
                ap += 1
        for ap in range(P.nap):
            _fwd_store(j, tiles + ap * MR * NR, n, ap * MR, q0, ws if direct else g.OW, oh0,
                       rows if direct else nq, direct)
        q0 += NR


cdef void _fwd_worker(void* ctx) noexcept nogil:
    # the caller and each helper that joins: its own slot of the scratch, then tasks until none
    # is left (pool_run admits at most the helpers asked for, so slots never run out)
    cdef FwdJob* j = <FwdJob*>ctx
    cdef char* mine = j.thr + ndws_claim(&j.next_slot) * j.p.thread_bytes
    cdef intp_t item = 8 if j.f64 else 4
    cdef char* panel = mine + _rup(j.p.pad_elems * item, ALIGN)
    cdef char* tiles = panel + _rup(j.p.panel_elems * item, ALIGN)
    cdef long long t
    while True:
        t = ndws_claim(&j.next_task)
        if t >= j.p.ntasks:
            return
        if j.f64:
            _fwd_task(j, <float64_t*>mine, <float64_t*>panel, <float64_t*>tiles, t)
        else:
            _fwd_task(j, <float32_t*>mine, <float32_t*>panel, <float32_t*>tiles, t)


cdef void _fwd_prepare(FwdJob* j, const char* w, const intp_t* wst, char* shared
                       ) noexcept nogil:
    """Carve the shared scratch (packed weights, the two offset tables), pack the weights
    (logical (out, in, kh, kw) strides wst), fill the tables; j.thr = the per-thread parts."""
    cdef const Geom* g = &j.g
    cdef FwdPlan* P = &j.p
    cdef char* cur = shared
    cdef intp_t item = 8 if j.f64 else 4, c, i, jj, p = 0
    cdef char* Ap = _take(&cur, P.nap * P.K * P.MR * item)
    cdef intp_t* bp = <intp_t*>_take(&cur, P.K * 8)
    cdef intp_t* bx = <intp_t*>_take(&cur, P.K * 8)
    cdef bint direct_x = (P.mode == FWD_DIRECT and g.PT == 0 and g.PB == 0 and g.PL == 0
                          and g.PR == 0 and j.xs[3] == 1 and j.xs[2] == g.W and j.xs[1] > 0)
    j.thr = cur
    j.Ap = Ap
    if j.f64:
        _pack_w(<const float64_t*>w, wst, g.CO, g.C, g.KH, g.KW, P.MR, <float64_t*>Ap)
    else:
        _pack_w(<const float32_t*>w, wst, g.CO, g.C, g.KH, g.KW, P.MR, <float32_t*>Ap)
    j.boff_x_max = 0
    for c in range(g.C):
        for i in range(g.KH):
            for jj in range(g.KW):
                bp[p] = c * P.ps + i * g.DH * P.Ws + jj * g.DW
                bx[p] = c * j.xs[1] + i * g.DH * j.xs[2] + jj * g.DW
                if bx[p] > j.boff_x_max:
                    j.boff_x_max = bx[p]
                p += 1
    j.boff_pad = bp
    j.boff_x = bx if direct_x else NULL


cdef void _fwd_run(FwdJob* j, int nt) noexcept nogil:
    j.next_task = 0
    j.next_slot = 0
    if nt <= 1 or j.p.ntasks <= 1:
        _fwd_worker(j)
    else:
        pool_run(_fwd_worker, j, <int>_imin(nt, j.p.ntasks) - 1)


include "_winograd.pxi"


# ------------------------------------------------------------------------------------------------
# Weight gradient: dW[co, c, i, j] = sum_{n, oh, ow} dY[n, co, oh, ow] * X[n, c, oh*SH - PT +
# i*DH, ow*SW - PL + j*DW]. A GEMM whose reduction runs over output positions: C tiles are MR
# taps x NR output channels; A is the padded input read in place (the MR taps of a tile are MR
# channels at one (i, j), or MR consecutive kernel columns of one channel when there are few
# channels: either way a fixed stride apart, so one offset per position addresses them), B is
# dY transposed into panels of NR channels. Images go in chunks: phase 1 copies the chunk's
# images and packs its dY (in parallel), phase 2 adds the chunk's products to every tile (tiles
# in parallel). Each tile sums its chunks in order and each chunk in position order, so the
# reduction over the batch does not depend on the thread count.

cdef enum:
    CHUNK_BYTES = 2 << 20       # a chunk's padded images stay within this
    CHUNK_POSITIONS = 2048      # positions per chunk (at least one image)


ctypedef struct WgPlan:
    bint kwmode                 # tap groups are kernel-column runs (few channels)
    intp_t MR, NR, CIp, KWr, Hs, Ws, ps, img, P, Bc, COp, ncb, ngroups, nkwb, ncblk
    intp_t shared_bytes


cdef void _wg_plan(const Geom* g, intp_t MR, intp_t NR, intp_t item, WgPlan* W) noexcept nogil:
    W.MR = MR
    W.NR = NR
    # tap groups: MR channels at one kernel position, or MR kernel columns of one channel,
    # whichever computes fewer padding rows
    W.kwmode = g.C * _rup(g.KW, MR) < g.KW * _rup(g.C, MR)
    if W.kwmode:
        W.CIp = g.C
        W.KWr = _rup(g.KW, MR)
        W.nkwb = W.KWr // MR
        W.ncblk = 0
        W.ngroups = g.C * g.KH * W.nkwb
        W.Ws = (g.OW - 1) * g.SW + (W.KWr - 1) * g.DW + 1
    else:
        W.CIp = _rup(g.C, MR)
        W.KWr = g.KW
        W.nkwb = 0
        W.ncblk = W.CIp // MR
        W.ngroups = g.KH * g.KW * W.ncblk
        W.Ws = (g.OW - 1) * g.SW + g.EKW
    W.Hs = (g.OH - 1) * g.SH + g.EKH
    W.ps = W.Hs * W.Ws
    W.img = W.CIp * W.ps
    W.P = g.OH * g.OW
    W.Bc = _imax(1, _imin(g.N, _imin(_cdiv(CHUNK_POSITIONS, W.P),
                                      CHUNK_BYTES // _imax(1, W.img * item))))
    W.COp = _rup(g.CO, NR)
    W.ncb = W.COp // NR
    W.shared_bytes = (_rup(W.Bc * W.img * item, ALIGN) + _rup(W.COp * W.Bc * W.P * item, ALIGN)
                      + _rup(W.Bc * W.P * 8, ALIGN)
                      + _rup(W.ngroups * MR * W.COp * item, ALIGN))


ctypedef struct WgJob:
    Geom g
    WgPlan w
    const GemmTable* T
    int f64
    const char* x
    intp_t xs[4]
    const char* dy
    intp_t ds[4]
    char* pad                   # chunk images, padded (Bc * img)
    char* Bt                    # dY^T panels: ncb x (Bc*P) x NR
    intp_t* posoff              # offset of each chunk position in `pad`
    char* acc                   # ngroups*MR x COp accumulators
    intp_t n0, nb               # the chunk
    bint first
    intp_t ntasks
    long long next


cdef void _wg_phase1(WgJob* j, intp_t t, floating_t dummy) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef const WgPlan* W = &j.w
    cdef intp_t b, co, cb, q, oh, ow, jj, NR = W.NR, P = W.P, kc = j.nb * W.P
    cdef const floating_t* dyn
    cdef floating_t* dst
    if t < j.nb:
        _pad_copy(<const floating_t*>j.x + (j.n0 + t) * j.xs[0], j.xs, g.C, g.H, g.W, -g.PT,
                  W.Hs, -g.PL, W.Ws, W.ps, W.Hs, <floating_t*>j.pad + t * W.img, g.C * W.ps)
        return
    cb = t - j.nb
    dst = <floating_t*>j.Bt + cb * (W.Bc * P) * NR
    for jj in range(NR):
        co = cb * NR + jj
        if co >= g.CO:
            for q in range(kc):
                dst[q * NR + jj] = 0
            continue
        q = 0
        for b in range(j.nb):
            dyn = <const floating_t*>j.dy + (j.n0 + b) * j.ds[0] + co * j.ds[1]
            for oh in range(g.OH):
                for ow in range(g.OW):
                    dst[q * NR + jj] = dyn[oh * j.ds[2] + ow * j.ds[3]]
                    q += 1


cdef void _wg_phase2(WgJob* j, intp_t t, floating_t dummy) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef const WgPlan* W = &j.w
    cdef intp_t grp = t // W.ncb, cb = t % W.ncb, tap, ars, i, jj, c
    cdef const floating_t* A
    if W.kwmode:
        # grp = (c*KH + i)*nkwb + kwb: MR consecutive kernel columns of channel c, row i
        c = grp // (g.KH * W.nkwb)
        i = (grp // W.nkwb) % g.KH
        jj = (grp % W.nkwb) * W.MR
        tap = c * W.ps + i * g.DH * W.Ws + jj * g.DW
        ars = g.DW
    else:
        # grp = (i*KW + jj)*ncblk + cblk: MR consecutive channels at kernel position (i, jj)
        i = grp // (g.KW * W.ncblk)
        jj = (grp // W.ncblk) % g.KW
        c = (grp % W.ncblk) * W.MR
        tap = c * W.ps + i * g.DH * W.Ws + jj * g.DW
        ars = W.ps
    A = <const floating_t*>j.pad + tap
    _ukr(j.T, j.nb * W.P, A, j.posoff, ars,
         <const floating_t*>j.Bt + cb * (W.Bc * W.P) * W.NR, NULL,
         <floating_t*>j.acc + grp * W.MR * W.COp + cb * W.NR, W.COp, 0 if j.first else 1)


cdef void _wg_worker1(void* ctx) noexcept nogil:
    cdef WgJob* j = <WgJob*>ctx
    cdef long long t
    while True:
        t = ndws_claim(&j.next)
        if t >= j.ntasks:
            return
        if j.f64:
            _wg_phase1(j, t, <float64_t>0)
        else:
            _wg_phase1(j, t, <float32_t>0)


cdef void _wg_worker2(void* ctx) noexcept nogil:
    cdef WgJob* j = <WgJob*>ctx
    cdef long long t
    while True:
        t = ndws_claim(&j.next)
        if t >= j.ntasks:
            return
        if j.f64:
            _wg_phase2(j, t, <float64_t>0)
        else:
            _wg_phase2(j, t, <float32_t>0)


cdef void _run_phase(void (*fn)(void*) noexcept nogil, WgJob* j, intp_t ntasks, int nt
                     ) noexcept nogil:
    j.ntasks = ntasks
    j.next = 0
    if nt <= 1 or ntasks <= 1:
        fn(j)
    else:
        pool_run(fn, j, <int>_imin(nt, ntasks) - 1)


cdef void _wg_scatter(const WgJob* j, char* dw, const intp_t* dws, floating_t dummy
                      ) noexcept nogil:
    # dW[co, c, i, jj] from the accumulator rows of the tap groups
    cdef const Geom* g = &j.g
    cdef const WgPlan* W = &j.w
    cdef intp_t co, c, i, jj, row
    cdef const floating_t* acc = <const floating_t*>j.acc
    cdef floating_t* out = <floating_t*>dw
    for c in range(g.C):
        for i in range(g.KH):
            for jj in range(g.KW):
                if W.kwmode:
                    row = ((c * g.KH + i) * W.nkwb + jj // W.MR) * W.MR + jj % W.MR
                else:
                    row = ((i * g.KW + jj) * W.ncblk + c // W.MR) * W.MR + c % W.MR
                for co in range(g.CO):
                    out[co * dws[0] + c * dws[1] + i * dws[2] + jj * dws[3]] = \
                        acc[row * W.COp + co]


cdef void _wg_run(WgJob* j, char* shared, char* dw, const intp_t* dws, int nt) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef const WgPlan* W = &j.w
    cdef char* cur = shared
    cdef intp_t item = 8 if j.f64 else 4, b, q, oh, ow
    j.pad = _take(&cur, W.Bc * W.img * item)
    j.Bt = _take(&cur, W.COp * W.Bc * W.P * item)
    j.posoff = <intp_t*>_take(&cur, W.Bc * W.P * 8)
    j.acc = _take(&cur, W.ngroups * W.MR * W.COp * item)
    # padding planes (channels C..CIp) stay zero: the copies only write the real channels
    memset(j.pad, 0, W.Bc * W.img * item)
    q = 0
    for b in range(W.Bc):
        for oh in range(g.OH):
            for ow in range(g.OW):
                j.posoff[q] = b * W.img + oh * g.SH * W.Ws + ow * g.SW
                q += 1
    if g.N == 0:
        memset(j.acc, 0, W.ngroups * W.MR * W.COp * item)
    j.first = True
    j.n0 = 0
    while j.n0 < g.N:
        j.nb = _imin(W.Bc, g.N - j.n0)
        _run_phase(_wg_worker1, j, j.nb + W.ncb, nt)
        _run_phase(_wg_worker2, j, W.ngroups * W.ncb, nt)
        j.first = False
        j.n0 += j.nb
    if j.f64:
        _wg_scatter(j, dw, dws, <float64_t>0)
    else:
        _wg_scatter(j, dw, dws, <float32_t>0)


# ------------------------------------------------------------------------------------------------
# Input gradient by col2im (strided convolutions, and few input channels): per image, panels
# of NR output positions of dY (packed) times the transposed weights (taps as rows, packed once)
# give MR taps x NR positions of the column matrix, scattered onto dX at once. An image is one
# task: its dX elements receive their contributions in a fixed order. (Stride-1 convolutions
# with enough channels run the forward driver on the flipped kernel instead.)

ctypedef struct DxJob:
    Geom g
    const GemmTable* T
    int f64, act
    double alpha
    intp_t MR, NR, K, ntp
    const char* dy
    intp_t ds[4]
    char* dx
    intp_t xs[4]
    const char* At              # ntp panels of CO x MR: At[tp][co*MR + r] = W[co, tp*MR + r]
    const char* bias            # conv_transpose2d's bias, added after the scatter
    intp_t bs
    char* thr
    intp_t thread_bytes
    long long next_task, next_slot


cdef void _dx_plan(const Geom* g, intp_t MR, intp_t NR, intp_t item, intp_t* shared,
                   intp_t* thread) noexcept nogil:
    cdef intp_t K = g.C * g.KH * g.KW
    shared[0] = _rup(_cdiv(K, MR) * g.CO * MR * item, ALIGN)
    thread[0] = _rup(g.CO * NR * item, ALIGN)


cdef void _pack_wt(const floating_t* w, const intp_t* ws, intp_t CO, intp_t CI, intp_t KH,
                   intp_t KW, intp_t MR, floating_t* At) noexcept nogil:
    cdef intp_t K = CI * KH * KW, tp, co, r, tap, c, i, jj
    for tp in range(_cdiv(K, MR)):
        for co in range(CO):
            for r in range(MR):
                tap = tp * MR + r
                if tap >= K:
                    At[(tp * CO + co) * MR + r] = 0
                    continue
                c = tap // (KH * KW)
                i = (tap // KW) % KH
                jj = tap % KW
                At[(tp * CO + co) * MR + r] = w[co * ws[0] + c * ws[1] + i * ws[2] + jj * ws[3]]


cdef void _dx_task(DxJob* j, floating_t* Bp, intp_t n) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef intp_t MR = j.MR, NR = j.NR, npos = g.OH * g.OW, p0, cnt, co, jj, tp, r, rv, tap
    cdef intp_t c, i, kj, q, oh, ow, run, ih, iw0, lo, hi, k, h, w, nr, u
    cdef const floating_t* dyn = <const floating_t*>j.dy + n * j.ds[0]
    cdef floating_t* dxn = <floating_t*>j.dx + n * j.xs[0]
    cdef const floating_t* At = <const floating_t*>j.At
    cdef const floating_t* dyc
    cdef floating_t* row
    cdef floating_t* s
    cdef floating_t tile[TILE_MAX]
    cdef intp_t doff[64]            # dY offset of each panel position
    cdef intp_t roh[64]             # the panel's runs along one output row: row, first column,
    cdef intp_t row_[64]            # first panel position, length
    cdef intp_t rj[64]
    cdef intp_t rl[64]
    cdef intp_t x3 = j.xs[3], SW = g.SW
    for c in range(g.C):
        for h in range(g.H):
            row = dxn + c * j.xs[1] + h * j.xs[2]
            if x3 == 1:
                memset(row, 0, g.W * sizeof(floating_t))
            else:
                for w in range(g.W):
                    row[w * x3] = 0
    p0 = 0
    while p0 < npos:
        cnt = _imin(NR, npos - p0)
        nr = 0
        jj = 0
        while jj < cnt:
            q = p0 + jj
            oh = q // g.OW
            ow = q - oh * g.OW
            run = _imin(g.OW - ow, cnt - jj)
            roh[nr], row_[nr], rj[nr], rl[nr] = oh, ow, jj, run
            for u in range(run):
                doff[jj + u] = oh * j.ds[2] + (ow + u) * j.ds[3]
            nr += 1
            jj += run
        for co in range(g.CO):
            dyc = dyn + co * j.ds[1]
            for jj in range(cnt):
                Bp[co * NR + jj] = dyc[doff[jj]]
            for jj in range(cnt, NR):
                Bp[co * NR + jj] = 0
        for tp in range(j.ntp):
            _ukr(j.T, g.CO, At + tp * g.CO * MR, NULL, 1, Bp, NULL, tile, NR, 0)
            rv = _imin(MR, j.K - tp * MR)
            for r in range(rv):
                tap = tp * MR + r
                c = tap // (g.KH * g.KW)
                i = (tap // g.KW) % g.KH
                kj = tap % g.KW
                for u in range(nr):
                    ih = roh[u] * g.SH - g.PT + i * g.DH
                    if ih < 0 or ih >= g.H:
                        continue
                    iw0 = row_[u] * SW - g.PL + kj * g.DW
                    row = dxn + c * j.xs[1] + ih * j.xs[2]
                    s = tile + r * NR + rj[u]
                    if SW == 1 and x3 == 1:
                        # ow + k lands inside the row while 0 <= iw0 + k < W (no division)
                        lo = 0 if iw0 >= 0 else -iw0
                        hi = _imin(rl[u], g.W - iw0)
                        for k in range(lo, hi):
                            row[iw0 + k] += s[k]
                    else:
                        # ... while 0 <= iw0 + k*SW < W
                        lo = 0 if iw0 >= 0 else _cdiv(-iw0, SW)
                        hi = _imin(rl[u], _cdiv(g.W - iw0, SW)) if g.W > iw0 else 0
                        for k in range(lo, hi):
                            row[(iw0 + k * SW) * x3] += s[k]
        p0 += NR
    if j.bias != NULL or j.act != ACT_IDENTITY:
        for c in range(g.C):
            for h in range(g.H):
                row = dxn + c * j.xs[1] + h * j.xs[2]
                if x3 == 1:
                    _tile_bias_act(row, 1, g.W, j.bias, j.bs, c, j.act, j.alpha)
                else:
                    for w in range(g.W):
                        _tile_bias_act(row + w * x3, 1, 1, j.bias, j.bs, c, j.act, j.alpha)


cdef void _dx_worker(void* ctx) noexcept nogil:
    cdef DxJob* j = <DxJob*>ctx
    cdef char* mine = j.thr + ndws_claim(&j.next_slot) * j.thread_bytes
    cdef long long t
    while True:
        t = ndws_claim(&j.next_task)
        if t >= j.g.N:
            return
        if j.f64:
            _dx_task(j, <float64_t*>mine, t)
        else:
            _dx_task(j, <float32_t*>mine, t)


cdef void _dx_run(DxJob* j, const char* w, const intp_t* wst, char* shared, int nt
                  ) noexcept nogil:
    cdef intp_t item = 8 if j.f64 else 4, sh, th
    cdef const Geom* g = &j.g
    _dx_plan(g, j.MR, j.NR, item, &sh, &th)
    j.K = g.C * g.KH * g.KW
    j.ntp = _cdiv(j.K, j.MR)
    j.At = shared
    j.thr = shared + sh
    j.thread_bytes = th
    if j.f64:
        _pack_wt(<const float64_t*>w, wst, g.CO, g.C, g.KH, g.KW, j.MR, <float64_t*>shared)
    else:
        _pack_wt(<const float32_t*>w, wst, g.CO, g.C, g.KH, g.KW, j.MR, <float32_t*>shared)
    j.next_task = 0
    j.next_slot = 0
    if nt <= 1 or g.N <= 1:
        _dx_worker(j)
    else:
        pool_run(_dx_worker, j, <int>_imin(nt, g.N) - 1)


# ------------------------------------------------------------------------------------------------
# Entries (GIL held): validate, place, plan, run without the GIL

cdef int _tile_of(const GemmTable* T, bint f64, intp_t* MR, intp_t* NR) except -1:
    MR[0] = T.mr_f64 if f64 else T.mr_f32
    NR[0] = T.nr_f64 if f64 else T.nr_f32
    if MR[0] * NR[0] > TILE_MAX or NR[0] > 64:
        raise RuntimeError(f"the GEMM build's register tile {MR[0]}x{NR[0]} is larger than "
                           f"the convolutions' tile buffer")
    return 0


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


cdef int _threads(const Geom* g, bint f64, intp_t ntasks) noexcept:
    cdef double flops = 2.0 * g.N * g.CO * g.OH * g.OW * g.C * g.KH * g.KW
    cdef Py_ssize_t work = <Py_ssize_t>flops if flops < 4e18 else <Py_ssize_t>4e18
    cdef int nt = threads_for(work, GRAIN_GEMM_F64 if f64 else GRAIN_GEMM_F32)
    return <int>_imax(1, _imin(nt, ntasks))


cdef class _Call:
    """The allocations of one call, for the contract's rollback (docs/architecture.md): results
    and an internal scratch placed in the current workspace, temporaries for outputs that
    overlap an input (computed there, copied into the output by finish()). fail() gives every
    internal allocation back, newest first; finish() gives back the temporaries (the newest)."""
    cdef str op
    cdef list made
    cdef list temps

    def __cinit__(self, str op):
        self.op = op
        self.made = []
        self.temps = []

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

    cdef void fail(self):
        for a in reversed(self.made):
            discard_result(<NDArray>a)
        self.made = []

    cdef void finish(self):
        for t, target in self.temps:
            copy_into(<NDArray>t, <NDArray>target)
        for t, target in reversed(self.temps):
            discard_result(<NDArray>t)


cdef int _distinct(tuple outs, tuple names, str op) except -1:
    # user outputs of one call must not share memory
    for i in range(len(outs)):
        for k in range(i + 1, len(outs)):
            if outs[i] is not None and outs[k] is not None and arrays_overlap(outs[i], outs[k]):
                raise ValueError(f"{op}: {names[i]} and {names[k]} overlap")
    return 0


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
    cdef intp_t MR, NR, item = 8 if f64 else 4, fst[4]
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
                  const intp_t* gs, NDArray DW, const intp_t* dws, char* shared, int nt
                  ) except -1:
    cdef WgJob j
    cdef intp_t MR, NR
    cdef int i
    _tile_of(gemm_table(), f64, &MR, &NR)
    j.g = g[0]
    j.T = gemm_table()
    j.f64 = f64
    _wg_plan(g, MR, NR, 8 if f64 else 4, &j.w)
    j.x = X._data
    j.dy = G._data
    for i in range(4):
        j.xs[i] = xs[i]
        j.ds[i] = gs[i]
    if release_gil(DW._size * DW._itemsize + G._size * G._itemsize, nt):
        with nogil:
            _wg_run(&j, shared, DW._data, dws, nt)
    else:
        _wg_run(&j, shared, DW._data, dws, nt)
    return 0


cdef intp_t _wg_need(const Geom* g, bint f64) except -1:
    cdef WgPlan W
    cdef intp_t MR, NR
    _tile_of(gemm_table(), f64, &MR, &NR)
    _wg_plan(g, MR, NR, 8 if f64 else 4, &W)
    return W.shared_bytes


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
    cdef str op = "conv2d_backward"
    cdef bint nhwc = parse_format(data_format, op)
    cdef NDArray X = arg4(x, op, "x")
    cdef NDArray Wt = arg4(w, op, "w", X._dtype)
    cdef NDArray G = arg4(grad_output, op, "grad_output", X._dtype)
    return _backward(X, Wt, G, nhwc, stride, padding, dilation, bool(need_input),
                     bool(need_weight), bool(need_bias), grad_input, grad_weight, grad_bias,
                     scratch, False, op)


cdef tuple _backward(NDArray X, NDArray Wt, NDArray G, bint nhwc, object stride,
                     object padding, object dilation, bint ni, bint nw, bint nb,
                     object grad_input, object grad_weight, object grad_bias, object scratch,
                     bint transposed, str op):
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
    cdef intp_t sh_x, th_x, nt_x, need_min = 0, need_full = 0, wneed
    cdef NDArray GX = None, GW = None, GB = None, RX, RW, RB, In, Gr
    cdef intp_t *ins
    cdef intp_t *grs
    cdef _Call call = _Call(op)
    cdef _Scratch S
    cdef FwdJob fj
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
            wneed = _wg_need(&g, f64)
            need_min = _imax(need_min, wneed)
            need_full = _imax(need_full, wneed)
        S = call.scratch(scratch, need_min, need_full, (X, Wt, G, GX, GW, GB))
        RX = call.temp_for(GX, (X, Wt, G))
        RW = call.temp_for(GW, (X, Wt, G))
        RB = call.temp_for(GB, (X, Wt, G))
        if nw:
            # (transposed: w (c_in_t, c_out_t, kh, kw) is g's own weight layout (CO, C, kh, kw))
            _wstrides(RW, ws)
            if In._size and Gr._size:
                _wg_into(&g, f64, In, ins, Gr, grs, RW, ws, S.base, nt)
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


cdef object _result(object out, NDArray made):
    return out if out is not None else made


cdef int _zero(NDArray a) except -1:
    # zeros into any strides (the weight gradient of an empty batch)
    if a._size:
        np.asarray(a)[...] = 0
    return 0


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
    cdef str op = "conv_transpose2d_backward"
    cdef bint nhwc = parse_format(data_format, op)
    cdef NDArray X = arg4(x, op, "x")
    cdef NDArray Wt = arg4(w, op, "w", X._dtype)
    cdef NDArray G = arg4(grad_output, op, "grad_output", X._dtype)
    return _backward(X, Wt, G, nhwc, stride, padding, dilation, bool(need_input),
                     bool(need_weight), bool(need_bias), grad_input, grad_weight, grad_bias,
                     scratch, True, op)


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
    if backward:
        need = _imax(need, _wg_need(&g, f64))
    return need + ALIGN


# ------------------------------------------------------------------------------------------------
# Depthwise convolution (DL4J's DepthwiseConvolution2D, the first half of SeparableConvolution2D):
# output channel o = c*m + j sees input channel c only, through kernel W[c, j]. Loops over one
# output plane at a time, a row of taps at a time (the compiler vectorises the rows of
# unit-stride planes); a plane is one task, so every element is summed in one fixed order.

ctypedef struct DwJob:
    Geom g
    intp_t m                    # channel multiplier
    int f64, act
    double alpha
    const char* x
    intp_t xs[4]
    const char* w
    intp_t ws[4]                # logical (c, j, kh, kw)
    char* y                     # forward: output; backward: dY (read)
    intp_t ys[4]
    char* dx                    # backward: dX (NULL: not asked)
    intp_t dxs[4]
    char* dw                    # backward: dW (NULL: not asked)
    intp_t dws[4]
    const char* bias
    intp_t bs


cdef inline void _row_axpy(floating_t* y, intp_t y3, const floating_t* x, intp_t x3,
                           floating_t a, intp_t lo, intp_t hi, intp_t SW, intp_t off
                           ) noexcept nogil:
    # y[ow] += a * x[ow*SW + off] for ow in [lo, hi)
    cdef intp_t ow
    if y3 == 1 and x3 == 1 and SW == 1:
        for ow in range(lo, hi):
            y[ow] += a * x[ow + off]
    else:
        for ow in range(lo, hi):
            y[ow * y3] += a * x[(ow * SW + off) * x3]


cdef inline void _row_scatter(floating_t* x, intp_t x3, const floating_t* y, intp_t y3,
                              floating_t a, intp_t lo, intp_t hi, intp_t SW, intp_t off
                              ) noexcept nogil:
    # x[ow*SW + off] += a * y[ow] for ow in [lo, hi)
    cdef intp_t ow
    if y3 == 1 and x3 == 1 and SW == 1:
        for ow in range(lo, hi):
            x[ow + off] += a * y[ow]
    else:
        for ow in range(lo, hi):
            x[(ow * SW + off) * x3] += a * y[ow * y3]


cdef inline floating_t _row_dot(const floating_t* y, intp_t y3, const floating_t* x, intp_t x3,
                                intp_t lo, intp_t hi, intp_t SW, intp_t off) noexcept nogil:
    # sum of y[ow] * x[ow*SW + off] over [lo, hi): 8 partial sums in a fixed order
    cdef floating_t s[8]
    cdef intp_t ow = lo, k
    for k in range(8):
        s[k] = 0
    if y3 == 1 and x3 == 1 and SW == 1:
        while ow + 8 <= hi:
            for k in range(8):
                s[k] += y[ow + k] * x[ow + k + off]
            ow += 8
    while ow < hi:
        s[0] += y[ow * y3] * x[(ow * SW + off) * x3]
        ow += 1
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))


cdef inline void _valid_cols(const Geom* g, intp_t kw, intp_t* off, intp_t* lo, intp_t* hi
                             ) noexcept nogil:
    # output columns whose tap kw falls inside the input: 0 <= ow*SW + off < W
    off[0] = kw * g.DW - g.PL
    lo[0] = 0 if off[0] >= 0 else _cdiv(-off[0], g.SW)
    hi[0] = _imin(g.OW, _cdiv(g.W - off[0], g.SW)) if g.W > off[0] else 0
    if hi[0] < lo[0]:
        hi[0] = lo[0]


cdef extern from "_dw_loops.h" nogil:
    void ndws_dw_row_f32(float32_t* y, const float32_t* x, intp_t xs, intp_t dw,
                         const float32_t* w, int KH, int KW, float32_t b, intp_t n)
    void ndws_dw_row_f64(float64_t* y, const float64_t* x, intp_t xs, intp_t dw,
                         const float64_t* w, int KH, int KW, float64_t b, intp_t n)
    void ndws_dw_dots_f32(const float32_t* g, intp_t gr, const float32_t* x, intp_t xr,
                          intp_t R, intp_t dw, int KW, intp_t n, double* out)
    void ndws_dw_dots_f64(const float64_t* g, intp_t gr, const float64_t* x, intp_t xr,
                          intp_t R, intp_t dw, int KW, intp_t n, double* out)

cdef enum:
    DW_TAPS = 256               # kernels up to this many taps take the vector row kernels


ctypedef struct _DwCols:
    intp_t off[DW_TAPS]         # per kernel column kw: input column of output 0, and the output
    intp_t lo[DW_TAPS]          # columns [lo, hi) whose tap lies inside the input
    intp_t hi[DW_TAPS]
    intp_t clo, chi             # columns where every tap lies inside


cdef void _dw_cols(const Geom* g, intp_t KW, intp_t DW, intp_t PL, intp_t W, intp_t OW,
                   _DwCols* c) noexcept nogil:
    cdef intp_t kw
    c.clo = 0
    c.chi = OW
    for kw in range(KW):
        c.off[kw] = kw * DW - PL
        c.lo[kw] = 0 if c.off[kw] >= 0 else _cdiv(-c.off[kw], g.SW)
        c.hi[kw] = _imin(OW, _cdiv(W - c.off[kw], g.SW)) if W > c.off[kw] else 0
        if c.hi[kw] < c.lo[kw]:
            c.hi[kw] = c.lo[kw]
        c.clo = _imax(c.clo, c.lo[kw])
        c.chi = _imin(c.chi, c.hi[kw])
    if c.chi < c.clo:
        c.chi = c.clo


cdef inline void _dw_row(floating_t* y, const floating_t* x, intp_t xs, intp_t dw,
                         const floating_t* w, intp_t KH, intp_t KW, floating_t b, intp_t n
                         ) noexcept nogil:
    if floating_t is float32_t:
        ndws_dw_row_f32(y, x, xs, dw, w, <int>KH, <int>KW, b, n)
    else:
        ndws_dw_row_f64(y, x, xs, dw, w, <int>KH, <int>KW, b, n)


cdef inline floating_t _dw_point(const floating_t* x, intp_t xs, const floating_t* w,
                                 intp_t KH, intp_t KW, floating_t b, intp_t ow,
                                 const _DwCols* cols) noexcept nogil:
    # one output of a row whose taps are all inside vertically (unit strides): b + the taps
    # inside horizontally, in the row kernel's order
    cdef floating_t s = b
    cdef intp_t kh, kw
    for kh in range(KH):
        for kw in range(KW):
            if cols.lo[kw] <= ow < cols.hi[kw]:
                s += w[kh * KW + kw] * x[kh * xs + ow + cols.off[kw]]
    return s


cdef void _dw_fwd_plane(const DwJob* j, intp_t t, floating_t dummy) noexcept nogil:
    cdef const Geom* g = &j.g
    cdef intp_t n = t // g.CO, o = t % g.CO, c = o // j.m, jm = o % j.m
    cdef intp_t oh, kh, kw, ih, ih0, ow, y3 = j.ys[3], taps = g.KH * g.KW
    cdef const floating_t* xc = <const floating_t*>j.x + n * j.xs[0] + c * j.xs[1]
    cdef const floating_t* wc = <const floating_t*>j.w + c * j.ws[0] + jm * j.ws[1]
    cdef floating_t* yr
    cdef floating_t b0 = (<const floating_t*>j.bias)[o * j.bs] if j.bias != NULL else 0
    cdef floating_t wl[DW_TAPS]
    cdef _DwCols cols
    # the vector row kernel for rows whose taps are all inside, over the columns whose taps are
    cdef bint vec = (taps <= DW_TAPS and g.SW == 1 and j.xs[3] == 1 and y3 == 1)
    _dw_cols(g, g.KW, g.DW, g.PL, g.W, g.OW, &cols)
    if vec:
        for kh in range(g.KH):
            for kw in range(g.KW):
                wl[kh * g.KW + kw] = wc[kh * j.ws[2] + kw * j.ws[3]]
    for oh in range(g.OH):
        yr = <floating_t*>j.y + n * j.ys[0] + o * j.ys[1] + oh * j.ys[2]
        ih0 = oh * g.SH - g.PT
        if vec and ih0 >= 0 and ih0 + (g.KH - 1) * g.DH < g.H and cols.chi > cols.clo:
            _dw_row(yr + cols.clo, xc + ih0 * j.xs[2] + cols.clo + cols.off[0], j.xs[2] * g.DH,
                    g.DW, wl, g.KH, g.KW, b0, cols.chi - cols.clo)
            # the border columns one by one (their taps in the same order)
            for ow in range(cols.clo):
                yr[ow] = _dw_point(xc + ih0 * j.xs[2], j.xs[2] * g.DH, wl, g.KH, g.KW, b0, ow,
                                   &cols)
            for ow in range(cols.chi, g.OW):
                yr[ow] = _dw_point(xc + ih0 * j.xs[2], j.xs[2] * g.DH, wl, g.KH, g.KW, b0, ow,
                                   &cols)
        else:
            for ow in range(g.OW):
                yr[ow * y3] = b0
            for kh in range(g.KH):
                ih = ih0 + kh * g.DH
                if ih < 0 or ih >= g.H:
                    continue
                for kw in range(g.KW):
                    _row_axpy(yr, y3, xc + ih * j.xs[2], j.xs[3],
                              wc[kh * j.ws[2] + kw * j.ws[3]], cols.lo[kw], cols.hi[kw], g.SW,
                              cols.off[kw])
        if j.act != ACT_IDENTITY:
            if floating_t is float32_t:
                act_tile_f32(j.act, <float32_t>j.alpha, yr, 1, g.OW, 0, y3)
            else:
                act_tile_f64(j.act, j.alpha, yr, 1, g.OW, 0, y3)


cdef void _dw_dx_plane(const DwJob* j, intp_t t, floating_t dummy) noexcept nogil:
    # dX[n, c] = sum over j, taps of W[c, j, kh, kw] * dY[n, c*m + j] scattered back; for
    # stride 1 and one output channel per input channel, a gather instead: the forward row
    # kernel over dY with the flipped kernel
    cdef const Geom* g = &j.g
    cdef intp_t n = t // g.C, c = t % g.C, jm, o, oh, kh, kw, ih, h, w, PT2, PL2, iw
    cdef intp_t taps = g.KH * g.KW, oh0, x3 = j.dxs[3]
    cdef floating_t* dxc = <floating_t*>j.dx + n * j.dxs[0] + c * j.dxs[1]
    cdef floating_t* dxr
    cdef const floating_t* wc
    cdef const floating_t* dyr
    cdef const floating_t* dyc
    cdef floating_t wf[DW_TAPS]
    cdef floating_t acc
    cdef _DwCols cols
    cdef Geom f
    if (j.m == 1 and g.SH == 1 and g.SW == 1 and taps <= DW_TAPS and x3 == 1
            and j.ys[3] == 1):
        # gather: dX[ih, iw] = sum W[kh, kw] dY[ih + PT - kh*DH, iw + PL - kw*DW], i.e. a
        # forward pass with the flipped kernel and padding (K-1)*D - P
        wc = <const floating_t*>j.w + c * j.ws[0]
        dyc = <const floating_t*>j.y + n * j.ys[0] + c * j.ys[1]
        for kh in range(g.KH):
            for kw in range(g.KW):
                wf[kh * g.KW + kw] = wc[(g.KH - 1 - kh) * j.ws[2] + (g.KW - 1 - kw) * j.ws[3]]
        PT2 = (g.KH - 1) * g.DH - g.PT
        PL2 = (g.KW - 1) * g.DW - g.PL
        f = g[0]
        f.SW = 1
        _dw_cols(&f, g.KW, g.DW, PL2, g.OW, g.W, &cols)
        for h in range(g.H):
            dxr = dxc + h * j.dxs[2]
            oh0 = h - PT2
            if oh0 >= 0 and oh0 + (g.KH - 1) * g.DH < g.OH and cols.chi > cols.clo:
                _dw_row(dxr + cols.clo, dyc + oh0 * j.ys[2] + cols.clo + cols.off[0],
                        j.ys[2] * g.DH, g.DW, wf, g.KH, g.KW, 0, cols.chi - cols.clo)
                for iw in range(cols.clo):
                    dxr[iw] = _dw_point(dyc + oh0 * j.ys[2], j.ys[2] * g.DH, wf, g.KH, g.KW, 0,
                                        iw, &cols)
                for iw in range(cols.chi, g.W):
                    dxr[iw] = _dw_point(dyc + oh0 * j.ys[2], j.ys[2] * g.DH, wf, g.KH, g.KW, 0,
                                        iw, &cols)
            else:
                for iw in range(g.W):
                    dxr[iw] = 0
                for kh in range(g.KH):
                    oh = oh0 + kh * g.DH
                    if oh < 0 or oh >= g.OH:
                        continue
                    for kw in range(g.KW):
                        _row_axpy(dxr, 1, dyc + oh * j.ys[2], 1, wf[kh * g.KW + kw],
                                  cols.lo[kw], cols.hi[kw], 1, cols.off[kw])
        return
    _dw_cols(g, g.KW, g.DW, g.PL, g.W, g.OW, &cols)
    for h in range(g.H):
        for w in range(g.W):
            dxc[h * j.dxs[2] + w * x3] = 0
    for jm in range(j.m):
        o = c * j.m + jm
        wc = <const floating_t*>j.w + c * j.ws[0] + jm * j.ws[1]
        for oh in range(g.OH):
            dyr = <const floating_t*>j.y + n * j.ys[0] + o * j.ys[1] + oh * j.ys[2]
            for kh in range(g.KH):
                ih = oh * g.SH - g.PT + kh * g.DH
                if ih < 0 or ih >= g.H:
                    continue
                for kw in range(g.KW):
                    _row_scatter(dxc + ih * j.dxs[2], x3, dyr, j.ys[3],
                                 wc[kh * j.ws[2] + kw * j.ws[3]], cols.lo[kw], cols.hi[kw],
                                 g.SW, cols.off[kw])


cdef void _dw_dw_chan(const DwJob* j, intp_t c, floating_t dummy) noexcept nogil:
    # dW[c, j, kh, kw] = sum over n, oh, ow of dY[n, c*m + j, oh, ow] * X[n, c, ih, iw]: per
    # image and kernel row, the columns where every tap is inside through the vector dot kernel
    # over all the image's rows whose tap row is inside, the border columns one by one; images
    # summed in order in float64
    cdef const Geom* g = &j.g
    cdef intp_t jm, o, n, oh, kh, kw, ih, ow, r0, r1, oh_lo, oh_hi
    cdef const floating_t* xc
    cdef const floating_t* xr
    cdef const floating_t* dyc
    cdef const floating_t* dyr
    cdef double acc[DW_TAPS]
    cdef double s
    cdef _DwCols cols
    cdef bint vec = (g.KW <= 16 and g.SW == 1 and j.xs[3] == 1 and j.ys[3] == 1
                     and g.KH * g.KW <= DW_TAPS)
    _dw_cols(g, g.KW, g.DW, g.PL, g.W, g.OW, &cols)
    for jm in range(j.m):
        o = c * j.m + jm
        for kh in range(g.KH * g.KW):
            acc[kh] = 0
        for n in range(g.N):
            xc = <const floating_t*>j.x + n * j.xs[0] + c * j.xs[1]
            dyc = <const floating_t*>j.y + n * j.ys[0] + o * j.ys[1]
            for kh in range(g.KH):
                # output rows whose tap row kh is inside: 0 <= oh*SH - PT + kh*DH < H
                r0 = g.PT - kh * g.DH
                oh_lo = 0 if r0 <= 0 else _cdiv(r0, g.SH)
                oh_hi = _imin(g.OH, _cdiv(g.H + r0, g.SH)) if g.H + r0 > 0 else 0
                if oh_hi <= oh_lo:
                    continue
                if vec:
                    ih = oh_lo * g.SH - r0
                    if cols.chi > cols.clo:
                        if floating_t is float32_t:
                            ndws_dw_dots_f32(dyc + oh_lo * j.ys[2] + cols.clo, j.ys[2],
                                             xc + ih * j.xs[2] + cols.clo + cols.off[0],
                                             j.xs[2] * g.SH, oh_hi - oh_lo, g.DW, <int>g.KW,
                                             cols.chi - cols.clo, acc + kh * g.KW)
                        else:
                            ndws_dw_dots_f64(dyc + oh_lo * j.ys[2] + cols.clo, j.ys[2],
                                             xc + ih * j.xs[2] + cols.clo + cols.off[0],
                                             j.xs[2] * g.SH, oh_hi - oh_lo, g.DW, <int>g.KW,
                                             cols.chi - cols.clo, acc + kh * g.KW)
                    if cols.clo > 0 or cols.chi < g.OW:
                        for kw in range(g.KW):
                            s = 0
                            for oh in range(oh_lo, oh_hi):
                                dyr = dyc + oh * j.ys[2]
                                xr = xc + (oh * g.SH - r0) * j.xs[2]
                                for ow in range(cols.lo[kw], _imin(cols.clo, cols.hi[kw])):
                                    s += dyr[ow] * xr[ow + cols.off[kw]]
                                for ow in range(_imax(cols.chi, cols.lo[kw]), cols.hi[kw]):
                                    s += dyr[ow] * xr[ow + cols.off[kw]]
                            acc[kh * g.KW + kw] += s
                else:
                    for oh in range(oh_lo, oh_hi):
                        dyr = dyc + oh * j.ys[2]
                        xr = xc + (oh * g.SH - r0) * j.xs[2]
                        for kw in range(g.KW):
                            acc[kh * g.KW + kw] += _row_dot(dyr, j.ys[3], xr, j.xs[3],
                                                            cols.lo[kw], cols.hi[kw], g.SW,
                                                            cols.off[kw])
        for kh in range(g.KH):
            for kw in range(g.KW):
                (<floating_t*>j.dw)[c * j.dws[0] + jm * j.dws[1] + kh * j.dws[2]
                                     + kw * j.dws[3]] = <floating_t>acc[kh * g.KW + kw]


cdef void _dw_task_fwd(void* ctx, Py_ssize_t t) noexcept nogil:
    cdef DwJob* j = <DwJob*>ctx
    if j.f64:
        _dw_fwd_plane(j, t, <float64_t>0)
    else:
        _dw_fwd_plane(j, t, <float32_t>0)


cdef void _dw_task_dx(void* ctx, Py_ssize_t t) noexcept nogil:
    cdef DwJob* j = <DwJob*>ctx
    if j.f64:
        _dw_dx_plane(j, t, <float64_t>0)
    else:
        _dw_dx_plane(j, t, <float32_t>0)


cdef void _dw_task_dw(void* ctx, Py_ssize_t t) noexcept nogil:
    cdef DwJob* j = <DwJob*>ctx
    if j.f64:
        _dw_dw_chan(j, t, <float64_t>0)
    else:
        _dw_dw_chan(j, t, <float32_t>0)


cdef int _dw_setup(NDArray X, NDArray Wt, bint nhwc, object stride, object padding,
                   object dilation, DwJob* j, str op) except -1:
    cdef intp_t dims[4]
    cdef int i
    cdef Geom* g = &j.g
    logical(X, nhwc, dims, j.xs)
    if Wt._dtype != X._dtype:
        raise TypeError(f"{op}: w has dtype {Wt._dtype}, expected {X._dtype} (the dtype of x)")
    if Wt._shape[0] != dims[1]:
        msg = (f"{op}: x has {dims[1]} channels (data_format {'NHWC' if nhwc else 'NCHW'}, "
               f"shape {shape_of(X)}) but w has {Wt._shape[0]} (w shape {shape_of(Wt)}: "
               f"(c_in, multiplier, kh, kw))")
        if (X._shape[1] if nhwc else X._shape[3]) == Wt._shape[0]:
            msg += (f"; x looks like {'NCHW' if nhwc else 'NHWC'} data: pass "
                    f"data_format={'NCHW' if nhwc else 'NHWC'!r}")
        raise ValueError(msg)
    if Wt._shape[1] < 1 or Wt._shape[2] < 1 or Wt._shape[3] < 1:
        raise ValueError(f"{op}: w has shape {shape_of(Wt)}: the multiplier and the kernel "
                         f"must be at least 1")
    g.N, g.C, g.H, g.W = dims[0], dims[1], dims[2], dims[3]
    j.m = Wt._shape[1]
    g.CO = g.C * j.m
    g.KH, g.KW = Wt._shape[2], Wt._shape[3]
    window_geom(g, stride, padding, dilation, op)
    j.f64 = X._itemsize == 8
    j.x = X._data
    j.w = Wt._data
    _wstrides(Wt, j.ws)
    j.act = ACT_IDENTITY
    j.alpha = 0
    j.bias = NULL
    j.bs = 0
    j.dx = NULL
    j.dw = NULL
    return 0


cdef int _dw_threads(const DwJob* j, intp_t ntasks) noexcept:
    cdef const Geom* g = &j.g
    cdef double work = <double>g.N * g.CO * g.OH * g.OW * g.KH * g.KW
    return <int>_imax(1, _imin(ntasks, threads_for(<Py_ssize_t>(work if work < 4e18 else 4e18),
                                                   GRAIN_NN_CHEAP)))


def depthwise_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, data_format="NCHW",
                     activation=None, out=None, **params):
    """Depthwise 2-D convolution: output channel ``c*m + j`` is input channel c convolved with
    ``w[c, j]`` (PyTorch's ``groups=c_in`` convolution).

    ``Y[n, c*m + j, h, w] := f(b[c*m + j] + sum_{i, k} W[c, j, i, k] * X[n, c, h*sh - pt + i*dh,
    w*sw - pl + k*dw])``.

    Parameters
    ----------
    x : (n, c_in, height, width) NDArray of float32 or float64 (NHWC: channels last)
    w : (c_in, multiplier, kh, kw) NDArray of the same dtype
        DL4J's DepthwiseConvolution2D keeps ``W`` as (kh, kw, c_in, multiplier) and
        SeparableConvolution2D as (multiplier, c_in, kh, kw): pass the transposed view
        (``W.transpose(2, 3, 0, 1)``, ``W.transpose(1, 0, 2, 3)``; no copy).
    b : (c_in * multiplier,) NDArray, optional
    stride, padding, dilation, data_format, activation, out, **params
        As for `conv2d`. No scratch is needed.

    Returns
    -------
    NDArray
        ``(n, c_in * multiplier, out_h, out_w)`` (NHWC: channels last).

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> x = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2)
    >>> F.depthwise_conv2d(x, np.ones((2, 1, 2, 2), np.float32)).tolist()
    [[[[6.0]], [[22.0]]]]
    """
    cdef str op = "depthwise_conv2d"
    cdef bint nhwc = parse_format(data_format, op)
    cdef NDArray X = arg4(x, op, "x")
    cdef NDArray Wt = arg4(w, op, "w", X._dtype)
    cdef NDArray B = None, Y, R
    cdef DwJob j
    cdef intp_t shape[4]
    cdef intp_t dims[4]
    cdef double alpha
    cdef int nt
    cdef _Call call = _Call(op)
    _dw_setup(X, Wt, nhwc, stride, padding, dilation, &j, op)
    if b is not None:
        B = _bias_arg(b, X, j.g.CO, op, "b")
        j.bias = B._data
        j.bs = B._strides[0] // B._itemsize
    j.act = _act_arg(activation, params, &alpha, op)
    j.alpha = alpha
    _shape4(j.g.N, j.g.CO, j.g.OH, j.g.OW, nhwc, shape)
    Y = call.out(out, X._dtype, 4, shape, "out")
    if Y._size == 0:
        return out if out is not None else Y
    try:
        R = call.temp_for(Y, (X, Wt, B))
        logical(R, nhwc, dims, j.ys)
        j.y = R._data
        nt = _dw_threads(&j, j.g.N * j.g.CO)
        if release_gil(R._size * R._itemsize, nt):
            with nogil:
                run_tasks(_dw_task_fwd, &j, j.g.N * j.g.CO, nt)
        else:
            run_tasks(_dw_task_fwd, &j, j.g.N * j.g.CO, nt)
        call.finish()
    except BaseException:
        call.fail()
        raise
    return out if out is not None else Y


def depthwise_conv2d_backward(x, w, grad_output, stride=1, padding=0, dilation=1,
                              data_format="NCHW", need_input=True, need_weight=True,
                              need_bias=True, grad_input=None, grad_weight=None,
                              grad_bias=None):
    """Gradients of `depthwise_conv2d`: ``(dL/dx, dL/dw, dL/db)`` for dL/d(pre-activation)
    `grad_output`. Each input-gradient plane and each channel's weight gradient is computed
    whole by one thread, in a fixed order. Parameters as for `conv2d_backward` (no scratch).
    """
    cdef str op = "depthwise_conv2d_backward"
    cdef bint nhwc = parse_format(data_format, op)
    cdef NDArray X = arg4(x, op, "x")
    cdef NDArray Wt = arg4(w, op, "w", X._dtype)
    cdef NDArray G = arg4(grad_output, op, "grad_output", X._dtype)
    cdef NDArray GX = None, GW = None, GB = None, RX, RW, RB
    cdef DwJob j
    cdef intp_t shape[4]
    cdef intp_t dims[4]
    cdef intp_t one[1]
    cdef int nt
    cdef bint ni = bool(need_input), nw = bool(need_weight), nb = bool(need_bias)
    cdef _Call call = _Call(op)
    if G._dtype != X._dtype:
        raise TypeError(f"{op}: grad_output has dtype {G._dtype}, expected {X._dtype} (the "
                        f"dtype of x)")
    _dw_setup(X, Wt, nhwc, stride, padding, dilation, &j, op)
    _shape4(j.g.N, j.g.CO, j.g.OH, j.g.OW, nhwc, shape)
    expected = tuple(shape[i] for i in range(4))
    if shape_of(G) != expected:
        raise ValueError(f"{op}: grad_output has shape {shape_of(G)}, expected {expected}")
    if not ni and grad_input is not None or not nw and grad_weight is not None or \
            not nb and grad_bias is not None:
        raise ValueError(f"{op}: an output was given for a gradient that is not asked for")
    logical(G, nhwc, dims, j.ys)
    j.y = G._data
    if ni:
        GX = call.out(grad_input, X._dtype, 4, X._shape, "grad_input")
    if nw:
        GW = call.out(grad_weight, X._dtype, 4, Wt._shape, "grad_weight")
    if nb:
        one[0] = j.g.CO
        GB = call.out(grad_bias, X._dtype, 1, one, "grad_bias")
    try:
        _distinct((GX, GW, GB), ("grad_input", "grad_weight", "grad_bias"), op)
        RX = call.temp_for(GX, (X, Wt, G))
        RW = call.temp_for(GW, (X, Wt, G))
        RB = call.temp_for(GB, (X, Wt, G))
        nt = _dw_threads(&j, 1 << 30)
        if ni and RX._size:
            logical(RX, nhwc, dims, j.dxs)
            j.dx = RX._data
            with nogil:
                run_tasks(_dw_task_dx, &j, j.g.N * j.g.C, <int>_imin(nt, j.g.N * j.g.C))
        if nw and RW._size:
            _wstrides(RW, j.dws)
            j.dw = RW._data
            with nogil:
                run_tasks(_dw_task_dw, &j, j.g.C, <int>_imin(nt, j.g.C))
        if nb:
            _sums_into(G, j.ys, j.g.N, j.g.CO, j.g.OH, j.g.OW, RB, nt)
        call.finish()
    except BaseException:
        call.fail()
        raise
    return (_result(grad_input, GX), _result(grad_weight, GW), _result(grad_bias, GB))


# ------------------------------------------------------------------------------------------------
# im2col / col2im (DL4J's ops): the column matrix itself, for custom layers and for checking.
# The convolutions above never build it.

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
                _valid_cols(g, kj, &off, &lo, &hi)
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
