#!/usr/bin/env python
"""One `MultiLayerNetwork.fit()` iteration of a 784-256-256-10 MLP (ReLU, softmax
cross-entropy, SGD) against PyTorch eager, the hand-written fused step of bench_mlp_step.py and
the GEMM-only floor (the same eight matrix products, alone, into preallocated outputs); the
workspace modes (time per iteration, workspace bytes, heap allocations per iteration); and
`output()` latency at batch 1 and 64 against PyTorch under ``torch.inference_mode()``; and, at
batch 32 on one kernel thread, what feeding fit costs: an epoch of EPOCH batches from a list of
DataSets, from arrays (X, Y, batch_size), from the in-memory iterators (and one of them
prefetched, which fit no longer does), and from a slow iterator (SLOW_US of GIL-releasing wait
per batch, as I/O) with and without prefetch.

Each thread count runs in a fresh interpreter with ``OMP_NUM_THREADS`` /
``OPENBLAS_NUM_THREADS`` set before NumPy is imported, and ``torch.set_num_threads``; glibc's
malloc keeps what it frees (bench_gemm's `keep_freed_memory`: PyTorch at its best). Before
timing, one step from identical parameters is checked to give the same parameters in every
contender. fit, the fused step and the floor of a row (and the workspace modes) are timed in
interleaved rounds, ROUNDS of them, each a slice of its iterations per round, so that a
neighbour that takes a core for a while slows them all alike; each figure is the median of all
its iterations, and every ratio comes from the same run. PyTorch is timed alone, after them.

Usage::

    python bench/bench_fit.py            # batch 32 and 128, 1 and 2 threads
    python bench/bench_fit.py --quick    # fewer iterations, noisier numbers
    python bench/bench_fit.py --noisy    # also with a busy neighbour process on one core
    python bench/bench_fit.py --sources  # only the data sources' rows (1 thread, batch 32)
    python bench/bench_fit.py --sources --noisy   # those rows, also beside a busy neighbour
    python bench/bench_fit.py --sources --instructions   # in-memory rows in instructions
    python bench/bench_fit.py --listeners-only   # the TensorBoardListener row alone

Targets: fit() within 1.15x of the GEMM floor at batch 128 and 1.3x at batch 32, and faster
than PyTorch eager in every row; an in-memory iterator within 1.05x of the list; the slow
iterator faster with prefetch than without; TensorBoardListener at frequency=1 without
histograms at most 5% of the digits MLP's iteration (the listener row, a section of its own).
A miss is printed, never hidden; the exit status is 0.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "bench")):
    if path not in sys.path:
        sys.path.insert(0, path)

import bench_mlp_step as mlp  # noqa: E402  (the same model, data and hand-written step)
from bench_gemm import keep_freed_memory  # noqa: E402

TARGET_FLOOR = {32: 1.3, 128: 1.15}
STEPS = (300, 60)
WARMUP = 20
ROUNDS = 6
MODES = ("NONE", "SINGLE", "SEPARATE", "ENABLED")
EPOCH = 200                  # batches of 32 per fit() in the data sources' rows
SLOW_US = 400                # the slow iterator's wait per batch
SOURCE_ROUNDS = (24, 6)      # rounds of one fit() per contender (full, quick)
TARGET_IN_MEMORY = 1.05      # in-memory iterator / list


def make_fit(params0, x0, y0, mode="ENABLED"):
    import numpy as np

    import ndws
    from ndws.data.dataset import DataSet
    from ndws.nn import DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer, Sgd

    s = mlp.SIZES
    conf = MultiLayerConfiguration(
        [DenseLayer(n_in=s[0], n_out=s[1], activation="relu"),
         DenseLayer(n_out=s[2], activation="relu"),
         OutputLayer(n_out=s[3], activation="softmax", loss_function="MCXENT")],
        seed=0, updater=Sgd(mlp.LR), training_workspace_mode=mode,
        inference_workspace_mode=mode)
    net = MultiLayerNetwork(conf)
    net.init(np.concatenate([p.ravel() for p in params0]))
    ds = DataSet(ndws.array(x0, detached=True), ndws.array(y0, detached=True))

    def step():
        net.fit(ds, progress=False)

    def params():
        flat, out, off = net.params().numpy(), [], 0
        for p in params0:
            out.append(flat[off:off + p.size].reshape(p.shape))
            off += p.size
        return out

    return step, params, net


def make_floor(params0, x0, y0):
    # the eight GEMMs of a step (3 forward, 5 backward), into preallocated outputs
    import ndws

    w1, _, w2, _, w3, _ = [ndws.array(p, detached=True) for p in params0]
    x = ndws.array(x0, detached=True)
    n = x0.shape[0]
    s = mlp.SIZES
    buf = {k: ndws.empty(shape, "float32", detached=True) for k, shape in {
        "h1": (n, s[1]), "h2": (n, s[2]), "z": (n, s[3]), "dw3": (s[2], s[3]),
        "dh2": (n, s[2]), "dw2": (s[1], s[2]), "dh1": (n, s[1]), "dw1": (s[0], s[1])}.items()}

    def step():
        ndws.gemm(x, w1, out=buf["h1"])
        ndws.gemm(buf["h1"], w2, out=buf["h2"])
        ndws.gemm(buf["h2"], w3, out=buf["z"])
        ndws.gemm(buf["h2"], buf["z"], out=buf["dw3"], trans_a=True)
        ndws.gemm(buf["z"], w3, out=buf["dh2"], trans_b=True)
        ndws.gemm(buf["h1"], buf["dh2"], out=buf["dw2"], trans_a=True)
        ndws.gemm(buf["dh2"], w2, out=buf["dh1"], trans_b=True)
        ndws.gemm(x, buf["dh1"], out=buf["dw1"], trans_a=True)

    return step


def _interleaved_us(steps, n):
    # {name: median us} of n iterations each, in ROUNDS rounds that alternate the contenders
    for step in steps.values():
        for _ in range(WARMUP):
            step()
    times = {name: [] for name in steps}
    per_round = max(1, n // ROUNDS)
    for _ in range(ROUNDS):
        for name, step in steps.items():
            for _ in range(per_round):
                t0 = time.perf_counter_ns()
                step()
                times[name].append(time.perf_counter_ns() - t0)
    return {name: statistics.median(t) / 1e3 for name, t in times.items()}


def make_sources(params0, rng):
    """{row: one fit() over an epoch of EPOCH batches of 32}, each with its own network."""
    import numpy as np

    import ndws
    from ndws.data import (ArrayDataSetIterator, AsyncDataSetIterator,
                           AsyncShieldDataSetIterator, DataSet, DataSetIterator,
                           ExistingDataSetIterator)

    x, y = mlp.make_batch(rng, 32 * EPOCH)
    listed = [DataSet(ndws.array(x[i:i + 32], detached=True),
                      ndws.array(y[i:i + 32], detached=True)) for i in range(0, len(x), 32)]

    class Slow(DataSetIterator):
        """Batches of x, y that take SLOW_US each to arrive (a sleep releases the GIL, as I/O
        does); async_supported() is the protocol's True, so fit prefetches it."""

        def __init__(self):
            self.pos = 0

        def has_next(self):
            return self.pos < len(x)

        def _next(self):
            time.sleep(SLOW_US / 1e6)
            self.pos += 32
            return DataSet(x[self.pos - 32:self.pos], y[self.pos - 32:self.pos])

        def _reset(self):
            self.pos = 0

    sources = {
        "list of DataSets": lambda: listed,
        "arrays (X, Y, batch_size=32)": None,
        "ArrayDataSetIterator": lambda it=ArrayDataSetIterator(x, y, 32): it,
        "ExistingDataSetIterator(list)": lambda it=ExistingDataSetIterator(listed): it,
        # what fit no longer does: prefetch an in-memory iterator (a new prefetcher per fit,
        # as fit makes one)
        "ArrayDataSetIterator, prefetched": lambda it=ArrayDataSetIterator(x, y, 32): (
            AsyncDataSetIterator(it, queue_size=2)),
        "slow iterator, prefetched": lambda it=Slow(): it,
        "slow iterator, not prefetched": lambda it=AsyncShieldDataSetIterator(Slow()): it,
    }
    steps = {}
    for name, source in sources.items():
        _, _, net = make_fit(params0, x[:32], y[:32])

        def step(net=net, source=source):
            # the iterations this fit() made (a prefetcher that loses batches makes fewer)
            before = net.iteration
            if source is None:
                net.fit(x, y, batch_size=32, progress=False)
            else:
                data = source()
                net.fit(data, progress=False)
                if isinstance(data, AsyncDataSetIterator):
                    data.shutdown()
            return net.iteration - before
        steps[name] = step
    return steps


def _sources_us(steps, rounds):
    # {name: [us per iteration in each round]}: each fit() is timed whole (so what it costs to
    # start and stop a prefetch thread counts) and divided by its iterations. A round runs each
    # contender once, in an order that rotates from round to round, so a neighbour that takes
    # a core for a while slows a round's contenders alike and the ratios are taken per round.
    for step in steps.values():
        step()
    names = list(steps)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter_ns()
            iterations = steps[name]()
            times[name].append((time.perf_counter_ns() - t0) / max(iterations, 1) / 1e3)
    return times


def run_sources(quick):
    import numpy as np

    import ndws
    ndws.set_num_threads(1)
    rng = np.random.default_rng(0)
    steps = make_sources(mlp.init_params(rng), rng)
    print(json.dumps(_sources_us(steps, SOURCE_ROUNDS[1] if quick else SOURCE_ROUNDS[0])))


INSTR_EPOCHS = (10, 50)      # the two epoch lengths of --instructions
INSTR_SOURCES = ("list of DataSets", "arrays (X, Y, batch_size=32)", "ArrayDataSetIterator",
                 "ExistingDataSetIterator(list)", "ArrayDataSetIterator, prefetched")


def run_one_fit(name, n):
    """One fit() over the first `n` batches from source `name` (under callgrind: see
    instructions_sources). Everything else, the data of the longer epoch included, is made
    the same whatever `n`, so the difference of two counts is n's batches through fit()."""
    import gc

    import numpy as np

    import ndws
    from ndws.data import ArrayDataSetIterator, DataSet, ExistingDataSetIterator
    from ndws.data.async_iterators import AsyncDataSetIterator

    gc.disable()            # a collection costs millions of instructions, at no fixed time
    ndws.set_num_threads(1)
    rng = np.random.default_rng(0)
    params0 = mlp.init_params(rng)
    x, y = mlp.make_batch(rng, 32 * INSTR_EPOCHS[1])
    listed = [DataSet(ndws.array(x[i:i + 32], detached=True),
                      ndws.array(y[i:i + 32], detached=True)) for i in range(0, len(x), 32)]
    x, y, listed = x[:32 * n], y[:32 * n], listed[:n]
    _, _, net = make_fit(params0, x[:32], y[:32])
    net.fit(listed[:2], progress=False)          # the workspaces learn their sizes
    if name == "list of DataSets":
        net.fit(listed, progress=False)
    elif name == "arrays (X, Y, batch_size=32)":
        net.fit(x, y, batch_size=32, progress=False)
    elif name == "ArrayDataSetIterator":
        net.fit(ArrayDataSetIterator(x, y, 32), progress=False)
    elif name == "ExistingDataSetIterator(list)":
        net.fit(ExistingDataSetIterator(listed), progress=False)
    else:
        with AsyncDataSetIterator(ArrayDataSetIterator(x, y, 32), queue_size=2) as it:
            net.fit(it, progress=False)
    assert net.iteration == 2 + n


def instructions_sources():
    """Instructions per fit() iteration from each in-memory source (callgrind): one fit() of
    N1 and one of N2 batches, each in its own interpreter under PYTHONHASHSEED=0, and
    (count(N2) - count(N1)) / (N2 - N1). Repeatable where wall-clock on a shared machine is
    not; it counts work, not cache misses or waiting."""
    from _callgrind import per_item
    n1, n2 = INSTR_EPOCHS
    print(f"\ninstructions per fit() iteration (callgrind, epochs of {n1} and {n2} batches of "
          f"32, 1 kernel thread), and the ratio to the list")
    counts = {}
    for name in INSTR_SOURCES:
        counts[name] = per_item(lambda n: [__file__, "--one-fit", name, str(n)], n1, n2,
                                {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
        base = counts[INSTR_SOURCES[0]]
        print(f"  {name:<33} {counts[name]:>13,.0f} {counts[name] / base:>7.4f}  "
              f"({counts[name] - base:+,.0f})")
    worst = max(counts["ArrayDataSetIterator"], counts["ExistingDataSetIterator(list)"])
    ratio = worst / counts[INSTR_SOURCES[0]]
    print(f"  in-memory iterators within {TARGET_IN_MEMORY}x the list: "
          f"{'PASS' if ratio <= TARGET_IN_MEMORY else 'MISS'} ({ratio:.4f}x)")


def _median_us(step, n):
    for _ in range(WARMUP):
        step()
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        step()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def run_child(threads, quick):
    import numpy as np

    import ndws
    from ndws._memory import allocation_counters

    keep_freed_memory()
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        torch = None
    ndws.set_num_threads(threads)
    n = STEPS[1] if quick else STEPS[0]
    rng = np.random.default_rng(0)
    out = {"threads": threads, "torch": None if torch is None else torch.__version__,
           "batches": {}, "modes": {}, "output": {}}
    for batch in mlp.BATCHES:
        params0 = mlp.init_params(rng)
        x, y = mlp.make_batch(rng, batch)
        fit_step, fit_params, _ = make_fit(params0, x, y)
        hand_step, hand_params = mlp.make_ndws(params0, x, y)
        contenders = {"fit": (fit_step, fit_params), "fused step": (hand_step, hand_params)}
        if torch is not None:
            contenders["torch"] = mlp.make_torch(params0, x, y)
        for step, _ in contenders.values():
            step()
        reference = hand_params()
        for name, (_, params) in contenders.items():
            for got, want in zip(params(), reference):
                np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-5,
                                           err_msg=f"{name} step differs from the fused step")
        # PyTorch is timed alone, after: its OpenMP workers spin on after each step and would
        # take the second core from whichever contender came next in a round
        steps = {name: step for name, (step, _) in contenders.items() if name != "torch"}
        steps["gemm floor"] = make_floor(params0, x, y)
        row = _interleaved_us(steps, n)
        if "torch" in contenders:
            row["torch"] = _median_us(contenders["torch"][0], n)
        out["batches"][batch] = row
        ndws.destroy_all_workspaces_for_current_thread()
    # the modes, batch 128: time, workspace bytes, heap allocations per iteration
    params0 = mlp.init_params(rng)
    x, y = mlp.make_batch(rng, 128)
    nets = {}
    for mode in MODES:
        # each mode alone first: its workspaces' bytes and its heap allocations per iteration
        ndws.destroy_all_workspaces_for_current_thread()
        step, _, net = make_fit(params0, x, y, mode)
        for _ in range(WARMUP):
            step()
        before = allocation_counters()["allocations"]
        for _ in range(n):
            step()
        allocs = (allocation_counters()["allocations"] - before) / n
        ws_bytes = sum(w.current_size for w in
                       ndws.get_workspace_manager().get_all_workspaces_for_current_thread())
        report = net.memory_report(128)
        out["modes"][mode] = {"workspace_bytes": ws_bytes, "allocs": allocs,
                              "param_bytes": report.parameter_bytes}
        nets[mode] = (step, net)
        if mode == "SEPARATE":
            # the minimal live set of a step: parameters, gradients and updater state, what
            # backprop keeps, and the largest layer's working memory (from the shapes)
            ws = report.workspace_bytes(ndws.WorkspaceMode.SEPARATE, True)
            from ndws.nn._layout import WS_ALL_LAYERS_ACT, WS_LAYER_WORKING_MEM
            out["minimal_live"] = (report.parameter_bytes + ws[WS_ALL_LAYERS_ACT]
                                   + ws[WS_LAYER_WORKING_MEM])
            out["separate_peak"] = report.parameter_bytes + sum(ws.values())
    # then their times, interleaved (the modes' workspaces do not share names except
    # SEPARATE's and ENABLED's, which have the same layout)
    for mode, us in _interleaved_us({m: s for m, (s, _) in nets.items()}, n).items():
        out["modes"][mode]["us"] = us
    # output() latency
    ndws.destroy_all_workspaces_for_current_thread()
    _, _, net = make_fit(params0, x, y)
    for batch in (1, 64):
        xb = x[:batch].copy()
        row = {"fit net output()": _median_us(lambda: net.output(xb), n)}
        if torch is not None:
            model = _torch_model(params0)
            tx = torch.from_numpy(xb)

            def infer():
                with torch.inference_mode():
                    model(tx)
            row["torch inference_mode"] = _median_us(infer, n)
        out["output"][batch] = row
    print(json.dumps(out))


def _torch_model(params0):
    import torch
    layers = []
    for i in range(3):
        lin = torch.nn.Linear(mlp.SIZES[i], mlp.SIZES[i + 1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(params0[2 * i].T.copy()))
            lin.bias.copy_(torch.from_numpy(params0[2 * i + 1]))
        layers += [lin, torch.nn.ReLU()] if i < 2 else [lin, torch.nn.Softmax(dim=1)]
    return torch.nn.Sequential(*layers)


def _child(threads, quick, busy, sources=False):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    neighbour = None
    if busy:
        neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        child = ["--sources-child"] if sources else ["--child", str(threads)]
        proc = subprocess.run([sys.executable, __file__] + child
                              + (["--quick"] if quick else []), env=env, capture_output=True,
                              text=True, check=True)
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(results, label):
    print(f"\n{label}")
    print(f"{'threads':>7} {'batch':>5} {'fit':>9} {'fused':>9} {'floor':>9} {'torch':>9} "
          f"{'fit/floor':>9} {'torch/fit':>9}  targets")
    for r in results:
        for batch, row in r["batches"].items():
            batch = int(batch)
            fit, floor = row["fit"], row["gemm floor"]
            torch_us = row.get("torch", float("nan"))
            ok_floor = fit / floor <= TARGET_FLOOR[batch]
            ok_torch = torch_us != torch_us or fit < torch_us
            print(f"{r['threads']:>7} {batch:>5} {fit:>9.1f} {row['fused step']:>9.1f} "
                  f"{floor:>9.1f} {torch_us:>9.1f} {fit / floor:>9.2f} {torch_us / fit:>9.2f}  "
                  f"{'PASS' if ok_floor else 'MISS'} <= {TARGET_FLOOR[batch]}x floor, "
                  f"{'PASS' if ok_torch else 'MISS'} faster than torch")
    for r in results:
        print(f"\nworkspace modes, batch 128, {r['threads']} thread(s): us/iteration, workspace "
              f"bytes, heap allocations/iteration (parameters, gradients, updater state: "
              f"{r['modes']['NONE']['param_bytes']:,} B)")
        for mode, m in r["modes"].items():
            print(f"  {mode:<9} {m['us']:>9.1f} us {m['workspace_bytes']:>12,} B "
                  f"{m['allocs']:>8.2f}")
        ratio = r["separate_peak"] / r["minimal_live"]
        print(f"  SEPARATE training peak {r['separate_peak']:,} B = {ratio:.2f}x the minimal live "
              f"set {r['minimal_live']:,} B: {'PASS' if ratio <= 1.2 else 'MISS'} <= 1.2x")
        fastest = min(("SINGLE", "SEPARATE"), key=lambda m: r["modes"][m]["us"])
        print(f"  SINGLE faster than SEPARATE: {'PASS' if fastest == 'SINGLE' else 'MISS'}; "
              f"zero heap allocations in SINGLE, SEPARATE, ENABLED: "
              f"{'PASS' if all(r['modes'][m]['allocs'] == 0 for m in MODES[1:]) else 'MISS'}")
        for batch, row in r["output"].items():
            cells = ", ".join(f"{k} {v:.1f} us" for k, v in row.items())
            print(f"  output() batch {batch}: {cells}")


def report_sources(times, label):
    base = times["list of DataSets"]
    print(f"\n{label}: fit() from each source, an epoch of {EPOCH} batches of 32, 1 kernel "
          f"thread, {len(base)} rounds; median us per iteration, and the ratio to the list in "
          f"the same round (median, quartiles)")
    ratio = {}
    for name, us in times.items():
        per_round = sorted(u / b for u, b in zip(us, base))
        q1, med, q3 = statistics.quantiles(per_round, n=4) if len(per_round) > 1 else (
            per_round * 3)
        ratio[name] = med
        print(f"  {name:<31} {statistics.median(us):>8.1f} us {med:>7.3f} "
              f"[{q1:.3f}, {q3:.3f}]")
    worst = max(ratio["ArrayDataSetIterator"], ratio["ExistingDataSetIterator(list)"])
    fast = ratio["slow iterator, prefetched"] < ratio["slow iterator, not prefetched"]
    print(f"  in-memory iterators within {TARGET_IN_MEMORY}x the list: "
          f"{'PASS' if worst <= TARGET_IN_MEMORY else 'MISS'} ({worst:.3f}x); slow iterator "
          f"(+{SLOW_US} us a batch) faster prefetched: {'PASS' if fast else 'MISS'}")


# -- the training listeners' cost (a section of its own: the rows above are the data's) -------

LISTENER_TARGET = 0.05


def listener_row(quick):
    """TensorBoardListener at frequency=1 without histograms against no listener: the digits
    MLP of `ndws train` (64-128-128-10, batch 32, Adam), one thread, whole epochs of 44
    iterations in alternating rounds; the per-iteration medians and the overhead."""
    import tempfile

    import numpy as np

    import ndws
    from ndws.__main__ import _digits, _digits_conf
    from ndws.data.dataset import DataSet
    from ndws.nn import MultiLayerNetwork
    from ndws.nn.listeners import TensorBoardListener

    ndws.set_num_threads(1)
    x, y, _, _ = _digits(1)
    onehot = np.eye(10, dtype=np.float32)[y]
    batches = [DataSet(x[i:i + 32].astype(np.float32), onehot[i:i + 32])
               for i in range(0, len(x), 32)]
    with tempfile.TemporaryDirectory() as log_dir:
        board = TensorBoardListener(log_dir, frequency=1)
        nets = {}
        for name, listeners in (("no listener", ()), ("TensorBoardListener", (board,))):
            net = MultiLayerNetwork(_digits_conf(128, 1))
            net.init()
            net.set_listeners(*listeners)
            net.fit(batches, progress=False)            # warm-up: the workspaces learn
            nets[name] = net
        times = {name: [] for name in nets}
        for _ in range(5 if quick else 20):
            for name, net in nets.items():
                t0 = time.perf_counter_ns()
                net.fit(batches, progress=False)
                times[name].append((time.perf_counter_ns() - t0) / len(batches) / 1e3)
        # the listener's own work per iteration, timed alone (less noisy than a difference
        # of two medians): its hook on the trained network, the batched writes included
        net, calls = nets["TensorBoardListener"], []
        step = net.iteration
        for _ in range(5 if quick else 20):
            t0 = time.perf_counter_ns()
            for _ in range(256):
                board.iteration_done(net, step, 0)
                step += 1
            calls.append((time.perf_counter_ns() - t0) / 256 / 1e3)
        board.close()
    base, board_us = (statistics.median(times[n]) for n in nets)
    hook = statistics.median(calls)
    print(f"\nListener cost, the digits MLP (batch 32, 1 thread), per iteration: no listener "
          f"{base:.1f} us, TensorBoardListener(frequency=1) {board_us:.1f} us "
          f"({(board_us / base - 1) * 100:+.1f}%); the listener's hook alone {hook:.1f} us = "
          f"{hook / base * 100:.1f}% (target <= {LISTENER_TARGET * 100:.0f}%: "
          f"{'met' if hook / base <= LISTENER_TARGET else 'MISSED'})")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--noisy", action="store_true", help="also with a busy neighbour process")
    p.add_argument("--sources", action="store_true", help="only the data sources' rows")
    p.add_argument("--instructions", action="store_true",
                   help="with --sources: instructions per iteration (callgrind) instead")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--one-fit", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--sources-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--listeners-only", action="store_true",
                   help="only the training listeners' row")
    args = p.parse_args(argv)
    if args.child:
        run_child(args.child, args.quick)
        return 0
    if args.one_fit:
        run_one_fit(args.one_fit[0], int(args.one_fit[1]))
        return 0
    if args.sources_child:
        run_sources(args.quick)
        return 0
    if args.listeners_only:
        listener_row(args.quick)
        return 0
    print(f"$ python bench/bench_fit.py{' --quick' if args.quick else ''}"
          f"{' --noisy' if args.noisy else ''}{' --sources' if args.sources else ''}"
          f"{' --instructions' if args.instructions else ''}")
    if args.sources and args.instructions:
        instructions_sources()
        return 0
    if args.sources:
        report_sources(_child(1, args.quick, False, sources=True), "quiet machine")
        if args.noisy:
            report_sources(_child(1, args.quick, True, sources=True),
                           "with a busy neighbour process on one core")
        return 0
    quiet = [_child(t, args.quick, False) for t in (1, 2)]
    print(f"torch: {quiet[0]['torch'] or 'not installed (skipped)'}; medians in microseconds")
    report(quiet, "quiet machine")
    report_sources(_child(1, args.quick, False, sources=True), "quiet machine")
    if args.noisy:
        report([_child(t, args.quick, True) for t in (1, 2)],
               "with a busy neighbour process on one core")
        report_sources(_child(1, args.quick, True, sources=True),
                       "with a busy neighbour process on one core")
    listener_row(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
