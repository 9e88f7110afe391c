"""ndws.nn.layers.convolution and pooling: forward against an independent NumPy reference for
the legal combinations of mode, stride, dilation, padding, layout and dtype; DL4J's parameter
layout and fan-in/fan-out; the geometry checked with DL4J's messages when the configuration is
built; the input checked when it comes."""
import itertools

import numpy as np
import pytest

import ndws
from cnn_reference import activation, conv2d, out_and_pads, pool2d
from ndws.nn import (ConvolutionLayer, ConvolutionMode, DenseLayer, GlobalPoolingLayer,
                     InputType, Layer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer,
                     PoolingType, SubsamplingLayer, WeightInit)

TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


def single(layer, t, dtype=np.float32, **kw):
    net = MultiLayerNetwork(MultiLayerConfiguration([layer], input_type=t, seed=5,
                                                    dtype=np.dtype(dtype).name, **kw))
    net.init()
    return net


def geometry_cases():
    for mode, stride, dilation, padding in itertools.product(
            ["TRUNCATE", "STRICT", "SAME"], [1, 2], [1, 2], [0, 1]):
        if mode == "SAME" and padding:
            continue                                # refused (tested below)
        ok = all((size - ((k - 1) * dilation + 1) + 2 * padding) % stride == 0
                 for size, k in ((7, 3), (8, 2)))
        if mode == "STRICT" and not ok:
            continue                                # refused (tested below)
        yield mode, stride, dilation, padding


@pytest.mark.parametrize("mode, stride, dilation, padding", list(geometry_cases()))
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_convolution_forward_matches_numpy(mode, stride, dilation, padding, fmt, dtype, rng):
    layer = ConvolutionLayer(kernel_size=(3, 2), stride=stride, dilation=dilation,
                             padding=padding, convolution_mode=mode, n_out=4,
                             activation="tanh", bias_init=0.25)
    net = single(layer, InputType.convolutional(7, 8, 3, fmt), dtype)
    conv = net.layers[0]
    oh, pads_h = out_and_pads(mode, 7, 3, stride, padding, dilation)
    ow, pads_w = out_and_pads(mode, 8, 2, stride, padding, dilation)
    assert conv.geometry() == (oh, ow, pads_h + pads_w)
    x = rng.standard_normal((2, 3, 7, 8) if fmt == "NCHW" else (2, 7, 8, 3)).astype(dtype)
    W, b = conv.params["W"].numpy(), conv.params["b"].numpy()
    expected = np.tanh(conv2d(x, W, b, (stride, stride), pads_h + pads_w,
                              (dilation, dilation), fmt))
    for train in (False, True):                        # the fused and the unfused forward
        got = net.feed_forward(x, train=train)[-1]
        assert got.shape == expected.shape and got.dtype == dtype
        np.testing.assert_allclose(got.numpy(), expected, **TOL[dtype])


@pytest.mark.parametrize("act", ["identity", "relu", "sigmoid"])
def test_convolution_activations_and_no_bias(act, rng):
    net = single(ConvolutionLayer(kernel_size=3, n_out=2, has_bias=False, activation=act),
                 InputType.convolutional(5, 5, 2), np.float64)
    conv = net.layers[0]
    assert list(conv.params) == ["W"] and net.num_params() == 2 * 2 * 9
    x = rng.standard_normal((3, 2, 5, 5))
    expected = activation(act, conv2d(x, conv.params["W"].numpy(), None, (1, 1), (0,) * 4,
                                      (1, 1)))
    np.testing.assert_allclose(net.output(x).numpy(), expected, rtol=1e-12, atol=1e-13)


def test_dl4j_parameter_layout_and_fans():
    conf = MultiLayerConfiguration(
        [ConvolutionLayer(kernel_size=(3, 2), stride=(2, 1), n_out=4, weight_init="xavier",
                          bias_init=0.5)],
        input_type=InputType.convolutional(9, 9, 3), seed=7)
    net = MultiLayerNetwork(conf)
    net.init()
    conv = net.layers[0]
    assert list(conv.param_shapes().items()) == [("b", (4,)), ("W", (4, 3, 3, 2))]
    flat = net.params().numpy()
    assert (flat[:4] == 0.5).all()                      # the bias first, as DL4J lays it out
    np.testing.assert_array_equal(flat[4:].reshape(4, 3, 3, 2), conv.params["W"].numpy())
    # XAVIER with DL4J's fans: fan_in = n_in*kh*kw, fan_out = n_out*kh*kw / (sh*sw)
    std = np.sqrt(2.0 / (3 * 3 * 2 + 4 * 3 * 2 / 2))
    drawn = np.random.default_rng(7).standard_normal((4, 3, 3, 2)) * std
    np.testing.assert_allclose(conv.params["W"].numpy(), drawn.astype(np.float32), rtol=1e-6)
    relu = ConvolutionLayer(kernel_size=3, n_out=2, weight_init=WeightInit.RELU)
    net = single(relu, InputType.convolutional(5, 5, 4))
    np.testing.assert_allclose(
        net.layers[0].params["W"].numpy(),
        (np.random.default_rng(5).standard_normal((2, 4, 3, 3)) * np.sqrt(2 / 36)).astype(
            np.float32), rtol=1e-6)


def test_builder_defaults_are_dl4j_s():
    conv = ConvolutionLayer(n_out=3)
    assert (conv.kernel_size, conv.stride, conv.padding, conv.dilation, conv.has_bias) == \
        ((5, 5), (1, 1), (0, 0), (1, 1), True)
    pool = SubsamplingLayer()
    assert (pool.pooling_type, pool.kernel_size, pool.stride, pool.padding) == \
        (PoolingType.MAX, (1, 1), (2, 2), (0, 0))
    assert not pool.avg_pool_include_pad_in_divisor
    conf = MultiLayerConfiguration([ConvolutionLayer(kernel_size=2, n_out=3), pool,
                                    ConvolutionLayer(kernel_size=1, n_out=2)],
                                   input_type=InputType.convolutional(6, 6, 1), seed=0)
    assert [l.convolution_mode for l in conf.resolved_layers] == [ConvolutionMode.TRUNCATE] * 3
    assert conf.resolved_layers[0].activation.value == "sigmoid"     # the network's default
    assert conf.resolved_layers[1].activation is None                 # pooling has none
    same = MultiLayerConfiguration([ConvolutionLayer(kernel_size=2, n_out=3)],
                                   input_type=InputType.convolutional(6, 6, 1), seed=0,
                                   convolution_mode="same")
    assert same.resolved_layers[0].convolution_mode is ConvolutionMode.SAME
    assert same.resolved_layers[0].geometry()[:2] == (6, 6)


def pooling_cases():
    for kind, mode, stride, dilation, padding in itertools.product(
            ["MAX", "AVG", "SUM", "PNORM"], ["TRUNCATE", "SAME"], [1, 2], [1, 2], [0, 1]):
        if mode == "SAME" and padding:
            continue
        yield kind, mode, stride, dilation, padding


@pytest.mark.parametrize("kind, mode, stride, dilation, padding", list(pooling_cases()))
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_subsampling_forward_matches_numpy(kind, mode, stride, dilation, padding, fmt, rng):
    layer = SubsamplingLayer(pooling_type=kind, kernel_size=(3, 2), stride=stride,
                             dilation=dilation, padding=padding, convolution_mode=mode, pnorm=3)
    net = single(layer, InputType.convolutional(7, 8, 2, fmt), np.float64)
    oh, pads_h = out_and_pads(mode, 7, 3, stride, padding, dilation)
    ow, pads_w = out_and_pads(mode, 8, 2, stride, padding, dilation)
    x = rng.standard_normal((2, 2, 7, 8) if fmt == "NCHW" else (2, 7, 8, 2))
    expected = pool2d(x, kind, (3, 2), (stride, stride), pads_h + pads_w,
                      (dilation, dilation), fmt, p=3)
    for train in (False, True):
        got = net.feed_forward(x, train=train)[-1].numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_average_pooling_divisor_switch(include, dtype, rng):
    layer = SubsamplingLayer(pooling_type="avg", kernel_size=3, stride=1, padding=1,
                             avg_pool_include_pad_in_divisor=include)
    net = single(layer, InputType.convolutional(4, 4, 1), dtype)
    x = np.ones((1, 1, 4, 4), dtype)
    got = net.output(x).numpy()
    expected = pool2d(x, "AVG", (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), include_pad=include)
    np.testing.assert_allclose(got, expected, **TOL[dtype])
    assert (got[0, 0, 0, 0] == pytest.approx(4 / 9)) if include else (got == 1).all()


@pytest.mark.parametrize("kind", ["MAX", "AVG", "SUM", "PNORM"])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("collapse", [True, False])
def test_global_pooling_over_images(kind, fmt, collapse, rng):
    layer = GlobalPoolingLayer(pooling_type=kind, pnorm=3, collapse_dimensions=collapse)
    net = single(layer, InputType.convolutional(3, 4, 5, fmt), np.float64)
    x = rng.standard_normal((2, 5, 3, 4) if fmt == "NCHW" else (2, 3, 4, 5))
    axes = (2, 3) if fmt == "NCHW" else (1, 2)
    expected = {"MAX": lambda: x.max(axes), "AVG": lambda: x.mean(axes),
                "SUM": lambda: x.sum(axes),
                "PNORM": lambda: (np.abs(x) ** 3).sum(axes) ** (1 / 3)}[kind]()
    if not collapse:
        expected = expected.reshape((2, 5, 1, 1) if fmt == "NCHW" else (2, 1, 1, 5))
    got = net.output(x)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)
    assert net.layers[0].output_type(None) == (
        InputType.feed_forward(5) if collapse else InputType.convolutional(1, 1, 5, fmt))


@pytest.mark.parametrize("fmt", ["NCW", "NWC"])
def test_global_pooling_over_time(fmt, rng):
    net = single(GlobalPoolingLayer(pooling_type="avg"), InputType.recurrent(3, 6, fmt),
                 np.float64)
    x = rng.standard_normal((4, 3, 6) if fmt == "NCW" else (4, 6, 3))
    np.testing.assert_allclose(net.output(x).numpy(), x.mean(2 if fmt == "NCW" else 1),
                               rtol=1e-12)


# -- configuration errors: DL4J's messages, when the configuration is built --------------------

def conf_with(*layers, t=InputType.convolutional(3, 3, 1), **kw):
    return MultiLayerConfiguration(list(layers), input_type=t, seed=0, **kw)


@pytest.mark.parametrize("make, exc, msg", [
    (lambda: conf_with(ConvolutionLayer(n_out=2)), ValueError,
     r"^layers\[0\]: Invalid configuration for layer \(idx=0, name=\(not named\), "
     r"type=ConvolutionLayer\) for height dimension: kernel size 5 larger than input height 3 "
     r"plus padding 2\*0\. Require 0 < kH <= inHeight \+ 2\*padH; got \(kH=5, inHeight=3, "
     r"padH=0\)\nInput type = InputType.convolutional\(3, 3, 1\), kernel = \[5, 5\], "
     r"strides = \[1, 1\], padding = \[0, 0\], layer size \(output channels\) = 2, "
     r"convolution mode = TRUNCATE$"),
    (lambda: conf_with(ConvolutionLayer(kernel_size=(1, 4), n_out=2, name="c1"),
                       t=InputType.convolutional(5, 3, 1)), ValueError,
     r"\(idx=0, name=c1, type=ConvolutionLayer\) for width dimension: kernel size 4 larger "
     r"than input width 3 plus padding"),
    (lambda: conf_with(ConvolutionLayer(kernel_size=2, n_out=2),
                       SubsamplingLayer(kernel_size=3, dilation=2)), ValueError,
     r"^layers\[1\]: .*type=SubsamplingLayer\) for height dimension: effective kernel size 5 "
     r"\(kernel 3, dilation 2\) larger than input height 2 plus padding 2\*0"),
    (lambda: conf_with(ConvolutionLayer(kernel_size=2, stride=2, n_out=2,
                                        convolution_mode="strict"),
                       t=InputType.convolutional(5, 4, 1)), ValueError,
     r"^layers\[0\]: .* for height dimension: \nCombination of kernel size, stride and padding "
     r"are not valid for given input height, using ConvolutionMode.Strict\n"),
    (lambda: conf_with(ConvolutionLayer(kernel_size=2, n_out=2, padding=1),
                       convolution_mode="same"), ValueError,
     r"^layers\[0\].padding: Padding cannot be used when using the `same' convolution mode"),
    (lambda: ConvolutionLayer(n_out=2, padding=1, convolution_mode="Same"), ValueError,
     r"^ConvolutionLayer.padding: Padding cannot be used when using the `same' convolution"),
    (lambda: ConvolutionLayer(n_out=2, convolution_mode="causal"), ValueError,
     r"^ConvolutionLayer.convolution_mode: Causal convolution mode can only be used with 1D "
     r"convolutional neural network layers$"),
    (lambda: conf_with(SubsamplingLayer(kernel_size=1), convolution_mode="causal"), ValueError,
     r"^layers\[0\].convolution_mode: Causal convolution mode can only be used with 1D"),
    (lambda: ConvolutionLayer(n_out=2, stride=0), ValueError,
     r"^ConvolutionLayer.stride: expected ints in \[1, 2\*\*31\], got 0$"),
    (lambda: ConvolutionLayer(n_out=2, stride=(1, -1)), ValueError,
     r"^ConvolutionLayer.stride: expected ints in \[1, 2\*\*31\]"),
    (lambda: ConvolutionLayer(n_out=2, padding=-1), ValueError,
     r"^ConvolutionLayer.padding: expected ints in \[0, 2\*\*31\], got -1$"),
    (lambda: ConvolutionLayer(n_out=2, kernel_size=(2, 2, 2)), TypeError,
     r"^ConvolutionLayer.kernel_size: expected an int or a pair of ints"),
    (lambda: ConvolutionLayer(n_out=2, kernel_size=2.5), TypeError, r"kernel_size: expected"),
    (lambda: ConvolutionLayer(n_out=2, dilation=0), ValueError, r"dilation: expected ints"),
    (lambda: ConvolutionLayer(n_out=2, has_bias="yes"), TypeError,
     r"^ConvolutionLayer.has_bias: expected a bool"),
    (lambda: ConvolutionLayer(n_out=2, data_format="CHW"), ValueError,
     r"^ConvolutionLayer.data_format: unknown CNN2DFormat 'CHW'"),
    (lambda: SubsamplingLayer(pooling_type="median"), ValueError,
     r"^SubsamplingLayer.pooling_type: unknown PoolingType 'median'"),
    (lambda: SubsamplingLayer(pooling_type="pnorm"), ValueError,
     r"^SubsamplingLayer.pnorm: PNORM pooling needs pnorm"),
    (lambda: SubsamplingLayer(activation="relu"), TypeError, r"unexpected keyword argument"),
    (lambda: conf_with(ConvolutionLayer(kernel_size=1, n_in=3, n_out=2)), ValueError,
     r"^layers\[0\].n_in: 3 does not match the channels 1 of the network's input "
     r"\(InputType.convolutional\(3, 3, 1\)\)$"),
    (lambda: conf_with(ConvolutionLayer(kernel_size=1, n_out=2),
                       ConvolutionLayer(kernel_size=1, n_in=5, n_out=2)), ValueError,
     r"^layers\[1\].n_in: 5 does not match the channels 2 of the output of layers\[0\]"),
    (lambda: conf_with(ConvolutionLayer(kernel_size=1, n_out=2, data_format="NHWC")),
     ValueError, r"^layers\[0\].data_format: NHWC does not match its input "
                 r"InputType.convolutional\(3, 3, 1\) \(NCHW\)$"),
    (lambda: conf_with(ConvolutionLayer(kernel_size=1, n_out=2), t=InputType.feed_forward(9)),
     ValueError, r"^layers\[0\]: ConvolutionLayer takes images \(InputType.convolutional\), "
                 r"got InputType.feed_forward\(9\); set input_type=InputType.convolutional_flat"),
    (lambda: MultiLayerConfiguration([ConvolutionLayer(kernel_size=1, n_in=1, n_out=2)]),
     ValueError, r"^layers\[0\]: ConvolutionLayer needs the height and width of its input: "
                 r"give the configuration input_type="),
    (lambda: conf_with(DenseLayer(n_out=3), ConvolutionLayer(kernel_size=1, n_out=2)),
     ValueError, r"^layers\[1\]: ConvolutionLayer takes images"),
    (lambda: conf_with(ConvolutionLayer(kernel_size=1, n_out=2, activation="softmax")),
     ValueError, r"^layers\[0\].activation: softmax is not an element-wise activation"),
    (lambda: conf_with(GlobalPoolingLayer(pooling_dimensions=(2,))), ValueError,
     r"^layers\[0\].pooling_dimensions: pooling over \(2,\) of InputType.convolutional\(3, 3, "
     r"1\) is not supported \(only all positions, \(2, 3\)\)$"),
    (lambda: conf_with(ConvolutionLayer(kernel_size=1, n_out=1 << 30),
                       t=InputType.convolutional(1 << 12, 1 << 12, 1)), ValueError,
     r"^layers\[0\]: ConvolutionLayer would need 18,014,398,509,481,984 values per example "
     r"for one of its arrays, more than 2\*\*48 bytes$"),
])
def test_configuration_errors(make, exc, msg):
    with pytest.raises(exc, match=msg):
        make()


def test_strict_is_checked_per_dimension():
    with pytest.raises(ValueError, match=r"for width dimension: \nCombination .* input width"):
        conf_with(ConvolutionLayer(kernel_size=2, stride=2, n_out=2, convolution_mode="strict"),
                  t=InputType.convolutional(4, 5, 1))


def test_json_round_trip_of_image_layers():
    conf = MultiLayerConfiguration(
        [ConvolutionLayer(kernel_size=(3, 2), stride=2, padding=(1, 0), n_out=4, has_bias=False,
                          convolution_mode="strict", dilation=1, name="c"),
         SubsamplingLayer(pooling_type="pnorm", pnorm=3, kernel_size=2, stride=1),
         GlobalPoolingLayer(pooling_type="sum", collapse_dimensions=False),
         OutputLayer(n_out=2, activation="softmax")],
        input_type=InputType.convolutional(9, 8, 2, "NHWC"), seed=3)
    text = conf.to_json()
    again = MultiLayerConfiguration.from_json(text)
    assert again == conf and again.to_json() == text
    assert again.resolved_layers[0].data_format.name == "NHWC"


# -- the input, checked when it comes ----------------------------------------------------------

class Reshaper(Layer):
    """A custom layer that declares images (3, 3, 3) and hands on what it is told to."""
    keeps_width = True
    fields = Layer.fields + ("shape",)

    def __init__(self, shape=None, **common):
        super().__init__(**common)
        self.shape = shape

    def output_type(self, input_type):
        return InputType.convolutional(3, 3, 3)

    def activate(self, x, training, mgr):
        return mgr.create(ndws.nn.ArrayType.ACTIVATIONS, (x.shape[0],) + tuple(self.shape),
                          dtype=x.dtype)


@pytest.mark.parametrize("shape, msg", [
    ((2, 3), r"^Got rank 3 array as input to ConvolutionLayer \(layer name = \(not named\), "
             r"layer index = 1\) with shape \(4, 2, 3\)\. Expected rank 4 array with shape "
             r"\[minibatchSize, layerInputDepth, inputHeight, inputWidth\]\.$"),
    ((6,), r"Got rank 2 array .* \(Wrong input type \(see InputType.convolutional_flat\(\)\) or "
           r"wrong data type\?\)$"),
    ((2, 3, 4), r"^Cannot do forward pass in ConvolutionLayer \(layer name = \(not named\), layer "
                r"index = 1\): input array channels does not match CNN layer configuration "
                r"\(data format = NCHW, data input channels = 2, \(4, 2, 3, 4\); expected input "
                r"channels = 3\)$"),
    ((4, 4, 3), r"expected input channels = 3\) \(the other layout's channel axis has 3: NHWC "
                r"data into an NCHW layer, or the reverse\?\)$"),
    ((3, 4, 3), r"input of shape \(4, 3, 4, 3\), expected \(n_samples, channels=3, height=3, "
                r"width=3\)"),
])
def test_wrong_input_is_named(shape, msg):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [Reshaper(shape, n_in=1), ConvolutionLayer(kernel_size=2, n_out=2)], seed=0))
    net.init()
    # the network names the custom layer that broke its declaration...
    with pytest.raises(ValueError, match=r"^layers\[0\] \(Reshaper\).activate returned shape "
                                         r"\(4, " + r", ".join(map(str, shape)) + r"\), expected "
                                         r"\(4, 3, 3, 3\)"):
        net.output(np.zeros((4, 1), np.float32))
    # ...and a layer called by hand checks what it gets, with DL4J's messages
    with pytest.raises(ValueError, match=msg):
        net.layers[1].activate(ndws.zeros((4,) + shape), False,
                               ndws.nn.LayerWorkspaceMgr.no_workspaces())


# -- the rest of the family ---------------------------------------------------------------------

from cnn_reference import conv_transpose2d, depthwise_conv2d  # noqa: E402
from ndws.nn import (Convolution1DLayer, Cropping2D, Deconvolution2D,  # noqa: E402
                     DepthwiseConvolution2D, SeparableConvolution2D, Subsampling1DLayer,
                     Upsampling2D, ZeroPaddingLayer)


@pytest.mark.parametrize("mode, stride, padding, dilation", [
    ("TRUNCATE", 1, 0, 1), ("TRUNCATE", 2, 1, 1), ("TRUNCATE", 2, 0, 2), ("SAME", 2, 0, 1),
    ("SAME", 1, 0, 1), ("STRICT", 3, 1, 1)])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_deconvolution_forward(mode, stride, padding, dilation, fmt, dtype, rng):
    layer = Deconvolution2D(kernel_size=(3, 2), stride=stride, padding=padding,
                            dilation=dilation, convolution_mode=mode, n_out=3,
                            activation="sigmoid", bias_init=0.1)
    net = single(layer, InputType.convolutional(4, 5, 2, fmt), dtype)
    d = net.layers[0]
    assert d.param_shapes() == {"b": (3,), "W": (2, 3, 3, 2)}
    out_h = stride * 4 if mode == "SAME" else stride * 3 + 2 * dilation + 1 - 2 * padding
    out_w = stride * 5 if mode == "SAME" else stride * 4 + dilation + 1 - 2 * padding
    g = d.geometry()
    assert (g.out_h, g.out_w) == (out_h, out_w)
    x = rng.standard_normal((2, 2, 4, 5) if fmt == "NCHW" else (2, 4, 5, 2)).astype(dtype)
    expected = 1 / (1 + np.exp(-conv_transpose2d(x, d.params["W"].numpy(),
                                                  d.params["b"].numpy(), (stride, stride),
                                                  g.padding, (dilation, dilation), fmt)))
    for train in (False, True):
        np.testing.assert_allclose(net.feed_forward(x, train=train)[-1].numpy(), expected,
                                   **TOL[dtype])


@pytest.mark.parametrize("mode, stride, dilation", [("TRUNCATE", 1, 1), ("SAME", 2, 1),
                                                    ("TRUNCATE", 2, 2), ("SAME", 1, 2)])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("multiplier", [1, 2])
def test_depthwise_and_separable_forward(mode, stride, dilation, fmt, multiplier, rng):
    t = InputType.convolutional(6, 7, 3, fmt)
    kw = dict(kernel_size=(3, 2), stride=stride, dilation=dilation, convolution_mode=mode,
              depth_multiplier=multiplier, activation="tanh", bias_init=0.2)
    x = rng.standard_normal((2,) + t.shape())
    dnet = single(DepthwiseConvolution2D(**kw), t, np.float64)
    dw = dnet.layers[0]
    assert dw.n_out == 3 * multiplier
    assert dw.param_shapes() == {"b": (3 * multiplier,), "W": (3, 2, 3, multiplier)}
    pads = dw.geometry().padding
    w_cm = dw.params["W"].numpy().transpose(2, 3, 0, 1)           # (c, m, kh, kw)
    expected = np.tanh(depthwise_conv2d(x, w_cm, dw.params["b"].numpy(), (stride, stride),
                                        pads, (dilation, dilation), fmt))
    np.testing.assert_allclose(dnet.output(x).numpy(), expected, rtol=1e-12, atol=1e-12)
    snet = single(SeparableConvolution2D(n_out=4, **kw), t, np.float64)
    sep = snet.layers[0]
    assert list(sep.param_shapes().items()) == [("b", (4,)), ("W", (multiplier, 3, 3, 2)),
                                                ("pW", (4, 3 * multiplier, 1, 1))]
    depth = depthwise_conv2d(x, sep.params["W"].numpy().transpose(1, 0, 2, 3), None,
                             (stride, stride), pads, (dilation, dilation), fmt)
    expected = np.tanh(conv2d(depth, sep.params["pW"].numpy(), sep.params["b"].numpy(),
                              (1, 1), (0,) * 4, (1, 1), fmt))
    for train in (False, True):
        np.testing.assert_allclose(snet.feed_forward(x, train=train)[-1].numpy(), expected,
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode, stride, padding, dilation", [
    ("TRUNCATE", 1, 0, 1), ("TRUNCATE", 2, 1, 2), ("SAME", 2, 0, 1), ("CAUSAL", 1, 0, 2),
    ("CAUSAL", 2, 0, 1)])
@pytest.mark.parametrize("fmt", ["NCW", "NWC"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_convolution_1d_forward(mode, stride, padding, dilation, fmt, dtype, rng):
    layer = Convolution1DLayer(kernel_size=3, stride=stride, padding=padding,
                               dilation=dilation, convolution_mode=mode, n_out=4,
                               activation="relu")
    net = single(layer, InputType.recurrent(2, 9, fmt), dtype)
    c1 = net.layers[0]
    assert c1.param_shapes() == {"b": (4,), "W": (4, 2, 3, 1)}
    x = rng.standard_normal((3, 2, 9) if fmt == "NCW" else (3, 9, 2)).astype(dtype)
    xc = x if fmt == "NCW" else x.transpose(0, 2, 1)
    ek = 2 * dilation + 1
    if mode == "CAUSAL":
        steps = -(-9 // stride)
        pads = ((steps - 1) * stride + ek - 9, 0)        # all before the series
    else:
        steps, pads = out_and_pads(mode, 9, 3, stride, padding, dilation)
    expected = np.maximum(conv2d(xc[..., None], c1.params["W"].numpy(), c1.params["b"].numpy(),
                                 (stride, 1), pads + (0, 0), (dilation, 1)), 0)[..., 0]
    assert expected.shape == (3, 4, steps)
    if fmt == "NWC":
        expected = expected.transpose(0, 2, 1)
    assert net.conf.resolved_layers[0].output_type(None) == InputType.recurrent(4, steps, fmt)
    for train in (False, True):
        np.testing.assert_allclose(net.feed_forward(x, train=train)[-1].numpy(), expected,
                                   **TOL[dtype])


def test_causal_convolution_sees_no_future(rng):
    net = single(Convolution1DLayer(kernel_size=3, convolution_mode="causal", n_out=2,
                                    activation="identity"), InputType.recurrent(1, 8),
                 np.float64)
    x = rng.standard_normal((1, 1, 8))
    later = x.copy()
    later[..., 5:] += 10.0
    a, b = net.output(x).numpy(), net.output(later).numpy()
    np.testing.assert_array_equal(a[..., :5], b[..., :5])
    assert not np.allclose(a[..., 5:], b[..., 5:])


@pytest.mark.parametrize("kind", ["MAX", "AVG", "PNORM"])
@pytest.mark.parametrize("fmt", ["NCW", "NWC"])
def test_subsampling_1d_forward_and_variable_length(kind, fmt, rng):
    layer = Subsampling1DLayer(pooling_type=kind, kernel_size=2, stride=2, pnorm=2)
    for length in (10, None):
        net = single(layer, InputType.recurrent(3, length, fmt), np.float64)
        for steps in ((10,) if length else (10, 7)):
            x = rng.standard_normal((2, 3, steps) if fmt == "NCW" else (2, steps, 3))
            xc = x if fmt == "NCW" else x.transpose(0, 2, 1)
            expected = pool2d(xc[..., None], kind, (2, 1), (2, 1), (0,) * 4, (1, 1))[..., 0]
            if fmt == "NWC":
                expected = expected.transpose(0, 2, 1)
            np.testing.assert_allclose(net.output(x).numpy(), expected, rtol=1e-12)
    assert net.memory_report(2).complete is False         # a varying length: not known


@pytest.mark.parametrize("make, msg", [
    (lambda: single(Convolution1DLayer(kernel_size=3, n_out=2), InputType.convolutional(4, 4, 1)),
     r"^layers\[0\]: Convolution1DLayer takes time series \(InputType.recurrent\), got "
     r"InputType.convolutional\(4, 4, 1\)$"),
    (lambda: Convolution1DLayer(kernel_size=(3, 1), n_out=2),
     r"^Convolution1DLayer.kernel_size: expected an int, got \(3, 1\)$"),
    (lambda: Convolution1DLayer(kernel_size=3, n_out=2, padding=1, convolution_mode="causal"),
     r"^Convolution1DLayer.padding: Padding cannot be used when using the `causal' "
     r"convolution mode"),
    (lambda: single(Convolution1DLayer(kernel_size=5, n_out=2), InputType.recurrent(2, 3)),
     r"for length dimension: kernel size 5 larger than input length 3 plus padding"),
    (lambda: single(DepthwiseConvolution2D(kernel_size=1, n_out=5, depth_multiplier=2),
                    InputType.convolutional(3, 3, 2)),
     r"^layers\[0\].n_out: a DepthwiseConvolution2D has n_in \* depth_multiplier = 4 outputs, "
     r"got 5$"),
    (lambda: DepthwiseConvolution2D(depth_multiplier=0),
     r"^DepthwiseConvolution2D.depth_multiplier: expected an int in \[1, 2\*\*20\], got 0$"),
    (lambda: single(Deconvolution2D(kernel_size=1, stride=3, n_out=2, convolution_mode="same"),
                    InputType.convolutional(3, 3, 2)),
     r"type=Deconvolution2D\) for height dimension: Same mode needs an effective kernel at "
     r"least as large as the stride \(1 < 3\)"),
    (lambda: single(Deconvolution2D(kernel_size=1, padding=2, n_out=2),
                    InputType.convolutional(1, 3, 2)),
     r"type=Deconvolution2D\) for height dimension: padding \(2, 2\) leaves no output"),
])
def test_family_configuration_errors(make, msg):
    with pytest.raises(ValueError, match=msg):
        make()


def test_resizing_errors_before_any_allocation():
    t = InputType.convolutional(4, 4, 2)
    with pytest.raises(ValueError, match=r"^layers\[0\]: Upsampling2D of InputType.convolutional"
                                         r"\(4, 4, 2\) by \(1073741824, 1073741824\) is larger "
                                         r"than 2\*\*31 rows or columns$"):
        single(Upsampling2D(1 << 30), t)
    with pytest.raises(ValueError, match=r"^layers\[0\]: Upsampling2D would need "
                                         r"140,737,488,355,328 values per example"):
        single(Upsampling2D(1 << 21), t)
    with pytest.raises(ValueError, match=r"^layers\[0\]: ZeroPaddingLayer would need"):
        single(ZeroPaddingLayer(1 << 30), t)
    with pytest.raises(ValueError, match=r"^layers\[0\]: Cropping2D leaves no output from "
                                         r"InputType.convolutional\(4, 4, 2\) \(height 0, "
                                         r"width 2\)$"):
        single(Cropping2D((2, 2, 1, 1)), t)
    with pytest.raises(ValueError, match=r"^layers\[0\]: Upsampling2D takes images"):
        single(Upsampling2D(2), InputType.feed_forward(3))
    with pytest.raises(TypeError, match=r"^ZeroPaddingLayer.padding: Invalid padding values: "
                                        r"expected 1, 2 \(height, width\) or 4 ints"):
        ZeroPaddingLayer((1, 2, 3))
    with pytest.raises(ValueError, match=r"^Cropping2D.cropping: expected ints in \[0, 2\*\*31\]"):
        Cropping2D(-1)


def test_1d_input_of_the_wrong_length(rng):
    net = single(Convolution1DLayer(kernel_size=2, n_out=2), InputType.recurrent(3, 6))
    with pytest.raises(ValueError, match=r"expected a 3-d array \(n_samples, size=3, time=6\)"):
        net.output(np.zeros((2, 3, 5), np.float32))


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_padding_cropping_upsampling_forward(fmt, dtype, rng):
    t = InputType.convolutional(4, 5, 3, fmt)
    x = rng.standard_normal((2,) + t.shape()).astype(dtype)
    xc = x if fmt == "NCHW" else x.transpose(0, 3, 1, 2)
    back = (lambda a: a) if fmt == "NCHW" else (lambda a: a.transpose(0, 2, 3, 1))
    cases = [(ZeroPaddingLayer((1, 2, 0, 3)),
              np.pad(xc, ((0, 0), (0, 0), (1, 2), (0, 3)))),
             (Cropping2D((1, 0, 2, 1)), xc[:, :, 1:, 2:4]),
             (Upsampling2D((2, 3)), xc.repeat(2, axis=2).repeat(3, axis=3))]
    for layer, expected in cases:
        net = single(layer, t, dtype)
        got = net.output(x)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), back(expected))


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_layers_against_pytorch(fmt, rng):
    # where PyTorch is installed: a small stack against torch.nn.functional, in float64
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    t = InputType.convolutional(9, 8, 3, fmt)
    net = single(ConvolutionLayer(kernel_size=3, stride=2, padding=1, dilation=1, n_out=4,
                                  activation="relu"), t, np.float64)
    conv = net.layers[0]
    deconv_net = single(Deconvolution2D(kernel_size=3, stride=2, padding=1, n_out=2,
                                        activation="identity"),
                        InputType.convolutional(5, 4, 4, fmt), np.float64)
    deconv = deconv_net.layers[0]
    pool_net = single(SubsamplingLayer(pooling_type="avg", kernel_size=2, stride=2, padding=1),
                      InputType.convolutional(5, 4, 4, fmt), np.float64)
    x = rng.standard_normal((2,) + t.shape())
    xt = torch.from_numpy(x if fmt == "NCHW" else x.transpose(0, 3, 1, 2).copy())
    y = tf.relu(tf.conv2d(xt, torch.from_numpy(conv.params["W"].numpy()),
                          torch.from_numpy(conv.params["b"].numpy()), stride=2, padding=1))
    to_fmt = (lambda a: a) if fmt == "NCHW" else (lambda a: a.transpose(0, 2, 3, 1))
    ours = net.output(x).numpy()
    np.testing.assert_allclose(ours, to_fmt(y.numpy()), rtol=1e-12, atol=1e-12)
    z = tf.conv_transpose2d(y, torch.from_numpy(deconv.params["W"].numpy()),
                            torch.from_numpy(deconv.params["b"].numpy()), stride=2, padding=1)
    np.testing.assert_allclose(deconv_net.output(ours).numpy(), to_fmt(z.numpy()), rtol=1e-12,
                               atol=1e-12)
    p = tf.avg_pool2d(y, 2, stride=2, padding=1, count_include_pad=False)
    np.testing.assert_allclose(pool_net.output(ours).numpy(), to_fmt(p.numpy()), rtol=1e-12)
