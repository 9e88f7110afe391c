# C-level entry of the fused dense layer, for other Cython modules to `cimport` (the network's
# compiled iteration, ndws.nn._iteration, calls it on its own arrays).
from ndws._core cimport NDArray

# Y := f(X @ W + B) (B may be None) with activation `code` (ndws.nn._activations' ACT_*, its
# parameter in `alpha`), for arrays the caller has already checked: float32 or float64 of one
# dtype, X (n, k), W (k, m), B (m,), Y (n, m) overlapping none of them. Validity of the arrays is
# still checked (the GEMM reads them as operands), so a stale one raises WorkspaceError.
cdef int linear_into(NDArray X, NDArray W, NDArray B, int code, double alpha,
                     NDArray Y) except -1
