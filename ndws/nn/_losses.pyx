"""Native losses with their gradients in one pass (`ndws.nn.functional`'s losses).

Conventions (inputs, dtypes, out=, placement) are those of `ndws.nn.functional`.
"""
cimport numpy as cnp
from libc.math cimport log

import numpy as np

from ndws._core cimport NDArray, check_array
from ndws._dispatch cimport (new_result, discard_result, float_arg, out_arg, same_as, clashes,
                             shape_of)
from ndws._threads cimport threads_for, run_tasks, GRAIN_NN_TRANSC
from ndws._typedefs cimport float32_t, float64_t, floating_t, int32_t, int64_t, intp_t
from ndws.nn._activations cimport copy_into
from ndws.nn._math cimport _exp, _fabs, _log1p, _sigmoid
from ndws._core import from_numpy as _from_numpy

cnp.import_array()

# Losses reduce in a fixed number of row chunks that depends only on the row count, summed in
# order afterwards: the loss is bit-identical whatever the thread count.
cdef enum:
    LOSS_CHUNKS = 64

cdef enum:
    LOSS_SCE = 0
    LOSS_BCE = 1
    LOSS_MSE = 2
    LOSS_MAE = 3


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
    cdef intp_t k, c = A.c, xc = A.xc, tc = A.tc, mc = A.mc, dc = A.dc
    cdef floating_t mx = X__k[0], q
    cdef double s = 0.0, lse, loss = 0.0, qsum = 0.0
    for k in range(1, c):
        if X__k[k * xc] > mx:
            mx = X__k[k * xc]
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
        else:
            for k in range(c):
                if label >= 0:
                    q = (M__k[label * mc] if M__k != NULL else 1) if k == label else 0
                else:
                    q = T__k[k * tc] * (M__k[k * mc] if M__k != NULL else 1)
                D__k[k * dc] = <floating_t>(coef * (qsum * _exp(<floating_t>(X__k[k * xc] - lse))
                                                    - q))
    return loss


cdef double _ew_loss_row(const LossArgs* A, const floating_t* X__k, const floating_t* T__k,
                         const floating_t* M__k, double wrow, double coef,
                         floating_t* D__k, floating_t* E__k) noexcept nogil:
    # elementwise losses of one row: sum_k m_k * l(x_k, t_k); gradient coef * m_k * dl/dx_k
    cdef intp_t k, c = A.c
    cdef floating_t v, t, mk, l, dl, diff
    cdef double acc = 0.0
    for k in range(c):
        mk = M__k[k * A.mc] if M__k != NULL else 1
        if mk == 0:
            if D__k != NULL:
                D__k[k * A.dc] = 0
            if E__k != NULL:
                E__k[k * A.ec] = 0
            continue
        v = X__k[k * A.xc]
        t = T__k[k * A.tc]
        if A.kind == LOSS_BCE:
            # max(x, 0) - x*t + log1p(exp(-|x|)): no overflow for any x
            l = (v if v > 0 else 0) - v * t + _log1p(_exp(-_fabs(v)))
            dl = _sigmoid(v) - t
        elif A.kind == LOSS_MSE:
            diff = v - t
            l = diff * diff
            dl = 2 * diff
        else:
            diff = v - t
            l = _fabs(diff)
            dl = 1 if diff > 0 else (-1 if diff < 0 else diff)    # sign; 0 at 0, NaN at NaN
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
                if E != NULL and A.kind != LOSS_SCE:
                    E[r * A.er + k * A.ec] = 0
            if E != NULL and A.kind == LOSS_SCE:
                E[r * A.er] = 0
            continue
        if A.kind == LOSS_SCE:
            if A.lab != NULL:
                label = ((<int64_t*>A.lab)[r * A.ls] if A.lab64
                         else (<int32_t*>A.lab)[r * A.ls])
            l = _sce_row(A, X + r * A.xr, (T + r * A.tr) if T != NULL else NULL, label, Mrow,
                         wrow * A.gscale, (D + r * A.dr) if D != NULL else NULL)
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
            cnt += M[r * A.mr] * (A.c if A.kind != LOSS_SCE else 1)
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
    if grad:
        if grad_out is None:
            d = new_result(x._dtype, x._ndim, x._shape, op)
        else:
            gout = out_arg(grad_out, x, op, "grad_out", "logits")
            d = gout
            if clashes(d, x) or clashes(d, t) or clashes(d, w) or clashes(d, m) or (
                    lab is not None and clashes(d, lab)):
                d = new_result(x._dtype, x._ndim, x._shape, op)
    try:
        if reduction == "none":
            if kind == LOSS_SCE:
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
                    den = <double>n * (c if kind != LOSS_SCE else 1)
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
