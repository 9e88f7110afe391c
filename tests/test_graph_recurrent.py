"""ComputationGraph with recurrent layers: a MultiLayerNetwork of LSTMs and its
to_computation_graph() training to the same bits (standard and truncated BPTT, with masks),
rnn_time_step on a graph against the network's and against a whole-sequence output, the carried
state saved by vertex name, a two-input graph (an LSTM over a sequence, a dense layer over side
features), and hostile input."""
import numpy as np
import pytest

import ndws
from ndws.data import DataSet, MultiDataSet
from ndws.nn import (LSTM, Adam, BackpropType, ComputationGraph,
                     ComputationGraphConfiguration, DenseLayer, DuplicateToTimeSeriesVertex,
                     InputType, LastTimeStep, LastTimeStepVertex, MultiLayerConfiguration,
                     MultiLayerNetwork, OutputLayer, RnnOutputLayer, SimpleRnn)

MODES = ["NONE", "SINGLE", "SEPARATE"]


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


def sequences(rng, n=8, size=3, steps=12, classes=2):
    x = rng.standard_normal((n, size, steps)).astype(np.float32)
    y = np.zeros((n, classes, steps), np.float32)
    y[np.arange(n)[:, None], (x[:, 0] > 0).astype(int), np.arange(steps)[None, :]] = 1
    return x, y


def rnn_net(mode="SEPARATE", tbptt=False, **kw):
    conf = MultiLayerConfiguration(
        [LSTM(n_out=5, activation="tanh"), SimpleRnn(n_out=4, activation="tanh"),
         RnnOutputLayer(n_out=2, activation="softmax")],
        seed=7, updater=Adam(1e-2), input_type=InputType.recurrent(3),
        training_workspace_mode=mode, inference_workspace_mode=mode,
        **(dict(backprop_type="TRUNCATED_BPTT", tbptt_fwd_length=5, tbptt_back_length=3)
           if tbptt else {}), **kw)
    net = MultiLayerNetwork(conf)
    net.init()
    return net


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tbptt", [False, True])
def test_a_recurrent_network_and_its_graph_train_to_the_same_bits(mode, tbptt, rng):
    x, y = sequences(rng)
    mask = np.ones((8, 12), np.float32)
    mask[:3, 9:] = 0                                   # three shorter sequences
    net = rnn_net(mode, tbptt)
    g = net.to_computation_graph()
    assert g.conf.backprop_type is net.conf.backprop_type
    for _ in range(3):
        net.fit(DataSet(x, y, mask, mask))
        g.fit(MultiDataSet([x], [y], [mask], [mask]))
    np.testing.assert_array_equal(g.params().numpy(), net.params().numpy())
    assert g.iteration == net.iteration == (3 * 3 if tbptt else 3)
    assert g.score() == net.score()
    np.testing.assert_array_equal(g.output(x, masks=[mask])[0].numpy(),
                                  net.output(x, features_mask=mask).numpy())


def test_rnn_time_step_on_a_graph_equals_the_network_and_the_whole_sequence(rng):
    x, _ = sequences(rng, n=2)
    net = rnn_net()
    g = net.to_computation_graph()
    whole = g.output(x)[0].numpy()
    steps = [g.rnn_time_step(x[:, :, t])[0].numpy() for t in range(12)]
    ref = [net.rnn_time_step(x[:, :, t]).numpy() for t in range(12)]
    assert steps[0].shape == (2, 2)                    # one step in, one step out
    np.testing.assert_array_equal(np.stack(steps, 2), np.stack(ref, 2))
    np.testing.assert_allclose(np.stack(steps, 2), whole, rtol=1e-5, atol=1e-6)
    state = g.rnn_get_previous_state("0")
    assert sorted(state) == ["prevAct", "prevMem"] and state["prevAct"].shape == (2, 5)
    g.rnn_clear_previous_state()
    again = g.rnn_time_step(x[:, :, :4])[0].numpy()    # several steps at once
    np.testing.assert_allclose(again, whole[:, :, :4], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r'vertices\["2"\] \(RnnOutputLayer\) is not a '
                                         r'recurrent layer'):
        g.rnn_get_previous_state("2")
    with pytest.raises(TypeError, match="expected a vertex name"):
        g.rnn_get_previous_state(0)
    with pytest.raises(ValueError, match="no vertex named 'nope'"):
        g.rnn_set_previous_state("nope", {})


def test_the_carried_state_is_saved_by_vertex_name(rng, tmp_path):
    x, _ = sequences(rng, n=2)
    g = rnn_net().to_computation_graph()
    g.rnn_time_step(x[:, :, :5])
    g.save(tmp_path / "g.zip", save_rnn_state=True)
    back = ComputationGraph.load(tmp_path / "g.zip")
    for name in ("0", "1"):
        for k, v in g.rnn_get_previous_state(name).items():
            np.testing.assert_array_equal(back.rnn_get_previous_state(name)[k].numpy(),
                                          v.numpy())
    np.testing.assert_array_equal(back.rnn_time_step(x[:, :, 5])[0].numpy(),
                                  g.rnn_time_step(x[:, :, 5])[0].numpy())
    with pytest.raises(ValueError, match="holds a ComputationGraph, not a MultiLayerNetwork: "
                                         "load it with ComputationGraph.load"):
        MultiLayerNetwork.load(tmp_path / "g.zip")


def two_input_graph(mode="SEPARATE", **kw):
    conf = (ComputationGraphConfiguration.builder(seed=3, updater=Adam(1e-2),
                                                  training_workspace_mode=mode,
                                                  inference_workspace_mode=mode, **kw)
            .add_inputs("seq", "side")
            .add_layer("lstm", LSTM(n_out=6, activation="tanh"), "seq")
            .add_vertex("last", LastTimeStepVertex("seq"), "lstm")
            .add_layer("dense", DenseLayer(n_out=4, activation="relu"), "side")
            .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "last", "dense")
            .set_outputs("out")
            .set_input_types(InputType.recurrent(3), InputType.feed_forward(5))
            .build())
    g = ComputationGraph(conf)
    g.init()
    return g


@pytest.mark.parametrize("mode", MODES)
def test_a_two_input_graph_learns_in_every_mode_with_the_same_bits(mode, rng):
    x, _ = sequences(rng, n=16)
    side = rng.standard_normal((16, 5)).astype(np.float32)
    y = np.eye(2, dtype=np.float32)[(x[:, 0, -1] + side[:, 0] > 0).astype(int)]
    mask = np.ones((16, 12), np.float32)
    mask[::2, 8:] = 0
    ref = two_input_graph("NONE")
    g = two_input_graph(mode)
    mds = MultiDataSet([x, side], [y], [mask, None])
    first = g.score(mds)
    for _ in range(30):
        g.fit(mds)
        ref.fit(mds)
    assert g.score(mds) < first
    np.testing.assert_array_equal(g.params().numpy(), ref.params().numpy())
    # a masked sequence's last step is its last unmasked one
    out = g.feed_forward(x, side, masks=[mask, None])
    lstm = out["lstm"].numpy()
    np.testing.assert_array_equal(out["last"].numpy()[0], lstm[0, :, 7])
    np.testing.assert_array_equal(out["last"].numpy()[1], lstm[1, :, 11])


def test_truncated_bptt_on_a_two_input_graph_and_its_errors(rng):
    x, _ = sequences(rng, n=4)
    side = rng.standard_normal((4, 5)).astype(np.float32)
    conf = (ComputationGraphConfiguration.builder(seed=3, updater=Adam(1e-2))
            .backprop_type("TruncatedBPTT").tbptt_fwd_length(4).tbptt_back_length(4)
            .add_inputs("seq", "side")
            .add_layer("lstm", LSTM(n_out=6, activation="tanh"), "seq")
            .add_layer("dense", DenseLayer(n_out=6, activation="relu"), "side")
            .add_vertex("dup", DuplicateToTimeSeriesVertex("seq"), "dense")
            .add_layer("out", RnnOutputLayer(n_out=2, activation="softmax"), "lstm", "dup")
            .set_outputs("out")
            .set_input_types(InputType.recurrent(3), InputType.feed_forward(5))
            .build())
    assert conf.backprop_type is BackpropType.TRUNCATED_BPTT
    g = ComputationGraph(conf)
    g.init()
    y = np.zeros((4, 2, 12), np.float32)
    y[:, 0] = 1
    g.fit(MultiDataSet([x, side], [y]))
    assert g.iteration == 3                            # 12 steps in segments of 4
    with pytest.raises(ValueError, match="different lengths"):
        g.fit(MultiDataSet([x, side], [y[:, :, :10]]))
    with pytest.raises(ValueError, match="Cannot do truncated BPTT with non-3d"):
        g.fit(MultiDataSet([x[:, :, 0], side], [y[:, :, 0]]))
    # TBPTT refuses a layer that needs the whole sequence, naming the vertex
    with pytest.raises(ValueError, match=r'layer "last" of type LastTimeStep'):
        (ComputationGraphConfiguration.builder().backprop_type("TRUNCATED_BPTT")
         .add_inputs("seq").add_layer("last", LastTimeStep(LSTM(n_out=3)), "seq")
         .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "last")
         .set_outputs("out")
         .set_input_types(InputType.recurrent(3)).build())


def test_rnn_time_step_refuses_a_graph_without_time_series(rng):
    conf = (ComputationGraphConfiguration.builder(seed=1).add_inputs("a")
            .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "a").set_outputs("out")
            .set_input_types(InputType.feed_forward(3)).build())
    g = ComputationGraph(conf)
    g.init()
    with pytest.raises(ValueError, match="no input of the graph is a time series"):
        g.rnn_time_step(np.zeros((1, 3), np.float32))
    g2 = two_input_graph()
    with pytest.raises(ValueError, match="the graph has 2 inputs"):
        g2.rnn_time_step(np.zeros((1, 3), np.float32))


def test_hostile_masks_are_refused_by_name_before_anything_moves(rng):
    g = two_input_graph()
    x, _ = sequences(rng, n=4)
    side = rng.standard_normal((4, 5)).astype(np.float32)
    y = np.eye(2, dtype=np.float32)[[0, 1, 0, 1]]
    before = g.params().numpy().copy()
    nan_mask = np.ones((4, 12), np.float32)
    nan_mask[1, 3] = np.nan
    cases = [
        (MultiDataSet([x, side], [y], [nan_mask, None]), ValueError,
         r"features_masks\[0\]: holds nan at \(1, 3\)"),
        (MultiDataSet([x, side], [y], None,
                      [np.array([[1], [np.inf], [1], [1]], np.float32)]), ValueError, r"labels_masks\[0\]: holds inf at \(1, 0\)"),
        (MultiDataSet([x, side], [y], [None, np.ones((4, 5), np.float32)]), ValueError,
         r"features_masks\[1\]: expected shape \(4,\) \(one per example\)"),
    ]
    for data, exc, match in cases:
        with pytest.raises(exc, match=match):
            g.fit(data)
        with pytest.raises(exc, match=match):
            g.score(data)
    with pytest.raises(ValueError, match=r"masks\[0\]: expected shape \(4, 12\)"):
        g.output(x, side, masks=[np.ones((4, 3), np.float32), None])
    with pytest.raises(TypeError, match=r"masks\[0\]"):
        g.output(x, side, masks=[np.array([["a"] * 12] * 4), None])
    np.testing.assert_array_equal(g.params().numpy(), before)
    assert g.iteration == 0


@pytest.mark.parametrize("mode", ["SINGLE", "SEPARATE"])
def test_a_graph_plans_its_workspaces_for_the_sequence_length(mode, rng):
    g = two_input_graph(mode)
    unknown = g.memory_report(16)
    assert not unknown.complete and "unknown" in str(unknown)
    report = g.memory_report(16, sequence_length=12)
    assert report.complete and "sequences of 12 steps" in str(report)
    assert report.workspaces(ndws.WorkspaceMode[mode])["WS_RNN_LOOP_WORKING_MEM"] > 0
    longer = g.memory_report(16, sequence_length=24)
    assert longer.total_bytes(ndws.WorkspaceMode[mode]) > report.total_bytes(
        ndws.WorkspaceMode[mode])
    x, _ = sequences(rng, n=16)
    side = rng.standard_normal((16, 5)).astype(np.float32)
    y = np.eye(2, dtype=np.float32)[rng.integers(0, 2, 16)]
    g.fit(MultiDataSet([x, side], [y]))            # presized from the plan: no spill
    held = {ws.id: ws for ws in
            ndws.get_workspace_manager().get_all_workspaces_for_current_thread()}
    planned = report.workspace_bytes(ndws.WorkspaceMode[mode], True)
    for name, nbytes in planned.items():
        assert held[name].spilled_size == 0 and held[name].current_size >= nbytes, name
    with pytest.raises(ValueError, match="sequence_length: expected an int in"):
        g.memory_report(16, sequence_length=0)
