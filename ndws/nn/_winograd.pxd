# C-level API of ndws.nn._winograd: Winograd F(2x2, 3x3) for 3x3 stride-1 convolutions, the
# plan and job that ndws.nn._conv2d fills and runs.
from ndws._gemm_types cimport GemmTable
from ndws._typedefs cimport intp_t
from ndws.nn._conv cimport Geom

ctypedef struct WinoPlan:
    intp_t MR, NR, nap, TH, TW      # tile grid: TH x TW tiles of 2x2 outputs
    intp_t R                        # tile rows per task
    intp_t tpi, ntasks
    intp_t Hs, Ws, ps               # padded rows (at most), width, plane stride
    intp_t vs                       # stride of V's xi planes (C*NR, padded off 4 KiB multiples)
    intp_t pad_elems, v_elems, m_elems
    intp_t shared_bytes, thread_bytes


ctypedef struct WinoJob:
    Geom g
    WinoPlan p
    const GemmTable* T
    int f64, act
    double alpha
    const char* x
    intp_t xs[4]
    char* y
    intp_t ys[4]
    const char* bias
    intp_t bs
    const char* U                   # 16 x nap panels of C x MR
    char* thr
    long long next_task, next_slot


# 3x3, stride 1, no dilation, and enough channels (C >= 16, CO >= MR) for full tiles.
cdef bint _wino_ok(const Geom* g, intp_t MR) noexcept nogil
# The plan (tasks, scratch bytes) of a call on an MR x NR register tile.
cdef void _wino_plan(const Geom* g, intp_t MR, intp_t NR, intp_t item, WinoPlan* P
                     ) noexcept nogil
# Transform the weights (logical strides wst) into `shared`, then run the tasks on nt threads.
cdef void _wino_run(WinoJob* j, const char* w, const intp_t* wst, char* shared, int nt
                    ) noexcept nogil
