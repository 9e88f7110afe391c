# Native element-wise and reduction kernels (included by _ufuncs.pyx; the operation codes are
# in _core.pxd, the vocabulary of NDArray's operator table).
#
# Two layers, as everywhere in ndws: `cdef ... noexcept nogil` loops over raw pointers and
# lengths (fused float32/float64; no Python objects, no memoryviews), and the dispatchers in
# _ufuncs.pyx ("Native fast paths") that validate, place the output and release the GIL. Every
# loop here reads and writes only the buffers its caller passes; the caller keeps the owning
# NDArrays (and so their MemoryBlocks) alive for the whole call.
#
# Floating-point semantics are NumPy's, bit for bit where NumPy's own loop is plain C
# (+ - * / max min neg abs square sqrt, and the summation order of np.add.reduce); the build
# never uses -ffast-math, so the compiler may not reassociate anything written here.

from libc.math cimport sqrt as c_sqrt, sqrtf, exp as c_exp, expf, log as c_log, logf
from libc.math cimport tanh as c_tanh, tanhf, fabs, fabsf
from ndws._typedefs cimport float32_t, float64_t, floating_t
from ndws._threads cimport run_blocks

cdef extern from "_cmath.h":
    void ndws_fpe_clear() noexcept nogil
    int ndws_fpe_read() noexcept nogil

cdef extern from "_cmath.h":
    void ndws_sqrt_loop_f32(float32_t* o, const float32_t* x, Py_ssize_t n) noexcept nogil
    void ndws_sqrt_loop_f64(float64_t* o, const float64_t* x, Py_ssize_t n) noexcept nogil


cdef extern from "_cmath.h":
    void ndws_exp_loop_f32(float32_t* o, const float32_t* x, Py_ssize_t n) noexcept nogil
    void ndws_tanh_loop_f32(float32_t* o, const float32_t* x, Py_ssize_t n) noexcept nogil


cdef extern from "_cmath.h":
    int ndws_give_fpe(const char* name, int flags) except -1


# With several threads a loop runs as static blocks on ndws' one helper pool (run_blocks; not
# OpenMP: docs/kernels.md, "Threads"), each described by a _Job whose `site` is the loop (_block
# in _ufuncs.pyx). A block reads its own thread's floating-point flags and returns them.
cdef enum:
    _ELEMENTWISE, _LEAF, _FLAT, _STRIDED
ctypedef struct _Job:
    int site, op               # the loop; the operation, or the reduction kind
    bint f64, xvec, yvec, squares
    void* O
    const void* X
    const void* Y              # NULL for unary_kernel; tree_sum: -> the mean
    int64_t* K
    void* S                    # leaf sums, chunk extremes, or the strided scratch
    Py_ssize_t* idx            # leaf offsets, or chunk arg-extremes
    Py_ssize_t* ln             # leaf lengths
    Py_ssize_t xrs, yrs, n, r, den, step, levels, cw, nch


# NumPy's pairwise-summation leaf size (PW_BLOCKSIZE in numpy/_core/src/umath/loops_utils.h.src):
# copying it makes our sums the same tree, so the same bits, as np.add.reduce's.
cdef enum:
    PW_BLOCKSIZE = 128


# -- element-wise ---------------------------------------------------------------------------------

@cython.cdivision(True)
cdef inline floating_t _bin1(int op, floating_t a, floating_t b) noexcept nogil:
    if op == OP_ADD:
        return a + b
    elif op == OP_SUB:
        return a - b
    elif op == OP_MUL:
        return a * b
    elif op == OP_DIV:
        return a / b
    elif op == OP_MAX:
        # NumPy's scalar_max_f: NaN from either side propagates; on a tie (0.0 vs -0.0) the
        # second operand wins, as in NumPy's loops
        return a if ((a > b) | (a != a)) else b
    else:
        # non-short-circuit `|`: both compares always run, so gcc if-converts and vectorises
        return a if ((a < b) | (a != a)) else b


cdef inline void _bin_rows_inl(int op, floating_t* O__ij,               # OUT
                               const floating_t* X__ij, Py_ssize_t xrs, bint xvec,  # IN
                               const floating_t* Y__ij, Py_ssize_t yrs, bint yvec,  # IN
                               Py_ssize_t m, Py_ssize_t n) noexcept nogil:
    # O[i, j] := X[i, j] op Y[i, j] for i < m, j < n; O is dense (row stride n), an operand's
    # row stride is `xrs`/`yrs` elements (0 for a broadcast row) and its column stride is 1
    # (`xvec`) or 0 (one value per row: a scalar or a column). Inlined with a constant `op`, so
    # gcc emits one vectorised loop per operation. O may be X or Y exactly (in-place ops): each
    # element is read before it is written at the same index.
    cdef Py_ssize_t i, j
    cdef floating_t s
    cdef floating_t* o
    cdef const floating_t* x
    cdef const floating_t* y
    for i in range(m):
        o = O__ij + i * n
        x = X__ij + i * xrs
        y = Y__ij + i * yrs
        if xvec and yvec:
            for j in range(n):
                o[j] = _bin1(op, x[j], y[j])
        elif xvec:
            s = y[0]
            for j in range(n):
                o[j] = _bin1(op, x[j], s)
        else:
            s = x[0]
            for j in range(n):
                o[j] = _bin1(op, s, y[j])


cdef void _bin_rows(int op, floating_t* O__ij,                                # OUT
                    const floating_t* X__ij, Py_ssize_t xrs, bint xvec,       # IN
                    const floating_t* Y__ij, Py_ssize_t yrs, bint yvec,       # IN
                    Py_ssize_t m, Py_ssize_t n) noexcept nogil:
    # one branch per operation, each an inlined copy with `op` constant
    if op == OP_ADD:
        _bin_rows_inl(OP_ADD, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)
    elif op == OP_SUB:
        _bin_rows_inl(OP_SUB, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)
    elif op == OP_MUL:
        _bin_rows_inl(OP_MUL, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)
    elif op == OP_DIV:
        _bin_rows_inl(OP_DIV, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)
    elif op == OP_MAX:
        _bin_rows_inl(OP_MAX, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)
    else:
        _bin_rows_inl(OP_MIN, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)


cdef int binary_kernel(int op, floating_t* O__ij,                             # OUT
                       const floating_t* X__ij, Py_ssize_t xrs, bint xvec,    # IN
                       const floating_t* Y__ij, Py_ssize_t yrs, bint yvec,    # IN
                       Py_ssize_t m, Py_ssize_t n, int nthreads) noexcept nogil:
    """O := X op Y over an (m, n) grid (see _bin_rows_inl); returns the NPY_FPE_* flags raised.

    With several threads, rows are split into static blocks, a single row (dense and scalar
    cases) into blocks of 64-column groups. Element-wise results do not depend on the split."""
    cdef _Job j
    if nthreads <= 1:
        ndws_fpe_clear()
        _bin_rows(op, O__ij, X__ij, xrs, xvec, Y__ij, yrs, yvec, m, n)
        return ndws_fpe_read()
    j.site, j.op, j.f64, j.xvec, j.yvec = _ELEMENTWISE, op, floating_t is float64_t, xvec, yvec
    j.O, j.X, j.Y, j.xrs, j.yrs, j.r, j.n = O__ij, X__ij, Y__ij, xrs, yrs, m, n
    return run_blocks(_block, &j, (n + 63) // 64 if m == 1 else m, nthreads, nthreads)


cdef inline int _ew_piece(floating_t* O, _Job* j, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    # binary_kernel's rows [lo, hi) or one row's columns [64 lo, 64 hi); unary_kernel's too
    cdef const floating_t* X = <const floating_t*>j.X
    cdef const floating_t* Y = <const floating_t*>j.Y
    if j.r == 1:               # (never an empty block: run_blocks makes at most n of them)
        lo, hi = lo * 64, (hi * 64 if hi * 64 < j.n else j.n)
    ndws_fpe_clear()
    if Y == NULL:
        _un_run(j.op, O + lo, X + lo, hi - lo)
    elif j.r > 1:
        _bin_rows(j.op, O + lo * j.n, X + lo * j.xrs, j.xrs, j.xvec, Y + lo * j.yrs, j.yrs,
                  j.yvec, hi - lo, j.n)
    else:
        _bin_rows(j.op, O + lo, X + (lo if j.xvec else 0), 0, j.xvec,
                  Y + (lo if j.yvec else 0), 0, j.yvec, 1, hi - lo)
    return ndws_fpe_read()


@cython.cdivision(True)
cdef inline floating_t _un1(int op, floating_t a) noexcept nogil:
    if op == OP_NEG:
        return -a
    elif op == OP_ABS:
        if floating_t is float32_t:
            return fabsf(a)
        else:
            return fabs(a)
    elif op == OP_SQUARE:
        return a * a
    elif op == OP_SQRT:
        if floating_t is float32_t:
            return sqrtf(a)
        else:
            return c_sqrt(a)
    elif op == OP_EXP:
        if floating_t is float32_t:
            return expf(a)
        else:
            return c_exp(a)
    elif op == OP_LOG:
        if floating_t is float32_t:
            return logf(a)
        else:
            return c_log(a)
    elif op == OP_TANH:
        if floating_t is float32_t:
            return tanhf(a)
        else:
            return c_tanh(a)
    else:
        return 1 / a


cdef inline void _un_run_inl(int op, floating_t* O__i, const floating_t* X__i,
                             Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        O__i[i] = _un1(op, X__i[i])


cdef void _un_run(int op, floating_t* O__i,            # OUT
                  const floating_t* X__i,              # IN
                  Py_ssize_t n) noexcept nogil:
    # O := f(X), element-wise; O may be X exactly.
    if op == OP_NEG:
        _un_run_inl(OP_NEG, O__i, X__i, n)
    elif op == OP_ABS:
        _un_run_inl(OP_ABS, O__i, X__i, n)
    elif op == OP_SQUARE:
        _un_run_inl(OP_SQUARE, O__i, X__i, n)
    elif op == OP_SQRT:
        if floating_t is float32_t:
            ndws_sqrt_loop_f32(O__i, X__i, n)
        else:
            ndws_sqrt_loop_f64(O__i, X__i, n)
    elif op == OP_EXP:
        if floating_t is float32_t:
            ndws_exp_loop_f32(O__i, X__i, n)
        else:
            _un_run_inl(OP_EXP, O__i, X__i, n)
    elif op == OP_LOG:
        _un_run_inl(OP_LOG, O__i, X__i, n)
    elif op == OP_TANH:
        if floating_t is float32_t:
            ndws_tanh_loop_f32(O__i, X__i, n)
        else:
            _un_run_inl(OP_TANH, O__i, X__i, n)
    else:
        _un_run_inl(OP_RECIP, O__i, X__i, n)


cdef int unary_kernel(int op, floating_t* O__i,        # OUT
                      const floating_t* X__i,          # IN
                      Py_ssize_t n, int nthreads) noexcept nogil:
    """O := f(X) over n dense elements (split as binary_kernel's one row); returns the flags."""
    cdef _Job j
    if nthreads <= 1:
        ndws_fpe_clear()
        _un_run(op, O__i, X__i, n)
        return ndws_fpe_read()
    j.site, j.op, j.f64, j.O, j.X = _ELEMENTWISE, op, floating_t is float64_t, O__i, X__i
    j.Y, j.r, j.n = NULL, 1, n
    return run_blocks(_block, &j, (n + 63) // 64, nthreads, nthreads)


# -- reductions: sums -----------------------------------------------------------------------------

cdef floating_t pairwise_sum(const floating_t* A__i, Py_ssize_t n) noexcept nogil:
    """sum(A[0:n]) by NumPy's pairwise summation (same tree, so the same bits as
    np.add.reduce; error O(log n * eps) instead of O(n * eps))."""
    cdef Py_ssize_t i, n2
    cdef floating_t res, r0, r1, r2, r3, r4, r5, r6, r7
    if n < 8:
        # -0.0 keeps the sign of a sum of negative zeros (as NumPy)
        res = -0.0
        for i in range(n):
            res = res + A__i[i]
        return res
    elif n <= PW_BLOCKSIZE:
        # eight independent accumulators: the order NumPy's loop uses (and gcc vectorises)
        r0 = A__i[0]; r1 = A__i[1]; r2 = A__i[2]; r3 = A__i[3]
        r4 = A__i[4]; r5 = A__i[5]; r6 = A__i[6]; r7 = A__i[7]
        i = 8
        while i < n - (n % 8):
            r0 = r0 + A__i[i]; r1 = r1 + A__i[i + 1]
            r2 = r2 + A__i[i + 2]; r3 = r3 + A__i[i + 3]
            r4 = r4 + A__i[i + 4]; r5 = r5 + A__i[i + 5]
            r6 = r6 + A__i[i + 6]; r7 = r7 + A__i[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res = res + A__i[i]
            i += 1
        return res
    else:
        # halve, keeping the left part a multiple of the unroll factor (NumPy's split)
        n2 = n // 2
        n2 -= n2 % 8
        return pairwise_sum(A__i, n2) + pairwise_sum(A__i + n2, n - n2)


cdef floating_t pairwise_ssd(const floating_t* A__i, Py_ssize_t n,
                             floating_t mu) noexcept nogil:
    """sum((A[0:n] - mu)**2), each deviation and square rounded to the dtype as NumPy's var
    computes them (x = a - mean; x = x*x; sum), summed over the same pairwise tree."""
    cdef Py_ssize_t i, n2
    cdef floating_t res, d, r0, r1, r2, r3, r4, r5, r6, r7
    cdef floating_t d0, d1, d2, d3, d4, d5, d6, d7
    if n < 8:
        res = -0.0
        for i in range(n):
            d = A__i[i] - mu
            res = res + d * d
        return res
    elif n <= PW_BLOCKSIZE:
        d0 = A__i[0] - mu; d1 = A__i[1] - mu; d2 = A__i[2] - mu; d3 = A__i[3] - mu
        d4 = A__i[4] - mu; d5 = A__i[5] - mu; d6 = A__i[6] - mu; d7 = A__i[7] - mu
        r0 = d0 * d0; r1 = d1 * d1; r2 = d2 * d2; r3 = d3 * d3
        r4 = d4 * d4; r5 = d5 * d5; r6 = d6 * d6; r7 = d7 * d7
        i = 8
        while i < n - (n % 8):
            d0 = A__i[i] - mu; d1 = A__i[i + 1] - mu; d2 = A__i[i + 2] - mu
            d3 = A__i[i + 3] - mu; d4 = A__i[i + 4] - mu; d5 = A__i[i + 5] - mu
            d6 = A__i[i + 6] - mu; d7 = A__i[i + 7] - mu
            r0 = r0 + d0 * d0; r1 = r1 + d1 * d1; r2 = r2 + d2 * d2; r3 = r3 + d3 * d3
            r4 = r4 + d4 * d4; r5 = r5 + d5 * d5; r6 = r6 + d6 * d6; r7 = r7 + d7 * d7
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            d = A__i[i] - mu
            res = res + d * d
            i += 1
        return res
    else:
        n2 = n // 2
        n2 -= n2 % 8
        return pairwise_ssd(A__i, n2, mu) + pairwise_ssd(A__i + n2, n - n2, mu)


# Leaves of the pairwise tree handed to threads: 2**_TREE_DEPTH of them. The tree is the serial
# one (same split rule), so a parallel sum has exactly the serial sum's bits whatever the
# thread count; the depth only decides how much work each task gets.
cdef enum:
    _TREE_DEPTH = 4
    _TREE_LEAVES = 16


cdef floating_t tree_sum(const floating_t* A__i, Py_ssize_t n, bint squares, floating_t mu,
                         int nthreads, int* flags) noexcept nogil:
    """pairwise_sum (or pairwise_ssd when `squares`) of A[0:n], leaves as pool blocks (their
    flags ORed into `flags`). Requires n > PW_BLOCKSIZE * 2**_TREE_DEPTH (all nodes split)."""
    cdef Py_ssize_t lo[_TREE_LEAVES]
    cdef Py_ssize_t ln[_TREE_LEAVES]
    cdef floating_t part[_TREE_LEAVES]
    cdef Py_ssize_t n2, width
    cdef int level, k, count
    cdef _Job j
    lo[0] = 0
    ln[0] = n
    count = 1
    for level in range(_TREE_DEPTH):
        # split every node in place, right halves after left ones: node k -> 2k, 2k+1
        for k in range(count - 1, -1, -1):
            n2 = ln[k] // 2
            n2 -= n2 % 8
            lo[2 * k] = lo[k]
            lo[2 * k + 1] = lo[k] + n2
            ln[2 * k + 1] = ln[k] - n2
            ln[2 * k] = n2
        count *= 2
    j.site, j.f64, j.squares, j.X, j.Y = _LEAF, floating_t is float64_t, squares, A__i, &mu
    j.O, j.idx, j.ln = part, lo, ln
    flags[0] |= run_blocks(_block, &j, _TREE_LEAVES, _TREE_LEAVES, nthreads)
    # combine in the tree's own order: (0+1), (2+3), ... level by level
    width = _TREE_LEAVES
    while width > 1:
        for k in range(width // 2):
            part[k] = part[2 * k] + part[2 * k + 1]
        width //= 2
    return part[0]


cdef Py_ssize_t rows_levels(Py_ssize_t r) noexcept nogil:
    """Scratch rows `sum_rows` needs for r rows (one per recursion level of its right halves)."""
    cdef Py_ssize_t levels = 1, n2
    while r > PW_BLOCKSIZE:
        n2 = r // 2
        n2 -= n2 % 8
        r -= n2
        levels += 1
    return levels


cdef void sum_rows(const floating_t* A__rj, Py_ssize_t r, Py_ssize_t rs, Py_ssize_t w,  # IN
                   bint squares, const floating_t* M__j,                              # IN
                   floating_t* S__j,                                                  # OUT
                   floating_t* scratch, Py_ssize_t ss) noexcept nogil:
    """S[j] := sum over r rows of A[i*rs + j] (or of (A[i*rs + j] - M[j])**2 when `squares`),
    j < w. Up to PW_BLOCKSIZE rows: sequential, row after row, which is exactly
    np.add.reduce's order along a non-last axis; above, blocks of rows are combined by the
    pairwise split (error O(log r) like the flat sum, where NumPy's would be O(r)).
    `scratch` holds rows_levels(r) - 1 rows of `ss` elements; S may not overlap A."""
    cdef Py_ssize_t i, j, n2
    cdef const floating_t* a
    cdef floating_t d
    if r <= PW_BLOCKSIZE:
        if squares:
            for j in range(w):
                d = A__rj[j] - M__j[j]
                S__j[j] = d * d
            for i in range(1, r):
                a = A__rj + i * rs
                for j in range(w):
                    d = a[j] - M__j[j]
                    S__j[j] = S__j[j] + d * d
        else:
            for j in range(w):
                S__j[j] = A__rj[j]
            for i in range(1, r):
                a = A__rj + i * rs
                for j in range(w):
                    S__j[j] = S__j[j] + a[j]
        return
    n2 = r // 2
    n2 -= n2 % 8
    sum_rows(A__rj, n2, rs, w, squares, M__j, S__j, scratch + ss, ss)
    sum_rows(A__rj + n2 * rs, r - n2, rs, w, squares, M__j, scratch, scratch + ss, ss)
    for j in range(w):
        S__j[j] = S__j[j] + scratch[j]


# -- reductions: max, min, argmax, argmin ---------------------------------------------------------

cdef inline floating_t _pick(bint want_max, floating_t best, floating_t v) noexcept nogil:
    # np.maximum(best, v) folded as NumPy's reduction does: NaN sticks once seen; on ties
    # (0.0 vs -0.0) the later value wins. Non-short-circuit `|`/`&`: no branches, so loops
    # over it vectorise.
    if want_max:
        return v if (((v >= best) | (v != v)) & (best == best)) else best
    return v if (((v <= best) | (v != v)) & (best == best)) else best


cdef extern from "_cmath.h":
    Py_ssize_t ndws_find_f32(const float32_t* a, Py_ssize_t n, float32_t value) noexcept nogil
    Py_ssize_t ndws_find_f64(const float64_t* a, Py_ssize_t n, float64_t value) noexcept nogil
    float32_t ndws_extreme_f32(const float32_t* a, Py_ssize_t n, int want_max) noexcept nogil
    float64_t ndws_extreme_f64(const float64_t* a, Py_ssize_t n, int want_max) noexcept nogil


cdef floating_t extreme(const floating_t* A__i, Py_ssize_t n, bint want_max) noexcept nogil:
    """max (or min) of A[0:n], n >= 1; NaN if any element is NaN (np.max's rule)."""
    if floating_t is float32_t:
        return ndws_extreme_f32(A__i, n, want_max)
    else:
        return ndws_extreme_f64(A__i, n, want_max)


cdef Py_ssize_t arg_extreme(const floating_t* A__i, Py_ssize_t n, bint want_max) noexcept nogil:
    """Index of the first max (min) of A[0:n], n >= 1, or of the first NaN (np.argmax's rule).
    Two passes that both vectorise: the extreme value, then the first element equal to it (or
    the first NaN); the first element equal to the max is the first max."""
    cdef floating_t best = extreme(A__i, n, want_max)
    cdef Py_ssize_t i
    if floating_t is float32_t:
        i = ndws_find_f32(A__i, n, best)
    else:
        i = ndws_find_f64(A__i, n, best)
    return i if i < n else 0


cdef void extreme_rows(const floating_t* A__rj, Py_ssize_t r, Py_ssize_t rs, Py_ssize_t w,
                       bint want_max,                                          # IN
                       floating_t* B__j, int64_t* K__j, bint want_arg) noexcept nogil:
    """B[j] := max (min) over r >= 1 rows of A[i*rs + j], j < w; with `want_arg`, K[j] gets
    the row index of the first max (min) or first NaN. Row after row, so it vectorises."""
    cdef Py_ssize_t i, j
    cdef const floating_t* a
    cdef floating_t b, v
    for j in range(w):
        B__j[j] = A__rj[j]
    if want_arg:
        for j in range(w):
            K__j[j] = 0
        for i in range(1, r):
            a = A__rj + i * rs
            for j in range(w):
                b = B__j[j]
                v = a[j]
                if b == b and (v != v or ((v > b) if want_max else (v < b))):
                    B__j[j] = v
                    K__j[j] = i
    else:
        for i in range(1, r):
            a = A__rj + i * rs
            for j in range(w):
                B__j[j] = _pick(want_max, B__j[j], a[j])
