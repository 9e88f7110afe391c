#!/usr/bin/env python
"""Async prefetch: does AsyncDataSetIterator overlap loading with compute, and what does its
machinery cost per batch?

1. Overlap. A source costs T_load per batch and the consumer T_compute (both ``time.sleep``,
   which releases the GIL as real I/O or a nogil kernel does). An epoch of N batches through
   ``AsyncDataSetIterator`` is timed from construction to the last batch and compared with the
   target ``1.1 x N x max(T_load, T_compute)`` (PASS/MISS) and with the synchronous loop's
   ``N x (T_load + T_compute)``, also measured.
2. Overhead. With T_load = T_compute = 0, the time per batch of: the source alone
   (synchronous), AsyncDataSetIterator with and without its ring workspace, and a plain
   producer thread feeding a ``queue.Queue`` (the least a thread pipeline can do). The figure
   of merit is the async iterator's extra cost per batch over the plain queue pipeline.
   PyTorch's DataLoader has no thread mode: with ``num_workers=1`` it runs a worker *process*;
   it is timed too when torch is installed (``--no-torch`` skips it), for scale only.

Each batch is a DataSet of (64, 32) float32 features and (64, 10) labels built from NumPy (a
copy into the ring, as a record reader or an array iterator would make).

Usage::

    python bench/bench_async.py            # full run (about a minute)
    python bench/bench_async.py --quick    # short run, noisier numbers
    python bench/bench_async.py --instructions   # the overhead in instructions (callgrind)

On a shared machine the overhead's wall-clock figures move with the neighbours' load;
``--instructions`` counts the instructions per batch instead (valgrind's callgrind, threads
serialised, so it counts the work, not the waiting): one epoch of N1 and one of N2 batches of
each kind, each in its own interpreter under ``PYTHONHASHSEED=0`` with the garbage collector
off, and (count(N2) - count(N1)) / (N2 - N1).

Figures are medians over repeats. A miss is reported, never hidden, and does not change the
exit status (this is a measurement).
"""
from __future__ import annotations

import argparse
import os
import platform
import queue
import statistics
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    # run as `python bench/bench_async.py`: use this checkout's in-place build
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from ndws.data.async_iterators import AsyncDataSetIterator  # noqa: E402
from ndws.data.dataset import DataSet  # noqa: E402
from ndws.data.iterators import DataSetIterator  # noqa: E402

TARGET = 1.1                 # async epoch / (N x max(T_load, T_compute))
ROWS, COLS, OUTCOMES = 64, 32, 10
#: (T_load, T_compute) in milliseconds
COSTS = [(4.0, 4.0), (6.0, 2.0), (2.0, 6.0)]


class SleepySource(DataSetIterator):
    """N batches, each costing `t_load` seconds to 'load' (a GIL-releasing sleep)."""

    def __init__(self, n: int, t_load: float):
        self.n, self.t_load, self.pos = n, t_load, 0
        rng = np.random.default_rng(0)
        self.features = rng.standard_normal((ROWS, COLS)).astype(np.float32)
        self.labels = rng.standard_normal((ROWS, OUTCOMES)).astype(np.float32)

    def has_next(self) -> bool:
        return self.pos < self.n

    def _next(self) -> DataSet:
        self.pos += 1
        if self.t_load:
            time.sleep(self.t_load)
        return DataSet(self.features, self.labels)

    def _reset(self) -> None:
        self.pos = 0

    def batch(self) -> int:
        return ROWS

    def input_columns(self) -> int:
        return COLS

    def total_outcomes(self) -> int:
        return OUTCOMES


def compute(ds: DataSet, t_compute: float) -> None:
    if t_compute:
        time.sleep(t_compute)


def sync_epoch(n: int, t_load: float, t_compute: float) -> float:
    src = SleepySource(n, t_load)
    start = time.perf_counter()
    while src.has_next():
        compute(src.next(), t_compute)
    return time.perf_counter() - start


def async_epoch(n: int, t_load: float, t_compute: float, use_workspace: bool = True) -> float:
    src = SleepySource(n, t_load)
    start = time.perf_counter()
    with AsyncDataSetIterator(src, queue_size=8, use_workspace=use_workspace) as it:
        while it.has_next():
            compute(it.next(), t_compute)
        elapsed = time.perf_counter() - start
    return elapsed


def queue_epoch(n: int, t_load: float, t_compute: float) -> float:
    """The least a thread pipeline does: a producer thread, a bounded queue, a sentinel."""
    src = SleepySource(n, t_load)
    end = object()
    start = time.perf_counter()
    q: queue.Queue = queue.Queue(8)

    def produce() -> None:
        while src.has_next():
            q.put(src.next())
        q.put(end)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    while True:
        item = q.get()
        if item is end:
            break
        compute(item, t_compute)
    elapsed = time.perf_counter() - start
    thread.join()
    return elapsed


class _TorchSource:
    """Map-style dataset for torch's DataLoader: the same batch as NumPy arrays."""

    def __init__(self, n: int):
        self.src = SleepySource(n, 0.0)

    def __len__(self) -> int:
        return self.src.n

    def __getitem__(self, i: int):
        return self.src.features.copy(), self.src.labels.copy()


def torch_epoch(n: int) -> float:
    from torch.utils.data import DataLoader
    loader = DataLoader(_TorchSource(n), batch_size=None, num_workers=1, prefetch_factor=8)
    start = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - start


def median_of(fn, repeats: int, *args) -> float:
    return statistics.median(fn(*args) for _ in range(repeats))


def overlap_table(quick: bool) -> None:
    n = 40 if quick else 150
    repeats = 3 if quick else 5
    print(f"1. Overlap: epoch of N={n} batches, ms (median of {repeats}); target async <= "
          f"{TARGET} x N x max(T_load, T_compute)")
    head = (f"{'T_load':>7s} {'T_comp':>7s} {'sync':>9s} {'N(Tl+Tc)':>9s} {'async':>9s} "
            f"{'N max':>9s} {'async/Nmax':>10s} {'sync/async':>10s}")
    print(head)
    print("-" * len(head))
    for t_load_ms, t_compute_ms in COSTS:
        t_load, t_compute = t_load_ms / 1000, t_compute_ms / 1000
        t_sync = median_of(sync_epoch, repeats, n, t_load, t_compute)
        t_async = median_of(async_epoch, repeats, n, t_load, t_compute)
        ideal_sync = n * (t_load + t_compute)
        ideal = n * max(t_load, t_compute)
        ratio = t_async / ideal
        verdict = "PASS" if ratio <= TARGET else "MISS"
        print(f"{t_load_ms:7.1f} {t_compute_ms:7.1f} {t_sync * 1e3:9.1f} {ideal_sync * 1e3:9.1f} "
              f"{t_async * 1e3:9.1f} {ideal * 1e3:9.1f} {ratio:10.3f} {t_sync / t_async:10.2f} "
              f"{verdict}")
    print("  (time.sleep overshoots by tens of microseconds per call, in both columns)")
    print()


def overhead_table(quick: bool, with_torch: bool) -> None:
    n = 1000 if quick else 5000
    repeats = 3 if quick else 7
    print(f"2. Overhead: N={n} batches with T_load = T_compute = 0, us per batch (median of "
          f"{repeats})")
    rows = [
        ("synchronous (the source alone)", lambda: sync_epoch(n, 0.0, 0.0)),
        ("queue.Queue + producer thread", lambda: queue_epoch(n, 0.0, 0.0)),
        ("AsyncDataSetIterator (ring)", lambda: async_epoch(n, 0.0, 0.0, True)),
        ("AsyncDataSetIterator (no workspace)", lambda: async_epoch(n, 0.0, 0.0, False)),
    ]
    results = {}
    for label, fn in rows:
        results[label] = statistics.median(fn() for _ in range(repeats)) / n * 1e6
        print(f"  {label:40s} {results[label]:8.1f}")
    base = results["queue.Queue + producer thread"]
    for label in ("AsyncDataSetIterator (ring)", "AsyncDataSetIterator (no workspace)"):
        print(f"  {label} - queue pipeline: {results[label] - base:+.1f} us per batch "
              f"({results[label] / base:.2f}x)")
    if with_torch:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("  torch DataLoader: torch is not installed, skipped")
        else:
            t = statistics.median(torch_epoch(n) for _ in range(max(1, repeats // 2)))
            print(f"  {'torch DataLoader(num_workers=1) *':40s} {t / n * 1e6:8.1f}")
            print("  * a worker process, not a thread (DataLoader has no thread mode); includes "
                  "the worker's start-up; NumPy arrays only, no DataSet")
    print()


EPOCH_KINDS = {"synchronous": lambda n: sync_epoch(n, 0.0, 0.0),
               "AsyncDataSetIterator (ring)": lambda n: async_epoch(n, 0.0, 0.0, True),
               "AsyncDataSetIterator (no workspace)": lambda n: async_epoch(n, 0.0, 0.0, False)}


def instructions_table() -> None:
    from _callgrind import per_item
    n1, n2 = 100, 1100
    print(f"2'. Overhead in instructions per batch (callgrind, epochs of {n1} and {n2})")
    counts = {}
    for kind in EPOCH_KINDS:
        counts[kind] = per_item(lambda n: [__file__, "--one-epoch", kind, str(n)], n1, n2)
        print(f"  {kind:40s} {counts[kind]:10,.0f}")
    for kind in list(EPOCH_KINDS)[1:]:
        print(f"  {kind} - synchronous: {counts[kind] - counts['synchronous']:+,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run, noisier numbers")
    parser.add_argument("--no-torch", action="store_true", help="skip torch's DataLoader")
    parser.add_argument("--instructions", action="store_true",
                        help="only the overhead, in instructions (needs valgrind)")
    parser.add_argument("--one-epoch", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_epoch:
        import gc
        gc.disable()        # a collection costs millions of instructions, at no fixed time
        EPOCH_KINDS[args.one_epoch[0]](int(args.one_epoch[1]))
        return
    if args.instructions:
        instructions_table()
        return
    print(f"ndws bench_async: Python {platform.python_version()}, NumPy {np.__version__}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    overlap_table(args.quick)
    overhead_table(args.quick, not args.no_torch)


if __name__ == "__main__":
    main()
