#!/usr/bin/env python
"""Per-call cost of small ops: ndws' native fast paths against NumPy.

For each op and size (16, 1,024 and 1,048,576 elements, float32) it prints the median ns per
call of ndws inside a workspace (warmed up, so the workspace has learned its size and a cycle
allocates nothing), of NumPy's allocating call, and of NumPy's ``out=`` form, then the ratio
ndws / NumPy (allocating). The issue's target is a ratio of at most 0.5 at 16 elements: each
such row says PASS or MISS. Operators (``x + y``) and functions (``ndws.add``) are timed
separately. It also measures the thread thresholds (the element count from which two kernel
threads beat one) that the kernels' GRAIN constants in ndws/_threads.pyx are set from.

Usage::

    python bench/bench_ops.py            # full run (a few minutes on 2 cores)
    python bench/bench_ops.py --quick    # short run, noisier numbers
    python bench/bench_ops.py --grain    # only the thread-threshold sweep
    python bench/bench_ops.py --threads 1   # ndws kernels on one thread (NumPy's loops are
                                            # single-threaded; on a busy shared machine a
                                            # 2-thread region can wait a whole time slice)

Every figure and ratio printed comes from the same run. A miss is reported, never hidden, and
does not change the exit status (this is a measurement).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    # run as `python bench/bench_ops.py`: use this checkout's in-place build
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import ndws  # noqa: E402
from ndws import _threads  # noqa: E402

TARGET = 0.5                 # ndws per-call time / NumPy per-call time, at 16 elements
SIZES = [16, 1024, 1 << 20]
DTYPE = np.float32

#: (label, ndws statement, NumPy statement, NumPy out= statement); names: x, y (ndws operands),
#: r (ndws row), s (ndws 2-D), a, b, ra, sa (NumPy), o, o2, orow, ocol (NumPy outputs)
OPS = [
    ("add  ndws.add(x, y)", "ndws.add(x, y)", "np.add(a, b)", "np.add(a, b, out=o)"),
    ("add  x + y", "x + y", "a + b", "np.add(a, b, out=o)"),
    ("multiply  ndws.multiply(x, y)", "ndws.multiply(x, y)", "np.multiply(a, b)",
     "np.multiply(a, b, out=o)"),
    ("multiply  x * y", "x * y", "a * b", "np.multiply(a, b, out=o)"),
    ("maximum  ndws.maximum(x, y)", "ndws.maximum(x, y)", "np.maximum(a, b)",
     "np.maximum(a, b, out=o)"),
    ("scalar multiply  x * 2.5", "x * 2.5", "a * 2.5", "np.multiply(a, 2.5, out=o)"),
    ("row-broadcast add  s + r", "s + r", "sa + ra", "np.add(sa, ra, out=o2)"),
    ("exp  ndws.exp(x)", "ndws.exp(x)", "np.exp(a)", "np.exp(a, out=o)"),
    ("tanh  ndws.tanh(x)", "ndws.tanh(x)", "np.tanh(a)", "np.tanh(a, out=o)"),
    ("sum  x.sum()", "x.sum()", "a.sum()", "np.sum(a, out=o0)"),
    ("sum  ndws.sum(x)", "ndws.sum(x)", "np.sum(a)", "np.sum(a, out=o0)"),
    ("sum(axis=0)  s.sum(axis=0)", "s.sum(axis=0)", "sa.sum(axis=0)",
     "np.sum(sa, axis=0, out=orow)"),
    ("max(axis=1)  s.max(axis=1)", "s.max(axis=1)", "sa.max(axis=1)",
     "np.max(sa, axis=1, out=ocol)"),
    ("argmax(axis=1)  s.argmax(axis=1)", "s.argmax(axis=1)", "sa.argmax(axis=1)",
     "np.argmax(sa, axis=1, out=ocoli)"),
    ("mean  x.mean()", "x.mean()", "a.mean()", "np.mean(a, out=o0)"),
    ("var  x.var()", "x.var()", "a.var()", "np.var(a, out=o0)"),
]


def _shape2(n: int) -> tuple[int, int]:
    # the 2-D operand of row/axis ops: 4 rows (16 -> 4x4, 1024 -> 4x256, 2**20 -> 4x262144)
    return (4, n // 4)


def _namespace(n: int) -> dict:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n).astype(DTYPE)
    b = rng.standard_normal(n).astype(DTYPE)
    sa = a.reshape(_shape2(n))
    ra = b[: sa.shape[1]].copy()
    ns = {"np": np, "ndws": ndws, "a": a, "b": b, "sa": sa, "ra": ra,
          "o": np.empty_like(a), "o2": np.empty_like(sa), "o0": np.empty((), DTYPE),
          "orow": np.empty(sa.shape[1], DTYPE), "ocol": np.empty(sa.shape[0], DTYPE),
          "ocoli": np.empty(sa.shape[0], np.intp)}
    # ndws operands are detached (they outlive the timing workspace's cycles); results of the
    # timed calls land in the workspace
    ns.update(x=ndws.array(a, detached=True), y=ndws.array(b, detached=True),
              s=ndws.array(sa, detached=True), r=ndws.array(ra, detached=True))
    return ns


def _calls_per_sample(n: int) -> int:
    # one call per workspace cycle for big arrays, so ndws reuses one output buffer per cycle
    # as NumPy's allocator reuses the block it just freed (same cache footprint)
    return 1000 if n <= 1024 else 1


def time_ns(stmt: str, ns: dict, n: int, samples: int, in_workspace: bool) -> float:
    """Median over `samples` of the mean ns per call of `stmt` (each sample one workspace
    cycle when `in_workspace`)."""
    timer = timeit.Timer(stmt, globals=ns)
    k = _calls_per_sample(n)
    ws_id = f"BENCH_OPS_{n}"
    res = []
    for i in range(samples + 3):   # 3 warm-up samples: the workspace learns its size
        if in_workspace:
            with ndws.workspace(ws_id):
                t = timer.timeit(k)
        else:
            t = timer.timeit(k)
        if i >= 3:
            res.append(t / k * 1e9)
    return statistics.median(res)


def per_call_table(quick: bool) -> None:
    print(f"Per-call cost, float32, ns (median); ndws inside a workspace, NumPy allocating and "
          f"with out=; target ndws/NumPy <= {TARGET} at 16 elements")
    head = f"{'op':36s} {'n':>8s} {'ndws':>10s} {'numpy':>10s} {'np out=':>10s} {'ratio':>6s}"
    print(head)
    print("-" * len(head))
    for n in SIZES:
        ns = _namespace(n)
        samples = (40 if quick else 200) if n <= 1024 else (20 if quick else 100)
        for label, nd_stmt, np_stmt, out_stmt in OPS:
            t_nd = time_ns(nd_stmt, ns, n, samples, True)
            t_np = time_ns(np_stmt, ns, n, samples, False)
            t_out = time_ns(out_stmt, ns, n, samples, False)
            ratio = t_nd / t_np
            verdict = ("PASS" if ratio <= TARGET else "MISS") if n == 16 else ""
            print(f"{label:36s} {n:8d} {t_nd:10.0f} {t_np:10.0f} {t_out:10.0f} {ratio:6.2f} "
                  f"{verdict}")
        print()


def _thread_time(stmt: str, ns: dict, threads: int, samples: int) -> float:
    timer = timeit.Timer(stmt, globals=ns)
    res = []
    with ndws.num_threads(threads):
        for i in range(samples + 2):
            k = 20
            t = timer.timeit(k)
            if i >= 2:
                res.append(t / k * 1e9)
    return statistics.median(res)


def grain_sweep(quick: bool) -> None:
    """Time 1 vs 2 kernel threads with the grains forced to 1 (so 2 threads run whenever
    allowed) over a size sweep; the threshold is the smallest size from which 2 threads win."""
    if ndws.get_num_threads() < 2:
        print("thread thresholds: fewer than 2 kernel threads available; sweep skipped")
        return
    saved = _threads._set_grains(elementwise=1, reduce=1)
    try:
        sizes = [1 << k for k in range(12, 22)]
        samples = 10 if quick else 40
        print("Thread thresholds (float32; ns per call with 1 and 2 kernel threads)")
        for label, stmt, out_name in [("add (out=)", "ndws.add(x, y, out=x)", None),
                                      ("sqrt (out=)", "ndws.sqrt(y, out=x)", None),
                                      ("sum", "x.sum(out=o0)", None),
                                      ("sum(axis=0) 16 rows", "s.sum(axis=0, out=orow)", None)]:
            threshold = None
            row = []
            for n in sizes:
                rng = np.random.default_rng(1)
                a = rng.random(n, dtype=np.float32)
                x = ndws.array(a, detached=True)
                y = ndws.array(a * 0.5, detached=True)
                s = ndws.array(a.reshape(16, -1), detached=True)
                ns = {"ndws": ndws, "x": x, "y": y, "s": s,
                      "o0": ndws.empty((), np.float32, detached=True),
                      "orow": ndws.empty(n // 16, np.float32, detached=True)}
                t1 = _thread_time(stmt, ns, 1, samples)
                t2 = _thread_time(stmt, ns, 2, samples)
                row.append(f"{n}: {t1 / 1e3:.1f}/{t2 / 1e3:.1f} us")
                if threshold is None and t2 < 0.9 * t1:
                    threshold = n
            print(f"  {label:22s} 2 threads win (>10%) from n = {threshold}")
            print("    " + ", ".join(row))
    finally:
        _threads._set_grains(**saved)
    print(f"  grains in use: {_threads._set_grains()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run, noisier numbers")
    parser.add_argument("--grain", action="store_true", help="only the thread-threshold sweep")
    parser.add_argument("--threads", type=int, default=None,
                        help="kernel threads for the per-call table (default: all)")
    args = parser.parse_args()
    if args.threads is not None:
        ndws.set_num_threads(args.threads)
    print(f"ndws bench_ops: Python {platform.python_version()}, NumPy {np.__version__}, "
          f"{os.cpu_count()} CPUs, kernel threads {ndws.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    if not args.grain:
        per_call_table(args.quick)
    if args.threads is None or args.threads > 1:
        grain_sweep(args.quick)


if __name__ == "__main__":
    main()
