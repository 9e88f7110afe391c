#!/usr/bin/env python
"""Data-parallel training over MPI: `ndws.parallel.MPITrainer` on 2 ranks against one process,
the 784-256-256-10 MLP of bench_mlp_step.py / bench_fit.py (ReLU, softmax cross-entropy, SGD).

Weak scaling: each rank fits batches of the same size as the single process (so a step of 2
ranks learns from twice the rows), every process on 1 kernel thread (``ndws.set_num_threads
(1)``). Rows: the single process (`MultiLayerNetwork.fit`), then the trainer with MPI's
allreduce: one blocking call on the whole gradient buffer after backprop (``overlap=False``), a
bucket per layer started during backprop (``bucket_bytes=0``) and the default 64 KiB buckets;
and with its default on one machine, the sum through an MPI shared-memory window. Columns:
samples/s, the ratio to the single process, the step time and the share of it rank 0 spent in
MPI calls (the communication that overlap did not hide). Everything in one table comes from
one ``mpiexec`` run, the contenders interleaved round by round (the single process runs on
rank 0 while rank 1 sleeps); medians over the rounds.

Then a timeline of one step per variant (microseconds from the step's start, rank 0): when
backprop finished each layer and when each bucket's allreduce started, was seen complete by a
test between layers, or was waited for after backprop; and the allreduce alone (latency and
bandwidth over shared memory), the constants of docs/distributed.md's cost model
(bench/mpi_scaling.py). With ``--async-progress`` the run is repeated with MPICH's progress
thread (``MPIR_CVAR_ASYNC_PROGRESS=1``).

Usage::

    python bench/bench_mpi.py                    # batch 32 and 128, 2 ranks
    python bench/bench_mpi.py --quick            # fewer steps and rounds, noisier
    python bench/bench_mpi.py --async-progress   # also with MPICH's progress thread

Target: 2 ranks >= 1.7x the single process's samples/s. A miss is printed, never hidden; the
exit status is 0. Needs the ``mpi`` extra (``pip install 'ndws[mpi]'``).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "bench")):
    if path not in sys.path:
        sys.path.insert(0, path)

import bench_mlp_step as mlp  # noqa: E402  (the same model and data)

TARGET = 1.7
STEPS = (60, 20)          # steps per timed fit (full, quick)
ROUNDS = (9, 3)
VARIANTS = {              # name: MPITrainer options
    "blocking allreduce": {"overlap": False, "shared_memory": False},
    "bucket per layer": {"overlap": True, "bucket_bytes": 0, "shared_memory": False},
    "64 KiB buckets": {"overlap": True, "shared_memory": False},
    "shared memory": {},     # the default with every rank on one machine
}
SIZES_AR = (8, 1 << 12, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24)


def make_net(params0):
    import numpy as np

    from ndws.nn import DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer, Sgd
    s = mlp.SIZES
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=s[0], n_out=s[1], activation="relu"),
         DenseLayer(n_out=s[2], activation="relu"),
         OutputLayer(n_out=s[3], activation="softmax", loss_function="MCXENT")],
        seed=0, updater=Sgd(mlp.LR)))
    net.init(np.concatenate([p.ravel() for p in params0]))
    return net


def run_child(quick):
    import numpy as np
    from mpi4py import MPI

    import ndws
    from ndws.data.dataset import DataSet
    from ndws.nn.listeners import TrainingListener
    from ndws.parallel import MPITrainer

    ndws.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    steps, rounds = STEPS[quick], ROUNDS[quick]
    params0 = mlp.init_params(np.random.default_rng(0))

    class Comm(TrainingListener):       # rank 0's milliseconds in MPI calls, per step
        def __init__(self):
            self.ms = []

        def iteration_done(self, model, iteration, epoch):
            self.ms.append(model.last_comm_time)

    def idle_until_done():
        # rank 1 while rank 0 times the single process: asleep, not spinning in a barrier
        req = comm.Ibarrier()
        while not req.Test():
            time.sleep(0.001)

    out = {"size": size, "mpi": MPI.Get_library_version().splitlines()[0].strip(),
           "async_progress": os.environ.get("MPIR_CVAR_ASYNC_PROGRESS", "0"),
           "batches": {}, "timeline": {}, "allreduce": {}}
    for batch in mlp.BATCHES:
        rng = np.random.default_rng([1, rank, batch])
        batches = []
        for _ in range(steps):
            x, y = mlp.make_batch(rng, batch)
            batches.append(DataSet(ndws.array(x, detached=True), ndws.array(y, detached=True)))
        single = make_net(params0)
        trainers = {name: MPITrainer(make_net(params0), **opts)
                    for name, opts in VARIANTS.items()}
        listeners = {name: Comm() for name in VARIANTS}
        for name, t in trainers.items():
            t.model.set_listeners(listeners[name])
            t.fit(batches[:5])                                   # warm-up
        if rank == 0:
            single.fit(batches[:5])
        times = {name: [] for name in ["single process"] + list(VARIANTS)}
        shares = {name: [] for name in VARIANTS}
        for _ in range(rounds):
            comm.Barrier()
            if rank == 0:
                t0 = time.perf_counter()
                single.fit(batches)
                times["single process"].append((time.perf_counter() - t0) / steps)
                comm.Ibarrier().Wait()
            else:
                idle_until_done()
            for name, t in trainers.items():
                comm.Barrier()
                listeners[name].ms.clear()
                t0 = time.perf_counter()
                t.fit(batches)
                elapsed = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX) / steps
                times[name].append(elapsed)
                if rank == 0:
                    shares[name].append(sum(listeners[name].ms) / 1000 / steps / elapsed)
        row = {}
        for name, ts in times.items() if rank == 0 else ():
            step = statistics.median(ts)
            rows = batch * (1 if name == "single process" else size)
            row[name] = {"step_us": step * 1e6, "samples_per_s": rows / step,
                         "comm_share": statistics.median(shares[name]) if name in shares
                         else 0.0}
        out["batches"][batch] = row
        # one traced step per variant, after a few untraced ones
        for name, opts in VARIANTS.items():
            t = MPITrainer(trainers[name].model, trace=True, **opts)
            t.fit(batches[:8])
            events = comm.gather(t.timeline(), root=0)
            if rank == 0:
                out["timeline"].setdefault(batch, {})[name] = {"events": events,
                                                               "buckets": t.buckets()}
            t.close()
        for t in trainers.values():
            t.close()
        ndws.destroy_all_workspaces_for_current_thread()
    # the allreduce alone, blocking, over this machine's shared memory
    for nbytes in SIZES_AR:
        buf = np.ones(max(1, nbytes // 4), np.float32)
        for _ in range(10):
            comm.Allreduce(MPI.IN_PLACE, buf)
        ts = []
        for _ in range(40 if quick else 200):
            comm.Barrier()
            t0 = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, buf)
            ts.append(time.perf_counter() - t0)
        out["allreduce"][nbytes] = comm.allreduce(statistics.median(ts), op=MPI.MAX) * 1e6
    if rank == 0:
        print(json.dumps(out))


def _mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


def _run(ranks, quick, async_progress):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if async_progress:
        env["MPIR_CVAR_ASYNC_PROGRESS"] = "1"
    # python -m mpi4py: an uncaught exception on one rank aborts the job, not a hang
    proc = subprocess.run([_mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py",
                           __file__, "--child"]
                          + (["--quick"] if quick else []), env=env, capture_output=True,
                          text=True, timeout=1800)
    if proc.returncode:
        sys.exit(f"the MPI run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fit_line(points):
    """Least-squares (intercept, slope) of y = a + b x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = (sum((x - mx) * (y - my) for x, y in points)
         / sum((x - mx) ** 2 for x, _ in points))
    return my - b * mx, b


def report(r):
    print(f"\n{r['mpi']}; {r['size']} ranks; MPIR_CVAR_ASYNC_PROGRESS={r['async_progress']}")
    print(f"{'batch/rank':>10} {'contender':<20} {'step us':>9} {'samples/s':>10} "
          f"{'x single':>8} {'comm share':>10}  target")
    for batch, row in r["batches"].items():
        base = row["single process"]["samples_per_s"]
        for name, m in row.items():
            ratio = m["samples_per_s"] / base
            verdict = "" if name == "single process" else (
                f"{'PASS' if ratio >= TARGET else 'MISS'} >= {TARGET}x")
            share = "" if name == "single process" else f"{m['comm_share'] * 100:.1f}%"
            print(f"{batch:>10} {name:<20} {m['step_us']:>9.1f} {m['samples_per_s']:>10.0f} "
                  f"{ratio:>8.2f} {share:>10}  {verdict}")
    for batch, variants in r["timeline"].items():
        print(f"\ntimeline of one step, batch {batch} per rank (us from the step's start; "
              f"rank 0, then rank 1; B = bucket)")
        for name, tl in variants.items():
            spans = ", ".join(f"B{k}: layers {i}.. [{s}, {e})"
                              for k, (i, s, e) in enumerate(tl["buckets"]))
            print(f"  {name} ({spans})")
            for rk, events in enumerate(tl["events"]):
                cells = []
                for us, kind, index in events:
                    label = {"backprop done": f"layer {index} backprop done",
                             "allreduce started": f"B{index} start",
                             "allreduce done": f"B{index} done (seen between layers)",
                             "allreduce waited": f"B{index} done (waited)",
                             "updated": "updated"}[kind]
                    cells.append(f"{us:7.0f} {label}")
                print(f"    rank {rk}: " + " | ".join(c.strip() for c in cells))
    ar = {int(k): v for k, v in r["allreduce"].items()}
    print("\nallreduce alone (blocking, median us): "
          + ", ".join(f"{k:,} B {v:.1f}" for k, v in ar.items()))
    # 2 ranks: t = 2 alpha + S / beta (ring: 2(N-1) alpha + 2(N-1)/N S / beta)
    alpha = ar[min(ar)] / 2
    big = [(k, v) for k, v in ar.items() if k >= 1 << 20]
    _, slope = fit_line(big)
    beta = 1 / slope / 1e3          # bytes per us -> GB/s
    batches = {int(b): row["single process"]["step_us"] for b, row in r["batches"].items()}
    c0, per_sample = fit_line(list(batches.items()))
    print(f"cost-model constants: latency alpha = {alpha:.2f} us per message, bandwidth beta = "
          f"{beta:.2f} GB/s (slope of the allreduce time from 1 MiB up); compute = "
          f"{c0:.0f} us + {per_sample:.2f} us per sample (single process, 1 thread)")
    print(f"  python bench/mpi_scaling.py --alpha-us {alpha:.2f} --beta-gbs {beta:.2f} "
          f"--fixed-us {c0:.0f} --per-sample-us {per_sample:.2f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--async-progress", action="store_true",
                   help="also run with MPICH's asynchronous progress thread")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        run_child(int(args.quick))
        return 0
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        print("bench_mpi: needs mpi4py and an MPI library: pip install 'ndws[mpi]'")
        return 0
    if _mpiexec() is None:
        print("bench_mpi: no mpiexec found (pip install 'ndws[mpi]' brings MPICH's)")
        return 0
    print(f"$ python bench/bench_mpi.py{' --quick' if args.quick else ''}"
          f"{' --async-progress' if args.async_progress else ''}")
    report(_run(args.ranks, args.quick, False))
    if args.async_progress:
        report(_run(args.ranks, args.quick, True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
