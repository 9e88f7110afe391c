# ndws._linalg for other Cython modules: the native GEMM on already-validated NDArrays (the fused
# `linear` of ndws.nn is built on it, with its bias + activation as the epilogue). Its operand
# records are ndws._dispatch's.
from ndws._core cimport NDArray
from ndws._gemm_types cimport GemmTable, epilogue_fn

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


# The GEMM table in use (the instruction set chosen at import, or by _use_isa): the convolution
# kernels call its indirect micro-kernel directly. Read it once per call: _use_isa may swap it
# between calls (never during one: it needs the GIL).
cdef const GemmTable* gemm_table() noexcept
