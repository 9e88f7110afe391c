# C-level API of ndws.nn._conv: the window geometry, the argument readers and the kernel-entry
# contract that the convolution modules (_winograd, _conv_gemm, _conv2d, _depthwise) and the
# pooling kernels (_pool) share. Everything works in a LOGICAL NCHW frame: an array in NHWC is
# the same four axes with other strides, so every loop is written once for (n, c, h, w) and any
# strides.
from ndws._core cimport NDArray
from ndws._gemm_types cimport GemmTable
from ndws._typedefs cimport float32_t, floating_t, intp_t
from ndws.nn._activations cimport _CallAllocations

cdef enum:
    TILE_MAX = 1024         # elements of a stack tile: >= MR * NR of every GEMM build
    ALIGN = 64              # scratch parts start on cache lines

# One window operation's geometry, per spatial axis: kernel K, stride S, dilation D, padding
# before/after (top, bottom, left, right), the effective (dilated) kernel EK = (K - 1)*D + 1 and
# the output size O = (I + P_before + P_after - EK) // S + 1.
ctypedef struct Geom:
    intp_t N, C, H, W           # input: batch, channels, height, width
    intp_t CO                   # output channels (convolutions; pooling: C)
    intp_t KH, KW, SH, SW, DH, DW
    intp_t PT, PB, PL, PR       # may be negative inside ndws (a crop), never from a caller
    intp_t EKH, EKW, OH, OW


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


cdef inline intp_t _panel_rows(intp_t rows, intp_t per_row, intp_t NR, intp_t R0
                               ) noexcept nogil:
    # Rows per task (at least R0, at most half the rows when R0 leaves two tasks or more) that
    # need the fewest panels of NR positions over all `rows`, `per_row` positions a row; the
    # fewest rows on a tie (more tasks). VGG's conv1 at batch 1 (32 rows of 34 virtual
    # positions): 4 rows a task take 8 x 5 panels, 16 rows 2 x 17.
    cdef intp_t best = R0, best_n = -1, R, n, hi = R0
    if rows > R0:
        hi = _imax(R0, _cdiv(rows, 2))
    for R in range(R0, hi + 1):
        n = (rows // R) * _cdiv(R * per_row, NR) + _cdiv((rows % R) * per_row, NR)
        if best_n < 0 or n < best_n:
            best, best_n = R, n
    return best


cdef inline void _col_range(intp_t kw, intp_t DW, intp_t PL, intp_t SW, intp_t W, intp_t OW,
                            intp_t* off, intp_t* lo, intp_t* hi) noexcept nogil:
    # output columns [lo, hi) whose tap kw lies inside the input: 0 <= ow*SW + off < W
    off[0] = kw * DW - PL
    lo[0] = 0 if off[0] >= 0 else _cdiv(-off[0], SW)
    hi[0] = _imin(OW, _cdiv(W - off[0], SW)) if W > off[0] else 0
    if hi[0] < lo[0]:
        hi[0] = lo[0]


cdef inline void _ukr(const GemmTable* T, intp_t kc, const floating_t* A, const intp_t* aoff,
                      intp_t ars, const floating_t* B, const intp_t* boff, floating_t* C,
                      intp_t ldc, int load_c, floating_t* Bc=NULL,
                      intp_t ncols=0x40000000) noexcept nogil:
    # the GEMM build's indirect micro-kernel (ndws/_gemm_types.pxd) of C's dtype; ncols: the
    # tile's columns the caller needs (fewer than a vector's worth run one vector wide; the
    # default: all)
    if floating_t is float32_t:
        T.ukr_ind_f32(kc, A, aoff, ars, B, boff, C, ldc, load_c, Bc, ncols)
    else:
        T.ukr_ind_f64(kc, A, aoff, ars, B, boff, C, ldc, load_c, Bc, ncols)


cdef inline void _tpose(const GemmTable* T, const floating_t* src, intp_t lds, intp_t R,
                        intp_t P, floating_t* dst, intp_t ldd) noexcept nogil:
    # dst[p*ldd + r] := src[r*lds + p]: the GEMM build's register-block transposes
    if floating_t is float32_t:
        T.tpose_f32(src, lds, R, P, dst, ldd)
    else:
        T.tpose_f64(src, lds, R, P, dst, ldd)


# An int >= lo (and below the size limit) into out[0] (TypeError/ValueError naming role).
cdef int _int_arg(object v, str op, str role, intp_t lo, intp_t* out) except -1
# An int or a pair of ints, each >= lo, into out[0], out[1] (TypeError/ValueError naming role).
cdef int parse_pair(object v, str op, str role, intp_t lo, intp_t* out) except -1
# Padding as an int (all sides), a pair (height, width: both sides of each) or a 4-tuple
# (top, bottom, left, right), each >= 0, into out[0..3].
cdef int parse_padding(object v, str op, str role, intp_t* out) except -1
# "NCHW" (False) or "NHWC" (True), any case; ValueError otherwise.
cdef bint parse_format(object data_format, str op) except -1
# EK and O of both axes into g from its inputs; ValueError (naming op) when the effective kernel
# is larger than the padded input, or a size would overflow.
cdef int window_output(Geom* g, str op) except -1
# The geometry of a window op from its Python arguments (kernel from kh/kw, already known).
cdef int window_geom(Geom* g, object stride, object padding, object dilation, str op) except -1

# A 4-D float32/float64 operand (another thread's array pinned, NumPy wrapped without a copy).
cdef NDArray arg4(object x, str op, str role, object dtype=*)
# Logical (n, c, h, w) extents and element strides of a 4-D array in data_format nhwc.
cdef void logical(NDArray a, bint nhwc, intp_t* dims, intp_t* strides) noexcept
# The shape tuple of logical dims in the data format.
cdef tuple format_shape(const intp_t* dims, bint nhwc)
# A checked output array: NDArray or NumPy array, writeable, dtype `dtype`, shape `shape`
# (ndim entries), no zero strides over an extent > 1; TypeError/ValueError naming role.
cdef NDArray out_array(object out, object dtype, int ndim, const intp_t* shape, str op, str role)
# An output: `out` checked (out_array) or a new result placed in the current workspace.
cdef NDArray place(object out, object dtype, int ndim, const intp_t* shape, str op, str role)

# The geometry of conv2d(x, w) (transposed: of the convolution whose input gradient
# conv_transpose2d(x, w) is) into g, and x's logical strides into xs.
cdef int _conv_setup(NDArray X, NDArray Wt, bint nhwc, object stride, object padding,
                     object dilation, Geom* g, intp_t* xs, str op, str xrole, str wrole,
                     bint transposed) except -1
# A bias of shape (n,) and X's dtype.
cdef NDArray _bias_arg(object b, NDArray X, intp_t n, str op, str role)
# The activation code (and its alpha) of an elementwise activation; ACT_IDENTITY for None.
cdef int _act_arg(object activation, dict params, double* alpha, str op) except -1
# The element strides of a 4-D weight array's axes.
cdef void _wstrides(NDArray Wt, intp_t* wst) noexcept
# Logical (n, c, h, w) sizes as the array shape of the data format.
cdef void _shape4(intp_t a, intp_t b, intp_t c, intp_t d, bint nhwc, intp_t* shape) noexcept
# ValueError when two of a call's user outputs share memory.
cdef int _distinct(tuple outs, tuple names, str op) except -1
# out[c] := the sum of T[:, c, :, :] (logical strides ts), fixed order, on the kernel pool.
cdef int _sums_into(NDArray T, const intp_t* ts, intp_t N, intp_t C, intp_t H, intp_t W,
                    NDArray out, int nt) except -1
# `out` when the caller gave one, else what the call made.
cdef object _result(object out, NDArray made)
# Zeros into any strides.
cdef int _zero(NDArray a) except -1


# The scratch memory of one call (the caller's `scratch=`, or placed like a result).
cdef class _Scratch:
    cdef NDArray arr
    cdef char* base            # 64-byte aligned start
    cdef intp_t nbytes         # usable bytes from base

    @staticmethod
    cdef _Scratch get(object scratch, intp_t need, str op, tuple inputs)


# The allocations of one call, for the contract's rollback (docs/architecture.md; fail() and
# finish() are _CallAllocations').
cdef class _Call(_CallAllocations):
    cdef NDArray out(self, object out, object dtype, int ndim, const intp_t* shape, str role)
    cdef _Scratch scratch(self, object scratch, intp_t need_min, intp_t need_full,
                          tuple others)
    cdef NDArray temp_for(self, NDArray target, tuple inputs)
