# PLACEHOLDER under construction (issue 3): naive loops so the build works; replaced by the
# packed, cache-blocked, SIMD micro-kernel GEMM.
from cpython.pycapsule cimport PyCapsule_New
from ndws._typedefs cimport float32_t, float64_t, intp_t
from ndws._gemm_types cimport GemmTable, epilogue_fn


cdef int _sgemm(intp_t m, intp_t n, intp_t k, float32_t alpha,
                const float32_t* a, intp_t rs_a, intp_t cs_a,
                const float32_t* b, intp_t rs_b, intp_t cs_b, float32_t beta,
                float32_t* c, intp_t rs_c, intp_t cs_c, int nthreads,
                epilogue_fn ep, const void* ep_ctx) noexcept nogil:
    cdef intp_t i, j, p
    cdef float32_t acc
    for i in range(m):
        for j in range(n):
            acc = 0
            for p in range(k):
                acc = acc + a[i * rs_a + p * cs_a] * b[p * rs_b + j * cs_b]
            c[i * rs_c + j * cs_c] = alpha * acc + (beta * c[i * rs_c + j * cs_c] if beta != 0 else 0)
    return 0


cdef int _dgemm(intp_t m, intp_t n, intp_t k, float64_t alpha,
                const float64_t* a, intp_t rs_a, intp_t cs_a,
                const float64_t* b, intp_t rs_b, intp_t cs_b, float64_t beta,
                float64_t* c, intp_t rs_c, intp_t cs_c, int nthreads,
                epilogue_fn ep, const void* ep_ctx) noexcept nogil:
    cdef intp_t i, j, p
    cdef float64_t acc
    for i in range(m):
        for j in range(n):
            acc = 0
            for p in range(k):
                acc = acc + a[i * rs_a + p * cs_a] * b[p * rs_b + j * cs_b]
            c[i * rs_c + j * cs_c] = alpha * acc + (beta * c[i * rs_c + j * cs_c] if beta != 0 else 0)
    return 0


cdef GemmTable _TABLE
_TABLE.isa = b"placeholder"
_TABLE.sgemm = _sgemm
_TABLE.dgemm = _dgemm


def table():
    """This module's GemmTable, as a PyCapsule named "ndws.GemmTable"."""
    return PyCapsule_New(&_TABLE, b"ndws.GemmTable", NULL)
