"""Native fused in-place updaters (`ndws.nn.functional`'s sgd/momentum/adam/adamw/rmsprop/
adagrad).

Conventions (inputs, dtypes, out=, placement) are those of `ndws.nn.functional`.
"""
cimport numpy as cnp
from libc.math cimport sqrt

import numpy as np

from ndws._core cimport NDArray, _c_contiguous
from ndws._dispatch cimport float_arg, same_as, whole_strides, arrays_overlap, real_arg
from ndws._threads cimport (threads_for, release_gil, run_tasks, GRAIN_NN_CHEAP,
                            GRAIN_NN_UPDATE)
from ndws._typedefs cimport float32_t, float64_t, floating_t, intp_t

cnp.import_array()

cdef extern from "_upd_loops.h" nogil:
    # the loops, built per instruction set (see the header)
    enum:
        UPD_SGD "NDWS_UPD_SGD"
        UPD_MOMENTUM "NDWS_UPD_MOMENTUM"
        UPD_ADAM "NDWS_UPD_ADAM"
        UPD_RMSPROP "NDWS_UPD_RMSPROP"
        UPD_ADAGRAD "NDWS_UPD_ADAGRAD"
    ctypedef struct Hyper "ndws_hyper":
        int kind
        bint nesterov
        double lr, mu, b1, b2, eps, wd, step_size, bc2_sqrt
    void ndws_upd_f32(const Hyper* h, float32_t* P, const float32_t* G, float32_t* S,
                      float32_t* V, intp_t n)
    void ndws_upd_f64(const Hyper* h, float64_t* P, const float64_t* G, float64_t* S,
                      float64_t* V, intp_t n)


# ------------------------------------------------------------------------------------------------
# Updaters: fused in-place loops over a flat parameter array, its gradient and state arrays
# (PyTorch's formulas and defaults: ndws' DL4J reference states none for updaters).

cdef inline void _upd_chunk(const Hyper* h, floating_t* P__i, const floating_t* G__i,  # OUT, IN
                            floating_t* S__i, floating_t* V__i,                     # OUT, OUT
                            intp_t n) noexcept nogil:
    if floating_t is float32_t:
        ndws_upd_f32(h, P__i, G__i, S__i, V__i, n)
    else:
        ndws_upd_f64(h, P__i, G__i, S__i, V__i, n)


ctypedef struct _UpdJob:
    const Hyper* h
    void* P
    const void* G
    void* S
    void* V
    intp_t n
    Py_ssize_t ntasks
    bint f64


cdef void _upd_task(void* ctx, Py_ssize_t c) noexcept nogil:
    # task c of ntasks: a fixed range cut on 16-element boundaries (no cache line shared
    # between threads)
    cdef _UpdJob* j = <_UpdJob*>ctx
    cdef intp_t lo = (c * j.n // j.ntasks) & ~(<intp_t>15)
    cdef intp_t hi = j.n if c == j.ntasks - 1 else ((c + 1) * j.n // j.ntasks) & ~(<intp_t>15)
    if j.f64:
        _upd_chunk(j.h, <float64_t*>j.P + lo, <const float64_t*>j.G + lo,
                   (<float64_t*>j.S + lo) if j.S != NULL else NULL,
                   (<float64_t*>j.V + lo) if j.V != NULL else NULL, hi - lo)
    else:
        _upd_chunk(j.h, <float32_t*>j.P + lo, <const float32_t*>j.G + lo,
                   (<float32_t*>j.S + lo) if j.S != NULL else NULL,
                   (<float32_t*>j.V + lo) if j.V != NULL else NULL, hi - lo)


cdef void _upd_run(const Hyper* h, floating_t* P, const floating_t* G, floating_t* S,
                   floating_t* V, intp_t n, int nthreads) noexcept nogil:
    cdef _UpdJob j
    if nthreads <= 1:
        _upd_chunk(h, P, G, S, V, n)
        return
    # a few ranges per thread, on the one kernel pool (ndws._threads)
    j.h, j.P, j.G, j.S, j.V, j.n = h, P, G, S, V, n
    j.ntasks = 4 * nthreads
    j.f64 = floating_t is float64_t
    run_tasks(_upd_task, &j, j.ntasks, nthreads)


cdef NDArray _upd_arg(object x, str op, str role, NDArray like, bint write):
    cdef NDArray a
    if write and not isinstance(x, (NDArray, np.ndarray)):
        raise TypeError(f"{op}: {role} must be an NDArray or numpy.ndarray (updated in place), "
                        f"got {type(x).__name__}")
    if write and not (x.flags.c_contiguous if isinstance(x, np.ndarray)
                      else whole_strides(<NDArray>x) and _c_contiguous(<NDArray>x)):
        # checked before _arg, which would make a contiguous copy: the update would then go
        # to the copy and the caller's array would never change
        raise ValueError(f"{op}: {role} must be C-contiguous to be updated in place, got "
                         f"strides {x.strides}")
    a = float_arg(x, op, role, like._dtype if like is not None else None)
    if like is not None:
        same_as(like, a, op, role, "param")
    if not _c_contiguous(a):
        raise ValueError(f"{op}: {role} must be C-contiguous (updaters run over flat arrays)")
    if write and not a._writeable:
        raise ValueError(f"{op}: {role} is read-only")
    return a


cdef double _hyper(object v, str op, str role, double lo, double hi, bint hi_open) except? -1.0:
    cdef double f = real_arg(v, op, role)
    if not (f >= lo and (f < hi if hi_open else f <= hi)):
        raise ValueError(f"{op}: {role} must be in [{lo:g}, {hi:g}{')' if hi_open else ']'}, "
                         f"got {v!r}")
    return f


cdef object _update(str op, Hyper* h, object param, object grad, object s1, object s2):
    cdef NDArray p = _upd_arg(param, op, "param", None, True)
    cdef NDArray g = _upd_arg(grad, op, "grad", p, False)
    cdef NDArray a = None, b = None
    cdef int nt, i, j
    if s1 is not None:
        a = _upd_arg(s1[1], op, s1[0], p, True)
    if s2 is not None:
        b = _upd_arg(s2[1], op, s2[0], p, True)
    # the kernel updates param and the state in one pass: arrays that share memory would read
    # values it has already written (adam_update(p, g, m, m, ...)), so refuse them all
    cdef list args = [("param", p), ("grad", g)]
    if a is not None:
        args.append((s1[0], a))
    if b is not None:
        args.append((s2[0], b))
    for i in range(len(args)):
        for j in range(i + 1, len(args)):
            if arrays_overlap(<NDArray>args[i][1], <NDArray>args[j][1]):
                raise ValueError(f"{op}: {args[i][0]} and {args[j][0]} share memory; each must "
                                 f"be an array of its own")
    nt = threads_for(p._size, GRAIN_NN_CHEAP if h.kind <= UPD_MOMENTUM else GRAIN_NN_UPDATE)
    if p._itemsize == 4:
        if release_gil(p._size * p._itemsize, nt):
            with nogil:
                _upd_run(h, <float32_t*>p._data, <float32_t*>g._data,
                         <float32_t*>(a._data if a is not None else NULL),
                         <float32_t*>(b._data if b is not None else NULL), p._size, nt)
        else:
            _upd_run(h, <float32_t*>p._data, <float32_t*>g._data,
                     <float32_t*>(a._data if a is not None else NULL),
                     <float32_t*>(b._data if b is not None else NULL), p._size, nt)
    else:
        if release_gil(p._size * p._itemsize, nt):
            with nogil:
                _upd_run(h, <float64_t*>p._data, <float64_t*>g._data,
                         <float64_t*>(a._data if a is not None else NULL),
                         <float64_t*>(b._data if b is not None else NULL), p._size, nt)
        else:
            _upd_run(h, <float64_t*>p._data, <float64_t*>g._data,
                     <float64_t*>(a._data if a is not None else NULL),
                     <float64_t*>(b._data if b is not None else NULL), p._size, nt)
    return param


cdef double _INF = float("inf")
cdef Hyper _H0        # all zero (static storage): the start of every Hyper


def sgd_update(param, grad, lr):
    """Plain SGD, in place: ``p := p - lr * g``.

    Parameters
    ----------
    param : NDArray or numpy.ndarray of float32 or float64, C-contiguous, writeable
    grad : same shape and dtype as param, C-contiguous
    lr : float >= 0

    Returns
    -------
    param
    """
    cdef Hyper h = _H0
    h.kind = UPD_SGD
    h.lr = _hyper(lr, "sgd_update", "lr", 0.0, _INF, False)
    return _update("sgd_update", &h, param, grad, None, None)


def momentum_update(param, grad, velocity, lr, momentum=0.9, nesterov=False):
    """SGD with momentum (torch's, dampening 0), in place:
    ``v := momentum*v + g; p := p - lr * (g + momentum*v if nesterov else v)``.

    Parameters
    ----------
    param : NDArray or numpy.ndarray of float32 or float64, C-contiguous, writeable
    grad : same shape and dtype as param
    velocity : same shape and dtype as param, writeable; start at zeros
    lr : float >= 0
    momentum : float in [0, 1]
    nesterov : bool

    Returns
    -------
    param
    """
    cdef Hyper h = _H0
    h.kind = UPD_MOMENTUM
    h.lr = _hyper(lr, "momentum_update", "lr", 0.0, _INF, False)
    h.mu = _hyper(momentum, "momentum_update", "momentum", 0.0, 1.0, False)
    if not isinstance(nesterov, (bool, np.bool_)):
        raise TypeError(f"momentum_update: nesterov must be a bool, got {nesterov!r:.40}")
    h.nesterov = bool(nesterov)
    return _update("momentum_update", &h, param, grad, ("velocity", velocity), None)


cdef object _adam(str op, object param, object grad, object m, object v, object step,
                  object lr, object beta1, object beta2, object eps, object weight_decay):
    cdef Hyper h = _H0
    cdef long long t
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"{op}: step must be an int (the 1-based number of this update), "
                        f"got {step!r}")
    if not 1 <= step < 2**63:
        raise ValueError(f"{op}: step must be in [1, 2**63) (the 1-based number of this "
                         f"update), got {step!r}")
    t = step
    h.kind = UPD_ADAM
    h.lr = _hyper(lr, op, "lr", 0.0, _INF, False)
    h.b1 = _hyper(beta1, op, "beta1", 0.0, 1.0, True)
    h.b2 = _hyper(beta2, op, "beta2", 0.0, 1.0, True)
    h.eps = _hyper(eps, op, "eps", 0.0, _INF, False)
    h.wd = _hyper(weight_decay, op, "weight_decay", 0.0, _INF, False)
    h.step_size = h.lr / (1.0 - h.b1 ** t)
    h.bc2_sqrt = sqrt(1.0 - h.b2 ** t)
    return _update(op, &h, param, grad, ("m", m), ("v", v))


def adam_update(param, grad, m, v, step, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
    """Adam (torch's formulation), in place:
    ``m := b1*m + (1-b1)*g; v := b2*v + (1-b2)*g**2;
    p := p - lr/(1-b1**step) * m / (sqrt(v)/sqrt(1-b2**step) + eps)``.

    Parameters
    ----------
    param : NDArray or numpy.ndarray of float32 or float64, C-contiguous, writeable
    grad : same shape and dtype as param
    m, v : same shape and dtype as param, writeable; first and second moments, start at zeros
    step : int >= 1
        The number of this update (1 for the first).
    lr : float >= 0
    beta1, beta2 : float in [0, 1)
    eps : float >= 0

    Returns
    -------
    param
    """
    return _adam("adam_update", param, grad, m, v, step, lr, beta1, beta2, eps, 0.0)


def adamw_update(param, grad, m, v, step, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                 weight_decay=1e-2):
    """AdamW (decoupled weight decay, torch's), in place: ``p := p * (1 - lr*weight_decay)``,
    then the `adam_update` step.

    Parameters
    ----------
    param, grad, m, v, step, lr, beta1, beta2, eps
        As in `adam_update`.
    weight_decay : float >= 0

    Returns
    -------
    param
    """
    return _adam("adamw_update", param, grad, m, v, step, lr, beta1, beta2, eps, weight_decay)


def rmsprop_update(param, grad, sq, lr=1e-2, rho=0.99, eps=1e-8):
    """RMSProp (torch's, not centered, no momentum), in place:
    ``sq := rho*sq + (1-rho)*g**2; p := p - lr * g / (sqrt(sq) + eps)``.

    Parameters
    ----------
    param : NDArray or numpy.ndarray of float32 or float64, C-contiguous, writeable
    grad : same shape and dtype as param
    sq : same shape and dtype as param, writeable; running mean of squares, start at zeros
    lr : float >= 0
    rho : float in [0, 1]
        Decay (torch's ``alpha``, default 0.99; DL4J's RmsProp uses 0.95).
    eps : float >= 0

    Returns
    -------
    param
    """
    cdef Hyper h = _H0
    h.kind = UPD_RMSPROP
    h.lr = _hyper(lr, "rmsprop_update", "lr", 0.0, _INF, False)
    h.mu = _hyper(rho, "rmsprop_update", "rho", 0.0, 1.0, False)
    h.eps = _hyper(eps, "rmsprop_update", "eps", 0.0, _INF, False)
    return _update("rmsprop_update", &h, param, grad, ("sq", sq), None)


def adagrad_update(param, grad, hist, lr=1e-2, eps=1e-10):
    """AdaGrad (torch's), in place: ``hist := hist + g**2; p := p - lr * g / (sqrt(hist) +
    eps)``.

    Parameters
    ----------
    param : NDArray or numpy.ndarray of float32 or float64, C-contiguous, writeable
    grad : same shape and dtype as param
    hist : same shape and dtype as param, writeable; sum of squares, start at zeros
    lr : float >= 0
    eps : float >= 0

    Returns
    -------
    param
    """
    cdef Hyper h = _H0
    h.kind = UPD_ADAGRAD
    h.lr = _hyper(lr, "adagrad_update", "lr", 0.0, _INF, False)
    h.eps = _hyper(eps, "adagrad_update", "eps", 0.0, _INF, False)
    return _update("adagrad_update", &h, param, grad, ("hist", hist), None)
