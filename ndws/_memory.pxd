# ndws._memory: the memory every array lives in. A MemoryBlock is one contiguous, aligned piece
# of memory (heap, a NumPy array's, or a mapped file) and the only thing that ever frees it;
# arrays, views, exports and workspaces hold references (docs/architecture.md, invariant 1).

cdef extern from "_poison.h":
    void ndws_poison(const void* p, Py_ssize_t n) noexcept nogil
    void ndws_unpoison(const void* p, Py_ssize_t n) noexcept nogil
    const int NDWS_SANITIZED

cdef enum:
    NDWS_ALIGNMENT = 64    # every block's data: a cache line and a full AVX-512 vector

# what a block serves (MemoryBlock.kind)
cdef enum:
    BLOCK_DETACHED = 0
    BLOCK_MAIN = 1
    BLOCK_SPILL = 2
    BLOCK_PINNED = 3
    BLOCK_EXTERNAL = 4     # allocated while the workspace was toggled off
    BLOCK_FOREIGN = 5      # memory owned by a NumPy array (from_numpy)
    BLOCK_MMAP = 6
    BLOCK_STATIC = 7       # the shared empty block

cdef class MemoryBlock:
    # One contiguous piece of memory and the only thing that ever frees it: every NDArray, view,
    # NumPy export and workspace that uses the memory holds a reference, so the memory outlives
    # all of them (docs/architecture.md, invariant 1).
    cdef char* data             # aligned to ALIGNMENT
    cdef void* raw              # what malloc returned (NULL for memory owned by `keep`)
    cdef Py_ssize_t size        # usable bytes from `data`
    cdef Py_ssize_t exports     # live buffer-protocol / __array__ / DLPack exports
    cdef Py_ssize_t pins        # other threads' operations reading it right now (see _Pin)
    cdef list pinned            # ring blocks: the virtual positions of the pinned arrays
    cdef int kind               # BLOCK_* below
    cdef object keep            # the owner of foreign or mapped memory, kept alive with the block
    cdef Py_buffer view         # held buffer of a mmap (has_view), released in __dealloc__
    cdef bint has_view
    # A circular workspace's ring bookkeeping lives with the block it describes: virtual write
    # position (never decreases) and ring size. When a block stops being the ring (export
    # hand-off, regrowth), these freeze, so arrays it already overwrote stay "overwritten".
    cdef long long ring_written_end
    cdef Py_ssize_t ring_size

# A new heap block of `nbytes` (zeroed when `zero`), counted in `allocation_counters`;
# MemoryError when the heap refuses.
cdef MemoryBlock allocate_block(Py_ssize_t nbytes, bint zero, int kind)
# Memory owned by `owner` (a NumPy array), kept alive with the block.
cdef MemoryBlock foreign_block(object owner, char* data, Py_ssize_t size)
# A file mapped whole; a fresh temporary file of at least `length` bytes, mapped and unlinked.
cdef MemoryBlock map_file(object path)
cdef MemoryBlock map_temp_file(Py_ssize_t length, object directory)
# The shared block of every zero-size array: 64 always-valid bytes, so no array holds NULL.
cdef MemoryBlock empty_block()


cdef inline bint held(MemoryBlock b) noexcept:
    # Something outside the workspace still reads this block: NumPy/buffer/DLPack exports, or
    # another thread's operation in progress (a pin).
    return b.exports > 0 or b.pins > 0
