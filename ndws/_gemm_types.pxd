# The contract between the per-instruction-set GEMM modules (ndws/_gemm_<isa>.pyx, all compiled
# from the one source ndws/_gemm_kernel.pxi) and their only caller, ndws/_linalg.pyx, which picks
# one table at import by the CPU's features. Types only: cimporting this imports no module.
from ndws._typedefs cimport float32_t, float64_t, intp_t

# Called once per finished tile of C, after its last K block, while the tile is still in cache:
# the tile is C[i0:i0+m, j0:j0+n], `c` points at its first element, rs_c/cs_c are C's element
# strides. The tiles cover C exactly once; with several threads they arrive concurrently from
# different threads (never overlapping), so the epilogue may only touch its own tile. (k == 0
# or alpha == 0: one call for all of C.) `linear` uses it for bias + activation in the same
# pass over the output.
ctypedef void (*epilogue_fn)(const void* ctx, void* c, intp_t i0, intp_t j0, intp_t m, intp_t n,
                             intp_t rs_c, intp_t cs_c) noexcept nogil

# C := alpha*A @ B + beta*C, A (m, k), B (k, n), C (m, n), all strides in elements (any sign;
# C's must not make two elements overlap). beta == 0 makes C write-only (NaN/inf already in C
# are ignored, BLAS's rule). Uses `nthreads` threads of the kernel pool; the result does not
# depend on it.
# Returns 0, or -1 when the per-thread packing scratch could not be allocated (C untouched).
ctypedef int (*sgemm_fn)(intp_t m, intp_t n, intp_t k, float32_t alpha,
                         const float32_t* a, intp_t rs_a, intp_t cs_a,
                         const float32_t* b, intp_t rs_b, intp_t cs_b, float32_t beta,
                         float32_t* c, intp_t rs_c, intp_t cs_c, int nthreads,
                         epilogue_fn ep, const void* ep_ctx) noexcept nogil
ctypedef int (*dgemm_fn)(intp_t m, intp_t n, intp_t k, float64_t alpha,
                         const float64_t* a, intp_t rs_a, intp_t cs_a,
                         const float64_t* b, intp_t rs_b, intp_t cs_b, float64_t beta,
                         float64_t* c, intp_t rs_c, intp_t cs_c, int nthreads,
                         epilogue_fn ep, const void* ep_ctx) noexcept nogil

# Cumulative (re)allocations of per-thread packing scratch by one module: the steady state of a
# loop of same-sized calls must not move it (tests assert that).
ctypedef long long (*count_fn)() noexcept nogil

# The convolutions' indirect micro-kernel (ndws.nn._conv; see _gemm_kernel.pxi): one MR x NR
# register tile C (row stride ldc, unit column stride) := (C if load_c else 0)
# + sum_{p < kc} A[aoff[p] + i*ars] * B[boff[p] + j], with aoff == NULL for a packed A (A + p*MR)
# and boff == NULL for a packed B (B + p*NR). Every element is the GEMM's fma chain over p.
# Bc (NULL, or with an indirect B): receives B's rows packed, Bc[p*NR + j] = B[boff[p] + j].
# ncols: the columns of C the caller needs (NR, or fewer); without Bc, at most a vector's worth
# computes only the first vector of columns (the rest of C's tile is not written).
ctypedef void (*ukr_ind_f32_fn)(intp_t kc, const float32_t* A, const intp_t* aoff, intp_t ars,
                                const float32_t* B, const intp_t* boff, float32_t* C,
                                intp_t ldc, int load_c, float32_t* Bc, intp_t ncols) noexcept nogil
ctypedef void (*ukr_ind_f64_fn)(intp_t kc, const float64_t* A, const intp_t* aoff, intp_t ars,
                                const float64_t* B, const intp_t* boff, float64_t* C,
                                intp_t ldc, int load_c, float64_t* Bc, intp_t ncols) noexcept nogil
# A transposed copy, dst[p*ldd + r] := src[r*lds + p] for r < R, p < P (the packing's register
# block transposes): the convolutions' tiles whose rows are output positions go to NCHW planes.
ctypedef void (*tpose_f32_fn)(const float32_t* src, intp_t lds, intp_t R, intp_t P,
                              float32_t* dst, intp_t ldd) noexcept nogil
ctypedef void (*tpose_f64_fn)(const float64_t* src, intp_t lds, intp_t R, intp_t P,
                              float64_t* dst, intp_t ldd) noexcept nogil
# B packed once for many products with it (the recurrent weights of a time loop): `pack_b_*`
# copies a k x n B (any strides) into `packed_b_elems(k, n, is_f64)` elements in the layout the
# kernel packs B into itself (K blocks of the balanced KC, each a row of zero-padded NR-wide
# panels); `*gemm_packed_b` is the GEMM reading B from there. The same micro-kernel sees the
# same values: the result equals `*gemm`'s bit for bit, without repacking B at every call.
ctypedef void (*pack_b_f32_fn)(intp_t k, intp_t n, const float32_t* b, intp_t rs_b, intp_t cs_b,
                               float32_t* dst) noexcept nogil
ctypedef void (*pack_b_f64_fn)(intp_t k, intp_t n, const float64_t* b, intp_t rs_b, intp_t cs_b,
                               float64_t* dst) noexcept nogil
ctypedef intp_t (*packed_size_fn)(intp_t k, intp_t n, int is_f64) noexcept nogil
ctypedef int (*sgemm_pb_fn)(intp_t m, intp_t n, intp_t k, float32_t alpha,
                            const float32_t* a, intp_t rs_a, intp_t cs_a, const float32_t* bp,
                            float32_t beta, float32_t* c, intp_t rs_c, intp_t cs_c,
                            int nthreads) noexcept nogil
ctypedef int (*dgemm_pb_fn)(intp_t m, intp_t n, intp_t k, float64_t alpha,
                            const float64_t* a, intp_t rs_a, intp_t cs_a, const float64_t* bp,
                            float64_t beta, float64_t* c, intp_t rs_c, intp_t cs_c,
                            int nthreads) noexcept nogil

ctypedef struct GemmTable:
    const char* isa                 # "baseline", "avx2" or "avx512"
    int mr_f32, nr_f32, mr_f64, nr_f64   # register block of the micro-kernels (show_config)
    sgemm_fn sgemm
    dgemm_fn dgemm
    count_fn scratch_allocations
    count_fn scratch_buffers        # threads holding a scratch buffer now (freed at thread exit)
    int kc_f32, mc_f32, nc_f32, kc_f64, mc_f64, nc_f64   # cache blocking (show_config, tests)
    ukr_ind_f32_fn ukr_ind_f32
    ukr_ind_f64_fn ukr_ind_f64
    tpose_f32_fn tpose_f32
    tpose_f64_fn tpose_f64
    pack_b_f32_fn pack_b_f32
    pack_b_f64_fn pack_b_f64
    packed_size_fn packed_b_elems
    sgemm_pb_fn sgemm_packed_b
    dgemm_pb_fn dgemm_packed_b
