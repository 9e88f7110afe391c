"""The state rnn_time_step carries, under hostile use: a call that fails moves no layer's state
(both network types, both paths), LastTimeStep stepped, wrappers' state set and saved, states
of any batch size round-tripped through save/load, states beyond the network's dtype refused,
masks of complex or negative values refused before anything moves, and one-step inputs
refused in the caller's terms."""
import numpy as np
import pytest

import ndws
from ndws.data.dataset import DataSet
from ndws.nn import (LSTM, Bidirectional, FrozenLayer, InputType, LastTimeStep, MaskZeroLayer,
                     MultiLayerConfiguration, MultiLayerNetwork, OutputLayer, RnnOutputLayer,
                     SimpleRnn)

R = InputType.recurrent


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


def net_of(layers, input_type=None, **kw):
    net = MultiLayerNetwork(MultiLayerConfiguration(layers, input_type=input_type or R(3),
                                                    seed=1, **kw))
    net.init()
    return net


def states(net, indices):
    # every listed layer's state as NumPy arrays (copies)
    return {i: {k: v.numpy() for k, v in net.rnn_get_previous_state(i).items()}
            for i in indices}


def assert_same_states(a, b):
    assert a.keys() == b.keys()
    for i in a:
        assert a[i].keys() == b[i].keys()
        for k in a[i]:
            np.testing.assert_array_equal(a[i][k], b[i][k])


# -- a call that fails moves no state ---------------------------------------------------------

@pytest.mark.parametrize("steps", [None, 1, 4])
def test_a_failing_layer_above_leaves_the_lower_layers_state(steps, rng):
    # layer 0 steps, then the Bidirectional refuses: layer 0 keeps the state it had (none, or
    # the one an earlier call left), on the one-step path and the general one
    net = net_of([LSTM(n_out=4), Bidirectional(LSTM(n_out=4)),
                  RnnOutputLayer(n_out=2, activation="softmax")])
    x = rng.standard_normal((2, 3) if steps is None else (2, 3, steps)).astype(np.float32)
    with pytest.raises(ValueError, match="Cannot RnnTimeStep bidirectional layers"):
        net.rnn_time_step(x)
    assert net.rnn_get_previous_state(0) == {}
    before = {"prevAct": rng.standard_normal((2, 4)), "prevMem": rng.standard_normal((2, 4))}
    net.rnn_set_previous_state(0, before)
    kept = states(net, [0])
    with pytest.raises(ValueError, match="Cannot RnnTimeStep bidirectional layers"):
        net.rnn_time_step(x)
    assert_same_states(states(net, [0]), kept)


@pytest.mark.parametrize("one_step", [True, False])
def test_a_batch_size_mismatch_above_leaves_the_layers_below(one_step, rng):
    net = net_of([LSTM(n_out=4), SimpleRnn(n_out=3), RnnOutputLayer(n_out=2,
                                                                    activation="softmax")])
    net.rnn_set_previous_state(1, {"prevAct": np.ones((5, 3))})    # for 5 examples
    x = rng.standard_normal((2, 3) if one_step else (2, 3, 3)).astype(np.float32)
    with pytest.raises(ValueError, match=r"SimpleRnn \(layer index = 1\): Invalid RNN previous "
                                         r"state .* \(the stored state is for 5 examples, the "
                                         r"input has 2"):
        net.rnn_time_step(x)
    assert net.rnn_get_previous_state(0) == {}
    np.testing.assert_array_equal(net.rnn_get_previous_state(1)["prevAct"].numpy(),
                                  np.ones((5, 3)))
    # and the network goes on as if the call had not been made
    net.rnn_clear_previous_state()
    fresh = net_of([LSTM(n_out=4), SimpleRnn(n_out=3),
                    RnnOutputLayer(n_out=2, activation="softmax")])
    np.testing.assert_array_equal(net.rnn_time_step(x).numpy(), fresh.rnn_time_step(x).numpy())


def test_a_graph_that_fails_moves_no_state(rng):
    net = net_of([LSTM(n_out=4), SimpleRnn(n_out=3), RnnOutputLayer(n_out=2,
                                                                    activation="softmax")])
    g = net.to_computation_graph()
    g.rnn_set_previous_state("1", {"prevAct": np.ones((5, 3))})
    x = rng.standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(ValueError, match="the stored state is for 5 examples"):
        g.rnn_time_step(x)
    assert g.rnn_get_previous_state("0") == {}


# -- LastTimeStep stepped ---------------------------------------------------------------------

def test_rnn_time_step_through_last_time_step_gives_the_last_steps_rows(rng):
    layers = [LastTimeStep(LSTM(n_out=4, activation="tanh")),
              OutputLayer(n_out=2, activation="softmax")]
    net, whole = net_of(layers), net_of(layers)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    first = net.rnn_time_step(x[:, :, 0])                  # one step: the one-step input
    assert first.shape == (2, 2)
    rest = net.rnn_time_step(x[:, :, 1:])                  # the other four at once
    np.testing.assert_array_equal(rest.numpy(), whole.output(x).numpy())
    np.testing.assert_array_equal(first.numpy(), whole.output(x[:, :, :1]).numpy())
    assert net.rnn_get_previous_state(0)["prevAct"].shape == (2, 4)


# -- wrappers' state --------------------------------------------------------------------------

def test_a_frozen_lstm_state_is_set_and_loaded(rng, tmp_path):
    conf = MultiLayerConfiguration([FrozenLayer(LSTM(n_out=4)),
                                    RnnOutputLayer(n_out=2, activation="softmax")],
                                   input_type=R(3), seed=1)
    a = MultiLayerNetwork(conf)
    a.init()
    x = rng.standard_normal((1, 3)).astype(np.float32)
    a.rnn_time_step(x)
    a.save(tmp_path / "f.zip", save_rnn_state=True)
    loaded = MultiLayerNetwork.load(tmp_path / "f.zip")      # no pass has run on it yet
    assert_same_states(states(loaded, [0]), states(a, [0]))
    np.testing.assert_array_equal(loaded.rnn_time_step(x).numpy(), a.rnn_time_step(x).numpy())
    b = MultiLayerNetwork(conf)
    b.init(a.params())
    state = {"prevAct": rng.standard_normal((1, 4)), "prevMem": rng.standard_normal((1, 4))}
    b.rnn_set_previous_state(0, state)
    np.testing.assert_array_equal(b.rnn_get_previous_state(0)["prevMem"].numpy(),
                                  state["prevMem"].astype(np.float32))


@pytest.mark.parametrize("wrap", [MaskZeroLayer, FrozenLayer, LastTimeStep])
def test_a_network_with_a_nested_bidirectional_saves_its_state(wrap, rng, tmp_path):
    last = OutputLayer if wrap is LastTimeStep else RnnOutputLayer
    below = FrozenLayer(LSTM(n_out=3)) if wrap is FrozenLayer else LSTM(n_out=3)
    net = net_of([below, wrap(Bidirectional(LSTM(n_out=4))),
                  last(n_out=2, activation="softmax")])
    net.rnn_set_previous_state(0, {"prevAct": np.ones((2, 3)), "prevMem": np.zeros((2, 3))})
    net.save(tmp_path / "m.zip", save_rnn_state=True)
    assert_same_states(states(MultiLayerNetwork.load(tmp_path / "m.zip"), [0]),
                       states(net, [0]))


def test_any_state_save_writes_load_reads(rng, tmp_path):
    # a step of 0 rows keeps a state of 0 rows; layers set one by one hold different batch sizes
    net = net_of([LSTM(n_out=4), SimpleRnn(n_out=3), RnnOutputLayer(n_out=2,
                                                                    activation="softmax")])
    net.rnn_time_step(np.zeros((0, 3), np.float32))
    net.save(tmp_path / "zero.zip", save_rnn_state=True)
    assert_same_states(states(MultiLayerNetwork.load(tmp_path / "zero.zip"), [0, 1]),
                       states(net, [0, 1]))
    assert states(net, [0])[0]["prevAct"].shape == (0, 4)
    net.rnn_set_previous_state(1, {"prevAct": rng.standard_normal((5, 3))})
    net.save(tmp_path / "mixed.zip", save_rnn_state=True)
    assert_same_states(states(MultiLayerNetwork.load(tmp_path / "mixed.zip"), [0, 1]),
                       states(net, [0, 1]))


def test_a_state_beyond_the_dtype_is_refused_and_nothing_moves(rng):
    net = net_of([LSTM(n_out=4), RnnOutputLayer(n_out=2, activation="softmax")])
    net.rnn_set_previous_state(0, {"prevAct": np.ones((1, 4)), "prevMem": np.ones((1, 4))})
    with pytest.raises(ValueError, match=r"state\['prevAct'\]: holds values beyond the range "
                                         r"of the network's float32 \(at most 3.403e\+38"):
        net.rnn_set_previous_state(0, {"prevAct": np.full((1, 4), 1e300),
                                       "prevMem": np.zeros((1, 4))})
    np.testing.assert_array_equal(net.rnn_get_previous_state(0)["prevAct"].numpy(),
                                  np.ones((1, 4)))


# -- masks ------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["labels_mask", "features_mask"])
@pytest.mark.parametrize("bad, error, message", [
    (np.full((2, 4), 1 + 5j), TypeError, r"expected numbers \(0 masks, 1 keeps\), got dtype "
                                         r"complex128"),
    (np.where(np.eye(2, 4) > 0, -1.0, 1.0), ValueError, r"holds -1.0 at \(0, 0\): a mask must "
                                                        r"be finite and not negative"),
])
def test_masks_of_complex_or_negative_values_are_refused_before_anything_moves(
        which, bad, error, message, rng):
    net = net_of([LSTM(n_out=4), RnnOutputLayer(n_out=2, activation="softmax")])
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    y = np.zeros((2, 2, 4), np.float32)
    y[:, 0] = 1
    masks = {"features_mask": None, "labels_mask": None, which: bad}
    ds = DataSet(x, y, masks["features_mask"], masks["labels_mask"])
    params = net.params().numpy().copy()
    for call in (net.score, net.fit):
        with pytest.raises(error, match=f"{which}: {message}"):
            call(ds)
    np.testing.assert_array_equal(net.params().numpy(), params)
    assert net.iteration == 0


# -- one-step input, in the caller's terms ----------------------------------------------------

def test_a_wrong_one_step_is_named_as_given():
    net = net_of([LSTM(n_out=4), RnnOutputLayer(n_out=2, activation="softmax")])
    with pytest.raises(ValueError, match=r"^x: one step of each sequence is \(n_samples, "
                                         r"size=3\), got shape \(4, 5\)$"):
        net.rnn_time_step(np.ones((4, 5), np.float32))
    fixed = net_of([LSTM(n_out=4), RnnOutputLayer(n_out=2, activation="softmax")],
                   input_type=R(3, 12))
    with pytest.raises(ValueError, match=r"^x: the input type InputType.recurrent\(3, 12\) "
                                         r"fixes the series at 12 steps, so rnn_time_step takes "
                                         r"all 12 at once, not one step of shape \(4, 3\)$"):
        fixed.rnn_time_step(np.ones((4, 3), np.float32))
    assert fixed.rnn_time_step(np.ones((4, 3, 12), np.float32)).shape == (4, 2, 12)
    g = net.to_computation_graph()
    with pytest.raises(ValueError, match=r'^inputs\[0\] \(input "in"\): one step of each '
                                         r'sequence is \(n_samples, size=3\), got shape'):
        g.rnn_time_step(np.ones((4, 5), np.float32))
