/* The one pool of kernel helper threads (compiled into ndws._threads only, which exports it to
 * every kernel module: see _threads.pxd), where the caller never waits for a helper
 * that has not started.
 *
 * Why not an OpenMP parallel region: a region starts only when the team has formed and ends
 * at a barrier that every team thread must reach. On a machine with a busy neighbour (the
 * async prefetch thread, another worker, another library's spinning pool) one of the two
 * threads is often descheduled for milliseconds: the other then waits at the barrier with its
 * half of the work done, and the call takes the slow thread's time (measured: medians 2-10x
 * below the best case on 2 cores). Here the work is a list of chunks claimed through an atomic
 * counter (see _gemm_kernel.pxi); the caller runs the job itself, helpers that wake up in time
 * join it, and at the end the caller waits only for helpers that are inside the job, never
 * for one that has not joined: a descheduled helper costs nothing but its help.
 *
 * Protocol (all shared fields are accessed with atomics, sequentially consistent where the
 * order matters):
 *   caller  publishes fn/ctx/want, opens the job, bumps `seq` (waking sleeping helpers), runs
 *           fn(ctx), closes the job, then waits until `active` is 0;
 *   helper  waits for `seq` to change (spinning briefly, then on the condition variable),
 *           increments `active`, and only if the job is still open, still the one it saw, and
 *           `joined` stays within `want`, runs fn(ctx); then decrements `active`.
 * A helper that increments `active` after the caller saw it at 0 must find the job closed (the
 * close precedes that read in the total order), so it never touches a finished job's ctx.
 *
 * One job at a time: a caller that finds the pool busy (another Python thread's GEMM) runs its
 * job alone instead of waiting. Helpers are created on first use, up to the largest number
 * asked for, and live for the process (a fork()ed child starts with none).
 * Without POSIX threads the job simply runs on the caller. */
#ifndef NDWS_POOL_H
#define NDWS_POOL_H

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <sched.h>
#include <time.h>

#define NDWS_POOL_MAX 256                  /* helpers, at most */
/* A helper spins this long after a job before it sleeps: long enough to stay awake through
 * the other work of a training step (a sleeping helper is woken in 50 us to over 1 ms, most on
 * a virtual machine, and the wake-up may place it on the caller's core), short enough that an
 * idle program frees the core at once. The spin yields now and then, so a thread that wants
 * this core (an OpenMP worker of the same program, a neighbour) gets it. */
#define NDWS_POOL_SPIN_NS 2000000

typedef void (*ndws_job_fn)(void* ctx);

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int created;                 /* helpers started (under mu) */
    int sleeping;                /* helpers waiting on cv (under mu) */
    unsigned long long seq;      /* job number */
    ndws_job_fn fn;
    void* ctx;
    int want;                    /* helpers the current job may take */
    int joined;                  /* helpers that took it */
    int active;                  /* helpers inside the job (or deciding whether to join) */
    int open;                    /* the job accepts helpers */
    int busy;                    /* a caller owns the pool */
} ndws_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, NULL, NULL, 0,
               0, 0, 0, 0};

static inline void ndws_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline long long ndws_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void* ndws_pool_main(void* arg) {
    unsigned long long seen = (unsigned long long)(size_t)arg, s;
    long long until;
    int spins;
    for (;;) {
        until = ndws_now_ns() + NDWS_POOL_SPIN_NS;
        spins = 0;
        while ((s = __atomic_load_n(&ndws_pool.seq, __ATOMIC_ACQUIRE)) == seen) {
            ndws_cpu_relax();
            if (++spins % 256 == 0)
                sched_yield();
            if (spins % 64 == 0 && ndws_now_ns() > until) {
                pthread_mutex_lock(&ndws_pool.mu);
                ndws_pool.sleeping++;
                while (__atomic_load_n(&ndws_pool.seq, __ATOMIC_ACQUIRE) == seen)
                    pthread_cond_wait(&ndws_pool.cv, &ndws_pool.mu);
                ndws_pool.sleeping--;
                pthread_mutex_unlock(&ndws_pool.mu);
            }
        }
        seen = s;
        __atomic_add_fetch(&ndws_pool.active, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&ndws_pool.open, __ATOMIC_SEQ_CST)
                && __atomic_load_n(&ndws_pool.seq, __ATOMIC_SEQ_CST) == s
                && __atomic_add_fetch(&ndws_pool.joined, 1, __ATOMIC_SEQ_CST) <= ndws_pool.want)
            ndws_pool.fn(ndws_pool.ctx);
        __atomic_sub_fetch(&ndws_pool.active, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static void ndws_pool_forget(void) {
    /* in a fork()ed child: the helper threads are gone, the lock may have been held */
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    ndws_pool.mu = mu;
    ndws_pool.cv = cv;
    ndws_pool.created = ndws_pool.sleeping = 0;
    ndws_pool.active = ndws_pool.open = ndws_pool.busy = 0;
}

/* Start helpers until `n` exist (under mu); returns how many exist. */
static int ndws_pool_grow(int n) {
    static int atfork = 0;
    pthread_t t;
    pthread_attr_t attr;
    if (n > NDWS_POOL_MAX)
        n = NDWS_POOL_MAX;
    if (!atfork) {
        atfork = 1;
        pthread_atfork(NULL, NULL, ndws_pool_forget);
    }
    if (pthread_attr_init(&attr) != 0)
        return ndws_pool.created;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while (ndws_pool.created < n) {
        if (pthread_create(&t, &attr, ndws_pool_main,
                           (void*)(size_t)__atomic_load_n(&ndws_pool.seq, __ATOMIC_ACQUIRE)) != 0)
            break;
        ndws_pool.created++;
    }
    pthread_attr_destroy(&attr);
    return ndws_pool.created;
}

/* Run fn(ctx) on the calling thread and on up to `helpers` helper threads at once; return
 * when the caller's fn has returned and no helper is inside it any more. */
static void ndws_pool_run(ndws_job_fn fn, void* ctx, int helpers) {
    int spins = 0;
    if (helpers <= 0 || __atomic_exchange_n(&ndws_pool.busy, 1, __ATOMIC_ACQUIRE)) {
        fn(ctx);
        return;
    }
    pthread_mutex_lock(&ndws_pool.mu);
    if (ndws_pool.created < helpers)
        ndws_pool_grow(helpers);
    ndws_pool.fn = fn;
    ndws_pool.ctx = ctx;
    ndws_pool.want = helpers;
    __atomic_store_n(&ndws_pool.joined, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&ndws_pool.open, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&ndws_pool.seq, 1, __ATOMIC_SEQ_CST);
    if (ndws_pool.sleeping)
        pthread_cond_broadcast(&ndws_pool.cv);
    pthread_mutex_unlock(&ndws_pool.mu);
    fn(ctx);
    __atomic_store_n(&ndws_pool.open, 0, __ATOMIC_SEQ_CST);
    /* only helpers inside the job are waited for; they are finishing chunks they claimed */
    while (__atomic_load_n(&ndws_pool.active, __ATOMIC_SEQ_CST) > 0) {
        ndws_cpu_relax();
        if (++spins % 1024 == 0)
            sched_yield();       /* the helper may be waiting for this very core */
    }
    __atomic_store_n(&ndws_pool.busy, 0, __ATOMIC_RELEASE);
}

#else  /* no POSIX threads: the caller does everything */

typedef void (*ndws_job_fn)(void* ctx);
static void ndws_pool_run(ndws_job_fn fn, void* ctx, int helpers) { (void)helpers; fn(ctx); }

#endif
#endif /* NDWS_POOL_H */
