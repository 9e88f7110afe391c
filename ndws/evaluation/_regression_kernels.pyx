"""Accumulation kernels of `ndws.evaluation.regression.RegressionEvaluation`.

Two layers, as everywhere in ndws: ``cdef ... noexcept nogil`` kernels over raw pointers and
byte strides (labels and predictions each float32 or float64, independently), and thin ``def``
wrappers that take NumPy views (already validated by `RegressionEvaluation.eval`) and run the
kernels without the GIL.

State layout. Per column the evaluation keeps eight float64 running values, a ``(8, k)``
C-contiguous array (rows named by the ``S_*`` constants below): the example count, the label
and prediction means, the label and prediction sums of squared deviations (M2), their
co-moment, and the sums of squared and absolute errors. DL4J keeps raw sums (sum y, sum y²,
sum y·p) and subtracts n·mean² at the end, which cancels catastrophically when the mean is
large against the spread (float64 loses every digit of R² for labels around 1e8 with unit
spread). Means and centred moments combined with Chan et al.'s pairwise update do not cancel,
and the same update merges two evaluations, so merge equals one-shot up to rounding.

No temporaries the size of a batch: `batch_moments` reads the batch's memory in place (any
strides, rank 2 to 4) once, block by block (each block reduced around its own means, then
folded in), into a caller-owned ``(8, k)`` scratch, and `combine` folds the scratch into the
state.
"""
cimport cython
cimport numpy as cnp
from libc.math cimport fabs
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t

from ndws._typedefs cimport float32_t, float64_t, intp_t

cnp.import_array()

# rows of the (8, k) state / scratch arrays
cdef enum:
    S_COUNT = 0     # examples counted (mask on)
    S_MEAN_Y = 1    # mean of the labels
    S_MEAN_P = 2    # mean of the predictions
    S_M2_Y = 3      # sum (y - mean_y)^2
    S_M2_P = 4      # sum (p - mean_p)^2
    S_C_YP = 5      # sum (y - mean_y)(p - mean_p)
    S_SSE = 6       # sum (p - y)^2
    S_SAE = 7       # sum |p - y|
    N_STATS = 8

N_STATE_ROWS = N_STATS

# mask element kinds: masks are read in place too, so their dtype is a runtime switch (a mask
# is optional and its test is one compare; a fused type per mask dtype would multiply the
# kernel's specialisations by six)
cdef enum:
    MASK_NONE = 0
    MASK_F32 = 1
    MASK_F64 = 2
    MASK_I8 = 3     # bool, int8, uint8
    MASK_I16 = 4
    MASK_I32 = 5
    MASK_I64 = 6

_MASK_KINDS = {("f", 4): MASK_F32, ("f", 8): MASK_F64, ("b", 1): MASK_I8, ("u", 1): MASK_I8,
               ("i", 1): MASK_I8, ("i", 2): MASK_I16, ("u", 2): MASK_I16, ("i", 4): MASK_I32,
               ("u", 4): MASK_I32, ("i", 8): MASK_I64, ("u", 8): MASK_I64}

ctypedef fused lab_t:
    float32_t
    float64_t

ctypedef fused pred_t:
    float32_t
    float64_t


cdef inline bint _mask_on(const char* m, int kind) noexcept nogil:
    # a binary mask, as DL4J assumes: any nonzero value includes the entry (-0.0 excludes it)
    if kind == MASK_F32:
        return (<const float32_t*> m)[0] != 0
    if kind == MASK_F64:
        return (<const float64_t*> m)[0] != 0
    if kind == MASK_I8:
        return (<const int8_t*> m)[0] != 0
    if kind == MASK_I16:
        return (<const int16_t*> m)[0] != 0
    if kind == MASK_I32:
        return (<const int32_t*> m)[0] != 0
    return (<const int64_t*> m)[0] != 0


# Rows are taken BLOCK at a time: their byte offsets go into stack arrays, then each column is
# swept over the block with its sums in registers (a row-major sweep would keep eight running
# sums per column in memory, reloaded for every element because the input pointers may alias
# them). Two sweeps per block (block means, then centred moments) read data that is in L1.
DEF BLOCK = 256


@cython.cdivision(True)
cdef inline void _fold(float64_t* S__sk, intp_t k, intp_t c, float64_t nb, float64_t my,
                       float64_t mp, float64_t m2y, float64_t m2p, float64_t cyp,
                       float64_t sse, float64_t sae) noexcept nogil:
    # S[:, c] := S[:, c] (+) one block's moments (Chan, Golub and LeVeque's pairwise update)
    cdef float64_t na = S__sk[S_COUNT * k + c], nt = na + nb
    cdef float64_t dy = my - S__sk[S_MEAN_Y * k + c], dp = mp - S__sk[S_MEAN_P * k + c]
    cdef float64_t f = na * nb / nt
    S__sk[S_MEAN_Y * k + c] += dy * (nb / nt)
    S__sk[S_MEAN_P * k + c] += dp * (nb / nt)
    S__sk[S_M2_Y * k + c] += m2y + dy * dy * f
    S__sk[S_M2_P * k + c] += m2p + dp * dp * f
    S__sk[S_C_YP * k + c] += cyp + dy * dp * f
    S__sk[S_SSE * k + c] += sse
    S__sk[S_SAE * k + c] += sae
    S__sk[S_COUNT * k + c] = nt


@cython.cdivision(True)
cdef intp_t _moments(const char* Y, const char* P, const char* M, int mkind,   # IN
                     intp_t k, const intp_t* n,                               # IN  row extents (3)
                     intp_t ysc, const intp_t* ys,                            # IN  byte strides
                     intp_t psc, const intp_t* ps,
                     intp_t msc, const intp_t* ms,
                     float64_t* S__sk,                                        # OUT (8, k)
                     lab_t lab_tag, pred_t pred_tag) noexcept nogil:
    """S := per-column count, means, M2s, co-moment, SSE, SAE of one batch; returns #NaN preds.

    Rows are the product of three axes (extents ``n``, byte strides ``ys``/``ps``/``ms``); the
    column axis has strides ``ysc``/``psc``/``msc`` (``msc`` is 0 for a per-example mask).
    Each block of rows is reduced around its own means and folded into S with Chan's update
    (numerically stable: no sum-of-squares subtraction). Once a counted prediction is NaN
    only NaNs are counted further: the caller rejects the batch and never reads S.
    """
    cdef intp_t yo[BLOCK]
    cdef intp_t po[BLOCK]
    cdef intp_t mo[BLOCK]
    cdef intp_t i0 = 0, i1 = 0, i2 = 0, b, nb, c, done = 0, nan_count = 0
    cdef intp_t total = n[0] * n[1] * n[2]
    cdef const char* yc
    cdef const char* pc
    cdef const char* mc
    cdef float64_t y, p, dy, dp, e, cnt, sy, sp, my, mp, m2y, m2p, cyp, sse, sae
    for c in range(N_STATS * k):
        S__sk[c] = 0
    while done < total:
        nb = total - done if total - done < BLOCK else BLOCK
        for b in range(nb):
            yo[b] = i0 * ys[0] + i1 * ys[1] + i2 * ys[2]
            po[b] = i0 * ps[0] + i1 * ps[1] + i2 * ps[2]
            mo[b] = i0 * ms[0] + i1 * ms[1] + i2 * ms[2]
            i2 += 1
            if i2 == n[2]:
                i2 = 0
                i1 += 1
                if i1 == n[1]:
                    i1 = 0
                    i0 += 1
        done += nb
        for c in range(k):
            yc = Y + c * ysc
            pc = P + c * psc
            mc = M + c * msc
            cnt = sy = sp = 0
            if mkind == MASK_NONE:
                for b in range(nb):
                    p = (<const pred_t*> (pc + po[b]))[0]
                    nan_count += p != p
                    sy += (<const lab_t*> (yc + yo[b]))[0]
                    sp += p
                cnt = nb
            else:
                for b in range(nb):
                    if _mask_on(mc + mo[b], mkind):
                        p = (<const pred_t*> (pc + po[b]))[0]
                        nan_count += p != p
                        sy += (<const lab_t*> (yc + yo[b]))[0]
                        sp += p
                        cnt += 1
            if cnt == 0 or nan_count:
                continue
            my = sy / cnt
            mp = sp / cnt
            m2y = m2p = cyp = sse = sae = 0
            for b in range(nb):
                if mkind != MASK_NONE and not _mask_on(mc + mo[b], mkind):
                    continue
                y = (<const lab_t*> (yc + yo[b]))[0]
                p = (<const pred_t*> (pc + po[b]))[0]
                dy = y - my
                dp = p - mp
                e = p - y
                m2y += dy * dy
                m2p += dp * dp
                cyp += dy * dp
                sse += e * e
                sae += fabs(e)
            _fold(S__sk, k, c, cnt, my, mp, m2y, m2p, cyp, sse, sae)
    return nan_count


@cython.cdivision(True)
cdef void _combine(float64_t* T__sk, const float64_t* S__sk, intp_t k) noexcept nogil:
    """T := T (+) S per column (Chan, Golub and LeVeque's pairwise update of means and M2s)."""
    cdef intp_t c
    cdef float64_t na, nb, nt, dy, dp, f
    for c in range(k):
        nb = S__sk[S_COUNT * k + c]
        if nb == 0:
            continue
        na = T__sk[S_COUNT * k + c]
        nt = na + nb
        dy = S__sk[S_MEAN_Y * k + c] - T__sk[S_MEAN_Y * k + c]
        dp = S__sk[S_MEAN_P * k + c] - T__sk[S_MEAN_P * k + c]
        f = na * nb / nt
        T__sk[S_MEAN_Y * k + c] += dy * (nb / nt)
        T__sk[S_MEAN_P * k + c] += dp * (nb / nt)
        T__sk[S_M2_Y * k + c] += S__sk[S_M2_Y * k + c] + dy * dy * f
        T__sk[S_M2_P * k + c] += S__sk[S_M2_P * k + c] + dp * dp * f
        T__sk[S_C_YP * k + c] += S__sk[S_C_YP * k + c] + dy * dp * f
        T__sk[S_SSE * k + c] += S__sk[S_SSE * k + c]
        T__sk[S_SAE * k + c] += S__sk[S_SAE * k + c]
        T__sk[S_COUNT * k + c] = nt


def mask_kind(dtype):
    """The kernel's code for a mask dtype, or -1 when the dtype cannot be read in place."""
    return _MASK_KINDS.get((dtype.kind, dtype.itemsize), -1)


def batch_moments(cnp.ndarray labels, cnp.ndarray predictions, object mask, int mask_code,
                  int axis, float64_t[:, ::1] scratch):
    """Fill ``scratch`` ``(8, k)`` with one batch's per-column moments; return the NaN count.

    ``labels`` and ``predictions`` are float32 or float64 arrays of one shape (rank 2 to 4) with
    the columns on ``axis``; ``mask`` is None or an array of the same rank whose extents equal
    the labels' (a per-output mask) or are 1 on ``axis`` (a per-example mask); ``mask_code``
    comes from `mask_kind`. The caller validated all of this. When the return value is nonzero
    the scratch holds partial sums and must not be combined.
    """
    cdef int nd = labels.ndim, d, r = 0
    cdef intp_t k = labels.shape[axis]
    cdef intp_t n[3]
    cdef intp_t ys[3]
    cdef intp_t ps[3]
    cdef intp_t ms[3]
    cdef intp_t ysc = labels.strides[axis], psc = predictions.strides[axis], msc = 0
    cdef const char* Y = <const char*> cnp.PyArray_DATA(labels)
    cdef const char* P = <const char*> cnp.PyArray_DATA(predictions)
    cdef const char* M = NULL
    cdef cnp.ndarray marr = None
    cdef int mkind = MASK_NONE
    cdef intp_t nan_count
    cdef bint y32 = labels.dtype.itemsize == 4, p32 = predictions.dtype.itemsize == 4
    if scratch.shape[0] != N_STATS or scratch.shape[1] != k:
        raise ValueError(f"scratch must have shape ({N_STATS}, {k}), got "
                         f"({scratch.shape[0]}, {scratch.shape[1]})")
    if mask is not None:
        marr = <cnp.ndarray> mask
        M = <const char*> cnp.PyArray_DATA(marr)
        mkind = mask_code
        msc = marr.strides[axis] if marr.shape[axis] != 1 else 0
    for d in range(3):
        n[d] = 1
        ys[d] = ps[d] = ms[d] = 0
    for d in range(nd):
        if d == axis:
            continue
        n[r] = labels.shape[d]
        ys[r] = labels.strides[d]
        ps[r] = predictions.strides[d]
        if marr is not None:
            ms[r] = marr.strides[d] if marr.shape[d] != 1 else 0
        r += 1
    # the arrays stay referenced by this frame (and the caller's) while the GIL is released
    with nogil:
        if y32 and p32:
            nan_count = _moments(Y, P, M, mkind, k, n, ysc, ys, psc, ps, msc, ms,
                                 &scratch[0, 0], <float32_t> 0, <float32_t> 0)
        elif y32:
            nan_count = _moments(Y, P, M, mkind, k, n, ysc, ys, psc, ps, msc, ms,
                                 &scratch[0, 0], <float32_t> 0, <float64_t> 0)
        elif p32:
            nan_count = _moments(Y, P, M, mkind, k, n, ysc, ys, psc, ps, msc, ms,
                                 &scratch[0, 0], <float64_t> 0, <float32_t> 0)
        else:
            nan_count = _moments(Y, P, M, mkind, k, n, ysc, ys, psc, ps, msc, ms,
                                 &scratch[0, 0], <float64_t> 0, <float64_t> 0)
    return nan_count


def combine(float64_t[:, ::1] state, const float64_t[:, ::1] other):
    """state := state (+) other, both ``(8, k)`` (the merge of two sets of moments)."""
    if state.shape[0] != N_STATS or other.shape[0] != N_STATS or state.shape[1] != other.shape[1]:
        raise ValueError(f"state shapes differ: ({state.shape[0]}, {state.shape[1]}) and "
                         f"({other.shape[0]}, {other.shape[1]})")
    if state.shape[1] == 0:
        return
    with nogil:
        _combine(&state[0, 0], &other[0, 0], state.shape[1])
