"""Hostile configurations and data for recurrent networks and embeddings: truncated BPTT with a
layer that needs the whole sequence behind a wrapper, bad data in a later segment of a
truncated-BPTT batch (refused before the first segment, nothing changed), embedding indices a
float cast would round, and a batch of one (1, time) index matrix."""
import re

import numpy as np
import pytest

import ndws
from ndws.data import DataSet, MultiDataSet
from ndws.nn import (LSTM, Adam, Bidirectional, ComputationGraph,
                     ComputationGraphConfiguration, EmbeddingLayer, EmbeddingSequenceLayer,
                     FrozenLayer, FrozenLayerWithBackprop, GlobalPoolingLayer, InputType,
                     LastTimeStep, MaskZeroLayer, MultiLayerConfiguration, MultiLayerNetwork,
                     OutputLayer, RnnOutputLayer, SimpleRnn)
from ndws.nn.listeners import TrainingListener

R = InputType.recurrent
TBPTT = {"backprop_type": "TRUNCATED_BPTT", "tbptt_fwd_length": 5, "tbptt_back_length": 5}


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


# -- truncated BPTT refuses a whole-sequence layer behind any wrapper ------------------------------

WRAPPED = [
    (lambda: FrozenLayer(LastTimeStep(LSTM(n_out=4))), "FrozenLayer(LastTimeStep)", True),
    (lambda: FrozenLayer(Bidirectional(LSTM(n_out=4))), "FrozenLayer(Bidirectional)", False),
    (lambda: MaskZeroLayer(LastTimeStep(LSTM(n_out=4))), "MaskZeroLayer(LastTimeStep)", True),
    (lambda: MaskZeroLayer(Bidirectional(LSTM(n_out=4))), "MaskZeroLayer(Bidirectional)",
     False),
    (lambda: FrozenLayerWithBackprop(LastTimeStep(LSTM(n_out=4))),
     "FrozenLayerWithBackprop(LastTimeStep)", True),
    (lambda: FrozenLayer(MaskZeroLayer(Bidirectional(LSTM(n_out=4)))),
     "FrozenLayer(MaskZeroLayer(Bidirectional))", False),
    (lambda: FrozenLayer(GlobalPoolingLayer()), "FrozenLayer(GlobalPoolingLayer)", True),
]


def _head(rows: bool):
    # the output layer after a layer whose output is rows (one per example) or time series
    return (OutputLayer(n_out=2, activation="softmax") if rows
            else RnnOutputLayer(n_out=2, activation="softmax"))


@pytest.mark.parametrize("make,name,rows", WRAPPED, ids=[w[1] for w in WRAPPED])
def test_tbptt_refuses_whole_sequence_layers_behind_wrappers(make, name, rows):
    layers = lambda: [make(), _head(rows)]
    MultiLayerConfiguration(layers(), input_type=R(3))                  # fine without TBPTT
    with pytest.raises(ValueError, match=rf"Invalid network configuration detected: Truncated "
                                         rf"backpropagation through time \(TBPTT\) cannot be "
                                         rf"used with layer 0 of type {re.escape(name)}: "
                                         rf"TBPTT is incompatible"):
        MultiLayerConfiguration(layers(), input_type=R(3), **TBPTT)
    graph = lambda: (ComputationGraphConfiguration.builder()
                     .add_inputs("seq").add_layer("w", make(), "seq")
                     .add_layer("out", _head(rows), "w").set_outputs("out")
                     .set_input_types(R(3)))
    graph().build()
    with pytest.raises(ValueError, match=rf'cannot be used with layer "w" of type '
                                         rf'{re.escape(name)}:'):
        graph().backprop_type("TRUNCATED_BPTT").build()
    # wrappers of a layer that works step by step stay welcome
    conf = MultiLayerConfiguration(
        [FrozenLayerWithBackprop(MaskZeroLayer(LSTM(n_out=4))), SimpleRnn(n_out=3),
         RnnOutputLayer(n_out=2, activation="softmax")], input_type=R(3), **TBPTT)
    assert conf.tbptt_fwd_length == 5


# -- truncated BPTT checks the whole batch before its first segment --------------------------------

class _Record(TrainingListener):
    # every per-iteration call a listener gets
    def __init__(self):
        self.calls = []

    def iteration_done(self, model, iteration, epoch):
        self.calls.append(("iteration_done", iteration, epoch))

    def on_forward_pass(self, model, activations):
        self.calls.append(("on_forward_pass",))

    def on_gradient_calculation(self, model):
        self.calls.append(("on_gradient_calculation",))

    def on_backward_pass(self, model):
        self.calls.append(("on_backward_pass",))


def _state_of(model, layers):
    # what a failed fit must leave as it found it
    return (model.params().numpy().copy(), model._updater_state_flat().copy(), model.iteration,
            model.epoch, {k: {s: v.numpy().copy() for s, v in
                              model.rnn_get_previous_state(k).items()} for k in layers})


def _assert_same(before, after):
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[1], before[1])
    assert after[2:4] == before[2:4]
    assert after[4].keys() == before[4].keys()
    for k in before[4]:
        assert after[4][k].keys() == before[4][k].keys()
        for s in before[4][k]:
            np.testing.assert_array_equal(after[4][k][s], before[4][k][s])


def _lstm_net():
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [LSTM(n_out=4, activation="tanh"), RnnOutputLayer(n_out=2, activation="softmax")],
        input_type=R(3), seed=1, updater=Adam(1e-2), **TBPTT))
    net.init()
    return net


def _series(rng, n=2, steps=15):
    x = rng.standard_normal((n, 3, steps)).astype(np.float32)
    y = np.zeros((n, 2, steps), np.float32)
    y[:, 0] = 1
    return x, y


def _trained_with_state(net, x, y):
    # a network with updater state, an iteration count and an rnn_time_step state to keep
    net.fit(DataSet(x, y))
    net.rnn_time_step(x[:, :, :3])
    record = _Record()
    net.set_listeners(record)
    return record


@pytest.mark.parametrize("which", ["labels_mask", "features_mask"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -1.0])
def test_tbptt_refuses_a_bad_mask_in_a_later_segment_before_the_first(which, bad, rng):
    net = _lstm_net()
    x, y = _series(rng)
    record = _trained_with_state(net, x, y)
    m = np.ones((2, 15), np.float32)
    m[1, 12] = bad                                           # the third segment's step 2
    before = _state_of(net, [0])
    ds = DataSet(x, y, m, None) if which == "features_mask" else DataSet(x, y, None, m)
    with pytest.raises(ValueError, match=rf"{which}: holds {bad} at \(1, 12\): a mask must be "
                                         rf"finite and not negative"):
        net.fit(ds)
    _assert_same(before, _state_of(net, [0]))
    assert record.calls == []


def test_tbptt_refuses_a_labels_mask_of_another_length(rng):
    # one a step longer would have been cut into segments of the features' 15 steps, its last
    # column never read; one shorter found only at the last segment
    net = _lstm_net()
    x, y = _series(rng)
    record = _trained_with_state(net, x, y)
    before = _state_of(net, [0])
    for steps in (16, 14):
        ds = DataSet(x, y)
        ds.labels_mask = ndws.from_numpy(np.ones((2, steps), np.float32))
        with pytest.raises(ValueError, match=rf"labels_mask: expected \(n_samples, time\) = "
                                             rf"\(2, 15\) per step, \(2,\) or \(2, 1\) per "
                                             rf"example, or the labels' shape \(2, 2, 15\) per "
                                             rf"output; got \(2, {steps}\)"):
            net.fit(ds)
    _assert_same(before, _state_of(net, [0]))
    assert record.calls == []


def _embedding_net(**kw):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [EmbeddingSequenceLayer(n_in=6, n_out=4, activation="identity"),
         LSTM(n_out=4, activation="tanh"), RnnOutputLayer(n_out=2, activation="softmax")],
        input_type=R(1), seed=1, updater=Adam(1e-2), **kw))
    net.init()
    return net


@pytest.mark.parametrize("bad,what", [(6, "got index 6"), (-1, "got index -1"),
                                      (1.5, "got 1.5")])
def test_tbptt_refuses_a_bad_index_in_a_later_segment_before_the_first(bad, what, rng):
    net = _embedding_net(**TBPTT)
    idx = rng.integers(0, 6, (2, 1, 15)).astype(np.float32)
    _, y = _series(rng)
    record = _trained_with_state(net, idx, y)
    idx[1, 0, 13] = bad
    before = _state_of(net, [1])
    with pytest.raises(ValueError, match=rf"features: EmbeddingSequenceLayer \(layer index = "
                                         rf"0\): Invalid index for embedding layer: {what} for "
                                         rf"example 1 at step 13;"):
        net.fit(DataSet(idx, y))
    _assert_same(before, _state_of(net, [1]))
    assert record.calls == []


def test_tbptt_with_a_per_output_labels_mask_of_nwc_labels(rng):
    # a per-output mask is cut along the labels' time axis: (n, time, size) for NWC, as the
    # same network in NCW cuts (n, size, time), and the two train to the same bits
    x, y = _series(rng, steps=12)
    m = (rng.random(y.shape) > 0.3).astype(np.float32)
    nets = {}
    for fmt in ("NCW", "NWC"):
        net = MultiLayerNetwork(MultiLayerConfiguration(
            [LSTM(n_out=4, activation="tanh", data_format=fmt),
             RnnOutputLayer(n_out=2, activation="softmax", data_format=fmt)],
            input_type=R(3, data_format=fmt), seed=1, updater=Adam(1e-2), **TBPTT))
        net.init()
        t = (lambda a: a) if fmt == "NCW" else (lambda a: np.ascontiguousarray(
            a.transpose(0, 2, 1)))
        net.fit(DataSet(t(x), t(y), None, t(m)))
        assert net.iteration == 3
        nets[fmt] = net.params().numpy()
    np.testing.assert_array_equal(nets["NWC"], nets["NCW"])


def _graph(**tbptt):
    builder = ComputationGraphConfiguration.builder(seed=1, updater=Adam(1e-2))
    if tbptt:
        builder = (builder.backprop_type("TRUNCATED_BPTT").tbptt_fwd_length(5)
                   .tbptt_back_length(5))
    g = ComputationGraph(builder.add_inputs("ids")
                         .add_layer("emb", EmbeddingSequenceLayer(n_in=6, n_out=4), "ids")
                         .add_layer("lstm", LSTM(n_out=4, activation="tanh"), "emb")
                         .add_layer("out", RnnOutputLayer(n_out=2, activation="softmax"),
                                    "lstm")
                         .set_outputs("out").set_input_types(R(1)).build())
    g.init()
    return g


def test_graph_tbptt_checks_the_whole_batch_before_its_first_segment(rng):
    g = _graph(tbptt=True)
    idx = rng.integers(0, 6, (2, 1, 15)).astype(np.float32)
    _, y = _series(rng)
    record = _trained_with_state(g, idx, y)
    before = _state_of(g, ["lstm"])
    bad = idx.copy()
    bad[0, 0, 11] = 7
    with pytest.raises(ValueError, match=r"features\[0\] \(input \"ids\"\): "
                                         r"EmbeddingSequenceLayer \(layer index = 0\): Invalid "
                                         r"index for embedding layer: got index 7 for example 0 "
                                         r"at step 11;"):
        g.fit(MultiDataSet([bad], [y]))
    m = np.ones((2, 15), np.float32)
    m[1, 10] = np.nan
    with pytest.raises(ValueError, match=r"labels_masks\[0\]: holds nan at \(1, 10\)"):
        g.fit(MultiDataSet([idx], [y], None, [m]))
    with pytest.raises(ValueError, match=r"features_masks\[0\]: holds nan at \(1, 10\)"):
        g.fit(MultiDataSet([idx], [y], [m], None))
    with pytest.raises(ValueError, match=r"labels_masks\[0\]: expected \(n_samples, time\) = "
                                         r"\(2, 15\) per step"):
        ds = MultiDataSet([idx], [y])
        ds.labels_masks = [ndws.from_numpy(np.ones((2, 16), np.float32))]
        g.fit(ds)
    _assert_same(before, _state_of(g, ["lstm"]))
    assert record.calls == []


# -- embedding indices are never rounded by a cast ------------------------------------------------

@pytest.mark.parametrize("make,name", [
    (lambda n: EmbeddingSequenceLayer(n_in=n, n_out=1), "EmbeddingSequenceLayer"),
    (lambda n: EmbeddingLayer(n_in=n, n_out=1), "EmbeddingLayer"),
    (lambda n: FrozenLayer(EmbeddingSequenceLayer(n_in=n, n_out=1)),
     r"FrozenLayer\(EmbeddingSequenceLayer\)")])
def test_a_vocabulary_the_dtype_cannot_index_exactly_is_refused(make, name):
    # the network reads indices in its dtype (DL4J's features are floats): above 2**24 a
    # float32 rounds whole numbers, and an index would read its neighbour's row; a float64
    # holds every n_in a layer takes (at most 2**31)
    t = R(1) if "Sequence" in name else InputType.feed_forward(1)
    head = lambda: (RnnOutputLayer if "Sequence" in name else OutputLayer)(
        n_out=1, activation="identity", loss_function="mse")
    limit = 2 ** 24
    MultiLayerConfiguration([make(limit), head()], input_type=t)
    MultiLayerConfiguration([make(1 << 31), head()], input_type=t, dtype="float64")
    msg = (rf"n_in {limit + 1} is more indices than the network's dtype float32 holds exactly: "
           rf"the network reads indices as float32, whose whole numbers are exact only up to "
           rf"2\*\*24 = {limit} .* use dtype=\"float64\" or a vocabulary of at most {limit}")
    with pytest.raises(ValueError, match=rf"layers\[0\] \({name}\): {msg}"):
        MultiLayerConfiguration([make(limit + 1), head()], input_type=t)
    with pytest.raises(ValueError, match=rf'vertices\["emb"\] \({name}\): {msg}'):
        (ComputationGraphConfiguration.builder().add_inputs("ids")
         .add_layer("emb", make(limit + 1), "ids").add_layer("out", head(), "emb")
         .set_outputs("out").set_input_types(t).build())


BIG = 2 ** 24 + 1                     # float32 rounds it to 2**24


@pytest.mark.parametrize("bad,what", [
    (np.int64(BIG), f"got index {BIG}"),
    (np.uint64(2 ** 64 - 1), "got index 18446744073709551615"),
    (np.float64(3.0000001), "got 3.0000001"),            # float32 would make it index 3
    (np.float64(1e-50), "got 1e-50")])                    # ... and this index 0
def test_an_index_is_checked_as_the_caller_gave_it(bad, what):
    seq = _embedding_net()
    idx = np.zeros((2, 4), type(bad))
    idx[1, 2] = bad
    where = "for example 1 at step 2; indexes must be"
    with pytest.raises(ValueError, match=rf"x: EmbeddingSequenceLayer \(layer index = 0\): "
                                         rf"Invalid index for embedding layer: {what} {where}"):
        seq.output(idx)
    with pytest.raises(ValueError, match=rf"features: .*{what} {where}"):
        seq.fit(DataSet(idx, np.zeros((2, 2, 4), np.float32)))
    with pytest.raises(ValueError, match=rf"x: .*{what} for example 0 at step 2;"):
        seq.output(idx[1])                                 # one example without its batch axis
    rows = MultiLayerNetwork(MultiLayerConfiguration(
        [EmbeddingLayer(n_in=6, n_out=2), OutputLayer(n_out=2, activation="softmax")], seed=1))
    rows.init()
    with pytest.raises(ValueError, match=rf"x: EmbeddingLayer \(layer index = 0\): Invalid index "
                                         rf"for embedding layer: {what} for entry 5 in "
                                         rf"minibatch;"):
        rows.output(np.concatenate([np.zeros(5, type(bad)), [bad]])[:, None])
    # one index per step of a time series: named by example and step, not by row
    per_step = MultiLayerNetwork(MultiLayerConfiguration(
        [EmbeddingLayer(n_in=6, n_out=2), RnnOutputLayer(n_out=2, activation="softmax")],
        input_type=R(1), seed=1))
    per_step.init()
    with pytest.raises(ValueError, match=rf"x: EmbeddingLayer .*{what} {where}"):
        per_step.output(idx[:, None, :])
    g = _graph()
    with pytest.raises(ValueError, match=rf"inputs\[0\] \(input \"ids\"\): .*{what} {where}"):
        g.output(idx)


# -- a batch of one (1, time) index matrix keeps its batch axis ------------------------------------

def test_a_batch_of_one_index_sequence_keeps_its_batch_axis(rng):
    net = _embedding_net()
    idx = rng.integers(0, 6, (3, 5))
    whole = net.output(idx).numpy()
    one = net.output(idx[:1])
    assert one.shape == (1, 2, 5)
    np.testing.assert_allclose(one.numpy(), whole[:1], rtol=1e-6)
    assert net.predict(idx[:1]).shape == (1, 5)
    np.testing.assert_array_equal(net.predict(idx[:1]).numpy(), whole[:1].argmax(1))
    ff = net.feed_forward(idx[:1])
    assert [a.shape for a in ff] == [(1, 5), (1, 4, 5), (1, 4, 5), (1, 2, 5)]
    w = net.get_layer(0).params["W"].numpy()
    np.testing.assert_array_equal(ff[1].numpy(), w[idx[:1]].transpose(0, 2, 1))
    # (time,) is one example without its batch axis, answered without it
    row = net.output(idx[0])
    assert row.shape == (2, 5)
    np.testing.assert_allclose(row.numpy(), whole[0], rtol=1e-6)
    assert net.predict(idx[0]).shape == (5,)
    assert [a.shape for a in net.feed_forward(idx[0])] == [(5,), (4, 5), (4, 5), (2, 5)]
    y = np.zeros((1, 2, 5), np.float32)
    y[:, 1] = 1
    p = whole[:1, 1]
    assert net.score(DataSet(idx[:1], y)) == pytest.approx(-np.log(p).sum(), rel=1e-5)


def test_tbptt_refuses_labels_of_another_shape_before_the_first_segment(rng):
    # named in the batch's shape, not in the first segment's (2, 3, 5)
    net = _lstm_net()
    x, y = _series(rng)
    record = _trained_with_state(net, x, y)
    before = _state_of(net, [0])
    wide = np.zeros((2, 3, 15), np.float32)
    wide[:, 0] = 1
    with pytest.raises(ValueError, match=r"labels: expected shape \(2, 2, 15\) for the output of "
                                         r"layers\[1\] \(RnnOutputLayer\), got \(2, 3, 15\)"):
        net.fit(DataSet(x, wide))
    _assert_same(before, _state_of(net, [0]))
    assert record.calls == []
    g = _graph(tbptt=True)
    idx = rng.integers(0, 6, (2, 1, 15)).astype(np.float32)
    with pytest.raises(ValueError, match=r"labels\[0\]: expected shape \(2, 2, 15\) for the "
                                         r"output of output \"out\" \(RnnOutputLayer\), got "
                                         r"\(2, 3, 15\)"):
        g.fit(MultiDataSet([idx], [wide]))
    assert g.iteration == 0


class _Failing(TrainingListener):
    def iteration_done(self, model, iteration, epoch):
        raise RuntimeError("listener failed")


def test_a_batch_that_fails_mid_way_leaves_the_rnn_time_step_state(rng):
    # a batch that trains clears the state rnn_time_step kept (as DL4J's does); one that fails
    # after its first segment (here a listener) leaves it as it was
    net = _lstm_net()
    x, y = _series(rng)
    _trained_with_state(net, x, y)
    kept = {k: v.numpy().copy() for k, v in net.rnn_get_previous_state(0).items()}
    net.set_listeners(_Failing())
    with pytest.raises(RuntimeError, match="listener failed"):
        net.fit(DataSet(x, y))
    state = net.rnn_get_previous_state(0)
    assert state.keys() == kept.keys() == {"prevAct", "prevMem"}
    for k in kept:
        np.testing.assert_array_equal(state[k].numpy(), kept[k])
    net.set_listeners()
    net.fit(DataSet(x, y))
    assert net.rnn_get_previous_state(0) == {}


# -- the siblings: ParallelInference, a frozen embedding, (n, time) indices under TBPTT, vertices

@pytest.mark.parametrize("frozen", [False, True])
def test_parallel_inference_reads_index_sequences_as_the_network_does(frozen, rng):
    from ndws.parallel import ParallelInference
    emb = EmbeddingSequenceLayer(n_in=6, n_out=4, activation="identity")
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [FrozenLayer(emb) if frozen else emb, LSTM(n_out=4, activation="tanh"),
         RnnOutputLayer(n_out=2, activation="softmax")], input_type=R(1), seed=1))
    net.init()
    idx = rng.integers(0, 6, (3, 5))
    pi = ParallelInference(net)
    try:
        for x in (idx, idx[:1], idx[0]):           # a batch, a batch of one, one sequence
            got = pi.output(x)
            assert got.shape == net.output(x).shape == (x.shape[:-1] + (2, 5))
            np.testing.assert_array_equal(got.numpy(), net.output(x).numpy())
        with pytest.raises(ValueError, match=r"^x: EmbeddingSequenceLayer \(layer index = 0\): "
                                             r"Invalid index for embedding layer: got index "
                                             r"16777217 for example 1 at step 2;"):
            pi.output(np.array([[0, 1, 2, 3, 4], [0, 1, 2 ** 24 + 1, 3, 4]]))
    finally:
        pi.shutdown()


def test_tbptt_takes_index_sequences_without_their_size_axis(rng):
    # (n, time) indices are the (n, 1, time) series: the same segments, the same bits, on both
    # network types
    idx = rng.integers(0, 6, (2, 15))
    _, y = _series(rng)
    flat, axis = _embedding_net(**TBPTT), _embedding_net(**TBPTT)
    flat.fit(DataSet(idx, y))
    axis.fit(DataSet(idx[:, None, :], y))
    assert flat.iteration == 3
    np.testing.assert_array_equal(flat.params().numpy(), axis.params().numpy())
    g = _embedding_net(**TBPTT).to_computation_graph()
    g.fit(DataSet(idx, y))
    np.testing.assert_array_equal(g.params().numpy(), flat.params().numpy())


@pytest.mark.parametrize("vertex", ["LastTimeStepVertex", "ReverseTimeSeriesVertex"])
def test_graph_tbptt_refuses_vertices_that_need_the_whole_sequence(vertex):
    import ndws.nn as nn
    head = (OutputLayer if vertex == "LastTimeStepVertex" else RnnOutputLayer)(
        n_out=2, activation="softmax")
    b = (ComputationGraphConfiguration.builder(seed=1).add_inputs("seq")
         .add_layer("lstm", LSTM(n_out=4), "seq")
         .add_vertex("v", getattr(nn, vertex)("seq"), "lstm")
         .add_layer("out", head, "v").set_outputs("out")
         .set_input_types(R(3)))
    b.build()                                      # fine without TBPTT
    b.backprop_type("TRUNCATED_BPTT").tbptt_fwd_length(5).tbptt_back_length(5)
    with pytest.raises(ValueError, match=rf'cannot be used with vertex "v" of type {vertex}: '
                                         rf'TBPTT is incompatible with this vertex type'):
        b.build()


def test_one_index_sequence_to_a_graph_is_told_its_batch_axis(rng):
    g = _embedding_net().to_computation_graph()
    with pytest.raises(ValueError, match=r'^inputs\[0\] \(input "in"\): expected a 3-d array '
                                         r'\(n_samples, size=1, time\) or \(n_samples, time\) '
                                         r'indices for vertices\["0"\] '
                                         r'\(EmbeddingSequenceLayer\), .* got shape \(5,\): one '
                                         r'sequence of indices without its batch dimension\? '
                                         r'\(x\[None\] adds it\)$'):
        g.output(rng.integers(0, 6, 5))


# -- a view of a huge shape (a zero stride over a small buffer) ----------------------------------

@pytest.mark.parametrize("call, name", [
    (lambda net, x, y: net.output(x), "x"),
    (lambda net, x, y: net.rnn_time_step(x), "x"),
    (lambda net, x, y: net.fit(x, y), "x"),
    (lambda net, x, y: net.fit(DataSet(x, y)), "features"),
    (lambda net, x, y: DataSet(np.ones((2, 3, 5), np.float32), y), "labels"),
])
def test_a_huge_zero_stride_view_is_refused_naming_the_argument(call, name):
    # 2 x 3 x 10**14 steps over 30 floats (2.4 PB, beyond any address space, so no overcommit
    # lets the allocation succeed): copying it for the kernels fails, the error names the
    # argument that asked for it, and the network and its state are left as they were
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [LSTM(n_out=4), RnnOutputLayer(n_out=2, activation="softmax")], input_type=R(3),
        seed=0))
    net.init()
    before = net.params().numpy().copy()
    base = np.ones((2, 3, 5), np.float32)
    x = np.lib.stride_tricks.as_strided(base, (2, 3, 10**14), (60, 20, 0))
    y = np.lib.stride_tricks.as_strided(base, (2, 2, 10**14), (60, 20, 0))
    with pytest.raises(MemoryError, match=rf"^{name}: .*(allocate|Allocate)"):
        call(net, x, y)
    np.testing.assert_array_equal(net.params().numpy(), before)
    assert net.rnn_get_previous_state(0) == {}
