"""ndws._memory: the memory blocks arrays live in, and the count of every byte ndws asks the C heap
for (so "zero allocation in steady state" is a measurement, not a belief).

Below the arena and NDArray (ndws._core), which hold blocks; see docs/architecture.md.
"""

cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE
from libc.stdint cimport uintptr_t
from libc.stdlib cimport malloc, calloc, free

import errno
import os
import tempfile

cdef extern from *:
    """
    /* 64 bytes of always-valid memory for zero-size arrays, so no array ever holds NULL. */
    static union { char bytes[64]; double align; } ndws_empty_storage;
    #define NDWS_TRACE_DOMAIN 0x6e647773u  /* 'ndws': tracemalloc domain of array data */
    """
    char ndws_empty_storage_bytes "ndws_empty_storage.bytes"[64]
    unsigned int NDWS_TRACE_DOMAIN
    int PyTraceMalloc_Track(unsigned int domain, uintptr_t ptr, size_t size) noexcept
    int PyTraceMalloc_Untrack(unsigned int domain, uintptr_t ptr) noexcept


# ------------------------------------------------------------------------------------------------
# Allocation statistics

cdef Py_ssize_t _n_allocs = 0
cdef Py_ssize_t _bytes_allocated = 0
cdef Py_ssize_t _n_live = 0
cdef Py_ssize_t _bytes_live = 0


def allocation_counters():
    """Heap allocations ndws has made for array data, as a dict.

    Returns
    -------
    dict
        ``allocations`` and ``bytes`` since import, ``live_blocks`` and ``live_bytes`` now.
    """
    return {"allocations": _n_allocs, "bytes": _bytes_allocated,
            "live_blocks": _n_live, "live_bytes": _bytes_live}


# ------------------------------------------------------------------------------------------------
# Memory blocks

# Not tracked by the cyclic GC (like numpy.ndarray): a block refers only to memory and to the
# NumPy array or mmap that owns foreign memory, so it can't be part of a cycle, and tracking
# would tax every detached allocation.
@cython.final
@cython.no_gc
cdef class MemoryBlock:
    """A contiguous, aligned piece of array memory, freed only when the last reference goes."""

    def __cinit__(self):
        self.data = NULL
        self.raw = NULL
        self.size = 0
        self.exports = 0
        self.has_view = False

    def __dealloc__(self):
        global _n_live, _bytes_live
        if self.raw != NULL:
            PyTraceMalloc_Untrack(NDWS_TRACE_DOMAIN, <uintptr_t>self.raw)
            # a sanitizer build poisoned parts of it: the allocator (or a later mmap at the
            # same address) must get it back clean
            ndws_unpoison(self.raw, self.size + NDWS_ALIGNMENT - 1)
            free(self.raw)
            self.raw = NULL
            _n_live -= 1
            _bytes_live -= self.size
        if self.has_view:
            ndws_unpoison(self.data, self.size)
            PyBuffer_Release(&self.view)
            self.has_view = False

    @property
    def nbytes(self):
        return self.size

    @property
    def live_exports(self):
        return self.exports

    @property
    def kind_name(self):
        """What the block serves: main, spill, pinned, external, detached, foreign, mmap."""
        return _BLOCK_KIND_NAMES[self.kind]

    def __repr__(self):
        return f"<MemoryBlock {self.kind_name} {self.size} bytes, {self.exports} exports>"


_BLOCK_KIND_NAMES = ("detached", "main", "spill", "pinned", "external", "foreign", "mmap",
                     "static")


# a workspace's large main block gets transparent huge pages (see there)
cdef extern from "_pages.h" nogil:
    void ndws_advise_huge(void* raw, size_t nbytes)


cdef MemoryBlock allocate_block(Py_ssize_t nbytes, bint zero, int kind):
    # Over-allocate by ALIGNMENT-1 and round the pointer up: portable (no posix_memalign), and
    # calloc hands large zeroed requests straight from mmap'd pages.
    global _n_allocs, _bytes_allocated, _n_live, _bytes_live
    cdef MemoryBlock b = MemoryBlock.__new__(MemoryBlock)
    cdef size_t total = <size_t>nbytes + <size_t>(NDWS_ALIGNMENT - 1)
    cdef void* raw
    if zero:
        raw = calloc(total, 1)
    else:
        raw = malloc(total)
    if raw == NULL:
        raise MemoryError(f"ndws: unable to allocate {nbytes} bytes for array data")
    if kind == BLOCK_MAIN:
        ndws_advise_huge(raw, total)
    b.raw = raw
    b.data = <char*>((<uintptr_t>raw + <uintptr_t>(NDWS_ALIGNMENT - 1))
                     & ~(<uintptr_t>(NDWS_ALIGNMENT - 1)))
    ndws_poison(raw, b.data - <char*>raw)                       # the alignment slack, both
    ndws_poison(b.data + nbytes, (<char*>raw + total) - (b.data + nbytes))  # ends
    b.size = nbytes
    b.kind = kind
    PyTraceMalloc_Track(NDWS_TRACE_DOMAIN, <uintptr_t>raw, total)
    _n_allocs += 1
    _bytes_allocated += nbytes
    _n_live += 1
    _bytes_live += nbytes
    return b


cdef MemoryBlock foreign_block(object owner, char* data, Py_ssize_t size):
    cdef MemoryBlock b = MemoryBlock.__new__(MemoryBlock)
    b.data = data
    b.size = size
    b.kind = BLOCK_FOREIGN
    b.keep = owner
    return b


cdef MemoryBlock _EMPTY_BLOCK = MemoryBlock.__new__(MemoryBlock)
_EMPTY_BLOCK.data = ndws_empty_storage_bytes
_EMPTY_BLOCK.size = 0
_EMPTY_BLOCK.kind = BLOCK_STATIC


cdef MemoryBlock empty_block():
    return _EMPTY_BLOCK


def fill_file(path, Py_ssize_t length):
    # ND4J's fillFile: truncate, then write zeros in 16 KiB chunks until at least `length`
    # bytes are written, so the file ends up a multiple of 16384. A length the disk can't
    # hold is refused before anything is written (writing would fill the disk, then fail).
    cdef Py_ssize_t written = 0
    directory = os.path.dirname(os.path.abspath(path))
    if hasattr(os, "statvfs"):
        st = os.statvfs(directory)
        free = st.f_bavail * st.f_frsize
        if (length + 16383) // 16384 * 16384 > free:
            raise OSError(errno.ENOSPC, f"more than the {free} bytes free in {directory!r}")
    chunk = bytes(16384)
    with open(path, "wb") as f:
        while written < length:
            f.write(chunk)
            written += 16384


cdef MemoryBlock map_file(object path):
    import mmap
    cdef Py_ssize_t flen = os.path.getsize(path)
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), flen)
    # Hold a writable buffer of the mapping for the block's lifetime: the mmap object then
    # refuses to close or resize while any array can still see its memory.
    cdef MemoryBlock b = MemoryBlock.__new__(MemoryBlock)
    PyObject_GetBuffer(mm, &b.view, PyBUF_WRITABLE)
    b.has_view = True
    b.data = <char*>b.view.buf
    b.size = flen
    b.kind = BLOCK_MMAP
    b.keep = mm
    return b


cdef MemoryBlock map_temp_file(Py_ssize_t length, object directory):
    # A new temporary file of at least `length` bytes, mapped and unlinked at once: the mapping
    # keeps the data, and nothing is left on disk even if the process dies (POSIX).
    fd, path = tempfile.mkstemp(prefix="workspace", suffix="tempMMAP", dir=directory)
    os.close(fd)
    try:
        fill_file(path, length)
        block = map_file(path)
    finally:
        try:
            os.unlink(path)
        except OSError:  # where unlinking an open file is refused, it stays until exit
            pass
    return block
