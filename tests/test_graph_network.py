"""ndws.nn.graph.network: ComputationGraph. DL4J's GradientCheckTestsComputationGraph graphs by
central differences in float64, a MultiLayerNetwork and its to_computation_graph() training to
the same bits in every workspace mode, two outputs whose score is the sum, the pooled per-vertex
workspaces opening and closing at their steps, every workspace mode allocating nothing once
learned, save/load/resume bit-exact, evaluation per output, custom vertices, hostile input."""
import os
import threading

import numpy as np
import pytest

import ndws
from cnn_reference import check_gradients, check_modes
from ndws.data import DataSet, ListMultiDataSetIterator, MultiDataSet
from ndws.datasets import load_digits, load_iris
from ndws.evaluation import Evaluation, RegressionEvaluation
from ndws.nn import (Adam, ArrayType, CnnLossLayer, ComputationGraph,
                     ComputationGraphConfiguration, ConvolutionLayer, DenseLayer,
                     DuplicateToTimeSeriesVertex, ElementWiseVertex, GraphVertex, InputType,
                     L2NormalizeVertex, L2Vertex, LastTimeStepVertex, LossLayer, MergeVertex,
                     MultiLayerConfiguration, MultiLayerNetwork, OutputLayer,
                     ReverseTimeSeriesVertex, ScaleVertex, Sgd, StackVertex, SubsetVertex,
                     UnstackVertex)
from ndws.nn.listeners import TrainingListener

MODES = ["NONE", "SINGLE", "SEPARATE", "ENABLED"]


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


def graph(build, seed=12345, **kw):
    kw.setdefault("dtype", "float64")
    kw.setdefault("updater", Sgd(1.0))
    g = ComputationGraph(build(ComputationGraphConfiguration.builder(seed=seed, **kw)).build())
    g.init()
    return g


def iris(n=30):
    x, y = load_iris()
    x = (x - x.min(0)) / (x.max(0) - x.min(0))
    idx = np.arange(0, 150, 150 // n)[:n]
    return x[idx], np.eye(3)[y[idx]]


# -- DL4J's GradientCheckTestsComputationGraph --------------------------------------------------

def test_basic_iris_with_merging():
    x, y = iris()
    g = graph(lambda b: b.add_inputs("input")
              .add_layer("l1", DenseLayer(n_in=4, n_out=5, activation="tanh"), "input")
              .add_layer("l2", DenseLayer(n_in=4, n_out=5, activation="tanh"), "input")
              .add_vertex("merge", MergeVertex(), "l1", "l2")
              .add_layer("out", OutputLayer(n_in=10, n_out=3, activation="softmax"), "merge")
              .set_outputs("out"))
    assert g.num_params() == 25 + 25 + 33
    check_gradients(g, DataSet(x, y))


@pytest.mark.parametrize("op", list(ElementWiseVertex.Op))
def test_basic_iris_with_elementwise_node(op):
    x, y = iris()
    acts = ["tanh", "sigmoid", "relu"][:2 if op is ElementWiseVertex.SUBTRACT else 3]
    def build(b):
        b.add_inputs("input")
        for i, act in enumerate(acts):
            b.add_layer(f"l{i}", DenseLayer(n_in=4, n_out=5, activation=act), "input")
        return (b.add_vertex("ew", ElementWiseVertex(op), *[f"l{i}" for i in range(len(acts))])
                .add_layer("out", OutputLayer(n_in=5, n_out=3, activation="softmax"), "ew")
                .set_outputs("out"))
    g = graph(build)
    assert g.num_params() == 25 * len(acts) + 18
    check_gradients(g, DataSet(x, y))


@pytest.mark.parametrize("op", list(ElementWiseVertex.Op))
@pytest.mark.parametrize("first_wide", [True, False])
def test_elementwise_vertex_broadcast(op, first_wide, rng):
    ins = ("w", "n") if first_wide else ("n", "w")
    g = graph(lambda b: b.add_inputs("in")
              .add_layer("w", DenseLayer(n_in=3, n_out=3, activation="tanh"), "in")
              .add_layer("n", DenseLayer(n_in=3, n_out=1, activation="tanh"), "in")
              .add_vertex("ew", ElementWiseVertex(op), *ins)
              .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "ew")
              .set_outputs("out").set_input_types(InputType.feed_forward(3)))
    x, y = rng.standard_normal((5, 3)), np.eye(2)[[0, 1, 1, 0, 1]]
    assert g.output(x)[0].shape == (5, 2)
    check_gradients(g, DataSet(x, y))
    g.fit(DataSet(x, y))


def test_cnn_depth_merge(rng):
    g = graph(lambda b: b.add_inputs("input")
              .add_layer("l1", ConvolutionLayer(kernel_size=2, n_out=2, activation="tanh"),
                         "input")
              .add_layer("l2", ConvolutionLayer(kernel_size=2, n_out=2, activation="tanh"),
                         "input")
              .add_vertex("merge", MergeVertex(), "l1", "l2")
              .add_layer("out", OutputLayer(n_out=3, activation="softmax"), "merge")
              .set_outputs("out").set_input_types(InputType.convolutional(6, 6, 2)))
    assert g.get_layer("out").n_in == 5 * 5 * 4
    x = rng.normal(0, 0.1, (5, 2, 6, 6))
    check_gradients(g, DataSet(x, np.eye(3)[np.arange(5) % 3]))


@pytest.mark.parametrize("mb", [1, 3])
def test_multiple_inputs_layer(mb, rng):
    g = graph(lambda b: b.add_inputs("i0", "i1", "i2")
              .add_layer("d0", DenseLayer(n_in=2, n_out=2, activation="tanh"), "i0")
              .add_layer("d1", DenseLayer(n_in=2, n_out=2, activation="tanh"), "i1")
              .add_layer("d2", DenseLayer(n_in=2, n_out=2, activation="tanh"), "i2")
              .add_layer("d3", DenseLayer(n_in=6, n_out=2, activation="tanh"), "d0", "d1", "d2")
              .add_layer("out", OutputLayer(n_in=2, n_out=2, activation="identity",
                                            loss_function="mse"), "d3")
              .set_outputs("out"))
    assert "d3-merge" in g.topological_order
    xs = [rng.standard_normal((mb, 2)) for _ in range(3)]
    check_gradients(g, MultiDataSet(xs, [rng.standard_normal((mb, 2))]))


def test_multiple_outputs_layer_sums_three_epsilons(rng):
    # d0 feeds d1, d2, d3: its epsilon is summed from three consumers
    g = graph(lambda b: b.add_inputs("i0")
              .add_layer("d0", DenseLayer(n_in=2, n_out=2, activation="tanh"), "i0")
              .add_layer("d1", DenseLayer(n_in=2, n_out=2, activation="tanh"), "d0")
              .add_layer("d2", DenseLayer(n_in=2, n_out=2, activation="tanh"), "d0")
              .add_layer("d3", DenseLayer(n_in=2, n_out=2, activation="tanh"), "d0")
              .add_layer("out", OutputLayer(n_in=6, n_out=2, activation="identity",
                                            loss_function="mse"), "d1", "d2", "d3")
              .set_outputs("out"))
    for mode in MODES:
        g._workspace_override = getattr(ndws.WorkspaceMode, mode)
        check_gradients(g, DataSet(rng.standard_normal((3, 2)), rng.standard_normal((3, 2))))


def test_multiple_outputs_merge_cnn(rng):
    g = graph(lambda b: b.add_inputs("input")
              .add_layer("l0", ConvolutionLayer(kernel_size=2, n_out=2, activation="tanh",
                                                convolution_mode="same"), "input")
              .add_layer("l1", ConvolutionLayer(kernel_size=2, n_out=2, activation="tanh",
                                                convolution_mode="same"), "l0")
              .add_layer("l2", ConvolutionLayer(kernel_size=2, n_out=2, activation="tanh",
                                                convolution_mode="same"), "l0")
              .add_vertex("m", MergeVertex(), "l1", "l2")
              .add_layer("l3", ConvolutionLayer(kernel_size=2, n_out=2, activation="tanh",
                                                convolution_mode="same"), "m")
              .add_layer("l4", ConvolutionLayer(kernel_size=2, n_out=2, activation="tanh",
                                                convolution_mode="same"), "m")
              .add_layer("out", OutputLayer(n_out=2, activation="identity",
                                            loss_function="mse"), "l3", "l4")
              .set_outputs("out").set_input_types(InputType.convolutional(7, 7, 2)))
    check_gradients(g, DataSet(rng.standard_normal((2, 2, 7, 7)), rng.standard_normal((2, 2))),
                    max_per_param=16)


def test_iris_triplet_stacking_l2_loss():
    x, _ = iris(15)
    g = graph(lambda b: b.add_inputs("pos", "anc", "neg")
              .add_vertex("stack", StackVertex(), "pos", "anc", "neg")
              .add_layer("d", DenseLayer(n_in=4, n_out=5, activation="tanh"), "stack")
              .add_vertex("u0", UnstackVertex(0, 3), "d")
              .add_vertex("u1", UnstackVertex(1, 3), "d")
              .add_vertex("u2", UnstackVertex(2, 3), "d")
              .add_vertex("l2p", L2Vertex(), "u0", "u1")
              .add_vertex("l2n", L2Vertex(), "u1", "u2")
              .add_layer("lossLayer", LossLayer(loss_function="mcxent", activation="softmax"),
                         "l2p", "l2n")
              .set_outputs("lossLayer"))
    assert g.num_params() == 25
    labels = np.tile([1.0, 0.0], (15, 1))
    check_gradients(g, MultiDataSet([x, x[::-1].copy(), np.roll(x, 3, axis=0)], [labels]))


@pytest.mark.parametrize("mb", [1, 3, 10])
def test_basic_l2(mb, rng):
    g = graph(lambda b: b.add_inputs("in1", "in2")
              .add_layer("d0", DenseLayer(n_in=2, n_out=2, activation="tanh"), "in1")
              .add_layer("d1", DenseLayer(n_in=2, n_out=2, activation="tanh"), "in2")
              .add_vertex("l2", L2Vertex(), "d0", "d1")
              .add_layer("out", OutputLayer(n_in=1, n_out=1, activation="identity",
                                            loss_function="l2"), "l2")
              .set_outputs("out"))
    xs = [rng.standard_normal((mb, 2)), rng.standard_normal((mb, 2))]
    check_gradients(g, MultiDataSet(xs, [rng.standard_normal((mb, 1))]))


def stack_unstack_two_outputs(**kw):
    return graph(lambda b: b.add_inputs("in1", "in2")
                 .add_layer("d0", DenseLayer(n_in=2, n_out=2, activation="tanh"), "in1")
                 .add_layer("d1", DenseLayer(n_in=2, n_out=2, activation="tanh"), "in2")
                 .add_vertex("stack", StackVertex(), "d0", "d1")
                 .add_layer("d2", DenseLayer(n_in=2, n_out=2, activation="tanh"), "stack")
                 .add_vertex("u1", UnstackVertex(0, 2), "d2")
                 .add_vertex("u2", UnstackVertex(1, 2), "d2")
                 .add_layer("out1", OutputLayer(n_in=2, n_out=2, activation="identity",
                                                loss_function="l2"), "u1")
                 .add_layer("out2", OutputLayer(n_in=2, n_out=2, activation="identity",
                                                loss_function="l2"), "u2")
                 .set_outputs("out1", "out2"), **kw)


def test_basic_stack_unstack_two_outputs(rng):
    g = stack_unstack_two_outputs()
    xs = [rng.standard_normal((3, 2)), rng.standard_normal((3, 2))]
    check_gradients(g, MultiDataSet(xs, [rng.standard_normal((3, 2)),
                                         rng.standard_normal((3, 2))]))


def test_two_outputs_score_is_the_sum(rng):
    # testBasicTwoOutputs: in1 -> d0 -> out1, in2 -> d1 -> out2
    def make(b, both=True):
        b = (b.add_inputs("in1", "in2")
             .add_layer("d0", DenseLayer(n_in=2, n_out=2, activation="tanh"), "in1")
             .add_layer("d1", DenseLayer(n_in=2, n_out=2, activation="tanh"), "in2")
             .add_layer("out1", OutputLayer(n_in=2, n_out=2, activation="identity",
                                            loss_function="l2"), "d0")
             .add_layer("out2", OutputLayer(n_in=2, n_out=2, activation="identity",
                                            loss_function="l2"), "d1"))
        return b.set_outputs("out1", "out2")
    g = graph(make)
    x1, x2 = rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    y1, y2 = rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    mds = MultiDataSet([x1, x2], [y1, y2])
    check_gradients(g, mds)
    o1, o2 = (o.numpy() for o in g.output(x1, x2))
    expect = ((o1 - y1) ** 2).sum(1).mean() + ((o2 - y2) ** 2).sum(1).mean()
    assert g.score(mds) == pytest.approx(expect, rel=1e-12)
    assert g.compute_gradient_and_score(mds) == pytest.approx(expect, rel=1e-12)
    per = g.score_examples(mds).numpy()
    np.testing.assert_allclose(per, ((o1 - y1) ** 2).sum(1) + ((o2 - y2) ** 2).sum(1))


@pytest.mark.parametrize("dims", [None, (1,)])
def test_l2_normalize_vertex(dims, rng):
    g = graph(lambda b: b.add_inputs("in")
              .add_layer("d", DenseLayer(n_in=2, n_out=3, activation="tanh"), "in")
              .add_vertex("norm", L2NormalizeVertex(dims=dims), "d")
              .add_layer("out", OutputLayer(n_in=3, n_out=2, activation="softmax"), "norm")
              .set_outputs("out"))
    check_gradients(g, DataSet(rng.standard_normal((4, 2)), np.eye(2)[[0, 1, 1, 0]]))
    g4 = graph(lambda b: b.add_inputs("in")
               .add_layer("c", ConvolutionLayer(kernel_size=2, n_out=2, activation="tanh"), "in")
               .add_vertex("norm", L2NormalizeVertex(), "c")
               .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "norm")
               .set_outputs("out").set_input_types(InputType.convolutional(3, 3, 1)))
    check_gradients(g4, DataSet(rng.standard_normal((3, 1, 3, 3)), np.eye(2)[[0, 1, 1]]))


def test_time_series_vertices_with_a_mask(rng):
    # rows -> dense -> duplicated over the series' steps -> reversed by the series' mask ->
    # its last kept step -> subset -> output: every vertex of time between the parameters
    g = graph(lambda b: b.add_inputs("seq", "side")
              .add_layer("d", DenseLayer(n_in=3, n_out=4, activation="tanh"), "side")
              .add_vertex("dup", DuplicateToTimeSeriesVertex("seq"), "d")
              .add_vertex("m", MergeVertex(), "dup", "seq")
              .add_vertex("rev", ReverseTimeSeriesVertex("seq"), "m")
              .add_vertex("last", LastTimeStepVertex("seq"), "rev")
              .add_vertex("sub", SubsetVertex(1, 5), "last")
              .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "sub")
              .set_outputs("out")
              .set_input_types(InputType.recurrent(2, 5), InputType.feed_forward(3)))
    assert g.get_layer("out").n_in == 5
    seq, side = rng.standard_normal((3, 2, 5)), rng.standard_normal((3, 3))
    mask = np.array([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1], [1, 1, 1, 1, 1]], dtype=np.float64)
    y = np.eye(2)[[0, 1, 1]]
    check_gradients(g, MultiDataSet([seq, side], [y], [mask, None]))
    check_gradients(g, MultiDataSet([seq, side], [y]))


# -- MultiLayerNetwork <-> ComputationGraph ------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_a_network_and_its_graph_train_to_the_same_bits(mode):
    x, y = load_digits()
    x = (x / 16.0).astype(np.float32)
    conf = MultiLayerConfiguration(
        [DenseLayer(n_in=64, n_out=32, activation="relu"),
         DenseLayer(n_out=16, activation="tanh", dropout=0.8, l2=1e-3),
         OutputLayer(n_out=10, activation="softmax")],
        seed=3, updater=Adam(1e-2), training_workspace_mode=mode, inference_workspace_mode=mode)
    net = MultiLayerNetwork(conf)
    net.init()
    net.fit(x[:64], y[:64], batch_size=32)                  # state to carry over
    g = net.to_computation_graph()
    assert g.topological_order == ("in", "0", "1", "2")
    assert list(g.param_table()) == ["0_W", "0_b", "1_W", "1_b", "2_W", "2_b"]
    np.testing.assert_array_equal(g.params().numpy(), net.params().numpy())
    assert (g.iteration, g.epoch) == (net.iteration, net.epoch)
    onehot = np.eye(10, dtype=np.float32)[y]
    for _ in range(2):
        net.fit(x[:256], y[:256], batch_size=32)
        g.fit([x[:256]], [onehot[:256]], batch_size=32)
    np.testing.assert_array_equal(g.params().numpy(), net.params().numpy())
    assert g.score() == net.score() and g.iteration == net.iteration == 18
    np.testing.assert_array_equal(g.output(x[:7])[0].numpy(), net.output(x[:7]).numpy())


def test_the_graph_of_a_cnn_keeps_its_preprocessors(rng):
    conf = MultiLayerConfiguration(
        [ConvolutionLayer(kernel_size=3, n_out=3, activation="relu"),
         OutputLayer(n_out=2, activation="softmax")],
        seed=1, dtype="float64", input_type=InputType.convolutional_flat(5, 5, 1))
    net = MultiLayerNetwork(conf)
    net.init()
    g = net.to_computation_graph()
    assert g.conf.resolved_preprocessors["0"] == conf.resolved_preprocessors[0]
    assert g.conf.resolved_preprocessors["1"] == conf.resolved_preprocessors[1]
    x = rng.standard_normal((4, 25))
    np.testing.assert_array_equal(g.output_single(x).numpy(), net.output(x).numpy())


# -- workspaces ---------------------------------------------------------------------------------

def residual(mode, seed=7):
    def build(b):
        return (b.add_inputs("in")
                .add_layer("stem", DenseLayer(n_out=16, activation="relu"), "in")
                .add_layer("a", DenseLayer(n_out=16, activation="relu"), "stem")
                .add_layer("b", DenseLayer(n_out=16, activation="identity"), "a")
                .add_vertex("add", ElementWiseVertex("add"), "stem", "b")
                .add_layer("side", DenseLayer(n_out=8, activation="tanh"), "in")
                .add_layer("out", OutputLayer(n_out=10, activation="softmax"), "add", "side")
                .set_outputs("out")
                .set_input_types(InputType.feed_forward(64)))
    return build(ComputationGraphConfiguration.builder(
        seed=seed, updater=Adam(1e-2), training_workspace_mode=mode,
        inference_workspace_mode=mode)).build()


def test_every_workspace_mode_learns_the_plan_allocates_nothing_and_agrees():
    x, y = load_digits()
    x = (x[:32] / 16.0).astype(np.float32)
    batch = DataSet(x, np.eye(10, dtype=np.float32)[y[:32]])
    check_modes(residual, batch, x, network=ComputationGraph)


def test_the_pool_is_the_widest_cut_and_separate_is_below_single():
    g = ComputationGraph(residual("SEPARATE"))
    g.init()
    assert g.topological_order == ("in", "stem", "side", "a", "b", "add", "out-merge", "out")
    # inference: when b runs, stem (read by add), side (read by out-merge), a (read by b) and
    # b are all alive: the widest cut is 4; add reuses a's workspace (closed after b's step),
    # out-merge b's (closed after add's, with stem's)
    act = {n.name: n.act_slot for n in g._nodes}
    assert act == {"in": None, "stem": 0, "side": 1, "a": 2, "b": 3, "add": 2, "out-merge": 3,
                   "out": None}
    # training, backward from out: out's epsilon lives until out-merge read it, out-merge's
    # until side and add did, ...; stem's and side's nobody reads (no workspace)
    grad = {n.name: n.grad_slot for n in g._nodes}
    assert grad == {"in": None, "stem": None, "side": None, "a": 3, "b": 2, "add": 0,
                    "out-merge": 1, "out": 0}
    report = g.memory_report(32)
    separate = report.workspace_bytes(ndws.WorkspaceMode.SEPARATE, True)
    single = report.workspace_bytes(ndws.WorkspaceMode.SINGLE, True)
    assert sum(separate.values()) < sum(single.values())
    pooled = sorted(k for k in report.workspaces(ndws.WorkspaceMode.SEPARATE)
                    if k.startswith("WS_LAYER_ACT_"))
    assert pooled == ["WS_LAYER_ACT_0", "WS_LAYER_ACT_1", "WS_LAYER_ACT_2", "WS_LAYER_ACT_3"]


class Watch(GraphVertex):
    """Passes its input on and records which pooled workspaces are open at its step."""

    max_inputs = 1
    seen: list = []

    def activate(self, inputs, training, mgr):
        wsm = ndws.get_workspace_manager()
        Watch.seen.append(("forward", self.name, sorted(
            w.id for w in wsm.get_all_workspaces_for_current_thread()
            if w.id.startswith("WS_LAYER_ACT_") and w.is_scope_active)))
        return mgr.dup(ArrayType.ACTIVATIONS, inputs[0])

    def backprop_gradient(self, epsilon, mgr):
        wsm = ndws.get_workspace_manager()
        Watch.seen.append(("backward", self.name, sorted(
            w.id for w in wsm.get_all_workspaces_for_current_thread()
            if w.id.startswith("WS_LAYER_ACT_") and w.is_scope_active)))
        return {}, [mgr.dup(ArrayType.ACTIVATION_GRAD, epsilon)]

    def memory_use(self, batch, training, itemsize):
        size = batch * self.input_types[0].size * itemsize
        return [("forward", ArrayType.ACTIVATIONS, size)] + (
            [("backward", ArrayType.ACTIVATION_GRAD, size)] if training else [])


def test_each_vertex_workspace_closes_at_its_last_consumer(rng):
    # in -> d1 -> w1 -> d2 -> w2 -> out, and d1 also -> out: d1's activations live until out
    conf = (ComputationGraphConfiguration.builder(seed=1, training_workspace_mode="SEPARATE",
                                                  inference_workspace_mode="SEPARATE")
            .add_inputs("in")
            .add_layer("d1", DenseLayer(n_out=4), "in")
            .add_vertex("w1", Watch(), "d1")
            .add_layer("d2", DenseLayer(n_out=4), "w1")
            .add_vertex("w2", Watch(), "d2")
            .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "w2", "d1")
            .set_outputs("out").set_input_types(InputType.feed_forward(3)).build())
    g = ComputationGraph(conf)
    g.init()
    slots = {n.name: n.act_slot for n in g._nodes}
    assert slots == {"in": None, "d1": 0, "w1": 1, "d2": 2, "w2": 1, "out-merge": 2, "out": None}
    Watch.seen = []
    x = rng.standard_normal((5, 3)).astype(np.float32)
    g.output(x)
    # at w1: d1's (0) and w1's own (1) open; at w2: d1 still (out reads it), w1's closed
    # when d2 ran, d2's (2) and w2's (1, reused)
    assert Watch.seen == [("forward", "w1", ["WS_LAYER_ACT_0", "WS_LAYER_ACT_1"]),
                          ("forward", "w2", ["WS_LAYER_ACT_0", "WS_LAYER_ACT_1",
                                             "WS_LAYER_ACT_2"])]
    assert not any(w.is_scope_active for w in
                   ndws.get_workspace_manager().get_all_workspaces_for_current_thread())
    # training, backward from out: out's epsilons (0) live until out-merge read them;
    # out-merge's (1) until d1 does (the last of its inputs), so through w2's and w1's steps;
    # w2's take 0 again, d2's a new one (2), w1's 0 again (w2's closed when d2 ran)
    Watch.seen = []
    g.fit(DataSet(x, np.eye(2, dtype=np.float32)[[0, 1, 0, 1, 1]]))
    backward = [s for s in Watch.seen if s[0] == "backward"]
    grads = {n.name: n.grad_slot for n in g._nodes}
    assert grads == {"in": None, "d1": None, "w1": 0, "d2": 2, "w2": 0, "out-merge": 1,
                     "out": 0}
    assert backward == [("backward", "w2", ["WS_LAYER_ACT_0", "WS_LAYER_ACT_1"]),
                        ("backward", "w1", ["WS_LAYER_ACT_0", "WS_LAYER_ACT_1",
                                            "WS_LAYER_ACT_2"])]


def test_output_in_the_callers_workspace_left_open(rng):
    g = graph(lambda b: b.add_inputs("in")
              .add_layer("d", DenseLayer(n_in=4, n_out=3, activation="tanh"), "in")
              .add_layer("out", OutputLayer(n_out=3, activation="softmax"), "d")
              .set_outputs("out"), dtype="float32")
    x = rng.standard_normal((3, 4)).astype(np.float32)
    conf = ndws.WorkspaceConfiguration(cycles_before_initialization=1)
    for _ in range(3):
        with ndws.workspace("ExternalTestWorkspace", conf) as ws:
            out = g.output(x, output_workspace=ws)[0]
            assert out.workspace_id == "ExternalTestWorkspace" and ws.is_scope_active
        assert not ws.is_scope_active
    free = g.output(x)[0]
    assert not free.is_attached()
    with ndws.workspace("OPEN"):
        inside = g.output(x)[0]
        assert not inside.is_attached() and ndws.current_workspace().id == "OPEN"
    np.testing.assert_array_equal(inside.numpy(), free.numpy())
    with pytest.raises(ndws.WorkspaceError, match=r"output_workspace: workspace "
                                                  r"\[ExternalTestWorkspace\] is not open"):
        g.output(x, output_workspace=ws)


def test_dl4j_test_workspaces_port():
    # TestCompGraphWorkSpaces#testWorkspaces: a 3x3 convolution without bias and a per-pixel
    # loss, on one 256x256 image of zeros, in NONE and ENABLED (the DL4J test never ran init)
    for mode in ("NONE", "ENABLED"):
        g = graph(lambda b: b.add_inputs("input")
                  .append_layer("L1", ConvolutionLayer(kernel_size=3, stride=1, padding=1,
                                                       n_in=1, n_out=1, has_bias=False))
                  .append_layer("out", CnnLossLayer(activation="sigmoid",
                                                    loss_function="xent"))
                  .set_outputs("out").set_input_types(InputType.convolutional(256, 256, 1)),
                  seed=123, dtype="float32", training_workspace_mode=mode,
                  inference_workspace_mode=mode)
        assert g.num_params() == 9
        zeros = np.zeros((1, 1, 256, 256), dtype=np.float32)
        g.fit(ListMultiDataSetIterator([MultiDataSet([zeros], [zeros])]))
        assert g.output(zeros)[0].shape == (1, 1, 256, 256)
        # the convolution inherits DL4J's default sigmoid: every pixel is sigmoid(0.5) against
        # a label of 0, summed over the pixels and divided by the minibatch (1)
        per_pixel = -np.log(1 - 1 / (1 + np.exp(-0.5)))
        assert g.score(DataSet(zeros, zeros)) == pytest.approx(256 * 256 * per_pixel, rel=1e-5)


# -- fit's inputs, save / load, evaluation --------------------------------------------------------

def two_headed(mode="ENABLED", seed=0):
    return (ComputationGraphConfiguration.builder(seed=seed, updater=Adam(1e-2),
                                                  activation="relu",
                                                  training_workspace_mode=mode)
            .add_inputs("a", "b")
            .add_layer("da", DenseLayer(n_out=8), "a")
            .add_layer("db", DenseLayer(n_out=8), "b")
            .add_vertex("sum", ElementWiseVertex("add"), "da", "db")
            .add_layer("h", DenseLayer(n_out=8), "da", "sum")
            .add_layer("cls", OutputLayer(n_out=3, activation="softmax"), "h")
            .add_layer("reg", OutputLayer(n_out=1, activation="identity",
                                          loss_function="mse"), "sum")
            .set_outputs("cls", "reg")
            .set_input_types(InputType.feed_forward(4), InputType.feed_forward(5)).build())


def two_headed_data(rng, n=32):
    a = rng.standard_normal((n, 4)).astype(np.float32)
    b = rng.standard_normal((n, 5)).astype(np.float32)
    cls = np.eye(3, dtype=np.float32)[(a[:, 0] > 0).astype(int) + (b[:, 0] > 0)]
    reg = (a[:, :1] - b[:, 1:2]).astype(np.float32)
    return MultiDataSet([a, b], [cls, reg])


def test_fit_takes_multidatasets_iterators_and_arrays(rng):
    mds = two_headed_data(rng)
    runs = []
    for data in ([mds] * 3, ListMultiDataSetIterator([mds] * 3), (m for m in [mds] * 3)):
        g = ComputationGraph(two_headed())
        g.init()
        h = g.fit(data)
        runs.append(g.params().numpy())
        assert g.iteration == 3 and g.epoch == 1 and h.iterations == [0, 1, 2]
    g = ComputationGraph(two_headed())
    g.init()
    for _ in range(3):
        g.fit(mds.features, mds.labels)
    runs.append(g.params().numpy())
    for p in runs[1:]:
        np.testing.assert_array_equal(p, runs[0])
    g.fit(ListMultiDataSetIterator([mds]), epochs=4)
    assert g.epoch == 7


def test_training_reduces_both_scores(rng):
    mds = two_headed_data(rng, 128)
    g = ComputationGraph(two_headed())
    g.init()
    before = g.score(mds)
    g.fit(mds.features, mds.labels, batch_size=32, epochs=20)
    assert g.score(mds) < 0.5 * before
    ev = g.evaluate([mds], 0)
    assert ev.accuracy() > 0.8
    reg = RegressionEvaluation()
    cls = Evaluation()
    assert g.do_evaluation([mds], {0: [cls], 1: reg})[1] is reg
    assert cls.accuracy() == ev.accuracy()
    assert reg.num_columns() == 1 and reg.mean_squared_error(0) < 0.2


def test_save_load_resume_bit_exact(rng, tmp_path):
    mds = two_headed_data(rng)
    a = ComputationGraph(two_headed())
    a.init()
    a.fit([mds] * 2)
    path = tmp_path / "graph.zip"
    a.save(path)
    a.fit([mds] * 3)
    b = ComputationGraph.load(path)
    assert b.conf == a.conf and b.conf.topological_order == a.conf.topological_order
    assert (b.iteration, b.epoch) == (2, 1)
    b.fit([mds] * 3)
    np.testing.assert_array_equal(a.params().numpy(), b.params().numpy())
    with pytest.raises(ValueError, match="configuration.json: holds a ComputationGraph, not a "
                                         "MultiLayerNetwork: load it with ComputationGraph.load"):
        MultiLayerNetwork.load(path)
    net = MultiLayerNetwork(MultiLayerConfiguration([DenseLayer(n_in=2, n_out=2)], seed=1))
    net.init()
    net.save(tmp_path / "net.zip")
    with pytest.raises(ValueError, match="holds a MultiLayerNetwork, not a ComputationGraph: "
                                         "load it with MultiLayerNetwork.load"):
        ComputationGraph.load(tmp_path / "net.zip")


def test_clone_copies_everything(rng):
    mds = two_headed_data(rng)
    a = ComputationGraph(two_headed())
    a.init()
    a.fit([mds])
    b = a.clone()
    np.testing.assert_array_equal(a.params().numpy(), b.params().numpy())
    a.fit([mds])
    b.fit([mds])
    np.testing.assert_array_equal(a.params().numpy(), b.params().numpy())
    assert b.params() is not a.params()


def test_listeners_see_every_vertex_by_name(rng):
    class Seen(TrainingListener):
        def __init__(self):
            self.names, self.iterations = [], []

        def on_forward_pass(self, model, activations):
            self.names.append(sorted(activations))

        def iteration_done(self, model, iteration, epoch):
            self.iterations.append(iteration)
    for mode in MODES:
        g = ComputationGraph(two_headed(mode))
        g.init()
        seen = Seen()
        g.set_listeners(seen)
        g.fit([two_headed_data(rng)] * 2)
        assert seen.iterations == [0, 1]
        assert seen.names[0] == sorted(g.topological_order)


def test_feed_forward_and_lookups(rng):
    g = ComputationGraph(two_headed())
    g.init()
    mds = two_headed_data(rng, 5)
    acts = g.feed_forward(*mds.features)
    assert list(acts) == list(g.topological_order)
    assert all(not a.is_attached() for a in acts.values())
    np.testing.assert_array_equal(acts["sum"].numpy(), acts["da"].numpy() + acts["db"].numpy())
    outs = g.output(*mds.features)
    np.testing.assert_array_equal(outs[1].numpy(), acts["reg"].numpy())
    assert isinstance(g.get_vertex("sum"), ElementWiseVertex)
    assert g.get_vertex("a") is None and g.get_layer("h") is g.get_vertex("h")
    with pytest.raises(ValueError, match="get_layer: vertex 'sum' is a ElementWiseVertex, not a "
                                         "layer"):
        g.get_layer("sum")
    with pytest.raises(ValueError, match="get_vertex: no vertex named 'nope'"):
        g.get_vertex("nope")
    with pytest.raises(RuntimeError, match="Cannot use output_single with ComputationGraph that "
                                           "does not have exactly 1 output. nOutputs: 2"):
        g.output_single(*mds.features)
    assert "total parameters: 260" in g.summary()


# -- custom vertices ------------------------------------------------------------------------------

class Gate(GraphVertex):
    """x * sigmoid(g) of its two inputs, with a learned scalar bias on the gate."""

    min_inputs = max_inputs = 2

    def param_shapes(self):
        return {"c": (1,)}

    def init_params(self, rng):
        self.params["c"].fill(0.5)

    def activate(self, inputs, training, mgr):
        x, g = inputs
        self._x, self._s = x, mgr.create_uninitialized(ArrayType.FF_CACHE, g.shape, dtype=g.dtype)
        z = ndws.add(g, self.params["c"])
        ndws.divide(1.0, ndws.add(1.0, ndws.exp(ndws.negative(z))), out=self._s)
        out = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        return ndws.multiply(x, self._s, out=out)

    def backprop_gradient(self, epsilon, mgr):
        s = self._s
        dx = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, s.shape, dtype=s.dtype)
        ndws.multiply(epsilon, s, out=dx)
        dz = ndws.multiply(ndws.multiply(epsilon, self._x), ndws.multiply(s, ndws.subtract(1, s)))
        dg = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, s.shape, dtype=s.dtype)
        dg.assign(dz)
        self.grads["c"].assign(ndws.sum(dz).reshape(1))
        return {"c": self.grads["c"]}, [dx, dg]

    def clear(self):
        super().clear()
        self.__dict__.pop("_x", None)
        self.__dict__.pop("_s", None)


def gated(vertex, **kw):
    return graph(lambda b: b.add_inputs("in")
                 .add_layer("x", DenseLayer(n_in=3, n_out=4, activation="tanh"), "in")
                 .add_layer("g", DenseLayer(n_in=3, n_out=4, activation="identity"), "in")
                 .add_vertex("gate", vertex, "x", "g")
                 .add_layer("out", OutputLayer(n_in=4, n_out=2, activation="softmax"), "gate")
                 .set_outputs("out"), **kw)


def test_a_custom_vertex_with_a_parameter_trains_and_checks(rng):
    for mode in MODES:
        g = gated(Gate(), training_workspace_mode=mode)
        assert "gate_c" in g.param_table()
        check_gradients(g, DataSet(rng.standard_normal((5, 3)), np.eye(2)[[0, 1, 1, 0, 1]]))


class Leaky(GraphVertex):
    max_inputs = 1

    def activate(self, inputs, training, mgr):
        out = mgr.create(ArrayType.FF_WORKING_MEM, inputs[0].shape, dtype=inputs[0].dtype)
        return ndws.multiply(inputs[0], 2.0, out=out)


class TwoForOne(GraphVertex):
    min_inputs = max_inputs = 2

    def activate(self, inputs, training, mgr):
        return mgr.dup(ArrayType.ACTIVATIONS, inputs[0])

    def backprop_gradient(self, epsilon, mgr):
        return {}, [mgr.dup(ArrayType.ACTIVATION_GRAD, epsilon)]


class Shared(TwoForOne):
    def activate(self, inputs, training, mgr):
        return mgr.dup(ArrayType.ACTIVATIONS, ndws.add(inputs[0], inputs[1]))

    def backprop_gradient(self, epsilon, mgr):
        e = mgr.dup(ArrayType.ACTIVATION_GRAD, epsilon)
        return {}, [e, e]                              # one array for both inputs


def test_custom_vertex_mistakes_name_the_vertex(rng):
    x, y = rng.standard_normal((4, 3)), np.eye(2)[[0, 1, 1, 0]]
    leaky = graph(lambda b: b.add_inputs("in")
                  .add_layer("d", DenseLayer(n_in=3, n_out=4), "in")
                  .add_vertex("leak", Leaky(), "d")
                  .add_layer("out", OutputLayer(n_in=4, n_out=2, activation="softmax"), "leak")
                  .set_outputs("out"), training_workspace_mode="SEPARATE")
    with pytest.raises(ndws.WorkspaceError, match=r'^vertices\["leak"\] \(Leaky\).activate: '
                                                  r'array \(ACTIVATIONS\) workspace validation '
                                                  r'failed.*WS_ALL_LAYERS_ACT.*'
                                                  r'WS_LAYER_WORKING_MEM'):
        leaky.fit(DataSet(x, y))
    assert leaky.iteration == 0 and ndws.current_workspace() is None
    two = gated(TwoForOne())
    with pytest.raises(ValueError, match=r'vertices\["gate"\] \(TwoForOne\).backprop_gradient '
                                         r'returned 1 epsilons for its 2 inputs'):
        two.fit(DataSet(x, y))
    # one epsilon array handed to both inputs is copied, not summed into twice
    shared = gated(Shared())
    check_gradients(shared, DataSet(x, y))


# -- hostile input --------------------------------------------------------------------------------

def test_wrong_inputs_and_labels_are_refused_by_name(rng):
    g = ComputationGraph(two_headed())
    g.init()
    mds = two_headed_data(rng, 4)
    a, b = mds.features
    with pytest.raises(ValueError, match=r"^inputs: the graph has 2 inputs \(a, b\), got 1 "
                                         r"array$"):
        g.output(a)
    with pytest.raises(ValueError, match=r'inputs\[0\] \(input "a"\): expected 4 features \(the '
                                         r'input type of "a"\), got 5'):
        g.output(b, a)                                   # the wrong order
    with pytest.raises(ValueError, match="the inputs have different numbers of examples: a 4, "
                                         "b 3"):
        g.output(a, b[:3])
    with pytest.raises(TypeError, match=r'inputs\[1\] \(input "b"\): expected an array of '
                                        r'numbers, got dtype <U1'):
        g.output(a, np.array([["x"] * 5] * 4))
    with pytest.raises(ValueError, match=r"inputs\[0\].*expected a 2-d array"):
        g.output(a[0], b[0])
    with pytest.raises(ValueError, match=r"^labels: the graph has 2 outputs \(cls, reg\), got 1 "
                                         r"labels array$"):
        g.fit([a, b], [mds.labels[0]])
    with pytest.raises(ValueError, match=r"Cannot train ComputationGraph network with multiple "
                                         r"inputs or outputs using a DataSet"):
        g.fit(DataSet(a, mds.labels[0]))
    with pytest.raises(ValueError, match=r"labels\[1\]: 3 rows for 4 examples"):
        g.fit([a, b], [mds.labels[0], mds.labels[1][:3]])
    with pytest.raises(ValueError, match=r"^fit: no examples \(data has 0 rows\)$"):
        g.fit([a[:0], b[:0]], [mds.labels[0][:0], mds.labels[1][:0]])
    with pytest.raises(TypeError, match=r"data: item 1 is a str, not a MultiDataSet"):
        g.fit([mds, "batch"])
    with pytest.raises(ValueError, match=r"epochs: expected an int >= 1, got 0"):
        g.fit(mds, epochs=0)
    assert g.iteration == 1 and g.epoch == 0        # the first batch of the bad list trained
    nan = MultiDataSet([np.full((4, 4), np.nan, np.float32), b], mds.labels)
    assert np.isnan(g.output(*nan.features)[0].numpy()).all()
    with pytest.raises(TypeError, match="conf: expected an ndws.nn.ComputationGraphConfiguration"):
        ComputationGraph(MultiLayerConfiguration([DenseLayer(n_in=1, n_out=1)]))
    with pytest.raises(RuntimeError, match="ComputationGraph: call init\\(\\) first"):
        ComputationGraph(two_headed()).output(a, b)


def test_an_output_that_is_not_an_output_layer_cannot_be_trained(rng):
    g = graph(lambda b: b.add_inputs("in")
              .add_layer("d", DenseLayer(n_in=2, n_out=2), "in")
              .add_vertex("s", ScaleVertex(2.0), "d")
              .set_outputs("s"))
    x = rng.standard_normal((3, 2))
    np.testing.assert_allclose(g.output(x)[0].numpy(),
                               2 * g.feed_forward(x)["d"].numpy(), rtol=1e-15)
    with pytest.raises(ValueError, match=r'output "s" \(ScaleVertex\) is not an output layer'):
        g.fit(DataSet(x, x))


def test_one_graph_serves_one_thread_at_a_time(rng):
    mds = two_headed_data(rng)
    g = ComputationGraph(two_headed())
    g.init()
    inside, go = threading.Event(), threading.Event()

    class Hold(TrainingListener):
        def on_gradient_calculation(self, model):
            inside.set()
            go.wait()
    g.set_listeners(Hold())
    t = threading.Thread(target=g.fit, args=([mds],), daemon=True)
    t.start()
    inside.wait()
    try:
        with pytest.raises(RuntimeError, match=r"ComputationGraph.output: the network is in use "
                                               r"by another thread \(ComputationGraph.fit\)"):
            g.output(*mds.features)
    finally:
        go.set()
        t.join()
    assert g.iteration == 1
    assert os.environ.get("NDWS_NEVER") is None


@pytest.mark.parametrize("mode", MODES)
def test_a_chain_of_dense_layers_trains_on_the_compiled_iteration_to_the_same_bits(mode):
    x, y = load_digits()
    x = (x[:256] / 16.0).astype(np.float32)
    onehot = np.eye(10, dtype=np.float32)[y[:256]]
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=64, n_out=32, activation="relu"), DenseLayer(n_out=16),
         OutputLayer(n_out=10, activation="softmax")], seed=3, updater=Adam(1e-2),
        activation="tanh", training_workspace_mode=mode, inference_workspace_mode=mode))
    net.init()
    g = net.to_computation_graph()
    assert g._dense_plan is not None and net._dense_plan is not None

    class Seen(TrainingListener):
        names = None

        def on_forward_pass(self, model, activations):
            self.names = list(activations)

    seen = Seen()
    g.set_listeners(seen)
    for _ in range(2):
        net.fit(x, y[:256], batch_size=32)
        g.fit([x], [onehot], batch_size=32)
    np.testing.assert_array_equal(g.params().numpy(), net.params().numpy())
    assert g.score() == net.score()
    assert seen.names == ["in", "0", "1", "2"]
    # a mask takes the general path, which computes the same values
    mask = np.ones((32, 1), np.float32)
    mask[:4] = 0
    a, b = net.clone(), g.clone()
    a.fit(DataSet(x[:32], onehot[:32], None, mask))
    b.fit(MultiDataSet([x[:32]], [onehot[:32]], None, [mask]))
    np.testing.assert_allclose(b.params().numpy(), a.params().numpy(), rtol=1e-6, atol=1e-7)


def test_separate_plans_within_a_fifth_of_the_minimal_live_set():
    # the residual network of bench_graph (smaller): a block's input is read twice, so the
    # pool holds three epsilon workspaces whatever the depth; the plan's SEPARATE training
    # layout is within 1.2x the widest cut's minimal live set and far below SINGLE's
    from ndws.nn import ActivationLayer, GlobalPoolingLayer
    from ndws.nn.graph.memory import minimal_live_set, widest_cut
    for blocks in (1, 3, 6):
        b = (ComputationGraphConfiguration.builder(seed=1, activation="relu",
                                                   convolution_mode="Same")
             .add_inputs("image")
             .add_layer("stem", ConvolutionLayer(n_out=4, kernel_size=(3, 3)), "image"))
        prev = "stem"
        for k in range(blocks):
            b.add_layer(f"a{k}", ConvolutionLayer(n_out=4, kernel_size=(3, 3)), prev)
            b.add_layer(f"c{k}", ConvolutionLayer(n_out=4, kernel_size=(3, 3),
                                                  activation="identity"), f"a{k}")
            b.add_vertex(f"add{k}", ElementWiseVertex("ADD"), f"c{k}", prev)
            b.add_layer(f"b{k}", ActivationLayer(activation="relu"), f"add{k}")
            prev = f"b{k}"
        b.add_layer("pool", GlobalPoolingLayer(pooling_type="AVG"), prev)
        b.add_layer("out", OutputLayer(n_out=3, activation="softmax"), "pool")
        g = ComputationGraph(b.set_outputs("out")
                             .set_input_types(InputType.convolutional(6, 6, 2)).build())
        g.init()
        nodes = [n for n in g._nodes if n.obj is not None]
        assert widest_cut(nodes, True) == 3 and widest_cut(nodes, False) == 3
        report = g.memory_report(8)
        live = minimal_live_set(nodes, g._memory_uses(8, True, 4), True)
        separate = sum(report.workspace_bytes(ndws.WorkspaceMode.SEPARATE, True).values())
        single = sum(report.workspace_bytes(ndws.WorkspaceMode.SINGLE, True).values())
        assert live <= separate <= 1.2 * live
        assert separate < single


def test_fit_shuffles_and_validates_as_the_network_does():
    x, y = load_digits()
    x = (x / 16.0).astype(np.float32)
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=64, n_out=32, activation="relu"),
         OutputLayer(n_out=10, activation="softmax")], seed=3, updater=Adam(1e-2)))
    net.init()
    g = net.to_computation_graph()
    h1 = net.fit(x[:512], y[:512], batch_size=32, epochs=2, shuffle=True,
                 validation_data=(x[512:700], y[512:700]), progress=False)
    h2 = g.fit([x[:512]], [y[:512]], batch_size=32, epochs=2, shuffle=True,
               validation_data=([x[512:700]], [y[512:700]]), progress=False)
    np.testing.assert_array_equal(g.params().numpy(), net.params().numpy())
    assert h2.validation_scores == h1.validation_scores
    assert h2.validation_accuracy == h1.validation_accuracy
    with pytest.raises(ValueError, match="shuffle: only with features and labels arrays"):
        g.fit(MultiDataSet([x[:8]], [np.eye(10)[y[:8]]]), shuffle=True)
    with pytest.raises(ValueError, match="seed: only with shuffle=True"):
        g.fit([x[:8]], [y[:8]], seed=1)
    with pytest.raises(TypeError, match="validation_data: a generator can be read only once"):
        g.fit([x[:8]], [y[:8]], validation_data=(d for d in []))
