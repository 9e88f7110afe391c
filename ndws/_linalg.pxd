# ndws._linalg for other Cython modules: the native GEMM on already-validated NDArrays and the
# operand records it reads (the fused `linear` of ndws.nn._kernels is built on them, with its bias
# + activation as the epilogue).
from ndws._core cimport NDArray, NDWS_MAXDIMS
from ndws._gemm_types cimport epilogue_fn
from ndws._typedefs cimport intp_t

# Pointer, shape and element strides of an NDArray or a NumPy array, read directly (no
# memoryview, no buffer export per call).
ctypedef struct Operand:
    char* data
    int ndim
    int f64                       # 0 float32, 1 float64
    intp_t shape[NDWS_MAXDIMS]
    intp_t strides[NDWS_MAXDIMS]  # in elements

# Fill `o` from `x` (an NDArray, stale ones refused, or a NumPy array) for a float32/float64
# GEMM operand; raises TypeError/ValueError naming `role` and `op` otherwise (other dtypes, byte
# strides that are not whole elements, a read-only `out` when `write`).
cdef int gemm_operand(object x, str role, Operand* o, bint write, str op) except -1

# Whether two operands' bytes intersect; whether an operand writes some element twice (a zero
# stride on a dimension longer than 1).
cdef bint operands_overlap(const Operand* x, const Operand* y) noexcept
cdef bint self_overlapping(const Operand* o) noexcept

# C := alpha*op(A) @ op(B) + beta*C on 2-D float32/float64 NDArrays of one dtype (op = transpose
# when trans_*). `c` is preallocated with the result's shape and must not overlap `a` or `b`;
# beta == 0 makes it write-only. `ep(ep_ctx, ...)` (may be NULL) runs once on each finished
# tile of C (see ndws/_gemm_types.pxd). Picks the thread count with `threads_for` and releases
# the GIL for the whole kernel. Raises ValueError/TypeError naming the argument on a shape,
# dtype or stride mismatch, MemoryError when the packing scratch cannot be allocated; `op`
# names the operation in those messages.
cdef int gemm_arrays(NDArray a, NDArray b, NDArray c, double alpha, double beta,
                     bint trans_a, bint trans_b, epilogue_fn ep, const void* ep_ctx,
                     object op) except -1
