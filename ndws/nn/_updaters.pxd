# C-level API of ndws' updater loops (ndws/nn/_upd_loops.h, built per instruction set), for
# other Cython modules to `cimport`: ndws.nn._updaters runs them over flat arrays, the network's
# compiled iteration (ndws.nn._iteration) over finished tiles of a weight gradient. Serial: the
# caller owns the parallelism and holds no GIL.
from ndws._typedefs cimport float32_t, float64_t, intp_t

cdef extern from "_upd_loops.h" nogil:
    enum:
        UPD_SGD "NDWS_UPD_SGD"
        UPD_MOMENTUM "NDWS_UPD_MOMENTUM"
        UPD_ADAM "NDWS_UPD_ADAM"
        UPD_RMSPROP "NDWS_UPD_RMSPROP"
        UPD_ADAGRAD "NDWS_UPD_ADAGRAD"
    # one update's kind and coefficients (see the header)
    ctypedef struct Hyper "ndws_hyper":
        int kind
        bint nesterov
        double lr, mu, b1, b2, eps, wd, step_size, bc2_sqrt
    # the update of an m x n block: P, S, V rows ldp apart, G rows ldg apart (S, V may be NULL)
    void ndws_upd_f32(const Hyper* h, float32_t* P, const float32_t* G, float32_t* S,
                      float32_t* V, intp_t m, intp_t n, intp_t ldp, intp_t ldg)
    void ndws_upd_f64(const Hyper* h, float64_t* P, const float64_t* G, float64_t* S,
                      float64_t* V, intp_t m, intp_t n, intp_t ldp, intp_t ldg)
