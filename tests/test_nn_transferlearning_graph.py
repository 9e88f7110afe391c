"""TransferLearning.GraphBuilder: frozen vertices (a name and its ancestors) unchanged bit for
bit with no updater state and no backward pass, n_out_replace's shapes, vertex surgery, save and
load, and the errors with clear messages."""
from __future__ import annotations

import numpy as np
import pytest

from ndws.data.dataset import MultiDataSet
from ndws.nn import (Adam, ComputationGraph, ComputationGraphConfiguration, DenseLayer,
                     InputType, OutputLayer)
from ndws.nn.layers.wrappers import FrozenLayer
from ndws.nn.transferlearning import FineTuneConfiguration, TransferLearning


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
