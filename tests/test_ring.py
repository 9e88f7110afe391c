"""The async prefetcher's ring with batches of changing size (ndws/data/_ring.py): variable-length
time series with masks flow through with the values the source made, the ring is replaced by
one made for a batch that did not fit (one pinned batch, not ND4J's three laps of them), the
size is remembered across reset(), a steady epoch allocates nothing per batch, and a batch kept
past its slot raises instead of changing. Interleavings are arranged with threading.Event."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import ndws
from ndws._memory import allocation_counters
from ndws.data import AsyncDataSetIterator, AsyncMultiDataSetIterator, DataSet, MultiDataSet
from ndws.data._ring import Ring, RingMemory
from ndws.data.iterators import DataSetIterator, MultiDataSetIterator

TIMEOUT = 60


def values(k, rows, cols, t):
    """Batch k of length t: features, labels and both masks, each distinct per batch."""
    base = np.arange(rows * cols * t, dtype=np.float32).reshape(rows, cols, t)
    features = base + 1000.0 * k
    labels = np.full((rows, 2, t), k, np.float32)
    f_mask = np.zeros((rows, t), np.float32)
    f_mask[:, : max(1, t - k % 3)] = 1
    l_mask = np.ones((rows, t), np.float32)
    l_mask[0, 0] = 0 if k % 2 else 1
    return features, labels, f_mask, l_mask


def array_bytes(rows, cols, t):
    """The ring bytes of each array of a batch, in the order DataSet allocates them
    (features, labels, features_mask, labels_mask), rounded up to ndws.ALIGNMENT."""
    a = ndws.ALIGNMENT
    return [-(-n // a) * a for n in (rows * cols * t * 4, rows * 2 * t * 4, rows * t * 4,
                                      rows * t * 4)]


def cycle_bytes(rows, cols, t):
    """The ring bytes of one batch."""
    return sum(array_bytes(rows, cols, t))


def block_of(nbytes):
    """ND4J's block learned from a cycle of `nbytes`: 1.3 times, then 8 - size % 8 more."""
    block = int(nbytes * 1.3)
    return block + 8 - block % 8


class Source(DataSetIterator):
    """Batches of time series of the given lengths. With `gated`, batch k is built only once
    `release[k]` is set, and `entered[k]` says the producer has started it (its ring cycle is
    open: whatever the ring does between batches is done)."""

    def __init__(self, lengths, rows=8, cols=16, gated=False):
        self.lengths, self.rows, self.cols, self.pos = list(lengths), rows, cols, 0
        self.gated = gated
        self.entered = [threading.Event() for _ in self.lengths]
        self.release = [threading.Event() for _ in self.lengths]

    def has_next(self):
        return self.pos < len(self.lengths)

    def _next(self):
        k = self.pos
        if self.gated:
            self.entered[k].set()
            assert self.release[k].wait(TIMEOUT)
        self.pos += 1
        return DataSet(*values(k, self.rows, self.cols, self.lengths[k]))

    def _reset(self):
        self.pos = 0


def check(ds, src, k):
    for got, want in zip((ds.features, ds.labels, ds.features_mask, ds.labels_mask),
                         values(k, src.rows, src.cols, src.lengths[k])):
        np.testing.assert_array_equal(got.numpy(), want)


def kinds_of(ds):
    return tuple(a.memory_kind for a in (ds.features, ds.labels, ds.features_mask,
                                         ds.labels_mask))


def expected_kinds(src, memory=0):
    """What the adaptive ring does, batch by batch, as the memory kinds of the batch's four
    arrays: a first ring learns from its first batch (spills) unless a size is remembered; in
    a batch bigger than the block, the arrays from the one that crosses the block's end on are
    pinned (ND4J's trimmed mode), and the ring is replaced by one whose block is learned from
    the largest batch so far. Returns the kinds, the largest batch and the last block."""
    kinds, largest, block = [], memory, block_of(memory) if memory else 0
    for t in src.lengths:
        sizes = array_bytes(src.rows, src.cols, t)
        n = sum(sizes)
        if not block:
            kinds.append(("spill",) * 4)
        else:
            ends = np.cumsum(sizes)
            kinds.append(tuple("pinned" if ends[: i + 1].max() > block else "main"
                               for i in range(4)))
        largest = max(largest, n)
        if not block or n > block:
            block = block_of(largest)
    return kinds, largest, block


MAIN = ("main",) * 4


def test_variable_length_batches_with_masks_flow_intact():
    rng = np.random.default_rng(5)
    lengths = [3] + rng.integers(1, 60, 80).tolist()
    src = Source(lengths)
    kinds, _, block = expected_kinds(src)
    with AsyncDataSetIterator(src, queue_size=3) as it:
        previous, got = None, []
        for k in range(len(lengths)):
            ds = it.next()
            check(ds, src, k)
            if previous is not None:
                check(previous, src, k - 1)         # the batch before is always intact
            got.append(kinds_of(ds))
            previous = ds
        assert not it.has_next()
        assert it.workspace.initial_block_size == block
    assert got == kinds
    # each new maximum (by more than the 30% slack) costs one batch with pinned arrays, not
    # three laps of the ring
    grown = [k for k in kinds if "pinned" in k]
    assert 1 <= len(grown) <= 12 and kinds[-30:] == [MAIN] * 30


def test_the_ring_remembers_the_largest_batch_across_reset():
    lengths = [2, 2, 30, 2, 25, 2, 2, 3, 30, 1]
    src = Source(lengths, rows=16, cols=32)
    it = AsyncDataSetIterator(src, queue_size=2)
    try:
        first = [kinds_of(ds) for ds in it]
        assert first == expected_kinds(src)[0]
        assert [k[3] for k in first] == ["spill", "main", "pinned"] + ["main"] * 7
        largest = cycle_bytes(16, 32, 30)
        before = allocation_counters()["allocations"]
        it.reset()
        second = []
        for k, ds in enumerate(it):
            check(ds, src, k)
            second.append(kinds_of(ds))
        spent = allocation_counters()["allocations"] - before
        ring = it.workspace
        # the new ring was made for the largest batch: no spill, no pinned batch; the epoch
        # cost the priming cycle's allocation and the ring's block, nothing per batch
        assert second == [MAIN] * len(lengths) == expected_kinds(src, largest)[0]
        assert spent == 2
        assert ring.initial_block_size == block_of(largest)
        assert ring.current_size == max(block_of(largest) * 5, 10 * 1024 * 1024)
    finally:
        it.close()


def test_steady_epochs_allocate_nothing_per_batch():
    rng = np.random.default_rng(1)
    src = Source(rng.integers(1, 40, 60).tolist(), rows=4, cols=8)
    counts = []
    before = allocation_counters()["allocations"]     # the producer starts at once
    with AsyncDataSetIterator(src, queue_size=4) as it:
        for _ in range(3):
            n = sum(1 for _ in it)                    # (resets first from epoch 2 on)
            counts.append(allocation_counters()["allocations"] - before)
            assert n == 60
            before = allocation_counters()["allocations"]
    # epoch 1: the first batch's 4 spills, the ring, and per growth its pinned arrays, the
    # priming cycle and the new ring; epochs 2 and 3: the primed ring (2 allocations) whatever
    # the number of batches
    kinds = expected_kinds(src)[0]
    grown = [k for k in kinds if "pinned" in k]
    assert grown and counts[0] == 4 + 1 + sum(k.count("pinned") + 2 for k in grown)
    assert counts[1:] == [2, 2]


def test_a_replaced_ring_keeps_its_batches_for_a_lap_then_they_raise():
    # a shorter first batch (the ring learns its block), then longer ones; 2 MB batches, so
    # the ring has queue_size + 3 blocks (more than the 10 MiB minimum)
    lengths = [30, 30, 30, 60] + [60] * 8
    src = Source(lengths, rows=64, cols=256, gated=True)
    it = AsyncDataSetIterator(src, queue_size=2)
    try:
        for k in range(3):
            src.release[k].set()
        it.next()
        it.next()
        kept = it.next()                             # batch 2, in the first ring
        old = it.workspace
        blocks = old.current_size // old.initial_block_size
        assert blocks == 5
        src.release[3].set()
        grown = it.next()                            # batch 3: did not fit, partly pinned
        assert "pinned" in kinds_of(grown) and grown.features.workspace_id == old.id
        # The old ring goes when the producer starts batch 3 + blocks, when its memory would
        # have come round; until then its batches are intact. (The producer opens the cycle
        # of batch k + 1 as soon as batch k is made: `entered` says it has.)
        for k in range(4, 3 + blocks):
            src.release[k].set()
            ds = it.next()
            assert kinds_of(ds) == MAIN and ds.features.workspace_id == it.workspace.id
            assert it.workspace is not old
            assert src.entered[k + 1].wait(TIMEOUT)
            if k + 1 < 3 + blocks:
                assert kept.features.stale is None and grown.labels_mask.stale is None
                check(kept, src, 2)
                check(grown, src, 3)
        for batch in (kept, grown):
            assert batch.features.stale == "destroyed"
            with pytest.raises(ndws.WorkspaceError) as info:
                batch.labels + 1
            assert info.value.kind == "destroyed" and info.value.workspace_id == old.id
    finally:
        for gate in src.release:
            gate.set()
        it.close()


def test_a_batch_kept_past_its_slot_in_an_adapted_ring_raises_overwritten():
    lengths = [1, 50] + [50, 10, 30, 50, 20] * 8
    src = Source(lengths, rows=64, cols=64)
    with AsyncDataSetIterator(src, queue_size=2) as it:
        it.next()
        it.next()                                    # the long batch: the ring is replaced
        kept = it.next()                             # the new ring's first batch
        ring = it.workspace
        blocks = ring.current_size // ring.initial_block_size
        for k in range(3, 3 + blocks):
            ds = it.next()
            check(ds, src, k)
        assert ring is it.workspace                  # steady: no more replacement
        assert kept.features.stale == "overwritten"
        with pytest.raises(ndws.WorkspaceError) as info:
            kept.features.sum()
        assert info.value.kind == "overwritten" and info.value.workspace_id == ring.id
        # the mask lies after the features in the slot: how far the producer has written into
        # it depends on how far ahead it runs (a loaded machine: not yet), so take batches
        # until the ring has come round to it
        for k in range(3 + blocks, len(lengths)):
            if kept.features_mask.stale:
                break
            check(it.next(), src, k)
        with pytest.raises(ndws.WorkspaceError) as info:
            kept.features_mask.sum()
        assert info.value.kind == "overwritten" and info.value.workspace_id == ring.id
        for _ in it:
            pass


class MultiSource(MultiDataSetIterator):
    def __init__(self, lengths):
        self.lengths, self.pos = lengths, 0

    def has_next(self):
        return self.pos < len(self.lengths)

    def _next(self):
        k, self.pos = self.pos, self.pos + 1
        f, lab, fm, lm = values(k, 8, 16, self.lengths[k])
        return MultiDataSet([f], [lab], [fm], [lm])

    def _reset(self):
        self.pos = 0

    def batch(self):
        return 8


def test_the_multi_dataset_ring_adapts_too():
    lengths = [2, 40, 30, 40, 5]
    with AsyncMultiDataSetIterator(MultiSource(lengths), queue_size=2) as it:
        got = [(m.labels_masks[0].memory_kind, m.features_masks[0].numpy().shape) for m in it]
    assert got == [("spill", (8, 2)), ("pinned", (8, 40)), ("main", (8, 30)),
                   ("main", (8, 40)), ("main", (8, 5))]


@pytest.mark.parametrize("mode", ["SPILL_EVERYTHING", "BYPASS_EVERYTHING"])
def test_debug_modes_with_variable_lengths(mode):
    mgr = ndws.get_workspace_manager()
    mgr.debug_mode = getattr(ndws.DebugMode, mode)
    try:
        src = Source([2, 30, 4, 50, 3])
        with AsyncDataSetIterator(src, queue_size=2) as it:
            for k, ds in enumerate(it):
                check(ds, src, k)
    finally:
        mgr.debug_mode = None


def test_a_new_prefetcher_over_the_same_source_starts_on_a_ring_that_fits():
    # a network's fit makes a prefetcher per call, and DL4J's habit is one call per epoch
    src = Source([2, 30, 4, 20], rows=16, cols=32)
    with AsyncDataSetIterator(src, queue_size=2) as it:
        first = [kinds_of(ds) for ds in it]
    assert first == expected_kinds(src)[0] and "pinned" in first[1]
    src.reset()
    before = allocation_counters()["allocations"]
    with AsyncDataSetIterator(src, queue_size=2) as it:
        second = [kinds_of(ds) for ds in it]
        assert it.workspace.initial_block_size == block_of(cycle_bytes(16, 32, 30))
    assert second == [MAIN] * 4
    assert allocation_counters()["allocations"] - before == 2     # the primed ring


class Unhashable(Source):
    def __eq__(self, other):
        return self is other

    __hash__ = None


def test_an_unhashable_source_remembers_within_its_prefetcher_only():
    src = Unhashable([2, 30, 4])
    with AsyncDataSetIterator(src, queue_size=2) as it:
        assert [kinds_of(ds) for ds in it] == expected_kinds(src)[0]
        assert [kinds_of(ds) for ds in it] == [MAIN] * 3           # after its reset
    src.reset()
    with AsyncDataSetIterator(src, queue_size=2) as it:
        assert [kinds_of(ds) for ds in it] == expected_kinds(src)[0]


def test_the_ring_names_the_rings_whose_batches_are_valid():
    # the Ring the producer drives, on this thread: ids() is the current ring and the retired
    # ones not yet destroyed
    conf = ndws.WorkspaceConfiguration(
        policy_allocation="OVERALLOCATE", policy_learning="FIRST_LOOP",
        policy_reset="ENDOFBUFFER_REACHED", policy_spill="REALLOCATE",
        min_size=1024, overallocation_limit=2.0)
    src = Source([2, 2, 20, 2, 2, 2, 2, 2])
    ring = Ring(conf, "IDS", RingMemory())
    batches = []
    try:
        for k in range(8):
            with ring:
                batches.append(src.next())
            ids = ring.ids()
            if k < 2:
                first = ring.workspace.id
                assert ids == {first}
            elif k < 2 + 3:                          # the first ring has 3 blocks
                assert ids == {first, ring.workspace.id} and len(ids) == 2
            else:
                assert ids == {ring.workspace.id}
                assert batches[1].features.stale == "destroyed"
        assert all(b.features.workspace_id in {first, ring.workspace.id} for b in batches)
    finally:
        ring.close()
    assert all(b.features.stale == "destroyed" for b in batches)


def test_shutdown_gives_back_the_batches_of_a_retired_ring_intact():
    # the 40-step batch did not fit: batches 0 to 2 live in the retired ring, 3 and 4 in the
    # new one; shutdown destroys both, after copying out what it gives back to the source
    src = Source([3, 3, 40, 3, 3])
    it = AsyncDataSetIterator(src, queue_size=8)
    state = it._state
    assert state.parked.wait(TIMEOUT)               # the epoch read, its end queued
    assert len(state.ring.ids()) == 2
    it.shutdown()
    for k in range(5):
        ds = src.next()
        assert ds.features.workspace_id is None and ds.labels_mask.workspace_id is None
        check(ds, src, k)
    assert not src.has_next()
