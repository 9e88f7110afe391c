# C-level API of ndws' convolution kernels (ndws.nn._conv), for the other window kernels
# (ndws.nn._pool cimports the argument readers and the geometry) and, later, the layers' compiled
# code. Everything works in a LOGICAL NCHW frame: an array in NHWC is the same four axes with
# other strides, so every loop is written once for (n, c, h, w) and any strides.
from ndws._core cimport NDArray
from ndws._typedefs cimport intp_t

# One window operation's geometry, per spatial axis: kernel K, stride S, dilation D, padding
# before/after (top, bottom, left, right), the effective (dilated) kernel EK = (K - 1)*D + 1 and
# the output size O = (I + P_before + P_after - EK) // S + 1.
ctypedef struct Geom:
    intp_t N, C, H, W           # input: batch, channels, height, width
    intp_t CO                   # output channels (convolutions; pooling: C)
    intp_t KH, KW, SH, SW, DH, DW
    intp_t PT, PB, PL, PR       # may be negative inside ndws (a crop), never from a caller
    intp_t EKH, EKW, OH, OW

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
