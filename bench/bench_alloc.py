#!/usr/bin/env python
"""Allocation benchmark: what a workspace saves, measured rather than assumed (docs/architecture.md,
invariant 4).

Part A times the hand-out of one array (ns per array, median of repeats) from a pre-sized
workspace against ``numpy.empty`` (and ``torch.empty`` when torch is importable), alone and with
a first write (``.fill(1.0)``), which adds the page faults of fresh heap memory. Part B runs a
cyclic loop of a few array operations with a workspace, without one, and in plain NumPy, each in
a fresh interpreter, and reports ndws' heap allocations of array data, tracemalloc's view of the
NumPy and ndws memory domains, RSS and time per iteration.

Usage::

    python bench/bench_alloc.py            # full run (about a minute on 2 cores)
    python bench/bench_alloc.py --quick    # short run, noisier numbers

Every figure and ratio printed comes from the same run. Targets are printed with PASS/MISS; a miss
is reported, never hidden, and does not change the exit status (this is a measurement).
"""
from __future__ import annotations

import argparse
import array
import gc
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time
import tracemalloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    # run as `python bench/bench_alloc.py`: use this checkout's in-place build
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import ndws  # noqa: E402
from bench_gemm import minor_faults  # noqa: E402

#: tracemalloc domains: NumPy's array data (numpy.lib.tracemalloc_domain) and ndws' blocks
NUMPY_DOMAIN = 389047
NDWS_DOMAIN = 0x6E647773

HANDOUT_TARGET = 0.4            # ndws hand-out time / numpy hand-out time
SHAPES = [(16,), (128, 256), (1024, 1024)]
#: arrays handed out per timed call; k arrays must fit the workspace (8 MiB each for 1024x1024)
K = {(16,): 1000, (128, 256): 64, (1024, 1024): 8}
#: timed calls per contender (full run, quick run)
REPEATS = {(16,): (400, 60), (128, 256): (300, 40), (1024, 1024): (60, 10)}
FILL_REPEATS = {(16,): (300, 40), (128, 256): (100, 15), (1024, 1024): (30, 6)}

LOOP_SHAPE = (256, 256)
LOOP_DTYPE = np.float32
LOOP_ITERS = (10_000, 1_000)    # (full, quick)
WARMUP_ITERS = 100


# ------------------------------------------------------------------------------------------------
# helpers

def rss_bytes() -> int:
    """Resident set size now (Linux /proc; falls back to the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_rss_bytes() -> int:
    """This process's peak RSS (VmHWM; ru_maxrss would carry the parent's peak over exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def aligned(nbytes: int) -> int:
    return -(-nbytes // ndws.ALIGNMENT) * ndws.ALIGNMENT


def try_torch():
    try:
        import torch
    except Exception:  # not installed (the default) or broken: the benchmark runs without it
        return None
    # One thread, like NumPy's fill: torch's own OpenMP pool spinning next to ndws' on a small
    # machine otherwise produces multi-millisecond stragglers.
    torch.set_num_threads(1)
    return torch


# ------------------------------------------------------------------------------------------------
# Part A: hand-out cost. Every contender runs the same shape of loop: a function with the
# factory in a local variable, k calls, results discarded, one perf_counter_ns pair around it.
# The workspace contender also pays for entering and closing its cycle inside the timed region.

def handout_plain(empty, shape, dt, k):
    t0 = time.perf_counter_ns()
    for _ in range(k):
        empty(shape, dtype=dt)
    return time.perf_counter_ns() - t0


def handout_ws(ws, empty, shape, dt, k):
    t0 = time.perf_counter_ns()
    with ws:
        for _ in range(k):
            empty(shape, dtype=dt)
    return time.perf_counter_ns() - t0


def fill_plain(empty, shape, dt, k):
    t0 = time.perf_counter_ns()
    for _ in range(k):
        empty(shape, dtype=dt).fill(1.0)
    return time.perf_counter_ns() - t0


def fill_ws(ws, empty, shape, dt, k):
    t0 = time.perf_counter_ns()
    with ws:
        for _ in range(k):
            empty(shape, dtype=dt).fill(1.0)
    return time.perf_counter_ns() - t0


def fill_torch(empty, shape, dt, k):
    # torch's in-place fill is spelled fill_; otherwise the same loop
    t0 = time.perf_counter_ns()
    for _ in range(k):
        empty(shape, dtype=dt).fill_(1.0)
    return time.perf_counter_ns() - t0


def held_plain(empty, shape, dt, k):
    # k arrays alive together, then released: the footprint of one workspace cycle
    keep = []
    append = keep.append
    t0 = time.perf_counter_ns()
    for _ in range(k):
        a = empty(shape, dtype=dt)
        a.fill(1.0)
        append(a)
    keep.clear()
    return time.perf_counter_ns() - t0


def held_torch(empty, shape, dt, k):
    keep = []
    append = keep.append
    t0 = time.perf_counter_ns()
    for _ in range(k):
        a = empty(shape, dtype=dt)
        a.fill_(1.0)
        append(a)
    keep.clear()
    return time.perf_counter_ns() - t0


def held_ws(ws, empty, shape, dt, k):
    keep = []
    append = keep.append
    t0 = time.perf_counter_ns()
    with ws:
        for _ in range(k):
            a = empty(shape, dtype=dt)
            a.fill(1.0)
            append(a)
    keep.clear()
    return time.perf_counter_ns() - t0


def noop_factory(shape, dtype=None):
    """The cheapest possible 'factory': what the loop and the call alone cost."""


def cycle_only(ws, k):
    t0 = time.perf_counter_ns()
    with ws:
        pass
    return time.perf_counter_ns() - t0


def measure(contenders: dict, repeats: int, k: int, warmup: int = 3) -> dict:
    """Median ns per array and minor page faults per array for each contender; contenders are
    interleaved (rotating order) so machine noise hits them alike."""
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    names = list(contenders)
    samples = {n: [] for n in names}
    faults = {n: 0 for n in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            f0 = minor_faults()
            samples[n].append(contenders[n]())
            faults[n] += minor_faults() - f0
    return {n: {"ns": statistics.median(samples[n]) / k,
                "faults": faults[n] / (repeats * k)} for n in names}


def part_a(quick: bool, torch) -> tuple[list[str], list[tuple[str, bool]]]:
    lines, targets = [], []
    dt = np.float64
    tdt = torch.float64 if torch is not None else None
    rows_h, rows_f, rows_k, checks, overhead = [], [], [], [], []
    mm = ndws.get_memory_manager()
    for shape in SHAPES:
        k = K[shape]
        nbytes = int(np.prod(shape)) * np.dtype(dt).itemsize
        size = k * aligned(nbytes)
        conf = ndws.WorkspaceConfiguration(initial_size=size, policy_learning="NONE",
                                           policy_allocation="STRICT")
        ws = ndws.workspace(f"BENCH_HANDOUT_{'x'.join(map(str, shape))}", conf)
        with ws:
            pass                       # allocate the block before anything is timed
        before = mm.allocation_statistics()["allocations"]

        reps = REPEATS[shape][quick]
        cont = {"ndws": lambda: handout_ws(ws, ndws.empty, shape, dt, k),
                "numpy": lambda: handout_plain(np.empty, shape, dt, k),
                "floor": lambda: handout_plain(noop_factory, shape, dt, k)}
        if torch is not None:
            cont["torch"] = lambda: handout_plain(torch.empty, shape, tdt, k)
        rows_h.append((shape, k, measure(cont, reps, k)))

        freps = FILL_REPEATS[shape][quick]
        cont = {"ndws": lambda: fill_ws(ws, ndws.empty, shape, dt, k),
                "numpy": lambda: fill_plain(np.empty, shape, dt, k)}
        if torch is not None:
            cont["torch"] = lambda: fill_torch(torch.empty, shape, tdt, k)
        rows_f.append((shape, k, measure(cont, freps, k)))

        cont = {"ndws": lambda: held_ws(ws, ndws.empty, shape, dt, k),
                "numpy": lambda: held_plain(np.empty, shape, dt, k)}
        if torch is not None:
            cont["torch"] = lambda: held_torch(torch.empty, shape, tdt, k)
        rows_k.append((shape, k, measure(cont, freps, k)))

        cyc = [cycle_only(ws, k) for _ in range(200 if not quick else 40)]
        overhead.append((shape, statistics.median(cyc)))
        spilled = mm.allocation_statistics()["allocations"] - before
        checks.append((shape, size, ws.spilled_size, spilled, ws.current_size))
        ws.destroy()
        ndws.get_workspace_manager().destroy_workspace(ws)

    def header(title: str, with_target: bool) -> None:
        lines.append(title)
        h = f"  {'shape':<13}{'k':>5}{'ndws ns':>11}{'numpy ns':>11}{'ratio':>8}"
        if torch is not None:
            h += f"{'torch ns':>11}{'nd/torch':>10}"
        h += f"{'faults/arr nd|np':>19}"
        if with_target:
            h += f"   target ratio <= {HANDOUT_TARGET}"
        lines.append(h)

    def row(shape, k, res, with_target: bool) -> None:
        nd, npy = res["ndws"]["ns"], res["numpy"]["ns"]
        ratio = nd / npy
        s = f"  {str(shape):<13}{k:>5}{nd:>11.1f}{npy:>11.1f}{ratio:>8.2f}"
        if torch is not None:
            tr = res["torch"]["ns"]
            s += f"{tr:>11.1f}{nd / tr:>10.2f}"
        s += f"{res['ndws']['faults']:>10.2f} | {res['numpy']['faults']:<7.2f}"
        if with_target:
            ok = ratio <= HANDOUT_TARGET
            s += f"   {'PASS' if ok else 'MISS'}"
            targets.append((f"A hand-out {shape} float64: ndws/numpy = {ratio:.2f} "
                            f"(<= {HANDOUT_TARGET})", ok))
        lines.append(s)

    header("A1. hand-out only: median ns per array (float64; ndws includes enter+close of "
           "its cycle, amortised over k)", True)
    for shape, k, res in rows_h:
        row(shape, k, res, True)
    floors = []
    for shape, k, res in rows_h:
        floor = res["floor"]["ns"]
        floors.append(f"{shape}: {floor:.1f} ns = {floor / res['numpy']['ns']:.2f} x numpy")
    lines.append("  call floor (the same loop calling a no-op Python function with the same "
                 "arguments): " + ", ".join(floors))
    lines.append("")
    header("A2. hand-out + first write (.fill(1.0)): median ns per array "
           "(informational; no target)", False)
    for shape, k, res in rows_f:
        row(shape, k, res, False)
    lines.append("")
    header("A3. hand-out + first write, the k arrays held until the end of the call (the "
           "footprint of one workspace cycle; release included; informational)", False)
    for shape, k, res in rows_k:
        row(shape, k, res, False)
    lines.append("")
    lines.append("  faults/arr = minor page faults per array (getrusage). A2 lets NumPy reuse the "
                 "one buffer it just freed (cache-warm,")
    lines.append("  no faults), while a workspace cycle hands out k distinct buffers; A3 gives "
                 "NumPy the same footprint as the cycle.")
    lines.append("  workspace cycle alone (enter + close, no arrays): " + ", ".join(
        f"{shape}: {ns:.0f} ns" for shape, ns in overhead))
    for shape, size, spilled_size, spills, current in checks:
        lines.append(f"  check {str(shape):<12} workspace {size} B (current_size {current}): "
                     f"spilled_size {spilled_size} B, heap allocations while timing {spills}"
                     + ("" if spills == 0 and spilled_size == 0 else "  <-- SPILLED"))
    return lines, targets


# ------------------------------------------------------------------------------------------------
# Part B: a cyclic loop, each variant in a fresh interpreter (clean RSS and counters)

def loop_body_ndws(src):
    a = ndws.empty(LOOP_SHAPE, dtype=LOOP_DTYPE)
    ndws.multiply(src, 0.5, out=a)
    b = ndws.exp(a)
    c = b * a + 1.0
    d = ndws.sqrt(c)
    s = d.sum()
    m = d.mean(axis=0)
    return s.item() + m[0].item()


def loop_body_numpy(src):
    a = np.empty(LOOP_SHAPE, dtype=LOOP_DTYPE)
    np.multiply(src, 0.5, out=a)
    b = np.exp(a)
    c = b * a + 1.0
    d = np.sqrt(c)
    s = d.sum()
    m = d.mean(axis=0)
    return s.item() + m[0].item()


def domain_live(snapshot, domain: int) -> tuple[int, int]:
    """(blocks, bytes) alive in one tracemalloc domain of a snapshot."""
    traces = snapshot.filter_traces([tracemalloc.DomainFilter(True, domain)]).traces
    return len(traces), sum(t.size for t in traces)


def run_loop(variant: str, iters: int, trace: bool) -> dict:
    """One variant of the loop: 'ws' (ndws in a workspace), 'detached' (ndws, no workspace),
    'numpy' (plain NumPy). With trace, tracemalloc runs and timing is not reported."""
    mm = ndws.get_memory_manager()
    rng = np.random.default_rng(0)
    host = rng.random(LOOP_SHAPE, dtype=LOOP_DTYPE)
    if variant == "numpy":
        src, body, ws = host, loop_body_numpy, None
    else:
        src, body = ndws.array(host), loop_body_ndws        # a detached ndws copy
        ws = ndws.workspace("BENCH_LOOP") if variant == "ws" else None   # default config
    del host
    gc.collect()
    if trace:
        tracemalloc.start()

    def stats():
        return mm.allocation_statistics()["allocations"]

    def snap():
        if not trace:
            return None
        s = tracemalloc.take_snapshot()
        return {"numpy": domain_live(s, NUMPY_DOMAIN), "ndws": domain_live(s, NDWS_DOMAIN)}

    out: dict = {"variant": variant, "iters": iters, "trace": trace}
    out["rss_start"] = rss_bytes()
    out["snap_start"] = snap()
    a0 = stats()
    f0 = minor_faults()
    # preallocated so that the harness itself doesn't grow RSS during the loop
    times = array.array("q", bytes(8 * iters))
    transients = array.array("q", bytes(8 * iters))
    acc = 0.0
    alloc_after_first = None
    perf = time.perf_counter_ns
    for i in range(iters):
        if trace:
            tracemalloc.reset_peak()
            level = tracemalloc.get_traced_memory()[0]
        t0 = perf()
        if ws is not None:
            with ws:
                acc += body(src)
        else:
            acc += body(src)
        t1 = perf()
        if trace:
            transients[i] = tracemalloc.get_traced_memory()[1] - level
        times[i] = t1 - t0
        if i == 0:
            alloc_after_first = stats()
        if i == WARMUP_ITERS - 1:
            out["rss_warm"] = rss_bytes()
            out["snap_warm"] = snap()
            alloc_warm = stats()
    a_end = stats()
    out["rss_end"] = rss_bytes()
    out["snap_end"] = snap()
    out["maxrss"] = peak_rss_bytes()
    out["faults_per_iter"] = (minor_faults() - f0) / iters
    out["alloc_total"] = a_end - a0
    out["alloc_first"] = alloc_after_first - a0
    out["alloc_after_first"] = a_end - alloc_after_first
    out["alloc_after_warm"] = a_end - alloc_warm
    out["live_bytes_end"] = mm.allocation_statistics()["live_bytes"]
    out["time_median_ns"] = statistics.median(times)
    out["time_median_after_warm_ns"] = statistics.median(times[WARMUP_ITERS:])
    out["checksum"] = acc / iters
    if trace:
        after = transients[WARMUP_ITERS:]
        out["transient_median"] = statistics.median(after)
        out["transient_max"] = max(after)
        out["transient_first"] = transients[0]
        # NumPy-owned data alive at the end of a body (its arrays still referenced): sample one
        # iteration after warm-up, snapshot inside the cycle
        if ws is not None:
            ws.__enter__()
        try:
            keep = _body_keep(variant, src)
            s = tracemalloc.take_snapshot()
            out["inside_numpy"] = domain_live(s, NUMPY_DOMAIN)
            out["inside_ndws"] = domain_live(s, NDWS_DOMAIN)
            del keep
        finally:
            if ws is not None:
                ws.close()
        tracemalloc.stop()
    if ws is not None:
        out["ws_current_size"] = ws.current_size
        out["ws_spilled_size"] = ws.spilled_size
        ws.destroy()
    return out


def _body_keep(variant: str, src):
    """The loop body returning its arrays instead of discarding them."""
    lib = np if variant == "numpy" else ndws
    a = lib.empty(LOOP_SHAPE, dtype=LOOP_DTYPE)
    lib.multiply(src, 0.5, out=a)
    b = lib.exp(a)
    c = b * a + 1.0
    d = lib.sqrt(c)
    return a, b, c, d, d.sum(), d.mean(axis=0)


def run_child(variant: str, iters: int, trace: bool) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, os.path.abspath(__file__), "--_loop", variant, "--_iters", str(iters)]
    if trace:
        cmd.append("--_trace")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"loop child {variant} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def part_b(quick: bool) -> tuple[list[str], list[tuple[str, bool]]]:
    iters = LOOP_ITERS[quick]
    variants = ["ws", "detached", "numpy"]
    label = {"ws": "ndws, workspace", "detached": "ndws, no workspace", "numpy": "plain NumPy"}
    timed = {v: run_child(v, iters, trace=False) for v in variants}
    traced = {v: run_child(v, iters, trace=True) for v in variants}
    lines, targets = [], []
    lines.append(f"B. cyclic loop, {iters} iterations, each variant in a fresh interpreter; body: "
                 f"empty{LOOP_SHAPE} {np.dtype(LOOP_DTYPE).name}, multiply(out=), exp, "
                 "b*a+1.0, sqrt, sum(), mean(axis=0)")
    lines.append("  workspace: ndws.workspace('BENCH_LOOP') with the default configuration "
                 "(FIRST_LOOP learning, OVERALLOCATE 0.3); "
                 f"warm-up = first {WARMUP_ITERS} iterations")
    w = 22
    lines.append("  " + " " * 44 + "".join(f"{label[v]:>{w}}" for v in variants))

    def line(name: str, fmt) -> None:
        lines.append(f"  {name:<44}" + "".join(f"{fmt(v):>{w}}" for v in variants))

    line("time/iteration, median (all iters)", lambda v: f"{timed[v]['time_median_ns']/1e3:.1f} us")
    line("time/iteration, median (after warm-up)",
         lambda v: f"{timed[v]['time_median_after_warm_ns']/1e3:.1f} us")
    line("ndws heap allocations: total",
         lambda v: "-" if v == "numpy" else str(timed[v]["alloc_total"]))
    line("ndws heap allocations: first iteration",
         lambda v: "-" if v == "numpy" else str(timed[v]["alloc_first"]))
    line("ndws heap allocations: iterations 2..N",
         lambda v: "-" if v == "numpy" else str(timed[v]["alloc_after_first"]))
    line("RSS at start", lambda v: mib(timed[v]["rss_start"]))
    line(f"RSS after warm-up ({WARMUP_ITERS} iters)", lambda v: mib(timed[v]["rss_warm"]))
    line("RSS at end", lambda v: mib(timed[v]["rss_end"]))
    line("RSS growth warm-up -> end",
         lambda v: f"{(timed[v]['rss_end'] - timed[v]['rss_warm']) / 2**10:+.0f} KiB")
    line("minor page faults/iteration", lambda v: f"{timed[v]['faults_per_iter']:.1f}")
    line("peak RSS (VmHWM)", lambda v: mib(timed[v]["maxrss"]))
    lines.append("  tracemalloc (separate traced run of the same loop; blocks/bytes alive):")

    def dom(key: str, d: str):
        return lambda v: "{} / {}".format(*traced[v][key][d])

    line("  NumPy domain 389047 at start", dom("snap_start", "numpy"))
    line("  NumPy domain after warm-up", dom("snap_warm", "numpy"))
    line("  NumPy domain at end", dom("snap_end", "numpy"))
    line("  ndws domain 0x6e647773 at start", dom("snap_start", "ndws"))
    line("  ndws domain after warm-up", dom("snap_warm", "ndws"))
    line("  ndws domain at end", dom("snap_end", "ndws"))
    line("  NumPy domain inside one body (arrays held)",
         lambda v: "{} / {}".format(*traced[v]["inside_numpy"]))
    line("  ndws domain inside one body (arrays held)",
         lambda v: "{} / {}".format(*traced[v]["inside_ndws"]))
    line("  transient peak/iter, first (B, all domains)",
         lambda v: str(traced[v]["transient_first"]))
    line("  transient peak/iter, median after warm-up",
         lambda v: str(traced[v]["transient_median"]))
    line("  transient peak/iter, max after warm-up",
         lambda v: str(traced[v]["transient_max"]))
    lines.append(f"  (transient = traced bytes at the iteration's peak above the level before "
                 f"it, all domains; one {LOOP_SHAPE} {np.dtype(LOOP_DTYPE).name} buffer = "
                 f"{int(np.prod(LOOP_SHAPE)) * np.dtype(LOOP_DTYPE).itemsize} B, so a NumPy "
                 "temporary would show as at least that)")
    ws = timed["ws"]
    lines.append(f"  workspace after the loop: current_size {ws['ws_current_size']} B, "
                 f"spilled_size {ws['ws_spilled_size']} B; traced run allocations 2..N: "
                 f"{traced['ws']['alloc_after_first']}")
    sums = {v: timed[v]["checksum"] for v in variants}
    same = max(sums.values()) - min(sums.values()) <= 1e-3 * abs(sums["numpy"])
    lines.append("  checksum (mean of sum+mean[0]) " + ", ".join(
        f"{label[v]}: {sums[v]:.4f}" for v in variants) + ("" if same else "  <-- DIFFER"))
    ok = ws["alloc_after_first"] == 0
    targets.append((f"B heap allocations after the learning cycle with a workspace = "
                    f"{ws['alloc_after_first']} (== 0)", ok))
    return lines, targets


# ------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short run (noisier)")
    p.add_argument("--_loop", choices=["ws", "detached", "numpy"], help=argparse.SUPPRESS)
    p.add_argument("--_iters", type=int, default=LOOP_ITERS[0], help=argparse.SUPPRESS)
    p.add_argument("--_trace", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._loop:
        print(json.dumps(run_loop(args._loop, args._iters, args._trace)))
        return 0

    started = time.monotonic()
    cmdline = shlex.join(getattr(sys, "orig_argv", [sys.executable] + sys.argv))
    print(f"$ {cmdline}")
    torch = try_torch()
    print(f"python {platform.python_version()}, numpy {np.__version__}, ndws {ndws.__version__}, "
          f"torch {torch.__version__ + ' (1 thread)' if torch is not None else 'not installed'}; "
          f"{os.cpu_count()} CPUs; {platform.platform()}; "
          f"{'quick' if args.quick else 'full'} run; Python gc enabled as usual")
    print()
    lines_a, targets_a = part_a(args.quick, torch)
    print("\n".join(lines_a))
    print()
    lines_b, targets_b = part_b(args.quick)
    print("\n".join(lines_b))
    print()
    print("Targets:")
    for text, ok in targets_a + targets_b:
        print(f"  {'PASS' if ok else 'MISS'}  {text}")
    print(f"(wall time {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
