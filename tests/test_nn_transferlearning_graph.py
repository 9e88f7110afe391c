"""TransferLearning.GraphBuilder: frozen vertices (a name and its ancestors) unchanged bit for
bit with no updater state and no backward pass, n_out_replace's shapes, vertex surgery, save and
load, and the errors with clear messages. TransferLearningHelper on a graph: the boundary in
DL4J's order, the featurized fit bit for bit the fit of the frozen graph on the raw data, on
views of its parameters, and its errors."""
from __future__ import annotations

import numpy as np
import pytest

from ndws.data.dataset import DataSet, MultiDataSet
from ndws.nn import (Adam, ComputationGraph, ComputationGraphConfiguration, DenseLayer,
                     InputType, OutputLayer)
from ndws.nn.layers.wrappers import FrozenLayer
from ndws.nn.transferlearning import (FineTuneConfiguration, TransferLearning,
                                      TransferLearningHelper)


def _graph():
    conf = (ComputationGraphConfiguration.builder(seed=2, updater=Adam(1e-2), l2=1e-3)
            .add_inputs("a", "b")
            .add_layer("da", DenseLayer(n_out=6, activation="tanh"), "a")
            .add_layer("db", DenseLayer(n_out=5, activation="tanh"), "b")
            .add_layer("top", DenseLayer(n_out=7, activation="relu"), "da", "db")
            .add_layer("out", OutputLayer(n_out=3, activation="softmax"), "top")
            .set_outputs("out")
            .set_input_types(InputType.feed_forward(4), InputType.feed_forward(2)).build())
    g = ComputationGraph(conf)
    g.init()
    return g


def _mds(rng, n=32, classes=3):
    return MultiDataSet([rng.standard_normal((n, 4)).astype(np.float32),
                         rng.standard_normal((n, 2)).astype(np.float32)],
                        [np.eye(classes, dtype=np.float32)[rng.integers(0, classes, n)]])


def _params(g):
    return {n.name: {k: v.numpy().copy() for k, v in n.obj.params.items()}
            for n in g._nodes if n.obj is not None}


def test_feature_extractor_freezes_ancestors(rng):
    g = _graph()
    new = (TransferLearning.GraphBuilder(g)
           .fine_tune_configuration(FineTuneConfiguration(updater=Adam(5e-2)))
           .set_feature_extractor("da").build())
    kinds = {n.name: type(n.obj).__name__ for n in new._nodes if n.obj is not None}
    assert kinds["da"] == "FrozenLayer" and kinds["db"] == "DenseLayer"
    before = _params(new)
    assert all(
        np.array_equal(before[v][k], _params(g)[v][k]) for v in before for k in before[v])
    new.fit(_mds(rng), epochs=5, progress=False)
    after = _params(new)
    for k in before["da"]:
        np.testing.assert_array_equal(after["da"][k], before["da"][k])     # bit for bit
    assert not np.array_equal(after["db"]["W"], before["db"]["W"])
    # the original is untouched, and the frozen layer has no updater state
    for k, v in _params(g)["da"].items():
        np.testing.assert_array_equal(v, before["da"][k])
    state = sum(e - s for _, s, e, _ in new._segments)
    assert state == new.num_params() - sum(v.size for v in before["da"].values())
    # the backward pass skips the frozen vertex (nothing below it trains)
    node = new._nodes[new._position["da"]]
    assert not node.backprop and not node.wants_grad


def test_frozen_chain_skips_the_backward_pass(rng, tmp_path):
    g = _graph()
    new = TransferLearning.GraphBuilder(g).set_feature_extractor("top").build()
    frozen = {n.name for n in new._nodes if isinstance(n.obj, FrozenLayer)}
    assert frozen == {"da", "db", "top"}
    assert [n.name for n in new._nodes if n.obj is not None and n.backprop] == ["out"]
    calls = []
    for n in new._nodes:
        if isinstance(n.obj, FrozenLayer):
            n.obj.backprop_gradient = lambda *a, _n=n.name: calls.append(_n)
    new.fit(_mds(rng), epochs=2, progress=False)
    assert calls == []
    path = tmp_path / "g.zip"
    new.save(path)
    loaded = ComputationGraph.load(path)
    assert {n.name for n in loaded._nodes if isinstance(n.obj, FrozenLayer)} == frozen


def test_n_out_replace_and_surgery(rng):
    g = _graph()
    new = (TransferLearning.GraphBuilder(g)
           .n_out_replace("top", 9, "XAVIER")
           .remove_vertex_keep_connections("out")
           .add_layer("out", OutputLayer(n_out=4, activation="softmax"), "top")
           .build())
    p = _params(new)
    assert p["top"]["W"].shape == (11, 9) and p["out"]["W"].shape == (9, 4)
    np.testing.assert_array_equal(p["da"]["W"], _params(g)["da"]["W"])
    new.fit(_mds(rng, classes=4), progress=False)
    # a second output, then only it
    two = (TransferLearning.GraphBuilder(g)
           .add_layer("out2", OutputLayer(n_out=2, activation="softmax"), "db")
           .set_outputs("out", "out2").build())
    assert two.conf.network_outputs == ("out", "out2")
    cut = (TransferLearning.GraphBuilder(g).remove_vertex_and_connections("out")
           .add_layer("new_out", OutputLayer(n_out=2, activation="softmax"), "top")
           .set_outputs("new_out").build())
    assert cut.conf.network_outputs == ("new_out",)


def test_graph_surgery_errors():
    g = _graph()
    B = TransferLearning.GraphBuilder
    with pytest.raises(TypeError, match="expected an initialised ndws.nn.ComputationGraph"):
        B(3)
    with pytest.raises(ValueError, match="set_feature_extractor: no vertex is named 'nope'"):
        B(g).set_feature_extractor("nope")
    with pytest.raises(ValueError, match="n_out_replace: vertex \"da\" is frozen"):
        B(g).set_feature_extractor("top").n_out_replace("da", 3)
    with pytest.raises(ValueError, match="n_out_replace: vertex \"top-merge\" "
                                         r"\(MergeVertex\) reads \"da\""):
        B(g).n_out_replace("da", 3)
    with pytest.raises(ValueError, match="n_out expected an int"):
        B(g).n_out_replace("top", 0)
    with pytest.raises(ValueError, match="vertex \"out\": FrozenLayer.layer: OutputLayer is an "
                                         "output layer"):
        B(g).set_feature_extractor("out").build()
    with pytest.raises(ValueError, match="vertex \"out\" reads \"top\", which was removed"):
        B(g).remove_vertex_keep_connections("top").build()
    with pytest.raises(ValueError, match="output \"out\" was removed"):
        B(g).remove_vertex_keep_connections("out").build()
    with pytest.raises(ValueError, match="a vertex named \"da\" already exists"):
        B(g).add_layer("da", DenseLayer(n_out=2), "a")
    with pytest.raises(TypeError, match="add_layer: expected an ndws.nn layer"):
        B(g).add_layer("x", "dense", "a")
    b = B(g)
    for name in ("out", "top", "top-merge", "da", "db"):
        b.remove_vertex_and_connections(name)
    with pytest.raises(ValueError, match="removes every vertex"):
        b.build()


def test_frozen_layer_over_a_trainable_vertex_is_refused():
    conf = (ComputationGraphConfiguration.builder(seed=1)
            .add_inputs("in")
            .add_layer("d", DenseLayer(n_out=4), "in")
            .add_layer("f", FrozenLayer(DenseLayer(n_out=4)), "d")
            .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "f")
            .set_outputs("out").set_input_types(InputType.feed_forward(3)).build())
    with pytest.raises(ValueError, match=r"vertices\[\"f\"\] \(FrozenLayer\) passes no "
                                         r"gradient down, but \"d\" below it trains"):
        ComputationGraph(conf).init()


def _frozen_unchanged(new, before, names):
    after = _params(new)
    for v in names:
        for k in before[v]:
            np.testing.assert_array_equal(after[v][k], before[v][k])


_MERGED = ("top-merge", "top", "out")


@pytest.mark.parametrize("names, boundary, trained", [
    (("da",), ("b", "da"), ("db",) + _MERGED), (("db",), ("a", "db"), ("da",) + _MERGED),
    (("top",), ("top",), ("out",)), (("da", "db"), ("da", "db"), _MERGED)])
def test_helper_on_a_two_input_graph(rng, tmp_path, names, boundary, trained):
    g = _graph()
    original = g.params().numpy().copy()
    data = [_mds(rng) for _ in range(3)]
    helper = TransferLearningHelper(g, *names)
    whole, top = helper.network, helper.unfrozen_graph()
    # DL4J's boundary: the frozen vertices an unfrozen one reads and the inputs only unfrozen
    # ones read, sorted by name; the unfrozen graph reads them under their names
    assert helper.boundary == boundary and top.conf.network_inputs == boundary
    frozen = {n.name for n in whole._nodes if isinstance(n.obj, FrozenLayer)}
    assert tuple(n for n in top.conf.topological_order if n not in boundary) == trained
    # its parameters are views of the whole graph's (the tail of its buffer: the frozen part
    # leads it), its updater state is its own
    assert np.shares_memory(np.asarray(top.params()), np.asarray(whole.params()))
    np.testing.assert_array_equal(top.params().numpy(),
                                  whole.params().numpy()[-top.num_params():])
    assert sum(e - s for _, s, e, _ in top._segments) == top.num_params()
    featurized = [helper.featurize(d) for d in data]
    assert [f.shape[1] for f in featurized[0].features] == [
        whole.conf.vertex_types[n].size for n in boundary]
    assert featurized[0].labels[0] is data[0].labels[0]
    for d, f in zip(data, featurized):
        for a, b in zip(whole.output(*d.features), helper.output_from_featurized(*f.features)):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    # the featurized fit trains the whole graph in place, to the bits of fitting the frozen
    # graph on the raw data (the same updater, no dropout)
    twin = TransferLearning.GraphBuilder(g).set_feature_extractor(*names).build()
    before = _params(whole)
    helper.fit_featurized(featurized, epochs=3, progress=False)
    twin.fit(data, epochs=3, progress=False)
    np.testing.assert_array_equal(whole.params().numpy(), twin.params().numpy())
    assert not np.array_equal(whole.params().numpy(), _flat(before, whole))
    _frozen_unchanged(whole, before, frozen)
    np.testing.assert_array_equal(g.params().numpy(), original)         # left alone
    assert not any(isinstance(n.obj, FrozenLayer) for n in g._nodes)
    # the whole graph's own updater state was not touched; saved and loaded it is the same
    assert all(not st.numpy().any() for _, _, _, sts in whole._segments for st in sts)
    path = tmp_path / "whole.zip"
    whole.save(path)
    loaded = ComputationGraph.load(path)
    np.testing.assert_array_equal(loaded.params().numpy(), whole.params().numpy())
    np.testing.assert_array_equal(loaded.output(*data[0].features)[0].numpy(),
                                  helper.output_from_featurized(*featurized[0].features)[0]
                                  .numpy())


def _flat(params, g):
    # the per-vertex parameters `params` (_params) as g's flat vector
    return np.concatenate([params[g._owner_name(o)][k].ravel(order="F" if o.param_order(k) ==
                                                              "F" else "C")
                           for o, k, _, _, _ in g._layout])


def test_helper_on_a_residual_graph(rng):
    from ndws.__main__ import _resnet_conf
    g = ComputationGraph(_resnet_conf(32, 3, image=(8, 8, 2)))
    g.init()
    x = [rng.standard_normal((16, 2, 8, 8)).astype(np.float32) for _ in range(2)]
    y = [np.eye(10, dtype=np.float32)[rng.integers(0, 10, 16)] for _ in range(2)]
    data = [DataSet(a, b) for a, b in zip(x, y)]
    # the stem and the first block frozen beforehand: no names, the boundary from them
    frozen = TransferLearning.GraphBuilder(g).set_feature_extractor("block0").build()
    helper = TransferLearningHelper(frozen)
    assert helper.network is frozen and helper.boundary == ("block0",)
    top = helper.unfrozen_graph()
    assert top.conf.topological_order[:3] == ("block0", "block1_a", "block1_b")
    assert top.conf.vertex_inputs["block1_add"] == ("block1_b", "block0")
    featurized = [helper.featurize(d) for d in data]
    assert featurized[0].features[0].shape == (16, 4, 8, 8)
    np.testing.assert_array_equal(helper.output_from_featurized(*featurized[1].features)[0]
                                  .numpy(), frozen.output(x[1])[0].numpy())
    twin = TransferLearning.GraphBuilder(g).set_feature_extractor("block0").build()
    before = _params(frozen)
    helper.fit_featurized(featurized, epochs=2, progress=False)
    twin.fit(data, epochs=2, progress=False)
    np.testing.assert_array_equal(frozen.params().numpy(), twin.params().numpy())
    _frozen_unchanged(frozen, before, ["stem", "block0_a", "block0_b"])
    assert not np.array_equal(_params(frozen)["block1_a"]["W"], before["block1_a"]["W"])
    # a graph whose frozen parameters do not lead the buffer cannot be viewed in two spans;
    # TransferLearning.GraphBuilder lays it out so
    conf = (ComputationGraphConfiguration.builder(seed=2, updater=Adam(1e-2))
            .add_inputs("a", "b")
            .add_layer("da", DenseLayer(n_out=6, activation="tanh"), "a")
            .add_layer("db", FrozenLayer(DenseLayer(n_out=5, activation="tanh")), "b")
            .add_layer("out", OutputLayer(n_out=3, activation="softmax"), "da", "db")
            .set_outputs("out")
            .set_input_types(InputType.feed_forward(4), InputType.feed_forward(2)).build())
    hand = ComputationGraph(conf)
    hand.init()
    with pytest.raises(ValueError, match="the frozen vertex \"db\" has its parameters after "
                                         "the trainable vertex \"da\""):
        TransferLearningHelper(hand)
    laid = TransferLearning.GraphBuilder(hand).build()
    assert laid.conf.topological_order[:3] == ("a", "b", "db")
    assert TransferLearningHelper(laid).boundary == ("a", "db")


def test_helper_on_a_graph_refuses_hostile_input(rng):
    g = _graph()
    with pytest.raises(ValueError, match=r"TransferLearningHelper: frozen_output_at\[0\]: no "
                                         r"vertex is named 'nope' \(the graph's vertices: da, "
                                         r"db, top-merge, top, out\)"):
        TransferLearningHelper(g, "nope")
    with pytest.raises(ValueError, match=r"frozen_output_at\[1\]: \"a\" is a network input, "
                                         r"not a vertex"):
        TransferLearningHelper(g, "da", "a")
    with pytest.raises(TypeError, match=r"frozen_output_at\[0\]: expected a vertex name "
                                        r"\(str\), got int 3"):
        TransferLearningHelper(g, 3)
    with pytest.raises(ValueError, match="frozen_output_at: freezing out freezes the graph's "
                                         "output \"out\": nothing would be left to train"):
        TransferLearningHelper(g, "out")
    with pytest.raises(ValueError, match="TransferLearningHelper: the graph has no frozen "
                                         "vertex"):
        TransferLearningHelper(g)
    with pytest.raises(TypeError, match="frozen_till is a MultiLayerNetwork's layer index"):
        TransferLearningHelper(g, frozen_till=1)
    with pytest.raises(TypeError, match="expected an initialised ndws.nn.MultiLayerNetwork or "
                                        "ComputationGraph, got str"):
        TransferLearningHelper("graph")
    with pytest.raises(RuntimeError, match="call init"):
        TransferLearningHelper(ComputationGraph(g.conf), "da")
    helper = TransferLearningHelper(g, "da")
    mds = _mds(rng)
    with pytest.raises(ValueError, match=r"featurize: features: the graph has 2 inputs \(a, "
                                         r"b\), got 1 array"):
        helper.featurize(MultiDataSet([mds.features[0]], mds.labels))
    with pytest.raises(ValueError, match=r"featurize: features\[1\] \(input \"b\"\)"):
        helper.featurize(MultiDataSet([mds.features[0], mds.features[0]], mds.labels))
    with pytest.raises(ValueError, match="featurize: Cannot train ComputationGraph network "
                                         "with multiple inputs"):
        helper.featurize(DataSet(mds.features[0], mds.labels[0]))
    with pytest.raises(TypeError, match="featurize: expected a MultiDataSet \\(or a DataSet"):
        helper.featurize(mds.features)
    masks = [np.ones((32, 1), dtype=np.float32), None]
    with pytest.raises(ValueError, match="featurize: data has features masks"):
        helper.featurize(MultiDataSet(mds.features, mds.labels, masks))
    with pytest.raises(TypeError, match="unfrozen_mln: this helper splits a ComputationGraph"):
        helper.unfrozen_mln()
    with pytest.raises(ValueError, match="the graph has 2 inputs \\(b, da\\), got 1 array"):
        helper.output_from_featurized(mds.features[0])


def test_helper_holds_the_whole_graph_while_it_trains(rng):
    # fit_featurized trains the whole graph's parameters: a training call of the whole graph
    # nested in it (from a listener), or the other way round, is refused by name
    from ndws.nn.listeners import TrainingListener
    helper = TransferLearningHelper(_graph(), "da")
    featurized = helper.featurize(_mds(rng))
    seen = []

    class Nested(TrainingListener):
        def __init__(self, call):
            self.call = call

        def iteration_done(self, model, iteration, epoch):
            with pytest.raises(RuntimeError, match="called from inside") as info:
                self.call()
            seen.append(str(info.value).split(":")[0])

    helper.unfrozen_graph().set_listeners(
        Nested(lambda: helper.network.fit(_mds(rng), progress=False)))
    helper.fit_featurized(featurized, progress=False)
    helper.unfrozen_graph().set_listeners()
    helper.network.set_listeners(
        Nested(lambda: helper.fit_featurized(featurized, progress=False)))
    helper.network.fit(_mds(rng), progress=False)
    assert seen == ["ComputationGraph.fit", "TransferLearningHelper.fit_featurized"]


def _chain(first, shape):
    # in -> first -> (a pooling for images) -> dense -> softmax output, Sgd without
    # regularisation: the unfrozen dense chain takes the compiled iteration
    from ndws.nn import Sgd, SubsamplingLayer
    b = (ComputationGraphConfiguration.builder(seed=3, updater=Sgd(0.1))
         .add_inputs("in").add_layer("f", first, "in"))
    if len(shape) == 3:
        b.add_layer("p", SubsamplingLayer(kernel_size=2, stride=2), "f")
    b.append_layer("d", DenseLayer(n_out=8, activation="tanh"))
    b.append_layer("out", OutputLayer(n_out=3, activation="softmax"))
    kind = InputType.convolutional(*shape) if len(shape) == 3 else InputType.feed_forward(*shape)
    g = ComputationGraph(b.set_outputs("out").set_input_types(kind).build())
    g.init()
    return g


@pytest.mark.parametrize("image", [False, True])
def test_helper_on_a_chain_matches_the_frozen_graph(rng, image):
    from ndws.nn import ConvolutionLayer
    if image:
        g, shape = _chain(ConvolutionLayer(n_out=4, kernel_size=(3, 3)), (8, 8, 1)), (1, 8, 8)
    else:
        g, shape = _chain(DenseLayer(n_out=8, activation="relu"), (5,)), (5,)
    names = ("p",) if image else ("f",)
    x = rng.standard_normal((32,) + shape).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 32)]
    data = [DataSet(x[i:i + 8], y[i:i + 8]) for i in range(0, 32, 8)]
    helper = TransferLearningHelper(g, *names)
    twin = TransferLearning.GraphBuilder(g).set_feature_extractor(*names).build()
    top = helper.unfrozen_graph()
    # the unfrozen dense chain trains on the compiled iteration, the frozen graph on the
    # vertex-by-vertex one: the same bits all the same; an image's boundary is flattened by
    # the preprocessor the unfrozen graph inserts again
    assert (top._dense_plan is not None) is not image and twin._dense_plan is None
    if image:
        assert type(top.conf.resolved_preprocessors["d"]).__name__ == \
            "CnnToFeedForwardPreProcessor"
    featurized = [helper.featurize(d) for d in data]
    helper.fit_featurized(featurized, epochs=3, progress=False)
    twin.fit(data, epochs=3, progress=False)
    np.testing.assert_array_equal(helper.network.params().numpy(), twin.params().numpy())
    np.testing.assert_array_equal(helper.network.output(x)[0].numpy(), helper
                                  .output_from_featurized(helper.featurize(DataSet(x, y))
                                                          .features[0])[0].numpy())
