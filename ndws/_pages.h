/* Transparent huge pages for a workspace's main block (ndws/_memory.pyx's allocate_block).
 *
 * A workspace's main block is allocated once and reused every iteration, so the one-off cost of
 * a huge page (its 2 MiB are zeroed at the first touch) is paid once, and every iteration then
 * runs with a 512th of the TLB entries: a recurrent layer's cache and gate errors (several MiB
 * per layer, read back one example row at a time between GEMMs that sweep the packed weights)
 * missed the TLB on most rows, and in a virtual machine each miss is a two-level page walk.
 * Measured on a char-model fit() segment (two LSTM layers of 200, 55 MB of workspaces), one
 * thread: 1-2% of the segment. Blocks that come and go (arrays outside workspaces, spills) keep
 * the allocator's pages, as NumPy's do.
 *
 * Linux only (elsewhere this does nothing), and only an advice: with the system's setting
 * "never", or without a free huge page, the kernel keeps using 4 KiB pages. Only the whole
 * 2 MiB-aligned pages inside the block are advised, so nothing outside the block changes; blocks
 * under 4 MiB are left alone (at most one whole huge page would fit). */
#ifndef NDWS_PAGES_H
#define NDWS_PAGES_H

#include <stddef.h>
#include <stdint.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#define NDWS_HUGE_PAGE ((uintptr_t)2 << 20)
#define NDWS_HUGE_MIN ((size_t)4 << 20)

static inline void ndws_advise_huge(void* raw, size_t nbytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    uintptr_t lo = ((uintptr_t)raw + NDWS_HUGE_PAGE - 1) & ~(NDWS_HUGE_PAGE - 1);
    uintptr_t hi = ((uintptr_t)raw + nbytes) & ~(NDWS_HUGE_PAGE - 1);
    if (nbytes >= NDWS_HUGE_MIN && hi > lo)
        (void)madvise((void*)lo, (size_t)(hi - lo), MADV_HUGEPAGE);   /* advice: may fail */
#else
    (void)raw;
    (void)nbytes;
#endif
}

#endif /* NDWS_PAGES_H */
