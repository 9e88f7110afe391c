#!/usr/bin/env python
"""ndws.parallel on threads: `ParallelWrapper` training throughput against `fit()`, and
`ParallelInference` serving throughput and latency against PyTorch, on the 784-256-256-10 MLP
of bench_mlp_step.py (ReLU, softmax cross-entropy, SGD).

Training: samples/s of an epoch of batches of 32 rows per worker, for `fit()` on 1 and on 2
kernel threads and for a 2-worker ParallelWrapper (each worker on 1 kernel thread) in both
training modes (AVERAGING also every 4 rounds). The contenders run interleaved, round after round, and the figures are
medians over the rounds. Targets: the wrapper >= 1.7x the 1-thread fit and >= 1.2x the
2-thread fit.

Inference: 32 threads each call ``output()`` on single rows as fast as they can, for
ParallelInference in BATCHED, SEQUENTIAL and INPLACE mode (the default, one worker with every
kernel thread: more workers serve fewer single rows here, as the forward pass's Python holds
the GIL) and for the same model in PyTorch called from 32 threads under
``torch.inference_mode()`` (the faster of 1 and 2 intra-op threads). Requests per second and each call's p50 / p99 latency, medians over rounds. Targets:
BATCHED >= 8x SEQUENTIAL's throughput and >= 2x PyTorch's.

``--noisy`` measures everything twice: on the machine as it is, then with bench_gemm.py's busy
neighbour (a process pinned to the last CPU, busy 4 ms then idle 4 ms). Misses are printed,
never hidden; the exit status is 0.

Usage::

    python bench/bench_parallel.py            # quiet machine
    python bench/bench_parallel.py --quick    # fewer rounds, noisier numbers
    python bench/bench_parallel.py --noisy    # also with a busy neighbour process
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "bench")):
    if path not in sys.path:
        sys.path.insert(0, path)

import numpy as np  # noqa: E402

import bench_mlp_step as mlp  # noqa: E402  (the same model and data)
from bench_gemm import settle  # noqa: E402
import ndws  # noqa: E402
from ndws.data.dataset import DataSet  # noqa: E402
from ndws.nn import (DenseLayer, MultiLayerConfiguration, MultiLayerNetwork,  # noqa: E402
                     OutputLayer, Sgd)
from ndws.parallel import ParallelInference, ParallelWrapper  # noqa: E402

TRAIN_TARGETS = {"1-thread fit": 1.7, "2-thread fit": 1.2}
INFER_TARGETS = {"SEQUENTIAL": 8.0, "torch": 2.0}
CALLERS = 32
BATCH = 32
#: the wrappers measured: SHARED_GRADIENTS, AVERAGING every round (DL4J's default), and every 4
#: rounds (near independent workers: the ceiling of two concurrent fits on this machine)
WRAPPERS = (("wrapper SHARED_GRADIENTS", "SHARED_GRADIENTS", 1),
            ("wrapper AVERAGING", "AVERAGING", 1),
            ("wrapper AVERAGING every 4", "AVERAGING", 4))


def make_net(seed=0):
    s = mlp.SIZES
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=s[0], n_out=s[1], activation="relu"),
         DenseLayer(n_out=s[2], activation="relu"),
         OutputLayer(n_out=s[3], activation="softmax", loss_function="MCXENT")],
        seed=seed, updater=Sgd(mlp.LR)))
    net.init()
    return net


# -- training ------------------------------------------------------------------------------------

def training(quick):
    rng = np.random.default_rng(0)
    n_batches = 100 if quick else 400
    batches = []
    for _ in range(n_batches):
        x, y = mlp.make_batch(rng, BATCH)
        batches.append(DataSet(ndws.array(x, detached=True), ndws.array(y, detached=True)))
    samples = n_batches * BATCH
    threads = ndws.get_num_threads()

    def fit_on(k):
        net = make_net()

        def run():
            with ndws.num_threads(k):
                net.fit(batches, progress=False)
        return run

    def wrapper(mode, frequency):
        net = make_net()
        pw = ParallelWrapper(net, workers=2, training_mode=mode, prefetch_buffer=0,
                             averaging_frequency=frequency)

        def run():
            with ndws.num_threads(2):
                pw.fit(batches, progress=False)
        return run, pw

    contenders = {"1-thread fit": fit_on(1), "2-thread fit": fit_on(2)}
    wrappers = {}
    for name, mode, frequency in WRAPPERS:
        run, pw = wrapper(mode, frequency)
        contenders[name] = run
        wrappers[name] = pw
    times = {name: [] for name in contenders}
    for run in contenders.values():
        run()                                        # warm-up: workspaces learn, pools start
    for _ in range(3 if quick else 7):
        for name, run in contenders.items():
            settle()          # no thread of the previous contender still spinning
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    for pw in wrappers.values():
        pw.close()
    ndws.set_num_threads(threads)
    return {name: samples / statistics.median(t) for name, t in times.items()}


# -- inference -----------------------------------------------------------------------------------

def hammer(call, rows, per_thread):
    """CALLERS threads each call `call(row)` `per_thread` times; (requests/s, latencies in
    us)."""
    start = threading.Barrier(CALLERS + 1)
    lat = [None] * CALLERS

    def body(i):
        mine = []
        row = rows[i % len(rows)]
        start.wait()
        for _ in range(per_thread):
            t = time.perf_counter_ns()
            call(row)
            mine.append(time.perf_counter_ns() - t)
        lat[i] = mine

    threads = [threading.Thread(target=body, args=(i,)) for i in range(CALLERS)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    every = [v / 1e3 for mine in lat for v in mine]
    return CALLERS * per_thread / wall, every


def percentile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def inference(quick):
    rng = np.random.default_rng(1)
    net = make_net()
    rows = [r for r in rng.random((CALLERS, mlp.SIZES[0]), dtype=np.float32)]
    ref = net.output(np.stack(rows)).numpy()
    per = 150 if quick else 600
    contenders = {}
    servers = []
    for mode in ("BATCHED", "SEQUENTIAL", "INPLACE"):
        pi = ParallelInference(net, inference_mode=mode)       # one worker, the default
        servers.append(pi)
        for i, row in enumerate(rows):
            np.testing.assert_allclose(pi.output(row).numpy(), ref[i], rtol=1e-5, atol=1e-6)
        contenders[mode] = pi.output
    torch = _torch_contenders(net, rows, ref, contenders)
    results = {name: [] for name in contenders}
    for _ in range(3 if quick else 5):
        for name, call in contenders.items():
            settle()
            if name.startswith("torch"):
                torch.set_num_threads(int(name.split()[1]))
            results[name].append(hammer(call, rows, per))
    for pi in servers:
        pi.shutdown()
    out = {}
    for name, runs in results.items():
        out[name] = {"rps": statistics.median(r for r, _ in runs),
                     "p50": statistics.median(percentile(lat, 0.5) for _, lat in runs),
                     "p99": statistics.median(percentile(lat, 0.99) for _, lat in runs)}
    return out


def _torch_contenders(net, rows, ref, contenders):
    try:
        import torch
    except ImportError:
        return None
    s = mlp.SIZES
    layers = []
    for i, layer in enumerate(net.layers):
        lin = torch.nn.Linear(s[i], s[i + 1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(layer.params["W"].numpy().T.copy()))
            lin.bias.copy_(torch.from_numpy(layer.params["b"].numpy().reshape(-1)))
        layers += [lin, torch.nn.ReLU()] if i < 2 else [lin, torch.nn.Softmax(dim=1)]
    model = torch.nn.Sequential(*layers).eval()
    with torch.inference_mode():
        got = model(torch.from_numpy(np.stack(rows))).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)

    def call(row):
        with torch.inference_mode():
            return model(torch.from_numpy(row).unsqueeze(0))
    for k in (1, 2):
        contenders[f"torch {k}"] = call
    return torch


# -- driver --------------------------------------------------------------------------------------

def measure(quick):
    return {"train": training(quick), "infer": inference(quick)}


def verdict(ratio, target, base):
    return f"{ratio:.2f}x {base} ({'PASS' if ratio >= target else 'MISS'} >= {target}x)"


def report(condition, res):
    print(f"\n{condition}")
    train = res["train"]
    print("training, 784-256-256-10, batch 32 per worker: samples/s (median of rounds)")
    for name, sps in train.items():
        print(f"  {name:<28} {sps:>10,.0f}")
    for name, _, _ in WRAPPERS:
        w = train[name]
        cells = [verdict(w / train[base], target, base) for base, target in TRAIN_TARGETS.items()]
        print(f"  {name}: " + ", ".join(cells))
    infer = res["infer"]
    print(f"inference, {CALLERS} threads calling output() on single rows: requests/s, "
          f"latency p50 / p99 in us")
    for name, r in infer.items():
        print(f"  {name:<28} {r['rps']:>10,.0f} {r['p50']:>9.1f} {r['p99']:>9.1f}")
    batched = infer["BATCHED"]["rps"]
    r = batched / infer["SEQUENTIAL"]["rps"]
    line = f"  BATCHED: {verdict(r, INFER_TARGETS['SEQUENTIAL'], 'SEQUENTIAL')}"
    torch_rps = [v["rps"] for k, v in infer.items() if k.startswith("torch")]
    if torch_rps:
        line += f", {verdict(batched / max(torch_rps), INFER_TARGETS['torch'], 'PyTorch best')}"
    print(line)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--noisy", action="store_true", help="also with a busy neighbour process")
    args = p.parse_args(argv)
    print(f"$ python bench/bench_parallel.py{' --quick' if args.quick else ''}"
          f"{' --noisy' if args.noisy else ''}")
    print(f"{os.cpu_count()} CPUs, ndws kernel threads {ndws.get_num_threads()}")
    report("quiet machine", measure(args.quick))
    if args.noisy:
        neighbour = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench",
                                                                   "bench_gemm.py"),
                                      "--neighbour"])
        try:
            report("busy neighbour on one CPU", measure(args.quick))
        finally:
            neighbour.kill()
            neighbour.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
