#!/usr/bin/env python
"""ComputationGraph: the MLP as a graph against the same MultiLayerNetwork, a residual network
against PyTorch eager, the pooled workspaces' memory against the widest cut, and a two-input
graph served by ParallelInference (docs/graphs.md, "Performance").

Rows:

* ``mlp fit`` / ``mlp output``: the 784-256-256-10 MLP (ReLU, softmax, Adam) at batch 128 as a
  `MultiLayerNetwork` and as its `to_computation_graph()` (the chain of dense layers runs the
  network's compiled iteration). Target: the graph within 3% of the network.
* ``resnet fit``: a residual network on 32x32x3 images at batch 32 (a 3x3 convolution stem of 16
  channels, three blocks of two 3x3 convolutions added to the block's input with
  ElementWiseVertex ADD then ReLU, global average pooling, softmax 10; Adam: `ndws train
  --model resnet`'s network on larger images), one training iteration, against the same
  model in PyTorch eager (nn.Conv2d, torch.optim.Adam). Target: faster than PyTorch (ratio
  torch / ndws >= 1).
* memory (1 thread only; counted, not timed): the bytes the residual network's workspaces hold
  after training in SEPARATE and in SINGLE, against the minimal live set from the graph's
  widest cut (`ndws.nn.graph.memory.minimal_live_set`). Target: SEPARATE <= 1.2x the live set
  and below SINGLE.
* ``serve``: a two-input graph (an LSTM of 32 over 20 steps of 8 features, read at its last
  step, merged with a dense layer over 10 side features; softmax 5) answering requests of one
  example from 32 threads: ParallelInference BATCHED against SEQUENTIAL, and PyTorch (the same
  model called from the 32 threads). Requests per second.
* ``graph step``: the same two-input graph (its sequences of any length) answering
  `rnn_time_step` of one step at batch 1 (the text-generation loop): its one-step path
  against its general path (the same graph with the one-step path turned off) and against
  PyTorch's equivalent step under inference_mode (nn.LSTMCell carrying its state, nn.Linear,
  cat, softmax). Microseconds per step; no target (the ratios are printed).

Each thread count runs in a fresh interpreter with OMP_NUM_THREADS and torch.set_num_threads
equal, glibc's malloc keeping what it frees (bench_gemm's `keep_freed_memory`: PyTorch at its
best); contenders take turns in rounds (bench_gemm's `settle` between them), figures are
medians (p10-p90), every ratio compares numbers of the same run. ``--noisy`` repeats each
configuration with a neighbour busy 4 ms / idle 4 ms on a core. A sample of a call shorter
than 16 ms is the mean of the calls made in 16 ms (two of the neighbour's periods; see
bench_gemm.timed): the MLP rows' calls take about a millisecond, and single-call samples put
whole blocks of them in the neighbour's busy or idle phase.

Usage::

    python bench/bench_graph.py            # 1 and 2 threads, quiet
    python bench/bench_graph.py --noisy    # also with a busy neighbour
    python bench/bench_graph.py --quick    # fewer samples
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (ROOT, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

from bench_gemm import (NEIGHBOUR_PERIOD, banner, harness_parser, run_role,  # noqa: E402
                        run_worker, settle, timed, worker_threads)

MLP_BATCH, RES_BATCH, WIDTH, BLOCKS = 128, 32, 16, 3
CLIENTS, REQUESTS = 32, 40


def resnet_graph(mode="ENABLED", seed=1):
    """The residual network of the ``resnet fit`` row: `ndws train --model resnet`'s, on
    32x32x3 images with WIDTH channels."""
    from ndws.__main__ import _resnet_conf
    from ndws.nn import ComputationGraph
    g = ComputationGraph(_resnet_conf(8 * WIDTH, seed, mode, image=(32, 32, 3)))
    g.init()
    return g


def torch_resnet(torch):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(WIDTH, WIDTH, 3, padding=1)
            self.b = nn.Conv2d(WIDTH, WIDTH, 3, padding=1)

        def forward(self, x):
            return torch.relu(self.b(torch.relu(self.a(x))) + x)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, WIDTH, 3, padding=1)
            self.blocks = nn.Sequential(*[Block() for _ in range(BLOCKS)])
            self.out = nn.Linear(WIDTH, 10)

        def forward(self, x):
            x = self.blocks(torch.relu(self.stem(x)))
            return self.out(x.mean(dim=(2, 3)))
    return Net()


def two_input_graph(mode="ENABLED", steps=20):
    # steps: the "seq" input's length (None: any, what rnn_time_step's one step needs)
    from ndws.nn import (LSTM, ComputationGraph, ComputationGraphConfiguration, DenseLayer,
                         InputType, LastTimeStepVertex, OutputLayer)
    conf = (ComputationGraphConfiguration.builder(seed=1, inference_workspace_mode=mode)
            .add_inputs("seq", "side")
            .add_layer("lstm", LSTM(n_out=32, activation="tanh"), "seq")
            .add_vertex("last", LastTimeStepVertex("seq"), "lstm")
            .add_layer("dense", DenseLayer(n_out=16, activation="relu"), "side")
            .add_layer("out", OutputLayer(n_out=5, activation="softmax"), "last", "dense")
            .set_outputs("out")
            .set_input_types(InputType.recurrent(8, steps), InputType.feed_forward(10))
            .build())
    g = ComputationGraph(conf)
    g.init()
    return g


def torch_two_input_step(torch):
    # one step of torch_two_input's model at batch 1: the LSTM as a cell carrying its state
    nn = torch.nn
    cell, dense, out = nn.LSTMCell(8, 32), nn.Linear(10, 16), nn.Linear(48, 5)
    state = [torch.zeros(1, 32), torch.zeros(1, 32)]

    def step(seq, side):
        with torch.inference_mode():
            state[:] = cell(seq, tuple(state))
            z = torch.cat([state[0], torch.relu(dense(side))], 1)
            return torch.softmax(out(z), 1)
    return step


def torch_two_input(torch):
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(8, 32, batch_first=True)
            self.dense = nn.Linear(10, 16)
            self.out = nn.Linear(48, 5)

        def forward(self, seq, side):
            h, _ = self.lstm(seq)
            z = torch.cat([h[:, -1], torch.relu(self.dense(side))], 1)
            return torch.softmax(self.out(z), 1)
    return Net()


def serve_rate(call, seqs, sides):
    # requests per second from CLIENTS threads, each sending REQUESTS one-example requests
    start = threading.Barrier(CLIENTS + 1)

    def client(k):
        start.wait()
        for r in range(REQUESTS):
            call(seqs[k, r], sides[k, r])
    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return CLIENTS * REQUESTS / (time.perf_counter() - t0)


def worker(threads, quick):
    import numpy as np

    import ndws
    from ndws.data import DataSet, MultiDataSet
    from ndws.nn import Adam, DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer
    from ndws.parallel import ParallelInference
    torch = worker_threads(threads)
    rounds, per_round = (3, 2) if quick else (5, 4)
    rng = np.random.default_rng(0)
    rows = {}

    # -- the MLP, network against graph --
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=784, n_out=256, activation="relu"),
         DenseLayer(n_out=256, activation="relu"),
         OutputLayer(n_out=10, activation="softmax")], seed=1, updater=Adam(1e-3)))
    net.init()
    g = net.to_computation_graph()
    x = rng.random((MLP_BATCH, 784), dtype=np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, MLP_BATCH)]
    ds, mds = DataSet(x, y), MultiDataSet([x], [y])
    span = 2 * NEIGHBOUR_PERIOD
    rows["mlp fit"] = timed({"network": lambda: net.fit(ds, progress=False),
                             "graph": lambda: g.fit(mds, progress=False)}, rounds, per_round * 4,
                            span=span)
    rows["mlp output"] = timed({"network": lambda: net.output(x), "graph": lambda: g.output(x)},
                               rounds, per_round * 4, span=span)

    # -- the residual network against PyTorch eager --
    res = resnet_graph()
    xi = rng.standard_normal((RES_BATCH, 3, 32, 32)).astype(np.float32)
    yi = rng.integers(0, 10, RES_BATCH)
    batch = MultiDataSet([xi], [np.eye(10, dtype=np.float32)[yi]])
    contenders = {"ndws": lambda: res.fit(batch, progress=False)}
    if torch is not None:
        tnet = torch_resnet(torch)
        opt = torch.optim.Adam(tnet.parameters(), 1e-2)
        xt, yt = torch.from_numpy(xi), torch.from_numpy(yi)
        loss = torch.nn.CrossEntropyLoss()

        def torch_step():
            opt.zero_grad(set_to_none=True)
            loss(tnet(xt), yt).backward()
            opt.step()
        contenders["torch"] = torch_step
    rows["resnet fit"] = timed(contenders, rounds, per_round, span=span)

    # -- the pooled workspaces against the widest cut (counted: the same at any load) --
    memory = None
    if threads == 1:
        from ndws.nn.graph.memory import minimal_live_set
        memory = {}
        for mode in ("SEPARATE", "SINGLE"):
            ndws.destroy_all_workspaces_for_current_thread()
            r = resnet_graph(mode)
            for _ in range(3):
                r.fit(batch, progress=False)
            held = ndws.get_workspace_manager().get_all_workspaces_for_current_thread()
            memory[mode] = sum(ws.current_size for ws in held)
            if mode == "SEPARATE":
                nodes = [n for n in r._nodes if n.obj is not None]
                uses = r._memory_uses(RES_BATCH, True, 4)
                memory["live set"] = minimal_live_set(nodes, uses, True)
                memory["plan"] = sum(r.memory_report(RES_BATCH).workspaces(
                    ndws.WorkspaceMode.SEPARATE).values())
        ndws.destroy_all_workspaces_for_current_thread()

    # -- serving the two-input graph from 32 threads --
    two = two_input_graph()
    seqs = rng.standard_normal((CLIENTS, REQUESTS, 8, 20)).astype(np.float32)
    sides = rng.standard_normal((CLIENTS, REQUESTS, 10)).astype(np.float32)
    serve = {}
    for mode in ("BATCHED", "SEQUENTIAL"):
        samples = []
        with ParallelInference(two, inference_mode=mode, workers=1) as pi:
            pi.output(seqs[0, 0], sides[0, 0])
            for _ in range(rounds):
                settle()
                samples.append(serve_rate(pi.output, seqs, sides))
        serve[mode] = statistics.median(samples)
    if torch is not None:
        tm = torch_two_input(torch).eval()
        tseq = torch.from_numpy(np.ascontiguousarray(seqs.transpose(0, 1, 3, 2)))
        tside = torch.from_numpy(sides)

        def call(s, d):
            with torch.no_grad():
                tm(s[None], d[None])
        samples = []
        for _ in range(rounds):
            settle()
            samples.append(serve_rate(call, tseq, tside))
        serve["torch"] = statistics.median(samples)

    # -- one step of the two-input graph at batch 1 (rnn_time_step) --
    fast, slow = two_input_graph(steps=None), two_input_graph(steps=None)
    slow._one_step_path = lambda xs: None          # the general path, every call
    seq1 = rng.standard_normal((1, 8)).astype(np.float32)
    side1 = rng.standard_normal((1, 10)).astype(np.float32)
    np.testing.assert_array_equal(fast.rnn_time_step(seq1, side1)[0].numpy(),
                                  slow.rnn_time_step(seq1, side1)[0].numpy())
    contenders = {"one-step": lambda: fast.rnn_time_step(seq1, side1),
                  "general": lambda: slow.rnn_time_step(seq1, side1)}
    if torch is not None:
        tstep = torch_two_input_step(torch)
        tseq1, tside1 = torch.from_numpy(seq1), torch.from_numpy(side1)
        contenders["torch"] = lambda: tstep(tseq1, tside1)
    rows["graph step"] = timed(contenders, rounds, per_round * 100)
    info = {"threads": threads, "torch": None if torch is None else torch.__version__}
    print(json.dumps({"info": info, "rows": rows, "memory": memory, "serve": serve}))


def run(threads, quick, noisy):
    return run_worker(__file__, threads, quick, noisy)


def report(threads, condition, out):
    print(f"\n## {threads} thread(s), {condition}; torch {out['info']['torch'] or 'absent'}")
    print(f"{'row':<12} {'contender':<10} {'ms':>9} {'p10-p90':>15} {'ratio':>8}  target")
    misses = 0
    mlp = {row: out["rows"][row] for row in ("mlp fit", "mlp output")}
    for row, res in mlp.items():
        base = res["network"]["ms"]
        for name, r in res.items():
            ratio = r["ms"] / base
            verdict = ""
            if name == "graph":
                ok = ratio <= 1.03
                misses += not ok
                verdict = f"{'PASS' if ok else 'MISS'} (graph/network <= 1.03)"
            lo, hi = r["spread"]
            print(f"{row:<12} {name:<10} {r['ms']:9.2f} {lo:7.2f}-{hi:<7.2f} {ratio:8.3f}  "
                  f"{verdict}")
    res = out["rows"]["resnet fit"]
    for name, r in res.items():
        verdict, ratio = "", ""
        if name == "ndws" and "torch" in res:
            q = res["torch"]["ms"] / r["ms"]
            ratio = f"{q:8.2f}"
            ok = q >= 1.0
            misses += not ok
            verdict = f"{'PASS' if ok else 'MISS'} (torch/ndws >= 1)"
        print(f"{'resnet fit':<12} {name:<10} {r['ms']:9.1f} {r['spread'][0]:7.1f}-"
              f"{r['spread'][1]:<7.1f} {ratio:>8}  {verdict}")
    mem = out["memory"]
    if mem:
        sep, live, single = mem["SEPARATE"], mem["live set"], mem["SINGLE"]
        ok = sep <= 1.2 * live and sep < single
        misses += not ok
        print(f"memory: SEPARATE holds {sep:,} B (plan {mem['plan']:,}), the minimal live set "
              f"is {live:,} B ({sep / live:.2f}x), SINGLE holds {single:,} B "
              f"({sep / single:.2f}x)  {'PASS' if ok else 'MISS'} (<= 1.2x live, < SINGLE)")
    res = out["rows"]["graph step"]
    base = res["one-step"]["ms"]
    for name, r in res.items():
        print(f"{'graph step':<12} {name:<10} {r['ms'] * 1e3:7.1f}us {r['spread'][0] * 1e3:6.1f}-"
              f"{r['spread'][1] * 1e3:<6.1f}us {r['ms'] / base:8.2f}  (x the one-step path)")
    s = out["serve"]
    print(f"serve ({CLIENTS} threads x {REQUESTS} one-example requests): BATCHED "
          f"{s['BATCHED']:,.0f}/s, SEQUENTIAL {s['SEQUENTIAL']:,.0f}/s "
          f"({s['BATCHED'] / s['SEQUENTIAL']:.2f}x)"
          + (f", torch from {CLIENTS} threads {s['torch']:,.0f}/s "
             f"(BATCHED {s['BATCHED'] / s['torch']:.2f}x)" if "torch" in s else ""))
    return misses


def main():
    ap = harness_parser(__doc__)
    args = ap.parse_args()
    if run_role(args, worker):
        return
    banner("bench_graph", args.quick)
    misses = 0
    for threads in [int(t) for t in args.threads.split(",")]:
        for noisy in ((False, True) if args.noisy else (False,)):
            misses += report(threads, "busy neighbour" if noisy else "quiet",
                             run(threads, args.quick, noisy))
    print(f"\n# medians (p10-p90); {misses} target(s) missed (printed, never hidden)")


if __name__ == "__main__":
    main()
