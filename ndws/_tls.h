/* Per-module fast access to process-wide state of ndws._arena (docs/architecture.md).
 *
 * Each compiled module that includes this header gets its own copy of the statics below (a
 * Python extension module shares no C symbols with another). Two kinds:
 *
 * - A per-OS-thread cache of the calling Python thread's ThreadState. The pointer is borrowed
 *   (the thread-state dict owns the object) and trusted only while (a) the interpreter's unique
 *   id of the running thread state matches the one it was stored under (ids are never reused,
 *   so a new thread state on the same OS thread misses) and (b) no ThreadState has been
 *   deallocated since it was stored: ThreadState.__dealloc__ bumps the process-wide epoch that
 *   `ndws_epoch` points to, so no module's cache can dangle.
 * - Pointers to _arena's process-wide globals (the epoch, the debug mode), set once when the
 *   module is imported (ndws_share), so the hot paths read them without a call into _arena. */
#ifndef NDWS_TLS_H
#define NDWS_TLS_H
#include <stdint.h>
#include <Python.h>

#if defined(_MSC_VER)
#  define NDWS_TLS __declspec(thread)
#else
#  define NDWS_TLS __thread
#endif

static const volatile uint64_t *ndws_epoch = NULL;
static const volatile int *ndws_debug_mode = NULL;
static NDWS_TLS uint64_t ndws_tls_id = 0;
static NDWS_TLS uint64_t ndws_tls_epoch = 0;
static NDWS_TLS PyObject *ndws_tls_obj = NULL;

static inline void ndws_share(const volatile uint64_t *epoch, const volatile int *debug_mode) {
    ndws_epoch = epoch;
    ndws_debug_mode = debug_mode;
}

static inline uint64_t ndws_current_tid(void) {
    return PyThreadState_GetID(PyThreadState_Get());
}

static inline PyObject *ndws_tls_get(void) {
    if (ndws_tls_obj != NULL && ndws_tls_id == ndws_current_tid()
            && ndws_tls_epoch == *ndws_epoch)
        return ndws_tls_obj;
    return NULL;
}

static inline void ndws_tls_set(PyObject *o) {
    ndws_tls_id = ndws_current_tid();
    ndws_tls_epoch = *ndws_epoch;
    ndws_tls_obj = o;
}

static inline int ndws_debug(void) { return *ndws_debug_mode; }

#endif /* NDWS_TLS_H */
