#!/usr/bin/env python
"""Convolution benchmark: ndws' conv2d (and conv2d_backward) against PyTorch's CPU convolution
(``torch.nn.functional.conv2d``, oneDNN) and against the GEMM floor, float32, 1 and 2 threads.

Rows: LeNet's two convolutions at batch 64 (1->20 5x5 on 28x28, 20->50 5x5 on 12x12), 3x3
64->64 on 32x32 and 3x3 128->128 on 16x16 (padding 1, batch 32), 1x1 256->64 on 14x14 (batch
32) and a 3x3 depthwise convolution of 128 channels on 32x32 (padding 1, batch 32).

* forward: ndws ``conv2d(x, w, b, out=, scratch=)`` (the output and scratch reserved once, as a
  layer keeps them in its workspaces); torch ``F.conv2d(x, w, b)``.
* forward+backward: the forward, then all three gradients: ndws ``conv2d_backward`` (outputs
  and scratch reserved once); torch ``aten.convolution_backward`` called directly (the kernel
  autograd calls, without the autograd engine's overhead).
* the GEMM floor: ``ndws.matmul`` of the im2col GEMM's shape, ``(c_out, c_in*kh*kw) @
  (c_in*kh*kw, n*out_h*out_w)`` (for fwd+bwd also the two gradient GEMMs): what the
  convolution would cost if its data were already laid out as one GEMM.

Each thread count runs in a fresh interpreter with OMP_NUM_THREADS set before the libraries are
imported (and ``torch.set_num_threads`` / ``ndws.set_num_threads``). The contenders take turns
in blocks of samples over several rounds, each block after the previous contender's library
threads stopped spinning (bench_gemm's `settle`); medians and the p10-p90 spread are over all
samples, and every ratio compares numbers from the same run.

``--noisy`` measures every thread count twice: quiet, then with a neighbour process pinned to
the last CPU, busy 4 ms / idle 4 ms (bench_gemm's neighbour).

Usage::

    python bench/bench_conv.py            # full run (a few minutes on 2 cores)
    python bench/bench_conv.py --quick    # short run, noisier numbers
    python bench/bench_conv.py --noisy    # quiet and with a busy neighbour

Target: ndws at least as fast as torch (ratio torch/ndws >= 1.0) on every row, forward and
forward+backward; misses are printed, never hidden (the exit status is 0).
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
for path in (ROOT, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

from bench_gemm import neighbour_main, settle, spread  # noqa: E402

TARGET = 1.0

# name, batch, c_in, height, width, c_out, kernel, padding, depthwise
ROWS = [
    ("lenet conv1 1->20 5x5 28x28 b64", 64, 1, 28, 28, 20, 5, 0, False),
    ("lenet conv2 20->50 5x5 12x12 b64", 64, 20, 12, 12, 50, 5, 0, False),
    ("3x3 64->64 32x32 b32", 32, 64, 32, 32, 64, 3, 1, False),
    ("3x3 128->128 16x16 b32", 32, 128, 16, 16, 128, 3, 1, False),
    ("1x1 256->64 14x14 b32", 32, 256, 14, 14, 64, 1, 0, False),
    ("dw 3x3 128 32x32 b32", 32, 128, 32, 32, 128, 3, 1, True),
]


def _contenders(row, threads):
    """{contender: (forward fn, forward+backward fn)} and the row's forward flops."""
    import numpy as np
    import torch

    import ndws
    import ndws.nn.functional as F

    name, n, c, h, w, co, k, p, dw = row
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    if dw:
        wt = rng.standard_normal((c, co // c, k, k), dtype=np.float32)
    else:
        wt = rng.standard_normal((co, c, k, k), dtype=np.float32)
    b = rng.standard_normal(co, dtype=np.float32)
    oh, ow = h + 2 * p - k + 1, w + 2 * p - k + 1
    dy = rng.standard_normal((n, co, oh, ow), dtype=np.float32)
    kk = (1 if dw else c) * k * k
    flops = 2.0 * n * co * oh * ow * kk

    # ndws: arrays reserved once, as a layer's workspaces hold them
    X, Wt, B, DY = (ndws.asarray(a) for a in (x, wt, b, dy))
    Y = ndws.empty((n, co, oh, ow), dtype=np.float32)
    GX, GW, GB = (ndws.empty(a.shape, dtype=np.float32) for a in (x, wt, b))
    if dw:
        def nd_fwd():
            F.depthwise_conv2d(X, Wt, B, padding=p, out=Y)

        def nd_fb():
            F.depthwise_conv2d(X, Wt, B, padding=p, out=Y)
            F.depthwise_conv2d_backward(X, Wt, DY, padding=p, grad_input=GX, grad_weight=GW,
                                        grad_bias=GB)
    else:
        s_f = ndws.empty(F.conv2d_scratch_bytes(x.shape, wt.shape, padding=p, threads=threads),
                         dtype=np.uint8)
        s_b = ndws.empty(F.conv2d_scratch_bytes(x.shape, wt.shape, padding=p, backward=True,
                                                threads=threads), dtype=np.uint8)

        def nd_fwd():
            F.conv2d(X, Wt, B, padding=p, out=Y, scratch=s_f)

        def nd_fb():
            F.conv2d(X, Wt, B, padding=p, out=Y, scratch=s_f)
            F.conv2d_backward(X, Wt, DY, padding=p, grad_input=GX, grad_weight=GW,
                              grad_bias=GB, scratch=s_b)

    # torch: eager conv2d; its backward kernel without the autograd engine
    tx, tw, tb, tdy = (torch.from_numpy(a) for a in (x, wt, b, dy))
    groups = c if dw else 1
    if dw:
        tw = tw.reshape(co, 1, k, k)

    def t_fwd():
        torch.nn.functional.conv2d(tx, tw, tb, padding=p, groups=groups)

    def t_fb():
        torch.nn.functional.conv2d(tx, tw, tb, padding=p, groups=groups)
        torch.ops.aten.convolution_backward(tdy, tx, tw, [co], [1, 1], [p, p], [1, 1], False,
                                            [0, 0], groups, [True, True, True])

    # the GEMM floor: the im2col GEMM and its two gradient GEMMs, as plain matmuls
    m_, k_, n_ = co, kk, n * oh * ow
    A = ndws.asarray(rng.standard_normal((m_, k_), dtype=np.float32))
    Bm = ndws.asarray(rng.standard_normal((k_, n_), dtype=np.float32))
    C = ndws.empty((m_, n_), dtype=np.float32)
    At = ndws.asarray(rng.standard_normal((k_, m_), dtype=np.float32))
    Ck = ndws.empty((k_, n_), dtype=np.float32)
    Bt = ndws.asarray(rng.standard_normal((n_, k_), dtype=np.float32))
    Cw = ndws.empty((m_, k_), dtype=np.float32)

    def f_fwd():
        ndws.matmul(A, Bm, out=C)

    def f_fb():
        ndws.matmul(A, Bm, out=C)
        ndws.matmul(At, C, out=Ck)          # dcol = W.T @ dY
        ndws.matmul(C, Bt, out=Cw)          # dW = dY @ col.T

    # the answers, checked once (against torch)
    nd_fwd()
    ref = torch.nn.functional.conv2d(tx, tw, tb, padding=p, groups=groups).numpy()
    err = np.abs(np.asarray(Y) - ref).max() / max(1e-30, np.abs(ref).max())
    assert err < 1e-4, (name, err)
    return {"ndws": (nd_fwd, nd_fb), "torch": (t_fwd, t_fb), "floor": (f_fwd, f_fb)}, flops


def worker(threads, quick):
    import numpy as np  # noqa: F401  (imported before torch and ndws, with the env set)
    import torch

    import ndws
    torch.set_num_threads(threads)
    ndws.set_num_threads(threads)
    rounds = 3 if quick else 6
    per_block = 2 if quick else 4
    rows = []
    for row in ROWS:
        calls, flops = _contenders(row, threads)
        out = {"case": row[0], "flops": flops}
        for phase in (0, 1):
            times = {name: [] for name in calls}
            for fns in calls.values():       # warm up: scratch, pools, oneDNN primitives
                fns[phase]()
                fns[phase]()
            for _ in range(rounds):
                for name, fns in calls.items():
                    settle()
                    t0 = time.perf_counter()
                    while time.perf_counter() - t0 < 0.005:
                        fns[phase]()
                    for _ in range(per_block):
                        t0 = time.perf_counter()
                        fns[phase]()
                        times[name].append(time.perf_counter() - t0)
            key = "fwd" if phase == 0 else "fwdbwd"
            out[key] = {name: {"ms": statistics.median(ts) * 1e3,
                               "spread": [t * 1e3 for t in spread(ts)]}
                        for name, ts in times.items()}
        rows.append(out)
    info = {"threads": threads, "torch": torch.__version__,
            "mkldnn": bool(torch.backends.mkldnn.is_available()),
            "ndws_threads": ndws.get_num_threads()}
    print(json.dumps({"info": info, "rows": rows}))


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


def _load():
    # the machine's 1/5/15-minute load averages: how busy the other processes kept the CPUs
    try:
        return "/".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def report(threads, condition, out):
    """Print one run's table; returns (passes, misses)."""
    print(f"\n## {threads} thread(s), {condition}: torch {out['info']['torch']} "
          f"(oneDNN {'on' if out['info']['mkldnn'] else 'off'}); ms, median (p10-p90); load "
          f"average {_load()}")
    head = (f"{'case':<34} {'pass':<7} {'ndws':>16} {'torch':>16} {'floor':>16} "
            f"{'torch/ndws':>10} {'floor/ndws':>10}  target")
    print(head + "\n" + "-" * len(head))
    passes = misses = 0
    for row in out["rows"]:
        for key, label in (("fwd", "fwd"), ("fwdbwd", "fwd+bwd")):
            r = row[key]

            def cell(name):
                lo, hi = r[name]["spread"]
                return f"{r[name]['ms']:7.2f} ({lo:.2f}-{hi:.2f})"

            ratio = r["torch"]["ms"] / r["ndws"]["ms"]
            ok = ratio >= TARGET
            passes += ok
            misses += not ok
            print(f"{row['case']:<34} {label:<7} {cell('ndws'):>16} {cell('torch'):>16} "
                  f"{cell('floor'):>16} {ratio:10.2f} {r['floor']['ms'] / r['ndws']['ms']:10.2f}"
                  f"  {'PASS' if ok else 'MISS'}")
    return passes, misses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short run, noisier numbers")
    ap.add_argument("--noisy", action="store_true",
                    help="also measure with a busy neighbour process on the last CPU")
    ap.add_argument("--threads", default="1,2", help="thread counts to run (default 1,2)")
    ap.add_argument("--json", help="also write the raw results to this file")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--neighbour", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.neighbour:
        neighbour_main()
        return
    if args.worker:
        worker(args.worker, args.quick)
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit("bench_conv needs PyTorch (pip install torch; never a dependency of "
                         "ndws)")
    print(f"# bench_conv: {platform.machine()}, {os.cpu_count()} CPUs, python "
          f"{platform.python_version()}{' (quick)' if args.quick else ''}; load average "
          f"{_load()} at the start")
    passes = misses = 0
    results = []
    for threads in [int(t) for t in args.threads.split(",")]:
        for noisy in ((False, True) if args.noisy else (False,)):
            out = run(threads, args.quick, noisy)
            results.append({"threads": threads, "noisy": noisy, **out})
            p, m = report(threads, "busy neighbour" if noisy else "quiet", out)
            passes += p
            misses += m
    print(f"\n# torch/ndws: PyTorch's time over ndws' (>= {TARGET} meets the target); "
          f"floor/ndws: the GEMM floor's time over ndws'. {passes} PASS, {misses} MISS; load "
          f"average {_load()} at the end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
