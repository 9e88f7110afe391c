"""Counting kernels of `ROC`, `ROCBinary` and `ROCMultiClass`.

Two layers, as everywhere in ndws: ``cdef ... noexcept nogil`` kernels over raw pointers and
byte strides, and thin ``def`` wrappers that validate their arguments and run the kernel
without the GIL. The wrappers take 2-D NumPy arrays (an NDArray's zero-copy view, see
`ndws.evaluation.roc`), with any strides and any of the dtypes in ``_CODES``; one column of each
is read per call, so ROCBinary and ROCMultiClass score column j of a batch in place, with no
temporary array the size of the batch.

A label counts as positive when it is >= 0.5 (labels are 0/1; ND4J multiplies by the label,
which only differs for soft labels). A row is skipped when its mask value is 0.
"""
cimport cython
cimport numpy as cnp
from libc.math cimport isnan

import numpy as np

from ndws._typedefs cimport float32_t, float64_t, int32_t, int64_t, uint8_t, uint64_t

cnp.import_array()

# Element types a column may have. Predictions are float32/float64 in practice; labels and masks
# are often integer or bool, and reading them through one switch (perfectly predicted inside a
# loop) avoids a fused specialisation per dtype combination.
cdef enum:
    CODE_F64 = 0
    CODE_F32 = 1
    CODE_I64 = 2
    CODE_I32 = 3
    CODE_I16 = 4
    CODE_I8 = 5
    CODE_U64 = 6
    CODE_U32 = 7
    CODE_U16 = 8
    CODE_U8 = 9

cdef dict _CODES = {
    np.dtype(np.float64): CODE_F64, np.dtype(np.float32): CODE_F32,
    np.dtype(np.int64): CODE_I64, np.dtype(np.int32): CODE_I32,
    np.dtype(np.int16): CODE_I16, np.dtype(np.int8): CODE_I8,
    np.dtype(np.uint64): CODE_U64, np.dtype(np.uint32): CODE_U32,
    np.dtype(np.uint16): CODE_U16, np.dtype(np.uint8): CODE_U8,
    np.dtype(np.bool_): CODE_U8,
}

#: dtypes the kernels read directly; anything else is converted by the caller
SUPPORTED_DTYPES = frozenset(_CODES)


cdef struct Column:
    const char* data      # first element of the column
    Py_ssize_t stride     # bytes from one row to the next (may be negative or 0)
    int code              # CODE_*


cdef inline double _read(const char* p, int code) noexcept nogil:
    """value := (double) *p, for the element type `code`."""
    if code == CODE_F64:
        return (<const double*>p)[0]
    elif code == CODE_F32:
        return (<const float*>p)[0]
    elif code == CODE_I64:
        return <double>(<const long long*>p)[0]
    elif code == CODE_I32:
        return <double>(<const int*>p)[0]
    elif code == CODE_I16:
        return <double>(<const short*>p)[0]
    elif code == CODE_I8:
        return <double>(<const signed char*>p)[0]
    elif code == CODE_U64:
        return <double>(<const unsigned long long*>p)[0]
    elif code == CODE_U32:
        return <double>(<const unsigned int*>p)[0]
    elif code == CODE_U16:
        return <double>(<const unsigned short*>p)[0]
    else:
        return <double>(<const unsigned char*>p)[0]


cdef int _column(object arr, Py_ssize_t col, Py_ssize_t n, str role, Column* out) except -1:
    """Describe column `col` of the 2-D array `arr` (at least `n` rows) for the kernels."""
    if not isinstance(arr, np.ndarray) or (<cnp.ndarray>arr).ndim != 2:
        raise TypeError(f"{role} must be a 2-D numpy.ndarray, got {type(arr).__name__}")
    cdef cnp.ndarray a = <cnp.ndarray>arr
    code = _CODES.get(a.dtype)
    if code is None:
        raise TypeError(f"{role} has dtype {a.dtype}; expected one of "
                        f"{sorted(str(d) for d in _CODES)}")
    cdef cnp.npy_intp* shape = cnp.PyArray_DIMS(a)
    cdef cnp.npy_intp* strides = cnp.PyArray_STRIDES(a)
    if not 0 <= col < shape[1]:
        raise ValueError(f"{role}: column {col} out of range for shape {arr.shape}")
    if shape[0] < n:
        raise ValueError(f"{role} has {shape[0]} rows, expected {n}")
    out.data = <const char*>cnp.PyArray_DATA(a) + col * strides[1]
    out.stride = strides[0]
    out.code = code
    return 0


# ------------------------------------------------------------------------------------------------
# kernels

cdef Py_ssize_t _count_nans(const char* X__ij, Py_ssize_t n_rows, Py_ssize_t n_cols,
                            Py_ssize_t s0, Py_ssize_t s1, int code) noexcept nogil:
    """count := #{(i, j) : isnan(X[i, j])}"""
    cdef Py_ssize_t i, j, count = 0
    if code != CODE_F64 and code != CODE_F32:
        return 0
    for i in range(n_rows):
        for j in range(n_cols):
            if isnan(_read(X__ij + i * s0 + j * s1, code)):
                count += 1
    return count


cdef void _append_exact(Column p, Column y, Column m, bint has_mask, Py_ssize_t n,
                        double* pos,           # OUT: probabilities of positive rows, appended
                        Py_ssize_t* n_pos,     # IN/OUT: used length of `pos`
                        double* neg,           # OUT: probabilities of negative rows, appended
                        Py_ssize_t* n_neg      # IN/OUT: used length of `neg`
                        ) noexcept nogil:
    """pos += [p[i] : y[i] >= 0.5, m[i] != 0]; neg += [p[i] : y[i] < 0.5, m[i] != 0]"""
    # Keeping the pairs split by label is the same information as ND4J's (probability, label)
    # rows, and lets calculate time sort the two halves and merge them without an argsort.
    cdef Py_ssize_t i, a = n_pos[0], b = n_neg[0]
    cdef double v
    for i in range(n):
        if has_mask and _read(m.data + i * m.stride, m.code) == 0.0:
            continue
        v = _read(p.data + i * p.stride, p.code)
        if _read(y.data + i * y.stride, y.code) >= 0.5:
            pos[a] = v
            a += 1
        else:
            neg[b] = v
            b += 1
    n_pos[0] = a
    n_neg[0] = b


cdef inline double _threshold(Py_ssize_t i, Py_ssize_t k, bint f32) noexcept nogil:
    """t_i := i/k, rounded to float32 for float32 predictions (compared in their precision, as
    ND4J does: a float32 0.7 is then >= the threshold 0.7, although it is below the double)."""
    cdef double t = (<double>i) / k
    if f32:
        return <double>(<float>t)
    return t


cdef inline Py_ssize_t _bin(double v, Py_ssize_t k, bint f32) noexcept nogil:
    """The largest i in [0, k-1] with t_i <= v, or -1 when v < 0 (or NaN).

    Row v is then predicted positive at thresholds t_0..t_i (p >= t), never at t_k = 1.0 (ND4J's
    artefact, reference section 7.2). t_i is computed as the thresholds are (one IEEE division),
    so values exactly on a threshold land on the right side of it.
    """
    cdef Py_ssize_t i
    if not v >= 0.0:
        return -1
    if v >= 1.0:
        return k - 1
    i = <Py_ssize_t>(v * k)
    if i > k - 1:
        i = k - 1
    while i > 0 and _threshold(i, k, f32) > v:
        i -= 1
    while i + 1 <= k - 1 and _threshold(i + 1, k, f32) <= v:
        i += 1
    return i


cdef void _accumulate_hist(Column p, Column y, Column m, bint has_mask, Py_ssize_t n,
                           Py_ssize_t k,
                           int64_t* pos__b,      # OUT: += positives per bin (k bins)
                           int64_t* neg__b,      # OUT: += negatives per bin (k bins)
                           int64_t* totals       # OUT: += [positives, negatives]
                           ) noexcept nogil:
    """pos[bin(p[i])] += y[i] >= 0.5; neg[bin(p[i])] += y[i] < 0.5, over unmasked rows"""
    # One bin per row instead of ND4J's k+1 compare passes: TP(t_i) is the suffix sum of the
    # bins from i, taken once at calculate time.
    cdef Py_ssize_t i, b
    cdef int64_t n_p = 0, n_n = 0
    cdef bint f32 = p.code == CODE_F32
    for i in range(n):
        if has_mask and _read(m.data + i * m.stride, m.code) == 0.0:
            continue
        b = _bin(_read(p.data + i * p.stride, p.code), k, f32)
        if _read(y.data + i * y.stride, y.code) >= 0.5:
            n_p += 1
            if b >= 0:
                pos__b[b] += 1
        else:
            n_n += 1
            if b >= 0:
                neg__b[b] += 1
    totals[0] += n_p
    totals[1] += n_n


cdef Py_ssize_t _exact_points(const double* pos, Py_ssize_t n_pos,
                              const double* neg, Py_ssize_t n_neg,
                              double* thr,        # OUT: distinct probabilities, descending
                              int64_t* tp,        # OUT: #positives with p >= thr
                              int64_t* fp         # OUT: #negatives with p >= thr
                              ) noexcept nogil:
    """Merge the ascending `pos` and `neg` from the top: one point per distinct probability."""
    # Tied probabilities give one point (scikit-learn's roc_curve does the same); ND4J makes one
    # point per row, so its curve through a tie depends on the sort order.
    cdef Py_ssize_t i = n_pos - 1, j = n_neg - 1, k = 0
    cdef int64_t ctp = 0, cfp = 0
    cdef double v
    while i >= 0 or j >= 0:
        if i >= 0 and (j < 0 or pos[i] >= neg[j]):
            v = pos[i]
        else:
            v = neg[j]
        while i >= 0 and pos[i] == v:
            i -= 1
            ctp += 1
        while j >= 0 and neg[j] == v:
            j -= 1
            cfp += 1
        thr[k] = v
        tp[k] = ctp
        fp[k] = cfp
        k += 1
    return k


# ------------------------------------------------------------------------------------------------
# wrappers

def count_nans(predictions):
    """Number of NaNs in the 2-D float array `predictions` (0 for integer dtypes).

    Parameters
    ----------
    predictions : (n_samples, n_columns) numpy.ndarray
    """
    cdef Column c
    _column(predictions, 0, 0, "predictions", &c)
    cdef cnp.ndarray a = <cnp.ndarray>predictions
    cdef Py_ssize_t n0 = a.shape[0], n1 = a.shape[1]
    cdef Py_ssize_t s0 = a.strides[0], s1 = a.strides[1], count
    with nogil:
        count = _count_nans(c.data, n0, n1, s0, s1, c.code)
    return count


cdef int _inputs(object predictions, object labels, object mask, Py_ssize_t col,
                 Py_ssize_t mask_col, Column* p, Column* y, Column* m, Py_ssize_t* n) except -1:
    n[0] = (<cnp.ndarray?>predictions).shape[0] if isinstance(predictions, np.ndarray) else 0
    _column(predictions, col, n[0], "predictions", p)
    _column(labels, col, n[0], "labels", y)
    if mask is not None:
        _column(mask, mask_col, n[0], "mask", m)
    return 0


def append_exact(predictions, labels, mask, Py_ssize_t col, Py_ssize_t mask_col,
                 float64_t[::1] pos not None, Py_ssize_t n_pos,
                 float64_t[::1] neg not None, Py_ssize_t n_neg):
    """Append column `col` of a batch to the split exact-mode buffers.

    Parameters
    ----------
    predictions, labels : (n_samples, n_columns) numpy.ndarray
        Probabilities and 0/1 labels; column `col` of each is read.
    mask : (n_samples, n_mask_columns) numpy.ndarray or None
        Rows whose mask (column `mask_col`) is 0 are skipped.
    pos, neg : (capacity,) ndarray of float64
        Buffers of the positive and negative rows' probabilities, used up to `n_pos` / `n_neg`;
        each must have room for every row of the batch.

    Returns
    -------
    (n_pos, n_neg) : tuple of int
        The new used lengths.
    """
    cdef Column p, y, m
    cdef Py_ssize_t n
    _inputs(predictions, labels, mask, col, mask_col, &p, &y, &m, &n)
    if not (0 <= n_pos and n_pos + n <= pos.shape[0] and 0 <= n_neg and n_neg + n <= neg.shape[0]):
        raise ValueError(f"exact-mode buffers too small for {n} rows: "
                         f"{n_pos}/{pos.shape[0]} and {n_neg}/{neg.shape[0]} used")
    cdef bint has_mask = mask is not None
    with nogil:
        _append_exact(p, y, m, has_mask, n, &pos[0], &n_pos, &neg[0], &n_neg)
    return n_pos, n_neg


def accumulate_histogram(predictions, labels, mask, Py_ssize_t col, Py_ssize_t mask_col,
                         int64_t[::1] pos_bins not None, int64_t[::1] neg_bins not None,
                         int64_t[::1] totals not None):
    """Count column `col` of a batch into the histogram-mode bins.

    Parameters
    ----------
    predictions, labels, mask, col, mask_col
        As in `append_exact`.
    pos_bins, neg_bins : (threshold_steps,) ndarray of int64
        Bin b counts the rows with t_b <= p < t_(b+1) (the last bin also p >= 1), where
        t_i = i/k (rounded to float32 for float32 predictions); updated.
    totals : (2,) ndarray of int64
        Positive and negative row counts; updated.
    """
    cdef Column p, y, m
    cdef Py_ssize_t n, k = pos_bins.shape[0]
    _inputs(predictions, labels, mask, col, mask_col, &p, &y, &m, &n)
    if k < 1 or neg_bins.shape[0] != k or totals.shape[0] != 2:
        raise ValueError(f"bins must have one shared length >= 1 and totals length 2, got "
                         f"{pos_bins.shape[0]}, {neg_bins.shape[0]}, {totals.shape[0]}")
    cdef bint has_mask = mask is not None
    with nogil:
        _accumulate_hist(p, y, m, has_mask, n, k, &pos_bins[0], &neg_bins[0], &totals[0])


def exact_points(const float64_t[::1] pos not None, const float64_t[::1] neg not None):
    """Distinct thresholds with their cumulative counts, from sorted exact-mode buffers.

    Parameters
    ----------
    pos, neg : (n,) ndarray of float64
        The positive and negative rows' probabilities, each sorted ascending.

    Returns
    -------
    thresholds : (m,) ndarray of float64
        The distinct probabilities, descending.
    tp, fp : (m,) ndarray of int64
        Positives and negatives with probability >= each threshold.
    """
    cdef Py_ssize_t n_pos = pos.shape[0], n_neg = neg.shape[0], total = n_pos + n_neg, m
    thr_arr = np.empty(total, dtype=np.float64)
    tp_arr = np.empty(total, dtype=np.int64)
    fp_arr = np.empty(total, dtype=np.int64)
    if total == 0:
        return thr_arr, tp_arr, fp_arr
    cdef float64_t[::1] thr = thr_arr
    cdef int64_t[::1] tp = tp_arr, fp = fp_arr
    # an empty memoryview has no element 0 to take the address of
    cdef const double* pp = &pos[0] if n_pos else NULL
    cdef const double* nn = &neg[0] if n_neg else NULL
    with nogil:
        m = _exact_points(pp, n_pos, nn, n_neg, &thr[0], &tp[0], &fp[0])
    return thr_arr[:m], tp_arr[:m], fp_arr[:m]


cdef double _exact_auc(const int64_t* tp, const int64_t* fp, Py_ssize_t m,
                       int64_t P, int64_t N) noexcept nogil:
    """AUC := sum |dFP| (TP_a + TP_b) / (2 P N) over (0, 0), the m points, (N, P)"""
    # Summed in counts, not rates: each term is an integer, exact in a double while 2*P*N stays
    # below 2**53, so the area does not depend on rounding of the rates.
    cdef Py_ssize_t i
    cdef double area = 0.0
    cdef int64_t prev_tp = 0, prev_fp = 0
    for i in range(m):
        area += <double>(fp[i] - prev_fp) * <double>(tp[i] + prev_tp)
        prev_tp = tp[i]
        prev_fp = fp[i]
    area += <double>(N - prev_fp) * <double>(P + prev_tp)
    return area / (2.0 * <double>P * <double>N)


cdef double _exact_auprc(const int64_t* tp, const int64_t* fp, Py_ssize_t m,
                         int64_t P, int64_t N) noexcept nogil:
    """AUPRC := sum |dR| (Prec_a + Prec_b) / 2 over (R 0, Prec 1), the m points, (1, P/(P+N))"""
    cdef Py_ssize_t i
    cdef double area = 0.0, prev_r = 0.0, prev_p = 1.0, r, p
    for i in range(m):
        r = <double>tp[i] / <double>P
        p = <double>tp[i] / <double>(tp[i] + fp[i])
        area += (r - prev_r) * (p + prev_p)
        prev_r = r
        prev_p = p
    area += (1.0 - prev_r) * (<double>P / <double>(P + N) + prev_p)
    return 0.5 * area


def exact_areas(const int64_t[::1] tp not None, const int64_t[::1] fp not None,
                int64_t P, int64_t N):
    """Exact-mode AUC and AUPRC from `exact_points`' counts (descending thresholds).

    The areas of ND4J's curves with their edge points (redundant points do not change them).
    A class with no examples gives NaN, as the curves' rates do.

    Returns
    -------
    (auc, auprc) : tuple of float
    """
    cdef Py_ssize_t m = tp.shape[0]
    if fp.shape[0] != m:
        raise ValueError(f"tp and fp differ in length: {m} and {fp.shape[0]}")
    if m == 0 or P < 0 or N < 0:
        raise ValueError("exact_areas needs at least one point and non-negative totals")
    cdef double auc = float("nan"), auprc = float("nan")
    with nogil:
        if P > 0 and N > 0:
            auc = _exact_auc(&tp[0], &fp[0], m, P, N)
        if P > 0:
            auprc = _exact_auprc(&tp[0], &fp[0], m, P, N)
    return auc, auprc
