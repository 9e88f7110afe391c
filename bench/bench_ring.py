#!/usr/bin/env python
"""The async prefetcher's ring with batches of changing size: heap allocations and pinned
batches per epoch, adaptive ring (ndws/data/_ring.py) against ND4J's ring (trimmed mode, and a
new ring learning from the first batch of every epoch), in the same run.

The source gives time-series batches (features, labels and both masks) whose length is drawn
uniformly from [T_min, T_max] and shuffled every epoch, as a sequence iterator over files of
varying length does. Both rings run the producer's loop on this thread (one ring cycle per
batch, the last ``queue_size + 2`` batches kept alive as the queue and the consumer keep
them), so the counts are exact and free of thread timing; the adaptive one then runs through
``AsyncDataSetIterator`` itself too, whose counts must equal its loop's.

Reported per epoch: heap allocations ndws made for array data (``allocation_counters``),
batches with a spilled or pinned array (not in the ring's block), and the median time of a
batch (build + copy into the ring, noisy on a shared machine: compare within one run).

Usage::

    python bench/bench_ring.py            # 5 epochs of 100 batches
    python bench/bench_ring.py --quick    # 3 epochs of 40
"""
from __future__ import annotations

import argparse
import collections
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)   # run as `python bench/bench_ring.py`: this checkout's build

import numpy as np  # noqa: E402

import ndws  # noqa: E402
from ndws._memory import allocation_counters  # noqa: E402
from ndws.data import AsyncDataSetIterator, DataSet  # noqa: E402
from ndws.data._ring import Ring, RingMemory  # noqa: E402
from ndws.data.iterators import DataSetIterator  # noqa: E402

BATCH, FEATURES, OUTCOMES = 32, 64, 8
QUEUE = 8


class Sequences(DataSetIterator):
    """Batches of time series whose lengths are a per-epoch shuffle of `lengths`."""

    def __init__(self, lengths: list[int], seed: int):
        self.lengths, self.seed, self.epoch, self.pos = lengths, seed, 0, 0
        self.order = self._order()

    def _order(self) -> list[int]:
        rng = np.random.default_rng([self.seed, self.epoch])
        return rng.permutation(self.lengths).tolist()

    def has_next(self) -> bool:
        return self.pos < len(self.order)

    def _next(self) -> DataSet:
        t = self.order[self.pos]
        self.pos += 1
        return DataSet(np.ones((BATCH, FEATURES, t), np.float32),
                       np.zeros((BATCH, OUTCOMES, t), np.float32),
                       np.ones((BATCH, t), np.float32), np.ones((BATCH, t), np.float32))

    def _reset(self) -> None:
        self.epoch += 1
        self.pos = 0
        self.order = self._order()

    def batch(self) -> int:
        return BATCH


class ND4JRing(Ring):
    """The ring as ND4J runs it: one workspace, learning from its first batch, trimmed mode
    for a batch that does not fit, nothing remembered across epochs."""

    def __exit__(self, *exc_info):
        self.workspace.__exit__(*exc_info)


def conf() -> ndws.WorkspaceConfiguration:
    # AsyncDataSetIterator's ring configuration (ND4J's)
    return ndws.WorkspaceConfiguration(
        policy_allocation="OVERALLOCATE", policy_learning="FIRST_LOOP",
        policy_reset="ENDOFBUFFER_REACHED", policy_spill="REALLOCATE",
        min_size=10 * 1024 * 1024, overallocation_limit=float(QUEUE + 2))


def loop(ring_type: type, source: Sequences, epochs: int) -> list[tuple[int, int, float]]:
    """(allocations, batches off the ring block, median batch time) per epoch."""
    memory, rows = RingMemory(), []
    for epoch in range(epochs):
        if epoch:
            source.reset()
        before = allocation_counters()["allocations"]
        ring = ring_type(conf(), "BENCH_RING", memory)
        alive: collections.deque = collections.deque(maxlen=QUEUE + 2)
        off, times = 0, []
        while source.has_next():
            start = time.perf_counter()
            with ring:
                ds = source.next()
            times.append(time.perf_counter() - start)
            off += any(a.memory_kind != "main" for a in (ds.features, ds.labels,
                                                         ds.features_mask, ds.labels_mask))
            alive.append(ds)
        alive.clear()
        ring.close()
        rows.append((allocation_counters()["allocations"] - before, off,
                     statistics.median(times)))
    return rows


def through_async(source: Sequences, epochs: int) -> list[tuple[int, int]]:
    rows = []
    before = allocation_counters()["allocations"]
    with AsyncDataSetIterator(source, queue_size=QUEUE) as it:
        for _ in range(epochs):
            off = sum(any(a.memory_kind != "main" for a in (ds.features, ds.labels,
                                                           ds.features_mask, ds.labels_mask))
                      for ds in it)
            rows.append((allocation_counters()["allocations"] - before, off))
            before = allocation_counters()["allocations"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    epochs, n = (3, 40) if args.quick else (5, 100)
    t_min, t_max = 20, 500
    lengths = np.random.default_rng(0).integers(t_min, t_max + 1, n).tolist()
    print(f"ndws ring bench: {n} batches/epoch of ({BATCH}, {FEATURES}, T) features, "
          f"({BATCH}, {OUTCOMES}, T) labels and two ({BATCH}, T) masks, T uniform in "
          f"[{t_min}, {t_max}] shuffled per epoch; queue_size {QUEUE}; "
          f"{platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} CPUs")
    nd4j = loop(ND4JRing, Sequences(lengths, 1), epochs)
    adaptive = loop(Ring, Sequences(lengths, 1), epochs)
    pipeline = through_async(Sequences(lengths, 1), epochs)
    print()
    print("| epoch | ND4J ring: allocations | off the block | ms/batch "
          "| adaptive: allocations | off the block | ms/batch "
          "| AsyncDataSetIterator: allocations | off the block |")
    print("|---|---|---|---|---|---|---|---|---|")
    for e in range(epochs):
        a, b, c = nd4j[e], adaptive[e], pipeline[e]
        print(f"| {e + 1} | {a[0]} | {a[1]} | {a[2] * 1e3:.3f} | {b[0]} | {b[1]} | "
              f"{b[2] * 1e3:.3f} | {c[0]} | {c[1]} |")
    total_a = sum(r[0] for r in nd4j)
    total_b = sum(r[0] for r in adaptive)
    print(f"\nheap allocations over {epochs} epochs: ND4J's ring {total_a}, adaptive "
          f"{total_b} ({total_a / max(total_b, 1):.1f}x fewer); the adaptive loop and "
          f"AsyncDataSetIterator agree: {[r[:2] for r in adaptive] == pipeline}")


if __name__ == "__main__":
    main()
