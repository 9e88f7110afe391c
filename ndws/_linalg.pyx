"""ndws._linalg: the native matrix product (`matmul`, `gemm`) and its CPU dispatch.

The GEMM kernel is compiled once per instruction set (ndws._gemm_baseline, _gemm_avx2,
_gemm_avx512, all from ndws/_gemm_kernel.pxi). At import this module asks the CPU which of them
it can run (``__builtin_cpu_supports``), imports only the best of those (a module's own init code
is compiled with its ISA flags, so importing one the CPU lacks could crash) and keeps its table
of kernel pointers. ``NDWS_GEMM_ISA=baseline|avx2|avx512`` overrides the choice.

Examples
--------
>>> import ndws, ndws._linalg as la
>>> a = ndws.array([[1.0, 2.0], [3.0, 4.0]])
>>> la.matmul(a, a).tolist()
[[7.0, 10.0], [15.0, 22.0]]
>>> la.gemm(a, a, trans_b=True, alpha=2.0).tolist()
[[10.0, 22.0], [22.0, 50.0]]
>>> la.gemm_isa() in la.available_isas()
True
"""
cimport cython
from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.string cimport memcpy
cimport numpy as cnp

from ndws._core cimport NDArray, NDWS_MAXDIMS, pin_foreign
from ndws._dispatch cimport (Operand, read_operand, float_operand, operands_overlap,
                             self_overlapping, new_result, discard_result)
from ndws._threads cimport threads_for, GRAIN_GEMM_F32, GRAIN_GEMM_F64
from ndws._typedefs cimport float32_t, float64_t, intp_t
from ndws._gemm_types cimport GemmTable, epilogue_fn

import importlib
import importlib.util
import os

import numpy as np

from ndws._core import _float_dtypes as _core_float_dtypes

cnp.import_array()

__all__ = ["matmul", "gemm", "gemm_isa", "available_isas"]

cdef extern from *:
    """
    #include <string.h>
    /* Which of the GEMM modules this CPU (and OS: libgcc checks XGETBV for the AVX/AVX-512
       register state) can run. Only x86 with GCC/Clang can ask; elsewhere, baseline only. */
    static int ndws_cpu_supports(const char* isa) {
        if (strcmp(isa, "baseline") == 0)
            return 1;
    #if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
        __builtin_cpu_init();
        if (strcmp(isa, "avx2") == 0)
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        if (strcmp(isa, "avx512") == 0)
            return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
                && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq")
                && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    #endif
        return 0;
    }
    """
    int ndws_cpu_supports(const char* isa) nogil


# best first
ISAS = ("avx512", "avx2", "baseline")

cdef const GemmTable* _T = NULL
cdef object _table_module = None       # keeps the chosen module (and its table) alive
cdef object _F32, _F64
_F32, _F64 = _core_float_dtypes()


# ------------------------------------------------------------------------------------------------
# Dispatch

def _cpu_supports(name):
    """Whether this CPU (and OS) can run the GEMM module built for instruction set `name`."""
    return bool(ndws_cpu_supports(name.encode()))


def _built(name):
    # find_spec looks for the file without running the module's init code
    return importlib.util.find_spec(f"ndws._gemm_{name}") is not None


def available_isas():
    """Instruction sets this CPU can run whose GEMM module is built, best first.

    Returns
    -------
    list of str
        A subset of ``["avx512", "avx2", "baseline"]``.
    """
    return [name for name in ISAS if _cpu_supports(name) and _built(name)]


def gemm_isa():
    """The instruction set of the GEMM kernel in use (``"avx512"``, ``"avx2"`` or
    ``"baseline"``), for `ndws.show_config`."""
    return (<bytes>_T.isa).decode()


def _gemm_info():
    """Register and cache blocking of the kernel in use (for show_config and tests)."""
    return {"isa": gemm_isa(),
            "float32": {"mr": _T.mr_f32, "nr": _T.nr_f32, "mc": _T.mc_f32, "kc": _T.kc_f32,
                        "nc": _T.nc_f32},
            "float64": {"mr": _T.mr_f64, "nr": _T.nr_f64, "mc": _T.mc_f64, "kc": _T.kc_f64,
                        "nc": _T.nc_f64}}


def _use_isa(name, source="isa"):
    """Switch the GEMM kernel to instruction set `name` (tests use it to run every variant);
    returns the previous one. Raises ValueError, naming `source`, for an unknown name, an ISA
    this CPU cannot run, or a module that was not built."""
    global _T, _table_module
    if name not in ISAS:
        raise ValueError(f"{source}: expected one of {', '.join(ISAS)}, got {name!r}")
    if not _cpu_supports(name):
        raise ValueError(f"{source}: this CPU cannot run the {name!r} GEMM kernel "
                         f"(it can run: {', '.join(available_isas())})")
    if not _built(name):
        raise ValueError(f"{source}: the {name!r} GEMM kernel was not built "
                         f"(built and runnable here: {', '.join(available_isas())})")
    module = importlib.import_module(f"ndws._gemm_{name}")
    cdef const GemmTable* table = <const GemmTable*>PyCapsule_GetPointer(
        module.table(), b"ndws.GemmTable")
    previous = gemm_isa() if _T != NULL else None
    _T = table
    _table_module = module
    return previous


cdef const GemmTable* gemm_table() noexcept:
    return _T


def _scratch_allocations():
    """Packing-scratch (re)allocations so far by the kernel module in use (tests: a loop of
    same-sized calls must not allocate)."""
    return _T.scratch_allocations()


def _scratch_buffers():
    """Threads holding a packing-scratch buffer of the kernel module in use right now (tests:
    a thread's buffer is freed when the thread exits)."""
    return _T.scratch_buffers()


# ------------------------------------------------------------------------------------------------
# Operands: pointer, shape and element strides of an NDArray or a NumPy array, read directly
# (no memoryview, no buffer export per call).

# ------------------------------------------------------------------------------------------------
# The batched problem: C[b] := alpha * A[b] @ B[b] + beta * C[b] over broadcast batch dims.

ctypedef struct Batch:
    int nd                               # batch dimensions
    intp_t shape[NDWS_MAXDIMS]
    intp_t sa[NDWS_MAXDIMS]              # element strides per batch dimension (0: broadcast)
    intp_t sb[NDWS_MAXDIMS]
    intp_t sc[NDWS_MAXDIMS]
    intp_t m, n, k
    intp_t rs_a, cs_a, rs_b, cs_b, rs_c, cs_c
    char* a
    char* b
    char* c
    int f64


cdef int _run(Batch* p, double alpha, double beta, epilogue_fn ep, const void* ep_ctx
              ) except -1:
    """Run the kernel on every batch item, without the GIL. The thread count comes from one
    item's flops (items run one after another, each on the whole team)."""
    cdef intp_t idx[NDWS_MAXDIMS]
    cdef intp_t count = 1, it, oa = 0, ob = 0, oc = 0
    cdef int d, ret = 0, nt
    cdef intp_t item = 8 if p.f64 else 4
    for d in range(p.nd):
        count *= p.shape[d]
        idx[d] = 0
    if count == 0 or p.m == 0 or p.n == 0:
        return 0
    nt = threads_for(2 * p.m * p.n * p.k, GRAIN_GEMM_F64 if p.f64 else GRAIN_GEMM_F32)
    with nogil:
        for it in range(count):
            if p.f64:
                ret = _T.dgemm(p.m, p.n, p.k, alpha,
                               <const float64_t*>(p.a + oa * item), p.rs_a, p.cs_a,
                               <const float64_t*>(p.b + ob * item), p.rs_b, p.cs_b, beta,
                               <float64_t*>(p.c + oc * item), p.rs_c, p.cs_c, nt, ep, ep_ctx)
            else:
                ret = _T.sgemm(p.m, p.n, p.k, <float32_t>alpha,
                               <const float32_t*>(p.a + oa * item), p.rs_a, p.cs_a,
                               <const float32_t*>(p.b + ob * item), p.rs_b, p.cs_b,
                               <float32_t>beta,
                               <float32_t*>(p.c + oc * item), p.rs_c, p.cs_c, nt, ep, ep_ctx)
            if ret != 0:
                break
            # next batch index (row-major), moving the three offsets along
            d = p.nd - 1
            while d >= 0:
                idx[d] += 1
                oa += p.sa[d]
                ob += p.sb[d]
                oc += p.sc[d]
                if idx[d] < p.shape[d]:
                    break
                oa -= p.sa[d] * idx[d]
                ob -= p.sb[d] * idx[d]
                oc -= p.sc[d] * idx[d]
                idx[d] = 0
                d -= 1
    if ret != 0:
        raise MemoryError("gemm: could not allocate the packing scratch")
    return 0


cdef int _copy(const Operand* dst, const Operand* src) except -1:
    """dst[...] = src[...] for two operands of one shape and dtype (a temporary result into a
    strided `out`), without the GIL."""
    cdef intp_t idx[NDWS_MAXDIMS]
    cdef intp_t count = 1, it, od = 0, os_ = 0, j, n, sd, ss
    cdef int d, nd = dst.ndim
    cdef intp_t item = 8 if dst.f64 else 4
    if nd == 0:
        memcpy(dst.data, src.data, item)
        return 0
    for d in range(nd - 1):
        count *= dst.shape[d]
        idx[d] = 0
    n = dst.shape[nd - 1]
    sd = dst.strides[nd - 1]
    ss = src.strides[nd - 1]
    if count == 0 or n == 0:
        return 0
    with nogil:
        for it in range(count):
            if dst.f64:
                for j in range(n):
                    (<float64_t*>dst.data)[od + j * sd] = (<float64_t*>src.data)[os_ + j * ss]
            else:
                for j in range(n):
                    (<float32_t*>dst.data)[od + j * sd] = (<float32_t*>src.data)[os_ + j * ss]
            d = nd - 2
            while d >= 0:
                idx[d] += 1
                od += dst.strides[d]
                os_ += src.strides[d]
                if idx[d] < dst.shape[d]:
                    break
                od -= dst.strides[d] * idx[d]
                os_ -= src.strides[d] * idx[d]
                idx[d] = 0
                d -= 1
    return 0


cdef void _from_result(NDArray r, Operand* o) noexcept:
    cdef int i
    o.data = r._data
    o.ndim = r._ndim
    o.f64 = 1 if r._itemsize == 8 else 0
    for i in range(r._ndim):
        o.shape[i] = r._shape[i]
        o.strides[i] = r._strides[i] // r._itemsize


cdef int _plan(Batch* p, const Operand* A, const Operand* B, bint vec_a, bint vec_b,
               bint trans_a, bint trans_b, intp_t* shape) except -1:
    """Core dims and broadcast batch dims of op(A) @ op(B) into `p` (C's parts excluded) and the
    result shape into `shape`; returns the result's ndim, or a negative code when the shapes
    do not fit: -2 core (k) mismatch, -3 batch dimensions that do not broadcast."""
    cdef int nba = A.ndim - 2 if not vec_a else 0
    cdef int nbb = B.ndim - 2 if not vec_b else 0
    cdef int nd = nba if nba > nbb else nbb, d, da, db, ndim
    cdef intp_t ka, kb, ea, eb
    if vec_a:
        p.m = 1
        ka = A.shape[0]
        p.rs_a = 0
        p.cs_a = A.strides[0]
    elif not trans_a:
        p.m = A.shape[A.ndim - 2]
        ka = A.shape[A.ndim - 1]
        p.rs_a = A.strides[A.ndim - 2]
        p.cs_a = A.strides[A.ndim - 1]
    else:
        p.m = A.shape[A.ndim - 1]
        ka = A.shape[A.ndim - 2]
        p.rs_a = A.strides[A.ndim - 1]
        p.cs_a = A.strides[A.ndim - 2]
    if vec_b:
        p.n = 1
        kb = B.shape[0]
        p.rs_b = B.strides[0]
        p.cs_b = 0
    elif not trans_b:
        kb = B.shape[B.ndim - 2]
        p.n = B.shape[B.ndim - 1]
        p.rs_b = B.strides[B.ndim - 2]
        p.cs_b = B.strides[B.ndim - 1]
    else:
        kb = B.shape[B.ndim - 1]
        p.n = B.shape[B.ndim - 2]
        p.rs_b = B.strides[B.ndim - 1]
        p.cs_b = B.strides[B.ndim - 2]
    if ka != kb:
        return -2
    p.k = ka
    p.nd = nd
    for d in range(nd):
        da = d - (nd - nba)
        db = d - (nd - nbb)
        ea = A.shape[da] if da >= 0 else 1
        eb = B.shape[db] if db >= 0 else 1
        if ea != eb and ea != 1 and eb != 1:
            return -3
        p.shape[d] = ea if ea != 1 else eb
        p.sa[d] = A.strides[da] if da >= 0 and ea != 1 else 0
        p.sb[d] = B.strides[db] if db >= 0 and eb != 1 else 0
        shape[d] = p.shape[d]
    ndim = nd
    if not vec_a:
        shape[ndim] = p.m
        ndim += 1
    if not vec_b:
        shape[ndim] = p.n
        ndim += 1
    p.a = A.data
    p.b = B.data
    p.f64 = A.f64
    return ndim


cdef void _place_c(Batch* p, const Operand* C, bint vec_a, bint vec_b) noexcept:
    # C's strides into the plan; the missing axis of a 1-D result (extent 1) gets stride 0
    cdef int d, nd = C.ndim
    cdef intp_t last = C.strides[nd - 1] if nd > 0 else 0
    if vec_a and vec_b:
        p.rs_c = 0
        p.cs_c = 1
    elif vec_b:
        p.rs_c = last
        p.cs_c = 0
    elif vec_a:
        p.rs_c = 0
        p.cs_c = last
    else:
        p.rs_c = C.strides[nd - 2]
        p.cs_c = last
    for d in range(p.nd):
        p.sc[d] = C.strides[d]
    p.c = C.data


cdef object _shape_tuple(const intp_t* shape, int nd):
    return tuple([shape[i] for i in range(nd)])


cdef object _compute(Batch* p, object x_out, Operand* C, const Operand* A, const Operand* B,
                     int ndim, intp_t* shape, bint vec_a, bint vec_b, double alpha,
                     double beta, str op):
    """Result placement shared by matmul and gemm: a new array in the current workspace, or
    `out` (through a temporary when `out` overlaps an input)."""
    cdef NDArray res, tmp
    cdef Operand T
    dtype = _F64 if A.f64 else _F32
    if x_out is None:
        res = new_result(dtype, ndim, shape, op)
        try:
            _from_result(res, C)
            _place_c(p, C, vec_a, vec_b)
            _run(p, alpha, beta, NULL, NULL)
        except BaseException:
            discard_result(res)
            raise
        return res
    if not (operands_overlap(C, A) or operands_overlap(C, B)):
        _place_c(p, C, vec_a, vec_b)
        _run(p, alpha, beta, NULL, NULL)
        return x_out
    # `a @= b`, out=a: the kernel reads A while writing C, so compute into a temporary (taken
    # from the current workspace and given back right after) and copy
    tmp = new_result(dtype, ndim, shape, op)
    try:
        _from_result(tmp, &T)
        if beta != 0:
            _copy(&T, C)
        _place_c(p, &T, vec_a, vec_b)
        _run(p, alpha, beta, NULL, NULL)
        _copy(C, &T)
    finally:
        discard_result(tmp)
    return x_out


# ------------------------------------------------------------------------------------------------
# Public entry points

def matmul(x1, x2, out=None):
    """Matrix product with NumPy's ``matmul`` rules, computed by the native GEMM.

    The native path covers float32 and float64 operands of one dtype (NDArrays or NumPy
    arrays, any strides that are whole elements) and an `out` of that dtype; for anything else
    it returns ``NotImplemented`` and `ndws.matmul` lets NumPy compute (the reference path,
    which also raises NumPy's errors for mismatched shapes).

    Parameters
    ----------
    x1 : (..., m, k) or (k,) NDArray of float32 or float64
    x2 : (..., k, n) or (k,) NDArray of the same dtype
    out : (..., m, n) NDArray, optional
        Written in place (may be `x1` or `x2`: ``a @= b`` is computed through a temporary).

    Returns
    -------
    (..., m, n) NDArray
        `out`, or a new array placed in the current workspace.
    """
    cdef Operand A, B, C
    cdef Batch p
    cdef intp_t shape[NDWS_MAXDIMS]
    cdef int ok1, ok2, ok3 = 1, ndim, d
    cdef bint vec_a, vec_b
    # another thread's arrays are read (and written) through pinned views, kept until return
    cdef object p1 = pin_foreign(x1, "matmul", "x1"), p2 = pin_foreign(x2, "matmul", "x2")
    cdef object pout = pin_foreign(out, "matmul", "out")
    # validate every NDArray argument before anything touches memory
    ok1 = read_operand(p1, "matmul", "x1", &A, False)
    ok2 = read_operand(p2, "matmul", "x2", &B, False)
    if out is not None:
        ok3 = read_operand(pout, "matmul", "out", &C, True)
    if not (ok1 and ok2 and ok3) or A.f64 != B.f64 or A.ndim == 0 or B.ndim == 0:
        return NotImplemented
    if out is not None and (C.f64 != A.f64 or self_overlapping(&C)):
        return NotImplemented
    vec_a = A.ndim == 1
    vec_b = B.ndim == 1
    ndim = _plan(&p, &A, &B, vec_a, vec_b, False, False, shape)
    if ndim < 0:
        return NotImplemented       # NumPy raises its own error on the fallback path
    if out is not None:
        if C.ndim != ndim:
            return NotImplemented
        for d in range(ndim):
            if C.shape[d] != shape[d]:
                return NotImplemented
    return _compute(&p, out, &C, &A, &B, ndim, shape, vec_a, vec_b, 1.0, 0.0, "matmul")


cdef double _scalar(object x, str name) except? -1:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer,
                                                              np.floating)):
        raise TypeError(f"gemm: {name} must be a real number, got {x!r}")
    return float(x)


@cython.wraparound(True)
def gemm(a, b, out=None, alpha=1.0, beta=0.0, trans_a=False, trans_b=False):
    """General matrix multiply, ``C := alpha*op(A) @ op(B) + beta*C``.

    Parameters
    ----------
    a : (..., m, k) NDArray of float32 or float64
        ``(..., k, m)`` when `trans_a`.
    b : (..., k, n) NDArray of the same dtype
        ``(..., n, k)`` when `trans_b`.
    out : (..., m, n) NDArray of that dtype, optional
        C. Required when ``beta != 0`` (it is read); may be `a` or `b`.
    alpha, beta : float
        Scale factors. ``beta == 0`` makes `out` write-only (NaN in it is ignored, BLAS's
        rule); ``alpha == 0`` or ``k == 0`` gives ``beta*C`` without reading A and B.
    trans_a, trans_b : bool
        Use the transpose of the last two axes (no copy: a transpose is only strides).

    Returns
    -------
    (..., m, n) NDArray
        `out`, or a new array placed in the current workspace. Leading (batch) axes broadcast
        as in `matmul`.
    """
    cdef Operand A, B, C
    cdef Batch p
    cdef intp_t shape[NDWS_MAXDIMS]
    cdef int ndim, d
    cdef double al, be
    # another thread's arrays are read (and written) through pinned views, kept until return
    cdef object pa = pin_foreign(a, "gemm", "a"), pb = pin_foreign(b, "gemm", "b")
    cdef object pout = pin_foreign(out, "gemm", "out")
    float_operand(pa, "a", &A, False, "gemm")
    float_operand(pb, "b", &B, False, "gemm")
    if out is not None:
        float_operand(pout, "out", &C, True, "gemm")
    al = _scalar(alpha, "alpha")
    be = _scalar(beta, "beta")
    if A.ndim < 2:
        raise ValueError(f"gemm: a must have at least 2 dimensions, got shape {a.shape}")
    if B.ndim < 2:
        raise ValueError(f"gemm: b must have at least 2 dimensions, got shape {b.shape}")
    if A.f64 != B.f64:
        raise TypeError(f"gemm: a and b must have the same dtype, got {a.dtype} and {b.dtype}")
    if out is not None and C.f64 != A.f64:
        raise TypeError(f"gemm: out must have dtype {a.dtype}, got {out.dtype}")
    if be != 0 and out is None:
        raise ValueError(f"gemm: beta={beta!r} reads C, so it requires out=")
    ndim = _plan(&p, &A, &B, False, False, bool(trans_a), bool(trans_b), shape)
    if ndim == -2:
        sa = tuple(a.shape[:-2]) + ((a.shape[-1], a.shape[-2]) if trans_a else tuple(a.shape[-2:]))
        sb = tuple(b.shape[:-2]) + ((b.shape[-1], b.shape[-2]) if trans_b else tuple(b.shape[-2:]))
        raise ValueError(f"gemm: op(a) has shape {sa} and op(b) has shape {sb}: "
                         f"k = {sa[-1]} != {sb[-2]}")
    if ndim == -3:
        raise ValueError(f"gemm: batch dimensions of a {a.shape[:-2]} and b {b.shape[:-2]} "
                         f"do not broadcast")
    if out is not None:
        if C.ndim != ndim or any(C.shape[d] != shape[d] for d in range(ndim)):
            raise ValueError(f"gemm: out has shape {out.shape}, expected "
                             f"{_shape_tuple(shape, ndim)}")
        if self_overlapping(&C):
            raise ValueError(f"gemm: out has a zero stride (strides {out.strides}): "
                             f"elements would overlap")
    return _compute(&p, out, &C, &A, &B, ndim, shape, False, False, al, be, "gemm")


cdef int gemm_arrays(NDArray a, NDArray b, NDArray c, double alpha, double beta,
                     bint trans_a, bint trans_b, epilogue_fn ep, const void* ep_ctx,
                     object op) except -1:
    cdef Operand A, B, C
    cdef Batch p
    cdef intp_t shape[NDWS_MAXDIMS]
    cdef int ndim
    if not (read_operand(a, op, "a", &A, False) and read_operand(b, op, "b", &B, False)
            and read_operand(c, op, "out", &C, True)):
        raise TypeError(f"{op}: expected writable float32/float64 arrays with whole-element "
                        f"strides, got {a.dtype}, {b.dtype} and {c.dtype}")
    if A.ndim != 2 or B.ndim != 2 or C.ndim != 2:
        raise ValueError(f"{op}: expected 2-D arrays, got shapes {a.shape}, {b.shape}, "
                         f"{c.shape}")
    if A.f64 != B.f64 or A.f64 != C.f64:
        raise TypeError(f"{op}: dtypes differ: {a.dtype}, {b.dtype}, {c.dtype}")
    ndim = _plan(&p, &A, &B, False, False, trans_a, trans_b, shape)
    if ndim < 0 or C.shape[0] != shape[0] or C.shape[1] != shape[1]:
        raise ValueError(f"{op}: shapes do not fit: {a.shape}{'.T' if trans_a else ''} @ "
                         f"{b.shape}{'.T' if trans_b else ''} into {c.shape}")
    if operands_overlap(&C, &A) or operands_overlap(&C, &B) or self_overlapping(&C):
        raise ValueError(f"{op}: out overlaps an input or itself")
    _place_c(&p, &C, False, False)
    return _run(&p, alpha, beta, ep, ep_ctx)


ctypedef struct _TraceCtx:
    int f64
    int* hits                   # one counter per element of C (row-major m x n)
    intp_t n


cdef void _trace_epilogue(const void* ctx, void* c, intp_t i0, intp_t j0, intp_t m, intp_t n,
                          intp_t rs_c, intp_t cs_c) noexcept nogil:
    # Tiles are disjoint, so threads never write the same counter or element.
    cdef const _TraceCtx* t = <const _TraceCtx*>ctx
    cdef intp_t i, j
    for i in range(m):
        for j in range(n):
            t.hits[(i0 + i) * t.n + j0 + j] += 1
            if t.f64:
                (<float64_t*>c)[i * rs_c + j * cs_c] += 1
            else:
                (<float32_t*>c)[i * rs_c + j * cs_c] += 1


def _gemm_traced(NDArray a, NDArray b, NDArray out, double alpha=1.0, double beta=0.0,
                 bint trans_a=False, bint trans_b=False):
    """`gemm_arrays` with an epilogue that adds 1 to each element of every tile it is handed
    and counts the visits (tests: each element exactly once, after its final value)."""
    cdef _TraceCtx t
    hits = np.zeros(out.shape, dtype=np.intc)
    cdef int[:, ::1] h = hits
    t.f64 = out.dtype == _F64
    t.n = out.shape[1]
    t.hits = &h[0, 0] if hits.size else NULL
    gemm_arrays(a, b, out, alpha, beta, trans_a, trans_b, _trace_epilogue, &t, "gemm")
    return hits


def _pack_b(b):
    """B (a 2-D float32/float64 NumPy array, any strides) packed for `_gemm_packed_b`, as a
    1-D array of its dtype (tests and bench/bench_rnn.py: the time loops' recurrent operand)."""
    cdef const GemmTable* t = _T
    cdef bint f64 = b.dtype == np.float64
    cdef intp_t k = b.shape[0], n = b.shape[1], item = 8 if f64 else 4
    pack = np.empty(max(1, t.packed_b_elems(k, n, f64)), b.dtype)
    cdef char* pb = <char*>cnp.PyArray_DATA(b)
    cdef char* pp = <char*>cnp.PyArray_DATA(pack)
    cdef intp_t rb = b.strides[0] // item, cb = b.strides[1] // item
    with nogil:
        if f64:
            t.pack_b_f64(k, n, <float64_t*>pb, rb, cb, <float64_t*>pp)
        else:
            t.pack_b_f32(k, n, <float32_t*>pb, rb, cb, <float32_t*>pp)
    return pack


def _gemm_packed_b(a, pack, intp_t n, double beta, out, int threads=1):
    """``out := a @ B + beta*out`` with B from `_pack_b` (n its columns; a, out float32/float64
    NumPy arrays of its dtype, any strides); returns out. The same bits as `gemm` wherever gemm
    runs its tiled product (m, n > 1)."""
    cdef const GemmTable* t = _T
    cdef bint f64 = a.dtype == np.float64
    cdef intp_t m = a.shape[0], k = a.shape[1], item = 8 if f64 else 4
    cdef char* pa = <char*>cnp.PyArray_DATA(a)
    cdef char* pc = <char*>cnp.PyArray_DATA(out)
    cdef char* pp = <char*>cnp.PyArray_DATA(pack)
    cdef intp_t ra = a.strides[0] // item, ca = a.strides[1] // item
    cdef intp_t rc = out.strides[0] // item, cc = out.strides[1] // item
    cdef int ret
    with nogil:
        if f64:
            ret = t.dgemm_packed_b(m, n, k, 1.0, <float64_t*>pa, ra, ca, <float64_t*>pp, beta,
                                   <float64_t*>pc, rc, cc, threads)
        else:
            ret = t.sgemm_packed_b(m, n, k, 1.0, <float32_t*>pa, ra, ca, <float32_t*>pp,
                                   <float32_t>beta, <float32_t*>pc, rc, cc, threads)
    if ret != 0:
        raise MemoryError("gemm: could not allocate the packing scratch")
    return out


# ------------------------------------------------------------------------------------------------
# Import: pick the kernel, then install the native matmul in front of NumPy's.

def _choose():
    env = os.environ.get("NDWS_GEMM_ISA")
    if env:
        _use_isa(env.strip().lower(), "NDWS_GEMM_ISA")
        return
    for name in available_isas():
        _use_isa(name)
        return
    raise ImportError("ndws._linalg: no GEMM kernel module is built (ndws._gemm_baseline "
                      "missing): rebuild with `pip install -e .`")


_choose()
