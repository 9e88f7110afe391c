"""ndws.nn.preprocessors: DL4J's flattening orders against NumPy, views of C-contiguous arrays
and copies in the manager's ACTIVATIONS / ACTIVATION_GRAD workspace otherwise, the output
types, DL4J's messages, the JSON round trip and custom preprocessors."""
import numpy as np
import pytest

import ndws
from ndws.nn import (ArrayType, CnnToFeedForwardPreProcessor, FeedForwardToCnnPreProcessor,
                     InputPreProcessor, InputType, LayerWorkspaceMgr)

CONF = ndws.WorkspaceConfiguration()


def manager():
    return (LayerWorkspaceMgr.builder()
            .with_(ArrayType.ACTIVATIONS, "PP_ACT", CONF)
            .with_(ArrayType.ACTIVATION_GRAD, "PP_GRAD", CONF)
            .default_no_workspace().build())


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cnn_to_ff_flattens_in_dl4j_order(fmt, dtype, rng):
    images = rng.standard_normal((3, 2, 4, 5)).astype(dtype)          # (n, c, h, w)
    data = images if fmt == "NCHW" else images.transpose(0, 2, 3, 1).copy()
    p = CnnToFeedForwardPreProcessor(4, 5, 2, data_format=fmt)
    rows = p.pre_process(ndws.asarray(data), LayerWorkspaceMgr.no_workspaces())
    # (c, h, w) for NCHW; (h, w, c) for NHWC, Keras' order
    expected = data.reshape(3, 40)
    np.testing.assert_array_equal(rows.numpy(), expected)
    if fmt == "NHWC":
        np.testing.assert_array_equal(rows.numpy()[0, :2], images[0, :, 0, 0])
    back = p.backprop(rows, LayerWorkspaceMgr.no_workspaces())
    np.testing.assert_array_equal(back.numpy(), data)
    assert p.output_type(InputType.convolutional(4, 5, 2, fmt)) == InputType.feed_forward(40)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_ff_to_cnn_is_the_inverse(fmt, rng):
    rows = rng.standard_normal((3, 40)).astype(np.float32)
    p = FeedForwardToCnnPreProcessor(4, 5, 2, data_format=fmt)
    mgr = LayerWorkspaceMgr.no_workspaces()
    images = p.pre_process(ndws.asarray(rows), mgr)
    shape = (3, 2, 4, 5) if fmt == "NCHW" else (3, 4, 5, 2)
    np.testing.assert_array_equal(images.numpy(), rows.reshape(shape))
    np.testing.assert_array_equal(p.backprop(images, mgr).numpy(), rows)
    assert p.output_type(InputType.convolutional_flat(4, 5, 2)) == \
        InputType.convolutional(4, 5, 2, fmt)
    assert p.output_type(InputType.feed_forward(40)) == InputType.convolutional(4, 5, 2, fmt)
    # images of the configured shape pass through, and so does their epsilon
    x4 = ndws.asarray(rows.reshape(shape))
    assert p.pre_process(x4, mgr) is x4
    assert p.backprop(x4, mgr) is x4


def test_views_when_contiguous_copies_in_the_right_workspace_otherwise(rng):
    mgr = manager()
    p = CnnToFeedForwardPreProcessor(3, 4, 2)
    data = rng.standard_normal((2, 2, 3, 8)).astype(np.float32)
    with ndws.workspace("PP_IN") as ws_in, mgr.notify_scope_entered(ArrayType.ACTIVATIONS), \
            mgr.notify_scope_entered(ArrayType.ACTIVATION_GRAD):
        with ws_in.borrow():
            x = ndws.asarray(data[..., :4])                     # contiguous copy in PP_IN
        rows = p.pre_process(x, mgr)
        assert rows.workspace_id == "PP_IN"                     # a view: nothing copied
        np.testing.assert_array_equal(np.asarray(rows), data[..., :4].reshape(2, 24))
        strided = ndws.asarray(data)[..., ::2]                 # not C-contiguous
        rows = p.pre_process(strided, mgr)
        assert rows.workspace_id == "PP_ACT"
        np.testing.assert_array_equal(rows.numpy(), data[..., ::2].reshape(2, 24))
        eps = ndws.asarray(np.arange(96, dtype=np.float32).reshape(2, 48))[:, ::2]
        back = p.backprop(eps, mgr)
        assert back.workspace_id == "PP_GRAD" and back.shape == (2, 2, 3, 4)
        np.testing.assert_array_equal(back.numpy(),
                                      np.arange(96, dtype=np.float32).reshape(2, 48)[:, ::2]
                                      .reshape(2, 2, 3, 4))


@pytest.mark.parametrize("p, x_shape, msg", [
    (CnnToFeedForwardPreProcessor(4, 5, 2), (3, 2, 5, 4),
     r"^CnnToFeedForwardPreProcessor: invalid input, does not match configuration: expected "
     r"\[minibatch, numChannels=2, inputHeight=4, inputWidth=5\] but got input array of shape "
     r"\(3, 2, 5, 4\)$"),
    (CnnToFeedForwardPreProcessor(4, 5, 2, "NHWC"), (3, 2, 4, 5),
     r"expected \[minibatch, inputHeight=4, inputWidth=5, numChannels=2\]"),
    (CnnToFeedForwardPreProcessor(4, 5, 2), (3, 2, 4), r"got input array of shape \(3, 2, 4\)"),
    (FeedForwardToCnnPreProcessor(4, 5, 2), (3, 41),
     r"^FeedForwardToCnnPreProcessor: invalid input: expected 40 columns \(height 4 x width 5 "
     r"x channels 2\) or images \[minibatch, numChannels=2, inputHeight=4, inputWidth=5\], got "
     r"shape \(3, 41\)$"),
    (FeedForwardToCnnPreProcessor(4, 5, 2), (3, 2, 5, 4), r"got shape \(3, 2, 5, 4\)"),
])
def test_wrong_shapes_name_the_expected_one(p, x_shape, msg):
    with pytest.raises(ValueError, match=msg):
        p.pre_process(ndws.zeros(x_shape), LayerWorkspaceMgr.no_workspaces())


@pytest.mark.parametrize("p, t, msg", [
    (CnnToFeedForwardPreProcessor(4, 5, 2), InputType.feed_forward(40),
     r"expected convolutional input \(InputType.convolutional\), got "
     r"InputType.feed_forward\(40\)"),
    (CnnToFeedForwardPreProcessor(4, 5, 2), InputType.convolutional(4, 5, 3),
     r"configured for InputType.convolutional\(4, 5, 2\), got InputType.convolutional\(4, 5, "
     r"3\)"),
    (FeedForwardToCnnPreProcessor(4, 5, 2), InputType.feed_forward(39),
     r"expected rows of 40 values .*got InputType.feed_forward\(39\)"),
    (FeedForwardToCnnPreProcessor(4, 5, 2), InputType.recurrent(40), r"expected rows of 40"),
    (FeedForwardToCnnPreProcessor(4, 5, 2), InputType.convolutional(4, 5, 2, "NHWC"),
     r"configured for InputType.convolutional\(4, 5, 2\), got .*NHWC"),
])
def test_output_type_refuses_other_types(p, t, msg):
    with pytest.raises(ValueError, match=msg):
        p.output_type(t)


@pytest.mark.parametrize("make, exc, msg", [
    (lambda: CnnToFeedForwardPreProcessor(0, 5, 2), ValueError,
     r"^CnnToFeedForwardPreProcessor: height must be an int in \[1, 2\*\*31\], got 0$"),
    (lambda: FeedForwardToCnnPreProcessor(4, 5.0, 2), TypeError, r"width must be an int"),
    (lambda: FeedForwardToCnnPreProcessor(4, 5, 2, "HWC"), ValueError,
     r"^FeedForwardToCnnPreProcessor.data_format: unknown CNN2DFormat 'HWC'"),
    (lambda: InputPreProcessor.from_dict({"@class": "Nope"}), ValueError,
     r"unknown class 'Nope'"),
    (lambda: InputPreProcessor.from_dict({"@class": "CnnToFeedForwardPreProcessor",
                                          "height": 1, "width": 1, "channels": 1, "bad": 1}),
     ValueError, r"unknown fields \['bad'\]"),
    (lambda: InputPreProcessor.from_dict("x"), ValueError, r"expected a dict"),
])
def test_hostile_construction(make, exc, msg):
    with pytest.raises(exc, match=msg):
        make()


class Doubling(InputPreProcessor):
    """A custom preprocessor written against the manager (DL4J's DupPreProcessor, doubled)."""
    fields = ("factor",)

    def __init__(self, factor=2.0):
        self.factor = factor

    def pre_process(self, x, mgr):
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        return ndws.multiply(x, self.factor, out=y)

    def backprop(self, epsilon, mgr):
        e = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, epsilon.shape,
                                     dtype=epsilon.dtype)
        return ndws.multiply(epsilon, self.factor, out=e)


def test_json_round_trip_and_custom_classes():
    for p in (CnnToFeedForwardPreProcessor(4, 5, 2, "NHWC"), FeedForwardToCnnPreProcessor(1, 2, 3),
              Doubling(3.0)):
        again = InputPreProcessor.from_dict(p.to_dict())
        assert again == p and again is not p and repr(again) == repr(p)
    assert Doubling(3.0).to_dict()["@class"].endswith("test_nn_preprocessors.Doubling")
    assert CnnToFeedForwardPreProcessor(4, 5, 2).to_dict() == {
        "@class": "CnnToFeedForwardPreProcessor", "height": 4, "width": 5, "channels": 2,
        "data_format": "NCHW"}
    assert repr(FeedForwardToCnnPreProcessor(1, 2, 3)) == \
        "FeedForwardToCnnPreProcessor(1, 2, 3, NCHW)"
    assert Doubling().output_type(InputType.feed_forward(3)) == InputType.feed_forward(3)
