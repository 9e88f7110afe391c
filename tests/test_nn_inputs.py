"""ndws.nn.inputs: InputType's factories, shapes, equality and JSON; the enums' parsing in any
case; hostile arguments."""
import json

import pytest

from ndws.nn import CNN2DFormat, ConvolutionMode, InputType, PoolingType, RNNFormat


def test_factories_shapes_and_repr():
    ff = InputType.feed_forward(10)
    assert (ff.kind, ff.size, ff.shape(), ff.shape(3)) == ("FF", 10, (10,), (3, 10))
    cnn = InputType.convolutional(28, 24, 3)
    assert cnn.shape(2) == (2, 3, 28, 24) and cnn.data_format is CNN2DFormat.NCHW
    nhwc = InputType.convolutional(28, 24, 3, data_format="nhwc")
    assert nhwc.shape() == (28, 24, 3) and nhwc != cnn
    flat = InputType.convolutional_flat(28, 28, 1)
    assert flat.shape(5) == (5, 784) and flat.elements_per_example() == 784
    rnn = InputType.recurrent(7)
    assert rnn.shape() == (7, -1) and rnn.elements_per_example() == 7
    assert InputType.recurrent(7, 5, data_format="NWC").shape(2) == (2, 5, 7)
    for t in (ff, cnn, nhwc, flat, rnn, InputType.recurrent(7, 5, "NWC")):
        assert eval(repr(t), {"InputType": InputType}) == t
    assert repr(nhwc) == "InputType.convolutional(28, 24, 3, data_format='NHWC')"
    assert cnn.describe_shape() == "(n_samples, channels=3, height=28, width=24)"
    assert nhwc.describe_shape() == "(n_samples, height=28, width=24, channels=3)"


def test_equality_hash_and_immutability():
    a, b = InputType.convolutional(4, 5, 2), InputType.convolutional(4, 5, 2, CNN2DFormat.NCHW)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != InputType.convolutional_flat(4, 5, 2) and a != "CNN"
    with pytest.raises(AttributeError, match="immutable"):
        a.height = 3


@pytest.mark.parametrize("t", [InputType.feed_forward(3), InputType.convolutional(2, 3, 4),
                               InputType.convolutional(2, 3, 4, "NHWC"),
                               InputType.convolutional_flat(2, 3, 4), InputType.recurrent(3),
                               InputType.recurrent(3, 9, "NWC")])
def test_json_round_trip(t):
    text = json.dumps(t.to_dict())
    assert InputType.from_dict(json.loads(text)) == t


@pytest.mark.parametrize("make, exc, msg", [
    (lambda: InputType.feed_forward(0), ValueError,
     r"^InputType.feed_forward: size must be an int in \[1, 2\*\*31\], got 0$"),
    (lambda: InputType.feed_forward(2.0), TypeError,
     r"^InputType.feed_forward: size must be an int >= 1, got float"),
    (lambda: InputType.convolutional(28, 28, True), TypeError, r"channels must be an int"),
    (lambda: InputType.convolutional(-1, 28, 1), ValueError, r"height must be an int in"),
    (lambda: InputType.convolutional(1 << 40, 28, 1), ValueError, r"height must be an int in"),
    (lambda: InputType.convolutional(2, 2, 1, data_format="NCWH"), ValueError,
     r"^InputType.convolutional: data_format: unknown CNN2DFormat 'NCWH'; expected one of "
     r"NCHW, NHWC"),
    (lambda: InputType.recurrent(3, 0), ValueError, r"time_series_length must be an int in"),
    (lambda: InputType.recurrent(3, data_format="NCHW"), ValueError, r"unknown RNNFormat"),
    (lambda: InputType.from_dict({"kind": "CNN3D"}), ValueError, r"^input_type: expected a dict"),
    (lambda: InputType.from_dict([1]), ValueError, r"^input_type: expected a dict"),
    (lambda: InputType.from_dict({"kind": "FF", "size": 2, "height": 3}), ValueError,
     r"unknown fields \['height'\] for kind FF"),
    (lambda: InputType.from_dict({"kind": "CNN", "height": 2}), ValueError,
     r"^input_type: .*missing"),
    (lambda: InputType.from_dict({"kind": "FF", "size": "2"}), ValueError,
     r"size must be an int >= 1, got str"),
])
def test_hostile_arguments(make, exc, msg):
    with pytest.raises(exc, match=msg):
        make()


def test_enums_parse_names_in_any_case():
    assert ConvolutionMode.parse("same", "m") is ConvolutionMode.SAME
    assert ConvolutionMode.parse("Truncate", "m") is ConvolutionMode.TRUNCATE
    assert ConvolutionMode.parse(ConvolutionMode.CAUSAL, "m") is ConvolutionMode.CAUSAL
    assert [m.name for m in ConvolutionMode] == ["STRICT", "TRUNCATE", "SAME", "CAUSAL"]
    assert PoolingType.parse("pnorm", "p") is PoolingType.PNORM
    assert [m.name for m in PoolingType] == ["MAX", "AVG", "SUM", "PNORM"]
    assert CNN2DFormat.parse("nhwc", "f") is CNN2DFormat.NHWC
    assert RNNFormat.parse("nwc", "f") is RNNFormat.NWC
    with pytest.raises(ValueError, match=r"^layer.mode: unknown ConvolutionMode 'valid'; "
                                         r"expected one of STRICT, TRUNCATE, SAME, CAUSAL"):
        ConvolutionMode.parse("valid", "layer.mode")
    with pytest.raises(ValueError, match="unknown PoolingType 3"):
        PoolingType.parse(3, "p")
