# ndws._threads for other Cython modules: the one helper every kernel wrapper asks,
# with the GIL held, how many kernel threads to use for `work` units when each thread should get
# at least `grain` units (a measured per-kernel constant, so small calls stay on one thread).
# One thread-and-GIL policy for every kernel entry (docs/architecture.md, "How x + y reaches a
# loop"): `threads_for(work, grain)` gives the kernel threads a call may use, and a kernel runs
# without the GIL when it uses more than one or touches more than NOGIL_BYTES.
cdef enum:
    NOGIL_BYTES = 16384        # releasing and re-taking the GIL costs about a 16 KiB add

cdef enum Grain:               # the measured grains themselves are in _threads.pyx (_grains)
    GRAIN_ELEMENTWISE = 0      # elements
    GRAIN_REDUCE = 1           # elements
    GRAIN_GEMM_F32 = 2         # flops
    GRAIN_GEMM_F64 = 3         # flops
    GRAIN_NN_CHEAP = 4         # elements: relu, sgd, momentum (memory bound)
    GRAIN_NN_TRANSC = 5        # elements: exp/tanh/erf activations, softmax, losses
    GRAIN_NN_UPDATE = 6        # elements: the sqrt-based updaters
    GRAIN_EVAL_ROWS = 7        # rows: the confusion-matrix counting of ndws.evaluation
    N_GRAINS = 8

cdef extern from *:
    """
    /* This module's pointer to ndws._threads' grain table, set on first use by threads_for (every
       module that cimports _threads has its own; all point at the one table). */
    static const Py_ssize_t *ndws_grain_table = NULL;
    """
    const Py_ssize_t* ndws_grain_table

cdef const Py_ssize_t* grain_table() noexcept
cdef int threads_over_grain(Py_ssize_t work, Py_ssize_t grain) noexcept


cdef inline int threads_for(Py_ssize_t work, Grain grain) noexcept:
    # inline: the common answer for a small call (one thread) costs two loads, not a call
    global ndws_grain_table
    cdef Py_ssize_t g
    if <unsigned int>grain >= N_GRAINS:
        return 1                   # not a Grain: never read outside the table
    if ndws_grain_table == NULL:
        ndws_grain_table = grain_table()
    g = ndws_grain_table[<int>grain]
    if g <= 0 or work < 2 * g:
        return 1                   # before the thread-local lookup: most calls are small
    return threads_over_grain(work, g)


cdef inline bint release_gil(Py_ssize_t nbytes, int nthreads) noexcept:
    return nthreads > 1 or nbytes > NOGIL_BYTES
cdef int thread_limit() noexcept


# The one pool of kernel helper threads (ndws/_pool.h; docs/architecture.md, "Kernel threads"):
# every multi-threaded kernel runs through it, so a kernel never competes for a core with another
# pool's spinning workers. `pool_run` runs fn(ctx) on the caller and on up to `helpers` helpers
# that join in time (the GEMM claims its own chunks with `ndws_claim`); `run_tasks` runs
# fn(ctx, i) for i in [0, ntasks), each index exactly once, on the caller and up to nthreads - 1
# helpers. A result must not depend on which thread ran an index.
ctypedef void (*job_fn)(void* ctx) noexcept nogil
ctypedef void (*task_fn)(void* ctx, Py_ssize_t i) noexcept nogil

cdef extern from *:
    """
    /* claim the next work item of a job (a shared counter in the job's context) */
    #if defined(__GNUC__) || defined(__clang__)
    static inline long long ndws_claim(long long* next) {
        return __atomic_fetch_add(next, 1, __ATOMIC_RELAXED);
    }
    #else  /* no helper threads in such a build: the caller claims everything */
    static inline long long ndws_claim(long long* next) { return (*next)++; }
    #endif
    """
    long long ndws_claim(long long* next) noexcept nogil

cdef void pool_run(job_fn fn, void* ctx, int helpers) noexcept nogil
cdef void run_tasks(task_fn fn, void* ctx, Py_ssize_t ntasks, int nthreads) noexcept nogil

# Block c of n items cut into nblocks static blocks, [lo[0], hi[0]) (OpenMP's schedule(static)
# split: the first n % nblocks blocks get one more item): what run_blocks' tasks and any other
# fixed split that must not depend on the thread count use.
cdef inline void static_block(Py_ssize_t n, Py_ssize_t nblocks, Py_ssize_t c, Py_ssize_t* lo,
                              Py_ssize_t* hi) noexcept nogil:
    cdef Py_ssize_t q = n // nblocks, extra = n % nblocks
    lo[0] = c * q + (c if c < extra else extra)
    hi[0] = lo[0] + q + (1 if c < extra else 0)

# `run_blocks` (the ufuncs' loops): run_tasks over `ntasks` (at most n) static blocks of n items,
# task c calling fn(ctx, lo, hi, c) for its block [lo, hi) (static_block), so the split never
# depends on who runs a block. Returns the OR of what the calls returned: the NPY_FPE_* flags
# each task read on its own thread.
ctypedef int (*block_fn)(void* ctx, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t c) noexcept nogil
cdef int run_blocks(block_fn fn, void* ctx, Py_ssize_t n, Py_ssize_t ntasks,
                    int nthreads) noexcept nogil

# `run_lanes`: fn(ctx, lane, step) for each of `nlanes` independent lanes and each of their
# `nsteps` steps, a lane's steps in order and never two of them at once, lanes in any order
# relative to each other: a thread takes the least advanced lane no other thread holds, runs
# its next step and lets it go. A chain of steps (a time loop over example groups) so needs no
# barrier between steps: a thread descheduled inside a step holds back only its lane, while
# the others go on with theirs (per-step barriers made a 2-thread LSTM forward beside a busy
# neighbour 25% slower). More than LANES_MAX lanes run step by step on the caller. Returns 0,
# or the first nonzero value a call returned (a thread that has seen it starts no step).
cdef enum:
    LANES_MAX = 64
ctypedef int (*lane_fn)(void* ctx, Py_ssize_t lane, Py_ssize_t step) noexcept nogil
cdef int run_lanes(lane_fn fn, void* ctx, Py_ssize_t nlanes, Py_ssize_t nsteps,
                   int nthreads) noexcept nogil

# `run_items`: fn(ctx, i) for each of n small items (a pooled or depthwise plane: about a
# microsecond each), claimed in blocks, 16 per thread: one atomic claim per item, its cache line
# moving between the cores, cost two threads most of their gain. Each item runs once, whoever
# runs its block.
cdef void run_items(task_fn fn, void* ctx, Py_ssize_t n, int nthreads) noexcept nogil
