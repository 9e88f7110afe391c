# C-level API of ndws.nn._conv_gemm: the dense convolution's passes on the GEMM build's indirect
# micro-kernel, their plans (what a call's scratch and tasks are) and jobs, for ndws.nn._conv2d.
from ndws._gemm_types cimport GemmTable
from ndws._typedefs cimport floating_t, intp_t
from ndws.nn._conv cimport Geom
from ndws.nn._winograd cimport WinoPlan

cdef enum:
    FWD_DIRECT = 0      # panels of NR virtual positions read in place (stride 1)
    FWD_PACKED = 1      # panels of NR real positions packed from the padded rows
    FWD_POS = 2         # 1x1 stride 1: tiles of MR positions x NR channels, x read in place
    TASK_BYTES = 1 << 20    # a task's padded rows stay within this (an L2 cache)

ctypedef struct FwdPlan:
    int mode
    intp_t MR, NR, K, nap        # register tile, taps, A panels (FWD_POS: B panels of channels)
    intp_t kc, nkb               # K blocks: nkb blocks of (at most) kc taps
    intp_t R, tpi, ntasks        # output rows per task, tasks per image, tasks
    intp_t Hs, Ws, ps            # padded rows (at most), padded width, plane stride
    intp_t pad_elems, panel_elems
    intp_t shared_bytes, thread_bytes

ctypedef struct FwdJob:
    Geom g
    FwdPlan p
    bint wino                   # run as Winograd F(2x2, 3x3) (ndws.nn._winograd) with plan wp
    WinoPlan wp
    const GemmTable* T
    int f64, act
    double alpha
    const char* x
    intp_t xs[4]
    const char* x_hi            # end of x's bytes: direct reads stay below it
    char* y
    intp_t ys[4]
    const char* bias            # NULL: none
    intp_t bs
    const char* Ap              # packed weights
    const intp_t* boff_pad      # tap offsets in a padded copy
    const intp_t* boff_x        # tap offsets in x itself, NULL when x cannot be read in place
    intp_t boff_x_max
    char* thr                   # per-thread parts of the scratch
    long long next_task, next_slot

# dst[c*ps + i*Ws + j] := x[c, row0 + i, col0 + j] (0 outside the image; x's element strides
# xs) for i < rows, j < Ws; rows rows..Hmax of each plane and up to `total` elements zeroed.
cdef void _pad_copy(const floating_t* xn, const intp_t* xs, intp_t C, intp_t H, intp_t W,
                    intp_t row0, intp_t rows, intp_t col0, intp_t Ws, intp_t ps, intp_t Hmax,
                    floating_t* dst, intp_t total) noexcept nogil

# The forward plan of convolution g on an MR x NR tile with K blocks of at most KC taps.
cdef void _fwd_plan(const Geom* g, intp_t MR, intp_t NR, intp_t KC, intp_t item, FwdPlan* P
                    ) noexcept nogil
# Carve the shared scratch, pack the weights (logical strides wst), fill the offset tables.
cdef void _fwd_prepare(FwdJob* j, const char* w, const intp_t* wst, char* shared
                       ) noexcept nogil
# Run the forward's tasks on nt threads (after _fwd_prepare).
cdef void _fwd_run(FwdJob* j, int nt) noexcept nogil

cdef enum:
    CHUNK_BYTES = 2 << 20       # a chunk's padded images stay within this
    CHUNK_POSITIONS = 2048      # positions per chunk (at least one image)

ctypedef struct WgPlan:
    bint kwmode                 # tap groups are kernel-column runs (few channels)
    bint rowmode                # C tiles are MR output channels x NR row taps (few outputs)
    intp_t MR, NR, CIp, KWr, Hs, Ws, ps, img, P, Bc, COp, ncb, ngroups, nkwb, ncblk
    intp_t ngr                  # rowmode: tap groups of NR (kernel column, channel) per row
    intp_t nchunks, ntiles
    intp_t set_bytes            # one chunk's padded images and dY panels
    intp_t shared_bytes         # with one such set (three let the copies of the next chunk
                                # run beside the products: shared_bytes + 2 * set_bytes)

ctypedef struct WgJob:
    Geom g
    WgPlan w
    const GemmTable* T
    int f64
    const char* x
    intp_t xs[4]
    const char* dy
    intp_t ds[4]
    bint inplace                # A reads x itself (no padding, whole channel groups)
    intp_t cs, rs, es, imgs     # A's channel, row, element and image strides (elements)
    char* pad[3]                # chunk images, padded (Bc * img), per set
    char* Bt[3]                 # dY^T panels: ncb x (Bc*P) x NR, per set
    intp_t* posoff              # offset of each chunk position in an image set (or in x)
    intp_t* dyoff               # rowmode: offset of each chunk position in dY
    char* acc                   # ngroups*MR x COp accumulators
    # The one pool run: step s holds cp copy slots of chunk s, then ct product slots of chunk
    # s - L (slots past a chunk's tasks do nothing); chunk s uses set s % nsets. A task waits
    # for what it reads: a chunk's copies, a tile's previous chunk, a set's previous products.
    intp_t nsets, L, cp, ct, nchunks
    long long* copies_done      # per chunk: copy tasks finished
    long long* tiles_done       # per chunk: product tasks finished
    long long* tile_next        # per tile: chunks it has summed
    long long ntasks, next

cdef void _wg_plan(const Geom* g, intp_t MR, intp_t NR, intp_t item, WgPlan* W) noexcept nogil
# dW (logical strides dws) of j's geometry from x and dY, the scratch carved from `shared`
# (nbytes of it: with three sets the copies of a chunk overlap the previous chunk's products).
cdef void _wg_run(WgJob* j, char* shared, intp_t nbytes, char* dw, const intp_t* dws, int nt
                  ) noexcept nogil

ctypedef struct DxJob:
    Geom g
    const GemmTable* T
    int f64, act
    double alpha
    intp_t MR, NR, K, ntp
    const char* dy
    intp_t ds[4]
    char* dx
    intp_t xs[4]
    const char* At              # ntp panels of CO x MR: At[tp][co*MR + r] = W[co, tp*MR + r]
    const char* bias            # conv_transpose2d's bias, added after the scatter
    intp_t bs
    char* thr
    intp_t thread_bytes
    long long next_task, next_slot

# Scratch bytes of the col2im input gradient: shared (the packed weights), per thread.
cdef void _dx_plan(const Geom* g, intp_t MR, intp_t NR, intp_t item, intp_t* shared,
                   intp_t* thread) noexcept nogil
# dX := col2im(dY times the transposed weights), plus conv_transpose2d's bias and activation.
cdef void _dx_run(DxJob* j, const char* w, const intp_t* wst, char* shared, int nt
                  ) noexcept nogil

# The register tile (MR, NR) of the GEMM build for the dtype; RuntimeError if it is larger than
# the tile buffers here.
cdef int _tile_of(const GemmTable* T, bint f64, intp_t* MR, intp_t* NR) except -1
