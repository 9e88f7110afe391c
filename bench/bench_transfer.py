#!/usr/bin/env python
"""Fine-tuning LeNet's head with the rest frozen, against training the whole network: the time
of one training iteration of DL4J's LeNet (MNIST 28x28, batch 64, Adam, l2) when every layer
trains, when only the head (the output layer) trains (``set_feature_extractor(4)``, DL4J's
transfer-learning examples' habit of freezing up to the last hidden layer), when the dense
layer trains too (``set_feature_extractor(3)``: the convolutions and poolings frozen), and
`TransferLearningHelper`'s featurised fit of the head (the frozen layers' output computed
once, each iteration training the output layer on it).

A frozen layer has no updater state and the backward pass stops at the lowest layer that
trains, so the frozen convolutions cost their forward pass only; the helper does not pay that
either. The contenders run in interleaved rounds (so a neighbour that takes a core slows them
all alike); each figure is the median of all its iterations, each ratio against the whole
network in the same run.

The graph row: the residual ComputationGraph of ``ndws train --model resnet`` on 32x32x3
images (bench_graph's ``resnet fit`` row: a 3x3 stem and three residual blocks of 16 channels,
batch 32), whole against its stem and first block frozen
(``GraphBuilder.set_feature_extractor("block0")``) and its stem and first two blocks frozen
(``"block1"``), and each of those through `TransferLearningHelper`: the frozen part's output
(the boundary, ``block0`` or ``block1``) computed once, each iteration training the unfrozen
graph on it. A graph's backward pass skips every frozen vertex, so only the frozen vertices'
forward pass remains of them; the helper does not pay that either.

Usage::

    python bench/bench_transfer.py              # 30 iterations each, 1 thread
    python bench/bench_transfer.py --quick      # 12, noisier
    python bench/bench_transfer.py --threads 2

Target: the head-only iteration at most 0.5x the whole network's. With the convolutions frozen
and the dense layer training the iteration is about half the whole network's: the frozen
forward pass (the two max poolings cost more than the two convolutions) is what remains. A miss
is printed, never hidden; the exit status is 0.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "bench")):
    if path not in sys.path:
        sys.path.insert(0, path)

import bench_fit  # noqa: E402  (its interleaved timing)
import bench_graph  # noqa: E402  (its residual graph)

TARGET = 0.5
BATCH = 64


def lenet():
    from ndws.nn import (Adam, ConvolutionLayer, DenseLayer, InputType,
                         MultiLayerConfiguration, MultiLayerNetwork, OutputLayer,
                         SubsamplingLayer)
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [ConvolutionLayer(kernel_size=5, stride=1, n_out=20, activation="identity"),
         SubsamplingLayer(pooling_type="max", kernel_size=2, stride=2),
         ConvolutionLayer(kernel_size=5, stride=1, n_out=50, activation="identity"),
         SubsamplingLayer(pooling_type="max", kernel_size=2, stride=2),
         DenseLayer(n_out=500, activation="relu"),
         OutputLayer(n_out=10, activation="softmax", loss_function="negativeloglikelihood")],
        input_type=InputType.convolutional_flat(28, 28, 1), seed=123, l2=5e-4,
        updater=Adam(1e-3)))
    net.init()
    return net


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=1,
                   help="kernel threads (default 1: on a machine busier than its cores, a "
                        "parallel region waits for a time slice, which swamps the figures)")
    args = p.parse_args(argv)
    import numpy as np

    import ndws
    ndws.set_num_threads(args.threads)

    from ndws.data.dataset import DataSet
    from ndws.nn.transferlearning import TransferLearning, TransferLearningHelper

    rng = np.random.default_rng(0)
    x = rng.random((BATCH, 784), dtype=np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, BATCH)]
    ds = DataSet(x, y)
    full = lenet()
    convs = TransferLearning.Builder(full).set_feature_extractor(3).build()
    head = TransferLearning.Builder(full).set_feature_extractor(4).build()
    helper = TransferLearningHelper(head)
    featurized = helper.featurize(ds)
    top = helper.unfrozen_mln()
    steps = {"whole network": lambda: full.fit(ds, progress=False),
             "head only (layers 0-4 frozen)": lambda: head.fit(ds, progress=False),
             "dense + head (convolutions frozen)": lambda: convs.fit(ds, progress=False),
             "head on featurised input (helper)": lambda: top.fit(featurized, progress=False)}
    n = 12 if args.quick else 30
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"$ python bench/bench_transfer.py{' --quick' if args.quick else ''}"
          f"{f' --threads {args.threads}' if args.threads != 1 else ''}")
    print(f"LeNet (DL4J's), batch {BATCH}, Adam, l2; one training iteration, median of "
          f"{n}, {args.threads} thread(s) (load average {load:.1f})")
    med = _table(steps, n)
    ratio = med["head only (layers 0-4 frozen)"] / med["whole network"]
    print(f"target: head only <= {TARGET}x the whole network: "
          f"{'met' if ratio <= TARGET else 'MISSED'} ({ratio:.2f}x)")

    graph = bench_graph.resnet_graph()
    xi = rng.standard_normal((bench_graph.RES_BATCH, 3, 32, 32)).astype(np.float32)
    yi = np.eye(10, dtype=np.float32)[rng.integers(0, 10, bench_graph.RES_BATCH)]
    images = DataSet(xi, yi)
    stem0 = TransferLearning.GraphBuilder(graph).set_feature_extractor("block0").build()
    stem01 = TransferLearning.GraphBuilder(graph).set_feature_extractor("block1").build()
    featurized = {}
    for name, frozen in (("block0", stem0), ("block1", stem01)):
        helper = TransferLearningHelper(frozen)
        featurized[name] = (helper.unfrozen_graph(), helper.featurize(images))
    steps = {"whole graph": lambda: graph.fit(images, progress=False),
             "stem + block 0 frozen": lambda: stem0.fit(images, progress=False),
             "stem + block 0 featurised (helper)": lambda: _fit(*featurized["block0"]),
             "stem + blocks 0-1 frozen": lambda: stem01.fit(images, progress=False),
             "stem + blocks 0-1 featurised (helper)": lambda: _fit(*featurized["block1"])}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nresidual ComputationGraph (ndws train --model resnet's on 32x32x3 images, "
          f"{bench_graph.WIDTH} channels), batch {bench_graph.RES_BATCH}, Adam; one training "
          f"iteration, median of {n}, {args.threads} thread(s) (load average {load:.1f})")
    _table(steps, n)
    return 0


def _fit(top, featurized):
    # one iteration of the helper's unfrozen graph on the featurised batch
    top.fit(featurized, progress=False)


def _table(steps, n):
    # bench_fit's interleaved rounds (its warm-up, ROUNDS rounds of n / ROUNDS iterations
    # each); prints each contender's median and its ratio to the first; returns the medians
    med = {name: us / 1e3 for name, us in bench_fit._interleaved_us(steps, n).items()}
    base = next(iter(med.values()))
    for name, ms in med.items():
        print(f"  {name:<40}{ms:9.2f} ms  {ms / base:5.2f}x")
    return med


if __name__ == "__main__":
    sys.exit(main())
