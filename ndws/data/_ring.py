"""The ring an async prefetcher builds its batches in, and how it adapts when batches change
size (time series of varying length). See docs/data.md, "Batches of changing size".

A ring is ND4J's circular workspace: it learns one block from its first cycle (a batch), 1.3
times that batch's bytes, and every later batch takes one block. ND4J's answer to a batch that
does not fit its block is the "trimmed mode": every batch of the next three laps of the ring is
a heap allocation ("pinned"), and only then is the ring grown to 1.3 times the largest batch
seen. With sequences of varying length that is tens of heap-allocated batches each time a
longer batch comes, and, since a prefetcher's ring is destroyed at every ``reset()`` (ND4J's
rule), again at the start of every epoch, when the new ring learns from whatever batch comes
first.

Here the producer adapts the ring itself, between two batches:

* the largest batch seen (the bytes of its cycle) is remembered for the source iterator,
  across ``reset()`` and across prefetchers over the same source (a network's ``fit`` makes
  one per call, and DL4J's habit is a call per epoch), so every ring after the first is made
  for it from the start: a priming cycle that allocates that many bytes makes the ring learn
  its block from them (ND4J's learning, fed the right size), and a steady epoch does no heap
  allocation from its first batch;
* a batch that did not fit its block (the arena has just made it a pinned allocation) retires
  the ring: the next batch goes to a new ring made for it. The retired ring is destroyed once
  the new one has produced as many batches as the ring has blocks, which is when its memory
  would have come round again; until then its batches are intact, afterwards they raise
  ``ndws.WorkspaceError`` (kind ``"destroyed"``) on use. So one longer batch costs one pinned
  batch and one new ring, and the rule that a kept batch raises instead of changing holds
  throughout.

Measured by bench/bench_ring.py (heap allocations per epoch of variable-length batches,
against ND4J's trimmed mode in the same run).
"""
from __future__ import annotations

import collections
import threading
import uuid
import weakref
from typing import Any

import numpy as np

import ndws

__all__: list[str] = []


class RingMemory:
    """What the rings of a source's prefetchers learn: kept across their producer runs (the
    epochs) and across prefetchers over the same source (see `ring_memory`)."""

    __slots__ = ("largest",)

    def __init__(self) -> None:
        #: the bytes of the largest batch (one ring cycle) seen so far, 0 before the first. A
        #: size hint only: producers of several prefetchers over one source may raise it at
        #: once (an int store each), and whichever wins, the next ring fits a batch as large.
        self.largest = 0


# source iterator -> its RingMemory; weak, so the memory goes with the source
_MEMORIES: "weakref.WeakKeyDictionary[Any, RingMemory]" = weakref.WeakKeyDictionary()
_MEMORIES_LOCK = threading.Lock()


def ring_memory(source: Any) -> RingMemory:
    """The RingMemory of `source` (a new one for a source that can't be weakly referenced:
    its prefetcher then remembers across its own resets only)."""
    with _MEMORIES_LOCK:
        try:
            memory = _MEMORIES.get(source)
            if memory is None:
                memory = _MEMORIES[source] = RingMemory()
        except TypeError:
            memory = RingMemory()
    return memory


class Ring:
    """The producer's rings for one run; the producer thread only.

    ``with ring:`` is one cycle (one batch) of the current ring; leaving it measures the batch
    and replaces the ring if the batch did not fit. `close` destroys every ring of the run.
    """

    def __init__(self, conf: Any, prefix: str, memory: RingMemory) -> None:
        self._conf = conf
        self._prefix = prefix
        self._memory = memory
        self._count = 0                      # batches produced in this run
        self._retired: collections.deque = collections.deque()   # (ring, destroy at count)
        self.workspace = self._new()

    def _new(self) -> Any:
        ws = ndws.get_workspace_manager().create_new_workspace(
            self._conf, f"{self._prefix}-{uuid.uuid4()}")
        largest = self._memory.largest
        if largest and getattr(ws, "is_circular", False):
            # The priming cycle: the ring learns its block (ND4J's FIRST_LOOP learning) from
            # a cycle as big as the largest batch seen. Its one allocation is never touched
            # and goes back to the allocator at once.
            with ws:
                ndws.empty(largest, dtype=np.uint8)
        return ws

    def __enter__(self) -> "Ring":
        # retired rings whose batches are now as old as a full lap of the ring
        while self._retired and self._retired[0][1] <= self._count:
            _destroy(self._retired.popleft()[0])
        self.workspace.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        ws = self.workspace
        ws.__exit__(*exc_info)
        self._count += 1
        if exc_info[0] is not None or not getattr(ws, "is_circular", False):
            return
        nbytes = ws.last_cycle_allocations
        if nbytes > self._memory.largest:
            self._memory.largest = nbytes
        block = ws.initial_block_size
        if block and nbytes > block:
            # Did not fit its block: the batch is pinned, the next goes to a ring made for it.
            # The old ring's newest batch is this one (count - 1); a ring of n blocks would
            # write over it with batch count - 1 + n, so that is when the old ring goes.
            self._retired.append((ws, self._count - 1 + ws.current_size // block))
            self.workspace = self._new()

    def ids(self) -> set:
        """The ids of the rings whose batches are still valid: the current one and those
        retired and not yet destroyed (what a batch must be copied out of before `close`).
        From another thread, read it only while the producer is not in a cycle."""
        return {self.workspace.id} | {ws.id for ws, _ in self._retired}

    def close(self) -> None:
        """Destroy every ring of the run (their batches raise ``"destroyed"`` from now on)."""
        for ws, _ in self._retired:
            _destroy(ws)
        self._retired.clear()
        _destroy(self.workspace)


def _destroy(ws: Any) -> None:
    # (a DummyWorkspace under DebugMode.BYPASS_EVERYTHING has no scope to close)
    if getattr(ws, "is_scope_active", False):
        ws.close()
    ndws.get_workspace_manager().destroy_workspace(ws)
