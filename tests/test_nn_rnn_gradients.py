"""Gradient checks by central differences in float64 (DL4J's GradientCheckUtil: eps 1e-6, max
relative error 1e-3, min absolute error 1e-8) for every recurrent layer: DL4J's
LSTMGradientCheckTests networks, masks (features and labels, variable lengths), Bidirectional
in each mode, LastTimeStep, MaskZeroLayer, the embeddings, global pooling over time and the
time-series preprocessors, NCW and NWC."""
import numpy as np
import pytest

from cnn_reference import check_gradients
from ndws.data.dataset import DataSet
from ndws.nn import (LSTM, Bidirectional, ConvolutionLayer, DenseLayer, EmbeddingLayer,
                     EmbeddingSequenceLayer, GlobalPoolingLayer, GravesLSTM, InputType,
                     LastTimeStep, MaskZeroLayer, MultiLayerConfiguration, MultiLayerNetwork,
                     OutputLayer, RnnLossLayer, RnnOutputLayer, RnnToCnnPreProcessor, Sgd,
                     SimpleRnn, SubsamplingLayer)

LSTMS = [LSTM, GravesLSTM]


def build(layers, seed=12345, **kw):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        layers, seed=seed, dtype="float64", updater=Sgd(1.0), **kw))
    net.init()
    return net


def series(rng, n, size, steps, fmt="NCW"):
    x = rng.uniform(-0.5, 0.5, (n, size, steps))
    return x if fmt == "NCW" else np.ascontiguousarray(x.transpose(0, 2, 1))


def one_hot_steps(rng, n, classes, steps, fmt="NCW"):
    y = np.eye(classes)[rng.integers(0, classes, (n, steps))]        # (n, steps, classes)
    return np.ascontiguousarray(y.transpose(0, 2, 1) if fmt == "NCW" else y)


def lengths_mask(n, steps, lengths):
    m = np.zeros((n, steps))
    for i, k in enumerate(lengths):
        m[i, :k] = 1
    return m


@pytest.mark.parametrize("cls", LSTMS)
def test_lstm_basic_multi_layer(cls, rng):
    # testLSTMBasicMultiLayer: two layers 2 -> 2 -> 2, sigmoid, RnnOutputLayer softmax
    net = build([cls(n_in=2, n_out=2, activation="sigmoid"), cls(n_out=2, activation="sigmoid"),
                 RnnOutputLayer(n_out=2, activation="softmax", loss_function="mcxent")])
    check_gradients(net, DataSet(series(rng, 5, 2, 4), one_hot_steps(rng, 5, 2, 4)))


@pytest.mark.parametrize("cls", LSTMS)
@pytest.mark.parametrize("act,loss,out_act,reg", [
    ("tanh", "mcxent", "softmax", {"l2": 0.4}),
    ("softsign", "mse", "tanh", {"l1": 0.5})])
def test_gradient_lstm_full(cls, act, loss, out_act, reg, rng):
    # testGradientLSTMFull (DL4J's l1Bias / l2Bias have no ndws field: biases are never
    # regularised here)
    net = build([cls(n_in=3, n_out=4, activation=act, **reg),
                 RnnOutputLayer(n_out=2, activation=out_act, loss_function=loss, **reg)])
    labels = one_hot_steps(rng, 2, 2, 4)
    check_gradients(net, DataSet(series(rng, 2, 3, 4), labels), max_per_param=128)


@pytest.mark.parametrize("cls", LSTMS + [SimpleRnn])
@pytest.mark.parametrize("steps,mb", [(1, 7), (5, 1), (1, 1)])
def test_gradient_edge_cases(cls, steps, mb, rng):
    # testGradientLSTMEdgeCases: one step, one example
    net = build([cls(n_in=3, n_out=4, activation="tanh"),
                 RnnOutputLayer(n_out=2, activation="softmax")])
    check_gradients(net, DataSet(series(rng, mb, 3, steps), one_hot_steps(rng, mb, 2, steps)))


def test_gradient_cnn_ff_rnn(rng):
    # testGradientCnnFfRnn: video frames through RnnToCnn, a convolution, pooling, a dense layer
    # (CnnToFeedForward inserted) and a GravesLSTM (FeedForwardToRnn inserted)
    net = build([ConvolutionLayer(kernel_size=3, n_out=3, activation="tanh"),
                 SubsamplingLayer(pooling_type="max", kernel_size=2, stride=1),
                 DenseLayer(n_out=4, activation="tanh"),
                 GravesLSTM(n_out=3, activation="tanh"),
                 RnnOutputLayer(n_out=2, activation="softmax")],
                input_type=InputType.recurrent(72),
                input_preprocessors={0: RnnToCnnPreProcessor(6, 6, 2)})
    assert net.layers[2].n_in == 27 and net.conf.resolved_preprocessors[3] is not None
    check_gradients(net, DataSet(series(rng, 2, 72, 4), one_hot_steps(rng, 2, 2, 4)),
                    max_per_param=32)


@pytest.mark.parametrize("fmt", ["NCW", "NWC"])
@pytest.mark.parametrize("cls", [LSTM, GravesLSTM, SimpleRnn])
def test_masks_variable_lengths(cls, fmt, rng):
    # features and label masks of sequences of lengths 5, 3 and 1; a dense layer between two
    # recurrent layers (RnnToFeedForward / FeedForwardToRnn, masked rows; rows have no format:
    # the layer after says its own, as in DL4J)
    net = build([cls(n_in=2, n_out=3, activation="tanh"), DenseLayer(n_out=3, activation="tanh"),
                 cls(n_out=3, activation="tanh", data_format=fmt),
                 RnnOutputLayer(n_out=2, activation="softmax")],
                input_type=InputType.recurrent(2, data_format=fmt))
    m = lengths_mask(3, 5, [5, 3, 1])
    x = series(rng, 3, 2, 5, fmt)
    y = one_hot_steps(rng, 3, 2, 5, fmt)
    check_gradients(net, DataSet(x, y, m, m))
    check_gradients(net, DataSet(x, y, None, m))


@pytest.mark.parametrize("mode", ["CONCAT", "ADD", "MUL", "AVERAGE"])
@pytest.mark.parametrize("cls", [LSTM, SimpleRnn])
def test_bidirectional(mode, cls, rng):
    # RnnGradientChecks.testBidirectionalWrapper, with a mask that masks (DL4J's was all ones)
    net = build([LSTM(n_in=3, n_out=3, activation="tanh"),
                 Bidirectional(cls(n_out=3, activation="tanh"), mode),
                 RnnOutputLayer(n_out=5, activation="softmax")])
    m = lengths_mask(3, 4, [4, 2, 3])
    check_gradients(net, DataSet(series(rng, 3, 3, 4), one_hot_steps(rng, 3, 5, 4), m, m))


@pytest.mark.parametrize("masked", [False, True])
def test_last_time_step(masked, rng):
    net = build([LSTM(n_in=3, n_out=4, activation="tanh"),
                 LastTimeStep(SimpleRnn(n_out=3, activation="tanh")),
                 OutputLayer(n_out=2, activation="softmax")])
    m = lengths_mask(3, 5, [5, 2, 4]) if masked else None
    check_gradients(net, DataSet(series(rng, 3, 3, 5), np.eye(2)[[0, 1, 1]], m))


def test_mask_zero_layer(rng):
    x = series(rng, 2, 3, 5)
    x[1, :, 3:] = 0.0
    net = build([MaskZeroLayer(LSTM(n_in=3, n_out=3, activation="tanh")),
                 RnnOutputLayer(n_out=2, activation="softmax")])
    check_gradients(net, DataSet(x, one_hot_steps(rng, 2, 2, 5)))


@pytest.mark.parametrize("kind", ["MAX", "AVG", "SUM", "PNORM"])
def test_global_pooling_over_time_with_masks(kind, rng):
    # GlobalPoolingGradientCheckTests.testLSTMWithMasking
    net = build([LSTM(n_in=3, n_out=4, activation="tanh"),
                 GlobalPoolingLayer(pooling_type=kind, pnorm=3),
                 OutputLayer(n_out=2, activation="softmax")])
    m = lengths_mask(3, 5, [5, 2, 4])
    check_gradients(net, DataSet(series(rng, 3, 3, 5), np.eye(2)[[0, 1, 0]], m))


def test_embeddings(rng):
    seq = build([EmbeddingSequenceLayer(n_in=5, n_out=3, activation="tanh", has_bias=True),
                 LSTM(n_out=3, activation="tanh"),
                 RnnOutputLayer(n_out=2, activation="softmax")])
    idx = rng.integers(0, 5, (3, 4)).astype(np.float64)
    m = lengths_mask(3, 4, [4, 4, 2])
    check_gradients(seq, DataSet(idx, one_hot_steps(rng, 3, 2, 4), m, m))
    # EmbeddingLayer on a time series: RnnToFeedForward before it, FeedForwardToRnn after
    one = build([EmbeddingLayer(n_in=5, n_out=3, activation="identity"),
                 SimpleRnn(n_out=3, activation="tanh"),
                 RnnOutputLayer(n_out=2, activation="softmax")],
                input_type=InputType.recurrent(1))
    check_gradients(one, DataSet(idx[:, None, :], one_hot_steps(rng, 3, 2, 4)))


def test_rnn_loss_layer_and_per_output_mask(rng):
    net = build([SimpleRnn(n_in=3, n_out=2, activation="tanh"),
                 RnnLossLayer(activation="identity", loss_function="mse")])
    y = rng.standard_normal((2, 2, 4))
    per_output = (rng.random((2, 2, 4)) > 0.3).astype(np.float64)
    check_gradients(net, DataSet(series(rng, 2, 3, 4), y, None, per_output))
