#!/usr/bin/env python
"""The cost model of one data-parallel SHARED_GRADIENTS step on N machines
(docs/distributed.md, "What N machines buy"): predicted speed-ups of the 784-256-256-10 MLP
and of a model 100x larger, on 10 and 100 Gbit/s networks, for 2 to 64 machines.

One step on N machines::

    T(N) = T_compute(b) + T_allreduce(N) - T_hidden
    T_compute(b) = t0 + c * b                        b: rows per machine
    T_allreduce(N) = 2 (N - 1) / N * S / beta + 2 (N - 1) * alpha     (ring allreduce)
    T_hidden <= min(T_allreduce * (1 - f_last), h * T_compute)       (overlap, best case)

S is the gradient's bytes (4 per parameter), beta the bandwidth, alpha the latency of one
message, f_last the share of the bytes in the last bucket (layer 0's, which no backprop is left
to hide), h the share of the step's compute left after the first bucket is ready (the layers
below). Strong scaling keeps the global batch G (b = G / N); weak scaling keeps b.

The defaults are this machine's figures from ``bench/bench_mpi.py`` (compute, 1 kernel thread;
alpha and beta of MPICH's allreduce over shared memory) and typical network figures (below).

Usage::

    python bench/mpi_scaling.py                         # the tables of docs/distributed.md
    python bench/mpi_scaling.py --alpha-us 1.23 --beta-gbs 8.81 --fixed-us 95 \\
        --per-sample-us 5.57                              # constants from bench_mpi.py
"""
from __future__ import annotations

import argparse
import sys

MLP_PARAMS = 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10      # 269,322
MLP_LAST_BUCKET = (784 * 256 + 256) / MLP_PARAMS                      # layer 0: 0.746
#: the networks: (name, parameters, compute scale); a model 100x larger (each width x10)
#: costs 100x the multiply-adds per sample, the fixed part of a step stays
MODELS = (("MLP 784-256-256-10", MLP_PARAMS, 1.0), ("100x larger", 100 * MLP_PARAMS, 100.0))
#: (name, bytes/us, latency us): 10 Gbit/s Ethernet with TCP, 100 Gbit/s with RDMA
NETWORKS = (("10 Gbit/s", 10e9 / 8 / 1e6, 25.0), ("100 Gbit/s", 100e9 / 8 / 1e6, 3.0))
MACHINES = (1, 2, 4, 8, 16, 32, 64)
HIDE_SHARE = 0.25          # h: layer 0's weight-gradient GEMM, about a quarter of a step


def allreduce_us(n, nbytes, bytes_per_us, alpha_us):
    """Ring allreduce of `nbytes` on `n` machines."""
    if n == 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bytes_per_us + 2 * (n - 1) * alpha_us


def step_us(n, rows, params, scale, network, fixed_us, per_sample_us, overlap):
    """(step time, its allreduce time) of one step on `n` machines with `rows` rows each."""
    _, bytes_per_us, alpha_us = network
    compute = fixed_us + scale * per_sample_us * rows
    comm = allreduce_us(n, 4 * params, bytes_per_us, alpha_us)
    hidden = min(comm * (1 - MLP_LAST_BUCKET), HIDE_SHARE * compute) if overlap else 0.0
    return compute + comm - hidden, comm


def speedup(n, global_batch, params, scale, network, fixed_us, per_sample_us, overlap,
            weak=False):
    """Samples/s on `n` machines over samples/s on one (the same model and global batch, or
    the same rows per machine when `weak`)."""
    rows = global_batch if weak else global_batch / n
    one, _ = step_us(1, global_batch, params, scale, network, fixed_us, per_sample_us, False)
    t, _ = step_us(n, rows, params, scale, network, fixed_us, per_sample_us, overlap)
    return (n * rows / t) / (global_batch / one)


def table(global_batch, fixed_us, per_sample_us, weak, overlap, out=sys.stdout):
    """One Markdown table: speed-up and efficiency per number of machines, model, network."""
    kind = (f"weak scaling, {global_batch} rows per machine" if weak else
            f"strong scaling, global batch {global_batch}")
    print(f"Speed-up over one machine ({kind}; "
          f"{'best-case overlap' if overlap else 'no overlap'}):\n", file=out)
    heads = [f"{'MLP' if scale == 1 else name} {net[0]}" for name, _, scale in MODELS
             for net in NETWORKS]
    print("| machines | " + " | ".join(heads) + " |", file=out)
    print("|---:|" + "---:|" * len(heads), file=out)
    for n in MACHINES[1:]:
        cells = []
        for _, params, scale in MODELS:
            for network in NETWORKS:
                s = speedup(n, global_batch, params, scale, network, fixed_us, per_sample_us,
                            overlap, weak)
                cells.append(f"{s:.2f}x ({s / n:.0%})")
        print(f"| {n} | " + " | ".join(cells) + " |", file=out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixed-us", type=float, default=95.0,
                   help="t0: the fixed part of a step's compute (bench_mpi.py)")
    p.add_argument("--per-sample-us", type=float, default=5.57,
                   help="c: compute per sample of the MLP, 1 thread (bench_mpi.py)")
    p.add_argument("--alpha-us", type=float, default=1.23,
                   help="latency over this machine's shared memory (only printed)")
    p.add_argument("--beta-gbs", type=float, default=8.81,
                   help="bandwidth over this machine's shared memory (only printed)")
    p.add_argument("--global-batch", type=int, default=1024)
    args = p.parse_args(argv)
    shm = ("shared memory", args.beta_gbs * 1e3, args.alpha_us)
    t, comm = step_us(2, 128, MLP_PARAMS, 1.0, shm, args.fixed_us, args.per_sample_us, False)
    one, _ = step_us(1, 128, MLP_PARAMS, 1.0, shm, args.fixed_us, args.per_sample_us, False)
    print(f"constants: t0 = {args.fixed_us:g} us, c = {args.per_sample_us:g} us/sample (MLP, 1 "
          f"thread); this machine's shared memory: alpha = {args.alpha_us:g} us, beta = "
          f"{args.beta_gbs:g} GB/s; networks: "
          + ", ".join(f"{n} beta = {b / 1e3:g} GB/s alpha = {a:g} us" for n, b, a in NETWORKS))
    print(f"this machine, 2 ranks, 128 rows each: step {t:.0f} us = compute {one:.0f} + "
          f"allreduce {comm:.0f} -> {2 * one / t:.2f}x one process\n")
    for weak, batch, overlap in ((False, args.global_batch, False),
                                 (False, args.global_batch, True), (True, 128, False)):
        table(batch, args.fixed_us, args.per_sample_us, weak, overlap)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
