"""The recurrent layers (ndws/nn/layers/recurrent.py, wrappers.py, embedding.py, the RNN
output layers) and the time-series preprocessors: values against the NumPy references of
tests/rnn_reference.py (and torch.nn.LSTM / nn.RNN where PyTorch is installed), DL4J's
parameters, masks, and the errors of bad configurations and bad input."""
import numpy as np
import pytest

import ndws
import rnn_reference as R
from ndws.data.dataset import DataSet
from ndws.nn import (LSTM, Bidirectional, CnnToRnnPreProcessor, ConvolutionLayer, DenseLayer,
                     EmbeddingLayer, EmbeddingSequenceLayer, FeedForwardToRnnPreProcessor,
                     GlobalPoolingLayer, GravesLSTM, InputType, LastTimeStep,
                     LayerWorkspaceMgr, MaskState, MaskZeroLayer, MultiLayerConfiguration,
                     MultiLayerNetwork, OutputLayer, RnnLossLayer, RnnOutputLayer,
                     RnnToCnnPreProcessor, RnnToFeedForwardPreProcessor, SimpleRnn)

TOL = {"float32": 2e-5, "float64": 1e-12}


def build(layers, dtype="float32", seed=7, **kw):
    net = MultiLayerNetwork(MultiLayerConfiguration(layers, seed=seed, dtype=dtype, **kw))
    net.init()
    return net


def params(layer):
    return {k: v.numpy().astype(np.float64) for k, v in layer.params.items()}


def seq(rng, n, size, steps, dtype="float32", fmt="NCW"):
    x = rng.standard_normal((n, size, steps)).astype(dtype)
    return x if fmt == "NCW" else np.ascontiguousarray(x.transpose(0, 2, 1))


def ncw(a, fmt):
    a = np.asarray(a)
    return a if fmt == "NCW" else a.transpose(0, 2, 1)


# -- values ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fmt", ["NCW", "NWC"])
@pytest.mark.parametrize("kind,act", [("LSTM", "tanh"), ("LSTM", None), ("LSTM", "softsign"),
                                      ("GravesLSTM", "tanh"), ("SimpleRnn", "tanh"),
                                      ("SimpleRnn", "relu")])
def test_forward_against_numpy(kind, act, fmt, dtype, rng):
    cls = {"LSTM": LSTM, "GravesLSTM": GravesLSTM, "SimpleRnn": SimpleRnn}[kind]
    kw = {} if act is None else {"activation": act}
    net = build([cls(n_in=3, n_out=5, **kw), cls(n_out=4, **kw)], dtype,
                input_type=InputType.recurrent(3, data_format=fmt))
    x = seq(rng, 4, 3, 6, dtype, fmt)
    outs = net.feed_forward(x)
    a = ncw(x, fmt)
    for i, layer in enumerate(net.layers):
        p = params(layer)
        name = act or "sigmoid"                        # DL4J's network-wide default
        if kind == "SimpleRnn":
            ref, _ = R.simple_rnn(a, p["W"], p["RW"], p["b"], name)
        else:
            ref, _, _ = R.lstm(a, p["W"], p["RW"], p["b"], name, peepholes=kind != "LSTM")
        np.testing.assert_allclose(ncw(outs[i + 1].numpy(), fmt), ref, atol=TOL[dtype],
                                   rtol=TOL[dtype])
        a = ref


def test_forward_against_torch(rng):
    torch = pytest.importorskip("torch")
    net = build([LSTM(n_in=3, n_out=5, activation="tanh"), SimpleRnn(n_out=4, activation="tanh")],
                "float64")
    x = seq(rng, 2, 3, 7, "float64")
    outs = net.feed_forward(x)
    lstm_p, rnn_p = params(net.layers[0]), params(net.layers[1])
    lstm = torch.nn.LSTM(3, 5, batch_first=True).double()
    rnn = torch.nn.RNN(5, 4, batch_first=True, nonlinearity="tanh").double()
    w_ih, w_hh, b = R.to_torch_lstm(lstm_p["W"], lstm_p["RW"], lstm_p["b"])
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(torch.from_numpy(w_ih))
        lstm.weight_hh_l0.copy_(torch.from_numpy(w_hh))
        lstm.bias_ih_l0.copy_(torch.from_numpy(b))
        lstm.bias_hh_l0.zero_()
        rnn.weight_ih_l0.copy_(torch.from_numpy(rnn_p["W"].T))
        rnn.weight_hh_l0.copy_(torch.from_numpy(rnn_p["RW"].T))
        rnn.bias_ih_l0.copy_(torch.from_numpy(rnn_p["b"].reshape(-1)))
        rnn.bias_hh_l0.zero_()
        h1, _ = lstm(torch.from_numpy(x.transpose(0, 2, 1).copy()))
        h2, _ = rnn(h1)
    np.testing.assert_allclose(outs[1].numpy(), h1.numpy().transpose(0, 2, 1), atol=1e-12)
    np.testing.assert_allclose(outs[2].numpy(), h2.numpy().transpose(0, 2, 1), atol=1e-12)


def test_output_is_time_major_views(rng):
    # a recurrent layer's output is (time, n, size) in memory, seen as NCW: the rows the next
    # layer reads are a view (no copy), one step's rows contiguous
    net = build([LSTM(n_in=3, n_out=4, activation="tanh")])
    y = net.output(seq(rng, 2, 3, 5))
    assert y.shape == (2, 4, 5) and y.strides == (16, 4, 32)
    assert not y.is_attached()


# -- parameters: DL4J's keys, shapes, order and initialisation ----------------------------------

def test_lstm_parameters_are_dl4j_s():
    net = build([GravesLSTM(n_in=3, n_out=4, activation="tanh", forget_gate_bias_init=2.5)])
    layer = net.layers[0]
    assert layer.param_shapes() == {"W": (3, 16), "RW": (4, 19), "b": (1, 16)}
    assert net.num_params() == 3 * 16 + 4 * 19 + 16           # nIn*4n + n*(4n+3) + 4n
    flat = net.params().numpy()
    # W, RW in column-major ('f') order, then b: DL4J's flat vector
    np.testing.assert_array_equal(flat[:48], layer.params["W"].numpy().T.ravel())
    np.testing.assert_array_equal(flat[48:124], layer.params["RW"].numpy().T.ravel())
    b = flat[124:].reshape(4, 4)                               # blocks g, f, o, i
    assert (b[1] == 2.5).all() and (b[[0, 2, 3]] == 0).all()
    # a DL4J flat vector means the same: set one and read W back
    dl4j = np.arange(net.num_params(), dtype=np.float32)
    net.set_params(dl4j)
    np.testing.assert_array_equal(layer.params["W"].numpy(), dl4j[:48].reshape(16, 3).T)


def test_initialisation_fans():
    # DL4J's LSTMParamInitializer: fan-in n_out, fan-out n_in + n_out for W and RW (Xavier:
    # std sqrt(2 / (n_in + 2 n_out))); weight_init_recurrent for RW
    net = build([LSTM(n_in=300, n_out=100, weight_init_recurrent="zero"),
                 SimpleRnn(n_out=50, bias_init=0.5)], seed=3)
    w = net.layers[0].params["W"].numpy()
    assert abs(w.std() / np.sqrt(2 / (300 + 200)) - 1) < 0.02
    assert (net.layers[0].params["RW"].numpy() == 0).all()
    assert (net.layers[1].params["b"].numpy() == 0.5).all()
    assert net.layers[1].param_shapes() == {"W": (100, 50), "RW": (50, 50), "b": (1, 50)}


# -- preprocessors -----------------------------------------------------------------------------

def test_rnn_to_feed_forward_order_and_views():
    mgr = LayerWorkspaceMgr.no_workspaces()
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)      # (n, size, time)
    p = RnnToFeedForwardPreProcessor()
    rows = p.pre_process(ndws.asarray(x), mgr).numpy()
    # row t * n + i is example i at step t (DL4J's reshape3dTo2d)
    np.testing.assert_array_equal(rows, x.transpose(2, 0, 1).reshape(8, 3))
    back = p.backprop(ndws.asarray(rows), mgr)
    np.testing.assert_array_equal(back.numpy(), x)
    q = FeedForwardToRnnPreProcessor()
    q.minibatch = 2
    np.testing.assert_array_equal(q.pre_process(ndws.asarray(rows), mgr).numpy(), x)
    # NWC
    p = RnnToFeedForwardPreProcessor("NWC")
    xn = np.ascontiguousarray(x.transpose(0, 2, 1))
    np.testing.assert_array_equal(p.pre_process(ndws.asarray(xn), mgr).numpy(), rows)
    # the mask: (n, time) -> one value per row, and back
    m = ndws.asarray(np.array([[1, 1, 0, 0], [1, 1, 1, 0]], np.float32))
    mr, state = RnnToFeedForwardPreProcessor().feed_forward_mask(m, MaskState.ACTIVE, mgr)
    assert state is MaskState.ACTIVE
    np.testing.assert_array_equal(mr.numpy(), m.numpy().T.ravel())
    np.testing.assert_array_equal(q.feed_forward_mask(mr, None, mgr)[0].numpy(), m.numpy())


def test_cnn_rnn_preprocessors_round_trip(rng):
    mgr = LayerWorkspaceMgr.no_workspaces()
    x = rng.standard_normal((2, 12, 3)).astype(np.float32)          # (n, c*h*w, time)
    to_cnn = RnnToCnnPreProcessor(2, 3, 2)
    images = to_cnn.pre_process(ndws.asarray(x), mgr)
    assert images.shape == (6, 2, 2, 3)
    np.testing.assert_array_equal(images.numpy()[1 * 2 + 1].ravel(), x[1, :, 1])
    to_rnn = CnnToRnnPreProcessor(2, 3, 2)
    to_rnn.minibatch = 2
    np.testing.assert_array_equal(to_rnn.pre_process(images, mgr).numpy(), x)
    assert to_rnn.output_type(InputType.convolutional(2, 3, 2)) == InputType.recurrent(12)
    with pytest.raises(ValueError, match="RnnToCnnPreProcessor: expected a time series of 12"):
        to_cnn.output_type(InputType.recurrent(11))
    for p in (to_cnn, to_rnn, RnnToFeedForwardPreProcessor("NWC")):
        assert type(p).from_dict(p.to_dict()) == p


def test_automatic_preprocessors():
    conf = MultiLayerConfiguration(
        [ConvolutionLayer(kernel_size=2, n_out=2), LSTM(n_out=3), DenseLayer(n_out=4),
         LSTM(n_out=3), RnnOutputLayer(n_out=2, activation="softmax")],
        input_type=InputType.convolutional(4, 4, 1), seed=0)
    pres = conf.resolved_preprocessors
    assert pres[1] == CnnToRnnPreProcessor(3, 3, 2)
    assert pres[2] == RnnToFeedForwardPreProcessor()
    assert pres[3] == FeedForwardToRnnPreProcessor()
    assert [l.n_in for l in conf.resolved_layers] == [1, 18, 3, 4, 3]


# -- masks ---------------------------------------------------------------------------------------

def _mask(n, steps, lengths):
    m = np.zeros((n, steps), np.float32)
    for i, k in enumerate(lengths):
        m[i, :k] = 1
    return m


def test_lstm_passes_the_mask_through_simple_rnn_applies_it(rng):
    x = seq(rng, 3, 2, 5)
    m = _mask(3, 5, [5, 3, 1])
    net = build([LSTM(n_in=2, n_out=3, activation="tanh"), SimpleRnn(n_out=3, activation="tanh")])
    outs = net.feed_forward(x)
    masked = net.output(x, features_mask=m).numpy()
    lstm_p, rnn_p = params(net.layers[0]), params(net.layers[1])
    # the LSTM runs unmasked (DL4J's Passthrough); SimpleRnn masks every step
    h1, _, _ = R.lstm(x, lstm_p["W"], lstm_p["RW"], lstm_p["b"])
    ref, _ = R.simple_rnn(h1, rnn_p["W"], rnn_p["RW"], rnn_p["b"], mask=m)
    np.testing.assert_allclose(masked, ref, atol=2e-5)
    assert (masked[2, :, 1:] == 0).all()
    assert not np.allclose(outs[2].numpy(), masked)


def test_last_time_step_picks_each_last_unmasked_step(rng):
    x = seq(rng, 3, 2, 6)
    m = _mask(3, 6, [6, 4, 2])
    net = build([LastTimeStep(LSTM(n_in=2, n_out=3, activation="tanh"))])
    p = params(net.layers[0])
    y = net.output(x, features_mask=m).numpy()
    ref, _, _ = R.lstm(x, p["W"], p["RW"], p["b"], mask=m)        # the wrapped layer is masked
    np.testing.assert_allclose(y, ref[np.arange(3), :, [5, 3, 1]], atol=2e-5)
    full, _, _ = R.lstm(x, p["W"], p["RW"], p["b"])
    np.testing.assert_allclose(net.output(x).numpy(), full[:, :, -1], atol=2e-5)
    m[1] = 0
    with pytest.raises(ValueError, match="example 1 in minibatch is entirely masked out"):
        net.output(x, features_mask=m)


def test_bidirectional_masks_both_directions(rng):
    x = seq(rng, 2, 2, 5)
    m = _mask(2, 5, [5, 3])
    for mode, combine in [("CONCAT", lambda f, b: np.concatenate([f, b], 1)),
                          ("ADD", np.add), ("MUL", np.multiply),
                          ("AVERAGE", lambda f, b: (f + b) / 2)]:
        net = build([Bidirectional(LSTM(n_in=2, n_out=3, activation="tanh"), mode)])
        p = params(net.layers[0])
        f, _, _ = R.lstm(x, p["fW"], p["fRW"], p["fb"], mask=m)
        b, _, _ = R.lstm(x[:, :, ::-1], p["bW"], p["bRW"], p["bb"], mask=m[:, ::-1])
        np.testing.assert_allclose(net.output(x, features_mask=m).numpy(),
                                   combine(f, b[:, :, ::-1]), atol=2e-5)
        assert net.layers[0].n_out == (6 if mode == "CONCAT" else 3)


def test_mask_zero_layer_reads_the_mask_off_the_input(rng):
    x = seq(rng, 2, 2, 5)
    x[0, :, 3:] = 0.0
    x[1, :, 4:] = -1.0
    net = build([MaskZeroLayer(SimpleRnn(n_in=2, n_out=3, activation="tanh"), masking_value=0.0)])
    p = params(net.layers[0])
    m = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.float32)
    ref, _ = R.simple_rnn(x, p["W"], p["RW"], p["b"], mask=m)
    np.testing.assert_allclose(net.output(x).numpy(), ref, atol=2e-5)


@pytest.mark.parametrize("kind", ["MAX", "AVG", "SUM", "PNORM"])
def test_global_pooling_over_time_with_a_mask(kind, rng):
    x = seq(rng, 3, 4, 6)
    m = _mask(3, 6, [6, 2, 4])
    net = build([GlobalPoolingLayer(pooling_type=kind, pnorm=3)],
                input_type=InputType.recurrent(4))
    got = net.output(x, features_mask=m).numpy()
    keep = m[:, None, :] != 0
    ref = {"MAX": np.where(keep, x, -np.inf).max(2), "SUM": (x * keep).sum(2),
           "AVG": (x * keep).sum(2) / keep.sum(2),
           "PNORM": (np.abs(x * keep) ** 3).sum(2) ** (1 / 3)}[kind]
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    m[2] = 0
    if kind in ("MAX", "AVG"):
        with pytest.raises(ValueError, match="example 2 in minibatch is entirely masked out"):
            net.output(x, features_mask=m)
    else:
        assert (net.output(x, features_mask=m).numpy()[2] == 0).all()


def test_rnn_output_layer_score_with_a_label_mask(rng):
    # DL4J: the steps' losses times the mask, summed, divided by the minibatch
    x = seq(rng, 3, 2, 5, "float64")
    labels = np.eye(4)[rng.integers(0, 4, (3, 5))].transpose(0, 2, 1)
    m = _mask(3, 5, [5, 2, 4]).astype(np.float64)
    net = build([RnnOutputLayer(n_in=2, n_out=4, activation="softmax")], "float64")
    p = params(net.layers[0])
    probs = R.dense_steps(x, p["W"], p["b"], "softmax")
    assert net.score(DataSet(x, labels, None, m)) == pytest.approx(
        R.mcxent_steps(probs, labels, m), rel=1e-12)
    assert net.score(DataSet(x, labels)) == pytest.approx(R.mcxent_steps(probs, labels),
                                                          rel=1e-12)
    per = net.score_examples(DataSet(x, labels, None, m), False).numpy()
    np.testing.assert_allclose(per, (-(labels * np.log(probs)).sum(1) * m).sum(1), rtol=1e-12)
    # RnnLossLayer: the input is the pre-activation
    loss = build([RnnLossLayer(n_in=4, activation="softmax")], "float64")
    z = np.einsum("bit,io->bot", x, p["W"]) + p["b"].reshape(1, -1, 1)
    assert loss.score(DataSet(z, labels, None, m)) == pytest.approx(
        net.score(DataSet(x, labels, None, m)), rel=1e-12)


# -- embeddings ------------------------------------------------------------------------------------

def test_embeddings(rng):
    net = build([EmbeddingSequenceLayer(n_in=6, n_out=3, activation="identity", has_bias=True,
                                        bias_init=0.5)])
    idx = rng.integers(0, 6, (2, 5))
    w = net.layers[0].params["W"].numpy()
    y = net.output(idx.astype(np.float32)).numpy()
    np.testing.assert_allclose(y, w[idx].transpose(0, 2, 1) + 0.5, rtol=1e-6)
    np.testing.assert_array_equal(net.output(idx[:, None, :].astype(np.float32)).numpy(), y)
    single = build([EmbeddingLayer(n_in=6, n_out=3, activation="tanh")])
    np.testing.assert_allclose(single.output(idx[:, :1].astype(np.float32)).numpy(),
                               np.tanh(single.layers[0].params["W"].numpy()[idx[:, 0]]),
                               rtol=1e-6)
    m = _mask(2, 5, [5, 2])
    masked = net.output(idx.astype(np.float32), features_mask=m).numpy()
    assert (masked[1, :, 2:] == 0).all()


@pytest.mark.parametrize("bad,what", [(6.0, "got index 6"), (-1.0, "got index -1"),
                                      (1.5, "got 1.5"), (np.nan, "got nan")])
def test_embedding_index_errors(bad, what):
    net = build([EmbeddingSequenceLayer(n_in=6, n_out=3), RnnLossLayer(loss_function="mse")])
    idx = np.zeros((2, 4), np.float32)
    idx[1, 2] = bad
    with pytest.raises(ValueError, match=f"Invalid index for embedding layer: {what} for "
                                         f"example 1 at step 2"):
        net.output(idx)
    before = net.params().numpy().copy()
    with pytest.raises(ValueError, match="Invalid index"):
        net.fit(DataSet(idx, np.zeros((2, 3, 4), np.float32)))
    np.testing.assert_array_equal(net.params().numpy(), before)


def test_embedding_must_be_first():
    with pytest.raises(ValueError, match=r"layers\[1\]: EmbeddingLayer must be the network's "
                                         r"first layer"):
        MultiLayerConfiguration([DenseLayer(n_in=2, n_out=1), EmbeddingLayer(n_in=4, n_out=2)])
    with pytest.raises(ValueError, match="Dropout not supported with EmbeddingLayer"):
        MultiLayerConfiguration([EmbeddingLayer(n_in=4, n_out=2, dropout=0.5)])


# -- configuration ---------------------------------------------------------------------------------

def test_configuration_errors():
    with pytest.raises(ValueError, match=r"layers\[0\].data_format: NWC, but the layer's input "
                                         r"is NCW"):
        MultiLayerConfiguration([LSTM(n_out=2, data_format="NWC")],
                                input_type=InputType.recurrent(3))
    with pytest.raises(ValueError, match=r"layers\[0\].activation: softmax is not an "
                                         r"element-wise activation"):
        MultiLayerConfiguration([LSTM(n_in=3, n_out=2, activation="softmax")])
    with pytest.raises(TypeError, match="Cannot wrap a non-recurrent layer.*DenseLayer"):
        Bidirectional(DenseLayer(n_out=2))
    with pytest.raises(ValueError, match="unknown mode 'SUM'"):
        Bidirectional(LSTM(n_out=2), "SUM")
    with pytest.raises(ValueError, match="unknown mode 'SUM'"):
        Bidirectional("SUM", LSTM(n_out=2))
    # DL4J's argument order, new Bidirectional(Mode.ADD, layer), is the same layer
    dl4j = Bidirectional(Bidirectional.Mode.ADD, LSTM(n_out=2))
    assert dl4j == Bidirectional(LSTM(n_out=2), "ADD") and dl4j.mode is Bidirectional.Mode.ADD
    with pytest.raises(ValueError, match=r"layers\[0\]: RnnOutputLayer takes time series"):
        MultiLayerConfiguration([RnnOutputLayer(n_out=2)], input_type=InputType.recurrent(2),
                                input_preprocessors={0: RnnToFeedForwardPreProcessor()})


@pytest.mark.parametrize("layer", [LastTimeStep(LSTM(n_out=3)), GlobalPoolingLayer(),
                                   Bidirectional(LSTM(n_out=3))])
def test_truncated_bptt_refuses_whole_sequence_layers(layer):
    # DL4J's validateTbpttConfig (and Bidirectional, which DL4J refuses at the first segment)
    with pytest.raises(ValueError, match=rf"Invalid network configuration detected: Truncated "
                                         rf"backpropagation through time \(TBPTT\) cannot be "
                                         rf"used with layer 1 of type {type(layer).__name__}"):
        MultiLayerConfiguration([LSTM(n_in=2, n_out=3), layer, OutputLayer(n_out=2, loss_function="mse")],
                                backprop_type="TRUNCATED_BPTT")
    MultiLayerConfiguration([LSTM(n_in=2, n_out=3), layer, OutputLayer(n_out=2, loss_function="mse")])


def test_tbptt_lengths():
    with pytest.raises(ValueError, match="tbptt_back_length: 6 is longer than tbptt_fwd_length 5"):
        MultiLayerConfiguration([LSTM(n_in=2, n_out=3)], backprop_type="TRUNCATED_BPTT",
                                tbptt_fwd_length=5, tbptt_back_length=6)
    with pytest.raises(ValueError, match="tbptt_fwd_length: expected an int in"):
        MultiLayerConfiguration([LSTM(n_in=2, n_out=3)], tbptt_fwd_length=0)
    with pytest.raises(TypeError, match="tbptt_back_length: expected an int >= 1, got float"):
        MultiLayerConfiguration([LSTM(n_in=2, n_out=3)], tbptt_back_length=2.0)
    with pytest.raises(ValueError, match="unknown BackpropType 'TBPTT'"):
        MultiLayerConfiguration([LSTM(n_in=2, n_out=3)], backprop_type="TBPTT")


def test_json_round_trip_of_every_layer():
    conf = MultiLayerConfiguration(
        [EmbeddingSequenceLayer(n_in=5, n_out=4, input_length=7, infer_input_length=False),
         Bidirectional(GravesLSTM(n_out=3, gate_activation="hardsigmoid"), "ADD"),
         MaskZeroLayer(SimpleRnn(n_out=3), masking_value=-1.0),
         LSTM(n_out=2, forget_gate_bias_init=0.5, weight_init_recurrent="uniform"),
         RnnOutputLayer(n_out=3, activation="softmax", data_format="NCW")],
        seed=5, tbptt_fwd_length=5, tbptt_back_length=3)
    back = MultiLayerConfiguration.from_json(conf.to_json())
    assert back == conf
    assert [type(l).__name__ for l in back.resolved_layers] == [
        "EmbeddingSequenceLayer", "Bidirectional", "MaskZeroLayer", "LSTM", "RnnOutputLayer"]
    assert back.resolved_layers[1].layer.gate_activation.value == "hardsigmoid"


# -- bad input ---------------------------------------------------------------------------------------

def test_bad_input(rng):
    net = build([LSTM(n_in=3, n_out=4, activation="tanh"),
                 RnnOutputLayer(n_out=2, activation="softmax")])
    with pytest.raises(ValueError, match=r"x: expected a 3-d array \(n_samples, size=3, time\) "
                                         r"for layers\[0\] \(LSTM\)"):
        net.output(np.zeros((5, 4), np.float32))
    with pytest.raises(ValueError, match="a time series of 0 steps"):
        net.output(np.zeros((2, 3, 0), np.float32))
    x = seq(rng, 2, 3, 5)
    labels = np.zeros((2, 2, 4), np.float32)
    with pytest.raises(ValueError, match=r"Sequence lengths do not match for RnnOutputLayer "
                                         r"input and labels.*input=5 vs\. label=4"):
        net.fit(DataSet(x, labels))
    with pytest.raises(ValueError, match=r"features_mask: expected shape \(2, 5\)"):
        net.output(x, features_mask=np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"labels mask: expected \(n_samples, time\) = "
                                         r"\(2, 5\)"):
        net.score(DataSet(x, np.zeros((2, 2, 5), np.float32), None, np.ones((2, 2))))
    before = net.params().numpy().copy()
    with pytest.raises(ValueError):
        net.fit(DataSet(x, np.zeros((2, 2, 5), np.float32), None, np.ones((2, 2))))
    nan = np.ones((2, 5), np.float32)
    nan[1, 3] = np.nan
    with pytest.raises(ValueError, match=r"features_mask: holds nan at \(1, 3\): a mask must "
                                         r"be finite"):
        net.fit(DataSet(x, np.zeros((2, 2, 5), np.float32), nan))
    with pytest.raises(ValueError, match=r"labels_mask: holds nan at \(1, 3\)"):
        net.fit(DataSet(x, np.zeros((2, 2, 5), np.float32), None, nan))
    with pytest.raises(TypeError, match="features_mask: expected an array of numbers"):
        net.output(x, features_mask=np.array([["a"] * 5] * 2))
    np.testing.assert_array_equal(net.params().numpy(), before)
    assert net.iteration == 0


def test_caches_do_not_grow_with_every_length(rng):
    # time series of varying length: what layers keep per input shape stays bounded (the
    # losses' weights grow to the longest batch; the 1-D windows keep at most 64 types)
    from ndws.nn import Convolution1DLayer
    net = build([Convolution1DLayer(kernel_size=2, n_out=3, convolution_mode="same"),
                 LSTM(n_out=3, activation="tanh"),
                 RnnOutputLayer(n_out=2, activation="softmax")],
                input_type=InputType.recurrent(2))
    for steps in range(1, 90):
        x = rng.standard_normal((2, 2, steps)).astype(np.float32)
        y = np.zeros((2, 2, steps), np.float32)
        y[:, 0] = 1
        net.fit(DataSet(x, y))
    assert len(net.layers[0].__dict__["_calls"]) <= 64
    assert len(net.layers[0].__dict__["_windows"]) <= 64
    weights = net.layers[2].__dict__["_weights_cache"]
    assert len(weights) == 1 and next(iter(weights.values())).shape == (2 * 89,)
