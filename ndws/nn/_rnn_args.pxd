# The arguments of ndws.nn._rnn's time loops (ndws/nn/_rnn_args.pyx): readers that raise
# TypeError / ValueError naming the call `op` and the argument's role, and one call's
# allocations for the kernel-entry contract's rollback (docs/architecture.md).
from ndws._arena cimport Arena
from ndws._core cimport NDArray
from ndws._typedefs cimport intp_t
from ndws.nn._activations cimport _CallAllocations

cdef enum:
    ALIGN = 64             # scratch parts start on cache lines

# the element stride of axis d
cdef inline intp_t _es(NDArray a, int d) noexcept nogil:
    return a._strides[d] // a._itemsize

# a float32/float64 operand; its dtype must be `dtype` when given
cdef NDArray _operand(object x, str op, str role, object dtype=*)
cdef int _shape_is(NDArray a, tuple shape, str op, str role, str what) except -1
# 'NCW' (True) or 'NWC' (False), any case
cdef bint _ncw(object data_format, str op) except -1
# a sequence's shape in its format, and its element strides along (batch, channels, time)
cdef tuple _seq_shape(intp_t B, intp_t c, intp_t T, bint ncw)
cdef void _seq_strides(NDArray a, bint ncw, intp_t* sb, intp_t* sc, intp_t* st) noexcept
# sizes whose products stay far from intp's overflow
cdef int _check_size(tuple dims, str op) except -1
# an elementwise activation's code (ndws.nn._activations), its parameter into alpha
cdef int _activation(object name, str op, str role, double* alpha) except -1
# the loop workspace: None for None or a DummyWorkspace
cdef Arena _loop_workspace(object ws, str op)
# A size argument: an int in [lo, 2**48), else TypeError / ValueError naming `role`.
cdef Py_ssize_t size_arg(object v, str op, str role, Py_ssize_t lo) except -1


# (fail() and finish() are _CallAllocations')
cdef class _Call(_CallAllocations):
    cdef list outs

    cdef NDArray _place(self, object dtype, tuple shape)
    cdef NDArray out(self, object out, object dtype, tuple shape, str role, tuple inputs)
    cdef char* scratch(self, object scratch, intp_t need, tuple arrays) except NULL
