"""A barrier for ndws.parallel's worker threads that waits without the GIL.

`threading.Barrier` costs about 30 us a round on two cores (a Condition: every waiter takes the
GIL and a futex to wake up), as much as a sixth of a data-parallel step at batch 32. Here a
waiter spins on an atomic generation counter with the GIL released: a partner arriving within
a few microseconds releases it at once. Past a short spin it yields the core (a busy neighbour,
the prefetch thread or the partner may want it), and past a millisecond it naps in 50 us
sleeps, so a barrier that waits long costs nothing. `abort()` breaks it: every waiter, present
and future, gets ``threading.BrokenBarrierError`` within one nap.
"""
import threading

cdef extern from * nogil:
    """
    #include <sched.h>
    #include <time.h>
    static inline long long ndws_sync_load(long long* p) {
        return __atomic_load_n(p, __ATOMIC_ACQUIRE);
    }
    static inline void ndws_sync_store(long long* p, long long v) {
        __atomic_store_n(p, v, __ATOMIC_RELEASE);
    }
    static inline long long ndws_sync_add(long long* p, long long v) {
        return __atomic_add_fetch(p, v, __ATOMIC_ACQ_REL);
    }
    static inline void ndws_sync_pause(void) {
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
    #elif defined(__aarch64__)
        __asm__ __volatile__("yield");
    #endif
    }
    static inline long long ndws_sync_now_ns(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
    }
    static inline void ndws_sync_nap(void) {
        struct timespec t = {0, 50000};
        nanosleep(&t, NULL);
    }
    """
    long long ndws_sync_load(long long* p)
    void ndws_sync_store(long long* p, long long v)
    long long ndws_sync_add(long long* p, long long v)
    void ndws_sync_pause()
    long long ndws_sync_now_ns()
    void ndws_sync_nap()
    int sched_yield()

DEF SPIN = 2000            # pause-spins before the first yield
DEF YIELD_NS = 1000000     # yield-spinning this long before napping


cdef class SpinBarrier:
    """A reusable barrier for `parties` threads; `wait()` releases the GIL while it waits.

    Parameters
    ----------
    parties : int
        Threads that must call `wait` before any of them returns (>= 1).

    Examples
    --------
    >>> import threading
    >>> from ndws.parallel._sync import SpinBarrier
    >>> b = SpinBarrier(2)
    >>> seen = []
    >>> t = threading.Thread(target=lambda: (seen.append(1), b.wait()))
    >>> t.start(); _ = b.wait(); t.join()
    >>> seen
    [1]
    """

    cdef long long _parties
    cdef long long _count       # arrivals in the current generation
    cdef long long _generation
    cdef long long _broken

    def __cinit__(self, parties):
        if isinstance(parties, bool) or not isinstance(parties, int):
            raise TypeError(f"parties: expected an int, got {type(parties).__name__}")
        if not 1 <= parties <= 1 << 20:
            raise ValueError(f"parties: must be in [1, {1 << 20}], got {parties}")
        self._parties = parties
        self._count = 0
        self._generation = 0
        self._broken = 0

    @property
    def parties(self):
        return self._parties

    @property
    def broken(self):
        """True once `abort` was called."""
        return ndws_sync_load(&self._broken) != 0

    def abort(self):
        """Break the barrier: every thread waiting in it, and every later `wait`, raises
        ``threading.BrokenBarrierError``."""
        ndws_sync_store(&self._broken, 1)

    def wait(self):
        """Wait until `parties` threads have called wait in this generation; returns the
        generation number passed."""
        cdef long long gen, spins = 0, until = 0
        cdef bint broken = False
        if ndws_sync_load(&self._broken):
            raise threading.BrokenBarrierError
        with nogil:
            gen = ndws_sync_load(&self._generation)
            if ndws_sync_add(&self._count, 1) == self._parties:
                # the last arrival: reset the count, then open the next generation (a thread
                # of the next generation can only arrive after it sees the new generation)
                ndws_sync_store(&self._count, 0)
                ndws_sync_add(&self._generation, 1)
            else:
                while ndws_sync_load(&self._generation) == gen:
                    if ndws_sync_load(&self._broken):
                        broken = True
                        break
                    spins += 1
                    if spins < SPIN:
                        ndws_sync_pause()
                    elif spins == SPIN:
                        until = ndws_sync_now_ns() + YIELD_NS
                    elif ndws_sync_now_ns() < until:
                        sched_yield()
                    else:
                        ndws_sync_nap()
        if broken:
            raise threading.BrokenBarrierError
        return gen
