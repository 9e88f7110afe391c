# Declarations of ndws' Cython core, for other Cython modules to `cimport` (the kernels of the
# next layer read an NDArray's pointer, shape and strides directly, without memoryviews).
from libc.stdint cimport uint64_t
from ndws._memory cimport MemoryBlock
from ndws._arena cimport Arena, ThreadState

cdef enum:
    NDWS_MAXDIMS = 64          # NumPy 2's limit (NPY_MAXDIMS): every NumPy array fits
    NDWS_INLINE_DIMS = 4       # shape/strides of up to this many dimensions live in the object

cdef class NDArray:
    cdef char* _data
    cdef int _ndim
    cdef Py_ssize_t _size
    cdef Py_ssize_t _itemsize
    # shape and strides: _dims for up to NDWS_INLINE_DIMS dimensions, else one heap block of
    # 2 * ndim (freed in __dealloc__). Inline storage keeps the object small, which is what a
    # hand-out pays for (the allocator zeroes the whole object).
    cdef Py_ssize_t* _shape
    cdef Py_ssize_t* _strides
    cdef Py_ssize_t _dims[2 * NDWS_INLINE_DIMS]
    cdef object _dtype          # numpy.dtype
    cdef MemoryBlock _block     # owner of the memory (never None)
    cdef Arena _arena           # birth workspace; None when detached
    cdef long long _gen         # birth generation of _arena
    cdef long long _epoch       # _arena's destruction epoch at birth
    cdef long long _vpos        # circular workspaces: virtual ring position at birth
    cdef bint _writeable
    cdef bint _owns             # allocated for this array (NumPy's OWNDATA); False for views
    cdef bint _initialized      # set up by a constructor: __init__ may not run again

cdef int check_array(NDArray a, object op, object role) except -1
cdef NDArray new_array(object dtype, int ndim, const Py_ssize_t* shape, bint zero, bint fortran,
                       Arena target, bint detached)
cdef object np_view(NDArray a)
# Another thread's NDArray as a detached NDArray over a pinned view (its block stays out of the
# owner's reuse while the result lives); anything else as it is. For kernels that read raw
# pointers without the GIL (docs/workspaces.md, "Threads").
cdef object pin_foreign(object x, object op, object role)
# For native kernels: a checked, C-contiguous result placed like every op's result, and the
# rollback that gives its bytes back when the op fails before returning it.
cdef NDArray new_result(object dtype, int ndim, const Py_ssize_t* shape, object op)
# Whether `a` is C-contiguous (size-1 axes may have any stride; empty arrays are).
cdef bint _c_contiguous(NDArray a) noexcept
cdef void discard_result(NDArray a) noexcept

# Kernel threads (see "Kernel threads" in _core.pyx): the one helper every kernel wrapper asks,
# with the GIL held, how many OpenMP threads to use for `work` units when each thread should get
# at least `grain` units (a measured per-kernel constant, so small calls stay on one thread).
# One thread-and-GIL policy for every kernel entry (docs/architecture.md, "How x + y reaches a
# loop"): `threads_for(work, grain)` gives the kernel threads a call may use, and a kernel runs
# without the GIL when it uses more than one or touches more than NOGIL_BYTES.
cdef enum:
    NOGIL_BYTES = 16384        # releasing and re-taking the GIL costs about a 16 KiB add

cdef enum Grain:               # the measured grains themselves are in _core.pyx (_grains)
    GRAIN_ELEMENTWISE = 0      # elements
    GRAIN_REDUCE = 1           # elements
    GRAIN_GEMM_F32 = 2         # flops
    GRAIN_GEMM_F64 = 3         # flops
    GRAIN_NN_CHEAP = 4         # elements: relu, sgd, momentum (memory bound)
    GRAIN_NN_TRANSC = 5        # elements: exp/tanh/erf activations, softmax, losses
    GRAIN_NN_UPDATE = 6        # elements: the sqrt-based updaters
    GRAIN_EVAL_ROWS = 7        # rows: the confusion-matrix counting of ndws.evaluation
    N_GRAINS = 8

cdef int threads_for(Py_ssize_t work, Grain grain) noexcept

cdef inline bint release_gil(Py_ssize_t nbytes, int nthreads) noexcept:
    return nthreads > 1 or nbytes > NOGIL_BYTES
cdef int thread_limit() noexcept


# Memory overlap, the one definition every kernel entry uses (an `out=` that shares memory with
# an input is computed through a temporary, or refused, by each entry's own rule).
cdef inline void byte_extent(char* data, int ndim, const Py_ssize_t* shape,
                             const Py_ssize_t* strides, Py_ssize_t unit, Py_ssize_t itemsize,
                             char** lo, char** hi) noexcept nogil:
    # [lo, hi): the bytes a strided view's elements occupy, strides counted in `unit` bytes
    # (1 for an NDArray's byte strides, the itemsize for element strides); empty (lo == hi)
    # when any dimension is 0
    cdef Py_ssize_t a = 0, b = 0, span
    cdef int i
    for i in range(ndim):
        if shape[i] == 0:
            lo[0] = hi[0] = data
            return
        span = (shape[i] - 1) * strides[i] * unit
        if span < 0:
            a += span
        else:
            b += span
    lo[0] = data + a
    hi[0] = data + b + itemsize


cdef inline bint ranges_overlap(char* alo, char* ahi, char* blo, char* bhi) noexcept nogil:
    return alo < ahi and blo < bhi and alo < bhi and blo < ahi


cdef inline bint arrays_overlap(NDArray a, NDArray b) noexcept:
    """True when the bytes of a and b intersect (never for an empty array)."""
    cdef char* alo
    cdef char* ahi
    cdef char* blo
    cdef char* bhi
    byte_extent(a._data, a._ndim, a._shape, a._strides, 1, a._itemsize, &alo, &ahi)
    byte_extent(b._data, b._ndim, b._shape, b._strides, 1, b._itemsize, &blo, &bhi)
    return ranges_overlap(alo, ahi, blo, bhi)
