# C-level API of ndws.nn._conv_few: the forward and the weight gradient of convolutions with
# few input channels (C_in <= FEW_CHANNELS), for ndws.nn._conv2d.
from ndws._typedefs cimport intp_t
from ndws.nn._conv cimport Geom

cdef enum:
    FEW_CHANNELS = 4            # input channels up to this take this weight gradient
    FEW_PIECE_BYTES = 1 << 18   # a piece's planes (dY's and the taps') stay in a core's L2
    FEW_PIECE_POSITIONS = 256   # pieces cut smaller for more groups keep this many positions
    FEW_GROUPS = 8              # accumulators: the pieces go to at most this many groups

ctypedef struct FewPlan:
    intp_t K, Kp, COp           # taps, and taps and output channels rounded up to blocks of 4
    intp_t R, tpi, npieces      # output rows per piece, pieces per image, pieces
    intp_t Pp                   # a piece's plane: R*OW positions rounded up to 16 lanes
    intp_t piece_elems          # (COp + Kp) planes
    intp_t nab, nbb             # blocks of output channels, of taps
    intp_t G                    # groups of consecutive pieces, each with its own accumulator
    intp_t acc_elems            # an accumulator: nab*nbb blocks of 4 x 4 pairs x 16 lanes
    intp_t shared_bytes         # the G accumulators
    intp_t Wp                   # an input row, padded, as the piece's taps read it
    intp_t thread_bytes         # a thread's copy of one piece's planes, and a padded row

ctypedef struct FewJob:
    Geom g
    FewPlan p
    int f64
    const char* x
    intp_t xs[4]
    const char* dy
    intp_t ds[4]
    bint dy_direct              # dY's planes read where they lie (not copied)
    char* acc                   # G accumulators of acc_elems
    char* thr                   # per thread: a piece's planes (thread_bytes)
    long long next_group, next_slot

# Whether convolution g's weight gradient takes this path.
cdef bint _few_ok(const Geom* g) noexcept nogil
cdef void _few_plan(const Geom* g, intp_t item, FewPlan* P) noexcept nogil
# dW (logical strides dws) from x and dY (the job's pointers and strides set), the scratch carved
# from `shared` (nbytes of it: P.shared_bytes and P.thread_bytes per thread; at least one), on
# up to nt threads (as many as the scratch holds copies for).
cdef void _few_run(FewJob* j, char* shared, intp_t nbytes, char* dw, const intp_t* dws, int nt
                   ) noexcept nogil


ctypedef struct FewFwdPlan:
    intp_t K, ncb               # taps, blocks of 8 output channels
    intp_t R, tpi, ntasks       # output rows per task, tasks per image, tasks
    intp_t Ws, Hs, ps           # a task's padded rows: width, rows, plane stride
    intp_t shared_bytes         # packed weights (ncb blocks of K x 8) and tap offsets
    intp_t thread_bytes         # a task's padded rows

ctypedef struct FewFwdJob:
    Geom g
    FewFwdPlan p
    int f64, act
    double alpha
    const char* x
    intp_t xs[4]
    char* y
    intp_t ys[4]                # ys[3] == 1: output rows are runs
    const char* bias            # NULL: none
    intp_t bs
    char* wp                    # packed weights
    intp_t* toff                # tap offsets in a padded copy
    char* thr
    intp_t thread_bytes
    long long next_task, next_slot

# Whether conv2d's forward of g takes this path (with output rows of unit stride).
cdef bint _few_fwd_ok(const Geom* g) noexcept nogil
cdef void _few_fwd_plan(const Geom* g, intp_t item, FewFwdPlan* P) noexcept nogil
# Y of the job's geometry from x, the weights w (logical strides wst) packed into `shared`, on nt
# threads (each with thread_bytes of the scratch after the shared part).
cdef void _few_fwd_run(FewFwdJob* j, const char* w, const intp_t* wst, char* shared, int nt
                       ) noexcept nogil
