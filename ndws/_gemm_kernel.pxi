# The GEMM of ndws: C := alpha*A @ B + beta*C for float32 and float64, any element strides.
#
# One source, compiled once per instruction set (ndws/_gemm_<isa>.pyx `include` it; setup.py
# adds that ISA's flags). ndws/_simd.h turns those flags into vector types, the register block
# (MR x NR) and the cache blocking (MC, KC, NC); this file is the GotoBLAS/BLIS algorithm:
#
#   for jc in N step NC:              B panel  (KC x NC) packed once per (jc, pc)    -> L3
#     for pc in K step KC:
#       for ic in M step MC:          A block  (MC x KC) packed once per (jc, pc, ic) -> L2
#         for jr in NC step NR:       B micro-panel (KC x NR)                        -> L1 / L2
#           for ir in MC step MR:     micro-kernel: MR x NR of C in registers
#
# Packing copies any strides (transposes and views are only strides) into contiguous,
# zero-padded micro-panels, so the micro-kernel always computes a full MR x NR tile. A tile that
# sticks out of C, or a C whose columns are not contiguous, is computed into a small tile
# buffer by the same micro-kernel and copied out: every element of C sees exactly the same
# sequence of operations wherever it sits, and the split of C between threads (whole tiles)
# never changes a bit of the result.
#
# Three refinements: a row-major B is read in place instead of packed when a thread's rows
# are one A block (each B micro-panel is then used once: the copy would cost more than it
# saves, e.g. batch-32 layers); C.T = B.T @ A.T is computed instead when that has less tile
# padding or contiguous rows; matrix-vector products (n == 1 or m == 1) take a packing-free
# dot/axpy path.
#
# Threads: C is cut into chunks of whole tiles (along N, or along M when that duplicates less
# packing), a few per thread, that the calling thread and the helpers of a small pool
# (ndws/_pool.h) claim one at a time through an atomic counter, each with its own packing
# scratch (per OS thread, allocated once and reused; see _simd.h). Nobody waits for a thread
# that has not started: on a busy machine a descheduled helper only costs its help, where a
# static split in a parallel region waited for it at the closing barrier. Only KC decides
# where partial sums are rounded, and it depends on k alone: any thread count and any claiming
# order give bit-identical C.
from cpython.pycapsule cimport PyCapsule_New
from libc.string cimport memcpy, memset
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t
from ndws._gemm_types cimport GemmTable, epilogue_fn
from ndws._threads cimport pool_run, ndws_claim


cdef extern from "_simd.h" nogil:
    const char* NDWS_ISA
    enum:
        NDWS_VLEN_F32
        NDWS_VLEN_F64
        NDWS_MR_F32
        NDWS_NV_F32
        NDWS_NR_F32
        NDWS_MR_F64
        NDWS_NV_F64
        NDWS_NR_F64
        NDWS_KC_F32
        NDWS_MC_F32
        NDWS_NC_F32
        NDWS_KC_F64
        NDWS_MC_F64
        NDWS_NC_F64
        NDWS_PREFETCH_B
        NDWS_TAIL4_F32
    void ndws_prefetch_l2(const void* p)
    # opaque vector registers: only ever passed to the helpers below
    ctypedef struct ndws_vf32:
        pass
    ctypedef struct ndws_vf64:
        pass
    ndws_vf32 ndws_vzero_f32()
    ndws_vf32 ndws_vload_f32(const float32_t* p)
    void ndws_vstore_f32(float32_t* p, ndws_vf32 v)
    ndws_vf32 ndws_vset1_f32(float32_t x)
    ndws_vf32 ndws_vmul_f32(ndws_vf32 a, ndws_vf32 b)
    ndws_vf32 ndws_vadd_f32(ndws_vf32 a, ndws_vf32 b)
    float32_t ndws_fma_f32(float32_t a, float32_t b, float32_t c)
    ndws_vf32 ndws_vfmadd_f32(ndws_vf32 a, ndws_vf32 b, ndws_vf32 c)
    ndws_vf64 ndws_vzero_f64()
    ndws_vf64 ndws_vload_f64(const float64_t* p)
    void ndws_vstore_f64(float64_t* p, ndws_vf64 v)
    ndws_vf64 ndws_vset1_f64(float64_t x)
    ndws_vf64 ndws_vmul_f64(ndws_vf64 a, ndws_vf64 b)
    ndws_vf64 ndws_vadd_f64(ndws_vf64 a, ndws_vf64 b)
    float64_t ndws_fma_f64(float64_t a, float64_t b, float64_t c)
    ndws_vf64 ndws_vfmadd_f64(ndws_vf64 a, ndws_vf64 b, ndws_vf64 c)
    enum:
        NDWS_HALF_F32
        NDWS_HALF_F64
    void ndws_ukrh_f32(intp_t kc, const float32_t* A, const float32_t* B, intp_t ldb,
                       float32_t* C, intp_t ldc, float32_t alpha, float32_t beta, int load_c)
    void ndws_ukrh_f64(intp_t kc, const float64_t* A, const float64_t* B, intp_t ldb,
                       float64_t* C, intp_t ldc, float64_t alpha, float64_t beta, int load_c)
    void ndws_tpack_f32(const float32_t* src, intp_t lds, intp_t R, intp_t P, float32_t* dst,
                        intp_t ldd)
    void ndws_tpack_f64(const float64_t* src, intp_t lds, intp_t R, intp_t P, float64_t* dst,
                        intp_t ldd)
    char* ndws_scratch_get(size_t nbytes)
    long long ndws_scratch_allocations()
    long long ndws_scratch_buffers()


# Everything a thread needs, shared read-only (except the chunk counter `next`) by the threads.
ctypedef struct Problem:
    intp_t m, n, k
    double alpha, beta                 # exact for float32 callers too
    const void* a
    intp_t rs_a, cs_a
    const void* b
    intp_t rs_b, cs_b
    void* c
    intp_t rs_c, cs_c
    epilogue_fn ep
    const void* ep_ctx
    bint ep_swap                       # C was transposed (see _gemm): swap back for `ep`
    bint is_f64
    bint split_n                       # chunks cut N (else M)
    bint gemv                          # n == 1: matrix-vector path (chunks cut M)
    intp_t kc                          # K block actually used (<= KC, balanced over K)
    intp_t nc_max                      # widest packed B panel of any chunk
    bint keep_a                        # each thread packs all of A once and keeps it
    bint b_packed                      # b is already packed (see _pack_b_all)
    intp_t a_elems                     # scratch elements for packed A
    size_t scratch_bytes
    intp_t extent                      # n when split_n, else m
    intp_t chunk                       # chunk width along `extent`: whole tiles
    long long nchunks
    long long next                     # the next chunk to claim (atomic)


cdef inline intp_t _round_up(intp_t x, intp_t q) noexcept nogil:
    return (x + q - 1) // q * q


cdef inline intp_t _min(intp_t x, intp_t y) noexcept nogil:
    return x if x < y else y


# ------------------------------------------------------------------------------------------------
# Micro-kernels: C__ij (MR x NR, row stride ldc, unit column stride) := alpha * sum_p
# A__ip B__pj (+ beta * C__ij when load_c). A comes packed (MR values per p), B as NR contiguous
# values per p with row stride ldb (packed: ldb == NR; read in place from a row-major B:
# ldb == its row stride). The accumulators are fixed-size arrays indexed by compile-time
# constants only: gcc unrolls the loops and keeps every accumulator in a register.

cdef inline void _ukr_f32(intp_t kc, const float32_t* A__pi,     # IN  packed, kc x MR
                          const float32_t* B__pj, intp_t ldb,     # IN  kc x NR
                          float32_t* C__ij, intp_t ldc,           # OUT MR x NR
                          float32_t alpha, float32_t beta, bint load_c,
                          const float32_t* pf=NULL) noexcept nogil:  # IN  prefetched, kc x NR
    cdef ndws_vf32 acc[NDWS_MR_F32][NDWS_NV_F32]
    cdef ndws_vf32 bv[NDWS_NV_F32]
    cdef ndws_vf32 av, va, vb
    cdef intp_t p
    cdef int r, v
    for r in range(NDWS_MR_F32):
        for v in range(NDWS_NV_F32):
            acc[r][v] = ndws_vzero_f32()
    for p in range(kc):
        if NDWS_PREFETCH_B and pf != NULL:
            ndws_prefetch_l2(pf + p * NDWS_NR_F32)
        for v in range(NDWS_NV_F32):
            bv[v] = ndws_vload_f32(B__pj + v * NDWS_VLEN_F32)
        for r in range(NDWS_MR_F32):
            av = ndws_vset1_f32(A__pi[r])
            for v in range(NDWS_NV_F32):
                acc[r][v] = ndws_vfmadd_f32(av, bv[v], acc[r][v])
        A__pi += NDWS_MR_F32
        B__pj += ldb
    va = ndws_vset1_f32(alpha)
    if load_c:
        vb = ndws_vset1_f32(beta)
        for r in range(NDWS_MR_F32):
            for v in range(NDWS_NV_F32):
                ndws_vstore_f32(C__ij + r * ldc + v * NDWS_VLEN_F32, ndws_vfmadd_f32(
                    va, acc[r][v],
                    ndws_vmul_f32(vb, ndws_vload_f32(C__ij + r * ldc + v * NDWS_VLEN_F32))))
    else:
        for r in range(NDWS_MR_F32):
            for v in range(NDWS_NV_F32):
                ndws_vstore_f32(C__ij + r * ldc + v * NDWS_VLEN_F32, ndws_vmul_f32(va, acc[r][v]))


# The float32 tile of 4 rows (_simd.h: NDWS_TAIL4_F32): A packed 4 values per p, each element
# the same fma chain and epilogue as in _ukr_f32. A second function rather than a row-count
# parameter: the accumulators stay in registers only with compile-time loop bounds, and Cython
# has no integer templates (the float64 and one-vector tiles above are written out alike).
cdef inline void _ukr4_f32(intp_t kc, const float32_t* A__pi,    # IN  packed, kc x 4
                           const float32_t* B__pj, intp_t ldb,    # IN  kc x NR
                           float32_t* C__ij, intp_t ldc,          # OUT 4 x NR
                           float32_t alpha, float32_t beta, bint load_c,
                           const float32_t* pf) noexcept nogil:  # IN  prefetched, kc x NR
    cdef ndws_vf32 acc[4][NDWS_NV_F32]
    cdef ndws_vf32 bv[NDWS_NV_F32]
    cdef ndws_vf32 av, va, vb
    cdef intp_t p
    cdef int r, v
    for r in range(4):
        for v in range(NDWS_NV_F32):
            acc[r][v] = ndws_vzero_f32()
    for p in range(kc):
        if NDWS_PREFETCH_B and pf != NULL:
            ndws_prefetch_l2(pf + p * NDWS_NR_F32)
        for v in range(NDWS_NV_F32):
            bv[v] = ndws_vload_f32(B__pj + v * NDWS_VLEN_F32)
        for r in range(4):
            av = ndws_vset1_f32(A__pi[r])
            for v in range(NDWS_NV_F32):
                acc[r][v] = ndws_vfmadd_f32(av, bv[v], acc[r][v])
        A__pi += 4
        B__pj += ldb
    va = ndws_vset1_f32(alpha)
    if load_c:
        vb = ndws_vset1_f32(beta)
        for r in range(4):
            for v in range(NDWS_NV_F32):
                ndws_vstore_f32(C__ij + r * ldc + v * NDWS_VLEN_F32, ndws_vfmadd_f32(
                    va, acc[r][v],
                    ndws_vmul_f32(vb, ndws_vload_f32(C__ij + r * ldc + v * NDWS_VLEN_F32))))
    else:
        for r in range(4):
            for v in range(NDWS_NV_F32):
                ndws_vstore_f32(C__ij + r * ldc + v * NDWS_VLEN_F32, ndws_vmul_f32(va, acc[r][v]))


cdef inline void _ukr4(intp_t kc, const floating_t* A__pi, const floating_t* B__pj, intp_t ldb,
                       floating_t* C__ij, intp_t ldc, floating_t alpha, floating_t beta,
                       bint load_c, const floating_t* pf) noexcept nogil:
    # the 4-row tile for the fused callers; float32 only (NDWS_TAIL4_F32)
    if floating_t is float32_t:
        _ukr4_f32(kc, A__pi, B__pj, ldb, C__ij, ldc, alpha, beta, load_c, pf)


cdef inline intp_t _tile_rows(intp_t rest, intp_t MR, bint tail4) noexcept nogil:
    # rows of the next tile when `rest` rows of the block are left: MR, except that with
    # tail4 the last 8 rows are two tiles of 4 and the last 4 one (_simd.h: NDWS_TAIL4_F32);
    # a tile of 4 is packed 4 values per p, any other MR per p (zero-padded when shorter)
    if tail4 and (rest == 4 or rest == 8):
        return 4
    return _min(MR, rest)


cdef inline void _ukr_f64(intp_t kc, const float64_t* A__pi,     # IN  packed, kc x MR
                          const float64_t* B__pj, intp_t ldb,     # IN  kc x NR
                          float64_t* C__ij, intp_t ldc,           # OUT MR x NR
                          float64_t alpha, float64_t beta, bint load_c,
                          const float64_t* pf=NULL) noexcept nogil:  # IN  prefetched, kc x NR
    cdef ndws_vf64 acc[NDWS_MR_F64][NDWS_NV_F64]
    cdef ndws_vf64 bv[NDWS_NV_F64]
    cdef ndws_vf64 av, va, vb
    cdef intp_t p
    cdef int r, v
    for r in range(NDWS_MR_F64):
        for v in range(NDWS_NV_F64):
            acc[r][v] = ndws_vzero_f64()
    for p in range(kc):
        if NDWS_PREFETCH_B and pf != NULL:
            ndws_prefetch_l2(pf + p * NDWS_NR_F64)
        for v in range(NDWS_NV_F64):
            bv[v] = ndws_vload_f64(B__pj + v * NDWS_VLEN_F64)
        for r in range(NDWS_MR_F64):
            av = ndws_vset1_f64(A__pi[r])
            for v in range(NDWS_NV_F64):
                acc[r][v] = ndws_vfmadd_f64(av, bv[v], acc[r][v])
        A__pi += NDWS_MR_F64
        B__pj += ldb
    va = ndws_vset1_f64(alpha)
    if load_c:
        vb = ndws_vset1_f64(beta)
        for r in range(NDWS_MR_F64):
            for v in range(NDWS_NV_F64):
                ndws_vstore_f64(C__ij + r * ldc + v * NDWS_VLEN_F64, ndws_vfmadd_f64(
                    va, acc[r][v],
                    ndws_vmul_f64(vb, ndws_vload_f64(C__ij + r * ldc + v * NDWS_VLEN_F64))))
    else:
        for r in range(NDWS_MR_F64):
            for v in range(NDWS_NV_F64):
                ndws_vstore_f64(C__ij + r * ldc + v * NDWS_VLEN_F64, ndws_vmul_f64(va, acc[r][v]))


# The same tile one vector wide (the first VLEN of the NR columns): a C edge whose last panel
# holds at most VLEN columns (N = 77 on AVX-512: two panels of 32 and one of 13) costs half the
# full tile's fmas; at most half a vector takes _simd.h's half tile instead. Every column gets
# the full kernel's operations in the same order (its own fma chain over p, then alpha and
# beta), so the bits do not depend on which kernel ran.

cdef inline void _ukr1_f32(intp_t kc, const float32_t* A__pi, const float32_t* B__pj,
                           intp_t ldb, float32_t* C__ij, intp_t ldc, float32_t alpha,
                           float32_t beta, bint load_c) noexcept nogil:
    cdef ndws_vf32 acc[NDWS_MR_F32]
    cdef ndws_vf32 bv, av, va, vb
    cdef intp_t p
    cdef int r
    for r in range(NDWS_MR_F32):
        acc[r] = ndws_vzero_f32()
    for p in range(kc):
        bv = ndws_vload_f32(B__pj)
        for r in range(NDWS_MR_F32):
            av = ndws_vset1_f32(A__pi[r])
            acc[r] = ndws_vfmadd_f32(av, bv, acc[r])
        A__pi += NDWS_MR_F32
        B__pj += ldb
    va = ndws_vset1_f32(alpha)
    if load_c:
        vb = ndws_vset1_f32(beta)
        for r in range(NDWS_MR_F32):
            ndws_vstore_f32(C__ij + r * ldc, ndws_vfmadd_f32(
                va, acc[r], ndws_vmul_f32(vb, ndws_vload_f32(C__ij + r * ldc))))
    else:
        for r in range(NDWS_MR_F32):
            ndws_vstore_f32(C__ij + r * ldc, ndws_vmul_f32(va, acc[r]))


cdef inline void _ukr1_f64(intp_t kc, const float64_t* A__pi, const float64_t* B__pj,
                           intp_t ldb, float64_t* C__ij, intp_t ldc, float64_t alpha,
                           float64_t beta, bint load_c) noexcept nogil:
    cdef ndws_vf64 acc[NDWS_MR_F64]
    cdef ndws_vf64 bv, av, va, vb
    cdef intp_t p
    cdef int r
    for r in range(NDWS_MR_F64):
        acc[r] = ndws_vzero_f64()
    for p in range(kc):
        bv = ndws_vload_f64(B__pj)
        for r in range(NDWS_MR_F64):
            av = ndws_vset1_f64(A__pi[r])
            acc[r] = ndws_vfmadd_f64(av, bv, acc[r])
        A__pi += NDWS_MR_F64
        B__pj += ldb
    va = ndws_vset1_f64(alpha)
    if load_c:
        vb = ndws_vset1_f64(beta)
        for r in range(NDWS_MR_F64):
            ndws_vstore_f64(C__ij + r * ldc, ndws_vfmadd_f64(
                va, acc[r], ndws_vmul_f64(vb, ndws_vload_f64(C__ij + r * ldc))))
    else:
        for r in range(NDWS_MR_F64):
            ndws_vstore_f64(C__ij + r * ldc, ndws_vmul_f64(va, acc[r]))


cdef inline void _ukr_edge(intp_t kc, const floating_t* A__pi, const floating_t* B__pj,
                           intp_t ldb, floating_t* C__ij, intp_t ldc, floating_t alpha,
                           floating_t beta, bint load_c, intp_t nr) noexcept nogil:
    # the tile for a panel of nr <= NR valid columns: half a vector or one vector wide when
    # they fit in one (_simd.h: the half tile)
    if floating_t is float32_t:
        if NDWS_HALF_F32 and nr <= NDWS_HALF_F32:
            ndws_ukrh_f32(kc, A__pi, B__pj, ldb, C__ij, ldc, alpha, beta, load_c)
        elif NDWS_NV_F32 > 1 and nr <= NDWS_VLEN_F32:
            _ukr1_f32(kc, A__pi, B__pj, ldb, C__ij, ldc, alpha, beta, load_c)
        else:
            _ukr_f32(kc, A__pi, B__pj, ldb, C__ij, ldc, alpha, beta, load_c)
    else:
        if NDWS_HALF_F64 and nr <= NDWS_HALF_F64:
            ndws_ukrh_f64(kc, A__pi, B__pj, ldb, C__ij, ldc, alpha, beta, load_c)
        elif NDWS_NV_F64 > 1 and nr <= NDWS_VLEN_F64:
            _ukr1_f64(kc, A__pi, B__pj, ldb, C__ij, ldc, alpha, beta, load_c)
        else:
            _ukr_f64(kc, A__pi, B__pj, ldb, C__ij, ldc, alpha, beta, load_c)


cdef inline void _ukr(intp_t kc, const floating_t* A__pi, const floating_t* B__pj, intp_t ldb,
                      floating_t* C__ij, intp_t ldc, floating_t alpha, floating_t beta,
                      bint load_c, const floating_t* pf=NULL) noexcept nogil:
    if floating_t is float32_t:
        _ukr_f32(kc, A__pi, B__pj, ldb, C__ij, ldc, alpha, beta, load_c, pf)
    else:
        _ukr_f64(kc, A__pi, B__pj, ldb, C__ij, ldc, alpha, beta, load_c, pf)


# ------------------------------------------------------------------------------------------------
# The indirect micro-kernel of the convolution kernels (ndws.nn._conv, published in the table as
# ukr_ind_f32/_f64): the same register tile and the same fma chain over p as the GEMM's, with
# the operands addressed through offset tables instead of packed panels, so a convolution reads
# its input where it lies (an implicit im2col: the taps of one output row are one offset each):
#
#   C__ij (MR x NR, row stride ldc, unit column stride) (+)= sum_p A[aoff[p] + i*ars] * B[boff[p] + j]
#
# aoff == NULL means A is packed (A + p*MR, ars == 1); boff == NULL means B is packed
# (B + p*NR). load_c adds the product to C instead of overwriting it. Bc (with an indirect B)
# receives the B rows as they are loaded, packed (Bc + p*NR): the first A panel over a block of B
# packs it for the others at the cost of two stores per MR*NV fmas. Without Bc, a caller that
# needs at most VLEN columns (ncols) gets the tile one vector wide: the other columns of C are
# not written, and each written column is the same fma chain, so the bits do not change.

cdef inline void _ind_f32(intp_t kc, const float32_t* A, const intp_t* aoff, intp_t ars,
                          const float32_t* B, const intp_t* boff, float32_t* C, intp_t ldc,
                          bint load_c, float32_t* Bc, bint a_packed, bint b_packed,
                          bint b_copy, bint narrow) noexcept nogil:
    cdef ndws_vf32 acc[NDWS_MR_F32][NDWS_NV_F32]
    cdef ndws_vf32 bv[NDWS_NV_F32]
    cdef ndws_vf32 av
    cdef const float32_t* a
    cdef const float32_t* b
    cdef intp_t p
    cdef int r, v
    cdef int nv = 1 if narrow else NDWS_NV_F32      # narrow: the first vector only
    for r in range(NDWS_MR_F32):
        for v in range(nv):
            acc[r][v] = ndws_vzero_f32()
    for p in range(kc):
        a = A + p * NDWS_MR_F32 if a_packed else A + aoff[p]
        b = B + p * NDWS_NR_F32 if b_packed else B + boff[p]
        for v in range(nv):
            bv[v] = ndws_vload_f32(b + v * NDWS_VLEN_F32)
            if b_copy:
                ndws_vstore_f32(Bc + p * NDWS_NR_F32 + v * NDWS_VLEN_F32, bv[v])
        for r in range(NDWS_MR_F32):
            av = ndws_vset1_f32(a[r] if a_packed else a[r * ars])
            for v in range(nv):
                acc[r][v] = ndws_vfmadd_f32(av, bv[v], acc[r][v])
    for r in range(NDWS_MR_F32):
        for v in range(nv):
            if load_c:
                acc[r][v] = ndws_vadd_f32(ndws_vload_f32(C + r * ldc + v * NDWS_VLEN_F32),
                                          acc[r][v])
            ndws_vstore_f32(C + r * ldc + v * NDWS_VLEN_F32, acc[r][v])


cdef inline void _ind_f64(intp_t kc, const float64_t* A, const intp_t* aoff, intp_t ars,
                          const float64_t* B, const intp_t* boff, float64_t* C, intp_t ldc,
                          bint load_c, float64_t* Bc, bint a_packed, bint b_packed,
                          bint b_copy, bint narrow) noexcept nogil:
    cdef ndws_vf64 acc[NDWS_MR_F64][NDWS_NV_F64]
    cdef ndws_vf64 bv[NDWS_NV_F64]
    cdef ndws_vf64 av
    cdef const float64_t* a
    cdef const float64_t* b
    cdef intp_t p
    cdef int r, v
    cdef int nv = 1 if narrow else NDWS_NV_F64      # narrow: the first vector only
    for r in range(NDWS_MR_F64):
        for v in range(nv):
            acc[r][v] = ndws_vzero_f64()
    for p in range(kc):
        a = A + p * NDWS_MR_F64 if a_packed else A + aoff[p]
        b = B + p * NDWS_NR_F64 if b_packed else B + boff[p]
        for v in range(nv):
            bv[v] = ndws_vload_f64(b + v * NDWS_VLEN_F64)
            if b_copy:
                ndws_vstore_f64(Bc + p * NDWS_NR_F64 + v * NDWS_VLEN_F64, bv[v])
        for r in range(NDWS_MR_F64):
            av = ndws_vset1_f64(a[r] if a_packed else a[r * ars])
            for v in range(nv):
                acc[r][v] = ndws_vfmadd_f64(av, bv[v], acc[r][v])
    for r in range(NDWS_MR_F64):
        for v in range(nv):
            if load_c:
                acc[r][v] = ndws_vadd_f64(ndws_vload_f64(C + r * ldc + v * NDWS_VLEN_F64),
                                          acc[r][v])
            ndws_vstore_f64(C + r * ldc + v * NDWS_VLEN_F64, acc[r][v])


cdef void _ukr_ind_f32(intp_t kc, const float32_t* A, const intp_t* aoff, intp_t ars,
                       const float32_t* B, const intp_t* boff, float32_t* C, intp_t ldc,
                       int load_c, float32_t* Bc, intp_t ncols) noexcept nogil:
    # the kinds of operand the convolutions use get their own loop (constant flags fold into
    # the inlined body; with more call sites gcc stops inlining it); the rest share one
    if NDWS_NV_F32 > 1 and ncols <= NDWS_VLEN_F32 and Bc == NULL:
        # one vector wide (the last tap group of row taps: 16 of 48 columns)
        if aoff != NULL and boff != NULL:
            _ind_f32(kc, A, aoff, ars, B, boff, C, ldc, load_c, Bc, False, False, False, True)
        else:
            _ind_f32(kc, A, aoff, ars if aoff != NULL else 1, B, boff, C, ldc, load_c, Bc,
                     aoff == NULL, boff == NULL, False, True)
    elif aoff == NULL and boff == NULL:
        _ind_f32(kc, A, aoff, 1, B, boff, C, ldc, load_c, Bc, True, True, False, False)
    elif aoff == NULL and Bc != NULL:
        _ind_f32(kc, A, aoff, 1, B, boff, C, ldc, load_c, Bc, True, False, True, False)
    elif boff == NULL:
        _ind_f32(kc, A, aoff, ars, B, boff, C, ldc, load_c, Bc, False, True, False, False)
    elif aoff != NULL and Bc == NULL:
        # both read in place (row taps: dY and the channels-last copy)
        _ind_f32(kc, A, aoff, ars, B, boff, C, ldc, load_c, Bc, False, False, False, False)
    else:
        _ind_f32(kc, A, aoff, ars if aoff != NULL else 1, B, boff, C, ldc, load_c, Bc,
                 aoff == NULL, False, Bc != NULL, False)


cdef void _ukr_ind_f64(intp_t kc, const float64_t* A, const intp_t* aoff, intp_t ars,
                       const float64_t* B, const intp_t* boff, float64_t* C, intp_t ldc,
                       int load_c, float64_t* Bc, intp_t ncols) noexcept nogil:
    # the kinds of operand the convolutions use get their own loop (constant flags fold into
    # the inlined body; with more call sites gcc stops inlining it); the rest share one
    if NDWS_NV_F64 > 1 and ncols <= NDWS_VLEN_F64 and Bc == NULL:
        # one vector wide (the last tap group of row taps: 16 of 48 columns)
        if aoff != NULL and boff != NULL:
            _ind_f64(kc, A, aoff, ars, B, boff, C, ldc, load_c, Bc, False, False, False, True)
        else:
            _ind_f64(kc, A, aoff, ars if aoff != NULL else 1, B, boff, C, ldc, load_c, Bc,
                     aoff == NULL, boff == NULL, False, True)
    elif aoff == NULL and boff == NULL:
        _ind_f64(kc, A, aoff, 1, B, boff, C, ldc, load_c, Bc, True, True, False, False)
    elif aoff == NULL and Bc != NULL:
        _ind_f64(kc, A, aoff, 1, B, boff, C, ldc, load_c, Bc, True, False, True, False)
    elif boff == NULL:
        _ind_f64(kc, A, aoff, ars, B, boff, C, ldc, load_c, Bc, False, True, False, False)
    elif aoff != NULL and Bc == NULL:
        # both read in place (row taps: dY and the channels-last copy)
        _ind_f64(kc, A, aoff, ars, B, boff, C, ldc, load_c, Bc, False, False, False, False)
    else:
        _ind_f64(kc, A, aoff, ars if aoff != NULL else 1, B, boff, C, ldc, load_c, Bc,
                 aoff == NULL, False, Bc != NULL, False)


# ------------------------------------------------------------------------------------------------
# Packing. The inner loop always runs along whichever source axis is contiguous, so transposed
# operands pack as fast as plain ones; the padding rows/columns are zeros (they only feed the
# parts of a tile that are never copied out).

cdef inline void _tpack(const floating_t* src, intp_t lds, intp_t R, intp_t P,
                        floating_t* dst, intp_t ldd) noexcept nogil:
    # dst[p*ldd + r] = src[r*lds + p]: register-block transposes (see _simd.h)
    if floating_t is float32_t:
        ndws_tpack_f32(src, lds, R, P, dst, ldd)
    else:
        ndws_tpack_f64(src, lds, R, P, dst, ldd)


cdef void _tpose_f32(const float32_t* src, intp_t lds, intp_t R, intp_t P, float32_t* dst,
                     intp_t ldd) noexcept nogil:
    _tpack(src, lds, R, P, dst, ldd)


cdef void _tpose_f64(const float64_t* src, intp_t lds, intp_t R, intp_t P, float64_t* dst,
                     intp_t ldd) noexcept nogil:
    _tpack(src, lds, R, P, dst, ldd)


cdef inline void _copy_short(const floating_t* src, floating_t* dst, intp_t n) noexcept nogil:
    # dst[:n] = src[:n] for the few values of one packed A column: constant-size copies that
    # the compiler inlines as a vector move or two, instead of a loop or a memcpy call
    cdef intp_t r
    if n == 6:
        memcpy(dst, src, 6 * sizeof(floating_t))
    elif n == 4:
        memcpy(dst, src, 4 * sizeof(floating_t))
    elif n == 8:
        memcpy(dst, src, 8 * sizeof(floating_t))
    else:
        for r in range(n):
            dst[r] = src[r]


cdef enum:
    # K steps of a transposed A packed per sweep over the block's tiles: the PACK_KB runs of
    # mc contiguous values they read (12 KiB for float32's MC) stay in L1 while every tile
    # takes its part
    PACK_KB = 16


cdef void _pack_a_t(intp_t mc, intp_t kc, intp_t MR, bint tail4,
                    const floating_t* A__ip, intp_t cs_a,              # IN  rs_a == 1
                    floating_t* Ap__pi) noexcept nogil:                # OUT as _pack_a's
    # A's columns are contiguous (a transposed operand, e.g. X.T @ dZ): packing one tile at a
    # time over all of kc would read each cache line of A once per tile it overlaps, with a
    # stride of cs_a, from L2 or beyond; PACK_KB K steps at a time read each line once.
    cdef intp_t p0, p1, p, ir, mr, W
    cdef const floating_t* src
    cdef floating_t* dst
    p0 = 0
    while p0 < kc:
        p1 = _min(p0 + PACK_KB, kc)
        ir = 0
        while ir < mc:
            mr = _tile_rows(mc - ir, MR, tail4)
            W = 4 if tail4 and mr == 4 else MR
            src = A__ip + ir
            dst = Ap__pi + ir * kc
            for p in range(p0, p1):
                _copy_short(src + p * cs_a, dst + p * W, mr)
                if mr < W:
                    memset(dst + p * W + mr, 0, (W - mr) * sizeof(floating_t))
            ir += mr
        p0 = p1


cdef void _pack_a(intp_t mc, intp_t kc, intp_t MR, bint tail4,
                  const floating_t* A__ip, intp_t rs_a, intp_t cs_a,   # IN  mc x kc block of A
                  floating_t* Ap__pi) noexcept nogil:                  # OUT one panel per tile
    # the panel of the tile of rows ir.. (_tile_rows) starts at ir * kc, W values per p
    cdef intp_t ir = 0, mr, W, p, r
    cdef const floating_t* src
    cdef floating_t* dst
    if rs_a == 1 and cs_a != 1:
        _pack_a_t(mc, kc, MR, tail4, A__ip, cs_a, Ap__pi)
        return
    while ir < mc:
        mr = _tile_rows(mc - ir, MR, tail4)
        W = 4 if tail4 and mr == 4 else MR
        src = A__ip + ir * rs_a
        dst = Ap__pi + ir * kc
        if cs_a == 1:
            _tpack(src, rs_a, mr, kc, dst, W)
        else:
            for p in range(kc):
                for r in range(mr):
                    dst[p * W + r] = src[r * rs_a + p * cs_a]
        if mr < W:
            for p in range(kc):
                for r in range(mr, W):
                    dst[p * W + r] = 0
        ir += mr


cdef void _pack_b(intp_t kc, intp_t nc, intp_t NR,
                  const floating_t* B__pj, intp_t rs_b, intp_t cs_b,   # IN  kc x nc block of B
                  floating_t* Bp__pj) noexcept nogil:                  # OUT ceil(nc/NR) panels
    cdef intp_t jr, jr_b, nr, p, j
    cdef const floating_t* src
    cdef floating_t* dst
    for jr_b in range((nc + NR - 1) // NR):
        jr = jr_b * NR
        nr = _min(NR, nc - jr)
        src = B__pj + jr * cs_b
        dst = Bp__pj + jr * kc
        if cs_b == 1 and nr == NR:
            for p in range(kc):
                memcpy(dst + p * NR, src + p * rs_b, NR * sizeof(floating_t))
        elif rs_b == 1:
            _tpack(src, cs_b, nr, kc, dst, NR)
        else:
            for p in range(kc):
                for j in range(nr):
                    dst[p * NR + j] = src[p * rs_b + j * cs_b]
        if nr < NR:
            for p in range(kc):
                for j in range(nr, NR):
                    dst[p * NR + j] = 0


# ------------------------------------------------------------------------------------------------
# One thread's slice of C: rows [i0, i1), columns [j0, j1), the full GotoBLAS loop nest.

cdef void _slice(const Problem* P, intp_t i0, intp_t i1, intp_t j0, intp_t j1,
                 floating_t* scratch, bint a_packed) noexcept nogil:
    # With P.keep_a (chunks that cut N, A small enough), the scratch holds all of A packed,
    # K block after K block: the first chunk a thread computes packs it (a_packed false), the
    # thread's later chunks of the same call reuse it. Several narrow chunks per thread then
    # cost no more packing than one wide one.
    cdef const floating_t* A = <const floating_t*>P.a
    cdef const floating_t* B = <const floating_t*>P.b
    cdef floating_t* C = <floating_t*>P.c
    cdef intp_t rs_a = P.rs_a, cs_a = P.cs_a, rs_b = P.rs_b, cs_b = P.cs_b
    cdef intp_t rs_c = P.rs_c, cs_c = P.cs_c, k = P.k
    cdef floating_t alpha = <floating_t>P.alpha
    cdef floating_t beta0 = <floating_t>P.beta
    cdef floating_t beta
    cdef intp_t MR, NR, MC, NC, KC = P.kc, half
    cdef intp_t jc, nc, pc, kc, ic, mc, mcb, nmb, jr, nr, ir, mr, ldb, r, j, align
    cdef intp_t jc_b, pc_b, ic_b, jr_b
    cdef bint load_c, last, direct_b, tail4
    cdef floating_t* Ap
    cdef floating_t* Ablk
    cdef floating_t* Bp
    cdef floating_t* Be
    cdef floating_t* Ct
    cdef const floating_t* bp
    cdef const floating_t* pf
    cdef floating_t* cij
    if floating_t is float32_t:
        MR = NDWS_MR_F32
        NR = NDWS_NR_F32
        MC = NDWS_MC_F32
        NC = NDWS_NC_F32
        half = NDWS_HALF_F32
        tail4 = NDWS_TAIL4_F32
    else:
        MR = NDWS_MR_F64
        NR = NDWS_NR_F64
        MC = NDWS_MC_F64
        NC = NDWS_NC_F64
        half = NDWS_HALF_F64
        tail4 = False
    if i0 >= i1 or j0 >= j1:
        return
    # scratch layout (each part 64-byte aligned): A block | B panel | B edge panel | C tile
    align = 64 // sizeof(floating_t)
    Ap = scratch
    Bp = Ap + _round_up(P.a_elems, align)
    Be = Bp + _round_up(KC * P.nc_max, align)
    Ct = Be + _round_up(KC * NR, align)
    # Balanced M blocks: MC + 8 rows become two blocks of ~MC/2, not MC and a sliver of 8.
    nmb = (i1 - i0 + MC - 1) // MC
    mcb = _round_up((i1 - i0 + nmb - 1) // nmb, MR)
    # A slice that is one A block uses each B micro-panel once: reading a row-major B in place
    # saves a full copy of B (what dominates batch-32 shapes); anywhere else packing B pays.
    # A B packed beforehand (P.b_packed) is read where it lies.
    direct_b = cs_b == 1 and nmb == 1 and not P.b_packed
    for jc_b in range((j1 - j0 + NC - 1) // NC):
        jc = j0 + jc_b * NC
        nc = _min(NC, j1 - jc)
        for pc_b in range((k + KC - 1) // KC):
            pc = pc_b * KC
            kc = _min(KC, k - pc)
            last = pc + kc >= k
            load_c = pc > 0 or beta0 != 0
            beta = beta0 if pc == 0 else 1
            if P.b_packed:
                # this K block's panels, from the panel of column jc on (_pack_b_all's layout)
                Bp = <floating_t*>B + pc * _round_up(P.n, NR) + jc * kc
            elif direct_b:
                if nc % NR:
                    _pack_b(kc, nc % NR, NR, B + pc * rs_b + (jc + nc - nc % NR) * cs_b,
                            rs_b, cs_b, Be)
            else:
                _pack_b(kc, nc, NR, B + pc * rs_b + jc * cs_b, rs_b, cs_b, Bp)
            for ic_b in range((i1 - i0 + mcb - 1) // mcb):
                ic = i0 + ic_b * mcb
                mc = _min(mcb, i1 - ic)
                if P.keep_a:
                    # K blocks before this one hold P.kc * round_up(m, MR) values each
                    Ablk = Ap + pc * _round_up(P.m, MR) + (ic - i0) * kc
                    if not a_packed:
                        _pack_a(mc, kc, MR, tail4, A + ic * rs_a + pc * cs_a, rs_a, cs_a,
                                Ablk)
                else:
                    Ablk = Ap
                    _pack_a(mc, kc, MR, tail4, A + ic * rs_a + pc * cs_a, rs_a, cs_a, Ablk)
                for jr_b in range((nc + NR - 1) // NR):
                    jr = jr_b * NR
                    nr = _min(NR, nc - jr)
                    # the next packed micro-panel, fetched into L2 by this one's first A panel
                    # (_simd.h: NDWS_PREFETCH_B)
                    pf = NULL
                    if not direct_b:
                        bp = Bp + jr * kc
                        ldb = NR
                        if NDWS_PREFETCH_B and jr + NR < nc:
                            pf = bp + NR * kc
                    elif nr == NR:
                        bp = B + pc * rs_b + (jc + jr) * cs_b
                        ldb = rs_b
                    else:
                        bp = Be
                        ldb = NR
                    ir = 0
                    while ir < mc:
                        mr = _tile_rows(mc - ir, MR, tail4)
                        cij = C + (ic + ir) * rs_c + (jc + jr) * cs_c
                        if tail4 and mr == 4 and nr == NR and cs_c == 1:
                            _ukr4(kc, Ablk + ir * kc, bp, ldb, cij, rs_c, alpha, beta, load_c,
                                  pf if ir == 0 else NULL)
                        elif mr == MR and nr == NR and cs_c == 1:
                            _ukr(kc, Ablk + ir * kc, bp, ldb, cij, rs_c, alpha, beta, load_c,
                                 pf if ir == 0 else NULL)
                        elif mr == MR and nr == half and cs_c == 1:
                            # the half tile's rows are exactly its columns: no tile buffer
                            _ukr_edge(kc, Ablk + ir * kc, bp, ldb, cij, rs_c, alpha, beta,
                                      load_c, nr)
                        else:
                            # same micro-kernel on a tile buffer, so edge elements are
                            # computed exactly like interior ones
                            if load_c:
                                for r in range(mr):
                                    for j in range(nr):
                                        Ct[r * NR + j] = cij[r * rs_c + j * cs_c]
                            if tail4 and mr == 4:
                                _ukr4(kc, Ablk + ir * kc, bp, ldb, Ct, NR, alpha, beta, load_c,
                                      NULL)
                            else:
                                _ukr_edge(kc, Ablk + ir * kc, bp, ldb, Ct, NR, alpha, beta,
                                          load_c, nr)
                            for r in range(mr):
                                for j in range(nr):
                                    cij[r * rs_c + j * cs_c] = Ct[r * NR + j]
                        ir += mr
                    if last and P.ep != NULL:
                        # this mc x nr strip of C is final and still in cache
                        cij = C + ic * rs_c + (jc + jr) * cs_c
                        if P.ep_swap:
                            P.ep(P.ep_ctx, cij, jc + jr, ic, nr, mc, cs_c, rs_c)
                        else:
                            P.ep(P.ep_ctx, cij, ic, jc + jr, mc, nr, rs_c, cs_c)

# ------------------------------------------------------------------------------------------------
# Matrix-vector (n == 1; m == 1 arrives transposed): no packing, no K blocks, memory-bound.
# Row-contiguous A: one dot product per row (4 vector accumulators, a fixed reduction order).
# Column-contiguous A: axpy along A's columns, each element one fma chain over k. Slices are
# whole GEMV_ROWS-row chunks, so where the vector/scalar split falls never depends on the
# thread count.
cdef enum:
    GEMV_ROWS = 2048    # rows per chunk: y (8-16 KiB) stays in L1; a multiple of any VLEN


cdef inline float32_t _dot_f32(intp_t k, const float32_t* a, const float32_t* x) noexcept nogil:
    cdef ndws_vf32 s0 = ndws_vzero_f32(), s1 = ndws_vzero_f32()
    cdef ndws_vf32 s2 = ndws_vzero_f32(), s3 = ndws_vzero_f32()
    cdef float32_t lanes[16]
    cdef float32_t acc = 0
    cdef intp_t p = 0, V = NDWS_VLEN_F32
    cdef int l
    while p + 4 * V <= k:
        s0 = ndws_vfmadd_f32(ndws_vload_f32(a + p), ndws_vload_f32(x + p), s0)
        s1 = ndws_vfmadd_f32(ndws_vload_f32(a + p + V), ndws_vload_f32(x + p + V), s1)
        s2 = ndws_vfmadd_f32(ndws_vload_f32(a + p + 2 * V), ndws_vload_f32(x + p + 2 * V), s2)
        s3 = ndws_vfmadd_f32(ndws_vload_f32(a + p + 3 * V), ndws_vload_f32(x + p + 3 * V), s3)
        p += 4 * V
    while p + V <= k:
        s0 = ndws_vfmadd_f32(ndws_vload_f32(a + p), ndws_vload_f32(x + p), s0)
        p += V
    ndws_vstore_f32(lanes, ndws_vadd_f32(ndws_vadd_f32(s0, s1), ndws_vadd_f32(s2, s3)))
    for l in range(NDWS_VLEN_F32):
        acc = acc + lanes[l]
    while p < k:
        acc = acc + a[p] * x[p]
        p += 1
    return acc


cdef inline float64_t _dot_f64(intp_t k, const float64_t* a, const float64_t* x) noexcept nogil:
    cdef ndws_vf64 s0 = ndws_vzero_f64(), s1 = ndws_vzero_f64()
    cdef ndws_vf64 s2 = ndws_vzero_f64(), s3 = ndws_vzero_f64()
    cdef float64_t lanes[16]
    cdef float64_t acc = 0
    cdef intp_t p = 0, V = NDWS_VLEN_F64
    cdef int l
    while p + 4 * V <= k:
        s0 = ndws_vfmadd_f64(ndws_vload_f64(a + p), ndws_vload_f64(x + p), s0)
        s1 = ndws_vfmadd_f64(ndws_vload_f64(a + p + V), ndws_vload_f64(x + p + V), s1)
        s2 = ndws_vfmadd_f64(ndws_vload_f64(a + p + 2 * V), ndws_vload_f64(x + p + 2 * V), s2)
        s3 = ndws_vfmadd_f64(ndws_vload_f64(a + p + 3 * V), ndws_vload_f64(x + p + 3 * V), s3)
        p += 4 * V
    while p + V <= k:
        s0 = ndws_vfmadd_f64(ndws_vload_f64(a + p), ndws_vload_f64(x + p), s0)
        p += V
    ndws_vstore_f64(lanes, ndws_vadd_f64(ndws_vadd_f64(s0, s1), ndws_vadd_f64(s2, s3)))
    for l in range(NDWS_VLEN_F64):
        acc = acc + lanes[l]
    while p < k:
        acc = acc + a[p] * x[p]
        p += 1
    return acc


cdef inline void _axpy_rows_f32(intp_t k, const float32_t* a, intp_t cs_a,   # IN  rows x k
                                const float32_t* x,                          # IN  k
                                float32_t* y, intp_t rows) noexcept nogil:  # OUT rows
    # y := A @ x streaming A's contiguous columns (rows of the caller's B): per element the
    # same fma chain over p as a register-blocked version, without its strided walk
    cdef ndws_vf32 xv
    cdef intp_t p, r, vec = rows - rows % NDWS_VLEN_F32
    cdef const float32_t* ap
    memset(y, 0, rows * sizeof(float32_t))
    for p in range(k):
        xv = ndws_vset1_f32(x[p])
        ap = a + p * cs_a
        r = 0
        while r < vec:
            ndws_vstore_f32(y + r, ndws_vfmadd_f32(ndws_vload_f32(ap + r), xv,
                                                   ndws_vload_f32(y + r)))
            r += NDWS_VLEN_F32
        while r < rows:
            y[r] = ndws_fma_f32(ap[r], x[p], y[r])
            r += 1


cdef inline void _axpy_rows_f64(intp_t k, const float64_t* a, intp_t cs_a,   # IN  rows x k
                                const float64_t* x,                          # IN  k
                                float64_t* y, intp_t rows) noexcept nogil:  # OUT rows
    cdef ndws_vf64 xv
    cdef intp_t p, r, vec = rows - rows % NDWS_VLEN_F64
    cdef const float64_t* ap
    memset(y, 0, rows * sizeof(float64_t))
    for p in range(k):
        xv = ndws_vset1_f64(x[p])
        ap = a + p * cs_a
        r = 0
        while r < vec:
            ndws_vstore_f64(y + r, ndws_vfmadd_f64(ndws_vload_f64(ap + r), xv,
                                                   ndws_vload_f64(y + r)))
            r += NDWS_VLEN_F64
        while r < rows:
            y[r] = ndws_fma_f64(ap[r], x[p], y[r])
            r += 1


cdef void _gemv_slice(const Problem* P, intp_t i0, intp_t i1, floating_t* scratch
                      ) noexcept nogil:
    cdef const floating_t* A = <const floating_t*>P.a
    cdef const floating_t* x = <const floating_t*>P.b
    cdef floating_t* C = <floating_t*>P.c
    cdef intp_t rs_a = P.rs_a, cs_a = P.cs_a, incx = P.rs_b, rs_c = P.rs_c, k = P.k
    cdef floating_t alpha = <floating_t>P.alpha, beta = <floating_t>P.beta
    cdef floating_t* y
    cdef floating_t acc
    cdef intp_t i, p, r, rows
    cdef floating_t* xs = scratch
    if i0 >= i1:
        return
    # x contiguous (a copy in this thread's scratch when it is strided); y after it
    y = scratch + _round_up(k, 16)
    if incx == 1:
        xs = <floating_t*>x
    else:
        for p in range(k):
            xs[p] = x[p * incx]
    i = i0
    while i < i1:
        rows = _min(GEMV_ROWS, i1 - i)
        if cs_a == 1:
            for r in range(rows):
                if floating_t is float32_t:
                    y[r] = _dot_f32(k, A + (i + r) * rs_a, xs)
                else:
                    y[r] = _dot_f64(k, A + (i + r) * rs_a, xs)
        elif rs_a == 1:
            # chunks of GEMV_ROWS (a multiple of every vector length): only A's last rows
            # ever take the scalar tail, whatever the slices
            if floating_t is float32_t:
                _axpy_rows_f32(k, A + i, cs_a, xs, y, rows)
            else:
                _axpy_rows_f64(k, A + i, cs_a, xs, y, rows)
        else:
            for r in range(rows):
                acc = 0
                for p in range(k):
                    if floating_t is float32_t:
                        acc = ndws_fma_f32(A[(i + r) * rs_a + p * cs_a], xs[p], acc)
                    else:
                        acc = ndws_fma_f64(A[(i + r) * rs_a + p * cs_a], xs[p], acc)
                y[r] = acc
        for r in range(rows):
            if beta != 0:
                C[(i + r) * rs_c] = alpha * y[r] + beta * C[(i + r) * rs_c]
            else:
                C[(i + r) * rs_c] = alpha * y[r]
        i += rows
    if P.ep != NULL:
        if P.ep_swap:
            P.ep(P.ep_ctx, C + i0 * rs_c, 0, i0, 1, i1 - i0, P.cs_c, rs_c)
        else:
            P.ep(P.ep_ctx, C + i0 * rs_c, i0, 0, i1 - i0, 1, rs_c, P.cs_c)


cdef enum:
    CHUNKS_PER_THREAD = 4   # finer: a late or slowed thread's share is picked up by the others
    KEEP_A_BYTES = 8 << 20  # largest packed A a thread keeps for all its chunks


cdef void _run_chunks(void* ctx) noexcept nogil:
    # Runs on the caller and on each helper that joins: claim chunks until none is left.
    # A helper that cannot get its scratch does not claim anything; the caller got its own
    # before the job started, so every chunk is always done.
    cdef Problem* P = <Problem*>ctx
    cdef char* scratch = ndws_scratch_get(P.scratch_bytes)
    cdef long long c
    cdef intp_t t0, t1
    cdef bint a_packed = False
    if scratch == NULL:
        return
    while True:
        c = ndws_claim(&P.next)
        if c >= P.nchunks:
            return
        t0 = <intp_t>c * P.chunk
        t1 = _min(t0 + P.chunk, P.extent)
        if P.gemv:
            if P.is_f64:
                _gemv_slice(P, t0, t1, <float64_t*>scratch)
            else:
                _gemv_slice(P, t0, t1, <float32_t*>scratch)
        elif P.split_n:
            if P.is_f64:
                _slice(P, 0, P.m, t0, t1, <float64_t*>scratch, a_packed)
            else:
                _slice(P, 0, P.m, t0, t1, <float32_t*>scratch, a_packed)
            a_packed = P.keep_a
        else:
            if P.is_f64:
                _slice(P, t0, t1, 0, P.n, <float64_t*>scratch, False)
            else:
                _slice(P, t0, t1, 0, P.n, <float32_t*>scratch, False)


cdef inline void _cut(Problem* P, intp_t q, int t, int per_thread) noexcept nogil:
    # chunks of whole q-wide tiles along P.extent: one alone, else `per_thread` per thread
    cdef intp_t tiles = (P.extent + q - 1) // q
    cdef intp_t want = 1 if t <= 1 else _min(tiles, <intp_t>t * per_thread)
    P.chunk = (tiles + want - 1) // want * q
    P.nchunks = (P.extent + P.chunk - 1) // P.chunk
    P.next = 0


cdef int _launch(Problem* P, int t) noexcept nogil:
    # The caller reserves its scratch first: a failure leaves C untouched.
    if ndws_scratch_get(P.scratch_bytes) == NULL:
        return -1
    if t <= 1 or P.nchunks <= 1:
        _run_chunks(P)
    else:
        pool_run(_run_chunks, P, <int>_min(t, P.nchunks) - 1)
    return 0


cdef int _gemm(intp_t m, intp_t n, intp_t k, floating_t alpha,
               const floating_t* a, intp_t rs_a, intp_t cs_a,
               const floating_t* b, intp_t rs_b, intp_t cs_b, floating_t beta,
               floating_t* c, intp_t rs_c, intp_t cs_c, int nthreads,
               epilogue_fn ep, const void* ep_ctx) noexcept nogil:
    cdef Problem P
    cdef Problem* pp = &P
    cdef intp_t i, j, MR, NR, MC, KC, NC, nkb
    cdef int t
    cdef floating_t* cij
    if m <= 0 or n <= 0:
        return 0
    if k <= 0 or alpha == 0:
        # BLAS's rule: no product to add (alpha == 0 does not even read A and B)
        for i in range(m):
            for j in range(n):
                cij = c + i * rs_c + j * cs_c
                cij[0] = beta * cij[0] if beta != 0 else 0
        if ep != NULL:
            ep(ep_ctx, c, 0, 0, m, n, rs_c, cs_c)
        return 0
    if floating_t is float32_t:
        MR = NDWS_MR_F32
        NR = NDWS_NR_F32
        MC = NDWS_MC_F32
        KC = NDWS_KC_F32
        NC = NDWS_NC_F32
    else:
        MR = NDWS_MR_F64
        NR = NDWS_NR_F64
        MC = NDWS_MC_F64
        KC = NDWS_KC_F64
        NC = NDWS_NC_F64
    # Compute C.T = B.T @ A.T instead when C is column-major (its rows become contiguous) or
    # when that wastes less of the padded tiles (n = 10 in an MR x NR = 12 x 32 tile grid is
    # 69% padding, m = 10 as rows 17%). Each element is still the same fma chain over k
    # (products commute exactly), so the orientation never changes a bit of the result.
    P.ep_swap = False
    P.gemv = False
    P.b_packed = False
    if n == 1 and (cs_a == 1 or rs_a == 1 or m == 1):
        P.gemv = True
    elif m == 1 and (rs_b == 1 or cs_b == 1):
        P.gemv = True           # as c.T = B.T @ a.T
        P.ep_swap = True
    elif cs_c != 1 and rs_c == 1:
        P.ep_swap = True
    elif 4 * _round_up(n, MR) * _round_up(m, NR) < 3 * _round_up(m, MR) * _round_up(n, NR):
        P.ep_swap = True
    if P.ep_swap:
        m, n = n, m
        a, b = b, a
        rs_a, cs_a, rs_b, cs_b = cs_b, rs_b, cs_a, rs_a
        rs_c, cs_c = cs_c, rs_c
    P.m = m
    P.n = n
    P.k = k
    P.alpha = alpha
    P.beta = beta
    P.a = a
    P.rs_a = rs_a
    P.cs_a = cs_a
    P.b = b
    P.rs_b = rs_b
    P.cs_b = cs_b
    P.c = c
    P.rs_c = rs_c
    P.cs_c = cs_c
    P.ep = ep
    P.ep_ctx = ep_ctx
    P.is_f64 = floating_t is float64_t
    # K blocks of equal size (KC 256: 784 -> 3 x 262, not 3 x 256 + 16): depends on k only,
    # never on the thread count, so every thread count rounds the same partial sums.
    nkb = (k + KC - 1) // KC
    P.kc = (k + nkb - 1) // nkb
    # Chunks: whole tiles. Cutting N makes every chunk pack all of A, cutting M all of B: cut
    # the dimension whose cut duplicates less, when it has a tile per thread.
    t = nthreads if nthreads > 1 else 1
    if P.gemv:
        P.split_n = False
        P.extent = m
        P.scratch_bytes = <size_t>(_round_up(k, 16) + GEMV_ROWS + 64) * sizeof(floating_t)
        _cut(pp, GEMV_ROWS, t, CHUNKS_PER_THREAD)
        return _launch(pp, t)
    return _launch_tiles(pp, t, MR, NR, MC, NC)


cdef int _launch_tiles(Problem* P, int t, intp_t MR, intp_t NR, intp_t MC, intp_t NC
                       ) noexcept nogil:
    # The threads' chunks and scratch of a tiled product, then the product (see _gemm)
    cdef intp_t m = P.m, n = P.n, k = P.k, tiles_m, tiles_n, width
    cdef intp_t esize = 8 if P.is_f64 else 4
    tiles_m = (m + MR - 1) // MR
    tiles_n = (n + NR - 1) // NR
    if t == 1:
        P.split_n = True
    elif tiles_n >= t and (n >= m or tiles_m < t):
        P.split_n = True
    elif tiles_m >= t:
        P.split_n = False
    else:
        P.split_n = tiles_n >= tiles_m
    # Several chunks per thread when each thread can keep all of A packed (see _slice);
    # otherwise one per thread, so that A is not packed again for every chunk.
    P.keep_a = P.split_n and t > 1 and _round_up(m, MR) * k * esize <= KEEP_A_BYTES
    P.a_elems = _round_up(m, MR) * k if P.keep_a else MC * P.kc
    if P.split_n:
        P.extent = n
        _cut(P, NR, t, CHUNKS_PER_THREAD if P.keep_a else 1)
        width = P.chunk
    else:
        P.extent = m
        _cut(P, MR, t, 1)
        width = _round_up(n, NR)
    P.nc_max = _min(width, NC)
    P.scratch_bytes = <size_t>(_round_up(P.a_elems, 64) + _round_up(P.kc * P.nc_max, 64)
                               + _round_up(P.kc * NR, 64) + _round_up(MR * NR, 64) + 64) \
        * esize
    return _launch(P, t)


# ------------------------------------------------------------------------------------------------
# B packed once for many products (the recurrent weights of ndws.nn's time loops): the layout
# _slice packs B into, for the whole of B. K block after K block (the balanced KC of _gemm, so
# block pc starts at row pc and holds kc rows), each a row of ceil(n / NR) zero-padded panels of
# kc x NR values: block pc at pc * round_up(n, NR), its panel of column j at j * kc from there.

cdef inline intp_t _kc_of(intp_t k, intp_t KC) noexcept nogil:
    cdef intp_t nkb = (k + KC - 1) // KC
    return (k + nkb - 1) // nkb if nkb > 0 else 0


cdef void _pack_b_all(intp_t k, intp_t n, const floating_t* b, intp_t rs_b, intp_t cs_b,
                      floating_t* dst) noexcept nogil:
    cdef intp_t NR, kc, pc = 0, kcb
    if floating_t is float32_t:
        NR = NDWS_NR_F32
        kc = _kc_of(k, NDWS_KC_F32)
    else:
        NR = NDWS_NR_F64
        kc = _kc_of(k, NDWS_KC_F64)
    while pc < k:
        kcb = _min(kc, k - pc)
        _pack_b(kcb, n, NR, b + pc * rs_b, rs_b, cs_b, dst + pc * _round_up(n, NR))
        pc += kcb


cdef intp_t _packed_b_elems(intp_t k, intp_t n, int is_f64) noexcept nogil:
    return k * _round_up(n, NDWS_NR_F64 if is_f64 else NDWS_NR_F32)


cdef int _gemm_packed_b(intp_t m, intp_t n, intp_t k, floating_t alpha,
                        const floating_t* a, intp_t rs_a, intp_t cs_a, const floating_t* bp,
                        floating_t beta, floating_t* c, intp_t rs_c, intp_t cs_c,
                        int nthreads) noexcept nogil:
    # C := alpha*A @ B + beta*C with B from _pack_b_all: the tiled product of _gemm in C's own
    # orientation (B's panels fix it), its micro-kernel over the same values
    cdef Problem P
    cdef intp_t i, j, MR, NR, MC, KC, NC
    cdef floating_t* cij
    if m <= 0 or n <= 0:
        return 0
    if k <= 0 or alpha == 0:
        for i in range(m):
            for j in range(n):
                cij = c + i * rs_c + j * cs_c
                cij[0] = beta * cij[0] if beta != 0 else 0
        return 0
    if floating_t is float32_t:
        MR, NR, MC, KC, NC = NDWS_MR_F32, NDWS_NR_F32, NDWS_MC_F32, NDWS_KC_F32, NDWS_NC_F32
    else:
        MR, NR, MC, KC, NC = NDWS_MR_F64, NDWS_NR_F64, NDWS_MC_F64, NDWS_KC_F64, NDWS_NC_F64
    P.m, P.n, P.k = m, n, k
    P.alpha, P.beta = alpha, beta
    P.a, P.rs_a, P.cs_a = a, rs_a, cs_a
    P.b, P.rs_b, P.cs_b = bp, 0, 1
    P.c, P.rs_c, P.cs_c = c, rs_c, cs_c
    P.ep, P.ep_ctx, P.ep_swap, P.gemv = NULL, NULL, False, False
    P.b_packed = True
    P.is_f64 = floating_t is float64_t
    P.kc = _kc_of(k, KC)
    return _launch_tiles(&P, nthreads if nthreads > 1 else 1, MR, NR, MC, NC)


cdef void _spack_b(intp_t k, intp_t n, const float32_t* b, intp_t rs_b, intp_t cs_b,
                   float32_t* dst) noexcept nogil:
    _pack_b_all(k, n, b, rs_b, cs_b, dst)


cdef void _dpack_b(intp_t k, intp_t n, const float64_t* b, intp_t rs_b, intp_t cs_b,
                   float64_t* dst) noexcept nogil:
    _pack_b_all(k, n, b, rs_b, cs_b, dst)


cdef int _sgemm_pb(intp_t m, intp_t n, intp_t k, float32_t alpha,
                   const float32_t* a, intp_t rs_a, intp_t cs_a, const float32_t* bp,
                   float32_t beta, float32_t* c, intp_t rs_c, intp_t cs_c,
                   int nthreads) noexcept nogil:
    return _gemm_packed_b(m, n, k, alpha, a, rs_a, cs_a, bp, beta, c, rs_c, cs_c, nthreads)


cdef int _dgemm_pb(intp_t m, intp_t n, intp_t k, float64_t alpha,
                   const float64_t* a, intp_t rs_a, intp_t cs_a, const float64_t* bp,
                   float64_t beta, float64_t* c, intp_t rs_c, intp_t cs_c,
                   int nthreads) noexcept nogil:
    return _gemm_packed_b(m, n, k, alpha, a, rs_a, cs_a, bp, beta, c, rs_c, cs_c, nthreads)


cdef int _sgemm(intp_t m, intp_t n, intp_t k, float32_t alpha,
                const float32_t* a, intp_t rs_a, intp_t cs_a,
                const float32_t* b, intp_t rs_b, intp_t cs_b, float32_t beta,
                float32_t* c, intp_t rs_c, intp_t cs_c, int nthreads,
                epilogue_fn ep, const void* ep_ctx) noexcept nogil:
    return _gemm(m, n, k, alpha, a, rs_a, cs_a, b, rs_b, cs_b, beta, c, rs_c, cs_c, nthreads,
                 ep, ep_ctx)


cdef int _dgemm(intp_t m, intp_t n, intp_t k, float64_t alpha,
                const float64_t* a, intp_t rs_a, intp_t cs_a,
                const float64_t* b, intp_t rs_b, intp_t cs_b, float64_t beta,
                float64_t* c, intp_t rs_c, intp_t cs_c, int nthreads,
                epilogue_fn ep, const void* ep_ctx) noexcept nogil:
    return _gemm(m, n, k, alpha, a, rs_a, cs_a, b, rs_b, cs_b, beta, c, rs_c, cs_c, nthreads,
                 ep, ep_ctx)


cdef long long _scratch_allocations() noexcept nogil:
    return ndws_scratch_allocations()


cdef long long _scratch_buffers() noexcept nogil:
    return ndws_scratch_buffers()


cdef GemmTable _TABLE
_TABLE.isa = NDWS_ISA
_TABLE.mr_f32 = NDWS_MR_F32
_TABLE.nr_f32 = NDWS_NR_F32
_TABLE.mr_f64 = NDWS_MR_F64
_TABLE.nr_f64 = NDWS_NR_F64
_TABLE.kc_f32 = NDWS_KC_F32
_TABLE.mc_f32 = NDWS_MC_F32
_TABLE.nc_f32 = NDWS_NC_F32
_TABLE.kc_f64 = NDWS_KC_F64
_TABLE.mc_f64 = NDWS_MC_F64
_TABLE.nc_f64 = NDWS_NC_F64
_TABLE.sgemm = _sgemm
_TABLE.dgemm = _dgemm
_TABLE.scratch_allocations = _scratch_allocations
_TABLE.scratch_buffers = _scratch_buffers
_TABLE.ukr_ind_f32 = _ukr_ind_f32
_TABLE.ukr_ind_f64 = _ukr_ind_f64
_TABLE.tpose_f32 = _tpose_f32
_TABLE.tpose_f64 = _tpose_f64
_TABLE.pack_b_f32 = _spack_b
_TABLE.pack_b_f64 = _dpack_b
_TABLE.packed_b_elems = _packed_b_elems
_TABLE.sgemm_packed_b = _sgemm_pb
_TABLE.dgemm_packed_b = _dgemm_pb


def table():
    """This module's GemmTable, as a PyCapsule named "ndws.GemmTable"."""
    return PyCapsule_New(&_TABLE, b"ndws.GemmTable", NULL)
