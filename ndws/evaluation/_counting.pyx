# Counting kernels of `ndws.evaluation.Evaluation` (DL4J's Evaluation.eval): one pass over a
# batch's memory adds argmax(labels) x prediction pairs into a confusion matrix, with top-N
# counts and the NaN census, and allocates nothing the size of the batch.
#
# Layout every kernel sees: a 4-D strided block (n0, n1, n2, C) whose last axis holds the
# classes and whose first three axes index the rows (rank 2 input is (n, 1, 1, C), time series
# (b, t, 1, C), per-pixel (b, h, w, C)); the Python layer makes those views without copying.
# Strides are in bytes and may be anything NumPy or an NDArray allows (negative, zero).
cimport cython
cimport numpy as cnp
from libc.string cimport memset

import numpy as np

from ndws._threads cimport GRAIN_EVAL_ROWS, run_tasks, thread_limit, threads_for
from ndws._typedefs cimport float32_t, float64_t, int32_t, int64_t, intp_t, uint8_t

cnp.import_array()

ctypedef fused pred_t:
    float32_t
    float64_t

ctypedef fused label_t:
    float32_t
    float64_t
    int32_t
    int64_t
    uint8_t

# Mask element kinds (read once per row, so a switch costs nothing next to the C columns).
cdef enum:
    MASK_NONE = 0
    MASK_U8 = 1
    MASK_F32 = 2
    MASK_F64 = 3
    MASK_I32 = 4
    MASK_I64 = 5

# Per-thread scratch row: the C*C confusion counts, then these counters. The row length is
# rounded up to 8 int64 (a 64-byte cache line) so no two threads write the same line.
cdef enum:
    SLOT_ROWS = 0
    SLOT_NANS = 1
    SLOT_TOPN_CORRECT = 2
    SLOT_TOPN_TOTAL = 3
    N_SLOTS = 4

# Above this many confusion cells one thread counts straight into its scratch: per-thread
# copies of a large matrix would cost more to clear and reduce than the batch does to count.
cdef enum:
    MAX_CELLS_PARALLEL = 65536


cdef struct Block:
    char* data
    intp_t n0, n1, n2, nc
    intp_t s0, s1, s2, sc


cdef struct Params:
    int mode            # 0: argmax, 1: binary threshold on column 1 (C == 2), 2: argmax(p*cost)
    double threshold    # modes 1 and single column
    const double* cost  # mode 2: C weights
    int top_n           # > 1: count top-N; ignored for a single column
    int mask_kind
    char* mask
    intp_t m0, m1, m2   # mask byte strides over (n0, n1, n2)


def scratch_len(intp_t n_classes):
    """Length of one thread's scratch row for `n_classes` classes (cache-line multiple)."""
    cdef intp_t cells = (n_classes if n_classes > 1 else 2)
    cells = cells * cells + N_SLOTS
    return (cells + 7) & ~(<intp_t>7)


def max_threads(intp_t n_classes):
    """How many scratch rows `count` may need for `n_classes` (1 for big matrices)."""
    cdef intp_t cells = n_classes * n_classes
    if cells > MAX_CELLS_PARALLEL:
        return 1
    return max(1, thread_limit())


cdef inline bint _mask_on(const Params* p, intp_t i0, intp_t i1, intp_t i2) noexcept nogil:
    cdef char* m
    if p.mask_kind == MASK_NONE:
        return True
    m = p.mask + i0 * p.m0 + i1 * p.m1 + i2 * p.m2
    if p.mask_kind == MASK_U8:
        return (<uint8_t*>m)[0] != 0
    if p.mask_kind == MASK_F32:
        return (<float32_t*>m)[0] != 0
    if p.mask_kind == MASK_F64:
        return (<float64_t*>m)[0] != 0
    if p.mask_kind == MASK_I32:
        return (<int32_t*>m)[0] != 0
    return (<int64_t*>m)[0] != 0



cdef inline intp_t _argmax(const char* row, intp_t C, intp_t stride, label_t* tag) noexcept nogil:
    # First index of the maximum (ND4J's argmax). Plain branches: measured faster here than
    # branch-free selects (a running max over random scores changes ~ln(C) times a row, and
    # the select chain is latency bound on every column).
    cdef label_t best = (<const label_t*>row)[0], v
    cdef intp_t ib = 0, c
    for c in range(1, C):
        v = (<const label_t*>(row + c * stride))[0]
        if v > best:
            best = v
            ib = c
    return ib


cdef inline intp_t _argmax_nan(const char* row, intp_t C, intp_t stride, pred_t* tag,
                               int64_t* nans) noexcept nogil:
    # `_argmax` for predictions, also counting NaNs (a batch holding any is rejected)
    cdef pred_t best = (<const pred_t*>row)[0], v
    cdef intp_t ib = 0, c
    cdef int64_t nn = best != best
    for c in range(1, C):
        v = (<const pred_t*>(row + c * stride))[0]
        if v != v:
            nn += 1
        elif v > best:
            best = v
            ib = c
    nans[0] += nn
    return ib


@cython.boundscheck(False)
@cython.wraparound(False)
cdef void _count_rows(const Block* P, const Block* L, const Params* prm, intp_t r0, intp_t r1,
                      int64_t* out, pred_t* ptag, label_t* ltag) noexcept nogil:
    # out (C*C + N_SLOTS int64) += the rows r0..r1 of the flattened (n0, n1, n2) row space.
    # confusion[actual, predicted] := count, actual = argmax(label row) (first maximum, as
    # ND4J's argmax), predicted per prm.mode; the NaN census covers unmasked rows only.
    cdef intp_t C = P.nc, cells, r, i0, i1, i2, c, actual, predicted, above
    cdef intp_t ps = P.sc, ls = L.sc
    cdef char* prow
    cdef char* lrow
    cdef pred_t v, best, ptrue
    cdef double dv, dbest
    cdef int64_t rows = 0, nans = 0, top_ok = 0, top_all = 0
    cdef bint single = C == 1
    cells = 4 if single else C * C
    if r0 >= r1:
        return
    # walk (i0, i1, i2) incrementally from r0: one division per call, none per row
    i2 = r0 % P.n2
    i1 = (r0 // P.n2) % P.n1
    i0 = r0 // (P.n2 * P.n1)
    for r in range(r0, r1):
        if _mask_on(prm, i0, i1, i2):
            prow = P.data + i0 * P.s0 + i1 * P.s1 + i2 * P.s2
            lrow = L.data + i0 * L.s0 + i1 * L.s1 + i2 * L.s2
            rows += 1
            if single:
                v = (<pred_t*>prow)[0]
                if v != v:
                    nans += 1
                else:
                    # labels are 0/1 (DL4J multiplies by them); 0.5 splits them robustly
                    actual = 1 if <double>(<label_t*>lrow)[0] >= 0.5 else 0
                    predicted = 1 if v > <pred_t>prm.threshold else 0
                    out[actual * 2 + predicted] += 1
            else:
                actual = _argmax(lrow, C, ls, ltag)
                if prm.mode == 2:
                    predicted = 0
                    best = (<pred_t*>prow)[0]
                    nans += best != best
                    dbest = <double>best * prm.cost[0]
                    for c in range(1, C):
                        v = (<pred_t*>(prow + c * ps))[0]
                        nans += v != v
                        dv = <double>v * prm.cost[c]
                        predicted = c if dv > dbest else predicted
                        dbest = dv if dv > dbest else dbest
                else:
                    predicted = _argmax_nan(prow, C, ps, ptag, &nans)
                    if prm.mode == 1:
                        # the threshold compares in the predictions' dtype, as ND4J's gt() does
                        predicted = 1 if (<pred_t*>(prow + ps))[0] > <pred_t>prm.threshold else 0
                out[actual * C + predicted] += 1
                if prm.top_n > 1:
                    # correct when fewer than N probabilities are strictly above the true one
                    ptrue = (<pred_t*>(prow + actual * ps))[0]
                    above = 0
                    for c in range(C):
                        above += (<pred_t*>(prow + c * ps))[0] > ptrue
                    if above < prm.top_n:
                        top_ok += 1
                    top_all += 1
        i2 += 1
        if i2 == P.n2:
            i2 = 0
            i1 += 1
            if i1 == P.n1:
                i1 = 0
                i0 += 1
    out[cells + SLOT_ROWS] += rows
    out[cells + SLOT_NANS] += nans
    out[cells + SLOT_TOPN_CORRECT] += top_ok
    out[cells + SLOT_TOPN_TOTAL] += top_all


ctypedef struct CountJob:
    const Block* P
    const Block* L
    const Params* prm
    int64_t* scratch
    intp_t row_len, n
    int nthreads, pk, lk          # the predictions' and labels' dtypes (_label_kind's codes)


cdef void _count_labels(const CountJob* j, intp_t r0, intp_t r1, int64_t* s,
                       pred_t* ptag) noexcept nogil:
    # rows [r0, r1) counted by the specialisation of the labels' dtype (the predictions' is
    # `ptag`'s)
    if j.lk == 0:
        _count_rows(j.P, j.L, j.prm, r0, r1, s, ptag, <float32_t*>NULL)
    elif j.lk == 1:
        _count_rows(j.P, j.L, j.prm, r0, r1, s, ptag, <float64_t*>NULL)
    elif j.lk == 2:
        _count_rows(j.P, j.L, j.prm, r0, r1, s, ptag, <int32_t*>NULL)
    elif j.lk == 3:
        _count_rows(j.P, j.L, j.prm, r0, r1, s, ptag, <int64_t*>NULL)
    else:
        _count_rows(j.P, j.L, j.prm, r0, r1, s, ptag, <uint8_t*>NULL)


cdef void _count_task(void* ctx, Py_ssize_t t) noexcept nogil:
    cdef const CountJob* j = <const CountJob*>ctx
    cdef intp_t r0 = t * j.n // j.nthreads, r1 = (t + 1) * j.n // j.nthreads
    if j.pk == 0:
        _count_labels(j, r0, r1, j.scratch + t * j.row_len, <float32_t*>NULL)
    else:
        _count_labels(j, r0, r1, j.scratch + t * j.row_len, <float64_t*>NULL)


cdef void _count(const Block* P, const Block* L, const Params* prm, int64_t* scratch,
                 intp_t row_len, int nthreads, int pk, int lk) noexcept nogil:
    # Block t of nthreads counts a fixed contiguous range of rows into its own scratch row, so
    # the result never depends on which thread ran it. The blocks are tasks on ndws' helper
    # pool (docs/architecture.md, "Kernel threads"), as every kernel's are.
    cdef CountJob j
    j.P, j.L, j.prm, j.scratch, j.row_len = P, L, prm, scratch, row_len
    j.n = P.n0 * P.n1 * P.n2
    j.nthreads, j.pk, j.lk = nthreads, pk, lk
    run_tasks(_count_task, &j, nthreads, nthreads)


cdef int _label_kind(int typenum) except -1:
    if typenum == cnp.NPY_FLOAT32:
        return 0
    if typenum == cnp.NPY_FLOAT64:
        return 1
    if typenum == cnp.NPY_INT32:
        return 2
    if typenum == cnp.NPY_INT64:
        return 3
    if typenum == cnp.NPY_UINT8:
        return 4
    raise TypeError(f"labels: unsupported dtype code {typenum}")


cdef int _mask_kind(int typenum) except -1:
    if typenum == cnp.NPY_UINT8 or typenum == cnp.NPY_BOOL or typenum == cnp.NPY_INT8:
        return MASK_U8
    if typenum == cnp.NPY_FLOAT32:
        return MASK_F32
    if typenum == cnp.NPY_FLOAT64:
        return MASK_F64
    if typenum == cnp.NPY_INT32:
        return MASK_I32
    if typenum == cnp.NPY_INT64:
        return MASK_I64
    raise TypeError(f"mask: unsupported dtype code {typenum}")


cdef void _block(cnp.ndarray a, Block* b) noexcept:
    cdef cnp.npy_intp* d = cnp.PyArray_DIMS(a)
    cdef cnp.npy_intp* s = cnp.PyArray_STRIDES(a)
    b.data = <char*>cnp.PyArray_DATA(a)
    b.n0 = d[0]; b.n1 = d[1]; b.n2 = d[2]; b.nc = d[3]
    b.s0 = s[0]; b.s1 = s[1]; b.s2 = s[2]; b.sc = s[3]


def count(cnp.ndarray predictions, cnp.ndarray labels, object mask, int mode, double threshold,
          object cost, int top_n, int64_t[:, ::1] scratch):
    """Count one batch into `scratch`: confusion[actual, predicted] and the counters.

    Parameters
    ----------
    predictions : (n0, n1, n2, n_classes) ndarray of float32 or float64, any strides
    labels : (n0, n1, n2, n_classes) ndarray of float32, float64, int32, int64 or uint8
        One-hot rows (or a single 0/1 column); read in place.
    mask : (n0, n1, n2) ndarray or None
        Rows whose mask is 0 are skipped (any of bool, int8/uint8, int32/int64, float32/64).
    mode : int
        0 argmax, 1 ``p[:, 1] > threshold`` (two columns), 2 ``argmax(p * cost)``.
    threshold : float
        Decision threshold for mode 1 and for a single column.
    cost : (n_classes,) ndarray of float64 or None
    top_n : int
    scratch : (n_threads, scratch_len(n_classes)) ndarray of int64
        Zeroed here; thread t's counts land in row t. Sum the rows to get the batch.

    Returns
    -------
    int
        How many scratch rows were used.
    """
    cdef Block P, L
    cdef Params prm
    cdef intp_t C, n, row_len = scratch.shape[1]
    cdef int nt, pk, lk
    cdef int64_t* out = &scratch[0, 0]
    cdef const double[::1] cost_v
    if predictions.ndim != 4 or labels.ndim != 4:
        raise ValueError("count: predictions and labels must be 4-D row views")
    _block(predictions, &P)
    _block(labels, &L)
    if (P.n0, P.n1, P.n2, P.nc) != (L.n0, L.n1, L.n2, L.nc):
        raise ValueError("count: predictions and labels differ in shape")
    C = P.nc
    if row_len < scratch_len(C):
        raise ValueError("count: scratch rows too short")
    prm.mode = mode
    prm.threshold = threshold
    prm.top_n = top_n
    prm.cost = NULL
    if mode == 2:
        cost_v = cost
        if cost_v.shape[0] != C:
            raise ValueError("count: cost must have one weight per class")
        prm.cost = &cost_v[0]
    elif mode == 1 and C != 2:
        raise ValueError("count: threshold mode needs exactly 2 columns")
    prm.mask_kind = MASK_NONE
    prm.mask = NULL
    prm.m0 = prm.m1 = prm.m2 = 0
    if mask is not None:
        if (<cnp.ndarray>mask).ndim != 3 or tuple(mask.shape) != (P.n0, P.n1, P.n2):
            raise ValueError("count: mask must be a (n0, n1, n2) view")
        prm.mask_kind = _mask_kind(cnp.PyArray_TYPE(<cnp.ndarray>mask))
        prm.mask = <char*>cnp.PyArray_DATA(<cnp.ndarray>mask)
        prm.m0 = cnp.PyArray_STRIDES(<cnp.ndarray>mask)[0]
        prm.m1 = cnp.PyArray_STRIDES(<cnp.ndarray>mask)[1]
        prm.m2 = cnp.PyArray_STRIDES(<cnp.ndarray>mask)[2]
    n = P.n0 * P.n1 * P.n2
    nt = threads_for(n, GRAIN_EVAL_ROWS) if C * C <= MAX_CELLS_PARALLEL else 1
    if nt > scratch.shape[0]:
        nt = scratch.shape[0]
    if nt < 1:
        nt = 1
    memset(out, 0, nt * row_len * sizeof(int64_t))
    if predictions.descr.type_num == cnp.NPY_FLOAT32:
        pk = 0
    elif predictions.descr.type_num == cnp.NPY_FLOAT64:
        pk = 1
    else:
        raise TypeError("predictions must be float32 or float64")
    lk = _label_kind(cnp.PyArray_TYPE(labels))
    with nogil:
        _count(&P, &L, &prm, out, row_len, nt, pk, lk)
    return nt


@cython.boundscheck(False)
@cython.wraparound(False)
def reduce_into(const int64_t[:, ::1] scratch, int nrows, int64_t[:, ::1] confusion,
                int64_t[::1] counters):
    """confusion += sum of the first `nrows` scratch rows' cells; counters += their slots.

    The caller commits a batch only after checking its NaN count, so a rejected batch leaves
    the evaluation untouched.
    """
    cdef intp_t C = confusion.shape[0], cells = C * C, t, i, k
    with nogil:
        for t in range(nrows):
            for i in range(cells):
                confusion[i // C, i % C] += scratch[t, i]
            for k in range(N_SLOTS):
                counters[k] += scratch[t, cells + k]


@cython.boundscheck(False)
@cython.wraparound(False)
def batch_slot(const int64_t[:, ::1] scratch, int nrows, intp_t n_cells, int slot):
    """Sum of counter `slot` (0 rows, 1 NaNs, 2 top-N correct, 3 top-N total) over threads."""
    cdef int64_t s = 0
    cdef int t
    for t in range(nrows):
        s += scratch[t, n_cells + slot]
    return s
