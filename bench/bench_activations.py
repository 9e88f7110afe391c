#!/usr/bin/env python
"""Cost of ndws.nn.functional's activations and their derivatives against NumPy.

For each activation it prints the median microseconds of the forward and the backward call over
1,048,576 float32 elements into an ``out=`` array (1 and 2 kernel threads), the ratio to
``relu`` (the memory-bound floor: one read, one write), and, where NumPy writes the same
function as a few ufuncs, NumPy's time and the ratio ndws / NumPy. sigmoid and tanh run
per-instruction-set loops over ndws' own exp and tanh (ndws/nn/_act_loops.h); the other
activations with an ``exp``, ``expm1`` or ``tanh`` per element run scalar loops, where
NumPy's SIMD ufuncs win.

Usage::

    python bench/bench_activations.py            # 41 repeats per figure
    python bench/bench_activations.py --quick    # 9 repeats, noisier

Every figure and ratio printed comes from the same run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import ndws  # noqa: E402
import ndws.nn.functional as F  # noqa: E402

N = 1 << 20
NAMES = ["relu", "sigmoid", "tanh", "gelu", "hardtanh", "hardsigmoid", "selu", "swish",
         "softsign", "rational_tanh", "rectified_tanh", "cube", "thresholded_relu"]
SELU_A, SELU_L = 1.6732632423543772848, 1.0507009873554804934

#: NumPy's writing of the forward, into o (x: the input)
NUMPY = {
    "relu": lambda x, o: np.maximum(x, 0, out=o),
    "sigmoid": lambda x, o: np.divide(1, 1 + np.exp(-x), out=o),
    "tanh": lambda x, o: np.tanh(x, out=o),
    "hardtanh": lambda x, o: np.clip(x, -1, 1, out=o),
    "hardsigmoid": lambda x, o: np.clip(0.2 * x + 0.5, 0, 1, out=o),
    "selu": lambda x, o: np.copyto(o, np.where(x > 0, SELU_L * x, SELU_L * SELU_A * np.expm1(x))),
    "swish": lambda x, o: np.multiply(x, 1 / (1 + np.exp(-x)), out=o),
    "softsign": lambda x, o: np.divide(x, 1 + np.abs(x), out=o),
    "rectified_tanh": lambda x, o: np.maximum(np.tanh(x), 0, out=o),
    "cube": lambda x, o: np.multiply(x * x, x, out=o),
    "thresholded_relu": lambda x, o: np.multiply(x, x > 1, out=o),
}


def median_us(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="9 repeats instead of 41")
    args = ap.parse_args()
    repeats = 9 if args.quick else 41
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32) * 3
    g = np.ones_like(x)
    o = np.empty_like(x)
    print(f"{N} float32 elements, out= given; medians of {repeats} (us)")
    print(f"{'activation':18s}{'threads':>8s}{'forward':>10s}{'backward':>10s}"
          f"{'fwd/relu':>10s}{'numpy fwd':>11s}{'ndws/numpy':>12s}")
    for threads in (1, 2):
        with ndws.num_threads(threads):
            floor = median_us(lambda: F.relu(x, out=o), repeats)
            for name in NAMES:
                fwd, bwd = getattr(F, name), getattr(F, name + "_backward")
                tf = median_us(lambda: fwd(x, out=o), repeats)
                tb = median_us(lambda: bwd(x, g, out=o), repeats)
                line = f"{name:18s}{threads:8d}{tf:10.0f}{tb:10.0f}{tf / floor:10.1f}"
                if name in NUMPY and threads == 1:
                    tn = median_us(lambda: NUMPY[name](x, o), repeats)
                    line += f"{tn:11.0f}{tf / tn:12.2f}"
                print(line)


if __name__ == "__main__":
    main()
