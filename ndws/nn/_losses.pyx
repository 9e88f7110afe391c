"""Native losses with their gradients in one pass (`ndws.nn.functional`'s losses).

Conventions (inputs, dtypes, out=, placement) are those of `ndws.nn.functional`.
"""
cimport numpy as cnp
from libc.math cimport log, sqrt

import numpy as np

from ndws._core cimport NDArray, check_array
from ndws._dispatch cimport (new_result, discard_result, float_arg, out_arg, same_as, clashes,
                             shape_of)
from ndws._threads cimport threads_for, run_tasks, GRAIN_NN_TRANSC
from ndws._typedefs cimport float32_t, float64_t, floating_t, int32_t, int64_t, intp_t
from ndws.nn._activations cimport copy_into
from ndws.nn._math cimport (_exp, _fabs, _log, _log1p, _shifted_exps, _sigmoid, ndws_sce_grad_f32,
                            ndws_sce_grad_f64)
from ndws._core import from_numpy as _from_numpy

cnp.import_array()

# Losses reduce in a fixed number of row chunks that depends only on the row count, summed in
# order afterwards: the loss is bit-identical whatever the thread count.
cdef enum:
    LOSS_CHUNKS = 64
    # the exponentials of a contiguous softmax row are made this many at a time, in a loop
    # the compiler vectorises, before they are summed in order (see _sce_row)
    SCE_BLOCK = 256

cdef enum:
    # row losses: one value per example (reduction="none" gives (n,))
    LOSS_SCE = 0
    LOSS_COSINE = 1
    # elementwise losses: one value per output
    LOSS_BCE = 2
    LOSS_MSE = 3
    LOSS_MAE = 4
    LOSS_HINGE = 5
    LOSS_SQUARED_HINGE = 6
    LOSS_KLD = 7
    LOSS_POISSON = 8
    LOSS_MSLE = 9
    LOSS_MAPE = 10
    LOSS_WASSERSTEIN = 11

# ND4J's Nd4j.EPS_THRESHOLD: the floor of the norms of the cosine proximity, of the clipped
# probabilities of the KL divergence and (ndws only) of |label| in MAPE's denominator
cdef extern from *:
    """
    #define NDWS_LOSS_EPS 1e-5
    """
    const double LOSS_EPS "NDWS_LOSS_EPS"


cdef inline bint _row_kind(int kind) noexcept nogil:
    return kind <= LOSS_COSINE


# ------------------------------------------------------------------------------------------------
# Losses. Every loss is a sum over rows (examples) of a row kernel that returns the row's loss
# and writes the row's gradient; rows are cut into LOSS_CHUNKS fixed chunks whose partial sums
# (float64) are added in order, so the loss does not depend on the thread count.

cdef struct LossArgs:
    int kind
    intp_t n, c
    char* x                  # predictions / logits (n, c), element strides xr, xc
    intp_t xr, xc
    char* t                  # targets / probabilities, same shape; NULL with integer labels
    intp_t tr, tc
    char* lab                # integer class indices (n,) (int32 or int64), or NULL
    intp_t ls
    bint lab64
    char* w                  # per-example weights (n,), or NULL
    intp_t ws
    char* m                  # mask, or NULL: per example (n,) when not m_out, else (n, c)
    intp_t mr, mc
    bint m_out
    char* d                  # gradient out (n, c), or NULL
    intp_t dr, dc
    char* e                  # reduction="none" losses: (n,) for SCE, (n, c) otherwise; or NULL
    intp_t er, ec
    double gscale            # gradient scale: 1/denominator for "mean", else 1


cdef double _sce_row(const LossArgs* A, const floating_t* X__k, const floating_t* T__k,  # IN
                     intp_t label, const floating_t* M__k, double coef,                  # IN
                     floating_t* D__k) noexcept nogil:                                   # OUT
    # -sum_k q_k * log softmax(x)_k with q = labels (one-hot for an index) times the
    # per-output mask; gradient coef * (sum(q) * softmax(x) - q). Terms with q_k == 0 are
    # skipped, so -inf logits of impossible classes give no NaN (0 * log 0 = 0).
    cdef intp_t k, c = A.c, xc = A.xc, tc = A.tc, mc = A.mc, dc = A.dc, k0, kb
    cdef floating_t mx = X__k[0], q
    cdef double s = 0.0, lse, loss = 0.0, qsum = 0.0
    cdef floating_t ebuf[SCE_BLOCK]
    for k in range(1, c):
        if X__k[k * xc] > mx:
            mx = X__k[k * xc]
    if xc == 1:
        # contiguous logits: the same exponentials, made a block at a time by a vectorised
        # loop, then added in the same order (the same sum to the bit)
        k0 = 0
        while k0 < c:
            kb = c - k0 if c - k0 < SCE_BLOCK else SCE_BLOCK
            s = _shifted_exps(X__k + k0, mx, ebuf, kb, s)
            k0 += kb
    else:
        for k in range(c):
            s += _exp(X__k[k * xc] - mx)
    lse = mx + log(s)
    if label >= 0:
        q = M__k[label * mc] if M__k != NULL else 1
        if q != 0:
            loss = q * (lse - X__k[label * xc])
            qsum = q
    else:
        for k in range(c):
            q = T__k[k * tc]
            if M__k != NULL:
                q = q * M__k[k * mc]
            if q != 0:
                loss += q * (lse - X__k[k * xc])
                qsum += q
    if D__k != NULL:
        if qsum == 0:
            for k in range(c):
                D__k[k * dc] = 0
        elif xc == 1 and dc == 1 and M__k == NULL and (label >= 0 or tc == 1):
            # the contiguous case of the loop below, branch-free so that it vectorises: the
            # same expression per element (an index label's q is 1 at the label, else 0)
            # (the per-instruction-set loop of _act_loops.h, the same expression)
            if label >= 0:
                # (the label's logit read first: D may be X itself, written in place)
                q = <floating_t>(coef * (qsum * _exp(<floating_t>(X__k[label] - lse))
                                         - <floating_t>1))
                if floating_t is float32_t:
                    ndws_sce_grad_f32(X__k, NULL, lse, coef, qsum, D__k, c)
                else:
                    ndws_sce_grad_f64(X__k, NULL, lse, coef, qsum, D__k, c)
                D__k[label] = q
            else:
                if floating_t is float32_t:
                    ndws_sce_grad_f32(X__k, T__k, lse, coef, qsum, D__k, c)
                else:
                    ndws_sce_grad_f64(X__k, T__k, lse, coef, qsum, D__k, c)
        else:
            for k in range(c):
                if label >= 0:
                    q = (M__k[label * mc] if M__k != NULL else 1) if k == label else 0
                else:
                    q = T__k[k * tc] * (M__k[k * mc] if M__k != NULL else 1)
                D__k[k * dc] = <floating_t>(coef * (qsum * _exp(<floating_t>(X__k[k * xc] - lse))
                                                    - q))
    return loss


cdef double _cosine_row(const LossArgs* A, const floating_t* X__k, const floating_t* T__k,  # IN
                        double coef, floating_t* D__k) noexcept nogil:                     # OUT
    # -<x, t> / (max(|x|, eps) * max(|t|, eps)) (DL4J's LossCosineProximity); gradient coef *
    # the derivative of that same expression: -(t - <x, t>/|x|^2 x) / (|x| max(|t|, eps)),
    # or -t / (eps max(|t|, eps)) where |x| < eps (DL4J's gradient clamps |x|^2 and |x|^3
    # separately there, so it is not the derivative of its own score). Sums in double.
    cdef intp_t k, c = A.c, xc = A.xc, tc = A.tc, dc = A.dc
    cdef double dot = 0.0, sx = 0.0, st = 0.0, nx, nt, den, proj
    for k in range(c):
        dot += <double>X__k[k * xc] * T__k[k * tc]
        sx += <double>X__k[k * xc] * X__k[k * xc]
        st += <double>T__k[k * tc] * T__k[k * tc]
    nx = sqrt(sx)
    nt = sqrt(st)
    proj = dot / sx if nx >= LOSS_EPS else 0.0
    den = (nx if nx >= LOSS_EPS else LOSS_EPS) * (nt if nt >= LOSS_EPS else LOSS_EPS)
    if nx != nx:
        proj = nx                                  # NaN stays NaN (the comparison hides it)
    if D__k != NULL:
        for k in range(c):
            D__k[k * dc] = <floating_t>(-coef * (T__k[k * tc] - proj * X__k[k * xc]) / den)
    return -dot / den


cdef inline floating_t _ew(int kind, floating_t v, floating_t t,  # IN
                           floating_t* dl) noexcept nogil:        # OUT
    # one element of an elementwise loss: returns l(v, t), writes dl/dv. NaN in gives NaN out
    # (every clamp below is written so that a NaN passes it).
    cdef floating_t diff, h, tc, vc, eps = <floating_t>LOSS_EPS
    if kind == LOSS_BCE:
        # max(x, 0) - x*t + log1p(exp(-|x|)): no overflow for any x
        dl[0] = _sigmoid(v) - t
        return (v if v > 0 else 0) - v * t + _log1p(_exp(-_fabs(v)))
    elif kind == LOSS_MSE:
        diff = v - t
        dl[0] = 2 * diff
        return diff * diff
    elif kind == LOSS_MAE or kind == LOSS_MAPE:
        diff = v - t
        dl[0] = 1 if diff > 0 else (-1 if diff < 0 else diff)    # sign; 0 at 0, NaN at NaN
        if kind == LOSS_MAE:
            return _fabs(diff)
        # 100 |v - t| / |t| with |t| floored at eps: DL4J divides by |t| itself (inf or NaN
        # for a zero label)
        h = _fabs(t)
        h = <floating_t>100 / (eps if h < eps else h)
        dl[0] = dl[0] * h
        return _fabs(diff) * h
    elif kind == LOSS_HINGE or kind == LOSS_SQUARED_HINGE:
        # labels -1 / +1 (DL4J's convention); h = max(0, 1 - t v)
        h = 1 - t * v
        h = 0 if h <= 0 else h
        if kind == LOSS_HINGE:
            dl[0] = 0 if h <= 0 else -t            # 0 at the kink, as DL4J's
            if h != h:
                dl[0] = h
            return h
        dl[0] = -2 * t * h
        return h * h
    elif kind == LOSS_KLD:
        # t' log(t' / v') with t', v' clipped to [eps, 1] (DL4J's LossKLD); the gradient
        # -t' / max(v, eps): the derivative of that score inside the clip range, and DL4J's
        # -t / v with its division by zero floored below it
        tc = eps if t < eps else (1 if t > 1 else t)
        vc = eps if v < eps else (1 if v > 1 else v)
        dl[0] = -tc / (eps if v < eps else v)
        return tc * _log(tc / vc)
    elif kind == LOSS_POISSON:
        # v - t log(v), with 0 log 0 = 0 (DL4J's gives NaN for t = 0 at v = 0)
        if t == 0:
            dl[0] = 1
            return v
        dl[0] = 1 - t / v
        return v - t * _log(v)
    elif kind == LOSS_MSLE:
        # (log(1 + v) - log(1 + t))^2 through log1p: exact near 0
        diff = _log1p(v) - _log1p(t)
        dl[0] = 2 * diff / (1 + v)
        return diff * diff
    # LOSS_WASSERSTEIN
    dl[0] = t
    return t * v


cdef inline void _ew_run(int kind, const floating_t* X, const floating_t* T, floating_t* L,
                         floating_t* DL, intp_t n) noexcept nogil:
    # L[i] := l(X[i], T[i]), DL[i] := dl/dx over n contiguous elements, the loss kind a literal
    # in each call below: gcc inlines _ew into a loop of its own, without a switch per element,
    # and vectorises it (the exponentials and logarithms are ndws' branch-free ones)
    cdef intp_t i
    for i in range(n):
        L[i] = _ew(kind, X[i], T[i], &DL[i])


cdef void _ew_block(int kind, const floating_t* X, const floating_t* T, floating_t* L,
                    floating_t* DL, intp_t n) noexcept nogil:
    if kind == LOSS_BCE:
        _ew_run(LOSS_BCE, X, T, L, DL, n)
    elif kind == LOSS_MSE:
        _ew_run(LOSS_MSE, X, T, L, DL, n)
    elif kind == LOSS_MAE:
        _ew_run(LOSS_MAE, X, T, L, DL, n)
    elif kind == LOSS_MAPE:
        _ew_run(LOSS_MAPE, X, T, L, DL, n)
    elif kind == LOSS_HINGE:
        _ew_run(LOSS_HINGE, X, T, L, DL, n)
    elif kind == LOSS_SQUARED_HINGE:
        _ew_run(LOSS_SQUARED_HINGE, X, T, L, DL, n)
    elif kind == LOSS_KLD:
        _ew_run(LOSS_KLD, X, T, L, DL, n)
    elif kind == LOSS_POISSON:
        _ew_run(LOSS_POISSON, X, T, L, DL, n)
    elif kind == LOSS_MSLE:
        _ew_run(LOSS_MSLE, X, T, L, DL, n)
    else:
        _ew_run(LOSS_WASSERSTEIN, X, T, L, DL, n)


cdef double _ew_loss_row(const LossArgs* A, const floating_t* X__k, const floating_t* T__k,
                         const floating_t* M__k, double wrow, double coef,
                         floating_t* D__k, floating_t* E__k) noexcept nogil:
    # elementwise losses of one row: sum_k m_k * l(x_k, t_k); gradient coef * m_k * dl/dx_k
    cdef intp_t k, c = A.c, k0, kb
    cdef floating_t mk, l, dl
    cdef double acc = 0.0
    cdef floating_t lbuf[SCE_BLOCK]
    cdef floating_t dlbuf[SCE_BLOCK]
    if (M__k == NULL and A.xc == 1 and A.tc == 1 and (D__k == NULL or A.dc == 1)
            and (E__k == NULL or A.ec == 1)):
        # contiguous and unmasked: the losses a block at a time by a vectorised loop, then
        # summed and scaled in order, as below with m_k = 1 (the same bits)
        k0 = 0
        while k0 < c:
            kb = c - k0 if c - k0 < SCE_BLOCK else SCE_BLOCK
            _ew_block(A.kind, X__k + k0, T__k + k0, lbuf, dlbuf, kb)
            for k in range(kb):
                acc += lbuf[k]
                if D__k != NULL:
                    D__k[k0 + k] = <floating_t>(coef * dlbuf[k])
                if E__k != NULL:
                    E__k[k0 + k] = <floating_t>(wrow * lbuf[k])
            k0 += kb
        return acc
    for k in range(c):
        mk = M__k[k * A.mc] if M__k != NULL else 1
        if mk == 0:
            if D__k != NULL:
                D__k[k * A.dc] = 0
            if E__k != NULL:
                E__k[k * A.ec] = 0
            continue
        l = _ew(A.kind, X__k[k * A.xc], T__k[k * A.tc], &dl)
        acc += mk * l
        if D__k != NULL:
            D__k[k * A.dc] = <floating_t>(coef * mk * dl)
        if E__k != NULL:
            E__k[k * A.ec] = <floating_t>(wrow * mk * l)
    return acc


cdef double _loss_rows(const floating_t* X, const LossArgs* A, intp_t r0,
                       intp_t r1) noexcept nogil:
    """Sum over rows [r0, r1) of weight * mask * row loss (rows summed in order)."""
    cdef const floating_t* T = <const floating_t*>A.t
    cdef const floating_t* W = <const floating_t*>A.w
    cdef const floating_t* M = <const floating_t*>A.m
    cdef floating_t* D = <floating_t*>A.d
    cdef floating_t* E = <floating_t*>A.e
    cdef const floating_t* Mrow
    cdef intp_t r, k, label = -1
    cdef double wrow, l, acc = 0.0
    for r in range(r0, r1):
        wrow = W[r * A.ws] if W != NULL else 1.0
        Mrow = NULL
        if M != NULL:
            if A.m_out:
                Mrow = M + r * A.mr
            else:
                wrow *= M[r * A.mr]
        if wrow == 0:
            # masked out (or zero weight): contributes exactly 0, even with NaN predictions
            for k in range(A.c):
                if D != NULL:
                    D[r * A.dr + k * A.dc] = 0
                if E != NULL and not _row_kind(A.kind):
                    E[r * A.er + k * A.ec] = 0
            if E != NULL and _row_kind(A.kind):
                E[r * A.er] = 0
            continue
        if _row_kind(A.kind):
            if A.kind == LOSS_COSINE:
                l = _cosine_row(A, X + r * A.xr, T + r * A.tr, wrow * A.gscale,
                                (D + r * A.dr) if D != NULL else NULL)
            else:
                if A.lab != NULL:
                    label = ((<int64_t*>A.lab)[r * A.ls] if A.lab64
                             else (<int32_t*>A.lab)[r * A.ls])
                l = _sce_row(A, X + r * A.xr, (T + r * A.tr) if T != NULL else NULL, label,
                             Mrow, wrow * A.gscale, (D + r * A.dr) if D != NULL else NULL)
            if E != NULL:
                E[r * A.er] = <floating_t>(wrow * l)
            acc += wrow * l
        else:
            acc += wrow * _ew_loss_row(A, X + r * A.xr, T + r * A.tr, Mrow, wrow,
                                       wrow * A.gscale, (D + r * A.dr) if D != NULL else NULL,
                                       (E + r * A.er) if E != NULL else NULL)
    return acc


ctypedef struct _LossJob:
    const void* X
    const LossArgs* A
    double* part
    int nch
    bint f64


cdef void _loss_task(void* ctx, Py_ssize_t c) noexcept nogil:
    # chunk c's partial sum into its own slot: the total adds the slots in a fixed order, so
    # it does not depend on the thread count or on which thread ran which chunk
    cdef _LossJob* j = <_LossJob*>ctx
    cdef intp_t n = j.A.n
    if j.f64:
        j.part[c] = _loss_rows(<const float64_t*>j.X, j.A, c * n // j.nch, (c + 1) * n // j.nch)
    else:
        j.part[c] = _loss_rows(<const float32_t*>j.X, j.A, c * n // j.nch, (c + 1) * n // j.nch)


cdef double _loss_run(const floating_t* X, const LossArgs* A, int nthreads) noexcept nogil:
    cdef double part[LOSS_CHUNKS]
    cdef double total = 0.0
    cdef intp_t n = A.n
    cdef int c
    cdef _LossJob j
    j.X, j.A, j.part, j.f64 = X, A, part, floating_t is float64_t
    j.nch = <int>(n if n < LOSS_CHUNKS else LOSS_CHUNKS)
    run_tasks(_loss_task, &j, j.nch, nthreads)
    for c in range(j.nch):
        total += part[c]
    return total


cdef double _mask_count(const floating_t* M, const LossArgs* A) noexcept nogil:
    """The denominator of reduction="mean" when a mask is given (fixed order)."""
    cdef intp_t r, k
    cdef double cnt = 0.0
    cdef bint any_
    for r in range(A.n):
        if not A.m_out:
            cnt += M[r * A.mr] * (1 if _row_kind(A.kind) else A.c)
        elif A.kind == LOSS_SCE:
            any_ = False
            for k in range(A.c):
                if M[r * A.mr + k * A.mc] != 0:
                    any_ = True
            cnt += 1 if any_ else 0
        else:
            for k in range(A.c):
                cnt += M[r * A.mr + k * A.mc]
    return cnt


cdef inline void _rc(NDArray a, intp_t* rs, intp_t* cs) noexcept:
    # element strides of a (n,) or (n, c) operand viewed as (n, c)
    rs[0] = a._strides[0] // a._itemsize if a._ndim >= 1 else 0
    cs[0] = a._strides[1] // a._itemsize if a._ndim == 2 else 1


cdef LossArgs _A0     # all zero (static storage)


cdef object _loss_call(str op, int kind, object pred, object target, object weights,
                       object mask, object reduction, bint grad, object grad_out):
    cdef NDArray x, t = None, lab = None, w = None, m = None, d = None, e = None
    cdef NDArray gout = None
    cdef LossArgs A = _A0
    cdef intp_t n, c, r, v
    cdef double total, den
    cdef int nt
    cdef bint mean
    cdef str xname = "logits" if kind in (LOSS_SCE, LOSS_BCE) else "pred"
    cdef str tname = ("labels" if kind == LOSS_SCE else
                      "targets" if kind == LOSS_BCE else "target")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    mean = reduction == "mean"
    x = float_arg(pred, op, xname)
    if kind == LOSS_SCE and x._ndim != 2:
        raise ValueError(f"{op}: logits must be 2-D (n_samples, n_classes), got shape "
                         f"{shape_of(x)}")
    if kind == LOSS_COSINE and x._ndim != 2:
        raise ValueError(f"{op}: pred must be 2-D (n_samples, n_outputs), got shape "
                         f"{shape_of(x)}")
    if x._ndim not in (1, 2):
        raise ValueError(f"{op}: {xname} must be (n_samples,) or (n_samples, n_outputs), got "
                         f"shape {shape_of(x)}")
    n = x._shape[0]
    c = x._shape[1] if x._ndim == 2 else 1
    # targets: integer class indices (softmax cross-entropy only) or floats of x's shape
    if kind == LOSS_SCE and not isinstance(target, NDArray) and not isinstance(target,
                                                                                  np.ndarray):
        target = np.asarray(target)
        if target.dtype.kind == "f":
            target = target.astype(x._dtype, copy=False)
    if kind == LOSS_SCE and isinstance(target, NDArray):
        check_array(<NDArray>target, op, tname)
    tdt = target.dtype if kind == LOSS_SCE else None
    if tdt is not None and tdt.kind in "iu":
        if tdt not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise TypeError(f"{op}: integer labels must be int32 or int64, got dtype {tdt}")
        lab = target if isinstance(target, NDArray) else <NDArray>_from_numpy(target)
        if lab._ndim != 1 or lab._shape[0] != n:
            raise ValueError(f"{op}: integer labels must have shape ({n},), got {shape_of(lab)}")
        for r in range(n):
            v = ((<int64_t*>(lab._data + r * lab._strides[0]))[0] if lab._itemsize == 8
                 else (<int32_t*>(lab._data + r * lab._strides[0]))[0])
            if v < 0 or v >= c:
                raise ValueError(f"{op}: labels[{r}] = {v} is out of range for {c} classes")
    else:
        t = float_arg(target, op, tname, x._dtype)
        same_as(x, t, op, tname, xname)
    if weights is not None:
        w = float_arg(weights, op, "weights", x._dtype)
        if w._itemsize != x._itemsize:
            same_as(x, w, op, "weights", xname)      # raises the dtype TypeError
        if w._ndim != 1 or w._shape[0] != n:
            raise ValueError(f"{op}: weights must have shape ({n},), got {shape_of(w)}")
    if mask is not None:
        m = float_arg(mask, op, "mask", x._dtype)
        if m._itemsize != x._itemsize:
            same_as(x, m, op, "mask", xname)
        if not ((m._ndim == 1 and m._shape[0] == n) or
                (m._ndim == x._ndim and m._shape[0] == n and (m._ndim == 1 or m._shape[1] == c))):
            raise ValueError(f"{op}: mask must have shape ({n},) or {shape_of(x)}, got "
                             f"{shape_of(m)}")
        if kind == LOSS_COSINE and m._ndim != 1:
            # DL4J's LossCosineProximity throws here too: masking outputs would change the
            # norms, so a per-output mask has no meaning for it
            raise ValueError(f"{op}: mask must have shape ({n},) (one value per example: the "
                             f"cosine proximity has no per-output mask), got {shape_of(m)}")
    if grad:
        if grad_out is None:
            d = new_result(x._dtype, x._ndim, x._shape, op)
        else:
            gout = out_arg(grad_out, x, op, "grad_out", xname)
            d = gout
            if clashes(d, x) or clashes(d, t) or clashes(d, w) or clashes(d, m) or (
                    lab is not None and clashes(d, lab)):
                d = new_result(x._dtype, x._ndim, x._shape, op)
    try:
        if reduction == "none":
            if _row_kind(kind):
                e = new_result(x._dtype, 1, x._shape, op)
            else:
                e = new_result(x._dtype, x._ndim, x._shape, op)
        A.kind = kind
        A.n = n
        A.c = c
        A.x = x._data
        _rc(x, &A.xr, &A.xc)
        A.t = t._data if t is not None else NULL
        if t is not None:
            _rc(t, &A.tr, &A.tc)
        A.lab = lab._data if lab is not None else NULL
        A.ls = lab._strides[0] // lab._itemsize if lab is not None else 0
        A.lab64 = lab is not None and lab._itemsize == 8
        A.w = w._data if w is not None else NULL
        A.ws = w._strides[0] // w._itemsize if w is not None else 0
        A.m = m._data if m is not None else NULL
        A.m_out = m is not None and (m._ndim == 2 or (x._ndim == 1 and m._ndim == 1))
        if m is not None:
            _rc(m, &A.mr, &A.mc)
        A.d = d._data if d is not None else NULL
        if d is not None:
            _rc(d, &A.dr, &A.dc)
        A.e = e._data if e is not None else NULL
        if e is not None:
            _rc(e, &A.er, &A.ec)
        if x._ndim == 1 and m is not None:
            # a 1-D prediction has one output per example: its mask is both kinds at once
            A.m_out = True
            A.mc = 0
        A.gscale = 1.0
        nt = threads_for(n * c, GRAIN_NN_TRANSC) if n >= 2 else 1
        with nogil:
            if mean:
                if A.m == NULL:
                    den = <double>n * (1 if _row_kind(kind) else c)
                elif x._itemsize == 4:
                    den = _mask_count(<float32_t*>A.m, &A)
                else:
                    den = _mask_count(<float64_t*>A.m, &A)
                # a fully masked batch: loss 0 and a zero gradient (torch would give NaN)
                A.gscale = 1.0 / den if den != 0 else 0.0
            if x._itemsize == 4:
                total = _loss_run(<float32_t*>A.x, &A, nt)
            else:
                total = _loss_run(<float64_t*>A.x, &A, nt)
        if mean:
            total = total * A.gscale
    except BaseException:
        if e is not None:
            discard_result(e)
        if d is not None and d is not gout:
            discard_result(d)
        raise
    loss = e if reduction == "none" else total
    if not grad:
        return loss
    if gout is None:
        return loss, d
    if d is not gout:
        copy_into(d, gout)
        if e is None:
            discard_result(d)
    return loss, grad_out


def softmax_cross_entropy(logits, labels, weights=None, mask=None, reduction="mean",
                          grad=True, grad_out=None):
    """Softmax cross-entropy from logits, with its gradient (stable log-sum-exp).

    Per example ``l_i = -sum_k q_ik * log_softmax(x_i)_k``, where ``q`` is the label row
    (one-hot of an index, or probabilities) times the per-output mask; terms with
    ``q_ik == 0`` are skipped (so ``-inf`` logits of impossible classes give no NaN). With
    weights ``w`` and per-example mask ``m``: ``L = sum_i w_i m_i l_i``, and

    * ``reduction="sum"``: L;
    * ``reduction="mean"`` (default): L / N, N = n_samples without a mask, ``sum(m)`` with a
      per-example mask, the number of rows with a nonzero entry with a per-output mask (weights
      never enter N; a fully masked batch gives 0 and a zero gradient);
    * ``reduction="none"``: the per-example ``w_i m_i l_i``, (n_samples,) NDArray.

    Masked entries contribute exactly 0 to the loss and the gradient, even with NaN logits.

    Parameters
    ----------
    logits : (n_samples, n_classes) NDArray or array_like of float32 or float64
    labels : (n_samples, n_classes) float array (one-hot or probabilities, logits' dtype), or
        (n_samples,) int32/int64 class indices (ValueError when out of range)
    weights : (n_samples,) float array, optional
        Per-example weights.
    mask : (n_samples,) or (n_samples, n_classes) float array, optional
        Per-example or per-output mask (DL4J's label masks).
    reduction : {"mean", "sum", "none"}
    grad : bool
        Also return dL/dlogits (for "none": the gradient of the sum).
    grad_out : (n_samples, n_classes) NDArray or numpy.ndarray, optional
        Where to write the gradient (may be `logits` itself); else the current workspace.

    Returns
    -------
    loss : float, or (n_samples,) NDArray for reduction="none"
    dlogits : (n_samples, n_classes) NDArray of logits' dtype
        Only when `grad`: ``w_i m_i (sum_k q_ik * softmax(x_i) - q_i) / N``.
    """
    return _loss_call("softmax_cross_entropy", LOSS_SCE, logits, labels, weights, mask,
                      reduction, grad, grad_out)


def binary_cross_entropy_with_logits(logits, targets, weights=None, mask=None, reduction="mean",
                                     grad=True, grad_out=None):
    """Binary cross-entropy from logits, with its gradient.

    Per element ``l = max(x, 0) - x*t + log1p(exp(-|x|))`` (stable for any x; torch's
    formula), gradient ``sigmoid(x) - t``. ``L = sum_ij w_i m_ij l_ij``; ``"mean"`` divides by
    N = the number of elements (torch's mean) without a mask, ``sum(m) * n_outputs`` with a
    per-example mask, ``sum(m)`` with a per-output mask; ``"none"`` returns the per-element
    ``w_i m_ij l_ij`` with logits' shape. Masked entries contribute exactly 0.

    Parameters
    ----------
    logits : (n_samples, n_outputs) or (n_samples,) NDArray or array_like of float32/float64
    targets : same shape and dtype as logits, values in [0, 1]
    weights : (n_samples,) float array, optional
    mask : (n_samples,) or logits-shaped float array, optional
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : NDArray or numpy.ndarray of logits' shape, optional

    Returns
    -------
    loss : float, or NDArray of logits' shape for reduction="none"
    dlogits : NDArray of logits' shape and dtype (only when `grad`)
    """
    return _loss_call("binary_cross_entropy_with_logits", LOSS_BCE, logits, targets, weights,
                      mask, reduction, grad, grad_out)


def mse_loss(pred, target, weights=None, mask=None, reduction="mean", grad=True,
             grad_out=None):
    """Mean squared error with its gradient: per element ``l = (p - t)**2``, ``dl/dp =
    2 (p - t)``; reductions, weights and masks as in `binary_cross_entropy_with_logits`
    ("mean" without a mask divides by the number of elements, as torch's ``mse_loss``).

    Parameters
    ----------
    pred : (n_samples, n_outputs) or (n_samples,) NDArray or array_like of float32/float64
    target : same shape and dtype as pred
    weights : (n_samples,) float array, optional
    mask : (n_samples,) or pred-shaped float array, optional
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : NDArray or numpy.ndarray of pred's shape, optional

    Returns
    -------
    loss : float, or NDArray of pred's shape for reduction="none"
    dpred : NDArray of pred's shape and dtype (only when `grad`)
    """
    return _loss_call("mse_loss", LOSS_MSE, pred, target, weights, mask, reduction, grad,
                      grad_out)


def mae_loss(pred, target, weights=None, mask=None, reduction="mean", grad=True,
             grad_out=None):
    """Mean absolute error with its gradient: per element ``l = |p - t|``, ``dl/dp =
    sign(p - t)`` (0 where p == t, as torch); reductions, weights and masks as in
    `binary_cross_entropy_with_logits`.

    Parameters
    ----------
    pred : (n_samples, n_outputs) or (n_samples,) NDArray or array_like of float32/float64
    target : same shape and dtype as pred
    weights : (n_samples,) float array, optional
    mask : (n_samples,) or pred-shaped float array, optional
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : NDArray or numpy.ndarray of pred's shape, optional

    Returns
    -------
    loss : float, or NDArray of pred's shape for reduction="none"
    dpred : NDArray of pred's shape and dtype (only when `grad`)
    """
    return _loss_call("mae_loss", LOSS_MAE, pred, target, weights, mask, reduction, grad,
                      grad_out)


def cosine_proximity_loss(pred, target, weights=None, mask=None, reduction="mean", grad=True,
                          grad_out=None):
    """Cosine proximity (DL4J's ``COSINE_PROXIMITY``) with its gradient: per example
    ``l_i = -<p_i, t_i> / (max(|p_i|, 1e-5) * max(|t_i|, 1e-5))`` (ND4J's norm floor
    ``EPS_THRESHOLD``), gradient ``-(t_i - <p_i, t_i> / |p_i|**2 * p_i) / (|p_i| *
    max(|t_i|, 1e-5))`` (``-t_i / (1e-5 * max(|t_i|, 1e-5))`` where ``|p_i| < 1e-5``: the
    derivative of the floored score). Reductions and weights as `softmax_cross_entropy`
    ("mean" divides by the number of examples, or by ``sum(mask)``); the mask is per example
    only.

    Parameters
    ----------
    pred : (n_samples, n_outputs) NDArray or array_like of float32 or float64
    target : same shape and dtype as pred
    weights : (n_samples,) float array, optional
    mask : (n_samples,) float array, optional
        A per-output mask is a ValueError (as in DL4J).
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : (n_samples, n_outputs) NDArray or numpy.ndarray, optional

    Returns
    -------
    loss : float, or (n_samples,) NDArray for reduction="none"
    dpred : NDArray of pred's shape and dtype (only when `grad`)

    Examples
    --------
    >>> import ndws.nn.functional as F
    >>> F.cosine_proximity_loss([[1.0, 0.0], [0.0, 2.0]], [[3.0, 0.0], [1.0, 0.0]], grad=False)
    -0.5
    """
    return _loss_call("cosine_proximity_loss", LOSS_COSINE, pred, target, weights, mask,
                      reduction, grad, grad_out)


def hinge_loss(pred, target, weights=None, mask=None, reduction="mean", grad=True,
               grad_out=None):
    """Hinge loss (DL4J's ``HINGE``) with its gradient: per element ``l = max(0, 1 - t*p)``
    for labels ``t`` of -1 or +1 (DL4J's convention), ``dl/dp = -t`` where ``1 - t*p > 0``,
    else 0 (0 at the kink, as DL4J's); reductions, weights and masks as in
    `binary_cross_entropy_with_logits`.

    Parameters
    ----------
    pred : (n_samples, n_outputs) or (n_samples,) NDArray or array_like of float32/float64
    target : same shape and dtype as pred, values -1 or +1
    weights : (n_samples,) float array, optional
    mask : (n_samples,) or pred-shaped float array, optional
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : NDArray or numpy.ndarray of pred's shape, optional

    Returns
    -------
    loss : float, or NDArray of pred's shape for reduction="none"
    dpred : NDArray of pred's shape and dtype (only when `grad`)
    """
    return _loss_call("hinge_loss", LOSS_HINGE, pred, target, weights, mask, reduction, grad,
                      grad_out)


def squared_hinge_loss(pred, target, weights=None, mask=None, reduction="mean", grad=True,
                       grad_out=None):
    """Squared hinge loss (DL4J's ``SQUARED_HINGE``) with its gradient: per element
    ``l = max(0, 1 - t*p)**2`` for labels -1 or +1, ``dl/dp = -2 t max(0, 1 - t*p)``;
    reductions, weights and masks as in `binary_cross_entropy_with_logits`.

    Parameters
    ----------
    pred : (n_samples, n_outputs) or (n_samples,) NDArray or array_like of float32/float64
    target : same shape and dtype as pred, values -1 or +1
    weights : (n_samples,) float array, optional
    mask : (n_samples,) or pred-shaped float array, optional
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : NDArray or numpy.ndarray of pred's shape, optional

    Returns
    -------
    loss : float, or NDArray of pred's shape for reduction="none"
    dpred : NDArray of pred's shape and dtype (only when `grad`)
    """
    return _loss_call("squared_hinge_loss", LOSS_SQUARED_HINGE, pred, target, weights, mask,
                      reduction, grad, grad_out)


def kl_divergence_loss(pred, target, weights=None, mask=None, reduction="mean", grad=True,
                       grad_out=None):
    """Kullback-Leibler divergence of the predicted probabilities from the target ones (DL4J's
    ``KL_DIVERGENCE``) with its gradient: per element ``l = t' * log(t' / p')`` with ``t'``,
    ``p'`` clipped to ``[1e-5, 1]`` (DL4J's), ``dl/dp = -t' / max(p, 1e-5)`` (the derivative
    of that score inside the clip range; DL4J's ``-t / p`` divides by zero at ``p = 0``).
    `pred` holds probabilities (torch's ``kl_div`` takes log-probabilities instead);
    reductions, weights and masks as in `binary_cross_entropy_with_logits`.

    Parameters
    ----------
    pred : (n_samples, n_outputs) or (n_samples,) NDArray or array_like of float32/float64
    target : same shape and dtype as pred, probabilities
    weights : (n_samples,) float array, optional
    mask : (n_samples,) or pred-shaped float array, optional
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : NDArray or numpy.ndarray of pred's shape, optional

    Returns
    -------
    loss : float, or NDArray of pred's shape for reduction="none"
    dpred : NDArray of pred's shape and dtype (only when `grad`)
    """
    return _loss_call("kl_divergence_loss", LOSS_KLD, pred, target, weights, mask, reduction,
                      grad, grad_out)


def poisson_loss(pred, target, weights=None, mask=None, reduction="mean", grad=True,
                 grad_out=None):
    """Poisson loss (DL4J's ``POISSON``) with its gradient: per element ``l = p - t*log(p)``,
    ``dl/dp = 1 - t/p``, for a predicted rate ``p > 0``; a zero target contributes ``p`` and
    gradient 1 (``0 * log 0 = 0``: DL4J's gives NaN at ``p = 0``). Reductions, weights and
    masks as in `binary_cross_entropy_with_logits`.

    Parameters
    ----------
    pred : (n_samples, n_outputs) or (n_samples,) NDArray or array_like of float32/float64
    target : same shape and dtype as pred, counts >= 0
    weights : (n_samples,) float array, optional
    mask : (n_samples,) or pred-shaped float array, optional
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : NDArray or numpy.ndarray of pred's shape, optional

    Returns
    -------
    loss : float, or NDArray of pred's shape for reduction="none"
    dpred : NDArray of pred's shape and dtype (only when `grad`)
    """
    return _loss_call("poisson_loss", LOSS_POISSON, pred, target, weights, mask, reduction,
                      grad, grad_out)


def msle_loss(pred, target, weights=None, mask=None, reduction="mean", grad=True,
              grad_out=None):
    """Mean squared logarithmic error (DL4J's ``MEAN_SQUARED_LOGARITHMIC_ERROR``) with its
    gradient: per element ``l = (log1p(p) - log1p(t))**2``, ``dl/dp = 2 (log1p(p) -
    log1p(t)) / (1 + p)``; reductions, weights and masks as in
    `binary_cross_entropy_with_logits` ("mean" divides by the number of elements).

    Parameters
    ----------
    pred : (n_samples, n_outputs) or (n_samples,) NDArray or array_like of float32/float64
    target : same shape and dtype as pred, values > -1
    weights : (n_samples,) float array, optional
    mask : (n_samples,) or pred-shaped float array, optional
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : NDArray or numpy.ndarray of pred's shape, optional

    Returns
    -------
    loss : float, or NDArray of pred's shape for reduction="none"
    dpred : NDArray of pred's shape and dtype (only when `grad`)
    """
    return _loss_call("msle_loss", LOSS_MSLE, pred, target, weights, mask, reduction, grad,
                      grad_out)


def mape_loss(pred, target, weights=None, mask=None, reduction="mean", grad=True,
              grad_out=None):
    """Mean absolute percentage error (DL4J's ``MEAN_ABSOLUTE_PERCENTAGE_ERROR``) with its
    gradient: per element ``l = 100 |p - t| / max(|t|, 1e-5)``, ``dl/dp = 100 sign(p - t) /
    max(|t|, 1e-5)`` (DL4J divides by ``|t|`` itself: inf or NaN for a zero target; the
    floor is ND4J's ``EPS_THRESHOLD``); reductions, weights and masks as in
    `binary_cross_entropy_with_logits`.

    Parameters
    ----------
    pred : (n_samples, n_outputs) or (n_samples,) NDArray or array_like of float32/float64
    target : same shape and dtype as pred
    weights : (n_samples,) float array, optional
    mask : (n_samples,) or pred-shaped float array, optional
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : NDArray or numpy.ndarray of pred's shape, optional

    Returns
    -------
    loss : float, or NDArray of pred's shape for reduction="none"
    dpred : NDArray of pred's shape and dtype (only when `grad`)
    """
    return _loss_call("mape_loss", LOSS_MAPE, pred, target, weights, mask, reduction, grad,
                      grad_out)


def wasserstein_loss(pred, target, weights=None, mask=None, reduction="mean", grad=True,
                     grad_out=None):
    """Wasserstein (critic) loss (DL4J's ``WASSERSTEIN``) with its gradient: per element
    ``l = t * p``, ``dl/dp = t`` (labels +1 / -1 for the two distributions); reductions,
    weights and masks as in `binary_cross_entropy_with_logits`.

    Parameters
    ----------
    pred : (n_samples, n_outputs) or (n_samples,) NDArray or array_like of float32/float64
    target : same shape and dtype as pred
    weights : (n_samples,) float array, optional
    mask : (n_samples,) or pred-shaped float array, optional
    reduction : {"mean", "sum", "none"}
    grad : bool
    grad_out : NDArray or numpy.ndarray of pred's shape, optional

    Returns
    -------
    loss : float, or NDArray of pred's shape for reduction="none"
    dpred : NDArray of pred's shape and dtype (only when `grad`)
    """
    return _loss_call("wasserstein_loss", LOSS_WASSERSTEIN, pred, target, weights, mask,
                      reduction, grad, grad_out)
