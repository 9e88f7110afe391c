#!/usr/bin/env python
"""Convolution benchmark: ndws' conv2d (and conv2d_backward) against PyTorch's CPU convolution
(``torch.nn.functional.conv2d``, oneDNN) and against the GEMM floor, float32, 1 and 2 threads.

Rows: LeNet's two convolutions at batch 64 (1->20 5x5 on 28x28, 20->50 5x5 on 12x12), 3x3
64->64 on 32x32 and 3x3 128->128 on 16x16 (padding 1, batch 32), 1x1 256->64 on 14x14 (batch
32), the residual graph's two convolutions (bench_graph's ``resnet fit``: its 3->16 3x3 stem
and its 16->16 3x3 blocks on 32x32, padding 1, batch 32), a 3x3 depthwise convolution of 128
channels on 32x32 (padding 1, batch 32), the VGG network's first layer (3->32 3x3 on 32x32,
padding 1: few input channels) at batch 32, and two of its layers at batch 1 (the kernels of
``output()`` for one image: 3->32 on 32x32, 64->64 on 16x16).

* forward: ndws ``conv2d(x, w, b, out=, scratch=)`` (the output and scratch reserved once, as a
  layer keeps them in its workspaces); torch ``F.conv2d(x, w, b)``.
* forward+backward: the forward, then all three gradients: ndws ``conv2d_backward`` (outputs
  and scratch reserved once); torch ``aten.convolution_backward`` called directly (the kernel
  autograd calls, without the autograd engine's overhead).
* the GEMM floor: ``ndws.matmul`` of the im2col GEMM's shape, ``(c_out, c_in*kh*kw) @
  (c_in*kh*kw, n*out_h*out_w)`` (for fwd+bwd also the two gradient GEMMs): what the
  convolution would cost if its data were already laid out as one GEMM.

Each thread count runs in a fresh interpreter with OMP_NUM_THREADS set before the libraries are
imported (and ``torch.set_num_threads`` / ``ndws.set_num_threads``, after bench_gemm's
`keep_freed_memory`: glibc's malloc keeps what it frees, so PyTorch's tensors take no page
faults and it is measured at its best, whatever ran before). The contenders take turns
in blocks of samples over several rounds, each block after the previous contender's library
threads stopped spinning (bench_gemm's `settle`); medians and the p10-p90 spread are over all
samples, and every ratio compares numbers from the same run. A sample of a single convolution
is the mean time of the calls made in 16 ms (two of the busy neighbour's periods): a block of
a few millisecond-long calls otherwise falls wholly in the neighbour's busy or idle phase, and
a median over six blocks said which contender had been luckier.

``--noisy`` measures every thread count twice: quiet, then with a neighbour process pinned to
the last CPU, busy 4 ms / idle 4 ms (bench_gemm's neighbour).

The network section (``--section net``; bench/conv_nets.py builds the models): one ``fit()``
iteration of DL4J's LeNet at batch 64 (28x28x1 rows) and of a small VGG-style CIFAR network at
batch 32 (32x32x3), against the same model in PyTorch eager (forward, CrossEntropyLoss,
backward, Adam; checked once to compute the same score and gradients) and against the kernel
floor (the model's convolutions, poolings and dense GEMMs alone, into preallocated outputs);
per workspace mode the time, the heap allocations per iteration once warm and the workspace
bytes; SEPARATE's peak against the minimal live set of a step; ``output()`` at batch 1 against
torch under ``inference_mode``. ``--breakdown`` adds each layer's time inside ``fit()`` and each
kernel of the floor against torch's op. Targets: faster than torch, within 1.2x the floor, no
heap allocation in SINGLE, SEPARATE and ENABLED, a peak within 1.2x the live set.

Usage::

    python bench/bench_conv.py            # full run (a few minutes on 2 cores)
    python bench/bench_conv.py --section net --noisy   # the networks, quiet and busy
    python bench/bench_conv.py --quick    # short run, noisier numbers
    python bench/bench_conv.py --noisy    # quiet and with a busy neighbour

Target: ndws at least as fast as torch (ratio torch/ndws >= 1.0) on every row, forward and
forward+backward; misses are printed, never hidden (the exit status is 0).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for path in (ROOT, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

from bench_gemm import (NEIGHBOUR_PERIOD, banner, harness_parser, load_average,  # noqa: E402
                        run_role, run_worker, settle, spread, timed, worker_threads)

TARGET = 1.0
SPAN = 2 * NEIGHBOUR_PERIOD    # seconds of calls per sample of a single convolution

# name, batch, c_in, height, width, c_out, kernel, padding, depthwise
ROWS = [
    ("lenet conv1 1->20 5x5 28x28 b64", 64, 1, 28, 28, 20, 5, 0, False),
    ("lenet conv2 20->50 5x5 12x12 b64", 64, 20, 12, 12, 50, 5, 0, False),
    ("3x3 64->64 32x32 b32", 32, 64, 32, 32, 64, 3, 1, False),
    ("3x3 128->128 16x16 b32", 32, 128, 16, 16, 128, 3, 1, False),
    ("1x1 256->64 14x14 b32", 32, 256, 14, 14, 64, 1, 0, False),
    ("resnet stem 3->16 3x3 32x32 b32", 32, 3, 32, 32, 16, 3, 1, False),
    ("resnet 3x3 16->16 32x32 b32", 32, 16, 32, 32, 16, 3, 1, False),
    ("dw 3x3 128 32x32 b32", 32, 128, 32, 32, 128, 3, 1, True),
    ("vgg conv1 3->32 3x3 32x32 b32", 32, 3, 32, 32, 32, 3, 1, False),
    ("vgg conv1 3->32 3x3 32x32 b1", 1, 3, 32, 32, 32, 3, 1, False),
    ("vgg conv4 64->64 3x3 16x16 b1", 1, 64, 16, 16, 64, 3, 1, False),
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

    import ndws
    torch = worker_threads(threads)
    rounds = 3 if quick else 6
    per_block = 2 if quick else 4
    rows = []
    for row in ROWS:
        calls, flops = _contenders(row, threads)
        out = {"case": row[0], "flops": flops}
        for phase, key in ((0, "fwd"), (1, "fwdbwd")):
            # each sample averages the calls of two of the busy neighbour's periods, so every
            # contender's samples see its busy and idle phases alike (see bench_gemm.timed)
            out[key] = timed({name: fns[phase] for name, fns in calls.items()}, rounds,
                             per_block, span=SPAN)
        rows.append(out)
    info = {"threads": threads, "torch": torch.__version__,
            "mkldnn": bool(torch.backends.mkldnn.is_available()),
            "ndws_threads": ndws.get_num_threads()}
    print(json.dumps({"info": info, "rows": rows}))


def run(threads, quick, noisy, role="--worker", extra=()):
    return run_worker(__file__, threads, quick, noisy, role, extra)


def report(threads, condition, out):
    """Print one run's table; returns (passes, misses)."""
    print(f"\n## {threads} thread(s), {condition}: torch {out['info']['torch']} "
          f"(oneDNN {'on' if out['info']['mkldnn'] else 'off'}); ms, median (p10-p90); load "
          f"average {load_average()}")
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


# ------------------------------------------------------------------------------------------------
# The network section: one fit() iteration of LeNet and of a small VGG-style CIFAR network
# (bench/conv_nets.py), against PyTorch eager and the kernel floor; the workspace modes; the
# output() latency at batch 1.

NET_TARGET_FLOOR = 1.2         # fit() within 1.2x the kernel floor
NET_TARGET_PEAK = 1.2          # SEPARATE's peak within 1.2x the minimal live set of a step
NET_MODES = ("NONE", "SINGLE", "SEPARATE", "ENABLED")


def _blocks(calls, rounds, per_block):
    """{name: [seconds]}: the contenders take turns, a block of per_block samples each per
    round, each block after the previous contender's threads stopped spinning and after one
    untimed call (caches, pools)."""
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            settle()
            fn()
            for _ in range(per_block):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return times


def _ms(samples):
    return {"ms": statistics.median(samples) * 1e3,
            "spread": [t * 1e3 for t in spread(samples)]}


def _minimal_live(net, batch):
    """The minimal live set of a training step (bytes): parameters, gradients and updater
    state; every array the forward pass keeps for backprop (activations, pre-activations,
    pooling arg-maxes: they are all alive when the backward pass starts); and, at the worst
    layer of the backward pass, that layer's working memory with the epsilon it reads and the
    one it writes."""
    from ndws.nn.memory_report import _aligned, layer_uses
    from ndws.nn.workspace_mgr import ArrayType as T

    uses = layer_uses(net, batch, True, net.conf.dtype.itemsize)
    kept = sum(_aligned(b) for use in uses for _, t, b in use
               if t in (T.ACTIVATIONS, T.INPUT, T.FF_CACHE))

    def total(use, types, phase=None):
        return sum(_aligned(b) for p, t, b in use if t in types and phase in (None, p))

    eps = [total(use, (T.ACTIVATION_GRAD,)) for use in uses] + [0]
    worst = max(total(use, (T.BP_WORKING_MEM,), "backward") + eps[i] + eps[i + 1]
                for i, use in enumerate(uses))
    return net.memory_report(batch).parameter_bytes + kept + worst


def _modes(name, params, x, y, n):
    """Per workspace mode: ms per iteration (median of n), heap allocations per iteration once
    warm (bench_fit's measure: ndws' allocation counter), the workspaces' bytes; SEPARATE's
    peak (parameters and its workspaces) against the minimal live set."""
    import ndws
    import conv_nets
    from ndws._memory import allocation_counters

    out = {}
    for mode in NET_MODES:
        ndws.destroy_all_workspaces_for_current_thread()
        net = conv_nets.ndws_net(name, mode, params)
        step = conv_nets.make_fit(net, x, y)
        for _ in range(3):
            step()
        settle()
        before = allocation_counters()["allocations"]
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            ts.append(time.perf_counter() - t0)
        allocs = (allocation_counters()["allocations"] - before) / n
        wss = ndws.get_workspace_manager().get_all_workspaces_for_current_thread()
        out[mode] = {"ms": statistics.median(ts) * 1e3, "allocs": allocs,
                     "workspace_bytes": sum(w.current_size for w in wss)}
        if mode == "SEPARATE":
            batch = x.shape[0]
            out["separate_peak"] = (net.memory_report(batch).parameter_bytes
                                    + out[mode]["workspace_bytes"])
            out["minimal_live"] = _minimal_live(net, batch)
    ndws.destroy_all_workspaces_for_current_thread()
    return out


def _layer_times(name, params, x, y, n):
    """ms per iteration of each layer's forward and backward (and the preprocessors, the
    updater, the rest of the iteration), measured inside fit() by wrapping the methods."""
    import conv_nets

    net = conv_nets.ndws_net(name, "ENABLED", params)
    spent = {}

    def wrap(obj, method, key):
        fn = getattr(obj, method)

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0
        setattr(obj, method, timed)

    for i, layer in enumerate(net.layers):
        wrap(layer, "activate", (i, "fwd"))
        back = ("compute_score_and_gradient" if hasattr(layer, "compute_score_and_gradient")
                else "backprop_gradient")
        wrap(layer, back, (i, "bwd"))
    wrap(net, "_preprocess", ("preprocessors", ""))
    wrap(net, "_update", ("updater", ""))
    step = conv_nets.make_fit(net, x, y)
    for _ in range(3):
        step()
    spent.clear()
    settle()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    whole = (time.perf_counter() - t0) / n * 1e3
    per = {f"{k[0]} {k[1]}".strip(): v / n * 1e3 for k, v in spent.items()}
    per["rest of fit()"] = whole - sum(per.values())
    return per


def net_worker(threads, quick, breakdown):
    import numpy as np  # noqa: F401  (imported before torch and ndws, with the env set)

    import conv_nets
    import ndws
    torch = worker_threads(threads)
    rounds, per_block = (3, 2) if quick else (6, 3)
    n_modes = 5 if quick else 12
    rows = []
    for name in conv_nets.NETS:
        x, y, classes = conv_nets.data(name)
        net = conv_nets.ndws_net(name)
        params = net.params().numpy()
        model = conv_nets.torch_model(name, net)
        conv_nets.check_same(name, net, model, x, y, classes)
        net = conv_nets.ndws_net(name, "ENABLED", params)      # the check moved nothing, anew
        calls = {"fit": conv_nets.make_fit(net, x, y),
                 "floor": conv_nets.make_floor(name, net, x, threads),
                 "torch": conv_nets.make_torch(model, x, classes)}
        times = _blocks(calls, rounds, per_block)
        row = {"net": conv_nets.describe(name), **{k: _ms(v) for k, v in times.items()}}
        # output() at batch 1, detached (the default), against torch under inference_mode
        x1 = x[:1].copy()
        t1 = torch.from_numpy(x1)

        def infer():
            with torch.inference_mode():
                model(t1)
        lat = _blocks({"ndws": lambda: net.output(x1), "torch": infer}, rounds,
                      10 * per_block)
        row["output1"] = {k: _ms(v) for k, v in lat.items()}
        del net, calls
        row["modes"] = _modes(name, params, x, y, n_modes)
        if breakdown:
            row["layers"] = _layer_times(name, params, x, y, n_modes)
            net = conv_nets.ndws_net(name, "ENABLED", params)
            kernels = []
            for label, nd, th in conv_nets.kernel_calls(name, net, x, threads):
                t = _blocks({"ndws": nd, "torch": th}, rounds, per_block)
                kernels.append({"label": label, **{k: _ms(v) for k, v in t.items()}})
            row["kernels"] = kernels
        rows.append(row)
    info = {"threads": threads, "torch": torch.__version__,
            "mkldnn": bool(torch.backends.mkldnn.is_available())}
    print(json.dumps({"info": info, "rows": rows}))


NET_HEAD = (f"{'net':<20} {'fit':>19} {'floor':>19} {'torch':>19} {'fit/floor':>9} "
            f"{'torch/fit':>9}  targets")


def _cell(r):
    lo, hi = r["spread"]
    return f"{r['ms']:7.2f} ({lo:.2f}-{hi:.2f})"


def net_report(threads, condition, out):
    """Print one run's network table; returns (passes, misses)."""
    print(f"\n## fit() iterations, {threads} thread(s), {condition}: torch "
          f"{out['info']['torch']}; ms, median (p10-p90)\n{NET_HEAD}\n{'-' * len(NET_HEAD)}")
    verdicts = []
    cell = _cell

    def verdict(ok):
        verdicts.append(bool(ok))
        return "PASS" if ok else "MISS"

    for row in out["rows"]:
        fit, floor, torch_ = row["fit"]["ms"], row["floor"]["ms"], row["torch"]["ms"]
        print(f"{row['net']:<20} {cell(row['fit']):>19} {cell(row['floor']):>19} "
              f"{cell(row['torch']):>19} {fit / floor:9.2f} {torch_ / fit:9.2f}  "
              f"{verdict(fit / floor <= NET_TARGET_FLOOR)} <= {NET_TARGET_FLOOR}x floor, "
              f"{verdict(fit < torch_)} faster than torch")
    for row in out["rows"]:
        m = row["modes"]
        print(f"\n{row['net']}: workspace modes (ms/iteration, heap allocations/iteration, "
              f"workspace bytes)")
        for mode in NET_MODES:
            print(f"  {mode:<9} {m[mode]['ms']:8.2f} ms {m[mode]['allocs']:6.2f} "
                  f"{m[mode]['workspace_bytes']:>14,} B")
        zero = all(m[mode]["allocs"] == 0 for mode in NET_MODES[1:])
        ratio = m["separate_peak"] / m["minimal_live"]
        print(f"  zero heap allocations in SINGLE, SEPARATE, ENABLED: {verdict(zero)}; "
              f"SEPARATE's peak {m['separate_peak']:,} B = {ratio:.2f}x the minimal live set "
              f"{m['minimal_live']:,} B: {verdict(ratio <= NET_TARGET_PEAK)} <= "
              f"{NET_TARGET_PEAK}x")
        lat = row["output1"]
        nd, th = lat["ndws"]["ms"] * 1e3, lat["torch"]["ms"] * 1e3
        print(f"  output() at batch 1: ndws {nd:,.0f} us, torch inference_mode {th:,.0f} us "
              f"(torch/ndws {th / nd:.2f}): {verdict(nd < th)} below torch's")
        if "layers" in row:
            print("  inside fit(), ms per iteration: " + ", ".join(
                f"{k} {v:.2f}" for k, v in row["layers"].items()))
            print(f"  {'kernel row':<40} {'ndws':>19} {'torch':>19} {'torch/ndws':>10}")
            for k in row["kernels"]:
                print(f"  {k['label']:<40} {cell(k['ndws']):>19} {cell(k['torch']):>19} "
                      f"{k['torch']['ms'] / k['ndws']['ms']:10.2f}")
    return sum(verdicts), len(verdicts) - sum(verdicts)


def main():
    ap = harness_parser(__doc__)
    ap.add_argument("--section", choices=("all", "conv", "net"), default="all",
                    help="the single convolutions, the networks' fit() iterations, or both")
    ap.add_argument("--breakdown", action="store_true",
                    help="networks: also each layer's time inside fit() and each kernel row "
                         "of the floor against torch's op")
    ap.add_argument("--json", help="also write the raw results to this file")
    ap.add_argument("--net-worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if run_role(args, worker):
        return
    if args.net_worker:
        net_worker(args.net_worker, args.quick, args.breakdown)
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit("bench_conv needs PyTorch (pip install torch; never a dependency of "
                         "ndws)")
    banner("bench_conv", args.quick)
    results = []
    sections = []
    if args.section in ("all", "conv"):
        sections.append(("conv", "--worker", (), report))
    if args.section in ("all", "net"):
        sections.append(("net", "--net-worker", ("--breakdown",) if args.breakdown else (),
                         net_report))
    for section, role, extra, table in sections:
        passes = misses = 0
        for threads in [int(t) for t in args.threads.split(",")]:
            for noisy in ((False, True) if args.noisy else (False,)):
                out = run(threads, args.quick, noisy, role, extra)
                results.append({"section": section, "threads": threads, "noisy": noisy,
                                **out})
                p, m = table(threads, "busy neighbour" if noisy else "quiet", out)
                passes += p
                misses += m
        if section == "conv":
            print(f"\n# torch/ndws: PyTorch's time over ndws' (>= {TARGET} meets the target); "
                  f"floor/ndws: the GEMM floor's time over ndws'. {passes} PASS, {misses} MISS; "
                  f"load average {load_average()}")
        else:
            print(f"\n# fit/floor: fit()'s time over the kernel floor's (<= "
                  f"{NET_TARGET_FLOOR}); torch/fit: PyTorch eager's over fit()'s (> 1 meets "
                  f"the target). {passes} PASS, {misses} MISS; load average {load_average()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
