"""ndws._threads: how many kernel threads a call may use, and when it drops the GIL.

One policy for every native kernel (docs/architecture.md, "How x + y reaches a loop"): a
wrapper asks `threads_for(work, grain)` with the GIL held, passes the count into its nogil loop
(run_tasks' `nthreads`), and releases the GIL when `release_gil` says so. Below the arrays: it
knows only the per-thread state of ndws._arena (each Python thread's own `num_threads` limit).
"""

import numbers

from ndws._openmp cimport NDWS_OPENMP, ndws_omp_get_max_threads, ndws_omp_set_num_threads
from ndws._arena cimport ThreadState, tstate, epoch_ptr, debug_mode_ptr, ndws_share

cdef extern from "_pool.h" nogil:
    ctypedef void (*ndws_job_fn)(void* ctx) noexcept nogil
    void ndws_pool_run(ndws_job_fn fn, void* ctx, int helpers)
    void ndws_cpu_relax()

cdef extern from "<sched.h>" nogil:
    int sched_yield()

ndws_share(epoch_ptr(), debug_mode_ptr())

__all__ = ["set_num_threads", "get_num_threads", "num_threads"]

# ------------------------------------------------------------------------------------------------
# Kernel threads
#
# Kernel threads come from ndws' own helper pool (ndws/_pool.h, below): the GEMM, the nn kernels
# the ufuncs' loops and ndws.evaluation's counting run on it (no kernel runs an OpenMP region).
# Its size is `_pool_threads`:
# OMP_NUM_THREADS (what omp_get_max_threads() reports at import, the CPU count when unset)
# until `set_num_threads` changes it. A Python thread may lower or raise its own limit with
# `num_threads(n)` (ThreadState._nthreads), so N Python workers can each run 1-thread kernels
# without oversubscribing the cores. Kernels never read these: every wrapper asks `threads_for`
# with the GIL held and passes the count into its nogil region.

cdef int _pool_threads = max(1, ndws_omp_get_max_threads())


cdef int thread_limit() noexcept:
    """The calling thread's kernel-thread limit (always 1 in a build without OpenMP)."""
    cdef int n
    cdef ThreadState st
    if not NDWS_OPENMP:
        return 1
    try:
        st = tstate()
    except BaseException:      # no Python thread state (never while a caller holds the GIL)
        return _pool_threads
    n = st._nthreads
    return n if n > 0 else _pool_threads


# The grains: the work per kernel thread below which a second thread does not pay (a call uses
# 2 threads from 2 * grain on). Each was measured on the 2-core Zen 4 (1 vs 2 threads, medians):
# - elementwise, reduce (`python bench/bench_ops.py --grain`, float32, us per call):
#     add (out=):     32768: 2.6 / 2.5   65536: 5.0 / 4.1   131072: 10.3 / 7.4
#     sum (flat):     65536: 3.3 / 4.5  131072: 6.5 / 9.2   262144: 13.9 / 13.1  1M: 55 / 50
#     sum(axis=0):    65536: 4.9 / 4.6  131072: 9.7 / 7.2   262144: 20.3 / 11.8
#   i.e. two threads win from ~64K elements for streaming loops and 128K-256K for reductions
#   (a parallel region costs ~2 us; a sum runs at ~5 elements/ns);
# - gemm (flops; squares 32-160, 32 x 256 x n, 128 x 256 x 10): float32 breaks even at ~0.55
#   Mflop (64^3: 0.87-1.01x, 80^3: 1.13x, 128x256x10 = 0.66 Mflop: 1.45x), float64 at ~0.3
#   Mflop (48^3: 0.92x, 64^3: 1.3x);
# - nn (ndws.nn.functional, float32, 21 repeats): relu/relu backward/sgd/momentum (memory
#   bound, under 1 ns/element) gain from 128K-256K elements (relu 262144: 22.5 vs 17.7 us; sgd
#   131072: 10.8 vs 7.9 us; at 65536 two threads still lose: 6.4 vs 8.6 us); exp/erf/tanh
#   activations, softmax rows, the losses and the sqrt-based updaters (2-10 ns/element) gain
#   from 4096 elements (gelu 29.3 vs 17.2 us, softmax 29.1 vs 18.9, cross-entropy 58.0 vs 35.9,
#   adam 13.2 vs 9.7) and lose or tie at 1024;
# - eval_rows (ndws.evaluation's confusion counting): a row is C loads from each of two arrays,
#   ~2-4 ns for C = 10, against a few microseconds of OpenMP start-up.
# These are standalone measurements. In a training step an OpenMP region also cost its
# spinning worker afterwards, which took the second core from the GEMM's helper: that is why the
# nn kernels and the ufuncs' loops now run on the GEMM's pool (run_tasks, below). The
# elementwise and reduce grains, measured on OpenMP, are kept: on the pool (`bench_ops.py --grain
# --quick`, load average 1.2-2.6, us at 1 / 2 threads) add (out=) 65536: 9.1 / 5.2, 32768:
# 4.6 / 2.8-4.5; sum 65536: 4.6 / 3.2-3.4, 32768: 2.4 / 2.1-2.3; sum(axis=0) 65536: 9.0 / 4.9.
# Measured again on the pool (2-core Zen 4, float32, medians of 3000 calls, us at 1 / 2
# threads), the nn kernels gain from much smaller calls than on OpenMP:
# - nn_cheap: relu backward 16384: 2.45 / 2.59, 32768: 4.72 / 2.92, 65536: 9.22 / 5.22; relu
#   32768: 2.69 / 1.86; sgd (now vectorised per instruction set) 32768: 1.70 / 1.48, 65536:
#   2.42 / 2.60, 131072: 8.66 / 7.60: two threads from 32768 elements;
# - nn_transc: softmax cross-entropy with its gradient, (n, 10) logits, 160: 2.19 / 1.91, 320:
#   3.79 / 2.99, 1280: 13.4 / 8.2; softmax rows 320: 1.65 / 1.50 (80: 0.74 / 1.15); tanh 320:
#   2.65 / 1.91; gelu 320: 1.52 / 1.33 (80: 0.44 / 0.65): two threads from 320 elements.
cdef Py_ssize_t _grains[N_GRAINS]
_grains[:] = [1 << 15, 1 << 16, 300000, 150000, 16384, 160, 2048, 16384]
_GRAIN_NAMES = ("elementwise", "reduce", "gemm_f32", "gemm_f64", "nn_cheap", "nn_transc",
                "nn_update", "eval_rows")


cdef const Py_ssize_t* grain_table() noexcept:
    return _grains


cdef int threads_over_grain(Py_ssize_t work, Py_ssize_t grain) noexcept:
    # threads_for's answer for work of at least two grains: the calling thread's limit, capped
    # so each thread gets a grain's worth
    cdef int n = thread_limit()
    cdef Py_ssize_t useful
    if n <= 1:
        return 1
    useful = work // grain
    if useful < n:
        return <int>useful if useful > 1 else 1
    return n


def _set_grains(**grains):
    """Set thread grains by name (elementwise, reduce, gemm_f32, gemm_f64, nn_cheap,
    nn_transc, nn_update); returns all of them as they were. For the benchmarks' threshold
    measurements and the tests."""
    prev = {name: _grains[i] for i, name in enumerate(_GRAIN_NAMES)}
    new = []
    for name, value in grains.items():  # all checked before any is set
        if name not in _GRAIN_NAMES:
            raise TypeError(f"_set_grains: unknown grain {name!r}; expected one of "
                            f"{', '.join(_GRAIN_NAMES)}")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 62:
            raise ValueError(f"_set_grains: {name} must be an int in [0, 2**62), got {value!r}")
        new.append((_GRAIN_NAMES.index(name), value))
    for i, value in new:
        _grains[i] = value
    return prev


cdef int _thread_count(object n, str name) except -1:
    # a NumPy integer too (numbers.Integral), never a bool
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"{name}: expected a positive int, got {n!r}")
    if n < 1:
        raise ValueError(f"{name}: expected a positive int, got {n!r}")
    return <int>min(n, 1 << 16)   # a sanity cap; OpenMP would refuse more anyway


def set_num_threads(n):
    """Set the size of ndws' kernel thread pool (all Python threads without their own
    `num_threads` limit).

    Parameters
    ----------
    n : int
        Threads per kernel call, >= 1. Starts as ``OMP_NUM_THREADS`` (the CPU count when unset).
        A build without OpenMP accepts any n and runs every kernel on one thread.
    """
    global _pool_threads
    _pool_threads = _thread_count(n, "n")
    ndws_omp_set_num_threads(_pool_threads)


def get_num_threads():
    """Kernel threads the calling thread's next kernel may use: its `num_threads` limit, else
    the pool size (1 in a build without OpenMP).

    >>> import ndws
    >>> with ndws.num_threads(1):
    ...     ndws.get_num_threads()
    1
    """
    return thread_limit()


def _set_thread_override(int n):
    """Set the calling thread's own limit (0 = follow the pool); returns the previous one."""
    cdef ThreadState ts = tstate()
    cdef int prev = ts._nthreads
    ts._nthreads = n
    return prev


class num_threads:
    """Context manager limiting the kernel threads of the calling Python thread only.

    Parameters
    ----------
    n : int
        Threads per kernel call inside the block, >= 1.

    Examples
    --------
    One kernel thread per Python worker, so two workers share two cores without fighting:

    >>> import ndws
    >>> with ndws.num_threads(1):
    ...     ndws.get_num_threads()
    1
    """

    def __init__(self, n):
        self.n = _thread_count(n, "n")
        self._prev = []

    def __enter__(self):
        self._prev.append(_set_thread_override(self.n))
        return self

    def __exit__(self, *exc):
        _set_thread_override(self._prev.pop())
        return False



# ------------------------------------------------------------------------------------------------
# The pool (ndws/_pool.h, compiled into this module only, so the process has exactly one)

cdef void pool_run(job_fn fn, void* ctx, int helpers) noexcept nogil:
    ndws_pool_run(<ndws_job_fn>fn, ctx, helpers)


ctypedef struct _Tasks:
    task_fn fn
    void* ctx
    long long ntasks
    long long next


cdef void _claim_tasks(void* p) noexcept nogil:
    # the caller and every helper that joins: claim indices until none is left
    cdef _Tasks* t = <_Tasks*>p
    cdef long long i
    while True:
        i = ndws_claim(&t.next)
        if i >= t.ntasks:
            return
        t.fn(t.ctx, <Py_ssize_t>i)


cdef void run_tasks(task_fn fn, void* ctx, Py_ssize_t ntasks, int nthreads) noexcept nogil:
    cdef _Tasks t
    cdef Py_ssize_t i
    if nthreads <= 1 or ntasks <= 1:
        for i in range(ntasks):
            fn(ctx, i)
        return
    t.fn = fn
    t.ctx = ctx
    t.ntasks = ntasks
    t.next = 0
    ndws_pool_run(_claim_tasks, &t, <int>(nthreads - 1 if nthreads <= ntasks else ntasks - 1))


cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    static inline void ndws_or_flags(int* flags, int v) {
        __atomic_fetch_or(flags, v, __ATOMIC_RELAXED);   /* the pool's join orders it */
    }
    #else  /* no helper threads in such a build: every task runs on the caller */
    static inline void ndws_or_flags(int* flags, int v) { *flags |= v; }
    #endif
    """
    void ndws_or_flags(int* flags, int v) noexcept nogil


ctypedef struct _Blocks:
    block_fn fn
    void* ctx
    Py_ssize_t n, ntasks
    int flags


cdef void _block_task(void* p, Py_ssize_t c) noexcept nogil:
    cdef _Blocks* b = <_Blocks*>p
    cdef Py_ssize_t lo, hi
    cdef int fl
    static_block(b.n, b.ntasks, c, &lo, &hi)
    fl = b.fn(b.ctx, lo, hi, c)
    if fl:
        ndws_or_flags(&b.flags, fl)


cdef int run_blocks(block_fn fn, void* ctx, Py_ssize_t n, Py_ssize_t ntasks,
                    int nthreads) noexcept nogil:
    cdef _Blocks b
    b.fn, b.ctx, b.n, b.ntasks, b.flags = fn, ctx, n, ntasks if ntasks < n else n, 0
    run_tasks(_block_task, &b, b.ntasks, nthreads)
    return b.flags


ctypedef struct _Items:
    task_fn fn
    void* ctx


cdef int _items_block(void* p, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t c) noexcept nogil:
    cdef _Items* it = <_Items*>p
    cdef Py_ssize_t i
    for i in range(lo, hi):
        it.fn(it.ctx, i)
    return 0


cdef void run_items(task_fn fn, void* ctx, Py_ssize_t n, int nthreads) noexcept nogil:
    cdef _Items it
    cdef Py_ssize_t nb = 16 * <Py_ssize_t>nthreads
    if nthreads <= 1:
        run_tasks(fn, ctx, n, 1)
        return
    it.fn = fn
    it.ctx = ctx
    run_blocks(_items_block, &it, n, nb if nb < n else n, nthreads)


cdef extern from *:
    """
    /* run_lanes' shared counters: a lane's holder publishes its step's writes with the release
       that lets the lane go; the next holder's acquiring claim sees them */
    #if defined(__GNUC__) || defined(__clang__)
    static inline long long ndws_lane_load(long long* p) {
        return __atomic_load_n(p, __ATOMIC_ACQUIRE);
    }
    static inline void ndws_lane_store(long long* p, long long v) {
        __atomic_store_n(p, v, __ATOMIC_RELEASE);
    }
    static inline int ndws_lane_take(long long* p) {   /* 0 -> 1 */
        long long zero = 0;
        return __atomic_compare_exchange_n(p, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    static inline void ndws_lane_add(long long* p) { __atomic_add_fetch(p, 1, __ATOMIC_ACQ_REL); }
    #else  /* no helper threads in such a build: the caller runs every step */
    static inline long long ndws_lane_load(long long* p) { return *p; }
    static inline void ndws_lane_store(long long* p, long long v) { *p = v; }
    static inline int ndws_lane_take(long long* p) { if (*p) return 0; *p = 1; return 1; }
    static inline void ndws_lane_add(long long* p) { (*p)++; }
    #endif
    """
    long long ndws_lane_load(long long* p) noexcept nogil
    void ndws_lane_store(long long* p, long long v) noexcept nogil
    int ndws_lane_take(long long* p) noexcept nogil
    void ndws_lane_add(long long* p) noexcept nogil


ctypedef struct _Lanes:
    lane_fn fn
    void* ctx
    long long nlanes, nsteps
    long long done                      # lanes with every step run
    long long failed                    # the first nonzero return
    long long step[LANES_MAX]           # each lane's next step
    long long held[LANES_MAX]           # 1 while a thread runs one of the lane's steps


cdef void _lane_steps(void* p) noexcept nogil:
    # the caller and every helper that joins: take the least advanced free lane, run its next
    # step, let it go; spin (yielding now and then) while every unfinished lane is held
    cdef _Lanes* L = <_Lanes*>p
    cdef long long g, best, s, bs
    cdef int ret
    cdef unsigned int spins = 0
    while ndws_lane_load(&L.failed) == 0:
        best = -1
        bs = L.nsteps
        for g in range(L.nlanes):
            s = ndws_lane_load(&L.step[g])
            if s < bs and ndws_lane_load(&L.held[g]) == 0:
                best, bs = g, s
        if best < 0:
            if ndws_lane_load(&L.done) >= L.nlanes:
                return
            ndws_cpu_relax()
            spins += 1
            if spins % 256 == 0:
                sched_yield()           # the holder may be waiting for this very core
            continue
        if not ndws_lane_take(&L.held[best]):
            continue                    # another thread took it first
        s = ndws_lane_load(&L.step[best])      # the lane may have moved since the scan
        if s < L.nsteps:
            ret = L.fn(L.ctx, <Py_ssize_t>best, <Py_ssize_t>s)
            if ret != 0:
                ndws_lane_store(&L.failed, ret)
            else:
                ndws_lane_store(&L.step[best], s + 1)
                if s + 1 == L.nsteps:
                    ndws_lane_add(&L.done)
        ndws_lane_store(&L.held[best], 0)


cdef int run_lanes(lane_fn fn, void* ctx, Py_ssize_t nlanes, Py_ssize_t nsteps,
                   int nthreads) noexcept nogil:
    cdef _Lanes L
    cdef Py_ssize_t g, s
    cdef int ret
    if nlanes <= 0 or nsteps <= 0:
        return 0
    if nthreads <= 1 or nlanes == 1 or nlanes > LANES_MAX:
        for s in range(nsteps):         # step by step: each lane's steps in order
            for g in range(nlanes):
                ret = fn(ctx, g, s)
                if ret != 0:
                    return ret
        return 0
    L.fn, L.ctx, L.nlanes, L.nsteps, L.done, L.failed = fn, ctx, nlanes, nsteps, 0, 0
    for g in range(nlanes):
        L.step[g] = 0
        L.held[g] = 0
    ndws_pool_run(_lane_steps, &L, <int>(nthreads - 1 if nthreads <= nlanes else nlanes - 1))
    return <int>L.failed


cdef void _census_task(void* ctx, Py_ssize_t i) noexcept nogil:
    cdef long long* counts = <long long*>ctx
    ndws_claim(&counts[i])          # an atomic increment: helpers may run indices concurrently


def _run_tasks_census(Py_ssize_t ntasks, int nthreads, bint items=False):
    """How many times run_tasks (run_items with `items`) ran each of `ntasks` indices on
    `nthreads` threads (for the tests: every index exactly once, whoever claimed it)."""
    import numpy as np
    if ntasks < 0 or nthreads < 1:
        raise ValueError("_run_tasks_census: ntasks >= 0 and nthreads >= 1")
    counts = np.zeros(ntasks, dtype=np.int64)
    cdef long long[::1] c = counts
    with nogil:
        if items:
            run_items(_census_task, &c[0] if ntasks > 0 else NULL, ntasks, nthreads)
        else:
            run_tasks(_census_task, &c[0] if ntasks > 0 else NULL, ntasks, nthreads)
    return counts


ctypedef struct _LaneCensus:
    long long* order                    # per lane: the steps in the order they ran
    long long* count                    # per lane: how many ran
    long long* active                   # steps of the lane running now (must stay <= 1)
    long long nsteps
    long long fail_at                   # lane * nsteps + step that returns 7, or -1


cdef int _census_lane(void* ctx, Py_ssize_t lane, Py_ssize_t step) noexcept nogil:
    cdef _LaneCensus* c = <_LaneCensus*>ctx
    cdef long long k
    if lane * c.nsteps + step == c.fail_at:
        return 7
    if ndws_claim(&c.active[lane]) != 0:
        c.count[lane] = -1000000        # two steps of one lane at once: the census shows it
    k = ndws_claim(&c.count[lane])
    if 0 <= k < c.nsteps:
        c.order[lane * c.nsteps + k] = step
    c.active[lane] = 0
    return 0


def _run_lanes_census(Py_ssize_t nlanes, Py_ssize_t nsteps, int nthreads, fail_at=None):
    """run_lanes over `nlanes` x `nsteps` on `nthreads` threads (for the tests): (its return
    value, each lane's steps in the order they ran (-1 where none ran), how many ran per lane).
    `fail_at` (lane, step): that call returns 7."""
    import numpy as np
    if nlanes < 0 or nsteps < 0 or nthreads < 1:
        raise ValueError("_run_lanes_census: nlanes, nsteps >= 0 and nthreads >= 1")
    order = np.full((max(nlanes, 1), max(nsteps, 1)), -1, dtype=np.int64)
    count = np.zeros(max(nlanes, 1), dtype=np.int64)
    active = np.zeros(max(nlanes, 1), dtype=np.int64)
    cdef long long[:, ::1] o = order
    cdef long long[::1] n = count
    cdef long long[::1] a = active
    cdef _LaneCensus c
    cdef int ret
    c.order, c.count, c.active, c.nsteps = &o[0, 0], &n[0], &a[0], nsteps
    c.fail_at = -1 if fail_at is None else fail_at[0] * nsteps + fail_at[1]
    with nogil:
        ret = run_lanes(_census_lane, &c, nlanes, nsteps, nthreads)
    return ret, order[:nlanes, :nsteps], count[:nlanes]
