#!/usr/bin/env python
"""GEMM benchmark: GFLOP/s of ``ndws.matmul(out=)`` against ``numpy.matmul(out=)`` (OpenBLAS) and
``torch.mm(out=)`` when torch is importable, float32 and float64, on 1 and 2 threads.

Shapes: squares 64-2048 and the MLP 784-256-256-10 at batch 128 and 32, forward (X @ W) and both
backprop products (dW = X.T @ dY, dX = dY @ W.T; the transposes are views, never copies).

Each thread count runs in a fresh interpreter with OMP_NUM_THREADS / OPENBLAS_NUM_THREADS set
before NumPy is imported (and ``torch.set_num_threads``), so every library gets exactly that
many threads. Within a run the libraries take turns in blocks of samples over several rounds
(see `worker`), so a noisy neighbour slows all of them alike; figures are medians with the
10th-90th percentile spread of the samples, and every ratio compares numbers from the same run.

``--noisy`` measures every thread count twice: on the machine as it is, then with a neighbour
process that this script starts itself, pinned to the last CPU and busy 4 ms / idle 4 ms (what
a training loop's prefetch thread or another worker does to the kernels' threads).

Usage::

    python bench/bench_gemm.py            # full run (a few minutes on 2 cores)
    python bench/bench_gemm.py --quick    # short run, noisier numbers
    python bench/bench_gemm.py --noisy    # quiet and with a busy neighbour
    NDWS_GEMM_ISA=avx2 python bench/bench_gemm.py   # another kernel variant

Target: ndws >= 0.95x NumPy (median) for float32 at squares 256-2048 and the batch-128 MLP
shapes, in both conditions; those rows print PASS/MISS (a miss is reported, never hidden; the
exit status is 0).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    # run as `python bench/bench_gemm.py`: use this checkout's in-place build
    sys.path.insert(0, ROOT)

TARGET = 0.95
NEIGHBOUR_BUSY = NEIGHBOUR_IDLE = 0.004   # seconds
NEIGHBOUR_PERIOD = NEIGHBOUR_BUSY + NEIGHBOUR_IDLE


def neighbour_main():
    """The busy neighbour: pinned to the last CPU, busy 4 ms then idle 4 ms, forever."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    while True:
        t = time.perf_counter()
        while time.perf_counter() - t < NEIGHBOUR_BUSY:
            pass
        time.sleep(NEIGHBOUR_IDLE)


def settle(limit=1.0):
    """Wait until no thread of this process burns CPU (each library's pool spins for a while
    after a call: OpenBLAS about 0.1 s here, libgomp and ndws' helpers less), so a block of
    samples never measures a fight with the previous library's spinning threads."""
    end = time.perf_counter() + limit
    while time.perf_counter() < end:
        c0, w0 = time.process_time(), time.perf_counter()
        time.sleep(0.01)
        if time.process_time() - c0 < 0.1 * (time.perf_counter() - w0):
            return


def spread(values):
    """(10th, 90th) percentile of a list of samples."""
    v = sorted(values)
    return v[len(v) // 10], v[(9 * len(v)) // 10]
SQUARES = [64, 128, 256, 512, 1024, 2048]
TARGET_SQUARES = {256, 512, 1024, 2048}


def mlp_cases(batch):
    """(label, m, k, n, trans_a, trans_b) of one MLP 784-256-256-10 step at this batch."""
    cases = []
    for fan_in, fan_out in ((784, 256), (256, 256), (256, 10)):
        cases.append((f"{batch}x{fan_in}@{fan_in}x{fan_out}", batch, fan_in, fan_out, False, False))
        cases.append((f"({batch}x{fan_in}).T@{batch}x{fan_out}", fan_in, batch, fan_out, True, False))
        cases.append((f"{batch}x{fan_out}@({fan_in}x{fan_out}).T", batch, fan_out, fan_in, False, True))
    return cases


def all_cases(quick):
    cases = [(f"{n}^3", n, n, n, False, False, n in TARGET_SQUARES) for n in SQUARES]
    for batch in (128, 32):
        cases += [c + (batch == 128,) for c in mlp_cases(batch)]
    return cases


# ------------------------------------------------------------------------------------------------
# Worker: one thread count, one interpreter

def keep_freed_memory():
    """Make glibc's malloc keep the memory it frees (no block from mmap, nothing trimmed back
    to the kernel), so that no contender takes page faults for memory it allocates and frees
    every call; True if it did, False where there is no glibc (nothing changed).

    PyTorch's CPU tensors come from malloc. With glibc's defaults a block over the mmap
    threshold (128 KiB at first, raised to the largest block freed so far, at most 32 MiB) is
    mapped fresh at every allocation and unmapped at its free, so every call takes page faults:
    measured here (1 thread), an LSTM of 512 at batch 64 over 100 steps 312 ms forward (3,400
    faults) and 882 ms forward + backward (55,000) instead of 264 and 758; the char model's
    fit() segment 85-96 ms instead of 65, or either, depending on what the process freed
    before it. ndws allocates nothing per call in steady state. Every worker comparing against
    PyTorch calls this first: PyTorch is measured at its best, whatever ran before."""
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt"):
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    return bool(libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30))


def minor_faults():
    """This process's minor page faults so far (getrusage), or None where there is no
    `resource` module."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def worker_threads(threads):
    """Set ndws' thread count and PyTorch's (when it is installed) to `threads` in a worker,
    after `keep_freed_memory`; returns the torch module, or None without PyTorch."""
    import ndws
    keep_freed_memory()
    ndws.set_num_threads(threads)
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch


def worker(threads, quick):
    import numpy as np

    import ndws
    import ndws._linalg as la   # registers the native matmul (ndws.matmul goes through it)
    torch = worker_threads(threads)
    rng = np.random.default_rng(0)
    budget = 0.04 if quick else 0.25       # seconds of timed calls per library and case
    min_samples = 5 if quick else 15
    rows = []
    for dtype in (np.float32, np.float64):
        for label, m, k, n, ta, tb, target in all_cases(quick):
            if quick and dtype == np.float64 and m * n * k > 512 ** 3:
                continue
            a_store = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
            b_store = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
            a_np = a_store.T if ta else a_store
            b_np = b_store.T if tb else b_store
            c_np = np.empty((m, n), dtype)
            A = ndws.asarray(a_store)
            B = ndws.asarray(b_store)
            A = A.T if ta else A
            B = B.T if tb else B
            C = ndws.empty((m, n), dtype=dtype)
            calls = {
                "ndws": lambda: ndws.matmul(A, B, out=C),
                "numpy": lambda: np.matmul(a_np, b_np, out=c_np),
            }
            if torch is not None:
                a_t = torch.from_numpy(a_store)
                b_t = torch.from_numpy(b_store)
                a_t = a_t.T if ta else a_t
                b_t = b_t.T if tb else b_t
                c_t = torch.empty((m, n), dtype=a_t.dtype)
                calls["torch"] = lambda: torch.mm(a_t, b_t, out=c_t)
            # warm up (scratch, thread pools, caches) and check the answer on the way
            for fn in calls.values():
                fn()
                fn()
            ref = a_np.astype(np.float64) @ b_np.astype(np.float64)
            err = np.abs(C.numpy() - ref).max() / max(1e-30, np.abs(ref).max())
            assert err < (1e-4 if dtype == np.float32 else 1e-12), (label, err)
            # calls per sample so that one sample lasts ~0.5 ms at ~100 GFLOP/s
            flops = 2.0 * m * n * k
            inner = max(1, int(5e7 / flops))
            t0 = time.perf_counter()
            calls["numpy"]()
            one = max(time.perf_counter() - t0, 1e-7)
            samples = max(min_samples, int(budget / (one * inner)))
            # Libraries take turns in blocks of samples. Before a block: wait until the
            # previous library's threads stopped spinning (see `settle`; a sample taken while
            # another pool still spins on the two cores measures the fight, not the library),
            # then calls for 5 ms, so that every library's threads are awake as in a training
            # loop's steady state. Several rounds spread slow phases of a noisy machine over
            # all libraries; the median is over every sample of every round.
            times = {name: [] for name in calls}
            rounds = 2 if quick else 4
            for _ in range(rounds):
                for name, fn in calls.items():
                    settle()
                    t0 = time.perf_counter()
                    while time.perf_counter() - t0 < 0.005:
                        fn()
                    for _ in range(max(1, samples // rounds)):
                        t0 = time.perf_counter()
                        for _ in range(inner):
                            fn()
                        times[name].append((time.perf_counter() - t0) / inner)
            row = {"dtype": np.dtype(dtype).name, "case": label, "target": target,
                   "gflops": {name: flops / statistics.median(ts) / 1e9
                              for name, ts in times.items()},
                   # slowest decile .. fastest decile of the samples
                   "spread": {name: [flops / t / 1e9 for t in reversed(spread(ts))]
                              for name, ts in times.items()},
                   "us": {name: statistics.median(ts) * 1e6 for name, ts in times.items()}}
            rows.append(row)
    info = {"threads": threads, "isa": la.gemm_isa(), "blocking": la._gemm_info(),
            "numpy": np.__version__, "torch": None if torch is None else torch.__version__,
            "ndws_threads": ndws.get_num_threads()}
    print(json.dumps({"info": info, "rows": rows}))


# ------------------------------------------------------------------------------------------------
# Driver

def run_worker(script, threads, quick, noisy, role="--worker", extra=()):
    """Run `script`'s worker (`script role threads [extra] [--quick]`) in a fresh interpreter
    with every library's thread count set to `threads`, beside a busy neighbour process (the
    script's ``--neighbour``) if `noisy`; returns the JSON object the worker prints last."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, os.path.abspath(script), role, str(threads), *extra]
    if quick:
        cmd.append("--quick")
    neighbour = None
    if noisy:
        neighbour = subprocess.Popen([sys.executable, os.path.abspath(script), "--neighbour"])
    try:
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        raise SystemExit(f"worker with {threads} thread(s) failed")
    return json.loads(res.stdout.strip().splitlines()[-1])


def load_average():
    """The machine's 1/5/15-minute load averages: how busy the other processes kept the CPUs."""
    try:
        return "/".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def timed(contenders, rounds, per_round, inner=1, span=None):
    """Medians (ms) and p10-p90 spreads of each contender's call (name -> fn), after three
    warm-up calls each (learned workspaces, pools; the last two timed): `rounds` rounds in
    turn, each contender first waiting for the previous one's library threads to settle and
    called once untimed (its threads awake, as in a loop), then `per_round` samples, each the
    mean of `inner` calls.

    With `span` (seconds), each contender's `inner` is instead chosen from the faster of its
    two timed warm-up calls so that a sample lasts about `span` (several NEIGHBOUR_PERIODs): a
    call shorter than the busy neighbour's period otherwise lands whole blocks of samples in
    its busy or its idle phase, by luck, and the medians compare luck (see `neighbour_main`)."""
    inners = {}
    for name, fn in contenders.items():
        fn()
        one = 1.0
        for _ in range(2):
            t0 = time.perf_counter()
            fn()
            one = min(one, max(time.perf_counter() - t0, 1e-7))
        inners[name] = inner if span is None else max(1, int(span / one + 0.5))
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            settle()
            fn()
            n = inners[name]
            for _ in range(per_round):
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                times[name].append((time.perf_counter() - t0) / n)
    return {name: {"ms": statistics.median(ts) * 1e3, "spread": [v * 1e3 for v in spread(ts)],
                   "n": len(ts)} for name, ts in times.items()}


def banner(name, quick):
    """The first line of a benchmark's report: the machine, Python and how busy it was."""
    print(f"# {name}: {platform.machine()}, {os.cpu_count()} CPUs, python "
          f"{platform.python_version()}, load average {load_average()} at the start"
          f"{' (quick)' if quick else ''}")


def harness_parser(doc):
    """The arguments every benchmark with a worker takes: --quick, --noisy, --threads, and the
    hidden --worker THREADS / --neighbour roles `run_worker` starts it in."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples, noisier numbers")
    ap.add_argument("--noisy", action="store_true",
                    help="also measure with a busy neighbour process on the last CPU")
    ap.add_argument("--threads", default="1,2", help="thread counts to run (default 1,2)")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--neighbour", action="store_true", help=argparse.SUPPRESS)
    return ap


def run_role(args, worker):
    """Play the role run_worker started this process in (True), or False in the driver."""
    if args.neighbour:
        neighbour_main()
        return True
    if args.worker:
        worker(args.worker, args.quick)
        return True
    return False


def sweep(args, run, report):
    """Run the worker at each of --threads, quiet and (with --noisy) beside a busy neighbour,
    printing each run's table with `report`; returns the (passes, misses) summed."""
    passes = misses = 0
    for threads in [int(t) for t in args.threads.split(",")]:
        for noisy in ((False, True) if args.noisy else (False,)):
            p, m = report(threads, "busy neighbour" if noisy else "quiet",
                          run(threads, args.quick, noisy))
            passes += p
            misses += m
    return passes, misses


def run(threads, quick, noisy):
    return run_worker(__file__, threads, quick, noisy)


def report(threads, condition, out):
    """Print one run's table; returns (passes, misses) of its target rows."""
    info = out["info"]
    b32 = info["blocking"]["float32"]
    print(f"\n## {threads} thread(s), {condition}: ndws GEMM isa={info['isa']} (float32 MRxNR "
          f"{b32['mr']}x{b32['nr']}, MC/KC/NC {b32['mc']}/{b32['kc']}/{b32['nc']}), "
          f"numpy {info['numpy']}, torch {info['torch'] or 'absent'}")
    has_torch = info["torch"] is not None
    head = f"{'dtype':<8} {'shape':<24} {'ndws':>6} {'p10-p90':>9} {'numpy':>6} {'p10-p90':>9}"
    head += f" {'torch':>6}" if has_torch else ""
    head += f" {'x numpy':>8}" + (f" {'x torch':>8}" if has_torch else "")
    head += f" {'ndws us':>9}  target"
    print(head + "\n" + "-" * len(head))
    passes = misses = 0
    for row in out["rows"]:
        g, sp = row["gflops"], row["spread"]
        ratio = g["ndws"] / g["numpy"]
        line = (f"{row['dtype']:<8} {row['case']:<24} {g['ndws']:6.0f} "
                f"{sp['ndws'][0]:4.0f}-{sp['ndws'][1]:<4.0f} {g['numpy']:6.0f} "
                f"{sp['numpy'][0]:4.0f}-{sp['numpy'][1]:<4.0f}")
        line += f" {g['torch']:6.0f}" if has_torch else ""
        line += f" {ratio:8.2f}" + (f" {g['ndws'] / g['torch']:8.2f}" if has_torch else "")
        line += f" {row['us']['ndws']:9.1f}"
        if row["target"] and row["dtype"] == "float32":
            ok = ratio >= TARGET
            passes += ok
            misses += not ok
            line += f"  {'PASS' if ok else 'MISS'} (>= {TARGET}x numpy)"
        print(line)
    return passes, misses


def main():
    ap = harness_parser(__doc__)
    args = ap.parse_args()
    if run_role(args, worker):
        return
    banner("bench_gemm", args.quick)
    passes, misses = sweep(args, run, report)
    print(f"\n# GFLOP/s medians (p10-p90: slowest to fastest decile of the samples); "
          f"target rows: {passes} PASS, {misses} MISS")


if __name__ == "__main__":
    main()
