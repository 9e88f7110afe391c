"""The networks and data of the MPI scenarios (tests/mpi/checks.py), shared with the pytest
side (tests/test_mpi.py) that computes their single-process oracles."""
from __future__ import annotations

import numpy as np

from ndws.nn import (Adam, BatchNormalization, ConvolutionLayer, DenseLayer, InputType,
                     MultiLayerConfiguration, MultiLayerNetwork, OutputLayer, Sgd,
                     SubsamplingLayer)

BATCH = 4                           # rows per rank and step
#: 2 ranks, global batches of 8: 67 ends with 3 rows (2 and 1), 65 with 1 (rank 1 has none)
SHARED_SIZES = (67, 65)
#: MPITrainer options: the default (shared memory, the ranks being on one machine), MPI's
#: allreduce in buckets during backprop or in one blocking call, and each with a deadline
SHARED_VARIANTS = {"default": {}, "buckets": {"shared_memory": False},
                   "per_layer": {"bucket_bytes": 0, "shared_memory": False},
                   "blocking": {"overlap": False, "shared_memory": False},
                   "timeout": {"timeout": 60.0},
                   "buckets_timeout": {"timeout": 60.0, "shared_memory": False}}
UPDATERS = ("sgd", "adam")
#: the CNN scenario's MPITrainer options: the default, and an allreduce per layer during
#: backprop (each convolution's bucket starts before the layers below backpropagate)
CNN_VARIANTS = {"default": {}, "per_layer": {"bucket_bytes": 0, "shared_memory": False}}
CNN_N = 27                          # global batches of 8: the last has 3 rows (2 and 1)
AVERAGING_N = 64
AVERAGING_FREQUENCIES = (1, 3)


def network(updater="sgd", regularised=False, batchnorm=False, hidden=16):
    upd = Sgd(0.1) if updater == "sgd" else Adam(1e-2)
    layers = [DenseLayer(n_in=6, n_out=hidden, activation="tanh")]
    if batchnorm:
        layers.append(BatchNormalization())
    layers += [DenseLayer(n_out=8, activation="relu"),
               OutputLayer(n_out=3, activation="softmax", loss_function="MCXENT")]
    extra = {"l2": 1e-3, "weight_decay": 1e-2} if regularised else {}
    net = MultiLayerNetwork(MultiLayerConfiguration(layers, seed=3, updater=upd, **extra))
    net.init()
    return net


def data(n):
    rng = np.random.default_rng(n)
    x = rng.random((n, 6), dtype=np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)]
    return x, y


def cnn(batchnorm=False):
    """A small CNN on 1x6x6 images (rows of 36 pixels): a 3x3 convolution of 4 channels,
    optionally BatchNormalization over them (per-channel statistics), 2x2 max pooling, a 3x3
    SAME convolution, the softmax output (the preprocessors inserted by the input type)."""
    layers = [ConvolutionLayer(kernel_size=3, n_out=4, activation="relu")]
    if batchnorm:
        layers.append(BatchNormalization())
    layers += [SubsamplingLayer(kernel_size=2, stride=2),
               ConvolutionLayer(kernel_size=3, n_out=3, activation="tanh",
                                convolution_mode="same"),
               OutputLayer(n_out=3, activation="softmax", loss_function="MCXENT")]
    net = MultiLayerNetwork(MultiLayerConfiguration(
        layers, input_type=InputType.convolutional_flat(6, 6, 1), seed=4, updater=Adam(1e-2),
        l2=1e-3))
    net.init()
    return net


def image_data(n):
    rng = np.random.default_rng(100 + n)
    x = rng.random((n, 36), dtype=np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)]
    return x, y


#: the graph scenario's MPITrainer options: a bucket per vertex started during the backward
#: pass, and all of them in one bucket (the buckets change when the sums happen, never what
#: they are)
GRAPH_VARIANTS = {"per_vertex": {"bucket_bytes": 0, "shared_memory": False},
                  "one_bucket": {"bucket_bytes": 1 << 30, "shared_memory": False}}
GRAPH_N = 40                        # global batches of 8


def graph():
    """A ComputationGraph of two branches: dense layers over inputs "a" (6) and "b" (5), added
    (ElementWiseVertex), a dense layer over the sum, merged with branch "a" into the softmax;
    the vertices in topological order: a, b, da, db, sum, h, out-merge, out."""
    from ndws.nn import ComputationGraph, ComputationGraphConfiguration, ElementWiseVertex
    conf = (ComputationGraphConfiguration.builder(seed=5, updater=Adam(1e-2), l2=1e-3)
            .add_inputs("a", "b")
            .add_layer("da", DenseLayer(n_out=8, activation="tanh"), "a")
            .add_layer("db", DenseLayer(n_out=8, activation="relu"), "b")
            .add_vertex("sum", ElementWiseVertex("ADD"), "da", "db")
            .add_layer("h", DenseLayer(n_out=6, activation="tanh"), "sum")
            .add_layer("out", OutputLayer(n_out=3, activation="softmax"), "h", "da")
            .set_outputs("out")
            .set_input_types(InputType.feed_forward(6), InputType.feed_forward(5))
            .build())
    g = ComputationGraph(conf)
    g.init()
    return g


def graph_data(n):
    rng = np.random.default_rng(200 + n)
    return (rng.random((n, 6), dtype=np.float32), rng.random((n, 5), dtype=np.float32),
            np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)])


def graph_batches(n, rank, size):
    """Rank `rank`'s MultiDataSets of `graph_data(n)`: rows [8k + 4 rank, 8k + 4 rank + 4) of
    each global batch of 4 * size rows."""
    from ndws.data import MultiDataSet
    a, b, y = graph_data(n)
    step = BATCH * size
    return [MultiDataSet([a[s:s + BATCH], b[s:s + BATCH]], [y[s:s + BATCH]])
            for s in range(BATCH * rank, n, step)]
