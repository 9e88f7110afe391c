"""A ComputationGraph in ndws.parallel: ParallelWrapper (both training modes) and MPITrainer on
one process train a graph to the same bits as the network it came from, through the same
compute and apply halves of a step; ParallelInference serves a two-input graph, merging
requests input by input, and refuses what does not fit its inputs."""
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import ndws
from ndws.data import DataSet, MultiDataSet
from ndws.nn import (LSTM, Adam, ComputationGraph, ComputationGraphConfiguration, DenseLayer,
                     InputType, LastTimeStepVertex, MultiLayerConfiguration, MultiLayerNetwork,
                     OutputLayer)
from ndws.nn.listeners import TrainingListener
from ndws.parallel import ParallelInference, ParallelWrapper

sys.path.insert(0, str(Path(__file__).resolve().parent / "mpi"))
import common  # noqa: E402  (the MPI scenarios' graph of two branches)


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return (rng.random((64, 6), dtype=np.float32),
            np.eye(3, dtype=np.float32)[rng.integers(0, 3, 64)])


def mln(seed=1):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=6, n_out=16, activation="tanh", dropout=0.9),
         OutputLayer(n_out=3, activation="softmax")], seed=seed, updater=Adam(1e-2)))
    net.init()
    return net


class Steps(TrainingListener):
    def __init__(self):
        self.calls = []

    def on_gradient_calculation(self, model):
        self.calls.append(("gradient", model.iteration))

    def iteration_done(self, model, iteration, epoch):
        self.calls.append(("done", iteration))


@pytest.mark.parametrize("mode", ["SHARED_GRADIENTS", "AVERAGING"])
def test_parallel_wrapper_trains_a_graph_as_the_network_it_came_from(mode, data):
    x, y = data
    net, g = mln(), mln().to_computation_graph()
    heard = Steps()
    g.set_listeners(heard)
    with ParallelWrapper(net, workers=2, training_mode=mode) as pw:
        pw.fit(x, y, batch_size=8, epochs=2, progress=False)
    with ParallelWrapper(g, workers=2, training_mode=mode) as pw:
        pw.fit([x], [y], batch_size=8, epochs=2, progress=False)
    np.testing.assert_array_equal(g.params().numpy(), net.params().numpy())
    assert (g.iteration, g.epoch) == (net.iteration, net.epoch)
    assert g.score() == net.score()
    assert heard.calls[0] == ("gradient", 0) and ("done", 0) in heard.calls
    assert heard.calls.index(("gradient", 0)) < heard.calls.index(("done", 0))
    # an iterator of MultiDataSets too
    with ParallelWrapper(g, workers=2, training_mode=mode) as pw:
        pw.fit([MultiDataSet([x[i:i + 8]], [y[i:i + 8]]) for i in range(0, 64, 8)],
               progress=False)
    with ParallelWrapper(net, workers=2, training_mode=mode) as pw:
        pw.fit([DataSet(x[i:i + 8], y[i:i + 8]) for i in range(0, 64, 8)], progress=False)
    np.testing.assert_array_equal(g.params().numpy(), net.params().numpy())


def test_mpi_trainer_on_one_process_trains_a_graph_exactly_as_fit(data):
    pytest.importorskip("mpi4py")
    from mpi4py import MPI
    from ndws.parallel import MPITrainer
    x, y = data
    for mode in ("SHARED_GRADIENTS", "AVERAGING"):
        oracle = mln().to_computation_graph()
        oracle.fit([x], [y], batch_size=8, epochs=2)
        g = mln().to_computation_graph()
        with MPITrainer(g, MPI.COMM_SELF, training_mode=mode) as trainer:
            trainer.fit([MultiDataSet([x[i:i + 8]], [y[i:i + 8]]) for i in range(0, 64, 8)],
                        epochs=2)
        np.testing.assert_array_equal(g.params().numpy(), oracle.params().numpy())
        assert (g.iteration, g.epoch) == (oracle.iteration, oracle.epoch) == (16, 2)


def two_input():
    conf = (ComputationGraphConfiguration.builder(seed=3, updater=Adam(1e-2))
            .add_inputs("seq", "side")
            .add_layer("lstm", LSTM(n_out=6, activation="tanh"), "seq")
            .add_vertex("last", LastTimeStepVertex("seq"), "lstm")
            .add_layer("dense", DenseLayer(n_out=4, activation="relu"), "side")
            .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "last", "dense")
            .add_layer("aux", OutputLayer(n_out=3, activation="softmax"), "dense")
            .set_outputs("out", "aux")
            .set_input_types(InputType.recurrent(3, 5), InputType.feed_forward(4))
            .build())
    g = ComputationGraph(conf)
    g.init()
    return g


@pytest.mark.parametrize("mode", ["BATCHED", "SEQUENTIAL", "INPLACE"])
def test_parallel_inference_serves_a_two_input_graph_input_by_input(mode):
    rng = np.random.default_rng(1)
    g = two_input()
    seq = rng.standard_normal((12, 3, 5)).astype(np.float32)
    side = rng.standard_normal((12, 4)).astype(np.float32)
    want = [o.numpy() for o in g.output(seq, side)]
    cuts = [(0, 1), (1, 4), (4, 5), (5, 12)]
    results = {}
    with ParallelInference(g, inference_mode=mode, workers=2) as pi:
        first = pi.submit(seq[:1], side[:1])
        futures = [pi.submit(seq[a:b], side[a:b]) for a, b in cuts[1:]]
        results[cuts[0]] = first.result(10)
        for (a, b), f in zip(cuts[1:], futures):
            results[(a, b)] = f.result(10)
        one = pi.output(seq[3], side[3])                 # one example, no batch axis
    for (a, b), outs in results.items():
        assert isinstance(outs, list) and len(outs) == 2
        for o, w in zip(outs, want):
            assert not o.is_attached()
            np.testing.assert_allclose(o.numpy(), w[a:b], rtol=1e-5, atol=1e-6)
    assert [o.shape for o in one] == [(2,), (3,)]
    np.testing.assert_allclose(one[0].numpy(), want[0][3], rtol=1e-5, atol=1e-6)


def test_parallel_inference_refuses_what_does_not_fit_the_graph():
    g = two_input()
    seq = np.zeros((2, 3, 5), np.float32)
    side = np.zeros((2, 4), np.float32)
    with ParallelInference(g) as pi:
        with pytest.raises(ValueError, match="the served network has 2 inputs, got 1 array"):
            pi.output(seq)
        with pytest.raises(ValueError, match="different numbers of examples: 2, 3"):
            pi.output(seq, np.zeros((3, 4), np.float32))
        with pytest.raises(ValueError, match=r"x\[1\]: expected one example \(n_features,\)"):
            pi.output(seq, np.zeros((2, 4, 1), np.float32))
        with pytest.raises(ValueError, match=r"x\[0\]: expected one example"):
            pi.output(side, side)                          # inputs in the wrong order
        with pytest.raises(TypeError, match=r"x\[1\]: expected an array of numbers"):
            pi.output(seq, np.array(["a", "b"]))
        with pytest.raises(ValueError, match="a MultiLayerNetwork cannot replace the served "
                                             "ComputationGraph"):
            pi.update_model(mln())
        with pytest.raises(ValueError, match="of other inputs or outputs"):
            pi.update_model(mln().to_computation_graph())
        out = pi.output(seq, side)                         # still serving
    assert [o.shape for o in out] == [(2, 2), (2, 3)]


@pytest.mark.parametrize("mode, fewest, most", [("BATCHED", 1, 2), ("SEQUENTIAL", 4, 4)])
def test_batched_requests_of_a_graph_share_forward_passes(mode, fewest, most, monkeypatch):
    # one worker, its first pass held until every request is queued: BATCHED merges the
    # waiting ones input by input into one pass (at most two passes in all), while SEQUENTIAL
    # runs each request alone
    rng = np.random.default_rng(2)
    g = two_input()
    seq = rng.standard_normal((4, 3, 5)).astype(np.float32)
    side = rng.standard_normal((4, 4)).astype(np.float32)
    want = [o.numpy() for o in g.output(seq, side)]
    passes = []
    real = ParallelInference._forward

    gate = threading.Event()

    def counted(self, net, xs):
        gate.wait(10)                    # the first pass waits until every request is queued
        passes.append(xs[0].shape[0])
        return real(self, net, xs)
    monkeypatch.setattr(ParallelInference, "_forward", counted)
    with ParallelInference(g, inference_mode=mode, workers=1) as pi:
        first = pi.submit(seq[:1], side[:1])
        rest = [pi.submit(seq[k:k + 1], side[k:k + 1]) for k in range(1, 4)]
        gate.set()
        outs = [first.result(10)] + [f.result(10) for f in rest]
    assert fewest <= len(passes) <= most and sum(passes) == 4
    for k, o in enumerate(outs):
        for got, w in zip(o, want):
            np.testing.assert_allclose(got.numpy(), w[k:k + 1], rtol=1e-5, atol=1e-6)


def test_parallel_wrapper_counts_a_graphs_epoch_in_rows_not_inputs(data, monkeypatch):
    # fed one features array per input, an epoch of 64 rows at batch 8 is 8 batches, 4 rounds
    # of 2 workers (it was counted from the number of inputs: 1 batch)
    from ndws.nn import history
    totals = []
    init = history._Epoch.__init__

    def spy(self, model, listeners, hist, total, *args, **kwargs):
        totals.append(total)
        init(self, model, listeners, hist, total, *args, **kwargs)

    monkeypatch.setattr(history._Epoch, "__init__", spy)
    x, y = data
    net, g = mln(), mln().to_computation_graph()
    with ParallelWrapper(net, workers=2) as pw:
        pw.fit(x, y, batch_size=8, progress=False)
    with ParallelWrapper(g, workers=2) as pw:
        pw.fit([x], [y], batch_size=8, progress=False)
    g.fit([x], [y], batch_size=8, progress=False)
    assert totals == [4, 4, 8]


def branches():
    # tests/mpi/common.py's graph of two branches (l2: off any compiled iteration)
    return common.graph()


def branch_batches():
    return common.graph_batches(32, 0, 1)


def test_the_graphs_backward_hook_sees_each_vertexs_final_gradients_in_order():
    # called once per layer and vertex, in reverse topological order, each right after its
    # gradients are final (the vertices it reads not yet reached)
    g = branches()
    batch = branch_batches()[0]
    g.compute_gradient_and_score(batch)
    final = g.gradient().numpy().copy()
    owners = g._owners()
    seen = []

    def hook(i):
        for name, grad in owners[i].grads.items():
            start = next(s for o, n, _, s, _ in g._layout if o is owners[i] and n == name)
            want = final[start:start + grad.size].reshape(grad.shape)
            seen.append((i, name, np.array_equal(grad.numpy(), want)))
        seen.append((i, None, True))
    for owner in owners:
        for grad in owner.grads.values():
            grad.fill(np.nan)
    g._after_layer_gradients = hook
    g.compute_gradient_and_score(batch)
    g._after_layer_gradients = None
    assert [i for i, n, _ in seen if n is None] == g._backward_order() == \
        list(range(len(owners) - 1, -1, -1))
    names = [g._owner_name(owners[i]) for i, n, _ in seen if n is None]
    assert names.index("out") < names.index("h") < names.index("sum") < names.index("da")
    assert names.index("sum") < names.index("db")
    assert all(ok for _, _, ok in seen)
    assert sum(n is not None for _, n, _ in seen) == 8          # W and b of four layers


def _mpi():
    pytest.importorskip("mpi4py")
    from mpi4py import MPI
    from ndws.parallel import MPITrainer
    return MPI.COMM_SELF, MPITrainer


def _traced_mpi_fit(make):
    # a graph trained by MPITrainer on one process with a bucket per layer and its trace, and
    # the same graph trained by fit: the same bits; the bucket owners' names and the events
    comm, MPITrainer = _mpi()
    g, oracle = make(), make()
    oracle.fit(branch_batches(), epochs=2, progress=False)
    with MPITrainer(g, comm, trace=True, bucket_bytes=0, shared_memory=False) as trainer:
        trainer.fit(branch_batches(), epochs=2)
        buckets = trainer.buckets()
        events = [(kind, i) for _, kind, i in trainer.timeline()]
    np.testing.assert_array_equal(g.params().numpy(), oracle.params().numpy())
    return g, buckets, [g._owner_name(g._owners()[i]) for i, _, _ in buckets], events


def test_mpi_trainer_starts_a_graphs_buckets_during_backprop():
    g, buckets, names, events = _traced_mpi_fit(branches)
    # a bucket per layer (out, h, db, da: sum and out-merge have no parameters), each one
    # contiguous, together the whole buffer
    assert names == ["out", "h", "db", "da"]
    assert buckets[0][2] == g.num_params() and buckets[-1][1] == 0
    assert all(b[1] == a[2] for a, b in zip(buckets[1:], buckets))
    # (on one process each allreduce is done at once: the tests between vertices find it)
    events = [e for e in events if e[0] in ("backprop done", "allreduce started")]
    starts = [j for j, e in enumerate(events) if e[0] == "allreduce started"]
    done = [j for j, e in enumerate(events) if e[0] == "backprop done"]
    assert len(starts) == 4 and len(done) == len(g._owners())
    assert sum(j < done[-1] for j in starts) == 3          # three start before backprop ends
    for k, (i, _, _) in enumerate(buckets):
        # bucket k starts right after its vertex's backprop
        assert events[starts[k] - 1] == ("backprop done", i)
        assert events[starts[k]] == ("allreduce started", k)


def test_buckets_follow_the_backward_order_when_the_layout_does_not():
    # a backward order that is not the layout's reversed (da finished before db, whose
    # parameters come after da's): the buckets, filled in that order, stay contiguous slices
    # (one closes where the next vertex's parameters do not continue it), each triggered by
    # the last of its vertices that order reaches
    comm, MPITrainer = _mpi()
    oracle = branches()
    oracle.fit(branch_batches(), epochs=1, progress=False)
    g = branches()
    order = g._backward_order()
    swapped = order[:-2] + order[:-3:-1]
    assert swapped[-2:] == [0, 1]
    g._backward_order = lambda: swapped
    with MPITrainer(g, comm, bucket_bytes=1 << 30, shared_memory=False) as trainer:
        trainer.fit(branch_batches(), epochs=1)
        buckets = trainer.buckets()
    np.testing.assert_array_equal(g.params().numpy(), oracle.params().numpy())
    span = {}
    for k, owner in enumerate(g._owners()):
        starts = [(s, s + n) for o, _, _, s, n in g._layout if o is owner]
        if starts:
            span[k] = (starts[0][0], starts[-1][1])
    names = [g._owner_name(g._owners()[i]) for i, _, _ in buckets]
    assert names == ["h", "da", "db"]
    assert buckets == [(3, span[3][0], g.num_params()), (0, 0, span[0][1]),
                       (1, span[1][0], span[1][1])]


def test_a_graph_in_one_bucket_and_in_many_trains_to_the_same_bits():
    comm, MPITrainer = _mpi()
    results = []
    for size in (0, 1 << 30, 300):      # 300 B: out and h, then db and da
        g = branches()
        with MPITrainer(g, comm, bucket_bytes=size, shared_memory=False) as trainer:
            trainer.fit(branch_batches(), epochs=2)
            results.append((len(trainer.buckets()), g.params().numpy().copy()))
    assert [n for n, _ in results] == [4, 1, 2]
    for _, p in results[1:]:
        np.testing.assert_array_equal(p, results[0][1])


def test_a_graph_with_a_frozen_branch_starts_every_bucket_as_fit_trains():
    # a frozen layer's vertex runs no backward pass, yet the hook is called for it (its
    # gradients are final as they are): its bucket starts, and the graph trains as fit does
    from ndws.nn import ElementWiseVertex, FrozenLayer

    def frozen():
        conf = (ComputationGraphConfiguration.builder(seed=5, updater=Adam(1e-2), l2=1e-3)
                .add_inputs("a", "b")
                .add_layer("fa", FrozenLayer(DenseLayer(n_out=8, activation="tanh")), "a")
                .add_layer("db", DenseLayer(n_out=8, activation="relu"), "b")
                .add_vertex("sum", ElementWiseVertex("ADD"), "fa", "db")
                .add_layer("out", OutputLayer(n_out=3, activation="softmax"), "sum")
                .set_outputs("out")
                .set_input_types(InputType.feed_forward(6), InputType.feed_forward(5))
                .build())
        g = ComputationGraph(conf)
        g.init()
        return g
    g, buckets, names, events = _traced_mpi_fit(frozen)
    assert names == ["out", "db", "fa"]
    done = [i for kind, i in events if kind == "backprop done"]
    assert done == g._backward_order() and len(done) == len(g._owners())
    assert [i for kind, i in events if kind == "allreduce started"] == [0, 1, 2]
