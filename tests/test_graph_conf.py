"""ndws.nn.graph.conf: GraphBuilder and ComputationGraphConfiguration. DL4J's validation messages
at build(), Kahn's topological order with DL4J's tie-break (kept through JSON), the automatic
<name>-merge vertex, set_input_types inferring n_in and inserting preprocessors, the merge-shape
errors, and hostile input to every builder method."""
import json

import numpy as np
import pytest

from ndws.nn import (Adam, CnnToFeedForwardPreProcessor, ComputationGraphConfiguration,
                     ConvolutionLayer, DenseLayer, ElementWiseVertex, FeedForwardToCnnPreProcessor,
                     InputType, L2Vertex, LastTimeStepVertex, MergeVertex, OutputLayer,
                     PreprocessorVertex, ScaleVertex, StackVertex, SubsetVertex, UnstackVertex)
from ndws.nn.graph import BackpropType, GraphVertex


def builder(**kw):
    kw.setdefault("seed", 1)
    return ComputationGraphConfiguration.builder(**kw)


def two_input(**kw):
    return (builder(**kw).add_inputs("a", "b")
            .add_layer("da", DenseLayer(n_out=4), "a")
            .add_layer("db", DenseLayer(n_out=5), "b")
            .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "da", "db")
            .set_outputs("out")
            .set_input_types(InputType.feed_forward(3), InputType.feed_forward(6)))


# -- validation: DL4J's messages ---------------------------------------------------------------

@pytest.mark.parametrize("make, msg", [
    (lambda: builder().add_layer("d", DenseLayer(n_in=2, n_out=2), "x").set_outputs("d"),
     r"^Invalid configuration: network has no inputs. Use .add_inputs\(String...\)"),
    (lambda: builder().add_inputs("in").add_layer("d", DenseLayer(n_in=2, n_out=2), "in"),
     r"^Invalid configuration: network has no outputs. Use .set_outputs\(String...\)"),
    (lambda: builder().add_inputs("in").add_layer("in", DenseLayer(n_in=2, n_out=2), "in")
     .set_outputs("in"),
     r'^Invalid configuration: name "in" is present in both network inputs and graph '
     r'vertices/layers$'),
    (lambda: builder().add_inputs("in").add_layer("d", DenseLayer(n_in=2, n_out=2))
     .set_outputs("d"),
     r'^Invalid configuration: vertex "d" has no inputs$'),
    (lambda: builder().add_inputs("in").add_layer("d", DenseLayer(n_in=2, n_out=2), "nope")
     .set_outputs("d"),
     r'^Invalid configuration: Vertex "d" has input "nope" that does not exist$'),
    (lambda: builder().add_inputs("in").add_layer("d", DenseLayer(n_in=2, n_out=2), "in")
     .set_outputs("e"),
     r'^Invalid configuration: Output name "e" is not a valid vertex$'),
    (lambda: builder().add_inputs("in").add_layer("d", DenseLayer(n_in=2, n_out=2), "in")
     .add_layer("lost", DenseLayer(n_in=2, n_out=2), "in").set_outputs("d"),
     r"^Invalid configuration: disconnected vertices found - \['lost'\]"),
    (lambda: builder().add_inputs("in", "unused").add_layer("d", DenseLayer(n_in=2, n_out=2),
                                                            "in").set_outputs("d"),
     r"^Invalid configuration: disconnected vertices found - \['unused'\]"),
    (lambda: builder().add_inputs("in").add_layer("d", DenseLayer(n_in=2, n_out=2), "in", "d")
     .set_outputs("d"),
     r'cycle detected in graph.*cycle includes vertex "d-merge"'),
    (lambda: builder().add_inputs("in").add_vertex("s", ScaleVertex(2.0), "s")
     .add_layer("d", DenseLayer(n_in=2, n_out=2), "in", "s").set_outputs("d"),
     r'cycle includes vertex "s"\): vertex "s" names itself as its input$'),
    (lambda: builder().add_inputs("in").add_layer("d", DenseLayer(n_in=2, n_out=2), "in")
     .set_outputs("d", "d"), r'^Invalid configuration: output "d" is given twice$'),
])
def test_build_refuses_with_dl4j_messages(make, msg):
    with pytest.raises(ValueError, match=msg):
        make().build()


def test_a_cycle_names_a_vertex_on_it_not_one_downstream():
    # in -> a -> b -> c -> a is a cycle; d reads c (downstream of the cycle, never on it)
    b = (builder().add_inputs("in")
         .add_vertex("d", ScaleVertex(1.0), "c")
         .add_vertex("a", MergeVertex(), "in", "c")
         .add_vertex("b", ScaleVertex(1.0), "a")
         .add_vertex("c", ScaleVertex(1.0), "b")
         .add_layer("out", OutputLayer(n_in=2, n_out=2, activation="softmax"), "d")
         .set_outputs("out"))
    with pytest.raises(ValueError, match="cycle detected") as info:
        b.build()
    named = str(info.value).split('"')[1]
    assert named in ("a", "b", "c")


def test_a_name_used_twice_is_refused_when_added():
    b = builder().add_inputs("in").add_layer("d", DenseLayer(n_in=2, n_out=2), "in")
    with pytest.raises(ValueError, match='^Cannot add vertex: a vertex with name "d" already '
                                         'exists$'):
        b.add_vertex("d", ScaleVertex(2.0), "in")
    with pytest.raises(ValueError, match='network input "in" is given twice'):
        b.add_inputs("in")


def test_append_layer_reads_the_last_added_and_needs_one():
    with pytest.raises(ValueError, match="^Can not use appendLayer with no previous layers$"):
        builder().append_layer("d", DenseLayer(n_out=2))
    conf = (builder().add_inputs("in").append_layer("d1", DenseLayer(n_in=3, n_out=4))
            .append_layer("out", OutputLayer(n_out=2, activation="softmax"))
            .set_outputs("out").build())
    assert conf.vertex_inputs == {"d1": ("in",), "out": ("d1",)}
    assert [conf.resolved_vertices[n].n_in for n in ("d1", "out")] == [3, 4]


def test_set_input_types_counts_against_the_inputs():
    b = builder().add_inputs("a", "b")
    with pytest.raises(ValueError, match=r"^Invalid number of InputTypes: existing inputTypes "
                                         r"\(0\) \+ additional inputTypes \(1\) != number of "
                                         r"network inputs \(2\)$"):
        b.set_input_types(InputType.feed_forward(2)).build()
    b2 = builder().add_inputs("a")
    with pytest.raises(TypeError, match="set_input_types: expected ndws.nn.InputType, got int"):
        b2.set_input_types(3)


# -- topological order ---------------------------------------------------------------------------

def test_kahn_order_with_dl4j_tie_break():
    # indices: inputs in order, then vertices as added; FIFO queue, consumers in index order
    conf = (builder().add_inputs("i0", "i1")
            .add_layer("z", DenseLayer(n_in=2, n_out=2), "i1")
            .add_layer("y", DenseLayer(n_in=2, n_out=2), "i0")
            .add_layer("x", DenseLayer(n_in=4, n_out=2), "y", "z")     # x-merge added first
            .add_layer("w", DenseLayer(n_in=2, n_out=2), "z")
            .add_layer("out", OutputLayer(n_in=4, n_out=2, activation="softmax"), "x", "w")
            .set_outputs("out").build())
    assert list(conf.vertices) == ["z", "y", "x-merge", "x", "w", "out-merge", "out"]
    # i0 releases y, i1 releases z; y leaves x-merge waiting for z, which then releases
    # x-merge (index 4) before w (index 6); x comes after w, queued behind it
    assert conf.topological_order == ("i0", "i1", "y", "z", "x-merge", "w", "x", "out-merge",
                                      "out")


def test_the_order_survives_json_and_a_kept_order_is_checked():
    conf = two_input().build()
    data = conf.to_dict()
    assert data["topological_order"] == list(conf.topological_order)
    # a saved order that is another valid topological order is kept, not recomputed
    other = ["b", "a", "db", "da", "out-merge", "out"]
    data["topological_order"] = other
    kept = ComputationGraphConfiguration.from_dict(data)
    assert list(kept.topological_order) == other
    assert ComputationGraphConfiguration.from_json(kept.to_json()).topological_order == \
        tuple(other)
    data["topological_order"] = ["a", "b", "out-merge", "da", "db", "out"]
    with pytest.raises(ValueError, match='topological_order: "out-merge" comes before its '
                                         'input "da"'):
        ComputationGraphConfiguration.from_dict(data)
    data["topological_order"] = ["a", "b", "da", "out"]
    with pytest.raises(ValueError, match="topological_order: expected every vertex"):
        ComputationGraphConfiguration.from_dict(data)


# -- auto merge, input types, preprocessors ------------------------------------------------------

def test_a_layer_of_several_inputs_gets_a_merge_vertex_and_the_summed_n_in():
    conf = two_input().build()
    assert isinstance(conf.vertices["out-merge"], MergeVertex)
    assert conf.vertex_inputs["out-merge"] == ("da", "db")
    assert conf.vertex_inputs["out"] == ("out-merge",)
    assert conf.resolved_vertices["out"].n_in == 9
    assert conf.vertex_types["out-merge"] == InputType.feed_forward(9)
    # a vertex of one input too (DL4J's maxVertexInputs() == 1)
    c2 = (builder().add_inputs("a", "b").add_vertex("s", ScaleVertex(2.0), "a", "b")
          .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "s").set_outputs("out")
          .set_input_types(InputType.feed_forward(2), InputType.feed_forward(3)).build())
    assert c2.vertex_inputs["s"] == ("s-merge",) and c2.resolved_vertices["out"].n_in == 5


def test_input_types_insert_preprocessors_and_infer_n_in():
    conf = (builder().add_inputs("img", "side")
            .add_layer("c", ConvolutionLayer(kernel_size=3, n_out=4, activation="relu"), "img")
            .add_layer("c2", ConvolutionLayer(kernel_size=3, n_out=2, convolution_mode="same"),
                       "c")
            .add_vertex("m", MergeVertex(), "c", "c2")
            .add_layer("d", DenseLayer(n_out=7), "m")
            .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "d", "side")
            .set_outputs("out")
            .set_input_types(InputType.convolutional_flat(8, 8, 1), InputType.feed_forward(3))
            .build())
    pres = conf.resolved_preprocessors
    assert pres["c"] == FeedForwardToCnnPreProcessor(8, 8, 1)
    assert pres["c2"] is None
    assert conf.vertex_types["m"] == InputType.convolutional(6, 6, 6)
    assert pres["d"] == CnnToFeedForwardPreProcessor(6, 6, 6)
    assert [conf.resolved_vertices[n].n_in for n in ("c", "c2", "d", "out")] == [1, 4, 216, 10]


def test_merge_shape_errors():
    with pytest.raises(ValueError, match=r'^vertices\["m"\]: Invalid input: MergeVertex cannot '
                                         r'merge CNN activations of different width/heights'):
        (builder().add_inputs("a", "b").add_vertex("m", MergeVertex(), "a", "b")
         .add_layer("out", OutputLayer(n_in=2, n_out=2, activation="softmax"), "m")
         .set_outputs("out")
         .set_input_types(InputType.convolutional(4, 4, 1), InputType.convolutional(5, 4, 1))
         .build())
    with pytest.raises(ValueError, match="MergeVertex cannot currently merge CNN data in "
                                         "flattened format"):
        (builder().add_inputs("a", "b").add_vertex("m", MergeVertex(), "a", "b")
         .add_layer("out", OutputLayer(n_in=2, n_out=2, activation="softmax"), "m")
         .set_outputs("out")
         .set_input_types(InputType.convolutional_flat(4, 4, 1), InputType.feed_forward(3))
         .build())
    with pytest.raises(ValueError, match="ElementWise vertex cannot process activations of "
                                         "different types"):
        (builder().add_inputs("a", "b").add_vertex("e", ElementWiseVertex("add"), "a", "b")
         .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "e").set_outputs("out")
         .set_input_types(InputType.feed_forward(3), InputType.feed_forward(4)).build())


def _merge_types(vertex, *types):
    conf = (builder().add_inputs("a", "b").add_vertex("m", vertex, "a", "b")
            .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "m")
            .set_outputs("out").set_input_types(*types).build())
    return conf.vertex_types["m"]


def test_a_merge_along_time_or_space_sums_that_axis_not_the_features():
    # DL4J's MergeVertex sums the feature sizes whatever its merge axis; ndws' output type
    # follows the axis, so the layer after a merge along time gets the right n_in
    rec, conv = InputType.recurrent, InputType.convolutional
    assert _merge_types(MergeVertex(merge_axis=2), rec(5, 7), rec(5, 6)) == rec(5, 13)
    assert _merge_types(MergeVertex(merge_axis=2), rec(5, 7), rec(5)) == rec(5)
    assert _merge_types(MergeVertex(merge_axis=1), rec(5, 7, "NWC"), rec(5, 6, "NWC")) \
        == rec(5, 13, "NWC")
    assert _merge_types(MergeVertex(), rec(5, 7, "NWC"), rec(3, 7, "NWC")) == rec(8, 7, "NWC")
    assert _merge_types(MergeVertex(merge_axis=2), conv(4, 5, 2), conv(3, 5, 2)) \
        == conv(7, 5, 2)
    assert _merge_types(MergeVertex(merge_axis=2), conv(4, 5, 2, "NHWC"),
                        conv(4, 3, 2, "NHWC")) == conv(4, 8, 2, "NHWC")
    with pytest.raises(ValueError, match=r'^vertices\["m"\]: MergeVertex: merge_axis 2 is not an '
                                         r'axis of its 2-D inputs'):
        _merge_types(MergeVertex(merge_axis=2), InputType.feed_forward(3),
                     InputType.feed_forward(4))
    with pytest.raises(ValueError, match=r"MergeVertex: merge_axis 4 is not an axis of its 4-D"):
        _merge_types(MergeVertex(merge_axis=4), conv(4, 5, 2), conv(4, 5, 2))
    with pytest.raises(ValueError, match=r"MergeVertex: cannot merge along axis 2 inputs whose "
                                         r"other dimensions differ"):
        _merge_types(MergeVertex(merge_axis=2), rec(5, 7), rec(4, 6))
    with pytest.raises(ValueError, match=r"cannot merge along axis 2 inputs whose other"):
        _merge_types(MergeVertex(merge_axis=2), conv(4, 5, 2), conv(4, 6, 2))


def test_a_graph_merging_along_time_trains_and_equals_numpy(rng):
    from ndws.nn import LSTM, ComputationGraph, RnnOutputLayer
    conf = (builder().add_inputs("a", "b").add_vertex("m", MergeVertex(merge_axis=2), "a", "b")
            .add_layer("l", LSTM(n_out=4, activation="tanh"), "m")
            .add_layer("out", RnnOutputLayer(n_out=3, activation="softmax"), "l")
            .set_outputs("out")
            .set_input_types(InputType.recurrent(5, 7), InputType.recurrent(5, 6)).build())
    g = ComputationGraph(conf)
    g.init()
    assert g.get_layer("l").n_in == 5
    a = rng.standard_normal((2, 5, 7)).astype(np.float32)
    b = rng.standard_normal((2, 5, 6)).astype(np.float32)
    ff = g.feed_forward(a, b)
    np.testing.assert_array_equal(np.asarray(ff["m"]), np.concatenate([a, b], axis=2))
    labels = np.zeros((2, 3, 13), np.float32)
    labels[:, 0] = 1
    g.fit([a, b], [labels])
    assert np.asarray(g.output(a, b)[0]).shape == (2, 3, 13)


def test_elementwise_broadcasts_size_one_and_cnn_merge_sums_channels():
    conf = (builder().add_inputs("a", "b").add_vertex("e", ElementWiseVertex("max"), "a", "b")
            .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "e")
            .set_outputs("out")
            .set_input_types(InputType.feed_forward(1), InputType.feed_forward(3)).build())
    assert conf.resolved_vertices["out"].n_in == 3
    conf = (builder().add_inputs("a", "b").add_vertex("m", MergeVertex(), "a", "b")
            .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "m")
            .set_outputs("out")
            .set_input_types(InputType.convolutional(4, 4, 2), InputType.convolutional(4, 4, 3))
            .build())
    assert conf.vertex_types["m"] == InputType.convolutional(4, 4, 5)
    assert conf.resolved_preprocessors["out"] == CnnToFeedForwardPreProcessor(4, 4, 5)
    assert conf.resolved_vertices["out"].n_in == 80


def test_n_in_given_must_match_the_inferred_one():
    with pytest.raises(ValueError, match=r'^vertices\["out"\].n_in: 8 does not match the width '
                                         r'9 of its input "out-merge"'):
        (builder().add_inputs("a", "b").add_layer("da", DenseLayer(n_out=4), "a")
         .add_layer("db", DenseLayer(n_out=5), "b")
         .add_layer("out", OutputLayer(n_in=8, n_out=2, activation="softmax"), "da", "db")
         .set_outputs("out")
         .set_input_types(InputType.feed_forward(3), InputType.feed_forward(6)).build())


def test_without_input_types_the_first_layers_give_the_input_types():
    conf = (builder().add_inputs("a").add_layer("d", DenseLayer(n_in=3, n_out=4), "a")
            .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "d")
            .set_outputs("out").build())
    assert conf.vertex_types["a"] == InputType.feed_forward(3)
    assert conf.resolved_vertices["out"].n_in == 4
    with pytest.raises(ValueError, match=r'^vertices\["d"\].n_in: unknown'):
        (builder().add_inputs("a").add_layer("d", DenseLayer(n_out=4), "a")
         .set_outputs("d").build())


def test_vertex_checks_at_build():
    with pytest.raises(ValueError, match=r'vertices\["l2"\]: L2Vertex takes 2 to 2 inputs, '
                                         r'got 3'):
        (builder().add_inputs("a", "b", "c").add_vertex("l2", L2Vertex(), "a", "b", "c")
         .add_layer("out", OutputLayer(n_in=1, n_out=1, activation="identity",
                                       loss_function="mse"), "l2")
         .set_outputs("out").build())
    with pytest.raises(ValueError, match=r'vertices\["last"\]: mask_input_name "nope" is not a '
                                         r'network input'):
        (builder().add_inputs("a").add_vertex("last", LastTimeStepVertex("nope"), "a")
         .add_layer("out", OutputLayer(n_in=3, n_out=2, activation="softmax"), "last")
         .set_outputs("out").build())
    with pytest.raises(ValueError, match=r"SubsetVertex: range \[2, 5\] \(inclusive\) is "
                                         r"outside the input's 4 features"):
        (builder().add_inputs("a").add_vertex("s", SubsetVertex(2, 5), "a")
         .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "s").set_outputs("out")
         .set_input_types(InputType.feed_forward(4)).build())


def test_subset_stack_unstack_types():
    conf = (builder().add_inputs("a", "b").add_vertex("st", StackVertex(), "a", "b")
            .add_vertex("sub", SubsetVertex(1, 2), "st")
            .add_vertex("u0", UnstackVertex(0, 2), "sub")
            .add_vertex("u1", UnstackVertex(1, 2), "sub")
            .add_vertex("d", L2Vertex(), "u0", "u1")
            .add_layer("out", OutputLayer(n_out=1, activation="identity",
                                          loss_function="mse"), "d")
            .set_outputs("out")
            .set_input_types(InputType.feed_forward(4), InputType.feed_forward(4)).build())
    assert conf.vertex_types["sub"] == InputType.feed_forward(2)
    assert conf.vertex_types["d"] == InputType.feed_forward(1)


# -- JSON ---------------------------------------------------------------------------------------

def test_json_round_trip_is_exact_and_keeps_everything():
    conf = (two_input(updater=Adam(1e-2), activation="tanh", l2=1e-4)
            .add_vertex("p", PreprocessorVertex(CnnToFeedForwardPreProcessor(2, 2, 1)), "a")
            .remove_vertex("p")
            .backprop_type("truncated_bptt").tbptt_fwd_length(7).tbptt_back_length(5)
            .build())
    text = conf.to_json()
    again = ComputationGraphConfiguration.from_json(text)
    assert again == conf and again.to_json() == text
    assert again.backprop_type is BackpropType.TRUNCATED_BPTT
    assert (again.tbptt_fwd_length, again.tbptt_back_length) == (7, 5)
    assert again.resolved_vertices["da"].l2 == 1e-4
    assert json.loads(text)["format"] == "ndws.ComputationGraphConfiguration"


def test_from_json_refuses_what_is_not_a_graph():
    with pytest.raises(ValueError, match="not JSON text"):
        ComputationGraphConfiguration.from_json("{")
    with pytest.raises(ValueError, match="expected a dict with format "
                                         "'ndws.ComputationGraphConfiguration'"):
        ComputationGraphConfiguration.from_json('{"format": "ndws.MultiLayerConfiguration"}')
    data = two_input().build().to_dict()
    data["vertices"][0]["vertex"] = {"@class": "os.system"}
    with pytest.raises(ValueError, match=r"configuration.vertices\[0\]: expected name, inputs "
                                         r"and a layer or a vertex"):
        ComputationGraphConfiguration.from_dict(data)
    data = two_input().build().to_dict()
    data["vertices"][2]["vertex"] = data["vertices"][2].pop("vertex")
    data["vertices"][2]["vertex"]["@class"] = "NoSuchVertex"
    with pytest.raises(ValueError, match="unknown vertex class 'NoSuchVertex'"):
        ComputationGraphConfiguration.from_dict(data)
    data = two_input().build().to_dict()
    data["surprise"] = 1
    with pytest.raises(ValueError, match=r"unknown fields \['surprise'\]"):
        ComputationGraphConfiguration.from_dict(data)


def test_a_custom_vertex_round_trips_by_module_and_name():
    conf = (builder().add_inputs("a").add_vertex("t", Twice(factor=3.0), "a")
            .add_layer("out", OutputLayer(n_in=2, n_out=2, activation="softmax"), "t")
            .set_outputs("out").build())
    again = ComputationGraphConfiguration.from_json(conf.to_json())
    assert again.vertices["t"].factor == 3.0
    assert json.loads(conf.to_json())["vertices"][0]["vertex"]["@class"] == \
        f"{__name__}.Twice"


class Twice(GraphVertex):
    fields = ("factor",)
    max_inputs = 1

    def __init__(self, factor=2.0):
        super().__init__()
        self.factor = factor


# -- hostile input ------------------------------------------------------------------------------

@pytest.mark.parametrize("call, exc, msg", [
    (lambda b: b.add_inputs(3), TypeError, "add_inputs: expected a non-empty str, got int"),
    (lambda b: b.add_inputs(""), TypeError, "add_inputs: expected a non-empty str"),
    (lambda b: b.add_layer("d", "dense", "in"), TypeError,
     'add_layer: expected an ndws.nn layer for "d", got str'),
    (lambda b: b.add_layer(None, DenseLayer(n_out=2), "in"), TypeError,
     "name: expected a non-empty str, got NoneType"),
    (lambda b: b.add_layer("d", DenseLayer(n_out=2), 5), TypeError,
     'inputs of "d": expected a non-empty str, got int'),
    (lambda b: b.add_vertex("v", DenseLayer(n_out=2), "in"), TypeError,
     'add_vertex: expected an ndws.nn.graph.GraphVertex for "v", got DenseLayer'),
    (lambda b: b.input_preprocessor("d", "pre"), TypeError,
     "input_preprocessor: expected an ndws.nn.InputPreProcessor, got str"),
    (lambda b: b.tbptt_fwd_length(0), ValueError, r"tbptt_fwd_length: expected an int in \[1"),
    (lambda b: b.tbptt_back_length(True), TypeError, "tbptt_back_length: expected an int"),
    (lambda b: b.backprop_type("sideways"), ValueError, "backprop_type: unknown BackpropType"),
    (lambda b: b.remove_vertex("ghost"), ValueError, "remove_vertex: no vertex named 'ghost'"),
    (lambda b: b.set_outputs(["d"]), TypeError, "set_outputs: expected a non-empty str"),
])
def test_builder_hostile_input(call, exc, msg):
    b = builder().add_inputs("in")
    with pytest.raises(exc, match=msg):
        call(b)


@pytest.mark.parametrize("kw, exc, msg", [
    ({"seed": -1}, ValueError, r"seed: expected an int in \[0, 2\*\*63\)"),
    ({"dtype": "int8"}, ValueError, "dtype: expected float32 or float64"),
    ({"updater": "adam"}, TypeError, "updater: expected an ndws.nn updater"),
    ({"activation": "wiggle"}, ValueError, "activation: unknown activation"),
    ({"l2": -1.0}, ValueError, "l2"),
    ({"training_workspace_mode": "FAST"}, ValueError, "training_workspace_mode: unknown"),
    ({"surprise": 1}, TypeError, "surprise"),
])
def test_builder_settings_are_checked_at_once(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        ComputationGraphConfiguration.builder(**kw)


def test_the_builder_copies_what_it_is_given():
    layer = DenseLayer(n_in=2, n_out=3)
    b = builder().add_inputs("in").add_layer("d", layer, "in")
    layer.n_out = 99
    conf = b.set_outputs("d").build()
    assert conf.resolved_vertices["d"].n_out == 3
    with pytest.raises(AttributeError, match="ComputationGraphConfiguration is frozen"):
        conf.seed = 3


def test_remove_vertex_removes_its_connections():
    conf = (two_input().add_layer("extra", DenseLayer(n_out=2), "da").set_outputs("out", "extra")
            .remove_vertex("extra").build())
    assert "extra" not in conf.vertices and conf.network_outputs == ("out",)
    assert np.isfinite(conf.seed)
