"""The networks and data of the MPI scenarios (tests/mpi/checks.py), shared with the pytest
side (tests/test_mpi.py) that computes their single-process oracles."""
from __future__ import annotations

import numpy as np

from ndws.nn import (Adam, BatchNormalization, DenseLayer, MultiLayerConfiguration,
                     MultiLayerNetwork, OutputLayer, Sgd)

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
