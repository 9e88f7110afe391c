"""Recurrent networks end to end (ndws/nn/network.py): rnn_time_step and the stored state,
truncated BPTT (ndws' textbook form), every workspace mode and the memory plan, the loop
workspace per time step, save/load, ParallelInference, evaluations over masked time series."""
import numpy as np
import pytest

import ndws
import ndws.nn.functional as F
from cnn_reference import check_modes
from ndws.data.dataset import DataSet
from ndws.evaluation import Evaluation, RegressionEvaluation, ROCMultiClass
from ndws.nn import (LSTM, Adam, Bidirectional, BackpropType, DenseLayer, GravesLSTM,
                     InputType, LastTimeStep, MultiLayerConfiguration, MultiLayerNetwork,
                     OutputLayer, RnnLossLayer, RnnOutputLayer, Sgd, SimpleRnn)
from ndws.nn.listeners import TrainingListener
from ndws.parallel import ParallelInference


def char_like(mode="ENABLED", seed=3, steps=None, **kw):
    # two LSTM layers and a softmax at every step: DL4J's character model, small
    return MultiLayerConfiguration(
        [LSTM(n_out=6, activation="tanh"), LSTM(n_out=5, activation="tanh"),
         RnnOutputLayer(n_out=4, activation="softmax", loss_function="mcxent")],
        input_type=InputType.recurrent(3, steps), seed=seed, updater=Adam(1e-2),
        training_workspace_mode=mode, inference_workspace_mode=mode, **kw)


def net_of(conf):
    net = MultiLayerNetwork(conf)
    net.init()
    return net


def data(rng, n=4, steps=9, size=3, classes=4, dtype=np.float32):
    x = rng.standard_normal((n, size, steps)).astype(dtype)
    y = np.eye(classes, dtype=dtype)[rng.integers(0, classes, (n, steps))].transpose(0, 2, 1)
    return x, np.ascontiguousarray(y)


# -- rnn_time_step ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["one-step", "general"])
@pytest.mark.parametrize("fmt", ["NCW", "NWC"])
def test_rnn_time_step_equals_output(fmt, path, rng):
    # rnn_time_step of one step takes its own path (the layers' step runners): the same tests
    # run over both, and they give the same bits
    net = net_of(MultiLayerConfiguration(
        [GravesLSTM(n_out=6, activation="tanh"), SimpleRnn(n_out=5, activation="tanh"),
         DenseLayer(n_out=4, activation="tanh"), LSTM(n_out=4, activation="tanh", data_format=fmt),
         RnnOutputLayer(n_out=3, activation="softmax")],
        input_type=InputType.recurrent(3, data_format=fmt), seed=1))
    if path == "general":
        net._one_step_path = lambda x: None
    x, _ = data(rng, n=2, steps=7)
    if fmt == "NWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 1))
    whole = net.output(x).numpy()
    steps = []
    for t in range(7):
        one = x[:, :, t] if fmt == "NCW" else x[:, t, :]
        y = net.rnn_time_step(one)
        assert y.shape == (2, 3) and not y.is_attached()
        steps.append(y.numpy())
    assert (net._step_plan is not None) == (path == "one-step")
    axis = 2 if fmt == "NCW" else 1
    np.testing.assert_allclose(np.stack(steps, axis), whole, atol=1e-6)
    other = net_of(net.conf)
    other.set_params(net.params())
    if path == "one-step":
        other._one_step_path = lambda x: None
    again = [other.rnn_time_step(x[:, :, t] if fmt == "NCW" else x[:, t, :]).numpy()
             for t in range(7)]
    np.testing.assert_array_equal(np.stack(again, axis), np.stack(steps, axis))
    # several steps at once continue the same sequences
    net.rnn_clear_previous_state()
    part = [net.rnn_time_step(x[:, :, a:b] if fmt == "NCW" else x[:, a:b]).numpy()
            for a, b in ((0, 3), (3, 4), (4, 7))]
    np.testing.assert_allclose(np.concatenate(part, axis), whole, atol=1e-6)


def test_state_is_detached_and_survives_workspace_resets(rng):
    net = net_of(char_like())
    x, _ = data(rng, n=2)
    whole = net.output(x).numpy()
    first = net.rnn_time_step(x[:, :, :4])
    state = net.rnn_get_previous_state(0)
    assert set(state) == {"prevAct", "prevMem"}
    assert not state["prevAct"].is_attached() and not net.layers[0]._state["prevAct"].is_attached()
    np.testing.assert_array_equal(state["prevAct"].numpy(), first.numpy()[:, :0, -1].T[:0].T
                                  if False else net.feed_forward(x[:, :, :4])[1].numpy()[:, :, -1])
    ndws.destroy_all_workspaces_for_current_thread()
    with ndws.workspace("OTHER"):
        rest = net.rnn_time_step(x[:, :, 4:])
    np.testing.assert_allclose(np.concatenate([first.numpy(), rest.numpy()], 2), whole,
                               atol=1e-6)
    # get / set: a copy in, a copy out
    saved = {k: v.numpy() for k, v in net.rnn_get_previous_state(1).items()}
    net.rnn_time_step(x[:, :, :1])
    net.rnn_set_previous_state(layer_index=1, state=saved)     # the names DL4J users read
    np.testing.assert_array_equal(net.rnn_get_previous_state(layer_index=1)["prevMem"].numpy(),
                                  saved["prevMem"])


def test_rnn_time_step_errors(rng):
    net = net_of(char_like())
    x, _ = data(rng, n=3)
    net.rnn_time_step(x[:, :, 0])
    with pytest.raises(ValueError, match=r"LSTM \(layer index = 0\): Invalid RNN previous state "
                                         r"\(last time step activations/initialization\): "
                                         r"rnnTimeStep with different minibatch size, or forgot "
                                         r"to call rnnClearPreviousState between batches\? "
                                         r"\(the stored state is for 3 examples, the input has "
                                         r"2"):
        net.rnn_time_step(x[:2, :, 0])
    net.rnn_clear_previous_state()
    assert net.rnn_time_step(x[:2, :, 0]).shape == (2, 4)
    with pytest.raises(ValueError, match=r"rnn_get_previous_state: layers\[2\] "
                                         r"\(RnnOutputLayer\) is not a recurrent layer"):
        net.rnn_get_previous_state(2)
    with pytest.raises(ValueError, match="layer_index 7 is not a layer index"):
        net.rnn_get_previous_state(7)
    with pytest.raises(ValueError, match=r"state\['prevAct'\]: expected shape \(n_samples, 6\)"):
        net.rnn_set_previous_state(0, {"prevAct": np.zeros((2, 5)), "prevMem": np.zeros((2, 6))})
    with pytest.raises(ValueError, match=r"expected the keys \['prevAct', 'prevMem'\]"):
        net.rnn_set_previous_state(0, {"prevAct": np.zeros((2, 6))})
    bi = net_of(MultiLayerConfiguration(
        [Bidirectional(LSTM(n_in=3, n_out=2)), RnnOutputLayer(n_out=2, activation="softmax")],
        seed=1))
    with pytest.raises(ValueError, match="Cannot RnnTimeStep bidirectional layers"):
        bi.rnn_time_step(x[:, :, 0])
    dense = net_of(MultiLayerConfiguration([DenseLayer(n_in=3, n_out=2)], seed=1))
    with pytest.raises(ValueError, match="the network's input is not a time series"):
        dense.rnn_time_step(x[:, :, 0])


def test_rnn_time_step_into_an_output_workspace(rng):
    net = net_of(char_like())
    x, _ = data(rng, n=2)
    with ndws.workspace("USER") as ws:
        y = net.rnn_time_step(x[:, :, 0], output_workspace=ws)
        assert y.workspace_id == "USER"


# -- truncated BPTT ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["NONE", "SEPARATE"])
def test_tbptt_full_length_is_standard_bptt(mode, rng):
    # DL4J's testTruncatedBPTTVsBPTT: fwd = back = T gives the standard gradients, bit for bit
    x, y = data(rng, steps=12)
    standard = net_of(char_like(mode))
    tbptt = net_of(char_like(mode, backprop_type=BackpropType.TRUNCATED_BPTT,
                             tbptt_fwd_length=12, tbptt_back_length=12))
    for _ in range(3):
        standard.fit(DataSet(x, y), progress=False)
        tbptt.fit(DataSet(x, y), progress=False)
    np.testing.assert_array_equal(standard.params().numpy(), tbptt.params().numpy())
    assert standard.score() == tbptt.score()
    assert all(not l._tbptt_state for l in tbptt.layers[:2])        # cleared after the batch


class Counting(TrainingListener):
    def __init__(self):
        self.iterations = []

    def iteration_done(self, model, iteration, epoch):
        self.iterations.append((iteration, model.last_batch_size))


def test_tbptt_segments_one_update_each(rng):
    x, y = data(rng, steps=11)
    net = net_of(char_like(backprop_type="TRUNCATED_BPTT", tbptt_fwd_length=4,
                           tbptt_back_length=3))
    listener = Counting()
    net.set_listeners(listener)
    history = net.fit([DataSet(x, y)] * 2, progress=False)
    # ceil(11 / 4) = 3 segments per batch: one iteration (update, listener call, record) each
    assert net.iteration == 6 and listener.iterations == [(i, 4) for i in range(6)]
    assert history.iterations == list(range(6)) and len(history.scores) == 6


def test_tbptt_is_textbook(rng):
    # a segment's backward pass starts from the state carried into it and its errors flow
    # back through the segment's last tbptt_back_length steps only: the second segment's
    # update equals the loops' gradient from that state with back_length 2 (DL4J restarts each
    # segment's backward from a zero state and ignores the back length)
    x, y = data(rng, n=2, steps=6, dtype=np.float64)
    conf = MultiLayerConfiguration(
        [LSTM(n_out=3, activation="tanh"), RnnLossLayer(activation="identity",
                                                         loss_function="mse")],
        input_type=InputType.recurrent(3), seed=2, updater=Sgd(0.5), dtype="float64",
        backprop_type="TRUNCATED_BPTT", tbptt_fwd_length=3, tbptt_back_length=2)
    y = y[:, :3]
    net = net_of(conf)
    p0 = net.params().numpy().copy()
    w0 = {k: v.numpy().copy() for k, v in net.layers[0].params.items()}
    net.fit(DataSet(x[:, :, :3], y[:, :, :3]), progress=False)        # one segment
    w1 = {k: v.numpy().copy() for k, v in net.layers[0].params.items()}
    net.rnn_clear_previous_state()
    # the state the first segment carried: its forward pass with the parameters before update
    _, h, c = F.lstm_forward(x[:, :, :3], w0["W"], w0["RW"], w0["b"], activation="tanh")
    full = net_of(conf)
    full.set_params(p0)
    full.fit(DataSet(x, y), progress=False)                            # two segments
    # the second segment by hand, from (h, c) with the parameters after the first update
    cache = np.empty(F.lstm_cache_shape(3, 2, 3, activation="tanh"))
    out, _, _ = F.lstm_forward(x[:, :, 3:], w1["W"], w1["RW"], w1["b"], h0=h, c0=c,
                               activation="tanh", cache=cache)
    dy = 2 * (out.numpy() - y[:, :, 3:]) / (3 * 2)                      # MSE: mean over 3 / batch
    _, dW, dRW, db, _, _ = F.lstm_backward(x[:, :, 3:], w1["W"], w1["RW"], cache, dy, h0=h,
                                           c0=c, activation="tanh", back_length=2)
    layer = full.layers[0]
    np.testing.assert_allclose(layer.params["W"].numpy(), w1["W"] - 0.5 * dW.numpy(), atol=1e-13)
    np.testing.assert_allclose(layer.params["RW"].numpy(), w1["RW"] - 0.5 * dRW.numpy(),
                               atol=1e-13)
    np.testing.assert_allclose(layer.params["b"].numpy().ravel(), w1["b"].ravel()
                               - 0.5 * db.numpy().ravel(), atol=1e-13)


def test_tbptt_bad_data(rng):
    net = net_of(char_like(backprop_type="TRUNCATED_BPTT", tbptt_fwd_length=4,
                           tbptt_back_length=4))
    x, y = data(rng, steps=8)
    before = net.params().numpy().copy()
    with pytest.raises(ValueError, match=r"fit: features and labels have different lengths "
                                         r"\(8 and 7 time steps\)"):
        net.fit(DataSet(x, y[:, :, :7]))
    np.testing.assert_array_equal(net.params().numpy(), before)
    assert net.iteration == 0


# -- workspaces ---------------------------------------------------------------------------------------

def test_every_workspace_mode_same_bits_and_the_plan(rng):
    # the loop workspace's cycle per step, the cache in FF_CACHE, the scratch in the working
    # memory: no spill after the plan, no heap allocation per iteration, the same bits
    x, y = data(rng, steps=9)
    check_modes(lambda mode: char_like(mode, steps=9), DataSet(x, y), x)


def test_masked_variable_length_modes(rng):
    x, y = data(rng, steps=9)
    m = np.ones((4, 9), np.float32)
    m[1, 5:] = 0
    m[3, 2:] = 0
    conf = lambda mode: MultiLayerConfiguration(                           # noqa: E731
        [LSTM(n_out=6, activation="tanh"), LastTimeStep(SimpleRnn(n_out=5, activation="tanh")),
         OutputLayer(n_out=4, activation="softmax")],
        input_type=InputType.recurrent(3, 9), seed=2, updater=Adam(1e-2),
        training_workspace_mode=mode, inference_workspace_mode=mode)
    check_modes(conf, DataSet(x, y[:, :, 0], m), x)


def test_loop_workspace_is_one_cycle_per_step(rng):
    net = net_of(char_like("SEPARATE", steps=9))
    x, y = data(rng, steps=9)
    net.fit(DataSet(x, y), progress=False)
    loop = ndws.get_workspace_manager().get_workspace_for_current_thread(
        None, "WS_RNN_LOOP_WORKING_MEM")
    # two layers, 9 steps forward and 9 backward each
    assert loop.cycles_count == 2 * 2 * 9
    report = net.memory_report(4)
    assert loop.max_cycle_allocations == report.workspace_bytes(ndws.WorkspaceMode.SEPARATE,
                                                                True)["WS_RNN_LOOP_WORKING_MEM"]


def test_longer_batches_grow_the_workspaces_once(rng):
    # a batch longer than the planned one spills and the workspaces grow (REALLOCATE); the
    # next batches of that length (or shorter) fit: nothing is allocated for them
    from ndws._memory import allocation_counters
    net = net_of(char_like("SEPARATE"))
    sizes, allocations = [], []
    for steps in (5, 5, 12, 12, 12, 7):
        ds = DataSet(*data(rng, steps=steps))
        before = allocation_counters()["allocations"]
        net.fit(ds, progress=False)
        allocations.append(allocation_counters()["allocations"] - before)
        spaces = ndws.get_workspace_manager().get_all_workspaces_for_current_thread()
        sizes.append({ws.id: ws.current_size for ws in spaces})
    grown = [k for k in sizes[1] if sizes[2][k] > sizes[1][k]]
    assert "WS_ALL_LAYERS_ACT" in grown and "WS_LAYER_WORKING_MEM" in grown
    assert sizes[2] == sizes[3] == sizes[4] == sizes[5]
    assert allocations[1] == allocations[3] == allocations[4] == allocations[5] == 0


def test_memory_report_for_a_sequence_length(rng):
    net = net_of(char_like())
    assert net.memory_report(32).workspaces(ndws.WorkspaceMode.SEPARATE) is None
    report = net.memory_report(32, sequence_length=50)
    layer0 = report.layers[0]["training"]
    assert layer0["ACTIVATIONS"] == 50 * 32 * 6 * 4
    assert layer0["FF_CACHE"] == 50 * 32 * 7 * 6 * 4          # gates, cell, act(cell), output
    assert "50 steps" in str(report)
    with pytest.raises(ValueError, match="sequence_length: expected an int in"):
        net.memory_report(32, sequence_length=0)


# -- save, load, serve -------------------------------------------------------------------------------

def test_save_load_resume_bit_exact(rng, tmp_path):
    x, y = data(rng)
    a = net_of(char_like())
    a.fit(DataSet(x, y), progress=False)
    a.rnn_time_step(x[:, :, :2])
    a.save(tmp_path / "a.zip")
    b = MultiLayerNetwork.load(tmp_path / "a.zip")
    assert b.rnn_get_previous_state(0) == {}                    # a checkpoint leaves it out
    for net in (a, b):
        net.rnn_clear_previous_state()
        net.fit(DataSet(x, y), progress=False)
    np.testing.assert_array_equal(a.params().numpy(), b.params().numpy())
    a.rnn_time_step(x[:, :, :2])
    a.save(tmp_path / "s.zip", save_rnn_state=True)
    c = MultiLayerNetwork.load(tmp_path / "s.zip")
    np.testing.assert_array_equal(c.rnn_time_step(x[:, :, 2:]).numpy(),
                                  a.rnn_time_step(x[:, :, 2:]).numpy())


def test_parallel_inference_serves_an_rnn(rng):
    net = net_of(char_like())
    x, _ = data(rng, n=6)
    expected = net.output(x).numpy()
    with ParallelInference(net, workers=2) as pi:
        got = [pi.output(x[i:i + 1]).numpy() for i in range(6)]
        one = pi.output(x[0]).numpy()
    np.testing.assert_allclose(np.concatenate(got), expected, atol=1e-6)
    np.testing.assert_allclose(one, expected[0], atol=1e-6)


# -- evaluation of masked time series ------------------------------------------------------------------

def test_evaluations_count_only_unmasked_steps(rng):
    x, y = data(rng, n=5, steps=6)
    m = np.ones((5, 6), np.float32)
    m[0, 3:] = 0
    m[4, 1:] = 0
    net = net_of(char_like())
    out = net.output(x).numpy()
    keep = m.astype(bool)
    rows_pred = out.transpose(0, 2, 1)[keep]                    # (unmasked steps, classes)
    rows_true = y.transpose(0, 2, 1)[keep]
    ev, roc, reg = net.do_evaluation(DataSet(x, y, m, m), Evaluation(), ROCMultiClass(),
                                     RegressionEvaluation())
    assert keep.sum() == 22
    confusion = np.zeros((4, 4), np.int64)
    np.add.at(confusion, (rows_true.argmax(1), rows_pred.argmax(1)), 1)
    np.testing.assert_array_equal(np.asarray(ev.get_confusion_matrix()), confusion)
    np.testing.assert_allclose(reg.mean_squared_error(0),
                               ((rows_pred[:, 0] - rows_true[:, 0]) ** 2).mean(), rtol=1e-6)
    positives = [roc.count_actual_positive(c) for c in range(4)]
    assert positives == rows_true.sum(0).astype(int).tolist()
    # the same counts from the unmasked rows alone
    alone = ROCMultiClass()
    alone.eval(rows_true, rows_pred)
    assert roc.calculate_average_auc() == alone.calculate_average_auc()


# -- variable-length sequences through the async prefetcher -----------------------------------------

def _variable_batches(rng, n=12):
    out = []
    for k in range(n):
        steps = int(rng.integers(2, 30)) if k != 5 else 60      # a late, much longer batch
        x, y = data(rng, n=4, steps=steps)
        fmask = np.ones((4, steps), np.float32)
        for i in range(4):
            fmask[i, int(rng.integers(1, steps + 1)):] = 0
        out.append((x, y, fmask, fmask.copy()))
    return out


@pytest.mark.parametrize("mode", ["SEPARATE", "ENABLED"])
def test_variable_lengths_through_the_async_prefetcher_train_as_the_batches_do(mode, rng):
    # the prefetcher's ring adapts to the lengths (one longer batch grows it) and the network
    # reads the batches and both masks from it: the parameters are bit for bit those of
    # fitting the same batches handed over directly; a batch kept after the prefetcher closed
    # raises when the network is given it, before anything moves
    from ndws.data import AsyncDataSetIterator, ListDataSetIterator
    batches = [DataSet(*b) for b in _variable_batches(rng)]
    direct = net_of(char_like(mode))
    direct.fit(batches, epochs=2)
    prefetched = net_of(char_like(mode))
    with AsyncDataSetIterator(ListDataSetIterator(batches), queue_size=2) as it:
        prefetched.fit(it, epochs=2)
        it.reset()
        kept = it.next()
        # the ring remembers the long batch: it starts large enough for it
        assert it.workspace.initial_block_size > 4 * 4 * 60 * 4
    assert kept.features.stale == "destroyed"                       # the ring went with it
    before = prefetched.params().numpy().copy()
    with pytest.raises(ndws.WorkspaceError, match="destroyed"):
        prefetched.fit(kept)
    np.testing.assert_array_equal(prefetched.params().numpy(), before)       # nothing moved
    np.testing.assert_array_equal(prefetched.params().numpy(), direct.params().numpy())
