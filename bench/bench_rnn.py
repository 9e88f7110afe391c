#!/usr/bin/env python
"""Recurrent time loops: ndws.nn.functional's LSTM against ``torch.nn.LSTM`` and against the GEMM
floor (the same GEMMs alone), 1 and 2 threads, quiet and with a busy neighbour.

Kernel rows: a single-layer LSTM of 512 units at batch 64 over 100 steps, float32, tanh cell
activation, sigmoid gates, forward (inference: no cache) and forward + backward (training: the
forward writes its cache, the backward computes dW, dRW, db; no input gradient, as PyTorch
computes none for an input that does not require it). PyTorch gets the same weights with the
gate blocks permuted (DL4J's g, f, o, i are PyTorch's i, f, g, o in another order), and the
warm-up checks that both give the same outputs. The GEMM floor runs, with ndws' GEMM, exactly
the products the kernel runs: forward, the input projection (6400 x 512 @ 512 x 2048) and one
recurrent product per step (64 x 512 @ 512 x 2048, the recurrent weights packed once per call);
backward, one recurrent error per step (64 x 2048 @ 2048 x 512, packed likewise), dW and dRW
(512 x 6400 @ 6400 x 2048 each) and db (a matrix-vector product). What ndws adds to the floor
is its elementwise work, copies and the loop.

ndws runs the way a network will run it: outputs, cache and scratch placed in a workspace
cycle per iteration, each step's temporaries in DL4J's RNN loop workspace configuration
(FIRST_LOOP, 5% overallocation), the state in detached arrays.

Each thread count runs in a fresh interpreter with OMP_NUM_THREADS / MKL_NUM_THREADS set and
``torch.set_num_threads`` equal; contenders take turns in rounds, each after the previous
one's library threads have stopped spinning (bench_gemm's `settle`), so a noisy phase of the
machine slows all alike; figures are medians (p10-p90 of the samples) and every ratio compares
numbers from the same run.

Usage::

    python bench/bench_rnn.py            # 1 and 2 threads, quiet
    python bench/bench_rnn.py --noisy    # also with a neighbour busy 4 ms / idle 4 ms on a core
    python bench/bench_rnn.py --quick    # fewer samples, noisier

Target: ndws at least as fast as PyTorch (ratio PyTorch / ndws >= 1.0) in every kernel row; a
miss is printed, never hidden (the exit status is 0).
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (ROOT, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

from bench_gemm import neighbour_main, settle, spread  # noqa: E402

B, N_IN, N, T = 64, 512, 512, 100
TARGET = 1.0
PERM = [2, 1, 3, 0]          # DL4J's blocks (g, f, o, i) taken from PyTorch's (i, f, g, o)


def worker(threads, quick):
    import numpy as np

    import ndws
    import ndws._linalg as la
    import ndws.nn.functional as F
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        torch = None
    ndws.set_num_threads(threads)
    rng = np.random.default_rng(0)
    f32 = np.float32
    # weights: PyTorch's LSTM when there is one (its initialisation), permuted into DL4J's
    if torch is not None:
        torch.manual_seed(0)
        lstm = torch.nn.LSTM(N_IN, N)
        wih = lstm.weight_ih_l0.detach().numpy()
        whh = lstm.weight_hh_l0.detach().numpy()
        bb = (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach().numpy()
        W = np.ascontiguousarray(np.concatenate([wih[p * N:(p + 1) * N].T for p in PERM], 1))
        RW = np.ascontiguousarray(np.concatenate([whh[p * N:(p + 1) * N].T for p in PERM], 1))
        b = np.concatenate([bb[p * N:(p + 1) * N] for p in PERM])
    else:
        W = (rng.standard_normal((N_IN, 4 * N)) * 0.04).astype(f32)
        RW = (rng.standard_normal((N, 4 * N)) * 0.04).astype(f32)
        b = np.zeros(4 * N, f32)
    x_tm = rng.standard_normal((T, B, N_IN)).astype(f32)      # time-major, as PyTorch's
    x = x_tm.transpose(1, 2, 0)                                 # its NCW view: no copy
    gy = rng.standard_normal((T, B, N)).astype(f32)
    gy_ncw = gy.transpose(1, 2, 0)
    h = np.zeros((B, N), f32)
    c = np.zeros((B, N), f32)
    dW, dRW, db = np.empty_like(W), np.empty_like(RW), np.empty_like(b)

    conf = ndws.WorkspaceConfiguration(policy_spill="REALLOCATE")
    work = ndws.workspace("WS_LAYER", conf)
    loop = ndws.workspace("WS_RNN_LOOP_WORKING_MEM", ndws.WorkspaceConfiguration(
        overallocation_limit=0.05, policy_spill="REALLOCATE"))
    cache_shape = F.lstm_cache_shape(T, B, N, activation="tanh")

    def ndws_forward():
        with work:
            y = ndws.empty((T, B, N), dtype=f32).T.transpose(1, 0, 2)   # NCW over time-major
            F.lstm_forward(x, W, RW, b, activation="tanh", out=y, h_out=h, c_out=c,
                           loop_workspace=loop)

    def ndws_train():
        with work:
            y = ndws.empty((T, B, N), dtype=f32).T.transpose(1, 0, 2)
            cache = ndws.empty(cache_shape, dtype=f32)
            F.lstm_forward(x, W, RW, b, activation="tanh", out=y, h_out=h, c_out=c,
                           cache=cache, loop_workspace=loop)
            F.lstm_backward(x, W, RW, cache, gy_ncw, activation="tanh", need_input=False,
                            grad_W=dW, grad_RW=dRW, grad_b=db, loop_workspace=loop)

    # the GEMM floor: the kernel's products alone, on ndws' GEMM (the recurrent ones with the
    # weights packed once per call, as the kernel does)
    A = ndws.asarray(x_tm.reshape(T * B, N_IN))
    Wn = ndws.asarray(W)
    proj = ndws.empty((T * B, 4 * N), dtype=f32)
    hs = rng.standard_normal((T, B, N)).astype(f32)
    S = np.empty((B, 4 * N), dtype=f32)
    dz_np = (rng.standard_normal((T * B, 4 * N)) * 0.01).astype(f32)
    dz = ndws.asarray(dz_np)
    R = np.empty((B, N), dtype=f32)
    dWn, dRWn = ndws.empty((N_IN, 4 * N), dtype=f32), ndws.empty((N, 4 * N), dtype=f32)
    ones = ndws.ones((1, T * B), dtype=f32)
    dbn = ndws.empty((1, 4 * N), dtype=f32)
    hs_n = ndws.asarray(hs.reshape(T * B, N))

    def floor_forward():
        ndws.gemm(A, Wn, out=proj)
        packed = la._pack_b(RW)
        for t in range(T):
            la._gemm_packed_b(hs[t], packed, 4 * N, 0.0, S, threads)

    def floor_backward():
        packed = la._pack_b(RW.T)
        for t in range(T):
            la._gemm_packed_b(dz_np[t * B:(t + 1) * B], packed, N, 0.0, R, threads)
        ndws.gemm(A, dz, trans_a=True, out=dWn)
        ndws.gemm(hs_n, dz, trans_a=True, out=dRWn)
        ndws.gemm(ones, dz, out=dbn)

    def floor_train():
        floor_forward()
        floor_backward()

    rows = {"forward": {"ndws": ndws_forward, "GEMM floor": floor_forward},
            "forward+backward": {"ndws": ndws_train, "GEMM floor": floor_train}}
    if torch is not None:
        xt = torch.from_numpy(x_tm)
        gyt = torch.from_numpy(gy)

        def torch_forward():
            with torch.no_grad():
                lstm(xt)

        def torch_train():
            lstm.zero_grad(set_to_none=True)
            out, _ = lstm(xt)
            out.backward(gyt)

        rows["forward"]["torch"] = torch_forward
        rows["forward+backward"]["torch"] = torch_train
        # the same numbers: outputs within float32 rounding, and the same weight gradient
        y_ref, _ = lstm(xt)
        with work:
            y = ndws.empty((T, B, N), dtype=f32).T.transpose(1, 0, 2)
            cache = ndws.empty(cache_shape, dtype=f32)
            F.lstm_forward(x, W, RW, b, activation="tanh", out=y, cache=cache,
                           loop_workspace=loop)
            err = np.abs(y.numpy() - y_ref.detach().numpy().transpose(1, 2, 0)).max()
            assert err < 1e-4, err
            F.lstm_backward(x, W, RW, cache, gy_ncw, activation="tanh", need_input=False,
                            grad_W=dW, grad_RW=dRW, grad_b=db, loop_workspace=loop)
        torch_train()
        gih = lstm.weight_ih_l0.grad.numpy()
        ref = np.concatenate([gih[p * N:(p + 1) * N].T for p in PERM], 1)
        assert np.abs(dW - ref).max() <= 1e-3 * np.abs(ref).max(), "dW differs from torch"
    rounds = 3 if quick else 5
    per_round = 1 if quick else 2
    result = {}
    for row, contenders in rows.items():
        for fn in contenders.values():          # warm up: scratch, pools, learned workspaces
            fn()
            fn()
        times = {name: [] for name in contenders}
        for _ in range(rounds):
            for name, fn in contenders.items():
                settle()
                fn()                             # the library's threads awake, as in a loop
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t0)
        result[row] = {name: {"ms": statistics.median(ts) * 1e3,
                              "spread": [v * 1e3 for v in spread(ts)], "n": len(ts)}
                       for name, ts in times.items()}
    mm = ndws.get_memory_manager()
    before = mm.allocation_statistics()["allocations"]
    ndws_train()
    info = {"threads": threads, "torch": None if torch is None else torch.__version__,
            "mkldnn": None if torch is None else bool(torch.backends.mkldnn.is_available()),
            "numpy": np.__version__, "loop_cycles": loop.cycles_count,
            "heap_allocations_per_training_step":
                mm.allocation_statistics()["allocations"] - before}
    print(json.dumps({"info": info, "rows": result}))


def run(threads, quick, noisy):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", str(threads)]
    if quick:
        cmd.append("--quick")
    neighbour = None
    if noisy:
        neighbour = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--neighbour"])
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


def report(threads, condition, out):
    info = out["info"]
    print(f"\n## {threads} thread(s), {condition}: LSTM {N} units, batch {B}, {T} steps, "
          f"float32; torch {info['torch'] or 'absent'}; heap allocations per ndws training "
          f"step: {info['heap_allocations_per_training_step']}")
    head = (f"{'row':<18} {'ndws ms':>9} {'p10-p90':>13} {'torch ms':>9} {'p10-p90':>13} "
            f"{'floor ms':>9} {'torch/ndws':>10} {'ndws/floor':>10}  target")
    print(head + "\n" + "-" * len(head))
    passes = misses = 0
    for row, res in out["rows"].items():
        nd, fl = res["ndws"], res["GEMM floor"]
        th = res.get("torch")
        line = f"{row:<18} {nd['ms']:9.1f} {nd['spread'][0]:6.1f}-{nd['spread'][1]:<6.1f}"
        if th:
            line += f" {th['ms']:9.1f} {th['spread'][0]:6.1f}-{th['spread'][1]:<6.1f}"
        else:
            line += f" {'-':>9} {'':13}"
        line += f" {fl['ms']:9.1f}"
        if th:
            ratio = th["ms"] / nd["ms"]
            line += f" {ratio:10.2f}"
        else:
            ratio = None
            line += f" {'-':>10}"
        line += f" {nd['ms'] / fl['ms']:10.2f}"
        if ratio is not None:
            ok = ratio >= TARGET
            passes += ok
            misses += not ok
            line += f"  {'PASS' if ok else 'MISS'} (>= {TARGET}x torch)"
        print(line)
    return passes, misses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples, noisier numbers")
    ap.add_argument("--noisy", action="store_true",
                    help="also measure with a busy neighbour process on the last CPU")
    ap.add_argument("--threads", default="1,2", help="thread counts to run (default 1,2)")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--neighbour", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.neighbour:
        neighbour_main()
        return
    if args.worker:
        worker(args.worker, args.quick)
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# bench_rnn: {platform.machine()}, {os.cpu_count()} CPUs, python "
          f"{platform.python_version()}, load average {load:.1f} at the start"
          f"{' (quick)' if args.quick else ''}")
    passes = misses = 0
    for threads in [int(t) for t in args.threads.split(",")]:
        for noisy in ((False, True) if args.noisy else (False,)):
            p, m = report(threads, "busy neighbour" if noisy else "quiet",
                          run(threads, args.quick, noisy))
            passes += p
            misses += m
    print(f"\n# medians of the samples (p10-p90: fastest to slowest decile); target rows: "
          f"{passes} PASS, {misses} MISS")


if __name__ == "__main__":
    main()
