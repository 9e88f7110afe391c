"""Scenarios of MPITrainer run under ``mpiexec`` by tests/test_mpi.py (this file is not a
test module: pytest does not collect it). Each rank writes what it saw to ``<out>/<scenario>
_rank<r>.npz`` (and the pytest side, which computes the single-process oracles, asserts);
nothing here asserts, so a scenario cannot pass by not looking.

Usage: ``mpiexec -n N python checks.py <scenario> <out directory>``.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402  (the networks and data shared with the pytest side)
from mpi4py import MPI  # noqa: E402

import ndws  # noqa: E402
from ndws.data import ArrayDataSetIterator  # noqa: E402
from ndws.data.dataset import DataSet  # noqa: E402
from ndws.nn.listeners import (CheckpointListener, CollectScoresListener,  # noqa: E402
                               PerformanceListener, TrainingListener)
from ndws.parallel import MPITrainer  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def save(out, name, **values):
    """Arrays and lists of numbers as arrays; anything else (text, dicts, nested lists) as
    JSON text."""
    def encode(v):
        if isinstance(v, list) and all(isinstance(e, (int, float)) for e in v):
            return np.asarray(v, dtype=np.float64)
        if isinstance(v, (dict, list, str)):
            return np.array(json.dumps(v))
        return np.asarray(v)
    np.savez(os.path.join(out, f"{name}_rank{rank}.npz"),
             **{k: encode(v) for k, v in values.items()})


def state(net):
    return {"params": net.params().numpy(), "updater": net._updater_state_flat(),
            "counters": np.array([net.iteration, net.epoch]), "score": net.score()}


# -- at start: rank 0's state everywhere ----------------------------------------------------

def broadcast(out):
    net = common.network("adam")
    net.fit(*common.data(16), batch_size=8)          # some updater state and counters
    if rank:
        # another rank's own state, to be replaced by rank 0's
        net.set_params(np.random.default_rng(rank).random(net.num_params()) - 0.5)
        net._set_updater_state_flat(net._updater_state_flat() + rank, "test")
        net.iteration, net.epoch = 99, 7
    before = state(net)
    trainer = MPITrainer(net)
    save(out, "broadcast", **{f"before_{k}": v for k, v in before.items()},
         **{f"after_{k}": v for k, v in state(net).items()}, repr=repr(trainer))
    trainer.close()


# -- SHARED_GRADIENTS: the same as one process on the concatenated batches -------------------

def shared(out):
    for n in common.SHARED_SIZES:
        x, y = common.data(n)
        for variant, options in common.SHARED_VARIANTS.items():
            for updater in common.UPDATERS:
                net = common.network(updater, regularised=True)
                trainer = MPITrainer(net, **options)
                it = ArrayDataSetIterator(x, y, common.BATCH, shuffle=True, seed=5)
                history = trainer.fit(it.shard(rank, size), epochs=2)
                save(out, f"shared_{n}_{variant}_{updater}", **state(net),
                     scores=history.scores, iterations=history.iterations,
                     buckets=trainer.buckets(), shared_memory=trainer.shared_memory)
                trainer.close()


def uneven(out):
    # no shard: rank r has 2 + 2r batches of its own; steps run while any rank has one
    x, y = common.data(64)
    mine = [DataSet(x[8 * k + 4 * rank:8 * k + 4 * rank + 4],
                    y[8 * k + 4 * rank:8 * k + 4 * rank + 4]) for k in range(2 + 2 * rank)]
    net = common.network("sgd")
    trainer = MPITrainer(net)
    history = trainer.fit(mine, epochs=2)
    save(out, "uneven", **state(net), scores=history.scores, iterations=history.iterations)
    trainer.close()


def batchnorm(out):
    x, y = common.data(48)
    net = common.network("adam", batchnorm=True)
    trainer = MPITrainer(net)
    it = ArrayDataSetIterator(x, y, common.BATCH, shuffle=True, seed=2)
    trainer.fit(it.shard(rank, size), epochs=2)
    save(out, "batchnorm", **state(net))
    trainer.close()


def cnn(out):
    # convolutions, pooling and preprocessors; with BatchNormalization over 4-D input, whose
    # running statistics are averaged after each step
    x, y = common.image_data(common.CNN_N)
    for variant, options in common.CNN_VARIANTS.items():
        for bn in (False, True):
            net = common.cnn(batchnorm=bn)
            trainer = MPITrainer(net, **options)
            it = ArrayDataSetIterator(x, y, common.BATCH, shuffle=True, seed=7)
            history = trainer.fit(it.shard(rank, size), epochs=2)
            save(out, f"cnn_{variant}_{bn}", **state(net), scores=history.scores)
            trainer.close()


# -- AVERAGING --------------------------------------------------------------------------------

def averaging(out):
    x, y = common.data(common.AVERAGING_N)
    for frequency in common.AVERAGING_FREQUENCIES:
        for average_updaters in (True, False):
            net = common.network("adam")
            trainer = MPITrainer(net, training_mode="AVERAGING",
                                 averaging_frequency=frequency,
                                 average_updaters=average_updaters)
            it = ArrayDataSetIterator(x, y, common.BATCH)
            history = trainer.fit(it.shard(rank, size), epochs=2)
            save(out, f"averaging_{frequency}_{average_updaters}", **state(net),
                 scores=history.scores)
            trainer.close()


# -- checkpoints ------------------------------------------------------------------------------

def checkpoints(out):
    x, y = common.data(64)
    it = ArrayDataSetIterator(x, y, common.BATCH)
    directory = os.path.join(out, f"listener_rank{rank}")
    os.makedirs(directory, exist_ok=True)
    net = common.network("adam")
    listener = CheckpointListener(directory, every_n_epochs=1)
    net.set_listeners(listener)
    trainer = MPITrainer(net)
    trainer.fit(it.shard(rank, size), epochs=1)
    trainer.save(os.path.join(out, f"saved_by_{size}.zip"))
    trainer.fit(it.shard(rank, size), epochs=1)
    save(out, "checkpoints_continuous", **state(net), saved=listener.saved)
    trainer.close()
    # resume, here, from this run's checkpoint and from the one the pytest side wrote with
    # one process; continue for one epoch
    for source in (f"saved_by_{size}.zip", "saved_by_1.zip"):
        path = os.path.join(out, source)
        trainer = MPITrainer.load(path if rank == 0 else "not needed on other ranks")
        trainer.fit(it.shard(rank, size), epochs=1)
        save(out, f"resumed_{source[:-4]}", **state(trainer.model))
        trainer.close()
    # a missing file: every rank raises (rank 0 its own error, the others naming rank 0)
    try:
        MPITrainer.load(os.path.join(out, "missing.zip"))
    except Exception as exc:  # noqa: BLE001 - reported, the pytest side checks the text
        save(out, "load_missing", error=f"{type(exc).__name__}: {exc}")


# -- listeners and reports: rank 0 only --------------------------------------------------------

class Calls(TrainingListener):
    def __init__(self):
        self.calls = []

    def iteration_done(self, model, iteration, epoch):
        self.calls.append(("iteration_done", iteration))

    def on_epoch_end(self, model):
        self.calls.append(("on_epoch_end", model.epoch))

    def on_gradient_calculation(self, model):
        self.calls.append(("on_gradient_calculation", model.iteration))


def listeners(out):
    import io
    import logging
    x, y = common.data(40)
    net = common.network("sgd")
    calls, scores = Calls(), CollectScoresListener()
    perf = PerformanceListener(1, report_score=True)
    net.set_listeners(calls, scores, perf)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logging.getLogger("ndws").addHandler(handler)
    logging.getLogger("ndws").setLevel(logging.INFO)
    trainer = MPITrainer(net, trace=True, bucket_bytes=0,        # a bucket per layer
                         shared_memory=False)
    stderr, sys.stderr = sys.stderr, io.StringIO()
    try:
        history = trainer.fit(ArrayDataSetIterator(x, y, 4).shard(rank, size), epochs=2,
                              progress=True)
        bar = sys.stderr.getvalue()
    finally:
        sys.stderr = stderr
    logging.getLogger("ndws").removeHandler(handler)
    save(out, "listeners", calls=calls.calls, scores=scores.scores,
         history_scores=history.scores, history_iterations=history.iterations,
         log=stream.getvalue(), bar=bar, same_listeners=net.get_listeners() == [calls, scores,
                                                                               perf],
         timeline=[list(e) for e in trainer.timeline()], buckets=trainer.buckets(),
         hook_after=str(net._after_layer_gradients), perf_line=perf.last_line or "")
    trainer.close()


# -- arguments the ranks disagree on ------------------------------------------------------------

def disagree(out):
    results = {}

    def attempt(name, action):
        try:
            action()
            results[name] = "no error"
        except Exception as exc:  # noqa: BLE001 - the pytest side checks type and text
            results[name] = f"{type(exc).__name__}: {exc}"

    net = common.network("sgd")
    params = net.params().numpy()
    attempt("frequency", lambda: MPITrainer(net, training_mode="AVERAGING",
                                            averaging_frequency=0 if rank == 1 else 1))
    attempt("configuration", lambda: MPITrainer(common.network("sgd", hidden=8 + rank)))
    attempt("options", lambda: MPITrainer(net, bucket_bytes=rank))
    trainer = MPITrainer(net)
    x, y = common.data(16)
    attempt("fit_epochs", lambda: trainer.fit(x, y, batch_size=4, epochs=0 if rank else 1))
    attempt("fit_batch_size", lambda: trainer.fit(x, y, batch_size=0 if rank else 4))
    attempt("fit_data", lambda: trainer.fit(42 if rank else [DataSet(x, y)]))
    attempt("fit_ok", lambda: trainer.fit(x, y, batch_size=4))
    save(out, "disagree", results=results, params_before=params,
         iteration=trainer.model.iteration)
    trainer.close()


# -- faults (each in its own job) ----------------------------------------------------------------

def failing_rank(out):
    x, y = common.data(64)

    def batches():
        for k in range(8):
            if rank == 1 and k == 3:
                raise RuntimeError(f"data trouble on rank {rank} at batch {k}")
            yield DataSet(x[8 * k:8 * k + 8], y[8 * k:8 * k + 8])

    net = common.network("sgd")
    trainer = MPITrainer(net)
    print(f"rank {rank} training", flush=True)
    trainer.fit(batches(), epochs=1)
    print(f"rank {rank} finished: not expected", flush=True)


def stuck_rank(out):
    x, y = common.data(64)

    def batches():
        for k in range(8):
            if rank == 1 and k == 2:
                time.sleep(600)                # stuck, not in any collective
            yield DataSet(x[8 * k:8 * k + 8], y[8 * k:8 * k + 8])

    net = common.network("sgd")
    trainer = MPITrainer(net, timeout=1.0)
    print(f"rank {rank} training", flush=True)
    trainer.fit(batches(), epochs=1)
    print(f"rank {rank} finished: not expected", flush=True)


# -- a ComputationGraph: a bucket per vertex during its backward pass --------------------------

def graph(out):
    # the two-branch graph with a bucket per vertex (traced) and in one bucket; a
    # MultiLayerNetwork and its to_computation_graph() with a bucket per layer
    for variant, options in common.GRAPH_VARIANTS.items():
        g = common.graph()
        trainer = MPITrainer(g, trace=True, **options)
        history = trainer.fit(common.graph_batches(common.GRAPH_N, rank, size), epochs=2)
        save(out, f"graph_{variant}", **state(g), scores=history.scores,
             buckets=trainer.buckets(), timeline=[list(e) for e in trainer.timeline()],
             backward_order=g._backward_order())
        trainer.close()
    x, y = common.data(common.GRAPH_N)
    options = common.GRAPH_VARIANTS["per_vertex"]
    for form in ("network", "graph"):
        net = common.network("adam", regularised=True)
        model = net if form == "network" else net.to_computation_graph()
        trainer = MPITrainer(model, **options)
        it = ArrayDataSetIterator(x, y, common.BATCH)
        trainer.fit(it.shard(rank, size), epochs=2)
        save(out, f"graph_form_{form}", **state(model), buckets=trainer.buckets())
        trainer.close()


MAIN = [broadcast, shared, uneven, batchnorm, cnn, averaging, checkpoints, listeners, disagree,
        graph]

if __name__ == "__main__":
    ndws.set_num_threads(1)
    scenario, out = sys.argv[1], sys.argv[2]
    for fn in MAIN if scenario == "main" else [globals()[scenario]]:
        fn(out)
        ndws.destroy_all_workspaces_for_current_thread()
    comm.Barrier()
    print(f"rank {rank}: done", flush=True)
