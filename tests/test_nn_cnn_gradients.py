"""Gradient checks by central differences in float64 (DL4J's GradientCheckUtil: eps 1e-6,
max relative error 1e-3, min absolute error 1e-8) for every layer of images, in DL4J's
CNNGradientCheckTest networks, NCHW and NHWC, through the preprocessors and
BatchNormalization."""
import numpy as np
import pytest

import ndws
from cnn_reference import check_gradients
from ndws.data.dataset import DataSet
from ndws.datasets import load_iris
from ndws.nn import (BatchNormalization, CnnLossLayer, ConvolutionLayer, Cropping2D,
                     DenseLayer, GlobalPoolingLayer, InputType, MultiLayerConfiguration,
                     MultiLayerNetwork, OutputLayer, Sgd, SubsamplingLayer, Upsampling2D,
                     ZeroPaddingLayer)

FORMATS = ["NCHW", "NHWC"]


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


def build(layers, t, seed=12345, **kw):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        layers, input_type=t, seed=seed, dtype="float64", updater=Sgd(1.0),
        weight_init="xavier", **kw))
    net.init()
    return net


def images(rng, n, t):
    return rng.standard_normal((n,) + t.shape())


def one_hot(n, classes):
    return np.eye(classes)[np.arange(n) % classes]


def test_gradient_cnn_mln_iris():
    # testGradientCNNMLN / testGradientCNNL1L2MLN: Iris as convolutional_flat(1, 4, 1)
    x, y = load_iris()
    x = ((x - x.min(0)) / (x.max(0) - x.min(0)))[::10].astype(np.float64)
    labels = np.eye(3)[y[::10]]
    for act, (loss, out_act), reg in [
            ("sigmoid", ("negativeloglikelihood", "softmax"), {}),
            ("tanh", ("mse", "tanh"), {"l2": 0.4}),
            ("elu", ("negativeloglikelihood", "softmax"), {"l2": 0.4, "l1": 0.5}),
            ("softplus", ("mse", "tanh"), {"l1": 0.2})]:
        net = build([ConvolutionLayer(kernel_size=1, n_out=6, activation=act, **reg),
                     OutputLayer(n_out=3, activation=out_act, loss_function=loss, **reg)],
                    InputType.convolutional_flat(1, 4, 1))
        assert net.conf.resolved_preprocessors[0] is not None        # FeedForwardToCnn
        assert net.conf.resolved_preprocessors[1] is not None        # CnnToFeedForward
        check_gradients(net, DataSet(x, labels))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["MAX", "AVG", "PNORM"])
@pytest.mark.parametrize("mb", [1, 3])
def test_cnn_with_subsampling(fmt, kind, mb, rng):
    t = InputType.convolutional(5, 5, 1, fmt)
    act = "sigmoid" if kind == "AVG" else "tanh"
    net = build([ConvolutionLayer(kernel_size=2, n_out=3, activation=act),
                 SubsamplingLayer(pooling_type=kind, kernel_size=2, stride=1, pnorm=2),
                 OutputLayer(n_out=4, activation="softmax")], t)
    assert net.layers[2].n_in == 27
    check_gradients(net, DataSet(images(rng, mb, t), one_hot(mb, 4)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["MAX", "AVG", "PNORM", "SUM"])
def test_cnn_with_subsampling_v2(fmt, kind, rng):
    t = InputType.convolutional(5, 5, 1, fmt)
    net = build([ConvolutionLayer(kernel_size=2, n_out=3, activation="tanh"),
                 SubsamplingLayer(pooling_type=kind, kernel_size=2, stride=1, pnorm=3),
                 ConvolutionLayer(kernel_size=2, n_out=2, activation="tanh"),
                 OutputLayer(n_out=4, activation="softmax")], t)
    assert net.layers[3].n_in == 8
    check_gradients(net, DataSet(images(rng, 3, t), one_hot(3, 4)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mb, depth", [(1, 1), (2, 2), (5, 4)])
def test_cnn_multi_layer(fmt, mb, depth, rng):
    t = InputType.convolutional(5, 5, depth, fmt)
    net = build([ConvolutionLayer(kernel_size=2, n_out=2, activation="sigmoid"),
                 ConvolutionLayer(kernel_size=2, n_out=2, activation="tanh"),
                 ConvolutionLayer(kernel_size=2, n_out=2, activation="sigmoid"),
                 OutputLayer(n_out=2, activation="softmax")], t)
    assert all(l.convolution_mode.name == "TRUNCATE" for l in net.layers[:3])
    check_gradients(net, DataSet(images(rng, mb, t), one_hot(mb, 2)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mb, h, k, depth", [(1, 4, 2, 1), (3, 5, 3, 2), (2, 6, 2, 3),
                                             (1, 5, 2, 1), (3, 4, 3, 2), (2, 6, 3, 1)])
def test_cnn_same_padding_mode(fmt, mb, h, k, depth, rng):
    t = InputType.convolutional(h, 5, depth, fmt)
    net = build([ConvolutionLayer(kernel_size=k, n_out=2, activation="sigmoid"),
                 SubsamplingLayer(kernel_size=k, stride=1),
                 ConvolutionLayer(kernel_size=k, n_out=2, activation="sigmoid"),
                 OutputLayer(n_out=2, activation="softmax")], t, convolution_mode="same")
    assert [l.output_type(l.input_type).shape()[1 if fmt == "NCHW" else 0]
            for l in net.layers[:3]] == [h] * 3
    check_gradients(net, DataSet(images(rng, mb, t), one_hot(mb, 2)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("stride, k, depth, mb, conv_first",
                         [(1, 2, 1, 1, True), (2, 3, 3, 3, False), (3, 2, 1, 3, True),
                          (2, 2, 3, 1, False), (3, 3, 1, 1, False), (2, 3, 1, 3, True)])
def test_cnn_same_padding_mode_strided(fmt, stride, k, depth, mb, conv_first, rng):
    t = InputType.convolutional(9, 9, depth, fmt)
    conv = ConvolutionLayer(kernel_size=k, stride=stride, n_out=2, activation="tanh")
    pool = SubsamplingLayer(kernel_size=k, stride=stride)
    net = build(([conv, pool] if conv_first else [pool, conv])
                + [OutputLayer(n_out=2, activation="softmax")], t, convolution_mode="same")
    check_gradients(net, DataSet(images(rng, mb, t), one_hot(mb, 2)), max_per_param=128)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("padding", [(0, 0, 0, 0), (1, 1, 0, 0), (2, 2, 2, 2)])
def test_cnn_zero_padding_layer(fmt, padding, rng):
    t = InputType.convolutional(6, 6, 2, fmt)
    net = build([ConvolutionLayer(kernel_size=2, n_out=3, activation="tanh"),
                 ZeroPaddingLayer(padding),
                 ConvolutionLayer(kernel_size=2, n_out=3, activation="tanh"),
                 OutputLayer(n_out=4, activation="softmax")], t)
    x = images(rng, 2, t)
    padded = net.feed_forward(x)[2]
    top, bottom, left, right = padding
    hw = (5 + top + bottom, 5 + left + right)
    assert padded.shape == ((2, 3) + hw if fmt == "NCHW" else (2,) + hw + (3,))
    check_gradients(net, DataSet(x, one_hot(2, 4)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("subsampling, stride, k, d, mode", [
    (True, 1, 2, 2, "same"), (False, 2, 2, 3, "truncate"), (True, 2, 3, 2, "truncate"),
    (False, 1, 3, 2, "same"), (True, 1, 2, 3, "truncate")])
def test_cnn_dilated(fmt, subsampling, stride, k, d, mode, rng):
    t = InputType.convolutional(6 + 4 * d, 6 + 4 * d, 2, fmt)
    second = (SubsamplingLayer(kernel_size=k, stride=stride, dilation=d) if subsampling else
              ConvolutionLayer(kernel_size=k, stride=stride, dilation=d, n_out=2,
                               activation="tanh"))
    net = build([ConvolutionLayer(kernel_size=k, stride=stride, dilation=d, n_out=2,
                                  activation="tanh"), second,
                 OutputLayer(n_out=2, activation="softmax")], t, convolution_mode=mode)
    check_gradients(net, DataSet(images(rng, 2, t), one_hot(2, 2)), max_per_param=64)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("crop", [(0, 0, 0, 0), (1, 1, 0, 0), (2, 2, 2, 2), (1, 2, 3, 4)])
def test_cropping_2d_layer(fmt, crop, rng):
    t = InputType.convolutional(11, 12, 2, fmt)
    net = build([ConvolutionLayer(kernel_size=2, n_out=2, activation="tanh"),
                 Cropping2D(crop),
                 ConvolutionLayer(kernel_size=2, n_out=2, activation="tanh"),
                 SubsamplingLayer(pooling_type="avg", kernel_size=3, stride=3),
                 OutputLayer(n_out=2, activation="softmax")], t, convolution_mode="same")
    x = images(rng, 2, t)
    cropped = net.feed_forward(x)[2]
    hw = (11 - crop[0] - crop[1], 12 - crop[2] - crop[3])
    assert cropped.shape == ((2, 2) + hw if fmt == "NCHW" else (2,) + hw + (2,))
    check_gradients(net, DataSet(x, one_hot(2, 2)), max_per_param=160)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mb", [1, 3])
def test_cnn_with_upsampling(fmt, mb, rng):
    t = InputType.convolutional(5, 5, 1, fmt)
    net = build([ConvolutionLayer(kernel_size=2, n_out=3, activation="tanh"),
                 Upsampling2D(2), OutputLayer(n_out=4, activation="softmax")], t)
    assert net.layers[2].n_in == 8 * 8 * 3
    check_gradients(net, DataSet(images(rng, mb, t), one_hot(mb, 4)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["MAX", "AVG", "SUM", "PNORM"])
def test_cnn_global_pooling(fmt, kind, rng):
    t = InputType.convolutional(5, 4, 2, fmt)
    net = build([ConvolutionLayer(kernel_size=2, n_out=3, activation="tanh"),
                 GlobalPoolingLayer(pooling_type=kind, pnorm=2),
                 OutputLayer(n_out=2, activation="softmax")], t)
    check_gradients(net, DataSet(images(rng, 3, t), one_hot(3, 2)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("lock", [False, True])
def test_batch_normalization_on_images(fmt, lock, rng):
    # BNGradientCheckTest's CNN case: the training score uses the batch's statistics
    t = InputType.convolutional(4, 4, 2, fmt)
    net = build([ConvolutionLayer(kernel_size=2, n_out=3, activation="identity"),
                 BatchNormalization(lock_gamma_beta=lock),
                 ActivationOrDense(),
                 OutputLayer(n_out=2, activation="softmax")], t)
    check_gradients(net, DataSet(images(rng, 4, t), one_hot(4, 2)))


def ActivationOrDense():
    return DenseLayer(n_out=3, activation="tanh")


def test_batch_normalization_of_flat_pixels_gets_images(rng):
    t = InputType.convolutional_flat(3, 3, 2)
    net = build([BatchNormalization(), OutputLayer(n_out=2, activation="softmax")], t)
    assert net.layers[0].statistics_axes() == (0, 2, 3) and net.layers[0].n_in == 2
    check_gradients(net, DataSet(rng.standard_normal((5, 18)), one_hot(5, 2)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("act, loss", [("softmax", "mcxent"), ("sigmoid", "xent"),
                                       ("tanh", "mse"), ("identity", "l2")])
def test_cnn_loss_layer(fmt, act, loss, rng):
    t = InputType.convolutional(4, 5, 2, fmt)
    net = build([ConvolutionLayer(kernel_size=3, n_out=3, activation="tanh"),
                 CnnLossLayer(activation=act, loss_function=loss)], t,
                convolution_mode="same")
    labels = rng.random((3,) + InputType.convolutional(4, 5, 3, fmt).shape())
    if act == "softmax":
        axis = 1 if fmt == "NCHW" else 3
        labels = (labels == labels.max(axis=axis, keepdims=True)).astype(np.float64)
    elif act == "sigmoid":
        labels = (labels > 0.5).astype(np.float64)
    check_gradients(net, DataSet(images(rng, 3, t), labels))


def test_cnn_loss_layer_scores_like_dl4j(rng):
    # the sum over every pixel's loss, divided by the minibatch (not by the pixels)
    t = InputType.convolutional(3, 4, 2)
    net = build([CnnLossLayer(activation="softmax", loss_function="mcxent")], t)
    x = images(rng, 5, t)
    labels = np.zeros_like(x)
    labels[:, 0] = 1.0
    p = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
    expected = -np.log(p[:, 0]).sum() / 5
    assert net.score(DataSet(x, labels)) == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(net.output(x).numpy(), p, rtol=1e-12)
    per = net.score_examples(DataSet(x, labels)).numpy()
    np.testing.assert_allclose(per, -np.log(p[:, 0]).sum(axis=(1, 2)), rtol=1e-12)
    with pytest.raises(ValueError, match=r"^labels: expected shape \(5, 2, 3, 4\) \(the "
                                         r"input's\) for layers\[0\] \(CnnLossLayer\), got "
                                         r"\(5, 2, 4, 3\)$"):
        net.score(DataSet(x, labels.transpose(0, 1, 3, 2).copy()))


# -- the rest of the family (CNNGradientCheckTest's testDeconvolution2D, testSeparableConv2D,
# testDepthwiseConv2D; CNN1DGradientCheckTest's 1-D cases) ------------------------------------

from ndws.nn import (Convolution1DLayer, Deconvolution2D, DepthwiseConvolution2D,  # noqa: E402
                     SeparableConvolution2D, Subsampling1DLayer)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode, stride, k, d, act", [
    ("same", 1, 2, 1, "tanh"), ("truncate", 2, 3, 1, "sigmoid"), ("same", 2, 3, 2, "relu"),
    ("truncate", 1, 2, 2, "identity")])
def test_deconvolution_2d(fmt, mode, stride, k, d, act, rng):
    t = InputType.convolutional(4, 3, 2, fmt)
    # (a bias off 0: where no input lands the output is the bias alone, and relu's kink at
    # 0 would fail any central difference)
    net = build([Deconvolution2D(kernel_size=k, stride=stride, dilation=d, n_out=2,
                                 activation=act, convolution_mode=mode, bias_init=0.05),
                 OutputLayer(n_out=2, activation="softmax")], t)
    check_gradients(net, DataSet(images(rng, 2, t), one_hot(2, 2)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode, stride, k, d, m", [
    ("same", 1, 2, 1, 1), ("truncate", 2, 3, 1, 2), ("same", 2, 2, 2, 3),
    ("truncate", 1, 3, 2, 1)])
def test_depthwise_conv_2d(fmt, mode, stride, k, d, m, rng):
    t = InputType.convolutional(7, 6, 2, fmt)
    net = build([DepthwiseConvolution2D(kernel_size=k, stride=stride, dilation=d,
                                        depth_multiplier=m, activation="tanh",
                                        convolution_mode=mode),
                 OutputLayer(n_out=2, activation="softmax")], t)
    check_gradients(net, DataSet(images(rng, 2, t), one_hot(2, 2)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode, stride, k, d, m", [
    ("same", 1, 2, 1, 1), ("truncate", 2, 3, 1, 2), ("same", 2, 2, 2, 2)])
def test_separable_conv_2d(fmt, mode, stride, k, d, m, rng):
    t = InputType.convolutional(7, 6, 2, fmt)
    net = build([SeparableConvolution2D(kernel_size=k, stride=stride, dilation=d,
                                        depth_multiplier=m, n_out=3, activation="tanh",
                                        convolution_mode=mode, l2=0.3, l1=0.2),
                 OutputLayer(n_out=2, activation="softmax")], t)
    check_gradients(net, DataSet(images(rng, 2, t), one_hot(2, 2)))


@pytest.mark.parametrize("fmt", ["NCW", "NWC"])
@pytest.mark.parametrize("mode, stride, k, d, kind", [
    ("truncate", 1, 2, 1, "MAX"), ("same", 2, 3, 1, "AVG"), ("causal", 1, 3, 2, "MAX"),
    ("causal", 2, 2, 1, "PNORM"), ("truncate", 1, 2, 2, "SUM")])
def test_convolution_1d_with_subsampling_1d(fmt, mode, stride, k, d, kind, rng):
    t = InputType.recurrent(2, 12, fmt)
    net = build([Convolution1DLayer(kernel_size=k, stride=stride, dilation=d, n_out=3,
                                    activation="tanh", convolution_mode=mode),
                 Subsampling1DLayer(pooling_type=kind, kernel_size=2, stride=1, pnorm=2),
                 GlobalPoolingLayer(pooling_type="avg"),
                 OutputLayer(n_out=2, activation="softmax")], t)
    check_gradients(net, DataSet(images(rng, 3, t), one_hot(3, 2)))
